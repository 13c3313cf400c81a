"""A gallery page's parts, as sphinx-gallery splits it: its code cells and its sections.

The one parser of a page's layout, used by every module that needs it: the recorder (the
section a claim sits under, ``recorder.py``), the ledger (the cell holding a claim's line,
``report_pages.py``) and the extension (the id ``cell-n`` on the n-th code block rendered,
``book.py``). It is sphinx-gallery's own splitter (``internals.split_page``), so the cells are
those it renders, in its order. (The mutation sweep reads pages with ``ast`` only: it needs
statements, not cells.)
"""

import re
from pathlib import Path

import internals

UNDERLINE = re.compile(r"[-=^~]{3,}")


def code_cells(source):
    """``[(first, last), ...]``: the lines of the page's source that each code cell shows.

    The n-th ``Python`` code block of the generated page (1-based) is cell ``n``. Blank lines
    around a cell are left out. A page that is not here, or is no gallery page, has no cells.
    """
    cells = []
    if not Path(source).is_file():  # a record of a page that is not here: no cells to link to
        return cells
    try:
        blocks = internals.split_page(source)
    except internals.NotAGalleryPage:
        return cells
    for label, content, start in blocks:
        if label == "code":
            lines = [i for i, text in enumerate(content.split("\n")) if text.strip()]
            cells.append((start + lines[0], start + lines[-1]))
    return cells


def cell_of(cells, line):
    """(n, first, last) of the cell holding ``line`` (1-based n), or None."""
    for n, (first, last) in enumerate(cells, 1):
        if first <= line <= last:
            return n, first, last
    return None


def sections(source):
    """``{line: heading}`` for every line of the page: the section heading it sits under.

    A heading is a line of a text block underlined with ``-``, ``=``, ``^`` or ``~``; the
    page's title (its docstring, the first block) is not a section: lines before the first
    heading have ``""``.
    """
    heads = {}
    try:
        blocks = internals.split_page(source)
    except internals.NotAGalleryPage:  # a script run with the recorder (tests): no sections
        blocks = []
    for n, (label, content, start) in enumerate(blocks):
        if label != "text" or n == 0:
            continue
        lines = content.split("\n")
        for i, (line, below) in enumerate(zip(lines, lines[1:])):
            if line.strip() and UNDERLINE.fullmatch(below.strip()) \
                    and not UNDERLINE.fullmatch(line.strip()):
                heads[start + i] = line.strip()
    out, current = {}, ""
    for line in range(1, len(Path(source).read_text().splitlines()) + 1):
        current = heads.get(line, current)
        out[line] = current
    return out
