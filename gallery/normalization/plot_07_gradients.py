"""
Gradients: the from-scratch layers backpropagate like PyTorch's
===============================================================

A layer is a drop-in replacement only if its gradients match too. This page
backpropagates one upstream gradient through PyTorch's five normalization modules and
the from-scratch formulas, in float64, and derives BatchNorm's input gradient in closed
form: in train mode it sums to zero over each channel, in eval mode it does not.

**You will learn**

- how to compare input, weight and bias gradients with ``out.backward(g)``
- BatchNorm's input gradient in closed form, through the batch mean and variance
- why in train mode that gradient sums to zero over each channel
- how ``torch.autograd.gradcheck`` checks a Jacobian by finite differences

**Prerequisites:** :doc:`/generated/normalization/plot_02_batchnorm`,
:doc:`/generated/normalization/plot_03_instancenorm`,
:doc:`/generated/normalization/plot_04_layernorm`,
:doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` (the five layers).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
# Everything is float64, so float64's default tolerances (1e-7) apply.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")
f64 = torch.float64

# %%
# The blocks this page shares with others, copied verbatim from the pages that teach
# them: ``normalize`` (:doc:`/generated/normalization/plot_01_common_recipe`),
# ``batch_norm_train`` (:doc:`/generated/normalization/plot_02_batchnorm`),
# ``instance_norm`` (:doc:`/generated/normalization/plot_03_instancenorm`),
# ``layer_norm`` (:doc:`/generated/normalization/plot_04_layernorm`), ``group_norm`` and
# ``rms_norm`` (:doc:`/generated/normalization/plot_05_groupnorm_rmsnorm`).


# Copied from normalization/plot_01_common_recipe.py: normalize
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


# Copied from normalization/plot_02_batchnorm.py: batch_norm_train
def batch_norm_train(x, weight, bias, eps=1e-5):
    """Training-mode BatchNorm of x (B, C, *), statistics per channel; x's shape."""
    dims = [d for d in range(x.dim()) if d != 1]
    mean = x.mean(dim=dims, keepdim=True)  # (1, C, 1, ...)
    var = x.var(dim=dims, unbiased=False, keepdim=True)  # (1, C, 1, ...)
    shape = [1, -1] + [1] * (x.dim() - 2)  # weight (C,) -> (1, C, 1, ...)
    y = (x - mean) / torch.sqrt(var + eps)
    return y * weight.reshape(shape) + bias.reshape(shape)


# Copied from normalization/plot_03_instancenorm.py: instance_norm
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


# Copied from normalization/plot_04_layernorm.py: layer_norm
def layer_norm(x, weight, bias, eps=1e-5):
    """Normalize over x's last weight.dim() dims; weight, bias: that trailing shape."""
    dims = list(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


# Copied from normalization/plot_05_groupnorm_rmsnorm.py: group_norm
def group_norm(x, Ng, weight, bias, eps=1e-5):
    """GroupNorm of x (B, C, H, W) with Ng groups and per-channel weight, bias (C,)."""
    B, C, H, W = x.shape
    x_groups = x.reshape(B, Ng, C // Ng, H, W)  # (B, Ng, C/Ng, H, W)
    y = normalize(x_groups, [2, 3, 4], eps).reshape(B, C, H, W)  # (B, C, H, W)
    return y * weight[:, None, None] + bias[:, None, None]


# Copied from normalization/plot_05_groupnorm_rmsnorm.py: rms_norm
def rms_norm(x, weight, eps):
    """x / sqrt(mean(x**2) over the last dim + eps) * weight; x (..., D), weight (D,)"""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


# %%
# The idea
# --------
# In train mode BatchNorm's output depends on the input through the batch statistics
# too. Differentiating through the per-channel mean and variance by hand gives, with
# sums over the ``N = B * H * W`` entries of a channel and :math:`\hat x` the normalized
# input:
#
# .. math::
#
#    \frac{\partial \mathcal{L}}{\partial x}
#    = \frac{\gamma}{N \sqrt{\sigma^2 + \epsilon}}
#    \Big( N\, \delta - \textstyle\sum \delta - \hat x \sum \delta\, \hat x \Big),
#    \qquad \delta = \frac{\partial \mathcal{L}}{\partial y}
#
# Summed over the channel it leaves :math:`-\sum \hat x \cdot \sum \delta \hat x = 0`:
# adding a constant to a channel does not change the output (the batch mean absorbs
# it), so the gradient has no component along that direction. In eval mode the
# statistics are constants, :math:`\partial \mathcal{L} / \partial x = \gamma\,
# \delta / \sqrt{\sigma^2_{\mathrm{running}} + \epsilon}`, and nothing cancels.
import matplotlib.pyplot as plt

demo_bn = torch.nn.BatchNorm2d(6).to(device=device, dtype=f64)
demo_x = torch.randn(4, 6, 5, 4, device=device, dtype=f64,
                     requires_grad=True)  # (B, C, H, W)
demo_g = torch.randn(4, 6, 5, 4, device=device, dtype=f64)  # dL/dy
demo_sums = {}
for mode in ("train", "eval"):
    demo_bn.train(mode == "train")
    (demo_dx,) = torch.autograd.grad(demo_bn(demo_x), demo_x, demo_g)
    demo_sums[mode] = demo_dx.sum(dim=[0, 2, 3]).abs()  # (C,)
# Every train-mode sum is float64 rounding, far below every eval-mode sum.
print(f"train: max |sum| {demo_sums['train'].max():.1e}; "
      f"eval: min |sum| {demo_sums['eval'].min():.1e}")
assert demo_sums["train"].max() < 1e-10 < 1e-2 < demo_sums["eval"].min()

fig, ax = plt.subplots()
channels = torch.arange(6)
ax.bar(channels - 0.2, demo_sums["train"].cpu(), width=0.4, label="train mode")
ax.bar(channels + 0.2, demo_sums["eval"].cpu(), width=0.4, label="eval mode")
ax.set_yscale("log")
ax.set_xlabel("channel c")
ax.set_ylabel("|sum of dL/dx over (B, H, W)|")
ax.set_title("BatchNorm's input gradient sums to zero per channel in train mode\n"
             "(float64 rounding), not in eval mode")
ax.legend()
plt.show()

# %%
# The from-scratch layers
# -----------------------
# The five layers are copied in Setup. Weights of shape ``(C,)`` act per channel,
# LayerNorm's per element ``(C, H, W)``; ``rms_norm`` normalizes over the last dim, so
# RMSNorm over ``(C, H, W)`` flattens them first (``rms_norm_chw``).
import torch


def grads(fn, x, params, g):
    """d/dx and d/dparams of sum(fn(x, *params) * g); x, g (B, C, H, W)."""
    x_ = x.clone().requires_grad_(True)
    fn(x_, *params).backward(g)
    return [x_.grad] + [p.grad for p in params]


def group_norm_3(x, weight, bias, eps=1e-5):
    """GroupNorm with 3 groups, in the signature of the other four layers."""
    return group_norm(x, 3, weight, bias, eps)


# RMSNorm's eps=None is float64's machine epsilon for float64 input (the RMSNorm page).
def rms_norm_chw(x, weight, eps=torch.finfo(torch.float64).eps):
    """RMSNorm of x (B, C, H, W) over (C, H, W); weight (C, H, W)."""
    return rms_norm(x.flatten(1), weight.flatten(), eps).view_as(x)


# %%
# Same input, same weights, same upstream gradient
# ------------------------------------------------
# Random weights and biases, one upstream gradient ``g``, one input ``z`` scaled so
# that ``eps`` matters (variance ``1e-4``; mean square ``1e-16`` for RMSNorm, whose
# ``eps`` is float64's). ``out.backward(g)`` fills ``.grad``.
B, C, H, W = 4, 6, 5, 4  # H != W, so a reshape that swapped them would show
z = torch.randn(B, C, H, W, device=device, dtype=f64)  # (B, C, H, W), unit variance
g = torch.randn(B, C, H, W, device=device, dtype=f64)  # upstream gradient dL/dy
Ng = 3  # groups for GroupNorm (group_norm_3)

layers = {  # name: (module, from-scratch function, input scale)
    "BatchNorm2d": (torch.nn.BatchNorm2d(C), batch_norm_train, 1e-2),
    "InstanceNorm2d": (torch.nn.InstanceNorm2d(C, affine=True), instance_norm, 1e-2),
    "LayerNorm": (torch.nn.LayerNorm([C, H, W]), layer_norm, 1e-2),
    "GroupNorm": (torch.nn.GroupNorm(Ng, C), group_norm_3, 1e-2),
    "RMSNorm": (torch.nn.RMSNorm([C, H, W]), rms_norm_chw, 1e-8),
}
rel_blind = {}  # name: input-gradient gap with eps dropped, relative (Try it)
for name, (module, ours, scale) in layers.items():
    module.to(device=device, dtype=f64).train()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    x = scale * z  # (B, C, H, W)

    def fresh():
        return [p.detach().clone().requires_grad_(True) for p in module.parameters()]

    theirs = grads(lambda x_, *_: module(x_), x, list(module.parameters()), g)
    mine = grads(ours, x, fresh(), g)
    blind = grads(lambda x_, *p: ours(x_, *p, eps=0.0), x, fresh(), g)[0]
    names = ["x"] + [n for n, _ in module.named_parameters()]
    gaps = [f"{n} {(a - b).abs().max().item():.0e}"
            for n, a, b in zip(names, mine, theirs)]
    rel_blind[name] = ((blind - theirs[0]).abs().max() / theirs[0].abs().max()).item()
    print(f"{name:14s} max|d ours - d torch| by {', '.join(gaps)}")
    assert names[:2] == ["x", "weight"]  # every layer's weight gradient is compared
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)  # float64 defaults

# %%
# Proof: BatchNorm's input gradient in closed form
# ------------------------------------------------
# An independent formulation: the equation of The idea, written out with sums over
# ``(B, H, W)``, against autograd through ``nn.BatchNorm2d``.
bn, _, scale = layers["BatchNorm2d"]
x = scale * z  # (B, C, H, W), variance ~1e-4
x_ = x.clone().requires_grad_(True)
bn(x_).backward(g)
dx_autograd = x_.grad

N = B * H * W
mean = x.mean(dim=[0, 2, 3], keepdim=True)  # (1, C, 1, 1)
var = x.var(dim=[0, 2, 3], unbiased=False, keepdim=True)  # (1, C, 1, 1)
x_hat = (x - mean) / torch.sqrt(var + bn.eps)  # (B, C, H, W)
gamma = bn.weight.detach()[:, None, None]  # (C, 1, 1)
sum_g = g.sum(dim=[0, 2, 3], keepdim=True)  # (1, C, 1, 1)
sum_gx = (g * x_hat).sum(dim=[0, 2, 3], keepdim=True)  # (1, C, 1, 1)
dx_closed = gamma / torch.sqrt(var + bn.eps) / N * (N * g - sum_g - x_hat * sum_gx)
print(f"max|closed form - autograd| = "
      f"{(dx_closed - dx_autograd).abs().max().item():.2e}")
torch.testing.assert_close(dx_closed, dx_autograd)

# %%
# Train mode: the input gradient sums to zero per channel
# -------------------------------------------------------
# Summing the closed form over ``(B, H, W)`` leaves ``-sum(x_hat) * sum(dy * x_hat)``,
# and ``sum(x_hat) = 0`` (The idea).
train_sums = dx_autograd.sum(dim=[0, 2, 3])  # (C,)
print(f"train: max over channels |sum of dL/dx| = {train_sums.abs().max().item():.1e}")
# Zero up to float64 rounding of N = 100 terms, far below the 1e-7 default.
torch.testing.assert_close(train_sums, torch.zeros_like(train_sums))

# %%
# Proof: finite differences agree with autograd (gradcheck on LayerNorm)
# ----------------------------------------------------------------------
# ``torch.autograd.gradcheck`` compares autograd's Jacobian with finite differences,
# with no PyTorch normalization module involved. It needs float64, as here; a small
# input keeps the ``numel * numel`` Jacobian cheap.
# (B, C, H, W) = (2, 3, 2, 2)
small = torch.randn(2, 3, 2, 2, device=device, dtype=f64, requires_grad=True)
w = torch.randn(3, 2, 2, device=device, dtype=f64, requires_grad=True)  # (C, H, W)
b = torch.randn(3, 2, 2, device=device, dtype=f64, requires_grad=True)  # (C, H, W)
ok = torch.autograd.gradcheck(layer_norm, (small, w, b))
print(f"gradcheck(layer_norm): {ok}")
assert ok

# %%
# Try it: drop ``eps`` from the from-scratch layers. Do the gradients still match?
# --------------------------------------------------------------------------------
# The loop above also ran each from-scratch layer with ``eps=0.0``; compare its input
# gradient with PyTorch's, relative to its size.
for name, rel in rel_blind.items():
    print(f"{name:14s} no eps: max|d ours - d torch| / max|d torch| = {rel:.0e}")
    assert rel > 1e-3  # eps is visible in the gradient

# %%
# Try it: switch BatchNorm to eval mode. Does the input gradient still sum to zero?
# ---------------------------------------------------------------------------------
# Backpropagate the same ``g`` through ``bn.eval()`` and sum per channel.
bn.eval()
x_ = x.clone().requires_grad_(True)
bn(x_).backward(g)
eval_sums = x_.grad.sum(dim=[0, 2, 3])  # (C,)
print(f"eval:  max over channels |sum of dL/dx| = {eval_sums.abs().max().item():.1e}")
dx_eval = gamma / torch.sqrt(bn.running_var[:, None, None] + bn.eps) * g
torch.testing.assert_close(x_.grad, dx_eval)
assert eval_sums.abs().max() > 1.0, "eval-mode gradient sums vanished?"

