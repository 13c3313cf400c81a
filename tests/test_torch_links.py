"""PyTorch APIs link to their pages on docs.pytorch.org, from a build that needs no network.

The links come from the offline intersphinx inventory written from _ext/torch_inventory.txt
(see conf.py and _ext/torch_links.py); these tests read the site built by the `site` fixture.
"""

import html
import re
import runpy
import sys
from pathlib import Path

import pytest

from conftest import GALLERY_PAGES, ROOT, page_id

sys.path.insert(0, str(ROOT / "_ext"))
import torch_links  # noqa: E402

TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"
INVENTORY_TXT = ROOT / "_ext" / "torch_inventory.txt"
ENTRIES = torch_links.read_inventory(INVENTORY_TXT)
URI = {name: uri for name, _, uri in ENTRIES}
CHAPTERS = sorted((ROOT / "chapters").glob("*.rst"))
# <a ... href="https://docs.pytorch.org/...">...</a>; link text may hold nested spans.
LINK = re.compile(r'<a\b[^>]*\bhref="(https?://docs\.pytorch\.org/[^"]*)"[^>]*>(.*?)</a>', re.S)
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|obj):`(?:[^`<]*<)?~?([\w.]+)>?`")


def links(html_text):
    """[(href, visible text)] of every docs.pytorch.org link in a page."""
    return [(html.unescape(href), html.unescape(re.sub(r"<[^>]+>", "", text)))
            for href, text in LINK.findall(html_text)]


def gallery_html(out, name):
    chapter, stem = name.split("/")
    return (out / "generated" / chapter / f"{stem}.html").read_text()


def code_blocks(html_text):
    """The HTML of the Python code blocks of a gallery page (not its prose, not its output)."""
    return re.findall(r'<div class="highlight-Python notranslate"><div class="highlight"><pre>'
                      r'(.*?)</pre>', html_text, re.S)


# ---------------------------------------------------------------------------------------------
# The list itself (no build needed)
def test_inventory_list_is_well_formed_and_round_trips(tmp_path):
    """Every line parses (name, role, page.html#anchor); the written objects.inv reads back, with
    Sphinx's own reader, as exactly the list."""
    from sphinx.util.inventory import InventoryFile

    assert len(ENTRIES) > 50
    inv = torch_links.write_inventory(INVENTORY_TXT, tmp_path / "torch.inv")
    data = InventoryFile.loads(inv.read_bytes(), uri=TORCH_DOCS).data
    read_back = {(name, role, item.uri)
                 for role, objs in data.items() for name, item in objs.items()}
    assert read_back == {(name, role, TORCH_DOCS + uri) for name, role, uri in ENTRIES}


def test_autosummary_pages_are_named_after_their_anchor():
    """An autosummary page generated/X.html documents X: its anchor is X or a member of X."""
    for name, _, uri in ENTRIES:
        page, anchor = uri.split("#")
        if page.startswith("generated/"):
            documented = page.removeprefix("generated/").removesuffix(".html")
            assert anchor == documented or anchor.startswith(documented + "."), name


# ---------------------------------------------------------------------------------------------
# (d) No network: intersphinx reads local files only
def test_intersphinx_reads_only_local_inventories(site):
    src, _, log = site
    conf = runpy.run_path(str(src / "conf.py"))
    mapping = conf["intersphinx_mapping"]
    assert set(mapping) == {"torch"}
    target, location = mapping["torch"]
    assert target == TORCH_DOCS
    locations = location if isinstance(location, tuple) else (location,)
    for loc in locations:
        assert loc is not None, "None means: fetch objects.inv from the web"
        assert "://" not in loc, f"{loc} is a URL"
        assert Path(src, loc).is_file(), f"{loc} does not exist"
    assert "loading intersphinx inventory 'torch' from " + str(src / "_build" / "torch.inv") in log
    assert not re.search(r"loading intersphinx inventory .* from https?://", log)


# ---------------------------------------------------------------------------------------------
# (a) The chapters' prose
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_links_every_api_it_names(site, chapter):
    """Each API named with a role in a chapter is a link to its docs.pytorch.org page, and no
    API from the list is left as a plain ``torch.x`` literal."""
    _, out, _ = site
    source = chapter.read_text()
    page = (out / "chapters" / f"{chapter.stem}.html").read_text()
    hrefs = {href for href, _ in links(page)}
    named = set(ROLE.findall(source))
    for name in named:
        assert name in URI, f"{name} is not in _ext/torch_inventory.txt"
        assert TORCH_DOCS + URI[name] in hrefs, f"{chapter.name}: {name} is not linked"
    unlinked = [lit for lit in re.findall(r"``(torch\.[\w.]+)``", source) if lit in URI]
    assert not unlinked, f"{chapter.name}: use a role for {unlinked}"


def test_chapters_link_the_apis_they_are_about(site):
    _, out, _ = site
    expected = {
        "normalization": ["torch.nn.BatchNorm2d", "torch.nn.InstanceNorm2d", "torch.nn.GroupNorm",
                          "torch.nn.LayerNorm", "torch.nn.RMSNorm", "torch.finfo",
                          "torch.testing.assert_close"],
        "transformer": ["torch.nn.functional.scaled_dot_product_attention",
                        "torch.nn.TransformerEncoderLayer", "torch.testing.assert_close"],
        "positional": ["torch.nn.Embedding", "torch.nn.functional.scaled_dot_product_attention"],
    }
    for chapter, names in expected.items():
        hrefs = {href for href, _ in links((out / "chapters" / f"{chapter}.html").read_text())}
        for name in names:
            assert TORCH_DOCS + URI[name] in hrefs, f"{chapter}: {name}"


# ---------------------------------------------------------------------------------------------
# (b) The gallery's code
@pytest.mark.parametrize("page, written, name", [
    ("normalization/plot_02_batchnorm", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm2d"),
    ("normalization/plot_01_common_recipe", "torch.finfo", "torch.finfo"),
    ("normalization/plot_01_common_recipe", "torch.nn.RMSNorm", "torch.nn.RMSNorm"),
    ("transformer/plot_01_self_attention", "torch.nn.functional.scaled_dot_product_attention",
     "torch.nn.functional.scaled_dot_product_attention"),
    ("transformer/plot_05_transformer_block", "nn.TransformerEncoderLayer",
     "torch.nn.TransformerEncoderLayer"),
    ("positional/plot_05_rope_attention", "torch.view_as_complex", "torch.view_as_complex"),
    ("positional/plot_05_rope_attention", "torch.polar", "torch.polar"),
])
def test_gallery_code_links_api_names(site, page, written, name):
    """The name, as written in a code cell, is one link to its page."""
    _, out, _ = site
    code = "".join(code_blocks(gallery_html(out, page)))
    assert (TORCH_DOCS + URI[name], written) in links(code), f"{written} unlinked in {page}'s code"


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_gallery_code_links_assert_close(site, page):
    """Every page asserts its claims with torch.testing.assert_close; each call links its docs."""
    _, out, _ = site
    calls = page.read_text().count("torch.testing.assert_close(")
    if not calls:
        pytest.skip("no torch.testing.assert_close call")
    code = "".join(code_blocks(gallery_html(out, page_id(page))))
    linked = links(code).count((TORCH_DOCS + URI["torch.testing.assert_close"],
                                "torch.testing.assert_close"))
    assert linked == calls


def test_gallery_prose_links_api_literals(site):
    """In the gallery's prose, a literal that is exactly an API name links too."""
    _, out, _ = site
    for page, literal, name in [
        ("positional/plot_05_rope_attention", "torch.polar", "torch.polar"),
        ("positional/plot_04_rope", "torch.view_as_complex", "torch.view_as_complex"),
        ("transformer/plot_01_self_attention", "nn.MultiheadAttention",
         "torch.nn.MultiheadAttention"),
    ]:
        page_html = gallery_html(out, page)
        prose = re.sub(r'<div class="highlight-Python notranslate">.*?</pre>', "", page_html,
                       flags=re.S)
        assert (TORCH_DOCS + URI[name], literal) in links(prose), f"{page}: ``{literal}``"


# ---------------------------------------------------------------------------------------------
# (c) No made-up URL: every link into PyTorch's docs is one the list vouches for
def test_every_pytorch_link_is_in_the_inventory(site):
    _, out, _ = site
    allowed = {TORCH_DOCS + uri for uri in URI.values()}
    used, stray = set(), []
    for html_file in out.rglob("*.html"):
        for href, text in links(html_file.read_text()):
            used.add(href)
            if href not in allowed:
                stray.append(f"{html_file.relative_to(out)}: {text} -> {href}")
    assert not stray, "links not in _ext/torch_inventory.txt:\n" + "\n".join(stray)
    unused = sorted(allowed - used)
    assert not unused, "listed but never linked (remove from the list?):\n" + "\n".join(unused)
