"""The whole site builds from scratch with -W, and every page is there, executed, with figures."""

import re
import shutil
import time

import pytest

from conftest import GALLERY_PAGES, ROOT, make_html, page_id, save_artifact

CHAPTER_SOURCES = sorted(p for p in (ROOT / "chapters").iterdir() if p.suffix in {".rst", ".md"})


def html_of(out, page):
    return out / "generated" / page.parent.name / f"{page.stem}.html"


def test_every_chapter_page_is_built(site):
    _, out, _ = site
    assert (out / "index.html").is_file()
    for chapter in CHAPTER_SOURCES:
        assert (out / "chapters" / f"{chapter.stem}.html").is_file(), chapter.name


def test_every_chapter_lists_its_executed_pages(site):
    """Each gallery folder has a chapter page whose table of contents names all its pages."""
    _, out, _ = site
    for folder in sorted(p for p in (ROOT / "gallery").iterdir()
                         if p.is_dir() and not p.name.startswith(".")):
        chapter_html = (out / "chapters" / f"{folder.name}.html").read_text()
        for page in folder.glob("plot_*.py"):
            assert f"generated/{folder.name}/{page.stem}.html" in chapter_html, page.name


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_gallery_page_was_executed(site, page):
    """Executed pages show their printed output; every page prints its device first."""
    src, out, _ = site
    html = html_of(out, page).read_text()
    assert "sphx-glr-script-out" in html, "no printed output: the page was not executed"
    assert re.search(r"device: (cpu|cuda)", html), "the page does not print its device"
    # sphinx-gallery writes the md5 only after a page ran without error.
    assert (src / "generated" / page.parent.name / f"{page.name}.md5").is_file()


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_every_figure_is_rendered(site, page):
    """One image per plt.show() in the source, each with its 2x version (conf.py's
    image_srcset), each a non-empty file the HTML points at."""
    src, out, _ = site
    n_figures = page.read_text().count("plt.show()")
    folder = src / "generated" / page.parent.name / "images"
    images = sorted(folder.glob(f"sphx_glr_{page.stem}_[0-9][0-9][0-9].png"))
    assert len(images) == n_figures
    doubles = sorted(folder.glob(f"sphx_glr_{page.stem}_*_2_00x.png"))
    assert [d.name for d in doubles] == [i.name.replace(".png", "_2_00x.png") for i in images]
    html_file = html_of(out, page)
    for img in re.findall(r'<img [^>]*src="([^"]+)"', html_file.read_text()):
        target = (html_file.parent / img).resolve()
        assert target.is_file() and target.stat().st_size > 0, img


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_downloads_as_script_and_notebook(site, page):
    _, out, _ = site
    html = html_of(out, page).read_text()
    for suffix in (".py", ".ipynb"):
        links = re.findall(rf'href="([^"]*{re.escape(page.stem + suffix)})"', html)
        assert links, f"no {suffix} download link"
        assert (html_of(out, page).parent / links[0]).resolve().is_file()


def test_site_needs_no_network(site):
    """No script, stylesheet, font or image is loaded from another host; math is local."""
    _, out, _ = site
    remote = re.compile(r'<(?:script|link|img)\b[^>]*(?:src|href)="(?:https?:)?//', re.I)
    for html_file in out.rglob("*.html"):
        text = html_file.read_text()
        assert not remote.search(text), f"{html_file.relative_to(out)} loads a remote resource"
    assert (out / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert list((out / "_static" / "mathjax" / "output" / "chtml" / "fonts").rglob("*.woff"))
    index = (out / "chapters" / "normalization.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in index


def test_copy_button_and_theme(site):
    _, out, _ = site
    page = html_of(out, GALLERY_PAGES[0]).read_text()
    assert "copybutton.js" in page
    assert "furo" in page


def executed(log):
    """How many pages sphinx-gallery executed, from its summary line."""
    match = re.search(r"executed (\d+) out of (\d+) file", log)
    assert match, log[-3000:]
    return int(match.group(1))


def test_rebuilds_do_only_what_changed(site, tmp_path):
    """After the clean build: nothing, prose, one page, a page's name, the device changed.

    One test, in this order, because each step starts from the state the previous one left;
    in a copy of the clean build, which the other tests read meanwhile.
    """
    src = tmp_path / "src"
    shutil.copytree(site[0], src, symlinks=True)
    out = src / "_build" / "html"
    headline = re.compile(r"<strong>\d+ claims</strong> \(\d+ checks\) on \d+ pages")
    ledger = out / "chapters" / "ledger.html"
    before = headline.search(ledger.read_text()).group(0)
    logs = []

    def build(step, **env):
        start = time.perf_counter()
        rc, log = make_html(src, **env)
        logs.append(f"===== {step}: {time.perf_counter() - start:.1f} s\n{log}")
        save_artifact("rebuilds.log", "\n".join(logs))
        assert rc == 0, log[-3000:]
        return log

    # Nothing changed: make does not even start Sphinx.
    log = build("nothing changed")
    assert "-m sphinx" not in log, log

    # A chapter's prose changed: Sphinx runs, no page is executed, the ledger is the same.
    chapter = src / "chapters" / "normalization.rst"
    chapter.write_text(chapter.read_text() + "\n.. a comment added by the test\n")
    log = build("prose changed")
    assert executed(log) == 0
    skipped = re.search(r"excluding (\d+) files? that had previously been run", log)
    assert skipped and int(skipped.group(1)) == len(GALLERY_PAGES), log[-3000:]
    assert headline.search(ledger.read_text()).group(0) == before

    # One page changed: that page alone is executed, and the ledger counts the same claims.
    page = src / GALLERY_PAGES[0].relative_to(ROOT)
    page.write_text(page.read_text() + "\n# a comment added by the test\n")
    log = build("one page changed")
    assert executed(log) == 1
    assert headline.search(ledger.read_text()).group(0) == before

    # A page renamed, in its part's toctree and in the chapters' prose too: the new name
    # runs, the old output is gone (sphinx-gallery keeps it; a stale page outside every
    # toctree would fail the -W build). A page no other page names, so that no other page
    # changes (and runs again) with it.
    gallery = [src / g.relative_to(ROOT) for g in GALLERY_PAGES]
    old = next(g for g in gallery
               if not any(g.stem in other.read_text() for other in gallery if other != g))
    new = old.with_name(old.stem.replace("plot_", "plot_99_", 1) + "_renamed.py")
    prose = [*src.glob("chapters/**/*.rst"), src / "index.rst"]
    texts = {f: f.read_text() for f in prose}
    old.rename(new)
    for f, text in texts.items():
        f.write_text(re.sub(rf"\b{old.stem}\b", new.stem, text))
    assert any(new.stem in f.read_text() for f in src.glob("chapters/*/*.rst"))  # its part
    log = build("page renamed")
    assert executed(log) == 1
    assert not list(src.glob(f"generated/*/{old.stem}.*"))
    assert (out / "generated" / old.parent.name / f"{new.stem}.html").is_file()
    new.rename(old)  # back, for the tests that read the site afterwards
    for f, text in texts.items():
        f.write_text(text)

    # Another device setting (here: CUDA hidden): every page is verified again.
    log = build("device setting changed", CUDA_VISIBLE_DEVICES="")
    assert executed(log) == len(GALLERY_PAGES)
    assert not list(src.glob(f"generated/*/{new.stem}.*"))
    assert "verified on <strong>cpu (" in ledger.read_text()
