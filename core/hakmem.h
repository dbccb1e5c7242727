/* hakmem — public API.
 *
 * Programs that link -lhakmem (or preload libhakmem.so) get hakmem behind the
 * standard malloc family automatically.  The hak_* names below are the same
 * allocator under its own names, plus a few introspection calls that tests and
 * tools use.  Every function here is thread-safe. */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <malloc.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HAK_API __attribute__((visibility("default")))
#else
#define HAK_API
#endif

/* The malloc family, glibc semantics (errno = ENOMEM on failure, ...). */
HAK_API void  *hak_malloc(size_t size);
HAK_API void   hak_free(void *p);
HAK_API void  *hak_calloc(size_t n, size_t size);
HAK_API void  *hak_realloc(void *p, size_t size);
HAK_API void  *hak_reallocarray(void *p, size_t n, size_t size);
HAK_API int    hak_posix_memalign(void **out, size_t alignment, size_t size);
HAK_API void  *hak_aligned_alloc(size_t alignment, size_t size);
HAK_API void  *hak_memalign(size_t alignment, size_t size);
HAK_API void  *hak_valloc(size_t size);
HAK_API void  *hak_pvalloc(size_t size);
HAK_API size_t hak_usable_size(const void *p);

/* Give cached free memory back to the OS now; returns 1 if any was released. */
HAK_API int    hak_trim(size_t pad);

/* ---- Introspection -------------------------------------------------- */

/* The tier that owns a pointer.  HAK_TIER_NONE: hakmem did not allocate it
 * (NULL, a stack address, a glibc block, ...).  Never reads outside hakmem's
 * own memory. */
typedef enum {
    HAK_TIER_NONE  = 0,
    HAK_TIER_TINY  = 1,   /* <= 1024 B, per-thread caches of slab blocks */
    HAK_TIER_L2    = 2,   /* 1025 B .. 52 KiB, per-thread rings         */
    HAK_TIER_L25   = 3,   /* 52 KiB .. 1 MiB, per-thread rings          */
    HAK_TIER_LARGE = 4    /* > 1 MiB, direct mappings                    */
} hak_tier_t;

HAK_API hak_tier_t hak_tier_of(const void *p);

/* Size classes: hak_size_class(n) is the class serving a request of n bytes
 * (-1 when n goes to the large tier), hak_class_size(c) its block size,
 * hak_class_tier(c) its tier; classes are numbered 0..hak_class_count()-1 in
 * increasing block size. */
HAK_API int        hak_size_class(size_t size);
HAK_API size_t     hak_class_size(int cls);
HAK_API hak_tier_t hak_class_tier(int cls);
HAK_API int        hak_class_count(void);

/* A snapshot of the backend: SuperSlabs by state (HOT takes allocations,
 * DRAINING is emptying out, FREE is empty and cached), bytes mapped for
 * large blocks (and how many of them sit in the cache), thread heaps
 * (abandoned: their thread exited, waiting for a new one), and what has
 * gone back to the OS so far: bytes, and calls (madvise(MADV_DONTNEED) or
 * munmap of memory hakmem had used; memory reused within the purge delay
 * never adds to them), and the purge delay in effect. */
typedef struct {
    size_t ss_hot, ss_draining, ss_free;
    size_t large_mapped, large_cached;
    size_t heaps, heaps_abandoned;
    size_t released, decommits;
    size_t purge_delay_ms;          /* HAKMEM_PURGE_DELAY_MS in effect */
} hak_info_t;

HAK_API void hak_get_info(hak_info_t *info);

/* With no purger thread for good (HAKMEM_PURGE_THREAD=0, a seccomp filter,
 * refused starts): the most free memory kept resident meanwhile, in bytes
 * (docs/ENV_VARS.md); 0 while a purger may run. */
HAK_API size_t hak_purge_bound(void);

/* The statistics report HAKMEM_STATS=1 prints at exit: per tier and class,
 * allocations, frees, remote frees and refills (counted only with
 * HAKMEM_STATS=1), bytes in use at peak, SuperSlabs by state and memory
 * given back to the OS. */
HAK_API void hak_stats_print(FILE *out);

/* glibc's introspection calls, answered with hakmem's figures (the libc
 * names mallinfo2, mallinfo, malloc_stats and malloc_info are these;
 * docs/PROFILING.md says what each field holds). */
HAK_API struct mallinfo2 hak_mallinfo2(void);
HAK_API struct mallinfo  hak_mallinfo(void);
HAK_API void hak_malloc_stats(void);
HAK_API int  hak_malloc_info(int options, FILE *out);

/* ---- Heap profiler (HAKMEM_PROFILE=path; docs/PROFILING.md) ------------ */

/* Write the live-heap profile now: the gperftools heap-profile text to
 * `path` and the folded stacks to `path`.folded (%p in path becomes the pid;
 * NULL: the HAKMEM_PROFILE path).  0, or -1 with errno (ENOTSUP: profiling
 * is off; the error of open or write). */
HAK_API int hak_profile_dump(const char *path);

/* 1 if p is a live block the heap profiler sampled, else 0.  (Up to 1 MiB
 * a sampled block comes from one of the profiler's own heaps, an ordinary
 * block in every other respect; a large one keeps its own mapping.) */
HAK_API int hak_profile_sampled(const void *p);

#ifdef __cplusplus
}
#endif
#endif /* HAKMEM_H */
