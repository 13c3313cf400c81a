"""Shared fixtures: a from-scratch build of the whole site in a temporary copy of the sources
(``tools/book_copy.py``), made once per test run."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.book_copy import (  # noqa: E402,F401  (re-exported to the tests)
    GALLERY_PAGES,
    SOURCES,
    VENV,
    copy_sources,
    make_html,
)

ARTIFACTS = ROOT / "tests" / "artifacts"


def page_id(path):
    return f"{path.parent.name}/{path.stem}"


def save_artifact(name, text):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(text)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The whole book, built from scratch with -W. Returns (source copy, html dir, log)."""
    src = copy_sources(tmp_path_factory.mktemp("book") / "src")
    out = src / "_build" / "html"
    rc, log = make_html(src)
    save_artifact("clean_build.log", log)
    assert rc == 0, f"clean build failed (log in tests/artifacts/clean_build.log):\n{log[-6000:]}"
    return src, out, log
