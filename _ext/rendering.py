"""How the gallery's pages render: a Sphinx extension (conf.py lists it as ``rendering``).

- ``# noqa`` comments are dropped from the code shown (the downloads keep them);
- every figure links to its 2x file (``image_srcset`` in conf.py), so a click enlarges it;
- every figure keeps the width at which its smallest text shows at 9 px (from the build's
  record of its fonts): on a phone a wider figure scrolls sideways, as code does;
- the thumbnails of the chapters' grids (``minigallery``) get an alt text naming their page;
- the minigallery's "no backreferences_dir" message, and only it, is dropped;
- a page's topics (``.. index:: ! RoPE`` in its docstring) lead the search to the page itself.
"""

import json
import logging
import math
import re
from pathlib import Path, PurePosixPath

import internals

# A linter's "noqa" comment is for the linter, not for the reader: it is dropped from the
# code shown on the generated pages (the downloadable .py and .ipynb keep it).
NOQA = re.compile(r"[ \t]+# noqa\b[^\n]*$", re.MULTILINE)


def strip_noqa(app, docname, source):
    if docname.startswith("generated/"):
        source[0] = NOQA.sub("", source[0])


def visit_figure(self, node):
    """sphinx-gallery's <img srcset=...>, wrapped in a link to its largest source."""
    if node["srcset"] is None:
        return internals.visit_figure_html(self, node)
    start = len(self.body)
    internals.visit_figure_html(self, node)
    srcset = internals.parse_srcset(node["srcset"])
    largest = PurePosixPath(srcset[max(srcset)]).name
    img = "".join(self.body[start:])
    # the <img>'s own src is "<relative dir>/<file>": the 2x file lies in the same folder
    src = re.search(r'src="([^"]*)"', img).group(1)
    href = src.rsplit("/", 1)[0] + "/" + largest
    width = readable_width(self.builder.srcdir, node["uri"])
    style = f' style="--book-min-width: {width}px"' if width else ""
    self.body[start:] = [f'<a class="book-figure" href="{href}"{style} '
                         f'title="Open the figure at full size">{img}</a>']


MIN_TEXT_PX = 9  # the smallest text a figure may show (tests/test_browser_figures.py)
FIGURE = re.compile(r"generated/(\w+)/images/sphx_glr_(\w+)_(\d{3})\.\w+$")


def readable_width(srcdir, uri):
    """The width (CSS px) below which figure ``uri``'s smallest tick label or legend would
    show under MIN_TEXT_PX: a font of ``pt`` points in a figure ``width_in`` inches wide
    shows at ``pt / 72 * shown / width_in`` px. None without the build's record."""
    match = FIGURE.search(uri)
    if not match:
        return None
    record = Path(srcdir) / "generated" / match[1] / f"{match[2]}.figures.json"
    figures = json.loads(record.read_text()) if record.is_file() else []
    n = int(match[3]) - 1  # sphx_glr_<page>_001.png is the first figure the page saved
    if n >= len(figures):
        return None
    points = [figures[n][k] for k in ("tick_pt", "legend_pt") if figures[n].get(k)]
    if not points:
        return None
    return math.ceil(MIN_TEXT_PX * 72 * figures[n]["width_in"] / min(points))


def depart_figure(self, node):
    pass


THUMB = re.compile(r"generated/(\w+)/images/thumb/sphx_glr_(\w+)_thumb\.\w+$")


def thumbnail_alt(app, doctree, docname):
    """The chapters' grids of pages (minigallery) give their thumbnails an empty alt: name the
    page the thumbnail stands for."""
    from docutils import nodes

    for img in doctree.findall(nodes.image):
        match = THUMB.search(img.get("uri", ""))
        if match and not img.get("alt"):
            title = app.env.titles.get(f"generated/{match[1]}/{match[2]}")
            img["alt"] = f"Thumbnail of: {title.astext()}" if title else match[2]


def search_entries(entries):
    """What Sphinx's search indexes of a page's index entries, as it does (``IndexBuilder.feed``)
    but with no target: a result found by its entry is the page itself, which the search then
    lists once (with the entry's target, ``#index-0``, it listed the page twice, once at an
    empty anchor it could not quote)."""
    from sphinx.util.index_entries import split_index_msg

    found = set()
    for kind, value, _target, main, _key in entries:
        try:
            names = split_index_msg(kind, value)
        except ValueError:
            continue
        found |= {(name, "", main) for name in names}
    return sorted(found)


def page_topics_in_search(app, doctree, docname):
    """A page being written: its index entries, without their targets, are what the search
    indexes (the page is indexed after this event); the general index keeps the targets."""
    from sphinx import addnodes

    for node in doctree.findall(addnodes.index):
        node["entries"] = [(kind, value, "", main, key)
                           for kind, value, _target, main, key in node["entries"]]


def every_pages_topics_in_search(app, builder):
    """Before the pages are written: the index entries of every page, from the index domain
    (kept with the environment), for the search. Sphinx itself lists only those of the pages
    it writes in this build (``internals.search_index_entries``), so after editing one page
    every other page's topics dropped out of the search."""
    env = builder.env
    if not getattr(builder, "search", False):
        return
    indexed = internals.search_index_entries(env)
    for docname, entries in env.domains.index_domain.entries.items():
        # the pages the search indexes: those with a title, not marked ":nosearch:"
        meta = env.metadata.get(docname, {})
        title = env.titles.get(docname)
        if title and title.astext() and not {"nosearch", "no-search"} & set(meta):
            indexed[docname] = search_entries(entries)


class _MinigalleryGlobs(logging.Filter):
    def filter(self, record):
        return internals.MINIGALLERY_GLOBS not in record.getMessage()


def setup(app):
    # The parts and the landing page show their pages as cards (`.. minigallery::`, _ext/parts.py).
    # With no backreferences_dir, sphinx-gallery warns on every minigallery that it reads its
    # arguments as file globs, which is what they are: that one message is dropped, and every
    # other sphinx-gallery warning still fails the build.
    logging.getLogger(internals.GALLERY_LOGGER).addFilter(_MinigalleryGlobs())

    app.connect("source-read", strip_noqa)
    app.connect("doctree-resolved", thumbnail_alt)
    # A page declares its topics as main index entries (`.. index:: ! RoPE`), which Sphinx's
    # search ranks above any title: the page that teaches a topic is listed first.
    app.connect("write-started", every_pages_topics_in_search)
    app.connect("doctree-resolved", page_topics_in_search)
    app.add_node(internals.figure_node(), override=True, html=(visit_figure, depart_figure))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
