"""Figures a reader can read (issue 25): every figure of every page, as chromium shows it at
1400 px and on a 390 px phone (proofs unfolded), keeps its tick labels and its legends at
9 px or more; on the phone a figure that would shrink below that keeps its width and
scrolls sideways inside its block (``_ext/rendering.py``), and the page itself does not.

The build records, for each figure a page saves, its width and its smallest fonts
(``_ext/recorder.py``, ``generated/<chapter>/<page>.figures.json``); the page shrinks a
figure to the text column, so a font of ``pt`` points shows at ``pt / 72 * shown / width``
pixels, ``shown`` the image's displayed width and ``width`` the figure's, in inches.
"""

import json

import pytest

from conftest import GALLERY_PAGES, page_id
from test_browser import Visit, base_url, browser  # noqa: F401  (fixtures)

SMALLEST_PX = 9  # the floor, as displayed at 1400 px


def displayed_px(pt, shown_px, width_in):
    return pt / 72 * shown_px / width_in


def test_the_arithmetic():
    # a 6.4 in figure of 10 pt ticks shown at 640 px: 100 dpi, 10 pt = 13.9 px
    assert round(displayed_px(10, 640, 6.4), 1) == 13.9
    assert displayed_px(10, 736, 12) < SMALLEST_PX < displayed_px(10, 736, 11)


@pytest.fixture(scope="module")
def wide(browser, base_url):  # noqa: F811
    visit = Visit(browser, base_url, color_scheme="light",
                  viewport={"width": 1400, "height": 900})
    yield visit
    visit.close()


@pytest.fixture(scope="module")
def phone(browser, base_url):  # noqa: F811
    visit = Visit(browser, base_url, color_scheme="light",
                  viewport={"width": 390, "height": 844})
    yield visit
    visit.close()


def too_small(visit, page, recorded):
    """The figures of ``page`` whose text shows under SMALLEST_PX in ``visit``'s window."""
    shown = visit.open(f"generated/{page.parent.name}/{page.stem}.html")
    widths, overflow = shown.evaluate("""() => {
        document.querySelectorAll('details').forEach(d => d.open = true);
        return [[...document.querySelectorAll(
            'article img.sphx-glr-single-img, article img.sphx-glr-multi-img')]
            .map(i => i.getBoundingClientRect().width),
            document.documentElement.scrollWidth - window.innerWidth]; }""")
    assert len(widths) == len(recorded) > 0, (len(widths), len(recorded))
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"
    small = []
    for n, (px, fig) in enumerate(zip(widths, recorded), 1):
        for what in ("tick_pt", "legend_pt"):
            if fig[what] is not None:
                size = displayed_px(fig[what], px, fig["width_in"])
                if size < SMALLEST_PX:
                    small.append(f"figure {n}: {what[:-3]}s {size:.1f} px "
                                 f"({fig[what]:.1f} pt, {fig['width_in']} in shown at {px:.0f} px)")
    return small


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_every_figure_reads_at_9_px(wide, phone, site, page):
    src, _, _ = site
    recorded = json.loads((src / "generated" / page.parent.name /
                           f"{page.stem}.figures.json").read_text())
    assert not too_small(wide, page, recorded), "at 1400 px"
    assert not too_small(phone, page, recorded), "at 390 px"
