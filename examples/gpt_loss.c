/*
 * gpt_loss.c - load a GPT checkpoint (one written by resgrad-train --save, or any
 * safetensors file with rg_gpt's names) and print its loss on a fixed batch.
 *
 * The model has to exist before rg_load fills it, so its shape comes from the command
 * line (resgrad-train stores it in the checkpoint's "resgrad-train.config" metadata, e.g.
 * "layers=2 width=128 heads=4 vocab=14 block=24"). The batch is a formula of (b, t), so
 * another program can build the same one without sharing a file; bench/torch_ckpt.py
 * does, and checks that PyTorch's GPT of the reference workloads (torch_ref.py), given the same
 * weights by name, computes the same loss:
 *
 *   idx[b][t]    = (131 b + 31 t + (b t mod 7)) mod vocab
 *   target[b][t] = (7 idx[b][t] + 3) mod vocab          for b < 4, t < block
 *
 * usage: gpt_loss [--device auto|cpu|cuda] LAYERS WIDTH HEADS VOCAB BLOCK CHECKPOINT
 * output: one JSON line {"loss": ..., "device": ...}; exit 1 with the library's message
 *         on any error (a checkpoint of another shape fails in rg_load, naming the tensor).
 */
#include <resgrad.h>
#include <resgrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 4

static int fail(rg_ctx *ctx, const char *what) {
  fprintf(stderr, "gpt_loss: %s: %s\n", what, ctx ? rg_errmsg(ctx) : "");
  rg_close(ctx);
  return 1;
}

int main(int argc, char **argv) {
  rg_options ro = {0};
  ro.quiet = 1;
  if (argc > 2 && !strcmp(argv[1], "--device")) {
    ro.device = !strcmp(argv[2], "cpu") ? RG_DEVICE_CPU
                : !strcmp(argv[2], "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
    argc -= 2, argv += 2;
  }
  if (argc != 7) {
    fprintf(stderr, "usage: gpt_loss [--device auto|cpu|cuda] LAYERS WIDTH HEADS VOCAB "
                    "BLOCK CHECKPOINT\n");
    return 2;
  }
  rg_gpt_config cfg = {.vocab = atoll(argv[4]), .block = atoll(argv[5]),
                       .layers = atoll(argv[1]), .width = atoll(argv[2]),
                       .heads = atoll(argv[3])};
  const char *path = argv[6];
  if (cfg.vocab < 1 || cfg.block < 1) {
    fprintf(stderr, "gpt_loss: VOCAB and BLOCK must be positive\n");
    return 2;
  }

  rg_ctx *ctx = NULL;
  if (rg_open(&ctx, &ro) != RG_OK) return fail(ctx, "cannot open the device");
  rg_gpt *gpt = rg_gpt_new(ctx, &cfg, NULL);
  if (!gpt) return fail(ctx, "cannot build the model");
  if (rg_load(ctx, path, NULL) != RG_OK) return fail(ctx, "cannot load the checkpoint");
  rg_set_training(ctx, 0);

  int64_t T = cfg.block, V = cfg.vocab, dims[2] = {B, T};
  int32_t *idx = malloc(sizeof *idx * B * (size_t)T), *tgt = malloc(sizeof *tgt * B * (size_t)T);
  if (!idx || !tgt) return fail(ctx, "out of host memory");
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      int64_t i = (131 * b + 31 * t + (b * t) % 7) % V;
      idx[b * T + t] = (int32_t)i, tgt[b * T + t] = (int32_t)((7 * i + 3) % V);
    }
  float loss = 0;
  rg_tensor l = rg_gpt_loss(gpt, rg_input(ctx, RG_I32, 2, dims, idx),
                            rg_input(ctx, RG_I32, 2, dims, tgt));
  free(idx), free(tgt);
  if (rg_item(ctx, l, &loss) != RG_OK) return fail(ctx, "cannot compute the loss");
  printf("{\"loss\": %.9g, \"device\": \"%s\"}\n", (double)loss, rg_device_name(ctx));
  rg_gpt_free(gpt);
  return rg_close(ctx) == RG_OK ? 0 : 1;
}
