"""The book's reading order (issue 25): chapters in parts, pages numbered in reading order, a
core path on the landing page where nothing is used before it is taught, every page one click
from the landing page, and a reading time computed from what a page shows."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import parts  # noqa: E402

CHAPTERS = ["normalization", "transformer", "positional"]


def chapter_parts(chapter):
    """The part documents of ``chapter``, in its toctree's order."""
    text = (ROOT / "chapters" / f"{chapter}.rst").read_text()
    toc = re.search(r"\.\. toctree::\n   :hidden:\n\n((?:   \S+\n)+)", text)
    return [f"/chapters/{line.strip()}" for line in toc.group(1).splitlines()]


def core_path():
    """The parts the landing page's "Start here" list names, in its order."""
    text = (ROOT / "index.rst").read_text()
    start = text.index("Start here")
    section = text[start:text.index("\n---", text.index("\n---", start) + 4)]
    return re.findall(r"\.\. part-cards:: (\S+)", section)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_parts_hold_every_page_once_in_file_order(chapter):
    listed = [p for part in chapter_parts(chapter) for p in parts.part_pages(part)]
    files = sorted(f"{chapter}/{p.stem}" for p in (ROOT / "gallery" / chapter).glob("plot_*.py"))
    assert listed == files  # every page once, and numbers follow the parts' order
    assert [f"/chapters/{chapter}/{p.stem}" for p in (ROOT / "chapters" / chapter).glob("*.rst")
            if f"/chapters/{chapter}/{p.stem}" not in chapter_parts(chapter)] == []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_page_comes_after_the_pages_of_its_chapter_it_builds_on(chapter):
    order = [p for part in chapter_parts(chapter) for p in parts.part_pages(part)]
    late = {page: [q for q in parts.prerequisites(page) if q in order
                   and order.index(q) >= order.index(page)] for page in order}
    assert not {page: q for page, q in late.items() if q}


def test_the_core_path_uses_nothing_before_it_is_taught():
    path = core_path()
    assert path == [f"/chapters/{c}/foundations" for c in CHAPTERS]
    pages = [p for part in path for p in parts.part_pages(part)]
    early = {page: [q for q in parts.prerequisites(page) if q not in pages[:i]]
             for i, page in enumerate(pages)}
    assert not {page: q for page, q in early.items() if q}


def test_the_landing_page_shows_every_part():
    text = (ROOT / "index.rst").read_text()
    shown = re.findall(r"\.\. part-cards:: (\S+)", text)
    assert sorted(shown) == sorted(p for c in CHAPTERS for p in chapter_parts(c))
    assert len(shown) == len(set(shown))


def test_the_check_sees_a_page_used_before_it_is_taught():
    """The order checks read the prerequisites right: a known edge, and its absence."""
    needs = parts.prerequisites
    assert "normalization/plot_04_layernorm" in needs("transformer/plot_01_self_attention")
    assert "transformer/plot_01_self_attention" in needs("normalization/plot_10_qk_norm")
    core = [p for part in core_path() for p in parts.part_pages(part)]
    assert "normalization/plot_10_qk_norm" not in core  # uses attention: not in the core path


def test_reading_time_counts_what_the_page_shows(tmp_path):
    page = tmp_path / "plot_x.py"
    page.write_text('''"""
Title
=====

one two three four five
"""

# %%
# Setup
# -----
# hidden words here
import torch

# %%
# From scratch
# ------------
# six seven
x = 1
y = 2

# %%
# Proof: it holds
# ---------------
# folded words are not read
z = 3

# %%
# A subsection of the proof
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# still folded
w = 4

# %%
# Try it: drop eps
# ----------------
# prompt words
answer = 5
''')
    words, lines = parts.visible(page)
    # Title, its five words, "From scratch six seven", "Try it: drop eps prompt words".
    assert words == 1 + 5 + 4 + 6
    assert lines == 2  # x and y: Setup, the proof and the answer are folded
    assert parts.minutes([page]) == 5


def test_every_page_is_one_click_from_the_landing_page(site):
    out = site[1]
    html = (out / "index.html").read_text()
    linked = set(re.findall(r'href="generated/(\w+/plot_\w+)\.html', html))
    pages = {f"{p.parent.name}/{p.stem}" for p in (ROOT / "gallery").glob("*/plot_*.py")}
    assert pages <= linked, sorted(pages - linked)
    assert re.search(r"\d+ pages, about \d+ min", html)


def test_pages_that_build_on_a_page_are_linked_at_its_end(site):
    """Every prerequisite edge has its reverse: the page named links back to the page that
    names it, at its end (_ext/parts.py)."""
    out = site[1]
    later = parts.builders()
    assert sum(map(len, later.values())) > 60
    for page, others in later.items():
        html = (out / "generated" / f"{page}.html").read_text()
        block = re.search(r'<p class="builds-on-this">(.*?)</p>', html, re.S)
        assert block, page
        linked = set(re.findall(r'href="(?:\.\./)*(?:generated/)?(\w+/)?(plot_\w+)\.html',
                                block.group(1)))
        names = {p.split("/")[1] for p in others}
        assert {stem for _, stem in linked} == names, (page, linked, names)
    # the foundation every attention page builds on names them; a page nothing builds on
    # has no such paragraph
    assert "transformer/plot_01_self_attention" in later["normalization/plot_04_layernorm"]
    # edges across chapters, both ways: ALiBi's heads, the 16-bit norms' BatchNorm
    assert "positional/plot_06_alibi" in later["transformer/plot_02_multihead_attention"]
    assert "normalization/plot_16_norms_16bit" in later["normalization/plot_02_batchnorm"]
    mha = (out / "generated" / "transformer" / "plot_02_multihead_attention.html").read_text()
    assert re.search(r'builds-on-this">.*?positional/plot_06_alibi\.html', mha, re.S)
    leaf = (out / "generated" / "transformer" / "plot_22_attention_16bit_ratio_test.html")
    assert "builds-on-this" not in leaf.read_text()
