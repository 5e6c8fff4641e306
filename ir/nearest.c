/*
 * nearest.c: "did you mean": the edit distance of two names (Levenshtein's, a swap of neighbours counted as one edit) and
 * the nearest of a list of names to a word nobody knows. The one helper
 * for every such hint: unknown opcodes and attributes (the parser), input
 * names (runtime/input_names.c, which also sorts its list by it), and the
 * command line's options and commands (through ts_nearest_name).
 */
#include "ir.h"

#include <string.h>
#include <strings.h>

int ir_edit_distance(const char *a, size_t n, const char *b, size_t m)
{
    /* The optimal string alignment distance: Levenshtein's insert, delete
     * and substitute, plus a swap of two neighbouring bytes as one edit, the
     * commonest slip of a typist ("tahn" is one edit from tanh, two from
     * tan). Three rows: the swap looks two rows back. */
    if (n > 254 || m > 254)
        return 255;
    int rows[3][256];
    int *back2 = rows[0], *back = rows[1], *row = rows[2];
    for (size_t j = 0; j <= m; j++)
        back[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int best = back[j - 1] + (a[i - 1] != b[j - 1]);
            if (back[j] + 1 < best)
                best = back[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && back2[j - 2] + 1 < best)
                best = back2[j - 2] + 1;
            row[j] = best;
        }
        int *t = back2;
        back2 = back;
        back = row;
        row = t;
    }
    return back[m];
}

/* key with each UTF-8 character of two or more bytes made one byte (0xff,
 * which no name holds) into buf: 'négate' is one edit from negate, as a
 * person counts, not two. Returns the new length. */
static size_t one_byte_per_char(const char *key, size_t n, char *buf)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0xc0)
            buf[k++] = (char)0xff;
        else if (c < 0x80 || k == 0 || buf[k - 1] != (char)0xff)
            buf[k++] = (char)c; /* ASCII, or a stray continuation byte */
    }
    return k;
}

/* Between two names equally near key[0..n): does s win over pick? The
 * one that starts as the word does (a first byte is seldom the slip: 'w'
 * is w1, not x), then the one as long as the word (a swap or a wrong byte
 * is a likelier slip than a lost or an extra one: tahn is tanh), then, of
 * one length, the one that ends as the word does (a byte added inside is
 * likelier than a last one: LTE is LE, not LT); else the first stays. */
static bool tie_wins(const char *key, size_t n, const char *s, size_t len, const char *pick)
{
    size_t plen = strlen(pick);
    bool s_first = len > 0 && n > 0 && s[0] == key[0], p_first = plen > 0 && n > 0 && pick[0] == key[0];
    if (s_first != p_first)
        return s_first;
    if ((len == n) != (plen == n))
        return len == n;
    return len == plen && n > 0 && len > 0 && s[len - 1] == key[n - 1] && pick[plen - 1] != key[n - 1];
}

const char *ir_nearest(const char *key, size_t n, int32_t count, const char *(*name)(void *ctx, int32_t i),
                       void *ctx)
{
    /* The name in other case (root, entry, F32) is the nearest of all,
     * however many bytes differ. */
    for (int32_t i = 0; i < count; i++) {
        const char *s = name(ctx, i);
        if (s && strlen(s) == n && strncasecmp(s, key, n) == 0 && strncmp(s, key, n) != 0)
            return s;
    }
    char one[256];
    if (n < sizeof one) {
        n = one_byte_per_char(key, n, one);
        key = one;
    }
    /* Near enough to be a slip: a third of the word's bytes, at least 1
     * ("ad" -> add, "all-reduc" -> all-reduce, not "xyz" -> abs). */
    int limit = (int)(n / 3) > 1 ? (int)(n / 3) : 1, best = limit + 1;
    const char *pick = NULL;
    for (int32_t i = 0; i < count; i++) {
        const char *s = name(ctx, i);
        if (!s)
            continue;
        size_t len = strlen(s);
        int d = ir_edit_distance(key, n, s, len);
        if (d > 0 && (d < best || (d == best && pick && tie_wins(key, n, s, len, pick)))) {
            best = d;
            pick = s;
        }
    }
    return pick;
}
