"""The book's mutation sweep: plausible one-token slips in the gallery's code must fail their page.

Run from the repository root, with the book's venv:

    .venv/bin/python -m tools.sweep                  # the whole sweep; prints the survivors
    .venv/bin/python -m tools.sweep --page rope      # pages whose path matches a regex
    .venv/bin/python -m tools.sweep --list           # the selected mutants, without running
    .venv/bin/python -m tools.sweep --list --all     # every candidate mutant
    .venv/bin/python -m tools.sweep --per-kind 3     # more sites per (page, kind)

`tests/test_mutation_sweep.py` runs it under `make test`. What was decided and why (the
catalogue, which code is mutated, the subset, the verdicts, the equivalents, the fork server):
`README.md` in this folder. The modules, in the order a sweep uses them:

    source.py       a page's text, its ast and the character spans of its nodes
    catalogue.py    the kinds of slip: name, description, where each applies
    liveness.py     which statements of a page can reach a claim
    candidates.py   every candidate mutant of a page, and the subset that is run
    equivalents.py  the surviving mutants listed as equivalent (equivalents.txt)
    runner.py       the fork server that runs the pages and their mutants
    driver.py       one sweep: candidates, selection, baseline, mutants, verdicts
    report.py       the report, the summary line and the JSON
    __main__.py     the command line
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(ROOT.glob("gallery/*/plot_*.py"))
EQUIVALENTS = Path(__file__).resolve().with_name("equivalents.txt")
REPORT = ROOT / "tests" / "artifacts" / "mutation_sweep.txt"

# `claims` (what a claim is: the one definition the recorder uses too) lives in _ext/.
if str(ROOT / "_ext") not in sys.path:
    sys.path.insert(0, str(ROOT / "_ext"))
