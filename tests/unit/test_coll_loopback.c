/*
 * test_coll_loopback.c: every collective's in-host and across-hosts steps
 * (coll/) over the loopback transport (coll/loopback.c): 1 to 8 simulated
 * hosts, each a thread driving its 1 to 3 devices with rt_run_devices, no
 * mpirun. One replayed SPMD program a layout holds all-reduces (add,
 * maximum, minimum, or, a reducer computation the transport has no
 * operation for; s32, f32, f64, u8, pred; groups of everyone, of even and
 * odd devices, and uneven ones {0} {1..N-1}), an all-gather, a
 * reduce-scatter and an all-to-all in odd blocks of 3, a ring permute, a
 * permute with one pair (the others receive zeros), a broadcast from
 * the last device and XLA's send/recv between devices (point to point:
 * each device but the first sends its f64 operand to the one before, the
 * last receives zeros). Each device's result is checked against a scalar
 * formula written here (sums of the inputs, blocks, the source's
 * operand), never against tessel. Inputs are small integers (as floats
 * too), so every order of adds gives the same bits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

enum { S = 5, B = 3, NOUT = 13 };

/* Input element i of device g for parameter k (small integers). */
static int64_t x_at(int k, int64_t g, int64_t i)
{
    return ((g * 7 + i * 3 + k * 5) % 11) - 5;
}

/* The groups text of device ids [0, n): everyone, even/odd, {0}{1..n-1}. */
static void groups_all(char *b, size_t n, int nd)
{
    size_t o = (size_t)snprintf(b, n, "{{");
    for (int g = 0; g < nd; g++)
        o += (size_t)snprintf(b + o, n - o, "%s%d", g ? "," : "", g);
    snprintf(b + o, n - o, "}}");
}

static void groups_parity(char *b, size_t n, int nd)
{
    size_t o = (size_t)snprintf(b, n, "{");
    for (int p = 0; p < 2 && p < nd; p++) {
        o += (size_t)snprintf(b + o, n - o, "%s{", p ? "," : "");
        for (int g = p, first = 1; g < nd; g += 2, first = 0)
            o += (size_t)snprintf(b + o, n - o, "%s%d", first ? "" : ",", g);
        o += (size_t)snprintf(b + o, n - o, "}");
    }
    snprintf(b + o, n - o, "}");
}

static void groups_uneven(char *b, size_t n, int nd)
{
    size_t o = (size_t)snprintf(b, n, "{{0}");
    if (nd > 1) {
        o += (size_t)snprintf(b + o, n - o, ",{");
        for (int g = 1; g < nd; g++)
            o += (size_t)snprintf(b + o, n - o, "%s%d", g > 1 ? "," : "", g);
        o += (size_t)snprintf(b + o, n - o, "}");
    }
    snprintf(b + o, n - o, "}");
}

static char *module_text(int nd)
{
    char all[512], par[512], une[512], ring[1024], last[512], back[1024];
    groups_all(all, sizeof all, nd);
    groups_parity(par, sizeof par, nd);
    groups_uneven(une, sizeof une, nd);
    size_t o = (size_t)snprintf(ring, sizeof ring, "{");
    for (int g = 0; g < nd; g++)
        o += (size_t)snprintf(ring + o, sizeof ring - o, "%s{%d,%d}", g ? "," : "", g, (g + 1) % nd);
    snprintf(ring + o, sizeof ring - o, "}");
    /* send/recv: device g to g - 1 (one device: to itself) */
    o = (size_t)snprintf(back, sizeof back, "{%s", nd == 1 ? "{0,0}" : "");
    for (int g = 1; g < nd; g++)
        o += (size_t)snprintf(back + o, sizeof back - o, "%s{%d,%d}", g > 1 ? "," : "", g, g - 1);
    snprintf(back + o, sizeof back - o, "}");
    /* the broadcast's root: the last device, listed first */
    o = (size_t)snprintf(last, sizeof last, "{{%d", nd - 1);
    for (int g = 0; g < nd - 1; g++)
        o += (size_t)snprintf(last + o, sizeof last - o, ",%d", g);
    snprintf(last + o, sizeof last - o, "}}");
    char *t = malloc(16384);
    snprintf(t, 16384,
             "HloModule loop, num_partitions=%d\n"
             "adds { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n"
             "maxf { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }\n"
             "addd { a = f64[] parameter(0)\n b = f64[] parameter(1)\n ROOT r = f64[] add(a, b) }\n"
             "minu { a = u8[] parameter(0)\n b = u8[] parameter(1)\n ROOT r = u8[] minimum(a, b) }\n"
             "orp { a = pred[] parameter(0)\n b = pred[] parameter(1)\n ROOT r = pred[] or(a, b) }\n"
             "anys { a = s32[] parameter(0)\n b = s32[] parameter(1)\n s = s32[] add(a, b)\n"
             " ROOT r = s32[] maximum(s, s) }\n"
             "ENTRY main {\n"
             "  a = s32[%d] parameter(0)\n  f = f32[%d] parameter(1)\n  e = f64[%d] parameter(2)\n"
             "  u = u8[%d] parameter(3)\n  p = pred[%d] parameter(4)\n  w = s32[%d] parameter(5)\n"
             "  ar = s32[%d] all-reduce(a), channel_id=1, replica_groups=%s, use_global_device_ids=true, to_apply=adds\n"
             "  am = f32[%d] all-reduce(f), channel_id=2, replica_groups=%s, use_global_device_ids=true, to_apply=maxf\n"
             "  ae = f64[%d] all-reduce(e), channel_id=3, replica_groups=%s, use_global_device_ids=true, to_apply=addd\n"
             "  au = u8[%d] all-reduce(u), channel_id=4, replica_groups=%s, use_global_device_ids=true, to_apply=minu\n"
             "  ap = pred[%d] all-reduce(p), channel_id=5, replica_groups=%s, use_global_device_ids=true, to_apply=orp\n"
             "  ay = s32[%d] all-reduce(a), channel_id=6, replica_groups=%s, use_global_device_ids=true, to_apply=anys\n"
             "  ag = s32[%d] all-gather(a), channel_id=7, replica_groups=%s, dimensions={0}, use_global_device_ids=true\n"
             "  rs = s32[%d] reduce-scatter(w), channel_id=8, replica_groups=%s, dimensions={0}, use_global_device_ids=true, to_apply=adds\n"
             "  aa = s32[%d] all-to-all(w), channel_id=9, replica_groups=%s, dimensions={0}\n"
             "  pr = s32[%d] collective-permute(a), channel_id=10, source_target_pairs=%s\n"
             "  p1 = s32[%d] collective-permute(a), channel_id=11, source_target_pairs={{0,%d}}\n"
             "  bc = s32[%d] collective-broadcast(a), channel_id=12, replica_groups=%s\n"
             "  t = token[] after-all()\n"
             "  rv = (f64[%d], u32[], token[]) recv(t), channel_id=13,"
             " frontend_attributes={_xla_send_recv_source_target_pairs=\"%s\"}\n"
             "  sn = (f64[%d], u32[], token[]) send(e, t), channel_id=14,"
             " frontend_attributes={_xla_send_recv_source_target_pairs=\"%s\"}, control-predecessors={rv}\n"
             "  rd = (f64[%d], token[]) recv-done(rv), channel_id=13\n"
             "  sd = token[] send-done(sn), channel_id=14\n"
             "  pp = f64[%d] get-tuple-element(rd), index=0\n"
             "  ROOT r = (s32[%d], f32[%d], f64[%d], u8[%d], pred[%d], s32[%d], s32[%d], s32[%d], s32[%d], s32[%d],"
             " s32[%d], s32[%d], f64[%d]) tuple(ar, am, ae, au, ap, ay, ag, rs, aa, pr, p1, bc, pp)\n}\n",
             nd, S, S, S, S, S, nd * B, S, all, S, par, S, une, S, all, S, par, S, une, nd * S, all, B, all, nd * B,
             all, S, ring, S, nd - 1, S, last, S, back, S, back, S, S, S, S, S, S, S, S, nd * S, B, nd * B, S, S, S, S);
    return t;
}

/* The members of device g's group: all, parity, uneven. */
static int members(int kind, int nd, int g, int *m)
{
    int n = 0;
    for (int h = 0; h < nd; h++)
        if (kind == 0 || (kind == 1 && h % 2 == g % 2) || (kind == 2 && (h == 0) == (g == 0)))
            m[n++] = h;
    return n;
}

/* Element i of output `out` on device g, as a double (pred as 0/1). */
static double want(int out, int nd, int g, int64_t i)
{
    int m[64], n;
    double v = 0;
    switch (out) {
    case 0: /* ar: sum over all of a */
    case 5: /* ay: the same through a reducer computation */
        n = members(out == 0 ? 0 : 2, nd, g, m);
        for (int j = 0; j < n; j++)
            v += (double)x_at(0, m[j], i);
        return v;
    case 1: /* am: maximum over the parity group of f */
        n = members(1, nd, g, m);
        v = -1e9;
        for (int j = 0; j < n; j++)
            v = (double)x_at(1, m[j], i) > v ? (double)x_at(1, m[j], i) : v;
        return v;
    case 2: /* ae: sum over the uneven group of e */
        n = members(2, nd, g, m);
        for (int j = 0; j < n; j++)
            v += (double)x_at(2, m[j], i);
        return v;
    case 3: /* au: minimum over all of u = x + 5 */
        n = members(0, nd, g, m);
        v = 1e9;
        for (int j = 0; j < n; j++)
            v = (double)(x_at(3, m[j], i) + 5) < v ? (double)(x_at(3, m[j], i) + 5) : v;
        return v;
    case 4: /* ap: or over the parity group of p = (x > 2) */
        n = members(1, nd, g, m);
        for (int j = 0; j < n; j++)
            v = v || x_at(4, m[j], i) > 2;
        return v;
    case 6: /* ag: device i / S's a, element i % S */
        return (double)x_at(0, i / S, i % S);
    case 7: /* rs: block g of the sum of w */
        for (int h = 0; h < nd; h++)
            v += (double)x_at(5, h, g * B + i);
        return v;
    case 8: /* aa: block i / B comes from device i / B's block g */
        return (double)x_at(5, i / B, g * B + i % B);
    case 9: /* pr: from device g - 1 */
        return (double)x_at(0, (g + nd - 1) % nd, i);
    case 10: /* p1: device nd-1 receives device 0's, the others zeros (nd 1: itself) */
        return g == nd - 1 ? (double)x_at(0, 0, i) : 0;
    case 11: /* bc: the last device's */
        return (double)x_at(0, nd - 1, i);
    case 12: /* pp: recv'd from device g + 1's e; the last device nothing (zeros), one device its own */
        return nd == 1 ? (double)x_at(2, 0, i) : g == nd - 1 ? 0 : (double)x_at(2, g + 1, i);
    default:
        return 0;
    }
}

static double load(const DevValue *v, int64_t i)
{
    switch (v->shape.type) {
    case IR_S32: return ((const int32_t *)v->data)[i];
    case IR_F32: return ((const float *)v->data)[i];
    case IR_F64: return ((const double *)v->data)[i];
    case IR_U8: return ((const uint8_t *)v->data)[i];
    case IR_PRED: return ((const uint8_t *)v->data)[i] != 0;
    default: return -12345;
    }
}

static void store(DevValue *v, int64_t i, int64_t x)
{
    switch (v->shape.type) {
    case IR_S32: ((int32_t *)v->data)[i] = (int32_t)x; break;
    case IR_F32: ((float *)v->data)[i] = (float)x; break;
    case IR_F64: ((double *)v->data)[i] = (double)x; break;
    case IR_U8: ((uint8_t *)v->data)[i] = (uint8_t)(x + 5); break;
    case IR_PRED: ((uint8_t *)v->data)[i] = x > 2; break;
    default: break;
    }
}

typedef struct Host {
    const PlanCluster *c;
    CollLoopback *lb;
    int h, l;
    RtArgs *shards;
    DevValue **results;
    IrStatus st;
    IrDiag d;
} Host;

static void *host_main(void *arg)
{
    Host *hh = arg;
    RtRunOptions ro = {.no_bind = true};
    hh->st = rt_run_devices(hh->c, hh->shards, (int64_t)hh->h * hh->l, hh->l, coll_loopback_host(hh->lb, hh->h), &ro,
                            NULL, hh->results, &hh->d);
    if (hh->st != IR_OK)
        coll_loopback_abort(hh->lb); /* the other hosts may wait for this one */
    return NULL;
}

/* One layout: `hosts` simulated hosts of `l` devices. */
static void run_layout(int hosts, int l)
{
    int nd = hosts * l;
    char *text = module_text(nd);
    TsDiag td = {0};
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    if (ts_module_parse("loop.hlo", text, strlen(text), NULL, &m, &td) != TS_OK)
        fail_msg("%s\n%s", td.msg ? td.msg : "parse failed", text);
    TsCompileOptions co = {.num_partitions = nd, .spmd = true};
    if (ts_compile(m, &co, &plan, &td) != TS_OK)
        fail_msg("%s", td.msg ? td.msg : "compile failed");
    const PlanCluster *c = &plan->r.prog.cluster[0];
    const IrComputation *entry = c->spmd->comp[c->spmd->entry];
    RtArgs *shards = calloc((size_t)nd, sizeof *shards);
    DevValue **results = calloc((size_t)nd, sizeof *results);
    for (int g = 0; g < nd; g++) {
        shards[g].nargs = entry->nparam;
        shards[g].args = calloc((size_t)entry->nparam, sizeof(DevValue *));
        for (int32_t k = 0; k < entry->nparam; k++) {
            DevValue *v = dev_value_new(&entry->instr[entry->param[k]].shape);
            for (int64_t i = 0; i < dev_value_elements(v); i++)
                store(v, i, x_at(k, g, i));
            shards[g].args[k] = v;
        }
    }
    CollLoopback *lb = coll_loopback_new(hosts);
    assert_non_null(lb);
    Host *hs = calloc((size_t)hosts, sizeof *hs);
    pthread_t *th = calloc((size_t)hosts, sizeof *th);
    for (int h = 0; h < hosts; h++) {
        hs[h] = (Host){.c = c, .lb = lb, .h = h, .l = l, .shards = shards + h * l, .results = results + h * l};
        assert_int_equal(pthread_create(&th[h], NULL, host_main, &hs[h]), 0);
    }
    for (int h = 0; h < hosts; h++)
        pthread_join(th[h], NULL);
    for (int h = 0; h < hosts; h++)
        if (hs[h].st != IR_OK)
            fail_msg("%d hosts x %d devices: host %d: %s", hosts, l, h, hs[h].d.msg ? hs[h].d.msg : "failed");
    for (int g = 0; g < nd; g++) {
        DevValue *r = results[g];
        assert_int_equal(r->shape.type, IR_TUPLE);
        for (int out = 0; out < NOUT; out++) {
            const DevValue *v = dev_value_leaf(r, out);
            for (int64_t i = 0; i < dev_value_elements(v); i++)
                if (load(v, i) != want(out, nd, g, i))
                    fail_msg("%d hosts x %d devices: device %d output %d element %lld: %g, expected %g", hosts, l,
                             g, out, (long long)i, load(v, i), want(out, nd, g, i));
        }
    }
    for (int g = 0; g < nd; g++) {
        dev_value_unref(results[g]);
        rt_args_free(&shards[g]);
    }
    coll_loopback_free(lb);
    for (int h = 0; h < hosts; h++)
        ir_diag_clear(&hs[h].d);
    free(hs);
    free(th);
    free(shards);
    free(results);
    free(text);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_diag_clear(&td);
}

static void layouts(void **state)
{
    (void)state;
    for (int hosts = 1; hosts <= 8; hosts++)
        for (int l = 1; l <= 3; l++)
            run_layout(hosts, l);
}

/* A host that fails (here: one that never calls) cannot leave the others
 * waiting: coll_loopback_abort wakes them with an error. */
static void *lone_call(void *arg)
{
    CollTransport *t = arg;
    int32_t color[2] = {0, 0};
    int32_t x = 1, y[2];
    IrDiag d = {0};
    IrStatus st = t->allgather_in(t, color, COLL_XK_ALL_GATHER, &x, sizeof x, y, &d);
    ir_diag_clear(&d);
    return (void *)(intptr_t)st;
}

static void abort_wakes(void **state)
{
    (void)state;
    CollLoopback *lb = coll_loopback_new(2);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, lone_call, coll_loopback_host(lb, 0)), 0);
    coll_loopback_abort(lb);
    void *ret = NULL;
    pthread_join(th, &ret);
    assert_int_equal((IrStatus)(intptr_t)ret, IR_ERUNTIME);
    coll_loopback_free(lb);
    assert_null(coll_loopback_new(0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layouts),
        cmocka_unit_test(abort_wakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
