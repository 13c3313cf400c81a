"""
ALiBi: attention with linear biases
===================================

ALiBi (Press et al., ICLR 2022) puts no positional embedding on the tokens: each head
adds to its logits a penalty linear in the query-key distance, a fixed slope per head.
Steep heads look locally, shallow ones almost uniformly; only offsets enter.

**You will learn**

- how the per-head slopes are built, including head counts that are not powers of two
- how the bias rides into ``scaled_dot_product_attention`` as an additive mask
- why the bias depends only on offsets, never on absolute positions
- why each head's weights fall exactly as ``exp(-slope * distance)`` for equal tokens

**Prerequisites:** :doc:`/generated/positional/plot_01_formulation` (what a position
encoding must do), :doc:`/generated/transformer/plot_04_causal_attention` (the causal
mask), :doc:`/generated/transformer/plot_02_multihead_attention` (the heads, one slope
each).

.. index:: ! ALiBi
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math

import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")


# %%
# The idea
# --------
# Instead of telling a token where it is, ALiBi tells each head how far apart two tokens
# are: head :math:`h` subtracts :math:`m_h` times the distance from the
# :doc:`logit </generated/transformer/plot_01_self_attention>` of query :math:`l` and
# key :math:`m` (keys after the query stay masked), with slopes forming a geometric
# sequence for :math:`N_h` heads:
#
# .. math::
#
#    \mathrm{softmax}_m\!\left(\frac{q_l \cdot k_m}{\sqrt{D_h}} - m_h\,(l - m)\right),
#    \qquad m_h = 2^{-8 (h + 1) / N_h}, \quad h = 0, \dots, N_h - 1.
#
# For identical tokens the bias alone sets the weights: the last query's weight at
# distance :math:`d` is :math:`\propto e^{-m_h d}`, a straight line on a log scale
# (drawn with ``softmax`` alone; SDPA gives exactly these weights, below).
import matplotlib.pyplot as plt

L_fig, Nh_fig = 64, 8
slopes_fig = 2.0 ** (-8 * torch.arange(1, Nh_fig + 1) / Nh_fig)  # (Nh,)
d_fig = torch.arange(L_fig)  # (L,), distance from the last query
w_fig = torch.softmax(-slopes_fig[:, None] * d_fig, dim=-1)  # (Nh, L)

fig, ax = plt.subplots()
for h in range(Nh_fig):
    ax.semilogy(d_fig, w_fig[h], color=f"C{h}",
                label=f"m = 1/{round(1 / slopes_fig[h].item())}")
ax.set_xlabel("distance l - m from the last query (tokens)")
ax.set_ylabel("attention weight (identical tokens)")
ax.set_title("ALiBi: each head's weight falls as exp(-slope × distance);\n"
             "steep heads look locally, shallow ones almost uniformly")
ax.set_ylim(1e-9, 1)
ax.legend(ncol=2, fontsize="small", loc="lower left")
plt.show()


# %%
# The slopes
# ----------
# For :math:`N_h` a power of two the slopes are the geometric sequence above: from
# :math:`2^{-8 / N_h}` down to :math:`2^{-8}`. Otherwise the paper takes the :math:`P`
# slopes of the largest power of two :math:`P < N_h`, then appends the first
# :math:`N_h - P` slopes of every other one of the :math:`2P`-head sequence (those fall
# halfway between, in log scale).
def alibi_slopes(Nh, device=None):
    """ALiBi slope of each head: (Nh,)."""
    P = 2 ** math.floor(math.log2(Nh))  # largest power of two <= Nh
    first = 2.0 ** (-8 * torch.arange(1, P + 1, device=device) / P)  # (P,)
    # every other slope of the 2P sequence: 2 ** (-8 (2j + 1) / (2P)), j < Nh - P
    extra = 2.0 ** (-4 * (2 * torch.arange(Nh - P, device=device) + 1) / P)  # (Nh - P,)
    return torch.cat([first, extra])


# %%
# With 8 heads the slopes halve from head to head, :math:`1/2` down to :math:`1/256`.
slopes8 = alibi_slopes(8, device)
print("Nh = 8: ", [f"1/{round(1 / s)}" for s in slopes8.tolist()])
halving = torch.tensor([2.0 ** -(h + 1) for h in range(8)], device=device)  # (8,)
assert torch.equal(slopes8, halving)  # powers of two: exact on every device


# %%
# The bias as an attention mask
# -----------------------------
# :math:`\mathrm{bias}_{h,l,m} = -m_h (l - m)` for keys at or before the query,
# :math:`-\infty` after it (causal), added to :math:`q \cdot k / \sqrt{D_h}`: an
# additive float ``attn_mask`` of shape ``(Nh, L, L)``, broadcast over the batch.
def alibi_bias(pos, slopes, causal=True):
    """ALiBi bias from integer positions pos (L,) and slopes (Nh,): (Nh, L, L)."""
    rel = (pos[:, None] - pos[None, :]).to(slopes.dtype)  # (L, L), l - m
    if not causal:
        return -slopes[:, None, None] * rel.abs()  # (Nh, L, L), symmetric
    bias = -slopes[:, None, None] * rel  # (Nh, L, L)
    return bias.masked_fill(rel < 0, float("-inf"))  # keys after the query: -inf


# %%
# SDPA with the bias as ``attn_mask`` equals the attention written out (float32, default
# tolerances; CUDA takes the memory-efficient kernel for a float mask, CPU math).
B, L, Nh, Dh = 2, 64, 8, 16
slopes = alibi_slopes(Nh, device)  # (Nh,)
pos = torch.arange(L, device=device)  # (L,)
bias = alibi_bias(pos, slopes)  # (Nh, L, L)
q, k, v = torch.randn(3, B, Nh, L, Dh, device=device).unbind(0)  # each (B, Nh, L, Dh)
sdpa = torch.nn.functional.scaled_dot_product_attention
fused = sdpa(q, k, v, attn_mask=bias)  # (B, Nh, L, Dh)
logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh) + bias  # (B, Nh, L, L)
explicit = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
print(f"max|SDPA(attn_mask=bias) - explicit| = "
      f"{(fused - explicit).abs().max().item():.2e}")
torch.testing.assert_close(fused, explicit)

# %%
# Only offsets matter
# -------------------
# Per head a table ``f_h(l - m)`` looked up by the offset; positions + 1000, same bits.
d = torch.arange(-(L - 1), L, device=device)  # (2L - 1,), every offset l - m
table = (-slopes[:, None] * d).masked_fill(d < 0, float("-inf"))  # (Nh, 2L - 1), f_h(d)
lookup = table[:, pos[:, None] - pos[None, :] + L - 1]  # (Nh, L, L), f_h(l - m)
print(f"bias == table[l - m]: {torch.equal(bias, lookup)}; shifted by 1000, the same: "
      f"{torch.equal(alibi_bias(pos + 1000, slopes), bias)}")
assert torch.equal(bias, lookup)
assert torch.equal(alibi_bias(pos + 1000, slopes), bias)

# %%
# Steeper heads look more locally
# -------------------------------
# With the same query and key for every token the bias alone decides: the last query
# sees distances :math:`d = 0, \dots, L-1` with weights :math:`r^d (1 - r) / (1 - r^L)`,
# :math:`r = e^{-m_h}`, the curves of the figure.
same = torch.randn(Dh, device=device).expand(B, Nh, L, Dh)  # (B, Nh, L, Dh), all equal
eye = torch.eye(L, device=device).expand(B, Nh, L, L)  # as values: out = weights
weights = sdpa(same, same, eye, attn_mask=bias)  # (B, Nh, L, L)
last = weights[0, :, -1].flip(-1)  # (Nh, L), weight at distance d = 0 .. L-1
dist = torch.arange(L, device=device)  # (L,)
r = torch.exp(-slopes)[:, None]  # (Nh, 1)
closed = r**dist * (1 - r) / (1 - r**L)  # (Nh, L)
print(f"max|SDPA weights - r^d (1 - r) / (1 - r^L)| = "
      f"{(last - closed).abs().max().item():.2e}")
torch.testing.assert_close(last, closed)

# %%
# Proof: the slopes follow the paper's procedure for every head count
# -------------------------------------------------------------------
# For head counts that are not powers of two, compare with the procedure of the paper's
# code, written out in plain Python (recursive, no torch) as an independent reference.
def get_slopes_reference(n):
    """The paper's slopes for n heads, as a list of floats."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))  # 2 ** (-8 / n)
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes_reference(2 * closest)[0::2][: n - closest]


# %%
log2_slopes = [math.log2(s) for s in alibi_slopes(12, device).tolist()]
print("Nh = 12: log2(m_h) =", " ".join(f"{e:g}" for e in log2_slopes))
for n in range(1, 65):
    ref = torch.tensor(get_slopes_reference(n), device=device)
    torch.testing.assert_close(alibi_slopes(n, device), ref)
print("alibi_slopes(Nh) matches the reference procedure for Nh = 1 .. 64")

# %%
# Proof: the bias is Toeplitz, and with all slopes zero the causal mask
# ---------------------------------------------------------------------
# A table looked up by the offset is constant along every diagonal.
print(f"diagonals constant: {torch.equal(bias[:, 1:, 1:], bias[:, :-1, :-1])}")
assert torch.equal(bias[:, 1:, 1:], bias[:, :-1, :-1])

# %%
# The ``-inf`` sits on the right side: with all slopes zero, the bias is just the causal
# mask, and SDPA with it equals SDPA with ``is_causal=True``.
no_slope = alibi_bias(pos, torch.zeros_like(slopes))  # (Nh, L, L)
causal = sdpa(q, k, v, is_causal=True)  # (B, Nh, L, Dh)
masked = sdpa(q, k, v, attn_mask=no_slope)  # (B, Nh, L, Dh)
zero_gap = (masked - causal).abs().max().item()
print(f"slopes = 0: max|SDPA(attn_mask) - SDPA(is_causal=True)| = {zero_gap:.2e}")
torch.testing.assert_close(masked, causal)

# %%
# Proof: the steepest head looks locally, the shallowest almost uniformly
# -----------------------------------------------------------------------
print("weight on the query itself, per head:",
      " ".join(f"{w:.3f}" for w in last[:, 0].tolist()))

# %%
# The steepest head (:math:`m = 1/2`) puts :math:`1 - e^{-1/2}` =
# :measured:`self_weight:.3f` of its weight on the query itself and at most
# :measured:`far_weight:.1e` on any key beyond 20 tokens; the shallowest
# (:math:`m = 1/256`) is nearly uniform, its weights varying by only
# :math:`e^{(L - 1) m} = e^{63/256}` = :measured:`spread:.3f` times over all 64 keys.
self_weight = last[0, 0].item()
far_weight = last[0, 21:].max().item()
spread = (last[-1].max() / last[-1].min()).item()
print(f"m = 1/2: weight on itself {self_weight:.3f}, largest beyond 20 tokens "
      f"{far_weight:.1e}")
print(f"m = 1/256: max/min weight {spread:.3f}")
torch.testing.assert_close(last[0, 0], 1 - torch.exp(torch.tensor(-0.5, device=device)))
assert last[0, 21:].max() < 1e-4
assert abs(spread - math.exp(63 / 256)) < 1e-3  # the closed form, e^((L - 1) m)

# %%
# Try it: bias by the key position alone. Does attention change?
# --------------------------------------------------------------
# The paper's code adds :math:`m_h m` instead of :math:`-m_h (l - m)`. Compare outputs.

# %%
# The key-only bias is the same row for every query; the two masks differ by
# :math:`-m_h l`, a constant along each row, and softmax ignores constants per row: a
# different mask, the same attention.
key_only = (slopes[:, None, None] * pos.to(slopes.dtype)).expand(Nh, L, L)  # m_h * m
key_only = key_only.masked_fill(torch.isinf(bias), float("-inf"))  # (Nh, L, L)
mask_gap = (key_only - bias)[:, -1, 0].abs().max().item()  # l = L-1, m = 0: m_h (L-1)
out_key_only = sdpa(q, k, v, attn_mask=key_only)  # (B, Nh, L, Dh)
print(f"masks differ by up to {mask_gap:.1f}; max|output difference| = "
      f"{(out_key_only - fused).abs().max().item():.2e}")
assert mask_gap > 1.0  # m_h (L - 1), printed above
torch.testing.assert_close(out_key_only, fused)

# %%
# Either mask gives the keys after the query a weight of exactly zero,
# :math:`e^{-\infty} = 0` (``v = eye(L)`` makes SDPA return the weights). A large finite
# fill such as ``-100`` would leave them near :math:`e^{-100}`, invisible next to the
# other weights, which is why the outputs above cannot tell, but not zero where that is
# a float32 denormal (unless the hardware flushes denormals).
eye_v = torch.eye(L, device=device).expand(B, Nh, L, L)  # as values: out = weights
future = torch.isinf(bias[0])  # (L, L), keys after the query
n_future = future.sum().item() * B * Nh  # weights on keys after the query
nonzero = {name: (sdpa(q, k, eye_v, attn_mask=mask)[..., future] != 0).sum().item()
           for name, mask in (("bias", bias), ("key-only", key_only))}
print(f"nonzero weights on keys after the query, of {n_future}:",
      ", ".join(f"{name} {n}" for name, n in nonzero.items()))
assert nonzero == {"bias": 0, "key-only": 0}

# %%
# Try it: drop the causal mask. How does the middle query attend?
# ---------------------------------------------------------------
# Encoders use ``alibi_bias(..., causal=False)``: predict the middle query's weights.

# %%
# The bias is :math:`-m_h |l - m|`, symmetric; for identical tokens the weights are
# :math:`e^{-m_h |d|}`, normalized, on both sides.
sym = alibi_bias(pos, slopes, causal=False)  # (Nh, L, L)
mid = L // 2
w_sym = sdpa(same, same, eye, attn_mask=sym)  # (B, Nh, L, L)
expected = torch.exp(-slopes[:, None] * (dist - mid).abs())  # (Nh, L)
expected = expected / expected.sum(dim=-1, keepdim=True)
print(f"symmetric: bias == bias^T {torch.equal(sym, sym.transpose(1, 2))}; "
      f"max|SDPA weights of query {mid} - exp(-m|d|)/Z| = "
      f"{(w_sym[0, :, mid] - expected).abs().max().item():.2e}")
assert torch.equal(sym, sym.transpose(1, 2))
torch.testing.assert_close(w_sym[0, :, mid], expected)

# %%
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention`` (``attn_mask``, ``is_causal``),
# ``torch.einsum``. :footcite:t:`Press2021`.
#
# .. footbibliography::
