"""The landing page says where the source lives: a link when the checkout's origin is a
public address, else a plain statement (``_ext/repository.py``)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import repository  # noqa: E402


def test_public_remotes_become_https_and_paths_do_not():
    cases = {
        "https://github.com/o/book.git\n": "https://github.com/o/book",
        "git@github.com:o/book.git": "https://github.com/o/book",
        "ssh://git@gitlab.com/o/book": "https://gitlab.com/o/book",
        "/work/main": None, "file:///srv/book.git": None, "": None,
    }
    assert {url: repository.https_remote(url) for url in cases} == cases


def test_a_checkout_without_a_remote_is_said_plainly(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert repository.remote_of(tmp_path) is None
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin",
                    "git@github.com:o/book.git"], check=True)
    assert repository.remote_of(tmp_path) == "https://github.com/o/book"


def test_the_landing_page_says_where_the_source_lives(site):
    src, out, _ = site
    index = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "index.html").read_text()))
    url = repository.remote_of(src)  # the test build is a copy: no remote, said plainly
    expected = "the book’s repository" if url else "names no public remote"
    assert expected in index and "|clone|" not in index
