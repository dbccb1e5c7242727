/* HAKMEM_TINY_C2_LOCAL_CACHE (off by default): a per-thread LIFO list of
 * up to HAK_C2_CACHE_CAP blocks of class 1 (32 B) taken from any of the
 * heap's class-1 slabs, in front of them.  Requests of 17..32 B map to the
 * pseudo class HAK_C2_CLASS, whose queue head is the cache (h->c2_cache,
 * slab-shaped), so malloc pops it with the ordinary Tiny fast path.  Class-1
 * slabs get tier HAK_TIER_TINY_C2: a free into one is not taken for Tiny,
 * and the owner's goes to hak_c2_free (box/c2_cache_box.h).  Off, nothing
 * maps to the pseudo class and no slab has that tier. */
#include "hakmem_internal.h"
#include "box/c2_cache_box.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/slab_push_box.h"
#include "hakmem_options.h"

#include <errno.h>

/* Blocks leave the cache for their slabs, keeping the newest `keep`. */
void hak_c2_flush(hak_heap_t *h, unsigned keep) {
    hak_slab_t *c = &h->c2_cache;
    hak_block_t *b = c->free, *last = NULL;
    for (unsigned i = 0; i < keep && b != NULL; i++) {
        last = b;
        b = hak_link_get_any(b);
    }
    if (last != NULL) hak_link_set(last, NULL);
    else c->free = NULL;
    while (b != NULL) {
        hak_block_t *next = hak_link_get_any(b);
        hak_slab_t *s = hak_slab_of(b);
        if (hak_slab_push(s, b)) hak_slab_free_slow(h, s);
        c->used++;
        b = next;
    }
}

void hak_c2_free_full(hak_heap_t *h, void *p) {
    hak_c2_flush(h, HAK_C2_CACHE_CAP / 2);
    hak_c2_free(h, p);      /* room now */
}

/* The cache ran dry: half a cache of blocks from the class's slabs. */
void *hak_c2_refill(hak_heap_t *h) {
    void *got[HAK_C2_CACHE_CAP / 2];
    unsigned n = hak_class_take(h, HAK_C2_REAL_CLASS, got, HAK_C2_CACHE_CAP / 2);
    if (n == 0) {
        errno = ENOMEM;
        return NULL;
    }
    hak_slab_t *c = &h->c2_cache;
    for (unsigned i = 1; i < n; i++) {
        hak_block_t *b = got[i];
        hak_link_set(b, c->free);
        c->free = b;
        c->used--;
    }
    return got[0];
}

/* At start-up: requests of 17..32 B (entry 2 of the Tiny table) map to the
 * cache's pseudo class. */
void hak_c2_enable(void) { hak_tiny_class_of[2] = HAK_C2_CLASS; }

/* A new heap's queue of the pseudo class: the cache, or (off) the empty
 * slab, which nothing reaches. */
void hak_c2_heap_init(hak_heap_t *h) {
    h->queue_head[HAK_C2_CLASS] = hak_opt.tiny_c2_cache ? &h->c2_cache : &hak_empty_slab;
}
