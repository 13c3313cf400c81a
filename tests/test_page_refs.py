"""No page is named by its number alone: every "page NN" in the chapters and in the pages'
text is a link (a ``:doc:`` role), so that renumbering the pages cannot leave a wrong number
behind and a reader can follow it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBERED = re.compile(r"\b[Pp]ages? \d{1,2}\b")
DOC_ROLE = re.compile(r":doc:`[^`]*`")


def unlinked(text):
    """The "page NN" mentions of ``text`` outside ``:doc:`` roles."""
    return NUMBERED.findall(DOC_ROLE.sub("", text))


def test_every_page_number_is_a_link():
    files = [*ROOT.glob("chapters/*.rst"), ROOT / "index.rst", *ROOT.glob("gallery/*/*.py"),
             *ROOT.glob("gallery/*/*.rst")]
    found = {f.relative_to(ROOT).as_posix(): unlinked(f.read_text()) for f in files}
    assert not {f: m for f, m in found.items() if m}


def test_the_check_sees_a_bare_number_and_passes_a_link():
    assert unlinked("as page 03 shows") == ["page 03"]
    assert unlinked("Pages 1 and 2") == ["Pages 1"]
    assert unlinked("see :doc:`page 03 </generated/x/plot_03_y>`") == []
