/* SuperSlabs (hakmem_superslab.c): spans of 64 KiB pages in a heap's 4 MiB
 * SuperSlabs, their HOT / DRAINING / FREE states, the cache of empty ones,
 * and their free pages given back by time. */
#ifndef HAKMEM_SUPERSLAB_H
#define HAKMEM_SUPERSLAB_H

#include "hakmem_types.h"

/* A span of npages pages (aligned to align_pages; page0: it may take page
 * 0) in one of h's SuperSlabs, or in a SuperSlab it maps when none has room
 * and may_grow; NULL when it may not grow, or no SuperSlab could be had. */
HAK_INTERNAL hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages,
                                          bool page0, bool may_grow, bool *revived);
HAK_INTERNAL void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_ss_purge_pages(hak_heap_t *h, hak_superslab_t *ss, hak_purge_scan_t *sc);
HAK_INTERNAL void hak_ss_purge_cache(hak_purge_scan_t *sc);
HAK_INTERNAL void hak_ss_release_if_empty(hak_heap_t *h, hak_superslab_t *ss);
HAK_INTERNAL bool hak_ss_trim_cache(void);
HAK_INTERNAL extern _Atomic size_t hak_ss_count[3];
HAK_INTERNAL void hak_ss_lock_all(void);
HAK_INTERNAL void hak_ss_unlock_all(void);

#endif /* HAKMEM_SUPERSLAB_H */
