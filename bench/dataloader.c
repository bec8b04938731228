/*
 * dataloader.c - a GPT training step fed by rg_data, with and without its prefetch
 * worker: what the worker's overlap of gathering batch n + 1 with step n is worth.
 *
 * The token file (written here unless --tokens names one: N tokens, uint16, llm.c's
 * format) is read in random batches. Each round opens a fresh handle (prefetch on or
 * off; the same seed, so the same batches) and times whole steps: rg_step_begin,
 * rg_data_batch, the loss, rg_backward, AdamW, rg_zero_grad and rg_item, the step's
 * barrier. It also times rg_data_batch alone: without prefetch that is the gather plus
 * the copy into the pass's staging; with it, the wait for the worker (if any) plus the
 * copy. Rounds alternate off, on, off, on, so an order effect shows as a gap between
 * rounds of one kind.
 *
 * The file is in the page cache (it was just written, or read before): this measures
 * the gather from memory. A corpus larger than memory, whose rows come from the disk,
 * is not modelled: posix_fadvise cannot drop pages that the handle's map holds.
 *
 * Before the rounds it checks that 20 batches read back equal with and without
 * prefetch ("batches_equal").
 *
 * usage:  dataloader [--device auto|cpu|cuda] [--bf16] [--steps N] [--warm N]
 *                    [--tokens FILE] [--ntok N] [gpt-char|gpt2-124m|gpt-tiny]
 * output: one JSON line per round, then one line of medians per kind.
 */
#define _POSIX_C_SOURCE 200809L
#include <resgrad.h>
#include <resgrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timing.h"
#include <unistd.h>

typedef struct work { const char *name; int64_t B, V, T, L, C, H; } work;
static const work WORK[] = {
    {"gpt-char", 32, 96, 128, 4, 256, 4},
    {"gpt2-124m", 8, 50304, 1024, 12, 768, 12},
    {"gpt-tiny", 8, 256, 64, 1, 32, 2}, /* for checking the program on a CPU */
};


static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[n / 2];
}

/* N tokens below V in llm.c's format (a fixed generator: the same file every run). */
static int write_tokens(const char *path, int64_t n, int64_t V) {
  FILE *f = fopen(path, "wb");
  if (!f) return perror(path), 1;
  int32_t h[256] = {20240520, 1, (int32_t)n};
  fwrite(h, sizeof h, 1, f);
  uint16_t buf[4096];
  uint64_t r = 88172645463325252ull;
  for (int64_t i = 0; i < n;) {
    int k = 0;
    for (; k < 4096 && i < n; k++, i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      buf[k] = (uint16_t)(r % (uint64_t)V);
    }
    fwrite(buf, sizeof *buf, (size_t)k, f);
  }
  return fclose(f) ? (perror(path), 1) : 0;
}

/* 20 batches read back equal from a prefetching handle and a plain one. */
static int batches_equal(rg_ctx *ctx, const char *path, const work *w) {
  rg_data *a = rg_data_open(ctx, path, &(rg_data_options){.vocab = w->V, .seed = 1});
  rg_data *b = rg_data_open(ctx, path,
                            &(rg_data_options){.vocab = w->V, .seed = 1, .no_prefetch = 1});
  size_t n = (size_t)(w->B * w->T);
  int32_t *x = malloc(4 * n * sizeof *x);
  int eq = a && b && x;
  for (int i = 0; eq && i < 20; i++) {
    rg_step_begin(ctx);
    rg_tensor t[4];
    eq = rg_data_batch(a, w->B, w->T, 1, &t[0], &t[1]) == RG_OK &&
         rg_data_batch(b, w->B, w->T, 1, &t[2], &t[3]) == RG_OK;
    for (int k = 0; eq && k < 4; k++) eq = rg_read(ctx, t[k], x + k * n, n * sizeof *x) == RG_OK;
    eq = eq && !memcmp(x, x + 2 * n, 2 * n * sizeof *x);
  }
  rg_data_free(a);
  rg_data_free(b);
  free(x);
  return eq;
}

typedef struct round_result { double step_ms, batch_ms; float loss; } round_result;

static int run_round(rg_ctx *ctx, rg_gpt *gpt, rg_optim *opt, const char *path, const work *w,
                     int prefetch, int warm, int steps, round_result *out) {
  rg_data *d = rg_data_open(ctx, path, &(rg_data_options){.vocab = w->V, .seed = 1,
                                                            .no_prefetch = !prefetch});
  double *ts = calloc((size_t)steps, sizeof *ts), *tb = calloc((size_t)steps, sizeof *tb);
  int rc = !d || !ts || !tb;
  float l = 0;
  for (int i = 0; !rc && i < warm + steps; i++) {
    double t0 = now_s();
    rg_step_begin(ctx);
    rg_tensor x, y;
    double b0 = now_s();
    rg_status st = rg_data_batch(d, w->B, w->T, 1, &x, &y);
    double b1 = now_s();
    rg_tensor loss = rg_gpt_loss(gpt, x, y);
    if (st == RG_OK) st = rg_backward(ctx, loss);
    if (st == RG_OK) st = rg_optim_step(opt);
    if (st == RG_OK) st = rg_zero_grad(ctx);
    if (st == RG_OK) st = rg_item(ctx, loss, &l);
    double t1 = now_s();
    rc = st != RG_OK;
    if (i >= warm) ts[i - warm] = t1 - t0, tb[i - warm] = b1 - b0;
  }
  if (rc) fprintf(stderr, "dataloader: %s\n", rg_errmsg(ctx));
  if (!rc) *out = (round_result){median(ts, steps) * 1e3, median(tb, steps) * 1e3, l};
  rg_data_free(d);
  free(ts), free(tb);
  return rc;
}

int main(int argc, char **argv) {
  rg_device dev = RG_DEVICE_AUTO;
  int steps = 20, warm = 3, bf16 = 0;
  int64_t ntok = 1 << 22;
  const char *tokens = NULL;
  const work *w = &WORK[0];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--device") && i + 1 < argc) {
      const char *v = argv[++i];
      dev = !strcmp(v, "cpu") ? RG_DEVICE_CPU : !strcmp(v, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
    } else if (!strcmp(a, "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(a, "--warm") && i + 1 < argc) warm = atoi(argv[++i]);
    else if (!strcmp(a, "--ntok") && i + 1 < argc) ntok = atoll(argv[++i]);
    else if (!strcmp(a, "--tokens") && i + 1 < argc) tokens = argv[++i];
    else if (!strcmp(a, "--bf16")) bf16 = 1;
    else if (!strcmp(a, "gpt-char")) w = &WORK[0];
    else if (!strcmp(a, "gpt2-124m")) w = &WORK[1];
    else if (!strcmp(a, "gpt-tiny")) w = &WORK[2];
    else {
      fprintf(stderr, "usage: dataloader [--device auto|cpu|cuda] [--bf16] [--steps N] "
                      "[--warm N] [--tokens FILE] [--ntok N] [gpt-char|gpt2-124m|gpt-tiny]\n");
      return 2;
    }
  }
  if (steps < 1 || warm < 0 || ntok < 2 || ntok >= ((int64_t)1 << 31)) {
    fprintf(stderr, "dataloader: --steps >= 1, --warm >= 0, --ntok in [2, 2^31)\n");
    return 2;
  }
  const char *path = tokens ? tokens : "dataloader-tokens.bin";
  if (!tokens && write_tokens(path, ntok, w->V)) return 1;
  rg_ctx *ctx = NULL;
  if (rg_open(&ctx, &(rg_options){.device = dev, .quiet = 1, .bf16 = bf16}) != RG_OK) {
    fprintf(stderr, "dataloader: rg_open failed\n");
    return 1;
  }
  rg_gpt_config cfg = {.vocab = w->V, .block = w->T, .layers = w->L, .width = w->C, .heads = w->H};
  rg_gpt *gpt = rg_gpt_new(ctx, &cfg, NULL);
  rg_optim *opt = gpt ? rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 1e-4f}) : NULL;
  int rc = !opt;
  int eq = !rc && batches_equal(ctx, path, w);
  double med[2][2] = {{0}};
  for (int r = 0; !rc && r < 4; r++) {
    int prefetch = r % 2;
    round_result res;
    rc = run_round(ctx, gpt, opt, path, w, prefetch, warm, steps, &res);
    if (rc) break;
    med[prefetch][0] += res.step_ms / 2, med[prefetch][1] += res.batch_ms / 2;
    printf("{\"work\":\"%s\",\"dev\":\"%s\",\"bf16\":%d,\"prefetch\":%d,"
           "\"round\":%d,\"steps\":%d,\"step_ms_median\":%.4f,\"batch_ms_median\":%.4f,"
           "\"loss_last\":%.4f}\n", w->name, rg_device_name(ctx), bf16, prefetch, r,
           steps, res.step_ms, res.batch_ms, (double)res.loss);
    fflush(stdout);
  }
  if (!rc)
    printf("%s %s: batches_equal %s; step ms (median, mean of 2 rounds): no prefetch %.4f, "
           "prefetch %.4f; in rg_data_batch: %.4f vs %.4f\n", w->name,
           rg_device_name(ctx), eq ? "yes" : "NO", med[0][0], med[1][0],
           med[0][1], med[1][1]);
  if (!tokens) unlink(path);
  rg_optim_free(opt);
  rg_gpt_free(gpt);
  if (rg_close(ctx) != RG_OK) rc = 1;
  return rc || !eq;
}
