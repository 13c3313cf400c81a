"""Every page runs as a plain script (its notebook: test_notebooks_run.py): what a reader
copies must run."""

import ast
import os
import re
import subprocess
import sys

import pytest

from conftest import GALLERY_PAGES, ROOT, page_id
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
