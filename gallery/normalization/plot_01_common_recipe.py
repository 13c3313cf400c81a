"""
The common recipe, and where eps goes
=====================================

Every layer in this chapter computes
``Y = (X - mean) / sqrt(var + eps) * weight + bias``. They differ in three choices only:
the dims reduced, whether running statistics are tracked, and the shape of the affine
parameters. This page proves the chapter's comparison table cell by cell against
PyTorch's own modules, draws which entries share a statistic in each layer, and proves
that PyTorch puts ``eps`` *inside* the square root, where the source notes put it
outside.
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
# The recipe from scratch
# -----------------------
# One function serves BatchNorm, InstanceNorm, LayerNorm and GroupNorm:
# :math:`y = (x - \mathrm{E}[x]) / \sqrt{\mathrm{Var}[x] + \epsilon}`, with the
# statistics taken over ``dims``, the only choice. The variance is the *biased* one
# (divide by :math:`n`), as PyTorch normalizes with it.
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


B, C, H, W = 4, 6, 5, 5
G = 2  # groups for GroupNorm

# %%
# Which dims each layer reduces
# -----------------------------
# Affine parameters are switched off to isolate the reduction. GroupNorm views the
# channels as ``G`` groups of ``C // G``, shape ``(B, G, C/G, H, W)``, and reduces each
# group together with ``(H, W)``. The input's variance is ``~1e-4``, ten times ``eps``:
# there ``eps`` moves every output by ~5 %, so a formula that dropped it could not pass,
# nor could one that divided by n - 1 (the sets hold 25 to 150 values). The last column
# shows the gap without ``eps``.
x = 0.01 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), variance ~1e-4


def same(t):
    return t


def grouped(t):
    """(B, C, H, W) -> (B, G, C/G, H, W): GroupNorm's view of the channels."""
    return t.reshape(B, G, C // G, H, W)


reductions = {  # layer: (view of x, dims of that view reduced together)
    "BatchNorm2d": (same, [0, 2, 3]),
    "InstanceNorm2d": (same, [2, 3]),
    "LayerNorm": (same, [1, 2, 3]),
    "GroupNorm": (grouped, [2, 3, 4]),
}
without_affine = {
    "BatchNorm2d": torch.nn.BatchNorm2d(C, affine=False),
    "InstanceNorm2d": torch.nn.InstanceNorm2d(C),
    "LayerNorm": torch.nn.LayerNorm([C, H, W], elementwise_affine=False),
    "GroupNorm": torch.nn.GroupNorm(G, C, affine=False),
}
for name, (view, dims) in reductions.items():
    ref = without_affine[name].to(device)(x)
    ours = normalize(view(x), dims).reshape(B, C, H, W)
    blind = normalize(view(x), dims, eps=0.0).reshape(B, C, H, W)
    gap, gap_blind = (ours - ref).abs().max().item(), (blind - ref).abs().max().item()
    print(f"{name:14s} dims {str(dims):9s}: max|ours - torch| = {gap:.1e}, "
          f"without eps {gap_blind:.1e}")
    # Same float32 arithmetic in a different summation order: default float32
    # tolerances.
    torch.testing.assert_close(ours, ref)
    assert gap_blind > 1e-2  # eps is visible here

# %%
# RMSNorm is the odd one out: no mean is subtracted, it divides by the root mean square
# over LayerNorm's dims. Its default ``eps=None`` is float32's machine epsilon for a
# float32 input (:doc:`plot_06_groupnorm_rmsnorm` proves which ``eps`` each dtype gets):
# ``1.2e-7``, a 0.1 % term next to a mean square of ``1e-4``, still 60 times the float32
# tolerance.
eps32 = torch.finfo(torch.float32).eps
rms = torch.sqrt(x.pow(2).mean(dim=[1, 2, 3], keepdim=True) + eps32)  # (B, 1, 1, 1)
rms_blind = torch.sqrt(x.pow(2).mean(dim=[1, 2, 3], keepdim=True))
ref = torch.nn.RMSNorm([C, H, W], elementwise_affine=False).to(device)(x)
gap = (x / rms - ref).abs().max().item()
gap_blind = (x / rms_blind - ref).abs().max().item()
print(f"RMSNorm        dims [1, 2, 3]: max|ours - torch| = {gap:.1e}, "
      f"without eps {gap_blind:.1e}")
torch.testing.assert_close(x / rms, ref)
assert gap_blind > 1e-3  # float32's eps is visible too


# %%
# Who shares a statistic, drawn from the same dims
# ------------------------------------------------
# The picture the notes had, computed from the ``reductions`` above rather than drawn by
# hand. Fill one ``(b, c)`` cell (all of its ``H x W`` values) with ones and everything
# else with zeros, then take the mean over the layer's dims: it is non-zero exactly on
# the cells whose statistic includes that cell. Every reduction here covers all of
# ``(H, W)`` (asserted), so a cell stands for a whole ``H x W`` map and the picture is a
# ``B x C`` grid. (GroupNorm's dims are those of its ``(B, G, C/G, H, W)`` view.)
def shared_sets(view, dims):
    """(B, C) labels, equal for two cells iff one mean and variance covers both."""
    label = torch.full((B, C), -1)
    for b in range(B):
        for c in range(C):
            if label[b, c] >= 0:
                continue
            probe = torch.zeros(B, C, H, W)
            probe[b, c] = 1.0
            reach = view(probe).mean(dim=dims, keepdim=True).expand_as(view(probe))
            reach = (reach > 0).reshape(B, C, H * W)  # (B, C, H*W)
            cells = reach.all(dim=-1)  # (B, C)
            assert torch.equal(cells, reach.any(dim=-1))  # whole H x W maps only
            assert (label[cells] == -1).all()  # the sets do not overlap
            label[cells] = label.max() + 1
    return label


sets = {name: shared_sets(view, dims) for name, (view, dims) in reductions.items()}
counts = {name: int(label.max()) + 1 for name, label in sets.items()}
print("statistics per layer:", ", ".join(f"{n} {k}" for n, k in counts.items()))
assert counts == {"BatchNorm2d": C, "InstanceNorm2d": B * C, "LayerNorm": B,
                  "GroupNorm": B * G}
# BatchNorm's label depends on the channel only, LayerNorm's on the sample only.
assert torch.equal(sets["BatchNorm2d"], sets["BatchNorm2d"][:1].expand(B, C))
assert torch.equal(sets["LayerNorm"], sets["LayerNorm"][:, :1].expand(B, C))

# %%
# One colour is one mean and variance; black lines separate the sets.
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 4, figsize=(10, 3.4))
for ax, (name, label) in zip(axes, sets.items()):
    # Neighbouring labels differ by 1 or by C = 6, so modulo 10 they get different
    # colours.
    ax.imshow(label % 10, cmap="tab10", vmin=-0.5, vmax=9.5)
    for b in range(B):
        for c in range(C):
            if c + 1 < C and label[b, c] != label[b, c + 1]:
                ax.plot([c + 0.5, c + 0.5], [b - 0.5, b + 0.5], "k", lw=2)
            if b + 1 < B and label[b, c] != label[b + 1, c]:
                ax.plot([c - 0.5, c + 0.5], [b + 0.5, b + 0.5], "k", lw=2)
    ax.grid(False)
    ax.set_xticks(range(C))
    ax.set_yticks(range(B))
    ax.set_xlabel("channel c")
    ax.set_title(f"{name}\n{counts[name]} statistics, dims {reductions[name][1]}",
                 fontsize="small")
axes[0].set_ylabel("sample b (each cell: H × W values)")
fig.suptitle("BatchNorm pools samples, LayerNorm pools channels, InstanceNorm "
             "neither,\nGroupNorm channel groups: one colour = one mean and variance")
plt.show()

# %%
# .. _errata-norm-channels:
#
# What the channels are
# ---------------------
# For images the notes say "the channel dimension is the RGB channel". That holds at the
# input only. After the first convolution ``C`` counts learned feature maps, and a
# BatchNorm there keeps one mean and variance per feature map, not per colour. A 3 -> 64
# convolution as an example (shapes only: no values are compared, so TF32 convolutions
# on a GPU change nothing here); a BatchNorm sized for RGB accepts the image and refuses
# the convolution's output.
conv = torch.nn.Conv2d(3, 64, kernel_size=3, padding=1).to(device)
rgb = torch.randn(2, 3, 8, 8, device=device)  # (B, 3, H, W): red, green, blue
features = conv(rgb)  # (B, 64, H, W): learned feature maps
bn_features = torch.nn.BatchNorm2d(64).to(device)
bn_features(features)
print(f"input {tuple(rgb.shape)} -> conv -> {tuple(features.shape)}; "
      f"BatchNorm2d(64).running_mean {tuple(bn_features.running_mean.shape)}")
assert features.shape[1] == 64 and bn_features.running_mean.shape == (64,)
bn_rgb = torch.nn.BatchNorm2d(rgb.shape[1]).to(device)  # one statistic per colour
y_rgb = bn_rgb(rgb)  # accepted at the input: (B, 3, H, W)
assert y_rgb.shape == rgb.shape
try:
    bn_rgb(features)
except RuntimeError as err:
    print(f"BatchNorm2d(3) on the features raises RuntimeError:\n    {err}")
else:
    raise AssertionError("a 3-channel BatchNorm accepted 64 channels")


# %%
# .. _errata-norm-defaults-table:
#
# The table's other cells, read from the modules
# ----------------------------------------------
# Defaults are not folklore: construct each module with only its required arguments and
# list its parameters (where the affine lives), its buffers (tracked statistics) and
# ``eps``.
def anatomy(module):
    """Parameter shapes, tracked buffers and eps of a freshly built module."""
    params = {n: tuple(p.shape) for n, p in module.named_parameters()}
    buffers = sorted(n for n, b in module.named_buffers() if b is not None)
    return {"params": params, "buffers": buffers, "eps": module.eps}


fresh = {
    "BatchNorm2d": torch.nn.BatchNorm2d(C),
    "InstanceNorm2d": torch.nn.InstanceNorm2d(C),
    "LayerNorm": torch.nn.LayerNorm([C, H, W]),
    "GroupNorm": torch.nn.GroupNorm(G, C),
    "RMSNorm": torch.nn.RMSNorm([C, H, W]),
}
found = {name: anatomy(m) for name, m in fresh.items()}
for name, a in found.items():
    print(f"{name:14s} eps={a['eps']!s:5s} params={a['params']}")
    if a["buffers"]:
        print(f"{'':14s} buffers={a['buffers']}")

stats = ["num_batches_tracked", "running_mean", "running_var"]
per_channel = {"weight": (C,), "bias": (C,)}
expected = {
    "BatchNorm2d": {"params": per_channel, "buffers": stats, "eps": 1e-5},
    # The notes say "affine=True is default" for InstanceNorm: it is not. No weight, no
    # stats.
    "InstanceNorm2d": {"params": {}, "buffers": [], "eps": 1e-5},
    "LayerNorm": {"params": {"weight": (C, H, W), "bias": (C, H, W)}, "buffers": [],
                  "eps": 1e-5},
    "GroupNorm": {"params": per_channel, "buffers": [], "eps": 1e-5},
    # RMSNorm has a weight but no bias; eps=None is resolved per dtype when it runs.
    "RMSNorm": {"params": {"weight": (C, H, W)}, "buffers": [], "eps": None},
}
assert found == expected, f"module defaults changed: {found}"
print("every cell of the table matches the modules' defaults")
assert fresh["BatchNorm2d"].momentum == 0.1 and fresh["InstanceNorm2d"].momentum == 0.1

# %%
# .. _errata-norm-eps-inside:
#
# ``eps`` goes inside the square root
# -----------------------------------
# The source notes write the recipe as
# ``(X - X.mean()) / (X.var(unbiased=False).sqrt() + eps)``. That is a different
# function: it adds ``eps`` to the standard deviation, PyTorch adds it to the variance.
# At unit variance the two agree to about :math:`\epsilon / 2` relative, which is why
# the slip goes unnoticed.


def normalize_notes(x, dims, eps):
    """The notes' version: eps added to the standard deviation (not PyTorch's)."""
    mean = x.mean(dim=dims, keepdim=True)
    std = x.var(dim=dims, unbiased=False, keepdim=True).sqrt()
    return (x - mean) / (std + eps)


bn = torch.nn.BatchNorm2d(C, affine=False).to(device)
unit = torch.randn(B, C, H, W, device=device)
y_unit = bn(unit)
gap = (normalize_notes(unit, [0, 2, 3], bn.eps) - y_unit).abs().max()
rel = (gap / y_unit.abs().max()).item()
print(f"unit variance: max relative gap notes vs torch = {rel:.1e}")
assert 1e-7 < rel < 1e-4  # tiny, but not zero: about eps / 2 = 5e-6

# %%
# With a small variance the gap is not small. Take features whose standard deviation
# :math:`s` is ``1e-3`` (variance ``1e-6``, ten times smaller than ``eps``): PyTorch
# shrinks the output to :math:`s / \sqrt{s^2 + \epsilon} \approx 0.30`, the notes' form
# keeps it near 1.
# Centred at 0: data at 1.0 +- 1e-3 would lose 3 of float32's 7 digits to cancellation
# first.
tiny = 1e-3 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), std ~ 1e-3
y_torch = bn(tiny)
y_inside = normalize(tiny, [0, 2, 3])
y_notes = normalize_notes(tiny, [0, 2, 3], bn.eps)
print(f"output std: torch {y_torch.std():.3f}, eps inside {y_inside.std():.3f}, "
      f"notes (eps outside) {y_notes.std():.3f}")
torch.testing.assert_close(y_inside, y_torch)
assert y_notes.std() > 3 * y_torch.std(), "eps placement no longer matters?"

# %%
# The whole curve
# ---------------
# Sweep the input standard deviation ``s`` over eight decades. For zero-mean data with
# biased standard deviation ``s``, the output standard deviation is
# :math:`s / \sqrt{s^2 + \epsilon}` with eps inside, and :math:`s / (s + \epsilon)` with
# eps outside.
# BatchNorm's measured output follows the first curve and the notes' function the
# second, to the last digit (float64, so the sweep itself adds no rounding).
eps = 1e-5
s = torch.logspace(-6, 1, 29, dtype=torch.float64)
z = torch.randn(256, 1, dtype=torch.float64)
z = (z - z.mean()) / z.std(unbiased=False)  # exactly zero mean, unit biased std
bn64 = torch.nn.BatchNorm1d(1, affine=False, dtype=torch.float64)
measured = torch.stack([bn64(si * z).std(unbiased=False) for si in s])
notes = torch.stack([normalize_notes(si * z, [0], eps).std(unbiased=False) for si in s])
inside = s / torch.sqrt(s**2 + eps)
outside = s / (s + eps)
print(f"max |BatchNorm1d - s/sqrt(s^2+eps)| = {(measured - inside).abs().max():.1e}, "
      f"max |notes - s/(s+eps)| = {(notes - outside).abs().max():.1e}")
torch.testing.assert_close(measured, inside)  # float64 default tolerances
torch.testing.assert_close(notes, outside)

fig, ax = plt.subplots()
ax.loglog(s, outside, "--", label="notes: s / (s + eps)")
ax.loglog(s, notes, "x", ms=5, color="C0", label="the notes' formula, measured")
ax.loglog(s, inside, "-", label="PyTorch: s / sqrt(s² + eps)")
ax.loglog(s, measured, "o", ms=4, color="C1", label="nn.BatchNorm1d, measured")
ax.axvline(eps**0.5, color="gray", lw=0.8)
ax.axvline(eps, color="gray", lw=0.8, ls=":")
ax.set_xlabel("input standard deviation s")
ax.set_ylabel("output standard deviation")
ax.set_title("eps inside the sqrt: outputs shrink below s ≈ √eps (3e-3), not s ≈ eps")
ax.legend()
plt.show()
