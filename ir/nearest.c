/*
 * nearest.c: "did you mean": the Levenshtein distance of two names and
 * the nearest of a list of names to a word nobody knows. The one helper
 * for every such hint: unknown opcodes and attributes (the parser), input
 * names (runtime/input_names.c, which also sorts its list by it), and the
 * command line's options and commands (through ts_nearest_name).
 */
#include "ir.h"

#include <string.h>

int ir_edit_distance(const char *a, size_t n, const char *b, size_t m)
{
    if (n > 254 || m > 254)
        return 255;
    int row[256];
    for (size_t j = 0; j <= m; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

const char *ir_nearest(const char *key, size_t n, int32_t count, const char *(*name)(void *ctx, int32_t i),
                       void *ctx)
{
    /* Near enough to be a slip: a third of the word's bytes, at least 1
     * ("ad" -> add, "all-reduc" -> all-reduce, not "xyz" -> abs). */
    int limit = (int)(n / 3) > 1 ? (int)(n / 3) : 1, best = limit + 1;
    const char *pick = NULL;
    for (int32_t i = 0; i < count; i++) {
        const char *s = name(ctx, i);
        if (!s)
            continue;
        int d = ir_edit_distance(key, n, s, strlen(s));
        if (d < best && d > 0) {
            best = d;
            pick = s;
        }
    }
    return pick;
}
