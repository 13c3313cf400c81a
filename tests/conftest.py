"""Shared fixtures: a from-scratch build of the whole site in a temporary copy of the sources.

The copy keeps the developer's own _build/ and generated/ untouched and guarantees that
nothing cached is reused: every page is executed again.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
# Everything a build needs; nothing it produces.
SOURCES = ["Makefile", "requirements.txt", "conf.py", "index.rst", "chapters", "gallery",
           "_static", "_ext", "verified"]
GALLERY_PAGES = sorted(ROOT.glob("gallery/*/plot_*.py"))
VENV = Path(sys.prefix)  # the interpreter running the tests: the book's own .venv under `make test`


def page_id(path):
    return f"{path.parent.name}/{path.stem}"


def copy_sources(dest):
    """Copy the book's sources (not its build products) into `dest`, keeping their mtimes."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def make_html(src, page="", **env):
    """`make html` in a copy of the sources, as a reader runs it; return (returncode, log).

    The copy uses the venv running the tests (VENV=...): its stamp is newer than the copied
    requirements.txt, so make does not set up another one.
    """
    if not (VENV / ".installed").is_file():
        raise RuntimeError("run the tests with `make test` (the book's venv), "
                           f"not {sys.executable}")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", **env}
    cmd = ["make", "--no-print-directory", "-C", str(src), "html", f"VENV={VENV}", f"PAGE={page}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


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
