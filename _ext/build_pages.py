"""The pages about the build, written by the build itself from the claim records.

After sphinx-gallery has run the pages: the landing-page headline (``generated/headline.txt``,
included by ``index.rst``) and the tables of the proof ledger and the environment page
(``generated/ledger.md`` and ``generated/environment.md``, included by ``chapters/ledger.md``
and ``chapters/environment.md``). No notebook kernel runs. Each file is rewritten only when
its text changes, so Sphinx re-reads a page exactly when what it shows has changed.
"""

import html
import importlib.metadata
import json
import os
import platform
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADLINE = ROOT / "generated" / "headline.txt"


def load_claims(root=ROOT):
    """The claim records of every page that still exists, sorted by chapter and page."""
    records = []
    for path in sorted((root / "generated").glob("*/*.claims.json")):
        record = json.loads(path.read_text())
        if (root / record["source"]).is_file():
            records.append(record)
    return records


def headline(records):
    """One sentence: how many claims were verified, where, with what, when."""
    if not records:
        return "No page has been verified yet: run ``make html``."
    claims = [c for r in records for c in r["claims"] if c["checks"] > 0]
    checks = sum(c["checks"] for c in claims)
    devices = sorted({f"{r['device']} ({r['device_name']})" for r in records})
    versions = sorted({r["torch"] for r in records})
    date = max((r["verified_at"] for r in records), default="never")
    return (f"**{len(claims)} claims** ({checks} checks) on {len(records)} pages verified on "
            f"**{' and '.join(devices)}** with **torch {', '.join(versions)}**, last on {date}.")


def _md(text):
    """Escape text for MyST markdown (e.g. the underscores of a platform name)."""
    return re.sub(r"([\\`*_{}\[\]<>()#+!|~])", r"\\\1", text)


def _list_table(header, rows, css):
    """A MyST list-table; ``header`` is its first row, or None for a table without one."""
    lines = [":::{list-table}", f":header-rows: {0 if header is None else 1}", f":class: {css}", ""]
    for row in ([] if header is None else [header]) + rows:
        lines += [f"* - {row[0]}", *(f"  - {cell}" for cell in row[1:])]
    return "\n".join(lines + [":::", ""])


def _sci(x):
    return "" if x is None else f"{x:.1e}"


def ledger_markdown(records):
    """One table per chapter: every claim of every page, with its measured discrepancy.

    The tables are raw HTML: as a MyST list-table, the 300-odd rows cost about 2.5 s to parse,
    index and write on every change (measured); as HTML they cost nothing.
    """
    out = []
    for chapter in dict.fromkeys(r["page"].split("/")[0] for r in records):
        rows = []
        for record in (r for r in records if r["page"].startswith(chapter + "/")):
            stem = record["page"].split("/")[1]
            link = f'<a href="../generated/{record["page"]}.html">{html.escape(stem)}</a>'
            for c in record["claims"]:
                code = " ".join(c["code"].split())
                tol = "" if c.get("rtol") is None else f"{c['rtol']:.1e} / {c['atol']:.1e}"
                cells = [link, str(c["line"]), html.escape(c["section"].replace("``", "")),
                         f"<code>{html.escape(code)}</code>", _sci(c.get("max_abs")),
                         _sci(c.get("norm")), tol, ", ".join(c.get("dtype", [])),
                         ", ".join(c.get("device", [])), str(c["checks"])]
                rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
        header = "".join(f"<th>{h}</th>" for h in ("page", "line", "section", "claim", "max abs",
                                                   "norm", "tolerance", "dtype", "device", "checks"))
        out += [f"# {chapter.capitalize()}", "", "```{raw} html",
                f'<table class="docutils align-default ledger"><thead><tr>{header}</tr></thead>',
                "<tbody>", *rows, "</tbody></table>", "```", ""]
    return "\n".join(out)


def environment_markdown(records, costs, build):
    """The build's own machine, where the pages were last verified, how long each took."""
    setups = Counter((r["python"], r["torch"], f"{r['device']} ({r['device_name']})",
                      str(r.get("threads", "?"))) for r in records)
    by_page = {r["page"]: r for r in records}
    rows, total = [], 0.0
    for page, seconds in costs.items():
        total += seconds
        rows.append([f"{{doc}}`{page} </generated/{page}>`", f"{seconds:.1f}",
                     by_page.get(page, {}).get("verified_at", "never")])
    rows.append(["**all pages**", f"**{total:.1f}**", ""])
    return "\n".join([
        "# This build", "",
        _list_table(None, [[k, v] for k, v in build.items()], "environment"),
        "# Where the pages were verified", "",
        "Each page records this when it runs; *torch threads* is what each page had "
        "(with parallel pages, each worker gets its share of the cores).", "",
        _list_table(["Python", "torch", "device", "torch threads", "pages"],
                    [[*k, str(n)] for k, n in sorted(setups.items())], "environment"),
        "# Execution time of each page", "",
        "sphinx-gallery's record of how long each page took the last time it ran (an unchanged "
        "page is not re-run, and keeps its last time and date).", "",
        _list_table(["page", "seconds", "verified"], rows, "environment")])


def _write_if_changed(path, text):
    if not path.is_file() or path.read_text() != text:  # unchanged: the page is not re-read
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_build_pages(app):
    """After sphinx-gallery has run the pages (builder-inited): headline, ledger, environment."""
    import sphinx

    records = load_claims()  # the pages that still exist, in chapter and page order
    costs = {r["page"]: json.loads(cost.read_text())["time"] for r in records
             if (cost := ROOT / "generated" / f"{r['page']}.cost.json").is_file()}
    line = headline(records)
    _write_if_changed(HEADLINE, line + (
        " Each claim, with its measured discrepancy and tolerance, is in the"
        " :doc:`proof ledger </chapters/ledger>`.\n"))
    _write_if_changed(ROOT / "generated" / "ledger.md", line + "\n\n" + ledger_markdown(records))
    run_in = (f"{app.parallel} worker processes (when two or more pages run)"
              if app.parallel > 1 else "the build's own process")
    build = {"platform": _md(platform.platform()), "CPU cores": str(os.cpu_count()),
             "pages run in": run_in,
             "Python": platform.python_version(), "Sphinx": sphinx.__version__,
             **{name: importlib.metadata.version(name)
                for name in ("sphinx-gallery", "myst-nb", "matplotlib", "furo")}}
    _write_if_changed(ROOT / "generated" / "environment.md",
                      environment_markdown(records, costs, build))
