/* Run-time options: every HAKMEM_* environment variable, parsed once at
 * start-up into hak_opt, which the hot paths read as plain variables. */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H

typedef struct {
    int verbose;            /* HAKMEM_VERBOSE: print the settings at start-up   */
    int batch_tier_size;    /* HAKMEM_BATCH_TIER_SIZE: refills per tier check   */
} hak_options_t;

extern hak_options_t hak_opt;

/* Parse the environment (once, from hak_init). */
void hak_options_init(void) __attribute__((visibility("hidden")));

#endif
