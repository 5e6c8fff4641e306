/*
 * arena.c: the bump allocator every module lives in, and the one allocation
 * hook of the project (ts_malloc and friends) through which failure
 * injection makes the Nth allocation fail.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the allocation hook ---- */

/* Atomic: device threads allocate concurrently. */
static _Atomic long fail_after; /* 0: never fail; N: the Nth allocation from now fails */
static _Atomic long alloc_count;

void ts_fail_alloc_after(long n)
{
    fail_after = n;
}

long ts_alloc_count(void)
{
    return alloc_count;
}

/* True when this allocation must fail (failure injection). */
static bool inject_failure(void)
{
    alloc_count++;
    if (fail_after <= 0)
        return false;
    return --fail_after == 0;
}

void *ts_malloc(size_t n)
{
    if (inject_failure())
        return NULL;
    return malloc(n ? n : 1);
}

void *ts_calloc(size_t n, size_t elem)
{
    if (inject_failure())
        return NULL;
    if (n == 0 || elem == 0)
        return calloc(1, 1);
    return calloc(n, elem);
}

void *ts_realloc(void *p, size_t n)
{
    if (inject_failure())
        return NULL;
    return realloc(p, n ? n : 1);
}

void *ts_malloc_aligned(size_t align, size_t n)
{
    void *p = NULL;
    if (inject_failure() || posix_memalign(&p, align, n ? n : 1) != 0)
        return NULL;
    return p;
}

void ts_free(void *p)
{
    free(p);
}

char *ts_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = ts_malloc(n);
    if (r)
        memcpy(r, s, n);
    return r;
}

/* ---- huge pages for large IR blocks ---- */

/* A first touch of a 4 KiB page costs a page fault; on the virtual
 * machines tessel is built and benchmarked on that is about 10 us (a
 * 64k-instruction module touches some 300 MB: 75k faults, most of the
 * compile time). A 2 MiB huge page costs one fault. The IR's large blocks
 * (arena blocks, instruction arrays) are written once, front to back, and
 * live as long as their module, so they are what huge pages are for. */
enum { HUGE_MIN = 2 << 20 };

void ir_hint_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    if (!p || n < HUGE_MIN)
        return;
    /* Asked each time (no static: device threads allocate too); this runs
     * once per block of megabytes. */
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    /* madvise wants a page-aligned start: advise the whole pages inside the
     * block (the kernel backs each 2 MiB-aligned stretch of them with a
     * huge page). A refusal (no THP in this kernel) changes nothing. */
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* A large block at a 2 MiB boundary, so every 2 MiB of it can be a huge
 * page (a page-aligned block of 4 MiB from malloc is half 4 KiB pages: its
 * unaligned head and tail). The block is over-allocated by 2 MiB (address
 * space only: the slack is never touched) and the malloc pointer is kept
 * in the 16 bytes before the returned one, after a magic word that
 * ir_big_free checks. Small blocks and AddressSanitizer builds (whose
 * redzones must sit right after the block) come from a 64-byte aligned
 * allocation with a 64-byte lead instead: every block starts on a cache
 * line, as the vector kernels' packed buffers need (device/sgemm_avx512.c). */
enum { BIG_LINE = 64 };

static bool big_huge(size_t n)
{
#if defined(__SANITIZE_ADDRESS__)
    (void)n;
    return false;
#else
    return n >= HUGE_MIN;
#endif
}

/* In the 16 bytes before the block: this word, then the malloc pointer. */
#define BIG_MAGIC 0xb16b10c4a110c8b1ull

void *ir_big_alloc(size_t n)
{
    bool huge = big_huge(n);
    size_t lead = huge ? (size_t)HUGE_MIN : (size_t)BIG_LINE;
    if (n > SIZE_MAX - lead - 16)
        return NULL;
    unsigned char *base = huge ? ts_malloc(n + lead) : ts_malloc_aligned(BIG_LINE, n + lead);
    if (!base)
        return NULL;
    uintptr_t p = (uintptr_t)base + lead;
    if (huge)
        p = ((uintptr_t)base + 16 + HUGE_MIN - 1) & ~(uintptr_t)(HUGE_MIN - 1);
    ((void **)p)[-1] = base;
    ((uint64_t *)p)[-2] = BIG_MAGIC;
    ir_hint_huge((void *)p, n);
    return (void *)p;
}

void ir_big_free(void *p)
{
    if (!p)
        return;
    /* A pointer from ts_malloc or dev_alloc, or one freed twice: a bug
     * (ir.h's allocation policy), caught before it frees the wrong base. */
    if (((uint64_t *)p)[-2] != BIG_MAGIC)
        __builtin_trap();
    ((uint64_t *)p)[-2] = 0;
    ts_free(((void **)p)[-1]);
}

/* ---- the arena ---- */

/* Under AddressSanitizer, memory forgotten by ir_arena_reset is poisoned
 * until it is handed out again, so a pointer kept across a reset (a
 * scratch value used after its round) is reported where it is used. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void ir_poison(const void *p, size_t n)
{
    POISON(p, n);
}

void ir_unpoison(const void *p, size_t n)
{
    UNPOISON(p, n);
}

/* Blocks are chained; a request larger than a quarter of the current block
 * size gets a block of its own, so huge literals do not waste a whole
 * block. Blocks grow geometrically (64 KiB, 128 KiB, ... 16 MiB): a small
 * module stays small, a large one takes few large blocks (huge pages,
 * fewer mallocs). Memory is zeroed ahead of the bump pointer in 64 KiB
 * steps (one memset per step, not per allocation: most allocations are a
 * few dozen bytes), so a block's pages are first touched in order, after
 * the huge-page hint, and never more than a step past what is used. */
typedef struct Block {
    struct Block *next;
    size_t used, size;
    size_t zeroed;      /* data[0, zeroed) is zero or handed out */
    bool recycled;      /* reset at least once: zero exactly what is handed out
                         * (a scratch round is small; stepping ahead would
                         * clear 64 KiB per round) */
    _Alignas(16) unsigned char data[];
} Block;

enum { ZERO_STEP = 64 * 1024 };

struct IrArena {
    Block *head;
    size_t reserved;
    size_t next_size;   /* size of the next shared block; 0 = BLOCK_SIZE */
    IrPrefault *prefault; /* populates new large blocks; NULL: none */
};

enum { BLOCK_SIZE = 64 * 1024, BLOCK_MAX = 16 << 20 };

IrArena *ir_arena_new(void)
{
    IrArena *a = ts_calloc(1, sizeof *a);
    return a;
}

void ir_arena_set_prefault(IrArena *a, IrPrefault *f)
{
    a->prefault = f;
}

void ir_arena_adopt(IrArena *to, IrArena *from)
{
    Block *b = from->head;
    if (!b)
        return;
    /* Behind to's head, which stays the block allocations come from. */
    Block *tail = b;
    while (tail->next)
        tail = tail->next;
    if (to->head) {
        tail->next = to->head->next;
        to->head->next = b;
    } else {
        to->head = b;
    }
    to->reserved += from->reserved;
    from->head = NULL;
    from->reserved = 0;
}

void ir_arena_free(IrArena *a)
{
    if (!a)
        return;
    Block *b = a->head;
    while (b) {
        Block *next = b->next;
        ir_big_free(b);
        b = next;
    }
    ts_free(a);
}

void ir_arena_reset(IrArena *a)
{
    /* Keep the head (the newest shared block, the largest): a scratch
     * arena reset at a steady rate settles on one block that fits a round
     * of work, reused while it is still in the cache. */
    Block *h = a->head;
    if (!h)
        return;
    Block *b = h->next;
    while (b) {
        Block *next = b->next;
        ir_big_free(b);
        b = next;
    }
    h->next = NULL;
    h->used = 0;
    h->zeroed = 0;
    h->recycled = true;
    a->reserved = h->size;
    POISON(h->data, h->size);
}

/* A new block of bs data bytes (not zeroed), or NULL. */
static Block *block_new(IrArena *a, size_t bs)
{
    if (bs > SIZE_MAX - sizeof(Block))
        return NULL;
    Block *nb = ir_big_alloc(sizeof(Block) + bs);
    if (!nb)
        return NULL;
    nb->next = NULL;
    nb->used = 0;
    nb->zeroed = 0;
    nb->recycled = false;
    nb->size = bs;
    a->reserved += bs;
    if (bs >= HUGE_MIN)
        ir_prefault(a->prefault, nb->data, bs);
    return nb;
}

void *ir_alloc(IrArena *a, size_t size)
{
    if (size > SIZE_MAX - 15)
        return NULL;
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    Block *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t shared = a->next_size ? a->next_size : BLOCK_SIZE;
        if (size > shared / 4) {
            /* A big private block goes behind the current one so the
             * current block keeps serving small requests. */
            Block *nb = block_new(a, size);
            if (!nb)
                return NULL;
            if (b) {
                nb->next = b->next;
                b->next = nb;
            } else {
                a->head = nb;
            }
            nb->used = nb->zeroed = size;
            memset(nb->data, 0, size);
            return nb->data;
        }
        Block *nb = block_new(a, shared);
        if (!nb)
            return NULL;
        a->next_size = shared < BLOCK_MAX ? shared * 2 : BLOCK_MAX;
        nb->next = b;
        a->head = nb;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    UNPOISON(p, size);
#if defined(__SANITIZE_ADDRESS__)
    memset(p, 0, size); /* exactly: what lies past it may be poisoned */
#else
    if (b->used > b->zeroed) {
        size_t z = b->recycled ? b->used : b->zeroed + ZERO_STEP;
        if (z < b->used)
            z = b->used;
        if (z > b->size)
            z = b->size;
        memset(b->data + b->zeroed, 0, z - b->zeroed);
        b->zeroed = z;
    }
#endif
    return p;
}

void *ir_alloc_array(IrArena *a, size_t n, size_t elem)
{
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    return ir_alloc(a, n * elem);
}

char *ir_strndup(IrArena *a, const char *s, size_t n)
{
    char *r = ir_alloc(a, n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    return r;
}

char *ir_strdup(IrArena *a, const char *s)
{
    return ir_strndup(a, s, strlen(s));
}

char *ir_sprintf(IrArena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *r = ir_alloc(a, (size_t)n + 1);
    if (!r)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(r, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return r;
}

size_t ir_arena_bytes(const IrArena *a)
{
    return a->reserved;
}
