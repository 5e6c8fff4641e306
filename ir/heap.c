/*
 * heap.c: a binary min-heap of int64 keys over the caller's array.
 *
 * The topological walks (ir/topo.c's stable order, ir/schedule_overlap.c's
 * overlap order, cluster/'s plan and host-program orders) keep their ready
 * set in one: Kahn's algorithm taking the smallest ready key each time is
 * what makes each order stable (the same module gives the same order).
 * A caller packs what it orders by into the key (a class times n plus a
 * rank, say) and decodes what it pops.
 */
#include "ir.h"

void ir_heap_push(IrHeap *h, int64_t key)
{
    int32_t i = h->n++;
    while (i > 0 && h->k[(i - 1) / 2] > key) {
        h->k[i] = h->k[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->k[i] = key;
}

int64_t ir_heap_pop(IrHeap *h)
{
    int64_t top = h->k[0], last = h->k[--h->n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->k[c + 1] < h->k[c])
            c++;
        if (h->k[c] >= last)
            break;
        h->k[i] = h->k[c];
        i = c;
    }
    if (h->n > 0)
        h->k[i] = last;
    return top;
}
