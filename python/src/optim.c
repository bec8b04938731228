/*
 * optim.c - resgrad.optim's optimizers (rg_optim): AdamW and SGD over every parameter of
 * a context, with the learning-rate schedules the library computes on the device.
 *
 * An Optimizer holds its Context; rg_close frees the rg_optim with the context, so every
 * use checks the context is open before touching it.
 */
#include "ext.h"

#include <string.h>

PyTypeObject *rgpy_Optimizer;

typedef struct RgOptim {
  PyObject_HEAD
  RgContext *co;
  rg_optim *opt;
} RgOptim;

rg_optim *rgpy_optim_of(PyObject *o, RgContext *co) {
  if (!PyObject_TypeCheck(o, rgpy_Optimizer)) {
    PyErr_SetString(PyExc_TypeError, "optim must be a resgrad optimizer (resgrad.optim)");
    return NULL;
  }
  RgOptim *r = (RgOptim *)o;
  if (r->co != co) {
    PyErr_SetString(rgpy_Error, "the optimizer belongs to another context");
    return NULL;
  }
  if (rgpy_usable(co) < 0) return NULL;
  if (!r->opt) {
    PyErr_SetString(rgpy_Error, "the optimizer was closed");
    return NULL;
  }
  return r->opt;
}

static rg_optim *usable(PyObject *self) {
  RgOptim *r = (RgOptim *)self;
  return rgpy_optim_of(self, r->co);
}

static PyObject *make(RgContext *co, rg_optim *opt) {
  if (!opt) return rgpy_raise(co);
  RgOptim *r = (RgOptim *)PyType_GenericAlloc(rgpy_Optimizer, 0);
  if (!r) {
    rg_optim_free(opt);
    return NULL;
  }
  Py_INCREF((PyObject *)co);
  r->co = co;
  r->opt = opt;
  return (PyObject *)r;
}

static RgContext *context_arg(PyObject *o) {
  if (!PyObject_TypeCheck(o, rgpy_Context)) {
    PyErr_SetString(PyExc_TypeError, "the first argument must be a resgrad.Context");
    return NULL;
  }
  RgContext *co = (RgContext *)o;
  return rgpy_usable(co) < 0 ? NULL : co;
}

static PyObject *adamw(PyObject *mod, PyObject *args, PyObject *kw) {
  (void)mod;
  static char *names[] = {"ctx", "lr", "betas", "eps", "weight_decay", NULL};
  PyObject *ctx;
  rg_adamw_options o = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|f(ff)ff", names, &ctx, &o.lr, &o.beta1,
                                   &o.beta2, &o.eps, &o.weight_decay))
    return NULL;
  RgContext *co = context_arg(ctx);
  return co ? make(co, rg_optim_adamw(co->ctx, &o)) : NULL;
}

static PyObject *sgd(PyObject *mod, PyObject *args, PyObject *kw) {
  (void)mod;
  static char *names[] = {"ctx", "lr", "momentum", "weight_decay", NULL};
  PyObject *ctx;
  rg_sgd_options o = {1e-2f, 0.0f, 0.0f};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|fff", names, &ctx, &o.lr, &o.momentum,
                                   &o.weight_decay))
    return NULL;
  RgContext *co = context_arg(ctx);
  return co ? make(co, rg_optim_sgd(co->ctx, &o)) : NULL;
}

static void optim_close_now(RgOptim *r) {
  if (r->opt && r->co && r->co->ctx) {
    rg_optim *o = r->opt;
    r->opt = NULL;
    RGPY_WAIT(r->co, rg_optim_free(o));
  }
  r->opt = NULL;
}

static void optim_dealloc(PyObject *self) {
  RgOptim *r = (RgOptim *)self;
  if (!r->co || !r->co->busy) optim_close_now(r);
  rgpy_free_object(self, r->co);
}

static PyObject *optim_close(PyObject *self, PyObject *unused) {
  (void)unused;
  RgOptim *r = (RgOptim *)self;
  if (r->opt && rgpy_usable(r->co) < 0) return NULL;
  optim_close_now(r);
  Py_RETURN_NONE;
}

static PyObject *optim_step(PyObject *self, PyObject *unused) {
  (void)unused;
  rg_optim *o = usable(self);
  if (!o) return NULL;
  if (rg_optim_step(o) != RG_OK) return rgpy_raise(((RgOptim *)self)->co);
  Py_RETURN_NONE;
}

static PyObject *optim_zero_grad(PyObject *self, PyObject *unused) {
  (void)unused;
  RgOptim *r = (RgOptim *)self;
  if (!usable(self)) return NULL;
  if (rg_zero_grad(r->co->ctx) != RG_OK) return rgpy_raise(r->co);
  Py_RETURN_NONE;
}

static PyObject *get_lr(PyObject *self, void *unused) {
  (void)unused;
  RgOptim *r = (RgOptim *)self;
  rg_optim *o = usable(self);
  if (!o) return NULL;
  float lr;
  RGPY_WAIT(r->co, lr = rg_optim_lr(o));
  return lr < 0 ? rgpy_raise(r->co) : PyFloat_FromDouble(lr);
}

static int set_lr(PyObject *self, PyObject *value, void *unused) {
  (void)unused;
  RgOptim *r = (RgOptim *)self;
  rg_optim *o = usable(self);
  double lr;
  if (!o || !value || rgpy_float_arg(value, "lr", &lr) < 0) {
    if (o && !value) PyErr_SetString(PyExc_TypeError, "lr cannot be deleted");
    return -1;
  }
  if (rg_optim_set_lr(o, (float)lr) != RG_OK) return rgpy_raise(r->co), -1;
  return 0;
}

static PyObject *get_steps(PyObject *self, void *unused) {
  (void)unused;
  RgOptim *r = (RgOptim *)self;
  rg_optim *o = usable(self);
  if (!o) return NULL;
  int64_t n;
  RGPY_WAIT(r->co, n = rg_optim_steps(o));
  return n < 0 ? rgpy_raise(r->co) : PyLong_FromLongLong(n);
}

static PyObject *optim_schedule(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"kind", "lr", "min_lr", "start_lr", "gamma", "warmup", "total",
                          "step_size", NULL};
  static const RgEnum kinds[] = {{"constant", RG_SCHED_CONSTANT}, {"cosine", RG_SCHED_COSINE},
                                 {"step", RG_SCHED_STEP}, {"onecycle", RG_SCHED_ONECYCLE},
                                 {NULL, 0}};
  RgOptim *r = (RgOptim *)self;
  PyObject *kind;
  rg_schedule s = {0};
  s.gamma = 1;
  s.step_size = 1;
  long long warmup = 0, total = 0, step_size = 1;
  rg_optim *o = usable(self);
  if (!o || !PyArg_ParseTupleAndKeywords(args, kw, "O|$ffffLLL", names, &kind, &s.lr,
                                         &s.min_lr, &s.start_lr, &s.gamma, &warmup, &total,
                                         &step_size))
    return NULL;
  s.warmup = warmup, s.total = total, s.step_size = step_size;
  rg_status st;
  if (kind == Py_None) {
    st = rg_optim_set_schedule(o, NULL);
  } else {
    long long k;
    if (rgpy_enum_arg(kind, "kind", kinds, &k) < 0) return NULL;
    s.kind = (rg_sched_kind)k;
    st = rg_optim_set_schedule(o, &s);
  }
  if (st != RG_OK) return rgpy_raise(r->co);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
  {"step", optim_step, METH_NOARGS,
   "step()\n--\n\nRecords one fused update of every parameter (rg_optim_step). Not a "
   "barrier."},
  {"zero_grad", optim_zero_grad, METH_NOARGS,
   "zero_grad()\n--\n\nRecords the zeroing of every parameter gradient (rg_zero_grad)."},
  {"set_schedule", (PyCFunction)(void (*)(void))optim_schedule, METH_VARARGS | METH_KEYWORDS,
   "set_schedule(kind, *, lr=0, min_lr=0, start_lr=0, gamma=1, warmup=0, total=0, "
   "step_size=1)\n--\n\nA learning-rate schedule computed on the device at every step: kind "
   "'constant', 'cosine' (warm-up then cosine decay to min_lr at update total), 'step' "
   "(times gamma every step_size updates) or 'onecycle'; None clears it "
   "(rg_optim_set_schedule)."},
  {"close", optim_close, METH_NOARGS,
   "close()\n--\n\nFrees the optimizer (a barrier); its state stays in the persistent pool."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"lr", get_lr, set_lr,
   "The learning rate in force (reading it is a barrier); setting it records a 4-byte "
   "upload (refused while a schedule is set).", NULL},
  {"steps", get_steps, NULL, "Updates taken so far (a barrier).", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef factories[] = {
  {"adamw", (PyCFunction)(void (*)(void))adamw, METH_VARARGS | METH_KEYWORDS,
   "adamw(ctx, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)\n--\n\nAdamW over "
   "every parameter of ctx that exists now (rg_optim_adamw)."},
  {"sgd", (PyCFunction)(void (*)(void))sgd, METH_VARARGS | METH_KEYWORDS,
   "sgd(ctx, lr=0.01, momentum=0.0, weight_decay=0.0)\n--\n\nSGD with optional momentum "
   "over every parameter of ctx that exists now (rg_optim_sgd)."},
  {NULL, NULL, 0, NULL}};

int rgpy_init_optim(PyObject *m) {
  PyType_Slot slots[] = {{Py_tp_dealloc, optim_dealloc},
                         {Py_tp_methods, methods},
                         {Py_tp_getset, getset},
                         {Py_tp_doc, "An optimizer over every parameter of a context; made "
                                     "by resgrad.optim.AdamW or resgrad.optim.SGD."},
                         {0, NULL}};
  PyType_Spec spec = {"resgrad.optim.Optimizer", sizeof(RgOptim), 0, Py_TPFLAGS_DEFAULT, slots};
  rgpy_Optimizer = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_Optimizer || PyModule_AddFunctions(m, factories) < 0) return -1;
  return PyModule_AddObjectRef(m, "Optimizer", (PyObject *)rgpy_Optimizer);
}
