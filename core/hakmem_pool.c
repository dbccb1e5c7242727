/* L2 ring pool (1 KiB .. 52 KiB) and the ring mechanics it shares with the
 * L2.5 pool: a per-thread LIFO ring of blocks per class (box/pool_ring_box.h)
 * refilled from, and flushed to, the heap's slabs half a ring at a time. */
#include "hakmem_internal.h"
#include "box/pool_ring_box.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"

#include <errno.h>
#include <string.h>

void *hak_pool_alloc_slow(hak_heap_t *h, hak_ring_t *r, unsigned cls) {
    if (h == &hak_empty_heap) {     /* first allocation of a thread, or stats */
        h = hak_heap_for_thread();
        if (h == NULL) return hak_alloc_without_heap(hak_class_block_size[cls]);
        void *p = hak_pool_alloc(h, cls);
        if (hak_opt.stats && p != NULL) hak_stats_alloc(cls, hak_class_block_size[cls]);
        return p;
    }
    unsigned want = r->cap > 1 ? r->cap / 2 : 1;
    unsigned got = hak_class_take(h, cls, r->slot, want);
    if (got == 0) {
        errno = ENOMEM;
        return NULL;
    }
    r->count = got - 1;
    return r->slot[got - 1];
}

/* Return the oldest blocks to their slabs, keeping the newest `keep`. */
void hak_pool_ring_flush(hak_heap_t *h, hak_ring_t *r, unsigned keep) {
    unsigned n = r->count > keep ? r->count - keep : 0;
    for (unsigned i = 0; i < n; i++) {
        void *p = r->slot[i];
        hak_slab_t *s = hak_slab_of(p);
        if (s->tier == HAK_TIER_L25) hak_l25_block_decommit(p, s->cls);
        /* decided before the free, which may retire the slab */
        bool purge = hak_slab_purge_due(s, (s->used & ~HAK_SLAB_FULL) - 1);
        hak_tiny_free(h, s, p);
        if (purge) hak_slab_purge(s);
    }
    memmove(r->slot, r->slot + n, (size_t)(r->count - n) * sizeof(void *));
    r->count -= n;
}

void hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p) {
    if (r->cap == 0) {              /* a Tiny class: the 32-byte cache */
        hak_c2_free(h, p);
        return;
    }
    hak_pool_ring_flush(h, r, r->cap / 2);
    r->slot[r->count++] = p;
}

hak_ring_t hak_empty_ring;   /* count 0, cap 0: every access is a slow path */

void hak_pool_init_heap(hak_heap_t *h) {
    for (unsigned c = 0; c < HAK_L2_FIRST; c++) h->ring[c] = &hak_empty_ring;
    for (unsigned i = 0; i < HAK_L2_CLASSES; i++) {
        h->l2[i].r.cap = (uint32_t)hak_opt.l2_ring_cap;
        h->ring[HAK_L2_FIRST + i] = &h->l2[i].r;
    }
    for (unsigned i = 0; i < HAK_L25_CLASSES; i++) {
        h->l25[i].r.cap = hak_l25_ring_cap(HAK_L25_FIRST + i);
        h->ring[HAK_L25_FIRST + i] = &h->l25[i].r;
    }
}
