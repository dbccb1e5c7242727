/* tiny_box — the Tiny fast paths: pop from / push onto the free list of a
 * slab the calling thread owns.  No atomics, no locks. */
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
    return hak_tiny_alloc_slow(size, h);
sample:
    return hak_profile_alloc(size);
}

/* s is owned by the calling thread; p passed the free check. */
static inline void hak_tiny_free(hak_heap_t *h, hak_slab_t *s, void *p) {
    hak_block_t *b = (hak_block_t *)p;
    hak_link_set(b, s->free);
    s->free = b;
    /* Slow when the slab just became empty, or was full: with HAK_SLAB_FULL
     * (the sign bit) set the count reads as a negative int32.  On x86-64 the
     * decrement and the test are one `subl` on memory and a `jle` on its
     * flags, which gcc does not produce from C (it loads, subtracts, stores
     * and tests: three instructions more on every free). */
#if defined(__x86_64__) && defined(__GNUC__)
    __asm__ goto("subl $1, %0\n\tjle %l[slow]" : "+m"(s->used) : : "cc" : slow);
    return;
slow:
    hak_slab_free_slow(h, s);
#else
    if (hak_unlikely(--*(int32_t *)&s->used <= 0)) hak_slab_free_slow(h, s);
#endif
}

/* HAKMEM_TINY_C2_LOCAL_CACHE: a 32-byte block back into the thread's cache
 * (the owner's path for slabs of tier HAK_TIER_TINY_C2). */
static inline void hak_c2_free(hak_heap_t *h, void *p) {
    hak_slab_t *c = &h->c2_cache;
    if (hak_likely(0u - c->used < HAK_C2_CACHE_CAP)) {
        hak_block_t *b = (hak_block_t *)p;
        hak_link_set(b, c->free);
        c->free = b;
        c->used--;
        return;
    }
    hak_c2_free_full(h, p);
}

#endif
