/*
 * value.c: run-time values of the CPU backend. A DevValue is an array (one
 * heap buffer, row-major logical order) or a tuple of values, with a
 * reference count. Values are immutable once a kernel has produced them, so
 * sharing one between several users (copy, get-tuple-element, a while
 * loop's state) is a reference, never a copy. Each value owns a heap deep
 * copy of its shape, so it outlives the module that produced it.
 *
 * Reference counts are updated atomically: the runtime hands values between
 * device threads (collectives, outputs).
 *
 * Each array counts its bytes against one device (DevValue.charged: what
 * --stats measures per device). Where the devices of one process hold one
 * array (a collective's result, a replicated argument), each holds a
 * share instead (dev_value_share): a value of its own, counted against
 * its device, whose data is the array's (kept alive by a reference); the
 * array then counts against none. A kernel writes into a share only when
 * it is the array's one holder (dev_value_sole).
 *
 * Large buffers are recycled. A fresh buffer from the system costs a page
 * fault per page on first touch, which on a loaded machine is ~70 times
 * the cost of writing warm memory; an interpreter that allocates every
 * result anew would spend its time there. So each thread keeps freed
 * buffers of at least CACHE_MIN bytes (bounded in count and bytes) and
 * hands one back when a value of exactly that size is created: loops and
 * chains of same-shaped ops then ping-pong between warm buffers, and a
 * training step finds the buffers of the step before. 64 of them: the
 * GPT-2 block's training step (bench/ peers-block-dp) frees more than 16
 * between two uses of a size, and with 16 took 48,000 fresh pages a step.
 * The cache is freed when its thread exits, or by dev_value_trim.
 *
 * On a device's executor thread (dev_alloc_use) large buffers come from
 * the device's allocator, bound to its NUMA node (alloc.c); the cache
 * keeps each buffer with its allocator and hands it only to a value of
 * the same allocator, and a bound buffer freed on another thread goes
 * back to its allocator at once (so no thread's cache holds a device's
 * memory past the device). The allocator keeps it in turn for the
 * device's next request of about that size (alloc.c): a step's outputs
 * dropped by the host, and a thread's cache when its thread exits (each
 * run of a plan from the API starts new executor threads), come back
 * warm.
 */
#include "device.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the buffer cache ---- */

#define CACHE_MIN ((int64_t)256 << 10)   /* smaller buffers: malloc reuses them itself */
#define CACHE_SLOTS 64
#define CACHE_MAX_BYTES ((int64_t)1 << 30)

typedef struct BufCache {
    int32_t n;
    int64_t bytes;
    int64_t size[CACHE_SLOTS];
    void *buf[CACHE_SLOTS];     /* oldest first */
    DevAllocator *owner[CACHE_SLOTS]; /* the allocator of each (NULL: ts_malloc) */
} BufCache;

static void buf_free(void *b, DevAllocator *owner)
{
    if (owner)
        dev_alloc_free(b);
    else
        ts_free(b);
}

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static bool cache_ok;

static void cache_destroy(void *p)
{
    BufCache *c = p;
    for (int32_t i = 0; i < c->n; i++)
        buf_free(c->buf[i], c->owner[i]);
    free(c);
}

static void cache_init(void)
{
    cache_ok = pthread_key_create(&cache_key, cache_destroy) == 0;
}

/* This thread's cache, created on first use; NULL when unavailable. */
static BufCache *cache_get(bool create)
{
    pthread_once(&cache_once, cache_init);
    if (!cache_ok)
        return NULL;
    BufCache *c = pthread_getspecific(cache_key);
    if (!c && create) {
        /* Plain calloc, not ts_calloc: failure injection counts the
         * allocations of the code under test, not this bookkeeping. */
        c = calloc(1, sizeof *c);
        if (c && pthread_setspecific(cache_key, c) != 0) {
            free(c);
            c = NULL;
        }
    }
    return c;
}

static void cache_drop(BufCache *c, int32_t i)
{
    c->bytes -= c->size[i];
    memmove(&c->buf[i], &c->buf[i + 1], (size_t)(c->n - i - 1) * sizeof *c->buf);
    memmove(&c->size[i], &c->size[i + 1], (size_t)(c->n - i - 1) * sizeof *c->size);
    memmove(&c->owner[i], &c->owner[i + 1], (size_t)(c->n - i - 1) * sizeof *c->owner);
    c->n--;
}

/* A cached buffer of exactly n bytes from allocator a (NULL: ts_malloc), or NULL. */
static void *cache_take(int64_t n, DevAllocator *a)
{
    if (n < CACHE_MIN)
        return NULL;
    BufCache *c = cache_get(false);
    if (!c)
        return NULL;
    for (int32_t i = c->n - 1; i >= 0; i--) /* the most recent is the warmest */
        if (c->size[i] == n && c->owner[i] == a) {
            void *b = c->buf[i];
            cache_drop(c, i);
            return b;
        }
    return NULL;
}

/* Keep a freed buffer of n bytes (from owner), or free it. */
static void cache_put(void *b, int64_t n, DevAllocator *owner)
{
    bool keep = n >= CACHE_MIN && n <= CACHE_MAX_BYTES && (!owner || owner == dev_alloc_current());
    BufCache *c = keep ? cache_get(true) : NULL;
    if (!c) {
        buf_free(b, owner);
        return;
    }
    while (c->n > 0 && (c->n == CACHE_SLOTS || c->bytes + n > CACHE_MAX_BYTES)) {
        buf_free(c->buf[0], c->owner[0]);
        cache_drop(c, 0);
    }
    c->buf[c->n] = b;
    c->owner[c->n] = owner;
    c->size[c->n++] = n;
    c->bytes += n;
}

void dev_value_trim(void)
{
    BufCache *c = cache_get(false);
    while (c && c->n > 0) {
        buf_free(c->buf[0], c->owner[0]);
        cache_drop(c, 0);
    }
}

/* ---- heap shapes ---- */

static void shape_free(IrShape *s)
{
    if (s->type == IR_TUPLE)
        for (int32_t i = 0; i < s->ntuple; i++)
            shape_free(&s->tuple[i]);
    ts_free(s->dims);
    ts_free(s->minor_to_major);
    ts_free((char *)s->layout_tail);
    ts_free(s->tuple);
    ts_free(s->dynamic);
    memset(s, 0, sizeof *s);
}

/* Deep copy of `src` into `dst` on the heap; false on OOM (dst is then
 * left empty, nothing leaks). */
static bool shape_dup(IrShape *dst, const IrShape *src)
{
    IrShape s = {0};
    s.type = src->type;
    s.rank = src->rank;
    s.has_layout = src->has_layout;
    if (src->rank > 0) {
        if (!(s.dims = ts_malloc((size_t)src->rank * sizeof *s.dims)))
            goto oom;
        memcpy(s.dims, src->dims, (size_t)src->rank * sizeof *s.dims);
        if (src->has_layout && src->minor_to_major) {
            if (!(s.minor_to_major = ts_malloc((size_t)src->rank * sizeof *s.minor_to_major)))
                goto oom;
            memcpy(s.minor_to_major, src->minor_to_major,
                   (size_t)src->rank * sizeof *s.minor_to_major);
        }
        /* bounded dynamic dimensions: the flags are part of the shape
         * (ir_shape_equal compares them) */
        if (src->dynamic) {
            if (!(s.dynamic = ts_malloc((size_t)src->rank * sizeof *s.dynamic)))
                goto oom;
            memcpy(s.dynamic, src->dynamic, (size_t)src->rank * sizeof *s.dynamic);
        }
    }
    if (src->layout_tail && !(s.layout_tail = ts_strdup(src->layout_tail)))
        goto oom;
    if (src->type == IR_TUPLE && src->ntuple > 0) {
        if (!(s.tuple = ts_calloc((size_t)src->ntuple, sizeof *s.tuple)))
            goto oom;
        s.ntuple = src->ntuple;
        for (int32_t i = 0; i < src->ntuple; i++)
            if (!shape_dup(&s.tuple[i], &src->tuple[i]))
                goto oom;
    }
    *dst = s;
    return true;
oom:
    shape_free(&s);
    return false;
}

/* ---- arrays ---- */

/* Arrays of at most INLINE_MAX bytes (every scalar) keep their data in the
 * same allocation, right after the DevValue: one malloc instead of two on
 * the scalar paths (reducers and comparators run through dev_call). */
#define INLINE_MAX 32

_Static_assert(sizeof(DevValue) % 8 == 0, "inline data must be 8-byte aligned");

static uint8_t *inline_data(DevValue *v)
{
    return (uint8_t *)(v + 1);
}

static DevValue *array_new(const IrShape *shape, bool zero)
{
    if (shape->type == IR_TUPLE || shape->type == IR_INVALID || shape->type >= IR_NTYPES)
        return NULL;
    int64_t nbytes = ir_shape_bytes(shape);
    if (nbytes < 0 || (uint64_t)nbytes > SIZE_MAX / 2)
        return NULL;
    bool in = nbytes > 0 && nbytes <= INLINE_MAX;
    DevValue *v = ts_calloc(1, sizeof *v + (in ? INLINE_MAX : 0));
    if (!v)
        return NULL;
    if (!shape_dup(&v->shape, shape)) {
        ts_free(v);
        return NULL;
    }
    if (in) {
        v->data = inline_data(v);
    } else if (nbytes > 0) {
        /* A device thread's large arrays: its NUMA node's allocator. */
        DevAllocator *a = nbytes >= DEV_BOUND_MIN ? dev_alloc_current() : NULL;
        if (a && !dev_alloc_binds(a))
            a = NULL;
        if ((v->data = cache_take(nbytes, a)) != NULL) {
            if (zero)
                memset(v->data, 0, (size_t)nbytes);
        } else if (a) {
            if ((v->data = dev_alloc(a, (size_t)nbytes)) != NULL) {
                ir_hint_huge(v->data, (size_t)nbytes); /* as below */
                if (zero)
                    memset(v->data, 0, (size_t)nbytes);
            }
        } else {
            /* Large arrays start on a cache line (malloc's large blocks
             * start 16 bytes into a page): a 64-byte vector load of an
             * array 16 bytes off spans two lines, which costs the f32
             * chunk interpreter a fifth of its time in cache. calloc keeps
             * its unaligned block: it need not write the zeros of fresh
             * pages, and alignment is only speed. From 2 MiB up they
             * start at a 2 MiB boundary, every 2 MiB a huge page (as the
             * allocators' buffers: alloc.c). */
            v->data = zero                     ? ts_calloc(1, (size_t)nbytes)
                      : nbytes >= DEV_BOUND_MIN ? ts_malloc_aligned(nbytes >= (2 << 20) ? 2 << 20 : 64, (size_t)nbytes)
                                                : ts_malloc((size_t)nbytes);
            /* A fresh buffer's first touch costs a page fault per 4 KiB
             * page (about 5 ms per MiB on this kind of virtual machine):
             * large ones ask for huge pages, one fault per 2 MiB. */
            if (v->data)
                ir_hint_huge(v->data, (size_t)nbytes);
        }
        if (!v->data) {
            shape_free(&v->shape);
            ts_free(v);
            return NULL;
        }
        v->alloc = a;
    }
    v->nbytes = nbytes;
    v->refs = 1;
    v->charged = dev_alloc_current();
    dev_alloc_charge(v->charged, nbytes);
    return v;
}

DevValue *dev_value_new(const IrShape *shape)
{
    return array_new(shape, true);
}

DevValue *dev_value_new_uninit(const IrShape *shape)
{
    return array_new(shape, false);
}

DevValue *dev_value_zeros(const IrShape *s)
{
    if (s->type != IR_TUPLE)
        return dev_value_new(s);
    DevValue **el = ts_calloc((size_t)(s->ntuple ? s->ntuple : 1), sizeof *el);
    if (!el)
        return NULL;
    for (int32_t i = 0; i < s->ntuple; i++)
        if (!(el[i] = dev_value_zeros(&s->tuple[i]))) {
            for (int32_t j = 0; j < i; j++)
                dev_value_unref(el[j]);
            ts_free(el);
            return NULL;
        }
    DevValue *v = dev_value_tuple(s, s->ntuple, el);
    ts_free(el);
    return v;
}

DevValue *dev_value_reshaped(DevValue *v, const IrShape *shape)
{
    if (!v)
        return NULL;
    if (v->shape.type == IR_TUPLE || shape->type == IR_TUPLE || ir_shape_bytes(shape) != v->nbytes) {
        dev_value_unref(v);
        return NULL;
    }
    if (dev_value_sole(v)) {
        /* Sole owner: keep the buffer, swap the shape. */
        IrShape s;
        if (!shape_dup(&s, shape)) {
            dev_value_unref(v);
            return NULL;
        }
        shape_free(&v->shape);
        v->shape = s;
        ts_free(v->sizes); /* a reshape is of the bounds (dynamic-reshape is its own op) */
        v->sizes = NULL;
        return v;
    }
    DevValue *r = dev_value_new_uninit(shape);
    if (r && v->nbytes > 0)
        memcpy(r->data, v->data, (size_t)v->nbytes);
    dev_value_unref(v);
    return r;
}

/* ---- tuples ---- */

static void release_elems(int32_t n, DevValue **elems)
{
    for (int32_t i = 0; i < n; i++)
        dev_value_unref(elems[i]);
}

/* The tuple shape of `n` values. */
static bool tuple_shape_of(IrShape *dst, int32_t n, DevValue **elems)
{
    memset(dst, 0, sizeof *dst);
    dst->type = IR_TUPLE;
    if (n == 0)
        return true;
    if (!(dst->tuple = ts_calloc((size_t)n, sizeof *dst->tuple)))
        return false;
    dst->ntuple = n;
    for (int32_t i = 0; i < n; i++)
        if (!shape_dup(&dst->tuple[i], &elems[i]->shape)) {
            shape_free(dst);
            return false;
        }
    return true;
}

DevValue *dev_value_tuple(const IrShape *shape, int32_t n, DevValue **elems)
{
    for (int32_t i = 0; i < n; i++)
        if (!elems[i]) {
            release_elems(n, elems);
            return NULL;
        }
    DevValue *v = n >= 0 ? ts_calloc(1, sizeof *v) : NULL;
    if (!v)
        goto fail;
    bool ok = shape ? shape_dup(&v->shape, shape) : tuple_shape_of(&v->shape, n, elems);
    if (!ok) {
        ts_free(v);
        goto fail;
    }
    if (n > 0 && !(v->elems = ts_malloc((size_t)n * sizeof *v->elems))) {
        shape_free(&v->shape);
        ts_free(v);
        goto fail;
    }
    if (n > 0)
        memcpy(v->elems, elems, (size_t)n * sizeof *elems);
    v->nelems = n;
    v->refs = 1;
    return v;
fail:
    release_elems(n > 0 ? n : 0, elems);
    return NULL;
}

/* ---- references ---- */

DevValue *dev_value_ref(DevValue *v)
{
    if (v) {
        int32_t before = __atomic_fetch_add(&v->refs, 1, __ATOMIC_RELAXED);
        assert(before > 0 && "a reference to a freed value"); /* never revived from 0 */
        (void)before;
    }
    return v;
}

void dev_value_unref(DevValue *v)
{
    if (!v)
        return;
    int32_t left = __atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL);
    assert(left >= 0 && "a value released more often than referenced");
    if (left != 0)
        return;
    release_elems(v->nelems, v->elems);
    ts_free(v->elems);
    dev_alloc_charge(v->charged, -v->nbytes);
    if (v->base)
        dev_value_unref(v->base);
    else if (v->data && v->data != inline_data(v))
        cache_put(v->data, v->nbytes, v->alloc);
    shape_free(&v->shape);
    ts_free(v->sizes);
    ts_free(v);
}

/* A tuple of v's shape whose elements are each(element, a) (a new
 * reference each); NULL on OOM. */
static DevValue *tuple_of_each(const DevValue *v, DevValue *(*each)(DevValue *, DevAllocator *), DevAllocator *a)
{
    DevValue *stack[8];
    DevValue **el = v->nelems <= 8 ? stack : ts_malloc((size_t)v->nelems * sizeof *el);
    if (!el)
        return NULL;
    int32_t i = 0;
    for (; i < v->nelems; i++)
        if (!(el[i] = each(v->elems[i], a)))
            break;
    DevValue *r = NULL;
    if (i == v->nelems)
        r = dev_value_tuple(&v->shape, v->nelems, el);
    else
        release_elems(i, el);
    if (el != stack)
        ts_free(el);
    return r;
}

static DevValue *clone_each(DevValue *v, DevAllocator *a)
{
    (void)a;
    return dev_value_clone(v);
}

void dev_value_charge(DevValue *v, DevAllocator *a)
{
    if (!v)
        return;
    for (int32_t k = 0; k < v->nelems; k++)
        dev_value_charge(v->elems[k], a);
    if (v->shape.type == IR_TUPLE)
        return;
    /* Atomic: the devices sharing an array each move its charge to no
     * one (dev_value_share), some at the same time; one of them uncounts
     * it where it was. */
    DevAllocator *was = __atomic_exchange_n(&v->charged, a, __ATOMIC_ACQ_REL);
    if (was == a)
        return;
    dev_alloc_charge(was, -v->nbytes);
    dev_alloc_charge(a, v->nbytes);
}

DevValue *dev_value_share(DevValue *v, DevAllocator *a)
{
    if (!v)
        return NULL;
    if (v->shape.type == IR_TUPLE)
        return tuple_of_each(v, dev_value_share, a);
    /* A share of a share is a share of its array: one level, so that
     * dev_value_sole sees every holder of the buffer. */
    DevValue *base = v->base ? v->base : v;
    DevValue *r = ts_calloc(1, sizeof *r);
    if (!r || !shape_dup(&r->shape, &v->shape) || (v->sizes && dev_value_set_sizes(r, v->sizes) != IR_OK)) {
        if (r)
            shape_free(&r->shape);
        ts_free(r);
        return NULL;
    }
    r->data = base->data;
    r->nbytes = base->nbytes;
    r->base = dev_value_ref(base);
    r->refs = 1;
    dev_value_charge(base, NULL);
    r->charged = a;
    dev_alloc_charge(a, r->nbytes);
    return r;
}

void dev_value_hold(DevValue **pv, DevAllocator *a)
{
    DevValue *v = *pv;
    if (!v)
        return;
    if (__atomic_load_n(&v->refs, __ATOMIC_ACQUIRE) > 1) {
        DevValue *r = dev_value_share(v, a);
        if (r) {
            dev_value_unref(v);
            *pv = r;
            return;
        }
    }
    if (v->shape.type != IR_TUPLE || __atomic_load_n(&v->refs, __ATOMIC_ACQUIRE) > 1) {
        dev_value_charge(v, a); /* (a share's allocation failed: counted here, whoever else holds it) */
        return;
    }
    /* The tuple is a's alone; its elements may be shared. */
    for (int32_t k = 0; k < v->nelems; k++)
        dev_value_hold(&v->elems[k], a);
}

bool dev_value_sole(const DevValue *v)
{
    return __atomic_load_n(&v->refs, __ATOMIC_ACQUIRE) == 1 &&
           (!v->base || __atomic_load_n(&v->base->refs, __ATOMIC_ACQUIRE) == 1);
}

bool dev_value_is_array(const DevValue *v)
{
    return v && v->shape.type != IR_TUPLE && ir_type_is_array(v->shape.type);
}

DevValue *dev_value_clone(const DevValue *v)
{
    if (!v)
        return NULL;
    if (v->shape.type != IR_TUPLE) {
        DevValue *r = dev_value_new_uninit(&v->shape);
        if (r && v->nbytes > 0)
            memcpy(r->data, v->data, (size_t)v->nbytes);
        if (r && v->sizes && dev_value_set_sizes(r, v->sizes) != IR_OK) {
            dev_value_unref(r);
            return NULL;
        }
        return r;
    }
    return tuple_of_each(v, clone_each, NULL);
}

int64_t dev_value_elements(const DevValue *v)
{
    if (!v || v->shape.type == IR_TUPLE || v->shape.type == IR_TOKEN)
        return 0;
    return ir_shape_elements(&v->shape);
}

/* Leaves under a value (1 for an array). */
static int32_t leaf_count(const DevValue *v)
{
    if (v->shape.type != IR_TUPLE)
        return 1;
    int32_t n = 0;
    for (int32_t i = 0; i < v->nelems; i++)
        n += leaf_count(v->elems[i]);
    return n;
}

DevValue *dev_value_leaf(DevValue *v, int32_t i)
{
    if (!v || i < 0)
        return NULL;
    if (v->shape.type != IR_TUPLE)
        return i == 0 ? v : NULL;
    for (int32_t k = 0; k < v->nelems; k++) {
        int32_t n = leaf_count(v->elems[k]);
        if (i < n)
            return dev_value_leaf(v->elems[k], i);
        i -= n;
    }
    return NULL;
}

int32_t dev_value_leaves(DevValue *v, DevValue **out)
{
    if (v->shape.type != IR_TUPLE) {
        out[0] = v;
        return 1;
    }
    int32_t n = 0;
    for (int32_t k = 0; k < v->nelems; k++)
        n += dev_value_leaves(v->elems[k], out + n);
    return n;
}

/* ---- run-time sizes of bounded dynamic dimensions ---- */

IrStatus dev_value_set_sizes(DevValue *v, const int64_t *sizes)
{
    if (v->shape.type == IR_TUPLE)
        return IR_EINTERNAL;
    if (!sizes) {
        ts_free(v->sizes);
        v->sizes = NULL;
        return IR_OK;
    }
    for (int32_t i = 0; i < v->shape.rank; i++)
        if (sizes[i] < 0 || sizes[i] > v->shape.dims[i])
            return IR_EINPUT;
    if (!v->sizes && v->shape.rank > 0 &&
        !(v->sizes = ts_malloc((size_t)v->shape.rank * sizeof *v->sizes)))
        return IR_ENOMEM;
    if (v->shape.rank > 0)
        memcpy(v->sizes, sizes, (size_t)v->shape.rank * sizeof *v->sizes);
    return IR_OK;
}

int64_t dev_value_dim_size(const DevValue *v, int32_t d)
{
    return v->sizes ? v->sizes[d] : v->shape.dims[d];
}

/* Copy the box [0, box) of a row-major array of dims sdims into one of
 * dims ddims (both hold the box), an odometer over all but the last
 * dimension, one memcpy per row. Example: box [2,3] from [2,4] into [2,3]:
 * rows at source offsets 0 and 4, destination 0 and 3. */
void dev_copy_box(size_t esize, int32_t rank, const uint8_t *src, const int64_t *sdims,
                  uint8_t *dst, const int64_t *ddims, const int64_t *box)
{
    int64_t n = 1;
    for (int32_t i = 0; i < rank; i++)
        n *= box[i];
    if (n == 0)
        return;
    if (rank == 0) {
        memcpy(dst, src, esize);
        return;
    }
    int64_t idx[IR_MAX_RANK] = {0}, rows = n / box[rank - 1];
    size_t row = (size_t)box[rank - 1] * esize;
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = 0, doff = 0;
        for (int32_t i = 0; i < rank - 1; i++) {
            so = so * sdims[i] + idx[i];
            doff = doff * ddims[i] + idx[i];
        }
        memcpy(dst + (size_t)(doff * ddims[rank - 1]) * esize,
               src + (size_t)(so * sdims[rank - 1]) * esize, row);
        for (int32_t i = rank - 2; i >= 0; i--) {
            if (++idx[i] < box[i])
                break;
            idx[i] = 0;
        }
    }
}

DevValue *dev_value_trimmed(DevValue *v)
{
    if (v->shape.type == IR_TUPLE || !v->sizes)
        return dev_value_ref(v);
    IrShape s = {.type = v->shape.type, .rank = v->shape.rank, .dims = v->sizes};
    DevValue *r = dev_value_new_uninit(&s);
    if (r)
        dev_copy_box(ir_type_size(s.type), s.rank, v->data, v->shape.dims, r->data, s.dims,
                     s.dims);
    return r;
}
