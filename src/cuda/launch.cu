/*
 * launch.cu - what every launcher of the CUDA backend shares: the check of a launch, the
 * messages of the launches that cannot run, and the strides of a view. Declared in cuda.h.
 */
#include "cuda.h"

#include <stdio.h>

rg_status rg_cuda_check_launch(rg_kargs *k, const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return RG_OK;
  snprintf(k->msg, k->msgcap, "launching %s failed: %s", what, cudaGetErrorString(e));
  return RG_ERR_DEVICE;
}

rg_status rg_cuda_unsupported(rg_kargs *k, const char *what) {
  snprintf(k->msg, k->msgcap, "%s is not implemented by the CUDA backend yet; run this model "
           "with RG_DEVICE_CPU", what);
  return RG_ERR_UNSUPPORTED;
}

rg_cuda_shape rg_cuda_shape_of(const rg_tv *t) {
  rg_cuda_shape s;
  s.ndim = t->ndim;
  int64_t st = 1;
  for (int i = RG_MAX_DIMS - 1; i >= 0; i--) {
    s.dims[i] = i < t->ndim ? t->dims[i] : 1;
    s.strides[i] = i < t->ndim ? st : 0;
    if (i < t->ndim) st *= t->dims[i];
  }
  return s;
}

rg_cuda_shape rg_cuda_broadcast(const rg_tv *in, const rg_tv *out) {
  rg_cuda_shape s;
  s.ndim = out->ndim;
  int64_t st = 1;
  for (int i = RG_MAX_DIMS - 1; i >= 0; i--) s.dims[i] = 1, s.strides[i] = 0;
  for (int i = out->ndim - 1, j = in->ndim - 1; i >= 0; i--, j--) {
    int64_t d = j >= 0 ? in->dims[j] : 1;
    s.dims[i] = out->dims[i];
    s.strides[i] = d == 1 ? 0 : st;
    st *= d;
  }
  return s;
}

rg_status rg_cuda_no_scratch(rg_kargs *k, size_t need) {
  snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu", need,
           rg_cuda_ctx(k)->scratch_bytes);
  return RG_ERR_UNSUPPORTED;
}
