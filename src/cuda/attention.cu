/*
 * attention.cu - the launchers of rg_attention and rg_attention_qkv and their backward
 * passes: they check the dtypes, describe the call (attention.h: att_dims, att_io) and run
 * it on cuDNN's fused attention where it applies (attention_dnn.cu), else on resgrad's
 * kernels: attention_mma.cu for BF16 inputs, attention_f32.cu for F32.
 */
#include "attention.h"

namespace { /* file-private: helpers (the launchers follow) */

/* The dims, layouts and pointers of either op (as the CPU's attn_shape), once att_dtypes
   has passed. */
att_dims att_shape(const rg_kargs *k, att_io *io) {
  att_dims a;
  const rg_tv *x = &k->in[0];
  int op = k->node->op;
  memset(io, 0, sizeof *io);
  a.ibf = x->dtype == RG_BF16;
  a.obf = 0;
  for (int i = 0; i < RG_MAX_OUT; i++) /* o, or the first of dq, dk, dv present */
    if (k->out[i].p) {
      a.obf = k->out[i].dtype == RG_BF16;
      break;
    }
  size_t ie = a.ibf ? 2 : 4, oe = a.obf ? 2 : 4;
  if (op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_BWD) {
    a.H = x->dims[1];
    a.T = (int)x->dims[2];
    a.D = (int)x->dims[3];
    a.S = (int)k->in[1].dims[2];
    a.q = {a.H * a.T * a.D, (int64_t)a.T * a.D, a.D};
    a.k = {a.H * a.S * a.D, (int64_t)a.S * a.D, a.D};
    a.o = a.q;
    io->q = x->p, io->k = k->in[1].p, io->v = k->in[2].p;
    int m = op == RG_OP_ATTENTION ? 3 : 6; /* the masks' inputs */
    if (op == RG_OP_ATTENTION) {
      io->out = k->out[0].p, io->lse = (float *)k->out[1].p;
    } else { /* q, k, v, o, g, lse, key padding, bias */
      io->o = k->in[3].p, io->g = (const float *)k->in[4].p;
      io->lse = (float *)k->in[5].p;
      io->dq = k->out[0].p, io->dk = k->out[1].p, io->dv = k->out[2].p;
    }
    io->kp = (const int32_t *)k->in[m].p, io->bias = (const float *)k->in[m + 1].p;
    if (io->bias) rg__attn_bias_strides(&k->in[m + 1], io->bst);
  } else { /* qkv [B,T,3C]: q, k, v are the thirds of a row */
    int64_t C = x->dims[2] / 3;
    a.H = k->node->i[1];
    a.T = a.S = (int)x->dims[1];
    a.D = (int)(C / a.H);
    a.q = a.k = {a.T * 3 * C, a.D, 3 * C};
    a.o = {a.T * C, a.D, C};
    io->q = x->p, io->k = (const char *)x->p + C * ie, io->v = (const char *)x->p + 2 * C * ie;
    if (op == RG_OP_ATTENTION_QKV) {
      io->out = k->out[0].p, io->lse = (float *)k->out[1].p;
    } else { /* qkv, o, g, lse */
      io->o = k->in[1].p, io->g = (const float *)k->in[2].p;
      io->lse = (float *)k->in[3].p;
      io->dq = k->out[0].p;
      io->dk = (char *)io->dq + C * oe, io->dv = (char *)io->dq + 2 * C * oe;
    }
  }
  a.BH = x->dims[0] * a.H;
  a.dn = (a.D + 15) & ~15;
  a.d8 = (a.D + 7) & ~7;
  /* D = 0: every score is 0 whatever the scale; 1 keeps it positive, as the mma kernels'
     masks need (a masked score of -inf stays -inf when scaled) */
  a.scale = a.D ? (float)(1.0 / sqrt((double)a.D)) : 1.f;
  a.causal = k->node->i[0] != 0;
  struct { const void *p; size_t es; const att_lay *l; } t[9] = {
      {io->q, ie, &a.q},    {io->k, ie, &a.k},   {io->v, ie, &a.k},
      {io->o, ie, &a.o},    {io->g, 4, &a.o},    {io->out, oe, &a.o},
      {io->dq, oe, &a.q},   {io->dk, oe, &a.k},  {io->dv, oe, &a.k}};
  a.vec = 1;
  for (int i = 0; i < 9; i++) a.vec = a.vec && rows_on(t[i].p, t[i].es, *t[i].l, a.D, 4);
  a.v8 = a.ibf;
  for (int i = 0; i < 3; i++) a.v8 = a.v8 && rows_on(t[i].p, 2, *t[i].l, a.D, 8);
  return a;
}

/* The dtypes the kernels take: q, k, v (and o, in the backward) all F32 or all BF16, g
   and lse F32, the masks (where given) key padding I32 and bias F32, the results F32 or
   BF16 (one dtype for dq, dk and dv), lse out F32. The core records nothing else; a node
   that broke the rule would otherwise be read as the other dtype, so it fails here
   instead. */
rg_status att_dtypes(rg_kargs *k) {
  int op = k->node->op, nin = k->node->nin, nout = k->node->nout;
  bool fwd = !(rg_optab[op].flags & RG_F_BWD);
  int nx = op == RG_OP_ATTENTION ? 3 : op == RG_OP_ATTENTION_QKV ? 1
           : op == RG_OP_ATTENTION_BWD ? 4 : 2; /* inputs of the q dtype */
  int mk = op == RG_OP_ATTENTION ? 3 : op == RG_OP_ATTENTION_BWD ? 6 : nin; /* masks' */
  int dt = k->in[0].dtype, ot = -1;
  bool ok = dt == RG_F32 || dt == RG_BF16;
  for (int i = 1; i < nin; i++)
    if (i < mk || k->in[i].p)
      ok = ok && k->in[i].dtype == (i < nx ? dt : i == mk ? RG_I32 : RG_F32);
  for (int i = 0; i < (fwd ? 1 : nout); i++) {
    if (!k->out[i].p) continue;
    if (ot < 0) ot = k->out[i].dtype;
    ok = ok && k->out[i].dtype == ot && (ot == RG_F32 || ot == RG_BF16);
  }
  if (fwd) ok = ok && k->out[1].dtype == RG_F32;
  if (ok) return RG_OK;
  char in[64] = "", out[32] = "";
  for (int i = 0; i < nin; i++)
    snprintf(in + strlen(in), sizeof in - strlen(in), "%s%s", i ? " " : "",
             k->in[i].p ? rg__dtype_name(k->in[i].dtype) : "-");
  for (int i = 0; i < nout; i++)
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "",
             k->out[i].p ? rg__dtype_name(k->out[i].dtype) : "-");
  snprintf(k->msg, k->msgcap,
           "the CUDA attention takes q, k, v and o all F32 or all BF16, g and lse F32, key "
           "padding I32 and bias F32, and gives F32 or BF16 results (lse F32); this node has "
           "inputs %s, outputs %s", in, out);
  return RG_ERR_UNSUPPORTED;
}

/* Blocks are numbered in one grid dimension: at most one per query or key row. */
rg_status attention_limits(rg_kargs *k, const att_dims &a) {
  if (a.BH * (a.T > a.S ? a.T : a.S) > 0x7fffffff) {
    snprintf(k->msg, k->msgcap, "attention with %lld x %d rows is more than one launch covers",
             (long long)a.BH, a.T > a.S ? a.T : a.S);
    return RG_ERR_UNSUPPORTED;
  }
  if (a.D > DMAX) {
    snprintf(k->msg, k->msgcap,
             "attention with head size D = %d: the CUDA backend supports D <= %d (its tiles "
             "keep 64 x D blocks of q, k and v in shared memory)", a.D, DMAX);
    return RG_ERR_UNSUPPORTED;
  }
  return RG_OK;
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

static rg_status attention_fwd_any(rg_kargs *k) {
  rg_status st = att_dtypes(k);
  if (st != RG_OK) return st;
  att_io io;
  att_dims a = att_shape(k, &io);
  if (a.BH == 0 || a.T == 0) return RG_OK;
  st = attention_limits(k, a);
  if (st != RG_OK) return st;
#ifdef RG_HAVE_CUDNN
  bool ran = false; /* masked calls run on resgrad's kernels (attention.h) */
  st = io.kp || io.bias ? RG_OK : rg_cuda_att_dnn(k, a, io, false, &ran);
  if (st != RG_OK || ran) return st;
#endif
  return a.ibf ? rg_cuda_att_mma_fwd(k, a, io) : rg_cuda_att_f32_fwd(k, a, io);
}

/* Scratch: delta of every query row (4 bytes a row), then, 256-byte aligned, for the
   BF16 kernels when it fits, g rounded to bf16 in rows of d8 (dense [BH, T, d8], so every
   row is 16-byte aligned whatever g's layout): kernel 2 then fills its G tiles by
   cp.async instead of loading and rounding f32 g again (GPT-2: 12.6 MB of 64 MiB). */
static rg_status attention_bwd_any(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  rg_status st = att_dtypes(k);
  if (st != RG_OK) return st;
  att_io io;
  att_dims a = att_shape(k, &io);
  if (a.BH == 0 || a.D == 0 || (a.T == 0 && a.S == 0)) return RG_OK;
  st = attention_limits(k, a);
  if (st != RG_OK) return st;
  if (a.T == 0) { /* no queries (rg_attention only: qkv has S = T), so dk and dv are zero
                     and dense; stream-ordered memsets, capturable, whose status is the
                     runtime's last error, which check_launch reads */
    size_t bytes = (size_t)(a.BH * a.S * a.D) * (a.obf ? sizeof(bf16) : sizeof(float));
    if (io.dk) cudaMemsetAsync(io.dk, 0, bytes, L->stream);
    if (io.dv) cudaMemsetAsync(io.dv, 0, bytes, L->stream);
    return rg_cuda_check_launch(k, "attention_bwd");
  }
#ifdef RG_HAVE_CUDNN
  bool ran = false;
  st = io.kp || io.bias ? RG_OK : rg_cuda_att_dnn(k, a, io, true, &ran);
  if (st != RG_OK || ran) return st;
#endif
  size_t rows = (size_t)(a.BH * a.T), need = rows * sizeof(float);
  if (need > L->scratch_bytes) return rg_cuda_no_scratch(k, need);
  float *delta = (float *)L->scratch;
  size_t at = (need + 255) & ~(size_t)255, gb = rows * (size_t)a.d8 * sizeof(bf16);
  bf16 *gc = a.ibf && (io.dk || io.dv) && a.S > 0 && at + gb <= L->scratch_bytes
                 ? (bf16 *)((char *)L->scratch + at)
                 : nullptr;
  return a.ibf ? rg_cuda_att_mma_bwd(k, a, io, delta, gc)
               : rg_cuda_att_f32_bwd(k, a, io, delta);
}

rg_status rg_cuda_attention(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_qkv(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_bwd(rg_kargs *k) { return attention_bwd_any(k); }
rg_status rg_cuda_attention_qkv_bwd(rg_kargs *k) { return attention_bwd_any(k); }
