/* The free check of both builds (inline part: box/free_check_box.h): the
 * per-process key of the freed-marks, the span checks in each SuperSlab
 * header, and the diagnosis when a free fails the check.
 *
 * Why one multiply and one compare find a handed-out block start.  Let b be
 * the block size, off < 2^32 the pointer's distance from the slab's first
 * block, and mul = floor((2^64 - 1) / b) + 1 (plus one more when b is a
 * power of two, so that e = b * mul mod 2^64 is never 0; 0 < e <= b).
 *   - b divides off, off = q * b: off * mul = q * e (mod 2^64), and q * e is
 *     far below 2^64, so it is < carved * e exactly when q < carved;
 *   - b does not divide off: off * mul mod 2^64 >= mul (Lemire, "Faster
 *     remainder by direct computation", for 32-bit dividends; the power of
 *     two case by direct expansion), and mul > 2^43 > carved * e, which is
 *     at most the span's size (<= 4 MiB).
 * So limit = carved * e, and a pointer below the first block wraps to a
 * huge off and fails as well. */
#include "hakmem_chunk_map.h"
#include "box/chunk_map_box.h"
#include "box/free_check_box.h"
#include "box/size_class_box.h"


uintptr_t hak_block_key;

void hak_free_check_init(void) {
    uintptr_t k = hak_os_random_word();
    /* Never 0 (a zeroed link must not decode to NULL in the hardened build),
     * and with high bits set, so a mark (key ^ address) looks like no
     * pointer and no small number. */
    hak_block_key = k | ((uintptr_t)1 << 63) | 1;
}

static uint64_t span_mul(uint32_t bs) {
    uint64_t mul = UINT64_MAX / bs + 1;
    if ((uint64_t)bs * mul == 0) mul++;          /* a power of two */
    return mul;
}

void hak_span_check_sync(const hak_slab_t *s, bool carved_only) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    hak_span_check_t c = { 0, 0 };
    uint32_t start = 0;
    if (s->tier != HAK_TIER_NONE) {
        uint32_t bs = hak_class_block_size[s->cls];
        start = (uint32_t)((uintptr_t)ss + hak_slab_data_offset(idx));
        c.mul = span_mul(bs);
        c.limit = (uint64_t)s->carved * (uint64_t)(bs * c.mul);
    }
    for (unsigned i = 0; i < s->npages; i++) {
        hak_slab_t *to = &ss->slabs[idx + i];
        __atomic_store_n(&to->check.limit, c.limit, __ATOMIC_RELAXED);
        if (carved_only) continue;
        to->check.mul = c.mul;
        to->check_start = start;
    }
}

/* A free the quick check refused: find out what is wrong and stop. */
void hak_free_check_fail(void *p) {
    const char *why;
    hak_superslab_t *ss = hak_ss_of(p);
    const hak_slab_t *d = hak_page_desc_of(p);
    uint64_t limit = __atomic_load_n(&d->check.limit, __ATOMIC_RELAXED);
    const hak_slab_t *s = &ss->slabs[ss->page_head[hak_page_of(p)]];
    uint32_t off = (uint32_t)(uintptr_t)p - d->check_start;
    if (limit == 0) {
        why = "free(): not a live block (double free, or a page with no slab)";
    } else if (off >= (uint32_t)HAK_CHUNK_SIZE) {
        why = "free(): pointer into a slab header";
    } else {
        uint32_t bs = hak_class_block_size[s->cls];
        if (off % bs != 0) why = "free(): pointer into the middle of a block";
        else if (!hak_block_start(p)) why = "free(): pointer to a block never allocated";
        /* (a block carved but never handed out also carries the mark) */
        else why = "free(): double free of";
    }
    hak_fatal(why, p);
}
