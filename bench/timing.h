/*
 * timing.h - what the benchmarks share to time steps: a monotonic clock in seconds and
 * the comparison that sorts timings for their median.
 */
#ifndef RG_BENCH_TIMING_H
#define RG_BENCH_TIMING_H

#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif
