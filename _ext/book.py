"""The Sphinx extension that wires the book's build-time hooks; pages stay plain PyTorch.

- ``recorder.py``: records the claims of a page while it runs (``reset_page``, below, starts
  and stops it around every page).
- ``rerun.py``: decides what runs again before sphinx-gallery runs the pages.
- ``report_pages.py``: writes the headline, the proof ledger and the environment page after,
  from the records of this build and those committed in ``verified/`` (``claim_files.py``).
- ``page_source.py``: a page's code cells and sections, the one parser of a page's layout.
- ``internals.py``: every reliance on a private or undocumented upstream internal.
"""

import gc
import json
import time
import warnings
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

import internals
import page_source
import recorder
import report_pages
import rerun

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]

# sphinx-gallery resolves names in the code (for links) by evaluating them after the page ran;
# `x.T` then meets whatever 4-D tensor `x` last held and torch warns about it. Not the page's
# code. Set here, not in conf.py: with parallel execution the pages run in worker processes,
# which import this module (for reset_page) but never read conf.py.
warnings.filterwarnings("ignore", message="The use of `x.T` on tensors", category=UserWarning,
                        module=r"sphinx_gallery\.")


def reset_page(gallery_conf, fname, when):
    """Before each page: reseed torch, house figure style, start recording; after: save claims."""
    import matplotlib as mpl
    import torch

    if when == "after":
        recorder.stop_recording()
        return
    _freeze_long_lived_objects()
    torch.manual_seed(0)
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.titlesize": "medium",
            "figure.constrained_layout.use": True,  # no clipped axis labels
            # White figures stay readable on furo's dark background.
            "figure.facecolor": "white",
            "savefig.facecolor": "white",
        }
    )
    if fname is not None:  # None when sphinx-gallery enters a folder, not a page
        src = _find_source(gallery_conf, fname)
        if src is not None:
            recorder.start_recording(src)


def _freeze_long_lived_objects():
    """Once per process: move what is alive now (Sphinx, torch, matplotlib) out of the GC's way.

    sphinx-gallery runs ``gc.collect()`` before every page, and Python's collector scans every
    tracked object each time: about 0.15 s per page with Sphinx and torch loaded (measured,
    issue 6). After ``gc.freeze()`` it scans only what was made since, i.e. the pages' objects,
    which are still collected as before. Nothing a page computes depends on it.
    """
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()


def _find_source(gallery_conf, fname):
    """The page's source file. sphinx-gallery passes only its name, so names must be unique."""
    found = [ROOT / folder / Path(fname).name for folder in gallery_conf["examples_dirs"]
             if (ROOT / folder / Path(fname).name).is_file()]
    if len(found) > 1:
        raise RuntimeError(f"two gallery pages are named {Path(fname).name}: "
                           f"{', '.join(map(str, found))}; give each page a unique file name")
    return found[0] if found else None


def _cell_ids(app, doctree):
    """On a gallery page: the id ``cell-n`` around its n-th code cell, which the ledger links to.

    sphinx-gallery writes each code block of the page as a ``Python`` literal block, in the
    order of its splitter (``page_source.code_cells``, which the ledger uses to find the cell
    holding a line); printed output is a literal block of another language.
    """
    parts = app.env.docname.split("/")
    if len(parts) != 3 or parts[0] != "generated":
        return
    source = ROOT / "gallery" / parts[1] / f"{parts[2]}.py"
    if not source.is_file():
        return
    blocks = [node for node in doctree.findall(nodes.literal_block)
              if node.get("language") == "Python"]
    cells = page_source.code_cells(source)
    if len(blocks) != len(cells):
        logger.warning(f"{len(blocks)} code blocks for {len(cells)} code cells of {source.name}: "
                       "the ledger's links would point at the wrong cells",
                       location=app.env.docname)
        return
    # The id goes on a container around the block: sphinx-gallery's code links replace the
    # literal block itself by a node of their own (a post-transform) that writes no id.
    for n, node in enumerate(blocks, 1):
        cell = nodes.container(ids=[f"cell-{n}"], classes=["code-cell"])
        node.replace_self(cell)
        cell += node


def _phase(name):
    """A Sphinx event handler that stamps the wall clock when the build reaches ``name``.

    ``make bench`` (``tools/bench.py``) splits the clean build into start-up, the pages (the
    gallery), and Sphinx's reading and writing with them; the stamps go to
    ``<build dir>/phases.json`` when the build finishes. Nothing else reads them.
    """

    def stamp(app, *args):
        _PHASES[name] = time.time()
        if name == "build finished":
            out = Path(app.outdir).parent / "phases.json"
            out.write_text(json.dumps(_PHASES, indent=1) + "\n")

    return stamp


_PHASES = {}


def _ledger_js(app, pagename, templatename, context, doctree):
    """Filters and sorting for the proof ledger (_ext/static/ledger.js), on that page only."""
    if pagename == "chapters/ledger":
        app.add_js_file("ledger.js", loading_method="defer")


def _ledger_css(app):
    """Serve _ext/static/ledger.css (the ledger's columns: stale greyed, failed red)."""
    app.config.html_static_path.append(str(ROOT / "_ext" / "static"))


def setup(app):
    # Sphinx makes millions of small objects (doctree nodes); Python's default GC thresholds
    # scan them again and again. Fewer young-generation collections: a clean build ~1.2 s
    # faster on 2 cores (19.1 -> 17.8 s, issue 6). Nothing a page computes depends on it.
    gc.set_threshold(50_000, 50, 100)
    app.connect("config-inited", _phase("sphinx started"), priority=0)
    app.connect("builder-inited", _phase("pages start"), priority=499)
    app.connect("builder-inited", _phase("pages done"), priority=501)
    app.connect("build-finished", _phase("build finished"))
    app.connect("config-inited", rerun.rerun_pages_on_a_new_machine)
    app.connect("config-inited", rerun.rerun_pages_without_a_current_record)
    app.connect("config-inited", rerun.forget_removed_pages)
    # After sphinx-gallery completes its configuration (10), before it runs the pages (500).
    app.connect("builder-inited", rerun.few_pages_run_in_process, priority=100)
    # sphinx-mathjax-offline 0.0.2 only copies MathJax into the output at build-finished, in the
    # main process, but does not say so; Sphinx then refuses to read and write in parallel (-j).
    internals.declare_parallel_safe(app, "sphinx-mathjax-offline")
    # After sphinx-gallery (500) ran the pages.
    app.connect("builder-inited", report_pages.write_report_pages, priority=900)
    app.connect("builder-inited", _ledger_css)
    app.add_css_file("ledger.css")
    app.connect("doctree-read", _cell_ids)
    app.connect("html-page-context", _ledger_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
