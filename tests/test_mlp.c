/*
 * test_mlp.c - a small MLP (2-16-16-2, tanh) learns XOR on the CPU, through the public API.
 *
 * What is checked: full-batch training on 256 generated XOR points (label = sign(x0*x1),
 * points within 0.05 of an axis dropped so the classes have a margin) with AdamW and with
 * SGD + momentum brings the cross-entropy below a stated value and the accuracy above a
 * stated value; every step is exactly one drain; two runs with the same seed give
 * bit-identical loss sequences and final weights, and a different seed gives a different
 * sequence. Thresholds are set well above the observed values (written next to them) so
 * the test is about learning, not about the last digit. Exits non-zero on any failure.
 */
#include "common.h"

#include <math.h>

enum { NPTS = 256, IN = 2, HID = 16, OUT = 2, STEPS = 400 };

typedef struct data { float x[NPTS * IN]; int32_t y[NPTS]; } data;

static void make_xor(data *d) {
  uint32_t s = 12345u;
  int k = 0;
  while (k < NPTS) {
    float p[2];
    for (int j = 0; j < 2; j++) {
      s = s * 1664525u + 1013904223u;                    /* LCG: data only */
      p[j] = (float)((s >> 8) / 16777216.0 * 2.0 - 1.0); /* [-1, 1) */
    }
    if (fabsf(p[0]) < 0.05f || fabsf(p[1]) < 0.05f) continue;
    d->x[2 * k] = p[0];
    d->x[2 * k + 1] = p[1];
    d->y[k] = p[0] * p[1] > 0;
    k++;
  }
}

typedef struct net { rg_tensor w1, b1, w2, b2, w3, b3; } net;

static void make_net(rg_ctx *ctx, net *n) {
  float k1 = 1.0f / sqrtf(IN), k2 = 1.0f / sqrtf(HID); /* PyTorch's nn.Linear bounds */
  n->w1 = rg_param(ctx, "l1.weight", RG_F32, 2, (int64_t[]){HID, IN}, (rg_init){RG_INIT_UNIFORM, -k1, k1});
  n->b1 = rg_param(ctx, "l1.bias", RG_F32, 1, (int64_t[]){HID}, (rg_init){RG_INIT_UNIFORM, -k1, k1});
  n->w2 = rg_param(ctx, "l2.weight", RG_F32, 2, (int64_t[]){HID, HID}, (rg_init){RG_INIT_UNIFORM, -k2, k2});
  n->b2 = rg_param(ctx, "l2.bias", RG_F32, 1, (int64_t[]){HID}, (rg_init){RG_INIT_UNIFORM, -k2, k2});
  n->w3 = rg_param(ctx, "l3.weight", RG_F32, 2, (int64_t[]){OUT, HID}, (rg_init){RG_INIT_UNIFORM, -k2, k2});
  n->b3 = rg_param(ctx, "l3.bias", RG_F32, 1, (int64_t[]){OUT}, (rg_init){RG_INIT_UNIFORM, -k2, k2});
}

static rg_tensor logits_of(rg_ctx *ctx, const net *n, rg_tensor x) {
  rg_tensor h = rg_tanh(ctx, rg_linear(ctx, x, n->w1, n->b1));
  h = rg_tanh(ctx, rg_linear(ctx, h, n->w2, n->b2));
  return rg_linear(ctx, h, n->w3, n->b3);
}

typedef struct run {
  float loss[STEPS];
  float acc;
  float w3[OUT * HID];
  int ok;
} run;

/* Trains from scratch in a fresh context; sgd != 0 picks SGD with momentum. */
static void train(const data *d, uint64_t seed, int sgd, run *r) {
  memset(r, 0, sizeof *r);
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = seed});
  if (!ctx) return;
  net n;
  make_net(ctx, &n);
  rg_optim *opt = sgd ? rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f, .momentum = 0.9f})
                      : rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.01f, .weight_decay = 0.01f});
  CHECK(opt && rg_error(ctx) == RG_OK, "setup: %s", rg_errmsg(ctx));
  if (!opt) {
    rg_close(ctx);
    return;
  }
  int steady = 1;
  for (int s = 0; s < STEPS; s++) {
    rg_step_begin(ctx);
    rg_stats_reset(ctx);
    rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){NPTS, IN}, d->x);
    rg_tensor y = rg_input(ctx, RG_I32, 1, (int64_t[]){NPTS}, d->y);
    rg_tensor loss = rg_cross_entropy(ctx, logits_of(ctx, &n, x), y);
    rg_backward(ctx, loss);
    rg_optim_step(opt);
    rg_zero_grad(ctx);
    rg_status st = rg_item(ctx, loss, &r->loss[s]);
    if (st != RG_OK || rg_error(ctx) != RG_OK) {
      CHECK(0, "step %d: %s (%s)", s, rg_status_str(st), rg_errmsg(ctx));
      rg_optim_free(opt);
      rg_close(ctx);
      return;
    }
    rg_stats stt;
    rg_stats_get(ctx, &stt);
    /* the first step also uploads rg_backward's seed, once a context */
    steady &= stt.drains == 1 && stt.down.bytes == 4 && stt.up.count == 2u + (s == 0);
  }
  CHECK(steady, "every step is one drain, two uploads (three the first time) and one 4-byte "
        "download");
  /* accuracy: argmax of the logits, one more read */
  rg_step_begin(ctx);
  rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){NPTS, IN}, d->x);
  rg_tensor pred = rg_argmax(ctx, logits_of(ctx, &n, x), -1, 0);
  int32_t p[NPTS];
  CHECK_ST(ctx, rg_read(ctx, pred, p, sizeof p), RG_OK);
  int right = 0;
  for (int i = 0; i < NPTS; i++) right += p[i] == d->y[i];
  r->acc = (float)right / NPTS;
  CHECK_ST(ctx, rg_read(ctx, n.w3, r->w3, sizeof r->w3), RG_OK);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
  r->ok = 1;
}

int main(void) {
  static data d;
  static run a, b, c, s;
  make_xor(&d);
  int pos = 0;
  for (int i = 0; i < NPTS; i++) pos += d.y[i];
  CHECK(pos > NPTS / 4 && pos < 3 * NPTS / 4, "both classes present: %d of %d", pos, NPTS);

  train(&d, 1234, 0, &a);
  if (a.ok) {
    printf("adamw: loss %.4f -> %.4f, accuracy %.3f\n", a.loss[0], a.loss[STEPS - 1], a.acc);
    /* the loss at initialisation is near ln 2 for two balanced classes */
    CHECK(fabsf(a.loss[0] - 0.6931f) < 0.15f, "initial loss %g is not near ln 2", a.loss[0]);
    /* observed (netlib cblas_sgemm, Debug): loss 0.7688 -> 0.0010, accuracy 1.000 */
    CHECK(a.loss[STEPS - 1] < 0.05f, "AdamW: final loss %g, want < 0.05", a.loss[STEPS - 1]);
    CHECK(a.acc >= 0.97f, "AdamW: accuracy %g, want >= 0.97", a.acc);
    int falls = 0;
    for (int i = 50; i < STEPS; i += 50) falls += a.loss[i] < a.loss[i - 50];
    CHECK(falls >= 5, "the loss falls along the way (%d of 7 windows)", falls);
  }

  /* determinism: same seed, bit-identical trajectory; another seed, another one */
  train(&d, 1234, 0, &b);
  if (a.ok && b.ok) {
    CHECK(!memcmp(a.loss, b.loss, sizeof a.loss), "same seed, different loss sequences");
    CHECK(!memcmp(a.w3, b.w3, sizeof a.w3), "same seed, different final weights");
    CHECK(a.acc == b.acc, "same seed, different accuracy");
  }
  train(&d, 99, 0, &c);
  if (a.ok && c.ok)
    CHECK(memcmp(a.loss, c.loss, sizeof a.loss) != 0, "a different seed gives the same run");

  train(&d, 1234, 1, &s);
  if (s.ok) {
    printf("sgd+momentum: loss %.4f -> %.4f, accuracy %.3f\n", s.loss[0], s.loss[STEPS - 1],
           s.acc);
    /* observed (netlib cblas_sgemm, Debug): loss 0.7688 -> 0.0033, accuracy 1.000 */
    CHECK(s.loss[STEPS - 1] < 0.05f, "SGD: final loss %g, want < 0.05", s.loss[STEPS - 1]);
    CHECK(s.acc >= 0.95f, "SGD: accuracy %g, want >= 0.95", s.acc);
    CHECK(s.loss[0] == a.loss[0], "same seed and data: the first loss does not depend on the "
          "optimizer (%g vs %g)", s.loss[0], a.loss[0]);
  }
  return finish();
}
