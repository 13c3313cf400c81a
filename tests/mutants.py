"""The book's mutation sweep: plausible one-token slips in the gallery's code must fail their page.

Run by hand (the book's venv):

    .venv/bin/python tests/mutants.py                  # the whole sweep; prints the survivors
    .venv/bin/python tests/mutants.py --page rope      # pages whose path matches a regex
    .venv/bin/python tests/mutants.py --list           # the selected mutants, without running
    .venv/bin/python tests/mutants.py --list --all     # every candidate mutant
    .venv/bin/python tests/mutants.py --per-kind 3     # more sites per (page, kind)

`tests/test_mutation_sweep.py` runs it under `make test`; its docstring says what was decided
(catalogue, which code is mutated, the subset, the verdicts, equivalents, the fork server).
"""

import argparse
import ast
import gc
import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import sys
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import claims  # noqa: E402  (what a claim is: the one definition the recorder uses too)

PAGES = sorted(ROOT.glob("gallery/*/plot_*.py"))
EQUIVALENTS = ROOT / "tests" / "mutation_equivalents.txt"
REPORT = ROOT / "tests" / "artifacts" / "mutation_sweep.txt"
PER_KIND = 2
TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_FACTOR = 10.0, 30.0, 4.0

PLOT_NAMES = {"plt", "matplotlib", "mpl", "fig", "ax", "axs", "axes"}
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
# The experiment's inputs: random draws and sample grids (see measured_or_drawn).
INPUT_CALLS = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
               "randperm", "normal", "normal_", "uniform_", "bernoulli", "multinomial",
               "linspace", "logspace"}
MEASURES = {"abs", "norm"}  # (a - b).abs(): the discrepancy a check measures
# Keyword arguments whose value here is the callee's default: dropping them changes nothing.
DEFAULTS = {"unbiased": True, "keepdim": False, "affine": True, "elementwise_affine": True,
            "track_running_stats": True, "bias": True, "batch_first": False, "inplace": False,
            "indexing": "ij", "is_causal": False, "training": False}
MUTATING_METHODS = {"append", "extend", "insert", "pop", "update", "setdefault", "clear",
                    "remove", "train", "eval", "register_buffer", "register_parameter",
                    "zero_grad", "backward", "step", "load_state_dict", "apply"}
COLLECTION_METHODS = {"append", "extend", "insert", "update", "setdefault", "add"}
MUTATING_FUNCTIONS = {"batch_norm", "instance_norm", "backward"}  # update their arguments
STATEFUL_MODULES = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d",
                    "InstanceNorm2d", "InstanceNorm3d", "SyncBatchNorm", "Dropout"}


# --------------------------------------------------------------------------------------------
# Source positions: ast counts columns in UTF-8 bytes, the mutants are built on characters.
# --------------------------------------------------------------------------------------------
class Source:
    def __init__(self, path):
        self.path = Path(path)
        self.text = self.path.read_text()
        self.lines = self.text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.tree = ast.parse(self.text)
        self.comments = {}  # line number -> column (characters) where its comment starts
        for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
            if tok.type == tokenize.COMMENT:
                self.comments[tok.start[0]] = tok.start[1]
        self.parent = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def pos(self, lineno, col):
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node):
        return (self.pos(node.lineno, node.col_offset),
                self.pos(node.end_lineno, node.end_col_offset))

    def seg(self, node):
        a, b = self.span(node)
        return self.text[a:b]

    def line_of(self, index):
        """1-based line number of a character index."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi - 1:
            mid = (lo + hi) // 2
            if self.starts[mid] <= index:
                lo = mid
            else:
                hi = mid
        return lo + 1

    def describe(self, start, end, repl):
        """(original, mutated): the lines the site touches, comments dropped, blanks collapsed."""
        first, last = self.line_of(start), self.line_of(max(start, end - 1))
        a, b = self.starts[first - 1], self.starts[last]
        cut = self.comments.get(last)
        tail_end = b if cut is None else self.starts[last - 1] + cut
        tail_end = max(tail_end, end)

        def clean(text):
            out = []
            for n, line in enumerate(text.split("\n")):
                c = self.comments.get(first + n) if n < last - first else None
                out.append(line[:c] if c is not None and len(line) >= c else line)
            return " ".join(" ".join(out).split())

        before = clean(self.text[a:tail_end])
        after = clean(self.text[a:start] + repl + self.text[end:tail_end])
        return before, after


def atomic(node):
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant,
                             ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp))


def wrapped(src, node):
    text = src.seg(node)
    if isinstance(node, ast.Tuple) and not text.startswith("("):
        return f"({text})"
    return text if atomic(node) else f"({text})"


def base_name(expr):
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def is_module_chain(expr, modules):
    """`torch.nn.functional`-like: names and attributes only, rooted at an imported module."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in modules


def call_name(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def int_value(node):
    """The int a constant or a negated constant stands for, else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


def fmt_float(v):
    return repr(float(f"{v:.12g}"))


def operator_between(src, left, right, pattern):
    """Span of the operator token between two nodes (skipping parentheses and comments)."""
    a, b = src.span(left)[1], src.span(right)[0]
    between = src.text[a:b]
    masked = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), between)
    m = re.search(pattern, masked)
    return (a + m.start(), a + m.end()) if m else None


# --------------------------------------------------------------------------------------------
# The catalogue. Each kind: node, page context -> list of (start, end, replacement).
# --------------------------------------------------------------------------------------------
KINDS = {}


def kind(name, description):
    def register(fn):
        KINDS[name] = (description, fn)
        return fn
    return register


@kind("int+1", "an integer constant one too large")
def _int_plus(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [(*src.span(node), str(node.value + 1))]


@kind("int-1", "an integer constant one too small")
def _int_minus(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [(*src.span(node), str(node.value - 1))]


@kind("float*10", "a float constant ten times too large")
def _float_up(node, src, ctx):
    if isinstance(node, ast.Constant) and type(node.value) is float and node.value != 0:
        return [(*src.span(node), fmt_float(node.value * 10))]


@kind("float/10", "a float constant ten times too small")
def _float_down(node, src, ctx):
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


@kind("dim 0<->1", "a dim argument 0 and 1 swapped")
def _dim01(node, src, ctx):
    return [(*src.span(v), str(1 - int_value(v))) for v in dim_sites(node, ctx)
            if int_value(v) in (0, 1)]


@kind("dim -1<->-2", "a dim argument -1 and -2 swapped")
def _dim_neg(node, src, ctx):
    return [(*src.span(v), "-2" if int_value(v) == -1 else "-1") for v in dim_sites(node, ctx)
            if int_value(v) in (-1, -2)]


@kind("drop unary minus", "a minus sign in front of an expression dropped")
def _drop_neg(node, src, ctx):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [(*src.span(node), wrapped(src, node.operand))]


def flip_binop(node, src, ops):
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ops:
        new, pattern = ops[type(node.op)]
        left = node.left if isinstance(node, ast.BinOp) else node.target
        right = node.right if isinstance(node, ast.BinOp) else node.value
        sp = operator_between(src, left, right, pattern)
        if sp:
            return [(*sp, src.text[sp[0]:sp[1]].replace(pattern.replace("\\", "")[0], new, 1))]


@kind("+ <-> -", "addition and subtraction swapped")
def _add_sub(node, src, ctx):
    return flip_binop(node, src, {ast.Add: ("-", r"\+"), ast.Sub: ("+", r"-")})


@kind("* <-> /", "multiplication and division swapped")
def _mul_div(node, src, ctx):
    return flip_binop(node, src, {ast.Mult: ("/", r"(?<!\*)\*(?!\*)"),
                                  ast.Div: ("*", r"(?<!/)/(?!/)")})


@kind("@ -> *", "a matrix product written as an elementwise product")
def _matmul(node, src, ctx):
    return flip_binop(node, src, {ast.MatMult: ("*", r"@")})


@kind("exponent sign", "the exponent of ** negated")
def _pow_sign(node, src, ctx):
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        r = node.right
        if isinstance(r, ast.UnaryOp) and isinstance(r.op, ast.USub):
            return [(*src.span(r), wrapped(src, r.operand))]
        return [(*src.span(r), f"-{wrapped(src, r)}")]


@kind("unbiased", "biased and unbiased variance swapped (unbiased=, correction=)")
def _unbiased(node, src, ctx):
    out = []
    for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
        v = kw.value
        if kw.arg == "unbiased" and isinstance(v, ast.Constant) and type(v.value) is bool:
            out.append((*src.span(v), str(not v.value)))
        if kw.arg == "correction" and int_value(v) in (0, 1):
            out.append((*src.span(v), str(1 - int_value(v))))
    return out


@kind("bool kwarg", "a True/False keyword argument flipped")
def _bool_kwarg(node, src, ctx):
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


@kind("drop + eps", "the eps term of a sum dropped")
def _drop_eps(node, src, ctx):
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if mentions_eps(node.right):
            return [(*src.span(node), wrapped(src, node.left))]
        if mentions_eps(node.left) and isinstance(node.op, ast.Add):
            return [(*src.span(node), wrapped(src, node.right))]


@kind("eps = 0", "an eps argument or default set to zero")
def _eps_zero(node, src, ctx):
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


def receiver_or_arg(node, src, ctx, names):
    """For a call named in `names`: the text without the call (receiver, or the first arg)."""
    if not isinstance(node, ast.Call) or call_name(node) not in names:
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and not is_module_chain(f.value, ctx["modules"]):
        return [(*src.span(node), wrapped(src, f.value))]
    if node.args and not isinstance(node.args[0], ast.Starred):
        return [(*src.span(node), wrapped(src, node.args[0]))]


@kind("drop sqrt", "a square root (or reciprocal square root) dropped")
def _drop_sqrt(node, src, ctx):
    return receiver_or_arg(node, src, ctx, {"sqrt", "rsqrt"})


def rename(node, src, pairs):
    if isinstance(node, ast.Attribute) and node.attr in pairs:
        end = src.span(node)[1]
        return [(end - len(node.attr), end, pairs[node.attr])]
    if isinstance(node, ast.Name) and node.id in pairs and isinstance(node.ctx, ast.Load):
        return [(*src.span(node), pairs[node.id])]


def both_ways(*pairs):
    out = {}
    for a, b in pairs:
        out[a], out[b] = b, a
    return out


@kind("sqrt <-> rsqrt", "sqrt and rsqrt swapped")
def _rsqrt(node, src, ctx):
    return rename(node, src, both_ways(("sqrt", "rsqrt")))


@kind("drop transpose", "a transpose or permute dropped (.T, .mT, .t(), .transpose, .permute)")
def _drop_transpose(node, src, ctx):
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT", "mH"}:
        return [(*src.span(node), wrapped(src, node.value))]
    return receiver_or_arg(node, src, ctx, {"transpose", "t", "permute", "swapaxes"})


@kind("tril <-> triu", "lower and upper triangle swapped")
def _tril(node, src, ctx):
    return rename(node, src, both_ways(("tril", "triu"), ("tril_", "triu_")))


@kind("-inf -> -100", "an infinite mask value replaced by a finite one")
def _inf(node, src, ctx):
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


@kind("drop keepdim", "keepdim=True dropped")
def _keepdim(node, src, ctx):
    if isinstance(node, ast.Call):
        return [drop_keyword(node, kw, src) for kw in node.keywords if kw.arg == "keepdim"]


def drop_keyword(call, kw, src):
    items = sorted([a for a in call.args] + [k for k in call.keywords],
                   key=lambda n: (n.lineno, n.col_offset))
    i = items.index(kw)
    a, b = src.span(kw)
    if i > 0:
        return (src.span(items[i - 1])[1], b, "")
    if i + 1 < len(items):
        return (a, src.span(items[i + 1])[0], "")
    return (a, b, "")


@kind("mean <-> sum", "mean and sum swapped")
def _mean_sum(node, src, ctx):
    return rename(node, src, both_ways(("mean", "sum")))


@kind("max <-> min", "max and min swapped")
def _max_min(node, src, ctx):
    return rename(node, src, both_ways(("max", "min"), ("amax", "amin"), ("argmax", "argmin"),
                                       ("maximum", "minimum")))


@kind("exp <-> log", "exp and log swapped")
def _exp_log(node, src, ctx):
    return rename(node, src, both_ways(("exp", "log")))


@kind("cos <-> sin", "cos and sin swapped")
def _cos_sin(node, src, ctx):
    return rename(node, src, both_ways(("cos", "sin")))


@kind("zeros <-> ones", "zeros and ones swapped")
def _zeros_ones(node, src, ctx):
    return rename(node, src, both_ways(("zeros", "ones"), ("zeros_like", "ones_like"),
                                       ("zeros_", "ones_")))


@kind("< <-> <=", "a strict and a non-strict comparison swapped (<, <=, >, >=)")
def _strict(node, src, ctx):
    table = {ast.Lt: ("<", r"<(?!=)"), ast.LtE: ("<=", r"<="), ast.Gt: (">", r">(?!=)"),
             ast.GtE: (">=", r">=")}
    swap = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
    out = []
    if isinstance(node, ast.Compare):
        lefts = [node.left] + node.comparators[:-1]
        for op, left, right in zip(node.ops, lefts, node.comparators):
            if type(op) in table:
                sp = operator_between(src, left, right, table[type(op)][1])
                if sp:
                    out.append((*sp, swap[table[type(op)][0]]))
    return out


@kind("== <-> !=", "an equality test negated")
def _eq(node, src, ctx):
    out = []
    if isinstance(node, ast.Compare):
        lefts = [node.left] + node.comparators[:-1]
        for op, left, right in zip(node.ops, lefts, node.comparators):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                sp = operator_between(src, left, right, r"==|!=")
                if sp:
                    out.append((*sp, "!=" if isinstance(op, ast.Eq) else "=="))
    return out


@kind("slice end - 1", "a slice's end one too small ([:n] -> [:n - 1])")
def _slice_upper(node, src, ctx):
    if isinstance(node, ast.Slice) and node.upper is not None:
        v = int_value(node.upper)
        text = str(v - 1) if v is not None else f"{wrapped(src, node.upper)} - 1"
        return [(*src.span(node.upper), text)]


@kind("drop slice start", "a slice's start dropped ([1:] -> [:])")
def _slice_lower(node, src, ctx):
    if isinstance(node, ast.Slice) and node.lower is not None and int_value(node.lower) != 0:
        return [(*src.span(node.lower), "")]


def _swapped(src, a0, a1):
    """The mutant that swaps two argument nodes in the text (none if they read the same)."""
    if src.seg(a0) != src.seg(a1):
        s0, e0 = src.span(a0)
        s1, e1 = src.span(a1)
        return [(s0, e1, src.seg(a1) + src.text[e0:s1] + src.seg(a0))]
    return None


@kind("swap two args", "the two positional arguments of a call swapped")
def _swap_args(node, src, ctx):
    if (isinstance(node, ast.Call) and len(node.args) == 2 and call_name(node) not in COMMUTATIVE
            and not any(isinstance(a, ast.Starred) for a in node.args)):
        return _swapped(src, *node.args)


@kind("swap reshape dims", "the last two sizes of a reshape/view/expand/permute swapped")
def _swap_shape(node, src, ctx):
    if isinstance(node, ast.Call) and call_name(node) in RESHAPES \
            and isinstance(node.func, ast.Attribute) and len(node.args) >= 2 \
            and not any(isinstance(a, ast.Starred) for a in node.args[-2:]):
        return _swapped(src, *node.args[-2:])


@kind("drop 1 +/- 1", "a `1 +`, `+ 1` or `- 1` term dropped")
def _drop_one(node, src, ctx):
    def one(n):
        return isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value == 1
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if one(node.right):
            return [(*src.span(node), wrapped(src, node.left))]
        if one(node.left):
            return [(*src.span(node), wrapped(src, node.right))]


@kind("mask inverted", "a mask or condition inverted (~ / not dropped, or added to a where)")
def _invert(node, src, ctx):
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


@kind("and <-> or", "and and or swapped")
def _and_or(node, src, ctx):
    if isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        sp = operator_between(src, node.values[0], node.values[1], rf"\b{word}\b")
        if sp:
            return [(*sp, "or" if word == "and" else "and")]


@kind("drop clone", "a .clone() or .detach() dropped (aliasing)")
def _clone(node, src, ctx):
    if isinstance(node, ast.Call) and call_name(node) in {"clone", "detach"} \
            and isinstance(node.func, ast.Attribute) \
            and not is_module_chain(node.func.value, ctx["modules"]):
        return [(*src.span(node), wrapped(src, node.func.value))]


@kind("drop abs", "an absolute value dropped")
def _abs(node, src, ctx):
    return receiver_or_arg(node, src, ctx, {"abs"})


@kind("drop kwarg", "a keyword argument dropped (its default used instead)")
def _drop_kwarg(node, src, ctx):
    if isinstance(node, ast.Call):
        return [drop_keyword(node, kw, src) for kw in node.keywords
                if kw.arg is not None and kw.arg not in NEVER_DROP_KWARGS
                and not (kw.arg in DEFAULTS and isinstance(kw.value, ast.Constant)
                         and kw.value.value == DEFAULTS[kw.arg])]


@kind("drop statement", "a statement left out (an update, an in-place call, a reassignment)")
def _drop_stmt(node, src, ctx):
    droppable = (isinstance(node, ast.AugAssign)
                 or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                     and call_name(node.value) not in SEED_CALLS)
                 or (isinstance(node, ast.Assign) and all(
                     not isinstance(t, ast.Name) or t.id in ctx["defined_before"].get(node, ())
                     for t in node.targets)))
    if droppable:
        a, b = src.span(node)
        return [(a, b, "pass" + "\n" * src.text[a:b].count("\n"))]


STATEMENT_KINDS = {"drop statement"}


# --------------------------------------------------------------------------------------------
# Which statements may be mutated: backward liveness from the checks.
# --------------------------------------------------------------------------------------------
def loads(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def store_names(target):
    return {n.id for n in ast.walk(target)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


class Analysis:
    """Marks the statements of a page that can reach a check, and the ones never to mutate."""

    def __init__(self, src):
        self.src = src
        tree = src.tree
        self.modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:  # `from torch import nn`: a module; `Parameter`: not
                    full = f"{node.module}.{a.name}"
                    try:
                        __import__(full)
                        self.modules.add(a.asname or a.name)
                    except ImportError:
                        pass
        # Page functions -> positions of the parameters they may mutate (store into, or call an
        # in-place method on): calling them mutates those arguments.
        self.functions = {}
        for f in ast.walk(tree):
            if isinstance(f, ast.FunctionDef):
                params = [a.arg for a in f.args.posonlyargs + f.args.args]
                touched = set()
                for n in ast.walk(f):
                    if isinstance(n, (ast.Attribute, ast.Subscript)) \
                            and isinstance(n.ctx, ast.Store):
                        touched.add(base_name(n))
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                            call_name(n).endswith("_") or call_name(n) in MUTATING_METHODS):
                        touched.add(base_name(n.func.value))
                self.functions[f.name] = {i for i, p in enumerate(params) if p in touched}
        # Classes whose methods (other than __init__) store on self: calling them updates them.
        stateful = set(STATEFUL_MODULES)
        for c in ast.walk(tree):
            if isinstance(c, ast.ClassDef) and any(
                    isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store)
                    and base_name(n) == "self"
                    for f in c.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"
                    for n in ast.walk(f)):
                stateful.add(c.name)
        self.stateful = set()  # names bound to instances of those
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and any(isinstance(c, ast.Call) and call_name(c)
                                                 in stateful for c in ast.walk(n.value)):
                self.stateful |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        self.plot = set(PLOT_NAMES)
        changed = True
        while changed:  # names assigned from plotting are plotting too (im = ax.imshow(...))
            changed = False
            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.For, ast.With)) and loads(
                        node.value if isinstance(node, ast.Assign) else
                        node.iter if isinstance(node, ast.For) else node) & self.plot:
                    targets = (node.targets if isinstance(node, ast.Assign) else
                               [node.target] if isinstance(node, ast.For) else
                               [i.optional_vars for i in node.items if i.optional_vars])
                    new = set().union(*(store_names(t) for t in targets)) - self.plot
                    if new:
                        self.plot |= new
                        changed = True
        self.relevant = set()
        self.needed_after = {}  # statement -> names needed after it (union over loop passes)
        self.block(tree.body, set())

    # -- classification of single statements --
    def is_check(self, s):
        """A claim's own statement (``claims.kind``): what every relevant slip must reach."""
        return claims.kind(s) is not None

    def is_skipped(self, s):
        """print calls, plotting, docstrings, del, imports: never relevant, never mutated."""
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) \
                and call_name(s.value) == "print":
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return True
        if isinstance(s, (ast.Delete, ast.Import, ast.ImportFrom, ast.Pass, ast.Global)):
            return True
        simple = not hasattr(s, "body")
        return simple and bool(loads(s) & self.plot or self.stores(s) & self.plot)

    def contains_check(self, s):
        return any(isinstance(n, ast.stmt) and self.is_check(n) for n in ast.walk(s))

    def stores(self, s):
        out = set()
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
        return out

    def effects(self, s):
        """(strong definitions, weak definitions) of a statement, by name.

        Weak: what it may mutate without rebinding: item and attribute stores, in-place calls
        (`name_(...)`, `.append`, `.train()`, `.backward()`, ...), calls of stateful modules
        (BatchNorm, InstanceNorm, page classes that store on self outside __init__) and the
        arguments of the page's own functions.
        """
        strong, weak = set(), set()
        if isinstance(s, ast.Assign):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    strong.add(t.id)
                elif isinstance(t, (ast.Tuple, ast.List)):
                    strong |= store_names(t)
        elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
            strong.add(s.target.id)
        elif isinstance(s, (ast.FunctionDef, ast.ClassDef)):
            strong.add(s.name)
            return strong, weak
        weak |= self.stores(s) - strong
        for n in ast.walk(s):
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                weak.add(base_name(n))
            if isinstance(n, ast.Call):
                f, name = n.func, call_name(n)
                if isinstance(f, ast.Attribute) and not is_module_chain(f.value, self.modules):
                    if name.endswith("_") or name in MUTATING_METHODS:
                        weak.add(base_name(f.value))
                elif isinstance(f, ast.Name):
                    if f.id in self.stateful:
                        weak.add(f.id)
                    if f.id in self.functions:
                        weak |= {base_name(a) for i, a in enumerate(n.args)
                                 if i in self.functions[f.id]}
                if (name.endswith("_") and n.args) or name in MUTATING_FUNCTIONS:
                    weak |= {base_name(a) for a in n.args}
        weak.discard(None)
        return strong, weak - strong

    # -- the backward pass --
    def block(self, stmts, needed):
        """Mark relevant statements of a block; return the names needed before it."""
        for s in reversed(stmts):
            if self.is_skipped(s):
                continue
            strong, weak = self.effects(s)
            # A bare call is made for its effect (bn(x), loss.backward()), except filling a
            # collection, which liveness judges (`curve.append(...)` for a figure).
            bare_call = (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                         and call_name(s.value) not in COLLECTION_METHODS)
            if not (self.is_check(s) or self.contains_check(s) or bare_call
                    or (strong | weak) & needed):
                continue
            self.relevant.add(s)
            self.needed_after.setdefault(s, set()).update(needed)
            own = self.own_loads(s)
            pairs = assign_pairs(s)
            if pairs and not self.is_check(s):  # a, b = f(x), g(y): only what is needed later
                own = set().union(set(), *(
                    loads(t) | loads(v) for t, v in pairs
                    if not isinstance(t, ast.Name) or t.id in needed))
            if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
                self.mark_all(s.body)
                inner = free_loads(s)
            elif hasattr(s, "body"):
                inner = self.compound(s, needed)
            else:
                inner = set()
            needed = (needed - strong) | own | inner
        return needed

    def own_loads(self, s):
        if hasattr(s, "body"):
            return set().union(set(), *(loads(e) for e in own_expressions(s)))
        return loads(s)

    def compound(self, s, needed):
        bodies = [getattr(s, a) for a in ("body", "orelse", "finalbody") if getattr(s, a, None)]
        bodies += [h.body for h in getattr(s, "handlers", [])]
        loop = isinstance(s, (ast.For, ast.While))
        inner = set()
        for _ in range(2 if loop else 1):  # loops: what the body needs is needed after it too
            for body in bodies:
                inner |= self.block(body, needed | (inner | self.own_loads(s) if loop else set()))
        return inner

    def mark_all(self, stmts):
        for s in stmts:
            if self.is_skipped(s):
                continue
            self.relevant.add(s)
            for attr in ("body", "orelse", "finalbody"):
                if getattr(s, attr, None):
                    self.mark_all(getattr(s, attr))
            for h in getattr(s, "handlers", []):
                self.mark_all(h.body)


def assign_pairs(s):
    """`a, b = x, y` -> [(a, x), (b, y)]; else None."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1:
        t, v = s.targets[0], s.value
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) \
                and len(t.elts) == len(v.elts) \
                and not any(isinstance(e, ast.Starred) for e in t.elts + v.elts):
            return list(zip(t.elts, v.elts))
    return None


def free_loads(s):
    """Names a function or class reads from outside: its loads less its parameters and locals."""
    inner = {a.arg for a in ast.walk(s) if isinstance(a, ast.arg)}
    inner |= store_names(s)
    return loads(s) - inner


def own_expressions(s):
    """The expressions a statement evaluates itself (for compound ones: not their bodies)."""
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*s.decorator_list, *s.args.defaults, *[d for d in s.args.kw_defaults if d]]
    if isinstance(s, ast.ClassDef):
        return [*s.decorator_list, *s.bases, *s.keywords]
    if isinstance(s, (ast.For, ast.AsyncFor)):
        return [s.target, s.iter]
    if isinstance(s, (ast.While, ast.If)):
        return [s.test]
    if isinstance(s, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in s.items]
    if isinstance(s, ast.Try):
        return [h.type for h in s.handlers if h.type]
    return [s]


# --------------------------------------------------------------------------------------------
# Candidate mutants of a page
# --------------------------------------------------------------------------------------------
@dataclass
class Mutant:
    page: str           # normalization/plot_05_layernorm
    kind: str
    line: int
    start: int
    end: int
    repl: str
    before: str         # the site's lines, as in the equivalents file
    after: str
    cuda_only: bool = False
    stmt_line: int = 0  # the line of the statement that owns the site
    key: str = ""
    outcome: str = ""   # assert, error, timeout, survived, unexecuted, equivalent...
    detail: str = ""
    seconds: float = 0.0
    equivalent: str = ""  # the reason, when listed

    def label(self):
        return f"{self.page}:{self.line} [{self.kind}] {self.before} => {self.after}"


def page_id(path):
    return f"{Path(path).parent.name}/{Path(path).stem}"


def cpu_branch(test_src):
    """For an `if` on the device: True/False, what its test evaluates to on the CPU; else None."""
    if "cuda" not in test_src and "device" not in test_src:
        return None

    class Cuda:
        @staticmethod
        def is_available():
            return False

    class Torch:
        cuda = Cuda

    try:
        return bool(eval(test_src, {"__builtins__": {}}, {"device": "cpu", "torch": Torch}))
    except Exception:
        return None


def candidates(path):
    """Every mutant the catalogue makes of a page, in source order (before selection)."""
    src = Source(path)
    an = Analysis(src)
    pid = page_id(path)
    ctx = {"modules": an.modules, "src": src, "defined_before": defined_before(src.tree)}
    cuda_spans = []  # (start, end) of code the CPU never runs
    for node in ast.walk(src.tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            taken = cpu_branch(src.seg(node.test))
            if taken is None:
                continue
            branch = node.orelse if taken else node.body
            branch = branch if isinstance(branch, list) else [branch]
            cuda_spans += [src.span(b) for b in branch]
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(n, ast.Attribute) and n.attr == "cuda"
                and isinstance(src.parent.get(n), ast.Attribute) for n in ast.walk(node)):
            # calls torch.cuda.something(): only CUDA can run it
            cuda_spans += [(src.span(node.body[0])[0], src.span(node)[1])]
    out, seen = [], set()

    def add(kind_name, stmt, node, sites):
        for start, end, repl in sites or []:
            if (start, end, repl) in seen or src.text[start:end] == repl:
                continue
            seen.add((start, end, repl))
            before, after = src.describe(start, end, repl)
            cuda = any(a <= start and end <= b for a, b in cuda_spans)
            out.append(Mutant(pid, kind_name, src.line_of(start), start, end, repl, before,
                              after, cuda_only=cuda, stmt_line=stmt.lineno))

    for stmt in sorted(an.relevant, key=lambda s: (s.lineno, s.col_offset)):
        if an.is_check(stmt) or is_parameter(stmt):
            continue
        exprs = own_expressions(stmt)
        if hasattr(stmt, "body") and any(loads(e) & an.plot for e in exprs):
            continue  # `for ax, ... in zip(axes, ...)`: plotting
        if isinstance(stmt, ast.For) and literal(stmt.iter):
            continue  # `for k in (1, 7, 100)`: the inputs of an experiment
        skip = measured_or_drawn(stmt, src)
        for t, v in assign_pairs(stmt) or []:  # `pre, post = f(a), g(b)` with post unused
            if isinstance(t, ast.Name) and t.id not in an.needed_after.get(stmt, set()):
                skip |= set(ast.walk(v))
        if isinstance(stmt, ast.Assign) and stmt.value in skip:
            continue  # x = 2 * torch.randn(...) + 1: an input
        for name in KINDS:
            if name in STATEMENT_KINDS and not hasattr(stmt, "body"):
                add(name, stmt, stmt, KINDS[name][1](stmt, src, ctx))
        nodes = []
        if isinstance(stmt, (ast.FunctionDef, ast.Lambda)):
            nodes.append(stmt)  # eps defaults
        for e in exprs:
            nodes += [n for n in walk_code(e) if n not in skip]
        for node in nodes:
            for name, (_, fn) in KINDS.items():
                if name in STATEMENT_KINDS:
                    continue
                add(name, stmt, node, fn(node, src, ctx))
    return src, out


def literal(node):
    """Numbers, tuples and lists of numbers, ranges of numbers (an `if` on the device may
    choose between them)."""
    if isinstance(node, ast.IfExp):
        return literal(node.body) and literal(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        return all(literal(a) for a in node.args)  # for n in range(1, 65)
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.List, ast.UnaryOp, ast.BinOp,
                              ast.Load, ast.unaryop, ast.operator)) for n in ast.walk(node))


def is_parameter(stmt):
    """`B, L, D = 4, 6, 8`: a literal input of the experiment (eps is not: it is the code's)."""
    return (isinstance(stmt, ast.Assign) and literal(stmt.value)
            and not any("eps" in t.lower() for x in stmt.targets for t in store_names(x)))


def measured_or_drawn(stmt, src):
    """Nodes of a statement that are the check's measurement or the experiment's input.

    Measurement: around `(a - b).abs()` or `(a - b).norm()`, everything but `a` and `b`
    (`gap = (a - b).abs().max().item()` feeds an assert; flipping its `-` or dropping its
    `.abs()` mutates the check, not the code). Input: a random draw or a sample grid and the
    arithmetic, methods and comprehension around it (`mu + sigma * torch.randn(T, B, C)`).
    """
    parent, skip = src.parent, set()
    for e in own_expressions(stmt):
        for n in ast.walk(e):
            if not isinstance(n, ast.Call):
                continue
            name = call_name(n)
            if name in MEASURES:
                f = n.func
                subs = []
                for t in [getattr(f, "value", None), *n.args[:1]]:
                    while isinstance(t, ast.Subscript):  # (a - b)[:, -1].abs()
                        t = t.value
                    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.Sub):
                        subs.append(t)
                if subs:
                    target = subs[0]
                    top = n
                    while isinstance(parent.get(top), ast.expr):
                        top = parent[top]
                    keep = set(ast.walk(target.left)) | set(ast.walk(target.right))
                    skip |= set(ast.walk(top)) - keep
            if name in INPUT_CALLS:
                top = n
                while True:
                    p = parent.get(top)
                    if isinstance(p, (ast.BinOp, ast.UnaryOp, ast.ListComp, ast.GeneratorExp)) \
                            or (isinstance(p, ast.Attribute) and p.value is top) \
                            or (isinstance(p, ast.Call) and p.func is top):
                        top = p
                    else:
                        break
                skip |= set(ast.walk(top))
    return skip


def walk_code(node):
    """ast.walk without strings, f-strings, seed calls or print calls."""
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                          and isinstance(node.value, (str, bytes))):
        return
    if isinstance(node, ast.Call) and call_name(node) in SEED_CALLS | {"print"}:
        return
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            continue
        yield from walk_code(child)


def defined_before(tree):
    """For each Assign: the names already assigned somewhere earlier in the file."""
    out, names = {}, set()
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)),
                   key=lambda n: (n.lineno, n.col_offset))
    for n in nodes:
        if isinstance(n, ast.Assign):
            out[n] = set(names)
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            for a in ast.walk(n.args) if isinstance(n, ast.FunctionDef) else []:
                if isinstance(a, ast.arg):
                    names.add(a.arg)
            names.add(n.name)
        for t in ast.walk(n):
            if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                names.add(t.id)
    return out


def choose(muts, per_kind):
    """Per (page, kind): the `per_kind` sites with the smallest stable hash."""
    groups, count = {}, {}
    for m in muts:
        ident = (m.page, m.kind, m.before, m.after)
        count[ident] = count.get(ident, 0) + 1
        m.key = hashlib.sha1("|".join([*ident, str(count[ident])]).encode()).hexdigest()
        if not m.cuda_only:
            groups.setdefault((m.page, m.kind), []).append(m)
    chosen = []
    for group in groups.values():
        chosen += sorted(group, key=lambda m: m.key)[:per_kind]
    return sorted(chosen, key=lambda m: (m.page, m.start, m.kind))


# --------------------------------------------------------------------------------------------
# Equivalents
# --------------------------------------------------------------------------------------------
def read_equivalents(path=EQUIVALENTS):
    """{(page, before, after): reason}; one line each: `page: before => after ## reason`."""
    out = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            out.update(read_equivalents_line(line))
        except ValueError as err:
            raise SystemExit(f"{path.name}:{n}: {err}")
    return out


def read_equivalents_line(line):
    """`page: before => after ## reason` -> {(page, before, after): reason}."""
    try:
        body, reason = line.rsplit(" ## ", 1)
        page, rest = body.split(": ", 1)
        before, after = rest.split(" => ")
    except ValueError:
        raise ValueError("expected `page: original line => mutated line ## reason`") from None
    if not reason.strip():
        raise ValueError("an equivalent needs a reason")
    return {(page.strip(), before.strip(), after.strip()): reason.strip()}


# --------------------------------------------------------------------------------------------
# The fork server
# --------------------------------------------------------------------------------------------
def prepare_parent():
    """Import what the pages import, once; run no tensor operation (fork-safe)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ["HF_HUB_OFFLINE"] = "1"  # read when huggingface_hub is imported, i.e. here
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.testing  # noqa: F401
    try:  # assert_close imports it (and sympy) on its first call: 2-3 s per child otherwise
        import torch.distributed.tensor  # noqa: F401
    except Exception:
        pass
    for path in PAGES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                try:
                    __import__(name)
                except Exception:
                    pass


def child(path, source, trace, wfd):
    """In the forked child: run the page's (mutated) source as __main__; report through wfd."""
    result = {"status": "survived", "detail": "", "lines": [], "modules": []}
    preloaded = set(sys.modules)
    try:
        os.chdir(tempfile.mkdtemp(prefix="mutant-", dir=_TMP_ROOT))
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import torch
        torch.set_num_threads(1)
        filename = str(path)
        code = compile(source, filename, "exec")
        glob = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
        sys.argv = [filename]
        lines = set()
        if trace:
            def local(frame, event, arg):
                if event == "line":
                    lines.add(frame.f_lineno)
                return local

            def global_(frame, event, arg):
                if frame.f_code.co_filename == filename:
                    lines.add(frame.f_lineno)
                    return local
                return None
            sys.settrace(global_)
        try:
            exec(code, glob)
        finally:
            # A trace function is dropped when it raises (a RecursionError on the page does
            # that): then the lines are unknown, not unexecuted.
            intact = sys.gettrace() is global_ if trace else False
            sys.settrace(None)
            result["lines"] = sorted(lines) if intact else None
    except SystemExit as e:
        if e.code not in (None, 0):
            result.update(status="error", detail=f"SystemExit({e.code})")
    except BaseException as e:  # noqa: BLE001: every failure of the page is a verdict
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        status = "assert" if isinstance(e, AssertionError) else "error"
        msg = str(e).strip().splitlines()
        result.update(status=status, line=line,
                      detail=f"{type(e).__name__}: {msg[0][:120] if msg else ''}")
    if trace:  # what the page imported lazily (torch.testing pulls in sympy): preload it
        result["modules"] = sorted(set(sys.modules) - preloaded)
    data = json.dumps(result).encode()
    while data:
        data = data[os.write(wfd, data):]
    os._exit(0)


_TMP_ROOT = None  # the sweep's temporary directory; each child works in a folder of its own


def run_all(jobs, workers, progress=None):
    """jobs: list of (key, path, source, trace, timeout). Returns {key: result}."""
    global _TMP_ROOT
    _TMP_ROOT = tempfile.mkdtemp(prefix="mutation-sweep-")
    try:
        return _run_all(jobs, workers, progress)
    finally:
        shutil.rmtree(_TMP_ROOT, ignore_errors=True)


def _run_all(jobs, workers, progress):
    pending = list(jobs)
    running = {}  # pid -> (key, rfd, started, timeout, chunks)
    results = {}
    while pending or running:
        while pending and len(running) < workers:
            key, path, source, trace, timeout = pending.pop(0)
            rfd, wfd = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                try:
                    child(path, source, trace, wfd)
                finally:
                    os._exit(70)
            os.close(wfd)
            running[pid] = [key, rfd, time.monotonic(), timeout, []]
        fds = {v[1]: pid for pid, v in running.items()}
        ready, _, _ = select.select(list(fds), [], [], 0.05)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fds[fd]][4].append(chunk)
        now = time.monotonic()
        for pid, (key, rfd, started, timeout, chunks) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0 and now - started > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(rfd)
                results[key] = {"status": "timeout", "detail": f"over {timeout:.0f} s",
                                "seconds": now - started}
            elif done:
                while True:
                    chunk = os.read(rfd, 65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                os.close(rfd)
                try:
                    res = json.loads(b"".join(chunks))
                except ValueError:
                    res = {"status": "error", "detail": f"child died ({status})"}
                res["seconds"] = time.monotonic() - started
                results[key] = res
            else:
                continue
            del running[pid]
            if progress:
                progress(len(results), len(jobs))
    return results


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------
@dataclass
class Sweep:
    mutants: list = field(default_factory=list)    # selected
    possible: int = 0
    cuda_only: int = 0
    baseline: dict = field(default_factory=dict)   # page -> {"seconds", "status", ...}
    unexplained: list = field(default_factory=list)
    stale: list = field(default_factory=list)
    killed_listed: list = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    per_kind: int = PER_KIND

    def counts(self):
        c = {}
        for m in self.mutants:
            c[m.outcome] = c.get(m.outcome, 0) + 1
        return c

    def score(self):
        c = self.counts()
        killed = c.get("assert", 0) + c.get("error", 0) + c.get("timeout", 0)
        judged = len(self.mutants) - c.get("equivalent", 0)
        return killed, judged


def default_workers():
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return int(os.environ.get("MUTANTS_JOBS", n))


def sweep(pages=PAGES, per_kind=PER_KIND, workers=None, list_only=False, verbose=True):
    t0 = time.monotonic()
    workers = workers or default_workers()
    result = Sweep(workers=workers, per_kind=per_kind)
    equivalents = read_equivalents()
    all_candidates, sources = [], {}
    for path in pages:
        src, muts = candidates(path)
        sources[page_id(path)] = (path, src)
        all_candidates += muts
    result.possible = len(all_candidates)
    result.cuda_only = sum(m.cuda_only for m in all_candidates)
    chosen = choose(all_candidates, per_kind)
    result.mutants = chosen
    listed_pages = {page_id(p) for p in pages}
    produced = {(m.page, m.before, m.after) for m in all_candidates}
    result.stale = [k for k in equivalents if k[0] in listed_pages and k not in produced]
    if list_only:
        return result

    prepare_parent()
    gc.freeze()

    def progress(done, total):
        if verbose and (done % 25 == 0 or done == total):
            print(f"  {done}/{total} ({time.monotonic() - t0:.0f} s)", flush=True)

    # The unmutated pages, traced: must pass; give the lines they execute and their time.
    if verbose:
        print(f"baseline: {len(pages)} pages on {workers} workers", flush=True)
    base = run_all([(pid, path, src.text, True, 120.0) for pid, (path, src) in sources.items()],
                   workers)
    result.baseline = base
    broken = [pid for pid, r in base.items() if r["status"] != "survived"]
    if broken:
        raise SystemExit("unmutated pages fail in the sweep's runner: " + ", ".join(
            f"{pid} ({base[pid]['status']}: {base[pid].get('detail')})" for pid in broken))

    # Modules the pages imported lazily, imported once here instead of once per mutant.
    for name in sorted({n for r in base.values() for n in r.get("modules", [])}):
        try:
            __import__(name)
        except Exception:
            pass
    jobs = []
    for m in chosen:
        path, src = sources[m.page]
        text = src.text[:m.start] + m.repl + src.text[m.end:]
        timeout = min(TIMEOUT_MAX, max(TIMEOUT_MIN, TIMEOUT_FACTOR * base[m.page]["seconds"]))
        jobs.append((m.key + m.page, path, text, False, timeout))
    # Longest pages first: better packing of the last minutes.
    jobs.sort(key=lambda j: -base[page_id(j[1])]["seconds"])
    gc.freeze()  # the children's garbage collector leaves the parent's objects (and pages) alone
    if verbose:
        print(f"{len(jobs)} mutants to run", flush=True)
    res = run_all(jobs, workers, progress)
    for m in chosen:
        r = res.get(m.key + m.page)
        if r is not None:
            m.outcome, m.seconds = r["status"], r["seconds"]
            m.detail = r.get("detail", "")
            if r.get("line"):
                m.detail += f" (line {r['line']})"
        lines = base[m.page]["lines"]
        if m.outcome == "survived" and lines is not None and m.stmt_line not in lines \
                and m.line not in lines:
            m.outcome = "unexecuted"  # a survivor on a line the unmutated page never runs
        reason = equivalents.get((m.page, m.before, m.after))
        if reason is not None:
            if m.outcome in ("survived", "unexecuted"):
                m.equivalent, m.outcome = reason, "equivalent"
            else:
                result.killed_listed.append(m)
        elif m.outcome in ("survived", "unexecuted"):
            result.unexplained.append(m)
    result.seconds = time.monotonic() - t0
    return result


def report(result):
    killed, judged = result.score()
    c = result.counts()
    lines = [
        "Mutation sweep of the gallery (tests/mutants.py)",
        f"{len(KINDS)} kinds, {result.possible} candidate mutants "
        f"({result.cuda_only} on CUDA-only code, not run on CPU), "
        f"{len(result.mutants)} selected ({result.per_kind} per page and kind)",
        f"workers {result.workers}, wall {result.seconds:.0f} s",
        f"killed {killed} / {judged} = {100 * killed / max(judged, 1):.1f}%: "
        f"by an assertion {c.get('assert', 0)}, by another exception {c.get('error', 0)}, "
        f"by a timeout {c.get('timeout', 0)}; survived {c.get('survived', 0)}, "
        f"unexecuted {c.get('unexecuted', 0)}, listed as equivalent {c.get('equivalent', 0)}",
        "",
    ]
    if result.unexplained:
        lines.append(f"UNEXPLAINED SURVIVORS ({len(result.unexplained)}):")
        lines += [f"  {m.label()}" + (" (never executed)" if m.outcome == "unexecuted" else "")
                  for m in result.unexplained]
        lines.append("")
    if result.stale:
        lines.append(f"STALE EQUIVALENTS (no candidate mutant matches; {len(result.stale)}):")
        lines += [f"  {p}: {b} => {a}" for p, b, a in result.stale]
        lines.append("")
    if result.killed_listed:
        lines.append(f"LISTED AS EQUIVALENT BUT KILLED ({len(result.killed_listed)}):")
        lines += [f"  {m.label()}: {m.outcome} {m.detail}" for m in result.killed_listed]
        lines.append("")
    lines.append("Per kind (selected / killed):")
    for name, (desc, _) in KINDS.items():
        ms = [m for m in result.mutants if m.kind == name]
        k = sum(m.outcome in ("assert", "error", "timeout") for m in ms)
        lines.append(f"  {name:18s} {len(ms):4d} {k:4d}  {desc}")
    lines.append("")
    lines.append("Per page (selected / by an assertion / by another exception / timeout / "
                 "equivalent / survived):")
    for page in sorted({m.page for m in result.mutants}):
        ms = [m for m in result.mutants if m.page == page]
        n = {o: sum(m.outcome == o for m in ms) for o in
             ("assert", "error", "timeout", "equivalent", "survived", "unexecuted")}
        lines.append(f"  {page:42s} {len(ms):4d} {n['assert']:4d} {n['error']:4d} "
                     f"{n['timeout']:3d} {n['equivalent']:4d} {n['survived'] + n['unexecuted']:4d}")
    lines.append("")
    if result.baseline:
        lines.append("Baseline (traced) seconds per page:")
        lines += [f"  {pid}: {r['seconds']:.1f}" for pid, r in sorted(result.baseline.items())]
        lines.append("")
    lines.append("Every mutant (outcome, seconds, site):")
    for m in result.mutants:
        extra = f" -- {m.equivalent}" if m.equivalent else f" -- {m.detail}" if m.detail else ""
        lines.append(f"  {m.outcome:10s} {m.seconds:5.1f}  {m.label()}{extra}")
    return "\n".join(lines) + "\n"


def summary(result):
    killed, judged = result.score()
    return (f"mutation sweep: {killed}/{judged} killed = {100 * killed / max(judged, 1):.1f}% "
            f"of {len(result.mutants)} mutants ({len(KINDS)} kinds) in {result.seconds:.0f} s "
            f"on {result.workers} workers; {len(result.unexplained)} unexplained survivors, "
            f"{len(result.stale)} stale and {len(result.killed_listed)} killed equivalents")


def main(argv=None):
    # Before torch is imported: one OpenMP thread, and no GPU (a CUDA context must not exist
    # before fork; the sweep judges the checks on the CPU).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("MPLBACKEND", "Agg")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--page", default="", help="regex on the page paths")
    ap.add_argument("--per-kind", type=int, default=PER_KIND)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--list", action="store_true", help="list the selected mutants, run nothing")
    ap.add_argument("--all", action="store_true", help="with --list: every candidate")
    ap.add_argument("--report", default=str(REPORT))
    ap.add_argument("--json", default=None, help="also write the result as JSON here")
    ap.add_argument("--template", action="store_true",
                    help="print the survivors as lines for the equivalents file (reason blank)")
    ap.add_argument("--prune", action="store_true",
                    help="delete the stale lines of the equivalents file, run nothing")
    args = ap.parse_args(argv)
    pages = [p for p in PAGES if re.search(args.page, str(p.relative_to(ROOT)))]
    if args.prune:
        stale = set(sweep(PAGES, args.per_kind, list_only=True).stale)
        kept = [line for line in EQUIVALENTS.read_text().splitlines()
                if not (line.strip() and not line.startswith("#")
                        and set(read_equivalents_line(line)) & stale)]
        EQUIVALENTS.write_text("\n".join(kept) + "\n")
        print(f"removed {len(stale)} stale lines from {EQUIVALENTS.name}")
        return 0
    if args.list:
        if args.all:
            muts = [m for p in pages for m in candidates(p)[1]]
        else:
            muts = sweep(pages, args.per_kind, list_only=True).mutants
        for m in muts:
            print(("[cuda] " if m.cuda_only else "") + m.label())
        print(f"{len(muts)} mutants")
        return 0
    result = sweep(pages, args.per_kind, args.jobs)
    text = report(result)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "summary": summary(result),
            "unexplained": [m.label() + (" (never executed)" if m.outcome == "unexecuted"
                                         else "") for m in result.unexplained],
            "stale": [f"{p}: {b} => {a}" for p, b, a in result.stale],
            "killed_listed": [m.label() for m in result.killed_listed],
            "mutants": [asdict(m) for m in result.mutants],
        }))
    head = text.split("Per kind")[0]
    print(head.rstrip())
    print(summary(result))
    print(f"full report: {args.report}")
    if args.template:
        print("\nFor tests/mutation_equivalents.txt, only if truly equivalent (add the reason):")
        for m in result.unexplained:
            print(f"{m.page}: {m.before} => {m.after} ## ")
    return 1 if result.unexplained or result.stale or result.killed_listed else 0


if __name__ == "__main__":
    sys.exit(main())
