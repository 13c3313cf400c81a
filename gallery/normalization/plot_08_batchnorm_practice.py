"""
BatchNorm in practice: frozen and folded
========================================

Two things happen to BatchNorm once a model leaves the textbook. Fine-tuning *freezes*
it, and the three ways to do that freeze different things. Inference *folds* it into
the convolution or linear layer before it, so it costs nothing. A batch split across
devices needs a third thing, synchronized statistics: its own page,
:doc:`/generated/normalization/plot_09_sync_batchnorm`.

**You will learn**

- what ``eval()``, ``requires_grad_(False)`` and both together freeze
- why ``model.train()`` undoes ``eval()`` and ``FrozenBatchNorm2d`` does not
- how eval-mode BatchNorm folds into the layer before it, and why only in eval mode

**Prerequisites:** :doc:`/generated/normalization/plot_02_batchnorm` (BatchNorm, train
and eval), :doc:`/generated/normalization/plot_06_running_stats` (the running
statistics).
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
# The idea
# --------
# In eval mode BatchNorm is a fixed affine map per channel from the running statistics
# :math:`\hat\mu, \hat\sigma^2` (what a frozen BatchNorm computes); composed with the
# layer before it (weights :math:`W_c`, bias :math:`b_c` of output channel :math:`c`)
# it is one layer:
#
# .. math::
#
#    y = x\, s + t, \quad s = \frac{\gamma}{\sqrt{\hat\sigma^2 + \epsilon}}, \quad
#    t = \beta - \hat\mu\, s; \qquad
#    W'_c = s_c W_c, \quad b'_c = (b_c - \hat\mu_c)\, s_c + \beta_c
import matplotlib.pyplot as plt

gen = torch.Generator().manual_seed(4)
scales = 1 + torch.randn(3, generator=gen)  # s_c of three channels
shifts = torch.randn(3, generator=gen)  # t_c
xs = torch.linspace(-2, 2, 5)  # inputs x of one channel
batch = torch.stack([xs, xs + 1.5])  # (2, 5): the same x[0] with other companions
fig, axes = plt.subplots(1, 2, figsize=(9, 2.9), layout="constrained")
for c in range(3):
    axes[0].plot(xs, xs * scales[c] + shifts[c], marker="o", label=f"channel {c}")
axes[0].set(title="eval mode: y = x s + t per channel", xlabel="x", ylabel="y")
axes[0].legend(fontsize="small")
for i, row in enumerate(batch):  # training mode: normalized with the batch's statistics
    normed = (row - row.mean()) / row.std(unbiased=False)
    axes[1].plot(row, normed, marker="o", label=f"batch {i}")
axes[1].set(title="training mode: y depends on the batch", xlabel="x")
axes[1].legend(fontsize="small")
fig.suptitle("Eval-mode BatchNorm is a fixed affine map: it freezes and folds; "
             "training-mode BatchNorm is not")
plt.show()

# %%
# Three ways to freeze
# --------------------
# A "pretrained" BatchNorm (variances near ``1e-3``) and a batch not of its statistics.
import copy


def pretrained_bn(C, device):
    """A BatchNorm2d(C) with non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(1)
    bn = torch.nn.BatchNorm2d(C).to(device)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(C, generator=g) * 0.1)
        bn.running_var.copy_(1e-3 * (0.5 + torch.rand(C, generator=g)))
        bn.weight.copy_(1 + torch.randn(C, generator=g))
        bn.bias.copy_(torch.randn(C, generator=g))
    return bn


def freeze_report(bn, x, x_other):
    """One step on x (B, C, H, W): buffers moved? weight.grad? How much sample 0's
    output changes when its companions are those of x_other (same sample 0)."""
    probe = copy.deepcopy(bn)  # the same module, for sample 0 among other companions
    before = (bn.running_mean.clone(), bn.running_var.clone())
    y = bn(x)  # (B, C, H, W)
    (y * torch.linspace(-1, 1, y.numel(), device=x.device).view_as(y)).sum().backward()
    moved = (not torch.equal(before[0], bn.running_mean),
             not torch.equal(before[1], bn.running_var))  # (mean, var)
    with torch.no_grad():
        depends = (y[0] - probe(x_other)[0]).abs().max().item()
    return y, moved, bn.weight.grad is not None, depends


# %%
# ``bn.eval()`` freezes the statistics, not the affine (it still gets gradients);
# ``requires_grad_(False)`` freezes the affine only (in training mode the layer still
# uses and updates batch statistics); both together are torchvision's
# ``FrozenBatchNorm2d``, The idea's fixed affine map. Did the buffers move, did weight
# get a gradient, how much does sample 0's output follow its batch companions?
B, C, H, W = 4, 3, 5, 5
x = 0.5 + 0.05 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W)
x.requires_grad_(True)  # as the output of the layers before would
x_other = x.detach().clone()  # the same sample 0 among other companions:
x_other[1:] += 0.2

results = {}
for way, eval_mode, affine_grads in [("eval()", True, True),
                                     ("requires_grad_(False)", False, False),
                                     ("both", True, False)]:
    bn = pretrained_bn(C, device).train(not eval_mode)
    bn.requires_grad_(affine_grads)  # weight and bias; the buffers have no gradient
    results[way] = freeze_report(bn, x, x_other)
for name, (_, moved, has_grad, depends) in results.items():
    print(f"{name}: moved {moved}, weight.grad {has_grad}, sample 0 {depends:.1e}")
assert results["eval()"][1:3] == ((False, False), True)
assert results["eval()"][3] == 0  # eval mode is per sample: no dependence at all
assert results["requires_grad_(False)"][1:3] == ((True, True), False)
assert results["requires_grad_(False)"][3] > 1  # the batch's statistics
assert results["both"][1:3] == ((False, False), False)
assert results["both"][3] == 0  # per sample, as eval()

# %%
# Folding BatchNorm into the layer before it
# ------------------------------------------
# A convolution or linear layer is affine, and so is BatchNorm in eval mode: the two are
# one layer, with The idea's :math:`W'_c, b'_c` (:footcite:t:`Jacob2018`), scaled along
# dim 0.
def fold(weight, bias, bn):
    """Weight and bias of the layer that equals `layer then bn` in eval mode."""
    if bias is None:  # usual before BatchNorm: its beta does a bias's work
        bias = torch.zeros_like(bn.running_mean)
    s = bn.weight / torch.sqrt(bn.running_var + bn.eps)  # (C_out,)
    shape = [-1] + [1] * (weight.dim() - 1)  # scale along the output channels
    return weight * s.view(shape), (bias - bn.running_mean) * s + bn.bias


# %%
# ``Conv2d(C, C, 3)`` then the "pretrained" BatchNorm, folded (float64): equal to the
# stack, its weights to ``fuse_conv_bn_eval``'s (``Linear``, float32: Proof sections).
conv = torch.nn.Conv2d(C, C, 3, padding=1, device=device, dtype=torch.float64).eval()
bn_fold = pretrained_bn(C, device).double().eval()
x64 = x.double()  # (B, C, H, W), used under no_grad only
with torch.no_grad():
    w, b = fold(conv.weight, conv.bias, bn_fold)
    folded = torch.nn.functional.conv2d(x64, w, b, padding=1)  # (B, C, H, W)
    stack = bn_fold(conv(x64))  # (B, C, H, W)
    fused = torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn_fold)
print(f"folded vs stack: max|diff| {(folded - stack).abs().max():.1e}; "
      f"weights vs fuse_conv_bn_eval {(w - fused.weight).abs().max():.1e}")
torch.testing.assert_close(folded, stack)
torch.testing.assert_close(w, fused.weight)

# %%
# Proof: Linear layers and float32 fold too
# -----------------------------------------
# ``make_pair`` builds a layer and an eval-mode BatchNorm after it with running
# variances near ``1e-3`` (so ``eps`` matters) and a non-trivial affine; ``input_for``
# a seeded input for it.
def make_pair(kind, dtype, device, bias=True, C=3, C_out=8, D=16, D_out=8):
    """Conv2d(C, C_out, 3) or Linear(D, D_out), and an eval-mode BatchNorm after it,
    with non-trivial parameters."""
    g = torch.Generator().manual_seed(2)
    if kind == "conv":
        layer = torch.nn.Conv2d(C, C_out, 3, padding=1, bias=bias)
        bn = torch.nn.BatchNorm2d(C_out)
    else:
        layer = torch.nn.Linear(D, D_out)
        bn = torch.nn.BatchNorm1d(D_out)
    n = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(n, generator=g) * 0.3)
        bn.running_var.copy_(1e-3 * (0.5 + torch.rand(n, generator=g)))
        bn.weight.copy_(1 + torch.randn(n, generator=g))
        bn.bias.copy_(torch.randn(n, generator=g))
    return layer.to(device, dtype).eval(), bn.to(device, dtype).eval()


def input_for(kind, dtype, device, B=4, C=3, H=5, W=5, D=16):
    """A seeded input for make_pair's layer: (B, C, H, W) (conv) or (B, D) (linear)."""
    g = torch.Generator().manual_seed(3)
    shape = (B, C, H, W) if kind == "conv" else (B, D)
    return torch.randn(shape, generator=g).to(device, dtype)  # (B, C, H, W) or (B, D)


# %%
# A ``Conv2d(C, C_out, 3)`` and a ``Linear(D, D_out)``, each followed by a BatchNorm
# with non-trivial running statistics (variances near ``1e-3`` again, so ``eps``
# matters) and affine. In float64 the folded layer equals the two-layer stack at
# float64's default tolerance, in float32 at float32's (a tighter bound follows); our
# folded weights and biases equal those of torch's ``fuse_conv_bn_eval`` and
# ``fuse_linear_bn_eval``, which compute the same formula with ``rsqrt``. On CUDA, cuDNN
# may run float32 convolutions in TF32 (its default); TF32 is switched off for this
# comparison so that the float32 numbers below mean float32.
if device == "cuda":
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
C_out, D, D_out = 8, 16, 8


folded_error = {}  # (kind, dtype) -> max|folded - stack| / max|stack|
for kind in ("conv", "linear"):
    for dtype in (torch.float64, torch.float32):
        layer, bn = make_pair(kind, dtype, device)
        xin = input_for(kind, dtype, device)
        with torch.no_grad():
            ref = bn(layer(xin))
            w, b = fold(layer.weight, layer.bias, bn)
            if kind == "conv":
                fused = torch.nn.utils.fusion.fuse_conv_bn_eval(layer, bn)
                out = torch.nn.functional.conv2d(xin, w, b, padding=1)
            else:
                fused = torch.nn.utils.fusion.fuse_linear_bn_eval(layer, bn)
                out = torch.nn.functional.linear(xin, w, b)
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            folded_error[kind, dtype] = err
            print(f"{kind:6s} {str(dtype)[6:]}: max|folded - stack|/max|stack| "
                  f"{err:.1e}, max|ours - fused weight| "
                  f"{(w - fused.weight).abs().max():.1e}")
            torch.testing.assert_close(w, fused.weight)
            torch.testing.assert_close(b, fused.bias)
            torch.testing.assert_close(out, ref)  # the dtype's default tolerance
if device == "cuda":
    torch.backends.cudnn.allow_tf32 = tf32

# %%
# In float32 the folded layer is not bit-equal to the stack: it rounds :math:`W_c s_c`
# once per weight and then sums :math:`K` products (:math:`K = C \cdot 3 \cdot 3 = 27`
# for the convolution, :math:`D = 16` for the linear layer), where the stack sums first
# and scales after. Each rounding is at most half an
# :doc:`ulp </generated/normalization/plot_16_norms_16bit>` of its result, and the
# errors of a sum of :math:`K` random-sign terms grow like :math:`\sqrt{K}`, so the
# difference should be a few :math:`\sqrt{K}` ulps of the output scale: the estimate
# asserted is :math:`4 \sqrt{K}\, \varepsilon_{32}` relative to :math:`\max |y|`
# (:math:`\varepsilon_{32} = 2^{-23}`), i.e. 2.5e-6 and 1.9e-6. It is not a worst-case
# bound: that grows like :math:`K \varepsilon_{32}`. Measured on CPU (torch 2.13); on
# CUDA cuDNN picks the convolution algorithm, and whether its float32 result stays
# within this bound is not yet verified by a GPU build.
eps32 = torch.finfo(torch.float32).eps
for kind, K in (("conv", C * 9), ("linear", D)):
    bound = 4 * K**0.5 * eps32
    err = folded_error[kind, torch.float32]
    print(f"{kind:6s} float32: relative error {err:.1e} "
          f"<= 4 sqrt(K) eps = {bound:.1e} (K = {K})")
    assert err <= bound  # an estimate, not a worst case
fold_err_conv = folded_error["conv", torch.float32]  # relative to max |y|
fold_err_linear = folded_error["linear", torch.float32]
print(f"in units of eps32: conv {fold_err_conv / eps32:.1f}, "
      f"linear {fold_err_linear / eps32:.1f}")

# %%
# Proof: frozen is the fixed affine map
# -------------------------------------
# The "both" module is exactly the fixed affine map, written here from its definition
# (torchvision is not needed): scale and shift per channel from the running statistics.
bn = pretrained_bn(C, device)
scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)  # (C,)
shift = bn.bias - bn.running_mean * scale  # (C,)
frozen = x * scale.view(1, C, 1, 1) + shift.view(1, C, 1, 1)
gap = (frozen - results["both"][0]).abs().max()
print(f"fixed affine x * s + t vs eval() with no grads: max|diff| = {gap:.1e}")
torch.testing.assert_close(frozen, results["both"][0])

# %%
# Proof: folding a convolution without a bias
# --------------------------------------------
# A convolution right before BatchNorm usually has no bias (BatchNorm's mean removal
# would cancel it, and its :math:`\beta` does a bias's work): ``fold`` then takes
# :math:`b_c = 0`, and the folded layer gets the bias :math:`\beta_c - \hat\mu_c s_c`.
# In float64, equal to the stack and to ``fuse_conv_bn_eval``.
layer, bn = make_pair("conv", torch.float64, device, bias=False)
assert layer.bias is None  # the case of this cell: fold's bias=None branch runs
xin = input_for("conv", torch.float64, device)
with torch.no_grad():
    w, b = fold(layer.weight, layer.bias, bn)
    out = torch.nn.functional.conv2d(xin, w, b, padding=1)
    ref = bn(layer(xin))
    fused = torch.nn.utils.fusion.fuse_conv_bn_eval(layer, bn)
print(f"conv without bias: max|folded - stack| "
      f"{(out - ref).abs().max():.1e}")
torch.testing.assert_close(out, ref)
torch.testing.assert_close(b, fused.bias)

# %%
# Try it: ``eval()``, then ``model.train()``. Still frozen?
# ---------------------------------------------------------
# A training loop calls ``model.train()`` on the whole model at every epoch.

# %%
# ``eval()`` is a mode: ``model.train()`` puts the layer back in training mode. The
# buffers then move again and the output depends on the batch again, with weight
# and bias frozen or not. ``FrozenBatchNorm2d`` has no training mode, which is why
# fine-tuning code swaps it in (or sets ``eval()`` again after every ``train()``).
model = torch.nn.Sequential(pretrained_bn(C, device)).eval()  # frozen as "both"
model[0].weight.requires_grad_(False)
model[0].bias.requires_grad_(False)
model.train()  # what the next epoch of a training loop does
_, moved, _, depends = freeze_report(model[0], x, x_other)
print(f"after model.train(): buffers moved {moved}, sample 0 vs batch {depends:.1e}")
assert moved == (True, True) and depends > 1  # as requires_grad_(False)


# %%
# Try it: fold in training mode. Does it match?
# ---------------------------------------------
# Put the BatchNorm in ``train()`` and compare with the folded conv on the same batch.

# %%
# The folding is only valid in eval mode: in training mode BatchNorm uses the batch's
# statistics, which change with every batch, so there is nothing fixed to fold. The
# folded conv applied to a batch differs from the stack in training mode.
layer, bn = make_pair("conv", torch.float64, device)
xin = input_for("conv", torch.float64, device)
with torch.no_grad():
    w, b = fold(layer.weight, layer.bias, bn)
    out = torch.nn.functional.conv2d(xin, w, b, padding=1)
    bn.train()
    train_gap = (out - bn(layer(xin))).abs().max().item()
print(f"folded conv vs the stack in training mode: max|diff| = {train_gap:.1f}")
assert train_gap > 1  # the batch's statistics are not the running ones

# %%
# References
# ----------
# Folding BatchNorm: :footcite:t:`Jacob2018`.
#
# .. footbibliography::
