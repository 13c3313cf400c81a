"""
RoPE inside attention
=====================

RoPE goes into self-attention between the projections and the attention product: after
the per-head :doc:`QK-norm </generated/normalization/plot_10_qk_norm>`, on ``q`` and
``k`` but never on ``v``. This page builds that layer, proves it equal to a manual path
of explicit rotation matrices, and shows that its output depends on positions only
through their differences.

**You will learn**

- where RoPE sits in a self-attention layer: after the QK-norm, on q and k only
- why the layer's output is unchanged when every position moves by the same amount
- how to check the layer against explicit rotation matrices
- what goes wrong when the norm comes after RoPE, when v is rotated, or with an
  absolute embedding instead

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (RoPE),
:doc:`/generated/transformer/plot_02_multihead_attention` (multi-head attention).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# The notes' self-attention has a step 2, "QK norm and positional encoding", and
# leaves the positional encoding empty. RoPE fills it: each head's query and key are
# normalized, then rotated by their positions, so the logit of query position
# :math:`m` and key position :math:`n` is
#
# .. math::
#
#    \ell_{mn} = \frac{\langle R_m\, \mathrm{LN}(q_m),\;
#    R_n\, \mathrm{LN}(k_n) \rangle}{\sqrt{D_h}}
#    = \frac{\langle \mathrm{LN}(q_m),\; R_{n-m}\, \mathrm{LN}(k_n)
#    \rangle}{\sqrt{D_h}},
#
# a function of the offset :math:`n - m`; the values ``v`` are averaged as they are.
boxes = {  # name: (x, y, text)
    "x": (0.0, 1.0, "tokens x\n(B, L, D)"),
    "qkv": (1.6, 1.0, "qkv_proj\nsplit heads"),
    "qn": (3.3, 2.0, "q_norm\n(LayerNorm)"),
    "kn": (3.3, 1.0, "k_norm\n(LayerNorm)"),
    "qr": (5.0, 2.0, "RoPE\nturn by pos"),
    "kr": (5.0, 1.0, "RoPE\nturn by pos"),
    "v": (4.15, 0.0, "v: never rotated"),
    "sdpa": (6.8, 1.0, "scaled dot-\nproduct\nattention"),
    "out": (8.4, 1.0, "out_proj\n(B, L, D)"),
}
arrows = [("x", "qkv"), ("qkv", "qn"), ("qkv", "kn"), ("qkv", "v"), ("qn", "qr"),
          ("kn", "kr"), ("qr", "sdpa"), ("kr", "sdpa"), ("v", "sdpa"), ("sdpa", "out")]
fig, ax = plt.subplots(figsize=(10, 3.6))
for name, (bx, by, text) in boxes.items():
    color = "#f4c7a1" if name in ("qr", "kr") else "#cfe0f3"
    ax.text(bx, by, text, ha="center", va="center", fontsize=9,
            bbox=dict(boxstyle="round,pad=0.4", fc=color, ec="0.3"))
for a, b in arrows:
    (xa, ya, _), (xb, yb, _) = boxes[a], boxes[b]
    ax.annotate("", (xb - 0.55, yb), (xa + 0.55, ya),
                arrowprops=dict(arrowstyle="-|>", color="0.3"))
ax.text(5.0, 2.55, "pos (L,)", ha="center", fontsize=9, color="tab:red")
ax.set_xlim(-0.7, 9.1)
ax.set_ylim(-0.5, 2.8)
ax.axis("off")
ax.set_title("RoPE sits after the QK-norm, on q and k only: the logits see n - m")
plt.show()

# %%
# From scratch
# ------------
# RoPE in the book's adjacent-pair convention (pairs :math:`(2i, 2i+1)` turned by
# ``pos * inv_freq[i]``), in its complex form from the previous page. The layer is the
# Transformer chapter's
# :doc:`self-attention </generated/transformer/plot_01_self_attention>` with RoPE added
# in step 2, after the QK-norm.


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# Copied from positional/plot_04_rope.py: rope_complex
def rope_complex(x, pos, base=10000.0):
    """Adjacent pairs as complex numbers times exp(1j pos inv_freq).

    x (..., L, Dh), pos (L,) -> (..., L, Dh)."""
    Dh = x.shape[-1]
    inv_freq = rope_inv_freq(Dh, base, x.dtype).to(x.device)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * inv_freq[None, :]  # (L, Dh/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # (L, Dh/2), |.| = 1
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2))  # (..., L, Dh/2)
    return torch.view_as_real(z * rotation).flatten(-2)  # (..., L, Dh/2, 2) -> Dh


class RoPEQKNormAttention(torch.nn.Module):
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
        q = rope_complex(self.q_norm(q), pos)  # norm, then RoPE
        k = rope_complex(self.k_norm(k), pos)
        return self.attend(q, k, v, is_causal)  # v is never rotated


# %%
B, L, D, Nh = 2, 12, 64, 4
Dh = D // Nh
layer = RoPEQKNormAttention(D, Nh).to(device)
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
# Only relative positions matter
# ------------------------------
# The logits are ``<R_m q_m, R_n k_n> = <q_m, R_(n-m) k_n>``, so moving every position
# by the same ``s`` leaves logits, weights and the whole output unchanged, causal or
# not. In float32 the rounding of the angles ``(p + s) * inv_freq`` grows with ``|s|``
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
# Proof: equal to a manual path with rotation matrices
# ----------------------------------------------------
# An independent reference: RoPE written as what it is, a block-diagonal matrix
# :math:`R_p` of 2x2 rotations, one block per adjacent pair, built entry by entry with
# Python's ``math`` from RoFormer's :math:`\theta_i = 10000^{-2i / D_h}`. The rest is
# spelled out too: projections by row blocks of ``qkv_proj.weight``, LayerNorm from its
# formula, ``einsum`` logits over :math:`\sqrt{D_h}`, a :math:`-\infty` mask above the
# diagonal (the :doc:`causal mask </generated/transformer/plot_04_causal_attention>`),
# softmax.
def rotation_matrices(pos, Dh, device=None):
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


# Copied from normalization/plot_04_layernorm.py: layer_norm
def layer_norm(x, weight, bias, eps=1e-5):
    """Normalize over x's last weight.dim() dims; weight, bias: that trailing shape."""
    dims = list(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def manual_attention(layer, x, pos, is_causal=False):
    """layer(x, pos, is_causal) computed with nothing fused. (B, L, D) -> (B, L, D)."""
    B, L, D = x.shape
    Nh = layer.Nh
    Dh = D // Nh
    W, b = layer.qkv_proj.weight, layer.qkv_proj.bias  # (3D, D), (3D,)

    def heads(rows):  # rows of W -> (B, Nh, L, Dh)
        return (x @ W[rows].T + b[rows]).reshape(B, L, Nh, Dh).transpose(1, 2)

    q, k, v = heads(slice(0, D)), heads(slice(D, 2 * D)), heads(slice(2 * D, 3 * D))
    R = rotation_matrices(pos, Dh, x.device)  # (L, Dh, Dh)
    qn, kn = layer.q_norm, layer.k_norm
    q = layer_norm(q, qn.weight, qn.bias, qn.eps)  # (B, Nh, L, Dh)
    k = layer_norm(k, kn.weight, kn.bias, kn.eps)
    q = torch.einsum("lij,bhlj->bhli", R, q)  # (B, Nh, L, Dh), q_l turned by R_l
    k = torch.einsum("lij,bhlj->bhli", R, k)
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
    if is_causal:
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
        logits = logits.masked_fill(future, float("-inf"))
    out = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
    out = out.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
    return out @ layer.out_proj.weight.T + layer.out_proj.bias


# %%
# The layer calls ``scaled_dot_product_attention``, which picks a fused kernel by
# device, dtype and mask (on CUDA in float32 the memory-efficient one; see
# :doc:`SDPA's backends </generated/transformer/plot_13_sdpa_backends_flex>`); the
# manual path fuses nothing. Both are float32, compared at float32's default tolerances
# on every device (on CUDA, matmuls run in full float32 by PyTorch's default; TF32, if
# switched on, would round the rotation matrices).
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
# Proof: identical tokens give a Toeplitz logit map
# -------------------------------------------------
# Give every position the same token. Before RoPE all queries are equal and all keys are
# equal, so the logit between positions :math:`m` and :math:`n` is
# :math:`\langle q, R_{n-m} k \rangle / \sqrt{D_h}`: a function of :math:`n - m` alone.
# The ``(L, L)`` logit matrix is therefore Toeplitz, constant along every diagonal; the
# only thing that tells the tokens apart is where they are relative to each other.
L_fig = 40
same = torch.randn(1, 1, D, device=device).expand(1, L_fig, D)  # (1, L, D), equal rows
pos_fig = torch.arange(L_fig, device=device)  # (L,)
with torch.no_grad():
    q, k, _ = layer.project(same)  # each (1, Nh, L, Dh)
    q = rope_complex(layer.q_norm(q), pos_fig)  # (1, Nh, L, Dh)
    k = rope_complex(layer.k_norm(k), pos_fig)
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
# Try it: RoPE first, then the norm. Is the output the same?
# ----------------------------------------------------------
# Swap step 2's order: rotate ``q`` and ``k`` first, then apply the QK-norm.

# %%
# The notes' step 2 reads "QK norm and positional encoding", in that order, and models
# that combine the two (Qwen3, OLMo 2) apply the norm first. The order matters:
# :doc:`LayerNorm </generated/normalization/plot_04_layernorm>` subtracts the mean over
# the ``Dh`` channels and applies a per-channel weight and bias, and a rotation of the
# pairs changes that mean and moves values between channels with different weights.
with torch.no_grad():
    q, k, v = layer.project(x)  # each (B, Nh, L, Dh)
    q_nr, k_nr = rope_complex(layer.q_norm(q), pos), rope_complex(layer.k_norm(k), pos)
    q_rn = layer.q_norm(rope_complex(q, pos))  # (B, Nh, L, Dh)
    k_rn = layer.k_norm(rope_complex(k, pos))
    norm_then_rope = layer.attend(q_nr, k_nr, v)  # (B, L, D)
    rope_then_norm = layer.attend(q_rn, k_rn, v)  # (B, L, D)
torch.testing.assert_close(norm_then_rope, y)  # the layer's order
gap = (norm_then_rope - rope_then_norm).abs().max().item()
print(f"max|norm then RoPE - RoPE then norm| = {gap:.2f}")
assert gap > 0.05, "QK-norm and RoPE commute?"

# %%
# The culprit is the mean:
# :doc:`RMSNorm </generated/normalization/plot_05_groupnorm_rmsnorm>` without a weight
# subtracts none and divides by the root mean square, which a rotation leaves unchanged,
# so it commutes with RoPE. (A learned per-channel weight, as in Qwen3's RMSNorm, breaks
# this again unless it is equal within each pair.)
rms = torch.nn.RMSNorm(Dh, elementwise_affine=False).to(device)
with torch.no_grad():
    a, b = rope_complex(rms(q), pos), rms(rope_complex(q, pos))  # (B, Nh, L, Dh) each
print(f"RMSNorm: max|norm then RoPE - RoPE then norm| = {(a - b).abs().max():.2e}")
torch.testing.assert_close(a, b)

# %%
# Try it: rotate v too. Does the output change?
# ---------------------------------------------
# Apply RoPE to the values as well and attend.

# %%
# RoPE makes the *logits* position-aware; the values are what attention averages.
# Rotating ``v`` too would turn every value by its own token's position and change the
# output.
with torch.no_grad():
    q_r, k_r = rope_complex(layer.q_norm(q), pos), rope_complex(layer.k_norm(k), pos)
    v_rotated = layer.attend(q_r, k_r, rope_complex(v, pos))  # (B, L, D)
gap = (v_rotated - y).abs().max().item()
print(f"max|v rotated too - layer| = {gap:.2f}")
assert gap > 0.05, "rotating v no longer changes the output?"

# %%
# Try it: an absolute embedding instead of RoPE. Is the output still shift-invariant?
# -----------------------------------------------------------------------------------
# Add the sinusoidal embedding (:doc:`plot_02_sinusoidal`) to ``x`` and run the same
# layer without RoPE, at ``pos`` and at ``pos + s``.

# %%
# No: an absolute embedding added to the tokens has no such property. Take Vaswani et
# al.'s sinusoidal embedding (sin on even, cos on odd channels; checked here against the
# paper's formula at positions 1 and 111, the largest this cell uses), add it to ``x``,
# and run the same layer without RoPE: shifting the positions changes what every token
# is, so the output moves.


# Copied from positional/plot_02_sinusoidal.py: sinusoidal_pe
def sinusoidal_pe(positions, D, base=10000.0, dtype=torch.float32):
    """positions (...,) integers -> (..., D): channels 2i, 2i+1 = sin, cos of p w_i."""
    i = torch.arange(D // 2, device=positions.device, dtype=dtype)  # (D/2,)
    w = base ** (-2 * i / D)  # (D/2,)
    angles = positions.to(dtype)[..., None] * w  # (..., D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., D)


# %%
paper = torch.zeros(2, D, device=device)  # (2, D)
for row, p in enumerate((1, 111)):
    for i in range(D // 2):
        paper[row, 2 * i] = math.sin(p / 10000 ** (2 * i / D))
        paper[row, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
ours = sinusoidal_pe(torch.tensor([1, 111], device=device), D)  # (2, D)
torch.testing.assert_close(ours, paper)


# %%
def absolute_pe_attention(layer, x, pos):
    """Attention on x + PE(pos), QK-norm but no RoPE. (B, L, D) -> (B, L, D)."""
    q, k, v = layer.project(x + sinusoidal_pe(pos, x.shape[-1]))  # (B, Nh, L, Dh) each
    return layer.attend(layer.q_norm(q), layer.k_norm(k), v)


# %%
with torch.no_grad():
    moved = absolute_pe_attention(layer, x, pos + s)  # (B, L, D)
    gap = (moved - absolute_pe_attention(layer, x, pos)).abs().max().item()
print(f"absolute PE: max|out(x, pos + {s}) - out(x, pos)| = {gap:.2f}")
assert gap > 0.05, "an absolute PE became shift-invariant?"

# %%
# References
# ----------
# :footcite:t:`Su2021`; :footcite:t:`Vaswani2017`,
# section 3.5. ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm``, ``torch.block_diag``, ``torch.polar``.
#
# .. footbibliography::
