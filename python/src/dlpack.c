/* dlpack.c - placeholder until the library's sharing primitives land. */
#include "ext.h"

static PyObject *unsupported(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  (void)self, (void)args, (void)nargs, (void)kwnames;
  return rgpy_raise_status(RG_ERR_UNSUPPORTED, "DLPack is not available yet");
}

PyMethodDef rgpy_dlpack_methods[] = {
  {"__dlpack__", (PyCFunction)(void (*)(void))unsupported, METH_FASTCALL | METH_KEYWORDS, NULL},
  {"__dlpack_device__", (PyCFunction)(void (*)(void))unsupported, METH_FASTCALL | METH_KEYWORDS,
   NULL},
  {NULL, NULL, 0, NULL}};

PyObject *rgpy_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  return unsupported(self, args, nargs, kwnames);
}
