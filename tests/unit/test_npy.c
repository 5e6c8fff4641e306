/*
 * test_npy.c: the .npy reader and writer (runtime/npy.c): exact bytes of
 * written files (numpy's layout, worked out by hand), headers in every
 * accepted spelling and version, every rejected file with its message,
 * bf16 conversion and rounding, complex64/128, the types that travel as
 * another (s4/u2 as int8/uint8, f8/f4 as float32, with range errors), box
 * reads, atomic writes and failure injection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessel_test_npy_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(dp)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(dp);
    }
    rmdir(dir);
    return 0;
}

static const char *path_of(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static int count_files(void)
{
    int n = 0;
    DIR *dp = opendir(dir);
    struct dirent *e;
    while (dp && (e = readdir(dp)) != NULL)
        n += e->d_name[0] != '.';
    if (dp)
        closedir(dp);
    return n;
}

/* Write a file: preamble of version `major`, header `dict` padded with
 * spaces to `pad` total bytes (0: no padding) and '\n', then data. */
static void put_npy(const char *name, int major, const char *dict, const void *data,
                    size_t ndata)
{
    size_t pre = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    unsigned char p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    for (size_t i = 0; i < pre - 8; i++)
        p[8 + i] = (unsigned char)(hlen >> (8 * i));
    fwrite(p, 1, pre, f);
    fwrite(dict, 1, strlen(dict), f);
    fputc('\n', f);
    if (ndata)
        fwrite(data, 1, ndata, f);
    fclose(f);
}

static void put_raw(const char *name, const void *bytes, size_t n)
{
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static long read_all(const char *name, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path_of(name), "rb");
    if (!f)
        return -1;
    long n = (long)fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static IrShape mk(IrType t, int32_t rank, int64_t *dims)
{
    IrShape s = {0};
    s.type = t;
    s.rank = rank;
    s.dims = dims;
    return s;
}

static void test_write_exact_bytes(void **state)
{
    (void)state;
    int64_t dims[] = {2, 3};
    IrShape s = mk(IR_F32, 2, dims);
    float v[6] = {0, 1, 2, 3, 4, 5};
    IrDiag d = {0};
    assert_int_equal(rt_npy_write_file(path_of("a.npy"), &s, v, &d), IR_OK);
    unsigned char buf[512];
    /* 10 bytes preamble + 118 header = 128 (a multiple of 64); 24 data. */
    assert_int_equal(read_all("a.npy", buf, sizeof buf), 128 + 24);
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    assert_memory_equal(buf, pre, 10);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_memory_equal(buf + 10, dict, strlen(dict));
    for (size_t i = 10 + strlen(dict); i < 127; i++)
        assert_int_equal(buf[i], ' ');
    assert_int_equal(buf[127], '\n');
    assert_memory_equal(buf + 128, v, sizeof v);
    assert_int_equal(count_files(), 1); /* no temporary left behind */
    unlink(path_of("a.npy"));
}

static void test_write_scalar_and_rank1_text(void **state)
{
    (void)state;
    IrShape s = mk(IR_S64, 0, NULL);
    int64_t x = -5;
    assert_int_equal(rt_npy_write_file(path_of("s.npy"), &s, &x, NULL), IR_OK);
    unsigned char buf[256];
    assert_int_equal(read_all("s.npy", buf, sizeof buf), 128 + 8);
    assert_non_null(memmem(buf, 128, "'shape': (), }", 14));
    assert_non_null(memmem(buf, 128, "'descr': '<i8'", 14));
    int64_t dims[] = {5};
    IrShape r = mk(IR_PRED, 1, dims);
    uint8_t p[5] = {1, 0, 1, 1, 0};
    assert_int_equal(rt_npy_write_file(path_of("p.npy"), &r, p, NULL), IR_OK);
    assert_int_equal(read_all("p.npy", buf, sizeof buf), 128 + 5);
    assert_non_null(memmem(buf, 128, "'shape': (5,), }", 16));
    assert_non_null(memmem(buf, 128, "'descr': '|b1'", 14));
    /* and they read back */
    int64_t y = 0;
    assert_int_equal(rt_npy_read(path_of("s.npy"), &s, "parameter 0", &y, NULL), IR_OK);
    assert_int_equal(y, -5);
    uint8_t q[5] = {0};
    assert_int_equal(rt_npy_read(path_of("p.npy"), &r, "parameter 0", q, NULL), IR_OK);
    assert_memory_equal(p, q, 5);
    unlink(path_of("s.npy"));
    unlink(path_of("p.npy"));
}

static void test_roundtrip_all_types(void **state)
{
    (void)state;
    IrType types[] = {IR_PRED, IR_S8, IR_S16, IR_S32, IR_S64, IR_U8, IR_U16,
                      IR_U32, IR_U64, IR_F16, IR_F32, IR_F64, IR_BF16};
    int64_t dims[] = {3, 2};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        IrShape s = mk(types[i], 2, dims);
        uint8_t data[48], back[48];
        size_t n = 6 * ir_type_size(types[i]);
        for (size_t k = 0; k < n; k++)
            data[k] = (uint8_t)(types[i] == IR_PRED ? k & 1 : 17 * k + 3);
        if (types[i] == IR_BF16)
            for (size_t k = 0; k < n; k += 2)
                data[k + 1] = 0x3f; /* finite values: NaN payloads need not survive */
        assert_int_equal(rt_npy_write_file(path_of("t.npy"), &s, data, NULL), IR_OK);
        memset(back, 0xee, sizeof back);
        assert_int_equal(rt_npy_read(path_of("t.npy"), &s, "parameter 0", back, NULL), IR_OK);
        assert_memory_equal(data, back, n);
    }
    unlink(path_of("t.npy"));
}

static void test_header_spellings(void **state)
{
    (void)state;
    int64_t dims[] = {2};
    IrShape s = mk(IR_S32, 1, dims);
    int32_t data[2] = {7, -9};
    const char *dicts[] = {
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
        "{'shape':(2,),'fortran_order':False,'descr':'<i4'}",
        "{ \"descr\" : \"<i4\" , \"fortran_order\" : False , \"shape\" : ( 2 , ) }   ",
        "{'fortran_order': False, 'descr': '<i4', 'shape': (2,)}",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        for (int major = 1; major <= 3; major++) {
            put_npy("h.npy", major, dicts[i], data, sizeof data);
            int32_t out[2] = {0, 0};
            IrDiag d = {0};
            IrStatus st = rt_npy_read(path_of("h.npy"), &s, "parameter 0", out, &d);
            if (st != IR_OK)
                fail_msg("dict %zu v%d: %s", i, major, d.msg);
            assert_memory_equal(out, data, sizeof data);
        }
    }
    /* '<u1' and '|u1' both name uint8 */
    uint8_t b[2] = {200, 1};
    IrShape u = mk(IR_U8, 1, dims);
    put_npy("h.npy", 1, "{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }", b, 2);
    uint8_t ob[2];
    assert_int_equal(rt_npy_read(path_of("h.npy"), &u, NULL, ob, NULL), IR_OK);
    assert_memory_equal(ob, b, 2);
    unlink(path_of("h.npy"));
}

static void test_parse_header_in_memory(void **state)
{
    (void)state;
    char buf[128];
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 0, 7), }\n";
    size_t hl = strlen(dict);
    memcpy(buf, "\x93NUMPY\x02\x00", 8);
    buf[8] = (char)hl;
    buf[9] = buf[10] = buf[11] = 0;
    memcpy(buf + 12, dict, hl);
    RtNpyHeader h;
    IrDiag d = {0};
    assert_int_equal(rt_npy_parse_header((uint8_t *)buf, 12 + hl, "m.npy", &h, &d), IR_OK);
    assert_int_equal(h.major, 2);
    assert_int_equal(h.type, IR_F64);
    assert_int_equal(h.rank, 3);
    assert_int_equal(h.dims[2], 7);
    assert_int_equal(h.data_offset, 12 + hl);
    assert_int_equal(h.data_bytes, 0);
    assert_string_equal(h.descr, "<f8");
    /* one byte short: truncated header */
    assert_int_equal(rt_npy_parse_header((uint8_t *)buf, 12 + hl - 1, "m.npy", &h, &d),
                     IR_EINPUT);
    assert_non_null(strstr(d.msg, "truncated"));
    ir_diag_clear(&d);
}

/* Each bad file and the words its message must contain. */
static void expect_error(const char *name, const IrShape *s, IrStatus want, const char *words)
{
    uint8_t out[256];
    IrDiag d = {0};
    IrStatus st = rt_npy_read(path_of(name), s, "parameter 0", out, &d);
    if (st != want)
        fail_msg("%s: status %d, expected %d (%s)", name, st, want, d.msg ? d.msg : "");
    assert_non_null(d.msg);
    if (!strstr(d.msg, words))
        fail_msg("%s: message '%s' lacks '%s'", name, d.msg, words);
    assert_non_null(d.file);
    assert_string_equal(d.file, path_of(name));
    ir_diag_clear(&d);
}

static void test_mismatches(void **state)
{
    (void)state;
    int64_t dims[] = {4, 16};
    IrShape s = mk(IR_F32, 2, dims);
    double big[64] = {0};
    put_npy("x.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 16), }", big,
            sizeof big);
    expect_error("x.npy", &s, IR_EINPUT,
                 "dtype <f8 does not match parameter 0 f32[4,16] (expected <f4)");
    float f[64] = {0};
    put_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }", f, 128);
    expect_error("x.npy", &s, IR_EINPUT, "shape (4, 8) does not match parameter 0 f32[4,16]");
    put_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (64,), }", f,
            sizeof f);
    expect_error("x.npy", &s, IR_EINPUT, "shape (64,) does not match");
    put_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 16), }", f,
            sizeof f);
    expect_error("x.npy", &s, IR_EINPUT, "fortran_order is True");
    put_npy("x.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 16), }", f,
            sizeof f);
    expect_error("x.npy", &s, IR_EINPUT, "big endian");
    put_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 16), }", f,
            sizeof f - 1);
    expect_error("x.npy", &s, IR_EINPUT, "truncated: 256 bytes of data expected, 255 found");
    float g[65] = {0};
    put_npy("x.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 16), }", g,
            sizeof g);
    expect_error("x.npy", &s, IR_EINPUT, "4 bytes of trailing data");
    /* bf16 parameters expect <f4 on disk */
    IrShape b = mk(IR_BF16, 2, dims);
    put_npy("x.npy", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 16), }", f, 128);
    expect_error("x.npy", &b, IR_EINPUT, "dtype <f2 does not match parameter 0 bf16[4,16] "
                                         "(expected <f4)");
    unlink(path_of("x.npy"));
}

/* rt_npy_check: rt_npy_read's checks, no data read, nothing allocated
 * for the array: a header declaring 2^31 x 4 floats over 16 bytes is
 * truncated; the good file passes. */
static void test_check_only(void **state)
{
    (void)state;
    int64_t dims[] = {2147483648LL, 4};
    IrShape s = mk(IR_F32, 2, dims);
    float f[4] = {0};
    put_npy("c.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 4), }", f, sizeof f);
    IrDiag d = {0};
    assert_int_equal(rt_npy_check(path_of("c.npy"), &s, "parameter 0", &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "truncated: 34359738368 bytes of data expected, 16 found"));
    ir_diag_clear(&d);
    int64_t one[] = {4};
    IrShape t = mk(IR_F32, 1, one);
    put_npy("c.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f, sizeof f);
    assert_int_equal(rt_npy_check(path_of("c.npy"), &t, "parameter 0", &d), IR_OK);
    put_npy("c.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", f, sizeof f);
    assert_int_equal(rt_npy_check(path_of("c.npy"), &t, "parameter 0", &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "dtype <f8 does not match parameter 0 f32[4]"));
    ir_diag_clear(&d);
    unlink(path_of("c.npy"));
}

static void test_bad_headers(void **state)
{
    (void)state;
    int64_t dims[] = {5};
    IrShape s = mk(IR_S32, 1, dims);
    int32_t data[5] = {0};
    static const struct {
        const char *dict;
        IrStatus st;
        const char *words;
    } cases[] = {
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (5), }", IR_EINPUT, "not a tuple"},
        {"{'descr': '<i4', 'fortran_order': False, }", IR_EINPUT, "no 'shape'"},
        {"{'descr': '<i4', 'shape': (5,), }", IR_EINPUT, "no 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (5,), }", IR_EINPUT, "no 'descr'"},
        {"{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (5,)}", IR_EINPUT,
         "appears twice"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (5,), 'extra': 1}", IR_EINPUT,
         "unknown key 'extra'"},
        {"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (5,)}", IR_EUNSUPPORTED,
         "structured"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (5,)}", IR_EINPUT,
         "dtype <c8 does not match parameter 0 s32[5] (expected <i4)"},
        {"{'descr': '>c8', 'fortran_order': False, 'shape': (5,)}", IR_EINPUT, "big endian"},
        {"{'descr': '<U3', 'fortran_order': False, 'shape': (5,)}", IR_EUNSUPPORTED,
         "dtype <U3 is not supported"},
        {"{'descr': '|i4', 'fortran_order': False, 'shape': (5,)}", IR_EINPUT, "no byte order"},
        {"{'descr': '<i4', 'fortran_order': 0, 'shape': (5,)}", IR_EINPUT, "True or False"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (-5,)}", IR_EINPUT,
         "non-negative"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (5,)} x", IR_EINPUT,
         "text after the dict"},
        {"{'descr': '<i4' 'fortran_order': False, 'shape': (5,)}", IR_EINPUT,
         "expected ',' or '}'"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
         IR_EINPUT, "too large"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4),}",
         IR_EINPUT, "too large"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (5,)", IR_EINPUT,
         "expected ',' or '}'"},
        {"{'descr': 'abc', 'fortran_order': False, 'shape': (5,)}", IR_EUNSUPPORTED,
         "dtype 'abc'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put_npy("b.npy", 1, cases[i].dict, data, sizeof data);
        expect_error("b.npy", &s, cases[i].st, cases[i].words);
    }
    /* a control byte in the header */
    put_npy("b.npy", 1, "{'descr': '<i4',\x01 'fortran_order': False, 'shape': (5,)}", data,
            sizeof data);
    expect_error("b.npy", &s, IR_EINPUT, "byte 0x01");
    unlink(path_of("b.npy"));
}

static void test_bad_files(void **state)
{
    (void)state;
    int64_t dims[] = {2};
    IrShape s = mk(IR_S32, 1, dims);
    put_raw("m.npy", "\x93NUMPZ\x01\x00\x10\x00{}", 12);
    expect_error("m.npy", &s, IR_EINPUT, "not a .npy file");
    put_raw("m.npy", "", 0);
    expect_error("m.npy", &s, IR_EINPUT, "not a .npy file (empty)");
    put_raw("m.npy", "\x93NUM", 4);
    expect_error("m.npy", &s, IR_EINPUT, "truncated");
    put_raw("m.npy", "\x93NUMPY\x04\x00\x10\x00", 10);
    expect_error("m.npy", &s, IR_EINPUT, "version 4.0 is not supported");
    put_raw("m.npy", "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
    expect_error("m.npy", &s, IR_EINPUT, "truncated .npy header");
    /* a header claiming 16 MiB is refused before anything is allocated */
    put_raw("m.npy", "\x93NUMPY\x02\x00\x00\x00\x00\x01{", 13);
    expect_error("m.npy", &s, IR_EINPUT, "too large");
    put_raw("m.npy", "\x93NUMPY\x02\x00\x00", 9);
    expect_error("m.npy", &s, IR_EINPUT, "truncated");
    expect_error("does-not-exist.npy", &s, IR_EINPUT, "cannot open");
    unlink(path_of("m.npy"));
    /* a directory is not a file */
    mkdir(path_of("d.npy"), 0700);
    expect_error("d.npy", &s, IR_EINPUT, "not a regular file");
    rmdir(path_of("d.npy"));
    /* complex parameters want complex files */
    IrShape c = mk(IR_C64, 1, dims);
    int32_t data[4] = {0};
    put_npy("c.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,)}", data, 8);
    expect_error("c.npy", &c, IR_EINPUT, "dtype <i4 does not match parameter 0 c64[2] "
                                         "(expected <c8)");
    unlink(path_of("c.npy"));
}

/* bf16 from f32 rounds to nearest even: 0x3f808000 (1 + 2^-8) is a tie
 * between 0x3f80 and 0x3f81 and goes to 0x3f80; 0x3f818000 goes to 0x3f82;
 * 0x3f808001 is just above the tie: 0x3f81. Writing bf16 gives the exact
 * f32 (low half zero). */
static void test_bf16(void **state)
{
    (void)state;
    uint32_t f[4] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xc0490fdbu};
    put_npy("bf.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f,
            sizeof f);
    int64_t dims[] = {4};
    IrShape s = mk(IR_BF16, 1, dims);
    uint16_t out[4];
    assert_int_equal(rt_npy_read(path_of("bf.npy"), &s, NULL, out, NULL), IR_OK);
    assert_int_equal(out[0], 0x3f80);
    assert_int_equal(out[1], 0x3f82);
    assert_int_equal(out[2], 0x3f81);
    assert_int_equal(out[3], 0xc049); /* -pi: 0xc0490fdb rounds down */
    assert_int_equal(rt_npy_write_file(path_of("bf.npy"), &s, out, NULL), IR_OK);
    unsigned char buf[256];
    assert_int_equal(read_all("bf.npy", buf, sizeof buf), 128 + 16);
    assert_non_null(memmem(buf, 128, "'descr': '<f4'", 14));
    uint32_t back[4];
    memcpy(back, buf + 128, 16);
    assert_int_equal(back[0], 0x3f800000u);
    assert_int_equal(back[1], 0x3f820000u);
    assert_int_equal(back[2], 0x3f810000u);
    assert_int_equal(back[3], 0xc0490000u);
    unlink(path_of("bf.npy"));
}

static void test_pred_normalised(void **state)
{
    (void)state;
    uint8_t b[3] = {0, 2, 255};
    put_npy("p.npy", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", b, 3);
    int64_t dims[] = {3};
    IrShape s = mk(IR_PRED, 1, dims);
    uint8_t out[3];
    assert_int_equal(rt_npy_read(path_of("p.npy"), &s, NULL, out, NULL), IR_OK);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_int_equal(out[2], 1);
    unlink(path_of("p.npy"));
}

/* f32[4,6,8] holding its own flat index; each box's elements are the
 * flat indices a*48 + b*8 + c of its coordinates. */
static void check_box(const IrShape *s, const int64_t *lo, const int64_t *hi)
{
    float out[192];
    IrDiag d = {0};
    IrStatus st = rt_npy_read_box(path_of("box.npy"), s, "parameter 0", lo, hi, out, &d);
    if (st != IR_OK)
        fail_msg("%s", d.msg);
    int k = 0;
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
            for (int64_t c = lo[2]; c < hi[2]; c++)
                assert_true(out[k++] == (float)(a * 48 + b * 8 + c));
}

/* complex64/128 are numpy's <c8/<c16: (real, imaginary) pairs of f32/f64,
 * the same bytes as in memory. */
static void test_complex(void **state)
{
    (void)state;
    int64_t dims[] = {2};
    IrShape c = mk(IR_C64, 1, dims);
    float v[4] = {1.5f, -2.0f, 0.25f, 3.0f}; /* 1.5-2j, 0.25+3j */
    put_npy("c.npy", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", v, sizeof v);
    float back[4] = {0};
    assert_int_equal(rt_npy_read(path_of("c.npy"), &c, "parameter 0", back, NULL), IR_OK);
    assert_memory_equal(v, back, sizeof v);
    IrShape z = mk(IR_C128, 1, dims);
    double w[4] = {1e300, -0.5, 0.0, 7.0};
    assert_int_equal(rt_npy_write_file(path_of("z.npy"), &z, w, NULL), IR_OK);
    unsigned char buf[256];
    assert_int_equal(read_all("z.npy", buf, sizeof buf), 128 + 32);
    assert_non_null(memmem(buf, 128, "'descr': '<c16'", 15));
    assert_memory_equal(buf + 128, w, sizeof w);
    double wb[4] = {0};
    assert_int_equal(rt_npy_read(path_of("z.npy"), &z, "parameter 0", wb, NULL), IR_OK);
    assert_memory_equal(w, wb, sizeof w);
    /* a c64 file does not fill a c128 parameter */
    expect_error("c.npy", &z, IR_EINPUT, "dtype <c8 does not match parameter 0 c128[2] "
                                         "(expected <c16)");
    unlink(path_of("c.npy"));
    unlink(path_of("z.npy"));
}

/* s4/s2 travel as int8, u4/u2 as uint8; a value out of range is an error
 * naming the element. */
static void test_sub_byte_ints(void **state)
{
    (void)state;
    int64_t dims[] = {3};
    IrShape s4 = mk(IR_S4, 1, dims), u2 = mk(IR_U2, 1, dims);
    int8_t a[3] = {-8, 7, 3};
    put_npy("a.npy", 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", a, 3);
    int8_t back[3] = {0};
    assert_int_equal(rt_npy_read(path_of("a.npy"), &s4, "parameter 0", back, NULL), IR_OK);
    assert_memory_equal(a, back, 3);
    int8_t bad[3] = {0, 1, 8};
    put_npy("a.npy", 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", bad, 3);
    expect_error("a.npy", &s4, IR_EINPUT, "element 2 (8) is outside the range of s4");
    uint8_t u[3] = {3, 4, 0};
    put_npy("a.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u, 3);
    expect_error("a.npy", &u2, IR_EINPUT, "element 1 (4) is outside the range of u2");
    expect_error("a.npy", &s4, IR_EINPUT, "dtype |u1 does not match parameter 0 s4[3] "
                                          "(expected |i1)");
    /* written back as int8 */
    assert_int_equal(rt_npy_write_file(path_of("a.npy"), &s4, a, NULL), IR_OK);
    unsigned char buf[256];
    assert_int_equal(read_all("a.npy", buf, sizeof buf), 128 + 3);
    assert_non_null(memmem(buf, 128, "'descr': '|i1'", 14));
    assert_memory_equal(buf + 128, a, 3);
    unlink(path_of("a.npy"));
}

/* f8/f4 travel as float32. By hand: f8e4m3fn (bias 7, 3 mantissa bits):
 * 0.3 = 1.2 * 2^-2, mantissa 0.2 * 8 = 1.6 rounds to 2: 1.25 * 2^-2 =
 * 0.3125, code 0 0101 010 = 0x2a; 448 is its largest finite (0x7e), 500
 * is out of range, inf it lacks, NaN is 0x7f. f4e2m1fn holds 0 0.5 1 1.5
 * 2 3 4 6: 5 is a tie between 4 (mantissa 0, code 0b0110) and 6 (0b0111)
 * and goes to the even 4; 7 is beyond 6. */
static void test_lowp_floats(void **state)
{
    (void)state;
    int64_t dims[] = {3};
    IrShape e = mk(IR_F8E4M3FN, 1, dims), f4 = mk(IR_F4E2M1FN, 1, dims);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    float a[3] = {0.3f, 448.0f, NAN};
    put_npy("f.npy", 1, dict, a, sizeof a);
    uint8_t got[3] = {0};
    assert_int_equal(rt_npy_read(path_of("f.npy"), &e, "parameter 0", got, NULL), IR_OK);
    assert_int_equal(got[0], 0x2a);
    assert_int_equal(got[1], 0x7e);
    assert_int_equal(got[2] & 0x7f, 0x7f);
    float b[3] = {0.0f, -500.0f, 1.0f};
    put_npy("f.npy", 1, dict, b, sizeof b);
    expect_error("f.npy", &e, IR_EINPUT, "element 1 (-500) is outside the range of f8e4m3fn");
    float c[3] = {1.0f, 2.0f, INFINITY};
    put_npy("f.npy", 1, dict, c, sizeof c);
    expect_error("f.npy", &e, IR_EINPUT, "element 2 (inf)");
    float d4[3] = {5.0f, -0.5f, 6.0f};
    put_npy("f.npy", 1, dict, d4, sizeof d4);
    assert_int_equal(rt_npy_read(path_of("f.npy"), &f4, "parameter 0", got, NULL), IR_OK);
    assert_int_equal(got[0], 0x6);
    assert_int_equal(got[1], 0x9);  /* sign 0x8 | code of 0.5 (0b001) */
    assert_int_equal(got[2], 0x7);
    float e4[3] = {7.0f, 0, 0};
    put_npy("f.npy", 1, dict, e4, sizeof e4);
    expect_error("f.npy", &f4, IR_EINPUT, "element 0 (7) is outside the range of f4e2m1fn");
    /* written as the float32 of each code */
    uint8_t codes[3] = {0x2a, 0x7e, 0xaa};
    assert_int_equal(rt_npy_write_file(path_of("f.npy"), &e, codes, NULL), IR_OK);
    unsigned char buf[256];
    assert_int_equal(read_all("f.npy", buf, sizeof buf), 128 + 12);
    float w[3];
    memcpy(w, buf + 128, sizeof w);
    assert_true(w[0] == 0.3125f && w[1] == 448.0f && w[2] == -0.3125f);
    unlink(path_of("f.npy"));
}

static void test_read_box(void **state)
{
    (void)state;
    int64_t dims[] = {4, 6, 8};
    IrShape s = mk(IR_F32, 3, dims);
    float v[192];
    for (int i = 0; i < 192; i++)
        v[i] = (float)i;
    assert_int_equal(rt_npy_write_file(path_of("box.npy"), &s, v, NULL), IR_OK);
    int64_t boxes[][6] = {
        {0, 0, 0, 4, 6, 8}, {1, 0, 0, 3, 6, 8}, {0, 2, 0, 4, 3, 8}, {1, 1, 3, 3, 5, 7},
        {3, 5, 7, 4, 6, 8}, {0, 0, 4, 4, 6, 8}, {2, 0, 0, 3, 6, 8},
    };
    for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++)
        check_box(&s, boxes[i], boxes[i] + 3);
    /* empty box: nothing read, fine */
    int64_t lo[] = {2, 0, 0}, hi[] = {2, 6, 8};
    float untouched = -1;
    assert_int_equal(rt_npy_read_box(path_of("box.npy"), &s, NULL, lo, hi, &untouched, NULL),
                     IR_OK);
    assert_true(untouched == -1);
    /* box outside */
    int64_t lo2[] = {0, 0, 0}, hi2[] = {4, 7, 8};
    IrDiag d = {0};
    assert_int_equal(rt_npy_read_box(path_of("box.npy"), &s, NULL, lo2, hi2, v, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "dimension 1"));
    ir_diag_clear(&d);
    /* bf16 box through the staging buffer */
    IrShape b = mk(IR_BF16, 3, dims);
    int64_t lo3[] = {1, 2, 0}, hi3[] = {2, 3, 8};
    uint16_t bo[8];
    assert_int_equal(rt_npy_read_box(path_of("box.npy"), &b, NULL, lo3, hi3, bo, NULL), IR_OK);
    for (int c = 0; c < 8; c++) /* 64..71 are exact in bf16 (8 significant bits) */
        assert_true(dev_bf16_to_f32(bo[c]) == (float)(64 + c));
    unlink(path_of("box.npy"));
}

static void test_write_failures(void **state)
{
    (void)state;
    int64_t dims[] = {2};
    IrShape s = mk(IR_S32, 1, dims);
    int32_t v[2] = {1, 2};
    IrDiag d = {0};
    assert_int_equal(rt_npy_write_file("/nonexistent-dir/x.npy", &s, v, &d), IR_ERUNTIME);
    assert_string_equal(d.file, "/nonexistent-dir/x.npy");
    assert_non_null(strstr(d.msg, "cannot create"));
    ir_diag_clear(&d);
    IrShape tok = mk(IR_TOKEN, 0, NULL);
    assert_int_equal(rt_npy_write_file(path_of("c.npy"), &tok, v, &d), IR_EUNSUPPORTED);
    ir_diag_clear(&d);
    assert_int_equal(count_files(), 0);
}

static void test_read_alloc_failures(void **state)
{
    (void)state;
    int64_t dims[] = {4};
    IrShape s = mk(IR_BF16, 1, dims);
    uint16_t v[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    assert_int_equal(rt_npy_write_file(path_of("r.npy"), &s, v, NULL), IR_OK);
    for (long n = 1; n < 20; n++) {
        uint16_t out[4] = {0};
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = rt_npy_read(path_of("r.npy"), &s, NULL, out, &d);
        ts_fail_alloc_after(0);
        ir_diag_clear(&d);
        if (st == IR_OK) {
            assert_memory_equal(out, v, sizeof v);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
    }
    unlink(path_of("r.npy"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_exact_bytes),
        cmocka_unit_test(test_write_scalar_and_rank1_text),
        cmocka_unit_test(test_roundtrip_all_types),
        cmocka_unit_test(test_header_spellings),
        cmocka_unit_test(test_parse_header_in_memory),
        cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_check_only),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_pred_normalised),
        cmocka_unit_test(test_read_box),
        cmocka_unit_test(test_complex),
        cmocka_unit_test(test_sub_byte_ints),
        cmocka_unit_test(test_lowp_floats),
        cmocka_unit_test(test_write_failures),
        cmocka_unit_test(test_read_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
