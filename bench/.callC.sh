set -u
B=build-gpu
t0=$SECONDS
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON >$OUT/configure.log 2>&1 && cmake --build $B -j16 >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"
(cd $B && timeout 120 ./test_cuda) >$OUT/test_cuda.log 2>&1; echo "test_cuda rc $? $((SECONDS-t0)) s"; grep -E "FAIL|CHECK" $OUT/test_cuda.log | head; grep -c PASS $OUT/test_cuda.log
timeout 200 python3 bench/compare.py --torch-ref .ref/torch_ref.py --bin $B/workloads --workloads mlp-small,mlp-wide,gpt-char,gpt2-124m --modes tf32,bf16 --log $OUT/compare.jsonl > $OUT/compare.md 2>&1; echo "compare rc $? $((SECONDS-t0)) s"; grep "^|" $OUT/compare.md
RG_PROFILE=1 timeout 60 $B/workloads --device cuda --mode bf16 --steps 10 --warm 2 gpt-char gpt2-124m > $OUT/profile.log 2>&1; echo "profile rc $? $((SECONDS-t0)) s"
timeout 40 $B/bandwidth > $OUT/bandwidth.log 2>&1; echo "bandwidth rc $?"
(cd $B && timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 9 ./test_cuda) >$OUT/memcheck.log 2>&1; echo "memcheck rc $? $((SECONDS-t0)) s"; tail -2 $OUT/memcheck.log
(cd $B && timeout $((585-SECONDS+t0)) compute-sanitizer --tool racecheck --racecheck-report all --print-limit 100000 --error-exitcode 9 ./test_cuda) >$OUT/racecheck.log 2>&1; echo "racecheck rc $? $((SECONDS-t0)) s"; tail -1 $OUT/racecheck.log; grep -A2 "hazard detected" $OUT/racecheck.log | grep -o "at [A-Za-z_0-9]*" | sort | uniq -c
