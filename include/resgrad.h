/*
 * resgrad.h - the one public header of resgrad, and its manual.
 *
 * resgrad trains neural networks with every value resident on the device (a GPU, or the
 * CPU when there is none). Operations look eager but only *record*: each returns at once
 * with a pending handle whose memory is already reserved. The first read of any value is a
 * barrier that runs everything recorded so far, in program order, exactly once. A training
 * step is one upload of the batch, one graph, and one 4-byte download of the loss.
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *  - The context is the first argument. A context, and everything it returned (handles,
 *    optimizers, messages), is used by one thread at a time; it may move to another
 *    thread if the caller orders the hand-over (a mutex, a join). Two contexts share no
 *    mutable state and may be used from two threads at once (tests/test_threads.c, run
 *    under ThreadSanitizer by make tsan, on the CPU backend). rg_version and
 *    rg_status_str may be called from any thread. A CPU context owns a pool of threads
 *    for its kernels (rg_options.threads), started by rg_open and joined by rg_close;
 *    idle, they sleep. One thing is process-wide: with OpenBLAS the BLAS thread pool is
 *    one per process; a CPU context opened while no other is open sets it to one thread,
 *    and splits its products over its own pool instead, so that one pool computes and
 *    the two never contend for cores.
 *  - Functions returning rg_status return RG_OK or a negative code; the message is
 *    available from rg_errmsg (sticky: the first error since rg_clear_error).
 *  - Functions returning rg_tensor return RG_NONE on error and set the sticky error.
 *    An op given RG_NONE returns RG_NONE and keeps the first error, so a chain of ops can
 *    be checked once at its end.
 *  - Nothing here ever exits or aborts on a condition the caller can cause. After any
 *    error the context keeps working.
 *  - "Records" means the call appends work to the queue and does not run it. "Barrier"
 *    means the call first runs everything queued.
 *  - Shapes have 0 to RG_MAX_DIMS axes. Axis arguments may be negative (-1 = last axis).
 *  - All memory the library owns is released by rg_close; no returned pointer needs free.
 */
#ifndef RESGRAD_H
#define RESGRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(RG_BUILD_SHARED)
#define RG_API __declspec(dllexport)
#elif defined(__GNUC__)
#define RG_API __attribute__((visibility("default")))
#else
#define RG_API
#endif

#define RG_VERSION_MAJOR 0
#define RG_VERSION_MINOR 1
#define RG_VERSION_PATCH 0
#define RG_VERSION_STRING "0.1.0"
/* The library's version at run time, "MAJOR.MINOR.PATCH"; compare with RG_VERSION_STRING
   to detect a header/library mismatch. */
RG_API const char *rg_version(void);

#define RG_MAX_DIMS 4
#define RG_ALL_AXES (-1000) /* reduce over every axis (rg_sum, rg_mean, rg_max) */

typedef struct rg_ctx rg_ctx;                         /* one device: pools, queue, tape, stats */
typedef struct rg_tensor { uint64_t id; } rg_tensor;  /* a value; {0} is RG_NONE */
typedef struct rg_optim rg_optim;
#define RG_NONE ((rg_tensor){0})

typedef enum rg_status { /* values pinned forever */
  RG_OK = 0,
  RG_ERR_MISUSE = -1,      /* bad argument: NULL, wrong shape/dtype, wrong state */
  RG_ERR_STALE = -2,       /* handle from a pool generation that was reset, or forged */
  RG_ERR_OOM = -3,         /* a pool budget or the machine ran out, or a pass reached
                              rg_options.max_pass_nodes; nothing was allocated */
  RG_ERR_DEVICE = -4,      /* the device reported a fault */
  RG_ERR_NONFINITE = -5,   /* a NaN or Inf where finite values were promised */
  RG_ERR_IO = -6,          /* file missing, unreadable, corrupt or for another model;
                              a peer rank unreachable, gone or silent past the timeout */
  RG_ERR_UNSUPPORTED = -7, /* not available in this build or on this device */
  RG_ERR_FAILED = -8       /* the value was pending in a drain that failed */
} rg_status;

typedef enum rg_device { RG_DEVICE_AUTO = 0, RG_DEVICE_CPU = 1, RG_DEVICE_CUDA = 2 } rg_device;
typedef enum rg_dtype { RG_F32 = 0, RG_BF16 = 1, RG_I32 = 2 } rg_dtype;
typedef enum rg_pool { RG_POOL_PASS = 0, RG_POOL_PERSISTENT = 1 } rg_pool;

enum { RG_INIT_ZEROS = 0, RG_INIT_ONES, RG_INIT_NORMAL, RG_INIT_UNIFORM, RG_INIT_CONST };
/* How rg_param fills a new parameter. {0} is zeros. NORMAL: mean 0, std a (b is an added
   mean). UNIFORM: in [a, b). CONST: every element a. Random values come from the context
   seed and the parameter's creation index, so a model built twice with one seed is equal. */
typedef struct rg_init { int kind; float a, b; } rg_init;

/* Options for rg_open. A zero-initialised struct (or NULL) gives the defaults. */
typedef struct rg_options {
  rg_device device;        /* which device; AUTO (default): CUDA when a GPU is present,
                              else the CPU with a notice */
  int device_index;        /* which GPU (CUDA only). 0, the default, in a process started
                              as a rank of a data-parallel run (env RG_WORLD_SIZE set, as
                              resgrad-run does) means the rank's GPU: env RG_LOCAL_RANK
                              (MISUSE if no such GPU), else RG_RANK modulo the GPUs */
  size_t pass_budget;      /* bytes the pass pool may hold; 0 (default): unlimited (what
                              there is) */
  size_t persistent_budget;/* bytes the persistent pool may hold; 0 (default): unlimited */
  int check;               /* 1: run each op as it is recorded, so errors surface at their
                              call (slow; for debugging); 0 (default): ops run at barriers.
                              Env RG_CHECK=1 does the same. */
  size_t max_queued;       /* growth guard, in nodes: past this many queued nodes a barrier
                              runs (counted in stats); 0 (default): 1<<20. It bounds the
                              queue, not the pass: see max_pass_nodes */
  uint64_t seed;           /* parameter init and dropout; 0 (default) means seed 0
                              (deterministic) */
  int threads;             /* CPU threads for kernels, the caller's included; 0
                              (default): RG_THREADS if set, else OMP_NUM_THREADS, else
                              every core this process may run on (those two capped by
                              OMP_THREAD_LIMIT). Results are the same for any count */
  int quiet;               /* 1: no notices on stderr (e.g. the AUTO->CPU fallback);
                              0 (default): notices */
  int trace;               /* 1: print each drained node (op, shape, label) on stderr;
                              0 (default): silent. Env RG_TRACE=1 does the same. For a
                              file of timed events, see trace_path. */
  int tf32;                /* 1: float32 matrix products may use TF32 tensor cores (CUDA;
                              about 10 bits of mantissa in the products, f32 accumulation),
                              as PyTorch's allow_tf32 (rg_attention keeps f32); 0
                              (default): strict f32. The CPU ignores it. */
  int bf16;                /* 1: bf16 mixed precision, as PyTorch's autocast to
                              bfloat16. Products (rg_matmul, rg_linear, rg_linear_act)
                              record an rg_cast to BF16 (round to nearest even) of each
                              F32 factor and bias, sum the BF16 values in F32,
                              and return BF16 (bias and activation applied in F32, then
                              rounded once): bf16 activations. rg_layernorm and
                              rg_rmsnorm return BF16 too (F32 statistics); the attention
                              ops cast F32 q, k, v to BF16 and return BF16 (bf16 tensor
                              cores on CUDA). Elementwise binary ops and the losses read
                              BF16 operands widened and return F32 (a residual stream
                              stays F32); any other op given a BF16 operand records a
                              widening rg_cast to F32 first (softmax, reductions...).
                              Backward, every gradient is F32; a product's incoming
                              gradient is rounded to BF16 for its gradient products.
                              Parameters (master weights), their gradients, optimizer
                              state and the loss stay F32. A parameter's cast is made
                              once into a persistent BF16 copy (2 bytes a parameter)
                              that every optimizer step rounds its update into, so a
                              training step casts no weights (rg_write or rg_load of
                              the parameter, or a failed drain, make the next use
                              cast again). tf32 does not apply to BF16
                              products. The CPU computes every op in F32 on the widened
                              values and rounds its BF16 results once, as CUDA does, so
                              the backends differ by summation order (and CUDA's
                              attention by its bf16 probabilities). 0 (default): every
                              float is F32. Env RG_BF16=1 does the same. */
  int check_finite;        /* 1: after each node, check its outputs; the first NaN or Inf
                              fails the drain with RG_ERR_NONFINITE naming the op and its
                              label. 0 (default): off, and free. Env RG_CHECK_FINITE=1.
                              rg_set_check_finite changes it later. */
  int no_cudnn;            /* 1: bf16 attention on CUDA runs resgrad's own kernels even in a
                              build with cuDNN, whose fused flash attention it otherwise
                              uses for sequences of 512 or more where cuDNN takes the
                              shape (docs/building.md, build option RG_CUDNN); 0
                              (default): cuDNN where it applies. Env RG_CUDNN=0 does the
                              same. */
  int gemm_tune;           /* 1 (CUDA): each matrix product of 2^32 multiply-adds or more
                              times cuBLASLt's 8 best algorithms for its configuration
                              (shapes, types, epilogue, alignment) the first time it runs
                              outside a graph capture, on its real operands, and keeps the
                              fastest for the context's life. The first step takes
                              longer (40 extra launches a configuration); later ones are
                              faster where the heuristic's first pick is not the fastest.
                              Smaller products stay on the heuristic's pick. The
                              choice rests on timings, so two runs may differ in the last
                              bits of their results; without it the same inputs give the
                              same bits. 2: every product (tests). 0 (default): cuBLASLt's
                              heuristic picks every algorithm. The CPU ignores it.
                              Env RG_GEMM_TUNE=1. */
  int dry_run;             /* 1: a context that models its device (chosen, and refused,
                              as without it) but allocates no device memory and runs
                              nothing: calls record and are checked as usual, budgets
                              are enforced, and rg_stats_get's pool bytes, peaks and
                              device bytes are what the same calls report on a real
                              context of that device. To learn what a step needs before
                              allocating anything (record one step, rg_stats_get). Host
                              work and memory do not grow with tensor sizes: rg_param
                              makes no values, rg_input, rg_constant and rg_write read
                              nothing from host (any non-NULL pointer does), rg_read and
                              rg_item deliver zeros. rg_save, rg_load, rg_dist_init and
                              rg_gradcheck give RG_ERR_UNSUPPORTED. 0 (default): a
                              real context. */
  int nonfinite_checkpoints; /* 1: rg_save and rg_load accept NaN and Inf (debugging);
                                0 (default): they refuse them */
  size_t max_pass_nodes;   /* pass-growth bound, in nodes (recorded ops, each a node of
                              the autograd tape, which lives until the pass pool resets):
                              a call that would record more than this many since the last
                              rg_step_begin or rg_reset records nothing and fails with
                              RG_ERR_OOM, its message naming the label under which most
                              of the pass was recorded, how many nodes, and the op that
                              recorded most of those (a loop that never calls
                              rg_step_begin). rg_step_begin or rg_reset makes room again.
                              0 (default): 1<<24; at most 2^32 - 1 (larger is taken as
                              that) */
  const char *trace_path;  /* a file to write a trace to: Chrome trace-event JSON, which
                              ui.perfetto.dev and chrome://tracing open (docs/trace.md).
                              It holds host spans (recording, each drain with its reason
                              and status, CUDA graph capture and replay, arena
                              allocations), transfers with their bytes and site, each
                              op's time where ops run one by one (CPU: host time of its
                              kernel; CUDA: device time, from events) or each replayed
                              graph's device time, and counters (pool bytes, reserved
                              bytes, bytes transferred). The file is complete JSON after
                              every flush: at the end of each drain, at rg_close, and at
                              exit for a context never closed; a crash between flushes
                              leaves the events up to the last one. The path is read by
                              rg_open only (the string need not outlive it); a path
                              another open context of this process writes gets "-2",
                              "-3"... before its extension (a notice unless quiet).
                              rg_open fails with RG_ERR_IO if the file cannot be made
                              (why on stderr unless quiet); a later failed write sets
                              RG_ERR_IO as the sticky error and stops the trace, and
                              rg_close then returns RG_ERR_IO. While tracing, CUDA times
                              every node of an eager drain with an event pair, and each
                              graph launch with one. NULL or "" (default): no file, and
                              each hook costs one test. Env RG_TRACE=<path> (a value with
                              a '/' or a '.', e.g. RG_TRACE=run.json) does the same and
                              takes precedence. */
} rg_options;

/* ---- context and errors ---------------------------------------------------------- */

/* Opens a context on the device opt asks for. On success *ctx is set and RG_OK returned.
   On failure *ctx is NULL and the status says why (RG_ERR_UNSUPPORTED for CUDA asked of a
   build or machine without it, RG_ERR_OOM, RG_ERR_MISUSE for ctx == NULL). Not a barrier. */
RG_API rg_status rg_open(rg_ctx **ctx, const rg_options *opt);
/* Runs pending work (barrier), frees everything the context owns, including optimizers
   not yet freed and memory lent by rg_export (open loans or not: a borrower must not
   touch it afterwards), then calls the release of every rg_import of the pass (also
   after a failed drain). NULL is fine. Returns the status of that last drain; the
   context is freed either way and must not be used again. */
RG_API rg_status rg_close(rg_ctx *ctx);
/* First error since the last rg_clear_error (sticky), RG_OK if none. NULL ctx: MISUSE. */
RG_API rg_status rg_error(const rg_ctx *ctx);
/* Message of that error, owned by ctx, valid until the next clear or close; "" if none.
   It names the call, the label in force, the operand and says what to do. */
RG_API const char *rg_errmsg(const rg_ctx *ctx);
/* Clears the sticky error so the next one is reported. NULL is ignored. Not a barrier. */
RG_API void rg_clear_error(rg_ctx *ctx);
/* Sets the sticky error (if none is set) to st with a printf-formatted message, prefixed
   with the label in force, so code built on this API (layers, bindings) reports its own
   misuse the way the library does. Returns st. */
RG_API rg_status rg_raise(rg_ctx *ctx, rg_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Static name of a status, e.g. "RG_ERR_STALE". Never NULL. */
RG_API const char *rg_status_str(rg_status s);
/* "cpu (N threads)" or e.g. "cuda:0 (NVIDIA H200)"; a dry run's "cpu (dry run)" or
   "cuda:0 (NVIDIA H200) (dry run)". Owned by ctx ("" for NULL). */
RG_API const char *rg_device_name(const rg_ctx *ctx);
/* RG_DEVICE_CPU or RG_DEVICE_CUDA: what RG_DEVICE_AUTO chose (a dry run: the device it
   models). */
RG_API rg_device rg_device_kind(const rg_ctx *ctx);
/* What the context's device (a dry run's too) has now, in bytes: *available that
   allocations may still take, *total in all. CUDA: cudaMemGetInfo of the context's GPU.
   CPU: MemAvailable and MemTotal (/proc/meminfo, else sysconf), available bounded by the
   process's memory cgroup and RLIMIT_AS where they are set. NULL argument: MISUSE. Not a
   barrier. */
RG_API rg_status rg_device_memory(rg_ctx *ctx, size_t *available, size_t *total);

/* Labels name the work recorded under them: every error message and trace about an op
   recorded while a label is pushed carries the whole stack joined by '/'. The string is
   copied. A push that runs out of memory sets RG_ERR_OOM and names nothing, but still
   counts: its pop removes it, not the label below. Pop without push is ignored. Not
   barriers. */
RG_API void rg_label_push(rg_ctx *ctx, const char *label);
RG_API void rg_label_pop(rg_ctx *ctx);

/* ---- pools, steps and barriers --------------------------------------------------- */

/* Barrier; then frees the pass pool, bumps its generation and clears the autograd tape.
   Handles from the pass pool become stale. Persistent tensors are untouched. The status
   is that of the drain; the pass pool is reset even when the drain failed, and then the
   release of every rg_import of the pass is called. While a pass tensor is lent
   (rg_export) it refuses at once with RG_ERR_MISUSE: nothing is run or reset. */
RG_API rg_status rg_step_begin(rg_ctx *ctx);
/* Barrier without a read. Returns the drain's status. */
RG_API rg_status rg_sync(rg_ctx *ctx);
/* Barrier; then frees the pool and bumps its generation. Resetting the persistent pool
   also frees every parameter, gradient and optimizer state (optimizers stay allocated
   but hold no parameters: free them). Resetting the pass pool calls the release of
   every rg_import of the pass, as rg_step_begin does. While a tensor of the pool is lent
   (rg_export) it refuses at once with RG_ERR_MISUSE: nothing is run or reset. */
RG_API rg_status rg_reset(rg_ctx *ctx, rg_pool pool);
/* Current generation of a pool (starts at 1; 0 for a NULL ctx). */
RG_API uint64_t rg_generation(const rg_ctx *ctx, rg_pool pool);
/* Marks training or evaluation (dropout is identity in evaluation). Default: training. */
RG_API void rg_set_training(rg_ctx *ctx, int training);
/* Turns rg_options.check_finite on (1) or off (0) for the drains that run from now on,
   queued work included; e.g. to run a step that went non-finite again and name the first
   op whose output was not finite. NULL is ignored. Not a barrier. */
RG_API void rg_set_check_finite(rg_ctx *ctx, int on);

/* ---- tensors ----------------------------------------------------------------------- */

/* A per-step input in the pass pool, no gradient. Copies host (size = product of dims
   times the dtype size) before returning: the caller may reuse its buffer at once. The
   upload is queued and counted in stats (site RG_SITE_INPUT). host == NULL: MISUSE. */
RG_API rg_tensor rg_input(rg_ctx *ctx, rg_dtype dtype, int ndim, const int64_t *dims,
                          const void *host);
/* A tensor that stays on the device across steps: copies host now (as rg_input), lives
   in the persistent pool until it is reset, needs no gradient, is not a parameter (no
   optimizer updates it, checkpoints leave it out). For data a model reads every step
   without uploading it again: a dataset that fits on the GPU, a fixed batch, a mask.
   rg_write replaces its contents. Counted as site RG_SITE_INPUT. Not a barrier. */
RG_API rg_tensor rg_constant(rg_ctx *ctx, rg_dtype dtype, int ndim, const int64_t *dims,
                             const void *host);
/* A parameter: persistent, requires grad, named (unique, 1 to 255 bytes; checkpoints use
   the name, so "__metadata__" and names starting with "optim." are reserved) and filled
   as init says. Its gradient buffer is made with it, zeroed. */
RG_API rg_tensor rg_param(rg_ctx *ctx, const char *name, rg_dtype dtype, int ndim,
                          const int64_t *dims, rg_init init);
/* Barrier, then copies the tensor's bytes to dst. bytes must equal its size exactly,
   else MISUSE. If the drain this call runs fails before reaching t, the drain's status is
   returned (its message is the sticky error); reading a value whose drain failed earlier
   gives RG_ERR_FAILED with the original message. A value computed before a failure in
   the same drain reads normally. RG_ERR_NONFINITE (see rg_clip_grad_norm) is returned
   with the value delivered. */
RG_API rg_status rg_read(rg_ctx *ctx, rg_tensor t, void *dst, size_t bytes);
/* Barrier, then the single element of a one-element F32 tensor into *out. */
RG_API rg_status rg_item(rg_ctx *ctx, rg_tensor scalar, float *out);
/* Barrier (so every queued reader of the old value has run), then overwrites t with src.
   bytes must equal its size. Counted as site RG_SITE_WRITE. */
RG_API rg_status rg_write(rg_ctx *ctx, rg_tensor t, const void *src, size_t bytes);

/* Shape queries: O(1), never barriers. A bad handle gives 0 / -1 / RG_F32 / 0 and sets
   the sticky error (rg_is_live sets none). */
RG_API int rg_ndim(rg_ctx *ctx, rg_tensor t);
RG_API int64_t rg_dim(rg_ctx *ctx, rg_tensor t, int axis);
RG_API int64_t rg_numel(rg_ctx *ctx, rg_tensor t);
RG_API rg_dtype rg_dtype_of(rg_ctx *ctx, rg_tensor t);
RG_API int rg_is_live(rg_ctx *ctx, rg_tensor t);
/* Handles a user can inspect: never barriers, never allocate, never set the sticky
   error (a stale or forged handle is described, not reported), so they are safe in an
   error path or a debugger. rg_describe writes one line about t into buf with snprintf's
   contract: it returns the length the whole line needs, writes at most cap bytes and
   NUL-terminates them when cap > 0 (buf may be NULL when cap is 0). The line is dtype,
   shape, pool, the pool's generation and the slot (from 1), the parameter's name (or
   whose gradient it is), "pending" or "ready" followed by the op that made it and its
   label, "requires grad" and "has grad" (rg_grad would return one), "imported"
   (rg_import) and "lent N times" (open rg_export loans) where they hold, and
   for a value whose drain failed, last, "failed: " and that drain's message, e.g.
     F32 [32,11,64] pass gen 3 slot 17, pending: rg_linear [block0/mlp], requires grad
   A handle that is not live reads "RG_NONE", "stale (pass pool generation 2, now 3)" or
   "not a handle of this context (id 0x...)". The text is for people; its form may
   change. rg_is_pending: 1 if t is live and pending (a read would run the queue first),
   else 0. rg_pool_of: RG_POOL_PASS or RG_POOL_PERSISTENT for a live handle, else -1.
   Persistent tensors are never pending: in-place updates of them are queued, and every
   read drains first. */
RG_API int rg_describe(rg_ctx *ctx, rg_tensor t, char *buf, size_t cap);
RG_API int rg_is_pending(rg_ctx *ctx, rg_tensor t);
RG_API int rg_pool_of(rg_ctx *ctx, rg_tensor t);
/* Calls line(user, text) once for every tensor of pool (RG_POOL_PASS,
   RG_POOL_PERSISTENT, or -1 for both, pass first), in slot order, with its rg_describe
   text (cut at 2047 bytes); the core's own tensors (gradients, optimizer state) are
   listed too. Returns how many lines it gave, or -1 for a NULL ctx or line or another
   pool. Not a barrier, no sticky error. line may call into ctx: tensors it makes are not
   listed, and a pool it resets ends that pool's listing. */
RG_API int rg_dump_handles(rg_ctx *ctx, int pool, void (*line)(void *user, const char *text),
                           void *user);
/* Parameters in creation order: count, the i-th (RG_NONE past the end) and a name
   (NULL for a non-parameter; owned by ctx). rg_param_find returns RG_NONE if absent
   without setting an error. */
RG_API int rg_param_count(rg_ctx *ctx);
RG_API rg_tensor rg_param_at(rg_ctx *ctx, int i);
RG_API const char *rg_name(rg_ctx *ctx, rg_tensor t);
RG_API rg_tensor rg_param_find(rg_ctx *ctx, const char *name);

/* ---- ops ----------------------------------------------------------------------------
   Every op records one node and returns a pending handle in the pass pool, F32 unless
   said otherwise. Inputs may come from either pool. Binary elementwise ops broadcast as
   numpy does (axes aligned from the right, size 1 stretches); gradients of broadcast
   operands are summed back to their shape. Each op's gradient is listed as "d:". */

/* a+b, a-b, a*b, a/b. d: g, g*b, ... reduced to each operand's shape. */
RG_API rg_tensor rg_add(rg_ctx *ctx, rg_tensor a, rg_tensor b);
RG_API rg_tensor rg_sub(rg_ctx *ctx, rg_tensor a, rg_tensor b);
RG_API rg_tensor rg_mul(rg_ctx *ctx, rg_tensor a, rg_tensor b);
RG_API rg_tensor rg_div(rg_ctx *ctx, rg_tensor a, rg_tensor b);
/* x*s. d: g*s. */
RG_API rg_tensor rg_scale(rg_ctx *ctx, rg_tensor x, float s);
/* x^p (elementwise; a negative x with a non-integer p gives NaN). d: p*x^(p-1)*g. */
RG_API rg_tensor rg_pow(rg_ctx *ctx, rg_tensor x, float p);
/* Elementwise: -x, e^x, ln x, sqrt x, max(x,0), GELU (tanh approximation, as GPT-2),
   x*sigmoid(x), 1/(1+e^-x), tanh x. relu's gradient at 0 is 0. */
RG_API rg_tensor rg_neg(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_exp(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_log(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_sqrt(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_relu(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_gelu(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_silu(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_sigmoid(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_tanh(rg_ctx *ctx, rg_tensor x);
/* min(max(x, lo), hi); lo <= hi else MISUSE. d: g strictly inside (lo, hi), 0 outside. */
RG_API rg_tensor rg_clamp(rg_ctx *ctx, rg_tensor x, float lo, float hi);

/* Reductions over one axis, or every axis with RG_ALL_AXES (result has 0 axes unless
   keepdim, which keeps reduced axes with size 1). d: sum broadcasts g; mean g/n; max sends
   g to the first arg-max. rg_argmax returns I32 indices along axis and has no gradient. */
RG_API rg_tensor rg_sum(rg_ctx *ctx, rg_tensor x, int axis, int keepdim);
RG_API rg_tensor rg_mean(rg_ctx *ctx, rg_tensor x, int axis, int keepdim);
RG_API rg_tensor rg_max(rg_ctx *ctx, rg_tensor x, int axis, int keepdim);
RG_API rg_tensor rg_argmax(rg_ctx *ctx, rg_tensor x, int axis, int keepdim);
/* Over the last axis, numerically stable (max subtracted). */
RG_API rg_tensor rg_softmax(rg_ctx *ctx, rg_tensor x);
RG_API rg_tensor rg_log_softmax(rg_ctx *ctx, rg_tensor x);

/* Matrix product over the last two axes; leading (batch) axes broadcast. 1-D operands are
   not promoted: both must have >= 2 axes. [..,M,K] x [..,K,N] -> [..,M,N]. The operands
   are both F32 or both BF16 (rg_options.bf16 casts F32 ones to BF16 itself); BF16 values
   are multiplied exactly and summed in F32. The result is F32, or BF16 (rounded once)
   with rg_options.bf16; the operands' gradients are F32 either way (a BF16 operand's
   gradient flows on through its rg_cast in F32). */
RG_API rg_tensor rg_matmul(rg_ctx *ctx, rg_tensor a, rg_tensor b);
/* x[..., in] * w[out, in]^T + b[out] (PyTorch layout); b may be RG_NONE. x and w as
   rg_matmul's operands (both F32 or both BF16); b is F32 (rg_options.bf16 rounds it to
   BF16 with the factors, as PyTorch's autocast does). */
RG_API rg_tensor rg_linear(rg_ctx *ctx, rg_tensor x, rg_tensor w, rg_tensor b);
/* act(rg_linear(x, w, b)) as one op: on CUDA one cuBLASLt call with the bias and the
   activation in its epilogue (no separate activation kernel, no pass over the product in
   memory). RG_ACT_GELU is rg_gelu's tanh approximation; RG_ACT_NONE is rg_linear. The
   result and gradients equal the two-op form's up to float rounding. */
typedef enum rg_act { RG_ACT_NONE = 0, RG_ACT_RELU = 1, RG_ACT_GELU = 2 } rg_act;
RG_API rg_tensor rg_linear_act(rg_ctx *ctx, rg_tensor x, rg_tensor w, rg_tensor b,
                               rg_act act);
/* Normalise over the last axis: (x-mean)/sqrt(var+eps)*gamma+beta, var biased.
   gamma, beta: [C] or RG_NONE. rmsnorm: x/sqrt(mean(x^2)+eps)*gamma. */
RG_API rg_tensor rg_layernorm(rg_ctx *ctx, rg_tensor x, rg_tensor gamma, rg_tensor beta,
                              float eps);
RG_API rg_tensor rg_rmsnorm(rg_ctx *ctx, rg_tensor x, rg_tensor gamma, float eps);
/* table [V,C] (F32), idx I32 of any shape -> [..idx.., C]. An index outside [0, V) is
   RG_ERR_MISUSE at the barrier, naming the value; nothing is written. d: scatter-add. */
RG_API rg_tensor rg_embedding(rg_ctx *ctx, rg_tensor table, rg_tensor idx);
/* softmax(q k^T / sqrt(D) [+ causal mask]) v on [B,H,T,D] (k, v: [B,H,S,D]).
   causal masks key s > query t (aligned at the start). d: q, k and v. The CUDA backend
   runs it as one fused kernel (no T x S matrix in memory) for head sizes D <= 128; a
   larger D is RG_ERR_UNSUPPORTED at the barrier (use more heads: D = width / heads).
   Precision follows the dtype: q, k and v are all F32 or all BF16 (rg_options.bf16
   casts F32 ones to BF16), and the output has their dtype. F32: everything f32 (CUDA
   within 1e-5 normalised error of the CPU; rg_options.tf32 changes nothing here). BF16:
   the CUDA backend also rounds the incoming gradient and the probabilities to bf16 for
   the six products (q k^T, p v; backward g v^T, ds k, ds^T q, p^T g), which run on
   tensor cores with f32 accumulation (the tests bound the normalised error of the
   output and the gradients at 2%); the CPU computes in f32 on the widened values. Softmax statistics and exponentials are f32, the output is rounded
   once, and the gradients are F32 in every mode. Results repeat bit for bit (no
   atomics). */
RG_API rg_tensor rg_attention(rg_ctx *ctx, rg_tensor q, rg_tensor k, rg_tensor v,
                              int causal);
/* rg_attention with masks beyond causal (rg_attention is this with both RG_NONE):
   softmax(q k^T / sqrt(D) + bias [+ causal mask], over the keys not padded) v.
   key_padding: RG_NONE, or I32 [B,S]: a nonzero element masks key s of batch b from every
   query of that batch (PyTorch's key_padding_mask, True = ignore). bias: RG_NONE, or F32
   of 1 to 4 axes that broadcasts to [B,H,T,S] (aligned from the right, each axis its size
   or 1: [T,S], [B,1,T,S], [B,H,T,S], [B,1,1,S]...), added to the scaled scores; -inf
   masks an entry, +inf and NaN are the caller's to avoid. (Under rg_options.check_finite
   the upload of a bias holding -inf is itself reported as non-finite: mask whole keys with
   key_padding there, or use a large negative finite bias, which leaves a row that has it
   everywhere an average of its keys rather than 0.) A query row whose every key is
   masked (by padding, causal or -inf) gives an output row of 0 and passes no gradient
   (where the mask-free softmax would divide 0 by 0). d: q, k and v; the masks get none:
   a bias that requires a gradient is RG_ERR_MISUSE (pass rg_detach of it). Shapes and
   dtypes of the masks are checked when recorded (RG_ERR_MISUSE naming them); a BF16 bias
   under rg_options.bf16 is widened to F32. Precision, D limit and determinism as
   rg_attention's; the CUDA backend reads the masks per 64 x 64 tile inside its fused
   kernels (no T x S matrix), and runs masked calls on resgrad's own kernels, never
   cuDNN's (rg_stats.cudnn_attention does not count them). */
RG_API rg_tensor rg_attention_mask(rg_ctx *ctx, rg_tensor q, rg_tensor k, rg_tensor v,
                                   int causal, rg_tensor key_padding, rg_tensor bias);
/* rg_attention on the heads of a fused projection, read and written in place: qkv
   [B,T,3C] holds q, k and v as the thirds [0,C), [C,2C), [2C,3C) of its last axis, and
   head h (of heads, D = C/heads) is columns [h*D, (h+1)*D) of each third. The result is
   [B,T,C] with head h at columns [h*D, (h+1)*D): what reshaping qkv to [B,T,3*heads,D],
   transposing axes 1 and 2, slicing q, k, v, rg_attention and transposing and reshaping
   back computes, without those copies. d: qkv. The last axis must be a multiple of
   3*heads, else RG_ERR_MISUSE; CUDA limits D and picks the precision as rg_attention. */
RG_API rg_tensor rg_attention_qkv(rg_ctx *ctx, rg_tensor qkv, int64_t heads, int causal);
/* Mean cross-entropy of logits [..., C] against I32 targets [...]; a scalar. A target
   outside [0, C) is RG_ERR_MISUSE at the barrier naming the value. The _ignore variant
   skips targets equal to ignore_index (mean over the rest; 0 if none). d: logits.
   rg_backward straight from this loss (nothing recorded after it) computes d logits in
   the loss's own node, with the bits a separate backward node would give. */
RG_API rg_tensor rg_cross_entropy(rg_ctx *ctx, rg_tensor logits, rg_tensor targets);
RG_API rg_tensor rg_cross_entropy_ignore(rg_ctx *ctx, rg_tensor logits, rg_tensor targets,
                                         int ignore_index);
/* Mean squared error, a scalar; shapes must be equal. d: both operands. */
RG_API rg_tensor rg_mse(rg_ctx *ctx, rg_tensor pred, rg_tensor target);

/* Shape ops copy, so in-place updates of the input (an optimizer step, rg_write) cannot
   change the result - except rg_reshape of a pass tensor, which is a view: it shares the
   input's bytes (no copy, no memory), and an rg_write to either shows in both. rg_reshape
   of a persistent tensor copies. reshape: same element count; one dim may be -1. */
RG_API rg_tensor rg_reshape(rg_ctx *ctx, rg_tensor x, int ndim, const int64_t *dims);
RG_API rg_tensor rg_transpose(rg_ctx *ctx, rg_tensor x, int axis0, int axis1);
/* perm has rg_ndim(x) entries, a permutation: result axis i is input axis perm[i]. */
RG_API rg_tensor rg_permute(rg_ctx *ctx, rg_tensor x, const int *perm);
/* Elements [start, start+len) along axis. */
RG_API rg_tensor rg_slice(rg_ctx *ctx, rg_tensor x, int axis, int64_t start, int64_t len);
/* a and b joined along axis; other axes equal. */
RG_API rg_tensor rg_concat(rg_ctx *ctx, rg_tensor a, rg_tensor b, int axis);
/* Zeroes each element with probability p and scales the rest by 1/(1-p). The mask comes
   from a counter-based generator keyed by (seed, step, call index within the step): the
   same seed and step give the same mask. Identity when not training or p == 0. p in
   [0,1) else MISUSE. */
RG_API rg_tensor rg_dropout(rg_ctx *ctx, rg_tensor x, float p);
/* F32 <-> BF16 (round to nearest even); F32 <-> I32 (truncation toward zero). Gradient
   flows through float casts. */
RG_API rg_tensor rg_cast(rg_ctx *ctx, rg_tensor x, rg_dtype dtype);
/* A copy that does not require grad. */
RG_API rg_tensor rg_detach(rg_ctx *ctx, rg_tensor x);

/* ---- autograd ------------------------------------------------------------------------ */

/* Records the backward pass of a one-element loss: gradient nodes go through the same op
   table, so nothing runs until a barrier. Parameter gradients (persistent) accumulate
   across calls until rg_zero_grad. A loss with more than one element or no gradient
   path: MISUSE. If it fails part-way (RG_ERR_OOM), nothing it recorded stays queued, so
   no gradient is half-accumulated and the step can be retried. (Once it has succeeded,
   its accumulation is queued: a caller that redoes the step after a later call failed -
   the clip, the optimizer step - calls rg_zero_grad first.) Not a barrier. */
RG_API rg_status rg_backward(rg_ctx *ctx, rg_tensor loss);
/* The gradient of t: for a parameter its persistent buffer; for another tensor the pass
   gradient the last rg_backward recorded, which exists only if rg_retain_grad(t) was
   called before it (MISUSE otherwise, or if it recorded none). */
RG_API rg_tensor rg_grad(rg_ctx *ctx, rg_tensor t);
/* Keeps t's gradient for rg_grad after the next rg_backward. Without it the backward
   pass gives the memory of every intermediate gradient back to the pass pool as soon as
   the walk is done with it (as PyTorch frees non-leaf gradients), so a step's peak
   memory is its activations plus a few layers' gradients. t must require grad (MISUSE
   otherwise). Not a barrier. */
RG_API rg_status rg_retain_grad(rg_ctx *ctx, rg_tensor t);
/* Records the zeroing of every parameter gradient. Not a barrier. */
RG_API rg_status rg_zero_grad(rg_ctx *ctx);

/* ---- activation checkpointing ------------------------------------------------------ */

/* A checkpoint region trades compute for memory: the tensors its ops make go back to the
   pass pool at its end, all but its output, and rg_backward records their recomputation
   (the region's ops again, on the same inputs: the same values bit for bit, the same
   dropout masks) just before the region's gradients, then gives the recomputed tensors
   back once those are recorded. The forward pass then holds each region's output instead
   of all its activations, the backward pass one region's activations at a time; the
   price is the region's forward ops run twice. It all stays in the one recorded pass (one
   drain, one CUDA graph), and the gradients are bit-identical to the same pass without
   regions. A transformer block is the usual region (rg_gpt_config.checkpoint, which
   also makes each row chunk of a GPT loss's head one: rg_gpt_loss, resgrad_nn.h):

     rg_checkpoint_begin(ctx);
     x = rg_nn_block_forward(ctx, &block, x);
     rg_checkpoint_end(ctx, x);

   rg_checkpoint_begin opens a region; MISUSE if one is open (regions do not nest).
   rg_checkpoint_end closes it. out, which an op of the region made, survives it, with the
   other outputs of that op (attention's row statistics...), and so do tensors of the
   region given to rg_retain_grad before the end, lent (rg_export) or uploaded (rg_input).
   Every other tensor the region made is refused afterwards by every call that takes it
   (MISUSE, saying so), the shape queries excepted: make the value needed later the
   region's output. The region's inputs must keep their values until rg_backward (no
   rg_write or optimizer step on them in between): its recomputation reads them again.
   out == RG_NONE closes the region without giving anything back (unwinding after an
   error). MISUSE without an open region, or for an out the region did not make (the
   region is closed then and keeps its tensors). While a region is open, rg_backward,
   rg_step_begin and rg_reset refuse (MISUSE) and change nothing. A loss computed inside a
   region is recorded with its backward as two nodes rather than one: end regions before
   the loss. Not barriers. */
RG_API rg_status rg_checkpoint_begin(rg_ctx *ctx);
RG_API rg_status rg_checkpoint_end(rg_ctx *ctx, rg_tensor out);

/* ---- optimizers ---------------------------------------------------------------------- */

/* Zero fields take the defaults shown. weight_decay is used as given (0 = none). */
typedef struct rg_adamw_options {
  float lr;           /* 1e-3 */
  float beta1, beta2; /* 0.9, 0.999 */
  float eps;          /* 1e-8 */
  float weight_decay; /* decoupled: w -= lr*wd*w */
} rg_adamw_options;
typedef struct rg_sgd_options {
  float lr;           /* 1e-2 */
  float momentum;     /* 0 = plain SGD */
  float weight_decay; /* L2 added to the gradient: g += wd*w */
} rg_sgd_options;

/* An optimizer over every parameter that exists now; its state (moments, step count,
   hyperparameters) lives in the persistent pool. NULL on error (sticky error set). */
RG_API rg_optim *rg_optim_adamw(rg_ctx *ctx, const rg_adamw_options *opt);
RG_API rg_optim *rg_optim_sgd(rg_ctx *ctx, const rg_sgd_options *opt);
/* Records one fused update of every parameter (and, for AdamW, the step count and bias
   corrections, kept on the device). If rg_clip_grad_norm found a non-finite norm, the
   update is skipped and weights and moments stay bit-identical. Not a barrier. */
RG_API rg_status rg_optim_step(rg_optim *opt);
/* Records a new learning rate; it lives in device memory, so the recorded graph does
   not change (a 4-byte upload, counted as RG_SITE_OPTIM). Refused (MISUSE) while a
   schedule is set: clear it first with rg_optim_set_schedule(opt, NULL). */
RG_API rg_status rg_optim_set_lr(rg_optim *opt, float lr);
/* Steps taken so far (a barrier: the count lives on the device). */
RG_API int64_t rg_optim_steps(rg_optim *opt);
/* The learning rate in force (a barrier: it lives on the device): the rate the last step
   used under a schedule, else the rate of creation or of the last rg_optim_set_lr. -1 if
   opt is unusable or the read fails. */
RG_API float rg_optim_lr(rg_optim *opt);

/* Learning-rate schedules, computed on the device. The rate of update s (0-based: s is
   rg_optim_steps before the step, so an update skipped for a non-finite gradient norm
   counts none and changes no rate), with lr the peak rate, is:
     warm-up, s < warmup:  ONECYCLE: start_lr + (lr - start_lr) s / warmup
                           the others: lr (s + 1) / warmup
     then CONSTANT:        lr
          STEP:            lr gamma^floor((s - warmup) / step_size)
          COSINE, ONECYCLE: min_lr + (lr - min_lr) (1 + cos(pi (s - warmup) / (total -
                           warmup))) / 2 for s < total, min_lr from update total on.
   Computed in float on both backends (within a few ulp of these formulas in exact
   arithmetic). Fields a kind does not read are ignored. */
typedef enum rg_sched_kind {
  RG_SCHED_CONSTANT, RG_SCHED_COSINE, RG_SCHED_STEP, RG_SCHED_ONECYCLE
} rg_sched_kind;
typedef struct rg_schedule {
  rg_sched_kind kind;
  float lr;          /* the peak rate, finite and > 0 */
  float min_lr;      /* COSINE, ONECYCLE: the final rate, in [0, lr] */
  float start_lr;    /* ONECYCLE: the first rate, in [0, lr] */
  float gamma;       /* STEP: the factor every step_size updates, in (0, 1] */
  int64_t warmup;    /* updates of warm-up, in [0, 2^31) */
  int64_t total;     /* COSINE, ONECYCLE: the update that reaches min_lr, in (warmup, 2^31) */
  int64_t step_size; /* STEP: updates per factor of gamma, in [1, 2^31) */
} rg_schedule;
/* Sets opt's schedule (copied), or clears it (s == NULL). From then on every
   rg_optim_step first records the rate of its update, computed on the device from the
   device's step count: no upload per step, and a captured step replays with each step's
   rate. The schedule is host state of opt, not saved by rg_save: rg_load keeps the one
   set on opt (the rate continues from the loaded step count); a program that loads a
   checkpoint into a new optimizer sets it again. Clearing keeps the last rate
   used until rg_optim_set_lr. Invalid fields: MISUSE naming the field, nothing changed.
   Not a barrier; records nothing. */
RG_API rg_status rg_optim_set_schedule(rg_optim *opt, const rg_schedule *s);
/* Records: total L2 norm of every parameter gradient; scales the gradients by
   max_norm/(norm+1e-6) when that is below 1 (as PyTorch). A non-finite norm leaves the
   gradients alone, makes the next rg_optim_step skip its update (weights, moments and
   step count bit-identical) and makes the barrier that runs it report RG_ERR_NONFINITE:
   rg_read/rg_item still deliver their value and return RG_ERR_NONFINITE. No host read. */
RG_API rg_status rg_clip_grad_norm(rg_ctx *ctx, float max_norm);
/* Records: every element of every parameter gradient clamped to [-max_abs, max_abs]
   (as PyTorch's clip_grad_value_; a NaN stays NaN). max_abs > 0, else MISUSE. Not a
   barrier; no host read. */
RG_API rg_status rg_clip_grad_value(rg_ctx *ctx, float max_abs);
/* Barrier (queued steps refer to opt), then frees the optimizer. NULL is fine. Its state
   stays in the persistent pool until that pool is reset. */
RG_API void rg_optim_free(rg_optim *opt);

/* ---- ring buffers --------------------------------------------------------------------
   A ring buffer is a table of capacity entries of rows values each, kept on the device
   outside the per-step pool: replay memory for reinforcement learning, a window of
   streaming data. Its handle is a persistent tensor [capacity, rows] (generation-checked
   like any handle: rg_reset(RG_POOL_PERSISTENT) makes it stale) beside a small state on
   the device (the next slot to write, how many entries it holds, how many samples were
   drawn), which only recorded nodes read and change. So pushes, gathers and samples are
   ordered with the queue like any op (a gather recorded before a push sees the old
   contents), and a step that pushes and samples records the same graph every time: on
   CUDA it replays, each replay working on the ring as it then is, with no transfer but
   the entries pushed. Entries are numbered from the oldest (0) to the newest (count - 1);
   once full, a push overwrites the oldest. rg_read of the handle gives the raw table, slot
   by slot (the oldest entry is not slot 0 once the ring has wrapped); other ops read it
   like any persistent tensor, and rg_write replaces the table (not the state). A ring
   takes capacity * rows elements (rounded up to 256 bytes) plus 256 bytes of the
   persistent pool and its budget.
   The ring holds values: entries pushed carry no gradient into it, and gathers give
   tensors that require none. docs/ring.md has a replay-buffer loop. */

/* A new ring of capacity entries of rows elements of dtype (any), all zero, holding
   none. capacity in [1, 2^31 - 1], rows >= 1, else MISUSE; RG_ERR_OOM as for any
   persistent tensor. It may reuse the bytes of a ring rg_ring_free freed (its zeroing is
   recorded, so queued readers of the old ring run first). Records two fills; not a
   barrier. */
RG_API rg_tensor rg_ring_new(rg_ctx *ctx, rg_dtype dtype, int64_t capacity, int64_t rows);
/* Records the append of entries, [k, rows] (k entries, 1 <= k <= capacity) or [rows] (one),
   of the ring's dtype, after the newest: entry j goes to the slot after entry j - 1, the
   oldest entries are overwritten once the ring is full, and the count becomes min(count +
   k, capacity). Nodes recorded before it read the old contents, nodes after it the new;
   entries may come from either pool (copied when the node runs; the ring itself is
   refused). MISUSE for another shape or dtype, naming both. Not a barrier. */
RG_API rg_status rg_ring_push(rg_ctx *ctx, rg_tensor ring, rg_tensor entries);
/* Records a gather: I32 idx of up to 3 axes -> [..idx.., rows] of the ring's dtype, row p
   a copy of entry idx[p] (0 the oldest). An index outside [0, count) is RG_ERR_MISUSE at
   the barrier naming the value, its position and the count; nothing is read outside the
   ring. A pass tensor, no gradient. Not a barrier. */
RG_API rg_tensor rg_ring_gather(rg_ctx *ctx, rg_tensor ring, rg_tensor idx);
/* Records the draw of n entry numbers (I32 [n], for rg_ring_gather) uniformly from [0,
   count) on the device, with replacement: no upload, and a captured step draws new ones
   at each replay. Drawn by Philox keyed by the context seed with the ring's own count of
   samples drawn, so a program run twice with one seed draws the same batches on the CPU
   and on CUDA (each value's probability is 1/count within count / 2^32). Sampling an
   empty ring is RG_ERR_MISUSE at the barrier. n in [1, 2^31 - 1] else MISUSE. Not a
   barrier. */
RG_API rg_tensor rg_ring_sample(rg_ctx *ctx, rg_tensor ring, int64_t n);
/* Barrier; then the number of entries the ring holds into *count (a 4-byte download,
   site RG_SITE_READ). A failed drain's status is returned with the count its nodes that
   ran left. NULL count: MISUSE. */
RG_API rg_status rg_ring_count(rg_ctx *ctx, rg_tensor ring, int64_t *count);
/* Frees the ring: its handle is stale from now on (RG_ERR_STALE naming rg_ring_free), and
   its bytes go back to the persistent pool for a later rg_ring_new. Nodes already queued
   that read or push to it still run on its contents, at the next barrier, as recorded.
   A lent ring (rg_export) is refused (MISUSE) until its loans end. Not a barrier. */
RG_API rg_status rg_ring_free(rg_ctx *ctx, rg_tensor ring);

/* ---- state and autoregressive decoding -----------------------------------------------
   A model that generates one token at a time keeps, per layer, the keys and values of
   the positions it has seen: a KV cache, persistent tensors K and V [B, H, S, D] (batch
   rows, heads, positions, head size) that recorded ops write in place. The position of
   each batch row is an I32 [B] tensor on the device (an rg_input each step, or anything
   computed), never a number baked into a node, so a decode step records the same nodes
   at every position and on CUDA replays as one graph. resgrad_nn.h's rg_gpt_generate is
   the loop built from these calls; docs/generate.md says how. */

/* A persistent tensor of dtype (F32, BF16 or I32) and shape dims, all zero, for state
   that recorded ops change in place (a KV cache). It takes its bytes (rounded up to 256)
   from the persistent pool and its budget, and may reuse bytes rg_state_free or
   rg_ring_free gave back (its zeroing is recorded, so queued readers of the old tensor
   run first). Bad dtype or shape: MISUSE; RG_ERR_OOM as for any persistent tensor.
   Records one fill; not a barrier. */
RG_API rg_tensor rg_state_new(rg_ctx *ctx, rg_dtype dtype, int ndim, const int64_t *dims);
/* Frees a tensor rg_state_new made: its handle is stale from now on (RG_ERR_STALE naming
   rg_state_free) and its bytes go back to the persistent pool for a later rg_state_new
   or rg_ring_new. Nodes already queued that read or write it still run on its bytes at
   the next barrier. Any other tensor, or a lent one (rg_export), is MISUSE. Not a
   barrier. */
RG_API rg_status rg_state_free(rg_ctx *ctx, rg_tensor state);
/* Records the write of new keys and values into a KV cache: qkv [B, T, 3C] F32 (C = H D;
   q, k and v side by side on the last axis, as rg_attention_qkv reads them; head h's
   columns h D + [0, D) of each third), pos I32 [B]: row t of batch b goes to position
   pos[b] + t of K and V (F32 [B, H, S, D], two tensors of one shape, T <= S). Nodes
   recorded before it read the old rows, nodes after it the new. A pos[b] outside [0, S -
   T] fails at the barrier (RG_ERR_MISUSE naming it and the row; nothing is written).
   Shape or dtype mismatches: MISUSE naming both shapes. No gradient. Not a barrier. */
RG_API rg_status rg_kv_write(rg_ctx *ctx, rg_tensor k, rg_tensor v, rg_tensor qkv,
                             rg_tensor pos);
/* Records attention over a KV cache: qkv, K, V, pos as rg_kv_write's; -> [B, T, C] F32
   whose row t, head h is softmax(q k^T / sqrt(D)) v over positions s in [0, pos[b] + t]
   of K and V (q from the first third of qkv's row t): the causal attention of a sequence
   whose keys and values up to that position are in the cache, reading only that prefix.
   After rg_kv_write of the same qkv and pos it is rg_attention_qkv(qkv, H, causal) of
   the whole sequence at rows pos[b] .. pos[b] + T - 1. A pos[b] outside [0, S - T] fails
   at the barrier (MISUSE). No gradient (the result requires none). Not a barrier. */
RG_API rg_tensor rg_attention_cached(rg_ctx *ctx, rg_tensor qkv, rg_tensor k, rg_tensor v,
                                     rg_tensor pos);
/* Records one draw per row of logits [..., V] (F32) -> I32 [...] token ids, on the device:
   temperature 0 gives each row's first maximum (greedy, as rg_argmax); else the draw is
   from softmax(x / temperature) restricted to the top_k largest logits (0: all; ties with
   the top_k-th are kept) and then to the smallest set of the largest whose probability
   sums to at least top_p (1: all; ties at the border kept), renormalised, as Hugging
   Face's temperature, top-k and top-p warpers in that order. The randomness is Philox
   keyed by seed, its counter the row's element of counter (I32, the logits' shape
   without the last axis; RG_NONE: 0 for every row) and the row's index, so one (seed,
   counter) gives the same draw on the CPU and on CUDA (the Gumbel-max draw, ops.h), and
   a decode step that passes its positions as the counter draws afresh at each position
   without any upload. temperature finite and >= 0, top_k >= 0, top_p in (0, 1], else
   MISUSE. No gradient. Not a barrier. */
RG_API rg_tensor rg_sample(rg_ctx *ctx, rg_tensor logits, rg_tensor counter,
                           float temperature, int64_t top_k, float top_p, uint64_t seed);

/* ---- token data ----------------------------------------------------------------------
   A dataset of tokens in a file, read through a memory map (POSIX), and the batches of a
   language model cut from it: rows of T + 1 consecutive tokens, the first T the input
   and the last T the targets (the next token of each input position).

   Formats. RG_DATA_RAW: every byte is one token (vocabulary 256). RG_DATA_LLMC: the
   token files of llm.c: a header of 256 little-endian int32, header[0] = 20240520 (the
   magic), header[1] = 1 (the version), header[2] = the number of tokens, then that many
   little-endian uint16 tokens and nothing after them. RG_DATA_AUTO: LLMC when the file
   starts with that magic, else RAW.

   Batches. Batch n (0, 1, 2, ...; rg_data_batch takes the next one, rg_data_seek sets
   it) is a pure function of (file, seed, n, B, T, world, rank, random), never of timing
   or of earlier calls. With world ranks, batch n is a global batch of world * B rows of
   which rank r takes rows [r B, (r + 1) B), so world ranks of B rows see the rows one
   process of world * B rows sees. Random: global row i of batch n starts at a position
   drawn uniformly from [0, N - T) (N tokens in the file) by Philox keyed by the seed,
   with counter (n, i). Sequential: the file is cut into consecutive rows of T + 1 tokens
   advancing by T, world * B rows a batch; E = floor((N - 1) / (world B T)) batches make
   an epoch, and batch n is batch n mod E of epoch n / E (the last N - 1 - E world B T
   tokens are never read: the rows stop at the end of a whole batch).

   Prefetch. Unless rg_data_options.no_prefetch, each rg_data_batch, after recording its
   uploads, hands the next batch (number n + 1, the same B, T and mode) to a worker
   thread of the handle, which gathers its tokens from the map into a host buffer while
   the caller records and runs step n (the barrier that runs the step waits for the
   device; the worker is not held up by it). The next rg_data_batch waits for the worker
   if it is not done, and uses its batch if it is the one asked for (else it gathers the
   asked one itself). The worker touches nothing but the map and that buffer; the
   context is used only by the calling thread. What overlaps is the host's gathering of
   batch n + 1 with step n; the upload itself is part of step n + 1 (an UPLOAD node from
   the pass's pinned staging, as rg_input's). Prefetch changes no value: the batches are
   the same with and without it. */
typedef struct rg_data rg_data;
typedef enum rg_data_format {
  RG_DATA_AUTO = 0, RG_DATA_RAW = 1, RG_DATA_LLMC = 2
} rg_data_format;
/* Options for rg_data_open; a zero-initialised struct (or NULL) gives the defaults. */
typedef struct rg_data_options {
  rg_data_format format; /* AUTO (default), RAW or LLMC */
  int64_t vocab;         /* every token must be below it: checked once, at open, for every
                            token; 0 (default): the format's own bound (256 raw, 65536
                            llm.c), which needs no check. At most that bound. */
  uint64_t seed;         /* random batches (0, the default, is seed 0) */
  int world, rank;       /* this process is rank of world (data-parallel); world 0
                            (default) is 1 */
  int no_prefetch;       /* 1: each rg_data_batch gathers its batch itself, no worker
                            thread; 0 (default): prefetch (above) */
} rg_data_options;
/* Opens path as a token dataset of ctx. Not a barrier; records nothing. Checks the whole
   file before returning: RG_ERR_IO naming the file and what is wrong for a missing or
   unreadable file, an llm.c file with the wrong magic (format LLMC) or version, a header
   whose count disagrees with the file's size (truncated, or bytes after the tokens), no
   tokens, or a token >= vocab (naming the first such token, its value and its
   position); RG_ERR_MISUSE for bad options. On error NULL with the sticky error set. The
   handle is freed by rg_data_free or rg_close. */
RG_API rg_data *rg_data_open(rg_ctx *ctx, const char *path, const rg_data_options *opt);
/* Records the upload of the next batch (see above: random != 0 draws rows at random,
   0 takes them sequentially) as two pass tensors, *idx and *targets, I32 [B, T] (targets
   row b, column t is the token after idx row b, column t). Not a barrier. B, T >= 1 and
   a global batch must fit in the file: world * B * T + 1 <= N, else RG_ERR_MISUSE
   naming the sizes (nothing recorded, the batch number unchanged). On success the batch
   number advances by one. Counted as site RG_SITE_INPUT, as rg_input. On error both
   handles are RG_NONE. */
RG_API rg_status rg_data_batch(rg_data *d, int64_t B, int64_t T, int random, rg_tensor *idx,
                               rg_tensor *targets);
/* Sets the number of the next batch (>= 0, else MISUSE): e.g. the step a resumed run
   continues from. Not a barrier. */
RG_API rg_status rg_data_seek(rg_data *d, int64_t batch);
/* The number of tokens in the file (0 for NULL), the number of the next batch, and the
   format the file was read as (RG_DATA_AUTO for NULL). rg_data_epoch: how many times
   the batches taken so far have gone through the data, by the last batch's shape and
   mode: sequential, the epochs completed (the next batch's epoch); random, the tokens
   drawn divided by N, rounded down; 0 before the first batch. Not barriers. */
RG_API int64_t rg_data_tokens(const rg_data *d);
RG_API int64_t rg_data_next(const rg_data *d);
RG_API int64_t rg_data_epoch(const rg_data *d);
RG_API rg_data_format rg_data_format_of(const rg_data *d);
/* Stops the worker, unmaps the file and frees the handle. Tensors already recorded keep
   their bytes (the uploads read the pass's staging, not the file). NULL is fine. */
RG_API void rg_data_free(rg_data *d);

/* ---- checkpoints --------------------------------------------------------------------- */

/* Barrier; writes every parameter (and opt's state when opt != NULL) as safetensors,
   atomically (temporary file, fsync, rename). A path that is a symbolic link is written
   through: its final target is replaced, the link stays. A path that exists and is not a
   regular file (a directory, a device, a FIFO) is refused with RG_ERR_IO. A NaN or Inf
   in any tensor it would write is refused with RG_ERR_NONFINITE naming the tensor and
   element (unless rg_options.nonfinite_checkpoints). On any error nothing is written and
   an existing file is unchanged. On a rank other than 0 of a distributed context
   (rg_dist_init) it writes nothing and returns the barrier's status: rank 0 writes the
   checkpoint, whose weights are every rank's. */
RG_API rg_status rg_save(rg_ctx *ctx, const char *path, const rg_optim *opt);
/* Barrier; validates the whole file first (header length, JSON, names, dtypes, shapes,
   offsets inside the file, no overlaps, every parameter and, with opt, all of its state
   present) and reads it all before changing anything; on any problem RG_ERR_IO naming
   it (RG_ERR_NONFINITE for a NaN or Inf in a tensor it would load, naming the tensor,
   unless rg_options.nonfinite_checkpoints), and the model, optimizer and metadata are
   left exactly as they were. On success
   the parameters, opt's state, the RNG state (seed and dropout step counter) and the
   metadata are restored. With opt == NULL only the parameters are loaded: the file's
   optimizer state (optim.hyper, optim.step, optim.m.<name> and optim.v.<name> of this
   model's parameters, still checked like the rest) is skipped, so a training checkpoint
   opens for inference. */
RG_API rg_status rg_load(rg_ctx *ctx, const char *path, rg_optim *opt);
/* String metadata saved in the checkpoint's __metadata__ (e.g. a model's config). Keys
   are non-empty, at most 255 bytes, values at most 1023; the keys "format",
   "format_version", "seed", "step" and "optim" are the library's own (MISUSE). Setting
   an existing key replaces it. rg_meta_get returns the value (owned by ctx, valid until
   the key is set again, rg_load or rg_close) or NULL; after rg_load it holds the file's. */
RG_API rg_status rg_meta_set(rg_ctx *ctx, const char *key, const char *value);
RG_API const char *rg_meta_get(rg_ctx *ctx, const char *key);

/* ---- safetensors files ---------------------------------------------------------------
   Any safetensors file's tensors by name, as host bytes: for weights made elsewhere (a
   Hugging Face model: resgrad_nn.h's rg_gpt_load_hf reads GPT-2's with these) and for
   writing such files. The format, which rg_save writes too: an 8-byte little-endian
   header length, a JSON header {"<name>": {"dtype", "shape", "data_offsets": [begin,
   end]}, ..., "__metadata__": {"<key>": "<value>", ...}}, then the data section,
   each tensor's elements little-endian in C order. None of these touch the device,
   record or barrier: ctx is used for its sticky error and its host allocator only. A
   dry-run context opens and reads files but refuses rg_st_write (RG_ERR_UNSUPPORTED,
   as rg_save: what it would write, its reads, are zeros). A file and what it returned
   are used by the thread of its context, and closed before rg_close. */

#define RG_ST_MAX_DIMS 8
/* One tensor of a safetensors file. dtype is the format's name: "F32", "BF16", "F16",
   "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3",
   "F8_E5M2". */
typedef struct rg_st_tensor {
  const char *name;              /* 1 to 299 bytes, not "__metadata__" */
  char dtype[16];
  int ndim;                      /* 0 to RG_ST_MAX_DIMS */
  int64_t dims[RG_ST_MAX_DIMS];
  size_t nbytes;                 /* rg_st_open: its bytes; rg_st_write ignores it */
  const void *data;              /* rg_st_write: its bytes; NULL from rg_st_open */
} rg_st_tensor;
typedef struct rg_st_file rg_st_file;

/* Opens a safetensors file and validates its whole header (the header length, the JSON,
   every dtype one of the format's, each tensor's offsets inside the file and holding
   exactly its shape's bytes, no name twice, no two tensors overlapping); reads no data.
   NULL with RG_ERR_IO naming the file and what is wrong (RG_ERR_MISUSE for an empty
   path, RG_ERR_OOM). Free it with rg_st_close. */
RG_API rg_st_file *rg_st_open(rg_ctx *ctx, const char *path);
/* The number of tensors (0 for NULL), and tensor i in the header's order (NULL outside
   [0, count)) or by name (NULL when absent). What these return belongs to the file and
   lives until rg_st_close; its data is NULL. */
RG_API int rg_st_count(const rg_st_file *f);
RG_API const rg_st_tensor *rg_st_at(const rg_st_file *f, int i);
RG_API const rg_st_tensor *rg_st_find(const rg_st_file *f, const char *name);
/* The value of a "__metadata__" key (the file's, until rg_st_close), or NULL. */
RG_API const char *rg_st_meta(const rg_st_file *f, const char *key);
/* Copies tensor t's bytes (t from rg_st_at or rg_st_find of f) into dst; bytes must be
   t->nbytes, else RG_ERR_MISUSE. RG_ERR_IO when the file can no longer be read there. */
RG_API rg_status rg_st_read(rg_st_file *f, const rg_st_tensor *t, void *dst, size_t bytes);
/* Closes the file and frees what it returned. NULL is fine. */
RG_API void rg_st_close(rg_st_file *f);
/* Writes the n tensors t[0..n) (each's data: its dims' product times its dtype's size
   bytes, C order) as a safetensors file, in that order, with meta's pairs (key, value,
   ..., NULL; meta may be NULL) as its "__metadata__". The write is rg_save's: atomic, a
   symbolic link written through, a path that is not a regular file refused with
   RG_ERR_IO, and a NaN or Inf in an F32 or BF16 tensor refused with RG_ERR_NONFINITE
   (unless rg_options.nonfinite_checkpoints); on any error nothing is written and an
   existing file is unchanged. RG_ERR_MISUSE, before anything is written, for a bad
   name (empty, too long, twice), dtype, ndim or dimension, or NULL data of a non-empty
   tensor. Not a barrier; written on every rank of a distributed context. */
RG_API rg_status rg_st_write(rg_ctx *ctx, const char *path, const rg_st_tensor *t, int n,
                             const char *const *meta);

/* ---- sharing memory with other libraries ------------------------------------------
   Zero-copy exchange with array libraries (NumPy, PyTorch, CuPy...), the primitives a
   DLPack binding needs: rg_export lends a tensor's bytes to another library, rg_import
   wraps another library's bytes as a tensor. Neither copies or allocates device memory.
   A dry-run context refuses both (RG_ERR_UNSUPPORTED). */

/* Where a tensor's bytes are: C-contiguous (row-major, no strides), starting at data. */
typedef struct rg_memref {
  void *data;            /* the first element; device memory on CUDA */
  rg_device device;      /* RG_DEVICE_CPU (host memory) or RG_DEVICE_CUDA */
  int device_index;      /* the GPU's ordinal for CUDA, 0 for the CPU */
  rg_dtype dtype;
  int ndim;              /* 0 to RG_MAX_DIMS */
  int64_t dims[RG_MAX_DIMS]; /* the first ndim are used */
} rg_memref;

/* Barrier (counted as RG_DRAIN_READ); then lends t's bytes: fills *out with where they
   are, the bytes rg_read would copy. If the drain this call runs fails before reaching
   t, or t's drain failed earlier, the status is rg_read's for t (the drain's, or
   RG_ERR_FAILED) and nothing is lent; a drain that reports
   RG_ERR_NONFINITE (rg_clip_grad_norm) lends nothing either and returns it: call again.
   Only RG_OK lends. On CUDA the bytes are ready for work the borrower queues on stream
   (a cudaStream_t, or cudaStreamLegacy / cudaStreamPerThread): the context's stream
   records an event that stream waits for, so nothing waits on the host; stream NULL
   waits on the host until the context's work is done (right for the legacy default
   stream and for host code that reads at once). The CPU ignores stream.
   A lent tensor is pinned: while any tensor of a pool is lent, rg_step_begin and rg_reset
   of that pool refuse with RG_ERR_MISUSE at once, before their barrier (nothing is run or
   freed), with a message that says how many loans of that pool are open; so the bytes
   stay valid and keep holding t. Each rg_export is undone by one rg_unexport of the same
   handle (a DLPack deleter calls it); lend as often as needed. Lending a view (rg_reshape
   of a pass tensor) pins the bytes it shares. A persistent tensor can be lent too: a
   parameter's borrower sees the optimizer's in-place updates (and rg_write, rg_load) as
   they run. The borrower may also write the bytes; its writes must be complete, or
   ordered before work queued on rg_stream(ctx), before the next barrier that reads them.
   rg_close frees lent memory regardless: a borrower must not touch it after rg_close. */
RG_API rg_status rg_export(rg_ctx *ctx, rg_tensor t, void *stream, rg_memref *out);
/* Ends one loan of t (one earlier rg_export of this handle); when a pool's last loan ends,
   its rg_step_begin or rg_reset works again. MISUSE if t has no open loan. Not a
   barrier. */
RG_API rg_status rg_unexport(rg_ctx *ctx, rg_tensor t);
/* A new pass tensor whose bytes are the caller's memory m->data: no copy, no arena bytes
   (rg_stats' pass_bytes and the pass budget do not count it), no gradient, ready to read.
   m->device must be the context's device (and m->device_index its GPU), m->dtype any
   rg_dtype, m->ndim and m->dims as for rg_input, m->data non-NULL and aligned to
   rg_import_align(ctx) bytes; otherwise RG_ERR_MISUSE naming what differs (a misaligned
   address: copy it first). On CUDA the address must be memory of the context's GPU.
   The producer's writes to the memory must be complete, or ordered before work queued on
   rg_stream(ctx), when rg_import is called (that is what DLPack's stream argument is for:
   pass rg_stream(ctx) to the producer). The tensor is read by every op, reshaped (a view
   of the same bytes), lent again by rg_export (pinning it as above), and rg_write writes
   the caller's memory; an op's output is never placed in it. Steps captured as CUDA
   graphs bake addresses in: a drain replays a captured graph only when every tensor it
   touches, an import included, is at the address of the capture, so importing another
   buffer each step gives right values (and replays once the same addresses recur, as
   with a rotating set of buffers). release(user) (release may be NULL) is called
   exactly once, when resgrad no longer touches the memory: when the pass pool is reset
   (rg_step_begin, rg_reset(RG_POOL_PASS)), after the barrier that runs every queued
   reader, or at rg_close (also after a failed drain). It must not call resgrad on ctx.
   A call that fails (RG_NONE) keeps nothing and never calls release: the caller still
   owns the memory. Until release, the memory must stay allocated and hold the tensor's
   value. */
RG_API rg_tensor rg_import(rg_ctx *ctx, const rg_memref *m, void (*release)(void *user),
                           void *user);
/* The context's CUDA stream (a cudaStream_t), on which every drain runs: the stream to
   name to a producer whose memory is imported, and for ordering other work after a
   drain's. NULL for the CPU and for a dry run (and a NULL ctx). Not a barrier. */
RG_API void *rg_stream(rg_ctx *ctx);
/* The alignment in bytes rg_import requires of memory, the same for every dtype: the
   widest access the device's kernels make from a tensor's start. 16 on CUDA (float4 and
   16-byte bf16 loads; the allocators of CUDA and the array libraries give 256), 4 on the
   CPU (an F32 or I32 element). A dry run's is its device's; 0 for a NULL ctx. */
RG_API size_t rg_import_align(rg_ctx *ctx);

/* ---- distributed (data-parallel) training ------------------------------------------
   One process per rank, each with its own context and the same model; each trains on its
   own share of the batch. rg_dist_init connects the ranks and gives every rank rank 0's
   parameters; from then on every rg_backward also records the averaging of the
   parameter gradients across the ranks (an all-reduce), so the optimizer steps of all
   ranks see the same gradients and the weights stay bit-identical on every rank.
   Nothing else changes: the same program runs on every rank (the launcher resgrad-run
   starts them), and rank 0 alone writes checkpoints (rg_save on another rank writes
   nothing).

   Transport. Rank 0 listens on the rendezvous address ("tcp:HOST:PORT"); every other
   rank connects to it, retrying until the timeout. On the CPU the all-reduce goes
   through rank 0: it adds the ranks' gradients in rank order (rank 0's + rank 1's +
   ...), divides by the world size and sends the result back, so every rank gets the
   same bits whatever the timing. On CUDA (a build with NCCL; without it a CUDA context
   of more than one rank gets RG_ERR_UNSUPPORTED) each rank has its own GPU (see
   rg_options.device_index: RG_LOCAL_RANK picks it when the context opens, before the
   parameters exist), rank 0 sends NCCL's unique id over the same rendezvous and every
   rank joins one NCCL communicator; each gradient bucket is averaged by NCCL (ncclAvg,
   the same bits on every rank) on the step's stream, captured in the step's CUDA graph
   like every other node. A CUDA context does this with one rank too, so one GPU runs
   the whole path; the average of one rank changes no bit. The parameters still go from
   rank 0 to the others through the host and the rendezvous connections, once.

   Buckets. rg_backward groups the gradients into buckets of about bucket_bytes in the
   order they are complete (a parameter's gradient is complete once the rule of every
   node that uses it has been recorded) and records one all-reduce node per bucket as
   soon as it is full, the last partial bucket at the end; every parameter's gradient is
   in exactly one bucket (also one this loss does not reach). On the CPU each bucket runs
   when the queue reaches it; with NCCL a bucket's communication overlaps the rest of
   the backward pass on the GPU. Each rg_backward averages: accumulating two backward passes
   before a step gives the average of their sums.

   Failures are errors, never hangs: every wait for a peer (connecting, each collective)
   is bounded by the timeout, and a peer that exits or fails (its connection closes) is
   seen at once. The drain that runs the all-reduce then fails with RG_ERR_IO and a
   message naming the rank and what to do; the optimizer step queued after it does not
   run, so this rank's weights stay those of the last complete step. A value computed
   before the all-reduce in that drain, the loss, still reads normally (as after any
   failure later in a drain), so check rg_error after the step's rg_item. This rank then
   closes all its connections, so its peers fail at once too, and every later
   rg_backward fails at once with the same message; only rg_dist_close (then
   rg_dist_init with a fresh rendezvous) or rg_close recovers. A rank that lags the
   others by more than the timeout (rank 0 writing a large checkpoint, say) fails them:
   raise the timeout then.
   On CUDA the GPU cannot tell waiting for a peer from computing, so a drain that holds
   all-reduces may last at most the timeout (raise it for steps that take longer); a
   peer whose connection closed cuts that to 5 s, after which the NCCL communicator is
   aborted (its waiting kernels stop) and the message names that rank. A step that fails
   on one rank only (an op's fault, such as a target out of range) still runs its
   all-reduces, which also tell every rank that one failed: the others' drains fail too
   with RG_ERR_FAILED naming that rank, no rank applies the step's update (weights stay
   equal everywhere) and, after rg_clear_error and rg_zero_grad, training can go on. A
   node that could not even be launched before an all-reduce (its peers would wait for
   it forever) closes this rank's communicator and connections as above.

   Every rank must record the same gradients in the same order: the same model, built
   before rg_dist_init (a parameter made later is averaged but not copied from rank 0),
   and the same calls to rg_backward. rg_dist_init checks the models agree (parameter
   names, dtypes and shapes) and each all-reduce that every rank sends the same bucket
   (RG_ERR_MISUSE on rank 0 naming the rank that differs). Dropout masks come from
   (seed, step, call), so ranks with the same seed draw the same masks (on different
   data). */

/* Options for rg_dist_init; a zero-initialised struct (or NULL) takes everything from the
   environment, which is what resgrad-run sets (RG_LOCAL_RANK too, which rg_open reads
   to choose a CUDA context's GPU: see rg_options.device_index). */
typedef struct rg_dist_options {
  int world_size;         /* ranks in all, >= 1; 0: rank and world size from env RG_RANK
                             and RG_WORLD_SIZE (both must be set, integers) */
  int rank;               /* this process's rank in [0, world_size), when world_size > 0 */
  const char *rendezvous; /* "tcp:HOST:PORT" where rank 0 listens (HOST a name or an
                             address, [v6] in brackets); NULL: env RG_RENDEZVOUS. Not
                             used with one rank. */
  double timeout;         /* seconds any wait for a peer may last; 0: env RG_DIST_TIMEOUT,
                             else 60 */
  size_t bucket_bytes;    /* gradient bytes per all-reduce; 0: 25 MiB (as PyTorch DDP) */
} rg_dist_options;

/* Makes ctx one rank of a data-parallel run: reads the settings (opt, then the
   environment), connects the ranks (rank 0 waits for all the others, each other rank
   connects to rank 0), checks that every rank built the same model and copies rank 0's
   parameters to every other rank. Call it after the model's parameters exist (MISUSE
   otherwise) and before training; it is a barrier (it waits for every rank). A world of
   one rank needs no rendezvous, connects nothing and changes no result (on CUDA with
   NCCL it makes a one-rank communicator and records the all-reduces). Errors:
   RG_ERR_MISUSE for a missing or bad setting (naming the variable or field), a second
   call without rg_dist_close, a model that differs between ranks; RG_ERR_UNSUPPORTED
   for a CUDA context of more than one rank in a build without NCCL; RG_ERR_IO when rank
   0 cannot listen on the address, a rank does not arrive within the timeout, a
   connection fails or NCCL cannot set up its communicator (two ranks on one GPU, say).
   On error the context is left as it was (not distributed) with every connection
   closed. Parameter bytes are counted as rg_read on rank 0 and rg_write on the others. */
RG_API rg_status rg_dist_init(rg_ctx *ctx, const rg_dist_options *opt);
/* Barrier (so queued all-reduces run), then closes this rank's connections (and NCCL
   communicator, waiting at most the timeout for the peers to do the same, else aborting
   it with RG_ERR_IO); ctx is a context of its own again. Returns the drain's status,
   else the close's. A context that is not distributed, or NULL, is fine (RG_OK).
   rg_close does it too. */
RG_API rg_status rg_dist_close(rg_ctx *ctx);
/* This context's rank and the number of ranks: 0 and 1 when it is not distributed (or
   NULL). Not barriers. */
RG_API int rg_dist_rank(const rg_ctx *ctx);
RG_API int rg_dist_world(const rg_ctx *ctx);

/* ---- statistics ---------------------------------------------------------------------- */

/* Where bytes cross between host and device. */
typedef enum rg_site {
  RG_SITE_INPUT,      /* rg_input (up) */
  RG_SITE_WRITE,      /* rg_write (up) */
  RG_SITE_PARAM_INIT, /* rg_param filling, rg_backward's seed once (up) */
  RG_SITE_OPTIM,      /* rg_optim_set_lr and optimizer state reads, rg_optim_lr (up/down) */
  RG_SITE_READ,       /* rg_read, rg_item, rg_ring_count (down) */
  RG_SITE_CHECKPOINT, /* rg_save (down), rg_load (up) */
  RG_SITE_RNG,        /* dropout's step counter, 8 bytes up in a step that uses dropout */
  RG_SITE_COUNT
} rg_site;
/* Why a drain ran. */
typedef enum rg_drain_reason {
  RG_DRAIN_READ, RG_DRAIN_WRITE, RG_DRAIN_SYNC, RG_DRAIN_STEP, RG_DRAIN_RESET,
  RG_DRAIN_CLOSE, RG_DRAIN_GUARD, RG_DRAIN_CHECK, RG_DRAIN_SAVE, RG_DRAIN_REASON_COUNT
} rg_drain_reason;

typedef struct rg_xfer { uint64_t count, bytes; } rg_xfer;
typedef struct rg_stats {
  rg_xfer up, down;                     /* totals host->device, device->host */
  rg_xfer up_site[RG_SITE_COUNT], down_site[RG_SITE_COUNT];
  uint64_t nodes_recorded, nodes_executed;
  uint64_t launches;                    /* kernel launches (CPU: kernels run) */
  uint64_t drains, drain_reason[RG_DRAIN_REASON_COUNT];
  uint64_t graph_captures, graph_replays, graph_misses;
  uint64_t cudnn_attention;              /* attention nodes (forward or backward) given to
                                           cuDNN's fused kernels: eager runs and graph
                                           captures, not replays (CUDA with cuDNN only) */
  char graph_miss_reason[160];          /* why the last drain was not replayed */
  size_t pass_bytes, pass_peak;         /* bytes held by tensors now / high-water mark */
  size_t persistent_bytes, persistent_peak;
  size_t queue_peak;                    /* most nodes queued at once */
  size_t device_bytes, device_peak;     /* bytes both pools hold from the device (their
                                           arenas' chunks, free space included) now /
                                           the sum of each pool's high-water mark */
} rg_stats;

/* Env RG_PROFILE=1: each node is timed and rg_close prints a table of time per op on
   stderr (calls, total ms, mean us, share), the most expensive first, over every drain but
   the context's first two. CUDA: drains run without graphs, each node timed by CUDA events
   (device time). CPU: each kernel timed by the host's monotonic clock (wall time, threads
   included). */

/* Copies the counters into *out. Not a barrier. rg_stats_reset zeroes every counter and
   restarts the pool peaks from the bytes held now. Neither touches the device. */
RG_API void rg_stats_get(const rg_ctx *ctx, rg_stats *out);
RG_API void rg_stats_reset(rg_ctx *ctx);

/* ---- gradient checking ------------------------------------------------------------- */

/* Builds a scalar loss from the context's parameters; called many times. */
typedef rg_tensor (*rg_loss_fn)(rg_ctx *ctx, void *user);
typedef struct rg_gradcheck_result {
  double max_abs_err;   /* worst |analytic - numeric| */
  double max_rel_err;   /* its error relative to max(|analytic|, |numeric|, 1e-3) */
  int param;            /* parameter index of the worst element */
  int64_t index;        /* flat element index within it */
  double analytic, numeric;
} rg_gradcheck_result;
/* Compares rg_backward against central differences (x +- eps, accumulated in double) for
   every element of every F32 parameter (at most max_elems per parameter, 0 = all; a
   larger parameter is sampled evenly). Parameters are restored exactly afterwards and
   gradients are zeroed. Runs many barriers. */
RG_API rg_status rg_gradcheck(rg_ctx *ctx, rg_loss_fn fn, void *user, double eps,
                              int64_t max_elems, rg_gradcheck_result *out);

#ifdef __cplusplus
}
#endif
#endif /* RESGRAD_H */
