"""References (issue 25): one references.bib, cited with :footcite: by the chapters, their
parts and the pages, each listing what it cites (``.. footbibliography::``). Every key cited
exists and every entry is cited; every entry carries an arXiv ID, a DOI or a URL; a work a
page names ("Su et al.") is one it cites; no docutils citation is left (two of them rendered
garbled: docutils read an author's initial as a list marker), and no rendered entry is
garbled; every arXiv ID and DOI the site shows as text is inside a link to it, and every
cited work's title appears where it is cited."""

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]
FOOTCITE = re.compile(r":footcite:[pt]?:?`([^`]+)`")
ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`[^`]*`")
SOURCES = [*ROOT.glob("chapters/**/*.rst"), ROOT / "index.rst", *ROOT.glob("gallery/*/*.py")]
# What a reader sees as an identifier: "arXiv:2104.09864", "doi:10.1080/...", a bare DOI.
ARXIV_TEXT = re.compile(r"arXiv:\s*(\d{4}\.\d{4,5})")
DOI_TEXT = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>,;]+[^\s\"<>,;.)])")


def bib():
    return parse_file(ROOT / "references.bib").entries


def cited_in(text):
    return {k.strip() for group in FOOTCITE.findall(text) for k in group.split(",")}


def last_names(entry):
    """Each author's last name as a reader reads it ("Le Scao", "Wu"), braces dropped."""
    return [" ".join(p.last_names).replace("{", "").replace("}", "")
            for p in entry.persons.get("author", [])]


def first_author(entry):
    """The first author as the bibliography writes them: initials, then the last name."""
    p = entry.persons["author"][0]
    return " ".join(p.first_names + p.middle_names + p.prelast_names + p.last_names
                    ).replace("{", "").replace("}", "")


def test_every_citation_exists_and_every_entry_is_cited():
    cited = set().union(*(cited_in(f.read_text()) for f in SOURCES))
    entries = set(bib())
    assert cited - entries == set(), "cited but not in references.bib"
    assert entries - cited == set(), "in references.bib but never cited"
    assert len(entries) >= 50


def test_every_entry_links_to_the_work():
    """An arXiv eprint, a DOI or a URL: what the site renders as the entry's link."""
    unlinked = [key for key, e in bib().items()
                if not {"eprint", "doi", "url"} & set(e.fields)]
    assert not unlinked, unlinked
    for key, e in bib().items():
        if "eprint" in e.fields:
            assert re.fullmatch(r"\d{4}\.\d{4,5}", e.fields["eprint"]), key
            assert e.fields.get("archiveprefix") == "arXiv", key
        if "doi" in e.fields:
            assert re.fullmatch(r"10\.\d{4,9}/\S+", e.fields["doi"]), key


def test_a_document_that_cites_lists_what_it_cites():
    for f in SOURCES:
        text = f.read_text()
        if cited_in(text):
            assert ".. footbibliography::" in text, f.relative_to(ROOT)


def test_a_work_named_is_a_work_cited():
    """ "Peng et al." in a chapter or a page (outside a role) names a work the same document
    cites: no informal reference without its entry and link."""
    entries = bib()
    loose = []
    for f in SOURCES:
        text = f.read_text()
        authors = {name.split()[-1] for k in cited_in(text) for name in last_names(entries[k])}
        for m in re.finditer(r"([A-Z][\w-]+) et al\.", ROLE.sub("", text)):
            if m[1] not in authors:
                loose.append(f"{f.relative_to(ROOT)}: {m[0]}")
    assert not loose, loose


def test_no_docutils_citation_is_left():
    for f in SOURCES:
        text = f.read_text()
        assert not re.search(r"^\.\. \[\w+\] ", text, re.M), f.relative_to(ROOT)
        assert not re.search(r"\[[A-Z]\w+\d{4}\w?\]_", text), f.relative_to(ROOT)


class Text(HTMLParser):
    """A page's visible text in pieces, each with the ``href`` of the link it sits in
    (None outside links); code blocks, scripts and styles left out."""

    SKIP = {"pre", "script", "style"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.pieces, self.links, self.skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag == "a":
            self.links.append(dict(attrs).get("href"))

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip -= 1
        elif tag == "a" and self.links:
            self.links.pop()

    def handle_data(self, data):
        if not self.skip:
            self.pieces.append((data, self.links[-1] if self.links else None))


def unlinked_ids(raw):
    """The arXiv IDs and DOIs a page shows outside a link to them, and how many it shows.
    Text is joined across tags only between pieces with the same link."""
    parser = Text()
    parser.feed(raw)
    runs = []
    for data, href in parser.pieces:
        if runs and runs[-1][1] == href:
            runs[-1][0] += data
        else:
            runs.append([data, href])
    bad, seen = [], 0
    for text, href in runs:
        for arxiv in ARXIV_TEXT.findall(text):
            seen += 1
            if href != f"https://arxiv.org/abs/{arxiv}":
                bad.append(f"arXiv:{arxiv} -> {href}")
        for doi in DOI_TEXT.findall(text):
            seen += 1
            if href != f"https://doi.org/{doi}":
                bad.append(f"doi {doi} -> {href}")
    return bad, seen


def test_an_identifier_outside_a_link_is_found():
    """The check above can fail: an ID as plain text, or linked elsewhere, is reported."""
    bad, seen = unlinked_ids(
        '<p>J. Su. RoFormer. 2021. arXiv:2104.09864. <a href="https://doi.org/10.1080/x1">'
        'doi:10.1080/x1</a> <a href="https://arxiv.org/abs/1706.03762">arXiv:1607.06450</a>'
        "<pre>arXiv:1111.22222</pre></p>")
    assert seen == 3
    assert bad == ["arXiv:2104.09864 -> None",
                   "arXiv:1607.06450 -> https://arxiv.org/abs/1706.03762"]


def site_pages(out):
    """Every HTML page a reader opens (not the sources Sphinx copies for "show source")."""
    return [p for p in sorted(out.rglob("*.html"))
            if not {"_sources", "_downloads", "_static", "_images"} & set(p.parts)]


def test_every_arxiv_id_and_doi_is_a_link(site):
    _, out, _ = site
    bad, seen = {}, 0
    for page in site_pages(out):
        found, n = unlinked_ids(page.read_text())
        seen += n
        if found:
            bad[str(page.relative_to(out))] = found
    assert not bad, bad
    assert seen >= 100  # every cited arXiv work, on the chapter and on each page citing it


def test_every_title_is_shown_where_it_is_cited(site):
    _, out, _ = site
    entries = bib()
    for f in SOURCES:
        if f.suffix == ".py":
            page = out / "generated" / f.parent.name / f"{f.stem}.html"
        else:
            page = out / f.relative_to(ROOT).with_suffix(".html")
        keys = cited_in(f.read_text())
        if not keys:
            continue
        shown = text_of(page)
        # :footcite:t: names the authors: "Dubey et al. [2]", never "Dubey and others [2]"
        # (an entry listing one author and "others" reads so)
        assert not re.search(r"\band others \[ \d+ \]", shown), page.name
        for key in keys:
            title = " ".join(entries[key].fields["title"].strip("{}").split())
            assert title in shown, (page.name, key, title)


def text_of(page):
    """What a reader sees of a built page, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())


ENTRY = re.compile(r'<aside class="footnote brackets" id="footcite-([\w-]+)"[^>]*>(.*?)</aside>',
                   re.S)


def rendered_entries(raw):
    """``{key (lower case): (inner HTML, text)}`` of a page's bibliography entries."""
    return {key: (body, " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split()))
            for key, body in ENTRY.findall(raw)}


def garbled(entry, body, text):
    """What is wrong with one rendered entry: a list inside it (docutils read an initial
    such as "Y." as a list marker), a first author (initials and name) that is not the
    first thing it says, a title missing."""
    problems = []
    if re.search(r"<(ol|ul|li|dl|blockquote)\b", body):
        problems.append("a list or block inside the entry")
    # the text after the label "[n]" and the back-references "(1, 2)"
    said = re.sub(r"^\[\s*\d+\s*\]\s*(\([\d, ]+\)\s*)?", "", text)
    if not said.startswith(first_author(entry)):
        problems.append(f"does not start with {first_author(entry)!r}")
    if " ".join(entry.fields["title"].strip("{}").split()) not in said:
        problems.append("title missing")
    return problems


def test_a_garbled_entry_is_found():
    """The check can fail: the entry docutils rendered for [Wu2018] before (an ordered list
    started by the initial "Y.") is reported, the entry the site renders now is not."""
    wu = bib()["Wu2018"]
    before = ('<span class="label">[8]</span><ol class="upperalpha simple" start="25">'
              "<li><p>Wu and K. He. Group Normalization. 2018.</p></li></ol>")
    assert garbled(wu, before, "[8] Wu and K. He. Group Normalization. 2018.")
    now = '<span class="label">[8]</span><p>Y. Wu and K. He. Group Normalization. 2018.</p>'
    assert garbled(wu, now, "[8] Y. Wu and K. He. Group Normalization. 2018.") == []


def test_no_rendered_entry_is_garbled(site):
    _, out, _ = site
    entries = {k.lower(): e for k, e in bib().items()}
    bad, count = {}, 0
    for page in site_pages(out):
        raw = page.read_text()
        if 'class="citation-list"' in raw:  # a docutils citation: how the two garbled ones came
            bad[str(page.relative_to(out))] = (["a docutils citation"], "")
        for key, (body, text) in rendered_entries(raw).items():
            count += 1
            problems = garbled(entries[key], body, text)
            if problems:
                bad[f"{page.relative_to(out)}#{key}"] = (problems, text[:120])
    assert not bad, bad
    assert count >= 100, count


@pytest.mark.parametrize("page, entry", [
    ("chapters/normalization.html", "Y. Wu and K. He. Group Normalization."),
    ("chapters/transformer/models.html", "N. Shazeer. GLU Variants Improve Transformer."),
])
def test_the_two_garbled_entries_read_right(site, page, entry):
    _, out, _ = site
    assert entry in text_of(out / page)
