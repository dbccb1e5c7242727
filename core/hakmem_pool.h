/* The L2 and L2.5 ring pools (hakmem_pool.c; fast paths:
 * box/pool_ring_box.h): a thread's ring of each class refilled from the
 * slabs and flushed back.  The L2.5 rings' slabs are those of the heap all
 * threads share (hakmem_l25_pool.h). */
#ifndef HAKMEM_POOL_H
#define HAKMEM_POOL_H

#include "hakmem_os.h"
#include "hakmem_types.h"
#include "hakmem_l25_pool.h"

extern hak_ring_t hak_empty_ring;

HAK_INTERNAL void *hak_pool_alloc_slow(unsigned cls, hak_heap_t *h);
HAK_INTERNAL void  hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p);
HAK_INTERNAL void  hak_pool_return_block(hak_heap_t *h, void *p);
HAK_INTERNAL void  hak_pool_init_heap(hak_heap_t *h);
HAK_INTERNAL void hak_pool_flush_all(hak_heap_t *h);
HAK_INTERNAL void hak_pool_flush_idle(hak_heap_t *h);

#endif /* HAKMEM_POOL_H */
