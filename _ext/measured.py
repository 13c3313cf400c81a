"""Numbers in prose that come from a page's output: the ``:measured:`` role.

A sentence that quotes what a page measured names the value instead of copying it:

- in a chapter, ``:measured:`plot_08_batchnorm_practice.fold_err_conv:.1e``` writes the
  value of ``fold_err_conv``, a module-level name of that page, when the page last ran;
- in a page's own text blocks, ``:measured:`fold_err_conv:.1e``` (the page is implied).

After the second colon comes a Python format spec (default ``.3g``); exponents are written
short, ``1.7e-7``. The recorder keeps each page's module-level numbers in its claim record
(``recorder.py``: ``values``); a page that runs again with another result changes the
sentence (the chapter depends on the record, so it is read again). The build fails, naming
the file and line, when the page has no record, has no such name, or assigns the name more
than once or in a loop (which of the values would the sentence mean?).
"""

import ast
import functools
import json
import re
from pathlib import Path

from docutils import nodes

ROOT = Path(__file__).resolve().parents[1]
SYNTAX = re.compile(r"(?:(?P<page>plot_\w+)\.)?(?P<name>[A-Za-z_]\w*)(?::(?P<spec>.*))?")
DEFAULT_SPEC = ".3g"


def format_value(value, spec=DEFAULT_SPEC):
    """``format(value, spec)``, with exponents written short: ``1.7e-07`` -> ``1.7e-7``."""
    text = format(value, spec or DEFAULT_SPEC)
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m[1].replace("+", "") + m[2], text)


def bindings(tree, name):
    """``[(line, in_loop)]``: where a module binds ``name`` outside functions and classes."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)
    found = []

    def visit(node, in_loop):
        if isinstance(node, scopes):
            if getattr(node, "name", None) == name:
                found.append((node.lineno, in_loop))
            return
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, in_loop))
        in_loop = in_loop or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        for child in ast.iter_child_nodes(node):
            visit(child, in_loop)

    visit(tree, False)
    return found


@functools.lru_cache(maxsize=None)
def _read(path, mtime_ns):
    return json.loads(Path(path).read_text())


def lookup(page, name):
    """``(value, record path)`` of a page's recorded number; ``ValueError`` saying why not."""
    sources = sorted(ROOT.glob(f"gallery/*/{page}.py"))
    if len(sources) != 1:
        raise ValueError(f"no gallery page {page}.py" if not sources else
                         f"two gallery pages named {page}.py")
    source = sources[0]
    record = ROOT / "generated" / source.parent.name / f"{page}.claims.json"
    where = bindings(ast.parse(source.read_text()), name)
    if not where:
        raise ValueError(f"{page}.py binds no module-level name {name!r}")
    if len(where) > 1 or where[0][1]:
        lines = ", ".join(f"{line}{' (in a loop)' * loop}" for line, loop in where)
        raise ValueError(f"{page}.py binds {name!r} more than once or in a loop (line"
                         f"{'s' * (len(where) > 1)} {lines}): quote a name bound once, "
                         "outside loops")
    if not record.is_file():
        raise ValueError(f"{page} has no claim record: run it (make html PAGE={page})")
    values = _read(str(record), record.stat().st_mtime_ns).get("values", {})
    if name not in values:
        raise ValueError(f"{name!r} was not a number (int, float or 0-dim tensor) when "
                         f"{page} ended")
    return values[name], record


def measured_role(role, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    match = SYNTAX.fullmatch(text.strip())
    page = match and (match["page"] or _page_of(env.docname))
    try:
        if match is None:
            raise ValueError("write :measured:`page.name:spec`, or :measured:`name:spec` in "
                             "the page's own text")
        if page is None:
            raise ValueError("name the page outside a gallery page: "
                             f":measured:`plot_NN_topic.{match['name']}`")
        value, record = lookup(page, match["name"])
        shown = format_value(value, match["spec"])
    except ValueError as err:  # a wrong format spec is a ValueError too
        msg = inliner.reporter.error(f":measured:`{text}`: {err}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    env.note_dependency(str(record))  # the page runs again: this document is read again
    return [nodes.inline(rawtext, shown, classes=["measured"])], []


def _page_of(docname):
    """The page a gallery document shows (``generated/<chapter>/<page>``), else None."""
    parts = docname.split("/")
    return parts[2] if len(parts) == 3 and parts[0] == "generated" else None


def setup(app):
    app.add_role("measured", measured_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
