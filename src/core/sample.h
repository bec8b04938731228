/*
 * sample.h - what SAMPLE's kernels share (ops.h): the order key of a logit and the
 * Gumbel noise of an element, so the CPU's and the GPU's draws are the same function of
 * (seed, counter, row, element).
 *
 * Included by the SAMPLE kernels (src/cpu/decode.c, src/cuda/decode.cu), compiled by the C
 * compiler and by nvcc. The key is integer arithmetic only; the noise is Philox's bits (exact), one exact conversion and
 * two logarithms, the only place where the backends may differ (in the last bit).
 */
#ifndef RG_SAMPLE_H
#define RG_SAMPLE_H

#include "philox.h"

#include <math.h>
#include <string.h>

/* x's bits as an unsigned integer with the order of the floats (-0 just below +0): a
   sign bit set flips every bit, a clear one sets the sign bit. */
static RG_HD inline uint32_t rg_sample_key(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* -log(-log(u)) for u uniform in (0, 1) with 24 random bits, 2^-25 from either end:
   element i of row `row` of the stream (seed, counter). Four elements share a Philox
   block, each taking one word. */
static RG_HD inline float rg_sample_gumbel(uint64_t seed, uint32_t counter, uint64_t row,
                                           uint64_t i) {
  uint32_t r[4];
  rg_philox(seed, counter, row << 32 | i >> 2, r);
  float u = ((float)(r[i & 3] >> 8) + 0.5f) * (1.0f / 16777216.0f);
  return -logf(-logf(u));
}

#endif
