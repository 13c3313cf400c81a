"""The catalogue of slips: `KINDS`, a table of each kind's name, description and sites.

A kind's `sites(node, src, ctx)` takes an ast node of a page, its `Source` and a context
(`modules`: the names bound to modules; `src`; `defined_before`: for each assignment, the names
assigned earlier in the file) and gives the sites it mutates there: `(start, end, replacement)`
spans of the page's text (an empty list or None: none). A `statement` kind is given the
statements themselves, the others every expression node of a statement. The table's order is
the report's, and where two kinds make the same text the first one keeps it.

Most kinds are a generic function driven by data: `renamed` swaps names both ways (mean and
sum, max and min, ...), `flipped` swaps a binary operator, `compared` a comparison operator,
`unwrapped` drops a call (sqrt, abs).
"""

import ast
from dataclasses import dataclass
from typing import Callable

from .source import call_name, int_value, is_module_chain, operator_between, wrapped

SEED_CALLS = {"manual_seed", "seed", "manual_seed_all"}
NEVER_DROP_KWARGS = {"device", "generator", "keepdim"}  # keepdim has its own kind
# Calls whose two arguments commute (transpose(1, 2) is transpose(2, 1)).
COMMUTATIVE = {"maximum", "minimum", "max", "min", "add", "mul", "allclose", "equal", "isclose",
               "dist", "hypot", "transpose", "swapaxes", "swapdims"}
DIM_KEYWORDS = {"dim", "dims", "axis", "dim0", "dim1", "start_dim", "end_dim"}
# Methods (or torch./F. functions, one position later) whose positional int arguments are dims.
DIM_METHODS = {"sum", "mean", "var", "std", "softmax", "log_softmax", "cumsum", "cumprod",
               "unsqueeze", "squeeze", "flatten", "transpose", "amax", "amin", "argmax",
               "argmin", "logsumexp", "size", "movedim", "swapaxes", "max", "min", "unbind",
               "diff", "flip"}
RESHAPES = {"reshape", "view", "expand", "permute", "repeat"}
# Keyword arguments whose value here is the callee's default: dropping them changes nothing.
DEFAULTS = {"unbiased": True, "keepdim": False, "affine": True, "elementwise_affine": True,
            "track_running_stats": True, "bias": True, "batch_first": False, "inplace": False,
            "indexing": "ij", "is_causal": False, "training": False}


@dataclass(frozen=True)
class Kind:
    description: str
    sites: Callable  # (node, src, ctx) -> [(start, end, replacement)] or None
    statement: bool = False  # given whole statements rather than expression nodes


# --------------------------------------------------------------------------------------------
# Generic site functions, driven by data
# --------------------------------------------------------------------------------------------
def renamed(*pairs):
    """Sites that swap each pair of names both ways, as a name or an attribute."""
    table = {}
    for a, b in pairs:
        table[a], table[b] = b, a

    def sites(node, src, ctx):
        if isinstance(node, ast.Attribute) and node.attr in table:
            end = src.span(node)[1]
            return [(end - len(node.attr), end, table[node.attr])]
        if isinstance(node, ast.Name) and node.id in table and isinstance(node.ctx, ast.Load):
            return [(*src.span(node), table[node.id])]
    return sites


def flipped(ops):
    """Sites that change a binary operator: {ast op: (new text, regex of the old token)}."""
    def sites(node, src, ctx):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ops:
            new, pattern = ops[type(node.op)]
            left = node.left if isinstance(node, ast.BinOp) else node.target
            right = node.right if isinstance(node, ast.BinOp) else node.value
            sp = operator_between(src, left, right, pattern)
            if sp:
                return [(*sp, new)]  # the span is the operator token itself
    return sites


def unwrapped(names):
    """Sites that drop a call named in `names`: keep its receiver, or its first argument."""
    def sites(node, src, ctx):
        if not isinstance(node, ast.Call) or call_name(node) not in names:
            return None
        f = node.func
        if isinstance(f, ast.Attribute) and not is_module_chain(f.value, ctx["modules"]):
            return [(*src.span(node), wrapped(src, f.value))]
        if node.args and not isinstance(node.args[0], ast.Starred):
            return [(*src.span(node), wrapped(src, node.args[0]))]
    return sites


def compared(ops):
    """Sites that change a comparison operator: {ast op: (regex of its token, new text)}."""
    def sites(node, src, ctx):
        out = []
        if isinstance(node, ast.Compare):
            lefts = [node.left] + node.comparators[:-1]
            for op, left, right in zip(node.ops, lefts, node.comparators):
                if type(op) in ops:
                    pattern, new = ops[type(op)]
                    sp = operator_between(src, left, right, pattern)
                    if sp:
                        out.append((*sp, new))
        return out
    return sites


def drop_keyword(call, kw, src):
    """The site that removes one keyword argument of a call, with its comma."""
    items = sorted([a for a in call.args] + [k for k in call.keywords],
                   key=lambda n: (n.lineno, n.col_offset))
    i = items.index(kw)
    a, b = src.span(kw)
    if i > 0:
        return (src.span(items[i - 1])[1], b, "")
    if i + 1 < len(items):
        return (a, src.span(items[i + 1])[0], "")
    return (a, b, "")


def swapped(src, a0, a1):
    """The site that swaps two argument nodes in the text (none if they read the same)."""
    if src.seg(a0) != src.seg(a1):
        s0, e0 = src.span(a0)
        s1, e1 = src.span(a1)
        return [(s0, e1, src.seg(a1) + src.text[e0:s1] + src.seg(a0))]
    return None


# --------------------------------------------------------------------------------------------
# Kinds of their own
# --------------------------------------------------------------------------------------------
def fmt_float(v):
    return repr(float(f"{v:.12g}"))


def int_plus(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [(*src.span(node), str(node.value + 1))]


def int_minus(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [(*src.span(node), str(node.value - 1))]


def float_up(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is float and node.value != 0:
        return [(*src.span(node), fmt_float(node.value * 10))]


def float_down(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is float and node.value != 0:
        return [(*src.span(node), fmt_float(node.value / 10))]


def dim_sites(node, ctx):
    """(value node) of every dim argument of a call: keyword or known positional."""
    if not isinstance(node, ast.Call):
        return []
    out = [kw.value for kw in node.keywords if kw.arg in DIM_KEYWORDS]
    name = call_name(node)
    if name in DIM_METHODS or name in {"cat", "stack", "concat"}:
        f = node.func
        module = isinstance(f, ast.Attribute) and is_module_chain(f.value, ctx["modules"])
        skip = 1 if (module or name in {"cat", "stack", "concat"}) else 0
        out += [a for a in node.args[skip:] if not isinstance(a, ast.Starred)]
    return out


def dim01(node, src, ctx):
    return [(*src.span(v), str(1 - int_value(v))) for v in dim_sites(node, ctx)
            if int_value(v) in (0, 1)]


def dim_neg(node, src, ctx):
    return [(*src.span(v), "-2" if int_value(v) == -1 else "-1") for v in dim_sites(node, ctx)
            if int_value(v) in (-1, -2)]


def drop_neg(node, src, ctx):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [(*src.span(node), wrapped(src, node.operand))]


def pow_sign(node, src, ctx):
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        r = node.right
        if isinstance(r, ast.UnaryOp) and isinstance(r.op, ast.USub):
            return [(*src.span(r), wrapped(src, r.operand))]
        return [(*src.span(r), f"-{wrapped(src, r)}")]


def unbiased(node, src, ctx):
    out = []
    for kw in node.keywords if isinstance(node, ast.Call) else []:
        v = kw.value
        if kw.arg == "unbiased" and isinstance(v, ast.Constant) and type(v.value) is bool:
            out.append((*src.span(v), str(not v.value)))
        if kw.arg == "correction" and int_value(v) in (0, 1):
            out.append((*src.span(v), str(1 - int_value(v))))
    return out


def bool_kwarg(node, src, ctx):
    if isinstance(node, ast.Call):
        return [(*src.span(kw.value), str(not kw.value.value)) for kw in node.keywords
                if kw.arg not in {"unbiased", "keepdim"} and isinstance(kw.value, ast.Constant)
                and type(kw.value.value) is bool]


def mentions_eps(node):
    if isinstance(node, ast.Name):
        return "eps" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "eps" in node.attr.lower()
    return isinstance(node, ast.Constant) and type(node.value) is float and 0 < node.value <= 1e-3


def drop_eps(node, src, ctx):
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if mentions_eps(node.right):
            return [(*src.span(node), wrapped(src, node.left))]
        if mentions_eps(node.left) and isinstance(node.op, ast.Add):
            return [(*src.span(node), wrapped(src, node.right))]


def eps_zero(node, src, ctx):
    out = []
    if isinstance(node, ast.Call):
        out += [(*src.span(kw.value), "0.0") for kw in node.keywords
                if kw.arg and "eps" in kw.arg.lower() and src.seg(kw.value) != "0.0"]
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        args = node.args.posonlyargs + node.args.args
        for arg, default in zip(args[len(args) - len(node.args.defaults):], node.args.defaults):
            if "eps" in arg.arg.lower():
                out.append((*src.span(default), "0.0"))
        for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
            if default is not None and "eps" in arg.arg.lower():
                out.append((*src.span(default), "0.0"))
    return out


_unwrap_transpose = unwrapped({"transpose", "t", "permute", "swapaxes"})


def drop_transpose(node, src, ctx):
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT", "mH"}:
        return [(*src.span(node), wrapped(src, node.value))]
    return _unwrap_transpose(node, src, ctx)


def infinite_mask(node, src, ctx):
    def is_inf(n):
        if isinstance(n, ast.Attribute) and n.attr == "inf":
            return "+"
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float"
                and len(n.args) == 1 and isinstance(n.args[0], ast.Constant)
                and str(n.args[0].value).lower() in {"inf", "-inf", "+inf"}):
            return "-" if str(n.args[0].value).startswith("-") else "+"
        if isinstance(n, ast.Attribute) and n.attr == "min" and isinstance(n.value, ast.Call) \
                and call_name(n.value) == "finfo":
            return "-"
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and is_inf(node.operand):
        return [(*src.span(node), "100.0" if is_inf(node.operand) == "-" else "-100.0")]
    parent = ctx["src"].parent.get(node)
    if is_inf(node) and not (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub)):
        return [(*src.span(node), "-100.0" if is_inf(node) == "-" else "100.0")]


def drop_keepdim(node, src, ctx):
    if isinstance(node, ast.Call):
        return [drop_keyword(node, kw, src) for kw in node.keywords if kw.arg == "keepdim"]


def slice_upper(node, src, ctx):
    if isinstance(node, ast.Slice) and node.upper is not None:
        v = int_value(node.upper)
        text = str(v - 1) if v is not None else f"{wrapped(src, node.upper)} - 1"
        return [(*src.span(node.upper), text)]


def slice_lower(node, src, ctx):
    if isinstance(node, ast.Slice) and node.lower is not None and int_value(node.lower) != 0:
        return [(*src.span(node.lower), "")]


def swap_args(node, src, ctx):
    if (isinstance(node, ast.Call) and len(node.args) == 2 and call_name(node) not in COMMUTATIVE
            and not any(isinstance(a, ast.Starred) for a in node.args)):
        return swapped(src, *node.args)


def swap_shape(node, src, ctx):
    if isinstance(node, ast.Call) and call_name(node) in RESHAPES \
            and isinstance(node.func, ast.Attribute) and len(node.args) >= 2 \
            and not any(isinstance(a, ast.Starred) for a in node.args[-2:]):
        return swapped(src, *node.args[-2:])


def drop_one(node, src, ctx):
    def one(n):
        return isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value == 1
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if one(node.right):
            return [(*src.span(node), wrapped(src, node.left))]
        if one(node.left):
            return [(*src.span(node), wrapped(src, node.right))]


def invert(node, src, ctx):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return [(*src.span(node), wrapped(src, node.operand))]
    if isinstance(node, ast.Call) and call_name(node) in {"masked_fill", "masked_fill_", "where"}:
        f = node.func
        module = isinstance(f, ast.Attribute) and is_module_chain(f.value, ctx["modules"])
        if call_name(node) == "where" and not module:
            return None
        if node.args and not (isinstance(node.args[0], ast.UnaryOp)
                              and isinstance(node.args[0].op, ast.Invert)):
            return [(*src.span(node.args[0]), f"~{wrapped(src, node.args[0])}")]


def and_or(node, src, ctx):
    if isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        sp = operator_between(src, node.values[0], node.values[1], rf"\b{word}\b")
        if sp:
            return [(*sp, "or" if word == "and" else "and")]


def drop_clone(node, src, ctx):
    if isinstance(node, ast.Call) and call_name(node) in {"clone", "detach"} \
            and isinstance(node.func, ast.Attribute) \
            and not is_module_chain(node.func.value, ctx["modules"]):
        return [(*src.span(node), wrapped(src, node.func.value))]


def drop_kwarg(node, src, ctx):
    if isinstance(node, ast.Call):
        return [drop_keyword(node, kw, src) for kw in node.keywords
                if kw.arg is not None and kw.arg not in NEVER_DROP_KWARGS
                and not (kw.arg in DEFAULTS and isinstance(kw.value, ast.Constant)
                         and kw.value.value == DEFAULTS[kw.arg])]


def drop_statement(node, src, ctx):
    droppable = (isinstance(node, ast.AugAssign)
                 or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                     and call_name(node.value) not in SEED_CALLS)
                 or (isinstance(node, ast.Assign) and all(
                     not isinstance(t, ast.Name) or t.id in ctx["defined_before"].get(node, ())
                     for t in node.targets)))
    if droppable:
        a, b = src.span(node)
        return [(a, b, "pass" + "\n" * src.text[a:b].count("\n"))]


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------
KINDS = {
    "int+1": Kind("an integer constant one too large", int_plus),
    "int-1": Kind("an integer constant one too small", int_minus),
    "float*10": Kind("a float constant ten times too large", float_up),
    "float/10": Kind("a float constant ten times too small", float_down),
    "dim 0<->1": Kind("a dim argument 0 and 1 swapped", dim01),
    "dim -1<->-2": Kind("a dim argument -1 and -2 swapped", dim_neg),
    "drop unary minus": Kind("a minus sign in front of an expression dropped", drop_neg),
    "+ <-> -": Kind("addition and subtraction swapped",
                    flipped({ast.Add: ("-", r"\+"), ast.Sub: ("+", r"-")})),
    "* <-> /": Kind("multiplication and division swapped",
                    flipped({ast.Mult: ("/", r"(?<!\*)\*(?!\*)"),
                             ast.Div: ("*", r"(?<!/)/(?!/)")})),
    "@ -> *": Kind("a matrix product written as an elementwise product",
                   flipped({ast.MatMult: ("*", r"@")})),
    "exponent sign": Kind("the exponent of ** negated", pow_sign),
    "unbiased": Kind("biased and unbiased variance swapped (unbiased=, correction=)", unbiased),
    "bool kwarg": Kind("a True/False keyword argument flipped", bool_kwarg),
    "drop + eps": Kind("the eps term of a sum dropped", drop_eps),
    "eps = 0": Kind("an eps argument or default set to zero", eps_zero),
    "drop sqrt": Kind("a square root (or reciprocal square root) dropped",
                      unwrapped({"sqrt", "rsqrt"})),
    "sqrt <-> rsqrt": Kind("sqrt and rsqrt swapped", renamed(("sqrt", "rsqrt"))),
    "drop transpose": Kind("a transpose or permute dropped (.T, .mT, .t(), .transpose, .permute)",
                           drop_transpose),
    "tril <-> triu": Kind("lower and upper triangle swapped",
                          renamed(("tril", "triu"), ("tril_", "triu_"))),
    "-inf -> -100": Kind("an infinite mask value replaced by a finite one", infinite_mask),
    "drop keepdim": Kind("keepdim=True dropped", drop_keepdim),
    "mean <-> sum": Kind("mean and sum swapped", renamed(("mean", "sum"))),
    "max <-> min": Kind("max and min swapped",
                        renamed(("max", "min"), ("amax", "amin"), ("argmax", "argmin"),
                                ("maximum", "minimum"))),
    "exp <-> log": Kind("exp and log swapped", renamed(("exp", "log"))),
    "cos <-> sin": Kind("cos and sin swapped", renamed(("cos", "sin"))),
    "zeros <-> ones": Kind("zeros and ones swapped",
                           renamed(("zeros", "ones"), ("zeros_like", "ones_like"),
                                   ("zeros_", "ones_"))),
    "< <-> <=": Kind("a strict and a non-strict comparison swapped (<, <=, >, >=)",
                     compared({ast.Lt: (r"<(?!=)", "<="), ast.LtE: (r"<=", "<"),
                               ast.Gt: (r">(?!=)", ">="), ast.GtE: (r">=", ">")})),
    "== <-> !=": Kind("an equality test negated",
                      compared({ast.Eq: (r"==|!=", "!="), ast.NotEq: (r"==|!=", "==")})),
    "slice end - 1": Kind("a slice's end one too small ([:n] -> [:n - 1])", slice_upper),
    "drop slice start": Kind("a slice's start dropped ([1:] -> [:])", slice_lower),
    "swap two args": Kind("the two positional arguments of a call swapped", swap_args),
    "swap reshape dims": Kind("the last two sizes of a reshape/view/expand/permute swapped",
                              swap_shape),
    "drop 1 +/- 1": Kind("a `1 +`, `+ 1` or `- 1` term dropped", drop_one),
    "mask inverted": Kind("a mask or condition inverted (~ / not dropped, or added to a where)",
                          invert),
    "and <-> or": Kind("and and or swapped", and_or),
    "drop clone": Kind("a .clone() or .detach() dropped (aliasing)", drop_clone),
    "drop abs": Kind("an absolute value dropped", unwrapped({"abs"})),
    "drop kwarg": Kind("a keyword argument dropped (its default used instead)", drop_kwarg),
    "drop statement": Kind("a statement left out (an update, an in-place call, a reassignment)",
                           drop_statement, statement=True),
}
