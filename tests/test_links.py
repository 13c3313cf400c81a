"""Every link inside the built site leads somewhere, and every figure says what it shows.

Offline, no browser: each HTML page is parsed, each relative href/src must name a file of the
site, each #fragment an id in the page it points into, and each image in a page's main content
needs alt text (or a figure caption) for readers who cannot see it.
"""

from functools import cache
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

# Attributes that point at another file, by tag.
URL_ATTRS = {"a": ["href"], "link": ["href"], "img": ["src", "srcset"], "script": ["src"],
             "source": ["src", "srcset"], "iframe": ["src"], "video": ["src", "poster"],
             "audio": ["src"], "object": ["data"], "embed": ["src"], "form": ["action"]}


def html_pages(out):
    return sorted(p for p in out.rglob("*.html") if not p.relative_to(out).parts[0].startswith("_"))


@cache
def parse(path):
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


@cache
def ids_of(path):
    soup = parse(path)
    return ({tag["id"] for tag in soup.find_all(id=True)}
            | {a["name"] for a in soup.find_all("a", attrs={"name": True})})


def urls_of(soup):
    for tag, attrs in URL_ATTRS.items():
        for element in soup.find_all(tag):
            for attr in attrs:
                value = element.get(attr)
                if not value:
                    continue
                if attr == "srcset":  # "url 1x, url 2x"
                    for candidate in value.split(","):
                        if candidate.strip():
                            yield tag, candidate.split()[0]
                else:
                    yield tag, value.strip()


def check_url(out, page, url):
    """None if `url` (found in `page`) resolves inside the site, else why it does not."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return None  # external (http, mailto, data, javascript): not this test's business
    if parts.path.startswith("/"):
        return "absolute path: breaks when the site is opened from disk"
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target.is_dir():
        target = target / "index.html"
    if not target.is_relative_to(out.resolve()):
        return "points outside the site"
    if not target.is_file():
        return "no such file"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in ids_of(target):
        return f"no id {fragment!r} in {target.relative_to(out.resolve())}"
    return None


def test_every_internal_link_resolves(site):
    _, out, _ = site
    pages = html_pages(out)
    assert len(pages) > 20, f"only {len(pages)} pages?"
    broken, n_checked = [], 0
    for page in pages:
        for tag, url in urls_of(parse(page)):
            n_checked += 1
            why = check_url(out, page, url)
            if why:
                broken.append(f"{page.relative_to(out)}: <{tag}> {url}: {why}")
    assert not broken, f"{len(broken)} broken links of {n_checked}:\n" + "\n".join(broken)


def test_every_image_has_alt_text(site):
    """Each image in a page's main content has non-empty alt text or sits in a captioned figure."""
    _, out, _ = site
    missing, n_images = [], 0
    for page in html_pages(out):
        main = parse(page).find("article", attrs={"role": "main"}) or parse(page)
        for img in main.find_all("img"):
            n_images += 1
            figure = img.find_parent("figure")
            caption = figure.find("figcaption") if figure else None
            if not img.get("alt", "").strip() and not (caption and caption.get_text(strip=True)):
                missing.append(f"{page.relative_to(out)}: {img.get('src')}")
    assert n_images > 0, "no images found: the gallery pages have figures"
    assert not missing, "images without alt text or caption:\n" + "\n".join(missing)


def test_the_link_check_catches_breakage(tmp_path):
    """A missing file, a missing anchor and a path out of the site are all reported."""
    out = tmp_path / "html"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "b.html").write_text('<h2 id="there">x</h2>')
    page = out / "a.html"
    page.write_text('<p id="here">x</p>')
    assert check_url(out, page, "sub/b.html#there") is None
    assert check_url(out, page, "#here") is None
    assert check_url(out, page, "https://example.com/x.js") is None
    assert check_url(out, page, "sub/b.html#nowhere")
    assert check_url(out, page, "#nowhere")
    assert check_url(out, page, "sub/c.html")
    assert check_url(out, page, "../outside.html")
    assert check_url(out, page, "/sub/b.html")
