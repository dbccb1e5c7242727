/* The hardened build (make HARDENED=1, libhakmem_hardened.so).
 *
 * Free-list links are encoded with a per-process random key (block_link_box).
 * Every free of a SuperSlab block is checked before it is queued anywhere:
 * the span must be live, the pointer must be a block start, its memory must
 * not have been given back, and a freed-mark in its second word (the key
 * XOR its address, cleared by malloc) must not be set already.  Large blocks
 * carry a checked header; the address space of a SuperSlab or large block
 * returned to the OS stays reserved (no access) for a while, marked dead in
 * the chunk map, so a late free of it is caught too.  Every failure stops
 * the process with one "hakmem: ..." line naming the problem and address. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/hardened_box.h"
#include "box/size_class_box.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#ifdef HAK_HARDENED

uintptr_t hak_link_key;
uintptr_t hak_mark_key;
uint64_t hak_div_magic[HAK_NUM_CLASSES];

void hak_hardened_init(void) {
    uintptr_t k[2] = { 0, 0 };
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = (uintptr_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&ts;
        k[1] = k[0] * 0xBF58476D1CE4E5B9ull ^ (uintptr_t)&hak_link_key;
    }
    hak_link_key = k[0] | 1;     /* never 0: a zeroed link must not decode to NULL */
    hak_mark_key = k[1] | 1;
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++)
        hak_div_magic[c] = (((uint64_t)1 << HAK_DIV_SHIFT) + hak_class_block_size[c] - 1) /
                           hak_class_block_size[c];
}

/* The full check of a SuperSlab block being freed: stops the process with
 * the reason, or marks the block freed (a slab with pages given back whose
 * block is not on one of them). */
void hak_hardened_check_free(void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    unsigned idx = ss->page_head[hak_page_of(p)];
    const hak_slab_t *s = &ss->slabs[idx];
    if (s->tier == HAK_TIER_NONE || s->capacity == 0)
        hak_fatal("free(): not a live block (double free or invalid pointer)", p);
    uintptr_t start = (uintptr_t)ss + ((size_t)idx << HAK_PAGE_SHIFT) + (idx == 0) * HAK_SS_DATA0;
    if ((uintptr_t)p < start) hak_fatal("free(): pointer into a slab header", p);
    uintptr_t off = (uintptr_t)p - start;
    uint32_t bs = hak_class_block_size[s->cls];
    if (off / bs >= s->capacity) hak_fatal("free(): pointer past the last block of its slab", p);
    if (off % bs != 0) hak_fatal("free(): pointer into the middle of a block", p);
    uintptr_t page_off = (uintptr_t)p - ((uintptr_t)ss + ((size_t)idx << HAK_PAGE_SHIFT));
    for (uintptr_t k = page_off / 4096; k <= (page_off + bs - 1) / 4096 && k < 16; k++)
        if (s->released >> k & 1) hak_fatal("free(): block already freed and given back to the OS", p);
    uintptr_t *w = p;
    if (w[1] == hak_freed_mark(p)) hak_fatal("free(): double free of", p);
    w[1] = hak_freed_mark(p);
}

/* Address space given back to the OS stays reserved, inaccessible and
 * marked dead, for the last DEAD_RANGES ranges. */
#define DEAD_RANGES 64
static hak_lock_t dead_lock;

void hak_hardened_lock_all(void)   { hak_lock(&dead_lock); }
void hak_hardened_unlock_all(void) { hak_unlock(&dead_lock); }
static struct { char *base; size_t len; } dead[DEAD_RANGES];
static unsigned dead_next;

void hak_os_retire_range(void *base, size_t len) {
    void *r = mmap(base, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (r == MAP_FAILED) {                   /* cannot keep it: plain unmap */
        hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
        hak_os_unmap(base, len);
        return;
    }
    hak_chunk_map_set(base, len, HAK_CHUNK_DEAD);
    atomic_fetch_add_explicit(&hak_released_bytes, len, memory_order_relaxed);
    hak_lock(&dead_lock);
    char *old = dead[dead_next].base;
    size_t old_len = dead[dead_next].len;
    dead[dead_next].base = base;
    dead[dead_next].len = len;
    dead_next = (dead_next + 1) % DEAD_RANGES;
    hak_unlock(&dead_lock);
    if (old != NULL) {
        hak_chunk_map_set(old, old_len, HAK_CHUNK_NONE);
        hak_os_unmap_unused(old, old_len);
    }
}

#else

void hak_os_retire_range(void *base, size_t len) {
    hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
    hak_os_unmap(base, len);
}

#endif
