/*
 * mpi_agree.c: the ranks agree that they run the same thing, before any
 * step. Each rank describes its run as a fixed record of named fields
 * (the program, the model, the inputs, the steps, the options and tuning
 * that shape a message, and whatever its caller adds: RtAgreeField), each
 * a short text kept as it is or the SHA-256 of a longer one. One
 * all-gather of the records (a collective like the others: checked in,
 * watched by the heartbeat), then every rank compares every record with
 * rank 0's, field by field, in the same order: every rank reaches the
 * same verdict from the same bytes, so a difference is one error on every
 * rank (naming the field and the first rank that differs, with both
 * values when they are short texts, then the other fields that differ
 * and their first ranks) and nobody waits for anybody.
 *
 *   rank 0: {plan ab12.., seed "7", steps "3", --output-dir "yes"}
 *   rank 1: {plan ab12.., seed "8", steps "3", --output-dir "no"}
 *   every rank: "rank 1's random inputs' seed is 8, rank 0's is 7"
 */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

/* A field on the wire: its kind, then its value (RT_AGREE_VALUE bytes). */
enum { WIRE = 8 + RT_AGREE_VALUE };

static void put(uint8_t *w, const RtAgreeField *f)
{
    memset(w, 0, WIRE);
    w[0] = f ? f->kind : RT_AGREE_UNUSED;
    if (f)
        memcpy(w + 8, f->value, RT_AGREE_VALUE);
}

/* A value for messages: a text as it is, a digest by its first 12 hex
 * digits, or why there is none. */
static void show(const uint8_t *w, char *buf, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    switch (w[0]) {
    case RT_AGREE_TEXT:
        snprintf(buf, n, "\"%.*s\"", RT_AGREE_VALUE, (const char *)w + 8);
        break;
    case RT_AGREE_DIGEST: {
        char h[13];
        for (int i = 0; i < 6; i++) {
            h[2 * i] = hex[w[8 + i] >> 4];
            h[2 * i + 1] = hex[w[8 + i] & 15];
        }
        h[12] = 0;
        snprintf(buf, n, "SHA-256 %s...", h);
        break;
    }
    case RT_AGREE_UNKNOWN:
        snprintf(buf, n, "unknown (that rank could not work it out: its own error says why)");
        break;
    default:
        snprintf(buf, n, "absent");
        break;
    }
}

/* The first field from `from` on (in order) where some rank's record
 * differs from rank 0's, and the lowest such rank: the same answer on
 * every rank. */
static bool first_difference(const uint8_t *all, int size, int from, int *field, int *rank)
{
    for (int k = from; k < RT_AGREE_FIELDS; k++) {
        const uint8_t *zero = all + (size_t)k * WIRE;
        for (int r = 0; r < size; r++) {
            const uint8_t *w = all + ((size_t)r * RT_AGREE_FIELDS + (size_t)k) * WIRE;
            if (w[0] == RT_AGREE_UNKNOWN || memcmp(w, zero, WIRE) != 0) {
                *field = k;
                *rank = r;
                return true;
            }
        }
    }
    return false;
}

IrStatus rt_mpi_agree_fields(CollMpi *t, const RtAgreeField *f, int n, IrDiag *d)
{
    size_t one = (size_t)RT_AGREE_FIELDS * WIRE;
    uint8_t *mine = ts_malloc(one), *all = ts_malloc(one * (size_t)coll_mpi_size(t));
    if (!mine || !all) { /* the others may be in the gather: the caller ends the job */
        ts_free(mine);
        ts_free(all);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", coll_mpi_rank(t));
    }
    for (int k = 0; k < RT_AGREE_FIELDS; k++)
        put(mine + (size_t)k * WIRE, k < n ? &f[k] : NULL);
    IrStatus st = coll_mpi_gather(t, mine, one, all, -1, d);
    ts_free(mine);
    int k = 0, r = 0;
    if (st != IR_OK || !first_difference(all, coll_mpi_size(t), 0, &k, &r)) {
        ts_free(all);
        return st;
    }
    /* Field k is named as this rank names it (every rank passes the same
     * names in the same order; a caller's own fields beyond n: absent). */
    const char *what = k < n && f[k].what ? f[k].what : "a field of the caller's";
    char theirs[96], zero[96];
    show(all + ((size_t)r * RT_AGREE_FIELDS + (size_t)k) * WIRE, theirs, sizeof theirs);
    show(all + (size_t)k * WIRE, zero, sizeof zero);
    /* The other fields that differ, by name and first rank (a user fixing
     * one difference should not meet the next only on the next launch). */
    char more[400] = "";
    size_t used = 0;
    int others = 0;
    for (int k2 = k + 1, r2 = 0; first_difference(all, coll_mpi_size(t), k2, &k2, &r2); k2++, others++) {
        if (others >= 4)
            continue;
        const char *name = k2 < n && f[k2].what ? f[k2].what : "a field of the caller's";
        int w = snprintf(more + used, sizeof more - used, "%s%s (rank %d)", others ? ", " : "; also different: ",
                         name, r2);
        used = w > 0 && (size_t)w < sizeof more - used ? used + (size_t)w : sizeof more - 1;
    }
    if (others > 4)
        snprintf(more + used, sizeof more - used, " and %d more", others - 4);
    st = r == 0 ? ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                           "the ranks cannot agree: rank 0's %s is %s%s; every rank stops, nothing written", what,
                           zero, more)
                : ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                           "the ranks do not run the same thing: rank %d's %s is %s, rank 0's is %s%s; every "
                           "rank stops, nothing written",
                           r, what, theirs, zero, more);
    ts_free(all);
    return st;
}
