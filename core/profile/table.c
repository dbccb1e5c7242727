/* table.c — the profiler's tables and the stacks of the process.
 *
 * One kind of table (open addressing, profile_internal.h) holds a heap's
 * records and sites, the large blocks' records and the process's stacks;
 * here are its growth and deletion and the lookup by stack, and the store
 * of stacks: each distinct stack is kept once for the process, under
 * prof_stack_lock, which a heap takes only the first time it samples a
 * stack.  Records, stacks and their tables live in the profiler's own
 * mappings, never in the program's heap, and are bounded
 * (PROF_TABLE_BYTES, PROF_STACK_BYTES); past the bounds a sample is
 * dropped and counted (sample.c).  The small table functions the sampling
 * paths inline (tab_put, rec_find, stack_key) are in profile_internal.h.
 * README.md. */
#include "profile_internal.h"

#include <string.h>

_Atomic size_t prof_table_bytes;
__thread unsigned tls_prof_locks;

/* ---- tables ------------------------------------------------------------------------ */
/* Room for one more entry (tab_put then cannot fail); false past the bound. */
bool prof_tab_room(prof_tab_t *t) {
    if ((t->n + 1) * 2 <= t->cap) return true;
    size_t ncap = t->cap != 0 ? t->cap * 2 : PROF_TABLE_MIN, len = ncap * sizeof(prof_ent_t);
    if (atomic_fetch_add_explicit(&prof_table_bytes, len, memory_order_relaxed) + len > PROF_TABLE_BYTES) {
        atomic_fetch_sub_explicit(&prof_table_bytes, len, memory_order_relaxed);
        return false;
    }
    prof_ent_t *e = map_zeroed(len);
    if (e == NULL) {
        atomic_fetch_sub_explicit(&prof_table_bytes, len, memory_order_relaxed);
        return false;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (t->e[i].key == 0) continue;
        size_t j = tab_home(t->e[i].key, ncap);
        while (e[j].key != 0) j = (j + 1) & (ncap - 1);
        e[j] = t->e[i];
    }
    if (t->e != NULL) {
        hak_os_unmap_unused(t->e, t->cap * sizeof(prof_ent_t));
        atomic_fetch_sub_explicit(&prof_table_bytes, t->cap * sizeof(prof_ent_t), memory_order_relaxed);
    }
    t->e = e;
    t->cap = ncap;
    return true;
}

/* Linear probing's deletion: later entries of the run move back into the
 * hole when their home slot allows it. */
void prof_tab_remove(prof_tab_t *t, prof_ent_t *gone) {
    size_t mask = t->cap - 1, i = (size_t)(gone - t->e), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t->e[j].key == 0) break;
        size_t home = tab_home(t->e[j].key, t->cap);
        bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            t->e[i] = t->e[j];
            i = j;
        }
    }
    t->e[i].key = 0;
    t->n--;
}

/* The entry of the stack pc[0..n) in a table keyed by stack. */
prof_ent_t *prof_stack_find(const prof_tab_t *t, uint64_t key, const uintptr_t *pc, int n) {
    if (t->cap == 0) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = tab_home(key, t->cap); t->e[i].key != 0; i = (i + 1) & mask) {
        prof_ent_t *e = &t->e[i];
        if (e->key == key && e->stack->depth == (uint32_t)n &&
            memcmp(e->stack->pc, pc, (size_t)n * sizeof *pc) == 0)
            return e;
    }
    return NULL;
}

/* ---- the stacks of the process (prof_stack_lock) ------------------------------------ */
hak_lock_t prof_stack_lock;
static prof_tab_t stack_tab;
prof_stack_t *prof_stack_all;
static uint32_t stack_count;
static char *stack_cur, *stack_end;
static size_t stack_bytes;

/* Memory for stacks and the stack cache's nodes (at most a few hundred
 * bytes at a time), bounded; NULL past the bound.  Under prof_stack_lock. */
void *prof_stack_space(size_t len) {
    len = (len + 15) & ~(size_t)15;
    if ((size_t)(stack_end - stack_cur) < len) {
        if (stack_bytes + PROF_CHUNK > PROF_STACK_BYTES) return NULL;
        char *c = map_zeroed(PROF_CHUNK);
        if (c == NULL) return NULL;
        stack_bytes += PROF_CHUNK;
        stack_cur = c;
        stack_end = c + PROF_CHUNK;
    }
    void *p = stack_cur;
    stack_cur += len;
    return p;
}

/* The stack's entry, made if new; NULL past the bounds.  Under prof_stack_lock. */
prof_stack_t *prof_stack_intern(uint64_t key, const uintptr_t *pc, int n) {
    prof_ent_t *e = prof_stack_find(&stack_tab, key, pc, n);
    if (e != NULL) return e->stack;
    if (!prof_tab_room(&stack_tab)) return NULL;
    prof_stack_t *s = prof_stack_space(sizeof(prof_stack_t) + (size_t)n * sizeof *pc);
    if (s == NULL) return NULL;
    s->id = stack_count++;
    s->depth = (uint32_t)n;
    memcpy(s->pc, pc, (size_t)n * sizeof *pc);
    s->all_next = prof_stack_all;
    prof_stack_all = s;
    tab_put(&stack_tab, key)->stack = s;
    return s;
}

