/*
 * checkpoint.c - rg_save / rg_load (safetensors). Not built yet: both calls answer
 * RG_ERR_UNSUPPORTED so no caller mistakes them for working.
 */
#include "internal.h"

rg_status rg_save(rg_ctx *ctx, const char *path, const rg_optim *opt) {
  (void)path;
  (void)opt;
  if (!ctx) return RG_ERR_MISUSE;
  rg_status st = rg__drain(ctx, RG_DRAIN_SAVE);
  if (st != RG_OK) return st;
  return rg__fail(ctx, RG_ERR_UNSUPPORTED, "rg_save", "checkpoints are not implemented in "
                  "this version");
}

rg_status rg_load(rg_ctx *ctx, const char *path, rg_optim *opt) {
  (void)path;
  (void)opt;
  if (!ctx) return RG_ERR_MISUSE;
  return rg__fail(ctx, RG_ERR_UNSUPPORTED, "rg_load", "checkpoints are not implemented in "
                  "this version");
}
