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
SOURCES = ["conf.py", "index.rst", "chapters", "gallery", "_static", "_ext"]
GALLERY_PAGES = sorted(ROOT.glob("gallery/*/plot_*.py"))


def page_id(path):
    return f"{path.parent.name}/{path.stem}"


def copy_sources(dest):
    """Copy the book's sources (not its build products) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def sphinx_build(src, out, page=""):
    """Run the same build as `make html` (same options), return (returncode, combined log)."""
    env = {**os.environ, "PAGE": page, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n",
           str(src), str(out)]
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def save_artifact(name, text):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(text)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The whole book, built from scratch with -W. Returns (source copy, html dir, log)."""
    src = copy_sources(tmp_path_factory.mktemp("book") / "src")
    out = src / "_build" / "html"
    rc, log = sphinx_build(src, out)
    save_artifact("clean_build.log", log)
    assert rc == 0, f"clean build failed (log in tests/artifacts/clean_build.log):\n{log[-6000:]}"
    return src, out, log
