"""The reader's site in a real browser: Debian's headless chromium, driven by Playwright.

The site from the `site` fixture is served on 127.0.0.1. Every page must load without a console
error and without asking any other host for anything; math must be typeset, images decoded,
code copyable, the theme switchable and the search able to find a page. Screenshots land in
tests/artifacts/screenshots/ for a person to look at.

Without /usr/bin/chromium (or $CHROMIUM) the module is skipped; `.ci/run` installs it with apt.
Playwright's own browser download is never used.
"""

import functools
import http.server
import os
import threading
from urllib.parse import urlsplit

import pytest

from conftest import ARTIFACTS, GALLERY_PAGES

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium, or set $CHROMIUM): "
                "browser tests skipped", allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402  (only once chromium is known)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 # Every other host fails at once, so a page that reaches out fails fast,
                 # offline too.
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = ARTIFACTS / "screenshots"
CHAPTERS = ["chapters/normalization.html", "chapters/transformer.html", "chapters/positional.html"]
GALLERY_HTML = [f"generated/{p.parent.name}/{p.stem}.html" for p in GALLERY_PAGES]
# Requests the browser makes by itself, not a page's fault. None: the site declares its favicon,
# so chromium does not ask for /favicon.ico.
BROWSER_OWN = set()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the browser hangs up on half-sent files when it moves on: not an error


@pytest.fixture(scope="module")
def base_url(site):
    """The built site served over HTTP on a free port of 127.0.0.1."""
    _, out, _ = site
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Visit:
    """A browser context that records everything a page does wrong while it loads."""

    def __init__(self, browser, base_url, **context_options):
        self.origin = urlsplit(base_url).netloc
        self.context = browser.new_context(base_url=base_url, **context_options)
        self.context.set_default_timeout(15_000)  # a local page is there in well under a second
        self.problems = []
        self.context.on("request", self.on_request)
        self.page = self.context.new_page()
        self.page.on("console", self.on_console)
        self.page.on("pageerror", lambda err: self.problems.append(f"page error: {err}"))
        self.page.on("response", self.on_response)
        self.page.on("websocket", lambda ws: self.on_request(ws))

    def on_request(self, request):
        parts = urlsplit(request.url)  # data: and blob: URLs are part of the page
        if parts.scheme in {"http", "https", "ws", "wss"} and parts.netloc != self.origin:
            self.problems.append(f"request to another host: {request.url}")

    def on_console(self, msg):
        if msg.type == "error" and urlsplit(msg.location.get("url", "")).path not in BROWSER_OWN:
            self.problems.append(f"console error: {msg.text} ({msg.location.get('url')})")

    def on_response(self, response):
        if response.status >= 400 and urlsplit(response.url).path not in BROWSER_OWN:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def open(self, path, idle=False, unfold=True):
        """Load a page, wait for MathJax to finish typesetting and for fonts and images.

        ``unfold``: open every folded proof and answer (``<details>``, _ext/anatomy.py) first,
        so that what a test measures is all of the page; False: the page as it opens."""
        self.problems.clear()
        self.page.goto(path, wait_until="networkidle" if idle else "load")
        if unfold:
            self.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        self.page.evaluate("""async () => {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise)
                await MathJax.startup.promise;
            await document.fonts.ready;
            await Promise.all([...document.images].map(img => img.decode().catch(() => null)));
        }""")
        return self.page

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, base_url):
    v = Visit(browser, base_url, color_scheme="light")
    yield v
    v.close()


SURVEY_JS = r"""() => {
    const main = document.querySelector("article[role=main]");
    const blocks = [...main.querySelectorAll("div.highlight")].filter(d => d.querySelector("pre"));
    const maths = [...main.querySelectorAll(".math")];
    return {
        images: [...document.images].map(
            i => [i.getAttribute("src"), i.complete ? i.naturalWidth : 0]),
        code_blocks: blocks.length,
        copy_buttons: blocks.filter(d => d.querySelector(":scope > button.copybtn")).length,
        math: maths.length,
        untypeset: maths.filter(m => !m.querySelector("mjx-container")).length,
        tex_errors: [...main.querySelectorAll("mjx-merror")].map(
            e => e.getAttribute("data-mjx-error") || e.textContent),
        raw_tex: ["\\(", "\\["].filter(raw => main.innerText.includes(raw)),
    };
}"""


@pytest.fixture(scope="module")
def survey(site, browser, base_url):
    """Load every page of the site once and record what each test below asserts on.

    One context for all pages keeps this to a few seconds. On each gallery page the first
    Python cell's copy button is clicked and the clipboard read back.
    """
    _, out, _ = site
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
    visit = Visit(browser, base_url, color_scheme="light",
                  permissions=["clipboard-read", "clipboard-write"])
    report = {}
    try:
        for path in (p for p in pages if not p.startswith("_")):
            # networkidle: late requests (MathJax, fonts) count too
            page = visit.open(path, idle=True)
            info = page.evaluate(SURVEY_JS)
            cell = page.locator("article[role=main] div.highlight-Python div.highlight").first
            if path in GALLERY_HTML and cell.locator("> button.copybtn").count():
                page.evaluate("navigator.clipboard.writeText('nothing copied')")
                cell.hover()
                cell.locator("> button.copybtn").click()
                info["copied"] = page.evaluate("navigator.clipboard.readText()")
                info["shown"] = cell.locator("pre").inner_text()
            info["problems"] = list(visit.problems)
            report[path] = info
    finally:
        visit.close()
    return report


def test_every_page_is_visited(survey):
    assert set(CHAPTERS + GALLERY_HTML + ["index.html", "search.html"]) <= set(survey)


def test_every_page_loads_cleanly(survey):
    """No console error, no page error, no failed request, nothing asked of another host."""
    failures = {path: info["problems"] for path, info in survey.items() if info["problems"]}
    assert not failures, "\n".join(f"{p}:\n  " + "\n  ".join(v) for p, v in failures.items())


def test_math_is_typeset(survey):
    """Every math element became MathJax output without a TeX error; no raw \\( or \\[ is left."""
    assert survey["chapters/normalization.html"]["math"] > 0, \
        "the normalization chapter has no math?"
    failures = {path: {k: info[k] for k in ("math", "untypeset", "tex_errors", "raw_tex")}
                for path, info in survey.items()
                if info["untypeset"] or info["tex_errors"] or info["raw_tex"]}
    assert not failures, failures


def test_every_image_is_decoded(survey):
    """Every <img> on every page loaded and decoded (naturalWidth > 0)."""
    broken = {path: [src for src, width in info["images"] if width == 0]
              for path, info in survey.items()}
    broken = {path: srcs for path, srcs in broken.items() if srcs}
    assert not broken, broken
    for source, path in zip(GALLERY_PAGES, GALLERY_HTML):
        n_figures = source.read_text().count("plt.show()")
        assert len(survey[path]["images"]) == n_figures, f"{path}: expected {n_figures} figures"


def test_every_code_block_has_a_copy_button(survey):
    missing = {path: f"{info['copy_buttons']} copy buttons for {info['code_blocks']} code blocks"
               for path, info in survey.items() if info["copy_buttons"] != info["code_blocks"]}
    assert not missing, missing
    assert all(survey[path]["code_blocks"] for path in GALLERY_HTML)


@pytest.mark.parametrize("path", GALLERY_HTML)
def test_copy_button_copies_the_code(survey, path):
    """Clicking a Python cell's button puts exactly the cell's code on the clipboard."""
    assert "copied" in survey[path], "the first Python cell has no copy button"
    copied, shown = survey[path]["copied"], survey[path]["shown"]
    assert copied.rstrip("\n") == shown.rstrip("\n"), f"copied\n{copied!r}\ninstead of\n{shown!r}"
    assert "import torch" in copied, "the first cell should import torch"


def test_theme_toggle_switches_light_and_dark(visit):
    """Furo's toggle cycles auto -> dark -> light; the page background follows and the choice
    sticks."""
    page = visit.open(GALLERY_HTML[0])
    toggle = page.locator("button.theme-toggle:visible").first
    assert toggle.count(), "no visible theme toggle (furo hides it when its script did not run)"

    def state():
        return page.evaluate("[document.body.dataset.theme, "
                             "getComputedStyle(document.body).backgroundColor]")

    seen = [state()]
    for _ in range(3):
        toggle.click()
        seen.append(state())
    themes = [theme for theme, _ in seen]
    assert all(a != b for a, b in zip(themes, themes[1:])), \
        f"a click did not change the theme: {themes}"
    background = dict(seen)
    assert {"light", "dark"} <= set(background), \
        f"the toggle never reached light and dark: {themes}"
    assert background["light"] != background["dark"], \
        f"same background in light and dark: {background}"
    toggle.click()  # to dark once more (the cycle from auto in a light browser)
    chosen = page.evaluate("document.body.dataset.theme")
    page.reload()
    assert page.evaluate("document.body.dataset.theme") == chosen, \
        "the chosen theme is lost on reload"


TOPICS = {  # a topic's name -> the page that teaches it (its `.. index:: ! name` entry)
    "RoPE": "positional/plot_04_rope", "KV cache": "transformer/plot_09_kv_cache",
    "GQA": "transformer/plot_10_gqa_mqa", "ALiBi": "positional/plot_06_alibi",
    "RMSNorm": "normalization/plot_05_groupnorm_rmsnorm",
    "LayerNorm": "normalization/plot_04_layernorm",
    "BatchNorm": "normalization/plot_02_batchnorm", "YaRN": "positional/plot_09_rope_scaling",
}


def search(page, query, quotes=True):
    """The results of the site's search for ``query``: [(path, quote)], best first, once
    Sphinx says it has finished (and, with ``quotes``, once the first result is quoted)."""
    page.wait_for_function(  # Sphinx writes "Search finished, found N pages ..." when done
        "document.querySelector('#search-results .search-summary')"
        "?.textContent.includes('finished')")
    if quotes:  # each quote is fetched after its result is listed
        page.wait_for_selector("#search-results li:first-child p.context")
    listed = page.eval_on_selector_all("#search-results li", """ls => ls.map(l => [
        l.querySelector('a').href, l.querySelector('p.context')?.textContent ?? null])""")
    return [(urlsplit(href).path.lstrip("/"), quote) for href, quote in listed]


@pytest.mark.parametrize("query", TOPICS)
def test_search_ranks_a_topics_page_first(visit, query):
    """Each page declares its topics as main index entries, which Sphinx's search scores
    above any title or text match: searching a topic's name lists its page first, once, and
    quotes it from its title (not from sphinx-gallery's download note)."""
    results = search(visit.open(f"search.html?q={query}"), query)
    paths = [path for path, _ in results]
    assert len(paths) > 1, paths  # other pages mention it too: the ranking is the point
    assert paths[0] == f"generated/{TOPICS[query]}.html", (query, paths[:5])
    assert paths.count(paths[0]) == 1, f"{paths[0]} is listed more than once: {paths}"
    quote = results[0][1]
    assert query.lower() in quote.lower() and "download" not in quote.lower(), quote
    assert not visit.problems, visit.problems


def test_search_from_disk_ranks_the_same_without_quotes(site, browser):
    """Opened from disk (file://, as the README says), a page may not fetch another: the
    search lists the same pages first, quotes none and logs no error (make serve quotes)."""
    _, out, _ = site
    page = browser.new_page()
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        for query, expected in TOPICS.items():
            page.goto((out / "search.html").as_uri() + f"?q={query}")
            search(page, query, quotes=False)
            page.wait_for_timeout(200)  # a quote, if one were fetched, would be here by now
            results = search(page, query, quotes=False)
            assert results[0][0].endswith(f"/generated/{expected}.html"), (query, results[:3])
            assert [quote for _, quote in results if quote is not None] == []
    finally:
        page.close()
    assert errors == [], errors[:5]


@pytest.mark.parametrize("query, expected", [
    ("RoPE", "generated/positional/plot_04_rope.html"),
    ("running_var", "generated/normalization/plot_02_batchnorm.html"),
])
def test_search_finds_the_page(visit, query, expected):
    paths = {path for path, _ in search(visit.open(f"search.html?q={query}"), query)}
    assert expected in paths, \
        f"search for {query!r} did not list {expected}; it found {sorted(paths)}"
    assert not visit.problems, visit.problems


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots(browser, base_url, scheme):
    """Full-page screenshots of the chapter pages and one gallery page, for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    visit = Visit(browser, base_url, color_scheme=scheme, viewport={"width": 1280, "height": 900})
    try:
        paths = CHAPTERS + ["generated/normalization/plot_06_running_stats.html"]
        if scheme == "dark":  # dark mode matters most where figures are
            paths = paths[-1:]
        for path in paths:
            page = visit.open(path)
            target = SCREENSHOTS / f"{path.replace('/', '_').removesuffix('.html')}_{scheme}.png"
            page.screenshot(path=target, full_page=True)
            assert target.stat().st_size > 10_000, f"{target.name} is nearly empty"
        assert not visit.problems, visit.problems
    finally:
        visit.close()
