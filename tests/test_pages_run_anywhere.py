"""Every page runs as a plain script and as a notebook: what a reader copies must run."""

import os
import subprocess
import sys

import nbformat
import pytest
from conftest import GALLERY_PAGES, page_id
from nbclient import NotebookClient


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_page_runs_as_a_script(page, tmp_path):
    """`python plot_NN_x.py` in an empty folder, headless matplotlib."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(page)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "device: " in proc.stdout


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_downloaded_notebook_runs(site, page, tmp_path):
    """The .ipynb sphinx-gallery generated runs top to bottom in a fresh Jupyter kernel."""
    src, _, _ = site
    notebook = src / "generated" / page.parent.name / f"{page.stem}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    assert sum(cell.cell_type == "code" for cell in nb.cells) >= 2
    # The kernel is the interpreter running the tests, i.e. the book's pinned virtual environment.
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell if anything fails
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "device: " in printed
