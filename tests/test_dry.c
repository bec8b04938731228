/*
 * test_dry.c - rg_options.dry_run. A dry context and a real one of the same device, given
 * the same calls, report the same bytes (pass, persistent and device, now and at peak,
 * exactly) step after step: training steps of an MLP and of a GPT with AdamW and
 * clipping, then an evaluation on a larger batch. A dry GPT of 52 billion parameters
 * records a training step on 2^20 positions (1024 sequences of 1024) with no memory or
 * time that grows with them, from a 4-byte input buffer, and reports the hundreds of GB
 * they need. Budgets hold in a dry context as in a real one, a host allocation that fails
 * anywhere in a dry step is RG_ERR_OOM and the context goes on; rg_save, rg_load,
 * rg_dist_init and rg_gradcheck refuse one. On CUDA too where a GPU is usable.
 */
#include "common.h"
#include "core/internal.h" /* white-box: alloc_fail_at, as tests/test_inject.c */
#include "resgrad_nn.h"

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { D = 12, H = 32, K = 5, T = 8, V = 13 };

typedef struct run {
  rg_ctx *ctx;
  rg_gpt *gpt; /* NULL: the MLP fc1, fc2 */
  rg_nn_linear fc1, fc2;
  rg_optim *opt;
} run;

static rg_ctx *open_dev(rg_device dev, int dry, size_t pass_budget) {
  rg_ctx *ctx = NULL;
  rg_options o = {.device = dev, .quiet = 1, .dry_run = dry, .pass_budget = pass_budget,
                  .seed = 5};
  rg_status st = rg_open(&ctx, &o);
  CHECK(st == RG_OK, "rg_open(dry_run=%d) -> %s", dry, rg_status_str(st));
  return ctx;
}

static run build(rg_ctx *ctx, int gpt) {
  run r = {.ctx = ctx};
  if (gpt) {
    rg_gpt_config c = {.vocab = V, .block = T, .layers = 2, .width = 32, .heads = 4,
                       .dropout = 0.1f};
    r.gpt = rg_gpt_new(ctx, &c, NULL);
  } else {
    rg_nn_linear_init(ctx, &r.fc1, "fc1", D, H, 1, -1);
    rg_nn_linear_init(ctx, &r.fc2, "fc2", H, K, 1, -1);
  }
  r.opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 1e-3f, .weight_decay = 0.01f});
  CHECK(rg_error(ctx) == RG_OK, "building the model: %s", rg_errmsg(ctx));
  return r;
}

static void unbuild(run *r) {
  rg_gpt_free(r->gpt);
  rg_optim_free(r->opt);
  CHECK_ST(r->ctx, rg_close(r->ctx), RG_OK);
}

/* A training step (backward, clip, AdamW, zero_grad) or an evaluation on B rows (the
   GPT: B sequences of T). host holds the inputs, or is a 4-byte dummy in a dry run that
   must not read them. Returns the status of the step's rg_item. */
static rg_status step(run *r, int64_t B, int train, const void *host, float *loss_out) {
  rg_ctx *c = r->ctx;
  rg_step_begin(c);
  rg_set_training(c, train);
  rg_tensor loss;
  if (r->gpt) {
    rg_tensor idx = rg_input(c, RG_I32, 2, (int64_t[]){B, T}, host);
    rg_tensor tgt = rg_input(c, RG_I32, 2, (int64_t[]){B, T}, host);
    loss = rg_gpt_loss(r->gpt, idx, tgt);
  } else {
    rg_tensor x = rg_input(c, RG_F32, 2, (int64_t[]){B, D}, host);
    rg_tensor y = rg_input(c, RG_I32, 1, (int64_t[]){B}, host);
    rg_tensor h = rg_relu(c, rg_nn_linear_forward(c, &r->fc1, x));
    loss = rg_cross_entropy(c, rg_nn_linear_forward(c, &r->fc2, h), y);
  }
  if (train) {
    rg_backward(c, loss);
    rg_clip_grad_norm(c, 1.0f);
    rg_optim_step(r->opt);
    rg_zero_grad(c);
  }
  float l = -1;
  rg_status st = rg_item(c, loss, &l);
  if (loss_out) *loss_out = l;
  return st;
}

/* Valid inputs for B rows of either model: small non-negative integers, as I32 token
   ids and targets, or as F32 features (read as floats they are tiny but finite). */
static int32_t *inputs(int64_t B) {
  int64_t n = B * (T > D ? T : D);
  int32_t *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; p && i < n; i++) p[i] = (int32_t)((i * 7 + 3) % K);
  return p;
}

static void same_bytes(const rg_ctx *real, const rg_ctx *dry, const char *what) {
  rg_stats a, b;
  rg_stats_get(real, &a);
  rg_stats_get(dry, &b);
#define SAME(f)                                                                          \
  CHECK(a.f == b.f, "%s: %s is %llu on the real context, %llu on the dry one", what, #f, \
        (unsigned long long)a.f, (unsigned long long)b.f)
  SAME(pass_bytes);
  SAME(pass_peak);
  SAME(persistent_bytes);
  SAME(persistent_peak);
  SAME(device_bytes);
  SAME(device_peak);
  SAME(up.bytes);
  SAME(down.bytes);
  SAME(nodes_recorded);
  SAME(queue_peak);
#undef SAME
  CHECK(b.launches == 0, "%s: the dry context ran %llu kernels", what,
        (unsigned long long)b.launches);
}

/* The same program on a real and a dry context of dev: equal bytes after each step. */
static void test_same(rg_device dev, int gpt) {
  const char *name = gpt ? "gpt" : "mlp";
  run real = build(open_dev(dev, 0, 0), gpt), dry = build(open_dev(dev, 1, 0), gpt);
  if (!real.ctx || !dry.ctx) return;
  int32_t *host = inputs(64), dummy = 0;
  char what[96];
  for (int s = 0; s < 3; s++) {
    int train = s < 2;
    int64_t B = train ? 16 : 64; /* the evaluation's batch is larger */
    float lr = -1, ld = -1;
    CHECK_ST(real.ctx, step(&real, B, train, host, &lr), RG_OK);
    CHECK_ST(dry.ctx, step(&dry, B, train, &dummy, &ld), RG_OK);
    CHECK(lr > 0 && ld == 0, "%s step %d: real loss %g, dry loss %g (zeros)", name, s, lr, ld);
    snprintf(what, sizeof what, "%s on %s, after %s %d", name, rg_device_name(real.ctx),
             train ? "training step" : "evaluation", s);
    same_bytes(real.ctx, dry.ctx, what);
  }
  rg_stats st;
  rg_stats_get(dry.ctx, &st);
  printf("%s on %s: pass peak %zu, persistent peak %zu, device peak %zu bytes, alike\n",
         name, rg_device_name(dry.ctx), st.pass_peak, st.persistent_peak, st.device_peak);
  free(host);
  unbuild(&real);
  unbuild(&dry);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long peak_rss_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

/* A GPT of 52 billion parameters trained on 1024 sequences of 1024: hundreds of GB in
   both pools, recorded with a 4-byte input buffer, in no time and no memory. */
static void test_huge(void) {
  rg_ctx *ctx = open_dev(RG_DEVICE_CPU, 1, 0);
  if (!ctx) return;
  long rss0 = peak_rss_kb();
  double t0 = now();
  rg_gpt_config c = {.vocab = 50304, .block = 1024, .layers = 64, .width = 8192, .heads = 64};
  run r = {.ctx = ctx, .gpt = rg_gpt_new(ctx, &c, NULL)};
  r.opt = rg_optim_adamw(ctx, NULL);
  int32_t dummy = 0;
  float l = -1;
  CHECK_ST(ctx, step(&r, 1024, 1, &dummy, &l), RG_OK);
  CHECK(l == 0, "a dry rg_item delivers 0, not %g", l);
  float ln[8192];
  ln[0] = 1;
  CHECK_ST(ctx, rg_read(ctx, rg_param_find(ctx, "ln_f.weight"), ln, sizeof ln), RG_OK);
  CHECK(ln[0] == 0 && ln[8191] == 0, "a dry rg_read delivers zeros: %g", ln[0]);
  double secs = now() - t0;
  long grown = peak_rss_kb() - rss0;
  rg_stats st;
  rg_stats_get(ctx, &st);
  int64_t n = rg_gpt_param_count(r.gpt);
  CHECK(n > 50000000000, "the model has %lld parameters", (long long)n);
  CHECK(st.persistent_peak >= (size_t)n * 16, "persistent peak %zu holds weights, gradients "
        "and AdamW's two moments of %lld parameters", st.persistent_peak, (long long)n);
  CHECK(st.pass_peak > (size_t)1024 * 1024 * 50304 * 4, "pass peak %zu holds the logits",
        st.pass_peak);
  CHECK(st.device_peak >= st.pass_peak + st.persistent_peak, "device peak %zu",
        st.device_peak);
  CHECK(grown < 256 * 1024, "the dry run grew the peak resident memory by %ld KiB", grown);
  CHECK(secs < 10, "the dry run took %.3f s", secs);
  printf("dry run of a %lld-parameter GPT on 2^20 positions: %.1f GB persistent, %.1f GB "
         "pass, %.1f GB device at peak, in %.3f s and %ld KiB more resident memory\n",
         (long long)n, st.persistent_peak / 1e9, st.pass_peak / 1e9, st.device_peak / 1e9,
         secs, grown);
  const char *dn = rg_device_name(ctx);
  CHECK(!strcmp(dn, "cpu (dry run)"), "device name \"%s\"", dn);
  CHECK(rg_device_kind(ctx) == RG_DEVICE_CPU, "device kind");
  unbuild(&r);
}

/* The same pass budget, too small for the step, fails both contexts alike. */
static void test_budget(void) {
  size_t budget = 4096;
  run real = build(open_dev(RG_DEVICE_CPU, 0, budget), 0);
  run dry = build(open_dev(RG_DEVICE_CPU, 1, budget), 0);
  if (!real.ctx || !dry.ctx) return;
  int32_t *host = inputs(64);
  CHECK_ST(real.ctx, step(&real, 64, 1, host, NULL), RG_ERR_OOM);
  CHECK_ST(dry.ctx, step(&dry, 64, 1, host, NULL), RG_ERR_OOM);
  CHECK(!strcmp(rg_errmsg(real.ctx), rg_errmsg(dry.ctx)) && msg_has(dry.ctx, "budget"),
        "the same message: \"%s\" and \"%s\"", rg_errmsg(real.ctx), rg_errmsg(dry.ctx));
  rg_clear_error(dry.ctx);
  rg_clear_error(real.ctx);
  free(host);
  unbuild(&real);
  unbuild(&dry);
}

/* The N-th host allocation of a dry training step fails, for N = 1, 2, ... until one step
   runs without reaching it: RG_ERR_OOM, and the same step then runs. */
static void test_alloc_failures(void) {
  int points = 0, done = 0, fails0 = test_failures_;
  for (uint64_t n = 1; n < 5000 && !done && test_failures_ - fails0 < 5; n++) {
    run r = build(open_dev(RG_DEVICE_CPU, 1, 0), 1);
    if (!r.ctx) return;
    int32_t dummy = 0;
    r.ctx->alloc_fail_at = r.ctx->alloc_count + n;
    rg_status st = step(&r, 16, 1, &dummy, NULL), e = rg_error(r.ctx);
    done = r.ctx->alloc_count < r.ctx->alloc_fail_at;
    r.ctx->alloc_fail_at = 0;
    CHECK(done ? st == RG_OK && e == RG_OK
               : (st == RG_OK || st == RG_ERR_OOM) && (e == RG_OK || e == RG_ERR_OOM),
          "allocation %llu: %s, sticky %s: %s", (unsigned long long)n, rg_status_str(st),
          rg_status_str(e), rg_errmsg(r.ctx));
    rg_clear_error(r.ctx);
    points += !done;
    if (!done) {
      CHECK_ST(r.ctx, rg_zero_grad(r.ctx), RG_OK);
      CHECK_ST(r.ctx, step(&r, 16, 1, &dummy, NULL), RG_OK);
    }
    unbuild(&r);
  }
  CHECK(done && points > 10, "%d failure points, then a clean step (%d)", points, done);
  printf("dry gpt step: %d host allocations failed in turn, each RG_ERR_OOM and recovered\n",
         points);
}

static rg_tensor no_loss(rg_ctx *ctx, void *user) {
  (void)user;
  return rg_sum(ctx, rg_param_at(ctx, 0), RG_ALL_AXES, 0);
}

/* The calls that need values refuse a dry context, and change nothing. */
static void test_refused(void) {
  rg_ctx *ctx = open_dev(RG_DEVICE_CPU, 1, 0);
  if (!ctx) return;
  run r = build(ctx, 0);
  char file[64];
  snprintf(file, sizeof file, "rg_dry_%ld.safetensors", (long)getpid());
  CHECK_ST(ctx, rg_save(ctx, file, r.opt), RG_ERR_UNSUPPORTED);
  CHECK(msg_has(ctx, "rg_save") && msg_has(ctx, "dry"), "rg_save: %s", rg_errmsg(ctx));
  CHECK(access(file, F_OK) != 0, "a dry rg_save wrote %s", file);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_load(ctx, file, r.opt), RG_ERR_UNSUPPORTED);
  CHECK(msg_has(ctx, "rg_load") && msg_has(ctx, "dry"), "rg_load: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_dist_options d = {.world_size = 1};
  CHECK_ST(ctx, rg_dist_init(ctx, &d), RG_ERR_UNSUPPORTED);
  CHECK(rg_dist_world(ctx) == 1, "still one process");
  rg_clear_error(ctx);
  rg_gradcheck_result g;
  CHECK_ST(ctx, rg_gradcheck(ctx, no_loss, NULL, 1e-2, 4, &g), RG_ERR_UNSUPPORTED);
  rg_clear_error(ctx);
  size_t avail = 0, total = 0;
  CHECK_ST(ctx, rg_device_memory(ctx, &avail, &total), RG_OK);
  CHECK(avail > 0 && avail <= total, "a dry context answers for its device: %zu of %zu",
        avail, total);
  int32_t dummy = 0;
  CHECK_ST(ctx, step(&r, 8, 1, &dummy, NULL), RG_OK); /* and keeps working */
  unbuild(&r);
}

int main(void) {
  test_same(RG_DEVICE_CPU, 0);
  test_same(RG_DEVICE_CPU, 1);
  test_huge();
  test_budget();
  test_alloc_failures();
  test_refused();
  /* The device is chosen, and refused, as for a real context. */
  rg_ctx *real = NULL, *dry = NULL;
  rg_status sr = rg_open(&real, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  rg_status sd =
      rg_open(&dry, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1, .dry_run = 1});
  CHECK(sr == sd, "CUDA: real rg_open -> %s, dry -> %s", rg_status_str(sr), rg_status_str(sd));
  if (dry) {
    CHECK(rg_device_kind(dry) == RG_DEVICE_CUDA && strstr(rg_device_name(dry), "(dry run)"),
          "a dry CUDA context is \"%s\"", rg_device_name(dry));
  }
  rg_close(real);
  rg_close(dry);
  real = dry = NULL;
  rg_open(&real, &(rg_options){.quiet = 1});
  rg_open(&dry, &(rg_options){.quiet = 1, .dry_run = 1});
  CHECK(real && dry && rg_device_kind(real) == rg_device_kind(dry),
        "RG_DEVICE_AUTO chooses alike");
  rg_close(real);
  rg_close(dry);
  if (sr == RG_OK) {
    test_same(RG_DEVICE_CUDA, 0);
    test_same(RG_DEVICE_CUDA, 1);
  } else {
    printf("cuda: no usable GPU (%s), CUDA half not run\n", rg_status_str(sr));
  }
  return finish();
}
