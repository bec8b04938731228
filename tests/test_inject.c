/*
 * test_inject.c - host allocation failures and pool budgets at every point of a training
 * step (forward, backward, AdamW, save).
 *
 * Allocation failures: the model is built, then the N-th host allocation from there on
 * fails, for N = 1, 2, ... until a whole step runs without reaching it (again with the
 * first layer an activation checkpoint region, recomputed by rg_backward). Each failure must
 * be RG_ERR_OOM, the context must keep working, and a retry (the step again if its drain
 * never ran, else only what failed) must leave weights, optimizer state and checkpoint
 * bit-identical to a run without failures. LeakSanitizer (make sanitize) checks that
 * nothing leaks.
 *
 * Budgets: a reference step records the pass-pool bytes after every call; the step is then
 * run with pass_budget set to each of those values, so the budget is hit at every
 * allocation in turn: RG_ERR_OOM before anything is allocated, parameters intact, and the
 * context still runs a step that fits.
 */
#include "common.h"
#include "core/internal.h"

#include <unistd.h>

#define B 16
#define D 12
#define H 24
#define K 5

static char path[256], refpath[256];

typedef struct model { rg_tensor w1, b1, w2; rg_optim *opt; } model;
static int regions; /* the first layer is an activation checkpoint region */

static void build(rg_ctx *c, model *m) {
  rg_init n = {RG_INIT_NORMAL, 0.3f, 0};
  m->w1 = rg_param(c, "w1", RG_F32, 2, (int64_t[]){H, D}, n);
  m->b1 = rg_param(c, "b1", RG_F32, 1, (int64_t[]){H}, (rg_init){0});
  m->w2 = rg_param(c, "w2", RG_F32, 2, (int64_t[]){K, H}, n);
  m->opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f, .weight_decay = 0.01f});
}

/* One step; *ran is 0 while its update is not recorded, 1 once it is (the next barrier
   runs it whatever fails after), 2 when its drain completed. The budget trace records
   pass_bytes after each call when trace != NULL. */
static rg_status step(rg_ctx *c, model *m, const char *file, int *ran, size_t *trace, int *nt) {
  float x[B * D];
  int32_t y[B];
  for (int i = 0; i < B * D; i++) x[i] = (float)((i * 29 % 17) / 8.0 - 1.0);
  for (int i = 0; i < B; i++) y[i] = i % K;
  rg_stats s;
#define T_                                                  \
  do {                                                      \
    if (trace) rg_stats_get(c, &s), trace[(*nt)++] = s.pass_bytes; \
  } while (0)
  *ran = 0;
  rg_status st = rg_step_begin(c);
  if (st != RG_OK) return st;
  rg_tensor xi = rg_input(c, RG_F32, 2, (int64_t[]){B, D}, x);
  T_;
  rg_tensor yi = rg_input(c, RG_I32, 1, (int64_t[]){B}, y);
  T_;
  if (regions && (st = rg_checkpoint_begin(c)) != RG_OK) return st;
  rg_tensor h = rg_linear(c, xi, m->w1, m->b1);
  T_;
  h = rg_gelu(c, h);
  T_;
  if (regions && (st = rg_checkpoint_end(c, h)) != RG_OK) return st;
  rg_tensor lo = rg_linear(c, h, m->w2, RG_NONE);
  T_;
  rg_tensor loss = rg_cross_entropy(c, lo, yi);
  T_;
  if ((st = rg_backward(c, loss)) != RG_OK) return st;
  T_;
  if ((st = rg_clip_grad_norm(c, 1.0f)) != RG_OK) return st;
  T_;
  if ((st = rg_optim_step(m->opt)) != RG_OK) return st;
  *ran = 1;
  T_;
  if ((st = rg_zero_grad(c)) != RG_OK) return st;
  T_;
  float l;
  if ((st = rg_item(c, loss, &l)) != RG_OK) return rg_error(c) != RG_OK ? rg_error(c) : st;
  *ran = 2;
  return file ? rg_save(c, file, m->opt) : RG_OK;
#undef T_
}

static void weights(rg_ctx *c, model *m, float *out) {
  rg_read(c, m->w1, out, H * D * 4);
  rg_read(c, m->b1, out + H * D, H * 4);
  rg_read(c, m->w2, out + H * D + H, K * H * 4);
}
#define NW (H * D + H + K * H)

static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  unsigned char *d = malloc(*n ? *n : 1);
  if (d && fread(d, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return d;
}

/* The tensors of two checkpoints (the data after the header) are identical. The headers
   may differ in the metadata's step count: a retried step is one more rg_step_begin. */
static int same_data(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
  uint64_t ha = 0, hb = 0;
  if (na < 8 || nb < 8) return 0;
  for (int i = 0; i < 8; i++) ha |= (uint64_t)a[i] << (8 * i), hb |= (uint64_t)b[i] << (8 * i);
  if (ha > na - 8 || hb > nb - 8 || na - 8 - ha != nb - 8 - hb) return 0;
  return !memcmp(a + 8 + ha, b + 8 + hb, na - 8 - ha);
}

static void test_alloc_failures(void) {
  float ref[NW], got[NW];
  int ran;
  {
    rg_ctx *c = open_cpu();
    model m;
    build(c, &m);
    CHECK_ST(c, step(c, &m, refpath, &ran, NULL, NULL), RG_OK);
    weights(c, &m, ref);
    rg_optim_free(m.opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  size_t nref = 0;
  unsigned char *fref = slurp(refpath, &nref);
  int points = 0, done = 0, fails0 = test_failures_;
  for (uint64_t n = 1; n < 20000 && !done && test_failures_ - fails0 < 5; n++) {
    rg_ctx *c = open_cpu();
    model m;
    build(c, &m);
    c->alloc_fail_at = c->alloc_count + n;
    rg_status st = step(c, &m, path, &ran, NULL, NULL);
    int hit = c->alloc_count >= c->alloc_fail_at;
    c->alloc_fail_at = 0;
    if (!hit) {
      done = 1;
      CHECK_ST(c, st, RG_OK);
    } else {
      points++;
      rg_status e = rg_error(c);
      CHECK(st == RG_ERR_OOM || (st == RG_OK && e == RG_OK), "allocation %llu: %s, sticky %s: %s",
            (unsigned long long)n, rg_status_str(st), rg_status_str(e), rg_errmsg(c));
      rg_clear_error(c);
      /* Retry: the whole step if its update never ran, else just the save. A failure
         after rg_backward succeeded (in the clip, say) leaves its gradients queued, so
         they are zeroed first, as a caller redoing the step's backward pass must. */
      if (!ran) {
        CHECK_ST(c, rg_zero_grad(c), RG_OK);
        CHECK_ST(c, step(c, &m, path, &ran, NULL, NULL), RG_OK);
      }
      else CHECK_ST(c, rg_save(c, path, m.opt), RG_OK);
    }
    weights(c, &m, got);
    CHECK(!memcmp(got, ref, sizeof ref), "allocation %llu: weights differ from a run without "
          "failures", (unsigned long long)n);
    size_t nf = 0;
    unsigned char *f = slurp(path, &nf);
    CHECK(f && fref && same_data(f, nf, fref, nref), "allocation %llu: the checkpoint's "
          "tensors differ from a run without failures", (unsigned long long)n);
    free(f);
    rg_optim_free(m.opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  free(fref);
  CHECK(done && points > 20, "%d failure points, then a clean step (%d)", points, done);
  printf("allocation failures%s: %d points in forward, backward, AdamW and save; each gave "
         "RG_ERR_OOM and a bit-identical retry\n", regions ? " (a checkpoint region)" : "",
         points);
}

static void test_budgets(void) {
  size_t trace[64];
  int nt = 0, ran;
  {
    rg_ctx *c = open_cpu();
    model m;
    build(c, &m);
    CHECK_ST(c, step(c, &m, NULL, &ran, trace, &nt), RG_OK);
    rg_optim_free(m.opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  int hits = 0;
  for (int i = 0; i < nt; i++) {
    if (i && trace[i] == trace[i - 1]) continue; /* this call allocated nothing */
    size_t budget = i ? trace[i - 1] : 1;        /* the call that allocates trace[i] fails */
    rg_ctx *c = open_cpu_opts((rg_options){.pass_budget = budget});
    model m;
    build(c, &m);
    float before[NW], after[NW];
    weights(c, &m, before);
    rg_stats s0, s1;
    rg_stats_get(c, &s0);
    rg_status st = step(c, &m, NULL, &ran, NULL, NULL);
    rg_stats_get(c, &s1);
    CHECK(st == RG_ERR_OOM && !ran, "budget %zu (call %d): %s", budget, i, rg_status_str(st));
    CHECK(msg_has(c, "pass_budget"), "budget %zu: the message says what to raise: %s", budget,
          rg_errmsg(c));
    CHECK(s1.pass_bytes <= budget, "budget %zu: %zu bytes held", budget, s1.pass_bytes);
    rg_clear_error(c);
    weights(c, &m, after);
    CHECK(!memcmp(before, after, sizeof before), "budget %zu: parameters changed", budget);
    /* Still usable: a step that fits the budget runs. */
    CHECK_ST(c, rg_step_begin(c), RG_OK);
    float one = 1, v = 0;
    if (budget >= 256)
      CHECK(rg_item(c, rg_input(c, RG_F32, 0, NULL, &one), &v) == RG_OK && v == 1,
            "budget %zu: a small step still runs", budget);
    hits++;
    rg_optim_free(m.opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  printf("pool budgets: hit at %d allocation points of a step; each RG_ERR_OOM with nothing "
         "lost\n", hits);
  CHECK(hits >= 6, "budgets were hit at %d points", hits);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/rg_inject_%ld.st", tmp ? tmp : "/tmp", (long)getpid());
  snprintf(refpath, sizeof refpath, "%s/rg_inject_ref_%ld.st", tmp ? tmp : "/tmp", (long)getpid());
  test_alloc_failures();
  regions = 1;
  test_alloc_failures();
  regions = 0;
  test_budgets();
  unlink(path);
  unlink(refpath);
  return finish();
}
