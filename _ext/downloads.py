"""Downloads a reader can open: no Sphinx role in a page's ``.py``, ``.ipynb`` or ``.zip``.

A page's text blocks are reStructuredText with Sphinx roles (``:doc:``, ``:measured:``,
``:class:`` ...). On the site they become links, numbers and code; in the downloaded script
and notebook they would stay raw (sphinx-gallery converts only ``:math:`` and ``:ref:``),
and Jupyter shows ``:doc:`/generated/...``` as garbled text. After the build has copied the
downloads (``build-finished``), each role in them is written out as what it shows:

- ``:doc:`title <target>``` and ``:doc:`target``` -> the page's title, in quotes, with
  where it lives on the site (``"RoPE: rotary position embeddings" (positional/plot_04_rope)``);
- ``:measured:`name:spec``` -> the number this build printed (as on the page);
- ``:class:`~torch.nn.X```, ``:func:``, ``:meth:``, ``:mod:``, ``:attr:`` -> the name as code
  (the last part after ``~``);
- ``:math:`x``` (left in scripts) -> ``$x$``;
- ``:footcite:p:`Key1,Key2``` -> each work named in plain text, from ``references.bib``
  (``(Su et al., 2021, arXiv:2104.09864)``); ``:footcite:t:`Key``` -> its authors, then the
  rest (``Su et al. (2021, arXiv:2104.09864)``); a work without an arXiv ID is named by its
  DOI (``doi:10.1080/...``), else its URL. The ``.. footbibliography::`` directive that
  lists them on the site is dropped, as is an ``.. index::`` entry (the site's search);
- any other role -> its text.

Only the copies under ``_build/html/_downloads`` change: the sources, and the copies
sphinx-gallery keeps in ``generated/`` (whose checksums decide whether a page runs again),
stay as written. ``tests/test_downloads.py`` checks every download of the site.
"""

import functools
import io
import json
import re
import zipfile
from pathlib import Path

import measured

ROLE = re.compile(r":(?P<role>[a-z]+(?::[a-z]+)?):`(?P<text>[^`]*)`")
TITLED = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
CODE_ROLES = {"class", "func", "meth", "mod", "attr", "obj", "data", "exc",
              "py:class", "py:func", "py:meth", "py:mod", "py:attr", "py:obj"}


# Directives that show nothing a download can: a bibliography's list, an index entry.
FOOTBIB = re.compile(r"^(#? ?)\.\. (footbibliography|index)::.*\n?", re.M)


@functools.cache
def bibliography():
    """key -> ("Su et al.", "2021, arXiv:2104.09864"), from the book's references.bib: who,
    then when and where (arXiv ID, else DOI, else URL)."""
    from pybtex.database import parse_file

    works = {}
    for key, entry in parse_file(measured.ROOT / "references.bib").entries.items():
        people = entry.persons.get("author", [])
        names = [" ".join(p.last_names).replace("{", "").replace("}", "") for p in people]
        etal = len(names) > 2 or names[-1:] == ["others"]  # "A and others": more than two
        who = (key if not names else f"{names[0]} et al." if etal
               else " and ".join(names))
        fields = entry.fields
        where = (f"arXiv:{fields['eprint']}" if "eprint" in fields
                 else f"doi:{fields['doi']}" if "doi" in fields else fields.get("url", ""))
        works[key] = (who, ", ".join(p for p in (fields["year"], where) if p))
    return works


def cite(role, keys):
    """A :footcite: role's works in plain text: ``p`` (the default) names each in
    parentheses, ``t`` puts the authors in the sentence."""
    works = [bibliography()[k.strip()] for k in keys.split(",")]
    if role.endswith(":t"):
        return "; ".join(f"{who} ({rest})" for who, rest in works)
    return "(" + "; ".join(f"{who}, {rest}" for who, rest in works) + ")"


def _doc_target(target, here):
    """A :doc: target as a docname: absolute (``/x/y``) or relative to ``here``."""
    if target.startswith("/"):
        return target[1:]
    return str(Path(here).parent / target)


def _docname(page):
    """``generated/<chapter>/<page>`` of a gallery page, else ``index``."""
    sources = sorted(measured.ROOT.glob(f"gallery/*/{page}.py")) if page else []
    return f"generated/{sources[0].parent.name}/{page}" if len(sources) == 1 else "index"


def rewrite(text, titles, page=None, markdown=False):
    """``text`` with every role written out; ``titles``: docname -> title; ``page``: the
    gallery page whose own ``:measured:`name``` the text may quote, and relative
    ``:doc:`` targets start from."""
    here = _docname(page)

    def one(match):
        role, body = match["role"], match["text"]
        if role == "doc":
            m = TITLED.match(body)
            target = _doc_target(m["target"] if m else body, here)
            shown = m["title"] if m else titles.get(target, target)
            where = target.removeprefix("generated/")
            return f'"{shown}" ({where})' if shown != where else f"({where})"
        if role == "measured":
            m = measured.SYNTAX.fullmatch(body.strip())
            value, _ = measured.lookup(m["page"] or page, m["name"])
            return measured.format_value(value, m["spec"])
        if role in CODE_ROLES:
            name = body[1:].rsplit(".", 1)[-1] if body.startswith("~") else body
            return f"`{name}`" if markdown else f"``{name}``"
        if role == "math":
            return f"${body}$"
        if role.startswith("footcite"):
            return cite(role, body)
        m = TITLED.match(body)
        return m["title"] if m else body

    return FOOTBIB.sub("", ROLE.sub(one, text))


def rewrite_notebook(raw, titles, page):
    nb = json.loads(raw)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = rewrite("".join(cell["source"]), titles, page, markdown=True)
    return json.dumps(nb, indent=2)


def rewrite_file(name, data, titles):
    """The bytes of a download ``name`` with its roles written out."""
    page = Path(name).stem
    if name.endswith(".ipynb"):
        return rewrite_notebook(data.decode(), titles, page).encode()
    if name.endswith(".py"):
        return rewrite(data.decode(), titles, page).encode()
    if name.endswith(".zip"):
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, \
                zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                dst.writestr(info, rewrite_file(info.filename, src.read(info), titles))
        return out.getvalue()
    return data


def rewrite_downloads(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    titles = {doc: node.astext() for doc, node in app.env.titles.items()}
    for path in sorted(Path(app.outdir, "_downloads").glob("*/plot_*.*")):
        data = path.read_bytes()
        new = rewrite_file(path.name, data, titles)
        if new != data:
            path.write_bytes(new)


def setup(app):
    app.connect("build-finished", rewrite_downloads)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
