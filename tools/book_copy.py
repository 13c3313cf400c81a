"""A copy of the book's sources and `make html` in it, as a reader runs it.

Used by the tests (``tests/conftest.py``: the clean build every test shares) and by
``tools/bench.py``. The copy keeps the developer's own ``_build/`` and ``generated/``
untouched and guarantees that nothing cached is reused: every page is executed again.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a reader's clone holds, less what a build produces and the tests themselves: the build
# must pass with every file of the checkout beside it (a stray .md is a page to Sphinx).
NOT_SOURCES = {".git", ".venv", "_build", "generated", "sg_execution_times.rst", "tests",
               ".ruff_cache", ".pytest_cache", "__pycache__"}
SOURCES = sorted(p.name for p in ROOT.iterdir() if p.name not in NOT_SOURCES)
GALLERY_PAGES = sorted(ROOT.glob("gallery/*/plot_*.py"))
VENV = Path(sys.prefix)  # the interpreter running this: the book's own .venv under `make`


def copy_sources(dest):
    """Copy the book's sources (not its build products) into `dest`, keeping their mtimes."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", ".ruff_cache"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def make_command(src, *args):
    """`make html` in the copy ``src``, with the venv running this (VENV=...): its stamp is
    newer than the copied requirements.txt, so make does not set up another one."""
    if not (VENV / ".installed").is_file():
        raise RuntimeError("run this with the book's venv (`make test`, `make bench`), "
                           f"not {sys.executable}")
    return ["make", "--no-print-directory", "-C", str(src), "html", f"VENV={VENV}", *args]


def build_env(**env):
    return {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", **env}


def make_html(src, page="", **env):
    """`make html` in a copy of the sources; return (returncode, log)."""
    proc = subprocess.run(make_command(src, f"PAGE={page}"), env=build_env(**env),
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
