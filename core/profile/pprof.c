/* pprof.c — the heap profile on file: the gperftools heap-profile text
 * format (heap_v2, read by google-pprof, with the MAPPED_LIBRARIES the
 * platform layer lists) and a folded-stack text (PATH.folded) for flame
 * graphs, written at exit, by hak_profile_dump() and on
 * HAKMEM_PROFILE_SIGNAL (signal.c calls prof_dump_to).  PATH's %p is the
 * pid.  Files are opened by the platform layer: never through a symbolic
 * link, only regular files, never a cancellation point.  One dump at a
 * time (prof_dump_lock).  PATH.N, numbered, when HAKMEM_PROFILE_SIGNAL
 * came: its handler (signal.c) sets prof_dump_requested, and the next
 * sampled allocation (sample.c) or the exit writes it.  docs/PROFILING.md,
 * README.md. */
#include "profile_internal.h"
#include "hakmem_options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

hak_lock_t prof_dump_lock;            /* one dump at a time */
_Atomic int prof_dump_requested;      /* the signal came */
static _Atomic unsigned dump_seq;

/* ---- the writers -------------------------------------------------------------------- */
static void out_sink(void *o, const char *s, size_t len) { prof_out_str(o, s, len); }

static void out_stack_addrs(out_t *o, const prof_stack_t *s) {
    for (uint32_t i = 0; i < s->depth; i++)     /* google-pprof takes 1 off all but the first */
        prof_out_fmt(o, " 0x%016lx", (unsigned long)(i == 0 ? s->pc[0] - 1 : s->pc[i]));
    prof_out_str(o, "\n", 1);
}

static void write_heap_profile(out_t *o, snapshot_t *sn) {
    uint64_t live_n = sn->nrec, live_b = 0, all_n = 0, all_b = 0;
    for (size_t i = 0; i < sn->nrec; i++) live_b += sn->rec[i].size;
    for (size_t i = 0; i < sn->nstk; i++) {
        all_n += sn->stk[i].count;
        all_b += sn->stk[i].bytes;
    }
    prof_out_fmt(o, "heap profile: %6llu: %8llu [%6llu: %8llu] @ heap_v2/%d\n",
                 (unsigned long long)live_n, (unsigned long long)live_b, (unsigned long long)all_n,
                 (unsigned long long)all_b, hak_opt.profile_rate);
    /* In use: one line per stack and size (google-pprof scales each line
     * by the probability of its average size: exact with one size). */
    for (size_t i = 0; i < sn->nrec;) {
        size_t j = i;
        while (j < sn->nrec && sn->rec[j].stack == sn->rec[i].stack && sn->rec[j].size == sn->rec[i].size) j++;
        prof_out_fmt(o, "%6zu: %8llu [%6u: %8u] @", j - i,
                     (unsigned long long)((j - i) * sn->rec[i].size), 0u, 0u);
        out_stack_addrs(o, sn->rec[i].stack);
        i = j;
    }
    /* Allocated since the start: one line per stack. */
    for (size_t i = 0; i < sn->nstk; i++) {
        if (sn->stk[i].count == 0) continue;
        prof_out_fmt(o, "%6u: %8u [%6llu: %8llu] @", 0u, 0u, (unsigned long long)sn->stk[i].count,
                     (unsigned long long)sn->stk[i].bytes);
        out_stack_addrs(o, sn->stk[i].stack);
    }
    static const char maps_hdr[] = "\nMAPPED_LIBRARIES:\n";
    prof_out_str(o, maps_hdr, sizeof maps_hdr - 1);
    hak_os_mappings_text(out_sink, o);
}

static void write_folded(out_t *o, const site_t *site, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const prof_stack_t *s = site[i].stack;
        for (uint32_t k = s->depth; k-- > 0;) {
            prof_out_frame(o, s->pc[k]);
            if (k != 0) prof_out_str(o, ";", 1);
        }
        prof_out_fmt(o, " %llu\n", (unsigned long long)round_u(site[i].bytes));
    }
}

/* ---- the files -------------------------------------------------------------------- */
/* PATH with %p replaced by the pid (PATH.PID in a forked child when PATH
 * has no %p, so that parent and child never write the same file). */
pid_t prof_start_pid;                 /* set by hak_profile_init (signal.c) */

static bool expand_path(const char *tmpl, const char *suffix, char *out, size_t cap) {
    size_t n = 0;
    bool has_pid = false;
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (const char *s = tmpl; *s; s++) {
        const char *piece = s;
        size_t len = 1;
        if (s[0] == '%' && s[1] == 'p') {
            piece = pid;
            len = strlen(pid);
            has_pid = true;
            s++;
        }
        if (n + len >= cap) return false;
        memcpy(out + n, piece, len);
        n += len;
    }
    if (!has_pid && getpid() != prof_start_pid) {
        if (n + 1 + strlen(pid) >= cap) return false;
        out[n++] = '.';
        memcpy(out + n, pid, strlen(pid));
        n += strlen(pid);
    }
    if (n + strlen(suffix) >= cap) return false;
    memcpy(out + n, suffix, strlen(suffix) + 1);
    return true;
}

/* NULL with the reason in *err. */
static out_t *out_open(const char *path, int *err) {
    out_t *o = map_zeroed(sizeof(out_t));
    if (o == NULL) {
        *err = ENOMEM;
        return NULL;
    }
    o->fd = hak_os_file_create(path, err);
    if (o->fd < 0) {
        hak_os_unmap_unused(o, sizeof *o);
        return NULL;
    }
    return o;
}

static bool out_close(out_t *o) {
    prof_out_flush(o);
    bool ok = !o->failed;
    if (!hak_os_file_close(o->fd)) ok = false;
    hak_os_unmap_unused(o, sizeof *o);
    return ok;
}

/* "hakmem: cannot write the heap profile FILE: ERRNO-NAME" on stderr. */
static void say_cannot_write(const char *file, int err) {
    char line[1200];
    const char *why = strerrorname_np(err);     /* strerror may allocate */
    snprintf(line, sizeof line, "hakmem: cannot write the heap profile %s: %s%s\n", file,
             why != NULL ? why : "error", err == ENXIO ? " (not a regular file)" : "");
    hak_os_file_write(2, line, strlen(line));
}

/* The profile and PATH.folded (prof_dump_lock held).  0, or -1 with errno;
 * with `say`, a failure is also told on stderr, naming the file that failed.
 * Every call it makes returns promptly and none is a cancellation point:
 * prof_dump_lock never stays held. */
int prof_dump_to(const char *tmpl, const char *suffix, bool say) {
    char path[1100], folded[1120];
    if (!expand_path(tmpl, suffix, path, sizeof path) ||
        snprintf(folded, sizeof folded, "%s.folded", path) >= (int)sizeof folded) {
        if (say) say_cannot_write(tmpl, ENAMETOOLONG);
        errno = ENAMETOOLONG;
        return -1;
    }
    snapshot_t sn;
    if (!prof_snapshot_take(&sn)) {
        if (say) say_cannot_write(path, ENOMEM);
        errno = ENOMEM;
        return -1;
    }
    prof_sort_records(sn.rec, sn.nrec);
    int err = 0;
    const char *failed = path;
    out_t *o = out_open(path, &err);
    if (o != NULL) {
        write_heap_profile(o, &sn);
        if (!out_close(o)) err = EIO;
    }
    if (err == 0) {
        /* the sites reuse the record snapshot's tail: at most one per record */
        size_t len = (sn.nrec + 1) * sizeof(site_t);
        site_t *site = map_zeroed((len + 4095) & ~(size_t)4095);
        failed = folded;
        out_t *f = site != NULL ? out_open(folded, &err) : NULL;
        if (site == NULL) err = ENOMEM;
        if (f != NULL) {
            write_folded(f, site, prof_sites_of(&sn, site));
            if (!out_close(f)) err = EIO;
        }
        if (site != NULL) hak_os_unmap_unused(site, (len + 4095) & ~(size_t)4095);
    }
    prof_snapshot_free(&sn);
    if (err == 0) return 0;
    if (say) say_cannot_write(failed, err);
    errno = err;
    return -1;
}

/* The next numbered profile, PATH.N (prof_dump_lock held). */
void prof_dump_numbered(void) {
    char suffix[24];
    snprintf(suffix, sizeof suffix, ".%u",
             atomic_fetch_add_explicit(&dump_seq, 1, memory_order_relaxed) + 1);
    prof_dump_to(hak_opt.profile, suffix, true);
}

/* At a sampled allocation after the signal: PATH.N.  Never waits for
 * another dump (that thread may hold the loader's lock we would need). */
void prof_dump_on_signal(void) {
    if (!atomic_exchange_explicit(&prof_dump_requested, 0, memory_order_relaxed)) return;
    if (hak_opt.profile[0] == '\0' || !hak_trylock(&prof_dump_lock)) return;
    int saved = errno;
    prof_dump_numbered();
    hak_unlock(&prof_dump_lock);
    errno = saved;
}

int hak_profile_dump(const char *path) {
    if (!hak_profile_on) {
        errno = ENOTSUP;
        return -1;
    }
    if (path == NULL || path[0] == '\0') path = hak_opt.profile;
    if (path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    hak_lock(&prof_dump_lock);
    int rc = prof_dump_to(path, "", false);
    int err = errno;
    hak_unlock(&prof_dump_lock);
    errno = err;
    return rc;
}

