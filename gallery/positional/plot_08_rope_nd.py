"""
RoPE for images: N-D axial RoPE
===============================

Image patches have two coordinates, row and column. Axial RoPE splits each head vector
into one block of channels per coordinate and rotates block ``c`` with 1-D RoPE of
coordinate ``c``, so attention logits depend only on the 2-D offset between two patches.

**You will learn**

- how a grid of patches gets integer positions ``I`` of shape ``(N, Nc)``
- how axial RoPE rotates one block of channels per coordinate
- why the logits depend only on the 2-D offset, so shifting the grid changes nothing
- where axial RoPE sits in a self-attention layer (``q`` and ``k`` only)
- what flattening the grid to 1-D positions loses (an exercise)

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (1-D RoPE),
:doc:`/generated/positional/plot_05_rope_attention` (RoPE inside attention),
:doc:`/generated/transformer/plot_02_multihead_attention` (the heads it rotates),
:doc:`/generated/normalization/plot_04_layernorm` (the norm of its layer).
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
# A head vector of patch :math:`n` at grid position :math:`I_n = (i, j)` is cut into a
# row block and a column block; the row block turns with 1-D RoPE of :math:`i`, the
# column block with 1-D RoPE of :math:`j` (:math:`R(p)` rotates each adjacent pair
# :math:`(2k, 2k+1)` by :math:`p\,\omega_k`, :math:`\omega_k = b^{-2k/(D_h/N_c)}`).
# Since rotations compose, a logit sees only the offset:
#
# .. math::
#
#    \mathrm{rope}(x, I_n) = [R(i)\,x^{\mathrm{row}},\ R(j)\,x^{\mathrm{col}}],
#    \qquad
#    \langle \mathrm{rope}(q, I_n), \mathrm{rope}(k, I_m) \rangle
#    = \langle \mathrm{rope}(q, I_n - I_m), k \rangle .
#
# For ``q = k = 1`` (all ones) each pair contributes :math:`2 \cos(\delta\,\omega_k)`: a
# map of the offset alone, centred on the query (drawn from that closed form; a Proof
# shows axial RoPE gives exactly this map).
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

H, W = 16, 16
N, Dh = H * W, 32  # Dh divisible by 2 Nc: each axis gets Dh / 2 = 16 channels, 8 pairs
omega = 10000.0 ** (-torch.arange(0, Dh // 2, 2) / (Dh // 2))  # (8,), per axis
di = torch.arange(H)[:, None] - H // 2  # (H, 1), key row - query row
dj = torch.arange(W)[None, :] - W // 2  # (1, W), key column - query column
closed_map = (2 * torch.cos(di[..., None] * omega).sum(-1)
              + 2 * torch.cos(dj[..., None] * omega).sum(-1))  # (H, W)

# A square map: a near-square canvas, no grid over the cells, integer patch indices,
# and the legend below the axes, off the data.
fig, ax = plt.subplots(figsize=(4.4, 4.4), layout="constrained")
im = ax.imshow(closed_map)
ax.grid(False)
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.yaxis.set_major_locator(MaxNLocator(integer=True))
ax.plot(W // 2, H // 2, "x", color="C3", ms=10, mew=2,
        label=f"query patch ({H // 2}, {W // 2})")
ax.set_xlabel("key column j (patches)")
ax.set_ylabel("key row i (patches)")
ax.set_title("Axial RoPE, identical tokens: the logits depend\n"
             "only on the 2-D offset, centred on the query")
cax = ax.inset_axes([1.04, 0, 0.05, 1])  # a colorbar exactly as tall as the map
fig.colorbar(im, cax=cax, label="logit <rope(q), rope(k)> (q = k = ones)")
fig.legend(loc="outside lower center")
plt.show()


# %%
# Positions of a patch grid
# -------------------------
# Tokens ``(..., N, D)``, integer positions ``I: (N, Nc)``; an ``H x W`` grid read row
# by row has ``Nc = 2``, ``I[i*W + j] = [i, j]``.
def grid_positions(H, W, device=None):
    """Row-major integer positions of an H x W grid: (H*W, 2), row i and column j."""
    rows, cols = torch.arange(H, device=device), torch.arange(W, device=device)
    i, j = torch.meshgrid(rows, cols, indexing="ij")  # each (H, W)
    return torch.stack([i, j], dim=-1).reshape(H * W, 2)  # (N, 2)


# %%
I = grid_positions(H, W, device)  # (N, 2)
print(f"I: {tuple(I.shape)}, I[0] = {I[0].tolist()}, I[W + 3] = {I[W + 3].tolist()}, "
      f"I[-1] = {I[-1].tolist()}")
assert I.shape == (N, 2) and I[W + 3].tolist() == [1, 3]
assert I[-1].tolist() == [H - 1, W - 1]


# %%
# 1-D RoPE, adjacent pairs
# ------------------------
# This page's convention: channels :math:`(2k, 2k+1)` form a pair, read as the complex
# number :math:`x_{2k} + \mathrm{i}\, x_{2k+1}`, and position :math:`p` multiplies it by
# :math:`e^{\mathrm{i} p \omega_k}` with :math:`\omega_k = b^{-2k / D_h}` (base
# :math:`b`, ``base``; RoFormer writes :math:`\theta_k`).
def frequencies(n, base, dtype, device=None):
    """Per-pair frequencies base ** (-2k / n) for k = 0 .. n/2 - 1: (n/2,)."""
    return base ** (-torch.arange(0, n, 2, device=device, dtype=dtype) / n)


def rope_1d(x, pos, base=10000.0):
    """Rotate pairs (2k, 2k+1) of x by pos * freq_k. x (..., N, Dh), pos (N,)."""
    Dh = x.shape[-1]
    inv_freq = frequencies(Dh, base, x.dtype, x.device)  # (Dh/2,)
    angles = pos.to(x.dtype)[:, None] * inv_freq  # (N, Dh/2)
    pairs = x.reshape(*x.shape[:-1], Dh // 2, 2)  # (..., N, Dh/2, 2): pairs (2k, 2k+1)
    z = torch.view_as_complex(pairs)  # (..., N, Dh/2), z_k = x[2k] + 1j x[2k+1]
    rotated = z * torch.polar(torch.ones_like(angles), angles)  # (..., N, Dh/2)
    return torch.view_as_real(rotated).flatten(-2)  # (..., N, Dh)


# %%
# Axial RoPE in Nc dimensions
# ----------------------------
# Split ``Dh`` into ``Nc`` equal blocks; block ``c`` is rotated by 1-D RoPE of
# coordinate ``c``, with its own frequency list :math:`\omega_k = b^{-2k / (D_h/N_c)}`
# over its ``Dh/Nc`` channels (other codes share them differently; the claims hold
# whenever each angle is linear in one coordinate).
def rope_nd(x, I, base=10000.0):
    """Axial RoPE. x (..., N, Dh), I (N, Nc) integer positions -> (..., N, Dh)."""
    Nc, Dh = I.shape[-1], x.shape[-1]
    assert Dh % (2 * Nc) == 0, "each coordinate needs an even number of channels"
    blocks = x.split(Dh // Nc, dim=-1)  # Nc blocks, each (..., N, Dh/Nc)
    return torch.cat([rope_1d(b, I[:, c], base) for c, b in enumerate(blocks)], dim=-1)


def axial_logits(q, k, I):
    """<rope(q_n, I_n), rope(k_m, I_m)> for all pairs: (N, Dh) x 2, (N, Nc) -> (N, N)"""
    return rope_nd(q, I) @ rope_nd(k, I).T


# %%
# Logits depend only on the 2-D offset
# ------------------------------------
# Give every patch the same ``q`` and ``k``: the logit of pair ``(n, m)`` must then be
# ``g(I_n - I_m) = <rope(q, I_n - I_m), k>``, the query rotated by the offset alone.
q1, k1 = torch.randn(Dh, device=device), torch.randn(Dh, device=device)  # (Dh,) each
same = axial_logits(q1.expand(N, Dh), k1.expand(N, Dh), I)  # (N, N)
offsets = (I[:, None, :] - I[None, :, :]).reshape(N * N, 2)  # (N*N, 2), I_n - I_m
relative = (rope_nd(q1.expand(N * N, Dh), offsets) @ k1).reshape(N, N)  # g(I_n - I_m)
print(f"{N * N} pairs: max|logit - g(offset)| = {(same - relative).abs().max():.2e}")
torch.testing.assert_close(same, relative)

# %%
# Inside self-attention
# ---------------------
# RoPE is step 2 of the notes' layer, after
# :doc:`QK-norm </generated/normalization/plot_10_qk_norm>` and before attention: it
# rotates ``q`` and ``k`` of every head (``(B, Nh, N, Dh)``; the positions broadcast
# over batch and heads) and leaves ``v`` alone.
class AxialRoPESelfAttention(torch.nn.Module):
    """Fused QKV, QK-norm, axial RoPE, attention, out_proj. (B, N, D), (N, Nc)."""

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh = Nh
        self.qkv_proj = torch.nn.Linear(D, 3 * D)
        self.out_proj = torch.nn.Linear(D, D)
        self.q_norm = torch.nn.LayerNorm(D // Nh)
        self.k_norm = torch.nn.LayerNorm(D // Nh)

    def forward(self, x, I):
        B, N, D = x.shape
        Nh, Dh = self.Nh, D // self.Nh
        qkv = self.qkv_proj(x).reshape(B, N, 3, Nh, Dh)  # (B, N, 3, Nh, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, Nh, N, Dh)
        q, k = rope_nd(self.q_norm(q), I), rope_nd(self.k_norm(k), I)  # q, k only
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # B, Nh, N, Dh
        return self.out_proj(out.transpose(1, 2).reshape(B, N, D))  # (B, N, D)


# %%
# Proof: shifts of the grid, the figure's map, the layer
# ------------------------------------------------------
#
# The pairs share few offsets
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The ``N * N`` pairs of the check above share only ``(2H - 1)(2W - 1)`` 2-D offsets.
n_offsets = len(offsets.unique(dim=0))
print(f"{N * N} pairs, {n_offsets} distinct 2-D offsets")
assert n_offsets == (2 * H - 1) * (2 * W - 1)

# %%
# Shifting the whole grid changes no logit
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Give every patch its own query and key, and form the ``(N, N)`` logits
# ``<rope(q_n, I_n), rope(k_m, I_m)>``. Moving every patch by ``(di, dj)`` rotates each
# vector by a different amount, yet leaves every logit as it was: only differences of
# angles survive the dot product. float64: the shifted angles reach 300 rad, where
# float32 misses the angles themselves by up to :measured:`angle_err_f32:.1e` rad (its
# frequency and its product each rounded), and the logits then drift beyond float32's
# default tolerance.
p_shift = torch.arange(-300, 301, device=device)  # every coordinate the shift reaches
angle_err_f32 = (  # float32's angles against float64's, every position and frequency
    (p_shift.float()[:, None] * frequencies(Dh // 2, 10000.0, torch.float32, device))
    .double() - p_shift.double()[:, None]
    * frequencies(Dh // 2, 10000.0, torch.float64, device)).abs().max().item()
print(f"float32 angles up to 300 rad miss float64's by up to {angle_err_f32:.1e} rad")
assert angle_err_f32 > 1e-6, "float32 angles this large are not exact"
q64 = torch.randn(N, Dh, device=device, dtype=torch.float64)  # (N, Dh), one per patch
k64 = torch.randn(N, Dh, device=device, dtype=torch.float64)  # (N, Dh)
shift = torch.tensor([100, -300], device=device)


moved = (rope_nd(q64, I + shift) - rope_nd(q64, I)).abs().max().item()
gap = (axial_logits(q64, k64, I + shift) - axial_logits(q64, k64, I)).abs().max().item()
print(f"shift {shift.tolist()}: rotated queries move by up to {moved:.2f}, "
      f"logits by {gap:.2e}")
assert moved > 1.0, "the shift no longer rotates the vectors?"
torch.testing.assert_close(axial_logits(q64, k64, I + shift), axial_logits(q64, k64, I))
q32, k32 = q64.float(), k64.float()  # the same vectors in float32: the drift is real
drift32 = axial_logits(q32, k32, I + shift) - axial_logits(q32, k32, I)  # (N, N)
print(f"in float32 the same shift moves the logits by up to {drift32.abs().max():.1e}")
# torch.testing's float32 tolerances: the drift exceeds them
assert not torch.allclose(axial_logits(q32, k32, I + shift), axial_logits(q32, k32, I),
                          rtol=1.3e-6, atol=1e-5), "float32 suffices after all?"

# %%
# The figure's map is the logits of axial RoPE
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Take ``q = k = 1`` (all ones) for every patch and the patch in the middle of the grid
# as the query. Its logits peak on itself (a rotation can only lower ``<R q, q>``) and
# are point symmetric about it: the map is the function of the offset, drawn around the
# query. It is the closed-form map of the figure above.
ones = torch.ones(N, Dh, device=device)  # (N, Dh), identical tokens
n0 = (H // 2) * W + W // 2  # patch (8, 8)
row = axial_logits(ones, ones, I)[n0].reshape(H, W)  # (H, W): query n0, every key
inner = row[1:, 1:]  # (H-1, W-1): rows/columns 1..15, the box centred on (8, 8)
print(f"query {I[n0].tolist()}: argmax at {I[row.argmax()].tolist()}, "
      f"logit {row.max():.1f} = Dh; "
      f"max|box - box flipped| = {(inner - inner.flip(0, 1)).abs().max().item():.2e}")
assert row.argmax().item() == n0
torch.testing.assert_close(inner, inner.flip(0, 1))
print(f"max|map - closed form of the figure| = "
      f"{(row.cpu() - closed_map).abs().max():.2e}")
torch.testing.assert_close(row.cpu(), closed_map)

# %%
# The layer ignores a shift of the grid, not a transposition
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The layer's output is unchanged by a shift of the grid, but transposing the patch
# positions (reading the image column by column) changes it: positions matter. In
# float64 on every device, for the same large angles as above; whichever kernel
# ``scaled_dot_product_attention`` picks, the shift claim is an exact identity, compared
# at float64's default tolerances.
B, Nh = 2, 4
D = Nh * Dh  # 128
layer = AxialRoPESelfAttention(D, Nh).to(device, torch.float64)  # float64: large angles
patches = torch.randn(B, N, D, device=device, dtype=torch.float64)  # (B, N, D)
with torch.no_grad():
    y, y_shifted = layer(patches, I), layer(patches, I + shift)
    y_transposed = layer(patches, I.flip(1))  # patch n gets [j, i] instead of [i, j]
gap = (y_transposed - y).abs().max().item()
print(f"max|out(shifted grid) - out| = {(y_shifted - y).abs().max().item():.2e}, "
      f"max|out(transposed positions) - out| = {gap:.2e}")
torch.testing.assert_close(y_shifted, y)
assert gap > 0.01, "the layer no longer sees the positions?"

# %%
# Proof: equal to the definitions written out, norms kept
# -------------------------------------------------------
#
# Rotations preserve length
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# Every token keeps its norm, whatever its position.
x = torch.randn(2, N, Dh, device=device, dtype=torch.float64)  # (B, N, Dh)
ours_2d = rope_nd(x, I)  # (B, N, Dh)
norm_gap = (ours_2d.norm(dim=-1) - x.norm(dim=-1)).abs().max().item()
print(f"max| ||rope_nd(x)|| - ||x|| | = {norm_gap:.2e}")
torch.testing.assert_close(ours_2d.norm(dim=-1), x.norm(dim=-1))


# %%
# Axial RoPE equals its definition written out
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The definition written out, sharing no helper with the code above: every angle
# computed one at a time in plain Python from :math:`10000^{-2i / (D_h/N_c)}`, then each
# adjacent pair turned with an explicit cosine and sine (counter-clockwise:
# :math:`(u, w) \mapsto (u \cos\phi - w \sin\phi,\ u \sin\phi + w \cos\phi)`).
# Coordinate ``c`` owns channels ``c*Dh/Nc .. (c+1)*Dh/Nc``: for ``Nc = 2`` the row
# angles come first, then the columns.
def rope_reference(x, I):
    """Axial RoPE from its formula. x (..., N, Dh) float64, I (N, Nc) -> (..., N, Dh)"""
    Dh, Nc = x.shape[-1], I.shape[-1]
    n = Dh // Nc  # channels per coordinate
    angles = [[p * 10000 ** (-2 * i / n) for p in row for i in range(n // 2)]
              for row in I.tolist()]  # N lists of Dh/2 angles, coordinate by coordinate
    angles = torch.tensor(angles, dtype=torch.float64, device=x.device)  # (N, Dh/2)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., N, Dh/2): the adjacent pairs
    cos, sin = angles.cos(), angles.sin()
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], -1)  # (..., N, Dh/2, 2)
    return out.flatten(-2)  # (..., N, Dh)


# %%
# With ``Nc = 1`` (a sequence, ``I[n] = [n]``) axial RoPE is 1-D RoPE over all ``Dh``
# channels. Both agree with the reference, and so does the 2-D case. In float64: the
# sequence positions reach 255, angles of up to 255 rad, which float32 misses by up to
# :measured:`angle_err_255:.1e` rad, and the reference computes its angles in float64.
seq = torch.arange(N, device=device)  # (N,)
angle_err_255 = (  # 1-D RoPE over all Dh channels: float32's angles against float64's
    (seq.float()[:, None] * frequencies(Dh, 10000.0, torch.float32, device)).double()
    - seq.double()[:, None] * frequencies(Dh, 10000.0, torch.float64, device)
).abs().max().item()
print(f"float32 angles up to 255 rad miss float64's by up to {angle_err_255:.1e} rad")
ours_1d = rope_nd(x, seq[:, None])  # I of shape (N, 1)
ref_1d = rope_reference(x, seq[:, None])  # (B, N, Dh)
gap_1d = (ours_1d - rope_1d(x, seq)).abs().max()
print(f"Nc = 1: max|rope_nd - rope_1d| = {gap_1d:.2e}, "
      f"max|rope_nd - reference| = {(ours_1d - ref_1d).abs().max():.2e}")
torch.testing.assert_close(ours_1d, rope_1d(x, seq))
torch.testing.assert_close(ours_1d, ref_1d)

ref_2d = rope_reference(x, I)  # (B, N, Dh)
print(f"Nc = 2: max|rope_nd - reference| = {(ours_2d - ref_2d).abs().max():.2e}")
torch.testing.assert_close(ours_2d, ref_2d)

# %%
# The logit is a row profile plus a column profile
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# "Axial" has a precise meaning here: the row block sees only ``di`` and the column
# block only ``dj``, so ``g(di, dj) = g(di, 0) + g(0, dj) - g(0, 0)``: a sum of two 1-D
# profiles, with no term that couples the axes (mixed-frequency variants add one, with
# angles ``a_i di + b_i dj``).
zero = torch.zeros_like(offsets)
g = lambda off: rope_nd(q1.expand(N * N, Dh), off) @ k1  # noqa: E731 (N*N, 2) -> (N*N,)
separable = g(offsets * torch.tensor([1, 0], device=device)) + g(
    offsets * torch.tensor([0, 1], device=device)) - g(zero)  # (N*N,)
print(f"max|g(di, dj) - [g(di, 0) + g(0, dj) - g(0, 0)]| = "
      f"{(relative.reshape(-1) - separable).abs().max().item():.2e}")
torch.testing.assert_close(relative.reshape(-1), separable)

# %%
# The layer equals attention written head by head
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Both checks are invariances: a layer that mixes up its heads keeps them (merging the
# heads without the transpose, ``out.reshape(B, N, D)``, scrambles tokens and heads
# alike for every grid). So the layer is also compared with a reference written head by
# head: head ``h`` owns channels ``h*Dh .. (h+1)*Dh - 1`` of each of ``q``, ``k``,
# ``v``; its weights :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h})` are computed
# explicitly, and the heads are concatenated along the channels before ``out_proj``.
import math

with torch.no_grad():
    q_all, k_all, v_all = layer.qkv_proj(patches).split(D, dim=-1)  # each (B, N, D)
    heads = []
    for h in range(Nh):
        cols = slice(h * Dh, (h + 1) * Dh)  # this head's channels
        q_h = rope_nd(layer.q_norm(q_all[..., cols]), I)  # (B, N, Dh)
        k_h = rope_nd(layer.k_norm(k_all[..., cols]), I)  # (B, N, Dh)
        weights = torch.softmax(q_h @ k_h.mT / math.sqrt(Dh), dim=-1)  # (B, N, N)
        heads.append(weights @ v_all[..., cols])  # (B, N, Dh)
    y_ref = layer.out_proj(torch.cat(heads, dim=-1))  # (B, N, D)
print(f"max|layer - head-by-head reference| = {(y - y_ref).abs().max().item():.2e}")
torch.testing.assert_close(y, y_ref)

# %%
# Try it: flatten the grid and use 1-D RoPE. What does it lose?
# -------------------------------------------------------------
# Number the patches ``n = i*W + j``. Is a shift still harmless? Who are neighbours?

# %%
# A tempting shortcut: number the patches ``n = i*W + j`` and apply 1-D RoPE. On a fixed
# grid it keeps the shift invariance (a 2-D shift is a uniform 1-D shift by
# ``di*W + dj``), because the 1-D offset ``di*W + dj`` is a function of the 2-D offset.
# But it is not one-to-one: the 961 2-D offsets fall onto 511 1-D offsets, so distinct
# geometries get the same logit.
flat = I[:, 0] * W + I[:, 1]  # (N,), row-major index
assert torch.equal(flat, torch.arange(N, device=device))


# %%
def logits_flat(q, k, pos):
    """1-D RoPE logits over all Dh channels on flattened positions pos (N,): (N, N)."""
    return rope_1d(q, pos) @ rope_1d(k, pos).T


# %%
flat_shifted = logits_flat(q64, k64, flat + 37 * W - 5)  # (N, N)
gap = (flat_shifted - logits_flat(q64, k64, flat)).abs().max().item()
flat_offsets = (flat[:, None] - flat[None, :]).unique()
print(f"flattened, shift (37, -5): max|logit change| = {gap:.2e}; "
      f"{n_offsets} 2-D offsets -> {len(flat_offsets)} 1-D")
torch.testing.assert_close(flat_shifted, logits_flat(q64, k64, flat))
assert len(flat_offsets) == 2 * N - 1

# %%
# The row wrap in numbers: the pair (query ``(1, 0)``, key ``(0, W-1)``) is 15 columns
# apart, 2-D offset ``(1, -15)``, yet its 1-D offset is ``W - (W - 1) = 1``, the same as
# a horizontal neighbour's (query ``(5, 6)``, key ``(5, 5)``, 2-D offset ``(0, 1)``).
# Identical tokens ``q = k = 1``: flattened RoPE gives both pairs the same logit, axial
# RoPE does not.
idx = lambda i, j: i * W + j  # noqa: E731 (patch index of row i, column j)
wrap, neighbour = (idx(1, 0), idx(0, W - 1)), (idx(5, 6), idx(5, 5))
L1, L2 = logits_flat(ones, ones, flat), axial_logits(ones, ones, I)  # (N, N) each
print(f"flattened 1-D RoPE: wrap pair {L1[wrap].item():.3f}, neighbour pair "
      f"{L1[neighbour].item():.3f}")
print(f"axial 2-D RoPE:     wrap pair {L2[wrap].item():.3f}, neighbour pair "
      f"{L2[neighbour].item():.3f}")
torch.testing.assert_close(L1[wrap], L1[neighbour])
separation = (L2[neighbour] - L2[wrap]).item()
assert separation > 3.0, "axial RoPE no longer separates the two pairs?"

# %%
# Flattening also ties the logits to the image width: the vertical neighbour of a patch
# is ``W`` positions away, so the same 2-D offset ``(1, 0)`` gets a different logit on a
# wider grid. Axial RoPE gives it the same logit at every resolution.
W2 = 24
I2 = grid_positions(H, W2, device)  # (H*W2, 2)
ones2 = torch.ones(H * W2, Dh, device=device)  # (H*W2, Dh)
flat2 = torch.arange(H * W2, device=device)  # (H*W2,)
vert, vert2 = (idx(1, 0), idx(0, 0)), (W2, 0)  # query (1, 0), key (0, 0) on each grid
f16, f24 = L1[vert].item(), logits_flat(ones2, ones2, flat2)[vert2].item()
a16, a24 = L2[vert].item(), axial_logits(ones2, ones2, I2)[vert2].item()
print(f"offset (1, 0): flattened W={W}: {f16:.3f}, W={W2}: {f24:.3f}; "
      f"axial W={W}: {a16:.3f}, W={W2}: {a24:.3f}")
assert abs(f16 - f24) > 1.0, "flattened logits no longer depend on the width?"
# ... because on the wider grid the vertical neighbour is a 1-D pair W2 positions apart:
pair = torch.tensor([W2, 0], device=device)  # a query and a key on a line
f_line = logits_flat(ones2[:2], ones2[:2], pair)[0, 1].item()
torch.testing.assert_close(torch.tensor(f24), torch.tensor(f_line))
torch.testing.assert_close(torch.tensor(a16), torch.tensor(a24))

# %%
# Put the query at the start of row 8. Flattened RoPE scores the patch at the far right
# of row 7, fifteen columns away, like the query's right-hand neighbour, and its
# vertical neighbours like patches sixteen steps away along a row.
q0 = idx(8, 0)
flat_row = L1[q0].reshape(H, W)  # (H, W)
print(f"flattened, query (8, 0): key (7, 15) {flat_row[7, 15]:.3f}, key (8, 1) "
      f"{flat_row[8, 1]:.3f}, key (7, 0) {flat_row[7, 0]:.3f}")
torch.testing.assert_close(flat_row[7, 15], flat_row[8, 1])

fig, ax = plt.subplots(figsize=(5.2, 5.2), layout="constrained")
im = ax.imshow(flat_row.cpu())
ax.grid(False)  # as above: no grid, integer ticks, legend below the axes
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.yaxis.set_major_locator(MaxNLocator(integer=True))
ax.plot(0, 8, "x", color="C3", ms=10, mew=2, label="query patch (8, 0)")
ax.plot(15, 7, "o", mfc="none", color="C1", ms=12, mew=2,
        label="key (7, 15): 1-D offset 1")
ax.set_xlabel("key column j (patches)")
ax.set_ylabel("key row i (patches)")
ax.set_title("Flattened 1-D RoPE: patch (7, 15), fifteen columns away,\n"
             "scores like the query's right-hand neighbour (8, 1)")
cax = ax.inset_axes([1.04, 0, 0.05, 1])  # a colorbar exactly as tall as the map
fig.colorbar(im, cax=cax, label="logit <rope(q), rope(k)> (q = k = ones)")
fig.legend(loc="outside lower center", ncol=2)
plt.show()

# %%
# References
# ----------
# :footcite:t:`Su2021`, 1-D RoPE; :footcite:t:`Heo2024`, axial and
# mixed-frequency 2-D RoPE.
# ``torch.view_as_complex``, ``torch.view_as_real``, ``torch.polar``,
# ``torch.nn.functional.scaled_dot_product_attention``, ``torch.nn.LayerNorm``.
#
# .. footbibliography::
