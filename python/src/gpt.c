/*
 * gpt.c - resgrad.nn.GPT's engine: the library's GPT (rg_gpt, resgrad_nn.h), whose
 * parameters live in the context and whose forward pass records the fused ops.
 */
#include "ext.h"

PyTypeObject *rgpy_GPT;

typedef struct RgGPT {
  PyObject_HEAD
  RgContext *co;
  rg_gpt *gpt;
} RgGPT;

static int gpt_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"ctx", "vocab", "block", "layers", "width", "heads", "dropout",
                          "prefix", "checkpoint", NULL};
  RgGPT *g = (RgGPT *)self;
  PyObject *ctx;
  long long v, t, l, c, h;
  float dropout = 0;
  const char *prefix = NULL;
  int checkpoint = 0;
  if (g->gpt) {
    PyErr_SetString(rgpy_Error, "the model is already made");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OLLLLL|fzp", names, &ctx, &v, &t, &l, &c, &h,
                                   &dropout, &prefix, &checkpoint))
    return -1;
  if (!PyObject_TypeCheck(ctx, rgpy_Context)) {
    PyErr_SetString(PyExc_TypeError, "ctx must be a resgrad.Context");
    return -1;
  }
  RgContext *co = (RgContext *)ctx;
  if (rgpy_usable(co) < 0) return -1;
  rg_gpt_config cfg = {.vocab = v, .block = t, .layers = l, .width = c, .heads = h,
                       .dropout = dropout, .checkpoint = checkpoint};
  rg_gpt *gpt = rg_gpt_new(co->ctx, &cfg, prefix);
  if (!gpt) return rgpy_raise(co), -1;
  Py_INCREF((PyObject *)co);
  Py_XDECREF((PyObject *)g->co);
  g->co = co;
  g->gpt = gpt;
  return 0;
}

static void gpt_dealloc(PyObject *self) {
  RgGPT *g = (RgGPT *)self;
  rg_gpt_free(g->gpt); /* the struct only: the parameters belong to the context */
  rgpy_free_object(self, g->co);
}

static RgGPT *usable(PyObject *self) {
  RgGPT *g = (RgGPT *)self;
  if (!g->gpt) {
    PyErr_SetString(rgpy_Error, "the model was not made (GPT.__init__ failed)");
    return NULL;
  }
  return rgpy_usable(g->co) < 0 ? NULL : g;
}

static PyObject *gpt_forward(PyObject *self, PyObject *idx) {
  RgGPT *g = usable(self);
  rg_tensor t;
  if (!g || rgpy_tensor_arg(g->co, idx, "idx", 0, &t) < 0) return NULL;
  return rgpy_result(g->co, rg_gpt_forward(g->gpt, t));
}

static PyObject *gpt_call(PyObject *self, PyObject *args, PyObject *kw) {
  PyObject *idx;
  static char *names[] = {"idx", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &idx)) return NULL;
  return gpt_forward(self, idx);
}

static PyObject *gpt_loss(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"idx", "targets", "ignore_index", NULL};
  PyObject *idx, *targets, *ignore = Py_None;
  RgGPT *g = usable(self);
  if (!g || !PyArg_ParseTupleAndKeywords(args, kw, "OO|O", names, &idx, &targets, &ignore))
    return NULL;
  rg_tensor i, t;
  if (rgpy_tensor_arg(g->co, idx, "idx", 0, &i) < 0 ||
      rgpy_tensor_arg(g->co, targets, "targets", 0, &t) < 0)
    return NULL;
  if (ignore == Py_None) return rgpy_result(g->co, rg_gpt_loss(g->gpt, i, t));
  long long ig;
  if (rgpy_int_arg(ignore, "ignore_index", 0, 0, &ig) < 0) return NULL;
  return rgpy_result(g->co, rg_gpt_loss_ignore(g->gpt, i, t, (int)ig));
}

static PyObject *get_config(PyObject *self, void *unused) {
  (void)unused;
  RgGPT *g = usable(self);
  if (!g) return NULL;
  const rg_gpt_config *c = rg_gpt_config_of(g->gpt);
  return Py_BuildValue("{sLsLsLsLsLsdsN}", "vocab", (long long)c->vocab, "block",
                       (long long)c->block, "layers", (long long)c->layers, "width",
                       (long long)c->width, "heads", (long long)c->heads, "dropout",
                       (double)c->dropout, "checkpoint", PyBool_FromLong(c->checkpoint));
}

static PyObject *get_count(PyObject *self, void *unused) {
  (void)unused;
  RgGPT *g = usable(self);
  return g ? PyLong_FromLongLong(rg_gpt_param_count(g->gpt)) : NULL;
}

static PyObject *get_ctx(PyObject *self, void *unused) {
  (void)unused;
  RgGPT *g = (RgGPT *)self;
  if (!g->co) Py_RETURN_NONE;
  Py_INCREF((PyObject *)g->co);
  return (PyObject *)g->co;
}

/* GPT.from_hf(ctx, path, heads=0, prefix=None): rg_gpt_load_hf into a new GPT of type. */
static PyObject *gpt_from_hf(PyObject *type, PyObject *args, PyObject *kw) {
  static char *names[] = {"ctx", "path", "heads", "prefix", NULL};
  PyObject *ctx, *path = NULL;
  long long heads = 0;
  const char *prefix = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|Lz", names, &ctx, PyUnicode_FSConverter,
                                   &path, &heads, &prefix))
    return NULL;
  RgContext *co = (RgContext *)ctx;
  PyObject *empty = NULL, *self = NULL;
  if (!PyObject_TypeCheck(ctx, rgpy_Context)) {
    PyErr_SetString(PyExc_TypeError, "ctx must be a resgrad.Context");
  } else if (rgpy_usable(co) == 0 && (empty = PyTuple_New(0)) &&
             (self = PyType_GenericNew((PyTypeObject *)type, empty, NULL))) {
    rg_gpt *gpt;
    const char *p = PyBytes_AsString(path);
    RGPY_WAIT(co, gpt = rg_gpt_load_hf(co->ctx, p, heads, prefix));
    if (gpt) {
      Py_INCREF(ctx);
      ((RgGPT *)self)->co = co;
      ((RgGPT *)self)->gpt = gpt;
    } else {
      Py_CLEAR(self);
      rgpy_raise(co);
    }
  }
  Py_XDECREF(empty);
  Py_DECREF(path);
  return self;
}

static PyObject *gpt_save_hf(PyObject *self, PyObject *arg) {
  RgGPT *g = usable(self);
  PyObject *path = NULL;
  if (!g || !PyUnicode_FSConverter(arg, &path)) return NULL;
  rg_status st;
  const char *p = PyBytes_AsString(path);
  RGPY_WAIT(g->co, st = rg_gpt_save_hf(g->gpt, p));
  Py_DECREF(path);
  if (st != RG_OK) return rgpy_raise(g->co);
  Py_RETURN_NONE;
}

/* GPT.generate(prompts, lens, batch, prompt_len, max_new, temperature, top_k, top_p, seed,
   stop): prompts a C-contiguous int32 buffer [batch, prompt_len], lens an int64 buffer
   [batch] (or None) -> bytes of the int32 [batch, max_new] rg_gpt_generate writes.
   resgrad.nn.GPT.generate makes the buffers and reads the result. */
static PyObject *gpt_generate(PyObject *self, PyObject *args) {
  RgGPT *g = usable(self);
  PyObject *prompts, *lens;
  long long B, P, n, top_k, stop;
  unsigned long long seed;
  float temperature, top_p;
  if (!g || !PyArg_ParseTuple(args, "OOLLLfLfKL", &prompts, &lens, &B, &P, &n, &temperature,
                              &top_k, &top_p, &seed, &stop))
    return NULL;
  if (B < 1 || P < 1 || n < 1 || B > (1LL << 40) / P || B > (1LL << 40) / n) {
    PyErr_SetString(PyExc_ValueError, "batch, prompt length and max_new must be >= 1");
    return NULL;
  }
  Py_buffer pv, lv = {0};
  if (PyObject_GetBuffer(prompts, &pv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
  int have_lens = lens != Py_None;
  if (have_lens && PyObject_GetBuffer(lens, &lv, PyBUF_C_CONTIGUOUS) < 0) {
    PyBuffer_Release(&pv);
    return NULL;
  }
  PyObject *out = NULL;
  if (pv.len != (Py_ssize_t)(B * P * 4) || (have_lens && lv.len != (Py_ssize_t)(B * 8))) {
    PyErr_SetString(PyExc_ValueError, "prompts must be int32 [batch, prompt_len] and lens "
                                      "int64 [batch]");
  } else if ((out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(B * n * 4)))) {
    rg_sample_config sc = {temperature, top_k, top_p, seed, (int32_t)stop};
    int32_t *dst = (int32_t *)PyBytes_AsString(out);
    rg_status st;
    RGPY_WAIT(g->co, st = rg_gpt_generate(g->gpt, pv.buf, have_lens ? lv.buf : NULL, B, P, n,
                                          &sc, dst));
    if (st != RG_OK) {
      Py_CLEAR(out);
      rgpy_raise(g->co);
    }
  }
  PyBuffer_Release(&pv);
  if (have_lens) PyBuffer_Release(&lv);
  return out;
}

static PyMethodDef methods[] = {
  {"from_hf", (PyCFunction)(void (*)(void))gpt_from_hf,
   METH_CLASS | METH_VARARGS | METH_KEYWORDS,
   "from_hf(ctx, path, heads=0, prefix=None)\n--\n\nA GPT made from a Hugging Face GPT-2 "
   "model.safetensors; heads 0 reads n_head from config.json beside it (rg_gpt_load_hf)."},
  {"save_hf", gpt_save_hf, METH_O,
   "save_hf(path)\n--\n\nWrites the model as a Hugging Face GPT-2 model.safetensors and the "
   "config.json beside it (rg_gpt_save_hf)."},
  {"generate", gpt_generate, METH_VARARGS,
   "generate(prompts, lens, batch, prompt_len, max_new, temperature, top_k, top_p, seed, "
   "stop)\n--\n\nrg_gpt_generate on int32 and int64 buffers -> bytes of int32 [batch, "
   "max_new]; resgrad.nn.GPT.generate is the interface."},
  {"forward", gpt_forward, METH_O,
   "forward(idx)\n--\n\nidx int32 [B, T] -> logits float32 [B, T, vocab] (rg_gpt_forward)."},
  {"loss", (PyCFunction)(void (*)(void))gpt_loss, METH_VARARGS | METH_KEYWORDS,
   "loss(idx, targets, ignore_index=None)\n--\n\nMean cross-entropy of forward(idx) against "
   "targets int32 [B, T] (rg_gpt_loss)."},
  {NULL, NULL, 0, NULL}};

static PyGetSetDef getset[] = {
  {"config", get_config, NULL, "The model's configuration, a dict.", NULL},
  {"param_count", get_count, NULL, "Parameter elements (the tied head counted once).", NULL},
  {"ctx", get_ctx, NULL, "The Context the parameters live in.", NULL},
  {NULL, NULL, NULL, NULL, NULL}};

int rgpy_init_gpt(PyObject *m) {
  PyType_Slot slots[] = {
    {Py_tp_init, gpt_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, gpt_dealloc},
    {Py_tp_methods, methods},
    {Py_tp_getset, getset},
    {Py_tp_call, gpt_call},
    {Py_tp_doc, "GPT(ctx, vocab, block, layers, width, heads, dropout=0.0, prefix=None)\n--\n\n"
                "GPT-2's architecture with a tied head (rg_gpt_new); parameters named as "
                "GPT-2's state dict, after prefix."},
    {0, NULL}};
  PyType_Spec spec = {"resgrad._resgrad.GPT", sizeof(RgGPT), 0,
                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
  rgpy_GPT = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!rgpy_GPT) return -1;
  return PyModule_AddObjectRef(m, "GPT", (PyObject *)rgpy_GPT);
}
