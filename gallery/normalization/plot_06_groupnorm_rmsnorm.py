"""
GroupNorm and RMSNorm
=====================

GroupNorm reduces over groups of channels and applies its affine per channel; with one group it
normalizes exactly like LayerNorm and differs from it only in the shape of the affine. RMSNorm
drops the centering and the bias: this page proves it is LayerNorm applied to centred input, and
that its default ``eps=None`` means ``torch.finfo(dtype).eps``, read at run time.
"""

# %%
# Setup
# -----
# Every page picks its device at run time and prints it; each claim holds on CPU and GPU.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")


# %%
# GroupNorm from scratch
# ----------------------
# Split the ``C`` channels into ``G`` groups of ``C // G``; mean and biased variance are taken
# per sample and per group, over ``(C // G, H, W)``, with ``eps`` inside the square root.
# The affine parameters are *per channel*, shape ``(C,)``, not per group.
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


B, C, H, W = 4, 6, 5, 5
G = 3
x = torch.randn(B, C, H, W, device=device)  # (B, C, H, W)

gn = torch.nn.GroupNorm(G, C).to(device)
with torch.no_grad():  # random affine, so a per-group or per-element mistake would show
    gn.weight.copy_(torch.randn(C))
    gn.bias.copy_(torch.randn(C))
print(f"GroupNorm weight {tuple(gn.weight.shape)}, bias {tuple(gn.bias.shape)}, eps {gn.eps}")
assert gn.weight.shape == gn.bias.shape == (C,)

ours = group_norm(x, G, gn.weight, gn.bias, gn.eps)
ref = gn(x)
print(f"GroupNorm({G}, {C}): max|ours - torch| = {(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

# %%
# GroupNorm(1, C) is LayerNorm([C, H, W]) up to the affine
# --------------------------------------------------------
# With one group the statistics are taken over ``(C, H, W)``, exactly LayerNorm's. With the
# affine switched off the two modules compute the same function.
gn1 = torch.nn.GroupNorm(1, C, affine=False).to(device)
ln = torch.nn.LayerNorm([C, H, W], elementwise_affine=False).to(device)
print(f"GroupNorm(1) vs LayerNorm, no affine: max gap = {(gn1(x) - ln(x)).abs().max().item():.2e}")
torch.testing.assert_close(gn1(x), ln(x))

# %%
# The only difference is the affine: one weight per channel ``(C,)`` for GroupNorm, one per
# element ``(C, H, W)`` for LayerNorm. Broadcasting GroupNorm's weight and bias over ``(H, W)``
# and copying them into a LayerNorm gives the same layer, affine included. The converse fails:
# a LayerNorm weight that varies over ``(H, W)`` inside a channel has no per-channel
# counterpart, so LayerNorm's affine is strictly richer than GroupNorm(1)'s. At the other end,
# ``GroupNorm(C, C)`` (one channel per group) is InstanceNorm, proven on the InstanceNorm page.
gn1 = torch.nn.GroupNorm(1, C).to(device)
ln = torch.nn.LayerNorm([C, H, W]).to(device)
print(f"affine shapes: GroupNorm {tuple(gn1.weight.shape)}, LayerNorm {tuple(ln.weight.shape)}")
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
# ``y = x / sqrt(mean(x**2) + eps) * weight`` over the normalized dims: no mean is subtracted
# and there is *no bias*. Token-style input ``(B, L, D)``, normalized over ``D``.
B, L, D = 4, 8, 32
tokens = torch.randn(B, L, D, device=device)  # (B, L, D)


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x**2 over the last dim) + eps) * weight; x (..., D), weight (D,)."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


rms = torch.nn.RMSNorm(D).to(device)
with torch.no_grad():
    rms.weight.copy_(torch.randn(D))
params = {n: tuple(p.shape) for n, p in rms.named_parameters()}
print(f"RMSNorm parameters: {params}, eps: {rms.eps}")
assert params == {"weight": (D,)}, "RMSNorm grew a bias?"
assert rms.eps is None

eps32 = torch.finfo(torch.float32).eps
ours = rms_norm(tokens, rms.weight, eps32)
print(f"RMSNorm: max|ours - torch| = {(ours - rms(tokens)).abs().max().item():.2e}")
torch.testing.assert_close(ours, rms(tokens))

# %%
# ``eps=None`` means ``torch.finfo(x.dtype).eps``
# -----------------------------------------------
# At unit scale any small ``eps`` looks the same, so test on low-RMS input: with RMS ``~1e-3``
# the mean square is ``~1e-6``, next to which float32's ``eps = 1.19e-7`` is a 10 % term and
# LayerNorm's usual ``1e-5`` dominates. Only ``finfo(float32).eps`` reproduces the module.
quiet = 1e-3 * torch.randn(B, L, D, device=device)  # (B, L, D), rms ~ 1e-3
y = rms(quiet)
for name, eps in [("finfo(float32).eps", eps32), ("1e-5", 1e-5), ("0", 0.0)]:
    gap = (rms_norm(quiet, rms.weight, eps) - y).abs().max().item()
    print(f"float32, formula with eps = {name:18s}: max gap = {gap:.2e}")
torch.testing.assert_close(rms_norm(quiet, rms.weight, eps32), y)
assert (rms_norm(quiet, rms.weight, 1e-5) - y).abs().max() > 0.1, "eps default is 1e-5 now?"
assert (rms_norm(quiet, rms.weight, 0.0) - y).abs().max() > 0.01, "eps default is 0 now?"

# %%
# The same module in float64 picks float64's ``eps = 2.2e-16``. Test on RMS ``~1e-4`` (mean
# square ``~1e-8``), where float32's ``eps = 1.19e-7`` would dominate the denominator.
rms64 = torch.nn.RMSNorm(D, dtype=torch.float64).to(device)
with torch.no_grad():
    rms64.weight.copy_(torch.randn(D))
quiet64 = 1e-4 * torch.randn(B, L, D, device=device, dtype=torch.float64)  # (B, L, D)
y64 = rms64(quiet64)
eps64 = torch.finfo(torch.float64).eps
gap64 = (rms_norm(quiet64, rms64.weight, eps64) - y64).abs().max().item()
gap32 = (rms_norm(quiet64, rms64.weight, eps32) - y64).abs().max().item()
print(f"float64, eps = finfo(float64).eps: max gap = {gap64:.2e}")
print(f"float64, eps = finfo(float32).eps: max gap = {gap32:.2e}")
torch.testing.assert_close(rms_norm(quiet64, rms64.weight, eps64), y64)
assert gap32 > 1e-3, "float64 RMSNorm no longer uses its own dtype's eps?"

# %%
# RMSNorm is LayerNorm without the centering
# ------------------------------------------
# LayerNorm's variance is the mean square of the *centred* input, so LayerNorm of ``x`` is
# RMSNorm of ``x - mean(x)`` with the same ``eps``. The offset of 3 makes the centering matter.
shifted = tokens + 3.0  # (B, L, D), mean ~3, so RMSNorm(x) alone would be far off
ln = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)
rms_same_eps = torch.nn.RMSNorm(D, eps=ln.eps, elementwise_affine=False).to(device)
centred = shifted - shifted.mean(dim=-1, keepdim=True)
gap = (ln(shifted) - rms_same_eps(centred)).abs().max().item()
gap_uncentred = (ln(shifted) - rms_same_eps(shifted)).abs().max().item()
print(f"max|LayerNorm(x) - RMSNorm(x - mean)| = {gap:.2e}")
print(f"max|LayerNorm(x) - RMSNorm(x)|        = {gap_uncentred:.2e}")
torch.testing.assert_close(ln(shifted), rms_same_eps(centred))
assert gap_uncentred > 0.5, "centering no longer matters?"

# %%
# Where eps=None bends the output
# -------------------------------
# For an input of RMS ``r`` the output RMS is ``r / sqrt(r**2 + eps)``: close to 1 above
# ``r ~ sqrt(eps)``, proportional to ``r`` below. With ``eps=None`` that knee moves with the
# dtype: ``3.5e-4`` in float32, ``1.5e-8`` in float64, against ``3.2e-3`` for ``eps=1e-5``.
# The measured points are ``nn.RMSNorm`` with ``eps=None``, in each dtype.
import matplotlib.pyplot as plt

r = torch.logspace(-10, 1, 23, dtype=torch.float64)
u = torch.randn(256, dtype=torch.float64)
u = u / u.pow(2).mean().sqrt()  # exactly unit RMS, so r * u has RMS r


def out_rms(module, dtype):
    """Output RMS of a weightless RMSNorm for inputs r * u, computed in `dtype`."""
    return torch.stack([module((ri * u).to(dtype)).double().pow(2).mean().sqrt() for ri in r])


measured = {
    dt: out_rms(torch.nn.RMSNorm(256, elementwise_affine=False), dt)
    for dt in (torch.float32, torch.float64)
}
theory = {dt: r / torch.sqrt(r**2 + torch.finfo(dt).eps) for dt in measured}
for dt in measured:
    gap = (measured[dt] - theory[dt]).abs().max().item()
    print(f"{dt}: max|measured - r/sqrt(r^2 + finfo.eps)| = {gap:.1e}")
    # Compare in the output's own dtype: float32 rounding of the module sets the tolerance.
    torch.testing.assert_close(measured[dt].to(dt), theory[dt].to(dt))

fig, ax = plt.subplots()
for dt, name in [(torch.float32, "float32"), (torch.float64, "float64")]:
    line, = ax.loglog(r, theory[dt], "-", label=f"eps=None, {name}: finfo.eps")
    ax.loglog(r, measured[dt], "o", ms=4, color=line.get_color(), label=f"nn.RMSNorm, {name}")
ax.loglog(r, r / torch.sqrt(r**2 + 1e-5), "--", color="gray", label="eps=1e-5 (for comparison)")
ax.set_xlabel("input RMS r")
ax.set_ylabel("output RMS")
ax.set_title("eps=None: RMSNorm's knee moves with the dtype,\n"
             "to √finfo.eps = 3.5e-4 in float32 and 1.5e-8 in float64")
ax.legend()
plt.show()
