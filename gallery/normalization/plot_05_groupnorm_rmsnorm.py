"""
GroupNorm and RMSNorm
=====================

GroupNorm normalizes each sample over groups of channels; RMSNorm divides each token by
its root mean square. Both from scratch, against PyTorch, and RMSNorm as LayerNorm of
centred input.

**You will learn**

- how GroupNorm splits ``C`` channels into ``Ng`` groups and keeps a per-channel affine
- why ``GroupNorm(1, C)`` is LayerNorm up to the shape of the affine
- how RMSNorm drops the mean and the bias, computed in float32 as Llama does
- what ``nn.RMSNorm``'s default ``eps=None`` is in each dtype (torch 2.13)

**Prerequisites:** :doc:`/generated/normalization/plot_01_common_recipe` (the recipe),
:doc:`/generated/normalization/plot_03_instancenorm`,
:doc:`/generated/normalization/plot_04_layernorm`.

.. index:: ! RMSNorm
.. index:: ! GroupNorm
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The block this page shares with another, copied verbatim: ``normalize`` (from
# :doc:`/generated/normalization/plot_01_common_recipe`).


# Copied from normalization/plot_01_common_recipe.py: normalize
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


# %%
# The idea
# --------
# Both layers follow the common recipe and differ in *which* entries share one set of
# statistics. GroupNorm takes the mean :math:`\mu` and biased variance :math:`\sigma^2`
# of sample ``b`` over the ``C / Ng`` channels of group :math:`g(c)` and all positions,
# then applies a per-channel affine; RMSNorm takes the mean square of one token's ``D``
# features, subtracts nothing and adds no bias (figure: one colour, one set of
# statistics):
#
# .. math::
#
#    \mathrm{GN}(x)_{bchw} = \frac{x_{bchw} - \mu_{b,g(c)}}
#    {\sqrt{\sigma^2_{b,g(c)} + \epsilon}}\,\gamma_c + \beta_c,
#    \qquad
#    \mathrm{RMSNorm}(x)_{ld} = \frac{x_{ld}}
#    {\sqrt{\frac{1}{D}\sum_{d'} x_{ld'}^2 + \epsilon}}\,\gamma_d
import matplotlib.pyplot as plt

fig, (ax_gn, ax_rms) = plt.subplots(1, 2, figsize=(9, 3.0), layout="constrained")
ax_gn.imshow(torch.arange(6)[:, None].div(2, rounding_mode="floor").expand(6, 20),
             cmap="tab10", vmin=0, vmax=9, aspect="auto")
ax_gn.set_xlabel("position h * W + w")
ax_gn.set_ylabel("channel c")
ax_gn.set_title("GroupNorm(3, 6): 3 groups of 2 channels")
ax_rms.imshow(torch.arange(8)[:, None].expand(8, 32), cmap="tab10", vmin=0, vmax=9,
              aspect="auto")
ax_rms.set_xlabel("feature d")
ax_rms.set_ylabel("token l")
ax_rms.set_title("RMSNorm(D): each token alone")
fig.suptitle("One colour, one mean and spread: GroupNorm shares them across a group\n"
             "of channels and every position, RMSNorm within one token")
plt.show()

# %%
# GroupNorm from scratch
# ----------------------
# Mean and biased variance per sample and per group of ``C // Ng`` channels, over
# ``(C // Ng, H, W)``; the affine is *per channel*, shape ``(C,)``, not per group.
import torch


def group_norm(x, Ng, weight, bias, eps=1e-5):
    """GroupNorm of x (B, C, H, W) with Ng groups and per-channel weight, bias (C,)."""
    B, C, H, W = x.shape
    x_groups = x.reshape(B, Ng, C // Ng, H, W)  # (B, Ng, C/Ng, H, W)
    y = normalize(x_groups, [2, 3, 4], eps).reshape(B, C, H, W)  # (B, C, H, W)
    return y * weight[:, None, None] + bias[:, None, None]


# %%
# Against ``torch.nn.GroupNorm``, random affine, input variance ten times ``eps``.
B, C, H, W = 4, 6, 5, 4  # H != W, so a reshape that swapped them would show
Ng = 3
x = 0.01 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), variance ~1e-4
gn = torch.nn.GroupNorm(Ng, C).to(device)
with torch.no_grad():
    gn.weight.copy_(torch.randn(C))
    gn.bias.copy_(torch.randn(C))
ours = group_norm(x, Ng, gn.weight, gn.bias, gn.eps)
ref = gn(x)
gn_err = (ours - ref).abs().max().item()
print(f"GroupNorm({Ng}, {C}): max|ours - torch| = {gn_err:.1e}")
torch.testing.assert_close(ours, ref)

# %%
# RMSNorm from scratch
# --------------------
# ``rms_norm`` is the formula; ``RMSNorm``, the book's Llama module (Hugging Face's
# ``LlamaRMSNorm``), normalizes in float32, rounds back, then multiplies by ``weight``.
import torch
from torch import nn


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x**2) over the last dim + eps) * weight; x (..., D), weight (D,)"""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last dim, in float32 (as Llama)."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,)
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D), in x's dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


# %%
# Against ``torch.nn.RMSNorm``, whose ``eps=None`` is float32's machine epsilon for
# float32 input, at input RMS ``~1e-3`` where it shows. (Llama's ``1e-6``: first Proof.)
B, L, D = 4, 8, 32
rms = torch.nn.RMSNorm(D).to(device)
with torch.no_grad():
    rms.weight.copy_(torch.randn(D))
assert rms.eps is None
eps32 = torch.finfo(torch.float32).eps
quiet = 1e-3 * torch.randn(B, L, D, device=device)  # (B, L, D), RMS ~1e-3
y_rms = rms(quiet)
gap = (rms_norm(quiet, rms.weight, eps32) - y_rms).abs().max().item()
print(f"rms_norm(eps = finfo(float32).eps) vs nn.RMSNorm():   max gap = {gap:.2e}")
torch.testing.assert_close(rms_norm(quiet, rms.weight, eps32), y_rms)

# %%
# RMSNorm is LayerNorm without the centering
# ------------------------------------------
# LayerNorm's variance is the mean square of the *centred* input, so LayerNorm of ``x``
# is RMSNorm of :math:`x - \mathrm{mean}(x)` with the same ``eps``:
#
# .. math::
#
#    \mathrm{LN}(x) = \mathrm{RMSNorm}\big(x - \bar{x}\big),
#    \qquad \bar{x} = \tfrac{1}{D}\textstyle\sum_d x_d
#
# (both without affine), on input whose mean is three times its standard deviation.
tokens = torch.randn(B, L, D, device=device)  # (B, L, D)
shifted = 0.01 * (tokens + 3.0)  # (B, L, D), std ~0.01, mean ~0.03
ln = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)
rms_same_eps = torch.nn.RMSNorm(D, eps=ln.eps, elementwise_affine=False).to(device)
centred = shifted - shifted.mean(dim=-1, keepdim=True)
gap = (ln(shifted) - rms_same_eps(centred)).abs().max().item()
print(f"max|LayerNorm(x) - RMSNorm(x - mean)| = {gap:.2e}")
torch.testing.assert_close(ln(shifted), rms_same_eps(centred))

# %%
# Proof: ``RMSNorm`` with a random weight, and in bfloat16
# --------------------------------------------------------
# With the random weight of ``rms`` it still equals ``F.rms_norm``; in bfloat16 it
# returns bfloat16 within one rounding of ``nn.RMSNorm``'s (it rounds the normalized
# value before the weight multiplies it, as Llama does; PyTorch rounds once).
params = {n: tuple(p.shape) for n, p in rms.named_parameters()}
print(f"RMSNorm parameters: {params}, eps: {rms.eps}")
assert params == {"weight": (D,)}, "RMSNorm grew a bias?"
llama_rms = RMSNorm(D).to(device)
fresh_gap = (llama_rms(quiet) - torch.nn.functional.rms_norm(quiet, (D,), eps=1e-6))
print(f"RMSNorm(D), fresh, vs F.rms_norm(eps=1e-6):          max gap = "
      f"{fresh_gap.abs().max().item():.2e}")
torch.testing.assert_close(llama_rms(quiet),
                           torch.nn.functional.rms_norm(quiet, (D,), eps=1e-6))

with torch.no_grad():
    llama_rms.weight.copy_(rms.weight)
ref6 = torch.nn.functional.rms_norm(quiet, (D,), rms.weight, eps=1e-6)
print(f"RMSNorm(D), random weight, vs F.rms_norm(eps=1e-6):  max gap = "
      f"{(llama_rms(quiet) - ref6).abs().max().item():.2e}")
torch.testing.assert_close(llama_rms(quiet), ref6)

quiet16 = quiet.to(torch.bfloat16)  # (B, L, D)
torch16 = torch.nn.RMSNorm(D, eps=1e-6, device=device, dtype=torch.bfloat16)
with torch.no_grad():
    torch16.weight.copy_(rms.weight)
out16 = llama_rms.to(torch.bfloat16)(quiet16)
print(f"bfloat16: RMSNorm returns {out16.dtype}, max gap to nn.RMSNorm = "
      f"{(out16.float() - torch16(quiet16).float()).abs().max().item():.2e}")
assert out16.dtype == torch.bfloat16
torch.testing.assert_close(out16, torch16(quiet16))  # bfloat16's default tolerances

# %%
# Proof: GroupNorm(1, C) is LayerNorm([C, H, W]) up to the affine
# ---------------------------------------------------------------
# With one group the statistics are taken over ``(C, H, W)``, exactly LayerNorm's. With
# the affine switched off the two modules compute the same function; with it, they
# differ only in its shape. At the other end, ``GroupNorm(C, C)`` (one channel per
# group) is InstanceNorm, proven on the InstanceNorm page.
gn1 = torch.nn.GroupNorm(1, C, affine=False).to(device)
ln = torch.nn.LayerNorm([C, H, W], elementwise_affine=False).to(device)
print(f"GroupNorm(1) vs LayerNorm, no affine: max gap = "
      f"{(gn1(x) - ln(x)).abs().max().item():.2e}")
torch.testing.assert_close(gn1(x), ln(x))

# %%
# LayerNorm's affine is strictly richer than GroupNorm(1)'s: one weight per channel
# ``(C,)`` for GroupNorm, one per element ``(C, H, W)`` for LayerNorm. Broadcasting
# GroupNorm's weight and bias over ``(H, W)`` and copying them into a LayerNorm gives
# the same layer, affine included. The converse fails: a LayerNorm weight that varies
# over ``(H, W)`` inside a channel has no per-channel counterpart.
print(f"GroupNorm weight {tuple(gn.weight.shape)}, bias {tuple(gn.bias.shape)}, "
      f"eps {gn.eps}")
assert gn.weight.shape == gn.bias.shape == (C,)
gn1 = torch.nn.GroupNorm(1, C).to(device)
ln = torch.nn.LayerNorm([C, H, W]).to(device)
print(f"affine shapes: GroupNorm {tuple(gn1.weight.shape)}, "
      f"LayerNorm {tuple(ln.weight.shape)}")
assert gn1.weight.shape == gn1.bias.shape == (C,)
assert ln.weight.shape == ln.bias.shape == (C, H, W)

with torch.no_grad():
    gn1.weight.copy_(torch.randn(C))
    gn1.bias.copy_(torch.randn(C))
    ln.weight.copy_(gn1.weight[:, None, None].expand(C, H, W))
    ln.bias.copy_(gn1.bias[:, None, None].expand(C, H, W))
print(f"GroupNorm(1) vs LayerNorm, broadcast affine: max gap = "
      f"{(gn1(x) - ln(x)).abs().max().item():.2e}")
torch.testing.assert_close(gn1(x), ln(x))

# %%
# Proof: what ``eps=None`` is in each dtype, and where it bends the output
# ------------------------------------------------------------------------
# It is tempting to read ``eps=None`` as ``torch.finfo(x.dtype).eps``, and earlier
# versions of PyTorch's documentation said so (as did this book). For 16-bit input it is
# not: torch 2.13 computes RMSNorm in float32 for bfloat16 and float16 input and takes
# float32's epsilon, and float64 input gets float64's (torch 2.13's own docstring
# describes this rule). A version fact, so each dtype is measured, on this page's
# device:
#
# * float32, bfloat16 and float16 at input RMS ``1e-3``, where float32's ``1.19e-7`` is
#   a 12 % term while bfloat16's ``7.8e-3`` and float16's ``9.8e-4`` would crush the
#   output to RMS :measured:`rms_bf16_own_eps:.2g` and :measured:`rms_f16_own_eps:.2g`
#   (the module: :measured:`rms_bf16_module:.3f`);
# * float64 at input RMS ``1e-8`` (mean square ``1e-16``), where float64's ``2.2e-16``
#   matters and float32's would crush the output.
#
# The columns are the output RMS of the module, then of the formula with each candidate
# ``eps`` (computed in float64 from the same rounded input, with the same random
# weight). Each module is compared elementwise with the formula at float32's or
# float64's epsilon, rounded to the module's dtype, at torch.testing's default
# tolerances *for that dtype* (bfloat16: ``rtol=1.6e-2``, float16: ``rtol=1e-3``): the
# module rounds its float32 result once, which is within them.
def out_rms(y, weight):
    """RMS of the normalized part of y (weight divided out), averaged over tokens."""
    return (y.double() / weight.double()).pow(2).mean(dim=-1).sqrt().mean().item()


# %%
u = torch.randn(B, L, D, device=device, dtype=torch.float64)
u = u / u.pow(2).mean(dim=-1, keepdim=True).sqrt()  # every token has RMS exactly 1
torch.testing.assert_close(u.norm(dim=-1), torch.full((B, L), D**0.5, device=device,
                                                     dtype=torch.float64))
w = torch.randn(D, device=device, dtype=torch.float64)
f32, f64 = torch.float32, torch.float64
cases = [(f32, 1e-3, f32), (torch.bfloat16, 1e-3, f32), (torch.float16, 1e-3, f32),
         (f64, 1e-8, f64)]  # (dtype, input RMS, the dtype whose eps the module uses)


print(f"{'dtype':15s}{'input RMS':>10s}{'module':>8s} | formula, eps of "
      f"{'float32':>10s}{'own dtype':>10s}{'float64':>10s}")
table = {}  # dtype -> (output RMS of the module, of the formula with the dtype's eps)
for dt, r, uses in cases:
    module = torch.nn.RMSNorm(D, device=device, dtype=dt)
    with torch.no_grad():
        module.weight.copy_(w)
    xr = (r * u).to(dt)  # (B, L, D), rounded to dt
    y = module(xr)
    x64, w64 = xr.double(), w.to(dt).double()  # the weight as the module stores it
    formula = {name: rms_norm(x64, w64, torch.finfo(e).eps)
               for name, e in [("float32", f32), ("own", dt), ("float64", f64)]}
    ms = x64.pow(2).mean(dim=-1)  # (B, L), each token's mean square r^2
    own = (ms / (ms + torch.finfo(dt).eps)).sqrt().mean().item()  # r / sqrt(r^2 + eps)
    torch.testing.assert_close(out_rms(formula["own"], w64), own)
    print(f"{str(dt):15s}{r:10.0e}{out_rms(y, w64):8.4f} | {'':15s}"
          + "".join(f"{out_rms(f, w64):10.4g}" for f in formula.values()))
    expected = formula["float32" if uses == f32 else "float64"]
    # torch.testing's default tolerances for dt: one rounding of a float32 result.
    torch.testing.assert_close(y, expected.to(dt))
    table[dt] = (out_rms(y, w64), out_rms(formula["own"], w64))
    if dt in (torch.bfloat16, torch.float16):  # the reading finfo(x.dtype).eps is wrong
        assert table[dt][1] < 0.1 < 0.9 < table[dt][0]
rms_bf16_module, rms_bf16_own_eps = table[torch.bfloat16]
rms_f16_own_eps = table[torch.float16][1]

# %%
# Where ``eps=None`` bends the output: for an input of RMS :math:`r` the output RMS
# is :math:`r / \sqrt{r^2 + \epsilon}`: close to 1 above
# :math:`r \approx \sqrt{\epsilon}`, proportional to :math:`r` below. With
# ``eps=None`` that knee sits at float32's :math:`\sqrt{\epsilon}` =
# :measured:`knee_f32:.1e` for float32 *and bfloat16* input, and at
# :measured:`knee_f64:.1e` for float64, against :measured:`knee_eps5:.1e` for
# ``eps=1e-5``; bfloat16's own epsilon would put it at :measured:`knee_bf16_own:.1e`.
# The measured points are ``nn.RMSNorm`` with ``eps=None``, in each dtype; each is
# compared with its curve in its own dtype, at that dtype's default tolerances.

def rms_knee(module, dtype, r, v):
    """Output RMS of weightless RMSNorm for inputs r * v, in `dtype`: r (N,), v (D,)."""
    return torch.stack([module((ri * v).to(dtype)).double().pow(2).mean().sqrt()
                        for ri in r])


# %%
r = torch.logspace(-10, 1, 23, dtype=torch.float64)
v = torch.randn(256, dtype=torch.float64)
v = v / v.pow(2).mean().sqrt()  # exactly unit RMS, so r * v has RMS r


bf16 = torch.bfloat16
measured = {dt: rms_knee(torch.nn.RMSNorm(256, elementwise_affine=False), dt, r, v)
            for dt in (f32, f64, bf16)}
uses = {f32: f32, f64: f64, bf16: f32}  # whose eps each dtype gets, as proven above
knee_f32, knee_f64 = torch.finfo(f32).eps ** 0.5, torch.finfo(f64).eps ** 0.5
knee_eps5, knee_bf16_own = 1e-5**0.5, torch.finfo(bf16).eps ** 0.5
print(f"knees sqrt(eps): float32 {knee_f32:.1e}, float64 {knee_f64:.1e},\n"
      f"eps=1e-5 {knee_eps5:.1e}, bfloat16's own {knee_bf16_own:.1e}")
theory = {dt: r / torch.sqrt(r**2 + torch.finfo(uses[dt]).eps) for dt in measured}
for dt in measured:
    gap = (measured[dt] - theory[dt]).abs().max().item()
    print(f"{str(dt):14s}: max|measured - r/sqrt(r^2 + eps)| = {gap:.1e}")
    # In the output's own dtype: rounding of the module's output sets the tolerance.
    torch.testing.assert_close(measured[dt].to(dt), theory[dt].to(dt))

fig, ax = plt.subplots()
for dt, color, mark in [(f32, "C0", "o"), (bf16, "C2", "+"), (f64, "C1", "o")]:
    name = str(dt).removeprefix("torch.")
    if dt != bf16:
        ax.loglog(r, theory[dt], "-", color=color,
                  label=f"r / √(r² + finfo({name}).eps)")
    ax.loglog(r, measured[dt], mark, ms=7, mfc="none", color=color,
              label=f"nn.RMSNorm, {name} input")
own_bf16 = r / torch.sqrt(r**2 + torch.finfo(bf16).eps)
ax.loglog(r, own_bf16, ":", color="C2", label="what finfo(bfloat16).eps would give")
ax.loglog(r, r / torch.sqrt(r**2 + 1e-5), "--", color="gray", label="eps=1e-5")
ax.set_xlabel("input RMS r")
ax.set_ylabel("output RMS")
ax.set_title(f"eps=None: the knee is float32's √eps = {knee_f32:.1e} for float32 and "
             f"bfloat16\ninput, float64's {knee_f64:.1e} for float64 (torch 2.13)")
ax.legend(fontsize="small")
plt.show()

# %%
# Try it: drop ``eps`` from GroupNorm, or give RMSNorm LayerNorm's. Does output move?
# -----------------------------------------------------------------------------------
# Call ``group_norm`` with ``eps=0.0``, and ``rms_norm`` with ``eps = 1e-5`` and
# ``eps = 0`` on the quiet input; compare each with its module.
blind = group_norm(x, Ng, gn.weight, gn.bias, 0.0)
print(f"GroupNorm({Ng}, {C}) without eps: max|ours - torch| = "
      f"{(blind - ref).abs().max().item():.1e}")
assert (blind - ref).abs().max() > 1e-2  # eps is visible here

for name, eps in [("finfo(float32).eps", eps32), ("1e-5", 1e-5), ("0", 0.0)]:
    gap = (rms_norm(quiet, rms.weight, eps) - y_rms).abs().max().item()
    print(f"float32, formula with eps = {name:18s}: max gap = {gap:.2e}")
assert (rms_norm(quiet, rms.weight, 1e-5) - y_rms).abs().max() > 0.1, "eps is 1e-5?"
assert (rms_norm(quiet, rms.weight, 0.0) - y_rms).abs().max() > 0.01, "eps is 0?"

# %%
# Try it: skip the centering, or keep ``eps=None``. Is RMSNorm still LayerNorm?
# -----------------------------------------------------------------------------
# Compare ``LayerNorm(x)`` (``eps=1e-5``) with ``RMSNorm(x)`` at the same ``eps``, then
# with ``RMSNorm(x - mean)`` at ``eps=None``.
ln = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)
gap_uncentred = (ln(shifted) - rms_same_eps(shifted)).abs().max().item()
print(f"max|LayerNorm(x) - RMSNorm(x)| = {gap_uncentred:.2e}")
assert gap_uncentred > 0.5, "centering no longer matters?"

rms_default = torch.nn.RMSNorm(D, elementwise_affine=False).to(device)
gap_eps = (ln(shifted) - rms_default(centred)).abs().max().item()
print(f"max|LayerNorm(x) - RMSNorm(x - mean), eps=None| = {gap_eps:.2e}")
assert gap_eps > 1e-2, "eps no longer matters at this variance?"
