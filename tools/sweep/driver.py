"""One sweep: the candidates of every page, the selection, the baseline, the mutants, verdicts.

A mutant is killed when its page fails (an AssertionError, another exception, a timeout) and
survives when the page exits 0; a survivor on a line the unmutated page never runs is
"unexecuted". A survivor the equivalents file lists is "equivalent"; a listed mutant that is
killed is reported (the entry is no longer true); stale entries are dropped from the file.
"""

import gc
import os
import time
from dataclasses import dataclass, field

from . import EQUIVALENTS, PAGES, equivalents
from .candidates import PER_KIND, candidates, choose, page_id
from .runner import Job, prepare_parent, run_all

# A mutant's timeout: 4 x the unmutated page's time, at least 10 s, at most 30 s.
TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_FACTOR = 10.0, 30.0, 4.0
KILLED = ("assert", "error", "timeout")
SURVIVED = ("survived", "unexecuted")


@dataclass
class Sweep:
    mutants: list = field(default_factory=list)    # selected
    possible: int = 0
    cuda_only: int = 0
    baseline: dict = field(default_factory=dict)   # page -> {"seconds", "status", ...}
    unexplained: list = field(default_factory=list)
    stale: list = field(default_factory=list)      # (page, before, after) of stale entries
    dropped: list = field(default_factory=list)    # their lines, dropped from the file
    killed_listed: list = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    per_kind: int = PER_KIND
    equivalents: object = EQUIVALENTS  # the file's path

    def counts(self):
        c = {}
        for m in self.mutants:
            c[m.outcome] = c.get(m.outcome, 0) + 1
        return c

    def score(self):
        c = self.counts()
        killed = sum(c.get(k, 0) for k in KILLED)
        judged = len(self.mutants) - c.get("equivalent", 0)
        return killed, judged


def default_workers():
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return int(os.environ.get("MUTANTS_JOBS", n))


def sweep(pages=PAGES, per_kind=PER_KIND, workers=None, list_only=False, verbose=True,
          equivalents_path=EQUIVALENTS, in_scope=None):
    """Sweep `pages`; with `list_only`, select the mutants and run (and write) nothing.

    `in_scope(page)`: whether the equivalents entries of that page are judged (and dropped
    when stale); by default, the pages swept.
    """
    t0 = time.monotonic()
    workers = workers or default_workers()
    result = Sweep(workers=workers, per_kind=per_kind, equivalents=equivalents_path)
    entries = equivalents.read(equivalents_path)
    all_candidates, sources = [], {}
    for path in pages:
        src, muts = candidates(path)
        sources[page_id(path)] = (path, src)
        all_candidates += muts
    result.possible = len(all_candidates)
    result.cuda_only = sum(m.cuda_only for m in all_candidates)
    chosen = choose(all_candidates, per_kind)
    result.mutants = chosen
    if in_scope is None:
        in_scope = sources.__contains__  # the pages swept
    produced = {(m.page, m.before, m.after) for m in all_candidates}
    result.stale = equivalents.stale(entries, produced, in_scope)
    if list_only:
        return result
    result.dropped = equivalents.prune(equivalents_path, result.stale) if result.stale else []
    if verbose and result.dropped:
        print(f"dropped {len(result.dropped)} stale entries from {equivalents_path}:",
              *result.dropped, sep="\n  ", flush=True)

    prepare_parent(pages)
    gc.freeze()

    def progress(done, total):
        if verbose and (done % 25 == 0 or done == total):
            print(f"  {done}/{total} ({time.monotonic() - t0:.0f} s)", flush=True)

    # The unmutated pages, traced: must pass; give the lines they execute and their time.
    if verbose:
        print(f"baseline: {len(pages)} pages on {workers} workers", flush=True)
    base = run_all([Job(pid, path, src.text, True, 120.0)
                    for pid, (path, src) in sources.items()], workers)
    result.baseline = base
    broken = [pid for pid, r in base.items() if r["status"] != "survived"]
    if broken:
        raise SystemExit("unmutated pages fail in the sweep's runner: " + ", ".join(
            f"{pid} ({base[pid]['status']}: {base[pid].get('detail')})" for pid in broken))

    # Modules the pages imported lazily, imported once here instead of once per mutant.
    for name in sorted({n for r in base.values() for n in r.get("modules", [])}):
        try:
            __import__(name)
        except Exception:
            pass
    jobs = []
    for m in chosen:
        path, src = sources[m.page]
        text = src.text[:m.start] + m.repl + src.text[m.end:]
        timeout = min(TIMEOUT_MAX, max(TIMEOUT_MIN, TIMEOUT_FACTOR * base[m.page]["seconds"]))
        jobs.append(Job(m.key + m.page, path, text, False, timeout))
    # Longest pages first: better packing of the last minutes.
    jobs.sort(key=lambda j: -base[page_id(j.path)]["seconds"])
    gc.freeze()  # the children's garbage collector leaves the parent's objects (and pages) alone
    if verbose:
        print(f"{len(jobs)} mutants to run", flush=True)
    res = run_all(jobs, workers, progress)
    for m in chosen:
        judge(m, res.get(m.key + m.page), base[m.page]["lines"], entries, result)
    result.seconds = time.monotonic() - t0
    return result


def judge(m, res, lines, entries, result):
    """Set a mutant's outcome from its run; file it as unexplained or killed-but-listed."""
    if res is not None:
        m.outcome, m.seconds = res["status"], res["seconds"]
        m.detail = res.get("detail", "")
        if res.get("line"):
            m.detail += f" (line {res['line']})"
    if m.outcome == "survived" and lines is not None and m.stmt_line not in lines \
            and m.line not in lines:
        m.outcome = "unexecuted"  # a survivor on a line the unmutated page never runs
    reason = entries.get((m.page, m.before, m.after))
    if reason is not None:
        if m.outcome in SURVIVED:
            m.equivalent, m.outcome = reason, "equivalent"
        else:
            result.killed_listed.append(m)
    elif m.outcome in SURVIVED:
        result.unexplained.append(m)
