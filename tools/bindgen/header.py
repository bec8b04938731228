"""header.py - reads the op declarations of include/resgrad.h and the op table of
src/core/ops.h for the binding generators (python/gen_bindings.py, r/gen_bindings.py).

Every `RG_API rg_tensor rg_NAME(rg_ctx *ctx, ...)` declared in the header's "---- ops"
section is an op, with the comment above its declaration as its documentation. Each
argument gets a kind from its C type alone (nothing here names an op), which a generator
turns into its language's form:
    tensor      rg_tensor x
    float       float x
    int         int x, int64_t x (ctype says which)
    enum        rg_dtype x, rg_act x (any typedef enum of the header; ctype names it)
    dims        int ndim, const int64_t *x: one sequence of ints
    perm        const int *x: one int per axis of the first tensor
set_defaults gives every language the same defaults: a trailing (int axis, int keepdim)
pair defaults to every axis (RG_ALL_AXES) and keepdim 0; causal to 0; eps to 1e-5f; a
tensor the comment says may be RG_NONE to RG_NONE -- each only when every argument after
it has a default too.
"""
import re


def strip_comment(text):
    lines = []
    for line in text.strip().splitlines():
        line = line.strip()
        line = re.sub(r"^/\*+ ?", "", line)
        line = re.sub(r" ?\*+/$", "", line)
        line = re.sub(r"^\* ?", "", line)
        lines.append(line)
    return "\n".join(lines).strip()


def parse_enums(header):
    """{type name: [(python name, C constant), ...]} of the header's typedef enums."""
    enums = {}
    for m in re.finditer(r"typedef enum (\w+)\s*\{(.*?)\}\s*\w+;", header, re.S):
        body = re.sub(r"/\*.*?\*/", "", m.group(2), flags=re.S)
        names = [c.split("=")[0].strip() for c in body.split(",") if c.strip()]
        common = re.match(r"^([A-Z0-9]+_)", names[0]).group(1) if names else ""
        if m.group(1) != "rg_status":  # RG_F32 ...: the prefix shared by all
            pre = names[0]
            for n in names[1:]:
                while not n.startswith(pre):
                    pre = pre[:-1]
            common = pre[: pre.rfind("_") + 1] if "_" in pre else common
        enums[m.group(1)] = [(n[len(common):].lower(), n) for n in names]
    return enums


def parse_ops_section(header):
    start = header.index("/* ---- ops ")
    end = header.index("/* ---- autograd ")
    sec = header[start:end]
    ops, doc = [], ""
    pos = 0
    tok = re.compile(r"/\*.*?\*/|RG_API\s+rg_tensor\s+(rg_\w+)\s*\((.*?)\);|typedef[^;]*;",
                     re.S)
    first = True
    for m in tok.finditer(sec, pos):
        if m.group(0).startswith("/*"):
            if first:  # the section's introduction, not any op's
                first = False
                continue
            doc = strip_comment(m.group(0))
            continue
        if not m.group(1):
            continue
        params = [p.strip() for p in " ".join(m.group(2).split()).split(",")]
        ops.append((m.group(1), params, doc))
    return ops


def parse_table(ops_h):
    rows = []
    for m in re.finditer(r'X\((\w+), (\w+), "([^"]*)", (\d+), (\d+),\s*([^)]*)\)', ops_h):
        flags = [f.strip()[len("RG_F_"):] for f in m.group(6).split("|") if f.strip() != "0"]
        rows.append((m.group(2), m.group(3), int(m.group(4)), int(m.group(5)), flags))
    return rows


class Arg:
    def __init__(self, kind, name, ctype=None):
        self.kind, self.name, self.ctype = kind, name, ctype
        self.default = None  # C expression of the default, or None: required


def classify(params, enums):
    assert params[0] == "rg_ctx *ctx", params
    args, i = [], 1
    while i < len(params):
        p = params[i]
        m = re.match(r"(const )?([\w ]+?)\s*(\*?)\s*(\w+)$", p)
        const, ctype, star, name = m.groups()
        ctype = ctype.strip()
        if ctype == "int" and name == "ndim" and i + 1 < len(params) and \
                params[i + 1].startswith("const int64_t *"):
            args.append(Arg("dims", params[i + 1].split("*")[1].strip()))
            i += 2
            continue
        if star and ctype == "int":
            args.append(Arg("perm", name))
        elif ctype == "rg_tensor":
            args.append(Arg("tensor", name))
        elif ctype == "float":
            args.append(Arg("float", name))
        elif ctype in ("int", "int64_t"):
            args.append(Arg("int", name, ctype))
        elif ctype in enums:
            args.append(Arg("enum", name, ctype))
        else:
            raise SystemExit(f"bindgen: no binding form for the C argument '{p}'")
        i += 1
    return args


def set_defaults(args, doc):
    for k, a in enumerate(args):
        if a.name == "keepdim":
            a.default = "0"
        elif a.name == "axis" and k + 1 < len(args) and args[k + 1].name == "keepdim":
            a.default = "RG_ALL_AXES"
        elif a.name == "causal":
            a.default = "0"
        elif a.name == "eps":
            a.default = "1e-5f"
        elif a.kind == "tensor" and re.search(rf"\b{a.name}\b[^.;]*\bRG_NONE\b", doc):
            a.default = "RG_NONE"
    seen_required = False
    for a in reversed(args):
        if a.default is None:
            seen_required = True
        elif seen_required:
            a.default = None


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load(resgrad_h, ops_h):
    """(enums, ops, table): ops as [(C name, [Arg], doc)] with kinds and defaults set."""
    header = read(resgrad_h)
    enums = parse_enums(header)
    ops = []
    for cname, params, doc in parse_ops_section(header):
        args = classify(params, enums)
        set_defaults(args, doc)
        ops.append((cname, args, doc))
    return enums, ops, parse_table(read(ops_h))
