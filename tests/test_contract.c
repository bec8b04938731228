/*
 * test_contract.c - one check per rule of the data contract (docs/ARCHITECTURE.md), on the
 * CPU, mostly through the public API.
 *
 * What is checked: stale handles from each pool (and only against their own pool's
 * generation), forged handles, pending values that are not computed before the barrier,
 * one drain per read and no recomputation, failed-drain semantics, in-place ordering of
 * optimizer steps and rg_write after earlier readers, recovery from every status the CPU
 * can produce, labels in messages, budgets, exact host<->device crossings of a training
 * step, the deterministic pass-pool bump, check mode, the growth guard, autograd misuse
 * and accumulation, NULL contexts, and allocation-failure injection. core/internal.h is
 * used only where the public API cannot see (pool offsets, the failure-injection hook).
 * Exits non-zero on any failure.
 */
#include "common.h"
#include "core/internal.h"

#include <math.h>
#include <stdint.h>

/* ---- small helpers ------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd64(void) { /* xorshift64*: test data only */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

static rg_tensor vec(rg_ctx *ctx, int64_t n, const float *v) {
  return rg_input(ctx, RG_F32, 1, &n, v);
}

/* a tiny MLP: D -> H -> C with cross-entropy, used by several checks */
enum { B = 8, D = 4, H = 8, C = 3 };
typedef struct mlp { rg_tensor w1, b1, w2, b2; } mlp;

static rg_status mlp_make(rg_ctx *ctx, mlp *m) {
  rg_init nrm = {RG_INIT_NORMAL, 0.5f, 0}, z = {RG_INIT_ZEROS, 0, 0};
  m->w1 = rg_param(ctx, "fc1.weight", RG_F32, 2, (int64_t[]){H, D}, nrm);
  m->b1 = rg_param(ctx, "fc1.bias", RG_F32, 1, (int64_t[]){H}, z);
  m->w2 = rg_param(ctx, "fc2.weight", RG_F32, 2, (int64_t[]){C, H}, nrm);
  m->b2 = rg_param(ctx, "fc2.bias", RG_F32, 1, (int64_t[]){C}, z);
  return rg_error(ctx);
}

static void batch(float *x, int32_t *y) {
  for (int i = 0; i < B * D; i++) x[i] = (float)((i * 37 % 17) - 8) / 8.0f;
  for (int i = 0; i < B; i++) y[i] = i % C;
}

static rg_tensor mlp_loss(rg_ctx *ctx, const mlp *m, rg_tensor x, rg_tensor y) {
  rg_tensor h = rg_relu(ctx, rg_linear(ctx, x, m->w1, m->b1));
  return rg_cross_entropy(ctx, rg_linear(ctx, h, m->w2, m->b2), y);
}

/* One training step, as docs/ARCHITECTURE.md describes it; stops before the optimizer step if
   recording failed (a careful caller never updates with half a gradient). */
static rg_status mlp_step(rg_ctx *ctx, const mlp *m, rg_optim *opt, float *loss) {
  float x[B * D];
  int32_t y[B];
  batch(x, y);
  rg_status st = rg_step_begin(ctx);
  if (st != RG_OK) return st;
  rg_tensor tx = rg_input(ctx, RG_F32, 2, (int64_t[]){B, D}, x);
  rg_tensor ty = rg_input(ctx, RG_I32, 1, (int64_t[]){B}, y);
  rg_tensor l = mlp_loss(ctx, m, tx, ty);
  if ((st = rg_backward(ctx, l)) != RG_OK) return st;
  if (rg_error(ctx) != RG_OK) return rg_error(ctx);
  if ((st = rg_optim_step(opt)) != RG_OK) return st;
  if ((st = rg_zero_grad(ctx)) != RG_OK) return st;
  if ((st = rg_item(ctx, l, loss)) != RG_OK) return st;
  return rg_error(ctx);
}

static uint32_t ref_of(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref = 0;
  return rg__check(ctx, t, "test", 1, &ref) == RG_OK ? ref : 0;
}

/* Recovery probe: after an error, clear it and show that real work still gives the right
   answer in the same context. */
static void works_after(rg_ctx *ctx, const char *what) {
  rg_clear_error(ctx);
  CHECK(rg_step_begin(ctx) == RG_OK, "%s: rg_step_begin after recovery: %s", what,
        rg_errmsg(ctx));
  float v[3] = {1, -2, 3}, out[3] = {0};
  rg_tensor r = rg_relu(ctx, rg_scale(ctx, vec(ctx, 3, v), 2));
  rg_status st = rg_read(ctx, r, out, sizeof out);
  CHECK(st == RG_OK && out[0] == 2 && out[1] == 0 && out[2] == 6,
        "%s: work after recovery: %s {%g,%g,%g} (%s)", what, rg_status_str(st), out[0], out[1],
        out[2], rg_errmsg(ctx));
  CHECK(rg_error(ctx) == RG_OK, "%s: error after recovery work: %s", what, rg_errmsg(ctx));
}

/* ---- rule 1/2: stale handles ------------------------------------------------------------- */

static void test_stale_pass(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  float v[4] = {1, 2, 3, 4}, out[4];
  rg_tensor x = vec(ctx, 4, v);
  struct holder { int tag; rg_tensor t; } keep = {7, rg_scale(ctx, x, 2)};
  CHECK(rg_read(ctx, keep.t, out, sizeof out) == RG_OK && out[3] == 8, "read before reset");
  uint64_t g0 = rg_generation(ctx, RG_POOL_PASS), p0 = rg_generation(ctx, RG_POOL_PERSISTENT);
  CHECK(g0 == 1 && p0 == 1, "generations start at 1 (%llu, %llu)", (unsigned long long)g0,
        (unsigned long long)p0);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  uint64_t g1 = rg_generation(ctx, RG_POOL_PASS);
  CHECK(g1 == g0 + 1, "rg_step_begin bumps the pass generation (%llu -> %llu)",
        (unsigned long long)g0, (unsigned long long)g1);
  CHECK(rg_generation(ctx, RG_POOL_PERSISTENT) == p0, "persistent generation unchanged");
  CHECK(!rg_is_live(ctx, x) && !rg_is_live(ctx, keep.t), "pass handles are dead");
  CHECK(rg_error(ctx) == RG_OK, "rg_is_live sets no error");

  /* a read through the stale handle */
  rg_status st = rg_read(ctx, x, out, sizeof out);
  CHECK(st == RG_ERR_STALE, "stale rg_read -> %s", rg_status_str(st));
  char want_old[64], want_new[64];
  snprintf(want_old, sizeof want_old, "generation %llu", (unsigned long long)g0);
  snprintf(want_new, sizeof want_new, "%llu", (unsigned long long)g1);
  CHECK(msg_has(ctx, "pass") && msg_has(ctx, want_old) && msg_has(ctx, want_new) &&
            msg_has(ctx, "rg_read"),
        "stale message names call, pool and both generations: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);

  /* the handle kept in a struct, used as an op operand after more resets */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  uint64_t g3 = rg_generation(ctx, RG_POOL_PASS);
  rg_tensor y = rg_add(ctx, keep.t, vec(ctx, 4, v));
  CHECK(y.id == 0 && rg_error(ctx) == RG_ERR_STALE, "op on a kept stale handle -> %s",
        rg_status_str(rg_error(ctx)));
  snprintf(want_new, sizeof want_new, "now %llu", (unsigned long long)g3);
  CHECK(msg_has(ctx, "rg_add") && msg_has(ctx, "operand 1") && msg_has(ctx, want_old) &&
            msg_has(ctx, want_new) && msg_has(ctx, "pass"),
        "kept-handle message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(rg_ndim(ctx, x) == 0 && rg_error(ctx) == RG_ERR_STALE, "rg_ndim on stale handle");
  rg_clear_error(ctx);
  CHECK(rg_dim(ctx, x, 0) == -1 && rg_error(ctx) == RG_ERR_STALE, "rg_dim on stale handle");
  rg_clear_error(ctx);
  float one = 0;
  CHECK(rg_item(ctx, keep.t, &one) == RG_ERR_STALE, "rg_item on stale handle");
  rg_clear_error(ctx);
  CHECK(rg_write(ctx, x, v, sizeof v) == RG_ERR_STALE, "rg_write on stale handle");
  rg_clear_error(ctx);
  /* an rg_reset(RG_POOL_PASS) does the same */
  rg_tensor z = vec(ctx, 4, v);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_OK);
  CHECK(rg_read(ctx, z, out, sizeof out) == RG_ERR_STALE, "stale after rg_reset(PASS)");
  works_after(ctx, "stale pass");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_stale_persistent(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_init c3 = {RG_INIT_CONST, 3, 0};
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, c3);
  rg_tensor gw = rg_grad(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f});
  CHECK(w.id && gw.id && opt, "setup: %s", rg_errmsg(ctx));
  float out[4], v[4] = {1, 2, 3, 4};

  /* persistent handles survive rg_step_begin; pass handles survive a persistent reset */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, w, out, sizeof out), RG_OK);
  CHECK(out[0] == 3, "w survives rg_step_begin: %g", out[0]);
  rg_tensor x = rg_scale(ctx, vec(ctx, 4, v), 1);
  uint64_t p0 = rg_generation(ctx, RG_POOL_PERSISTENT), g0 = rg_generation(ctx, RG_POOL_PASS);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PERSISTENT), RG_OK);
  uint64_t p1 = rg_generation(ctx, RG_POOL_PERSISTENT);
  CHECK(p1 == p0 + 1 && rg_generation(ctx, RG_POOL_PASS) == g0,
        "persistent reset bumps only its own generation");
  CHECK_ST(ctx, rg_read(ctx, x, out, sizeof out), RG_OK);
  CHECK(out[3] == 4, "pass value readable after a persistent reset: %g", out[3]);

  rg_status st = rg_read(ctx, w, out, sizeof out);
  CHECK(st == RG_ERR_STALE, "stale persistent read -> %s", rg_status_str(st));
  char want_old[64], want_new[64];
  snprintf(want_old, sizeof want_old, "generation %llu", (unsigned long long)p0);
  snprintf(want_new, sizeof want_new, "now %llu", (unsigned long long)p1);
  CHECK(msg_has(ctx, "persistent") && msg_has(ctx, want_old) && msg_has(ctx, want_new),
        "persistent stale message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(rg_read(ctx, gw, out, sizeof out) == RG_ERR_STALE, "stale gradient handle");
  rg_clear_error(ctx);
  CHECK(rg_mul(ctx, w, x).id == 0 && rg_error(ctx) == RG_ERR_STALE, "op on stale param");
  rg_clear_error(ctx);
  CHECK(rg_param_count(ctx) == 0 && rg_param_find(ctx, "w").id == 0, "params are gone");
  st = rg_optim_step(opt);
  CHECK(st == RG_ERR_STALE, "optimizer over freed params -> %s", rg_status_str(st));
  rg_clear_error(ctx);
  rg_optim_free(opt);

  /* the name may be used again, and the new parameter works */
  rg_tensor w2 = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, c3);
  CHECK(w2.id && w2.id != w.id, "new param after reset: %s", rg_errmsg(ctx));
  CHECK(rg_read(ctx, w, out, sizeof out) == RG_ERR_STALE, "old handle stays stale");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, w2, out, sizeof out), RG_OK);
  CHECK(out[2] == 3, "new param value %g", out[2]);
  works_after(ctx, "stale persistent");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_forged(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, (rg_init){RG_INIT_ONES, 0, 0});
  float v[4] = {1, 2, 3, 4}, out[4];
  rg_tensor x = vec(ctx, 4, v);
  (void)x;
  (void)w;
  rg_tensor special[] = {
      {1},                                       /* gen 0, slot 1 */
      {(uint64_t)1 << 32 | 0},                   /* slot 0 */
      {(uint64_t)1 << 32 | 0xffffffffu},         /* slot way past the table */
      {(uint64_t)1 << 32 | 999},                 /* slot past the table */
      {(uint64_t)77 << 32 | 1},                  /* a future generation */
      {(uint64_t)1 << 63 | (uint64_t)1 << 32 | 500}, /* persistent, bad slot */
      {(uint64_t)1 << 63 | (uint64_t)0x7fffffff << 32 | 1},
      {UINT64_MAX},
  };
  int n_special = (int)(sizeof special / sizeof special[0]);
  int bad = 0;
  for (int i = 0; i < 2000 + n_special; i++) {
    rg_tensor f = i < n_special ? special[i] : (rg_tensor){rnd64()};
    if (!f.id || rg_is_live(ctx, f)) continue; /* a real handle by chance: not forged */
    rg_status s1 = rg_read(ctx, f, out, sizeof out);
    rg_clear_error(ctx);
    rg_tensor r = rg_relu(ctx, f);
    rg_status s2 = rg_error(ctx);
    rg_clear_error(ctx);
    rg_tensor r2 = rg_add(ctx, x, f);
    rg_status s3 = rg_error(ctx);
    rg_clear_error(ctx);
    rg_status s4 = rg_backward(ctx, f);
    rg_clear_error(ctx);
    rg_tensor g = rg_grad(ctx, f);
    rg_status s5 = rg_error(ctx);
    rg_clear_error(ctx);
    int nd = rg_ndim(ctx, f);
    rg_status s6 = rg_error(ctx);
    rg_clear_error(ctx);
    rg_status s7 = rg_write(ctx, f, v, sizeof v);
    rg_clear_error(ctx);
    rg_status all[] = {s1, s2, s3, s4, s5, s6, s7};
    for (int k = 0; k < 7; k++)
      if (all[k] != RG_ERR_STALE && all[k] != RG_ERR_MISUSE) {
        if (bad++ < 5)
          CHECK(0, "forged id 0x%016llx: call %d -> %s", (unsigned long long)f.id, k,
                rg_status_str(all[k]));
      }
    CHECK(!r.id && !r2.id && !g.id && nd == 0, "forged id 0x%016llx produced a value",
          (unsigned long long)f.id);
    if (failed()) break;
  }
  CHECK(bad == 0, "%d forged-handle calls gave a status other than STALE/MISUSE", bad);
  works_after(ctx, "forged");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- rule 3/4: pending values, the barrier ---------------------------------------------- */

static void test_pending(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_stats s;
  rg_stats_reset(ctx);
  float v[4] = {-1, 2, -3, 4}, out[4] = {0};
  rg_tensor x = vec(ctx, 4, v);
  rg_tensor y = rg_relu(ctx, rg_scale(ctx, x, 2));
  rg_tensor z = rg_sum(ctx, y, RG_ALL_AXES, 0);
  rg_stats_get(ctx, &s);
  CHECK(s.nodes_recorded == 4, "4 nodes recorded, got %llu", (unsigned long long)s.nodes_recorded);
  CHECK(s.nodes_executed == 0 && s.launches == 0 && s.drains == 0,
        "nothing runs before the barrier: executed %llu launches %llu drains %llu",
        (unsigned long long)s.nodes_executed, (unsigned long long)s.launches,
        (unsigned long long)s.drains);
  CHECK(rg_is_live(ctx, y) && rg_ndim(ctx, y) == 1 && rg_dim(ctx, y, 0) == 4,
        "shape queries work on pending values without a barrier");
  rg_stats_get(ctx, &s);
  CHECK(s.drains == 0, "shape queries are not barriers");
  CHECK(rg__t(ctx, ref_of(ctx, y))->state == RG_PENDING, "y is pending before the barrier");

  float total = 0;
  CHECK_ST(ctx, rg_item(ctx, z, &total), RG_OK);
  CHECK(total == 12, "sum(relu(2x)) = %g, want 12", total);
  rg_stats_get(ctx, &s);
  CHECK(s.drains == 1 && s.drain_reason[RG_DRAIN_READ] == 1, "one drain for the read, got %llu",
        (unsigned long long)s.drains);
  CHECK(s.nodes_executed == 4 && s.launches == 4, "every queued node ran once: %llu / %llu",
        (unsigned long long)s.nodes_executed, (unsigned long long)s.launches);

  /* reading values that are already computed runs nothing */
  CHECK_ST(ctx, rg_read(ctx, y, out, sizeof out), RG_OK);
  CHECK(out[0] == 0 && out[1] == 4 && out[2] == 0 && out[3] == 8, "y = {%g,%g,%g,%g}", out[0],
        out[1], out[2], out[3]);
  CHECK_ST(ctx, rg_item(ctx, z, &total), RG_OK);
  rg_stats_get(ctx, &s);
  CHECK(s.drains == 1 && s.nodes_executed == 4, "re-reads drain nothing: drains %llu exec %llu",
        (unsigned long long)s.drains, (unsigned long long)s.nodes_executed);

  /* a node built on computed values runs alone: its ancestry is not recomputed */
  rg_tensor w = rg_add(ctx, y, y);
  CHECK_ST(ctx, rg_read(ctx, w, out, sizeof out), RG_OK);
  rg_stats_get(ctx, &s);
  CHECK(s.drains == 2 && s.nodes_executed == 5 && s.launches == 5,
        "one more drain with one node: drains %llu exec %llu launches %llu",
        (unsigned long long)s.drains, (unsigned long long)s.nodes_executed,
        (unsigned long long)s.launches);
  CHECK(out[3] == 16, "y+y = %g", out[3]);

  /* rg_sync is a barrier without a read */
  rg_tensor q = rg_neg(ctx, w);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  CHECK(rg__t(ctx, ref_of(ctx, q))->state == RG_READY, "rg_sync computed q");
  rg_stats_get(ctx, &s);
  CHECK(s.drains == 3 && s.drain_reason[RG_DRAIN_SYNC] == 1 && s.down.count == 4,
        "sync: drains %llu, downloads %llu", (unsigned long long)s.drains,
        (unsigned long long)s.down.count);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_failed_drain(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 2, (int64_t[]){2, 3}, (rg_init){RG_INIT_CONST, 0.5f, 0});
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.5f});
  float lv[6] = {1, 2, 3, 4, 5, 6}, out[6], before_w[6];
  CHECK_ST(ctx, rg_read(ctx, w, before_w, sizeof before_w), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, lv);
  rg_tensor early = rg_scale(ctx, x, 10);
  CHECK_ST(ctx, rg_read(ctx, early, out, sizeof out), RG_OK); /* computed before */
  uint64_t gen = rg_generation(ctx, RG_POOL_PASS);

  rg_label_push(ctx, "lossL");
  int32_t tg[2] = {1, 7};
  rg_tensor t = rg_input(ctx, RG_I32, 1, (int64_t[]){2}, tg);
  rg_tensor logits = rg_mul(ctx, x, w);
  rg_tensor ce = rg_cross_entropy(ctx, logits, t);
  rg_label_pop(ctx);
  rg_tensor later = rg_scale(ctx, ce, 2);   /* recorded after the failing node */
  rg_tensor other = rg_exp(ctx, early);     /* independent of it, also after */
  CHECK_ST(ctx, rg_backward(ctx, ce), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK); /* would update w from the failed gradient */
  CHECK(rg_error(ctx) == RG_OK, "recording is clean: %s", rg_errmsg(ctx));

  rg_stats s0, s1;
  rg_stats_get(ctx, &s0);
  float l = 0;
  rg_status st = rg_item(ctx, ce, &l);
  CHECK(st == RG_ERR_MISUSE, "the barrier reading the failing value returns MISUSE, got %s",
        rg_status_str(st));
  CHECK(rg_error(ctx) == RG_ERR_MISUSE, "sticky error is MISUSE: %s",
        rg_status_str(rg_error(ctx)));
  CHECK(msg_has(ctx, "rg_cross_entropy") && msg_has(ctx, "7") && msg_has(ctx, "lossL"),
        "failure names op, label and value: %s", rg_errmsg(ctx));
  rg_stats_get(ctx, &s1);
  CHECK(s1.drains == s0.drains + 1, "one drain");
  CHECK(s1.nodes_executed < s1.nodes_recorded, "not every node counts as executed");
  CHECK(rg_generation(ctx, RG_POOL_PASS) == gen, "a failed drain does not advance the epoch");

  /* the queue is dropped, not retried */
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  rg_stats_get(ctx, &s0);
  CHECK(s0.drains == s1.drains && s0.nodes_executed == s1.nodes_executed,
        "the failed queue is not retried");

  /* values pending in that drain read back FAILED with the original message */
  rg_tensor failed_vals[] = {ce, later, logits};
  for (int i = 0; i < 3; i++) {
    rg_clear_error(ctx);
    float tmp[6];
    size_t nb = i == 2 ? sizeof tmp : 4;
    st = rg_read(ctx, failed_vals[i], tmp, nb);
    if (i == 2 && st == RG_OK) continue; /* logits ran before the failing node: see below */
    CHECK(st == RG_ERR_FAILED, "pending value %d reads %s, want RG_ERR_FAILED", i,
          rg_status_str(st));
    CHECK(msg_has(ctx, "rg_cross_entropy") && msg_has(ctx, "7"),
          "FAILED carries the original message: %s", rg_errmsg(ctx));
  }
  rg_clear_error(ctx);
  st = rg_read(ctx, other, out, sizeof out);
  CHECK(st == RG_ERR_FAILED, "a later independent value reads %s, want FAILED",
        rg_status_str(st));
  rg_clear_error(ctx);
  /* a value that ran before the failing node in the same drain: if readable, correct */
  st = rg_read(ctx, logits, out, sizeof out);
  CHECK(st == RG_OK || st == RG_ERR_FAILED, "logits: %s", rg_status_str(st));
  if (st == RG_OK) CHECK(out[5] == 3.0f, "logits computed correctly: %g", out[5]);
  rg_clear_error(ctx);
  /* a failed value used as an operand */
  CHECK(rg_relu(ctx, later).id == 0 && rg_error(ctx) == RG_ERR_FAILED, "op on a failed value");
  rg_clear_error(ctx);

  /* a refused rg_write must not turn a failed value into a readable one */
  float junk[2] = {1, 2};
  CHECK(rg_write(ctx, later, junk, sizeof junk) == RG_ERR_MISUSE, "8-byte write to a scalar");
  rg_clear_error(ctx);
  CHECK(rg_write(ctx, later, NULL, 4) == RG_ERR_MISUSE, "NULL write");
  rg_clear_error(ctx);
  st = rg_read(ctx, later, junk, 4);
  CHECK(st == RG_ERR_FAILED, "after refused writes the failed value reads %s, want FAILED",
        rg_status_str(st));
  rg_clear_error(ctx);
  /* a successful write gives it contents */
  junk[0] = 42;
  CHECK_ST(ctx, rg_write(ctx, later, junk, 4), RG_OK);
  CHECK(rg_read(ctx, later, junk, 4) == RG_OK && junk[0] == 42, "written failed value");
  rg_clear_error(ctx);
  /* values computed before are still readable; the persistent pool is intact */
  CHECK_ST(ctx, rg_read(ctx, early, out, sizeof out), RG_OK);
  CHECK(out[0] == 10 && out[5] == 60, "early value intact: %g %g", out[0], out[5]);
  float now_w[6];
  CHECK_ST(ctx, rg_read(ctx, w, now_w, sizeof now_w), RG_OK);
  CHECK(!memcmp(now_w, before_w, sizeof now_w), "the update after the failure did not run");

  /* and the context keeps working */
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  tg[1] = 2;
  rg_tensor ce2 = rg_cross_entropy(ctx, rg_mul(ctx, rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, lv), w),
                                   rg_input(ctx, RG_I32, 1, (int64_t[]){2}, tg));
  CHECK_ST(ctx, rg_item(ctx, ce2, &l), RG_OK);
  /* logits {0.5,1,1.5},{2,2.5,3}; targets 1, 2 */
  double r0 = log(exp(0.5) + exp(1.0) + exp(1.5)) - 1.0, r1 = log(exp(2.0) + exp(2.5) + exp(3.0)) - 3.0;
  CHECK(fabs(l - (r0 + r1) / 2) < 1e-5, "loss after recovery %g want %g", l, (r0 + r1) / 2);
  works_after(ctx, "failed drain");
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- rule 4: in-place ordering ----------------------------------------------------------- */

static void test_inplace_order(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, (rg_init){RG_INIT_NORMAL, 1, 0});
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.25f});
  float w0[4], c[4] = {1, -2, 4, 0.5f}, old[4], now[4];
  CHECK_ST(ctx, rg_read(ctx, w, w0, sizeof w0), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, w, vec(ctx, 4, c)), RG_ALL_AXES, 0);
  rg_tensor before = rg_scale(ctx, w, 1);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  rg_tensor after = rg_scale(ctx, w, 1); /* recorded after the step: sees new weights */
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  float l;
  CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
  double lref = 0;
  for (int i = 0; i < 4; i++) lref += (double)w0[i] * c[i];
  CHECK(fabs(l - lref) < 1e-5, "loss uses the old weights: %g vs %g", l, lref);
  CHECK_ST(ctx, rg_read(ctx, before, old, sizeof old), RG_OK);
  CHECK(!memcmp(old, w0, sizeof old), "a reader recorded before the step sees the old w");
  CHECK_ST(ctx, rg_read(ctx, w, now, sizeof now), RG_OK);
  for (int i = 0; i < 4; i++)
    CHECK(now[i] == w0[i] - 0.25f * c[i], "w[%d] = %.9g, want %.9g", i, now[i],
          w0[i] - 0.25f * c[i]);
  CHECK_ST(ctx, rg_read(ctx, after, old, sizeof old), RG_OK);
  CHECK(!memcmp(old, now, sizeof old), "a reader recorded after the step sees the new w");
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_write_order(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor p = rg_param(ctx, "p", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_CONST, 2, 0});
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3];
  rg_tensor x = vec(ctx, 3, a);
  rg_tensor rx = rg_scale(ctx, x, 2); /* queued reader of x's old bytes */
  rg_tensor rp = rg_add(ctx, p, x);   /* queued reader of p's old bytes */
  rg_stats s0, s1;
  rg_stats_get(ctx, &s0);
  CHECK_ST(ctx, rg_write(ctx, x, b, sizeof b), RG_OK);
  CHECK_ST(ctx, rg_write(ctx, p, b, sizeof b), RG_OK);
  rg_stats_get(ctx, &s1);
  CHECK(s1.drain_reason[RG_DRAIN_WRITE] == s0.drain_reason[RG_DRAIN_WRITE] + 1,
        "rg_write drained once (the second had nothing queued)");
  CHECK(s1.up_site[RG_SITE_WRITE].count == 2 && s1.up_site[RG_SITE_WRITE].bytes == 24,
        "writes counted: %llu / %llu bytes", (unsigned long long)s1.up_site[RG_SITE_WRITE].count,
        (unsigned long long)s1.up_site[RG_SITE_WRITE].bytes);
  CHECK_ST(ctx, rg_read(ctx, rx, out, sizeof out), RG_OK);
  CHECK(out[0] == 2 && out[2] == 6, "reader of x saw the old bytes: %g %g", out[0], out[2]);
  CHECK_ST(ctx, rg_read(ctx, rp, out, sizeof out), RG_OK);
  CHECK(out[0] == 3 && out[2] == 5, "reader of p saw the old bytes: %g %g", out[0], out[2]);
  CHECK_ST(ctx, rg_read(ctx, x, out, sizeof out), RG_OK);
  CHECK(!memcmp(out, b, sizeof b), "x holds the written bytes");
  CHECK_ST(ctx, rg_read(ctx, p, out, sizeof out), RG_OK);
  CHECK(!memcmp(out, b, sizeof b), "p holds the written bytes");
  /* a reader recorded after the write sees the new value */
  rg_tensor r2 = rg_scale(ctx, p, 1);
  CHECK_ST(ctx, rg_read(ctx, r2, out, sizeof out), RG_OK);
  CHECK(out[1] == 20, "reader after the write: %g", out[1]);
  /* wrong sizes are misuse and change nothing */
  CHECK(rg_write(ctx, p, a, 8) == RG_ERR_MISUSE, "short write is MISUSE");
  rg_clear_error(ctx);
  CHECK(rg_read(ctx, p, out, 16) == RG_ERR_MISUSE, "long read is MISUSE");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, p, out, sizeof out), RG_OK);
  CHECK(!memcmp(out, b, sizeof b), "p unchanged by the refused write");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- rule 5/6: errors and recovery -------------------------------------------------------- */

static void test_recovery(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.pass_budget = 1 << 16});
  if (!ctx) return;
  float v[4] = {1, 2, 3, 4};

  /* MISUSE: a shape error, with a message that says what to do */
  rg_tensor a = vec(ctx, 4, v), b = rg_input(ctx, RG_F32, 1, (int64_t[]){3}, v);
  CHECK(rg_add(ctx, a, b).id == 0 && rg_error(ctx) == RG_ERR_MISUSE, "shape mismatch");
  CHECK(msg_has(ctx, "rg_add") && msg_has(ctx, "[4]") && msg_has(ctx, "[3]"),
        "shape message: %s", rg_errmsg(ctx));
  /* the first error stays; a chain keeps it */
  CHECK(rg_relu(ctx, RG_NONE).id == 0 && rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "rg_add"),
        "sticky first error: %s", rg_errmsg(ctx));
  works_after(ctx, "MISUSE");
  CHECK(rg_input(ctx, RG_F32, 1, (int64_t[]){4}, NULL).id == 0 && rg_error(ctx) == RG_ERR_MISUSE,
        "rg_input(NULL host) is MISUSE");
  works_after(ctx, "MISUSE host");

  /* STALE */
  CHECK(rg_read(ctx, a, v, sizeof v) == RG_ERR_STALE, "STALE");
  works_after(ctx, "STALE");

  /* OOM: over the pass budget */
  static float big[1 << 15];
  CHECK(rg_input(ctx, RG_F32, 1, (int64_t[]){1 << 15}, big).id == 0 &&
            rg_error(ctx) == RG_ERR_OOM,
        "over budget -> %s", rg_status_str(rg_error(ctx)));
  CHECK(msg_has(ctx, "budget"), "OOM message names the budget: %s", rg_errmsg(ctx));
  works_after(ctx, "OOM");

  /* NONFINITE: clipping a NaN gradient */
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, (rg_init){RG_INIT_ONES, 0, 0});
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f});
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  float bad[4] = {1, -1, 2, 3};
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, w, rg_log(ctx, vec(ctx, 4, bad))), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_clip_grad_norm(ctx, 1.0f), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_ERR_NONFINITE);
  CHECK(rg_error(ctx) == RG_ERR_NONFINITE && msg_has(ctx, "NaN"), "NONFINITE message: %s",
        rg_errmsg(ctx));
  float wv[4];
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, w, wv, sizeof wv), RG_OK);
  CHECK(wv[0] == 1 && wv[3] == 1, "skipped update left w: %g %g", wv[0], wv[3]);
  CHECK(rg_optim_steps(opt) == 0, "skipped update not counted");
  works_after(ctx, "NONFINITE");
  /* a finite step works again in the same context */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  float good[4] = {1, 2, 3, 4};
  loss = rg_sum(ctx, rg_mul(ctx, w, vec(ctx, 4, good)), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_clip_grad_norm(ctx, 100.0f), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, w, wv, sizeof wv), RG_OK);
  CHECK(wv[3] == 1 - 0.1f * 4, "finite step after the skipped one: %.9g", wv[3]);
  CHECK(rg_optim_steps(opt) == 1, "one step counted");

  /* FAILED: an embedding index out of range fails its drain; values in it read FAILED */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  int32_t idx[2] = {0, 4};
  rg_tensor table = rg_param(ctx, "table", RG_F32, 2, (int64_t[]){4, 2},
                             (rg_init){RG_INIT_ONES, 0, 0});
  rg_tensor emb = rg_embedding(ctx, table, rg_input(ctx, RG_I32, 1, (int64_t[]){2}, idx));
  rg_tensor after = rg_scale(ctx, emb, 3);
  CHECK_ST(ctx, rg_sync(ctx), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_embedding") && msg_has(ctx, "4"), "embedding failure: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  float ev[4];
  CHECK_ST(ctx, rg_read(ctx, after, ev, sizeof ev), RG_ERR_FAILED);
  CHECK(msg_has(ctx, "rg_embedding"), "FAILED message: %s", rg_errmsg(ctx));
  works_after(ctx, "FAILED");

  /* UNSUPPORTED inside a context: BF16 parameters (master weights are F32) */
  CHECK(rg_param(ctx, "bf", RG_BF16, 1, (int64_t[]){2}, (rg_init){0, 0, 0}).id == 0 &&
            rg_error(ctx) == RG_ERR_UNSUPPORTED,
        "BF16 param -> %s", rg_status_str(rg_error(ctx)));
  works_after(ctx, "UNSUPPORTED");

  /* IO: saving where no file can be made, loading what is not there; then a real save
     and load round trip in the same context */
  float wsave[4], wmod[4] = {9, 9, 9, 9}, wload[4];
  CHECK_ST(ctx, rg_read(ctx, w, wsave, sizeof wsave), RG_OK);
  rg_status st = rg_save(ctx, "/nonexistent-dir-rg/ckpt.safetensors", NULL);
  CHECK(st == RG_ERR_IO || st == RG_ERR_UNSUPPORTED, "save to a bad path -> %s (%s)",
        rg_status_str(st), rg_errmsg(ctx));
  works_after(ctx, "rg_save bad path");
  st = rg_load(ctx, "no-such-file.safetensors", NULL);
  CHECK(st == RG_ERR_IO || st == RG_ERR_UNSUPPORTED, "load of a missing file -> %s",
        rg_status_str(st));
  works_after(ctx, "rg_load missing");
  CHECK_ST(ctx, rg_read(ctx, w, wload, sizeof wload), RG_OK);
  CHECK(!memcmp(wload, wsave, sizeof wload), "a failed load changed nothing");
  st = rg_save(ctx, "contract.safetensors", NULL);
  if (st == RG_ERR_UNSUPPORTED) {
    works_after(ctx, "rg_save unsupported");
  } else {
    CHECK(st == RG_OK, "rg_save -> %s (%s)", rg_status_str(st), rg_errmsg(ctx));
    CHECK_ST(ctx, rg_write(ctx, w, wmod, sizeof wmod), RG_OK);
    CHECK_ST(ctx, rg_load(ctx, "contract.safetensors", NULL), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, w, wload, sizeof wload), RG_OK);
    CHECK(!memcmp(wload, wsave, sizeof wload), "save/load round trip");
    remove("contract.safetensors");
    works_after(ctx, "rg_save");
  }
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);

  /* UNSUPPORTED from rg_open: CUDA on a build or machine without it */
  rg_ctx *cu = (rg_ctx *)&cu; /* must be overwritten with NULL */
  st = rg_open(&cu, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  if (st == RG_OK) {
    CHECK_ST(cu, rg_close(cu), RG_OK); /* a real GPU: nothing to check here */
  } else {
    CHECK(st == RG_ERR_UNSUPPORTED, "rg_open(CUDA) without a GPU -> %s", rg_status_str(st));
    CHECK(cu == NULL, "*ctx is NULL after a failed rg_open");
    rg_ctx *c2 = open_cpu(); /* and the process can go on with a CPU context */
    if (c2) {
      works_after(c2, "after rg_open(CUDA)");
      CHECK_ST(c2, rg_close(c2), RG_OK);
    }
  }
  rg_ctx *c3 = NULL;
  CHECK(rg_open(&c3, &(rg_options){.device = (rg_device)42}) == RG_ERR_MISUSE && !c3,
        "unknown device is MISUSE");
}

/* The tape of a failed drain: rg_backward through values that were never computed must not
   put garbage into persistent gradients. The pass arena is first filled by an identical
   good step, so the failed values' memory holds stale numbers (the bump is deterministic). */
static void test_backward_on_failed(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor table = rg_param(ctx, "emb", RG_F32, 2, (int64_t[]){4, 2},
                             (rg_init){RG_INIT_NORMAL, 1, 0});
  rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){3, 2}, (rg_init){RG_INIT_NORMAL, 1, 0});
  float gw[6];
  for (int pass = 0; pass < 2; pass++) {
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    int32_t idx[2] = {1, pass == 0 ? 2 : 9};
    rg_tensor e = rg_embedding(ctx, table, rg_input(ctx, RG_I32, 1, (int64_t[]){2}, idx));
    rg_tensor loss = rg_sum(ctx, rg_tanh(ctx, rg_linear(ctx, e, W, RG_NONE)), RG_ALL_AXES, 0);
    float l;
    if (pass == 0) {
      CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
      continue;
    }
    CHECK(rg_item(ctx, loss, &l) != RG_OK, "the bad index fails the drain");
    rg_clear_error(ctx);
    rg_status st = rg_backward(ctx, loss);
    CHECK(st == RG_ERR_FAILED, "rg_backward of a failed loss -> %s, want RG_ERR_FAILED",
          rg_status_str(st));
    rg_clear_error(ctx);
    (void)rg_step_begin(ctx); /* runs whatever rg_backward recorded */
    rg_clear_error(ctx);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, W), gw, sizeof gw), RG_OK);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= gw[i] == 0;
    CHECK(zero, "W's gradient took values from uncomputed memory: %g %g %g %g %g %g", gw[0],
          gw[1], gw[2], gw[3], gw[4], gw[5]);
  }
  works_after(ctx, "backward on failed");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_labels(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  float v[6] = {1, 2, 3, 4, 5, 6};
  rg_tensor a = vec(ctx, 4, v), b = rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, v);
  rg_label_push(ctx, "blockA");
  CHECK(rg_matmul(ctx, a, b).id == 0, "1-D matmul is refused");
  CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "blockA") && msg_has(ctx, "rg_matmul"),
        "label in a shape error: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_label_push(ctx, "inner");
  CHECK(rg_add(ctx, a, b).id == 0 && msg_has(ctx, "blockA/inner"), "nested labels: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_label_pop(ctx);
  rg_label_pop(ctx);
  rg_label_pop(ctx); /* pop without push is ignored */
  CHECK(rg_add(ctx, a, b).id == 0 && !msg_has(ctx, "blockA"), "label popped: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  /* A push the stack has no memory for is RG_ERR_OOM, and its pop (and those of pushes
     nested in it) must not remove the caller's labels. The stack grows past 16 entries. */
  char l[16];
  for (int i = 0; i < 16; i++) {
    snprintf(l, sizeof l, "L%d", i);
    rg_label_push(ctx, l);
  }
  ctx->alloc_fail_at = ctx->alloc_count + 1;
  rg_label_push(ctx, "lost");
  ctx->alloc_fail_at = 0;
  CHECK(rg_error(ctx) == RG_ERR_OOM, "label push out of memory: %s", rg_status_str(rg_error(ctx)));
  rg_clear_error(ctx);
  rg_label_push(ctx, "nested");
  rg_label_pop(ctx);
  rg_label_pop(ctx);
  CHECK(rg_add(ctx, a, b).id == 0 && msg_has(ctx, "L14/L15]"), "labels kept: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  for (int i = 0; i < 16; i++) rg_label_pop(ctx);
  CHECK(rg_add(ctx, a, b).id == 0 && !msg_has(ctx, "L0"), "labels popped: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  /* a label recorded with a node names a failure at the barrier */
  rg_tensor table = rg_param(ctx, "emb", RG_F32, 2, (int64_t[]){3, 2},
                             (rg_init){RG_INIT_ONES, 0, 0});
  int32_t idx[3] = {0, 2, -1};
  rg_label_push(ctx, "tok_embed");
  rg_tensor e = rg_embedding(ctx, table, rg_input(ctx, RG_I32, 1, (int64_t[]){3}, idx));
  rg_label_pop(ctx);
  CHECK(e.id, "embedding recorded");
  CHECK_ST(ctx, rg_sync(ctx), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "tok_embed") && msg_has(ctx, "rg_embedding") && msg_has(ctx, "-1"),
        "barrier failure names label, op and value: %s", rg_errmsg(ctx));
  works_after(ctx, "labels");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- budgets --------------------------------------------------------------------------- */

static void test_budgets(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.pass_budget = 16384, .persistent_budget = 8192});
  if (!ctx) return;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){256}, (rg_init){RG_INIT_NORMAL, 1, 0});
  CHECK(w.id, "w fits: %s", rg_errmsg(ctx));
  float w0[256], w1[256];
  CHECK_ST(ctx, rg_read(ctx, w, w0, sizeof w0), RG_OK);

  rg_stats s0, s1;
  float x[1024] = {0};
  rg_tensor a = rg_input(ctx, RG_F32, 1, (int64_t[]){1024}, x); /* 4 KiB */
  rg_tensor b = rg_add(ctx, a, a);                               /* 8 KiB in use */
  rg_tensor c = rg_mul(ctx, b, a);                               /* 12 KiB */
  CHECK(a.id && b.id && c.id, "within budget: %s", rg_errmsg(ctx));
  rg_tensor c2 = rg_sub(ctx, c, a);                              /* exactly 16 KiB */
  CHECK(c2.id, "exactly at the budget is allowed: %s", rg_errmsg(ctx));
  rg_stats_get(ctx, &s0);
  rg_tensor d = rg_mul(ctx, c, a); /* one more is over */
  rg_stats_get(ctx, &s1);
  CHECK(d.id == 0 && rg_error(ctx) == RG_ERR_OOM, "over the pass budget -> %s",
        rg_status_str(rg_error(ctx)));
  CHECK(msg_has(ctx, "pass") && msg_has(ctx, "16384") && msg_has(ctx, "rg_mul"),
        "budget message: %s", rg_errmsg(ctx));
  CHECK(s1.pass_bytes == s0.pass_bytes && s1.nodes_recorded == s0.nodes_recorded &&
            s1.up.count == s0.up.count,
        "nothing allocated or queued: bytes %zu -> %zu, nodes %llu -> %llu", s0.pass_bytes,
        s1.pass_bytes, (unsigned long long)s0.nodes_recorded,
        (unsigned long long)s1.nodes_recorded);
  rg_clear_error(ctx);
  /* an input over budget is refused before it is copied or counted */
  static float big[8192];
  rg_tensor e = rg_input(ctx, RG_F32, 1, (int64_t[]){8192}, big);
  rg_stats_get(ctx, &s1);
  CHECK(e.id == 0 && rg_error(ctx) == RG_ERR_OOM && s1.pass_bytes == s0.pass_bytes &&
            s1.up.count == s0.up.count && s1.up.bytes == s0.up.bytes,
        "over-budget input: %s, bytes %zu", rg_status_str(rg_error(ctx)), s1.pass_bytes);
  rg_clear_error(ctx);
  /* the values made before are fine, and so is the persistent pool */
  float out[1024];
  CHECK_ST(ctx, rg_read(ctx, c, out, sizeof out), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, w, w1, sizeof w1), RG_OK);
  CHECK(!memcmp(w0, w1, sizeof w0), "persistent tensors intact after OOM");

  /* persistent budget: a parameter that does not fit leaves nothing behind */
  rg_stats_get(ctx, &s0);
  rg_tensor big_p = rg_param(ctx, "big", RG_F32, 1, (int64_t[]){4096}, (rg_init){0, 0, 0});
  rg_stats_get(ctx, &s1);
  CHECK(big_p.id == 0 && rg_error(ctx) == RG_ERR_OOM, "over the persistent budget -> %s",
        rg_status_str(rg_error(ctx)));
  CHECK(msg_has(ctx, "persistent"), "persistent budget message: %s", rg_errmsg(ctx));
  CHECK(s1.persistent_bytes == s0.persistent_bytes && rg_param_count(ctx) == 1 &&
            rg_param_find(ctx, "big").id == 0,
        "refused param left nothing: %zu -> %zu bytes, %d params", s0.persistent_bytes,
        s1.persistent_bytes, rg_param_count(ctx));
  rg_clear_error(ctx);
  rg_tensor small_p = rg_param(ctx, "big", RG_F32, 1, (int64_t[]){16}, (rg_init){RG_INIT_ONES, 0, 0});
  CHECK(small_p.id, "the name can be used after the refusal: %s", rg_errmsg(ctx));
  CHECK_ST(ctx, rg_read(ctx, w, w1, sizeof w1), RG_OK);
  CHECK(!memcmp(w0, w1, sizeof w0), "w intact");
  /* after rg_step_begin the whole pass budget is available again */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_stats_get(ctx, &s1);
  CHECK(s1.pass_bytes == 0, "pass pool empty after rg_step_begin: %zu", s1.pass_bytes);
  rg_tensor f = rg_input(ctx, RG_F32, 1, (int64_t[]){4096}, big); /* 16 KiB: fits now */
  CHECK(f.id, "full budget after reset: %s", rg_errmsg(ctx));
  works_after(ctx, "budgets");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- rule 7: crossings; deterministic bump ---------------------------------------------- */

static void test_crossings(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  mlp m;
  CHECK_ST(ctx, mlp_make(ctx, &m), RG_OK);
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 1e-2f});
  float loss = 0;
  CHECK_ST(ctx, mlp_step(ctx, &m, opt, &loss), RG_OK); /* warm-up step */
  for (int step = 0; step < 2; step++) {
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_stats_reset(ctx);
    CHECK_ST(ctx, mlp_step(ctx, &m, opt, &loss), RG_OK);
    rg_stats s;
    rg_stats_get(ctx, &s);
    uint64_t want_up = B * D * 4 + B * 4;
    CHECK(s.up.count == 2 && s.up.bytes == want_up, "up: %llu crossings, %llu bytes (want 2, %llu)",
          (unsigned long long)s.up.count, (unsigned long long)s.up.bytes,
          (unsigned long long)want_up);
    CHECK(s.up_site[RG_SITE_INPUT].count == 2 && s.up_site[RG_SITE_INPUT].bytes == want_up,
          "up crossings are all rg_input");
    CHECK(s.down.count == 1 && s.down.bytes == 4, "down: %llu crossings, %llu bytes (want 1, 4)",
          (unsigned long long)s.down.count, (unsigned long long)s.down.bytes);
    CHECK(s.down_site[RG_SITE_READ].count == 1, "the download is the read");
    CHECK(s.drains == 1 && s.drain_reason[RG_DRAIN_READ] == 1, "one drain per step: %llu",
          (unsigned long long)s.drains);
    CHECK(s.nodes_executed == s.nodes_recorded && s.launches == s.nodes_executed,
          "counted is computed: recorded %llu executed %llu launches %llu",
          (unsigned long long)s.nodes_recorded, (unsigned long long)s.nodes_executed,
          (unsigned long long)s.launches);
    CHECK(isfinite(loss), "loss %g", loss);
  }
  /* rg_optim_set_lr is one 4-byte upload at site OPTIM */
  rg_stats_reset(ctx);
  CHECK_ST(ctx, rg_optim_set_lr(opt, 5e-3f), RG_OK);
  rg_stats s;
  rg_stats_get(ctx, &s);
  CHECK(s.up.count == 1 && s.up.bytes == 4 && s.up_site[RG_SITE_OPTIM].bytes == 4 &&
            s.drains == 0,
        "set_lr: %llu up, %llu bytes, %llu drains", (unsigned long long)s.up.count,
        (unsigned long long)s.up.bytes, (unsigned long long)s.drains);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

typedef struct snap { uint32_t n; size_t off[256]; void *data[256]; size_t bytes; } snap;

static void take_snap(rg_ctx *ctx, snap *s) {
  rg_pool_s *p = &ctx->pool[RG_POOL_PASS];
  s->n = p->n;
  s->bytes = p->bytes;
  for (uint32_t i = 0; i < p->n && i < 256; i++) {
    s->off[i] = p->t[i].off;
    s->data[i] = p->t[i].data;
  }
}

static void test_bump(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  mlp m;
  CHECK_ST(ctx, mlp_make(ctx, &m), RG_OK);
  rg_optim *opt = rg_optim_adamw(ctx, NULL);
  snap s[3];
  float loss[3];
  for (int k = 0; k < 3; k++) {
    CHECK_ST(ctx, mlp_step(ctx, &m, opt, &loss[k]), RG_OK);
    take_snap(ctx, &s[k]);
  }
  CHECK(s[0].n >= 8 && s[0].n <= 256, "pass tensors per step: %u", s[0].n);
  for (int k = 1; k < 3; k++) {
    CHECK(s[k].n == s[0].n && s[k].bytes == s[0].bytes, "step %d: %u tensors %zu bytes vs %u %zu",
          k, s[k].n, s[k].bytes, s[0].n, s[0].bytes);
    int same_off = 1, same_ptr = 1;
    for (uint32_t i = 0; i < s[0].n && i < s[k].n && i < 256; i++) {
      same_off &= s[k].off[i] == s[0].off[i];
      same_ptr &= s[k].data[i] == s[0].data[i];
    }
    CHECK(same_off, "identical steps give identical pass-pool offsets (step %d)", k);
    CHECK(same_ptr, "identical steps give identical addresses (step %d)", k);
  }
  /* Offsets are aligned; the backward pass reuses the bytes of dead gradients, so some
     offset comes back, and the pool holds less than all the step's tensors at once. */
  size_t total = 0;
  int reused = 0;
  for (uint32_t i = 0; i < s[0].n && i < 256; i++) {
    CHECK(s[0].off[i] % RG_ALIGN == 0, "offset %u: %zu", i, s[0].off[i]);
    total += (ctx->pool[RG_POOL_PASS].t[i].nbytes + RG_ALIGN - 1) / RG_ALIGN * RG_ALIGN;
    for (uint32_t j = 0; j < i; j++) reused |= s[0].off[j] == s[0].off[i];
  }
  rg_stats st;
  rg_stats_get(ctx, &st);
  CHECK(reused && st.pass_peak < total, "bytes are reused: peak %zu of %zu", st.pass_peak,
        total);
  CHECK(loss[2] < loss[0], "the steps train: %g -> %g", loss[0], loss[2]);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- check mode and the growth guard ------------------------------------------------------ */

static void test_check_mode(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.check = 1});
  if (!ctx) return;
  rg_tensor table = rg_param(ctx, "emb", RG_F32, 2, (int64_t[]){5, 2},
                             (rg_init){RG_INIT_CONST, 1.5f, 0});
  int32_t idx[2] = {1, 9};
  rg_tensor ti = rg_input(ctx, RG_I32, 1, (int64_t[]){2}, idx);
  CHECK(rg_error(ctx) == RG_OK, "the input itself is fine: %s", rg_errmsg(ctx));
  rg_tensor e = rg_embedding(ctx, table, ti);
  CHECK(e.id == 0, "check mode: the failing op returns RG_NONE");
  CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "rg_embedding") && msg_has(ctx, "9"),
        "error right after the call: %s (%s)", rg_status_str(rg_error(ctx)), rg_errmsg(ctx));
  rg_stats s;
  rg_stats_get(ctx, &s);
  CHECK(s.drain_reason[RG_DRAIN_CHECK] >= 2, "each op drained: %llu",
        (unsigned long long)s.drain_reason[RG_DRAIN_CHECK]);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  idx[1] = 4;
  e = rg_embedding(ctx, table, rg_input(ctx, RG_I32, 1, (int64_t[]){2}, idx));
  CHECK(e.id, "good embedding: %s", rg_errmsg(ctx));
  CHECK(rg__t(ctx, ref_of(ctx, e))->state == RG_READY, "check mode computes at the call");
  float out[4];
  CHECK_ST(ctx, rg_read(ctx, e, out, sizeof out), RG_OK);
  CHECK(out[0] == 1.5f && out[3] == 1.5f, "embedding values %g %g", out[0], out[3]);
  works_after(ctx, "check mode");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_guard(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.max_queued = 4});
  if (!ctx) return;
  rg_stats_reset(ctx);
  float v[2] = {1, -1};
  rg_tensor x = vec(ctx, 2, v);
  for (int i = 0; i < 9; i++) x = rg_scale(ctx, x, 2); /* 10 nodes in all */
  rg_stats s;
  rg_stats_get(ctx, &s);
  CHECK(s.nodes_recorded == 10, "10 nodes: %llu", (unsigned long long)s.nodes_recorded);
  CHECK(s.drain_reason[RG_DRAIN_GUARD] == 2, "the guard drained twice, got %llu",
        (unsigned long long)s.drain_reason[RG_DRAIN_GUARD]);
  CHECK(s.queue_peak <= 5, "queue never grew past the guard: %zu", s.queue_peak);
  float out[2];
  CHECK_ST(ctx, rg_read(ctx, x, out, sizeof out), RG_OK);
  CHECK(out[0] == 512 && out[1] == -512, "guard drains compute the same values: %g %g", out[0],
        out[1]);
  rg_stats_get(ctx, &s);
  CHECK(s.nodes_executed == 10, "every node ran once: %llu", (unsigned long long)s.nodes_executed);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- autograd ---------------------------------------------------------------------------- */

static void test_autograd(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_CONST, 2, 0});
  float c[3] = {1, -3, 0.5f}, g[3];
  rg_tensor cx = vec(ctx, 3, c);

  /* non-scalar loss */
  rg_tensor prod = rg_mul(ctx, w, cx);
  CHECK(rg_backward(ctx, prod) == RG_ERR_MISUSE && msg_has(ctx, "rg_backward"),
        "backward on a 3-element tensor: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  /* no gradient path */
  rg_tensor nograd = rg_sum(ctx, cx, RG_ALL_AXES, 0);
  CHECK(rg_backward(ctx, nograd) == RG_ERR_MISUSE, "backward without a parameter");
  rg_clear_error(ctx);
  CHECK(rg_backward(ctx, RG_NONE) == RG_ERR_MISUSE, "backward on RG_NONE");
  rg_clear_error(ctx);
  CHECK(rg_backward(ctx, rg_sum(ctx, rg_detach(ctx, prod), RG_ALL_AXES, 0)) == RG_ERR_MISUSE,
        "backward through rg_detach");
  rg_clear_error(ctx);
  rg_tensor i32 = rg_cast(ctx, rg_sum(ctx, prod, RG_ALL_AXES, 0), RG_I32);
  CHECK(rg_backward(ctx, i32) == RG_ERR_MISUSE, "backward on an I32 loss");
  rg_clear_error(ctx);
  CHECK(rg_grad(ctx, cx).id == 0 && rg_error(ctx) == RG_ERR_MISUSE, "grad of an input");
  rg_clear_error(ctx);

  /* accumulation: two backward calls double the gradient */
  rg_tensor loss = rg_sum(ctx, prod, RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), g, sizeof g), RG_OK);
  CHECK(g[0] == 1 && g[1] == -3 && g[2] == 0.5f, "grad = c: %g %g %g", g[0], g[1], g[2]);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), g, sizeof g), RG_OK);
  CHECK(g[0] == 2 && g[1] == -6 && g[2] == 1, "two backwards: %g %g %g", g[0], g[1], g[2]);
  /* and across steps, until zeroed */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  loss = rg_sum(ctx, rg_mul(ctx, w, vec(ctx, 3, c)), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), g, sizeof g), RG_OK);
  CHECK(g[0] == 3 && g[1] == -9, "three backwards over two steps: %g %g", g[0], g[1]);
  /* a pass tensor's gradient from the last backward */
  rg_tensor xin = vec(ctx, 3, c);
  rg_tensor hid = rg_mul(ctx, w, xin);
  rg_tensor out = rg_scale(ctx, hid, 2);
  CHECK_ST(ctx, rg_retain_grad(ctx, hid), RG_OK);
  CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, out, RG_ALL_AXES, 0)), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, hid), g, sizeof g), RG_OK);
  /* not retained: freed by the backward pass, and the message says what to do */
  CHECK(!rg_grad(ctx, out).id && rg_error(ctx) == RG_ERR_MISUSE &&
        msg_has(ctx, "rg_retain_grad"), "grad of an unretained tensor: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(rg_retain_grad(ctx, xin) == RG_ERR_MISUSE && msg_has(ctx, "does not require grad"),
        "retain_grad of an input: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(g[0] == 2 && g[1] == 2 && g[2] == 2, "d/dhid = 2: %g %g %g", g[0], g[1], g[2]);
  /* zero_grad is recorded, so a reader before it sees the old gradient */
  rg_tensor gw = rg_grad(ctx, w);
  rg_tensor before = rg_scale(ctx, gw, 1);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, gw, g, sizeof g), RG_OK);
  CHECK(g[0] == 0 && g[1] == 0 && g[2] == 0, "zeroed: %g %g %g", g[0], g[1], g[2]);
  CHECK_ST(ctx, rg_read(ctx, before, g, sizeof g), RG_OK);
  CHECK(g[0] == 5 && g[1] == -15, "reader before zero_grad: %g %g", g[0], g[1]);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_linear on a 3-axis input: the backward pass views x as [rows, in]. Gradients of x,
   of a parameter before it and of the weight, against sums computed here. */
/* rg_constant: persistent without being a parameter - it outlives steps, gets no
   gradient, no optimizer update and no place in checkpoints; rg_write replaces it. */
static void test_constant(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  float c[3] = {1, 2, 3}, g[3], v[3];
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_ONES, 0, 0});
  rg_tensor k = rg_constant(ctx, RG_F32, 1, (int64_t[]){3}, c);
  CHECK(k.id && rg_param_count(ctx) == 1, "a constant is not a parameter");
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.5f});
  for (int s = 0; s < 2; s++) {
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor loss = rg_sum(ctx, rg_mul(ctx, w, k), RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), g, sizeof g), RG_OK);
    CHECK(g[0] == 1 && g[1] == 2 && g[2] == 3, "d/dw = the constant: %g %g %g", g[0], g[1], g[2]);
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  }
  CHECK(!rg_grad(ctx, k).id && rg_error(ctx) == RG_ERR_MISUSE, "a constant has no gradient");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, k, v, sizeof v), RG_OK);
  CHECK(!memcmp(v, c, sizeof c), "unchanged by two optimizer steps: %g %g %g", v[0], v[1], v[2]);
  c[1] = -4;
  CHECK_ST(ctx, rg_write(ctx, k, c, sizeof c), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, k, v, sizeof v), RG_OK);
  CHECK(v[1] == -4, "rg_write replaces it: %g", v[1]);
  CHECK(!rg_constant(ctx, RG_F32, 1, (int64_t[]){3}, NULL).id && msg_has(ctx, "host is NULL"),
        "NULL host: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_reshape of a pass tensor is a view (same bytes, no node that copies); of a
   parameter, a copy that an optimizer step does not change. */
static void test_reshape_view(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  float v[6] = {1, 2, 3, 4, 5, 6}, out[6];
  rg_tensor w = rg_param(ctx, "w", RG_F32, 2, (int64_t[]){2, 3}, (rg_init){RG_INIT_ONES, 0, 0});
  rg_tensor x = rg_mul(ctx, rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, v), w);
  rg_tensor r = rg_reshape(ctx, x, 1, (int64_t[]){6}), wr = rg_reshape(ctx, w, 1, (int64_t[]){6});
  uint32_t rx = (uint32_t)(x.id & 0xffffffffu), rr = (uint32_t)(r.id & 0xffffffffu);
  uint32_t rw = (uint32_t)(wr.id & 0xffffffffu);
  CHECK(rg__t(ctx, rr)->data == rg__t(ctx, rx)->data && rg__t(ctx, rr)->alias == rx,
        "a pass tensor's reshape shares its bytes");
  CHECK(rg__t(ctx, rw)->data != rg__t(ctx, (uint32_t)1u << 31 | 1u)->data &&
        !rg__t(ctx, rw)->alias, "a parameter's reshape is a copy");
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, r, r), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f});
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, r, out, sizeof out), RG_OK);
  CHECK(out[0] == 1 && out[5] == 6, "the view reads x: %g %g", out[0], out[5]);
  CHECK_ST(ctx, rg_read(ctx, wr, out, sizeof out), RG_OK);
  CHECK(out[0] == 1 && out[5] == 1, "the copy of w is from before the step: %g", out[0]);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), out, sizeof out), RG_OK);
  CHECK(out[0] == 2 && out[5] == 72, "d/dw of sum((v w)^2) = 2 v^2 w: %g %g", out[0], out[5]);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* A call whose own internal step fails returns that failure's status, not an earlier
   call's sticky error (which stays the one reported). */
static void test_own_status(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_param(ctx, "w", RG_F32, 1, (int64_t[]){4}, (rg_init){0});
  CHECK(rg_optim_set_lr(NULL, 1) == RG_ERR_MISUSE, "no optimizer");
  CHECK(rg_add(ctx, RG_NONE, RG_NONE).id == 0 && rg_error(ctx) == RG_ERR_MISUSE, "sticky MISUSE");
  ctx->alloc_fail_at = ctx->alloc_count + 1; /* the optimizer's first allocation fails */
  CHECK(!rg_optim_adamw(ctx, NULL) && ctx->last == RG_ERR_OOM, "rg_optim_adamw: OOM");
  ctx->alloc_fail_at = 0;
  rg_optim *opt = rg_optim_adamw(ctx, NULL);
  CHECK(opt != NULL, "then it succeeds");
  size_t budget = ctx->pool[RG_POOL_PERSISTENT].budget; /* no room for the clip's state */
  ctx->pool[RG_POOL_PERSISTENT].budget = ctx->pool[RG_POOL_PERSISTENT].bytes;
  CHECK(rg_clip_grad_norm(ctx, 1) == RG_ERR_OOM, "rg_clip_grad_norm returns its own OOM");
  ctx->pool[RG_POOL_PERSISTENT].budget = budget;
  CHECK(rg_error(ctx) == RG_ERR_MISUSE, "the first error stays the one reported: %s",
        rg_status_str(rg_error(ctx)));
  rg_clear_error(ctx);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_linear3d_grad(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 4});
  if (!ctx) return;
  enum { R0 = 2, R1 = 3, I = 4, O = 5 };
  rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){O, I}, (rg_init){RG_INIT_NORMAL, 1, 0});
  rg_tensor p = rg_param(ctx, "p", RG_F32, 1, (int64_t[]){I}, (rg_init){RG_INIT_UNIFORM, 0.5f, 1.5f});
  float x[R0 * R1 * I], w[O * I], pv[I];
  for (int i = 0; i < R0 * R1 * I; i++) x[i] = (float)((i * 7) % 11) / 4.0f - 1.0f;
  CHECK_ST(ctx, rg_read(ctx, W, w, sizeof w), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, p, pv, sizeof pv), RG_OK);
  rg_tensor h = rg_mul(ctx, rg_input(ctx, RG_F32, 3, (int64_t[]){R0, R1, I}, x), p);
  rg_tensor loss = rg_sum(ctx, rg_linear(ctx, h, W, RG_NONE), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_retain_grad(ctx, h), RG_OK);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  /* W's gradient is one GEMM adding into its buffer (MATMUL_ACC), p's (broadcast over the
     rows) one column sum adding into its buffer (SUM_TO_ACC): no ACCUM */
  int folded = 0, summed = 0, accums = 0;
  for (size_t i = ctx->q_head; i < ctx->n_nodes; i++) {
    folded += ctx->nodes[i].op == RG_OP_MATMUL_ACC;
    summed += ctx->nodes[i].op == RG_OP_SUM_TO_ACC;
    accums += ctx->nodes[i].op == RG_OP_ACCUM;
  }
  CHECK(folded == 1 && summed == 1 && accums == 0, "W's gradient folded into its GEMM, p's "
        "into its sum: %d MATMUL_ACC, %d SUM_TO_ACC, %d ACCUM", folded, summed, accums);
  float gh[R0 * R1 * I], gw[O * I], gp[I];
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, h), gh, sizeof gh), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, W), gw, sizeof gw), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, p), gp, sizeof gp), RG_OK);
  int bad_h = 0, bad_w = 0, bad_p = 0;
  for (int i = 0; i < I; i++) {
    double colsum = 0, xsum = 0, hsum = 0;
    for (int o = 0; o < O; o++) colsum += w[o * I + i];
    for (int r = 0; r < R0 * R1; r++) {
      xsum += x[r * I + i];
      hsum += (double)x[r * I + i] * pv[i];
      bad_h += fabs(gh[r * I + i] - colsum) > 1e-5 * (1 + fabs(colsum));
    }
    bad_p += fabs(gp[i] - xsum * colsum) > 1e-4 * (1 + fabs(xsum * colsum));
    for (int o = 0; o < O; o++) bad_w += fabs(gw[o * I + i] - hsum) > 1e-5 * (1 + fabs(hsum));
  }
  CHECK(bad_h == 0, "linear on [%d,%d,%d]: %d wrong elements of d/dx", R0, R1, I, bad_h);
  CHECK(bad_p == 0, "linear on [%d,%d,%d]: %d wrong elements of d/dp", R0, R1, I, bad_p);
  CHECK(bad_w == 0, "linear on [%d,%d,%d]: %d wrong elements of d/dW", R0, R1, I, bad_w);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_linear_act records one node, its backward computes no gradient for an input that
   needs none (x here: no dx GEMM), and on the CPU it equals the two-op form bit for bit. */
static void test_linear_act(void) {
  enum { R = 6, I = 5, O = 8 };
  float x[R * I], y[2][R * O], gw[2][O * I], gb[2][O];
  for (int i = 0; i < R * I; i++) x[i] = (float)((i * 7) % 11) / 4.0f - 1.2f;
  for (int act = RG_ACT_RELU; act <= RG_ACT_GELU; act++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
    if (!ctx) return;
    rg_init init = {RG_INIT_NORMAL, 1, 0};
    rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){O, I}, init);
    rg_tensor b = rg_param(ctx, "b", RG_F32, 1, (int64_t[]){O}, init);
    for (int fused = 0; fused < 2; fused++) {
      CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
      CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
      rg_tensor xin = rg_input(ctx, RG_F32, 2, (int64_t[]){R, I}, x), h;
      size_t n0 = ctx->n_nodes;
      if (fused) {
        h = rg_linear_act(ctx, xin, W, b, (rg_act)act);
        CHECK(ctx->n_nodes == n0 + 1 && ctx->nodes[n0].op == RG_OP_LINEAR_ACT,
              "act %d: one LINEAR_ACT node, not %zu nodes", act, ctx->n_nodes - n0);
      } else {
        h = rg_linear(ctx, xin, W, b);
        h = act == RG_ACT_RELU ? rg_relu(ctx, h) : rg_gelu(ctx, h);
      }
      rg_tensor loss = rg_sum(ctx, rg_mul(ctx, h, h), RG_ALL_AXES, 0);
      size_t n1 = ctx->n_nodes;
      CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
      int matmuls = 0, accs = 0;
      for (size_t i = n1; i < ctx->n_nodes; i++) {
        matmuls += ctx->nodes[i].op == RG_OP_MATMUL;
        accs += ctx->nodes[i].op == RG_OP_MATMUL_ACC;
      }
      CHECK(matmuls == 0 && accs == 1, "act %d fused %d: %d MATMUL (no dx wanted), %d "
            "MATMUL_ACC (dW)", act, fused, matmuls, accs);
      CHECK_ST(ctx, rg_read(ctx, h, y[fused], sizeof y[0]), RG_OK);
      CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, W), gw[fused], sizeof gw[0]), RG_OK);
      CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, b), gb[fused], sizeof gb[0]), RG_OK);
    }
    CHECK(!memcmp(y[0], y[1], sizeof y[0]) && !memcmp(gw[0], gw[1], sizeof gw[0]) &&
          !memcmp(gb[0], gb[1], sizeof gb[0]), "act %d: rg_linear_act equals the two ops", act);
    CHECK(rg_linear_act(ctx, W, W, RG_NONE, (rg_act)7).id == 0 &&
          rg_error(ctx) == RG_ERR_MISUSE && strstr(rg_errmsg(ctx), "not an rg_act"),
          "a bad act is MISUSE: %s", rg_errmsg(ctx));
    rg_clear_error(ctx);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
}

/* A linear layer with a bias over a broadcast offset c: every parameter gradient is added
   by the node that computes it (W: MATMUL_ACC, with b's column sums over the rows as
   its in[3]; c: SUM_TO_ACC), no ACCUM. Check mode runs each op as it is recorded, so
   nothing is left queued to fold (c's SUM_TO and ACCUM stay two nodes): its gradients
   must be the same bits, over two backward passes that accumulate. */
static void test_fold_bias(void) {
  enum { R0 = 3, R1 = 5, I = 6, O = 7 };
  float x[R0 * R1 * I], grads[2][O * I + O + I];
  for (int i = 0; i < R0 * R1 * I; i++) x[i] = (float)((i * 5) % 13) / 3.0f - 2.0f;
  for (int check = 0; check < 2; check++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 6, .check = check});
    if (!ctx) return;
    rg_init n1 = {RG_INIT_NORMAL, 1, 0};
    rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){O, I}, n1);
    rg_tensor b = rg_param(ctx, "b", RG_F32, 1, (int64_t[]){O}, n1);
    rg_tensor c = rg_param(ctx, "c", RG_F32, 1, (int64_t[]){I}, n1);
    for (int pass = 0; pass < 2; pass++) {
      CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
      rg_tensor xin = rg_input(ctx, RG_F32, 3, (int64_t[]){R0, R1, I}, x);
      rg_tensor y = rg_linear(ctx, rg_add(ctx, xin, c), W, b);
      size_t q0 = ctx->n_nodes;
      CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, rg_mul(ctx, y, y), RG_ALL_AXES, 0)), RG_OK);
      if (check) continue;
      int mm = 0, mmb = 0, st = 0, acc = 0, sum_to = 0;
      for (size_t i = q0; i < ctx->n_nodes; i++) {
        mm += ctx->nodes[i].op == RG_OP_MATMUL_ACC;
        mmb += ctx->nodes[i].op == RG_OP_MATMUL_ACC && ctx->nodes[i].in[3];
        st += ctx->nodes[i].op == RG_OP_SUM_TO_ACC;
        acc += ctx->nodes[i].op == RG_OP_ACCUM;
        sum_to += ctx->nodes[i].op == RG_OP_SUM_TO;
      }
      CHECK(mm == 1 && mmb == 1 && st == 1 && acc == 0 && sum_to == 0,
            "linear with a bias: %d MATMUL_ACC (want 1: W), %d of them with b's sum (1), %d "
            "SUM_TO_ACC (1: c), %d ACCUM and %d SUM_TO (want 0)", mm, mmb, st, acc, sum_to);
    }
    float *g = grads[check];
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, W), g, O * I * sizeof(float)), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, b), g + O * I, O * sizeof(float)), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, c), g + O * I + O, I * sizeof(float)), RG_OK);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
  CHECK(!memcmp(grads[0], grads[1], sizeof grads[0]),
        "folded gradients are the unfolded ones, bit for bit");
  int nonzero = 0;
  for (int i = 0; i < O * I + O + I; i++) nonzero += grads[0][i] != 0;
  CHECK(nonzero == O * I + O + I, "every gradient element is set (%d of %d)", nonzero,
        O * I + O + I);
}

/* Under bf16 autocast W reaches the product through an rg_cast, whose rule hands W's F32
   gradient straight on: that pass-through still folds into the GEMM (MATMUL_ACC, no
   ACCUM), with the unfolded path's bits (check mode runs each op at once: no folds). */
static void test_fold_cast(void) {
  enum { R = 9, I = 6, O = 5 };
  float x[R * I], grads[2][O * I + O];
  for (int i = 0; i < R * I; i++) x[i] = (float)((i * 7) % 13) / 4.0f - 1.5f;
  for (int check = 0; check < 2; check++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 7, .bf16 = 1, .check = check});
    if (!ctx) return;
    rg_init n1 = {RG_INIT_NORMAL, 1, 0};
    rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){O, I}, n1);
    rg_tensor b = rg_param(ctx, "b", RG_F32, 1, (int64_t[]){O}, n1);
    for (int pass = 0; pass < 2; pass++) {
      CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
      rg_tensor y = rg_linear(ctx, rg_input(ctx, RG_F32, 2, (int64_t[]){R, I}, x), W, b);
      size_t q0 = ctx->n_nodes;
      CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, rg_mul(ctx, y, y), RG_ALL_AXES, 0)), RG_OK);
      if (check) continue;
      int mm = 0, acc = 0;
      for (size_t i = q0; i < ctx->n_nodes; i++) {
        mm += ctx->nodes[i].op == RG_OP_MATMUL_ACC;
        acc += ctx->nodes[i].op == RG_OP_ACCUM;
      }
      CHECK(mm == 1 && acc == 0, "bf16 linear: %d MATMUL_ACC (want 1), %d ACCUM (want 0)", mm,
            acc);
    }
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, W), grads[check], O * I * sizeof(float)), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, b), grads[check] + O * I, O * sizeof(float)), RG_OK);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
  CHECK(!memcmp(grads[0], grads[1], sizeof grads[0]), "folded through the cast: same bits");
}

/* A weight's gradient goes straight into its buffer: the backward of x [2,64] W^T with W
   [64,64] makes only row-sized temporaries, never a [64,64] one (16 KB) in the peak; under
   bf16 autocast too, where W reaches the product through its cast. */
static void test_weight_grad_memory(void) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 8, .bf16 = bf16});
    if (!ctx) return;
    rg_init n1 = {RG_INIT_NORMAL, 1, 0};
    rg_tensor W = rg_param(ctx, "W", RG_F32, 2, (int64_t[]){64, 64}, n1);
    float x[2 * 64] = {0};
    for (int i = 0; i < 128; i++) x[i] = (float)(i % 7) - 3.0f;
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor y = rg_linear(ctx, rg_input(ctx, RG_F32, 2, (int64_t[]){2, 64}, x), W, RG_NONE);
    rg_tensor loss = rg_sum(ctx, rg_mul(ctx, y, y), RG_ALL_AXES, 0);
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    rg_stats_get(ctx, &s1);
    CHECK(s1.pass_peak - s0.pass_peak < 64 * 64 * sizeof(float), "bf16 %d: the backward "
          "raised the pass peak by %zu bytes: a [64,64] temporary", bf16,
          s1.pass_peak - s0.pass_peak);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
}

/* Norms' parameters: a layernorm's gamma and beta and an rmsnorm's gamma are added into
   their gradients by the norm's backward node itself (ops.h), no ACCUM, except where one
   tensor is both a layernorm's gamma and its beta: the node adds only gamma (two adds
   into one buffer from one node would race on CUDA), an ACCUM adds beta. The offset c
   is a column sum (SUM_TO_ACC). As test_fold_bias: the same bits as the unfolded path
   (check mode) over two backward passes that accumulate. */
static void test_fold_norms(void) {
  enum { R0 = 3, R1 = 5, C = 6, NP = 5 };
  float x[R0 * R1 * C], grads[2][NP * C];
  for (int i = 0; i < R0 * R1 * C; i++) x[i] = (float)((i * 7) % 11) / 3.0f - 1.5f;
  for (int check = 0; check < 2; check++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 8, .check = check});
    if (!ctx) return;
    rg_init n1 = {RG_INIT_NORMAL, 1, 0};
    const char *names[NP] = {"c", "gamma", "beta", "rms", "tied"};
    rg_tensor p[NP];
    for (int i = 0; i < NP; i++) p[i] = rg_param(ctx, names[i], RG_F32, 1, (int64_t[]){C}, n1);
    for (int pass = 0; pass < 2; pass++) {
      CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
      rg_tensor xin = rg_input(ctx, RG_F32, 3, (int64_t[]){R0, R1, C}, x);
      rg_tensor h = rg_layernorm(ctx, rg_add(ctx, xin, p[0]), p[1], p[2], 1e-5f);
      h = rg_layernorm(ctx, rg_rmsnorm(ctx, h, p[3], 1e-6f), p[4], p[4], 1e-5f);
      size_t q0 = ctx->n_nodes;
      CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, rg_mul(ctx, h, xin), RG_ALL_AXES, 0)), RG_OK);
      if (check) continue;
      int acc = 0, st = 0, ln = 0, rms = 0;
      for (size_t i = q0; i < ctx->n_nodes; i++) {
        const rg_node *n = &ctx->nodes[i];
        acc += n->op == RG_OP_ACCUM;
        st += n->op == RG_OP_SUM_TO_ACC;
        /* folded: added into in[3] (in[4]), out[1] (out[2]) not made */
        ln += n->op == RG_OP_LAYERNORM_BWD && n->in[3] && !n->out[1] && !n->in[4] != !n->out[2];
        rms += n->op == RG_OP_RMSNORM_BWD && n->in[3] && !n->out[1];
      }
      CHECK(acc == 1 && st == 1 && ln == 2 && rms == 1,
            "norms: %d ACCUM (want 1: the tied beta), %d SUM_TO_ACC (1: c), %d folded "
            "LAYERNORM_BWD (2), %d folded RMSNORM_BWD (1)", acc, st, ln, rms);
    }
    for (int i = 0; i < NP; i++)
      CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, p[i]), grads[check] + i * C, C * sizeof(float)),
               RG_OK);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
  CHECK(!memcmp(grads[0], grads[1], sizeof grads[0]),
        "folded norm gradients are the unfolded ones, bit for bit");
  int nonzero = 0;
  for (int i = 0; i < NP * C; i++) nonzero += grads[0][i] != 0;
  CHECK(nonzero == NP * C, "every norm gradient element is set (%d of %d)", nonzero, NP * C);
}

/* ---- NULL contexts ------------------------------------------------------------------------ */

static rg_tensor null_loss(rg_ctx *ctx, void *user) {
  (void)user;
  return rg_sum(ctx, rg_param_at(ctx, 0), RG_ALL_AXES, 0);
}

static void test_null_ctx(void) {
  rg_ctx *n = NULL;
  rg_tensor t = {((uint64_t)1 << 32) | 1};
  int64_t dims[1] = {2};
  float buf[2] = {0}, f = 0;
  rg_stats st;
  CHECK(rg_open(NULL, NULL) == RG_ERR_MISUSE, "rg_open(NULL)");
  CHECK(rg_close(NULL) == RG_OK, "rg_close(NULL)");
  CHECK(rg_error(n) != RG_OK, "rg_error(NULL)");
  CHECK(rg_errmsg(n) != NULL, "rg_errmsg(NULL)");
  rg_clear_error(n);
  CHECK(rg_status_str((rg_status)-99) != NULL && rg_status_str(RG_ERR_FAILED) != NULL, "status_str");
  CHECK(rg_device_name(n) != NULL, "rg_device_name(NULL)");
  (void)rg_device_kind(n);
  CHECK(rg_version() && !strcmp(rg_version(), RG_VERSION_STRING), "version");
  rg_label_push(n, "x");
  rg_label_pop(n);
  CHECK(rg_step_begin(n) != RG_OK && rg_sync(n) != RG_OK, "step/sync");
  CHECK(rg_reset(n, RG_POOL_PASS) != RG_OK && rg_reset(n, RG_POOL_PERSISTENT) != RG_OK, "reset");
  CHECK(rg_generation(n, RG_POOL_PASS) == 0, "generation");
  rg_set_training(n, 0);
  rg_set_check_finite(n, 1);
  size_t avail, total;
  CHECK(rg_device_memory(n, &avail, &total) == RG_ERR_MISUSE, "rg_device_memory(NULL)");
  CHECK(!rg_input(n, RG_F32, 1, dims, buf).id, "input");
  CHECK(!rg_param(n, "p", RG_F32, 1, dims, (rg_init){0, 0, 0}).id, "param");
  CHECK(rg_read(n, t, buf, sizeof buf) != RG_OK, "read");
  CHECK(rg_item(n, t, &f) != RG_OK, "item");
  CHECK(rg_write(n, t, buf, sizeof buf) != RG_OK, "write");
  CHECK(rg_ndim(n, t) == 0 && rg_dim(n, t, 0) <= 0 && rg_numel(n, t) == 0, "queries");
  (void)rg_dtype_of(n, t);
  CHECK(!rg_is_live(n, t), "is_live");
  CHECK(rg_param_count(n) == 0 && !rg_param_at(n, 0).id && !rg_name(n, t) &&
            !rg_param_find(n, "p").id,
        "param lookups");
  int perm[1] = {0};
  rg_tensor r[] = {
      rg_add(n, t, t), rg_sub(n, t, t), rg_mul(n, t, t), rg_div(n, t, t), rg_scale(n, t, 2),
      rg_pow(n, t, 2), rg_neg(n, t), rg_exp(n, t), rg_log(n, t), rg_sqrt(n, t), rg_relu(n, t),
      rg_gelu(n, t), rg_silu(n, t), rg_sigmoid(n, t), rg_tanh(n, t), rg_clamp(n, t, 0, 1),
      rg_sum(n, t, 0, 0), rg_mean(n, t, 0, 0), rg_max(n, t, 0, 0), rg_argmax(n, t, 0, 0),
      rg_softmax(n, t), rg_log_softmax(n, t), rg_matmul(n, t, t), rg_linear(n, t, t, t),
      rg_layernorm(n, t, t, t, 1e-5f), rg_rmsnorm(n, t, t, 1e-5f), rg_embedding(n, t, t),
      rg_attention(n, t, t, t, 1), rg_attention_qkv(n, t, 2, 1), rg_cross_entropy(n, t, t),
      rg_cross_entropy_ignore(n, t, t, -1),
      rg_mse(n, t, t), rg_reshape(n, t, 1, dims), rg_transpose(n, t, 0, 1),
      rg_permute(n, t, perm), rg_slice(n, t, 0, 0, 1), rg_concat(n, t, t, 0),
      rg_dropout(n, t, 0.5f), rg_cast(n, t, RG_BF16), rg_detach(n, t), rg_grad(n, t)};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    CHECK(r[i].id == 0, "op %zu with a NULL ctx returned a handle", i);
  CHECK(rg_backward(n, t) != RG_OK && rg_zero_grad(n) != RG_OK, "autograd");
  CHECK(rg_optim_adamw(n, NULL) == NULL && rg_optim_sgd(n, NULL) == NULL, "optim ctors");
  CHECK(rg_optim_step(NULL) != RG_OK && rg_optim_set_lr(NULL, 0.1f) != RG_OK, "optim calls");
  CHECK(rg_optim_steps(NULL) < 0, "optim steps");
  CHECK(rg_clip_grad_norm(n, 1) != RG_OK, "clip");
  rg_optim_free(NULL);
  CHECK(rg_save(n, "x.safetensors", NULL) != RG_OK && rg_load(n, "x.safetensors", NULL) != RG_OK,
        "checkpoints");
  CHECK(rg_meta_set(n, "k", "v") != RG_OK && rg_meta_get(n, "k") == NULL, "meta");
  rg_stats_get(n, &st);
  rg_stats_reset(n);
  rg_gradcheck_result gr;
  CHECK(rg_gradcheck(n, null_loss, NULL, 1e-3, 0, &gr) != RG_OK, "gradcheck");
  /* and NULL out-pointers with a real context */
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_stats_get(ctx, NULL);
  rg_tensor one = rg_sum(ctx, vec(ctx, 2, buf), RG_ALL_AXES, 0);
  CHECK(rg_item(ctx, one, NULL) == RG_ERR_MISUSE, "rg_item(out NULL)");
  rg_clear_error(ctx);
  CHECK(rg_read(ctx, one, NULL, 4) == RG_ERR_MISUSE, "rg_read(dst NULL)");
  rg_clear_error(ctx);
  CHECK(!rg_param(ctx, NULL, RG_F32, 1, dims, (rg_init){0, 0, 0}).id &&
            rg_error(ctx) == RG_ERR_MISUSE,
        "param without a name");
  rg_clear_error(ctx);
  CHECK(!rg_input(ctx, RG_F32, 1, NULL, buf).id && rg_error(ctx) == RG_ERR_MISUSE,
        "input without dims");
  rg_clear_error(ctx);
  rg_label_push(ctx, NULL);
  rg_label_pop(ctx);
  works_after(ctx, "NULL args");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- allocation-failure injection --------------------------------------------------------- */

/* Builds the model and optimizer and runs one step; stops at the first error. */
static rg_status build_and_step(rg_ctx *ctx, rg_optim **opt, float *loss) {
  mlp m;
  *opt = NULL;
  rg_status st = mlp_make(ctx, &m);
  if (st != RG_OK) return st;
  *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 1e-2f});
  if (!*opt) return rg_error(ctx) != RG_OK ? rg_error(ctx) : RG_ERR_MISUSE;
  return mlp_step(ctx, &m, *opt, loss);
}

static void test_alloc_failures(void) {
  float ref = 0;
  {
    rg_ctx *ctx = open_cpu();
    if (!ctx) return;
    rg_optim *opt;
    CHECK_ST(ctx, build_and_step(ctx, &opt, &ref), RG_OK);
    rg_optim_free(opt);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
  int injected = 0, done = 0;
  int fails0 = test_failures_;
  for (uint64_t n = 1; n <= 5000 && !done && test_failures_ - fails0 < 5; n++) {
    rg_ctx *ctx = open_cpu();
    if (!ctx) return;
    ctx->alloc_fail_at = ctx->alloc_count + n;
    rg_optim *opt = NULL;
    float loss = -1;
    rg_status st = build_and_step(ctx, &opt, &loss);
    int hit = ctx->alloc_count >= ctx->alloc_fail_at;
    ctx->alloc_fail_at = 0;
    if (!hit) {
      done = 1;
      CHECK(st == RG_OK && loss == ref, "uninjected run: %s, loss %.9g vs %.9g",
            rg_status_str(st), loss, ref);
    } else {
      injected++;
      rg_status e = rg_error(ctx);
      if (st == RG_OK && e == RG_OK) {
        /* the library absorbed the failure: then the answer must still be right */
        CHECK(loss == ref, "alloc %llu failed silently and the loss is %.9g, not %.9g",
              (unsigned long long)n, loss, ref);
      } else {
        CHECK(e == RG_ERR_OOM, "alloc %llu: step -> %s, sticky %s (%s)", (unsigned long long)n,
              rg_status_str(st), rg_status_str(e), rg_errmsg(ctx));
      }
      /* recovery in the same context: start over from a clean persistent pool */
      rg_optim_free(opt);
      rg_clear_error(ctx);
      rg_status rs = rg_reset(ctx, RG_POOL_PERSISTENT);
      rg_clear_error(ctx);
      rg_status ss = rg_step_begin(ctx);
      rg_clear_error(ctx);
      (void)rs;
      (void)ss;
      float again = -1;
      st = build_and_step(ctx, &opt, &again);
      CHECK(st == RG_OK && again == ref, "alloc %llu: recovery step -> %s, loss %.9g vs %.9g (%s)",
            (unsigned long long)n, rg_status_str(st), again, ref, rg_errmsg(ctx));
    }
    rg_optim_free(opt);
    rg_status cs = rg_close(ctx);
    CHECK(cs == RG_OK, "alloc %llu: rg_close -> %s", (unsigned long long)n, rg_status_str(cs));
  }
  printf("allocation-failure injection: %d failure points, each recovered\n", injected);
  CHECK(done, "a step finished without reaching the injected failure");
  CHECK(injected > 10, "failures were injected at %d points", injected);
}

int main(void) {
  test_null_ctx();
  test_stale_pass();
  test_stale_persistent();
  test_forged();
  test_pending();
  test_failed_drain();
  test_backward_on_failed();
  test_inplace_order();
  test_write_order();
  test_recovery();
  test_labels();
  test_budgets();
  test_crossings();
  test_bump();
  test_check_mode();
  test_guard();
  test_autograd();
  test_linear3d_grad();
  test_linear_act();
  test_fold_bias();
  test_fold_cast();
  test_weight_grad_memory();
  test_fold_norms();
  test_constant();
  test_own_status();
  test_reshape_view();
  test_alloc_failures();
  return finish();
}
