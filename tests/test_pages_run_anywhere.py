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
from tools.kernel_pool import KernelPool
from tools.page_runner import PageRunner


@pytest.fixture(scope="module")
def runner():
    """Pages as `python plot_NN_x.py` would run them, forked from a process that imported
    torch, matplotlib and transformers once (tools/page_runner.py says what that changes)."""
    with PageRunner({**os.environ, "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"}) as server:
        yield server


@pytest.mark.parametrize("page", GALLERY_PAGES, ids=page_id)
def test_page_runs_as_a_script(page, tmp_path, runner):
    """The page as a plain script in a process of its own, in an empty folder, headless
    matplotlib: it exits 0 and prints its device."""
    code, stdout, stderr = runner.run(page, tmp_path, timeout=300)
    assert code == 0, stdout[-2000:] + stderr[-4000:]
    assert "device: " in stdout


def test_the_page_runner_reports_what_python_would(tmp_path, runner):
    """A page that forgets an import fails as under `python page.py`; exit codes and output
    come back; the page's folder is first on sys.path; a page that hangs is stopped."""
    page = tmp_path / "plot_99_forgot.py"
    page.write_text("import sys\nprint('device: x', sys.path[0])\ntorch.ones(2)\n")
    code, stdout, stderr = runner.run(page, tmp_path / "run")
    assert code == 1 and "NameError: name 'torch' is not defined" in stderr
    assert stdout == f"device: x {tmp_path}\n"
    page.write_text("import sys\nimport torch\nprint(torch.ones(2).sum().item())\nsys.exit(3)\n")
    assert runner.run(page, tmp_path / "run")[:2] == (3, "2.0\n")
    page.write_text("import time\ntime.sleep(60)\n")
    assert runner.run(page, tmp_path / "run", timeout=1)[0] == -9
    direct = subprocess.run([sys.executable, "-c", "import sys; print(sorted(sys.modules))"],
                            capture_output=True, text=True)
    page.write_text("import sys\nprint(sorted(sys.modules))\n")
    forked = runner.run(page, tmp_path / "run")[1]
    extra = set(eval(forked)) - set(eval(direct.stdout))
    assert {"torch", "matplotlib", "transformers"} <= extra
    assert "matplotlib.pyplot" not in extra


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
