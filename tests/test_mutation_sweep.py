"""Every claim pins what it names: plausible one-token slips in the gallery's code fail their page.

Runs the mutation sweep (`tools/sweep`, ``.venv/bin/python -m tools.sweep``) once over every
page and fails on each surviving mutant that `tools/sweep/equivalents.txt` does not explain and
on each listed mutant that now fails its page; stale entries (their code has gone) are dropped
from that file by the sweep and named in the summary. What was decided and why (the catalogue,
which code is mutated, the subset, the verdicts, the equivalents, the fork server):
`tools/sweep/README.md`. The tool's own unit tests: `tests/test_sweep_units.py`.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ARTIFACTS, ROOT, SUMMARY, save_artifact


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the sweep's runner forks (POSIX only)")
def test_every_plausible_slip_fails_its_page(tmp_path):
    out = tmp_path / "sweep.json"
    report = ARTIFACTS / "mutation_sweep.txt"
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "tools.sweep",
                           "--report", str(report), "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert out.is_file(), f"the sweep did not finish:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
    result = json.loads(out.read_text())
    lines = [result["summary"] + f" (report: {report})"]
    if result["dropped"]:
        lines.append(f"dropped {len(result['dropped'])} stale entries from "
                     f"{result['equivalents']} (no candidate mutant produces them any more):")
        lines += [f"  {line}" for line in result["dropped"]]
    save_artifact(SUMMARY, "\n".join(lines) + "\n")  # printed at the end of the run (conftest)
    problems = []
    if result["unexplained"]:
        problems.append(f"{len(result['unexplained'])} surviving mutants: the page still exits 0 "
                        "(fix the check, or list the mutant in "
                        f"{result['equivalents']} with a one-line reason):")
        problems += [f"  {line}" for line in result["unexplained"]]
    if result["killed_listed"]:
        problems.append(f"listed as equivalent in {result['equivalents']}, but the page now "
                        "fails (remove the entry):")
        problems += [f"  {line}" for line in result["killed_listed"]]
    if problems:
        pytest.fail(result["summary"] + "\n" + "\n".join(problems), pytrace=False)
