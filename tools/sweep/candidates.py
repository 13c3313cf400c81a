"""Every candidate mutant of a page (`candidates`), and the subset that is run (`choose`).

A candidate is a site of a kind of the catalogue in a statement that can reach a claim
(liveness), outside the checks themselves, the experiment's inputs and the measurement a check
makes. Per (page, kind), `choose` keeps the `PER_KIND` sites with the smallest SHA-1 of (page,
kind, the site's lines before and after, occurrence): a page's selection changes only when that
kind's sites on that page change, and a larger `per_kind` chooses a superset. The page enters
the hash by chapter and topic, without its number: renumbering does not redraw.
"""

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .catalogue import KINDS, SEED_CALLS
from .liveness import Analysis, assign_pairs, own_expressions
from .source import Source, call_name, loads, store_names

PER_KIND = 2
# The experiment's inputs: random draws and sample grids (see measured_or_drawn).
INPUT_CALLS = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
               "randperm", "normal", "normal_", "uniform_", "bernoulli", "multinomial",
               "linspace", "logspace"}
MEASURES = {"abs", "norm"}  # (a - b).abs(): the discrepancy a check measures


@dataclass
class Mutant:
    page: str           # normalization/plot_04_layernorm
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
    outcome: str = ""   # assert, error, timeout, survived, unexecuted, equivalent
    detail: str = ""
    seconds: float = 0.0
    equivalent: str = ""  # the reason, when listed

    def label(self):
        return f"{self.page}:{self.line} [{self.kind}] {self.before} => {self.after}"


def page_id(path):
    """`gallery/normalization/plot_04_layernorm.py` -> `normalization/plot_04_layernorm`."""
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


def cuda_spans(src):
    """(start, end) of the code only CUDA runs: the branch of an `if` on the device that the
    CPU does not take, and the body of a function that calls torch.cuda.something()."""
    spans = []
    for node in ast.walk(src.tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            taken = cpu_branch(src.seg(node.test))
            if taken is None:
                continue
            branch = node.orelse if taken else node.body
            branch = branch if isinstance(branch, list) else [branch]
            spans += [src.span(b) for b in branch]
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(n, ast.Attribute) and n.attr == "cuda"
                and isinstance(src.parent.get(n), ast.Attribute) for n in ast.walk(node)):
            spans += [(src.span(node.body[0])[0], src.span(node)[1])]
    return spans


def candidates(path):
    """Every mutant the catalogue makes of a page, in source order (before selection)."""
    src = Source(path)
    an = Analysis(src)
    pid = page_id(path)
    ctx = {"modules": an.modules, "src": src, "defined_before": defined_before(src.tree)}
    cuda = cuda_spans(src)
    out, seen = [], set()

    def add(kind_name, stmt, sites):
        for start, end, repl in sites or []:
            if (start, end, repl) in seen or src.text[start:end] == repl:
                continue
            seen.add((start, end, repl))
            before, after = src.describe(start, end, repl)
            cuda_only = any(a <= start and end <= b for a, b in cuda)
            out.append(Mutant(pid, kind_name, src.line_of(start), start, end, repl, before,
                              after, cuda_only=cuda_only, stmt_line=stmt.lineno))

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
        for name, kind in KINDS.items():
            if kind.statement and not hasattr(stmt, "body"):
                add(name, stmt, kind.sites(stmt, src, ctx))
        nodes = []
        if isinstance(stmt, (ast.FunctionDef, ast.Lambda)):
            nodes.append(stmt)  # eps defaults
        for e in exprs:
            nodes += [n for n in walk_code(e) if n not in skip]
        for node in nodes:
            for name, kind in KINDS.items():
                if not kind.statement:
                    add(name, stmt, kind.sites(node, src, ctx))
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


def selection_key(page, kind, before, after, occurrence):
    """The stable hash that orders a (page, kind)'s sites: the smallest are chosen. The page
    is named by its chapter and topic, not its number: renumbering pages into reading order
    (issue 25) must not change which mutants are drawn."""
    topic = re.sub(r"/plot_\d+_", "/", page)
    ident = "|".join([topic, kind, before, after, str(occurrence)])
    return hashlib.sha1(ident.encode()).hexdigest()


def choose(muts, per_kind=PER_KIND):
    """Per (page, kind): the `per_kind` sites with the smallest stable hash (CUDA-only code is
    never chosen: the sweep runs on the CPU). Sets each mutant's key."""
    groups, count = {}, {}
    for m in muts:
        ident = (m.page, m.kind, m.before, m.after)
        count[ident] = count.get(ident, 0) + 1
        m.key = selection_key(*ident, count[ident])
        if not m.cuda_only:
            groups.setdefault((m.page, m.kind), []).append(m)
    chosen = []
    for group in groups.values():
        chosen += sorted(group, key=lambda m: m.key)[:per_kind]
    return sorted(chosen, key=lambda m: (m.page, m.start, m.kind))
