/*
 * hf_fixture.h - the tiny GPT-2 of tests/data/hf_gpt2_tiny, made with Hugging Face's
 * transformers by tools/hf_gpt2_fixture.py (model.safetensors, config.json), and its
 * logits there (expected.safetensors: "tokens" I32 [2, 16], "logits" F32 [2, 16, 50];
 * "greedy_0", "greedy_1" I32 [8], transformers' greedy continuation of two prompts,
 * which test_generate_cli.c compares).
 * Shared by test_hf.c (CPU) and test_cuda.c (GPU).
 */
#ifndef RG_TESTS_HF_FIXTURE_H
#define RG_TESTS_HF_FIXTURE_H

#include "common.h"
#include "resgrad_nn.h"

#include <math.h>

enum { HF_B = 2, HF_T = 16, HF_V = 50, HF_C = 24, HF_L = 2, HF_H = 3 };

/* The path of a file of the fixture's folder. */
static inline void hf_path(char *out, size_t cap, const char *file) {
  const char *src = getenv("RG_SOURCE_DIR");
  snprintf(out, cap, "%s/tests/data/hf_gpt2_tiny/%s", src ? src : "..", file);
}

/* The largest |logit - expected| of gpt on the fixture's tokens; -1 (with a failed
   check) when it cannot be computed. */
static inline double hf_logits_err(rg_ctx *ctx, rg_gpt *gpt) {
  char path[4096];
  hf_path(path, sizeof path, "expected.safetensors");
  rg_st_file *f = rg_st_open(ctx, path);
  CHECK(f != NULL, "open %s: %s", path, rg_errmsg(ctx));
  if (!f || !gpt) return rg_st_close(f), -1;
  static int32_t tok[HF_B * HF_T];
  static float want[HF_B * HF_T * HF_V], got[HF_B * HF_T * HF_V];
  const rg_st_tensor *t = rg_st_find(f, "tokens"), *l = rg_st_find(f, "logits");
  double err = -1;
  if (t && l && rg_st_read(f, t, tok, sizeof tok) == RG_OK &&
      rg_st_read(f, l, want, sizeof want) == RG_OK) {
    rg_step_begin(ctx);
    rg_tensor idx = rg_input(ctx, RG_I32, 2, (int64_t[]){HF_B, HF_T}, tok);
    if (rg_read(ctx, rg_gpt_forward(gpt, idx), got, sizeof got) == RG_OK) {
      err = 0;
      for (int i = 0; i < HF_B * HF_T * HF_V; i++) err = fmax(err, fabs(got[i] - want[i]));
    }
  }
  CHECK(err >= 0, "logits of the fixture: %s", rg_errmsg(ctx));
  rg_st_close(f);
  return err;
}

/* Greedy generation (rg_gpt_generate, 8 new tokens) from the fixture's two prompts
   against transformers' continuation (greedy_0, greedy_1): the number of tokens that
   differ, -1 (with a failed check) when it cannot be computed. */
static inline int hf_greedy_diff(rg_ctx *ctx, rg_gpt *gpt) {
  char path[4096];
  hf_path(path, sizeof path, "expected.safetensors");
  rg_st_file *f = rg_st_open(ctx, path);
  const rg_st_tensor *g0 = f ? rg_st_find(f, "greedy_0") : NULL;
  const rg_st_tensor *g1 = f ? rg_st_find(f, "greedy_1") : NULL;
  int32_t want[16], got[16], prompts[2 * 5] = {3, 14, 15, 9, 26, 7, 1};
  int64_t lens[2] = {5, 2};
  int diff = -1;
  if (g0 && g1 && rg_st_read(f, g0, want, sizeof want / 2) == RG_OK &&
      rg_st_read(f, g1, want + 8, sizeof want / 2) == RG_OK &&
      rg_gpt_generate(gpt, prompts, lens, 2, 5, 8, NULL, got) == RG_OK) {
    diff = 0;
    for (int i = 0; i < 16; i++) diff += got[i] != want[i];
  }
  CHECK(diff >= 0, "greedy generation from the fixture: %s", rg_errmsg(ctx));
  rg_st_close(f);
  return diff;
}

#endif
