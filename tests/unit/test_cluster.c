/*
 * test_cluster.c: the cluster layer (cluster/): CluCycles against a
 * brute-force reachability oracle; placement; cluster formation on the
 * modules of tests/cluster/ (cycle avoidance, diamonds, chains, host ops in
 * while bodies and conditional branches, nesting, constants cloned,
 * clusters without inputs, no device work, no host work, control edges,
 * shardings, numbering), each checked member by member against what the
 * module's comment works out by hand; the outlined module run by the
 * reference executor against the original on random inputs (bit-exact,
 * same host calls); random modules checked for acyclic, maximal and fewest
 * clusters by brute force over the source graph; determinism; a 10,000
 * instruction chain; errors; every allocation failing in turn; and XLA's
 * SPMD test modules (no host ops: at most one cluster each).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attrs_test.h"
#include "cluster/cluster.h"
#include "device/device.h"
#include "runtime/runtime.h"

#define CASES TESSEL_SRC_DIR "/tests/cluster/"
#define XLA_MODULES TESSEL_SHARED_DIR "/conformance/xla_spmd/modules"

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static IrModule *parse_text(const char *text)
{
    IrDiag d = {0};
    IrModule *m = NULL;
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    IrStatus st = ir_parse("test.hlo", text, strlen(text), &po, &m, &d);
    if (st != IR_OK)
        fprintf(stderr, "parse: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    return m;
}

static IrModule *load(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, CASES "%s", name);
    IrDiag d = {0};
    IrModule *m = NULL;
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    IrStatus st = ir_parse_file(path, &po, &m, &d);
    if (st != IR_OK)
        fprintf(stderr, "%s: %s\n", path, d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    return m;
}

static void verify_ok(const IrModule *m)
{
    IrDiag d = {0};
    IrStatus st = ir_verify(m, NULL, &d);
    if (st != IR_OK) {
        char *t = ir_print_module(m);
        fprintf(stderr, "verify: %s\n%s\n", d.msg ? d.msg : "?", t ? t : "");
        ts_free(t);
    }
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
}

/* Extract with `opt`, expect success and a module that verifies. */
static IrModule *extract(const IrModule *m, const CluOptions *opt, CluResult *res)
{
    IrDiag d = {0};
    IrModule *out = NULL;
    IrStatus st = clu_extract(m, opt, &out, res, &d);
    if (st != IR_OK)
        fprintf(stderr, "clu_extract: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    assert_non_null(out);
    ir_diag_clear(&d);
    verify_ok(out);
    return out;
}

/* The names of a list, space separated, against `want`. */
static void names_are(const char *const *names, int32_t n, const char *want)
{
    char got[4096] = "";
    for (int32_t i = 0; i < n; i++) {
        if (i)
            strcat(got, " ");
        strcat(got, names[i]);
    }
    if (strcmp(got, want) != 0)
        fprintf(stderr, "got \"%s\", want \"%s\"\n", got, want);
    assert_string_equal(got, want);
}

static void members_are(const CluResult *r, int32_t k, const char *want)
{
    assert_true(k < r->nclusters);
    names_are(r->clusters[k].instrs, r->clusters[k].ninstrs, want);
}

static void inputs_are(const CluResult *r, int32_t k, const char *want)
{
    const char *n[64];
    const CluCluster *c = &r->clusters[k];
    for (int32_t i = 0; i < c->ninputs; i++) {
        n[i] = c->inputs[i].value;
        assert_int_equal(c->inputs[i].operand, i);
    }
    names_are(n, c->ninputs, want);
}

static void outputs_are(const CluResult *r, int32_t k, const char *want)
{
    const char *n[64];
    const CluCluster *c = &r->clusters[k];
    for (int32_t i = 0; i < c->noutputs; i++) {
        n[i] = c->outputs[i].value;
        assert_int_equal(c->outputs[i].index, i);
    }
    names_are(n, c->noutputs, want);
}

static void consts_are(const CluResult *r, int32_t k, const char *want)
{
    names_are(r->clusters[k].consts, r->clusters[k].nconsts, want);
}

static const IrComputation *comp_named(const IrModule *m, const char *name)
{
    int32_t ci = ir_find_computation(m, name);
    assert_true(ci >= 0);
    return m->comp[ci];
}

static const IrInstr *instr_named(const IrComputation *c, const char *name)
{
    int32_t i = ir_find_instr(c, name);
    if (i < 0)
        fprintf(stderr, "no instruction %s in %s\n", name, c->name);
    assert_true(i >= 0);
    return &c->instr[i];
}

/* The opcodes of a computation, in order, space separated. */
static void opcodes_are(const IrComputation *c, const char *want)
{
    char got[4096] = "";
    for (int32_t i = 0; i < c->ninstr; i++) {
        if (i)
            strcat(got, " ");
        strcat(got, ir_op_name(c->instr[i].op));
    }
    if (strcmp(got, want) != 0)
        fprintf(stderr, "%s: got \"%s\", want \"%s\"\n", c->name, got, want);
    assert_string_equal(got, want);
}

static char *sharding_text(const IrSharding *s)
{
    assert_non_null(s);
    char *t = ir_sharding_str(s);
    assert_non_null(t);
    return t;
}

static void sharding_is(const IrSharding *s, const char *want)
{
    char *t = sharding_text(s);
    assert_string_equal(t, want);
    ts_free(t);
}

/* ------------------------------------------------------------------ */
/* running both programs                                               */
/* ------------------------------------------------------------------ */

typedef struct HostLog {
    int calls;
} HostLog;

/* The host targets as the tests run them: tessel_print and tessel_save
 * return their operand (the executor then runs them wherever they are);
 * so does `probe`, a device target kept for its effect. Every call is
 * counted. */
static IrStatus host_hook(void *ctx, const IrModule *m, const IrInstr *ins, int32_t n,
                          DevValue **opnd, DevValue **out, IrDiag *d)
{
    (void)m;
    (void)d;
    const char *t = ins->a.x->custom_call_target;
    if (!t || n != 1 ||
        (strcmp(t, "tessel_print") != 0 && strcmp(t, "tessel_save") != 0 && strcmp(t, "probe") != 0))
        return IR_EUNSUPPORTED;
    ((HostLog *)ctx)->calls++;
    *out = dev_value_ref(opnd[0]);
    return IR_OK;
}

static DevValue *random_value(const IrShape *s, uint64_t seed, uint64_t *leaf)
{
    if (s->type == IR_TUPLE) {
        DevValue *el[16];
        assert_true(s->ntuple <= 16);
        for (int32_t i = 0; i < s->ntuple; i++)
            el[i] = random_value(&s->tuple[i], seed, leaf);
        DevValue *t = dev_value_tuple(s, s->ntuple, el);
        assert_non_null(t);
        return t;
    }
    DevValue *v = dev_value_new(s);
    assert_non_null(v);
    IrDiag d = {0};
    if (s->type != IR_TOKEN)
        assert_int_equal(rt_random_fill(seed, (*leaf)++, s, v->data, &d), IR_OK);
    return v;
}

static DevValue *run(const IrModule *m, DevValue **args, int32_t nargs, HostLog *log)
{
    DevCustomCalls hooks = {log, host_hook};
    DevExecOptions opt = {0};
    opt.custom = &hooks;
    opt.no_blas = true;
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = dev_execute(m, m->entry, nargs, args, &opt, &out, &d);
    if (st != IR_OK)
        fprintf(stderr, "dev_execute: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    return out;
}

static void same_bits(DevValue *a, DevValue *b)
{
    int32_t n = ir_shape_leaf_count(&a->shape);
    assert_int_equal(n, ir_shape_leaf_count(&b->shape));
    for (int32_t i = 0; i < n; i++) {
        DevValue *x = dev_value_leaf(a, i), *y = dev_value_leaf(b, i);
        assert_true(ir_shape_equal(&x->shape, &y->shape));
        assert_int_equal(x->nbytes, y->nbytes);
        if (x->nbytes > 0)
            assert_memory_equal(x->data, y->data, (size_t)x->nbytes);
    }
}

/* The outlined module computes what the source computes, bit for bit, and
 * calls the host targets as many times, on inputs drawn with `seed`. */
static void same_results(const IrModule *src, const IrModule *out, uint64_t seed)
{
    const IrComputation *e = ir_entry(src);
    DevValue *args[16];
    uint64_t leaf = 0;
    assert_true(e->nparam <= 16);
    for (int32_t i = 0; i < e->nparam; i++)
        args[i] = random_value(&e->instr[e->param[i]].shape, seed, &leaf);
    HostLog l1 = {0}, l2 = {0};
    DevValue *a = run(src, args, e->nparam, &l1);
    DevValue *b = run(out, args, e->nparam, &l2);
    same_bits(a, b);
    assert_int_equal(l1.calls, l2.calls);
    dev_value_unref(a);
    dev_value_unref(b);
    for (int32_t i = 0; i < e->nparam; i++)
        dev_value_unref(args[i]);
}

/* Extract a test module, check it runs the same, and hand back both. */
static IrModule *check_file(const char *name, IrModule **src, CluResult *res)
{
    *src = load(name);
    IrModule *out = extract(*src, NULL, res);
    for (uint64_t seed = 1; seed <= 3; seed++)
        same_results(*src, out, seed);
    return out;
}

static void done(IrModule *src, IrModule *out, CluResult *res)
{
    ir_module_free(src);
    ir_module_free(out);
    clu_result_free(res);
}

/* ------------------------------------------------------------------ */
/* CluCycles                                                           */
/* ------------------------------------------------------------------ */

/* Pearce-Kelly's reorder, the example of cycles.c: ranks a0 b1 c2 d3,
 * edges a->b, c->d; inserting d->b hands out ranks c1 d2 b3. */
static void test_cycles_reorder_example(void **state)
{
    (void)state;
    CluCycles *g = clu_cycles_new(4);
    assert_non_null(g);
    assert_int_equal(clu_cycles_insert_edge(g, 0, 1), 1);
    assert_int_equal(clu_cycles_insert_edge(g, 2, 3), 1);
    assert_int_equal(clu_cycles_insert_edge(g, 3, 1), 1);
    assert_int_equal(clu_cycles_rank(g, 0), 0);
    assert_int_equal(clu_cycles_rank(g, 2), 1);
    assert_int_equal(clu_cycles_rank(g, 3), 2);
    assert_int_equal(clu_cycles_rank(g, 1), 3);
    assert_true(clu_cycles_check(g));
    /* b -> c would close b -> c -> d -> b. */
    assert_int_equal(clu_cycles_insert_edge(g, 1, 2), 0);
    assert_false(clu_cycles_has_edge(g, 1, 2));
    assert_int_equal(clu_cycles_insert_edge(g, 1, 1), 0);
    assert_int_equal(clu_cycles_insert_edge(g, 0, 1), 1); /* already there */
    assert_true(clu_cycles_check(g));
    clu_cycles_free(g);
}

/* a->b, b->c, a->c: a->c is not the only path, so it may not be
 * contracted; a->b may, and the merged node keeps the edge to c. */
static void test_cycles_contract(void **state)
{
    (void)state;
    CluCycles *g = clu_cycles_new(4);
    assert_int_equal(clu_cycles_insert_edge(g, 0, 1), 1);
    assert_int_equal(clu_cycles_insert_edge(g, 1, 2), 1);
    assert_int_equal(clu_cycles_insert_edge(g, 0, 2), 1);
    assert_false(clu_cycles_can_contract_edge(g, 0, 2));
    assert_int_equal(clu_cycles_contract_edge(g, 0, 2), -1);
    assert_true(clu_cycles_has_edge(g, 0, 2)); /* unchanged */
    assert_false(clu_cycles_can_contract_edge(g, 0, 3)); /* no edge */
    assert_true(clu_cycles_can_contract_edge(g, 0, 1));
    int32_t s = clu_cycles_contract_edge(g, 0, 1);
    assert_true(s == 0 || s == 1);
    int32_t dead = s == 0 ? 1 : 0;
    assert_false(clu_cycles_alive(g, dead));
    assert_true(clu_cycles_has_edge(g, s, 2));
    int32_t n;
    clu_cycles_succ(g, s, &n);
    assert_int_equal(n, 1);
    /* Now s->2 is the only path: contractible. 3 is isolated: mergeable. */
    assert_true(clu_cycles_can_contract_edge(g, s, 2));
    int32_t t = clu_cycles_merge(g, 3, s);
    assert_true(t == 3 || t == s);
    assert_true(clu_cycles_check(g));
    assert_int_equal(clu_cycles_merge(g, t, t), t);
    assert_int_equal(clu_cycles_merge(g, t, dead), -1);
    clu_cycles_free(g);
}

/* Merging two nodes with a path between them through a third is refused;
 * without one it is allowed whatever their ranks. */
static void test_cycles_merge(void **state)
{
    (void)state;
    CluCycles *g = clu_cycles_new(5);
    assert_int_equal(clu_cycles_insert_edge(g, 0, 1), 1);
    assert_int_equal(clu_cycles_insert_edge(g, 1, 2), 1);
    assert_int_equal(clu_cycles_merge(g, 2, 0), -1);
    assert_int_equal(clu_cycles_merge(g, 0, 2), -1);
    assert_true(clu_cycles_is_reachable(g, 0, 2));
    assert_false(clu_cycles_is_reachable(g, 2, 0));
    assert_int_equal(clu_cycles_insert_edge(g, 4, 3), 1);
    int32_t s = clu_cycles_merge(g, 3, 0); /* 4 -> 3, 0 -> 1: no path */
    assert_true(s >= 0);
    assert_true(clu_cycles_is_reachable(g, 4, 2));
    assert_true(clu_cycles_check(g));
    clu_cycles_free(g);
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define GN 40

/* Brute force: reach[x][y] over an adjacency matrix (Floyd-Warshall). */
static void closure(bool adj[GN][GN], bool reach[GN][GN])
{
    for (int i = 0; i < GN; i++)
        for (int j = 0; j < GN; j++)
            reach[i][j] = adj[i][j];
    for (int k = 0; k < GN; k++)
        for (int i = 0; i < GN; i++)
            if (reach[i][k])
                for (int j = 0; j < GN; j++)
                    reach[i][j] |= reach[k][j];
}

/* Random insertions, removals, contractions and merges against the
 * brute-force graph: a merged node stands for the set of original nodes
 * it absorbed (rep[]), and every answer must match the matrix. */
static void test_cycles_random(void **state)
{
    (void)state;
    static bool adj[GN][GN], reach[GN][GN];
    for (uint64_t seed = 1; seed <= 30; seed++) {
        uint64_t s = seed;
        CluCycles *g = clu_cycles_new(GN);
        memset(adj, 0, sizeof adj);
        for (int step = 0; step < 400; step++) {
            int x = (int)(mix(&s) % GN), y = (int)(mix(&s) % GN);
            int op = (int)(mix(&s) % 10);
            bool live = clu_cycles_alive(g, x) && clu_cycles_alive(g, y);
            closure(adj, reach);
            if (op < 6) {
                int r = clu_cycles_insert_edge(g, x, y);
                bool cyc = !live || x == y || reach[y][x];
                assert_int_equal(r, cyc ? 0 : 1);
                if (!cyc)
                    adj[x][y] = true;
            } else if (op == 6) {
                clu_cycles_remove_edge(g, x, y);
                adj[x][y] = false;
            } else if (op == 7) {
                assert_int_equal(clu_cycles_is_reachable(g, x, y), live && (x == y || reach[x][y]));
            } else if (live && x != y) {
                /* Contract/merge: allowed iff no path through a third node. */
                bool other = false;
                for (int z = 0; z < GN; z++)
                    if (z != x && z != y && ((reach[x][z] && reach[z][y]) || (reach[y][z] && reach[z][x])))
                        other = true;
                bool edge = adj[x][y];
                int32_t r = op == 8 ? clu_cycles_contract_edge(g, x, y) : clu_cycles_merge(g, x, y);
                bool allowed = op == 8 ? edge && !other : !other;
                assert_int_equal(r >= 0, allowed);
                if (r >= 0) {
                    int keep = r, gone = r == x ? y : x;
                    assert_true(keep == x || keep == y);
                    for (int z = 0; z < GN; z++) {
                        adj[keep][z] |= adj[gone][z];
                        adj[z][keep] |= adj[z][gone];
                        adj[gone][z] = adj[z][gone] = false;
                    }
                    adj[keep][keep] = false;
                }
            }
            assert_true(clu_cycles_check(g));
        }
        /* The lists hold exactly the matrix. */
        for (int x = 0; x < GN; x++)
            for (int y = 0; y < GN; y++)
                assert_int_equal(clu_cycles_has_edge(g, x, y), adj[x][y]);
        clu_cycles_free(g);
    }
}

static void test_cycles_bad_args(void **state)
{
    (void)state;
    assert_null(clu_cycles_new(-1));
    CluCycles *g = clu_cycles_new(0);
    assert_non_null(g);
    assert_true(clu_cycles_check(g));
    assert_int_equal(clu_cycles_insert_edge(g, 0, 1), 0);
    assert_false(clu_cycles_is_reachable(g, 0, 0));
    int32_t n;
    assert_null(clu_cycles_succ(g, 3, &n));
    assert_int_equal(n, 0);
    clu_cycles_free(g);
    clu_cycles_free(NULL);
    /* Failure injection: the graph, and growing a node's lists. */
    for (long k = 1; k < 40; k++) {
        ts_fail_alloc_after(k);
        g = clu_cycles_new(8);
        int r = g ? clu_cycles_insert_edge(g, 0, 1) : -1;
        ts_fail_alloc_after(0);
        if (g) {
            assert_true(r == 1 || r == -1);
            assert_int_equal(clu_cycles_has_edge(g, 0, 1), r == 1);
            assert_true(clu_cycles_check(g));
        }
        clu_cycles_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* placement                                                           */
/* ------------------------------------------------------------------ */

static void test_is_host_instr(void **state)
{
    (void)state;
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    IrKeyValue kv = {"_xla_compute_type", "host"};
    ins.op = OP_ADD;
    assert_false(clu_is_host_instr(&ins, NULL));
    ins.a.nfrontend = 1;
    ins.a.frontend = &kv;
    assert_true(clu_is_host_instr(&ins, NULL));
    kv.value = "device";
    assert_false(clu_is_host_instr(&ins, NULL));
    ins.a.nfrontend = 0;
    ins.op = OP_CUSTOM_CALL;
    test_x(&ins.a)->custom_call_target = "tessel_print";
    assert_true(clu_is_host_instr(&ins, NULL));
    test_x(&ins.a)->custom_call_target = "tessel_save";
    assert_true(clu_is_host_instr(&ins, NULL));
    test_x(&ins.a)->custom_call_target = "my_log";
    assert_false(clu_is_host_instr(&ins, NULL));
    const char *const mine[] = {"my_log", NULL};
    assert_true(clu_is_host_instr(&ins, mine));
    test_x(&ins.a)->custom_call_target = "tessel_print";
    assert_false(clu_is_host_instr(&ins, mine));
    test_x(&ins.a)->custom_call_target = NULL;
    assert_false(clu_is_host_instr(&ins, NULL));
}

/* Placement of the example in place.c, plus glue and constants. */
static void test_place(void **state)
{
    (void)state;
    IrModule *m = parse_text(
        "HloModule pl\n"
        "ENTRY main {\n"
        "  p = f32[4] parameter(0)\n"                                       /* glue */
        "  q = (f32[4], f32[4]) parameter(1)\n"                             /* glue */
        "  q0 = f32[4] get-tuple-element(q), index=0\n"                     /* glue: of a host value */
        "  c = f32[4] constant({1, 2, 3, 4})\n"                             /* const */
        "  a = f32[4] add(p, q0)\n"                                         /* device */
        "  ta = (f32[4], f32[4]) tuple(a, c)\n"                             /* device: reads device work */
        "  ga = f32[4] get-tuple-element(ta), index=0\n"                    /* device: of a device value */
        "  tp = (f32[4], f32[4]) tuple(a, ga)\n"                            /* glue: only host ops read it */
        "  h = (f32[4], f32[4]) custom-call(tp), custom_call_target=\"tessel_print\"\n" /* host op */
        "  th = (f32[4], f32[4]) tuple(p, c)\n"                             /* glue: host values and a constant */
        "  x = f32[4] multiply(a, a), frontend_attributes={_xla_compute_type=\"host\"}\n" /* host op */
        "  ROOT t = (f32[4], (f32[4], f32[4]), (f32[4], f32[4])) tuple(x, h, th)\n" /* glue: the root */
        "}\n");
    bool has_host[1];
    CluPlace pl[16];
    IrDiag d = {0};
    assert_int_equal(clu_host_computations(m, NULL, has_host, &d), IR_OK);
    assert_true(has_host[0]);
    assert_int_equal(clu_place(m, m->entry, has_host, NULL, 64, pl, &d), IR_OK);
    const CluPlace want[] = {CLU_HOST_GLUE, CLU_HOST_GLUE, CLU_HOST_GLUE, CLU_CONST,
                             CLU_DEVICE,    CLU_DEVICE,    CLU_DEVICE,    CLU_HOST_GLUE,
                             CLU_HOST_OP,   CLU_HOST_GLUE, CLU_HOST_OP,   CLU_HOST_GLUE};
    for (int32_t i = 0; i < 12; i++)
        assert_int_equal(pl[i], want[i]);
    /* A smaller limit makes the constant device work; a negative one too. */
    assert_int_equal(clu_place(m, m->entry, has_host, NULL, 3, pl, &d), IR_OK);
    assert_int_equal(pl[3], CLU_DEVICE);
    assert_int_equal(clu_place(m, m->entry, has_host, NULL, -1, pl, &d), IR_OK);
    assert_int_equal(pl[3], CLU_DEVICE);
    /* With other host targets, the print is device work (and so is tp). */
    const char *const none[] = {NULL};
    assert_int_equal(clu_place(m, m->entry, has_host, none, 64, pl, &d), IR_OK);
    assert_int_equal(pl[8], CLU_DEVICE);
    assert_int_equal(pl[7], CLU_DEVICE);
    ir_module_free(m);
}

/* Host work found through calls, whatever the depth. */
static void test_host_computations(void **state)
{
    (void)state;
    IrModule *m = load("nested.hlo");
    bool hh[16];
    IrDiag d = {0};
    assert_int_equal(clu_host_computations(m, NULL, hh, &d), IR_OK);
    const char *yes[] = {"inner", "hbody", "main"};
    const char *no[] = {"dcond", "dbody", "hcond"};
    for (int i = 0; i < 3; i++) {
        assert_true(hh[ir_find_computation(m, yes[i])]);
        assert_false(hh[ir_find_computation(m, no[i])]);
    }
    for (long k = 1; k < 6; k++) {
        ts_fail_alloc_after(k);
        IrStatus st = clu_host_computations(m, NULL, hh, &d);
        ts_fail_alloc_after(0);
        assert_true(st == IR_OK || st == IR_ENOMEM);
        ir_diag_clear(&d);
    }
    ir_module_free(m);
}

/* ------------------------------------------------------------------ */
/* formation and outlining, module by module                           */
/* ------------------------------------------------------------------ */

/* a -> b directly and a -> print -> b: two clusters, and the host program
 * is call, print, call. */
static void test_cycle_avoidance(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("cycle.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "a");
    members_are(&r, 1, "b");
    inputs_are(&r, 0, "p");
    outputs_are(&r, 0, "a");
    inputs_are(&r, 1, "a h");
    outputs_are(&r, 1, "b");
    assert_int_equal(r.clusters[1].inputs[0].from_cluster, 0);
    assert_int_equal(r.clusters[1].inputs[0].from_output, 0);
    assert_int_equal(r.clusters[1].inputs[1].from_cluster, -1);
    assert_int_equal(r.clusters[0].inputs[0].host_param, 0);
    assert_int_equal(r.clusters[1].inputs[1].host_param, -1);
    assert_string_equal(r.clusters[0].name, "cluster_0");
    assert_string_equal(r.clusters[1].name, "cluster_1");
    opcodes_are(ir_entry(out), "parameter call get-tuple-element custom-call call get-tuple-element tuple");
    const IrInstr *call = instr_named(ir_entry(out), r.clusters[1].call);
    assert_int_equal(call->op, OP_CALL);
    assert_int_equal(call->called[0], r.clusters[1].comp);
    assert_string_equal(ir_frontend_attr(call, "_tessel_cluster"), "1");
    assert_int_equal(r.clusters[1].host_comp, out->entry);
    assert_string_equal(r.clusters[1].source_comp, "main");
    /* The cuts: p in, a out (to the host and to cluster 1), h in, b out. */
    assert_int_equal(r.ncuts, 5);
    assert_string_equal(r.cuts[0].value, "p");
    assert_int_equal(r.cuts[0].from, -1);
    assert_int_equal(r.cuts[0].to, 0);
    assert_string_equal(r.cuts[2].value, "a");
    assert_int_equal(r.cuts[2].from, 0);
    assert_int_equal(r.cuts[2].to, 1);
    assert_int_equal(r.cuts[2].bytes, 16);
    assert_int_equal(r.nhost, 3); /* p, h, t */
    assert_string_equal(r.host[1].name, "h");
    assert_int_equal(r.host[1].place, CLU_HOST_OP);
    done(src, out, &r);
}

static void test_diamonds(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("diamond.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "l1 l2 l3 l4 a");
    members_are(&r, 1, "c d");
    outputs_are(&r, 0, "l4 a");
    inputs_are(&r, 1, "a h");
    done(src, out, &r);
}

static void test_chain(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("chain.hlo", &src, &r);
    assert_int_equal(r.nclusters, 3);
    members_are(&r, 0, "a1 a2");
    members_are(&r, 1, "b1 b2");
    members_are(&r, 2, "c1");
    inputs_are(&r, 2, "a2 h2");
    /* The root is device work: the host program returns its element. */
    const IrComputation *e = ir_entry(out);
    assert_int_equal(e->instr[e->root].op, OP_GET_TUPLE_ELEMENT);
    assert_string_equal(e->instr[e->root].name, "c1");
    done(src, out, &r);
}

/* The while body prints: the while is host control flow, its condition and
 * body are clustered in turn, and clusters are numbered as they run. */
static void test_while_host(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("while_host.hlo", &src, &r);
    assert_int_equal(r.nclusters, 5);
    members_are(&r, 0, "q");
    members_are(&r, 1, "lt");
    members_are(&r, 2, "i1 y");
    members_are(&r, 3, "z");
    members_are(&r, 4, "o");
    consts_are(&r, 1, "n");
    consts_are(&r, 2, "one");
    assert_string_equal(r.clusters[1].source_comp, "cond");
    assert_string_equal(r.clusters[2].source_comp, "body");
    const IrComputation *body = comp_named(out, "body"), *e = ir_entry(out);
    opcodes_are(body, "parameter get-tuple-element get-tuple-element call get-tuple-element "
                      "get-tuple-element custom-call call get-tuple-element tuple");
    assert_int_equal(r.clusters[2].host_comp, ir_find_computation(out, "body"));
    const IrInstr *w = instr_named(e, "w");
    assert_int_equal(w->op, OP_WHILE);
    assert_string_equal(out->comp[w->called[0]]->name, "cond");
    assert_string_equal(out->comp[w->called[1]]->name, "body");
    /* zero stays on the host (a constant the host reads). */
    assert_int_equal(instr_named(e, "zero")->op, OP_CONSTANT);
    done(src, out, &r);
}

static void test_conditional_host(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("conditional_host.hlo", &src, &r);
    assert_int_equal(r.nclusters, 3);
    members_are(&r, 0, "idx q");
    members_are(&r, 1, "y");
    assert_string_equal(r.clusters[1].source_comp, "br0");
    members_are(&r, 2, "y");
    assert_string_equal(r.clusters[2].source_comp, "br1");
    assert_int_equal(r.clusters[1].inputs[0].host_param, 0);
    opcodes_are(comp_named(out, "br1"), "parameter custom-call call get-tuple-element");
    done(src, out, &r);
}

/* A device while stays whole in a cluster (its computations cloned); a
 * host call inside a host while body is clustered in turn. */
static void test_nested(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("nested.hlo", &src, &r);
    assert_int_equal(r.nclusters, 4);
    members_are(&r, 0, "dw dx");
    members_are(&r, 1, "lt");
    members_are(&r, 2, "w");
    members_are(&r, 3, "i1 z");
    assert_string_equal(r.clusters[2].source_comp, "inner");
    inputs_are(&r, 3, "i x c");
    const IrComputation *c0 = out->comp[r.clusters[0].comp];
    const IrInstr *dw = instr_named(c0, "dw");
    assert_string_equal(out->comp[dw->called[0]]->name, "dcond");
    assert_string_equal(out->comp[dw->called[1]]->name, "dbody");
    assert_int_equal(instr_named(comp_named(out, "hbody"), "c")->op, OP_CALL);
    done(src, out, &r);
}

/* `two` is cloned into both clusters and the host; `bigc` (65 elements)
 * is device work and travels from cluster 0 to cluster 1. */
static void test_constants(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("consts.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "bigc b2 k m");
    members_are(&r, 1, "big b3 n o s");
    consts_are(&r, 0, "two");
    consts_are(&r, 1, "two");
    inputs_are(&r, 0, "p");
    inputs_are(&r, 1, "bigc h");
    outputs_are(&r, 0, "bigc m");
    for (int k = 0; k < 2; k++)
        assert_int_equal(instr_named(out->comp[r.clusters[k].comp], "two")->op, OP_CONSTANT);
    assert_int_equal(instr_named(ir_entry(out), "two")->op, OP_CONSTANT);
    assert_int_equal(r.clusters[1].inputs[0].bytes, 65 * 4);
    /* With the limit at 0, `two` is device work and is passed instead. */
    CluOptions o = clu_default_options();
    o.max_const_elements = 0;
    CluResult r2;
    IrModule *out2 = extract(src, &o, &r2);
    same_results(src, out2, 5);
    for (int32_t k = 0; k < r2.nclusters; k++)
        assert_int_equal(r2.clusters[k].nconsts, 0);
    ir_module_free(out2);
    clu_result_free(&r2);
    done(src, out, &r);
}

static void test_no_inputs(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("no_inputs.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "i b a");
    assert_int_equal(r.clusters[0].ninputs, 0);
    consts_are(&r, 0, "one");
    const IrComputation *c0 = out->comp[r.clusters[0].comp];
    assert_int_equal(c0->nparam, 0);
    assert_int_equal(instr_named(ir_entry(out), r.clusters[0].call)->nopnd, 0);
    done(src, out, &r);
}

/* No host ops: one cluster; host program parameters -> call -> root. */
static void test_device_only(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("device_only.hlo", &src, &r);
    assert_int_equal(r.nclusters, 1);
    members_are(&r, 0, "d r t u");
    consts_are(&r, 0, "zero");
    outputs_are(&r, 0, "r u");
    opcodes_are(ir_entry(out), "parameter parameter call get-tuple-element get-tuple-element tuple");
    /* The reducer is cloned once, and called from the cluster. */
    assert_int_equal(instr_named(out->comp[r.clusters[0].comp], "r")->called[0],
                     ir_find_computation(out, "add_f32"));
    done(src, out, &r);
}

/* No device work: no cluster, and the host program prints as the source
 * entry does, instruction for instruction (the constant moves next to its
 * reader). */
static void test_host_only(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("host_only.hlo", &src, &r);
    assert_int_equal(r.nclusters, 0);
    assert_int_equal(r.ncuts, 0);
    assert_int_equal(out->ncomp, 1);
    opcodes_are(ir_entry(out), "parameter parameter custom-call get-tuple-element custom-call "
                               "constant add tuple");
    assert_int_equal(r.nhost, 8);
    done(src, out, &r);
}

/* Numbering follows execution: the iota comes first in the source but
 * runs with b, after the host op. */
static void test_numbering(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("order.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "a");
    members_are(&r, 1, "i b");
    for (int32_t k = 0; k < r.nclusters; k++)
        assert_int_equal(r.clusters[k].number, k);
    done(src, out, &r);
}

static bool has_ctrl(const IrComputation *c, const IrInstr *ins, const char *pred)
{
    for (int32_t k = 0; k < ins->a.x->control_predecessors.n; k++)
        if (strcmp(c->instr[ins->a.x->control_predecessors.v[k]].name, pred) == 0)
            return true;
    return false;
}

static void test_control_edges(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("control.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "c a");
    members_are(&r, 1, "d");
    const IrComputation *e = ir_entry(out);
    assert_true(has_ctrl(e, instr_named(e, "h"), r.clusters[0].call));
    assert_true(has_ctrl(e, instr_named(e, r.clusters[1].call), "s"));
    /* Inside a cluster, no control edge points outside. */
    for (int32_t k = 0; k < r.nclusters; k++) {
        const IrComputation *c = out->comp[r.clusters[k].comp];
        for (int32_t i = 0; i < c->ninstr; i++)
            assert_int_equal(c->instr[i].a.x->control_predecessors.n, 0);
    }
    done(src, out, &r);
}

/* A cluster kept only for an effect nobody reads still runs: its call is
 * a control predecessor of the root (same_results counts the calls). */
static void test_effects(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("effects.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 1, "b e");
    assert_int_equal(r.clusters[1].noutputs, 0);
    const IrComputation *e = ir_entry(out);
    assert_true(has_ctrl(e, &e->instr[e->root], r.clusters[1].call));
    assert_false(has_ctrl(e, &e->instr[e->root], r.clusters[0].call));
    done(src, out, &r);
}

static void test_shardings(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("shardings.hlo", &src, &r);
    assert_int_equal(r.nclusters, 2);
    const IrComputation *c0 = out->comp[r.clusters[0].comp], *c1 = out->comp[r.clusters[1].comp];
    sharding_is(instr_named(c0, "p")->sharding, "{devices=[2,1]0,1}");
    sharding_is(instr_named(c0, "q")->sharding, "{replicated}");
    sharding_is(c0->instr[c0->root].sharding, "{{devices=[2,1]0,1}, {devices=[1,2]0,1}}");
    sharding_is(instr_named(c1, "g")->sharding, "{replicated}");
    const IrComputation *e = ir_entry(out);
    sharding_is(instr_named(e, r.clusters[0].call)->sharding,
                "{{devices=[2,1]0,1}, {devices=[1,2]0,1}}");
    sharding_is(instr_named(e, "b")->sharding, "{devices=[1,2]0,1}");
    assert_int_equal(out->num_partitions, 2);
    done(src, out, &r);
}

/* A device tuple flowing out contributes one sharding per leaf; a value
 * without a sharding leaves the root tuple without one. */
static void test_tuple_shardings(void **state)
{
    (void)state;
    IrModule *src = parse_text(
        "HloModule ts, num_partitions=2\n"
        "ENTRY main {\n"
        "  p = f32[4] parameter(0), sharding={devices=[2]0,1}\n"
        "  a = f32[4] negate(p), sharding={devices=[2]0,1}\n"
        "  pr = (f32[4], f32[4]) tuple(a, p), sharding={{devices=[2]0,1}, {replicated}}\n"
        "  e = f32[4] get-tuple-element(pr), index=0, sharding={devices=[2]0,1}\n"
        "  h = (f32[4], f32[4]) custom-call(pr), custom_call_target=\"tessel_print\", "
        "sharding={replicated}\n"
        "  g = f32[4] get-tuple-element(h), index=0, sharding={replicated}\n"
        "  f = f32[4] add(e, g)\n"
        "  ROOT t = (f32[4], f32[4]) tuple(f, e)\n"
        "}\n");
    CluResult r;
    IrModule *out = extract(src, NULL, &r);
    same_results(src, out, 9);
    /* e sinks to its reader f; pr, which the print reads, stays with a. */
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 0, "a pr");
    outputs_are(&r, 0, "pr");
    members_are(&r, 1, "e f");
    inputs_are(&r, 1, "pr g");
    outputs_are(&r, 1, "e f");
    const IrComputation *c0 = out->comp[r.clusters[0].comp], *c1 = out->comp[r.clusters[1].comp];
    sharding_is(c0->instr[c0->root].sharding, "{{devices=[2]0,1}, {replicated}}");
    sharding_is(instr_named(c1, "pr")->sharding, "{{devices=[2]0,1}, {replicated}}");
    sharding_is(instr_named(c1, "g")->sharding, "{replicated}");
    assert_null(c1->instr[c1->root].sharding); /* f has none */
    ir_module_free(out);
    clu_result_free(&r);
    ir_module_free(src);
}

/* The same module gives the same text, twice, and extracting the output
 * again is stable (clusters are plain device work the second time). */
static void test_determinism(void **state)
{
    (void)state;
    const char *files[] = {"while_host.hlo", "consts.hlo", "nested.hlo", "control.hlo"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        IrModule *src = load(files[f]);
        CluResult r1, r2;
        IrModule *a = extract(src, NULL, &r1), *b = extract(src, NULL, &r2);
        char *ta = ir_print_module(a), *tb = ir_print_module(b);
        assert_string_equal(ta, tb);
        /* And the printed text reads back to a module that verifies. */
        IrModule *back = parse_text(ta);
        ir_module_free(back);
        ts_free(ta);
        ts_free(tb);
        ir_module_free(a);
        ir_module_free(b);
        clu_result_free(&r1);
        clu_result_free(&r2);
        ir_module_free(src);
    }
}

/* Calls carrying _tessel_cluster in `m`, by number; false on a repeat. */
static bool marks_unique(const IrModule *m, int32_t n)
{
    bool seen[64] = {0};
    int32_t count = 0;
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        for (int32_t i = 0; i < m->comp[ci]->ninstr; i++) {
            const char *v = ir_frontend_attr(&m->comp[ci]->instr[i], "_tessel_cluster");
            if (!v)
                continue;
            int k = atoi(v);
            if (k < 0 || k >= n || seen[k])
                return false;
            seen[k] = true;
            count++;
        }
    return count == n;
}

/* Extracting an extracted module again: the old calls are device work,
 * they lose their mark, the new cluster names avoid the old ones, and the
 * program still computes the same. */
static void test_extract_twice(void **state)
{
    (void)state;
    const char *files[] = {"while_host.hlo", "nested.hlo", "device_only.hlo"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        IrModule *src, *out;
        CluResult r, r2;
        out = check_file(files[f], &src, &r);
        IrModule *again = extract(out, NULL, &r2);
        assert_int_equal(r2.nclusters, r.nclusters);
        assert_true(marks_unique(again, r2.nclusters));
        for (int32_t k = 0; k < r2.nclusters; k++)
            assert_int_equal(ir_find_computation(out, r2.clusters[k].name), -1);
        same_results(src, again, 4);
        ir_module_free(again);
        clu_result_free(&r2);
        done(src, out, &r);
    }
}

/* clu_cluster_module: a standalone module of one cluster. */
static void test_cluster_module(void **state)
{
    (void)state;
    IrModule *src, *out;
    CluResult r;
    out = check_file("shardings.hlo", &src, &r);
    IrDiag d = {0};
    IrModule *m = NULL;
    assert_int_equal(clu_cluster_module(out, &r, 0, &m, &d), IR_OK);
    verify_ok(m);
    assert_string_equal(ir_entry(m)->name, "cluster_0");
    assert_int_equal(ir_entry(m)->nparam, 2);
    assert_int_equal(m->num_partitions, 2);
    ir_module_free(m);
    assert_int_equal(clu_cluster_module(out, &r, 2, &m, &d), IR_EINPUT);
    assert_null(m);
    ir_diag_clear(&d);
    assert_int_equal(clu_cluster_module(out, &r, -1, &m, &d), IR_EINPUT);
    ir_diag_clear(&d);
    done(src, out, &r);
}

/* ------------------------------------------------------------------ */
/* errors and failure injection                                        */
/* ------------------------------------------------------------------ */

static void test_errors(void **state)
{
    (void)state;
    IrModule *m = load("bad_reduce.hlo");
    IrDiag d = {0};
    IrModule *out = (IrModule *)1;
    CluResult r;
    assert_int_equal(clu_extract(m, NULL, &out, &r, &d), IR_EUNSUPPORTED);
    assert_null(out);
    assert_int_equal(r.nclusters, 0);
    assert_null(r.arena);
    assert_non_null(strstr(d.msg, "reduce calls computation sum"));
    assert_int_equal(d.pos.line, 15);
    ir_diag_clear(&d);
    /* A module without an entry. */
    int32_t entry = m->entry;
    m->entry = -1;
    assert_int_equal(clu_extract(m, NULL, &out, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "no ENTRY"));
    ir_diag_clear(&d);
    m->entry = entry;
    /* Without a diag, errors are still reported by status. */
    assert_int_equal(clu_extract(m, NULL, &out, NULL, NULL), IR_EUNSUPPORTED);
    ir_module_free(m);
    clu_result_free(NULL);
}

/* Host control flow nested deeper than 256 calls is refused. */
static void test_nesting_limit(void **state)
{
    (void)state;
    const int depth = 300;
    size_t cap = (size_t)depth * 160 + 512, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "HloModule deep\n\n"
                            "c%d {\n  x = f32[2] parameter(0)\n"
                            "  ROOT h = f32[2] custom-call(x), custom_call_target=\"tessel_print\"\n}\n\n",
                            depth);
    for (int i = depth - 1; i >= 1; i--)
        len += (size_t)snprintf(text + len, cap - len,
                                "c%d {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] call(x), "
                                "to_apply=c%d\n}\n\n", i, i + 1);
    snprintf(text + len, cap - len, "ENTRY main {\n  p = f32[2] parameter(0)\n"
             "  ROOT r = f32[2] call(p), to_apply=c1\n}\n");
    /* The verifier refuses call nesting past --limit depth (64 by
     * default, at most 200); the clustering pass keeps its own bound for
     * modules that reach it unverified: parsed here with the verifier's
     * raised past it. */
    IrDiag pd = {0};
    IrModule *m = NULL;
    IrParseOptions po = ir_default_parse_options();
    po.limits.max_call_depth = depth + 8;
    assert_int_equal(ir_parse("test.hlo", text, strlen(text), &po, &m, &pd), IR_OK);
    ir_diag_clear(&pd);
    free(text);
    IrDiag d = {0};
    IrModule *out = NULL;
    assert_int_equal(clu_extract(m, NULL, &out, NULL, &d), IR_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "nested more than 256"));
    assert_null(out);
    ir_diag_clear(&d);
    ir_module_free(m);
}

/* Host targets are the caller's: with `probe` among them, the effect is
 * host work and only b is left in the second cluster. */
static void test_host_targets_option(void **state)
{
    (void)state;
    IrModule *src = load("effects.hlo");
    const char *const targets[] = {"tessel_print", "probe", NULL};
    CluOptions o = clu_default_options();
    o.host_targets = targets;
    CluResult r;
    IrModule *out = extract(src, &o, &r);
    same_results(src, out, 2);
    assert_int_equal(r.nclusters, 2);
    members_are(&r, 1, "b");
    outputs_are(&r, 1, "b");
    const IrComputation *e = ir_entry(out);
    assert_int_equal(instr_named(e, "e")->op, OP_CUSTOM_CALL);
    assert_int_equal(e->instr[e->root].a.x->control_predecessors.n, 0);
    done(src, out, &r);
}

/* Every allocation of an extraction fails in turn: each gives IR_ENOMEM,
 * no output, an empty result, and no leak. */
static void test_failure_injection(void **state)
{
    (void)state;
    const char *files[] = {"while_host.hlo", "shardings.hlo", "control.hlo", "consts.hlo",
                           "effects.hlo", "nested.hlo"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        IrModule *src = load(files[f]);
        IrDiag d = {0};
        IrModule *out = NULL;
        CluResult r;
        long before = ts_alloc_count();
        assert_int_equal(clu_extract(src, NULL, &out, &r, &d), IR_OK);
        long total = ts_alloc_count() - before;
        ir_module_free(out);
        clu_result_free(&r);
        assert_true(total > 20);
        for (long k = 1; k <= total; k++) {
            ts_fail_alloc_after(k);
            IrStatus st = clu_extract(src, NULL, &out, &r, &d);
            ts_fail_alloc_after(0);
            if (st != IR_ENOMEM)
                fprintf(stderr, "%s: allocation %ld of %ld: status %d\n", files[f], k, total, st);
            assert_int_equal(st, IR_ENOMEM);
            assert_int_equal(d.status, IR_ENOMEM);
            assert_null(out);
            assert_null(r.arena);
            ir_diag_clear(&d);
        }
        ir_module_free(src);
    }
}

/* ------------------------------------------------------------------ */
/* random modules                                                      */
/* ------------------------------------------------------------------ */

typedef struct Gen {
    char text[65536];
    size_t len;
    uint64_t s;
    int narr, ntup;
    char arr[200][8], tup[200][8];
    bool constant[200];      /* arr[i] is a constant */
} Gen;

static void gput(Gen *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g->text + g->len, sizeof g->text - g->len, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof g->text - g->len);
    g->len += (size_t)n;
}

/* Mostly one of the last few values, so that chains grow deep. */
static const char *any_arr(Gen *g)
{
    uint64_t r = mix(&g->s);
    if (r % 10 < 7 && g->narr > 6)
        return g->arr[g->narr - 1 - (int)((r >> 8) % 6)];
    return g->arr[(r >> 8) % (uint64_t)g->narr];
}

/* A random module over f32[4] values: device arithmetic, host prints and
 * host-marked ops, constants (some with control edges), iotas, tuples
 * built and taken apart on either side, and control edges. */
static void generate(Gen *g, uint64_t seed, int n)
{
    memset(g, 0, sizeof *g);
    g->s = seed;
    gput(g, "HloModule rnd\n\nENTRY main {\n");
    gput(g, "  v0 = f32[4] parameter(0)\n  v1 = f32[4] parameter(1)\n");
    strcpy(g->arr[g->narr++], "v0");
    strcpy(g->arr[g->narr++], "v1");
    static const char *bin[] = {"add", "multiply", "subtract", "maximum"};
    static const char *un[] = {"negate", "sine", "abs"};
    for (int i = 2; i < n; i++) {
        int r = (int)(mix(&g->s) % 100);
        char name[8];
        snprintf(name, sizeof name, "v%d", i % 1000);
        bool is_const = false, is_tuple = false;
        if (r < 30) {
            const char *a = any_arr(g), *b = any_arr(g);
            gput(g, "  %s = f32[4] %s(%s, %s)", name, bin[mix(&g->s) % 4], a, b);
        } else if (r < 40) {
            gput(g, "  %s = f32[4] %s(%s)", name, un[mix(&g->s) % 3], any_arr(g));
        } else if (r < 52) {
            gput(g, "  %s = f32[4] custom-call(%s), custom_call_target=\"tessel_print\"", name,
                 any_arr(g));
        } else if (r < 58) {
            const char *a = any_arr(g), *b = any_arr(g);
            gput(g, "  %s = f32[4] add(%s, %s), frontend_attributes={_xla_compute_type=\"host\"}",
                 name, a, b);
        } else if (r < 65) {
            gput(g, "  %s = f32[4] constant({1, 2, 3, %d})", name, i);
            is_const = true;
        } else if (r < 70) {
            gput(g, "  %s = f32[4] iota(), iota_dimension=0", name);
        } else if (r < 78) {
            const char *a = any_arr(g), *b = any_arr(g);
            name[0] = 't';
            gput(g, "  %s = (f32[4], f32[4]) tuple(%s, %s)", name, a, b);
            is_tuple = true;
        } else if (r < 83 && g->ntup > 0) {
            const char *t = g->tup[mix(&g->s) % (uint64_t)g->ntup];
            name[0] = 'h';
            gput(g, "  %s = (f32[4], f32[4]) custom-call(%s), custom_call_target=\"tessel_print\"",
                 name, t);
            is_tuple = true;
        } else if (r < 92 && g->ntup > 0) {
            gput(g, "  %s = f32[4] get-tuple-element(%s), index=%d", name,
                 g->tup[mix(&g->s) % (uint64_t)g->ntup], (int)(mix(&g->s) % 2));
        } else {
            const char *a = any_arr(g), *b = any_arr(g);
            gput(g, "  %s = f32[4] add(%s, %s)", name, a, b);
        }
        if (mix(&g->s) % 8 == 0) {
            const char *p = mix(&g->s) % 3 == 0 && g->ntup > 0
                                ? g->tup[mix(&g->s) % (uint64_t)g->ntup]
                                : any_arr(g);
            gput(g, ", control-predecessors={%s}", p);
        }
        gput(g, "\n");
        if (is_tuple)
            strcpy(g->tup[g->ntup++], name);
        else {
            g->constant[g->narr] = is_const;
            strcpy(g->arr[g->narr++], name);
        }
    }
    gput(g, "  ROOT out = (f32[4], f32[4], f32[4]) tuple(%s, %s, %s)\n}\n",
         g->arr[g->narr - 1], g->arr[g->narr - 2], any_arr(g));
}

#define RN 160

typedef struct Graph {
    int n;
    bool adj[RN][RN], reach[RN][RN];
    int unit[RN];            /* cluster index, -1 host, -2 cloned constant */
} Graph;

static void graph_closure(Graph *G)
{
    for (int i = 0; i < G->n; i++)
        for (int j = 0; j < G->n; j++)
            G->reach[i][j] = G->adj[i][j];
    for (int k = 0; k < G->n; k++)
        for (int i = 0; i < G->n; i++)
            if (G->reach[i][k])
                for (int j = 0; j < G->n; j++)
                    G->reach[i][j] |= G->reach[k][j];
}

/* Source graph with each instruction's side, from the result alone: an
 * instruction listed in a cluster is device work; a constant of at most
 * 64 elements without control edges is cloned; the rest is host. */
static void source_graph(const IrModule *m, const CluResult *r, Graph *G)
{
    const IrComputation *c = ir_entry(m);
    memset(G, 0, sizeof *G);
    G->n = c->ninstr;
    assert_true(G->n <= RN);
    bool ctrl[RN] = {0};
    for (int i = 0; i < G->n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int k = 0; k < ins->nopnd; k++)
            G->adj[ins->opnd[k]][i] = true;
        for (int k = 0; k < ins->a.x->control_predecessors.n; k++) {
            G->adj[ins->a.x->control_predecessors.v[k]][i] = true;
            ctrl[i] = ctrl[ins->a.x->control_predecessors.v[k]] = true;
        }
    }
    for (int i = 0; i < G->n; i++)
        G->unit[i] = c->instr[i].op == OP_CONSTANT && !ctrl[i] ? -2 : -1;
    for (int32_t k = 0; k < r->nclusters; k++)
        for (int32_t j = 0; j < r->clusters[k].ninstrs; j++) {
            int32_t i = ir_find_instr(c, r->clusters[k].instrs[j]);
            assert_true(i >= 0);
            assert_int_equal(G->unit[i], -1); /* in one cluster only, never a cloned constant */
            G->unit[i] = k;
        }
    graph_closure(G);
}

static bool in_set(const Graph *G, int v, int a, int b)
{
    return G->unit[v] >= 0 && (G->unit[v] == a || G->unit[v] == b);
}

/* Would contracting clusters a and b (a may equal b) close a cycle: is
 * there a path leaving the set and coming back through another node? */
static bool cycle_through(const Graph *G, int a, int b)
{
    for (int x = 0; x < G->n; x++) {
        if (!in_set(G, x, a, b))
            continue;
        for (int z = 0; z < G->n; z++) {
            if (in_set(G, z, a, b) || G->unit[z] == -2 || !G->adj[x][z])
                continue;
            for (int y = 0; y < G->n; y++)
                if (in_set(G, y, a, b) && (G->reach[z][y]))
                    return true;
        }
    }
    return false;
}

/* The fewest clusters any valid clustering needs: the longest chain of
 * device instructions each reaching the next through a host instruction. */
static int lower_bound(const Graph *G)
{
    int best[RN], most = 0;
    for (int v = 0; v < G->n; v++) { /* definition order is topological here */
        best[v] = 0;
        if (G->unit[v] < 0)
            continue;
        best[v] = 1;
        for (int u = 0; u < v; u++) {
            if (G->unit[u] < 0 || best[u] + 1 <= best[v])
                continue;
            for (int h = 0; h < G->n; h++)
                if (G->unit[h] == -1 && G->reach[u][h] && G->reach[h][v]) {
                    best[v] = best[u] + 1;
                    break;
                }
        }
        if (best[v] > most)
            most = best[v];
    }
    return most;
}

static void check_random(uint64_t seed, int n)
{
    static Gen g;
    static Graph G;
    generate(&g, seed, n);
    IrModule *src = parse_text(g.text);
    CluResult r;
    IrModule *out = extract(src, NULL, &r);
    same_results(src, out, seed);
    source_graph(src, &r, &G);
    /* Host ops are host, plain arithmetic is device. */
    const IrComputation *c = ir_entry(src);
    for (int i = 0; i < G.n; i++) {
        const IrInstr *ins = &c->instr[i];
        if (clu_is_host_instr(ins, NULL) || ins->op == OP_PARAMETER)
            assert_int_equal(G.unit[i], -1);
        if (ins->op == OP_SINE || ins->op == OP_IOTA || (ins->op == OP_MULTIPLY))
            assert_true(G.unit[i] >= 0);
    }
    /* Each cluster alone is convex, every pair is not mergeable, and the
     * count is the lower bound. */
    for (int a = 0; a < r.nclusters; a++) {
        assert_false(cycle_through(&G, a, a));
        for (int b = a + 1; b < r.nclusters; b++)
            assert_true(cycle_through(&G, a, b));
    }
    assert_int_equal(r.nclusters, lower_bound(&G));
    /* Same text twice. */
    CluResult r2;
    IrModule *out2 = extract(src, NULL, &r2);
    char *t1 = ir_print_module(out), *t2 = ir_print_module(out2);
    assert_string_equal(t1, t2);
    ts_free(t1);
    ts_free(t2);
    ir_module_free(out2);
    clu_result_free(&r2);
    done(src, out, &r);
}

static void test_random_modules(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 120; seed++)
        check_random(seed, 8 + (int)(seed % 7) * 20);
}

/* ------------------------------------------------------------------ */
/* scale and conformance                                               */
/* ------------------------------------------------------------------ */

/* 10,000 instructions, device, device, host, ...: one cluster per device
 * pair, 3,334 of them (the last pair has no host op after it). */
static void test_long_chain(void **state)
{
    (void)state;
    const int n = 10000;
    size_t cap = (size_t)n * 96 + 256, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "HloModule long\n\nENTRY main {\n"
                                                   "  v0 = f32[2] parameter(0)\n");
    for (int i = 1; i <= n; i++) {
        if (i % 3 == 0)
            len += (size_t)snprintf(text + len, cap - len,
                                    "  v%d = f32[2] custom-call(v%d), "
                                    "custom_call_target=\"tessel_print\"\n", i, i - 1);
        else
            len += (size_t)snprintf(text + len, cap - len, "  v%d = f32[2] multiply(v%d, v0)\n",
                                    i, i - 1);
    }
    snprintf(text + len, cap - len, "  ROOT r = f32[2] add(v%d, v0)\n}\n", n);
    IrModule *src = parse_text(text);
    free(text);
    CluResult r;
    IrModule *out = extract(src, NULL, &r);
    assert_int_equal(r.nclusters, 3334);
    members_are(&r, 0, "v1 v2");
    members_are(&r, 3333, "v10000 r");
    assert_int_equal(r.clusters[3333].ninputs, 2);
    same_results(src, out, 3);
    done(src, out, &r);
}

/* XLA's SPMD test modules have no host ops: each gives at most one
 * cluster (none when the entry has no device work), and a module that
 * verifies. */
static void test_xla_modules(void **state)
{
    (void)state;
    DIR *dir = opendir(XLA_MODULES);
    if (!dir)
        skip();
    struct dirent *e;
    int tried = 0;
    while ((e = readdir(dir))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".hlo") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", XLA_MODULES, e->d_name);
        IrDiag d = {0};
        IrModule *m = NULL;
        IrParseOptions po = ir_default_parse_options();
        po.verify = true;
        if (ir_parse_file(path, &po, &m, &d) != IR_OK) {
            ir_diag_clear(&d);
            continue; /* the few over the element limit */
        }
        CluResult r;
        IrModule *out = extract(m, NULL, &r);
        assert_true(r.nclusters <= 1);
        bool device = false;
        const IrComputation *c = ir_entry(m);
        for (int32_t i = 0; i < c->ninstr; i++)
            device |= c->instr[i].op != OP_PARAMETER && c->instr[i].op != OP_TUPLE &&
                      c->instr[i].op != OP_GET_TUPLE_ELEMENT && c->instr[i].op != OP_CONSTANT;
        if (device)
            assert_int_equal(r.nclusters, 1);
        tried++;
        done(m, out, &r);
    }
    closedir(dir);
    assert_true(tried > 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cycles_reorder_example),
        cmocka_unit_test(test_cycles_contract),
        cmocka_unit_test(test_cycles_merge),
        cmocka_unit_test(test_cycles_random),
        cmocka_unit_test(test_cycles_bad_args),
        cmocka_unit_test(test_is_host_instr),
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_host_computations),
        cmocka_unit_test(test_cycle_avoidance),
        cmocka_unit_test(test_diamonds),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_while_host),
        cmocka_unit_test(test_conditional_host),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_no_inputs),
        cmocka_unit_test(test_device_only),
        cmocka_unit_test(test_host_only),
        cmocka_unit_test(test_numbering),
        cmocka_unit_test(test_control_edges),
        cmocka_unit_test(test_effects),
        cmocka_unit_test(test_shardings),
        cmocka_unit_test(test_tuple_shardings),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_extract_twice),
        cmocka_unit_test(test_cluster_module),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_host_targets_option),
        cmocka_unit_test(test_failure_injection),
        cmocka_unit_test(test_random_modules),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_xla_modules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
