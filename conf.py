"""Sphinx configuration: one executable textbook, built and verified by `make html`.

Gallery sources live in gallery/<chapter>/plot_NN_topic.py; sphinx-gallery executes them and
writes generated/<chapter>/ (ignored by git), which the chapter pages in chapters/ link to.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT / "_ext"))

import repository  # noqa: E402  (_ext/repository.py: the checkout's public remote, if any)

# The landing page's "clone ..." links the repository when the checkout's origin is public.
rst_epilog = f"\n.. |clone| replace:: {repository.clone_sentence(repository.remote_of(ROOT))}\n"

project = "Transformer Building Blocks, Verified"
author = "The authors"
copyright = "2026, the authors"

extensions = [
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # serves MathJax 3 from _static/mathjax: no CDN
    "sphinx_gallery.gen_gallery",
    "myst_nb",
    "sphinx_copybutton",
    "sphinx_design",  # dropdowns: the collapsed proofs and answers (_ext/anatomy.py)
    "book",  # _ext/book.py: records claims, writes the ledger; decides what runs again
    "rendering",  # _ext/rendering.py: figure links, thumbnails' alt text, no linter comments shown
    "measured",  # _ext/measured.py: the :measured: role, numbers in prose from a page's run
    "anatomy",  # _ext/anatomy.py: "Proof:" sections and "Try it:" answers folded, one click away
    "sphinxcontrib.bibtex",  # references.bib, cited per page (:footcite:, .. footbibliography::)
    "parts",  # _ext/parts.py: the chapters' parts: reading time, cards, toctree in reading order
    "downloads",  # _ext/downloads.py: no Sphinx role left in a page's .py/.ipynb/.zip download
]

root_doc = "index"
exclude_patterns = [
    "_build",
    ".venv",
    "README.md",
    "verified",  # committed claim records of other machines (JSON), merged into the ledger
    "gallery",
    "tests",
    "tools",  # the sweep, the bench, the test runners: tools/sweep/README.md is no page
    "jupyter_execute",
    ".pytest_cache",
    # sphinx-gallery writes a notebook beside every generated page; myst-nb would read it as a
    # second source for the same page. The notebooks are downloads, not sources.
    "generated/**/*.ipynb",
    # sphinx-gallery's own thumbnail index: the chapter pages in chapters/ take its place.
    "generated/*/index.rst",
    # Tables the build writes for chapters/ledger.md and chapters/environment.md to include.
    "generated/*.md",
]

# Warnings are errors (-W in the Makefile); nitpicky (-n) flags every unresolved reference.
nitpicky = True

# ---------------------------------------------------------------------------------------------
# sphinx-gallery: one gallery folder per chapter.
CHAPTERS = sorted(p.name for p in (ROOT / "gallery").iterdir()
                  if p.is_dir() and not p.name.startswith("."))  # not .ruff_cache

sphinx_gallery_conf = {
    "examples_dirs": [f"gallery/{c}" for c in CHAPTERS],
    "gallery_dirs": [f"generated/{c}" for c in CHAPTERS],
    # `make html PAGE=batchnorm` executes only matching pages (unchanged pages are cached anyway).
    "filename_pattern": os.environ.get("PAGE") or r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    # Before every page: reseed torch, house figure style, record its claims (_ext/book.py).
    "reset_modules": ("matplotlib", "book.reset_page"),
    "reset_modules_order": "both",  # after each page, book.reset_page saves the page's claims
    "image_scrapers": ("matplotlib",),
    # Every figure also at twice its pixels (a 2x source in srcset): sharp on high-density
    # screens, and the file a click on the figure opens (setup() below).
    "image_srcset": ["2x"],
    "remove_config_comments": True,
    "min_reported_time": 0,
    "download_all_examples": False,
    "show_memory": False,
    # Run pages in as many worker processes as Sphinx's -j (the Makefile passes -j $(JOBS),
    # at most 4 by default). joblib gives each worker cpu_count // workers threads (its
    # OMP_NUM_THREADS), so torch in two workers on two cores does not oversubscribe them.
    "parallel": True,
    "capture_repr": (),
    # A failing claim fails the build, after every page has been tried.
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    "first_notebook_cell": None,
    # Its sg_execution_times pages load jQuery and DataTables from CDNs; the environment page
    # (chapters/environment.md) shows the same timings from the per-page .cost.json records.
    "write_computation_times": False,
}

# ---------------------------------------------------------------------------------------------
# myst-nb: MyST markdown pages (*.md). Never the gallery's .ipynb files (excluded above).
# Nothing is executed in a Jupyter kernel: sphinx-gallery runs the pages in the build's own
# process, and the pages about the build (ledger, environment) are written from its records.
# Two kernels cost about 2 s each on every build (measured, issue 6).
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]

# ---------------------------------------------------------------------------------------------
# HTML
html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_js_files = ["book_search.js"]  # search snippets: math without its \( \) delimiters
html_favicon = "_static/favicon.svg"  # a check mark; also spares browsers a 404 for /favicon.ico
html_show_sourcelink = False
html_theme_options = {
    "source_repository": "",
    "navigation_with_keys": True,
}
# Code colours with at least 4.5:1 contrast on their background for every token (WCAG AA):
# "friendly" had comments at 2.6:1; monokai's lowest is 4.6:1 (accessible-pygments is pinned).
pygments_style = "a11y-high-contrast-light"
pygments_dark_style = "monokai"

# Copy only the code, never the prompt or the printed output.
copybutton_exclude = ".linenos, .gp, .go"

# ---------------------------------------------------------------------------------------------
# Links into PyTorch's documentation, offline (begin; see _ext/torch_links.py)
#
# Every PyTorch API the book names links to its page on docs.pytorch.org: in the chapters'
# prose through roles (:class:`torch.nn.LayerNorm`, :func:`torch.testing.assert_close`), in the
# gallery's code through sphinx-gallery's code links, and in the gallery's prose where a literal
# is exactly an API name (``torch.polar``, ``nn.LayerNorm``). All three resolve against an
# intersphinx inventory. Intersphinx would download PyTorch's objects.inv, but the build must
# work without network, so the `torch` inventory is a local file written before every build
# from _ext/torch_inventory.txt: a reviewable list of (name, role, page#anchor), each checked
# against PyTorch's doc sources (the list says how). Nitpicky mode (-n -W) is the guard: a role
# naming an API missing from the list fails the build. tests/test_torch_links.py checks the
# links in the built site against the list.
import torch_links  # noqa: E402  (_ext/ is on sys.path, above)

extensions += ["sphinx.ext.intersphinx", "torch_links"]
TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"
torch_inventory = str(ROOT / "_ext" / "torch_inventory.txt")
torch_inventory_digest = torch_links.digest(torch_inventory)  # list changed: re-read every page
TORCH_INV = torch_links.write_inventory(torch_inventory, ROOT / "_build" / "torch.inv")
# (where links point, where the inventory is read from: a local file, never a URL)
intersphinx_mapping = {"torch": (TORCH_DOCS, str(TORCH_INV))}
# Links into PyTorch's documentation, offline (end)

# ---------------------------------------------------------------------------------------------
# References: one references.bib; every chapter, part and page cites with :footcite:p: and ends
# with its own ``.. footbibliography::`` (per-document lists, no duplicate citations). An arXiv
# entry's ``eprint`` renders as a link to arxiv.org, its ``url`` or ``doi`` likewise.
bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "unsrt"
