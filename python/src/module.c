/*
 * module.c - the module resgrad._resgrad: its exceptions, the conversion of Python
 * arguments shared by every binding, and module initialisation.
 */
#include "ext.h"

#include <string.h>

PyObject *rgpy_Error;
/* One exception class per status; index -status (RG_OK's slot unused). */
static PyObject *status_exc[9];

PyObject *rgpy_raise_status(rg_status st, const char *msg) {
  int i = -(int)st;
  PyObject *cls = i > 0 && i < 9 && status_exc[i] ? status_exc[i] : rgpy_Error;
  PyObject *text = PyUnicode_FromString(msg && *msg ? msg : rg_status_str(st));
  PyObject *code = PyLong_FromLong((long)st);
  PyObject *exc = text && code ? PyObject_CallFunctionObjArgs(cls, text, NULL) : NULL;
  if (exc && PyObject_SetAttrString(exc, "status", code) == 0 &&
      PyObject_SetAttrString(exc, "message", text) == 0)
    PyErr_SetObject(cls, exc);
  Py_XDECREF(exc);
  Py_XDECREF(code);
  Py_XDECREF(text);
  return NULL;
}

PyObject *rgpy_raise(RgContext *co) {
  rg_status st = rg_error(co->ctx);
  if (st == RG_OK) st = RG_ERR_MISUSE; /* never expected: a failure without a message */
  rgpy_raise_status(st, rg_errmsg(co->ctx));
  rg_clear_error(co->ctx);
  return NULL;
}

int rgpy_usable(RgContext *co) {
  if (!co->ctx) {
    PyErr_SetString(rgpy_Error, "the context is closed; open a new resgrad.Context");
    return -1;
  }
  if (co->busy) {
    PyErr_SetString(rgpy_Error,
                    "the context is in use by another thread (a context is used by one "
                    "thread at a time; give each thread its own resgrad.Context)");
    return -1;
  }
  return 0;
}

void rgpy_free_object(PyObject *self, RgContext *co) {
  PyTypeObject *tp = Py_TYPE(self);
  Py_XDECREF((PyObject *)co);
  ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
  Py_DECREF(tp);
}

/* ---- arguments ------------------------------------------------------------------------ */

int rgpy_parse(const char *fn, const char *const *names, int nreq, int nmax,
               PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out) {
  if (nargs > nmax) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, nmax,
                 nargs);
    return -1;
  }
  for (int i = 0; i < nmax; i++) out[i] = i < nargs ? args[i] : NULL;
  Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; k++) {
    PyObject *key = PyTuple_GetItem(kwnames, k);
    int i = 0;
    while (i < nmax && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) i++;
    if (i == nmax) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
      return -1;
    }
    if (out[i]) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                   names[i]);
      return -1;
    }
    out[i] = args[nargs + k];
  }
  for (int i = 0; i < nreq; i++)
    if (!out[i]) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return -1;
    }
  return 0;
}

int rgpy_float_arg(PyObject *o, const char *name, double *out) {
  double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a number, not %R", name, o);
    return -1;
  }
  *out = v;
  return 0;
}

int rgpy_int_arg(PyObject *o, const char *name, int none_ok, long long none_value,
                 long long *out) {
  if (o == Py_None && none_ok) {
    *out = none_value;
    return 0;
  }
  PyObject *i = PyNumber_Index(o);
  if (!i) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be an integer%s", name, none_ok ? " or None" : "");
    return -1;
  }
  long long v = PyLong_AsLongLong(i);
  Py_DECREF(i);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = v;
  return 0;
}

int rgpy_enum_arg(PyObject *o, const char *name, const RgEnum *e, long long *out) {
  if (PyUnicode_Check(o)) {
    for (int i = 0; e[i].name; i++)
      if (PyUnicode_CompareWithASCIIString(o, e[i].name) == 0) {
        *out = e[i].value;
        return 0;
      }
  } else {
    PyObject *i = PyNumber_Index(o);
    if (i) {
      long long v = PyLong_AsLongLong(i);
      Py_DECREF(i);
      for (int k = 0; e[k].name; k++)
        if (e[k].value == v) {
          *out = v;
          return 0;
        }
    }
    PyErr_Clear();
  }
  char names[256] = "";
  for (int i = 0; e[i].name; i++) {
    strncat(names, i ? ", '" : "'", sizeof names - strlen(names) - 1);
    strncat(names, e[i].name, sizeof names - strlen(names) - 1);
    strncat(names, "'", sizeof names - strlen(names) - 1);
  }
  PyErr_Format(PyExc_ValueError, "%s must be one of %s (or its value), not %R", name, names,
               o);
  return -1;
}

static int int_sequence(PyObject *o, const char *name, long long *v, int *n) {
  if (PyLong_Check(o)) {
    *n = 1;
    return rgpy_int_arg(o, name, 0, 0, v);
  }
  PyObject *seq = PySequence_Tuple(o);
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of integers", name);
    return -1;
  }
  Py_ssize_t len = PyTuple_Size(seq);
  if (len > RG_MAX_DIMS) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s has %zd entries; tensors have at most %d axes", name,
                 len, RG_MAX_DIMS);
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++)
    if (rgpy_int_arg(PyTuple_GetItem(seq, i), name, 0, 0, &v[i]) < 0) {
      Py_DECREF(seq);
      return -1;
    }
  *n = (int)len;
  Py_DECREF(seq);
  return 0;
}

int rgpy_dims_arg(PyObject *o, const char *name, int64_t *dims, int *ndim) {
  long long v[RG_MAX_DIMS];
  if (int_sequence(o, name, v, ndim) < 0) return -1;
  for (int i = 0; i < *ndim; i++) dims[i] = (int64_t)v[i];
  return 0;
}

int rgpy_perm_arg(RgContext *co, rg_tensor x, PyObject *o, const char *name, int *perm) {
  long long v[RG_MAX_DIMS];
  int n = 0;
  if (int_sequence(o, name, v, &n) < 0) return -1;
  int want = rg_ndim(co->ctx, x);
  if (n != want) {
    PyErr_Format(PyExc_ValueError, "%s has %d entries; the tensor has %d axes", name, n, want);
    return -1;
  }
  for (int i = 0; i < n; i++) perm[i] = (int)v[i];
  return 0;
}

/* ---- resgrad._helpers: the parts written in Python (NumPy conversions, dtypes) -------- */

PyObject *rgpy_helper(const char *name) {
  static PyObject *mod;
  if (!mod && !(mod = PyImport_ImportModule("resgrad._helpers"))) return NULL;
  PyObject *f = PyObject_GetAttrString(mod, name);
  if (f) Py_DECREF(f); /* the module keeps it alive */
  return f;
}

PyObject *rgpy_dtype_object(rg_dtype dt) {
  PyObject *all = rgpy_helper("DTYPES");
  if (!all) return NULL;
  PyObject *d = PySequence_GetItem(all, (Py_ssize_t)dt);
  return d;
}

int rgpy_dtype_arg(PyObject *o, rg_dtype *out) {
  PyObject *f = rgpy_helper("dtype_code");
  if (!f) return -1;
  PyObject *r = PyObject_CallFunctionObjArgs(f, o, NULL);
  if (!r) return -1;
  long v = PyLong_AsLong(r);
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = (rg_dtype)v;
  return 0;
}

/* ---- the module ------------------------------------------------------------------------ */

static PyObject *version(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyUnicode_FromString(rg_version());
}

static PyMethodDef module_methods[] = {
  {"version", version, METH_NOARGS, "version()\n--\n\nThe C library's version string."},
  {"from_dlpack", (PyCFunction)(void (*)(void))rgpy_from_dlpack,
   METH_FASTCALL | METH_KEYWORDS,
   "from_dlpack(x, ctx)\n--\n\nA tensor of ctx on the memory of x (an object with "
   "__dlpack__: a NumPy array on the CPU, a PyTorch or CuPy array on CUDA), without a "
   "copy. It lives in the pass pool: rg_step_begin makes it stale and lets x go."},
  {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "resgrad._resgrad",
                                        "resgrad's C extension; use the package resgrad.",
                                        -1, NULL, NULL, NULL, NULL, NULL};

static int add_exceptions(PyObject *m) {
  static const struct {
    rg_status st;
    const char *name, *doc;
    PyObject **base2;
  } table[] = {
    {RG_ERR_MISUSE, "resgrad.UsageError",
     "A bad argument: a wrong shape, dtype or state (RG_ERR_MISUSE).", &PyExc_ValueError},
    {RG_ERR_STALE, "resgrad.StaleHandleError",
     "A tensor from a pool generation that was reset (RG_ERR_STALE).", NULL},
    {RG_ERR_OOM, "resgrad.OutOfMemoryError",
     "A pool budget or the device ran out; nothing was allocated (RG_ERR_OOM).",
     &PyExc_MemoryError},
    {RG_ERR_DEVICE, "resgrad.DeviceError", "The device reported a fault (RG_ERR_DEVICE).",
     NULL},
    {RG_ERR_NONFINITE, "resgrad.NonFiniteError",
     "A NaN or Inf where finite values were promised (RG_ERR_NONFINITE).",
     &PyExc_ArithmeticError},
    {RG_ERR_IO, "resgrad.InputOutputError",
     "A file missing, unreadable or corrupt, or a peer rank lost (RG_ERR_IO).",
     &PyExc_OSError},
    {RG_ERR_UNSUPPORTED, "resgrad.UnsupportedError",
     "Not available in this build or on this device (RG_ERR_UNSUPPORTED).",
     &PyExc_NotImplementedError},
    {RG_ERR_FAILED, "resgrad.DrainFailedError",
     "The value was pending in a drain that failed (RG_ERR_FAILED).", NULL},
  };
  rgpy_Error = PyErr_NewExceptionWithDoc(
      "resgrad.Error",
      "Every error of the library: .status is the rg_status code, .message the library's "
      "message (also str(e)).",
      NULL, NULL);
  if (!rgpy_Error || PyModule_AddObjectRef(m, "Error", rgpy_Error) < 0) return -1;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
    PyObject *bases = table[i].base2 ? PyTuple_Pack(2, rgpy_Error, *table[i].base2)
                                     : PyTuple_Pack(1, rgpy_Error);
    if (!bases) return -1;
    PyObject *cls = PyErr_NewExceptionWithDoc(table[i].name, table[i].doc, bases, NULL);
    Py_DECREF(bases);
    if (!cls) return -1;
    status_exc[-(int)table[i].st] = cls;
    if (PyModule_AddObjectRef(m, strchr(table[i].name, '.') + 1, cls) < 0) return -1;
  }
  return 0;
}

/* OPS: the names of the generated op functions, in the header's order. */
static PyObject *op_names(void) {
  Py_ssize_t n = 0;
  while (rgpy_op_functions[n].ml_name) n++;
  PyObject *t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t && i < n; i++)
    PyTuple_SetItem(t, i, PyUnicode_FromString(rgpy_op_functions[i].ml_name));
  return t;
}

PyMODINIT_FUNC PyInit__resgrad(void) {
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (PyModule_AddFunctions(m, module_methods) < 0 ||
      PyModule_AddFunctions(m, rgpy_op_functions) < 0 || add_exceptions(m) < 0 ||
      rgpy_init_context(m) < 0 || rgpy_init_tensor(m) < 0 || rgpy_init_optim(m) < 0 ||
      rgpy_init_gpt(m) < 0 || rgpy_init_data(m) < 0 || rgpy_init_ring(m) < 0 ||
      rgpy_init_text(m) < 0 ||
      PyModule_AddObject(m, "OP_TABLE", rgpy_op_table()) < 0 ||
      PyModule_AddObject(m, "OPS", op_names()) < 0 ||
      PyModule_AddIntConstant(m, "ALL_AXES", RG_ALL_AXES) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
