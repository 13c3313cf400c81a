"""Every page's downloaded notebook runs top to bottom in a Jupyter kernel of its own (the
page as a script: test_pages_run_anywhere.py)."""

import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import GALLERY_PAGES, page_id
from tools.kernel_pool import KernelPool


def test_a_notebook_kernel_starts_in_an_empty_folder_with_no_name_bound(kernels):
    """What the preloading kernels change: modules imported, no name in the notebook."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, sys\nprint('torch' in globals(), 'torch' in sys.modules, os.listdir())")])
    km, folder = kernels.take()
    try:
        NotebookClient(nb, km=km, timeout=60).execute()
    finally:
        km.shutdown_kernel(now=True)
    assert nb.cells[0].outputs[0]["text"] == "False True []\n"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Jupyter kernels of the interpreter running the tests (the book's pinned venv), one
    started ahead, each having imported torch, matplotlib and transformers without binding
    a name (tools/kernel_pool.py)."""
    pool = KernelPool({**os.environ, "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"},
                      tmp_path_factory.mktemp("kernels"))
    yield pool
    pool.close()


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_downloaded_notebook_runs(site, page, kernels):
    """The .ipynb sphinx-gallery generated runs top to bottom in a fresh Jupyter kernel, in
    an empty folder."""
    src, _, _ = site
    notebook = src / "generated" / page.parent.name / f"{page.stem}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    assert sum(cell.cell_type == "code" for cell in nb.cells) >= 2
    km, folder = kernels.take()
    try:
        client = NotebookClient(nb, km=km, timeout=300,
                                resources={"metadata": {"path": str(folder)}})
        client.execute()  # raises CellExecutionError naming the cell if anything fails
    finally:
        km.shutdown_kernel(now=True)
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "device: " in printed
