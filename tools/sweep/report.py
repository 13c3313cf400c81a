"""What a sweep says: the full report, the one-line summary, the JSON the test reads."""

from dataclasses import asdict

from . import ROOT
from .catalogue import KINDS
from .driver import KILLED


def relative(path):
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def survivor(m):
    return m.label() + (" (never executed)" if m.outcome == "unexecuted" else "")


def stale_line(key):
    page, before, after = key
    return f"{page}: {before} => {after}"


def report(result):
    killed, judged = result.score()
    c = result.counts()
    lines = [
        "Mutation sweep of the gallery (tools/sweep)",
        f"{len(KINDS)} kinds, {result.possible} candidate mutants "
        f"({result.cuda_only} on CUDA-only code, not run on CPU), "
        f"{len(result.mutants)} selected ({result.per_kind} per page and kind)",
        f"workers {result.workers}, wall {result.seconds:.0f} s",
        f"killed {killed} / {judged} = {100 * killed / max(judged, 1):.1f}%: "
        f"by an assertion {c.get('assert', 0)}, by another exception {c.get('error', 0)}, "
        f"by a timeout {c.get('timeout', 0)}; survived {c.get('survived', 0)}, "
        f"unexecuted {c.get('unexecuted', 0)}, listed as equivalent {c.get('equivalent', 0)}",
        "",
    ]
    if result.unexplained:
        lines.append(f"UNEXPLAINED SURVIVORS ({len(result.unexplained)}):")
        lines += [f"  {survivor(m)}" for m in result.unexplained]
        lines.append("")
    if result.stale:
        lines.append(f"STALE EQUIVALENTS, no candidate mutant matches them "
                     f"({len(result.stale)}; dropped from {relative(result.equivalents)}):")
        lines += [f"  {stale_line(key)}" for key in result.stale]
        lines.append("")
    if result.killed_listed:
        lines.append(f"LISTED AS EQUIVALENT BUT KILLED ({len(result.killed_listed)}):")
        lines += [f"  {m.label()}: {m.outcome} {m.detail}" for m in result.killed_listed]
        lines.append("")
    lines.append("Per kind (selected / killed):")
    for name, kind in KINDS.items():
        ms = [m for m in result.mutants if m.kind == name]
        k = sum(m.outcome in KILLED for m in ms)
        lines.append(f"  {name:18s} {len(ms):4d} {k:4d}  {kind.description}")
    lines.append("")
    lines.append("Per page (selected / by an assertion / by another exception / timeout / "
                 "equivalent / survived):")
    for page in sorted({m.page for m in result.mutants}):
        ms = [m for m in result.mutants if m.page == page]
        n = {o: sum(m.outcome == o for m in ms) for o in
             ("assert", "error", "timeout", "equivalent", "survived", "unexecuted")}
        lines.append(f"  {page:42s} {len(ms):4d} {n['assert']:4d} {n['error']:4d} "
                     f"{n['timeout']:3d} {n['equivalent']:4d} {n['survived'] + n['unexecuted']:4d}")
    lines.append("")
    if result.baseline:
        lines.append("Baseline (traced) seconds per page:")
        lines += [f"  {pid}: {r['seconds']:.1f}" for pid, r in sorted(result.baseline.items())]
        lines.append("")
    lines.append("Every mutant (outcome, seconds, site):")
    for m in result.mutants:
        extra = f" -- {m.equivalent}" if m.equivalent else f" -- {m.detail}" if m.detail else ""
        lines.append(f"  {m.outcome:10s} {m.seconds:5.1f}  {m.label()}{extra}")
    return "\n".join(lines) + "\n"


def summary(result):
    killed, judged = result.score()
    return (f"mutation sweep: {killed}/{judged} killed = {100 * killed / max(judged, 1):.1f}% "
            f"of {len(result.mutants)} mutants ({len(KINDS)} kinds) in {result.seconds:.0f} s "
            f"on {result.workers} workers; {len(result.unexplained)} unexplained survivors, "
            f"{len(result.stale)} stale (dropped) and {len(result.killed_listed)} killed "
            "equivalents")


def as_json(result):
    """What `tests/test_mutation_sweep.py` reads (and every mutant, for a closer look)."""
    return {
        "summary": summary(result),
        "equivalents": relative(result.equivalents),
        "unexplained": [survivor(m) for m in result.unexplained],
        "stale": [stale_line(key) for key in result.stale],
        "dropped": result.dropped,
        "killed_listed": [m.label() for m in result.killed_listed],
        "mutants": [asdict(m) for m in result.mutants],
    }
