/*
 * embedding.c - CPU kernels: the embedding lookup and its backward. The row kernels' invariants are in rows.h.
 */
#include "rows.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- embedding --------------------------------------------------------------------------- */

static rg_status check_ids(rg_kargs *k, const int32_t *idx, int64_t n, int64_t V) {
  for (int64_t p = 0; p < n; p++) {
    if (idx[p] < 0 || idx[p] >= V) {
      snprintf(k->msg, k->msgcap,
               "index %d at position %lld is outside [0, %lld): token ids must be < the "
               "table's rows (%lld); check the tokenizer's vocabulary size against the table",
               (int)idx[p], (long long)p, (long long)V, (long long)V);
      return RG_ERR_MISUSE;
    }
  }
  return RG_OK;
}

/* What the two kernels hand their bodies (the backward's table is g, its out dtable). */
typedef struct {
  const float *table;
  float *out;
  const int32_t *idx;
  int64_t C, n;
} emb_job;

static void lookup_range(void *a, int64_t lo, int64_t hi, int slot) {
  const emb_job *j = a;
  (void)slot;
  for (int64_t p = lo; p < hi; p++)
    memcpy(j->out + p * j->C, j->table + (int64_t)j->idx[p] * j->C, (size_t)j->C * sizeof(float));
}

/* Column blocks [lo, hi) of CB columns, every id in order. */
static void grad_range(void *a, int64_t lo, int64_t hi, int slot) {
  const emb_job *j = a;
  (void)slot;
  for (int64_t b = lo; b < hi; b++) {
    int64_t c0 = b * CB, nb = min64(CB, j->C - c0);
    for (int64_t p = 0; p < j->n; p++) {
      float *row = j->out + (int64_t)j->idx[p] * j->C + c0;
      const float *gr = j->table + p * j->C + c0;
      for (int64_t c = 0; c < nb; c++) row[c] += gr[c];
    }
  }
}

rg_status rg_cpu_embedding(rg_kargs *k) {
  const float *table = k->in[0].p;
  const int32_t *idx = k->in[1].p;
  float *out = k->out[0].p;
  int64_t V = k->in[0].dims[0], C = k->in[0].dims[1], n = k->in[1].n;
  rg_status st = check_ids(k, idx, n, V);
  if (st != RG_OK) return st;
  rg_cpu_for(n, par_threads(k, n * C > PAR_MIN), lookup_range,
             &(emb_job){.table = table, .out = out, .idx = idx, .C = C});
  return RG_OK;
}

/* Repeated ids accumulate. Threads split the columns, not the ids, so each table element
   is summed by one thread in id order: deterministic without atomics. */
rg_status rg_cpu_embedding_bwd(rg_kargs *k) {
  const int32_t *idx = k->in[0].p;
  const float *g = k->in[1].p;
  float *dt = k->out[0].p;
  int64_t V = k->out[0].dims[0], C = k->out[0].dims[1], n = k->in[0].n;
  rg_status st = check_ids(k, idx, n, V);
  if (st != RG_OK) return st;
  memset(dt, 0, (size_t)(V * C) * sizeof(float));
  int64_t nblk = (C + CB - 1) / CB;
  rg_cpu_for(nblk, par_threads(k, n * C > PAR_MIN), grad_range,
             &(emb_job){.table = g, .out = dt, .idx = idx, .C = C, .n = n});
  return RG_OK;
}
