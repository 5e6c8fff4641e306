/*
 * test_auto.c: the auto-sharder's parts (auto/): the mesh parser, a spec
 * made a sharding (device orders worked out by hand from the row-major
 * mesh), the alpha-beta formula, and the two solvers agreeing: variable
 * elimination and the GLPK program give the same optimum on an MLP, and
 * under a memory limit that the unconstrained optimum passes the program
 * and the Lagrangian over elimination find plans within it that cost no
 * less (the Lagrangian no less than the program); a dot whose contracting dim is
 * tiled priced as the partitioner runs it (partial sums and an all-reduce,
 * or, where its byte count says so, all-gathers and the whole dot); the
 * scatter-add of an embedding's gradient has its three ways (vocabulary,
 * hidden dim, the updates' rows) priced as the partitioner runs them; a
 * depthwise convolution tiles its batch alone; the
 * entry's calls inlined (nested ones too, a tuple's elements read
 * directly, unused inlined values gone, a side-effecting callee and a
 * user-sharded call kept); a scan's while: its state one choice per
 * element (the body's and the result's get-tuple-elements follow it), its
 * body priced four times (the trip count of JAX's pattern, of XLA's
 * known_trip_count, once where neither), a dynamic-slice never tiled on
 * the dim it indexes, the state's sharding written on the while's parts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "auto/auto.h"

static void mesh_forms(void **state)
{
    (void)state;
    AutoMesh m;
    IrDiag d = {0};
    assert_int_equal(auto_mesh_parse("2x4", &m, &d), IR_OK);
    assert_int_equal(m.naxes, 2);
    assert_int_equal(m.size[0], 2);
    assert_int_equal(m.size[1], 4);
    assert_string_equal(m.name[1], "y");
    assert_int_equal(m.ndevices, 8);
    assert_int_equal(auto_mesh_parse("data=2,model=4", &m, &d), IR_OK);
    assert_string_equal(m.name[0], "data");
    assert_string_equal(m.name[1], "model");
    char buf[64];
    auto_mesh_text(&m, buf, sizeof buf);
    assert_string_equal(buf, "data=2,model=4");
    const char *bad[] = {"", "2x", "0x2", "a=2,a=2", "a=2,4", "2x2x2x2x2", "x=", "2,4"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(auto_mesh_parse(bad[k], &m, &d), IR_EINPUT);
        assert_non_null(strstr(d.msg, "--mesh"));
        ir_diag_clear(&d);
    }
}

/* The sharding of a spec, as XLA's text. */
static void expect_sharding(const AutoMesh *m, AutoSpec s, int32_t rank, const char *want)
{
    IrArena *a = ir_arena_new();
    IrSharding *sh = auto_spec_sharding(a, m, &s, rank);
    assert_non_null(sh);
    char *t = ir_sharding_str(sh);
    assert_string_equal(t, want);
    ts_free(t);
    ir_arena_free(a);
}

static void spec_shardings(void **state)
{
    (void)state;
    AutoMesh m;
    IrDiag d = {0};
    assert_int_equal(auto_mesh_parse("data=2,model=4", &m, &d), IR_OK);
    AutoSpec s = auto_spec_replicated();
    /* data on dim 0: tile (i, j) is device i*4 + j (model replicates). */
    s.dim[0] = 0;
    expect_sharding(&m, s, 2, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
    /* model on dim 0: tile (i, j) is device j*4 + i (data replicates). */
    s = auto_spec_replicated();
    s.dim[1] = 0;
    expect_sharding(&m, s, 2, "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
    /* both on dim 1, data major: device order 0..7. */
    s.dim[0] = 1;
    s.dim[1] = 1;
    expect_sharding(&m, s, 2, "{devices=[1,8]0,1,2,3,4,5,6,7}");
    /* model on dim 0, data on dim 1: tile (i, j) is device j*4 + i. */
    s.dim[0] = 1;
    s.dim[1] = 0;
    expect_sharding(&m, s, 2, "{devices=[4,2]0,4,1,5,2,6,3,7}");
    char buf[64];
    auto_spec_text(&m, &s, 2, buf, sizeof buf);
    assert_string_equal(buf, "[model,data]");
    s.dim[0] = -1;
    auto_spec_text(&m, &s, 2, buf, sizeof buf);
    assert_string_equal(buf, "[model,-]+data");
}

static void alpha_beta(void **state)
{
    (void)state;
    AutoCost c = auto_cost_default(0);
    /* 20 us + 2*3/4 * 1e6 B / 4 GB/s = 20 + 375 us */
    assert_true(fabs(auto_coll_seconds(&c, AUTO_ALL_REDUCE, 4, 0, 1e6) - 395e-6) < 1e-12);
    /* all-gather: 20 us + 3/4 * 1e6 / 4e9 = 207.5 us */
    assert_true(fabs(auto_coll_seconds(&c, AUTO_ALL_GATHER, 4, 0, 1e6) - 207.5e-6) < 1e-12);
    /* across hosts at 10 Gb/s: 50 us + 1/2 * 1e6 * 0.8 ns = 450 us */
    assert_true(fabs(auto_coll_seconds(&c, AUTO_ALL_TO_ALL, 2, 1, 1e6) - 450e-6) < 1e-12);
    assert_true(auto_coll_seconds(&c, AUTO_ALL_REDUCE, 1, 0, 1e6) == 0);
}

/* Reshard prices at alpha 1 s and beta 1 ns a byte: a price reads as
 * "collectives + bytes x 1e-9". */
static AutoCost unit_cost(void)
{
    AutoCost c = {.flops = 1, .bytes = 1};
    for (int k = 0; k < AUTO_NCOLL; k++)
        for (int s = 0; s < 2; s++) {
            c.alpha[k][s] = 1;
            c.beta[k][s] = 1e-9;
        }
    return c;
}

static AutoSpec spec3(int8_t x, int8_t y)
{
    AutoSpec s = auto_spec_replicated();
    s.dim[0] = x;
    s.dim[1] = y;
    return s;
}

/* What the partitioner emits to reshard f32 `dims` from `from` to `to`
 * over n devices (a copy resharding its parameter): the collectives and
 * the bytes a device moves. */
static void partitioned_reshard(const IrShape *shape, const char *from, const char *to, int64_t n, int32_t *ncoll,
                                int64_t *bytes)
{
    char dims[64] = "", text[1024];
    for (int32_t d = 0, k = 0; d < shape->rank; d++)
        k += snprintf(dims + k, sizeof dims - (size_t)k, "%s%lld", d ? "," : "", (long long)shape->dims[d]);
    snprintf(text, sizeof text,
             "HloModule m, num_partitions=%lld\nENTRY e {\n  p = f32[%s] parameter(0), sharding=%s\n"
             "  ROOT c = f32[%s] copy(p), sharding=%s\n}\n",
             (long long)n, dims, from, dims, to);
    IrDiag d = {0};
    IrModule *m = NULL, *out = NULL;
    IrParseOptions po = ir_default_parse_options();
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    ShdPropagateOptions popt = {.num_devices = n};
    SpmdOptions opt = {.num_partitions = n, .num_replicas = 1};
    SpmdReport rep = {0};
    assert_int_equal(shd_propagate(m, &popt, &d), IR_OK);
    assert_int_equal(spmd_partition(m, &opt, &out, &rep, &d), IR_OK);
    *ncoll = rep.ncoll;
    *bytes = 0;
    for (int32_t k = 0; k < rep.ncoll; k++)
        *bytes += rep.coll[k].bytes_per_device;
    spmd_report_free(&rep);
    ir_module_free(out);
    ir_module_free(m);
}

/* A reshard is priced as partition/reshard.c runs it (auto/cost.c): one
 * all-gather a tiled dim, over the group of every axis on it (a layer
 * tiled over both axes of a 2x2 mesh: one collective of 4, not two of 2);
 * an all-to-all only where the partitioner exchanges (one dim's tiles
 * moved whole to an untiled dim, no tiled dim between); a cut of the shard
 * free; the whole value gathered otherwise ([x*y,-] to [x,y] on 2x4: the
 * partitioner gathers the stack whole). Hand-worked on f32[8,16,4] (2048
 * bytes) over 2x2, then every pair of specs on 2x2 and 2x4, even and
 * uneven, against the partitioner's own plan. */
static void reshard_prices(void **state)
{
    (void)state;
    AutoMesh m;
    IrDiag d = {0};
    IrArena *a = ir_arena_new();
    AutoCost c = unit_cost();
    IrShape sh;
    int64_t dims[3] = {8, 16, 4};
    assert_int_equal(ir_shape_make(a, &sh, IR_F32, 3, dims), IR_OK);
    assert_int_equal(auto_mesh_parse("2x2", &m, &d), IR_OK);
    /* With each, the kind auto_reshard_classify says and the bytes it
     * holds for the memory row: the same classifier as the price (the
     * row charged a permute as the whole value gathered, and an axis added
     * major to the one on its dim as a free cut). */
    const struct {
        AutoSpec from, to;
        double want;
        AutoReshardKind kind;
        double held;
    } hand[] = {
        /* [x*y,-,-] -> replicated: one all-gather of 4, 3/4 of 2048; held
         * the whole value */
        {spec3(0, 0), spec3(-1, -1), 1 + 1536e-9, AUTO_RESHARD_GATHER, 2048},
        /* [x,y,-] -> [-,x,y]: both dims gathered, 1/2 of 1024 then of 2048
         * (the exchange along dim 0 would leave dim 1's tiles misplaced);
         * held the whole value and the cut */
        {spec3(0, 1), spec3(1, 2), 2 + 1536e-9, AUTO_RESHARD_WHOLE, 2048 + 512},
        /* [x,y,-] -> [-,y,x]: x moves from dim 0 to dim 2 past y, which
         * keeps its dim: each device keeps its place, one all-to-all of 2
         * on a shard of 512 */
        {spec3(0, 1), spec3(2, 1), 1 + 256e-9, AUTO_RESHARD_ALL_TO_ALL, 512},
        /* [x,-,-]+y -> [-,x,-]+y: all-to-all of 2 on a shard of 1024 */
        {spec3(0, -1), spec3(1, -1), 1 + 512e-9, AUTO_RESHARD_ALL_TO_ALL, 1024},
        /* [x*y,-,-] -> [-,-,x*y]: one all-to-all of 4, 3/4 of 512 */
        {spec3(0, 0), spec3(2, 2), 1 + 384e-9, AUTO_RESHARD_ALL_TO_ALL, 512},
        /* [x,-,-]+y -> [x,y,-]: a cut of the shard */
        {spec3(0, -1), spec3(0, 1), 0, AUTO_RESHARD_NONE, 0},
        /* [-,y,-]+x -> [-,x*y,-]: x major to y, no cut of the old shard:
         * dim 1 gathered (1/2 of 2048), then sliced */
        {spec3(-1, 1), spec3(1, 1), 1 + 1024e-9, AUTO_RESHARD_WHOLE, 2048 + 512},
        /* [x,-,-]+y -> [y,-,-]+x: the same tiles elsewhere, a permute of
         * the shard; held the shard received */
        {spec3(0, -1), spec3(-1, 0), 1 + 1024e-9, AUTO_RESHARD_PERMUTE, 1024},
    };
    for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++) {
        assert_true(fabs(auto_reshard_seconds(&c, &m, 0, &sh, &hand[k].from, &hand[k].to) - hand[k].want) < 1e-12);
        AutoReshard r;
        auto_reshard_classify(&m, &sh, &hand[k].from, &hand[k].to, &r);
        assert_int_equal(r.kind, hand[k].kind);
        assert_true(fabs(r.held - hand[k].held) < 1e-9);
    }
    const struct {
        const char *mesh;
        int64_t dims[3];
    } cases[] = {{"2x2", {8, 16, 4}}, {"2x2", {6, 5, 3}}, {"2x4", {8, 16, 4}}, {"2x4", {6, 16, 3}}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        assert_int_equal(auto_mesh_parse(cases[k].mesh, &m, &d), IR_OK);
        assert_int_equal(ir_shape_make(a, &sh, IR_F32, 3, cases[k].dims), IR_OK);
        for (int i = 0; i < 16 * 16; i++) {
            AutoSpec f = spec3((int8_t)(i % 4 - 1), (int8_t)(i / 4 % 4 - 1));
            AutoSpec t = spec3((int8_t)(i / 16 % 4 - 1), (int8_t)(i / 64 - 1));
            char *fs = ir_sharding_str(auto_spec_sharding(a, &m, &f, 3));
            char *ts = ir_sharding_str(auto_spec_sharding(a, &m, &t, 3));
            int32_t n;
            int64_t bytes;
            partitioned_reshard(&sh, fs, ts, m.ndevices, &n, &bytes);
            double price = auto_reshard_seconds(&c, &m, 0, &sh, &f, &t);
            if (fabs(price - (n + (double)bytes * 1e-9)) > 1e-9)
                fail_msg("%s [%lld,%lld,%lld] %s -> %s: priced %.9f, the partitioner %d collectives, %lld bytes",
                         cases[k].mesh, (long long)sh.dims[0], (long long)sh.dims[1], (long long)sh.dims[2], fs,
                         ts, price, n, (long long)bytes);
            ts_free(fs);
            ts_free(ts);
        }
    }
    ir_arena_free(a);
}

static const char MLP[] = "HloModule mlp\n"
                          "ENTRY main {\n"
                          "  x = f32[64,128] parameter(0)\n"
                          "  w1 = f32[128,512] parameter(1)\n"
                          "  w2 = f32[512,128] parameter(2)\n"
                          "  h = f32[64,512] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                          "  a = f32[64,512] tanh(h)\n"
                          "  ROOT y = f32[64,128] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                          "}\n";

/* MLP's graph over mesh 2x2 at the default rates, pruned; *m its module. */
static void mlp_graph(IrModule **m, AutoGraph *g, IrDiag *d)
{
    IrParseOptions po = ir_default_parse_options();
    *m = NULL;
    assert_int_equal(ir_parse("mlp.hlo", MLP, strlen(MLP), &po, m, d), IR_OK);
    AutoMesh mesh;
    assert_int_equal(auto_mesh_parse("2x2", &mesh, d), IR_OK);
    AutoCost cost = auto_cost_default(0);
    assert_int_equal(auto_graph_build(*m, &mesh, &cost, 4, false, NULL, g, d), IR_OK);
    assert_int_equal(auto_graph_prune(g, true, d), IR_OK);
}

static void solvers_agree(void **state)
{
    (void)state;
    IrModule *m = NULL;
    IrDiag d = {0};
    AutoGraph g;
    mlp_graph(&m, &g, &d);
    int32_t a[64], b[64];
    assert_true(g.ngroup <= 64);
    assert_int_equal(auto_elim_solve(&g, a), 1);
    assert_int_equal(auto_ilp_solve(&g, 0, b, NULL, &d), IR_OK);
    double ca = auto_graph_cost(&g, a), cb = auto_graph_cost(&g, b);
    assert_true(fabs(ca - cb) <= 1e-9 * ca);
    /* A limit between the least memory and the optimum's. */
    double least = g.mem_fixed;
    for (int32_t k = 0; k < g.ngroup; k++) {
        double mn = g.group[k].mem[0];
        for (int32_t s = 1; s < g.group[k].nstrat; s++)
            mn = g.group[k].mem[s] < mn ? g.group[k].mem[s] : mn;
        least += mn;
    }
    double mem = auto_graph_mem(&g, a);
    assert_true(least < mem); /* the limit between them binds */
    {
        double limit = (least + mem) / 2;
        assert_int_equal(auto_ilp_solve(&g, limit, b, NULL, &d), IR_OK);
        assert_true(auto_graph_mem(&g, b) <= limit);
        assert_true(auto_graph_cost(&g, b) >= ca * (1 - 1e-9));
        /* The Lagrangian over elimination: a plan within the limit, no
         * cheaper than the program's optimum, the unary costs restored. */
        int32_t l[64];
        double before = auto_graph_cost(&g, a);
        assert_int_equal(auto_lagrange_solve(&g, limit, l, NULL), 1);
        assert_true(auto_graph_mem(&g, l) <= limit);
        assert_true(auto_graph_cost(&g, l) >= auto_graph_cost(&g, b) * (1 - 1e-9));
        assert_true(auto_graph_cost(&g, a) == before);
    }
    int32_t none[64];
    assert_int_equal(auto_lagrange_solve(&g, least / 2, none, NULL), 0);
    assert_int_equal(auto_ilp_solve(&g, least / 2, b, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "no sharding over the mesh fits the memory limit"));
    ir_diag_clear(&d);
    auto_graph_free(&g);
    ir_module_free(m);
}

/* A complete graph of n groups (ns[k] strategies each), its costs from
 * cost(edge, s, t) and unary(group, s); storage in the arrays given. */
typedef struct Clique {
    AutoGroup gr[8];
    AutoEdge ed[28];
    double cells[8192], zero[32];
} Clique;

static void clique(Clique *c, AutoGraph *g, IrComputation *comp, int32_t n, const int32_t *ns,
                   double (*cost)(int32_t, int32_t, int32_t), double (*unary)(int32_t, int32_t))
{
    memset(c, 0, sizeof *c);
    size_t used = 0;
    for (int32_t k = 0; k < n; k++) {
        c->gr[k].nstrat = ns[k];
        c->gr[k].unary = c->cells + used;
        c->gr[k].compute = c->gr[k].unary;
        c->gr[k].mem = c->zero;
        for (int32_t s = 0; s < ns[k]; s++)
            c->cells[used++] = unary(k, s);
    }
    int32_t e = 0;
    for (int32_t a = 0; a < n; a++)
        for (int32_t b = a + 1; b < n; b++, e++) {
            c->ed[e] = (AutoEdge){a, b, c->cells + used, NULL, NULL};
            for (int32_t s = 0; s < ns[a]; s++)
                for (int32_t t = 0; t < ns[b]; t++)
                    c->cells[used++] = cost(e, s, t);
        }
    assert_true(used <= sizeof c->cells / sizeof *c->cells);
    *g = (AutoGraph){.comp = comp, .ngroup = n, .group = c->gr, .nedge = e, .edge = c->ed};
}

static double mixed_cost(int32_t e, int32_t s, int32_t t)
{
    return 1e-3 * ((s * 7 + t * 3 + e) % 11);
}

static double mixed_unary(int32_t k, int32_t s)
{
    return 1e-3 * ((k + s) % 5);
}

/* Elimination's work is counted before it runs (elim.c): on 7 groups all
 * joined, 14 strategies each but one of 20, its first step makes a table
 * of 14^6 = 7.5M cells (within the 8M-cell limit) and costs 14^6 x 20 =
 * 151M sums, past the budget of 2^27: it gives up (0) at once, no table
 * made, and the integer program is the one to solve. */
static void elim_work_budget(void **state)
{
    (void)state;
    IrComputation comp = {0};
    static Clique c;
    AutoGraph g;
    int32_t ns[7] = {14, 14, 14, 14, 14, 14, 20}, choice[7];
    clique(&c, &g, &comp, 7, ns, mixed_cost, mixed_unary);
    assert_int_equal(auto_elim_solve(&g, choice), 0);
}

/* The graph's budget of elimination covers all its solves (auto.h,
 * AUTO_ELIM_GRAPH_WORK): on 5 groups all joined, 6 strategies each, one
 * solve's work is 6^4 x 6 + 6^3 x 6 + 6^2 x 6 + 6 x 6 + 6 = 9,330 sums;
 * a budget of 20,000 takes two solves, the third is refused (0, elim_out,
 * the plan left as it was), and the Lagrangian under a limit, its budget
 * spent, solves nothing (0: auto_shard's solve() then keeps its plan or
 * asks the integer program). */
static void elim_graph_budget(void **state)
{
    (void)state;
    IrComputation comp = {0};
    static Clique c;
    AutoGraph g;
    int32_t ns[5] = {6, 6, 6, 6, 6}, a[5], b[5], x[5] = {5, 5, 5, 5, 5};
    clique(&c, &g, &comp, 5, ns, mixed_cost, mixed_unary);
    g.elim_budget = 20000;
    assert_int_equal(auto_elim_solve(&g, a), 1);
    assert_int_equal(g.elim_spent, 9330);
    assert_int_equal(auto_elim_solve(&g, b), 1);
    assert_memory_equal(a, b, sizeof a);
    assert_false(g.elim_out);
    assert_int_equal(auto_elim_solve(&g, x), 0);
    assert_true(g.elim_out);
    assert_int_equal(g.elim_spent, 18660);
    for (int32_t k = 0; k < 5; k++)
        assert_int_equal(x[k], 5);
    assert_int_equal(auto_lagrange_solve(&g, 100, x, NULL), 0);
    assert_int_equal(g.elim_spent, 18660);
    /* No budget (0): solved again, the same optimum. */
    g.elim_budget = 0;
    g.elim_out = false;
    assert_int_equal(auto_elim_solve(&g, x), 1);
    assert_memory_equal(a, x, sizeof a);
}

/* Three strategies, the cost of an edge where both ends take the same:
 * on 5 groups all joined at least two edges pay (5 into 3), while the
 * relaxation spreads each group over its three at no cost, so branch
 * and bound must run. Stopped at its first subproblem
 * (auto_ilp_solve_bounded), it gives a plan no cheaper than the optimum
 * (elimination's, which the unbounded program finds), says it stopped
 * and its gap, and gives the same plan again. */
static double potts_cost(int32_t e, int32_t s, int32_t t)
{
    return s == t ? 1 + 0.1 * (e % 7) : 0;
}

static double potts_unary(int32_t k, int32_t s)
{
    return 0.01 * ((k + s) % 3);
}

static void ilp_node_bound(void **state)
{
    (void)state;
    IrComputation comp = {0};
    static Clique c;
    AutoGraph g;
    int32_t ns[5] = {3, 3, 3, 3, 3}, best[5], a[5], b[5];
    clique(&c, &g, &comp, 5, ns, potts_cost, potts_unary);
    IrDiag d = {0};
    assert_int_equal(auto_elim_solve(&g, best), 1);
    double opt = auto_graph_cost(&g, best);
    AutoIlpInfo info;
    assert_int_equal(auto_ilp_solve(&g, 0, a, &info, &d), IR_OK);
    assert_true(info.optimal && info.nodes > 1);
    assert_true(fabs(auto_graph_cost(&g, a) - opt) <= 1e-9 * opt);
    /* 1: before any integer plan (the relaxation's, rounded); 12: with
     * the best integer plan found so far. */
    for (int32_t limit = 1; limit <= 12; limit += 11) {
        assert_int_equal(auto_ilp_solve_bounded(&g, 0, limit, a, &info, &d), IR_OK);
        assert_false(info.optimal);
        assert_true(info.gap >= 0 && info.gap <= 1);
        double got = auto_graph_cost(&g, a);
        assert_true(got >= opt * (1 - 1e-9));
        assert_true(got - opt <= info.gap * got + 1e-9);
        AutoIlpInfo again;
        assert_int_equal(auto_ilp_solve_bounded(&g, 0, limit, b, &again, &d), IR_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_true(again.gap == info.gap && again.nodes == info.nodes);
    }
}

/* A duality gap (lagrange.c): two groups, each whole (cost 0) or cut
 * (less memory, at a cost): a saves 8 bytes of its 10 for 5 s, b 10 of
 * its 12 for 8 s; under 12 bytes b alone cut is the optimum (8 s). No
 * price makes it one: below 0.625 s a byte neither is cut (22 bytes),
 * between 0.625 and 0.8 a alone (14, over), above both (4 bytes, 13 s).
 * The Lagrangian's best plan is 13 s, its bound 6.6 (at 0.8: 13 - 0.8 x
 * 8), a gap of 49%: the integer program solves and its optimum is kept,
 * proven. Where the limit binds at a price (14 bytes: a alone) the
 * Lagrangian's plan is the optimum and no program runs. */
static void lagrange_gap(void **state)
{
    (void)state;
    IrComputation comp = {0};
    double unary[2][2] = {{0, 5}, {0, 8}}, mem[2][2] = {{10, 2}, {12, 2}};
    AutoGroup gr[2] = {{0}};
    for (int32_t k = 0; k < 2; k++)
        gr[k] = (AutoGroup){.nstrat = 2, .unary = unary[k], .compute = unary[k], .mem = mem[k]};
    AutoGraph g = {.comp = &comp, .ngroup = 2, .group = gr};
    int32_t choice[2];
    AutoIlpInfo how;
    assert_int_equal(auto_lagrange_solve(&g, 12, choice, &how), 1);
    assert_int_equal(choice[0], 0);
    assert_int_equal(choice[1], 1);
    assert_int_equal(how.by, AUTO_BY_ILP);
    assert_true(how.optimal && how.gap == 0);
    assert_true(fabs(how.bound - 8) < 1e-9);
    assert_true(unary[1][1] == 8 && mem[1][1] == 2); /* costs restored */
    assert_int_equal(auto_lagrange_solve(&g, 14, choice, &how), 1);
    assert_int_equal(choice[0], 1);
    assert_int_equal(choice[1], 0);
    assert_int_equal(how.by, AUTO_BY_LAGRANGE);
    assert_true(how.gap <= 0.02 && how.nodes == 0);
}

/* --explain says how the solve ended, in the text (under its first line,
 * where the plan is not proven optimal) and in the JSON ("solver"): GLPK
 * stopped at its bound of subproblems, the Lagrangian's plan above its
 * bound, or elimination's (exact). */
static void explain_solver(void **state)
{
    (void)state;
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("mlp.hlo", MLP, strlen(MLP), &po, &m, &d), IR_OK);
    AutoMesh mesh;
    assert_int_equal(auto_mesh_parse("2x2", &mesh, &d), IR_OK);
    AutoCost cost = auto_cost_default(0);
    AutoGraph g;
    assert_int_equal(auto_graph_build(m, &mesh, &cost, 4, false, NULL, &g, &d), IR_OK);
    int32_t a[64];
    assert_true(g.ngroup <= 64);
    assert_int_equal(auto_elim_solve(&g, a), 1);
    AutoIlpInfo stopped = {.gap = 0.0808, .nodes = 2000, .by = AUTO_BY_ILP, .bound = 0, .node_limit = 2000};
    AutoIlpInfo lagr = {.gap = 0.25, .by = AUTO_BY_LAGRANGE, .bound = 0};
    char *t = auto_explain_text(&g, a, "mlp", &stopped), *j = auto_explain_json(&g, a, "mlp", &stopped);
    assert_non_null(t);
    assert_non_null(j);
    const char *second = strchr(t, '\n') + 1;
    assert_true(strncmp(second, "  solver: the integer program (GLPK) stopped after 2000 subproblems", 67) == 0);
    assert_non_null(strstr(second, "its estimate at most 8.08% above the optimum's"));
    assert_non_null(strstr(j, "\"solver\": {\"by\": \"integer program\", \"optimal\": false, \"gap\": 0.0808, "
                              "\"subproblems\": 2000, \"subproblem_bound\": 2000}"));
    ts_free(t);
    ts_free(j);
    t = auto_explain_text(&g, a, "mlp", &lagr);
    j = auto_explain_json(&g, a, "mlp", &lagr);
    assert_non_null(strstr(t, "  solver: the Lagrangian on memory over elimination"));
    assert_non_null(strstr(t, "at most 25% above the optimum's"));
    assert_non_null(strstr(j, "\"solver\": {\"by\": \"lagrangian\", \"optimal\": false, \"gap\": 0.25, "));
    ts_free(t);
    ts_free(j);
    t = auto_explain_text(&g, a, "mlp", NULL);
    j = auto_explain_json(&g, a, "mlp", NULL);
    assert_null(strstr(t, "solver:"));
    assert_non_null(strstr(j, "\"solver\": {\"by\": \"elimination\", \"optimal\": true, \"gap\": 0, "
                              "\"subproblems\": 0, \"subproblem_bound\": 0}"));
    ts_free(t);
    ts_free(j);
    auto_graph_free(&g);
    ir_module_free(m);
}

/* The tie-break (tiebreak.c) on one group of three strategies, its
 * seconds (compute + communication): 90 + 10 the fastest; 96.5 + 5, 1.5%
 * slower and half the communication; 110 + 0, 10% slower. The plan
 * within 2% that communicates least is the second. Pruning on time alone
 * removed it (the first costs less whatever the neighbours do), and the
 * weight mu0 = 0.02 x 100 / 10 alone kept the first (100 + 0.2 x 10 <
 * 101.5 + 0.2 x 5). */
static void tiebreak_least_communication(void **state)
{
    (void)state;
    IrComputation comp = {0};
    AutoGroup gr = {0};
    double unary[3] = {100, 101.5, 110}, compute[3] = {90, 96.5, 110}, mem[3] = {0};
    gr.nstrat = 3;
    gr.unary = unary;
    gr.compute = compute;
    gr.mem = mem;
    AutoGraph g = {.comp = &comp, .ngroup = 1, .group = &gr};
    assert_non_null(g.arena = ir_arena_new());
    IrDiag d = {0};
    assert_int_equal(auto_graph_prune(&g, false, &d), IR_OK);
    assert_int_equal(gr.nstrat, 3); /* none dominates another in time and communication both */
    int32_t choice[1];
    assert_int_equal(auto_elim_solve(&g, choice), 1);
    assert_int_equal(choice[0], 0);
    assert_int_equal(auto_tiebreak_solve(&g, 0, 0, choice), 1);
    assert_int_equal(choice[0], 1);
    assert_true(unary[0] == 100 && unary[1] == 101.5); /* the costs put back */
    ir_arena_free(g.arena);
}

/* The tie-break counts bytes where the graph has them (wire[]), not
 * communication seconds: 80 + 20 (one collective) moving 800 bytes
 * against 61 + 40 (two) moving 100, 1% slower. By seconds the first stays
 * (mu0 = 0.02 x 100 / 20: 102 against 105, and more mu favours it more);
 * by bytes (mu0 = 2 / 800: 102 against 101.25) the second, which pruning
 * keeps as well. */
static void tiebreak_least_bytes(void **state)
{
    (void)state;
    IrComputation comp = {0};
    AutoGroup gr = {0};
    double unary[3] = {100, 101, 120}, compute[3] = {80, 61, 120}, mem[3] = {0}, wire[3] = {800, 100, 0};
    gr.nstrat = 3;
    gr.unary = unary;
    gr.compute = compute;
    gr.mem = mem;
    AutoGraph g = {.comp = &comp, .ngroup = 1, .group = &gr};
    assert_non_null(g.arena = ir_arena_new());
    IrDiag d = {0};
    int32_t choice[1];
    assert_int_equal(auto_elim_solve(&g, choice), 1);
    assert_int_equal(auto_tiebreak_solve(&g, 0, 0, choice), 1);
    assert_int_equal(choice[0], 0); /* seconds */
    gr.wire = wire;
    assert_int_equal(auto_graph_prune(&g, true, &d), IR_OK);
    assert_int_equal(gr.nstrat, 3);
    assert_int_equal(auto_elim_solve(&g, choice), 1);
    assert_int_equal(choice[0], 0);
    assert_int_equal(auto_tiebreak_solve(&g, 0, 0, choice), 1);
    assert_int_equal(choice[0], 1);
    assert_true(unary[1] == 101 && wire[1] == 100); /* the costs put back */
    ir_arena_free(g.arena);
}

/* The tie-break's second search (tiebreak.c): among the plans within 2%
 * of the fastest that communicate no more than the kept one, the one that
 * holds least at the peak. Seconds (compute + communication) and bytes:
 * 90 + 10 at 500; 90 + 10 at 300; 91 + 10 at 100, 1% slower, the same
 * communication; 86.5 + 15 at 50, more communication; 110 + 10 at 10, 20%
 * slower. The third is kept (without the search, the first: equal
 * time and communication told apart by nothing). */
static void tiebreak_least_memory(void **state)
{
    (void)state;
    IrComputation comp = {0};
    AutoGroup gr = {0};
    double unary[5] = {100, 100, 101, 101.5, 120}, compute[5] = {90, 90, 91, 86.5, 110}, mem[5] = {500, 300, 100, 50, 10};
    gr.nstrat = 5;
    gr.unary = unary;
    gr.compute = compute;
    gr.mem = mem;
    AutoGraph g = {.comp = &comp, .ngroup = 1, .group = &gr};
    int32_t choice[1];
    assert_int_equal(auto_elim_solve(&g, choice), 1);
    assert_int_equal(choice[0], 0);
    assert_int_equal(auto_tiebreak_solve(&g, 0, 0, choice), 1);
    assert_int_equal(choice[0], 2);
    assert_true(unary[2] == 101 && mem[2] == 100); /* the costs put back */
}

/* The strategy of node i whose output spec is `out` and whose operand 0
 * arrives with axis 0 on dim `dim0`. */
static const AutoStrategy *find(const AutoStrategy *s, int32_t n, AutoSpec out, int8_t dim0)
{
    for (int32_t k = 0; k < n; k++)
        if (auto_spec_equal(&s[k].out, &out) && s[k].in[0].dim[0] == dim0)
            return &s[k];
    return NULL;
}

static const char ATTN_OUT[] =
    "HloModule o\n"
    "ENTRY main {\n"
    "  cr = f32[8,32,64] parameter(0)\n"
    "  wo = f32[64,64] parameter(1)\n"
    "  r = f32[8,32,256] parameter(2)\n"
    "  w2 = f32[256,64] parameter(3)\n"
    "  o0 = f32[8,32,64] dot(cr, wo), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
    "  y0 = f32[8,32,64] dot(r, w2), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
    "  ROOT t = (f32[8,32,64], f32[8,32,64]) tuple(o0, y0)\n"
    "}\n";

/* A module parsed, over mesh `4` at the default rates, and an arena for
 * strategies. */
typedef struct OnFour {
    IrModule *m;
    const IrComputation *c;
    AutoMesh mesh;
    AutoCost cost;
    IrArena *a;
    IrDiag d;
} OnFour;

static void on_four(OnFour *f, const char *text)
{
    IrParseOptions po = ir_default_parse_options();
    memset(f, 0, sizeof *f);
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &po, &f->m, &f->d), IR_OK);
    assert_int_equal(auto_mesh_parse("4", &f->mesh, &f->d), IR_OK);
    f->cost = auto_cost_default(0);
    f->c = ir_entry(f->m);
    f->a = ir_arena_new();
    assert_non_null(f->a);
}

static void on_four_free(OnFour *f)
{
    ir_arena_free(f->a);
    ir_module_free(f->m);
}

static void contracted_dots(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, ATTN_OUT);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    AutoSpec rep = auto_spec_replicated();
    /* o0 with its contracting dim (cr's dim 2) over 4 devices: the
     * partitioner counts gathering cr and wo whole, 65536 + 16384 bytes,
     * against twice the output, 131072: it gathers. Compute: the whole
     * dot, 2*8*32*64*64 FLOPs at 20 GFLOP/s, and 65536 bytes at 5 GB/s;
     * two all-gathers: 2 x 20 us + 3/4 x 81920 B / 4 GB/s. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, 4, &s, &n, &f.d), IR_OK);
    const AutoStrategy *g = find(s, n, rep, 2);
    assert_non_null(g);
    assert_true(fabs(g->compute - (2.0 * 8 * 32 * 64 * 64 / 20e9 + 65536 / 5e9)) < 1e-12);
    assert_true(fabs(g->comm - (40e-6 + 0.75 * 81920 / 4e9)) < 1e-12);
    /* y0 likewise: gathering r and w2 whole, 262144 + 65536 bytes, is more
     * than 131072: partial sums, a quarter of the FLOPs each, and one
     * all-reduce: 20 us + 2 x 3/4 x 65536 B / 4 GB/s. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, 5, &s, &n, &f.d), IR_OK);
    g = find(s, n, rep, 2);
    assert_non_null(g);
    assert_true(fabs(g->compute - (2.0 * 8 * 32 * 64 * 256 / 4 / 20e9 + 65536 / 5e9)) < 1e-12);
    assert_true(fabs(g->comm - (20e-6 + 1.5 * 65536 / 4e9)) < 1e-12);
    on_four_free(&f);
}

/* A weight's gradient: gw[128,64] = x[256,128]^T . g[256,64], the batch
 * contracted; and an activation's dot, h[8,32,64] . w[64,64]. */
static const char WGRAD[] = "HloModule w\n"
                            "ENTRY main {\n"
                            "  x = f32[256,128] parameter(0)\n"
                            "  g = f32[256,64] parameter(1)\n"
                            "  h = f32[8,32,64] parameter(2)\n"
                            "  w = f32[64,64] parameter(3)\n"
                            "  gw = f32[128,64] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                            "  o = f32[8,32,64] dot(h, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
                            "  ROOT t = (f32[128,64], f32[8,32,64]) tuple(gw, o)\n"
                            "}\n";

/* The batch contracted over 4 devices: the partial sums all-reduced into a
 * replicated gradient (20 us + 2 x 3/4 x 32768 B / 4 GB/s, 32768 bytes
 * held), or reduce-scattered into its rows or its columns as FSDP holds
 * it (20 us + 3/4 x 32768 B / 4 GB/s, 8192 bytes held), the same work;
 * an activation's dot (a 3-dim result) keeps its all-reduce alone. */
static void reduce_scatter_strategies(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, WGRAD);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, 4, &s, &n, &f.d), IR_OK);
    const AutoStrategy *ar = NULL, *rs[2] = {NULL, NULL};
    for (int32_t k = 0; k < n; k++)
        if (s[k].in[0].dim[0] == 0 && s[k].in[1].dim[0] == 0) {
            if (s[k].out.dim[0] < 0)
                ar = &s[k];
            else
                rs[s[k].out.dim[0]] = &s[k];
        }
    assert_non_null(ar);
    assert_true(fabs(ar->comm - (20e-6 + 1.5 * 32768 / 4e9)) < 1e-12);
    assert_int_equal(ar->bytes, 32768);
    for (int k = 0; k < 2; k++) {
        assert_non_null(rs[k]);
        assert_true(fabs(rs[k]->comm - (20e-6 + 0.75 * 32768 / 4e9)) < 1e-12);
        assert_int_equal(rs[k]->bytes, 8192);
        assert_true(rs[k]->compute == ar->compute);
    }
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, 5, &s, &n, &f.d), IR_OK);
    for (int32_t k = 0; k < n; k++)
        assert_false(s[k].in[0].dim[0] == 2 && s[k].out.dim[0] >= 0);
    on_four_free(&f);
}

/* The same gradient in f16, and an f16 sum over rows: the partitioner
 * sums their partials in f32 (partition/spmd_dot.c's wide_dot,
 * spmd_reduce.c's wide_sum), and an s32 sum, in its own type. */
static const char WGRAD_F16[] = "HloModule w\n"
                                "add {\n"
                                "  a = f16[] parameter(0)\n"
                                "  b = f16[] parameter(1)\n"
                                "  ROOT c = f16[] add(a, b)\n"
                                "}\n"
                                "addi {\n"
                                "  a = s32[] parameter(0)\n"
                                "  b = s32[] parameter(1)\n"
                                "  ROOT c = s32[] add(a, b)\n"
                                "}\n"
                                "ENTRY main {\n"
                                "  x = f16[256,128] parameter(0)\n"
                                "  g = f16[256,64] parameter(1)\n"
                                "  k = s32[256,64] parameter(2)\n"
                                "  z = f16[] constant(0)\n"
                                "  zi = s32[] constant(0)\n"
                                "  gw = f16[128,64] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                                "  sg = f16[64] reduce(g, z), dimensions={0}, to_apply=add\n"
                                "  sk = s32[64] reduce(k, zi), dimensions={0}, to_apply=addi\n"
                                "  ROOT t = (f16[128,64], f16[64], s32[64]) tuple(gw, sg, sk)\n"
                                "}\n";

/* The batch contracted over 4 devices: the f16 gradient's 16384 bytes
 * (held) move as f32 partial sums, 32768: all-reduced, 20 us + 2 x 3/4 x
 * 32768 B / 4 GB/s, or reduce-scattered, 20 us + 3/4 x 32768 B / 4 GB/s.
 * Priced at the f16 bytes, the lowp program of
 * tests/jax/test_auto_heldout45.py moved 576 bytes on 4 where its plan
 * counted 288. The f16 sum's 128 bytes move as 256; the s32 sum's 256 as
 * they are. */
static void wide_partial_sums(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, WGRAD_F16);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "gw"), &s, &n, &f.d),
                     IR_OK);
    const AutoStrategy *ar = NULL, *rs = NULL;
    for (int32_t k = 0; k < n; k++)
        if (s[k].in[0].dim[0] == 0 && s[k].in[1].dim[0] == 0) {
            if (s[k].out.dim[0] < 0)
                ar = &s[k];
            else if (s[k].out.dim[0] == 0)
                rs = &s[k];
        }
    assert_non_null(ar);
    assert_non_null(rs);
    assert_int_equal(ar->bytes, 16384);
    assert_true(fabs(ar->comm - (20e-6 + 1.5 * 32768 / 4e9)) < 1e-12);
    assert_int_equal(rs->bytes, 4096);
    assert_true(fabs(rs->comm - (20e-6 + 0.75 * 32768 / 4e9)) < 1e-12);
    AutoSpec rep = auto_spec_replicated();
    const char *sums[2] = {"sg", "sk"};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, sums[k]), &s, &n, &f.d),
                         IR_OK);
        const AutoStrategy *r = find(s, n, rep, 0);
        assert_non_null(r);
        assert_true(fabs(r->comm - (20e-6 + 1.5 * 256 / 4e9)) < 1e-12);
    }
    on_four_free(&f);
}

/* An embedding's gradient: 12 rows of updates added into a 16-row table
 * at ids; and a scatter whose combiner is no simple one. */
static const char SCATTER[] =
    "HloModule s\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "second {\n"
    "  a = f32[] parameter(0)\n"
    "  ROOT b = f32[] parameter(1)\n"
    "}\n"
    "ENTRY main {\n"
    "  z = f32[16,8] parameter(0)\n"
    "  ids = s32[12,1] parameter(1)\n"
    "  upd = f32[12,8] parameter(2)\n"
    "  g = f32[16,8] scatter(z, ids, upd), update_window_dims={1}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
    "  h = f32[16,8] scatter(z, ids, upd), update_window_dims={1}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=second\n"
    "  ROOT t = (f32[16,8], f32[16,8]) tuple(g, h)\n"
    "}\n";

static const AutoStrategy *find_out(const AutoStrategy *s, int32_t n, int8_t out_dim, int8_t ids_dim)
{
    for (int32_t k = 0; k < n; k++)
        if (s[k].out.dim[0] == out_dim && s[k].in[1].dim[0] == ids_dim)
            return &s[k];
    return NULL;
}

static void scatter_strategies(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, SCATTER);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "g"), &s, &n, &f.d), IR_OK);
    /* replicated; the vocabulary; the hidden dim; the updates' rows */
    assert_int_equal(n, 4);
    /* The table's rows over 4: ids and updates whole on every device, each
     * keeps its rows (no collective). */
    const AutoStrategy *v = find_out(s, n, 0, -1);
    assert_non_null(v);
    assert_int_equal(v->in[0].dim[0], 0);
    assert_int_equal(v->in[2].dim[0], -1);
    assert_true(v->comm == 0);
    assert_int_equal(v->bytes, 16 * 8 * 4 / 4);
    /* The hidden dim: the table's and the updates' columns. */
    const AutoStrategy *h = find_out(s, n, 1, -1);
    assert_non_null(h);
    assert_int_equal(h->in[2].dim[0], 1);
    assert_true(h->comm == 0);
    /* The updates' rows: partial tables and an all-reduce of 512 bytes
     * (twice, 1024, by the partitioner's count) against gathering ids and
     * updates, 48 + 384 = 432 bytes: it gathers; two all-gathers,
     * 2 x 20 us + 3/4 x 432 B / 4 GB/s, and the whole scatter. */
    const AutoStrategy *r = find_out(s, n, -1, 0);
    assert_non_null(r);
    assert_int_equal(r->in[2].dim[0], 0);
    assert_true(fabs(r->comm - (40e-6 + 0.75 * 432 / 4e9)) < 1e-12);
    assert_true(fabs(r->compute - (12.0 * 8 / 20e9 + 512 / 5e9)) < 1e-12);
    /* Another combiner: no partial tables to merge, so no rows role. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "h"), &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 3);
    assert_null(find_out(s, n, -1, 0));
    on_four_free(&f);
}

/* The same with 14 rows of updates: each device scatters its rows of a
 * padded tile, the indices' padding rows dropped (partition/spmd_gather.c
 * spmd_scatter), so the rows role is there though 4 does not divide 14
 * (the held-out segment_sum on 4 and 8 had no plan scattering each
 * device's rows and fitted no limit of 1.1x data parallel's peak). */
static void scatter_uneven_rows(void **state)
{
    (void)state;
    char text[sizeof SCATTER];
    strcpy(text, SCATTER);
    for (char *p = text; (p = strstr(p, "[12,")) != NULL; p += 4)
        memcpy(p + 1, "14", 2);
    OnFour f;
    on_four(&f, text);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "g"), &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 4);
    const AutoStrategy *r = find_out(s, n, -1, 0);
    assert_non_null(r);
    assert_int_equal(r->in[2].dim[0], 0);
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "h"), &s, &n, &f.d), IR_OK);
    assert_null(find_out(s, n, -1, 0));
    on_four_free(&f);
}

/* A depthwise convolution (8 feature groups) and a plain one. */
static const char CONVS[] =
    "HloModule c\n"
    "ENTRY main {\n"
    "  x = f32[8,6,6,8] parameter(0)\n"
    "  kd = f32[3,3,1,8] parameter(1)\n"
    "  k = f32[3,3,8,8] parameter(2)\n"
    "  d = f32[8,6,6,8] convolution(x, kd), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
    "feature_group_count=8\n"
    "  c = f32[8,6,6,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
    "  ROOT t = (f32[8,6,6,8], f32[8,6,6,8]) tuple(d, c)\n"
    "}\n";

static void grouped_convolution(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, CONVS);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    /* Feature groups: replicated, the batch over 4 (the kernel whole);
     * 2 x 8*6*6*8 outputs x 9 taps FLOPs, a quarter each. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "d"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].in[0].dim[0], 0);
    assert_int_equal(s[1].in[1].dim[0], -1);
    assert_true(fabs(s[1].compute - (2.0 * 8 * 6 * 6 * 8 * 9 / 4 / 20e9 + 8 * 6 * 6 * 8 * 4 / 4 / 5e9)) < 1e-12);
    /* Or a spatial dim (6 rows over 4: tiles of 2, the last of padding
     * alone) with the input's, the kernel whole, each device taking a
     * row from each neighbour (pad 1_1, size 3): two collective-permutes
     * of one row of its shard, 8 x 6 x 8 floats (1536 bytes), each priced
     * as the all-to-all over 2 (alpha 20 us, half the bytes at 4 GB/s). */
    assert_int_equal(n, 4);
    assert_int_equal(s[2].out.dim[0], 1);
    assert_int_equal(s[2].in[0].dim[0], 1);
    assert_int_equal(s[2].in[1].dim[0], -1);
    assert_true(fabs(s[2].comm - 2 * (20e-6 + 1536 / 4e9)) < 1e-12);
    /* ... and its rows masked (6 elementwise passes over its 3072-byte
     * input shard at 5 GB/s: partition/spmd_conv.c's mask_rows). */
    assert_true(s[2].compute > 6 * 3072 / 5e9);
    assert_int_equal(s[3].out.dim[0], 2);
    assert_int_equal(s[3].in[0].dim[0], 2);
    /* Without groups: the output feature and the input feature too. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "c"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 6);
    on_four_free(&f);
}

/* Shapes 4 devices do not divide: rows of 7 and 10. */
static const char UNEVEN[] =
    "HloModule uneven\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[7,10] parameter(0)\n"
    "  g = f32[10] parameter(1)\n"
    "  gb = f32[7,10] broadcast(g), dimensions={1}\n"
    "  e = f32[7,10] multiply(x, gb)\n"
    "  z = f32[] constant(0)\n"
    "  r = f32[10] reduce(e, z), dimensions={0}, to_apply=add\n"
    "  s = f32[3,4] slice(x), slice={[0:3], [0:4]}\n"
    "  u = f32[3,4] negate(s)\n"
    "  o = f32[1,3] parameter(2)\n"
    "  ROOT t = (f32[10], f32[3,4]) tuple(r, u)\n"
    "}\n";

/* An output dim the partitioner pads may be cut into unequal tiles (7
 * rows over 4: tiles of 2, the last one row of padding), priced at its
 * largest tile; a contracted dim, or an op the partitioner does not pad
 * (slice), only where the tiles divide. A padded dim may take more tiles
 * than it has elements (3 rows over 4: one of padding alone, as hand plans
 * cut a batch of 4 over 8), priced at its padded tile; a dim of one
 * element never.
 * A broadcast of a parameter leads its own group (its rows may be tiled
 * where the parameter is not); an elementwise op follows a computed
 * operand, never a parameter. */
static void uneven_tiles(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, UNEVEN);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    /* e: replicated, rows over 4 (7 = 2+2+2+1), columns over 4 (10 = 3+3+3+1). */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "e"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].bytes, 2 * 10 * 4);
    assert_int_equal(s[1].in[0].dim[0], 0);
    assert_int_equal(s[2].out.dim[0], 1);
    assert_int_equal(s[2].bytes, 7 * 3 * 4);
    /* r: the reduced rows (7) do not divide: replicated or its 10 outputs. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "r"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].bytes, 3 * 4);
    assert_true(s[1].comm == 0);
    /* s: a slice is not padded: 3 rows and 4 columns, only 4 divides. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "s"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 1);
    /* u = -s: replicated, its 3 rows over 4 (tiles of one row, the last
     * padding: 4 elements a device), its 4 columns over 4 (3 elements). */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "u"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].bytes, 1 * 4 * 4);
    assert_int_equal(s[2].out.dim[0], 1);
    assert_int_equal(s[2].bytes, 3 * 1 * 4);
    assert_true(s[1].compute > s[2].compute);
    /* o f32[1,3]: its 3 columns over 4, its one row never. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "o"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s[1].out.dim[0], 1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "gb")), -1);
    /* e = x * gb follows gb, not the parameter x: an elementwise op over a
     * parameter (an SGD update) may run where the parameter is not. */
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "e")), 1);
    on_four_free(&f);
}

/* A causal mask broadcast over the batch: select(mask, scores, -inf)
 * follows the scores, not the mask's broadcast, whose operand (the [8,8]
 * mask) has no batch dim to tile; the broadcast of the mask, computed
 * from iotas alone, leads a group of its own, tiled on the batch as the
 * select is (a rotary table broadcast over batch and heads, held whole in
 * its table's group, held grouped-query attention's peak at 1.29x data
 * parallel's on 8 devices). */
static const char MASKED[] =
    "HloModule masked\n"
    "mx {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[4,8,8] parameter(0)\n"
    "  i0 = s32[8,8] iota(), iota_dimension=0\n"
    "  i1 = s32[8,8] iota(), iota_dimension=1\n"
    "  m = pred[8,8] compare(i0, i1), direction=GE\n"
    "  mb = pred[4,8,8] broadcast(m), dimensions={1,2}\n"
    "  s = f32[4,8,8] exponential(x)\n"
    "  c = f32[] constant(-1e9)\n"
    "  cb = f32[4,8,8] broadcast(c), dimensions={}\n"
    "  r = f32[4,8,8] select(mb, s, cb)\n"
    "  b = f32[8] parameter(1)\n"
    "  b1 = f32[1,8] reshape(b)\n"
    "  b2 = f32[1,8] broadcast(b1), dimensions={0,1}\n"
    "  b3 = f32[8] reshape(b2)\n"
    "  bw = f32[4,8,8] broadcast(b3), dimensions={2}\n"
    "  o = f32[4,8,8] add(r, bw)\n"
    "  sm = f32[4,8] reduce(s, c), dimensions={2}, to_apply=mx\n"
    "  sb = f32[4,8,8] broadcast(sm), dimensions={0,1}\n"
    "  ROOT q = f32[4,8,8] subtract(o, sb)\n"
    "}\n";

static void mask_broadcast_followed_last(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, MASKED);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "r")), 1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "mb")), -1);
    /* A computed value's broadcast keeps following it. */
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "sb")), 0);
    /* JAX's bias, reshaped to [1,8] and back before it meets the rows, is
     * still a parameter's broadcast: it leads a group of its own. */
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "bw")), -1);
    on_four_free(&f);
}

/* AdaFactor's factored moment: outer(vr, vc) / |r|^2 (the rows' moment
 * a mean over the gradient's columns). Each factor's broadcast and the
 * scalar's lead groups of their own: following the rows' group,
 * replicated under Megatron's plan, the [8,6] factor was held whole where
 * the product is tiled on its columns. */
static const char OUTER[] =
    "HloModule outer\n"
    "sum {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  g = f32[8,6] parameter(0)\n"
    "  vc = f32[6] parameter(1)\n"
    "  zero = f32[] constant(0)\n"
    "  r = f32[8] reduce(g, zero), dimensions={1}, to_apply=sum\n"
    "  c = f32[6] exponential(vc)\n"
    "  rb = f32[8,6] broadcast(r), dimensions={0}\n"
    "  cb = f32[8,6] broadcast(c), dimensions={1}\n"
    "  p = f32[8,6] multiply(rb, cb)\n"
    "  m = f32[] dot(r, r), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  mb = f32[8,6] broadcast(m), dimensions={}\n"
    "  q = f32[8,6] divide(p, mb)\n"
    "  rq = f32[8,6] broadcast(r), dimensions={0}\n"
    "  ROOT o = f32[8,6] add(q, rq)\n"
    "}\n";

static void factor_broadcasts_lead(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, OUTER);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "p")), -1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "rb")), -1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "cb")), -1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "mb")), -1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "q")), 0);
    /* The rows broadcast into an op that follows q: it keeps following r. */
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "rq")), 0);
    on_four_free(&f);
}

/* Batch norm in eval mode: the folded scale rsqrt(var + eps) * g, a [C]
 * value computed from parameters alone, broadcast over [N,H,W,C], leads a
 * group of its own: following its operand, replicated, the broadcast was
 * held whole on each device where the activation's rows are tiled. */
static const char FOLDED[] =
    "HloModule folded\n"
    "ENTRY main {\n"
    "  x = f32[4,6,6,8] parameter(0)\n"
    "  g = f32[8] parameter(1)\n"
    "  v = f32[8] parameter(2)\n"
    "  eps = f32[] constant(1e-05)\n"
    "  epsb = f32[8] broadcast(eps), dimensions={}\n"
    "  ve = f32[8] add(v, epsb)\n"
    "  rs = f32[8] rsqrt(ve)\n"
    "  s = f32[8] multiply(rs, g)\n"
    "  sb = f32[4,6,6,8] broadcast(s), dimensions={3}\n"
    "  t = f32[4,6,6,8] tanh(x)\n"
    "  ROOT y = f32[4,6,6,8] multiply(t, sb)\n"
    "}\n";

static void folded_scale_broadcast_leads(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, FOLDED);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "sb")), -1);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "s")), 0);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "y")), 0); /* follows t */
    on_four_free(&f);
}

/* XLA's memory annotations are identities the partitioner runs shard by
 * shard: strategies as an elementwise op, following the operand; another
 * custom-call is opaque. */
static const char ANNOTATIONS[] =
    "HloModule ann\n"
    "ENTRY main {\n"
    "  x = f32[8,6] parameter(0)\n"
    "  h = f32[8,6] custom-call(x), custom_call_target=\"MoveToHost\"\n"
    "  o = f32[8,6] custom-call(h), custom_call_target=\"my_kernel\"\n"
    "  ROOT t = (f32[8,6], f32[8,6]) tuple(h, o)\n"
    "}\n";

static void identity_custom_calls(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, ANNOTATIONS);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    int32_t h = ir_find_instr(f.c, "h"), o = ir_find_instr(f.c, "o");
    /* Replicated, the rows over 4, the columns over 4 (6: tiles of 2, the last padding). */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, h, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].in[0].dim[0], 0);
    assert_int_equal(auto_follows(f.c, h), 0);
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, o, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(auto_follows(f.c, o), -1);
    on_four_free(&f);
}

/* A reshape keeps a dim that maps one to one in unequal tiles, as the
 * partitioner pads it (JAX's softmax row maximum [6,130] -> [6,130,1] over
 * 4 devices: 2,2,2,0); a dim that merges others only in equal ones. */
static const char UNEVEN_RESHAPES[] =
    "HloModule reshapes\n"
    "ENTRY main {\n"
    "  x = f32[6,10] parameter(0)\n"
    "  e = f32[6,10] exponential(x)\n"
    "  r = f32[6,10,1] reshape(e)\n"
    "  m = f32[60] reshape(e)\n"
    "  ROOT t = (f32[6,10,1], f32[60]) tuple(r, m)\n"
    "}\n";

static void uneven_reshape_dims(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, UNEVEN_RESHAPES);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    int32_t r = ir_find_instr(f.c, "r"), m = ir_find_instr(f.c, "m");
    /* Replicated, the 6 rows over 4 (tiles of 2, the last padding), the 10 columns over 4. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, r, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[1].out.dim[0], 0);
    assert_int_equal(s[1].in[0].dim[0], 0);
    assert_int_equal(s[2].out.dim[0], 1);
    /* [6,10] merged into [60]: its rows do not split into 4 equal tiles. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, m, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(s[0].out.dim[0], -1);
    /* Following the row-tiled exponential, the reshape keeps its rows tiled. */
    AutoSpec rows = {{0, -1, -1, -1}};
    AutoStrategy follow;
    assert_int_equal(auto_follow(f.a, &f.mesh, &f.cost, f.c, r, 0, &rows, &follow, &f.d), IR_OK);
    assert_int_equal(follow.out.dim[0], 0);
    on_four_free(&f);
}

/* A max-pool, an fft, a topk, a sort, a reverse and a batch-norm-inference
 * (auto/strategy_window.c, strategy_local.c): the pool's one-row dims tile
 * alone, its window dim with a halo; the others' batch dims tile, the dims
 * they work on never (the batch-norm's every dim); the topk's indices
 * follow it. */
static const char WINDOWS[] =
    "HloModule pool\n"
    "max {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(a, b)\n"
    "}\n"
    "lt {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT c = pred[] compare(a, b), direction=LT\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[8,16,6] parameter(0)\n"
    "  ninf = f32[] constant(-inf)\n"
    "  p = f32[8,8,6] reduce-window(x, ninf), window={size=1x3x1 stride=1x2x1 pad=0_0x1_0x0_0}, to_apply=max\n"
    "  c = c64[8,4,6] parameter(1)\n"
    "  f = c64[8,4,6] fft(c), fft_type=FFT, fft_length={6}\n"
    "  y = f32[8,6] parameter(2)\n"
    "  tk = (f32[8,2], s32[8,2]) topk(y), k=2, largest=true\n"
    "  ti = s32[8,2] get-tuple-element(tk), index=1\n"
    "  so = f32[8,6] sort(y), dimensions={1}, to_apply=lt\n"
    "  rv = f32[8,6] reverse(so), dimensions={1}\n"
    "  sc = f32[6] parameter(3)\n"
    "  bn = f32[8,6] batch-norm-inference(rv, sc, sc, sc, sc), epsilon=0.001, feature_index=1\n"
    "  ROOT t = (f32[8,8,6], c64[8,4,6], s32[8,2], f32[8,6]) tuple(p, f, ti, bn)\n"
    "}\n";

static void windows_and_ffts(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, WINDOWS);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    AutoSpec rows = auto_spec_replicated(), win = rows;
    rows.dim[0] = 0;
    win.dim[0] = 1;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "p"), &s, &n, &f.d),
                     IR_OK);
    /* Replicated and each dim over 4 (dim 2, 6 over 4: padded tiles). */
    assert_int_equal(n, 4);
    const AutoStrategy *r = find(s, n, rows, 0), *w = find(s, n, win, 1);
    assert_non_null(r);
    assert_non_null(w);
    assert_true(r->comm == 0);
    assert_int_equal(w->in[0].dim[0], 1);
    /* 16 rows over 4 (4 each), 8 windows (2 each) of 3 at stride 2 from
     * row -1: each device takes one row from its left neighbour, 8 x 6
     * floats = 192 bytes: alpha + 192 B / 4 GB/s. */
    assert_true(fabs(w->comm - (20e-6 + 192 / 4e9)) < 1e-12);
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "f"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 3); /* replicated, dim 0, dim 1: never the transformed dim 2 */
    for (int32_t k = 0; k < n; k++) {
        assert_true(s[k].out.dim[0] != 2 && s[k].comm == 0);
        assert_true(auto_spec_equal(&s[k].in[0], &s[k].out));
    }
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "tk"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 2); /* replicated, dim 0 */
    assert_true(s[1].out.dim[0] == 0 && s[1].in[0].dim[0] == 0 && s[1].comm == 0);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "ti")), 0);
    /* A sort and a reverse along dim 1: dim 0 alone tiles. */
    const char *along1[] = {"so", "rv"};
    for (int32_t k = 0; k < 2; k++) {
        assert_int_equal(
            auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, along1[k]), &s, &n, &f.d), IR_OK);
        assert_int_equal(n, 2);
        assert_true(s[1].out.dim[0] == 0 && s[1].in[0].dim[0] == 0 && s[1].comm == 0);
    }
    /* batch-norm-inference: every dim; the features over 4, the vectors with them. */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "bn"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 3);
    assert_true(s[2].out.dim[0] == 1 && s[2].in[0].dim[0] == 1 && s[2].comm == 0);
    for (int32_t i = 1; i < 5; i++)
        assert_int_equal(s[2].in[i].dim[0], 0);
    on_four_free(&f);
}

/* A batch-norm-training and its grad (auto/strategy_local.c,
 * strategy_tuple.c): every dim of x tiles; with the rows tiled the
 * per-feature sums are completed by two all-reduces of the vectors, with
 * the features tiled nothing moves; the tuple's vectors take the feature
 * dim's axes alone, and their get-tuple-elements read that projection. */
static const char NORM_TRAINING[] =
    "HloModule bn\n"
    "ENTRY main {\n"
    "  x = f32[16,8] parameter(0)\n"
    "  sc = f32[8] parameter(1)\n"
    "  of = f32[8] parameter(2)\n"
    "  tr = (f32[16,8], f32[8], f32[8]) batch-norm-training(x, sc, of), epsilon=0.001, feature_index=1\n"
    "  y = f32[16,8] get-tuple-element(tr), index=0\n"
    "  mu = f32[8] get-tuple-element(tr), index=1\n"
    "  va = f32[8] get-tuple-element(tr), index=2\n"
    "  gr = (f32[16,8], f32[8], f32[8]) batch-norm-grad(x, sc, mu, va, y), epsilon=0.001, feature_index=1\n"
    "  ROOT dx = f32[16,8] get-tuple-element(gr), index=0\n"
    "}\n";

static void norm_training(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, NORM_TRAINING);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    AutoSpec rows = auto_spec_replicated(), feats = rows;
    rows.dim[0] = 0;
    feats.dim[0] = 1;
    const char *ops[] = {"tr", "gr"};
    for (int32_t k = 0; k < 2; k++) {
        int32_t i = ir_find_instr(f.c, ops[k]);
        assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, i, &s, &n, &f.d), IR_OK);
        assert_int_equal(n, 3); /* replicated, the rows, the features */
        const AutoStrategy *r = find(s, n, rows, 0), *c = find(s, n, feats, 1);
        assert_non_null(r);
        assert_non_null(c);
        /* Two all-reduces of the 8 sums (32 bytes) over 4:
         * 2 x (20 us + 2 x 3/4 x 32 B / 4 GB/s). */
        assert_true(fabs(r->comm - 2 * (20e-6 + 1.5 * 32 / 4e9)) < 1e-15);
        assert_true(c->comm == 0);
        assert_int_equal(r->in[0].dim[0], 0);
        assert_int_equal(r->in[1].dim[0], -1); /* the vectors whole */
        assert_int_equal(c->in[1].dim[0], 0);  /* along the features */
        /* The result: x's rows tiled, the vectors replicated. */
        IrSharding *sh = auto_result_sharding(f.a, &f.mesh, &f.c->instr[i], &r->out);
        assert_non_null(sh);
        assert_int_equal(sh->kind, SHD_TUPLE);
        assert_true(!shd_is_replicated(&sh->tuple[0]) && shd_is_replicated(&sh->tuple[1]) &&
                    shd_is_replicated(&sh->tuple[2]));
        sh = auto_result_sharding(f.a, &f.mesh, &f.c->instr[i], &c->out);
        assert_true(sh && !shd_is_replicated(&sh->tuple[1]) && shd_tiles(&sh->tuple[1], 0) == 4);
    }
    /* The mean follows the training, reading the feature projection:
     * none under the rows' spec, 8 floats' shape in x's dims. */
    int32_t mu = ir_find_instr(f.c, "mu");
    assert_int_equal(auto_follows(f.c, mu), 0);
    AutoSpec el;
    IrShape es;
    int64_t dims[IR_MAX_RANK];
    assert_true(auto_element_spec(f.c, &f.c->instr[mu], &rows, &el, &es, dims));
    assert_true(auto_spec_equal(&el, &(AutoSpec){{-1, -1, -1, -1}}));
    assert_int_equal(ir_shape_bytes(&es), 32);
    assert_true(auto_element_spec(f.c, &f.c->instr[mu], &feats, &el, &es, dims));
    assert_true(auto_spec_equal(&el, &feats));
    assert_false(auto_element_spec(f.c, &f.c->instr[ir_find_instr(f.c, "y")], &rows, &el, &es, dims));
    on_four_free(&f);
}

/* A ragged-dot (auto/strategy_ragged.c): its columns (from the rhs) tile
 * with no collective, its contracting dim alone with an all-reduce of the
 * whole result; its ragged rows never; a ragged dim that is contracted has
 * no strategy. */
static const char RAGGED[] =
    "HloModule ragged\n"
    "ENTRY main {\n"
    "  l = f32[64,16] parameter(0)\n"
    "  w = f32[4,16,32] parameter(1)\n"
    "  g = s32[4] parameter(2)\n"
    "  r = f32[64,32] ragged-dot(l, w, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
    "lhs_ragged_dims={0}, rhs_group_dims={0}\n"
    "  w5 = f32[16,32] parameter(3)\n"
    "  r3 = f32[4,64,32] ragged-dot(l, w5, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
    "lhs_ragged_dims={1}\n"
    "  ROOT t = (f32[64,32], f32[4,64,32]) tuple(r, r3)\n"
    "}\n";

static void ragged_dot(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, RAGGED);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "r"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 3); /* replicated, the columns, the contracting dim */
    AutoSpec cols = auto_spec_replicated();
    cols.dim[0] = 1;
    const AutoStrategy *c = find(s, n, cols, -1), *k = find(s, n, auto_spec_replicated(), 1);
    assert_non_null(c);
    assert_non_null(k);
    assert_true(c->comm == 0 && c->in[0].dim[0] == -1 && c->in[1].dim[0] == 2 && c->in[2].dim[0] == -1);
    assert_true(k->in[0].dim[0] == 1 && k->in[1].dim[0] == 1);
    /* The whole result, 8192 bytes, all-reduced over 4. */
    assert_true(fabs(k->comm - (20e-6 + 1.5 * 8192 / 4e9)) < 1e-15);
    for (int32_t j = 0; j < n; j++)
        assert_true(s[j].out.dim[0] != 0); /* never the ragged rows */
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "r3"), &s, &n, &f.d),
                     IR_OK);
    assert_int_equal(n, 0);
    on_four_free(&f);
}

/* argmax, a reduce of two inputs (auto/strategy_tuple.c): one spec for
 * both results; its rows tile with no collective; its reduced dim tiled
 * leaves partial results the partitioner all-gathers (values, indices and
 * valid flags: three gathers) and reduces again; a get-tuple-element
 * follows it. */
static const char ARGMAX[] =
    "HloModule argmax\n"
    "argmax {\n"
    "  av = f32[] parameter(0)\n"
    "  ai = s32[] parameter(1)\n"
    "  bv = f32[] parameter(2)\n"
    "  bi = s32[] parameter(3)\n"
    "  gt = pred[] compare(av, bv), direction=GT\n"
    "  v = f32[] select(gt, av, bv)\n"
    "  i = s32[] select(gt, ai, bi)\n"
    "  ROOT r = (f32[], s32[]) tuple(v, i)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[8,16] parameter(0)\n"
    "  idx = s32[8,16] iota(), iota_dimension=1\n"
    "  ninf = f32[] constant(-inf)\n"
    "  z = s32[] constant(0)\n"
    "  am = (f32[8], s32[8]) reduce(x, idx, ninf, z), dimensions={1}, to_apply=argmax\n"
    "  ROOT mi = s32[8] get-tuple-element(am), index=1\n"
    "}\n";

static void variadic_reduce(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, ARGMAX);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    int32_t am = ir_find_instr(f.c, "am"), mi = ir_find_instr(f.c, "mi");
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, am, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 3); /* replicated, the rows, the reduced dim */
    AutoSpec rows = auto_spec_replicated();
    rows.dim[0] = 0;
    const AutoStrategy *r = find(s, n, rows, 0), *p = find(s, n, auto_spec_replicated(), 1);
    assert_non_null(r);
    assert_non_null(p);
    assert_true(r->comm == 0 && r->in[1].dim[0] == 0);
    assert_int_equal(p->in[1].dim[0], 1);
    /* Partials: f32[8] + s32[8], 64 bytes, and 8 flags, from each of 4:
     * 288 bytes gathered, 3/4 of them moved, three gathers' alpha. */
    assert_true(fabs(p->comm - (3 * 20e-6 + 0.75 * 288 / 4e9)) < 1e-12);
    assert_int_equal(auto_follows(f.c, mi), 0);
    assert_non_null(auto_result_dims(&f.c->instr[am]));
    assert_int_equal(auto_result_dims(&f.c->instr[am])->rank, 1);
    on_four_free(&f);
}

/* An rng-bit-generator (auto/strategy_tuple.c): its bits take the spec,
 * any dim, its state stays replicated; tiled past dim 0 each device draws
 * the whole array (partition/spmd_rng.c), priced so; the bits'
 * get-tuple-element follows it, the state's does not. */
static const char RNG[] = "HloModule rng\n"
                          "ENTRY main {\n"
                          "  s = u64[2] parameter(0)\n"
                          "  r = (u64[2], u32[8,6]) rng-bit-generator(s), algorithm=rng_philox\n"
                          "  st = u64[2] get-tuple-element(r), index=0\n"
                          "  b = u32[8,6] get-tuple-element(r), index=1\n"
                          "  ROOT t = (u64[2], u32[8,6]) tuple(st, b)\n"
                          "}\n";

static void rng_bits(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, RNG);
    AutoStrategy *s = NULL;
    int32_t n = 0, r = ir_find_instr(f.c, "r");
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, r, &s, &n, &f.d), IR_OK);
    assert_int_equal(n, 3); /* replicated, the rows, the columns (6 over 4: padded) */
    const AutoStrategy *rows = NULL, *cols = NULL;
    for (int32_t k = 0; k < n; k++) {
        assert_int_equal(s[k].in[0].dim[0], -1); /* the state replicated */
        if (s[k].out.dim[0] == 0)
            rows = &s[k];
        if (s[k].out.dim[0] == 1)
            cols = &s[k];
    }
    assert_non_null(rows);
    assert_non_null(cols);
    /* 48 draws: a quarter of them with the rows tiled, all with the
     * columns; the tuple's 208 bytes a quarter and 2/6 (tiles of 2 columns). */
    assert_true(fabs((cols->compute - rows->compute) - 0.75 * 48 / 20e9 - (208.0 * 2 / 6 - 208.0 / 4) / 5e9) < 1e-15);
    IrSharding *sh = auto_result_sharding(f.a, &f.mesh, &f.c->instr[r], &rows->out);
    assert_non_null(sh);
    assert_int_equal(sh->kind, SHD_TUPLE);
    assert_true(shd_is_replicated(&sh->tuple[0]) && !shd_is_replicated(&sh->tuple[1]));
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "b")), 0);
    assert_int_equal(auto_follows(f.c, ir_find_instr(f.c, "st")), -1);
    AutoSpec el;
    IrShape es;
    int64_t dims[IR_MAX_RANK];
    assert_true(auto_element_spec(f.c, &f.c->instr[ir_find_instr(f.c, "st")], &rows->out, &el, &es, dims));
    assert_true(auto_spec_equal(&el, &(AutoSpec){{-1, -1, -1, -1}})); /* the state: replicated */
    on_four_free(&f);
}

/* take_along_axis as JAX lowers it: a gather and a scatter-add with
 * batching dims, each batching dim an output role of the operand, its
 * indices and updates alike (partition/spmd_gather.c runs them per
 * shard, no collective). */
static const char BATCHING[] =
    "HloModule take\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[8,4,16] parameter(0)\n"
    "  i = s32[8,4,1,1] parameter(1)\n"
    "  g = f32[8,4,1] gather(x, i), offset_dims={}, collapsed_slice_dims={2}, start_index_map={2}, "
    "operand_batching_dims={0,1}, start_indices_batching_dims={0,1}, index_vector_dim=3, slice_sizes={1,1,1}\n"
    "  z = f32[8,4,16] parameter(2)\n"
    "  s = f32[8,4,16] scatter(z, i, g), update_window_dims={}, inserted_window_dims={2}, "
    "scatter_dims_to_operand_dims={2}, input_batching_dims={0,1}, scatter_indices_batching_dims={0,1}, "
    "index_vector_dim=3, to_apply=add\n"
    "  ROOT t = (f32[8,4,1], f32[8,4,16]) tuple(g, s)\n"
    "}\n";

static void batching_dims(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, BATCHING);
    AutoStrategy *s = NULL;
    int32_t n = 0;
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "g"), &s, &n, &f.d),
                     IR_OK);
    /* Output dim 0 over 4: the operand's and the indices' dim 0 with it, no collective. */
    const AutoStrategy *b = NULL;
    for (int32_t k = 0; k < n; k++)
        if (s[k].out.dim[0] == 0)
            b = &s[k];
    assert_non_null(b);
    assert_int_equal(b->in[0].dim[0], 0);
    assert_int_equal(b->in[1].dim[0], 0);
    assert_true(b->comm == 0);
    assert_int_equal(auto_strategies(f.a, &f.mesh, &f.cost, 4, f.m, f.c, ir_find_instr(f.c, "s"), &s, &n, &f.d),
                     IR_OK);
    b = NULL;
    for (int32_t k = 0; k < n; k++)
        if (s[k].out.dim[0] == 1)
            b = &s[k];
    assert_non_null(b);
    assert_int_equal(b->in[0].dim[0], 1);
    assert_int_equal(b->in[1].dim[0], 1);
    assert_int_equal(b->in[2].dim[0], 1);
    assert_true(b->comm == 0);
    on_four_free(&f);
}

/* JAX's shape: a call returning a tuple, read by get-tuple-element, whose
 * callee calls another; a call of a side-effecting callee; a call the user
 * sharded. */
static const char CALLS[] =
    "HloModule calls\n"
    "sq {\n"
    "  a = f32[8] parameter(0)\n"
    "  ROOT m = f32[8] multiply(a, a)\n"
    "}\n"
    "pair {\n"
    "  x = f32[8] parameter(0)\n"
    "  y = f32[8] parameter(1)\n"
    "  s = f32[8] call(x), to_apply=sq\n"
    "  unused = f32[8] negate(y)\n"
    "  add = f32[8] add(s, y)\n"
    "  ROOT t = (f32[8], f32[8]) tuple(add, x)\n"
    "}\n"
    "effect {\n"
    "  e = f32[8] parameter(0)\n"
    "  ROOT c = f32[8] custom-call(e), custom_call_target=\"x\", custom_call_has_side_effect=true\n"
    "}\n"
    "ENTRY main {\n"
    "  p = f32[8] parameter(0)\n"
    "  q = f32[8] parameter(1)\n"
    "  r = (f32[8], f32[8]) call(p, q), to_apply=pair\n"
    "  r0 = f32[8] get-tuple-element(r), index=0\n"
    "  r1 = f32[8] get-tuple-element(r), index=1\n"
    "  k = f32[8] call(r0), to_apply=effect\n"
    "  u = f32[8] call(r1), to_apply=sq, sharding={replicated}\n"
    "  ROOT o = f32[8] add(k, u)\n"
    "}\n";

static int32_t count_op(const IrComputation *c, IrOpcode op)
{
    int32_t n = 0;
    for (int32_t i = 0; i < c->ninstr; i++)
        n += c->instr[i].op == op;
    return n;
}

/* An async pair (explicit and sugared) and a fusion are calls split or
 * wrapped: inlined like a call, the start, its update and the done gone;
 * one whose done the user sharded stays. */
static const char ASYNCS[] =
    "HloModule asyncs\n"
    "sq {\n"
    "  p = f32[8,4] parameter(0)\n"
    "  ROOT m = f32[8,4] multiply(p, p)\n"
    "}\n"
    "fused {\n"
    "  a = f32[8,4] parameter(0)\n"
    "  b = f32[8,4] parameter(1)\n"
    "  ROOT s = f32[8,4] subtract(a, b)\n"
    "}\n"
    "ENTRY e {\n"
    "  x = f32[8,4] parameter(0)\n"
    "  s = ((f32[8,4]), f32[8,4], s32[]) async-start(x), calls=sq\n"
    "  u = ((f32[8,4]), f32[8,4], s32[]) async-update(s), calls=sq\n"
    "  d = f32[8,4] async-done(u), calls=sq\n"
    "  as = ((f32[8,4]), f32[8,4], s32[]) abs-start(d)\n"
    "  a = f32[8,4] abs-done(as)\n"
    "  f = f32[8,4] fusion(a, x), kind=kLoop, calls=fused\n"
    "  ks = ((f32[8,4]), f32[8,4], s32[]) negate-start(f)\n"
    "  k = f32[8,4] negate-done(ks), sharding={devices=[2,1]0,1}\n"
    "  ROOT t = (f32[8,4], f32[8,4]) tuple(f, k)\n"
    "}\n";

static void inline_asyncs(void **state)
{
    (void)state;
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("asyncs.hlo", ASYNCS, strlen(ASYNCS), &po, &m, &d), IR_OK);
    int32_t n = -1;
    assert_int_equal(auto_inline_calls(m, &n, &d), IR_OK);
    assert_int_equal(n, 3); /* sq's pair, abs's, the fusion */
    IrLimits lim = ir_default_limits();
    assert_int_equal(ir_verify(m, &lim, &d), IR_OK);
    const IrComputation *c = ir_entry(m);
    assert_int_equal(count_op(c, OP_FUSION), 0);
    assert_int_equal(count_op(c, OP_ASYNC_UPDATE), 0);
    assert_int_equal(count_op(c, OP_ASYNC_START), 1); /* the sharded negate's */
    assert_int_equal(count_op(c, OP_ASYNC_DONE), 1);
    /* subtract(abs(multiply(x, x)), x) */
    const IrInstr *f = &c->instr[c->instr[c->root].opnd[0]];
    assert_int_equal(f->op, OP_SUBTRACT);
    assert_int_equal(f->opnd[1], c->param[0]);
    const IrInstr *ab = &c->instr[f->opnd[0]];
    assert_int_equal(ab->op, OP_ABS);
    assert_int_equal(c->instr[ab->opnd[0]].op, OP_MULTIPLY);
    assert_int_equal(c->instr[ab->opnd[0]].opnd[0], c->param[0]);
    ir_module_free(m);
}

static void inline_calls(void **state)
{
    (void)state;
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("calls.hlo", CALLS, strlen(CALLS), &po, &m, &d), IR_OK);
    int32_t n = -1;
    assert_int_equal(auto_inline_calls(m, &n, &d), IR_OK);
    assert_int_equal(n, 2); /* pair and the sq inside it */
    const IrComputation *c = ir_entry(m);
    IrLimits lim = ir_default_limits();
    assert_int_equal(ir_verify(m, &lim, &d), IR_OK);
    /* p, q, m (sq's multiply), add, k (effect kept), u (sharded, kept),
     * o; r's tuple, its get-tuple-elements and the unused negate gone. */
    assert_int_equal(c->ninstr, 7);
    assert_int_equal(count_op(c, OP_CALL), 2);
    assert_int_equal(count_op(c, OP_TUPLE) + count_op(c, OP_GET_TUPLE_ELEMENT) + count_op(c, OP_NEGATE), 0);
    /* add(multiply(p, p), q) feeds the side-effecting call; p, unchanged
     * through the tuple, the sharded one. */
    const IrInstr *o = &c->instr[c->root];
    assert_string_equal(o->name, "o");
    const IrInstr *k = &c->instr[o->opnd[0]], *u = &c->instr[o->opnd[1]];
    assert_int_equal(k->op, OP_CALL);
    assert_non_null(u->sharding);
    assert_int_equal(u->opnd[0], c->param[0]);
    const IrInstr *add = &c->instr[k->opnd[0]];
    assert_int_equal(add->op, OP_ADD);
    assert_int_equal(add->opnd[1], c->param[1]);
    assert_int_equal(c->instr[add->opnd[0]].op, OP_MULTIPLY);
    assert_int_equal(c->instr[add->opnd[0]].opnd[0], c->param[0]);
    assert_string_equal(c->instr[c->param[1]].name, "q");
    /* pair, inlined and called no more, is gone; sq (the sharded call's)
     * and effect stay, the calls renumbered to them. */
    assert_int_equal(m->ncomp, 3);
    for (int32_t k = 0; k < m->ncomp; k++)
        assert_string_not_equal(m->comp[k]->name, "pair");
    assert_string_equal(m->comp[k->called[0]]->name, "effect");
    assert_string_equal(m->comp[u->called[0]]->name, "sq");
    assert_ptr_equal(m->comp[m->entry], c);
    ir_module_free(m);
}

/* JAX's jnp.cumsum called twice (two calls of one computation whose
 * reduce-window applies add) after a cumprod's (multiply): both inlined,
 * the callees dropped, each inlined reduce-window still applies its own
 * computation (the two copies share one called[] list, which was
 * renumbered twice: the cumsums multiplied). */
static const char CUMSUMS[] =
    "HloModule cumsums\n"
    "mul {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT m = f32[] multiply(a, b)\n"
    "}\n"
    "cumprod {\n"
    "  p = f32[8] parameter(0)\n"
    "  one = f32[] constant(1)\n"
    "  ROOT w = f32[8] reduce-window(p, one), window={size=8 pad=7_0}, to_apply=mul\n"
    "}\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "cumsum {\n"
    "  p = f32[8] parameter(0)\n"
    "  zero = f32[] constant(0)\n"
    "  ROOT w = f32[8] reduce-window(p, zero), window={size=8 pad=7_0}, to_apply=add\n"
    "}\n"
    "ENTRY e {\n"
    "  x = f32[8] parameter(0)\n"
    "  c = f32[8] call(x), to_apply=cumprod\n"
    "  s1 = f32[8] call(c), to_apply=cumsum\n"
    "  s2 = f32[8] call(x), to_apply=cumsum\n"
    "  ROOT t = (f32[8], f32[8]) tuple(s1, s2)\n"
    "}\n";

static void inline_shared_callee(void **state)
{
    (void)state;
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("cumsums.hlo", CUMSUMS, strlen(CUMSUMS), &po, &m, &d), IR_OK);
    int32_t n = -1;
    assert_int_equal(auto_inline_calls(m, &n, &d), IR_OK);
    assert_int_equal(n, 3);
    IrLimits lim = ir_default_limits();
    assert_int_equal(ir_verify(m, &lim, &d), IR_OK);
    assert_int_equal(m->ncomp, 3); /* mul, add, the entry */
    const IrComputation *c = ir_entry(m);
    const IrInstr *t = &c->instr[c->root];
    for (int32_t k = 0; k < 2; k++) {
        const IrInstr *s = &c->instr[t->opnd[k]];
        assert_int_equal(s->op, OP_REDUCE_WINDOW);
        assert_string_equal(m->comp[s->called[0]]->name, "add");
    }
    const IrInstr *p = &c->instr[c->instr[t->opnd[0]].opnd[0]];
    assert_int_equal(p->op, OP_REDUCE_WINDOW);
    assert_string_equal(m->comp[p->called[0]]->name, "mul");
    ir_module_free(m);
}

/* A scan over stacked weights as JAX lowers it: the counter compared with
 * a constant, a dynamic-slice of the layer's weight, the layer a call. */
static const char SCAN[] =
    "HloModule scan\n"
    "cond {\n"
    "  p = (s32[], f32[16,8], f32[4,8,8]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  n = s32[] constant(4)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "layer {\n"
    "  h = f32[16,8] parameter(0)\n"
    "  w = f32[8,8] parameter(1)\n"
    "  d = f32[16,8] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT t = f32[16,8] tanh(d)\n"
    "}\n"
    "body {\n"
    "  p = (s32[], f32[16,8], f32[4,8,8]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  h = f32[16,8] get-tuple-element(p), index=1\n"
    "  ws = f32[4,8,8] get-tuple-element(p), index=2\n"
    "  z = s32[] constant(0)\n"
    "  ds = f32[1,8,8] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,8,8}\n"
    "  w = f32[8,8] reshape(ds)\n"
    "  y = f32[16,8] call(h, w), to_apply=layer\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  ROOT r = (s32[], f32[16,8], f32[4,8,8]) tuple(j, y, ws)\n"
    "}\n"
    "ENTRY main {\n"
    "  ws = f32[4,8,8] parameter(0)\n"
    "  x = f32[16,8] parameter(1)\n"
    "  z = s32[] constant(0)\n"
    "  init = (s32[], f32[16,8], f32[4,8,8]) tuple(z, x, ws)\n"
    "  loop = (s32[], f32[16,8], f32[4,8,8]) while(init), condition=cond, body=body%s\n"
    "  ROOT out = f32[16,8] get-tuple-element(loop), index=1\n"
    "}\n";

static const IrComputation *named(const IrModule *m, const char *name)
{
    for (int32_t k = 0; k < m->ncomp; k++)
        if (strcmp(m->comp[k]->name, name) == 0)
            return m->comp[k];
    return NULL;
}

/* The view of SCAN with `attrs` after the while and the counter's start
 * `start`: its one loop's trip count. */
static double scan_trips(const char *attrs, const char *start, bool *known)
{
    char text[4096];
    snprintf(text, sizeof text, SCAN, attrs);
    char *zero = strstr(text, "ENTRY");
    zero = strstr(zero, "constant(0)");
    memcpy(zero + 9, start, 1);
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("scan.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    IrArena *a = ir_arena_new();
    AutoView v;
    assert_int_equal(auto_loop_view(a, m, &v, &d), IR_OK);
    assert_int_equal(v.nloop, 1);
    double trips = v.loop[0].trips;
    *known = v.loop[0].trips_known;
    ir_arena_free(a);
    ir_module_free(m);
    return trips;
}

/* The dot at the peak reads x resharded: the partitioner's new shard of
 * x (here x whole, gathered from its rows) is held beside x's own while
 * the dot runs, so the memory row charges it (auto/graph.c
 * charge_reshard_at_peak): x tiled saves 768 of its 1024 bytes, and its
 * gather for a dot that needs it whole costs 1024. */
static const char RESHARD_AT_PEAK[] =
    "HloModule peak\n"
    "ENTRY main {\n"
    "  x = f32[16,16] parameter(0)\n"
    "  w = f32[16,16] parameter(1)\n"
    "  ROOT y = f32[16,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

static void reshard_held_at_peak(void **state)
{
    (void)state;
    OnFour f;
    on_four(&f, RESHARD_AT_PEAK);
    AutoGraph g;
    assert_int_equal(auto_graph_build(f.m, &f.mesh, &f.cost, 4, false, NULL, &g, &f.d), IR_OK);
    int32_t x = ir_find_instr(f.c, "x"), y = ir_find_instr(f.c, "y");
    int32_t gx = g.node[x].group, gy = g.node[y].group;
    assert_true(gx >= 0 && gy >= 0 && gx != gy && g.ngroup <= 8);
    AutoSpec whole = auto_spec_replicated();
    int32_t rows = -1, reads_whole = -1, pick[8] = {0};
    for (int32_t k = 0; k < g.node[x].nstrat; k++)
        if (g.node[x].strat[k].out.dim[0] == 0)
            rows = k;
    for (int32_t k = 0; k < g.node[y].nstrat; k++)
        if (auto_spec_equal(&g.node[y].strat[k].in[0], &whole))
            reads_whole = k;
    assert_true(rows >= 0 && reads_whole >= 0 && auto_spec_equal(&g.node[x].strat[0].out, &whole));
    pick[gy] = reads_whole;
    double held = auto_graph_mem(&g, pick);
    pick[gx] = rows;
    assert_true(auto_graph_mem(&g, pick) - held == 256);
    auto_graph_free(&g);
    on_four_free(&f);
}

/* x read whole by two ops whose sharding the user fixed: the partitioner
 * gathers x once for both (partition/reshard_cache.c), so x's rows cost
 * one gather with two readers as with one (auto/graph.c read_before);
 * a third reader that needs x's columns costs its own reshard. */
static const char READ_TWICE[] =
    "HloModule r\n"
    "ENTRY main {\n"
    "  x = f32[16,16] parameter(0)\n"
    "  a = f32[16,16] negate(x), sharding={replicated}\n"
    "%s"
    "  ROOT t = (f32[16,16], f32[16,16], f32[16,16]) tuple(a, a, a)\n"
    "}\n";

/* x's group's unary cost of its rows strategy, for READ_TWICE with `more`. */
static double rows_cost(const char *more)
{
    char text[sizeof READ_TWICE + 256];
    snprintf(text, sizeof text, READ_TWICE, more);
    OnFour f;
    on_four(&f, text);
    AutoGraph g;
    assert_int_equal(auto_graph_build(f.m, &f.mesh, &f.cost, 4, false, NULL, &g, &f.d), IR_OK);
    const AutoNode *x = &g.node[ir_find_instr(f.c, "x")];
    double c = -1;
    for (int32_t k = 0; k < x->nstrat; k++)
        if (x->strat[k].out.dim[0] == 0)
            c = g.group[x->group].unary[k];
    auto_graph_free(&g);
    on_four_free(&f);
    return c;
}

static void reshard_once_per_target(void **state)
{
    (void)state;
    double one = rows_cost("");
    double two = rows_cost("  b = f32[16,16] exponential(x), sharding={replicated}\n");
    double cols = rows_cost("  b = f32[16,16] exponential(x), sharding={devices=[1,4]0,1,2,3}\n");
    assert_true(one > 0);
    assert_true(fabs(two - one) <= 1e-12 * one);
    assert_true(cols > one * 1.01);
}

/* x's rows resharded to its columns for a reverse of its rows (which
 * keeps only its columns tileable), as partition/reshard.c does it: 14
 * rows over 4 are no all-to-all, so x is gathered whole (16 padded rows,
 * 384 bytes), sliced (336), padded to 8 columns (448) and cut (112): the
 * row charges the most two of them hold at once, 336 + 448. 16 rows are
 * an all-to-all: the new shard alone, 128 bytes. */
static const char REVERSE[] =
    "HloModule r\n"
    "ENTRY main {\n"
    "  x = f32[%d,%d] parameter(0)\n"
    "  ROOT y = f32[%d,%d] reverse(x), dimensions={0}\n"
    "}\n";

static double rows_to_columns(int rows, int cols)
{
    char text[sizeof REVERSE + 16];
    snprintf(text, sizeof text, REVERSE, rows, cols, rows, cols);
    OnFour f;
    on_four(&f, text);
    AutoGraph g;
    assert_int_equal(auto_graph_build(f.m, &f.mesh, &f.cost, 4, false, NULL, &g, &f.d), IR_OK);
    int32_t x = ir_find_instr(f.c, "x"), y = ir_find_instr(f.c, "y");
    int32_t gx = g.node[x].group, gy = g.node[y].group;
    assert_true(gx >= 0 && gy >= 0 && gx != gy && g.ngroup == 2);
    int32_t pick[2] = {0, 0}, xrows = -1, xcols = -1, ycols = -1;
    for (int32_t k = 0; k < g.node[x].nstrat; k++) {
        if (g.node[x].strat[k].out.dim[0] == 0)
            xrows = k;
        if (g.node[x].strat[k].out.dim[0] == 1)
            xcols = k;
    }
    for (int32_t k = 0; k < g.node[y].nstrat; k++)
        if (g.node[y].strat[k].out.dim[0] == 1)
            ycols = k;
    assert_true(xrows >= 0 && xcols >= 0 && ycols >= 0);
    pick[gy] = ycols;
    pick[gx] = xcols;
    double local = auto_graph_mem(&g, pick);
    pick[gx] = xrows;
    double moved = auto_graph_mem(&g, pick);
    double xr = (double)g.node[x].strat[xrows].bytes, xc = (double)g.node[x].strat[xcols].bytes;
    auto_graph_free(&g);
    on_four_free(&f);
    return moved - local - (xr - xc); /* the reshard's bytes alone */
}

static void reshard_paths(void **state)
{
    (void)state;
    assert_true(rows_to_columns(14, 6) == 336 + 448);
    assert_true(rows_to_columns(16, 8) == 16 * 2 * 4);
}

/* Rows kept apart hold the integer program's plan under the limit too
 * (auto/shard.c fit_steps keeps the row of each step a plan passed the
 * limit at): a row that charges the optimum's first choice past the
 * limit moves it; one that charges every choice of that group past it
 * leaves no plan. */
static void ilp_rows(void **state)
{
    (void)state;
    IrModule *m = NULL;
    IrDiag d = {0};
    AutoGraph g;
    mlp_graph(&m, &g, &d);
    int32_t a[64], b[64];
    assert_true(g.ngroup <= 64 && g.ngroup > 0 && g.group[0].nstrat > 1);
    double limit = 1e9;
    assert_int_equal(auto_ilp_solve_rows(&g, limit, NULL, 0, a, NULL, &d), IR_OK);
    AutoMemRow r;
    assert_int_equal(auto_graph_row_take(&g, &r, &d), IR_OK);
    r.fixed = 0;
    size_t cells = 0;
    for (int32_t k = 0; k < g.ngroup; k++)
        cells += (size_t)g.group[k].nstrat;
    for (int32_t e = 0; e < g.nedge; e++)
        cells += (size_t)g.group[g.edge[e].from].nstrat * (size_t)g.group[g.edge[e].to].nstrat;
    memset(r.cell, 0, cells * sizeof *r.cell);
    r.cell[a[0]] = 2 * limit; /* group 0's cells come first */
    assert_int_equal(auto_ilp_solve_rows(&g, limit, &r, 1, b, NULL, &d), IR_OK);
    assert_true(b[0] != a[0]);
    assert_true(auto_graph_cost(&g, b) >= auto_graph_cost(&g, a) * (1 - 1e-9));
    for (int32_t s = 0; s < g.group[0].nstrat; s++)
        r.cell[s] = 2 * limit;
    assert_int_equal(auto_ilp_solve_rows(&g, limit, &r, 1, b, NULL, &d), IR_EINPUT);
    ir_diag_clear(&d);
    auto_mem_row_free(&r);
    auto_graph_free(&g);
    ir_module_free(m);
}

static void loops(void **state)
{
    (void)state;
    char text[4096];
    snprintf(text, sizeof text, SCAN, "");
    OnFour f;
    on_four(&f, text);
    int32_t n = -1;
    assert_int_equal(auto_inline_calls(f.m, &n, &f.d), IR_OK);
    assert_int_equal(n, 1); /* the layer, inside the body */
    const IrComputation *body = named(f.m, "body");
    assert_non_null(body);
    assert_int_equal(count_op(body, OP_CALL), 0);
    AutoGraph g;
    assert_int_equal(auto_graph_build(f.m, &f.mesh, &f.cost, 4, false, NULL, &g, &f.d), IR_OK);
    assert_int_equal(g.view.nloop, 1);
    const AutoLoop *L = &g.view.loop[0];
    assert_true(L->trips_known);
    assert_true(L->trips == 4);
    assert_int_equal(L->nstate, 3);
    /* One choice per state element: the body's get-tuple-element of h and
     * the while's result `out` follow state[1]. */
    int32_t h = -1, out = -1, dot = -1, ds = -1;
    for (int32_t i = 0; i < g.comp->ninstr; i++) {
        const char *nm = g.comp->instr[i].name;
        bool in_body = g.view.where_comp[i] >= 0 && f.m->comp[g.view.where_comp[i]] == body;
        if (in_body && strcmp(nm, "h") == 0)
            h = i;
        if (in_body && g.comp->instr[i].op == OP_DOT)
            dot = i;
        if (in_body && strcmp(nm, "ds") == 0)
            ds = i;
        if (!in_body && strcmp(nm, "out") == 0)
            out = i;
    }
    assert_true(h >= 0 && out >= 0 && dot >= 0 && ds >= 0);
    int32_t s1 = g.node[L->first_state + 1].group;
    assert_true(s1 >= 0);
    assert_int_equal(g.node[h].group, s1);
    assert_int_equal(g.node[out].group, s1);
    /* The body is priced: its dot has strategies, costs four iterations. */
    assert_true(g.node[dot].group >= 0);
    assert_true(g.view.weight[dot] == 4);
    /* The dynamic-slice tiles the dims it takes whole (8 and 8 over 4),
     * never the layer dim it indexes: replicated and two tilings. */
    assert_int_equal(g.node[ds].nstrat, 3);
    for (int32_t k = 0; k < g.node[ds].nstrat; k++)
        assert_int_not_equal(g.node[ds].strat[k].out.dim[0], 0);
    /* The stacked weights pass through the body: where the state's
     * sharding is the operand's, one buffer; where it differs, the loop
     * holds both (auto_loop_charge_pairs): the state's 1024 / 4 bytes per
     * device more. */
    int32_t wsp = ir_find_instr(ir_entry(f.m), "ws"), s2 = L->first_state + 2;
    int32_t gw = g.node[wsp].group, gs = g.node[s2].group;
    assert_true(gw >= 0 && gs >= 0 && gw != gs);
    int32_t pick[64] = {0}, tiled = -1;
    assert_true(g.ngroup <= 64);
    AutoSpec whole = auto_spec_replicated();
    for (int32_t k = 0; k < g.node[s2].nstrat && tiled < 0; k++)
        if (!auto_spec_equal(&g.node[s2].strat[k].out, &whole) && g.node[s2].strat[k].bytes == 256)
            tiled = k;
    assert_true(tiled >= 0 && auto_spec_equal(&g.node[wsp].strat[0].out, &whole) &&
                auto_spec_equal(&g.node[s2].strat[0].out, &whole));
    double same = auto_graph_mem(&g, pick);
    pick[gs] = tiled;
    assert_true(auto_graph_mem(&g, pick) - same == 256);
    auto_graph_free(&g);
    on_four_free(&f);

    /* The whole pass: the state's sharding written on the while, its
     * operand, its body's parameter and root and its condition's
     * parameter, one sharding. */
    on_four(&f, text);
    f.m->num_partitions = 4;
    AutoOptions opt = {.mesh = f.mesh};
    AutoReport rep;
    assert_int_equal(auto_shard(f.m, &opt, &rep, &f.d), IR_OK);
    const IrComputation *c = ir_entry(f.m);
    const IrSharding *ws = c->instr[ir_find_instr(c, "loop")].sharding;
    assert_non_null(ws);
    assert_int_equal(ws->kind, SHD_TUPLE);
    body = named(f.m, "body");
    assert_true(ir_sharding_equal(body->instr[body->root].sharding, ws));
    assert_true(ir_sharding_equal(body->instr[body->param[0]].sharding, ws));
    const IrComputation *cond = named(f.m, "cond");
    assert_true(ir_sharding_equal(cond->instr[cond->param[0]].sharding, ws));
    assert_non_null(strstr(rep.explain, "loop.state[1] = while state"));
    assert_non_null(strstr(rep.explain, "loop loop: 3 state elements; its body priced at 4 iterations"));
    assert_non_null(strstr(rep.explain_json, "\"loops\": [{\"while\": \"loop\", \"state\": 3, \"iterations\": 4, \"known\": true}]"));
    auto_report_free(&rep);
    on_four_free(&f);

    /* Trip counts: the pattern from a start of 1 (3 iterations); XLA's
     * known_trip_count; neither (the counter starts at a parameter): once. */
    bool known;
    assert_true(scan_trips("", "1", &known) == 3 && known);
    assert_true(scan_trips(", backend_config={\"known_trip_count\":{\"n\":\"7\"}}", "0", &known) == 7 && known);
    snprintf(text, sizeof text, SCAN, "");
    char *z = strstr(strstr(text, "ENTRY"), "s32[] constant(0)");
    memcpy(z, "s32[] parameter(2) ", 19);
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("scan.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    IrArena *a = ir_arena_new();
    AutoView v;
    assert_int_equal(auto_loop_view(a, m, &v, &d), IR_OK);
    assert_int_equal(v.nloop, 1);
    assert_false(v.loop[0].trips_known);
    assert_true(v.loop[0].trips == 1);
    ir_arena_free(a);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mesh_forms),
        cmocka_unit_test(spec_shardings),
        cmocka_unit_test(alpha_beta),
        cmocka_unit_test(reshard_prices),
        cmocka_unit_test(solvers_agree),
        cmocka_unit_test(elim_work_budget),
        cmocka_unit_test(elim_graph_budget),
        cmocka_unit_test(ilp_node_bound),
        cmocka_unit_test(lagrange_gap),
        cmocka_unit_test(explain_solver),
        cmocka_unit_test(contracted_dots),
        cmocka_unit_test(reduce_scatter_strategies),
        cmocka_unit_test(wide_partial_sums),
        cmocka_unit_test(scatter_strategies),
        cmocka_unit_test(grouped_convolution),
        cmocka_unit_test(inline_calls),
        cmocka_unit_test(inline_shared_callee),
        cmocka_unit_test(uneven_tiles),
        cmocka_unit_test(identity_custom_calls),
        cmocka_unit_test(uneven_reshape_dims),
        cmocka_unit_test(mask_broadcast_followed_last),
        cmocka_unit_test(factor_broadcasts_lead),
        cmocka_unit_test(folded_scale_broadcast_leads),
        cmocka_unit_test(batching_dims),
        cmocka_unit_test(norm_training),
        cmocka_unit_test(ragged_dot),
        cmocka_unit_test(inline_asyncs),
        cmocka_unit_test(windows_and_ffts),
        cmocka_unit_test(tiebreak_least_communication),
        cmocka_unit_test(tiebreak_least_memory),
        cmocka_unit_test(tiebreak_least_bytes),
        cmocka_unit_test(variadic_reduce),
        cmocka_unit_test(rng_bits),
        cmocka_unit_test(loops),
        cmocka_unit_test(reshard_held_at_peak),
        cmocka_unit_test(reshard_once_per_target),
        cmocka_unit_test(reshard_paths),
        cmocka_unit_test(ilp_rows),
        cmocka_unit_test(scatter_uneven_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
