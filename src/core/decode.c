/*
 * decode.c - the ops of autoregressive decoding: rg_kv_write, rg_attention_cached and
 * rg_sample (ops.h: KV_WRITE, ATTENTION_CACHED, SAMPLE).
 *
 * Invariants:
 *  - Positions and counters are tensors, never baked into a node: a decode step records
 *    the same nodes, with the same scalars, at every position, so its CUDA graph replays.
 *  - The cache is changed only by KV_WRITE nodes, in place, in queue order: a read
 *    recorded before a write sees the old rows, one recorded after it the new.
 *  - None of the three has a gradient (none is RG_F_DIFF); their results require none.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

enum { F32_ONLY = 1 << RG_F32, I32_ONLY = 1 << RG_I32 };

static bool fail_shapes(rg_ctx *ctx, const char *call, const char *what, rg_shape a,
                        rg_shape b) {
  char sa[96], sb[96];
  rg__fmt_shape(sa, sizeof sa, a.ndim, a.dims);
  rg__fmt_shape(sb, sizeof sb, b.ndim, b.dims);
  rg__fail(ctx, RG_ERR_MISUSE, call, "%s %s and %s %s", "shapes", sa, sb, what);
  return false;
}

/* A BF16 operand (rg_options.bf16 lets one through an F32 mask) widened by a recorded
   cast, as every op that computes in F32 takes it. */
static bool as_f32(rg_ctx *ctx, uint32_t *ref) {
  if (rg__t(ctx, *ref)->dtype != RG_BF16) return true;
  rg_shape s = rg__shape(ctx, *ref);
  uint32_t out[RG_MAX_OUT] = {0};
  s.dtype = RG_F32;
  if (rg__emit(ctx, RG_OP_CAST, ref, &s, NULL, NULL, NULL, out) != RG_OK) return false;
  *ref = out[0];
  return true;
}

/* The operands of KV_WRITE and ATTENTION_CACHED: in[0] K, in[1] V (F32 [B,H,S,D], the
   same shape, two tensors), in[2] qkv (F32 [B,T,3 H D], T <= S), in[3] pos (I32 [B]). */
static bool cache_operands(rg_ctx *ctx, const char *call, rg_tensor k, rg_tensor v,
                           rg_tensor qkv, rg_tensor pos, int kpos, uint32_t in[4]) {
  int qpos = kpos == 1 ? 3 : 1;
  if (!rg__operand(ctx, k, call, kpos, F32_ONLY, &in[0]) ||
      !rg__operand(ctx, v, call, kpos + 1, F32_ONLY, &in[1]) ||
      !rg__operand(ctx, qkv, call, qpos, F32_ONLY, &in[2]) ||
      !rg__operand(ctx, pos, call, 4, I32_ONLY, &in[3]))
    return false;
  rg_shape sk = rg__shape(ctx, in[0]), sv = rg__shape(ctx, in[1]), sq = rg__shape(ctx, in[2]),
           sp = rg__shape(ctx, in[3]);
  if (sk.dtype != RG_F32 || sv.dtype != RG_F32)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the cache must be F32 (rg_state_new(ctx, "
                    "RG_F32, ...)); it is %s", rg__dtype_name(sk.dtype)), false;
  if (sk.ndim != 4 || sv.ndim != 4 ||
      memcmp(sk.dims, sv.dims, sizeof sk.dims))
    return fail_shapes(ctx, call, "do not fit: K and V must both be [B,H,S,D]", sk, sv);
  if (in[0] == in[1])
    return rg__fail(ctx, RG_ERR_MISUSE, call, "K and V are one tensor; pass two "
                    "(rg_state_new each)"), false;
  int64_t B = sk.dims[0], H = sk.dims[1], S = sk.dims[2], D = sk.dims[3];
  if (sq.ndim != 3 || sq.dims[0] != B || sq.dims[2] != 3 * H * D || sq.dims[1] > S)
    return fail_shapes(ctx, call, "do not fit: qkv must be [B,T,3 H D] with T <= S for a "
                       "cache [B,H,S,D] (the first shape is qkv's, the second the cache's)",
                       sq, sk);
  if (sp.ndim != 1 || sp.dims[0] != B)
    return fail_shapes(ctx, call, "do not fit: the positions must be I32 [B] for a cache "
                       "[B,H,S,D] (the first shape is the positions', the second the "
                       "cache's)", sp, sk);
  if (in[2] == in[0] || in[2] == in[1])
    return rg__fail(ctx, RG_ERR_MISUSE, call, "qkv is the cache itself"), false;
  return as_f32(ctx, &in[2]);
}

rg_status rg_kv_write(rg_ctx *ctx, rg_tensor k, rg_tensor v, rg_tensor qkv, rg_tensor pos) {
  const char *call = "rg_kv_write";
  uint32_t in[4];
  if (!ctx) return RG_ERR_MISUSE;
  if (!cache_operands(ctx, call, k, v, qkv, pos, 1, in)) return ctx->last;
  uint32_t ord[4] = {in[0], in[1], in[2], in[3]};
  return rg__emit(ctx, RG_OP_KV_WRITE, ord, NULL, NULL, NULL, NULL, NULL);
}

rg_tensor rg_attention_cached(rg_ctx *ctx, rg_tensor qkv, rg_tensor k, rg_tensor v,
                              rg_tensor pos) {
  const char *call = "rg_attention_cached";
  uint32_t in[4], out[RG_MAX_OUT] = {0};
  if (!ctx || !cache_operands(ctx, call, k, v, qkv, pos, 2, in)) return RG_NONE;
  uint32_t ord[4] = {in[2], in[0], in[1], in[3]};
  rg_shape o = rg__shape(ctx, in[2]);
  o.dtype = RG_F32;
  o.dims[2] /= 3;
  if (rg__emit(ctx, RG_OP_ATTENTION_CACHED, ord, &o, NULL, NULL, NULL, out) != RG_OK)
    return RG_NONE;
  rg__t(ctx, out[0])->flags &= (uint8_t)~RG_T_GRAD;
  return rg__handle(ctx, out[0]);
}

rg_tensor rg_sample(rg_ctx *ctx, rg_tensor logits, rg_tensor counter, float temperature,
                    int64_t top_k, float top_p, uint64_t seed) {
  const char *call = "rg_sample";
  uint32_t in[2] = {0, 0}, out[RG_MAX_OUT] = {0};
  if (!ctx || !rg__operand(ctx, logits, call, 1, F32_ONLY, &in[0]) ||
      (counter.id && !rg__operand(ctx, counter, call, 2, I32_ONLY, &in[1])))
    return RG_NONE;
  if (!(temperature >= 0) || isinf(temperature))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "temperature %g must be finite and >= 0 (0: "
                    "the most likely token)", (double)temperature), RG_NONE;
  if (top_k < 0)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "top_k %lld must be >= 0 (0: off)",
                    (long long)top_k), RG_NONE;
  if (!(top_p > 0 && top_p <= 1))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "top_p %g must be in (0, 1] (1: off)",
                    (double)top_p), RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]), o = s;
  if (s.ndim < 2 || s.dims[s.ndim - 1] < 1) {
    char b[96];
    rg__fmt_shape(b, sizeof b, s.ndim, s.dims);
    return rg__fail(ctx, RG_ERR_MISUSE, call, "logits %s must be [..., V] with at least "
                    "one leading axis (rows) and V >= 1: reshape one row [V] to [1, V]", b),
           RG_NONE;
  }
  o.ndim--;
  o.dtype = RG_I32;
  if (in[1]) {
    rg_shape sc = rg__shape(ctx, in[1]);
    if (sc.ndim != o.ndim || memcmp(sc.dims, o.dims, sizeof(int64_t) * (size_t)o.ndim))
      return fail_shapes(ctx, call, "do not fit: the counter must have the logits' shape "
                         "without the last axis, one per row", sc, s), RG_NONE;
  }
  if (!as_f32(ctx, &in[0])) return RG_NONE;
  int64_t iv[4] = {top_k, (int64_t)seed, 0, 0};
  float fv[4] = {temperature, top_p, 0, 0};
  if (rg__emit(ctx, RG_OP_SAMPLE, in, &o, iv, fv, NULL, out) != RG_OK) return RG_NONE;
  rg__t(ctx, out[0])->flags &= (uint8_t)~RG_T_GRAD;
  return rg__handle(ctx, out[0]);
}
