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
