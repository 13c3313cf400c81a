"""Every page's downloads (.py, .ipynb, and both inside the .zip) carry no raw Sphinx role:
``_ext/downloads.py`` writes each one out as what the site shows (a page's title, the
measured number, a name as code). The roles are counted in the sources too, so the test
cannot pass on pages that simply have none."""

import io
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import downloads  # noqa: E402

ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`[^`]*`")


def texts_of(path):
    """``{member name: text}`` of a download (a zip's members, or the file itself)."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            return {f"{path.name}/{n}": z.read(n).decode() for n in z.namelist()}
    text = path.read_text()
    if path.suffix == ".ipynb":  # the Markdown cells: code cells are Python
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"]
                         if c["cell_type"] == "markdown")
    return {path.name: text}


def test_no_download_carries_a_sphinx_role(site):
    src, out, _ = site
    pages = sorted(src.glob("gallery/*/plot_*.py"))
    in_sources = sum(len(ROLE.findall(p.read_text())) for p in pages)
    assert in_sources > 100, "the sources hold the roles the downloads must not"
    files = sorted(out.glob("_downloads/*/plot_*.*"))
    suffixes = sorted({f.suffix for f in files})
    assert suffixes == [".ipynb", ".py", ".zip"], suffixes
    assert len(files) == 3 * len(pages), (len(files), len(pages))
    raw = {name: ROLE.findall(text) for f in files for name, text in texts_of(f).items()}
    left = {name: found for name, found in raw.items() if found}
    assert not left, f"raw roles in downloads: {dict(list(left.items())[:5])}"
    directives = [name for f in files for name, text in texts_of(f).items()
                  if ".. footbibliography::" in text]
    assert not directives, directives[:5]
    # and the zip holds the script and the notebook, each as the separate downloads read
    for z in (f for f in files if f.suffix == ".zip"):
        members = sorted(Path(n).suffix for n in zipfile.ZipFile(z).namelist())
        assert members == [".ipynb", ".py"], (z.name, members)


def test_each_role_is_written_out_as_the_site_shows_it():
    titles = {"generated/positional/plot_04_rope": "RoPE: rotary position embeddings"}
    text = (":doc:`/generated/positional/plot_04_rope`, :doc:`the ledger </chapters/ledger>`,"
            " :class:`~torch.nn.LayerNorm`, :func:`torch.polar`, :math:`x^2`, :ref:`a <b>`")
    assert downloads.rewrite(text, titles) == (
        '"RoPE: rotary position embeddings" (positional/plot_04_rope), '
        '"the ledger" (chapters/ledger), ``LayerNorm``, ``torch.polar``, $x^2$, a')
    assert downloads.rewrite(":func:`~torch.polar`", {}, markdown=True) == "`polar`"
    # a relative :doc: starts from the page's own chapter
    assert downloads.rewrite(":doc:`plot_04_rope`", titles, page="plot_06_alibi") == (
        '"RoPE: rotary position embeddings" (positional/plot_04_rope)')


def test_a_zip_is_rewritten_member_by_member():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("plot_99_x.py", '"""See :class:`torch.nn.Linear`."""\n')
    out = downloads.rewrite_file("plot_99_x.zip", buf.getvalue(), {})
    with zipfile.ZipFile(io.BytesIO(out)) as z:
        assert z.read("plot_99_x.py").decode() == '"""See ``torch.nn.Linear``."""\n'


def test_a_citation_is_written_out_from_the_bibliography():
    text = "RoPE :footcite:p:`Su2021,Ba2016`.\n#\n# .. footbibliography::\n"
    assert downloads.rewrite(text, {}) == (
        "RoPE (Su et al., 2021, arXiv:2104.09864; Ba et al., 2016, arXiv:1607.06450).\n#\n")
    assert downloads.rewrite(":footcite:p:`Dao2023`", {}) == "(Dao, 2023, arXiv:2307.08691)"
    # in the sentence (:t), the authors as the site shows them: one, two, or et al.
    assert downloads.rewrite(":footcite:t:`Rabe2021`; :footcite:t:`Dubey2024`", {}) == (
        "Rabe and Staats (2021, arXiv:2112.05682); Dubey et al. (2024, arXiv:2407.21783)")
    # one author "and others" is more than two
    assert downloads.rewrite(":footcite:t:`Kim2025`", {}) == "Kim et al. (2025, arXiv:2502.02732)"
    # no arXiv ID: the DOI, else the URL
    assert downloads.rewrite(":footcite:t:`Welford1962`", {}) == (
        "Welford (1962, doi:10.1080/00401706.1962.10490022)")
    assert downloads.rewrite(":footcite:p:`MetaLlama2024`", {}) == (
        "(Meta, 2024, https://github.com/meta-llama/llama-models)")
