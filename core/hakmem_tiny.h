/* The Tiny tier's slow paths (hakmem_tiny.c; fast paths: box/tiny_box.h):
 * a thread's cache of each class refilled from the slabs, and sent back. */
#ifndef HAKMEM_TINY_H
#define HAKMEM_TINY_H

#include "hakmem_types.h"

/* The slow paths take the request, not its class: the fast path then keeps
 * no register for the class (one instruction less on every malloc). */
HAK_INTERNAL void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h);
/* A free took the last room of the cache of class cls (box/tiny_box.h):
 * blocks go back to the slabs. */
HAK_INTERNAL void hak_tiny_cache_full(hak_heap_t *h, unsigned cls);
/* Every cache of h back to its slabs: trim, a heap that shrank, an
 * abandoned heap reclaimed (a thread that leaves its heap keeps them warm
 * for the next). */
HAK_INTERNAL void hak_tiny_flush_all(hak_heap_t *h);
HAK_INTERNAL void hak_tiny_init_heap(hak_heap_t *h);

#endif /* HAKMEM_TINY_H */
