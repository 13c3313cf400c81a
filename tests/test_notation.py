"""The notation page (chapters/notation.rst) names every letter the pages' shape comments use:
a size letter in ``# (B, Nh, L, Dh)`` that the page's code binds (a variable or an argument)
must be on the page, as ``X``. And GQA's ``G`` is nowhere a count of GroupNorm's groups
(``Ng``): one letter, one meaning (../shared/STYLE.md)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = re.compile(r"#\s*\(([^)]*)\)")
LETTER = re.compile(r"\b[A-Z][a-z]{0,2}\b")


def shape_letters(source):
    """The size letters of ``source``'s shape comments that its code binds."""
    bound = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)} | \
        {a.arg for n in ast.walk(ast.parse(source)) if isinstance(n, ast.arg) for a in [n]}
    found = {m for group in SHAPE.findall(source) for m in LETTER.findall(group)}
    return found & bound


def test_every_shape_letter_is_on_the_notation_page():
    notation = (ROOT / "chapters" / "notation.rst").read_text()
    listed = set(re.findall(r"``([A-Z][a-z]{0,2})``", notation))
    used = {}
    for page in sorted(ROOT.glob("gallery/*/plot_*.py")):
        for letter in shape_letters(page.read_text()):
            used.setdefault(letter, []).append(page.stem)
    assert len(used) >= 12, sorted(used)
    missing = {letter: pages for letter, pages in used.items() if letter not in listed}
    assert not missing, missing


def test_the_check_reads_shape_comments():
    source = "B, Nh = 2, 4\nZz = 3\nx = f(B)  # (B, Nh, Zz, Liu)\n"
    assert shape_letters(source) == {"B", "Nh", "Zz"}  # Liu: a name in prose, not bound


def test_groupnorm_groups_are_not_g():
    for page in sorted(ROOT.glob("gallery/*/plot_*.py")):
        text = page.read_text()
        assert not re.search(r"GroupNorm\(G\b|\bG groups|C // G\b", text), page.stem
