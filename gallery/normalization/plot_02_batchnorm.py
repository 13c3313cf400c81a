"""
BatchNorm 1d, 2d, 3d: training, eval and the running statistics
===============================================================

In training mode BatchNorm normalizes each channel with the current batch's mean and
variance; in eval mode, with running averages kept during training. Both from scratch,
against ``nn.BatchNorm1d/2d/3d``, and the running-average update exactly.

**You will learn**

- which dims BatchNorm reduces (all but the channels) for 1d, 2d and 3d inputs
- to write training-mode and eval-mode BatchNorm in a few lines
- how PyTorch updates ``running_mean`` and ``running_var`` (with the unbiased variance)
- what ``momentum`` means in PyTorch, and why Keras' 0.99 is PyTorch's 0.01

**Prerequisites:** :doc:`/generated/normalization/plot_01_common_recipe`.

.. index:: ! BatchNorm
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
# One mean :math:`\mu_c` and variance :math:`\sigma_c^2` per channel, over all dims of
# ``(B, C, *)`` but dim 1 (:math:`n` values per channel in the batch). Training mode
# uses the batch's (biased) statistics and moves running averages toward them with
# ``momentum`` :math:`m`; eval mode uses those (drawn for a 2d input):
#
# .. math::
#
#    y_{b,c,\dots} = \frac{x_{b,c,\dots} - \mu_c}{\sqrt{\sigma_c^2 + \epsilon}}\,
#    \gamma_c + \beta_c, \qquad
#    \hat\mu_c \leftarrow (1 - m)\,\hat\mu_c + m\,\mu_c, \quad
#    \hat\sigma_c^2 \leftarrow (1 - m)\,\hat\sigma_c^2 + m\,\tfrac{n}{n-1}\sigma_c^2
from matplotlib.patches import Polygon

n_b, n_c, n_hw = 4, 6, 4  # drawn sizes: samples (depth), channels, positions H*W
d = 0.45  # oblique offset of one sample
shade = 2  # the channel shaded
fig, ax = plt.subplots(figsize=(6.4, 3.7))
for c in range(n_c):  # front face: sample 0, channels x positions
    for s in range(n_hw):
        ax.add_patch(Polygon([(c, s), (c + 1, s), (c + 1, s + 1), (c, s + 1)],
                             fc="C1" if c == shade else "white", ec="k"))
    for b in range(n_b):  # top face: channels x samples
        x0, y0 = c + b * d, n_hw + b * d
        ax.add_patch(Polygon([(x0, y0), (x0 + 1, y0), (x0 + 1 + d, y0 + d),
                              (x0 + d, y0 + d)],
                             fc="C1" if c == shade else "white", ec="k"))
for b in range(n_b):  # right face: samples x positions
    for s in range(n_hw):
        x0, y0 = n_c + b * d, s + b * d
        ax.add_patch(Polygon([(x0, y0), (x0 + d, y0 + d), (x0 + d, y0 + 1 + d),
                              (x0, y0 + 1)], fc="0.85", ec="k"))
ax.annotate("", (n_c + n_b * d + 0.3, n_b * d - 0.3), (n_c + 0.3, -0.3),
            arrowprops=dict(arrowstyle="->"))
ax.text(n_c + n_b * d + 0.4, n_b * d - 0.3, "batch B", ha="left", va="center")
ax.text(n_c / 2, -0.4, "channels C", ha="center", va="top")
ax.text(-0.3, n_hw / 2, "positions\nH, W", ha="right", va="center")
ax.set_xlim(-2, n_c + n_b * d + 2)
ax.set_ylim(-1.2, n_hw + n_b * d + 0.6)
ax.set_aspect("equal")
ax.axis("off")
ax.set_title("BatchNorm: one mean and variance per channel,\npooled over the batch "
             "and all positions (channel 2 shaded)")
plt.show()


# %%
# From scratch
# ------------
# Training mode reduces over every dim but dim 1, with the *biased* variance and
# ``eps`` inside the square root; the ``(C,)`` affine broadcasts over the other dims.
def batch_norm_train(x, weight, bias, eps=1e-5):
    """Training-mode BatchNorm of x (B, C, *), statistics per channel; x's shape."""
    dims = [d for d in range(x.dim()) if d != 1]
    mean = x.mean(dim=dims, keepdim=True)  # (1, C, 1, ...)
    var = x.var(dim=dims, unbiased=False, keepdim=True)  # (1, C, 1, ...)
    shape = [1, -1] + [1] * (x.dim() - 2)  # weight (C,) -> (1, C, 1, ...)
    y = (x - mean) / torch.sqrt(var + eps)
    return y * weight.reshape(shape) + bias.reshape(shape)


# %%
# Few values per channel, as in the notes, so the unbiased variance would miss by the
# printed percentage; input variance ten times ``eps``; random weights and biases.
C = 3
inputs = {
    "BatchNorm1d (B, C)": (torch.nn.BatchNorm1d(C), (8, C)),
    "BatchNorm1d (B, C, L)": (torch.nn.BatchNorm1d(C), (2, C, 4)),
    "BatchNorm2d (B, C, H, W)": (torch.nn.BatchNorm2d(C), (2, C, 2, 2)),
    "BatchNorm3d (B, C, T, H, W)": (torch.nn.BatchNorm3d(C), (2, C, 2, 2, 2)),
}
larger = {8: 14.3, 16: 6.7}  # % by which the unbiased variance exceeds the biased one
seen = {}  # name: (x, torch's output), for the exercise below
for name, (bn, shape) in inputs.items():
    x = 0.01 * torch.randn(shape, device=device)  # variance ~1e-4
    bn = bn.to(device)
    with torch.no_grad():
        bn.weight.copy_(torch.randn(C, device=device))
        bn.bias.copy_(torch.randn(C, device=device))
    assert bn.training  # a fresh module is in training mode
    ref = bn(x)
    seen[name] = (x, ref)
    ours = batch_norm_train(x, bn.weight, bn.bias, eps=bn.eps)
    n = x.numel() // C
    gap = (ours - ref).abs().max()
    print(f"{name:27s} n={n:2d} (+{100 * (n / (n - 1) - 1):4.1f} %): "
          f"|ours - torch| {gap:.1e}")
    torch.testing.assert_close(ours, ref)
    assert round(100 * (n / (n - 1) - 1), 1) == larger[n]


# %%
# Eval mode normalizes with the tracked statistics instead. The check trains on three
# batches of standard deviation 0.01 (so ``eps`` matters), then tests on a batch
# shifted by two standard deviations.
def batch_norm_2d_eval(input, running_mean, running_var, eps):
    """Eval-mode BatchNorm2d of input (B, C, H, W) with the tracked statistics (C,)."""
    mean = running_mean[..., None, None]  # (C, 1, 1)
    var = running_var[..., None, None]  # (C, 1, 1)
    return (input - mean) / torch.sqrt(var + eps)


# %%
B, H, W = 2, 2, 2
bn = torch.nn.BatchNorm2d(C, affine=False, momentum=None).to(device)
for _ in range(3):
    bn(0.01 * torch.randn(B, C, H, W, device=device))
bn.eval()
x = 0.02 + 0.01 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), shifted 2 std
tracked = (bn.running_mean, bn.running_var, bn.eps)  # (C,), (C,), eps: for later
y_eval = bn(x)  # eval mode
ours = batch_norm_2d_eval(x, bn.running_mean, bn.running_var, bn.eps)
print(f"eval mode: max|ours - torch| = {(ours - y_eval).abs().max():.1e}")
torch.testing.assert_close(ours, y_eval)

# %%
# The update rule, step by step
# -----------------------------
# ``momentum`` weighs the *new* batch statistic; the average takes the *unbiased*
# variance, though the normalization uses the biased one.
bn = torch.nn.BatchNorm2d(C).to(device)  # momentum 0.1, buffers 0 and 1 (Proof below)
# Five batches (B, C, H, W) of mean 1 and standard deviation 2.
batches = [1 + 2 * torch.randn(B, C, H, W, device=device) for _ in range(5)]
n = B * H * W  # values per channel in one batch
m = bn.momentum
mean_hand = torch.zeros(C, device=device)
var_unbiased_hand = torch.ones(C, device=device)
for xb in batches:
    bn(xb)
    batch_mean = xb.mean(dim=[0, 2, 3])  # (C,)
    mean_hand = (1 - m) * mean_hand + m * batch_mean
    var_unbiased = xb.var(dim=[0, 2, 3], unbiased=True)  # (C,)
    var_unbiased_hand = (1 - m) * var_unbiased_hand + m * var_unbiased
print(f"running_mean: max|hand - torch| = "
      f"{(mean_hand - bn.running_mean).abs().max():.2e}")
print(f"running_var, unbiased update: max|hand - torch| = "
      f"{(var_unbiased_hand - bn.running_var).abs().max():.2e}")
torch.testing.assert_close(mean_hand, bn.running_mean)
torch.testing.assert_close(var_unbiased_hand, bn.running_var)
running_var_5 = bn.running_var  # (C,): for the exercise below


# %%
# .. _errata-bn-eval-crash:
#
# Proof: the notes' eval-mode snippet crashes
# -------------------------------------------
# The notes compare eval mode with this function, copied verbatim:
def custom_batch_norm_2d_evalmode(input, running_mean, running_var, eps):
    mean = running_mean[..., None, None]
    var = var[..., None, None]  # noqa: F821 (the notes, verbatim)
    out = (input - mean) / torch.sqrt(var + eps)
    return out


# %%
# It never gets to compare anything: ``var`` is read on the right-hand side before it is
# assigned (it meant ``running_var``), and since ``var`` is assigned in the function
# Python treats it as a local name, so the call raises ``UnboundLocalError``. Called
# with the eval-mode module's buffers above:
try:
    custom_batch_norm_2d_evalmode(x, *tracked)
except UnboundLocalError as err:
    print(f"notes' eval-mode snippet raised UnboundLocalError:\n    {err}")
else:
    raise AssertionError("expected the notes' snippet to fail")

# %%
# The notes' affine snippet has a smaller slip: it is not self-contained. It starts from
# ``x = torch.randn(B, C, H, W)`` but defines ``B, C, H, W`` only in an earlier block,
# so run on its own (as a reader copying it would) it stops at the first line.
notes_affine_first_lines = (
    "import torch\ntorch.manual_seed(43)\nx = torch.randn(B, C, H, W)\n"
)
try:
    exec(notes_affine_first_lines, {})
except NameError as err:
    print(f"notes' affine snippet on its own: NameError: {err}")
else:
    raise AssertionError("expected the notes' affine snippet to need B, C, H, W")


# %%
# Proof: the buffers, rule by rule
# --------------------------------
# The variance fed to the average is exactly :math:`n / (n - 1)` times the biased one.
# One step from a fresh module isolates it: :math:`r_1 = 0.9 \cdot 1 + 0.1\, v`, so
# :math:`(r_1 - 0.9) / 0.1` is the variance PyTorch used, and its ratio to the biased
# batch variance is :math:`8 / 7` here. A fresh module starts from mean 0, var 1.
bn = torch.nn.BatchNorm2d(C).to(device)
assert bn.momentum == 0.1
assert torch.equal(bn.running_mean, torch.zeros(C, device=device))
assert torch.equal(bn.running_var, torch.ones(C, device=device))
xb = batches[0]
bn(xb)
var_used = (bn.running_var - (1 - m)) / m  # (C,)
ratio = var_used / xb.var(dim=[0, 2, 3], unbiased=False)
print(f"n = {n}: variance used / biased batch variance = "
      f"{', '.join(f'{r:.6f}' for r in ratio.tolist())}")
print(f"       n / (n - 1) = {n / (n - 1):.6f}")
torch.testing.assert_close(ratio, torch.full_like(ratio, n / (n - 1)))

# %%
# Eval mode shows the shift that the batch's statistics hide. The eval-mode check of
# "From scratch" trained with ``momentum=None``: its buffers are the plain averages of
# the three batches' statistics (proven below), so ``running_var`` is ``~1e-4`` and
# ``eps`` matters in eval mode too. Normalizing with what it recorded in training, eval
# mode shows the test batch's shift (outputs around 2); the batch's own statistics
# would hide it (outputs around 0).
print("running_mean", ", ".join(f"{v:.1e}" for v in tracked[0].tolist()))
print("running_var ", ", ".join(f"{v:.1e}" for v in tracked[1].tolist()))
ones, zeros = torch.ones(C, device=device), torch.zeros(C, device=device)
train_like = batch_norm_train(x, ones, zeros)
print(f"mean output: eval mode {y_eval.mean():.2f}, with the batch's statistics "
      f"{train_like.mean():.2f}")
assert y_eval.mean() > 1.0, "eval mode should show the shift of the test batch"


# %%
# ``momentum=None`` is a plain average: the :math:`k`-th training batch is weighted
# :math:`1 / k` (PyTorch uses ``1 / num_batches_tracked``). The first factor is
# :math:`1 / 1`, so the initial 0 and 1 are thrown away, and after :math:`k` batches the
# buffers are the plain averages of the k batch means and of the k unbiased batch
# variances.
bn = torch.nn.BatchNorm2d(C, momentum=None).to(device)
for xb in batches:
    bn(xb)
mean_avg = torch.stack([xb.mean(dim=[0, 2, 3]) for xb in batches]).mean(dim=0)  # (C,)
var_avg = torch.stack([xb.var(dim=[0, 2, 3], unbiased=True) for xb in batches])
var_avg = var_avg.mean(dim=0)  # (C,)
print(f"momentum=None, {len(batches)} batches:")
print(f"  max|average - running_mean| = {(mean_avg - bn.running_mean).abs().max():.2e}")
print(f"  max|average - running_var|  = {(var_avg - bn.running_var).abs().max():.2e}")
torch.testing.assert_close(bn.running_mean, mean_avg)
torch.testing.assert_close(bn.running_var, var_avg)


# %%
# ``num_batches_tracked`` counts training-mode forward calls; eval-mode calls leave it
# (and the running statistics) alone.
bn = torch.nn.BatchNorm2d(C).to(device)
for xb in batches:
    bn(xb)
print(f"after {len(batches)} training calls: "
      f"num_batches_tracked = {bn.num_batches_tracked.item()}")
assert bn.num_batches_tracked.item() == len(batches)
saved = (bn.running_mean.clone(), bn.running_var.clone())
bn.eval()
for xb in batches:
    bn(xb)
print(f"after {len(batches)} more eval calls:  "
      f"num_batches_tracked = {bn.num_batches_tracked.item()}")
assert bn.num_batches_tracked.item() == len(batches)
assert torch.equal(bn.running_mean, saved[0]) and torch.equal(bn.running_var, saved[1])

# %%
# With ``track_running_stats=False`` there is nothing to track: the three buffers are
# ``None``, and eval mode has no choice but to normalize with the batch's own
# statistics, exactly like training mode.
bn = torch.nn.BatchNorm2d(C, track_running_stats=False).to(device).eval()
print(f"track_running_stats=False: running_mean={bn.running_mean}, "
      f"running_var={bn.running_var}, num_batches_tracked={bn.num_batches_tracked}")
assert bn.running_mean is None and bn.running_var is None
assert bn.num_batches_tracked is None
ref = bn(x)  # eval mode
ours = batch_norm_train(x, bn.weight, bn.bias, eps=bn.eps)
print(f"eval mode without running stats: max|batch statistics - torch| = "
      f"{(ours - ref).abs().max():.2e}")
torch.testing.assert_close(ours, ref)


# %%
# .. _errata-bn-keras-momentum:
#
# Proof: Keras' momentum is one minus PyTorch's, and reproducing a Keras model
# ----------------------------------------------------------------------------
# The blog notes say momentum "is generally chosen to be close to 1". In their formula
# momentum weighs the *old* value: that is the Keras convention (its
# ``BatchNormalization`` defaults to ``momentum=0.99``). PyTorch's momentum weighs the
# *new* batch statistic and defaults to 0.1. So the notes' 0.99 is PyTorch's
# ``momentum=1 - 0.99 = 0.01``: fed with the same batch statistics (the unbiased
# variance for the variance), the notes' update reproduces that module's buffers step
# for step.
momentum_keras = 0.99
bn_torch = torch.nn.BatchNorm2d(C, momentum=1 - momentum_keras).to(device)
# 0.99 plugged in as is:
bn_naive = torch.nn.BatchNorm2d(C, momentum=momentum_keras).to(device)
moving_mean = torch.zeros(C, device=device)
moving_var = torch.ones(C, device=device)
for _ in range(100):
    xb = 3 + 2 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), mean 3, var 4
    bn_torch(xb)
    bn_naive(xb)
    batch_mean, batch_var = xb.mean(dim=[0, 2, 3]), xb.var(dim=[0, 2, 3], unbiased=True)
    moving_mean = moving_mean * momentum_keras + batch_mean * (1 - momentum_keras)
    moving_var = moving_var * momentum_keras + batch_var * (1 - momentum_keras)

print(f"notes' update (0.99) vs BatchNorm2d(momentum=0.01): max|diff| "
      f"{(moving_mean - bn_torch.running_mean).abs().max():.1e} (mean),")
print(f"{'':51s}max|diff| {(moving_var - bn_torch.running_var).abs().max():.1e} (var)")
torch.testing.assert_close(moving_mean, bn_torch.running_mean)
torch.testing.assert_close(moving_var, bn_torch.running_var)

# %%
# The blog notes write the moving average twice, the second as "more efficient":
# ``moving = moving * momentum + batch * (1 - momentum)`` and
# ``moving -= (moving - batch) * (1 - momentum)``. Expanding the second gives the first,
# so they agree to rounding over any sequence of steps.
momentum = 0.99
form_1 = torch.zeros(C, device=device)
form_2 = torch.zeros(C, device=device)
for _ in range(200):
    batch_mean = 3 + torch.randn(C, device=device)
    form_1 = form_1 * momentum + batch_mean * (1 - momentum)
    form_2 -= (form_2 - batch_mean) * (1 - momentum)
print(f"200 steps: max|form 1 - form 2| = {(form_1 - form_2).abs().max():.2e}")
torch.testing.assert_close(form_1, form_2)


# %%
# What reproducing a Keras model takes: Keras 3's ``BatchNormalization``
# (``keras/src/layers/normalization/batch_normalization.py``) defaults to
# ``momentum=0.99`` and ``epsilon=1e-3``, and it updates ``moving_variance`` with the
# variance returned by ``ops.moments``, which divides by n: the *biased* batch variance,
# where PyTorch feeds the unbiased one. Its update, written out from that source (the
# page needs no Keras):
def keras_update(moving_mean, moving_var, xb, momentum=0.99):
    """One training step of Keras' moving statistics for a batch xb (B, C, H, W)."""
    mean = xb.mean(dim=[0, 2, 3])  # (C,)
    var = (xb - mean[:, None, None]).pow(2).mean(dim=[0, 2, 3])  # (C,), divides by n
    return (moving_mean * momentum + mean * (1 - momentum),
            moving_var * momentum + var * (1 - momentum))


# %%
# Train a PyTorch module with ``momentum=0.01`` and the Keras update side by side, in
# float64 so that 100 steps of rounding do not blur the comparison. Both start from mean
# 0 and variance 1. The means agree. The variances differ by exactly :math:`n / (n - 1)`
# on the part learned from the data: after :math:`t` steps both buffers still hold
# :math:`0.99^t` of their initial 1, and the rest is :math:`n / (n - 1)` times larger in
# PyTorch, so as the start is forgotten PyTorch's running variance tends to
# :math:`8 / 7` times Keras' (:math:`n = 8` values per channel here).
f64 = torch.float64
steps = 100
bn_k = torch.nn.BatchNorm2d(C, momentum=0.01, eps=1e-3, device=device, dtype=f64)
keras_mean = torch.zeros(C, device=device, dtype=f64)
keras_var = torch.ones(C, device=device, dtype=f64)
for _ in range(steps):
    xb = 3 + 2 * torch.randn(B, C, H, W, device=device, dtype=f64)  # (B, C, H, W)
    bn_k(xb)
    keras_mean, keras_var = keras_update(keras_mean, keras_var, xb)
left = 0.99**steps  # what remains of the initial variance 1 in both
ratio = (bn_k.running_var - left) / (keras_var - left)  # (C,)
gap_mean = (keras_mean - bn_k.running_mean).abs().max()
print(f"running_mean: max|Keras - torch| = {gap_mean:.1e}")
print(f"running_var: torch {[round(v, 3) for v in bn_k.running_var.tolist()]}, "
      f"Keras {[round(v, 3) for v in keras_var.tolist()]}")
print(f"learned parts, torch / Keras = {[round(r, 6) for r in ratio.tolist()]}, "
      f"n / (n - 1) = {n / (n - 1):.6f}")
torch.testing.assert_close(bn_k.running_mean, keras_mean)  # float64 defaults
torch.testing.assert_close(ratio, torch.full_like(ratio, n / (n - 1)))
assert (bn_k.running_var / keras_var - 1).min() > 0.05  # far from equal

# %%
# A trained Keras model is reproduced by copying its buffers (and gamma, beta) into a
# PyTorch module built with ``eps=1e-3``: in inference Keras computes
# ``gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta``. The module is
# built with PyTorch's default ``eps=1e-5`` too, for the exercise below.
gamma = torch.randn(C, device=device, dtype=f64)
beta = torch.randn(C, device=device, dtype=f64)
x_test = 3 + 2 * torch.randn(B, C, H, W, device=device, dtype=f64)  # (B, C, H, W)
per_c = (C, 1, 1)
y_keras = (gamma.view(per_c) * (x_test - keras_mean.view(per_c))
           / torch.sqrt(keras_var.view(per_c) + 1e-3) + beta.view(per_c))
outputs = {}
for eps in (1e-3, 1e-5):
    bn_eval = torch.nn.BatchNorm2d(C, eps=eps, device=device, dtype=f64).eval()
    with torch.no_grad():
        bn_eval.weight.copy_(gamma)
        bn_eval.bias.copy_(beta)
        bn_eval.running_mean.copy_(keras_mean)
        bn_eval.running_var.copy_(keras_var)
    outputs[eps] = bn_eval(x_test)
print(f"BatchNorm2d(eps=0.001) with Keras' buffers: max|torch - Keras| = "
      f"{(outputs[1e-3] - y_keras).abs().max():.1e}")
torch.testing.assert_close(outputs[1e-3], y_keras)  # float64 defaults



# %%
# Try it: drop eps, or use 1e-5 on Keras' buffers. How far off?
# -------------------------------------------------------------
# Run ``batch_norm_train`` and ``batch_norm_2d_eval`` with ``eps=0.0``; then a module
# with ``eps=1e-5`` on the buffers of a Keras model (whose ``epsilon`` is ``1e-3``).
for name, (x_in, ref) in seen.items():
    bn = inputs[name][0]
    blind = batch_norm_train(x_in, bn.weight, bn.bias, eps=0.0)
    gap_blind = (blind - ref).abs().max()
    print(f"{name:27s} training mode, no eps: |ours - torch| {gap_blind:.1e}")
    assert gap_blind > 1e-2  # eps is visible at this variance
blind = batch_norm_2d_eval(x, tracked[0], tracked[1], 0.0)
print(f"eval mode, no eps: max|ours - torch| = {(blind - y_eval).abs().max():.1e}")
assert (blind - y_eval).abs().max() > 1e-2  # eps is visible here

# %%
# Keras' buffers in a module with PyTorch's default ``eps=1e-5``:
print(f"BatchNorm2d(eps=1e-05) with Keras' buffers: max|torch - Keras| = "
      f"{(outputs[1e-5] - y_keras).abs().max():.1e}")
assert (outputs[1e-5] - y_keras).abs().max() > 1e-5  # 100 times the 1e-7 tolerance

# %%
# About :math:`(10^{-3} - 10^{-5}) / (2 \sigma^2)` relative (``moving_variance``
# :math:`\sigma^2`): small, but far above float64's tolerance.

# %%
# Try it: a biased variance, or Keras' 0.99 as momentum. Still a match?
# ---------------------------------------------------------------------
# Redo "The update rule" with ``unbiased=False``; then compare ``bn_naive``
# (``momentum=0.99``) with the notes' update over the same 100 batches.
var_biased_hand = torch.ones(C, device=device)
for xb in batches:
    var_biased = xb.var(dim=[0, 2, 3], unbiased=False)  # (C,)
    var_biased_hand = (1 - m) * var_biased_hand + m * var_biased
biased_gap = (var_biased_hand - running_var_5).abs().max().item()
print(f"running_var, biased update:   max|hand - torch| = {biased_gap:.2e}")
assert biased_gap > 0.01, "a biased-variance update should not match running_var"

# %%
# Keras' momentum 0.99 plugged straight into PyTorch:
naive_gap = (moving_mean - bn_naive.running_mean).abs().max().item()
print(f"notes' update (0.99) vs BatchNorm2d(momentum=0.99): max|diff| {naive_gap:.2f}")
print("running_mean after 100 steps:")
print("  momentum=0.01:", ", ".join(f"{v:.3f}" for v in bn_torch.running_mean.tolist()))
print("  momentum=0.99:", ", ".join(f"{v:.3f}" for v in bn_naive.running_mean.tolist()))
assert naive_gap > 0.5, "momentum=0.99 in PyTorch should not match the notes' 0.99"

# %%
# The buffers follow the last batch almost entirely: PyTorch's momentum weighs the new
# batch.
