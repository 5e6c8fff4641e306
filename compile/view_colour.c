/*
 * view_colour.c: the colours of a plan's graph, by meaning. Every
 * sharding of the logical clusters is read in its canonical form
 * (shd_canonical_str: {devices=[1,2]<=[2]} and {devices=[1,2]0,1} are
 * one), the distinct forms are sorted, and the k-th gets the k-th colour
 * of the palette; replicated is always grey. So equal shardings share a
 * colour whatever their text, different ones differ (up to the palette's
 * twelve colours), and the DOT graph and the HTML page, which both build
 * the table here, agree. The legend says each colour's meaning in words
 * (shd_describe).
 */
#include "compile.h"

#include <stdlib.h>
#include <string.h>

#define REPLICATED_COLOUR "#eeeeee"

static const char *const PALETTE[] = {"#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99",
                                      "#8dd3c7", "#bebada", "#80b1d3", "#fccde5", "#d9d9d9", "#ccebc5"};

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const PlanColour *)a)->key, ((const PlanColour *)b)->key);
}

/* Add s's canonical text unless there; false on OOM. */
static bool add(PlanColours *c, const IrSharding *s, int64_t *cap)
{
    char *k = shd_canonical_str(s);
    if (!k)
        return false;
    for (int32_t j = 0; j < c->n; j++)
        if (strcmp(c->e[j].key, k) == 0) {
            ts_free(k);
            return true;
        }
    char *w = shd_describe_str(s);
    if (!w || !IR_GROW(c->e, *cap, c->n + 1)) {
        ts_free(k);
        ts_free(w);
        return false;
    }
    c->e[c->n++] = (PlanColour){.key = k, .words = w};
    return true;
}

/* The colour of the j-th entry: grey for {replicated}, else the palette in order. */
static const char *colour_at(const PlanColours *c, int32_t j)
{
    if (strcmp(c->e[j].key, "{replicated}") == 0)
        return REPLICATED_COLOUR;
    int32_t n = 0;
    for (int32_t q = 0; q < j; q++)
        n += strcmp(c->e[q].key, "{replicated}") != 0;
    return PALETTE[n % (int32_t)(sizeof PALETTE / sizeof *PALETTE)];
}

bool plan_colours_build(const CompileResult *r, PlanColours *c)
{
    memset(c, 0, sizeof *c);
    int64_t cap = 0;
    bool ok = true;
    for (int32_t k = 0; ok && k < r->prog.ncluster; k++) {
        const IrModule *m = r->prog.cluster[k].src;
        for (int32_t ci = 0; ok && m && ci < m->ncomp; ci++)
            for (int32_t i = 0; ok && i < m->comp[ci]->ninstr; i++)
                if (m->comp[ci]->instr[i].sharding)
                    ok = add(c, m->comp[ci]->instr[i].sharding, &cap);
    }
    if (ok && c->n > 1)
        qsort(c->e, (size_t)c->n, sizeof *c->e, cmp_entry);
    for (int32_t j = 0; ok && j < c->n; j++)
        c->e[j].colour = colour_at(c, j);
    if (!ok)
        plan_colours_free(c);
    return ok;
}

void plan_colours_free(PlanColours *c)
{
    for (int32_t j = 0; j < c->n; j++) {
        ts_free(c->e[j].key);
        ts_free(c->e[j].words);
    }
    ts_free(c->e);
    memset(c, 0, sizeof *c);
}

const char *plan_colour(const PlanColours *c, const IrSharding *s)
{
    if (!s)
        return REPLICATED_COLOUR;
    char *k = shd_canonical_str(s);
    const char *col = REPLICATED_COLOUR;
    for (int32_t j = 0; k && j < c->n; j++)
        if (strcmp(c->e[j].key, k) == 0) {
            col = c->e[j].colour;
            break;
        }
    ts_free(k);
    return col;
}
