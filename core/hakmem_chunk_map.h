/* The chunk map layer (hakmem_chunk_map.c, hakmem_free_check.c,
 * hakmem_hardened.c): which 4 MiB chunk is what, the mappings hakmem makes
 * and retires, its own metadata memory, and the free check's view of each
 * page.  Inline parts: box/chunk_map_box.h, box/free_check_box.h. */
#ifndef HAKMEM_CHUNK_MAP_H
#define HAKMEM_CHUNK_MAP_H

#include "hakmem_config.h"
#include "hakmem_os.h"
#include "hakmem_types.h"

extern uint8_t hak_chunk_map[HAK_MAP_ENTRIES];
HAK_INTERNAL extern bool hak_radix_in_use;
HAK_INTERNAL unsigned hak_chunk_kind_radix(const void *p);
HAK_INTERNAL void hak_chunk_map_select(bool radix);

HAK_INTERNAL bool  hak_chunk_map_set(void *base, size_t len, uint8_t kind);
/* A new range, aligned and tagged `kind`; when the OS refuses, the callback
 * set at start-up is asked to make room and it is tried again. */
HAK_INTERNAL void *hak_chunk_map_tagged(size_t len, size_t align, uint8_t kind);
/* The callback: a function of a layer above (hakmem_purge.c's
 * hak_make_room, handed down by hak_init), true if anything went back. */
HAK_INTERNAL void  hak_chunk_map_on_refusal(bool (*fn)(void));
HAK_INTERNAL void *hak_meta_alloc(size_t size);
HAK_INTERNAL void  hak_chunk_map_lock_all(void);
HAK_INTERNAL void  hak_chunk_map_unlock_all(void);

/* Retiring mappings (hakmem_chunk_map.c; hardened build: hakmem_hardened.c). */
/* Unmap a SuperSlab or large mapping for good (its chunk map entries too);
 * the hardened build keeps the range reserved and marked dead for a while. */
HAK_INTERNAL void  hak_chunk_retire_range(void *base, size_t len);
/* The range a large realloc moved away from (mremap unmapped it): the
 * hardened build reserves it again as dead; nothing in the default one. */
HAK_INTERNAL void  hak_chunk_retire_moved(void *base, size_t len);
/* Unmap the ranges the hardened build keeps dead (false: none, or not that build). */
HAK_INTERNAL bool  hak_chunk_release_dead(void);
#ifdef HAK_HARDENED
HAK_INTERNAL void hak_hardened_lock_all(void);
HAK_INTERNAL void hak_hardened_unlock_all(void);
#endif

/* The free check (hakmem_free_check.c; inline part: box/free_check_box.h). */
HAK_INTERNAL void hak_free_check_init(void);
/* Copy a slab's block range to the span checks of its pages: when the slab
 * is made or retired (carved_only false) and when it carves blocks. */
HAK_INTERNAL void hak_span_check_sync(const hak_slab_t *s, bool carved_only);

#endif /* HAKMEM_CHUNK_MAP_H */
