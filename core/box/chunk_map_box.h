/* chunk_map_box — which chunk is hakmem's, and which slab holds a block.
 * One byte load per lookup (flat map); addresses above the 47-bit user
 * space and chunks hakmem never mapped read as HAK_CHUNK_NONE. */
#ifndef HAK_CHUNK_MAP_BOX_H
#define HAK_CHUNK_MAP_BOX_H

#include "hakmem_chunk_map.h"

/* The flat byte map, read inline: the free fast path. */
static inline unsigned hak_chunk_kind_flat(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_CHUNK_SHIFT;
    if (hak_unlikely(i >= HAK_MAP_ENTRIES)) return HAK_CHUNK_NONE;
    return __atomic_load_n(&hak_chunk_map[i], __ATOMIC_RELAXED);
}

/* Two kinds of map (HAKMEM_SS_LOOKUP_KIND): the flat byte map, and a
 * two-level radix table.  With the radix table the flat map stays empty, so
 * every lookup falls through to it on the NONE path: choosing costs the flat
 * fast path nothing. */
static inline unsigned hak_chunk_kind(const void *p) {
    unsigned k = hak_chunk_kind_flat(p);
    if (hak_unlikely(k == HAK_CHUNK_NONE) && hak_radix_in_use) k = hak_chunk_kind_radix(p);
    return k;
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
static inline hak_slab_t *hak_page_desc_of(const void *p) {
    return &hak_ss_of(p)->slabs[hak_page_of(p)];
}

/* The slab descriptor of a block in a SuperSlab (kind HAK_CHUNK_SS). */
static inline hak_slab_t *hak_slab_of(const void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    return &ss->slabs[ss->page_head[hak_page_of(p)]];
}

#endif
