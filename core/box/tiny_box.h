/* tiny_box — the Tiny fast paths: pop from / push onto the free list of a
 * slab the calling thread owns.  No atomics, no locks. */
#ifndef HAK_TINY_BOX_H
#define HAK_TINY_BOX_H

#include "hakmem_internal.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"

static inline void *hak_tiny_alloc(hak_heap_t *h, size_t size) {
    unsigned cls = hak_tiny_class(size);
    hak_slab_t *s = h->queue_head[cls];
    hak_block_t *b = s->free;
    if (hak_likely(b != NULL)) {
        s->free = hak_link_get(b);
        s->used++;
        hak_block_taken(b);
        return b;
    }
    return hak_tiny_alloc_slow(h, cls);
}

/* s is owned by the calling thread. */
static inline void hak_tiny_free(hak_heap_t *h, hak_slab_t *s, void *p) {
    hak_block_t *b = (hak_block_t *)p;
    hak_block_t *head = s->free;
    if (HAK_CHEAP_DOUBLE_FREE_CHECK && hak_unlikely(head == b)) {  /* free(p); free(p) */
        hak_bad_free("free(): double free of", p);
        return;
    }
    hak_link_set(b, head);
    s->free = b;
    /* slow when the slab just became empty, or was full (HAK_SLAB_FULL) */
    if (hak_unlikely(--s->used - 1u >= HAK_SLAB_FULL - 1u))
        hak_slab_free_slow(h, s);
}

/* HAKMEM_TINY_C2_LOCAL_CACHE: a 32-byte block back into the thread's cache
 * (the owner's path for slabs of tier HAK_TIER_TINY_C2). */
static inline void hak_c2_free(hak_heap_t *h, void *p) {
    hak_slab_t *c = &h->c2_cache;
    if (hak_likely(0u - c->used < HAK_C2_CACHE_CAP)) {
        hak_block_t *b = (hak_block_t *)p;
        if (HAK_CHEAP_DOUBLE_FREE_CHECK && hak_unlikely(c->free == b)) {
            hak_bad_free("free(): double free of", p);
            return;
        }
        hak_link_set(b, c->free);
        c->free = b;
        c->used--;
        return;
    }
    hak_c2_free_full(h, p);
}

#endif
