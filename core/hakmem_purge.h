/* Reclamation (hakmem_purge.c): memory given back by time (the purger
 * thread, or the slow paths where none runs), malloc_trim, and room made
 * when the OS refuses a mapping.  The purge functions of the layers below
 * fill in a hak_purge_scan_t (hakmem_types.h): how many ms until their
 * next stamped item falls due (HAK_PURGE_NONE if none is left) and how
 * much stays stamped. */
#ifndef HAKMEM_PURGE_H
#define HAKMEM_PURGE_H

#include "hakmem_types.h"

/* Something was stamped: make sure someone will give it back (starts the
 * purger; called with no hakmem lock held). */
HAK_INTERNAL void hak_purge_kick(void);
/* The same from free(), which never starts a thread: glibc calls free with
 * its own locks held (the thread-stack cache's, freeing an exited thread's
 * TLS), and pthread_create would wait for them forever.  A running purger
 * is woken if it idles; else the next malloc slow path starts one
 * (hak_purge_wanted). */
HAK_INTERNAL void hak_purge_request(void);
HAK_INTERNAL extern _Atomic int hak_purge_wanted;
/* Whether a freed large block may be cached: a purger runs to give it back
 * by time, or none ever will and the bounded passes do (hakmem_purge.c).
 * Not while a purger is merely not started yet: a program that frees and
 * then idles would run no slow path to start one. */
HAK_INTERNAL bool hak_purge_keeps_freed(void);
/* While no purger runs: the free memory kept resident at most (beyond it
 * the oldest goes back), for the number of threads with a heap now. */
HAK_INTERNAL size_t hak_purge_idle_bound(void);
HAK_INTERNAL void hak_purge_thread_left(void);

/* No purger runs (none may be made: HAKMEM_PURGE_THREAD, a seccomp filter,
 * limits; or none was started yet): the slow paths of malloc and free run
 * its pass themselves once one is due. */
HAK_INTERNAL extern _Atomic uint32_t hak_purge_inline_due;
HAK_INTERNAL void hak_purge_inline(void);
static inline void hak_purge_inline_check(void) {
    if (hak_unlikely(atomic_load_explicit(&hak_purge_inline_due, memory_order_relaxed) != 0))
        hak_purge_inline();
}
HAK_INTERNAL void hak_purge_init(void);
HAK_INTERNAL bool hak_purge_everything(void);
HAK_INTERNAL void hak_purge_wake(void);
HAK_INTERNAL void hak_purge_fork_prepare(void);
HAK_INTERNAL void hak_purge_fork_parent(void);
HAK_INTERNAL void hak_purge_fork_child(void);
/* The OS refused memory: everything cached goes back (the chunk map's
 * callback, hak_chunk_map_on_refusal). */
HAK_INTERNAL bool hak_make_room(void);
/* From the owner's slow path now and then (every 256 refills, hakmem.c). */
HAK_INTERNAL void hak_housekeeping(hak_heap_t *h);

#endif /* HAKMEM_PURGE_H */
