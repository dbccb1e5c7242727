/* snapshot.c — what every writer of the profiler starts from: a snapshot
 * of the live samples and of every stack's counts, taken one lock at a
 * time and kept in mappings of the dump's own (a dump never uses the
 * program's heap); the records sorted; the estimate per stack
 * (prof_sites_of: each sample weighted by 1 / the probability it had);
 * and the buffered output to a descriptor, with frames named by symbol,
 * that the heap profile (pprof.c) and the leak report (leaks.c) write
 * with.  No stdio: it may allocate.  README.md. */
#include "profile_internal.h"
#include "hakmem_options.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- numbers: no libm ------------------------------------------------------ */
/* 1 - exp(-x) for x >= 0 (the probability of sampling x / rate). */
static double sample_prob(double x) {
    if (x > 40.0) return 1.0;
    if (x < 1e-3) return x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x / 24.0)));
    int k = (int)(x / 0.69314718055994530942);
    double r = x - k * 0.69314718055994530942, term = 1.0, e = 1.0;   /* exp(-r) */
    for (int i = 1; i < 20; i++) {
        term *= -r / i;
        e += term;
    }
    while (k-- > 0) e *= 0.5;
    return 1.0 - e;
}

/* ---- the snapshot --------------------------------------------------------------- */
static void *vec_push(vec_t *v, size_t esz) {
    if ((v->n + 1) * esz > v->len) {
        size_t len = v->len != 0 ? v->len * 2 : 65536;
        char *p = map_zeroed(len);
        if (p == NULL) return NULL;
        if (v->p != NULL) {
            memcpy(p, v->p, v->n * esz);
            hak_os_unmap_unused(v->p, v->len);
        }
        v->p = p;
        v->len = len;
    }
    return v->p + v->n++ * esz;
}

static void vec_free(vec_t *v) {
    if (v->p != NULL) hak_os_unmap_unused(v->p, v->len);
    *v = (vec_t){ NULL, 0, 0 };
}

static bool copy_records(vec_t *v, const prof_tab_t *t) {
    for (size_t i = 0; i < t->cap; i++) {
        const prof_ent_t *e = &t->e[i];
        if (e->key == 0) continue;
        snap_rec_t *r = vec_push(v, sizeof *r);
        if (r == NULL) return false;
        *r = (snap_rec_t){ e->stack, e->a, e->b };
    }
    return true;
}

static bool copy_sites(vec_t *v, const prof_tab_t *t) {
    for (size_t i = 0; i < t->cap; i++) {
        const prof_ent_t *e = &t->e[i];
        if (e->key == 0) continue;
        snap_stack_t *s = vec_push(v, sizeof *s);
        if (s == NULL) return false;
        *s = (snap_stack_t){ e->stack, e->a, e->b };
    }
    return true;
}

void prof_snapshot_free(snapshot_t *sn) {
    vec_free(&sn->vrec);
    vec_free(&sn->vstk);
}

/* Every live sample (each heap's under its lock, one heap at a time) and
 * every stack with the samples all heaps have taken there. */
bool prof_snapshot_take(snapshot_t *sn) {
    memset(sn, 0, sizeof *sn);
    vec_t sites = { NULL, 0, 0 };
    bool ok = true;
    for (struct hak_prof *pl = __atomic_load_n(&prof_locals, __ATOMIC_ACQUIRE); pl != NULL && ok;
         pl = pl->next) {
        prof_lock(&pl->lock);
        ok = copy_records(&sn->vrec, &pl->rec) && copy_sites(&sites, &pl->site);
        prof_unlock(&pl->lock);
    }
    if (ok) {
        prof_lock(&prof_large_lock);
        ok = copy_records(&sn->vrec, &prof_large_rec);
        prof_unlock(&prof_large_lock);
    }
    if (ok) {
        /* every stack a site names is stored by now */
        prof_lock(&prof_stack_lock);
        for (prof_stack_t *s = prof_stack_all; s != NULL && ok; s = s->all_next)
            ok = vec_push(&sn->vstk, sizeof(snap_stack_t)) != NULL;
        if (ok)
            for (prof_stack_t *s = prof_stack_all; s != NULL; s = s->all_next)
                ((snap_stack_t *)sn->vstk.p)[s->id].stack = s;
        prof_unlock(&prof_stack_lock);
    }
    if (ok) {
        snap_stack_t *stk = (snap_stack_t *)sn->vstk.p;
        const snap_stack_t *site = (const snap_stack_t *)sites.p;
        for (size_t i = 0; i < sites.n; i++) {
            stk[site[i].stack->id].count += site[i].count;
            stk[site[i].stack->id].bytes += site[i].bytes;
        }
    }
    vec_free(&sites);
    if (!ok) {
        prof_snapshot_free(sn);
        return false;
    }
    sn->rec = (snap_rec_t *)sn->vrec.p;
    sn->nrec = sn->vrec.n;
    sn->stk = (snap_stack_t *)sn->vstk.p;
    sn->nstk = sn->vstk.n;
    sn->dropped = atomic_load_explicit(&prof_dropped, memory_order_relaxed);
    return true;
}

/* Heapsort (no allocation): by stack, then size. */
static bool rec_less(const snap_rec_t *a, const snap_rec_t *b) {
    return a->stack != b->stack ? (uintptr_t)a->stack < (uintptr_t)b->stack : a->size < b->size;
}

static void sift(snap_rec_t *a, size_t i, size_t n) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && rec_less(&a[c], &a[c + 1])) c++;
        if (!rec_less(&a[i], &a[c])) return;
        snap_rec_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

void prof_sort_records(snap_rec_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift(a, i, n);
    for (size_t end = n; end-- > 1;) {
        snap_rec_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift(a, 0, end);
    }
}

/* ---- output (out_t: profile_internal.h) ------------------------------------------------ */
void prof_out_flush(out_t *o) {
    if (o->n != 0 && !o->failed && !hak_os_file_write(o->fd, o->buf, o->n)) o->failed = true;
    o->n = 0;
}

void prof_out_str(out_t *o, const char *s, size_t len) {
    while (len > 0) {
        if (o->n == sizeof o->buf) prof_out_flush(o);
        size_t k = sizeof o->buf - o->n;
        if (k > len) k = len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

void prof_out_fmt(out_t *o, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) prof_out_str(o, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* A frame's name: symbol, else module+offset, else the address. */
void prof_out_frame(out_t *o, uintptr_t pc) {
    const char *sym, *file;
    uintptr_t file_base;
    if (hak_os_symbol_at(pc - 1, &sym, &file, &file_base)) {
        if (sym != NULL) {
            prof_out_str(o, sym, strlen(sym));
            return;
        }
        if (file != NULL && file[0] != '\0') {
            const char *base = strrchr(file, '/');
            base = base != NULL ? base + 1 : file;
            prof_out_fmt(o, "%s+0x%lx", base, (unsigned long)(pc - 1 - file_base));
            return;
        }
    }
    prof_out_fmt(o, "0x%lx", (unsigned long)(pc - 1));
}

/* ---- the estimate per stack ---------------------------------------------------------
 * Per stack: estimated live bytes and blocks, and samples.  sn->rec sorted. */
size_t prof_sites_of(snapshot_t *sn, site_t *out) {
    size_t n = 0;
    for (size_t i = 0; i < sn->nrec; i++) {
        if (n == 0 || out[n - 1].stack != sn->rec[i].stack)
            out[n++] = (site_t){ sn->rec[i].stack, 0, 0, 0 };
        double w = 1.0 / sample_prob((double)sn->rec[i].sampled / (double)hak_opt.profile_rate);
        out[n - 1].bytes += (double)sn->rec[i].size * w;
        out[n - 1].blocks += w;
        out[n - 1].samples++;
    }
    return n;
}

