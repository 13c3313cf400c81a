"""Every page runs as a plain script and as a notebook: what a reader copies must run."""

import ast
import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import GALLERY_PAGES, ROOT, page_id


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


PIN = re.search(r"^transformers==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)[1]


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_transformers_only_where_the_setup_cell_says_so(page):
    """A page imports transformers exactly when its Setup cell says it needs the pinned version
    (readers of the others need only torch and matplotlib), and then goes offline before the
    import: models come from configs, nothing is downloaded."""
    source = page.read_text()
    tree = ast.parse(source)
    imports = [node for node in ast.walk(tree)
               if isinstance(node, ast.Import | ast.ImportFrom)
               and any(name.split(".")[0] == "transformers" for name in
                       ([node.module or ""] if isinstance(node, ast.ImportFrom)
                        else [a.name for a in node.names]))]
    setup = source.split("# Setup\n# -----\n", 1)[-1].split("\n# %%", 1)[0]
    says = f"pip install transformers=={PIN}" in setup
    assert bool(imports) == says, (
        f"{page_id(page)} imports transformers: {bool(imports)}; its Setup cell names "
        f"`pip install transformers=={PIN}`: {says}")
    if imports:
        offline = source.index('os.environ["HF_HUB_OFFLINE"] = "1"')
        assert offline < min(source.index(ast.get_source_segment(source, node))
                             for node in imports), "HF_HUB_OFFLINE=1 must come before the import"
