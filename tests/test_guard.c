/*
 * test_guard.c - the two bounds on recording (resgrad.h, rg_options): max_queued, whose
 * guard drains the queue and is otherwise invisible, and max_pass_nodes, past which a
 * pass that never reaches rg_step_begin fails with RG_ERR_OOM naming the label and the op
 * that recorded most of it, and how many, and recovers at rg_step_begin or rg_reset.
 */
#include "common.h"

static int has(const rg_ctx *ctx, const char *s) { return strstr(rg_errmsg(ctx), s) != NULL; }

/* A runaway loop under a label: the bound names the label, the op and the counts. */
static void test_pass_bound(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.max_pass_nodes = 40, .max_queued = 8});
  if (!ctx) return;
  float v[2] = {1, -1};
  int64_t d = 2;
  rg_label_push(ctx, "setup");
  rg_tensor x = rg_input(ctx, RG_F32, 1, &d, v); /* 1 node under [setup] */
  rg_label_pop(ctx);
  rg_label_push(ctx, "train");
  rg_label_push(ctx, "loop");
  int i = 0;
  rg_tensor y = x;
  for (; i < 100; i++) {
    rg_tensor z = rg_scale(ctx, y, 2);
    if (!z.id) break;
    rg_tensor s = rg_add(ctx, z, x); /* two nodes a turn: scale then add */
    if (!s.id) break;
    y = s;
  }
  CHECK(i == 19, "the bound stops the 20th turn's add: turn %d", i);
  CHECK(rg_error(ctx) == RG_ERR_OOM, "the bound is RG_ERR_OOM, got %s",
        rg_status_str(rg_error(ctx)));
  CHECK(has(ctx, "rg_add [train/loop]: "), "names the call refused: %s", rg_errmsg(ctx));
  CHECK(has(ctx, "recorded 40 nodes"), "says how many the pass holds: %s", rg_errmsg(ctx));
  CHECK(has(ctx, "max_pass_nodes"), "names the option: %s", rg_errmsg(ctx));
  CHECK(has(ctx, "under [train/loop] (39), 20 of them by rg_scale"),
        "names the site that recorded most, and how many: %s", rg_errmsg(ctx));
  CHECK(has(ctx, "rg_step_begin"), "says what to do: %s", rg_errmsg(ctx));
  /* Full until the pass resets: another call is refused and records nothing. */
  rg_clear_error(ctx);
  CHECK(rg_scale(ctx, x, 2).id == 0 && rg_error(ctx) == RG_ERR_OOM, "still full: %s",
        rg_errmsg(ctx));
  rg_label_pop(ctx);
  rg_label_pop(ctx);
  float out[2];
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, y, out, sizeof out), RG_OK);
  CHECK(out[0] == 1048575 && out[1] == -1048575, "what was recorded ran (19 turns of "
        "y = 2y + x): %g %g", out[0], out[1]);

  /* rg_step_begin makes room again. */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  x = rg_input(ctx, RG_F32, 1, &d, v);
  for (i = 0; i < 39 && x.id; i++) x = rg_scale(ctx, x, 2);
  CHECK(x.id && rg_error(ctx) == RG_OK, "a pass of 40 nodes records: %s", rg_errmsg(ctx));
  CHECK_ST(ctx, rg_read(ctx, x, out, sizeof out), RG_OK);
  CHECK(out[0] == 549755813888.0f, "and runs: %g", out[0]);

  /* No label: the message says so. rg_reset of the pass makes room too. */
  CHECK(rg_scale(ctx, x, 2).id == 0, "the 41st node is refused");
  CHECK(has(ctx, "under no label (40), 39 of them by rg_scale"), "%s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_OK);
  x = rg_input(ctx, RG_F32, 1, &d, v);
  CHECK(rg_scale(ctx, x, 2).id && rg_error(ctx) == RG_OK, "records after rg_reset: %s",
        rg_errmsg(ctx));
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_backward is refused the same way when the tape it would record passes the bound. */
static void test_backward_bound(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.max_pass_nodes = 6});
  if (!ctx) return;
  int64_t d = 2;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, &d, (rg_init){RG_INIT_CONST, 1, 0});
  rg_tensor l = rg_sum(ctx, rg_mul(ctx, w, w), RG_ALL_AXES, 0);
  CHECK(l.id && rg_error(ctx) == RG_OK, "forward records: %s", rg_errmsg(ctx));
  CHECK_ST(ctx, rg_backward(ctx, l), RG_ERR_OOM);
  CHECK(has(ctx, "max_pass_nodes"), "names the bound: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  l = rg_sum(ctx, rg_mul(ctx, w, w), RG_ALL_AXES, 0);
  CHECK(l.id, "the context records again: %s", rg_errmsg(ctx));
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* The default bound is far above a step, and the guard drain under max_queued is as it
   was: it runs the queue and fails nothing. */
static void test_guard_drain(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.max_queued = 4});
  if (!ctx) return;
  float v[2] = {1, -1};
  int64_t d = 2;
  rg_tensor x = rg_input(ctx, RG_F32, 1, &d, v);
  for (int i = 0; i < 99; i++) x = rg_scale(ctx, x, 2);
  rg_stats s;
  rg_stats_get(ctx, &s);
  CHECK(x.id && rg_error(ctx) == RG_OK, "100 nodes record: %s", rg_errmsg(ctx));
  CHECK(s.drain_reason[RG_DRAIN_GUARD] == 25, "the guard drained every 4 nodes: %llu",
        (unsigned long long)s.drain_reason[RG_DRAIN_GUARD]);
  CHECK(s.queue_peak == 4, "the queue stayed at the guard: %zu", s.queue_peak);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  test_pass_bound();
  test_backward_bound();
  test_guard_drain();
  return finish();
}
