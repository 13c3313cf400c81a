"""
Attention maps, full and causal, with and without QK-norm
=========================================================

Every head builds an ``(L, L)`` map of attention weights, one probability distribution
over the keys for each query. This page computes such maps from scratch, full and
causal, with and without :doc:`QK-norm </generated/normalization/plot_10_qk_norm>`,
checks each against ``scaled_dot_product_attention`` through the output it produces, and
draws them. What the map costs as the sequence grows is the next page,
:doc:`/generated/transformer/plot_07_attention_cost`.

**You will learn**

- how to read an attention map: one row per query, one column per key
- what the causal mask does to the map: only the lower triangle is left
- why large weights make the rows near one-hot, and how QK-norm keeps them spread
- how to check a map through the output it produces

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (attention,
QK-norm), :doc:`/generated/transformer/plot_04_causal_attention` (the causal mask).
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
import torch.nn.functional as F
from matplotlib.ticker import MaxNLocator

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# The map of one head is the matrix of its softmax weights, with the causal mask
# :math:`M` (0 on and below the diagonal, :math:`-\infty` above) when it is causal:
#
# .. math::
#
#    A = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{D_h}} + M\right),
#    \qquad \sum_m A_{lm} = 1.
#
# The logit :math:`q_l \cdot k_m / \sqrt{D_h}` grows with the norms of the query and
# the key; large logits make each row near one-hot. QK-norm replaces :math:`q` and
# :math:`k` by :math:`\mathrm{LN}(q)` and :math:`\mathrm{LN}(k)`, which fixes their
# norms and so bounds the logits.

# %%
# From scratch
# ------------
# The layout below is the notes' ``SelfAttention``: one ``Linear(D, 3D)``, reshaped to
# ``(B, L, 3, Nh, Dh)`` and split into ``q, k, v``; optional QK-norm, a
# ``LayerNorm(Dh)`` on each query and key. The logits are scaled *before* the softmax
# (the notes scale after it, see :doc:`/generated/transformer/plot_01_self_attention`).


def attention_map(x, qkv_proj, q_norm, k_norm, Nh, qk_norm, causal):
    """Attention weights (B, Nh, L, L) of x (B, L, D), after checking their output
    against scaled_dot_product_attention."""
    B, L, D = x.shape
    Dh = D // Nh
    with torch.no_grad():
        qkv = qkv_proj(x).reshape(B, L, 3, Nh, Dh).permute(2, 0, 3, 1, 4)  # 3,B,Nh,L,Dh
        q, k, v = qkv.unbind(0)  # (B, Nh, L, Dh)
        if qk_norm:
            q, k = q_norm(q), k_norm(k)
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
        if causal:  # query l may only look at keys m <= l
            future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # L, L
            logits = logits.masked_fill(future, float("-inf"))
        weights = logits.softmax(dim=-1)  # (B, Nh, L, L)
        out = torch.einsum("bhlm,bhmd->bhld", weights, v)  # (B, Nh, L, Dh)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # B, Nh, L, Dh
    print(f"qk_norm={qk_norm!s:5} causal={causal!s:5}: max|manual - sdpa| = "
          f"{(out - ref).abs().max().item():.1e}")
    torch.testing.assert_close(out, ref)
    return weights


# %%
# The projection weights are taken at four times their init scale, as weights may grow
# in training, which makes the difference QK-norm makes visible. The four maps of head
# 0, as an image each: query position down, key position across.
B, L, D, Nh = 1, 20, 64, 4  # L != Dh: neither can stand in for the other
Dh = D // Nh
x = torch.randn(B, L, D, device=device)  # (B, L, D)
qkv_proj = torch.nn.Linear(D, 3 * D).to(device)
q_norm = torch.nn.LayerNorm(Dh).to(device)
k_norm = torch.nn.LayerNorm(Dh).to(device)
with torch.no_grad():
    qkv_proj.weight.mul_(4)
maps = {}
for qk in (False, True):
    for causal in (False, True):
        maps[qk, causal] = attention_map(x, qkv_proj, q_norm, k_norm, Nh, qk, causal)

fig, axes = plt.subplots(2, 2, figsize=(6.4, 6.4), sharex=True, sharey=True,
                         layout="constrained")
for row, qk in enumerate((False, True)):
    for col, causal in enumerate((False, True)):
        ax = axes[row, col]
        im = ax.imshow(maps[qk, causal][0, 0].cpu(), vmin=0, vmax=1)
        kind = "causal" if causal else "full"
        ax.set_title(f"{kind} {'with' if qk else 'without'} QK-norm")
        ax.grid(False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions are integers
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
for ax in axes[1]:
    ax.set_xlabel("key position m")
for ax in axes[:, 0]:
    ax.set_ylabel("query position l")
fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
fig.suptitle("The causal mask keeps only the lower triangle;\n"
             "QK-norm keeps the weights spread (head 0)")
plt.show()

# %%
# What the maps show
# ------------------
# Each row is a probability distribution, the causal mask leaves exactly zero weight
# above the diagonal, and QK-norm keeps the rows spread. The largest weight of a row
# averages :measured:`peak_full:.2f` (full) and :measured:`peak_causal:.2f` (causal)
# without QK-norm: near one-hot; with it, :measured:`peak_full_qk:.2f` (full) and
# :measured:`peak_causal_qk:.2f` (causal). Asserted: above 0.6 without QK-norm,
# below 0.5 with it, in both maps.
for (qk, causal), w in maps.items():
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(B, Nh, L, device=device))
    assert torch.all(w >= 0)
    if causal:
        assert torch.all(w.triu(1) == 0)
print("rows sum to 1; causal maps are exactly 0 above the diagonal")
peak = {key: w.amax(dim=-1).mean().item() for key, w in maps.items()}
for causal in (False, True):
    print(f"{'causal' if causal else 'full':6s} maps, mean largest weight of a row: "
          f"{peak[False, causal]:.2f} without QK-norm, "
          f"{peak[True, causal]:.2f} with it")
    assert peak[False, causal] > 0.6  # near one-hot without QK-norm
    assert peak[True, causal] < 0.5  # spread with it
peak_full, peak_causal = peak[False, False], peak[False, True]
peak_full_qk, peak_causal_qk = peak[True, False], peak[True, True]

# %%
# Try it: which are more peaked, causal rows or full ones?
# --------------------------------------------------------
# Compare the mean largest weight of a row in the causal maps with the full ones, with
# and without QK-norm.
print(f"causal - full: {peak_causal - peak_full:.2f} without QK-norm, "
      f"{peak_causal_qk - peak_full_qk:.2f} with it")
assert peak_causal > peak_full and peak_causal_qk > peak_full_qk

# %%
# The causal ones, both ways: query :math:`l` sees only :math:`l + 1` keys, so its
# largest weight is at least :math:`1 / (l + 1)`, and the first rows hold one or two
# keys.
