"""Shared fixtures: a from-scratch build of the whole site in a temporary copy of the sources
(``tools/book_copy.py``), made once per test run."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.book_copy import (  # noqa: E402,F401  (re-exported to the tests)
    GALLERY_PAGES,
    VENV,
    copy_sources,
    make_html,
)

ARTIFACTS = ROOT / "tests" / "artifacts"
SUMMARY = "mutation_sweep_summary.txt"  # the sweep's summary, printed at the end of the run
_STARTED = time.time()


def page_id(path):
    return f"{path.parent.name}/{path.stem}"


def save_artifact(name, text):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(text)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The whole book, built from scratch with -W. Returns (source copy, html dir, log).

    Built once per test run and shared: with pytest-xdist, the first worker that needs it
    builds it into the run's common temporary folder while the others wait on a lock, then
    read the same build. Tests only read it (one that rebuilds works on a copy of its own).
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base is a folder of the run's
        shared = shared.parent
    src, done = shared / "book" / "src", shared / "book" / "built.json"
    with FileLock(shared / "book.lock"):
        if not done.is_file():
            copy_sources(src)
            rc, log = make_html(src)
            save_artifact("clean_build.log", log)
            done.write_text(json.dumps({"rc": rc, "log": log}))
        built = json.loads(done.read_text())
    rc, log = built["rc"], built["log"]
    assert rc == 0, f"clean build failed (log in tests/artifacts/clean_build.log):\n{log[-6000:]}"
    return src, src / "_build" / "html", log


def pytest_terminal_summary(terminalreporter):
    """The mutation sweep's summary, when this run made one (also from a pytest-xdist worker:
    the test writes it to a file, this hook of the main process prints it)."""
    path = ARTIFACTS / SUMMARY
    if path.is_file() and path.stat().st_mtime >= _STARTED:
        terminalreporter.write_sep("-", "mutation sweep")
        for line in path.read_text().splitlines():
            terminalreporter.write_line(line)


# Under pytest-xdist (make test) a file runs in one worker: the longest files start first, so
# that none is left running alone at the end. Within a file the order is unchanged.
LONGEST_FIRST = ["test_mutation_sweep.py", "test_site.py", "test_notebooks_run.py",
                 "test_pages_run_anywhere.py", "test_browser_reading.py", "test_browser.py",
                 "test_measured.py", "test_claims_can_fail.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
