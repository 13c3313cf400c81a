"""The notation page (chapters/notation.rst) names every size letter the pages' shapes use.

A shape is a tuple of sizes, ``(B, Nh, L, Dh)``, ``(Dh/2,)``, ``(B, L, 3 D)``, written in a
comment beside the code or in a function's docstring (../shared/STYLE.md: "Write shapes in
comments"). Every capital letter of such a tuple, whether or not the page binds it, must be a
row of the page's table of sizes, each row there once: one letter, one meaning (a digit
numbers a second value of the same size, ``W2``; ``L0`` is a letter of its own). And GQA's
``G`` is nowhere a count of GroupNorm's groups (``Ng``)."""

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZE = r"(?:[A-Z][a-z0-9]{0,2}|\d+)"
TERM = rf"(?:{SIZE}(?:\s*[/*+-]\s*{SIZE})*|\d+\s+{SIZE}|\.\.\.|len\(\w+\))"
# a tuple of sizes, not a call: "(B, L, D)" yes, "f(Px)" and "range(X)" no
SHAPE = re.compile(rf"(?<![\w)\]])\(\s*({TERM}(?:\s*,\s*{TERM})*)\s*,?\s*\)")
# ``L0`` is a letter of its own; another digit numbers a second value of one size: ``W2``
LETTER = re.compile(r"\b([A-Z][a-z]{0,2})(0|[1-9])?\b")


def shape_texts(source):
    """The comments beside code and the docstrings of functions and classes in ``source``
    (not the text blocks: their equations name matrices, ``(Q, K, V)``)."""
    out = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT and tok.line[:tok.start[1]].strip()]
    out += [ast.get_docstring(node) or "" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    return out


def shape_letters(source):
    """The size letters of ``source``'s shapes."""
    return {name + (digit if digit == "0" else "") for text in shape_texts(source)
            for shape in SHAPE.findall(text) for name, digit in LETTER.findall(shape)}


def size_rows(notation):
    """The letters of the notation page's table of sizes, one entry per row."""
    table = notation.split("\nSizes\n-----\n", 1)[1].split("\n---", 1)[0]
    rows = re.findall(r"^   \* - (.*)$", table, re.M)[1:]  # the header row is no letter
    return [letter for row in rows for letter in re.findall(r"``([^`]+)``", row)]


def test_every_shape_letter_is_on_the_notation_page():
    listed = size_rows((ROOT / "chapters" / "notation.rst").read_text())
    assert len(listed) == len(set(listed)), sorted(listed)  # each letter in one row
    used = {}
    for page in sorted(ROOT.glob("gallery/*/plot_*.py")):
        for letter in shape_letters(page.read_text()):
            used.setdefault(letter, []).append(page.stem)
    assert {"B", "C", "L", "D", "Nh", "Dh", "Nkv", "Dff"} <= set(used), sorted(used)
    missing = {letter: pages for letter, pages in used.items() if letter not in listed}
    assert not missing, missing


def test_the_check_reads_shapes_not_prose_or_calls():
    source = ('B, Nh = 2, 4\n'
              'x = f(B)  # (B, Nh, Zz, L0, W2)\n'
              'y = g(x)  # (Dh/2,), as Liu et al. (2023) write f(Px) and range(X)\n'
              '# (Q, K, V): a text block, not a shape\n'
              'def h(t):\n    """t (..., 3 Dq) -> (len(t), Ab)."""\n')
    assert shape_letters(source) == {"B", "Nh", "Zz", "L0", "W", "Dh", "Dq", "Ab"}


def test_the_table_of_sizes_is_read_row_by_row():
    page = ("Sizes\n-----\n\n.. list-table::\n\n   * - letter\n     - meaning\n"
            "   * - ``H``, ``W``\n     - image ``(B, C, H, W)``\n   * - ``L``\n     - x\n\n"
            "Names\n-----\n\n   * - ``x``\n")
    assert size_rows("intro\n" + page) == ["H", "W", "L"]


def test_groupnorm_groups_are_not_g():
    for page in sorted(ROOT.glob("gallery/*/plot_*.py")):
        text = page.read_text()
        assert not re.search(r"GroupNorm\(G\b|\bG groups|C // G\b", text), page.stem
