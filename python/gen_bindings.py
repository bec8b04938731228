#!/usr/bin/env python3
"""gen_bindings.py - writes the Python bindings of every op from the C sources.

    python3 gen_bindings.py RESGRAD_H OPS_H OUT_C OUT_PYI

RESGRAD_H is include/resgrad.h: every `RG_API rg_tensor rg_NAME(rg_ctx *ctx, ...)` declared
in its "---- ops" section becomes resgrad.NAME (and Tensor.NAME when its first argument is a
tensor), with the header's comment above the declaration as its docstring. OPS_H is
src/core/ops.h: its RG_OPS rows become resgrad._resgrad.OP_TABLE, which the tests read to
require a case for every op. OUT_C is included by python/src/ops.c; OUT_PYI is the stubs of
the generated functions, appended to the package's stub file.

Argument kinds (the C type decides; nothing here names an op):
    rg_tensor x                 a Tensor, a NumPy array or a Python number (None: RG_NONE)
    float / int / int64_t x     a Python number (keepdim, causal: also bool)
    rg_dtype / rg_act x         an enum: its value or its name ("bf16", "gelu")
    int ndim, const int64_t *x  one sequence of ints
    const int *x                a sequence of ints, one per axis of the first tensor
Defaults: a trailing (int axis, int keepdim) pair defaults to every axis, keepdim False;
causal to False; eps to 1e-5; a tensor the comment says may be RG_NONE to None -- each only
when every argument after it has a default too.
The parsing half (the header's ops and enums, the op table, argument kinds and defaults)
is tools/bindgen/header.py, shared with the R package's generator (r/gen_bindings.py).
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "bindgen"))
from header import classify, parse_enums, parse_ops_section, parse_table, read, set_defaults  # noqa: E402


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


PY_DEFAULT = {"0": "False", "RG_ALL_AXES": "None", "1e-5f": "1e-5", "RG_NONE": "None"}
PY_TYPE = {"tensor": "TensorLike", "float": "float", "int": "int", "dims": "Sequence[int]",
           "perm": "Sequence[int]"}


def signature(args):
    out = []
    for a in args:
        t = PY_TYPE.get(a.kind, "int | str")
        if a.name in ("keepdim", "causal"):
            t = "bool"
        if a.default == "RG_NONE":
            t = "TensorLike | None"
        if a.default == "RG_ALL_AXES":
            t = "int | None"
        out.append(f"{a.name}: {t}" + (f" = {PY_DEFAULT[a.default]}" if a.default else ""))
    return ", ".join(out)


def emit_op(cname, args, doc, enums):
    py = cname[3:]
    names = ", ".join(c_string(a.name) for a in args)
    nreq = sum(1 for a in args if a.default is None)
    n = len(args)
    body = [f"static const char *const kw_{py}[] = {{{names}, NULL}};",
            f"static PyObject *op_{py}(PyObject *self, PyObject *const *args, "
            f"Py_ssize_t nargs, PyObject *kwnames) {{",
            f"  PyObject *a[{n}];",
            "  (void)self;",
            f'  if (rgpy_parse("{py}", kw_{py}, {nreq}, {n}, args, nargs, kwnames, a) < 0) '
            "return NULL;"]
    tensors = [k for k, a in enumerate(args) if a.kind == "tensor"]
    body.append(f"  PyObject *const ts[] = {{{', '.join(f'a[{k}]' for k in tensors)}}};")
    body.append(f'  RgContext *co = rgpy_context_of("{py}", ts, {len(tensors)});')
    body.append("  if (!co) return NULL;")
    call = []
    first_tensor = None
    for k, a in enumerate(args):
        v = f"v{k}"
        if a.kind == "tensor":
            d = "1"  # None is RG_NONE: the library says whether the op takes it
            body.append(f"  rg_tensor {v};")
            body.append(f'  if (rgpy_tensor_arg(co, a[{k}], "{a.name}", {d}, &{v}) < 0) '
                        "return NULL;")
            first_tensor = first_tensor or v
            call.append(v)
        elif a.kind == "float":
            dv = a.default or "0"
            body.append(f"  double {v} = {dv};")
            body.append(f'  if (a[{k}] && rgpy_float_arg(a[{k}], "{a.name}", &{v}) < 0) '
                        "return NULL;")
            call.append(f"(float){v}")
        elif a.kind == "int":
            dv = a.default or "0"
            none_ok = "1" if a.default == "RG_ALL_AXES" else "0"
            body.append(f"  long long {v} = {dv};")
            body.append(f'  if (a[{k}] && rgpy_int_arg(a[{k}], "{a.name}", {none_ok}, '
                        f"{dv}, &{v}) < 0) return NULL;")
            call.append(f"({a.ctype}){v}")
        elif a.kind == "enum":
            body.append(f"  long long {v} = 0;")
            body.append(f'  if (rgpy_enum_arg(a[{k}], "{a.name}", enum_{a.ctype}, &{v}) < 0) '
                        "return NULL;")
            call.append(f"({a.ctype}){v}")
        elif a.kind == "dims":
            body.append(f"  int64_t {v}[RG_MAX_DIMS]; int {v}n = 0;")
            body.append(f'  if (rgpy_dims_arg(a[{k}], "{a.name}", {v}, &{v}n) < 0) '
                        "return NULL;")
            call += [f"{v}n", v]
        elif a.kind == "perm":
            body.append(f"  int {v}[RG_MAX_DIMS];")
            body.append(f'  if (rgpy_perm_arg(co, {first_tensor}, a[{k}], "{a.name}", {v}) '
                        "< 0) return NULL;")
            call.append(v)
    body.append(f"  return rgpy_result(co, {cname}(co->ctx{''.join(', ' + c for c in call)}));")
    body.append("}")
    body.append(f"static PyObject *meth_{py}(PyObject *self, PyObject *const *args, "
                "Py_ssize_t nargs, PyObject *kwnames) {")
    body.append(f"  return rgpy_as_method(op_{py}, self, args, nargs, kwnames);")
    body.append("}")
    sig = signature(args)
    return "\n".join(body), py, sig, bool(tensors and tensors[0] == 0)


def main():
    header, ops_h = read(sys.argv[1]), read(sys.argv[2])
    enums = parse_enums(header)
    ops = parse_ops_section(header)
    table = parse_table(ops_h)
    out = ["/* Generated by python/gen_bindings.py from include/resgrad.h and src/core/ops.h."
           " Do not edit. */", ""]
    used = sorted({a.ctype for _, p, _ in ops for a in classify(p, enums) if a.kind == "enum"})
    for e in used:
        items = ", ".join(f"{{{c_string(py)}, {c}}}" for py, c in enums[e])
        out.append(f"static const RgEnum enum_{e}[] = {{{items}, {{NULL, 0}}}};")
    funcs, meths, stubs, tstubs = [], [], [], []
    for cname, params, doc in ops:
        args = classify(params, enums)
        set_defaults(args, doc)
        code, py, sig, is_method = emit_op(cname, args, doc, enums)
        out.append(code)
        ds = c_string(f"{py}({sig})\n--\n\n{doc}")
        flags = "METH_FASTCALL | METH_KEYWORDS"
        funcs.append(f"  {{\"{py}\", (PyCFunction)(void (*)(void))op_{py}, {flags}, {ds}}},")
        if is_method:
            msig = sig.split(", ", 1)[1] if ", " in sig else ""
            mds = c_string(f"{py}($self{', ' + msig if msig else ''})\n--\n\n{doc}")
            meths.append(f"  {{\"{py}\", (PyCFunction)(void (*)(void))meth_{py}, {flags}, "
                         f"{mds}}},")
            tstubs.append(f"    def {py}(self{', ' + msig if msig else ''}) -> Tensor: ...")
        doc_py = doc.replace('"""', "'''").replace("\\", "\\\\")
        stubs.append(f"def {py}({sig}) -> Tensor:\n    \"\"\"{doc_py}\"\"\"")
    out.append("#define RGPY_OP_FUNCS \\\n" + " \\\n".join(f[:-1] + "," for f in funcs))
    out.append("#define RGPY_OP_METHODS \\\n" + " \\\n".join(m[:-1] + "," for m in meths))
    rows = ", ".join(
        f'{{{c_string(n)}, {c_string(p)}, {i}, {o}, {c_string(" ".join(fl))}}}'
        for n, p, i, o, fl in table)
    out.append(f"static const RgOpRow rgpy_op_table_rows[] = {{{rows}, {{NULL, NULL, 0, 0, NULL}}}};")
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        f.write("# The ops, generated from include/resgrad.h by python/gen_bindings.py.\n\n")
        f.write("\n\n".join(stubs) + "\n\n")
        f.write("class _TensorOps:\n" + "\n".join(tstubs) + "\n")


if __name__ == "__main__":
    main()
