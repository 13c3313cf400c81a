"""Every claim pins what it names: plausible one-token slips in the gallery's code fail their page.

`tests/mutants.py` makes the mutants and runs them; this test runs it once over every page and
fails on each surviving mutant that `tests/mutation_equivalents.txt` does not explain. By hand:
``.venv/bin/python tests/mutants.py [--page REGEX] [--list] [--per-kind K] [--template]``
(``--template`` prints the survivors as equivalents lines; ``--prune`` drops stale ones).

What was decided, and why:

* **Catalogue** (`mutants.KINDS`, 39 kinds). Constants: an int +1 or -1, a float x10 or /10.
  Dims: 0 <-> 1 and -1 <-> -2 in a ``dim=``/``axis=`` argument or a known dim position
  (``.sum(0)``, ``.softmax(-1)``, ``torch.cat(xs, 1)``). Signs and operators: a unary minus
  dropped, ``+ <-> -``, ``* <-> /``, ``@ -> *``, the exponent of ``**`` negated, ``< <-> <=``
  and ``> <-> >=``, ``== <-> !=``, ``and <-> or``, a ``~``/``not`` dropped (or a mask negated
  in ``masked_fill``/``torch.where``). Normalization: ``unbiased``/``correction`` flipped, the
  ``eps`` term of a sum dropped, an ``eps`` argument or default set to 0, a sqrt dropped,
  ``sqrt <-> rsqrt``, ``keepdim=True`` dropped. Shapes: a transpose/permute dropped (``.T``,
  ``.mT``, ``.t()``, ``.transpose``, ``.permute``), the last two sizes of a
  reshape/view/expand/permute swapped, the two positional arguments of a call swapped.
  Names: ``tril <-> triu``, ``mean <-> sum``, ``max <-> min`` (and amax, argmax, maximum),
  ``exp <-> log``, ``cos <-> sin``, ``zeros <-> ones``. Masks: ``-inf`` -> -100. Slices: the
  end one too small (``[:n]`` -> ``[:n - 1]``), the start dropped (``[1:]`` -> ``[:]``).
  Others: a ``1 +``/``+ 1``/``- 1`` term dropped, a True/False keyword flipped, a keyword
  argument dropped (its default used), a ``.clone()``/``.detach()`` dropped, an ``.abs()``
  dropped, a statement left out (an update, an in-place call, a reassignment).
  Each is an `ast` pattern that yields the exact source span of the site; the mutant is the
  page's own text with that span replaced, so comments, layout and line numbers stay.
* **Which code.** Only code whose result can reach a claim. A backward liveness pass by name
  (flow-sensitive at module level, loops iterated, function and class bodies kept whole when
  they are used) starts from the claims (``_ext/claims.py``, the definition the ledger uses:
  ``assert``, ``assert_close``, a ``try``'s ``else: raise AssertionError``) and
  keeps a statement that defines, mutates (item or attribute store, ``x_(...)``,
  ``.append``, ``.train()``, ``.backward()``, a call of a BatchNorm or of a page class that
  stores on ``self``) or calls what a later kept statement uses. Never mutated: the checks
  themselves; ``print``; plotting (statements naming ``plt``, ``fig``, ``ax``, ``axes``,
  ``matplotlib`` or a name assigned from them); strings, f-strings and docstrings; seeds;
  ``device=``/``generator=`` arguments; code only CUDA runs (the branch of an ``if`` on the
  device that the CPU does not take, the body of a function calling ``torch.cuda.*``): the
  sweep runs on the CPU, as CI does. Also not mutated, because a claim must hold for every
  input and mutating an input tests the input, not the code: the experiment's inputs
  (``B, L, D = 4, 6, 8``-style literal assignments, except names containing ``eps``; loops
  over literal tuples or ranges; random draws and sample grids, ``randn``/``linspace``/...,
  with the arithmetic around them) and the measurement a check makes (around
  ``(a - b).abs()`` or ``(a - b).norm()`` everything but ``a`` and ``b``). Not generated,
  being no change: dropping a keyword whose value is the callee's default
  (``unbiased=True``, ``affine=True``, ...), swapping the arguments of a symmetric call
  (``transpose(1, 2)``, ``maximum``).
* **Subset.** Every candidate site is enumerated (about 3,900 on 22 pages); per (page, kind)
  the `mutants.PER_KIND` = 2 sites with the smallest SHA-1 of (page, kind, line text,
  occurrence) are run (about 790 mutants), so a page's selection changes only when that
  kind's sites on that page change, and a larger ``--per-kind`` runs a superset. Two per kind
  fit the budget: measured 92 s wall on 2 cores shared with other jobs (load average 2-2.5)
  and 145 s at load 3-5, for about 2 min of CPU (half of it kernel time: forks, page faults).
* **Verdict.** A mutant is *killed* when its page exits non-zero: an ``AssertionError`` (a
  claim caught it; the report gives the check's line), another exception (a crash: also a
  detected slip, counted apart) or a timeout (4 x the page's own time, at least 10 s, at most
  30 s; counted apart). It *survives* when the page exits 0; a survivor on a line the
  unmutated page never runs is reported as "never executed" (a blind spot too).
* **Equivalents** (`tests/mutation_equivalents.txt`): one line per mutant,
  ``page: original line => mutated line ## one-line reason``, matched by content (the lines
  of the site, comments dropped, blanks collapsed), so edits elsewhere on the page do not
  invalidate them. The test fails on every unexplained survivor (page:line, kind,
  original => mutant), on an entry that no candidate mutant of the current pages produces
  (stale) and on an entry whose mutant now fails its page (no longer equivalent).
* **Execution.** A fork server: `mutants.py` imports torch and matplotlib (Agg) once and runs
  no tensor operation (so no intra-op thread pool and no CUDA context exist before fork), runs
  each page once unmutated (traced: the lines it executes; what it imports lazily, e.g. the
  ``sympy`` that ``assert_close`` pulls in, is then imported in the parent), freezes the
  garbage collector, then forks one child per mutant, one per core, each with one torch
  thread, ``CUDA_VISIBLE_DEVICES=""``, a fresh temporary directory and the page executed as
  ``__main__`` (the page seeds itself). A child costs the page's own run time (0.15-0.5 s for
  most pages, 2.2 s for the running-statistics page); a ``python page.py`` subprocess per
  mutant cost 4.2 s each (same 12 mutants, same machine: importing torch, and sympy on the
  first ``assert_close``), which would make the sweep about 25 min on 2 cores.
* **Output.** The score is killed / (mutants - listed equivalents); the full report (every
  mutant, its outcome and time, per kind, per page) is written to
  `tests/artifacts/mutation_sweep.txt`, and the summary line ends the pytest run.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ARTIFACTS, ROOT


class _Summary:
    """A late-registered plugin: prints the sweep's summary at the end of the pytest run."""

    def __init__(self, line):
        self.line = line

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("-", "mutation sweep")
        terminalreporter.write_line(self.line)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the sweep's runner forks (POSIX only)")
def test_every_plausible_slip_fails_its_page(tmp_path, request):
    out = tmp_path / "sweep.json"
    report = ARTIFACTS / "mutation_sweep.txt"
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "mutants.py"),
                           "--report", str(report), "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert out.is_file(), f"the sweep did not finish:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
    result = json.loads(out.read_text())
    request.config.pluginmanager.register(_Summary(result["summary"] + f" (report: {report})"))
    problems = []
    if result["unexplained"]:
        problems.append(f"{len(result['unexplained'])} surviving mutants: the page still exits 0 "
                        "(fix the check, or list the mutant in "
                        "tests/mutation_equivalents.txt with a one-line reason):")
        problems += [f"  {line}" for line in result["unexplained"]]
    if result["stale"]:
        problems.append("stale entries in tests/mutation_equivalents.txt (no such mutant):")
        problems += [f"  {line}" for line in result["stale"]]
    if result["killed_listed"]:
        problems.append("listed as equivalent, but the page now fails (remove the entry):")
        problems += [f"  {line}" for line in result["killed_listed"]]
    if problems:
        pytest.fail(result["summary"] + "\n" + "\n".join(problems), pytrace=False)
