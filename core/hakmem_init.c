/* Start-up and fork: the wiring of every layer, so it lives above them all.
 * Start-up is lazy (hak_ensure_init, from the API's first call that needs
 * it, or the constructor below); the fork handlers hold every hakmem lock across
 * fork(). */
#include "hakmem_init.h"
#include "hakmem_chunk_map.h"
#include "hakmem_heap.h"
#include "hakmem_large.h"
#include "hakmem_profile.h"
#include "hakmem_purge.h"
#include "hakmem_remote.h"
#include "hakmem_stats.h"
#include "hakmem_superslab.h"
#include "hakmem_options.h"

#include <pthread.h>

static _Atomic int hak_initialized;
static hak_lock_t init_lock;

/* ---- fork -------------------------------------------------------------------
 * Every lock is held across fork() so the child never sees one half-taken
 * (what the child does with the heaps: hak_heap_fork_child). */
/* In the order the allocator itself nests them: a metadata mapping that
 * fails makes room (hakmem_chunk_map.c) with radix_lock and meta_lock held, which
 * takes the cache locks inside them.  Then the forking thread passes every
 * lock (hak_tls_fork_locked) until our parent or child handler: another
 * library's prepare handler registered before ours runs after it, and one
 * that allocates must not wait for a lock its own thread holds. */
static void fork_prepare(void) {
    hak_profile_fork_prepare();     /* a stack walk holds no other lock */
    hak_purge_fork_prepare();
    hak_heap_fork_lock();
    hak_profile_lock_all();     /* its heaps map SuperSlabs under its locks */
    hak_heap_fork_lock_shared();     /* a refill may run under either above */
    hak_chunk_map_lock_all();
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
    hak_chunk_map_unlock_all();
    hak_heap_fork_unlock_shared();
    hak_profile_unlock_all();
}

static void fork_parent(void) {
    fork_unlock_inner();
    hak_heap_fork_unlock();
    hak_purge_fork_parent();
    hak_profile_fork_parent();
}

static void fork_child(void) {
    fork_unlock_inner();
    hak_profile_fork_child();
    hak_heap_fork_child();
    hak_purge_fork_child();
}

/* ---- thread exit -------------------------------------------------------------
 * The destructor of the key that holds each thread's heap (hak_heap_init):
 * its batches of remote frees are pushed and batching ends (once the heap
 * has left, the thread's frees of its own blocks are remote ones, and glibc
 * makes some after every destructor has run, __libc_thread_freeres: a batch
 * started then would never be pushed); the heap is abandoned
 * (hakmem_heap.c), then the purger is started (it settles the heap a delay
 * later, hak_heap_settle_abandoned, and collects what was pushed into
 * exited threads' heaps), and woken if no thread has a heap any more (the
 * process may be ending: it need not wait). */
static void thread_exit(void *heap) {
    hak_remote_thread_exit();
    bool last = hak_heap_thread_exit(heap);
    hak_purge_thread_left();
    hak_purge_kick();        /* the heap settles a delay from now, if not adopted */
    if (last) hak_purge_wake();
}

/* The destructor of the key of each thread's batches of remote frees
 * (hakmem_remote.h): pushed, and the purger started if an owner has
 * exited. */
static void thread_exit_batches(void *batches) {
    (void)batches;
    if (hak_remote_thread_exit()) hak_purge_request();
}

/* ---- process start-up -------------------------------------------------------
 * Lazy and re-entrant: pthread_atfork may call malloc, so it runs after
 * hak_initialized is set. */
static void hak_init(void) {
    hak_lock(&init_lock);
    if (atomic_load_explicit(&hak_initialized, memory_order_relaxed)) {
        hak_unlock(&init_lock);
        return;
    }
    hak_chunk_map_on_refusal(hak_make_room);
    hak_options_init();
    if (hak_opt.stats || hak_opt.profile_leaks) hak_stderr_remember();
    /* the settings the layers take before anything is mapped */
    hak_chunk_map_select(hak_opt.ss_lookup_kind == HAK_LOOKUP_RADIX);
    hak_profile_init();
    hak_free_check_init();
    hak_heap_init(thread_exit);
    hak_remote_init(thread_exit_batches);
    hak_purge_init();
    atomic_store_explicit(&hak_initialized, 1, memory_order_release);
    hak_unlock(&init_lock);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void hak_ensure_init(void) {
    if (hak_unlikely(!atomic_load_explicit(&hak_initialized, memory_order_acquire))) hak_init();
}

__attribute__((constructor)) static void hak_constructor(void) {
    hak_ensure_init();
    hak_profile_start();
}
