/* c2_cache_box — HAKMEM_TINY_C2_LOCAL_CACHE's fast path: a 32-byte block
 * back into the thread's cache (hakmem_c2_cache.c).  The cache pops with
 * the ordinary Tiny fast path: it is the queue head of HAK_C2_CLASS. */
#ifndef HAK_C2_CACHE_BOX_H
#define HAK_C2_CACHE_BOX_H

#include "hakmem_internal.h"
#include "box/block_link_box.h"

/* s is a slab of the 32-byte cache (HAKMEM_TINY_C2_LOCAL_CACHE on, the
 * 32-byte class): its owner's frees go to the cache, not to a ring. */
static inline bool hak_c2_cache_block(const hak_slab_t *s) {
    return s->tier == HAK_TIER_TINY_C2;
}

/* p is a block of a slab of tier HAK_TIER_TINY_C2 owned by h.  False when
 * the cache is full: p is not taken, the caller calls hak_c2_free_full. */
static inline bool hak_c2_free(hak_heap_t *h, void *p) {
    hak_slab_t *c = &h->c2_cache;
    if (hak_likely(0u - c->used < HAK_C2_CACHE_CAP)) {
        hak_block_t *b = (hak_block_t *)p;
        hak_link_set(b, c->free);
        c->free = b;
        c->used--;
        return true;
    }
    return false;
}

#endif
