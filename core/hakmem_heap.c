/* Thread heaps: creation, remote frees, thread exit and adoption, fork.
 *
 * A heap is created (or adopted) on a thread's first allocation, found
 * through hak_tls_heap, and abandoned when the thread exits: its rings are
 * flushed and it waits on the abandoned list, warm (nothing is given back
 * because a thread exited: its free memory goes back by time, like any
 * other), with all its slabs parked so that remote frees into it reach its
 * notify stack, until the next new thread adopts it.  Heaps live forever
 * (recycled, never unmapped), so a remote free can always reach
 * slab->owner->notify. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/pool_ring_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

__thread hak_heap_t *hak_tls_heap = &hak_empty_heap;   /* what the fast paths use */
__thread hak_heap_t *hak_tls_owner;                     /* the thread's own heap   */
static __thread bool tls_thread_done;   /* heap already abandoned at exit */

/* The sentinels: every queue of the empty heap points at the empty slab, so
 * a thread's first malloc falls into the slow path with no extra test. */
hak_slab_t hak_empty_slab;
hak_heap_t hak_empty_heap = {
    .queue_head = { [0 ... HAK_NUM_CLASSES] = &hak_empty_slab },
    .ring = { [0 ... HAK_NUM_CLASSES - 1] = &hak_empty_ring },
};

static hak_lock_t heap_lock;           /* heaps_all, heaps_abandoned */
static hak_heap_t *heaps_all;
static hak_heap_t *heaps_abandoned;    /* adopted from the head, swept */
static hak_heap_t *heaps_abandoned_tail; /* round-robin via the tail    */
static pthread_key_t heap_key;
static bool heap_key_ready;

_Atomic int hak_initialized;
static hak_lock_t init_lock;

/* ---- remote frees ----------------------------------------------------------
 * One CAS onto the block's slab (the new word also counts the block).  If the owner had parked the slab (NOTIFY),
 * the first freer also pushes the slab onto the owner's notify stack.  The
 * slab cannot go away in between: a parked slab whose NOTIFY is gone is never
 * retired (slab_maybe_retire) until its notification has come through. */
void hak_remote_free(hak_slab_t *s, void *p) {
    hak_block_t *b = (hak_block_t *)p;
    uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        hak_link_set(b, (hak_block_t *)(old & HAK_REMOTE_LIST));
    } while (!atomic_compare_exchange_weak_explicit(
                 &s->remote, &old,
                 (uintptr_t)b | ((old & ~HAK_REMOTE_LIST & ~HAK_REMOTE_NOTIFY) + HAK_REMOTE_ONE),
                 memory_order_acq_rel, memory_order_relaxed));
    /* acq_rel: a freer that takes NOTIFY has seen the owner's arming of it */
    if (old & HAK_REMOTE_NOTIFY) {
        hak_heap_t *owner = s->owner;
        hak_slab_t *head = atomic_load_explicit(&owner->notify, memory_order_relaxed);
        do {
            s->notify_next = head;
        } while (!atomic_compare_exchange_weak_explicit(&owner->notify, &head, s,
                                                        memory_order_seq_cst,
                                                        memory_order_relaxed));
        /* No thread will collect it: the purger does (hakmem_purge.c). */
        if (hak_heap_state(owner) == HAK_HEAP_ABANDONED) hak_purge_kick();
    }
}

/* Collect every remote free in the heap's slabs; empty slabs and
 * SuperSlabs go back to their SuperSlabs and the cache (their pages stay
 * resident until their delay has passed).  The caller owns h (its thread,
 * or an abandoned heap taken off the list). */
static void heap_sweep(hak_heap_t *h) {
    hak_heap_lock(h);
    hak_slab_collect_notified(h);
    for (hak_superslab_t *ss = h->ss_list; ss != NULL;) {
        hak_superslab_t *next = ss->next;
        h->sweeping = ss;                 /* keeps ss mapped while we walk it */
        for (unsigned i = 0; i < HAK_SS_PAGES; i++)
            if (ss->page_head[i] == i && ss->slabs[i].tier != HAK_TIER_NONE)
                hak_slab_sweep_remote(h, &ss->slabs[i]);
        h->sweeping = NULL;
        hak_ss_release_if_empty(h, ss);
        ss = next;
    }
    hak_heap_unlock(h);
}

static void heap_flush_rings(hak_heap_t *h) { hak_pool_flush_all(h); }

/* Before a heap goes on the abandoned list: every slab parked and armed. */
static void heap_park(hak_heap_t *h) {
    hak_heap_lock(h);
    hak_slab_park_all(h);
    hak_heap_unlock(h);
}

/* ---- heap life cycle ------------------------------------------------------- */
static _Atomic unsigned abandoned_count;
static size_t active_count;   /* heaps with a thread: written under heap_lock,
                                 read by the purger without it (relaxed atomics) */

static hak_heap_t *heap_new(void) {
    hak_heap_t *h = hak_meta_alloc(sizeof(hak_heap_t));
    if (h == NULL) return NULL;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
        h->queue_head[c] = &hak_empty_slab;
        h->tier_countdown[c] = (uint16_t)hak_opt.batch_tier_size;
    }
    h->queue_head[HAK_C2_CLASS] = hak_opt.tiny_c2_cache ? &h->c2_cache : &hak_empty_slab;
    hak_pool_init_heap(h);
    h->next_all = heaps_all;
    __atomic_store_n(&heaps_all, h, __ATOMIC_RELEASE);   /* the purger walks it unlocked */
    return h;
}

static hak_heap_t *heap_pop_abandoned_locked(void) {
    hak_heap_t *h = heaps_abandoned;
    if (h != NULL) {
        heaps_abandoned = h->next_free;
        if (heaps_abandoned == NULL) heaps_abandoned_tail = NULL;
        h->next_free = NULL;
        atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
    }
    return h;
}

/* An abandoned heap if there is one, else a new one.  Caller holds heap_lock. */
static hak_heap_t *heap_take_locked(void) {
    hak_heap_t *h = heap_pop_abandoned_locked();
    return h != NULL ? h : heap_new();
}

/* Abandoned heaps queue in order, so housekeeping sweeps each in turn. */
static void heap_abandon_locked(hak_heap_t *h) {
    __atomic_store_n(&h->state, HAK_HEAP_ABANDONED, __ATOMIC_RELAXED);
    h->keep_spares = false;
    h->next_free = NULL;
    if (heaps_abandoned_tail) heaps_abandoned_tail->next_free = h;
    else heaps_abandoned = h;
    heaps_abandoned_tail = h;
    atomic_fetch_add_explicit(&abandoned_count, 1, memory_order_relaxed);
}

/* The calling thread's heap, made or adopted on first use.  With
 * HAKMEM_STATS the fast paths keep seeing the empty heap, so every call
 * takes a slow path that counts it: statistics cost nothing when off. */
hak_heap_t *hak_heap_for_thread(void) {
    hak_ensure_init();
    if (hak_tls_owner != NULL) return hak_tls_owner;
    if (tls_thread_done) return NULL;
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_take_locked();
    if (h != NULL) {
        __atomic_store_n(&h->state, HAK_HEAP_ACTIVE, __ATOMIC_RELAXED);
        h->keep_spares = true;
        __atomic_fetch_add(&active_count, 1, __ATOMIC_RELAXED);
    }
    hak_unlock(&heap_lock);
    if (h == NULL) return NULL;
    hak_tls_owner = h;
    if (!hak_opt.stats) hak_tls_heap = h;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) h->refill_batch[c] = 1;
    /* May allocate (keys past the first block); the heap is set. */
    if (heap_key_ready) pthread_setspecific(heap_key, h);
    hak_slab_collect_notified(h);
    hak_slab_unpark_all(h);      /* an adopted heap's slabs serve again */
    return h;
}

hak_heap_t *hak_heap_new_private(uint8_t chunk_kind) {
    hak_ensure_init();
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_new();
    hak_unlock(&heap_lock);
    if (h == NULL) return NULL;
    h->chunk_kind = chunk_kind;
    h->keep_spares = true;    /* a spare SuperSlab and slab per class, as any heap */
    h->sample_left = INT64_MAX;
    h->prof_ready = true;
    return h;
}

/* From the slow path every 256 refills: while threads have exited and left
 * heaps behind, take one at a time and collect its remote frees, so that
 * its empty slabs and SuperSlabs serve the running threads (through the
 * SuperSlab cache, warm) rather than wait for a new thread to adopt it.
 * Where the purger cannot run, this is also when due memory goes back. */
void hak_heap_housekeeping(hak_heap_t *h) {
    /* not from the profiler's heap: its lock may not wait for heap_lock */
    if (hak_heap_state(h) != HAK_HEAP_ACTIVE) return;
    hak_purge_inline();
    if (atomic_load_explicit(&abandoned_count, memory_order_relaxed) == 0) return;
    if (!hak_trylock(&heap_lock)) return;
    hak_heap_t *b = heap_pop_abandoned_locked();
    hak_unlock(&heap_lock);
    if (b == NULL) return;
    heap_flush_rings(b);     /* a borrowed heap may hold ring blocks */
    heap_sweep(b);
    heap_park(b);
    hak_lock(&heap_lock);
    heap_abandon_locked(b);
    hak_unlock(&heap_lock);
}

/* The purger (and malloc_trim, `all`) collects the remote frees of the
 * abandoned heaps: those with something on their notify stack, or all of
 * them.  One at a time is taken off the list while that runs, as by
 * housekeeping, so a new thread finds the others there to adopt.  A purge
 * pass takes at most 8 (each is found by a scan from the list's head);
 * returns whether it stopped with more to look at. */
bool hak_heap_sweep_abandoned(bool all) {
    unsigned n = atomic_load_explicit(&abandoned_count, memory_order_relaxed);
    bool more = !all && n > 8;
    if (more) n = 8;
    for (; n != 0; n--) {
        hak_lock(&heap_lock);
        hak_heap_t *b = heaps_abandoned, *prev = NULL;
        while (b != NULL && !all && atomic_load_explicit(&b->notify, memory_order_seq_cst) == NULL) {
            prev = b;
            b = b->next_free;
        }
        if (b != NULL) {
            if (prev != NULL) prev->next_free = b->next_free;
            else heaps_abandoned = b->next_free;
            if (heaps_abandoned_tail == b) heaps_abandoned_tail = prev;
            b->next_free = NULL;
            atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
        }
        hak_unlock(&heap_lock);
        if (b == NULL) return false;
        heap_flush_rings(b);
        heap_sweep(b);
        heap_park(b);
        hak_lock(&heap_lock);
        heap_abandon_locked(b);
        hak_unlock(&heap_lock);
    }
    return more;
}

hak_heap_t *hak_heap_first(void) { return __atomic_load_n(&heaps_all, __ATOMIC_ACQUIRE); }

size_t hak_heap_active_count(void) { return __atomic_load_n(&active_count, __ATOMIC_RELAXED); }

/* Out of address space: exited threads' heaps give back their empty
 * SuperSlabs.  A trylock: the caller may hold heap_lock already
 * (hak_alloc_without_heap). */
bool hak_heap_release_abandoned(void) {
    if (atomic_load_explicit(&abandoned_count, memory_order_relaxed) == 0) return false;
    if (!hak_trylock(&heap_lock)) return false;
    size_t before = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                    atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
    for (hak_heap_t *b = heaps_abandoned; b != NULL; b = b->next_free) {
        heap_flush_rings(b);
        heap_sweep(b);
        heap_park(b);
    }
    hak_unlock(&heap_lock);
    size_t after = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                   atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
    return after < before;
}

/* malloc_trim in this thread, or asked for by one in another thread (on
 * the next slow path): the rings go back to the slabs, which are swept
 * without spares, so empty slabs and SuperSlabs go to the cache. */
void hak_heap_trim_self(hak_heap_t *h) {
    atomic_store_explicit(&h->trim_request, false, memory_order_relaxed);
    heap_flush_rings(h);
    h->keep_spares = false;
    heap_sweep(h);
    h->keep_spares = true;
}

void hak_heap_counts(size_t *heaps, size_t *abandoned) {
    size_t n = 0;
    hak_lock(&heap_lock);
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all) n += h->chunk_kind == 0;
    hak_unlock(&heap_lock);
    *heaps = n;
    *abandoned = atomic_load_explicit(&abandoned_count, memory_order_relaxed);
}

void hak_heap_page_counts(size_t *slab_pages, size_t *dirty_pages) {
    size_t s = 0, d = 0;
    hak_lock(&heap_lock);
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all) {
        s += __atomic_load_n(&h->slab_pages, __ATOMIC_RELAXED);
        d += __atomic_load_n(&h->dirty_count, __ATOMIC_RELAXED);
    }
    hak_unlock(&heap_lock);
    *slab_pages = s;
    *dirty_pages = d;
}

/* pthread key destructor: the thread is exiting.  Its rings go back to the
 * slabs and the heap waits for a new thread, warm: threads that come and go
 * (a server's workers, Larson) adopt it at once.  If none comes, the running
 * threads' housekeeping sweeps it without spares and purges its pages. */
static void heap_thread_exit(void *arg) {
    hak_heap_t *h = arg;
    if (h == NULL || h != hak_tls_owner) return;
    heap_flush_rings(h);
    heap_sweep(h);
    heap_park(h);
    hak_tls_heap = &hak_empty_heap;
    hak_tls_owner = NULL;
    tls_thread_done = true;
    hak_lock(&heap_lock);
    heap_abandon_locked(h);
    bool last = __atomic_sub_fetch(&active_count, 1, __ATOMIC_RELAXED) == 0;
    hak_unlock(&heap_lock);
    if (last) hak_purge_wake();    /* the process may be ending: let the purger go */
}

/* Allocation by a thread whose heap is gone (a destructor running after
 * ours): borrow an abandoned heap under the lock for this one call. */
HAK_ALLOC_PATH void *hak_alloc_without_heap(size_t size) {
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_take_locked();
    void *p = NULL;
    if (h != NULL) {
        hak_tls_owner = h;
        if (!hak_opt.stats) hak_tls_heap = h;     /* with stats, counted in the slow path */
        h->keep_spares = true;
        p = hak_malloc(size);
        heap_park(h);
        hak_tls_heap = &hak_empty_heap;
        hak_tls_owner = NULL;
        heap_abandon_locked(h);
    }
    hak_unlock(&heap_lock);
    if (p == NULL) errno = ENOMEM;
    return p;
}

/* ---- fork -------------------------------------------------------------------
 * The locks are held across fork() so the child never sees one half-taken.
 * In the child only the forking thread lives.  The other threads' heaps may
 * have been caught half-way through an update (their owners take no lock),
 * so the child never adopts them: they stay orphaned, their blocks still
 * freeable (onto the orphan's remote list), their memory not reused. */
/* In the order the allocator itself nests them: a metadata mapping that
 * fails makes room (hakmem_os.c) with radix_lock and meta_lock held, which
 * takes the cache locks inside them.  Then the forking thread passes every
 * lock (hak_tls_fork_locked) until our parent or child handler: another
 * library's prepare handler registered before ours runs after it, and one
 * that allocates must not wait for a lock its own thread holds. */
static void fork_prepare(void) {
    hak_profile_fork_prepare();     /* a stack walk holds no other lock */
    hak_purge_fork_prepare();
    hak_lock(&heap_lock);
    hak_profile_lock_all();     /* its heap maps SuperSlabs under it */
    hak_os_lock_all();
    hak_ss_lock_all();
    hak_large_lock_all();
#ifdef HAK_HARDENED
    hak_hardened_lock_all();
#endif
    hak_tls_fork_locked = true;
}

/* All but heap_lock, in the reverse order. */
static void fork_unlock_inner(void) {
    hak_tls_fork_locked = false;
#ifdef HAK_HARDENED
    hak_hardened_unlock_all();
#endif
    hak_large_unlock_all();
    hak_ss_unlock_all();
    hak_os_unlock_all();
    hak_profile_unlock_all();
}

static void fork_parent(void) {
    fork_unlock_inner();
    hak_unlock(&heap_lock);
    hak_purge_fork_parent();
    hak_profile_fork_parent();
}

static void fork_child(void) {
    fork_unlock_inner();
    hak_profile_fork_child();
    /* Only the forking thread's heap, those on the abandoned list and the
     * profiler's (its lock was held) are known to be whole (a heap
     * housekeeping had taken off the list may be half swept, its lock held). */
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all)
        if (h != hak_tls_owner && h->chunk_kind == 0) h->state = HAK_HEAP_ORPHANED;
    for (hak_heap_t *h = heaps_abandoned; h != NULL; h = h->next_free)
        h->state = HAK_HEAP_ABANDONED;
    __atomic_store_n(&active_count, hak_tls_owner != NULL, __ATOMIC_RELAXED);
    hak_unlock(&heap_lock);
    hak_purge_fork_child();
}

/* ---- process start-up -------------------------------------------------------
 * Lazy and re-entrant: pthread_atfork may call malloc, so it runs after
 * hak_initialized is set. */
void hak_init(void) {
    hak_lock(&init_lock);
    if (atomic_load_explicit(&hak_initialized, memory_order_relaxed)) {
        hak_unlock(&init_lock);
        return;
    }
    hak_options_init();
    hak_free_check_init();
    heap_key_ready = pthread_key_create(&heap_key, heap_thread_exit) == 0;
    atomic_store_explicit(&hak_initialized, 1, memory_order_release);
    hak_unlock(&init_lock);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((constructor)) static void hak_constructor(void) { hak_ensure_init(); }
