/* Large tier (> 1 MiB, or any over-aligned request that no class serves):
 * one mapping per block, a whole number of 4 MiB chunks aligned to 4 MiB
 * (marked HAK_CHUNK_LARGE in the chunk map, so no other memory shares its
 * chunks), with a 64-byte header right before the user pointer.
 *
 * Freed mappings are kept, resident, in a cache of address ranges: a new
 * block of any size takes the best-fitting range (split: the rest stays
 * cached) or, when no one range is big enough, is gathered from several
 * (their pages moved by mremap into a new range: no faults, no copy),
 * adjacent ranges merge, and realloc grows into the cached range right
 * after a block before it asks mremap.  So a program that replaces big
 * buffers of varying sizes reuses the same memory without page faults;
 * where a block's pages are new, huge pages make them 1/512 of the faults.
 * A range goes back to the OS once it has stayed unused for the purge delay
 * (hak_large_purge, from the purger), when the cache is over its byte bound
 * (oldest first), or when a mapping fails (make_room). */
#include "hakmem_large.h"
#include "hakmem_chunk_map.h"
#include "box/chunk_map_box.h"
#include "hakmem_options.h"

#include <errno.h>
#include <string.h>

#define LARGE_MAGIC 0x68616b4c41524745ULL

/* Huge pages are 2 MiB (LARGE_HUGE); a range's "huge page i" is its
 * i-th 2 MiB, ranges being multiples of 4 MiB chunks. */
#define LARGE_HUGE ((size_t)2 << 20)

/* The page sizes a block's range was last told to use (huge_pages): bit i
 * of `huge` set where its huge page i was told to be one, 4 KiB pages for
 * the rest (so a range whose huge pages are all among its first 64 is
 * known whatever its length, and one told 4 KiB pages throughout, huge ==
 * 0, always); `known` false: not known (a fresh range, whose rest keeps
 * the kernel's default; advice the kernel refused).  `held`: those of its
 * huge pages where a touch faults in nothing more, a block's header having
 * been written there since it was told (until calloc gives the page
 * back).  The cache keeps the same for its ranges, which merge up to its
 * byte bound (wide_t). */
typedef struct { uint64_t huge, held; bool known; } advice_t;
#define ADVICE_NONE  ((advice_t){ 0, 0, false })

typedef struct {
    uint64_t magic;        /* LARGE_MAGIC ^ user pointer: a live block     */
    char    *base;         /* the mapping                                  */
    size_t   len;
    advice_t advice;       /* of [base, base + len)                        */
    char     pad[HAK_LARGE_HDR - 24 - sizeof(advice_t)];
} large_hdr_t;

_Static_assert(sizeof(large_hdr_t) == HAK_LARGE_HDR, "large header size");

/* A block of `size` bytes at `off` into its mapping is too big when the
 * mapping, rounded up to whole chunks, would pass PTRDIFF_MAX (no object
 * may: a difference of two pointers into it must fit). */
static inline bool too_big(size_t size, size_t off) {
    return off > (size_t)PTRDIFF_MAX / 2 || size > (size_t)PTRDIFF_MAX - off - HAK_CHUNK_SIZE;
}

static inline large_hdr_t *hdr_of(const void *p) {
    return (large_hdr_t *)((char *)p - HAK_LARGE_HDR);
}

/* The block `off` bytes into the mapping [base, base + len), its header set. */
static char *block_at(char *base, size_t len, size_t off, advice_t advice) {
    char *p = base + off;
    large_hdr_t *h = hdr_of(p);
    h->magic = LARGE_MAGIC ^ (uintptr_t)p;
    h->base = base;
    h->len = len;
    h->advice = advice;
    return p;
}

/* ---- the cache of freed mappings ------------------------------------------ */
#define LARGE_CACHE_SLOTS 64
#define LARGE_CACHE_BYTES ((size_t)1 << 30)

/* A cached range's advice: as advice_t, one bit for each of its huge
 * pages (a range is at most the cache's byte bound).  Cuts and merges
 * carry it along. */
#define WIDE_WORDS (LARGE_CACHE_BYTES / LARGE_HUGE / 64)
typedef struct { uint64_t huge[WIDE_WORDS], held[WIDE_WORDS]; bool known; } wide_t;

#define WIDE_FOR_EACH(w, i)                                                                \
    for (size_t wi_ = 0; wi_ < WIDE_WORDS; wi_++)                                          \
        for (uint64_t wb_ = (w)[wi_], i; wb_ != 0 && (i = wi_ * 64 + (size_t)__builtin_ctzll(wb_), 1); \
             wb_ &= wb_ - 1)

static inline void wide_set(uint64_t *w, size_t i) { w[i / 64] |= (uint64_t)1 << (i % 64); }
static inline bool wide_get(const uint64_t *w, size_t i) { return (w[i / 64] >> (i % 64)) & 1; }

static wide_t wide_of(advice_t a) {
    wide_t w = { { a.huge }, { a.held }, a.known };
    return w;
}

/* The advice of the first `len` bytes of a range (unknown where a huge
 * page past the 64th is one). */
static advice_t wide_head(const wide_t *w, size_t len) {
    advice_t a = { 0, 0, w->known };
    WIDE_FOR_EACH(w->huge, i) {
        if (i < len / LARGE_HUGE && i >= 64) return ADVICE_NONE;
        if (i < len / LARGE_HUGE) {
            a.huge |= (uint64_t)1 << i;
            if (wide_get(w->held, i)) a.held |= (uint64_t)1 << i;
        }
    }
    return a;
}

/* What is left once the first `len` bytes are cut off. */
static wide_t wide_rest(const wide_t *w, size_t len) {
    wide_t r = { { 0 }, { 0 }, w->known };
    size_t n = len / LARGE_HUGE;
    WIDE_FOR_EACH(w->huge, i) {
        if (i < n) continue;
        wide_set(r.huge, i - n);
        if (wide_get(w->held, i)) wide_set(r.held, i - n);
    }
    return r;
}

/* Range lo (lo_len bytes) followed by range hi. */
static wide_t wide_join(const wide_t *lo, size_t lo_len, const wide_t *hi) {
    wide_t r = *lo;
    size_t n = lo_len / LARGE_HUGE;
    r.known = lo->known && hi->known;
    WIDE_FOR_EACH(hi->huge, i) {
        if (i + n >= WIDE_WORDS * 64) return (wide_t){ { 0 }, { 0 }, false };
        wide_set(r.huge, i + n);
        if (wide_get(hi->held, i)) wide_set(r.held, i + n);
    }
    return r;
}

typedef struct { char *base; size_t len; uint32_t at; wide_t advice; } range_t;
typedef struct { char *base; size_t len; advice_t advice; } piece_t;

static hak_lock_t cache_lock;
static range_t cache[LARGE_CACHE_SLOTS];
static unsigned cache_count;
static size_t cache_bytes;

/* Bytes mapped for large blocks, live or cached, for hak_get_info; live
 * blocks, for mallinfo2 (hblks: counted by the API, which frees them). */
_Atomic size_t hak_large_mapped;
_Atomic size_t hak_large_live;

static void release(char *base, size_t len) {
    hak_chunk_retire_range(base, len);
    atomic_fetch_sub_explicit(&hak_large_mapped, len, memory_order_relaxed);
}

/* cache_bytes is read without the lock (hak_get_info): written atomically. */
static void bytes_add(size_t n) { __atomic_store_n(&cache_bytes, cache_bytes + n, __ATOMIC_RELAXED); }
static void bytes_sub(size_t n) { __atomic_store_n(&cache_bytes, cache_bytes - n, __ATOMIC_RELAXED); }

static void cache_remove(unsigned i) {
    bytes_sub(cache[i].len);
    __atomic_store_n(&cache_count, cache_count - 1, __ATOMIC_RELAXED);
    cache[i] = cache[cache_count];
}

/* Take len bytes from cached range i: its start (*advice: what they were
 * told); the rest stays. */
static char *cache_cut(unsigned i, size_t len, advice_t *advice) {
    char *base = cache[i].base;
    *advice = wide_head(&cache[i].advice, len);
    if (cache[i].len == len) {
        cache_remove(i);
    } else {
        cache[i].advice = wide_rest(&cache[i].advice, len);
        cache[i].base += len;
        cache[i].len -= len;
        bytes_sub(len);
    }
    return base;
}

/* Up to len bytes from the cache, in pieces: the smallest range that holds
 * them all, or else the biggest range and so on for the rest (few pieces:
 * each costs a move).  Ranges are chunk multiples, so any split keeps every
 * part chunk-aligned.  Returns the bytes taken. */
static size_t cache_take(size_t len, piece_t *pc, unsigned *n) {
    *n = 0;
    if (__atomic_load_n(&cache_count, __ATOMIC_RELAXED) == 0) return 0;
    size_t got = 0;
    hak_lock(&cache_lock);
    while (got < len && cache_count > 0) {
        size_t need = len - got;
        unsigned best = cache_count, big = 0;
        for (unsigned i = 0; i < cache_count; i++) {
            if (cache[i].len >= need && (best == cache_count || cache[i].len < cache[best].len))
                best = i;
            if (cache[i].len > cache[big].len) big = i;
        }
        unsigned i = best < cache_count ? best : big;
        size_t take = cache[i].len < need ? cache[i].len : need;
        pc[*n].base = cache_cut(i, take, &pc[*n].advice);
        pc[*n].len = take;
        (*n)++;
        got += take;
    }
    hak_unlock(&cache_lock);
    hak_stamped_reused(got);
    return got;
}

/* The cached range starting exactly at `at`, if it has len bytes: realloc
 * grows into it in place. */
static bool cache_take_at(char *at, size_t len) {
    if (__atomic_load_n(&cache_count, __ATOMIC_RELAXED) == 0) return false;
    bool ok = false;
    hak_lock(&cache_lock);
    for (unsigned i = 0; i < cache_count; i++) {
        if (cache[i].base != at) continue;
        if (cache[i].len >= len) {
            advice_t unused;
            cache_cut(i, len, &unused);
            ok = true;
        }
        break;
    }
    hak_unlock(&cache_lock);
    if (ok) hak_stamped_reused(len);
    return ok;
}

/* Under cache_lock: the oldest range out, into *out (to release after). */
static bool cache_evict_oldest(range_t *out) {
    if (cache_count == 0) return false;
    unsigned old = 0;
    for (unsigned i = 1; i < cache_count; i++)
        if ((int32_t)(cache[i].at - cache[old].at) < 0) old = i;
    *out = cache[old];
    cache_remove(old);
    return true;
}

/* A freed range: merged with cached neighbours (the merged range takes the
 * newest stamp: nothing goes back early), room made by sending the oldest
 * ranges back.  With delay 0, bigger than the whole cache, or not `keep`
 * (the caller knows no purger would give it back if the program now
 * idles), it goes back at once.  Returns whether it was kept, stamped for
 * the purger. */
static bool cache_put(char *base, size_t len, advice_t told, bool keep) {
    if (hak_purge_delay() == 0 || len > LARGE_CACHE_BYTES || !keep) {
        release(base, len);
        return false;
    }
    size_t freed = len;            /* the neighbours it merges with were counted */
    uint32_t now = hak_now_ms();
    range_t out[4];
    unsigned nout = 0;
    wide_t advice = wide_of(told);
    hak_lock(&cache_lock);
    for (unsigned i = 0; i < cache_count;) {
        if (cache[i].base + cache[i].len == base || base + len == cache[i].base) {
            if (cache[i].base < base) {
                advice = wide_join(&cache[i].advice, cache[i].len, &advice);
                base = cache[i].base;
            } else {
                advice = wide_join(&advice, len, &cache[i].advice);
            }
            len += cache[i].len;
            cache_remove(i);
            continue;
        }
        i++;
    }
    while ((cache_count == LARGE_CACHE_SLOTS || cache_bytes + len > LARGE_CACHE_BYTES) &&
           nout < 4 && cache_evict_oldest(&out[nout]))
        nout++;
    bool kept = cache_count < LARGE_CACHE_SLOTS && cache_bytes + len <= LARGE_CACHE_BYTES;
    if (kept) {
        hak_stamped_add(freed);
        cache[cache_count] = (range_t){ base, len, now, advice };
        bytes_add(len);
        __atomic_store_n(&cache_count, cache_count + 1, __ATOMIC_RELAXED);
    }
    hak_unlock(&cache_lock);
    for (unsigned i = 0; i < nout; i++) release(out[i].base, out[i].len);
    if (!kept) release(base, len);
    return kept;
}

size_t hak_large_cached_bytes(void) { return __atomic_load_n(&cache_bytes, __ATOMIC_RELAXED); }

bool hak_large_trim_cache(void) {
    hak_lock(&cache_lock);
    bool any = cache_count != 0;
    while (cache_count) {
        __atomic_store_n(&cache_count, cache_count - 1, __ATOMIC_RELAXED);
        release(cache[cache_count].base, cache[cache_count].len);
    }
    __atomic_store_n(&cache_bytes, 0, __ATOMIC_RELAXED);
    hak_unlock(&cache_lock);
    return any;
}

/* The purger: ranges unused for the delay go back. */
void hak_large_purge(hak_purge_scan_t *sc) {
    if (__atomic_load_n(&cache_count, __ATOMIC_RELAXED) == 0) return;
    hak_lock(&cache_lock);
    for (unsigned i = 0; i < cache_count;) {
        if (hak_purge_due(sc, cache[i].at, cache[i].len)) {
            range_t r = cache[i];
            cache_remove(i);
            release(r.base, r.len);
            continue;
        }
        i++;
    }
    hak_unlock(&cache_lock);
}

void hak_large_lock_all(void)   { hak_lock(&cache_lock); }
void hak_large_unlock_all(void) { hak_unlock(&cache_lock); }

/* ---- blocks ------------------------------------------------------------------ */
/* Huge pages (2 MiB) for the whole ones a block's bytes cover: a block is
 * written whole more often than not (a zero-filled buffer), and one fault
 * per 2 MiB is 1/512 of the faults.  Not past the bytes asked for: the huge
 * page the block ends in would be resident whole.  So mappings may also
 * begin or end on a huge-page boundary inside a chunk: moves split there.
 *
 * [p, p + len) is to hold a block that starts `off` into it (its header
 * just before) and whose bytes end `end` into it.  Not the padding before a
 * block aligned to a huge page or more (posix_memalign to 2 MiB and up,
 * `off` a multiple of 2 MiB): the header's write would fault in a huge page
 * that holds no byte of the block, so that padding is marked for 4 KiB
 * pages even in a fresh range (where THP is `always`, unmarked memory gets
 * huge pages).  A smaller alignment keeps the block's first huge page: its
 * padding is less than the page.  A reused range whose advice is not
 * known is told all of it, its rest too; one whose advice is known (`had`)
 * is told only what differs where it matters (below): a program that
 * frees and takes back 2 MiB-aligned buffers made two madvise calls a
 * block, most of its time.  Returns what the range has now been told. */
static bool advise_runs(char *p, uint64_t pages, bool huge) {
    bool told = true;
    while (pages != 0) {
        unsigned a = (unsigned)__builtin_ctzll(pages), b = a;
        while (b < 64 && (pages >> b & 1)) b++;
        told &= hak_os_hugepages(p + a * LARGE_HUGE, (size_t)(b - a) * LARGE_HUGE, huge);
        pages = b < 64 ? pages & ~(((uint64_t)1 << b) - 1) : 0;
    }
    return told;
}

static advice_t huge_pages(char *p, size_t len, size_t off, size_t end, bool reused, advice_t had) {
    size_t lo = off & ~(LARGE_HUGE - 1);
    size_t hi = end & ~(LARGE_HUGE - 1);
    if (hi < lo) hi = lo;
    size_t first = lo / LARGE_HUGE, past = hi / LARGE_HUGE;
    bool fits = past <= 64;     /* (otherwise not written down) */
    uint64_t want = 0;
    if (fits && past > first)
        want = (past - first == 64 ? ~(uint64_t)0 : ((uint64_t)1 << (past - first)) - 1) << first;
    /* The header, written next, makes its huge page held if marked. */
    size_t head = (off - HAK_LARGE_HDR) / LARGE_HUGE;
    uint64_t head_bit = head < 64 ? (uint64_t)1 << head : 0;
    /* A reused range whose advice is known gets the huge pages this block
     * covers that it lacks, and gives up only those the block touches but
     * does not cover, the huge page its header is in and the one its bytes
     * end in, where a fault would make a huge page resident past the bytes
     * asked for; not held ones, where no fault can (advice_t).  So a block
     * that fits in the range's first huge page leaves the range as it was,
     * where telling that page 4 KiB pages and the next bigger block huge
     * ones again cost two calls and splits of the mapping (a program
     * replacing buffers of 1-4 MiB: 0.8 calls a block, a quarter of its
     * time).  Huge pages the block does not reach cost nothing until one
     * does. */
    if (reused && had.known && fits) {
        size_t tail = (end > off ? end - 1 : off) / LARGE_HUGE;
        uint64_t touched = head_bit | (tail < 64 ? (uint64_t)1 << tail : 0);
        uint64_t drop = had.huge & touched & ~want & ~had.held;
        bool told = advise_runs(p, want & ~had.huge, true) & advise_runs(p, drop, false);
        uint64_t huge = (had.huge | want) & ~drop;
        return told ? (advice_t){ huge, (had.held | head_bit) & huge, true } : ADVICE_NONE;
    }
    bool told = true;
    if (hi > lo) told &= hak_os_hugepages(p + lo, hi - lo, true);
    if (reused && hi == lo) {
        told &= hak_os_hugepages(p, len, false);  /* no huge page: one call */
    } else {
        if (lo > 0) told &= hak_os_hugepages(p, lo, false);
        if (reused && hi < len) told &= hak_os_hugepages(p + hi, len - hi, false);
    }
    /* (a fresh range's rest keeps the kernel's default; one the kernel
     * refused is told again next time) */
    return reused && told && fits ? (advice_t){ want, want & head_bit, true } : ADVICE_NONE;
}

/* calloc's clearing of [p, p + n), memory an earlier block used.  The whole
 * huge pages in it go back to the kernel instead, which hands out zero ones
 * where the block is touched (a read maps the shared zero page): a buffer
 * used sparsely is never written whole, and one used whole costs a fault per
 * 2 MiB, the kernel's clearing in place of ours.  Without huge pages that
 * would be a fault per 4 KiB, dearer than the memset.  The huge page p starts
 * in is cleared here whatever its alignment: the block's header, just before
 * p, is written at once, and would fault that page back in for the kernel to
 * clear all of it.  The huge pages given back are held no more in *advice,
 * the advice of the range at base (NULL: not known). */
static void zero_used(char *p, size_t n, advice_t *advice, const char *base) {
    char *end = p + n;
    char *lo = (char *)(((uintptr_t)p + LARGE_HUGE - 1) & ~(uintptr_t)(LARGE_HUGE - 1));
    char *hi = (char *)((uintptr_t)end & ~(uintptr_t)(LARGE_HUGE - 1));
    if (hi <= lo || !hak_os_hugepages_work() || !hak_os_zero_pages(lo, (size_t)(hi - lo))) {
        memset(p, 0, n);     /* the kernel refused (locked memory, a sandbox) */
        return;
    }
    memset(p, 0, (size_t)(lo - p));
    memset(hi, 0, (size_t)(end - hi));
    if (advice == NULL) return;
    /* those huge pages are held no more */
    size_t first = (size_t)(lo - base) / LARGE_HUGE, past = (size_t)(hi - base) / LARGE_HUGE;
    for (size_t i = first; i < past && i < 64; i++) advice->held &= ~((uint64_t)1 << i);
}

/* A fresh range for large blocks, tagged. */
static char *map_large(size_t len, size_t align) {
    char *p = hak_chunk_map_tagged(len, align, HAK_CHUNK_LARGE);
    if (p == NULL) return NULL;
    atomic_fetch_add_explicit(&hak_large_mapped, len, memory_order_relaxed);
    return p;
}

/* Move the pages of [from, from + len), a range of LARGE chunks that belongs
 * to the caller, to `to` (mapped and tagged LARGE).  Tagged dead (a late
 * free of a block that lived there is named) before the move: once the
 * kernel has unmapped the old range another thread may map it and tag it,
 * and a late tag would erase that one. */
static void move_range(char *from, size_t len, char *to) {
    hak_chunk_map_set(from, len, HAK_CHUNK_DEAD);
    hak_os_move_pages(from, len, to, LARGE_HUGE);
    hak_chunk_retire_moved(from, len);
    atomic_fetch_sub_explicit(&hak_large_mapped, len, memory_order_relaxed);
}

/* A new range of len bytes for a block of `size` bytes at `off`, made of
 * the cached pieces moved into it one after the other (page-table moves:
 * no faults, nothing copied); the rest is fresh.  For calloc (zero) only
 * the moved parts of the block are cleared.  NULL if no range could be
 * mapped: the pieces are then given back, so that a fresh mapping has room. */
static char *gather(size_t len, const piece_t *pc, unsigned n, size_t off, size_t size, bool zero) {
    char *nb = map_large(len, HAK_CHUNK_SIZE);
    if (nb == NULL) {
        for (unsigned i = 0; i < n; i++) release(pc[i].base, pc[i].len);
        return NULL;
    }
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        move_range(pc[i].base, pc[i].len, nb + at);
        size_t lo = at > off ? at : off, hi = at + pc[i].len;
        if (hi > off + size) hi = off + size;
        if (zero && lo < hi) zero_used(nb + lo, hi - lo, NULL, nb);   /* (its advice is not known) */
        at += pc[i].len;
    }
    return nb;
}

void *hak_large_alloc(size_t size, size_t align, bool zero) {
    if (align < HAK_LARGE_HDR) align = HAK_LARGE_HDR;
    /* The user pointer sits at `align` into the mapping; the header before it. */
    size_t off = align;
    if (too_big(size, off)) {
        errno = ENOMEM;
        return NULL;
    }
    /* at least one byte past the pointer, so even a 0-byte block with a
     * chunk-sized alignment lies inside its own mapping */
    size_t len = (off + (size ? size : 1) + HAK_CHUNK_SIZE - 1) & ~(HAK_CHUNK_SIZE - 1);
    size_t map_align = align > HAK_CHUNK_SIZE ? align : HAK_CHUNK_SIZE;
    char *base = NULL;
    advice_t advice = ADVICE_NONE;
    if (map_align == HAK_CHUNK_SIZE) {
        piece_t pc[LARGE_CACHE_SLOTS];
        unsigned n;
        size_t got = cache_take(len, pc, &n);
        if (n == 1 && got == len) {
            base = pc[0].base;
            advice = huge_pages(base, len, off, off + size, true, pc[0].advice);
            if (zero) zero_used(base + off, size, &advice, base);
        } else if (n > 0) {
            base = gather(len, pc, n, off, size, zero);
            if (base != NULL) advice = huge_pages(base, len, off, off + size, true, ADVICE_NONE);
        }
    }
    if (base == NULL) {
        base = map_large(len, map_align);
        if (base == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        advice = huge_pages(base, len, off, off + size, false, ADVICE_NONE);
    }
    return block_at(base, len, off, advice);
}

/* p lies in a LARGE chunk; is it the start of a live block?  Reads only
 * hakmem's memory: the header's chunk is checked to be LARGE too. */
bool hak_large_valid(const void *p) {
    if (((uintptr_t)p & 15) != 0) return false;
    const char *hp = (const char *)p - HAK_LARGE_HDR;
    if (hak_chunk_kind(hp) != HAK_CHUNK_LARGE) return false;
    return hdr_of(p)->magic == (LARGE_MAGIC ^ (uintptr_t)p);
}

bool hak_large_free(void *p, bool keep) {
    if (!hak_large_valid(p)) hak_fatal("free(): invalid or already freed large block", p);
    large_hdr_t *h = hdr_of(p);
    char *base = h->base;
    size_t len = h->len;
    h->magic = 0;
    return cache_put(base, len, h->advice, keep);
}

size_t hak_large_usable(const void *p) {
    large_hdr_t *h = hdr_of(p);
    return (size_t)(h->base + h->len - (const char *)p);
}

/* Resize in place or move the pages with mremap; NULL (errno ENOMEM) leaves
 * the block intact.  A block may span several kernel mappings (gathered, or
 * made of ranges the cache merged): move_range moves it piece by piece. */
void *hak_large_realloc(void *p, size_t size, bool *cached, bool keep) {
    *cached = false;
    large_hdr_t *h = hdr_of(p);
    char *base = h->base;
    size_t len = h->len, off = (size_t)((char *)p - base);
    if (too_big(size, off)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t new_len = (off + size + HAK_CHUNK_SIZE - 1) & ~(HAK_CHUNK_SIZE - 1);
    if (new_len == len) return p;
    int saved = errno;
    if (new_len < len) {                       /* shrink: the tail to the cache */
        h->len = new_len;
        h->advice = ADVICE_NONE;
        *cached = cache_put(base + new_len, len - new_len, ADVICE_NONE, keep);
        errno = saved;
        return p;
    }
    if (cache_take_at(base + len, new_len - len)) {      /* grow into a freed neighbour */
        h->len = new_len;
        h->advice = ADVICE_NONE;
        return p;
    }
    if (hak_os_grow_in_place(base, len, new_len)) {
        if (!hak_chunk_map_set(base + len, new_len - len, HAK_CHUNK_LARGE)) {
            hak_os_shrink_in_place(base, new_len, len);
            errno = ENOMEM;
            return NULL;
        }
        atomic_fetch_add_explicit(&hak_large_mapped, new_len - len, memory_order_relaxed);
        h->len = new_len;
        h->advice = ADVICE_NONE;
        errno = saved;
        return p;
    }
    /* Move: reserve an aligned range and let the kernel move the pages there. */
    char *nb = map_large(new_len, HAK_CHUNK_SIZE);
    if (nb == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    move_range(base, len, nb);
    /* after the move: the moved pages bring their old range's advice */
    advice_t advice = huge_pages(nb, new_len, off, off + size, true, ADVICE_NONE);
    errno = saved;
    return block_at(nb, new_len, off, advice);
}
