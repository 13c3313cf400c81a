"""
InstanceNorm: per-sample, per-channel statistics
================================================

InstanceNorm normalizes each channel of each sample over its spatial dims alone, in 1d,
2d and 3d alike: every image loses its own brightness and contrast, channel by channel.
This page writes it from scratch, matches PyTorch's modules, and reads their real
defaults.

**You will learn**

- which dims InstanceNorm reduces, and what that erases (brightness, contrast)
- to write InstanceNorm for 1d, 2d and 3d inputs in a few lines
- that InstanceNorm is GroupNorm with one channel per group
- PyTorch's defaults (no affine, no running statistics) and what
  ``track_running_stats=True`` records

**Prerequisites:** :doc:`/generated/normalization/plot_01_common_recipe` (the recipe),
:doc:`/generated/normalization/plot_02_batchnorm` (running statistics).

.. index:: ! InstanceNorm
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# For an input ``(B, C, *spatial)`` InstanceNorm takes one mean and variance per
# ``(sample, channel)``, over the spatial dims only, then applies a per-channel affine
# (off by default):
#
# .. math::
#
#    y_{b,c,\dots} = \frac{x_{b,c,\dots} - \mu_{bc}}{\sqrt{\sigma^2_{bc} + \epsilon}}
#    \,\gamma_c + \beta_c, \qquad
#    \mu_{bc} = \frac{1}{HW} \sum_{h,w} x_{b,c,h,w}
#
# A batch of "images" whose every sample has its own brightness (mean) and contrast
# (std) per channel, as photos taken under different light would: BatchNorm shares one
# mean and std per channel across the batch, so the spread between samples survives;
# InstanceNorm maps every ``(sample, channel)`` to mean 0 and std
# :math:`\sqrt{v / (v + \epsilon)}` (variance :math:`v`), which is 1 unless the contrast
# is low. Float64 throughout, so that subtracting a brightness of order 1 from values
# that vary by 0.01 costs no visible rounding.
B, C, L, T, H, W = 4, 3, 16, 3, 5, 5
g = torch.Generator(device=device).manual_seed(1)
B_fig = 16
f64 = {"device": device, "dtype": torch.float64}
# Contrasts spread evenly on a log scale from 0.01 to 2, so that some variances are near
# eps.
contrast = torch.logspace(-2, 0.3, B_fig * C, **f64).reshape(B_fig, C, 1, 1)
brightness = torch.randn(B_fig, C, 1, 1, generator=g, **f64)
photos = torch.randn(B_fig, C, H, W, generator=g, **f64) * contrast + brightness
outputs = {
    "input": photos,
    "after BatchNorm2d": torch.nn.BatchNorm2d(C, affine=False, **f64)(photos),
    "after InstanceNorm2d": torch.nn.InstanceNorm2d(C, **f64)(photos),
}
fig, ax = plt.subplots(layout="constrained")
markers = {"input": ("o", 18), "after BatchNorm2d": ("o", 18),
           "after InstanceNorm2d": ("*", 160)}
for label, y in outputs.items():
    mu = y.mean(dim=[2, 3]).flatten().cpu()
    sd = y.std(dim=[2, 3], unbiased=False).flatten().cpu()
    marker, size = markers[label]
    ax.scatter(mu, sd, s=size, marker=marker, alpha=0.7, label=label)
ax.set_xlabel(f"mean of one (sample, channel) over H×W ({B_fig}×{C} points per colour)")
ax.set_ylabel("std of one (sample, channel) over H×W")
ax.set_title("InstanceNorm sends every sample-channel to mean 0, std ≈ 1;\n"
             "BatchNorm leaves the spread between samples")
fig.legend(loc="outside lower center", ncol=3)  # below the axes, off the points
plt.show()


# %%
# From scratch
# ------------
# Statistics per ``(sample, channel)`` over every dim after the channel, biased
# variance, ``eps`` inside the square root; the affine has one weight and one bias per
# channel.
def instance_norm(x, weight=None, bias=None, eps=1e-5):
    """x: (B, C, *spatial); weight, bias: (C,) or None. Same shape as x."""
    dims = list(range(2, x.dim()))  # spatial dims only
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        per_channel = (1, -1) + (1,) * len(dims)  # (1, C, 1, ...)
        y = y * weight.view(per_channel) + bias.view(per_channel)
    return y



# %%
# The check, in 1d, 2d and 3d. The affine is randomized so that a wrong broadcast could
# not hide behind ``weight = 1, bias = 0``, and the inputs are ``0.01 * randn``
# (variance ``~1e-4``, ten times ``eps``), so that ``eps`` moves the output by ~5 %.
inputs = {  # variance ~1e-4
    torch.nn.InstanceNorm1d: 0.01 * torch.randn(B, C, L, device=device),  # (B, C, L)
    torch.nn.InstanceNorm2d: 0.01 * torch.randn(B, C, H, W, device=device),
    torch.nn.InstanceNorm3d: 0.01 * torch.randn(B, C, T, H, W, device=device),
}
modules = {}  # class: the module with its random affine, for the exercise below
for cls, x in inputs.items():
    norm = modules[cls] = cls(C, affine=True).to(device)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(C, device=device))
        norm.bias.copy_(torch.randn(C, device=device))
    ours = instance_norm(x, norm.weight, norm.bias, eps=norm.eps)
    ref = norm(x)
    print(f"{cls.__name__}: max|ours - torch| = {(ours - ref).abs().max().item():.1e}")
    torch.testing.assert_close(ours, ref)

# %%
# InstanceNorm is GroupNorm with one channel per group
# ----------------------------------------------------
# ``GroupNorm(Ng, C)`` reduces each group of ``C // Ng`` channels together with the
# spatial dims. With ``Ng = C`` every group is a single channel, which is InstanceNorm's
# reduction; both have a per-channel affine, so with the same weight and bias the
# outputs agree.
x = torch.randn(B, C, H, W, device=device)  # (B, C, H, W)
group = torch.nn.GroupNorm(C, C).to(device)
inst = torch.nn.InstanceNorm2d(C, affine=True).to(device)
with torch.no_grad():
    group.weight.copy_(torch.randn(C, device=device))
    group.bias.copy_(torch.randn(C, device=device))
    inst.weight.copy_(group.weight)
    inst.bias.copy_(group.bias)
print(f"max|GroupNorm(C, C) - InstanceNorm2d| = "
      f"{(group(x) - inst(x)).abs().max().item():.2e}")
torch.testing.assert_close(group(x), inst(x))

# %%
# Proof: the figure's stars sit at mean 0 and std sqrt(v / (v + eps))
# -------------------------------------------------------------------
inst_out = outputs["after InstanceNorm2d"]
inst_sd = inst_out.std(dim=[2, 3], unbiased=False)
# The output std is exactly sqrt(var / (var + eps)): below 1 for the low-contrast
# samples.
var_in = photos.var(dim=[2, 3], unbiased=False)
expected_sd = torch.sqrt(var_in / (var_in + 1e-5))
inst_mu = inst_out.mean(dim=[2, 3])
gap_sd = (inst_sd - expected_sd).abs().max().item()
print(f"InstanceNorm: max|mean| = {inst_mu.abs().max().item():.1e}, "
      f"max|std - sqrt(var / (var + eps))| = {gap_sd:.1e}")
torch.testing.assert_close(inst_mu, torch.zeros(B_fig, C, **f64))  # float64 defaults
torch.testing.assert_close(inst_sd, expected_sd)

# %%
# .. _errata-instancenorm-defaults:
#
# Proof: the real defaults (no affine, no running statistics)
# -----------------------------------------------------------
# The notes build ``InstanceNorm2d(3, affine=True, track_running_stats=True)`` with the
# comment "actually affine=True is default". Ask the module: both flags are off by
# default. The comment fits BatchNorm, whose affine *is* on by default.
defaults = torch.nn.InstanceNorm2d(C)
print(f"InstanceNorm2d(C): affine={defaults.affine}, "
      f"track_running_stats={defaults.track_running_stats}, "
      f"parameters={[n for n, _ in defaults.named_parameters()]}")
print(f"BatchNorm2d(C):    affine={torch.nn.BatchNorm2d(C).affine}")
assert defaults.affine is False and defaults.track_running_stats is False
assert list(defaults.parameters()) == []
assert torch.nn.BatchNorm2d(C).affine is True

# %%
# .. _errata-instancenorm-affine:
#
# Proof: the notes' check passes by accident
# ------------------------------------------
# Here is the notes' snippet, verbatim. It switches the affine on, but its reference
# never applies it, and still the printed norm is tiny.
import torch  # noqa: I001 (the notes, verbatim)
torch.manual_seed(43)
x = torch.randn(2,3,2,2)

# pytorch native IN
instnorm = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True)   # actually affine=True is default  # noqa: E501
y1 = instnorm(x)

# custom IN
eps = 1e-5
mean = x.mean(dim=[2,3], keepdim=True)
var = x.var(dim=[2,3], unbiased=False, keepdim=True)
y2 = (x - mean) / torch.sqrt(var + eps)

print((y1 - y2).norm())

# %%
# At unit variance that check cannot see ``eps``: ``eps`` moves these outputs by about
# :math:`\epsilon / 2 = 5 \cdot 10^{-6}` relative, under float32's tolerance, so it
# would pass with ``+ eps`` deleted. The notes' formula, line for line, on the same
# ``x`` scaled to variance ``~1e-4`` (where ``eps`` is a 10 % term) still matches the
# module; without ``eps`` it would not.
x_small = 0.01 * x  # (2, 3, 2, 2), variance ~1e-4
mean = x_small.mean(dim=[2,3], keepdim=True)
var = x_small.var(dim=[2,3], unbiased=False, keepdim=True)
y2_small = (x_small - mean) / torch.sqrt(var + eps)
y2_blind = (x_small - mean) / torch.sqrt(var)
y1_small = instnorm(x_small)
gap, gap_blind = (y1_small - y2_small).abs().max(), (y1_small - y2_blind).abs().max()
print(f"variance 1e-4: max|torch - notes' formula| {gap:.1e}, no eps {gap_blind:.1e}")
torch.testing.assert_close(y1_small, y2_small)
assert (y1_small - y2_blind).abs().max() > 1e-2  # eps is visible here

# %%
# It matches only because a fresh affine is the identity: ``weight`` starts at ones and
# ``bias`` at zeros. Give them random values, as training would, and the notes'
# reference falls apart; the reference with the per-channel affine still matches.
print(f"fresh weight {instnorm.weight.tolist()}, bias {instnorm.bias.tolist()}")
assert torch.equal(instnorm.weight, torch.ones(3))
assert torch.equal(instnorm.bias, torch.zeros(3))
torch.testing.assert_close(y1, y2)

with torch.no_grad():
    instnorm.weight.copy_(torch.randn(3))
    instnorm.bias.copy_(torch.randn(3))
y1 = instnorm(x)  # still train mode: instance statistics
y2_fixed = y2 * instnorm.weight.view(1, 3, 1, 1) + instnorm.bias.view(1, 3, 1, 1)
gap = (y1 - y2).norm().item()
print(f"random affine: ||torch - notes' reference|| = {gap:.2e}")
print(f"random affine: ||torch - fixed reference||  = "
      f"{(y1 - y2_fixed).norm().item():.2e}")
assert gap > 1.0, "the notes' reference should miss the affine"
torch.testing.assert_close(y1, y2_fixed)

# %%
# Proof: what ``track_running_stats=True`` records
# ------------------------------------------------
# In train mode the output still uses each instance's own statistics; the module only
# records running statistics on the side. Each sample gets its own mean and scale here,
# so that averaging per-instance statistics and pooling over the batch give visibly
# different answers. Candidate rules for one step with momentum :math:`m`, where
# :math:`\mu_{bc}` and :math:`\sigma^2_{bc}` are per-instance:
#
# * ``running_mean``: :math:`r \leftarrow (1 - m)\, r + \frac{m}{B} \sum_b \mu_{bc}`
# * ``running_var``: :math:`r \leftarrow (1 - m)\, r + \frac{m}{B} \sum_b \sigma^2_{bc}`
#   with :math:`\sigma^2_{bc}` *unbiased* (divide by :math:`HW - 1`), *biased*, or
#   BatchNorm's pooled variance over ``(B, H, W)``.
#
# For the mean the two views coincide (every instance has ``H * W`` values, so the mean
# of the per-instance means is the pooled mean); only the variance tells them apart, and
# only the first variance candidate reproduces the module over several steps. The module
# gets a large ``eps=0.1`` so that ``eps`` is visible next to the instance variances
# (the input's scale squared, 0.25 to 12) in train mode and next to the running
# variance in eval mode.
torch.manual_seed(0)
tracked = torch.nn.InstanceNorm2d(C, track_running_stats=True, eps=0.1).to(device)
m = tracked.momentum
print(f"momentum m = {m}, eps = {tracked.eps}")
running_mean = torch.zeros(C, device=device)  # the buffers' initial values
rules = ["unbiased", "biased", "pooled (BatchNorm)"]
running_var = {rule: torch.ones(C, device=device) for rule in rules}
train_err = 0.0
for step in range(5):
    scale = torch.rand(B, C, 1, 1, device=device) * 3 + 0.5
    shift = torch.randn(B, C, 1, 1, device=device) * 2
    x = torch.randn(B, C, H, W, device=device) * scale + shift  # (B, C, H, W)
    y = tracked(x)
    y_ours = instance_norm(x, eps=tracked.eps)  # train mode: instance statistics
    train_err = max(train_err, (y - y_ours).abs().max().item())
    torch.testing.assert_close(y, y_ours)

    running_mean = (1 - m) * running_mean + m * x.mean(dim=[2, 3]).mean(dim=0)
    candidates = {
        "unbiased": x.var(dim=[2, 3], unbiased=True).mean(dim=0),
        "biased": x.var(dim=[2, 3], unbiased=False).mean(dim=0),
        "pooled (BatchNorm)": x.var(dim=[0, 2, 3], unbiased=True),
    }
    for rule in rules:
        running_var[rule] = (1 - m) * running_var[rule] + m * candidates[rule]

print(f"train mode, 5 steps: max|torch - per-instance norm| = {train_err:.2e}")
print(f"running_mean: max|rule - torch| = "
      f"{(running_mean - tracked.running_mean).abs().max().item():.2e}")
torch.testing.assert_close(running_mean, tracked.running_mean)
for rule in rules:
    err = (running_var[rule] - tracked.running_var).abs().max().item()
    print(f"running_var, {rule:18s}: max|rule - torch| = {err:.2e}")
torch.testing.assert_close(running_var["unbiased"], tracked.running_var)
assert (running_var["biased"] - tracked.running_var).abs().max() > 1e-2
assert (running_var["pooled (BatchNorm)"] - tracked.running_var).abs().max() > 1e-1
# Unlike BatchNorm, InstanceNorm never advances its step counter: the buffer comes from
# the base class it shares with BatchNorm, and InstanceNorm's forward never touches it.
# That is a fact about PyTorch's internals in torch 2.13, not documented behaviour.
print(f"num_batches_tracked = {tracked.num_batches_tracked.item()}")
assert tracked.num_batches_tracked.item() == 0

# %%
# In eval mode the module switches to the running statistics: every sample is normalized
# with the same per-channel mean and variance, so the output is no longer per-instance
# normalized.
tracked.eval()
y_eval = tracked(x)
shape = (1, C, 1, 1)
centred = x - tracked.running_mean.view(shape)  # (B, C, H, W)
y_running = centred / torch.sqrt(tracked.running_var.view(shape) + tracked.eps)
y_blind = centred / torch.sqrt(tracked.running_var.view(shape))
gap = (y_eval - instance_norm(x, eps=tracked.eps)).abs().max().item()
print(f"eval: max|torch - per-instance norm|     = {gap:.2e}")
print(f"eval: max|torch - running-stats formula| = "
      f"{(y_eval - y_running).abs().max().item():.2e}, "
      f"without eps {(y_eval - y_blind).abs().max().item():.1e}")
assert gap > 1.0, "eval mode should not use instance statistics"
torch.testing.assert_close(y_eval, y_running)
assert (y_eval - y_blind).abs().max() > 1e-2  # eps is visible in eval mode too

# With the default track_running_stats=False there is nothing to switch to: eval ==
# train.
plain = torch.nn.InstanceNorm2d(C).to(device).eval()
err = (plain(x) - instance_norm(x)).abs().max().item()
print(f"default module, eval: max|torch - per-instance norm| = {err:.2e}")
torch.testing.assert_close(plain(x), instance_norm(x))

# %%
# Try it: drop eps. How far off is each module at variance 1e-4?
# --------------------------------------------------------------
# Call ``instance_norm`` with ``eps=0.0`` on the check's inputs, with the same affine.
for cls, x in inputs.items():
    norm = modules[cls]
    blind = instance_norm(x, norm.weight, norm.bias, eps=0.0)
    ref = norm(x)
    print(f"{cls.__name__}: without eps, max|ours - torch| = "
          f"{(blind - ref).abs().max().item():.1e}")
    assert (blind - ref).abs().max() > 1e-2  # eps is visible

# %%
# Try it: how much of the spread between samples does BatchNorm keep?
# -------------------------------------------------------------------
# In the figure of "The idea", measure the spread (std) of the per-sample std after
# BatchNorm, and compare it with InstanceNorm's.
bn_spread = outputs["after BatchNorm2d"].std(dim=[2, 3], unbiased=False).std().item()
print(f"spread of per-sample std: BatchNorm {bn_spread:.2f}, "
      f"InstanceNorm {inst_sd.std().item():.1e}")
assert bn_spread > 0.2
