"""
Sinusoidal embeddings
=====================

The sinusoidal positional embedding of Vaswani et al. (2017) gives every position a code
of sines and cosines at geometrically spaced frequencies, added to the token's features.
Moving ``k`` positions turns each sin/cos pair by a fixed angle, so the dot product of
two codes depends only on their offset.

**You will learn**

- how to build the embedding in four lines, and check it against the paper's formula
- why a shift by ``k`` positions is one fixed block rotation, for every position
- why the dot product of two codes depends only on the offset
- how the 2-D version for image patches splits the channels between the axes

**Prerequisites:** :doc:`/generated/positional/plot_01_formulation` (a position
embedding as a map from indices to codes).

.. index:: ! sinusoidal embeddings
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
# Channel pair :math:`(2i, 2i+1)` holds :math:`\sin` and :math:`\cos` of
# :math:`p\, w_i`, with :math:`D / 2` frequencies falling geometrically from 1 to almost
# :math:`1 / 10000`:
#
# .. math::
#
#    PE(p, 2i) = \sin(p\, w_i), \qquad PE(p, 2i+1) = \cos(p\, w_i), \qquad
#    w_i = 10000^{-2i/D}.
#
# Each pair is a clock: pair :math:`i` repeats every :math:`2\pi / w_i` positions. The
# fast pairs tell neighbours apart, the slow ones far-apart positions.
L_fig, D_fig = 128, 64
w_fig = 10000 ** (-2 * torch.arange(D_fig // 2) / D_fig)  # (D/2,)
angles_fig = torch.arange(L_fig)[:, None] * w_fig  # (L, D/2)
pe_fig = torch.stack([angles_fig.sin(), angles_fig.cos()], -1).flatten(-2)  # (L, D)

fig, ax = plt.subplots()
im = ax.imshow(pe_fig.T, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
ax.grid(False)  # grid lines would cut through the cells
ax.set_xlabel("position p (tokens)")
ax.set_ylabel("channel (2i = sin, 2i+1 = cos)")
ax.set_title("Low channels oscillate fast, high channels slowly:\n"
             f"each position gets its own code (D = {D_fig})")
fig.colorbar(im, ax=ax, label="PE(p) channel value")
plt.show()

# %%
# From scratch
# ------------
# The pairs are interleaved, ``[sin, cos, sin, cos, ...]``, as in the paper. The checks
# below write the frequencies out again; a Proof compares every entry with plain loops.
def sinusoidal_pe(positions, D, base=10000.0, dtype=torch.float32):
    """positions (...,) integers -> (..., D): channels 2i, 2i+1 = sin, cos of p w_i."""
    i = torch.arange(D // 2, device=positions.device, dtype=dtype)  # (D/2,)
    w = base ** (-2 * i / D)  # (D/2,)
    angles = positions.to(dtype)[..., None] * w  # (..., D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., D)


# %%
# A shift is a rotation
# ---------------------
# By the angle-addition formulas, pair :math:`i` of :math:`PE(p + k)` is pair :math:`i`
# of :math:`PE(p)` rotated by :math:`k\, w_i`: :math:`PE(p + k) = S_k\, PE(p)`, with
# :math:`S_k` block-diagonal and free of :math:`p` (one matrix shifts every position).
#
# .. math::
#
#    \begin{pmatrix} \sin (p+k) w_i \\ \cos (p+k) w_i \end{pmatrix}
#    = \begin{pmatrix} \cos k w_i & \sin k w_i \\ -\sin k w_i & \cos k w_i \end{pmatrix}
#    \begin{pmatrix} \sin p w_i \\ \cos p w_i \end{pmatrix}
def shift_matrix(k, D, base=10000.0, device=None):
    """(D, D) float64: block-diagonal rotations that map PE(p) to PE(p + k)."""
    two_i = 2 * torch.arange(D // 2, dtype=torch.float64, device=device)  # (D/2,)
    w = base ** (-two_i / D)  # (D/2,)
    c, s = torch.cos(k * w), torch.sin(k * w)  # (D/2,)
    rows = [torch.stack([c, s], -1), torch.stack([-s, c], -1)]  # 2 x (D/2, 2)
    return torch.block_diag(*torch.stack(rows, -2))  # (D/2, 2, 2) blocks -> (D, D)


# %%
# A thousand positions, three shifts, in float64 (the angles :math:`p\, w_0` are large).
D = 16  # every pair but the first depends on the base
p = torch.arange(1000, device=device)  # (P,)
pe_p = sinusoidal_pe(p, D, dtype=torch.float64)  # (P, D)
for k in (1, 7, 100):
    S = shift_matrix(k, D, device=device)  # (D, D)
    shifted = pe_p @ S.T  # (P, D), row p is S_k PE(p)
    target = sinusoidal_pe(p + k, D, dtype=torch.float64)  # (P, D)
    print(f"k = {k:3d}: max|S_k PE(p)-PE(p+k)| = {(shifted - target).abs().max():.1e}")
    torch.testing.assert_close(shifted, target)
    torch.testing.assert_close(S @ S.T, torch.eye(D, dtype=S.dtype, device=device))

# %%
# The dot product depends only on the offset
# ------------------------------------------
#
# .. math::
#
#    PE(p) \cdot PE(q) = \sum_i (\sin p w_i \sin q w_i + \cos p w_i \cos q w_i)
#                     = \sum_i \cos((p - q) w_i).
#
# The same number for every pair at the same offset, and the same for :math:`\pm k`
# (:math:`\cos` is even): the dot product alone cannot tell before from after.
P = 200
pe_p = sinusoidal_pe(torch.arange(P, device=device), D, dtype=torch.float64)  # (P, D)
gram = pe_p @ pe_p.T  # (P, P), gram[p, q] = PE(p) . PE(q)
# The closed form writes out the base again.
w = 10000 ** (-2 * torch.arange(D // 2, dtype=torch.float64, device=device) / D)
offsets = torch.arange(-(P - 1), P, device=device)  # (2P - 1,)
closed = torch.cos(offsets[:, None] * w).sum(-1)  # (2P - 1,), sum_i cos(k w_i)
pq = torch.arange(P, device=device)  # (P,)
by_offset = closed[pq[:, None] - pq[None, :] + P - 1]  # (P, P): closed form at p - q
print(f"all {P * P} pairs, {2 * P - 1} offsets: max|PE(p).PE(q) - closed form| = "
      f"{(gram - by_offset).abs().max():.1e}")
torch.testing.assert_close(gram, by_offset)
torch.testing.assert_close(closed, closed.flip(0))  # even in the offset


# %%
# Image patches: one half per axis
# --------------------------------
# For an ``H x W`` grid of patches with indices ``I: (H*W, 2)``
# (:doc:`plot_01_formulation`), the row ``i`` takes the first ``D / 2`` channels, the
# column ``j`` the rest; ``C`` axes get ``D / C`` each.
def sinusoidal_pe_nd(I, D, dtype=torch.float32):
    """I (..., N, C) integers -> (..., N, D): axis c in channels c*D/C .. (c+1)*D/C."""
    C = I.shape[-1]
    assert D % (2 * C) == 0, "each axis needs an even number of channels"
    codes = [sinusoidal_pe(I[..., c], D // C, dtype=dtype) for c in range(C)]
    return torch.cat(codes, dim=-1)  # (..., N, D)


# %%
# Proof: equal to the paper's formula, entry by entry
# ---------------------------------------------------
# An independent reference: the paper's formula, one number at a time in plain Python.
# With ``D = 16`` every pair but the first depends on the base: another constant fails.
def sinusoidal_pe_loops(L, D, device=None):
    """(L, D) float64, entry by entry."""
    pe = [[0.0] * D for _ in range(L)]
    for p in range(L):
        for i in range(D // 2):
            pe[p][2 * i] = math.sin(p / 10000 ** (2 * i / D))
            pe[p][2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
    return torch.tensor(pe, dtype=torch.float64, device=device)


# %%
L, D = 64, 16
ref = sinusoidal_pe_loops(L, D, device)  # (L, D)
for dtype in (torch.float32, torch.float64):
    ours = sinusoidal_pe(torch.arange(L, device=device), D, dtype=dtype)  # (L, D)
    print(f"{str(dtype):13s} max|ours - loops| = "
          f"{(ours - ref.to(dtype)).abs().max():.1e}")
    torch.testing.assert_close(ours, ref.to(dtype))  # default tolerances of each dtype

# %%
# Proof: offset by offset, all the dot products lie on one curve
# --------------------------------------------------------------
# A few offsets: the spread of the dot products over all the pairs at that offset, and
# their value next to the closed form.
for k in (-50, -3, 0, 3, 50):
    diag = gram.diagonal(k)  # (P - |k|,), every pair (p, p + k)
    print(f"offset {k:4d}: {diag.numel():3d} pairs, "
          f"spread {(diag.max() - diag.min()):.0e}, value {diag[0].item():8.4f}, "
          f"closed form {closed[k + P - 1].item():8.4f}")

# %%
# Plotted against the offset, all :math:`P^2` dot products collapse onto one curve: the
# peak :math:`D / 2` at offset 0, then a decay with ripples, because the fast pairs
# decorrelate within a few positions while the slow ones keep the far positions similar.
dq = torch.arange(P, device=device)
diff = (dq[:, None] - dq[None, :]).flatten()  # (P*P,), p - q
fig, ax = plt.subplots()
ax.plot(diff.cpu(), gram.flatten().cpu(), ".", ms=2, alpha=0.3,
        label=f"PE(p)·PE(q), all {P}² pairs")
ax.plot(offsets.cpu(), closed.cpu(), "-", lw=1, label="Σᵢ cos((p − q) wᵢ)")
ax.set_xlabel("offset p − q (tokens)")
ax.set_ylabel("dot product PE(p)·PE(q)")
ax.set_title(f"PE(p)·PE(q) depends only on p − q: peak D/2 = {D // 2} at 0,\n"
             "symmetric, decaying with ripples")
ax.legend()
plt.show()


# %%
# Proof: every position gets its own code, of norm sqrt(D/2)
# ----------------------------------------------------------
# The wavelengths grow from pair to pair, no two of the first 128 positions share a
# code, and every code has the same norm (each pair is a unit vector).
L, D = 128, 64
pe = sinusoidal_pe(torch.arange(L, device=device), D)  # (L, D)
wavelengths = 2 * math.pi * 10000 ** (2 * torch.arange(D // 2) / D)  # (D/2,) positions
assert wavelengths[-1] < 2 * math.pi * 10000  # the slowest pair turns within 2 pi base
others = ~torch.eye(L, dtype=torch.bool, device=device)  # (L, L), no self-pairs
gaps = torch.cdist(pe, pe)[others]  # (L * (L - 1),) distances between two positions
print(f"wavelength of pair 0: {wavelengths[0]:.2f} positions, of pair {D // 2 - 1}: "
      f"{wavelengths[-1]:.0f} positions")
print(f"smallest distance between the codes of two positions < {L}: "
      f"{gaps.min().item():.2f}")
print(f"(each code has norm sqrt(D/2) = {math.sqrt(D / 2):.2f})")
assert (wavelengths[1:] > wavelengths[:-1]).all()
assert gaps.min() > 0.5, "two positions got (nearly) the same code"  # printed above
norm = torch.full((L,), math.sqrt(D / 2), device=device)  # (L,)
torch.testing.assert_close(pe.norm(dim=-1), norm)


# %%
# Proof: interleaved or concatenated, a permutation
# -------------------------------------------------
# Many implementations store all the ``sin`` channels first, then all the ``cos``
# channels. The two layouts hold the same numbers: interleaved channel ``2i`` is
# concatenated channel ``i`` and ``2i + 1`` is ``D/2 + i``. A fixed permutation leaves
# every dot product, hence attention on the codes alone, unchanged, and the first linear
# layer that reads the codes can absorb it into the order of its weight columns.
def sinusoidal_pe_concat(positions, D, base=10000.0, dtype=torch.float32):
    """positions (...,) -> (..., D) = [sin(p w_0) .. sin(p w_(D/2-1)), cos ..]."""
    i = torch.arange(D // 2, device=positions.device, dtype=dtype)  # (D/2,)
    w = base ** (-2 * i / D)  # (D/2,)
    angles = positions.to(dtype)[..., None] * w  # (..., D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (..., D)


# %%
L = 50
pos = torch.arange(L, device=device)
inter, concat = sinusoidal_pe(pos, D), sinusoidal_pe_concat(pos, D)  # (L, D) each
half = torch.arange(D // 2, device=device)
perm = torch.stack([half, half + D // 2], dim=-1).flatten()  # [0, D/2, 1, D/2+1, ...]
print(f"perm = {perm[:8].tolist()} ... {perm[-2:].tolist()}")
print(f"max|interleaved - concatenated| = {(inter - concat).abs().max():.2f}, "
      f"after permuting: {(inter - concat[:, perm]).abs().max():.1e}")
assert (inter - concat).abs().max() > 0.5
torch.testing.assert_close(concat[:, perm], inter)
print(f"max|gram interleaved - gram concatenated| = "
      f"{(inter @ inter.T - concat @ concat.T).abs().max():.1e}")
torch.testing.assert_close(inter @ inter.T, concat @ concat.T)
lin = torch.nn.Linear(D, 8).to(device)
with torch.no_grad():
    absorbed = torch.nn.functional.linear(inter, lin.weight[:, perm], lin.bias)
    print(f"max|Linear(concatenated) - Linear with permuted columns(interleaved)| = "
          f"{(lin(concat) - absorbed).abs().max():.1e}")
    torch.testing.assert_close(lin(concat), absorbed)


# %%
# Proof: the 2-D code depends only on the 2-D offset, axis by axis
# ----------------------------------------------------------------
# The 2-D dot product is a row term plus a column term, each the 1-D closed form on
# :math:`D / 2` channels: it depends only on the offset :math:`(i - i', j - j')`.
H, W, D = 6, 8, 32
I = torch.cartesian_prod(torch.arange(H, device=device), torch.arange(W, device=device))
pe2d = sinusoidal_pe_nd(I, D, dtype=torch.float64)  # (H*W, D)
print(f"2-D PE: I {tuple(I.shape)} -> {tuple(pe2d.shape)}")
assert pe2d.shape == (H * W, D)
two_i = 2 * torch.arange(D // 4, dtype=torch.float64, device=device)  # (D/4,)
w_half = 10000 ** (-two_i / (D // 2))  # (D/4,), the frequencies of D/2 channels
di = (I[:, None, 0] - I[None, :, 0]).to(torch.float64)  # (H*W, H*W), i - i'
dj = (I[:, None, 1] - I[None, :, 1]).to(torch.float64)  # (H*W, H*W), j - j'
closed2d = (torch.cos(di[..., None] * w_half).sum(-1)
            + torch.cos(dj[..., None] * w_half).sum(-1))  # (H*W, H*W)
gram2d = pe2d @ pe2d.T  # (H*W, H*W)
print(f"max|PE(i,j).PE(i',j') - f(i-i') - f(j-j')| = "
      f"{(gram2d - closed2d).abs().max():.1e}")
torch.testing.assert_close(gram2d, closed2d)

# %%
# Seen from one patch, the similarity is a cross
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The similarity of every patch of a 16 x 16 grid to the patch at (5, 9): the sum of a
# row profile and a column profile, so the map is a cross of two 1-D curves, centred on
# the patch.
H = W = 16
D = 64
I = torch.cartesian_prod(torch.arange(H, device=device), torch.arange(W, device=device))
pe2d = sinusoidal_pe_nd(I, D)  # (H*W, D)
i0, j0 = 5, 9
sim = (pe2d @ pe2d[i0 * W + j0]).reshape(H, W)  # (H, W)
print(f"largest similarity at {divmod(sim.argmax().item(), W)}: "
      f"{sim.max().item():.2f} = D/2")
assert divmod(sim.argmax().item(), W) == (i0, j0)
torch.testing.assert_close(sim.max(), torch.tensor(D / 2, device=device))

from matplotlib.ticker import MaxNLocator

# A square map: a near-square canvas, no grid over the cells, integer patch indices,
# and the legend below the axes, off the data.
fig, ax = plt.subplots(figsize=(5.2, 5.2), layout="constrained")
im = ax.imshow(sim.cpu(), cmap="viridis")
ax.grid(False)
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.yaxis.set_major_locator(MaxNLocator(integer=True))
ax.plot(j0, i0, "r+", ms=12, mew=2, label=f"patch ({i0}, {j0})")
ax.set_xlabel("column j (patches)")
ax.set_ylabel("row i (patches)")
ax.set_title("2-D sinusoidal PE: similarity to a patch is a row term plus\n"
             "a column term, a cross centred on the patch")
cax = ax.inset_axes([1.04, 0, 0.05, 1])  # a colorbar exactly as tall as the map
fig.colorbar(im, cax=cax, label=f"PE({i0}, {j0}) · PE(i, j)")
fig.legend(loc="outside lower center")
plt.show()

# %%
# Each half is the 1-D code of its axis
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On a 6 x 8 grid: patches in one row share the first half of their code, patches in
# one column the second, and the halves are the 1-D codes of the row and the column.
H, W, D = 6, 8, 32
I = torch.cartesian_prod(torch.arange(H, device=device), torch.arange(W, device=device))
pe2d = sinusoidal_pe_nd(I, D, dtype=torch.float64)  # (H*W, D)
grid = pe2d.reshape(H, W, D)  # (H, W, D), row-major
# Same row, same first half; same column, same second half.
first, second = grid[..., :D // 2], grid[..., D // 2:]  # (H, W, D/2) each
torch.testing.assert_close(first, first[:, :1].expand(H, W, D // 2))
torch.testing.assert_close(second, second[:1, :].expand(H, W, D // 2))
# ... and the halves are the 1-D codes of the row and of the column.
rows_1d = sinusoidal_pe(torch.arange(H, device=device), D // 2, dtype=torch.float64)
torch.testing.assert_close(first[:, 0], rows_1d)
print("patches in one row share the first half, patches in one column the second")

# %%
# Video, ``C = 3``: the same function with a third of the width per axis.
T_frames = 3
I_video = torch.cartesian_prod(*(torch.arange(n, device=device)
                                 for n in (T_frames, H, W)))  # (T_frames*H*W, 3)
pe3d = sinusoidal_pe_nd(I_video, 48)  # (T_frames*H*W, 48)
print(f"3-D PE: I {tuple(I_video.shape)} -> {tuple(pe3d.shape)}")
assert pe3d.shape == (T_frames * H * W, 48)

# %%
# Try it: transpose the blocks. Where does S_k^T send PE(p)?
# ----------------------------------------------------------
# Put :math:`-\sin` top right instead (the usual rotation matrix, ``S_k^T``) and apply
# it to the same thousand codes.

# %%
# :math:`S_k^\top = S_{-k}`: it shifts backwards, to :math:`PE(p - k)`, far from
# :math:`PE(p + k)`. The sign of the blocks decides the direction of the shift.
D = 16
p = torch.arange(1000, device=device)  # (P,)
pe_p = sinusoidal_pe(p, D, dtype=torch.float64)  # (P, D)
for k in (1, 7, 100):
    S = shift_matrix(k, D, device=device)  # (D, D)
    target = sinusoidal_pe(p + k, D, dtype=torch.float64)  # (P, D)
    wrong_sign = pe_p @ S  # the transposed blocks: S_k^T = S_(-k)
    sign_gap = (wrong_sign - target).abs().max()
    print(f"k = {k:3d}: max|S_k^T PE(p) - PE(p+k)| = {sign_gap:.2f}")
    torch.testing.assert_close(wrong_sign, sinusoidal_pe(p - k, D, dtype=torch.float64))
    assert sign_gap > 0.5, "the sign of the blocks no longer matters?"

# %%
# Try it: the shift check in float32. Does it still pass?
# --------------------------------------------------------
# Repeat the shift check with float32 codes for the same thousand positions and
# :math:`k = 100`.

# %%
# It misses the default float32 tolerance (atol 1e-5) by the rounding of the large
# angles alone: the identity is exact, the float32 inputs are not.
pe32 = sinusoidal_pe(p, D)  # (P, D) float32
shifted32 = pe32 @ shift_matrix(100, D, device=device).float().T  # (P, D)
err32 = (shifted32 - sinusoidal_pe(p + 100, D)).abs().max().item()
print(f"float32, k = 100: max|S_k PE(p) - PE(p+k)| = {err32:.1e}")
assert err32 > 1e-5  # beyond float32's atol: the rounding of the inputs

# %%
# References
# ----------
# ``torch.block_diag``, ``torch.cdist``, ``torch.cartesian_prod``;
# :footcite:t:`Vaswani2017`, section 3.5.
#
# .. footbibliography::
