"""The proof ledger lists every claim the pages assert, from what the build recorded."""

import ast
import codeop
import json
import re
import sys

import pytest
import torch

from conftest import GALLERY_PAGES, ROOT, page_id

sys.path.insert(0, str(ROOT / "_ext"))
import claims  # noqa: E402  (the one definition of a claim)
import recorder  # noqa: E402


def claim_lines(page):
    """Lines of every claim in a page's source, as _ext/claims.py defines a claim."""
    return set(claims.claim_sites(ast.parse(page.read_text())))


def branch_only_lines(page):
    """Lines inside an `if` body/else, an `except` handler or a `try`'s else: may not run."""
    lines = set()
    for node in ast.walk(ast.parse(page.read_text())):
        bodies = []
        if isinstance(node, ast.If):
            bodies = node.body + node.orelse
        elif isinstance(node, ast.ExceptHandler):
            bodies = node.body
        elif isinstance(node, ast.Try):
            bodies = node.orelse
        for stmt in bodies:
            lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def claims_of(src, page):
    record = src / "generated" / page.parent.name / f"{page.stem}.claims.json"
    return json.loads(record.read_text())


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_every_assert_of_a_page_is_recorded(site, page):
    src, _, _ = site
    record = claims_of(src, page)
    assert {c["line"] for c in record["claims"]} == claim_lines(page)
    assert all(c["passed"] for c in record["claims"])
    # A claim that did not run must sit in a branch (for another device or Python version).
    branch_lines = branch_only_lines(page)
    for c in record["claims"]:
        assert c["checks"] > 0 or c["line"] in branch_lines, c


def test_ledger_page_lists_every_page_and_matches_the_headline(site):
    """Every page and claim is a row; the headline counts the claims that ran."""
    src, out, _ = site
    ledger = (out / "chapters" / "ledger.html").read_text()
    for page in GALLERY_PAGES:
        assert f"generated/{page.parent.name}/{page.stem}.html" in ledger, page.name
    records = [claims_of(src, p) for p in GALLERY_PAGES]
    n_claims = sum(1 for r in records for c in r["claims"] if c["checks"] > 0)
    n_checks = sum(c["checks"] for r in records for c in r["claims"])
    n_rows = len(re.findall(r'<tr class="claim" data-page=', ledger))
    assert n_rows == sum(len(r["claims"]) for r in records)
    # This build's records are one column, current on every page (verified/ adds columns).
    assert re.search(r'<td>this build</td><td>[^<]*</td><td>(\d+) of \1</td><td>0</td>', ledger)
    assert 'data-origin="this build"' in ledger and "_static/ledger.css" in ledger
    headline = f"{n_claims} claims</strong> ({n_checks} checks) on {len(records)} pages"
    assert headline in (out / "index.html").read_text()
    assert headline in ledger


def test_every_page_links_its_own_rows_in_the_ledger(site):
    """What proves this page: under each gallery page's introduction, a link to the ledger
    filtered to its rows (``?page=chapter/plot_NN_topic``, what ledger.js reads), and no link
    of the page's article to the ledger without that filter (test_browser_ledger.py follows
    three of them in chromium)."""
    _, out, _ = site
    for page in GALLERY_PAGES:
        stem = page_id(page)
        text = (out / "generated" / f"{stem}.html").read_text()
        article = text[text.index("<article"):text.index("</article>")]
        hrefs = re.findall(r'href="((?:\.\./)+chapters/ledger\.html[^"]*)"', article)
        assert hrefs and set(hrefs) == {f"../../chapters/ledger.html?page={stem}"}, (stem, hrefs)
        intro = re.search(r'<p class="anatomy-ledger-link anatomy-proved-by">'
                          r'<strong>What proves this page: </strong><a [^>]*href="([^"]+)"',
                          article)
        assert intro and intro.group(1) == hrefs[0], stem
        # before the first section: at the end of the introduction
        sections = [m.start() for m in re.finditer(r"<section ", article)]
        assert sections[0] < article.index("anatomy-proved-by") < sections[1], stem


def run_recorded(page):
    """Run a page as sphinx-gallery does (codeop.Compile), recording; return the recorder.

    The page must fail with an AssertionError; everything the recorder changed is restored.
    """
    original, compile_block = torch.testing.assert_close, codeop.Compile.__call__
    recorder.start_recording(page)
    try:
        with pytest.raises(AssertionError):
            exec(codeop.Compile()(page.read_text(), str(page.resolve()), "exec"), {})
    finally:
        rec = recorder.unpatch()
    assert torch.testing.assert_close is original and codeop.Compile.__call__ is compile_block
    assert not hasattr(__import__("builtins"), recorder.HIT)
    return rec


def test_a_failing_claim_is_recorded_as_failed(tmp_path):
    """The recorder sees the comparison that fails, with its measured discrepancy."""
    page = tmp_path / "plot_99_demo.py"
    page.write_text("import torch\n"
                    "torch.testing.assert_close(torch.ones(3), torch.ones(3))\n"
                    "for i in range(3):\n"
                    "    assert i < 3\n"
                    "torch.testing.assert_close(torch.ones(3), torch.zeros(3))\n")
    rec = run_recorded(page)
    rows = {c["line"]: c for c in rec.claims()}
    assert rows[2]["passed"] and rows[2]["max_abs"] == 0.0 and rows[2]["checks"] == 1
    assert rows[4]["kind"] == "assert" and rows[4]["checks"] == 3
    assert not rows[5]["passed"] and rows[5]["max_abs"] == 1.0


def test_an_errata_check_is_a_claim_counted_when_the_error_comes(tmp_path):
    """try / except / else: raise AssertionError is a ``raises`` claim; the page's numbers
    are recorded for prose to quote."""
    page = tmp_path / "plot_99_errata.py"
    page.write_text("import torch\n"
                    "x = torch.tensor(2.5)\n"
                    "for n in (3, 2):\n"
                    "    try:\n"
                    "        torch.ones(2) + torch.ones(n)\n"
                    "    except (RuntimeError, ValueError):\n"
                    "        pass\n"
                    "    else:\n"
                    "        raise AssertionError('2 broadcast with 2')\n")
    rec = run_recorded(page)
    [row] = rec.claims()
    # Raised for n = 3 (one check), not for n = 2: the page failed there.
    assert (row["line"], row["kind"], row["checks"]) == (9, "raises", 1)
    assert row["code"] == "torch.ones(2) + torch.ones(n)  # raises (RuntimeError, ValueError)"
    assert recorder._numbers(rec.namespace) == {"n": 2, "x": 2.5}


def test_a_check_the_ledger_cannot_count_is_refused():
    """An AssertionError raised outside a try's else, or assert_close inside an expression."""
    for text in ("if 1 > 2:\n    raise AssertionError\n",
                 "ok = [torch.testing.assert_close(a, a) for a in xs]\n"):
        with pytest.raises(claims.NotAClaim):
            claims.claim_sites(ast.parse(text))


def test_the_ratio_to_tolerance_is_assert_closes_own_inequality(tmp_path):
    """A comparison's "of tolerance": max |a - e| / (atol + rtol |e|), its worst over the
    checks of a line; 0 for an exact match; infinite for an exact comparison that differs."""
    import recorder

    page = tmp_path / "plot_01_x.py"
    page.write_text('"""\nX\n=\n"""\n')
    rec = recorder._Recorder(page)
    e = torch.tensor([1.0, 100.0, 0.0], dtype=torch.float64)
    a = e + torch.tensor([1e-7, 1e-5, 1e-8], dtype=torch.float64)
    rec.record_close(3, a, e, {"rtol": 1e-7, "atol": 1e-7}, True)
    # per element: 1e-7 / 2e-7, 1e-5 / (1e-7 + 1e-5), 1e-8 / 1e-7
    expected = max(1e-7 / 2e-7, 1e-5 / (1e-7 + 1e-5), 1e-8 / 1e-7)
    assert rec.close_calls[3]["ratio"] == pytest.approx(expected, rel=1e-6)  # a + e rounds
    rec.record_close(3, e, e, {"rtol": 1e-7, "atol": 1e-7}, True)  # the worst check stays
    assert rec.close_calls[3]["ratio"] == pytest.approx(expected, rel=1e-6)  # a + e rounds
    ints = torch.tensor([1, 2, 3])
    rec.record_close(4, ints, ints, {}, True)
    assert rec.close_calls[4]["ratio"] == 0.0
    rec.record_close(5, ints + 1, ints, {}, False)
    assert rec.close_calls[5]["ratio"] == float("inf")
