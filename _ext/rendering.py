"""How the gallery's pages render: a Sphinx extension (conf.py lists it as ``rendering``).

- ``# noqa`` comments are dropped from the code shown (the downloads keep them);
- every figure links to its 2x file (``image_srcset`` in conf.py), so a click enlarges it;
- the thumbnails of the chapters' grids (``minigallery``) get an alt text naming their page;
- the minigallery's "no backreferences_dir" message, and only it, is dropped.
"""

import logging
import re
from pathlib import PurePosixPath

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
    self.body[start:] = [f'<a class="book-figure" href="{href}" '
                         f'title="Open the figure at full size">{img}</a>']


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
    app.add_node(internals.figure_node(), override=True, html=(visit_figure, depart_figure))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
