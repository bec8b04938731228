#!/usr/bin/env python3
"""gen_bindings.py - writes the R bindings of every op from the C sources.

    python3 gen_bindings.py RESGRAD_H OPS_H PKG_DIR

RESGRAD_H is include/resgrad.h: every `RG_API rg_tensor rg_NAME(rg_ctx *ctx, ...)` declared
in its "---- ops" section becomes the R function ag_NAME, with the header's comment above
the declaration as its help page. OPS_H is src/core/ops.h: its RG_OPS rows become the
package's internal .rg_op_table, which the tests read to require a case for every op.
Written into the R source package PKG_DIR (r/resgrad), so that installing the package
needs no Python:
    R/ops.R          the ag_NAME functions and the op table
    src/ops.c        one .Call entry point per op and the registration rows
    man/ag_NAME.Rd   a help page per op

The header is parsed by tools/bindgen/header.py, shared with the Python generator. The R
forms of the argument kinds (the C type and the argument's name decide; nothing here
names an op):
    tensor                 an ag_tensor, or an R vector/matrix/array (uploaded as an input);
                           a default of RG_NONE is NULL
    float                  a number
    int named axis*        an axis counted from 1 as R counts dimensions (-1: the last);
                           RG_ALL_AXES is NULL
    int named start        a position counted from 1, as R indexes
    int (other)            a number (keepdim, causal: also TRUE/FALSE)
    enum                   its name ("bf16", "gelu") or its value
    dims                   an integer vector (one entry may be -1)
    perm                   a permutation of 1..ndim, as aperm's
A trailing (axis0, axis1) pair defaults to the last two axes (-2, -1).
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "bindgen"))
from header import load  # noqa: E402

R_DEFAULT = {"0": "FALSE", "RG_ALL_AXES": "NULL", "1e-5f": "1e-5", "RG_NONE": "NULL"}


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def r_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rd_escape(s):
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("{", "\\{").replace("}", "\\}")


def r_defaults(args):
    """{name: R default} from the shared defaults, plus the R-only axis pair."""
    out = {a.name: R_DEFAULT[a.default] for a in args if a.default}
    names = [a.name for a in args]
    if names[-2:] == ["axis0", "axis1"]:
        out["axis0"], out["axis1"] = "-2L", "-1L"
    return out


def c_arg(k, a, c, first_tensor):
    """C statements converting argument k into the library's value v<k>."""
    v, s, nm = f"v{k}", f"s{k}", c_string(a.name)
    if a.kind == "tensor":
        return [f"  rg_tensor {v} = rgr_tensor_arg(cx, {s}, {nm});"], v
    if a.kind == "float":
        return [f"  float {v} = (float)rgr_float_arg({s}, {nm});"], v
    if a.kind == "int":
        if a.name.startswith("axis"):
            conv = f"rgr_axis_arg({s}, {nm})"
        elif a.name == "start":
            conv = f"rgr_int_arg({s}, {nm}) - 1"
        else:
            conv = f"rgr_int_arg({s}, {nm})"
        return [f"  {a.ctype} {v} = ({a.ctype})({conv});"], v
    if a.kind == "enum":
        return [f"  {a.ctype} {v} = ({a.ctype})rgr_enum_arg({s}, {nm}, rgr_enum_{a.ctype});"], v
    if a.kind == "dims":
        return [f"  int64_t {v}[RG_MAX_DIMS];",
                f"  int {v}n = rgr_dims_arg({s}, {nm}, {v});"], f"{v}n, {v}"
    if a.kind == "perm":
        return [f"  int {v}[RG_MAX_DIMS];",
                f"  rgr_perm_arg(cx, {first_tensor}, {s}, {nm}, {v});"], v
    raise SystemExit(f"r/gen_bindings.py: no R form for argument kind {a.kind}")


def emit_c(cname, args):
    name = cname[3:]
    params = ", ".join(f"SEXP s{k}" for k in range(len(args))) or "void"
    tensors = [f"s{k}" for k, a in enumerate(args) if a.kind == "tensor"]
    body = [f"SEXP rgr_op_{name}({params}) {{",
            f"  SEXP ts[] = {{{', '.join(tensors)}}};",
            f"  SEXP cx = rgr_ctx_of_args(ts, {len(tensors)});",
            "  rg_ctx *ctx = rgr_ctx_ptr(cx);"]
    call, first = [], None
    for k, a in enumerate(args):
        lines, v = c_arg(k, a, cname, first)
        if a.kind == "tensor" and first is None:
            first = v
        body += lines
        call.append(v)
    body.append(f"  return rgr_result(cx, {cname}(ctx{''.join(', ' + c for c in call)}));")
    body.append("}")
    return "\n".join(body)


def emit_r(cname, args):
    name = cname[3:]
    defs = r_defaults(args)
    formals = ", ".join(a.name + (f" = {defs[a.name]}" if a.name in defs else "")
                        for a in args)
    actuals = "".join(", " + a.name for a in args)
    return f"ag_{name} <- function({formals}) .Call(C_rgr_op_{name}{actuals})"


ARG_DOC = {
    "tensor": "an \\code{ag_tensor}, or an R vector, matrix or array (uploaded as an input)",
    "float": "a number",
    "int": "an integer",
    "enum": "one of {names}",
    "dims": "an integer vector of the new dimensions (one may be -1)",
    "perm": "a permutation of \\code{1:ndim}, as \\code{aperm}'s",
}


def emit_rd(cname, args, doc, enums):
    name = cname[3:]
    defs = r_defaults(args)
    first = doc.split("\n")[0].strip() if doc else name
    items = []
    for a in args:
        text = ARG_DOC[a.kind]
        if a.kind == "enum":
            text = text.format(names=", ".join(f'\\code{{"{n}"}}' for n, _ in enums[a.ctype]))
        if a.kind == "int" and a.name.startswith("axis"):
            text = "an axis, counted from 1 (-1: the last)"
            if defs.get(a.name) == "NULL":
                text += "; \\code{NULL}: every axis"
        elif a.kind == "int" and a.name == "start":
            text = "the first position, counted from 1"
        elif a.name in ("keepdim", "causal"):
            text = "\\code{TRUE} or \\code{FALSE}"
        if a.kind == "tensor" and defs.get(a.name) == "NULL":
            text += "; \\code{NULL} for none"
        items.append(f"\\item{{{a.name}}}{{{text}.}}")
    formals = ", ".join(a.name + (f" = {defs[a.name]}" if a.name in defs else "")
                        for a in args)
    return "\n".join([
        "% Generated by r/gen_bindings.py from include/resgrad.h. Do not edit.",
        f"\\name{{ag_{name}}}",
        f"\\alias{{ag_{name}}}",
        f"\\title{{The op {rd_escape(cname)}: {rd_escape(first)}}}",
        f"\\usage{{ag_{name}({formals})}}",
        "\\arguments{", *items, "}",
        "\\value{A new pending \\code{ag_tensor} in the pass pool: the op is recorded, and "
        "runs at the next barrier (a read such as \\code{as.array}).}",
        "\\description{",
        f"Records \\code{{{rd_escape(cname)}}} of the resgrad library. From the library's "
        "header:",
        "\\preformatted{",
        rd_escape(doc),
        "}",
        "Axes and positions are counted from 1; indices held in tensors (targets, "
        "embedding rows, \\code{ag_argmax}'s result) are counted from 0, as the library "
        "counts them. See \\code{vignette(\"resgrad\")} for the layout of R arrays.",
        "}",
        "\\seealso{\\code{\\link{ag_tensor}}, \\code{\\link{backward}}}",
        "\\keyword{math}",
        ""])


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: gen_bindings.py RESGRAD_H OPS_H PKG_DIR")
    enums, ops, table = load(sys.argv[1], sys.argv[2])
    pkg = sys.argv[3]
    c = ["/* Generated by r/gen_bindings.py from include/resgrad.h. Do not edit. */",
         '#include "rgr.h"', ""]
    used = sorted({a.ctype for _, args, _ in ops for a in args if a.kind == "enum"})
    for e in used:
        items = ", ".join(f"{{{c_string(n)}, {cn}}}" for n, cn in enums[e])
        c.append(f"static const rgr_enum rgr_enum_{e}[] = {{{items}, {{NULL, 0}}}};")
    regs = []
    for cname, args, _ in ops:
        c.append(emit_c(cname, args))
        regs.append(f"  {{\"rgr_op_{cname[3:]}\", (DL_FUNC)&rgr_op_{cname[3:]}, {len(args)}}},")
    c.append("const R_CallMethodDef rgr_op_methods[] = {\n" + "\n".join(regs) +
             "\n  {NULL, NULL, 0}\n};")
    r = ["# Generated by r/gen_bindings.py from include/resgrad.h and src/core/ops.h.",
         "# Do not edit: an op added to the library's header appears here when the package",
         "# is bundled again (r/bundle.sh).", ""]
    for cname, args, _ in ops:
        r.append(emit_r(cname, args))
    r.append("")
    r.append("# The op table (src/core/ops.h): kernel name, the call that records it, inputs,")
    r.append("# outputs and flags, one row per op.")
    cols = list(zip(*[(k, cl, ni, no, " ".join(fl)) for k, cl, ni, no, fl in table]))
    r.append(".rg_op_table <- data.frame(")
    r.append("  kernel = c(" + ", ".join(r_string(x) for x in cols[0]) + "),")
    r.append("  call = c(" + ", ".join(r_string(x) for x in cols[1]) + "),")
    r.append("  nin = c(" + ", ".join(f"{x}L" for x in cols[2]) + "),")
    r.append("  nout = c(" + ", ".join(f"{x}L" for x in cols[3]) + "),")
    r.append("  flags = c(" + ", ".join(r_string(x) for x in cols[4]) + "),")
    r.append("  stringsAsFactors = FALSE)")
    r.append("")
    r.append("# The names of the generated op functions, without their ag_ prefix.")
    r.append(".rg_ops <- c(" + ", ".join(r_string(c[3:]) for c, _, _ in ops) + ")")
    os.makedirs(os.path.join(pkg, "R"), exist_ok=True)
    os.makedirs(os.path.join(pkg, "src"), exist_ok=True)
    os.makedirs(os.path.join(pkg, "man"), exist_ok=True)
    with open(os.path.join(pkg, "src", "ops.c"), "w", encoding="utf-8") as f:
        f.write("\n".join(c) + "\n")
    with open(os.path.join(pkg, "R", "ops.R"), "w", encoding="utf-8") as f:
        f.write("\n".join(r) + "\n")
    for old in os.listdir(os.path.join(pkg, "man")):
        path = os.path.join(pkg, "man", old)
        with open(path, encoding="utf-8") as f:
            if f.readline().startswith("% Generated by r/gen_bindings.py"):
                os.remove(path)
    for cname, args, doc in ops:
        with open(os.path.join(pkg, "man", f"ag_{cname[3:]}.Rd"), "w", encoding="utf-8") as f:
            f.write(emit_rd(cname, args, doc, enums))


if __name__ == "__main__":
    main()
