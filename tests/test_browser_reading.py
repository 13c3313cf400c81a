"""The site as readers see it: widths, contrast, figures, phones, chapter grids (headless chromium).

Measured in the real browser on the clean build of the `site` fixture: code and printed output
fit furo's content column at 1400 px, text is readable in both themes (WCAG AA, 4.5:1), every
figure has a 2x source a click opens, a 390 px phone never scrolls the page sideways, and each
chapter ends with a grid of its pages. Screenshots land in tests/artifacts/screenshots/reading-*.
"""

import re

import pytest

from conftest import GALLERY_PAGES
from test_browser import (  # noqa: F401  (fixtures)
    CHAPTERS,
    GALLERY_HTML,
    SCREENSHOTS,
    Visit,
    base_url,
    browser,
    visit,
)

DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
PAGES = ["index.html", *CHAPTERS, "chapters/ledger.html", "chapters/environment.html",
         *GALLERY_HTML]
# Blocks allowed to scroll sideways on a desktop, each with its reason: (page, text in the block).
WIDE_OK = [
    # The notes' own code, quoted verbatim to show their mistakes; two of its lines are longer
    # than 88 columns, and rewrapping them would no longer quote the notes.
    ("generated/normalization/plot_03_instancenorm.html", "# actually affine=True is default"),
    ("generated/normalization/plot_04_layernorm.html", "# layer norm, x is [bz, seq_len, dim]"),
]

# Every <pre> in the article: the widest line, its scroll and client widths, code or output.
PRE_WIDTHS = """() => [...document.querySelectorAll('article pre')].map(pre => ({
    scroll: pre.scrollWidth, client: pre.clientWidth,
    kind: pre.closest('.sphx-glr-script-out') ? 'output' : 'code',
    line: pre.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''),
}))"""

# The text colour and the effective background (the nearest opaque background-color up the
# tree) of every element with its own visible text, by kind.
COLOURS = """() => {
    const rgba = s => (s.match(/[\\d.]+/g) || []).map(Number);
    const background = el => {
        for (; el; el = el.parentElement) {
            const c = rgba(getComputedStyle(el).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] === 1)) return c.slice(0, 3);
            if (c.length === 4 && c[3] > 0) return null;  // translucent: not judged here
        }
        return [255, 255, 255];
    };
    const own = el => [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    const pick = (kind, sel) => [...document.querySelectorAll(sel)]
        .filter(el => own(el) && el.getClientRects().length)
        .map(el => ({kind, text: el.textContent.trim().slice(0, 40),
                     color: rgba(getComputedStyle(el).color).slice(0, 3), bg: background(el)}));
    return [
        ...pick('body', 'article p, article li'),
        ...pick('code', 'article .highlight pre:not(.sphx-glr-script-out pre), ' +
                        'article .highlight pre:not(.sphx-glr-script-out pre) span'),
        ...pick('output', 'article .sphx-glr-script-out pre'),
        ...[...document.querySelectorAll('article div.sphx-glr-script-out')].map(el => ({
            kind: 'output label', text: getComputedStyle(el, '::before').content,
            color: rgba(getComputedStyle(el, '::before').color).slice(0, 3),
            bg: background(el)})),
    ];
}"""


def luminance(rgb):
    def channel(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b):
    hi, lo = sorted([luminance(a), luminance(b)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture(scope="module")
def desktop(browser, base_url):
    v = Visit(browser, base_url, color_scheme="light", viewport=DESKTOP)
    yield v
    v.close()


@pytest.fixture(scope="module")
def phone(browser, base_url):
    v = Visit(browser, base_url, color_scheme="light", viewport=PHONE, device_scale_factor=2,
              is_mobile=True, has_touch=True)
    yield v
    v.close()


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_code_and_output_fit_the_column(desktop, width):
    """88 columns fit furo's content column (46em) at the usual desktop widths."""
    desktop.page.set_viewport_size({"width": width, "height": DESKTOP["height"]})
    too_wide = []
    for path in [*CHAPTERS, *GALLERY_HTML]:
        for pre in desktop.open(path).evaluate(PRE_WIDTHS):
            if pre["scroll"] > pre["client"] + 1 and not any(
                    path == p and text in pre["line"] for p, text in WIDE_OK):
                too_wide.append(f"{width} px, {path}: {pre['kind']} {pre['scroll']} px in "
                                f"{pre['client']} px, widest line ({len(pre['line'])} chars): "
                                f"{pre['line']!r}")
    desktop.page.set_viewport_size(DESKTOP)
    assert not too_wide, "\n".join(too_wide)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_contrast_meets_wcag_aa(browser, base_url, scheme):
    v = Visit(browser, base_url, color_scheme=scheme, viewport=DESKTOP)
    try:
        low, kinds = [], set()
        for path in ["generated/normalization/plot_02_batchnorm.html",
                     "generated/transformer/plot_07_attention_cost.html",
                     "chapters/transformer.html"]:
            for el in v.open(path).evaluate(COLOURS):
                if el["bg"] is None:
                    continue
                kinds.add(el["kind"])
                ratio = contrast(el["color"], el["bg"])
                if ratio < 4.5:
                    low.append(f"{path} {el['kind']} {ratio:.2f}:1 rgb{tuple(el['color'])} on "
                               f"rgb{tuple(el['bg'])}: {el['text']!r}")
        assert kinds == {"body", "code", "output", "output label"}, kinds
        assert not low, "\n".join(sorted(set(low)))
    finally:
        v.close()


def test_every_figure_has_a_2x_source_a_click_opens(phone):
    figures = 0
    for path in GALLERY_HTML:
        for img in phone.open(path).evaluate("""async () => Promise.all([...document
                .querySelectorAll('img.sphx-glr-single-img, img.sphx-glr-multi-img')]
                .map(async img => {
            // the files' own pixel widths (an <img> with srcset reports CSS pixels)
            const [one, two] = [img.getAttribute('src'), img.currentSrc].map(src => {
                const i = new Image(); i.src = src; return i; });
            await Promise.all([one.decode(), two.decode()]);
            return {srcset: img.getAttribute('srcset') || '', current: img.currentSrc,
                    natural: two.naturalWidth, one: one.naturalWidth,
                    shown: img.getBoundingClientRect().width,
                    box: img.closest('a.book-figure')
                         ? img.closest('a.book-figure').getBoundingClientRect().width : 1e9,
                    href: img.closest('a.book-figure') ? img.closest('a.book-figure').href
                                                       : null};
        }))"""):
            figures += 1
            two = re.search(r"(\S+) 2(\.0+)?x", img["srcset"])
            assert two, f"{path}: no 2x source in srcset {img['srcset']!r}"
            # a 2x screen loads the 2x file, and a click opens it
            assert img["current"].endswith(two.group(1).split("/")[-1]), (path, img)
            assert img["href"] and img["href"] == img["current"], (path, img)
            assert abs(img["natural"] - 2 * img["one"]) <= 1, (path, img)  # twice the pixels
            # a figure wider than the phone (kept wide enough to read) scrolls in its box
            assert img["box"] <= PHONE["width"], (path, img)
    assert figures >= len(GALLERY_HTML) // 2, figures


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_phone_page_never_scrolls_sideways(browser, base_url, scheme):
    v = Visit(browser, base_url, color_scheme=scheme, viewport=PHONE, is_mobile=True,
              has_touch=True)
    try:
        wide = []
        for path in PAGES:
            sw, iw = v.open(path).evaluate(
                "() => [document.documentElement.scrollWidth, window.innerWidth]")
            if sw > iw:
                wide.append(f"{path}: {sw} px in {iw} px")
        assert not wide, "\n".join(wide)
    finally:
        v.close()


def test_phone_shows_what_scrolls_sideways(phone):
    """At 390 px wide code, equations and tables scroll inside their box, with a visible hint
    (shadows at the edges with more to show); the "Out:" label sits above its block."""
    page = phone.open("chapters/transformer.html")
    hints = page.evaluate("""() => [...document.querySelectorAll(
            'article .math-wrapper, article .table-wrapper, article .highlight pre')]
        .filter(el => el.scrollWidth > el.clientWidth + 1)
        .map(el => [el.className || el.tagName, getComputedStyle(el).overflowX,
                    getComputedStyle(el).backgroundImage.includes('radial-gradient')])""")
    assert hints, "nothing on the transformer chapter scrolls at 390 px: pick another page"
    assert all(ov in {"auto", "scroll"} and shadow for _, ov, shadow in hints), hints
    page = phone.open("generated/normalization/plot_02_batchnorm.html")
    label = page.evaluate("""() => { const out = document.querySelector('div.sphx-glr-script-out');
        const pre = out.querySelector('pre').getBoundingClientRect();
        return [out.getBoundingClientRect().left, pre.left, pre.width, out.clientWidth]; }""")
    left, pre_left, pre_width, width = label
    assert pre_left - left < 4 and pre_width >= width - 4, label  # the block has the full width


def test_chapter_pages_open_with_a_map_of_their_parts(desktop):
    """A chapter orients first: right after its introduction, its parts in order, each a
    grid of its pages' cards (title, thumbnail), every page of the chapter once, in order."""
    for chapter in ["normalization", "transformer", "positional"]:
        page = desktop.open(f"chapters/{chapter}.html")
        grid = page.evaluate("""() => {
            const grids = [...document.querySelectorAll('article .sphx-glr-thumbnails')];
            const sections = [...document.querySelectorAll('article section section')];
            const first = grids.length && grids[0].closest('section section');
            return {links: grids.flatMap(g => [...g.querySelectorAll(
                        '.sphx-glr-thumbcontainer a.reference')]
                        .map(a => new URL(a.href).pathname.split('/').slice(-2).join('/'))),
                    titles: grids.flatMap(g => [...g.querySelectorAll(
                        '.sphx-glr-thumbnail-title')].map(t => t.textContent.trim())),
                    thumbs: grids.flatMap(g => [...g.querySelectorAll('img')]
                        .map(i => i.naturalWidth)),
                    parts: [...document.querySelectorAll('article .book-part > p a')]
                        .map(a => a.textContent.trim()),
                    section: sections.indexOf(first)};
        }""")
        expected = [f"{chapter}/{p.stem}.html" for p in GALLERY_PAGES if p.parent.name == chapter]
        assert grid["links"] == expected, (chapter, grid["links"])
        assert all(grid["titles"]) and len(grid["titles"]) == len(expected), grid["titles"]
        assert all(w > 0 for w in grid["thumbs"]), grid["thumbs"]
        assert len(grid["parts"]) >= 3 and all(grid["parts"]), grid["parts"]
        assert grid["section"] == 0, (chapter, "the map is not the chapter's first section")


def test_gallery_pages_hide_linter_comments_and_the_download_note(desktop):
    for path in GALLERY_HTML:
        page = desktop.open(path)
        code = page.evaluate("() => [...document.querySelectorAll('article .highlight pre')]"
                             ".map(p => p.textContent).join('\\n')")
        assert "# noqa" not in code, path
        assert not page.locator(".sphx-glr-download-link-note").is_visible(), path


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_reading_screenshots(browser, base_url, scheme):
    """A gallery page and a chapter page, at 1400 and 390 px, at the first printed output and
    figure and at the end of the chapter: for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, viewport in [("1400", DESKTOP), ("390", PHONE)]:
        v = Visit(browser, base_url, color_scheme=scheme, viewport=viewport)
        try:
            for path, anchor in [("generated/normalization/plot_06_running_stats.html",
                                  "img.sphx-glr-single-img"),
                                 ("generated/normalization/plot_02_batchnorm.html",
                                  "div.sphx-glr-script-out"),
                                 ("chapters/transformer.html", ".math-wrapper"),
                                 ("chapters/transformer.html", ".sphx-glr-thumbnails")]:
                page = v.open(path)
                page.locator(anchor).first.scroll_into_view_if_needed()
                page.evaluate("(y) => window.scrollBy(0, y)", 0)
                stem = path.split("/")[-1].removesuffix(".html")
                target = SCREENSHOTS / f"reading-{stem}-{anchor.split('.')[-1]}-{name}-{scheme}.png"
                page.screenshot(path=str(target))
                assert target.stat().st_size > 10_000, target
        finally:
            v.close()


def test_search_snippets_show_math_without_its_delimiters(visit):
    """Sphinx quotes a page's HTML before MathJax ran: `\\(D_h\\)` is shown as `D_h`."""
    page = visit.open("search.html?q=softmax")
    page.wait_for_function("document.querySelector('#search-results .search-summary')"
                           "?.textContent.includes('finished')")
    page.wait_for_function("document.querySelectorAll('#search-results p.context').length > 0")
    page.wait_for_timeout(500)  # the snippets arrive page by page
    snippets = page.eval_on_selector_all("#search-results p.context",
                                         "ps => ps.map(p => p.textContent)")
    assert snippets and not [s for s in snippets if "\\(" in s or "\\)" in s], snippets
    assert not visit.problems, visit.problems
