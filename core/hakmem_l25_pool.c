/* L2.5 pool (52 KiB .. 1 MiB): the same rings as L2 (hakmem_pool.c), with
 * capacity POOL_L25_RING_CAP bounded by a per-class byte budget so a thread
 * does not sit on 16 MiB of 1 MiB blocks. */
#include "hakmem_internal.h"
#include "box/size_class_box.h"

unsigned hak_l25_ring_cap(unsigned cls) {
    unsigned cap = HAK_L25_RING_BUDGET / hak_class_block_size[cls];
    if (cap > POOL_L25_RING_CAP) cap = POOL_L25_RING_CAP;
    return cap < 1 ? 1 : cap;
}
