"""The pages about the build, written by the build itself from the claim records (its own
and those committed in ``verified/``, merged by ``claim_files.py``).

After sphinx-gallery has run the pages: the landing-page headline (``generated/headline.txt``,
included by ``index.rst``) and the tables of the proof ledger and the environment page
(``generated/ledger.md`` and ``generated/environment.md``, included by ``chapters/ledger.md``
and ``chapters/environment.md``). No notebook kernel runs. Each file is rewritten only when
its text changes, so Sphinx re-reads a page exactly when what it shows has changed.
"""

import ast
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
    # verified: ran and held (a claim that failed is the ledger's verdict, not counted here)
    claims = [c for r in records for c in r["claims"] if c["checks"] > 0 and c["passed"]]
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



def _css_string(text):
    """A CSS string literal (no markup can end the <style> it sits in)."""
    escaped = re.sub(r'[\\"<>]', lambda m: f"\\{ord(m.group()):x} ", text)
    return f'"{escaped}"'


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


def book_order(current):
    """The pages of ``current`` in the book's order: chapters as index.rst lists them, then
    each chapter's pages by number (their reading order)."""
    chapters = re.findall(r"^\s+chapters/(\w+)\s*$", (ROOT / "index.rst").read_text(), re.M)
    rank = {c: i for i, c in enumerate(chapters)}
    return sorted(current, key=lambda p: (rank.get(p.split("/")[0], len(rank)), p))


def chapter_title(chapter):
    """A chapter's title: the first line of ``chapters/<chapter>.rst`` (its name, if none)."""
    path = ROOT / "chapters" / f"{chapter}.rst"
    lines = path.read_text().splitlines() if path.is_file() else []
    return next((line.strip() for line in lines if line.strip()), chapter)


def page_title(page):
    """A gallery page's title: the first line of its docstring (its name, if it is gone)."""
    path = ROOT / "gallery" / f"{page}.py"
    lines = path.read_text().splitlines() if path.is_file() else []
    return next((line.strip() for line in lines[1:] if line.strip()), page)


def _arguments(code):
    """What a claim compares, in words: ``assert_close(a, b)`` -> ("a", "b"); an ``assert``
    -> its condition; None where the code does not parse alone."""
    try:
        node = ast.parse(code).body[0]
    except (SyntaxError, IndexError):
        return None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
            and len(node.value.args) >= 2:
        return tuple(ast.unparse(a) for a in node.value.args[:2])
    if isinstance(node, ast.Assert):
        return ast.unparse(node.test)
    return None


def _claim_html(c):
    """The claim as a reader asks for it: what it checks, in words, and its code one click
    away (a <details>)."""
    code = " ".join(c["code"].split())
    what = _arguments(code)
    if c["kind"] == "assert_close" and isinstance(what, tuple):
        said = f"<code>{html.escape(what[0])}</code> equals <code>{html.escape(what[1])}</code>"
    elif c["kind"] == "raises":  # its code: "<the try's body>  # raises <exceptions>"
        body, _, names = code.rpartition("  # raises ")
        said = f"<code>{html.escape(body)}</code> raises {html.escape(names)}"
    elif isinstance(what, str):
        said = f"<code>{html.escape(what)}</code> holds"
    else:
        said = "the check below holds"
    return (f"<details><summary>{said}</summary><code>{html.escape(code)}</code></details>")


def _role(c):
    """A claim's role: a check of the lesson, or a negative control (an exercise's answer,
    ``Try it:``, or the source notes' code shown failing)."""
    if c["section"].startswith("Try it:") or c["kind"] == "raises":
        return "control"
    return "check"


ROLES = {"check": "check", "control": "negative control"}


# What the "of tolerance" column says of a claim that is no tolerance comparison: a
# condition (an assert) has no margin the recorder could measure, nor an expected exception.
NOT_COMPARED = {"assert": ("condition", "an assert: a condition that held (no tolerance)"),
                "raises": ("raises", "the code raised the exception it must (no tolerance)")}


def _ratio_cell(c, x):
    """The "of tolerance" cell: max |a - e| / (atol + rtol |e|), or what the claim is."""
    if c["kind"] in NOT_COMPARED:
        text, tip = NOT_COMPARED[c["kind"]]
        return f'<td class="ratio kind-{c["kind"]}" title="{tip}">{text}</td>'
    if x is None:
        return '<td class="ratio"></td>'
    if x == float("inf"):
        text = "exact: differs"
    else:
        text = "0 (exact)" if x == 0 else f"{x:.2g}"
    return f'<td class="ratio">{text}</td>'


def ledger_markdown(sets, current):
    """The record sets, the counts, then one table: every claim of every page in the book's
    order, one column per record set with the discrepancy it measured (or *held*, *not run*,
    *failed*, *stale*), and how close each comparison came to its tolerance.

    Claims are matched between record sets by (page, line), only for current records. The
    table is raw HTML: as a MyST list-table, the rows cost seconds to parse, index and write
    on every change (measured); as HTML they cost nothing.
    """
    out = ["# Record sets", "", *_sets_table(sets, len(current))]
    heads = ""
    for s in sets:
        device, name, torch = s["machine"]
        heads += (f'<th class="set {_column_class(s)}"'
                  f"{_attrs(device=device, device_name=name, torch=torch, origin=s['origin'])}>"
                  f"{html.escape(device)} ({html.escape(name)})<br>torch {html.escape(torch)}"
                  f"<br>{html.escape(s['origin'])}</th>")
    header = ("<th>page</th><th class=\"wide\">line</th><th>claim</th>"
              "<th>section</th><th>role</th>"
              "<th class=\"wide\">tolerance</th><th class=\"wide\">dtype</th>"
              '<th title="the largest |a - e| / (atol + rtol |e|) over the checked elements: '
              'a comparison passes at 1 or less">of tolerance</th>') + heads
    rows, tally, failed_elsewhere = [], Counter(), [0] * len(sets)
    for page in book_order(current):
        # The rows: the claims of a current record (the build's first), else of any record.
        template = next((s["records"][page] for s in sets if page in s["current"]), None) or \
            next((s["records"][page] for s in sets if page in s["records"]), None)
        if template is None:
            continue
        by_line = [{c["line"]: c for c in s["records"].get(page, {"claims": []})["claims"]}
                   for s in sets]
        stem = page.split("/")[1]
        title = page_title(page)
        cells_of_page = code_cells(ROOT / "gallery" / f"{page}.py")
        for c in template["claims"]:
            tol = "" if c.get("rtol") is None else f"{_sci(c['rtol'])} / {_sci(c['atol'])}"
            # The link goes to the code cell holding the claim's line (its id: book.py).
            cell = cell_of(cells_of_page, c["line"])
            anchor, tip = "", f"{stem}.py"
            if cell is not None:
                anchor = f"#cell-{cell[0]}"
                tip = f"code cell {cell[0]}: lines {cell[1]}-{cell[2]} of {stem}.py"
            link = (f'<a href="../generated/{page}.html{anchor}" title="{html.escape(tip)}">'
                    f"{html.escape(title)}</a>")
            dtypes = ", ".join(c.get("dtype", []))
            role = _role(c)
            statuses, numbers, ratios = [], [], []
            set_cells = []
            for s, claims in zip(sets, by_line):
                status, text, cell_tip = _cell(s, page, c["line"], claims)
                mine = claims.get(c["line"], {})
                ok = status in ("held", "failed")
                measured, ratio = mine.get("max_abs"), mine.get("ratio")
                numbers.append(repr(float(measured)) if ok and measured is not None else "-")
                ratios.append(repr(float(ratio)) if ok and ratio is not None else "-")
                statuses.append(status)
                set_cells.append(f'<td class="set {_column_class(s)} {status}" '
                                 f'title="{html.escape(cell_tip)}">{text}</td>')
            tally[statuses[0]] += 1
            for i, status in enumerate(statuses):
                failed_elsewhere[i] += status == "failed"
            known = [float(x) for x in ratios if x != "-"]
            worst = max(known) if known else None
            cells = [f'<td class="page">{link}</td>', f'<td class="wide">{c["line"]}</td>',
                     f'<td class="what">{_claim_html(c)}</td>',
                     f'<td class="section">{html.escape(c["section"].replace("``", ""))}</td>',
                     f'<td class="role role-{role}">{ROLES[role]}</td>',
                     f'<td class="wide">{tol}</td>', f'<td class="wide">{dtypes}</td>',
                     _ratio_cell(c, worst), *set_cells]
            # For ledger.js: each record set's max abs and ratio ("-": none), in column
            # order, and the largest of them.
            attrs = _attrs(page=page, chapter=page.split("/")[0], title=title, line=c["line"],
                           kind=c["kind"], role=role, dtype=dtypes,
                           status=" ".join(dict.fromkeys(statuses)),
                           set_max_abs=" ".join(numbers), set_ratio=" ".join(ratios))
            if any(x != "-" for x in numbers):
                attrs += _attrs(max_abs=max((x for x in numbers if x != "-"), key=float))
            if worst is not None:
                attrs += _attrs(ratio=repr(worst))
            rows.append(f'<tr class="claim"{attrs}>' + "".join(cells) + "</tr>")
    held, not_run = tally["held"], tally["not-run"]
    failed, other = tally["failed"], sum(tally.values()) - tally["held"] - tally["not-run"]
    # Raw HTML, so that each sentence links the rows it counts (the filters live in the
    # address: ledger.js); MyST would take "?status=..." for a reference to resolve.
    counts = (f"The table lists <strong>{sum(tally.values())} claims</strong>: <strong>{held}"
              "</strong> held in this build (the headline's count), <strong>"
              f'{not_run}</strong> <a href="?status=not-run">did not run on this machine</a> '
              "(each sits in a branch for another device or version, marked <em>not run</em>)")
    if other - failed:
        counts += (f", and <strong>{other - failed}</strong> have no current record here "
                   "(<em>stale</em>, <em>no record</em>)")
    if failed:
        counts += f', and <strong>{failed}</strong> <a href="?status=failed">failed</a>'
    counts += "."
    verdict = ("<strong>No claim failed in this build.</strong>" if not failed else
               f"<strong>{failed} claim{'s' * (failed != 1)} failed in this build</strong>: "
               '<a href="?status=failed">show them</a>.')
    for s, n in zip(sets[1:], failed_elsewhere[1:]):  # the committed record sets
        if n:
            verdict += (f" {n} claim{'s' * (n != 1)} failed in the record set "
                        f"{html.escape(s['origin'])} (<a href=\"?status=failed&amp;set="
                        f'{_column_class(s)}">show them</a>).')
    chapter_titles = {c: chapter_title(c) for c in
                      dict.fromkeys(p.split("/")[0] for p in book_order(current))}
    # On a phone the rows are cards (ledger.css): each record set's cell says which set it is.
    labels = "".join(f"table.ledger td.{_column_class(s)}::before {{ content: "
                     f"{_css_string('{} ({}), torch {}: '.format(*s['machine']))}; }}"
                     for s in sets)
    out += ["```{raw} html", f'<p class="ledger-counts">{counts}</p>',
            f'<p class="ledger-verdict">{verdict}</p>',
            # ledger.js puts its filters here; without JavaScript the div stays empty.
            f'<div id="ledger-filters" class="ledger-filters"'
            f'{_attrs(chapters=json.dumps(chapter_titles))}></div>', "```", "",
            "# Every claim", "", "```{raw} html",
            f"<style>@media (max-width: 40em) {{ {labels} }}</style>",
            '<div class="ledger-wrap ledger-scroll">',
            '<table class="docutils align-default ledger">'
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
