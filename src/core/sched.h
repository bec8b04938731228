/*
 * sched.h - the rate of a learning-rate schedule's update s, one definition for the CPU
 * and the CUDA kernels of LR_SCHEDULE (ops.h; the formulas and fields: rg_schedule in
 * resgrad.h; the checks: rg_optim_set_schedule, optim.c).
 *
 * Float, one expression for both backends, so they agree to an ulp or two (nvcc may fuse
 * a multiply and an add). The cosine's (1 + cos(pi p)) / 2 is taken as
 * sin^2(pi/2 (1 - p)) with 1 - p formed from integers: no cancellation near the end,
 * where the rate is smallest.
 */
#ifndef RG_SCHED_H
#define RG_SCHED_H

#include <math.h>
#include <stdint.h>

#include "resgrad.h"
#include "philox.h" /* RG_HD */

/* The rate of update s (0-based) from an LR_SCHEDULE node's fields: i[] = kind, warmup,
   total, step_size; f[] = lr, min_lr, start_lr, gamma. */
static RG_HD inline float rg__sched_rate(const int64_t *i, const float *f, int64_t s) {
  int64_t warmup = i[1], total = i[2];
  if (s < warmup) {
    if (i[0] == RG_SCHED_ONECYCLE) return f[2] + (f[0] - f[2]) * ((float)s / (float)warmup);
    return f[0] * (float)(s + 1) / (float)warmup;
  }
  if (i[0] == RG_SCHED_STEP) return f[0] * powf(f[3], (float)((s - warmup) / i[3]));
  if (i[0] == RG_SCHED_COSINE || i[0] == RG_SCHED_ONECYCLE) {
    if (s >= total) return f[1];
    float h = sinf((float)(3.14159265358979323846 / 2) *
                   ((float)(total - s) / (float)(total - warmup)));
    return f[1] + (f[0] - f[1]) * (h * h);
  }
  return f[0]; /* RG_SCHED_CONSTANT */
}

#endif
