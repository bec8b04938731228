/*
 * ring.c - CPU kernels of the ring buffers (ops.h: RING_PUSH, RING_GATHER, RING_SAMPLE).
 *
 * Invariants: a ring's entries are moved as stored (any dtype, by its element size); the
 * state (head, count, draws) is read when the node runs, never taken from the node; a
 * gather checks every index before it writes anything, and names the first bad one.
 */
#include "rows.h"

#include <stdio.h>
#include <string.h>

static size_t elem(int dtype) { return dtype == RG_BF16 ? 2 : 4; }

rg_status rg_cpu_ring_push(rg_kargs *k) {
  const rg_tv *r = &k->in[0], *e = &k->in[2];
  int32_t *s = k->in[1].p;
  int64_t cap = r->dims[0], rows = r->dims[1], n = e->n / rows;
  size_t row = (size_t)rows * elem(r->dtype);
  for (int64_t j = 0; j < n; j++)
    memcpy((char *)r->p + (size_t)((s[RG_RING_HEAD] + j) % cap) * row,
           (const char *)e->p + (size_t)j * row, row);
  s[RG_RING_HEAD] = (int32_t)((s[RG_RING_HEAD] + n) % cap);
  s[RG_RING_COUNT] = (int32_t)min64(s[RG_RING_COUNT] + n, cap);
  return RG_OK;
}

typedef struct {
  const char *ring;
  char *out;
  const int32_t *idx;
  int64_t first, cap;
  size_t row;
} gather_job;
static void gather_range(void *a, int64_t lo, int64_t hi, int slot) {
  const gather_job *j = a;
  (void)slot;
  for (int64_t p = lo; p < hi; p++)
    memcpy(j->out + (size_t)p * j->row,
           j->ring + (size_t)((j->first + j->idx[p]) % j->cap) * j->row, j->row);
}

rg_status rg_cpu_ring_gather(rg_kargs *k) {
  const rg_tv *r = &k->in[0], *ix = &k->in[2];
  const int32_t *s = k->in[1].p, *idx = ix->p;
  int64_t cap = r->dims[0], rows = r->dims[1], count = s[RG_RING_COUNT];
  int64_t first = s[RG_RING_HEAD] - count + cap; /* the oldest entry's slot, plus cap */
  size_t row = (size_t)rows * elem(r->dtype);
  for (int64_t p = 0; p < ix->n; p++)
    if (idx[p] < 0 || idx[p] >= count) {
      snprintf(k->msg, k->msgcap, RG_RING_INDEX_MSG, (long long)idx[p], (long long)p,
               (long long)count, (long long)count);
      return RG_ERR_MISUSE;
    }
  rg_cpu_for(ix->n, par_threads(k, ix->n * rows > PAR_MIN), gather_range,
             &(gather_job){r->p, k->out[0].p, idx, first, cap, row});
  return RG_OK;
}

rg_status rg_cpu_ring_sample(rg_kargs *k) {
  int32_t *s = k->in[0].p, *out = k->out[0].p;
  int64_t count = s[RG_RING_COUNT];
  if (count <= 0) {
    snprintf(k->msg, k->msgcap, RG_RING_EMPTY_MSG);
    return RG_ERR_MISUSE;
  }
  uint64_t key = (uint64_t)k->node->i[0];
  uint64_t draws = (uint32_t)s[RG_RING_DRAWS_LO] | (uint64_t)(uint32_t)s[RG_RING_DRAWS_HI] << 32;
  for (int64_t e = 0; e < k->out[0].n; e++)
    out[e] = (int32_t)rg_philox_below(key, draws, (uint64_t)e, (uint64_t)count);
  draws++;
  s[RG_RING_DRAWS_LO] = (int32_t)(uint32_t)draws;
  s[RG_RING_DRAWS_HI] = (int32_t)(uint32_t)(draws >> 32);
  return RG_OK;
}
