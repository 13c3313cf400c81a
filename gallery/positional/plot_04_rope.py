"""
RoPE: rotary position embeddings
================================

Rotary position embeddings (Su et al., RoFormer, 2021) encode a token's position
by turning its query and key: each pair of channels rotates by the angle
``pos * inv_freq``. Since both are turned in the same planes, a query-key logit sees
only the offset between their positions.

**You will learn**

- how RoPE rotates pairs of channels, and at which frequencies ``inv_freq``
- the rotate-half layout of Hugging Face's Llama, in four small functions
- why it equals RoFormer's adjacent-pair rotation up to a channel permutation
- why a rotated query-key logit depends only on the relative position

**Prerequisites:** :doc:`/generated/positional/plot_01_formulation` (where a position
enters attention), :doc:`/generated/positional/plot_02_sinusoidal` (the same
frequencies, added instead of rotated),
:doc:`/generated/transformer/plot_01_self_attention` (the logits ``q . k`` it rotates).

.. index:: ! RoPE
.. index:: ! rotary position embedding
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
# Read a head vector of ``Dh`` channels as ``Dh/2`` planes. At position ``pos``, RoPE
# turns plane ``i`` by ``pos * inv_freq[i]``, :math:`\omega_i = \mathrm{base}^{-2i/D_h}`
# (``inv_freq`` in code). Rotations compose, so a query at :math:`m` and a key at
# :math:`n` only see the angle between them, :math:`(n - m)\,\omega_i`:
#
# .. math::
#
#    R(\alpha) = \begin{pmatrix} \cos\alpha & -\sin\alpha \\
#                                 \sin\alpha & \cos\alpha \end{pmatrix},
#    \qquad
#    \langle R(m\,\omega_i)\, q,\; R(n\,\omega_i)\, k \rangle
#    = \langle q,\; R\big((n - m)\,\omega_i\big)\, k \rangle .
#
# Left: one pair; q at 0 and k at 3 enclose the angle of q at 4 and k at 7. Right: the
# logits of a random q and k (``Dh = 16``, base 100) are constant along each ``n - m``.
omega = 0.4  # one pair's frequency (rad per position)
Dh_idea = 16
inv_freq_idea = 1.0 / 100.0 ** (torch.arange(0, Dh_idea, 2) / Dh_idea)  # (Dh/2,)
q_idea, k_idea = torch.randn(2, Dh_idea // 2, dtype=torch.complex64).unbind(0)  # pairs
pos_idea = torch.arange(16.0)  # (16,) positions
turn = torch.polar(torch.ones(16, Dh_idea // 2), pos_idea[:, None] * inv_freq_idea)
logits_idea = (q_idea * turn) @ (k_idea * turn).conj().T  # (16, 16), complex
logits_idea = logits_idea.real  # (m, n): <R_m q, R_n k> summed over the pairs

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.6))
for p_fan in range(8):  # positions 0..7
    c, s = math.cos(p_fan * omega), math.sin(p_fan * omega)
    ax.annotate("", (c, s), (0, 0), arrowprops=dict(arrowstyle="->", color="0.75"))
    ax.text(1.1 * c, 1.1 * s, str(p_fan), ha="center", va="center", color="0.5")
for (m_fan, n_fan), ls in (((0, 3), "-"), ((4, 7), "--")):
    for p_fan, color in ((m_fan, "tab:blue"), (n_fan, "tab:orange")):
        ang = p_fan * omega
        ax.annotate("", (math.cos(ang), math.sin(ang)), (0, 0),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2, ls=ls))
    arc = torch.linspace(m_fan * omega, n_fan * omega, 30)
    ax.plot(0.35 * arc.cos(), 0.35 * arc.sin(), color="k", ls=ls,
            label=f"q at m = {m_fan}, k at n = {n_fan}: angle (n - m) * omega")
ax.set(xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal",
       xlabel="channel 2i (rotate-half: i)",
       ylabel="channel 2i + 1 (rotate-half: i + Dh/2)",
       title=f"one pair turns by pos * omega (omega = {omega} rad)")
ax.legend(loc="lower left")
im = ax2.imshow(logits_idea, cmap="coolwarm")
ax2.set(xlabel="key position n", ylabel="query position m",
        title="logit <R_m q, R_n k>: constant along n - m")
fig.colorbar(im, ax=ax2, label=f"logit (sum over {Dh_idea // 2} pairs)")
fig.suptitle("RoPE turns each pair by pos * inv_freq: the logit depends only on n - m")
plt.show()

# %%
# From scratch: the rotate-half layout
# ------------------------------------
# Hugging Face's Llama (and GPT-NeoX) pairs channel ``i`` with ``i + Dh/2``:
# ``rotate_half`` maps :math:`(x_i, x_{i+D_h/2})` to :math:`(-x_{i+D_h/2}, x_i)`, so
# ``x * cos + rotate_half(x) * sin`` rotates all pairs at once (cos, sin: per position).
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


def rope_cos_sin(pos, Dh, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dh), rotate-half layout, angles in `dtype`.

    Channel i and channel i + Dh/2 form pair i and share its angle pos * inv_freq[i]."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    angles = pos[..., None].to(dtype) * inv_freq  # (..., L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, Dh)
    return angles.cos(), angles.sin()


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: x (..., Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat([-x2, x1], dim=-1)


def rope(x, cos, sin):
    """Rotate-half RoPE: x (..., L, Dh); cos, sin broadcast to it, e.g. (L, Dh) or
    (B, 1, L, Dh) for x (B, Nh, L, Dh)."""
    return x * cos + rotate_half(x) * sin


# %%
# RoFormer writes the pairs as *adjacent* channels ``(2i, 2i+1)``. Two forms of that
# rotation: as complex numbers :math:`z_i = x_{2i} + \mathrm{i}\, x_{2i+1}` times
# :math:`e^{\mathrm{i}\, \mathrm{pos}\, \omega_i}`, and with the 2x2 matrix written out.
def rope_complex(x, pos, base=10000.0):
    """Adjacent pairs as complex numbers times exp(1j pos inv_freq).

    x (..., L, Dh), pos (L,) -> (..., L, Dh)."""
    Dh = x.shape[-1]
    inv_freq = rope_inv_freq(Dh, base, x.dtype).to(x.device)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * inv_freq[None, :]  # (L, Dh/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # (L, Dh/2), |.| = 1
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2))  # (..., L, Dh/2)
    return torch.view_as_real(z * rotation).flatten(-2)  # (..., L, Dh/2, 2) -> Dh


def rope_real(x, pos, base=10000.0):
    """The same rotation, explicit cos and sin on even and odd channels. Same shapes."""
    inv_freq = rope_inv_freq(x.shape[-1], base, x.dtype).to(x.device)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * inv_freq[None, :]  # (L, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, Dh/2): the adjacent pairs
    out_even = x_even * cos - x_odd * sin  # out[2i]
    out_odd = x_even * sin + x_odd * cos  # out[2i+1]
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2)  # interleaved, Dh


# %%
# Two layouts, one rotation up to a permutation
# ---------------------------------------------
# De-interleaving, ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``, moves the adjacent pair
# ``(2i, 2i+1)`` to ``(i, i+Dh/2)``: ``rope(x[..., perm]) == rope_real(x)[..., perm]``.
B, Nh, L, Dh, base = 2, 4, 16, 64, 10000.0
x = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh) queries
pos = torch.randint(0, 4096, (L,), device=device)  # (L,) one position per token
perm = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)]).to(device)  # (Dh,)
cos, sin = rope_cos_sin(pos, Dh, base)  # (L, Dh) each
halves = rope(x[..., perm], cos, sin)  # (B, Nh, L, Dh), channels in halves order
adjacent = rope_real(x, pos)[..., perm]  # (B, Nh, L, Dh), same order
print(f"max|rope(x[perm]) - rope_real(x)[perm]| = "
      f"{(halves - adjacent).abs().max():.2e}")
torch.testing.assert_close(halves, adjacent)

# %%
# The relative property
# ---------------------
# :math:`R_m^\top R_n = R_{n-m}`, so
# :math:`\langle R_m q, R_n k \rangle = \langle q, R_{n-m} k \rangle`. Checked for 1000
# random pairs of positions up to 4096, in float64 (float32 rounds such angles: Try it).
P = 1000
q64, k64 = torch.randn(2, P, Dh, dtype=torch.float64, device=device)  # (P, Dh) each
m, n = torch.randint(0, 4096, (2, P), device=device)  # (P,) query, key positions
lhs = (rope_complex(q64, m) * rope_complex(k64, n)).sum(-1)  # (P,) <R_m q, R_n k>
rhs = (q64 * rope_complex(k64, n - m)).sum(-1)  # (P,) <q, R_(n-m) k>
print(f"max|<R_m q, R_n k> - <q, R_(n-m) k>| = {(lhs - rhs).abs().max():.2e} (float64)")
torch.testing.assert_close(lhs, rhs)

# %%
# Proof: the complex and the real form agree, and keep norms
# ----------------------------------------------------------
# Both forms round the same float32 angle and do the same four products, so they agree
# to float32 precision.
ours_complex, ours_real = rope_complex(x, pos), rope_real(x, pos)  # (B, Nh, L, Dh)
print(f"max|complex - real| = {(ours_complex - ours_real).abs().max().item():.2e}")
torch.testing.assert_close(ours_complex, ours_real)

# %%
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
# Proof: the frequencies are RoFormer's
# -------------------------------------
# Feed every pair the unit vector :math:`(1, 0)` at position :math:`p = 1`: pair
# :math:`i` comes out as :math:`(\cos \omega_i, \sin \omega_i)`, so ``atan2`` returns
# :math:`\omega_i` itself (no wrap: all :math:`\omega_i \le 1 < \pi`), with its sign.
# Compare with RoFormer's :math:`\theta_i = 10000^{-2(i-1)/d}` (counting from
# :math:`i = 1`), evaluated in plain Python. The adjacent-pair forms are called with
# their *default* base.
inv_freq_ref = torch.tensor([math.pow(10000, -2 * i / Dh) for i in range(Dh // 2)],
                            dtype=torch.float64, device=device)  # (Dh/2,)
unit_pairs = torch.zeros(1, Dh, dtype=torch.float64, device=device)  # (L=1, Dh)
unit_pairs[:, 0::2] = 1.0  # every adjacent pair is (1, 0)
one = torch.ones(1, device=device)  # (L=1,) position p = 1

out_c = rope_complex(unit_pairs, one)[0]  # (Dh,), adjacent pairs
out_r = rope_real(unit_pairs, one)[0]  # (Dh,), adjacent pairs
cos1, sin1 = rope_cos_sin(one, Dh, 10000.0, torch.float64)  # (1, Dh) each
out_h = rope(unit_pairs[:, perm], cos1, sin1)[0]  # (Dh,), pair i is (i, i + Dh/2)
read = {"complex": torch.atan2(out_c[1::2], out_c[0::2]),
        "real": torch.atan2(out_r[1::2], out_r[0::2]),
        "rotate-half": torch.atan2(out_h[Dh // 2:], out_h[:Dh // 2])}  # (Dh/2,) each
for name, angle in read.items():
    err = (angle - inv_freq_ref).abs().max().item()
    print(f"{name:12s} max|angle - inv_freq_ref| = {err:.1e}")
    torch.testing.assert_close(angle, inv_freq_ref)

# %%
# The fastest pair turns one radian per position, the slowest
# :math:`10000^{-(D_h-2)/D_h}`: a wavelength of :math:`2\pi / \omega` from about 6 to
# about :math:`5 \cdot 10^4` positions.
inv_freq_read = read["complex"]  # (Dh/2,)
print(f"inv_freq_0 = {inv_freq_read[0].item():.6f}, "
      f"inv_freq_(Dh/2-1) = {inv_freq_read[-1].item():.3e} "
      f"(10000 ** (-(Dh-2)/Dh) = {10000 ** (-(Dh - 2) / Dh):.3e})")
torch.testing.assert_close(inv_freq_read[0].item(), 1.0)
torch.testing.assert_close(inv_freq_read[-1].item(), 10000 ** (-(Dh - 2) / Dh))

# %%
# Proof: Hugging Face's weight permutation keeps the logits
# ---------------------------------------------------------
# Hugging Face's Llama conversion script permutes the rows of ``W_q`` and ``W_k`` with
# ``w.view(Nh, Dh // 2, 2, D).transpose(1, 2).reshape(D, D)``: per head, that is
# ``perm``. Since ``perm`` is the same for q and k, the attention logits are unchanged.
def split_heads_2d(t, Nh):
    """(L, D) -> (Nh, L, Dh)."""
    L, D = t.shape
    return t.reshape(L, Nh, D // Nh).transpose(0, 1)


def hf_permute(w, Nh):
    """The conversion script's row permutation of a (D_out, D_in) projection."""
    D_out, D_in = w.shape
    return w.view(Nh, D_out // Nh // 2, 2, D_in).transpose(1, 2).reshape(D_out, D_in)


# %%
D = Nh * Dh
W_q, W_k = (torch.randn(2, D, D, device=device) / math.sqrt(D)).unbind(0)  # (D, D) each
tokens = torch.randn(L, D, device=device)  # (L, D)
q = split_heads_2d(tokens @ W_q.T, Nh)  # (Nh, L, Dh)
k = split_heads_2d(tokens @ W_k.T, Nh)
q_hf = split_heads_2d(tokens @ hf_permute(W_q, Nh).T, Nh)  # (Nh, L, Dh)
k_hf = split_heads_2d(tokens @ hf_permute(W_k, Nh).T, Nh)
torch.testing.assert_close(q_hf, q[..., perm])  # the script's permutation, per head
logits = rope_real(q, pos) @ rope_real(k, pos).transpose(-1, -2)  # (Nh, L, L)
logits_hf = rope(q_hf, cos, sin) @ rope(k_hf, cos, sin).transpose(-1, -2)
print(f"max|logits adjacent pairs - logits rotate-half| = "
      f"{(logits - logits_hf).abs().max():.2e} (logits up to {logits.abs().max():.1f})")
torch.testing.assert_close(logits, logits_hf)

# %%
# Proof: the whole logit matrix is shift-invariant
# ------------------------------------------------
# Consequently the whole ``(L, L)`` logit matrix is unchanged when every position moves
# by the same ``s``: only differences of positions enter. In float64 this holds to the
# last digits for shifts up to ``1e4``.
def rope_logits(q, k, pos):
    """(L, Dh), (L, Dh), (L,) -> (L, L) logits <R_m q_m, R_n k_n>, adjacent pairs."""
    return rope_complex(q, pos) @ rope_complex(k, pos).T


# %%
q64, k64 = torch.randn(2, L, Dh, dtype=torch.float64, device=device).unbind(0)
pos0 = torch.arange(L, device=device)  # (L,)
ref64 = rope_logits(q64, k64, pos0)  # (L, L)
for s in (1, 100, 10_000):
    shifted = rope_logits(q64, k64, pos0 + s)
    err = (shifted - ref64).abs().max().item()
    print(f"float64, s = {s:6d}: max|logits(p + s) - logits(p)| = {err:.1e}")
    torch.testing.assert_close(shifted, ref64)

# %%
# Proof: the logit and RoFormer's bound decay with distance
# ---------------------------------------------------------
# RoFormer (section 3.4.3) bounds the logit at relative distance :math:`d` by a quantity
# that decays with :math:`d`: with :math:`S_j = \sum_{i<j} e^{\mathrm{i} d \omega_i}`,
# the relative upper bound is :math:`\sum_j |S_j| / (D_h/2)`. For
# :math:`q = k = (1, \dots, 1)` the logit itself is
# :math:`\langle R_0 q, R_d k \rangle = 2 \sum_i \cos(d\, \omega_i)`. Both are
# normalized to 1 at :math:`d = 0` and computed in float64 (:math:`d\, \omega_0` reaches
# 4096 rad), for a typical head width ``Dh = 128``.
Dh_fig = 128
d = torch.arange(0, 4097, dtype=torch.float64)  # (4097,) relative distances
inv_freq_fig = torch.tensor([math.pow(10000, -2 * i / Dh_fig)
                             for i in range(Dh_fig // 2)], dtype=torch.float64)
unit = torch.ones(len(d), Dh_fig // 2, dtype=torch.float64)  # (4097, Dh/2)
phases = torch.polar(unit, d[:, None] * inv_freq_fig)  # (4097, Dh/2), exp(1j d w_i)
S = phases.cumsum(dim=-1)  # (4097, Dh/2): S_j for j = 1 .. Dh/2
bound = S.abs().sum(dim=-1) / (Dh_fig // 2)  # (4097,)
ones = torch.ones(1, Dh_fig, dtype=torch.float64)  # (L=1, Dh)
ones_logit = (rope_complex(ones, d[:1])
              * rope_complex(ones.expand(len(d), -1), d)).sum(-1)  # (4097,)
torch.testing.assert_close(ones_logit, 2 * torch.cos(d[:, None] * inv_freq_fig).sum(-1))

near, far = bound[1:11].mean().item(), bound[1000:4001].mean().item()
near_ones = ones_logit[1:11].mean().item()
far_ones = ones_logit[1000:4001].mean().item()
print(f"relative upper bound: mean over d in [1, 10] = {near:.1f}, "
      f"over [1000, 4000] = {far:.1f}")
print(f"all-ones logit:       mean over d in [1, 10] = {near_ones:.1f}, "
      f"over [1000, 4000] = {far_ones:.1f}")
assert far < near / 3, "the bound no longer decays with distance?"
assert far_ones < near_ones / 3, "the all-ones logit does not decay?"

# %%
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
# Try it: drop the permutation. Do the two layouts still agree?
# -------------------------------------------------------------
# Apply the rotate-half ``rope`` to adjacent-pair tensors, without ``perm``.

# %%
# They rotate different planes: applying one convention's code to tensors laid out for
# the other is a different function, not a rounding difference.
gap = (rope(x, cos, sin) - rope_real(x, pos)).abs().max().item()
print(f"without perm: max|rope(x) - rope_real(x)| = {gap:.2f}")
assert gap > 1.0, "the two layouts agree without the permutation?"

# %%
# Try it: rotate in float32. Does a shift of 1e5 keep the logits?
# ---------------------------------------------------------------
# Repeat the shift check with float32 unit-norm queries and keys, shifts 1 to 1e5.

# %%
# The identity is just as exact in math, but the angles :math:`(p + s)\, \omega` are
# rounded to float32, an error that grows in proportion to ``|s|``: it stays inside the
# default float32 tolerance at ``s = 100`` and has left it (atol ``1e-5``) at
# ``s = 1e5``.
q32 = torch.nn.functional.normalize(q64.float(), dim=-1)  # (L, Dh), unit rows
k32 = torch.nn.functional.normalize(k64.float(), dim=-1)
ref32 = rope_logits(q32, k32, pos0)  # (L, L)
for s in (1, 10, 100, 1000, 10_000, 100_000):
    err = (rope_logits(q32, k32, pos0 + s) - ref32).abs().max().item()
    print(f"float32, s = {s:6d}: max|logits(p + s) - logits(p)| = {err:.1e}")
torch.testing.assert_close(rope_logits(q32, k32, pos0 + 100), ref32)
assert err > 1e-5, "float32 angle rounding no longer grows with the shift?"  # s = 1e5

# %%
# References
# ----------
# :footcite:t:`Su2021`, sections 3.2 and 3.4. ``torch.polar``,
# ``torch.view_as_complex``, ``torch.view_as_real``, ``torch.atan2``.
#
# .. footbibliography::
