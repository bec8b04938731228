/*
 * workloads.c - the PyTorch reference workloads (torch_ref.py), run by
 * resgrad: same shapes, same model structure, AdamW (lr 1e-3, weight decay 0.01), one
 * 4-byte read of the loss per step. As in torch_ref.py the batch is made once and stays
 * on the device (rg_constant); --upload uploads it every step instead (rg_input), as a
 * training loop over a host-side dataset does.
 *
 * usage:  workloads [--device auto|cpu|cuda] [--mode f32|tf32|bf16] [--upload]
 *                   [--distributed] [--tune] [--checkpoint] [--head-chunk N] [--max-batch]
 *                   [--dry-run]
 *                   [--steps N] [--warm N] [--mlp A,B,...] [--gpt V,T,L,C,H] [--batch N]
 *                   [workload ...]
 *         workloads: mlp-small mlp-wide gpt-char gpt2-124m (default: mlp-small gpt-char),
 *         or a shape as torch_ref.py writes it: mlp=784x256x10/b64 (layer widths, then
 *         the batch) or gpt=96x128x4x256x4/b32 (vocabulary, block, layers, width, heads,
 *         then the batch). --mlp 784,256,10 and --gpt 96,128,4,256,4 say the same with
 *         the batch from --batch (default 64 for an MLP, 32 for a GPT); the output names
 *         such a workload by its mlp=/gpt= form, as torch_ref.py does, so the two match.
 *         modes: f32 (default); tf32 (rg_options.tf32); bf16 (rg_options.bf16: matrix
 *         products in bf16 with f32 accumulation, as torch.autocast, and tf32 on for any
 *         other float32 product, as torch_ref.py's bf16 modes)
 * output: one JSON line per workload: ms/step median and min over N timed steps after
 *         the warm-up, TFLOP/s (torch_ref.py's formula), peak memory in live tensors
 *         (peak_mib, as PyTorch's max_memory_allocated) and held by the pools' arenas
 *         (device_mib, as its max_memory_reserved), host<->device
 *         bytes per step, nodes per step (kernels, each a node of the step's graph),
 *         launches per step (1 once the graph replays), graph replays, the first loss.
 * --distributed: one rank of a data-parallel run started by resgrad-run (rg_dist_init
 *         after the model is built; on GPUs one rank per GPU, gradients averaged with
 *         NCCL). Each rank trains on the workload's batch (weak scaling: N ranks process
 *         N times the rows of one), all on the same rows, which changes no timing. Rank
 *         0 alone prints; "world" is the number of ranks. Scaling efficiency on N GPUs
 *         is ms_median of the plain run on one GPU / ms_median of the N-rank run.
 * --tune:   rg_options.gemm_tune (cuBLASLt's algorithms timed at the first step; "tune"
 *         in the output says it was on).
 * --checkpoint: the GPT workloads with each block an activation checkpoint region
 *         (rg_gpt_config.checkpoint): compare peak_mib and ms_median with a run without.
 *         The MLPs have no blocks: it changes nothing there. "checkpoint" in the output.
 * --head-chunk N: the GPT workloads' rg_gpt_config.head_chunk (0, the default: the
 *         library's; -1: the loss's head never in chunks). "head_chunk" in the output.
 * --dry-run: rg_options.dry_run: the steps are recorded and the pools count their bytes
 *         as the device's would (peak_mib exact), but nothing runs, so the times and
 *         losses mean nothing. --device cpu records the same tensors as a GPU, so it
 *         gives a GPU's peak_mib on any machine. Not with --max-batch (a dry run has no
 *         memory to run out of).
 * --batch N: N rows (MLP) or sequences (GPT) a step instead of the workload's own (and
 *         the batch of --mlp and --gpt).
 * --max-batch: instead of timing, the largest batch that trains (a step runs without
 *         an error, out of memory being the one expected) on this device, found by
 *         doubling from the workload's batch and then bisecting; one JSON line each.
 */
#include <resgrad.h>
#include <resgrad_nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timing.h"

#define MAX_LAYERS 16 /* linear layers of an MLP workload */

typedef struct work {
  const char *name;
  int gpt;
  int64_t dims[MAX_LAYERS + 1], ndims, B; /* mlp: widths, input first; batch */
  int64_t V, T, L, C, H;          /* gpt */
} work;

static const work WORK[] = {
    {"mlp-small", 0, {784, 256, 256, 10}, 4, 64, 0, 0, 0, 0, 0},
    {"mlp-wide", 0, {1024, 4096, 4096, 4096, 10}, 5, 2048, 0, 0, 0, 0, 0},
    {"gpt-char", 1, {0}, 0, 32, 96, 128, 4, 256, 4},
    {"gpt2-124m", 1, {0}, 0, 8, 50304, 1024, 12, 768, 12},
};


/* As torch_ref.py, the batch is made once and stays on the device (rg_constant);
   --upload makes every step upload it with rg_input instead. */
static int upload, distributed, tune, checkpoint;
static long long head_chunk;
static int dry;

typedef struct model {
  const work *w;
  rg_tensor bx, by; /* the resident batch */
  rg_tensor wt[MAX_LAYERS], bs[MAX_LAYERS];
  rg_gpt *gpt;
  float *x;
  int32_t *xi, *y;
} model;

static int build(rg_ctx *ctx, model *m) {
  const work *w = m->w;
  uint64_t r = 12345;
  if (!w->gpt) {
    for (int i = 0; i + 1 < w->ndims; i++) {
      char name[32];
      float bound = 1.0f / sqrtf((float)w->dims[i]); /* PyTorch's nn.Linear default */
      rg_init u = {RG_INIT_UNIFORM, -bound, bound};
      snprintf(name, sizeof name, "ls.%d.weight", i);
      m->wt[i] = rg_param(ctx, name, RG_F32, 2, (int64_t[]){w->dims[i + 1], w->dims[i]}, u);
      snprintf(name, sizeof name, "ls.%d.bias", i);
      m->bs[i] = rg_param(ctx, name, RG_F32, 1, &w->dims[i + 1], u);
    }
    int64_t n = w->B * w->dims[0];
    m->x = malloc(sizeof(float) * (size_t)n);
    m->y = malloc(sizeof(int32_t) * (size_t)w->B);
    for (int64_t i = 0; i < n; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      m->x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
    }
    for (int64_t i = 0; i < w->B; i++) m->y[i] = (int32_t)((r >> 33) % (uint64_t)w->dims[w->ndims - 1]), r = r * 6364136223846793005ull + 1;
    if (!upload) {
      m->bx = rg_constant(ctx, RG_F32, 2, (int64_t[]){w->B, w->dims[0]}, m->x);
      m->by = rg_constant(ctx, RG_I32, 1, &w->B, m->y);
    }
    return rg_error(ctx) == RG_OK;
  }
  rg_gpt_config cfg = {.vocab = w->V, .block = w->T, .layers = w->L, .width = w->C, .heads = w->H,
                       .checkpoint = checkpoint, .head_chunk = head_chunk};
  m->gpt = rg_gpt_new(ctx, &cfg, NULL);
  int64_t n = w->B * w->T;
  m->xi = malloc(sizeof(int32_t) * (size_t)n);
  m->y = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    m->xi[i] = (int32_t)((r >> 33) % (uint64_t)w->V);
    m->y[i] = (int32_t)((r >> 13) % (uint64_t)w->V);
  }
  if (!upload) {
    m->bx = rg_constant(ctx, RG_I32, 2, (int64_t[]){w->B, w->T}, m->xi);
    m->by = rg_constant(ctx, RG_I32, 2, (int64_t[]){w->B, w->T}, m->y);
  }
  return m->gpt != NULL && rg_error(ctx) == RG_OK;
}

static rg_tensor loss_of(rg_ctx *ctx, model *m) {
  const work *w = m->w;
  if (w->gpt) {
    rg_tensor x = upload ? rg_input(ctx, RG_I32, 2, (int64_t[]){w->B, w->T}, m->xi) : m->bx;
    rg_tensor y = upload ? rg_input(ctx, RG_I32, 2, (int64_t[]){w->B, w->T}, m->y) : m->by;
    return rg_gpt_loss(m->gpt, x, y);
  }
  rg_tensor h = upload ? rg_input(ctx, RG_F32, 2, (int64_t[]){w->B, w->dims[0]}, m->x) : m->bx;
  for (int i = 0; i + 1 < w->ndims; i++) /* ReLU after every layer but the last */
    h = rg_linear_act(ctx, h, m->wt[i], m->bs[i], i + 2 < w->ndims ? RG_ACT_RELU : RG_ACT_NONE);
  return rg_cross_entropy(ctx, h, upload ? rg_input(ctx, RG_I32, 1, &w->B, m->y) : m->by);
}

static double flops_of(rg_ctx *ctx, const work *w) {
  if (!w->gpt) {
    double f = 0;
    for (int i = 0; i + 1 < w->ndims; i++) f += (double)w->dims[i] * (double)w->dims[i + 1];
    return 6.0 * (double)w->B * f;
  }
  double n = 0;
  for (int i = 0; i < rg_param_count(ctx); i++) n += (double)rg_numel(ctx, rg_param_at(ctx, i));
  return 6.0 * n * (double)(w->B * w->T) +
         12.0 * (double)(w->L * w->C) * (double)(w->T * w->T) * (double)w->B / 2;
}

enum { F32, TF32, BF16 };
static const char *const MODES[] = {"f32", "tf32", "bf16"};

static int mode_of(const char *name) {
  for (int m = F32; m <= BF16; m++)
    if (!strcmp(name, MODES[m])) return m;
  return -1;
}

/* Trains w for warm + steps steps and prints its line (quiet: prints nothing, not even
   a failure). 0 when every step ran, else 1 (out of memory among the causes). */
static int run(const work *w, rg_device dev, int mode, int steps, int warm, int quiet) {
  rg_ctx *ctx = NULL;
  rg_status st = rg_open(&ctx, &(rg_options){.device = dev, .quiet = 1, .tf32 = mode != F32,
                                             .bf16 = mode == BF16, .gemm_tune = tune,
                                             .dry_run = dry});
  if (st != RG_OK) {
    fprintf(stderr, "workloads: rg_open: %s\n", rg_status_str(st));
    return 1;
  }
  model m = {.w = w};
  rg_optim *opt = NULL;
  double *ts = calloc((size_t)steps, sizeof *ts), *tr = calloc((size_t)steps, sizeof *tr);
  float loss0 = NAN, l = 0;
  rg_stats s0, s1;
  if (!build(ctx, &m) || !(opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 1e-3f, .weight_decay = 0.01f})))
    goto fail;
  if (distributed && rg_dist_init(ctx, NULL) != RG_OK) goto fail;
  for (int i = 0; i < warm + steps; i++) {
    if (i == warm) rg_stats_get(ctx, &s0);
    double t = now_s();
    rg_step_begin(ctx);
    rg_tensor loss = loss_of(ctx, &m);
    rg_backward(ctx, loss);
    rg_optim_step(opt);
    rg_zero_grad(ctx);
    double tr0 = now_s(); /* recording ends here: the rest is the drain and the read */
    if (rg_item(ctx, loss, &l) != RG_OK || rg_error(ctx) != RG_OK) goto fail;
    if (i == 0) loss0 = l;
    if (i >= warm) ts[i - warm] = now_s() - t, tr[i - warm] = tr0 - t;
  }
  rg_stats_get(ctx, &s1);
  qsort(ts, (size_t)steps, sizeof *ts, cmp_d);
  qsort(tr, (size_t)steps, sizeof *tr, cmp_d);
  double med = ts[steps / 2];
  if (!quiet && rg_dist_rank(ctx) == 0) { /* the other ranks' steps end with its all-reduces */
    printf("{\"work\":\"%s\",\"mode\":\"%s\",\"input\":\"%s\",\"dev\":\"%s\",\"ms_median\":%.4f,"
           "\"ms_min\":%.4f,"
           "\"record_ms_median\":%.4f,\"tflops\":%.3f,\"peak_mib\":%.1f,\"device_mib\":%.1f,"
           "\"up_bytes_per_step\":%.0f,"
           "\"down_bytes_per_step\":%.0f,\"nodes_per_step\":%.1f,\"launches_per_step\":%.1f,"
           "\"graph_replays\":%llu,"
           "\"steps\":%d,\"loss0\":%.4f,\"loss_last\":%.4f,\"world\":%d,\"tune\":%d,"
           "\"checkpoint\":%d,\"head_chunk\":%lld,\"batch\":%lld}\n",
           w->name, MODES[mode], upload ? "upload" : "resident", rg_device_name(ctx), med * 1e3, ts[0] * 1e3, tr[steps / 2] * 1e3, flops_of(ctx, w) / med / 1e12,
           (double)(s1.pass_peak + s1.persistent_peak) / 1048576.0,
           (double)s1.device_peak / 1048576.0,
           (double)(s1.up.bytes - s0.up.bytes) / steps, (double)(s1.down.bytes - s0.down.bytes) / steps,
           (double)(s1.nodes_executed - s0.nodes_executed) / steps,
           (double)(s1.launches - s0.launches) / steps,
           (unsigned long long)(s1.graph_replays - s0.graph_replays), steps, loss0, l,
           rg_dist_world(ctx), tune, checkpoint, head_chunk, (long long)w->B);
  }
  fflush(stdout);
  rg_optim_free(opt);
  rg_gpt_free(m.gpt);
  free(m.x), free(m.xi), free(m.y), free(ts), free(tr);
  return rg_close(ctx) != RG_OK;
fail:
  if (!quiet) fprintf(stderr, "workloads: %s: %s\n", w->name, rg_errmsg(ctx));
  rg_optim_free(opt);
  rg_gpt_free(m.gpt);
  free(m.x), free(m.xi), free(m.y), free(ts), free(tr);
  rg_close(ctx);
  return 1;
}

/* A workload from its mlp=AxBx.../bN or gpt=VxTxLxCxH/bN form into *w (named by the
   string itself, which must outlive it); 0 if s is not one. */
static int parse_shape(const char *s, work *w) {
  int gpt = !strncmp(s, "gpt=", 4);
  if (!gpt && strncmp(s, "mlp=", 4)) return 0;
  int64_t v[MAX_LAYERS + 1];
  int n = 0;
  const char *p = s + 4;
  for (;;) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x < 1 || n == MAX_LAYERS + 1) return 0;
    v[n++] = x;
    if (*end == 'x') p = end + 1;
    else if (!strncmp(end, "/b", 2)) { p = end + 2; break; }
    else return 0;
  }
  char *end;
  long long b = strtoll(p, &end, 10);
  if (*end || end == p || b < 1 || (gpt ? n != 5 : n < 2)) return 0;
  memset(w, 0, sizeof *w);
  w->name = s, w->gpt = gpt, w->B = b;
  if (gpt) w->V = v[0], w->T = v[1], w->L = v[2], w->C = v[3], w->H = v[4];
  else memcpy(w->dims, v, sizeof(int64_t) * (size_t)n), w->ndims = n;
  return 1;
}

/* "784,256,10" and a batch as "mlp=784x256x10/b64" (kind "mlp" or "gpt") into buf. */
static const char *shape_name(char *buf, size_t cap, const char *kind, const char *dims,
                              long batch) {
  int n = snprintf(buf, cap, "%s=", kind);
  for (const char *c = dims; *c && n + 2 < (int)cap; c++) buf[n++] = *c == ',' ? 'x' : *c;
  snprintf(buf + n, cap - (size_t)n, "/b%ld", batch);
  return buf;
}

/* --max-batch: the largest batch of w that trains on dev (run's two steps succeed). */
static int max_batch(const work *w, rg_device dev, int mode) {
  work t = *w;
  int64_t ok = 0, bad = 0; /* the largest that fit, the smallest that did not (0: none) */
  for (t.B = w->B; !bad && t.B <= ((int64_t)1 << 20); t.B *= 2)
    *(run(&t, dev, mode, 1, 1, 1) ? &bad : &ok) = t.B;
  if (!ok) /* not even the workload's own: bisect below it */
    for (t.B = w->B / 2; !ok && t.B >= 1; t.B /= 2)
      *(run(&t, dev, mode, 1, 1, 1) ? &bad : &ok) = t.B;
  while (ok && bad > ok + 1) {
    t.B = ok + (bad - ok) / 2;
    *(run(&t, dev, mode, 1, 1, 1) ? &bad : &ok) = t.B;
  }
  printf("{\"work\":\"%s\",\"mode\":\"%s\",\"checkpoint\":%d,\"head_chunk\":%lld,"
         "\"max_batch\":%lld}\n", w->name, MODES[mode], checkpoint, head_chunk, (long long)ok);
  fflush(stdout);
  return ok == 0;
}

int main(int argc, char **argv) {
  rg_device dev = RG_DEVICE_AUTO;
  int steps = 20, warm = 3, nnames = 0, rc = 0, mode = F32, search = 0;
  long long batch = 0;
  const char *names[8], *mlp = NULL, *gpt = NULL;
  char mlp_name[160], gpt_name[160];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const char *d = argv[++i];
      dev = !strcmp(d, "cpu") ? RG_DEVICE_CPU : !strcmp(d, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
    } else if (!strcmp(argv[i], "--mode") && i + 1 < argc && mode_of(argv[i + 1]) >= 0) {
      mode = mode_of(argv[++i]);
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--upload")) {
      upload = 1;
    } else if (!strcmp(argv[i], "--distributed")) {
      distributed = 1;
    } else if (!strcmp(argv[i], "--tune")) {
      tune = 1;
    } else if (!strcmp(argv[i], "--checkpoint")) {
      checkpoint = 1;
    } else if (!strcmp(argv[i], "--head-chunk") && i + 1 < argc) {
      head_chunk = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--dry-run")) {
      dry = 1;
    } else if (!strcmp(argv[i], "--batch") && i + 1 < argc && atoll(argv[i + 1]) > 0) {
      batch = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--max-batch")) {
      search = 1;
    } else if (!strcmp(argv[i], "--warm") && i + 1 < argc) {
      warm = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--mlp") && i + 1 < argc) {
      mlp = argv[++i];
    } else if (!strcmp(argv[i], "--gpt") && i + 1 < argc) {
      gpt = argv[++i];
    } else if (argv[i][0] != '-' && nnames < 8) {
      names[nnames++] = argv[i];
    } else {
      fprintf(stderr, "usage: workloads [--device auto|cpu|cuda] [--mode f32|tf32|bf16] [--upload] [--distributed] [--tune] "
              "[--checkpoint] [--head-chunk N] [--max-batch] [--dry-run] [--steps N] [--warm N] "
              "[--mlp A,B,... | --gpt V,T,L,C,H] [--batch N] "
              "[mlp-small|mlp-wide|gpt-char|gpt2-124m|mlp=AxB.../bN|gpt=VxTxLxCxH/bN ...]\n");
      return 2;
    }
  }
  if (steps < 1) steps = 1;
  if (dry && search) {
    fprintf(stderr, "workloads: --dry-run with --max-batch: a dry run has no memory to run "
            "out of; measure peak_mib with --dry-run and --batch N instead\n");
    return 2;
  }
  if (mlp && nnames < 8)
    names[nnames++] = shape_name(mlp_name, sizeof mlp_name, "mlp", mlp, batch ? (long)batch : 64);
  if (gpt && nnames < 8)
    names[nnames++] = shape_name(gpt_name, sizeof gpt_name, "gpt", gpt, batch ? (long)batch : 32);
  if (!nnames) names[nnames++] = "mlp-small", names[nnames++] = "gpt-char";
  for (int i = 0; i < nnames; i++) {
    const work *w = NULL;
    work custom;
    for (size_t j = 0; j < sizeof WORK / sizeof *WORK; j++)
      if (!strcmp(WORK[j].name, names[i])) w = &WORK[j];
    if (!w && parse_shape(names[i], &custom)) w = &custom;
    if (!w) {
      fprintf(stderr, "workloads: unknown workload \"%s\": one of mlp-small, mlp-wide, "
              "gpt-char, gpt2-124m, or a shape mlp=784x256x10/b64, gpt=96x128x4x256x4/b32\n",
              names[i]);
      return 2;
    }
    if (w->gpt && (w->C % w->H || w->T < 1)) {
      fprintf(stderr, "workloads: %s: the width %lld is not a multiple of the heads %lld\n",
              w->name, (long long)w->C, (long long)w->H);
      return 2;
    }
    work t = *w;
    if (batch) t.B = batch;
    rc |= search ? max_batch(&t, dev, mode) : run(&t, dev, mode, steps, warm, 0);
  }
  return rc;
}
