/* hakmem — what the files of core/ call of each other, grouped by the file
 * that defines it (which layer calls which: docs/ARCHITECTURE.md, section
 * 0; no file calls a layer above its own but through the two callbacks
 * hak_init sets: hak_chunk_map_on_refusal and the thread-exit destructor
 * handed to hak_heap_init).  The configuration is in hakmem_config.h, the data structures in
 * hakmem_types.h, the platform layer in hakmem_os.h. */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include "hakmem_config.h"
#include "hakmem_os.h"
#include "hakmem_types.h"

/* ---- globals and cross-file functions ------------------------------------ */
extern uint8_t hak_chunk_map[HAK_MAP_ENTRIES];
HAK_INTERNAL extern bool hak_radix_in_use;
HAK_INTERNAL unsigned hak_chunk_kind_radix(const void *p);
HAK_INTERNAL void hak_chunk_map_select(bool radix);
extern hak_slab_t hak_empty_slab;
extern hak_heap_t hak_empty_heap;
extern hak_ring_t hak_empty_ring;
extern __thread hak_heap_t *hak_tls_fast_heap;
extern __thread hak_heap_t *hak_tls_own_heap;

/* start-up (hakmem_init.c).  Lazy: the API starts hakmem before it first
 * calls down (a thread's first heap, the first large mapping; the
 * profiler's constructor); the layers below never call up to start it.
 * Out of line: it is only ever on slow paths. */
HAK_INTERNAL void hak_ensure_init(void);

/* The chunk map and hakmem's own memory (hakmem_chunk_map.c). */
HAK_INTERNAL bool  hak_chunk_map_set(void *base, size_t len, uint8_t kind);
/* A new range, aligned and tagged `kind`; when the OS refuses, `fn` (set at
 * start-up: hak_make_room) is asked to make room and it is tried again. */
HAK_INTERNAL void *hak_chunk_map_tagged(size_t len, size_t align, uint8_t kind);
HAK_INTERNAL void  hak_chunk_map_on_refusal(bool (*fn)(void));
HAK_INTERNAL void *hak_meta_alloc(size_t size);
HAK_INTERNAL void  hak_chunk_map_lock_all(void);
HAK_INTERNAL void  hak_chunk_map_unlock_all(void);

/* Retiring mappings (hakmem_chunk_map.c; hardened build: hakmem_hardened.c). */
/* Unmap a SuperSlab or large mapping for good (its chunk map entries too);
 * the hardened build keeps the range reserved and marked dead for a while. */
HAK_INTERNAL void  hak_chunk_retire_range(void *base, size_t len);
/* The range a large realloc moved away from (mremap unmapped it): the
 * hardened build reserves it again as dead; nothing in the default one. */
HAK_INTERNAL void  hak_chunk_retire_moved(void *base, size_t len);
/* Unmap the ranges the hardened build keeps dead (false: none, or not that build). */
HAK_INTERNAL bool  hak_chunk_release_dead(void);

/* The free check (hakmem_free_check.c; inline part: box/free_check_box.h). */
HAK_INTERNAL void hak_free_check_init(void);
/* Copy a slab's block range to the span checks of its pages: when the slab
 * is made or retired (carved_only false) and when it carves blocks. */
HAK_INTERNAL void hak_span_check_sync(const hak_slab_t *s, bool carved_only);

/* Hardened build (hakmem_hardened.c). */
#ifdef HAK_HARDENED
HAK_INTERNAL void hak_hardened_lock_all(void);
HAK_INTERNAL void hak_hardened_unlock_all(void);
#endif

/* Giving memory back by time (hakmem_purge.c).  Free memory is stamped with
 * hak_now_ms() when it becomes free and goes back to the OS once it has
 * stayed unused for HAKMEM_PURGE_DELAY_MS: the purger thread (started when
 * something is stamped, gone when nothing is left) or, where no thread can
 * be made, the slow paths.  The purge functions return how many ms until
 * the next stamped item falls due, HAK_PURGE_NONE if none is left. */
HAK_INTERNAL void hak_purge_kick(void);
/* The same from free(), which never starts a thread: glibc calls free with
 * its own locks held (the thread-stack cache's, freeing an exited thread's
 * TLS), and pthread_create would wait for them forever.  A running purger
 * is woken if it idles; else the next malloc slow path starts one
 * (hak_purge_wanted). */
HAK_INTERNAL void hak_purge_request(void);
HAK_INTERNAL extern _Atomic int hak_purge_wanted;
/* Whether a purger thread runs: a large block freed while none does goes
 * back at once (a program that frees and then idles runs no slow path). */
HAK_INTERNAL bool hak_purge_thread_running(void);
/* No purger runs (none may be made: HAKMEM_PURGE_THREAD, a seccomp filter,
 * limits; or none was started yet, as in a forked child): the slow paths of
 * malloc and free run its pass themselves once one is due. */
HAK_INTERNAL extern _Atomic uint32_t hak_purge_inline_due;
HAK_INTERNAL void hak_purge_inline(void);
static inline void hak_purge_inline_check(void) {
    if (hak_unlikely(atomic_load_explicit(&hak_purge_inline_due, memory_order_relaxed) != 0))
        hak_purge_inline();
}
HAK_INTERNAL bool hak_purge_everything(void);
HAK_INTERNAL void hak_purge_wake(void);
HAK_INTERNAL void hak_purge_fork_prepare(void);
HAK_INTERNAL void hak_purge_fork_parent(void);
HAK_INTERNAL void hak_purge_fork_child(void);
/* The OS refused memory: everything cached goes back (hak_chunk_map_on_refusal). */
HAK_INTERNAL bool hak_make_room(void);
/* From the owner's slow path now and then (every 256 refills, hakmem.c). */
HAK_INTERNAL void hak_housekeeping(hak_heap_t *h);

/* The heap lock.  The owner takes it on its slow paths (nestable: only the
 * owner uses lock_depth) around the state other threads' purges read and
 * change: its SuperSlab list and page maps, and the free lists of its L2 and
 * L2.5 slabs.  The Tiny fast paths never take it.  Whoever purges another
 * heap (the purger, malloc_trim) takes h->lock itself, under purge_lock. */
static inline void hak_heap_lock(hak_heap_t *h) {
    if (h->lock_depth++ == 0) hak_lock(&h->lock);
}
static inline void hak_heap_unlock(hak_heap_t *h) {
    if (--h->lock_depth == 0) hak_unlock(&h->lock);
}

/* The heap the L2.5 slabs belong to, shared by every thread (made with
 * the thread heaps: hakmem_heap.c; used by hakmem_l25_pool.c).  Threads
 * take its lock here, before its nesting count (hak_heap_lock raises the
 * count before it locks: right for a heap's one owner, not for many
 * threads); the layers below nest in it as in any heap's.  The unlock says
 * whether the heap stamped enough to start the purger (the caller passes
 * that on to its own heap, which is asked with no lock held). */
HAK_INTERNAL extern hak_heap_t hak_l25_heap;
static inline hak_heap_t *hak_l25_lock(void) {
    hak_lock(&hak_l25_heap.lock);
    hak_l25_heap.lock_depth = 1;
    return &hak_l25_heap;
}
static inline bool hak_l25_trylock(void) {
    if (!hak_trylock(&hak_l25_heap.lock)) return false;
    hak_l25_heap.lock_depth = 1;
    return true;
}

/* The layers below reclamation only count what they stamp
 * (h->purge_pending; a heap's second and later SuperSlabs count as
 * HAK_PURGE_KICK_MIN each, so the purger runs before the memory it will
 * give back is freed); whoever called them asks this when it holds no
 * lock, and starts the purger (hak_purge_kick, or from free
 * hak_purge_request) if h has stamped HAK_PURGE_KICK_MIN bytes since it
 * was last asked. */
static inline bool hak_heap_kick_due(hak_heap_t *h) {
    if (hak_likely(h->purge_pending < HAK_PURGE_KICK_MIN)) return false;
    h->purge_pending = 0;
    return true;
}

static inline bool hak_l25_unlock(void) {
    bool due = hak_heap_kick_due(&hak_l25_heap);
    hak_l25_heap.lock_depth = 0;
    hak_unlock(&hak_l25_heap.lock);
    return due;
}

/* SuperSlabs (hakmem_superslab.c) */
HAK_INTERNAL hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages,
                                          bool page0, bool *revived);
HAK_INTERNAL void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL uint32_t hak_ss_purge_pages(hak_heap_t *h, hak_superslab_t *ss, uint32_t now,
                                         uint32_t delay);
HAK_INTERNAL uint32_t hak_ss_purge_cache(uint32_t now, uint32_t delay);
HAK_INTERNAL void hak_ss_release_if_empty(hak_heap_t *h, hak_superslab_t *ss);
HAK_INTERNAL bool hak_ss_trim_cache(void);
HAK_INTERNAL extern _Atomic size_t hak_ss_count[3];
HAK_INTERNAL void hak_ss_lock_all(void);
HAK_INTERNAL void hak_ss_unlock_all(void);

/* slabs (hakmem_slab.c) */
HAK_INTERNAL unsigned hak_class_take(hak_heap_t *h, unsigned cls, unsigned n, unsigned room,
                                     hak_block_t **chain);
HAK_INTERNAL void hak_slab_free_slow(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_slab_collect_notified(hak_heap_t *h);
/* The shared heap's count of empty slabs it keeps, back to zero after a
 * sweep retired them all (its lock held). */
HAK_INTERNAL void hak_slab_shared_spares_reset(void);
HAK_INTERNAL void hak_slab_sweep_remote(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL uint32_t hak_slab_purge(hak_slab_t *s, uint32_t now, uint32_t delay);
HAK_INTERNAL uint32_t hak_slab_purge_heap(hak_heap_t *h, uint32_t now, uint32_t delay);
HAK_INTERNAL void hak_l25_block_decommit(void *p, unsigned cls);
HAK_INTERNAL void hak_slab_park_all(hak_heap_t *h);
HAK_INTERNAL void hak_slab_unpark_all(hak_heap_t *h);

/* Tiny (hakmem_tiny.c) */
/* The slow paths take the request, not its class: the fast path then keeps
 * no register for the class (one instruction less on every malloc). */
HAK_INTERNAL void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h);

/* A free took the last room of the cache of class cls (box/tiny_box.h):
 * blocks go back to the slabs. */
HAK_INTERNAL void hak_tiny_cache_full(hak_heap_t *h, unsigned cls);
/* Every cache of h back to its slabs: trim, a heap that shrank, an
 * abandoned heap reclaimed (a thread that leaves its heap keeps them warm
 * for the next). */
HAK_INTERNAL void hak_tiny_flush_all(hak_heap_t *h);
HAK_INTERNAL void hak_tiny_init_heap(hak_heap_t *h);

/* How many blocks a refill of class cls takes, at most `most`: a class the
 * thread has just started to use gets one block, then 2, 4, ... (reset when
 * a thread gets the heap), so a thread that needs one block does not take
 * and touch a cache's or a ring's worth. */
static inline unsigned hak_refill_want(hak_heap_t *h, unsigned cls, unsigned most) {
    unsigned batch = 1u << h->refill_shift[cls];
    if (batch >= most) return most;
    h->refill_shift[cls]++;
    return batch;
}

/* L2 / L2.5 ring pools (hakmem_pool.c, hakmem_l25_pool.c) */
HAK_INTERNAL void *hak_pool_alloc_slow(size_t size, hak_heap_t *h);
HAK_INTERNAL void  hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p);
HAK_INTERNAL void  hak_pool_return_block(hak_heap_t *h, void *p);
HAK_INTERNAL void  hak_pool_init_heap(hak_heap_t *h);
HAK_INTERNAL unsigned hak_l25_ring_cap(unsigned cls);
HAK_INTERNAL unsigned hak_l25_take(hak_heap_t *h, unsigned cls, unsigned n, hak_block_t **chain);
HAK_INTERNAL void hak_pool_flush_all(hak_heap_t *h);
HAK_INTERNAL unsigned hak_class_span_pages(unsigned cls);
HAK_INTERNAL unsigned hak_class_span_align(unsigned cls);

/* Large tier (hakmem_large.c) */
HAK_INTERNAL void  *hak_large_alloc(size_t size, size_t align, bool zero);
/* hak_large_free, and a realloc that shrinks a block (*cached), keep the
 * freed range in the cache, stamped: true then, and the caller (with no
 * lock held) starts the purger. */
HAK_INTERNAL bool   hak_large_free(void *p);
HAK_INTERNAL void  *hak_large_realloc(void *p, size_t size, bool *cached);
HAK_INTERNAL size_t hak_large_usable(const void *p);
HAK_INTERNAL bool   hak_large_valid(const void *p);
HAK_INTERNAL bool   hak_large_trim_cache(void);
HAK_INTERNAL uint32_t hak_large_purge(uint32_t now, uint32_t delay);
HAK_INTERNAL size_t hak_large_cached_bytes(void);
HAK_INTERNAL extern _Atomic size_t hak_large_mapped;
HAK_INTERNAL extern _Atomic size_t hak_large_live;   /* live large blocks (hakmem.c) */
HAK_INTERNAL void   hak_large_lock_all(void);
HAK_INTERNAL void   hak_large_unlock_all(void);

/* Statistics (hakmem_stats.c): called only with HAKMEM_STATS=1.  Class
 * HAK_NUM_CLASSES stands for the large tier. */
HAK_INTERNAL void hak_stats_alloc(unsigned cls, size_t bytes);
HAK_INTERNAL void hak_stats_alloc_request(size_t size);
HAK_INTERNAL void hak_stats_free(unsigned cls, size_t bytes, bool remote);
HAK_INTERNAL void hak_stats_refill(unsigned cls);
HAK_INTERNAL void hak_stats_resize(int64_t delta);
/* At start-up, with an exit report on (stats, leak report): which file
 * descriptor 2 is; at exit, whether it still is (the reports go there only
 * then). */
HAK_INTERNAL void hak_stderr_remember(void);
HAK_INTERNAL bool hak_stderr_unchanged(void);

/* Heap profiler (hakmem_profile.c; fast-path part: box/profile_box.h).
 * hak_profile_on: sampling is on (HAKMEM_PROFILE or HAKMEM_PROFILE_LEAKS),
 * set once at start-up. */
HAK_INTERNAL extern bool hak_profile_on;
HAK_INTERNAL void  hak_profile_init(void);
HAK_INTERNAL void *hak_profile_alloc(size_t size);
HAK_INTERNAL bool  hak_profile_large_due(size_t size);
HAK_INTERNAL void  hak_profile_large_sampled(void *p, size_t size);
HAK_INTERNAL void  hak_profile_large_free(void *p);
HAK_INTERNAL void  hak_profile_moved(void *from, void *to, size_t size);
HAK_INTERNAL void  hak_profile_free(void *p);
HAK_INTERNAL void  hak_profile_resized(void *p, size_t size);
HAK_INTERNAL void  hak_profile_trim(void);
HAK_INTERNAL bool  hak_profile_has_record(const void *p);
HAK_INTERNAL void  hak_profile_fork_prepare(void);
HAK_INTERNAL void  hak_profile_fork_parent(void);
HAK_INTERNAL void  hak_profile_lock_all(void);
HAK_INTERNAL void  hak_profile_unlock_all(void);
HAK_INTERNAL void  hak_profile_fork_child(void);

/* Heaps and threads (hakmem_heap.c) */
/* The calling thread's heap, made or adopted now if it has none (hakmem
 * is started: the caller's job, as for every heap function). */
HAK_INTERNAL hak_heap_t *hak_heap_for_thread(void);
/* A young thread (or one with no heap yet) freeing into abandoned heap a
 * takes a over as its heap (hakmem_heap.c): returns it, or NULL; *kick:
 * start the purger. */
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
/* exit_fn: the destructor of the key that holds each thread's heap
 * (hakmem_init.c's thread_exit, which calls hak_heap_thread_exit). */
HAK_INTERNAL void hak_heap_init(void (*exit_fn)(void *heap));
/* The calling thread leaves heap h; true when no thread has a heap any
 * more (the caller wakes the purger: the process may be ending). */
HAK_INTERNAL bool hak_heap_thread_exit(hak_heap_t *h);
HAK_INTERNAL void hak_heap_fork_lock(void);
HAK_INTERNAL void hak_heap_fork_unlock(void);
HAK_INTERNAL void hak_heap_fork_child(void);
HAK_INTERNAL void *hak_heap_alloc(hak_heap_t *h, size_t size);
/* A heap of no thread, whose SuperSlabs are tagged `chunk_kind`: never
 * adopted, swept or housekept (the heap profiler's). */
HAK_INTERNAL hak_heap_t *hak_heap_new_private(uint8_t chunk_kind);
/* The purger's pass over the shared L2.5 heap (delay 0: malloc_trim). */
HAK_INTERNAL uint32_t hak_heap_purge_shared(uint32_t now, uint32_t delay, bool trylock);
/* The nursery: the heap young threads share, under its lock, for their
 * first HAK_NURSERY_ALLOCS allocations of up to HAK_L2_MAX bytes while no
 * abandoned heap waits to be adopted.  NULL: the thread gets a heap of its
 * own (it is no longer young, or the nursery has no memory). */
HAK_INTERNAL extern hak_heap_t hak_nursery_heap;
HAK_INTERNAL void *hak_nursery_alloc(size_t size);
/* p, a block of nursery slab s, freed by a thread with no heap yet. */
HAK_INTERNAL void hak_nursery_free(hak_slab_t *s, void *p);
/* The heaps no thread owns and every thread allocates from under their
 * lock: a block of theirs freed by a thread is a remote free, which the
 * purger collects when no allocation does. */
static inline bool hak_heap_is_shared(const hak_heap_t *h) {
    return h == &hak_l25_heap || h == &hak_nursery_heap;
}
HAK_INTERNAL void hak_heap_fork_lock_shared(void);
HAK_INTERNAL void hak_heap_fork_unlock_shared(void);
HAK_INTERNAL void *hak_alloc_without_heap(size_t size);
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
HAK_INTERNAL uint32_t hak_heap_settle_abandoned(uint32_t now, uint32_t delay);
HAK_INTERNAL void hak_heap_counts(size_t *heaps, size_t *abandoned);
/* Sums over every heap, for mallinfo2: pages in slab spans and free pages
 * still resident (each heap's owner writes its own counts). */
HAK_INTERNAL void hak_heap_page_counts(size_t *slab_pages, size_t *dirty_pages);
HAK_INTERNAL void hak_heap_trim_self(hak_heap_t *h);
HAK_INTERNAL hak_heap_t *hak_heap_first(void);
HAK_INTERNAL size_t hak_heap_active_count(void);
#endif /* HAKMEM_INTERNAL_H */
