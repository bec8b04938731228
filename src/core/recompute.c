/*
 * recompute.c - activation checkpointing: rg_checkpoint_begin and rg_checkpoint_end mark a
 * region of the pass's nodes whose tensors go back to the pass pool when it ends, and
 * rg_backward's hooks record their recomputation where its rules need them, inside the
 * same pass (still one drain, one CUDA graph).
 *
 * Invariants:
 *  - Regions do not nest; ctx->regions holds their node ranges [b, e), ascending and
 *    disjoint. None is open while rg_backward, rg_step_begin or rg_reset runs.
 *  - At rg_checkpoint_end every pass tensor a node of the region made is marked ckpt and
 *    given back (rg__release), except what survives the region: the outputs of the node
 *    that made its output, the base of a surviving view, tensors retained (rg_retain_grad)
 *    or lent (rg_export), and the outputs of uploads and of nodes that write persistent
 *    tensors (those are never run twice). Every reader of a ckpt tensor was recorded
 *    inside the region, since rg__check refuses one afterwards: the release is safe.
 *  - A region's recomputation copies, in order, each of its nodes that made a ckpt
 *    tensor: the same op, inputs, baked scalars and aux (dropout: the same seed, step
 *    tensor and counter base, so the same mask), fresh outputs. The same kernels on the
 *    same values write the same bytes, so the gradients are bit for bit those of the pass
 *    without the region. A ckpt tensor's redo is its copy's output.
 *  - rg_backward's rules for the region run on the original tape, so every fusion it
 *    decides from the tape's structure is the one it decides without the region; only
 *    the nodes recorded while ctx->replay names the region read the copies (rg__commit
 *    and rg__view map a ckpt ref to its redo). Once the walk is below the region's first
 *    node, every reader of the copies is recorded: they go back to the pass pool and the
 *    redo refs are cleared, so another rg_backward replays the region again.
 */
#include "internal.h"

#include <string.h>

rg_status rg_checkpoint_begin(rg_ctx *ctx) {
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->region_open)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_checkpoint_begin", "a region is open already "
                    "(rg_checkpoint_begin twice without rg_checkpoint_end): regions do not "
                    "nest; end the open one first");
  ctx->region_open = true;
  ctx->region_b = ctx->n_nodes;
  return RG_OK;
}

static bool is_pass(uint32_t ref) { return ref && !(ref >> 31); }

/* Does node n write a persistent tensor, or is it an upload? Its outputs then survive its
   region: it is never recorded twice. */
static bool runs_once(const rg_node *n) {
  if (n->op == RG_OP_UPLOAD) return true;
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] >> 31) return true;
  return false;
}

/* Marks the tensors nodes [b, e) made ckpt, but those that survive (see the top), and
   gives their bytes back. keep: the node that made the region's output. */
static void give_back(rg_ctx *ctx, size_t b, size_t e, size_t keep) {
  for (size_t k = b; k < e; k++) {
    const rg_node *n = &ctx->nodes[k];
    if (k == keep || runs_once(n)) continue;
    for (int j = 0; j < n->nout; j++) {
      if (!is_pass(n->out[j])) continue;
      rg_tinfo *t = rg__t(ctx, n->out[j]);
      t->ckpt = !(t->flags & (RG_T_RETAIN | RG_T_FREED)) && !t->exports && !t->import;
    }
  }
  for (size_t k = b; k < e; k++) { /* a surviving view keeps the bytes it lies on */
    const rg_node *n = &ctx->nodes[k];
    for (int j = 0; j < n->nout; j++) {
      rg_tinfo *t = is_pass(n->out[j]) ? rg__t(ctx, n->out[j]) : NULL;
      if (t && !t->ckpt && t->alias) rg__t(ctx, t->alias)->ckpt = 0;
    }
  }
  for (size_t k = b; k < e; k++) {
    const rg_node *n = &ctx->nodes[k];
    for (int j = 0; j < n->nout; j++)
      if (is_pass(n->out[j]) && rg__t(ctx, n->out[j])->ckpt) rg__release(ctx, n->out[j]);
  }
}

rg_status rg_checkpoint_end(rg_ctx *ctx, rg_tensor out) {
  const char *call = "rg_checkpoint_end";
  if (!ctx) return RG_ERR_MISUSE;
  if (!ctx->region_open)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "no region is open (rg_checkpoint_end without "
                    "rg_checkpoint_begin)");
  ctx->region_open = false; /* closed whatever follows; on an error it keeps its tensors */
  if (!out.id) return RG_OK;
  uint32_t ref;
  rg_status st = rg__check(ctx, out, call, 1, &ref);
  if (st != RG_OK) return st;
  size_t b = ctx->region_b, e = ctx->n_nodes;
  const rg_tinfo *t = rg__t(ctx, ref);
  if ((ref >> 31) || !t->node || t->node - 1 < b)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the output is not a tensor an op of the "
                    "region made (%s); the region was closed and keeps its tensors: pass "
                    "the result of its last op", ref >> 31 ? "it is persistent"
                    : !t->node ? "it was made by no op" : "it was made before the region");
  size_t cap = ctx->capregions;
  if (!rg__grow(ctx, (void **)&ctx->regions, sizeof *ctx->regions, (size_t)ctx->nregions + 1,
                &cap))
    return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the list of regions; "
                    "the region was closed and keeps its tensors");
  ctx->capregions = (uint32_t)cap;
  ctx->regions[ctx->nregions++] = (rg_region){b, e};
  give_back(ctx, b, e, t->node - 1);
  return RG_OK;
}

/* ---- rg_backward's hooks ---------------------------------------------------------------- */

static bool is_ckpt(rg_ctx *ctx, uint32_t ref) { return is_pass(ref) && rg__t(ctx, ref)->ckpt; }

/* The region holding node k, or -1. */
static int64_t region_of(const rg_ctx *ctx, size_t k) {
  uint32_t lo = 0, hi = ctx->nregions; /* the first region that begins after k: hi */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (ctx->regions[mid].b <= k) lo = mid + 1;
    else hi = mid;
  }
  return hi && k < ctx->regions[hi - 1].e ? (int64_t)hi - 1 : -1;
}

/* Records region r's recomputation (see the top). */
static rg_status replay(rg_ctx *ctx, uint32_t r) {
  rg_region g = ctx->regions[r];
  ctx->replay = r + 1;
  ctx->replay_slot = ctx->replay_end = ctx->pool[RG_POOL_PASS].n;
  for (size_t k = g.b; k < g.e; k++) {
    rg_node n = ctx->nodes[k]; /* a copy: recording may move the node array */
    bool redo = false;
    for (int j = 0; j < n.nout; j++) redo |= is_ckpt(ctx, n.out[j]);
    if (!redo) continue;
    if (!rg__record(ctx, (rg_op)n.op)) return ctx->last;
    uint32_t o[RG_MAX_OUT] = {0};
    for (int j = 0; j < n.nout; j++) {
      if (!n.out[j]) continue;
      rg_shape s = rg__shape(ctx, n.out[j]);
      uint32_t base = rg__t(ctx, n.out[j])->alias;
      o[j] = base ? rg__view(ctx, base, s, "rg_backward")
                  : rg__new(ctx, RG_POOL_PASS, (rg_dtype)s.dtype, s.ndim, s.dims, "rg_backward");
      if (!o[j]) {
        ctx->n_nodes--; /* outputs already made stay unreferenced until the pass resets */
        return ctx->last;
      }
    }
    ctx->replay_end = ctx->pool[RG_POOL_PASS].n;
    rg_node *c = &ctx->nodes[ctx->n_nodes - 1];
    *c = n;
    c->flags = 0; /* recorded by rg_backward: not on the tape */
    memcpy(c->out, o, sizeof o);
    rg_status st = rg__commit(ctx, c);
    if (st != RG_OK) return st;
    for (int j = 0; j < n.nout; j++)
      if (is_ckpt(ctx, n.out[j])) rg__t(ctx, n.out[j])->redo = o[j];
  }
  return RG_OK;
}

rg_status rg__region_reached(rg_ctx *ctx, size_t k) {
  if (!ctx->nregions) return RG_OK;
  const rg_node *n = &ctx->nodes[k];
  bool reads = false;
  for (int j = 0; j < n->nin; j++) reads |= is_ckpt(ctx, n->in[j]);
  for (int j = 0; j < n->nout; j++) reads |= is_ckpt(ctx, n->out[j]);
  int64_t r = reads ? region_of(ctx, k) : -1;
  if (r < 0 || ctx->replay == (uint32_t)r + 1) return RG_OK;
  rg__region_passed(ctx, SIZE_MAX);
  return replay(ctx, (uint32_t)r);
}

void rg__region_passed(rg_ctx *ctx, size_t k) {
  if (!ctx->replay) return;
  rg_region g = ctx->regions[ctx->replay - 1];
  if (k != SIZE_MAX && k >= g.b) return;
  for (size_t i = g.b; i < g.e; i++) {
    const rg_node *n = &ctx->nodes[i];
    for (int j = 0; j < n->nout; j++)
      if (is_pass(n->out[j])) rg__t(ctx, n->out[j])->redo = 0;
  }
  for (uint32_t s = ctx->replay_slot; s < ctx->replay_end; s++) rg__release(ctx, s + 1);
  ctx->replay = 0;
}
