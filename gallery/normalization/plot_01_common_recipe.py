"""
The common recipe, and where eps goes
=====================================

Every layer in this chapter computes ``Y = (X - mean) / sqrt(var + eps) * weight + bias``.
They differ in three choices only: the dims reduced, whether running statistics are tracked,
and the shape of the affine parameters. This page proves the chapter's comparison table cell by
cell against PyTorch's own modules, and proves that PyTorch puts ``eps`` *inside* the square
root, where the source notes put it outside.
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
# The recipe from scratch
# -----------------------
# One function serves BatchNorm, InstanceNorm, LayerNorm and GroupNorm: ``dims`` is the only
# choice. The variance is the *biased* one (divide by n), as PyTorch normalizes with it.
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


B, C, H, W = 4, 6, 5, 5
G = 2  # groups for GroupNorm
x = torch.randn(B, C, H, W, device=device)  # (B, C, H, W)

# %%
# Which dims each layer reduces
# -----------------------------
# Affine parameters are switched off to isolate the reduction. GroupNorm splits the channels
# into ``G`` groups of ``C // G`` and reduces each group together with ``(H, W)``.
# RMSNorm is the odd one out: no mean is subtracted, it divides by the root mean square.
x_groups = x.reshape(B, G, C // G, H, W)  # (B, G, C/G, H, W)
rms = torch.sqrt(x.pow(2).mean(dim=[1, 2, 3], keepdim=True) + torch.finfo(x.dtype).eps)
cases = {
    "BatchNorm2d": (torch.nn.BatchNorm2d(C, affine=False), normalize(x, [0, 2, 3])),
    "InstanceNorm2d": (torch.nn.InstanceNorm2d(C), normalize(x, [2, 3])),
    "LayerNorm": (
        torch.nn.LayerNorm([C, H, W], elementwise_affine=False),
        normalize(x, [1, 2, 3]),
    ),
    "GroupNorm": (
        torch.nn.GroupNorm(G, C, affine=False),
        normalize(x_groups, [2, 3, 4]).reshape(B, C, H, W),
    ),
    "RMSNorm": (torch.nn.RMSNorm([C, H, W], elementwise_affine=False), x / rms),
}
for name, (module, ours) in cases.items():
    ref = module.to(device)(x)
    print(f"{name:15s} max|ours - torch| = {(ours - ref).abs().max().item():.2e}")
    # Same float32 arithmetic in a different summation order: default float32 tolerances.
    torch.testing.assert_close(ours, ref)


# %%
# The table's other cells, read from the modules
# ----------------------------------------------
# Defaults are not folklore: construct each module with only its required arguments and list
# its parameters (where the affine lives), its buffers (tracked statistics) and ``eps``.
def anatomy(module):
    """Parameter shapes, tracked buffers and eps of a freshly built module."""
    params = {n: tuple(p.shape) for n, p in module.named_parameters()}
    buffers = sorted(n for n, b in module.named_buffers() if b is not None)
    return {"params": params, "buffers": buffers, "eps": module.eps}


modules = {
    "BatchNorm2d": torch.nn.BatchNorm2d(C),
    "InstanceNorm2d": torch.nn.InstanceNorm2d(C),
    "LayerNorm": torch.nn.LayerNorm([C, H, W]),
    "GroupNorm": torch.nn.GroupNorm(G, C),
    "RMSNorm": torch.nn.RMSNorm([C, H, W]),
}
found = {name: anatomy(m) for name, m in modules.items()}
for name, a in found.items():
    print(f"{name:15s} eps={a['eps']!s:6s} params={a['params']} buffers={a['buffers']}")

stats = ["num_batches_tracked", "running_mean", "running_var"]
expected = {
    "BatchNorm2d": {"params": {"weight": (C,), "bias": (C,)}, "buffers": stats, "eps": 1e-5},
    # The notes say "affine=True is default" for InstanceNorm: it is not. No weight, no stats.
    "InstanceNorm2d": {"params": {}, "buffers": [], "eps": 1e-5},
    "LayerNorm": {"params": {"weight": (C, H, W), "bias": (C, H, W)}, "buffers": [], "eps": 1e-5},
    "GroupNorm": {"params": {"weight": (C,), "bias": (C,)}, "buffers": [], "eps": 1e-5},
    # RMSNorm has a weight but no bias, and eps=None means torch.finfo(dtype).eps.
    "RMSNorm": {"params": {"weight": (C, H, W)}, "buffers": [], "eps": None},
}
assert found == expected, f"module defaults changed: {found}"
print("every cell of the table matches the modules' defaults")
assert modules["BatchNorm2d"].momentum == 0.1 and modules["InstanceNorm2d"].momentum == 0.1

# %%
# ``eps`` goes inside the square root
# -----------------------------------
# The source notes write the recipe as
# ``(X - X.mean()) / (X.var(unbiased=False).sqrt() + eps)``. That is a different function:
# it adds ``eps`` to the standard deviation, PyTorch adds it to the variance. At unit variance the
# two agree to about ``eps / 2`` relative, which is why the slip goes unnoticed.


def normalize_notes(x, dims, eps=1e-5):
    """The notes' version: eps added to the standard deviation (not what PyTorch does)."""
    mean = x.mean(dim=dims, keepdim=True)
    std = x.var(dim=dims, unbiased=False, keepdim=True).sqrt()
    return (x - mean) / (std + eps)


bn = torch.nn.BatchNorm2d(C, affine=False).to(device)
unit = torch.randn(B, C, H, W, device=device)
rel = ((normalize_notes(unit, [0, 2, 3]) - bn(unit)).abs().max() / bn(unit).abs().max()).item()
print(f"unit variance: max relative gap notes vs torch = {rel:.1e}")
assert 1e-7 < rel < 1e-4  # tiny, but not zero: about eps / 2 = 5e-6

# %%
# With a small variance the gap is not small. Take features whose standard deviation is
# ``1e-3`` (variance ``1e-6``, ten times smaller than ``eps``): PyTorch shrinks the output to
# ``std / sqrt(std**2 + eps) ~ 0.30``, the notes' form keeps it near ``1``.
# Centred at 0: data at 1.0 +- 1e-3 would lose 3 of float32's 7 digits to cancellation first.
tiny = 1e-3 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), std ~ 1e-3
y_torch = bn(tiny)
y_inside = normalize(tiny, [0, 2, 3])
y_notes = normalize_notes(tiny, [0, 2, 3])
print(f"output std: torch {y_torch.std():.3f}, eps inside {y_inside.std():.3f}, "
      f"notes (eps outside) {y_notes.std():.3f}")
torch.testing.assert_close(y_inside, y_torch)
assert y_notes.std() > 3 * y_torch.std(), "eps placement no longer matters?"

# %%
# The whole curve
# ---------------
# Sweep the input standard deviation ``s`` over eight decades. For zero-mean data with biased
# standard deviation ``s``, the output standard deviation is ``s / sqrt(s**2 + eps)`` with eps
# inside, and ``s / (s + eps)`` with eps outside. BatchNorm's measured output (float64, so the
# sweep itself adds no rounding) follows the first curve to the last digit.
import matplotlib.pyplot as plt

eps = 1e-5
s = torch.logspace(-6, 1, 29, dtype=torch.float64)
z = torch.randn(256, 1, dtype=torch.float64)
z = (z - z.mean()) / z.std(unbiased=False)  # exactly zero mean, unit biased std
bn64 = torch.nn.BatchNorm1d(1, affine=False, dtype=torch.float64)
measured = torch.stack([bn64(si * z).std(unbiased=False) for si in s])
inside = s / torch.sqrt(s**2 + eps)
outside = s / (s + eps)
torch.testing.assert_close(measured, inside)  # float64 default tolerances
print(f"max |measured - s/sqrt(s^2+eps)| = {(measured - inside).abs().max():.1e}")

fig, ax = plt.subplots()
ax.loglog(s, outside, "--", label="notes: s / (s + eps)")
ax.loglog(s, inside, "-", label="PyTorch: s / sqrt(s² + eps)")
ax.loglog(s, measured, "o", ms=4, label="nn.BatchNorm1d, measured")
ax.axvline(eps**0.5, color="gray", lw=0.8)
ax.axvline(eps, color="gray", lw=0.8, ls=":")
ax.set_xlabel("input standard deviation s")
ax.set_ylabel("output standard deviation")
ax.set_title("eps inside the sqrt: outputs shrink below s ≈ √eps (3e-3), not s ≈ eps")
ax.legend()
plt.show()
