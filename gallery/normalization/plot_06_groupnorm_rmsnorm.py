"""
GroupNorm and RMSNorm
=====================

GroupNorm reduces over groups of channels and applies its affine per channel; with one
group it normalizes exactly like LayerNorm and differs from it only in the shape of the
affine. RMSNorm drops the centering and the bias: this page proves it is LayerNorm
applied to centred input, and what its default ``eps=None`` is in each dtype the module
accepts: float32's machine epsilon for float32, bfloat16 and float16 input, float64's
for float64. That is what torch 2.13 does; it is not ``torch.finfo(x.dtype).eps``.
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
# GroupNorm from scratch
# ----------------------
# Split the ``C`` channels into ``G`` groups of ``C // G``; mean and biased variance are
# taken per sample and per group, over ``(C // G, H, W)``, with ``eps`` inside the
# square root. The affine parameters are *per channel*, shape ``(C,)``, not per group.
# The input is ``0.01 * randn`` (variance ``~1e-4``, ten times ``eps``), so that ``eps``
# moves the output by ~5 %: the last number is the gap with ``eps`` dropped.
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def group_norm(x, G, weight, bias, eps=1e-5):
    """GroupNorm of x (B, C, H, W) with G groups and per-channel weight, bias (C,)."""
    B, C, H, W = x.shape
    x_groups = x.reshape(B, G, C // G, H, W)  # (B, G, C/G, H, W)
    y = normalize(x_groups, [2, 3, 4], eps).reshape(B, C, H, W)  # (B, C, H, W)
    return y * weight[:, None, None] + bias[:, None, None]


B, C, H, W = 4, 6, 5, 4  # H != W, so a reshape that swapped them would show
G = 3
x = 0.01 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), variance ~1e-4

gn = torch.nn.GroupNorm(G, C).to(device)
with torch.no_grad():  # random affine, so a per-group or per-element mistake would show
    gn.weight.copy_(torch.randn(C))
    gn.bias.copy_(torch.randn(C))
print(f"GroupNorm weight {tuple(gn.weight.shape)}, bias {tuple(gn.bias.shape)}, "
      f"eps {gn.eps}")
assert gn.weight.shape == gn.bias.shape == (C,)

ours = group_norm(x, G, gn.weight, gn.bias, gn.eps)
blind = group_norm(x, G, gn.weight, gn.bias, 0.0)
ref = gn(x)
print(f"GroupNorm({G}, {C}): max|ours - torch| = {(ours - ref).abs().max().item():.1e},"
      f" without eps {(blind - ref).abs().max().item():.1e}")
torch.testing.assert_close(ours, ref)
assert (blind - ref).abs().max() > 1e-2  # eps is visible here

# %%
# GroupNorm(1, C) is LayerNorm([C, H, W]) up to the affine
# --------------------------------------------------------
# With one group the statistics are taken over ``(C, H, W)``, exactly LayerNorm's. With
# the affine switched off the two modules compute the same function.
gn1 = torch.nn.GroupNorm(1, C, affine=False).to(device)
ln = torch.nn.LayerNorm([C, H, W], elementwise_affine=False).to(device)
print(f"GroupNorm(1) vs LayerNorm, no affine: max gap = "
      f"{(gn1(x) - ln(x)).abs().max().item():.2e}")
torch.testing.assert_close(gn1(x), ln(x))

# %%
# The only difference is the affine: one weight per channel ``(C,)`` for GroupNorm, one
# per element ``(C, H, W)`` for LayerNorm. Broadcasting GroupNorm's weight and bias over
# ``(H, W)`` and copying them into a LayerNorm gives the same layer, affine included.
# The converse fails: a LayerNorm weight that varies over ``(H, W)`` inside a channel
# has no per-channel counterpart, so LayerNorm's affine is strictly richer than
# GroupNorm(1)'s. At the other end, ``GroupNorm(C, C)`` (one channel per group) is
# InstanceNorm, proven on the InstanceNorm page.
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
# RMSNorm from scratch
# --------------------
# :math:`y = x / \sqrt{\mathrm{mean}(x^2) + \epsilon} \cdot \gamma` (``weight``
# :math:`\gamma`) over the normalized dims: no mean is subtracted and there is *no
# bias*. Token-style input ``(B, L, D)``, normalized over ``D``. For a float32 input the
# default ``eps=None`` is float32's machine epsilon, ``1.19e-7``. At unit scale any
# small ``eps`` looks the same, so the input has RMS ``~1e-3``: its mean square
# ``~1e-6`` makes ``1.19e-7`` a 12 % term, and LayerNorm's usual ``1e-5`` dominates.
# Only float32's epsilon reproduces the module.
B, L, D = 4, 8, 32


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x**2) over the last dim + eps) * weight; x (..., D), weight (D,)"""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


rms = torch.nn.RMSNorm(D).to(device)
with torch.no_grad():
    rms.weight.copy_(torch.randn(D))
params = {n: tuple(p.shape) for n, p in rms.named_parameters()}
print(f"RMSNorm parameters: {params}, eps: {rms.eps}")
assert params == {"weight": (D,)}, "RMSNorm grew a bias?"
assert rms.eps is None

eps32 = torch.finfo(torch.float32).eps
quiet = 1e-3 * torch.randn(B, L, D, device=device)  # (B, L, D), RMS ~1e-3
y = rms(quiet)
for name, eps in [("finfo(float32).eps", eps32), ("1e-5", 1e-5), ("0", 0.0)]:
    gap = (rms_norm(quiet, rms.weight, eps) - y).abs().max().item()
    print(f"float32, formula with eps = {name:18s}: max gap = {gap:.2e}")
torch.testing.assert_close(rms_norm(quiet, rms.weight, eps32), y)
assert (rms_norm(quiet, rms.weight, 1e-5) - y).abs().max() > 0.1, "eps default is 1e-5?"
assert (rms_norm(quiet, rms.weight, 0.0) - y).abs().max() > 0.01, "eps default is 0?"

# %%
# What ``eps=None`` is in each dtype
# ----------------------------------
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
u = torch.randn(B, L, D, device=device, dtype=torch.float64)
u = u / u.pow(2).mean(dim=-1, keepdim=True).sqrt()  # every token has RMS exactly 1
torch.testing.assert_close(u.norm(dim=-1), torch.full((B, L), D**0.5, device=device,
                                                     dtype=torch.float64))
w = torch.randn(D, device=device, dtype=torch.float64)
f32, f64 = torch.float32, torch.float64
cases = [(f32, 1e-3, f32), (torch.bfloat16, 1e-3, f32), (torch.float16, 1e-3, f32),
         (f64, 1e-8, f64)]  # (dtype, input RMS, the dtype whose eps the module uses)


def out_rms(y, weight):
    """RMS of the normalized part of y (weight divided out), averaged over tokens."""
    return (y.double() / weight.double()).pow(2).mean(dim=-1).sqrt().mean().item()


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
# RMSNorm is LayerNorm without the centering
# ------------------------------------------
# LayerNorm's variance is the mean square of the *centred* input, so LayerNorm of ``x``
# is RMSNorm of :math:`x - \mathrm{mean}(x)` with the same ``eps``. The input has
# variance ``~1e-4`` so that a different ``eps`` would show, and a mean three times its
# standard deviation, so that the centering matters.
tokens = torch.randn(B, L, D, device=device)  # (B, L, D)
shifted = 0.01 * (tokens + 3.0)  # (B, L, D), std ~0.01, mean ~0.03
ln = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)
rms_same_eps = torch.nn.RMSNorm(D, eps=ln.eps, elementwise_affine=False).to(device)
rms_default = torch.nn.RMSNorm(D, elementwise_affine=False).to(device)
centred = shifted - shifted.mean(dim=-1, keepdim=True)
gap = (ln(shifted) - rms_same_eps(centred)).abs().max().item()
gap_eps = (ln(shifted) - rms_default(centred)).abs().max().item()
gap_uncentred = (ln(shifted) - rms_same_eps(shifted)).abs().max().item()
print(f"max|LayerNorm(x) - RMSNorm(x - mean)|             = {gap:.2e}")
print(f"max|LayerNorm(x) - RMSNorm(x - mean), eps=None|   = {gap_eps:.2e}")
print(f"max|LayerNorm(x) - RMSNorm(x)|                    = {gap_uncentred:.2e}")
torch.testing.assert_close(ln(shifted), rms_same_eps(centred))
assert gap_eps > 1e-2, "eps no longer matters at this variance?"
assert gap_uncentred > 0.5, "centering no longer matters?"

# %%
# Where eps=None bends the output
# -------------------------------
# For an input of RMS :math:`r` the output RMS is :math:`r / \sqrt{r^2 + \epsilon}`:
# close to 1 above :math:`r \approx \sqrt{\epsilon}`, proportional to :math:`r` below.
# With ``eps=None`` that knee sits at float32's
# :math:`\sqrt{1.19 \cdot 10^{-7}} = 3.5 \cdot 10^{-4}` for float32 *and bfloat16*
# input, and at ``1.5e-8`` for float64, against ``3.2e-3`` for ``eps=1e-5``; bfloat16's
# own epsilon would put it at ``8.8e-2``. The measured points are ``nn.RMSNorm`` with
# ``eps=None``, in each dtype; each is compared with its curve in its own dtype, at that
# dtype's default tolerances.
import matplotlib.pyplot as plt

r = torch.logspace(-10, 1, 23, dtype=torch.float64)
v = torch.randn(256, dtype=torch.float64)
v = v / v.pow(2).mean().sqrt()  # exactly unit RMS, so r * v has RMS r


def sweep(module, dtype):
    """Output RMS of a weightless RMSNorm for inputs r * v, computed in `dtype`."""
    return torch.stack([module((ri * v).to(dtype)).double().pow(2).mean().sqrt()
                        for ri in r])


bf16 = torch.bfloat16
measured = {dt: sweep(torch.nn.RMSNorm(256, elementwise_affine=False), dt)
            for dt in (f32, f64, bf16)}
uses = {f32: f32, f64: f64, bf16: f32}  # whose eps each dtype gets, as proven above
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
ax.set_title("eps=None: the knee is float32's √eps = 3.5e-4 for float32 and bfloat16\n"
             "input, float64's 1.5e-8 for float64 (torch 2.13)")
ax.legend(fontsize="small")
plt.show()
