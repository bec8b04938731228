/*
 * nn_util.h - helpers shared by the files of src/nn (not installed, not public).
 *
 * src/nn sees the library only through resgrad.h; these helpers phrase its errors.
 */
#ifndef RG_NN_UTIL_H
#define RG_NN_UTIL_H

#include "resgrad_nn.h"

#if defined(__GNUC__)
#define RG_NN_HIDDEN __attribute__((visibility("hidden")))
#else
#define RG_NN_HIDDEN
#endif

/* Sets the sticky error to RG_ERR_MISUSE with the formatted explanation in its message,
   unless an error is already set (the first one stands). */
RG_NN_HIDDEN void rg__nn_misuse(rg_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Pushes the formatted explanation as a label: the next failing call recorded under it
   carries it in its message. The caller pops it (rg_label_pop). */
RG_NN_HIDDEN void rg__nn_push_why(rg_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The sticky status, or RG_ERR_MISUSE if (unexpectedly) none is set. */
RG_NN_HIDDEN rg_status rg__nn_status(rg_ctx *ctx);
/* malloc'd "<name>.<leaf>" ("<leaf>" when name is NULL or ""); NULL when out of memory. */
RG_NN_HIDDEN char *rg__nn_join(const char *name, const char *leaf);

/* A GPT's context and its parameters' prefix as rg_gpt_new was given it ("" for NULL);
   g non-NULL (gpt.c, for gpt_hf.c). */
RG_NN_HIDDEN rg_ctx *rg__gpt_ctx(const rg_gpt *g);
RG_NN_HIDDEN const char *rg__gpt_prefix(const rg_gpt *g);
/* A GPT's layers, for generate.c: its embeddings, final norm and block i in [0,
   layers). */
typedef struct rg_gpt_parts {
  const rg_nn_embedding *wte, *wpe;
  const rg_nn_layernorm *ln_f;
  const rg_nn_block *h; /* layers of them */
  const char *label;    /* the prefix without its trailing '.', "" for none */
} rg_gpt_parts;
RG_NN_HIDDEN rg_gpt_parts rg__gpt_parts(const rg_gpt *g);

#endif
