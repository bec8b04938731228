#!/usr/bin/env bash
# gpu_check.sh - one device-machine call: build with CUDA, run the CUDA parity test, run it
# again under compute-sanitizer (memcheck), then the workloads on the GPU. Logs go to
# $OUT (or ./gpu-logs). Usage: bash bench/gpu_check.sh [workload ...]
set -uo pipefail
[ $# -gt 0 ] || set -- mlp-small gpt-char
out=${OUT:-gpu-logs}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "== test_cuda"
(cd build-gpu && ./test_cuda) 2>&1 | tee "$out/test_cuda.log"
echo "== ctest (all)"
(cd build-gpu && ctest -j8 --output-on-failure) >"$out/ctest.log" 2>&1; tail -5 "$out/ctest.log"
if [ "${SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck test_cuda"
  (cd build-gpu && compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda) \
    >"$out/memcheck.log" 2>&1; echo "memcheck exit $?"; tail -4 "$out/memcheck.log"
fi
echo "== workloads"
./build-gpu/workloads --device cuda --steps 30 --warm 5 "$@" 2>&1 | tee "$out/workloads.log"
