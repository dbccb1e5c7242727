/* Thread heaps: creation, thread exit and adoption, abandoned heaps, and
 * their side of fork.
 *
 * A heap is created (or adopted) on a thread's first allocation, found
 * through hak_tls_fast_heap, and abandoned when the thread exits: its rings are
 * flushed and it waits on the abandoned list, warm (nothing is given back
 * because a thread exited: its free memory goes back by time, like any
 * other), with all its slabs parked so that remote frees into it reach its
 * notify stack, until the next new thread adopts it.  Heaps live forever
 * (recycled, never unmapped), so a remote free can always reach
 * slab->owner->notify. */
#include "hakmem_heap.h"
#include "hakmem_pool.h"
#include "hakmem_slab.h"
#include "hakmem_stats.h"
#include "hakmem_superslab.h"
#include "hakmem_tiny.h"
#include "box/pool_ring_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"
#include "hakmem_remote.h"

#include <errno.h>
#include <pthread.h>

/* The heap the fast paths use: the thread's own heap, or the empty heap
 * (no heap yet, exited, or HAKMEM_STATS=1), whose every access is a slow
 * path.  The thread's own heap, NULL while it has none. */
__thread hak_heap_t *hak_tls_fast_heap = &hak_empty_heap;
__thread hak_heap_t *hak_tls_own_heap;
static __thread bool tls_thread_done;   /* heap already abandoned at exit */

/* The sentinel: its caches are empty and its rings have no room, so a
 * thread's first malloc falls into the slow path with no extra test. */
hak_heap_t hak_empty_heap = {
    .queue_head = { [0 ... HAK_NUM_CLASSES - 1] = &hak_empty_slab },
    .ring = { [0 ... HAK_NUM_CLASSES - 1] = &hak_empty_ring },
};

static hak_lock_t heap_lock;           /* heaps_all, heaps_abandoned */
static hak_heap_t *heaps_all;
static hak_heap_t *heaps_abandoned;    /* adopted from the head, swept */
static hak_heap_t *heaps_abandoned_tail; /* round-robin via the tail    */
static pthread_key_t heap_key;
static bool heap_key_ready;

/* Collect every remote free in the heap's slabs; empty slabs and
 * SuperSlabs go back to their SuperSlabs and the cache (their pages stay
 * resident until their delay has passed).  The caller owns h (its thread,
 * or an abandoned heap taken off the list). */
static void heap_sweep(hak_heap_t *h) {
    hak_heap_lock(h);
    hak_slab_collect_notified(h);
    /* (Only ss itself may go while it is swept.) */
    for (hak_superslab_t *ss = h->ss_list; ss != NULL;) {
        hak_superslab_t *next = ss->next;
        h->sweeping = ss;                 /* keeps ss mapped while we walk it */
        /* the pages in spans when the walk starts (a slab it retires only
         * frees pages); a free page's descriptor is not read */
        for (uint64_t live = ~ss->free_pages; live != 0; live &= live - 1) {
            unsigned i = (unsigned)__builtin_ctzll(live);
            if (ss->page_head[i] == i && ss->slabs[i].tier != HAK_TIER_NONE)
                hak_slab_sweep_remote(h, &ss->slabs[i]);
        }
        h->sweeping = NULL;
        hak_ss_release_if_empty(h, ss);
        ss = next;
    }
    hak_heap_unlock(h);
}

/* The rings and the Tiny caches back to the slabs. */
static void heap_flush_rings(hak_heap_t *h) {
    hak_pool_flush_all(h);
    hak_tiny_flush_all(h);
}

/* Before a heap goes on the abandoned list: every slab parked and armed. */
static void heap_park(hak_heap_t *h) {
    hak_heap_lock(h);
    hak_slab_park_all(h);
    hak_heap_unlock(h);
}

/* A heap no thread runs on (or one about to be abandoned) gives back what
 * it holds: its rings go to the slabs (a borrowed heap may hold ring
 * blocks), and its Tiny caches unless `keep_caches` (a thread leaving it:
 * they stay warm for the next), remote frees are collected, empty slabs and
 * SuperSlabs go to the cache, and every slab is parked and armed again. */
static void heap_reclaim(hak_heap_t *h, bool keep_caches) {
    hak_pool_flush_all(h);
    if (!keep_caches) hak_tiny_flush_all(h);
    heap_sweep(h);
    heap_park(h);
}

/* ---- heap life cycle ------------------------------------------------------- */
_Atomic unsigned hak_abandoned_count __attribute__((aligned(64)));   /* read by every remote free */
static unsigned unsettled_count;   /* abandoned heaps not yet settled (heap_lock) */
/* Abandoned heaps that had a SuperSlab when their thread left (warm):
 * written under heap_lock, read by a young thread's first allocations. */
static _Atomic unsigned abandoned_warm;
static size_t active_count;   /* heaps with a thread: written under heap_lock,
                                 read by the purger without it (relaxed atomics) */

/* chunk_kind: 0, or HAK_CHUNK_PROF for a heap of sampled blocks; set
 * before the heap is published (the purger reads it unlocked). */
static void heap_setup(hak_heap_t *h, uint8_t chunk_kind) {
    h->chunk_kind = chunk_kind;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
        h->queue_head[c] = &hak_empty_slab;
        h->state_countdown[c] = (uint16_t)hak_opt.batch_state_check;
    }
    hak_pool_init_heap(h);
    hak_tiny_init_heap(h);
    h->next_all = heaps_all;
    __atomic_store_n(&heaps_all, h, __ATOMIC_RELEASE);   /* the purger walks it unlocked */
}

static hak_heap_t *heap_new(uint8_t chunk_kind) {
    hak_heap_t *h = hak_meta_alloc(sizeof(hak_heap_t));
    if (h != NULL) heap_setup(h, chunk_kind);
    return h;
}

/* Takes h, which follows prev (NULL: h is the head), off the abandoned
 * list.  Caller holds heap_lock. */
static void heap_unlink_abandoned_locked(hak_heap_t *h, hak_heap_t *prev) {
    if (!h->settled) unsettled_count--;
    if (h->warm) atomic_fetch_sub_explicit(&abandoned_warm, 1, memory_order_relaxed);
    if (prev != NULL) prev->next_free = h->next_free;
    else heaps_abandoned = h->next_free;
    if (heaps_abandoned_tail == h) heaps_abandoned_tail = prev;
    h->next_free = NULL;
    atomic_fetch_sub_explicit(&hak_abandoned_count, 1, memory_order_relaxed);
}

/* The abandoned heap at the head of the list, else a new one.  With
 * warm_only, for a young thread's small block: the first warm one among the
 * first TAKE_LOOK, else none (NULL: the nursery serves it).  Never a bare
 * one there (its thread took only shared L2.5 blocks): adopting it for a
 * small block maps a SuperSlab, and the next thread that needs a heap for
 * an L2.5 block makes a new one; with waves of both kinds the heaps grew to
 * one per thread of a wave, each with a SuperSlab.  Caller holds
 * heap_lock. */
#define TAKE_LOOK 64
static hak_heap_t *heap_take_locked(bool warm_only) {
    hak_heap_t *h = heaps_abandoned, *prev = NULL;
    if (warm_only) {
        unsigned looked = 0;
        while (h != NULL && !h->warm && ++looked < TAKE_LOOK) {
            prev = h;
            h = h->next_free;
        }
        if (h == NULL || !h->warm) return NULL;
    } else if (h == NULL) {
        return heap_new(0);
    }
    heap_unlink_abandoned_locked(h, prev);
    return h;
}

/* Abandoned heaps queue in order, so housekeeping sweeps each in turn. */
static void heap_abandon_locked(hak_heap_t *h) {
    hak_heap_lock(h);                   /* its SuperSlab list (the purger's passes) */
    h->warm = h->ss_count != 0;
    hak_heap_unlock(h);
    __atomic_store_n(&h->state, HAK_HEAP_ABANDONED, __ATOMIC_RELAXED);
    h->keep_spares = HAK_SPARES_NONE;
    h->next_free = NULL;
    if (!h->settled) unsettled_count++;
    if (h->warm) atomic_fetch_add_explicit(&abandoned_warm, 1, memory_order_relaxed);
    if (heaps_abandoned_tail) heaps_abandoned_tail->next_free = h;
    else heaps_abandoned = h;
    heaps_abandoned_tail = h;
    atomic_fetch_add_explicit(&hak_abandoned_count, 1, memory_order_relaxed);
}

/* Caller holds heap_lock: h, just taken, has a thread again. */
static void heap_activate_locked(hak_heap_t *h) {
    __atomic_store_n(&h->state, HAK_HEAP_ACTIVE, __ATOMIC_RELAXED);
    h->keep_spares = HAK_SPARES_REFILL;
    __atomic_fetch_add(&active_count, 1, __ATOMIC_RELAXED);
}

/* The calling thread runs on h (taken and activated): its parked slabs
 * with room serve again. */
static void heap_attach(hak_heap_t *h) {
    hak_tls_own_heap = h;
    if (!hak_opt.stats) hak_tls_fast_heap = h;
    h->slow_at_attach = h->slow_count;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) h->refill_shift[c] = 0;
    /* May allocate (keys past the first block); the heap is set. */
    if (heap_key_ready) pthread_setspecific(heap_key, h);
    hak_slab_collect_notified(h);
    hak_slab_unpark_all(h);
}

/* The calling thread leaves h (exit, or it takes over another heap): the
 * rings go back to the slabs and every slab is parked.  The Tiny caches
 * stay, warm for the next thread (a successor that takes the heap over
 * allocates its predecessor's last freed blocks); they go back when the
 * abandoned heap is reclaimed (heap_reclaim).  It keeps one empty
 * slab per class and one empty SuperSlab for the next thread; its other
 * empty slabs are retired (their pages stay resident and stamped, free for
 * any class), so its SuperSlabs can empty out.  Returns whether the purger
 * is due. */
static bool heap_detach(hak_heap_t *h) {
    h->keep_spares = HAK_SPARES_ONE;
    heap_reclaim(h, true);
    bool kick = hak_heap_kick_due(h);
    hak_tls_fast_heap = &hak_empty_heap;
    hak_tls_own_heap = NULL;
    return kick;
}

/* With no delay (HAKMEM_PURGE_DELAY_MS=0) or no purger thread for good
 * nothing would come back later to settle a heap its thread leaves: it
 * gives back everything now (with no purger, its spans stamped: the
 * thread's exit kicks the bounded pass).  Whether it did. */
static bool settle_now(hak_heap_t *h) {
    if (hak_purge_delay() != 0 && !hak_purge_no_thread()) return false;
    h->keep_spares = HAK_SPARES_NONE;
    heap_reclaim(h, false);
    h->purge_pending |= HAK_PURGE_WANTED;    /* counted now, all of it: the caller kicks */
    (void)hak_heap_kick_due(h);
    return true;
}

/* h, detached, joins the abandoned heaps (settled: it gave back everything
 * first); true when no thread has a heap any more. */
static bool heap_leave(hak_heap_t *h, bool settled) {
    h->left_at = hak_now_ms();
    h->settled = settled;
    hak_lock(&heap_lock);
    heap_abandon_locked(h);
    bool last = __atomic_sub_fetch(&active_count, 1, __ATOMIC_RELAXED) == 0;
    hak_unlock(&heap_lock);
    return last;
}

/* The calling thread runs on a heap heap_take_locked gave (NULL: none). */
static hak_heap_t *heap_adopt(bool warm_only) {
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_take_locked(warm_only);
    if (h != NULL) heap_activate_locked(h);
    hak_unlock(&heap_lock);
    if (h != NULL) heap_attach(h);
    return h;
}

/* The calling thread's heap, made or adopted on first use.  With
 * HAKMEM_STATS the fast paths keep seeing the empty heap, so every call
 * takes a slow path that counts it: statistics cost nothing when off. */
hak_heap_t *hak_heap_for_thread(void) {
    if (hak_tls_own_heap != NULL) return hak_tls_own_heap;
    if (tls_thread_done) return NULL;
    return heap_adopt(false);
}

/* A thread that has barely used its heap (fewer than TAKEOVER_SLOW slow
 * paths since it got it), or has none yet, frees a block of abandoned heap
 * a.  It has most likely taken over the work of the thread that left a (a
 * server's new worker; Larson's successor, started before its predecessor
 * had exited, so it got another heap), and will go on freeing a's blocks:
 * it runs on a from now on, so those frees are local rather than remote,
 * and its own heap is abandoned as at thread exit, warm, for the next
 * thread.  At most once per thread, so a thread that frees into many
 * abandoned heaps (main, freeing what its workers left) moves at most once,
 * and only while young.  Returns the thread's heap now, NULL if it stayed;
 * *kick: the heap it left stamped enough to start the purger. */
#define TAKEOVER_SLOW 64
static __thread bool tls_took_over;   /* or is too old to */

hak_heap_t *hak_heap_take_over_slow(hak_heap_t *a, bool *kick) {
    hak_heap_t *h = hak_tls_own_heap;
    if (tls_took_over || tls_thread_done) return NULL;
    if (h != NULL && h->slow_count - h->slow_at_attach >= TAKEOVER_SLOW) {
        tls_took_over = true;   /* old now, for good: one test from here on */
        return NULL;
    }
    if (hak_heap_state(a) != HAK_HEAP_ABANDONED) return NULL;
    tls_took_over = true;
    hak_lock(&heap_lock);
    /* Only from the list: housekeeping may hold it off the list meanwhile. */
    hak_heap_t *b = heaps_abandoned, *prev = NULL;
    while (b != NULL && b != a) {
        prev = b;
        b = b->next_free;
    }
    bool found = b == a;
    if (found) {
        heap_unlink_abandoned_locked(a, prev);
        heap_activate_locked(a);
    }
    hak_unlock(&heap_lock);
    if (!found) return NULL;
    if (h != NULL) {
        *kick = heap_detach(h);
        heap_leave(h, settle_now(h));   /* a is active: never the last */
    }
    heap_attach(a);
    return a;
}

/* An allocation of class cls from heap h that nothing samples: the fast
 * path, then the tier's slow path (a borrowed heap, below; the profiler's
 * own requests, made with the countdown set aside). */
HAK_ALLOC_PATH void *hak_heap_alloc(hak_heap_t *h, size_t size, unsigned cls) {
    void *p;
    if (cls < HAK_L2_FIRST) {
        p = hak_tiny_alloc_class(h, cls, size);
        return p != NULL ? p : hak_tiny_alloc_slow(size, h);
    }
    p = hak_pool_alloc(h, cls, size);
    return p != NULL ? p : hak_pool_alloc_slow(cls, h);
}

/* A heap of no thread, set up after heap_setup (caller holds heap_lock). */
static void heap_make_private(hak_heap_t *h) {
    h->keep_spares = HAK_SPARES_REFILL;    /* as any thread's heap */
    h->sample_left = INT64_MAX;
    h->prof_ready = true;
}

hak_heap_t *hak_heap_new_private(uint8_t chunk_kind) {
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_new(chunk_kind);
    if (h != NULL) heap_make_private(h);
    hak_unlock(&heap_lock);
    return h;
}

/* ---- the shared L2.5 heap ---------------------------------------------------
 * The heap the L2.5 slabs belong to (hakmem_l25_pool.c says why): set up
 * at start-up, active for good and no thread's, so it is never adopted,
 * abandoned or orphaned, and not counted among the thread heaps.  Static,
 * so it cannot fail to exist and its address is a constant. */

static void heap_make_shared(void) {
    hak_lock(&heap_lock);
    heap_setup(&hak_l25_heap, 0);
    heap_make_private(&hak_l25_heap);
    hak_l25_heap.l25_shared = true;
    __atomic_store_n(&hak_l25_heap.state, HAK_HEAP_ACTIVE, __ATOMIC_RELAXED);
    heap_setup(&hak_nursery_heap, 0);
    heap_make_private(&hak_nursery_heap);
    __atomic_store_n(&hak_nursery_heap.state, HAK_HEAP_ACTIVE, __ATOMIC_RELAXED);
    hak_unlock(&heap_lock);
}

/* ---- the nursery --------------------------------------------------------------
 * A heap of its own costs a thread a page of slab per size class it uses,
 * and its SuperSlab's header: about 45 KiB for a thread that holds a block
 * of each of 8 sizes, whatever it holds.  Most threads that allocate little
 * do so at first only (a worker sets up) or for good (5000 threads that
 * each hold a few blocks): their first HAK_NURSERY_ALLOCS allocations come
 * from one heap they share, under its lock, so that they cost blocks, not
 * pages.  Not where a warm abandoned heap waits (heap_take_locked: adopting
 * it costs nothing new), nor for L2.5 sizes (shared slabs already) or the
 * profiler's and the statistics' paths (they count on the thread's heap).
 * A thread with no heap of its own frees nursery blocks back into the
 * nursery's caches and rings under the same lock (hak_nursery_free), so the
 * block it freed
 * last is the one it gets next, as from a heap of its own (the hardened
 * build's checks of a block handed out again count on that); other
 * threads' frees of them are remote frees, which the nursery collects when
 * a slab runs dry and the purger sweeps, as for the shared L2.5 heap. */
hak_heap_t hak_nursery_heap;
static __thread unsigned tls_young;    /* allocations from the nursery */

HAK_ALLOC_PATH void *hak_nursery_alloc(size_t size, bool *kick) {
    *kick = false;
    if (tls_young >= HAK_NURSERY_ALLOCS || hak_tls_own_heap != NULL || tls_thread_done ||
        hak_opt.stats || hak_opt.profile[0] != '\0' || hak_opt.profile_leaks ||
        (atomic_load_explicit(&abandoned_warm, memory_order_relaxed) != 0 && heap_adopt(true) != NULL))
        return NULL;
    tls_young++;
    /* Young threads' blocks lie side by side in the nursery's slabs, and a
     * thread's first allocations are often what it writes most (its own
     * state, a counter): each takes whole cache lines, so that two threads
     * never write to one line.  The smallest class that holds a multiple of
     * HAK_CACHE_LINE is one too, and its blocks start on a line.  At most
     * 63 B more for each of a thread's first HAK_NURSERY_ALLOCS blocks. */
    size_t lines = (size + HAK_CACHE_LINE - 1) & ~(size_t)(HAK_CACHE_LINE - 1);
    hak_heap_t *n = &hak_nursery_heap;
    hak_heap_lock(n);
    if (lines == 0) lines = HAK_CACHE_LINE;
    void *p = hak_heap_alloc(n, lines, hak_request_class(lines));
    *kick = hak_heap_kick_due(n);
    hak_heap_unlock(n);
    return p;
}

bool hak_nursery_free(hak_slab_t *s, void *p) {
    hak_heap_t *n = &hak_nursery_heap;
    hak_heap_lock(n);
    if (s->tier == HAK_TIER_TINY) {
        if (hak_tiny_free(n, s, p)) hak_tiny_cache_full(n, s->cls);
    } else if (!hak_pool_free(s->ring, p)) {
        hak_pool_free_ring_full(n, s->ring, p);
    }
    bool due = hak_heap_kick_due(n);
    hak_heap_unlock(n);
    return due;
}

/* h's remote frees collected and its empty slabs and SuperSlabs retired,
 * keeping no spares.  The caller owns h. */
static void heap_sweep_bare(hak_heap_t *h) {
    uint8_t keep = h->keep_spares;
    h->keep_spares = HAK_SPARES_NONE;
    heap_sweep(h);
    h->keep_spares = keep;
}

/* A thread that leaves where nothing settles heaps later, having taken
 * blocks from the nursery while young: those, freed since as remote frees
 * (it had a heap of its own by then), go back now too.  The nursery collects them
 * only when a slab runs dry or the purger sweeps it, and no purger runs:
 * 1000 such threads left 8-20 MiB of the nursery's slabs resident. */
static void nursery_settle(void) {
    hak_heap_t *n = &hak_nursery_heap;
    hak_heap_lock(n);
    heap_sweep(n);
    hak_heap_unlock(n);
}

/* The purger's pass over the shared heap.  First what an owner would do on
 * its slow paths (the heap has no thread to do it): remote frees collected
 * (those of threads without a heap) and empty slabs retired, the spares
 * too: between passes they absorb a class's empty-and-refill churn, and
 * one still empty a pass later has been idle about a delay (its span's
 * pages then go back a delay after, unless a new slab takes them).  Then,
 * as for every heap, what has stayed free for the delay goes back (in this
 * order, so that malloc_trim gives back the slabs it retires); the empty
 * SuperSlabs that left clean go to the cache (it keeps dirty ones:
 * release_ok, hakmem_superslab.c).  The bare sweeps are the timed passes'
 * only (sc->sweep): with no purger the bounded passes may come every few
 * ms, and a spare retired each time would be no spare; theirs collects the
 * remote frees and keeps the spares (a thread with no heap that frees L2.5
 * blocks leaves them there, and with no purger nothing else would). */
void hak_heap_purge_shared(hak_purge_scan_t *sc, bool trylock) {
    hak_heap_t *s = &hak_l25_heap;
    if (!trylock) hak_heap_lock(s);
    if (!trylock || hak_heap_trylock(s)) {
        if (sc->sweep) {
            heap_sweep_bare(s);
            hak_slab_shared_spares_reset();
        } else {
            heap_sweep(s);      /* remote frees only: spares stay */
        }
        size_t before = sc->left;
        hak_slab_purge_heap(s, sc);
        atomic_store_explicit(&s->purge_left, sc->left - before, memory_order_relaxed);
        for (hak_superslab_t *ss = s->ss_list; ss != NULL;) {   /* those it made clean */
            hak_superslab_t *next = ss->next;
            hak_ss_release_if_empty(s, ss);
            ss = next;
        }
        hak_l25_unlock();
    } else {
        if (sc->delay < sc->wait) sc->wait = sc->delay;      /* skipped: look again a delay later */
        sc->left += atomic_load_explicit(&s->purge_left, memory_order_relaxed);
    }
    /* The nursery: as any thread's heap, swept as its thread would (it
     * keeps its spares and Tiny caches for the next young threads; the
     * bounded passes too), its due memory given back; malloc_trim (delay 0)
     * flushes its caches and sweeps it bare. */
    hak_heap_t *n = &hak_nursery_heap;
    if (!trylock) hak_heap_lock(n);
    else if (!hak_heap_trylock(n)) {
        if (sc->delay < sc->wait) sc->wait = sc->delay;
        sc->left += atomic_load_explicit(&n->purge_left, memory_order_relaxed);
        return;
    }
    if (sc->sweep && sc->delay == 0) {
        heap_flush_rings(n);
        heap_sweep_bare(n);
    } else {
        heap_sweep(n);      /* a bounded pass's too: remote frees count toward its bound */
    }
    size_t before = sc->left;
    hak_slab_purge_heap(n, sc);
    atomic_store_explicit(&n->purge_left, sc->left - before, memory_order_relaxed);
    hak_heap_unlock(n);
}

/* Held across fork after the profiler's locks (a refill may run under them). */
void hak_heap_fork_lock_shared(void) {
    hak_lock(&hak_nursery_heap.lock);
    hak_lock(&hak_l25_heap.lock);
}
void hak_heap_fork_unlock_shared(void) {
    hak_unlock(&hak_l25_heap.lock);
    hak_unlock(&hak_nursery_heap.lock);
}

/* The abandoned heaps give back what they hold (heap_reclaim), as `how`
 * says (HAK_RECLAIM_*, hakmem_heap.h).  Taken off the list one at a
 * time while that runs and put back at its tail, so a new thread finds the
 * others there to adopt and successive calls go round; or, IN_PLACE, all
 * of them under heap_lock.  Returns, for NOTIFIED, whether it stopped with
 * more to look at; for IN_PLACE, whether SuperSlabs went back; for ONE,
 * whether the heap stamped enough to start the purger; else false. */
static bool reclaim_lock(unsigned how) {
    if (how & HAK_RECLAIM_TRY) return hak_trylock(&heap_lock);
    hak_lock(&heap_lock);
    return true;
}

bool hak_heap_reclaim_abandoned(unsigned how) {
    if (atomic_load_explicit(&hak_abandoned_count, memory_order_relaxed) == 0) return false;
    if (how & HAK_RECLAIM_IN_PLACE) {
        if (!reclaim_lock(how)) return false;
        size_t before = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                        atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
        for (hak_heap_t *b = heaps_abandoned; b != NULL; b = b->next_free) heap_reclaim(b, false);
        hak_unlock(&heap_lock);
        size_t after = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                       atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
        return after < before;
    }
    /* A NOTIFIED pass takes at most 8 (each is found by a scan from the
     * list's head). */
    unsigned n = (how & HAK_RECLAIM_ONE) ? 1
                 : atomic_load_explicit(&hak_abandoned_count, memory_order_relaxed);
    bool more = (how & HAK_RECLAIM_NOTIFIED) && n > 8;
    if (more) n = 8;
    for (; n != 0; n--) {
        if (!reclaim_lock(how)) return false;
        hak_heap_t *b = heaps_abandoned, *prev = NULL;
        while (b != NULL && (how & HAK_RECLAIM_NOTIFIED) && !hak_remote_notified(b)) {
            prev = b;
            b = b->next_free;
        }
        if (b != NULL) heap_unlink_abandoned_locked(b, prev);
        hak_unlock(&heap_lock);
        if (b == NULL) return false;
        heap_reclaim(b, false);
        if (how & HAK_RECLAIM_ONE) more = hak_heap_kick_due(b);
        hak_lock(&heap_lock);
        heap_abandon_locked(b);
        hak_unlock(&heap_lock);
    }
    return more;
}

/* The purger: an exited thread's heap keeps its Tiny caches, an empty
 * slab per class and an empty SuperSlab, warm for the next thread; once it
 * has waited a delay for one (5000 threads that exit together leave 5000
 * heaps that no thread may ever want), it gives back all it holds
 * (heap_reclaim, caches too), once.  Heaps wait in the order their threads
 * left them; a reclaimed one goes to the tail; sc learns when the next
 * one is due. */
void hak_heap_settle_abandoned(hak_purge_scan_t *sc) {
    for (;;) {
        hak_lock(&heap_lock);
        if (unsettled_count == 0) {
            hak_unlock(&heap_lock);
            return;
        }
        hak_heap_t *b = heaps_abandoned, *prev = NULL;
        while (b != NULL && b->settled) {
            prev = b;
            b = b->next_free;
        }
        /* (what it holds is its own: not counted as left) */
        if (b != NULL && !hak_purge_due(sc, b->left_at, 0)) b = NULL;
        if (b == NULL) {
            hak_unlock(&heap_lock);
            return;
        }
        heap_unlink_abandoned_locked(b, prev);
        hak_unlock(&heap_lock);
        heap_reclaim(b, false);
        b->settled = true;
        hak_lock(&heap_lock);
        heap_abandon_locked(b);
        hak_unlock(&heap_lock);
    }
}

hak_heap_t *hak_heap_first(void) { return __atomic_load_n(&heaps_all, __ATOMIC_ACQUIRE); }

size_t hak_heap_active_count(void) { return __atomic_load_n(&active_count, __ATOMIC_RELAXED); }

/* malloc_trim in this thread, or asked for by one in another thread (on
 * the next slow path): the rings go back to the slabs, which are swept
 * without spares, so empty slabs and SuperSlabs go to the cache. */
void hak_heap_trim_self(hak_heap_t *h) {
    atomic_store_explicit(&h->trim_request, false, memory_order_relaxed);
    heap_flush_rings(h);
    heap_sweep_bare(h);
}

/* The heap shrank to half since its rings were last flushed
 * (hak_heap_shrink_check, hakmem_heap.h): the rings go back to the
 * slabs. */
void hak_heap_shrunk(hak_heap_t *h) {
    h->shrink_mark = h->slab_pages;
    heap_flush_rings(h);
}

void hak_heap_counts(size_t *heaps, size_t *abandoned) {
    size_t n = 0;
    hak_lock(&heap_lock);
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all)
        n += h->chunk_kind == 0 && !hak_heap_is_shared(h);
    hak_unlock(&heap_lock);
    *heaps = n;
    *abandoned = atomic_load_explicit(&hak_abandoned_count, memory_order_relaxed);
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

/* The thread is exiting (its key's destructor, hakmem_init.c).  Its heap
 * waits for a new thread, warm (heap_detach): threads that come and go (a
 * server's workers, Larson) adopt it at once.  What no thread takes goes
 * back by time (settling), or now with no delay (settle_now). */
bool hak_heap_thread_exit(hak_heap_t *h) {
    if (h == NULL || h != hak_tls_own_heap) return false;
    heap_detach(h);          /* the caller starts the purger whatever it stamped */
    bool now = settle_now(h);
    if (now && tls_young != 0) nursery_settle();
    tls_thread_done = true;
    return heap_leave(h, now);
}

/* Allocation by a thread whose heap is gone (a destructor running after
 * ours): borrow an abandoned heap under the lock for this one call. */
HAK_ALLOC_PATH void *hak_alloc_without_heap(size_t size, unsigned cls) {
    hak_lock(&heap_lock);
    hak_heap_t *h = heap_take_locked(false);
    void *p = NULL;
    if (h != NULL) {
        hak_tls_own_heap = h;
        if (!hak_opt.stats) hak_tls_fast_heap = h;     /* with stats, counted below */
        h->keep_spares = HAK_SPARES_REFILL;
        p = hak_heap_alloc(h, size, cls);
        if (hak_opt.stats && p != NULL) hak_stats_alloc(cls, hak_class_block_size[cls]);
        /* An abandoned heap's rings are empty: a reclaim may run where the
         * shared L2.5 heap's lock is held (making room for its SuperSlab),
         * and must not need it. */
        hak_pool_flush_all(h);
        heap_park(h);
        hak_tls_fast_heap = &hak_empty_heap;
        hak_tls_own_heap = NULL;
        heap_abandon_locked(h);
    }
    hak_unlock(&heap_lock);
    if (p == NULL) errno = ENOMEM;
    return p;
}

/* ---- start-up and fork (the handlers: hakmem_init.c) -------------------------- */
void hak_heap_init(void (*exit_fn)(void *heap)) {
    heap_key_ready = pthread_key_create(&heap_key, exit_fn) == 0;
    heap_make_shared();
}

void hak_heap_fork_lock(void)   { hak_lock(&heap_lock); }
void hak_heap_fork_unlock(void) { hak_unlock(&heap_lock); }

/* In the child only the forking thread lives.  The other threads' heaps may
 * have been caught half-way through an update (their owners take no lock),
 * so the child never adopts them: they stay orphaned, their blocks still
 * freeable (onto the orphan's remote list), their memory not reused.  Only
 * the forking thread's heap, those on the abandoned list and the
 * profiler's heaps of sampled blocks (their locks were held) are known to
 * be whole (a heap housekeeping had taken off the list may be half swept,
 * its lock held).  Lets heap_lock go. */
void hak_heap_fork_child(void) {
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all)
        if (h != hak_tls_own_heap && !hak_heap_is_shared(h) && h->chunk_kind == 0)
            h->state = HAK_HEAP_ORPHANED;
    for (hak_heap_t *h = heaps_abandoned; h != NULL; h = h->next_free)
        h->state = HAK_HEAP_ABANDONED;
    __atomic_store_n(&active_count, hak_tls_own_heap != NULL, __ATOMIC_RELAXED);
    hak_unlock(&heap_lock);
}
