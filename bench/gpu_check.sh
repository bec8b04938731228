#!/usr/bin/env bash
# gpu_check.sh - the GPU machine's checks in one call, stage by stage. Every stage logs
# to ./gpu-logs and prints a one-line verdict; a failing stage does not stop the later
# ones. With $OUT set (the device tool), the logs end up in $OUT/gpu-logs.tgz.
#
# usage: bash bench/gpu_check.sh [stage ...]      (default: build test memcheck work)
# stages:
#   build      configure and build build-gpu (Release, CUDA on)
#   test       test_cuda, then the whole ctest suite
#   memcheck   compute-sanitizer --tool memcheck|racecheck|initcheck on test_cuda
#   racecheck  (one stage per tool; RG_SAN_TIMEOUT seconds each, default 300; RG_SAN_CASES
#              names test_cuda's cases to run, default all)
#   initcheck
#   train      resgrad-train --device cuda on its default task, with --save and --plot;
#              then bench/torch_ckpt.py loads the checkpoint into PyTorch (TORCH_REF)
#   work       bench/workloads on the GPU (WORKLOADS, default mlp-small gpt-char)
#   ckpt       activation checkpointing: gpt2-124m in bf16 (B8 T1024) with the loss's head
#              whole (--head-chunk -1), then in chunks (the default) without and with
#              --checkpoint (peak_mib, ms_median), then --max-batch without and with
#   profile    RG_PROFILE=1 bench/workloads (WORKLOADS, MODES' first mode): device time
#              per op, printed by rg_close
#   bandwidth  bench/bandwidth (bandwidth-bound ops against the device copy) and
#              bench/attention (the fused attention at GPT-2 124M's shape: both layouts,
#              and the qkv layout in bf16), then bench/torch_sdpa.py (PyTorch's fused
#              attention at that shape, where PyTorch is installed)
#   python     the Python package's tests on the CPU and on CUDA (RESGRAD_TEST_DEVICE),
#              then bench/python_ops.py and bench/python_step.py (the reference steps from
#              Python next to C and TORCH_REF, MODES default f32,tf32)
#   compare    bench/compare.py against TORCH_REF (default .ref/torch_ref.py) for
#              WORKLOADS in MODES (default f32,tf32)
#   generate   bench/generate (rg_gpt_generate) at GPT-2 124M, random weights, batch 1 and
#              16 (prompt 64, 128 new tokens), then bench/torch_generate.py at the same
#              shapes (PyTorch eager, torch.compile, transformers where installed), in each
#              of GEN_MODES (default "f32 tf32")
# TUNE=1 runs work, profile and compare with rg_options.gemm_tune (workloads --tune).
set -uo pipefail
[ $# -gt 0 ] || set -- build test memcheck work
out=gpu-logs
rm -rf "$out"; mkdir -p "$out"
[ -z "${OUT:-}" ] || trap 'tar -czf "$OUT/gpu-logs.tgz" "$out"' EXIT
B=build-gpu
REF=${TORCH_REF:-.ref/torch_ref.py}
WORKLOADS=${WORKLOADS:-mlp-small gpt-char}
TUNEFLAG=""; [ "${TUNE:-0}" = 1 ] && TUNEFLAG=--tune
verdict() { printf '== %-10s exit %s  (%s s)\n' "$1" "$2" "$3"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
for stage in "$@"; do
  t0=$SECONDS
  case $stage in
  build)
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON >"$out/configure.log" 2>&1 &&
      cmake --build $B -j16 >"$out/build.log" 2>&1
    rc=$?; [ $rc = 0 ] || tail -40 "$out/build.log"
    verdict build $rc $((SECONDS - t0)); [ $rc = 0 ] || exit 1 ;;
  test)
    (cd $B && ./test_cuda) >"$out/test_cuda.log" 2>&1; rc=$?
    tail -15 "$out/test_cuda.log"; verdict test_cuda $rc $((SECONDS - t0))
    (cd $B && ctest -j8 --output-on-failure) >"$out/ctest.log" 2>&1; rc=$?
    tail -4 "$out/ctest.log"; verdict ctest $rc $((SECONDS - t0)) ;;
  memcheck | racecheck | initcheck)
    # memcheck: API errors are not reported, because test_cuda provokes a device OOM on
    # purpose (the library checks every CUDA call itself and the test asserts the error).
    extra=""; [ "$stage" = racecheck ] && extra="--racecheck-report all"
    [ "$stage" = memcheck ] && extra="--report-api-errors no --leak-check full"
    # shellcheck disable=SC2086
    (cd $B && timeout "${RG_SAN_TIMEOUT:-300}" compute-sanitizer --tool $stage $extra \
      --error-exitcode 9 ./test_cuda ${RG_SAN_CASES:-}) >"$out/$stage.log" 2>&1; rc=$?
    tail -4 "$out/$stage.log"; verdict "$stage" $rc $((SECONDS - t0)) ;;
  train)
    $B/resgrad-train --device cuda --save "$out/addition.safetensors" \
      --plot "$out/addition-loss.svg" >"$out/train.log" 2>&1; rc=$?
    tail -12 "$out/train.log"; verdict train $rc $((SECONDS - t0))
    python3 bench/torch_ckpt.py --torch-ref "$REF" --ckpt "$out/addition.safetensors" \
      --gpt-loss $B/gpt_loss 2>&1 | tee "$out/torch_ckpt.log"
    verdict torch_ckpt "${PIPESTATUS[0]}" $((SECONDS - t0)) ;;
  python)
    [ -f $B/python/resgrad/_resgrad.abi3.so ] || echo "no Python module in $B (headers?)"
    export PYTHONPATH=$PWD/$B/python PYTHONUNBUFFERED=1
    python3 -m pytest -q -p no:cacheprovider python/tests >"$out/pytest-cpu.log" 2>&1; rc=$?
    tail -3 "$out/pytest-cpu.log"; verdict pytest-cpu $rc $((SECONDS - t0))
    RESGRAD_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -rs python/tests \
      >"$out/pytest-cuda.log" 2>&1; rc=$?
    tail -8 "$out/pytest-cuda.log"; verdict pytest-cuda $rc $((SECONDS - t0))
    python3 bench/python_ops.py --c-bin $B/op_overhead 2>&1 | tee "$out/python_ops.log"
    python3 bench/python_step.py --device cuda --modes "${MODES:-f32,tf32}" --c-bin \
      $B/workloads --torch-ref "$REF" 2>&1 | tee "$out/python_step.log"
    verdict python "${PIPESTATUS[0]}" $((SECONDS - t0))
    unset PYTHONPATH ;;
  work)
    # shellcheck disable=SC2086
    $B/workloads --device cuda --steps 50 --warm 10 $TUNEFLAG $WORKLOADS 2>&1 |
      tee "$out/workloads.log"
    verdict work "${PIPESTATUS[0]}" $((SECONDS - t0)) ;;
  ckpt)
    for flag in "--head-chunk -1" "" --checkpoint; do # shellcheck disable=SC2086
      $B/workloads --device cuda --mode bf16 --steps 20 --warm 5 $TUNEFLAG $flag gpt2-124m
    done 2>&1 | tee "$out/ckpt.log"
    rc=${PIPESTATUS[0]}
    for flag in "" --checkpoint; do # shellcheck disable=SC2086
      $B/workloads --device cuda --mode bf16 --max-batch $TUNEFLAG $flag gpt2-124m
    done 2>&1 | tee -a "$out/ckpt.log"
    verdict ckpt "$((rc | PIPESTATUS[0]))" $((SECONDS - t0)) ;;
  profile)
    m=${MODES:-f32}
    # shellcheck disable=SC2086
    RG_PROFILE=1 $B/workloads --device cuda --mode "${m%%,*}" --steps 10 --warm 2 $TUNEFLAG \
      $WORKLOADS \
      >"$out/profile.log" 2>&1
    verdict profile $? $((SECONDS - t0)); grep -A12 "resgrad profile" "$out/profile.log" ;;
  bandwidth)
    { $B/bandwidth && $B/attention 50 && $B/attention --qkv 50 &&
      $B/attention --qkv --bf16 50; } 2>&1 |
      tee "$out/bandwidth.log"
    verdict bandwidth "${PIPESTATUS[0]}" $((SECONDS - t0))
    python3 bench/torch_sdpa.py 2>&1 | tee "$out/torch_sdpa.log"
    verdict torch_sdpa "${PIPESTATUS[0]}" $((SECONDS - t0)) ;;
  compare)
    python3 bench/compare.py --torch-ref "$REF" --bin $B/workloads \
      --workloads "$(echo "$WORKLOADS" | tr ' ' ,)" --modes "${MODES:-f32,tf32}" \
      --log "$out/compare.jsonl" $TUNEFLAG 2>&1 | tee "$out/compare.md"
    verdict compare "${PIPESTATUS[0]}" $((SECONDS - t0)) ;;
  generate)
    rc=0
    for m in ${GEN_MODES:-f32 tf32}; do
      $B/generate --device cuda --mode "$m" --batch 1,16 2>&1 | tee -a "$out/generate.log"
      rc=$((rc | PIPESTATUS[0]))
      python3 bench/torch_generate.py --device cuda --mode "$m" --batch 1,16 2>&1 |
        tee -a "$out/torch_generate.log"
      rc=$((rc | PIPESTATUS[0]))
    done
    verdict generate $rc $((SECONDS - t0)) ;;
  *) echo "gpu_check.sh: unknown stage '$stage'"; exit 2 ;;
  esac
done
