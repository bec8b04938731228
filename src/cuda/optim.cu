/*
 * optim.cu - CUDA kernels that update tensors in place: gradient accumulation, zeroing a
 * list of gradients, global-norm and per-value clipping, the fused AdamW and SGD steps and
 * the learning-rate schedule's rate (and, not yet, the all-reduce of distributed
 * training). Mirrors src/cpu/optim.c.
 *
 * Invariants:
 *  - Nothing here reads device data on the host. The clip state, step count and
 *    hyperparameters are read by kernels: a one-thread "prep" kernel decides whether the
 *    step is skipped (error word set, or clip state[1] != 0), bumps the step count and
 *    folds the per-step constants into a header in scratch; the update kernels that follow
 *    on the stream read that header.
 *  - Nothing that changes a persistent tensor runs when an earlier node of the drain has
 *    failed (error word set), so a failed step changes no weights, moments, gradients or
 *    step count. A one-thread kernel (gate, prep, or the clip's final kernel) reads the
 *    word once per launcher and puts its verdict in a device header the bulk kernels
 *    read; accum, a single launch, reads it once per block.
 *  - Lists of tensors are processed by multi-tensor launches: up to MT_MAX tensors' device
 *    pointers travel in a kernel argument (no host-to-device copy); block b of a launch
 *    finds its tensor and its chunk of MT_CHUNK elements from a prefix table of blocks.
 *  - Element updates use __fmul_rn / __fadd_rn / __fdiv_rn / __fsqrt_rn in the CPU's order
 *    of operations, so no FMA contraction changes the rounding: with the same constants a
 *    step is bit-identical to the CPU's. The constants are folded in double like the CPU
 *    (device pow may differ from libm's in the last double bit; rounding to float hides
 *    that in practice).
 *  - The clip norm is a sum of squares in double: per-block partials in scratch, added in
 *    block order by one block, so it repeats exactly.
 *  - F32 is the common case; a BF16 tensor is widened for the arithmetic and rounded back
 *    to nearest even, as on the CPU. A parameter's BF16 shadow (rg_options.bf16) gets the
 *    updated value rounded the same way.
 */
#include "cuda.h"
#include "../core/sched.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256
/* Tensors per multi-tensor launch: GPT-2's ~150 parameters in 2 launches (5 at 32). The
   pack is one kernel argument (7.8 KB): since CUDA 12.1 a kernel's parameters may take
   32,764 bytes on Volta and newer (4,096 before; the backend is built for sm_90), with
   an R530 driver or newer (an older one refuses the launch, an error the launcher
   reports). */
#define MT_MAX 128
#define PARAM_BYTES 32764
/* Elements per block of a multi-tensor launch. */
#define MT_CHUNK 4096
/* Scratch bytes reserved for a launcher's header before any per-block partials. */
#define HDR_BYTES 256

/* ---- element access ------------------------------------------------------------------------ */

/* The error word's code, which an earlier kernel of the stream may have written. */
__device__ __forceinline__ int err_code(const rg_cuda_err *err) {
  return *(const volatile int *)&err->code;
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

/* rg_f32_to_bf16: NaN stays a quiet NaN, everything else rounds to nearest even. */
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float ld(const void *p, int dt, int64_t i) {
  return dt == RG_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

__device__ __forceinline__ void st(void *p, int dt, int64_t i, float v) {
  if (dt == RG_BF16)
    ((uint16_t *)p)[i] = f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

/* ---- multi-tensor packs ---------------------------------------------------------------------- */

/* Up to five roles per tensor (param, grad, m, v, the param's BF16 shadow; or just one).
   first[i] is the first block of tensor i; block b works on elements
   [(b - first[i]) * chunk, + chunk). */
#define MT_ROLES 5
typedef struct mt_pack {
  int n;
  int64_t chunk;
  void *p[MT_ROLES][MT_MAX];
  int8_t dt[MT_ROLES][MT_MAX];
  int64_t numel[MT_MAX];
  int64_t first[MT_MAX + 1];
} mt_pack;
/* The pack and the few scalars and pointers a multi-tensor kernel takes besides it. */
static_assert(CUDART_VERSION >= 12010 && sizeof(mt_pack) + 64 <= PARAM_BYTES,
              "a multi-tensor launch's arguments exceed the kernel parameter limit");

void mt_reset(mt_pack *pk, int64_t chunk) {
  memset(pk, 0, sizeof *pk);
  pk->chunk = chunk;
}

void mt_add(mt_pack *pk, const rg_tv *const v[MT_ROLES]) {
  int i = pk->n++;
  for (int r = 0; r < MT_ROLES; r++) {
    pk->p[r][i] = v[r] ? v[r]->p : NULL;
    pk->dt[r][i] = (int8_t)(v[r] ? v[r]->dtype : RG_F32);
  }
  pk->numel[i] = v[0]->n;
  pk->first[i + 1] = pk->first[i] + cdiv(v[0]->n, pk->chunk);
}

int64_t mt_blocks(const mt_pack *pk) { return pk->first[pk->n]; }

/* This block's tensor, the last i < n with first[i] <= b (a binary search: a linear one
   would take up to MT_MAX dependent loads a block), and element range. */
__device__ __forceinline__ int mt_locate(const mt_pack &pk, int64_t *lo, int64_t *hi) {
  int64_t b = blockIdx.x;
  int i = 0, j = pk.n - 1;
  while (i < j) {
    int m = (i + j + 1) / 2;
    if (pk.first[m] <= b)
      i = m;
    else
      j = m - 1;
  }
  *lo = (b - pk.first[i]) * pk.chunk;
  *hi = min(pk.numel[i], *lo + pk.chunk);
  return i;
}

/* Views of a list's tensors in order, skipping absent or empty ones (the CPU skips
   p == NULL; an empty tensor has nothing to update). */
rg_tv view_of(rg_kargs *k, uint32_t ref) {
  rg_tv v;
  memset(&v, 0, sizeof v);
  if (ref) rg__tv(k->ctx, ref, &v);
  return v;
}

/* ---- accum ----------------------------------------------------------------------------------- */

/* One thread per block reads the error word and the block follows its verdict. */
__global__ void accum_k(void *__restrict__ d, int ddt, const void *__restrict__ s, int sdt,
                        int64_t n, const rg_cuda_err *err) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = err_code(err);
  __syncthreads();
  if (failed) return;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    st(d, ddt, i, __fadd_rn(ld(d, ddt, i), ld(s, sdt, i)));
}

/* ---- zero_list ------------------------------------------------------------------------------- */

/* Copies the error word's code once into scratch, which the many blocks of the kernels
   that follow read. */
__global__ void gate_k(const rg_cuda_err *err, int *failed) { *failed = err_code(err); }

/* Role 0 only; dt holds the element size in bytes (2 or 4): zero bits for every dtype. */
__global__ void zero_k(mt_pack pk, const int *failed) {
  if (*failed) return;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  if (pk.dt[0][i] == 2) {
    uint16_t *p = (uint16_t *)pk.p[0][i];
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) p[e] = 0;
  } else {
    uint32_t *p = (uint32_t *)pk.p[0][i];
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) p[e] = 0;
  }
}

/* ---- clip ------------------------------------------------------------------------------------ */

typedef struct clip_hdr {
  int apply;  /* 1: scale the gradients by coef */
  float coef;
} clip_hdr;

/* part[base + b] = sum of squares (double) of block b's chunk. Read-only. */
__global__ void sumsq_k(mt_pack pk, double *__restrict__ part, int64_t base) {
  __shared__ double sh[32];
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  const void *p = pk.p[0][i];
  int dt = pk.dt[0][i];
  double acc = 0;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    double v = ld(p, dt, e);
    acc += v * v;
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) part[base + blockIdx.x] = acc;
}

/* One block: norm = sqrt(sum of the partials in order); writes the clip state and the
   header the scaling kernels read. Nothing is written when the drain has failed. */
__global__ void clip_final_k(const double *__restrict__ part, int64_t nparts, double max_norm,
                             float *__restrict__ state, clip_hdr *h, const rg_cuda_err *err) {
  __shared__ double sh[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
  acc = block_sum(acc, sh);
  if (threadIdx.x != 0) return;
  h->apply = 0;
  if (err_code(err)) return;
  double norm = sqrt(acc);
  state[0] = (float)norm;
  if (!isfinite(norm)) {
    state[1] = 1.f;
    return;
  }
  state[1] = 0.f;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  h->coef = (float)coef;
  h->apply = 1;
}

/* h->apply is 0 when the drain had failed (clip_final_k read the error word). */
__global__ void clip_scale_k(mt_pack pk, const clip_hdr *h) {
  if (!h->apply) return;
  float coef = h->coef;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  void *p = pk.p[0][i];
  int dt = pk.dt[0][i];
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x)
    st(p, dt, e, __fmul_rn(ld(p, dt, e), coef));
}

/* Role 0, clamped to [-m, m] in place; the comparisons keep a NaN, as the CPU's do. */
__global__ void clip_value_k(mt_pack pk, float m, const int *failed) {
  if (*failed) return;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  void *p = pk.p[0][i];
  int dt = pk.dt[0][i];
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    float v = ld(p, dt, e);
    st(p, dt, e, v > m ? m : v < -m ? -m : v);
  }
}

/* ---- optimizers -------------------------------------------------------------------------------- */

/* The schedule's node fields, passed by value (they are constant while the schedule is,
   so a captured graph holds them). */
typedef struct sched_args {
  int64_t i[4];
  float f[4];
} sched_args;

/* One thread: the rate of the update that follows, from the step count before it (read
   unsigned, as bump_step adds), unless the drain has failed or the clip state says the
   update is skipped. */
__global__ void lr_schedule_k(float *hyper, const int32_t *step, const float *state,
                              sched_args a, const rg_cuda_err *err) {
  if (err_code(err) != 0 || (state && state[1] != 0.f)) return;
  hyper[RG_H_LR] = rg__sched_rate(a.i, a.f, (int64_t)(uint32_t)step[0]);
}

/* The per-step constants of AdamW, folded in double as PyTorch does on the host. */
typedef struct adam_hdr {
  int skip, zero; /* zero: also zero the gradients (see rg_cuda_adamw) */
  float decay, omb1, b2, omb2, step_size, bc2_sqrt, eps;
} adam_hdr;

typedef struct sgd_hdr {
  int skip, zero;
  float lr, momentum, wd;
} sgd_hdr;

/* True when this step must leave everything untouched: a failed drain, or a non-finite
   gradient norm recorded in the clip state. */
__device__ __forceinline__ bool step_skipped(const float *state, const rg_cuda_err *err) {
  return err_code(err) != 0 || (state && state[1] != 0.f);
}

/* Increments the step count (unsigned add: wraps instead of overflowing); returns it. */
__device__ __forceinline__ int32_t bump_step(int32_t *step) {
  step[0] = (int32_t)((uint32_t)step[0] + 1u);
  return step[0];
}

__global__ void adam_prep_k(const float *__restrict__ state, int32_t *__restrict__ step,
                            const float *__restrict__ hyper, adam_hdr *h,
                            const rg_cuda_err *err, int zero) {
  h->zero = zero && err_code(err) == 0;
  h->skip = step_skipped(state, err);
  if (h->skip) return;
  double lr = hyper[RG_H_LR], b1 = hyper[RG_H_B1], b2 = hyper[RG_H_B2], wd = hyper[RG_H_WD];
  double t = (double)bump_step(step);
  double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
  h->decay = (float)(1.0 - lr * wd);
  h->omb1 = (float)(1.0 - b1);
  h->b2 = (float)b2;
  h->omb2 = (float)(1.0 - b2);
  h->step_size = (float)(lr / bc1);
  h->bc2_sqrt = (float)sqrt(bc2);
  h->eps = hyper[RG_H_EPS];
}

/* PyTorch's single-tensor AdamW, op for op: decoupled decay, m.lerp_(g, 1-b1),
   v = v*b2 + (1-b2) g^2, w += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). Roles: 0 w,
   1 g, 2 m, 3 v. */
/* Zeroes this block's range of role 1 (the gradients) when the header says so: a skipped
   step still zeroes them (rg_zero_grad came after it), a failed drain does not. */
template <typename H> __device__ bool skip_or_zero(const mt_pack &pk, const H *hp) {
  if (!hp->skip) return false;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  for (int64_t e = lo + threadIdx.x; hp->zero && e < hi; e += blockDim.x)
    st(pk.p[1][i], pk.dt[1][i], e, 0.f);
  return true;
}

/* One element's update: m, v and w in place. */
__device__ __forceinline__ void adam_elem(const adam_hdr &c, float g, float &w, float &m,
                                          float &v) {
  m = __fadd_rn(m, __fmul_rn(c.omb1, __fsub_rn(g, m)));
  v = __fadd_rn(__fmul_rn(v, c.b2), __fmul_rn(c.omb2, __fmul_rn(g, g)));
  float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bc2_sqrt), c.eps);
  w = __fadd_rn(__fmul_rn(w, c.decay), __fmul_rn(-c.step_size, __fdiv_rn(m, den)));
}

__device__ __forceinline__ bool aligned(const void *p, unsigned bytes) {
  return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* The common case (w, g, m and v F32, 16-byte aligned; the shadow 8-byte aligned) moves
   four elements a load: the step is bandwidth-bound (34 bytes an element with a shadow).
   Any other block takes one element at a time, widening by dtype. */
__global__ void adam_k(mt_pack pk, const adam_hdr *hp) {
  if (skip_or_zero(pk, hp)) return; /* adam_prep_k read the error word and the clip state */
  const adam_hdr c = *hp;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  void *pw = pk.p[0][i], *pm = pk.p[2][i], *pv = pk.p[3][i], *ps = pk.p[4][i];
  void *pg = pk.p[1][i];
  int dw = pk.dt[0][i], dg = pk.dt[1][i], dm = pk.dt[2][i], dv = pk.dt[3][i];
  if (dw == RG_F32 && dg == RG_F32 && dm == RG_F32 && dv == RG_F32 && aligned(pw, 16) &&
      aligned(pg, 16) && aligned(pm, 16) && aligned(pv, 16) && aligned(ps, 8) && lo % 4 == 0) {
    float4 *w4 = (float4 *)pw, *g4 = (float4 *)pg, *m4 = (float4 *)pm, *v4 = (float4 *)pv;
    int64_t n4 = (hi - lo) / 4;
    for (int64_t q = lo / 4 + threadIdx.x; q < lo / 4 + n4; q += blockDim.x) {
      float4 w = w4[q], g = g4[q], m = m4[q], v = v4[q];
      adam_elem(c, g.x, w.x, m.x, v.x);
      adam_elem(c, g.y, w.y, m.y, v.y);
      adam_elem(c, g.z, w.z, m.z, v.z);
      adam_elem(c, g.w, w.w, m.w, v.w);
      m4[q] = m;
      v4[q] = v;
      w4[q] = w;
      if (ps) {
        uint2 b;
        b.x = (uint32_t)f32_to_bf16(w.x) | (uint32_t)f32_to_bf16(w.y) << 16;
        b.y = (uint32_t)f32_to_bf16(w.z) | (uint32_t)f32_to_bf16(w.w) << 16;
        ((uint2 *)ps)[q] = b;
      }
      if (c.zero) g4[q] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    lo += 4 * n4; /* the tail, below */
  }
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    float w = ld(pw, dw, e), g = ld(pg, dg, e), m = ld(pm, dm, e), v = ld(pv, dv, e);
    adam_elem(c, g, w, m, v);
    st(pm, dm, e, m);
    st(pv, dv, e, v);
    st(pw, dw, e, w);
    if (ps) st(ps, RG_BF16, e, w);
    if (c.zero) st(pg, dg, e, 0.f);
  }
}

__global__ void sgd_prep_k(const float *__restrict__ state, int32_t *__restrict__ step,
                           const float *__restrict__ hyper, sgd_hdr *h,
                           const rg_cuda_err *err, int zero) {
  h->zero = zero && err_code(err) == 0;
  h->skip = step_skipped(state, err);
  if (h->skip) return;
  h->lr = hyper[RG_H_LR];
  h->momentum = hyper[RG_H_B1];
  h->wd = hyper[RG_H_WD];
  bump_step(step);
}

/* PyTorch's SGD with dampening 0: g' = g + wd w; buf = momentum buf + g' (buf starts at
   zero, which equals PyTorch's first-step buf = g'); w -= lr buf, or w -= lr g' without
   momentum. Roles: 0 w, 1 g, 2 buf (NULL without momentum buffers). */
__global__ void sgd_k(mt_pack pk, const sgd_hdr *hp) {
  if (skip_or_zero(pk, hp)) return; /* sgd_prep_k read the error word and the clip state */
  const sgd_hdr c = *hp;
  int64_t lo, hi;
  int i = mt_locate(pk, &lo, &hi);
  void *pw = pk.p[0][i], *pb = c.momentum != 0.f ? pk.p[2][i] : NULL, *ps = pk.p[4][i];
  const void *pg = pk.p[1][i];
  int dw = pk.dt[0][i], dg = pk.dt[1][i], db = pk.dt[2][i];
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    float w = ld(pw, dw, e), g = ld(pg, dg, e);
    if (c.wd != 0.f) g = __fadd_rn(g, __fmul_rn(c.wd, w));
    if (pb) {
      float b = __fadd_rn(__fmul_rn(ld(pb, db, e), c.momentum), g);
      st(pb, db, e, b);
      g = b;
    }
    w = __fadd_rn(w, __fmul_rn(-c.lr, g));
    st(pw, dw, e, w);
    if (ps) st(ps, RG_BF16, e, w);
    if (c.zero) st((void *)pg, dg, e, 0.f);
  }
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

rg_status rg_cuda_accum(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *d = &k->in[0], *s = &k->in[1];
  if (d->n == 0) return RG_OK;
  unsigned grid = rg_cuda_blocks(d->n, THREADS), most = (unsigned)(L->sms > 0 ? L->sms * 8 : 1024);
  accum_k<<<grid < most ? grid : most, THREADS, 0, L->stream>>>(d->p, d->dtype, s->p, s->dtype,
                                                                d->n, L->err);
  return rg_cuda_check_launch(k, "accum");
}

/* The word gate_k sets in scratch when the drain has already failed (the kernels that
   read it then change nothing), or NULL when the scratch cannot hold it (k->msg says). */
static int *gate(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (L->scratch_bytes < sizeof(int)) {
    snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu",
             sizeof(int), L->scratch_bytes);
    return NULL;
  }
  int *failed = (int *)L->scratch;
  gate_k<<<1, 1, 0, L->stream>>>(L->err, failed);
  return failed;
}

/* Packs the list's tensors that have elements as role 0, MT_MAX at a time in chunks of
   `chunk`, and calls launch(pk) for each full pack and the last. size_only stores the
   element size as the dtype (all that zeroing needs). */
template <class Launch>
static void each_pack(rg_kargs *k, const rg_list *l, int64_t chunk, bool size_only,
                      Launch launch) {
  mt_pack pk;
  mt_reset(&pk, chunk);
  for (int i = 0; i < l->n; i++) {
    rg_tv v = view_of(k, l->ref[i]);
    if (!v.p || v.n == 0) continue;
    const rg_tv *roles[MT_ROLES] = {&v, NULL, NULL, NULL, NULL};
    mt_add(&pk, roles);
    if (size_only) pk.dt[0][pk.n - 1] = (int8_t)rg__dtype_size(v.dtype);
    if (pk.n == MT_MAX) {
      launch(pk);
      mt_reset(&pk, chunk);
    }
  }
  if (pk.n) launch(pk);
}

rg_status rg_cuda_zero_list(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int *failed = gate(k);
  if (!failed) return RG_ERR_UNSUPPORTED;
  each_pack(k, (const rg_list *)k->node->aux, MT_CHUNK, true, [&](const mt_pack &pk) {
    zero_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, failed);
  });
  return rg_cuda_check_launch(k, "zero_list");
}

/* Scratch: the header, then one double per block of the sum-of-squares pass. The chunk
   per block doubles until every block's partial fits (fixed by the sizes alone). The CPU
   also sets k->soft = RG_ERR_NONFINITE when the norm is not finite; that is known only on
   the device here, so the backend reads state[1] after the drain instead. */
rg_status rg_cuda_clip(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_list *l = (const rg_list *)k->node->aux;
  float *state = (float *)k->in[0].p;
  if (L->scratch_bytes < HDR_BYTES + sizeof(double)) {
    snprintf(k->msg, k->msgcap, "needs %d bytes of CUDA scratch, the backend has %zu",
             (int)(HDR_BYTES + sizeof(double)), L->scratch_bytes);
    return RG_ERR_UNSUPPORTED;
  }
  clip_hdr *h = (clip_hdr *)L->scratch;
  double *part = (double *)((char *)L->scratch + HDR_BYTES);
  int64_t cap = (int64_t)((L->scratch_bytes - HDR_BYTES) / sizeof(double));
  int64_t chunk = MT_CHUNK, total;
  for (;;) { /* blocks of all gradients at this chunk size */
    total = 0;
    for (int i = 0; i < l->n; i++) {
      rg_tv g = view_of(k, l->ref[i]);
      if (g.p && g.n) total += cdiv(g.n, chunk);
    }
    if (total <= cap) break;
    chunk *= 2;
  }
  mt_pack pk;
  mt_reset(&pk, chunk);
  int64_t base = 0;
  for (int i = 0; i < l->n; i++) {
    rg_tv g = view_of(k, l->ref[i]);
    if (!g.p || g.n == 0) continue;
    const rg_tv *roles[MT_ROLES] = {&g, NULL, NULL, NULL, NULL};
    mt_add(&pk, roles);
    if (pk.n == MT_MAX) {
      sumsq_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, part, base);
      base += mt_blocks(&pk);
      mt_reset(&pk, chunk);
    }
  }
  if (pk.n) {
    sumsq_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, part, base);
    base += mt_blocks(&pk);
  }
  clip_final_k<<<1, 1024, 0, L->stream>>>(part, base, (double)k->node->f[0], state, h, L->err);
  each_pack(k, l, MT_CHUNK, false, [&](const mt_pack &p) {
    clip_scale_k<<<(unsigned)mt_blocks(&p), THREADS, 0, L->stream>>>(p, h);
  });
  return rg_cuda_check_launch(k, "clip");
}

rg_status rg_cuda_clip_value(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int *failed = gate(k);
  if (!failed) return RG_ERR_UNSUPPORTED;
  float m = k->node->f[0];
  each_pack(k, (const rg_list *)k->node->aux, MT_CHUNK, false, [&](const mt_pack &pk) {
    clip_value_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, m, failed);
  });
  return rg_cuda_check_launch(k, "clip_value");
}

rg_status rg_cuda_lr_schedule(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  sched_args a;
  memcpy(a.i, k->node->i, sizeof a.i);
  memcpy(a.f, k->node->f, sizeof a.f);
  lr_schedule_k<<<1, 1, 0, L->stream>>>((float *)k->in[0].p, (const int32_t *)k->in[1].p,
                                        (const float *)k->in[2].p, a, L->err);
  return rg_cuda_check_launch(k, "lr_schedule");
}

rg_status rg_cuda_adamw(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_optim *o = (const rg_optim *)k->node->aux;
  if (L->scratch_bytes < sizeof(adam_hdr)) {
    snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu",
             sizeof(adam_hdr), L->scratch_bytes);
    return RG_ERR_UNSUPPORTED;
  }
  adam_hdr *h = (adam_hdr *)L->scratch;
  rg_tv hv = view_of(k, o->hyper), sv = view_of(k, o->step);
  adam_prep_k<<<1, 1, 0, L->stream>>>((const float *)k->in[0].p, (int32_t *)sv.p,
                                      (const float *)hv.p, h, L->err, (int)k->node->i[0]);
  mt_pack pk;
  mt_reset(&pk, MT_CHUNK);
  for (int i = 0; i < o->params.n; i++) {
    rg_tv w = view_of(k, o->params.ref[i]), g = view_of(k, o->grads.ref[i]);
    rg_tv m = view_of(k, o->m.ref[i]), v = view_of(k, o->v.ref[i]);
    rg_tv sh = view_of(k, o->shadow.ref[i]);
    if (!w.p || !g.p || !m.p || !v.p || w.n == 0) continue;
    const rg_tv *roles[MT_ROLES] = {&w, &g, &m, &v, sh.p ? &sh : NULL};
    mt_add(&pk, roles);
    if (pk.n == MT_MAX) {
      adam_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, h);
      mt_reset(&pk, MT_CHUNK);
    }
  }
  if (pk.n) adam_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, h);
  return rg_cuda_check_launch(k, "adamw");
}

/* The momentum buffers exist iff momentum was non-zero at creation (o->m.n > 0); the
   kernel also checks the momentum read from the device, as the CPU does. */
rg_status rg_cuda_sgd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_optim *o = (const rg_optim *)k->node->aux;
  if (L->scratch_bytes < sizeof(sgd_hdr)) {
    snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu",
             sizeof(sgd_hdr), L->scratch_bytes);
    return RG_ERR_UNSUPPORTED;
  }
  sgd_hdr *h = (sgd_hdr *)L->scratch;
  rg_tv hv = view_of(k, o->hyper), sv = view_of(k, o->step);
  sgd_prep_k<<<1, 1, 0, L->stream>>>((const float *)k->in[0].p, (int32_t *)sv.p,
                                     (const float *)hv.p, h, L->err, (int)k->node->i[0]);
  bool has_m = o->m.n > 0;
  mt_pack pk;
  mt_reset(&pk, MT_CHUNK);
  for (int i = 0; i < o->params.n; i++) {
    rg_tv w = view_of(k, o->params.ref[i]), g = view_of(k, o->grads.ref[i]);
    rg_tv m = has_m ? view_of(k, o->m.ref[i]) : view_of(k, 0);
    rg_tv sh = view_of(k, o->shadow.ref[i]);
    if (!w.p || !g.p || w.n == 0) continue;
    const rg_tv *roles[MT_ROLES] = {&w, &g, m.p ? &m : NULL, NULL, sh.p ? &sh : NULL};
    mt_add(&pk, roles);
    if (pk.n == MT_MAX) {
      sgd_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, h);
      mt_reset(&pk, MT_CHUNK);
    }
  }
  if (pk.n) sgd_k<<<(unsigned)mt_blocks(&pk), THREADS, 0, L->stream>>>(pk, h);
  return rg_cuda_check_launch(k, "sgd");
}
