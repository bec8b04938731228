# Makefile - a thin wrapper over CMake for the common commands (see README.md).
#
#   make run        configure (Release, build/), build, run the main job
#   make test       configure, build, run every test with ctest (all cores)
#   make sanitize   the same in build-asan/ with ASan + UBSan on everything
#   make bench      build and run bench/*
#   make memcheck   build-valgrind/ (Release, CPU only): every test under valgrind memcheck
#   make fuzz       build-fuzz/ with Clang + libFuzzer + ASan + UBSan; run each
#                   tests/fuzz/fuzz_<name> for FUZZ_SECONDS (default 60) from its corpus
#   make tsan       build-tsan/ (Clang, CPU only): every test under ThreadSanitizer
#   make install    install to PREFIX (default /usr/local)
#   make r-package  the R source package build-r/resgrad_<version>.tar.gz (r/bundle.sh)
#   make r-check    make r-package, then R CMD check --as-cran on it (docs/r.md)
#   make clean      remove build/, build-asan/, build-valgrind/, build-fuzz/, build-tsan/
#
# Extra CMake options go in CMAKE_FLAGS, e.g. make test CMAKE_FLAGS=-DRG_BLAS=OFF.
# Arguments for the main job go in ARGS, e.g. make run ARGS="--steps 500"; another
# program of the build can be run instead with MAIN, e.g. make run MAIN=mlp.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
VALGRIND_BUILD ?= build-valgrind
VALGRIND ?= valgrind
# Tests that cannot run under valgrind: test_cuda needs a GPU; test_crash measures how a
# killed process leaves its checkpoint, against a clock valgrind slows 50-fold;
# installed_runs is a shell command (valgrind would check the shell, not resgrad).
# The *_avx2 reruns would repeat their plain runs: valgrind has no AVX-512, so under it the
# default table is AVX2 already. AVX2 code runs several times slower than the portable
# table under valgrind, and test_nn's training took 459 s (test_nn_portable 62 s): its
# portable run stands for it, and test_ops and test_gemm check the AVX2 kernels.
MEMCHECK_EXCLUDE ?= ^(test_cuda|test_crash|installed_runs|test_nn|test_(ops|nn|gemm)_avx2)$$
FUZZ_CC    ?= clang
TSAN_CC    ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS ?=
PREFIX     ?= /usr/local
CMAKE      ?= cmake
CTEST      ?= ctest
CMAKE_FLAGS ?=
ARGS       ?=
JOBS       ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

# The main job: tools/resgrad-train when it exists, else the MLP example.
MAIN ?= $(if $(wildcard tools/resgrad-train/main.c),resgrad-train,mlp)

.PHONY: all configure build run test sanitize memcheck fuzz tsan bench install clean \
  r-package r-check

all: build

configure:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	$(CMAKE) --build $(BUILD) --parallel $(JOBS)

run: build
	$(abspath $(BUILD))/$(MAIN) $(ARGS)

test: build
	$(CTEST) --test-dir $(BUILD) --output-on-failure --parallel $(JOBS)

# -O1 -g without NDEBUG: readable sanitizer reports, assertions on, still fast enough.
sanitize:
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DRG_SANITIZE=ON $(CMAKE_FLAGS)
	$(CMAKE) --build $(ASAN_BUILD) --parallel $(JOBS)
	$(CTEST) --test-dir $(ASAN_BUILD) --output-on-failure --parallel $(JOBS)

# The CPU test suite (fuzz corpus replays included; MEMCHECK_EXCLUDE left out; without the
# Python and R packages, whose tests would check the interpreters) under
# valgrind memcheck: any invalid access, use of uninitialised memory or leak (definite,
# indirect or possible) fails the test; tests/valgrind.supp holds the only suppressions
# (the TLS of CPU pool threads that a process exiting without rg_close leaves running).
# A CPU-only build: with CUDA every test would also load cudart and cuBLASLt, which costs
# ~15 s per program under valgrind and checks nothing of ours.
# The built-in GEMM, not OpenBLAS: under valgrind OpenBLAS's spinning threads made the
# training tests take 800 s instead of 50, and valgrind's CPU makes it pick kernels whose
# results depend on its thread count, which tests compare. Logs:
# $(VALGRIND_BUILD)/Testing/Temporary/MemoryChecker.*.log.
memcheck:
	$(CMAKE) -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=OFF -DRG_BLAS=OFF \
	  -DRG_BUILD_EXAMPLES=OFF -DRG_PYTHON=OFF -DRG_R=OFF -DRG_TEST_TIMEOUT=1800 $(CMAKE_FLAGS)
	$(CMAKE) --build $(VALGRIND_BUILD) --parallel $(JOBS)
	$(CTEST) --test-dir $(VALGRIND_BUILD) -T memcheck \
	  --output-on-failure \
	  --parallel $(JOBS) -E '$(MEMCHECK_EXCLUDE)' \
	  --overwrite MemoryCheckCommand=$$(command -v $(VALGRIND)) \
	  --overwrite "MemoryCheckCommandOptions=--error-exitcode=1 --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect,possible --num-callers=30" \
	  --overwrite MemoryCheckSuppressionFile=$(abspath tests/valgrind.supp)

# Each fuzzer starts from its committed corpus (tests/fuzz/corpus/<name>, read only) and
# keeps what it finds in $(FUZZ_BUILD)/corpus/<name>; a crash, sanitizer report, leak or
# timeout stops it, leaves the input in $(FUZZ_BUILD)/artifacts/ and fails the target.
# Replay one with $(FUZZ_BUILD)/fuzz_<name> FILE (or build/fuzz_<name>_replay FILE).
# Extra libFuzzer flags go in FUZZ_FLAGS, e.g. FUZZ_FLAGS=-jobs=2.
fuzz:
	CC=$(FUZZ_CC) $(CMAKE) -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DRG_FUZZ=ON -DRG_CUDA=OFF \
	  -DRG_BLAS=OFF -DRG_BUILD_TESTS=OFF -DRG_BUILD_EXAMPLES=OFF -DRG_BUILD_TOOLS=OFF \
	  $(CMAKE_FLAGS)
	$(CMAKE) --build $(FUZZ_BUILD) --parallel $(JOBS) --target rg_fuzzers
	@set -e; mkdir -p $(FUZZ_BUILD)/artifacts; \
	for src in tests/fuzz/fuzz_*.c; do \
	  name=$$(basename $$src .c); name=$${name#fuzz_}; \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$name; \
	  seeds=tests/fuzz/corpus/$$name; [ -d $$seeds ] || seeds=; \
	  echo "==== fuzz_$$name for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/fuzz_$$name- \
	    $(FUZZ_FLAGS) $(FUZZ_BUILD)/corpus/$$name $$seeds; \
	done

# The whole suite under ThreadSanitizer, OpenBLAS included: the CPU pool (src/cpu/pool.c)
# is plain POSIX threads and C11 atomics, which TSan sees without help; test_pool drives
# pools hard and test_threads trains four contexts in four threads at once, each with
# its pool. A CPU-only Clang build (-O1 -g); any report fails the test. OpenBLAS is not
# instrumented: what its threads do is not checked
# (TSAN_OPTIONS=ignore_noninstrumented_modules=1, set by cmake/Tests.cmake).
tsan:
	CC=$(TSAN_CC) $(CMAKE) -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DRG_TSAN=ON -DRG_CUDA=OFF \
	  -DRG_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS)
	$(CMAKE) --build $(TSAN_BUILD) --parallel $(JOBS)
	$(CTEST) --test-dir $(TSAN_BUILD) --output-on-failure --parallel $(JOBS)

bench: configure
	$(CMAKE) --build $(BUILD) --parallel $(JOBS) --target rg_bench

# The R package (r/): bundled with the library's CPU sources and its generated bindings,
# built with its vignette (needs R, r-cran-knitr, r-cran-rmarkdown and pandoc), then
# checked as CRAN checks (needs r-cran-testthat, qpdf and devscripts' checkbashisms; the
# checks of the current time and CRAN's incoming checks that query CRAN's servers need the
# network, so they are turned off; --no-manual: the PDF manual needs LaTeX).
R_BUILD ?= build-r
r-package:
	r/bundle.sh $(R_BUILD)

r-check: r-package
	cd $(R_BUILD) && _R_CHECK_SYSTEM_CLOCK_=FALSE _R_CHECK_CRAN_INCOMING_REMOTE_=FALSE \
	  MAKEFLAGS=-j$(JOBS) \
	  R CMD check --as-cran --no-manual resgrad_*.tar.gz
	@! grep -q -E '^Status: .*(ERROR|WARNING)' $(R_BUILD)/resgrad.Rcheck/00check.log

install:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=$(PREFIX)" \
	  $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD) --parallel $(JOBS)
	$(CMAKE) --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(VALGRIND_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD) $(R_BUILD)
