"""The pages about the build, written by the build itself from the claim records (its own
and those committed in ``verified/``, merged by ``claim_files.py``).

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

from claim_files import THIS_BUILD, current_sources, file_name, load_claims, load_verified, merge
from page_source import cell_of, code_cells

ROOT = Path(__file__).resolve().parents[1]
HEADLINE = ROOT / "generated" / "headline.txt"


def headline(sets, current):
    """One sentence: how many claims were verified, where, with what, when; then the other
    record sets: on how many of the ``current`` pages each holds, and how many are stale."""
    built = [s for s in sets if s["origin"] == THIS_BUILD and s["current"]]
    records = [s["records"][p] for s in built for p in s["current"]]
    if not records:
        return "No page has been verified by this build yet: run ``make html``."
    claims = [c for r in records for c in r["claims"] if c["checks"] > 0]
    checks = sum(c["checks"] for c in claims)
    devices = sorted({f"{s['machine'][0]} ({s['machine'][1]})" for s in built})
    versions = sorted({s["machine"][2] for s in built})
    date = max(r["verified_at"] for r in records)
    pages = f"{len(records)} page{'s' * (len(records) != 1)}"
    text = (f"**{len(claims)} claims** ({checks} checks) on {pages} verified on "
            f"**{' and '.join(devices)}** with **torch {', '.join(versions)}** by this build, "
            f"last on {date}")
    for s in sets:
        if s["origin"] != THIS_BUILD and s["current"]:
            device, name, torch = s["machine"]
            day = max(s["records"][p]["verified_at"] for p in s["current"])[:10]
            text += (f"; {len(s['current'])} of {len(current)} pages also verified on "
                     f"**{device} ({name})** with **torch {torch}** on {day}")
    stale = sum(len(s["stale"]) for s in sets)
    return text + (f"; {stale} record{'s' * (stale != 1)} stale." if stale else ".")


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


def _attrs(**data):
    return "".join(f' data-{k.replace("_", "-")}="{html.escape(str(v))}"' for k, v in data.items())


def _column_class(s):
    """A CSS class naming a record set's column: ``set-cuda-NVIDIA-H100-80GB-HBM3-torch2-11-0``."""
    return "set-" + re.sub(r"[^A-Za-z0-9_-]+", "-", file_name(*s["machine"])[:-5])


def _cell(s, page, line, claims_by_line):
    """(status, text, tooltip) of one claim in one record set."""
    record = s["records"].get(page)
    if record is None:
        return "no-record", "no record", "this record set has no record of the page"
    if page in s["stale"]:
        return "stale", "stale", "the page changed since this record was made: not counted"
    c = claims_by_line.get(line)
    if c is None:
        return "no-record", "no record", "no claim on this line in this record"
    checks = c["checks"]
    tip = f"{checks} check{'s' * (checks != 1)}"
    if c.get("max_abs") is not None:
        tip += (f"; max abs {_sci(c['max_abs'])}, norm {_sci(c.get('norm'))}; tolerance "
                f"{_sci(c.get('rtol'))} / {_sci(c.get('atol'))}; "
                f"{', '.join(c.get('dtype', []))} on {', '.join(c.get('device', []))}")
    if not c["passed"]:
        return "failed", "failed" + (f" ({_sci(c['max_abs'])})" if c.get("max_abs") else ""), tip
    if checks == 0:
        return "not-run", "not run", "the line did not run on this machine (another branch)"
    if c["kind"] == "assert_close" and c.get("max_abs") is not None:
        return "held", _sci(c["max_abs"]), tip
    return "held", f"held ×{checks}", tip


def _sets_table(sets, n_pages):
    """The record sets, one row each: the ledger's device columns, in the same order."""
    rows = []
    for s in sets:
        device, name, torch = s["machine"]
        day = max((r["verified_at"] for r in s["records"].values()), default="")
        cells = [f"{html.escape(device)} ({html.escape(name)})", html.escape(torch),
                 html.escape(s["origin"]), html.escape(day),
                 f"{len(s['current'])} of {n_pages}", str(len(s["stale"]))]
        rows.append(f'<tr class="{_column_class(s)}">' +
                    "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in ("device", "torch", "records from",
                                               "last verified", "current pages", "stale pages"))
    return ["```{raw} html", '<div class="ledger-wrap">',
            '<table class="docutils align-default ledger-sets">',
            f"<thead><tr>{header}</tr></thead>", "<tbody>", *rows, "</tbody></table></div>",
            "```", ""]


def ledger_markdown(sets, current):
    """The record sets, then one table per chapter: every claim of every page, one column per
    record set with the discrepancy it measured (or *held*, *not run*, *failed*, *stale*).

    Claims are matched between record sets by (page, line), only for current records. The
    tables are raw HTML: as a MyST list-table, the 300-odd rows cost about 2.5 s to parse,
    index and write on every change (measured); as HTML they cost nothing.
    """
    out = ["# Record sets", "", *_sets_table(sets, len(current)),
           # ledger.js puts its filters here; without JavaScript the div stays empty.
           "```{raw} html", '<div id="ledger-filters" class="ledger-filters"></div>', "```", ""]
    heads = ""
    for s in sets:
        device, name, torch = s["machine"]
        heads += (f'<th class="set {_column_class(s)}"'
                  f"{_attrs(device=device, device_name=name, torch=torch, origin=s['origin'])}>"
                  f"{html.escape(device)} ({html.escape(name)})<br>torch {html.escape(torch)}"
                  f"<br>{html.escape(s['origin'])}</th>")
    header = "".join(f"<th>{h}</th>" for h in ("page", "line", "section", "claim", "tolerance",
                                               "dtype")) + heads
    for chapter in dict.fromkeys(p.split("/")[0] for p in current):
        rows = []
        for page in (p for p in current if p.startswith(chapter + "/")):
            # The rows: the claims of a current record (the build's first), else of any record.
            template = next((s["records"][page] for s in sets if page in s["current"]), None) or \
                next((s["records"][page] for s in sets if page in s["records"]), None)
            if template is None:
                continue
            by_line = [{c["line"]: c for c in s["records"].get(page, {"claims": []})["claims"]}
                       for s in sets]
            stem = page.split("/")[1]
            cells_of_page = code_cells(ROOT / "gallery" / f"{page}.py")
            for c in template["claims"]:
                code = " ".join(c["code"].split())
                tol = "" if c.get("rtol") is None else f"{_sci(c['rtol'])} / {_sci(c['atol'])}"
                # The link goes to the code cell holding the claim's line (its id: book.py).
                cell = cell_of(cells_of_page, c["line"])
                anchor, title = "", f"{stem}.py"
                if cell is not None:
                    anchor = f"#cell-{cell[0]}"
                    title = f"code cell {cell[0]}: lines {cell[1]}-{cell[2]} of {stem}.py"
                link = (f'<a href="../generated/{page}.html{anchor}" '
                        f'title="{html.escape(title)}">'
                        # may break after an underscore: the record-set columns fit at 1280 px
                        f'{html.escape(stem).replace("_", "_<wbr>")}</a>')
                dtypes = ", ".join(c.get("dtype", []))
                cells = [f"<td>{x}</td>" for x in (
                    link, str(c["line"]), html.escape(c["section"].replace("``", "")),
                    f"<code>{html.escape(code)}</code>", tol, dtypes)]
                statuses, numbers = [], []
                for s, claims in zip(sets, by_line):
                    status, text, tip = _cell(s, page, c["line"], claims)
                    measured = claims.get(c["line"], {}).get("max_abs")
                    ok = status in ("held", "failed") and measured is not None
                    numbers.append(repr(float(measured)) if ok else "-")
                    statuses.append(status)
                    cells.append(f'<td class="set {_column_class(s)} {status}" '
                                 f'title="{html.escape(tip)}">{text}</td>')
                # For ledger.js: each record set's max abs ("-": none), in column order, and
                # the largest of them.
                attrs = _attrs(page=page, line=c["line"], kind=c["kind"], dtype=dtypes,
                               status=" ".join(dict.fromkeys(statuses)),
                               set_max_abs=" ".join(numbers))
                if any(x != "-" for x in numbers):
                    attrs += _attrs(max_abs=max((x for x in numbers if x != "-"), key=float))
                rows.append(f'<tr class="claim"{attrs}>' + "".join(cells) + "</tr>")
        if rows:
            out += [f"# {chapter.capitalize()}", "", "```{raw} html", '<div class="ledger-wrap">',
                    f'<table class="docutils align-default ledger"{_attrs(chapter=chapter)}>'
                    f"<thead><tr>{header}</tr></thead>", "<tbody>", *rows, "</tbody></table>",
                    "</div>", "```", ""]
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


def write_report_pages(app):
    """After sphinx-gallery has run the pages (builder-inited): headline, ledger, environment."""
    import sphinx

    records = load_claims()  # the pages that still exist, in chapter and page order
    current = current_sources()
    sets = merge(records, load_verified(), current)
    costs = {r["page"]: json.loads(cost.read_text())["time"] for r in records
             if (cost := ROOT / "generated" / f"{r['page']}.cost.json").is_file()}
    line = headline(sets, current)
    _write_if_changed(HEADLINE, line + (
        " Each claim, with its measured discrepancy and tolerance, is in the"
        " :doc:`proof ledger </chapters/ledger>`.\n"))
    _write_if_changed(ROOT / "generated" / "ledger.md",
                      line + "\n\n" + ledger_markdown(sets, current))
    run_in = (f"{app.parallel} worker processes (when two or more pages run)"
              if app.parallel > 1 else "the build's own process")
    build = {"platform": _md(platform.platform()), "CPU cores": str(os.cpu_count()),
             "pages run in": run_in,
             "Python": platform.python_version(), "Sphinx": sphinx.__version__,
             **{name: importlib.metadata.version(name)
                for name in ("sphinx-gallery", "myst-nb", "matplotlib", "furo", "transformers")}}
    _write_if_changed(ROOT / "generated" / "environment.md",
                      environment_markdown(records, costs, build))
