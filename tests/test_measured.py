"""Numbers in prose come from the build: the ``:measured:`` role (_ext/measured.py).

A sentence that quotes a page's result names the value; the build writes what the page
measured, writes it again when the page runs again with another result, and fails when the
name does not exist or could mean more than one value.
"""

import ast
import html
import json
import re
import shutil
import sys

from conftest import GALLERY_PAGES, ROOT, make_html, save_artifact

sys.path.insert(0, str(ROOT / "_ext"))
import measured  # noqa: E402

ROLE = re.compile(r":measured:`([^`]+)`")


def quotes():
    """``[(file, line, page, name, spec)]``: every use of the role in chapters and pages."""
    found = []
    for path in [*sorted((ROOT / "chapters").glob("*.rst")), *GALLERY_PAGES]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for text in ROLE.findall(line):
                m = measured.SYNTAX.fullmatch(text.strip())
                assert m, f"{path.name}:{n}: {text!r} is not page.name:spec"
                page = m["page"] or (path.stem if path.suffix == ".py" else None)
                assert page, f"{path.name}:{n}: a chapter must name the page"
                found.append((path, n, page, m["name"], m["spec"]))
    return found


def test_format_and_bindings():
    assert measured.format_value(1.7e-7, ".1e") == "1.7e-7"
    assert measured.format_value(1234.5, ".3g") == "1.23e3"
    assert measured.format_value(0.4449, ".2f") == "0.44"
    assert measured.format_value(16685, ",") == "16,685"
    assert measured.format_value(0.25, ".0%") == "25%"
    tree = ast.parse("a = 1\nfor i in range(3):\n    b = i\nc = 1\nc += 1\n"
                     "def f():\n    d = 2\nif a:\n    e = 3\n")
    assert measured.bindings(tree, "a") == [(1, False)]
    assert measured.bindings(tree, "b") == [(3, True)]
    assert measured.bindings(tree, "i") == [(2, True)]
    assert measured.bindings(tree, "c") == [(4, False), (5, False)]
    assert measured.bindings(tree, "d") == []  # a function's own name, not the page's
    assert measured.bindings(tree, "e") == [(9, False)]


def test_every_quote_shows_the_recorded_value(site):
    """What each sentence shows is the value the page recorded, formatted as asked."""
    src, out, _ = site
    for path, line, page, name, spec in quotes():
        [source] = (src / "gallery").glob(f"*/{page}.py")
        record = json.loads((src / "generated" / source.parent.name /
                             f"{page}.claims.json").read_text())
        shown = measured.format_value(record["values"][name], spec)
        doc = (out / "chapters" / f"{path.stem}.html" if path.suffix == ".rst" else
               out / "generated" / path.parent.name / f"{path.stem}.html")
        assert f'<span class="measured">{html.escape(shown)}</span>' in doc.read_text(), \
            (path.name, line, name, shown)


def quotable(record, source):
    """A name the page binds once, outside loops, with a recorded number."""
    tree = ast.parse(source.read_text())
    for name, value in record["values"].items():
        where = measured.bindings(tree, name)
        if len(where) == 1 and not where[0][1]:
            return name, value
    raise AssertionError(f"{source.name} records no quotable number")


def test_a_rerun_changes_the_sentence_and_a_wrong_name_fails(site, tmp_path):
    """In a copy of the built site: a chapter quotes a page's number; the page's record
    changes (as when it runs again with another result): the chapter shows the new value.
    Then a quote of a name bound in a loop fails the build, naming the file and line."""
    built, _, _ = site
    src = tmp_path / "src"
    shutil.copytree(built, src, symlinks=True)
    page = ROOT / "gallery" / "positional" / "plot_04_rope.py"
    record_path = src / "generated" / "positional" / "plot_04_rope.claims.json"
    record = json.loads(record_path.read_text())
    name, value = quotable(record, page)
    chapter = src / "chapters" / "positional.rst"
    text = chapter.read_text()
    chapter.write_text(text + f"\n\nThe page measured :measured:`plot_04_rope.{name}:.6g`.\n")
    rc, log = make_html(src)
    assert rc == 0, log[-3000:]
    shown = measured.format_value(value, ".6g")
    html_file = src / "_build" / "html" / "chapters" / "positional.html"
    assert f'<span class="measured">{shown}</span>' in html_file.read_text()

    record["values"][name] = value + 1000  # the page ran again and measured another number
    record_path.write_text(json.dumps(record))
    (src / "_build" / ".html-built").unlink()  # make sees no source change, only the record
    rc, log = make_html(src)
    save_artifact("measured_rebuild.log", log)
    assert rc == 0, log[-3000:]
    new = measured.format_value(value + 1000, ".6g")
    assert f'<span class="measured">{new}</span>' in html_file.read_text(), \
        "the chapter still shows the old value"

    # A loop variable: which of its values would the sentence mean?
    loop_name = next(n.target.id for n in ast.walk(ast.parse(page.read_text()))
                     if isinstance(n, ast.For) and isinstance(n.target, ast.Name))
    lines = len(chapter.read_text().splitlines())
    chapter.write_text(chapter.read_text() +
                       f"\nAnd :measured:`plot_04_rope.{loop_name}`, and "
                       ":measured:`plot_04_rope.no_such_name`.\n")
    rc, log = make_html(src)
    save_artifact("measured_wrong_name.log", log)
    assert rc != 0, "the build passed with a quote of a name the page does not bind once"
    assert re.search(rf"positional\.rst:{lines + 2}: .*{loop_name}.* in a loop", log), log[-3000:]
    assert "binds no module-level name 'no_such_name'" in log, log[-3000:]
