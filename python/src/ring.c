/*
 * ring.c - resgrad.Ring: a ring buffer on the device (rg_ring_new and its calls): replay
 * memory for reinforcement learning, a window of streaming data.
 *
 * A Ring holds its context and the ring's handle, as a Tensor does; it owns no memory (the
 * persistent pool does). free() and a reset of the persistent pool make the handle stale:
 * the library says so, the module raises StaleHandleError. Host data given to push or
 * gather is uploaded as the ring's dtype or as int32 indices.
 */
#include "ext.h"

static PyTypeObject *rgpy_Ring;

typedef struct RgRing {
  PyObject_HEAD
  RgContext *co;
  rg_tensor h;
} RgRing;

static int ring_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"ctx", "capacity", "rows", "dtype", NULL};
  RgRing *r = (RgRing *)self;
  PyObject *ctx, *dtype = NULL;
  long long capacity, rows;
  rg_dtype dt = RG_F32;
  if (r->co) {
    PyErr_SetString(rgpy_Error, "the ring is already made");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OLL|O", names, &ctx, &capacity, &rows, &dtype))
    return -1;
  if (!PyObject_TypeCheck(ctx, rgpy_Context)) {
    PyErr_SetString(PyExc_TypeError, "ctx must be a resgrad.Context");
    return -1;
  }
  RgContext *co = (RgContext *)ctx;
  if (rgpy_usable(co) < 0 || (dtype && dtype != Py_None && rgpy_dtype_arg(dtype, &dt) < 0))
    return -1;
  rg_tensor h = rg_ring_new(co->ctx, dt, capacity, rows);
  if (!h.id) return rgpy_raise(co), -1;
  Py_INCREF(ctx);
  r->co = co;
  r->h = h;
  return 0;
}

static void ring_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  Py_XDECREF((PyObject *)((RgRing *)self)->co);
  ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
  Py_DECREF(tp);
}

static RgRing *usable(PyObject *self) {
  RgRing *r = (RgRing *)self;
  if (!r->co) {
    PyErr_SetString(rgpy_Error, "the ring was never made: call Ring(ctx, capacity, rows)");
    return NULL;
  }
  return rgpy_usable(r->co) < 0 ? NULL : r;
}

/* o as a tensor of r's context: a Tensor of that context, or host data uploaded as dtype
   (rg_input). The new tensor's reference goes to *keep (NULL for a Tensor given). */
static int operand(RgRing *r, PyObject *o, const char *name, rg_dtype dt, rg_tensor *out,
                   PyObject **keep) {
  *keep = NULL;
  if (PyObject_TypeCheck(o, rgpy_Tensor)) {
    if (((RgTensor *)o)->co != r->co) {
      PyErr_Format(rgpy_Error, "%s comes from another context than the ring's", name);
      return -1;
    }
    *out = ((RgTensor *)o)->h;
    return 0;
  }
  PyObject *d = rgpy_dtype_object(dt);
  *keep = d ? rgpy_from_host(r->co, o, d, 0) : NULL;
  Py_XDECREF(d);
  if (!*keep) return -1;
  *out = ((RgTensor *)*keep)->h;
  return 0;
}

/* The library's message for a ring that is not live (freed, or its pool reset). */
static PyObject *stale(RgRing *r) {
  rg_ring_push(r->co->ctx, r->h, RG_NONE);
  return rgpy_raise(r->co);
}

static PyObject *ring_push(PyObject *self, PyObject *arg) {
  RgRing *r = usable(self);
  rg_tensor e;
  PyObject *keep;
  if (!r) return NULL;
  if (!rg_is_live(r->co->ctx, r->h)) return stale(r);
  if (operand(r, arg, "entries", rg_dtype_of(r->co->ctx, r->h), &e, &keep) < 0) return NULL;
  rg_status st = rg_ring_push(r->co->ctx, r->h, e);
  Py_XDECREF(keep);
  if (st != RG_OK) return rgpy_raise(r->co);
  Py_RETURN_NONE;
}

static PyObject *ring_gather(PyObject *self, PyObject *arg) {
  RgRing *r = usable(self);
  rg_tensor idx;
  PyObject *keep;
  if (!r || operand(r, arg, "idx", RG_I32, &idx, &keep) < 0) return NULL;
  rg_tensor t = rg_ring_gather(r->co->ctx, r->h, idx);
  Py_XDECREF(keep);
  return rgpy_result(r->co, t);
}

static PyObject *ring_sample(PyObject *self, PyObject *arg) {
  RgRing *r = usable(self);
  long long n;
  if (!r || rgpy_int_arg(arg, "n", 0, 0, &n) < 0) return NULL;
  return rgpy_result(r->co, rg_ring_sample(r->co->ctx, r->h, n));
}

static PyObject *ring_free(PyObject *self, PyObject *unused) {
  (void)unused;
  RgRing *r = usable(self);
  if (!r) return NULL;
  if (rg_ring_free(r->co->ctx, r->h) != RG_OK) return rgpy_raise(r->co);
  Py_RETURN_NONE;
}

static PyObject *get_count(PyObject *self, void *unused) {
  (void)unused;
  RgRing *r = usable(self);
  if (!r) return NULL;
  int64_t c = 0;
  rg_status st;
  RGPY_WAIT(r->co, st = rg_ring_count(r->co->ctx, r->h, &c)); /* a barrier */
  return st == RG_OK ? PyLong_FromLongLong(c) : rgpy_raise(r->co);
}

/* The table as a Tensor: a live ring's handle (a stale one raises). */
static PyObject *get_tensor(PyObject *self, void *unused) {
  (void)unused;
  RgRing *r = usable(self);
  if (!r) return NULL;
  return rg_is_live(r->co->ctx, r->h) ? rgpy_wrap(r->co, r->h) : stale(r);
}

static PyObject *dim(PyObject *self, int axis) {
  RgRing *r = usable(self);
  if (!r) return NULL;
  int64_t d = rg_dim(r->co->ctx, r->h, axis);
  return d < 0 ? rgpy_raise(r->co) : PyLong_FromLongLong(d);
}
static PyObject *get_capacity(PyObject *self, void *unused) { (void)unused; return dim(self, 0); }
static PyObject *get_rows(PyObject *self, void *unused) { (void)unused; return dim(self, 1); }

static PyObject *get_dtype(PyObject *self, void *unused) {
  (void)unused;
  RgRing *r = usable(self);
  if (!r) return NULL;
  rg_dtype dt = rg_dtype_of(r->co->ctx, r->h);
  return rg_error(r->co->ctx) != RG_OK ? rgpy_raise(r->co) : rgpy_dtype_object(dt);
}

static PyMethodDef methods[] = {
  {"push", ring_push, METH_O,
   "push(entries)\n--\n\nRecords the append of entries, [k, rows] or [rows], after the newest "
   "(the oldest are overwritten once the ring is full): a Tensor of the ring's dtype, or "
   "host data uploaded as it (rg_ring_push). Ordered with the queue; not a barrier."},
  {"gather", ring_gather, METH_O,
   "gather(idx)\n--\n\nRecords a gather: int32 indices (0 the oldest entry) -> [..idx.., "
   "rows]. An index outside [0, count) raises UsageError at the barrier (rg_ring_gather)."},
  {"sample", ring_sample, METH_O,
   "sample(n)\n--\n\nRecords n entry numbers drawn uniformly from [0, count) on the device "
   "(int32 [n], for gather): no upload (rg_ring_sample)."},
  {"free", ring_free, METH_NOARGS,
   "free()\n--\n\nFrees the ring: its handle is stale from now on; queued work still reads "
   "it (rg_ring_free)."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"count", get_count, NULL, "Entries held (a barrier: rg_ring_count).", NULL},
  {"tensor", get_tensor, NULL, "The table, a persistent [capacity, rows] Tensor, slot by slot.",
   NULL},
  {"capacity", get_capacity, NULL, "Entries it holds when full.", NULL},
  {"rows", get_rows, NULL, "Elements of each entry.", NULL},
  {"dtype", get_dtype, NULL, "The entries' dtype.", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

int rgpy_init_ring(PyObject *m) {
  PyType_Slot slots[] = {
    {Py_tp_init, ring_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ring_dealloc},
    {Py_tp_methods, methods},
    {Py_tp_getset, getset},
    {Py_tp_doc, "Ring(ctx, capacity, rows, dtype=float32)\n--\n\nA ring buffer of capacity "
                "entries of rows values on the device, outside the per-step pool: replay "
                "memory (rg_ring_new; docs/ring.md). push, gather and sample record, ordered "
                "with the queue; count is a barrier."},
    {0, NULL}};
  PyType_Spec spec = {"resgrad.Ring", sizeof(RgRing), 0, Py_TPFLAGS_DEFAULT, slots};
  rgpy_Ring = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_Ring) return -1;
  return PyModule_AddObjectRef(m, "Ring", (PyObject *)rgpy_Ring);
}
