/*
 * feed.c: host transfers for `tessel run --infeed FILE.npy`: the files feed
 * infeed and recv-from-host in order, one file per array leaf (a tuple
 * infeed of (f32[4], s32[]) takes the next two files, depth first); the
 * values outfeed and send-to-host give are kept, one per array leaf in
 * program order, and written after the run as DIR/outfeed_<i>.npy.
 * Running out of files is an error naming the instruction and how many
 * files were given, so a program never waits for a feed that cannot come.
 */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

/* One leaf from the next file. */
static IrStatus feed_leaf(RtFeed *f, const IrModule *m, const IrInstr *ins, const IrShape *s,
                          DevValue **out, IrDiag *d)
{
    if (f->next >= f->nfiles)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos,
                        "%s: %s needs a value from the host: give one with --infeed FILE.npy "
                        "(%d given, all used)", ins->name, ir_op_name(ins->op), (int)f->nfiles);
    const char *path = f->files[f->next++];
    char what[160];
    snprintf(what, sizeof what, "the value of %s %s", ir_op_name(ins->op), ins->name);
    /* the file against the value first: a header that lies about its
     * size is refused, not allocated for */
    IrStatus st = rt_npy_check(path, s, what, d);
    if (st != IR_OK)
        return st;
    DevValue *v = dev_value_new_uninit(s);
    if (!v)
        return ir_oom(d, NULL);
    st = rt_npy_read(path, s, what, v->data, d);
    if (st != IR_OK) {
        dev_value_unref(v);
        return st;
    }
    *out = v;
    return IR_OK;
}

/* A value of shape s, tuples leaf by leaf, depth first. */
static IrStatus feed_value(RtFeed *f, const IrModule *m, const IrInstr *ins, const IrShape *s,
                           DevValue **out, IrDiag *d)
{
    if (s->type == IR_TOKEN) {
        *out = dev_value_new(s);
        return *out ? IR_OK : IR_ENOMEM;
    }
    if (s->type != IR_TUPLE)
        return feed_leaf(f, m, ins, s, out, d);
    DevValue **el = ts_calloc((size_t)(s->ntuple ? s->ntuple : 1), sizeof *el);
    if (!el)
        return IR_ENOMEM;
    IrStatus st = IR_OK;
    for (int32_t i = 0; i < s->ntuple && st == IR_OK; i++)
        st = feed_value(f, m, ins, &s->tuple[i], &el[i], d);
    if (st == IR_OK)
        st = (*out = dev_value_tuple(s, s->ntuple, el)) ? IR_OK : IR_ENOMEM;
    else
        for (int32_t i = 0; i < s->ntuple; i++)
            dev_value_unref(el[i]);
    ts_free(el);
    return st;
}

static IrStatus feed_cb(void *ctx, const IrModule *m, const IrInstr *ins, const IrShape *s,
                        DevValue **out, IrDiag *d)
{
    RtFeed *f = ctx;
    pthread_mutex_lock(&f->mu);
    IrStatus st = feed_value(f, m, ins, s, out, d);
    pthread_mutex_unlock(&f->mu);
    return st;
}

static IrStatus keep(RtFeed *f, DevValue *v)
{
    if (v->shape.type == IR_TOKEN)
        return IR_OK;
    if (v->shape.type == IR_TUPLE) {
        for (int32_t i = 0; i < v->nelems; i++)
            if (keep(f, v->elems[i]) != IR_OK)
                return IR_ENOMEM;
        return IR_OK;
    }
    int64_t cap = f->cap; /* runtime.h keeps it an int32_t */
    if (!IR_GROW(f->kept, cap, f->nkept + 1))
        return IR_ENOMEM;
    f->cap = (int32_t)(cap < INT32_MAX ? cap : INT32_MAX);
    f->kept[f->nkept++] = dev_value_ref(v);
    return IR_OK;
}

static IrStatus take_cb(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *v, IrDiag *d)
{
    RtFeed *f = ctx;
    pthread_mutex_lock(&f->mu);
    IrStatus st = keep(f, v);
    pthread_mutex_unlock(&f->mu);
    if (st != IR_OK)
        return ir_error(d, st, m->file, m->src, ins->pos, "%s: out of memory", ins->name);
    return IR_OK;
}

void rt_feed_init(RtFeed *f, int32_t nfiles, const char *const *files)
{
    memset(f, 0, sizeof *f);
    f->nfiles = nfiles;
    f->files = files;
    pthread_mutex_init(&f->mu, NULL);
    f->hooks = (DevHostTransfers){f, feed_cb, take_cb};
}

void rt_feed_free(RtFeed *f)
{
    for (int32_t i = 0; i < f->nkept; i++)
        dev_value_unref(f->kept[i]);
    ts_free(f->kept);
    pthread_mutex_destroy(&f->mu);
    memset(f, 0, sizeof *f);
}

DevValue *rt_feed_outfeeds(const RtFeed *f)
{
    DevValue **el = ts_malloc((size_t)(f->nkept ? f->nkept : 1) * sizeof *el);
    if (!el)
        return NULL;
    for (int32_t i = 0; i < f->nkept; i++)
        el[i] = dev_value_ref(f->kept[i]);
    DevValue *t = dev_value_tuple(NULL, f->nkept, el);
    ts_free(el);
    return t;
}
