# hakmem — build, test, benchmark, install.
#   make                      libhakmem.so + libhakmem.a + libhakmem_hardened.so
#   make HARDENED=1           only libhakmem_hardened.so (checked frees, encoded lists)
#   make DEBUG=1              -O0 -g with internal assertions
#   make L2_RING=N L25_RING=M per-thread ring capacities of the L2 / L2.5 pools
#   make test                 every test (installs missing test dependencies), < 10 min
#   make check                quick suite for between commits (< 2 min): unit and
#                             stress tests once, the real programs
#   make soak                 every test under every setting, STRESS_SCALE=16
#                             (an hour or more on 2 CPUs)
#   make sanitize / fuzz      UBSan+TSan unit tests / libFuzzer (FUZZ_SECONDS=60)
#   make bench / bench-full   benchmarks, hakmem against other allocators
#                             (bench-full: the mimalloc-bench suite first, if present;
#                             latest.md carries its summary)
#   make install PREFIX=/usr/local DESTDIR=   libraries, header, pkg-config and
#                             CMake files, the hakmem launcher

# The one place the version is written: hakmem.pc, the CMake package and
# `hakmem --version` take it from here.
VERSION  := 0.1.0

CC       ?= gcc
PREFIX   ?= /usr/local
DESTDIR  ?=
L2_RING  ?= 48
L25_RING ?= 16
DEBUG    ?= 0
HARDENED ?= 0

BUILD    := build
OBJDIR   := $(BUILD)/obj

KNOBS    := -DPOOL_L2_RING_CAP=$(L2_RING) -DPOOL_L25_RING_CAP=$(L25_RING)
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
ifeq ($(DEBUG),1)
  OPT    := -O0 -g -DHAK_DEBUG=1
else
  OPT    := -O2 -g -DNDEBUG
endif
CFLAGS_LIB := -std=c11 -D_GNU_SOURCE -fPIC -pthread -fvisibility=hidden \
              -fno-semantic-interposition -ftls-model=initial-exec \
              -fno-builtin-malloc -fno-builtin-free \
              $(OPT) $(WARN) $(KNOBS) -Icore $(EXTRA_CFLAGS)

# core/*.c and the heap profiler's folder, core/profile/*.c (objects in
# $(OBJDIR)/profile/).  The profiler's objects link where its one file,
# core/hakmem_profile.c, did, before hakmem_purge.o: destructors run in the
# reverse of the link order, so the stats report at exit (hakmem_stats.c)
# still comes out before the profile and the leak report.
PROFILE_SRC := $(wildcard core/profile/*.c)
CORE_SRC := $(foreach f,$(wildcard core/*.c),$(if $(filter core/hakmem_purge.c,$(f)),$(PROFILE_SRC)) $(f))
CORE_HDR := $(wildcard core/*.h core/box/*.h core/profile/*.h)
CORE_OBJ := $(patsubst core/%.c,$(OBJDIR)/%.o,$(CORE_SRC))

.PHONY: all lib test check soak bench bench-full install uninstall clean benches tests sanitize fuzz

ifeq ($(HARDENED),1)
all: lib
else
all: lib benches
endif

# The hardened flavour (encoded free lists, checked frees): always built
# beside the default one; HARDENED=1 builds only it.
OBJDIR_H   := $(BUILD)/obj-hardened
CORE_OBJ_H := $(patsubst core/%.c,$(OBJDIR_H)/%.o,$(CORE_SRC))

ifeq ($(HARDENED),1)
lib: libhakmem_hardened.so hakmem
else
lib: libhakmem.so libhakmem.a libhakmem_hardened.so hakmem
endif

# The launcher, runnable from the build tree (./hakmem prog) and installed
# as it is: it finds the libraries beside itself or in ../lib.
hakmem: hakmem.in Makefile
	sed -e 's|@VERSION@|$(VERSION)|g' hakmem.in > $@.tmp && chmod 755 $@.tmp && mv $@.tmp $@

# The flags are recorded, so changing DEBUG, L2_RING, L25_RING, CC or
# EXTRA_CFLAGS rebuilds the objects.
FLAGS_STAMP := $(OBJDIR)/.cflags
$(shell mkdir -p $(OBJDIR); echo '$(CC) $(CFLAGS_LIB)' | cmp -s - $(FLAGS_STAMP) || \
        echo '$(CC) $(CFLAGS_LIB)' > $(FLAGS_STAMP))

$(OBJDIR)/%.o: core/%.c $(CORE_HDR) Makefile $(FLAGS_STAMP) | $(OBJDIR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) -c $< -o $@

$(OBJDIR):
	mkdir -p $@

FLAGS_STAMP_H := $(OBJDIR_H)/.cflags
$(shell mkdir -p $(OBJDIR_H); echo '$(CC) $(CFLAGS_LIB)' | cmp -s - $(FLAGS_STAMP_H) || \
        echo '$(CC) $(CFLAGS_LIB)' > $(FLAGS_STAMP_H))

$(OBJDIR_H)/%.o: core/%.c $(CORE_HDR) Makefile $(FLAGS_STAMP_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) -DHAK_HARDENED=1 -c $< -o $@

libhakmem_hardened.so: $(CORE_OBJ_H)
	$(CC) -shared -pthread -Wl,-z,now -o $@ $(CORE_OBJ_H) -ldl

# For the tests only: every unit and stress test also runs on the hardened build.
$(BUILD)/libhakmem_hardened.a: $(CORE_OBJ_H)
	rm -f $@ && ar rcs $@ $(CORE_OBJ_H)

libhakmem.so: $(CORE_OBJ)
	$(CC) -shared -pthread -Wl,-z,now -o $@ $(CORE_OBJ) -ldl

libhakmem.a: $(CORE_OBJ)
	rm -f $@ && ar rcs $@ $(CORE_OBJ)

# ---- benchmarks: NAME_system (libc malloc) and NAME_hakmem (-lhakmem) ----
BENCH_SRC   := $(wildcard bench/*.c)
BENCH_NAMES := $(patsubst bench/%.c,%,$(BENCH_SRC))
BENCH_BINS  := $(foreach b,$(BENCH_NAMES),$(BUILD)/bench/$(b)_system $(BUILD)/bench/$(b)_hakmem)
BENCH_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -pthread -Wall -Wextra -Icore

benches: $(BENCH_BINS)

BENCH_HDR := $(wildcard bench/*.h)

$(BUILD)/bench/%_system: bench/%.c $(BENCH_HDR) | $(BUILD)/bench
	$(CC) $(BENCH_CFLAGS) $< -o $@

$(BUILD)/bench/%_hakmem: bench/%.c $(BENCH_HDR) libhakmem.a | $(BUILD)/bench
	$(CC) $(BENCH_CFLAGS) $< -o $@ -L. -Wl,-Bstatic -lhakmem -Wl,-Bdynamic -ldl

$(BUILD)/bench:
	mkdir -p $@

bench: lib benches
	scripts/bench_compare.sh --quick

# then the mimalloc-bench suite's rows (docs/benchmarks/suite.md); without
# ../shared/mimalloc-bench that step says so and succeeds
bench-full: lib benches
	scripts/bench_compare.sh --suite mimalloc-bench
	scripts/bench_compare.sh

# ---- tests ---------------------------------------------------------------
# tests/unit/*.c and tests/stress/*.c are cmocka programs linked with
# libhakmem.a (build/tests/) and with the hardened build (build/tests-hardened/).
TEST_SRC  := $(wildcard tests/unit/*.c tests/stress/*.c tests/unit/*.cc)
TEST_BINS := $(patsubst tests/%,$(BUILD)/tests/%,$(basename $(TEST_SRC)))
TEST_BINS_H := $(patsubst tests/%,$(BUILD)/tests-hardened/%,$(basename $(TEST_SRC)))
TEST_CFLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -pthread -Wall -Wextra -Icore -Itests
TEST_CXXFLAGS := -std=c++17 -D_GNU_SOURCE -O1 -g -pthread -Wall -Wextra -Icore -Itests

tests: $(TEST_BINS) $(TEST_BINS_H)

# A shared library of a test's own: SRC (tests/*/lib/NAME.c) built as
# $(call test_so,SRC), $(BUILD)/tests/lib/libNAME.so, for both builds of the
# test.  $(call test_lib,TEST,SRC) links TEST with it, after libhakmem.a;
# $(call test_preload,TEST,SRC) gives TEST its path, HAK_TEST_PRELOAD, for a
# child it runs with LD_PRELOAD.
test_so = $(BUILD)/tests/lib/lib$(basename $(notdir $1)).so
define test_so_rule
$(call test_so,$1): $1
	@mkdir -p $$(dir $$@)
	$$(CC) $$(TEST_CFLAGS) -fPIC -shared $$< -o $$@ -ldl
endef
define test_lib
$(call test_so_rule,$2)
$(BUILD)/tests/$1 $(BUILD)/tests-hardened/$1: $(call test_so,$2)
$(BUILD)/tests/$1 $(BUILD)/tests-hardened/$1: \
    TEST_LDLIBS = $(call test_so,$2) -Wl,-rpath,$(abspath $(BUILD)/tests/lib)
endef
define test_preload
$(call test_so_rule,$2)
$(BUILD)/tests/$1 $(BUILD)/tests-hardened/$1: $(call test_so,$2)
$(BUILD)/tests/$1 $(BUILD)/tests-hardened/$1: \
    TEST_CFLAGS += -DHAK_TEST_PRELOAD='"$(abspath $(call test_so,$2))"'
endef
# test_atfork: the library's constructor registers fork handlers that
# allocate, before hakmem's own handlers exist.
$(eval $(call test_lib,stress/test_atfork,tests/stress/lib/atfork_prep.c))
# test_mallinfo_link: its mallinfo2 comes from a library linked after
# libhakmem.a.
$(eval $(call test_lib,unit/test_mallinfo_link,tests/unit/lib/mallinfo_probe.c))
# test_profile: a child with no unwinder (its dlopen refuses libgcc's).
$(eval $(call test_preload,unit/test_profile,tests/unit/lib/no_unwinder.c))

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*/*.h) libhakmem.a
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $< -o $@ -L. -Wl,-Bstatic -lhakmem -Wl,-Bdynamic $(TEST_LDLIBS) -lcmocka -ldl

$(BUILD)/tests-hardened/%: tests/%.c $(wildcard tests/*/*.h) $(BUILD)/libhakmem_hardened.a
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -DHAK_HARDENED=1 $< -o $@ $(BUILD)/libhakmem_hardened.a $(TEST_LDLIBS) -lcmocka -ldl

# The C++ test (operator new and delete) and the two programs it runs: the
# same source with no hakmem, for LD_PRELOAD, and with its own operator new
# beside libhakmem.a.
CXX_HELPERS := $(BUILD)/tests/lib/cxx_new_plain $(BUILD)/tests/lib/cxx_own_new \
               $(BUILD)/tests/lib/cxx_own_new_plain
$(BUILD)/tests/lib/cxx_new_plain: tests/unit/test_cxx_new.cc
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) -DCXX_PLAIN $< -o $@ -lcmocka -ldl
$(BUILD)/tests/lib/cxx_own_new_plain: tests/unit/test_cxx_new.cc
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) -DCXX_OWN_NEW $< -o $@ -ldl
$(BUILD)/tests/lib/cxx_own_new: tests/unit/test_cxx_new.cc libhakmem.a
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) -DCXX_OWN_NEW $< -o $@ -L. -Wl,-Bstatic -lhakmem -Wl,-Bdynamic -ldl

$(BUILD)/tests/%: tests/%.cc libhakmem.a $(CXX_HELPERS) | libhakmem.so
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) $< -o $@ -L. -Wl,-Bstatic -lhakmem -Wl,-Bdynamic -lcmocka -ldl

$(BUILD)/tests-hardened/%: tests/%.cc $(BUILD)/libhakmem_hardened.a $(CXX_HELPERS) | libhakmem_hardened.so
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) -DHAK_HARDENED=1 $< -o $@ $(BUILD)/libhakmem_hardened.a -lcmocka -ldl

# test, check and soak build with every CPU unless -j was given, and time
# themselves from the start (TEST_START): run_tests.sh prints the elapsed
# time on its last line, "N passed, N failed (elapsed XmYYs)".
NPROC      := $(shell nproc 2>/dev/null || echo 2)
PAR         = $$(case "$$MAKEFLAGS" in *-j*) ;; *) echo -j$(NPROC) ;; esac)
TEST_START := $(shell date +%s)

# run_tests.sh last: its summary line closes the output.  The two fuzzing
# runs share the CPUs (each is one process); their output follows in order.
test:
	scripts/install_deps.sh test
	$(MAKE) $(PAR) lib benches tests
	scripts/run_sanitizers.sh
	@mkdir -p $(BUILD); echo "scripts/run_fuzz.sh 15 & FUZZ_FLAVOUR=hardened scripts/run_fuzz.sh 10"; \
	  scripts/run_fuzz.sh 15 >$(BUILD)/fuzz-default.out 2>&1 & pid=$$!; \
	  FUZZ_FLAVOUR=hardened scripts/run_fuzz.sh 10 >$(BUILD)/fuzz-hardened.out 2>&1; rh=$$?; \
	  wait $$pid; rd=$$?; cat $(BUILD)/fuzz-default.out $(BUILD)/fuzz-hardened.out; \
	  [ $$rd -eq 0 ] && [ $$rh -eq 0 ]
	TEST_START=$(TEST_START) scripts/run_tests.sh

# Between commits: the unit tests and one pass of the stress tests (no
# setting, STRESS_SCALE=0.5), the real programs.
check:
	scripts/install_deps.sh test
	$(MAKE) $(PAR) lib tests
	TEST_START=$(TEST_START) scripts/run_tests.sh --quick

# Every row of the gate matrix runs every test, hardened rows too, with the
# stress tests at STRESS_SCALE=16 (set STRESS_SCALE for more or less).
soak:
	scripts/install_deps.sh test
	$(MAKE) $(PAR) lib tests
	TEST_START=$(TEST_START) scripts/run_tests.sh --soak

# The unit tests under UndefinedBehaviorSanitizer and ThreadSanitizer
# (hakmem built as a plain library, -DHAK_NO_INTERPOSE; default and hardened
# flavour); SAN_STRESS=1 adds the stress tests.
sanitize:
	scripts/run_sanitizers.sh

# libFuzzer on the hak_* API with a shadow model (FUZZ_SECONDS, default 60).
fuzz:
	scripts/run_fuzz.sh $(or $(FUZZ_SECONDS),60)

# ---- install ---------------------------------------------------------------
# Every file install writes, for uninstall (scripts/test_install.sh checks
# that nothing is left).  The CMake files find the prefix from their own
# place, and the launcher its libraries and helper, so DESTDIR trees work.
CMAKEDIR := $(PREFIX)/lib/cmake/hakmem
HELPERDIR := $(PREFIX)/libexec/hakmem
INSTALLED := $(PREFIX)/lib/libhakmem.so $(PREFIX)/lib/libhakmem_hardened.so \
             $(PREFIX)/lib/libhakmem.a $(PREFIX)/include/hakmem.h \
             $(PREFIX)/lib/pkgconfig/hakmem.pc $(PREFIX)/bin/hakmem \
             $(HELPERDIR)/heap_flamegraph.py \
             $(CMAKEDIR)/hakmem-config.cmake $(CMAKEDIR)/hakmem-config-version.cmake

install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	           $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(HELPERDIR) $(DESTDIR)$(CMAKEDIR)
	install -m 755 libhakmem.so $(DESTDIR)$(PREFIX)/lib/libhakmem.so
	install -m 755 libhakmem_hardened.so $(DESTDIR)$(PREFIX)/lib/libhakmem_hardened.so
	install -m 644 libhakmem.a $(DESTDIR)$(PREFIX)/lib/libhakmem.a
	install -m 644 core/hakmem.h $(DESTDIR)$(PREFIX)/include/hakmem.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' hakmem.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hakmem.pc
	install -m 755 hakmem $(DESTDIR)$(PREFIX)/bin/hakmem
	install -m 755 scripts/heap_flamegraph.py $(DESTDIR)$(HELPERDIR)/heap_flamegraph.py
	install -m 644 cmake/hakmem-config.cmake $(DESTDIR)$(CMAKEDIR)/hakmem-config.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' cmake/hakmem-config-version.cmake.in > $(DESTDIR)$(CMAKEDIR)/hakmem-config-version.cmake

# The directories only hakmem uses go too, when empty; the shared ones stay.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(HELPERDIR) 2>/dev/null

clean:
	rm -rf $(BUILD) libhakmem.so libhakmem.a libhakmem_hardened.so hakmem hakmem.tmp
