/*
 * nccl.cu - the CUDA backend's side of data-parallel training (resgrad.h, "distributed";
 * the rendezvous and the buckets are the core's, src/core/dist.c): one NCCL communicator
 * per context, one GPU per rank, and the ALLREDUCE node.
 *
 * An ALLREDUCE node averages its bucket's gradients in place with one ncclAllReduce
 * (ncclAvg) per tensor inside one ncclGroupStart/End, on the context's communication
 * stream: it waits for an event recorded on the main stream once the kernels that
 * completed the bucket are queued, and records one when done, so the rest of the
 * backward pass runs beside it; the main stream waits for that event only before a node
 * that touches one of its gradients (clipping, the optimizer, zero_grad) and at the
 * drain's end (backend.cu: needs_join, rg_cuda_join). A captured step holds the fork and
 * the join like any other work (NCCL supports stream capture; the backend captures in
 * thread-local mode, after an eager run, which sets up NCCL's connections). Grouped
 * per-tensor calls rather than packing into one buffer: no copies in and out, no buffer
 * to size, and NCCL fuses a group into few kernels. NCCL's result is the same bits on
 * every rank (each element is reduced once and then sent to all), so the weights stay
 * bit-identical across ranks; with one rank the average is the gradient itself.
 *
 * Faults (the fault-flag protocol). Every rank must issue the same collectives in the
 * same order or its peers wait forever, so a rank never skips one:
 *  - a kernel fault raised in the error word (a bad index, check_finite) leaves the
 *    remaining kernels running, the all-reduces included. Each all-reduce also takes the
 *    maximum over the ranks of a flag (rank + 1 if this rank's error word is set, else
 *    0); a rank whose word is clear but whose flag came back set raises RG_CUDA_E_PEER,
 *    so on every rank the in-place updates after it (optimizer, zero_grad) skip and the
 *    drain fails: the weights stay equal everywhere and the step can be retried;
 *  - a non-finite gradient needs nothing: it is averaged like any other, so every rank
 *    sees the same NaN and takes the same decision (rg_clip_grad_norm skips everywhere);
 *  - a node that could not be launched (or NCCL refusing a call) before an all-reduce of
 *    its drain was issued: rg_cuda_dist_unissued aborts the communicator and closes the
 *    connections, so the peers fail at once instead of at their timeout;
 *  - a peer that dies or hangs: NCCL itself may wait forever (its kernels spin on flags
 *    the dead peer will never set), so the communicator is non-blocking (blocking = 0)
 *    and a drain that holds all-reduces is waited for by polling the stream, NCCL's
 *    asynchronous error and the rendezvous connections (rg__dist_lost) with a deadline
 *    of the timeout, cut to GRACE seconds once a peer's connection closed (a peer that
 *    finished normally may close while the last bytes it sent are still arriving, so the
 *    stream gets that long to finish). Then ncclCommAbort (which also stops the spinning
 *    kernels) and a message naming the rank when it is known. Consequence: a single
 *    drain that runs longer than RG_DIST_TIMEOUT is taken for a hung peer.
 *
 * Invariants: every NCCL call is checked and a failure says what to do; L->comm is NULL
 * whenever the communicator is not usable (never made, closed, or aborted).
 */
#include "cuda.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef RG_HAVE_NCCL
#include <nccl.h>

static_assert(sizeof(ncclUniqueId) == RG_DIST_ID, "RG_DIST_ID is NCCL's unique id size");

#define GRACE 5.0       /* seconds a stream may still take after a peer's connection closed */
#define DRAIN_STOP 5.0  /* seconds the stream gets to stop after ncclCommAbort */
#define LOST_EVERY 0.01 /* seconds between looks at the connections while waiting */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void) { /* 20 us: a step's end is seen that late at most */
  struct timespec t = {0, 20000};
  nanosleep(&t, NULL);
}

/* NCCL's own words for r: its last error message when it has one. */
static const char *nccl_why(ncclComm_t comm, ncclResult_t r) {
  const char *m = ncclGetLastError(comm);
  return m && *m ? m : ncclGetErrorString(r);
}

/* A non-blocking communicator's calls may return ncclInProgress and finish later: waits
   until its state is not ncclInProgress or the deadline passes (then ncclInProgress). */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double deadline) {
  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    if (r == ncclInProgress && now_s() > deadline) return ncclInProgress;
    if (r == ncclInProgress) nap();
  }
  return r;
}

/* Frees what dist_open made besides the communicator (after it is gone, so no kernel
   of it is left to use them: the stream and events go once their work is done). Freeing
   fails only for a context that is already broken, with nothing better to do. */
static void free_comm_state(rg_cuda_launch *L) {
  if (L->flag) (void)cudaFree(L->flag);
  if (L->comm_stream) (void)cudaStreamDestroy(L->comm_stream);
  if (L->ready) (void)cudaEventDestroy(L->ready);
  if (L->done) (void)cudaEventDestroy(L->done);
  (void)cudaGetLastError();
  L->flag = NULL;
  L->comm_stream = NULL;
  L->ready = L->done = NULL;
  L->inflight = false;
}

rg_status rg_cuda_dist_id(rg_ctx *ctx, void *id, char *msg, size_t cap) {
  (void)ctx;
  ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
  if (r == ncclSuccess) return RG_OK;
  snprintf(msg, cap, "ncclGetUniqueId failed: %s (NCCL_DEBUG=WARN in the environment makes "
           "NCCL say more; NCCL_SOCKET_IFNAME chooses the network interface it uses)",
           nccl_why(NULL, r));
  return RG_ERR_IO;
}

rg_status rg_cuda_dist_open(rg_ctx *ctx, int rank, int world, const void *id, double timeout,
                            char *msg, size_t cap) {
  rg_cuda_launch *L = rg_cuda_launch_of(ctx);
  cudaError_t ce = cudaSetDevice(L->dev);
  if (ce == cudaSuccess) ce = cudaMalloc((void **)&L->flag, sizeof(int));
  if (ce == cudaSuccess)
    ce = cudaStreamCreateWithFlags(&L->comm_stream, cudaStreamNonBlocking);
  if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&L->ready, cudaEventDisableTiming);
  if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&L->done, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    snprintf(msg, cap, "preparing GPU %d for NCCL: %s", L->dev, cudaGetErrorString(ce));
    free_comm_state(L);
    return RG_ERR_DEVICE;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0; /* every wait for the peers is ours to bound (see the top) */
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, uid, rank, &cfg);
  if (comm) r = settle(comm, r, now_s() + timeout);
  if (r == ncclSuccess) {
    L->comm = comm;
    L->rank = rank;
    L->timeout = timeout;
    L->comm_epoch++;
    return RG_OK;
  }
  if (r == ncclInProgress)
    snprintf(msg, cap, "NCCL did not set up the group of %d GPUs within %g s: a rank stopped "
             "or cannot reach the others (NCCL_DEBUG=INFO shows how far each got); raise "
             "RG_DIST_TIMEOUT if it is only slow", world, timeout);
  else
    snprintf(msg, cap, "ncclCommInitRankConfig (rank %d of %d, GPU %d) failed: %s. Each rank "
             "needs its own GPU (RG_LOCAL_RANK, CUDA_VISIBLE_DEVICES); NCCL_DEBUG=WARN makes "
             "NCCL say more", rank, world, L->dev, nccl_why(comm, r));
  if (comm) (void)ncclCommAbort(comm); /* nothing more to say if this fails too */
  free_comm_state(L);
  return RG_ERR_IO;
}

rg_status rg_cuda_dist_close(rg_ctx *ctx, bool abort, char *msg, size_t cap) {
  rg_cuda_launch *L = rg_cuda_launch_of(ctx);
  ncclComm_t comm = (ncclComm_t)L->comm;
  rg_status st = RG_OK;
  L->comm = NULL;
  rg_cuda_drop_graphs(ctx); /* they name this communicator; NCCL waits for them to go */
  if (comm && !abort) { /* finalize waits for the peers: bounded, then abort */
    ncclResult_t r = settle(comm, ncclCommFinalize(comm), now_s() + L->timeout);
    if (r == ncclSuccess) r = ncclCommDestroy(comm);
    if (r != ncclSuccess) {
      snprintf(msg, cap, "closing the NCCL communicator: %s; it was aborted instead",
               r == ncclInProgress ? "the peers did not finish within the timeout"
                                   : nccl_why(comm, r));
      st = RG_ERR_IO;
      abort = true;
    }
  }
  if (comm && abort) (void)ncclCommAbort(comm); /* the last word: nothing to do on failure */
  free_comm_state(L);
  return st;
}

/* ---- the ALLREDUCE node --------------------------------------------------------------- */

__global__ void flag_in_k(const rg_cuda_err *err, int *flag, int rank) {
  *flag = *(const volatile int *)&err->code ? rank + 1 : 0;
}

__global__ void flag_out_k(rg_cuda_err *err, const int *flag, int node) {
  if (*flag && !*(const volatile int *)&err->code)
    rg_cuda_raise(err, RG_CUDA_E_PEER, node, *flag - 1, 0, 0);
}

rg_status rg_cuda_allreduce(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ncclComm_t comm = (ncclComm_t)L->comm;
  const rg_list *l = (const rg_list *)k->node->aux;
  if (!comm) {
    snprintf(k->msg, k->msgcap, "this rank's NCCL communicator was closed by an earlier "
             "failure (the first error says which); only rg_dist_close and a new "
             "rg_dist_init, or a new process, recover");
    return RG_ERR_IO;
  }
  cudaError_t ce = cudaEventRecord(L->ready, L->stream);
  if (ce == cudaSuccess) ce = cudaStreamWaitEvent(L->comm_stream, L->ready, 0);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(k->msg, k->msgcap, "handing the bucket to the communication stream: %s",
             cudaGetErrorString(ce));
    return RG_ERR_DEVICE;
  }
  L->inflight = true; /* from here on the main stream must join it (launch_all does) */
  for (int i = 0; i < l->n; i++) rg__t(k->ctx, l->ref[i])->flags |= RG_T_COMM;
  flag_in_k<<<1, 1, 0, L->comm_stream>>>(L->err, L->flag, L->rank);
  rg_status st = rg_cuda_check_launch(k, "the all-reduce's fault flag");
  ncclResult_t r = st == RG_OK ? ncclGroupStart() : ncclSuccess;
  for (int i = 0; st == RG_OK && r == ncclSuccess && i < l->n; i++) {
    rg_tinfo *t = rg__t(k->ctx, l->ref[i]);
    r = ncclAllReduce(t->data, t->data, (size_t)t->numel, ncclFloat32, ncclAvg, comm,
                      L->comm_stream);
  }
  if (st == RG_OK && r == ncclSuccess)
    r = ncclAllReduce(L->flag, L->flag, 1, ncclInt32, ncclMax, comm, L->comm_stream);
  if (st == RG_OK) { /* always ended: a group left open would swallow later calls */
    ncclResult_t e = ncclGroupEnd();
    r = settle(comm, r == ncclSuccess ? e : r, now_s() + L->timeout); /* 1st: connects */
  }
  if (st == RG_OK && r == ncclInProgress) {
    snprintf(k->msg, k->msgcap, "NCCL could not connect this rank to its peers within %g s: "
             "a rank stopped or cannot reach the others (NCCL_DEBUG=INFO says more)",
             L->timeout);
    st = RG_ERR_IO;
  } else if (st == RG_OK && r != ncclSuccess) {
    snprintf(k->msg, k->msgcap, "ncclAllReduce of %d gradients failed: %s (NCCL_DEBUG=WARN "
             "makes NCCL say more)", l->n, nccl_why(comm, r));
    st = RG_ERR_IO;
  }
  if (st == RG_OK) {
    flag_out_k<<<1, 1, 0, L->comm_stream>>>(L->err, L->flag, L->node);
    st = rg_cuda_check_launch(k, "the all-reduce's fault flag");
  }
  ce = cudaEventRecord(L->done, L->comm_stream); /* always: the join waits for what ran */
  if (st == RG_OK && ce != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(k->msg, k->msgcap, "marking the end of the all-reduce: %s",
             cudaGetErrorString(ce));
    st = RG_ERR_DEVICE;
  }
  return st;
}

/* ---- waiting for a step ------------------------------------------------------------------ */

/* Aborts the communicator and gives the stream DRAIN_STOP seconds to stop; then breaks
   the transport with text (what happened and what to do). Before the abort lets the
   blocked all-reduce end, the error word is set from the host (a copy on the legacy
   stream runs beside the blocked one), so the optimizer step queued after it skips and
   this rank's weights stay those of its last complete step; once the stream stopped the
   word is cleared for the next drain. Failures here leave nothing better to do than
   what follows, so their results are not used. */
static rg_status give_up(rg_ctx *ctx, rg_cuda_launch *L, rg_status st, const char *text,
                         char *msg, size_t cap) {
  int code = RG_CUDA_E_ABORT;
  float zero = 0.f; /* alpha too, as rg_cuda_raise writes it */
  (void)cudaMemcpy(&L->err->code, &code, sizeof code, cudaMemcpyHostToDevice);
  (void)cudaMemcpy(&L->err->ab[0], &zero, sizeof zero, cudaMemcpyHostToDevice);
  (void)ncclCommAbort((ncclComm_t)L->comm);
  L->comm = NULL;
  double stop = now_s() + DRAIN_STOP;
  while (cudaStreamQuery(L->stream) == cudaErrorNotReady && now_s() < stop) nap();
  bool stuck = cudaStreamQuery(L->stream) == cudaErrorNotReady;
  if (!stuck)
    (void)cudaMemcpy(L->err, &rg_cuda_err_clean, sizeof *L->err, cudaMemcpyHostToDevice);
  (void)cudaGetLastError();
  return rg__dist_fail(ctx, st, msg, cap, "%s%s", text, stuck ? " (this GPU did not stop "
                       "either: end this process)" : "");
}

rg_status rg_cuda_dist_wait(rg_ctx *ctx, char *msg, size_t cap) {
  rg_cuda_launch *L = rg_cuda_launch_of(ctx);
  double t0 = now_s(), deadline = t0 + L->timeout, look = t0;
  int lost = -1;
  char text[512];
  for (;;) {
    cudaError_t e = cudaStreamQuery(L->stream);
    if (e == cudaSuccess) return RG_OK;
    if (e != cudaErrorNotReady) { /* a peer's death can fault its peers' copies into it */
      if ((lost = rg__dist_lost(ctx)) >= 0)
        snprintf(text, sizeof text, "rank %d closed its connection while this rank was "
                 "averaging gradients, and this GPU then failed (%s): stop every rank and "
                 "start the run again (from its last checkpoint)", lost,
                 cudaGetErrorString(e));
      else
        snprintf(text, sizeof text, "the device failed while running a step that averages "
                 "gradients: %s", cudaGetErrorString(e));
      return give_up(ctx, L, lost >= 0 ? RG_ERR_IO : RG_ERR_DEVICE, text, msg, cap);
    }
    ncclResult_t a = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError((ncclComm_t)L->comm, &a);
    if (q != ncclSuccess || (a != ncclSuccess && a != ncclInProgress)) {
      if (lost < 0) lost = rg__dist_lost(ctx); /* NCCL may see a dead peer first */
      const char *why = nccl_why((ncclComm_t)L->comm, q != ncclSuccess ? q : a);
      if (lost >= 0)
        snprintf(text, sizeof text, "rank %d closed its connection while this rank was "
                 "averaging gradients (NCCL: %s): that process exited or failed (its own "
                 "output says why); stop every rank and start the run again (from its "
                 "last checkpoint)", lost, why);
      else
        snprintf(text, sizeof text, "NCCL failed while averaging gradients: %s (a peer "
                 "may have failed: its own output says why; NCCL_DEBUG=WARN says more); "
                 "stop every rank and start the run again (from its last checkpoint)", why);
      return give_up(ctx, L, RG_ERR_IO, text, msg, cap);
    }
    double t = now_s();
    if (lost < 0 && t >= look) {
      look = t + LOST_EVERY;
      if ((lost = rg__dist_lost(ctx)) >= 0 && t + GRACE < deadline) deadline = t + GRACE;
    }
    if (t > deadline) {
      if (lost >= 0)
        snprintf(text, sizeof text, "rank %d closed its connection while this rank was "
                 "averaging gradients: that process exited or failed (its own output says "
                 "why); stop every rank and start the run again (from its last checkpoint)",
                 lost);
      else
        snprintf(text, sizeof text, "a step that averages gradients did not finish within "
                 "%g s: a rank is stuck, stopped or far slower than this one; look at those "
                 "processes, or raise RG_DIST_TIMEOUT (rg_dist_options.timeout) if a step "
                 "takes that long", L->timeout);
      return give_up(ctx, L, RG_ERR_IO, text, msg, cap);
    }
    nap();
  }
}

void rg_cuda_dist_unissued(rg_ctx *ctx, size_t failed, size_t last, char *msg, size_t cap) {
  rg_cuda_launch *L = rg_cuda_launch_of(ctx);
  bool unissued = false;
  for (size_t i = failed; i < last && !unissued; i++)
    unissued = ctx->nodes[i].op == RG_OP_ALLREDUCE;
  if (!unissued || !L->comm) return;
  size_t n = strlen(msg);
  snprintf(msg + n, n < cap ? cap - n : 0, "; this rank did not issue the gradient "
           "all-reduce that follows, so it closed its NCCL communicator and connections "
           "(its peers fail at once); rg_dist_close and a new rg_dist_init, or a new "
           "process, recover");
  char keep[1024]; /* the transport's copy, which every later rg_backward reports */
  (void)give_up(ctx, L, RG_ERR_IO, msg, keep, sizeof keep);
}

#else /* no NCCL: rg_dist_init never makes a communicator, so no ALLREDUCE is recorded */

rg_status rg_cuda_allreduce(rg_kargs *k) {
  return rg_cuda_unsupported(k, "the gradient all-reduce of distributed training (this "
                             "build has no NCCL)");
}

rg_status rg_cuda_dist_wait(rg_ctx *ctx, char *msg, size_t cap) {
  (void)ctx, (void)msg, (void)cap;
  return RG_OK;
}

void rg_cuda_dist_unissued(rg_ctx *ctx, size_t failed, size_t last, char *msg, size_t cap) {
  (void)ctx, (void)failed, (void)last, (void)msg, (void)cap;
}

rg_status rg_cuda_dist_close(rg_ctx *ctx, bool abort, char *msg, size_t cap) {
  (void)ctx, (void)abort, (void)msg, (void)cap;
  return RG_OK;
}

#endif
