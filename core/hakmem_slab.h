/* Slabs (hakmem_slab.c): each class's queue of slabs with room, making,
 * carving, parking and retiring slabs, taking runs of their free lists for
 * the caches and rings above, and giving back the free pages of the slabs
 * that live on.  Remote frees: hakmem_remote.h. */
#ifndef HAKMEM_SLAB_H
#define HAKMEM_SLAB_H

#include "hakmem_types.h"

extern hak_slab_t hak_empty_slab;

HAK_INTERNAL unsigned hak_class_take(hak_heap_t *h, unsigned cls, unsigned n, unsigned room,
                                     hak_block_t **chain);
HAK_INTERNAL void hak_slab_free_slow(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_slab_collect_notified(hak_heap_t *h);
/* The shared L2.5 heap's count of empty slabs it keeps, back to zero after
 * a sweep retired them all (its lock held). */
HAK_INTERNAL void hak_slab_shared_spares_reset(void);
HAK_INTERNAL void hak_slab_sweep_remote(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_slab_purge(hak_slab_t *s, hak_purge_scan_t *sc);
HAK_INTERNAL void hak_slab_purge_heap(hak_heap_t *h, hak_purge_scan_t *sc);
HAK_INTERNAL void hak_block_decommit(void *p, unsigned cls);
HAK_INTERNAL void hak_slab_park_all(hak_heap_t *h);
HAK_INTERNAL void hak_slab_unpark_all(hak_heap_t *h);

/* How many blocks a refill of class cls takes from the slabs
 * (hak_class_take), at most `most`: a class the thread has just started to
 * use gets one block, then 2, 4, ... (reset when a thread gets the heap),
 * so a thread that needs one block does not take and touch a cache's or a
 * ring's worth. */
static inline unsigned hak_refill_want(hak_heap_t *h, unsigned cls, unsigned most) {
    unsigned batch = 1u << h->refill_shift[cls];
    if (batch >= most) return most;
    h->refill_shift[cls]++;
    return batch;
}

#endif /* HAKMEM_SLAB_H */
