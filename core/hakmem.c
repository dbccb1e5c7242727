/* The malloc API: routes each call to its tier, and interposes the libc
 * names.  The fast paths (Tiny pop/push, ring pop/push) are inlined here
 * from core/box/; when one cannot finish it says so, and the slow paths
 * here decide what comes next (malloc_slow, malloc_first, free_slab_block,
 * free_cold): they
 * start hakmem, make the thread's heap, sample, answer trim requests, run
 * housekeeping and start the purger, which the layers below never call up
 * to do (docs/ARCHITECTURE.md, section 0). */
#include "hakmem_chunk_map.h"
#include "hakmem_heap.h"
#include "hakmem_init.h"
#include "hakmem_large.h"
#include "hakmem_pool.h"
#include "hakmem_profile.h"
#include "hakmem_purge.h"
#include "hakmem_stats.h"
#include "hakmem_superslab.h"
#include "hakmem_tiny.h"
#include "box/chunk_map_box.h"
#include "box/free_check_box.h"
#include "box/pool_ring_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"
#include "hakmem_remote.h"

#include <errno.h>
#include <string.h>

/* glibc's own allocator, for blocks hakmem did not allocate. */
extern void *__libc_malloc(size_t);
extern void  __libc_free(void *);
extern void *__libc_realloc(void *, size_t);

/* ---- allocation ------------------------------------------------------------- */

/* Every large block, whatever the entry point.  The heap profiler samples
 * it here: a large block's free is a slow path already, so it needs no
 * memory of its own, only a record. */
HAK_ALLOC_PATH static void *large_alloc(size_t size, size_t align, bool zero) {
    /* No object is larger than PTRDIFF_MAX (a difference of two pointers
     * into it must fit).  hak_large_alloc checks the exact bound; this
     * coarser check stays so that such a request fails before it starts
     * hakmem, makes the thread a heap or moves the profiler's countdown. */
    if (size > (size_t)PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    hak_ensure_init();       /* the first mapping may be this one */
    bool sample = hak_unlikely(hak_profile_on) && hak_profile_large_due(size);
    void *p = hak_large_alloc(size, align, zero);
    if (p == NULL) return NULL;
    hak_purge_kick();        /* for its free, which may not start the purger */
    atomic_fetch_add_explicit(&hak_large_live, 1, memory_order_relaxed);
    if (hak_opt.stats) hak_stats_alloc(HAK_NUM_CLASSES, hak_large_usable(p));
    if (sample) hak_profile_large_sampled(p, size);
    return p;
}

HAK_ALLOC_PATH static HAK_NOINLINE void *alloc_large(size_t size) {
    return large_alloc(size, 0, false);
}

static void *malloc_slow(size_t size, unsigned cls, hak_heap_t *h);

/* What the layers below stamped for the purger starts it, now that no
 * lock is held; a malloc also starts it for an earlier free that asked. */
static inline void purge_kick_due(hak_heap_t *h) {
    if (hak_heap_kick_due(h) || atomic_load_explicit(&hak_purge_wanted, memory_order_relaxed))
        hak_purge_kick();
}

/* The same from free, which never starts a thread (hak_purge_request):
 * while no purger runs, free's slow paths give back what is due. */
static inline void purge_request_due(hak_heap_t *h) {
    if (hak_heap_kick_due(h)) hak_purge_request();
    hak_purge_inline_check();
}

/* The empty heap's slow path: a thread's first allocation, or with
 * HAKMEM_STATS (whose fast paths keep seeing the empty heap) every one.
 * Starts hakmem if it has not started, and makes or adopts the thread's
 * heap. */
HAK_ALLOC_PATH static HAK_NOINLINE void *malloc_first(size_t size, unsigned cls) {
    hak_ensure_init();
    if (size <= HAK_L2_MAX) {                /* a young thread: the nursery */
        bool kick;
        void *q = hak_nursery_alloc(size, &kick);
        if (kick) hak_purge_kick();
        if (q != NULL) return q;
    }
    hak_heap_t *h = hak_heap_for_thread();
    if (h == NULL) return hak_alloc_without_heap(size, cls);
    void *p = cls < HAK_L2_FIRST ? hak_tiny_alloc_class(h, cls, size) : hak_pool_alloc(h, cls, size);
    if (p == NULL) p = malloc_slow(size, cls, h);
    if (hak_opt.stats && p != NULL) hak_stats_alloc(cls, hak_class_block_size[cls]);
    purge_kick_due(h);      /* an adopted heap collects and retires slabs */
    return p;
}

/* Every request of at most 1 MiB the fast paths could not serve, in this
 * order: the empty heap; the profiler's countdown (run out on the fast
 * path, or due now: the fast path counts only when it has a block); a
 * malloc_trim of another thread asking this one to flush (trim_request);
 * then the tier's slow path, and after it, every 256th time, housekeeping
 * (hakmem_purge.c), every 16th the look for idle rings (hakmem_pool.c), and
 * the purger if the layers below stamped enough.
 * size: what the profiler counts; cls: the class that serves the request
 * (a twin only for an alignment call: the request's size names the other). */
HAK_ALLOC_PATH static HAK_NOINLINE void *malloc_slow(size_t size, unsigned cls, hak_heap_t *h) {
    if (hak_tls_remote.active != 0 && hak_remote_flush()) hak_purge_request();
    if (h == &hak_empty_heap) return malloc_first(size, cls);
    if (h->sample_left < 0 || (h->sample_left -= (int64_t)size) < 0) {
        void *q = hak_profile_alloc(size, cls);
        purge_kick_due(h);       /* a free may have asked for the purger */
        return q;
    }
    if (hak_unlikely(atomic_load_explicit(&h->trim_request, memory_order_relaxed)))
        hak_heap_trim_self(h);
    int saved = errno;
    void *p = cls < HAK_L2_FIRST ? hak_tiny_alloc_slow(size, h) : hak_pool_alloc_slow(cls, h);
    if (hak_unlikely(p == NULL) && hak_profile_on) {
        /* Out of memory, with the profiler on: the blocks it sampled
         * live in heaps of its own, whose free pages no other request
         * takes.  This one is sampled, so it may take them (a sampled
         * request that finds none there is served as usual: both ways).
         * It weighs in the profile as any sample, a rate's worth of bytes:
         * the profile is that much off where memory ran out. */
        h->sample_left = -1;
        p = hak_profile_alloc(size, cls);
        if (p != NULL) errno = saved;      /* a success leaves errno alone */
    }
    hak_heap_shrink_check(h);
    if (hak_unlikely((++h->slow_count & 15) == 0)) {
        /* a thread whose Tiny caches adapted takes a slow path every few
         * hundred mallocs or fewer: idle rings are looked for every 16th */
        if ((h->slow_count & 255) == 0) hak_housekeeping(h);
        hak_pool_flush_idle(h);
    }
    purge_kick_due(h);
    hak_purge_inline_check();
    return p;
}

/* The Tiny fast paths' miss: the class is looked up again here (passed
 * along, it cost every malloc a register copy). */
HAK_ALLOC_PATH static HAK_NOINLINE void *tiny_slow(size_t size, hak_heap_t *h) {
    return malloc_slow(size, hak_tiny_class(size), h);
}

/* The large tier stays out of line, so the ring pop needs no stack frame. */
HAK_ALLOC_PATH static HAK_NOINLINE HAK_ENTRY_ALIGN void *alloc_mid_or_large(size_t size, hak_heap_t *h) {
    if (hak_likely(size <= HAK_L25_MAX)) {
        unsigned cls = hak_mid_class(size);
        void *p = hak_pool_alloc(h, cls, size);
        if (hak_likely(p != NULL)) return p;
        return malloc_slow(size, cls, h);
    }
    return alloc_large(size);
}

HAK_ALLOC_PATH HAK_ENTRY_ALIGN void *hak_malloc(size_t size) {
    hak_heap_t *h = hak_tls_fast_heap;
    if (hak_likely(size <= HAK_TINY_MAX)) {
        void *p = hak_tiny_alloc(h, size);
        if (hak_likely(p != NULL)) return p;
        return tiny_slow(size, h);
    }
    return alloc_mid_or_large(size, h);
}

/* The first n bytes of p (n <= 128, a block of at least 16 B: every
 * class is) zeroed by overlapping 16-byte stores, without a call: a small
 * calloc's memset through the PLT cost as much as its malloc. */
typedef unsigned char hak_v16 __attribute__((vector_size(16), aligned(1), may_alias));
static inline void zero16(unsigned char *c) { *(hak_v16 *)c = (hak_v16){ 0 }; }
static inline void zero_small(void *p, size_t n) {
    unsigned char *c = p;
    if (n < 16) n = 16;
    zero16(c);
    zero16(c + n - 16);
    if (n <= 32) return;
    zero16(c + 16);
    zero16(c + n - 32);
    if (n <= 64) return;
    zero16(c + 32);
    zero16(c + 48);
    zero16(c + n - 64);
    zero16(c + n - 48);
}

HAK_ALLOC_PATH void *hak_calloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (hak_likely(total <= 128)) {           /* malloc's Tiny fast path, inline */
        hak_heap_t *h = hak_tls_fast_heap;
        void *p = hak_tiny_alloc(h, total);
        if (hak_unlikely(p == NULL) && (p = tiny_slow(total, h)) == NULL) return NULL;
        zero_small(p, total);
        return p;
    }
    if (total > HAK_L25_MAX) return large_alloc(total, 0, true);
    void *p = hak_malloc(total);
    if (p != NULL) memset(p, 0, total);
    return p;
}

/* An aligned request up to 1 MiB takes the first class that holds it
 * whose blocks are all aligned (a power-of-two class at the latest; for an
 * alignment above 64 KiB an aligned twin: hak_aligned_class); an
 * alignment of 16 or less (0 from memalign included) is malloc's, every
 * block being 16-aligned.  The fast path is malloc's pop for that class,
 * and leaves errno alone (NULL: the cache or ring is empty, the profiler's
 * countdown ran out, or the request is for the large tier).  align: a power
 * of two.  The profiler counts what malloc would: the request at an
 * alignment malloc gives anyway, else the class's block size. */
static inline HAK_ALLOC_PATH void *aligned_pop(size_t align, size_t size) {
    size_t need = size > align ? size : align;
    if (hak_unlikely(need > HAK_L25_MAX)) return NULL;
    unsigned cls = hak_aligned_class(need, align);
    hak_heap_t *h = hak_tls_fast_heap;
    size_t counted = align <= 16 ? size : hak_class_block_size[cls];
    void *p = cls < HAK_L2_FIRST ? hak_tiny_alloc_class(h, cls, counted)
                                 : hak_pool_alloc(h, cls, counted);
    hak_assert(p == NULL || ((uintptr_t)p & (align - 1)) == 0);
    return p;
}

/* The rest: malloc of the request, the class's slow path for its block
 * size (refills, sampling, ENOMEM), or a large block. */
HAK_ALLOC_PATH static HAK_NOINLINE void *aligned_slow(size_t align, size_t size) {
    if (align <= 16) return hak_malloc(size);
    size_t need = size > align ? size : align;
    if (need <= HAK_L25_MAX) {
        unsigned cls = hak_aligned_class(need, align);
        void *p = malloc_slow(hak_class_block_size[cls], cls, hak_tls_fast_heap);
        hak_assert(p == NULL || ((uintptr_t)p & (align - 1)) == 0);
        return p;
    }
    return large_alloc(size, align, false);
}

HAK_ALLOC_PATH static void *alloc_aligned(size_t align, size_t size) {
    if (align <= 16) return hak_malloc(size);
    void *p = aligned_pop(align, size);
    return hak_likely(p != NULL) ? p : aligned_slow(align, size);
}

/* posix_memalign leaves errno alone: saved only on the slow path, where it
 * may change, so the pop needs no stack frame. */
HAK_ALLOC_PATH static HAK_NOINLINE int posix_memalign_slow(void **out, size_t align, size_t size) {
    int saved = errno;
    void *p = aligned_slow(align, size);
    if (p == NULL) {
        errno = saved;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

HAK_ALLOC_PATH int hak_posix_memalign(void **out, size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = aligned_pop(align, size);
    if (hak_unlikely(p == NULL)) return posix_memalign_slow(out, align, size);
    *out = p;
    return 0;
}

HAK_ALLOC_PATH void *hak_aligned_alloc(size_t align, size_t size) {
    if (align == 0 || (align & (align - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

HAK_ALLOC_PATH void *hak_memalign(size_t align, size_t size) {
    /* glibc: a non-power-of-two alignment is rounded up. */
    if (align & (align - 1)) {
        if (align > ((size_t)1 << 62)) {
            errno = EINVAL;
            return NULL;
        }
        align = (size_t)1 << (64 - __builtin_clzll(align));
    }
    return alloc_aligned(align, size);
}

HAK_ALLOC_PATH void *hak_valloc(size_t size) { return alloc_aligned(hak_os_page_size(), size); }

HAK_ALLOC_PATH void *hak_pvalloc(size_t size) {
    size_t ps = hak_os_page_size(), rounded;
    if (__builtin_add_overflow(size, ps - 1, &rounded)) {
        errno = ENOMEM;
        return NULL;
    }
    rounded = size == 0 ? ps : rounded & ~(ps - 1);
    return alloc_aligned(ps, rounded);
}

/* ---- free ----------------------------------------------------------------------- */
/* The slow paths of the owner's free: a full Tiny cache (its flush may
 * have retired slabs: the shrink check), a full ring.  What they stamp
 * starts the purger here. */
static HAK_NOINLINE void free_cache_full(hak_heap_t *h, const hak_slab_t *s) {
    hak_tiny_cache_full(h, s->cls);
    hak_heap_shrink_check(h);
    purge_request_due(h);
}

static HAK_NOINLINE void free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p) {
    hak_pool_free_ring_full(h, r, p);
    purge_request_due(h);
}

/* A block of a SuperSlab (it passed the free check) that the fast path did
 * not take: another thread's block, or any block while the fast path sees
 * the empty heap (the thread has no heap, or HAKMEM_STATS counts here).
 * Apart from free_cold's other cases, so that a remote free pays for no
 * registers they need. */
static HAK_NOINLINE void free_slab_block(void *p) {
    hak_slab_t *s = hak_slab_of(p);     /* a live slab: p passed the check */
    hak_heap_t *h = hak_tls_own_heap;
    if (s->owner == &hak_l25_heap && h != NULL) {
        /* An L2.5 block (its slabs are shared: hakmem_l25_pool.c): into
         * the freeing thread's own ring, whichever thread took it; a full
         * ring goes back to the shared slabs half at a time, one lock for
         * the lot (a consumer of another thread's blocks pays that rather
         * than a CAS per block). */
        if (hak_opt.stats) hak_stats_free(s->cls, hak_class_block_size[s->cls], false);
        hak_ring_t *r = hak_pool_ring(h, s->cls);
        if (!hak_pool_free(r, p)) free_ring_full(h, r, p);
        return;
    }
    if (s->owner == &hak_nursery_heap && h == NULL) {
        /* a young thread: back where it came from */
        if (hak_nursery_free(s, p)) hak_purge_request();
        return;
    }
    if (s->owner != h) {
        bool kick;
        hak_heap_t *taken = hak_heap_take_over(s->owner, &kick);
        if (kick) hak_purge_request();
        if (taken != NULL) h = taken;       /* the block is the thread's own now */
    }
    if (hak_opt.stats) hak_stats_free(s->cls, hak_class_block_size[s->cls], s->owner != h);
    if (s->owner != h) {
        /* The shared L2.5 heap has no thread to collect: the purger does.
         * (Read before the push: once p is on the list, the owner may
         * collect it and retire the slab.) */
        bool shared = hak_heap_is_shared(s->owner);
        if (hak_remote_free(s, p, !shared && !hak_opt.stats) || shared) hak_purge_request();
        return;
    }
    if (s->tier == HAK_TIER_TINY) {
        if (hak_tiny_free(h, s, p)) free_cache_full(h, s);
    } else if (!hak_pool_free(s->ring, p)) {
        free_ring_full(h, s->ring, p);
    }
}

/* Another thread's block: into this thread's batch of remote frees when
 * it is of the batch's slab (a consumer freeing a producer's blocks in
 * turn), else free_slab_block. */
static HAK_NOINLINE void free_other(void *p) {
    if (!hak_remote_batch_add(hak_slab_of(p), p)) free_slab_block(p);
}

/* Large blocks, blocks the heap profiler sampled, foreign pointers, junk,
 * and SuperSlab blocks the flat map does not know (the radix map). */
static HAK_NOINLINE void free_cold(void *p, unsigned kind) {
    if (p == NULL) return;
    if (kind == HAK_CHUNK_NONE && hak_radix_in_use) {
        kind = hak_chunk_kind_radix(p);
        if (kind == HAK_CHUNK_SS) {
            if (!hak_free_check(p)) hak_free_check_fail(p);    /* stops */
            else free_slab_block(p);
            return;
        }
    }
    if (kind == HAK_CHUNK_DEAD) hak_fatal("free(): block already given back to the OS", p);
    if (kind == HAK_CHUNK_PROF) {
        if (!hak_free_check(p)) {
            hak_free_check_fail(p);
            return;
        }
        if (hak_opt.stats) {
            unsigned cls = hak_slab_of(p)->cls;
            hak_stats_free(cls, hak_class_block_size[cls], false);
        }
        hak_profile_free(p);
        return;
    }
    if (kind == HAK_CHUNK_LARGE) {
        if (hak_opt.stats && hak_large_valid(p))
            hak_stats_free(HAK_NUM_CLASSES, hak_large_usable(p), false);
        if (hak_unlikely(hak_profile_on)) hak_profile_large_free(p);
        /* kept for reuse only where something will give it back */
        bool cached = hak_large_free(p, hak_purge_keeps_freed());   /* stops on an invalid pointer */
        atomic_fetch_sub_explicit(&hak_large_live, 1, memory_order_relaxed);
        if (cached) hak_purge_request();
        hak_purge_inline_check();
        return;
    }
    __libc_free(p);
}

HAK_ENTRY_ALIGN void hak_free(void *p) {
    unsigned kind = hak_chunk_kind_flat(p);
    if (hak_likely(kind == HAK_CHUNK_SS)) {
        if (hak_unlikely(!hak_free_check(p))) {
            hak_free_check_fail(p);        /* stops */
            return;
        }
        hak_slab_t *s = hak_page_desc_of(p);
        hak_heap_t *h = hak_tls_fast_heap;
        if (hak_likely(s->tiny_owner == h)) {
            if (hak_unlikely(hak_tiny_free(h, s, p))) free_cache_full(h, s);
            return;
        }
        if (hak_likely(s->owner == h)) {
            if (hak_unlikely(!hak_pool_free(s->ring, p))) free_ring_full(h, s->ring, p);
            return;
        }
        /* an L2.5 block goes on the freeing thread's ring (free_slab_block
         * when that is full, or the empty heap's) */
        if (s->owner == &hak_l25_heap && hak_pool_free(h->ring[s->cls], p)) return;
        free_other(p);
        return;
    }
    free_cold(p, kind);
}

/* ---- C++ operator new and delete --------------------------------------------------- */
/* libstdc++'s operator new is a loop around malloc that runs the program's
 * new_handler and throws std::bad_alloc: two calls and a test per new.
 * hakmem defines the two operators every other form goes through
 * (Itanium ABI names, at the end of this file): new is malloc's fast path,
 * delete is free.  Only these two: libstdc++'s array, sized and nothrow
 * forms call them, so a program that replaces just these two still gets
 * every form through its own (the standard requires it); the aligned
 * forms stay libstdc++'s (aligned_alloc and free).  When malloc finds no
 * memory, new runs libstdc++'s loop itself, through the C++ library's
 * get_new_handler and __throw_bad_alloc (weak: a C program has neither). */
extern void (*_ZSt15get_new_handlerv(void))(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* What the Tiny fast path did not serve: malloc's slow path or the mid
 * and large tiers, then, with no memory, libstdc++'s loop. */
HAK_ALLOC_PATH static HAK_NOINLINE void *cxx_new_slow(size_t size, hak_heap_t *h) {
    void *p = size <= HAK_TINY_MAX ? tiny_slow(size, h) : alloc_mid_or_large(size, h);
    while (p == NULL) {
        void (*handler)(void) = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
        if (handler == NULL) {
            if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
            hak_fatal("out of memory in operator new, with no C++ library to throw std::bad_alloc; size",
                      (const void *)size);
        }
        handler();
        p = hak_malloc(size);
    }
    return p;
}

/* malloc's Tiny fast path, with no frame: a failed allocation's NULL test
 * is the slow path's. */
HAK_ALLOC_PATH void *hak_cxx_new(size_t size) {
    hak_heap_t *h = hak_tls_fast_heap;
    if (hak_likely(size <= HAK_TINY_MAX)) {
        void *p = hak_tiny_alloc(h, size);
        if (hak_likely(p != NULL)) return p;
    }
    return cxx_new_slow(size, h);
}

/* ---- sizes and realloc ------------------------------------------------------------ */
static size_t (*libc_usable_size)(void *);

size_t hak_usable_size(const void *p) {
    unsigned kind = hak_chunk_kind(p);
    if (kind == HAK_CHUNK_SS || kind == HAK_CHUNK_PROF)
        return hak_block_start(p) ? hak_class_block_size[hak_slab_of(p)->cls] : 0;
    if (kind == HAK_CHUNK_LARGE) return hak_large_valid(p) ? hak_large_usable(p) : 0;
    if (kind == HAK_CHUNK_DEAD) hak_fatal("malloc_usable_size(): block already given back to the OS", p);
    if (p == NULL) return 0;
    size_t (*fn)(void *) = __atomic_load_n(&libc_usable_size, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        *(void **)&fn = hak_os_next_symbol("malloc_usable_size");
        __atomic_store_n(&libc_usable_size, fn, __ATOMIC_RELEASE);
    }
    return fn ? fn((void *)p) : 0;
}

HAK_ALLOC_PATH void *hak_realloc(void *p, size_t size) {
    if (p == NULL) return hak_malloc(size);
    unsigned kind = hak_chunk_kind(p);
    size_t old;
    if (hak_likely(kind == HAK_CHUNK_SS || kind == HAK_CHUNK_PROF)) {
        /* A block of a slab: its size from its page's descriptor (every
         * page of a span holds the class), one lookup for the check and the
         * size, as a buffer appended to in small steps mostly stays put. */
        if (!hak_block_live(p)) hak_fatal("realloc(): not a live block (freed, or not a block start)", p);
        old = hak_class_block_size[hak_page_desc_of(p)->cls];
    } else {
        if (kind == HAK_CHUNK_NONE) return __libc_realloc(p, size);
        if (kind == HAK_CHUNK_DEAD) hak_fatal("realloc(): block already given back to the OS", p);
        old = hak_usable_size(p);
        if (old == 0) hak_fatal("realloc(): invalid pointer", p);
    }
    if (size == 0) {                 /* glibc: realloc(p, 0) frees p */
        hak_free(p);
        return NULL;
    }
    /* Too big (> PTRDIFF_MAX): hak_large_realloc or large_alloc says ENOMEM. */
    if (kind == HAK_CHUNK_LARGE && size > HAK_L25_MAX) {
        bool cached;
        void *q = hak_large_realloc(p, size, &cached, hak_purge_keeps_freed());
        if (cached) hak_purge_request();
        if (hak_opt.stats && q != NULL) hak_stats_resize((int64_t)hak_large_usable(q) - (int64_t)old);
        if (hak_unlikely(hak_profile_on) && q != NULL) hak_profile_moved(p, q, size);
        return q;
    }
    /* Keep the block when the new size still fits and wastes < half of it. */
    if (size <= old && size > old / 2) {
        if (hak_unlikely(hak_profile_on) && (kind == HAK_CHUNK_LARGE || kind == HAK_CHUNK_PROF))
            hak_profile_resized(p, size);     /* a sampled block keeps its record */
        return p;
    }
    /* A block that outgrows its class is a buffer being appended to, which
     * will grow again: the new one is a quarter bigger than the old at least
     * (tcmalloc's rule), so a run of small steps copies it about twice per
     * doubling rather than at every class (four per doubling).  From the
     * L2.5 pool's classes on it is twice the old: every block such a buffer
     * leaves behind is 64 KiB or more that only its own class can reuse, and
     * at a quarter more a buffer growing to 1 MiB left nine of them (memory
     * as well as copies: bench_append).  Not past the pools: a large block
     * grows by remapping, with no copy. */
    size_t want = size;
    if (size > old && size <= HAK_L25_MAX) {
        size_t room = old >= hak_class_block_size[HAK_L25_FIRST] ? 2 * old : old + old / 4;
        if (room > HAK_L25_MAX) room = HAK_L25_MAX;
        if (room > size) want = room;
    }
    void *q = hak_malloc(want);
    if (q == NULL) return NULL;
    memcpy(q, p, size < old ? size : old);
    hak_free(p);
    return q;
}

HAK_ALLOC_PATH void *hak_reallocarray(void *p, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return hak_realloc(p, total);
}

/* ---- introspection and maintenance ------------------------------------------------- */
hak_tier_t hak_tier_of(const void *p) {
    unsigned kind = hak_chunk_kind(p);
    if (kind == HAK_CHUNK_SS || kind == HAK_CHUNK_PROF) return (hak_tier_t)hak_slab_of(p)->tier;
    if (kind == HAK_CHUNK_LARGE && hak_large_valid(p)) return HAK_TIER_LARGE;
    return HAK_TIER_NONE;
}

size_t hak_purge_bound(void) { return hak_purge_no_thread() ? hak_purge_idle_bound() : 0; }

int hak_profile_sampled(const void *p) {
    unsigned kind = hak_chunk_kind(p);
    if (kind == HAK_CHUNK_PROF) return hak_block_live(p);
    return kind == HAK_CHUNK_LARGE && hak_profile_on && hak_large_valid(p) && hak_profile_has_record(p);
}

/* glibc's pad (memory to keep at the top of the heap) has no meaning here:
 * everything free goes back, from every thread's heap (hakmem_purge.c). */
int hak_trim(size_t pad) {
    (void)pad;
    if (hak_unlikely(hak_profile_on)) hak_profile_trim();   /* first: its empty SuperSlabs go below */
    return hak_purge_everything() ? 1 : 0;
}

/* ---- the libc names ------------------------------------------------------------------
 * HAK_NO_INTERPOSE builds hakmem as a plain library (only the hak_* names),
 * e.g. under a sanitizer that brings its own malloc. */
#ifndef HAK_NO_INTERPOSE
/* glibc's introspection calls, mallinfo2 and the rest, are named where they
 * live (hakmem_mallinfo.c).  A static link that takes malloc from
 * libhakmem.a takes that file as well through this reference: else a
 * library linked after it would find glibc's mallinfo2, which describes
 * an arena that holds nothing. */
static struct mallinfo2 (*const keep_introspection)(void) __attribute__((used)) = hak_mallinfo2;
void  *malloc(size_t size) HAK_ALIAS(hak_malloc);
void   free(void *p) HAK_ALIAS(hak_free);
void  *calloc(size_t n, size_t size) HAK_ALIAS(hak_calloc);
void  *realloc(void *p, size_t size) HAK_ALIAS(hak_realloc);
void  *reallocarray(void *p, size_t n, size_t size) HAK_ALIAS(hak_reallocarray);
int    posix_memalign(void **out, size_t align, size_t size) HAK_ALIAS(hak_posix_memalign);
void  *aligned_alloc(size_t align, size_t size) HAK_ALIAS(hak_aligned_alloc);
void  *memalign(size_t align, size_t size) HAK_ALIAS(hak_memalign);
void  *valloc(size_t size) HAK_ALIAS(hak_valloc);
void  *pvalloc(size_t size) HAK_ALIAS(hak_pvalloc);
size_t malloc_usable_size(void *p) HAK_ALIAS(hak_usable_size);
int    malloc_trim(size_t pad) HAK_ALIAS(hak_trim);

/* C++ (see "C++ operator new and delete" above): operator new(size_t) and
 * operator delete(void *).  Weak: a program linked with -lhakmem that
 * defines its own keeps it. */
#define HAK_CXX_ALIAS(target) __attribute__((alias(#target), visibility("default"), used, weak))
void  *_Znwm(size_t size) HAK_CXX_ALIAS(hak_cxx_new);
void   _ZdlPv(void *p) HAK_CXX_ALIAS(hak_free);
#endif /* HAK_NO_INTERPOSE */
