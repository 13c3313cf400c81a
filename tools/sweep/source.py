"""A page's text, its ast and the character spans of its nodes, and small ast helpers.

ast counts columns in UTF-8 bytes; the mutants are built on characters: a mutant is the page's
own text with one span replaced, so comments, layout and line numbers stay.
"""

import ast
import io
import re
import tokenize
from pathlib import Path


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


def operator_between(src, left, right, pattern):
    """Span of the operator token between two nodes (skipping parentheses and comments)."""
    a, b = src.span(left)[1], src.span(right)[0]
    between = src.text[a:b]
    masked = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), between)
    m = re.search(pattern, masked)
    return (a + m.start(), a + m.end()) if m else None


def atomic(node):
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant,
                             ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp))


def wrapped(src, node):
    """A node's text, parenthesized unless it is atomic."""
    text = src.seg(node)
    if isinstance(node, ast.Tuple) and not text.startswith("("):
        return f"({text})"
    return text if atomic(node) else f"({text})"


def base_name(expr):
    """The name an expression is rooted at (`x` of `x.a[0].b()`), else None."""
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


def loads(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def store_names(target):
    return {n.id for n in ast.walk(target)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
