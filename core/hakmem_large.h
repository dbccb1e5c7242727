/* The large tier (hakmem_large.c): blocks above 1 MiB (or over-aligned),
 * one mapping each, beside the SuperSlabs on the chunk map, with a cache of
 * freed ranges. */
#ifndef HAKMEM_LARGE_H
#define HAKMEM_LARGE_H

#include "hakmem_types.h"

HAK_INTERNAL void  *hak_large_alloc(size_t size, size_t align, bool zero);
/* hak_large_free, and a realloc that shrinks a block (*cached), keep the
 * freed range in the cache, stamped, if `keep` (a purger runs to give it
 * back later): true then, and the caller (with no lock held) starts the
 * purger. */
HAK_INTERNAL bool   hak_large_free(void *p, bool keep);
HAK_INTERNAL void  *hak_large_realloc(void *p, size_t size, bool *cached, bool keep);
HAK_INTERNAL size_t hak_large_usable(const void *p);
HAK_INTERNAL bool   hak_large_valid(const void *p);
HAK_INTERNAL bool   hak_large_trim_cache(void);
HAK_INTERNAL void hak_large_purge(hak_purge_scan_t *sc);
HAK_INTERNAL size_t hak_large_cached_bytes(void);
HAK_INTERNAL extern _Atomic size_t hak_large_mapped;
HAK_INTERNAL extern _Atomic size_t hak_large_live;   /* live large blocks (mallinfo2) */
HAK_INTERNAL void   hak_large_lock_all(void);
HAK_INTERNAL void   hak_large_unlock_all(void);

#endif /* HAKMEM_LARGE_H */
