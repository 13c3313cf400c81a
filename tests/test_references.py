"""References (issue 25): one references.bib, cited with :footcite: by the chapters, their
parts and the pages, each listing what it cites (``.. footbibliography::``). Every key cited
exists and every entry is cited; no docutils citation is left (two of them rendered garbled:
docutils read an author's initial as a list marker); every arXiv ID the site shows is a link
to its abstract, and every cited work's title appears where it is cited."""

import html
import re
from pathlib import Path

from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]
FOOTCITE = re.compile(r":footcite:[pt]?:?`([^`]+)`")
SOURCES = [*ROOT.glob("chapters/**/*.rst"), ROOT / "index.rst", *ROOT.glob("gallery/*/*.py")]
ARXIV_TEXT = re.compile(r"arXiv:(\d{4}\.\d{4,5})")


def bib():
    return parse_file(ROOT / "references.bib").entries


def cited_in(text):
    return {k.strip() for group in FOOTCITE.findall(text) for k in group.split(",")}


def test_every_citation_exists_and_every_entry_is_cited():
    cited = set().union(*(cited_in(f.read_text()) for f in SOURCES))
    entries = set(bib())
    assert cited - entries == set(), "cited but not in references.bib"
    assert entries - cited == set(), "in references.bib but never cited"
    assert len(entries) >= 50


def test_a_document_that_cites_lists_what_it_cites():
    for f in SOURCES:
        text = f.read_text()
        if cited_in(text):
            assert ".. footbibliography::" in text, f.relative_to(ROOT)


def test_no_docutils_citation_is_left():
    for f in SOURCES:
        text = f.read_text()
        assert not re.search(r"^\.\. \[\w+\] ", text, re.M), f.relative_to(ROOT)
        assert not re.search(r"\[[A-Z]\w+\d{4}\w?\]_", text), f.relative_to(ROOT)


def test_every_arxiv_id_is_a_link_and_every_title_is_shown(site):
    _, out, _ = site
    entries = bib()
    ids_seen = 0
    for f in SOURCES:
        if f.suffix == ".py":
            page = out / "generated" / f.parent.name / f"{f.stem}.html"
        else:
            page = out / f.relative_to(ROOT).with_suffix(".html")
        keys = cited_in(f.read_text())
        if not keys:
            continue
        raw = page.read_text()
        shown = html.unescape(re.sub(r"<[^>]+>", "", raw))
        for key in keys:
            title = entries[key].fields["title"].strip("{}")
            assert title in shown, (page.name, key, title)
        for arxiv in ARXIV_TEXT.findall(shown):
            ids_seen += 1
            assert f'href="https://arxiv.org/abs/{arxiv}"' in raw, (page.name, arxiv)
    assert ids_seen >= 50


def text_of(page):
    """What a reader sees of a built page, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())


def test_the_garbled_entries_read_right(site):
    _, out, _ = site
    assert "Y. Wu and K. He. Group Normalization." in text_of(
        out / "chapters" / "normalization.html")
    assert "N. Shazeer. GLU Variants Improve Transformer." in text_of(
        out / "chapters" / "transformer" / "models.html")
