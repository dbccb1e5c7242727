/* Introspection: hak_get_info (the API's snapshot of the backend), and
 * glibc's calls (mallinfo2, mallinfo, malloc_stats, malloc_info) answered
 * with hakmem's own figures.  Under LD_PRELOAD they would otherwise
 * describe glibc's arena, which holds nothing.
 *
 * Every figure comes from counters hakmem keeps anyway or updates only on
 * slow paths: SuperSlabs by state, each heap's pages in slab spans and free
 * pages still resident (changed when a span is made or retired), bytes
 * mapped for large blocks and the large cache.  So "in use" counts a slab
 * whole while it holds any block: it is the memory the program's blocks
 * keep from being given back, not the sum of their sizes (which would cost
 * a count on every malloc and free).  The fields are listed in
 * docs/PROFILING.md. */
#include "hakmem_heap.h"
#include "hakmem_large.h"
#include "hakmem_purge.h"
#include "hakmem_superslab.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


void hak_get_info(hak_info_t *info) {
    memset(info, 0, sizeof *info);
    info->ss_hot = atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed);
    info->ss_draining = atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed);
    info->ss_free = atomic_load_explicit(&hak_ss_count[HAK_SS_FREE], memory_order_relaxed);
    info->large_mapped = atomic_load_explicit(&hak_large_mapped, memory_order_relaxed);
    info->large_cached = hak_large_cached_bytes();
    hak_heap_counts(&info->heaps, &info->heaps_abandoned);
    info->released = atomic_load_explicit(&hak_released_bytes, memory_order_relaxed);
    info->decommits = atomic_load_explicit(&hak_decommit_count, memory_order_relaxed);
    info->purge_delay_ms = hak_purge_delay();
}

typedef struct {
    size_t ss_used, ss_cached;          /* SuperSlabs HOT + DRAINING, FREE */
    size_t slab_bytes, dirty_bytes;     /* in slab spans; free and resident */
    size_t large_count, large_bytes;    /* live large blocks               */
    size_t large_cached;                /* bytes of cached large mappings  */
    size_t heaps, heaps_abandoned;
    uint64_t released;
} figures_t;

static void figures(figures_t *f) {
    hak_info_t info;
    hak_get_info(&info);
    size_t slab_pages, dirty_pages;
    hak_heap_page_counts(&slab_pages, &dirty_pages);
    f->ss_used = info.ss_hot + info.ss_draining;
    f->ss_cached = info.ss_free;
    f->slab_bytes = slab_pages << HAK_PAGE_SHIFT;
    f->dirty_bytes = dirty_pages << HAK_PAGE_SHIFT;
    /* the counters are read one by one while other threads move them */
    if (f->slab_bytes > f->ss_used * HAK_CHUNK_SIZE) f->slab_bytes = f->ss_used * HAK_CHUNK_SIZE;
    f->large_count = atomic_load_explicit(&hak_large_live, memory_order_relaxed);
    f->large_cached = info.large_cached;
    f->large_bytes = info.large_mapped > info.large_cached ? info.large_mapped - info.large_cached : 0;
    f->heaps = info.heaps;
    f->heaps_abandoned = info.heaps_abandoned;
    f->released = atomic_load_explicit(&hak_released_bytes, memory_order_relaxed);
}

struct mallinfo2 hak_mallinfo2(void) {
    figures_t f;
    figures(&f);
    struct mallinfo2 m;
    memset(&m, 0, sizeof m);
    m.arena = f.ss_used * HAK_CHUNK_SIZE;
    m.ordblks = f.ss_used;
    m.smblks = f.ss_cached;
    m.hblks = f.large_count;
    m.hblkhd = f.large_bytes;
    m.usmblks = 0;
    m.fsmblks = f.large_cached;
    m.uordblks = f.slab_bytes;
    m.fordblks = m.arena - f.slab_bytes;
    m.keepcost = f.dirty_bytes + f.large_cached;
    return m;
}

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The old int fields: each saturates at INT_MAX (glibc's wrap around). */
struct mallinfo hak_mallinfo(void) {
    struct mallinfo2 m2 = hak_mallinfo2();
    struct mallinfo m;
    m.arena = clamp_int(m2.arena);
    m.ordblks = clamp_int(m2.ordblks);
    m.smblks = clamp_int(m2.smblks);
    m.hblks = clamp_int(m2.hblks);
    m.hblkhd = clamp_int(m2.hblkhd);
    m.usmblks = clamp_int(m2.usmblks);
    m.fsmblks = clamp_int(m2.fsmblks);
    m.uordblks = clamp_int(m2.uordblks);
    m.fordblks = clamp_int(m2.fordblks);
    m.keepcost = clamp_int(m2.keepcost);
    return m;
}

static void say(const char *line) {
    ssize_t w = write(2, line, strlen(line));
    (void)w;
}

/* To stderr, like glibc's; written with write(2), as the statistics at exit. */
void hak_malloc_stats(void) {
    figures_t f;
    figures(&f);
    char line[200];
    say("hakmem malloc_stats\n");
    snprintf(line, sizeof line, "SuperSlabs (4 MiB)  = %10zu in use, %zu empty and cached\n",
             f.ss_used, f.ss_cached);
    say(line);
    snprintf(line, sizeof line, "system bytes        = %10zu  (SuperSlabs in use and large blocks)\n",
             f.ss_used * HAK_CHUNK_SIZE + f.large_bytes);
    say(line);
    snprintf(line, sizeof line, "in use bytes        = %10zu  (slab pages and large blocks)\n",
             f.slab_bytes + f.large_bytes);
    say(line);
    snprintf(line, sizeof line, "large blocks        = %10zu  (%zu bytes; %zu bytes more cached)\n",
             f.large_count, f.large_bytes, f.large_cached);
    say(line);
    snprintf(line, sizeof line, "releasable bytes    = %10zu  (malloc_trim would give them back)\n",
             f.dirty_bytes + f.large_cached);
    say(line);
    snprintf(line, sizeof line, "given back to OS    = %10llu  (bytes, since the start)\n",
             (unsigned long long)f.released);
    say(line);
    snprintf(line, sizeof line, "thread heaps        = %10zu  (%zu abandoned)\n", f.heaps,
             f.heaps_abandoned);
    say(line);
}

/* glibc's XML, with the totals of its outer <malloc> element, plus hakmem's
 * own elements; no per-arena <heap> elements (hakmem has no arenas). */
int hak_malloc_info(int options, FILE *out) {
    if (options != 0 || out == NULL) {
        errno = EINVAL;
        return -1;
    }
    figures_t f;
    figures(&f);
    size_t system = f.ss_used * HAK_CHUNK_SIZE + f.large_bytes;
    fprintf(out, "<malloc version=\"hakmem-1\">\n");
    fprintf(out, "<superslabs size=\"%zu\" in_use=\"%zu\" cached=\"%zu\"/>\n", (size_t)HAK_CHUNK_SIZE,
            f.ss_used, f.ss_cached);
    fprintf(out, "<heaps count=\"%zu\" abandoned=\"%zu\"/>\n", f.heaps, f.heaps_abandoned);
    fprintf(out, "<total type=\"slab\" count=\"%zu\" size=\"%zu\"/>\n",
            f.slab_bytes >> HAK_PAGE_SHIFT, f.slab_bytes);
    fprintf(out, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", f.large_count, f.large_bytes);
    fprintf(out, "<total type=\"mmap-cached\" size=\"%zu\"/>\n", f.large_cached);
    fprintf(out, "<total type=\"releasable\" size=\"%zu\"/>\n", f.dirty_bytes + f.large_cached);
    fprintf(out, "<total type=\"released\" size=\"%llu\"/>\n", (unsigned long long)f.released);
    fprintf(out, "<system type=\"current\" size=\"%zu\"/>\n", system);
    fprintf(out, "<aspace type=\"total\" size=\"%zu\"/>\n",
            (f.ss_used + f.ss_cached) * HAK_CHUNK_SIZE + f.large_bytes + f.large_cached);
    fprintf(out, "</malloc>\n");
    return 0;
}

#ifndef HAK_NO_INTERPOSE
struct mallinfo2 mallinfo2(void) HAK_ALIAS(hak_mallinfo2);
struct mallinfo  mallinfo(void) HAK_ALIAS(hak_mallinfo);
void   malloc_stats(void) HAK_ALIAS(hak_malloc_stats);
int    malloc_info(int options, FILE *out) HAK_ALIAS(hak_malloc_info);
#endif
