/* The options table: every run-time setting, its default, its range and
 * what it does, in one place.  Parsed once at start-up (getenv does not
 * allocate); an invalid value and an unknown HAKMEM_* name each get one line
 * on stderr, and the program goes on with the default.  A secure-execution
 * process (set-user-ID) keeps every default. */
#include "hakmem_config.h"
#include "hakmem_options.h"
#include "hakmem_os.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Defaults before start-up too: early allocations see the same values. */
hak_options_t hak_opt = {
    .verbose = 0,
    .batch_state_check = 64,
    .l2_ring_cap = POOL_L2_RING_CAP,
    .l25_ring_cap = POOL_L25_RING_CAP,
    .ss_lookup_kind = HAK_LOOKUP_FLAT,
    .purge_delay_ms = HAK_PURGE_DELAY_DEFAULT,
    .purge_thread = HAK_PURGE_THREAD_AUTO,
    .tiny_c2_local_cache = 1,
    .profile = "",
    .profile_rate = 512 * 1024,
    .profile_unwinder = HAK_UNWIND_LIBGCC,
};

/* HAKMEM_PROFILE's value, copied: the environment may change later. */
#define PATH_MAX_LEN 1024
static char profile_path[PATH_MAX_LEN];

typedef struct {
    const char *name;
    int *value;
    int def, min, max;
    const char *help;
    const char *const *words;   /* named values (index = value), or NULL */
    const char **text;          /* a text setting (value NULL): up to
                                   PATH_MAX_LEN - 1 characters, or NULL */
} option_t;

static const char *const lookup_kinds[] = { "flat", "radix", NULL };
static const char *const unwinders[] = { "libunwind", "libgcc", NULL };
static const char *const purge_threads[] = { "0", "1", "auto", NULL };

static const option_t options[] = {
    { "HAKMEM_VERBOSE", &hak_opt.verbose, 0, 0, 1,
      "1: print the effective settings on stderr at start-up", NULL, NULL },
    { "HAKMEM_STATS", &hak_opt.stats, 0, 0, 1,
      "1: count allocations, frees, remote frees and refills per class; report at exit", NULL, NULL },
    { "HAKMEM_BATCH_TIER_SIZE", &hak_opt.batch_state_check, 64, 1, 256,
      "refills of a size class between checks of its SuperSlab's state (1: every refill)", NULL, NULL },
    { "HAKMEM_L2_RING_CAP", &hak_opt.l2_ring_cap, POOL_L2_RING_CAP, 1, POOL_L2_RING_CAP,
      "slots of each per-thread L2 ring (at most the compiled POOL_L2_RING_CAP)", NULL, NULL },
    { "HAKMEM_L25_RING_CAP", &hak_opt.l25_ring_cap, POOL_L25_RING_CAP, 1, POOL_L25_RING_CAP,
      "slots of each per-thread L2.5 ring (at most the compiled POOL_L25_RING_CAP)", NULL, NULL },
    { "HAKMEM_TINY_C2_LOCAL_CACHE", &hak_opt.tiny_c2_local_cache, 1, 0, 1,
      "0: the 32-byte class keeps no per-thread cache (its mallocs and frees go to the slab)",
      NULL, NULL },
    { "HAKMEM_MID_INUSE_DEFERRED", &hak_opt.mid_inuse_deferred, 0, 0, 1,
      "1: L2 ring flushes batch the slabs' in-use decrements per slab", NULL, NULL },
    { "HAKMEM_SS_LOOKUP_KIND", &hak_opt.ss_lookup_kind, HAK_LOOKUP_FLAT, 0, 1,
      "how free() maps a pointer to its chunk: flat (one byte map) or radix (two-level table)",
      lookup_kinds, NULL },
    { "HAKMEM_PURGE_DELAY_MS", &hak_opt.purge_delay_ms, HAK_PURGE_DELAY_DEFAULT, 0, 3600000,
      "ms free memory stays resident unused before it goes back to the OS (0: at once)", NULL, NULL },
    { "HAKMEM_PURGE_THREAD", &hak_opt.purge_thread, HAK_PURGE_THREAD_AUTO, 0, 2,
      "who gives memory back by time: auto (a purger thread, none under a seccomp filter), "
      "1 (a thread even there) or 0 (never a thread: the allocation and free paths do it)",
      purge_threads, NULL },
    { "HAKMEM_PROFILE", NULL, 0, 0, 0,
      "heap profile file (%p: the pid): sample allocations, write the live heap at exit",
      NULL, &hak_opt.profile },
    { "HAKMEM_PROFILE_RATE", &hak_opt.profile_rate, 512 * 1024, 1, 1 << 30,
      "mean bytes allocated between two heap-profile samples", NULL, NULL },
    { "HAKMEM_PROFILE_SIGNAL", &hak_opt.profile_signal, 0, 0, 64,
      "signal number that writes a numbered heap profile (0: none)", NULL, NULL },
    { "HAKMEM_PROFILE_LEAKS", &hak_opt.profile_leaks, 0, 0, 1,
      "1: sample allocations and report the sampled blocks never freed at exit (stderr)", NULL, NULL },
    { "HAKMEM_PROFILE_UNWINDER", &hak_opt.profile_unwinder, HAK_UNWIND_LIBGCC, 0, 1,
      "accepted for older settings: libgcc walks the stacks either way (libunwind's pipe could "
      "be the program's descriptors)",
      unwinders, NULL },
};
#define NOPTIONS (sizeof options / sizeof options[0])

static void say(const char *line) {
    ssize_t w = write(2, line, strlen(line));
    (void)w;
}

static bool parse_int(const char *s, long *out) {
    char *end;
    if (*s == '\0') return false;
    long v = strtol(s, &end, 10);
    if (*end != '\0') return false;
    *out = v;
    return true;
}

extern char **environ;

/* A value quoted in a warning: at most 64 characters, so the line always
 * fits and ends with its newline. */
#define QUOTE_MAX 64
#define QUOTE(s) (strlen(s) > QUOTE_MAX ? QUOTE_MAX : (int)strlen(s)), (s), \
                 (strlen(s) > QUOTE_MAX ? "..." : "")

void hak_options_init(void) {
    char line[320];
    /* A set-user-ID (or capability-raising) program's environment is its
     * caller's: a setting could make it write a file where its caller may
     * not, or read its memory map out.  As glibc does with its tunables,
     * every setting is ignored there, without a word (stderr may not be
     * the caller's to read either). */
    if (hak_os_secure_exec()) return;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const option_t *o = &options[i];
        if (o->text != NULL) {
            *o->text = "";
            const char *s = getenv(o->name);
            if (s == NULL) continue;
            if (strlen(s) < PATH_MAX_LEN) {
                memcpy(profile_path, s, strlen(s) + 1);
                *o->text = profile_path;
            } else {
                snprintf(line, sizeof line, "hakmem: %s=%.*s%s is longer than %d characters; ignored\n",
                         o->name, QUOTE(s), PATH_MAX_LEN - 1);
                say(line);
            }
            continue;
        }
        *o->value = o->def;
        const char *s = getenv(o->name);
        if (s == NULL) continue;
        long v;
        if (o->words != NULL) {
            int found = -1;
            for (int w = 0; o->words[w] != NULL; w++)
                if (strcmp(s, o->words[w]) == 0) found = w;
            if (found >= 0) {
                *o->value = found;
            } else {
                char words[96] = "";
                for (int w = 0; o->words[w] != NULL; w++) {
                    if (w) strncat(words, "|", sizeof words - strlen(words) - 1);
                    strncat(words, o->words[w], sizeof words - strlen(words) - 1);
                }
                snprintf(line, sizeof line, "hakmem: %s=%.*s%s is not one of %s; using %s\n",
                         o->name, QUOTE(s), words, o->words[o->def]);
                say(line);
            }
            continue;
        }
        bool number = parse_int(s, &v);
        if (number && v >= o->min && v <= o->max) {
            *o->value = (int)v;
        } else {
            snprintf(line, sizeof line, "hakmem: %s=%.*s%s is %s %d..%d; using %d\n", o->name,
                     QUOTE(s), number ? "outside" : "not a number in", o->min, o->max, o->def);
            say(line);
        }
    }
    /* A misspelt name is the commonest tuning mistake: name it. */
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "HAKMEM_", 7) != 0) continue;
        size_t len = strcspn(*e, "=");
        bool known = false;
        for (size_t i = 0; i < NOPTIONS && !known; i++)
            known = strlen(options[i].name) == len && strncmp(options[i].name, *e, len) == 0;
        if (!known) {
            snprintf(line, sizeof line, "hakmem: unknown setting %.*s%s ignored\n",
                     (int)(len > QUOTE_MAX ? QUOTE_MAX : len), *e, len > QUOTE_MAX ? "..." : "");
            say(line);
        }
    }
    if (hak_opt.verbose) {
        for (size_t i = 0; i < NOPTIONS; i++) {
            const option_t *o = &options[i];
            if (o->text != NULL)
                snprintf(line, sizeof line, "hakmem: %s=%.*s%s  (%s)\n", o->name, QUOTE(*o->text),
                         o->help);
            else if (o->words != NULL)
                snprintf(line, sizeof line, "hakmem: %s=%s  (%s)\n", o->name, o->words[*o->value],
                         o->help);
            else
                snprintf(line, sizeof line, "hakmem: %s=%d  (%s)\n", o->name, *o->value, o->help);
            say(line);
        }
        snprintf(line, sizeof line, "hakmem: built with POOL_L2_RING_CAP=%d POOL_L25_RING_CAP=%d\n",
                 POOL_L2_RING_CAP, POOL_L25_RING_CAP);
        say(line);
    }
}
