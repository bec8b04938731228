/*
 * dlpack.c - zero-copy exchange with NumPy, PyTorch, CuPy... through DLPack: a Tensor's
 * __dlpack__ and __dlpack_device__, and resgrad.from_dlpack.
 *
 * The structs below are DLPack's ABI (the layout its specification fixes, versions 0.x
 * "dltensor" and 1.x "dltensor_versioned"). Export lends the tensor's bytes (rg_export:
 * its pool refuses to reset while the loan is open) and the capsule's deleter ends the
 * loan; import wraps the producer's bytes (rg_import) and resgrad calls the producer's
 * deleter when the pass pool lets them go. Deleters may run on any thread and inside a
 * barrier that released the GIL, so they take the GIL themselves.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

enum { DL_CPU = 1, DL_CUDA = 2 };                          /* DLDeviceType */
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 }; /* DLDataTypeCode */
#define DL_READ_ONLY 1u                                     /* DLManagedTensorVersioned */

typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

static const char *const NAME = "dltensor", *const USED = "used_dltensor";
static const char *const VNAME = "dltensor_versioned", *const VUSED = "used_dltensor_versioned";

/* ---- export ------------------------------------------------------------------------------ */

/* One loan: the tensor (which holds its context) and the shape the DLTensor points at.
   Both managed forms are kept in it so one deleter serves either. */
typedef struct loan {
  DLManagedTensor legacy;
  DLManagedTensorVersioned versioned;
  RgTensor *t;
  int64_t shape[RG_MAX_DIMS];
} loan;

static void end_loan(loan *l) {
  PyGILState_STATE g = PyGILState_Ensure();
  RgContext *co = l->t->co;
  if (co->ctx) { /* after close the loan is gone with the memory */
    rg_unexport(co->ctx, l->t->h);
    rg_clear_error(co->ctx);
  }
  co->exports--;
  Py_DECREF((PyObject *)l->t);
  free(l);
  PyGILState_Release(g);
}

static void delete_legacy(DLManagedTensor *m) { end_loan(m->manager_ctx); }
static void delete_versioned(DLManagedTensorVersioned *m) { end_loan(m->manager_ctx); }

/* A capsule that nobody consumed still owns its tensor. */
static void capsule_gone(PyObject *cap) {
  if (PyCapsule_IsValid(cap, NAME)) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, NAME);
    m->deleter(m);
  } else if (PyCapsule_IsValid(cap, VNAME)) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VNAME);
    m->deleter(m);
  }
}

static int dl_dtype(rg_dtype dt, DLDataType *out) {
  *out = dt == RG_F32    ? (DLDataType){DL_FLOAT, 32, 1}
         : dt == RG_BF16 ? (DLDataType){DL_BFLOAT, 16, 1}
                         : (DLDataType){DL_INT, 32, 1};
  return 0;
}

static int device_of(RgContext *co, DLDevice *d) {
  if (rg_device_kind(co->ctx) == RG_DEVICE_CUDA) {
    const char *name = rg_device_name(co->ctx); /* "cuda:N (...)" */
    *d = (DLDevice){DL_CUDA, (int32_t)atoi(name + 5)};
  } else {
    *d = (DLDevice){DL_CPU, 0};
  }
  return 0;
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
  static const char *const names[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *a[4];
  RgTensor *t = (RgTensor *)self;
  if (rgpy_parse("__dlpack__", names, 0, 4, args, nargs, kwnames, a) < 0 ||
      rgpy_usable(t->co) < 0)
    return NULL;
  if (nargs > 0) return PyErr_Format(PyExc_TypeError, "__dlpack__ takes keyword arguments");
  RgContext *co = t->co;
  DLDevice dev;
  device_of(co, &dev);
  if (a[2] && a[2] != Py_None) {
    long long want[2];
    PyObject *seq = PySequence_Tuple(a[2]);
    int ok = seq && PyTuple_Size(seq) == 2 &&
             rgpy_int_arg(PyTuple_GetItem(seq, 0), "dl_device", 0, 0, &want[0]) == 0 &&
             rgpy_int_arg(PyTuple_GetItem(seq, 1), "dl_device", 0, 0, &want[1]) == 0;
    Py_XDECREF(seq);
    if (!ok) return NULL;
    if (want[0] != dev.device_type || want[1] != dev.device_id)
      return PyErr_Format(PyExc_BufferError,
                          "__dlpack__: the tensor is on device (%d, %d), not (%lld, %lld); "
                          "copy it with numpy() instead", dev.device_type, dev.device_id,
                          want[0], want[1]);
  }
  if (a[3] && PyObject_IsTrue(a[3]) == 1)
    return PyErr_Format(PyExc_BufferError,
                        "__dlpack__(copy=True): resgrad lends its memory; copy with numpy()");
  long long stream = 0; /* NULL: the host waits (legacy default stream, None) */
  if (a[0] && a[0] != Py_None && rgpy_int_arg(a[0], "stream", 0, 0, &stream) < 0) return NULL;
  if (stream == -1) stream = 0; /* "no synchronisation wanted": waiting is always safe */
  int versioned = 0;
  if (a[1] && a[1] != Py_None) {
    PyObject *major = PySequence_GetItem(a[1], 0);
    versioned = major && PyLong_AsLong(major) >= 1;
    Py_XDECREF(major);
    if (PyErr_Occurred()) return NULL;
  }
  loan *l = calloc(1, sizeof *l);
  if (!l) return PyErr_NoMemory();
  rg_memref m;
  rg_status st;
  RGPY_WAIT(co, st = rg_export(co->ctx, t->h, (void *)(intptr_t)stream, &m));
  if (st != RG_OK) {
    free(l);
    return rgpy_raise(co);
  }
  Py_INCREF(self);
  l->t = t;
  co->exports++;
  for (int i = 0; i < m.ndim; i++) l->shape[i] = m.dims[i];
  DLTensor dl = {m.data, dev, m.ndim, {0, 0, 0}, l->shape, NULL, 0};
  dl_dtype(m.dtype, &dl.dtype);
  PyObject *cap;
  if (versioned) {
    l->versioned = (DLManagedTensorVersioned){{1, 0}, l, delete_versioned, 0, dl};
    cap = PyCapsule_New(&l->versioned, VNAME, capsule_gone);
  } else {
    l->legacy = (DLManagedTensor){dl, l, delete_legacy};
    cap = PyCapsule_New(&l->legacy, NAME, capsule_gone);
  }
  if (!cap) end_loan(l);
  return cap;
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
  (void)args;
  RgTensor *t = (RgTensor *)self;
  if (nargs || kwnames) return PyErr_Format(PyExc_TypeError, "takes no arguments");
  if (rgpy_usable(t->co) < 0) return NULL;
  DLDevice d;
  device_of(t->co, &d);
  return Py_BuildValue("(ii)", d.device_type, d.device_id);
}

PyMethodDef rgpy_dlpack_methods[] = {
  {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
   "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
   "A DLPack capsule of the tensor's memory, without a copy (a barrier). While the "
   "borrower holds it, the tensor's pool refuses step_begin()/reset(): drop the "
   "borrowing array (or copy it) first."},
  {"__dlpack_device__", (PyCFunction)(void (*)(void))tensor_dlpack_device,
   METH_FASTCALL | METH_KEYWORDS,
   "__dlpack_device__()\n--\n\n(device type, index): (1, 0) on the CPU, (2, N) on GPU N."},
  {NULL, NULL, 0, NULL}};

/* ---- import -------------------------------------------------------------------------------- */

/* What resgrad holds of an imported array until the pass pool lets it go. */
typedef struct held {
  DLManagedTensor *legacy;
  DLManagedTensorVersioned *versioned;
} held;

static void release_held(void *user) {
  held *h = user;
  PyGILState_STATE g = PyGILState_Ensure(); /* producers' deleters may touch Python */
  if (h->versioned && h->versioned->deleter) h->versioned->deleter(h->versioned);
  if (h->legacy && h->legacy->deleter) h->legacy->deleter(h->legacy);
  PyGILState_Release(g);
  free(h);
}

static int to_rg_dtype(DLDataType d, rg_dtype *out) {
  if (d.lanes != 1) return -1;
  if (d.code == DL_FLOAT && d.bits == 32) *out = RG_F32;
  else if (d.code == DL_BFLOAT && d.bits == 16) *out = RG_BF16;
  else if (d.code == DL_INT && d.bits == 32) *out = RG_I32;
  else return -1;
  return 0;
}

static PyObject *call_dlpack(PyObject *x, PyObject *stream, int versioned) {
  PyObject *meth = PyObject_GetAttrString(x, "__dlpack__");
  if (!meth) return NULL;
  PyObject *args = PyTuple_New(0), *kw = PyDict_New();
  PyObject *ver = versioned ? Py_BuildValue("(ii)", 1, 0) : NULL;
  PyObject *r = NULL;
  if (args && kw && (!versioned || ver) && PyDict_SetItemString(kw, "stream", stream) == 0 &&
      (!ver || PyDict_SetItemString(kw, "max_version", ver) == 0))
    r = PyObject_Call(meth, args, kw);
  Py_XDECREF(ver);
  Py_XDECREF(kw);
  Py_XDECREF(args);
  Py_DECREF(meth);
  return r;
}

PyObject *rgpy_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  (void)self;
  static const char *const names[] = {"x", "ctx", NULL};
  PyObject *a[2];
  if (rgpy_parse("from_dlpack", names, 2, 2, args, nargs, kwnames, a) < 0) return NULL;
  if (!PyObject_TypeCheck(a[1], rgpy_Context))
    return PyErr_Format(PyExc_TypeError, "from_dlpack: ctx must be a resgrad.Context");
  RgContext *co = (RgContext *)a[1];
  if (rgpy_usable(co) < 0) return NULL;
  if (PyObject_TypeCheck(a[0], rgpy_Tensor) && ((RgTensor *)a[0])->co == co) {
    Py_INCREF(a[0]);
    return a[0];
  }
  /* The producer's device must be the context's. */
  DLDevice ours;
  device_of(co, &ours);
  PyObject *dev = PyObject_CallMethod(a[0], "__dlpack_device__", NULL);
  if (!dev) return NULL;
  long type = PyLong_AsLong(PyTuple_GetItem(dev, 0)), id = PyLong_AsLong(PyTuple_GetItem(dev, 1));
  Py_DECREF(dev);
  if (PyErr_Occurred()) return NULL;
  if (type != ours.device_type || (type == DL_CUDA && id != ours.device_id))
    return PyErr_Format(rgpy_Error,
                        "from_dlpack: the array is on DLPack device (%ld, %ld), the context "
                        "on (%d, %d) (%s); move it there first (or use ctx.tensor(x), which "
                        "copies from the host)", type, id, ours.device_type, ours.device_id,
                        rg_device_name(co->ctx));
  void *s = rg_stream(co->ctx);
  PyObject *stream = s ? PyLong_FromVoidPtr(s) : Py_NewRef(Py_None);
  if (!stream) return NULL;
  PyObject *cap = call_dlpack(a[0], stream, 1);
  if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) { /* a producer before DLPack 1.0 */
    PyErr_Clear();
    cap = call_dlpack(a[0], stream, 0);
  }
  Py_DECREF(stream);
  if (!cap) return NULL;
  held *h = calloc(1, sizeof *h);
  DLTensor *dl = NULL;
  if (!h) {
    Py_DECREF(cap);
    return PyErr_NoMemory();
  }
  if (PyCapsule_IsValid(cap, VNAME)) {
    h->versioned = PyCapsule_GetPointer(cap, VNAME);
    dl = &h->versioned->dl_tensor;
  } else if (PyCapsule_IsValid(cap, NAME)) {
    h->legacy = PyCapsule_GetPointer(cap, NAME);
    dl = &h->legacy->dl_tensor;
  } else {
    free(h);
    Py_DECREF(cap);
    return PyErr_Format(PyExc_TypeError, "from_dlpack: __dlpack__ returned no DLPack capsule");
  }
  rg_memref m = {0};
  const char *why = NULL;
  if (to_rg_dtype(dl->dtype, &m.dtype) < 0) why = "its dtype is not float32, bfloat16 or int32";
  else if (dl->ndim > RG_MAX_DIMS) why = "it has more than 4 axes";
  int64_t expect = 1;
  for (int i = 0; !why && dl->strides && i < dl->ndim; i++) {
    int k = dl->ndim - 1 - i; /* row-major strides, size-1 axes excepted */
    if (dl->shape[k] != 1 && dl->strides[k] != expect) why = "it is not C-contiguous";
    expect *= dl->shape[k];
  }
  if (why) {
    free(h);
    Py_DECREF(cap); /* unconsumed: the capsule's destructor lets it go */
    return PyErr_Format(PyExc_TypeError,
                        "from_dlpack: cannot share this array: %s (make a contiguous "
                        "float32/int32 copy first)", why);
  }
  m.data = (char *)dl->data + dl->byte_offset;
  m.device = ours.device_type == DL_CUDA ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
  m.device_index = ours.device_id;
  m.ndim = dl->ndim;
  for (int i = 0; i < m.ndim; i++) m.dims[i] = dl->shape[i];
  rg_tensor t = rg_import(co->ctx, &m, release_held, h);
  if (!t.id) {
    free(h);
    Py_DECREF(cap);
    return rgpy_raise(co);
  }
  /* Consumed: resgrad owns the managed tensor now and calls its deleter on release. */
  PyCapsule_SetName(cap, h->versioned ? VUSED : USED);
  Py_DECREF(cap);
  return rgpy_wrap(co, t);
}
