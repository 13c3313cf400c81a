"""The proof ledger as readers see it, in headless chromium (fixtures of test_browser.py).

Every column of the ledger is visible, or reachable by scrolling the table's own wrapper,
at desktop widths and on a phone, and the page itself never scrolls sideways; the filters
hide exactly the rows that do not match; sorting by discrepancy orders the rows by it; a
row's link lands on the code cell that holds the claim. Screenshots at 1400 and 390 px land
in tests/artifacts/screenshots/ for a person to look at.
"""

import re
from urllib.parse import urlsplit

import pytest

from conftest import GALLERY_PAGES, ROOT
from test_browser import SCREENSHOTS, Visit, base_url, browser, visit  # noqa: F401

LEDGER = "chapters/ledger.html"
BOOK_ORDER = ["normalization", "transformer", "positional"]  # index.rst's order


def chapter_title(chapter):
    return (ROOT / "chapters" / f"{chapter}.rst").read_text().splitlines()[0].strip()


def shown_pages(page):
    """The page of each row the ledger shows."""
    return page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .filter(r => r.offsetParent).map(r => r.dataset.page)""")

# Per table wrapper: can every header cell be reached, and does the page stay put?
LAYOUT_JS = """() => {
    const wraps = [...document.querySelectorAll("article .ledger-wrap")];
    return {
        page_width: document.documentElement.scrollWidth,
        body_width: document.body.scrollWidth,
        window_width: window.innerWidth,
        wraps: wraps.map(w => {
            const box = w.getBoundingClientRect();
            return {
                left: box.left, right: box.right, client: w.clientWidth, scroll: w.scrollWidth,
                overflow: getComputedStyle(w).overflowX,
                // each header cell's right edge, measured from the wrapper's left edge
                heads: [...w.querySelectorAll("th")].map(
                    th => th.getBoundingClientRect().right - box.left + w.scrollLeft),
                // scrolled to its end, the last column's right edge is inside the wrapper
                end_in_view: (() => {
                    const before = w.scrollLeft;
                    w.scrollLeft = w.scrollWidth;
                    const ths = w.querySelectorAll("th");
                    const ok = ths[ths.length - 1].getBoundingClientRect().right
                        <= w.getBoundingClientRect().right + 1;
                    w.scrollLeft = before;
                    return ok;
                })(),
                // the right edge of the first record set's column (this build's)
                first_set: [...w.querySelectorAll("th.set")].map(
                    th => th.getBoundingClientRect().right - box.left + w.scrollLeft)[0],
            };
        }),
        // furo's "On this page" panel, where it is shown
        toc: [...document.querySelectorAll(".toc-drawer")].map(t => {
            const r = t.getBoundingClientRect();
            const hidden = getComputedStyle(t).display === "none" || r.width === 0;
            return hidden ? null : [r.left, r.right];
        }).filter(Boolean),
    };
}"""


@pytest.mark.parametrize("width", [1280, 1400, 1920, 390])
def test_every_column_is_reachable_and_the_page_does_not_scroll_sideways(browser, base_url,
                                                                          width):
    visit = Visit(browser, base_url, color_scheme="light",
                  viewport={"width": width, "height": 900})
    try:
        page = visit.open(LEDGER)
        info = page.evaluate(LAYOUT_JS)
        assert not visit.problems, visit.problems
    finally:
        visit.close()
    assert info["page_width"] <= info["window_width"], \
        f"at {width} px the page scrolls sideways: {info['page_width']} > {info['window_width']}"
    assert info["body_width"] <= info["window_width"], info
    assert len(info["wraps"]) >= 2, "the record sets and at least one chapter table"
    for wrap in info["wraps"]:
        assert wrap["right"] <= info["window_width"] + 0.5, f"a table runs off the window: {wrap}"
        for toc_left, toc_right in info["toc"]:  # nothing lies under the "On this page" panel
            assert wrap["right"] <= toc_left or wrap["left"] >= toc_right, (wrap, info["toc"])
        assert max(wrap["heads"]) <= wrap["scroll"] + 1, f"a column is out of reach: {wrap}"
        assert wrap["end_in_view"], f"scrolling the wrapper does not reach the last column: {wrap}"
        if wrap["scroll"] > wrap["client"]:  # wider than the window: it scrolls itself
            assert wrap["overflow"] in ("auto", "scroll"), wrap
    if width >= 1280:  # on a desktop this build's column is in view without scrolling
        chapters = [w for w in info["wraps"] if w["first_set"] is not None]
        assert chapters and all(w["first_set"] <= w["client"] + 1 for w in chapters), chapters


COUNT_JS = """() => [...document.querySelectorAll("table.ledger tbody tr")].filter(
    r => r.offsetParent !== null).length"""


def test_filters_hide_the_rows_that_do_not_match(visit):
    page = visit.open(LEDGER)
    rows = page.locator("table.ledger tbody tr")
    total = rows.count()
    assert total > 100 and page.evaluate(COUNT_JS) == total
    assert f"{total} of {total} claims shown" in page.locator(".ledger-count").inner_text()

    # The page filter lists titles, grouped by chapter (their titles) in the book's order.
    groups = page.eval_on_selector_all("#ledger-filters select[name=page] optgroup",
                                       "gs => gs.map(g => g.label)")
    assert groups == [chapter_title(c) for c in BOOK_ORDER], groups
    assert groups[0] == "Normalization layers", groups
    stem = "normalization/plot_02_batchnorm"
    label = page.locator(f'#ledger-filters select[name=page] option[value="{stem}"]')
    assert label.inner_text().startswith("BatchNorm"), label.inner_text()
    page.select_option("#ledger-filters select[name=page]", value=stem)
    expected = page.locator(f'table.ledger tbody tr[data-page="{stem}"]').count()
    assert 0 < expected < total and page.evaluate(COUNT_JS) == expected
    visible_pages = page.evaluate("""() => [...document.querySelectorAll(
        "table.ledger tbody tr")].filter(r => r.offsetParent).map(r => r.dataset.page)""")
    assert set(visible_pages) == {stem}
    # The filters are kept in the address: a reload opens the same rows.
    assert f"page={stem.replace('/', '%2F')}" in page.url, page.url
    page.reload()
    assert page.evaluate(COUNT_JS) == expected

    page.select_option("#ledger-filters select[name=page]", value="")
    page.select_option("#ledger-filters select[name=status]", value="not-run")
    not_run = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .filter(r => r.querySelector("td.set.not-run")).length""")
    assert 0 < not_run < total and page.evaluate(COUNT_JS) == not_run

    page.select_option("#ledger-filters select[name=status]", value="")
    dtype = "float64"
    page.select_option("#ledger-filters select[name=dtype]", value=dtype)
    with_dtype = page.evaluate(f"""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .filter(r => (r.dataset.dtype || "").split(", ").includes("{dtype}")).length""")
    assert 0 < with_dtype < total and page.evaluate(COUNT_JS) == with_dtype
    page.select_option("#ledger-filters select[name=dtype]", value="")

    # Negative controls are told apart from checks.
    page.select_option("#ledger-filters select[name=role]", value="control")
    controls = page.locator('table.ledger tbody tr[data-role="control"]').count()
    assert 0 < controls < total and page.evaluate(COUNT_JS) == controls
    page.select_option("#ledger-filters select[name=role]", value="")

    # The text search keeps the rows holding every word.
    page.fill("#ledger-filters input[name=q]", "rotary position")
    found = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .filter(r => r.offsetParent).map(r => (r.textContent + " " + r.dataset.page)
                                         .toLowerCase())""")
    assert found and all("rotary" in t and "position" in t for t in found), len(found)
    assert len(found) < total
    page.fill("#ledger-filters input[name=q]", "")

    # One record set: only its column is left.
    sets = page.locator("#ledger-filters select[name=set] option").count() - 1
    assert sets >= 1
    page.select_option("#ledger-filters select[name=set]", index=1)
    visible_heads = page.evaluate("""() => [...document.querySelectorAll(
        "table.ledger thead th.set")].filter(th => th.offsetParent).length""")
    assert visible_heads == 1
    assert not visit.problems, visit.problems


def test_a_pages_ledger_links_open_only_its_claims(visit):
    """A gallery page says what proves it: a visible link under its introduction, and every
    other link of the page to the ledger (Setup's, each folded proof's) opens the ledger on
    that page's rows alone, all of them. Three pages here (the first, one without a proof
    section, the last); test_ledger.py checks every page's links in the HTML."""
    ledger = visit.open(LEDGER, unfold=False)
    rows = ledger.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .map(r => r.dataset.page)""")
    for stem in ["normalization/plot_01_common_recipe", "transformer/plot_06_attention_maps",
                 f"{GALLERY_PAGES[-1].parent.name}/{GALLERY_PAGES[-1].stem}"]:
        page = visit.open(f"generated/{stem}.html", unfold=False)
        intro = page.locator("article p.anatomy-proved-by a")
        assert intro.count() == 1 and intro.is_visible(), f"{stem}: no visible ledger link"
        hrefs = page.eval_on_selector_all(
            "article a[href*='chapters/ledger.html']", "as => as.map(a => a.href)")
        assert all(urlsplit(h).query == f"page={stem}" for h in hrefs), (stem, hrefs)
        intro.click()  # as a reader does
        page.wait_for_url(f"**/{LEDGER}?page={stem}", timeout=60_000)  # 1 MB page
        shown = shown_pages(page)
        assert shown and shown == [p for p in rows if p == stem], (stem, len(shown))
        assert f"{len(shown)} of {len(rows)} claims shown" in \
            page.locator(".ledger-count").inner_text()
    assert not visit.problems, visit.problems


def test_the_counts_reconcile_and_say_whether_a_claim_failed(visit):
    page = visit.open(LEDGER)
    text = " ".join(page.locator("article").inner_text().split())
    m = re.search(r"The table lists (\d+) claims: (\d+) held in this build \(the headline[’']s "
                  r"count\), (\d+) did not run on this machine", text)
    assert m, text[:600]
    listed, held, not_run = map(int, m.groups())
    assert listed == page.locator("table.ledger tbody tr").count()
    statuses = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .map(r => r.querySelector("td.set").classList[2])""")  # this build's column
    assert statuses.count("held") == held and statuses.count("not-run") == not_run
    index = " ".join(visit.open("index.html").locator("article").inner_text().split())
    assert int(re.search(r"(\d+) claims \(\d+ checks\)", index).group(1)) == held
    assert not_run > 0
    if "failed" not in statuses:
        assert "No claim failed in this build." in text
    else:
        assert re.search(r"\d+ claims? failed in this build", text), text[:600]
    # The count of what did not run links those rows, each marked "not run".
    page = visit.open(LEDGER, unfold=False)
    page.click("p.ledger-counts a[href='?status=not-run']")
    page.wait_for_url("**/ledger.html?status=not-run", timeout=60_000)
    marked = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .filter(r => r.offsetParent).map(r => r.querySelector("td.set").innerText)""")
    assert marked == ["not run"] * not_run, marked


def test_sorting_by_discrepancy_orders_rows_by_max_abs(visit):
    """One table, sorted across chapters: by discrepancy over tolerance (closest to failing
    first), by max abs either way, and back to the book's order."""
    page = visit.open(LEDGER)
    for sort, attr, reverse in [("ratio-desc", "ratio", True),
                                ("max-abs-desc", "maxAbs", True),
                                ("max-abs-asc", "maxAbs", False)]:
        page.select_option("#ledger-filters select[name=sort]", value=sort)
        values = page.evaluate(f"""() => [...document.querySelectorAll(
            "table.ledger tbody tr")].map(r => r.dataset.{attr} === undefined ? null
                                              : parseFloat(r.dataset.{attr}))""")
        # NaN (a check of NaN entries, equal_nan=True) sorts with the rows without a number
        values = [None if x is None or x != x else x for x in values]
        numbers = [x for x in values if x is not None]
        assert len(numbers) > 100
        assert values[:len(numbers)] == numbers, "rows without a number come last"
        assert numbers == sorted(numbers, reverse=reverse), sort
        if sort == "ratio-desc":  # across chapters, and every comparison within tolerance
            top = page.evaluate("""() => [...document.querySelectorAll(
                "table.ledger tbody tr")].slice(0, 200).map(r => r.dataset.chapter)""")
            assert len(set(top)) >= 2, set(top)
            finite = [x for x in numbers if x != float("inf")]
            assert finite and max(finite) <= 1 + 1e-9, max(finite)
    # one record set chosen: by that set's own max abs
    page.select_option("#ledger-filters select[name=set]", index=1)
    page.select_option("#ledger-filters select[name=sort]", value="max-abs-asc")
    values = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")]
        .map(r => r.dataset.setMaxAbs.split(" ")[0])""")
    values = ["-" if x == "nan" else x for x in values]  # NaN sorts as no number
    numbers = [float(x) for x in values if x != "-"]
    assert values[:len(numbers)] == [x for x in values if x != "-"]
    assert numbers == sorted(numbers)
    page.select_option("#ledger-filters select[name=set]", value="")
    # back to the book's order: chapters as the book reads, pages and lines in order
    page.select_option("#ledger-filters select[name=sort]", value="order")
    order = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")].map(
        r => [r.dataset.chapter, r.dataset.page, +r.dataset.line])""")
    chapters = list(dict.fromkeys(c for c, _, _ in order))
    assert chapters == ["normalization", "transformer", "positional"], chapters
    for (_, page_a, line_a), (_, page_b, line_b) in zip(order, order[1:]):
        assert page_a != page_b or line_a < line_b, (page_a, line_a, line_b)


PHONE_JS = """() => {
    const wrap = document.querySelector(".ledger-scroll");
    const cards = [...document.querySelectorAll("table.ledger tbody tr")].slice(0, 50);
    return {
        window: innerWidth, page: document.documentElement.scrollWidth,
        wrap: [wrap.scrollWidth, wrap.clientWidth, getComputedStyle(wrap).overflowY],
        table: document.querySelector("table.ledger").getBoundingClientRect().right,
        widest: Math.max(...cards.map(r => r.getBoundingClientRect().right)),
        header: document.querySelector("table.ledger thead").offsetParent !== null,
        card: [...cards[0].querySelectorAll("td")].filter(td => td.offsetParent).map(
            td => td.className.split(" ")[0] + ": " + getComputedStyle(td, "::before")
                .content.replace(/^none$|^"|"$/g, "") + td.innerText.trim()),
    };
}"""


def test_the_phone_layout_is_cards_without_sideways_scrolling(browser, base_url):
    """At 390 px a claim is a card: its page, section, what it checks, its role, how close
    it came to its tolerance and each record set's result, labelled; nothing scrolls
    sideways, neither the page nor the table."""
    visit = Visit(browser, base_url, color_scheme="light",
                  viewport={"width": 390, "height": 844})
    try:
        page = visit.open(LEDGER)
        info = page.evaluate(PHONE_JS)
        assert not visit.problems, visit.problems
    finally:
        visit.close()
    assert info["page"] <= info["window"], info
    assert info["wrap"][0] <= info["wrap"][1], f"the table scrolls sideways: {info['wrap']}"
    assert info["wrap"][2] == "visible", "a box scrolling inside the page"
    assert info["table"] <= info["window"] and info["widest"] <= info["window"], info
    assert not info["header"], "cards need no header row"
    kinds = [c.split(":")[0] for c in info["card"]]
    assert kinds == ["page", "what", "section", "role", "ratio", "set"], info["card"]
    assert info["card"][4].startswith("ratio: discrepancy / tolerance: "), info["card"]
    assert re.match(r"set: cpu \(.*\), torch .*: ", info["card"][5]), info["card"]


def test_a_row_links_to_the_code_cell_holding_its_claim(visit):
    page = visit.open(LEDGER)
    links = page.evaluate("""() => [...document.querySelectorAll("table.ledger tbody tr")].map(
        r => [r.dataset.page, +r.dataset.line, r.querySelector("td a").href,
              r.querySelector("td a").title])""")
    assert all("#cell-" in href for _, _, href, _ in links), "a row without a link to its cell"
    # Rows of three pages: the first claim, one in the middle, the last claim of the book.
    for source_page, line, href, title in [links[0], links[len(links) // 2], links[-1]]:
        # the link's title names the cell's lines in the .py, and they hold the claim's line
        first, last = map(int, re.search(r"lines (\d+)-(\d+)", title).groups())
        assert first <= line <= last, (title, line)
        code_line = (ROOT / "gallery" / f"{source_page}.py").read_text().splitlines()[line - 1]
        parts = urlsplit(href)
        # as a reader's click: the browser opens a folded proof holding the cell, then scrolls
        target = visit.open(f"{parts.path.lstrip('/')}#{parts.fragment}", unfold=False)
        cell = target.locator(f"#{parts.fragment}")
        assert cell.count() == 1, f"no element with id {parts.fragment} on {parts.path}"
        assert code_line.strip() in cell.inner_text(), \
            f"{href} does not show line {line}: {code_line!r}"
        # the browser scrolls to the cell (once the page's layout has settled)
        target.wait_for_function(f"""() => {{
            const top = document.getElementById('{parts.fragment}').getBoundingClientRect().top;
            return 0 <= top && top < innerHeight / 2; }}""")
        assert not visit.problems, visit.problems


@pytest.mark.parametrize("width", [1400, 390])
def test_ledger_screenshots(browser, base_url, width):
    """The top of the ledger at a desktop width and on a phone, for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    visit = Visit(browser, base_url, color_scheme="light",
                  viewport={"width": width, "height": 1400 if width > 400 else 844})
    try:
        page = visit.open(LEDGER)
        page.evaluate("""() => window.scrollTo(0, scrollY - 80 +
            document.getElementById('ledger-filters').getBoundingClientRect().top)""")
        page.wait_for_timeout(300)  # furo's header and "back to top" button settle
        target = SCREENSHOTS / f"chapters_ledger_{width}.png"
        page.screenshot(path=target)
        assert target.stat().st_size > 10_000, f"{target.name} is nearly empty"
        assert not visit.problems, visit.problems
    finally:
        visit.close()
