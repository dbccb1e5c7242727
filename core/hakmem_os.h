/* The platform layer: everything hakmem asks of the operating system.
 * hakmem_os_linux.c implements it for Linux and is the only file that maps
 * memory, asks for random bytes or looks up symbols; porting hakmem means
 * writing this file again.
 *
 * Contract, for every function below except those marked ALLOCATES:
 *   - it never calls malloc or any other hakmem function, so it may be
 *     called with any hakmem lock held and before hakmem is initialised;
 *   - it leaves errno as it found it (failure is in the return value);
 *   - lengths and addresses of mappings are multiples of 4096, alignments
 *     powers of two; memory mapped is readable, writable and zero.
 * Counting what goes back to the OS (hak_released_bytes) is done here,
 * where it happens, for every call that gives back memory hakmem used. */
#ifndef HAKMEM_OS_H
#define HAKMEM_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HAK_OS_INTERNAL __attribute__((visibility("hidden")))

/* ---- memory ---------------------------------------------------------------- */
/* New anonymous memory, NULL if the OS refuses. */
HAK_OS_INTERNAL void *hak_os_map(size_t len);
/* The same, aligned to `align`. */
HAK_OS_INTERNAL void *hak_os_map_aligned(size_t len, size_t align);
/* Unmap memory hakmem used (counted as given back) / never used or already
 * decommitted (not counted). */
HAK_OS_INTERNAL void  hak_os_unmap(void *p, size_t len);
HAK_OS_INTERNAL void  hak_os_unmap_unused(void *p, size_t len);
/* Give the pages back but keep the range mapped: it reads as zero after.
 * False if the OS refused (locked memory, a sandbox): the pages stay, with
 * their contents. */
HAK_OS_INTERNAL bool  hak_os_decommit(void *p, size_t len);
/* Replace [base, base + len), mapped, by an inaccessible reservation that
 * takes no memory (counted as given back); false if the OS refuses. */
HAK_OS_INTERNAL bool  hak_os_reserve_over(void *base, size_t len);
/* Reserve [base, base + len), unmapped, inaccessible, unless something else
 * has been mapped there meanwhile; false if it could not be had. */
HAK_OS_INTERNAL bool  hak_os_reserve_at(void *base, size_t len);
/* The most address space the process may map (its limit), 0 if unlimited. */
HAK_OS_INTERNAL size_t hak_os_address_limit(void);
/* Grow the mapping [base, base + len) to new_len where it stands; false if
 * the pages after it are taken. */
HAK_OS_INTERNAL bool  hak_os_grow_in_place(void *base, size_t len, size_t new_len);
/* Shrink it back (cannot fail). */
HAK_OS_INTERNAL void  hak_os_shrink_in_place(void *base, size_t len, size_t new_len);
/* Move the pages of [from, from + len) to [to, to + len), which is mapped
 * and is replaced; the old range ends unmapped.  Nothing is copied or
 * faulted in, except that a range spanning several mappings, which the OS
 * may refuse to move at once, goes piece by piece (split at multiples of
 * `unit`, where every mapping boundary in it lies), and a piece of one
 * unit that still cannot be moved is copied. */
HAK_OS_INTERNAL void  hak_os_move_pages(void *from, size_t len, void *to, size_t unit);
/* Ask for huge pages in [p, p + len) (on), or for none (off): a hint to the
 * OS, which faults in a whole huge page at once where it can.  Whether the
 * OS took the hint. */
HAK_OS_INTERNAL bool  hak_os_hugepages(void *p, size_t len, bool on);
/* Whether the OS gives huge pages where hak_os_hugepages asks for them
 * (read once, then cached). */
HAK_OS_INTERNAL bool  hak_os_hugepages_work(void);
/* Make [p, p + len), mapped, read as zero by giving its pages back (not
 * counted as given back: the range is in use, its pages come back, zero,
 * where it is touched).  False if the OS refused, now or before (locked
 * memory, a sandbox): the range is unchanged, and the caller writes the
 * zeros itself. */
HAK_OS_INTERNAL bool  hak_os_zero_pages(void *p, size_t len);
/* Size of the OS's pages. */
HAK_OS_INTERNAL size_t hak_os_page_size(void);

/* Bytes given back to the OS, and calls that gave them (hak_get_info). */
HAK_OS_INTERNAL extern _Atomic uint64_t hak_released_bytes;
HAK_OS_INTERNAL extern _Atomic uint64_t hak_decommit_count;

/* ---- time, threads, randomness ----------------------------------------------- */
/* A millisecond clock that is cheap to read (coarse, monotonic). */
HAK_OS_INTERNAL uint32_t hak_now_ms(void);
/* Sleep until *word changes from 0 or ms pass (hak_os_wake), then clear it. */
HAK_OS_INTERNAL void  hak_os_sleep_on(_Atomic int *word, uint32_t ms);
HAK_OS_INTERNAL void  hak_os_wake(_Atomic int *word);
/* Threads in the process, less a main thread that has ended; -1 unknown. */
HAK_OS_INTERNAL long  hak_os_thread_count(void);
/* A random word: from the OS, or from the clock when it has none to give. */
HAK_OS_INTERNAL uintptr_t hak_os_random_word(void);
/* Start a detached thread running fn(arg) on a stack of stack_size bytes,
 * with every signal blocked (it never runs a program's handler); false if
 * it cannot.  ALLOCATES (pthread_create may call malloc). */
HAK_OS_INTERNAL bool  hak_os_thread_start(void *(*fn)(void *), void *arg, size_t stack_size);

/* Whether the process runs with privileges its caller lacks (set-user-ID
 * or set-group-ID, file capabilities: the kernel's AT_SECURE). */
HAK_OS_INTERNAL bool  hak_os_secure_exec(void);
/* Whether the calling thread runs under a seccomp filter (which may kill
 * the process for a system call hakmem would make, such as clone); asked
 * anew at each call. */
HAK_OS_INTERNAL bool  hak_os_sandboxed(void);

/* ---- files and signals (the heap profiler) ---------------------------------------
 * These may run inside malloc: none is a cancellation point (each turns the
 * calling thread's cancellation off for its system calls and restores it),
 * and none blocks on a FIFO or a device. */
/* The process's mappings as text, in the format of Linux's /proc/self/maps
 * (what pprof reads), handed to sink(ctx, text, len) piece by piece;
 * nothing if they cannot be read. */
HAK_OS_INTERNAL void  hak_os_mappings_text(void (*sink)(void *ctx, const char *text, size_t len),
                                           void *ctx);
/* A regular file at path, created (mode 0600) or truncated, open for writing
 * and closed on exec; -1 with the reason in *err if not.  Never through a
 * symbolic link at path (ELOOP), never anything but a regular file (ENXIO:
 * a FIFO, a device, a socket; a directory is EISDIR). */
HAK_OS_INTERNAL int   hak_os_file_create(const char *path, int *err);
/* All of buf to fd (interrupted writes resumed); false on an error. */
HAK_OS_INTERNAL bool  hak_os_file_write(int fd, const void *buf, size_t len);
/* Close fd; false if the close reports an error. */
HAK_OS_INTERNAL bool  hak_os_file_close(int fd);
/* Catch signal sig with handler (interrupted calls restart, no signal
 * blocked meanwhile); false if it cannot be caught. */
HAK_OS_INTERNAL bool  hak_os_catch_signal(int sig, void (*handler)(int));

/* ---- symbols ------------------------------------------------------------------- *
 * ALLOCATES, all four: dlsym, dlopen and dladdr may call malloc (hakmem
 * again: call them with no hakmem lock held) and may change errno (a
 * caller that must keep it saves it). */
/* The next definition of `name` after hakmem's (libc's malloc_usable_size). */
HAK_OS_INTERNAL void *hak_os_next_symbol(const char *name);
/* A shared library loaded privately (its symbols do not replace any), and
 * a symbol in it; NULL if either is not there. */
HAK_OS_INTERNAL void *hak_os_library(const char *file);
HAK_OS_INTERNAL void *hak_os_library_symbol(void *lib, const char *name);
/* The symbol and the loaded file that hold an address (each NULL if not
 * known), and where the file is loaded; false if none does. */
HAK_OS_INTERNAL bool  hak_os_symbol_at(uintptr_t addr, const char **sym, const char **file,
                                       uintptr_t *file_base);

/* ---- spin locks ------------------------------------------------------------------
 * hakmem's locks guard only slow paths.  While a thread runs fork() it holds
 * those its prepare handler takes (hakmem_init.c: the global ones, the
 * shared heaps', the profiler's), from that handler to its parent or child
 * handler; other libraries' fork handlers run before or after ours in any
 * order and may allocate, so in that thread the locks let it through
 * (hak_tls_fork_locked) instead of waiting for itself.  Other threads' heap
 * locks are not among those: a purge keeps off their heaps meanwhile
 * (hakmem_purge.c, heap_in_reach). */
typedef struct { _Atomic int held; } hak_lock_t;
extern __thread bool hak_tls_fork_locked;
HAK_OS_INTERNAL void hak_lock(hak_lock_t *l);
HAK_OS_INTERNAL bool hak_trylock(hak_lock_t *l);
/* What marks the calling thread as a lock's holder (hak_heap_lock): the
 * address of one of its thread-locals. */
static inline const void *hak_lock_self(void) { return &hak_tls_fork_locked; }
static inline void hak_unlock(hak_lock_t *l) {
    if (__builtin_expect(hak_tls_fork_locked, 0)) return;
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- stopping ------------------------------------------------------------------ */
/* "hakmem: <what> 0x<p>" on descriptor 2, then abort. */
HAK_OS_INTERNAL void  hak_fatal(const char *what, const void *p) __attribute__((noreturn, cold));

#endif /* HAKMEM_OS_H */
