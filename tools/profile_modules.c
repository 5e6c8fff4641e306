/*
 * profile_modules.c: the HLO text of `tessel profile`'s measuring
 * programs, SPMD programs over n devices (replayed as they are, --spmd).
 */
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const OP[PROFILE_NKIND] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};

/* The header of a program over n devices (its reductions add and max)
 * into t; its length. */
static size_t header(char *t, size_t cap, int64_t n)
{
    return (size_t)snprintf(t, cap,
                            "HloModule p, num_partitions=%lld\nadd {\n  a = f32[] parameter(0)\n"
                            "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nmax {\n"
                            "  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] maximum(a, b)\n}\n",
                            (long long)n);
}

/* "{0,1,...,n-1}" into g. */
static void all_devices(char *g, size_t cap, int64_t n)
{
    snprintf(g, cap, "{");
    for (int64_t i = 0; i < n && strlen(g) < cap - 16; i++)
        snprintf(g + strlen(g), cap - strlen(g), "%s%lld", i ? "," : "", (long long)i);
    strcat(g, "}");
}

/* Elements of a kind's result per device, over `elems` of operand. */
static long long result_elems(int kind, int64_t elems, int64_t n)
{
    return kind == PROFILE_ALL_GATHER ? (long long)(elems * n)
           : kind == PROFILE_REDUCE_SCATTER ? (long long)(elems / n)
                                            : (long long)elems;
}

/* The attributes a kind takes after its replica groups. */
static const char *attributes(int kind)
{
    return kind == PROFILE_ALL_TO_ALL     ? ", dimensions={0}"
           : kind == PROFILE_ALL_GATHER   ? ", dimensions={0}, use_global_device_ids=true"
           : kind == PROFILE_REDUCE_SCATTER ? ", dimensions={0}, use_global_device_ids=true, to_apply=add"
                                            : ", use_global_device_ids=true, to_apply=add";
}

/* Each collective takes one element of the round's work and gives one to
 * the next round's dot:
 *
 *   m1 = dot(a0, w); y1 = x + max(m1); c1 = coll(xc + max(y1));
 *   a1 = m1 + c1[0]; m2 = dot(a1, w); ...  ROOT a16
 *
 * (a round without the collective reads its own add's first element). A
 * collective then costs what it costs behind a step's work: where devices
 * outnumber cores, the latency of its rendezvous hides behind the devices
 * still computing on the same core; and the work runs at the rate a
 * device gets with every device busy (without a collective between them
 * the devices run their steps apart, each with a core to itself for a
 * while, or preempted in the middle of one). */
char *profile_work_module(const ProfileWork *w, int64_t n)
{
    size_t cap = 2048 + PROFILE_ROUNDS * 1536;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    char groups[512];
    all_devices(groups, sizeof groups, n);
    long long D = (long long)w->dot, E = (long long)w->elems, C = (long long)w->celems;
    size_t len = header(t, cap, n);
    len += (size_t)snprintf(t + len, cap - len,
                            "ENTRY e {\n  a0 = f32[%lld,%lld] parameter(0)\n  w = f32[%lld,%lld] parameter(1)\n"
                            "  x = f32[%lld] parameter(2)\n  xc = f32[%lld] parameter(3)\n  ninf = f32[] constant(-inf)\n",
                            D, D, D, D, E, C);
    long long out = result_elems(w->kind, w->celems, n);
    for (int r = 1; r <= PROFILE_ROUNDS; r++) {
        len += (size_t)snprintf(
            t + len, cap - len,
            "  m%d = f32[%lld,%lld] dot(a%d, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            "  s%d = f32[] reduce(m%d, ninf), dimensions={0,1}, to_apply=max\n"
            "  sb%d = f32[%lld] broadcast(s%d), dimensions={}\n  y%d = f32[%lld] add(x, sb%d)\n"
            "  t%d = f32[] reduce(y%d, ninf), dimensions={0}, to_apply=max\n"
            "  tb%d = f32[%lld] broadcast(t%d), dimensions={}\n  u%d = f32[%lld] add(xc, tb%d)\n",
            r, D, D, r - 1, r, r, r, E, r, r, E, r, r, r, r, C, r, r, C, r);
        bool coll = r % w->every == 0;
        if (coll)
            len += (size_t)snprintf(t + len, cap - len, "  c%d = f32[%lld] %s(u%d), channel_id=%d, replica_groups={%s}%s\n",
                                    r, out, OP[w->kind], r, r, groups, attributes(w->kind));
        len += (size_t)snprintf(t + len, cap - len,
                                "  f%d = f32[1] slice(%s%d), slice={[0:1]}\n  g%d = f32[] reshape(f%d)\n"
                                "  gb%d = f32[%lld,%lld] broadcast(g%d), dimensions={}\n"
                                "  %sa%d = f32[%lld,%lld] add(m%d, gb%d)\n",
                                r, coll ? "c" : "u", r, r, r, r, D, D, r, r == PROFILE_ROUNDS ? "ROOT " : "", r, D, D,
                                r, r);
    }
    snprintf(t + len, cap - len, "}\n");
    return t;
}

/* The collectives read the same parameter, ordered by
 * control-predecessors rather than by data, so that no copy or slice
 * between two of them adds its bytes to their time:
 *
 *   c1 = coll(x); c2 = coll(x), control-predecessors={c1}; ...  ROOT cK
 *
 * (the run keeps the results nobody reads: a device makes every call). */
char *profile_chain_module(int kind, int64_t elems, int count, int64_t n)
{
    size_t cap = 2048 + (size_t)count * 768;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    char groups[512];
    all_devices(groups, sizeof groups, n);
    long long out = result_elems(kind, elems, n);
    size_t len = header(t, cap, n);
    len += (size_t)snprintf(t + len, cap - len, "ENTRY e {\n  x = f32[%lld] parameter(0)\n", (long long)elems);
    for (int r = 1; r <= count; r++) {
        char after[48] = "";
        if (r > 1)
            snprintf(after, sizeof after, ", control-predecessors={c%d}", r - 1);
        len += (size_t)snprintf(t + len, cap - len, "  %sc%d = f32[%lld] %s(x), channel_id=%d, replica_groups={%s}%s%s\n",
                                r == count ? "ROOT " : "", r, out, OP[kind], r, groups, attributes(kind), after);
    }
    snprintf(t + len, cap - len, "}\n");
    return t;
}
