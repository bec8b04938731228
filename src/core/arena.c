/*
 * arena.c - the arenas the pools and the host staging allocate from: chunks of backend
 * memory bumped in allocation order, and the released ranges of the pass pool
 * (rg__release) and of the persistent pool (rg__release_persistent: freed rings).
 *
 * Invariants:
 *  - Allocation is a bump in allocation order, except that the pass pool first reuses
 *    ranges rg_backward released, and a new ring those of freed rings (best fit, lowest
 *    offset among equals). Both depend only
 *    on the sequence of allocations and releases, so an identical step after a reset
 *    yields identical offsets and addresses (a CUDA graph captured for one step replays
 *    for the next).
 *  - Released ranges are kept sorted by offset, adjacent ones merged, never across chunks.
 */
#include "internal.h"

#include <string.h>

void *rg__arena_alloc(rg_ctx *ctx, rg_arena *a, size_t bytes, size_t *off, bool host) {
  bytes = rg__align_up(bytes ? bytes : 1);
  rg_chunk *last = a->nchunks ? &a->chunks[a->nchunks - 1] : NULL;
  if (!last || a->used + bytes > last->size) {
    size_t cap = (size_t)a->capchunks;
    if (!rg__grow(ctx, (void **)&a->chunks, sizeof *a->chunks, (size_t)a->nchunks + 1, &cap))
      return NULL;
    a->capchunks = (int)cap;
    /* Chunks double so a growing step settles in a few allocations; after a reset the
       next chunk is sized for the whole previous step (hint). */
    size_t size = ctx->be->chunk_min;
    if (last && last->size * 2 > size) size = last->size * 2;
    if (a->hint > size) size = a->hint;
    if (bytes > size) size = bytes;
    double ts = ctx->trace ? rg__trace_now(ctx) : 0;
    void *p = host ? ctx->be->host_alloc(ctx, size) : ctx->be->alloc(ctx, size);
    if (!p) {
      if (ctx->trace) rg__trace_arena(ctx, a, "alloc", size, ts, false);
      return NULL;
    }
    if (last) a->base += last->size;
    a->chunks[a->nchunks++] = (rg_chunk){p, size};
    a->reserved += size;
    if (a->reserved > a->reserved_peak) a->reserved_peak = a->reserved;
    if (ctx->trace) rg__trace_arena(ctx, a, "alloc", size, ts, true);
    a->used = 0;
    a->hint = 0;
    last = &a->chunks[a->nchunks - 1];
  }
  void *p = (char *)last->p + a->used;
  if (off) *off = a->base + a->used;
  a->used += bytes;
  return p;
}

void rg__arena_reset(rg_ctx *ctx, rg_arena *a, bool host, bool release) {
  if (release || a->nchunks > 1) {
    size_t total = 0;
    double ts = ctx->trace ? rg__trace_now(ctx) : 0;
    for (int i = 0; i < a->nchunks; i++) {
      total += a->chunks[i].size;
      if (host) ctx->be->host_free(ctx, a->chunks[i].p);
      else ctx->be->free(ctx, a->chunks[i].p);
    }
    a->nchunks = 0;
    a->hint = release ? 0 : total;
    a->reserved = 0;
    if (ctx->trace && total) rg__trace_arena(ctx, a, "free", total, ts, true);
  }
  if (release) {
    rg__free(ctx, a->free);
    a->free = NULL;
    a->capfree = 0;
  }
  a->nfree = 0;
  a->used = 0;
  a->base = 0;
}

/* The best-fitting released range for `need` bytes (the smallest that holds them; the
   lowest offset among equals), cut from its front; NULL if none fits. Deterministic: the
   same sequence of allocations and releases gives the same offsets. */
void *rg__arena_reuse(rg_arena *a, size_t need, size_t *off) {
  int best = -1;
  for (int i = 0; i < a->nfree; i++)
    if (a->free[i].size >= need && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
  if (best < 0) return NULL;
  rg_range *r = &a->free[best];
  void *p = r->p;
  *off = r->off;
  r->off += need, r->p += need, r->size -= need;
  if (!r->size) {
    memmove(r, r + 1, sizeof *r * (size_t)(a->nfree - best - 1));
    a->nfree--;
  }
  return p;
}

void rg__unpin(rg_ctx *ctx, uint32_t root) {
  rg_tinfo *b = rg__t(ctx, root);
  if (--b->pins == 0 && (b->flags & RG_T_DEAD)) rg__release(ctx, root);
}

/* Tensor ref's bytes (a whole number of RG_ALIGN units inside one chunk) as a free range
   of its pool's arena, merged with its neighbours; RG_T_FREED set and the pool's bytes
   lowered. false (nothing changed) when the range list cannot grow. */
static bool give_back(rg_ctx *ctx, uint32_t ref) {
  rg_tinfo *t = rg__t(ctx, ref);
  rg_pool_s *pool = rg__poolof(ctx, ref);
  rg_arena *a = &pool->arena;
  size_t size = rg__align_up(t->nbytes ? t->nbytes : 1), base = 0;
  int c = 0;
  while (c + 1 < a->nchunks && t->off >= base + a->chunks[c].size) base += a->chunks[c++].size;
  size_t cap = (size_t)a->capfree;
  if (!rg__grow(ctx, (void **)&a->free, sizeof *a->free, (size_t)a->nfree + 1, &cap))
    return false;
  a->capfree = (int)cap;
  t->flags |= RG_T_FREED;
  pool->bytes -= size;
  int i = 0;
  while (i < a->nfree && a->free[i].off < t->off) i++;
  rg_range *f = a->free;
  bool prev = i > 0 && f[i - 1].chunk == c && f[i - 1].off + f[i - 1].size == t->off;
  bool next = i < a->nfree && f[i].chunk == c && t->off + size == f[i].off;
  if (prev && next) { /* fills the gap between two ranges */
    f[i - 1].size += size + f[i].size;
    memmove(&f[i], &f[i + 1], sizeof *f * (size_t)(a->nfree - i - 1));
    a->nfree--;
  } else if (prev) {
    f[i - 1].size += size;
  } else if (next) {
    f[i].off = t->off, f[i].p = (char *)t->data, f[i].size += size;
  } else {
    memmove(&f[i + 1], &f[i], sizeof *f * (size_t)(a->nfree - i));
    f[i] = (rg_range){t->off, size, (char *)t->data, c};
    a->nfree++;
  }
  return true;
}

void rg__release(rg_ctx *ctx, uint32_t ref) {
  rg_tinfo *t = rg__t(ctx, ref);
  /* An import's bytes are the caller's: an op's output must never be placed in them. */
  if (ref >> 31 || (t->flags & RG_T_FREED) || t->import) return;
  if (t->alias) { /* a view owns no bytes: it unpins its base, which may be dead already */
    t->flags |= RG_T_FREED;
    rg__unpin(ctx, t->alias);
    return;
  }
  if (t->pins) { /* views or exports still read these bytes: released with the last */
    t->flags |= RG_T_DEAD;
    return;
  }
  give_back(ctx, ref); /* out of host memory: the bytes are just not reused */
}

bool rg__release_persistent(rg_ctx *ctx, uint32_t ref) {
  return (ref >> 31) && !(rg__t(ctx, ref)->flags & RG_T_FREED) && give_back(ctx, ref);
}
