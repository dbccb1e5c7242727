/* The hardened build (make HARDENED=1, libhakmem_hardened.so), beyond the
 * free check both builds have (hakmem_free_check.c).
 *
 * Free-list links are encoded with the per-process key (block_link_box), and
 * ring pops check the freed-mark.  The address space of a SuperSlab or large
 * block returned to the OS stays reserved (no access) for a while, marked
 * dead in the chunk map, so a late free of it is caught too.  Every failure
 * stops the process with one "hakmem: ..." line naming the problem and
 * address. */
#include "hakmem_chunk_map.h"

#ifdef HAK_HARDENED

/* Address space given back to the OS stays reserved, inaccessible and
 * marked dead, for the last DEAD_RANGES ranges and at most dead_budget()
 * bytes: reserved address space counts against RLIMIT_AS, and the program
 * must still be able to map what it freed for its own use.  A failed
 * mapping releases all of it (make_room); malloc_trim keeps it, since it
 * holds no memory and still catches late frees. */
#define DEAD_RANGES 64
#define DEAD_BYTES_UNLIMITED ((size_t)1 << 30)
static hak_lock_t dead_lock;

void hak_hardened_lock_all(void)   { hak_lock(&dead_lock); }
void hak_hardened_unlock_all(void) { hak_unlock(&dead_lock); }
static struct { char *base; size_t len; } dead[DEAD_RANGES];   /* oldest at dead_first */
static unsigned dead_first, dead_count;
static size_t dead_bytes;

/* Read at each retirement: the program may lower its limit at any time. */
static size_t dead_budget(void) {
    size_t limit = hak_os_address_limit();
    return limit == 0 ? DEAD_BYTES_UNLIMITED : limit / 16;
}

/* Record [base, base + len), already reserved PROT_NONE, as dead, after
 * unmapping the oldest ranges that would exceed the count or the budget. */
static void dead_record(char *base, size_t len) {
    size_t budget = dead_budget();
    hak_chunk_map_set(base, len, HAK_CHUNK_DEAD);
    hak_lock(&dead_lock);
    while (dead_count == DEAD_RANGES || (dead_count > 0 && dead_bytes + len > budget)) {
        char *old = dead[dead_first].base;
        size_t old_len = dead[dead_first].len;
        dead_first = (dead_first + 1) % DEAD_RANGES;
        dead_count--;
        dead_bytes -= old_len;
        hak_os_unmap_unused(old, old_len);   /* stays tagged dead */
    }
    dead[(dead_first + dead_count) % DEAD_RANGES].base = base;
    dead[(dead_first + dead_count) % DEAD_RANGES].len = len;
    dead_count++;
    dead_bytes += len;
    hak_unlock(&dead_lock);
}

void hak_chunk_retire_range(void *base, size_t len) {
    if (!hak_os_reserve_over(base, len)) {   /* cannot keep it: plain unmap */
        hak_chunk_map_set(base, len, HAK_CHUNK_DEAD);
        hak_os_unmap(base, len);
        return;
    }
    dead_record(base, len);
}

/* The range a large realloc moved away from, already unmapped by mremap
 * (and untagged): reserve it again as dead unless another mapping took it
 * meanwhile, so a late free of the old pointer is caught. */
void hak_chunk_retire_moved(void *base, size_t len) {
    if (hak_os_reserve_at(base, len)) dead_record(base, len);
}

/* Out of address space: the dead ranges go first (hak_chunk_map_tagged). */
bool hak_chunk_release_dead(void) {
    bool any = false;
    hak_lock(&dead_lock);
    for (; dead_count > 0; dead_count--) {
        hak_os_unmap_unused(dead[dead_first].base, dead[dead_first].len);   /* stays dead */
        dead_first = (dead_first + 1) % DEAD_RANGES;
        any = true;
    }
    dead_bytes = 0;
    hak_unlock(&dead_lock);
    return any;
}

#endif
