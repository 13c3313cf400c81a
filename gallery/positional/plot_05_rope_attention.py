"""
RoPE inside attention
=====================

The notes' self-attention has a step 2, "QK norm and positional encoding", and leaves
the positional encoding empty. This page fills it with RoPE: after the per-head
QK-norm, on ``q`` and ``k`` but not ``v``, before ``scaled_dot_product_attention``. It
proves the layer equal to a manual path built from explicit rotation matrices (with and
without a causal mask), shows that the order of norm and RoPE matters, and proves that
the output depends on positions only through their differences, which an absolute
embedding added to the tokens does not achieve.
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
# RoPE and the layer
# ------------------
# RoPE in the book's convention (adjacent pairs :math:`(2i, 2i+1)` rotated by
# :math:`p\, \theta_i`), in its complex form from the previous page. The layer is the
# Transformer chapter's corrected self-attention with RoPE added in step 2, after the
# QK-norm.
def rope(x, pos, base=10000.0):
    """Rotate adjacent pairs of x (..., L, Dh) by pos (L,) * theta. Same shape as x."""
    Dh = x.shape[-1]
    two_i = torch.arange(0, Dh, 2, dtype=x.dtype, device=x.device)  # (Dh/2,)
    theta = base ** (-two_i / Dh)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * theta[None, :]  # (L, Dh/2)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2))  # (..., L, Dh/2)
    z = z * torch.polar(torch.ones_like(angles), angles)  # turn each pair by its angle
    return torch.view_as_real(z).flatten(-2)  # (..., L, Dh)


class RoPESelfAttention(torch.nn.Module):
    """QKV projection, QK-norm, RoPE on q and k, attention, output projection."""

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh = Nh
        self.qkv_proj = torch.nn.Linear(D, 3 * D)
        self.out_proj = torch.nn.Linear(D, D)
        self.q_norm = torch.nn.LayerNorm(D // Nh)
        self.k_norm = torch.nn.LayerNorm(D // Nh)

    def project(self, x):
        """Step 1. (B, L, D) -> q, k, v, each (B, Nh, L, Dh)."""
        B, L, D = x.shape
        Nh, Dh = self.Nh, D // self.Nh
        qkv = self.qkv_proj(x).reshape(B, L, 3, Nh, Dh)  # (B, L, 3, Nh, Dh)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, Nh, L, Dh)

    def attend(self, q, k, v, is_causal=False):
        """Steps 3 and 4. (B, Nh, L, Dh) x 3 -> (B, L, D)."""
        B, Nh, L, Dh = q.shape
        sdpa = torch.nn.functional.scaled_dot_product_attention
        out = sdpa(q, k, v, is_causal=is_causal)  # (B, Nh, L, Dh)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, Nh * Dh))  # (B, L, D)

    def forward(self, x, pos, is_causal=False):
        """x (B, L, D), pos (L,) -> (B, L, D)."""
        q, k, v = self.project(x)  # each (B, Nh, L, Dh)
        q, k = rope(self.q_norm(q), pos), rope(self.k_norm(k), pos)  # norm, then RoPE
        return self.attend(q, k, v, is_causal)  # v is never rotated


B, L, D, Nh = 2, 12, 64, 4
Dh = D // Nh
layer = RoPESelfAttention(D, Nh).to(device)
with torch.no_grad():  # trained norms are not at their init (weight 1, bias 0): perturb
    for ln in (layer.q_norm, layer.k_norm):
        ln.weight.normal_(1.0, 0.2)
        ln.bias.normal_(0.0, 0.2)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
pos = torch.arange(L, device=device)  # (L,)
with torch.no_grad():
    y = layer(x, pos)  # (B, L, D)
print(f"output shape {tuple(y.shape)}")
assert y.shape == x.shape

# %%
# A manual path with rotation matrices
# ------------------------------------
# An independent reference: RoPE written as what it is, a block-diagonal matrix
# :math:`R_p` of 2x2 rotations, one block per adjacent pair, built entry by entry with
# Python's ``math`` from RoFormer's :math:`\theta_i = 10000^{-2i / D_h}`. The rest is
# spelled out too: projections by row blocks of ``qkv_proj.weight``, LayerNorm from its
# formula, ``einsum`` logits over :math:`\sqrt{D_h}`, a :math:`-\infty` mask above the
# diagonal, softmax.
import math


def rotation_matrices(pos, Dh):
    """R_p for every position: (L,) -> (L, Dh, Dh), 2x2 rotations on adjacent pairs."""
    mats = []
    for p in pos.tolist():
        blocks = []
        for i in range(Dh // 2):
            a = p * 10000 ** (-2 * i / Dh)
            c, s = math.cos(a), math.sin(a)
            blocks.append(torch.tensor([[c, -s], [s, c]]))
        mats.append(torch.block_diag(*blocks))  # (Dh, Dh)
    return torch.stack(mats).to(device)  # (L, Dh, Dh)


def layer_norm(t, ln):
    """LayerNorm over the last dim from its formula, with ln's eps, weight and bias."""
    mean, var = t.mean(-1, keepdim=True), t.var(-1, unbiased=False, keepdim=True)
    return (t - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def manual_attention(layer, x, pos, is_causal=False):
    """layer(x, pos, is_causal) computed with nothing fused. (B, L, D) -> (B, L, D)."""
    B, L, D = x.shape
    W, b = layer.qkv_proj.weight, layer.qkv_proj.bias  # (3D, D), (3D,)

    def heads(rows):  # rows of W -> (B, Nh, L, Dh)
        return (x @ W[rows].T + b[rows]).reshape(B, L, Nh, Dh).transpose(1, 2)

    q, k, v = heads(slice(0, D)), heads(slice(D, 2 * D)), heads(slice(2 * D, 3 * D))
    R = rotation_matrices(pos, Dh)  # (L, Dh, Dh)
    q = torch.einsum("lij,bhlj->bhli", R, layer_norm(q, layer.q_norm))  # (B, Nh, L, Dh)
    k = torch.einsum("lij,bhlj->bhli", R, layer_norm(k, layer.k_norm))
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
    if is_causal:
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
        logits = logits.masked_fill(future, float("-inf"))
    out = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
    out = out.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
    return out @ layer.out_proj.weight.T + layer.out_proj.bias


# %%
# The layer calls ``scaled_dot_product_attention``, which picks a fused kernel by
# device, dtype and mask (on CUDA in float32 the memory-efficient one; see the
# Transformer chapter); the manual path fuses nothing. Both are float32, compared at
# float32's default tolerances on every device (on CUDA, matmuls run in full float32 by
# PyTorch's default; TF32, if switched on, would round the rotation matrices).
with torch.no_grad():
    for is_causal in (False, True):
        fused = layer(x, pos, is_causal=is_causal)  # (B, L, D)
        manual = manual_attention(layer, x, pos, is_causal=is_causal)
        err = (fused - manual).abs().max().item()
        print(f"is_causal={is_causal!s:5s} max|layer - manual| = {err:.2e}")
        torch.testing.assert_close(fused, manual)

# %%
# The causal mask is not a no-op here: the causal output differs from the full one.
with torch.no_grad():
    gap = (layer(x, pos, is_causal=True) - layer(x, pos)).abs().max().item()
print(f"max|causal - full| = {gap:.2f}")
assert gap > 0.05, "the causal mask no longer changes the output?"

# %%
# Norm first, then RoPE
# ---------------------
# The notes' step 2 reads "QK norm and positional encoding", in that order, and models
# that combine the two (Qwen3, OLMo 2) apply the norm first. The order matters:
# LayerNorm subtracts the mean over the ``Dh`` channels and applies a per-channel weight
# and bias, and a rotation of the pairs changes that mean and moves values between
# channels with different weights.
with torch.no_grad():
    q, k, v = layer.project(x)  # each (B, Nh, L, Dh)
    q_nr, k_nr = rope(layer.q_norm(q), pos), rope(layer.k_norm(k), pos)
    q_rn, k_rn = layer.q_norm(rope(q, pos)), layer.k_norm(rope(k, pos))
    norm_then_rope = layer.attend(q_nr, k_nr, v)  # (B, L, D)
    rope_then_norm = layer.attend(q_rn, k_rn, v)  # (B, L, D)
torch.testing.assert_close(norm_then_rope, y)  # the layer's order
gap = (norm_then_rope - rope_then_norm).abs().max().item()
print(f"max|norm then RoPE - RoPE then norm| = {gap:.2f}")
assert gap > 0.05, "QK-norm and RoPE commute?"

# %%
# The culprit is the mean: RMSNorm without a weight subtracts none and divides by the
# root mean square, which a rotation leaves unchanged, so it commutes with RoPE. (A
# learned per-channel weight, as in Qwen3's RMSNorm, breaks this again unless it is
# equal within each pair.)
rms = torch.nn.RMSNorm(Dh, elementwise_affine=False).to(device)
with torch.no_grad():
    a, b = rope(rms(q), pos), rms(rope(q, pos))  # (B, Nh, L, Dh) each
print(f"RMSNorm: max|norm then RoPE - RoPE then norm| = {(a - b).abs().max():.2e}")
torch.testing.assert_close(a, b)

# %%
# q and k, never v
# ----------------
# RoPE makes the *logits* position-aware; the values are what attention averages.
# Rotating ``v`` too would turn every value by its own token's position and change the
# output.
with torch.no_grad():
    q_r, k_r = rope(layer.q_norm(q), pos), rope(layer.k_norm(k), pos)
    v_rotated = layer.attend(q_r, k_r, rope(v, pos))  # (B, L, D)
gap = (v_rotated - y).abs().max().item()
print(f"max|v rotated too - layer| = {gap:.2f}")
assert gap > 0.05, "rotating v no longer changes the output?"

# %%
# Only relative positions matter
# ------------------------------
# The logits are ``<R_m q_m, R_n k_n> = <q_m, R_(n-m) k_n>``, so moving every position
# by the same ``s`` leaves logits, weights and the whole output unchanged, causal or
# not. In float32 the rounding of the angles ``(p + s) * theta`` grows with ``|s|``
# (previous page); ``s = 100`` keeps it far below the default tolerance.
s = 100
with torch.no_grad():
    for is_causal in (False, True):
        shifted = layer(x, pos + s, is_causal=is_causal)  # (B, L, D)
        ref = layer(x, pos, is_causal=is_causal)
        print(f"is_causal={is_causal!s:5s} max|layer(x, pos + {s}) - layer(x, pos)| = "
              f"{(shifted - ref).abs().max():.2e}")
        torch.testing.assert_close(shifted, ref)


# %%
# An absolute embedding added to the tokens has no such property. Take Vaswani et al.'s
# sinusoidal embedding (sin on even, cos on odd channels; checked here against the
# paper's formula at positions 1 and 111, the largest this cell uses), add it to ``x``,
# and run the same layer without RoPE: shifting the positions changes what every token
# is, so the output moves.
def sinusoidal(pos, D, base=10000.0):
    """Absolute sinusoidal embedding: (L,) -> (L, D)."""
    freq = base ** (-torch.arange(0, D, 2, device=pos.device) / D)  # (D/2,)
    angles = pos[:, None].float() * freq[None, :]  # (L, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (L, D)


paper = torch.zeros(2, D, device=device)  # (2, D)
for row, p in enumerate((1, 111)):
    for i in range(D // 2):
        paper[row, 2 * i] = math.sin(p / 10000 ** (2 * i / D))
        paper[row, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
ours = sinusoidal(torch.tensor([1, 111], device=device), D)  # (2, D)
torch.testing.assert_close(ours, paper)


def absolute_pe_attention(layer, x, pos):
    """Attention on x + PE(pos), QK-norm but no RoPE. (B, L, D) -> (B, L, D)."""
    q, k, v = layer.project(x + sinusoidal(pos, D))  # each (B, Nh, L, Dh)
    return layer.attend(layer.q_norm(q), layer.k_norm(k), v)


with torch.no_grad():
    moved = absolute_pe_attention(layer, x, pos + s)  # (B, L, D)
    gap = (moved - absolute_pe_attention(layer, x, pos)).abs().max().item()
print(f"absolute PE: max|out(x, pos + {s}) - out(x, pos)| = {gap:.2f}")
assert gap > 0.05, "an absolute PE became shift-invariant?"

# %%
# Identical tokens: a Toeplitz logit map
# --------------------------------------
# Give every position the same token. Before RoPE all queries are equal and all keys are
# equal, so the logit between positions :math:`m` and :math:`n` is
# :math:`\langle q, R_{n-m} k \rangle / \sqrt{D_h}`: a function of :math:`n - m` alone.
# The ``(L, L)`` logit matrix is therefore Toeplitz, constant along every diagonal; the
# only thing that tells the tokens apart is where they are relative to each other.
import matplotlib.pyplot as plt

L_fig = 40
same = torch.randn(1, 1, D, device=device).expand(1, L_fig, D)  # (1, L, D), equal rows
pos_fig = torch.arange(L_fig, device=device)  # (L,)
with torch.no_grad():
    q, k, _ = layer.project(same)  # each (1, Nh, L, Dh)
    q, k = rope(layer.q_norm(q), pos_fig), rope(layer.k_norm(k), pos_fig)
    logits = (q[0, 0] @ k[0, 0].T / math.sqrt(Dh)).cpu()  # (L, L), head 0

offset = torch.arange(L_fig)[None, :] - torch.arange(L_fig)[:, None]  # (L, L): n - m
toeplitz = torch.where(offset >= 0, logits[0][offset.clamp(min=0)],
                       logits[:, 0][(-offset).clamp(min=0)])  # from row 0 and column 0
print(f"max|logits - Toeplitz(first row, first column)| = "
      f"{(logits - toeplitz).abs().max():.2e}")
torch.testing.assert_close(logits, toeplitz)
assert logits.std() > 0.1, "the logits are constant: nothing to see"

# A square map: a near-square canvas, no grid over the cells.
fig, ax = plt.subplots(figsize=(5.2, 4.6), layout="constrained")
im = ax.imshow(logits, cmap="RdBu_r", vmin=-logits.abs().max(), vmax=logits.abs().max())
ax.grid(False)
cax = ax.inset_axes([1.04, 0, 0.05, 1])  # a colorbar exactly as tall as the map
fig.colorbar(im, cax=cax, label="logit <R_m q, R_n k> / √Dh")
ax.set_xlabel("key position n")
ax.set_ylabel("query position m")
ax.set_title("Identical tokens with RoPE (head 0):\n"
             "logits depend only on n - m, constant along each diagonal")
plt.show()

# %%
# References
# ----------
# Su et al., "RoFormer" (2021); Vaswani et al., "Attention Is All You Need" (2017),
# section 3.5. ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm``, ``torch.block_diag``, ``torch.polar``.
