/*
 * philox.h - Philox-4x32-10, the one counter-based generator of resgrad: any element's
 * random numbers are a pure function of (key, counter), so dropout masks and parameter
 * init are reproducible for a given seed and step, on any backend, in any order, with no
 * state to capture.
 *
 * Included by internal.h, so the core, the CPU backend and the CUDA kernels (through
 * src/cuda/cuda.h, compiled by nvcc) all run this one definition: the CPU's and the
 * GPU's dropout keep exactly the same elements. Integer arithmetic and one exact
 * conversion only, so every compiler gives the same bits.
 */
#ifndef RG_PHILOX_H
#define RG_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define RG_HD __host__ __device__
#else
#define RG_HD
#endif

/* The 64-bit product of two 32-bit words: its high word to *hi, its low word returned.
   On the device __umulhi and a 32-bit multiply, the two instructions the product needs. */
static RG_HD inline uint32_t rg_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
#ifdef __CUDA_ARCH__
  *hi = __umulhi(a, b);
  return a * b;
#else
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
#endif
}

/* The four 32-bit words of block (ctr_hi, ctr_lo) of the stream keyed by key. */
static RG_HD inline void rg_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo,
                                    uint32_t out[4]) {
  uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32), c2 = (uint32_t)ctr_hi,
           c3 = (uint32_t)(ctr_hi >> 32), k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = rg_mulhilo(0xD2511F53u, c0, &hi0), lo1 = rg_mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
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

/* Uniform in [0, 1) with 24 random bits, element `index` of the (seed, step) stream: the
   bits scaled by 2^-24, both steps exact in float. */
static RG_HD inline float rg_philox_uniform(uint64_t seed, uint64_t step, uint64_t index) {
  uint32_t r[4];
  rg_philox(seed, step, index, r);
  return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

/* An integer in [0, n) (n <= 2^32), element `index` of the (key, ctr_hi) stream: the
   first word r scaled as (r n) >> 32, so each value has probability 1/n to within
   n / 2^32. RING_SAMPLE's draws. */
static RG_HD inline uint32_t rg_philox_below(uint64_t key, uint64_t ctr_hi, uint64_t index,
                                             uint64_t n) {
  uint32_t r[4];
  rg_philox(key, ctr_hi, index, r);
  return (uint32_t)(((uint64_t)r[0] * n) >> 32);
}

#endif
