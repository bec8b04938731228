/*
 * nn.c - the layers of resgrad_nn.h: linear, embedding, layer norm (their parameters
 * made by the library's init functions, their forward passes recorded from R with the
 * ops), and the GPT model, an external pointer (class "ag_gpt_ptr") to its rg_gpt, made
 * by rg_gpt_new or from a Hugging Face GPT-2 checkpoint (rg_gpt_load_hf; rg_gpt_save_hf
 * writes one).
 *
 * rg_gpt_free frees only the model's small host struct (the parameters belong to the
 * context), so its finalizer is safe after the context closed; the model still holds a
 * claim on its context's holder, as an optimizer does, so the order in which R finalizes
 * the two does not matter (rgr.h).
 */
#include "rgr.h"

#include <stdlib.h>

SEXP rgr_nn_linear(SEXP cx, SEXP name, SEXP in, SEXP out, SEXP bias, SEXP std) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_nn_linear l;
  rgr_check(ctx, rg_nn_linear_init(ctx, &l, CHAR(STRING_ELT(name, 0)),
                                   (int64_t)Rf_asReal(in), (int64_t)Rf_asReal(out),
                                   Rf_asLogical(bias) == TRUE, (float)Rf_asReal(std)));
  SEXP r = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(r, 0, rgr_wrap(cx, l.w));
  if (l.b.id) SET_VECTOR_ELT(r, 1, rgr_wrap(cx, l.b));
  UNPROTECT(1);
  return r;
}

SEXP rgr_nn_embedding(SEXP cx, SEXP name, SEXP num, SEXP dim, SEXP std) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_nn_embedding e;
  rgr_check(ctx, rg_nn_embedding_init(ctx, &e, CHAR(STRING_ELT(name, 0)),
                                      (int64_t)Rf_asReal(num), (int64_t)Rf_asReal(dim),
                                      (float)Rf_asReal(std)));
  return rgr_wrap(cx, e.w);
}

SEXP rgr_nn_layernorm(SEXP cx, SEXP name, SEXP dim, SEXP eps) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_nn_layernorm n;
  rgr_check(ctx, rg_nn_layernorm_init(ctx, &n, CHAR(STRING_ELT(name, 0)),
                                      (int64_t)Rf_asReal(dim), (float)Rf_asReal(eps)));
  SEXP r = PROTECT(Rf_allocVector(VECSXP, 3));
  SET_VECTOR_ELT(r, 0, rgr_wrap(cx, n.w));
  SET_VECTOR_ELT(r, 1, rgr_wrap(cx, n.b));
  SET_VECTOR_ELT(r, 2, Rf_ScalarReal(n.eps));
  UNPROTECT(1);
  return r;
}

typedef struct rgr_gpt { rgr_ctx *h; rg_gpt *g; } rgr_gpt;

static void gpt_finalize(SEXP p) {
  rgr_gpt *m = R_ExternalPtrAddr(p);
  if (!m) return;
  R_ClearExternalPtr(p);
  rg_gpt_free(m->g);
  rgr_user_drop(m->h);
  free(m);
}

static rg_gpt *gpt_of(SEXP p) {
  rgr_gpt *m = rgr_addr_of(p, "ag_gpt_ptr", "GPT model",
                           "make one with ag_gpt() or ag_gpt_load_hf()");
  rgr_ctx_ptr(R_ExternalPtrProtected(p));
  return m->g;
}

/* A GPT's external pointer for g (NULL: the context's sticky error as a condition). */
static SEXP wrap_gpt(SEXP cx, rg_gpt *g) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  if (!g) rgr_fail(ctx);
  rgr_gpt *m = malloc(sizeof *m);
  if (!m) {
    rg_gpt_free(g);
    rgr_signal(RG_ERR_OOM, "ag_gpt: out of host memory");
  }
  m->g = g;
  m->h = rgr_holder(cx);
  rgr_user_add(m->h);
  return rgr_make_ptr(m, cx, gpt_finalize, "ag_gpt_ptr");
}

SEXP rgr_gpt_new(SEXP cx, SEXP cfg, SEXP prefix) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  const double *v = REAL(cfg); /* vocab, block, layers, width, heads, dropout, checkpoint */
  rg_gpt_config c = {(int64_t)v[0], (int64_t)v[1], (int64_t)v[2], (int64_t)v[3],
                     (int64_t)v[4], (float)v[5], v[6] != 0};
  return wrap_gpt(cx, rg_gpt_new(ctx, &c, CHAR(STRING_ELT(prefix, 0))));
}

SEXP rgr_gpt_load_hf(SEXP cx, SEXP path, SEXP heads, SEXP prefix) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  long long h = rgr_int_arg(heads, "heads");
  return wrap_gpt(cx, rg_gpt_load_hf(ctx, Rf_translateChar(STRING_ELT(path, 0)), h,
                                     CHAR(STRING_ELT(prefix, 0))));
}

SEXP rgr_gpt_save_hf(SEXP p, SEXP path) {
  rg_gpt *g = gpt_of(p);
  rgr_check(rgr_ctx_ptr(R_ExternalPtrProtected(p)),
            rg_gpt_save_hf(g, Rf_translateChar(STRING_ELT(path, 0))));
  return R_NilValue;
}

static const char *const config_names[] = {"vocab", "block", "layers", "width", "heads",
                                           "dropout", "checkpoint"};

SEXP rgr_gpt_config(SEXP p) {
  const rg_gpt_config *c = rg_gpt_config_of(gpt_of(p));
  const double v[] = {(double)c->vocab, (double)c->block, (double)c->layers,
                      (double)c->width, (double)c->heads, c->dropout, c->checkpoint};
  return rgr_named_reals(config_names, v, 7);
}

SEXP rgr_gpt_forward(SEXP p, SEXP idx) {
  rg_gpt *g = gpt_of(p);
  SEXP cx = R_ExternalPtrProtected(p);
  return rgr_result(cx, rg_gpt_forward(g, rgr_tensor_arg(cx, idx, "idx")));
}

SEXP rgr_gpt_loss(SEXP p, SEXP idx, SEXP targets, SEXP ignore) {
  rg_gpt *g = gpt_of(p);
  SEXP cx = R_ExternalPtrProtected(p);
  rg_tensor i = rgr_tensor_arg(cx, idx, "idx"), t = rgr_tensor_arg(cx, targets, "targets");
  return rgr_result(cx, ignore == R_NilValue
                            ? rg_gpt_loss(g, i, t)
                            : rg_gpt_loss_ignore(g, i, t, (int)rgr_int_arg(ignore, "ignore_index")));
}

SEXP rgr_gpt_param_count(SEXP p) { return Rf_ScalarReal((double)rg_gpt_param_count(gpt_of(p))); }

/* rg_gpt_generate. prompts: I32 [batch, prompt_len] row-major (R transposed it), right
   padded; lens: I32 [batch], each row's length; cfg: c(temperature, top_k, top_p, seed,
   stop) with stop -1 for none (R checked the types: the library checks the values). The
   result is an R integer matrix [batch, max_new] with NA after a row's stop token. */
SEXP rgr_gpt_generate(SEXP p, SEXP prompts, SEXP lens, SEXP max_new, SEXP cfg) {
  rg_gpt *g = gpt_of(p);
  rg_ctx *ctx = rgr_ctx_ptr(R_ExternalPtrProtected(p));
  int64_t batch = XLENGTH(lens), n = (int64_t)rgr_int_arg(max_new, "max_new");
  if (batch < 1 || n < 1)
    rgr_signal(RG_ERR_MISUSE, "ag_gpt_generate: give at least one prompt and max_new >= 1 "
               "(max_new is %lld)", (long long)n);
  int64_t plen = XLENGTH(prompts) / batch, block = rg_gpt_config_of(g)->block;
  if (n > block) /* before allocating the result: the library would refuse it anyway */
    rgr_signal(RG_ERR_MISUSE, "ag_gpt_generate: max_new %lld is over the model's block "
               "size %lld: the longest prompt + max_new - 1 must fit it", (long long)n,
               (long long)block);
  const double *c = REAL(cfg);
  rg_sample_config sc = {(float)c[0], (int64_t)c[1], (float)c[2], (uint64_t)c[3],
                         (int32_t)c[4]};
  int64_t *ln = (int64_t *)R_alloc((size_t)batch, sizeof *ln);
  for (int64_t b = 0; b < batch; b++) ln[b] = INTEGER(lens)[b];
  int32_t *out = (int32_t *)R_alloc((size_t)(batch * n), sizeof *out);
  rgr_check(ctx, rg_gpt_generate(g, INTEGER(prompts), ln, batch, plen, n, &sc, out));
  SEXP r = PROTECT(Rf_allocMatrix(INTSXP, (int)batch, (int)n));
  int *ri = INTEGER(r);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++) {
      int32_t t = out[b * n + j];
      ri[j * batch + b] = t < 0 ? NA_INTEGER : t;
    }
  UNPROTECT(1);
  return r;
}
