#!/bin/sh
# bundle.sh - makes the R source package resgrad_<version>.tar.gz from this repository.
#
#   r/bundle.sh [OUTDIR]        (default OUTDIR: build-r, under the repository root)
#
# Copies r/resgrad to OUTDIR/resgrad, bundles the C library into its src/lib (include/,
# src/core, src/cpu, src/nn and the CUDA stub: the CPU build the package compiles by
# default) and tests/data/hf_gpt2_tiny into its inst/extdata, writes the op bindings
# with r/gen_bindings.py (R/ops.R, src/ops.c, man/ag_<op>.Rd: the package then installs
# without Python), and runs R CMD build there. The tarball is
# OUTDIR/resgrad_<version>.tar.gz; install it with R CMD INSTALL. Nothing is written into
# r/resgrad itself. Set RG_R_BUILD_ARGS for R CMD build (e.g. --no-build-vignettes).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-r}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$out/resgrad

rm -rf "$stage"
cp -R "$root/r/resgrad" "$stage"
rm -rf "$stage/src/lib" "$stage/src/Makevars" "$stage"/src/*.o "$stage"/src/*.so
mkdir -p "$stage/src/lib/cuda"
cp -R "$root/include" "$root/src/core" "$root/src/cpu" "$root/src/nn" "$root/src/text" \
  "$stage/src/lib/"
cp "$root/src/cuda/stub.c" "$stage/src/lib/cuda/"
# The tiny GPT-2 that transformers made (the C and Python tests' fixture), for the tests
# and examples of ag_gpt_load_hf: system.file("extdata", "hf_gpt2_tiny", package = "resgrad").
mkdir -p "$stage/inst/extdata"
cp -R "$root/tests/data/hf_gpt2_tiny" "$stage/inst/extdata/"
# The miniature GPT-2 tokenizer, for ag_tokenizer's tests and examples: its vocab.json and
# merges.txt and the reference ids, not its tokenizer.json forms (the C tests cover those).
mkdir -p "$stage/inst/extdata/bpe"
cp "$root/tests/data/bpe/vocab.json" "$root/tests/data/bpe/merges.txt" \
  "$root/tests/data/bpe/expected.json" "$stage/inst/extdata/bpe/"
${PYTHON:-python3} "$root/r/gen_bindings.py" "$root/include/resgrad.h" \
  "$root/src/core/ops.h" "$stage"

cd "$out"
# shellcheck disable=SC2086
R CMD build ${RG_R_BUILD_ARGS:-} resgrad
ls "$out"/resgrad_*.tar.gz
