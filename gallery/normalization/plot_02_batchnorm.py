"""
BatchNorm 1d, 2d, 3d: training, eval and the running statistics
===============================================================

In training mode BatchNorm normalizes each channel with the mean and the biased variance of the
current batch; in eval mode it uses two running averages instead. This page proves the training
forward pass for 1d, 2d and 3d inputs with affine parameters, fixes the notes' eval-mode snippet
(it crashes), and pins down the running-statistics update exactly: PyTorch's momentum convention,
the unbiased variance it feeds the average, ``momentum=None``, ``num_batches_tracked``,
``track_running_stats=False``, and how the notes' Keras-style momentum of 0.99 maps onto PyTorch.
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
# Training mode from scratch, for any number of dims
# --------------------------------------------------
# BatchNorm reduces over every dim except dim 1 (channels): batch, length, height, width, depth.
# It normalizes with the *biased* variance (divide by n) and ``eps`` inside the square root, then
# scales and shifts each channel. The affine parameters have shape ``(C,)``, so they are
# broadcast as ``weight[None, :, None, None]`` for a 4-d input, and so on.
def batch_norm_train(x, weight, bias, eps=1e-5):
    """Training-mode BatchNorm of x (B, C, *), statistics per channel; same shape as x."""
    dims = [d for d in range(x.dim()) if d != 1]
    mean = x.mean(dim=dims, keepdim=True)  # (1, C, 1, ...)
    var = x.var(dim=dims, unbiased=False, keepdim=True)  # (1, C, 1, ...)
    shape = [1, -1] + [1] * (x.dim() - 2)  # weight (C,) -> (1, C, 1, ...)
    y = (x - mean) / torch.sqrt(var + eps)
    return y * weight.reshape(shape) + bias.reshape(shape)


# %%
# Only a handful of values per channel (n = 8 or 16), as in the notes: with so few samples the
# biased and unbiased variances differ by n / (n - 1), at least 7 %, so the check below would
# catch the wrong one. Weights and biases are set to random values so the affine part is tested.
C = 3
inputs = {
    "BatchNorm1d (B, C)": (torch.nn.BatchNorm1d(C), torch.randn(8, C, device=device)),
    "BatchNorm1d (B, C, L)": (torch.nn.BatchNorm1d(C), torch.randn(2, C, 4, device=device)),
    "BatchNorm2d (B, C, H, W)": (torch.nn.BatchNorm2d(C), torch.randn(2, C, 2, 2, device=device)),
    "BatchNorm3d (B, C, T, H, W)": (
        torch.nn.BatchNorm3d(C),
        torch.randn(2, C, 2, 2, 2, device=device),
    ),
}
for name, (bn, x) in inputs.items():
    bn = bn.to(device)
    with torch.no_grad():
        bn.weight.copy_(torch.randn(C, device=device))
        bn.bias.copy_(torch.randn(C, device=device))
    assert bn.training  # a fresh module is in training mode
    ref = bn(x)
    ours = batch_norm_train(x, bn.weight, bn.bias, eps=bn.eps)
    print(f"{name:28s} n={x.numel() // C:2d}  max|ours - torch| = {(ours - ref).abs().max():.2e}")
    torch.testing.assert_close(ours, ref)


# %%
# Eval mode: the notes' snippet crashes
# -------------------------------------
# The notes compare eval mode with this function, copied verbatim:


def custom_batch_norm_2d_evalmode(input, running_mean, running_var, eps):
    mean = running_mean[..., None, None]
    var = var[..., None, None]
    out = (input - mean) / torch.sqrt(var + eps)
    return out


# %%
# It never gets to compare anything: ``var`` is read on the right-hand side before it is assigned
# (it meant ``running_var``), and since ``var`` is assigned in the function Python treats it as a
# local name, so the call raises ``UnboundLocalError``.
B, H, W = 2, 2, 2
bn = torch.nn.BatchNorm2d(C, affine=False).to(device)
for _ in range(3):  # a few training batches (mean 1, std 2) move the running statistics
    bn(1 + 2 * torch.randn(B, C, H, W, device=device))
bn.eval()
x = 1 + 2 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W)
try:
    custom_batch_norm_2d_evalmode(x, bn.running_mean, bn.running_var, bn.eps)
except UnboundLocalError as err:
    print(f"notes' eval-mode snippet: UnboundLocalError: {err}")
else:
    raise AssertionError("expected the notes' snippet to fail")


# %%
# The fix reads ``running_var``. Eval mode then matches ``bn.eval()``, and differs clearly from
# normalizing with the batch's own statistics: after three batches the running averages are
# still far from the data's mean and variance.
def batch_norm_2d_eval(input, running_mean, running_var, eps):
    """Eval-mode BatchNorm2d of input (B, C, H, W) with the tracked statistics (C,)."""
    mean = running_mean[..., None, None]  # (C, 1, 1)
    var = running_var[..., None, None]  # (C, 1, 1)
    return (input - mean) / torch.sqrt(var + eps)


ref = bn(x)  # eval mode
ours = batch_norm_2d_eval(x, bn.running_mean, bn.running_var, bn.eps)
print(f"eval mode: max|ours - torch| = {(ours - ref).abs().max():.2e}")
torch.testing.assert_close(ours, ref)
train_like = batch_norm_train(x, torch.ones(C, device=device), torch.zeros(C, device=device))
gap = (ref - train_like).abs().max().item()
print(f"eval output vs batch-statistics output: max gap = {gap:.2f}")
assert gap > 0.1, "eval mode should use the running statistics, not the batch's"

# %%
# The notes' affine snippet has a smaller slip: it is not self-contained. It starts from
# ``x = torch.randn(B, C, H, W)`` but defines ``B, C, H, W`` only in an earlier block, so run on
# its own (as a reader copying it would) it stops at the first line.
notes_affine_first_lines = "import torch\ntorch.manual_seed(43)\nx = torch.randn(B, C, H, W)\n"
try:
    exec(notes_affine_first_lines, {})
except NameError as err:
    print(f"notes' affine snippet on its own: NameError: {err}")
else:
    raise AssertionError("expected the notes' affine snippet to need B, C, H, W from elsewhere")


# %%
# The update rule, step by step
# -----------------------------
# In training mode each forward call also updates the buffers. PyTorch's ``momentum`` (default
# 0.1) weighs the *new* batch statistic:
# ``running = (1 - momentum) * running + momentum * batch_stat``, starting from mean 0, var 1.
# The variance fed to the average is the *unbiased* one (divide by n - 1), although the
# normalization itself uses the biased one.
bn = torch.nn.BatchNorm2d(C).to(device)
assert bn.momentum == 0.1
assert torch.equal(bn.running_mean, torch.zeros(C, device=device))
assert torch.equal(bn.running_var, torch.ones(C, device=device))

batches = [1 + 2 * torch.randn(B, C, H, W, device=device) for _ in range(5)]  # (B, C, H, W)
n = B * H * W  # values per channel in one batch
m = bn.momentum
mean_hand = torch.zeros(C, device=device)
var_unbiased_hand = torch.ones(C, device=device)
var_biased_hand = torch.ones(C, device=device)
for xb in batches:
    bn(xb)
    batch_mean = xb.mean(dim=[0, 2, 3])  # (C,)
    mean_hand = (1 - m) * mean_hand + m * batch_mean
    var_unbiased_hand = (1 - m) * var_unbiased_hand + m * xb.var(dim=[0, 2, 3], unbiased=True)
    var_biased_hand = (1 - m) * var_biased_hand + m * xb.var(dim=[0, 2, 3], unbiased=False)

print(f"running_mean: max|hand - torch| = {(mean_hand - bn.running_mean).abs().max():.2e}")
print(f"running_var, unbiased update: max|hand - torch| = "
      f"{(var_unbiased_hand - bn.running_var).abs().max():.2e}")
torch.testing.assert_close(mean_hand, bn.running_mean)
torch.testing.assert_close(var_unbiased_hand, bn.running_var)
biased_gap = (var_biased_hand - bn.running_var).abs().max().item()
print(f"running_var, biased update:   max|hand - torch| = {biased_gap:.2e}")
assert biased_gap > 0.01, "a biased-variance update should not match running_var"

# %%
# The factor between the two is exactly ``n / (n - 1)``. One step from a fresh module isolates
# it: ``running_var = 0.9 * 1 + 0.1 * v``, so ``(running_var - 0.9) / 0.1`` is the variance
# PyTorch used, and its ratio to the biased batch variance is ``8 / 7`` here.
bn = torch.nn.BatchNorm2d(C).to(device)
xb = batches[0]
bn(xb)
var_used = (bn.running_var - (1 - m)) / m  # (C,)
ratio = var_used / xb.var(dim=[0, 2, 3], unbiased=False)
print(f"n = {n}: variance used / biased batch variance = "
      f"{', '.join(f'{r:.6f}' for r in ratio.tolist())}; n / (n - 1) = {n / (n - 1):.6f}")
torch.testing.assert_close(ratio, torch.full_like(ratio, n / (n - 1)))


# %%
# ``momentum=None``: a plain average
# ----------------------------------
# With ``momentum=None`` the k-th training batch is weighted ``1 / k`` (PyTorch uses
# ``1 / num_batches_tracked``). The first factor is ``1 / 1``, so the initial 0 and 1 are thrown
# away, and after k batches the buffers are the plain averages of the k batch means and of the k
# unbiased batch variances.
bn = torch.nn.BatchNorm2d(C, momentum=None).to(device)
for xb in batches:
    bn(xb)
mean_avg = torch.stack([xb.mean(dim=[0, 2, 3]) for xb in batches]).mean(dim=0)  # (C,)
var_avg = torch.stack([xb.var(dim=[0, 2, 3], unbiased=True) for xb in batches]).mean(dim=0)
print(f"momentum=None, {len(batches)} batches: max|average - running_mean| = "
      f"{(mean_avg - bn.running_mean).abs().max():.2e}, "
      f"max|average - running_var| = {(var_avg - bn.running_var).abs().max():.2e}")
torch.testing.assert_close(bn.running_mean, mean_avg)
torch.testing.assert_close(bn.running_var, var_avg)


# %%
# ``num_batches_tracked`` and ``track_running_stats=False``
# ---------------------------------------------------------
# ``num_batches_tracked`` counts training-mode forward calls; eval-mode calls leave it (and the
# running statistics) alone.
bn = torch.nn.BatchNorm2d(C).to(device)
for xb in batches:
    bn(xb)
print(f"after {len(batches)} training calls: num_batches_tracked = {bn.num_batches_tracked}")
assert bn.num_batches_tracked.item() == len(batches)
saved = (bn.running_mean.clone(), bn.running_var.clone())
bn.eval()
for xb in batches:
    bn(xb)
print(f"after {len(batches)} more eval calls:  num_batches_tracked = {bn.num_batches_tracked}")
assert bn.num_batches_tracked.item() == len(batches)
assert torch.equal(bn.running_mean, saved[0]) and torch.equal(bn.running_var, saved[1])

# %%
# With ``track_running_stats=False`` there is nothing to track: the three buffers are ``None``,
# and eval mode has no choice but to normalize with the batch's own statistics, exactly like
# training mode.
bn = torch.nn.BatchNorm2d(C, track_running_stats=False).to(device).eval()
print(f"track_running_stats=False: running_mean={bn.running_mean}, running_var={bn.running_var}, "
      f"num_batches_tracked={bn.num_batches_tracked}")
assert bn.running_mean is None and bn.running_var is None and bn.num_batches_tracked is None
ref = bn(x)  # eval mode
ours = batch_norm_train(x, bn.weight, bn.bias, eps=bn.eps)
print(f"eval mode without running stats: max|batch statistics - torch| = "
      f"{(ours - ref).abs().max():.2e}")
torch.testing.assert_close(ours, ref)


# %%
# The notes' two EMA forms are one update
# ---------------------------------------
# The blog notes write the moving average twice, the second as "more efficient":
# ``moving = moving * momentum + batch * (1 - momentum)`` and
# ``moving -= (moving - batch) * (1 - momentum)``. Expanding the second gives the first, so they
# agree to rounding over any sequence of steps.
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
# Keras' momentum is one minus PyTorch's
# --------------------------------------
# The blog notes say momentum "is generally chosen to be close to 1". In their formula momentum
# weighs the *old* value: that is the Keras convention (its ``BatchNormalization`` defaults to
# ``momentum=0.99``). PyTorch's momentum weighs the *new* batch statistic and defaults to 0.1.
# So the notes' 0.99 is PyTorch's ``momentum=1 - 0.99 = 0.01``: fed with the same batch
# statistics (the unbiased variance for the variance), the notes' update reproduces that
# module's buffers step for step.
momentum_keras = 0.99
bn_torch = torch.nn.BatchNorm2d(C, momentum=1 - momentum_keras).to(device)
bn_naive = torch.nn.BatchNorm2d(C, momentum=momentum_keras).to(device)  # 0.99 plugged in as is
moving_mean = torch.zeros(C, device=device)
moving_var = torch.ones(C, device=device)
for _ in range(100):
    xb = 3 + 2 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W), mean 3, var 4
    bn_torch(xb)
    bn_naive(xb)
    batch_mean, batch_var = xb.mean(dim=[0, 2, 3]), xb.var(dim=[0, 2, 3], unbiased=True)
    moving_mean = moving_mean * momentum_keras + batch_mean * (1 - momentum_keras)
    moving_var = moving_var * momentum_keras + batch_var * (1 - momentum_keras)

print(f"notes' update (0.99) vs BatchNorm2d(momentum=0.01): max|diff| = "
      f"{(moving_mean - bn_torch.running_mean).abs().max():.2e} (mean), "
      f"{(moving_var - bn_torch.running_var).abs().max():.2e} (var)")
torch.testing.assert_close(moving_mean, bn_torch.running_mean)
torch.testing.assert_close(moving_var, bn_torch.running_var)

# %%
# Plugging 0.99 straight into PyTorch does the opposite: the buffers follow the last batch
# almost entirely, and after 100 steps they are nowhere near the notes' averages. To reproduce a
# Keras model's statistics, also set ``eps=1e-3`` (Keras' default) instead of PyTorch's ``1e-5``.
naive_gap = (moving_mean - bn_naive.running_mean).abs().max().item()
print(f"notes' update (0.99) vs BatchNorm2d(momentum=0.99): max|diff| = {naive_gap:.2f} (mean)")
print(f"running_mean after 100 steps: momentum=0.01 {bn_torch.running_mean.tolist()}")
print(f"                              momentum=0.99 {bn_naive.running_mean.tolist()}")
assert naive_gap > 0.5, "momentum=0.99 in PyTorch should not match the notes' 0.99"
