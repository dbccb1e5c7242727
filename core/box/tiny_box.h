/* tiny_box — the Tiny fast paths: pop from the free list of a slab the
 * calling thread owns (a free pushes: box/slab_push_box.h).  No atomics,
 * no locks.  NULL when it cannot serve (the class's free list is empty, or
 * the profiler's countdown ran out): the caller takes the slow path. */
#ifndef HAK_TINY_BOX_H
#define HAK_TINY_BOX_H

#include "hakmem_internal.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"
#include "box/profile_box.h"

static inline HAK_ALLOC_PATH void *hak_tiny_alloc(hak_heap_t *h, size_t size) {
    unsigned cls = hak_tiny_class(size);
    hak_slab_t *s = h->queue_head[cls];
    hak_block_t *b = s->free;
    if (hak_likely(b != NULL)) {
        HAK_SAMPLE_COUNTDOWN(h, size, sample);
        s->free = hak_link_get(b);
        s->used++;
        hak_block_taken(b);
        return b;
    }
sample:
    return NULL;
}

#endif
