/* free_check_box — the check every free of a SuperSlab block passes before
 * the block is queued anywhere (both builds).
 *
 * Two parts, both read from memory the free path touches anyway:
 *   - the span check (hak_span_check_t, in the descriptor of the block's
 *     page, on the line the free path reads anyway): the
 *     pointer is the start of a block its slab has handed out at some time.
 *     A pointer into the middle of a block, into a slab header, into a page
 *     with no slab (never used, or its span retired) or past the blocks
 *     carved so far fails it;
 *   - the freed-mark (block_link_box.h): a free block holds its address
 *     mixed with a constant in its second word, from the moment it is carved or freed
 *     until malloc hands it out.  A free that finds the mark is a double
 *     free, wherever the first free left the block (slab list, ring,
 *     thread cache, another thread's remote list).
 * The inline test is a multiply and a compare for the span check and a
 * compare for the mark; the out-of-line diagnosis (hak_free_check_fail)
 * runs only when it fails, names the problem and stops the process. */
#ifndef HAK_FREE_CHECK_BOX_H
#define HAK_FREE_CHECK_BOX_H

#include "hakmem_types.h"
#include "box/chunk_map_box.h"
#include "box/block_link_box.h"

/* Names what is wrong with a free of p that failed hak_free_check and stops.
 * Not declared noreturn, so the free fast path ends in a tail jump and needs
 * no stack frame. */
HAK_INTERNAL void hak_free_check_fail(void *p) __attribute__((cold));

/* A block start, below the part of its slab never handed out.  The page's
 * descriptor (every page of a span has its copy) holds the low 32 bits of the address of the slab's first block, a
 * multiplier and a limit such that for off = address - start (32 bits):
 * off * mul (mod 2^64) < limit exactly when off is a multiple of the block
 * size below the carved end (hakmem_free_check.c shows why).  A retired or
 * never-used page has limit 0.  Other threads read the entry while they
 * free blocks of a live slab; only the limit changes under them (a carve,
 * which only raises it, with an atomic store), and any value they see
 * covers the blocks carved before the block they free was handed out.
 * On x86-64 the compare takes the limit straight from memory (gcc does
 * not fold an atomic load into a compare: one instruction more on every
 * free). */
static inline bool hak_block_start(const void *p) {
    const hak_slab_t *d = hak_page_desc_of(p);
    const hak_span_check_t *c = &d->check;
    uint32_t off = (uint32_t)(uintptr_t)p - d->check_start;
    uint64_t scaled = (uint64_t)off * c->mul;
#if defined(__x86_64__) && defined(__GNUC__)
    __asm__ goto("cmpq %1, %0\n\tjae %l[outside]" : : "r"(scaled), "m"(c->limit) : "cc" : outside);
    return true;
outside:
    return false;
#else
    return scaled < __atomic_load_n(&c->limit, __ATOMIC_RELAXED);
#endif
}

/* The free check, inline: a block start, not marked free.  Then marks it. */
static inline bool hak_free_check(void *p) {
    uintptr_t *w = p;
    uintptr_t mark = hak_freed_mark(p);
    if (!hak_block_start(p) || w[1] == mark) return false;
    w[1] = mark;
    return true;
}

/* realloc's and malloc_usable_size's check: a live block (a block start,
 * not marked free). */
static inline bool hak_block_live(const void *p) {
    return hak_block_start(p) && ((const uintptr_t *)p)[1] != hak_freed_mark(p);
}

#endif
