/* Reclamation: every way memory goes back, in one place.
 *   the purger and housekeeping   by time (below)
 *   hak_purge_everything          malloc_trim: all of it, now
 *   hak_make_room                 the OS refused a mapping
 * Each reaches the heaps of exited threads through one function,
 * hak_heap_reclaim_abandoned (hakmem_heap.c), told what to do by flags.
 *
 * Giving memory back by time.
 *
 * Nothing goes back to the OS because something happened (a thread
 * exited, a ring flushed, a slab or SuperSlab emptied, a large block was
 * freed): memory that is free again is stamped with the time
 * (hak_now_ms(), CLOCK_MONOTONIC_COARSE: a vDSO read, on slow paths only)
 * and stays resident, so that whatever is wanted again soon is reused
 * without a page fault.  Once it has stayed unused for HAKMEM_PURGE_DELAY_MS
 * it goes back:
 *   free pages of SuperSlabs (owned or cached)   hak_ss_purge_pages, _purge_cache
 *   free L2.5 blocks, free pages of L2 slabs      hak_slab_purge
 *   cached large mappings                         hak_large_purge
 * With a delay of 0 all of this happens at once, where it is freed.
 *
 * Who: a purger thread.  A heap that has stamped HAK_PURGE_KICK_MIN bytes
 * with no purger running starts one (hak_purge_kick: the layers below only
 * count what they stamp, and hakmem.c's slow paths, housekeeping and a
 * thread's exit ask, hak_heap_kick_due), and so do a heap that maps a
 * SuperSlab beyond its first, a new large block and every thread's exit
 * (its heap settles a delay later), so that one runs before the memory it
 * will give back is freed: free() never starts a thread (glibc calls free
 * with its own locks held, the thread-stack cache's among them, which
 * pthread_create takes: a purger started from there deadlocked Larson); it
 * only wakes an idle purger (hak_purge_request) or, with none, leaves it
 * to the next malloc slow path (hak_purge_wanted).  The purger sleeps until
 * the next stamp falls due, gives back what is due, idles a while more (10
 * delays, 1 to 60 s) for what the program frees next, and exits once
 * nothing is left, so an idle program has no purger and costs nothing.
 * It blocks every signal, is detached, exits when it is the process's last
 * thread (so it never keeps a process alive whose main thread called
 * pthread_exit: the last thread with a heap wakes it as it exits), and a
 * forked child whose parent had one starts its own at its first malloc
 * slow path (none at fork: a child must stay single-threaded until it asks
 * for more).
 *
 * No purger for good (none may be made: HAKMEM_PURGE_THREAD=0, or auto
 * under a seccomp filter, which may kill the process for its clone; none
 * can be made: limits): the delay stays, and the owners' slow paths run the
 * purger's pass themselves once one is due (hak_purge_inline, one relaxed
 * load while nothing is).  A program that frees and then idles runs no
 * slow path, so what stays free and resident is bounded as well
 * (purge_bounded: past HAK_IDLE_KEEP_HEAP a live heap, the oldest goes
 * back first), and a heap whose thread leaves is settled as it leaves.
 * No purger running yet or any more (it idled out): the slow paths run its
 * pass as above, what stays free and resident is bounded as above
 * (hak_purge_unattended: a free cannot start one, and a program that frees
 * once it left and makes no malloc slow path again would keep it all), and
 * a large block goes back at its free (hakmem.c asks
 * hak_purge_keeps_freed), since a program that frees and then idles runs
 * no slow path to start one.
 *
 * Exited threads' heaps keep their Tiny caches, an empty slab per class
 * and an empty SuperSlab, warm for the next thread; a delay after their
 * thread left, the pass gives all of it back (hak_heap_settle_abandoned).
 *
 * How it reaches other threads' memory without slowing their fast paths:
 * each heap has a lock (hak_heap_lock) that its owner takes only on slow
 * paths, around what a purge reads and changes: its SuperSlab list and page
 * maps, and the free lists of its L2 and L2.5 slabs.  The purger takes it
 * to give back a live heap's due pages.  Abandoned heaps (their thread has
 * exited) keep every slab parked with NOTIFY armed; a remote free into one
 * kicks the purger, which collects it (hak_heap_reclaim_abandoned), so
 * memory freed by other threads after its owner exited comes back too.
 *
 * malloc_trim (hak_purge_everything) runs the same pass with no delay over
 * every heap, live ones included, and asks every other live thread to
 * flush its rings at its next slow path (trim_request).  Blocks in the rings
 * and caches of a live thread that never comes back to a slow path are the
 * one thing it cannot reach (their owner takes no lock: reaching them would
 * cost every fast path), and it says so by returning 0.
 *
 * Locks: purge_lock (one pass at a time; fork holds it, so no heap lock is
 * held by a purge across fork) -> a heap's lock -> the cache locks.  The
 * owners never wait for purge_lock. */
#include "hakmem_purge.h"
#include "hakmem_heap.h"
#include "hakmem_large.h"
#include "hakmem_remote.h"
#include "hakmem_slab.h"
#include "hakmem_superslab.h"
#include "hakmem_chunk_map.h"
#include "hakmem_options.h"

static hak_lock_t purge_lock;
static _Atomic int purger_running;
static _Atomic int purger_wake;        /* futex word: wake up early */
static _Atomic int purger_idle;        /* nothing stamped: it waits for a wake */
_Atomic int hak_purge_wanted;          /* a free found no purger: malloc starts one */
_Atomic uint32_t hak_purge_inline_due; /* no purger: when the owners' paths run
                                          the next pass (| 1), 0 if nothing waits */
_Atomic bool hak_purge_unattended = true; /* no purger runs: the bound applies */
_Atomic size_t hak_stamped_net;        /* no purger: stamped less taken back into
                                          use, since ever (hakmem_types.h) */
_Atomic size_t hak_stamped_floor;      /* ... at which nothing the last bounded
                                          pass left would be free */
static _Atomic size_t bounded_due;     /* hak_stamped_net by which a bounded
                                          pass may be needed */
static _Atomic bool bounded_missed;    /* one was, while another pass ran */

/* The heaps a purge walks: those of live and exited threads, and the heap
 * profiler's heaps of sampled blocks (no thread; each used under a lock of
 * the profiler's, whose holder takes the heap's lock where any owner does). */
static bool heap_purged(const hak_heap_t *h, int state) {
    return state == HAK_HEAP_ACTIVE || state == HAK_HEAP_ABANDONED ||
           h->chunk_kind == HAK_CHUNK_PROF;
}

/* Whether a purge may take h's lock now.  Between hakmem's fork handlers,
 * the forking thread passes every lock (hak_lock, hakmem_os.h), but only
 * those its prepare handler took are its own then (the global ones, the
 * shared heaps' and the profiler's, under which its heaps are used):
 * another thread may be inside its own heap's lock (in the child, one that
 * no longer runs).  A purge run by another library's fork handler leaves
 * those heaps alone. */
static bool heap_in_reach(const hak_heap_t *h) {
    return !hak_tls_fork_locked || h->chunk_kind == HAK_CHUNK_PROF || h == hak_tls_own_heap;
}

/* One pass over every heap and both caches: what is due goes back; sc
 * says when the next stamp falls due and how much is left.  Caller holds
 * purge_lock. */
static void purge_pass_locked(hak_purge_scan_t *sc, bool trylock_heaps) {
    /* More abandoned heaps to collect: come back at once. */
    if (hak_heap_reclaim_abandoned(HAK_RECLAIM_NOTIFIED)) sc->wait = 0;
    hak_heap_purge_shared(sc, trylock_heaps);
    for (hak_heap_t *h = hak_heap_first(); h != NULL; h = h->next_all) {
        int st = hak_heap_state(h);
        if (!heap_purged(h, st) || hak_heap_is_shared(h)) continue;
        if (!heap_in_reach(h) || (trylock_heaps && !hak_heap_trylock(h))) {
            /* busy (its owner is in a slow path), or out of reach during a
             * fork: what it left last time */
            if (sc->delay < sc->wait) sc->wait = sc->delay;
            sc->left += atomic_load_explicit(&h->purge_left, memory_order_relaxed);
            continue;
        }
        if (!trylock_heaps) hak_heap_lock(h);
        size_t before = sc->left;
        hak_slab_purge_heap(h, sc);
        atomic_store_explicit(&h->purge_left, sc->left - before, memory_order_relaxed);
        hak_heap_unlock(h);
    }
    hak_heap_settle_abandoned(sc);
    hak_ss_purge_cache(sc);
    hak_large_purge(sc);
}

static uint32_t purge_pass(uint32_t delay, bool trylock_heaps) {
    hak_purge_scan_t sc = hak_purge_scan(hak_now_ms(), delay);
    purge_pass_locked(&sc, trylock_heaps);
    return sc.wait;
}

/* Only the purger is left: the program's threads have all ended (its main
 * thread with pthread_exit), and the process ends when the purger does.
 * Where the OS cannot count threads, no thread with a heap left stands for
 * it. */
static bool purger_alone(void) {
    long n = hak_os_thread_count();
    if (n < 0) return hak_heap_active_count() == 0;
    return n <= 1;
}

static uint32_t purger_pass(void) {
    hak_lock(&purge_lock);
    uint32_t wait = purge_pass(hak_purge_delay(), false);
    hak_unlock(&purge_lock);
    return wait;
}

/* How long the purger may sleep, at most ms.  While no thread has a heap
 * (the last one is on its way out and woke us, or the program allocates
 * only large blocks), the process may be ending with it: look again soon,
 * less often the longer it takes. */
static uint32_t ending_poll(uint32_t ms, uint32_t *ending) {
    if (hak_heap_active_count() != 0) {
        *ending = 1;
        return ms;
    }
    if (*ending < ms) ms = *ending;
    if (*ending < 1000) *ending *= 2;
    return ms;
}

static void purge_bounded(bool wait_lock);

/* The purger leaves: the bounded passes take over (hak_stamped_net counted
 * nothing while it ran).  After a pass that found nothing stamped they
 * count from there; else (it leaves with the process's last thread, or a
 * fork's child lost it) what it left is not known, and the next request
 * runs a pass, which measures it. */
static void bounded_restart(bool nothing_left) {
    size_t net = atomic_load_explicit(&hak_stamped_net, memory_order_relaxed);
    atomic_store_explicit(&hak_stamped_floor, net, memory_order_relaxed);
    size_t room = nothing_left ? hak_purge_idle_bound() / 2 : 0;
    atomic_store_explicit(&bounded_due, net + room, memory_order_relaxed);
    atomic_store(&hak_purge_unattended, true);
}

static void *purger_main(void *arg) {
    (void)arg;
    uint32_t delay = hak_purge_delay();
    /* Items falling due close together are taken in one wake-up. */
    uint32_t slack = delay / 8 < 100 ? delay / 8 : 100;
    uint32_t ending = 1;     /* ms: poll interval once no thread has a heap */
    uint32_t linger = delay * 10 < 1000 ? 1000 : delay * 10 > 60000 ? 60000 : delay * 10;
    bool idle = false;       /* the passes found nothing ...               */
    uint32_t idle_since = 0; /* ... since this hak_now_ms()                 */
    for (;;) {
        if (purger_alone()) break;
        uint32_t wait = purger_pass();
        if (wait != HAK_PURGE_NONE) idle = false;
        if (wait == HAK_PURGE_NONE) {
            /* Idle for a while: the program's next frees find a purger (they
             * cannot start one, and a large block freed with none goes back
             * at once).  A free that stamps after the idle flag is up wakes
             * it; one before is seen by the second pass. */
            uint32_t now = hak_now_ms();
            if (!idle) {
                idle = true;
                idle_since = now;
            }
            if (now - idle_since < linger) {
                atomic_store(&purger_idle, 1);
                if (purger_pass() == HAK_PURGE_NONE)
                    hak_os_sleep_on(&purger_wake, ending_poll(linger - (now - idle_since), &ending));
                atomic_store(&purger_idle, 0);
                continue;
            }
            /* Going: anything stamped after the pass saw purger_running
             * set, or is seen by this second pass (stamps are made under
             * the locks the pass takes).  From here the frees bound what
             * stays resident (unattended), counting from nothing left; a
             * bounded pass that found this last pass under way runs now. */
            bounded_restart(true);
            atomic_store(&purger_running, 0);
            wait = purger_pass();
            if (wait == HAK_PURGE_NONE) {
                if (atomic_load_explicit(&bounded_missed, memory_order_relaxed)) purge_bounded(false);
                return NULL;
            }
            int expected = 0;
            if (!atomic_compare_exchange_strong(&purger_running, &expected, 1)) return NULL;
            atomic_store(&hak_purge_unattended, false);
            idle = false;       /* that pass found work: back in service */
        }
        hak_os_sleep_on(&purger_wake, ending_poll(wait + slack + 1, &ending));
    }
    bounded_restart(false);
    atomic_store(&purger_running, 0);
    return NULL;
}

/* Whether this process may have a purger thread: not with
 * HAKMEM_PURGE_THREAD=0, nor (auto, the default) under a seccomp filter,
 * which may kill the whole process for the clone that would make it. */
static bool thread_allowed(void) {
    if (hak_opt.purge_thread == HAK_PURGE_THREAD_OFF) return false;
    return hak_opt.purge_thread == HAK_PURGE_THREAD_ON || !hak_os_sandboxed();
}

static bool purger_start(void) {
    return hak_os_thread_start(purger_main, NULL, (size_t)64 << 10);
}

/* No purger: the owners' slow paths give back what falls due
 * (hak_purge_inline), from the delay on. */
static void inline_schedule(uint32_t ms) {
    uint32_t due = (hak_now_ms() + ms) | 1;
    uint32_t cur = atomic_load_explicit(&hak_purge_inline_due, memory_order_relaxed);
    if (cur == 0 || (int32_t)(due - cur) < 0)
        atomic_store_explicit(&hak_purge_inline_due, due, memory_order_relaxed);
}

/* No purger thread, for good (none may be made, or the OS refused one
 * START_TRIES times).  The owners' slow paths give back what falls due
 * (hak_purge_inline), but a program that frees and then idles runs none:
 * what stays free and resident is bounded too (purge_bounded). */
static void no_thread_for_good(void) {
    __atomic_store_n(&hak_opt.purge_thread, HAK_PURGE_THREAD_OFF, __ATOMIC_RELAXED);
    inline_schedule(hak_purge_delay());
}

size_t hak_purge_idle_bound(void) {
    size_t bound = hak_heap_active_count() * HAK_IDLE_KEEP_HEAP;
    return bound < HAK_IDLE_KEEP_MIN ? HAK_IDLE_KEEP_MIN : bound;
}

/* While no purger runs (for good, not yet or not any more), past
 * HAK_IDLE_KEEP_HEAP bytes per live heap
 * (HAK_IDLE_KEEP_MIN at least) of free memory left resident, the oldest
 * goes back first: passes with a shorter and shorter delay until what is
 * left fits, each giving back only what brings it down to half the bound
 * (so memory freed within the last ms is not all given back at once).  So memory reused within the bound is not given back and
 * faulted in again (every free's decommit made 2 threads replacing 64
 * blocks of 64-256 KiB 50 times slower), and an idle program keeps at most
 * the bound, plus a kick's worth a heap.  A pass walks every heap: it runs
 * only once what the last one left, plus what was stamped and not taken
 * back into use since (hak_stamped_net), may be past the bound: a program
 * that frees and reuses as fast (a producer and a consumer) runs few. */
static void purge_unlock(void);

static void purge_bounded(bool wait_lock) {
    size_t net = atomic_load_explicit(&hak_stamped_net, memory_order_relaxed);
    if ((ptrdiff_t)(net - atomic_load_explicit(&bounded_due, memory_order_relaxed)) < 0) return;
    if (wait_lock) {
        hak_lock(&purge_lock);
    } else if (!hak_trylock(&purge_lock)) {
        atomic_store_explicit(&bounded_missed, true, memory_order_relaxed);   /* its holder looks */
        return;
    }
    atomic_store_explicit(&bounded_missed, false, memory_order_relaxed);
    size_t bound = hak_purge_idle_bound();
    size_t stamped = atomic_load_explicit(&hak_stamped_net, memory_order_relaxed);
    /* A heap whose lock is held (its owner is in a slow path) counts as
     * what it left at the last pass: waiting for the lock made 2 threads'
     * passes wait for each other (64-256 KiB churn 4.5 -> 2.6 M ops/s). */
    hak_purge_scan_t sc = hak_purge_scan(hak_now_ms(), hak_purge_delay());
    sc.sweep = false;
    purge_pass_locked(&sc, true);
    uint32_t delay = sc.delay;
    while (sc.left > bound && delay != 0) {
        size_t want = sc.left - bound / 2;
        delay /= 4;
        sc = hak_purge_scan(hak_now_ms(), delay);
        sc.sweep = false;
        sc.want = want;
        purge_pass_locked(&sc, true);
    }
    /* The next pass once half the bound more may be free, at the soonest
     * (what a pass cannot give back, free blocks sharing a page with live
     * ones, would otherwise bring one at every kick), or 1/32 of the
     * SuperSlab memory a pass walks: so a program that frees a big heap
     * pays a bounded share for the walks (1 GiB freed: 30 passes, not
     * 115), and keeps at most that much more while it idles. */
    size_t walked = (atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed) +
                     atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed)) *
                    HAK_CHUNK_SIZE;
    size_t least = walked / 32 > bound / 2 ? walked / 32 : bound / 2;
    size_t room = sc.left + least < bound ? bound - sc.left : least;
    /* Reuse is counted at once, stamps by the kick (a heap's up to
     * HAK_PURGE_KICK_MIN, the shared heap's too): the estimate may run
     * that far below zero before it is wrong. */
    size_t slack = (hak_heap_active_count() + 1) * HAK_PURGE_KICK_MIN;
    atomic_store_explicit(&hak_stamped_floor, stamped - sc.left - slack, memory_order_relaxed);
    atomic_store_explicit(&bounded_due, stamped + room, memory_order_relaxed);
    purge_unlock();
    if (sc.wait != HAK_PURGE_NONE) inline_schedule(sc.wait);
}

/* purge_lock let go; a bounded pass asked for meanwhile runs now (it found
 * the lock held, and its kick may be the program's last). */
static void purge_unlock(void) {
    hak_unlock(&purge_lock);
    if (atomic_load_explicit(&bounded_missed, memory_order_relaxed) &&
        atomic_load_explicit(&hak_purge_unattended, memory_order_relaxed))
        purge_bounded(false);
}

/* A thread with a heap exited: with no purger, the bound it made room for
 * goes with it (its heap settled, stamped, as it left), and whether what
 * is left still fits is seen now, waiting for a pass under way (which may
 * have missed what this thread stamped last: no kick may come after). */
void hak_purge_thread_left(void) {
    if (!hak_purge_no_thread() || hak_purge_delay() == 0) return;
    atomic_fetch_sub_explicit(&bounded_due, HAK_IDLE_KEEP_HEAP, memory_order_relaxed);
    purge_bounded(true);
}

/* A refused thread (RLIMIT_NPROC, a cgroup's pids.max, both often
 * passing): the slow paths purge inline meanwhile, and a purger is tried
 * again a second later; the third refusal is taken as for good. */
#define START_TRIES 3
#define START_RETRY_MS 1000
static _Atomic unsigned start_failures;
static _Atomic uint32_t start_failed_at;

/* Start-up: HAKMEM_PURGE_THREAD=0 is known now; a seccomp filter (which
 * the program may also install later) is read when a purger would start. */
void hak_purge_init(void) {
    if (hak_opt.purge_thread == HAK_PURGE_THREAD_OFF) no_thread_for_good();
}

/* Something was stamped: make sure someone will give it back.  Called with
 * no hakmem lock held (pthread_create allocates). */
void hak_purge_kick(void) {
    /* Not from another library's fork handler: in the child, a purger
     * started there would run before hakmem's child handler resets the
     * purger's state (and a second could start after).  The next slow path
     * after the handlers starts it (hak_purge_wanted stays set). */
    if (hak_purge_delay() == 0 || hak_tls_fork_locked) return;
    if (atomic_load_explicit(&purger_running, memory_order_seq_cst)) return;
    if (!thread_allowed()) {
        if (!hak_purge_no_thread()) no_thread_for_good();
        inline_schedule(hak_purge_delay());
        purge_bounded(false);
        return;
    }
    if (atomic_load_explicit(&start_failures, memory_order_relaxed) != 0 &&
        hak_now_ms() - atomic_load_explicit(&start_failed_at, memory_order_relaxed) < START_RETRY_MS) {
        inline_schedule(hak_purge_delay());
        return;
    }
    atomic_store_explicit(&hak_purge_wanted, 0, memory_order_relaxed);
    int expected = 0;
    if (!atomic_compare_exchange_strong(&purger_running, &expected, 1)) return;
    atomic_store(&hak_purge_unattended, false);
    if (purger_start()) {
        atomic_store_explicit(&start_failures, 0, memory_order_relaxed);
        return;
    }
    atomic_store(&hak_purge_unattended, true);   /* what it counted stands */
    atomic_store(&purger_running, 0);
    atomic_store_explicit(&start_failed_at, hak_now_ms(), memory_order_relaxed);
    if (atomic_fetch_add_explicit(&start_failures, 1, memory_order_relaxed) + 1 >= START_TRIES)
        no_thread_for_good();
    else inline_schedule(hak_purge_delay());
}

/* The same from free: never starts a thread (see the top of this file).
 * Until the next malloc slow path starts one, or for good where none can
 * be made, the free paths give back what falls due themselves, and what
 * stays free and resident is bounded (a program that frees after the
 * purger left and makes no malloc slow path again would keep it all). */
void hak_purge_request(void) {
    if (hak_purge_delay() == 0) return;
    if (atomic_load_explicit(&purger_running, memory_order_seq_cst)) {
        if (atomic_load(&purger_idle)) hak_os_wake(&purger_wake);
        return;
    }
    inline_schedule(hak_purge_delay());
    if (!hak_purge_no_thread()) atomic_store_explicit(&hak_purge_wanted, 1, memory_order_relaxed);
    purge_bounded(false);
}

bool hak_purge_keeps_freed(void) {
    return atomic_load_explicit(&purger_running, memory_order_relaxed) != 0 || hak_purge_no_thread();
}

/* From the owners' slow paths (malloc's and free's) while a pass is due
 * and no purger runs: the purger's pass, taking no lock it would wait for. */
void hak_purge_inline(void) {
    uint32_t due = atomic_load_explicit(&hak_purge_inline_due, memory_order_relaxed);
    if (due == 0 || (int32_t)(hak_now_ms() - due) < 0) return;
    if (atomic_load_explicit(&purger_running, memory_order_relaxed)) {
        atomic_store_explicit(&hak_purge_inline_due, 0, memory_order_relaxed);
        return;
    }
    if (!hak_trylock(&purge_lock)) return;
    uint32_t wait = purge_pass(hak_purge_delay(), true);
    purge_unlock();
    /* A stamp scheduled meanwhile keeps its time. */
    atomic_compare_exchange_strong(&hak_purge_inline_due, &due, 0);
    if (wait != HAK_PURGE_NONE) inline_schedule(wait);
}

/* The last thread with a heap exited: the purger need not wait. */
void hak_purge_wake(void) {
    if (!atomic_load_explicit(&purger_running, memory_order_relaxed)) return;
    hak_os_wake(&purger_wake);
}

/* malloc_trim: everything free goes back now, from every heap.  True if
 * memory went back and nothing was left out of reach: the free blocks in
 * another live thread's caches and rings are its own (its fast paths take
 * no lock), so it is asked to flush them at its next slow path, and a
 * thread that idles meanwhile keeps them: then false, as glibc says 0 when
 * it could not give memory back. */
bool hak_purge_everything(void) {
    uint64_t before = atomic_load_explicit(&hak_released_bytes, memory_order_relaxed);
    hak_remote_flush();     /* an abandoned owner's slab: reclaimed below */
    hak_heap_t *me = hak_tls_own_heap;
    if (me != NULL) {
        hak_heap_trim_self(me);
        me->purge_pending = 0;     /* all of it goes back below: no purger needed */
    }
    hak_lock(&purge_lock);
    hak_heap_reclaim_abandoned(0);
    hak_purge_scan_t all = hak_purge_scan(0, 0);
    hak_heap_purge_shared(&all, false);
    bool out_of_reach = false;
    for (hak_heap_t *h = hak_heap_first(); h != NULL; h = h->next_all) {
        int st = hak_heap_state(h);
        if (!heap_purged(h, st) || hak_heap_is_shared(h)) continue;
        if (h != me && st == HAK_HEAP_ACTIVE && h->chunk_kind == 0) {
            atomic_store_explicit(&h->trim_request, true, memory_order_relaxed);
            out_of_reach = true;
        }
        if (!heap_in_reach(h)) {
            out_of_reach = true;
            continue;
        }
        hak_heap_lock(h);
        hak_slab_purge_heap(h, &all);
        hak_heap_unlock(h);
    }
    hak_large_trim_cache();
    hak_ss_trim_cache();
    hak_unlock(&purge_lock);
    return atomic_load_explicit(&hak_released_bytes, memory_order_relaxed) != before && !out_of_reach;
}

/* From the slow path every 256 refills: while threads have exited and left
 * heaps behind, take one at a time and collect its remote frees, so that
 * its empty slabs and SuperSlabs serve the running threads (through the
 * SuperSlab cache, warm) rather than wait for a new thread to adopt it. */
void hak_housekeeping(hak_heap_t *h) {
    /* not from a heap of the profiler's: its lock may not wait for heap_lock */
    if (hak_heap_state(h) != HAK_HEAP_ACTIVE) return;
    if (hak_heap_reclaim_abandoned(HAK_RECLAIM_ONE | HAK_RECLAIM_TRY)) hak_purge_kick();
}

/* When the OS says no (hakmem_chunk_map.c): the empty SuperSlabs of exited
 * threads' heaps and of the shared L2.5 heap, the SuperSlabs and large
 * mappings hakmem keeps cached and
 * the hardened build's dead ranges go back, so that memory freed by the
 * program is usable again whatever tier or thread it was cached for.  True
 * if anything went back.  (Takes heap_lock and the shared heap's lock only
 * by trylock: a caller may hold them.) */
bool hak_make_room(void) {
    bool any = hak_heap_reclaim_abandoned(HAK_RECLAIM_IN_PLACE | HAK_RECLAIM_TRY);
    /* The shared heap's free memory goes back and its empty SuperSlabs,
     * made clean, join the cache trimmed below (a try: a refill of it may
     * be what asks). */
    uint64_t before = atomic_load_explicit(&hak_released_bytes, memory_order_relaxed);
    hak_purge_scan_t all = hak_purge_scan(0, 0);
    hak_heap_purge_shared(&all, true);
    any |= atomic_load_explicit(&hak_released_bytes, memory_order_relaxed) != before;
    any |= hak_large_trim_cache();
    any |= hak_ss_trim_cache();
    any |= hak_chunk_release_dead();
    return any;
}

/* fork: no purge is half-way through a heap while the child is made. */
void hak_purge_fork_prepare(void) { hak_lock(&purge_lock); }
void hak_purge_fork_parent(void) { hak_unlock(&purge_lock); }

/* The child has no purger, and makes none here: a child must stay
 * single-threaded until it asks for more (unshare(CLONE_NEWUSER) fails in a
 * process with two threads; a fork+exec would pay for a thread it never
 * uses).  If the parent had one, the child's first malloc slow path starts
 * its own (hak_purge_wanted), and until then its free paths give back what
 * falls due and its large blocks go back at their free. */
void hak_purge_fork_child(void) {
    bool had = atomic_load_explicit(&purger_running, memory_order_relaxed) != 0;
    if (had) bounded_restart(false);
    atomic_store_explicit(&purger_running, 0, memory_order_relaxed);
    atomic_store_explicit(&purger_wake, 0, memory_order_relaxed);
    atomic_store_explicit(&purger_idle, 0, memory_order_relaxed);
    hak_unlock(&purge_lock);
    if (had) {
        atomic_store_explicit(&hak_purge_wanted, 1, memory_order_relaxed);
        inline_schedule(hak_purge_delay());
    }
}
