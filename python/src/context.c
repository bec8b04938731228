/*
 * context.c - resgrad.Context: one device with its pools, queue and counters (rg_ctx).
 *
 * Calls that may wait for the device (barriers: sync, step_begin, save, close...) release
 * the GIL; recording calls keep it (they return at once).
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

PyTypeObject *rgpy_Context;

static RgContext *usable(PyObject *self) {
  RgContext *co = (RgContext *)self;
  return rgpy_usable(co) < 0 ? NULL : co;
}

static PyObject *status_or_raise(RgContext *co, rg_status st) {
  if (st != RG_OK) return rgpy_raise(co);
  Py_RETURN_NONE;
}

static int parse_device(PyObject *o, rg_options *opt) {
  if (!o || o == Py_None) return 0;
  Py_ssize_t n;
  const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : NULL;
  if (!s) {
    PyErr_SetString(PyExc_TypeError, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'");
    return -1;
  }
  if (strcmp(s, "auto") == 0) opt->device = RG_DEVICE_AUTO;
  else if (strcmp(s, "cpu") == 0) opt->device = RG_DEVICE_CPU;
  else if (strncmp(s, "cuda", 4) == 0 && (s[4] == 0 || s[4] == ':')) {
    opt->device = RG_DEVICE_CUDA;
    if (s[4] == ':') {
      char *end;
      long i = strtol(s + 5, &end, 10);
      if (*end || end == s + 5 || i < 0) goto bad;
      opt->device_index = (int)i;
    }
  } else
    goto bad;
  return 0;
bad:
  PyErr_Format(PyExc_ValueError, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', not %R",
               o);
  return -1;
}

static int context_init(PyObject *self, PyObject *args, PyObject *kw) {
  RgContext *co = (RgContext *)self;
  static char *names[] = {"device", "seed", "threads", "pass_budget", "persistent_budget",
                          "check", "max_queued", "quiet", "trace", "tf32", "bf16",
                          "check_finite", "no_cudnn", "gemm_tune", "dry_run",
                          "nonfinite_checkpoints", "max_pass_nodes", NULL};
  PyObject *device = NULL, *trace = NULL, *trace_path = NULL;
  unsigned long long seed = 0;
  Py_ssize_t pass_budget = 0, persistent_budget = 0, max_queued = 0, max_pass_nodes = 0;
  rg_options o = {0};
  if (co->ctx) {
    PyErr_SetString(rgpy_Error, "the context is already open");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$KinnpnpOpppppippn", names, &device, &seed,
                                   &o.threads, &pass_budget, &persistent_budget, &o.check,
                                   &max_queued, &o.quiet, &trace, &o.tf32, &o.bf16,
                                   &o.check_finite, &o.no_cudnn, &o.gemm_tune, &o.dry_run,
                                   &o.nonfinite_checkpoints, &max_pass_nodes))
    return -1;
  if (parse_device(device, &o) < 0) return -1;
  /* trace: True prints each drained node; a path writes a Chrome trace file there. */
  if (trace && (PyUnicode_Check(trace) || PyBytes_Check(trace) ||
                PyObject_HasAttrString(trace, "__fspath__"))) {
    if (!PyUnicode_FSConverter(trace, &trace_path)) return -1;
    o.trace_path = PyBytes_AsString(trace_path);
  } else if (trace && (o.trace = PyObject_IsTrue(trace)) < 0) {
    return -1;
  }
  if (pass_budget < 0 || persistent_budget < 0 || max_queued < 0 || max_pass_nodes < 0) {
    PyErr_SetString(PyExc_ValueError, "budgets and limits are byte or node counts >= 0");
    return -1;
  }
  o.seed = seed;
  o.pass_budget = (size_t)pass_budget;
  o.persistent_budget = (size_t)persistent_budget;
  o.max_queued = (size_t)max_queued;
  o.max_pass_nodes = (size_t)max_pass_nodes;
  if (!co->consts && !(co->consts = PyDict_New())) return -1;
  rg_ctx *ctx = NULL;
  rg_status st;
  Py_BEGIN_ALLOW_THREADS
  st = rg_open(&ctx, &o);
  Py_END_ALLOW_THREADS
  Py_XDECREF(trace_path);
  if (st != RG_OK) {
    rgpy_raise_status(st, st == RG_ERR_UNSUPPORTED
                              ? "rg_open: this device is not available in this build or on "
                                "this machine (device='cpu' always is)"
                          : st == RG_ERR_IO ? "rg_open: the trace file cannot be written"
                                            : "rg_open failed");
    return -1;
  }
  co->ctx = ctx;
  return 0;
}

/* Closes the context; on a failed last drain raises with its message (the context is
   closed either way). */
static PyObject *context_close(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = (RgContext *)self;
  if (!co->ctx) Py_RETURN_NONE;
  if (co->busy) return rgpy_usable(co), NULL;
  if (co->exports > 0)
    return PyErr_Format(rgpy_Error,
                        "close: %ld DLPack export(s) of this context's tensors are still "
                        "alive; drop the arrays that share its memory (or copy them) first",
                        co->exports);
  rg_status st;
  RGPY_WAIT(co, st = rg_sync(co->ctx));
  PyObject *err = NULL;
  if (st != RG_OK) err = PyUnicode_FromString(rg_errmsg(co->ctx));
  rg_ctx *c = co->ctx;
  co->ctx = NULL;
  Py_BEGIN_ALLOW_THREADS
  rg_close(c);
  Py_END_ALLOW_THREADS
  PyDict_Clear(co->consts);
  if (err) {
    Py_ssize_t n;
    rgpy_raise_status(st, PyUnicode_AsUTF8AndSize(err, &n));
    Py_DECREF(err);
    return NULL;
  }
  Py_RETURN_NONE;
}

static void context_dealloc(PyObject *self) {
  RgContext *co = (RgContext *)self;
  if (co->ctx) {
    rg_ctx *c = co->ctx;
    co->ctx = NULL;
    Py_BEGIN_ALLOW_THREADS
    rg_close(c);
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(co->consts);
  rgpy_free_object(self, NULL);
}

static PyObject *context_enter(PyObject *self, PyObject *unused) {
  (void)unused;
  if (!usable(self)) return NULL;
  Py_INCREF(self);
  return self;
}

static PyObject *context_exit(PyObject *self, PyObject *args) {
  (void)args;
  PyObject *r = context_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

/* ---- steps and pools ------------------------------------------------------------------ */

static int parse_pool(PyObject *o, rg_pool *out) {
  Py_ssize_t n;
  const char *s = o && PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : NULL;
  if (s && strcmp(s, "pass") == 0) *out = RG_POOL_PASS;
  else if (s && strcmp(s, "persistent") == 0) *out = RG_POOL_PERSISTENT;
  else {
    PyErr_SetString(PyExc_ValueError, "pool must be 'pass' or 'persistent'");
    return -1;
  }
  return 0;
}

static PyObject *context_step_begin(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_status st;
  RGPY_WAIT(co, st = rg_step_begin(co->ctx));
  return status_or_raise(co, st);
}

static PyObject *context_sync(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_status st;
  RGPY_WAIT(co, st = rg_sync(co->ctx));
  return status_or_raise(co, st);
}

static PyObject *context_reset(PyObject *self, PyObject *arg) {
  RgContext *co = usable(self);
  rg_pool p;
  if (!co || parse_pool(arg, &p) < 0) return NULL;
  rg_status st;
  RGPY_WAIT(co, st = rg_reset(co->ctx, p));
  if (p == RG_POOL_PERSISTENT) PyDict_Clear(co->consts);
  return status_or_raise(co, st);
}

static PyObject *context_generation(PyObject *self, PyObject *arg) {
  RgContext *co = usable(self);
  rg_pool p;
  if (!co || parse_pool(arg, &p) < 0) return NULL;
  return PyLong_FromUnsignedLongLong(rg_generation(co->ctx, p));
}

static PyObject *context_train(PyObject *self, PyObject *args) {
  int on = 1;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "|p", &on)) return NULL;
  rg_set_training(co->ctx, on);
  Py_INCREF(self);
  return self;
}

static PyObject *context_eval(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_set_training(co->ctx, 0);
  Py_INCREF(self);
  return self;
}

static PyObject *context_check_finite(PyObject *self, PyObject *args) {
  int on = 1;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "p", &on)) return NULL;
  rg_set_check_finite(co->ctx, on);
  Py_RETURN_NONE;
}

/* ---- values ----------------------------------------------------------------------------- */

static PyObject *make_tensor(PyObject *self, PyObject *args, PyObject *kw, int persistent) {
  static char *names[] = {"data", "dtype", NULL};
  PyObject *data, *dtype = NULL;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTupleAndKeywords(args, kw, "O|O", names, &data, &dtype)) return NULL;
  if (PyObject_TypeCheck(data, rgpy_Tensor) && !persistent && (!dtype || dtype == Py_None)) {
    if (((RgTensor *)data)->co != co)
      return PyErr_Format(rgpy_Error, "tensor: the tensor belongs to another context; copy it "
                                      "through the host with ctx.tensor(t.numpy())");
    Py_INCREF(data); /* already a tensor of this context: no copy, no upload */
    return data;
  }
  return rgpy_from_host(co, data, dtype == Py_None ? NULL : dtype, persistent);
}

static PyObject *context_tensor(PyObject *self, PyObject *args, PyObject *kw) {
  return make_tensor(self, args, kw, 0);
}

static PyObject *context_constant(PyObject *self, PyObject *args, PyObject *kw) {
  return make_tensor(self, args, kw, 1);
}

static PyObject *context_param(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"name", "shape", "init", "a", "b", "dtype", NULL};
  static const RgEnum kinds[] = {{"zeros", RG_INIT_ZEROS}, {"ones", RG_INIT_ONES},
                                 {"normal", RG_INIT_NORMAL}, {"uniform", RG_INIT_UNIFORM},
                                 {"const", RG_INIT_CONST}, {NULL, 0}};
  const char *name;
  PyObject *shape, *init = NULL, *dtype = NULL;
  float a = 0, b = 0;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTupleAndKeywords(args, kw, "sO|OffO", names, &name, &shape, &init, &a,
                                          &b, &dtype))
    return NULL;
  int64_t dims[RG_MAX_DIMS];
  int nd;
  rg_dtype dt = RG_F32;
  long long kind = RG_INIT_ZEROS;
  int data = init && !PyUnicode_Check(init);
  if (rgpy_dims_arg(shape, "shape", dims, &nd) < 0 ||
      (dtype && dtype != Py_None && rgpy_dtype_arg(dtype, &dt) < 0) ||
      (init && !data && rgpy_enum_arg(init, "init", kinds, &kind) < 0))
    return NULL;
  rg_tensor t = rg_param(co->ctx, name, dt, nd, dims, (rg_init){(int)kind, a, b});
  PyObject *r = rgpy_result(co, t);
  if (r && data) { /* init given as values: write them (a barrier) */
    PyObject *w = PyObject_CallMethod(r, "write", "O", init);
    if (!w) Py_CLEAR(r);
    Py_XDECREF(w);
  }
  return r;
}

static PyObject *context_params(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  PyObject *d = PyDict_New();
  int n = rg_param_count(co->ctx);
  for (int i = 0; d && i < n; i++) {
    rg_tensor t = rg_param_at(co->ctx, i);
    PyObject *v = rgpy_wrap(co, t);
    if (!v || PyDict_SetItemString(d, rg_name(co->ctx, t), v) < 0) Py_CLEAR(d);
    Py_XDECREF(v);
  }
  return d;
}

/* ---- autograd and optimisation ------------------------------------------------------------ */

static PyObject *context_zero_grad(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  return co ? status_or_raise(co, rg_zero_grad(co->ctx)) : NULL;
}

static PyObject *context_backward(PyObject *self, PyObject *loss) {
  RgContext *co = usable(self);
  rg_tensor t;
  if (!co || rgpy_tensor_arg(co, loss, "loss", 0, &t) < 0) return NULL;
  return status_or_raise(co, rg_backward(co->ctx, t));
}

static PyObject *context_ckpt_begin(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  return co ? status_or_raise(co, rg_checkpoint_begin(co->ctx)) : NULL;
}

static PyObject *context_ckpt_end(PyObject *self, PyObject *args) {
  PyObject *out = Py_None;
  RgContext *co = usable(self);
  rg_tensor t;
  if (!co || !PyArg_ParseTuple(args, "|O", &out) ||
      rgpy_tensor_arg(co, out, "out", 1, &t) < 0)
    return NULL;
  if (rg_checkpoint_end(co->ctx, t) != RG_OK) return rgpy_raise(co);
  Py_INCREF(out);
  return out;
}

/* checkpoint(fn, *args, **kw): fn's result as the output of a region around fn; a region
   whose fn raises (or returns no Tensor) is closed giving nothing back. */
static PyObject *context_ckpt(PyObject *self, PyObject *args, PyObject *kw) {
  RgContext *co = usable(self);
  Py_ssize_t n = PyTuple_Size(args);
  if (!co) return NULL;
  if (n < 1) {
    PyErr_SetString(PyExc_TypeError, "checkpoint(fn, *args, **kwargs) needs fn");
    return NULL;
  }
  PyObject *rest = PyTuple_GetSlice(args, 1, n);
  if (!rest) return NULL;
  if (rg_checkpoint_begin(co->ctx) != RG_OK) {
    Py_DECREF(rest);
    return rgpy_raise(co);
  }
  PyObject *r = PyObject_Call(PyTuple_GetItem(args, 0), rest, kw);
  Py_DECREF(rest);
  rg_tensor t = RG_NONE;
  if (r && (Py_TYPE(r) != rgpy_Tensor || rgpy_tensor_arg(co, r, "fn's result", 0, &t) < 0)) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "checkpoint: fn must return a Tensor (the region's "
                      "output)");
    Py_CLEAR(r);
  }
  rg_status st = rg_checkpoint_end(co->ctx, t);
  if (r && st != RG_OK) {
    Py_DECREF(r);
    return rgpy_raise(co);
  }
  return r;
}

static PyObject *context_clip_norm(PyObject *self, PyObject *arg) {
  RgContext *co = usable(self);
  double v;
  if (!co || rgpy_float_arg(arg, "max_norm", &v) < 0) return NULL;
  return status_or_raise(co, rg_clip_grad_norm(co->ctx, (float)v));
}

static PyObject *context_clip_value(PyObject *self, PyObject *arg) {
  RgContext *co = usable(self);
  double v;
  if (!co || rgpy_float_arg(arg, "max_abs", &v) < 0) return NULL;
  return status_or_raise(co, rg_clip_grad_value(co->ctx, (float)v));
}

/* ---- checkpoints and metadata ------------------------------------------------------------ */

static PyObject *save_load(PyObject *self, PyObject *args, PyObject *kw, int load) {
  static char *names[] = {"path", "optim", NULL};
  PyObject *path = NULL, *opt = Py_None;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTupleAndKeywords(args, kw, "O&|O", names, PyUnicode_FSConverter,
                                          &path, &opt))
    return NULL;
  rg_optim *o = NULL;
  if (opt != Py_None) {
    if (!(o = rgpy_optim_of(opt, co))) {
      Py_DECREF(path);
      return NULL;
    }
  }
  Py_ssize_t n;
  char *p;
  PyBytes_AsStringAndSize(path, &p, &n);
  rg_status st;
  if (load)
    RGPY_WAIT(co, st = rg_load(co->ctx, p, o));
  else
    RGPY_WAIT(co, st = rg_save(co->ctx, p, o));
  Py_DECREF(path);
  return status_or_raise(co, st);
}

static PyObject *context_save(PyObject *self, PyObject *args, PyObject *kw) {
  return save_load(self, args, kw, 0);
}

static PyObject *context_load(PyObject *self, PyObject *args, PyObject *kw) {
  return save_load(self, args, kw, 1);
}

static PyObject *context_set_meta(PyObject *self, PyObject *args) {
  const char *k, *v;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "ss", &k, &v)) return NULL;
  return status_or_raise(co, rg_meta_set(co->ctx, k, v));
}

static PyObject *context_get_meta(PyObject *self, PyObject *args) {
  const char *k;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "s", &k)) return NULL;
  const char *v = rg_meta_get(co->ctx, k);
  if (!v) Py_RETURN_NONE;
  return PyUnicode_FromString(v);
}

/* ---- labels, inspection, counters --------------------------------------------------------- */

static PyObject *context_label_push(PyObject *self, PyObject *args) {
  const char *s;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "s", &s)) return NULL;
  rg_label_push(co->ctx, s);
  Py_RETURN_NONE;
}

static PyObject *context_label_pop(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_label_pop(co->ctx);
  Py_RETURN_NONE;
}

static void dump_line(void *user, const char *text) {
  PyObject *s = PyUnicode_FromString(text);
  if (s) PyList_Append((PyObject *)user, s);
  Py_XDECREF(s);
}

static PyObject *context_dump(PyObject *self, PyObject *args) {
  PyObject *pool = Py_None;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTuple(args, "|O", &pool)) return NULL;
  rg_pool p = RG_POOL_PASS;
  if (pool != Py_None && parse_pool(pool, &p) < 0) return NULL;
  PyObject *list = PyList_New(0);
  if (list) rg_dump_handles(co->ctx, pool == Py_None ? -1 : (int)p, dump_line, list);
  return list;
}

static int set_xfer(PyObject *d, const char *key, rg_xfer x) {
  PyObject *v = Py_BuildValue("{sKsK}", "count", (unsigned long long)x.count, "bytes",
                              (unsigned long long)x.bytes);
  int r = v ? PyDict_SetItemString(d, key, v) : -1;
  Py_XDECREF(v);
  return r;
}

static PyObject *context_stats(PyObject *self, PyObject *unused) {
  (void)unused;
  static const char *sites[RG_SITE_COUNT] = {"input", "write", "param_init", "optim",
                                             "read", "checkpoint", "rng"};
  static const char *reasons[RG_DRAIN_REASON_COUNT] = {
    "read", "write", "sync", "step", "reset", "close", "guard", "check", "save"};
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_stats s;
  rg_stats_get(co->ctx, &s);
  PyObject *d = Py_BuildValue(
      "{sKsKsKsKsKsKsKsKsssnsnsnsnsnsnsn}", "nodes_recorded",
      (unsigned long long)s.nodes_recorded, "nodes_executed",
      (unsigned long long)s.nodes_executed, "launches", (unsigned long long)s.launches,
      "drains", (unsigned long long)s.drains, "graph_captures",
      (unsigned long long)s.graph_captures, "graph_replays",
      (unsigned long long)s.graph_replays, "graph_misses", (unsigned long long)s.graph_misses,
      "cudnn_attention", (unsigned long long)s.cudnn_attention, "graph_miss_reason",
      s.graph_miss_reason, "pass_bytes", (Py_ssize_t)s.pass_bytes, "pass_peak",
      (Py_ssize_t)s.pass_peak, "persistent_bytes", (Py_ssize_t)s.persistent_bytes,
      "persistent_peak", (Py_ssize_t)s.persistent_peak, "queue_peak",
      (Py_ssize_t)s.queue_peak, "device_bytes", (Py_ssize_t)s.device_bytes, "device_peak",
      (Py_ssize_t)s.device_peak);
  PyObject *up = PyDict_New(), *down = PyDict_New(), *why = PyDict_New();
  int bad = !d || !up || !down || !why || set_xfer(d, "up", s.up) < 0 ||
            set_xfer(d, "down", s.down) < 0;
  for (int i = 0; !bad && i < RG_SITE_COUNT; i++)
    bad = set_xfer(up, sites[i], s.up_site[i]) < 0 || set_xfer(down, sites[i], s.down_site[i]) < 0;
  for (int i = 0; !bad && i < RG_DRAIN_REASON_COUNT; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(s.drain_reason[i]);
    bad = !v || PyDict_SetItemString(why, reasons[i], v) < 0;
    Py_XDECREF(v);
  }
  if (!bad)
    bad = PyDict_SetItemString(d, "up_site", up) < 0 ||
          PyDict_SetItemString(d, "down_site", down) < 0 ||
          PyDict_SetItemString(d, "drain_reason", why) < 0;
  Py_XDECREF(up);
  Py_XDECREF(down);
  Py_XDECREF(why);
  if (bad) Py_CLEAR(d);
  return d;
}

static PyObject *context_reset_stats(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_stats_reset(co->ctx);
  Py_RETURN_NONE;
}

static PyObject *context_memory(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  size_t avail = 0, total = 0;
  if (rg_device_memory(co->ctx, &avail, &total) != RG_OK) return rgpy_raise(co);
  return Py_BuildValue("(nn)", (Py_ssize_t)avail, (Py_ssize_t)total);
}

/* ---- gradient checking -------------------------------------------------------------------- */

typedef struct { PyObject *fn, *co; int failed; } check_user;

static rg_tensor check_loss(rg_ctx *ctx, void *user) {
  (void)ctx;
  check_user *u = user;
  if (u->failed) return RG_NONE;
  PyObject *r = PyObject_CallFunctionObjArgs(u->fn, u->co, NULL);
  if (!r || Py_TYPE(r) != rgpy_Tensor) {
    if (r) PyErr_SetString(PyExc_TypeError, "gradcheck: fn(ctx) must return a Tensor");
    Py_XDECREF(r);
    u->failed = 1;
    return RG_NONE;
  }
  rg_tensor t = ((RgTensor *)r)->h;
  Py_DECREF(r); /* the pass pool keeps the value */
  return t;
}

static PyObject *context_gradcheck(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"fn", "eps", "max_elems", NULL};
  PyObject *fn;
  double eps = 1e-3;
  long long max_elems = 0;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTupleAndKeywords(args, kw, "O|dL", names, &fn, &eps, &max_elems))
    return NULL;
  check_user u = {fn, self, 0};
  rg_gradcheck_result r;
  rg_status st = rg_gradcheck(co->ctx, check_loss, &u, eps, max_elems, &r);
  if (u.failed) {
    rg_clear_error(co->ctx);
    if (!PyErr_Occurred()) PyErr_SetString(rgpy_Error, "gradcheck: fn failed");
    return NULL;
  }
  if (st != RG_OK) return rgpy_raise(co);
  return Py_BuildValue("{sdsdsisLsdsd}", "max_abs_err", r.max_abs_err, "max_rel_err",
                       r.max_rel_err, "param", r.param, "index", (long long)r.index,
                       "analytic", r.analytic, "numeric", r.numeric);
}

/* ---- data-parallel training ---------------------------------------------------------------- */

static PyObject *context_dist_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"world_size", "rank", "rendezvous", "timeout", "bucket_bytes", NULL};
  rg_dist_options o = {0};
  Py_ssize_t bucket = 0;
  RgContext *co = usable(self);
  if (!co || !PyArg_ParseTupleAndKeywords(args, kw, "|iizdn", names, &o.world_size, &o.rank,
                                          &o.rendezvous, &o.timeout, &bucket))
    return NULL;
  o.bucket_bytes = (size_t)bucket;
  rg_status st;
  RGPY_WAIT(co, st = rg_dist_init(co->ctx, &o));
  return status_or_raise(co, st);
}

static PyObject *context_dist_close(PyObject *self, PyObject *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  rg_status st;
  RGPY_WAIT(co, st = rg_dist_close(co->ctx));
  return status_or_raise(co, st);
}

/* ---- attributes ----------------------------------------------------------------------------- */

static PyObject *get_closed(PyObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(((RgContext *)self)->ctx == NULL);
}

static PyObject *get_device_name(PyObject *self, void *unused) {
  (void)unused;
  RgContext *co = usable(self);
  return co ? PyUnicode_FromString(rg_device_name(co->ctx)) : NULL;
}

static PyObject *get_device(PyObject *self, void *unused) {
  (void)unused;
  RgContext *co = usable(self);
  if (!co) return NULL;
  return PyUnicode_FromString(rg_device_kind(co->ctx) == RG_DEVICE_CUDA ? "cuda" : "cpu");
}

static PyObject *get_rank(PyObject *self, void *unused) {
  (void)unused;
  RgContext *co = usable(self);
  return co ? PyLong_FromLong(rg_dist_rank(co->ctx)) : NULL;
}

static PyObject *get_world(PyObject *self, void *unused) {
  (void)unused;
  RgContext *co = usable(self);
  return co ? PyLong_FromLong(rg_dist_world(co->ctx)) : NULL;
}

#define KW METH_VARARGS | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef methods[] = {
  {"close", context_close, METH_NOARGS,
   "close()\n--\n\nRuns what is queued, then frees everything the context owns (rg_close). "
   "Its tensors become unusable. Raises if the last drain failed (closed anyway)."},
  {"__enter__", context_enter, METH_NOARGS, NULL},
  {"__exit__", context_exit, METH_VARARGS, NULL},
  {"step_begin", context_step_begin, METH_NOARGS,
   "step_begin()\n--\n\nA barrier, then frees the pass pool: its tensors become stale. Call "
   "it at the start of every training step. rg_step_begin."},
  {"sync", context_sync, METH_NOARGS, "sync()\n--\n\nRuns what is queued (a barrier)."},
  {"reset", context_reset, METH_O,
   "reset(pool)\n--\n\nA barrier, then frees pool ('pass' or 'persistent'). rg_reset."},
  {"generation", context_generation, METH_O,
   "generation(pool)\n--\n\nThe pool's generation (starts at 1)."},
  {"train", context_train, METH_VARARGS,
   "train(mode=True)\n--\n\nTraining mode (dropout on) or evaluation. Returns the context."},
  {"eval", context_eval, METH_NOARGS,
   "eval()\n--\n\nEvaluation mode: dropout is the identity. Returns the context."},
  {"set_check_finite", context_check_finite, METH_VARARGS,
   "set_check_finite(on)\n--\n\nCheck every op's outputs for NaN/Inf from now on "
   "(rg_set_check_finite)."},
  {"tensor", FN(context_tensor), KW,
   "tensor(data, dtype=None)\n--\n\nA per-step input in the pass pool from data (a NumPy "
   "array, a list, a number), copied at once (rg_input). dtype: inferred (floats: float32, "
   "integers: int32) unless given."},
  {"constant", FN(context_constant), KW,
   "constant(data, dtype=None)\n--\n\nA value that stays on the device across steps, with "
   "no gradient (rg_constant): a dataset, a fixed batch, a mask."},
  {"param", FN(context_param), KW,
   "param(name, shape, init='zeros', a=0.0, b=0.0, dtype=float32)\n--\n\nA named trainable "
   "parameter in the persistent pool (rg_param). init: 'zeros', 'ones', 'normal' (std a, "
   "mean b), 'uniform' ([a, b)), 'const' (a), or values to write."},
  {"params", context_params, METH_NOARGS,
   "params()\n--\n\nEvery parameter, a dict from name to Tensor in creation order."},
  {"zero_grad", context_zero_grad, METH_NOARGS,
   "zero_grad()\n--\n\nRecords the zeroing of every parameter gradient."},
  {"backward", context_backward, METH_O, "backward(loss)\n--\n\nloss.backward()."},
  {"checkpoint", FN(context_ckpt), KW,
   "checkpoint(fn, *args, **kwargs)\n--\n\nfn(*args, **kwargs) as an activation "
   "checkpoint region: its Tensor result survives the region, the other tensors fn makes "
   "go back to the pass pool and backward recomputes them (the same gradients bit for "
   "bit, less memory, more compute). Returns fn's result. rg_checkpoint_begin/end."},
  {"checkpoint_begin", context_ckpt_begin, METH_NOARGS,
   "checkpoint_begin()\n--\n\nOpens an activation checkpoint region "
   "(rg_checkpoint_begin); checkpoint_end(out) closes it."},
  {"checkpoint_end", context_ckpt_end, METH_VARARGS,
   "checkpoint_end(out=None)\n--\n\nCloses the open region (rg_checkpoint_end): out "
   "survives it, the region's other tensors are recomputed by backward; None gives "
   "nothing back. Returns out."},
  {"clip_grad_norm", context_clip_norm, METH_O,
   "clip_grad_norm(max_norm)\n--\n\nRecords scaling every gradient so their total L2 norm is "
   "at most max_norm (rg_clip_grad_norm); no host read."},
  {"clip_grad_value", context_clip_value, METH_O,
   "clip_grad_value(max_abs)\n--\n\nRecords clamping every gradient element to [-max_abs, "
   "max_abs] (rg_clip_grad_value)."},
  {"save", FN(context_save), KW,
   "save(path, optim=None)\n--\n\nWrites every parameter (and optim's state) as safetensors, "
   "atomically (rg_save)."},
  {"load", FN(context_load), KW,
   "load(path, optim=None)\n--\n\nLoads a checkpoint written by save; validates the whole "
   "file before changing anything (rg_load)."},
  {"set_meta", context_set_meta, METH_VARARGS,
   "set_meta(key, value)\n--\n\nString metadata saved with the checkpoint."},
  {"get_meta", context_get_meta, METH_VARARGS,
   "get_meta(key)\n--\n\nA metadata value, or None."},
  {"label_push", context_label_push, METH_VARARGS,
   "label_push(name)\n--\n\nNames the work recorded until label_pop (error messages)."},
  {"label_pop", context_label_pop, METH_NOARGS, "label_pop()\n--\n\nEnds label_push."},
  {"dump_handles", context_dump, METH_VARARGS,
   "dump_handles(pool=None)\n--\n\nOne line per live tensor of pool ('pass', 'persistent', "
   "None: both). Never a barrier."},
  {"stats", context_stats, METH_NOARGS,
   "stats()\n--\n\nThe counters: transfers up/down (per site), nodes, launches, drains (per "
   "reason), graph captures/replays/misses, pool bytes and peaks (rg_stats_get)."},
  {"reset_stats", context_reset_stats, METH_NOARGS, "reset_stats()\n--\n\nZeroes the counters."},
  {"memory", context_memory, METH_NOARGS,
   "memory()\n--\n\n(available, total) bytes of the device (rg_device_memory)."},
  {"gradcheck", FN(context_gradcheck), KW,
   "gradcheck(fn, eps=1e-3, max_elems=0)\n--\n\nCompares backward against central "
   "differences for every parameter; fn(ctx) records the loss. A dict of the worst error "
   "(rg_gradcheck)."},
  {"dist_init", FN(context_dist_init), KW,
   "dist_init(world_size=0, rank=0, rendezvous=None, timeout=0.0, bucket_bytes=0)\n--\n\n"
   "Joins a data-parallel run (rg_dist_init); zeros take the environment's settings."},
  {"dist_close", context_dist_close, METH_NOARGS, "dist_close()\n--\n\nLeaves it."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"closed", get_closed, NULL, "True once closed.", NULL},
  {"device_name", get_device_name, NULL, "e.g. 'cuda:0 (NVIDIA H200)' or 'cpu (2 threads)'.",
   NULL},
  {"device", get_device, NULL, "'cpu' or 'cuda'.", NULL},
  {"rank", get_rank, NULL, "This process's rank (0 when not distributed).", NULL},
  {"world", get_world, NULL, "The number of ranks (1 when not distributed).", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

int rgpy_init_context(PyObject *m) {
  PyType_Slot slots[] = {
    {Py_tp_init, context_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_methods, methods},
    {Py_tp_getset, getset},
    {Py_tp_doc, "Context(device='auto', *, seed=0, threads=0, pass_budget=0, "
                "persistent_budget=0, check=False, max_queued=0, quiet=False, trace=False, "
                "tf32=False, bf16=False, check_finite=False, no_cudnn=False, gemm_tune=0, "
                "dry_run=False, nonfinite_checkpoints=False, max_pass_nodes=0)\n--\n\n"
                "One device with its pools, queue and counters (rg_open; the options are "
                "rg_options'; trace: True prints each drained node, a path writes a Chrome "
                "trace-event file there, docs/trace.md). 'with' closes it."},
    {0, NULL}};
  PyType_Spec spec = {"resgrad._resgrad.Context", sizeof(RgContext), 0,
                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
  rgpy_Context = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_Context) return -1;
  return PyModule_AddObjectRef(m, "Context", (PyObject *)rgpy_Context);
}
