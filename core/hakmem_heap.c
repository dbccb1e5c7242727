/* Thread heaps: creation, remote frees, thread exit and adoption, fork.
 *
 * A heap is created (or adopted) on a thread's first allocation, found
 * through hak_tls_heap, and abandoned when the thread exits: its rings are
 * flushed and it waits on the abandoned list, with all its slabs, until the
 * next new thread adopts it.  Heaps live forever (recycled, never unmapped),
 * so a remote free can always reach slab->owner->notify. */
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
 * One CAS onto the block's slab.  If the owner had parked the slab (NOTIFY),
 * the first freer also pushes the slab onto the owner's notify stack.  The
 * slab cannot go away in between: a parked slab whose NOTIFY is gone is never
 * retired (slab_maybe_retire) until its notification has come through. */
void hak_remote_free(hak_slab_t *s, void *p) {
    hak_block_t *b = (hak_block_t *)p;
    uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        hak_link_set(b, (hak_block_t *)(old & ~HAK_REMOTE_NOTIFY));
    } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, (uintptr_t)b,
                                                    memory_order_acq_rel, memory_order_relaxed));
    /* acq_rel: a freer that takes NOTIFY has seen the owner's arming of it */
    if (old & HAK_REMOTE_NOTIFY) {
        hak_heap_t *owner = s->owner;
        hak_slab_t *head = atomic_load_explicit(&owner->notify, memory_order_relaxed);
        do {
            s->notify_next = head;
        } while (!atomic_compare_exchange_weak_explicit(&owner->notify, &head, s,
                                                        memory_order_release,
                                                        memory_order_relaxed));
    }
}

/* Collect every remote free in the heap's slabs, giving back what empties.
 * The caller owns h (its thread, or an abandoned heap taken off the list). */
static void heap_sweep(hak_heap_t *h) {
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
}

static void heap_flush_rings(hak_heap_t *h) {
    for (unsigned c = HAK_L2_FIRST; c < HAK_NUM_CLASSES; c++)
        hak_pool_ring_flush(h, hak_pool_ring(h, c), 0);
    hak_c2_flush(h, 0);
}

/* ---- heap life cycle ------------------------------------------------------- */
static _Atomic unsigned abandoned_count;

static hak_heap_t *heap_new(void) {
    hak_heap_t *h = hak_meta_alloc(sizeof(hak_heap_t));
    if (h == NULL) return NULL;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
        h->queue_head[c] = &hak_empty_slab;
        h->tier_countdown[c] = (uint16_t)hak_opt.batch_tier_size;
    }
    h->queue_head[HAK_C2_CLASS] = hak_opt.tiny_c2_cache ? &h->c2_cache : &hak_empty_slab;
    hak_pool_init_heap(h);
    h->dirty_budget = 64;        /* pages: DIRTY_MIN in hakmem_superslab.c */
    h->next_all = heaps_all;
    heaps_all = h;
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
    h->state = HAK_HEAP_ABANDONED;
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
        h->state = HAK_HEAP_ACTIVE;
        h->keep_spares = true;
    }
    hak_unlock(&heap_lock);
    if (h == NULL) return NULL;
    hak_tls_owner = h;
    if (!hak_opt.stats) hak_tls_heap = h;
    /* May allocate (keys past the first block); the heap is set. */
    if (heap_key_ready) pthread_setspecific(heap_key, h);
    hak_slab_collect_notified(h);
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
 * heaps behind, take one at a time, collect its remote frees and give its
 * empty memory back, so nothing waits for a new thread to adopt it. */
void hak_heap_housekeeping(hak_heap_t *h) {
    /* not from the profiler's heap: its lock may not wait for heap_lock */
    if (h->state != HAK_HEAP_ACTIVE) return;
    if (atomic_load_explicit(&abandoned_count, memory_order_relaxed) == 0) return;
    if (!hak_trylock(&heap_lock)) return;
    hak_heap_t *b = heap_pop_abandoned_locked();
    hak_unlock(&heap_lock);
    if (b == NULL) return;
    heap_flush_rings(b);     /* a borrowed heap may hold ring blocks */
    heap_sweep(b);
    hak_ss_purge_heap(b);
    hak_lock(&heap_lock);
    heap_abandon_locked(b);
    hak_unlock(&heap_lock);
}

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
    }
    hak_unlock(&heap_lock);
    size_t after = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                   atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
    return after < before;
}

/* malloc_trim: the calling thread's heap and every abandoned one give back
 * all they can now. */
bool hak_heap_trim(void) {
    bool any = false;
    hak_heap_t *h = hak_tls_owner;
    if (h != NULL) {
        heap_flush_rings(h);
        h->keep_spares = false;
        heap_sweep(h);
        h->keep_spares = true;
        any |= hak_ss_purge_heap(h);
    }
    hak_lock(&heap_lock);
    for (hak_heap_t *b = heaps_abandoned; b != NULL; b = b->next_free) {
        heap_sweep(b);
        any |= hak_ss_purge_heap(b);
    }
    hak_unlock(&heap_lock);
    return any;
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
    hak_tls_heap = &hak_empty_heap;
    hak_tls_owner = NULL;
    tls_thread_done = true;
    hak_lock(&heap_lock);
    heap_abandon_locked(h);
    hak_unlock(&heap_lock);
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
}

static void fork_child(void) {
    fork_unlock_inner();
    hak_profile_fork_child();
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all)
        if (h != hak_tls_owner && h->state == HAK_HEAP_ACTIVE) h->state = HAK_HEAP_ORPHANED;
    hak_unlock(&heap_lock);
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
