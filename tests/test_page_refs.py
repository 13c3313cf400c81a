"""No page is named by its number: every mention of another page is a link (a ``:doc:``
role) named by its topic, never "page NN", not even as a link's text, so that renumbering
the pages into reading order cannot leave a wrong number behind and a reader can follow it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBERED = re.compile(r"\b[Pp]ages? \d{1,2}\b")
DOC_ROLE = re.compile(r":doc:`[^`]*`")
# Where a page's file name is no prose: a link, a measured number, a copy's origin, a part's list
NAMED_BY_ROLE = re.compile(r":(?:doc|ref|measured):`[^`]*`")
COPIED = re.compile(r"^# Copied from .*$", re.M)
PART = re.compile(r"^\.\. part::[ \t]*\n\n(?:[ \t]+\S+[ \t]*\n)+", re.M)
FILE_NAME = re.compile(r"\bplot_\d\d\w*")


def unlinked(text):
    """The "page NN" mentions of ``text`` outside ``:doc:`` roles."""
    return NUMBERED.findall(DOC_ROLE.sub("", text))


def numbered_links(text):
    """The ``:doc:`` roles of ``text`` whose text names a page by its number."""
    return [r for r in DOC_ROLE.findall(text) if NUMBERED.search(r.replace("\n# ", " "))]


def test_every_page_number_is_a_link():
    files = [*ROOT.glob("chapters/*.rst"), ROOT / "index.rst", *ROOT.glob("gallery/*/*.py"),
             *ROOT.glob("gallery/*/*.rst")]
    found = {f.relative_to(ROOT).as_posix(): unlinked(f.read_text()) for f in files}
    assert not {f: m for f, m in found.items() if m}
    named = {f.relative_to(ROOT).as_posix(): numbered_links(f.read_text()) for f in files}
    assert not {f: m for f, m in named.items() if m}


def file_names(text):
    """The page file names (``plot_04_...``) ``text`` mentions outside links, measured
    numbers, ``# Copied from`` lines and ``.. part::`` lists: a number a renumbering leaves
    wrong ("the gap plot_04 measures", "see plot_13")."""
    return FILE_NAME.findall(PART.sub("", COPIED.sub("", NAMED_BY_ROLE.sub("", text))))


def test_no_page_is_named_by_its_file_name_outside_a_link():
    files = [*ROOT.glob("chapters/*.rst"), *ROOT.glob("chapters/*/*.rst"), ROOT / "index.rst",
             *ROOT.glob("gallery/*/*.py"), *ROOT.glob("gallery/*/*.rst")]
    found = {f.relative_to(ROOT).as_posix(): file_names(f.read_text()) for f in files}
    assert not {f: m for f, m in found.items() if m}


def test_the_check_sees_a_file_name_in_prose_and_code():
    assert file_names("x = 1  # the gap plot_04 measures") == ["plot_04"]
    assert file_names('print("see plot_13_sdpa)")') == ["plot_13_sdpa"]
    assert file_names(":doc:`/generated/t/plot_13_x` and :measured:`plot_03_y.gap`\n"
                      "# Copied from t/plot_08_z.py: f\n"
                      ".. part::\n\n   t/plot_01_a\n   t/plot_02_b\n") == []


def test_the_check_sees_a_bare_number_and_passes_a_link():
    assert unlinked("as page 03 shows") == ["page 03"]
    assert unlinked("Pages 1 and 2") == ["Pages 1"]
    assert unlinked("see :doc:`page 03 </generated/x/plot_03_y>`") == []


def test_a_link_named_by_number_is_seen():
    assert numbered_links("see :doc:`page 03 </generated/x/plot_03_y>`") == [
        ":doc:`page 03 </generated/x/plot_03_y>`"]
    assert numbered_links("(:doc:`page 01\n# </generated/x/plot_01_y>`)") != []
    assert numbered_links("see :doc:`RoPE </generated/x/plot_03_y>`") == []
