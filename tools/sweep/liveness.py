"""Which statements of a page can reach a claim: a backward liveness pass by name.

Flow-sensitive at module level, loops iterated, the bodies of functions and classes kept whole
when they are used. It starts from the claims (`claims.kind`, the definition the ledger uses)
and keeps a statement that defines, mutates or calls what a later kept statement uses. Never
kept: print calls, plotting, docstrings, del, imports.
"""

import ast

import claims

from .source import base_name, call_name, is_module_chain, loads, store_names

PLOT_NAMES = {"plt", "matplotlib", "mpl", "fig", "ax", "axs", "axes"}
MUTATING_METHODS = {"append", "extend", "insert", "pop", "update", "setdefault", "clear",
                    "remove", "train", "eval", "register_buffer", "register_parameter",
                    "zero_grad", "backward", "step", "load_state_dict", "apply"}
COLLECTION_METHODS = {"append", "extend", "insert", "update", "setdefault", "add"}
MUTATING_FUNCTIONS = {"batch_norm", "instance_norm", "backward"}  # update their arguments
STATEFUL_MODULES = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d",
                    "InstanceNorm2d", "InstanceNorm3d", "SyncBatchNorm", "Dropout"}


def imported_modules(tree):
    """Names bound to modules: `import torch.nn as nn`, `from torch import nn` (not `Parameter`)."""
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                try:
                    __import__(f"{node.module}.{a.name}")
                    modules.add(a.asname or a.name)
                except ImportError:
                    pass
    return modules


def mutated_parameters(tree):
    """Page functions -> positions of the parameters they may mutate (store into, or call an
    in-place method on): calling them mutates those arguments."""
    out = {}
    for f in ast.walk(tree):
        if isinstance(f, ast.FunctionDef):
            params = [a.arg for a in f.args.posonlyargs + f.args.args]
            touched = set()
            for n in ast.walk(f):
                if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                    touched.add(base_name(n))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                        call_name(n).endswith("_") or call_name(n) in MUTATING_METHODS):
                    touched.add(base_name(n.func.value))
            out[f.name] = {i for i, p in enumerate(params) if p in touched}
    return out


def stateful_names(tree):
    """Names bound to instances of stateful modules: BatchNorm and the like, and page classes
    whose methods other than __init__ store on self (calling them updates them)."""
    stateful = set(STATEFUL_MODULES)
    for c in ast.walk(tree):
        if isinstance(c, ast.ClassDef) and any(
                isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store)
                and base_name(n) == "self"
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"
                for n in ast.walk(f)):
            stateful.add(c.name)
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and any(isinstance(c, ast.Call) and call_name(c)
                                             in stateful for c in ast.walk(n.value)):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return names


def plotting_names(tree):
    """PLOT_NAMES and the names assigned from them (`im = ax.imshow(...)`), to a fixed point."""
    plot = set(PLOT_NAMES)
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.For, ast.With)) and loads(
                    node.value if isinstance(node, ast.Assign) else
                    node.iter if isinstance(node, ast.For) else node) & plot:
                targets = (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.For) else
                           [i.optional_vars for i in node.items if i.optional_vars])
                new = set().union(*(store_names(t) for t in targets)) - plot
                if new:
                    plot |= new
                    changed = True
    return plot


class Analysis:
    """Marks the statements of a page that can reach a check, and the ones never to mutate.

    `relevant`: the statements that can reach a claim. `needed_after`: for each of them, the
    names needed after it (the union over the passes of a loop).
    """

    def __init__(self, src):
        self.src = src
        tree = src.tree
        self.modules = imported_modules(tree)
        self.functions = mutated_parameters(tree)
        self.stateful = stateful_names(tree)
        self.plot = plotting_names(tree)
        self.relevant = set()
        self.needed_after = {}
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
        return simple and bool(loads(s) & self.plot or store_names(s) & self.plot)

    def contains_check(self, s):
        return any(isinstance(n, ast.stmt) and self.is_check(n) for n in ast.walk(s))

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
        weak |= store_names(s) - strong
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
