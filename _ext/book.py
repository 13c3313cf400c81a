"""Build-time hooks. Nothing here is needed to run a page on its own: pages stay plain PyTorch.

- ``reset_page``: sphinx-gallery calls it before and after every page. Before, it reseeds torch,
  applies the house figure style and starts recording the page's claims; after, it writes them to
  ``generated/<chapter>/<page>.claims.json``, next to sphinx-gallery's md5 cache, so a page
  that is not re-run (unchanged) keeps the claims of its last run.
- From those files, after the pages ran, the build writes the landing-page headline and the
  tables of the proof ledger and the environment page (``generated/*.md``, included by
  ``chapters/ledger.md`` and ``chapters/environment.md``).
"""

import ast
import copy
import datetime
import gc
import html
import importlib.metadata
import json
import math
import os
import platform
import re
import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# sphinx-gallery resolves names in the code (for links) by evaluating them after the page ran;
# `x.T` then meets whatever 4-D tensor `x` last held and torch warns about it. Not the page's
# code. Set here, not in conf.py: with parallel execution the pages run in worker processes,
# which import this module (for reset_page) but never read conf.py.
warnings.filterwarnings("ignore", message="The use of `x.T` on tensors", category=UserWarning,
                        module=r"sphinx_gallery\.")
HEADLINE = ROOT / "generated" / "headline.txt"


# --------------------------------------------------------------------------------------------
# Recording the claims of one page
class _Recorder:
    """Every ``torch.testing.assert_close`` call and every ``assert`` statement a page executes."""

    def __init__(self, src):
        self.src = Path(src).resolve()
        self.filename = str(self.src)
        text = self.src.read_text()
        tree = ast.parse(text)
        self.sections = _sections(text)
        self.asserts = {n.lineno: ast.get_source_segment(text, n) for n in ast.walk(tree)
                        if isinstance(n, ast.Assert)}
        self.assert_hits = Counter()
        self.close_sites = {n.lineno: ast.get_source_segment(text, n) for n in ast.walk(tree)
                            if isinstance(n, ast.Call) and _is_assert_close(n.func)}
        self.close_calls = {}  # line -> aggregated measurements

    def hit(self, line):
        """Called by the page's compiled code just before the ``assert`` on ``line`` runs."""
        self.assert_hits[line] += 1

    def record_close(self, line, actual, expected, kwargs, passed):
        import torch
        from torch.testing._comparison import default_tolerances

        rec = self.close_calls.setdefault(line, {"checks": 0, "passed": True, "max_abs": 0.0,
                                                 "norm": 0.0, "dtype": [], "device": [],
                                                 "shape": [], "rtol": None, "atol": None})
        rec["checks"] += 1
        rec["passed"] &= passed
        try:
            a = torch.as_tensor(actual)
            e = torch.as_tensor(expected, device=a.device)
        except (TypeError, ValueError, RuntimeError):  # e.g. a tuple of tensors: no summary
            return
        wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
        if a.device.type == "mps":  # no float64 on Apple GPUs
            wide = torch.complex64 if wide == torch.complex128 else torch.float32
        diff = (a.to(wide) - e.to(wide)).abs()
        max_abs = diff.max().item() if diff.numel() else 0.0
        norm = diff.norm().item() if diff.numel() else 0.0
        rtol, atol = kwargs.get("rtol"), kwargs.get("atol")
        if rtol is None or atol is None:
            rtol, atol = default_tolerances(a, e) if a.is_floating_point() or a.is_complex() else (0.0, 0.0)
        if math.isnan(max_abs) or max_abs >= rec["max_abs"]:
            rec.update(max_abs=max_abs, norm=norm, rtol=rtol, atol=atol)
        for key, value in (("dtype", str(a.dtype).removeprefix("torch.")),
                           ("device", a.device.type), ("shape", list(a.shape))):
            if value not in rec[key]:
                rec[key].append(value)

    def claims(self):
        rows = []
        for line, code in sorted(self.close_sites.items()):
            rec = self.close_calls.get(line, {"checks": 0})
            rows.append({"line": line, "kind": "assert_close", "code": code,
                         "section": self.sections.get(line, ""), **rec})
        for line, code in sorted(self.asserts.items()):
            rows.append({"line": line, "kind": "assert", "code": code,
                         "section": self.sections.get(line, ""),
                         "checks": self.assert_hits[line], "passed": True})
        return sorted(rows, key=lambda r: r["line"])


def _is_assert_close(func):
    return (isinstance(func, ast.Attribute) and func.attr == "assert_close") or (
        isinstance(func, ast.Name) and func.id == "assert_close")


def _sections(text):
    """Line number -> the sphinx-gallery section heading it sits under."""
    lines = text.splitlines()
    out, current = {}, ""
    for i, line in enumerate(lines, start=1):
        nxt = lines[i] if i < len(lines) else ""
        if line.startswith("# ") and re.fullmatch(r"# [-=^~]{3,}", nxt.strip()):
            current = line[2:].strip()
        out[i] = current
    return out


_HIT = "__book_assert_hit__"  # a builtin while a page runs; never in the page's own namespace
_state = {}


class _CountAsserts(ast.NodeTransformer):
    """Put ``<hit>(line)`` before every ``assert``: counts how often each one runs."""

    def visit_Assert(self, node):
        call = ast.Expr(ast.Call(ast.Name(_HIT, ast.Load()), [ast.Constant(node.lineno)], []))
        return [ast.fix_missing_locations(ast.copy_location(call, node)), node]


def _start_recording(src):
    """Wrap ``torch.testing.assert_close`` and count the page's ``assert`` statements.

    sphinx-gallery compiles each block of a page with a ``codeop.Compile`` instance; while the
    page runs, that compiler inserts a counting call before each of the page's ``assert``
    statements (the page's text and its line numbers are unchanged). This replaced a
    ``sys.settrace`` line tracer, which slowed every Python call of a page by a third or more
    (matplotlib's drawing most): measured in issue 6.
    """
    import builtins
    import codeop

    import torch

    if sys.flags.optimize:
        raise RuntimeError("python -O strips assert statements, and the book's asserts are its "
                           "claims: build without -O (and without PYTHONOPTIMIZE)")
    rec = _Recorder(src)
    original = torch.testing.assert_close

    def assert_close(actual, expected, **kwargs):
        caller = sys._getframe(1)
        line = caller.f_lineno if caller.f_code.co_filename == rec.filename else None
        try:
            result = original(actual, expected, **kwargs)
        except AssertionError:
            if line is not None:
                rec.record_close(line, actual, expected, kwargs, passed=False)
            raise
        if line is not None:
            rec.record_close(line, actual, expected, kwargs, passed=True)
        return result

    compile_block = codeop.Compile.__call__

    def counting_compile(self, source, filename, symbol, *args, **kwargs):
        if filename == rec.filename:
            tree = ast.parse(source, filename) if isinstance(source, str) else copy.deepcopy(source)
            source = _CountAsserts().visit(tree)
        return compile_block(self, source, filename, symbol, *args, **kwargs)

    assert_close.__wrapped__ = original
    torch.testing.assert_close = assert_close
    codeop.Compile.__call__ = counting_compile
    setattr(builtins, _HIT, rec.hit)
    _state.update(recorder=rec, original=original, compile_block=compile_block)


def _unpatch():
    """Undo what _start_recording changed; return the page's recorder (None if none ran)."""
    import builtins
    import codeop

    import torch

    rec = _state.pop("recorder", None)
    if rec is not None:
        torch.testing.assert_close = _state.pop("original")
        codeop.Compile.__call__ = _state.pop("compile_block")
        delattr(builtins, _HIT)
    return rec


def _stop_recording():
    import torch

    rec = _unpatch()
    if rec is None:
        return
    chapter, stem = rec.src.parent.name, rec.src.stem
    out_dir = ROOT / "generated" / chapter
    out_dir.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    device_name = torch.cuda.get_device_name() if device == "cuda" else platform.machine()
    record = {
        "page": f"{chapter}/{stem}",
        "source": str(rec.src.relative_to(ROOT)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "verified_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "claims": rec.claims(),
    }
    (out_dir / f"{stem}.claims.json").write_text(json.dumps(record, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# sphinx-gallery hook
def reset_page(gallery_conf, fname, when):
    """Before each page: reseed torch, house figure style, start recording; after: save claims."""
    import matplotlib as mpl
    import torch

    if when == "after":
        _stop_recording()
        return
    _freeze_long_lived_objects()
    torch.manual_seed(0)
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.titlesize": "medium",
            "figure.constrained_layout.use": True,  # no clipped axis labels
            # White figures stay readable on furo's dark background.
            "figure.facecolor": "white",
            "savefig.facecolor": "white",
        }
    )
    if fname is not None:  # None when sphinx-gallery enters a folder, not a page
        src = _find_source(gallery_conf, fname)
        if src is not None:
            _start_recording(src)


def _freeze_long_lived_objects():
    """Once per process: move what is alive now (Sphinx, torch, matplotlib) out of the GC's way.

    sphinx-gallery runs ``gc.collect()`` before every page, and Python's collector scans every
    tracked object each time: about 0.15 s per page with Sphinx and torch loaded (measured,
    issue 6). After ``gc.freeze()`` it scans only what was made since, i.e. the pages' objects,
    which are still collected as before. Nothing a page computes depends on it.
    """
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()


def _find_source(gallery_conf, fname):
    """The page's source file. sphinx-gallery passes only its name, so names must be unique."""
    found = [ROOT / folder / Path(fname).name for folder in gallery_conf["examples_dirs"]
             if (ROOT / folder / Path(fname).name).is_file()]
    if len(found) > 1:
        raise RuntimeError(f"two gallery pages are named {Path(fname).name}: "
                           f"{', '.join(map(str, found))}; give each page a unique file name")
    return found[0] if found else None


# --------------------------------------------------------------------------------------------
# Reading the records back: the ledger page and the headline use these.
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


# --------------------------------------------------------------------------------------------
# Pages about the build: written by the build itself, from the records, with no notebook kernel.
# chapters/ledger.md and chapters/environment.md include these files. Each is rewritten only when
# its text changes, so Sphinx re-reads a page exactly when what it shows has changed.
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


def _write_build_pages(app):
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


def _rerun_pages_on_a_new_machine(app, config):
    """Another Python, torch or device than the last build: forget sphinx-gallery's md5 cache.

    Before the gallery runs (config-inited). Pages without an md5 record run again; if the
    build stops half-way, the pages it did not reach still have none and run the next time.
    """
    from machine import update

    if update(ROOT / "generated" / "machine.txt"):
        for md5 in (ROOT / "generated").glob("*/*.py.md5"):
            md5.unlink()


def _forget_removed_pages(app, config):
    """Delete what sphinx-gallery generated for pages whose source is gone (renamed, removed).

    sphinx-gallery never deletes its output; a stale page would stay in the build, outside
    every toctree (a warning, so an error under -W), and its figures would be copied along.
    """
    import shutil

    generated, gallery = ROOT / "generated", ROOT / "gallery"
    for chapter in (p for p in generated.glob("*") if p.is_dir()):
        if not (gallery / chapter.name).is_dir():
            shutil.rmtree(chapter)
            continue
        for rst in chapter.glob("plot_*.rst"):
            if not (gallery / chapter.name / f"{rst.stem}.py").is_file():
                for path in [*chapter.glob(f"{rst.stem}.*"),
                             *chapter.glob(f"images/sphx_glr_{rst.stem}_[0-9]*.png"),
                             *chapter.glob(f"images/thumb/sphx_glr_{rst.stem}_thumb.*")]:
                    path.unlink()


def _few_pages_run_in_process(app):
    """Worker processes pay off from two pages on: fewer run in the build's own process.

    At builder-inited, before sphinx-gallery (which would start the workers only to find most
    pages unchanged): a page runs if it matches PAGE and its md5 record is missing or differs.
    Starting two workers costs about 1.2 s on 2 cores (issue 6). The setting is changed for
    this build only; it is not what the next build's configuration compares with.
    """
    from sphinx_gallery.utils import get_md5sum

    conf = app.config.sphinx_gallery_conf
    if not conf.get("parallel"):
        return
    srcdir, pattern = Path(app.srcdir), re.compile(conf["filename_pattern"])
    to_run = 0
    for examples, gallery in zip(conf["examples_dirs"], conf["gallery_dirs"]):
        for src in (srcdir / examples).glob("*.py"):
            md5 = srcdir / gallery / f"{src.name}.md5"
            to_run += bool(pattern.search(os.path.normpath(src))) and (
                not md5.is_file() or md5.read_text() != get_md5sum(src, mode="t"))
    if to_run < 2:
        conf["parallel"] = False


def setup(app):
    # Sphinx makes millions of small objects (doctree nodes); Python's default GC thresholds
    # scan them again and again. Fewer young-generation collections: a clean build ~1.2 s
    # faster on 2 cores (19.1 -> 17.8 s, issue 6). Nothing a page computes depends on it.
    gc.set_threshold(50_000, 50, 100)
    app.connect("config-inited", _rerun_pages_on_a_new_machine)
    app.connect("config-inited", _forget_removed_pages)
    # After sphinx-gallery completes its configuration (10), before it runs the pages (500).
    app.connect("builder-inited", _few_pages_run_in_process, priority=100)
    # sphinx-mathjax-offline 0.0.2 only copies MathJax into the output at build-finished, in the
    # main process, but does not say so; Sphinx then refuses to read and write in parallel (-j).
    mathjax = app.extensions.get("sphinx-mathjax-offline")
    if mathjax is not None:
        mathjax.parallel_read_safe = mathjax.parallel_write_safe = True
    app.connect("builder-inited", _write_build_pages, priority=900)  # after sphinx-gallery (500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
