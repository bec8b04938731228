/*
 * fuzz_api.c - the API fuzzer: the input bytes are a random program of resgrad calls, and
 * the contract of resgrad.h (docs/ARCHITECTURE.md, "The data contract") is checked after every call.
 *
 * Input format. The first 16 bytes configure rg_open (budgets, check modes, seed, ...).
 * Then come 16-byte records, one call each: byte 0 picks the call family (OP_* below,
 * modulo OP_COUNT), bytes 1..15 are its arguments, consumed in order; a call that needs
 * more draws them from a generator seeded by those 15 bytes. Fixed-size records keep a
 * mutated program aligned and make seeds easy to write (tests/fuzz/gen_corpus_api.py).
 *
 * The program: a CPU context with small budgets; parameters and inputs of random shapes
 * and dtypes (zero-sized and mismatched ones included); every public op with random
 * axes, shapes and scalars, on live, stale, failed and forged handles; rg_backward on
 * anything (non-scalars included); rg_step_begin / rg_reset / rg_sync anywhere; reads and
 * writes with wrong sizes; optimizers; clipping; labels; check modes; metadata;
 * save / load / corrupted files; gradcheck with a loss that fails on demand; the layers
 * and GPT of resgrad_nn.h; injected host-allocation failures (ctx->alloc_fail_at); calls
 * with a NULL context; rg_close.
 *
 * Invariants, checked after every call (a violation prints what and where, then aborts,
 * which libFuzzer and ctest report as a failure):
 *  - no crash, no sanitizer report, no leak at rg_close (ASan/LSan/UBSan; valgrind for the
 *    plain replay build);
 *  - rg_error set => rg_errmsg non-empty; rg_error clear => rg_errmsg "";
 *  - a call that fails (status != RG_OK, RG_NONE or NULL where it produces something)
 *    leaves the sticky error set; the first error and its message are never replaced;
 *  - a stale or forged handle is refused with RG_ERR_STALE / RG_ERR_MISUSE (exactly which,
 *    when it is the first operand checked), or with FAILED / the earlier sticky error,
 *    and the call has no effect; rg_is_live and rg_generation agree with that;
 *  - a handle an op returns is live, in the pass pool, and its shape queries agree;
 *  - pool bytes never exceed the budgets; transfer and drain counters add up;
 *  - rg_read/rg_item with a wrong size or dtype is MISUSE and does not touch the buffer
 *    (which is exactly the size passed, so an overrun is an ASan report);
 *  - a pass value reads back the same bytes every time (computed once, never recomputed)
 *    and exactly what rg_write wrote into it; rg_write of the right size succeeds;
 *  - a parameter that no call may change (the "sentinel": never written, never in an
 *    optimizer that stepped; rg_gradcheck and failed rg_load must leave it alone) reads
 *    back bit-identical; a successful rg_load gives it the value it had when the file
 *    was saved;
 *  - rg_save followed by rg_load of the same model succeeds (metadata with any bytes
 *    round-trips through the JSON header);
 *  - rg_label_push adds exactly one level and rg_label_pop removes one (a push that runs
 *    out of memory counts too, so that its pop does not remove the caller's label); any
 *    other call leaves the label stack as it was;
 *  - rg_param adds exactly one parameter on success and none on failure;
 *  - a failed rg_save leaves no temporary file behind.
 *
 * Environment: RG_FUZZ_VERBOSE=1 prints every call and its result (to turn a crashing
 * input into a readable reproduction); RG_FUZZ_TOLERATE="tag[:call],..." downgrades the
 * named invariants to a note, to keep fuzzing past a known bug; TMPDIR places the
 * per-process directory that holds the checkpoint file (default /dev/shm, else /tmp).
 */
#include "core/internal.h" /* white-box: alloc_fail_at, check modes, pool generations */
#include "resgrad_nn.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Call families; a record's first byte modulo OP_COUNT. gen_corpus_api.py reads this
   list, so keep it one name per line. */
enum {
  OP_INPUT,
  OP_PARAM,
  OP_UNARY,
  OP_BINARY,
  OP_REDUCE,
  OP_MATMUL,
  OP_LINEAR,
  OP_NORM,
  OP_EMBEDDING,
  OP_ATTENTION,
  OP_XENT,
  OP_MSE,
  OP_RESHAPE,
  OP_PERMUTE,
  OP_SLICE,
  OP_CONCAT,
  OP_BACKWARD,
  OP_GRAD,
  OP_ZERO_GRAD,
  OP_STEP_BEGIN,
  OP_RESET,
  OP_SYNC,
  OP_READ,
  OP_ITEM,
  OP_WRITE,
  OP_QUERY,
  OP_PARAMS,
  OP_OPTIM_NEW,
  OP_OPTIM_STEP,
  OP_OPTIM_LR,
  OP_OPTIM_FREE,
  OP_CLIP,
  OP_LABEL,
  OP_MODE,
  OP_SAVE,
  OP_LOAD,
  OP_ROUNDTRIP,
  OP_CORRUPT,
  OP_META,
  OP_STATS,
  OP_CLEAR,
  OP_RAISE,
  OP_FORGE,
  OP_SENTINEL,
  OP_GRADCHECK,
  OP_ALLOC_FAIL,
  OP_NN,
  OP_GPT,
  OP_NULL_CTX,
  OP_TRAIN_STEP,
  OP_COUNT
};

#define NENT 40     /* handles the program holds */
#define NOPT 4      /* optimizers */
#define NHASH 64    /* remembered contents of pass values */
#define NMETA 8     /* metadata the model of rg_meta tracks */
#define MAXCALLS 300
#define SMAX 64     /* elements of the sentinel */
#define HEADER 16
#define RECORD 16

typedef struct shp { int dtype, ndim; int64_t d[RG_MAX_DIMS]; } shp;

typedef struct ent {
  rg_tensor h;
  int tracked; /* returned by the library (else forged) */
  int pool;
  uint64_t gen; /* rg_generation of its pool when it was returned */
  shp s;        /* its shape then (tracked only) */
} ent;

typedef struct optent {
  rg_optim *o;
  uint64_t pgen; /* persistent generation it was made in */
  int covers;    /* made while the sentinel existed: its updates may change it */
} optent;

typedef struct kv { char k[300], v[1100]; } kv;

typedef struct fz {
  rg_ctx *ctx;
  const uint8_t *p;
  size_t n, pos;
  uint8_t rec[RECORD - 1];
  int ri;
  uint64_t rng;
  int ncalls;
  ent e[NENT];
  int ne, next;
  optent opt[NOPT];
  struct { uint64_t id, hash; } hs[NHASH];
  int nh;
  size_t pass_budget, pers_budget;
  /* the sentinel parameter */
  rg_tensor S;
  uint64_t Sgen;
  int64_t Sn;
  int Sclean; /* Sexp holds its value (else: learn it at the next read) */
  float Sexp[SMAX];
  /* what the checkpoint file holds (valid while it is as rg_save wrote it) */
  int fvalid, fhasS;
  int64_t fSn;
  float fS[SMAX];
  /* the metadata as set (a model of rg_meta_set / rg_meta_get) */
  kv meta[NMETA], fmeta[NMETA];
  int nmeta, meta_unknown, nfmeta, fmeta_unknown;
  /* layers of resgrad_nn.h made successfully, and a GPT */
  rg_nn_linear lin;
  rg_nn_embedding emb;
  rg_nn_layernorm ln;
  rg_nn_mlp mlp;
  rg_nn_attention att;
  rg_nn_block blk;
  int have_lin, have_emb, have_ln, have_mlp, have_att, have_blk;
  int64_t lin_in, emb_num, ln_dim, mlp_w, att_w, blk_w;
  rg_gpt *gpt;
  uint64_t gpt_pgen;
  /* the call being checked */
  const char *call;
  rg_status err0;
  char msg0[sizeof ((rg_ctx *)0)->errmsg];
  int depth0;        /* label stack depth before the call */
  int inj;           /* an injected allocation failure is pending: OOM may come first */
  int bad;           /* an operand is stale, forged or a missing required one */
  int bad_opt;       /* the optimizer's parameters were freed (rg_reset) */
  int composite;     /* several ops: an earlier one may fail first, with any error */
  int precise;       /* operand 1 is the first thing the call checks */
  rg_status expect;  /* what operand 1 must be refused with */
  char tolerated[256]; /* tags excused in this program (RG_FUZZ_TOLERATE) */
} fz;

/* ---- reporting --------------------------------------------------------------------- */

static int verbose = -1;
static const char *tolerate;
static char tmpdir[512], ckpt[600];

static int tolerated(const char *tag, const char *call) {
  if (!tolerate || !*tolerate) return 0;
  char full[160];
  snprintf(full, sizeof full, "%s:%s", tag, call ? call : "?");
  const char *p = tolerate;
  while (*p) {
    const char *q = strchr(p, ',');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    if ((n == strlen(tag) && !strncmp(p, tag, n)) || (n == strlen(full) && !strncmp(p, full, n)))
      return 1;
    p += n + (q != NULL);
  }
  return 0;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void violation(fz *F, const char *tag, const char *fmt, ...) {
  /* A tolerated violation also excuses its consequences later in the same program. */
  if (tolerated(tag, F->call) || (F->tolerated[0] && strstr(F->tolerated, tag))) {
    if (verbose) fprintf(stderr, "fuzz_api: tolerated [%s] in %s\n", tag, F->call);
    size_t n = strlen(F->tolerated);
    if (!strstr(F->tolerated, tag) && n + strlen(tag) + 2 < sizeof F->tolerated)
      snprintf(F->tolerated + n, sizeof F->tolerated - n, "%s,", tag);
    return;
  }
  fprintf(stderr, "\nfuzz_api: contract violated [%s] in %s (call %d): ", tag,
          F->call ? F->call : "?", F->ncalls);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (F->ctx)
    fprintf(stderr, "\n  rg_error: %s\n  rg_errmsg: \"%s\"\n  error before the call: %s "
            "\"%s\"\n", rg_status_str(rg_error(F->ctx)), rg_errmsg(F->ctx),
            rg_status_str(F->err0), F->msg0);
  fprintf(stderr, "  (RG_FUZZ_VERBOSE=1 replays it call by call; RG_FUZZ_TOLERATE=%s:%s "
          "skips this check)\n", tag, F->call ? F->call : "?");
  abort();
}

/* ---- bytes --------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Starts the next record; 0 at the end of the input. */
static int next_record(fz *F) {
  if (F->pos >= F->n) return 0;
  int op = F->p[F->pos++];
  uint64_t seed = 0x5eed;
  for (int i = 0; i < RECORD - 1; i++) {
    F->rec[i] = F->pos < F->n ? F->p[F->pos++] : 0;
    seed = seed * 1099511628211ull ^ F->rec[i];
  }
  F->ri = 0;
  F->rng = seed;
  return op + 1;
}

static uint8_t u8(fz *F) {
  if (F->ri < RECORD - 1) return F->rec[F->ri++];
  return (uint8_t)(splitmix(&F->rng) >> 56);
}
static uint32_t u32(fz *F) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | u8(F);
  return v;
}
static uint64_t u64(fz *F) { return (uint64_t)u32(F) << 32 | u32(F); }
static int below(fz *F, int n) { return n <= 1 ? 0 : u8(F) % n; }

/* A float for scalar arguments: mostly ordinary, sometimes extreme or not finite. */
static float fval(fz *F) {
  static const float t[] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, -2.0f, 0.1f, 3.0f, 1e-3f,
                            -0.0f, 1e-8f, 1e30f, -1e30f, 3.4e38f, 1e-45f, 100.0f,
                            0.999f, 7.0f, -0.5f, 65504.0f};
  uint8_t b = u8(F);
  if (b < 232) return t[b % (sizeof t / sizeof *t)];
  if (b < 240) return NAN;
  if (b < 246) return b & 1 ? INFINITY : -INFINITY;
  uint32_t bits = u32(F);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static int64_t dimval(fz *F) {
  static const int64_t t[16] = {1, 2, 3, 4, 1, 2, 3, 4, 0, 5, 6, 7, 8, 1, 2, 16};
  return t[u8(F) & 15];
}

static int64_t numel_of(const shp *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->d[i];
  return n;
}
static size_t esize(int dt) { return dt == RG_BF16 ? 2 : 4; }

static shp rand_shape(fz *F, int dtype) {
  shp s = {dtype, below(F, 5), {0}};
  for (int i = 0; i < s.ndim; i++) s.d[i] = dimval(F);
  return s;
}

static uint64_t fnv(const void *p, size_t n) { return rg__fnv1a(RG_FNV_START, p, n); }

/* n elements of dtype for an upload: a style byte picks zeros, ones, small uniform
   values, values with NaN/Inf/huge among them, a ramp, or (I32) indices in [0, range)
   with an occasional one outside. The caller frees the buffer. */
static void *make_values(fz *F, int dtype, int64_t n, int64_t range) {
  size_t bytes = (size_t)n * esize(dtype);
  uint8_t *buf = malloc(bytes ? bytes : 1);
  if (!buf) abort();
  int style = below(F, 6);
  uint64_t r = u32(F) | (uint64_t)1 << 40;
  for (int64_t i = 0; i < n; i++) {
    uint64_t x = splitmix(&r);
    float f;
    switch (style) {
    case 0: f = 0; break;
    case 1: f = 1; break;
    case 2: f = (float)((double)(x >> 11) / 9007199254740992.0 * 2 - 1); break;
    case 3: {
      static const float sp[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0.0f, -0.0f,
                                 1e-40f};
      f = (x & 31) == 0 ? sp[(x >> 5) & 7]
                        : (float)((double)(x >> 11) / 9007199254740992.0 * 6 - 3);
      break;
    }
    case 4: f = (float)i * 0.25f - 1.0f; break;
    default: f = (float)((int)(x % 5) - 2); break;
    }
    if (dtype == RG_I32) {
      int32_t v;
      if (range > 0) /* mostly in range; now and then just below 0 or at/above range */
        v = (x & 63) == 0 ? (int32_t)((x >> 8) % 7) - 3 + (int32_t)(range * ((x >> 16) & 1))
                          : (int32_t)((x >> 8) % (uint64_t)range);
      else
        v = style == 3 ? (int32_t)(uint32_t)(x >> 13) : (int32_t)((x >> 8) % 11) - 3;
      memcpy(buf + 4 * i, &v, 4);
    } else if (dtype == RG_BF16) {
      uint16_t h = rg_f32_to_bf16(f);
      memcpy(buf + 2 * i, &h, 2);
    } else {
      memcpy(buf + 4 * i, &f, 4);
    }
  }
  return buf;
}

/* ---- the handle oracle ------------------------------------------------------------- */

enum { C_NONE, C_LIVE, C_STALE, C_BAD };

/* What the library must make of t, from the documented layout of a handle (pool << 63 |
   generation << 32 | slot + 1) and the pools' state. */
static int classify(fz *F, rg_tensor t) {
  if (!t.id) return C_NONE;
  int pool = (int)(t.id >> 63);
  uint64_t gen = (t.id >> 32) & 0x7fffffffu, slot = t.id & 0xffffffffu;
  const rg_pool_s *p = &F->ctx->pool[pool];
  uint64_t now = p->gen & 0x7fffffffu;
  if (gen < now) return C_STALE;
  if (gen > now || slot == 0 || slot > p->n) return C_BAD;
  return C_LIVE;
}

static int pool_of(rg_tensor t) { return (int)(t.id >> 63); }

/* ---- the per-call checks ------------------------------------------------------------ */

/* Label stack depth: pushes on the stack and pushes counted off it (out of memory). */
static int depth(const rg_ctx *ctx) { return ctx->lsp + ctx->lskip; }

static void pre(fz *F, const char *call) {
  F->call = call;
  F->err0 = rg_error(F->ctx);
  snprintf(F->msg0, sizeof F->msg0, "%s", rg_errmsg(F->ctx));
  F->depth0 = depth(F->ctx);
  F->inj = F->ctx->alloc_fail_at > F->ctx->alloc_count;
  F->bad = F->bad_opt = F->composite = 0;
  F->precise = 1;
  F->expect = RG_OK;
}

/* Notes operand k of the call: a stale, forged or (when required) missing one must make
   the call fail. */
static void note(fz *F, rg_tensor t, int k, int optional) {
  int c = classify(F, t);
  if (c == C_LIVE || (c == C_NONE && optional)) {
    if (k == 1) F->precise = 0; /* the call goes on to check other things */
    return;
  }
  F->bad = 1;
  if (k == 1 && F->precise)
    F->expect = c == C_STALE ? RG_ERR_STALE
              : c == C_BAD   ? RG_ERR_MISUSE
              : F->err0 != RG_OK ? F->err0 : RG_ERR_MISUSE;
  if (k == 1) F->precise = 0;
}

static void check_stats(fz *F) {
  rg_stats s;
  rg_stats_get(F->ctx, &s);
  if (F->pass_budget && s.pass_bytes > F->pass_budget)
    violation(F, "budget", "pass pool holds %zu bytes, budget %zu", s.pass_bytes, F->pass_budget);
  if (F->pers_budget && s.persistent_bytes > F->pers_budget)
    violation(F, "budget", "persistent pool holds %zu bytes, budget %zu", s.persistent_bytes,
              F->pers_budget);
  if (s.pass_peak < s.pass_bytes || s.persistent_peak < s.persistent_bytes)
    violation(F, "stats", "a pool peak is below the bytes it holds");
  uint64_t uc = 0, ub = 0, dc = 0, db = 0, dr = 0;
  for (int i = 0; i < RG_SITE_COUNT; i++) {
    uc += s.up_site[i].count;
    ub += s.up_site[i].bytes;
    dc += s.down_site[i].count;
    db += s.down_site[i].bytes;
  }
  for (int i = 0; i < RG_DRAIN_REASON_COUNT; i++) dr += s.drain_reason[i];
  if (uc != s.up.count || ub != s.up.bytes || dc != s.down.count || db != s.down.bytes)
    violation(F, "stats", "transfers by site (up %llu/%llu, down %llu/%llu) do not add up to "
              "the totals (up %llu/%llu, down %llu/%llu)", (unsigned long long)uc,
              (unsigned long long)ub, (unsigned long long)dc, (unsigned long long)db,
              (unsigned long long)s.up.count, (unsigned long long)s.up.bytes,
              (unsigned long long)s.down.count, (unsigned long long)s.down.bytes);
  if (dr != s.drains)
    violation(F, "stats", "drains by reason add up to %llu, not %llu", (unsigned long long)dr,
              (unsigned long long)s.drains);
}

/* After every call on the context: failed says whether the call reported a failure. */
static void post(fz *F, int failed) {
  rg_ctx *ctx = F->ctx;
  rg_status e = rg_error(ctx);
  const char *m = rg_errmsg(ctx);
  if (verbose)
    fprintf(stderr, "fuzz_api: %4d %-26s %s%s%s\n", F->ncalls, F->call,
            failed ? "failed" : "ok", e != RG_OK ? " / sticky " : "",
            e != RG_OK ? rg_status_str(e) : "");
  if (!m) violation(F, "errmsg", "rg_errmsg returned NULL");
  else if (e != RG_OK && !*m) violation(F, "emptymsg", "rg_error is %s but rg_errmsg is empty",
                                        rg_status_str(e));
  else if (e == RG_OK && *m) violation(F, "errmsg", "no error is set but rg_errmsg is \"%s\"", m);
  if (e > 0 || e < RG_ERR_FAILED) violation(F, "status", "rg_error is %d", (int)e);
  if (F->err0 != RG_OK && (e != F->err0 || (m && strcmp(m, F->msg0))))
    violation(F, "sticky", "the first error (%s \"%s\") was replaced", rg_status_str(F->err0),
              F->msg0);
  if (failed && e == RG_OK) violation(F, "nomsg", "the call failed but set no error");
  if (F->bad) {
    if (!failed) violation(F, "bad-handle", "a stale, forged or missing operand was accepted");
    if (e != RG_ERR_STALE && e != RG_ERR_MISUSE && e != RG_ERR_FAILED && e != F->err0 &&
        !F->composite)
      violation(F, "bad-handle", "a bad operand gave %s", rg_status_str(e));
    if (F->expect != RG_OK && F->err0 == RG_OK && e != F->expect)
      violation(F, "bad-handle-kind", "operand 1 should be refused with %s, got %s",
                rg_status_str(F->expect), rg_status_str(e));
  }
  if (depth(ctx) != F->depth0 && strcmp(F->call, "rg_label_push") &&
      strcmp(F->call, "rg_label_pop"))
    violation(F, "label-leak", "the label stack went from %d to %d entries", F->depth0,
              depth(ctx));
  check_stats(F);
}

/* post() for a call returning a status; also checks the status names the refusal. */
static void post_st(fz *F, rg_status st) {
  if (st > 0 || st < RG_ERR_FAILED) violation(F, "status", "returned %d", (int)st);
  if (F->bad && F->expect != RG_OK && st != F->expect && st != F->err0)
    violation(F, "bad-handle-kind", "returned %s, operand 1 should give %s", rg_status_str(st),
              rg_status_str(F->expect));
  /* A call that fails for its own reason says so, not what an earlier call said. */
  if (F->bad_opt && st != RG_ERR_STALE && st != RG_ERR_MISUSE)
    violation(F, "status-is-sticky", "a stale optimizer was refused with %s (the earlier "
              "sticky error), not RG_ERR_STALE or RG_ERR_MISUSE", rg_status_str(st));
  post(F, st != RG_OK);
}

/* ---- the table of handles ------------------------------------------------------------ */

static void put(fz *F, ent x) {
  if (F->ne < NENT) F->e[F->ne++] = x;
  else F->e[F->next++ % NENT] = x;
}

/* Records a handle the library returned; checks it is live and its queries agree. */
static void track(fz *F, rg_tensor h, int pass_only) {
  if (!h.id) return;
  rg_ctx *ctx = F->ctx;
  ent x = {h, 1, pool_of(h), 0, {0, 0, {0}}};
  x.gen = rg_generation(ctx, (rg_pool)x.pool);
  if (classify(F, h) != C_LIVE || !rg_is_live(ctx, h))
    violation(F, "result", "the returned handle 0x%016llx is not live", (unsigned long long)h.id);
  if (((h.id >> 32) & 0x7fffffffu) != (x.gen & 0x7fffffffu))
    violation(F, "result", "the handle's generation is not its pool's (%llu)",
              (unsigned long long)x.gen);
  if (pass_only && x.pool != RG_POOL_PASS)
    violation(F, "result-pool", "an op result is in the persistent pool");
  rg_status e0 = rg_error(ctx);
  x.s.ndim = rg_ndim(ctx, h);
  x.s.dtype = rg_dtype_of(ctx, h);
  int64_t n = 1;
  for (int i = 0; i < x.s.ndim && i < RG_MAX_DIMS; i++) n *= (x.s.d[i] = rg_dim(ctx, h, i));
  if (x.s.ndim < 0 || x.s.ndim > RG_MAX_DIMS || x.s.dtype < RG_F32 || x.s.dtype > RG_I32 ||
      rg_numel(ctx, h) != n || rg_error(ctx) != e0)
    violation(F, "query", "shape queries of a live handle disagree or fail (ndim %d, dtype %d, "
              "numel %lld vs %lld)", x.s.ndim, x.s.dtype, (long long)rg_numel(ctx, h),
              (long long)n);
  put(F, x);
}

/* A live handle's shape (from the table when tracked, else asked). */
static int shape_of(fz *F, rg_tensor t, shp *s) {
  if (classify(F, t) != C_LIVE) return 0;
  for (int i = 0; i < F->ne; i++)
    if (F->e[i].h.id == t.id && F->e[i].tracked) {
      *s = F->e[i].s;
      return 1;
    }
  rg_status e0 = rg_error(F->ctx);
  s->ndim = rg_ndim(F->ctx, t);
  s->dtype = rg_dtype_of(F->ctx, t);
  for (int i = 0; i < s->ndim; i++) s->d[i] = rg_dim(F->ctx, t, i);
  if (rg_error(F->ctx) != e0) violation(F, "query", "a query of a live handle failed");
  return 1;
}

/* Checks the bookkeeping of a tracked entry against the library's view. */
static void check_entry(fz *F, const ent *x) {
  int c = classify(F, x->h);
  if (x->tracked) {
    int live = rg_generation(F->ctx, (rg_pool)x->pool) == x->gen;
    if (live != (c == C_LIVE))
      violation(F, "generation", "handle 0x%016llx from generation %llu: pool now %llu but "
                "the handle is %s", (unsigned long long)x->h.id, (unsigned long long)x->gen,
                (unsigned long long)rg_generation(F->ctx, (rg_pool)x->pool),
                c == C_LIVE ? "live" : "not live");
  }
  if (rg_is_live(F->ctx, x->h) != (c == C_LIVE))
    violation(F, "is_live", "rg_is_live(0x%016llx) is %d", (unsigned long long)x->h.id,
              rg_is_live(F->ctx, x->h));
}

static rg_tensor forge(fz *F) {
  uint64_t id;
  const ent *base = F->ne ? &F->e[u8(F) % F->ne] : NULL;
  uint64_t b = base ? base->h.id : (uint64_t)1 << 32 | 1;
  switch (below(F, 10)) {
  case 0: id = u64(F); break;
  case 1: id = b + ((uint64_t)1 << 32); break;               /* a future generation */
  case 2: id = b - ((uint64_t)1 << 32); break;               /* an earlier one */
  case 3: id = b + 1 + u8(F); break;                         /* a slot past the table */
  case 4: id = b ^ (uint64_t)1 << 63; break;                 /* the other pool */
  case 5: id = b & ~(uint64_t)0xffffffffu; break;            /* slot 0 */
  case 6: id = b & 0xffffffffu; break;                       /* generation 0 */
  case 7: id = UINT64_MAX; break;
  case 8: id = (uint64_t)1 << 63 | (uint64_t)0x7fffffff << 32 | 1; break;
  default: id = b; break;                                    /* a copy: live or stale */
  }
  return (rg_tensor){id};
}

/* A fresh rg_input of shape s (data from the record's generator). */
static rg_tensor fresh(fz *F, shp s, int64_t range) {
  if (numel_of(&s) > ((int64_t)1 << 16)) s.ndim = 1, s.d[0] = 4;
  void *buf = make_values(F, s.dtype, numel_of(&s), range);
  pre(F, "rg_input");
  rg_tensor t = rg_input(F->ctx, (rg_dtype)s.dtype, s.ndim, s.d, buf);
  post(F, !t.id);
  free(buf);
  track(F, t, 1);
  return t;
}

/* A shape like s that broadcasts against it (axes dropped from the left or set to 1). */
static shp bcast_like(fz *F, shp s) {
  int v = below(F, 4);
  if (v == 1 && s.ndim) {
    int drop = 1 + below(F, s.ndim);
    memmove(s.d, s.d + drop, sizeof(int64_t) * (size_t)(s.ndim - drop));
    s.ndim -= drop;
  } else if (v == 2) {
    for (int i = 0; i < s.ndim; i++)
      if (u8(F) & 1) s.d[i] = 1;
  } else if (v == 3 && s.ndim) {
    s.d[below(F, s.ndim)] = dimval(F); /* often a mismatch */
  }
  return s;
}

/* An operand: a handle of the table, one of the same shape as *like, a fresh input
   shaped *like (or random), RG_NONE, or a forged id. */
static rg_tensor operand_r(fz *F, const shp *like, int dtype, int64_t range) {
  uint8_t m = u8(F) % 16, i = u8(F);
  if (m < 6 && F->ne) return F->e[i % F->ne].h;
  if (m < 9 && F->ne && like) {
    for (int k = 0; k < F->ne; k++) {
      const ent *x = &F->e[(i + k) % F->ne];
      if (x->tracked && classify(F, x->h) == C_LIVE && x->s.dtype == dtype &&
          x->s.ndim == like->ndim && !memcmp(x->s.d, like->d, sizeof(int64_t) * (size_t)like->ndim))
        return x->h;
    }
  }
  if (m == 14) return RG_NONE;
  if (m == 15) return forge(F);
  shp s = like ? *like : rand_shape(F, dtype);
  s.dtype = dtype;
  return fresh(F, s, range);
}
static rg_tensor operand(fz *F, const shp *like) { return operand_r(F, like, RG_F32, 0); }

/* ---- remembered contents of pass values ---------------------------------------------- */

static void remember(fz *F, uint64_t id, uint64_t h, int overwrite) {
  for (int i = 0; i < F->nh; i++)
    if (F->hs[i].id == id) {
      if (overwrite) F->hs[i].hash = h;
      else if (F->hs[i].hash != h)
        violation(F, "reread", "value 0x%016llx read back different bytes (recomputed or "
                  "overwritten?)", (unsigned long long)id);
      return;
    }
  int k = F->nh < NHASH ? F->nh++ : (int)(id % NHASH);
  F->hs[k].id = id;
  F->hs[k].hash = h;
}

/* The bytes of the live pass value id (its tensor-table entry), or NULL. Read from the
   table directly: rg__check would set the sticky error for a stale id. */
static const void *pass_bytes(fz *F, uint64_t id) {
  const rg_pool_s *p = &F->ctx->pool[RG_POOL_PASS];
  uint64_t slot = id & 0xffffffffu;
  if (id >> 63 || ((id >> 32) & 0x7fffffffu) != (p->gen & 0x7fffffffu) || !slot || slot > p->n)
    return NULL;
  return p->t[slot - 1].data;
}

/* A write of bytes hashing to h into pass value id: rg_reshape's views share its bytes
   (resgrad.h), so every remembered value on the same bytes now holds them too. */
static void remember_write(fz *F, uint64_t id, uint64_t h) {
  const void *b = pass_bytes(F, id);
  for (int i = 0; b && i < F->nh; i++)
    if (F->hs[i].id != id && pass_bytes(F, F->hs[i].id) == b) F->hs[i].hash = h;
  remember(F, id, h, 1);
}

/* ---- the sentinel -------------------------------------------------------------------- */

static int S_live(fz *F) {
  return F->S.id && rg_generation(F->ctx, RG_POOL_PERSISTENT) == F->Sgen;
}

/* Reads the sentinel: it must be unchanged (or, when unknown, is learned now). */
static void S_verify(fz *F, const char *why) {
  if (!S_live(F)) return;
  float v[SMAX];
  pre(F, "rg_read(sentinel)");
  rg_status st = rg_read(F->ctx, F->S, v, (size_t)F->Sn * 4);
  post_st(F, st);
  if (st != RG_OK && st != RG_ERR_NONFINITE)
    violation(F, "sentinel", "reading a live parameter gave %s", rg_status_str(st));
  if (!F->Sclean) {
    memcpy(F->Sexp, v, (size_t)F->Sn * 4);
    F->Sclean = 1;
  } else if (memcmp(v, F->Sexp, (size_t)F->Sn * 4)) {
    int k = 0;
    while (k < F->Sn && !memcmp(&v[k], &F->Sexp[k], 4)) k++;
    violation(F, "sentinel", "%s: a parameter no call may change changed (element %d: %.9g, "
              "was %.9g)", why, k, (double)v[k], (double)F->Sexp[k]);
  }
}

static void S_make(fz *F) {
  if (S_live(F)) {
    S_verify(F, "check");
    return;
  }
  shp s = {RG_F32, below(F, 3), {0}};
  for (int i = 0; i < s.ndim; i++) s.d[i] = 1 + below(F, 8);
  int64_t n = numel_of(&s);
  static const int kinds[] = {RG_INIT_CONST, RG_INIT_ONES, RG_INIT_ZEROS, RG_INIT_NORMAL,
                              RG_INIT_UNIFORM};
  rg_init init = {kinds[below(F, 5)], fval(F), fval(F)};
  if (init.kind == RG_INIT_UNIFORM && !(init.a <= init.b)) init.b = init.a + 1;
  int before = rg_param_count(F->ctx);
  pre(F, "rg_param(sentinel)");
  rg_tensor t = rg_param(F->ctx, "sentinel", RG_F32, s.ndim, s.d, init);
  post(F, !t.id);
  if (rg_param_count(F->ctx) != before + (t.id != 0))
    violation(F, "param-count", "%d parameters before, %d after", before, rg_param_count(F->ctx));
  if (!t.id) return;
  track(F, t, 0);
  F->S = t;
  F->Sgen = rg_generation(F->ctx, RG_POOL_PERSISTENT);
  F->Sn = n;
  F->Sclean = 1;
  for (int64_t i = 0; i < n; i++)
    F->Sexp[i] = init.kind == RG_INIT_CONST ? init.a : init.kind == RG_INIT_ONES ? 1.0f : 0.0f;
  if (init.kind == RG_INIT_NORMAL || init.kind == RG_INIT_UNIFORM) F->Sclean = 0;
  S_verify(F, "rg_param(init)");
}

/* ---- calls ----------------------------------------------------------------------------- */

static void op_input(fz *F) {
  static const int dts[] = {RG_F32, RG_F32, RG_F32, RG_I32, RG_BF16, 3, -1};
  int dt = dts[below(F, 7)];
  shp s = rand_shape(F, dt == RG_I32 || dt == RG_BF16 ? dt : RG_F32);
  int ndim = s.ndim, invalid = dt < 0 || dt > 2, null_host = 0, null_dims = 0;
  int v = below(F, 24);
  if (v == 0) ndim = 5, invalid = 1;
  else if (v == 1) ndim = -1, invalid = 1;
  else if (v == 2 && ndim) s.d[below(F, ndim)] = -1 - below(F, 3), invalid = 1;
  else if (v == 3 && ndim >= 2) s.d[0] = 0, s.d[1] = (int64_t)1 << 40; /* empty, huge axis */
  else if (v == 4 && ndim >= 2) s.d[0] = (int64_t)1 << 21, s.d[1] = (int64_t)1 << 20, invalid = 1;
  else if (v == 5) null_host = 1, invalid = 1;
  else if (v == 6 && ndim) null_dims = 1, invalid = 1;
  int64_t n = 1;
  for (int i = 0; i < ndim && i < RG_MAX_DIMS && !invalid; i++) n *= s.d[i];
  if (!invalid && n > ((int64_t)1 << 16)) return;
  if (invalid) n = 0;
  /* A drain can run inside the call (check mode, the growth guard) and report an
     earlier node's failure; otherwise a valid input can only run out of memory. */
  int may_drain = F->ctx->opt.check ||
                  F->ctx->n_nodes - F->ctx->q_head + 1 >= F->ctx->opt.max_queued;
  void *buf = make_values(F, dt >= 0 && dt <= 2 ? dt : RG_F32, n ? n : 1, dt == RG_I32 ? 8 : 0);
  pre(F, "rg_input");
  rg_tensor t = rg_input(F->ctx, (rg_dtype)dt, ndim, null_dims ? NULL : s.d,
                         null_host ? NULL : buf);
  post(F, !t.id);
  free(buf);
  if (invalid && t.id) violation(F, "accepted", "an invalid rg_input was accepted");
  if (invalid && F->err0 == RG_OK && rg_error(F->ctx) != RG_ERR_MISUSE &&
      !(F->inj && rg_error(F->ctx) == RG_ERR_OOM))
    violation(F, "kind", "an invalid rg_input gave %s", rg_status_str(rg_error(F->ctx)));
  if (!invalid && !t.id && F->err0 == RG_OK && rg_error(F->ctx) != RG_ERR_OOM && !may_drain)
    violation(F, "refused", "a valid rg_input failed with %s", rg_status_str(rg_error(F->ctx)));
  track(F, t, 1);
}

static void param_name(fz *F, char *buf, size_t cap, int allow_sentinel) {
  int v = below(F, 16);
  if (v < 11) snprintf(buf, cap, "p%d", below(F, 8));
  else if (v == 11) buf[0] = 0;
  else if (v == 12 && allow_sentinel && S_live(F)) snprintf(buf, cap, "sentinel");
  else {
    size_t n = 1 + (size_t)below(F, 40) * (v == 13 ? 8 : 1);
    if (n >= cap) n = cap - 1;
    buf[0] = 'p';
    for (size_t i = 1; i < n; i++) buf[i] = (char)(1 + u8(F) % 255);
    buf[n] = 0;
  }
}

static void op_param(fz *F) {
  char name[400];
  param_name(F, name, sizeof name, 1);
  int null_name = below(F, 20) == 0;
  static const int dts[] = {RG_F32, RG_F32, RG_F32, RG_F32, RG_BF16, RG_I32, 9};
  int dt = dts[below(F, 7)];
  shp s = rand_shape(F, RG_F32);
  int kind = below(F, 7) - 1; /* -1 and 5 are invalid */
  rg_init init = {kind, fval(F), fval(F)};
  int before = rg_param_count(F->ctx);
  rg_tensor dup = rg_param_find(F->ctx, name);
  pre(F, "rg_param");
  rg_tensor t = rg_param(F->ctx, null_name ? NULL : name, (rg_dtype)dt, s.ndim, s.d, init);
  post(F, !t.id);
  if (rg_param_count(F->ctx) != before + (t.id != 0))
    violation(F, "param-count", "%d parameters before, %d after", before, rg_param_count(F->ctx));
  int invalid = null_name || !name[0] || dt != RG_F32 || kind < 0 || kind > 4 || dup.id;
  if (invalid && t.id) violation(F, "accepted", "an invalid rg_param was accepted");
  if (t.id) {
    const char *nm = rg_name(F->ctx, t);
    if (!nm || strcmp(nm, name)) violation(F, "name", "rg_name gives \"%s\", not \"%s\"",
                                           nm ? nm : "(null)", name);
    if (rg_param_find(F->ctx, name).id != t.id)
      violation(F, "name", "rg_param_find(\"%s\") does not find the new parameter", name);
  }
  track(F, t, 0);
}

static void op_unary(fz *F) {
  static const char *const names[] = {
      "rg_neg", "rg_exp", "rg_log", "rg_sqrt", "rg_relu", "rg_gelu", "rg_silu", "rg_sigmoid",
      "rg_tanh", "rg_softmax", "rg_log_softmax", "rg_scale", "rg_pow", "rg_clamp",
      "rg_detach", "rg_dropout", "rg_cast"};
  int k = below(F, 17);
  rg_tensor x = operand(F, NULL);
  float a = fval(F), b = fval(F);
  static const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 0.999f, 1.0f, -0.1f, NAN};
  float p = ps[below(F, 8)];
  static const int dts[] = {RG_F32, RG_BF16, RG_I32, 3, -1};
  int dt = dts[below(F, 5)];
  rg_ctx *ctx = F->ctx;
  shp sx;
  int live = shape_of(F, x, &sx);
  pre(F, names[k]);
  if (k == 13 && !(a <= b)) F->precise = 0;
  note(F, x, 1, 0);
  rg_tensor r;
  switch (k) {
  case 0: r = rg_neg(ctx, x); break;
  case 1: r = rg_exp(ctx, x); break;
  case 2: r = rg_log(ctx, x); break;
  case 3: r = rg_sqrt(ctx, x); break;
  case 4: r = rg_relu(ctx, x); break;
  case 5: r = rg_gelu(ctx, x); break;
  case 6: r = rg_silu(ctx, x); break;
  case 7: r = rg_sigmoid(ctx, x); break;
  case 8: r = rg_tanh(ctx, x); break;
  case 9: r = rg_softmax(ctx, x); break;
  case 10: r = rg_log_softmax(ctx, x); break;
  case 11: r = rg_scale(ctx, x, a); break;
  case 12: r = rg_pow(ctx, x, a); break;
  case 13: r = rg_clamp(ctx, x, a, b); break;
  case 14: r = rg_detach(ctx, x); break;
  case 15: r = rg_dropout(ctx, x, p); break;
  default: r = rg_cast(ctx, x, (rg_dtype)dt); break;
  }
  post(F, !r.id);
  if (r.id && live) {
    shp sr;
    shape_of(F, r, &sr);
    /* with rg_options.bf16 a BF16 operand is widened, unless the op returns it as is */
    int widened = ctx->opt.bf16 && sx.dtype == RG_BF16 && k != 14 && r.id != x.id;
    int want_dt = k == 16 ? dt : widened ? RG_F32 : sx.dtype;
    if (sr.ndim != sx.ndim || memcmp(sr.d, sx.d, sizeof(int64_t) * (size_t)sx.ndim) ||
        sr.dtype != want_dt)
      violation(F, "shape", "the result's shape or dtype is not its operand's");
  }
  if (k == 15 && r.id && r.id == x.id) { /* dropout as identity returns its operand */
    if (!(p == 0 || !ctx->training)) violation(F, "dropout", "p %g returned its input", p);
    track(F, r, 0);
  } else {
    track(F, r, 1);
  }
}

static void op_binary(fz *F) {
  static const char *const names[] = {"rg_add", "rg_sub", "rg_mul", "rg_div"};
  int k = below(F, 4);
  rg_tensor a = operand(F, NULL);
  shp sa = {RG_F32, 0, {0}};
  int la = shape_of(F, a, &sa);
  shp like = bcast_like(F, sa);
  rg_tensor b = operand(F, la ? &like : NULL);
  shp sb;
  int lb = shape_of(F, b, &sb);
  if (u8(F) & 1) { /* either order */
    rg_tensor t = a;
    a = b, b = t;
    shp ts = sa;
    sa = sb, sb = ts;
    int tl = la;
    la = lb, lb = tl;
  }
  pre(F, names[k]);
  note(F, a, 1, 0);
  note(F, b, 2, 0);
  rg_ctx *ctx = F->ctx;
  rg_tensor r = k == 0 ? rg_add(ctx, a, b) : k == 1 ? rg_sub(ctx, a, b)
              : k == 2 ? rg_mul(ctx, a, b) : rg_div(ctx, a, b);
  post(F, !r.id);
  if (r.id && la && lb) { /* numpy broadcasting */
    shp sr;
    shape_of(F, r, &sr);
    int nd = sa.ndim > sb.ndim ? sa.ndim : sb.ndim, ok = sr.ndim == nd;
    for (int i = 0; ok && i < nd; i++) {
      int ia = sa.ndim - nd + i, ib = sb.ndim - nd + i;
      int64_t da = ia >= 0 ? sa.d[ia] : 1, db = ib >= 0 ? sb.d[ib] : 1;
      ok = (da == db || da == 1 || db == 1) && sr.d[i] == (da == 1 ? db : da);
    }
    if (!ok) violation(F, "shape", "a broadcast result has the wrong shape");
  }
  track(F, r, 1);
}

static void op_reduce(fz *F) {
  static const char *const names[] = {"rg_sum", "rg_mean", "rg_max", "rg_argmax"};
  int k = below(F, 4);
  rg_tensor x = operand(F, NULL);
  int axis = u8(F) % 4 == 0 ? RG_ALL_AXES : below(F, 11) - 5, keep = below(F, 3);
  rg_ctx *ctx = F->ctx;
  pre(F, names[k]);
  note(F, x, 1, 0);
  rg_tensor r = k == 0 ? rg_sum(ctx, x, axis, keep) : k == 1 ? rg_mean(ctx, x, axis, keep)
              : k == 2 ? rg_max(ctx, x, axis, keep) : rg_argmax(ctx, x, axis, keep);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_matmul(fz *F) {
  rg_tensor a = operand(F, NULL);
  shp sa, like;
  int la = shape_of(F, a, &sa);
  if (la && sa.ndim >= 2) {
    like = bcast_like(F, sa);
    if (like.ndim < 2) like = sa;
    like.d[like.ndim - 2] = u8(F) % 8 ? sa.d[sa.ndim - 1] : dimval(F);
    like.d[like.ndim - 1] = dimval(F);
  } else {
    like = rand_shape(F, RG_F32);
  }
  rg_tensor b = operand(F, &like);
  pre(F, "rg_matmul");
  note(F, a, 1, 0);
  note(F, b, 2, 0);
  rg_tensor r = rg_matmul(F->ctx, a, b);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_linear(fz *F) {
  rg_tensor x = operand(F, NULL);
  shp sx;
  int64_t in = shape_of(F, x, &sx) && sx.ndim ? sx.d[sx.ndim - 1] : dimval(F), out = dimval(F);
  uint8_t sel = u8(F);
  if (sel % 8 == 0) in = dimval(F);
  int act = (sel >> 3) % 4; /* rg_linear, rg_linear_act ReLU / GELU, or act 7: no rg_act */
  shp sw = {RG_F32, 2, {out, in}}, sb = {RG_F32, 1, {out}};
  rg_tensor w = operand(F, &sw);
  rg_tensor b = u8(F) % 3 == 0 ? RG_NONE : operand(F, &sb);
  pre(F, act ? "rg_linear_act" : "rg_linear");
  note(F, x, 1, 0);
  note(F, w, 2, 0);
  note(F, b, 3, 1);
  rg_tensor r = act ? rg_linear_act(F->ctx, x, w, b, (rg_act)(act == 3 ? 7 : act))
                    : rg_linear(F->ctx, x, w, b);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_norm(fz *F) {
  int rms = u8(F) & 1;
  rg_tensor x = operand(F, NULL);
  shp sx;
  int64_t c = shape_of(F, x, &sx) && sx.ndim ? sx.d[sx.ndim - 1] : dimval(F);
  if (u8(F) % 8 == 0) c = dimval(F);
  shp sg = {RG_F32, 1, {c}};
  rg_tensor g = u8(F) % 4 == 0 ? RG_NONE : operand(F, &sg);
  rg_tensor b = u8(F) % 4 == 0 ? RG_NONE : operand(F, &sg);
  float eps = u8(F) % 4 ? 1e-5f : fval(F);
  pre(F, rms ? "rg_rmsnorm" : "rg_layernorm");
  note(F, x, 1, 0);
  note(F, g, 2, 1);
  if (!rms) note(F, b, 3, 1);
  rg_tensor r = rms ? rg_rmsnorm(F->ctx, x, g, eps) : rg_layernorm(F->ctx, x, g, b, eps);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_embedding(fz *F) {
  shp st = {RG_F32, 2, {dimval(F), dimval(F)}};
  if (u8(F) % 8 == 0) st = rand_shape(F, RG_F32);
  rg_tensor table = operand(F, &st);
  shp s2;
  int64_t v = shape_of(F, table, &s2) && s2.ndim == 2 ? s2.d[0] : 4;
  shp si = rand_shape(F, RG_I32);
  if (si.ndim == 4) si.ndim = 3;
  rg_tensor idx = operand_r(F, &si, RG_I32, v);
  pre(F, "rg_embedding");
  note(F, table, 1, 0);
  note(F, idx, 2, 0);
  rg_tensor r = rg_embedding(F->ctx, table, idx);
  post(F, !r.id);
  track(F, r, 1);
}

/* rg_attention_qkv on [B, T, 3 H D] (or a width that is not a multiple of 3 H, or no
   heads: misuse). */
static void op_attention_qkv(fz *F, int64_t B, int64_t H, int64_t T, int64_t D, uint8_t sel) {
  shp sx = {RG_F32, 3, {B, T, 3 * H * D + ((sel >> 3) & 1)}};
  rg_tensor qkv = operand(F, &sx);
  int64_t heads = (sel >> 4) & 1 ? H : (int64_t)below(F, 3) - 1;
  int causal = below(F, 3);
  pre(F, "rg_attention_qkv");
  note(F, qkv, 1, 0);
  rg_tensor r = rg_attention_qkv(F->ctx, qkv, heads, causal);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_attention(fz *F) {
  int64_t B = 1 + below(F, 2), H = 1 + below(F, 3), T = dimval(F);
  uint8_t sel = u8(F);
  int64_t S = sel & 1 ? T : dimval(F), D = dimval(F);
  if ((sel >> 1) % 4 == 0) {
    op_attention_qkv(F, B, H, T, D, sel);
    return;
  }
  shp sq = {RG_F32, 4, {B, H, T, D}}, sk = {RG_F32, 4, {B, H, S, D}};
  if (u8(F) % 8 == 0) sk = bcast_like(F, sk);
  rg_tensor q = operand(F, &sq), k = operand(F, &sk), v = operand(F, &sk);
  int causal = below(F, 3);
  /* rg_attention_mask: key padding [B,S] (0 or 1 each), a bias broadcast to [B,H,T,S] */
  int masked = (sel >> 5) & 1;
  rg_tensor kp = RG_NONE, bias = RG_NONE;
  if (masked) {
    shp sp = {RG_I32, 2, {B, S}}, sb = bcast_like(F, (shp){RG_F32, 4, {B, H, T, S}});
    if (u8(F) & 1) kp = operand_r(F, &sp, RG_I32, 2);
    if (u8(F) & 1) bias = operand(F, &sb);
  }
  pre(F, masked ? "rg_attention_mask" : "rg_attention");
  note(F, q, 1, 0);
  note(F, k, 2, 0);
  note(F, v, 3, 0);
  if (masked) {
    note(F, kp, 4, 1);
    note(F, bias, 5, 1);
  }
  rg_tensor r = masked ? rg_attention_mask(F->ctx, q, k, v, causal, kp, bias)
                       : rg_attention(F->ctx, q, k, v, causal);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_xent(fz *F) {
  rg_tensor lg = operand(F, NULL);
  shp sl;
  int64_t c = 4;
  shp stg = rand_shape(F, RG_I32);
  if (shape_of(F, lg, &sl) && sl.ndim >= 1) {
    stg = sl;
    stg.ndim--;
    c = sl.d[sl.ndim - 1];
  }
  stg.dtype = RG_I32;
  rg_tensor tg = operand_r(F, &stg, RG_I32, c);
  int ign = u8(F) & 1, ii = below(F, 5) - 1;
  pre(F, ign ? "rg_cross_entropy_ignore" : "rg_cross_entropy");
  note(F, lg, 1, 0);
  note(F, tg, 2, 0);
  rg_tensor r = ign ? rg_cross_entropy_ignore(F->ctx, lg, tg, ii)
                    : rg_cross_entropy(F->ctx, lg, tg);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_mse(fz *F) {
  rg_tensor a = operand(F, NULL);
  shp sa;
  int la = shape_of(F, a, &sa);
  rg_tensor b = operand(F, la ? &sa : NULL);
  pre(F, "rg_mse");
  note(F, a, 1, 0);
  note(F, b, 2, 0);
  rg_tensor r = rg_mse(F->ctx, a, b);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_reshape(fz *F) {
  rg_tensor x = operand(F, NULL);
  shp sx;
  int live = shape_of(F, x, &sx);
  int64_t n = live ? numel_of(&sx) : 4;
  int64_t d[RG_MAX_DIMS + 1] = {0};
  int nd;
  switch (below(F, 6)) {
  case 0: nd = 1, d[0] = -1; break;
  case 1: nd = 2, d[0] = 1, d[1] = -1; break;
  case 2: nd = 1, d[0] = n; break;
  case 3: nd = 2, d[0] = live && sx.ndim ? sx.d[0] : 2, d[1] = -1; break;
  case 4: nd = 0; break;
  default:
    nd = below(F, 6);
    for (int i = 0; i < nd; i++) d[i] = u8(F) % 8 == 0 ? -1 - below(F, 2) : dimval(F);
  }
  int null_dims = nd && below(F, 16) == 0;
  pre(F, "rg_reshape");
  note(F, x, 1, 0);
  rg_tensor r = rg_reshape(F->ctx, x, nd, null_dims ? NULL : d);
  post(F, !r.id);
  if (r.id && live) {
    shp sr;
    shape_of(F, r, &sr);
    if (numel_of(&sr) != n || sr.ndim != nd || sr.dtype != sx.dtype)
      violation(F, "shape", "a reshape changed the element count, rank or dtype");
  }
  track(F, r, 1);
}

static void op_permute(fz *F) {
  rg_tensor x = operand(F, NULL);
  rg_tensor r;
  if (u8(F) & 1) {
    int a0 = below(F, 11) - 5, a1 = below(F, 11) - 5;
    pre(F, "rg_transpose");
    note(F, x, 1, 0);
    r = rg_transpose(F->ctx, x, a0, a1);
  } else {
    int perm[RG_MAX_DIMS] = {0, 1, 2, 3};
    for (int i = RG_MAX_DIMS - 1; i > 0; i--) { /* a permutation of 0..3, then maybe spoilt */
      int j = below(F, i + 1), t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    shp sx;
    if (shape_of(F, x, &sx)) { /* restrict to 0..ndim-1 in order of appearance */
      int k = 0;
      for (int i = 0; i < RG_MAX_DIMS; i++)
        if (perm[i] < sx.ndim) perm[k++] = perm[i];
    }
    if (u8(F) % 6 == 0) perm[below(F, 4)] = below(F, 7) - 1;
    int null_perm = below(F, 16) == 0;
    pre(F, "rg_permute");
    note(F, x, 1, 0);
    r = rg_permute(F->ctx, x, null_perm ? NULL : perm);
  }
  post(F, !r.id);
  track(F, r, 1);
}

static void op_slice(fz *F) {
  rg_tensor x = operand(F, NULL);
  int axis = below(F, 11) - 5;
  static const int64_t v[] = {0, 1, 2, 3, -1, 4, 0, 1, INT64_MAX, INT64_MIN, (int64_t)1 << 40};
  int64_t start = v[below(F, 11)], len = v[below(F, 11)];
  shp sx;
  if (u8(F) & 1 && shape_of(F, x, &sx) && sx.ndim) { /* a valid range */
    int a = axis < 0 ? axis + sx.ndim : axis;
    if (a >= 0 && a < sx.ndim) {
      int64_t n = sx.d[a];
      start = n ? (int64_t)(u8(F) % (uint64_t)(n + 1)) : 0;
      len = n - start ? (int64_t)(u8(F) % (uint64_t)(n - start + 1)) : 0;
    }
  }
  pre(F, "rg_slice");
  note(F, x, 1, 0);
  rg_tensor r = rg_slice(F->ctx, x, axis, start, len);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_concat(fz *F) {
  rg_tensor a = operand_r(F, NULL, u8(F) % 4 ? RG_F32 : RG_I32, 5);
  int axis = below(F, 9) - 4;
  shp sa, like;
  int la = shape_of(F, a, &sa);
  like = la ? sa : rand_shape(F, RG_F32);
  if (la && sa.ndim) {
    int ax = axis < 0 ? axis + sa.ndim : axis;
    if (ax >= 0 && ax < sa.ndim) like.d[ax] = dimval(F);
  }
  rg_tensor b = operand_r(F, &like, like.dtype, 5);
  pre(F, "rg_concat");
  note(F, a, 1, 0);
  note(F, b, 2, 0);
  rg_tensor r = rg_concat(F->ctx, a, b, axis);
  post(F, !r.id);
  track(F, r, 1);
}

static void op_backward(fz *F) {
  rg_tensor l;
  if (u8(F) % 3 == 0 && F->ne) { /* a real loss: the sum of something */
    rg_tensor x = F->e[u8(F) % F->ne].h;
    pre(F, "rg_sum(loss)");
    note(F, x, 1, 0);
    l = rg_sum(F->ctx, x, RG_ALL_AXES, 0);
    post(F, !l.id);
    track(F, l, 1);
  } else {
    l = operand(F, NULL);
  }
  pre(F, "rg_backward");
  note(F, l, 1, 0);
  rg_status st = rg_backward(F->ctx, l);
  post_st(F, st);
}

static void op_grad(fz *F) {
  rg_tensor x = operand(F, NULL);
  pre(F, "rg_grad");
  note(F, x, 1, 0);
  rg_tensor g = rg_grad(F->ctx, x);
  post(F, !g.id);
  track(F, g, 0);
}

static void op_simple(fz *F, int which) {
  rg_status st;
  switch (which) {
  case 0: pre(F, "rg_zero_grad"); st = rg_zero_grad(F->ctx); break;
  case 1: pre(F, "rg_step_begin"); st = rg_step_begin(F->ctx); break;
  default: pre(F, "rg_sync"); st = rg_sync(F->ctx); break;
  }
  post_st(F, st);
  if (which == 1 && F->ne) check_entry(F, &F->e[u8(F) % F->ne]);
}

static void op_reset(fz *F) {
  int pool = below(F, 8);
  pool = pool < 4 ? RG_POOL_PASS : pool < 7 ? RG_POOL_PERSISTENT : (u8(F) & 1 ? 2 : -1);
  if (pool == RG_POOL_PERSISTENT) S_verify(F, "before rg_reset(PERSISTENT)");
  uint64_t g0 = rg_generation(F->ctx, RG_POOL_PASS), g1 = rg_generation(F->ctx, RG_POOL_PERSISTENT);
  pre(F, "rg_reset");
  rg_status st = rg_reset(F->ctx, (rg_pool)pool);
  post_st(F, st);
  uint64_t n0 = rg_generation(F->ctx, RG_POOL_PASS), n1 = rg_generation(F->ctx, RG_POOL_PERSISTENT);
  int ok = pool == RG_POOL_PASS ? n0 == g0 + 1 && n1 == g1
         : pool == RG_POOL_PERSISTENT ? n0 == g0 && n1 == g1 + 1 : n0 == g0 && n1 == g1;
  if (!ok) violation(F, "generation", "rg_reset(%d) moved the generations from %llu/%llu to "
                     "%llu/%llu", pool, (unsigned long long)g0, (unsigned long long)g1,
                     (unsigned long long)n0, (unsigned long long)n1);
  if (pool == RG_POOL_PERSISTENT && rg_param_count(F->ctx) != 0)
    violation(F, "reset", "parameters survived rg_reset(RG_POOL_PERSISTENT)");
  if (F->ne) check_entry(F, &F->e[u8(F) % F->ne]);
}

/* The byte count for a read or write of a tensor whose exact size is exact. */
static size_t wrong_size(fz *F, size_t exact, int *is_exact) {
  size_t b;
  switch (below(F, 8)) {
  case 0: b = exact + 4; break;
  case 1: b = exact >= 4 ? exact - 4 : exact + 2; break;
  case 2: b = exact / 2; break;
  case 3: b = 0; break;
  default: b = exact; break;
  }
  *is_exact = b == exact;
  return b;
}

static void op_read(fz *F) {
  rg_tensor x = operand(F, NULL);
  shp sx;
  int live = shape_of(F, x, &sx), is_exact;
  size_t exact = live ? (size_t)numel_of(&sx) * esize(sx.dtype) : 16;
  if (live && exact > ((size_t)64 << 20)) return;
  size_t bytes = wrong_size(F, exact, &is_exact);
  int null_dst = below(F, 20) == 0;
  uint8_t *dst = malloc(bytes ? bytes : 1);
  if (!dst) abort();
  memset(dst, 0xa5, bytes);
  pre(F, "rg_read");
  note(F, x, 1, 0);
  rg_status st = rg_read(F->ctx, x, null_dst ? NULL : dst, bytes);
  post_st(F, st);
  if (live && (!is_exact || null_dst)) {
    if (st != RG_ERR_MISUSE) violation(F, "read-size", "a read of %zu bytes (tensor holds %zu%s) "
                                       "returned %s", bytes, exact, null_dst ? ", dst NULL" : "",
                                       rg_status_str(st));
    for (size_t i = 0; i < bytes; i++)
      if (dst[i] != 0xa5) {
        violation(F, "read-size", "a refused read wrote into the buffer");
        break;
      }
  }
  if (live && is_exact && !null_dst && x.id == F->S.id && S_live(F) && st != RG_OK &&
      st != RG_ERR_NONFINITE)
    violation(F, "sentinel", "reading a live parameter gave %s", rg_status_str(st));
  if (live && is_exact && !null_dst && st == RG_OK && pool_of(x) == RG_POOL_PASS)
    remember(F, x.id, fnv(dst, bytes), 0);
  free(dst);
}

static void op_item(fz *F) {
  rg_tensor x = operand(F, NULL);
  shp sx;
  int live = shape_of(F, x, &sx), null_out = below(F, 16) == 0;
  float out = -7.0f;
  pre(F, "rg_item");
  note(F, x, 1, 0);
  rg_status st = rg_item(F->ctx, x, null_out ? NULL : &out);
  post_st(F, st);
  if (live && (numel_of(&sx) != 1 || sx.dtype != RG_F32 || null_out) && st != RG_ERR_MISUSE)
    violation(F, "item", "rg_item of a %lld-element %s tensor%s returned %s",
              (long long)numel_of(&sx), rg__dtype_name(sx.dtype), null_out ? " (out NULL)" : "",
              rg_status_str(st));
  if (live && st == RG_OK && pool_of(x) == RG_POOL_PASS) remember(F, x.id, fnv(&out, 4), 0);
}

static void op_write(fz *F) {
  rg_tensor x = operand(F, NULL);
  if (x.id == F->S.id) return; /* the sentinel is never written */
  shp sx;
  int live = shape_of(F, x, &sx), is_exact;
  size_t exact = live ? (size_t)numel_of(&sx) * esize(sx.dtype) : 16;
  if (live && exact > ((size_t)64 << 20)) return;
  size_t bytes = wrong_size(F, exact, &is_exact);
  int null_src = below(F, 20) == 0;
  int dt = live ? sx.dtype : RG_F32;
  int64_t n = (int64_t)((bytes + 3) / 4);
  void *src = make_values(F, dt == RG_BF16 ? RG_F32 : dt, n ? n : 1, 6);
  pre(F, "rg_write");
  note(F, x, 1, 0);
  rg_status st = rg_write(F->ctx, x, null_src ? NULL : src, bytes);
  post_st(F, st);
  if (live && (!is_exact || null_src) && st != RG_ERR_MISUSE)
    violation(F, "write-size", "a write of %zu bytes (tensor holds %zu%s) returned %s", bytes,
              exact, null_src ? ", src NULL" : "", rg_status_str(st));
  if (live && is_exact && !null_src && st != RG_OK)
    violation(F, "write", "a write of the right size returned %s", rg_status_str(st));
  if (live && st == RG_OK && pool_of(x) == RG_POOL_PASS) remember_write(F, x.id, fnv(src, bytes));
  free(src);
}

static void op_query(fz *F) {
  rg_tensor x = u8(F) & 1 && F->ne ? F->e[u8(F) % F->ne].h : operand(F, NULL);
  int axis = below(F, 11) - 5, k = below(F, 7);
  shp sx;
  int live = shape_of(F, x, &sx);
  rg_ctx *ctx = F->ctx;
  static const char *const names[] = {"rg_ndim", "rg_dim", "rg_numel", "rg_dtype_of",
                                      "rg_is_live", "rg_name", "rg_generation"};
  pre(F, names[k]);
  if (k < 6) note(F, x, 1, 0);
  int err_expected = F->bad && k != 4 && k != 6;
  int64_t v = 0;
  switch (k) {
  case 0:
    v = rg_ndim(ctx, x);
    if (live && v != sx.ndim) violation(F, "query", "ndim %lld", (long long)v);
    break;
  case 1: {
    v = rg_dim(ctx, x, axis);
    int a = live ? (axis < 0 ? axis + sx.ndim : axis) : -1;
    if (live && a >= 0 && a < sx.ndim && v != sx.d[a])
      violation(F, "query", "dim %lld", (long long)v);
    if (live && (a < 0 || a >= sx.ndim)) err_expected = 1;
    break;
  }
  case 2:
    v = rg_numel(ctx, x);
    if (live && v != numel_of(&sx)) violation(F, "query", "numel %lld", (long long)v);
    break;
  case 3:
    v = rg_dtype_of(ctx, x);
    if (live && v != sx.dtype) violation(F, "query", "dtype %lld", (long long)v);
    break;
  case 4:
    v = rg_is_live(ctx, x);
    F->bad = 0;
    if (v != live) violation(F, "is_live", "rg_is_live is %lld for a %s handle", (long long)v,
                             live ? "live" : "dead");
    break;
  case 5: {
    const char *nm = rg_name(ctx, x);
    if (live && x.id == F->S.id && S_live(F) && (!nm || strcmp(nm, "sentinel")))
      violation(F, "name", "the sentinel is called \"%s\"", nm ? nm : "(null)");
    break;
  }
  default:
    v = (int64_t)rg_generation(ctx, (rg_pool)(axis + 1));
    if ((axis + 1 == 0 || axis + 1 == 1) ? v < 1 : v != 0)
      violation(F, "generation", "rg_generation(%d) is %lld", axis + 1, (long long)v);
    break;
  }
  post(F, err_expected);
}

static void op_params(fz *F) {
  rg_ctx *ctx = F->ctx;
  int n = rg_param_count(ctx), k = below(F, 3);
  if (k == 0) {
    int i = below(F, n + 3) - 1;
    pre(F, "rg_param_at");
    rg_tensor t = rg_param_at(ctx, i);
    post(F, 0);
    if ((i >= 0 && i < n) != (t.id != 0))
      violation(F, "param_at", "rg_param_at(%d) of %d is %s", i, n, t.id ? "a handle" : "RG_NONE");
    if (t.id) {
      const char *nm = rg_name(ctx, t);
      if (!nm || rg_param_find(ctx, nm).id != t.id)
        violation(F, "param_at", "parameter %d is not found by its name", i);
    }
    track(F, t, 0);
  } else if (k == 1) {
    char name[400];
    param_name(F, name, sizeof name, 1);
    pre(F, "rg_param_find");
    rg_tensor t = rg_param_find(ctx, u8(F) % 16 ? name : NULL);
    post(F, 0);
    track(F, t, 0);
  } else {
    pre(F, "rg_version/rg_device_name/rg_status_str");
    if (strcmp(rg_version(), RG_VERSION_STRING)) violation(F, "version", "%s", rg_version());
    if (!rg_device_name(ctx)[0] || rg_device_kind(ctx) != RG_DEVICE_CPU)
      violation(F, "device", "device name or kind");
    const char *s = rg_status_str((rg_status)(below(F, 12) - 10));
    if (!s || !*s) violation(F, "status_str", "empty");
    post(F, 0);
  }
}

/* ---- optimizers ------------------------------------------------------------------------ */

static float hyper(fz *F, int kind) {
  static const float lr[] = {0, 1e-3f, 1e-2f, 0.1f, 1, -1, NAN, INFINITY, 1e30f};
  static const float beta[] = {0, 0, 0.5f, 0.9f, 0.999f, 1, 1.5f, -0.1f, NAN};
  static const float small[] = {0, 0, 0, 1e-8f, 1e-2f, -1, NAN, INFINITY};
  if (kind == 0) return lr[below(F, 9)];
  if (kind == 1) return beta[below(F, 9)];
  return small[below(F, 8)];
}

static void op_optim_new(fz *F) {
  int slot = below(F, NOPT), adam = u8(F) & 1, null_opt = below(F, 8) == 0;
  rg_adamw_options ao = {hyper(F, 0), hyper(F, 1), hyper(F, 1), hyper(F, 2), hyper(F, 2)};
  rg_sgd_options so = {hyper(F, 0), hyper(F, 1), hyper(F, 2)};
  if (F->opt[slot].o) {
    pre(F, "rg_optim_free");
    rg_optim_free(F->opt[slot].o);
    post(F, 0);
    F->opt[slot].o = NULL;
  }
  pre(F, adam ? "rg_optim_adamw" : "rg_optim_sgd");
  rg_optim *o = adam ? rg_optim_adamw(F->ctx, null_opt ? NULL : &ao)
                     : rg_optim_sgd(F->ctx, null_opt ? NULL : &so);
  post(F, !o);
  F->opt[slot].o = o;
  F->opt[slot].pgen = rg_generation(F->ctx, RG_POOL_PERSISTENT);
  F->opt[slot].covers = S_live(F);
}

static optent *pick_opt(fz *F) { return &F->opt[below(F, NOPT)]; }

static void opt_note(fz *F, const optent *o) {
  if (!o->o) return;
  if (o->pgen != rg_generation(F->ctx, RG_POOL_PERSISTENT)) {
    F->bad = F->bad_opt = 1; /* its parameters were freed */
    F->precise = 0;
  }
}

static void op_optim_step(fz *F) {
  optent *o = pick_opt(F);
  if (!o->o) {
    rg_status st = rg_optim_step(NULL);
    if (st != RG_ERR_MISUSE) {
      F->call = "rg_optim_step(NULL)";
      violation(F, "null", "rg_optim_step(NULL) returned %s", rg_status_str(st));
    }
    return;
  }
  pre(F, "rg_optim_step");
  opt_note(F, o);
  rg_status st = rg_optim_step(o->o);
  post_st(F, st);
  if (o->covers && S_live(F) && o->pgen == F->Sgen) F->Sclean = 0; /* may move the sentinel */
}

static void op_optim_lr(fz *F) {
  optent *o = pick_opt(F);
  float lr = hyper(F, 0);
  int steps = u8(F) & 1;
  if (!o->o) {
    F->call = "rg_optim_set_lr(NULL)";
    if (rg_optim_set_lr(NULL, lr) != RG_ERR_MISUSE || rg_optim_steps(NULL) != -1)
      violation(F, "null", "a NULL optimizer was not refused");
    return;
  }
  if (steps) {
    pre(F, "rg_optim_steps");
    opt_note(F, o);
    int64_t n = rg_optim_steps(o->o);
    post(F, n < 0);
  } else {
    pre(F, "rg_optim_set_lr");
    opt_note(F, o);
    rg_status st = rg_optim_set_lr(o->o, lr);
    post_st(F, st);
    if (!F->bad && !(lr > 0) && st != RG_ERR_MISUSE)
      violation(F, "lr", "rg_optim_set_lr(%g) returned %s", lr, rg_status_str(st));
  }
}

static void op_optim_free(fz *F) {
  optent *o = pick_opt(F);
  pre(F, "rg_optim_free");
  rg_optim_free(o->o);
  post(F, 0);
  o->o = NULL;
}

static void op_clip(fz *F) {
  static const float m[] = {1, 0.1f, 1e-30f, 100, 0, -1, NAN, INFINITY, 1e30f};
  float mx = m[below(F, 9)];
  pre(F, "rg_clip_grad_norm");
  rg_status st = rg_clip_grad_norm(F->ctx, mx);
  post_st(F, st);
  if (!(mx > 0) && st != RG_ERR_MISUSE)
    violation(F, "clip", "max_norm %g returned %s", mx, rg_status_str(st));
}

/* ---- labels, modes, errors --------------------------------------------------------- */

static void rand_string(fz *F, char *buf, size_t cap, size_t maxlen) {
  size_t n = (size_t)u8(F);
  n = u8(F) % 8 == 0 ? maxlen : n % 24;
  if (n >= cap) n = cap - 1;
  int printable = u8(F) % 4 != 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = u8(F);
    buf[i] = printable ? (char)(' ' + c % 95) : (char)(1 + c % 255);
  }
  buf[n] = 0;
}

static void op_label(fz *F) {
  if (u8(F) % 3 == 0) {
    pre(F, "rg_label_pop");
    int d = depth(F->ctx);
    rg_label_pop(F->ctx);
    if (depth(F->ctx) != (d ? d - 1 : 0))
      violation(F, "label", "pop took the depth from %d to %d", d, depth(F->ctx));
    post(F, 0);
    return;
  }
  char s[800];
  rand_string(F, s, sizeof s, 700);
  int null_label = below(F, 12) == 0;
  pre(F, "rg_label_push");
  int d = depth(F->ctx), skip = F->ctx->lskip;
  rg_label_push(F->ctx, null_label ? NULL : s);
  if (depth(F->ctx) != d + 1)
    violation(F, "label", "push took the depth from %d to %d", d, depth(F->ctx));
  post(F, !skip && F->ctx->lskip); /* the push that first runs out of memory reports it */
}

static void op_mode(fz *F) {
  pre(F, "mode");
  switch (below(F, 4)) {
  case 0: F->ctx->opt.check = u8(F) & 1; break;           /* rg_options.check */
  case 1: rg_set_check_finite(F->ctx, u8(F) & 1); break;
  case 2: rg_set_training(F->ctx, below(F, 3)); break;
  default: F->ctx->opt.max_queued = u8(F) % 4 ? (size_t)1 << 20 : (size_t)(1 + below(F, 8)); break;
  }
  post(F, 0);
}

static void op_clear(fz *F) {
  pre(F, "rg_clear_error");
  rg_clear_error(F->ctx);
  F->err0 = RG_OK; /* clearing is the one call that may drop the sticky error */
  F->msg0[0] = 0;
  post(F, 0);
  if (rg_error(F->ctx) != RG_OK) violation(F, "clear", "the error is still set");
}

static void op_raise(fz *F) {
  char s[1200];
  rand_string(F, s, sizeof s, 1100);
  rg_status st = (rg_status)(below(F, 9) - 8);
  pre(F, "rg_raise");
  rg_status r = rg_raise(F->ctx, st, "%s", s);
  post(F, st != RG_OK);
  if (r != st) violation(F, "raise", "returned %s, not %s", rg_status_str(r), rg_status_str(st));
  if (F->err0 == RG_OK && st != RG_OK) {
    if (rg_error(F->ctx) != st)
      violation(F, "raise", "sticky error %s", rg_status_str(rg_error(F->ctx)));
    if (strlen(s) < 200 && !strstr(rg_errmsg(F->ctx), s))
      violation(F, "raise", "the message lost the text \"%s\"", s);
  }
}

static void op_stats(fz *F) {
  pre(F, "rg_stats");
  switch (below(F, 3)) {
  case 0: rg_stats_get(F->ctx, NULL); break;
  case 1: rg_stats_reset(F->ctx); break;
  default: {
    rg_stats s;
    rg_stats_get(F->ctx, &s);
    break;
  }
  }
  post(F, 0);
}

static void op_alloc_fail(fz *F) {
  pre(F, "alloc_fail_at");
  F->ctx->alloc_fail_at = u8(F) % 4 ? F->ctx->alloc_count + 1 + below(F, 64) : 0;
  post(F, 0);
}

static void op_forge(fz *F) {
  ent x = {forge(F), 0, 0, 0, {0, 0, {0}}};
  x.pool = pool_of(x.h);
  put(F, x);
  check_entry(F, &x);
}

/* ---- checkpoints and metadata ------------------------------------------------------ */

static const char *pick_path(fz *F) {
  switch (below(F, 24)) {
  case 0: return "";
  case 1: return NULL;
  case 2: return "/nonexistent-rg-fuzz-dir/x.safetensors";
  case 3: return tmpdir; /* a directory */
  default: return ckpt;
  }
}

static optent *pick_opt_or_null(fz *F) {
  optent *o = pick_opt(F);
  return u8(F) % 3 == 0 || !o->o ? NULL : o;
}

static void op_clear(fz *F);

static void meta_model_set(fz *F, const char *k, const char *v) {
  for (int i = 0; i < F->nmeta; i++)
    if (!strcmp(F->meta[i].k, k)) {
      snprintf(F->meta[i].v, sizeof F->meta[i].v, "%s", v);
      return;
    }
  if (F->nmeta == NMETA) {
    F->meta_unknown = 1;
    return;
  }
  snprintf(F->meta[F->nmeta].k, sizeof F->meta[0].k, "%s", k);
  snprintf(F->meta[F->nmeta++].v, sizeof F->meta[0].v, "%s", v);
}

static void meta_check(fz *F, const char *why) {
  if (F->meta_unknown) return;
  for (int i = 0; i < F->nmeta; i++) {
    const char *v = rg_meta_get(F->ctx, F->meta[i].k);
    if (!v || strcmp(v, F->meta[i].v))
      violation(F, "meta", "%s: rg_meta_get(\"%s\") is \"%s\", not \"%s\"", why, F->meta[i].k,
                v ? v : "(null)", F->meta[i].v);
  }
}

static int do_save(fz *F, const char *path, optent *o) {
  pre(F, "rg_save");
  if (o) opt_note(F, o);
  rg_status st = rg_save(F->ctx, path, o ? o->o : NULL);
  post_st(F, st);
  if (st == RG_OK && path == ckpt) {
    F->fvalid = 1;
    F->fhasS = S_live(F) && F->Sclean;
    F->fSn = F->Sn;
    memcpy(F->fS, F->Sexp, sizeof F->fS);
    F->nfmeta = F->nmeta;
    F->fmeta_unknown = F->meta_unknown;
    memcpy(F->fmeta, F->meta, sizeof F->meta);
  }
  return st == RG_OK;
}

static rg_status do_load(fz *F, const char *path, optent *o) {
  S_verify(F, "before rg_load");
  pre(F, "rg_load");
  if (o) opt_note(F, o);
  rg_status st = rg_load(F->ctx, path, o ? o->o : NULL);
  post_st(F, st);
  if (st == RG_OK) {
    if (!S_live(F)) {
    } else if (F->fvalid && F->fhasS && F->fSn == F->Sn) {
      memcpy(F->Sexp, F->fS, sizeof F->Sexp);
      F->Sclean = 1;
    } else {
      F->Sclean = 0;
    }
    if (F->fvalid) {
      F->nmeta = F->nfmeta;
      F->meta_unknown = F->fmeta_unknown;
      memcpy(F->meta, F->fmeta, sizeof F->meta);
    } else {
      F->meta_unknown = 1;
    }
  }
  /* A failed load changes nothing; a successful one gives the saved values. */
  S_verify(F, st == RG_OK ? "after rg_load" : "after a failed rg_load");
  meta_check(F, st == RG_OK ? "after rg_load" : "after a failed rg_load");
  return st;
}

static void op_save(fz *F) {
  const char *path = pick_path(F);
  do_save(F, path, pick_opt_or_null(F));
}

static void op_load(fz *F) {
  const char *path = pick_path(F);
  do_load(F, path, pick_opt_or_null(F));
}

/* rg_save then rg_load of the same model and optimizer: the load must succeed. */
static void op_roundtrip(fz *F) {
  optent *o = pick_opt_or_null(F);
  op_clear(F); /* so that the statuses below are the calls' own */
  if (!do_save(F, ckpt, o)) return;
  rg_status st = do_load(F, ckpt, o);
  if (st != RG_OK && st != RG_ERR_OOM)
    violation(F, "roundtrip", "a file rg_save wrote does not load: %s", rg_status_str(st));
}

static void op_corrupt(fz *F) {
  FILE *f = fopen(ckpt, "r+b");
  if (!f) return;
  F->fvalid = 0;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  int k = below(F, 4);
  if (k == 0 && size > 0) {
    fclose(f);
    if (truncate(ckpt, (off_t)(u32(F) % (uint32_t)size)) != 0) return;
    return;
  }
  int n = 1 + below(F, 8);
  for (int i = 0; i < n && size > 0; i++) {
    long at = k == 1 ? (long)(u8(F) % 16) : (long)(u32(F) % (uint32_t)size);
    fseek(f, at, SEEK_SET);
    fputc(u8(F), f);
  }
  fclose(f);
}

static void op_meta(fz *F) {
  static const char *const keys[] = {"k0", "k1", "k2", "format", "format_version", "seed",
                                     "step", "optim", "", "config"};
  char key[400], val[1200];
  int kk = below(F, 12);
  if (kk < 10) snprintf(key, sizeof key, "%s", keys[kk]);
  else rand_string(F, key, sizeof key, kk == 10 ? 255 : 256);
  rand_string(F, val, sizeof val, u8(F) & 1 ? 1023 : 1024);
  int null_key = below(F, 20) == 0, null_val = below(F, 20) == 0;
  if (u8(F) % 3 == 0) {
    pre(F, "rg_meta_get");
    const char *v = rg_meta_get(F->ctx, null_key ? NULL : key);
    post(F, 0);
    (void)v;
    meta_check(F, "rg_meta_get");
    return;
  }
  int reserved = 0;
  for (int i = 3; i < 8; i++) reserved |= !strcmp(key, keys[i]);
  int valid = !null_key && !null_val && key[0] && strlen(key) <= 255 && strlen(val) <= 1023 &&
              !reserved;
  pre(F, "rg_meta_set");
  rg_status st = rg_meta_set(F->ctx, null_key ? NULL : key, null_val ? NULL : val);
  post_st(F, st);
  if (!valid && st != RG_ERR_MISUSE)
    violation(F, "meta", "an invalid key or value gave %s", rg_status_str(st));
  if (valid && st != RG_OK && st != RG_ERR_OOM)
    violation(F, "meta", "a valid key gave %s", rg_status_str(st));
  if (st == RG_OK) meta_model_set(F, key, val);
  meta_check(F, "rg_meta_set");
}

/* ---- gradcheck ------------------------------------------------------------------------- */

typedef struct gc_user { int calls, fail_at, kind; } gc_user;

static rg_tensor gc_loss(rg_ctx *ctx, void *user) {
  gc_user *u = user;
  u->calls++;
  if (u->fail_at && u->calls == u->fail_at) {
    if (u->kind & 1) rg_raise(ctx, RG_ERR_MISUSE, "fuzz: the loss fails on call %d", u->calls);
    return RG_NONE;
  }
  rg_tensor acc = RG_NONE;
  int n = rg_param_count(ctx);
  for (int i = 0; i < n && i < 3; i++) {
    rg_tensor p = rg_param_at(ctx, i);
    rg_tensor t = rg_mean(ctx, rg_mul(ctx, p, p), RG_ALL_AXES, 0);
    acc = acc.id ? rg_add(ctx, acc, t) : t;
  }
  if (u->kind == 2) acc = rg_tanh(ctx, acc);
  if (u->kind == 3 && n) acc = rg_param_at(ctx, 0); /* maybe not a scalar */
  return acc;
}

static void op_gradcheck(fz *F) {
  static const double eps[] = {1e-2, 1e-3, 1e-2, 0, -1, NAN};
  gc_user u = {0, u8(F) % 3 ? 0 : 1 + below(F, 12), below(F, 4)};
  double e = eps[below(F, 6)];
  int64_t total = 0;
  for (int i = 0; i < rg_param_count(F->ctx); i++)
    total += rg_numel(F->ctx, rg_param_at(F->ctx, i));
  int64_t max_elems = 1 + below(F, 3);
  if (total <= 64 && u8(F) & 1) max_elems = 0;
  int null_fn = below(F, 16) == 0, null_out = below(F, 16) == 0;
  rg_gradcheck_result out;
  pre(F, "rg_gradcheck");
  rg_status st = rg_gradcheck(F->ctx, null_fn ? NULL : gc_loss, &u, e, max_elems,
                              null_out ? NULL : &out);
  post_st(F, st);
  S_verify(F, "after rg_gradcheck (parameters must be restored exactly)");
}

/* ---- resgrad_nn.h ---------------------------------------------------------------------- */

static int64_t nsize(fz *F) {
  static const int64_t t[] = {1, 2, 3, 4, 4, 8, 2, 0, -1, 6};
  return t[below(F, 10)];
}

static void nn_name(fz *F, char *buf, size_t cap) {
  if (below(F, 12) == 0) buf[0] = 0;
  else snprintf(buf, cap, "n%d", below(F, 6));
}

static void note_lin(fz *F, const rg_nn_linear *l, int k) {
  note(F, l->w, k, 0);
  note(F, l->b, k + 1, 1);
}

static void op_nn(fz *F) {
  char name[32];
  nn_name(F, name, sizeof name);
  int kind = below(F, 6), init = u8(F) % 3 == 0;
  float std = u8(F) & 1 ? 0.02f : fval(F);
  rg_ctx *ctx = F->ctx;
  rg_status st;
  rg_tensor x, r;
  shp s = {RG_F32, 3, {1 + below(F, 2), 1 + below(F, 4), 0}};
  switch (kind) {
  case 0:
    if (init || !F->have_lin) {
      int64_t in = nsize(F), out = nsize(F);
      pre(F, "rg_nn_linear_init");
      st = rg_nn_linear_init(ctx, &F->lin, name, in, out, u8(F) & 1, std);
      post_st(F, st);
      F->have_lin = st == RG_OK;
      F->lin_in = in;
      return;
    }
    s.d[2] = u8(F) % 8 ? F->lin_in : dimval(F);
    x = operand(F, &s);
    pre(F, "rg_nn_linear_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note_lin(F, &F->lin, 2);
    r = rg_nn_linear_forward(ctx, &F->lin, x);
    break;
  case 1:
    if (init || !F->have_emb) {
      int64_t num = nsize(F), dim = nsize(F);
      pre(F, "rg_nn_embedding_init");
      st = rg_nn_embedding_init(ctx, &F->emb, name, num, dim, std);
      post_st(F, st);
      F->have_emb = st == RG_OK;
      F->emb_num = num;
      return;
    }
    s.ndim = 2;
    x = operand_r(F, &s, RG_I32, F->emb_num);
    pre(F, "rg_nn_embedding_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note(F, F->emb.w, 2, 0);
    r = rg_nn_embedding_forward(ctx, &F->emb, x);
    break;
  case 2:
    if (init || !F->have_ln) {
      int64_t dim = nsize(F);
      pre(F, "rg_nn_layernorm_init");
      st = rg_nn_layernorm_init(ctx, &F->ln, name, dim, u8(F) & 1 ? 0 : fval(F));
      post_st(F, st);
      F->have_ln = st == RG_OK;
      F->ln_dim = dim;
      return;
    }
    s.d[2] = u8(F) % 8 ? F->ln_dim : dimval(F);
    x = operand(F, &s);
    pre(F, "rg_nn_layernorm_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note(F, F->ln.w, 2, 0);
    note(F, F->ln.b, 3, 0);
    r = rg_nn_layernorm_forward(ctx, &F->ln, x);
    break;
  case 3:
    if (init || !F->have_mlp) {
      int64_t w = nsize(F), h = nsize(F);
      static const float dp[] = {0, 0, 0.1f, 0.5f, 1, -0.5f};
      pre(F, "rg_nn_mlp_init");
      st = rg_nn_mlp_init(ctx, &F->mlp, name, w, h, std, std, dp[below(F, 6)]);
      post_st(F, st);
      F->have_mlp = st == RG_OK;
      F->mlp_w = w;
      return;
    }
    s.d[2] = u8(F) % 8 ? F->mlp_w : dimval(F);
    x = operand(F, &s);
    pre(F, "rg_nn_mlp_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note_lin(F, &F->mlp.c_fc, 2);
    note_lin(F, &F->mlp.c_proj, 4);
    r = rg_nn_mlp_forward(ctx, &F->mlp, x);
    break;
  case 4:
    if (init || !F->have_att) {
      int64_t w = nsize(F), h = 1 + below(F, 3) - (u8(F) % 16 == 0);
      static const float dp[] = {0, 0, 0.1f, 1, -0.5f};
      pre(F, "rg_nn_attention_init");
      st = rg_nn_attention_init(ctx, &F->att, name, w, h, std, std, dp[below(F, 5)]);
      post_st(F, st);
      F->have_att = st == RG_OK;
      F->att_w = w;
      return;
    }
    s.d[2] = u8(F) % 8 ? F->att_w : dimval(F);
    x = operand(F, &s);
    pre(F, "rg_nn_attention_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note_lin(F, &F->att.c_attn, 2);
    note_lin(F, &F->att.c_proj, 4);
    r = rg_nn_attention_forward(ctx, &F->att, x);
    break;
  default:
    if (init || !F->have_blk) {
      int64_t w = nsize(F), h = 1 + below(F, 2);
      pre(F, "rg_nn_block_init");
      st = rg_nn_block_init(ctx, &F->blk, name, w, h, std, std, u8(F) % 4 ? 0 : 0.1f);
      post_st(F, st);
      F->have_blk = st == RG_OK;
      F->blk_w = w;
      return;
    }
    s.d[2] = u8(F) % 8 ? F->blk_w : dimval(F);
    x = operand(F, &s);
    pre(F, "rg_nn_block_forward");
    F->precise = 0;
    F->composite = 1;
    note(F, x, 1, 0);
    note(F, F->blk.ln_1.w, 2, 0);
    note_lin(F, &F->blk.attn.c_attn, 3);
    note_lin(F, &F->blk.mlp.c_proj, 5);
    r = rg_nn_block_forward(ctx, &F->blk, x);
    break;
  }
  post(F, !r.id);
  track(F, r, 1);
}

static void op_gpt(fz *F) {
  rg_ctx *ctx = F->ctx;
  int k = below(F, 5);
  if (k == 0 || !F->gpt) {
    rg_gpt_config c = {nsize(F), nsize(F), below(F, 3), nsize(F), 1 + below(F, 2),
                       u8(F) % 4 ? 0 : 0.1f, 0, 0};
    if (u8(F) % 8 == 0) c.heads = nsize(F);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "g%d.", below(F, 3));
    int null_cfg = below(F, 16) == 0;
    if (F->gpt) {
      rg_gpt_free(F->gpt);
      F->gpt = NULL;
    }
    pre(F, "rg_gpt_new");
    F->gpt = rg_gpt_new(ctx, null_cfg ? NULL : &c, u8(F) & 1 ? prefix : NULL);
    post(F, !F->gpt);
    F->gpt_pgen = rg_generation(ctx, RG_POOL_PERSISTENT);
    if (F->gpt && rg_gpt_param_count(F->gpt) <= 0)
      violation(F, "gpt", "rg_gpt_param_count is %lld", (long long)rg_gpt_param_count(F->gpt));
    return;
  }
  const rg_gpt_config *c = rg_gpt_config_of(F->gpt);
  int64_t T = u8(F) % 8 ? 1 + below(F, (int)(c->block > 0 ? c->block : 1)) : dimval(F);
  shp s = {RG_I32, 2, {1 + below(F, 2), T}};
  if (u8(F) % 10 == 0) s = rand_shape(F, RG_I32);
  rg_tensor idx = operand_r(F, &s, RG_I32, c->vocab);
  rg_tensor tg = k >= 2 ? operand_r(F, &s, RG_I32, c->vocab) : RG_NONE;
  rg_tensor r;
  pre(F, k == 1 ? "rg_gpt_forward" : k == 2 ? "rg_gpt_loss" : "rg_gpt_loss_ignore");
  F->precise = 0;
  F->composite = 1;
  note(F, idx, 1, 0);
  if (k >= 2) note(F, tg, 2, 0);
  if (F->gpt_pgen != rg_generation(ctx, RG_POOL_PERSISTENT)) F->bad = 1;
  r = k == 1 ? rg_gpt_forward(F->gpt, idx)
      : k == 2 ? rg_gpt_loss(F->gpt, idx, tg) : rg_gpt_loss_ignore(F->gpt, idx, tg, -1);
  post(F, !r.id);
  track(F, r, 1);
}

/* ---- a NULL context ------------------------------------------------------------------- */

static void op_null_ctx(fz *F) {
  int64_t d[1] = {1};
  float v = 1, out;
  rg_tensor x = F->ne ? F->e[u8(F) % F->ne].h : RG_NONE;
  F->call = "NULL ctx";
  int ok = 1;
  switch (below(F, 12)) {
  case 0: ok = rg_error(NULL) == RG_ERR_MISUSE && rg_errmsg(NULL) && rg_errmsg(NULL)[0]; break;
  case 1:
    rg_clear_error(NULL);
    rg_label_push(NULL, "x");
    rg_label_pop(NULL);
    rg_set_training(NULL, 0);
    break;
  case 2: ok = rg_step_begin(NULL) == RG_ERR_MISUSE && rg_sync(NULL) == RG_ERR_MISUSE &&
               rg_reset(NULL, RG_POOL_PASS) == RG_ERR_MISUSE; break;
  case 3:
    ok = !rg_input(NULL, RG_F32, 1, d, &v).id &&
         !rg_param(NULL, "x", RG_F32, 1, d, (rg_init){0, 0, 0}).id;
    break;
  case 4:
    ok = !rg_add(NULL, x, x).id && !rg_relu(NULL, x).id && !rg_sum(NULL, x, 0, 0).id &&
         !rg_matmul(NULL, x, x).id && !rg_reshape(NULL, x, 1, d).id &&
         !rg_dropout(NULL, x, 0.5f).id;
    break;
  case 5:
    ok = rg_read(NULL, x, &out, 4) == RG_ERR_MISUSE && rg_item(NULL, x, &out) == RG_ERR_MISUSE &&
         rg_write(NULL, x, &v, 4) == RG_ERR_MISUSE;
    break;
  case 6:
    ok = rg_backward(NULL, x) == RG_ERR_MISUSE && !rg_grad(NULL, x).id &&
         rg_zero_grad(NULL) == RG_ERR_MISUSE;
    break;
  case 7:
    ok = !rg_optim_adamw(NULL, NULL) && !rg_optim_sgd(NULL, NULL) &&
         rg_clip_grad_norm(NULL, 1) == RG_ERR_MISUSE;
    rg_optim_free(NULL);
    break;
  case 8:
    ok = rg_save(NULL, ckpt, NULL) == RG_ERR_MISUSE && rg_load(NULL, ckpt, NULL) == RG_ERR_MISUSE &&
         rg_meta_set(NULL, "a", "b") == RG_ERR_MISUSE && !rg_meta_get(NULL, "a");
    break;
  case 9: {
    rg_stats s;
    rg_stats_get(NULL, &s);
    rg_stats_reset(NULL);
    ok = rg_generation(NULL, RG_POOL_PASS) == 0 && rg_ndim(NULL, x) == 0 && !rg_is_live(NULL, x) &&
         rg_param_count(NULL) == 0 && !rg_param_at(NULL, 0).id && !rg_name(NULL, x) &&
         rg_device_name(NULL) && rg_close(NULL) == RG_OK;
    break;
  }
  case 10: {
    rg_ctx *c = (rg_ctx *)&v;
    rg_options o = {.device = (rg_device)7, .quiet = 1};
    ok = rg_open(NULL, NULL) == RG_ERR_MISUSE && rg_open(&c, &o) == RG_ERR_MISUSE && c == NULL;
    break;
  }
  default:
    ok = !rg_gpt_new(NULL, NULL, NULL) && !rg_gpt_forward(NULL, x).id &&
         rg_gpt_param_count(NULL) == -1 && !rg_gpt_config_of(NULL) &&
         rg_raise(NULL, RG_ERR_IO, "x") == RG_ERR_IO &&
         rg_gradcheck(NULL, gc_loss, NULL, 1e-3, 1, NULL) == RG_ERR_MISUSE;
    rg_gpt_free(NULL);
    break;
  }
  if (!ok) violation(F, "null", "a call with a NULL context did not refuse it as documented");
}

/* A whole training step on a small model, so that long valid programs are common. */
static void op_train_step(fz *F) {
  rg_ctx *ctx = F->ctx;
  int64_t in = 1 + below(F, 4), out = 1 + below(F, 3), B = 1 + below(F, 3);
  char wn[16], bn[16];
  int id = below(F, 4);
  snprintf(wn, sizeof wn, "t%d.w", id);
  snprintf(bn, sizeof bn, "t%d.b", id);
  rg_tensor w = rg_param_find(ctx, wn), b = rg_param_find(ctx, bn);
  if (!w.id) {
    pre(F, "rg_param");
    w = rg_param(ctx, wn, RG_F32, 2, (int64_t[]){out, in}, (rg_init){RG_INIT_NORMAL, 0.5f, 0});
    post(F, !w.id);
    track(F, w, 0);
  }
  if (!b.id) {
    pre(F, "rg_param");
    b = rg_param(ctx, bn, RG_F32, 1, (int64_t[]){out}, (rg_init){RG_INIT_ZEROS, 0, 0});
    post(F, !b.id);
    track(F, b, 0);
  }
  shp sw;
  if (shape_of(F, w, &sw) && sw.ndim == 2) in = sw.d[1], out = sw.d[0];
  shp sx = {RG_F32, 2, {B, in}}, sy = {RG_F32, 2, {B, out}};
  rg_tensor x = fresh(F, sx, 0), y = fresh(F, sy, 0);
  pre(F, "rg_linear");
  rg_tensor h = rg_linear(ctx, x, w, b);
  post(F, !h.id);
  track(F, h, 1);
  pre(F, "rg_mse");
  rg_tensor l = rg_mse(ctx, u8(F) & 1 ? rg_tanh(ctx, h) : h, y);
  post(F, !l.id);
  track(F, l, 1);
  pre(F, "rg_backward");
  post_st(F, rg_backward(ctx, l));
  optent *o = pick_opt(F);
  if (o->o && u8(F) & 1) {
    if (u8(F) & 1) {
      pre(F, "rg_clip_grad_norm");
      post_st(F, rg_clip_grad_norm(ctx, 1.0f));
    }
    pre(F, "rg_optim_step");
    opt_note(F, o);
    post_st(F, rg_optim_step(o->o));
    if (o->covers && S_live(F) && o->pgen == F->Sgen) F->Sclean = 0;
  }
  float v;
  pre(F, "rg_item");
  post_st(F, rg_item(ctx, l, &v));
  if (u8(F) & 1) {
    pre(F, "rg_zero_grad");
    post_st(F, rg_zero_grad(ctx));
  }
}

/* ---- the program ---------------------------------------------------------------------- */

static void setup_tmp(void) {
  if (tmpdir[0]) return;
  /* rg_save fsyncs the file and its directory: on a disk that costs milliseconds a call,
     so the checkpoint lives in memory (/dev/shm) unless TMPDIR says where. */
  const char *base = getenv("TMPDIR");
  struct stat sb;
  if (!base || !*base)
    base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0
               ? "/dev/shm" : "/tmp";
  snprintf(tmpdir, sizeof tmpdir, "%s/rg-fuzz-api-%ld-XXXXXX", base, (long)getpid());
  if (!mkdtemp(tmpdir)) {
    perror("fuzz_api: mkdtemp");
    abort();
  }
  snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", tmpdir);
}

static void cleanup_tmp(void) {
  if (!tmpdir[0]) return;
  unlink(ckpt);
  rmdir(tmpdir);
}

/* Nothing but the checkpoint may be left in the directory (a failed save cleans up). */
static void check_tmp(fz *F) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
        !strcmp(de->d_name, "model.safetensors"))
      continue;
    F->call = "rg_save";
    closedir(d);
    violation(F, "tmpfile", "a file was left behind: %s/%s", tmpdir, de->d_name);
    return;
  }
  closedir(d);
}

static size_t budget(uint8_t b) {
  if (b < 16) return (size_t)256 << (b % 8);         /* 256 B .. 32 KB: budgets run out */
  return (size_t)64 << 10 << (b % 7);                /* 64 KB .. 4 MB */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (verbose < 0) {
    verbose = getenv("RG_FUZZ_VERBOSE") && *getenv("RG_FUZZ_VERBOSE") == '1';
    tolerate = getenv("RG_FUZZ_TOLERATE");
    setup_tmp();
    atexit(cleanup_tmp);
  }
  fz *F = calloc(1, sizeof *F);
  if (!F) abort();
  F->p = data;
  F->n = size;
  uint8_t h[HEADER] = {0};
  for (int i = 0; i < HEADER && F->pos < size; i++) h[i] = data[F->pos++];
  unlink(ckpt);

  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1};
  o.check = h[0] & 1;
  o.check_finite = h[0] >> 1 & 1;
  o.threads = h[0] >> 3 & 1 ? 2 : 1;
  o.bf16 = h[0] >> 6 & 1; /* bf16 activations, widening casts, parameters' shadows */
  o.pass_budget = F->pass_budget = budget(h[1]);
  o.persistent_budget = F->pers_budget = budget(h[2]);
  o.max_queued = h[3] < 200 ? 0 : (size_t)(h[3] - 199);
  o.seed = (uint64_t)h[4] | (uint64_t)h[5] << 8;
  rg_status st = rg_open(&F->ctx, &o);
  if (st != RG_OK || !F->ctx) {
    fprintf(stderr, "fuzz_api: rg_open(CPU) failed: %s\n", rg_status_str(st));
    abort();
  }
  if (h[0] >> 4 & 1) F->ctx->alloc_fail_at = F->ctx->alloc_count + 1 + ((size_t)h[6] << 8 | h[7]);
  if (h[0] >> 5 & 1) rg_set_training(F->ctx, 0);

  int op;
  while (F->ncalls < MAXCALLS && (op = next_record(F))) {
    F->ncalls++;
    switch ((op - 1) % OP_COUNT) {
    case OP_INPUT: op_input(F); break;
    case OP_PARAM: op_param(F); break;
    case OP_UNARY: op_unary(F); break;
    case OP_BINARY: op_binary(F); break;
    case OP_REDUCE: op_reduce(F); break;
    case OP_MATMUL: op_matmul(F); break;
    case OP_LINEAR: op_linear(F); break;
    case OP_NORM: op_norm(F); break;
    case OP_EMBEDDING: op_embedding(F); break;
    case OP_ATTENTION: op_attention(F); break;
    case OP_XENT: op_xent(F); break;
    case OP_MSE: op_mse(F); break;
    case OP_RESHAPE: op_reshape(F); break;
    case OP_PERMUTE: op_permute(F); break;
    case OP_SLICE: op_slice(F); break;
    case OP_CONCAT: op_concat(F); break;
    case OP_BACKWARD: op_backward(F); break;
    case OP_GRAD: op_grad(F); break;
    case OP_ZERO_GRAD: op_simple(F, 0); break;
    case OP_STEP_BEGIN: op_simple(F, 1); break;
    case OP_RESET: op_reset(F); break;
    case OP_SYNC: op_simple(F, 2); break;
    case OP_READ: op_read(F); break;
    case OP_ITEM: op_item(F); break;
    case OP_WRITE: op_write(F); break;
    case OP_QUERY: op_query(F); break;
    case OP_PARAMS: op_params(F); break;
    case OP_OPTIM_NEW: op_optim_new(F); break;
    case OP_OPTIM_STEP: op_optim_step(F); break;
    case OP_OPTIM_LR: op_optim_lr(F); break;
    case OP_OPTIM_FREE: op_optim_free(F); break;
    case OP_CLIP: op_clip(F); break;
    case OP_LABEL: op_label(F); break;
    case OP_MODE: op_mode(F); break;
    case OP_SAVE: op_save(F); break;
    case OP_LOAD: op_load(F); break;
    case OP_ROUNDTRIP: op_roundtrip(F); break;
    case OP_CORRUPT: op_corrupt(F); break;
    case OP_META: op_meta(F); break;
    case OP_STATS: op_stats(F); break;
    case OP_CLEAR: op_clear(F); break;
    case OP_RAISE: op_raise(F); break;
    case OP_FORGE: op_forge(F); break;
    case OP_SENTINEL: S_make(F); break;
    case OP_GRADCHECK: op_gradcheck(F); break;
    case OP_ALLOC_FAIL: op_alloc_fail(F); break;
    case OP_NN: op_nn(F); break;
    case OP_GPT: op_gpt(F); break;
    case OP_NULL_CTX: op_null_ctx(F); break;
    default: op_train_step(F); break;
    }
    if (F->ne && F->ncalls % 4 == 0) check_entry(F, &F->e[(unsigned)F->ncalls % (unsigned)F->ne]);
  }

  /* The end: the sentinel is intact, then everything goes (LeakSanitizer / valgrind check
     that rg_close freed it all, optimizers not freed by the program included). */
  F->ctx->alloc_fail_at = 0;
  S_verify(F, "at the end");
  for (int i = 0; i < NOPT; i++)
    if (F->opt[i].o && (h[8] >> i & 1)) rg_optim_free(F->opt[i].o);
  rg_gpt_free(F->gpt);
  F->call = "rg_close";
  st = rg_close(F->ctx);
  if (st > 0 || st < RG_ERR_FAILED) violation(F, "status", "rg_close returned %d", (int)st);
  F->ctx = NULL;
  check_tmp(F);
  unlink(ckpt);
  free(F);
  return 0;
}
