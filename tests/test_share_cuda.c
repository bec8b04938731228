/*
 * test_share_cuda.c - sharing device memory on a GPU: one context (the "other library")
 * lends tensors of its cudaMalloc'd arena with rg_export ordered on a second context's
 * stream, the second wraps them with rg_import, and its release gives the loan back.
 * Checks the values through repeated steps that import another buffer each step (so
 * CUDA graphs are captured and replayed with imports in them), kernels on memory that is
 * 16- but not 256-byte aligned against the CPU, the refusals, and that each release runs
 * once. Exits 77 (skipped) where no CUDA GPU is usable. tests/test_share.c checks the
 * rest of the contract on the CPU.
 */
#include "common.h"

#include <math.h>
#include <stdint.h>

enum { N = 1030, K = 3, STEPS = 9, R = 6, C = 36 };

static rg_ctx *open_dev(rg_device d) {
  rg_ctx *c = NULL;
  return rg_open(&c, &(rg_options){.device = d, .quiet = 1}) == RG_OK ? c : NULL;
}

/* One import's loan: its release ends the owner's export. */
typedef struct loan { rg_ctx *owner; rg_tensor t; int released; } loan;
static void give_back(void *user) {
  loan *l = user;
  l->released++;
  CHECK_ST(l->owner, rg_unexport(l->owner, l->t), RG_OK);
}

static float val(int k, int i, int round) { return (float)(k + 1 + 10 * round) * (float)(i % 17 - 8); }

/* Imports of a rotating set of buffers, one a step: right values every step, graphs
   replayed once the addresses recur, each loan given back once. */
static void rotating(rg_ctx *a, rg_ctx *b) {
  static float host[K][N], got[N];
  rg_tensor c[K];
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < N; i++) host[k][i] = val(k, i, 0);
    c[k] = rg_constant(a, RG_F32, 1, (int64_t[]){N}, host[k]);
  }
  rg_tensor w = rg_constant(b, RG_F32, 1, (int64_t[]){N}, host[1]);
  loan loans[STEPS] = {{0}};
  rg_stats s0, s1;
  rg_stats_get(b, &s0);
  for (int s = 0; s < STEPS; s++) {
    int k = s % K;
    if (s == 2 * K) { /* same address, new contents: a replay must read them */
      for (int i = 0; i < N; i++) host[k][i] = val(k, i, 1);
      CHECK_ST(a, rg_write(a, c[k], host[k], sizeof host[k]), RG_OK);
    }
    rg_memref m;
    CHECK_ST(a, rg_export(a, c[k], rg_stream(b), &m), RG_OK);
    CHECK(m.device == RG_DEVICE_CUDA && m.dtype == RG_F32 && m.ndim == 1 && m.dims[0] == N,
          "memref of a CUDA tensor");
    CHECK_ST(b, rg_step_begin(b), RG_OK); /* gives the last step's loan back */
    loans[s] = (loan){a, c[k], 0};
    rg_tensor x = rg_import(b, &m, give_back, &loans[s]);
    CHECK(x.id != 0, "step %d: rg_import: %s", s, rg_errmsg(b));
    rg_tensor y = rg_add(b, rg_mul(b, x, w), x);
    CHECK_ST(b, rg_read(b, y, got, sizeof got), RG_OK);
    int bad = -1;
    for (int i = 0; i < N && bad < 0; i++)
      if (got[i] != host[k][i] * host[1][i] + host[k][i]) bad = i;
    CHECK(bad < 0, "step %d (buffer %d): element %d is %g, want %g", s, k, bad,
          bad < 0 ? 0 : got[bad], bad < 0 ? 0 : host[k][bad] * host[1][bad] + host[k][bad]);
    if (s) CHECK(loans[s - 1].released == 1, "step %d gave the last loan back", s);
  }
  rg_stats_get(b, &s1);
  CHECK(s1.graph_captures - s0.graph_captures >= K && s1.graph_replays - s0.graph_replays >= K,
        "graphs with imports: %llu captures, %llu replays (last miss: %s)",
        (unsigned long long)(s1.graph_captures - s0.graph_captures),
        (unsigned long long)(s1.graph_replays - s0.graph_replays), s1.graph_miss_reason);
  /* The last loan is open: the owner's persistent pool stays. */
  CHECK_ST(a, rg_reset(a, RG_POOL_PERSISTENT), RG_ERR_MISUSE);
  rg_clear_error(a);
  CHECK_ST(b, rg_step_begin(b), RG_OK);
  for (int s = 0; s < STEPS; s++)
    CHECK(loans[s].released == 1, "loan %d released %d times", s, loans[s].released);
}

/* Max |x - y| / max(max |y|, 1) over n elements. */
static double rel_err(const float *x, const float *y, int n) {
  double e = 0, m = 1;
  for (int i = 0; i < n; i++) {
    e = fmax(e, fabs((double)x[i] - y[i]));
    m = fmax(m, fabs((double)y[i]));
  }
  return e / m;
}

/* The ops with vector paths on an import 16 bytes past a 256-byte boundary (F32 and
   BF16), against the CPU on the same values. */
static rg_tensor zoo(rg_ctx *c, rg_tensor x, rg_tensor h, rg_tensor wl, rg_tensor bl) {
  rg_tensor y = rg_add(c, x, x);
  y = rg_concat(c, y, rg_softmax(c, x), 0);
  y = rg_concat(c, y, rg_layernorm(c, x, RG_NONE, RG_NONE, 1e-5f), 0);
  y = rg_concat(c, y, rg_mul(c, x, rg_cast(c, h, RG_F32)), 0);
  y = rg_reshape(c, y, 1, (int64_t[]){-1});
  y = rg_concat(c, y, rg_reshape(c, rg_linear(c, x, wl, bl), 1, (int64_t[]){-1}), 0);
  y = rg_concat(c, y, rg_sum(c, x, -1, 0), 0);
  return rg_concat(c, y, rg_reshape(c, rg_sum(c, x, 0, 0), 1, (int64_t[]){-1}), 0);
}

static void aligned16(rg_ctx *a, rg_ctx *b) {
  rg_ctx *cpu = open_cpu();
  if (!cpu) return;
  static float xv[R * C + 4], wv[8 * C], bv[8];
  static uint16_t hv[R * C + 8];
  for (int i = 0; i < R * C + 4; i++) xv[i] = (float)sin(0.37 * i);
  for (int i = 0; i < R * C + 8; i++) hv[i] = (uint16_t)(0x3f80 + (i % 7) * 0x10); /* ~1..1.4 */
  for (int i = 0; i < 8 * C; i++) wv[i] = (float)cos(0.11 * i);
  for (int i = 0; i < 8; i++) bv[i] = (float)i / 8;
  rg_tensor cx = rg_constant(a, RG_F32, 1, (int64_t[]){R * C + 4}, xv);
  rg_tensor ch = rg_constant(a, RG_BF16, 1, (int64_t[]){R * C + 8}, hv);
  rg_memref mx, mh;
  CHECK_ST(a, rg_export(a, cx, rg_stream(b), &mx), RG_OK);
  CHECK_ST(a, rg_export(a, ch, rg_stream(b), &mh), RG_OK);
  loan lx = {a, cx, 0}, lh = {a, ch, 0};
  rg_memref bad = mx;
  bad.data = (char *)mx.data + 4; /* F32-aligned, not 16 */
  CHECK(rg_import(b, &bad, give_back, &lx).id == 0, "a 4-byte aligned import on CUDA");
  CHECK(msg_has(b, "not aligned to 16 bytes") && msg_has(b, "copy it"), "message: %s",
        rg_errmsg(b));
  rg_clear_error(b);
  bad.data = xv; /* host memory */
  CHECK(rg_import(b, &bad, give_back, &lx).id == 0, "host memory as CUDA memory");
  CHECK(msg_has(b, "host memory"), "message: %s", rg_errmsg(b));
  rg_clear_error(b);
  bad = mx;
  bad.device_index = 7;
  CHECK(rg_import(b, &bad, give_back, &lx).id == 0, "another GPU's memory");
  CHECK(msg_has(b, "cuda:7"), "message: %s", rg_errmsg(b));
  rg_clear_error(b);
  bad = mx;
  bad.device = RG_DEVICE_CPU;
  CHECK(rg_import(b, &bad, give_back, &lx).id == 0, "CPU memref on CUDA");
  rg_clear_error(b);
  CHECK(lx.released == 0, "refused imports are never released");

  mx.data = (char *)mx.data + 16, mx.ndim = 2, mx.dims[0] = R, mx.dims[1] = C;
  mh.data = (char *)mh.data + 16, mh.ndim = 2, mh.dims[0] = R, mh.dims[1] = C;
  CHECK_ST(b, rg_step_begin(b), RG_OK);
  rg_tensor x = rg_import(b, &mx, give_back, &lx), h = rg_import(b, &mh, give_back, &lh);
  rg_tensor y = zoo(b, x, h, rg_input(b, RG_F32, 2, (int64_t[]){8, C}, wv),
                    rg_input(b, RG_F32, 1, (int64_t[]){8}, bv));
  rg_tensor yc = zoo(cpu, rg_input(cpu, RG_F32, 2, (int64_t[]){R, C}, xv + 4),
                     rg_input(cpu, RG_BF16, 2, (int64_t[]){R, C}, hv + 8),
                     rg_input(cpu, RG_F32, 2, (int64_t[]){8, C}, wv),
                     rg_input(cpu, RG_F32, 1, (int64_t[]){8}, bv));
  int64_t n = rg_numel(b, y);
  CHECK(n == rg_numel(cpu, yc) && n > 0, "zoo sizes");
  float *g = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
  CHECK_ST(b, rg_read(b, y, g, sizeof(float) * (size_t)n), RG_OK);
  CHECK_ST(cpu, rg_read(cpu, yc, want, sizeof(float) * (size_t)n), RG_OK);
  double e = rel_err(g, want, (int)n);
  CHECK(e < 1e-4, "ops on 16-byte aligned imports: normalised error %g against the CPU", e);
  /* Lent again: the same address, the host waits (stream NULL). rg_write writes it. */
  rg_memref e2;
  CHECK_ST(b, rg_export(b, x, NULL, &e2), RG_OK);
  CHECK(e2.data == mx.data && e2.device_index == mx.device_index, "re-lent import");
  CHECK_ST(b, rg_unexport(b, x), RG_OK);
  float ones[R * C], back[R * C + 4];
  for (int i = 0; i < R * C; i++) ones[i] = 1;
  CHECK_ST(b, rg_write(b, x, ones, sizeof ones), RG_OK);
  CHECK_ST(a, rg_read(a, cx, back, sizeof back), RG_OK);
  CHECK(back[3] == xv[3] && back[4] == 1 && back[R * C + 3] == 1,
        "rg_write into an import wrote the owner's memory");
  CHECK_ST(b, rg_step_begin(b), RG_OK);
  CHECK(lx.released == 1 && lh.released == 1, "released at step_begin: %d %d", lx.released,
        lh.released);
  free(g), free(want);
  rg_close(cpu);
}

int main(void) {
  rg_ctx *a = open_dev(RG_DEVICE_CUDA);
  if (!a) {
    fprintf(stderr, "no usable CUDA GPU: skipped\n");
    return SKIP_EXIT;
  }
  rg_ctx *b = open_dev(RG_DEVICE_CUDA);
  CHECK(b != NULL, "a second CUDA context");
  if (!b) return finish();
  CHECK(rg_stream(a) && rg_stream(b) && rg_stream(a) != rg_stream(b), "streams");
  CHECK(rg_import_align(b) == 16, "CUDA import alignment %zu", rg_import_align(b));
  rotating(a, b);
  aligned16(a, b);
  /* An import open at rg_close is released there; the owner then resets. */
  float v[4] = {1, 2, 3, 4};
  rg_tensor c = rg_constant(a, RG_F32, 1, (int64_t[]){4}, v);
  rg_memref m;
  CHECK_ST(a, rg_export(a, c, rg_stream(b), &m), RG_OK);
  loan l = {a, c, 0};
  CHECK(rg_import(b, &m, give_back, &l).id != 0, "import: %s", rg_errmsg(b));
  CHECK_ST(b, rg_close(b), RG_OK);
  CHECK(l.released == 1, "released at close (%d)", l.released);
  CHECK_ST(a, rg_reset(a, RG_POOL_PERSISTENT), RG_OK);
  CHECK_ST(a, rg_close(a), RG_OK);
  return finish();
}
