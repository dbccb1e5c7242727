/* The hardened build (make HARDENED=1, libhakmem_hardened.so), beyond the
 * free check both builds have (hakmem_free_check.c).
 *
 * Free-list links are encoded with the per-process key (block_link_box), and
 * ring pops check the freed-mark.  The address space of a SuperSlab or large
 * block returned to the OS stays reserved (no access) for a while, marked
 * dead in the chunk map, so a late free of it is caught too.  Every failure
 * stops the process with one "hakmem: ..." line naming the problem and
 * address. */
#include "hakmem_internal.h"

#include <sys/mman.h>

#ifdef HAK_HARDENED

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

/* Out of address space: the dead ranges go first (hak_os_map_tagged). */
bool hak_os_release_dead(void) {
    bool any = false;
    hak_lock(&dead_lock);
    for (unsigned i = 0; i < DEAD_RANGES; i++) {
        if (dead[i].base == NULL) continue;
        hak_chunk_map_set(dead[i].base, dead[i].len, HAK_CHUNK_NONE);
        hak_os_unmap_unused(dead[i].base, dead[i].len);
        dead[i].base = NULL;
        any = true;
    }
    hak_unlock(&dead_lock);
    return any;
}

#else

bool hak_os_release_dead(void) { return false; }

void hak_os_retire_range(void *base, size_t len) {
    hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
    hak_os_unmap(base, len);
}

#endif
