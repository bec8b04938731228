/*
 * tensor.c - resgrad.Tensor: a handle with its context, the conversions between tensors
 * and host data (NumPy), and Python's operators.
 *
 * Reading values (numpy(), item(), float(), __array__) is the barrier; everything else
 * here records or answers from the handle without touching the device. A Python number
 * in an elementwise op becomes a persistent scalar made once per value and context (one
 * 4-byte upload the first time, none after), except a product or quotient by a number,
 * which records rg_scale.
 */
#include "ext.h"

#include <string.h>

PyTypeObject *rgpy_Tensor;

PyObject *rgpy_wrap(RgContext *co, rg_tensor t) {
  RgTensor *o = (RgTensor *)PyType_GenericAlloc(rgpy_Tensor, 0);
  if (!o) return NULL;
  Py_INCREF((PyObject *)co);
  o->co = co;
  o->h = t;
  return (PyObject *)o;
}

PyObject *rgpy_result(RgContext *co, rg_tensor t) {
  return t.id ? rgpy_wrap(co, t) : rgpy_raise(co);
}

static void tensor_dealloc(PyObject *self) {
  rgpy_free_object(self, ((RgTensor *)self)->co);
}

static inline int is_tensor(PyObject *o) {
  return o && (Py_TYPE(o) == rgpy_Tensor || PyObject_TypeCheck(o, rgpy_Tensor));
}

RgContext *rgpy_context_of(const char *fn, PyObject *const *ts, int n) {
  RgContext *co = NULL;
  for (int i = 0; i < n; i++) {
    if (!is_tensor(ts[i])) continue;
    RgContext *c = ((RgTensor *)ts[i])->co;
    if (co && c != co) {
      PyErr_Format(rgpy_Error, "%s: the tensors come from two contexts; every operand of an "
                               "op must belong to one context", fn);
      return NULL;
    }
    co = c;
  }
  if (!co) {
    PyErr_Format(PyExc_TypeError,
                 "%s: no argument is a resgrad.Tensor, so no context is known; make one "
                 "first with ctx.tensor(data)", fn);
    return NULL;
  }
  return rgpy_usable(co) < 0 ? NULL : co;
}

/* The persistent F32 scalar v of co, made the first time it is asked for. */
static int scalar(RgContext *co, double v, rg_tensor *out) {
  PyObject *key = PyFloat_FromDouble(v);
  if (!key) return -1;
  PyObject *id = PyDict_GetItemWithError(co->consts, key); /* borrowed */
  if (id) {
    out->id = PyLong_AsUnsignedLongLong(id);
    if (rg_is_live(co->ctx, *out)) {
      Py_DECREF(key);
      return 0;
    }
  } else if (PyErr_Occurred()) {
    Py_DECREF(key);
    return -1;
  }
  float f = (float)v;
  *out = rg_constant(co->ctx, RG_F32, 0, NULL, &f);
  if (!out->id) {
    Py_DECREF(key);
    rgpy_raise(co);
    return -1;
  }
  id = PyLong_FromUnsignedLongLong(out->id);
  int r = id ? PyDict_SetItem(co->consts, key, id) : -1;
  Py_XDECREF(id);
  Py_DECREF(key);
  return r;
}

PyObject *rgpy_from_host(RgContext *co, PyObject *obj, PyObject *dtype, int persistent) {
  PyObject *f = rgpy_helper("as_array");
  if (!f) return NULL;
  PyObject *pair = PyObject_CallFunctionObjArgs(f, obj, dtype ? dtype : Py_None, NULL);
  if (!pair) return NULL;
  PyObject *arr = PyTuple_GetItem(pair, 0);
  long code = PyLong_AsLong(PyTuple_GetItem(pair, 1));
  Py_buffer view;
  if (!arr || PyErr_Occurred() || PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(pair);
    return NULL;
  }
  int64_t dims[RG_MAX_DIMS];
  if (view.ndim > RG_MAX_DIMS) {
    PyBuffer_Release(&view);
    Py_DECREF(pair);
    return PyErr_Format(PyExc_ValueError, "the array has %d axes; tensors have at most %d",
                        view.ndim, RG_MAX_DIMS);
  }
  for (int i = 0; i < view.ndim; i++) dims[i] = (int64_t)view.shape[i];
  static const char dummy[4];
  const void *p = view.len ? view.buf : dummy; /* an empty array has no buffer */
  rg_tensor t = persistent ? rg_constant(co->ctx, (rg_dtype)code, view.ndim, dims, p)
                           : rg_input(co->ctx, (rg_dtype)code, view.ndim, dims, p);
  PyBuffer_Release(&view);
  Py_DECREF(pair);
  return rgpy_result(co, t);
}

int rgpy_tensor_arg(RgContext *co, PyObject *o, const char *name, int none_ok,
                    rg_tensor *out) {
  if (is_tensor(o)) {
    *out = ((RgTensor *)o)->h;
    return 0;
  }
  if (!o || o == Py_None) {
    if (none_ok) {
      *out = RG_NONE;
      return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a tensor, not None", name);
    return -1;
  }
  if (PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o))) {
    double v = PyFloat_AsDouble(o);
    return v == -1.0 && PyErr_Occurred() ? -1 : scalar(co, v, out);
  }
  PyObject *t = rgpy_from_host(co, o, NULL, 0);
  if (!t) return -1;
  *out = ((RgTensor *)t)->h;
  Py_DECREF(t); /* the pass pool keeps the value until rg_step_begin */
  return 0;
}

PyObject *rgpy_as_method(PyObject *(*fn)(PyObject *, PyObject *const *, Py_ssize_t,
                                         PyObject *),
                         PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
  PyObject *stack[16];
  Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
  if (nargs + nkw + 1 > 16) {
    PyErr_SetString(PyExc_TypeError, "too many arguments");
    return NULL;
  }
  stack[0] = self;
  for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
  return fn(NULL, stack, nargs + 1, kwnames);
}

/* ---- reading values -------------------------------------------------------------------- */

static int usable(RgTensor *t) { return rgpy_usable(t->co); }

static PyObject *shape_tuple(RgTensor *t) {
  int nd = rg_ndim(t->co->ctx, t->h);
  if (rg_error(t->co->ctx) != RG_OK) return rgpy_raise(t->co); /* stale: 0 axes and set */
  PyObject *s = PyTuple_New(nd);
  for (int i = 0; s && i < nd; i++)
    PyTuple_SetItem(s, i, PyLong_FromLongLong(rg_dim(t->co->ctx, t->h, i)));
  return s;
}

static PyObject *tensor_numpy(PyObject *self, PyObject *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  rg_ctx *c = t->co->ctx;
  PyObject *shape = shape_tuple(t);
  if (!shape) return NULL;
  rg_dtype dt = rg_dtype_of(c, t->h);
  PyObject *empty = rgpy_helper("empty");
  PyObject *code = PyLong_FromLong(dt);
  PyObject *arr = empty && code ? PyObject_CallFunctionObjArgs(empty, shape, code, NULL) : NULL;
  Py_XDECREF(code);
  Py_DECREF(shape);
  if (!arr) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
    Py_DECREF(arr);
    return NULL;
  }
  rg_status st;
  int64_t n = rg_numel(c, t->h);
  if (dt == RG_BF16) { /* NumPy has no bfloat16: widen to float32 */
    uint16_t *tmp = PyMem_Malloc((size_t)(n ? n : 1) * 2);
    if (!tmp) {
      PyBuffer_Release(&view);
      Py_DECREF(arr);
      return PyErr_NoMemory();
    }
    RGPY_WAIT(t->co, st = rg_read(c, t->h, tmp, (size_t)n * 2));
    uint32_t *dst = view.buf;
    for (int64_t i = 0; i < n; i++) dst[i] = (uint32_t)tmp[i] << 16;
    PyMem_Free(tmp);
  } else {
    RGPY_WAIT(t->co, st = rg_read(c, t->h, view.buf, (size_t)view.len));
  }
  PyBuffer_Release(&view);
  if (st != RG_OK) {
    Py_DECREF(arr);
    return rgpy_raise(t->co);
  }
  return arr;
}

static PyObject *tensor_item(PyObject *self, PyObject *unused) {
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  rg_ctx *c = t->co->ctx;
  if (rg_dtype_of(c, t->h) == RG_F32 && rg_numel(c, t->h) == 1) {
    float v;
    rg_status st;
    RGPY_WAIT(t->co, st = rg_item(c, t->h, &v));
    return st == RG_OK ? PyFloat_FromDouble(v) : rgpy_raise(t->co);
  }
  if (rg_error(c) != RG_OK) return rgpy_raise(t->co); /* a stale handle */
  if (rg_numel(c, t->h) != 1)
    return PyErr_Format(rgpy_Error,
                        "item() needs a tensor of one element; this one has %lld (use "
                        "numpy())", (long long)rg_numel(c, t->h));
  PyObject *arr = tensor_numpy(self, unused);
  if (!arr) return NULL;
  PyObject *r = PyObject_CallMethod(arr, "item", NULL);
  Py_DECREF(arr);
  return r;
}

static PyObject *tensor_float(PyObject *self) {
  PyObject *v = tensor_item(self, NULL);
  if (!v) return NULL;
  PyObject *f = PyNumber_Float(v);
  Py_DECREF(v);
  return f;
}

static PyObject *tensor_int(PyObject *self) {
  PyObject *v = tensor_item(self, NULL);
  if (!v) return NULL;
  PyObject *i = PyNumber_Long(v);
  Py_DECREF(v);
  return i;
}

static PyObject *tensor_tolist(PyObject *self, PyObject *unused) {
  PyObject *arr = tensor_numpy(self, unused);
  if (!arr) return NULL;
  PyObject *r = PyObject_CallMethod(arr, "tolist", NULL);
  Py_DECREF(arr);
  return r;
}

static PyObject *tensor_array(PyObject *self, PyObject *args, PyObject *kw) {
  PyObject *dtype = Py_None, *copy = Py_None;
  static char *names[] = {"dtype", "copy", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", names, &dtype, &copy)) return NULL;
  PyObject *arr = tensor_numpy(self, NULL);
  if (!arr || dtype == Py_None) return arr;
  PyObject *r = PyObject_CallMethod(arr, "astype", "O", dtype);
  Py_DECREF(arr);
  return r;
}

static PyObject *tensor_write(PyObject *self, PyObject *data) {
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  rg_ctx *c = t->co->ctx;
  rg_dtype dt = rg_dtype_of(c, t->h);
  if (rg_error(c) != RG_OK) return rgpy_raise(t->co);
  PyObject *f = rgpy_helper("as_array"), *dto = rgpy_dtype_object(dt);
  PyObject *pair = f && dto ? PyObject_CallFunctionObjArgs(f, data, dto, NULL) : NULL;
  Py_XDECREF(dto);
  if (!pair) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(PyTuple_GetItem(pair, 0), &view, PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(pair);
    return NULL;
  }
  rg_status st;
  RGPY_WAIT(t->co, st = rg_write(c, t->h, view.buf, (size_t)view.len));
  PyBuffer_Release(&view);
  Py_DECREF(pair);
  if (st != RG_OK) return rgpy_raise(t->co);
  Py_RETURN_NONE;
}

/* ---- autograd ---------------------------------------------------------------------------- */

static PyObject *tensor_backward(PyObject *self, PyObject *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  if (rg_backward(t->co->ctx, t->h) != RG_OK) return rgpy_raise(t->co);
  Py_RETURN_NONE;
}

static PyObject *tensor_retain_grad(PyObject *self, PyObject *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  if (rg_retain_grad(t->co->ctx, t->h) != RG_OK) return rgpy_raise(t->co);
  Py_INCREF(self);
  return self;
}

/* ---- attributes: none is a barrier -------------------------------------------------------- */

static PyObject *get_shape(PyObject *self, void *unused) {
  (void)unused;
  return usable((RgTensor *)self) < 0 ? NULL : shape_tuple((RgTensor *)self);
}

static PyObject *get_ndim(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  int nd = rg_ndim(t->co->ctx, t->h);
  return rg_error(t->co->ctx) != RG_OK ? rgpy_raise(t->co) : PyLong_FromLong(nd);
}

static PyObject *get_dtype(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  rg_dtype dt = rg_dtype_of(t->co->ctx, t->h);
  return rg_error(t->co->ctx) != RG_OK ? rgpy_raise(t->co) : rgpy_dtype_object(dt);
}

static PyObject *get_device(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  const char *name = rg_device_name(t->co->ctx); /* "cuda:0 (NVIDIA H200)", "cpu (2 ...)" */
  return PyUnicode_FromStringAndSize(name, (Py_ssize_t)strcspn(name, " "));
}

static PyObject *get_pending(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  return PyBool_FromLong(rg_is_pending(t->co->ctx, t->h));
}

static PyObject *get_pool(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  int p = rg_pool_of(t->co->ctx, t->h);
  if (p < 0) Py_RETURN_NONE; /* not live */
  return PyUnicode_FromString(p == RG_POOL_PASS ? "pass" : "persistent");
}

static PyObject *get_live(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  return PyBool_FromLong(t->co->ctx && rg_is_live(t->co->ctx, t->h));
}

static PyObject *get_name(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  const char *name = rg_name(t->co->ctx, t->h);
  if (rg_error(t->co->ctx) != RG_OK) return rgpy_raise(t->co);
  if (!name) Py_RETURN_NONE;
  return PyUnicode_FromString(name);
}

static PyObject *get_grad(PyObject *self, void *unused) {
  (void)unused;
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  return rgpy_result(t->co, rg_grad(t->co->ctx, t->h));
}

static PyObject *get_context(PyObject *self, void *unused) {
  (void)unused;
  PyObject *co = (PyObject *)((RgTensor *)self)->co;
  Py_INCREF((PyObject *)co);
  return co;
}

static PyObject *get_id(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(((RgTensor *)self)->h.id);
}

static PyObject *describe(RgTensor *t) {
  if (!t->co->ctx) return PyUnicode_FromString("closed context");
  char buf[512];
  rg_describe(t->co->ctx, t->h, buf, sizeof buf);
  return PyUnicode_FromString(buf);
}

static PyObject *tensor_describe(PyObject *self, PyObject *unused) {
  (void)unused;
  return describe((RgTensor *)self);
}

static PyObject *tensor_repr(PyObject *self) {
  PyObject *d = describe((RgTensor *)self);
  if (!d) return NULL;
  PyObject *r = PyUnicode_FromFormat("<resgrad.Tensor %U>", d);
  Py_DECREF(d);
  return r;
}

static Py_ssize_t tensor_len(PyObject *self) {
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return -1;
  int nd = rg_ndim(t->co->ctx, t->h);
  if (rg_error(t->co->ctx) != RG_OK) return rgpy_raise(t->co), -1;
  if (nd == 0) {
    PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
    return -1;
  }
  return (Py_ssize_t)rg_dim(t->co->ctx, t->h, 0);
}

/* t[key]: basic indexing by integers and slices of step 1, one per leading axis (rg_slice,
   then rg_reshape to drop the axes an integer picks). A copy, as every shape op's result. */
static PyObject *tensor_getitem(PyObject *self, PyObject *key) {
  RgTensor *t = (RgTensor *)self;
  if (usable(t) < 0) return NULL;
  rg_ctx *c = t->co->ctx;
  int nd = rg_ndim(c, t->h);
  if (rg_error(c) != RG_OK) return rgpy_raise(t->co);
  PyObject *keys = PyTuple_Check(key) ? (Py_INCREF(key), key) : PyTuple_Pack(1, key);
  if (!keys) return NULL;
  Py_ssize_t nk = PyTuple_Size(keys);
  if (nk > nd) {
    Py_DECREF(keys);
    return PyErr_Format(PyExc_IndexError, "%zd indices for a tensor of %d axes", nk, nd);
  }
  rg_tensor r = t->h;
  int64_t keep[RG_MAX_DIMS];
  int nkeep = 0;
  for (int a = 0; a < nd; a++) {
    int64_t n = rg_dim(c, t->h, a), start = 0, len = n;
    PyObject *k = a < nk ? PyTuple_GetItem(keys, a) : NULL;
    if (k && PySlice_Check(k)) {
      Py_ssize_t b, e, step;
      if (PySlice_Unpack(k, &b, &e, &step) < 0) goto fail;
      if (step != 1) {
        PyErr_SetString(PyExc_IndexError, "slices of step 1 only (rg_slice)");
        goto fail;
      }
      len = PySlice_AdjustIndices((Py_ssize_t)n, &b, &e, step);
      start = b;
      keep[nkeep++] = len;
    } else if (k) {
      long long i;
      if (rgpy_int_arg(k, "index", 0, 0, &i) < 0) goto fail;
      if (i < -n || i >= n) {
        PyErr_Format(PyExc_IndexError, "index %lld is out of range for axis %d of size %lld",
                     i, a, (long long)n);
        goto fail;
      }
      start = i < 0 ? i + n : i, len = 1;
    } else {
      keep[nkeep++] = n;
    }
    if (start != 0 || len != n) r = rg_slice(c, r, a, start, len);
  }
  Py_DECREF(keys);
  if (nkeep != nd) r = rg_reshape(c, r, nkeep, keep);
  else if (r.id == t->h.id) r = rg_slice(c, r, 0, 0, nd ? rg_dim(c, r, 0) : 1); /* t[:]: a copy */
  return rgpy_result(t->co, r);
fail:
  Py_DECREF(keys);
  return NULL;
}

static int tensor_bool(PyObject *self) {
  (void)self;
  PyErr_SetString(PyExc_TypeError,
                  "a tensor has no truth value without a barrier: use float(t), t.item() or "
                  "t.numpy() to read it");
  return -1;
}

/* ---- operators -------------------------------------------------------------------------- */

typedef rg_tensor (*binop)(rg_ctx *, rg_tensor, rg_tensor);

static int is_number(PyObject *o) {
  return PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o));
}

/* Operands an operator takes: tensors, numbers and anything NumPy makes an array of; for
   others Python tries the other operand's method (NotImplemented). */
static int operand_ok(PyObject *o) {
  return is_tensor(o) || is_number(o) || PyObject_CheckBuffer(o) ||
         PyObject_HasAttrString(o, "__array_interface__") || PyList_Check(o) ||
         PyTuple_Check(o);
}

static PyObject *binary(const char *name, PyObject *a, PyObject *b, binop f) {
  if (!operand_ok(a) || !operand_ok(b)) Py_RETURN_NOTIMPLEMENTED;
  PyObject *ts[2] = {a, b};
  RgContext *co = rgpy_context_of(name, ts, 2);
  rg_tensor x, y;
  if (!co || rgpy_tensor_arg(co, a, "a", 0, &x) < 0 || rgpy_tensor_arg(co, b, "b", 0, &y) < 0)
    return NULL;
  return rgpy_result(co, f(co->ctx, x, y));
}

/* x * s or x / s for a Python number s: rg_scale, no scalar tensor. */
static PyObject *scaled(PyObject *x, PyObject *s, int divide) {
  RgTensor *t = (RgTensor *)x;
  if (usable(t) < 0) return NULL;
  double v = PyFloat_AsDouble(s);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  return rgpy_result(t->co, rg_scale(t->co->ctx, t->h, (float)(divide ? 1.0 / v : v)));
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return binary("+", a, b, rg_add); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return binary("-", a, b, rg_sub); }
static PyObject *nb_mul(PyObject *a, PyObject *b) {
  if (is_tensor(a) && is_number(b)) return scaled(a, b, 0);
  if (is_tensor(b) && is_number(a)) return scaled(b, a, 0);
  return binary("*", a, b, rg_mul);
}
static PyObject *nb_div(PyObject *a, PyObject *b) {
  if (is_tensor(a) && is_number(b)) return scaled(a, b, 1);
  return binary("/", a, b, rg_div);
}
static PyObject *nb_matmul(PyObject *a, PyObject *b) { return binary("@", a, b, rg_matmul); }

static PyObject *nb_neg(PyObject *x) {
  RgTensor *t = (RgTensor *)x;
  if (usable(t) < 0) return NULL;
  return rgpy_result(t->co, rg_neg(t->co->ctx, t->h));
}

static PyObject *nb_pos(PyObject *x) {
  Py_INCREF(x);
  return x;
}

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
  if (!is_tensor(a) || !is_number(b) || mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
  RgTensor *t = (RgTensor *)a;
  if (usable(t) < 0) return NULL;
  double p = PyFloat_AsDouble(b);
  if (p == -1.0 && PyErr_Occurred()) return NULL;
  return rgpy_result(t->co, rg_pow(t->co->ctx, t->h, (float)p));
}

/* ---- the type ------------------------------------------------------------------------- */

static PyMethodDef own_methods[] = {
  {"numpy", tensor_numpy, METH_NOARGS,
   "numpy()\n--\n\nThe values as a new NumPy array (a barrier: runs what is queued). BF16 "
   "values are widened to float32."},
  {"item", tensor_item, METH_NOARGS,
   "item()\n--\n\nThe one element as a Python number (a barrier)."},
  {"tolist", tensor_tolist, METH_NOARGS, "tolist()\n--\n\nThe values as nested lists (a "
                                          "barrier)."},
  {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS,
   "__array__(dtype=None, copy=None)\n--\n\nnumpy.asarray(t): a copy of the values (a "
   "barrier)."},
  {"write", tensor_write, METH_O,
   "write(data)\n--\n\nOverwrites the values with data (same number of elements; a barrier "
   "so queued readers see the old values first). rg_write."},
  {"backward", tensor_backward, METH_NOARGS,
   "backward()\n--\n\nRecords the backward pass of this one-element loss; parameter "
   "gradients accumulate until zero_grad. Not a barrier. rg_backward."},
  {"retain_grad", tensor_retain_grad, METH_NOARGS,
   "retain_grad()\n--\n\nKeeps this tensor's gradient for .grad after the next backward(). "
   "Returns self."},
  {"describe", tensor_describe, METH_NOARGS,
   "describe()\n--\n\nOne line about the handle: dtype, shape, pool, generation, slot, "
   "pending or ready and by which op, gradient. Never a barrier. rg_describe."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"shape", get_shape, NULL, "The dimensions, a tuple (not a barrier).", NULL},
  {"ndim", get_ndim, NULL, "The number of axes.", NULL},
  {"dtype", get_dtype, NULL, "resgrad.float32, resgrad.bfloat16 or resgrad.int32.", NULL},
  {"device", get_device, NULL, "'cpu' or 'cuda:N': the context's device.", NULL},
  {"pending", get_pending, NULL, "True while a read would run queued work first.", NULL},
  {"pool", get_pool, NULL, "'pass' or 'persistent' (None for a stale handle).", NULL},
  {"is_live", get_live, NULL, "False once the handle is stale or the context closed.", NULL},
  {"name", get_name, NULL, "A parameter's name, else None.", NULL},
  {"grad", get_grad, NULL,
   "The gradient: a parameter's persistent buffer, or for another tensor the one the last "
   "backward() kept after retain_grad(). rg_grad.", NULL},
  {"context", get_context, NULL, "The Context the tensor belongs to.", NULL},
  {"handle", get_id, NULL, "The library's handle value (rg_tensor.id).", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef *all_methods; /* own_methods + the ops + DLPack, joined at init */

static PyMethodDef *join_methods(PyMethodDef *const *parts, int n) {
  size_t count = 1;
  for (int i = 0; i < n; i++)
    for (PyMethodDef *m = parts[i]; m->ml_name; m++) count++;
  PyMethodDef *all = PyMem_Calloc(count, sizeof *all), *p = all;
  if (!all) return NULL;
  for (int i = 0; i < n; i++)
    for (PyMethodDef *m = parts[i]; m->ml_name; m++) *p++ = *m;
  return all;
}

int rgpy_init_tensor(PyObject *m) {
  PyMethodDef *parts[] = {own_methods, rgpy_op_methods, rgpy_dlpack_methods};
  if (!(all_methods = join_methods(parts, 3))) return -1;
  PyType_Slot slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, all_methods},
    {Py_tp_getset, getset},
    {Py_tp_doc, "A value of a resgrad context: a generation-checked handle. Ops on it "
                "record and return at once; numpy(), item() and float() are the barrier "
                "that runs what is queued. Made by ctx.tensor(), ctx.param(), ops and "
                "operators (+ - * / @ ** and unary -)."},
    {Py_nb_add, nb_add},
    {Py_nb_subtract, nb_sub},
    {Py_nb_multiply, nb_mul},
    {Py_nb_true_divide, nb_div},
    {Py_nb_matrix_multiply, nb_matmul},
    {Py_nb_negative, nb_neg},
    {Py_nb_positive, nb_pos},
    {Py_nb_power, nb_pow},
    {Py_nb_float, tensor_float},
    {Py_nb_int, tensor_int},
    {Py_mp_length, tensor_len},
    {Py_mp_subscript, tensor_getitem},
    {Py_nb_bool, tensor_bool},
    {0, NULL}};
  PyType_Spec spec = {"resgrad.Tensor", sizeof(RgTensor), 0, Py_TPFLAGS_DEFAULT, slots};
  rgpy_Tensor = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_Tensor) return -1;
  /* NumPy's operators give way to the Tensor's (array + tensor is a tensor). */
  if (PyObject_SetAttrString((PyObject *)rgpy_Tensor, "__array_ufunc__", Py_None) < 0)
    return -1;
  return PyModule_AddObjectRef(m, "Tensor", (PyObject *)rgpy_Tensor);
}
