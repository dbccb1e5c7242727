/* The chunk map (what each 4 MiB chunk of the address space is: read inline
 * by box/chunk_map_box.h), and the memory hakmem maps for itself: tagged
 * ranges for SuperSlabs and large blocks, and metadata.  Nothing here calls
 * malloc.
 *
 * Two kinds of map (HAKMEM_SS_LOOKUP_KIND):
 *   flat:  hak_chunk_map, a byte per chunk, 32 MiB of .bss left untouched
 *          except where hakmem maps memory.
 *   radix: RADIX_TOP pointers (64 KiB of .bss) to leaves of RADIX_LEAF
 *          bytes, each covering 16 GiB, made on demand from metadata memory. */
#include "hakmem_chunk_map.h"

uint8_t hak_chunk_map[HAK_MAP_ENTRIES];

#define RADIX_LEAF_BITS 12
#define RADIX_LEAF (1u << RADIX_LEAF_BITS)
#define RADIX_TOP (HAK_MAP_ENTRIES >> RADIX_LEAF_BITS)

bool hak_radix_in_use;
static uint8_t *radix_top[RADIX_TOP];
static hak_lock_t radix_lock;

void hak_chunk_map_select(bool radix) { hak_radix_in_use = radix; }

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

/* ---- memory for hakmem ------------------------------------------------------
 * When the OS says no, the layers above are asked to give back what they
 * cache (hak_make_room, hakmem_purge.c) and the mapping is tried once more.
 * A callback, set at start-up: this layer sits below the ones it asks. */
static bool (*make_room)(void);

void hak_chunk_map_on_refusal(bool (*fn)(void)) { make_room = fn; }

static bool room_made(void) { return make_room != NULL && make_room(); }

/* SuperSlab chunks are handed out from a reservation of several aligned
 * chunks, mapped at once: the kernel places a lone 4 MiB mapping below the
 * last one, aligned only while nothing else came between (thread stacks
 * do), and an unaligned one costs a second mapping and two munmaps, each
 * munmap a TLB shootdown across the program's CPUs (600 new threads: ~1 800
 * extra calls).  The reservation doubles from one chunk up to
 * CHUNK_RESERVE_MAX, so a small program maps one chunk as before; what is
 * left of it is address space only (never touched), and goes back when the
 * OS refuses a mapping. */
#define CHUNK_RESERVE_MAX 16u
static hak_lock_t reserve_lock;
static char *reserve_cur, *reserve_end;
static unsigned reserve_next = 1;     /* chunks the next reservation maps */

static void *chunk_reserve_take(void) {
    hak_lock(&reserve_lock);
    if (reserve_cur == reserve_end) {
        size_t len = (size_t)reserve_next * HAK_CHUNK_SIZE;
        char *p = hak_os_map_aligned(len, HAK_CHUNK_SIZE);
        if (p == NULL && reserve_next > 1) {
            len = HAK_CHUNK_SIZE;
            p = hak_os_map_aligned(len, HAK_CHUNK_SIZE);
        }
        if (p == NULL) {
            hak_unlock(&reserve_lock);
            return NULL;
        }
        if (reserve_next < CHUNK_RESERVE_MAX) reserve_next *= 2;
        reserve_cur = p;
        reserve_end = p + len;
    }
    void *r = reserve_cur;
    reserve_cur += HAK_CHUNK_SIZE;
    hak_unlock(&reserve_lock);
    return r;
}

/* The unused rest of the reservation back to the OS (never touched: not
 * counted as given back).  True if there was any. */
static bool chunk_reserve_drop(void) {
    hak_lock(&reserve_lock);
    bool any = reserve_cur != reserve_end;
    if (any) hak_os_unmap_unused(reserve_cur, (size_t)(reserve_end - reserve_cur));
    reserve_cur = reserve_end = NULL;
    reserve_next = 1;
    hak_unlock(&reserve_lock);
    return any;
}

static void *map_aligned(size_t len, size_t align) {
    return len == HAK_CHUNK_SIZE && align == HAK_CHUNK_SIZE ? chunk_reserve_take()
                                                           : hak_os_map_aligned(len, align);
}

/* A new range for hakmem, tagged in the chunk map. */
void *hak_chunk_map_tagged(size_t len, size_t align, uint8_t kind) {
    void *p = map_aligned(len, align);
    if (p == NULL && chunk_reserve_drop()) p = map_aligned(len, align);
    if (p == NULL && room_made()) p = map_aligned(len, align);
    if (p == NULL) return NULL;
    if (!hak_chunk_map_set(p, len, kind)) {
        hak_os_unmap_unused(p, len);
        return NULL;
    }
    return p;
}

/* Metadata (thread heaps, radix leaves) comes from 1 MiB mappings carved
 * by a bump pointer and is never returned: heaps are recycled, not freed.
 * What spans pages starts on one: a heap's first bytes, all a thread that
 * uses few classes touches, then lie on one page, not across two. */
static hak_lock_t meta_lock;
static char *meta_cur, *meta_end;

void *hak_meta_alloc(size_t size) {
    size = (size + 63) & ~(size_t)63;
    hak_lock(&meta_lock);
    if (size >= 4096) meta_cur = (char *)(((uintptr_t)meta_cur + 4095) & ~(uintptr_t)4095);
    if (meta_cur > meta_end || (size_t)(meta_end - meta_cur) < size) {
        size_t len = size > (1u << 20) ? (size + 4095) & ~(size_t)4095 : (1u << 20);
        char *p = hak_os_map(len);
        if (p == NULL && room_made()) p = hak_os_map(len);
        if (p == NULL) { hak_unlock(&meta_lock); return NULL; }
        meta_cur = p;
        meta_end = p + len;
    }
    void *r = meta_cur;
    meta_cur += size;
    hak_unlock(&meta_lock);
    return r;   /* fresh mapping: already zero */
}

#ifndef HAK_HARDENED
/* The default build gives a retired range straight back (the hardened
 * build keeps it reserved a while: hakmem_hardened.c).  Tagged dead first:
 * a late free of a pointer into it is named, not passed to libc.  A mapping
 * made there later tags it again. */
void hak_chunk_retire_range(void *base, size_t len) {
    hak_chunk_map_set(base, len, HAK_CHUNK_DEAD);
    hak_os_unmap(base, len);
}

void hak_chunk_retire_moved(void *base, size_t len) { (void)base, (void)len; }

bool hak_chunk_release_dead(void) { return false; }
#endif

/* fork(): held across it, so the child never inherits them half-taken. */
void hak_chunk_map_lock_all(void) {
    hak_lock(&radix_lock);
    hak_lock(&meta_lock);
    hak_lock(&reserve_lock);
}

void hak_chunk_map_unlock_all(void) {
    hak_unlock(&reserve_lock);
    hak_unlock(&meta_lock);
    hak_unlock(&radix_lock);
}
