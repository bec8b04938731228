/*
 * test_finite.c - rg_options.check_finite: the first op whose output holds a NaN or Inf
 * fails its drain with RG_ERR_NONFINITE naming that op and its label; nothing after it
 * changes the weights; with the option off the same program runs and returns the NaN.
 * rg_set_check_finite turns it on and off between drains, also where CUDA replays a
 * graph captured with it off. Runs on the CPU, and on CUDA too where a GPU is usable.
 */
#include "common.h"

#include <math.h>

static void run(rg_device dev) {
  const char *dn = dev == RG_DEVICE_CUDA ? "cuda" : "cpu";
  for (int on = 0; on < 2; on++) {
    rg_ctx *ctx = NULL;
    rg_options o = {.device = dev, .quiet = 1, .check_finite = on};
    if (rg_open(&ctx, &o) != RG_OK) {
      CHECK(0, "%s: rg_open failed", dn);
      return;
    }
    rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_CONST, 2, 0});
    rg_optim *opt = rg_optim_adamw(ctx, NULL);
    float x[3] = {1, 2, 3}, before[3], after[3];
    CHECK_ST(ctx, rg_read(ctx, w, before, sizeof before), RG_OK);
    rg_step_begin(ctx);
    rg_tensor xi = rg_input(ctx, RG_F32, 1, (int64_t[]){3}, x);
    rg_tensor h = rg_mul(ctx, xi, w);                      /* finite */
    rg_label_push(ctx, "blowup");
    rg_tensor bad = rg_log(ctx, rg_sub(ctx, h, rg_scale(ctx, xi, 3))); /* log(-x): NaN */
    rg_label_pop(ctx);
    rg_tensor loss = rg_sum(ctx, rg_scale(ctx, bad, 2), RG_ALL_AXES, 0);
    rg_backward(ctx, loss);
    rg_optim_step(opt);
    float l = 0;
    rg_status st = rg_item(ctx, loss, &l);
    if (on) {
      CHECK(st == RG_ERR_NONFINITE, "%s: check_finite: %s", dn, rg_status_str(st));
      CHECK(msg_has(ctx, "rg_log") && msg_has(ctx, "blowup") && msg_has(ctx, "NaN"),
            "%s: the message names the op, its label and the value: %s", dn, rg_errmsg(ctx));
      rg_clear_error(ctx);
      float hv[3];
      CHECK_ST(ctx, rg_read(ctx, h, hv, sizeof hv), RG_OK); /* computed before: readable */
      CHECK(hv[2] == 6, "%s: values before the failing op are kept: %g", dn, hv[2]);
      CHECK(rg_read(ctx, bad, hv, sizeof hv) == RG_ERR_FAILED, "%s: the failing op's value "
            "reads FAILED", dn);
      rg_clear_error(ctx);
      CHECK_ST(ctx, rg_read(ctx, w, after, sizeof after), RG_OK);
      CHECK(!memcmp(before, after, sizeof before), "%s: the optimizer step after the NaN did "
            "not run: %g -> %g", dn, before[0], after[0]);
    } else {
      CHECK(st == RG_OK && l != l, "%s: check_finite off: the NaN comes back, %s %g", dn,
            rg_status_str(st), l);
    }
    printf("%s check_finite=%d: %s\n", dn, on, rg_status_str(st));
    rg_optim_free(opt);
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
}

/* A step with a 0/0 runs with the check off (three times: CUDA captures the step's graph
   and replays it), fails naming the division once rg_set_check_finite turns it on, and
   runs again once it is off. */
static void toggle(rg_device dev) {
  const char *dn = dev == RG_DEVICE_CUDA ? "cuda" : "cpu";
  rg_ctx *ctx = NULL;
  if (rg_open(&ctx, &(rg_options){.device = dev, .quiet = 1}) != RG_OK) {
    CHECK(0, "%s: rg_open failed", dn);
    return;
  }
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_CONST, 2, 0});
  float x[3] = {0, 1, 2};
  int want[] = {0, 0, 0, 1, 1, 0, 0};
  for (int i = 0; i < (int)(sizeof want / sizeof *want); i++) {
    if (i > 0 && want[i] != want[i - 1]) rg_set_check_finite(ctx, want[i]);
    rg_step_begin(ctx);
    rg_tensor xi = rg_input(ctx, RG_F32, 1, (int64_t[]){3}, x);
    rg_label_push(ctx, "ratio");
    rg_tensor r = rg_div(ctx, rg_mul(ctx, xi, w), xi); /* 0/0 at element 0 */
    rg_label_pop(ctx);
    float l = 0;
    rg_status st = rg_item(ctx, rg_sum(ctx, r, RG_ALL_AXES, 0), &l);
    if (want[i]) {
      CHECK(st == RG_ERR_NONFINITE && msg_has(ctx, "rg_div") && msg_has(ctx, "ratio") &&
            msg_has(ctx, "NaN"), "%s step %d, check on: %s (%s)", dn, i, rg_status_str(st),
            rg_errmsg(ctx));
      rg_clear_error(ctx);
    } else {
      CHECK(st == RG_OK && l != l, "%s step %d, check off: %s, loss %g", dn, i,
            rg_status_str(st), l);
    }
  }
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  run(RG_DEVICE_CPU);
  toggle(RG_DEVICE_CPU);
  rg_ctx *probe = NULL;
  if (rg_open(&probe, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1}) == RG_OK) {
    rg_close(probe);
    run(RG_DEVICE_CUDA);
    toggle(RG_DEVICE_CUDA);
  } else {
    printf("cuda: no usable GPU, CUDA half not run\n");
  }
  return finish();
}
