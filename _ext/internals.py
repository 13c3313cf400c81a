"""Every place the build relies on something its upstream does not promise to keep.

Private names (a leading underscore), undocumented behaviour and implementation details of
Sphinx, sphinx-gallery, PyTorch and CPython, each wrapped here and nowhere else, so that an
upgrade that removes one fails in one known place. ``tests/test_internals.py`` checks each of
them against the pinned versions and fails naming the reliance when an upgrade changes it.

1. sphinx-gallery's splitter of a page into text and code blocks
   (``py_source_parser.split_code_and_text_blocks``: public module, undocumented function).
2. sphinx-gallery's md5 record of a page, ``<gallery dir>/<page>.py.md5`` with
   ``utils.get_md5sum(src, mode="t")`` in it: a page whose record is missing or differs
   runs again (undocumented).
3. sphinx-gallery compiles each code block of a page with a ``codeop.Compile`` instance
   (``gen_rst``, undocumented); the recorder wraps ``codeop.Compile.__call__`` (CPython's
   class, not meant to be patched) while a page runs.
4. sphinx-gallery's figure node and its HTML visitor (``directives.imgsgnode``,
   ``visit_imgsg_html``) and the private ``directives._parse_srcset``.
5. The wording of one sphinx-gallery warning (the minigallery's "resolve all inputs as
   file"), dropped by the logger's name ``sphinx.sphinx-gallery``.
6. PyTorch's private ``torch.testing._comparison.default_tolerances``: the tolerances
   ``assert_close`` applies when a call gives none (recorded in the ledger).
7. Sphinx's ``Extension`` objects in ``app.extensions`` and their ``parallel_read_safe`` /
   ``parallel_write_safe`` attributes, set for an extension that does not declare them.
8. CPython's ``sys._getframe``: the line and globals of the page's code calling a check.
9. sphinx-design's dropdown as a doctree node: ``shared.create_component("dropdown", ...)``
   with the fields its ``dropdown`` directive sets (undocumented), which its post-transform
   turns into ``<details>`` (the collapsed proofs and answers, ``anatomy.py``).
10. The comment sphinx-gallery writes before each block of a page's reST, "GENERATED FROM
    PYTHON SOURCE LINES a-b" (undocumented): where an exercise's prompt ends.
11. Where Sphinx's search keeps each page's index entries: the private
    ``env._search_index_index_entries`` (docname -> ``[(entry, target id, main)]``), which
    it fills only for the pages it writes, after the environment is saved: a rebuild lists
    only the rewritten pages' entries (sphinx-doc/sphinx#12599, open in Sphinx 9.0).
"""

import codeop
import sys
from pathlib import Path

# 1 ---------------------------------------------------------------------------------------


class NotAGalleryPage(ValueError):
    """sphinx-gallery refuses the file as a page (it has no docstring)."""


def split_page(path):
    """``[(label, content, first line), ...]``: sphinx-gallery's blocks of the page at ``path``,
    ``label`` ``"text"`` or ``"code"``, in the order it renders them."""
    from sphinx.errors import ExtensionError
    from sphinx_gallery.py_source_parser import split_code_and_text_blocks

    try:
        return split_code_and_text_blocks(str(path))[1]
    except ExtensionError as error:  # sphinx-gallery would not run it either
        raise NotAGalleryPage(str(error)) from None


# 2 ---------------------------------------------------------------------------------------


MD5_SUFFIX = ".md5"


def md5_record(gallery_dir, src):
    """The file where sphinx-gallery keeps the md5 of page ``src`` it last ran."""
    return Path(gallery_dir) / f"{Path(src).name}{MD5_SUFFIX}"


def md5_of(src):
    """What sphinx-gallery writes in that file for the page's current text."""
    from sphinx_gallery.utils import get_md5sum

    return get_md5sum(src, mode="t")


# 3 ---------------------------------------------------------------------------------------


def patch_block_compiler(transform, filename):
    """While a page runs: compile its blocks (those of ``filename``) as ``transform(tree)``.

    Returns the function that undoes the patch.
    """
    import ast
    import copy

    compile_block = codeop.Compile.__call__

    def transforming_compile(self, source, file, symbol, *args, **kwargs):
        if file == filename:
            tree = ast.parse(source, file) if isinstance(source, str) else copy.deepcopy(source)
            source = transform(tree)
        return compile_block(self, source, file, symbol, *args, **kwargs)

    codeop.Compile.__call__ = transforming_compile

    def undo():
        codeop.Compile.__call__ = compile_block

    return undo


# 4 ---------------------------------------------------------------------------------------


def figure_node():
    """sphinx-gallery's figure node class (its ``<img srcset=...>``)."""
    from sphinx_gallery.directives import imgsgnode

    return imgsgnode


def visit_figure_html(translator, node):
    """sphinx-gallery's own HTML for a figure node."""
    from sphinx_gallery.directives import visit_imgsg_html

    return visit_imgsg_html(translator, node)


def parse_srcset(srcset):
    """``{scale: path}`` of a figure node's ``srcset`` (e.g. ``{0: 'a.png', 2.0: 'a_2x.png'}``)."""
    from sphinx_gallery.directives import _parse_srcset

    return _parse_srcset(srcset)


# 5 ---------------------------------------------------------------------------------------

GALLERY_LOGGER = "sphinx.sphinx-gallery"
MINIGALLERY_GLOBS = "directive will resolve all inputs as file"


# 6 ---------------------------------------------------------------------------------------


def default_tolerances(actual, expected):
    """``(rtol, atol)`` that ``torch.testing.assert_close`` uses for these two tensors."""
    from torch.testing._comparison import default_tolerances as tolerances

    return tolerances(actual, expected)


# 7 ---------------------------------------------------------------------------------------


def declare_parallel_safe(app, name):
    """Mark the loaded extension ``name`` safe to read and write in parallel (if loaded)."""
    extension = app.extensions.get(name)
    if extension is not None:
        extension.parallel_read_safe = extension.parallel_write_safe = True
    return extension


# 8 ---------------------------------------------------------------------------------------


def caller_frame(depth=1):
    """The frame ``depth`` calls above the function calling this one (1: its caller)."""
    return sys._getframe(depth + 1)


# 9 ---------------------------------------------------------------------------------------


def dropdown(title, children, classes=()):
    """sphinx-design's dropdown, closed, titled ``title`` (inline nodes), holding ``children``:
    what ``.. dropdown:: title`` builds, rendered as ``<details>`` by sphinx-design."""
    from docutils import nodes
    from sphinx_design.shared import create_component

    node = create_component("dropdown", opened=False, type="dropdown", has_title=True,
                            icon=None, chevron=None, container_classes=["sd-mb-3", *classes],
                            title_classes=[], body_classes=[])
    node += nodes.rubric("", "", *title)
    node.extend(children)
    return node


# 10 --------------------------------------------------------------------------------------

BLOCK_MARKER = "GENERATED FROM PYTHON SOURCE LINES"


# 11 --------------------------------------------------------------------------------------


def search_index_entries(env):
    """The index entries Sphinx's search will list: docname -> ``[(entry, target id, main)]``
    (``main`` is ``"main"`` for ``.. index:: ! name``), read when it writes searchindex.js."""
    return env._search_index_index_entries
