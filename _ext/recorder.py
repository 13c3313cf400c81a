"""Recording a page's claims while it runs; nothing here is needed to run a page on its own.

``start_recording`` wraps ``torch.testing.assert_close`` and makes the compiler count each
``assert`` statement of the page; ``stop_recording`` undoes both and writes what was measured
to ``generated/<chapter>/<page>.claims.json`` (the format: ``claim_files.py``), next to
sphinx-gallery's md5 cache, so a page that is not re-run keeps the record of its last run.
"""

import ast
import datetime
import json
import math
import platform
import re
import sys
from collections import Counter
from pathlib import Path

import claim_files
import claims
import internals
import page_source

ROOT = Path(__file__).resolve().parents[1]
HIT = "__book_assert_hit__"  # a builtin while a page runs; never in the page's own namespace
_state = {}


def _segment_reader(text):
    """``ast.get_source_segment(text, node)`` as a function of the node alone.

    The standard one splits the whole text into lines again, a character at a time in
    Python, at every call: a page with a hundred checks paid about 0.1 s (measured with
    cProfile). Here the text is split once, the way the parser splits it (only at
    ``\\r\\n``, ``\\r`` and ``\\n``); the offsets are in UTF-8 bytes, as in the AST.
    """
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", text)

    def segment(node):
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
        head = lines[first].encode()[node.col_offset:].decode()
        tail = lines[last].encode()[:node.end_col_offset].decode()
        return "".join([head, *lines[first + 1:last], tail])

    return segment


class _Recorder:
    """Every ``torch.testing.assert_close`` call and every ``assert`` statement a page executes."""

    def __init__(self, src):
        self.src = Path(src).resolve()
        self.filename = str(self.src)
        text = self.src.read_text()
        self.source_sha256 = claim_files.source_hash(text)  # of the text that runs
        self.sections = page_source.sections(self.src)
        self.sites = claims.claim_sites(ast.parse(text), _segment_reader(text))
        self.hits = Counter()  # line -> times an assert or a raises claim was checked
        self.close_calls = {}  # line -> aggregated measurements of an assert_close
        self.namespace = None  # the page's globals, seen from its first check

    def hit(self, line):
        """Called by the page's compiled code when the claim on ``line`` is checked.

        Just before an ``assert`` runs; for a ``raises`` claim, when an ``except`` clause of
        its ``try`` caught the exception.
        """
        self.hits[line] += 1
        if self.namespace is None:
            self.namespace = internals.caller_frame(1).f_globals

    def record_close(self, line, actual, expected, kwargs, passed):
        import torch

        rec = self.close_calls.setdefault(line, {"checks": 0, "passed": True, "max_abs": 0.0,
                                                 "norm": 0.0, "ratio": 0.0, "dtype": [],
                                                 "device": [], "shape": [], "rtol": None,
                                                 "atol": None})
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
            exact = not (a.is_floating_point() or a.is_complex())
            rtol, atol = (0.0, 0.0) if exact else internals.default_tolerances(a, e)
        # How close to failing: the largest |a - e| / (atol + rtol |e|), the inequality
        # assert_close tests per element (passes at <= 1); an exact comparison's tolerance is
        # 0, and then any difference is infinitely far and none is 0.
        allowed = atol + rtol * e.to(wide).abs()
        ratio = torch.where(diff == 0, 0.0, diff / allowed).max().item() if diff.numel() \
            else 0.0
        if math.isnan(ratio) or not ratio <= rec["ratio"]:
            rec["ratio"] = ratio
        if math.isnan(max_abs) or max_abs >= rec["max_abs"]:
            rec.update(max_abs=max_abs, norm=norm, rtol=rtol, atol=atol)
        for key, value in (("dtype", str(a.dtype).removeprefix("torch.")),
                           ("device", a.device.type), ("shape", list(a.shape))):
            if value not in rec[key]:
                rec[key].append(value)

    def claims(self):
        rows = []
        for line, (kind, code) in self.sites.items():
            row = {"line": line, "kind": kind, "code": code,
                   "section": self.sections.get(line, "")}
            if kind == "assert_close":
                # A call that never ran (a branch for another device): nothing failed.
                row.update(self.close_calls.get(line, {"checks": 0, "passed": True}))
            else:  # a failing assert or raises claim stops the page: no record is written
                row.update(checks=self.hits[line], passed=True)
            rows.append(row)
        return rows


def _numbers(namespace):
    """The page's module-level numbers when it ended: ints, floats, 0-dim real tensors.

    What prose may quote with the ``:measured:`` role (``measured.py``); names that start
    with ``_`` are left out.
    """
    import numbers

    import torch

    out = {}
    for name, value in (namespace or {}).items():
        if name.startswith("_"):
            continue
        if isinstance(value, torch.Tensor):
            if value.dim() != 0 or value.is_complex():
                continue
            value = value.item()
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[name] = int(value) if isinstance(value, numbers.Integral) else float(value)
    return dict(sorted(out.items()))



class _CountChecks(ast.NodeTransformer):
    """Count each check of a claim: ``<hit>(line)`` before every ``assert``, and first in
    every ``except`` clause of a ``raises`` claim's ``try`` (``line``: its ``raise``)."""

    def visit_Assert(self, node):
        return [_hit(node.lineno, node), node]

    def visit_Try(self, node):
        self.generic_visit(node)
        stmt = claims.errata_try(node)
        if stmt is not None:
            for handler in node.handlers:
                handler.body.insert(0, _hit(stmt.lineno, handler.body[0]))
        return node


def _hit(line, where):
    call = ast.Expr(ast.Call(ast.Name(HIT, ast.Load()), [ast.Constant(line)], []))
    return ast.fix_missing_locations(ast.copy_location(call, where))


def start_recording(src):
    """Wrap ``torch.testing.assert_close`` and count the page's ``assert`` statements.

    sphinx-gallery compiles each block of a page with a ``codeop.Compile`` instance; while the
    page runs, that compiler (``internals.patch_block_compiler``) inserts a counting call before
    each of the page's ``assert`` statements (the page's text and its line numbers are
    unchanged). This replaced a ``sys.settrace`` line tracer, which slowed every Python call of
    a page by a third or more (matplotlib's drawing most): measured in issue 6.
    """
    import builtins

    import torch

    if sys.flags.optimize:
        raise RuntimeError("python -O strips assert statements, and the book's asserts are its "
                           "claims: build without -O (and without PYTHONOPTIMIZE)")
    rec = _Recorder(src)
    original = torch.testing.assert_close

    def assert_close(actual, expected, **kwargs):
        caller = internals.caller_frame(1)
        line = caller.f_lineno if caller.f_code.co_filename == rec.filename else None
        try:
            result = original(actual, expected, **kwargs)
        except AssertionError:
            if line is not None:
                rec.record_close(line, actual, expected, kwargs, passed=False)
            raise
        if line is not None:
            rec.record_close(line, actual, expected, kwargs, passed=True)
            if rec.namespace is None:
                rec.namespace = caller.f_globals
        return result

    assert_close.__wrapped__ = original
    torch.testing.assert_close = assert_close
    undo_compiler = internals.patch_block_compiler(_CountChecks().visit, rec.filename)
    setattr(builtins, HIT, rec.hit)
    undo_figures = _record_figures(rec)
    _state.update(recorder=rec, original=original, undo_compiler=undo_compiler,
                  undo_figures=undo_figures)


def _record_figures(rec):
    """Record, for each figure the page saves (sphinx-gallery saves each one, in order), its
    width and its smallest fonts: what a reader can read of it once the page shrinks it to
    the text column (tests/test_browser_figures.py). Returns the undo."""
    from matplotlib.figure import Figure

    original = Figure.savefig
    rec.figures = []

    def savefig(fig, *args, **kwargs):
        def smallest(texts):
            sizes = [t.get_fontsize() for t in texts if t.get_visible() and t.get_text()]
            return min(sizes) if sizes else None

        result = original(fig, *args, **kwargs)  # drawn now: the tick labels hold their text
        if rec.figures and rec.figures[-1]["id"] == id(fig):
            return result  # the same figure again (sphinx-gallery's 2x image)
        ticks, legends = [], []
        for ax in fig.axes:
            ticks += ax.get_xticklabels() + ax.get_yticklabels()
            if ax.get_legend() is not None:
                legends += ax.get_legend().get_texts()
        legends += [t for legend in fig.legends for t in legend.get_texts()]
        rec.figures.append({"id": id(fig), "width_in": fig.get_figwidth(),
                            "tick_pt": smallest(ticks), "legend_pt": smallest(legends)})
        return result

    Figure.savefig = savefig

    def undo():
        Figure.savefig = original
    return undo


def unpatch():
    """Undo what start_recording changed; return the page's recorder (None if none ran)."""
    import builtins

    import torch

    rec = _state.pop("recorder", None)
    if rec is not None:
        torch.testing.assert_close = _state.pop("original")
        _state.pop("undo_compiler")()
        _state.pop("undo_figures")()
        delattr(builtins, HIT)
    return rec


def stop_recording():
    """Undo the patches and write the page's claim record (nothing if no page was recording)."""
    import torch

    rec = unpatch()
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
        "source_sha256": rec.source_sha256,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "verified_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "recorder": claim_files.RECORDER,
        "claims": rec.claims(),
        "values": _numbers(rec.namespace),
    }
    (out_dir / f"{stem}.claims.json").write_text(json.dumps(record, indent=1) + "\n")
    # Each figure the page saved, in order: its width and smallest fonts (a file of its own:
    # the claim records' format stays as claim_files.py reads it).
    figures = [{k: v for k, v in f.items() if k != "id"} for f in rec.figures]
    (out_dir / f"{stem}.figures.json").write_text(json.dumps(figures, indent=1) + "\n")
