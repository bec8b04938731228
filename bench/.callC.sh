set -u
B=build-gpu
t0=$SECONDS
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON >$OUT/configure.log 2>&1 && cmake --build $B -j16 >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"
for mr in 1 2; do
  (cd $B && RG_ATT_MR=$mr timeout 120 ./test_cuda) >$OUT/test_cuda_mr$mr.log 2>&1; echo "test_cuda MR=$mr rc $? $((SECONDS-t0)) s"; grep -E "FAIL|CHECK" $OUT/test_cuda_mr$mr.log | head -8; grep -c PASS $OUT/test_cuda_mr$mr.log
done
for mr in 111 222 122 211 221 212; do echo -n "MR=$mr "; RG_ATT_MR=$mr timeout 30 $B/attention --qkv --bf16 50 2>&1 | python3 -c "import sys,json; d=json.loads(sys.stdin.read()); print(d['fwd_ms'], d['bwd_ms'])"; done 2>&1 | tee $OUT/att.log
for mr in 111 222; do echo -n "gpt2 MR=$mr "; RG_ATT_MR=$mr timeout 40 $B/workloads --device cuda --mode bf16 --steps 20 --warm 5 gpt2-124m gpt-char 2>&1 | python3 -c "
import sys,json
for l in sys.stdin:
  try: d=json.loads(l); print(d['work'], d['ms_median'], d['nodes_per_step'], d['peak_mib'], end=' | ')
  except Exception: pass
print()"; done | tee -a $OUT/att.log
echo "t $((SECONDS-t0)) s"
timeout 200 python3 bench/compare.py --torch-ref .ref/torch_ref.py --bin $B/workloads --workloads mlp-small,mlp-wide,gpt-char,gpt2-124m --modes tf32,bf16 --log $OUT/compare.jsonl > $OUT/compare.md 2>&1; echo "compare rc $? $((SECONDS-t0)) s"; grep "^|" $OUT/compare.md
RG_PROFILE=1 timeout 60 $B/workloads --device cuda --mode bf16 --steps 10 --warm 2 gpt-char gpt2-124m > $OUT/profile.log 2>&1; echo "profile rc $? $((SECONDS-t0)) s"
timeout 40 $B/bandwidth > $OUT/bandwidth.log 2>&1; echo "bandwidth rc $?"
(cd $B && RG_ATT_MR=2 timeout $((590-SECONDS+t0)) compute-sanitizer --tool racecheck --racecheck-report all --print-limit 100000 --error-exitcode 9 ./test_cuda) >$OUT/racecheck.log 2>&1; echo "racecheck rc $? $((SECONDS-t0)) s"; tail -1 $OUT/racecheck.log; grep -A2 "hazard detected" $OUT/racecheck.log | grep -o "at [A-Za-z_0-9]*" | sort | uniq -c
