"""
QK-Norm: bounding attention logits
==================================

QK-norm applies ``nn.LayerNorm(Dh)`` to every query and key row, per head, before the
dot product. With its affine at the initial identity this caps every attention logit
at ``sqrt(Dh)``, whatever the scale of the weights or of the input, so attention cannot
collapse to one-hot as the weights grow. The source notes build it and leave "Add
descriptions of QK Norm" as a to-do: this page fills it in.

**You will learn**

- where QK-norm sits in attention: after the head split, before the dot product
- why a normalized row has norm at most ``sqrt(Dh)``, and so every logit at most
  ``sqrt(Dh)`` (Cauchy-Schwarz)
- that the logits then barely move when the weights grow a hundredfold
- why attention with QK-norm cannot collapse to one-hot (an entropy floor)

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (attention and
its heads), :doc:`/generated/normalization/plot_04_layernorm` (LayerNorm).

.. index:: ! QK-norm
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
# LayerNorm without affine returns a row :math:`\hat q` with zero mean and mean square
# :math:`v / (v + \epsilon)` (row variance :math:`v`), so :math:`\|\hat q\| \le
# \sqrt{D_h}`. By Cauchy-Schwarz every logit is then bounded, however large ``W_q`` and
# ``W_k`` grow:
#
# .. math::
#
#    z_{lm} = \frac{\hat q_l \cdot \hat k_m}{\sqrt{D_h}}, \qquad
#    |z_{lm}| \le \frac{\|\hat q_l\|\,\|\hat k_m\|}{\sqrt{D_h}} \le \sqrt{D_h}
#
# The figure scales both projections by ``s``: without QK-norm the logits are bilinear
# in the weights and grow as :math:`s^2`; with it they stay put, below the cap.
import math

import matplotlib.pyplot as plt

B, L, D, Nh = 2, 64, 64, 4
Dh = D // Nh
x = torch.randn(B, L, D, device=device)  # (B, L, D)
W_q = torch.nn.Linear(D, D, bias=False).to(device)
W_k = torch.nn.Linear(D, D, bias=False).to(device)
W_v = torch.nn.Linear(D, D, bias=False).to(device)
q_norm = torch.nn.LayerNorm(Dh).to(device)
k_norm = torch.nn.LayerNorm(Dh).to(device)

scales = torch.logspace(-0.5, 1.5, 17).tolist()
z_with, z_without = [], []  # each (B, Nh, L, L), one per scale
with torch.no_grad():
    for s in scales:
        q_s = (x @ (s * W_q.weight).T).reshape(B, L, Nh, Dh).transpose(1, 2)
        k_s = (x @ (s * W_k.weight).T).reshape(B, L, Nh, Dh).transpose(1, 2)
        z_without.append(torch.einsum("bhld,bhmd->bhlm", q_s, k_s) / math.sqrt(Dh))
        z_with.append(torch.einsum("bhld,bhmd->bhlm", q_norm(q_s), k_norm(k_s))
                      / math.sqrt(Dh))
with_norm = torch.tensor([z.abs().max().item() for z in z_with])
without = torch.tensor([z.abs().max().item() for z in z_without])
scales = torch.tensor(scales)

fig, ax = plt.subplots()
ax.loglog(scales, without, "o-", label="without QK-norm")
ax.loglog(scales, with_norm, "s-", label="with QK-norm (LayerNorm over Dh)")
ax.axhline(math.sqrt(Dh), color="gray", ls="--",
           label=f"bound √Dh = {math.sqrt(Dh):.0f}")
ax.set_xlabel("projection weight scale s")
ax.set_ylabel("max |attention logit|")
ax.set_title("Logits grow as s² without QK-norm; with it they stay put, below √Dh")
ax.legend()
plt.show()

# %%
# Attention with QK-norm, from scratch
# ------------------------------------
# Project the tokens, split the heads, then normalize each query and key row of width
# ``Dh`` with ``nn.LayerNorm(Dh)`` exactly as the notes' ``SelfAttention`` does. After
# that the usual attention follows: :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h})\, v`
# per head. ``attention_logits`` returns the logits, with or without the norms.
import math

import torch


# Copied from transformer/plot_01_self_attention.py: split_heads
def split_heads(t, Nh):
    """(B, L, D) -> (B, Nh, L, Dh): head i owns features i*Dh .. (i+1)*Dh - 1."""
    B, L, D = t.shape
    return t.reshape(B, L, Nh, D // Nh).transpose(1, 2)


def attention_logits(x, W_q, W_k, Nh, q_norm=None, k_norm=None):
    """Logits (B, Nh, L, L) of x (B, L, D) under projection weights W_q, W_k (D, D);
    each head's q and k rows are normalized by q_norm, k_norm when given."""
    q = split_heads(x @ W_q.T, Nh)  # (B, Nh, L, Dh)
    k = split_heads(x @ W_k.T, Nh)  # (B, Nh, L, Dh)
    if q_norm is not None:
        q, k = q_norm(q), k_norm(k)
    return torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(q.shape[-1])


# %%
# Head h reads features ``h*Dh`` to ``(h+1)*Dh`` of each token (checked for head 1);
# the hand-written attention equals ``scaled_dot_product_attention`` on the normalized
# ``q`` and ``k``, and ``attention_logits`` gives the same logits.
t = torch.randn(B, L, D, device=device)  # (B, L, D)
assert torch.equal(split_heads(t, Nh)[:, 1], t[..., Dh : 2 * Dh])

with torch.no_grad():  # forward passes only on this page
    q = q_norm(split_heads(W_q(x), Nh))  # (B, Nh, L, Dh), each row normalized over Dh
    k = k_norm(split_heads(W_k(x), Nh))  # (B, Nh, L, Dh)
    v = split_heads(W_v(x), Nh)  # (B, Nh, L, Dh)

    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
    attn = logits.softmax(dim=-1)  # (B, Nh, L, L)
    manual = torch.einsum("bhlm,bhmd->bhld", attn, v)  # (B, Nh, L, Dh)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)
    z_scratch = attention_logits(x, W_q.weight, W_k.weight, Nh, q_norm, k_norm)
    raw_logits = torch.einsum("bhld,bhmd->bhlm", split_heads(W_q(x), Nh),
                              split_heads(W_k(x), Nh)) / math.sqrt(Dh)  # (B, Nh, L, L)
    z_raw = attention_logits(x, W_q.weight, W_k.weight, Nh)
print(f"max|manual - scaled_dot_product_attention| = "
      f"{(manual - fused).abs().max().item():.2e}")
torch.testing.assert_close(manual, fused)
gap_n = (z_scratch - logits).abs().max().item()
gap_raw = (z_raw - raw_logits).abs().max().item()
print(f"max|attention_logits - logits above| = {gap_n:.1e}")
print(f"without the norms, vs raw W_q(x), W_k(x): {gap_raw:.1e}")
torch.testing.assert_close(z_scratch, logits)
torch.testing.assert_close(z_raw, raw_logits)

# %%
# .. _errata-qk-norm-bounds:
#
# What QK-norm bounds: the row norm
# ---------------------------------
# LayerNorm without affine returns a row with zero mean and mean square
# :math:`v / (v + \epsilon)` (row variance :math:`v`), so its norm is
# :math:`\sqrt{D_h} \sqrt{v / (v + \epsilon)} \le \sqrt{D_h}`. By Cauchy-Schwarz
# :math:`|q \cdot k| \le \|q\| \|k\| \le D_h`, hence every logit obeys
# :math:`|q \cdot k| / \sqrt{D_h} \le \sqrt{D_h}`. The default LayerNorm starts with
# ``weight = 1, bias = 0``, so this is the state at init.
assert torch.all(q_norm.weight == 1) and torch.all(q_norm.bias == 0)
raw_q = split_heads(W_q(x), Nh).detach()  # (B, Nh, L, Dh), before the norm
var = raw_q.var(dim=-1, unbiased=False)  # (B, Nh, L)
expected_norm = math.sqrt(Dh) * torch.sqrt(var / (var + q_norm.eps))
print(f"row norms of normalized q: min {q.norm(dim=-1).min():.4f}, "
      f"max {q.norm(dim=-1).max():.4f}, sqrt(Dh) = {math.sqrt(Dh):.4f}")
torch.testing.assert_close(q.norm(dim=-1), expected_norm)
assert q.norm(dim=-1).max() <= math.sqrt(Dh)


# %%
# Proof: the cap holds over four decades of weight and input scale
# -----------------------------------------------------------------
# Multiply the projection weights by ``s`` and the input by ``a``, four decades each,
# and recompute the logits with ``attention_logits``. Only when the variance of ``q``
# falls to the order of ``eps`` (``s * a = 1e-2`` and below) do the normalized rows, and
# with them the logits, shrink (the first Try it measures by how much).
grid = {}
with torch.no_grad():
    for s in (1e-2, 1.0, 1e2):
        for a in (1e-2, 1.0, 1e2):
            Wq_s, Wk_s = s * W_q.weight, s * W_k.weight  # (D, D) each
            z_n = attention_logits(a * x, Wq_s, Wk_s, Nh, q_norm, k_norm)
            grid[s, a] = z_n.abs().max().item()
            without_sa = attention_logits(a * x, Wq_s, Wk_s, Nh).abs().max().item()
            print(f"s={s:5.0e} a={a:5.0e}: max|logit| with QK-norm {grid[s, a]:6.3f}, "
                  f"without {without_sa:9.3e}")
            assert grid[s, a] <= math.sqrt(Dh)

# %%
# Proof: the bound is tight
# --------------------------
# A query scored against itself (as a key would be if ``W_k = W_q``)
# gets :math:`\|q\|^2 / \sqrt{D_h} = \sqrt{D_h}\, v / (v + \epsilon)`, a hair under
# :math:`\sqrt{D_h}`.
self_logits = torch.einsum("bhld,bhld->bhl", q, q) / math.sqrt(Dh)  # (B, Nh, L)
print(f"self logits: max {self_logits.max():.5f}, bound sqrt(Dh) = {math.sqrt(Dh)}")
torch.testing.assert_close(self_logits, math.sqrt(Dh) * var / (var + q_norm.eps))

# %%
# Proof: a learnable affine moves the cap, not the principle
# ----------------------------------------------------------
# With ``weight = gamma`` (and a
# ``bias = beta``) each norm is at most :math:`\sqrt{D_h} \max|\gamma| + \|\beta\|`, so
# with ``bias=False`` the cap is :math:`\sqrt{D_h} \max|\gamma_q| \max|\gamma_k|`. Both
# are checked at a weight scale of 100, where the raw logits are in the thousands.
for bias in (False, True):
    qn = torch.nn.LayerNorm(Dh, bias=bias).to(device)
    kn = torch.nn.LayerNorm(Dh, bias=bias).to(device)
    with torch.no_grad():
        for norm in (qn, kn):
            norm.weight.copy_(torch.randn(Dh))
            if bias:
                norm.bias.copy_(torch.randn(Dh))
        q_big = qn(split_heads(x @ (100 * W_q.weight).T, Nh))  # (B, Nh, L, Dh)
        k_big = kn(split_heads(x @ (100 * W_k.weight).T, Nh))  # (B, Nh, L, Dh)
        z_big = torch.einsum("bhld,bhmd->bhlm", q_big, k_big) / math.sqrt(Dh)
        # z_big are the logits scaled_dot_product_attention uses on q_big, k_big.
        out_big = torch.einsum("bhlm,bhmd->bhld", z_big.softmax(dim=-1), v)
        sdpa_big = torch.nn.functional.scaled_dot_product_attention(q_big, k_big, v)
    torch.testing.assert_close(out_big, sdpa_big)
    largest = z_big.abs().max()
    cap_q = math.sqrt(Dh) * qn.weight.abs().max() + (qn.bias.norm() if bias else 0)
    cap_k = math.sqrt(Dh) * kn.weight.abs().max() + (kn.bias.norm() if bias else 0)
    cap = (cap_q * cap_k / math.sqrt(Dh)).item()
    print(f"bias={bias!s:5}: max|logit| = {largest:.3f} <= bound {cap:.3f}; "
          f"max|softmax(z) v - sdpa| = {(out_big - sdpa_big).abs().max():.1e}")
    assert largest <= cap

# %%
# Proof: with QK-norm the logits barely move as the weights grow
# ---------------------------------------------------------------
# Without QK-norm the logits of the figure grow as :math:`s^2` (true by construction of
# this code, so printed as an illustration, not asserted). With QK-norm, LayerNorm
# divides a row of variance :math:`s^2 v` by :math:`\sqrt{s^2 v + \epsilon}`, which
# differs from its eps-free value by a factor within :math:`\epsilon / (2 s^2 v)` of 1.
# So between :math:`s = 0.32` and :math:`s = 32` no logit can move by more than
# :math:`\sqrt{D_h}\, \epsilon / (2 s^2) \cdot (1 / v_q + 1 / v_k)`, with the smallest
# row variances at ``s = 1`` and LayerNorm's default ``eps = 1e-5``, the QK-norm the
# notes build. The page measures the largest move of any logit against that bound (it is
# within a factor 2 of it). This is why QK-norm is used to stop attention-logit growth
# in large models, e.g. ViT-22B (:footcite:t:`Dehghani2023`).
ratio = without / scales**2
print(f"without QK-norm, max|logit| / s^2 in [{ratio.min():.5f}, {ratio.max():.5f}]")

eps_ln = 1e-5  # nn.LayerNorm's default, as in the notes' QK-norm
with torch.no_grad():
    var_q = split_heads(W_q(x), Nh).var(dim=-1, unbiased=False).min().item()
    var_k = split_heads(W_k(x), Nh).var(dim=-1, unbiased=False).min().item()
s_min, s_max = scales[0].item(), scales[-1].item()
bound = math.sqrt(Dh) * eps_ln / (2 * s_min**2) * (1 / var_q + 1 / var_k)
move = max((z - z_with[-1]).abs().max().item() for z in z_with)
print(f"with QK-norm: max|logit| in [{with_norm.min():.4f}, {with_norm.max():.4f}]")
print(f"              largest move of any logit {move:.1e}, bound {bound:.1e}")
assert move <= bound + 1e-5  # + float32 rounding of logits of size ~4 (default atol)
assert move > bound / 2  # the bound is not loose
assert with_norm.max() <= math.sqrt(Dh)

# %%
# The bound's ingredient, measured directly: the largest relative shrink of a normalized
# row between ``s_max`` and ``s_min`` is, to first order,
# :math:`\epsilon / (2 s_{\min}^2 v)` at the smallest row variance, for ``q`` and for
# ``k``. Tolerance 1 %: the second-order term
# (:math:`\epsilon / (s_{\min}^2 v) \approx 2 \cdot 10^{-3}` relative) and float32
# rounding of row norms near :math:`\sqrt{D_h}` (``~1e-4`` of a shrink of ``~1e-3``) are
# below it.
with torch.no_grad():
    shrink = [(1 - nm(s_min * raw).norm(dim=-1) / nm(s_max * raw).norm(dim=-1)).max()
              for nm, raw in ((q_norm, split_heads(W_q(x), Nh)),
                                (k_norm, split_heads(W_k(x), Nh)))]
shrink = torch.stack(shrink).double()  # (2,): q, k
first_order = torch.tensor([eps_ln / (2 * s_min**2 * v) for v in (var_q, var_k)],
                           dtype=torch.float64)
print(f"largest row shrink: q {shrink[0]:.4e}, k {shrink[1]:.4e}; first order "
      f"{first_order[0]:.4e}, {first_order[1]:.4e}")
torch.testing.assert_close(shrink, first_order, rtol=1e-2, atol=0.0)


# %%
# Proof: with QK-norm attention cannot collapse (entropy)
# -------------------------------------------------------
# The entropy of a row of attention weights is :math:`\log L` for uniform attention and
# 0 for one-hot. A cap :math:`b = \sqrt{D_h}` on :math:`|z|` (logit :math:`z`)
# guarantees a floor: the largest probability is at most
# :math:`1 / (1 + (L - 1) e^{-2 b})`, and entropy is at least :math:`-\log` of it. The
# actual entropy with QK-norm sits far above that floor: its logits are
# :math:`\sqrt{D_h} \cos(q, k)`, and for these random projections :math:`\cos` spreads
# by about :math:`1 / \sqrt{D_h}`, so the logits spread by about 1, not the 8 the cap
# allows, which keeps the entropy near :math:`\log L - 1/2`. At small ``s`` QK-norm
# attention is the *sharper* one: it fixes the logit scale instead of letting it follow
# the weights; a learnable ``gamma`` gives that freedom back, within its cap. And with
# QK-norm the entropy does not move with ``s``: for a row of logits ``z``,
# :math:`\partial H / \partial z_m = -p_m (z_m - \sum_j p_j z_j)`, so moving every logit
# by at most :math:`\delta` (``bound``) moves :math:`H` by at most
# :math:`\delta (\max z - \min z) \le 2 \delta \sqrt{D_h}`.
def mean_entropy(z):
    """Mean entropy (nats) of the attention rows of logits z (B, Nh, L, L)."""
    log_p = z.log_softmax(dim=-1)  # (B, Nh, L, L)
    return -(log_p.exp() * log_p).sum(dim=-1).mean().item()


# %%
H_with = torch.tensor([mean_entropy(z) for z in z_with])
H_without = torch.tensor([mean_entropy(z) for z in z_without])
floor = math.log(1 + (L - 1) * math.exp(-2 * math.sqrt(Dh)))
# The row with one logit at +sqrt(Dh) and the rest at -sqrt(Dh) attains the floor.
worst = torch.full((L,), -math.sqrt(Dh), dtype=torch.float64)  # (L,)
worst[0] = math.sqrt(Dh)
floor_attained = -worst.softmax(dim=-1).max().log().item()
print(f"log(L) = {math.log(L):.3f}, guaranteed floor = {floor:.4f} nats, "
      f"-log max p of the worst row {floor_attained:.4f}")
torch.testing.assert_close(floor, floor_attained)  # float64 defaults
p_worst = worst.softmax(dim=-1)  # (L,)
H_worst = -(p_worst * p_worst.log()).sum().item()  # its entropy, written out
torch.testing.assert_close(mean_entropy(worst.expand(1, 1, L, L)), H_worst)  # per row
H_bound = (bound + 1e-5) * 2 * math.sqrt(Dh)
print(f"with QK-norm: entropy in [{H_with.min():.4f}, {H_with.max():.4f}], spread "
      f"{H_with.max() - H_with.min():.1e}, bound {H_bound:.1e}")
print(f"without, at s = {scales[-1]:.1f}: {H_without[-1]:.2e}")
assert H_with.max() - H_with.min() <= H_bound
assert H_with.min() >= floor
assert H_with.min() > 0.5 * math.log(L)  # observed, with the margin explained above

fig, ax = plt.subplots()
ax.semilogx(scales, H_without, "o-", label="without QK-norm")
ax.semilogx(scales, H_with, "s-", label="with QK-norm")
ax.axhline(math.log(L), color="gray", ls="--",
           label=f"uniform: log L = {math.log(L):.2f}")
ax.axhline(floor, color="gray", ls=":", label=f"floor from |logit| ≤ √Dh: {floor:.2f}")
ax.set_xlabel("projection weight scale s")
ax.set_ylabel("mean attention entropy (nats)")
ax.set_title("Without QK-norm attention collapses to one-hot;\n"
             "with it the entropy does not move")
ax.legend(loc="lower left", bbox_to_anchor=(0, 0.06))
plt.show()

# %%
# .. _errata-qk-scale-after-softmax:
#
# Proof: the notes scale after the softmax (erratum)
# --------------------------------------------------
# The notes' ``forward`` computes :math:`\mathrm{softmax}(q k^\top)` first and
# multiplies the *probabilities* by :math:`1 / \sqrt{D_h}`. That is wrong: the scale is
# a temperature on the logits. Applied afterwards it leaves attention at temperature 1,
# :math:`\mathrm{softmax}(q k^\top / 1)`, and only shrinks every output by
# :math:`\sqrt{D_h}`. PyTorch's ``scaled_dot_product_attention`` with ``scale=1``,
# divided by :math:`\sqrt{D_h}`, reproduces the notes' output; with its default scale it
# does not. (The notes' attention rows sum to :math:`1 / \sqrt{D_h}` instead of 1, which
# holds by construction: printed as an illustration.)
with torch.no_grad():
    # The notes' order: softmax first, then the scale.
    attn_notes = torch.einsum("bhld,bhmd->bhlm", q, k).softmax(dim=-1)
    attn_notes = attn_notes * (1 / math.sqrt(Dh))  # (B, Nh, L, L)
    out_notes = torch.einsum("bhlm,bhmd->bhld", attn_notes, v)  # (B, Nh, L, Dh)
    temperature_1 = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
print(f"notes: attention rows sum to {attn_notes.sum(dim=-1).mean().item():.4f} "
      f"(1/sqrt(Dh) = {Dh**-0.5})")
gap = (out_notes - fused).abs().max().item()
err = (out_notes - temperature_1 / math.sqrt(Dh)).abs().max().item()
print(f"max|notes - sdpa| = {gap:.2e}, "
      f"max|notes - sdpa(scale=1) / sqrt(Dh)| = {err:.1e}")
torch.testing.assert_close(out_notes, temperature_1 / math.sqrt(Dh))
assert gap > 0.1, "the notes' order now matches scaled_dot_product_attention?"

# %%
# Try it: shrink the input until its variance nears eps. Does the cap still bind?
# --------------------------------------------------------------------------------
# Compare the largest logit of the grid at ``s * a = 1e-2`` with the one at
# ``s * a = 1``.
shrink_1e2 = grid[1e-2, 1.0] / grid[1.0, 1.0]
print(f"s * a = 1e-2: max|logit| is {shrink_1e2:.2f} of its value at s * a = 1")
assert shrink_1e2 < 0.9  # var ~ eps shrinks the rows

# %%
# Try it: remove QK-norm. What is the attention entropy at s = 32?
# ----------------------------------------------------------------
# Read the last point of the entropy curve without QK-norm against :math:`\log L`.
print(f"without QK-norm at s = {scales[-1]:.1f}: entropy {H_without[-1]:.2e} nats, "
      f"log L = {math.log(L):.2f}")
assert H_without[-1] < 0.1 * math.log(L)  # one-hot attention without QK-norm

# %%
# References
# ----------
# QK-Norm: :footcite:t:`Henry2020`; with LayerNorm, as here: ViT-22B,
# :footcite:t:`Dehghani2023`.
#
# .. footbibliography::
