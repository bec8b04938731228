/*
 * ext.h - what the files of the extension module resgrad._resgrad share.
 *
 * The module is written against CPython's limited API (Py_LIMITED_API, set by the build),
 * so one binary serves every Python from the version it names on.
 *
 * Invariants:
 *  - A Tensor holds a strong reference to its Context object and the library's handle
 *    value; it owns no memory of its own (the pools do), so dropping one frees nothing and
 *    a handle kept past rg_step_begin is stale: the library says so, the module raises
 *    StaleHandleError.
 *  - A closed Context has ctx == NULL; every call through it raises resgrad.Error.
 *  - busy is set while a thread waits in the library with the GIL released (a barrier);
 *    any other call on that context meanwhile raises instead of racing it (a context is
 *    used by one thread at a time, resgrad.h).
 *  - The library's sticky error is cleared whenever it is turned into an exception, so
 *    the next call reports its own.
 */
#ifndef RGPY_EXT_H
#define RGPY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <resgrad.h>
#include <resgrad_nn.h>

typedef struct RgContext {
  PyObject_HEAD
  rg_ctx *ctx;
  int busy;
  PyObject *consts;   /* dict: Python float -> handle id (int) of a persistent scalar */
  long exports;       /* DLPack exports that still pin a tensor of this context */
} RgContext;

typedef struct RgTensor {
  PyObject_HEAD
  RgContext *co;
  rg_tensor h;
} RgTensor;

typedef struct RgEnum { const char *name; long long value; } RgEnum;
typedef struct RgOpRow {
  const char *kernel, *call;
  int nin, nout;
  const char *flags;
} RgOpRow;

extern PyTypeObject *rgpy_Context, *rgpy_Tensor, *rgpy_Optimizer, *rgpy_GPT;
extern PyObject *rgpy_Error; /* resgrad.Error */

/* module.c: errors and argument conversion */
PyObject *rgpy_raise(RgContext *co);                /* the sticky error as an exception */
PyObject *rgpy_raise_status(rg_status st, const char *msg);
int rgpy_usable(RgContext *co);                     /* -1 (raised) if closed or busy */
/* The end of every tp_dealloc: drops the object's reference to its context (co may be
   NULL), frees the object and drops its (heap) type. */
void rgpy_free_object(PyObject *self, RgContext *co);
int rgpy_parse(const char *fn, const char *const *names, int nreq, int nmax,
               PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out);
int rgpy_float_arg(PyObject *o, const char *name, double *out);
int rgpy_int_arg(PyObject *o, const char *name, int none_ok, long long none_value,
                 long long *out);
int rgpy_enum_arg(PyObject *o, const char *name, const RgEnum *e, long long *out);
int rgpy_dims_arg(PyObject *o, const char *name, int64_t *dims, int *ndim);
int rgpy_perm_arg(RgContext *co, rg_tensor x, PyObject *o, const char *name, int *perm);
int rgpy_dtype_arg(PyObject *o, rg_dtype *out); /* a dtype, its value or its name */
PyObject *rgpy_helper(const char *name);        /* resgrad._helpers.<name> (borrowed) */
PyObject *rgpy_dtype_object(rg_dtype dt);       /* resgrad.float32 ... (new reference) */

/* tensor.c */
PyObject *rgpy_wrap(RgContext *co, rg_tensor t); /* a new Tensor; t must be live */
PyObject *rgpy_result(RgContext *co, rg_tensor t); /* rgpy_wrap, or raise for RG_NONE */
RgContext *rgpy_context_of(const char *fn, PyObject *const *ts, int n);
int rgpy_tensor_arg(RgContext *co, PyObject *o, const char *name, int none_ok, rg_tensor *out);
/* obj (anything NumPy turns into an array) as a new tensor: rg_input (persistent == 0)
   or rg_constant; dtype: a dtype object, or NULL to infer it. */
PyObject *rgpy_from_host(RgContext *co, PyObject *obj, PyObject *dtype, int persistent);
PyObject *rgpy_as_method(PyObject *(*fn)(PyObject *, PyObject *const *, Py_ssize_t,
                                         PyObject *),
                         PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);
int rgpy_init_tensor(PyObject *m);

/* context.c, optim.c, gpt.c, data.c, ring.c, text.c, dlpack.c */
int rgpy_init_context(PyObject *m);
int rgpy_init_optim(PyObject *m);
/* The optimizer of o, a resgrad Optimizer of co's; NULL (raised) otherwise. */
rg_optim *rgpy_optim_of(PyObject *o, RgContext *co);
int rgpy_init_gpt(PyObject *m);
int rgpy_init_data(PyObject *m);
int rgpy_init_ring(PyObject *m); /* resgrad.Ring (ring.c) */
int rgpy_init_text(PyObject *m); /* resgrad.Tokenizer (text.c) */
extern PyMethodDef rgpy_dlpack_methods[];        /* Tensor.__dlpack__, __dlpack_device__ */
PyObject *rgpy_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);

/* ops.c: the generated bindings */
extern PyMethodDef rgpy_op_functions[], rgpy_op_methods[];
PyObject *rgpy_op_table(void); /* OP_TABLE: a tuple of (kernel, call, nin, nout, flags) */

/* The GIL released around a library call that may wait (a barrier), with the context
   marked busy so no other thread enters it meanwhile. */
#define RGPY_WAIT(co, stmt)  \
  do {                       \
    (co)->busy = 1;          \
    Py_BEGIN_ALLOW_THREADS   \
    stmt;                    \
    Py_END_ALLOW_THREADS     \
    (co)->busy = 0;          \
  } while (0)

#endif
