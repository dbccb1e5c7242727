/* The heap profiler's API (core/profile/, its README; fast-path part:
 * box/profile_box.h).  hak_profile_on: sampling is on (HAKMEM_PROFILE or
 * HAKMEM_PROFILE_LEAKS), set once at start-up. */
#ifndef HAKMEM_PROFILE_H
#define HAKMEM_PROFILE_H

#include "hakmem_config.h"

HAK_INTERNAL extern bool hak_profile_on;
HAK_INTERNAL void  hak_profile_init(void);
/* From the library's constructor, once hakmem is set up: what start-up
 * does that may allocate (the unwinder) or must not wait (the signal). */
HAK_INTERNAL void  hak_profile_start(void);
HAK_INTERNAL void *hak_profile_alloc(size_t size, unsigned cls);
HAK_INTERNAL bool  hak_profile_large_due(size_t size);
HAK_INTERNAL void  hak_profile_large_sampled(void *p, size_t size);
HAK_INTERNAL void  hak_profile_large_free(void *p);
HAK_INTERNAL void  hak_profile_moved(void *from, void *to, size_t size);
HAK_INTERNAL void  hak_profile_free(void *p);
HAK_INTERNAL void  hak_profile_resized(void *p, size_t size);
HAK_INTERNAL void  hak_profile_trim(void);
HAK_INTERNAL bool  hak_profile_has_record(const void *p);
HAK_INTERNAL void  hak_profile_fork_prepare(void);
HAK_INTERNAL void  hak_profile_fork_parent(void);
HAK_INTERNAL void  hak_profile_lock_all(void);
HAK_INTERNAL void  hak_profile_unlock_all(void);
HAK_INTERNAL void  hak_profile_fork_child(void);

#endif /* HAKMEM_PROFILE_H */
