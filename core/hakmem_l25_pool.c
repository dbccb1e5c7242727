/* L2.5 pool (52 KiB .. 1 MiB): the same per-thread rings as L2
 * (hakmem_pool.c), in front of slabs that belong to one heap shared by
 * every thread rather than to the thread's own heap.
 *
 * Why shared: a block of 64 KiB .. 1 MiB is few to a slab, so per-thread
 * slabs kept each thread's freed L2.5 memory resident and out of reach of
 * the others until the purge delay: 600 threads that each held one block of
 * a few sizes in turn kept ~100 KiB of free L2.5 pages per heap, and Python
 * threads building bytearrays each kept their own peak.  Here a thread's
 * ring still serves its own free/malloc pairs LIFO (no lock); a ring that
 * fills, a thread that exits or trims, sends its blocks back to the shared
 * slabs, where the next refill of any thread finds them resident.  The
 * shared heap's lock is taken once per refill or flush of half a ring; a
 * block is large enough that this is little beside its use.
 *
 * The rings' capacity is POOL_L25_RING_CAP bounded by a per-class byte
 * budget so a thread does not sit on 16 MiB of 1 MiB blocks
 * (HAK_L25_RING_BUDGET; at least two blocks), and by HAKMEM_L25_RING_CAP. */
#include "hakmem_internal.h"
#include "box/size_class_box.h"
#include "hakmem_options.h"

unsigned hak_l25_ring_cap(unsigned cls) {
    unsigned cap = HAK_L25_RING_BUDGET / hak_class_block_size[cls];
    if (cap < 2) cap = 2;       /* two, so a free/malloc pair alternates in the ring */
    return cap < (unsigned)hak_opt.l25_ring_cap ? cap : (unsigned)hak_opt.l25_ring_cap;
}

/* The shared heap: made at start-up, never adopted, abandoned or orphaned.
 * Threads take its lock here, before its nesting count (lock_depth, which
 * hak_heap_lock raises before it locks: right for an owner, not for many
 * threads); the layers below nest in it as in any heap's.  The purger
 * takes the lock directly, as for every heap. */
hak_heap_t *hak_l25_heap;

bool hak_l25_init(void) {
    hak_l25_heap = hak_heap_new_shared();
    return hak_l25_heap != NULL;
}

hak_heap_t *hak_l25_lock(void) {
    hak_lock(&hak_l25_heap->lock);
    hak_l25_heap->lock_depth = 1;
    return hak_l25_heap;
}

/* Unlocks; true when the shared heap has stamped enough to start the
 * purger (the caller passes that on to its own heap, which is asked with
 * no lock held). */
bool hak_l25_unlock(void) {
    bool due = hak_heap_kick_due(hak_l25_heap);
    hak_l25_heap->lock_depth = 0;
    hak_unlock(&hak_l25_heap->lock);
    return due;
}

/* Up to n blocks of class cls into out[]: a ring's refill. */
unsigned hak_l25_take(unsigned cls, void **out, unsigned n) {
    if (hak_unlikely(hak_l25_heap == NULL)) return 0;   /* not made at start-up */
    hak_heap_t *s = hak_l25_lock();
    unsigned got = hak_class_take(s, cls, out, n, NULL);
    hak_l25_unlock();
    return got;
}

/* The purger's pass over the shared heap (delay 0: malloc_trim).  First
 * what an owner would do on its slow paths (the heap has no thread to do
 * it): remote frees collected (those of threads that do not use the class)
 * and empty slabs retired, the spares too: between passes they absorb a
 * class's empty-and-refill churn, and one still empty a pass later has been
 * idle for about a delay (its span's pages then go back a delay after,
 * unless a new slab takes them).  Then, as for every heap, what has stayed
 * free for the delay goes back (hak_slab_purge_heap).  Returns ms until the
 * next stamp falls due. */
uint32_t hak_l25_purge(uint32_t now, uint32_t delay, bool trylock) {
    hak_heap_t *s = hak_l25_heap;
    if (s == NULL) return HAK_PURGE_NONE;
    if (trylock) {
        if (!hak_trylock(&s->lock)) return delay;
        s->lock_depth = 1;
    } else {
        hak_l25_lock();
    }
    hak_heap_sweep(s, true);
    uint32_t wait = hak_slab_purge_heap(s, now, delay);
    hak_l25_unlock();
    return wait;
}

void hak_l25_fork_lock(void) {
    if (hak_l25_heap != NULL) hak_lock(&hak_l25_heap->lock);
}
void hak_l25_fork_unlock(void) {
    if (hak_l25_heap != NULL) hak_unlock(&hak_l25_heap->lock);
}
