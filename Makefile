# pemu: a GPU training cluster inside one process.
#   make            build build/pemu, the tests and the benchmarks
#   make run        the default demo
#   make test       the test suite
#   make asan/tsan  the test suite under ASan+UBSan / ThreadSanitizer
#   make fuzz       libFuzzer targets (clang, installed if missing); make fuzz-run runs
#                   each for FUZZ_SECONDS (20) from its seeds
#   make bench      benchmarks (CSV + summary into build/bench/)
#   make plots      PNG plots from the benchmark CSV (gnuplot, installed if missing)
#   make format     clang-format every source; make format-check only checks
#   make deps       install the Debian packages: OpenBLAS, cmocka, pkg-config and gnuplot
#                   (every build first installs what it needs itself, gnuplot aside, so
#                   make run and make test work on the first try on a fresh machine)

CC      ?= cc
BUILD   ?= build
V       ?= 0
Q       := $(if $(filter 1,$(V)),,@)
OPT     ?= -O3
PREFIX  ?= /usr/local
SANFLAGS ?=
# The Debian packages the build needs (OpenBLAS and cmocka, found by pkg-config), and all
# that `make deps` installs: those and gnuplot, which only `make plots` needs.
BUILD_DEBS := libopenblas-dev libcmocka-dev pkg-config
DEBS       := libopenblas-dev libcmocka-dev gnuplot-nox pkg-config

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wformat=2 -Werror

# PKG_CFLAGS, PKG_LIBS (OpenBLAS) and CMOCKA come from pkg-config, through $(BUILD)/pkg.mk:
# its rule (below) first installs what is missing, and make reads the file again once it
# has written it (make restarts when an included makefile was remade, before it builds
# anything), so the flags are right on the first try on a fresh machine, -j or not. Goals
# that compile nothing (or only call make again) leave the packages alone.
NOPKG_GOALS := deps build-deps format format-check clean asan tsan fuzz fuzz-run
ifneq ($(filter-out $(NOPKG_GOALS),$(or $(MAKECMDGOALS),all)),)
include $(BUILD)/pkg.mk
endif
# -fno-math-errno: nothing reads errno after a math function, and with it sqrtf can be
# vectorised (AdamW's loop); -fno-trapping-math: nothing reads the floating-point
# exception flags, and with it a loop with a select (models/vmath.h's exponential in GeLU)
# can be vectorised. IEEE results are the same under both, so no number changes; neither
# lets GCC reorder a sum (that is -fassociative-math, which pemu never uses).
CFLAGS_ALL := -std=c11 -D_POSIX_C_SOURCE=200809L $(OPT) -g $(WARN) -fno-math-errno \
              -fno-trapping-math -pthread \
              -Iemu -Imodels -Isrc \
              $(PKG_CFLAGS) $(SANFLAGS) $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -lm -pthread $(SANFLAGS) $(LDFLAGS)

LIB_SRC   := $(wildcard emu/*.c) $(wildcard models/*.c) $(filter-out src/cmd/pemu.c,$(wildcard src/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  := $(wildcard tests/test_*.c)
TESTS     := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCHES   := $(BENCH_SRC:%.c=$(BUILD)/%)
FORMAT_SRC := $(wildcard emu/*.[ch] models/*.[ch] src/*/*.[ch] tests/*.[ch] tests/fuzz/*.[ch] bench/*.[ch])

.PHONY: all run test golden-capture asan tsan fuzz fuzz-run bench plots deps build-deps format \
        format-check install clean
.SECONDARY:

all: $(BUILD)/pemu $(TESTS) $(BENCHES)

$(BUILD)/%.o: %.c $(wildcard emu/*.h models/*.h src/*/*.h tests/*.h bench/*.h)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libpemu.a: $(LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/pemu: $(BUILD)/src/cmd/pemu.o $(BUILD)/libpemu.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libpemu.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(CMOCKA) $(LDLIBS_ALL)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libpemu.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

# The default demo: train the small GPT on the built-in arithmetic corpus on one virtual
# A100, then let it write (RUN_STEPS=N trains for fewer steps). Its kernels use every core
# (OPENBLAS_NUM_THREADS=N or --host-threads N says how many; the numbers are the same).
RUN_STEPS ?= 300
run: $(BUILD)/pemu
	$(BUILD)/pemu train --model small --steps $(RUN_STEPS) --sample 200

# Every test program, then the golden check. All are built either way; TEST_RUN="..." runs
# only the programs it names, and PEMU_GOLDEN_FILTER=name only the golden cases with name.
TEST_RUN ?= $(TESTS)
test: $(BUILD)/pemu $(TESTS)
	@OPENBLAS_NUM_THREADS=1 PEMU=$(BUILD)/pemu sh tests/run.sh $(TEST_RUN)
	@sh tests/layers.sh
	@PEMU=$(BUILD)/pemu sh tests/golden.sh
	@PEMU=$(BUILD)/pemu sh tests/fold.sh

# Re-captures the golden outputs, for a change meant to alter numbers (say so in its commit).
golden-capture: $(BUILD)/pemu
	PEMU=$(BUILD)/pemu sh tests/golden.sh --capture

asan:
	PEMU_TEST_SCALE=small $(MAKE) BUILD=build/asan OPT=-O1 \
	  SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" test

tsan:
	PEMU_TEST_SCALE=small $(MAKE) BUILD=build/tsan OPT=-O1 SANFLAGS="-fsanitize=thread" test

# Fuzzing (tests/fuzz/*.c, libFuzzer): the command lines (run and verify; coll, train and
# plan), the size, time and
# bandwidth parsers and the schedule checker, built by clang under ASan+UBSan into
# build/fuzz/fuzz-NAME; fuzz-run runs each from tests/fuzz/seeds/NAME (its corpus grows in
# build/fuzz/corpus-NAME) and fails on the first crash, which it leaves as a crash-* file.
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))
FUZZ_SECONDS ?= 20
$(BUILD)/fuzz-%: tests/fuzz/%.c $(BUILD)/libpemu.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer -o $@ $^ $(LDLIBS_ALL)

fuzz:
	@sh tests/fuzz/deps.sh
	$(MAKE) BUILD=build/fuzz CC=clang OPT=-O1 \
	  SANFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
	  $(FUZZ_TARGETS:%=build/fuzz/fuzz-%)

fuzz-run: fuzz
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus-$$t; rm -f build/fuzz/crash-$$t-*; \
	  echo "fuzz-run: $$t for $(FUZZ_SECONDS) s"; \
	  OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 build/fuzz/fuzz-$$t \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -close_fd_mask=3 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crash-$$t- build/fuzz/corpus-$$t tests/fuzz/seeds/$$t \
	    > build/fuzz/log-$$t 2>&1; \
	  grep "stat::number_of_executed_units" build/fuzz/log-$$t; \
	  if ls build/fuzz/crash-$$t-* >/dev/null 2>&1; then tail -n 60 build/fuzz/log-$$t; \
	    echo "fuzz-run: $$t crashed: build/fuzz/crash-$$t-*" >&2; exit 1; fi; \
	done; echo "fuzz-run: no crash"

bench: $(BUILD)/pemu $(BENCHES)
	@mkdir -p $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/coll $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/train $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/overhead $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/pipeline $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/scale $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/oases $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/long_context $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/moe $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/fidelity $(BUILD)/bench/out
	PEMU=$(BUILD)/pemu $(BUILD)/bench/e2e $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/plan $(BUILD)/bench/out
	OPENBLAS_NUM_THREADS=1 $(BUILD)/pemu coll --op all-reduce -g 16 --nodes 2 -b 1K -e 256M -f 4 \
	  --dry-run --csv > $(BUILD)/bench/out/coll_busbw_2nodes.csv
	OPENBLAS_NUM_THREADS=1 $(BUILD)/pemu coll --op all-reduce -g 8 -b 1K -e 256M -f 4 \
	  --dry-run --csv > $(BUILD)/bench/out/coll_busbw_1node.csv

# The CSVs the plots read: make plots draws from them, and runs make bench first only if
# one is missing (make bench measures again).
PLOT_CSV := coll_busbw_1node coll_busbw_2nodes bubbles pipeline pipeline_memory oases \
	    long_context moe
plots: deps
	@for f in $(PLOT_CSV); do [ -f $(BUILD)/bench/out/$$f.csv ] || missing=1; done; \
	  if [ -n "$$missing" ]; then $(MAKE) bench; \
	  else echo "make plots: drawing the CSVs in $(BUILD)/bench/out (make bench measures again)"; fi
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/coll.gp
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/bubbles.gp
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/pipeline.gp
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/oases.gp
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/long_context.gp
	gnuplot -e "dir='$(BUILD)/bench/out'" plots/moe.gp
	@echo "wrote coll_busbw.png, bubbles.png, pipeline.png, pipeline_memory.png, oases.png, long_context.png and moe.png in $(BUILD)/bench/out"

# $(call install-debs,CHECK,PACKAGES,WHAT): unless the shell command CHECK succeeds,
# installs those of the Debian PACKAGES that dpkg says are missing (as root, or through
# sudo), or says exactly what to install; WHAT names them for a machine without dpkg.
define install-debs
@if $(1); then exit 0; fi; \
	if ! command -v dpkg >/dev/null 2>&1; then \
	  echo "pemu needs $(3);" \
	       "on Debian/Ubuntu: apt-get install --no-install-recommends $(2)" >&2; exit 1; fi; \
	missing=""; for p in $(2); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	[ -z "$$missing" ] && exit 0; \
	echo "pemu needs:$$missing"; \
	if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "install them with: apt-get install --no-install-recommends$$missing" >&2; exit 1; fi
endef
HAVE_BUILD := pkg-config --exists openblas cmocka 2>/dev/null
HAVE_ALL   := $(HAVE_BUILD) && command -v gnuplot >/dev/null 2>&1
NEED_BUILD := OpenBLAS and cmocka (found by pkg-config as openblas and cmocka)

# Installs everything: what the build needs, and gnuplot for `make plots`.
deps:
	$(call install-debs,$(HAVE_ALL),$(DEBS),$(NEED_BUILD) and gnuplot)

# Installs what the build needs (not gnuplot); every build runs it first, through pkg.mk.
build-deps:
	$(call install-debs,$(HAVE_BUILD),$(BUILD_DEBS),$(NEED_BUILD))

# The flags, from pkg-config once build-deps has run; rewritten when the Makefile changes.
$(BUILD)/pkg.mk: Makefile | build-deps
	@mkdir -p $(dir $@)
	@cflags=$$(pkg-config --cflags openblas) && libs=$$(pkg-config --libs openblas) && \
	  cmocka=$$(pkg-config --libs cmocka) || { \
	  echo "openblas or cmocka not found by pkg-config: run 'make deps'" \
	       "(apt-get install --no-install-recommends $(BUILD_DEBS))" >&2; exit 1; }; \
	printf 'PKG_CFLAGS := %s\nPKG_LIBS := %s\nCMOCKA := %s\n' "$$cflags" "$$libs" "$$cmocka" >$@

format:
	clang-format -i $(FORMAT_SRC)

format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

install: $(BUILD)/pemu
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/pemu $(DESTDIR)$(PREFIX)/bin/pemu

clean:
	rm -rf build
