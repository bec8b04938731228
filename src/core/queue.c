/*
 * queue.c - recording nodes, the barrier (drain), and the calls that reset pools.
 *
 * Invariants:
 *  - ctx->nodes holds every node of the current pass generation in program order, which
 *    is a valid topological order; [q_head, n_nodes) is the queue, the rest has run.
 *  - A drain runs the queue exactly once. If a node fails, the nodes before it are
 *    READY, its outputs and every later pass-pool output become FAILED with the message,
 *    and the queue is dropped (never retried). Persistent tensors never become FAILED:
 *    an in-place update that did not run simply left the old value.
 *  - rg_step_begin and rg_reset of a pool refuse, before draining, while any of its
 *    tensors is exported (ctx->exports) or a checkpoint region is open; a reset of the
 *    pass pool calls the release of every import after its drain, so no node that reads
 *    one runs after it.
 *  - n_nodes <= opt.max_pass_nodes (<= UINT32_MAX, so a node index + 1 fits a tensor's
 *    32-bit node field): the guard drain bounds the queue, this bounds the tape.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* The pass-growth bound (rg_options.max_pass_nodes) was reached while recording op:
   RG_ERR_OOM naming the label under which most of this pass's nodes were recorded and
   the op that recorded most of those. Counted here, by one scan of the tape, so that
   recording pays only a comparison. If the per-label counts cannot be allocated, the
   message names only the op that recorded most. */
static void pass_full(rg_ctx *ctx, rg_op op) {
  if (ctx->err != RG_OK) { /* the message would not be kept: spare the scan */
    rg__fail(ctx, RG_ERR_OOM, rg_optab[op].name, "this pass is full");
    return;
  }
  uint32_t *per = rg__calloc(ctx, ctx->nlabels, sizeof *per), top = 0;
  for (size_t k = 0; per && k < ctx->n_nodes; k++) per[ctx->nodes[k].label]++;
  for (uint32_t l = 1; per && l < ctx->nlabels; l++)
    if (per[l] > per[top]) top = l;
  size_t by_op[RG_OP_COUNT] = {0};
  rg_op most = op;
  for (size_t k = 0; k < ctx->n_nodes; k++) {
    const rg_node *n = &ctx->nodes[k];
    if (per && n->label != top) continue;
    if (++by_op[n->op] > by_op[most]) most = (rg_op)n->op;
  }
  char site[512];
  const char *lab = rg__label_str(ctx, top);
  if (per)
    snprintf(site, sizeof site, "most were recorded under %s%s%s (%zu), %zu of them by %s",
             *lab ? "[" : "no label", lab, *lab ? "]" : "", (size_t)per[top], by_op[most],
             rg_optab[most].name);
  else
    snprintf(site, sizeof site, "%zu of them by %s", by_op[most], rg_optab[most].name);
  rg__free(ctx, per);
  rg__fail(ctx, RG_ERR_OOM, rg_optab[op].name,
           "this pass has recorded %zu nodes, its bound (rg_options.max_pass_nodes), without "
           "rg_step_begin or rg_reset; %s: call rg_step_begin once per step, or raise "
           "max_pass_nodes", ctx->n_nodes, site);
}

rg_node *rg__record(rg_ctx *ctx, rg_op op) {
  if (ctx->n_nodes >= ctx->opt.max_pass_nodes) {
    pass_full(ctx, op);
    return NULL;
  }
  size_t cap = ctx->cap_nodes;
  if (!rg__grow(ctx, (void **)&ctx->nodes, sizeof *ctx->nodes, ctx->n_nodes + 1, &cap)) {
    rg__fail(ctx, RG_ERR_OOM, rg_optab[op].name, "out of host memory for the queue");
    return NULL;
  }
  ctx->cap_nodes = cap;
  rg_node *n = &ctx->nodes[ctx->n_nodes++];
  memset(n, 0, sizeof *n);
  n->op = (uint16_t)op;
  n->nin = (uint8_t)rg_optab[op].nin;
  n->nout = (uint8_t)rg_optab[op].nout;
  n->label = ctx->lsp ? ctx->lstack[ctx->lsp - 1] : 0;
  return n;
}

rg_status rg__commit(rg_ctx *ctx, rg_node *n) {
  uint32_t idx = (uint32_t)(n - ctx->nodes) + 1;
  /* While rg_backward replays a checkpoint region, a tensor the region gave back is read
     as its recomputation. */
  for (int i = 0; ctx->replay && i < n->nin; i++)
    if (n->in[i] && !(n->in[i] >> 31) && rg__t(ctx, n->in[i])->redo)
      n->in[i] = rg__t(ctx, n->in[i])->redo;
  bool grad = false;
  for (int i = 0; i < n->nin && !ctx->no_grad; i++)
    if (n->in[i] && (rg__t(ctx, n->in[i])->flags & RG_T_GRAD)) grad = true;
  if (grad) n->flags |= RG_N_GRAD;
  for (int i = 0; i < n->nout; i++) {
    if (!n->out[i] || (n->out[i] >> 31)) continue; /* persistent: updated in place */
    rg_tinfo *t = rg__t(ctx, n->out[i]);
    t->node = idx;
    t->state = RG_PENDING;
    if (grad && (t->dtype == RG_F32 || t->dtype == RG_BF16)) t->flags |= RG_T_GRAD;
  }
  ctx->st.nodes_recorded++;
  size_t queued = ctx->n_nodes - ctx->q_head;
  if (ctx->trace && queued == 1) rg__trace_recorded(ctx);
  if (queued > ctx->st.queue_peak) ctx->st.queue_peak = queued;
  if (ctx->opt.check) return rg__drain(ctx, RG_DRAIN_CHECK);
  if (queued >= ctx->opt.max_queued) return rg__drain(ctx, RG_DRAIN_GUARD);
  return RG_OK;
}

void *rg__stage(rg_ctx *ctx, size_t bytes) {
  return rg__arena_alloc(ctx, &ctx->stage, bytes, NULL, true);
}

void *rg__stage_copy(rg_ctx *ctx, const void *src, size_t bytes) {
  void *p = rg__stage(ctx, bytes);
  if (p && bytes && !ctx->opt.dry_run) memcpy(p, src, bytes);
  return p;
}

static void set_state(rg_ctx *ctx, size_t first, size_t last, int state, uint32_t fail) {
  for (size_t k = first; k < last; k++) {
    rg_node *n = &ctx->nodes[k];
    for (int i = 0; i < n->nout; i++) {
      if (!n->out[i] || (n->out[i] >> 31)) continue;
      rg_tinfo *t = rg__t(ctx, n->out[i]);
      t->state = (uint8_t)state;
      t->fail = fail;
    }
  }
}

/* RG_TRACE=1 / rg_options.trace: one line per node to the notice sink (stderr) as a
   drain starts. */
static void trace(rg_ctx *ctx, size_t first, size_t last, rg_drain_reason why) {
  rg__notice("resgrad: drain (%s) of %zu nodes on %s", rg__drain_reason_name(why),
             last - first, ctx->devname);
  for (size_t k = first; k < last; k++) {
    const rg_node *n = &ctx->nodes[k];
    const char *lab = rg__label_str(ctx, n->label);
    char shape[96] = "-";
    if (n->out[0]) {
      rg_tinfo *t = rg__t(ctx, n->out[0]);
      rg__fmt_shape(shape, sizeof shape, t->ndim, t->dims);
    }
    rg__notice("resgrad:   %5zu %-20s %-16s%s%s%s", k, rg_optab[n->op].name, shape,
               *lab ? " [" : "", lab, *lab ? "]" : "");
  }
}

/* Keeps "op [label]: reason" for the values of a failed drain; 0 if out of memory (the
   values then report a generic message). */
static uint32_t keep_failure(rg_ctx *ctx, const char *msg) {
  size_t cap = ctx->capfails;
  if (!rg__grow(ctx, (void **)&ctx->fails, sizeof *ctx->fails, ctx->nfails + 1, &cap)) return 0;
  ctx->capfails = (uint32_t)cap;
  char *d = rg__strdup(ctx, msg);
  if (!d) return 0;
  ctx->fails[ctx->nfails++] = d;
  return ctx->nfails;
}

rg_status rg__drain(rg_ctx *ctx, rg_drain_reason why) { return rg__drain_read(ctx, why, NULL); }

/* The drain of [first, last): runs it and sets its values' states; the failing node (or
   last) in *failed. */
static rg_status run(rg_ctx *ctx, size_t first, size_t last, rg_readback *rb,
                     size_t *failed_out) {
  size_t failed = last;
  rg_status soft = RG_OK;
  char msg[768] = "";
  rg_status st = ctx->be->execute(ctx, first, last, &failed, &soft, msg, sizeof msg, rb);
  *failed_out = failed;
  if (st == RG_OK) {
    set_state(ctx, first, last, RG_READY, 0);
    ctx->st.nodes_executed += last - first;
    if (soft != RG_OK) {
      const rg_node *n = &ctx->nodes[failed < last ? failed : first];
      const char *lab = rg__label_str(ctx, n->label);
      ctx->err == RG_OK ? (void)snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s%s%s%s: %s",
                                         rg_optab[n->op].name, *lab ? " [" : "", lab,
                                         *lab ? "]" : "", msg)
                        : (void)0;
      if (ctx->err == RG_OK) ctx->err = soft;
      return soft;
    }
    return RG_OK;
  }
  if (failed < first || failed >= last) failed = first;
  *failed_out = failed;
  const rg_node *n = &ctx->nodes[failed];
  const char *lab = rg__label_str(ctx, n->label);
  char full[1024];
  snprintf(full, sizeof full, "%s%s%s%s: %s", rg_optab[n->op].name, *lab ? " [" : "", lab,
           *lab ? "]" : "", msg);
  set_state(ctx, first, failed, RG_READY, 0);
  set_state(ctx, failed, last, RG_FAILED, keep_failure(ctx, full));
  rg__shadows_stale(ctx); /* a cast or a step into one may not have run */
  ctx->st.nodes_executed += failed - first;
  if (ctx->err == RG_OK) {
    ctx->err = st;
    snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", full);
  }
  return st;
}

rg_status rg__drain_read(rg_ctx *ctx, rg_drain_reason why, rg_readback *rb) {
  size_t first = ctx->q_head, last = ctx->n_nodes, failed = last;
  if (first == last) return RG_OK;
  if (ctx->opt.trace) trace(ctx, first, last, why);
  ctx->q_head = last; /* detached before it runs: never retried */
  ctx->st.drains++;
  ctx->st.drain_reason[why]++;
  if (!ctx->trace) return run(ctx, first, last, rb, &failed);
  double ts = rg__trace_now(ctx);
  rg_status st = run(ctx, first, last, rb, &failed);
  rg__trace_drain(ctx, why, first, last, ts, st, failed);
  return st;
}

/* ---- barriers and resets ------------------------------------------------------------ */

rg_status rg_sync(rg_ctx *ctx) { return ctx ? rg__drain(ctx, RG_DRAIN_SYNC) : RG_ERR_MISUSE; }

void rg__imports_release(rg_ctx *ctx) {
  uint32_t n = ctx->nimports;
  ctx->nimports = 0; /* each release is called once, whatever a release does */
  for (uint32_t i = 0; i < n; i++)
    if (ctx->imports[i].release) ctx->imports[i].release(ctx->imports[i].user);
}

static void reset_pass(rg_ctx *ctx) {
  rg_pool_s *p = &ctx->pool[RG_POOL_PASS];
  rg__imports_release(ctx); /* after the drain: no queued node reads them any more */
  rg__arena_reset(ctx, &p->arena, false, false);
  rg__arena_reset(ctx, &ctx->stage, true, false);
  p->gen++;
  p->n = 0;
  p->bytes = 0;
  ctx->n_nodes = ctx->q_head = 0;
  for (uint32_t i = 0; i < ctx->nfails; i++) rg__free(ctx, ctx->fails[i]);
  ctx->nfails = 0;
  ctx->rng_calls = 0;
  ctx->nregions = 0;
}

static void reset_persistent(rg_ctx *ctx) {
  rg_pool_s *p = &ctx->pool[RG_POOL_PERSISTENT];
  /* Nodes refer to persistent slots that are about to vanish: drop the tape, and make
     the pass tensors it produced into leaves (their values stay readable). */
  ctx->n_nodes = ctx->q_head = 0;
  for (uint32_t i = 0; i < ctx->pool[RG_POOL_PASS].n; i++) {
    rg_tinfo *t = &ctx->pool[RG_POOL_PASS].t[i];
    t->node = 0;
    t->grad = 0;
    t->flags &= RG_T_FREED; /* released bytes stay released; ckpt stays refused */
  }
  ctx->nregions = 0; /* nothing to recompute without the tape */
  rg__arena_reset(ctx, &p->arena, false, true);
  p->gen++;
  p->n = 0;
  p->bytes = 0;
  rg__free_params(ctx);
  rg__free(ctx, ctx->zero_list.ref);
  ctx->zero_list.ref = NULL;
  ctx->zero_list.n = 0;
  ctx->clip = 0;
  ctx->clip_pending = 0;
  ctx->rngstep = 0;
  ctx->one = 0;
}

/* MISUSE, before anything is drained or reset, while memory of pool is exported: the
   other library's arrays still use it (share.c). */
static rg_status refuse_exported(rg_ctx *ctx, rg_pool pool, const char *call) {
  uint32_t n = ctx->exports[pool];
  if (!n) return RG_OK;
  return rg__fail(ctx, RG_ERR_MISUSE, call, "%u export%s of %s-pool tensors %s open "
                  "(rg_export without rg_unexport), so another library still uses that "
                  "memory; nothing was run or reset. Release them first: drop the other "
                  "library's arrays (their deleters call rg_unexport), or copy them and "
                  "call rg_unexport",
                  n, n == 1 ? "" : "s", pool == RG_POOL_PASS ? "pass" : "persistent",
                  n == 1 ? "is" : "are");
}

/* MISUSE, before anything is drained or reset, inside an activation checkpoint region:
   its nodes would be gone before its end. */
static rg_status refuse_region(rg_ctx *ctx, const char *call) {
  if (!ctx->region_open) return RG_OK;
  return rg__fail(ctx, RG_ERR_MISUSE, call, "an activation checkpoint region is open "
                  "(rg_checkpoint_begin without rg_checkpoint_end); nothing was run or "
                  "reset: end the region first");
}

rg_status rg_step_begin(rg_ctx *ctx) {
  if (!ctx) return RG_ERR_MISUSE;
  if (refuse_exported(ctx, RG_POOL_PASS, "rg_step_begin") != RG_OK ||
      refuse_region(ctx, "rg_step_begin") != RG_OK)
    return RG_ERR_MISUSE;
  rg_status st = rg__drain(ctx, RG_DRAIN_STEP);
  reset_pass(ctx);
  ctx->step++;
  return st;
}

rg_status rg_reset(rg_ctx *ctx, rg_pool pool) {
  if (!ctx) return RG_ERR_MISUSE;
  if (pool != RG_POOL_PASS && pool != RG_POOL_PERSISTENT)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_reset", "pool %d is not RG_POOL_PASS or "
                    "RG_POOL_PERSISTENT", (int)pool);
  if (refuse_exported(ctx, pool, "rg_reset") != RG_OK || refuse_region(ctx, "rg_reset") != RG_OK)
    return RG_ERR_MISUSE;
  rg_status st = rg__drain(ctx, RG_DRAIN_RESET);
  if (pool == RG_POOL_PASS) reset_pass(ctx);
  else reset_persistent(ctx);
  return st;
}
