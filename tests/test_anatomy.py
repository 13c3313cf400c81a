"""Every page is a lesson whose code lifts (../shared/STYLE.md, "Page anatomy").

Static checks by ``tools/anatomy.py`` (a page's author runs the same: ``python -m
tools.anatomy``): a "You will learn" list and prerequisites, a displayed equation, no
definition reading a page global, copies identical to their source, one name one block. Then
the promise they stand for, run: each cell that defines something, pasted into a fresh
interpreter after the page's Setup cell alone, runs. Synthetic pages show each check fails.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import GALLERY_PAGES, ROOT, VENV, page_id
from tools import anatomy

EVERY = {page_id(p) for p in GALLERY_PAGES}


def pages(strict):
    """Every page; those still to be rewritten are expected to fail (strict: a page that
    passes must leave ``anatomy.NOT_YET``)."""
    return [pytest.param(p, id=page_id(p), marks=[pytest.mark.xfail(
        strict=strict, reason="not yet in the lesson-first anatomy")]
        if page_id(p) in anatomy.NOT_YET else []) for p in GALLERY_PAGES]


@pytest.fixture(scope="module")
def every_page():
    return [anatomy.read_page(p) for p in anatomy.pages()]


@pytest.mark.parametrize("path", pages(strict=True))
def test_the_page_opens_with_a_lesson(path):
    found = anatomy.lesson_findings(anatomy.read_page(path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", pages(strict=False))
def test_no_definition_reads_a_page_global(path):
    found = anatomy.lift_findings(anatomy.read_page(path))
    assert not found, "\n".join(found)


def test_copies_match_their_source_and_a_name_means_one_block(every_page):
    found = [f for f in anatomy.copy_findings(every_page)
             if not any(name in f for name in anatomy.NOT_YET)]
    assert not found, "\n".join(found)


# The paste test: a child process per run, MPLBACKEND=Agg, in an empty folder.
PASTE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tools import anatomy
out = {}
for path in anatomy.pages(sys.argv[2]):
    page = anatomy.read_page(path)
    setup = page.cells[0][1]
    cells = sorted({d.cell for d in page.definitions if d.cell})
    for n in cells:
        namespace = {"__name__": "__main__"}
        try:
            exec(compile(setup, f"{page.name}: Setup", "exec"), namespace)
            exec(compile(page.cells[n][1], f"{page.name}: cell {n}", "exec"),
                 {"__name__": "__main__", **{k: v for k, v in namespace.items()}})
        except BaseException as error:
            out[f"{page.name}: cell {n} (line {page.cells[n][0]})"] = repr(error)
print(json.dumps(out))
"""


def paste_cells(pattern, cwd, gallery=None):
    env = {"MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    script = PASTE if gallery is None else PASTE.replace(
        "from tools import anatomy", "from tools import anatomy; from pathlib import Path; "
        f"anatomy.GALLERY = Path({str(gallery)!r})")
    proc = subprocess.run([str(VENV / "bin" / "python"), "-c", script, str(ROOT), pattern],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_definition_cell_runs_after_the_setup_cell_alone(tmp_path):
    """What a reader does: Setup, then one cell with a definition, pasted into a notebook."""
    failed = {where: error for where, error in paste_cells("", tmp_path).items()
              if where.split(":")[0] not in anatomy.NOT_YET}
    assert not failed, "\n".join(f"{k}: {v}" for k, v in failed.items())


# --- each check can fail ------------------------------------------------------------------

GOOD = '''"""
Title
=====

Intro.

**You will learn**

- one
- two
- three

**Prerequisites:** none.
"""

# %%
# Setup
# -----
import torch

Dh = 4

# %%
# The idea
# --------
# .. math::
#
#    y = x

# %%
from torch import nn


def width(x):
    """x (..., Dh) -> Dh."""
    return x.shape[-1]
'''


def write(folder, chapter, name, text):
    (folder / chapter).mkdir(parents=True, exist_ok=True)
    path = folder / chapter / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_each_check_fails_on_a_page_that_breaks_it(tmp_path):
    good = anatomy.read_page(write(tmp_path, "ch", "plot_01_good", GOOD))
    assert not anatomy.lesson_findings(good) and not anatomy.lift_findings(good)

    # A page global (Dh), and a module imported in another cell (nn): both named.
    bad = GOOD.replace('return x.shape[-1]', 'return nn.Identity()(x)[..., :Dh].shape[-1]')
    bad = bad.replace("# %%\nfrom torch import nn\n", "from torch import nn\n\n# %%\n")
    found = anatomy.lift_findings(anatomy.read_page(write(tmp_path, "ch", "plot_02_bad", bad)))
    assert len(found) == 1 and "width reads Dh, nn" in found[0], found

    # No list, no prerequisites, no displayed equation.
    bare = GOOD.replace("**You will learn**", "").replace("Prerequisites", "").replace(
        ".. math::", "")
    found = anatomy.lesson_findings(anatomy.read_page(write(tmp_path, "ch", "plot_03_bare",
                                                            bare)))
    assert len(found) == 3, found

    # A copy that drifted by one character, and one name with two meanings.
    copy = GOOD.replace("def width", "# Copied from ch/plot_01_good.py: width\ndef width")
    write(tmp_path, "ch", "plot_04_copy", copy)
    pages = [anatomy.read_page(p) for p in sorted(tmp_path.glob("ch/plot_0[14]_*.py"))]
    assert not anatomy.copy_findings(pages)
    write(tmp_path, "ch", "plot_04_copy", copy.replace("x.shape[-1]", "x.shape[-2]"))
    write(tmp_path, "ch", "plot_05_other", GOOD.replace("[-1]", "[0]"))
    pages = [anatomy.read_page(p) for p in sorted(tmp_path.glob("ch/plot_0[145]_*.py"))]
    found = anatomy.copy_findings(pages)
    assert len(found) == 2 and "drifted" in found[0] and "2 originals" in found[1], found


def test_the_paste_test_fails_on_a_cell_that_needs_another_cell(tmp_path):
    gallery = tmp_path / "gallery"
    write(gallery, "ch", "plot_01_good", GOOD)
    bad = GOOD.replace("# %%\nfrom torch import nn\n", "from torch import nn\n\n# %%\n")
    bad = bad.replace('return x.shape[-1]', 'return x.shape[-1]\n\n\nmodule = nn.Identity()')
    write(gallery, "ch", "plot_02_bad", bad)
    failed = paste_cells("", tmp_path, gallery=gallery)
    [(where, error)] = failed.items()  # the good page's cell runs; the bad one's does not
    assert where.startswith("ch/plot_02_bad: cell 2 ") and "NameError" in error, failed


def test_every_page_is_checked():
    assert {anatomy.page_name(p) for p in anatomy.pages()} == EVERY
    assert sys.modules["tools.anatomy"].GALLERY == ROOT / "gallery"
