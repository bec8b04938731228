/*
 * test_cuda.c - the CUDA backend against the CPU backend, op by op and on whole training
 * steps. Parameters made in the same order with the same seed are bit-identical on both
 * backends (their values come from the host-side Philox), so each case builds the same
 * graph in a CPU and a CUDA context and compares the output, the loss and every
 * parameter gradient by normalised error ||cuda - cpu|| / ||cpu||.
 *
 * A case names the ops it is there for in an RG_COVERS list and fails if its tapes lack
 * one of them (covers.h); tests/test_optable.c fails for an op that no list names.
 *
 * `test_cuda NAME ...` runs only the cases whose printed names contain one of the NAMEs
 * (for a sanitizer run on a few kernels). Exits 77 (skipped) where no CUDA GPU is usable.
 */
#include "common.h"
#include "covers.h"
#include "hf_fixture.h"
#include "resgrad_nn.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* The case filter (argv): is the case of this printed name to run? */
static char **only;
static int nonly, nwanted;
static int want(const char *name) {
  int yes = nonly == 0;
  for (int i = 0; i < nonly; i++) yes |= strstr(name, only[i]) != NULL;
  nwanted += yes;
  return yes;
}

typedef struct out { rg_tensor y, loss; } out;
typedef out (*build_fn)(rg_ctx *ctx);

static rg_init normal(float s) { return (rg_init){RG_INIT_NORMAL, s, 0}; }
static rg_tensor P(rg_ctx *c, const char *n, int nd, const int64_t *d) {
  return rg_param(c, n, RG_F32, nd, d, normal(1.0f));
}
/* loss = sum(y * r) with fixed weights r, so every element of y gets its own gradient */
static out weigh(rg_ctx *c, rg_tensor y) {
  int64_t n = rg_numel(c, y);
  float *r = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) r[i] = (float)sin(0.37 * (double)i + 0.1);
  int64_t dims[RG_MAX_DIMS];
  int nd = rg_ndim(c, y);
  for (int i = 0; i < nd; i++) dims[i] = rg_dim(c, y, i);
  rg_tensor w = rg_input(c, RG_F32, nd, dims, r);
  free(r);
  return (out){y, rg_sum(c, rg_mul(c, y, w), RG_ALL_AXES, 0)};
}

#define D2(a, b) 2, (int64_t[]){a, b}
#define D3(a, b, c) 3, (int64_t[]){a, b, c}
#define D4(a, b, c, d) 4, (int64_t[]){a, b, c, d}

static out c_add(rg_ctx *c) { return weigh(c, rg_add(c, P(c, "a", D3(2, 3, 4)), P(c, "b", 1, (int64_t[]){4}))); }
static out c_sub(rg_ctx *c) { return weigh(c, rg_sub(c, P(c, "a", D3(2, 1, 4)), P(c, "b", D2(3, 1)))); }
static out c_mul(rg_ctx *c) { /* same shapes; a row vector on either side (4 | 8) */
  rg_tensor a = P(c, "a", D2(5, 8)), r = P(c, "r", 1, (int64_t[]){8});
  rg_tensor y = rg_add(c, rg_mul(c, a, P(c, "b", D2(5, 8))), rg_sub(c, r, a));
  return weigh(c, rg_add(c, y, rg_mul(c, a, r)));
}
static out c_div(rg_ctx *c) {
  return weigh(c, rg_div(c, P(c, "a", D2(4, 6)), rg_exp(c, P(c, "b", D2(1, 6)))));
}
static out c_unary(rg_ctx *c) {
  rg_tensor x = P(c, "x", D2(33, 65));
  rg_tensor y = rg_add(c, rg_gelu(c, x), rg_silu(c, x));
  y = rg_add(c, y, rg_mul(c, rg_sigmoid(c, x), rg_tanh(c, x)));
  y = rg_add(c, y, rg_relu(c, rg_scale(c, x, 1.5f)));
  y = rg_add(c, y, rg_clamp(c, rg_neg(c, x), -0.5f, 0.7f));
  rg_tensor pos = rg_exp(c, x);
  y = rg_add(c, y, rg_add(c, rg_log(c, pos), rg_sqrt(c, pos)));
  return weigh(c, rg_add(c, y, rg_pow(c, pos, 1.5f)));
}
static out c_reduce(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(4, 5, 6));
  rg_tensor y = rg_add(c, rg_sum(c, x, 1, 1), rg_mean(c, x, 1, 1));
  y = rg_add(c, y, rg_max(c, x, 1, 1));
  rg_tensor all = rg_add(c, rg_sum(c, x, RG_ALL_AXES, 0), rg_max(c, x, RG_ALL_AXES, 0));
  return weigh(c, rg_add(c, y, all));
}
static out c_softmax(rg_ctx *c) {
  rg_tensor x = rg_scale(c, P(c, "x", D3(3, 7, 129)), 4);
  return weigh(c, rg_add(c, rg_softmax(c, x), rg_log_softmax(c, x)));
}
/* Softmax rows past a warp's 1024 columns: held in a block's registers (1028: one float4
   a thread and a partial one; 4100 and 8192: up to eight), and the strided kernel where
   that does not apply (1030: not a multiple of 4; 8196: more than 8192). */
static out c_softmax_wide(rg_ctx *c) {
  static const int64_t w[5] = {1028, 4100, 8192, 1030, 8196};
  rg_tensor acc = RG_NONE;
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    rg_tensor x = rg_scale(c, P(c, name, D2(3, w[i])), 8);
    rg_tensor t = rg_add(c, rg_softmax(c, x), rg_log_softmax(c, x));
    t = rg_sum(c, rg_mul(c, t, t), RG_ALL_AXES, 0);
    acc = i ? rg_add(c, acc, t) : t;
  }
  return weigh(c, acc);
}
static out c_matmul(rg_ctx *c) {
  rg_tensor a = P(c, "a", D3(3, 17, 33)), b = P(c, "b", D2(33, 9));
  rg_tensor d = P(c, "d", D4(2, 1, 9, 5)), e = P(c, "e", D4(1, 3, 17, 9));
  rg_tensor y = rg_matmul(c, a, b);                         /* batch broadcast: one call */
  return weigh(c, rg_matmul(c, rg_add(c, y, e), d));         /* mixed broadcast: a loop */
}
static out c_linear(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(2, 5, 24)), w = P(c, "w", D2(40, 24)), b = P(c, "b", 1, (int64_t[]){40});
  rg_tensor w2 = P(c, "w2", D2(7, 40));
  return weigh(c, rg_linear(c, rg_relu(c, rg_linear(c, x, w, b)), w2, RG_NONE));
}
/* Activations in cuBLASLt's epilogue: GELU (keeping its input) with a bias, ReLU with a
   bias, and GELU at 7 outputs, where the aux matrix cannot be 7 wide (two kernels). */
static out c_linear_act(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(2, 5, 24)), w = P(c, "w", D2(40, 24)), b = P(c, "b", 1, (int64_t[]){40});
  rg_tensor w2 = P(c, "w2", D2(16, 40)), b2 = P(c, "b2", 1, (int64_t[]){16});
  rg_tensor w3 = P(c, "w3", D2(7, 16)), w4 = P(c, "w4", D2(24, 7));
  rg_tensor h = rg_linear_act(c, x, w, b, RG_ACT_GELU);
  h = rg_linear_act(c, h, w2, b2, RG_ACT_RELU);
  h = rg_linear_act(c, h, w3, RG_NONE, RG_ACT_GELU);
  h = rg_linear_act(c, rg_cast(c, h, RG_BF16), rg_cast(c, w4, RG_BF16), RG_NONE, RG_ACT_GELU);
  return weigh(c, h);
}
/* Weight gradients (a^T b over the rows) in TF32, where the backend first transposes the
   smaller operand so cuBLASLt gets a K-contiguous one: both choices, and a K that is not
   a multiple of the 32-row tiles. */
static out c_tf32(rg_ctx *c) {
  rg_tensor x = P(c, "x", D2(301, 40)), w = P(c, "w", D2(72, 40)), b = P(c, "b", 1, (int64_t[]){72});
  rg_tensor w2 = P(c, "w2", D2(24, 72));
  rg_tensor h = rg_linear_act(c, x, w, b, RG_ACT_GELU);
  return weigh(c, rg_linear(c, h, w2, RG_NONE));
}
/* GELU's derivative in the next layer's dx GEMM (MATMUL_DGELU): 40 wide through cuBLASLt's
   DGELU epilogue, 12 wide (an aux matrix it cannot take) as a GEMM and GELU_BWD. */
static out c_dgelu(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(2, 5, 24)), w1 = P(c, "w1", D2(12, 24)), b1 = P(c, "b1", 1, (int64_t[]){12});
  rg_tensor w2 = P(c, "w2", D2(40, 12)), b2 = P(c, "b2", 1, (int64_t[]){40});
  rg_tensor w3 = P(c, "w3", D2(16, 40));
  rg_tensor h = rg_linear_act(c, x, w1, b1, RG_ACT_GELU);
  h = rg_linear_act(c, h, w2, b2, RG_ACT_GELU);
  return weigh(c, rg_linear(c, h, w3, RG_NONE));
}
/* A weight gradient of 2^30 multiply-adds (64 x 2048 over 8192 rows): large enough that
   TF32 transposes an operand first (matmul.cu's k_contiguous). */
static out c_tf32_big(rg_ctx *c) {
  rg_tensor x = P(c, "x", D2(8192, 2048)), w = P(c, "w", D2(64, 2048));
  return weigh(c, rg_linear(c, x, w, RG_NONE));
}
/* Bias gradients in the weight gradient's node (MATMUL_ACC's in[3], taken where the
   incoming gradient is already the product's factor: BF16 here, made so by GELU's
   derivative in the next dx GEMM), for w and w2; two branches share the weights, so each
   gradient is added to twice. */
static out c_bgrad(rg_ctx *c) {
  rg_tensor x = P(c, "x", D2(300, 64)), x2 = P(c, "x2", D2(300, 64));
  rg_tensor w = P(c, "w", D2(32, 64)), b = P(c, "b", 1, (int64_t[]){32});
  rg_tensor w2 = P(c, "w2", D2(96, 32)), b2 = P(c, "b2", 1, (int64_t[]){96});
  rg_tensor w3 = P(c, "w3", D2(16, 96)), o[2];
  for (int i = 0; i < 2; i++) {
    rg_tensor h = rg_linear_act(c, i ? x2 : x, w, b, RG_ACT_GELU);
    o[i] = rg_linear(c, rg_linear_act(c, h, w2, b2, RG_ACT_GELU), w3, RG_NONE);
  }
  return weigh(c, rg_add(c, o[0], o[1]));
}
static out c_norms(rg_ctx *c) {
  rg_tensor x = rg_add(c, P(c, "x", D3(3, 4, 96)), P(c, "off", D3(3, 4, 1)));
  rg_tensor g = P(c, "g", 1, (int64_t[]){96}), b = P(c, "b", 1, (int64_t[]){96});
  rg_tensor y = rg_add(c, rg_layernorm(c, x, g, b, 1e-5f), rg_rmsnorm(c, x, g, 1e-6f));
  return weigh(c, rg_add(c, y, rg_layernorm(c, x, RG_NONE, RG_NONE, 1e-5f)));
}
static out c_embedding(rg_ctx *c) {
  int32_t idx[12] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  rg_tensor t = P(c, "table", D2(10, 16));
  return weigh(c, rg_embedding(c, t, rg_input(c, RG_I32, 2, (int64_t[]){3, 4}, idx)));
}
/* 300 ids (ten 32-id scans), each row of the table hit ~30 times, 40 columns. */
static out c_embedding_rep(rg_ctx *c) {
  static int32_t idx[300];
  for (int i = 0; i < 300; i++) idx[i] = (i * 7 + i / 11) % 10;
  rg_tensor t = P(c, "table", D2(10, 40));
  return weigh(c, rg_embedding(c, t, rg_input(c, RG_I32, 2, (int64_t[]){3, 100}, idx)));
}
/* V * n past emb_scan_acc_k's bound: the sorting backward (embedding.cu), its scan over three
   tiles of counts, the last partial. */
static out c_embedding_big(rg_ctx *c) {
  static int32_t idx[1100];
  for (int i = 0; i < 1100; i++) idx[i] = (int32_t)((i * 397 + i / 7) % 40003) % (i % 3 ? 40003 : 5);
  rg_tensor t = P(c, "table", D2(40003, 8));
  return weigh(c, rg_embedding(c, t, rg_input(c, RG_I32, 1, (int64_t[]){1100}, idx)));
}
static out c_attention(rg_ctx *c) {
  rg_tensor q = P(c, "q", D4(2, 3, 17, 16)), k = P(c, "k", D4(2, 3, 17, 16)),
            v = P(c, "v", D4(2, 3, 17, 16));
  rg_tensor k2 = P(c, "k2", D4(2, 3, 5, 16)), v2 = P(c, "v2", D4(2, 3, 5, 16));
  return weigh(c, rg_add(c, rg_attention(c, q, k, v, 1), rg_attention(c, q, k2, v2, 0)));
}
/* The tiled kernels of attention_f32.cu and attention_mma.cu: several 64-row tiles with the causal diagonal inside
   them at GPT-2's head size; then sizes that are multiples of neither the tile nor 4, S
   below and above T, and head sizes up to the bound of 128. Outputs of different shapes
   are flattened and concatenated, so every one is compared. */
static rg_tensor flat(rg_ctx *c, rg_tensor y) { return rg_reshape(c, y, 1, (int64_t[]){-1}); }
static rg_tensor attn_of(rg_ctx *c, int i, int64_t B, int64_t H, int64_t T, int64_t S,
                         int64_t D, int causal) {
  char n[3][16];
  for (int j = 0; j < 3; j++) snprintf(n[j], sizeof n[j], "%c%d", "qkv"[j], i);
  rg_tensor q = P(c, n[0], D4(B, H, T, D)), k = P(c, n[1], D4(B, H, S, D)),
            v = P(c, n[2], D4(B, H, S, D));
  return flat(c, rg_attention(c, q, k, v, causal));
}
static out c_attn_gpt(rg_ctx *c) {
  rg_tensor q = P(c, "q", D4(1, 2, 256, 64)), k = P(c, "k", D4(1, 2, 256, 64)),
            v = P(c, "v", D4(1, 2, 256, 64));
  return weigh(c, rg_concat(c, flat(c, rg_attention(c, q, k, v, 1)),
                            flat(c, rg_attention(c, q, k, v, 0)), 0));
}
static out c_attn_long(rg_ctx *c) { /* GPT-2's sequence length: 16 tiles of queries */
  return weigh(c, attn_of(c, 0, 1, 1, 1024, 1024, 64, 1));
}
static out c_attn_odd(rg_ctx *c) {
  rg_tensor y = attn_of(c, 0, 2, 1, 77, 45, 48, 0);           /* S < T, full */
  y = rg_concat(c, y, attn_of(c, 1, 1, 3, 70, 70, 20, 1), 0);  /* causal, D = 20 */
  y = rg_concat(c, y, attn_of(c, 2, 1, 2, 77, 45, 48, 1), 0);  /* late rows see every key */
  y = rg_concat(c, y, attn_of(c, 3, 1, 2, 45, 77, 37, 1), 0);  /* keys past T: dk = dv = 0;
                                                                  D % 4 != 0: scalar loads */
  y = rg_concat(c, y, attn_of(c, 4, 1, 1, 1, 130, 13, 0), 0);  /* one query, 3 key tiles */
  return weigh(c, y);
}
static out c_attn_wide(rg_ctx *c) { /* 64 < D <= 128: the second instantiation */
  rg_tensor y = attn_of(c, 0, 1, 2, 100, 100, 128, 1);
  y = rg_concat(c, y, attn_of(c, 1, 2, 1, 33, 130, 96, 0), 0);
  y = rg_concat(c, y, attn_of(c, 2, 1, 1, 65, 65, 67, 1), 0);
  return weigh(c, y);
}
/* rg_attention_mask: the masks read per tile inside the f32 and the mma kernels
   (attention.h), over several tiles of queries and keys, S != T, D in both instantiations
   and D % 8 != 0. pad: 0 none; 1 key s of batch b padded where (7 s + 3 b) % 5 == 0; 2 as
   1, and every key of the last batch (rows that see no key). A bias of bnd axes bd,
   2 sin(...) with every ninf-th entry -inf (ninf > 0) and, where it has a T axis, row 1 of
   its first [T,S] slice all -inf (a row that sees no key). */
static rg_tensor attn_mask_of(rg_ctx *c, int i, int64_t B, int64_t H, int64_t T, int64_t S,
                              int64_t D, int causal, int pad, int bnd, const int64_t *bd,
                              int ninf) {
  char n[3][16];
  for (int j = 0; j < 3; j++) snprintf(n[j], sizeof n[j], "m%c%d", "qkv"[j], i);
  rg_tensor q = P(c, n[0], D4(B, H, T, D)), k = P(c, n[1], D4(B, H, S, D)),
            v = P(c, n[2], D4(B, H, S, D)), kp = RG_NONE, bias = RG_NONE;
  if (pad) {
    int32_t *m = malloc(sizeof(int32_t) * (size_t)(B * S));
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = 0; s < S; s++)
        m[b * S + s] = (7 * s + 3 * b) % 5 == 0 || (pad == 2 && b == B - 1);
    kp = rg_input(c, RG_I32, 2, (int64_t[]){B, S}, m);
    free(m);
  }
  if (bnd) {
    int64_t nb = 1;
    for (int j = 0; j < bnd; j++) nb *= bd[j];
    float *x = malloc(sizeof(float) * (size_t)nb);
    for (int64_t e = 0; e < nb; e++)
      x[e] = ninf > 0 && e % ninf == 0 ? -INFINITY : (float)(2 * sin(0.7 * (double)e + 0.3));
    if (bnd >= 2 && bd[bnd - 2] > 1)
      for (int64_t s = 0; s < S; s++) x[S + s] = -INFINITY;
    bias = rg_input(c, RG_F32, bnd, bd, x);
    free(x);
  }
  return flat(c, rg_attention_mask(c, q, k, v, causal, kp, bias));
}
/* The parts in an order whose weighted sum, the loss, is far from 0 (-79 beside |y| = 91):
   the case also bounds the loss's relative error, which a loss near 0 (-1.8, in the order
   of their indices) magnifies past bf16's bound. */
static out c_attn_mask(rg_ctx *c) {
  rg_tensor y = attn_mask_of(c, 2, 1, 2, 65, 130, 96, 1, 0, D4(1, 2, 65, 130), 5);
  y = rg_concat(c, y, attn_mask_of(c, 0, 2, 2, 130, 150, 64, 1, 1, D2(130, 150), 0), 0); /* [T,S] */
  y = rg_concat(c, y, attn_mask_of(c, 1, 2, 1, 77, 45, 40, 0, 2, D4(2, 1, 77, 45), 11), 0);
  y = rg_concat(c, y, attn_mask_of(c, 4, 1, 1, 45, 77, 13, 0, 1, 0, NULL, 0), 0); /* padding
                                                                             alone */
  y = rg_concat(c, y, attn_mask_of(c, 3, 2, 2, 70, 70, 20, 1, 1, 1, (int64_t[]){70}, 0), 0);
  return weigh(c, y);
}
/* rg_attention_qkv: the same kernels reading heads as D-column strips of [B,T,3C] rows
   and writing them into [B,T,C] rows. */
static rg_tensor qkv_of(rg_ctx *c, int i, int64_t B, int64_t T, int64_t H, int64_t D,
                        int causal) {
  char n[16];
  snprintf(n, sizeof n, "qkv%d", i);
  return flat(c, rg_attention_qkv(c, P(c, n, D3(B, T, 3 * H * D)), H, causal));
}
static out c_attn_qkv(rg_ctx *c) {
  rg_tensor y = qkv_of(c, 0, 2, 130, 3, 64, 1);              /* GPT-2's D, 3 query tiles */
  y = rg_concat(c, y, qkv_of(c, 1, 2, 130, 3, 64, 0), 0);
  y = rg_concat(c, y, qkv_of(c, 2, 1, 77, 4, 24, 1), 0);     /* float4 rows of stride 288 */
  y = rg_concat(c, y, qkv_of(c, 3, 3, 45, 2, 40, 0), 0);
  y = rg_concat(c, y, qkv_of(c, 4, 1, 67, 2, 13, 1), 0);     /* D % 4 != 0: scalar loads */
  y = rg_concat(c, y, qkv_of(c, 5, 1, 70, 2, 96, 1), 0);     /* 64 < D: DM = 128 kernels */
  return weigh(c, y);
}
/* The tensor-core path (run with rg_options.bf16 on the CUDA side only, against the CPU's
   f32): GPT-2's T and D with both layouts, then odd T and D, S != T, and
   64 < D <= 128. */
static out c_attn_tc(rg_ctx *c) {
  rg_tensor y = qkv_of(c, 0, 1, 1024, 2, 64, 1);
  y = rg_concat(c, y, attn_of(c, 1, 1, 1, 1024, 1024, 64, 0), 0);
  y = rg_concat(c, y, qkv_of(c, 2, 2, 77, 3, 24, 1), 0);
  y = rg_concat(c, y, attn_of(c, 3, 1, 2, 70, 45, 40, 0), 0);
  y = rg_concat(c, y, attn_of(c, 4, 1, 2, 45, 77, 13, 1), 0);
  y = rg_concat(c, y, qkv_of(c, 5, 1, 65, 2, 96, 1), 0);
  return weigh(c, y);
}
/* The norms' kernels: a warp per row from registers (C % 4 == 0 up to 256, gpt-char's
   [4096, 256]), the strided kernels (GPT-2's width, C % 4 != 0, and a block per row past
   1024); with and without gamma and beta; many rows, so dgamma and dbeta add many
   blocks' partials (in the strided kernels too: [1500, 300], three row segments). The
   parameter gradients are added by the backward node itself (ops.h), in each path. */
static rg_tensor norm_of(rg_ctx *c, int i, int64_t R, int64_t C, int kind) {
  char n[3][16];
  for (int j = 0; j < 3; j++) snprintf(n[j], sizeof n[j], "%c%d", "xgb"[j], i);
  rg_tensor x = P(c, n[0], D2(R, C)), g = P(c, n[1], 1, &C), b = P(c, n[2], 1, &C);
  x = rg_add(c, rg_scale(c, x, 2.0f), rg_scale(c, g, 0.5f)); /* rows not centred */
  if (kind == 0) return flat(c, rg_layernorm(c, x, g, b, 1e-5f));
  if (kind == 1) return flat(c, rg_layernorm(c, x, g, RG_NONE, 1e-5f));
  if (kind == 2) return flat(c, rg_layernorm(c, x, RG_NONE, RG_NONE, 1e-5f));
  return flat(c, rg_rmsnorm(c, x, g, 1e-6f));
}
static out c_norm_kernels(rg_ctx *c) {
  rg_tensor y = norm_of(c, 0, 4096, 256, 0);
  y = rg_concat(c, y, norm_of(c, 1, 300, 768, 0), 0);
  y = rg_concat(c, y, norm_of(c, 2, 33, 1024, 3), 0);
  y = rg_concat(c, y, norm_of(c, 3, 50, 100, 1), 0);
  y = rg_concat(c, y, norm_of(c, 4, 3000, 512, 2), 0);
  y = rg_concat(c, y, norm_of(c, 5, 40, 90, 0), 0);
  y = rg_concat(c, y, norm_of(c, 6, 9, 2048, 3), 0);
  y = rg_concat(c, y, norm_of(c, 7, 1, 256, 0), 0);
  y = rg_concat(c, y, norm_of(c, 8, 1500, 300, 0), 0);
  return weigh(c, y);
}
/* x feeding a norm and an add (a residual stream): the sum of x's gradients is folded
   into the norm's backward node (dx_in, ops.h), in the row-register kernels (768) and
   the strided ones (1030: C % 4 != 0; 2048: a block per row); rmsnorm too. */
static rg_tensor fold_of(rg_ctx *c, int i, int64_t R, int64_t C, int rms) {
  char n[16];
  snprintf(n, sizeof n, "f%d", i);
  rg_tensor x = rg_scale(c, P(c, n, D2(R, C)), 2.0f);
  rg_tensor y = rms ? rg_rmsnorm(c, x, RG_NONE, 1e-6f)
                    : rg_layernorm(c, x, RG_NONE, RG_NONE, 1e-5f);
  return flat(c, rg_add(c, y, x));
}
static out c_norm_fold(rg_ctx *c) {
  rg_tensor y = fold_of(c, 0, 300, 768, 0);
  y = rg_concat(c, y, fold_of(c, 1, 40, 1030, 0), 0);
  y = rg_concat(c, y, fold_of(c, 2, 9, 2048, 0), 0);
  y = rg_concat(c, y, fold_of(c, 3, 64, 256, 1), 0);
  return weigh(c, y);
}
/* rg_layernorm of a sum just recorded by rg_add: one ADD_LAYERNORM node, one pass a row
   for C <= 1024 in float4 (100, 768, 1024: 2, 6 and 8 float4 a lane), the two kernels
   otherwise (90, 2048). b is a linear's output: BF16 under rg_options.bf16. */
static rg_tensor addnorm_of(rg_ctx *c, int i, int64_t R, int64_t C) {
  char n[5][16];
  for (int j = 0; j < 5; j++) snprintf(n[j], sizeof n[j], "%c%d", "axwgb"[j], i);
  rg_tensor a = rg_scale(c, P(c, n[0], D2(R, C)), 1.5f);
  rg_tensor b = rg_linear(c, P(c, n[1], D2(R, 8)), P(c, n[2], D2(C, 8)), RG_NONE);
  rg_tensor s = rg_add(c, a, b);
  rg_tensor y = rg_layernorm(c, s, P(c, n[3], 1, &C), P(c, n[4], 1, &C), 1e-5f);
  return flat(c, rg_mul(c, y, s));
}
static out c_add_norm(rg_ctx *c) {
  rg_tensor y = addnorm_of(c, 0, 70, 768);
  y = rg_concat(c, y, addnorm_of(c, 1, 33, 100), 0);
  y = rg_concat(c, y, addnorm_of(c, 2, 9, 1024), 0);
  y = rg_concat(c, y, addnorm_of(c, 3, 20, 90), 0);
  y = rg_concat(c, y, addnorm_of(c, 4, 5, 2048), 0);
  return weigh(c, y);
}
/* Bias gradients (a SUM_TO folded into SUM_TO_ACC) through the column-sum kernels: many
   rows and few columns (many chunks), few rows and many columns (one chunk), widths that
   are not a multiple of 4 (scalar loads) or of 128 (a partial column group), rows from
   two merged axes; and a mean over axis 0, the same kernels with a divisor. */
static rg_tensor bias_of(rg_ctx *c, int i, int64_t R, int64_t C) {
  char n[2][16];
  snprintf(n[0], sizeof n[0], "x%d", i);
  snprintf(n[1], sizeof n[1], "b%d", i);
  return flat(c, rg_add(c, P(c, n[0], D2(R, C)), P(c, n[1], 1, (int64_t[]){C})));
}
static out c_colsum(rg_ctx *c) {
  rg_tensor y = bias_of(c, 0, 3000, 256);
  y = rg_concat(c, y, bias_of(c, 1, 5000, 3), 0);
  y = rg_concat(c, y, bias_of(c, 2, 6, 4099), 0);
  y = rg_concat(c, y, bias_of(c, 3, 1, 1024), 0);
  y = rg_concat(c, y, bias_of(c, 4, 20000, 8), 0);
  y = rg_concat(c, y, bias_of(c, 5, 777, 132), 0);
  rg_tensor z = P(c, "z", D3(2, 700, 77)), bz = P(c, "bz", 1, (int64_t[]){77});
  y = rg_concat(c, y, flat(c, rg_add(c, z, bz)), 0);
  y = rg_concat(c, y, flat(c, rg_mean(c, P(c, "m", D2(600, 40)), 0, 0)), 0);
  return weigh(c, y);
}
/* The same in BF16: a linear layer's bias gradient sums a BF16 gradient (two column
   groups, the second partial). */
static out c_bf16_colsum(rg_ctx *c) {
  rg_tensor x = P(c, "x", D2(1500, 64)), w = P(c, "w", D2(136, 64));
  return weigh(c, rg_linear(c, x, w, P(c, "b", 1, (int64_t[]){136})));
}
static out c_xent(rg_ctx *c) {
  int32_t t[10] = {1, 0, 4, 4, 2, -1, 3, 0, -1, 2};
  rg_tensor x = P(c, "x", D2(10, 5)), y = rg_input(c, RG_I32, 1, (int64_t[]){10}, t);
  rg_tensor l = rg_add(c, rg_cross_entropy_ignore(c, x, y, -1),
                       rg_mse(c, x, rg_scale(c, P(c, "t", D2(10, 5)), 0.5f)));
  return (out){l, l};
}
/* Cross-entropy's one-pass kernels: a warp per row with float4 loads (C % 4 == 0) and
   scalar ones, a block per row at GPT-2's vocabulary width and at odd ones, some with
   ignored rows; each loss weighted differently, and every logit a parameter of its own,
   so each kernel's dlogits are compared. */
static rg_tensor xent_of(rg_ctx *c, int i, int64_t N, int64_t C, int ignore) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)N);
  for (int64_t r = 0; r < N; r++)
    t[r] = ignore && r % 5 == 0 ? -100 : (int32_t)((r * 7919 + 13) % C);
  char n[16];
  snprintf(n, sizeof n, "l%d", i);
  rg_tensor x = rg_scale(c, P(c, n, D2(N, C)), 3.0f), y = rg_input(c, RG_I32, 1, &N, t);
  free(t);
  rg_tensor l = ignore ? rg_cross_entropy_ignore(c, x, y, -100) : rg_cross_entropy(c, x, y);
  return rg_scale(c, l, (float)(i + 1));
}
static out c_xent_kernels(rg_ctx *c) {
  rg_tensor l = xent_of(c, 0, 4096, 96, 0);          /* warp, float4 */
  l = rg_add(c, l, xent_of(c, 1, 1000, 7, 1));       /* warp, scalar, ignored rows */
  l = rg_add(c, l, xent_of(c, 2, 3, 50304, 0));      /* block, float4 */
  l = rg_add(c, l, xent_of(c, 3, 5, 50301, 1));      /* block, scalar, ignored rows */
  l = rg_add(c, l, xent_of(c, 4, 40, 1030, 0));      /* block of 256, scalar */
  l = rg_add(c, l, xent_of(c, 5, 7, 4100, 1));       /* block of 256, float4, ignored rows */
  l = rg_add(c, l, xent_of(c, 6, 600, 2048, 1));     /* 600 block rows of 256, ignored rows */
  l = rg_add(c, l, xent_of(c, 7, 3, 8192, 0));       /* block of 256, all loads in one round */
  return (out){l, l};
}
static out c_shape(rg_ctx *c) {
  rg_tensor x = P(c, "x", D4(2, 3, 4, 5));
  rg_tensor y = rg_reshape(c, rg_transpose(c, x, 1, 3), 3, (int64_t[]){2, -1, 4});
  int perm[4] = {3, 1, 0, 2};
  rg_tensor z = rg_reshape(c, rg_permute(c, x, perm), 3, (int64_t[]){2, 15, 4});
  rg_tensor s = rg_concat(c, rg_slice(c, y, 1, 2, 7), rg_slice(c, z, 1, 0, 8), 1);
  rg_tensor bf = rg_cast(c, rg_cast(c, s, RG_BF16), RG_F32);
  return weigh(c, rg_add(c, s, rg_scale(c, bf, 0.25f)));
}
/* BF16 factors, cast from F32 parameters so both backends round the same values (the
   incoming gradients, rounded to BF16 too, are the fixed weights): linear with a bias,
   and a matmul whose broadcast batch loops over odd-sized, 2-byte-aligned matrices. */
static out c_bf16(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(2, 5, 24)), w = P(c, "w", D2(39, 24)), b = P(c, "b", 1, (int64_t[]){39});
  rg_tensor p = P(c, "p", D4(2, 1, 5, 39)), m = P(c, "m", D3(3, 39, 9));
  rg_tensor l = rg_linear(c, rg_cast(c, x, RG_BF16), rg_cast(c, w, RG_BF16), b);
  rg_tensor y = rg_matmul(c, rg_cast(c, p, RG_BF16), rg_cast(c, m, RG_BF16));
  int64_t all = -1;
  return weigh(c, rg_concat(c, rg_reshape(c, l, 1, &all), rg_reshape(c, y, 1, &all), 0));
}
static out c_dropout(rg_ctx *c) {
  return weigh(c, rg_dropout(c, P(c, "x", D2(64, 33)), 0.3f));
}
/* rg_argmax along the last axis, a middle one, all axes and rows of 5000 (I32 indices,
   compared as floats: a wrong one is off by at least 1), beside paths that give x and v
   their gradients. */
static out c_argmax(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(4, 7, 33)), v = P(c, "v", D2(3, 5000));
  rg_tensor y = rg_mul(c, x, rg_cast(c, rg_argmax(c, x, 2, 1), RG_F32));
  y = rg_add(c, y, rg_cast(c, rg_argmax(c, x, 1, 1), RG_F32));
  y = rg_add(c, y, rg_cast(c, rg_argmax(c, x, RG_ALL_AXES, 0), RG_F32));
  rg_tensor z = rg_add(c, rg_cast(c, rg_argmax(c, v, 1, 0), RG_F32), rg_sum(c, v, 1, 0));
  return weigh(c, rg_concat(c, flat(c, y), z, 0));
}
/* Ring buffers: two pushes that wrap, 300 draws (two blocks of the sampler) gathered,
   and I32 and BF16 rings moved as stored, beside a parameter that gives the loss its
   gradient. Both backends draw the same indices (Philox), so the gathers agree exactly. */
static out c_ring(rg_ctx *c) {
  float e[7 * 7];
  int32_t iv[14];
  for (int i = 0; i < 7 * 7; i++) e[i] = (float)sin(0.7 * i);
  for (int i = 0; i < 14; i++) iv[i] = i * 3 - 7;
  rg_tensor ring = rg_ring_new(c, RG_F32, 5, 7);
  rg_ring_push(c, ring, rg_input(c, RG_F32, D2(3, 7), e));
  rg_ring_push(c, ring, rg_input(c, RG_F32, D2(4, 7), e + 21)); /* wraps: 2 go */
  rg_tensor g = rg_ring_gather(c, ring, rg_ring_sample(c, ring, 300));
  rg_tensor ri = rg_ring_new(c, RG_I32, 3, 7), rb = rg_ring_new(c, RG_BF16, 3, 7);
  rg_ring_push(c, ri, rg_input(c, RG_I32, D2(2, 7), iv));
  rg_ring_push(c, rb, rg_cast(c, rg_input(c, RG_F32, D2(2, 7), e), RG_BF16));
  rg_tensor two = rg_input(c, RG_I32, 1, (int64_t[]){2}, (int32_t[]){1, 0});
  rg_tensor h = rg_concat(c, rg_cast(c, rg_ring_gather(c, ri, two), RG_F32),
                          rg_cast(c, rg_ring_gather(c, rb, two), RG_F32), 0);
  return weigh(c, rg_mul(c, rg_concat(c, g, h, 0), P(c, "x", D2(304, 7))));
}
/* Decoding: a cache [2,3,8,4] written at positions 1 and 4 (rows of 3 queries), the
   attention over its prefixes, and draws of 5 rows of 300 logits (greedy, temperature
   with top-k and top-p) keyed by counters: both backends draw the same ids (Philox),
   compared as floats beside a parameter that gives the loss its gradient. */
static out c_decode(rg_ctx *c) {
  rg_tensor K = rg_state_new(c, RG_F32, 4, (int64_t[]){2, 3, 8, 4});
  rg_tensor V = rg_state_new(c, RG_F32, 4, (int64_t[]){2, 3, 8, 4});
  rg_tensor qkv = rg_detach(c, P(c, "qkv", D3(2, 3, 36)));
  rg_tensor pos = rg_input(c, RG_I32, 1, (int64_t[]){2}, (int32_t[]){1, 4});
  rg_kv_write(c, K, V, qkv, pos);
  rg_tensor a = rg_attention_cached(c, qkv, K, V, pos);
  rg_tensor lg = rg_scale(c, rg_detach(c, P(c, "logits", D2(5, 300))), 8);
  rg_tensor ctr = rg_input(c, RG_I32, 1, (int64_t[]){5}, (int32_t[]){0, 1, 2, 3, 4});
  rg_tensor s0 = rg_sample(c, lg, RG_NONE, 0, 0, 1, 0);
  rg_tensor s1 = rg_sample(c, lg, ctr, 1.0f, 40, 0.9f, 7);
  rg_tensor s2 = rg_sample(c, lg, ctr, 0.7f, 0, 1, 9);
  rg_tensor ids = rg_concat(c, rg_concat(c, s0, s1, 0), s2, 0);
  rg_tensor y = rg_concat(c, flat(c, a), rg_cast(c, ids, RG_F32), 0);
  return weigh(c, rg_add(c, y, P(c, "x", 1, (int64_t[]){2 * 3 * 12 + 15})));
}
/* A retained loss: rg_backward seeds its gradient with a FILL node, not the shared 1. */
static out c_seed(rg_ctx *c) {
  out o = weigh(c, rg_tanh(c, P(c, "x", D2(5, 9))));
  rg_retain_grad(c, o.loss);
  return o;
}
static out c_gpt(rg_ctx *c) {
  rg_gpt_config cfg = {.vocab = 29, .block = 16, .layers = 2, .width = 32, .heads = 4};
  rg_gpt *g = rg_gpt_new(c, &cfg, NULL);
  int32_t idx[2 * 16], tg[2 * 16];
  for (int i = 0; i < 32; i++) idx[i] = (i * 7) % 29, tg[i] = (i * 11 + 3) % 29;
  rg_tensor x = rg_input(c, RG_I32, 2, (int64_t[]){2, 16}, idx);
  rg_tensor y = rg_input(c, RG_I32, 2, (int64_t[]){2, 16}, tg);
  rg_tensor l = rg_gpt_loss(g, x, y);
  rg_gpt_free(g);
  return (out){l, l};
}

/* bf16 activations (run with rg_options.bf16 on both sides): BF16 logits of linear layers
   into the cross-entropy kernels (warp and block rows, 16-byte groups with a scalar head
   and tail at odd widths, ignored rows), whose backward writes BF16 dlogits that the
   linear's gradient products and the bias's column sum read. */
static rg_tensor lin_xent(rg_ctx *c, int i, int64_t N, int64_t C, int ignore) {
  char n[3][16];
  for (int j = 0; j < 3; j++) snprintf(n[j], sizeof n[j], "%c%d", "xwb"[j], i);
  rg_tensor lg = rg_linear(c, P(c, n[0], D2(N, 16)), P(c, n[1], D2(C, 16)),
                           P(c, n[2], 1, &C));
  int32_t *t = malloc(sizeof(int32_t) * (size_t)N);
  for (int64_t r = 0; r < N; r++) t[r] = ignore && r % 5 == 0 ? -1 : (int32_t)((r * 7919) % C);
  rg_tensor tg = rg_input(c, RG_I32, 1, &N, t);
  free(t);
  return ignore ? rg_cross_entropy_ignore(c, lg, tg, -1) : rg_cross_entropy(c, lg, tg);
}
static out c_bf16_xent(rg_ctx *c) {
  rg_tensor l = lin_xent(c, 0, 4096, 96, 0);
  l = rg_add(c, l, lin_xent(c, 1, 1000, 7, 1));
  l = rg_add(c, l, lin_xent(c, 2, 3, 50304, 0));
  l = rg_add(c, l, lin_xent(c, 3, 5, 50301, 1));
  l = rg_add(c, l, lin_xent(c, 4, 40, 1030, 0));
  return (out){l, l};
}
/* Attention on a linear's BF16 qkv (so its gradient is written BF16), a GELU MLP with a
   bias and a residual add of F32 and BF16, as a GPT block has them. */
static out c_bf16_block(rg_ctx *c) {
  rg_tensor x = P(c, "x", D3(2, 130, 64)), wq = P(c, "wq", D2(192, 64));
  rg_tensor bq = P(c, "bq", 1, (int64_t[]){192}), w1 = P(c, "w1", D2(256, 64));
  rg_tensor b1 = P(c, "b1", 1, (int64_t[]){256}), w2 = P(c, "w2", D2(64, 256));
  rg_tensor a = rg_attention_qkv(c, rg_linear(c, rg_layernorm(c, x, RG_NONE, RG_NONE, 1e-5f),
                                              wq, bq), 2, 1);
  rg_tensor r = rg_add(c, x, a);
  rg_tensor h = rg_linear_act(c, rg_layernorm(c, r, RG_NONE, RG_NONE, 1e-5f), w1, b1,
                              RG_ACT_GELU);
  return weigh(c, rg_add(c, r, rg_linear(c, h, w2, RG_NONE)));
}

/* Attention on linears' BF16 qkv, so that q, k, v, o and the gradient dqkv are all BF16:
   shapes cuDNN's fused attention takes (when built with it: docs/building.md, RG_CUDNN;
   T >= 512, attention.cu), GPT-2's T and D, a wider D, T a multiple of 128 and not (cuDNN up to
   9.15.0 leaves that backward to resgrad's kernels), full and causal. The same cases run
   on resgrad's own kernels with rg_options.no_cudnn (attn-own). */
static rg_tensor dnn_of(rg_ctx *c, int i, int64_t B, int64_t T, int64_t H, int64_t D,
                        int causal) {
  char n[2][16];
  snprintf(n[0], sizeof n[0], "x%d", i);
  snprintf(n[1], sizeof n[1], "w%d", i);
  rg_tensor x = P(c, n[0], D3(B, T, 32)), w = P(c, n[1], D2(3 * H * D, 32));
  return flat(c, rg_attention_qkv(c, rg_linear(c, x, w, RG_NONE), H, causal));
}
static out c_attn_dnn(rg_ctx *c) {
  rg_tensor y = dnn_of(c, 0, 2, 1024, 2, 64, 1);
  y = rg_concat(c, y, dnn_of(c, 1, 1, 640, 3, 64, 0), 0);
  y = rg_concat(c, y, dnn_of(c, 2, 1, 512, 2, 128, 1), 0);
  y = rg_concat(c, y, dnn_of(c, 3, 2, 600, 1, 32, 1), 0);
  return weigh(c, y);
}

static double nerr(const float *a, const float *b, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] != a[i] || b[i] != b[i]) return a[i] != a[i] && b[i] != b[i] ? 0 : INFINITY;
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* t's n values as F32 into v (BF16 ones widened). */
static rg_status read_f32(rg_ctx *ctx, rg_tensor t, float *v, int64_t n) {
  if (rg_dtype_of(ctx, t) == RG_F32) return rg_read(ctx, t, v, (size_t)n * 4);
  if (rg_dtype_of(ctx, t) != RG_BF16) return RG_ERR_MISUSE;
  uint16_t *h = (uint16_t *)v + n; /* the upper half of v, widened from the front */
  rg_status st = rg_read(ctx, t, h, (size_t)n * 2);
  for (int64_t i = 0; st == RG_OK && i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&v[i], &u, 4);
  }
  return st;
}

/* Reads t from both contexts and returns their normalised error (INFINITY on a failure). */
static double compare(rg_ctx *g, rg_tensor tg, rg_ctx *c, rg_tensor tc) {
  int64_t n = rg_numel(c, tc);
  if (rg_numel(g, tg) != n) return INFINITY;
  float *a = malloc(sizeof(float) * (size_t)(n ? n : 1)), *b = malloc(sizeof(float) * (size_t)(n ? n : 1));
  double e = INFINITY;
  if (read_f32(g, tg, a, n) == RG_OK && read_f32(c, tc, b, n) == RG_OK) e = nerr(a, b, n);
  free(a);
  free(b);
  return e;
}

/* mode: 0, or 1 / 2 to open the CUDA context with rg_options.tf32 / .bf16, the CPU's
   context f32 (it ignores tf32; under bf16 it would round matrix products as well, so the
   mode 2 cases use no rg_matmul or rg_linear); 3: both contexts with rg_options.bf16,
   so both round the same products and activations (bf16 activations). */
static int no_cudnn;  /* rg_options.no_cudnn of the CUDA contexts of run_case_mode */
static int gemm_tune; /* and their rg_options.gemm_tune */
static const rg_op *covers; /* the case's RG_COVERS list, checked on the CPU's tape */
static void run_case_mode(const char *name, build_fn f, double tol, int mode) {
  if (!want(name)) return;
  rg_options o = {.quiet = 1, .seed = 11, .no_cudnn = no_cudnn};
  o.gemm_tune = gemm_tune; /* (the CPU ignores it) */
  rg_ctx *c = NULL, *g = NULL;
  o.device = RG_DEVICE_CPU;
  o.bf16 = mode == 3;
  rg_open(&c, &o);
  o.device = RG_DEVICE_CUDA;
  o.tf32 = mode == 1;
  o.bf16 = mode >= 2;
  rg_open(&g, &o);
  if (!c || !g) {
    CHECK(0, "%s: could not open both contexts", name);
    rg_close(c);
    rg_close(g);
    return;
  }
  rg_step_begin(c);
  rg_step_begin(g);
  out oc = f(c), og = f(g);
  rg_backward(c, oc.loss);
  rg_backward(g, og.loss);
  unsigned char seen[RG_OP_COUNT] = {0};
  covers_note(c, 0, seen);
  rg_op miss = covers_missing(covers, seen);
  CHECK(miss == RG_OP_COUNT, "%s: its RG_COVERS list has op %s, which its tape lacks", name,
        miss < RG_OP_COUNT ? rg_optab[miss].kernel : "");
  double worst = fmax(compare(g, og.y, c, oc.y), compare(g, og.loss, c, oc.loss));
  const char *wname = "output";
  for (int i = 0; i < rg_param_count(c); i++) {
    double e = compare(g, rg_grad(g, rg_param_at(g, i)), c, rg_grad(c, rg_param_at(c, i)));
    if (e > worst) worst = e, wname = rg_name(c, rg_param_at(c, i));
  }
  CHECK(rg_error(c) == RG_OK, "%s: CPU error: %s", name, rg_errmsg(c));
  CHECK(rg_error(g) == RG_OK, "%s: CUDA error: %s", name, rg_errmsg(g));
  CHECK(worst <= tol, "%s: normalised error %.3g (worst at %s) > %.1g", name, worst, wname, tol);
  printf("%-12s %s  worst normalised error %.3g (tolerance %.0e)\n", name,
         worst <= tol && rg_error(g) == RG_OK && miss == RG_OP_COUNT ? "PASS" : "FAIL", worst,
         tol);
  CHECK_ST(c, rg_close(c), RG_OK);
  CHECK_ST(g, rg_close(g), RG_OK);
}

static void run_case(const char *name, build_fn f, double tol, const rg_op *ops) {
  covers = ops;
  run_case_mode(name, f, tol, 0);
  covers = NULL;
}

/* The bf16 attention repeats exactly: the same backward twice, in two steps (the second
   replays the first's graph), gives the same bits; on cuDNN's fused kernels (when built
   with them: then they must have run) and on resgrad's own. */
static void attn_repeat(int off) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1, .bf16 = 1, .seed = 3,
                            .no_cudnn = off});
  rg_tensor x = rg_param(g, "x", RG_F32, D3(2, 512, 64), normal(1));
  rg_tensor w = rg_param(g, "w", RG_F32, D2(3 * 4 * 64, 64), normal(0.2f));
  int64_t n = rg_numel(g, x);
  float *r[2] = {malloc(sizeof(float) * (size_t)n), malloc(sizeof(float) * (size_t)n)};
  for (int s = 0; s < 2; s++) {
    rg_step_begin(g);
    rg_zero_grad(g);
    rg_backward(g, weigh(g, rg_attention_qkv(g, rg_linear(g, x, w, RG_NONE), 4, 1)).loss);
    CHECK_ST(g, rg_read(g, rg_grad(g, x), r[s], sizeof(float) * (size_t)n), RG_OK);
  }
  int same = !memcmp(r[0], r[1], sizeof(float) * (size_t)n);
  rg_stats st;
  rg_stats_get(g, &st);
#ifdef RG_HAVE_CUDNN
  const char *env = getenv("RG_CUDNN");
  uint64_t want = off || (env && *env == '0') ? 0 : 4; /* forward and backward, 2 steps */
#else
  uint64_t want = 0;
#endif
  CHECK(same, "bf16 attention (%s): two identical backward passes differ",
        off ? "own" : "default");
  CHECK(st.cudnn_attention == want, "bf16 attention (%s): %llu nodes ran on cuDNN, %llu "
        "expected", off ? "own" : "default", (unsigned long long)st.cudnn_attention,
        (unsigned long long)want);
  printf("%-12s %s  bf16 attention gradients repeat bit for bit (%llu nodes on cuDNN)\n",
         off ? "attn-rep-own" : "attn-repeat",
         same && st.cudnn_attention == want ? "PASS" : "FAIL",
         (unsigned long long)st.cudnn_attention);
  free(r[0]);
  free(r[1]);
  CHECK_ST(g, rg_close(g), RG_OK);
}
/* rg_options.gemm_tune: a tuned context repeats its bits. Step 1 runs eagerly and tunes
   each product, step 2 (the first of the same signature) runs eagerly too, step 3 is
   captured and step 4 replays the graph: all use the tuned algorithms. */
static void run_tune_repeat(void) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1, .bf16 = 1, .seed = 5,
                            .gemm_tune = 2});
  rg_tensor x = rg_param(g, "x", RG_F32, D2(512, 256), normal(1));
  rg_tensor w = rg_param(g, "w", RG_F32, D2(1024, 256), normal(0.1f));
  rg_tensor b = rg_param(g, "b", RG_F32, 1, (int64_t[]){1024}, normal(0.1f));
  rg_tensor w2 = rg_param(g, "w2", RG_F32, D2(256, 1024), normal(0.05f));
  int64_t n = rg_numel(g, w);
  float *r[4];
  int same = 1;
  rg_stats st;
  for (int s = 0; s < 4; s++) {
    r[s] = malloc(sizeof(float) * (size_t)n);
    rg_step_begin(g);
    rg_zero_grad(g);
    rg_tensor h = rg_linear_act(g, x, w, b, RG_ACT_GELU);
    rg_backward(g, weigh(g, rg_linear(g, h, w2, RG_NONE)).loss);
    CHECK_ST(g, rg_read(g, rg_grad(g, w), r[s], sizeof(float) * (size_t)n), RG_OK);
    same &= !s || !memcmp(r[0], r[s], sizeof(float) * (size_t)n);
  }
  rg_stats_get(g, &st);
  CHECK(same, "gemm_tune: the eager, captured and replayed steps' gradients differ");
  CHECK(st.graph_replays >= 1, "gemm_tune: no graph replay in 4 identical steps");
  printf("%-12s %s  tuned products repeat bit for bit (eager, captured, replayed)\n",
         "tune-repeat", same && st.graph_replays >= 1 ? "PASS" : "FAIL");
  for (int s = 0; s < 4; s++) free(r[s]);
  CHECK_ST(g, rg_close(g), RG_OK);
}

static void run_attn_repeat(void) {
  attn_repeat(0);
  attn_repeat(1);
}

/* The backward fused into the cross-entropy forward node (autograd.c) gives the unfused
   nodes' bits at most of xent-kernels' shapes and at 9000 block rows: warp rows in one
   kernel (16-byte groups and scalar ones, ignored rows: the count kernel), block rows in
   the two kernels of one node; on F32 logits and on a linear's BF16 ones (BF16
   dlogits). */
static void run_xent_fused(void) {
  static const int64_t sh[][3] = {{4096, 96, 0}, {1000, 7, 1},    {3, 50304, 0},
                                  {5, 50301, 1}, {40, 1030, 0}, {9000, 1030, 1},
                                  {600, 2048, 1}};
  int ok = 1;
  for (int bf = 0; bf < 2; bf++)
    for (int i = 0; i < (int)(sizeof sh / sizeof sh[0]); i++) {
      rg_ctx *g = NULL;
      rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1, .bf16 = bf});
      CHECK(g != NULL, "xent-fused: no CUDA context");
      if (!g) return;
      char what[64];
      snprintf(what, sizeof what, "xent-fused %s [%lld, %lld]", bf ? "bf16" : "f32",
               (long long)sh[i][0], (long long)sh[i][1]);
      ok &= xent_fused_check(g, sh[i][0], sh[i][1], (int)sh[i][2], bf, what);
      CHECK_ST(g, rg_close(g), RG_OK);
    }
  printf("%-12s %s  dlogits from the forward node = the backward node's, bit for bit\n",
         "xent-fused", ok ? "PASS" : "FAIL");
}

/* A few AdamW steps of an MLP with clipping: loss trajectories and weights agree. */
static void run_training(void) {
  rg_options o = {.quiet = 1, .seed = 5};
  rg_ctx *ctx[2] = {NULL, NULL};
  float loss[2][8];
  float w[2][32 * 16];
  for (int d = 0; d < 2; d++) {
    o.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
    rg_open(&ctx[d], &o);
    rg_ctx *c = ctx[d];
    rg_tensor w1 = rg_param(c, "w1", RG_F32, D2(32, 16), normal(0.3f));
    rg_tensor b1 = rg_param(c, "b1", RG_F32, 1, (int64_t[]){32}, (rg_init){0});
    rg_tensor w2 = rg_param(c, "w2", RG_F32, D2(4, 32), normal(0.3f));
    rg_optim *opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f, .weight_decay = 0.1f});
    for (int s = 0; s < 8; s++) {
      float x[8 * 16];
      int32_t y[8];
      for (int i = 0; i < 8 * 16; i++) x[i] = (float)sin(i * 0.3 + s);
      for (int i = 0; i < 8; i++) y[i] = (i + s) % 4;
      rg_step_begin(c);
      rg_tensor h = rg_gelu(c, rg_linear(c, rg_input(c, RG_F32, D2(8, 16), x), w1, b1));
      rg_tensor l = rg_cross_entropy(c, rg_linear(c, h, w2, RG_NONE),
                                     rg_input(c, RG_I32, 1, (int64_t[]){8}, y));
      rg_backward(c, l);
      rg_clip_grad_norm(c, 0.5f);
      rg_optim_step(opt);
      rg_zero_grad(c);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
    }
    CHECK_ST(c, rg_read(c, w1, w[d], sizeof w[d]), RG_OK);
    CHECK(rg_optim_steps(opt) == 8, "steps counted on %s", rg_device_name(c));
    rg_optim_free(opt);
  }
  double e = nerr(loss[1], loss[0], 8), ew = nerr(w[1], w[0], 32 * 16);
  CHECK(e < 1e-5 && ew < 1e-5, "training: loss error %.3g, weight error %.3g", e, ew);
  printf("%-12s %s  loss error %.3g, weight error %.3g after 8 AdamW steps\n", "training",
         e < 1e-5 && ew < 1e-5 ? "PASS" : "FAIL", e, ew);
  for (int d = 0; d < 2; d++) CHECK_ST(ctx[d], rg_close(ctx[d]), RG_OK);
}

/* Step s of run_optim's and run_schedule's model: a new pass, its batch, the loss and
   its backward (gradients zeroed first); returns the loss. */
static rg_tensor mlp_step(rg_ctx *c, rg_tensor w1, rg_tensor b1, rg_tensor w2, int s) {
  float x[6 * 12];
  int32_t y[6];
  for (int i = 0; i < 6 * 12; i++) x[i] = (float)sin(i * 0.37 + 2 * s);
  for (int i = 0; i < 6; i++) y[i] = (i * 2 + s) % 5;
  rg_step_begin(c);
  rg_zero_grad(c);
  rg_tensor h = rg_gelu(c, rg_linear(c, rg_input(c, RG_F32, D2(6, 12), x), w1, b1));
  rg_tensor l = rg_cross_entropy(c, rg_linear(c, h, w2, RG_NONE),
                                 rg_input(c, RG_I32, 1, (int64_t[]){6}, y));
  rg_backward(c, l);
  return l;
}

/* The optimizer's nodes: S steps of an MLP, each on its own batch, that zero the
   gradients first (a ZERO_LIST: no step right before it to fold into), clip them and
   step AdamW or SGD with momentum. With dist the CUDA context is rank 0 of a world of
   one (rg_dist_init): where the build has NCCL its gradients go through ALLREDUCE nodes,
   which with one rank change no bit. Losses and weights agree as in training's case. */
static void run_optim(const char *name, int sgd, int dist, const rg_op *ops) {
  if (!want(name)) return;
  enum { S = 5 };
  float loss[2][S], w[2][24 * 12];
  unsigned char seen[RG_OP_COUNT] = {0};
  int nccl = 0; /* the CUDA context averages gradients itself */
  for (int d = 0; d < 2; d++) {
    rg_ctx *c = NULL;
    rg_open(&c, &(rg_options){.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU, .quiet = 1,
                              .seed = 7});
    CHECK(c != NULL, "%s: could not open the %s context", name, d ? "CUDA" : "CPU");
    if (!c) return;
    rg_tensor w1 = rg_param(c, "w1", RG_F32, D2(24, 12), normal(0.3f));
    rg_tensor b1 = rg_param(c, "b1", RG_F32, 1, (int64_t[]){24}, normal(0.1f));
    rg_tensor w2 = rg_param(c, "w2", RG_F32, D2(5, 24), normal(0.3f));
    rg_optim *opt = sgd ? rg_optim_sgd(c, &(rg_sgd_options){.lr = 5e-2f, .momentum = 0.9f,
                                                            .weight_decay = 1e-2f})
                        : rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f,
                                                                .weight_decay = 0.1f});
    if (d && dist) CHECK_ST(c, rg_dist_init(c, &(rg_dist_options){.world_size = 1}), RG_OK);
    nccl |= d && dist && c->be->dist_open;
    for (int s = 0; s < S; s++) {
      rg_tensor l = mlp_step(c, w1, b1, w2, s);
      rg_clip_grad_norm(c, 1.0f);
      rg_optim_step(opt);
      covers_note(c, 0, seen);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
    }
    CHECK_ST(c, rg_read(c, w1, w[d], sizeof w[d]), RG_OK);
    if (d && dist) CHECK_ST(c, rg_dist_close(c), RG_OK);
    rg_optim_free(opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  rg_op miss = covers_missing(ops, seen);
  int unrecorded = miss == RG_OP_ALLREDUCE && !nccl; /* a build without NCCL */
  CHECK(miss == RG_OP_COUNT || unrecorded, "%s: its RG_COVERS list has op %s, which its "
        "tapes lack", name, miss < RG_OP_COUNT ? rg_optab[miss].kernel : "");
  double e = nerr(loss[1], loss[0], S), ew = nerr(w[1], w[0], 24 * 12);
  CHECK(e < 1e-5 && ew < 1e-5, "%s: loss error %.3g, weight error %.3g", name, e, ew);
  printf("%-12s %s  loss error %.3g, weight error %.3g after %d steps%s\n", name,
         e < 1e-5 && ew < 1e-5 && (miss == RG_OP_COUNT || unrecorded) ? "PASS" : "FAIL", e,
         ew, S, unrecorded ? " (no NCCL in this build: no ALLREDUCE to compare)" : "");
}

/* A schedule's rate computed on the device: S identical AdamW steps under a cosine
   schedule with warm-up, gradients clipped by value and by norm, are captured once and
   replayed for every later step (1 capture, S - 2 replays), and each step's rate
   (rg_optim_lr) equals the host formula within 1e-6 on both backends; losses and weights
   agree as in run_optim's case. */
static void run_schedule(const rg_op *ops) {
  if (!want("schedule")) return;
  enum { S = 24 };
  rg_schedule q = {.kind = RG_SCHED_COSINE, .lr = 2e-2f, .min_lr = 1e-4f, .warmup = 4,
                   .total = 20};
  float loss[2][S], w[2][24 * 12];
  double worst = 0;
  unsigned char seen[RG_OP_COUNT] = {0};
  rg_stats st = {0};
  for (int d = 0; d < 2; d++) {
    rg_ctx *c = NULL;
    rg_open(&c, &(rg_options){.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU, .quiet = 1,
                              .seed = 7});
    CHECK(c != NULL, "schedule: could not open the %s context", d ? "CUDA" : "CPU");
    if (!c) return;
    rg_tensor w1 = rg_param(c, "w1", RG_F32, D2(24, 12), normal(0.3f));
    rg_tensor b1 = rg_param(c, "b1", RG_F32, 1, (int64_t[]){24}, normal(0.1f));
    rg_tensor w2 = rg_param(c, "w2", RG_F32, D2(5, 24), normal(0.3f));
    rg_optim *opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1.0f, .weight_decay = 0.1f});
    CHECK_ST(c, rg_optim_set_schedule(opt, &q), RG_OK);
    for (int s = 0; s < S; s++) {
      rg_tensor l = mlp_step(c, w1, b1, w2, s);
      rg_clip_grad_value(c, 0.05f);
      rg_clip_grad_norm(c, 1.0f);
      rg_optim_step(opt);
      covers_note(c, 0, seen);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
      double pi = 3.14159265358979323846, want_lr =
          s < q.warmup ? (double)q.lr * (s + 1) / (double)q.warmup
          : s >= q.total ? (double)q.min_lr
          : q.min_lr + ((double)q.lr - q.min_lr) *
                (1 + cos(pi * (double)(s - q.warmup) / (double)(q.total - q.warmup))) / 2;
      worst = fmax(worst, fabs(rg_optim_lr(opt) - want_lr) / want_lr);
    }
    CHECK_ST(c, rg_read(c, w1, w[d], sizeof w[d]), RG_OK);
    if (d) rg_stats_get(c, &st);
    rg_optim_free(opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  rg_op miss = covers_missing(ops, seen);
  CHECK(miss == RG_OP_COUNT, "schedule: its RG_COVERS list has op %s, which its tapes lack",
        miss < RG_OP_COUNT ? rg_optab[miss].kernel : "");
  double e = nerr(loss[1], loss[0], S), ew = nerr(w[1], w[0], 24 * 12);
  int graphs = st.graph_captures == 1 && st.graph_replays == S - 2;
  CHECK(graphs, "schedule: %llu captures, %llu replays over %d identical steps (want 1, %d); "
        "last miss: %s", (unsigned long long)st.graph_captures,
        (unsigned long long)st.graph_replays, S, S - 2, st.graph_miss_reason);
  CHECK(worst <= 1e-6, "schedule: rates off the formula by %.3g relative", worst);
  CHECK(e < 1e-5 && ew < 1e-5, "schedule: loss error %.3g, weight error %.3g", e, ew);
  printf("%-12s %s  %llu capture, %llu replays; rate error %.3g; loss error %.3g, weight "
         "error %.3g\n", "schedule",
         graphs && worst <= 1e-6 && e < 1e-5 && ew < 1e-5 && miss == RG_OP_COUNT ? "PASS"
                                                                               : "FAIL",
         (unsigned long long)st.graph_captures, (unsigned long long)st.graph_replays, worst, e,
         ew);
}

/* AdamW's four-wide path and its scalar tail (4099 and 3 x 4099 elements: chunks of 4096,
   a last chunk that is not a multiple of 4), with a linear's weight in bf16 mode so that
   the step also writes its BF16 shadow, which the next step's product reads. Both sides
   round the same operands, so the gradients and then the updates agree exactly; the
   losses, sums of 4099 rounded products in different orders, to a few bf16 units. A
   misplaced element or a stale shadow would be off by the step size, 0.1. */
static void run_adamw_vec(void) {
  enum { S = 4, N = 4099 };
  static float xa[N], x[2 * N], wa[2][N], ww[2][3 * N];
  float loss[2][S], r[6] = {0.5f, -1, 0.25f, 1, -0.5f, 0.75f};
  for (int i = 0; i < N; i++) xa[i] = (float)sin(0.1 * i), x[i] = (float)cos(0.3 * i);
  for (int i = 0; i < N; i++) x[N + i] = (float)sin(0.7 * i + 1);
  for (int d = 0; d < 2; d++) {
    rg_ctx *c = NULL;
    rg_open(&c, &(rg_options){.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU, .quiet = 1,
                              .seed = 3, .bf16 = 1});
    rg_tensor a = rg_param(c, "a", RG_F32, 1, (int64_t[]){N}, normal(1));
    rg_tensor w = rg_param(c, "w", RG_F32, D2(3, N), normal(1));
    rg_optim *opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 0.1f, .weight_decay = 0.1f});
    for (int s = 0; s < S; s++) {
      rg_step_begin(c);
      rg_tensor y = rg_linear(c, rg_input(c, RG_F32, D2(2, N), x), w, RG_NONE);
      rg_tensor l = rg_sum(c, rg_mul(c, y, rg_input(c, RG_F32, D2(2, 3), r)), RG_ALL_AXES, 0);
      l = rg_add(c, l, rg_sum(c, rg_mul(c, a, rg_input(c, RG_F32, 1, (int64_t[]){N}, xa)),
                              RG_ALL_AXES, 0));
      rg_backward(c, l);
      rg_optim_step(opt);
      rg_zero_grad(c);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
    }
    CHECK_ST(c, rg_read(c, a, wa[d], sizeof wa[d]), RG_OK);
    CHECK_ST(c, rg_read(c, w, ww[d], sizeof ww[d]), RG_OK);
    rg_optim_free(opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  double el = nerr(loss[1], loss[0], S), ea = nerr(wa[1], wa[0], N);
  double ew = nerr(ww[1], ww[0], 3 * N);
  int ok = el < 1e-2 && ea < 1e-6 && ew < 1e-6;
  CHECK(ok, "adamw-vec: loss error %.3g, weight errors %.3g (a), %.3g (w)", el, ea, ew);
  printf("%-12s %s  loss error %.3g, weight errors %.3g, %.3g after %d steps\n", "adamw-vec",
         ok ? "PASS" : "FAIL", el, ea, ew, S);
}

/* A 16-32-4 MLP with AdamW for the checkpoint case; the batch of step s is a function
   of s. */
typedef struct ck { rg_ctx *c; rg_tensor w1, b1, w2; rg_optim *opt; } ck;

static ck ck_open(rg_device dev, uint64_t seed) {
  ck m = {NULL, {0}, {0}, {0}, NULL};
  rg_open(&m.c, &(rg_options){.device = dev, .quiet = 1, .seed = seed});
  m.w1 = rg_param(m.c, "w1", RG_F32, D2(32, 16), normal(0.3f));
  m.b1 = rg_param(m.c, "b1", RG_F32, 1, (int64_t[]){32}, (rg_init){0});
  m.w2 = rg_param(m.c, "w2", RG_F32, D2(4, 32), normal(0.3f));
  m.opt = rg_optim_adamw(m.c, &(rg_adamw_options){.lr = 1e-2f, .weight_decay = 0.1f});
  return m;
}

static float ck_step(ck *m, int s) {
  float x[8 * 16], l = -1;
  int32_t y[8];
  for (int i = 0; i < 8 * 16; i++) x[i] = (float)cos(i * 0.21 + s);
  for (int i = 0; i < 8; i++) y[i] = (i * 3 + s) % 4;
  rg_ctx *c = m->c;
  rg_step_begin(c);
  rg_tensor h = rg_relu(c, rg_linear(c, rg_input(c, RG_F32, D2(8, 16), x), m->w1, m->b1));
  rg_tensor loss = rg_cross_entropy(c, rg_linear(c, h, m->w2, RG_NONE),
                                    rg_input(c, RG_I32, 1, (int64_t[]){8}, y));
  rg_backward(c, loss);
  rg_optim_step(m->opt);
  rg_zero_grad(c);
  CHECK_ST(c, rg_item(c, loss, &l), RG_OK);
  return l;
}

static void ck_read(ck *m, float *w) { /* 512 + 32 + 128 floats */
  CHECK_ST(m->c, rg_read(m->c, m->w1, w, 512 * 4), RG_OK);
  CHECK_ST(m->c, rg_read(m->c, m->b1, w + 512, 32 * 4), RG_OK);
  CHECK_ST(m->c, rg_read(m->c, m->w2, w + 544, 128 * 4), RG_OK);
}

static void ck_close(ck *m) {
  rg_optim_free(m->opt);
  CHECK_ST(m->c, rg_close(m->c), RG_OK);
}

/* A checkpoint moves between the backends exactly: CPU -> CUDA and CUDA -> CPU loads give
   bit-identical weights, and training continued on both after the load agrees. */
static void run_checkpoint(void) {
  char a[256], b[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(a, sizeof a, "%s/rg_cuda_a_%ld.safetensors", tmp ? tmp : "/tmp", (long)getpid());
  snprintf(b, sizeof b, "%s/rg_cuda_b_%ld.safetensors", tmp ? tmp : "/tmp", (long)getpid());
  float wc[672], wg[672], lc[4], lg[4];
  ck cpu = ck_open(RG_DEVICE_CPU, 5), gpu = ck_open(RG_DEVICE_CUDA, 99);
  for (int s = 0; s < 4; s++) ck_step(&cpu, s);
  CHECK_ST(cpu.c, rg_save(cpu.c, a, cpu.opt), RG_OK);
  CHECK_ST(gpu.c, rg_load(gpu.c, a, gpu.opt), RG_OK);
  ck_read(&cpu, wc);
  ck_read(&gpu, wg);
  int exact_in = !memcmp(wc, wg, sizeof wc) && rg_optim_steps(gpu.opt) == 4;
  CHECK(exact_in, "CPU -> CUDA checkpoint: weights bit-identical, 4 steps");
  for (int s = 4; s < 8; s++) lc[s - 4] = ck_step(&cpu, s), lg[s - 4] = ck_step(&gpu, s);
  double e = nerr(lg, lc, 4);
  CHECK(e < 1e-5, "training after the load: loss error %.3g", e);
  CHECK_ST(gpu.c, rg_save(gpu.c, b, gpu.opt), RG_OK);
  ck back = ck_open(RG_DEVICE_CPU, 7);
  CHECK_ST(back.c, rg_load(back.c, b, back.opt), RG_OK);
  ck_read(&gpu, wg);
  ck_read(&back, wc);
  int exact_out = !memcmp(wc, wg, sizeof wc) && rg_optim_steps(back.opt) == 8;
  CHECK(exact_out, "CUDA -> CPU checkpoint: weights bit-identical, 8 steps");
  printf("%-12s %s  CPU->CUDA->CPU loads bit-exact; 4 steps after: loss error %.3g\n",
         "checkpoint", exact_in && exact_out && e < 1e-5 ? "PASS" : "FAIL", e);
  ck_close(&cpu), ck_close(&gpu), ck_close(&back);
  unlink(a), unlink(b);
}

/* Activation checkpointing: a GPT with dropout, every block a region, trained S identical
   steps beside the same GPT without regions (f32 and bf16, cuDNN's attention included
   where the build has it; the loss's head whole, and in 8 chunks of 128 rows, each a
   region too: rg_gpt_config.head_chunk): the same losses and weights bit for bit after S
   AdamW steps (so the same gradients), one graph captured and replayed as without
   regions, and a lower pass-pool peak. */
static void run_ckpt_act(void) {
  enum { S = 5, B = 2, T = 512, V = 97 };
  static int32_t idx[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) idx[i] = (i * 7) % V, tg[i] = (i * 11 + 3) % V;
  for (int run = 0; run < 4; run++) {
    int bf = run & 1, chunks = run >> 1;
    const char *what = chunks ? (bf ? "bf16, head in chunks" : "f32, head in chunks")
                              : (bf ? "bf16" : "f32");
    rg_ctx *c[2] = {NULL, NULL};
    rg_gpt *g[2] = {NULL, NULL};
    rg_optim *opt[2] = {NULL, NULL};
    float loss[2][S];
    rg_stats st[2];
    for (int k = 0; k < 2; k++) { /* k = 1: every block a region */
      rg_open(&c[k], &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1, .seed = 3, .bf16 = bf});
      CHECK(c[k] != NULL, "ckpt-act: no CUDA context");
      if (!c[k]) return;
      rg_gpt_config cfg = {.vocab = V, .block = T, .layers = 3, .width = 128, .heads = 2,
                           .dropout = 0.1f, .checkpoint = k,
                           .head_chunk = chunks ? 128 * V : 0};
      g[k] = rg_gpt_new(c[k], &cfg, NULL);
      opt[k] = rg_optim_adamw(c[k], &(rg_adamw_options){.lr = 1e-3f});
      for (int s = 0; s < S; s++) {
        rg_step_begin(c[k]);
        rg_tensor l = rg_gpt_loss(g[k], rg_input(c[k], RG_I32, D2(B, T), idx),
                                  rg_input(c[k], RG_I32, D2(B, T), tg));
        rg_backward(c[k], l);
        rg_optim_step(opt[k]);
        rg_zero_grad(c[k]);
        CHECK_ST(c[k], rg_item(c[k], l, &loss[k][s]), RG_OK);
      }
      rg_stats_get(c[k], &st[k]);
    }
    int same = !memcmp(loss[0], loss[1], sizeof loss[0]);
    for (int i = 0; i < rg_param_count(c[0]); i++) {
      size_t bytes = sizeof(float) * (size_t)rg_numel(c[0], rg_param_at(c[0], i));
      float *v[2] = {malloc(bytes), malloc(bytes)};
      for (int k = 0; k < 2; k++)
        CHECK_ST(c[k], rg_read(c[k], rg_param_at(c[k], i), v[k], bytes), RG_OK);
      same &= !memcmp(v[0], v[1], bytes);
      free(v[0]);
      free(v[1]);
    }
    int graphs = st[1].graph_captures == st[0].graph_captures &&
                 st[1].graph_replays == st[0].graph_replays && st[1].graph_replays >= 1;
    int lower = st[1].pass_peak < st[0].pass_peak;
    CHECK(same, "ckpt-act %s: losses or weights differ with regions (last loss %.9g, %.9g)",
          what, loss[0][S - 1], loss[1][S - 1]);
    CHECK(graphs, "ckpt-act %s: %llu captures, %llu replays with regions, %llu, %llu "
          "without", what, (unsigned long long)st[1].graph_captures,
          (unsigned long long)st[1].graph_replays, (unsigned long long)st[0].graph_captures,
          (unsigned long long)st[0].graph_replays);
    CHECK(lower, "ckpt-act %s: pass peak %zu with regions, %zu without", what,
          st[1].pass_peak, st[0].pass_peak);
    printf("%-12s %s  %s: losses and weights bit for bit after %d steps, %llu replays, pass "
           "peak %zu -> %zu\n", "ckpt-act", same && graphs && lower ? "PASS" : "FAIL", what,
           S, (unsigned long long)st[1].graph_replays, st[0].pass_peak, st[1].pass_peak);
    for (int k = 0; k < 2; k++) {
      rg_optim_free(opt[k]);
      rg_gpt_free(g[k]);
      CHECK_ST(c[k], rg_close(c[k]), RG_OK);
    }
  }
}

/* Identical steps replay one captured graph from the third step on, and the replays see
   each step's new batch, learning rate and dropout mask: the CUDA loss trajectory equals
   the CPU's, which has no graphs. */
static void run_graphs(void) {
  enum { S = 7 };
  rg_options o = {.quiet = 1, .seed = 9};
  float loss[2][S];
  rg_stats st[2];
  for (int d = 0; d < 2; d++) {
    o.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
    rg_ctx *c = NULL;
    rg_open(&c, &o);
    rg_tensor w1 = rg_param(c, "w1", RG_F32, D2(32, 16), normal(0.3f));
    rg_tensor w2 = rg_param(c, "w2", RG_F32, D2(4, 32), normal(0.3f));
    rg_optim *opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f});
    for (int s = 0; s < S; s++) {
      float x[8 * 16];
      int32_t y[8];
      for (int i = 0; i < 8 * 16; i++) x[i] = (float)cos(i * 0.7 + 3 * s);
      for (int i = 0; i < 8; i++) y[i] = (i * 3 + s) % 4;
      rg_step_begin(c);
      rg_optim_set_lr(opt, 1e-2f / (float)(s + 1));
      rg_tensor h = rg_dropout(c, rg_relu(c, rg_linear(c, rg_input(c, RG_F32, D2(8, 16), x), w1, RG_NONE)), 0.2f);
      rg_tensor l = rg_cross_entropy(c, rg_linear(c, h, w2, RG_NONE),
                                     rg_input(c, RG_I32, 1, (int64_t[]){8}, y));
      rg_backward(c, l);
      rg_optim_step(opt);
      rg_zero_grad(c);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
    }
    rg_stats_get(c, &st[d]);
    rg_optim_free(opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  double e = nerr(loss[1], loss[0], S);
  CHECK(st[1].graph_captures == 1 && st[1].graph_replays == S - 2,
        "graphs: %llu captures, %llu replays over %d identical steps (want 1, %d); last miss: %s",
        (unsigned long long)st[1].graph_captures, (unsigned long long)st[1].graph_replays, S,
        S - 2, st[1].graph_miss_reason);
  CHECK(e < 1e-5, "replayed steps follow the CPU trajectory: error %.3g", e);
  printf("%-12s %s  %llu capture, %llu replays, loss error vs CPU %.3g\n", "graphs",
         st[1].graph_captures == 1 && st[1].graph_replays == S - 2 && e < 1e-5 ? "PASS" : "FAIL",
         (unsigned long long)st[1].graph_captures, (unsigned long long)st[1].graph_replays, e);
}

/* A replay-buffer step (push new entries, sample on the device, gather, fit) replays one
   captured graph from the third step on, and each replay pushes to and draws from the ring
   as it then is: the CUDA losses and the ring's final contents equal the CPU's. Then a
   gather out of range and a sample of an empty ring fail the drain as on the CPU. */
static void run_ring_replay(void) {
  enum { S = 9, K = 4, B = 32, CAP = 16 };
  rg_options o = {.quiet = 1, .seed = 4};
  float loss[2][S], table[2][CAP * 3];
  int64_t count[2] = {0, 0};
  rg_stats st[2];
  for (int d = 0; d < 2; d++) {
    o.device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
    rg_ctx *c = NULL;
    rg_open(&c, &o);
    rg_tensor ring = rg_ring_new(c, RG_F32, CAP, 3);
    rg_tensor w = rg_param(c, "w", RG_F32, D2(1, 2), normal(0.3f));
    rg_optim *opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f});
    for (int s = 0; s < S; s++) {
      float t[K * 3];
      for (int i = 0; i < K; i++) {
        float x0 = (float)cos(i + 5.0 * s), x1 = (float)sin(2.0 * i + s);
        t[3 * i] = x0, t[3 * i + 1] = x1, t[3 * i + 2] = x0 - 2 * x1;
      }
      rg_step_begin(c);
      rg_ring_push(c, ring, rg_input(c, RG_F32, D2(K, 3), t));
      rg_tensor b = rg_ring_gather(c, ring, rg_ring_sample(c, ring, B));
      rg_tensor l = rg_mse(c, rg_linear(c, rg_slice(c, b, 1, 0, 2), w, RG_NONE),
                           rg_slice(c, b, 1, 2, 1));
      rg_backward(c, l);
      rg_optim_step(opt);
      rg_zero_grad(c);
      CHECK_ST(c, rg_item(c, l, &loss[d][s]), RG_OK);
    }
    rg_stats_get(c, &st[d]);
    CHECK_ST(c, rg_ring_count(c, ring, &count[d]), RG_OK);
    CHECK_ST(c, rg_read(c, ring, table[d], sizeof table[d]), RG_OK);
    if (d) { /* the faults, on CUDA */
      rg_step_begin(c);
      float v[2 * 3];
      rg_tensor bad = rg_ring_gather(c, ring, rg_input(c, RG_I32, 1, (int64_t[]){2},
                                                       (int32_t[]){0, 99}));
      CHECK(rg_read(c, bad, v, sizeof v) == RG_ERR_MISUSE && msg_has(c, "rg_ring_gather") &&
            msg_has(c, "index 99 at position 1") && msg_has(c, "[0, 16)"),
            "ring index on CUDA: %s", rg_errmsg(c));
      rg_clear_error(c);
      rg_step_begin(c);
      int32_t i3[3];
      rg_tensor none = rg_ring_sample(c, rg_ring_new(c, RG_F32, 2, 2), 3);
      CHECK(rg_read(c, none, i3, sizeof i3) == RG_ERR_MISUSE && msg_has(c, "empty"),
            "empty ring on CUDA: %s", rg_errmsg(c));
      rg_clear_error(c);
    }
    rg_optim_free(opt);
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  double e = nerr(loss[1], loss[0], S);
  int same = count[0] == count[1] && !memcmp(table[0], table[1], sizeof table[0]);
  int graphs = st[1].graph_captures == 1 && st[1].graph_replays == S - 2;
  CHECK(graphs, "ring-replay: %llu captures, %llu replays over %d identical steps (want 1, "
        "%d); last miss: %s", (unsigned long long)st[1].graph_captures,
        (unsigned long long)st[1].graph_replays, S, S - 2, st[1].graph_miss_reason);
  CHECK(e < 1e-5, "ring-replay: loss error vs CPU %.3g", e);
  CHECK(same, "ring-replay: the ring differs from the CPU's (count %lld vs %lld)",
        (long long)count[1], (long long)count[0]);
  printf("%-12s %s  %llu capture, %llu replays, loss error vs CPU %.3g, ring %s\n",
         "ring-replay", graphs && e < 1e-5 && same ? "PASS" : "FAIL",
         (unsigned long long)st[1].graph_captures, (unsigned long long)st[1].graph_replays, e,
         same ? "equal" : "differs");
}

/* Caller faults found by a kernel fail the drain at that node, as on the CPU. */
static void run_faults(void) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  rg_tensor t = rg_param(g, "t", RG_F32, D2(4, 3), normal(1));
  int32_t idx[3] = {1, 7, 2};
  rg_tensor w = rg_param(g, "w", RG_F32, D2(2, 3), normal(1));
  rg_tensor b = rg_param(g, "b", RG_F32, 1, (int64_t[]){2}, normal(1));
  rg_tensor lg = rg_param(g, "lg", RG_F32, 1, (int64_t[]){3}, normal(1));
  rg_tensor lb = rg_param(g, "lb", RG_F32, 1, (int64_t[]){3}, normal(1));
  rg_tensor e = rg_embedding(g, t, rg_input(g, RG_I32, 1, (int64_t[]){3}, idx));
  rg_tensor s = rg_sum(g, rg_linear(g, e, w, b), RG_ALL_AXES, 0);
  /* a layernorm whose backward would add dgamma = x xhat = (-4/3, -2/3, 20/3) rstd and
     dbeta = x = (1, 2, 4) (its incoming gradient is x): no zero among them */
  rg_tensor xn = rg_input(g, RG_F32, 2, (int64_t[]){1, 3}, (float[]){1, 2, 4});
  rg_tensor ln = rg_mul(g, rg_layernorm(g, xn, lg, lb, 1e-5f), xn);
  s = rg_add(g, s, rg_sum(g, ln, RG_ALL_AXES, 0));
  CHECK_ST(g, rg_backward(g, s), RG_OK);
  float v;
  CHECK(rg_item(g, s, &v) == RG_ERR_MISUSE && msg_has(g, "rg_embedding") && msg_has(g, "7"),
        "bad index on CUDA: %s", rg_errmsg(g));
  rg_clear_error(g);
  /* the gradients the failed step folded into a GEMM (w), a column sum (b) and a
     layernorm's backward (lg, lb) are untouched: they skip their adds after the fault */
  float gw[6] = {1}, gb[2] = {1}, glg[3] = {1}, glb[3] = {1};
  CHECK_ST(g, rg_read(g, rg_grad(g, w), gw, sizeof gw), RG_OK);
  CHECK_ST(g, rg_read(g, rg_grad(g, b), gb, sizeof gb), RG_OK);
  CHECK_ST(g, rg_read(g, rg_grad(g, lg), glg, sizeof glg), RG_OK);
  CHECK_ST(g, rg_read(g, rg_grad(g, lb), glb, sizeof glb), RG_OK);
  int nonzero = 0;
  for (int i = 0; i < 6; i++)
    nonzero += gw[i] != 0 || (i < 2 && gb[i] != 0) || (i < 3 && (glg[i] != 0 || glb[i] != 0));
  CHECK(nonzero == 0, "a failed step left %d gradient elements of w, b, lg and lb changed",
        nonzero);
  /* a bad target: the forward names it; the step's gradients stay untouched (two weight
     gradients after the fault: the second GEMM reuses the first's scalars) */
  CHECK_ST(g, rg_step_begin(g), RG_OK);
  int32_t tg[4] = {0, 1, 9, -3};
  rg_tensor w0 = rg_param(g, "w0", RG_F32, D2(3, 3), normal(1));
  rg_tensor h0 = rg_linear(g, rg_param(g, "in", RG_F32, D2(4, 3), normal(1)), w0, RG_NONE);
  rg_tensor xl = rg_linear(g, h0, w, b);
  rg_tensor ce = rg_cross_entropy(g, xl, rg_input(g, RG_I32, 1, (int64_t[]){4}, tg));
  CHECK_ST(g, rg_backward(g, ce), RG_OK);
  CHECK(rg_item(g, ce, &v) == RG_ERR_MISUSE && msg_has(g, "rg_cross_entropy") &&
            msg_has(g, "target 9 at row 2"),
        "bad target on CUDA: %s", rg_errmsg(g));
  rg_clear_error(g);
  float gw0[9] = {1};
  CHECK_ST(g, rg_read(g, rg_grad(g, b), gb, sizeof gb), RG_OK);
  CHECK_ST(g, rg_read(g, rg_grad(g, w), gw, sizeof gw), RG_OK);
  CHECK_ST(g, rg_read(g, rg_grad(g, w0), gw0, sizeof gw0), RG_OK);
  nonzero = 0;
  for (int i = 0; i < 9; i++) nonzero += (i < 2 && gb[i] != 0) || (i < 6 && gw[i] != 0) || gw0[i] != 0;
  CHECK(nonzero == 0, "a failed cross-entropy step changed %d elements of b's, w's and w0's "
        "gradients", nonzero);
  CHECK_ST(g, rg_step_begin(g), RG_OK);
  rg_tensor ok = rg_sum(g, t, RG_ALL_AXES, 0);
  CHECK_ST(g, rg_item(g, ok, &v), RG_OK);
  printf("%-12s %s  %s\n", "faults", failed() ? "FAIL" : "PASS",
         "bad index and target reported, gradients untouched, context recovers");
  CHECK_ST(g, rg_close(g), RG_OK);
}

/* A head size past the tiled kernels' bound fails the drain with RG_ERR_UNSUPPORTED,
   naming D and the bound; the context recovers. */
static void run_attn_limit(void) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  rg_tensor q = rg_param(g, "q", RG_F32, D4(1, 1, 4, 129), normal(1));
  rg_tensor s = rg_sum(g, rg_attention(g, q, q, q, 1), RG_ALL_AXES, 0);
  float v;
  int ok = rg_item(g, s, &v) == RG_ERR_UNSUPPORTED && msg_has(g, "D = 129") &&
           msg_has(g, "128");
  CHECK(ok, "attention with D = 129 on CUDA: %s", rg_errmsg(g));
  rg_clear_error(g);
  CHECK_ST(g, rg_step_begin(g), RG_OK);
  rg_tensor x = rg_param(g, "qkv", RG_F32, D3(1, 4, 3 * 129), normal(1));
  s = rg_sum(g, rg_attention_qkv(g, x, 1, 1), RG_ALL_AXES, 0);
  int ok2 = rg_item(g, s, &v) == RG_ERR_UNSUPPORTED && msg_has(g, "D = 129") &&
            msg_has(g, "rg_attention_qkv");
  CHECK(ok2, "rg_attention_qkv with D = 129 on CUDA: %s", rg_errmsg(g));
  ok = ok && ok2;
  rg_clear_error(g);
  CHECK_ST(g, rg_step_begin(g), RG_OK);
  CHECK_ST(g, rg_item(g, rg_sum(g, q, RG_ALL_AXES, 0), &v), RG_OK);
  printf("%-12s %s  D = 129 is RG_ERR_UNSUPPORTED, context recovers\n", "attn-limit",
         ok && rg_error(g) == RG_OK ? "PASS" : "FAIL");
  CHECK_ST(g, rg_close(g), RG_OK);
}

/* A real device OOM (a 512 GiB parameter) is RG_ERR_OOM like a budget, with nothing lost;
   a step that reads only its loss makes one device->host copy of 4 bytes. */
static void run_oom_and_sync(void) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  rg_tensor w = rg_param(g, "w", RG_F32, 1, (int64_t[]){4}, (rg_init){RG_INIT_CONST, 3, 0});
  rg_tensor huge = rg_param(g, "huge", RG_F32, 1, (int64_t[]){(int64_t)1 << 37}, (rg_init){0});
  CHECK(!huge.id && rg_error(g) == RG_ERR_OOM, "512 GiB parameter: %s (%s)",
        rg_status_str(rg_error(g)), rg_errmsg(g));
  rg_clear_error(g);
  float v[4];
  CHECK(rg_read(g, w, v, sizeof v) == RG_OK && v[3] == 3, "existing parameter intact");
  rg_optim *opt = rg_optim_adamw(g, NULL);
  rg_stats s0, s1;
  for (int s = 0; s < 4; s++) {
    if (s == 3) rg_stats_get(g, &s0);
    rg_step_begin(g);
    rg_tensor l = rg_sum(g, rg_mul(g, w, w), RG_ALL_AXES, 0);
    rg_backward(g, l);
    rg_optim_step(opt);
    float lv;
    CHECK_ST(g, rg_item(g, l, &lv), RG_OK);
  }
  rg_stats_get(g, &s1);
  CHECK(s1.down.count - s0.down.count == 1 && s1.down.bytes - s0.down.bytes == 4 &&
            s1.drains - s0.drains == 1,
        "a replayed step: %llu downloads, %llu bytes, %llu drains",
        (unsigned long long)(s1.down.count - s0.down.count),
        (unsigned long long)(s1.down.bytes - s0.down.bytes),
        (unsigned long long)(s1.drains - s0.drains));
  printf("%-12s %s  device OOM reported and recovered; one 4-byte download per step\n", "oom+sync",
         failed() ? "FAIL" : "PASS");
  rg_optim_free(opt);
  CHECK_ST(g, rg_close(g), RG_OK);
}

/* The tiny GPT-2 that transformers made (tests/data/hf_gpt2_tiny) loaded on the GPU gives
   transformers' logits within 1e-4 (strict F32 products) and its greedy continuation
   (rg_gpt_generate, the decode steps replayed as graphs), and exported from the GPU it
   loads back to the same logits. */
static void run_hf(void) {
  rg_ctx *g = NULL;
  rg_open(&g, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  if (!g) return;
  char model[4096];
  hf_path(model, sizeof model, "model.safetensors");
  for (int pass = 0; pass < 2; pass++) {
    const char *path = pass ? "hf_export/model.safetensors" : model;
    rg_gpt *gpt = rg_gpt_load_hf(g, path, 0, pass ? "again." : NULL);
    CHECK(gpt != NULL, "hf: rg_gpt_load_hf(%s) on CUDA: %s", path, rg_errmsg(g));
    double err = gpt ? hf_logits_err(g, gpt) : -1;
    CHECK(err >= 0 && err <= 1e-4, "hf: %s on CUDA: max |logit - transformers'| %.3g", path,
          err);
    printf("%-14s max |logit - transformers'| %.2e (%s)\n", pass ? "hf-exported" : "hf", err,
           path);
    if (!pass && gpt) { /* generation on the GPU: transformers' tokens, decode steps replayed */
      rg_stats s0, s1;
      rg_stats_get(g, &s0);
      int diff = hf_greedy_diff(g, gpt);
      rg_stats_get(g, &s1);
      CHECK(diff == 0, "hf: greedy generation on CUDA: %d of 16 tokens differ from "
            "transformers'", diff);
      CHECK(s1.graph_replays - s0.graph_replays >= 4, "hf: 11 decode steps replayed %llu "
            "graphs (a step's nodes must be the same at every position)",
            (unsigned long long)(s1.graph_replays - s0.graph_replays));
      printf("%-14s greedy tokens: %d of 16 differ; %llu graph replays\n", "hf-generate", diff,
             (unsigned long long)(s1.graph_replays - s0.graph_replays));
    }
    if (!pass && gpt) {
      mkdir("hf_export", 0755);
      CHECK_ST(g, rg_gpt_save_hf(gpt, "hf_export/model.safetensors"), RG_OK);
    }
    rg_gpt_free(gpt);
  }
  CHECK_ST(g, rg_close(g), RG_OK);
}

int main(int argc, char **argv) {
  only = argv + 1, nonly = argc - 1;
  rg_ctx *probe = NULL;
  rg_status st = rg_open(&probe, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  if (st != RG_OK) {
    printf("test_cuda: skipped (%s: no CUDA GPU or no CUDA backend in this build)\n",
           rg_status_str(st));
    return SKIP_EXIT;
  }
  printf("device: %s\n", rg_device_name(probe));
  rg_close(probe);
  struct { const char *name; build_fn f; double tol; const rg_op *covers; } cases[] = {
      {"add", c_add, 1e-6, RG_COVERS(RG_OP_UPLOAD, RG_OP_ADD, RG_OP_SUM_TO_ACC, RG_OP_ACCUM)},
      {"sub", c_sub, 1e-6, RG_COVERS(RG_OP_SUB, RG_OP_NEG)},
      {"mul", c_mul, 1e-6, RG_COVERS(RG_OP_MUL)},
      {"div", c_div, 1e-6, RG_COVERS(RG_OP_DIV, RG_OP_EXP, RG_OP_SUM_TO)},
      {"unary", c_unary, 1e-5,
       RG_COVERS(RG_OP_SCALE, RG_OP_POW, RG_OP_CLAMP, RG_OP_NEG, RG_OP_EXP, RG_OP_LOG,
                 RG_OP_SQRT, RG_OP_RELU, RG_OP_GELU, RG_OP_SILU, RG_OP_SIGMOID, RG_OP_TANH,
                 RG_OP_CLAMP_BWD, RG_OP_RELU_BWD, RG_OP_GELU_BWD, RG_OP_SILU_BWD,
                 RG_OP_SIGMOID_BWD, RG_OP_TANH_BWD)},
      {"reduce", c_reduce, 1e-5,
       RG_COVERS(RG_OP_SUM, RG_OP_MEAN, RG_OP_MAX, RG_OP_EXPAND, RG_OP_MAX_BWD)},
      {"softmax", c_softmax, 1e-5,
       RG_COVERS(RG_OP_SOFTMAX, RG_OP_LOG_SOFTMAX, RG_OP_SOFTMAX_BWD, RG_OP_LOG_SOFTMAX_BWD)},
      {"softmax-wide", c_softmax_wide, 1e-5,
       RG_COVERS(RG_OP_SOFTMAX, RG_OP_LOG_SOFTMAX, RG_OP_SOFTMAX_BWD, RG_OP_LOG_SOFTMAX_BWD)},
      {"matmul", c_matmul, 1e-5, RG_COVERS(RG_OP_MATMUL)},
      {"linear", c_linear, 1e-5, RG_COVERS(RG_OP_LINEAR, RG_OP_MATMUL_ACC)},
      {"linear-act", c_linear_act, 1e-5,
       RG_COVERS(RG_OP_LINEAR_ACT, RG_OP_CAST, RG_OP_RELU_BWD, RG_OP_GELU_BWD)},
      {"dgelu", c_dgelu, 1e-5, RG_COVERS(RG_OP_MATMUL_DGELU)},
      {"norms", c_norms, 1e-5,
       RG_COVERS(RG_OP_LAYERNORM, RG_OP_RMSNORM, RG_OP_LAYERNORM_BWD, RG_OP_RMSNORM_BWD)},
      {"norm-kernels", c_norm_kernels, 1e-5,
       RG_COVERS(RG_OP_LAYERNORM, RG_OP_RMSNORM, RG_OP_LAYERNORM_BWD, RG_OP_RMSNORM_BWD)},
      {"norm-fold", c_norm_fold, 1e-5, RG_COVERS(RG_OP_LAYERNORM_BWD, RG_OP_RMSNORM_BWD)},
      {"add-norm", c_add_norm, 1e-5, RG_COVERS(RG_OP_ADD_LAYERNORM, RG_OP_LAYERNORM_BWD)},
      {"embedding", c_embedding, 1e-6, RG_COVERS(RG_OP_EMBEDDING, RG_OP_EMBEDDING_BWD)},
      {"embedding-rep", c_embedding_rep, 1e-6, RG_COVERS(RG_OP_EMBEDDING, RG_OP_EMBEDDING_BWD)},
      {"embedding-big", c_embedding_big, 1e-6, RG_COVERS(RG_OP_EMBEDDING, RG_OP_EMBEDDING_BWD)},
      {"attention", c_attention, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"attn-gpt", c_attn_gpt, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"attn-odd", c_attn_odd, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"attn-wide", c_attn_wide, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"attn-long", c_attn_long, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"attn-qkv", c_attn_qkv, 1e-5, RG_COVERS(RG_OP_ATTENTION_QKV, RG_OP_ATTENTION_QKV_BWD)},
      {"attn-mask", c_attn_mask, 1e-5, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
      {"colsum", c_colsum, 1e-6, RG_COVERS(RG_OP_MEAN, RG_OP_SUM_TO_ACC)},
      {"xent+mse", c_xent, 1e-5,
       RG_COVERS(RG_OP_CROSS_ENTROPY, RG_OP_MSE, RG_OP_CROSS_ENTROPY_BWD)},
      {"xent-kernels", c_xent_kernels, 1e-5,
       RG_COVERS(RG_OP_CROSS_ENTROPY, RG_OP_CROSS_ENTROPY_BWD)},
      {"shape", c_shape, 1e-6,
       RG_COVERS(RG_OP_COPY, RG_OP_PERMUTE, RG_OP_SLICE, RG_OP_CONCAT, RG_OP_CAST,
                 RG_OP_SLICE_BWD)},
      {"dropout", c_dropout, 1e-6, RG_COVERS(RG_OP_DROPOUT)},
      {"gpt", c_gpt, 1e-4, NULL},
      {"bf16", c_bf16, 1e-5, RG_COVERS(RG_OP_MATMUL, RG_OP_LINEAR, RG_OP_CAST)},
      {"argmax", c_argmax, 1e-6, RG_COVERS(RG_OP_ARGMAX)},
      {"seed", c_seed, 1e-5, RG_COVERS(RG_OP_FILL)},
      {"decode", c_decode, 1e-5,
       RG_COVERS(RG_OP_KV_WRITE, RG_OP_ATTENTION_CACHED, RG_OP_SAMPLE, RG_OP_FILL)},
      {"ring", c_ring, 1e-6,
       RG_COVERS(RG_OP_RING_PUSH, RG_OP_RING_GATHER, RG_OP_RING_SAMPLE, RG_OP_FILL)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(cases[i].name, cases[i].f, cases[i].tol, cases[i].covers);
  /* TF32 keeps 10 of 23 mantissa bits in the products: relative errors ~ 2^-11 per term,
     ~5e-4 normalised over sums of 40-301 terms; a wrong layout would be O(1). */
  run_case_mode("tf32-dW", c_tf32, 3e-3, 1);
  run_case_mode("tf32-dW-big", c_tf32_big, 3e-3, 1);
  /* The tensor-core attention against the CPU's f32. bf16 keeps 8 significant bits, so
     each rounded operand (q, k, v, g, p, ds) is off by up to 2^-9 = 0.2%: the scores and
     p are off by ~0.3%, o by ~0.5% (p and v rounded again), and dq, dk by ~1% (ds =
     p (dp - delta) meets both errors, then is rounded). 2e-2 is twice that, still far
     below the O(1) error of a wrong row, tile or mask. That is resgrad's kernels
     (attn-bf16-own); cuDNN's forward, which runs the T = 1024 cases when built with it,
     rounds p / l rather than p to bf16 and sums p v in its own order: measured 2.4e-2
     there, hence 3e-2. */
  run_case_mode("attn-bf16", c_attn_tc, 3e-2, 2);
  no_cudnn = 1;
  run_case_mode("attn-bf16-own", c_attn_tc, 2e-2, 2);
  no_cudnn = 0;
  run_case_mode("attn-f32", c_attn_tc, 1e-5, 0); /* the same shapes, exact path: tight */
  /* the masked mma kernels (masked calls never go to cuDNN), with attn-bf16-own's bound */
  run_case_mode("attn-mask-bf16", c_attn_mask, 2e-2, 2);
  /* bf16 activations on both sides: both round each product and norm once, so they differ
     where their F32 sums (in different orders) round to neighbouring bf16 values, 2^-8
     relative, on a few elements, and by the CUDA attention's bf16 probabilities. */
  run_case_mode("bf16-linact", c_linear_act, 1e-2, 3);
  run_case_mode("bf16-dgelu", c_dgelu, 1e-2, 3);
  run_case_mode("bf16-norms", c_norm_kernels, 1e-2, 3);
  run_case_mode("bf16-addnorm", c_add_norm, 1e-2, 3);
  run_case_mode("bf16-xent", c_bf16_xent, 1e-2, 3);
  run_case_mode("bf16-colsum", c_bf16_colsum, 1e-2, 3);
  run_case_mode("bf16-bgrad", c_bgrad, 1e-2, 3);
  run_case_mode("bf16-block", c_bf16_block, 3e-2, 3);
  run_case_mode("bf16-gpt", c_gpt, 3e-2, 3);
  run_case_mode("attn-dnn", c_attn_dnn, 3e-2, 3);
  no_cudnn = 1;
  run_case_mode("attn-own", c_attn_dnn, 3e-2, 3);
  no_cudnn = 0;
  /* rg_options.gemm_tune: its timed launches write the real outputs and leave matmul_acc's
     gradients as they were (a gradient added to more than once would be off by O(1)), so
     every result matches the CPU as an untuned one does. */
  gemm_tune = 2; /* every product, small ones included */
  run_case_mode("tune-linear", c_linear, 1e-5, 0);
  run_case_mode("tune-dgelu", c_dgelu, 1e-5, 0);
  run_case_mode("tune-tf32-dW", c_tf32_big, 3e-3, 1);
  run_case_mode("tune-bf16-gpt", c_gpt, 3e-2, 3);
  gemm_tune = 0;
  if (want("tune-repeat")) run_tune_repeat();
  if (want("attn-repeat") || want("attn-rep-own")) run_attn_repeat();
  if (want("xent-fused")) run_xent_fused();
  if (want("training")) run_training();
  if (want("adamw-vec")) run_adamw_vec();
  run_optim("adamw", 0, 0, RG_COVERS(RG_OP_ZERO_LIST, RG_OP_CLIP, RG_OP_ADAMW));
  run_optim("sgd", 1, 0, RG_COVERS(RG_OP_ZERO_LIST, RG_OP_CLIP, RG_OP_SGD));
  run_optim("allreduce", 0, 1, RG_COVERS(RG_OP_ALLREDUCE));
  run_schedule(RG_COVERS(RG_OP_LR_SCHEDULE, RG_OP_CLIP_VALUE));
  if (want("checkpoint")) run_checkpoint();
  if (want("graphs")) run_graphs();
  if (want("ckpt-act")) run_ckpt_act();
  if (want("faults")) run_faults();
  if (want("ring-replay")) run_ring_replay();
  if (want("attn-limit")) run_attn_limit();
  if (want("oom+sync")) run_oom_and_sync();
  if (want("hf")) run_hf();
  CHECK(nwanted > 0, "no case's name contains any of the %d names given", nonly);
  return finish();
}
