/*
 * text.c - resgrad.Tokenizer: GPT-2's byte-level BPE tokenizer (resgrad_text.h).
 *
 * A tokenizer belongs to no context: it is plain host data, read-only once loaded, so
 * encode and decode release the GIL and any number of threads may use one at once.
 */
#include "ext.h"
#include "resgrad_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static PyTypeObject *rgpy_Tokenizer;

typedef struct RgBpe {
  PyObject_HEAD
  rg_bpe *bpe;
} RgBpe;

static int bpe_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"path", NULL};
  RgBpe *r = (RgBpe *)self;
  PyObject *path;
  if (r->bpe) {
    PyErr_SetString(rgpy_Error, "the tokenizer is already loaded");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", names, PyUnicode_FSConverter, &path))
    return -1;
  char *p, msg[1024];
  Py_ssize_t n;
  PyBytes_AsStringAndSize(path, &p, &n);
  struct stat st;
  int missing = stat(p, &st) != 0;
  rg_bpe *bpe;
  Py_BEGIN_ALLOW_THREADS
  bpe = rg_bpe_load(p, msg, sizeof msg);
  Py_END_ALLOW_THREADS
  Py_DECREF(path);
  if (!bpe) {
    if (missing) {
      PyObject *e = Py_BuildValue("(is)", ENOENT, msg);
      if (e) PyErr_SetObject(PyExc_FileNotFoundError, e);
      Py_XDECREF(e);
    } else {
      PyErr_SetString(PyExc_ValueError, msg);
    }
    return -1;
  }
  r->bpe = bpe;
  return 0;
}

static void bpe_dealloc(PyObject *self) {
  RgBpe *r = (RgBpe *)self;
  rg_bpe_free(r->bpe);
  r->bpe = NULL;
  rgpy_free_object(self, NULL);
}

static rg_bpe *loaded(PyObject *self) {
  RgBpe *r = (RgBpe *)self;
  if (!r->bpe) PyErr_SetString(rgpy_Error, "the tokenizer is not loaded: call "
                               "resgrad.Tokenizer(path)");
  return r->bpe;
}

static PyObject *bpe_encode(PyObject *self, PyObject *arg) {
  rg_bpe *bpe = loaded(self);
  if (!bpe) return NULL;
  const char *s;
  Py_ssize_t len;
  if (PyUnicode_Check(arg)) {
    s = PyUnicode_AsUTF8AndSize(arg, &len); /* a lone surrogate raises here */
    if (!s) return NULL;
  } else if (PyBytes_Check(arg)) {
    char *b;
    if (PyBytes_AsStringAndSize(arg, &b, &len) < 0) return NULL;
    s = b;
  } else {
    PyErr_SetString(PyExc_TypeError, "encode takes a str, or bytes holding UTF-8");
    return NULL;
  }
  /* every id stands for one byte of the text at least */
  int32_t *ids = PyMem_Malloc(sizeof *ids * (size_t)(len ? len : 1));
  if (!ids) return PyErr_NoMemory();
  char msg[256];
  int64_t n;
  Py_BEGIN_ALLOW_THREADS
  n = rg_bpe_encode_msg(bpe, s, (size_t)len, ids, (int64_t)len, msg, sizeof msg);
  Py_END_ALLOW_THREADS
  PyObject *list = n < 0 ? NULL : PyList_New((Py_ssize_t)n);
  if (n < 0) PyErr_SetString(PyExc_ValueError, msg);
  for (int64_t i = 0; list && i < n; i++) {
    PyObject *v = PyLong_FromLong(ids[i]);
    if (!v || PyList_SetItem(list, (Py_ssize_t)i, v) < 0) Py_CLEAR(list);
  }
  PyMem_Free(ids);
  return list;
}

/* The bytes that the ids of seq decode to, as a new bytes object. */
static PyObject *decode_bytes(rg_bpe *bpe, PyObject *seq) {
  PyObject *fast = PySequence_Fast(seq, "decode takes a sequence of token ids");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Size(fast);
  int32_t *ids = PyMem_Malloc(sizeof *ids * (size_t)(n ? n : 1));
  PyObject *out = NULL;
  if (!ids) {
    PyErr_NoMemory();
    goto done;
  }
  int32_t vocab = rg_bpe_vocab_size(bpe);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_GetItem(fast, i);
    long long v = item ? PyLong_AsLongLong(item) : -1;
    Py_XDECREF(item);
    if (v == -1 && PyErr_Occurred()) goto done;
    if (v < 0 || v >= vocab || !rg_bpe_token_str(bpe, (int32_t)v)) {
      PyErr_Format(PyExc_ValueError, "id %lld (at %zd) is not in the vocabulary (ids 0 to "
                   "%d that name a token)", v, i, (int)vocab - 1);
      goto done;
    }
    ids[i] = (int32_t)v;
  }
  int64_t len = rg_bpe_decode(bpe, ids, n, NULL, 0);
  out = len < 0 ? NULL : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
  if (out) rg_bpe_decode(bpe, ids, n, PyBytes_AsString(out), (size_t)len);
done:
  PyMem_Free(ids);
  Py_DECREF(fast);
  return out;
}

static PyObject *bpe_decode(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"ids", "errors", NULL};
  PyObject *seq;
  const char *errors = "replace";
  rg_bpe *bpe = loaded(self);
  if (!bpe || !PyArg_ParseTupleAndKeywords(args, kw, "O|s", names, &seq, &errors)) return NULL;
  PyObject *b = decode_bytes(bpe, seq);
  if (!b) return NULL;
  PyObject *s = PyUnicode_DecodeUTF8(PyBytes_AsString(b), PyBytes_Size(b), errors);
  Py_DECREF(b);
  return s;
}

static PyObject *bpe_decode_bytes(PyObject *self, PyObject *seq) {
  rg_bpe *bpe = loaded(self);
  return bpe ? decode_bytes(bpe, seq) : NULL;
}

static PyObject *bpe_token_id(PyObject *self, PyObject *arg) {
  rg_bpe *bpe = loaded(self);
  if (!bpe) return NULL;
  const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
  if (!s) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "token_id takes a str");
    return NULL;
  }
  int32_t id = rg_bpe_token_id(bpe, s);
  if (id < 0) Py_RETURN_NONE;
  return PyLong_FromLong(id);
}

static PyObject *bpe_token_str(PyObject *self, PyObject *arg) {
  rg_bpe *bpe = loaded(self);
  long long id;
  if (!bpe || rgpy_int_arg(arg, "id", 0, 0, &id) < 0) return NULL;
  const char *s = id < 0 || id > INT32_MAX ? NULL : rg_bpe_token_str(bpe, (int32_t)id);
  if (!s) Py_RETURN_NONE;
  return PyUnicode_FromString(s);
}

static PyObject *get_vocab_size(PyObject *self, void *unused) {
  (void)unused;
  rg_bpe *bpe = loaded(self);
  return bpe ? PyLong_FromLong(rg_bpe_vocab_size(bpe)) : NULL;
}

static PyObject *get_unicode_version(PyObject *self, void *unused) {
  (void)self;
  (void)unused;
  return PyUnicode_FromString(rg_bpe_unicode_version());
}

static PyMethodDef methods[] = {
  {"encode", bpe_encode, METH_O,
   "encode(text)\n--\n\nThe token ids of text (a str, or bytes holding UTF-8) as a list of "
   "int: special tokens such as '<|endoftext|>' cut out whole, the rest cut by GPT-2's "
   "pattern and merged; no token added (rg_bpe_encode)."},
  {"decode", (PyCFunction)(void (*)(void))bpe_decode, METH_VARARGS | METH_KEYWORDS,
   "decode(ids, errors='replace')\n--\n\nThe text of a sequence of token ids. Ids that end "
   "inside a character decode with errors (as bytes.decode); decode_bytes gives the bytes "
   "exactly."},
  {"decode_bytes", bpe_decode_bytes, METH_O,
   "decode_bytes(ids)\n--\n\nThe bytes a sequence of token ids stands for (rg_bpe_decode)."},
  {"token_id", bpe_token_id, METH_O,
   "token_id(token)\n--\n\nThe id of a token as the vocabulary spells it ('<|endoftext|>', "
   "'\\u0120the'), or None."},
  {"token_str", bpe_token_str, METH_O,
   "token_str(id)\n--\n\nThe vocabulary's string of id, or None for an id it lacks."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"vocab_size", get_vocab_size, NULL, "The number of ids: the largest id + 1 (50257 for "
   "GPT-2).", NULL},
  {"unicode_version", get_unicode_version, NULL, "The Unicode version of the letter, number "
   "and whitespace classes that pre-tokenization uses.", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

int rgpy_init_text(PyObject *m) {
  PyType_Slot slots[] = {
    {Py_tp_init, bpe_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, bpe_dealloc},
    {Py_tp_methods, methods},
    {Py_tp_getset, getset},
    {Py_tp_doc, "Tokenizer(path)\n--\n\nGPT-2's byte-level BPE tokenizer, read from a folder "
                "holding vocab.json and merges.txt, or tokenizer.json, or from a "
                "tokenizer.json file (rg_bpe_load; docs/text.md). Raises FileNotFoundError "
                "for a missing path and ValueError, naming the file and place, for a file "
                "that is not a GPT-2 tokenizer."},
    {0, NULL}};
  PyType_Spec spec = {"resgrad.Tokenizer", sizeof(RgBpe), 0, Py_TPFLAGS_DEFAULT, slots};
  rgpy_Tokenizer = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_Tokenizer) return -1;
  return PyModule_AddObjectRef(m, "Tokenizer", (PyObject *)rgpy_Tokenizer);
}
