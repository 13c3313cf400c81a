"""
Norms in 16 bits
================

What PyTorch's LayerNorm, RMSNorm, GroupNorm and BatchNorm compute on bfloat16 and
float16 input: the float32 computation rounded once to the input's dtype (bit for bit,
or within a stated number of units in the last place), and measurably closer to the
exact result than the same formula computed in 16 bits throughout. Then what 16-bit
arithmetic does to ``eps``, why the variance is never computed as
:math:`E[x^2] - E[x]^2`, and how far apart the RMSNorms of Llama and Gemma in Hugging
Face ``transformers`` land in 16 bits, the two differing only in when the weight is
applied. RMSNorm's default ``eps=None`` per dtype is proven on
:doc:`/generated/normalization/plot_06_groupnorm_rmsnorm`.
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every model is built from a small random config; nothing is
# downloaded (``HF_HUB_OFFLINE=1``).
#
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import transformers
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")
bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
DTYPES = (bf16, f16)
for dt in DTYPES:
    print(f"{str(dt):15s} eps = {torch.finfo(dt).eps:.2e} (one ulp at 1), "
          f"smallest normal {torch.finfo(dt).tiny:.1e}, max {torch.finfo(dt).max:.3g}")


# %%
# The naive computation and the exact one
# ---------------------------------------
# "Naive" is the textbook formula evaluated in the 16-bit dtype throughout: every
# addition of the running sum is rounded to the dtype, as a hand-written loop in 16 bits
# would. Its statistics are the weak point: once the sum of 1024 values of about 5
# passes 2048, bfloat16's spacing there (16) exceeds twice each addend and the sum stops
# growing. The reference is the same formula in float64 on the *same rounded* input and
# weights, computed with ``torch.var_mean``, a code path the naive one does not share.
def sum16(t):
    """Sum over the last dim of t (..., n), one rounding to t.dtype per addition."""
    s = torch.zeros_like(t[..., 0])
    for j in range(t.shape[-1]):
        s = s + t[..., j]
    return s


def naive_stats(t):
    """Mean and biased variance over the last dim of t (..., n), both in t.dtype."""
    n = t.shape[-1]
    mean = sum16(t) / n  # (...)
    d = t - mean[..., None]  # (..., n)
    return d, sum16(d * d) / n


def naive(name, x, w, b, eps, run=None):
    """The norm `name` of x (B, C) in x.dtype; run = (mean, var) for BN eval."""
    B, C = x.shape
    if name == "LayerNorm":
        d, var = naive_stats(x)
        y = d / torch.sqrt(var[:, None] + eps)
    elif name == "RMSNorm":
        return x / torch.sqrt(sum16(x * x)[:, None] / C + eps) * w
    elif name == "GroupNorm":
        d, var = naive_stats(x.reshape(B, G, C // G))  # (B, G, C/G)
        y = (d / torch.sqrt(var[..., None] + eps)).reshape(B, C)
    elif name == "BatchNorm train":
        d, var = naive_stats(x.T)  # (C, B): statistics over the batch
        y = (d / torch.sqrt(var[:, None] + eps)).T
    else:  # BatchNorm eval: the stored statistics
        y = (x - run[0]) / torch.sqrt(run[1] + eps)
    return y * w + b


def exact(name, x, w, b, eps, run=None):
    """The same norm in float64 from the rounded inputs; shape of x (B, C)."""
    x, w = x.double(), w.double()
    B, C = x.shape
    if name == "RMSNorm":
        return x * torch.rsqrt(x.square().mean(1, keepdim=True) + eps) * w
    if name == "LayerNorm":
        var, mean = torch.var_mean(x, 1, correction=0, keepdim=True)
    elif name == "GroupNorm":
        var, mean = torch.var_mean(x.view(B, G, -1), 2, correction=0, keepdim=True)
        var, mean = (t.repeat_interleave(C // G, 1).view(B, C) for t in (var, mean))
    elif name == "BatchNorm train":
        var, mean = torch.var_mean(x, 0, correction=0, keepdim=True)
    else:
        mean, var = run[0].double(), run[1].double()
    return (x - mean) * torch.rsqrt(var + eps) * w + b.double()


# %%
# Every module against the float32 computation rounded once
# ----------------------------------------------------------
# Rows of ``C = 1024`` values about 5 +- 3, non-trivial affine parameters (weight
# 1 +- 0.5, bias +- 0.5), GroupNorm with ``G = 8`` groups, BatchNorm over a batch of
# ``B = 32`` rows, and in eval mode with stored statistics near the data's. Each module
# runs in the 16-bit dtype (its parameters too); the same module in float32 runs on the
# same input and parameters, upcast, and its output is rounded once to the dtype.
#
# On CPU (torch 2.13) RMSNorm and eval-mode BatchNorm in bfloat16 are that result bit
# for bit; LayerNorm, GroupNorm, train-mode BatchNorm and float16's eval BatchNorm are
# within 1 or 2 ulps (the kernels order their float32 arithmetic differently). An ulp
# is counted as ``eps(dtype) * (1 + |y|)``, one spacing of a value of order one plus
# about one of the value, and ``k`` ulps is the tolerance ``atol = rtol = k * eps``.
# On CUDA (measured on an H100 with torch 2.11, not yet verified by a GPU build of the
# book) LayerNorm and RMSNorm are bit for bit and
# GroupNorm within 2 ulps; BatchNorm on CUDA was not measured, so there its bound is
# printed, not asserted.
B, C, G = 32, 1024, 8
NAMES = ["LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm train", "BatchNorm eval"]
ULPS = {"cpu": {"LayerNorm": 1, "RMSNorm": 0, "GroupNorm": 1, "BatchNorm train": 2,
                "BatchNorm eval": {bf16: 0, f16: 1}},
        "cuda": {"LayerNorm": 0, "RMSNorm": 0, "GroupNorm": 2}}


def make(name, dtype, w, b, run):
    """The PyTorch module `name` in `dtype`, parameters copied from w, b (C,), run."""
    m = {"LayerNorm": lambda: torch.nn.LayerNorm(C),
         "RMSNorm": lambda: torch.nn.RMSNorm(C, eps=1e-6),
         "GroupNorm": lambda: torch.nn.GroupNorm(G, C),
         }.get(name, lambda: torch.nn.BatchNorm1d(C))().to(device, dtype)
    with torch.no_grad():
        m.weight.copy_(w)
        if name != "RMSNorm":
            m.bias.copy_(b)
        if name.startswith("BatchNorm"):
            m.running_mean.copy_(run[0])
            m.running_var.copy_(run[1])
    return m.train(name == "BatchNorm train")


def run_all(dtype, seed):
    """{name: (module in dtype, float32 module rounded, naive, float64)}, one seed."""
    g = torch.Generator().manual_seed(seed)
    x = (5 + 3 * torch.randn(B, C, generator=g)).to(device, dtype)  # (B, C)
    w = (1 + 0.5 * torch.randn(C, generator=g)).to(device, dtype)  # (C,)
    b = (0.5 * torch.randn(C, generator=g)).to(device, dtype)  # (C,)
    run = ((5 + 0.3 * torch.randn(C, generator=g)).to(device, dtype),
           (9 + torch.randn(C, generator=g)).to(device, dtype))  # stored mean, var
    out = {}
    for name in NAMES:
        m = make(name, dtype, w, b, run)
        m32 = make(name, f32, w, b, run)
        eps = m.eps
        with torch.no_grad():
            out[name] = (m(x), m32(x.float()).to(dtype),
                         naive(name, x, w, b, eps, run), exact(name, x, w, b, eps, run))
    return out


# %%
# The naive formula is itself right: in float64, where its running sums are accurate,
# it is the reference, on an input where every term matters (variance ``~1e-6``, so
# ``eps`` is the larger term; a mean of twice the standard deviation, so centering
# matters; random affine parameters and stored statistics).
g64 = torch.Generator().manual_seed(10)
x64 = (2e-3 + 1e-3 * torch.randn(B, C, generator=g64, dtype=f64)).to(device)  # (B, C)
w64 = (1 + 0.5 * torch.randn(C, generator=g64, dtype=f64)).to(device)  # (C,)
b64 = (0.5 * torch.randn(C, generator=g64, dtype=f64)).to(device)  # (C,)
run64 = ((2e-3 + 1e-4 * torch.randn(C, generator=g64, dtype=f64)).to(device),
         (1e-6 * (1 + torch.rand(C, generator=g64, dtype=f64))).to(device))
for name in NAMES:
    eps = make(name, f64, w64, b64, run64).eps
    torch.testing.assert_close(naive(name, x64, w64, b64, eps, run64),
                               exact(name, x64, w64, b64, eps, run64))
print("naive formula in float64 == float64 reference, all five norms")

# %%
# Now in 16 bits, three seeds:
res = {dt: [run_all(dt, seed) for seed in range(3)] for dt in DTYPES}


def ulps(y, ref):
    """Largest |y - ref| / (eps (1 + |ref|)): the k that atol = rtol = k eps needs."""
    eps = torch.finfo(y.dtype).eps
    return ((y.double() - ref.double()).abs() / (eps * (1 + ref.double().abs()))
            ).max().item()


tol = {}
for name in NAMES:
    line = f"{name:16s}"
    for dt in DTYPES:
        k = ULPS.get(device, {}).get(name)
        k = k[dt] if isinstance(k, dict) else k
        tol[name, dt] = None if k is None else dict(rtol=k * torch.finfo(dt).eps,
                                                   atol=k * torch.finfo(dt).eps)
        worst = max(ulps(r[name][0], r[name][1]) for r in res[dt])
        line += f" {str(dt)[6:]}: {worst:4.2f} ulp (allowed {k})"
    print(line)
for dt in DTYPES:
    for r in res[dt]:  # three seeds
        (ln, ln32, _, _), (rms, rms32, _, _) = r["LayerNorm"], r["RMSNorm"]
        (gn, gn32, _, _), (bt, bt32, _, _) = r["GroupNorm"], r["BatchNorm train"]
        be, be32, _, _ = r["BatchNorm eval"]
        torch.testing.assert_close(ln, ln32, **tol["LayerNorm", dt])
        torch.testing.assert_close(rms, rms32, **tol["RMSNorm", dt])
        torch.testing.assert_close(gn, gn32, **tol["GroupNorm", dt])
        if device == "cpu":  # BatchNorm on CUDA: not measured yet
            torch.testing.assert_close(bt, bt32, **tol["BatchNorm train", dt])
            torch.testing.assert_close(be, be32, **tol["BatchNorm eval", dt])

# %%
# Against the float64 result, LayerNorm and GroupNorm are off by the rounding (half an
# ulp) plus the ulps above, which torch.testing's default tolerances for the dtype allow
# (bfloat16 ``rtol=1.6e-2``, float16 ``rtol=1e-3``, ``atol=1e-5``). Train-mode BatchNorm
# does not pass them: near zero its outputs are off by 2 ulps *of a value of order one*
# (``1.6e-2`` in bfloat16), far above ``atol``, which is why its bound above is stated
# in ulps at ``max(|y|, 1)``.
for dt in DTYPES:
    r = res[dt][0]
    torch.testing.assert_close(r["LayerNorm"][0], r["LayerNorm"][3].to(dt))
    torch.testing.assert_close(r["GroupNorm"][0], r["GroupNorm"][3].to(dt))

# %%
# The naive 16-bit computation is worse
# -------------------------------------
# Largest error against float64, over three seeds, for the module and for the naive
# formula in the same dtype. The module is never worse, on any seed; the gap is large
# where a statistic sums 1024 values (bfloat16's stalled sum), smaller for BatchNorm's
# 32-row batch, and smallest in eval mode, where nothing is summed and the naive
# formula's only extra errors are four roundings per element instead of one.
err = {}
print(f"{'max |y - float64|':18s}" + "".join(f"{str(dt)[6:] + ' ' + k:>15s}"
                                             for dt in DTYPES for k in ("module",
                                                                        "naive")))
for name in NAMES:
    line = f"{name:18s}"
    for dt in DTYPES:
        e = [[(t.double() - r[name][3]).abs().max().item()
              for t in (r[name][0], r[name][2])] for r in res[dt]]  # [module, naive]
        err[name, dt] = e
        line += f"{max(s[0] for s in e):15.2e}{max(s[1] for s in e):15.2e}"
        # module <= naive on every seed (smallest ratio 1.8, BatchNorm eval)
        assert all(s[0] <= s[1] for s in e), (name, dt, e)
    print(line)
ratio = min(s[1] / s[0] for e in err.values() for s in e)
print(f"smallest naive/module ratio over norms, dtypes and seeds: {ratio:.1f}")

# %%
# The same comparison in float32 (module against the float32 loop) completes the
# figure: in every dtype the module's error is the dtype's rounding, while the naive
# loop's grows with the dtype's spacing.
import matplotlib.pyplot as plt

res32 = run_all(f32, 0)
fig, ax = plt.subplots()
labels = ["float32", "float16", "bfloat16"]
for i, name in enumerate(NAMES):
    mod = [(res32[name][0].double() - res32[name][3]).abs().max().item()]
    nai = [(res32[name][2].double() - res32[name][3]).abs().max().item()]
    mod += [err[name, dt][0][0] for dt in (f16, bf16)]
    nai += [err[name, dt][0][1] for dt in (f16, bf16)]
    ax.semilogy(labels, mod, "o-", color=f"C{i}", label=f"{name}, module")
    ax.semilogy(labels, nai, "x--", color=f"C{i}", label=f"{name}, naive")
ax.set_xlabel("dtype of input, parameters and output")
ax.set_ylabel("max |y - float64 result|")
ax.set_title("PyTorch's norms round a float32 result once;\n"
             "the formula computed in 16 bits is up to 100 times worse")
ax.legend(fontsize="x-small", ncol=2)
plt.show()

# %%
# eps in 16-bit arithmetic
# ------------------------
# Two things happen to ``eps`` in 16 bits. First, the constant itself: bfloat16 has
# float32's exponent range and keeps ``1e-8`` or BERT's ``1e-12`` (to 3 digits), while
# float16's smallest subnormal is ``6e-8``: ``1e-6`` becomes ``1.013e-6`` and anything
# below ``3e-8`` becomes 0. Second, the sum: ``var + eps`` drops ``eps`` whenever it is
# below half an ulp of ``var``, which for ``eps = 1e-6`` happens from ``var ~ 3e-4``
# (bfloat16) or ``2e-3`` (float16) up, against ``var ~ 17`` in float32. Lost there, it
# was invisible anyway: it would have moved the output by ``eps / (2 var)``, under half
# an ulp of the output.
for dt in DTYPES:
    kept = {e: torch.tensor(e, dtype=dt).item() for e in (1e-5, 1e-6, 1e-8, 1e-12)}
    print(f"{str(dt)[6:]:9s}" + " ".join(f"{e:.0e}->{v:.4g}" for e, v in kept.items()))
    assert (kept[1e-12] == 0) == (dt == f16)  # float16: 0; bfloat16: 1.0019e-12
    assert (kept[1e-8] == 0) == (dt == f16)  # float16: 0; bfloat16: 1.0012e-8
v = {dt: torch.tensor(1e-2, dtype=dt) for dt in (f32, bf16, f16)}
print("var = 1e-2: var + 1e-6 == var?",
      {str(dt)[6:]: bool(v[dt] + 1e-6 == v[dt]) for dt in v})
assert v[bf16] + 1e-6 == v[bf16] and v[f16] + 1e-6 == v[f16]
assert v[f32] + 1e-6 != v[f32]

# %%
# Where ``eps`` is visible: rows with a variance near ``eps`` (values ``1e-3 * randn``,
# variance ``1e-6``, ``LayerNorm(eps=1e-6)``, a 50 % term). The module keeps it in
# both dtypes: against the float64 formula *with* ``eps`` it passes the dtype's default
# tolerances, and dropping ``eps`` scales its normalized part by about 1.4. The naive
# computation keeps ``eps`` too, yet its error is many times the module's in both
# dtypes: bfloat16's running sum of 1024 squares stalls as above, and float16 squares
# values of ``1e-3`` into its subnormal range (below ``6.1e-5``, spacing ``6e-8``),
# where ``d * d`` keeps only a few bits.
x_small = (1e-3 * torch.randn(B, C, device=device))  # (B, C), variance ~1e-6
w = 1 + 0.5 * torch.randn(C, device=device)  # (C,)
b = 0.5 * torch.randn(C, device=device)  # (C,)
for dt in DTYPES:
    xs, ws, bs = x_small.to(dt), w.to(dt), b.to(dt)
    ln = make("LayerNorm", dt, ws, bs, None)
    ln.eps = 1e-6
    with torch.no_grad():
        y, y_no_eps = ln(xs), torch.nn.functional.layer_norm(xs, (C,), ws, bs, 0.0)
    ref = exact("LayerNorm", xs, ws, bs, 1e-6)
    e_mod = (y.double() - ref).abs().max().item()
    e_nai = (naive("LayerNorm", xs, ws, bs, 1e-6).double() - ref).abs().max().item()
    gap = (y.double() - y_no_eps.double()).abs().max().item()
    print(f"{str(dt):15s} module err {e_mod:.1e}, naive err {e_nai:.1e}, "
          f"max |y - y without eps| {gap:.2f}")
    torch.testing.assert_close(y, ref.to(dt))  # default tolerances of dt
    assert gap > 0.5  # measured 1.94 and 1.96: a factor 1 - sqrt(var / (var + eps))
    assert e_mod <= e_nai  # measured: bfloat16 1.5e-2 vs 0.26, float16 1.9e-3 vs 4.1e-2

# %%
# The case that breaks: a constant row (padding, a dead channel) has variance 0, and
# ``eps`` is all that keeps ``0 / sqrt(0 + eps)`` from being ``0 / 0``. With
# ``eps = 1e-8`` the naive float16 computation rounds ``eps`` to 0 and returns NaN; the
# module adds ``eps`` in float32 and returns the bias, exactly, in both dtypes. (The
# value 0.5 keeps float16's running sum exact, so its naive variance is exactly 0; in
# bfloat16 the sum stalls, the naive mean is off and the output is finite but wrong.)
const = torch.full((4, C), 0.5, device=device)  # (4, C), every row constant
for dt in DTYPES:
    ln = make("LayerNorm", dt, w.to(dt), b.to(dt), None)
    ln.eps = 1e-8
    with torch.no_grad():
        y = ln(const.to(dt))
    y_naive = naive("LayerNorm", const.to(dt), w.to(dt), b.to(dt), torch.tensor(
        1e-8, dtype=dt).item())  # eps as the dtype stores it
    n_nan = y_naive.isnan().sum().item()
    print(f"{str(dt)[6:]:9s} constant rows, eps=1e-8: module == bias "
          f"{torch.equal(y, ln.bias.expand_as(y))}; naive: {n_nan} NaN, max "
          f"|y-b| {(y_naive - ln.bias).abs().max().item():.2g}")
    torch.testing.assert_close(y, ln.bias.expand_as(y), rtol=0, atol=0)
    assert (n_nan == y_naive.numel()) == (dt == f16)  # float16: all NaN; bf16: none

# %%
# The variance of inputs with a large mean
# ----------------------------------------
# :math:`\mathrm{Var}[x] = E[x^2] - E[x]^2` needs one pass over the data, and cancels
# catastrophically when :math:`|E[x]| \gg \mathrm{std}`: both terms are about
# :math:`\mu^2`, each carries a rounding error of about :math:`\mu^2 \epsilon`, and the
# difference is :math:`\sigma^2`. The relative error grows as
# :math:`(\mu / \sigma)^2 \epsilon`. The two-pass form :math:`E[(x - E[x])^2]` subtracts
# the mean first; Welford's update (1962) gets the same accuracy in one pass.
# Rows of 1024 values ``mu + randn`` in float32, 64 rows per mean; the reference is the
# two-pass form in float64 of the same float32 values. The float32 two-pass form is
# not perfect either: the rounding of the mean (about :math:`\mu\epsilon`) enters
# squared, :math:`(\mu \epsilon / \sigma)^2`, visible at ``mean 1e5``. ``torch.var``
# on CPU stays at float32's rounding at every mean (default tolerances), and
# LayerNorm's output is within :math:`2\epsilon(\mu + 5)` of the float64 formula, the
# rounding of ``x - mean`` alone: its variance does not cancel (a one-pass variance
# would be off by 26 % at ``mean 1e3``).
R, N = 64, 1024
inf = float("inf")
e32 = torch.finfo(f32).eps
means = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]
curves = {k: [] for k in ("one-pass", "two-pass", "torch.var")}
for mu in means:
    x = (mu + torch.randn(R, N, device=device, dtype=f64)).float()  # (R, N)
    ref = ((x.double() - x.double().mean(1, keepdim=True)) ** 2).mean(1)  # (R,)
    one = (x * x).mean(1) - x.mean(1) ** 2
    two = ((x - x.mean(1, keepdim=True)) ** 2).mean(1)
    tv = torch.var(x, 1, correction=0)
    for k, t in zip(curves, (one, two, tv)):
        curves[k].append(torch.linalg.vector_norm((t.double() - ref) / ref, inf).item())
    print(f"mean {mu:5.0e}: max rel. err. 1-pass {curves['one-pass'][-1]:8.1e} "
          f"({(one < 0).sum().item():2d} < 0), 2-pass {curves['two-pass'][-1]:.1e}"
          f", torch.var {curves['torch.var'][-1]:.1e}")
    torch.testing.assert_close(tv, ref.float())  # float32 default tolerances, any mean
    # two-pass: the mean's rounding error (~eps mu) enters squared, plus a few roundings
    assert curves["two-pass"][-1] <= 4 * (e32 * mu) ** 2 + 4 * e32  # measured above
    ln = torch.nn.LayerNorm(N).to(device)  # fresh affine: the identity
    with torch.no_grad():
        y_ln = ln(x)
    y_ref = (x.double() - x.double().mean(1, keepdim=True)) / (ref[:, None] + ln.eps
                                                               ).sqrt()
    # x - mean subtracts float32 numbers up to mu + 5 (std 1), each carrying up to
    # eps (mu + 5) / 2: tolerance 2 eps (mu + 5) (measured <= 1.1 eps (mu + 5))
    torch.testing.assert_close(y_ln, y_ref.float(), rtol=0, atol=2 * e32 * (mu + 5))
assert curves["one-pass"][3] > 0.01  # mean 1e3: measured 26 %
assert (one < 0).sum() > 0 and curves["one-pass"][5] > 1  # mean 1e5: 18 negative

# %%
# In 16 bits the one-pass form fails at far smaller means. With values ``100 + randn``
# rounded to the dtype, :math:`E[x^2] \approx 10^4`, where bfloat16's spacing is 64 and
# float16's is 8, against a variance of about 1 (``torch.mean`` is used for each term,
# so only the final roundings to the dtype count). ``torch.var`` and LayerNorm in 16
# bits accumulate in float32 without cancelling: the variance equals the float64 one
# at the dtype's default tolerances, and LayerNorm equals its float32 computation
# rounded, at the ulps of the first section.
for dt in DTYPES:
    x = (100 + torch.randn(R, N, device=device)).to(dt)  # (R, N)
    ref = x.double().var(1, correction=0)
    one = (x * x).mean(1) - x.mean(1) ** 2  # in dt
    tv = torch.var(x, 1, correction=0)
    rel_one = ((one.double() - ref) / ref).abs()  # (R,)
    e_tv = ((tv.double() - ref) / ref).abs().max().item()
    print(f"{str(dt):15s} mean 100: rel. error one-pass {rel_one.min().item():.1e} "
          f"to {rel_one.max().item():.1e}, "
          f"torch.var {e_tv:.1e}")
    assert (rel_one >= 0.5).all()  # every row; bf16: 0 returned, fp16: 1.0 to 9.7
    torch.testing.assert_close(tv, ref.to(dt))
    ln16 = torch.nn.LayerNorm(N, device=device, dtype=dt)  # fresh affine: identity
    ln32 = torch.nn.LayerNorm(N, device=device)
    with torch.no_grad():
        torch.testing.assert_close(ln16(x), ln32(x.float()).to(dt),
                                   **(tol["LayerNorm", dt] or {}))

fig, ax = plt.subplots()
for k, st in zip(curves, ("o-", "s--", "x:")):
    ax.loglog(means, curves[k], st, label=f"float32 {k}")
mu = torch.tensor(means)
ax.loglog(means, mu**2 * torch.finfo(f32).eps, color="gray", lw=0.8,
          label="(mean / std)² × eps(float32)")
ax.set_xlabel("mean of the row (std 1)")
ax.set_ylabel("max relative error of the variance")
ax.set_title("E[x²] − E[x]² cancels as mean²·eps; the two-pass form loses only\n"
             "(mean·eps)², torch.var stays at float32's rounding")
ax.legend(fontsize="small")
plt.show()

# %%
# The RMSNorms of Llama and Gemma
# -------------------------------
# Both normalize in float32. Llama's (``LlamaRMSNorm``) casts the normalized values back
# to the input dtype and *then* multiplies by the weight, in that dtype: two roundings.
# Gemma's (``GemmaRMSNorm``) stores ``g`` and multiplies by ``1 + g`` in
# float32 before the one cast back. From scratch, each equals its class bit for bit in
# float32, bfloat16 and float16 (the same float32 operations in the same order). The
# input has RMS ``1e-3`` so that ``eps = 1e-6`` is a 50 % term of the mean square.
def llama_rms(x, w, eps):
    """x (..., D) / RMS in float32, back to x.dtype, times w (D,) in x.dtype."""
    h = x.to(f32)
    h = h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def gemma_rms(x, g, eps):
    """x (..., D) / RMS in float32, times (1 + g) in float32, then back to x.dtype."""
    h = x.to(f32)
    h = h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + eps)
    return (h * (1 + g.to(f32))).to(x.dtype)


Bt, L, D, EPS = 4, 16, 256, 1e-6
x_tok = 1e-3 * torch.randn(Bt, L, D, device=device)  # (B, L, D), RMS ~1e-3
# Weights in [0.5, 2], exact in bfloat16 and float16; then g = w - 1 is exact too
# (Sterbenz), so both layers multiply by the same number.
w_bf = (0.5 + 1.5 * torch.rand(D, device=device)).to(bf16)
g_bf = w_bf - 1
assert torch.equal(1 + g_bf.float(), w_bf.float())
out = {}
for dt in (f32, bf16, f16):
    llama = LlamaRMSNorm(D, eps=EPS).to(device, dt)
    gemma = GemmaRMSNorm(D, eps=EPS).to(device, dt)
    with torch.no_grad():
        llama.weight.copy_(w_bf)
        gemma.weight.copy_(g_bf)
        xs = x_tok.to(dt)
        out[dt] = (llama(xs), gemma(xs))
    ours = (llama_rms(xs, w_bf.to(dt), EPS), gemma_rms(xs, g_bf.to(dt), EPS))
    print(f"{str(dt):15s} ours vs HF: Llama {torch.equal(ours[0], out[dt][0])}, "
          f"Gemma {torch.equal(ours[1], out[dt][1])}")
    # the same float32 operations in the same order: the same bits
    torch.testing.assert_close(ours[0], out[dt][0], rtol=0, atol=0)
    torch.testing.assert_close(ours[1], out[dt][1], rtol=0, atol=0)
torch.testing.assert_close(out[f32][0], out[f32][1], rtol=0, atol=0)
print("float32: Llama(w) == Gemma(w - 1) bit for bit")

# %%
# In 16 bits the two orders land apart. Gemma's output is the float32 product rounded
# once; Llama's rounds the normalized value first (an error of up to half an ulp,
# relative :math:`\le \epsilon/2`), multiplies by ``w`` and rounds again: the two differ
# by at most about :math:`1.5\,\epsilon` relative, one ulp, rarely two (where the
# product crosses a power of two). Measured in ulps of the output, with the float64
# computation as the referee: Gemma's order is the more accurate one.
def ulp_of(t):
    """Spacing of t's dtype at each |t| (the subnormal spacing below tiny)."""
    fi = torch.finfo(t.dtype)
    a = t.double().abs().clamp(min=fi.tiny)
    return torch.exp2(torch.floor(torch.log2(a))) * fi.eps


ref = llama_rms(x_tok.double(), w_bf.double(), EPS)  # float64, one formula for both
hist = {}
for dt in DTYPES:
    ll, ge = out[dt]
    apart = (ll.double() - ge.double()).abs() / ulp_of(ge)
    ref_dt = llama_rms(x_tok.to(dt).double(), w_bf.double(), EPS)
    e_ll = ((ll.double() - ref_dt).abs() / ulp_of(ge)).max().item()
    e_ge = ((ge.double() - ref_dt).abs() / ulp_of(ge)).max().item()
    hist[dt] = [(apart == k).double().mean().item() for k in (0, 1, 2)]
    print(f"{str(dt):15s} Llama vs Gemma: {hist[dt][1]:.1%} 1 ulp apart, "
          f"{hist[dt][2]:.2%} 2 ulps, max {apart.max().item():.0f} ulp")
    print(f"{'':15s} error vs float64: Llama {e_ll:.2f} ulp, Gemma {e_ge:.2f} ulp")
    assert 0 < apart.max() <= 2  # measured: 1 ulp in both, in 26 % of the outputs
    assert e_ge <= 0.51 < e_ll  # Gemma: one rounding of a float32 result
    torch.testing.assert_close(ll, ge, rtol=2 * torch.finfo(dt).eps, atol=0)

fig, ax = plt.subplots()
for i, dt in enumerate(DTYPES):
    ax.bar([k + 0.2 * (2 * i - 1) for k in range(3)], hist[dt], width=0.4,
           label=str(dt)[6:])
ax.set_xticks(range(3), ["equal", "1 ulp apart", "2 ulps apart"])
ax.set_ylabel("fraction of outputs")
ax.set_title("Llama's RMSNorm (cast, then weight) and Gemma's (weight, then cast):\n"
             "a quarter of 16-bit outputs 1 ulp apart; equal in float32")
ax.legend()
plt.show()
