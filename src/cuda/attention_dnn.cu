/*
 * attention_dnn.cu - BF16 attention on cuDNN's fused flash attention (dnn_att.c, through
 * its backend C API), in a build with cuDNN (RG_HAVE_CUDNN): on Hopper it is faster than
 * resgrad's mma kernels (attention_mma.cu) on long sequences. It runs wherever it applies:
 * q, k, v (and o) BF16, T == S, D a multiple of 8 up to 128, T at least DNN_MIN_T,
 * 16-byte aligned rows, and in the backward BF16 dq, dk and dv, all three wanted (dnn_att
 * writes them all). Elsewhere, in a context opened with rg_options.no_cudnn, or when cuDNN
 * has no engine for the shape, resgrad's kernels run; either side's lse serves the other's
 * backward (the same natural-log statistics). Any other cuDNN failure is the node's error,
 * its message saying how to run resgrad's kernels instead.
 *
 * cuDNN's backward takes dO in q's dtype: g is rounded to BF16 into scratch first, in o's
 * layout. The plans' workspace is the context's dnn_ws: the deterministic backward keeps
 * its dS there, B H T^2 bf16 (192 MiB at GPT-2 124M's shape), so it grows to the largest
 * plan's need, up to DNN_WS_MAX (past that: resgrad's kernels). A plan is built, and the
 * workspace grown, at the first eager run of a shape (cuDNN compiles kernels then, and
 * growing waits for the device and drops the captured graphs, which name the old
 * workspace: the one place a launcher waits or allocates), never in a graph capture,
 * which repeats a signature already run eagerly. cuDNN runs from T = DNN_MIN_T: at
 * GPT-2 124M's T = 1024 it makes the bf16 step faster; at gpt-char's T = 128 the step
 * takes the same time either way (its forward kernel is slower than ours there, its
 * backward faster), and 512 lies between.
 */
#include "attention.h"

#ifdef RG_HAVE_CUDNN
#include "dnn_att.h"

#define DNN_WS_MAX ((size_t)1 << 30)
#define DNN_MIN_T 512

namespace {

/* The context's rg_dnn, opened on first use; NULL when the context opted out or cuDNN
   failed to open (said once on stderr unless quiet). */
rg_dnn *dnn_of(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (L->dnn_off) return nullptr;
  if (!L->dnn) {
    char why[512];
    if (rg_dnn_open((rg_dnn **)&L->dnn, why, sizeof why) != RG_DNN_OK) {
      L->dnn_off = true;
      L->dnn = nullptr;
      if (!k->ctx->opt.quiet)
        fprintf(stderr, "resgrad: cuDNN's fused attention is unavailable (%s); attention "
                "runs resgrad's kernels\n", why);
      return nullptr;
    }
  }
  return (rg_dnn *)L->dnn;
}

rg_dnn_att dnn_desc(const att_dims &a) {
  rg_dnn_att d;
  d.B = a.BH / a.H, d.H = a.H, d.T = a.T, d.D = a.D;
  d.causal = a.causal;
  d.scale = a.scale;
  d.q = {a.q.sb, a.q.sh, a.q.sr};
  d.k = d.v = {a.k.sb, a.k.sh, a.k.sr};
  d.o = {a.o.sb, a.o.sh, a.o.sr};
  return d;
}

/* The shapes dnn_att takes (see the header); bwd: dq, dk and dv too. */
bool dnn_takes(const att_dims &a, const att_io &io, bool bwd) {
  if (!a.ibf || a.T != a.S || a.T < DNN_MIN_T || a.D % 8 || a.D > 128 || !a.v8 || !a.vec)
    return false;
  if (!rows_on(io.o, 2, a.o, a.D, 8) || !rows_on(io.out, 2, a.o, a.D, 8)) return false;
  if (!bwd) return a.obf;
  return a.obf && io.dq && io.dk && io.dv && rows_on(io.dq, 2, a.q, a.D, 8) &&
         rows_on(io.dk, 2, a.k, a.D, 8) && rows_on(io.dv, 2, a.k, a.D, 8);
}

/* The node's error after dnn_att's message in k->msg. */
rg_status dnn_failed(rg_kargs *k, rg_status st) {
  size_t n = strlen(k->msg);
  snprintf(k->msg + n, k->msgcap - n, " (cuDNN's fused attention; rg_options.no_cudnn = 1 "
           "or env RG_CUDNN=0 runs resgrad's kernels instead)");
  return st;
}

} /* namespace */

/* Runs the node on cuDNN when it applies (*ran); else leaves it to resgrad's kernels. A
   failure after cuDNN took the shape is the node's error. */
rg_status rg_cuda_att_dnn(rg_kargs *k, const att_dims &a, const att_io &io, bool bwd,
                          bool *ran) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  *ran = false;
  rg_dnn *d = dnn_takes(a, io, bwd) ? dnn_of(k) : nullptr;
  if (!d) return RG_OK;
  rg_dnn_att at = dnn_desc(a);
  size_t ws = 0, n = (size_t)(a.BH * a.T * a.D);
  int r = (bwd ? rg_dnn_att_bwd_ws : rg_dnn_att_fwd_ws)(d, &at, &ws, k->msg, k->msgcap);
  if (r == RG_DNN_UNSUPPORTED || (r == RG_DNN_OK && ws > DNN_WS_MAX) ||
      (bwd && n * 2 > L->scratch_bytes)) {
    k->msg[0] = 0;
    return RG_OK;
  }
  if (r != RG_DNN_OK) return dnn_failed(k, RG_ERR_DEVICE);
  if (ws > L->dnn_ws_bytes) { /* grow (see the header): outside any capture */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(L->stream, &cs) != cudaSuccess ||
        cs != cudaStreamCaptureStatusNone) {
      snprintf(k->msg, k->msgcap, "cuDNN's attention workspace would grow inside a graph "
               "capture (a bug: a shape is always run eagerly first)");
      return RG_ERR_DEVICE;
    }
    rg_cuda_drop_graphs(k->ctx);
    cudaFree(L->dnn_ws); /* waits for the kernels that use it */
    L->dnn_ws = nullptr, L->dnn_ws_bytes = 0;
    if (cudaMalloc(&L->dnn_ws, ws) != cudaSuccess) {
      (void)cudaGetLastError();
      L->dnn_ws = nullptr;
      snprintf(k->msg, k->msgcap, "out of device memory for a workspace of %zu bytes", ws);
      return dnn_failed(k, RG_ERR_OOM);
    }
    L->dnn_ws_bytes = ws;
  }
  if (bwd) { /* g (dense in o's layout) rounded to BF16 into scratch by the CAST launcher */
    rg_kargs c = *k;
    c.in[0] = k->in[k->node->op == RG_OP_ATTENTION_BWD ? 4 : 2];
    c.out[0] = c.in[0];
    c.out[0].p = L->scratch, c.out[0].dtype = RG_BF16;
    rg_status st = rg_cuda_cast(&c);
    if (st != RG_OK) return st;
    r = rg_dnn_att_bwd(d, &at, L->stream, io.q, io.k, io.v, io.o, L->scratch, io.lse, io.dq,
                       io.dk, io.dv, L->dnn_ws, k->msg, k->msgcap);
  } else {
    r = rg_dnn_att_fwd(d, &at, L->stream, io.q, io.k, io.v, io.out, io.lse, L->dnn_ws,
                       k->msg, k->msgcap);
  }
  if (r != RG_DNN_OK) return dnn_failed(k, RG_ERR_DEVICE);
  *ran = true;
  k->ctx->st.cudnn_attention++;
  return RG_OK;
}

#endif
