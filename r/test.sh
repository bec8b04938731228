#!/bin/sh
# test.sh - bundles the R package, installs it into a library of its own and runs its
# testthat tests against it (ctest's r_tests, cmake/R.cmake).
#
#   r/test.sh OUTDIR     the package is made in OUTDIR, installed in OUTDIR/lib
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
RG_R_BUILD_ARGS="--no-build-vignettes --no-manual" "$root/r/bundle.sh" "$out" >"$out/build.log" 2>&1 ||
  { cat "$out/build.log"; exit 1; }
rm -rf "$out/lib"
mkdir -p "$out/lib"
R CMD INSTALL --no-test-load -l "$out/lib" "$out"/resgrad_*.tar.gz >"$out/install.log" 2>&1 ||
  { cat "$out/install.log"; exit 1; }
cd "$out/resgrad/tests"
# testthat's stop_on_failure makes any failed expectation a non-zero exit.
Rscript -e ".libPaths(c('$out/lib', .libPaths())); library(testthat); library(resgrad);
  res <- test_dir('testthat', reporter = 'summary', stop_on_failure = TRUE);
  df <- as.data.frame(res); if (sum(df\$nb) == 0) stop('no expectations ran')"
