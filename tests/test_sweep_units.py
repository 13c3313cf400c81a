"""Unit tests of the mutation sweep (`tools/sweep`): fast, on snippets and a tiny fixture page.

No gallery page is run here (`test_mutation_sweep.py` sweeps them all). One test runs the whole
tool on the fixture page in a subprocess (its fork server imports torch once: a few seconds).
"""

import ast
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from tools.sweep import equivalents
from tools.sweep.candidates import Mutant, candidates, choose, defined_before
from tools.sweep.catalogue import KINDS
from tools.sweep.driver import Sweep, judge
from tools.sweep.liveness import Analysis, imported_modules
from tools.sweep.source import Source

# A tiny page in the gallery's form. Lines 14-17 cannot reach a claim (a dead assignment, a
# print, plotting); line 7 is the experiment's input; line 12 has extra blanks and a comment.
FIXTURE = '''\
"""A tiny page: a softmax whose rows must sum to one."""

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
x = torch.randn(3, 4, 5)
p = torch.softmax(x, dim=-1)
torch.testing.assert_close(p.sum(dim=-1), torch.ones(3, 4))
shifted = x + 1.0
assert (shifted > x).all()
y  =  x.clone()   # a copy
assert torch.equal(y, x)
dead = x.sum(dim=-1) - 2.0
print((p * 2).max(dim=-1))
fig, ax = plt.subplots()
ax.plot(x[0, 0] - 1.0)
'''
PAGE = "fixture/plot_tiny"  # the page id of tmp_path/fixture/plot_tiny.py
SOFTMAX = "p = torch.softmax(x, dim=-1)"


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "fixture" / "plot_tiny.py"
    path.parent.mkdir()
    path.write_text(FIXTURE)
    return path


def write(tmp_path, code, name="snippet.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


# --------------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------------
# kind -> (a snippet, every mutant the kind makes of it); `import torch` comes first.
SNIPPETS = {
    "int+1": ("y = x[3]", ["y = x[4]"]),
    "int-1": ("y = x[3]", ["y = x[2]"]),
    "float*10": ("y = x * 0.5", ["y = x * 5.0"]),
    "float/10": ("y = x * 0.5", ["y = x * 0.05"]),
    "dim 0<->1": ("y = x.sum(0) + torch.cat([a, b], 1)",
                  ["y = x.sum(1) + torch.cat([a, b], 1)", "y = x.sum(0) + torch.cat([a, b], 0)"]),
    "dim -1<->-2": ("y = torch.softmax(x, dim=-1).mean(-2)",
                    ["y = torch.softmax(x, dim=-2).mean(-2)",
                     "y = torch.softmax(x, dim=-1).mean(-1)"]),
    "drop unary minus": ("y = -x", ["y = x"]),
    "+ <-> -": ("y = a + b - c", ["y = a - b - c", "y = a + b + c"]),
    "* <-> /": ("y = a * b / c", ["y = a / b / c", "y = a * b * c"]),
    "@ -> *": ("y = a @ b", ["y = a * b"]),
    "exponent sign": ("y = a ** 2 + b ** -0.5",
                      ["y = a ** -2 + b ** -0.5", "y = a ** 2 + b ** 0.5"]),
    "unbiased": ("v = x.var(unbiased=False) + x.std(correction=0)",
                 ["v = x.var(unbiased=True) + x.std(correction=0)",
                  "v = x.var(unbiased=False) + x.std(correction=1)"]),
    "bool kwarg": ("m = f(x, affine=False, keepdim=True)", ["m = f(x, affine=True, keepdim=True)"]),
    "drop + eps": ("y = (v + eps) * (1e-5 + w)", ["y = (v) * (1e-5 + w)", "y = (v + eps) * (w)"]),
    "eps = 0": ("def f(x, eps=1e-5):\n    return x\ny = g(x, eps=1e-6)",
                ["def f(x, eps=0.0):\n    return x\ny = g(x, eps=1e-6)",
                 "def f(x, eps=1e-5):\n    return x\ny = g(x, eps=0.0)"]),
    "drop sqrt": ("y = torch.sqrt(v) * w.rsqrt()", ["y = v * w.rsqrt()", "y = torch.sqrt(v) * w"]),
    "sqrt <-> rsqrt": ("y = v.sqrt() * torch.rsqrt(w)",
                       ["y = v.rsqrt() * torch.rsqrt(w)", "y = v.sqrt() * torch.sqrt(w)"]),
    "drop transpose": ("y = a @ b.T + c.transpose(0, 1)",
                       ["y = a @ b + c.transpose(0, 1)", "y = a @ b.T + c"]),
    "tril <-> triu": ("m = torch.tril(a) + b.triu_()",
                      ["m = torch.triu(a) + b.triu_()", "m = torch.tril(a) + b.tril_()"]),
    "-inf -> -100": ("s = s.masked_fill(m, float('-inf')) + t.masked_fill(m, -torch.inf)",
                     ["s = s.masked_fill(m, -100.0) + t.masked_fill(m, -torch.inf)",
                      "s = s.masked_fill(m, float('-inf')) + t.masked_fill(m, -100.0)"]),
    "drop keepdim": ("y = x.mean(-1, keepdim=True)", ["y = x.mean(-1)"]),
    "mean <-> sum": ("y = x.mean() + x.sum()",
                     ["y = x.sum() + x.sum()", "y = x.mean() + x.mean()"]),
    "max <-> min": ("y = x.amax() + torch.minimum(a, b)",
                    ["y = x.amin() + torch.minimum(a, b)", "y = x.amax() + torch.maximum(a, b)"]),
    "exp <-> log": ("y = torch.exp(x) + x.log()",
                    ["y = torch.log(x) + x.log()", "y = torch.exp(x) + x.exp()"]),
    "cos <-> sin": ("y = torch.cos(x) + x.sin()",
                    ["y = torch.sin(x) + x.sin()", "y = torch.cos(x) + x.cos()"]),
    "zeros <-> ones": ("y = torch.zeros_like(x) + torch.ones(3)",
                       ["y = torch.ones_like(x) + torch.ones(3)",
                        "y = torch.zeros_like(x) + torch.zeros(3)"]),
    "< <-> <=": ("ok = a < b <= c or d > e >= f",
                 ["ok = a <= b <= c or d > e >= f", "ok = a < b < c or d > e >= f",
                  "ok = a < b <= c or d >= e >= f", "ok = a < b <= c or d > e > f"]),
    "== <-> !=": ("ok = a == b != c", ["ok = a != b != c", "ok = a == b == c"]),
    "slice end - 1": ("y = x[:n] + x[:3]", ["y = x[:n - 1] + x[:3]", "y = x[:n] + x[:2]"]),
    "drop slice start": ("y = x[1:] + x[0:]", ["y = x[:] + x[0:]"]),
    "swap two args": ("y = f(a, b) + torch.maximum(a, b)", ["y = f(b, a) + torch.maximum(a, b)"]),
    "swap reshape dims": ("y = x.reshape(B, H, W)", ["y = x.reshape(B, W, H)"]),
    "drop 1 +/- 1": ("y = (n - 1) * (1 + m)", ["y = (n) * (1 + m)", "y = (n - 1) * (m)"]),
    "mask inverted": ("y = torch.where(m, a, b) & ~k\nz = x.where(m, y)",
                      ["y = torch.where(~m, a, b) & ~k\nz = x.where(m, y)",
                       "y = torch.where(m, a, b) & k\nz = x.where(m, y)"]),
    "and <-> or": ("ok = a and b or c", ["ok = a or b or c", "ok = a and b and c"]),
    "drop clone": ("y = x.clone() + z.detach()", ["y = x + z.detach()", "y = x.clone() + z"]),
    "drop abs": ("y = x.abs() + torch.abs(z)", ["y = x + torch.abs(z)", "y = x.abs() + z"]),
    "drop kwarg": ("y = f(x, momentum=0.1, unbiased=True, device=d)",
                   ["y = f(x, unbiased=True, device=d)"]),
    "drop statement": ("x = 1\nx += 1\nx = x * 2\nf(x)\ntorch.manual_seed(0)",
                       ["x = 1\npass\nx = x * 2\nf(x)\ntorch.manual_seed(0)",
                        "x = 1\nx += 1\npass\nf(x)\ntorch.manual_seed(0)",
                        "x = 1\nx += 1\nx = x * 2\npass\ntorch.manual_seed(0)"]),
}


def mutants_of(kind, code, tmp_path):
    """Every text the kind makes of a snippet: applied to each statement or each node."""
    src = Source(write(tmp_path, code))
    ctx = {"modules": imported_modules(src.tree), "src": src,
           "defined_before": defined_before(src.tree)}
    nodes = [n for n in ast.walk(src.tree) if isinstance(n, ast.stmt) or not kind.statement]
    return {src.text[:a] + repl + src.text[b:] for n in nodes
            for a, b, repl in kind.sites(n, src, ctx) or []}


def test_catalogue_every_kind_has_a_description_and_a_snippet():
    assert len(KINDS) == 39
    assert set(SNIPPETS) == set(KINDS), "each kind needs a snippet here (and no other)"
    for name, kind in KINDS.items():
        assert kind.description.strip() and callable(kind.sites), name


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_catalogue_every_kind_makes_its_mutants(name, tmp_path):
    code, mutants = SNIPPETS[name]
    made = mutants_of(KINDS[name], f"import torch\n{code}\n", tmp_path)
    assert made == {f"import torch\n{m}\n" for m in mutants}, name


def test_catalogue_makes_no_change_that_is_none(tmp_path):
    """A default dropped (unbiased=True), a symmetric call's arguments swapped: no mutant."""
    code = ("import torch\nv = x.var(unbiased=True)\ny = x.transpose(1, 2)\n"
            "z = torch.maximum(a, b)\n")
    assert not mutants_of(KINDS["drop kwarg"], code, tmp_path)
    assert not mutants_of(KINDS["swap two args"], code, tmp_path)


# --------------------------------------------------------------------------------------------
# Liveness: which statements can reach a claim (the snippets are analysed, never run)
# --------------------------------------------------------------------------------------------
LIVE = '''\
import torch


def double(t):
    return t * 2


def unused(t):
    return t + 1


x = torch.ones(3)
y = double(x)
z = unused(x)
acc = []
for v in y:
    acc.append(v)
w = x + 1
print(w)
fig = w * 2
s = 0
for k in range(3):
    s = s + k
curve = []
for k in range(3):
    curve.append(k * w)
line, = plt.plot(curve)
c = w / 3
line.set_alpha(c)
bn = torch.nn.BatchNorm1d(3)
bn(x[None])
assert sum(acc) == 6 and s == 3
assert bn.running_mean.sum() > 0
'''


def relevant_lines(tmp_path, code):
    return {s.lineno for s in Analysis(Source(write(tmp_path, code))).relevant}


def test_liveness_keeps_what_reaches_a_claim_and_nothing_else(tmp_path):
    kept = relevant_lines(tmp_path, LIVE)
    assert {4, 5, 12, 13} <= kept       # a used function, whole; what it is called with
    assert {15, 16, 17} <= kept         # a list filled in a loop, then checked
    assert {21, 22, 23} <= kept         # a value carried around a loop
    assert {30, 31} <= kept             # a stateful module, updated by a bare call
    assert {32, 33} <= kept             # the claims themselves
    assert not kept & {8, 9, 14}        # a function whose result is never checked
    assert not kept & {18, 19, 20}      # feeds only print and a plot
    assert not kept & {24, 25, 26, 27}  # a list filled for a plot only
    assert not kept & {28, 29}          # a value for a name assigned from plotting
    assert kept == {4, 5, 12, 13, 15, 16, 17, 21, 22, 23, 30, 31, 32, 33}


def test_liveness_follows_a_value_into_the_next_pass_of_a_loop(tmp_path):
    code = '''\
prev, total = 0, 0
for k in range(3):
    total = total + prev
    prev = 2 * k
assert total == 2
'''
    assert relevant_lines(tmp_path, code) == {1, 2, 3, 4, 5}  # line 4 feeds line 3, one pass on


def test_liveness_an_errata_try_is_a_claim(tmp_path):
    code = '''\
import torch
a = torch.ones(2)
b = torch.ones(3)
c = a * 2
try:
    torch.cat([a, b], dim=1)
except (IndexError, RuntimeError):
    pass
else:
    raise AssertionError("a 1-d cat along dim 1 should raise")
'''
    kept = relevant_lines(tmp_path, code)
    assert {2, 3, 5, 6} <= kept and 4 not in kept


# --------------------------------------------------------------------------------------------
# Candidates: what is mutated on the fixture page
# --------------------------------------------------------------------------------------------
def test_candidates_reach_a_claim_and_only_those(page):
    src, muts = candidates(page)
    assert {m.page for m in muts} == {PAGE}
    lines = {m.line for m in muts}
    assert lines == {8, 10, 12}, sorted((m.line, m.kind) for m in muts)
    assert ("dim -1<->-2", SOFTMAX, "p = torch.softmax(x, dim=-2)") in {
        (m.kind, m.before, m.after) for m in muts}
    # The mutant is the page's own text with one span replaced: comments and layout stay.
    m = next(m for m in muts if m.kind == "drop clone")
    text = src.text[:m.start] + m.repl + src.text[m.end:]
    assert "y  =  x   # a copy\n" in text and text.count("\n") == src.text.count("\n")


def test_candidates_describe_sites_without_comments_or_extra_blanks(page):
    m = next(m for m in candidates(page)[1] if m.kind == "drop clone")
    assert (m.before, m.after) == ("y = x.clone()", "y = x")
    key, reason = equivalents.parse(f"{PAGE}:  y =  x.clone()  =>  y  = x ## an alias")
    assert key == (m.page, m.before, m.after) and reason == "an alias"
    # A site over several lines: each line's comment dropped, the lines joined.
    code = "import torch\nz = torch.cat(a,  # the first\n              b)  # the second\nassert z\n"
    muts = candidates(write(page.parent, code, "plot_two_lines.py"))[1]
    m = next(m for m in muts if m.kind == "swap two args")
    assert (m.before, m.after) == ("z = torch.cat(a, b)", "z = torch.cat(b, a)")


def test_candidates_skip_cuda_only_code(tmp_path):
    code = '''\
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.ones(3)
if device == "cuda":
    y = x * 2
else:
    y = x * 3
assert y.sum() > 0
'''
    muts = candidates(write(tmp_path, code))[1]
    assert {m.cuda_only for m in muts if m.line == 5} == {True}
    assert {m.cuda_only for m in muts if m.line == 7} == {False}
    assert not any(m.line == 5 for m in choose(muts, 10))


# --------------------------------------------------------------------------------------------
# Selection: deterministic, a larger per-kind is a superset
# --------------------------------------------------------------------------------------------
MANY = "import torch\nx = torch.randn(8, 8)\nout = []\n" + "".join(
    f"out.append(x[{i}] * {i + 2} + {i + 3})\n" for i in (0, 1, 2, 3, 4, 5, 0)) + (
    "assert len(out) == 7\n")  # the last line repeats the first: the same sites, twice


def chosen_keys(path, per_kind):
    return [m.key for m in choose(candidates(path)[1], per_kind)]


def test_selection_is_deterministic_and_grows_as_a_superset(tmp_path):
    path = write(tmp_path, MANY, "plot_many.py")
    assert chosen_keys(path, 2) == chosen_keys(path, 2)
    one, two, three = (set(chosen_keys(path, k)) for k in (1, 2, 3))
    assert one < two < three
    muts = candidates(path)[1]
    choose(muts, 2)  # sets every candidate's key
    keys = {}
    for m in muts:
        keys.setdefault(m.kind, []).append(m.key)
    assert two == {k for group in keys.values() for k in sorted(group)[:2]}  # the smallest
    assert max(len(group) for group in keys.values()) > 3


def test_renumbering_a_page_draws_the_same_mutants(tmp_path):
    """Pages are renumbered into reading order (issue 25): the number is no part of the key,
    the chapter and the topic are."""
    early = chosen_keys(write(tmp_path, MANY, "plot_03_many.py"), 2)
    late = chosen_keys(write(tmp_path, MANY, "plot_17_many.py"), 2)
    other = chosen_keys(write(tmp_path, MANY, "plot_17_other.py"), 2)
    assert early == late and set(early).isdisjoint(other)


def test_selection_key_is_the_sha1_of_the_site(tmp_path):
    """The key orders the sites of a (page, kind): SHA-1 of page|kind|before|after|occurrence,
    the same in every process (no Python hash)."""
    path = write(tmp_path, MANY, "plot_many.py")
    muts = candidates(path)[1]
    choose(muts, 2)
    first = muts[0]  # on line 4; line 10 reads the same, so it makes the same mutant again
    again = next(m for m in muts if m.line == 10 and m.kind == first.kind)
    assert (first.line, again.before, again.after) == (4, first.before, first.after)
    for m, occurrence in ((first, 1), (again, 2)):
        ident = f"{m.page}|{m.kind}|{m.before}|{m.after}|{occurrence}"
        assert m.key == hashlib.sha1(ident.encode()).hexdigest()
    assert len({m.key for m in muts}) == len(muts)
    code = ("import sys; from tools.sweep.candidates import candidates, choose; "
            "print([m.key for m in choose(candidates(sys.argv[1])[1], 2)])")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                             check=True).stdout
        assert out.strip() == str(chosen_keys(path, 2))


# --------------------------------------------------------------------------------------------
# The equivalents file
# --------------------------------------------------------------------------------------------
def test_equivalents_need_a_reason(tmp_path):
    for line in ("p: a => b ## ", "p: a => b ##", "p: a => b", "p a => b ## why"):
        with pytest.raises(equivalents.BadEntry):
            equivalents.parse(line)
    path = write(tmp_path, "# a comment\n\np: a => b ## why\np: c => d ## \n", "eq.txt")
    with pytest.raises(equivalents.BadEntry, match=r"eq\.txt:4: an equivalent needs a reason"):
        equivalents.read(path)


def test_equivalents_stale_entries_are_dropped_and_the_rest_kept(tmp_path):
    text = ("# Mutants that survive for a stated reason.\n\n"
            "p: a = b + 1 => a = b ## gone\n"
            "p: c = d * 2 => c = d / 2 ## still there\n"
            "q: e = f => e = -f ## another page, not swept\n")
    path = write(tmp_path, text, "eq.txt")
    entries = equivalents.read(path)
    assert entries[("p", "c = d * 2", "c = d / 2")] == "still there"
    produced = {("p", "c = d * 2", "c = d / 2")}
    stale = equivalents.stale(entries, produced, lambda page: page == "p")
    assert stale == [("p", "a = b + 1", "a = b")]
    assert equivalents.prune(path, stale) == ["p: a = b + 1 => a = b ## gone"]
    assert path.read_text() == text.replace("p: a = b + 1 => a = b ## gone\n", "")
    assert equivalents.prune(path, []) == [] and path.read_text() == text.replace(
        "p: a = b + 1 => a = b ## gone\n", "")


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------
def mutant(line=3, before="a", after="b"):
    return Mutant(PAGE, "int+1", line, 0, 1, "2", before, after, stmt_line=line)


def test_verdicts():
    entries = {(PAGE, "a", "b"): "why"}
    cases = [  # (run result, lines the page runs, listed, outcome, unexplained, killed listed)
        ({"status": "assert", "seconds": 1.0, "line": 9}, [3], False, "assert", 0, 0),
        ({"status": "timeout", "seconds": 10.0}, [3], False, "timeout", 0, 0),
        ({"status": "survived", "seconds": 1.0}, [3], False, "survived", 1, 0),
        ({"status": "survived", "seconds": 1.0}, [4], False, "unexecuted", 1, 0),
        ({"status": "survived", "seconds": 1.0}, [3], True, "equivalent", 0, 0),
        ({"status": "survived", "seconds": 1.0}, [4], True, "equivalent", 0, 0),
        ({"status": "error", "seconds": 1.0}, [3], True, "error", 0, 1),
    ]
    for res, lines, listed, outcome, unexplained, killed_listed in cases:
        result = Sweep()
        m = mutant(after="b" if listed else "c")
        judge(m, res, lines, entries, result)
        assert m.outcome == outcome
        assert m.equivalent == ("why" if outcome == "equivalent" else "")
        assert (len(result.unexplained), len(result.killed_listed)) == (unexplained,
                                                                        killed_listed)
    outcomes = ["assert", "error", "timeout", "survived", "unexecuted", "equivalent"]
    mutants = [mutant() for _ in outcomes]
    for m, outcome in zip(mutants, outcomes):
        m.outcome = outcome
    assert Sweep(mutants=mutants).score() == (3, 5)  # killed / (mutants - equivalents)


# --------------------------------------------------------------------------------------------
# The whole tool on the fixture page (fork server included)
# --------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the sweep's runner forks (POSIX only)")
def test_the_sweep_kills_a_slip_and_judges_the_equivalents(page, tmp_path):
    listed = (
        "# kept as it is\n"
        f"{PAGE}: y = x.clone() => y = x ## y is only compared with x: an alias is equal too\n"
        f"{PAGE}: shifted = x + 1.0 => shifted = x + 10.0 ## any positive shift passes\n"
        f"{PAGE}: {SOFTMAX} => p = torch.softmax(x, dim=-2) ## listed wrongly: rows no longer\n"
        f"{PAGE}: z = x * 3 => z = x / 3 ## code that has gone\n"
        "other/plot_page: a = b + 1 => a = b ## a page not swept\n")
    eq_path = write(tmp_path, listed, "equivalents.txt")
    out, report = tmp_path / "out.json", tmp_path / "report.txt"
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "tools.sweep", str(page), "--per-kind", "9",
                           "--jobs", "2", "--equivalents", str(eq_path), "--json", str(out),
                           "--report", str(report)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    outcomes = {(m["kind"], m["after"]): m["outcome"] for m in result["mutants"]}
    assert len(outcomes) == len(result["mutants"]) == 10  # every candidate ran
    assert outcomes["dim -1<->-2", "p = torch.softmax(x, dim=-2)"] == "assert"
    assert outcomes["drop kwarg", "p = torch.softmax(x)"] == "error"  # softmax needs its dim
    assert outcomes["drop clone", "y = x"] == "equivalent"
    assert outcomes["float*10", "shifted = x + 10.0"] == "equivalent"
    assert result["unexplained"] == [f"{PAGE}:10 [float/10] shifted = x + 1.0 => shifted = x + 0.1"]
    assert [line.split(" [")[1].split("]")[0] for line in result["killed_listed"]] == [
        "dim -1<->-2", "int+1"]  # `dim=-1` made `dim=-2` by two kinds: both fail the page
    assert result["stale"] == [f"{PAGE}: z = x * 3 => z = x / 3"]
    assert result["dropped"] == [f"{PAGE}: z = x * 3 => z = x / 3 ## code that has gone"]
    assert eq_path.read_text() == listed.replace(result["dropped"][0] + "\n", "")
    assert proc.returncode == 1  # an unexplained survivor, a killed equivalent
    assert "1 unexplained survivors, 1 stale (dropped) and 2 killed" in result["summary"]
