/*
 * op_times.c: the table of per-instruction times (DevOpTimes, device.h)
 * that the executor fills while it is on (exec.c, timed_run) and the
 * ranking `--stats=ops` prints from it. One entry per instruction of the
 * module, computation after computation, so the executor finds an
 * instruction's entry by two indices and no search.
 */
#include "device.h"

#include <string.h>

IrStatus dev_op_times_init(DevOpTimes *t, const IrModule *m)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    if (!(t->first = ts_malloc((size_t)(m->ncomp + 1) * sizeof *t->first)))
        return IR_ENOMEM;
    int32_t n = 0;
    for (int32_t k = 0; k < m->ncomp; k++) {
        t->first[k] = n;
        n += m->comp[k]->ninstr;
    }
    t->first[m->ncomp] = n;
    if (!(t->t = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *t->t))) {
        dev_op_times_free(t);
        return IR_ENOMEM;
    }
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++)
            t->t[t->first[k] + i].ins = &m->comp[k]->instr[i];
    return IR_OK;
}

void dev_op_times_free(DevOpTimes *t)
{
    ts_free(t->first);
    ts_free(t->t);
    memset(t, 0, sizeof *t);
}

DevOpTime *dev_op_time(DevOpTimes *t, int32_t comp, int32_t i)
{
    return &t->t[t->first[comp] + i];
}

/* An insertion into the ranking kept in rows: entries arrive in module
 * order, and an entry passes only those that took strictly less, so ties
 * keep module order. */
int32_t dev_op_times_top(const DevOpTimes *t, DevOpTime *rows, int32_t max)
{
    int32_t ran = 0, kept = 0;
    int32_t n = t->first ? t->first[t->m->ncomp] : 0;
    for (int32_t e = 0; e < n; e++) {
        const DevOpTime *x = &t->t[e];
        if (x->calls == 0)
            continue;
        ran++;
        if (kept == max && (max == 0 || !(x->seconds > rows[max - 1].seconds)))
            continue;
        int32_t at = kept < max ? kept++ : max - 1;
        while (at > 0 && x->seconds > rows[at - 1].seconds) {
            rows[at] = rows[at - 1];
            at--;
        }
        rows[at] = *x;
    }
    return ran;
}
