/*
 * backend.c - the CPU backend: memory is host memory, transfers are memcpy, and a drain
 * runs each node's kernel in program order. It is the reference every other backend is
 * compared against.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cpu.h"
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef RG_HAVE_OPENBLAS
#include <pthread.h>
#endif

typedef rg_status (*rg_cpu_fn)(rg_kargs *k);
static const rg_cpu_fn kernels[] = {
#define RG_CPU_ROW(E, n, ...) [RG_OP_##E] = rg_cpu_##n,
    RG_OPS(RG_CPU_ROW)
#undef RG_CPU_ROW
};
_Static_assert(sizeof kernels / sizeof kernels[0] == RG_OP_COUNT, "every op has a CPU kernel");

#ifdef RG_HAVE_OPENBLAS
void openblas_set_num_threads(int n);
/* The context's pool is the only one that computes: OpenBLAS runs on the thread that
   calls it (matmul.c splits a product over the pool's threads, by the product's shape, so
   results do not depend on the thread count). Left alone it keeps a pool of its own, one
   thread per core, that spins after each call while the context's threads need those
   cores. It has one pool per process and resizing it races with BLAS calls in other
   threads (and, in OpenBLAS 0.3.21, with another resize), so the first CPU context opened
   while none is open sets it to one thread. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_users; /* open CPU contexts */
#endif

/* The backend's state: the context's threads, RG_PROFILE's table when wanted, and
   run_widened's block of F32 copies. */
typedef struct cpu_state {
  rg_cpu_pool *pool;
  int threads;
  bool profiled;
  rg_profile prof;
  /* The F32 copies of a node's BF16 tensors, carved from one block that is kept from node
     to node and grown only when a node needs more (freed at close): a fresh allocation
     per node would fault its pages in again at every widened node of every step. */
  float *wide;
  size_t wide_cap; /* floats */
} cpu_state;
static rg_profile *prof_of(rg_ctx *ctx) {
  cpu_state *s = ctx->be_state;
  return s->profiled ? &s->prof : NULL;
}

static rg_status cpu_open(rg_ctx *ctx) {
  int threads = ctx->opt.threads > 0 ? ctx->opt.threads : rg_cpu_default_threads();
  cpu_state *s = rg__calloc(ctx, 1, sizeof *s);
  if (!s) return rg__fail(ctx, RG_ERR_OOM, "rg_open", "out of host memory for the CPU backend");
  char why[160];
  s->pool = rg_cpu_pool_new(threads, why, sizeof why);
  if (!s->pool) {
    rg__free(ctx, s);
    return rg__fail(ctx, RG_ERR_OOM, "rg_open", "%s", why);
  }
  s->threads = threads;
  s->profiled = rg__profile_wanted();
  ctx->be_state = s;
  snprintf(ctx->devname, sizeof ctx->devname, "cpu (%d threads)", threads);
#ifdef RG_HAVE_OPENBLAS
  pthread_mutex_lock(&blas_lock);
  if (blas_users++ == 0) openblas_set_num_threads(1);
  pthread_mutex_unlock(&blas_lock);
#endif
  return RG_OK;
}
static void cpu_close(rg_ctx *ctx) {
  cpu_state *s = ctx->be_state;
  if (!s) return;
#ifdef RG_HAVE_OPENBLAS
  pthread_mutex_lock(&blas_lock);
  blas_users--;
  pthread_mutex_unlock(&blas_lock);
#endif
  if (s->profiled) rg__profile_print(&s->prof, "CPU time (wall clock)");
  rg_cpu_pool_free(s->pool);
  rg__free(ctx, s->wide);
  rg__free(ctx, s);
  ctx->be_state = NULL;
}

/* Arena chunks are aligned like device memory so kernels may use aligned vector loads. */
static void *cpu_alloc(rg_ctx *ctx, size_t bytes) {
  if (!rg__alloc_tick(ctx)) return NULL; /* failure injection */
  return aligned_alloc(RG_ALIGN, (bytes + RG_ALIGN - 1) / RG_ALIGN * RG_ALIGN + RG_ALIGN);
}
static void cpu_free(rg_ctx *ctx, void *p) {
  (void)ctx;
  free(p);
}
static rg_status cpu_copy(rg_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes) memcpy(dst, src, bytes);
  return RG_OK;
}
static rg_status cpu_zero(rg_ctx *ctx, void *dst, size_t bytes) {
  (void)ctx;
  if (bytes) memset(dst, 0, bytes);
  return RG_OK;
}

void rg_cpu_bcast_strides(const rg_tv *x, const rg_tv *out, int skip, int64_t st[RG_MAX_DIMS]) {
  int64_t s = 1;
  for (int j = 0; j < skip; j++) s *= x->dims[x->ndim - 1 - j];
  int lead = out->ndim - x->ndim;
  for (int j = out->ndim - 1 - skip; j >= 0; j--) {
    int xa = j - lead;
    st[j] = xa < 0 || x->dims[xa] == 1 ? 0 : s;
    if (xa >= 0) s *= x->dims[xa];
  }
}

int64_t rg_cpu_bcast_offset(const rg_tv *out, int skip, const int64_t st[RG_MAX_DIMS],
                            int64_t r) {
  int64_t off = 0;
  for (int j = out->ndim - 1 - skip; j >= 0; j--) {
    off += (r % out->dims[j]) * st[j];
    r /= out->dims[j];
  }
  return off;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* check_finite: the first NaN or Inf among a node's float outputs. */
static rg_status check_finite(const rg_kargs *k, char *msg, size_t msgcap) {
  for (int j = 0; j < k->node->nout; j++) {
    const rg_tv *o = &k->out[j];
    float v;
    int64_t e = o->p ? rg__nonfinite(o->p, o->dtype, o->n, &v) : -1;
    if (e >= 0) {
      snprintf(msg, msgcap, "output %d element %lld is %s (check_finite is on: this is the "
               "first op whose output is not finite) — look at its inputs and arguments, "
               "or lower the learning rate", j, (long long)e, rg__nonfinite_name(v));
      return RG_ERR_NONFINITE;
    }
  }
  return RG_OK;
}

/* Below this many elements a BF16 tensor is widened or rounded on the calling thread. */
#define WIDEN_PAR_MIN 32768

/* Runs an F32 kernel on a node with BF16 tensors (bf16 activations, ops.h): each BF16
   input is widened into an F32 copy (exact: a bf16 is the top half of an f32), each BF16
   output is computed in F32 and rounded once (to nearest even), so a BF16 result is the
   F32 one rounded. The in-place ops' targets are F32, never copied. k is as given again
   on return. */
typedef struct {
  uint16_t *h;
  float *w;
} widen_job;
static void widen_range(void *a, int64_t lo, int64_t hi, int slot) {
  const widen_job *j = a;
  (void)slot;
  for (int64_t e = lo; e < hi; e++) j->w[e] = rg_bf16_to_f32(j->h[e]);
}
static void round_range(void *a, int64_t lo, int64_t hi, int slot) {
  const widen_job *j = a;
  (void)slot;
  for (int64_t e = lo; e < hi; e++) j->h[e] = rg_f32_to_bf16(j->w[e]);
}

/* Each copy starts on a 64-byte boundary of the block (16 floats), as arena tensors are
   aligned, so vector loads of a row start as they would on F32 tensors. */
static size_t wide_len(int64_t n) { return ((size_t)n + 15) / 16 * 16; }

static rg_status run_widened(rg_cpu_fn fn, rg_kargs *k) {
  enum { N = RG_MAX_IN + RG_MAX_OUT };
  cpu_state *s = k->ctx->be_state;
  float *tmp[N];
  rg_tv *tv[N], saved[N];
  bool out[N];
  int n = 0, nt = nthreads(k);
  size_t need = 16; /* one spare block, so the block exists even when every copy is empty */
  for (int j = 0; j < N; j++) {
    rg_tv *v = j < RG_MAX_IN ? &k->in[j] : &k->out[j - RG_MAX_IN];
    if (v->p && v->dtype == RG_BF16) need += wide_len(v->n);
  }
  if (need > s->wide_cap) {
    rg__free(k->ctx, s->wide);
    s->wide_cap = 0;
    s->wide = rg__malloc(k->ctx, need * sizeof *s->wide);
    if (!s->wide) {
      snprintf(k->msg, k->msgcap, "out of host memory for the F32 copy of a BF16 tensor "
               "(%llu elements in all): free host memory or use smaller batches",
               (unsigned long long)need);
      return RG_ERR_OOM;
    }
    s->wide_cap = need;
  }
  float *w = s->wide;
  for (int j = 0; j < N; j++) {
    rg_tv *v = j < RG_MAX_IN ? &k->in[j] : &k->out[j - RG_MAX_IN];
    if (!v->p || v->dtype != RG_BF16) continue;
    saved[n] = *v, tv[n] = v, tmp[n] = w, out[n] = j >= RG_MAX_IN;
    if (!out[n]) rg_cpu_for(v->n, v->n > WIDEN_PAR_MIN ? nt : 1, widen_range, &(widen_job){v->p, w});
    v->p = w, v->dtype = RG_F32;
    w += wide_len(v->n);
    n++;
  }
  rg_status st = fn(k);
  for (int i = 0; i < n; i++) {
    *tv[i] = saved[i];
    if (st == RG_OK && out[i])
      rg_cpu_for(saved[i].n, saved[i].n > WIDEN_PAR_MIN ? nt : 1, round_range,
                 &(widen_job){saved[i].p, tmp[i]});
  }
  return st;
}

static bool has_bf16(const rg_kargs *k) {
  for (int j = 0; j < RG_MAX_IN; j++)
    if (k->in[j].p && k->in[j].dtype == RG_BF16) return true;
  for (int j = 0; j < RG_MAX_OUT; j++)
    if (k->out[j].p && k->out[j].dtype == RG_BF16) return true;
  return false;
}

static rg_status cpu_execute(rg_ctx *ctx, size_t first, size_t last, size_t *failed,
                             rg_status *soft, char *msg, size_t msgcap, rg_readback *rb) {
  rg_kargs k;
  cpu_state *s = ctx->be_state;
  rg_profile *prof = prof_of(ctx);
  bool timed = prof && rg__profile_counts(prof); /* not the first drains (profile.c) */
  rg_cpu_pool *outer = rg_cpu_pool_use(s->pool); /* the kernels' rg_cpu_for */
  rg_status st = RG_OK;
  for (size_t i = first; i < last && st == RG_OK; i++) {
    const rg_node *n = &ctx->nodes[i];
    memset(&k, 0, sizeof k);
    k.ctx = ctx;
    k.node = n;
    k.threads = s->threads;
    k.msg = msg;
    k.msgcap = msgcap;
    for (int j = 0; j < n->nin; j++) rg__tv(ctx, n->in[j], &k.in[j]);
    for (int j = 0; j < n->nout; j++) rg__tv(ctx, n->out[j], &k.out[j]);
    double ts = ctx->trace ? rg__trace_now(ctx) : 0, t0 = timed ? now_ms() : 0;
    st = !(rg_optab[n->op].flags & RG_F_BF16) && has_bf16(&k) ? run_widened(kernels[n->op], &k)
                                                               : kernels[n->op](&k);
    if (timed) rg__profile_add(prof, n->op, now_ms() - t0);
    if (ctx->trace) rg__trace_op(ctx, i, ts, rg__trace_now(ctx) - ts);
    ctx->st.launches++;
    if (st == RG_OK && ctx->opt.check_finite) st = check_finite(&k, msg, msgcap);
    if (st != RG_OK) {
      *failed = i;
      break;
    }
    if (k.soft != RG_OK && *soft == RG_OK) {
      *soft = k.soft;
      *failed = i;
    }
  }
  rg_cpu_pool_use(outer);
  if (st != RG_OK) return st;
  if (rb) {
    memcpy(rb->dst, rb->src, rb->bytes);
    rb->done = true;
  }
  return RG_OK;
}

static rg_status cpu_sync(rg_ctx *ctx) {
  (void)ctx;
  return RG_OK;
}

const rg_backend rg_cpu_backend = {
    .name = "cpu",
    .chunk_min = (size_t)1 << 20,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .execute = cpu_execute,
    .sync = cpu_sync,
    .meminfo = rg_cpu_meminfo,
    /* The kernels read elements through their own types and no wider (the GEMM packs its
       operands; vectors are loaded by memcpy), so an element's alignment is enough: the
       widest element, an F32 or I32. */
    .import_align = 4,
};
