/* hardened_box — the check of the hardened build (HAK_HARDENED) on the
 * free path.  A freed-mark in each free block's second word (the link key
 * XOR its address; set when a block is carved or freed, cleared as malloc
 * hands it out: hak_block_taken in block_link_box.h) catches a double free
 * anywhere in the rings, caches and free lists.  The SuperSlab's per-page
 * span check (hak_span_check_t) catches frees into the middle of a block,
 * into a slab header, of blocks never handed out, and of spans no longer
 * live (their memory may have gone back to the OS). */
#ifndef HAK_HARDENED_BOX_H
#define HAK_HARDENED_BOX_H

#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/block_link_box.h"

#ifdef HAK_HARDENED
/* The whole check, naming what is wrong and stopping (hakmem_hardened.c). */
HAK_INTERNAL void hak_hardened_check_free(void *p) __attribute__((noreturn, cold));

/* A block start below the part of its slab never handed out (so inside a
 * live slab). */
static inline bool hak_hardened_block_start(const void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    const hak_span_check_t *c = &ss->check[hak_page_of(p)];
    /* start and divisible are written when the slab is made or retired,
     * with no block of it out; limit grows while other threads free blocks
     * handed out before: a relaxed atomic.  A remote free sees every write
     * the owner made before handing the block out. */
    uint64_t divisible = ss->divisible[hak_page_of(p)];
    uint32_t start = c->start;
    uint32_t limit = __atomic_load_n(&c->limit, __ATOMIC_RELAXED);
    /* 32-bit: a pointer below the first block wraps far past the limit */
    uint32_t off = (uint32_t)((uintptr_t)p & (HAK_CHUNK_SIZE - 1)) - start;
    return off < limit && off * divisible < divisible;
}

/* The free check, inline: a block start, not marked free.  Then marks it.
 * Anything else: false, and the caller runs hak_hardened_check_free.  (Live
 * slabs give no pages back in this build, except the pages of free L2.5
 * blocks beyond their first, which holds the mark.) */
static inline bool hak_hardened_quick_free(void *p) {
    uintptr_t *w = p;
    if (!hak_hardened_block_start(p) || w[1] == hak_freed_mark(p)) return false;
    w[1] = hak_freed_mark(p);
    return true;
}

/* realloc's check: the block is live (a block start, not marked free). */
static inline bool hak_hardened_live(const void *p) {
    return hak_hardened_block_start(p) && ((const uintptr_t *)p)[1] != hak_freed_mark(p);
}
#endif

#endif
