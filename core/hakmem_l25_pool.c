/* L2.5 pool (52 KiB .. 1 MiB): the same per-thread rings as L2
 * (hakmem_pool.c), in front of slabs that belong to one heap shared by
 * every thread rather than to the thread's own heap (hak_l25_heap, made and
 * swept with the other heaps in hakmem_heap.c).
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
#include "hakmem_l25_pool.h"
#include "hakmem_slab.h"
#include "box/size_class_box.h"
#include "hakmem_options.h"

hak_heap_t hak_l25_heap;

unsigned hak_l25_ring_cap(unsigned cls) {
    unsigned cap = HAK_L25_RING_BUDGET / hak_class_block_size[cls];
    if (cap < 2) cap = 2;       /* two, so a free/malloc pair alternates in the ring */
    return cap < (unsigned)hak_opt.l25_ring_cap ? cap : (unsigned)hak_opt.l25_ring_cap;
}

/* Up to n blocks of class cls onto the chain at *chain: the refill of
 * thread heap h's ring.  What the shared heap stamped, or a SuperSlab it
 * mapped beyond its first, is passed on to h, whose caller starts the
 * purger (with no lock held: hak_heap_kick_due). */
unsigned hak_l25_take(hak_heap_t *h, unsigned cls, unsigned n, hak_block_t **chain) {
    hak_heap_t *s = hak_l25_lock();
    unsigned got = hak_class_take(s, cls, n, n, chain);
    if (hak_l25_unlock()) h->purge_pending |= HAK_PURGE_WANTED;
    return got;
}
