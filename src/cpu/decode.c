/*
 * decode.c - CPU kernels of autoregressive decoding (ops.h: KV_WRITE, ATTENTION_CACHED,
 * SAMPLE).
 *
 * Invariants:
 *  - Every position is checked before anything is written: a bad one fails the node with
 *    the cache and the output untouched.
 *  - Positions, counters and the cache are read when the node runs, never from the node.
 *  - One thread per (batch row, query row, head) or per logits row, each output element
 *    written by one thread: results do not depend on the thread count.
 *  - SAMPLE's thresholds are found bit by bit over rg_sample_key (32 passes each, counts
 *    exact, masses summed in double), the procedure the CUDA kernel runs.
 */
#include "rows.h"
#include "../core/sample.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Every pos[b] in [0, S - T], else the reason in k->msg. */
static rg_status check_pos(rg_kargs *k, const int32_t *pos, int64_t B, int64_t S, int64_t T) {
  for (int64_t b = 0; b < B; b++)
    if (pos[b] < 0 || pos[b] > S - T) {
      snprintf(k->msg, k->msgcap, RG_DECODE_POS_MSG, (long long)pos[b], (long long)b,
               (long long)(S - T));
      return RG_ERR_MISUSE;
    }
  return RG_OK;
}

rg_status rg_cpu_kv_write(rg_kargs *k) {
  const rg_tv *K = &k->in[0], *qkv = &k->in[2];
  float *kc = K->p, *vc = k->in[1].p;
  const float *x = qkv->p;
  const int32_t *pos = k->in[3].p;
  int64_t B = K->dims[0], H = K->dims[1], S = K->dims[2], D = K->dims[3], T = qkv->dims[1];
  int64_t C = H * D;
  rg_status st = check_pos(k, pos, B, S, T);
  if (st != RG_OK) return st;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const float *row = x + (b * T + t) * 3 * C;
      for (int64_t h = 0; h < H; h++) {
        size_t at = (size_t)(((b * H + h) * S + pos[b] + t) * D);
        memcpy(kc + at, row + C + h * D, sizeof(float) * (size_t)D);
        memcpy(vc + at, row + 2 * C + h * D, sizeof(float) * (size_t)D);
      }
    }
  return RG_OK;
}

typedef struct cached_job {
  const float *x, *kc, *vc;
  const int32_t *pos;
  float *o, scale;
  int64_t H, S, D, T;
} cached_job;

/* Rows [lo, hi) of b, t, h: one query against its sequence's cached keys and values. */
static void cached_range(void *arg, int64_t lo, int64_t hi, int slot) {
  (void)slot;
  const cached_job *j = arg;
  int64_t H = j->H, S = j->S, D = j->D, T = j->T, C = H * D;
  for (int64_t r = lo; r < hi; r++) {
    int64_t h = r % H, t = r / H % T, b = r / (H * T), n = j->pos[b] + t + 1;
    const float *q = j->x + (b * T + t) * 3 * C + h * D;
    const float *kb = j->kc + (b * H + h) * S * D, *vb = j->vc + (b * H + h) * S * D;
    float *out = j->o + (b * T + t) * C + h * D;
    float m = -INFINITY;
    for (int64_t s = 0; s < n; s++) { /* the row's largest score, then the weighted sum */
      float d = 0;
      for (int64_t i = 0; i < D; i++) d += q[i] * kb[s * D + i];
      if (d * j->scale > m) m = d * j->scale;
    }
    double l = 0;
    for (int64_t i = 0; i < D; i++) out[i] = 0;
    for (int64_t s = 0; s < n; s++) {
      float d = 0;
      for (int64_t i = 0; i < D; i++) d += q[i] * kb[s * D + i];
      float p = expf(d * j->scale - m);
      l += p;
      for (int64_t i = 0; i < D; i++) out[i] += p * vb[s * D + i];
    }
    for (int64_t i = 0; i < D; i++) out[i] = (float)(out[i] / l);
  }
}

rg_status rg_cpu_attention_cached(rg_kargs *k) {
  const rg_tv *qkv = &k->in[0], *K = &k->in[1];
  const int32_t *pos = k->in[3].p;
  int64_t B = K->dims[0], H = K->dims[1], S = K->dims[2], D = K->dims[3], T = qkv->dims[1];
  int64_t rows = B * T * H;
  rg_status st = check_pos(k, pos, B, S, T);
  if (st != RG_OK) return st;
  cached_job j = {qkv->p, K->p, k->in[2].p, pos, k->out[0].p, 1.0f / sqrtf((float)D),
                  H, S, D, T};
  rg_cpu_for(rows, par_threads(k, rows * D * S > PAR_MIN), cached_range, &j);
  return RG_OK;
}

/* The largest key c (bit by bit from the top) for which the count (w == NULL) or the
   weight (w[i]) of the elements with key >= max(c, lo) reaches need. */
static uint32_t threshold(const uint32_t *key, const float *w, int64_t V, uint32_t lo,
                          double need) {
  uint32_t c = 0;
  for (int bit = 31; bit >= 0; bit--) {
    uint32_t cand = c | 1u << bit, at = cand > lo ? cand : lo;
    double got = 0;
    for (int64_t i = 0; i < V; i++)
      if (key[i] >= at) got += w ? (double)w[i] : 1.0;
    if (got >= need) c = cand;
  }
  return c > lo ? c : lo;
}

static int32_t sample_row(const float *x, int64_t V, const rg_node *n, uint32_t counter,
                          uint64_t row, uint32_t *key, float *w) {
  float t = n->f[0], top_p = n->f[1];
  int64_t top_k = n->i[0];
  if (t == 0) { /* greedy: the first maximum */
    int64_t a = 0;
    for (int64_t i = 1; i < V; i++)
      if (x[i] > x[a]) a = i;
    return (int32_t)a;
  }
  float m = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    key[i] = rg_sample_key(x[i]);
    if (x[i] > m) m = x[i];
  }
  uint32_t lo = 0;
  if (top_k > 0 && top_k < V) lo = threshold(key, NULL, V, 0, (double)top_k);
  if (top_p < 1) {
    double z = 0;
    for (int64_t i = 0; i < V; i++) {
      w[i] = expf((x[i] - m) / t);
      if (key[i] >= lo) z += w[i];
    }
    lo = threshold(key, w, V, lo, (double)top_p * z);
  }
  int64_t a = -1;
  float best = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    if (key[i] < lo) continue;
    float s = x[i] / t + rg_sample_gumbel((uint64_t)n->i[1], counter, row, (uint64_t)i);
    if (a < 0 || s > best) best = s, a = i;
  }
  return (int32_t)a;
}

typedef struct sample_job {
  const float *x;
  const int32_t *ctr;
  int32_t *out;
  const rg_node *node;
  int64_t V;
  uint32_t *key; /* V keys and V weights per slot, or NULL (greedy) */
  float *w;
} sample_job;

static void sample_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const sample_job *j = arg;
  int64_t V = j->V;
  for (int64_t r = lo; r < hi; r++)
    j->out[r] = sample_row(j->x + r * V, V, j->node, j->ctr ? (uint32_t)j->ctr[r] : 0,
                           (uint64_t)r, j->key ? j->key + (size_t)slot * V : NULL,
                           j->w ? j->w + (size_t)slot * V : NULL);
}

rg_status rg_cpu_sample(rg_kargs *k) {
  const rg_tv *x = &k->in[0];
  const int32_t *ctr = k->in[1].p;
  int32_t *out = k->out[0].p;
  int64_t V = last_dim(x), R = k->out[0].n;
  bool scratch = k->node->f[0] != 0;
  uint32_t *key = NULL;
  float *w = NULL;
  if (scratch) { /* keys and weights of one row per thread */
    int nt = nthreads(k);
    key = rg__malloc(k->ctx, sizeof(uint32_t) * (size_t)(V * nt));
    w = rg__malloc(k->ctx, sizeof(float) * (size_t)(V * nt));
    if (!key || !w) {
      rg__free(k->ctx, key);
      rg__free(k->ctx, w);
      snprintf(k->msg, k->msgcap, "out of host memory for the rows' keys (%lld bytes)",
               (long long)(8 * V * nt));
      return RG_ERR_OOM;
    }
  }
  rg_cpu_for(R, par_threads(k, R * V > PAR_MIN), sample_range,
             &(sample_job){x->p, ctr, out, k->node, V, key, w});
  rg__free(k->ctx, key);
  rg__free(k->ctx, w);
  return RG_OK;
}
