"""
LayerNorm: the last D dims, for text and images
===============================================

LayerNorm normalizes each sample over its last dims (the features of a token, or all of
``(C, H, W)`` of an image) and applies a per-element affine. It never looks across the
batch, so it keeps no running statistics and train and eval mode agree.

**You will learn**

- which dims LayerNorm reduces for text ``(B, L, D)`` and for images ``(B, C, H, W)``
- to write LayerNorm in four lines and match ``nn.LayerNorm``
- why LayerNorm has no running statistics and no train/eval difference
- in what sense "LayerNorm is a transposed BatchNorm" (the reduction transposes, the
  affine does not)

**Prerequisites:** :doc:`/generated/normalization/plot_01_common_recipe` (the recipe),
:doc:`/generated/normalization/plot_02_batchnorm` (BatchNorm, to compare).

.. index:: ! LayerNorm
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
# Each sample brings its own statistics: the mean :math:`\mu` and variance
# :math:`\sigma^2` of the values in its last dims (one token's ``D`` features, or one
# image's ``C x H x W`` values), then an affine with one weight and bias per element of
# those dims:
#
# .. math::
#
#    \mathrm{LN}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \odot \gamma + \beta,
#    \qquad \mu = \frac{1}{D} \sum_{i=1}^{D} x_i, \quad
#    \sigma^2 = \frac{1}{D} \sum_{i=1}^{D} (x_i - \mu)^2
#
# Drawn as a grid of cells, the shaded values share one mean and variance; compare
# BatchNorm, which pools one channel over the whole batch
# (:doc:`plot_02_batchnorm`).
from matplotlib.patches import Polygon


def draw_cube(ax, shaded, labels, d=0.45):
    """Oblique view of a grid of cells, shaded: bool (depth, rows, cols); labels:
    (cols, rows, depth) axis names."""
    Z, Y, X = shaded.shape

    def cell(corners, on, side):
        colour = "C1" if on else ("0.85" if side else "white")
        ax.add_patch(Polygon(corners, fc=colour, ec="k"))

    for y in range(Y):  # front face (depth 0), row 0 at the top
        for x in range(X):
            y0 = Y - 1 - y
            cell([(x, y0), (x + 1, y0), (x + 1, y0 + 1), (x, y0 + 1)],
                 shaded[0, y, x], False)
    for z in range(Z):
        for x in range(X):  # top face: row 0 at every depth
            x0, y0 = x + z * d, Y + z * d
            cell([(x0, y0), (x0 + 1, y0), (x0 + 1 + d, y0 + d), (x0 + d, y0 + d)],
                 shaded[z, 0, x], False)
        for y in range(Y):  # right face: the last column at every depth
            x0, y0 = X + z * d, Y - 1 - y + z * d
            cell([(x0, y0), (x0 + d, y0 + d), (x0 + d, y0 + 1 + d), (x0, y0 + 1)],
                 shaded[z, y, X - 1], True)
    ax.annotate("", (X + Z * d + 0.3, Z * d - 0.3), (X + 0.3, -0.3),
                arrowprops=dict(arrowstyle="->"))
    ax.text(X + Z * d + 0.4, Z * d - 0.3, labels[2], ha="left", va="center")
    ax.text(X / 2, -0.4, labels[0], ha="center", va="top")
    ax.text(-0.3, Y / 2, labels[1], ha="right", va="center")
    ax.set_xlim(-2.6, X + Z * d + 2.4)
    ax.set_ylim(-1.4, Y + Z * d + 0.4)
    ax.set_aspect("equal")
    ax.axis("off")


# %%
text = torch.zeros(4, 5, 8, dtype=torch.bool)  # drawn (B, L, D)
text[0, 1] = True  # one token: its D features
image = torch.zeros(4, 4, 6, dtype=torch.bool)  # drawn (B, H*W, C)
image[0] = True  # one image: all of its C x H x W values
fig, (ax_text, ax_image) = plt.subplots(1, 2, figsize=(10, 3.8))
draw_cube(ax_text, text, ("features D", "tokens L", "batch B"))
ax_text.set_title("text (B, L, D): LayerNorm(D)\none statistic per token",
                  fontsize="medium")
draw_cube(ax_image, image, ("channels C", "positions\nH, W", "batch B"))
ax_image.set_title("images (B, C, H, W): LayerNorm([C, H, W])\none statistic per image",
                   fontsize="medium")
fig.suptitle("LayerNorm reduces each sample's last dims, never across the batch")
plt.show()


# %%
# From scratch
# ------------
# Reduce the trailing dims that the affine covers, biased variance, ``eps`` inside the
# square root, then the per-element affine.
def layer_norm(x, weight, bias, eps=1e-5):
    """Normalize over x's last weight.dim() dims; weight, bias: that trailing shape."""
    dims = list(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias



# %%
# Text: for a sequence ``(B, L, D)``, ``nn.LayerNorm(D)`` reduces the last dim only:
# every token is normalized over its own ``D`` features, one weight and bias per
# feature. The features are ``0.01 * randn`` (variance ``~1e-4``, ten times ``eps``), so
# that ``eps`` moves the output by ~5 % and ``D = 8`` values make the unbiased variance
# 14 % larger: a formula wrong in either would fail. The affine is random, so that a
# wrong broadcast cannot hide behind ones and zeros.
B, L, D = 4, 6, 8
x_text = 0.01 * torch.randn(B, L, D, device=device)  # (B, L, D), variance ~1e-4
ln_text = torch.nn.LayerNorm(D).to(device)
with torch.no_grad():
    ln_text.weight.copy_(torch.randn(D, device=device))
    ln_text.bias.copy_(torch.randn(D, device=device))
assert (ln_text.weight != 1).all() and (ln_text.bias != 0).all()  # off their init
print(f"weight {tuple(ln_text.weight.shape)}, bias {tuple(ln_text.bias.shape)}, "
      f"eps {ln_text.eps}")
assert ln_text.weight.shape == ln_text.bias.shape == (D,)
ours = layer_norm(x_text, ln_text.weight, ln_text.bias, eps=ln_text.eps)
print(f"max|ours - torch| = {(ours - ln_text(x_text)).abs().max().item():.1e}")
torch.testing.assert_close(ours, ln_text(x_text))

# %%
# No running statistics
# ---------------------
# LayerNorm's statistics come from the sample itself, so there is nothing to accumulate:
# the module has no buffers, and ``train()`` and ``eval()`` compute the same function
# bit for bit.
print(f"buffers: {[n for n, _ in ln_text.named_buffers()]}")
assert list(ln_text.buffers()) == []
y_train = ln_text.train()(x_text)
y_eval = ln_text.eval()(x_text)
print(f"max|train - eval| = {(y_train - y_eval).abs().max().item():.1e}")
assert torch.equal(y_train, y_eval)

# %%
# Proof: the notes' image snippet is LayerNorm over all of (C, H, W)
# -------------------------------------------------------------------
# The notes' snippet, verbatim: ``nn.LayerNorm([C, H, W])`` reduces the last three dims
# and its affine has shape ``(C, H, W)``, one weight per element. It runs and is right
# (its "custom IN" comment means LayerNorm).
import torch  # noqa: I001 (the notes, verbatim)
torch.manual_seed(43)
B, C, H, W = 2, 3, 2, 2
x = torch.randn(B, C, H, W)

# pytorch native LN
# you need to specify the shape of the last D dimensions
# LayerNorm will compute mean and variance over these dimensions
# and also define elementwise affine parameters
layernorm = torch.nn.LayerNorm([C, H, W])
with torch.no_grad():
    layernorm.weight[:] = torch.randn_like(layernorm.weight)    # shape [C, H, W]
    layernorm.bias[:] = torch.randn_like(layernorm.bias)        # shape [C, H, W]
y1 = layernorm(x)

# custom IN
eps = 1e-5
mean = x.mean(dim=[1,2,3], keepdim=True)
var = x.var(dim=[1,2,3], unbiased=False, keepdim=True)
y2 = (x - mean) / torch.sqrt(var + eps)
y2 = y2 * layernorm.weight + layernorm.bias

print((y1 - y2).norm())

# %%
# Its check holds, and our function with the same affine agrees.
x_img = x  # (B, C, H, W): the snippet's input, for the exercise below
ours = layer_norm(x, layernorm.weight, layernorm.bias)
print(f"weight {tuple(layernorm.weight.shape)}; max|ours - torch| = "
      f"{(ours - y1).abs().max().item():.2e}")
assert layernorm.weight.shape == (C, H, W)
torch.testing.assert_close(y1, y2)
torch.testing.assert_close(ours, y1)
assert layer_norm.__defaults__ == (layernorm.eps,)  # our default eps is torch's
torch.testing.assert_close(ours, y1)

# %%
# .. _errata-ln-transposed-bn:
#
# Proof: "LayerNorm is a transposed BatchNorm", made precise
# ----------------------------------------------------------
# For ``x`` of shape ``(N, D)`` (N tokens of D features), LayerNorm reduces each row
# over the ``D`` features; ``BatchNorm1d(N)`` applied to ``x.T`` of shape ``(D, N)``
# treats the N tokens as channels and reduces each over its "batch" of D features: the
# same numbers, transposed. Without affine and without running statistics the two are
# equal.
torch.manual_seed(0)
N, D = 6, 8
x = torch.randn(N, D, device=device) * 2 + 1  # (N, D)
ln_plain = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)
bn_plain = torch.nn.BatchNorm1d(N, affine=False, track_running_stats=False).to(device)
y_bn = bn_plain(x.T).T  # (D, N) -> (N, D)
err = (ln_plain(x) - y_bn).abs().max().item()
print(f"(N, D):    max|LayerNorm - BatchNorm1d on x.T| = {err:.2e}")
torch.testing.assert_close(ln_plain(x), y_bn)

# %%
# For text ``(B, L, D)``, flatten the tokens to ``(B*L, D)`` and transpose: BatchNorm
# then needs one channel per token in the batch, ``BatchNorm1d(B*L)``.
B, L, D = 2, 5, 8
x = torch.randn(B, L, D, device=device) * 2 + 1  # (B, L, D)
tokens_T = x.reshape(B * L, D).T  # (D, B*L)
bn_tokens = torch.nn.BatchNorm1d(B * L, affine=False, track_running_stats=False)
bn_tokens = bn_tokens.to(device)
y_bn = bn_tokens(tokens_T).T.reshape(B, L, D)  # (D, B*L) -> (B*L, D) -> (B, L, D)
ref = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)(x)
print(f"(B, L, D): max|LayerNorm - transposed BatchNorm1d| = "
      f"{(ref - y_bn).abs().max().item():.2e}")
torch.testing.assert_close(ref, y_bn)

# %%
# What does *not* transpose. The affine: LayerNorm's is per feature, shape ``(D,)``; the
# transposed BatchNorm's would be per channel, i.e. per token, shape ``(B*L,)``, tied to
# one batch size and one sequence length. The correct transposed form normalizes with
# BatchNorm and applies LayerNorm's affine after transposing back.
ln = torch.nn.LayerNorm(D).to(device)
with torch.no_grad():
    ln.weight.copy_(torch.randn(D, device=device))
    ln.bias.copy_(torch.randn(D, device=device))
bn_default = torch.nn.BatchNorm1d(B * L).to(device)
print(f"LayerNorm weight {tuple(ln.weight.shape)}; BatchNorm1d(B*L) weight "
      f"{tuple(bn_default.weight.shape)}")
assert bn_default.weight.shape == (B * L,) != ln.weight.shape
y_fixed = y_bn * ln.weight + ln.bias  # affine per feature, on the (B, L, D) layout
err = (ln(x) - y_fixed).abs().max().item()
print(f"max|LayerNorm - (transposed BatchNorm, then LN affine)| = {err:.2e}")
torch.testing.assert_close(ln(x), y_fixed)

# %%
# The running statistics do not transpose either. With BatchNorm's default
# ``track_running_stats=True``, train mode still matches LayerNorm, but the module
# records a running mean per token *position in the flattened batch*, and eval mode
# normalizes with those instead of each token's own statistics.
bn_tracking = torch.nn.BatchNorm1d(B * L, affine=False).to(device)
y_train = bn_tracking(tokens_T).T.reshape(B, L, D)
err = (y_train - ref).abs().max().item()
print(f"train mode: max|transposed BatchNorm - LayerNorm| = {err:.2e}")
torch.testing.assert_close(y_train, ref)
print(f"running_mean shape {tuple(bn_tracking.running_mean.shape)}: one per token slot")
y_eval = bn_tracking.eval()(tokens_T).T.reshape(B, L, D)
gap = (y_eval - ref).abs().max().item()
print(f"eval mode: max|transposed BatchNorm - LayerNorm| = {gap:.2e}")
assert gap > 0.5, "eval mode should use the running statistics"

# %%
# .. _errata-norm-comment-shape:
#
# Proof: the notes' generic ``Norm(dim)`` class, and its comment's one wrong shape
# --------------------------------------------------------------------------------
# The blog (seed 002) offers one class for both layers: "When using for BatchNorm,
# dim=0, assuming x is of the shape (batch_size, H, W, channel). When using for
# LayerNorm, dim=-1". Here it is, verbatim.
from torch import nn


class Norm(nn.Module):
    def __init__(self, num_features, variance_epsilon=1e-12):
        super(Norm, self).__init__()
        self.gamma = nn.Parameter(torch.ones(num_features))
        self.beta = nn.Parameter(torch.zeros(num_features))
        self.variance_epsilon = variance_epsilon

    def forward(self, x, dim):
        # layer norm, x is [bz, seq_len, dim], u is [bz, seq_len, 1], x_norm is the same shape with u  # noqa: E501
        u = x.mean(dim, keepdim=True)
        s = (x - u).pow(2).mean(dim, keepdim=True)
        x_norm = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.gamma * x_norm + self.beta


# %%
# ``forward``'s comment says "x_norm is the same shape with u". It is not: ``u`` keeps
# the reduced dim with size 1, ``(B, L, 1)``, and ``x_norm = (x - u) / ...`` broadcasts
# back to ``x``'s shape ``(B, L, D)``. ``forward``'s first three lines, run on their own
# for ``dim=-1``, on features of standard deviation ``1e-6``: their variance ``~1e-12``
# is the size of the class's ``eps``, so ``eps`` shows in the values. (Centred at 0,
# such numbers keep float32's full relative precision: ``x - u`` loses no digits.)
B, L, D = 4, 6, 8
x = 1e-6 * torch.randn(B, L, D, device=device)  # (B, L, D), variance ~1e-12
u = x.mean(-1, keepdim=True)
s = (x - u).pow(2).mean(-1, keepdim=True)
x_norm = (x - u) / torch.sqrt(s + 1e-12)
print(f"x {tuple(x.shape)}, u {tuple(u.shape)}, x_norm {tuple(x_norm.shape)}")
assert u.shape == (B, L, 1) and x_norm.shape == x.shape == (B, L, D)

# %%
# The values are PyTorch's ``layer_norm`` over the last dim with ``eps=1e-12``; with
# ``eps=0`` they would not be.
F = torch.nn.functional
err = (x_norm - F.layer_norm(x, (D,), eps=1e-12)).abs().max().item()
gap = (x_norm - F.layer_norm(x, (D,), eps=0.0)).abs().max().item()
print(f"max|x_norm - layer_norm(eps=1e-12)| = {err:.1e}, with eps=0 {gap:.1e}")
torch.testing.assert_close(x_norm, F.layer_norm(x, (D,), eps=1e-12))
assert gap > 0.1  # eps=1e-12 still matters here (printed above)

# %%
# Proof: the ``Norm`` class is LayerNorm with ``dim=-1``
# ------------------------------------------------------
# With on ``(B, L, D)`` it is ``nn.LayerNorm(D)``, provided ``eps`` matches:
# the class defaults to ``1e-12`` (BERT's TensorFlow value), ``nn.LayerNorm`` to
# ``1e-5``. At unit variance the two agree to about :math:`10^{-5} / 2` relative, so a
# check there could not tell them apart. The features here have standard deviation
# ``1e-3`` (variance ``1e-6``, a tenth of ``1e-5``), centred at 0 so that ``x - mean``
# loses no digits: the class matches ``LayerNorm(D, eps=1e-12)`` and is far from
# ``LayerNorm(D)``. The affine is random.
tiny = 1e-3 * torch.randn(B, L, D, device=device)  # (B, L, D), variance ~1e-6
norm = Norm(D).to(device)
with torch.no_grad():
    norm.gamma.copy_(torch.randn(D, device=device))
    norm.beta.copy_(torch.randn(D, device=device))
ln_matched = torch.nn.LayerNorm(D, eps=norm.variance_epsilon).to(device)
ln_default = torch.nn.LayerNorm(D).to(device)
with torch.no_grad():
    for ln in (ln_matched, ln_default):
        ln.weight.copy_(norm.gamma)
        ln.bias.copy_(norm.beta)
ours = norm(tiny, dim=-1)
print(f"eps: Norm {norm.variance_epsilon}, nn.LayerNorm default {ln_default.eps}")
err = (ours - ln_matched(tiny)).abs().max().item()
gap = (ours - ln_default(tiny)).abs().max().item()
print(f"max|Norm(dim=-1) - LayerNorm(D, eps=1e-12)| = {err:.1e}")
print(f"max|Norm(dim=-1) - LayerNorm(D)|            = {gap:.1e}")
torch.testing.assert_close(ours, ln_matched(tiny))
assert gap > 0.1  # at variance 1e-6 the default eps dominates

# %%
# .. _errata-norm-dim0:
#
# Proof: the ``Norm`` class is wrong for BatchNorm with ``dim=0``
# ---------------------------------------------------------------
# On channels-last images ``(B, H, W, C)``, ``dim=0`` reduces over the batch alone: one
# mean and variance per ``(h, w, c)``, from only ``B`` values. ``BatchNorm2d`` has one
# per channel, over ``(B, H, W)``. The reference is ``BatchNorm2d`` on the
# channels-first view, permuted back; ``eps`` and the affine are matched so that only
# the reduction differs, and the values (variance ``~1e-4``) let a mismatched ``eps``
# show.
B, H, W, C = 4, 5, 5, 3
x = 0.01 * torch.randn(B, H, W, C, device=device) + 0.01  # (B, H, W, C), channels last
bn = torch.nn.BatchNorm2d(C).to(device)  # train mode: batch statistics
with torch.no_grad():
    bn.weight.copy_(torch.randn(C, device=device))
    bn.bias.copy_(torch.randn(C, device=device))
ref = bn(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)  # (B, C, H, W) -> (B, H, W, C)
norm = Norm(C, variance_epsilon=bn.eps).to(device)
with torch.no_grad():
    norm.gamma.copy_(bn.weight)
    norm.beta.copy_(bn.bias)
gap = (norm(x, dim=0) - ref).abs().max().item()
print(f"dim=0:         max|Norm - BatchNorm2d| = {gap:.2e}")
assert gap > 0.5, "dim=0 should not be BatchNorm"

# %%
# The fix is to reduce over every dim but the channel. ``Tensor.mean`` already accepts a
# tuple of dims, so the class needs no new code, only the right argument:
# ``dim=(0, 1, 2)``.
fixed = norm(x, dim=(0, 1, 2))
print(f"dim=(0, 1, 2): max|Norm - BatchNorm2d| = "
      f"{(fixed - ref).abs().max().item():.2e}")
torch.testing.assert_close(fixed, ref)

# %%
# Even fixed, it is only BatchNorm's *train* mode: the class has no running statistics,
# so it cannot reproduce eval mode, which normalizes with the averages BatchNorm has
# recorded.
print(f"Norm buffers: {list(norm.buffers())}")
print(f"BatchNorm2d buffers: {[n for n, _ in bn.named_buffers()]}")
assert list(norm.buffers()) == []
ref_eval = bn.eval()(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
gap = (fixed - ref_eval).abs().max().item()
print(f"max|Norm(dim=(0, 1, 2)) - BatchNorm2d.eval()| = {gap:.2e}")
assert gap > 0.5

# %%
# Proof: the notes' BatchNorm pseudo-code is ``dim=0``, not ``nn.BatchNorm1d``
# ----------------------------------------------------------------------------
# The blog's pseudo-code normalizes, for every position ``i`` and feature ``j``, the
# ``B`` values ``x[:, i, j]``: statistics per (position, feature) across the batch,
# exactly ``dim=0`` on ``(B, L, D)``. ``nn.BatchNorm1d(D)`` on text (input
# ``(B, D, L)``) pools each feature over the batch *and* the positions, which is
# ``dim=(0, 1)``. Its LayerNorm pseudo-code is right.
def norm_1d(v, eps=1e-5):
    """The pseudo-code's Norm of a list of values (biased variance, eps inside sqrt)."""
    return (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + eps)


# %%
B, L, D = 4, 3, 5
x = 0.01 * torch.randn(B, L, D, device=device) + 0.01  # (B, L, D), variance ~1e-4
bn_pseudo = torch.empty_like(x)
for i in range(L):
    for j in range(D):
        bn_pseudo[:, i, j] = norm_1d(x[:, i, j])
ln_pseudo = torch.empty_like(x)
for i in range(B):
    for j in range(L):
        ln_pseudo[i, j, :] = norm_1d(x[i, j, :])

norm = Norm(D, variance_epsilon=1e-5).to(device)
bn1d = torch.nn.BatchNorm1d(D, affine=False).to(device)
bn1d_ref = bn1d(x.transpose(1, 2)).transpose(1, 2)  # (B, D, L) -> (B, L, D)
ln_ref = torch.nn.LayerNorm(D, elementwise_affine=False).to(device)(x)
err = (bn_pseudo - norm(x, dim=0)).abs().max().item()
gap = (bn_pseudo - bn1d_ref).abs().max().item()
print(f"BatchNorm pseudo-code: max|loop - Norm(dim=0)| = {err:.2e}, "
      f"|loop - BatchNorm1d| {gap:.2e}")
torch.testing.assert_close(bn_pseudo, norm(x, dim=0))
assert gap > 0.5, "the pseudo-code should not be nn.BatchNorm1d"
err = (norm(x, dim=(0, 1)) - bn1d_ref).abs().max().item()
print(f"nn.BatchNorm1d on text:  max|Norm(dim=(0, 1)) - nn.BatchNorm1d| = {err:.2e}")
torch.testing.assert_close(norm(x, dim=(0, 1)), bn1d_ref)
err = (ln_pseudo - ln_ref).abs().max().item()
print(f"LayerNorm pseudo-code: max|loop - nn.LayerNorm| = {err:.2e}")
torch.testing.assert_close(ln_pseudo, ln_ref)


# %%
# Try it: drop eps. How far off is LayerNorm at variance 1e-4?
# ------------------------------------------------------------
# Call ``layer_norm`` with ``eps=0.0`` on the text check's input, same affine.
blind = layer_norm(x_text, ln_text.weight, ln_text.bias, eps=0.0)
print(f"without eps: max|ours - torch| = "
      f"{(blind - ln_text(x_text)).abs().max().item():.1e}")
assert (blind - ln_text(x_text)).abs().max() > 1e-2  # eps is visible here

# %%
# Try it: can the notes' image check see eps?
# -------------------------------------------
# The snippet checks at unit variance. Would it pass with ``+ eps`` deleted? Rerun its
# formula on the same ``x`` scaled to variance ``~1e-4``, with and without ``eps``.

# %%
# At unit variance the snippet's check cannot see ``eps``: ``eps`` moves these
# outputs by about :math:`\epsilon / 2 = 5 \cdot 10^{-6}` relative, under float32's
# tolerance, so the check would pass with ``+ eps`` deleted. The snippet's formula, line
# for line, on the same ``x`` scaled to variance ``~1e-4`` (where ``eps`` is a 10 %
# term) still matches the module; without ``eps`` it would not.
x_small = 0.01 * x_img  # (B, C, H, W), variance ~1e-4
mean = x_small.mean(dim=[1,2,3], keepdim=True)
var = x_small.var(dim=[1,2,3], unbiased=False, keepdim=True)
y2_small = (x_small - mean) / torch.sqrt(var + eps)
y2_small = y2_small * layernorm.weight + layernorm.bias
y2_blind = (x_small - mean) / torch.sqrt(var) * layernorm.weight + layernorm.bias
y1_small = layernorm(x_small)
gap, gap_blind = (y1_small - y2_small).abs().max(), (y1_small - y2_blind).abs().max()
print(f"variance 1e-4: max|torch - snippet| {gap:.1e}, without eps {gap_blind:.1e}")
torch.testing.assert_close(y1_small, y2_small)
assert gap_blind > 1e-2  # eps is visible here
# without eps the snippet is LayerNorm with eps = 0
no_eps = torch.nn.functional.layer_norm(x_small, x_small.shape[1:], layernorm.weight,
                                        layernorm.bias, eps=0.0)
torch.testing.assert_close(y2_blind, no_eps)

# %%
# Try it: BERT's eps 1e-12 or PyTorch's 1e-5 at feature std 1e-3?
# ---------------------------------------------------------------
# With the affine at identity, compare the output std of ``Norm`` (``eps=1e-12``) and
# ``nn.LayerNorm(D)`` (``eps=1e-5``) on the features of standard deviation ``1e-3``.

# %%
# With the affine at identity the two ``eps`` values compare directly: at feature std
# ``1e-3`` PyTorch's default shrinks the output to std ``~0.3``, ``1e-12`` still
# normalizes it to ``~1``.
plain = Norm(tiny.shape[-1]).to(device)  # eps 1e-12, gamma 1, beta 0
ln_plain = torch.nn.LayerNorm(tiny.shape[-1]).to(device)  # eps 1e-5, weight 1, bias 0
std_12, std_5 = plain(tiny, -1).std().item(), ln_plain(tiny).std().item()
print(f"feature std 1e-3: output std with eps 1e-12 {std_12:.3f}, "
      f"with eps 1e-5 {std_5:.3f}")
assert std_12 > 2.5 * std_5, "eps should matter at variance below eps"
