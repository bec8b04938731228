/*
 * dry.c - the backend of a dry-run context (rg_options.dry_run): the device of ctx->dev,
 * modelled. The core records and validates every call as usual and its pools account
 * bytes as on that device (its chunk_min, the same sequence of arena chunks), but memory
 * is fake addresses, transfers move nothing, drains run nothing and reads deliver zeros,
 * so no work or memory is proportional to the tensors' sizes.
 *
 * Invariants: nothing dereferences a fake address (the core skips its host copies in a
 * dry run: rg_param's initial values, rg__stage_copy), and the calls that need values
 * refuse a dry context (rg__dry_refuse). Fake blocks are disjoint, as real ones are, so
 * the core's tests of whether two tensors' bytes overlap decide as on the device.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* be_state is the next fake address, starting far from anything mapped (a stray access
   faults at once); non-NULL marks the context open, as for every backend. */
#define FAKE_BASE (UINTPTR_MAX / 4 + 1)

static rg_status dry_open(rg_ctx *ctx) {
  const rg_backend *dev = ctx->dev;
  rg_status st = dev->probe ? dev->probe(ctx) : RG_OK;
  if (st != RG_OK) return st;
  if (!dev->probe) snprintf(ctx->devname, sizeof ctx->devname, "%s", dev->name);
  size_t n = strlen(ctx->devname);
  snprintf(ctx->devname + n, sizeof ctx->devname - n, " (dry run)");
  ctx->be_state = (void *)FAKE_BASE;
  return RG_OK;
}

static void dry_close(rg_ctx *ctx) { ctx->be_state = NULL; }

static void *dry_alloc(rg_ctx *ctx, size_t bytes) {
  uintptr_t p = (uintptr_t)ctx->be_state;
  size_t n = (bytes / RG_ALIGN + 1) * RG_ALIGN; /* aligned; no two blocks touch */
  if (!rg__alloc_tick(ctx) || n > UINTPTR_MAX - p) return NULL; /* injected, or spent */
  ctx->be_state = (void *)(p + n);
  return (void *)p;
}

static void dry_free(rg_ctx *ctx, void *p) { (void)ctx, (void)p; }

static rg_status dry_upload(rg_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return RG_OK;
}

static rg_status dry_download(rg_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)src;
  if (bytes) memset(dst, 0, bytes);
  return RG_OK;
}

static rg_status dry_zero(rg_ctx *ctx, void *dst, size_t bytes) {
  (void)ctx, (void)dst, (void)bytes;
  return RG_OK;
}

static rg_status dry_execute(rg_ctx *ctx, size_t first, size_t last, size_t *failed,
                             rg_status *soft, char *msg, size_t msgcap, rg_readback *rb) {
  (void)first, (void)last, (void)failed, (void)soft, (void)msg, (void)msgcap;
  if (rb) {
    dry_download(ctx, rb->dst, rb->src, rb->bytes);
    rb->done = true;
  }
  return RG_OK;
}

static rg_status dry_sync(rg_ctx *ctx) {
  (void)ctx;
  return RG_OK;
}

/* chunk_min is the modelled device's, set per context (rg_open). */
const rg_backend rg_dry_backend = {
    .name = "dry run",
    .open = dry_open,
    .close = dry_close,
    .alloc = dry_alloc,
    .free = dry_free,
    .host_alloc = dry_alloc,
    .host_free = dry_free,
    .upload = dry_upload,
    .download = dry_download,
    .zero = dry_zero,
    .execute = dry_execute,
    .sync = dry_sync,
};

rg_status rg__dry_refuse(rg_ctx *ctx, const char *call) {
  return rg__fail(ctx, RG_ERR_UNSUPPORTED, call, "this is a dry-run context "
                  "(rg_options.dry_run), which records work but holds no values; call %s on "
                  "a context opened without dry_run", call);
}
