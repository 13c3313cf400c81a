"""
RoPE: rotary position embeddings
================================

RoPE (Su et al., RoFormer, 2021) turns each adjacent channel pair ``(x[2i], x[2i+1])``
of a head vector at position ``p`` by the angle ``p * theta_i``, with
``theta_i = base ** (-2i / Dh)``. This page implements it three ways (complex numbers,
explicit cos/sin, and the "rotate half" layout of Llama in Hugging Face), proves the
first two equal and the third equal up to a fixed channel permutation, pins all three to
RoFormer's frequencies, and proves the properties RoPE is used for: rotations keep
norms, and the dot product of a rotated query and key depends only on their relative
position.
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
# Three implementations
# ---------------------
# The book's convention is RoFormer's: *adjacent pairs* ``(2i, 2i+1)`` form the 2-D
# planes that rotate. As complex numbers :math:`z_i = x_{2i} + \mathrm{i}\, x_{2i+1}`,
# the rotation is a product with :math:`e^{\mathrm{i} p \theta_i}`,
# :math:`\theta_i = 10000^{-2i/D_h}`; written out in reals it is the familiar 2x2
# rotation matrix.
def rope_theta(Dh, base, like):
    """theta_i = base ** (-2i / Dh), i = 0 .. Dh/2 - 1: (Dh/2,), on `like`'s dtype."""
    two_i = torch.arange(0, Dh, 2, dtype=like.dtype, device=like.device)
    return base ** (-two_i / Dh)


def rope_complex(x, pos, base=10000.0):
    """Adjacent pairs as complex numbers times exp(1j p theta).

    x (..., L, Dh), pos (L,) -> (..., L, Dh)."""
    Dh = x.shape[-1]
    angles = pos[:, None].to(x.dtype) * rope_theta(Dh, base, x)[None, :]  # (L, Dh/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # (L, Dh/2), |.| = 1
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2))  # (..., L, Dh/2)
    return torch.view_as_real(z * rotation).flatten(-2)  # (..., L, Dh/2, 2) -> Dh


def rope_real(x, pos, base=10000.0):
    """The same rotation, explicit cos and sin on even and odd channels. Same shapes."""
    theta = rope_theta(x.shape[-1], base, x)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * theta[None, :]  # (L, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, Dh/2): the adjacent pairs
    out_even = x_even * cos - x_odd * sin  # out[2i]
    out_odd = x_even * sin + x_odd * cos  # out[2i+1]
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2)  # interleaved, Dh


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat([-x2, x1], dim=-1)


def rope_rotate_half(x, pos, base=10000.0):
    """Llama-HF / GPT-NeoX layout: channel i pairs with i + Dh/2. Same shapes."""
    theta = rope_theta(x.shape[-1], base, x)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * theta[None, :]  # (L, Dh/2)
    emb = torch.cat([angles, angles], dim=-1)  # (L, Dh): the same angle on both halves
    return x * emb.cos() + rotate_half(x) * emb.sin()


# %%
# Complex form == real form
# -------------------------
# Queries of shape ``(B, Nh, L, Dh)`` at positions up to 4096. Both forms round the same
# float32 angle and do the same four products, so they agree to float32 precision.
B, Nh, L, Dh = 2, 4, 16, 64
x = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh)
pos = torch.randint(0, 4096, (L,), device=device)  # (L,) one position per token
ours_complex, ours_real = rope_complex(x, pos), rope_real(x, pos)  # (B, Nh, L, Dh)
print(f"max|complex - real| = {(ours_complex - ours_real).abs().max().item():.2e}")
torch.testing.assert_close(ours_complex, ours_real)

# %%
# The frequencies, read off the rotation
# --------------------------------------
# Feed every pair the unit vector :math:`(1, 0)` at position :math:`p = 1`: pair
# :math:`i` comes out as :math:`(\cos \theta_i, \sin \theta_i)`, so ``atan2`` returns
# :math:`\theta_i` itself (no wrap: all :math:`\theta_i \le 1 < \pi`), with its sign.
# Compare with RoFormer's definition, evaluated in plain Python with ``base = 10000``.
# All three functions are called with their *default* base.
import math

theta_ref = torch.tensor([math.pow(10000, -2 * i / Dh) for i in range(Dh // 2)],
                         dtype=torch.float64, device=device)  # (Dh/2,)
unit_pairs = torch.zeros(1, Dh, dtype=torch.float64, device=device)  # (L=1, Dh)
unit_pairs[:, 0::2] = 1.0  # every adjacent pair is (1, 0)
one = torch.ones(1, device=device)  # (L=1,) position p = 1
perm = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)]).to(device)  # below

out_c = rope_complex(unit_pairs, one)[0]  # (Dh,), adjacent pairs
out_r = rope_real(unit_pairs, one)[0]  # (Dh,), adjacent pairs
out_h = rope_rotate_half(unit_pairs[:, perm], one)[0]  # (Dh,), pair i is (i, i + Dh/2)
read = {"complex": torch.atan2(out_c[1::2], out_c[0::2]),
        "real": torch.atan2(out_r[1::2], out_r[0::2]),
        "rotate-half": torch.atan2(out_h[Dh // 2:], out_h[:Dh // 2])}  # (Dh/2,) each
for name, angle in read.items():
    err = (angle - theta_ref).abs().max().item()
    print(f"{name:12s} max|angle - theta_ref| = {err:.1e}")
    torch.testing.assert_close(angle, theta_ref)

# %%
# The fastest pair turns one radian per position, the slowest
# :math:`10000^{-(D_h-2)/D_h}`: a wavelength of :math:`2\pi / \theta` from about 6 to
# about :math:`5 \cdot 10^4` positions.
theta_read = read["complex"]  # (Dh/2,)
print(f"theta_0 = {theta_read[0].item():.6f}, "
      f"theta_(Dh/2-1) = {theta_read[-1].item():.3e} "
      f"(10000 ** (-(Dh-2)/Dh) = {10000 ** (-(Dh - 2) / Dh):.3e})")
torch.testing.assert_close(theta_read[0].item(), 1.0)
torch.testing.assert_close(theta_read[-1].item(), 10000 ** (-(Dh - 2) / Dh))

# %%
# Two layouts, one rotation up to a permutation
# ---------------------------------------------
# Llama in Hugging Face (and GPT-NeoX) pairs channel ``i`` with ``i + Dh/2`` instead of
# ``2i`` with ``2i + 1``. De-interleaving the channels,
# ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``, moves each adjacent pair to
# ``(i, i + Dh/2)``, so the two layouts compute the same rotation:
# ``rope_rotate_half(x[..., perm]) == rope_real(x)[..., perm]``.
halves = rope_rotate_half(x[..., perm], pos)  # (B, Nh, L, Dh), channels in halves order
adjacent = rope_real(x, pos)[..., perm]  # (B, Nh, L, Dh), same order
print(f"perm = {perm[:4].tolist()} ... {perm[Dh // 2:Dh // 2 + 4].tolist()} ...")
print(f"max|rotate_half(x[perm]) - rope_real(x)[perm]| = "
      f"{(halves - adjacent).abs().max():.2e}")
torch.testing.assert_close(halves, adjacent)

# %%
# Without the permutation the two layouts rotate different planes: applying one
# convention's code to tensors laid out for the other is a different function, not a
# rounding difference.
gap = (rope_rotate_half(x, pos) - rope_real(x, pos)).abs().max().item()
print(f"without perm: max|rotate_half(x) - rope_real(x)| = {gap:.2f}")
assert gap > 1.0, "the two layouts agree without the permutation?"

# %%
# This is why Hugging Face's Llama conversion script permutes the rows of ``W_q`` and
# ``W_k`` with ``w.view(Nh, Dh // 2, 2, D).transpose(1, 2).reshape(D, D)``: per head,
# that is ``perm``. Since ``perm`` is the same for q and k, the attention logits are
# unchanged.
D = Nh * Dh
W_q, W_k = (torch.randn(2, D, D, device=device) / math.sqrt(D)).unbind(0)  # (D, D) each
tokens = torch.randn(L, D, device=device)  # (L, D)


def heads(t):
    """(L, D) -> (Nh, L, Dh)."""
    return t.reshape(L, Nh, Dh).transpose(0, 1)


def hf_permute(w):
    """The conversion script's row permutation of a (D, D) projection."""
    return w.view(Nh, Dh // 2, 2, D).transpose(1, 2).reshape(D, D)


q, k = heads(tokens @ W_q.T), heads(tokens @ W_k.T)  # (Nh, L, Dh) each
q_hf, k_hf = heads(tokens @ hf_permute(W_q).T), heads(tokens @ hf_permute(W_k).T)
torch.testing.assert_close(q_hf, q[..., perm])  # the script's permutation, per head
logits = rope_real(q, pos) @ rope_real(k, pos).transpose(-1, -2)  # (Nh, L, L)
logits_hf = rope_rotate_half(q_hf, pos) @ rope_rotate_half(k_hf, pos).transpose(-1, -2)
print(f"max|logits adjacent pairs - logits rotate-half| = "
      f"{(logits - logits_hf).abs().max():.2e} (logits up to {logits.abs().max():.1f})")
torch.testing.assert_close(logits, logits_hf)

# %%
# Rotations keep norms
# --------------------
# Each pair is turned, not stretched, so every pair's length and hence ``||x||`` are
# unchanged.
rotated = rope_complex(x, pos)  # (B, Nh, L, Dh)
pair_len = x.reshape(B, Nh, L, Dh // 2, 2).norm(dim=-1)  # (B, Nh, L, Dh/2)
pair_len_rot = rotated.reshape(B, Nh, L, Dh // 2, 2).norm(dim=-1)
norm_gap = (rotated.norm(dim=-1) - x.norm(dim=-1)).abs().max()
print(f"max| ||R_p x|| - ||x|| | = {norm_gap:.2e}")
torch.testing.assert_close(pair_len_rot, pair_len)
torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))

# %%
# The relative property
# ---------------------
# :math:`R_m` and :math:`R_n` are rotations in the same planes, so
# :math:`R_m^\top R_n = R_{n-m}` and
# :math:`\langle R_m q, R_n k \rangle = \langle q, R_{n-m} k \rangle`: the logit sees
# only the offset :math:`n - m`. Checked for 1000 random pairs of positions up to 4096,
# in float64: there :math:`m\, \theta_0` is up to 4096 rad, and float32 rounds such an
# angle by up to ~2e-4 rad, far above float32's tolerance.
P = 1000
q64 = torch.randn(P, Dh, dtype=torch.float64, device=device)  # (P, Dh), P in place of L
k64 = torch.randn(P, Dh, dtype=torch.float64, device=device)
m = torch.randint(0, 4096, (P,), device=device)  # (P,) query positions
n = torch.randint(0, 4096, (P,), device=device)  # (P,) key positions
lhs = (rope_complex(q64, m) * rope_complex(k64, n)).sum(-1)  # (P,) <R_m q, R_n k>
rhs = (q64 * rope_complex(k64, n - m)).sum(-1)  # (P,) <q, R_(n-m) k>
print(f"max|<R_m q, R_n k> - <q, R_(n-m) k>| = {(lhs - rhs).abs().max():.2e} (float64)")
torch.testing.assert_close(lhs, rhs)

# %%
# Consequently the whole ``(L, L)`` logit matrix is unchanged when every position moves
# by the same ``s``: only differences of positions enter. In float64 this holds to the
# last digits for shifts up to ``1e4``.
q64, k64 = torch.randn(2, L, Dh, dtype=torch.float64, device=device).unbind(0)
pos0 = torch.arange(L, device=device)  # (L,)


def rope_logits(q, k, pos):
    """(L, Dh), (L, Dh), (L,) -> (L, L) logits <R_m q_m, R_n k_n>."""
    return rope_complex(q, pos) @ rope_complex(k, pos).T


ref64 = rope_logits(q64, k64, pos0)  # (L, L)
for s in (1, 100, 10_000):
    shifted = rope_logits(q64, k64, pos0 + s)
    err = (shifted - ref64).abs().max().item()
    print(f"float64, s = {s:6d}: max|logits(p + s) - logits(p)| = {err:.1e}")
    torch.testing.assert_close(shifted, ref64)

# %%
# In float32 the identity is just as exact in math, but the angles
# :math:`(p + s)\, \theta` are rounded to float32, an error that grows in proportion to
# ``|s|``. With unit-norm q and k (logits in [-1, 1]) it stays inside the default
# float32 tolerance at ``s = 100`` and has left it (atol ``1e-5``) at ``s = 1e5``; the
# errors printed for the shifts between grow with ``|s|``.
q32 = torch.nn.functional.normalize(q64.float(), dim=-1)  # (L, Dh), unit rows
k32 = torch.nn.functional.normalize(k64.float(), dim=-1)
ref32 = rope_logits(q32, k32, pos0)  # (L, L)
for s in (1, 10, 100, 1000, 10_000, 100_000):
    err = (rope_logits(q32, k32, pos0 + s) - ref32).abs().max().item()
    print(f"float32, s = {s:6d}: max|logits(p + s) - logits(p)| = {err:.1e}")
torch.testing.assert_close(rope_logits(q32, k32, pos0 + 100), ref32)
assert err > 1e-5, "float32 angle rounding no longer grows with the shift?"  # s = 1e5

# %%
# Long-range decay
# ----------------
# RoFormer (section 3.4.3) bounds the logit at relative distance :math:`d` by a quantity
# that decays with :math:`d`: with :math:`S_j = \sum_{i<j} e^{\mathrm{i} d \theta_i}`,
# the relative upper bound is :math:`\sum_j |S_j| / (D_h/2)`. For
# :math:`q = k = (1, \dots, 1)` the logit itself is
# :math:`\langle R_0 q, R_d k \rangle = 2 \sum_i \cos(d\, \theta_i)`. Both are
# normalized to 1 at :math:`d = 0` and computed in float64 (:math:`d\, \theta_0` reaches
# 4096 rad), for a typical head width ``Dh = 128``.
import matplotlib.pyplot as plt

Dh_fig = 128
d = torch.arange(0, 4097, dtype=torch.float64)  # (4097,) relative distances
theta = torch.tensor([math.pow(10000, -2 * i / Dh_fig) for i in range(Dh_fig // 2)],
                     dtype=torch.float64)  # (Dh/2,)
unit = torch.ones(len(d), Dh_fig // 2, dtype=torch.float64)  # (4097, Dh/2)
phases = torch.polar(unit, d[:, None] * theta)  # (4097, Dh/2), exp(1j d theta_i)
S = phases.cumsum(dim=-1)  # (4097, Dh/2): S_j for j = 1 .. Dh/2
bound = S.abs().sum(dim=-1) / (Dh_fig // 2)  # (4097,)
ones = torch.ones(1, Dh_fig, dtype=torch.float64)  # (L=1, Dh)
ones_logit = (rope_complex(ones, d[:1])
              * rope_complex(ones.expand(len(d), -1), d)).sum(-1)  # (4097,)
torch.testing.assert_close(ones_logit, 2 * torch.cos(d[:, None] * theta).sum(-1))

near, far = bound[1:11].mean().item(), bound[1000:4001].mean().item()
near_ones = ones_logit[1:11].mean().item()
far_ones = ones_logit[1000:4001].mean().item()
print(f"relative upper bound: mean over d in [1, 10] = {near:.1f}, "
      f"over [1000, 4000] = {far:.1f}")
print(f"all-ones logit:       mean over d in [1, 10] = {near_ones:.1f}, "
      f"over [1000, 4000] = {far_ones:.1f}")
assert far < near / 3, "the bound no longer decays with distance?"
assert far_ones < near_ones / 3, "the all-ones logit does not decay?"

fig, ax = plt.subplots()
ax.semilogx(d[1:], bound[1:] / bound[0], label="relative upper bound Σ|S_j| / (Dh/2)")
ax.semilogx(d[1:], ones_logit[1:] / ones_logit[0],
            label="logit <R_0 q, R_d k>, q = k = ones", alpha=0.8)
ax.axhline(0, color="gray", lw=0.8)
ax.set_xlabel("relative distance d = n - m (positions)")
ax.set_ylabel("value / value at d = 0")
ax.set_title("RoPE: the logit and its upper bound decay with relative distance\n"
             f"(Dh = {Dh_fig}, base = 10000)")
ax.legend()
plt.show()

# %%
# References
# ----------
# Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021),
# sections 3.2 and 3.4. ``torch.polar``, ``torch.view_as_complex``,
# ``torch.view_as_real``, ``torch.atan2``.
