/* OS services: mappings, the chunk map, metadata memory, locks, fatal errors.
 * Nothing here calls malloc. */
#include "hakmem_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

uint8_t hak_chunk_map[HAK_MAP_ENTRIES];

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

__thread bool hak_tls_fork_locked;

void hak_lock(hak_lock_t *l) {
    if (hak_unlikely(hak_tls_fork_locked)) return;      /* held for fork() */
    for (;;) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) return;
        for (int spin = 0; atomic_load_explicit(&l->held, memory_order_relaxed); spin++) {
            if (spin < 64) cpu_relax();
            else sched_yield();
        }
    }
}

bool hak_trylock(hak_lock_t *l) {
    if (hak_unlikely(hak_tls_fork_locked)) return true;
    return !atomic_load_explicit(&l->held, memory_order_relaxed) &&
           !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}

void *hak_os_map(size_t len) {
    int saved = errno;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

/* A range with nothing resident (decommitted, or never used): not counted
 * as memory given back. */
void hak_os_unmap_unused(void *p, size_t len) {
    int saved = errno;
    munmap(p, len);
    errno = saved;
}

void hak_os_unmap(void *p, size_t len) {
    hak_os_unmap_unused(p, len);
    atomic_fetch_add_explicit(&hak_released_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_decommit_count, 1, memory_order_relaxed);
}

void hak_os_decommit(void *p, size_t len) {
    int saved = errno;
    madvise(p, len, MADV_DONTNEED);
    errno = saved;
    atomic_fetch_add_explicit(&hak_released_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_decommit_count, 1, memory_order_relaxed);
}

/* len and align are multiples of the page size; align is a power of two. */
void *hak_os_map_aligned(size_t len, size_t align) {
    /* Often the kernel hands out the next address below the last mapping,
     * which is aligned when every earlier mapping was: try the exact size. */
    int saved = errno;
    char *p = hak_os_map(len);
    if (p == NULL) return NULL;
    if (((uintptr_t)p & (align - 1)) == 0) return p;
    munmap(p, len);            /* never used: not "given back" */
    if (len + align < len) return NULL;
    p = hak_os_map(len + align);
    if (p == NULL) return NULL;
    char *aligned = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    size_t head = (size_t)(aligned - p), tail = align - head;
    if (head) munmap(p, head);
    if (tail) munmap(aligned + len, tail);
    errno = saved;
    return aligned;
}

/* ---- the chunk map, in two kinds -----------------------------------------
 * flat:  hak_chunk_map, a byte per chunk, 32 MiB of .bss left untouched
 *        except where hakmem maps memory.
 * radix: RADIX_TOP pointers (64 KiB of .bss) to leaves of RADIX_LEAF bytes,
 *        each covering 16 GiB, made on demand from metadata memory. */
#define RADIX_LEAF_BITS 12
#define RADIX_LEAF (1u << RADIX_LEAF_BITS)
#define RADIX_TOP (HAK_MAP_ENTRIES >> RADIX_LEAF_BITS)

bool hak_radix_in_use;
static uint8_t *radix_top[RADIX_TOP];
static hak_lock_t radix_lock;

void hak_chunk_map_select(int kind) { hak_radix_in_use = kind != 0; }

unsigned hak_chunk_kind_radix(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_CHUNK_SHIFT;
    if (i >= HAK_MAP_ENTRIES) return HAK_CHUNK_NONE;
    uint8_t *leaf = __atomic_load_n(&radix_top[i >> RADIX_LEAF_BITS], __ATOMIC_ACQUIRE);
    if (leaf == NULL) return HAK_CHUNK_NONE;
    return __atomic_load_n(&leaf[i & (RADIX_LEAF - 1)], __ATOMIC_RELAXED);
}

/* False only when a leaf for a new tag cannot be had (out of memory). */
static bool radix_set(uintptr_t i, uint8_t kind) {
    uint8_t **slot = &radix_top[i >> RADIX_LEAF_BITS];
    uint8_t *leaf = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (leaf == NULL) {
        if (kind == HAK_CHUNK_NONE) return true;
        hak_lock(&radix_lock);
        leaf = *slot;
        if (leaf == NULL) {
            leaf = hak_meta_alloc(RADIX_LEAF);
            if (leaf != NULL) __atomic_store_n(slot, leaf, __ATOMIC_RELEASE);
        }
        hak_unlock(&radix_lock);
        if (leaf == NULL) return false;
    }
    __atomic_store_n(&leaf[i & (RADIX_LEAF - 1)], kind, __ATOMIC_RELEASE);
    return true;
}

bool hak_chunk_map_set(void *base, size_t len, uint8_t kind) {
    uintptr_t first = (uintptr_t)base >> HAK_CHUNK_SHIFT;
    uintptr_t last = ((uintptr_t)base + len - 1) >> HAK_CHUNK_SHIFT;
    for (uintptr_t i = first; i <= last && i < HAK_MAP_ENTRIES; i++) {
        if (!hak_radix_in_use) {
            __atomic_store_n(&hak_chunk_map[i], kind, __ATOMIC_RELEASE);
        } else if (!radix_set(i, kind)) {
            if (i > first) hak_chunk_map_set(base, (i - first) << HAK_CHUNK_SHIFT, HAK_CHUNK_NONE);
            return false;
        }
    }
    return true;
}

/* When the OS says no: the empty SuperSlabs of exited threads' heaps, the
 * SuperSlabs and large mappings hakmem keeps cached and the hardened build's
 * dead ranges go back, so that memory freed by the program is usable again
 * whatever tier or thread it was cached for.  True if anything went back.
 * (Takes heap_lock only by trylock: a caller may hold it.) */
static bool make_room(void) {
    bool any = hak_heap_release_abandoned();
    any |= hak_large_trim_cache();
    any |= hak_ss_trim_cache();
    any |= hak_os_release_dead();
    return any;
}

/* A new range for hakmem, tagged in the chunk map; tried once more after
 * make_room when the OS says no. */
void *hak_os_map_tagged(size_t len, size_t align, uint8_t kind) {
    void *p = hak_os_map_aligned(len, align);
    if (p == NULL) {
        if (make_room()) p = hak_os_map_aligned(len, align);
        if (p == NULL) return NULL;
    }
    if (!hak_chunk_map_set(p, len, kind)) {
        hak_os_unmap_unused(p, len);
        return NULL;
    }
    return p;
}

/* Metadata (thread heaps) comes from 1 MiB mappings carved by a bump pointer
 * and is never returned: heaps are recycled, not freed. */
static hak_lock_t meta_lock;
static char *meta_cur, *meta_end;

void *hak_meta_alloc(size_t size) {
    size = (size + 63) & ~(size_t)63;
    hak_lock(&meta_lock);
    if ((size_t)(meta_end - meta_cur) < size) {
        size_t len = size > (1u << 20) ? (size + 4095) & ~(size_t)4095 : (1u << 20);
        char *p = hak_os_map(len);
        if (p == NULL && make_room()) p = hak_os_map(len);
        if (p == NULL) { hak_unlock(&meta_lock); return NULL; }
        meta_cur = p;
        meta_end = p + len;
    }
    void *r = meta_cur;
    meta_cur += size;
    hak_unlock(&meta_lock);
    return r;   /* fresh mapping: already zero */
}

/* fork(): held across it, so the child never inherits them half-taken. */
void hak_os_lock_all(void) {
    hak_lock(&radix_lock);
    hak_lock(&meta_lock);
}

void hak_os_unlock_all(void) {
    hak_unlock(&meta_lock);
    hak_unlock(&radix_lock);
}

void hak_fatal(const char *what, const void *p) {
    char buf[160];
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    const char *pre = "hakmem: ";
    while (*pre && n < sizeof buf - 24) buf[n++] = *pre++;
    while (*what && n < sizeof buf - 24) buf[n++] = *what++;
    buf[n++] = ' '; buf[n++] = '0'; buf[n++] = 'x';
    uintptr_t v = (uintptr_t)p;
    for (int sh = 60; sh >= 0; sh -= 4) buf[n++] = hex[(v >> sh) & 15];
    buf[n++] = '\n';
    ssize_t w = write(2, buf, n);
    (void)w;
    abort();
}
