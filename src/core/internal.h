/*
 * internal.h - what the core and the backends share. Never installed.
 *
 * Invariants:
 *  - A tensor ref (uint32) is (pool << 31) | (slot + 1); 0 means "no tensor". Refs are
 *    only valid within the pool generation they were made in; public handles carry the
 *    generation and are checked (rg__check) before any ref is taken from them.
 *  - Nodes live in ctx->nodes for the whole pass-pool generation (they are the tape);
 *    nodes [q_head, n_nodes) are queued, the ones before have run (or failed).
 *  - Kernels see rg_tv views whose shapes were validated at record time.
 */
#ifndef RG_INTERNAL_H
#define RG_INTERNAL_H

#include "resgrad.h"
#include "ops.h"
#include <stdarg.h>
#include <stdbool.h>

#define RG_MAX_IN 8 /* ATTENTION_BWD: q, k, v, o, g, lse, key padding, bias */
#define RG_MAX_OUT 4
#define RG_ALIGN 256 /* every tensor starts on a 256-byte boundary (coalesced loads) */

enum { RG_PENDING = 0, RG_READY = 1, RG_FAILED = 2 };
/* rg_tinfo.flags: requires grad; a parameter; rg_retain_grad was called; its bytes were
   given back to its pool (a pass tensor's by rg_backward: an internal gradient
   temporary; a persistent one's by rg_ring_free: its handle is stale from then on); a
   gradient whose all-reduce a backend may still be running beside the drain's other
   work (CUDA: on its communication stream; set and cleared within one drain). */
enum { RG_T_GRAD = 1, RG_T_PARAM = 2, RG_T_RETAIN = 4, RG_T_FREED = 8, RG_T_DEAD = 16,
       RG_T_COMM = 32, RG_T_SHADOW = 64, RG_T_FRESH = 128 };
/* RG_T_SHADOW: a parameter's BF16 shadow (rg_options.bf16): the persistent copy its
   products read instead of a per-step cast. It carries RG_T_PARAM, the parameter's index
   and gradient, so gradients of it go straight to the parameter's. RG_T_FRESH (on a
   shadow): the queue, as recorded, leaves it equal to its parameter rounded, because a
   cast into it or an optimizer step that writes it was recorded after the parameter's
   last change (shadow.c, optim.c); cleared by rg_write and rg_load of the parameter and
   by a drain that fails (its later nodes never run). */
enum { RG_N_GRAD = 1 };                 /* rg_node.flags: on the tape */

typedef struct rg_tinfo {
  uint8_t dtype, ndim, state, flags;
  int64_t dims[RG_MAX_DIMS];
  int64_t numel;
  size_t nbytes;
  size_t off;     /* byte offset from the start of the pool's arena (deterministic) */
  void *data;     /* backend address */
  uint32_t grad;  /* ref of the gradient: persistent for params, pass otherwise */
  uint32_t gref;  /* rg_backward: how many tensors hold this one as their gradient */
  uint32_t alias; /* a view (rg_reshape of a pass tensor): the tensor whose bytes it uses */
  uint32_t pins;  /* views of this tensor and open exports of it or of its views: its
                     bytes are released only when they are gone, too */
  uint32_t node;  /* producing node index + 1 in this pass generation; 0 = leaf */
  uint32_t shadow; /* a parameter: its BF16 shadow's ref, or 0 */
  uint32_t fail;  /* FAILED: index + 1 into ctx->fails */
  int32_t param;  /* index into ctx->params, or -1 */
  uint32_t exports; /* rg_export calls on this handle not yet undone by rg_unexport */
  uint32_t import;  /* rg_import: index + 1 into ctx->imports (its bytes are the caller's,
                       never the arena's), or 0 */
  uint8_t ckpt;     /* 1: made inside an activation checkpoint region that gave its bytes
                       back at rg_checkpoint_end (recompute.c); rg__check refuses it */
  uint32_t redo;    /* a ckpt tensor while rg_backward records its region's gradients: the
                       ref of its recomputation, which nodes recorded then read instead
                       (rg__commit, rg__view); 0 otherwise */
  uint8_t freeable; /* 1: made by rg_state_new, so rg_state_free may give it back */
  uint32_t ring;    /* a ring buffer (rg_ring_new): the ref of its state, a persistent
                       I32 [4] (ops.h, RING_PUSH), or 0 */
} rg_tinfo;

typedef struct rg_trace rg_trace;
typedef struct rg_chunk { void *p; size_t size; } rg_chunk;
/* A free range inside one chunk (the pass pool reuses the bytes rg_backward releases). */
typedef struct rg_range { size_t off, size; char *p; int chunk; } rg_range;
typedef struct rg_arena {
  rg_chunk *chunks;
  int nchunks, capchunks;
  size_t used;      /* bytes bumped in the last chunk */
  size_t base;      /* bytes in all chunks before the last one */
  size_t hint;      /* size of the one chunk to make after a reset that freed several */
  size_t reserved, reserved_peak; /* bytes in all chunks now / most ever */
  rg_range *free;   /* released ranges, sorted by off, adjacent ones merged */
  int nfree, capfree;
} rg_arena;

/* An activation checkpoint region (recompute.c): the nodes [b, e) of this pass. */
typedef struct rg_region { size_t b, e; } rg_region;

typedef struct rg_pool_s {
  uint64_t gen;
  rg_tinfo *t;
  uint32_t n, cap;
  rg_arena arena;
  size_t bytes, peak, budget;
} rg_pool_s;

/* A list of tensor refs owned by a node's aux (zero_grad, clip, optimizers). */
typedef struct rg_list { int n; uint32_t *ref; } rg_list;

typedef struct rg_node {
  uint16_t op;
  uint8_t nin, nout, flags;
  uint32_t label;              /* index into ctx->labels (0 = none) */
  uint32_t in[RG_MAX_IN];
  uint32_t out[RG_MAX_OUT];
  int64_t i[4];
  float f[4];
  const void *aux;
} rg_node;

enum { RG_OPT_ADAMW = 1, RG_OPT_SGD = 2 };
/* hyper: F32 [8] on the device: lr, beta1|momentum, beta2, eps, weight_decay.
   step: I32 [1] on the device, incremented by every update that is not skipped. */
enum { RG_H_LR, RG_H_B1, RG_H_B2, RG_H_EPS, RG_H_WD, RG_H_COUNT = 8 };
struct rg_optim {
  rg_ctx *ctx;
  int kind;
  uint64_t pgen;       /* persistent generation the state belongs to */
  rg_list params, grads, m, v; /* m: AdamW first moment or SGD momentum; v: AdamW */
  rg_list shadow;      /* each parameter's BF16 shadow, written by the step too, or 0 */
  uint32_t hyper, step;
  bool scheduled;      /* rg_optim_set_schedule: each step records an LR_SCHEDULE node */
  int64_t sched_i[4];  /* its node fields (ops.h): kind, warmup, total, step_size */
  float sched_f[4];    /* lr, min_lr, start_lr, gamma */
  rg_optim *next;      /* ctx's list, so rg_close frees forgotten optimizers */
};

/* What a kernel sees of a tensor. */
typedef struct rg_tv {
  void *p;
  int dtype, ndim;
  int64_t dims[RG_MAX_DIMS];
  int64_t n;
} rg_tv;

typedef struct rg_kargs {
  rg_ctx *ctx;
  const rg_node *node;
  rg_tv in[RG_MAX_IN], out[RG_MAX_OUT]; /* absent refs give p == NULL */
  int threads;
  char *msg;         /* a failing kernel writes why here (no op name: the core adds it) */
  size_t msgcap;
  rg_status soft;    /* a kernel may set RG_ERR_NONFINITE here without failing the drain */
  void *be;          /* the backend's launch state (CUDA: its stream, error word...) */
} rg_kargs;

/* LINEAR_ACT split into two kernels' arguments, for a backend without the fused form:
   lin, a LINEAR writing the product (into out[1] for GELU, which keeps it; into out[0]
   for ReLU), then act, the activation from there into out[0] (in place for ReLU). */
static inline void rg__linear_act_split(const rg_kargs *k, rg_kargs *lin, rg_kargs *act) {
  *lin = *k;
  if (k->node->i[0] == RG_ACT_GELU) lin->out[0] = k->out[1];
  *act = *k;
  act->in[0] = lin->out[0];
  act->in[1].p = act->in[2].p = NULL; /* absent, as a kernel tells */
}

/* MATMUL_DGELU split into a MATMUL's arguments (the product into out[0]) and then a
   GELU_BWD's (u and that product, into out[0] in place), for a backend without the fused
   form. */
static inline void rg__matmul_dgelu_split(const rg_kargs *k, rg_kargs *mm, rg_kargs *act) {
  *mm = *k;
  mm->in[2].p = NULL;
  *act = *k;
  act->in[0] = k->in[2], act->in[1] = k->out[0];
  act->in[2].p = NULL;
}

/* ADD_LAYERNORM split into an ADD's arguments (s = a + b into out[0]) and a LAYERNORM's
   (y = layernorm(s) into out[1]; eps is the node's f[0]), for a backend without the
   fused form. */
static inline void rg__add_layernorm_split(const rg_kargs *k, rg_kargs *add, rg_kargs *ln) {
  *add = *k;
  add->in[2].p = add->in[3].p = NULL;
  *ln = *k;
  ln->in[0] = k->out[0], ln->in[1] = k->in[2], ln->in[2] = k->in[3];
  ln->in[3].p = NULL;
  ln->out[0] = k->out[1];
}

/* CROSS_ENTROPY's fused backward (its optional in[2] g, out[2] dlogits; ops.h) as the
   arguments of a CROSS_ENTROPY_BWD node, for a backend (or a case) without the fused
   form: run it after the forward. */
static inline void rg__xent_bwd_args(const rg_kargs *k, rg_kargs *b) {
  *b = *k;
  b->in[3] = k->out[1];
  b->out[0] = k->out[2];
  b->out[1].p = b->out[2].p = NULL;
}

/* The element strides of an attention bias (ATTENTION's in[4], ops.h) over [B,H,T,S]: its
   axes aligned from the right, stride 0 on an axis it lacks or has of size 1 (broadcast),
   so element (b, h, t, s) is at b st[0] + h st[1] + t st[2] + s st[3]. */
static inline void rg__attn_bias_strides(const rg_tv *bias, int64_t st[4]) {
  int64_t step = 1;
  for (int i = 3, j = bias->ndim - 1; i >= 0; i--, j--) {
    int64_t n = j >= 0 ? bias->dims[j] : 1;
    st[i] = n == 1 ? 0 : step;
    step *= n;
  }
}

/* A download that a drain performs after its last node, inside the same synchronisation
   (so a step that reads only its loss costs one device->host sync). done is set when the
   bytes were copied. */
typedef struct rg_readback { void *dst; const void *src; size_t bytes; bool done; } rg_readback;

typedef struct rg_backend {
  const char *name;
  size_t chunk_min;                                 /* smallest arena chunk */
  rg_status (*open)(rg_ctx *ctx);
  void (*close)(rg_ctx *ctx);
  void *(*alloc)(rg_ctx *ctx, size_t bytes);        /* device memory; NULL = OOM */
  void (*free)(rg_ctx *ctx, void *p);
  void *(*host_alloc)(rg_ctx *ctx, size_t bytes);   /* staging (pinned on CUDA) */
  void (*host_free)(rg_ctx *ctx, void *p);
  rg_status (*upload)(rg_ctx *ctx, void *dst, const void *src, size_t bytes);
  rg_status (*download)(rg_ctx *ctx, void *dst, const void *src, size_t bytes);
  rg_status (*zero)(rg_ctx *ctx, void *dst, size_t bytes);
  /* Runs nodes [first, last). On a hard failure returns the status, sets *failed to the
     node's index and writes the reason to msg. A soft status (non-finite clip) is
     returned through *soft with every node run. When every node ran and rb != NULL,
     the backend also copies rb->src to rb->dst before returning and sets rb->done. */
  rg_status (*execute)(rg_ctx *ctx, size_t first, size_t last, size_t *failed,
                       rg_status *soft, char *msg, size_t msgcap, rg_readback *rb);
  rg_status (*sync)(rg_ctx *ctx);
  /* Distributed training where the backend moves the gradients itself (CUDA: NCCL);
     NULL where the core's host transport does (dist.c, CPU) or there is none. dist_id
     (rank 0) makes the RG_DIST_ID bytes that name a new group, which dist.c sends to the
     other ranks; dist_open joins the group as rank of world within timeout seconds;
     dist_close leaves it (abort: at once, without waiting for the peers, after a
     failure). On failure they write why to msg. */
  rg_status (*dist_id)(rg_ctx *ctx, void *id, char *msg, size_t msgcap);
  rg_status (*dist_open)(rg_ctx *ctx, int rank, int world, const void *id, double timeout,
                         char *msg, size_t msgcap);
  rg_status (*dist_close)(rg_ctx *ctx, bool abort, char *msg, size_t msgcap);
  /* Checks that the device open would take is there and names it (ctx->devname; a GPU's
     index in ctx->device_index), with open's errors and without allocating: all that a
     dry run opens (dry.c). NULL: always there, named by name. */
  rg_status (*probe)(rg_ctx *ctx);
  /* rg_device_memory: the device's free and total bytes, for the context's device (set by
     open or probe). Sets the sticky error on failure. */
  rg_status (*meminfo)(rg_ctx *ctx, size_t *available, size_t *total);
  /* 1 if the device is usable here, so that RG_DEVICE_AUTO takes this backend; touches no
     context. NULL: never taken by RG_DEVICE_AUTO. */
  int (*available)(void);
  /* Sharing memory with other libraries (share.c). import_align: the alignment in bytes
     that memory rg_import wraps must have, so that every kernel's widest access to a
     tensor's elements from its start is aligned (arena tensors have RG_ALIGN, more). */
  size_t import_align;
  /* The context's stream for rg_stream (CUDA: its cudaStream_t); NULL: none. */
  void *(*stream)(rg_ctx *ctx);
  /* Orders work queued on the other library's stream (NULL: the host) after everything
     queued on the context's, without waiting where the device can order it. NULL: every
     drain has finished its work when it returns (the CPU). */
  rg_status (*handoff)(rg_ctx *ctx, void *stream);
  /* Whether p is memory of the context's device, which its kernels may read; on refusal
     writes why to msg. NULL: not checked (the CPU cannot tell). */
  rg_status (*owns)(rg_ctx *ctx, const void *p, char *msg, size_t msgcap);
} rg_backend;
#define RG_DIST_ID 128 /* bytes of a group's name (NCCL's unique id) */

extern const rg_backend rg_cpu_backend;
extern const rg_backend rg_cuda_backend; /* the stub answers RG_ERR_UNSUPPORTED */
extern const rg_backend rg_dry_backend;  /* rg_options.dry_run (dry.c) */
/* RG_ERR_UNSUPPORTED for call, which needs values a dry-run context does not have. */
rg_status rg__dry_refuse(rg_ctx *ctx, const char *call);

struct rg_ctx {
  rg_options opt;
  const rg_backend *be;
  void *be_state;          /* the backend's own */
  const rg_backend *dev;   /* the device's backend: be, or the one a dry run models */
  rg_backend dry;          /* a dry run's backend, be: rg_dry_backend with dev's chunk_min,
                              so that its arenas grow exactly as dev's would */
  int device_index;        /* a CUDA context's GPU (a dry run's too) */
  char devname[96];
  rg_status err;
  rg_status last;          /* the most recent failure's status, sticky error or not: what
                              a call returns after an internal step of it failed */
  char errmsg[1024];
  rg_pool_s pool[2];
  rg_node *nodes;
  size_t n_nodes, cap_nodes, q_head;
  rg_arena stage;          /* host staging for uploads, reset with the pass pool */
  char **labels;           /* interned label strings; labels[0] = "" */
  uint32_t nlabels, caplabels;
  uint32_t *lstack;        /* label stack: interned ids of the joined path */
  int lsp, lcap;
  int lskip;               /* pushes not on the stack (it could not grow), popped first */
  char **fails;            /* messages of failed drains in this pass generation */
  uint32_t nfails, capfails;
  char **pnames;           /* parameter names, creation order */
  uint32_t *prefs;         /* parameter refs */
  int nparams, capparams;
  uint32_t clip;           /* clip state F32[2] (persistent) or 0 */
  uint32_t one;            /* F32 scalar 1 (persistent) or 0: rg_backward's seed */
  int clip_pending;        /* a CLIP node was recorded since the last optimizer step */
  uint32_t rngstep;        /* dropout's step counter I32[2] (persistent) or 0 */
  uint64_t rngstep_gen;    /* pass generation whose step was uploaded into it */
  rg_list zero_list;       /* every parameter gradient, for rg_zero_grad */
  int training, no_grad;
  size_t tape_end;         /* rg_backward: index of its first node (the forward's end) */
  rg_region *regions;      /* this pass's closed checkpoint regions, in recording order */
  uint32_t nregions, capregions;
  bool region_open;        /* rg_checkpoint_begin was called, its end not yet */
  size_t region_b;         /* the open region's first node */
  uint32_t replay;         /* rg_backward: index + 1 of the region whose recomputed tensors
                              the nodes recorded now read (their ckpt tensors' redo), or 0 */
  uint32_t replay_slot, replay_end; /* the pass slots its recomputation made */
  uint64_t step;           /* rg_step_begin count: keys dropout */
  uint64_t rng_calls;      /* dropout counter base within the step */
  rg_optim *optims;
  struct rg_data *datas;   /* open token datasets (data.c), freed by rg_close */
  struct rg_dist *dist;    /* rg_dist_init's connections (dist.c); NULL = one process */
  uint64_t saves;          /* rg_save calls: part of each temporary file's name */
  char **meta;             /* checkpoint metadata: key, value, key, value, ... */
  int nmeta, capmeta;      /* entries (pairs) */
  uint32_t exports[2];     /* open rg_export calls per pool: while any is open, rg_step_begin
                              and rg_reset of that pool refuse (their memory is in use) */
  struct rg_imported *imports; /* this pass's rg_import calls, in order: whom to tell when the
                              pass pool resets or the context closes */
  uint32_t nimports, capimports;
  rg_stats st;
  struct rg_trace *trace;  /* the trace file (trace.c), or NULL: off */
  /* allocation-failure injection (tests): fail the alloc_fail_at-th allocation */
  uint64_t alloc_count, alloc_fail_at;
};

/* --- memory (alloc.c): every host allocation goes through these (failure injection) --- */
bool rg__alloc_tick(rg_ctx *ctx); /* counts an allocation; false = inject a failure */
void *rg__malloc(rg_ctx *ctx, size_t n);
void *rg__calloc(rg_ctx *ctx, size_t n, size_t size);
void *rg__realloc(rg_ctx *ctx, void *p, size_t n);
void rg__free(rg_ctx *ctx, void *p);
char *rg__strdup(rg_ctx *ctx, const char *s);
/* Grows *arr (element size esz) to hold at least need elements. */
bool rg__grow(rg_ctx *ctx, void **arr, size_t esz, size_t need, size_t *cap);

/* --- the trace file (trace.c; rg_options.trace_path, RG_TRACE=<path>) ---
   ctx->trace is NULL when it is off, and every hook is behind a test of it. Events go on
   two tracks: the host's (record, drain, capture, replay, transfers, allocations) and the
   device's (each op's span: CPU host time of its kernel, CUDA device time of its launches;
   or one span per replayed CUDA graph). Times are rg__trace_now's microseconds. */
enum { RG_TRACK_HOST = 1, RG_TRACK_DEVICE = 2 };
/* Opens path (another context's path of this process gets "-2", "-3"... before its
   extension) and writes the file's head: RG_ERR_IO (the error set) if it cannot. */
rg_status rg__trace_open(rg_ctx *ctx, const char *path);
/* The last flush and the file closed: RG_ERR_IO if any write failed (the error set). */
rg_status rg__trace_close(rg_ctx *ctx);
double rg__trace_now(const rg_ctx *ctx);
/* One event: ph 'X' a span [ts, ts + dur], 'i' an instant, 'C' a counter (its args are
   the series); args is a printf format of the members of the event's "args" object
   (strings in them must be JSON-safe), or NULL. */
void rg__trace_event(rg_ctx *ctx, char ph, int track, const char *name, double ts, double dur,
                     const char *args, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
void rg__trace_op(rg_ctx *ctx, size_t k, double ts, double dur); /* node k's span, device track */
void rg__trace_recorded(rg_ctx *ctx); /* a node was queued: the recording span starts */
/* The drain of nodes [first, last) that began at ts ended with st (failing at node
   failed): its recording and drain spans, the pools' counter, then a flush. */
void rg__trace_drain(rg_ctx *ctx, rg_drain_reason why, size_t first, size_t last, double ts,
                     rg_status st, size_t failed);
void rg__trace_xfer(rg_ctx *ctx, bool down, rg_site site, size_t bytes);
void rg__trace_flush(rg_ctx *ctx);
const char *rg__drain_reason_name(rg_drain_reason why);

/* The context's device (a dry run's: the one it models), as rg_device_kind says it. */
static inline rg_device rg__device(const rg_ctx *ctx) {
  return ctx->dev == &rg_cuda_backend ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
}

/* What rg_import keeps of one import: its release callback, called once when the pass
   pool resets or the context closes (rg__imports_release). */
typedef struct rg_imported { void (*release)(void *user); void *user; } rg_imported;

/* --- notices (notice.c) --- */
/* Writes "<fmt>\n" (fmt without its newline) to the notice sink: stderr, or the
   embedding program's RG_NOTICE_SINK. Callers check rg_options.quiet where it applies. */
void rg__notice(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* --- errors (error.c) --- */
/* Sets the sticky error (if none is set) to "call [label]: <fmt>"; returns st. */
rg_status rg__fail(rg_ctx *ctx, rg_status st, const char *call, const char *fmt, ...);
/* The path of an interned label (label.c); "" for 0 or an id the context never made. */
static inline const char *rg__label_str(const rg_ctx *ctx, uint32_t label) {
  return label < ctx->nlabels ? ctx->labels[label] : "";
}

/* --- tensors --- */
static inline rg_pool_s *rg__poolof(rg_ctx *c, uint32_t ref) { return &c->pool[ref >> 31]; }
static inline rg_tinfo *rg__t(rg_ctx *c, uint32_t ref) {
  return &c->pool[ref >> 31].t[(ref & 0x7fffffffu) - 1];
}
rg_tensor rg__handle(rg_ctx *ctx, uint32_t ref);
/* Checks a handle; on success stores its ref. Errors name call and operand index. */
rg_status rg__check(rg_ctx *ctx, rg_tensor t, const char *call, int operand, uint32_t *ref);
/* New tensor in a pool; 0 on error (OOM/MISUSE set). */
uint32_t rg__new(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim, const int64_t *dims,
                 const char *call);
/* rg__new that may place a persistent tensor in bytes rg_ring_free gave back: only for a
   tensor whose first write is a recorded node (the queue then orders it after every
   queued reader of the old bytes), never one written at once (rg_param, rg_constant). */
uint32_t rg__new_reusing(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim,
                         const int64_t *dims, const char *call);
/* A pass tensor on bytes the caller owns (rg_import): data is its address, no arena
   bytes, no budget, READY. Checks ndim and dims as rg__new does. 0 on error. */
uint32_t rg__adopt(rg_ctx *ctx, rg_dtype dt, int ndim, const int64_t *dims, void *data,
                   const char *call);
size_t rg__dtype_size(int dt);
const char *rg__dtype_name(int dt);
/* The index of the first NaN or Inf among n elements of dtype at p (host memory), or -1
   (always for I32); *v gets that element. */
int64_t rg__nonfinite(const void *p, int dtype, int64_t n, float *v);
static inline const char *rg__nonfinite_name(float v) {
  return v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}
/* Parameters' BF16 shadows (see RG_T_SHADOW): the shadow, made and cast as needed
   (shadow.c); marking one, or all, not fresh (param.c). */
uint32_t rg__shadow(rg_ctx *ctx, uint32_t param);
void rg__shadow_stale(rg_ctx *ctx, uint32_t param);
void rg__shadows_stale(rg_ctx *ctx);
void rg__free_params(rg_ctx *ctx); /* the names and tables of every parameter (param.c) */
/* Counts one transfer of bytes, host to device or (down) device to host, in ctx->st's
   total and in its call site's entry, and reports it to the trace file. */
static inline void rg__count_xfer(rg_ctx *ctx, bool down, rg_site site, size_t bytes) {
  rg_xfer *total = down ? &ctx->st.down : &ctx->st.up;
  rg_xfer *at = down ? &ctx->st.down_site[site] : &ctx->st.up_site[site];
  total->count++;
  total->bytes += bytes;
  at->count++;
  at->bytes += bytes;
  if (ctx->trace) rg__trace_xfer(ctx, down, site, bytes);
}
void rg__tv(rg_ctx *ctx, uint32_t ref, rg_tv *out);

/* A tensor's type and shape; ndim < 0 means "no tensor" (an unwanted output). */
typedef struct rg_shape { int dtype, ndim; int64_t dims[RG_MAX_DIMS]; } rg_shape;
rg_shape rg__shape(rg_ctx *ctx, uint32_t ref);
/* Records op with inputs in[] (rg_optab[op].nin entries, 0 = absent), new pass-pool
   outputs of the given shapes (nout entries), baked scalars iv[4], fv[4] (may be NULL)
   and aux. Output refs go to out[]. Nothing is queued on error. */
rg_status rg__emit(rg_ctx *ctx, rg_op op, const uint32_t *in, const rg_shape *outs,
                   const int64_t *iv, const float *fv, const void *aux, uint32_t *out);
void rg__fmt_shape(char *buf, size_t cap, int ndim, const int64_t *dims);
/* A live operand k of call whose dtype is in the mask dtypes (bit 1 << rg_dtype; under
   rg_options.bf16 a BF16 one passes an F32 mask too), not failed in an earlier drain;
   else false with the error set (ops.c). */
bool rg__operand(rg_ctx *ctx, rg_tensor t, const char *call, int k, unsigned dtypes,
                 uint32_t *ref);

/* --- queue --- */
rg_node *rg__record(rg_ctx *ctx, rg_op op); /* NULL on OOM; fills label, zeroes fields */
rg_status rg__commit(rg_ctx *ctx, rg_node *n); /* after ins/outs set: tape + guard/check */
rg_status rg__drain(rg_ctx *ctx, rg_drain_reason why);
rg_status rg__drain_read(rg_ctx *ctx, rg_drain_reason why, rg_readback *rb);
void *rg__stage(rg_ctx *ctx, size_t bytes); /* host staging bytes valid for this pass */
/* Calls the release of every import of this pass, in order, and forgets them: after a
   drain (a reset of the pass pool, rg_close), when nothing queued reads them. */
void rg__imports_release(rg_ctx *ctx);
/* rg__stage holding a copy of src; in a dry run a fake address and nothing copied. */
void *rg__stage_copy(rg_ctx *ctx, const void *src, size_t bytes);

/* --- transfers (transfer.c) --- */
/* The barrier of a read (rg_read, rg_export): drains (passing rb along), then t's info,
   or NULL with *st set when the drain failed on the way to t (the drain's status; its
   message is the sticky one) or t failed in an earlier drain (RG_ERR_FAILED). overwrite
   (rg_write): a failed value is returned too. *drained (may be NULL): the drain's
   status, also when t was returned. */
rg_tinfo *rg__settle(rg_ctx *ctx, uint32_t ref, const char *call, rg_drain_reason why,
                     bool overwrite, rg_status *st, rg_status *drained, rg_readback *rb);

/* --- ops and autograd --- */
typedef struct rg_opinfo {
  const char *name;   /* the call that records it, for messages (shared by some ops) */
  int nin, nout;
  const char *kernel; /* the op's own name (ops.h's lower-case column) */
  unsigned flags;     /* RG_F_* (ops.h) */
} rg_opinfo;
extern const rg_opinfo rg_optab[RG_OP_COUNT];
/* Records backward for node n given output gradients g[] (refs, 0 = none); writes input
   gradients to gin[] (refs, 0 = none). An op without a rule (not RG_F_DIFF) sets the
   error instead: RG_ERR_MISUSE, naming the op. */
void rg__backward_rule(rg_ctx *ctx, const rg_node *n, const uint32_t *g, uint32_t *gin);

/* --- RG_PROFILE=1 (profile.c): time per op, kept by the backend that times its nodes ---
   A backend holds an rg_profile when rg__profile_wanted() said so at open, asks
   rg__profile_counts at the end of each drain whether it counts (the first RG_PROFILE_SKIP
   do not), adds each node's time with rg__profile_add, and prints the table at close;
   clock names what was timed ("device time", "CPU time"). */
#define RG_PROFILE_SKIP 2
typedef struct rg_profile {
  double ms[RG_OP_COUNT];
  long long calls[RG_OP_COUNT], drains, seen;
} rg_profile;
bool rg__profile_wanted(void);
bool rg__profile_counts(rg_profile *p);
void rg__profile_add(rg_profile *p, int op, double ms);
void rg__profile_print(const rg_profile *p, const char *clock); /* nothing if no drain counted */

/* --- activation checkpointing (recompute.c): rg_backward's hooks --- */
/* Before the rule of node k, which has gradients to pass on: when the rule would read a
   tensor its region gave back, records that region's recomputation (the region before it
   is finished first). Returns a status (its error set). */
rg_status rg__region_reached(rg_ctx *ctx, size_t k);
/* At the walk's step for node k (k == SIZE_MAX: the walk is over): once the walk is below
   the first node of the region being replayed, every rule that reads its recomputed
   tensors is recorded: they go back to the pass pool and the region is finished. */
void rg__region_passed(rg_ctx *ctx, size_t k);

/* --- distributed training (dist.c) --- */
/* rg_backward's hooks, called only when gradients are averaged (rg__dist_on: more than
   one rank, or any number where the backend moves them itself):
   plan before the walk over nodes [0, end); reached at the top of the walk's step for
   node k (every later node's rule is recorded, so the gradients they completed may be
   bucketed); flush after the walk (the last bucket, and the parameters it never
   reached). Each records ALLREDUCE nodes and returns a status (its error set). */
bool rg__dist_on(const rg_ctx *ctx);
rg_status rg__dist_plan(rg_ctx *ctx, size_t end);
rg_status rg__dist_reached(rg_ctx *ctx, size_t k);
rg_status rg__dist_flush(rg_ctx *ctx);
/* The ALLREDUCE of a backend whose tensors are host memory (the CPU's): averages the
   list's tensors over the ranks in place. On failure writes why to msg. */
rg_status rg__dist_allreduce_host(rg_ctx *ctx, const rg_list *l, char *msg, size_t msgcap);
void rg__dist_free(rg_ctx *ctx); /* closes the connections without a barrier (rg_close) */
/* For a backend that moves the gradients itself, while it waits for a step: the rank of
   a peer whose connection closed (it exited or failed), or -1; never blocks. */
int rg__dist_lost(rg_ctx *ctx);
/* Writes "rank R of W: <fmt>" to msg, keeps it as the transport's failure (every later
   rg_backward fails with it) and closes every connection, so the peers fail at once.
   Returns st. */
rg_status rg__dist_fail(rg_ctx *ctx, rg_status st, char *msg, size_t msgcap, const char *fmt,
                        ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* --- arenas (arena.c) and views --- */
/* The bytes an arena gives a request of n: n rounded up to RG_ALIGN. */
static inline size_t rg__align_up(size_t n) {
  return (n + RG_ALIGN - 1) & ~(size_t)(RG_ALIGN - 1);
}
void *rg__arena_alloc(rg_ctx *ctx, rg_arena *a, size_t bytes, size_t *off, bool host);
void rg__arena_reset(rg_ctx *ctx, rg_arena *a, bool host, bool release);
/* The trace's span of an arena's chunk made or freed (what) since ts, and its counter. */
void rg__trace_arena(rg_ctx *ctx, const rg_arena *a, const char *what, size_t bytes,
                     double ts, bool ok);
/* The smallest released range that holds need bytes (the lowest offset among equals),
   cut from its front, with its offset in *off; NULL if none fits. */
void *rg__arena_reuse(rg_arena *a, size_t need, size_t *off);
/* Gives a pass tensor's bytes back for reuse by tensors made after it. Only for tensors
   no handle outside the core can reach (or that rg__check refuses: a checkpoint
   region's) and whose readers were all recorded already (execution follows recording
   order, so the reuse is safe). */
void rg__release(rg_ctx *ctx, uint32_t ref);
/* Gives persistent tensor ref's bytes back to the persistent arena, for rg__new_reusing;
   marks it RG_T_FREED (its handles are stale). false (nothing changed) when out of host
   memory for the range. */
bool rg__release_persistent(rg_ctx *ctx, uint32_t ref);
/* Records a FILL of zeros into persistent tensor ref, its first write (state.c; rings and
   states). false with the error set on failure. */
bool rg__zero_node(rg_ctx *ctx, uint32_t ref);
/* Undoes one pin of pass tensor root (a view of it, or an export of it or of a view):
   its bytes go back to the arena if rg__release found it dead and this was the last. */
void rg__unpin(rg_ctx *ctx, uint32_t root);
/* A pass tensor of shape s (same element count and dtype) on the bytes of pass tensor
   base: no allocation. The caller records the node that "makes" it. 0 on failure. */
uint32_t rg__view(rg_ctx *ctx, uint32_t base, rg_shape s, const char *call);
/* x with shape s (same element count): a view recorded as a COPY node whose output
   shares x's bytes (the kernels skip a copy onto itself) for a pass tensor, a real copy
   for a persistent one. 0 on failure (the error is set). */
uint32_t rg__reshape(rg_ctx *ctx, uint32_t x, rg_shape s);

/* --- RNG: counter-based (Philox-4x32-10), shared by init, dropout and both backends --- */
#include "philox.h"
/* RING_SAMPLE's key is the seed xor this ("ringsamp"), so its draws are a stream apart
   from dropout's and initialisation's, which are keyed by the seed itself. */
#define RG_RING_SALT 0x72696e6773616d70ull
/* The reasons a RING_GATHER (index, position, count, count) or RING_SAMPLE fails, in the
   same words on every backend. */
#define RG_RING_INDEX_MSG                                                                \
  "index %lld at position %lld is outside [0, %lld): the ring holds %lld entries, "       \
  "numbered from the oldest (0) to the newest; draw indices with rg_ring_sample, or "     \
  "push more entries first"
#define RG_RING_EMPTY_MSG                                                                 \
  "the ring is empty: push entries (rg_ring_push) before sampling from it"
/* Why a KV_WRITE or ATTENTION_CACHED fails (pos[b], b, S - T): in the same words on every
   backend. */
#define RG_DECODE_POS_MSG                                                                 \
  "position %lld of batch row %lld is outside [0, %lld]: the rows written or read must "  \
  "fit the cache's S positions; make the cache longer (rg_state_new) or stop earlier"
/* The state's words (ops.h, RING_PUSH). */
enum { RG_RING_HEAD, RG_RING_COUNT, RG_RING_DRAWS_LO, RG_RING_DRAWS_HI, RG_RING_STATE };

/* --- bf16 --- */
static inline uint16_t rg_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* NaN */
  v.u += 0x7fffu + ((v.u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(v.u >> 16);
}
static inline float rg_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {(uint32_t)h << 16};
  return v.f;
}

/* --- hashing: 64-bit FNV-1a, for fingerprints that only this build compares --- */
/* Every hash's first h. It is a digit short of FNV's published offset basis
   (14695981039346656037); any constant serves a hash compared only within one build. */
#define RG_FNV_START 1469598103934665603ull
#define RG_FNV_PRIME 0x100000001b3ull
/* h with the n bytes at p mixed in, one byte at a time. */
static inline uint64_t rg__fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * RG_FNV_PRIME;
  return h;
}
/* h with the word v mixed in as one unit (the same step over 64 bits at once). */
static inline uint64_t rg__fnv1a_u64(uint64_t h, uint64_t v) { return (h ^ v) * RG_FNV_PRIME; }

#endif
