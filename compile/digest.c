/*
 * digest.c: SHA-256 (from nettle, Debian's libnettle: a well-kept
 * implementation, not one of ours) as lowercase hex, and the framing that
 * makes a plan file impossible to mistake: a header line at its first byte
 * naming the format and version, and a digest line at its end holding the
 * SHA-256 of every byte before that line (docs/plan.md):
 *
 *   // TesselPlanFile format=tessel-plan version=1
 *   HloModule ...
 *   ...
 *   // TesselEnd
 *   // TesselDigest sha256=5f2c...e9 (64 hex digits)
 *
 * A plan is checked before anything else is parsed: a text that starts
 * with the header, or ends with a digest line, is a plan, and must have
 * both, with the right digest. Anything else is a model, whatever its
 * comments say.
 *
 * The digest catches damage and mistakes, not intent: anyone can edit a
 * plan and compute its SHA-256 again. A plan compiled with a key
 * (--sign-key FILE) also carries, right before its digest line,
 *
 *   // TesselSignature hmac-sha256=9a1f...07 (64 hex digits)
 *
 * the HMAC-SHA256 (RFC 2104, nettle's) under that key of every byte
 * before the signature line: only a holder of the key can make it. A
 * loader given a key refuses a plan without a signature or with a wrong
 * one; a loader given none refuses a signed plan (it cannot check it).
 */
#include "compile.h"

#include <errno.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <string.h>
#include <unistd.h>

static const char HEADER[] = "// TesselPlanFile format=tessel-plan version=";
static const char DIGEST[] = "// TesselDigest sha256=";
static const char SIGNATURE[] = "// TesselSignature hmac-sha256=";
enum { FRAME_VERSION = 1, HEXLEN = 2 * SHA256_DIGEST_SIZE };

void compile_digest_hex(const uint8_t dg[32], char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
        out[2 * i] = hex[dg[i] >> 4];
        out[2 * i + 1] = hex[dg[i] & 15];
    }
    out[HEXLEN] = 0;
}

void compile_sha256_hex(const void *data, size_t len, char out[65])
{
    struct sha256_ctx c;
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    /* nettle takes size_t lengths; fed in pieces anyway so that the
     * interface's width never matters. */
    const uint8_t *p = data;
    while (len > 0) {
        size_t k = len < ((size_t)1 << 30) ? len : (size_t)1 << 30;
        sha256_update(&c, k, p);
        p += k;
        len -= k;
    }
    sha256_digest(&c, sizeof dg, dg);
    compile_digest_hex(dg, out);
}

void compile_hmac_sha256_hex(const void *key, size_t keylen, const void *data, size_t len, char out[65])
{
    struct hmac_sha256_ctx c;
    uint8_t dg[SHA256_DIGEST_SIZE];
    hmac_sha256_set_key(&c, keylen, key);
    const uint8_t *p = data;
    while (len > 0) {
        size_t k = len < ((size_t)1 << 30) ? len : (size_t)1 << 30;
        hmac_sha256_update(&c, k, p);
        p += k;
        len -= k;
    }
    hmac_sha256_digest(&c, sizeof dg, dg);
    compile_digest_hex(dg, out);
}

char *compile_plan_frame(const char *body)
{
    return compile_plan_frame_signed(body, NULL, 0);
}

char *compile_plan_frame_signed(const char *body, const void *key, size_t keylen)
{
    IrStrBuf b = {0};
    size_t n = strlen(body);
    ir_sb_printf(&b, "%s%d\n", HEADER, FRAME_VERSION);
    ir_sb_putn(&b, body, n);
    if (n > 0 && body[n - 1] != '\n')
        ir_sb_puts(&b, "\n");
    char *t = ir_sb_take(&b);
    if (!t)
        return NULL;
    char hex[HEXLEN + 1];
    if (key) {
        compile_hmac_sha256_hex(key, keylen, t, strlen(t), hex);
        IrStrBuf s = {0};
        ir_sb_put_owned(&s, t);
        ir_sb_printf(&s, "%s%s\n", SIGNATURE, hex);
        if (!(t = ir_sb_take(&s)))
            return NULL;
    }
    compile_sha256_hex(t, strlen(t), hex);
    IrStrBuf f = {0};
    ir_sb_put_owned(&f, t);
    ir_sb_printf(&f, "%s%s\n", DIGEST, hex);
    return ir_sb_take(&f);
}

/* Where the last line of text[0, len) starts (a final newline ends it). */
static size_t last_line(const char *text, size_t len)
{
    size_t e = len > 0 && text[len - 1] == '\n' ? len - 1 : len;
    while (e > 0 && text[e - 1] != '\n')
        e--;
    return e;
}

static bool starts_with(const char *text, size_t len, const char *s)
{
    size_t n = strlen(s);
    return len >= n && memcmp(text, s, n) == 0;
}

bool compile_sha256_fd(int fd, char out[65])
{
    struct sha256_ctx c;
    sha256_init(&c);
    uint8_t buf[1 << 16];
    for (off_t off = 0;;) {
        ssize_t r = pread(fd, buf, sizeof buf, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        sha256_update(&c, (size_t)r, buf);
        off += r;
    }
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_digest(&c, sizeof dg, dg);
    compile_digest_hex(dg, out);
    return true;
}

bool compile_is_plan_text(const char *text, size_t len)
{
    if (starts_with(text, len, HEADER))
        return true;
    size_t l = last_line(text, len);
    return starts_with(text + l, len - l, DIGEST);
}

/* Line number (1-based) of offset `off`. */
static int32_t line_of(const char *text, size_t off)
{
    int32_t n = 1;
    for (const char *p = text, *e = text + off; (p = memchr(p, '\n', (size_t)(e - p))); p++)
        n++;
    return n;
}

IrStatus compile_plan_check_frame(const char *path, const char *text, size_t len, size_t *body_len, IrDiag *d)
{
    *body_len = 0;
    /* Diagnostics quote no line: the text need not be NUL-terminated, and
     * the point is that nothing of it is trusted yet. */
    if (!starts_with(text, len, HEADER))
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){1, 1},
                        "not a valid plan file: it does not start with the header line '%s%d'%s", HEADER,
                        FRAME_VERSION, compile_is_plan_text(text, len) ? " (damaged? recompile the model)" : "");
    const char *v = text + strlen(HEADER);
    const char *nl = memchr(text, '\n', len);
    if (!nl || (size_t)(nl - v) != 1 || *v != '0' + FRAME_VERSION)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){1, (int32_t)strlen(HEADER) + 1},
                        "plan file format version '%.*s': this tessel reads version %d (recompile the model)",
                        nl && nl > v && nl - v < 16 ? (int)(nl - v) : 0, v, FRAME_VERSION);
    size_t l = last_line(text, len);
    int32_t line = line_of(text, l);
    if (!starts_with(text + l, len - l, DIGEST))
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){line, 1},
                        "the plan file does not end with its digest line (// TesselDigest sha256=...): "
                        "it is truncated or was edited; recompile the model");
    const char *h = text + l + strlen(DIGEST);
    size_t hl = len - (size_t)(h - text);
    if (hl > 0 && h[hl - 1] == '\n')
        hl--;
    char want[HEXLEN + 1];
    compile_sha256_hex(text, l, want);
    if (hl != HEXLEN || memcmp(h, want, HEXLEN) != 0)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){line, (int32_t)strlen(DIGEST) + 1},
                        "the plan file's digest does not match its contents (SHA-256 of everything before "
                        "this line): it was altered or damaged; recompile the model");
    /* A signature line is not part of the program either. */
    size_t s = last_line(text, l);
    *body_len = starts_with(text + s, l - s, SIGNATURE) ? s : l;
    return IR_OK;
}

IrStatus compile_plan_check_signature(const char *path, const char *text, size_t len, const void *key,
                                      size_t keylen, IrDiag *d)
{
    size_t l = last_line(text, len), s = last_line(text, l);
    bool signed_ = starts_with(text + s, l - s, SIGNATURE);
    int32_t line = line_of(text, s);
    if (!key && signed_)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){line, 1},
                        "the plan is signed with a key (// TesselSignature): give that key (--sign-key FILE) to "
                        "load it");
    if (!key)
        return IR_OK;
    if (!signed_)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){line_of(text, l), 1},
                        "the plan is not signed, and a key was given (--sign-key): only a plan signed with that "
                        "key loads (compile it with --sign-key FILE)");
    const char *h = text + s + strlen(SIGNATURE);
    size_t hl = l - (size_t)(h - text);
    if (hl > 0 && h[hl - 1] == '\n')
        hl--;
    char want[HEXLEN + 1];
    compile_hmac_sha256_hex(key, keylen, text, s, want);
    if (hl != HEXLEN || !memeql_sec(h, want, HEXLEN))
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){line, (int32_t)strlen(SIGNATURE) + 1},
                        "the plan's signature does not match (HMAC-SHA256 of everything before this line under "
                        "the key given): it was signed with another key, or edited after it was signed");
    return IR_OK;
}
