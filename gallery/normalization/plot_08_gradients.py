"""
Gradients: the from-scratch layers backpropagate like PyTorch's
===============================================================

Matching outputs is half the story: a layer is only a drop-in replacement if its gradients match
too. This page backpropagates the same upstream gradient through PyTorch's five normalization
modules and through the from-scratch formulas, in float64, and compares the gradients with
respect to the input, the weight and the bias. It then checks BatchNorm's input gradient against
its closed form, and shows what that form implies: in train mode the input gradient sums to zero
over each channel, in eval mode it does not.
"""

# %%
# Setup
# -----
# Every page picks its device at run time and prints it; each claim holds on CPU and GPU.
# Everything is float64, so float64's default tolerances (1e-7) apply.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")
f64 = torch.float64


# %%
# The from-scratch layers
# -----------------------
# The recipe of the first page, followed by the affine. Weights and biases of shape ``(C,)`` act
# per channel, so they are broadcast over ``(H, W)``; LayerNorm's and RMSNorm's are per element.
def normalize(x, dims, eps=1e-5):
    """(x - mean) / sqrt(var + eps), statistics over `dims`; same shape as x."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def per_channel(y, weight, bias):
    """Affine with (C,) parameters on y (B, C, H, W)."""
    return y * weight[:, None, None] + bias[:, None, None]


def batch_norm(x, weight, bias):
    return per_channel(normalize(x, [0, 2, 3]), weight, bias)


def instance_norm(x, weight, bias):
    return per_channel(normalize(x, [2, 3]), weight, bias)


def layer_norm(x, weight, bias):
    return normalize(x, [1, 2, 3]) * weight + bias


G = 3  # groups for GroupNorm


def group_norm(x, weight, bias):
    B, C, H, W = x.shape
    y = normalize(x.reshape(B, G, C // G, H, W), [2, 3, 4]).reshape(B, C, H, W)
    return per_channel(y, weight, bias)


def rms_norm(x, weight):
    eps = torch.finfo(x.dtype).eps  # what RMSNorm's default eps=None means
    return x / torch.sqrt(x.pow(2).mean(dim=[1, 2, 3], keepdim=True) + eps) * weight


# %%
# Same input, same weights, same upstream gradient
# ------------------------------------------------
# Each module gets random weights and biases (so the affine's gradients are not trivial), the
# same input ``x`` and the same upstream gradient ``g``; ``out.backward(g)`` fills ``.grad``.
B, C, H, W = 4, 6, 5, 5
x = torch.randn(B, C, H, W, device=device, dtype=f64)  # (B, C, H, W)
g = torch.randn(B, C, H, W, device=device, dtype=f64)  # upstream gradient dL/dy


def grads(fn, params):
    """d/dx and d/dparams of sum(fn(x, *params) * g)."""
    x_ = x.clone().requires_grad_(True)
    fn(x_, *params).backward(g)
    return [x_.grad] + [p.grad for p in params]


layers = {
    "BatchNorm2d": (torch.nn.BatchNorm2d(C), batch_norm),
    "InstanceNorm2d": (torch.nn.InstanceNorm2d(C, affine=True), instance_norm),
    "LayerNorm": (torch.nn.LayerNorm([C, H, W]), layer_norm),
    "GroupNorm": (torch.nn.GroupNorm(G, C), group_norm),
    "RMSNorm": (torch.nn.RMSNorm([C, H, W]), rms_norm),
}
for name, (module, ours) in layers.items():
    module.to(device=device, dtype=f64).train()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    theirs = grads(lambda x_, *_: module(x_), list(module.parameters()))
    mine = grads(ours, [p.detach().clone().requires_grad_(True) for p in module.parameters()])
    names = ["x"] + [n for n, _ in module.named_parameters()]
    gaps = [f"d/d{n} {(a - b).abs().max().item():.1e}" for n, a, b in zip(names, mine, theirs)]
    print(f"{name:15s} max|ours - torch|: {', '.join(gaps)}")
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)  # float64 defaults

# %%
# BatchNorm's input gradient in closed form
# -----------------------------------------
# An independent formulation: differentiating through the batch mean and variance by hand gives,
# per channel, with sums over ``(B, H, W)`` and ``N = B * H * W``,
# ``dx = gamma / sqrt(var + eps) / N * (N * dy - sum(dy) - x_hat * sum(dy * x_hat))``.
bn = layers["BatchNorm2d"][0]
x_ = x.clone().requires_grad_(True)
bn(x_).backward(g)
dx_autograd = x_.grad

N = B * H * W
var = x.var(dim=[0, 2, 3], unbiased=False, keepdim=True)  # (1, C, 1, 1)
x_hat = normalize(x, [0, 2, 3], bn.eps)  # (B, C, H, W)
gamma = bn.weight.detach()[:, None, None]  # (C, 1, 1)
sum_g = g.sum(dim=[0, 2, 3], keepdim=True)  # (1, C, 1, 1)
sum_gx = (g * x_hat).sum(dim=[0, 2, 3], keepdim=True)  # (1, C, 1, 1)
dx_closed = gamma / torch.sqrt(var + bn.eps) / N * (N * g - sum_g - x_hat * sum_gx)
print(f"max|closed form - autograd| = {(dx_closed - dx_autograd).abs().max().item():.2e}")
torch.testing.assert_close(dx_closed, dx_autograd)

# %%
# Train mode: the input gradient sums to zero per channel
# -------------------------------------------------------
# Summing the closed form over ``(B, H, W)`` leaves ``-sum(x_hat) * sum(dy * x_hat)``, and
# ``sum(x_hat) = 0``: adding a constant to a channel does not change the output (the batch mean
# absorbs it), so the gradient has no component along that constant direction. In eval mode the
# running statistics are constants, ``dx = gamma / sqrt(running_var + eps) * dy``, and nothing
# cancels.
train_sums = dx_autograd.sum(dim=[0, 2, 3])  # (C,)
print(f"train: max over channels |sum of dL/dx| = {train_sums.abs().max().item():.1e}")
# Zero up to float64 rounding of N = 100 terms of size ~1: ~1e-14, far below the 1e-7 default.
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
# ``torch.autograd.gradcheck`` compares autograd's Jacobian with finite differences, with no
# PyTorch normalization module involved. It needs float64, as here; a small input keeps the
# ``numel * numel`` Jacobian cheap.
small = torch.randn(2, 3, 2, 2, device=device, dtype=f64, requires_grad=True)  # (B, C, H, W)
w = torch.randn(3, 2, 2, device=device, dtype=f64, requires_grad=True)  # (C, H, W)
b = torch.randn(3, 2, 2, device=device, dtype=f64, requires_grad=True)  # (C, H, W)
ok = torch.autograd.gradcheck(layer_norm, (small, w, b))
print(f"gradcheck(layer_norm): {ok}")
assert ok
