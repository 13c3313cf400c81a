"""
DyT: normalization without statistics
=====================================

Dynamic Tanh (DyT, Zhu et al. 2025) replaces a Transformer's LayerNorm by
``gamma * tanh(alpha * x) + beta``: a learnable scalar ``alpha`` and LayerNorm's
per-channel affine, but no mean and no variance. LayerNorm maps each token by a
straight line; over tokens of different scales those lines draw an S, which DyT
writes as one tanh.

**You will learn**

- DyT from scratch, equal to the paper's reference in both of its layouts
- what DyT shares with LayerNorm (a bounded output, the affine, no coupling between
  tokens) and what it does not (shift and scale invariance)
- why LayerNorm's input-to-output map looks like a tanh on real activations
- how to fit ``A tanh(alpha x)`` by least squares, and when the S disappears

**Prerequisites:** :doc:`/generated/normalization/plot_04_layernorm` (LayerNorm),
:doc:`/generated/transformer/plot_05_transformer_block` (the pre-LN block).

.. index:: ! DyT
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import matplotlib.pyplot as plt
import torch
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# DyT is elementwise, with no reduction at all:
#
# .. math::
#
#    \mathrm{DyT}(x) = \gamma \odot \tanh(\alpha x) + \beta, \qquad
#    \mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta .
#
# On one token LayerNorm is a line of slope :math:`1/\sqrt{\sigma^2 + \epsilon}`. On
# tokens of different sizes (outlier channels sized per token, as in trained models),
# large tokens get flat lines and alone reach large ``|x|``: together the lines bend
# into an S, which the least-squares ``A tanh(alpha x)`` fits.
tokens = torch.randn(64, 64)  # (tokens, D)
tokens[:, [3, 17]] = torch.tensor([1.0, -1.0]) * 30 * torch.rand(64, 2) ** 2
out = nn.functional.layer_norm(tokens, (64,))  # (tokens, D)
xf, yf = tokens.flatten().double(), out.flatten().double()
grid_a = torch.logspace(-3, 1, 201, dtype=torch.float64)  # alpha's grid
tanhs = torch.tanh(grid_a[:, None] * xf)  # (201, N)
A = (tanhs @ yf) / (tanhs * tanhs).sum(1)  # the best A for each alpha, closed form
k = ((A[:, None] * tanhs - yf) ** 2).sum(1).argmin()
fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
ax.scatter(xf, yf, s=2, alpha=0.3, label="LayerNorm, every (input, output)")
xs = torch.linspace(xf.min().item(), xf.max().item(), 200, dtype=torch.float64)
ax.plot(xs, A[k] * torch.tanh(grid_a[k] * xs), color="black",
        label=f"{A[k]:.2f} tanh({grid_a[k]:.3f} x)")
ax.set(xlabel="LayerNorm input", ylabel="output (no affine)",
       title="tokens of different sizes: LayerNorm's lines draw an S, a tanh")
ax.legend(fontsize=8, markerscale=3)
plt.show()

# %%
# From scratch
# ------------
# A learnable scalar ``alpha`` (0.5 at init in the paper's reference code) sets where
# the tanh bends; ``weight`` and ``bias`` ``(D,)`` are LayerNorm's affine, ones and
# zeros at init.


class DyT(nn.Module):
    """gamma * tanh(alpha * x) + beta over the last dim; x: (..., D)."""

    def __init__(self, D, alpha_init=0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((), alpha_init))
        self.weight = nn.Parameter(torch.ones(D))
        self.bias = nn.Parameter(torch.zeros(D))

    def forward(self, x):  # (..., D) -> (..., D)
        return self.weight * torch.tanh(self.alpha * x) + self.bias


# %%
# Shared with LayerNorm: a bounded output
# ---------------------------------------
# Both squash, however large one feature grows: LayerNorm without its affine to
# :math:`\sqrt{D - 1}`, tanh to 1. (Our DyT moves off its init: ``alpha = 1.7``, a
# random affine.)
B, L, D = 2, 5, 8
dyt = DyT(D).to(device)
with torch.no_grad():
    dyt.alpha.fill_(1.7)
    dyt.weight.copy_(torch.randn(D, device=device))
    dyt.bias.copy_(torch.randn(D, device=device))
ln_plain = nn.LayerNorm(D, elementwise_affine=False).to(device)
base = torch.linspace(-1, 1, D, device=device)  # (D,)
for big in (10.0, 100.0, 1000.0):
    v = base.clone()
    v[0] = big
    y_ln, y_dyt = ln_plain(v)[0].item(), torch.tanh(dyt.alpha * v[0]).item()
    print(f"outlier {big:6.1f}: LN output {y_ln:.4f} (cap sqrt(D - 1) = "
          f"{(D - 1) ** 0.5:.4f}), DyT {y_dyt:.6f} (cap 1)")
    assert y_ln <= (D - 1) ** 0.5  # LayerNorm's cap; tanh's, 1, holds by definition
    assert y_dyt > 1 - 1e-6  # the outlier itself is squashed to tanh's cap

# %%
# Not shared: shift and scale invariance
# --------------------------------------
# LayerNorm subtracts the token's mean and divides by its standard deviation: adding
# ``c`` to every feature of a token changes nothing, nor (up to ``eps``) does
# multiplying it by ``k > 0``. DyT has no statistics to absorb either change (float64,
# random affines, DyT's alpha at 1.7).
ln = nn.LayerNorm(D).to(device).double()
dyt64 = DyT(D).to(device).double()
with torch.no_grad():
    for m in (ln, dyt64):
        m.weight.copy_(torch.randn(D, device=device))
        m.bias.copy_(torch.randn(D, device=device))
    dyt64.alpha.fill_(1.7)
x64 = 0.03 * torch.randn(4, D, device=device, dtype=torch.float64)  # (L, D), var ~1e-3
c, k = 3.0, 5.0
with torch.no_grad():
    shift_ln = (ln(x64 + c) - ln(x64)).abs().max().item()
    shift_dyt = (dyt64(x64 + c) - dyt64(x64)).abs().max().item()
    scale_dyt = (dyt64(k * x64) - dyt64(x64)).abs().max().item()
print(f"x + {c}: max|LN change| {shift_ln:.1e}, max|DyT change| {shift_dyt:.2f}; "
      f"{k} x: max|DyT change| {scale_dyt:.2f}")
torch.testing.assert_close(ln(x64 + c), ln(x64))
assert shift_dyt > 0.5 and scale_dyt > 0.1  # DyT's outputs move (printed above)

# %%
# On one token LayerNorm is a line, DyT a curve
# ---------------------------------------------
# A token of mean 0 and standard deviation ``s``: LayerNorm maps it by the line
# :math:`x \mapsto x / \sqrt{s^2 + \epsilon}`, however large a feature. DyT at init
# (``alpha`` 0.5, identity affine) is the line ``0.5 x`` only near 0, saturates at 1.
ln_id = nn.LayerNorm(D, elementwise_affine=False).to(device)
dyt_id = DyT(D).to(device)
z = torch.linspace(-1, 2, D, device=device)
z = (z - z.mean()) / z.std(unbiased=False)  # (D,), mean 0, std 1
for s in (0.1, 4.0):
    xt = s * z
    with torch.no_grad():
        y_ln, y_dyt = ln_id(xt), dyt_id(xt)
    slope = 1 / (s**2 + ln_id.eps) ** 0.5
    lin_dyt = (y_dyt - 0.5 * xt).abs().max().item()
    print(f"s = {s}: max|LN - x/sqrt(s^2+eps)| "
          f"{(y_ln - slope * xt).abs().max().item():.1e}; "
          f"max|DyT - 0.5 x| {lin_dyt:.1e}")
    torch.testing.assert_close(y_ln, slope * xt)
    if s == 4.0:
        assert lin_dyt > 1.0  # tanh stays below 1 where the line 0.5 x exceeds 2
    else:
        assert lin_dyt < 1e-3  # near 0 DyT is the line 0.5 x

# %%
# Proof: the S on a random pre-LN stack, and the fitted tanh
# ----------------------------------------------------------
# The paper's motivating figure plots, for trained models, each LayerNorm's input
# against its output (before the affine) and finds tanh-like S-curves. Here the
# activations come from 8 random pre-LN ``nn.TransformerEncoderLayer`` blocks (D = 64,
# 4 heads), not a trained model. Trained Transformers carry a few outlier channels of
# very large size (:footcite:t:`Sun2024`, "Massive Activations"); a random stack does
# not grow them, so two are planted in the embedding, with a size that varies from token
# to token. We record the input of the last block's first LayerNorm with a hook.


def stack_activations(seed, B, L, D, Nh, depth, outliers, device, same_size=False):
    """Input and output (before the affine) of the last block's first LayerNorm:
    (B*L, D) each, one row per token; outliers: the planted channels (two)."""
    torch.manual_seed(seed)
    blocks = nn.Sequential(*[
        nn.TransformerEncoderLayer(D, Nh, dim_feedforward=4 * D, dropout=0.0,
                                   batch_first=True, norm_first=True)
        for _ in range(depth)]).to(device)
    emb = torch.randn(B, L, D, device=device)  # (B, L, D)
    sign = torch.tensor([1.0, -1.0], device=device)  # channel 3 positive, 17 negative
    size = 30 * torch.rand(B, L, 2, device=device) ** 2  # 0 to 30, per token
    if same_size:
        size = torch.full_like(size, 15.0)  # the control: one size for every token
    emb[:, :, outliers] = sign * size
    seen = {}
    norm = blocks[-1].norm1
    hook = norm.register_forward_hook(lambda m, i, o: seen.update(x=i[0], y=o))
    with torch.no_grad():
        blocks(emb)
        hook.remove()
        y = (seen["y"] - norm.bias) / norm.weight  # before the affine (here 1, 0)
    return seen["x"].reshape(-1, D), y.reshape(-1, D)  # (B*L, D): one row per token


stack = dict(B=4, L=32, D=64, Nh=4, depth=8, outliers=[3, 17], device=device)
xa, ya = stack_activations(0, **stack)
slopes = 1 / (xa.var(-1, unbiased=False) + 1e-5).sqrt()  # (B*L,): each token's line
print(f"{xa.shape[0]} tokens x {xa.shape[1]} channels; input range "
      f"[{xa.min().item():.1f}, {xa.max().item():.1f}], output range "
      f"[{ya.min().item():.2f}, {ya.max().item():.2f}]")
print(f"per-token slope 1/std from {slopes.min().item():.2f} "
      f"to {slopes.max().item():.2f}")

# %%
# Fit ``A * tanh(alpha x)`` by least squares: for each ``alpha`` on a grid the best
# ``A`` is closed form, :math:`A = \langle y, t\rangle / \langle t, t\rangle` with
# :math:`t = \tanh(\alpha x)`; keep the ``alpha`` with the least squared error. The
# alternatives are the identity and the best straight line ``a x``, the best a linear
# map can do. Errors are RMS over all points and over the tail ``|x| > 10`` (outlier
# channels only).


def fit_tanh(xa, ya):
    """Least-squares alpha, A of A tanh(alpha x); slope a of the best line; RMS."""
    xf, yf = xa.flatten().double(), ya.flatten().double()
    alphas = torch.logspace(-3, 1, 401, dtype=torch.float64, device=xf.device)
    tanhs = torch.tanh(alphas[:, None] * xf)  # (401, N)
    A = (tanhs @ yf) / (tanhs * tanhs).sum(1)
    best = ((A[:, None] * tanhs - yf) ** 2).sum(1).argmin()
    alpha, A = alphas[best].item(), A[best].item()
    a = (xf @ yf / (xf @ xf)).item()
    tail = xf.abs() > 10
    rms = {}
    for name, pred in (("tanh", A * torch.tanh(alpha * xf)), ("line", a * xf),
                       ("identity", xf)):
        r = pred - yf
        rms[name] = (r.pow(2).mean().sqrt().item(), r[tail].pow(2).mean().sqrt().item())
    return alpha, A, a, rms, best.item()


# %%
# The cloud per channel. Every token lies on its own line through its mean, with slope
# one over its standard deviation; tokens with large outliers have a large standard
# deviation, so their points are flat, and only they reach large ``|x|``: together the
# lines draw an S. The fitted tanh follows it; the best line cannot.
alpha_fit, g_fit, a_lin, _, _ = fit_tanh(xa, ya)  # seed 0, the stack plotted

fig, ax = plt.subplots(figsize=(6.4, 4.2))
xc, yc = xa.cpu(), ya.cpu()
normal = [i for i in range(xa.shape[1]) if i not in stack["outliers"]]
ax.scatter(xc[:, normal].flatten(), yc[:, normal].flatten(), s=2, alpha=0.3,
           color="tab:blue", label="ordinary channels")
for i, col in zip(stack["outliers"], ("tab:orange", "tab:red")):
    ax.scatter(xc[:, i], yc[:, i], s=6, color=col, label=f"outlier channel {i}")
grid = torch.linspace(xc.min().item(), xc.max().item(), 200, dtype=torch.float64)
ax.plot(grid, g_fit * torch.tanh(alpha_fit * grid), color="black",
        label=f"{g_fit:.2f} tanh({alpha_fit:.3f} x)")
ax.plot(grid, a_lin * grid, color="gray", linestyle="--", label="best line")
ax.set_xlabel("LayerNorm input")
ax.set_ylabel("LayerNorm output (before the affine)")
ax.set_title("LayerNorm's map on a random pre-LN stack is an S: tanh fits it")
ax.legend(fontsize=8, markerscale=2)
plt.show()


# %%
# Proof: the fit on three seeds of the stack
# ------------------------------------------
# The same fit on three seeds: tanh beats the best line over all points and, by far,
# in the tail; the ranges quoted in the chapter are these seeds' own.
print("seed  alpha    A      slope   RMS all: tanh  line  id.   |x|>10: tanh  line")
alphas, ratio_all, ratio_tail, line_all = [], [], [], []  # one entry per seed
for seed in (0, 1, 2):
    x_s, y_s = stack_activations(seed, **stack)
    alpha, A, a, rms, best = fit_tanh(x_s, y_s)
    assert 0 < best < 400  # the optimum is inside the alpha grid, not at an end
    assert rms["line"][0] < y_s.pow(2).mean().sqrt()  # a fit beats predicting 0
    print(f"{seed:4d}  {alpha:.4f}  {A:.3f}  {a:.4f}  {rms['tanh'][0]:13.3f} "
          f"{rms['line'][0]:5.3f} {rms['identity'][0]:5.2f} {rms['tanh'][1]:13.3f} "
          f"{rms['line'][1]:5.3f}")
    assert rms["tanh"][0] < 0.9 * rms["line"][0] < rms["identity"][0]
    assert rms["tanh"][1] < 0.7 * rms["line"][1]  # the tail: tanh far better
    alphas.append(alpha)
    ratio_all.append(rms["tanh"][0] / rms["line"][0])
    ratio_tail.append(rms["tanh"][1] / rms["line"][1])
    line_all.append(rms["line"][0])
alpha_lo, alpha_hi = min(alphas), max(alphas)
ratio_all_lo, ratio_all_hi = min(ratio_all), max(ratio_all)
ratio_tail_lo, ratio_tail_hi = min(ratio_tail), max(ratio_tail)
line_lo, line_hi = min(line_all), max(line_all)
quoted = [(alphas, alpha_lo, alpha_hi), (ratio_all, ratio_all_lo, ratio_all_hi),
          (ratio_tail, ratio_tail_lo, ratio_tail_hi), (line_all, line_lo, line_hi)]
for values, lo, hi in quoted:
    assert all(lo <= v <= hi for v in values)  # the ranges quoted are the seeds' own
print(f"tanh / line RMS: all points {ratio_all_lo:.2f} to {ratio_all_hi:.2f}, "
      f"|x| > 10 {ratio_tail_lo:.2f} to {ratio_tail_hi:.2f}")

# %%
# Proof: equal to the paper's reference, in both layouts
# ------------------------------------------------------
# The paper's reference code (``dynamic_tanh.py`` of facebookresearch/DynamicTanh)
# squashes first, then applies the affine either channels last, ``(B, L, D)`` for
# tokens, or channels first, ``(B, C, H, W)`` for ConvNeXt, with the per-channel
# parameters broadcast as ``weight[:, None, None]``. First a fresh DyT against the
# reference's defaults (its init draws nothing at random).
ALPHA_INIT_REFERENCE = 0.5  # DynamicTanh(..., alpha_init_value=0.5) in dynamic_tanh.py
fresh = DyT(D).to(device)
alpha_init = fresh.alpha.item()
print(f"fresh: alpha {alpha_init} (reference default {ALPHA_INIT_REFERENCE}), weight "
      f"{tuple(fresh.weight.shape)}, bias {tuple(fresh.bias.shape)}")
assert alpha_init == ALPHA_INIT_REFERENCE  # the module's initial alpha
assert torch.equal(fresh.weight, torch.ones(D, device=device))  # LayerNorm's init
assert torch.equal(fresh.bias, torch.zeros(D, device=device))

# %%
# The function below writes the reference out, with tanh spelled as
# :math:`1 - 2 / (e^{2z} + 1)` so that it shares no code with the module. Our DyT's
# parameters are the moved ones above.


def dyt_reference(x, alpha, weight, bias, channels_last):
    """The reference layout: channels_last (..., C) or channels first (B, C, H, W)."""
    t = 1 - 2 / (torch.exp(2 * alpha * x) + 1)  # tanh(alpha x)
    if channels_last:
        return t * weight + bias
    return t * weight[:, None, None] + bias[:, None, None]


# %%
# Channels last, on tokens ``(B, L, D)``:
x = 2 * torch.randn(B, L, D, device=device)  # (B, L, D)
ref = dyt_reference(x, dyt.alpha, dyt.weight, dyt.bias, channels_last=True)
err = (dyt(x) - ref).abs().max().item()
print(f"channels last (B, L, D):    max|ours - reference| = {err:.1e}")
torch.testing.assert_close(dyt(x), ref)

# %%
# On images the reference keeps channels first; ours works on the channels-last view.
# The two layouts compute the same numbers.
C, H, W = D, 3, 4
img = 2 * torch.randn(B, C, H, W, device=device)  # (B, C, H, W)
ref = dyt_reference(img, dyt.alpha, dyt.weight, dyt.bias, channels_last=False)
ours = dyt(img.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # (B, H, W, C) -> (B, C, H, W)
err = (ours - ref).abs().max().item()
print(f"channels first (B, C, H, W): max|ours - reference| = {err:.1e}")
torch.testing.assert_close(ours, ref)

# %%
# Proof: the same affine, and no coupling between tokens
# ------------------------------------------------------
# Both end in a per-channel ``weight`` and ``bias`` of shape ``(D,)``, and neither mixes
# tokens: in the Jacobian of a ``(L, D)`` input's output, the block of output token
# ``i`` against input token ``j`` is non-zero exactly when ``i = j``. Inside a token
# they differ: LayerNorm's Jacobian block is dense (every feature moves the mean and
# the variance), DyT's is diagonal, with
# :math:`\gamma_i \alpha (1 - \tanh^2(\alpha x_i))` on the diagonal. Computed in
# float64 with ``torch.autograd.functional.jacobian``.
from torch.autograd.functional import jacobian

print(f"affine: LayerNorm {tuple(ln.weight.shape)}, DyT {tuple(dyt64.weight.shape)}")
assert ln.weight.shape == dyt64.weight.shape == (D,)
assert ln.bias.shape == dyt64.bias.shape == (D,)
xs = torch.randn(3, D, device=device, dtype=torch.float64)  # (L, D), L = 3 tokens
J_ln = jacobian(ln, xs)  # (L, D, L, D)
J_dyt = jacobian(dyt64, xs)  # (L, D, L, D)
dep_ln = J_ln.abs().sum(dim=(1, 3))  # (L, L): how much out[i] moves with in[j]
dep_dyt = J_dyt.abs().sum(dim=(1, 3))  # (L, L)
print("sum |d out[token i] / d in[token j]|, rows i, columns j:")
for name, dep in (("LayerNorm", dep_ln), ("DyT", dep_dyt)):
    print(f"  {name:9s} {[[round(v, 2) for v in row] for row in dep.tolist()]}")
self_only = torch.eye(3, dtype=torch.bool, device=device)
for dep in (dep_ln, dep_dyt):
    assert (dep[~self_only] == 0).all()  # exactly: no token reads another
    assert (dep[self_only] > 1).all()  # each token reads itself (printed above)

# %%
# Within token 0: DyT's block is the diagonal the formula says, LayerNorm's is not
# diagonal at all.
block_ln, block_dyt = J_ln[0, :, 0, :], J_dyt[0, :, 0, :]  # (D, D)
off = ~torch.eye(D, dtype=torch.bool, device=device)
diag = dyt64.weight * dyt64.alpha * (1 - torch.tanh(dyt64.alpha * xs[0]) ** 2)
print(f"within a token: max off-diagonal |J| "
      f"LN {block_ln[off].abs().max().item():.3f}, "
      f"DyT {block_dyt[off].abs().max().item()}")
torch.testing.assert_close(block_dyt, torch.diag(diag).detach())
assert block_dyt[off].abs().max() == 0  # exactly diagonal
assert block_ln[off].abs().max() > 0.05  # each feature moves the others

# %%
# Proof: LayerNorm's cap is reached; scaling x by k only rescales eps
# -------------------------------------------------------------------
# The cap :math:`\sqrt{D - 1}` is reached when one feature is an outlier and the others
# are equal. Multiplying a token by ``k`` changes only the weight of ``eps``:
# :math:`\mathrm{LN}_\epsilon(kx) = \mathrm{LN}_{\epsilon/k^2}(x)` exactly, asserted
# with ``F.layer_norm`` on the float64 inputs above (variance about 1e-3, where eps is
# 1 %), so that it fails if eps were dropped or put outside the square root.
v = torch.zeros(D, device=device)
v[0] = 1000.0
print(f"one outlier, the others equal: LN output {ln_plain(v)[0].item():.4f}")
torch.testing.assert_close(ln_plain(v)[0], torch.tensor((D - 1) ** 0.5, device=device))
with torch.no_grad():
    ln_kx = ln(k * x64)
    ln_eps = nn.functional.layer_norm(x64, (D,), ln.weight, ln.bias, eps=ln.eps / k**2)
    eps_gap = (ln_kx - ln(x64)).abs().max().item()
print(f"{k} x: max|LN(kx) - LN_eps/k^2(x)| {(ln_kx - ln_eps).abs().max().item():.1e}")
torch.testing.assert_close(ln_kx, ln_eps)
print(f"LN(kx) - LN(x) at variance 1e-3, where eps is 1 %: {eps_gap:.1e}")
assert eps_gap > 1e-3  # LN(kx) = LN(x) holds only up to eps

# %%
# Try it: give every token the same outlier size. Is the cloud still an S?
# ------------------------------------------------------------------------
# Plant the same two outliers at one size (15) in every token and fit again.

# %%
# The control: the same outliers, at one size (15) in every token. Now every token has
# about the same standard deviation, hence the same slope, and the cloud is a line: the
# least-squares ``alpha`` runs to the grid's lower end (where ``A tanh(alpha x)`` is the
# line ``A alpha x``) and the line's error is several times smaller than above. The S
# comes from tokens of different scales, not from the outliers alone.
control = {}  # seed -> the best line's RMS error
for seed in (0, 1, 2):
    alpha, A, a, rms, _ = fit_tanh(*stack_activations(seed, **stack, same_size=True))
    control[seed] = rms["line"][0]
    print(f"one size, seed {seed}: best alpha {alpha:.0e} (grid from 1e-3), "
          f"RMS: tanh {rms['tanh'][0]:.4f}, line {rms['line'][0]:.4f}")
    assert alpha < 2e-3  # the grid's lower end: tanh(alpha x) is a line here
    assert control[seed] < line_lo / 3  # the line fits several times better than above
control_lo, control_hi = min(control.values()), max(control.values())
assert all(control_lo <= c <= control_hi for c in control.values())  # the range quoted

# %%
# References
# ----------
# DyT: :footcite:t:`Zhu2025`, and its reference code, ``dynamic_tanh.py`` of
# facebookresearch/DynamicTanh.
#
# .. footbibliography::
