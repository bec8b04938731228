/*
 * stub.c - the CUDA backend of a build that has none.
 *
 * The core reaches the CUDA backend only through its table, rg_cuda_backend: a build
 * without CUDA links a stub table that answers RG_ERR_UNSUPPORTED, so core code carries
 * no #ifdef CUDA (docs/ARCHITECTURE.md). This file is that stub, linked instead of the
 * .cu files of src/cuda when the build has no CUDA toolkit or was configured with
 * RG_CUDA=OFF.
 *
 * Invariants: available says 0, so RG_DEVICE_AUTO always picks the CPU; asking for
 * RG_DEVICE_CUDA fails in open with RG_ERR_UNSUPPORTED and a message saying what to do,
 * and so does probe (a dry run of CUDA); every other member is NULL or never reached
 * because a context never gets past open with this backend. RG_CUDA_STUB_WHY (set by
 * cmake/Cuda.cmake) picks the reason given.
 */
#include "core/internal.h"

#ifndef RG_CUDA_STUB_WHY
#define RG_CUDA_STUB_WHY 0
#endif

static const char *stub_reason(void) {
  switch (RG_CUDA_STUB_WHY) {
  case 1: return "it was configured with RG_CUDA=OFF";
  case 2: return "no CUDA toolkit was found when it was configured";
  default: return "it was built without src/cuda";
  }
}

static rg_status stub_open(rg_ctx *ctx) {
  return rg__fail(ctx, RG_ERR_UNSUPPORTED, "rg_open",
                  "this build of resgrad has no CUDA backend: %s. Open the context with "
                  "device RG_DEVICE_CPU, or RG_DEVICE_AUTO (which uses the CPU when no "
                  "CUDA backend is available)",
                  stub_reason());
}

/* Never reached: no context opens on this backend. */
static rg_status stub_meminfo(rg_ctx *ctx, size_t *available, size_t *total) {
  (void)available, (void)total;
  return stub_open(ctx);
}

static int stub_available(void) { return 0; }

const rg_backend rg_cuda_backend = {
    .name = "cuda (not built)",
    .open = stub_open,
    .probe = stub_open,
    .meminfo = stub_meminfo,
    .available = stub_available,
};
