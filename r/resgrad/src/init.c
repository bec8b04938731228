/*
 * init.c - the package's .Call routines, registered with R (the generated op routines of
 * ops.c and the hand-written ones below); no symbol is looked up by name at run time.
 */
#include "rgr.h"

#include <stdlib.h>
#include <string.h>

/* Prototypes from the argument counts (an empty () would mean (void) in C23). */
#define RGR_ARGS_0 void
#define RGR_ARGS_1 SEXP
#define RGR_ARGS_2 SEXP, SEXP
#define RGR_ARGS_3 SEXP, SEXP, SEXP
#define RGR_ARGS_4 SEXP, SEXP, SEXP, SEXP
#define RGR_ARGS_5 SEXP, SEXP, SEXP, SEXP, SEXP
#define RGR_ARGS_6 SEXP, SEXP, SEXP, SEXP, SEXP, SEXP
#define RGR_DECL(name, n) SEXP name(RGR_ARGS_##n);
#define RGR_ROUTINES(X)                                                                    \
  X(rgr_open, 2) X(rgr_close, 1) X(rgr_ctx_info, 1) X(rgr_step_begin, 1) X(rgr_sync, 1)      \
  X(rgr_set_training, 2) X(rgr_set_check_finite, 2) X(rgr_generation, 2) X(rgr_stats, 1)   \
  X(rgr_stats_reset, 1) X(rgr_tensor_new, 5) X(rgr_param, 6) X(rgr_read, 1)                \
  X(rgr_write, 2) X(rgr_shape, 1) X(rgr_dtype, 1) X(rgr_describe, 1) X(rgr_state, 1)       \
  X(rgr_name, 1) X(rgr_backward, 1) X(rgr_grad, 1) X(rgr_retain_grad, 1)                   \
  X(rgr_zero_grad, 1) X(rgr_params, 1) X(rgr_gradcheck, 4) X(rgr_optim_adamw, 6)           \
  X(rgr_optim_sgd, 4) X(rgr_optim_step, 1) X(rgr_optim_set_lr, 2) X(rgr_optim_lr, 1)       \
  X(rgr_optim_steps, 1) X(rgr_optim_schedule, 3) X(rgr_optim_free, 1)                      \
  X(rgr_clip_grad_norm, 2) X(rgr_clip_grad_value, 2) X(rgr_save, 3) X(rgr_load, 3)         \
  X(rgr_meta_set, 3) X(rgr_meta_get, 2) X(rgr_nn_linear, 6) X(rgr_nn_embedding, 5)         \
  X(rgr_nn_layernorm, 4) X(rgr_gpt_new, 3) X(rgr_gpt_forward, 2) X(rgr_gpt_loss, 4)        \
  X(rgr_gpt_param_count, 1) X(rgr_version, 0) X(rgr_ctx_of_tensor, 1) X(rgr_ctx_of_optim, 1) \
  X(rgr_ring_new, 4) X(rgr_ring_push, 2) X(rgr_ring_gather, 2) X(rgr_ring_sample, 2)        \
  X(rgr_ring_count, 1) X(rgr_ring_free, 1) X(rgr_checkpoint_begin, 1) X(rgr_checkpoint_end, 2) \
  X(rgr_data_open, 3) X(rgr_data_batch, 4) X(rgr_data_seek, 2) X(rgr_data_info, 1)          \
  X(rgr_data_close, 1) X(rgr_gpt_load_hf, 4) X(rgr_gpt_save_hf, 2) X(rgr_gpt_config, 1)     \
  X(rgr_reset, 2) X(rgr_device_memory, 1) X(rgr_label_push, 2) X(rgr_label_pop, 1)          \
  X(rgr_dump_handles, 2) X(rgr_gpt_generate, 5) X(rgr_bpe_load, 1) X(rgr_bpe_encode, 2)     \
  X(rgr_bpe_decode, 3) X(rgr_bpe_vocab_size, 1)

RGR_ROUTINES(RGR_DECL)
#undef RGR_DECL

SEXP rgr_version(void) { return Rf_mkString(rg_version()); }

#define RGR_ROW(name, n) {#name, (DL_FUNC)&name, n},
static const R_CallMethodDef own_methods[] = {RGR_ROUTINES(RGR_ROW){NULL, NULL, 0}};
#undef RGR_ROW

void R_init_resgrad(DllInfo *dll) {
  size_t a = sizeof own_methods / sizeof own_methods[0] - 1, b = 0;
  while (rgr_op_methods[b].name) b++;
  /* R keeps a copy of the table, so this one is freed after registering it. */
  R_CallMethodDef *all = malloc((a + b + 1) * sizeof *all);
  if (!all) Rf_error("resgrad: out of memory registering its routines");
  memcpy(all, own_methods, a * sizeof *all);
  memcpy(all + a, rgr_op_methods, (b + 1) * sizeof *all);
  R_registerRoutines(dll, NULL, all, NULL, NULL);
  free(all);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
  rgr_tensor_class = Rf_mkString("ag_tensor");
  R_PreserveObject(rgr_tensor_class);
}
