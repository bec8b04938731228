/*
 * test_threads.c - the concurrency contract of resgrad.h: two contexts are independent and
 * may be used from two threads at once.
 *
 * What is checked: NJOBS jobs, each training its own MLP (32-128-128-10, GELU, dropout,
 * AdamW with clipping) in its own CPU context for a few steps from its own seed, then
 * saving and reloading a checkpoint, give bit-identical losses and weights when run one
 * after another and when run all at once in NJOBS threads (started together behind a
 * barrier, twice over). Sizes are above the kernels' parallel thresholds and each context
 * asks for 2 threads, so concurrent contexts also run their own thread pools and BLAS
 * calls. (One thread count for all: OpenBLAS's is process-wide and, on some CPUs, its
 * products depend on it; this test is about concurrency, not thread counts.) Different
 * seeds must give different runs (the comparison means something), and the loss must
 * fall. Workers record results only; the main thread checks them (CHECK's counter is not
 * shared across threads). `make tsan` runs this under ThreadSanitizer. Exits non-zero on
 * any failure.
 */
#include "common.h"

#include <math.h>
#include <pthread.h>

enum { NJOBS = 4, STEPS = 4, BATCH = 256, IN = 32, HID = 128, OUT = 10, NPARAM = 6 };

typedef struct job {
  uint64_t seed;
  int threads;
  float loss[STEPS];
  float x[BATCH * IN]; /* this job's batch */
  int32_t y[BATCH];
  float *w;  /* every parameter after training, concatenated, as reloaded */
  size_t nw; /* floats in w */
  rg_status st;
  char msg[512];
} job;

static pthread_barrier_t start;
static int use_barrier;

/* Data for a job: a host LCG keyed by the seed, so each job has its own batches. */
static void batch(uint64_t seed, int step, float *x, int32_t *y) {
  uint64_t s = seed * 0x9e3779b97f4a7c15u + (uint64_t)step;
  for (int i = 0; i < BATCH * IN; i++) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    x[i] = (float)((s >> 40) / 16777216.0 * 2.0 - 1.0);
  }
  for (int i = 0; i < BATCH; i++) {
    float v = 0;
    for (int j = 0; j < IN; j++) v += x[i * IN + j] * (float)(j % 3 - 1);
    y[i] = (int32_t)((v > 0 ? v * 4 : -v * 4)) % OUT;
  }
}

static int fail(job *j, rg_ctx *ctx, const char *what) {
  j->st = ctx ? rg_error(ctx) : RG_ERR_OOM;
  if (j->st == RG_OK) j->st = RG_ERR_MISUSE;
  snprintf(j->msg, sizeof j->msg, "%s: %s", what, ctx ? rg_errmsg(ctx) : "no context");
  return 1;
}

static int train(job *j, rg_ctx *ctx) {
  static const int64_t shapes[NPARAM][2] = {{HID, IN}, {HID, 1}, {HID, HID}, {HID, 1},
                                            {OUT, HID}, {OUT, 1}};
  rg_tensor p[NPARAM];
  for (int i = 0; i < NPARAM; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    int bias = shapes[i][1] == 1;
    p[i] = rg_param(ctx, name, RG_F32, bias ? 1 : 2, shapes[i],
                    (rg_init){RG_INIT_NORMAL, bias ? 0.01f : 0.1f, 0});
  }
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 3e-3f, .weight_decay = 0.01f});
  if (!opt) return fail(j, ctx, "setup");
  for (int s = 0; s < STEPS; s++) {
    batch(j->seed, s, j->x, j->y);
    rg_step_begin(ctx);
    rg_label_push(ctx, "mlp");
    rg_tensor in = rg_input(ctx, RG_F32, 2, (int64_t[]){BATCH, IN}, j->x);
    rg_tensor h = rg_gelu(ctx, rg_linear(ctx, in, p[0], p[1]));
    h = rg_dropout(ctx, rg_gelu(ctx, rg_linear(ctx, h, p[2], p[3])), 0.1f);
    rg_tensor loss = rg_cross_entropy(ctx, rg_linear(ctx, h, p[4], p[5]),
                                      rg_input(ctx, RG_I32, 1, (int64_t[]){BATCH}, j->y));
    rg_label_pop(ctx);
    rg_backward(ctx, loss);
    rg_clip_grad_norm(ctx, 1.0f);
    rg_optim_step(opt);
    rg_zero_grad(ctx);
    if (rg_item(ctx, loss, &j->loss[s]) != RG_OK) return fail(j, ctx, "step");
  }
  /* A checkpoint round trip, each job its own file: load restores exactly what was saved. */
  char path[64];
  snprintf(path, sizeof path, "threads-%llu.safetensors", (unsigned long long)j->seed);
  if (rg_save(ctx, path, opt) != RG_OK || rg_load(ctx, path, opt) != RG_OK)
    return fail(j, ctx, "checkpoint");
  remove(path);
  size_t off = 0;
  for (int i = 0; i < NPARAM; i++) {
    size_t n = (size_t)rg_numel(ctx, p[i]);
    if (rg_read(ctx, p[i], j->w + off, n * sizeof(float)) != RG_OK) return fail(j, ctx, "read");
    off += n;
  }
  rg_optim_free(opt);
  return 0;
}

static void *run_job(void *arg) {
  job *j = arg;
  if (use_barrier) pthread_barrier_wait(&start);
  rg_ctx *ctx = NULL;
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .seed = j->seed, .threads = j->threads};
  j->st = rg_open(&ctx, &o);
  if (j->st != RG_OK) {
    snprintf(j->msg, sizeof j->msg, "rg_open: %s", rg_status_str(j->st));
    return NULL;
  }
  if (!train(j, ctx)) j->st = RG_OK;
  rg_status c = rg_close(ctx);
  if (j->st == RG_OK && c != RG_OK) {
    j->st = c;
    snprintf(j->msg, sizeof j->msg, "rg_close: %s", rg_status_str(c));
  }
  return NULL;
}

static void init_jobs(job *jobs, float *w, size_t nw) {
  for (int i = 0; i < NJOBS; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].seed = 1000 + (uint64_t)i;
    jobs[i].threads = 2;
    jobs[i].w = w + (size_t)i * nw;
    jobs[i].nw = nw;
    jobs[i].st = RG_ERR_MISUSE;
    snprintf(jobs[i].msg, sizeof jobs[i].msg, "did not run");
  }
}

static int jobs_ok(const job *jobs, const char *how) {
  int ok = 1;
  for (int i = 0; i < NJOBS; i++) {
    CHECK(jobs[i].st == RG_OK, "%s, job %d: %s (%s)", how, i, rg_status_str(jobs[i].st),
          jobs[i].msg);
    ok &= jobs[i].st == RG_OK;
  }
  return ok;
}

int main(void) {
  const size_t nw = (size_t)HID * IN + HID + (size_t)HID * HID + HID + (size_t)OUT * HID + OUT;
  float *wseq = calloc(NJOBS * nw, sizeof(float)), *wpar = calloc(NJOBS * nw, sizeof(float));
  if (!wseq || !wpar) {
    fprintf(stderr, "test_threads: out of memory\n");
    return 1;
  }
  static job seq[NJOBS], par[NJOBS];

  init_jobs(seq, wseq, nw);
  for (int i = 0; i < NJOBS; i++) run_job(&seq[i]);
  if (!jobs_ok(seq, "sequential")) return finish();
  for (int i = 0; i < NJOBS; i++) {
    printf("job %d (seed %llu, %d threads): loss %.4f -> %.4f\n", i,
           (unsigned long long)seq[i].seed, seq[i].threads, seq[i].loss[0],
           seq[i].loss[STEPS - 1]);
    CHECK(isfinite(seq[i].loss[0]) && seq[i].loss[STEPS - 1] < seq[i].loss[0],
          "job %d: the loss does not fall (%g -> %g)", i, seq[i].loss[0], seq[i].loss[STEPS - 1]);
    for (int k = 0; k < i; k++)
      CHECK(memcmp(seq[i].loss, seq[k].loss, sizeof seq[i].loss) != 0,
            "jobs %d and %d have different seeds but the same losses", k, i);
  }

  use_barrier = 1;
  for (int round = 0; round < 2; round++) {
    init_jobs(par, wpar, nw);
    memset(wpar, 0xff, NJOBS * nw * sizeof(float));
    pthread_t t[NJOBS];
    int started = 0;
    if (pthread_barrier_init(&start, NULL, NJOBS) != 0) {
      CHECK(0, "pthread_barrier_init failed");
      break;
    }
    for (int i = 0; i < NJOBS; i++) started += pthread_create(&t[i], NULL, run_job, &par[i]) == 0;
    CHECK(started == NJOBS, "started %d of %d threads", started, NJOBS);
    if (started != NJOBS) return finish(); /* the others wait at the barrier forever */
    for (int i = 0; i < NJOBS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    if (!jobs_ok(par, "concurrent")) break;
    for (int i = 0; i < NJOBS; i++) {
      CHECK(!memcmp(seq[i].loss, par[i].loss, sizeof seq[i].loss),
            "round %d, job %d: concurrent losses differ from sequential ones (last %.9g vs "
            "%.9g)", round, i, par[i].loss[STEPS - 1], seq[i].loss[STEPS - 1]);
      CHECK(!memcmp(seq[i].w, par[i].w, nw * sizeof(float)),
            "round %d, job %d: concurrent weights differ from sequential ones", round, i);
    }
  }
  if (!failed())
    printf("%d contexts in %d threads, twice: losses and %zu weights each bit-identical to "
           "sequential runs\n", NJOBS, NJOBS, nw);
  free(wseq);
  free(wpar);
  return finish();
}
