/* leaks.c — the leak report (HAKMEM_PROFILE_LEAKS): at exit, on stderr
 * (only if descriptor 2 is still the file it was at start-up), the sampled
 * blocks never freed, grouped by the stack that allocated them, biggest
 * first, as estimates from the samples.  Written from a snapshot, like the
 * heap profile (snapshot.c), with no allocation.  docs/PROFILING.md,
 * README.md. */
#include "profile_internal.h"
#include "hakmem_options.h"

static void write_leaks(out_t *o, snapshot_t *sn) {
    size_t len = ((sn->nrec + 1) * sizeof(site_t) + 4095) & ~(size_t)4095;
    site_t *site = map_zeroed(len);
    if (site == NULL) return;
    size_t n = prof_sites_of(sn, site);
    double bytes = 0, blocks = 0;
    for (size_t i = 0; i < n; i++) bytes += site[i].bytes, blocks += site[i].blocks;
    prof_out_fmt(o, "hakmem: leak report (sampled: about 1 allocation per %d bytes allocated was "
                    "recorded; the figures are estimates from those samples, not exact counts)\n",
                 hak_opt.profile_rate);
    if (n == 0) {
        prof_out_fmt(o, "hakmem: no sampled block was left allocated at exit\n");
    } else {
        prof_out_fmt(o, "hakmem: about %llu bytes in %llu blocks never freed, from %zu call "
                        "site%s (%zu samples)\n",
                     (unsigned long long)round_u(bytes), (unsigned long long)round_u(blocks), n,
                     n == 1 ? "" : "s", sn->nrec);
    }
    /* Biggest first (selection of the maximum, at most 100 sites shown). */
    for (size_t shown = 0; shown < n && shown < 100; shown++) {
        size_t best = shown;
        for (size_t i = shown + 1; i < n; i++)
            if (site[i].bytes > site[best].bytes) best = i;
        site_t t = site[shown];
        site[shown] = site[best];
        site[best] = t;
        const site_t *s = &site[shown];
        prof_out_fmt(o, "hakmem: leak of about %llu bytes in %llu blocks (%zu sample%s), allocated at:\n",
                     (unsigned long long)round_u(s->bytes), (unsigned long long)round_u(s->blocks),
                     s->samples, s->samples == 1 ? "" : "s");
        for (uint32_t k = 0; k < s->stack->depth && k < 16; k++) {
            prof_out_fmt(o, "    #%u 0x%lx ", k, (unsigned long)s->stack->pc[k]);
            prof_out_frame(o, s->stack->pc[k]);
            prof_out_str(o, "\n", 1);
        }
    }
    if (n > 100) prof_out_fmt(o, "hakmem: ... and %zu smaller sites\n", n - 100);
    if (sn->dropped != 0)
        prof_out_fmt(o, "hakmem: %llu samples were dropped (profile tables full)\n",
                     (unsigned long long)sn->dropped);
    hak_os_unmap_unused(site, len);
}


/* At exit, from signal.c's profile_at_exit (prof_dump_lock held, the leak
 * report asked for and stderr unchanged). */
void prof_leak_report(void) {
    snapshot_t sn;
    out_t *o = map_zeroed(sizeof(out_t));
    if (o != NULL && prof_snapshot_take(&sn)) {
        o->fd = 2;
        prof_sort_records(sn.rec, sn.nrec);
        write_leaks(o, &sn);
        prof_out_flush(o);
        prof_snapshot_free(&sn);
    }
    if (o != NULL) hak_os_unmap_unused(o, sizeof *o);
}
