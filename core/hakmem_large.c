/* Large tier (> 1 MiB, or any over-aligned request that no class serves):
 * one mapping per block, a whole number of 4 MiB chunks aligned to 4 MiB
 * (marked HAK_CHUNK_LARGE in the chunk map, so no other memory shares its
 * chunks), with a 64-byte header right before the user pointer.  Freed
 * mappings wait in a small cache; realloc grows with mremap. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define LARGE_MAGIC 0x68616b4c41524745ULL

typedef struct {
    uint64_t magic;        /* LARGE_MAGIC ^ user pointer: a live block     */
    char    *base;         /* the mapping                                  */
    size_t   len;
    char     pad[HAK_LARGE_HDR - 24];
} large_hdr_t;

_Static_assert(sizeof(large_hdr_t) == HAK_LARGE_HDR, "large header size");

static inline large_hdr_t *hdr_of(const void *p) {
    return (large_hdr_t *)((char *)p - HAK_LARGE_HDR);
}

/* The block `off` bytes into the mapping [base, base + len), its header set. */
static char *block_at(char *base, size_t len, size_t off) {
    char *p = base + off;
    large_hdr_t *h = hdr_of(p);
    h->magic = LARGE_MAGIC ^ (uintptr_t)p;
    h->base = base;
    h->len = len;
    return p;
}

/* ---- the cache of freed mappings ------------------------------------------ */
#define LARGE_CACHE_SLOTS 8
#define LARGE_CACHE_BYTES ((size_t)64 << 20)
#define LARGE_CACHE_MAX_ENTRY ((size_t)32 << 20)

static hak_lock_t cache_lock;
static struct { char *base; size_t len; } cache[LARGE_CACHE_SLOTS];
static unsigned cache_count;
static size_t cache_bytes;

/* Smallest cached mapping of at least len bytes and at most twice that. */
static char *cache_take(size_t len, size_t *got_len) {
    if (__atomic_load_n(&cache_count, __ATOMIC_RELAXED) == 0) return NULL;
    char *base = NULL;
    hak_lock(&cache_lock);
    int best = -1;
    for (unsigned i = 0; i < cache_count; i++)
        if (cache[i].len >= len && cache[i].len / 2 <= len &&
            (best < 0 || cache[i].len < cache[best].len))
            best = (int)i;
    if (best >= 0) {
        base = cache[best].base;
        *got_len = cache[best].len;
        cache_bytes -= cache[best].len;
        __atomic_store_n(&cache_count, cache_count - 1, __ATOMIC_RELAXED);
        cache[best] = cache[cache_count];
    }
    hak_unlock(&cache_lock);
    return base;
}

static bool cache_put(char *base, size_t len) {
    if (len > LARGE_CACHE_MAX_ENTRY) return false;
    bool ok = false;
    hak_lock(&cache_lock);
    if (cache_count < LARGE_CACHE_SLOTS && cache_bytes + len <= LARGE_CACHE_BYTES) {
        cache[cache_count].base = base;
        cache[cache_count].len = len;
        __atomic_store_n(&cache_count, cache_count + 1, __ATOMIC_RELAXED);
        cache_bytes += len;
        ok = true;
    }
    hak_unlock(&cache_lock);
    return ok;
}

/* Bytes mapped for large blocks, live or cached, for hak_get_info. */
_Atomic size_t hak_large_mapped;

static void release(char *base, size_t len) {
    hak_os_retire_range(base, len);
    atomic_fetch_sub_explicit(&hak_large_mapped, len, memory_order_relaxed);
}

size_t hak_large_cached_bytes(void) { return __atomic_load_n(&cache_bytes, __ATOMIC_RELAXED); }

bool hak_large_trim_cache(void) {
    hak_lock(&cache_lock);
    bool any = cache_count != 0;
    while (cache_count) {
        __atomic_store_n(&cache_count, cache_count - 1, __ATOMIC_RELAXED);
        release(cache[cache_count].base, cache[cache_count].len);
    }
    cache_bytes = 0;
    hak_unlock(&cache_lock);
    return any;
}

/* The cache is bounded by count and bytes, not time (yet). */
uint32_t hak_large_purge(uint32_t now, uint32_t delay) {
    (void)now, (void)delay;
    return HAK_PURGE_NONE;
}

void hak_large_lock_all(void)   { hak_lock(&cache_lock); }
void hak_large_unlock_all(void) { hak_unlock(&cache_lock); }

/* ---- blocks ------------------------------------------------------------------ */
void *hak_large_alloc(size_t size, size_t align, bool zero) {
    if (align < HAK_LARGE_HDR) align = HAK_LARGE_HDR;
    /* The user pointer sits at `align` into the mapping; the header before it. */
    size_t off = align;
    if (off > (size_t)PTRDIFF_MAX / 2 || size > (size_t)PTRDIFF_MAX - off - HAK_CHUNK_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    /* at least one byte past the pointer, so even a 0-byte block with a
     * chunk-sized alignment lies inside its own mapping */
    size_t len = (off + (size ? size : 1) + HAK_CHUNK_SIZE - 1) & ~(HAK_CHUNK_SIZE - 1);
    size_t map_align = align > HAK_CHUNK_SIZE ? align : HAK_CHUNK_SIZE;
    char *base = NULL;
    if (map_align == HAK_CHUNK_SIZE) {
        size_t got;
        base = cache_take(len, &got);
        if (base != NULL) {
            len = got;
            if (zero) memset(base + off, 0, size);
        }
    }
    if (base == NULL) {
        hak_ensure_init();
        base = hak_os_map_tagged(len, map_align, HAK_CHUNK_LARGE);
        if (base == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        atomic_fetch_add_explicit(&hak_large_mapped, len, memory_order_relaxed);
    }
    return block_at(base, len, off);
}

/* p lies in a LARGE chunk; is it the start of a live block?  Reads only
 * hakmem's memory: the header's chunk is checked to be LARGE too. */
bool hak_large_valid(const void *p) {
    if (((uintptr_t)p & 15) != 0) return false;
    const char *hp = (const char *)p - HAK_LARGE_HDR;
    if (hak_chunk_kind(hp) != HAK_CHUNK_LARGE) return false;
    return hdr_of(p)->magic == (LARGE_MAGIC ^ (uintptr_t)p);
}

void hak_large_free(void *p) {
    if (!hak_large_valid(p)) hak_fatal("free(): invalid or already freed large block", p);
    large_hdr_t *h = hdr_of(p);
    char *base = h->base;
    size_t len = h->len;
    h->magic = 0;
    if (!cache_put(base, len)) release(base, len);
}

size_t hak_large_usable(const void *p) {
    large_hdr_t *h = hdr_of(p);
    return (size_t)(h->base + h->len - (const char *)p);
}

/* Resize in place or move the pages with mremap; NULL (errno ENOMEM) leaves
 * the block intact. */
void *hak_large_realloc(void *p, size_t size) {
    large_hdr_t *h = hdr_of(p);
    char *base = h->base;
    size_t len = h->len, off = (size_t)((char *)p - base);
    if (size > (size_t)PTRDIFF_MAX - off - HAK_CHUNK_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t new_len = (off + size + HAK_CHUNK_SIZE - 1) & ~(HAK_CHUNK_SIZE - 1);
    if (new_len == len) return p;
    int saved = errno;
    if (new_len < len) {                       /* shrink: give the tail back */
        hak_chunk_map_set(base + new_len, len - new_len, HAK_CHUNK_NONE);
        if (mremap(base, len, new_len, 0) == MAP_FAILED) {
            hak_chunk_map_set(base + new_len, len - new_len, HAK_CHUNK_LARGE);
            errno = saved;
            return p;
        }
        h->len = new_len;
        atomic_fetch_sub_explicit(&hak_large_mapped, len - new_len, memory_order_relaxed);
        errno = saved;
        return p;
    }
    if (mremap(base, len, new_len, 0) != MAP_FAILED) {     /* grow in place */
        if (!hak_chunk_map_set(base + len, new_len - len, HAK_CHUNK_LARGE)) {
            mremap(base, new_len, len, 0);                   /* shrinking cannot fail */
            errno = ENOMEM;
            return NULL;
        }
        atomic_fetch_add_explicit(&hak_large_mapped, new_len - len, memory_order_relaxed);
        h->len = new_len;
        errno = saved;
        return p;
    }
    /* Move: reserve an aligned range and let the kernel move the pages there. */
    /* Tagged before the move, and the old range untagged: once mremap has
     * unmapped it another thread may map it and tag it, and a late clear
     * would erase that tag. */
    char *nb = hak_os_map_tagged(new_len, HAK_CHUNK_SIZE, HAK_CHUNK_LARGE);
    if (nb == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
    if (mremap(base, len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, nb) == MAP_FAILED) {
        hak_chunk_map_set(base, len, HAK_CHUNK_LARGE);
        hak_chunk_map_set(nb, new_len, HAK_CHUNK_NONE);
        hak_os_unmap_unused(nb, new_len);
        errno = ENOMEM;
        return NULL;
    }
    atomic_fetch_add_explicit(&hak_large_mapped, new_len - len, memory_order_relaxed);
    errno = saved;
    return block_at(nb, new_len, off);
}
