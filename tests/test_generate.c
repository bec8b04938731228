/*
 * test_generate.c - rg_gpt_generate and the decoding ops on the CPU: greedy generation
 * with the KV cache gives the tokens of argmax over rg_gpt_forward of the growing
 * sequence (a batch of prompts of different lengths); a seed reproduces a draw; top-k 1
 * and a tiny top-p are greedy; one-step draws over many seeds follow softmax; the
 * errors a caller can cause are refused with a message.
 */
#include "common.h"
#include "resgrad_nn.h"

#include <math.h>
#include <string.h>

enum { V = 37, BLK = 24, B = 3, P = 7, NEW = 8 };
static const int64_t lens[B] = {5, 2, 7};

static rg_gpt *model(rg_ctx *ctx) {
  rg_gpt_config cfg = {.vocab = V, .block = BLK, .layers = 2, .width = 32, .heads = 4};
  return rg_gpt_new(ctx, &cfg, NULL);
}

/* Row b's greedy tokens the slow way: the whole sequence through rg_gpt_forward each
   time, argmax of the last position. */
static void reference(rg_ctx *ctx, rg_gpt *g, const int32_t *prompt, int64_t n,
                      int32_t *want) {
  int32_t seq[BLK];
  memcpy(seq, prompt, sizeof(int32_t) * (size_t)n);
  static float lg[BLK * V];
  for (int k = 0; k < NEW; k++) {
    rg_step_begin(ctx);
    rg_tensor idx = rg_input(ctx, RG_I32, 2, (int64_t[]){1, n}, seq);
    CHECK_ST(ctx, rg_read(ctx, rg_gpt_forward(g, idx), lg, sizeof(float) * (size_t)(n * V)),
             RG_OK);
    const float *x = lg + (n - 1) * V;
    int a = 0;
    for (int i = 1; i < V; i++)
      if (x[i] > x[a]) a = i;
    want[k] = seq[n++] = a;
  }
}

static void greedy(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_gpt *g = model(ctx);
  int32_t prompts[B * P], out[B * NEW], want[NEW];
  for (int i = 0; i < B * P; i++) prompts[i] = (i * 11 + 5) % V;
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, NULL, out), RG_OK);
  for (int b = 0; b < B; b++) {
    reference(ctx, g, prompts + b * P, lens[b], want);
    for (int k = 0; k < NEW; k++)
      CHECK(out[b * NEW + k] == want[k], "row %d token %d: %d with the cache, %d without",
            b, k, out[b * NEW + k], want[k]);
  }
  /* top_k 1 and a tiny top_p keep only the most likely token */
  int32_t o2[B * NEW];
  rg_sample_config k1 = {1.0f, 1, 1, 5, -1}, p0 = {0.8f, 0, 1e-6f, 6, -1};
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &k1, o2), RG_OK);
  CHECK(!memcmp(o2, out, sizeof out), "top_k 1 differs from greedy");
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &p0, o2), RG_OK);
  CHECK(!memcmp(o2, out, sizeof out), "a tiny top_p differs from greedy");
  /* a seed reproduces its draw; another seed draws differently */
  int32_t s1[B * NEW], s2[B * NEW], s3[B * NEW];
  rg_sample_config t = {1.5f, 20, 0.95f, 42, -1};
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &t, s1), RG_OK);
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &t, s2), RG_OK);
  t.seed = 43;
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &t, s3), RG_OK);
  CHECK(!memcmp(s1, s2, sizeof s1), "seed 42 drew two different sequences");
  CHECK(memcmp(s1, s3, sizeof s1), "seeds 42 and 43 drew the same 24 tokens");
  for (int i = 0; i < B * NEW; i++) CHECK(s1[i] >= 0 && s1[i] < V, "token %d", s1[i]);
  /* a stop token ends its row: written once, then -1 */
  rg_sample_config st = {0, 0, 1, 0, out[2]};
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, &st, o2), RG_OK);
  int first = 0;
  while (out[first] != out[2]) first++;
  for (int j = 0; j < NEW; j++)
    CHECK(o2[j] == (j <= first ? out[j] : -1), "stop %d (first at %d): token %d is %d",
          out[2], first, j, o2[j]);
  /* errors */
  int64_t bad[B] = {5, 0, 7};
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, bad, B, P, NEW, NULL, out), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, BLK, NULL, out), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "block size") && msg_has(ctx, "at most 18 new"), "%s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  static int32_t longp[BLK + 1];
  CHECK_ST(ctx, rg_gpt_generate(g, longp, NULL, 1, BLK + 1, 1, NULL, out), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "longer than the model's block size"), "%s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_sample_config bt = {-1, 0, 1, 0, -1}, bp = {1, 0, 0, 0, -1}, bk = {1, -2, 1, 0, -1},
                   bs = {1, 0, 1, 0, V};
  const rg_sample_config *bads[] = {&bt, &bp, &bk, &bs};
  const char *names[] = {"temperature", "top_p", "top_k", "stop"};
  for (int i = 0; i < 4; i++) {
    CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, bads[i], out), RG_ERR_MISUSE);
    CHECK(msg_has(ctx, names[i]), "cfg.%s: %s", names[i], rg_errmsg(ctx));
    rg_clear_error(ctx);
  }
  prompts[1] = V;
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, NEW, NULL, out), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  /* the context works after them */
  prompts[1] = 0;
  CHECK_ST(ctx, rg_gpt_generate(g, prompts, lens, B, P, 2, NULL, out), RG_OK);
  rg_gpt_free(g);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* One draw from 4 logits over many seeds: frequencies within 0.03 of softmax(x/t) (6
   standard deviations at 4000 draws), and with top_k 2 of the two largest renormalised. */
static void distribution(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  const float x[4] = {1.0f, 0.2f, -0.5f, 0.6f};
  enum { N = 4000 };
  for (int mode = 0; mode < 2; mode++) {
    float t = mode ? 1.0f : 0.7f;
    int64_t k = mode ? 2 : 0;
    double want[4], z = 0;
    for (int i = 0; i < 4; i++) {
      want[i] = (mode && (i == 1 || i == 2)) ? 0 : exp(x[i] / t);
      z += want[i];
    }
    int count[4] = {0};
    rg_step_begin(ctx);
    rg_tensor lg = rg_input(ctx, RG_F32, 2, (int64_t[]){1, 4}, x);
    for (int s = 0; s < N; s++) {
      if (s % 500 == 0) {
        rg_step_begin(ctx);
        lg = rg_input(ctx, RG_F32, 2, (int64_t[]){1, 4}, x);
      }
      int32_t id = -1;
      CHECK_ST(ctx, rg_read(ctx, rg_sample(ctx, lg, RG_NONE, t, k, 1, (uint64_t)s), &id, 4),
               RG_OK);
      if (id >= 0 && id < 4) count[id]++;
    }
    for (int i = 0; i < 4; i++)
      CHECK(fabs(count[i] / (double)N - want[i] / z) < 0.03, "mode %d token %d: %.3f drawn, "
            "softmax %.3f", mode, i, count[i] / (double)N, want[i] / z);
  }
  /* rg_sample's own refusals */
  rg_step_begin(ctx);
  rg_tensor lg = rg_input(ctx, RG_F32, 2, (int64_t[]){1, 4}, x);
  CHECK(!rg_sample(ctx, lg, RG_NONE, NAN, 0, 1, 0).id, "NaN temperature accepted");
  rg_clear_error(ctx);
  CHECK(!rg_sample(ctx, lg, RG_NONE, 1, 0, 1.5f, 0).id, "top_p 1.5 accepted");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* A position past the cache fails at the barrier, naming it, with nothing written. */
static void bad_position(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor K = rg_state_new(ctx, RG_F32, 4, (int64_t[]){1, 1, 4, 2});
  rg_tensor Vc = rg_state_new(ctx, RG_F32, 4, (int64_t[]){1, 1, 4, 2});
  float q[6] = {1, 2, 3, 4, 5, 6}, k[8];
  rg_tensor qkv = rg_input(ctx, RG_F32, 3, (int64_t[]){1, 1, 6}, q);
  rg_tensor pos = rg_input(ctx, RG_I32, 1, (int64_t[]){1}, (int32_t[]){4});
  rg_kv_write(ctx, K, Vc, qkv, pos);
  CHECK_ST(ctx, rg_sync(ctx), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "position 4 of batch row 0"), "%s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_read(ctx, K, k, sizeof k), RG_OK);
  for (int i = 0; i < 8; i++) CHECK(k[i] == 0, "K[%d] = %g after the failed write", i, k[i]);
  CHECK_ST(ctx, rg_state_free(ctx, K), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, K, k, sizeof k), RG_ERR_STALE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  greedy();
  distribution();
  bad_position();
  return finish();
}
