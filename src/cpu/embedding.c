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

rg_status rg_cpu_embedding(rg_kargs *k) {
  const float *table = k->in[0].p;
  const int32_t *idx = k->in[1].p;
  float *out = k->out[0].p;
  int64_t V = k->in[0].dims[0], C = k->in[0].dims[1], n = k->in[1].n;
  rg_status st = check_ids(k, idx, n, V);
  if (st != RG_OK) return st;
#pragma omp parallel for num_threads(nthreads(k)) if(n * C > PAR_MIN) schedule(static)
  for (int64_t p = 0; p < n; p++)
    memcpy(out + p * C, table + (int64_t)idx[p] * C, (size_t)C * sizeof(float));
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
#pragma omp parallel for num_threads(nthreads(k)) if(n * C > PAR_MIN && nblk > 1) schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c0 = b * CB, nb = min64(CB, C - c0);
    for (int64_t p = 0; p < n; p++) {
      float *row = dt + (int64_t)idx[p] * C + c0;
      const float *gr = g + p * C + c0;
      for (int64_t j = 0; j < nb; j++) row[j] += gr[j];
    }
  }
  return RG_OK;
}
