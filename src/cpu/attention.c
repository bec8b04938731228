/*
 * attention.c - CPU kernels: attention (q, k, v or one fused qkv) and its backward. The row kernels' invariants are in rows.h.
 *
 * Attention recomputes its probabilities in the backward pass instead of storing the
 * T x S matrix: the forward keeps the log-sum-exp of each query row (its second output,
 * 4 bytes per query), and the backward takes g.o per row from the forward's o. Scratch
 * is per thread: a block of query rows' scores and the head's keys transposed, never a
 * T x S matrix per head. The CPU computes the products in f32 whatever the node's
 * precision flag (the CUDA tensor-core paths). rg_attention's masks (key padding, an
 * additive bias; ops.h) enter each score as it is computed, the same way in both passes,
 * so no T x S mask is made either.
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
   [BH,T] is the forward's second output and the backward's input, as is o (o_in there). rg_attention's masks
   (ops.h), or NULL: key padding I32 [B,S], and the bias with its strides over [B,H,T,S]
   (rg__attn_bias_strides). */
typedef struct attn_io {
  const float *q, *k, *v, *g, *o_in;
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
      io->o_in = k->in[3].p, io->g = k->in[4].p, io->lse = k->in[5].p;
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
      io->o_in = k->in[1].p, io->g = k->in[2].p, io->lse = k->in[3].p;
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

/* ---- blocks of queries ------------------------------------------------------------------

   Both passes take the queries of a head QB rows at a time and compute their scores
   against the keys as one small matrix product (vec.h's mm, over a copy of the keys
   transposed to [D, S]); the probabilities, o, and the backward's products are matrix
   products over the same blocks. Under a causal mask a group of GR rows computes only the
   keys its last row sees, so the skipped triangle is all but GR rows wide. Every element
   of every product sums in an order fixed by the shapes (mm's invariant), so results do not
   depend on the thread count, and a score is the same bits in both passes. */

/* Query rows per block: a block's scores and probabilities are QB rows of scratch. */
#define QB 32
/* Rows per causal group (mm's tallest tile). */
#define GR 8

/* Keys whose scores a product computes for rows that see n: n rounded up to 16 (the
   widest vector), so the product's columns are whole vectors; the transposed keys past
   the real ones are 0 and so are those scores, which no row reads. */
static inline int64_t attn_cols(int64_t n) { return (n + 15) / 16 * 16; }

/* Floats in a scratch row of scores, and in a row of transposed keys (at least 1). */
static int64_t attn_ld(const attn_dims *a) { return attn_cols(a->S) + (a->S == 0); }

/* kt[d ld + s] = K[s sr + d] for keys [s0, s1), and 0 for s in [s1, attn_cols(s1)): the
   keys transposed, for the scores' product. */
static void attn_transpose(const rg_vec_ops *vo, float *kt, int64_t ld, const float *K,
                           int64_t sr, int64_t s0, int64_t s1, int64_t D) {
  vo->transpose(kt + s0, ld, K + s0 * sr, sr, s1 - s0, D);
  for (int64_t d = 0; d < D && attn_cols(s1) > s1; d++)
    memset(kt + d * ld + s1, 0, (size_t)(attn_cols(s1) - s1) * sizeof(float));
}

/* Row t's ns scores from their dot products: times the scale, plus the masks' term. */
static void attn_finish(const attn_dims *a, const attn_io *io, float *p, int64_t bh, int64_t t,
                        int64_t ns) {
  for (int64_t j = 0; j < ns; j++) p[j] *= a->scale;
  int64_t b = bh / a->H;
  if (io->kp) {
    const int32_t *kp = io->kp + b * a->S;
    for (int64_t j = 0; j < ns; j++)
      if (kp[j]) p[j] = -INFINITY;
  }
  if (io->bias) {
    const float *br = io->bias + b * io->bst[0] + bh % a->H * io->bst[1] + t * io->bst[2];
    for (int64_t j = 0; j < ns; j++)
      if (p[j] != -INFINITY) p[j] += br[j * io->bst[3]];
  }
}

/* The scores of queries [t0, t0 + nb) of head bh (Q: query t0) against the transposed
   keys kt into rows of p, each row's visible keys finished (attn_finish); returns the
   keys the block sees. Entries past a row's own keys, up to its group's, are left as
   computed: the callers overwrite or zero them. */
static int64_t attn_block_scores(const attn_dims *a, const attn_io *io, const rg_vec_ops *vo,
                                 const float *Q, const float *kt, float *p, int64_t ld,
                                 int64_t bh, int64_t t0, int64_t nb) {
  for (int64_t g = 0; g < nb; g += GR) {
    int64_t gn = min64(GR, nb - g);
    vo->mm(p + g * ld, ld, Q + g * a->q.sr, a->q.sr, 1, kt, ld, gn,
           attn_cols(attn_keys(a, t0 + g + gn - 1)), a->D, 0);
  }
  for (int64_t i = 0; i < nb; i++) attn_finish(a, io, p + i * ld, bh, t0 + i, attn_keys(a, t0 + i));
  return attn_keys(a, t0 + nb - 1);
}

/* C rows [0, nb) = rows of the block's P (rows of ld floats) times the keys' rows X (row
   stride xr), D columns: each group of GR rows sums over the keys its last row sees (the
   others' probabilities are 0 there). */
static void attn_block_pv(const attn_dims *a, const rg_vec_ops *vo, float *C, int64_t cr,
                          const float *P, int64_t ld, const float *X, int64_t xr, int64_t t0,
                          int64_t nb) {
  for (int64_t g = 0; g < nb; g += GR) {
    int64_t gn = min64(GR, nb - g);
    vo->mm(C + g * cr, cr, P + g * ld, ld, 1, X, xr, gn, a->D, attn_keys(a, t0 + g + gn - 1), 0);
  }
}

/* Scratch per thread slot: the transposed keys (and values, backward), then the block's
   rows. */
typedef struct {
  const attn_dims *a;
  const attn_io *io;
  const rg_vec_ops *vo;
  float *scratch;
  int64_t per, ld, nqb; /* floats per slot, scratch row length, query blocks per head */
} attn_job;

/* Softmax of row t's ns scores in place, zeroes up to nz; returns the log-sum-exp. A row
   whose every score is -inf (masked) sees no key: p = 0, and 0 is returned, so the
   backward's exp(score - 0) is 0 for every key too. */
static float attn_softmax(const attn_io *io, const rg_vec_ops *vo, float *p, int64_t ns,
                          int64_t nz) {
  float lse = 0.f; /* no key: finite for check_finite */
  if (ns) {
    float m = vo->max(p, ns);
    if (m == -INFINITY && (io->kp || io->bias)) {
      memset(p, 0, (size_t)ns * sizeof(float));
    } else {
      double s = vo->exp_sum(p, m, p, ns);
      float inv = (float)(1.0 / s);
      for (int64_t j = 0; j < ns; j++) p[j] *= inv;
      lse = m + (float)log(s);
    }
  }
  if (nz > ns) memset(p + ns, 0, (size_t)(nz - ns) * sizeof(float));
  return lse;
}

/* Forward items: query block r % nqb of head r / nqb. */
static void attn_fwd_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const attn_job *j = arg;
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  int64_t ld = j->ld;
  float *kt = j->scratch + (int64_t)slot * j->per, *p = kt + a->D * ld;
  int64_t have = 0; /* kt holds keys [0, have) of head (lo / nqb) onwards */
  for (int64_t r = lo; r < hi; r++) {
    int64_t bh = r / j->nqb, t0 = r % j->nqb * QB, nb = min64(QB, a->T - t0);
    int64_t kv = attn_head(a, &a->k, bh);
    int64_t ns = attn_keys(a, t0 + nb - 1);
    if (r == lo || t0 == 0) have = 0; /* a new head: its keys from the start */
    if (ns > have) attn_transpose(j->vo, kt, ld, io->k + kv, a->k.sr, have, ns, a->D), have = ns;
    attn_block_scores(a, io, j->vo, io->q + attn_head(a, &a->q, bh) + t0 * a->q.sr, kt, p, ld,
                      bh, t0, nb);
    for (int64_t i = 0; i < nb; i++)
      io->lse[bh * a->T + t0 + i] = attn_softmax(io, j->vo, p + i * ld, attn_keys(a, t0 + i), ns);
    attn_block_pv(a, j->vo, io->o + attn_head(a, &a->o, bh) + t0 * a->o.sr, a->o.sr, p, ld,
                  io->v + kv, a->k.sr, t0, nb);
  }
}

/* Per thread scratch of `per` floats; NULL (and k->msg set) when memory ran out. */
static float *thread_scratch(rg_kargs *k, int nt, int64_t per) {
  float *s = rg__malloc(k->ctx, (size_t)nt * (size_t)(per ? per : 1) * sizeof(float));
  if (!s) snprintf(k->msg, k->msgcap, "out of host memory for attention scratch");
  return s;
}

/* Both forward ops: blocks of QB query rows of one head per item. */
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
  int64_t ld = attn_ld(&a), per = (a.D + QB) * ld, nqb = (a.T + QB - 1) / QB;
  float *scratch = thread_scratch(k, nt, per);
  if (!scratch) return RG_ERR_OOM;
  attn_job j = {&a, &io, rg_cpu_vec(), scratch, per, ld, nqb};
  rg_cpu_for(a.BH * nqb, rows * a.S * a.D > PAR_MIN ? nt : 1, attn_fwd_range, &j);
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention(rg_kargs *k) { return attn_forward(k); }
rg_status rg_cpu_attention_qkv(rg_kargs *k) { return attn_forward(k); }

/* The backward of one query block [t0, t0 + nb) of head bh, with P = exp(score - lse)
   rebuilt from the forward's lse and dP = g.v:
     delta = g.o (= sum_j P dP), dS = P (dP - delta) scale,
     dq = dS K, dk += dS^T Q, dv += P^T G,
   each wanted output (non-NULL) summed in query order across blocks. kt and vt are the
   head's keys and values transposed; p and dp are QB rows of ld floats. */
static void attn_bwd_block(const attn_job *j, int64_t bh, int64_t t0, int64_t nb,
                           const float *kt, const float *vt, float *p, float *dp) {
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  const rg_vec_ops *vo = j->vo;
  int64_t ld = j->ld, D = a->D;
  int64_t qo = attn_head(a, &a->q, bh) + t0 * a->q.sr, go = attn_head(a, &a->o, bh) + t0 * a->o.sr;
  int64_t ko = attn_head(a, &a->k, bh);
  const float *Q = io->q + qo, *G = io->g + go, *O = io->o_in + go, *lse = io->lse + bh * a->T + t0;
  int64_t ns = attn_block_scores(a, io, vo, Q, kt, p, ld, bh, t0, nb);
  for (int64_t g = 0; g < nb; g += GR) {
    int64_t gn = min64(GR, nb - g);
    vo->mm(dp + g * ld, ld, G + g * a->o.sr, a->o.sr, 1, vt, ld, gn,
           attn_cols(attn_keys(a, t0 + g + gn - 1)), D, 0);
  }
  for (int64_t i = 0; i < nb; i++) {
    int64_t n = attn_keys(a, t0 + i);
    float *pr = p + i * ld, *dr = dp + i * ld;
    vo->exp_scale(pr, lse[i], 1.f, pr, n);
    float delta = vo->dot(G + i * a->o.sr, O + i * a->o.sr, D);
    for (int64_t s = 0; s < n; s++) dr[s] = pr[s] * (dr[s] - delta) * a->scale;
    if (ns > n) {
      memset(pr + n, 0, (size_t)(ns - n) * sizeof(float));
      memset(dr + n, 0, (size_t)(ns - n) * sizeof(float));
    }
  }
  if (io->dq) attn_block_pv(a, vo, io->dq + qo, a->q.sr, dp, ld, io->k + ko, a->k.sr, t0, nb);
  /* keys [s0, s0 + GR) take the block's queries from the first that sees s0 on; the
     first block that sees them writes their rows, later ones add to them */
  for (int64_t s0 = 0; s0 < ns && (io->dk || io->dv); s0 += GR) {
    int64_t gk = min64(GR, ns - s0), i0 = a->causal && s0 > t0 ? s0 - t0 : 0;
    int64_t kr = ko + s0 * a->k.sr;
    int add = a->causal ? s0 < t0 : t0 > 0;
    if (io->dv)
      vo->mm(io->dv + kr, a->k.sr, p + i0 * ld + s0, 1, ld, G + i0 * a->o.sr, a->o.sr, gk, D,
             nb - i0, add);
    if (io->dk)
      vo->mm(io->dk + kr, a->k.sr, dp + i0 * ld + s0, 1, ld, Q + i0 * a->q.sr, a->q.sr, gk, D,
             nb - i0, add);
  }
}

/* Backward items: whole heads, their query blocks in order (dk and dv sum across them). */
static void attn_bwd_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const attn_job *j = arg;
  const attn_dims *a = j->a;
  const attn_io *io = j->io;
  int64_t ld = j->ld;
  float *kt = j->scratch + (int64_t)slot * j->per, *vt = kt + a->D * ld, *p = vt + a->D * ld;
  float *dp = p + QB * ld;
  for (int64_t bh = lo; bh < hi; bh++) {
    int64_t ko = attn_head(a, &a->k, bh), ns = a->T ? attn_keys(a, a->T - 1) : 0;
    for (int64_t s = ns; s < a->S; s++) { /* keys no query sees (the blocks write the rest) */
      if (io->dk) memset(io->dk + ko + s * a->k.sr, 0, (size_t)a->D * sizeof(float));
      if (io->dv) memset(io->dv + ko + s * a->k.sr, 0, (size_t)a->D * sizeof(float));
    }
    attn_transpose(j->vo, kt, ld, io->k + ko, a->k.sr, 0, ns, a->D);
    attn_transpose(j->vo, vt, ld, io->v + ko, a->k.sr, 0, ns, a->D);
    for (int64_t t0 = 0; t0 < a->T; t0 += QB)
      attn_bwd_block(j, bh, t0, min64(QB, a->T - t0), kt, vt, p, dp);
  }
}

/* Both backward ops. */
static rg_status attn_backward(rg_kargs *k) {
  attn_io io;
  attn_dims a = attn_shape(k, &io);
  int nt = nthreads(k);
  if (a.BH == 0 || a.D == 0) return RG_OK; /* every gradient is empty (see attn_forward) */
  int64_t ld = attn_ld(&a), per = 2 * (a.D + QB) * ld;
  float *scratch = thread_scratch(k, nt, per);
  if (!scratch) return RG_ERR_OOM;
  attn_job j = {&a, &io, rg_cpu_vec(), scratch, per, ld, (a.T + QB - 1) / QB};
  rg_cpu_for(a.BH, a.BH * a.T * a.S * a.D > PAR_MIN ? nt : 1, attn_bwd_range, &j);
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention_bwd(rg_kargs *k) { return attn_backward(k); }
rg_status rg_cpu_attention_qkv_bwd(rg_kargs *k) { return attn_backward(k); }
