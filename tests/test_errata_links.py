"""Each chapter's errata table links to the section that proves the fix, by its title.

The table (last column "Proof") once linked by bare page numbers ("01, 04") to the top of a
page. Now every row must link at least once; every link must name a built file and an id in
it that sits in (or on) a section with a heading, and read as words, not as a number.
"""

import re
from urllib.parse import unquote, urlsplit

import pytest
from bs4 import BeautifulSoup

CHAPTERS = ["normalization", "positional", "transformer"]
BARE_NUMBER = re.compile(r"[\d\s,.]*")


def errata_table(soup):
    """The chapter's table whose last header cell reads "Proof"."""
    for table in soup.find_all("table"):
        head = table.find("thead")
        if head and head.find_all("th")[-1].get_text(strip=True) == "Proof":
            return table
    return None


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_errata_links_land_on_a_titled_section(site, chapter):
    _, out, _ = site
    page = out / "chapters" / f"{chapter}.html"
    table = errata_table(BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser"))
    assert table is not None, f"{chapter}: no errata table (last column 'Proof')"
    rows = table.find("tbody").find_all("tr")
    assert rows, f"{chapter}: the errata table is empty"
    for row in rows:
        cell = row.find_all("td")[-1]
        links = cell.find_all("a", href=True)
        assert links, f"{chapter}: a row proves nothing: {row.get_text(' ', strip=True)[:80]}"
        for a in links:
            text = a.get_text(" ", strip=True)
            assert not BARE_NUMBER.fullmatch(text), f"{chapter}: link text {text!r} is a number"
            url = urlsplit(a["href"])
            assert not url.scheme and url.path, f"{chapter}: {a['href']} is not a page of the book"
            target = (page.parent / unquote(url.path)).resolve()
            assert target.is_file(), f"{chapter}: {a['href']} names no built file"
            assert url.fragment, f"{chapter}: {a['href']} lands on the top of the page"
            soup = BeautifulSoup(target.read_text(encoding="utf-8"), "html.parser")
            anchor = soup.find(id=unquote(url.fragment))
            assert anchor is not None, f"{chapter}: no id {url.fragment!r} in {url.path}"
            section = anchor if anchor.name == "section" else anchor.find_parent("section")
            assert section is not None and section.find(re.compile(r"h[1-6]")) is not None, (
                f"{chapter}: {a['href']} is not in a titled section")
