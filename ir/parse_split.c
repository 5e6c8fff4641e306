/*
 * parse_split.c: a large computation read by two threads.
 *
 * A computation of tens of thousands of instructions (an unrolled model,
 * a training step's ENTRY) is most of a module's text. Its second half is
 * read speculatively by a helper thread with a parser of its own (its own
 * module and arena, an empty name table) while this thread reads the
 * first half; when this thread's reading reaches the instruction where the
 * helper started, it takes over what the helper read instead of reading it
 * again.
 *
 * The result is the sequential one, byte for byte, because only what the
 * sequential reading would give the same is taken:
 *   - The helper starts at a line that looks like an instruction, and its
 *     work is used only if this thread's last instruction ends exactly
 *     where the helper's first starts (else it is dropped: a split inside
 *     a multi-line instruction costs time, never a different result).
 *   - The helper reads only instructions whose reading does not depend on
 *     what came before them: it stops (before, not at, the instruction)
 *     at an inline computation, a nested operand instruction, a shape left
 *     to inference, a sugared async op, or any error.
 *   - What could depend on the first half is checked as the helper's
 *     instructions are taken, in text order: a name already defined, a
 *     second ROOT, the instruction limit, the iota budget. At the first
 *     that fails, taking stops there and this thread reads on from that
 *     instruction itself, so it reports the error the sequential reading
 *     reports, at the same place.
 *   - Operands the helper could not resolve (defined in the first half)
 *     are resolved with the rest of the computation, as forward references
 *     are; an index it resolved is shifted to the instruction's place.
 */
#include "parse_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Below this many lines a computation is read by one thread: the helper's
 * start and the merge cost more than they save. */
enum { SPLIT_MIN_LINES = 8192 };

/* What the parser had after one instruction the helper read. */
typedef struct SplitRec {
    LxMark end;           /* the lexer at the next instruction */
    size_t nlocal, ncallees, nparams;
    int64_t iota_used;    /* iota entries expanded so far */
    bool root;
} SplitRec;

struct Split {
    Parser B;             /* the helper's parser: its own module, one computation */
    IrDiag d;             /* its errors, never reported */
    size_t at;            /* where its first instruction starts */
    SplitRec *rec;
    size_t nrec;
    int64_t caprec;
    atomic_bool cancel;
    pthread_t thread;
    bool running;         /* thread not joined yet */
};

/* The helper's parser state after an instruction it keeps must have grown
 * only where the merge knows how to move things over. */
typedef struct SplitSeen {
    size_t nbodies, nnested, ndefer, ninl;
    int32_t nasync_sugar;
} SplitSeen;

static SplitSeen seen_of(const Parser *B)
{
    return (SplitSeen){B->nbodies, B->nnested, B->ndefer, B->ninl, B->nasync_sugar};
}

static void *split_main(void *arg)
{
    Split *s = arg;
    (void)pthread_setname_np(pthread_self(), "tessel-split"); /* for perf and gdb */
    Parser *B = &s->B;
    IrComputation *cb = B->m->comp[0];
    bool saw_root = false;
    while (!atomic_load_explicit(&s->cancel, memory_order_relaxed) && !lx_is(&B->L, LX_RBRACE) &&
           !lx_is(&B->L, LX_EOF)) {
        SplitSeen before = seen_of(B);
        int32_t root = cb->root;
        if (!prs_parse_one(B, 0, false, &saw_root))
            break;
        SplitSeen after = seen_of(B);
        if (before.nbodies != after.nbodies || before.nnested != after.nnested || before.ndefer != after.ndefer ||
            before.ninl != after.ninl || before.nasync_sugar != after.nasync_sugar)
            break;
        if (!IR_GROW(s->rec, s->caprec, (int64_t)s->nrec + 1))
            break;
        s->rec[s->nrec++] = (SplitRec){lx_mark(&B->L), B->local.n, B->callees.n, B->nparams,
                                       LX_IOTA_BUDGET - B->L.iota_left, cb->root != root};
    }
    return NULL;
}

/* The offset of the first line at or after line `skip` lines below the
 * current token's that starts, after blanks, like an instruction (a name,
 * or ROOT), with its line number; 0 when there is none before `end`. */
static size_t split_line(const Lexer *L, int64_t skip, size_t end, int32_t *line)
{
    const char *t = L->text;
    size_t p = L->tok.start;
    int32_t ln = L->tok.pos.line;
    for (int64_t i = 0; i < skip; i++) {
        const char *nl = memchr(t + p, '\n', end - p);
        if (!nl)
            return 0;
        p = (size_t)(nl - t) + 1;
        ln++;
    }
    /* A few lines on at most: past a blank line or a comment. */
    for (int k = 0; k < 64 && p < end; k++) {
        size_t q = p;
        while (q < end && (t[q] == ' ' || t[q] == '\t'))
            q++;
        char ch = q < end ? t[q] : 0;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '%') {
            *line = ln;
            return p;
        }
        const char *nl = memchr(t + p, '\n', end - p);
        if (!nl)
            return 0;
        p = (size_t)(nl - t) + 1;
        ln++;
    }
    return 0;
}

static void split_free(Split *s)
{
    prs_release(&s->B);
    ir_module_free(s->B.m);
    ir_diag_clear(&s->d);
    ts_free(s->rec);
    ts_free(s);
}

Split *prs_split_start(Parser *P, int32_t est)
{
    int32_t min = P->opt.split_lines ? P->opt.split_lines : SPLIT_MIN_LINES;
    if (min < 0 || est < min || est < 2)
        return NULL;
    const Lexer *L = &P->L;
    /* The helper takes the second half; the closing '}' of the computation
     * is on line tok + est (find_closes). */
    int32_t line = 0;
    size_t at = split_line(L, est / 2, L->len, &line);
    if (at == 0 || line >= L->tok.pos.line + est)
        return NULL;
    Split *s = ts_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    atomic_init(&s->cancel, false);
    Parser *B = &s->B;
    B->opt = P->opt;
    B->num_devices = P->num_devices;
    B->top = B->last_top = -1;
    B->m = ir_module_new("split");
    if (!B->m || ir_add_computation(B->m, "split") != 0) {
        split_free(s);
        return NULL;
    }
    int32_t rest = L->tok.pos.line + est - line;
    lx_init(&B->L, L->file, L->text, L->len, L->src, B->m->arena, &s->d, &P->opt.limits);
    B->L.off = at;
    B->L.line = line;
    B->L.col = 1;
    B->L.depth = L->depth;
    lx_next(&B->L);
    s->at = B->L.tok.start;
    if (ir_reserve_instrs(B->m->comp[0], rest) != IR_OK || !prs_map_reserve(&B->instrs, (size_t)rest) ||
        pthread_create(&s->thread, NULL, split_main, s) != 0) {
        split_free(s);
        return NULL;
    }
    s->running = true;
    return s;
}

size_t prs_split_at(const Split *s)
{
    return s->at;
}

/* The helper's references from[*at, upto) into `to`, as references of
 * computation ci's instructions from `base` on. */
static bool move_refs(Parser *P, RefVec *to, const RefVec *from, size_t *at, size_t upto, int32_t ci, int32_t base)
{
    for (; *at < upto; (*at)++) {
        Ref x = from->v[*at];
        x.comp = ci;
        x.instr += base;
        if (!prs_push_ref(P, to, x))
            return false;
    }
    return true;
}

/* Move the helper's instruction j (index j of its computation) and what it
 * left for later (references, parameters) into computation ci at `base`. */
static bool take_one(Parser *P, Split *s, int32_t ci, int32_t base, size_t j, const MapHint *hint, size_t *lref,
                     size_t *cref, size_t *par)
{
    Parser *B = &s->B;
    IrComputation *c = P->m->comp[ci];
    IrInstr ins = B->m->comp[0]->instr[j];
    for (int32_t k = 0; k < ins.nopnd; k++)
        if (ins.opnd[k] >= 0)
            ins.opnd[k] += base;
    int32_t idx = base + (int32_t)j;
    if (ir_add_instr(P->m, c, &ins) != idx || !prs_map_put_at(&P->instrs, hint, ins.name, strlen(ins.name), idx))
        return lx_nomem(&P->L);
    const SplitRec *r = &s->rec[j];
    if (!move_refs(P, &P->local, &B->local, lref, r->nlocal, ci, base) ||
        !move_refs(P, &P->callees, &B->callees, cref, r->ncallees, ci, base))
        return false;
    for (; *par < r->nparams; (*par)++) {
        if (!IR_GROW(P->params, P->capparams, (int64_t)P->nparams + 1))
            return lx_nomem(&P->L);
        ParamUse u = B->params[*par];
        u.instr += base;
        P->params[P->nparams++] = u;
    }
    return true;
}

bool prs_split_meet(Parser *P, Split *s, int32_t ci, bool *saw_root, int32_t *last)
{
    Lexer *L = &P->L;
    bool aligned = L->tok.start == s->at;
    if (!aligned)
        atomic_store(&s->cancel, true);
    pthread_join(s->thread, NULL);
    s->running = false;
    if (!aligned)
        return true;
    IrComputation *c = P->m->comp[ci];
    const IrInstr *bi = s->B.m->comp[0]->instr;
    int32_t base = c->ninstr;
    size_t j = 0, lref = 0, cref = 0, par = 0;
    int64_t iota = 0;
    /* Room for all of it at once (the references grow by the helper's). */
    if (!IR_GROW(P->local.v, P->local.cap, (int64_t)(P->local.n + s->B.local.n)) ||
        !IR_GROW(P->callees.v, P->callees.cap, (int64_t)(P->callees.n + s->B.callees.n)) ||
        ir_reserve_instrs(c, base + (int32_t)s->nrec) != IR_OK)
        return lx_nomem(L);
    enum { AHEAD = 8 }; /* names whose table slots are asked for early */
    for (size_t k = 0; k < AHEAD && k < s->nrec; k++)
        prs_map_prefetch(&P->instrs, bi[k].name, strlen(bi[k].name));
    for (; j < s->nrec; j++) {
        const SplitRec *r = &s->rec[j];
        if (j + AHEAD < s->nrec)
            prs_map_prefetch(&P->instrs, bi[j + AHEAD].name, strlen(bi[j + AHEAD].name));
        MapHint hint;
        int64_t used = r->iota_used - iota;
        if (prs_map_find_hint(&P->instrs, bi[j].name, strlen(bi[j].name), &hint) >= 0 || (r->root && *saw_root) ||
            P->ninstr + 1 > L->lim.max_instructions || used > L->iota_left)
            break; /* read here: the sequential reading's error, from this instruction */
        if (!take_one(P, s, ci, base, j, &hint, &lref, &cref, &par))
            return false;
        P->ninstr++;
        L->iota_left -= used;
        iota = r->iota_used;
        if (r->root) {
            *saw_root = true;
            c->root = base + (int32_t)j;
        }
        *last = base + (int32_t)j;
    }
    if (j > 0)
        lx_reset(L, s->rec[j - 1].end);
    /* What the taken instructions point at (names, shapes, attributes)
     * lives in the helper's arena: the module keeps it. */
    ir_arena_adopt(P->m->arena, s->B.m->arena);
    return true;
}

void prs_split_end(Split *s)
{
    if (!s)
        return;
    if (s->running) {
        atomic_store(&s->cancel, true);
        pthread_join(s->thread, NULL);
    }
    split_free(s);
}
