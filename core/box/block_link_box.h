/* block_link_box — the two words of a free block: its link and its
 * freed-mark.
 *
 * The link, default build: a plain pointer.  Hardened build (HAK_HARDENED): the
 * pointer XOR a per-process random key, so a use-after-free write or a
 * forged pointer decodes to junk; a decoded link of a slab's list must stay
 * in the block's own chunk, one of a thread cache (which links blocks of
 * several SuperSlabs) must be a free block of a SuperSlab, or the process
 * stops.  Mixing in the link's own
 * address, as glibc's safe-linking does, would add nothing here: anyone who
 * can read a free block and knows its address learns the key from its
 * freed-mark. */
#ifndef HAK_BLOCK_LINK_BOX_H
#define HAK_BLOCK_LINK_BOX_H

#include "hakmem_types.h"
#include "box/chunk_map_box.h"

/* The per-process random key (hakmem_free_check.c): encoded links and
 * freed-marks in the hardened build. */
HAK_INTERNAL extern uintptr_t hak_block_key;

/* The freed-mark (free_check_box.h): set in a free block's second word as it
 * is carved or freed, cleared as it is handed to the program.  The default
 * build mixes the address with its span check's multiplier, which the free
 * path has in hand (a value with high bits set that no live block holds
 * unless the program put it there); the hardened build with the secret key,
 * so a use-after-free write cannot forge a mark (ring pops check it). */
#ifdef HAK_HARDENED
static inline uintptr_t hak_slab_mark_key(const hak_slab_t *s) { (void)s; return hak_block_key; }
#else
static inline uintptr_t hak_slab_mark_key(const hak_slab_t *s) { return s->check.mul; }
#endif
/* (The key is the same for every block of a span, whose pages' descriptors
 * all hold its check: a loop that marks many blocks reads it once.) */
static inline uintptr_t hak_freed_mark(const void *p) {
    return hak_slab_mark_key(hak_page_desc_of(p)) ^ (uintptr_t)p;
}
static inline void hak_block_mark_free_keyed(void *p, uintptr_t key) {
    ((uintptr_t *)p)[1] = key ^ (uintptr_t)p;
}
static inline void hak_block_mark_free(void *p) { ((uintptr_t *)p)[1] = hak_freed_mark(p); }
static inline void hak_block_taken(void *p) { ((uintptr_t *)p)[1] = 0; }

#ifdef HAK_HARDENED
/* Follow a link: NULL, or a block of the same chunk (a forged link almost
 * never is). */
static inline hak_block_t *hak_link_get(const hak_block_t *b) {
    hak_block_t *n = (hak_block_t *)((uintptr_t)b->next ^ hak_block_key);
    if (hak_unlikely((((uintptr_t)n ^ (uintptr_t)b) >> HAK_CHUNK_SHIFT) != 0 && n != NULL))
        hak_fatal("free list corrupted (use after free?) at", b);
    return n;
}

/* A Tiny thread cache links blocks of several SuperSlabs: the link must be
 * a block start in a SuperSlab that holds its freed-mark (the next pop
 * reads that block anyway). */
static inline hak_block_t *hak_link_get_any(const hak_block_t *b) {
    hak_block_t *n = (hak_block_t *)((uintptr_t)b->next ^ hak_block_key);
    if (hak_unlikely(n != NULL && (((uintptr_t)n & 15) != 0 || hak_chunk_kind(n) != HAK_CHUNK_SS ||
                                   ((uintptr_t *)n)[1] != hak_freed_mark(n))))
        hak_fatal("free list corrupted (use after free?) at", b);
    return n;
}

static inline void hak_link_set(hak_block_t *b, hak_block_t *n) {
    b->next = (hak_block_t *)((uintptr_t)n ^ hak_block_key);
}
/* A ring holds blocks by pointer, with no link to decode: its pop checks
 * the mark instead, which a use-after-free write over the word destroys. */
static inline void hak_ring_block_taken(void *p) {
    if (hak_unlikely(((uintptr_t *)p)[1] != hak_freed_mark(p)))
        hak_fatal("freed block overwritten (use after free?) at", p);
    ((uintptr_t *)p)[1] = 0;
}
#else
static inline void hak_ring_block_taken(void *p) { hak_block_taken(p); }
static inline hak_block_t *hak_link_get(const hak_block_t *b) { return b->next; }
static inline hak_block_t *hak_link_get_any(const hak_block_t *b) { return b->next; }
static inline void hak_link_set(hak_block_t *b, hak_block_t *n) { b->next = n; }
#endif

#endif
