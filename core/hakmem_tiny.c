/* Tiny tier (<= 1024 B): the fast paths are in box/tiny_box.h; this is the
 * slow path, taken when the class's current slab has no free block. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"

#include <errno.h>

/* ---- HAKMEM_TINY_C2_LOCAL_CACHE ---------------------------------------------- */
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
        hak_tiny_free(h, hak_slab_of(b), b);
        c->used++;
        b = next;
    }
}

void hak_c2_free_full(hak_heap_t *h, void *p) {
    hak_c2_flush(h, HAK_C2_CACHE_CAP / 2);
    hak_c2_free(h, p);
}

/* The cache ran dry: half a cache of blocks from the class's slabs. */
static void *c2_refill(hak_heap_t *h) {
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

void hak_size_class_enable_c2(void) {
    /* sizes 17..32 are entry 2 of the Tiny table */
    hak_tiny_class_of[2] = HAK_C2_CLASS;
}

HAK_ALLOC_PATH void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h) {
    unsigned cls = hak_tiny_class(size);
    if (h == &hak_empty_heap) {     /* first allocation of a thread, or stats */
        h = hak_heap_for_thread();
        unsigned real = cls == HAK_C2_CLASS ? HAK_C2_REAL_CLASS : cls;
        if (h == NULL) return hak_alloc_without_heap(size);
        void *p = hak_tiny_alloc(h, size);
        if (hak_opt.stats && p != NULL) hak_stats_alloc(real, hak_class_block_size[real]);
        return p;
    }
    /* The fast path's countdown happens only when it has a block. */
    if (hak_unlikely((h->sample_left -= (int64_t)size) < 0)) return hak_profile_alloc(size);
    void *p = NULL;
    if (cls == HAK_C2_CLASS) p = c2_refill(h);
    else if (hak_class_take(h, cls, &p, 1) != 1) p = NULL;
    if (p != NULL) {
        hak_block_taken(p);
        return p;
    }
    errno = ENOMEM;
    return NULL;
}
