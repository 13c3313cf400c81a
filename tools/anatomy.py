"""The page anatomy's static checks (../shared/STYLE.md, "Page anatomy"; issue 24).

    .venv/bin/python -m tools.anatomy [PAGE_REGEX]     # prints every finding, exit 1 if any

What it checks on every gallery page (``tests/test_anatomy.py`` runs the same functions):

- **lift**: a top-level function or class reads nothing but its arguments, builtins, what the
  Setup cell (the first code cell) or its own cell imports, and top-level definitions of its
  own cell or of the cells above. So it can be pasted into a notebook after the Setup cell.
- **copies**: a definition under ``# Copied from <chapter>/<page>.py: <name>`` is, character
  for character, the definition ``<name>`` of that page (Hugging Face's ``check_copies``).
- **one name, one definition**: a name defined at top level on several pages is one block:
  identical everywhere, every page but its source marking its copy as above.
- **lesson**: the docstring has a "You will learn" list of 3 to 5 items and "Prerequisites";
  the page shows at least one displayed equation (``.. math::``).
"""

import ast
import builtins
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "gallery"
sys.path.insert(0, str(ROOT / "_ext"))
import internals  # noqa: E402  (sphinx-gallery's own splitter, as the build reads pages)

# Pages not yet rewritten into the anatomy (issue 24): the browser test expects them to fail
# (xfail, strict: a page that passes must leave this list). Empty when the issue is done.
NOT_YET = set()

COPIED = re.compile(r"#\s*Copied from (\w+/plot_\w+)\.py: (\w+)\s*$")
BUILTINS = set(dir(builtins)) | {"__class__", "__file__", "__name__"}


@dataclass
class Definition:
    page: str  # "chapter/plot_NN_topic"
    name: str
    line: int
    cell: int  # index of its code cell (0: Setup)
    text: str  # its source, decorators included
    copied_from: tuple | None = None  # (page, name) of a "# Copied from" marker
    reads: set = field(default_factory=set)  # page globals it reads


@dataclass
class Page:
    name: str
    path: Path
    docstring: str
    texts: list  # the text blocks, in order
    cells: list  # [(first line, code)] of the code cells
    definitions: list


def page_name(path):
    return f"{path.parent.name}/{path.stem}"


def pages(pattern=""):
    return [p for p in sorted(GALLERY.glob("*/plot_*.py"))
            if re.search(pattern, page_name(p))]


def _imports(nodes):
    return {(a.asname or a.name).split(".")[0] for n in nodes
            if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def _free_names(node):
    """Names a definition loads that it does not bind itself (arguments, locals, nested)."""
    bound, used = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (used if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= _imports([n])
    # The definition's own name (recursion) is bound by the time it runs.
    return used - bound - {node.name}


def read_page(path):
    source = path.read_text()
    lines = source.splitlines()
    blocks = internals.split_page(path)
    texts = [content for label, content, _ in blocks if label == "text"]
    cells = [(start, content) for label, content, start in blocks if label == "code"]
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree) or ""

    def cell_of(line):
        n = 0
        for i, (start, _) in enumerate(cells):
            if start <= line:
                n = i
        return n

    cell_imports = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            cell_imports.setdefault(cell_of(node.lineno), set()).update(_imports([node]))
    definitions, above = [], set()  # names defined in earlier cells
    by_cell = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            by_cell.setdefault(cell_of(node.lineno), set()).add(node.name)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        cell = cell_of(first)
        above = {n for c, names in by_cell.items() if c < cell for n in names}
        allowed = (BUILTINS | cell_imports.get(0, set()) | cell_imports.get(cell, set())
                   | above | by_cell.get(cell, set()))
        marker = COPIED.search(lines[first - 2]) if first >= 2 else None
        text = "\n".join(lines[first - 1:node.end_lineno])
        definitions.append(Definition(
            page_name(path), node.name, first, cell, text,
            (marker[1], marker[2]) if marker else None, _free_names(node) - allowed))
    return Page(page_name(path), path, docstring, texts, cells, definitions)


def lift_findings(page):
    return [f"{page.name}.py:{d.line}: {d.name} reads {', '.join(sorted(d.reads))} "
            "(pass it as an argument, or import it in this cell)"
            for d in page.definitions if d.reads]


def copy_findings(all_pages):
    """Copies that drift from their source, and one name with two meanings across pages."""
    found = []
    index = {(p.name, d.name): d for p in all_pages for d in p.definitions}
    names = {}
    for p in all_pages:
        for d in p.definitions:
            names.setdefault(d.name, []).append(d)
    for p in all_pages:
        for d in p.definitions:
            if d.copied_from is None:
                continue
            source = index.get(d.copied_from)
            where = f"{p.name}.py:{d.line}: {d.name}"
            if source is None:
                found.append(f"{where} is copied from {d.copied_from[0]}.py: "
                             f"{d.copied_from[1]}, which is not there")
            elif source.copied_from is not None:
                found.append(f"{where}: its source {source.page}: {source.name} is itself a "
                             "copy; name the original")
            elif _body(source) != _body(d):
                found.append(f"{where} drifted from {source.page}.py:{source.line} "
                             f"({source.name})")
    for name, defs in sorted(names.items()):
        pages_ = {d.page for d in defs}
        if len(pages_) < 2:
            continue
        sources = [d for d in defs if d.copied_from is None]
        if len(sources) != 1:
            found.append(f"{name} is defined on {len(pages_)} pages "
                         f"({', '.join(sorted(pages_))}) by {len(sources)} originals: "
                         "give each meaning its own name, or mark the copies "
                         "'# Copied from <chapter>/<page>.py: <name>'")
    return found


def _body(d):
    """A definition's text less its name (a copy may be renamed: ``...: rope`` as is)."""
    return d.text.replace(d.name, "\0")


YOU_WILL_LEARN = re.compile(r"You will learn\W*\n((?:\s*\n)*(?:\s*[-*] .+\n?(?:[ \t]+\S.*\n?)*)+)")


def lesson_findings(page):
    found = []
    m = YOU_WILL_LEARN.search(page.docstring + "\n")
    items = len(re.findall(r"^\s*[-*] ", m[1], re.M)) if m else 0
    if not 3 <= items <= 5:
        found.append(f"{page.name}.py: the docstring's 'You will learn' list has {items} "
                     "items (3 to 5)")
    if "Prerequisites" not in page.docstring:
        found.append(f"{page.name}.py: the docstring names no 'Prerequisites'")
    if not any(".. math::" in t for t in page.texts):
        found.append(f"{page.name}.py: no displayed equation ('.. math::')")
    return found


def findings(pattern=""):
    every = [read_page(p) for p in pages()]
    chosen = [p for p in every if re.search(pattern, p.name)]
    out = []
    for p in chosen:
        out += lesson_findings(p) + lift_findings(p)
    out += [f for f in copy_findings(every) if not pattern or re.search(pattern, f)]
    return out


if __name__ == "__main__":
    rows = findings(sys.argv[1] if len(sys.argv) > 1 else "")
    print("\n".join(rows) or "no findings")
    sys.exit(1 if rows else 0)
