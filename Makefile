# Makefile - a thin wrapper over CMake for the common commands (see README.md).
#
#   make run        configure (Release, build/), build, run the main job
#   make test       configure, build, run every test with ctest (all cores)
#   make sanitize   the same in build-asan/ with ASan + UBSan on everything
#   make bench      build and run bench/*
#   make install    install to PREFIX (default /usr/local)
#   make clean      remove build/ and build-asan/
#
# Extra CMake options go in CMAKE_FLAGS, e.g. make test CMAKE_FLAGS=-DRG_BLAS=OFF.
# Arguments for the main job go in ARGS, e.g. make run ARGS="--steps 500"; another
# program of the build can be run instead with MAIN, e.g. make run MAIN=mlp.

BUILD      ?= build
ASAN_BUILD ?= build-asan
PREFIX     ?= /usr/local
CMAKE      ?= cmake
CTEST      ?= ctest
CMAKE_FLAGS ?=
ARGS       ?=
JOBS       ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

# The main job: tools/resgrad-train when it exists, else the MLP example.
MAIN ?= $(if $(wildcard tools/resgrad-train.c),resgrad-train,mlp)

.PHONY: all configure build run test sanitize bench install clean

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

bench: configure
	$(CMAKE) --build $(BUILD) --parallel $(JOBS) --target rg_bench

install:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=$(PREFIX)" \
	  $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD) --parallel $(JOBS)
	$(CMAKE) --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
