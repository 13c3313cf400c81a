"""Each reliance of the build on an upstream internal (``_ext/internals.py``) still holds.

An upgrade of Sphinx, sphinx-gallery, PyTorch or Python that removes or changes one fails
here, naming it, rather than somewhere in a build (a ledger pointing at the wrong cells, a
claim not counted, a figure without its link).
"""

import ast
import codeop
import inspect
import sys

import pytest

from conftest import GALLERY_PAGES, ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import internals  # noqa: E402
import page_source  # noqa: E402

PAGE = '''"""
Title
=====

Intro.
"""

# %%
# Setup
# -----
import math

x = 1

# %%
# A section
# ---------
# Text.

y = math.sqrt(x)
assert y == 1
'''


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "plot_01_tiny.py"
    path.write_text(PAGE)
    return path


def test_1_the_splitter_gives_text_and_code_blocks_with_their_first_line(page):
    blocks = internals.split_page(page)
    assert [label for label, _, _ in blocks] == ["text", "text", "code", "text", "code"]
    lines = PAGE.splitlines()
    for label, content, start in blocks:
        if label == "code":  # the block's text is the page's, from its first line on
            first = next(text for text in content.split("\n") if text.strip())
            assert first in lines[start - 1:start + 2]


def test_cells_and_sections_come_from_the_splitter(page):
    assert page_source.code_cells(page) == [(11, 13), (20, 21)]
    assert page_source.cell_of(page_source.code_cells(page), 21) == (2, 20, 21)
    assert page_source.cell_of(page_source.code_cells(page), 16) is None
    sections = page_source.sections(page)
    assert (sections[2], sections[11], sections[16], sections[21]) == (
        "", "Setup", "A section", "A section")


@pytest.mark.parametrize("path", GALLERY_PAGES[:1] + GALLERY_PAGES[-1:], ids=lambda p: p.stem)
def test_every_claim_of_a_real_page_sits_in_a_cell_and_a_section(path):
    import claims

    text = path.read_text()
    cells = page_source.code_cells(path)
    sections = page_source.sections(path)
    sites = claims.claim_sites(ast.parse(text), lambda n: ast.get_source_segment(text, n))
    assert sites
    for line in sites:
        assert page_source.cell_of(cells, line) is not None, (path.name, line)
        assert sections[line], (path.name, line)


def test_2_the_md5_record_is_where_sphinx_gallery_writes_it(tmp_path):
    import sphinx_gallery.gen_rst as gen_rst

    src = tmp_path / "plot_x.py"
    src.write_text("print(1)\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / src.name).write_text(src.read_text())  # sphinx-gallery's copy of the page
    record = internals.md5_record(out, src)
    assert record == out / "plot_x.py.md5"
    record.write_text(internals.md5_of(src))
    # sphinx-gallery's own check reads the same file and the same hash
    assert gen_rst.md5sum_is_current(out / src.name, mode="t"), \
        "sphinx-gallery no longer keeps a page's md5 in <page>.py.md5"
    record.write_text("0" * 32)
    assert not gen_rst.md5sum_is_current(out / src.name, mode="t")


def test_3_sphinx_gallery_compiles_blocks_with_codeop_and_the_patch_applies():
    import sphinx_gallery.gen_rst as gen_rst

    assert "codeop.Compile()" in inspect.getsource(gen_rst), \
        "sphinx-gallery no longer compiles a page's blocks with codeop.Compile"
    seen = []

    def transform(tree):
        seen.append(type(tree).__name__)
        return tree

    undo = internals.patch_block_compiler(transform, "page.py")
    try:
        code = codeop.Compile()("x = 1", "page.py", "exec")
        codeop.Compile()("x = 2", "other.py", "exec")
    finally:
        undo()
    assert seen == ["Module"]
    namespace = {}
    exec(code, namespace)
    assert namespace["x"] == 1
    codeop.Compile()("x = 3", "page.py", "exec")
    assert seen == ["Module"], "the patch was not undone"


def test_4_figure_node_visitor_and_srcset_parser():
    from sphinx_gallery import directives

    assert issubclass(internals.figure_node(), directives.nodes.Element)
    assert callable(directives.visit_imgsg_html)
    parsed = internals.parse_srcset("a.png, a_2_00x.png 2.00x")
    assert parsed[max(parsed)] == "a_2_00x.png"


def test_5_the_minigallery_warning_says_what_the_filter_drops():
    import sphinx_gallery.directives as directives

    assert internals.MINIGALLERY_GLOBS in inspect.getsource(directives), \
        "sphinx-gallery's minigallery warning changed its wording"
    assert directives.logger.logger.name == internals.GALLERY_LOGGER


def test_6_default_tolerances_are_assert_closes():
    import torch

    a = torch.zeros(2)
    assert internals.default_tolerances(a, a) == (1.3e-6, 1e-5)
    half = a.half()
    assert internals.default_tolerances(half, half) == (1e-3, 1e-5)


def test_7_extensions_carry_parallel_safety():
    from sphinx.extension import Extension

    ext = Extension("x", None)

    class App:
        extensions = {"x": ext}

    assert internals.declare_parallel_safe(App, "x") is ext
    assert ext.parallel_read_safe and ext.parallel_write_safe
    assert internals.declare_parallel_safe(App, "missing") is None


def test_8_caller_frame():
    def called():
        return internals.caller_frame(1)

    here = inspect.currentframe()
    assert called() is here


def test_9_the_dropdown_node_becomes_details_in_html():
    """The node built as sphinx-design's directive builds it; its HTML post-transform (run on
    a small document) makes it a closed ``<details>`` with the title as ``<summary>``."""
    from docutils import nodes
    from docutils.utils import new_document
    from sphinx_design.dropdown import DropdownHtmlTransform, dropdown_main, dropdown_title

    node = internals.dropdown([nodes.Text("Show the proof")], [nodes.paragraph("", "body")],
                              ["anatomy-proof"])
    document = new_document("test")
    document += node
    transform = DropdownHtmlTransform.__new__(DropdownHtmlTransform)
    transform.document = document
    transform.run()
    [details] = document.children
    assert isinstance(details, dropdown_main) and not details["opened"]
    assert "anatomy-proof" in details["classes"]
    assert isinstance(details[0], dropdown_title) and "Show the proof" in details[0].astext()
    assert details[1].astext() == "body"


def test_10_sphinx_gallery_marks_each_block_with_its_source_lines():
    from sphinx_gallery import gen_rst

    assert internals.BLOCK_MARKER in inspect.getsource(gen_rst)


def test_a_script_without_a_docstring_is_no_gallery_page(tmp_path):
    script = tmp_path / "plot_02_bare.py"
    script.write_text("x = 1\nassert x\n")
    with pytest.raises(internals.NotAGalleryPage):
        internals.split_page(script)
    assert page_source.code_cells(script) == []
    assert page_source.sections(script) == {1: "", 2: ""}


def test_11_search_lists_every_pages_index_entries_after_a_rebuild(tmp_path):
    """Two pages, each with a main index entry, built, then one edited and built again: the
    search still lists both entries, each at its page (no target). Sphinx alone lists only
    the rewritten page's (sphinx-doc/sphinx#12599); ``rendering`` fills the others in from
    the environment's index domain, through ``internals.search_index_entries``."""
    import json
    import subprocess

    src, out = tmp_path / "src", tmp_path / "html"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\nextensions = ['rendering']\n")
    (src / "index.rst").write_text("Book\n====\n\n.. toctree::\n\n   alpha\n   beta\n")
    for name in ("alpha", "beta"):
        (src / f"{name}.rst").write_text(f"{name}\n=====\n\n.. index:: ! {name}\n\nText.\n")

    def entries():
        subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)],
                       check=True)
        text = (out / "searchindex.js").read_text()
        index = json.loads(text[text.index("(") + 1:text.rindex(")")])
        return {entry: [(index["docnames"][doc], target, main) for doc, target, main in where]
                for entry, where in index["indexentries"].items()}

    expected = {"alpha": [("alpha", "", True)], "beta": [("beta", "", True)]}
    assert entries() == expected
    (src / "alpha.rst").write_text((src / "alpha.rst").read_text() + "\nMore text.\n")
    assert entries() == expected, "after editing one page, the other's entry is gone"
