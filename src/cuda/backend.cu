/*
 * backend.cu - the CUDA backend: device arenas (chunks from cudaMalloc), pinned staging,
 * one stream per context, and a drain that launches each node's kernels in order.
 *
 * Invariants:
 *  - Every CUDA call goes through RG_CUDA_CHECK, which records the call, file:line and
 *    cudaGetErrorString into the context (RG_ERR_DEVICE, or RG_ERR_OOM for allocations).
 *  - A drain ends with one stream synchronisation. Just before it, the error word (device
 *    memory, cheap for every kernel to read) is copied to pinned host memory; after it,
 *    that copy says whether a kernel found a caller's fault. A fault clears both.
 *  - Launchers never synchronise or allocate; uploads come from pinned staging, so they
 *    are asynchronous and the caller's buffer was already copied by the core.
 */
#include "cuda.h"
#ifdef RG_HAVE_CUDNN
#include "dnn_att.h"
#endif

#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

/* One node as the graph cache sees it: everything a launcher turns into a kernel
   argument or a launch shape (addresses, shapes, baked scalars, aux contents). Two drains
   with equal signatures launch identical work, so the second can replay the first's
   graph: per-step values (batch, lr, Adam's step, dropout's step) live in device memory
   or pinned staging at fixed addresses, never in the signature. */
typedef struct nsig {
  int32_t op, nin, nout;
  int32_t finite; /* rg_options.check_finite: a graph captured without the checks must
                     not replay for a drain that wants them (rg_set_check_finite) */
  const void *ptr[RG_MAX_IN + RG_MAX_OUT];
  int64_t dims[RG_MAX_IN + RG_MAX_OUT][RG_MAX_DIMS + 1];
  int64_t i[4];
  float f[4];
  const void *aux;
  uint64_t aux_hash; /* the data addresses behind a list or optimizer aux */
} nsig;

#define GRAPH_CACHE 8  /* distinct step shapes kept (train, eval, ...): LRU beyond */
#define GRAPH_WARMUP 1 /* eager runs of a signature before it is captured */

typedef struct gentry {
  nsig *sig;
  size_t n;
  uint64_t used;
  int seen;
  cudaGraphExec_t exec;
} gentry;

typedef struct rg_cuda_state {
  int dev;
  rg_cuda_launch L;
  rg_cuda_err *err_host; /* pinned; the device word's copy at the end of each drain */
  gentry cache[GRAPH_CACHE];
  uint64_t tick;
  nsig *cur;          /* signature of the drain being run */
  size_t cur_cap;
  gentry last;        /* the previous drain's signature, to explain a miss */
  void *bounce;       /* pinned buffer that reads of up to BOUNCE bytes go through */
  cudaEvent_t handoff; /* rg_export: recorded on the stream, waited for by the borrower's */
  /* RG_PROFILE=1: drains run eagerly with an event pair around each node, and the
     device time per op (all drains but the first RG_PROFILE_SKIP, which pay for loading
     kernels) is printed to stderr when the context closes. */
  bool prof;
  cudaEvent_t *ev;    /* 2 per node of the current drain */
  size_t nev;
  rg_profile prof_t;  /* the table (profile.c) */
  /* What this drain's events time: TIMED_NODES, ev holds a pair per node (RG_PROFILE, or
     an eager drain while the trace file is on); TIMED_GRAPH, gev brackets the launch of a
     graph (trace file); 0, nothing. t_issue: host time (rg__trace_now) when the first of
     them was issued, where the trace places the device spans. */
  int timed;
  cudaEvent_t gev[2];
  double t_issue;
  const char *grun;   /* the timed graph's run: "first" (just captured) or "replay" */
} rg_cuda_state;

enum { TIMED_NODES = 1, TIMED_GRAPH = 2 };

#define BOUNCE ((size_t)1 << 20)

static rg_status cuda_check(rg_ctx *ctx, cudaError_t e, const char *call, const char *file,
                            int line) {
  if (e == cudaSuccess) return RG_OK;
  (void)cudaGetLastError(); /* clear a non-sticky error so the context keeps working */
  const char *lab = ctx->lsp ? rg__label_str(ctx, ctx->lstack[ctx->lsp - 1]) : "";
  return rg__fail(ctx, e == cudaErrorMemoryAllocation ? RG_ERR_OOM : RG_ERR_DEVICE, "cuda",
                  "%s failed at %s:%d%s%s: %s", call, file, line, *lab ? " under " : "", lab,
                  cudaGetErrorString(e));
}
#define RG_CUDA_CHECK(ctx, call) cuda_check((ctx), (call), #call, __FILE__, __LINE__)

static rg_cuda_state *state(rg_ctx *ctx) { return (rg_cuda_state *)ctx->be_state; }
rg_cuda_launch *rg_cuda_launch_of(rg_ctx *ctx) { return &state(ctx)->L; }

/* The backend's available: a usable GPU is present. */
static int cuda_available(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n > 0;
}

static void cuda_close(rg_ctx *ctx);

/* The GPU a context opens: device_index; or, when that is 0 (the default) in a process
   started as one rank of a data-parallel run (RG_WORLD_SIZE set, as resgrad-run does),
   the rank's own: RG_LOCAL_RANK, else RG_RANK modulo the GPUs. The choice is made here
   because every allocation of the context (parameters included, which exist before
   rg_dist_init) lands on it. -1 after failing with a message. */
static int pick_device(rg_ctx *ctx, int n) {
  const char *world = getenv("RG_WORLD_SIZE"), *lr = getenv("RG_LOCAL_RANK");
  const char *rk = getenv("RG_RANK"), *v = lr && *lr ? lr : rk;
  if (ctx->opt.device_index != 0 || !world || !*world || !v || !*v) {
    if (ctx->opt.device_index >= 0 && ctx->opt.device_index < n) return ctx->opt.device_index;
    rg__fail(ctx, RG_ERR_MISUSE, "rg_open", "device_index %d is outside [0, %d)",
             ctx->opt.device_index, n);
    return -1;
  }
  char *end = NULL;
  long r = strtol(v, &end, 10);
  if (*end || r < 0 || (v == lr && r >= n)) {
    rg__fail(ctx, RG_ERR_MISUSE, "rg_open", "%s=\"%.40s\" %s: each rank of a machine needs "
             "its own GPU; start at most %d ranks per machine (resgrad-run -n), or choose "
             "the GPUs with CUDA_VISIBLE_DEVICES", v == lr ? "RG_LOCAL_RANK" : "RG_RANK", v,
             *end || r < 0 ? "is not a rank" : "names no GPU here", n);
    return -1;
  }
  return (int)(r % n);
}

/* The GPU is there: picks it (ctx->device_index) and names it, touching nothing on it
   (cudaSetDevice would make its runtime context). All a dry run opens. */
static rg_status cuda_probe(rg_ctx *ctx) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return rg__fail(ctx, RG_ERR_UNSUPPORTED, "rg_open", "RG_DEVICE_CUDA was asked for but no "
                    "CUDA GPU is usable here; use RG_DEVICE_AUTO (falls back to the CPU) or "
                    "RG_DEVICE_CPU");
  }
  int dev = pick_device(ctx, n);
  if (dev < 0) return RG_ERR_MISUSE;
  cudaDeviceProp p;
  rg_status st = RG_CUDA_CHECK(ctx, cudaGetDeviceProperties(&p, dev));
  if (st != RG_OK) return st;
  ctx->device_index = dev;
  snprintf(ctx->devname, sizeof ctx->devname, "cuda:%d (%.70s)", dev, p.name);
  return RG_OK;
}

static rg_status cuda_open(rg_ctx *ctx) {
  rg_status st = cuda_probe(ctx);
  if (st != RG_OK) return st;
  rg_cuda_state *s = (rg_cuda_state *)rg__calloc(ctx, 1, sizeof *s);
  if (!s) return rg__fail(ctx, RG_ERR_OOM, "rg_open", "out of host memory");
  ctx->be_state = s;
  s->dev = ctx->device_index;
  rg_cuda_launch *L = &s->L;
  L->dev = s->dev;
  L->dnn_off = ctx->opt.no_cudnn != 0;
  st = RG_CUDA_CHECK(ctx, cudaSetDevice(s->dev));
  if (st == RG_OK)
    st = RG_CUDA_CHECK(ctx, cudaDeviceGetAttribute(&L->sms, cudaDevAttrMultiProcessorCount,
                                                   s->dev));
  if (st == RG_OK)
    st = RG_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&L->stream, cudaStreamNonBlocking));
  if (st == RG_OK) {
    cublasStatus_t b = cublasLtCreate((cublasLtHandle_t *)&L->lt);
    if (b != CUBLAS_STATUS_SUCCESS)
      st = rg__fail(ctx, RG_ERR_DEVICE, "rg_open", "cublasLtCreate failed (status %d)", (int)b);
  }
  /* cuBLASLt's workspace and the launchers' scratch are fixed: a drain never allocates. */
  L->lt_ws_bytes = (size_t)32 << 20;
  L->scratch_bytes = (size_t)64 << 20;
  if (st == RG_OK) st = RG_CUDA_CHECK(ctx, cudaMalloc(&L->lt_ws, L->lt_ws_bytes));
  if (st == RG_OK) st = RG_CUDA_CHECK(ctx, cudaMalloc(&L->scratch, L->scratch_bytes));
  if (st == RG_OK) st = RG_CUDA_CHECK(ctx, cudaHostAlloc(&s->bounce, BOUNCE, 0));
  if (st == RG_OK) /* made here, where the context's GPU is current, as its stream is */
    st = RG_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&s->handoff, cudaEventDisableTiming));
  if (st == RG_OK)
    st = RG_CUDA_CHECK(ctx, cudaHostAlloc((void **)&s->err_host, sizeof(rg_cuda_err), 0));
  if (st == RG_OK) {
    memset(s->err_host, 0, sizeof *s->err_host);
    st = RG_CUDA_CHECK(ctx, cudaMalloc((void **)&L->err, sizeof(rg_cuda_err)));
  }
  if (st == RG_OK)
    st = RG_CUDA_CHECK(ctx, cudaMemcpy(L->err, &rg_cuda_err_clean, sizeof(rg_cuda_err),
                                       cudaMemcpyHostToDevice));
  if (st == RG_OK) st = RG_CUDA_CHECK(ctx, cudaMalloc(&L->ce_check, 16));
  /* set on the stream (non-blocking: a plain cudaMemset would not be ordered before its
     kernels) */
  if (st == RG_OK) st = RG_CUDA_CHECK(ctx, cudaMemsetAsync(L->ce_check, 0xff, 16, L->stream));
  s->prof = rg__profile_wanted();
  if (st != RG_OK) {
    cuda_close(ctx);
    ctx->be_state = NULL;
  }
  return st;
}

static void drop_entry(rg_ctx *ctx, gentry *e) {
  if (e->exec) cudaGraphExecDestroy(e->exec);
  rg__free(ctx, e->sig);
  memset(e, 0, sizeof *e);
}

void rg_cuda_drop_graphs(rg_ctx *ctx) {
  rg_cuda_state *s = state(ctx);
  for (int i = 0; i < GRAPH_CACHE; i++) drop_entry(ctx, &s->cache[i]);
}

static void cuda_close(rg_ctx *ctx) {
  rg_cuda_state *s = state(ctx);
  if (!s) return;
  rg_cuda_launch *L = &s->L;
  if (s->prof) rg__profile_print(&s->prof_t, "device time");
  if (L->comm) { /* rg_close left the group first; this is for a failed rg_open */
    char msg[256];
    (void)rg_cuda_dist_close(ctx, true, msg, sizeof msg);
  }
  for (size_t i = 0; i < s->nev; i++) cudaEventDestroy(s->ev[i]);
  rg__free(ctx, s->ev);
  for (int i = 0; i < 2; i++)
    if (s->gev[i]) cudaEventDestroy(s->gev[i]);
  rg_cuda_drop_graphs(ctx);
  drop_entry(ctx, &s->last);
  rg__free(ctx, s->cur);
  if (L->stream) cudaStreamSynchronize(L->stream);
  if (L->lt) cublasLtDestroy((cublasLtHandle_t)L->lt);
  rg_cuda_tune_free(L);
#ifdef RG_HAVE_CUDNN
  rg_dnn_close((rg_dnn *)L->dnn);
#endif
  cudaFree(L->dnn_ws);
  cudaFree(L->lt_ws);
  cudaFree(L->scratch);
  if (s->err_host) cudaFreeHost(s->err_host);
  cudaFree(L->err);
  cudaFree(L->ce_check);
  if (s->bounce) cudaFreeHost(s->bounce);
  if (s->handoff) cudaEventDestroy(s->handoff);
  if (L->stream) cudaStreamDestroy(L->stream);
  (void)cudaGetLastError();
  rg__free(ctx, s);
  ctx->be_state = NULL;
}

static void *cuda_alloc(rg_ctx *ctx, size_t bytes) {
  void *p = NULL;
  if (!rg__alloc_tick(ctx)) return NULL;
  if (cudaMalloc(&p, bytes ? bytes : RG_ALIGN) != cudaSuccess) {
    (void)cudaGetLastError(); /* a device OOM is reported by the caller as RG_ERR_OOM */
    return NULL;
  }
  return p;
}
static void cuda_free(rg_ctx *ctx, void *p) {
  (void)ctx;
  cudaFree(p);
}
static void *cuda_host_alloc(rg_ctx *ctx, size_t bytes) {
  void *p = NULL;
  if (!rg__alloc_tick(ctx)) return NULL;
  if (cudaHostAlloc(&p, bytes ? bytes : RG_ALIGN, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}
static void cuda_host_free(rg_ctx *ctx, void *p) {
  (void)ctx;
  cudaFreeHost(p);
}

/* Eager copies (parameter init, rg_write, reads): ordered on the stream, then waited for,
   because the host buffer may be pageable and is reused as soon as the call returns. */
static rg_status cuda_copy(rg_ctx *ctx, void *dst, const void *src, size_t bytes,
                           cudaMemcpyKind kind) {
  if (!bytes) return RG_OK;
  cudaStream_t s = state(ctx)->L.stream;
  rg_status st = RG_CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, kind, s));
  return st == RG_OK ? RG_CUDA_CHECK(ctx, cudaStreamSynchronize(s)) : st;
}
static rg_status cuda_upload(rg_ctx *ctx, void *dst, const void *src, size_t bytes) {
  return cuda_copy(ctx, dst, src, bytes, cudaMemcpyHostToDevice);
}
/* Small reads go through pinned memory: a true asynchronous copy, then a memcpy. */
static rg_status cuda_download(rg_ctx *ctx, void *dst, const void *src, size_t bytes) {
  rg_cuda_state *s = state(ctx);
  if (bytes > BOUNCE) return cuda_copy(ctx, dst, src, bytes, cudaMemcpyDeviceToHost);
  rg_status st = cuda_copy(ctx, s->bounce, src, bytes, cudaMemcpyDeviceToHost);
  if (st == RG_OK) memcpy(dst, s->bounce, bytes);
  return st;
}
static rg_status cuda_zero(rg_ctx *ctx, void *dst, size_t bytes) {
  if (!bytes) return RG_OK;
  return RG_CUDA_CHECK(ctx, cudaMemsetAsync(dst, 0, bytes, state(ctx)->L.stream));
}
static rg_status cuda_sync(rg_ctx *ctx) {
  return RG_CUDA_CHECK(ctx, cudaStreamSynchronize(state(ctx)->L.stream));
}
/* The context's GPU: free and total bytes. For a dry run this makes the GPU's runtime
   context, if nothing in the process had. */
static rg_status cuda_meminfo(rg_ctx *ctx, size_t *available, size_t *total) {
  rg_status st = RG_CUDA_CHECK(ctx, cudaSetDevice(ctx->device_index));
  return st == RG_OK ? RG_CUDA_CHECK(ctx, cudaMemGetInfo(available, total)) : st;
}

/* ---- sharing memory (share.c) --------------------------------------------------------- */

static void *cuda_stream(rg_ctx *ctx) { return (void *)state(ctx)->L.stream; }

/* The borrower's stream waits, on the device, for everything queued on the context's;
   NULL (the host) synchronises. */
static rg_status cuda_handoff(rg_ctx *ctx, void *stream) {
  rg_cuda_state *s = state(ctx);
  if (!stream) return RG_CUDA_CHECK(ctx, cudaStreamSynchronize(s->L.stream));
  cudaStream_t b = (cudaStream_t)stream;
  if (b == s->L.stream) return RG_OK; /* ordered already */
  rg_status st = RG_CUDA_CHECK(ctx, cudaEventRecord(s->handoff, s->L.stream));
  return st == RG_OK ? RG_CUDA_CHECK(ctx, cudaStreamWaitEvent(b, s->handoff, 0)) : st;
}

/* Device (or managed) memory of the context's GPU; host memory, pinned or not, is
   refused: the kernels would read it across the bus, or fault. */
static rg_status cuda_owns(rg_ctx *ctx, const void *p, char *msg, size_t msgcap) {
  cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(msg, msgcap, "CUDA does not know the address %p (%s)", p, cudaGetErrorString(e));
    return RG_ERR_MISUSE;
  }
  bool device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  if (device && a.device == state(ctx)->dev) return RG_OK;
  if (device)
    snprintf(msg, msgcap, "the address %p is memory of cuda:%d", p, a.device);
  else
    snprintf(msg, msgcap, "the address %p is %s memory, not the GPU's", p,
             a.type == cudaMemoryTypeHost ? "pinned host" : "host");
  return RG_ERR_MISUSE;
}

typedef rg_status (*rg_cuda_fn)(rg_kargs *k);
static const rg_cuda_fn launchers[] = {
#define RG_CUDA_ROW(E, n, ...) rg_cuda_##n,
    RG_OPS(RG_CUDA_ROW)
#undef RG_CUDA_ROW
};
static_assert(sizeof launchers / sizeof launchers[0] == RG_OP_COUNT,
              "every op has a CUDA launcher");

/* Turns the error word into the failing node and its message, and clears it. */
static rg_status take_fault(rg_cuda_state *s, size_t first, size_t *failed, char *msg,
                            size_t cap) {
  rg_cuda_err e;
  memcpy(&e, (const void *)s->err_host, sizeof e); /* the stream was synchronised */
  if (!e.code) return RG_OK;
  *s->err_host = rg_cuda_err_clean; /* pinned: the copy below is asynchronous */
  /* Stream-ordered before the next drain; a failure here shows in the next drain. */
  (void)cudaMemcpyAsync(s->L.err, s->err_host, sizeof *s->err_host, cudaMemcpyHostToDevice,
                        s->L.stream);
  *failed = first + (size_t)e.node;
  if (e.code == RG_CUDA_E_NONFINITE) {
    snprintf(msg, cap, "output %lld element %lld is %s (check_finite is on: this is the "
             "first op whose output is not finite) — look at its inputs and arguments, or "
             "lower the learning rate", e.value, e.pos,
             e.limit == 0 ? "NaN" : e.limit > 0 ? "+Inf" : "-Inf");
    return RG_ERR_NONFINITE;
  }
  if (e.code == RG_CUDA_E_PEER) {
    snprintf(msg, cap, "rank %lld failed earlier in this step (its own error says where and "
             "why), and its gradients are in this average: every rank skips the step's "
             "updates, so the weights stay those of the last complete step, equal on every "
             "rank. Fix the cause on that rank", e.value);
    return RG_ERR_FAILED;
  }
  if (e.code == RG_CUDA_E_RING)
    snprintf(msg, cap, RG_RING_INDEX_MSG, e.value, e.pos, e.limit, e.limit);
  else if (e.code == RG_CUDA_E_EMPTY)
    snprintf(msg, cap, RG_RING_EMPTY_MSG);
  else if (e.code == RG_CUDA_E_POS)
    snprintf(msg, cap, RG_DECODE_POS_MSG, e.value, e.pos, e.limit);
  else if (e.code == RG_CUDA_E_INDEX)
    snprintf(msg, cap, "index %lld at position %lld is outside [0, %lld): token ids must be "
             "smaller than the table's rows", e.value, e.pos, e.limit);
  else
    snprintf(msg, cap, "target %lld at row %lld is outside [0, %lld): targets must be class "
             "indices (or the ignore_index)", e.value, e.pos, e.limit);
  return RG_ERR_MISUSE;
}

/* A CLIP node reports a non-finite norm through its state; read after the drain. */
static rg_status clip_soft(rg_ctx *ctx, size_t first, size_t last, size_t *at, char *msg,
                           size_t cap) {
  for (size_t i = first; i < last; i++) {
    const rg_node *n = &ctx->nodes[i];
    if (n->op != RG_OP_CLIP) continue;
    float st[2] = {0, 0};
    if (cudaMemcpy(st, rg__t(ctx, n->in[0])->data, sizeof st, cudaMemcpyDeviceToHost) !=
        cudaSuccess)
      return RG_CUDA_CHECK(ctx, cudaGetLastError());
    if (st[1] != 0) {
      *at = i;
      snprintf(msg, cap, "the gradient norm is not finite (%g); the optimizer step that "
               "follows is skipped and weights and moments are unchanged — lower the "
               "learning rate or look for a NaN in the loss", st[0]);
      return RG_ERR_NONFINITE;
    }
  }
  return RG_OK;
}

/* ---- graph cache ------------------------------------------------------------------- */

static uint64_t list_hash(rg_ctx *ctx, const rg_list *l, uint64_t h) {
  for (int i = 0; l && i < l->n; i++)
    h = rg__fnv1a_u64(h, l->ref[i] ? (uint64_t)(uintptr_t)rg__t(ctx, l->ref[i])->data : 0);
  return rg__fnv1a_u64(h, l ? (uint64_t)l->n : 0);
}

static void sign(rg_ctx *ctx, const rg_node *n, nsig *g) {
  memset(g, 0, sizeof *g);
  g->op = n->op;
  g->nin = n->nin;
  g->nout = n->nout;
  g->finite = ctx->opt.check_finite != 0;
  for (int j = 0; j < n->nin + n->nout; j++) {
    uint32_t ref = j < n->nin ? n->in[j] : n->out[j - n->nin];
    if (!ref) continue;
    rg_tinfo *t = rg__t(ctx, ref);
    g->ptr[j] = t->data;
    g->dims[j][0] = t->ndim | (int64_t)t->dtype << 8;
    for (int d = 0; d < t->ndim; d++) g->dims[j][d + 1] = t->dims[d];
  }
  memcpy(g->i, n->i, sizeof g->i);
  memcpy(g->f, n->f, sizeof g->f);
  g->aux = n->aux;
  unsigned f = rg_optab[n->op].flags;
  if (f & RG_F_LIST) {
    g->aux_hash = list_hash(ctx, (const rg_list *)n->aux, RG_FNV_START);
    if (f & RG_F_COMM) /* the graph names the communicator too */
      g->aux_hash = rg__fnv1a_u64(g->aux_hash, state(ctx)->L.comm_epoch);
  } else if (f & RG_F_OPTIM) {
    const rg_optim *o = (const rg_optim *)n->aux;
    uint64_t h = list_hash(ctx, &o->params, RG_FNV_START);
    h = list_hash(ctx, &o->grads, list_hash(ctx, &o->m, list_hash(ctx, &o->v, h)));
    h = list_hash(ctx, &o->shadow, h); /* a shadow made later changes the launch */
    g->aux_hash = rg__fnv1a_u64(rg__fnv1a_u64(h, (uint64_t)(uintptr_t)rg__t(ctx, o->hyper)->data),
                      (uint64_t)(uintptr_t)rg__t(ctx, o->step)->data);
  }
}

/* Why this drain's signature differs from the previous one: first node and field. */
static void explain(rg_ctx *ctx, const gentry *prev, const nsig *cur, size_t n, const char *what) {
  char *r = ctx->st.graph_miss_reason;
  size_t cap = sizeof ctx->st.graph_miss_reason;
  if (!prev->sig) {
    snprintf(r, cap, "%s: first drain", what);
    return;
  }
  if (prev->n != n) {
    snprintf(r, cap, "%s: %zu nodes, the previous drain had %zu", what, n, prev->n);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const nsig *a = &prev->sig[i], *b = &cur[i];
    const char *field = a->op != b->op                               ? "op"
                        : a->finite != b->finite                     ? "check_finite"
                        : memcmp(a->ptr, b->ptr, sizeof a->ptr)      ? "a tensor address"
                        : memcmp(a->dims, b->dims, sizeof a->dims)   ? "a shape"
                        : memcmp(a->i, b->i, sizeof a->i)            ? "an integer argument"
                        : memcmp(a->f, b->f, sizeof a->f)            ? "a float argument"
                        : a->aux != b->aux || a->aux_hash != b->aux_hash ? "aux data"
                                                                     : NULL;
    if (field) {
      snprintf(r, cap, "%s: node %zu (%s) differs in %s", what, i, rg_optab[b->op].name, field);
      return;
    }
  }
  snprintf(r, cap, "%s: same as the previous drain (warm-up before capture)", what);
}

/* The cached entry of exactly this signature, or NULL. No hash first: memcmp reads a
   signature (560 bytes a node) far faster than a byte-by-byte hash of it would be made,
   and stops early at an entry that differs; the GPU waits for either, every step. */
static gentry *lookup(rg_cuda_state *s, const nsig *g, size_t n) {
  for (int i = 0; i < GRAPH_CACHE; i++) {
    gentry *e = &s->cache[i];
    if (e->sig && e->n == n && !memcmp(e->sig, g, n * sizeof *g)) return e;
  }
  return NULL;
}

/* The entry to hold a new signature: an empty slot or the least recently used. */
static gentry *victim(rg_ctx *ctx, rg_cuda_state *s) {
  gentry *v = &s->cache[0];
  for (int i = 0; i < GRAPH_CACHE; i++) {
    if (!s->cache[i].sig) return &s->cache[i];
    if (s->cache[i].used < v->used) v = &s->cache[i];
  }
  drop_entry(ctx, v);
  return v;
}

cudaError_t rg_cuda_join(rg_ctx *ctx, size_t first, size_t upto) {
  rg_cuda_launch *L = &state(ctx)->L;
  if (!L->inflight) return cudaSuccess;
  L->inflight = false;
  for (size_t i = first; i < upto; i++) {
    const rg_node *n = &ctx->nodes[i];
    const rg_list *l = (const rg_list *)n->aux;
    for (int j = 0; n->op == RG_OP_ALLREDUCE && j < l->n; j++)
      rg__t(ctx, l->ref[j])->flags &= (uint8_t)~RG_T_COMM;
  }
  return cudaStreamWaitEvent(L->stream, L->done, 0);
}

/* A failed join as the failure of node i of a drain. */
static rg_status join_failed(cudaError_t e, size_t i, size_t *failed, char *msg, size_t cap) {
  (void)cudaGetLastError();
  *failed = i;
  snprintf(msg, cap, "cudaStreamWaitEvent (for the gradient all-reduces) failed: %s",
           cudaGetErrorString(e));
  return RG_ERR_DEVICE;
}

/* Must node n wait for the all-reduces in flight? Yes if it touches one of their
   gradients: as an operand (a later backward never does: a bucket is recorded once its
   gradients are complete), or through a list (clipping, the optimizers, zero_grad).
   Other nodes, the rest of the backward pass, run beside them. */
static bool needs_join(rg_ctx *ctx, const rg_node *n) {
  unsigned f = rg_optab[n->op].flags;
  if ((f & (RG_F_LIST | RG_F_OPTIM)) && !(f & RG_F_COMM)) return true;
  for (int j = 0; j < n->nin + n->nout; j++) {
    uint32_t ref = j < n->nin ? n->in[j] : n->out[j - n->nin];
    if (ref && (rg__t(ctx, ref)->flags & RG_T_COMM)) return true;
  }
  return false;
}

/* At least want timing events in s->ev; false (CUDA's error cleared) if they cannot be
   made. */
static bool have_events(rg_ctx *ctx, rg_cuda_state *s, size_t want) {
  size_t have = s->nev;
  if (want <= have) return true;
  bool ok = rg__grow(ctx, (void **)&s->ev, sizeof *s->ev, want, &have);
  while (ok && s->nev < want)
    if ((ok = cudaEventCreate(&s->ev[s->nev]) == cudaSuccess)) s->nev++;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

/* Records a timing event on the stream; a failure leaves this drain untimed. */
static void mark(rg_cuda_state *s, cudaEvent_t e) {
  if (cudaEventRecord(e, s->L.stream) == cudaSuccess) return;
  (void)cudaGetLastError();
  s->timed = 0;
}

static rg_status launch_all(rg_ctx *ctx, size_t first, size_t last, size_t *failed, char *msg,
                            size_t msgcap) {
  rg_cuda_state *s = state(ctx);
  rg_kargs k;
  for (size_t i = first; i < last; i++) {
    const rg_node *n = &ctx->nodes[i];
    cudaError_t je = s->L.inflight && needs_join(ctx, n) ? rg_cuda_join(ctx, first, i)
                                                        : cudaSuccess;
    if (je != cudaSuccess) return join_failed(je, i, failed, msg, msgcap);
    memset(&k, 0, sizeof k);
    k.ctx = ctx;
    k.node = n;
    k.threads = 1;
    k.msg = msg;
    k.msgcap = msgcap;
    k.be = &s->L;
    s->L.node = (int)(i - first); /* relative: a replay may start at another index */
    for (int j = 0; j < n->nin; j++) rg__tv(ctx, n->in[j], &k.in[j]);
    for (int j = 0; j < n->nout; j++) rg__tv(ctx, n->out[j], &k.out[j]);
    if (s->timed == TIMED_NODES) mark(s, s->ev[2 * (i - first)]);
    rg_status st = launchers[n->op](&k);
    if (s->timed == TIMED_NODES) mark(s, s->ev[2 * (i - first) + 1]);
    ctx->st.launches++;
    if (st == RG_OK && ctx->opt.check_finite) st = rg_cuda_check_finite(&k);
    if (st != RG_OK) {
      *failed = i;
      (void)rg_cuda_join(ctx, first, i + 1); /* what was launched ends on the stream */
      return st;
    }
  }
  /* The drain's end (its synchronisation, a capture's end) covers the all-reduces. */
  cudaError_t je = rg_cuda_join(ctx, first, last);
  return je == cudaSuccess ? RG_OK : join_failed(je, last - 1, failed, msg, msgcap);
}

/* launch_all, with each node between an event pair while the trace file is on (the
   device time of each op, written after the drain's synchronisation by trace_device). */
static rg_status eager(rg_ctx *ctx, size_t first, size_t last, size_t *failed, char *msg,
                       size_t msgcap) {
  rg_cuda_state *s = state(ctx);
  if (ctx->trace && have_events(ctx, s, 2 * (last - first))) {
    s->timed = TIMED_NODES;
    s->t_issue = rg__trace_now(ctx);
  }
  return launch_all(ctx, first, last, failed, msg, msgcap);
}

/* cudaGraphLaunch; while the trace file is on, between the gev pair and inside a host
   span named what ("replay", or "launch" of a graph just captured). */
static cudaError_t launch_graph(rg_ctx *ctx, cudaGraphExec_t exec, size_t nodes,
                                const char *what) {
  rg_cuda_state *s = state(ctx);
  if (!ctx->trace) return cudaGraphLaunch(exec, s->L.stream);
  for (int i = 0; i < 2; i++)
    if (!s->gev[i] && cudaEventCreate(&s->gev[i]) != cudaSuccess) (void)cudaGetLastError();
  double ts = rg__trace_now(ctx);
  s->timed = s->gev[0] && s->gev[1] ? TIMED_GRAPH : 0;
  s->t_issue = ts;
  s->grun = what[0] == 'r' ? "replay" : "first";
  if (s->timed) mark(s, s->gev[0]);
  cudaError_t e = cudaGraphLaunch(exec, s->L.stream);
  if (e != cudaSuccess) s->timed = 0;
  else if (s->timed) mark(s, s->gev[1]);
  rg__trace_event(ctx, 'X', RG_TRACK_HOST, what, ts, rg__trace_now(ctx) - ts,
                  "\"nodes\":%zu,\"status\":\"%s\"", nodes, cudaGetErrorName(e));
  return e;
}

/* The device spans of a drain that ran (see timed): one per node, or one for the graph. */
static void trace_device(rg_ctx *ctx, size_t first, size_t last) {
  rg_cuda_state *s = state(ctx);
  float ms = 0, at = 0;
  if (s->timed == TIMED_GRAPH) {
    if (cudaEventElapsedTime(&ms, s->gev[0], s->gev[1]) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    rg__trace_event(ctx, 'X', RG_TRACK_DEVICE, "graph", s->t_issue, 1e3 * (double)ms,
                    "\"nodes\":%zu,\"first\":%zu,\"run\":\"%s\"", last - first, first,
                    s->grun);
    return;
  }
  for (size_t i = first; s->timed == TIMED_NODES && i < last; i++) {
    cudaEvent_t *e = &s->ev[2 * (i - first)];
    if (cudaEventElapsedTime(&at, s->ev[0], e[0]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e[0], e[1]) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    rg__trace_op(ctx, i, s->t_issue + 1e3 * (double)at, 1e3 * (double)ms);
  }
}

/* Runs [first, last): replays the cached graph of an identical earlier drain, captures
   one after GRAPH_WARMUP eager runs, else launches eagerly. Then one synchronisation. */
static rg_status run_queue(rg_ctx *ctx, size_t first, size_t last, size_t *failed, char *msg,
                           size_t msgcap) {
  rg_cuda_state *s = state(ctx);
  size_t n = last - first;
  s->timed = 0;
  if (s->prof) { /* eager, with 2n events */
    if (!have_events(ctx, s, 2 * n)) {
      *failed = first;
      snprintf(msg, msgcap, "RG_PROFILE: cannot make the timing events");
      return RG_ERR_OOM;
    }
    s->timed = TIMED_NODES;
    s->t_issue = ctx->trace ? rg__trace_now(ctx) : 0;
    return launch_all(ctx, first, last, failed, msg, msgcap);
  }
  size_t cap = s->cur_cap;
  if (!rg__grow(ctx, (void **)&s->cur, sizeof *s->cur, n, &cap)) /* no cache: run eagerly */
    return eager(ctx, first, last, failed, msg, msgcap);
  s->cur_cap = cap;
  for (size_t i = 0; i < n; i++) sign(ctx, &ctx->nodes[first + i], &s->cur[i]);
  gentry *e = lookup(s, s->cur, n);
  if (e && e->exec) {
    e->used = ++s->tick;
    ctx->st.graph_replays++;
    ctx->st.launches++;
    cudaError_t ce = launch_graph(ctx, e->exec, n, "replay");
    if (ce == cudaSuccess) return RG_OK;
    *failed = first;
    snprintf(msg, msgcap, "cudaGraphLaunch failed: %s", cudaGetErrorString(ce));
    (void)cudaGetLastError();
    return RG_ERR_DEVICE;
  }
  ctx->st.graph_misses++;
  explain(ctx, &s->last, s->cur, n, e ? "warm-up" : "new step shape");
  if (!e) {
    e = victim(ctx, s);
    e->sig = (nsig *)rg__malloc(ctx, n * sizeof *e->sig);
    if (!e->sig) return eager(ctx, first, last, failed, msg, msgcap);
    memcpy(e->sig, s->cur, n * sizeof *e->sig);
    e->n = n;
  }
  e->used = ++s->tick;
  /* Remember this signature to explain the next miss. */
  nsig *keep = (nsig *)rg__malloc(ctx, n * sizeof *keep);
  if (keep) {
    memcpy(keep, s->cur, n * sizeof *keep);
    rg__free(ctx, s->last.sig);
    s->last.sig = keep;
    s->last.n = n;
  }
  if (e->seen++ < GRAPH_WARMUP) return eager(ctx, first, last, failed, msg, msgcap);
  /* Capture: the launchers record into a graph instead of running (untimed: events
     recorded during a capture would be nodes of the graph). */
  cudaGraph_t g = NULL;
  double ts = ctx->trace ? rg__trace_now(ctx) : 0;
  cudaError_t ce = cudaStreamBeginCapture(s->L.stream, cudaStreamCaptureModeThreadLocal);
  rg_status st = ce == cudaSuccess ? launch_all(ctx, first, last, failed, msg, msgcap)
                                   : RG_ERR_DEVICE;
  cudaError_t ee = cudaStreamEndCapture(s->L.stream, &g);
  bool made = st == RG_OK && ce == cudaSuccess && ee == cudaSuccess && g &&
              cudaGraphInstantiate(&e->exec, g, 0) == cudaSuccess;
  if (ctx->trace)
    rg__trace_event(ctx, 'X', RG_TRACK_HOST, "capture", ts, rg__trace_now(ctx) - ts,
                    "\"nodes\":%zu,\"captured\":%s", n, made ? "true" : "false");
  if (made) {
    cudaGraphDestroy(g);
    ctx->st.graph_captures++;
    ctx->st.launches++;
    ce = launch_graph(ctx, e->exec, n, "launch");
    if (ce == cudaSuccess) return RG_OK;
  }
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
  if (st != RG_OK) return st; /* a launcher refused: the same answer eagerly */
  /* Not capturable: never try this signature again, run it eagerly now. */
  e->seen = -1000000;
  return eager(ctx, first, last, failed, msg, msgcap);
}

static rg_status cuda_execute(rg_ctx *ctx, size_t first, size_t last, size_t *failed,
                              rg_status *soft, char *msg, size_t msgcap, rg_readback *rb) {
  rg_cuda_state *s = state(ctx);
  rg_status st = run_queue(ctx, first, last, failed, msg, msgcap);
  if (st != RG_OK) {
    if (s->L.comm) /* (a capture that could not begin names no node: all are unissued) */
      rg_cuda_dist_unissued(ctx, *failed < last ? *failed : first, last, msg, msgcap);
    if (s->L.comm) { /* all-reduces it did launch wait for peers: as long as they may */
      char why[512];
      (void)rg_cuda_dist_wait(ctx, why, sizeof why); /* a failure there breaks the transport */
    }
    (void)cudaStreamSynchronize(s->L.stream); /* what was launched finishes first */
    (void)cudaGetLastError();
    return st;
  }
  /* The read that caused this drain rides on its synchronisation. */
  bool small = rb && rb->bytes <= BOUNCE;
  cudaError_t e0 = cudaMemcpyAsync(s->err_host, s->L.err, sizeof *s->err_host,
                                   cudaMemcpyDeviceToHost, s->L.stream);
  cudaError_t e = rb ? cudaMemcpyAsync(small ? s->bounce : rb->dst, rb->src, rb->bytes,
                                       cudaMemcpyDeviceToHost, s->L.stream)
                     : cudaSuccess;
  /* A drain whose all-reduces wait for peers waits only as long as the peers may take. */
  bool peers = false;
  for (size_t i = first; s->L.comm && !peers && i < last; i++)
    peers = ctx->nodes[i].op == RG_OP_ALLREDUCE;
  if (peers && e == cudaSuccess && e0 == cudaSuccess) {
    st = rg_cuda_dist_wait(ctx, msg, msgcap);
    if (st != RG_OK) {
      for (*failed = first; ctx->nodes[*failed].op != RG_OP_ALLREDUCE;) ++*failed;
      return st;
    }
  }
  cudaError_t e2 = cudaStreamSynchronize(s->L.stream);
  if (e == cudaSuccess) e = e0;
  if (e == cudaSuccess) e = e2;
  if (e != cudaSuccess) {
    *failed = first;
    snprintf(msg, msgcap, "the device failed while running this drain: %s",
             cudaGetErrorString(e));
    (void)cudaGetLastError();
    return RG_ERR_DEVICE;
  }
  st = take_fault(s, first, failed, msg, msgcap);
  if (st != RG_OK) return st;
  if (rb) {
    if (small) memcpy(rb->dst, s->bounce, rb->bytes);
    rb->done = true;
  }
  if (ctx->trace) trace_device(ctx, first, last);
  if (s->prof && s->timed == TIMED_NODES && rg__profile_counts(&s->prof_t)) {
    for (size_t i = first; i < last; i++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, s->ev[2 * (i - first)], s->ev[2 * (i - first) + 1]);
      rg__profile_add(&s->prof_t, ctx->nodes[i].op, ms);
    }
  }
  *soft = clip_soft(ctx, first, last, failed, msg, msgcap);
  return RG_OK;
}

extern "C" const rg_backend rg_cuda_backend = {
    "cuda",
    (size_t)64 << 20,
    cuda_open,
    cuda_close,
    cuda_alloc,
    cuda_free,
    cuda_host_alloc,
    cuda_host_free,
    cuda_upload,
    cuda_download,
    cuda_zero,
    cuda_execute,
    cuda_sync,
#ifdef RG_HAVE_NCCL
    rg_cuda_dist_id,
    rg_cuda_dist_open,
    rg_cuda_dist_close,
#else
    NULL, /* no NCCL: rg_dist_init refuses a CUDA context of more than one rank */
    NULL,
    NULL,
#endif
    cuda_probe,
    cuda_meminfo,
    cuda_available,
    /* import_align: the widest access a kernel makes from a tensor's start is 16 bytes
       (float4, 8 bf16 in a uint4, cp.async of 16; cuDNN is told 16); cuBLASLt is told
       each operand's real alignment (matmul.cu), and the row kernels test theirs. */
    16,
    cuda_stream,
    cuda_handoff,
    cuda_owns,
};
