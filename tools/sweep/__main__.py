"""The command line: `.venv/bin/python -m tools.sweep --help`, from the repository root."""

import argparse
import json
import os
import re
import sys
from pathlib import Path

from . import EQUIVALENTS, PAGES, REPORT, ROOT
from . import __doc__ as package_doc
from . import equivalents as eq
from .candidates import PER_KIND, candidates, page_id
from .driver import sweep
from .report import as_json, relative, report, summary


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m tools.sweep",
                                 description=package_doc.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path,
                    help="page files to sweep instead of the gallery's (a draft, a fixture)")
    ap.add_argument("--page", default="", help="regex on the gallery's page paths")
    ap.add_argument("--per-kind", type=int, default=PER_KIND,
                    help=f"sites run per page and kind (default {PER_KIND})")
    ap.add_argument("--jobs", type=int, default=None,
                    help="children at a time (default: the cores, or $MUTANTS_JOBS)")
    ap.add_argument("--list", action="store_true", help="list the selected mutants, run nothing")
    ap.add_argument("--all", action="store_true", help="with --list: every candidate")
    ap.add_argument("--report", type=Path, default=REPORT, help="the full report's file")
    ap.add_argument("--json", type=Path, default=None, help="also write the result as JSON here")
    ap.add_argument("--equivalents", type=Path, default=EQUIVALENTS,
                    help=f"the equivalents file (default {relative(EQUIVALENTS)})")
    ap.add_argument("--template", action="store_true",
                    help="print the survivors as lines for the equivalents file (reason blank)")
    ap.add_argument("--prune", action="store_true",
                    help="drop the stale entries of the equivalents file, run nothing "
                         "(a sweep drops them too)")
    return ap.parse_args(argv)


def main(argv=None):
    # Before torch is imported: one OpenMP thread, and no GPU (a CUDA context must not exist
    # before fork; the sweep judges the checks on the CPU).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("MPLBACKEND", "Agg")
    args = parse_args(argv)
    if args.files:
        pages = [p.resolve() for p in args.files]
        ids = {page_id(p) for p in pages}

        def in_scope(page):
            return page in ids
    else:
        pages = [p for p in PAGES if re.search(args.page, str(p.relative_to(ROOT)))]

        def in_scope(page):  # also the entries of a page that is gone
            return bool(re.search(args.page, f"gallery/{page}.py"))
    options = dict(equivalents_path=args.equivalents, in_scope=in_scope)
    try:
        if args.prune:
            stale = sweep(pages, args.per_kind, list_only=True, **options).stale
            dropped = eq.prune(args.equivalents, stale)
            print(f"dropped {len(dropped)} stale lines from {relative(args.equivalents)}")
            for line in dropped:
                print(f"  {line}")
            return 0
        if args.list:
            if args.all:
                muts = [m for p in pages for m in candidates(p)[1]]
            else:
                muts = sweep(pages, args.per_kind, list_only=True, **options).mutants
            for m in muts:
                print(("[cuda] " if m.cuda_only else "") + m.label())
            print(f"{len(muts)} mutants")
            return 0
        result = sweep(pages, args.per_kind, args.jobs, **options)
    except eq.BadEntry as err:
        raise SystemExit(f"bad equivalents entry: {err}") from None
    text = report(result)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(as_json(result)))
    head = text.split("Per kind")[0]
    print(head.rstrip())
    print(summary(result))
    print(f"full report: {args.report}")
    if args.template:
        print(f"\nFor {relative(args.equivalents)}, only if truly equivalent (add the reason):")
        for m in result.unexplained:
            print(eq.template(m))
    return 1 if result.unexplained or result.killed_listed else 0


if __name__ == "__main__":
    sys.exit(main())
