/*
 * context.c - contexts as R external pointers, their options, counters and barriers.
 *
 * See rgr.h for the lifetime rules: a context's external pointer is kept alive by every
 * tensor, optimizer and model R can reach; its finalizer (also run when R exits) closes
 * the library's context once no optimizer or model holder needs it.
 */
#include "rgr.h"

#include <stdlib.h>
#include <string.h>

static void ctx_free_if_unused(rgr_ctx *h) {
  if (!h->r_gone || h->users > 0) return;
  if (h->ctx) rg_close(h->ctx);
  free(h);
}

static void ctx_finalize(SEXP p) {
  rgr_ctx *h = R_ExternalPtrAddr(p);
  if (!h) return;
  R_ClearExternalPtr(p);
  h->r_gone = 1;
  ctx_free_if_unused(h);
}

void rgr_user_add(rgr_ctx *h) { h->users++; }

void rgr_user_drop(rgr_ctx *h) {
  h->users--;
  ctx_free_if_unused(h);
}

void *rgr_addr_of(SEXP p, const char *cls, const char *what, const char *remedy) {
  if (TYPEOF(p) != EXTPTRSXP || !Rf_inherits(p, cls))
    rgr_signal(RG_ERR_MISUSE, "not a resgrad %s (%s)", what, remedy);
  void *addr = R_ExternalPtrAddr(p);
  if (!addr)
    rgr_signal(RG_ERR_MISUSE, "this resgrad %s no longer exists (it was restored from a "
               "saved R session, or finalized): %s", what, remedy);
  return addr;
}

rgr_ctx *rgr_holder(SEXP cx) {
  return rgr_addr_of(cx, "ag_context", "context", "open one with ag_device()");
}

rg_ctx *rgr_ctx_ptr(SEXP cx) {
  rgr_ctx *h = rgr_holder(cx);
  if (!h->ctx)
    rgr_signal(RG_ERR_MISUSE, "this resgrad context was closed (ag_close): its tensors, "
               "optimizers and models can no longer be used; open one with ag_device()");
  return h->ctx;
}

SEXP rgr_default_ctx(void) {
  SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("resgrad"))));
  SEXP call = PROTECT(Rf_lang1(Rf_install(".rg_default_ctx")));
  SEXP cx = Rf_eval(call, ns); /* kept in the package's state environment */
  UNPROTECT(3);
  return cx;
}

SEXP rgr_ctx_of_args(SEXP *ts, int n) {
  SEXP cx = R_NilValue;
  for (int i = 0; i < n; i++) {
    if (!rgr_is_tensor(ts[i])) continue;
    SEXP c = rgr_ctx_of(ts[i]);
    if (cx == R_NilValue)
      cx = c;
    else if (c != cx)
      rgr_signal(RG_ERR_MISUSE, "the tensors given belong to two different contexts "
                 "(ag_device opened a new one): use tensors of one context together");
  }
  return cx == R_NilValue ? rgr_default_ctx() : cx;
}

static int opt_int(SEXP opts, const char *name, int dflt) {
  SEXP names = Rf_getAttrib(opts, R_NamesSymbol);
  for (R_xlen_t i = 0; i < Rf_xlength(opts); i++)
    if (!strcmp(CHAR(STRING_ELT(names, i)), name)) {
      SEXP v = VECTOR_ELT(opts, i);
      if (v == R_NilValue) return dflt;
      return Rf_asInteger(v);
    }
  return dflt;
}

/* The element of opts named name, or R_NilValue. */
static SEXP opt_get(SEXP opts, const char *name) {
  SEXP names = Rf_getAttrib(opts, R_NamesSymbol);
  for (R_xlen_t i = 0; i < Rf_xlength(opts); i++)
    if (!strcmp(CHAR(STRING_ELT(names, i)), name)) return VECTOR_ELT(opts, i);
  return R_NilValue;
}

static double opt_num(SEXP opts, const char *name) {
  SEXP names = Rf_getAttrib(opts, R_NamesSymbol);
  for (R_xlen_t i = 0; i < Rf_xlength(opts); i++)
    if (!strcmp(CHAR(STRING_ELT(names, i)), name)) {
      SEXP v = VECTOR_ELT(opts, i);
      return v == R_NilValue ? 0 : Rf_asReal(v);
    }
  return 0;
}

SEXP rgr_open(SEXP device, SEXP opts) {
  const char *dev = CHAR(STRING_ELT(device, 0));
  rg_options o;
  memset(&o, 0, sizeof o);
  if (!strcmp(dev, "cpu"))
    o.device = RG_DEVICE_CPU;
  else if (!strcmp(dev, "cuda") || !strcmp(dev, "gpu"))
    o.device = RG_DEVICE_CUDA;
  else if (!strcmp(dev, "auto"))
    o.device = RG_DEVICE_AUTO;
  else
    rgr_signal(RG_ERR_MISUSE, "ag_device: device \"%s\" is not one of \"cpu\", \"cuda\", "
               "\"auto\"", dev);
  o.device_index = opt_int(opts, "device_index", 0);
  o.seed = (uint64_t)opt_num(opts, "seed");
  o.check = opt_int(opts, "check", 0);
  o.threads = opt_int(opts, "threads", 0);
  o.quiet = opt_int(opts, "quiet", 1);
  /* trace: TRUE/1 prints each drained node; a file name writes a Chrome trace there. */
  SEXP trace = opt_get(opts, "trace");
  if (Rf_isString(trace)) {
    if (XLENGTH(trace) != 1 || STRING_ELT(trace, 0) == NA_STRING)
      rgr_signal(RG_ERR_MISUSE, "ag_device: trace must be TRUE, FALSE or one file name");
    o.trace_path = Rf_translateChar(STRING_ELT(trace, 0));
  } else {
    o.trace = opt_int(opts, "trace", 0);
  }
  o.tf32 = opt_int(opts, "tf32", 0);
  o.bf16 = opt_int(opts, "bf16", 0);
  o.check_finite = opt_int(opts, "check_finite", 0);
  o.pass_budget = (size_t)opt_num(opts, "pass_budget");
  o.persistent_budget = (size_t)opt_num(opts, "persistent_budget");
  o.max_pass_nodes = (size_t)opt_num(opts, "max_pass_nodes");
  rgr_ctx *h = calloc(1, sizeof *h);
  if (!h) rgr_signal(RG_ERR_OOM, "ag_device: out of host memory");
  rg_status st = rg_open(&h->ctx, &o);
  if (st != RG_OK) {
    free(h);
    rgr_signal(st, "ag_device(\"%s\"): the context could not be opened (%s)%s", dev,
               rg_status_str(st),
               st == RG_ERR_UNSUPPORTED ? ": this build or machine has no CUDA device; "
                                          "use ag_device(\"cpu\") or \"auto\""
               : st == RG_ERR_IO ? ": the trace file cannot be written; give a path in a "
                                   "writable folder"
                                 : "");
  }
  return rgr_make_ptr(h, R_NilValue, ctx_finalize, "ag_context");
}

SEXP rgr_make_ptr(void *addr, SEXP prot, R_CFinalizer_t fin, const char *cls) {
  SEXP p = PROTECT(R_MakeExternalPtr(addr, R_NilValue, prot));
  R_RegisterCFinalizerEx(p, fin, TRUE);
  Rf_setAttrib(p, R_ClassSymbol, Rf_mkString(cls));
  UNPROTECT(1);
  return p;
}

SEXP rgr_close(SEXP cx) {
  rgr_ctx *h = rgr_holder(cx);
  rg_status st = RG_OK;
  if (h->ctx) {
    st = rg_close(h->ctx); /* frees the optimizers too: their holders see ctx == NULL */
    h->ctx = NULL;
  }
  return Rf_ScalarString(Rf_mkChar(rg_status_str(st)));
}

SEXP rgr_ctx_info(SEXP cx) {
  rgr_ctx *h = rgr_holder(cx);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, 3));
  SET_STRING_ELT(nm, 0, Rf_mkChar("name"));
  SET_STRING_ELT(nm, 1, Rf_mkChar("kind"));
  SET_STRING_ELT(nm, 2, Rf_mkChar("open"));
  SET_VECTOR_ELT(out, 0, Rf_mkString(h->ctx ? rg_device_name(h->ctx) : "closed"));
  SET_VECTOR_ELT(out, 1, Rf_mkString(!h->ctx ? "none"
                                     : rg_device_kind(h->ctx) == RG_DEVICE_CUDA ? "cuda"
                                                                               : "cpu"));
  SET_VECTOR_ELT(out, 2, Rf_ScalarLogical(h->ctx != NULL));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

SEXP rgr_step_begin(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_step_begin(ctx));
  return R_NilValue;
}

SEXP rgr_sync(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_sync(ctx));
  return R_NilValue;
}

SEXP rgr_set_training(SEXP cx, SEXP on) {
  rg_set_training(rgr_ctx_ptr(cx), Rf_asLogical(on) == TRUE);
  return R_NilValue;
}

SEXP rgr_set_check_finite(SEXP cx, SEXP on) {
  rg_set_check_finite(rgr_ctx_ptr(cx), Rf_asLogical(on) == TRUE);
  return R_NilValue;
}

SEXP rgr_generation(SEXP cx, SEXP pool) {
  return Rf_ScalarReal((double)rg_generation(rgr_ctx_ptr(cx), (rg_pool)Rf_asInteger(pool)));
}

static const char *const stat_names[] = {
    "up_count", "up_bytes", "down_count", "down_bytes", "nodes_recorded", "nodes_executed",
    "launches", "drains", "graph_captures", "graph_replays", "graph_misses",
    "pass_bytes", "pass_peak", "persistent_bytes", "persistent_peak", "device_bytes",
    "device_peak"};

SEXP rgr_stats(SEXP cx) {
  rg_stats s;
  rg_stats_get(rgr_ctx_ptr(cx), &s);
  const double v[] = {(double)s.up.count, (double)s.up.bytes, (double)s.down.count,
                      (double)s.down.bytes, (double)s.nodes_recorded,
                      (double)s.nodes_executed, (double)s.launches, (double)s.drains,
                      (double)s.graph_captures, (double)s.graph_replays,
                      (double)s.graph_misses, (double)s.pass_bytes, (double)s.pass_peak,
                      (double)s.persistent_bytes, (double)s.persistent_peak,
                      (double)s.device_bytes, (double)s.device_peak};
  return rgr_named_reals(stat_names, v, (int)(sizeof v / sizeof v[0]));
}

SEXP rgr_stats_reset(SEXP cx) {
  rg_stats_reset(rgr_ctx_ptr(cx));
  return R_NilValue;
}

SEXP rgr_reset(SEXP cx, SEXP pool) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_reset(ctx, (rg_pool)Rf_asInteger(pool)));
  return R_NilValue;
}

SEXP rgr_device_memory(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  size_t avail = 0, total = 0;
  rgr_check(ctx, rg_device_memory(ctx, &avail, &total));
  static const char *const names[] = {"available", "total"};
  const double v[] = {(double)avail, (double)total};
  return rgr_named_reals(names, v, 2);
}

SEXP rgr_label_push(SEXP cx, SEXP label) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  if (!Rf_isString(label) || XLENGTH(label) != 1 || STRING_ELT(label, 0) == NA_STRING)
    rgr_signal(RG_ERR_MISUSE, "ag_with_label: label must be one string");
  rg_label_push(ctx, Rf_translateCharUTF8(STRING_ELT(label, 0)));
  return R_NilValue;
}

SEXP rgr_label_pop(SEXP cx) {
  rg_label_pop(rgr_ctx_ptr(cx));
  return R_NilValue;
}

/* rg_dump_handles' lines, in two passes: one measures them, the second copies them into R's
   transient memory (freed when the call ends or unwinds). The callbacks run inside the
   library, where an R allocation's error would unwind past it, so they allocate nothing;
   nothing changes the context between the passes. */
typedef struct dump_buf { char *text; size_t len, cap; int lines; } dump_buf;

static void dump_line(void *user, const char *text) {
  dump_buf *b = user;
  size_t n = strlen(text) + 1;
  if (b->text) {
    if (b->len + n > b->cap) return;
    memcpy(b->text + b->len, text, n);
  }
  b->len += n;
  b->lines++;
}

SEXP rgr_dump_handles(SEXP cx, SEXP pool) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int p = Rf_asInteger(pool);
  dump_buf b = {NULL, 0, 0, 0};
  rg_dump_handles(ctx, p, dump_line, &b);
  b.cap = b.len;
  b.text = R_alloc(b.cap + 1, 1);
  b.len = 0;
  b.lines = 0;
  rg_dump_handles(ctx, p, dump_line, &b);
  SEXP out = PROTECT(Rf_allocVector(STRSXP, b.lines));
  const char *text = b.text;
  for (int i = 0; i < b.lines; i++) {
    SET_STRING_ELT(out, i, Rf_mkCharCE(text, CE_UTF8));
    text += strlen(text) + 1;
  }
  UNPROTECT(1);
  return out;
}
