/* hardened_box — the checks of the hardened build (HAK_HARDENED) on the
 * malloc and free paths: a freed-mark in each free block's second word (the
 * key XOR its address, cleared as malloc hands the block out:
 * hak_block_taken in block_link_box.h) catches a double free anywhere in
 * the ring, cache and free lists; the block's offset in its slab catches
 * frees into the middle of a block or the slab header; the slab's state
 * catches frees of blocks whose memory was given back. */
#ifndef HAK_HARDENED_BOX_H
#define HAK_HARDENED_BOX_H

#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"

#ifdef HAK_HARDENED
/* off / block size without a divide: off * magic >> 44 is exact for
 * offsets below 4 MiB and blocks up to 1 MiB (magic = ceil(2^44 / size)). */
#define HAK_DIV_SHIFT 44
HAK_INTERNAL extern uintptr_t hak_mark_key;
HAK_INTERNAL extern uint64_t hak_div_magic[HAK_NUM_CLASSES];

static inline uintptr_t hak_freed_mark(const void *p) { return hak_mark_key ^ (uintptr_t)p; }

/* The whole check, diagnosing and stopping on a bad free (hakmem_hardened.c). */
HAK_INTERNAL void hak_hardened_check_free(void *p);

/* The common case inline: a block start of a live slab, not marked free.
 * Then marks it.  Anything else: false, and the caller runs
 * hak_hardened_check_free, which finds out what is wrong.  (Live slabs give
 * no pages back in this build, so no block can lie on one.) */
static inline bool hak_hardened_quick_free(void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    unsigned idx = ss->page_head[hak_page_of(p)];
    hak_slab_t *s = &ss->slabs[idx];
    /* page 0's blocks start after the header */
    uintptr_t start = (uintptr_t)ss + ((size_t)idx << HAK_PAGE_SHIFT) + (idx == 0) * HAK_SS_DATA0;
    uint64_t off = (uintptr_t)p - start;          /* huge if p is below start */
    uint64_t q = (off * hak_div_magic[s->cls]) >> HAK_DIV_SHIFT;
    uintptr_t *w = p;
    /* a retired slab has capacity 0: every q fails the capacity test */
    if (off != q * hak_class_block_size[s->cls] || q >= s->capacity || w[1] == hak_freed_mark(p))
        return false;
    w[1] = hak_freed_mark(p);
    return true;
}
#endif

#endif
