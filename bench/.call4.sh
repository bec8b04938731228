#!/usr/bin/env bash
set -uo pipefail
L=$OUT/l; mkdir -p $L
t0=$SECONDS
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON > $L/configure.log 2>&1 && cmake --build build-gpu -j16 > $L/build.log 2>&1 || tail -30 $L/build.log
echo "build $((SECONDS-t0)) s"
(cd build-gpu && timeout 200 ./test_cuda) > $L/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS-t0)) s"; grep -E "FAIL|CHECK|attn-|embedding" $L/test_cuda.log | head -20; tail -1 $L/test_cuda.log
(cd build-gpu && timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 9 ./test_cuda) > $L/memcheck.log 2>&1; echo "memcheck rc=$? $((SECONDS-t0)) s"; tail -2 $L/memcheck.log
for v in "e1:-DDNN_MIN_T_BWD=128" "e2:-DDNN_MIN_T_BWD=128 -DDNN_MIN_T_FWD=128"; do
  n=${v%%:*}; f=${v#*:}
  cmake -S . -B build-$n -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON -DRG_BUILD_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$f" > $L/cfg-$n.log 2>&1 && cmake --build build-$n -j16 --target workloads > $L/build-$n.log 2>&1 || tail -20 $L/build-$n.log
done
echo "exp builds $((SECONDS-t0)) s"
for i in 1 2 3; do
  for b in gpu e1 e2; do
    r=$(build-$b/workloads --mode bf16 --steps 50 --warm 10 gpt-char 2>&1 | grep -o '"ms_median":[0-9.]*')
    echo "$b $r"
  done
  r=$(RG_CUDNN=0 build-gpu/workloads --mode bf16 --steps 50 --warm 10 gpt-char 2>&1 | grep -o '"ms_median":[0-9.]*'); echo "own $r"
done
echo "$((SECONDS-t0)) s"
