#!/usr/bin/env bash
# cpu_steady.sh - are CPU step times steady with threads while another process is busy?
#
# Starts one busy process (a shell loop: one core kept busy), then runs the workloads
# binary RUNS times for each thread count and workload, and prints each run's median step
# time, the median of those medians, and the worst run's median over the best run's (the
# issue's bar: every run within 1.25x of the best). The busy process is stopped at the end.
#
# usage: bench/cpu_steady.sh [BIN] [RUNS]     (BIN: build/workloads, RUNS: 10)
#        env WORKS="mlp-small gpt-char", THREADS="1 2", BUSY=1 (0: no busy process),
#            GPT_STEPS=8 GPT_WARM=2 (gpt-char's counted and warm-up steps)
set -u
BIN=${1:-build/workloads}
RUNS=${2:-10}
WORKS=${WORKS:-"mlp-small gpt-char"}
THREADS=${THREADS:-"1 2"}
BUSY=${BUSY:-1}
GPT_STEPS=${GPT_STEPS:-8}
GPT_WARM=${GPT_WARM:-2}
busy_pid=
if [ "$BUSY" = 1 ]; then
  sh -c 'while :; do :; done' &
  busy_pid=$!
  trap 'kill "$busy_pid" 2>/dev/null' EXIT
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg); busy process: ${busy_pid:-none}"
for w in $WORKS; do
  case $w in gpt*) steps=$GPT_STEPS warm=$GPT_WARM ;; *) steps=50 warm=10 ;; esac
  for t in $THREADS; do
    meds=()
    for ((r = 0; r < RUNS; r++)); do
      m=$(RG_THREADS=$t "$BIN" --device cpu --mode f32 --steps $steps --warm $warm "$w" |
          sed -n 's/.*"ms_median":\([0-9.]*\).*/\1/p')
      meds+=("${m:-nan}")
    done
    printf '%s\n' "${meds[@]}" | sort -g | awk -v w="$w" -v t="$t" '
      { v[NR] = $1; all = all sprintf(" %s", $1) }
      END { med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%-10s threads %s  medians of %d runs (ms):%s\n", w, t, NR, all
            printf "%-10s threads %s  median %.3f  best %.3f  worst %.3f  worst/best %.2f\n",
                   w, t, med, v[1], v[NR], v[NR] / v[1] }'
  done
done
