/*
 * optim.c - CPU kernels that update tensors in place: gradient accumulation, zeroing a
 * list of gradients, global-norm and per-value clipping, the fused AdamW and SGD steps
 * and the learning-rate schedule's rate.
 *
 * Invariants:
 *  - These ops have no output; in[0] (or the tensors named by aux) is modified, in queue
 *    order like any other node.
 *  - Hyperparameters and the step count are read from device tensors at run time, never
 *    from the node, so a recorded step replays correctly after rg_optim_set_lr.
 *  - A clip state with state[1] != 0 (non-finite norm) makes the optimizer step a no-op:
 *    weights, moments and the step count stay bit-identical.
 *  - Each element is updated by one thread and the norm is summed in double over chunks
 *    fixed by the tensor sizes, so results are identical for any thread count.
 *  - F32 tensors take the fast path; a BF16 parameter or gradient is widened to F32 for
 *    the arithmetic and rounded back (round to nearest even).
 */
#include "cpu.h"
#include "vec.h"
#include "../core/sched.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Elements per parallel work item in the update loops. */
#define CHUNK 16384
/* A norm splits each tensor into at most this many fixed chunks (partials on the stack). */
#define MAX_CHUNKS 64

static int64_t nchunks(int64_t n) { return (n + CHUNK - 1) / CHUNK; }

static inline float ld(const void *p, int dt, int64_t i) {
  return dt == RG_BF16 ? rg_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static inline void st(void *p, int dt, int64_t i, float v) {
  if (dt == RG_BF16)
    ((uint16_t *)p)[i] = rg_f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

static rg_tv view_of(rg_kargs *k, uint32_t ref) {
  rg_tv v;
  memset(&v, 0, sizeof v);
  if (ref) rg__tv(k->ctx, ref, &v);
  return v;
}

/* What the loops below hand their bodies: chunks of CHUNK elements of up to four tensors
   of n elements (or, for the norm, of cs elements with a partial sum each). */
typedef struct {
  const rg_tv *a, *b, *c, *d;
  const void *consts; /* adam_c or sgd_c */
  double *part;
  int64_t n, cs;
  float f;
  bool fast;
} opt_job;

/* ---- accum and zero_list ----------------------------------------------------------------- */

static void accum_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const rg_tv *d = j->a, *s = j->b;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    int64_t end = min64(j->n, (c + 1) * CHUNK);
    if (j->fast) {
      float *pd = d->p;
      const float *ps = s->p;
      for (int64_t i = c * CHUNK; i < end; i++) pd[i] += ps[i];
    } else {
      for (int64_t i = c * CHUNK; i < end; i++)
        st(d->p, d->dtype, i, ld(d->p, d->dtype, i) + ld(s->p, s->dtype, i));
    }
  }
}

rg_status rg_cpu_accum(rg_kargs *k) {
  const rg_tv *d = &k->in[0], *s = &k->in[1];
  bool fast = d->dtype == RG_F32 && s->dtype == RG_F32;
  rg_cpu_for(nchunks(d->n), nthreads(k), accum_range,
             &(opt_job){.a = d, .b = s, .n = d->n, .fast = fast});
  return RG_OK;
}

rg_status rg_cpu_zero_list(rg_kargs *k) {
  const rg_list *l = k->node->aux;
  for (int i = 0; i < l->n; i++) {
    rg_tv v = view_of(k, l->ref[i]);
    if (v.p) memset(v.p, 0, (size_t)v.n * rg__dtype_size(v.dtype));
  }
  return RG_OK;
}

/* ---- clip ------------------------------------------------------------------------------- */

static void sumsq_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const rg_tv *g = j->a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    double s = 0;
    for (int64_t i = c * j->cs; i < min64(j->n, (c + 1) * j->cs); i++) {
      double v = ld(g->p, g->dtype, i);
      s += v * v;
    }
    j->part[c] = s;
  }
}

static double sumsq(const rg_tv *g, int threads) {
  double part[MAX_CHUNKS];
  int64_t n = g->n, nc = min64(MAX_CHUNKS, nchunks(n));
  if (nc < 1) return 0;
  int64_t cs = (n + nc - 1) / nc;
  rg_cpu_for(nc, threads, sumsq_range, &(opt_job){.a = g, .part = part, .n = n, .cs = cs});
  double s = 0;
  for (int64_t c = 0; c < nc; c++) s += part[c];
  return s;
}

static void scale_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const rg_tv *g = j->a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++)
    for (int64_t i = c * CHUNK; i < min64(j->n, (c + 1) * CHUNK); i++)
      st(g->p, g->dtype, i, ld(g->p, g->dtype, i) * j->f);
}

static void scale_tensor(const rg_tv *g, float coef, int threads) {
  rg_cpu_for(nchunks(g->n), threads, scale_range, &(opt_job){.a = g, .n = g->n, .f = coef});
}

rg_status rg_cpu_clip(rg_kargs *k) {
  const rg_list *l = k->node->aux;
  float *state = k->in[0].p;
  double max_norm = k->node->f[0], ss = 0;
  int nt = nthreads(k);
  for (int i = 0; i < l->n; i++) {
    rg_tv g = view_of(k, l->ref[i]);
    if (g.p) ss += sumsq(&g, nt);
  }
  double norm = sqrt(ss);
  state[0] = (float)norm;
  if (!isfinite(norm)) {
    state[1] = 1.f;
    k->soft = RG_ERR_NONFINITE;
    snprintf(k->msg, k->msgcap,
             "gradient norm is %s; the next optimizer step is skipped and the gradients are "
             "left as they are: look for a NaN/Inf in the loss or inputs, or lower the "
             "learning rate",
             isnan(norm) ? "NaN" : "Inf");
    return RG_OK;
  }
  state[1] = 0.f;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return RG_OK;
  for (int i = 0; i < l->n; i++) {
    rg_tv g = view_of(k, l->ref[i]);
    if (g.p) scale_tensor(&g, (float)coef, nt);
  }
  return RG_OK;
}

/* Clamps to [-m, m]; the comparisons keep a NaN (as fminf/fmaxf would not). */
static void clamp_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const rg_tv *g = j->a;
  float m = j->f;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    for (int64_t i = c * CHUNK; i < min64(j->n, (c + 1) * CHUNK); i++) {
      float v = ld(g->p, g->dtype, i);
      st(g->p, g->dtype, i, v > m ? m : v < -m ? -m : v);
    }
  }
}

static void clamp_tensor(const rg_tv *g, float m, int threads) {
  rg_cpu_for(nchunks(g->n), threads, clamp_range, &(opt_job){.a = g, .n = g->n, .f = m});
}

rg_status rg_cpu_clip_value(rg_kargs *k) {
  const rg_list *l = k->node->aux;
  for (int i = 0; i < l->n; i++) {
    rg_tv g = view_of(k, l->ref[i]);
    if (g.p) clamp_tensor(&g, k->node->f[0], nthreads(k));
  }
  return RG_OK;
}

/* ---- optimizers -------------------------------------------------------------------------- */

/* The rate of the update that follows, from the step count before it; nothing when that
   update is skipped (in[2], the clip state, says a non-finite norm). The step count is
   read unsigned, as bump_step adds. */
rg_status rg_cpu_lr_schedule(rg_kargs *k) {
  const float *state = k->in[2].p;
  if (state && state[1] != 0.f) return RG_OK;
  float *h = k->in[0].p;
  h[RG_H_LR] = rg__sched_rate(k->node->i, k->node->f, (uint32_t)*(const int32_t *)k->in[1].p);
  return RG_OK;
}

/* True when the clip state says this step must leave everything untouched. */
static bool skipped(const rg_kargs *k) {
  const float *state = k->in[0].p;
  return state && state[1] != 0.f;
}

/* Increments the device step count; returns the new value t (1 on the first update). */
static int64_t bump_step(rg_kargs *k, const rg_optim *o) {
  rg_tv s = view_of(k, o->step);
  int32_t *p = s.p;
  /* unsigned add: wraps instead of signed overflow after 2^31 steps */
  p[0] = (int32_t)((uint32_t)p[0] + 1u);
  return p[0];
}

/* The per-step constants of AdamW, folded once in double as PyTorch does on the host. */
typedef rg_vec_adam adam_c;

/* PyTorch's single-tensor AdamW, op for op: decoupled decay, m.lerp_(g, 1-b1),
   v = v*b2 + (1-b2) g^2, w += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
static inline void adam_elem(const adam_c *c, float *w, float g, float *m, float *v) {
  float mv = *m + c->omb1 * (g - *m);
  float vv = *v * c->b2 + c->omb2 * (g * g);
  *m = mv;
  *v = vv;
  *w = *w * c->decay + (-c->step_size) * (mv / (sqrtf(vv) / c->bc2_sqrt + c->eps));
}

static void adam_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const adam_c *c = j->consts;
  const rg_tv *w = j->a, *g = j->b, *m = j->c, *v = j->d;
  (void)slot;
  for (int64_t ch = lo; ch < hi; ch++) {
    int64_t e0 = ch * CHUNK, e1 = min64(j->n, (ch + 1) * CHUNK);
    if (j->fast) { /* the same bits as adam_elem, a vector at a time */
      rg_cpu_vec()->adamw(c, (float *)w->p + e0, (const float *)g->p + e0, (float *)m->p + e0,
                          (float *)v->p + e0, e1 - e0);
      continue;
    }
    for (int64_t i = e0; i < e1; i++) {
      float wv = ld(w->p, w->dtype, i), mv = ld(m->p, m->dtype, i), vv = ld(v->p, v->dtype, i);
      adam_elem(c, &wv, ld(g->p, g->dtype, i), &mv, &vv);
      st(w->p, w->dtype, i, wv);
      st(m->p, m->dtype, i, mv);
      st(v->p, v->dtype, i, vv);
    }
  }
}

static void adam_tensor(const adam_c *c, const rg_tv *w, const rg_tv *g, const rg_tv *m,
                        const rg_tv *v, int threads) {
  bool fast = w->dtype == RG_F32 && g->dtype == RG_F32 && m->dtype == RG_F32 &&
              v->dtype == RG_F32;
  rg_cpu_for(nchunks(w->n), threads, adam_range,
             &(opt_job){.a = w, .b = g, .c = m, .d = v, .consts = c, .n = w->n, .fast = fast});
}

static void shadow_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const float *pw = j->a->p;
  uint16_t *ps = j->b->p;
  (void)slot;
  for (int64_t ch = lo; ch < hi; ch++)
    for (int64_t i = ch * CHUNK; i < min64(j->n, (ch + 1) * CHUNK); i++) ps[i] = rg_f32_to_bf16(pw[i]);
}

/* The updated parameter w rounded into its BF16 shadow (o->shadow; absent: nothing). */
static void to_shadow(rg_kargs *k, const rg_tv *w, uint32_t shadow) {
  rg_tv s = view_of(k, shadow);
  if (!s.p) return;
  rg_cpu_for(nchunks(w->n), nthreads(k), shadow_range, &(opt_job){.a = w, .b = &s, .n = w->n});
}

/* i[0] = 1 (rg_zero_grad right after the step): the gradients are zeroed once read, also
   when the update is skipped. */
static rg_status zero_after(rg_kargs *k, const rg_optim *o) {
  for (int i = 0; k->node->i[0] && i < o->grads.n; i++) {
    rg_tv g = view_of(k, o->grads.ref[i]);
    if (g.p) memset(g.p, 0, (size_t)g.n * rg__dtype_size(g.dtype));
  }
  return RG_OK;
}

rg_status rg_cpu_adamw(rg_kargs *k) {
  const rg_optim *o = k->node->aux;
  if (skipped(k)) return zero_after(k, o);
  rg_tv hv = view_of(k, o->hyper);
  const float *h = hv.p;
  double lr = h[RG_H_LR], b1 = h[RG_H_B1], b2 = h[RG_H_B2], wd = h[RG_H_WD];
  double t = (double)bump_step(k, o);
  double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
  adam_c c = {(float)(1.0 - lr * wd), (float)(1.0 - b1), (float)b2, (float)(1.0 - b2),
              (float)(lr / bc1), (float)sqrt(bc2), h[RG_H_EPS]};
  for (int i = 0; i < o->params.n; i++) {
    rg_tv w = view_of(k, o->params.ref[i]), g = view_of(k, o->grads.ref[i]);
    rg_tv m = view_of(k, o->m.ref[i]), v = view_of(k, o->v.ref[i]);
    if (!w.p || !g.p || !m.p || !v.p) continue;
    adam_tensor(&c, &w, &g, &m, &v, nthreads(k));
    to_shadow(k, &w, o->shadow.ref[i]);
  }
  return zero_after(k, o);
}

typedef struct sgd_c { float lr, momentum, wd; } sgd_c;

/* PyTorch's SGD with dampening 0: g' = g + wd w; buf = momentum buf + g' (buf starts at
   zero, which equals PyTorch's first-step buf = g'); w -= lr buf, or w -= lr g' without
   momentum. buf == NULL means no momentum. */
static inline void sgd_elem(const sgd_c *c, float *w, float g, float *buf) {
  if (c->wd != 0.f) g = g + c->wd * *w;
  if (buf) {
    *buf = *buf * c->momentum + g;
    g = *buf;
  }
  *w = *w + (-c->lr) * g;
}

static void sgd_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const opt_job *j = arg;
  const sgd_c *c = j->consts;
  const rg_tv *w = j->a, *g = j->b, *m = j->c;
  (void)slot;
  for (int64_t ch = lo; ch < hi; ch++) {
    int64_t end = min64(j->n, (ch + 1) * CHUNK);
    for (int64_t i = ch * CHUNK; i < end; i++) {
      if (j->fast) {
        sgd_elem(c, (float *)w->p + i, ((const float *)g->p)[i], m->p ? (float *)m->p + i : NULL);
      } else {
        float wv = ld(w->p, w->dtype, i), bv = m->p ? ld(m->p, m->dtype, i) : 0.f;
        sgd_elem(c, &wv, ld(g->p, g->dtype, i), m->p ? &bv : NULL);
        st(w->p, w->dtype, i, wv);
        if (m->p) st(m->p, m->dtype, i, bv);
      }
    }
  }
}

static void sgd_tensor(const sgd_c *c, const rg_tv *w, const rg_tv *g, const rg_tv *m,
                       int threads) {
  bool fast = w->dtype == RG_F32 && g->dtype == RG_F32 && (!m->p || m->dtype == RG_F32);
  rg_cpu_for(nchunks(w->n), threads, sgd_range,
             &(opt_job){.a = w, .b = g, .c = m, .consts = c, .n = w->n, .fast = fast});
}

rg_status rg_cpu_sgd(rg_kargs *k) {
  const rg_optim *o = k->node->aux;
  if (skipped(k)) return zero_after(k, o);
  rg_tv hv = view_of(k, o->hyper);
  const float *h = hv.p;
  sgd_c c = {h[RG_H_LR], h[RG_H_B1], h[RG_H_WD]};
  bump_step(k, o);
  bool momentum = c.momentum != 0.f && o->m.n > 0;
  for (int i = 0; i < o->params.n; i++) {
    rg_tv w = view_of(k, o->params.ref[i]), g = view_of(k, o->grads.ref[i]);
    rg_tv m = momentum ? view_of(k, o->m.ref[i]) : view_of(k, 0);
    if (!w.p || !g.p) continue;
    sgd_tensor(&c, &w, &g, &m, nthreads(k));
    to_shadow(k, &w, o->shadow.ref[i]);
  }
  return zero_after(k, o);
}

/* ---- allreduce: the transport is the core's (dist.c); CPU tensors are host memory ---- */

rg_status rg_cpu_allreduce(rg_kargs *k) {
  return rg__dist_allreduce_host(k->ctx, k->node->aux, k->msg, k->msgcap);
}
