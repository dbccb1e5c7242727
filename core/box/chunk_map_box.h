/* chunk_map_box — which chunk is hakmem's, and which slab holds a block.
 * One byte load per lookup; addresses above the 47-bit user space and
 * chunks hakmem never mapped read as HAK_CHUNK_NONE. */
#ifndef HAK_CHUNK_MAP_BOX_H
#define HAK_CHUNK_MAP_BOX_H

#include "hakmem_internal.h"

static inline unsigned hak_chunk_kind(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_CHUNK_SHIFT;
    if (hak_unlikely(i >= HAK_MAP_ENTRIES)) return HAK_CHUNK_NONE;
    return __atomic_load_n(&hak_chunk_map[i], __ATOMIC_RELAXED);
}

static inline hak_superslab_t *hak_ss_of(const void *p) {
    return (hak_superslab_t *)((uintptr_t)p & ~(HAK_CHUNK_SIZE - 1));
}

static inline unsigned hak_page_of(const void *p) {
    return (unsigned)(((uintptr_t)p >> HAK_PAGE_SHIFT) & (HAK_SS_PAGES - 1));
}

/* The descriptor of the block's own page: its slab when the slab is one
 * page long (every Tiny slab); inside a longer span, a mirror that holds
 * only the slab's owner, tier and class (enough for a free to the ring). */
static inline hak_slab_t *hak_page_slab_of(const void *p) {
    return &hak_ss_of(p)->slabs[hak_page_of(p)];
}

/* The slab descriptor of a block in a SuperSlab (kind HAK_CHUNK_SS). */
static inline hak_slab_t *hak_slab_of(const void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    return &ss->slabs[ss->page_head[hak_page_of(p)]];
}

#endif
