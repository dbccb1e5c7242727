/* Heaps and threads (hakmem_heap.c): each thread's heap, made, adopted,
 * abandoned, settled and reclaimed; the nursery young threads share; fork.
 * The heap lock is with the structure, in hakmem_types.h. */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H

#include "hakmem_pool.h"
#include "hakmem_types.h"

extern hak_heap_t hak_empty_heap;
extern __thread hak_heap_t *hak_tls_fast_heap;
extern __thread hak_heap_t *hak_tls_own_heap;

/* The calling thread's heap, made or adopted now if it has none (hakmem
 * is started: the caller's job, as for every heap function). */
HAK_INTERNAL hak_heap_t *hak_heap_for_thread(void);
/* A young thread (or one with no heap yet) freeing into abandoned heap a
 * takes a over as its heap: returns it, or NULL; *kick: start the purger. */
HAK_INTERNAL extern _Atomic unsigned hak_abandoned_count;   /* heaps on the abandoned list */
HAK_INTERNAL hak_heap_t *hak_heap_take_over_slow(hak_heap_t *a, bool *kick);
/* While no heap is abandoned (a producer and its consumer both alive) a
 * remote free reads nothing of the owner's heap, whose lines its thread is
 * writing, and makes no call. */
static inline hak_heap_t *hak_heap_take_over(hak_heap_t *a, bool *kick) {
    *kick = false;
    if (atomic_load_explicit(&hak_abandoned_count, memory_order_relaxed) == 0) return NULL;
    return hak_heap_take_over_slow(a, kick);
}
/* A heap that has shrunk to half of what its slabs held since its rings
 * were last flushed: the program freed most of its memory, and the blocks
 * the rings keep (the last freed of each class, up to 48 or 16 a class,
 * spread over every SuperSlab) would keep nearly all of them in use.  The
 * rings go back to the slabs (hak_heap_shrunk), so slabs retire and
 * SuperSlabs empty out; what the rings take from then on comes from what
 * is left.  Owner, from its slow paths: a compare when nothing changed. */
HAK_INTERNAL void hak_heap_shrunk(hak_heap_t *h);
static inline void hak_heap_shrink_check(hak_heap_t *h) {
    size_t pages = h->slab_pages;
    if (pages > h->shrink_mark) h->shrink_mark = pages;
    else if (hak_unlikely(pages < h->shrink_mark / 2) && h->shrink_mark >= 2 * HAK_SS_PAGES)
        hak_heap_shrunk(h);
}
/* exit_fn: the destructor of the key that holds each thread's heap, a
 * callback of the layer above (hakmem_init.c's thread_exit, which calls
 * hak_heap_thread_exit). */
HAK_INTERNAL void hak_heap_init(void (*exit_fn)(void *heap));
/* The calling thread leaves heap h; true when no thread has a heap any
 * more (the caller wakes the purger: the process may be ending). */
HAK_INTERNAL bool hak_heap_thread_exit(hak_heap_t *h);
HAK_INTERNAL void hak_heap_fork_lock(void);
HAK_INTERNAL void hak_heap_fork_unlock(void);
HAK_INTERNAL void hak_heap_fork_child(void);
HAK_INTERNAL void *hak_heap_alloc(hak_heap_t *h, size_t size, unsigned cls);
/* A heap of no thread, whose SuperSlabs are tagged `chunk_kind`: never
 * adopted, swept or housekept (the heap profiler's). */
HAK_INTERNAL hak_heap_t *hak_heap_new_private(uint8_t chunk_kind);
/* The purger's pass over the shared L2.5 heap and the nursery (delay 0:
 * malloc_trim). */
HAK_INTERNAL void hak_heap_purge_shared(hak_purge_scan_t *sc, bool trylock);
/* The nursery: the heap young threads share, under its lock, for their
 * first HAK_NURSERY_ALLOCS allocations of up to HAK_L2_MAX bytes while no
 * abandoned heap waits to be adopted.  NULL: the thread gets a heap of its
 * own (it is no longer young, or the nursery has no memory). */
HAK_INTERNAL extern hak_heap_t hak_nursery_heap;
HAK_INTERNAL void *hak_nursery_alloc(size_t size, bool *kick);
/* p, a block of nursery slab s, freed by a thread with no heap yet.  Both
 * say (*kick, the return) whether the nursery stamped enough to start the
 * purger, which the caller does with no lock held. */
HAK_INTERNAL bool hak_nursery_free(hak_slab_t *s, void *p);
/* The heaps no thread owns and every thread allocates from under their
 * lock: a block of theirs freed by a thread is a remote free, which the
 * purger collects when no allocation does. */
static inline bool hak_heap_is_shared(const hak_heap_t *h) {
    return h == &hak_l25_heap || h == &hak_nursery_heap;
}
HAK_INTERNAL void hak_heap_fork_lock_shared(void);
HAK_INTERNAL void hak_heap_fork_unlock_shared(void);
HAK_INTERNAL void *hak_alloc_without_heap(size_t size, unsigned cls);
/* What hak_heap_reclaim_abandoned does, and to which heaps. */
enum {
    HAK_RECLAIM_ONE      = 1,  /* the heap that has waited longest (housekeeping:
                                  says whether to start the purger) */
    HAK_RECLAIM_NOTIFIED = 2,  /* those with remote frees notified, 8 at most (purger) */
    HAK_RECLAIM_TRY      = 4,  /* not if heap_lock is held (the caller may hold it) */
    HAK_RECLAIM_IN_PLACE = 8,  /* all, left on the list, under heap_lock (making
                                  room: says whether SuperSlabs went back) */
};
HAK_INTERNAL bool hak_heap_reclaim_abandoned(unsigned how);
HAK_INTERNAL void hak_heap_settle_abandoned(hak_purge_scan_t *sc);
HAK_INTERNAL void hak_heap_counts(size_t *heaps, size_t *abandoned);
/* Sums over every heap, for mallinfo2: pages in slab spans and free pages
 * still resident (each heap's owner writes its own counts). */
HAK_INTERNAL void hak_heap_page_counts(size_t *slab_pages, size_t *dirty_pages);
HAK_INTERNAL void hak_heap_trim_self(hak_heap_t *h);
HAK_INTERNAL hak_heap_t *hak_heap_first(void);
HAK_INTERNAL size_t hak_heap_active_count(void);

#endif /* HAKMEM_HEAP_H */
