/*
 * test_plan_sign.c: the keyed plan signature (compile/digest.c). The
 * HMAC-SHA256 wrapper against the published vectors of RFC 4231 (test
 * cases 1 to 4, 6 and 7; case 5 is a truncated output), then a framed
 * plan signed with one key: it verifies with that key only, is refused
 * without a key, with another key, or edited and re-digested; an unsigned
 * plan is refused when a key is given; the loader's body stops before the
 * signature line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"

typedef struct Vector {
    const char *key;         /* hex */
    const char *data;        /* hex, or text when it starts with '=' */
    const char *mac;
} Vector;

/* RFC 4231, section 4. */
static const Vector VECTORS[] = {
    {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "=Hi There",
     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
    {"4a656665", "=what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
    {"0102030405060708090a0b0c0d0e0f10111213141516171819",
     "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
     "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
    {"*131", "=Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    {"*131",
     "=This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
     "hashed before being used by the HMAC algorithm.",
     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
};

/* Hex to bytes; "*N": N bytes of 0xaa (cases 6 and 7). */
static size_t unhex(const char *h, uint8_t *out)
{
    if (h[0] == '*') {
        size_t n = (size_t)atoi(h + 1);
        memset(out, 0xaa, n);
        return n;
    }
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void rfc4231(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof VECTORS / sizeof VECTORS[0]; k++) {
        uint8_t key[200], data[200];
        size_t kl = unhex(VECTORS[k].key, key), dl;
        if (VECTORS[k].data[0] == '=') {
            dl = strlen(VECTORS[k].data + 1);
            memcpy(data, VECTORS[k].data + 1, dl);
        } else {
            dl = unhex(VECTORS[k].data, data);
        }
        char mac[65];
        compile_hmac_sha256_hex(key, kl, data, dl, mac);
        assert_string_equal(mac, VECTORS[k].mac);
    }
}

static const char BODY[] = "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n// TesselEnd\n";

static IrStatus check(const char *text, const char *key, IrDiag *d)
{
    size_t body = 0;
    IrStatus st = compile_plan_check_frame("p.plan", text, strlen(text), &body, d);
    if (st == IR_OK)
        st = compile_plan_check_signature("p.plan", text, strlen(text), key, key ? strlen(key) : 0, d);
    return st;
}

static void signed_plan(void **state)
{
    (void)state;
    char *s = compile_plan_frame_signed(BODY, "k1", 2);
    assert_non_null(s);
    assert_non_null(strstr(s, "// TesselSignature hmac-sha256="));
    IrDiag d = {0};
    assert_int_equal(check(s, "k1", &d), IR_OK);
    /* The loader's body ends before the signature line. */
    size_t body = 0;
    assert_int_equal(compile_plan_check_frame("p.plan", s, strlen(s), &body, &d), IR_OK);
    assert_int_equal(body, strlen("// TesselPlanFile format=tessel-plan version=1\n") + strlen(BODY));
    /* The right digest and no key, or another key: refused. */
    assert_int_equal(check(s, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "signed with a key"));
    ir_diag_clear(&d);
    assert_int_equal(check(s, "k2", &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "signature does not match"));
    ir_diag_clear(&d);
    /* Edited, its digest made again (as anyone can): the signature fails. */
    char *body_edit = strdup(s + strlen("// TesselPlanFile format=tessel-plan version=1\n"));
    char *digest = strstr(body_edit, "// TesselDigest");
    *digest = 0;
    char *p = strstr(body_edit, "f32[2]");
    p[4] = '3';
    char *again = compile_plan_frame(body_edit);
    assert_int_equal(check(again, "k1", &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "signature does not match"));
    ir_diag_clear(&d);
    ts_free(again);
    free(body_edit);
    /* An unsigned plan with a key: refused; without: fine. */
    char *u = compile_plan_frame(BODY);
    assert_int_equal(check(u, "k1", &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "not signed"));
    ir_diag_clear(&d);
    assert_int_equal(check(u, NULL, &d), IR_OK);
    ts_free(u);
    ts_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rfc4231),
        cmocka_unit_test(signed_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
