/*
 * test_share.c - sharing memory with other libraries on the CPU: rg_export lends a
 * tensor's own bytes and pins its pool until rg_unexport, rg_import wraps the caller's
 * bytes as a pass tensor and calls its release exactly once (at the pass pool's reset or
 * rg_close, never for a call that failed), and a dry run refuses both.
 * tests/test_share_cuda.c does the same with device memory, streams and CUDA graphs.
 */
#include "common.h"

#include <stdint.h>

static int released[8]; /* release calls per user index */
static void on_release(void *user) { released[(intptr_t)user]++; }

static rg_memref cpu_ref(void *data, rg_dtype dt, int ndim, const int64_t *dims) {
  rg_memref m = {data, RG_DEVICE_CPU, 0, dt, ndim, {0}};
  for (int i = 0; i < ndim; i++) m.dims[i] = dims[i];
  return m;
}

/* rg_export: the pointer is the tensor's memory, and the loan pins its pool. */
static void test_export(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  CHECK(rg_stream(ctx) == NULL, "a CPU context has no stream");
  CHECK(rg_import_align(ctx) == 4, "CPU import alignment %zu, want 4", rg_import_align(ctx));
  float in[6] = {1, 2, 3, 4, 5, 6}, got[6];
  rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, in);
  rg_tensor y = rg_scale(ctx, x, 2.0f); /* pending: the export is its barrier */
  rg_memref m;
  CHECK_ST(ctx, rg_export(ctx, y, NULL, &m), RG_OK);
  CHECK(!rg_is_pending(ctx, y), "rg_export ran the queue");
  CHECK(m.device == RG_DEVICE_CPU && m.device_index == 0 && m.dtype == RG_F32 &&
            m.ndim == 2 && m.dims[0] == 2 && m.dims[1] == 3 && m.data,
        "memref fields");
  float *p = m.data;
  CHECK(p[0] == 2 && p[5] == 12, "exported bytes are the value (%g, %g)", p[0], p[5]);
  p[4] = -7; /* the other library writes; resgrad reads the same bytes */
  CHECK_ST(ctx, rg_read(ctx, y, got, sizeof got), RG_OK);
  CHECK(got[4] == -7 && got[3] == 8, "rg_read sees the write through the export (%g)", got[4]);

  /* Pinned: both resets of the pass pool refuse at once, running nothing. */
  rg_tensor z = rg_neg(ctx, y);
  uint64_t gen = rg_generation(ctx, RG_POOL_PASS);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "1 export of pass-pool tensors is open") && msg_has(ctx, "rg_unexport"),
        "refusal message: %s", rg_errmsg(ctx));
  CHECK(rg_generation(ctx, RG_POOL_PASS) == gen && rg_is_pending(ctx, z),
        "the refused rg_step_begin drained or reset");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PERSISTENT), RG_OK); /* the pass pool's loan only */
  /* Two loans need two rg_unexport calls; a third is misuse. */
  rg_memref m2;
  CHECK_ST(ctx, rg_export(ctx, y, NULL, &m2), RG_OK);
  CHECK(m2.data == m.data, "a second loan lends the same bytes");
  CHECK_ST(ctx, rg_unexport(ctx, y), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_unexport(ctx, x), RG_ERR_MISUSE); /* x was never lent */
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_unexport(ctx, y), RG_OK);
  CHECK_ST(ctx, rg_unexport(ctx, y), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "no open export"), "unexport message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK(!rg_is_live(ctx, y), "step_begin after the last unexport resets the pass");

  /* A view pins its base's bytes, and lends them. */
  x = rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, in);
  rg_tensor v = rg_reshape(ctx, x, 1, (int64_t[]){6});
  CHECK_ST(ctx, rg_export(ctx, v, NULL, &m), RG_OK);
  CHECK(m.ndim == 1 && m.dims[0] == 6 && ((float *)m.data)[5] == 6, "view's memref");
  CHECK_ST(ctx, rg_export(ctx, x, NULL, &m2), RG_OK);
  CHECK(m2.data == m.data, "a view lends its base's bytes");
  CHECK_ST(ctx, rg_unexport(ctx, x), RG_OK);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_reset"), "reset refusal names the call: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_unexport(ctx, v), RG_OK);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_OK);

  /* A parameter: the borrower sees the optimizer's in-place update. */
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){3}, (rg_init){RG_INIT_CONST, 1, 0});
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.5f});
  CHECK_ST(ctx, rg_export(ctx, w, NULL, &m), RG_OK);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PERSISTENT), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "persistent-pool"), "persistent refusal: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK); /* a persistent loan leaves the pass alone */
  float xs[3] = {1, 2, 3};
  rg_tensor l = rg_sum(ctx, rg_mul(ctx, w, rg_input(ctx, RG_F32, 1, (int64_t[]){3}, xs)),
                       RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, l), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  float *wp = m.data;
  CHECK(wp[0] == 0.5f && wp[1] == 0.0f && wp[2] == -0.5f, "lent parameter after the step: "
        "%g %g %g", wp[0], wp[1], wp[2]);
  CHECK_ST(ctx, rg_unexport(ctx, w), RG_OK);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PERSISTENT), RG_OK);
  rg_optim_free(opt);

  /* A value whose drain fails is not lent, as rg_read reports it. */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor table = rg_input(ctx, RG_F32, 2, (int64_t[]){2, 3}, in);
  rg_tensor bad = rg_embedding(ctx, table, rg_input(ctx, RG_I32, 1, (int64_t[]){1},
                                                    (int32_t[]){5}));
  CHECK_ST(ctx, rg_export(ctx, bad, NULL, &m), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_export(ctx, bad, NULL, &m), RG_ERR_FAILED);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_export(ctx, table, NULL, NULL), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK); /* nothing was pinned */
  CHECK_ST(ctx, rg_export(ctx, table, NULL, &m), RG_ERR_STALE);
  rg_clear_error(ctx);
  /* rg_close frees lent memory regardless. */
  CHECK_ST(ctx, rg_export(ctx, rg_input(ctx, RG_F32, 1, (int64_t[]){3}, xs), NULL, &m), RG_OK);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_import: ops read the caller's bytes; release is called once, at the reset. */
static void test_import(void) {
  memset(released, 0, sizeof released);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  float *buf = aligned_alloc(64, 64 * sizeof(float));
  float keep[64];
  for (int i = 0; i < 64; i++) buf[i] = keep[i] = (float)i - 10.0f;
  rg_stats s0, s1;
  rg_stats_get(ctx, &s0);
  rg_memref m = cpu_ref(buf, RG_F32, 2, (int64_t[]){4, 16});
  rg_tensor x = rg_import(ctx, &m, on_release, (void *)(intptr_t)0);
  CHECK(x.id != 0, "rg_import: %s", rg_errmsg(ctx));
  rg_stats_get(ctx, &s1);
  CHECK(s1.pass_bytes == s0.pass_bytes && s1.up.bytes == s0.up.bytes,
        "an import allocates and uploads nothing (%zu -> %zu bytes)", s0.pass_bytes,
        s1.pass_bytes);
  CHECK(!rg_is_pending(ctx, x) && rg_pool_of(ctx, x) == RG_POOL_PASS, "ready pass tensor");
  /* Ops read it; many outputs later the caller's bytes are untouched. */
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, (int64_t[]){16}, (rg_init){RG_INIT_CONST, 2, 0});
  rg_tensor y = rg_mul(ctx, x, w);
  for (int k = 0; k < 20; k++) y = rg_add(ctx, y, rg_scale(ctx, x, 0.0f));
  rg_tensor s = rg_sum(ctx, y, RG_ALL_AXES, 0);
  float got[64], sum = 0;
  CHECK_ST(ctx, rg_read(ctx, y, got, sizeof got), RG_OK);
  CHECK_ST(ctx, rg_item(ctx, s, &sum), RG_OK);
  int ok = 1;
  for (int i = 0; i < 64; i++) ok &= got[i] == 2 * keep[i] && buf[i] == keep[i];
  CHECK(ok, "ops on imported memory, which stays as it was");
  CHECK(sum == 2 * (63 * 64 / 2 - 640), "sum %g", sum);
  /* Gradients reach the parameter, none is kept for the import. */
  CHECK_ST(ctx, rg_backward(ctx, s), RG_OK);
  float gw[16];
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), gw, sizeof gw), RG_OK);
  CHECK(gw[0] == (float)(0 + 16 + 32 + 48 - 40), "dw[0] = %g", gw[0]);
  CHECK(rg_grad(ctx, x).id == 0, "an import has no gradient");
  rg_clear_error(ctx);
  /* A view of it, and rg_write through either writes the caller's memory. */
  rg_tensor v = rg_reshape(ctx, x, 1, (int64_t[]){64});
  CHECK_ST(ctx, rg_read(ctx, v, got, sizeof got), RG_OK);
  CHECK(got[63] == 53, "view of an import reads it (%g)", got[63]);
  float ones[64];
  for (int i = 0; i < 64; i++) ones[i] = 1;
  CHECK_ST(ctx, rg_write(ctx, v, ones, sizeof ones), RG_OK);
  CHECK(buf[0] == 1 && buf[63] == 1, "rg_write wrote the caller's memory");
  /* Lent again: the same address, and it pins the pass pool. */
  rg_memref e;
  CHECK_ST(ctx, rg_export(ctx, v, NULL, &e), RG_OK);
  CHECK(e.data == buf, "an import lends the caller's address");
  char line[256];
  rg_describe(ctx, x, line, sizeof line);
  CHECK(strstr(line, "imported") != NULL, "describe an import: %s", line);
  rg_describe(ctx, v, line, sizeof line);
  CHECK(strstr(line, "lent 1 time (rg_export)") != NULL, "describe a loan: %s", line);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK(released[0] == 0, "no release while the pass lives");
  CHECK_ST(ctx, rg_unexport(ctx, v), RG_OK);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK(released[0] == 1, "release called at rg_step_begin (%d)", released[0]);
  CHECK_ST(ctx, rg_read(ctx, x, got, sizeof got), RG_ERR_STALE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK(released[0] == 1, "release called exactly once (%d)", released[0]);

  /* Other dtypes: I32 indices, a BF16 operand; release may be NULL. */
  int32_t *ids = aligned_alloc(64, 64);
  ids[0] = 3, ids[1] = 0;
  uint16_t *h = aligned_alloc(64, 64);
  h[0] = 0x3f80, h[1] = 0xc000; /* 1, -2 */
  rg_memref mi = cpu_ref(ids, RG_I32, 1, (int64_t[]){2});
  rg_memref mh = cpu_ref(h, RG_BF16, 1, (int64_t[]){2});
  rg_tensor tb = rg_input(ctx, RG_F32, 2, (int64_t[]){4, 16}, keep);
  rg_tensor em = rg_embedding(ctx, tb, rg_import(ctx, &mi, NULL, NULL));
  rg_tensor hf = rg_cast(ctx, rg_import(ctx, &mh, on_release, (void *)(intptr_t)1), RG_F32);
  float eg[32], hg[2];
  CHECK_ST(ctx, rg_read(ctx, em, eg, sizeof eg), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, hf, hg, sizeof hg), RG_OK);
  CHECK(eg[0] == keep[48] && eg[16] == keep[0], "embedding of imported ids");
  CHECK(hg[0] == 1 && hg[1] == -2, "imported BF16 (%g, %g)", hg[0], hg[1]);

  /* Refusals keep nothing and never call release. */
  rg_memref bad = m;
  bad.data = (char *)buf + 2;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "misaligned import");
  CHECK(msg_has(ctx, "is not aligned to 4 bytes") && msg_has(ctx, "copy it"),
        "misalignment message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  bad = m;
  bad.device = RG_DEVICE_CUDA;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "CUDA memory on CPU");
  CHECK(msg_has(ctx, "cuda:0") && msg_has(ctx, "copy it"), "device message: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  bad = m;
  bad.data = NULL;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "NULL data");
  rg_clear_error(ctx);
  bad = m;
  bad.dims[1] = -1;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "negative dim");
  rg_clear_error(ctx);
  bad = m;
  bad.ndim = RG_MAX_DIMS + 1;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "ndim too large");
  rg_clear_error(ctx);
  bad = m;
  bad.dtype = (rg_dtype)7;
  CHECK(rg_import(ctx, &bad, on_release, (void *)(intptr_t)2).id == 0, "bad dtype");
  rg_clear_error(ctx);
  CHECK(rg_import(ctx, NULL, on_release, (void *)(intptr_t)2).id == 0, "NULL memref");
  rg_clear_error(ctx);
  /* An import still held at rg_close is released there, after a failed drain too. */
  rg_tensor last = rg_import(ctx, &m, on_release, (void *)(intptr_t)3);
  rg_tensor oob = rg_embedding(ctx, last, rg_input(ctx, RG_I32, 1, (int64_t[]){1},
                                                   (int32_t[]){9}));
  (void)oob;
  CHECK(released[1] == 0 && released[3] == 0, "not released before the close");
  CHECK_ST(ctx, rg_close(ctx), RG_ERR_MISUSE); /* the embedding's index is out of range */
  CHECK(released[1] == 1 && released[3] == 1 && released[2] == 0 && released[0] == 1,
        "releases at close: %d %d %d %d", released[0], released[1], released[2], released[3]);
  free(buf), free(ids), free(h);
}

/* A dry run holds no values: both directions refused. */
static void test_dry(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.dry_run = 1});
  if (!ctx) return;
  float b[4] = {0};
  rg_tensor x = rg_input(ctx, RG_F32, 1, (int64_t[]){4}, b);
  rg_memref m;
  CHECK_ST(ctx, rg_export(ctx, x, NULL, &m), RG_ERR_UNSUPPORTED);
  CHECK(msg_has(ctx, "dry-run"), "dry export message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  m = cpu_ref(b, RG_F32, 1, (int64_t[]){4});
  CHECK(rg_import(ctx, &m, on_release, (void *)(intptr_t)4).id == 0, "dry import");
  CHECK(rg_error(ctx) == RG_ERR_UNSUPPORTED, "dry import status %s",
        rg_status_str(rg_error(ctx)));
  CHECK(rg_stream(ctx) == NULL && rg_import_align(ctx) == 4, "dry stream and alignment");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
  CHECK(released[4] == 0, "a refused import is never released");
  CHECK(rg_stream(NULL) == NULL && rg_import_align(NULL) == 0, "NULL ctx");
  CHECK(rg_export(NULL, x, NULL, &m) == RG_ERR_MISUSE && rg_unexport(NULL, x) == RG_ERR_MISUSE,
        "NULL ctx");
}

int main(void) {
  test_export();
  test_import();
  test_dry();
  return finish();
}
