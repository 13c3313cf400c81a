"""
Gradients: the from-scratch layers backpropagate like PyTorch's
===============================================================

Matching outputs is half the story: a layer is only a drop-in replacement if its
gradients match too. This page backpropagates the same upstream gradient through
PyTorch's five normalization modules and through the from-scratch formulas, in float64,
and compares the gradients with respect to the input, the weight and the bias. It then
checks BatchNorm's input gradient against its closed form, and shows what that form
implies: in train mode the input gradient sums to zero over each channel, in eval mode
it does not.
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
# The from-scratch layers
# -----------------------
# The recipe of the first page, followed by the affine. Weights and biases of shape
# ``(C,)`` act per channel, so they are broadcast over ``(H, W)``; LayerNorm's and
# RMSNorm's are per element.
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def per_channel(y, weight, bias):
    """Affine with (C,) parameters on y (B, C, H, W)."""
    return y * weight[:, None, None] + bias[:, None, None]


def batch_norm(x, weight, bias, eps=1e-5):
    return per_channel(normalize(x, [0, 2, 3], eps), weight, bias)


def instance_norm(x, weight, bias, eps=1e-5):
    return per_channel(normalize(x, [2, 3], eps), weight, bias)


def layer_norm(x, weight, bias, eps=1e-5):
    return normalize(x, [1, 2, 3], eps) * weight + bias


G = 3  # groups for GroupNorm


def group_norm(x, weight, bias, eps=1e-5):
    B, C, H, W = x.shape
    y = normalize(x.reshape(B, G, C // G, H, W), [2, 3, 4], eps).reshape(B, C, H, W)
    return per_channel(y, weight, bias)


# RMSNorm's eps=None is float64's machine epsilon for float64 input (the RMSNorm page).
EPS64 = torch.finfo(torch.float64).eps


def rms_norm(x, weight, eps=EPS64):
    return x / torch.sqrt(x.pow(2).mean(dim=[1, 2, 3], keepdim=True) + eps) * weight


# %%
# Same input, same weights, same upstream gradient
# ------------------------------------------------
# Each module gets random weights and biases (so the affine's gradients are not
# trivial), the same upstream gradient ``g``, and the same input ``z`` scaled so that
# ``eps`` is a 10 % term: variance ``1e-4`` against ``eps = 1e-5`` for the four layers
# that subtract a mean, mean square ``1e-16`` against float64's ``2.2e-16`` for RMSNorm.
# ``out.backward(g)`` fills ``.grad``. The last column is the input gradient's gap to
# PyTorch with ``eps`` dropped from the from-scratch layer, relative to its size.
B, C, H, W = 4, 6, 5, 4  # H != W, so a reshape that swapped them would show
z = torch.randn(B, C, H, W, device=device, dtype=f64)  # (B, C, H, W), unit variance
g = torch.randn(B, C, H, W, device=device, dtype=f64)  # upstream gradient dL/dy


def grads(fn, x, params):
    """d/dx and d/dparams of sum(fn(x, *params) * g)."""
    x_ = x.clone().requires_grad_(True)
    fn(x_, *params).backward(g)
    return [x_.grad] + [p.grad for p in params]


layers = {  # name: (module, from-scratch function, input scale)
    "BatchNorm2d": (torch.nn.BatchNorm2d(C), batch_norm, 1e-2),
    "InstanceNorm2d": (torch.nn.InstanceNorm2d(C, affine=True), instance_norm, 1e-2),
    "LayerNorm": (torch.nn.LayerNorm([C, H, W]), layer_norm, 1e-2),
    "GroupNorm": (torch.nn.GroupNorm(G, C), group_norm, 1e-2),
    "RMSNorm": (torch.nn.RMSNorm([C, H, W]), rms_norm, 1e-8),
}
for name, (module, ours, scale) in layers.items():
    module.to(device=device, dtype=f64).train()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    x = scale * z  # (B, C, H, W)

    def fresh():
        return [p.detach().clone().requires_grad_(True) for p in module.parameters()]

    theirs = grads(lambda x_, *_: module(x_), x, list(module.parameters()))
    mine = grads(ours, x, fresh())
    blind = grads(lambda x_, *p: ours(x_, *p, eps=0.0), x, fresh())[0]
    names = ["x"] + [n for n, _ in module.named_parameters()]
    gaps = [f"{n} {(a - b).abs().max().item():.0e}"
            for n, a, b in zip(names, mine, theirs)]
    rel_blind = ((blind - theirs[0]).abs().max() / theirs[0].abs().max()).item()
    print(f"{name:14s} max|d ours - d torch| by {', '.join(gaps)}; "
          f"no eps {rel_blind:.0e}")
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)  # float64 defaults
    assert rel_blind > 1e-3  # eps is visible in the gradient

# %%
# BatchNorm's input gradient in closed form
# -----------------------------------------
# An independent formulation: differentiating through the batch mean and variance by
# hand gives, per channel, with sums over ``(B, H, W)`` and ``N = B * H * W``,
# ``dx = gamma / sqrt(var + eps) / N * (N * dy - sum(dy) - x_hat * sum(dy * x_hat))``.
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
# and ``sum(x_hat) = 0``: adding a constant to a channel does not change the output (the
# batch mean absorbs it), so the gradient has no component along that constant
# direction. In eval mode the running statistics are constants,
# ``dx = gamma / sqrt(running_var + eps) * dy``, and nothing cancels.
train_sums = dx_autograd.sum(dim=[0, 2, 3])  # (C,)
print(f"train: max over channels |sum of dL/dx| = {train_sums.abs().max().item():.1e}")
# Zero up to float64 rounding of N = 100 terms of size ~100: ~1e-12, far below the 1e-7
# default.
torch.testing.assert_close(train_sums, torch.zeros_like(train_sums))

bn.eval()
x_ = x.clone().requires_grad_(True)
bn(x_).backward(g)
eval_sums = x_.grad.sum(dim=[0, 2, 3])  # (C,)
print(f"eval:  max over channels |sum of dL/dx| = {eval_sums.abs().max().item():.1e}")
dx_eval = gamma / torch.sqrt(bn.running_var[:, None, None] + bn.eps) * g
torch.testing.assert_close(x_.grad, dx_eval)
assert eval_sums.abs().max() > 1.0, "eval-mode gradient sums vanished?"

# %%
# gradcheck on the from-scratch LayerNorm
# ---------------------------------------
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
