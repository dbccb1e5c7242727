/* L2.5 pool (52 KiB .. 1 MiB): the same rings as L2 (hakmem_pool.c), with
 * capacity POOL_L25_RING_CAP bounded by a per-class byte budget so a thread
 * does not sit on 16 MiB of 1 MiB blocks (HAK_L25_RING_BUDGET; at least two
 * blocks), and by HAKMEM_L25_RING_CAP. */
#include "hakmem_internal.h"
#include "box/size_class_box.h"
#include "hakmem_options.h"

unsigned hak_l25_ring_cap(unsigned cls) {
    unsigned cap = HAK_L25_RING_BUDGET / hak_class_block_size[cls];
    if (cap < 2) cap = 2;       /* two, so a free/malloc pair alternates in the ring */
    return cap < (unsigned)hak_opt.l25_ring_cap ? cap : (unsigned)hak_opt.l25_ring_cap;
}

/* A free L2.5 block gives its pages to the OS, all but the first (which
 * holds its link, freed-mark and stamp): once it has stayed unused on its
 * slab's free list for the purge delay (hak_slab_purge), or at once when
 * the ring flushes it with HAKMEM_PURGE_DELAY_MS=0. */
void hak_l25_block_decommit(void *p, unsigned cls) {
    uintptr_t first = ((uintptr_t)p + 2 * 4096 - 1) & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)p + hak_class_block_size[cls]) & ~(uintptr_t)4095;
    if (end > first) hak_os_decommit((void *)first, end - first);
}
