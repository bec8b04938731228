/*
 * data.c - resgrad.data.TokenData: a token file (llm.c's .bin or raw bytes) and the
 * language-model batches cut from it (rg_data).
 *
 * rg_close frees the rg_data with the context, so every use checks the context is open
 * and the handle is let go only while it is.
 */
#include "ext.h"

#include <string.h>

static PyTypeObject *rgpy_TokenData;

typedef struct RgData {
  PyObject_HEAD
  RgContext *co;
  rg_data *d;
} RgData;

static int data_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"ctx", "path", "format", "vocab", "seed", "world", "rank",
                          "prefetch", NULL};
  static const RgEnum formats[] = {{"auto", RG_DATA_AUTO}, {"raw", RG_DATA_RAW},
                                   {"llmc", RG_DATA_LLMC}, {NULL, 0}};
  RgData *r = (RgData *)self;
  PyObject *ctx, *path, *format = NULL;
  long long vocab = 0;
  unsigned long long seed = 0;
  int world = 0, rank = 0, prefetch = 1;
  if (r->d) {
    PyErr_SetString(rgpy_Error, "the dataset is already open");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|$OLKiip", names, &ctx, PyUnicode_FSConverter,
                                   &path, &format, &vocab, &seed, &world, &rank, &prefetch))
    return -1;
  long long f = RG_DATA_AUTO;
  RgContext *co = (RgContext *)ctx;
  int bad = !PyObject_TypeCheck(ctx, rgpy_Context);
  if (bad) PyErr_SetString(PyExc_TypeError, "ctx must be a resgrad.Context");
  if (bad || rgpy_usable(co) < 0 || (format && rgpy_enum_arg(format, "format", formats, &f) < 0)) {
    Py_DECREF(path);
    return -1;
  }
  rg_data_options o = {(rg_data_format)f, vocab, seed, world, rank, !prefetch};
  Py_ssize_t n;
  char *p;
  PyBytes_AsStringAndSize(path, &p, &n);
  rg_data *d;
  RGPY_WAIT(co, d = rg_data_open(co->ctx, p, &o)); /* reads the whole file */
  Py_DECREF(path);
  if (!d) return rgpy_raise(co), -1;
  Py_INCREF((PyObject *)co);
  Py_XDECREF((PyObject *)r->co);
  r->co = co;
  r->d = d;
  return 0;
}

static void free_now(RgData *r) {
  if (r->d && r->co && r->co->ctx) rg_data_free(r->d); /* else rg_close freed it */
  r->d = NULL;
}

static void data_dealloc(PyObject *self) {
  RgData *r = (RgData *)self;
  free_now(r);
  rgpy_free_object(self, r->co);
}

static RgData *usable(PyObject *self) {
  RgData *r = (RgData *)self;
  if (!r->d) {
    PyErr_SetString(rgpy_Error, "the dataset is closed");
    return NULL;
  }
  return rgpy_usable(r->co) < 0 ? NULL : r;
}

static PyObject *data_batch(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"batch", "block", "random", NULL};
  long long B, T;
  int random = 1;
  RgData *r = usable(self);
  if (!r || !PyArg_ParseTupleAndKeywords(args, kw, "LL|p", names, &B, &T, &random)) return NULL;
  rg_tensor idx, tgt;
  if (rg_data_batch(r->d, B, T, random, &idx, &tgt) != RG_OK) return rgpy_raise(r->co);
  PyObject *a = rgpy_wrap(r->co, idx), *b = a ? rgpy_wrap(r->co, tgt) : NULL;
  PyObject *pair = b ? PyTuple_Pack(2, a, b) : NULL;
  Py_XDECREF(a);
  Py_XDECREF(b);
  return pair;
}

static PyObject *data_seek(PyObject *self, PyObject *arg) {
  RgData *r = usable(self);
  long long n;
  if (!r || rgpy_int_arg(arg, "batch", 0, 0, &n) < 0) return NULL;
  if (rg_data_seek(r->d, n) != RG_OK) return rgpy_raise(r->co);
  Py_RETURN_NONE;
}

static PyObject *data_close(PyObject *self, PyObject *unused) {
  (void)unused;
  RgData *r = (RgData *)self;
  if (r->d && rgpy_usable(r->co) < 0) return NULL;
  free_now(r);
  Py_RETURN_NONE;
}

static PyObject *get_tokens(PyObject *self, void *unused) {
  (void)unused;
  RgData *r = usable(self);
  return r ? PyLong_FromLongLong(rg_data_tokens(r->d)) : NULL;
}

static PyObject *get_next(PyObject *self, void *unused) {
  (void)unused;
  RgData *r = usable(self);
  return r ? PyLong_FromLongLong(rg_data_next(r->d)) : NULL;
}

static PyObject *get_epoch(PyObject *self, void *unused) {
  (void)unused;
  RgData *r = usable(self);
  return r ? PyLong_FromLongLong(rg_data_epoch(r->d)) : NULL;
}

static PyObject *get_format(PyObject *self, void *unused) {
  (void)unused;
  RgData *r = usable(self);
  if (!r) return NULL;
  return PyUnicode_FromString(rg_data_format_of(r->d) == RG_DATA_LLMC ? "llmc" : "raw");
}

static PyMethodDef methods[] = {
  {"batch", (PyCFunction)(void (*)(void))data_batch, METH_VARARGS | METH_KEYWORDS,
   "batch(batch, block, random=True)\n--\n\nRecords the upload of the next batch: (idx, "
   "targets), int32 [batch, block] each, targets the next token of each position "
   "(rg_data_batch). Not a barrier."},
  {"seek", data_seek, METH_O, "seek(batch)\n--\n\nThe number of the next batch (resume)."},
  {"close", data_close, METH_NOARGS, "close()\n--\n\nUnmaps the file (rg_data_free)."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"tokens", get_tokens, NULL, "Tokens in the file.", NULL},
  {"next", get_next, NULL, "The number of the next batch.", NULL},
  {"epoch", get_epoch, NULL, "Passes through the data so far.", NULL},
  {"format", get_format, NULL, "'llmc' or 'raw': how the file was read.", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

int rgpy_init_data(PyObject *m) {
  PyType_Slot slots[] = {
    {Py_tp_init, data_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, data_dealloc},
    {Py_tp_methods, methods},
    {Py_tp_getset, getset},
    {Py_tp_doc, "TokenData(ctx, path, *, format='auto', vocab=0, seed=0, world=0, rank=0, "
                "prefetch=True)\n--\n\nA token file memory-mapped and checked once (llm.c's "
                ".bin: 256 int32 header then uint16 tokens; or raw bytes), and the batches "
                "of a language model cut from it by number, random or sequential "
                "(rg_data_open; docs/data.md)."},
    {0, NULL}};
  PyType_Spec spec = {"resgrad.data.TokenData", sizeof(RgData), 0, Py_TPFLAGS_DEFAULT, slots};
  rgpy_TokenData = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_TokenData) return -1;
  return PyModule_AddObjectRef(m, "TokenData", (PyObject *)rgpy_TokenData);
}
