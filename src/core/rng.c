/*
 * rng.c - Philox-4x32-10, a counter-based generator: any element's random numbers are a
 * pure function of (key, counter), so dropout masks and parameter init are reproducible
 * for a given seed and step, on any backend, in any order, with no state to capture.
 */
#include "internal.h"

void rg_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32), c2 = (uint32_t)ctr_hi,
           c3 = (uint32_t)(ctr_hi >> 32), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Uniform in [0, 1) with 24 random bits, element `index` of the (seed, step) stream. */
float rg_philox_uniform(uint64_t seed, uint64_t step, uint64_t index) {
  uint32_t r[4];
  rg_philox(seed, step, index, r);
  return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}
