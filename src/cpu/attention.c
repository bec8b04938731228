/*
 * attention.c - CPU kernels: attention (q, k, v or one fused qkv) and its backward. The row kernels' invariants are in rows.h.
 *
 * Attention recomputes its probabilities in the backward pass instead of storing the
 * T x S matrix: the forward keeps the log-sum-exp of each query row (its second output),
 * the backward g.o per row (8 bytes per query in all). The CPU computes the products in
 * f32 whatever the node's precision flag (the CUDA tensor-core paths). rg_attention's
 * masks (key padding, an additive bias; ops.h) enter each score as it is computed, the
 * same way in both passes, so no T x S mask is made either.
 */
#include "rows.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- attention ------------------------------------------------------------------------- */

/* Where the rows of one head live: row t of head bh = (b, h) starts at element
   b sb + h sh + t sr of its tensor. rg_attention's [B,H,T,D] operands are dense
   (sr = D); rg_attention_qkv's heads are D-column strips of [B,T,3C] (sr = 3C) and of
   its [B,T,C] output (sr = C), so neither op copies a head out before computing. */
typedef struct attn_lay { int64_t sb, sh, sr; } attn_lay;

/* q and dq use lay q; k, v, dk and dv lay k; o and g lay o. */
typedef struct attn_dims {
  int64_t BH, H, T, S, D;
  float scale;
  bool causal;
  attn_lay q, k, o;
} attn_dims;

/* The operands and results of either op, as base pointers of head 0 of batch 0; lse
   [BH,T] is the forward's second output and the backward's input. rg_attention's masks
   (ops.h), or NULL: key padding I32 [B,S], and the bias with its strides over [B,H,T,S]
   (rg__attn_bias_strides). */
typedef struct attn_io {
  const float *q, *k, *v, *g;
  float *o, *lse, *dq, *dk, *dv;
  const int32_t *kp;
  const float *bias;
  int64_t bst[4];
} attn_io;

static attn_dims attn_shape(const rg_kargs *k, attn_io *io) {
  attn_dims a;
  const rg_tv *x = &k->in[0];
  int op = k->node->op;
  memset(io, 0, sizeof *io);
  if (op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_BWD) {
    a.H = x->dims[1];
    a.BH = x->dims[0] * a.H;
    a.T = x->dims[2];
    a.D = x->dims[3];
    a.S = k->in[1].dims[2];
    a.q = (attn_lay){a.H * a.T * a.D, a.T * a.D, a.D};
    a.k = (attn_lay){a.H * a.S * a.D, a.S * a.D, a.D};
    a.o = a.q;
    io->q = x->p, io->k = k->in[1].p, io->v = k->in[2].p;
    int m = op == RG_OP_ATTENTION ? 3 : 6; /* the masks' inputs */
    if (op == RG_OP_ATTENTION) {
      io->o = k->out[0].p, io->lse = k->out[1].p;
    } else { /* q, k, v, o, g, lse, key padding, bias */
      io->g = k->in[4].p, io->lse = k->in[5].p;
      io->dq = k->out[0].p, io->dk = k->out[1].p, io->dv = k->out[2].p;
    }
    io->kp = k->in[m].p, io->bias = k->in[m + 1].p;
    if (io->bias) rg__attn_bias_strides(&k->in[m + 1], io->bst);
  } else { /* qkv [B,T,3C]: q, k, v are the thirds of a row */
    int64_t C = x->dims[2] / 3;
    a.H = k->node->i[1];
    a.BH = x->dims[0] * a.H;
    a.T = a.S = x->dims[1];
    a.D = C / a.H;
    a.q = a.k = (attn_lay){a.T * 3 * C, a.D, 3 * C};
    a.o = (attn_lay){a.T * C, a.D, C};
    io->q = x->p, io->k = io->q + C, io->v = io->q + 2 * C;
    if (op == RG_OP_ATTENTION_QKV) {
      io->o = k->out[0].p, io->lse = k->out[1].p;
    } else { /* qkv, o, g, lse */
      io->g = k->in[2].p, io->lse = k->in[3].p;
      io->dq = k->out[0].p, io->dk = io->dq + C, io->dv = io->dq + 2 * C;
    }
  }
  a.scale = a.D ? (float)(1.0 / sqrt((double)a.D)) : 0.f; /* D = 0: every score is 0 */
  a.causal = k->node->i[0] != 0;
  return a;
}

/* Offset of head bh's first row in layout l. */
static inline int64_t attn_head(const attn_dims *a, const attn_lay *l, int64_t bh) {
  return bh / a->H * l->sb + bh % a->H * l->sh;
}

/* Keys a query at t may see: s <= t when causal. */
static int64_t attn_keys(const attn_dims *a, int64_t t) {
  return a->causal ? min64(a->S, t + 1) : a->S;
}

/* The masks' term of score (bh, t, s): -inf for a padded key, else the bias (0 without). */
static inline float attn_mask(const attn_dims *a, const attn_io *io, int64_t bh, int64_t t,
                              int64_t s) {
  int64_t b = bh / a->H;
  if (io->kp && io->kp[b * a->S + s]) return -INFINITY;
  if (!io->bias) return 0.f;
  return io->bias[b * io->bst[0] + bh % a->H * io->bst[1] + t * io->bst[2] + s * io->bst[3]];
}

/* Score (bh, t, j) of q against key row kr: scale q.k, plus the masks' term when the
   call has masks (io->kp or io->bias). The backward rebuilds the forward's bit for bit. */
static inline float attn_score(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                               const float *q, const float *kr, int64_t bh, int64_t t,
                               int64_t j) {
  float s = vo->dot(q, kr, a->D) * a->scale;
  if (io->kp || io->bias) s += attn_mask(a, io, bh, t, j);
  return s;
}

/* p[j] = softmax_j(score j) over the visible keys (K: key 0 of the head); returns the
   log-sum-exp, which the backward pass uses to rebuild the same probabilities one key at
   a time. A row whose every score is -inf (masked) sees no key: p = 0, and 0 is
   returned, so the backward's exp(score - 0) is 0 for every key too. */
static float attn_probs(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                        const float *q, const float *K, float *p, int64_t bh, int64_t t,
                        int64_t ns) {
  for (int64_t j = 0; j < ns; j++) p[j] = attn_score(a, io, vo, q, K + j * a->k.sr, bh, t, j);
  float m = vo->max(p, ns);
  if (m == -INFINITY && (io->kp || io->bias)) {
    memset(p, 0, (size_t)ns * sizeof(float));
    return 0.f;
  }
  double s = vo->exp_sum(p, m, p, ns);
  float inv = (float)(1.0 / s);
  for (int64_t j = 0; j < ns; j++) p[j] *= inv;
  return m + (float)log(s);
}

/* o = sum_j p_j v_j, the keys' weights summed in key order for each column. */
static void attn_fwd_row(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                         const float *q, const float *K, const float *V, float *o,
                         float *lse, float *p, int64_t bh, int64_t t) {
  int64_t ns = attn_keys(a, t);
  *lse = ns ? attn_probs(a, io, vo, q, K, p, bh, t, ns) : 0.f; /* 0: finite for check_finite */
  vo->wsum(o, p, V, a->k.sr, ns, a->D, 0);
}

/* Per-thread scratch of `per` floats; NULL (and k->msg set) when memory ran out. */
static float *thread_scratch(rg_kargs *k, int nt, int64_t per) {
  float *s = rg__malloc(k->ctx, (size_t)nt * (size_t)(per ? per : 1) * sizeof(float));
  if (!s) snprintf(k->msg, k->msgcap, "out of host memory for attention scratch");
  return s;
}

/* What the forward and backward hand their bodies. scratch holds per thread slot one row
   of S floats (forward) or two (backward). */
typedef struct {
  const attn_dims *a;
  const attn_io *io;
  const rg_vec_ops *vo;
  float *scratch, *delta;
} attn_job;

static void attn_fwd_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const attn_job *j = arg;
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  float *p = j->scratch + (int64_t)slot * a->S;
  for (int64_t r = lo; r < hi; r++) {
    int64_t bh = r / a->T, t = r % a->T, kv = attn_head(a, &a->k, bh);
    attn_fwd_row(a, io, j->vo, io->q + attn_head(a, &a->q, bh) + t * a->q.sr, io->k + kv,
                 io->v + kv, io->o + attn_head(a, &a->o, bh) + t * a->o.sr, io->lse + r, p, bh,
                 t);
  }
}

/* Both forward ops: one query row per iteration. */
static rg_status attn_forward(rg_kargs *k) {
  attn_io io;
  attn_dims a = attn_shape(k, &io);
  int nt = nthreads(k);
  int64_t rows = a.BH * a.T;
  /* Empty tensors bound no size: with no rows, or D = 0, S may be anything (a scratch row
     of S floats, or a loop over S keys, could be astronomically large). With D = 0 every
     score is 0, o is empty and lse is log(visible keys), as the loop would compute it. */
  if (rows == 0) return RG_OK;
  if (a.D == 0 && !io.kp && !io.bias) {
    for (int64_t r = 0; r < rows; r++) {
      int64_t ns = attn_keys(&a, r % a.T);
      io.lse[r] = ns ? (float)log((double)ns) : 0.f;
    }
    return RG_OK;
  }
  if (a.D == 0) { /* every score is the masks' term: two passes over them, no scratch */
    for (int64_t r = 0; r < rows; r++) {
      int64_t bh = r / a.T, t = r % a.T, ns = attn_keys(&a, t);
      float m = -INFINITY;
      for (int64_t j = 0; j < ns; j++) m = fmaxf(m, attn_mask(&a, &io, bh, t, j));
      double s = 0;
      for (int64_t j = 0; m != -INFINITY && j < ns; j++)
        s += exp((double)attn_mask(&a, &io, bh, t, j) - m);
      io.lse[r] = m == -INFINITY ? 0.f : m + (float)log(s);
    }
    return RG_OK;
  }
  float *scratch = thread_scratch(k, nt, a.S);
  if (!scratch) return RG_ERR_OOM;
  rg_cpu_for(rows, rows * a.S * a.D > PAR_MIN ? nt : 1, attn_fwd_range,
             &(attn_job){&a, &io, rg_cpu_vec(), scratch, NULL});
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention(rg_kargs *k) { return attn_forward(k); }
rg_status rg_cpu_attention_qkv(rg_kargs *k) { return attn_forward(k); }

/* Pass 1, one query row: dq = scale sum_j ds_j k_j with ds_j = p_j (g.v_j - delta), where
   delta = sum_j p_j g.v_j (= g.o), p_j = exp(scale q.k_j - lse) from the forward's lse.
   delta is saved so pass 2 can rebuild p and ds one key at a time. p and dp are S-float
   scratch rows. */
static void attn_bwd_query(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                           const float *q, const float *K, const float *V, const float *g,
                           float *dq, float *p, float *dp, int64_t bh, int64_t t, float lse,
                           float *delta) {
  int64_t ns = attn_keys(a, t);
  for (int64_t j = 0; j < ns; j++) {
    p[j] = attn_score(a, io, vo, q, K + j * a->k.sr, bh, t, j);
    dp[j] = vo->dot(g, V + j * a->k.sr, a->D);
  }
  vo->exp_sum(p, lse, p, ns);
  double dl = 0;
  for (int64_t j = 0; j < ns; j++) dl += (double)p[j] * dp[j];
  *delta = (float)dl;
  if (!dq) return;
  for (int64_t j = 0; j < ns; j++) dp[j] = p[j] * (dp[j] - *delta) * a->scale;
  vo->wsum(dq, dp, K, a->k.sr, ns, a->D, 0);
}

/* Queries pass 2 takes at a time: their p and ds live on the stack. */
#define KEY_BLOCK 64

/* Pass 2, one key row: dk = scale sum_t ds_t q_t and dv = sum_t p_t g_t over the queries
   that see this key (t >= s when causal); Q and G are query 0 of the head. Either output
   may be unwanted (NULL). Blocks of KEY_BLOCK queries, in query order: each block's p and
   ds first, then its sums into dk and dv, so every element sums in query order. */
static void attn_bwd_key(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                         const float *Q, const float *k, const float *v, const float *G,
                         const float *lse, const float *delta, float *dk, float *dv,
                         int64_t bh, int64_t s) {
  float p[KEY_BLOCK], ds[KEY_BLOCK];
  int64_t t0 = a->causal ? s : 0;
  if (dk) memset(dk, 0, (size_t)a->D * sizeof(float));
  if (dv) memset(dv, 0, (size_t)a->D * sizeof(float));
  for (; t0 < a->T; t0 += KEY_BLOCK) {
    int64_t nb = min64(KEY_BLOCK, a->T - t0);
    for (int64_t i = 0; i < nb; i++) {
      int64_t t = t0 + i;
      p[i] = attn_score(a, io, vo, Q + t * a->q.sr, k, bh, t, s) - lse[t];
    }
    vo->exp_sum(p, 0.f, p, nb);
    if (dk) {
      for (int64_t i = 0; i < nb; i++) {
        int64_t t = t0 + i;
        ds[i] = p[i] * (vo->dot(G + t * a->o.sr, v, a->D) - delta[t]) * a->scale;
      }
      vo->wsum(dk, ds, Q + t0 * a->q.sr, a->q.sr, nb, a->D, 1);
    }
    if (dv) vo->wsum(dv, p, G + t0 * a->o.sr, a->o.sr, nb, a->D, 1);
  }
}

/* Pass 1 over query rows [lo, hi). */
static void attn_bwd_query_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const attn_job *j = arg;
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  float *p = j->scratch + (int64_t)slot * 2 * a->S, *dp = p + a->S;
  for (int64_t r = lo; r < hi; r++) {
    int64_t bh = r / a->T, t = r % a->T, kv = attn_head(a, &a->k, bh);
    int64_t qo = attn_head(a, &a->q, bh) + t * a->q.sr;
    attn_bwd_query(a, io, j->vo, io->q + qo, io->k + kv, io->v + kv,
                   io->g + attn_head(a, &a->o, bh) + t * a->o.sr, io->dq ? io->dq + qo : NULL,
                   p, dp, bh, t, io->lse[r], j->delta + r);
  }
}

/* Pass 2 over key rows [lo, hi). */
static void attn_bwd_key_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const attn_job *j = arg;
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    int64_t bh = r / a->S, s = r % a->S, ko = attn_head(a, &a->k, bh) + s * a->k.sr;
    attn_bwd_key(a, io, j->vo, io->q + attn_head(a, &a->q, bh), io->k + ko, io->v + ko,
                 io->g + attn_head(a, &a->o, bh), io->lse + bh * a->T, j->delta + bh * a->T,
                 io->dk ? io->dk + ko : NULL, io->dv ? io->dv + ko : NULL, bh, s);
  }
}

/* Both backward ops. */
static rg_status attn_backward(rg_kargs *k) {
  attn_io io;
  attn_dims a = attn_shape(k, &io);
  int nt = nthreads(k);
  int64_t qrows = a.BH * a.T, krows = a.BH * a.S;
  if (a.BH == 0 || a.D == 0) return RG_OK; /* every gradient is empty (see attn_forward) */
  /* per thread a p and a dp row, then delta per query row */
  float *scratch = thread_scratch(k, 1, (int64_t)nt * 2 * a.S + qrows);
  if (!scratch) return RG_ERR_OOM;
  attn_job j = {&a, &io, rg_cpu_vec(), scratch, scratch + (int64_t)nt * 2 * a.S};
  int par = qrows * a.S * a.D > PAR_MIN ? nt : 1;
  rg_cpu_for(qrows, par, attn_bwd_query_range, &j);
  if (io.dk || io.dv) rg_cpu_for(krows, par, attn_bwd_key_range, &j);
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention_bwd(rg_kargs *k) { return attn_backward(k); }
rg_status rg_cpu_attention_qkv_bwd(rg_kargs *k) { return attn_backward(k); }
