/*
 * generate.c - autoregressive generation with rg_gpt_generate (KV cache on the device)
 * at a GPT's shape with random weights: tokens per second for a batch of prompts, next
 * to bench/torch_generate.py's PyTorch loop at the same shape.
 *
 * usage:  generate [--device auto|cpu|cuda] [--mode f32|tf32] [--gpt V,T,L,C,H]
 *                  [--batch N[,N...]] [--prompt N] [--new N] [--reps N] [--warm N]
 *         --gpt: vocabulary, positions, layers, width, heads (default GPT-2 124M:
 *         50257,1024,12,768,12); --batch: one line per batch size (default 1,16);
 *         --prompt: prompt tokens per row (default 64); --new: new tokens per row
 *         (default 128); --reps: timed calls (default 5) after --warm (default 2).
 *         --mode tf32: rg_options.tf32 (matrix products on TF32 tensor cores).
 * output: one JSON line per batch size: the median and minimum time of one whole call
 *         (prefill of the prompt, then --new decode steps, greedy, each step's ids read
 *         back), tokens_per_s = batch x new / median, and ms_per_step, the median time
 *         of a decode step: (a call of --new tokens - a call of 1) / (new - 1), which
 *         leaves the prefill out. Every prompt has --prompt tokens, drawn from a fixed
 *         seed, so every run generates the same tokens.
 */
#include <resgrad.h>
#include <resgrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

typedef struct args {
  rg_device dev;
  int tf32;
  rg_gpt_config cfg;
  int64_t batch[16];
  int nbatch;
  int64_t prompt, new_tokens;
  int reps, warm;
} args;

static int usage(const char *why) {
  fprintf(stderr, "generate: %s\nusage: generate [--device auto|cpu|cuda] [--mode f32|tf32] "
          "[--gpt V,T,L,C,H] [--batch N[,N...]] [--prompt N] [--new N] [--reps N] "
          "[--warm N]\n", why);
  return 2;
}

static int parse(int argc, char **argv, args *a) {
  a->dev = RG_DEVICE_AUTO;
  a->cfg = (rg_gpt_config){.vocab = 50257, .block = 1024, .layers = 12, .width = 768,
                           .heads = 12};
  a->batch[0] = 1, a->batch[1] = 16, a->nbatch = 2;
  a->prompt = 64, a->new_tokens = 128, a->reps = 5, a->warm = 2;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage("every option takes a value");
    i++;
    if (!strcmp(o, "--device")) {
      a->dev = !strcmp(v, "cpu") ? RG_DEVICE_CPU : !strcmp(v, "cuda") ? RG_DEVICE_CUDA
                                                                       : RG_DEVICE_AUTO;
    } else if (!strcmp(o, "--mode")) {
      if (strcmp(v, "f32") && strcmp(v, "tf32")) return usage("--mode: f32 or tf32");
      a->tf32 = !strcmp(v, "tf32");
    } else if (!strcmp(o, "--gpt")) {
      long long V, T, L, C, H;
      if (sscanf(v, "%lld,%lld,%lld,%lld,%lld", &V, &T, &L, &C, &H) != 5)
        return usage("--gpt V,T,L,C,H");
      a->cfg = (rg_gpt_config){.vocab = V, .block = T, .layers = L, .width = C, .heads = H};
    } else if (!strcmp(o, "--batch")) {
      a->nbatch = 0;
      for (const char *p = v; *p && a->nbatch < 16; p += strspn(p, ",")) {
        char *end;
        a->batch[a->nbatch] = strtoll(p, &end, 10);
        if (end == p || a->batch[a->nbatch] < 1) return usage("--batch N[,N...]");
        a->nbatch++;
        p = end;
      }
    } else if (!strcmp(o, "--prompt")) {
      a->prompt = atoll(v);
    } else if (!strcmp(o, "--new")) {
      a->new_tokens = atoll(v);
    } else if (!strcmp(o, "--reps")) {
      a->reps = atoi(v);
    } else if (!strcmp(o, "--warm")) {
      a->warm = atoi(v);
    } else {
      return usage("unknown option");
    }
  }
  if (a->prompt < 1 || a->new_tokens < 2 || a->reps < 1 || a->warm < 0 ||
      a->prompt + a->new_tokens - 1 > a->cfg.block)
    return usage("--prompt >= 1, --new >= 2, --reps >= 1, and prompt + new - 1 <= T");
  return 0;
}

/* The median and minimum seconds of reps calls generating n tokens (after warm). */
static int timed(rg_gpt *g, const int32_t *prompts, int64_t B, const args *a, int64_t n,
                 int32_t *out, double *med, double *min) {
  double *t = malloc(sizeof *t * (size_t)a->reps);
  if (!t) return 1;
  for (int i = 0; i < a->warm + a->reps; i++) {
    double t0 = now_s();
    if (rg_gpt_generate(g, prompts, NULL, B, a->prompt, n, NULL, out) != RG_OK) {
      free(t);
      return 1;
    }
    if (i >= a->warm) t[i - a->warm] = now_s() - t0;
  }
  qsort(t, (size_t)a->reps, sizeof *t, cmp_d);
  *med = t[a->reps / 2], *min = t[0];
  free(t);
  return 0;
}

static int run(rg_ctx *ctx, rg_gpt *g, const args *a, int64_t B) {
  int32_t *prompts = malloc(sizeof *prompts * (size_t)(B * a->prompt));
  int32_t *out = malloc(sizeof *out * (size_t)(B * a->new_tokens));
  if (!prompts || !out) return free(prompts), free(out), 1;
  uint64_t s = 12345;
  for (int64_t i = 0; i < B * a->prompt; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    prompts[i] = (int32_t)((s >> 33) % (uint64_t)a->cfg.vocab);
  }
  double med, min, med1, min1;
  rg_stats s0, s1;
  rg_stats_get(ctx, &s0);
  int bad = timed(g, prompts, B, a, a->new_tokens, out, &med, &min);
  rg_stats_get(ctx, &s1);
  if (!bad) bad = timed(g, prompts, B, a, 1, out, &med1, &min1);
  if (bad) {
    fprintf(stderr, "generate: batch %lld: %s\n", (long long)B, rg_errmsg(ctx));
  } else {
    const rg_gpt_config *c = &a->cfg;
    printf("{\"bench\":\"generate\",\"impl\":\"resgrad\",\"dev\":\"%s\",\"mode\":\"%s\","
           "\"gpt\":\"%lldx%lldx%lldx%lldx%lld\",\"batch\":%lld,\"prompt\":%lld,\"new\":%lld,"
           "\"ms_median\":%.3f,\"ms_min\":%.3f,\"tokens_per_s\":%.1f,\"ms_per_step\":%.4f,"
           "\"graph_replays\":%lld,\"first_ids\":[%d,%d,%d]}\n",
           rg_device_name(ctx), a->tf32 ? "tf32" : "f32", (long long)c->vocab,
           (long long)c->block, (long long)c->layers, (long long)c->width,
           (long long)c->heads, (long long)B, (long long)a->prompt, (long long)a->new_tokens,
           1e3 * med, 1e3 * min, (double)(B * a->new_tokens) / med,
           1e3 * (med - med1) / (double)(a->new_tokens - 1),
           (long long)(s1.graph_replays - s0.graph_replays), out[0], out[1], out[2]);
    fflush(stdout);
  }
  free(prompts);
  free(out);
  return bad;
}

int main(int argc, char **argv) {
  args a;
  memset(&a, 0, sizeof a);
  int rc = parse(argc, argv, &a);
  if (rc) return rc;
  rg_ctx *ctx = NULL;
  rg_status st = rg_open(&ctx, &(rg_options){.device = a.dev, .quiet = 1, .tf32 = a.tf32});
  if (st != RG_OK) {
    fprintf(stderr, "generate: rg_open: %s\n", rg_status_str(st));
    return 1;
  }
  rg_gpt *g = rg_gpt_new(ctx, &a.cfg, NULL);
  if (!g) {
    fprintf(stderr, "generate: rg_gpt_new: %s\n", rg_errmsg(ctx));
    rg_close(ctx);
    return 1;
  }
  for (int i = 0; !rc && i < a.nbatch; i++) rc = run(ctx, g, &a, a.batch[i]);
  rg_gpt_free(g);
  rg_close(ctx);
  return rc;
}
