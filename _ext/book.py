"""Build-time hooks. Nothing here is needed to run a page on its own: pages stay plain PyTorch.

- ``reset_page``: sphinx-gallery calls it before and after every page. Before, it reseeds torch,
  applies the house figure style and starts recording the page's claims; after, it writes them to
  ``generated/<chapter>/<page>.claims.json``, next to sphinx-gallery's md5 cache, so a page
  that is not re-run (unchanged) keeps the claims of its last run.
- The proof ledger (chapters/ledger.md) and the landing-page headline are built from those files.
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

ROOT = Path(__file__).resolve().parents[1]
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

    # sys.settrace: only the page's own frames get a line tracer.
    def global_trace(self, frame, event, arg):
        return self.local_trace if frame.f_code.co_filename == self.filename else None

    def local_trace(self, frame, event, arg):
        if event == "line" and frame.f_lineno in self.asserts:
            self.assert_hits[frame.f_lineno] += 1
        return self.local_trace

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


_state = {}


def _start_recording(src):
    import torch

    rec = _Recorder(src)
    original = torch.testing.assert_close

    def assert_close(actual, expected, **kwargs):
        rearm_tracing()
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

    assert_close.__wrapped__ = original
    torch.testing.assert_close = assert_close
    _state.update(recorder=rec, original=original)
    sys.settrace(rec.global_trace)


def rearm_tracing(*args):
    """Put the line tracer back if it was lost; as a sphinx-gallery scraper, after every block.

    CPython drops a trace function that raises, which happens when a page demonstrates a
    RecursionError. The next block (a fresh frame) is traced again.
    """
    rec = _state.get("recorder")
    if rec is not None and sys.gettrace() is None:
        sys.settrace(rec.global_trace)
    return ""  # a scraper returns the reST it adds: nothing


def _stop_recording():
    import torch

    sys.settrace(None)
    rec = _state.pop("recorder", None)
    if rec is None:
        return
    torch.testing.assert_close = _state.pop("original")
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


def _write_headline(app):
    """After sphinx-gallery has run the pages (builder-inited), refresh the landing headline."""
    records = load_claims()
    text = headline(records) + (
        " Each claim, with its measured discrepancy and tolerance, is in the"
        " :doc:`proof ledger </chapters/ledger>`.\n")
    if not HEADLINE.is_file() or HEADLINE.read_text() != text:  # unchanged: index not re-read
        HEADLINE.parent.mkdir(parents=True, exist_ok=True)
        HEADLINE.write_text(text)


# Documents that describe the build itself: re-read (and so re-executed) on every build, so they
# never show another machine's versions, last week's timings or a stale ledger.
ALWAYS_REBUILD = ["chapters/environment", "chapters/ledger"]


def _always_outdated(app, env, added, changed, removed):
    return [doc for doc in ALWAYS_REBUILD if doc in env.found_docs]


def setup(app):
    app.connect("builder-inited", _write_headline, priority=900)  # after sphinx-gallery (500)
    app.connect("env-get-outdated", _always_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
