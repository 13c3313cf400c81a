"""
ALiBi as BLOOM builds it
========================

Hugging Face's BLOOM (Le Scao et al., 2022), the best-known model trained with ALiBi,
does not build the relative bias ``-m_h (p_l - p_m)`` of :doc:`ALiBi <plot_06_alibi>`:
it adds one row ``m_h * p_m`` per sequence to every query's logits, ``p_m`` the position
of key ``m`` among the real tokens. The two differ by a constant per query, which
:doc:`softmax </generated/transformer/plot_01_self_attention>` ignores: the same
attention weights.

**You will learn**

- how BLOOM's ``build_alibi_tensor`` writes ALiBi as one per-key row per sequence
- why it gives the same weights as the relative bias (softmax ignores a constant)
- why positions must count real tokens, not raw indices, when a batch has holes
- how to write BLOOM's attention with the book's bias, equal to ``BloomModel``'s

**Prerequisites:** :doc:`plot_06_alibi` (ALiBi and its slopes),
:doc:`/generated/transformer/plot_04_causal_attention` (causal and padding masks).
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every model is built from a small random config; nothing is
# downloaded (``HF_HUB_OFFLINE=1``).
#
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import math

import matplotlib.pyplot as plt
import torch
import transformers
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The book's ALiBi slopes, copied verbatim from :doc:`ALiBi <plot_06_alibi>` (which
# proves them equal to the ALiBi paper's procedure).


# Copied from positional/plot_06_alibi.py: alibi_slopes
def alibi_slopes(Nh, device=None):
    """ALiBi slope of each head: (Nh,)."""
    P = 2 ** math.floor(math.log2(Nh))  # largest power of two <= Nh
    first = 2.0 ** (-8 * torch.arange(1, P + 1, device=device) / P)  # (P,)
    # every other slope of the 2P sequence: 2 ** (-8 (2j + 1) / (2P)), j < Nh - P
    extra = 2.0 ** (-4 * (2 * torch.arange(Nh - P, device=device) + 1) / P)  # (Nh - P,)
    return torch.cat([first, extra])


# %%
# The idea
# --------
# For query ``l`` and key ``m`` of head ``h`` with slope :math:`m_h`, at positions
# :math:`p_l, p_m` among the real tokens:
#
# .. math::
#
#    \underbrace{m_h\, p_m}_{\text{BLOOM}}
#    = \underbrace{-m_h\,(p_l - p_m)}_{\text{relative (ALiBi)}} + m_h\, p_l,
#    \qquad \mathrm{softmax}_m(s_m + c) = \mathrm{softmax}_m(s_m).
#
# The extra term depends on the query only, so the weights are the same. Below, one
# left-padded sequence (3 pads, then 7 tokens), its last query (real position 6) and
# the steepest of 6 heads (``m_h = 1/2``), with random logits: the biases are parallel
# lines 3 apart, the weights coincide.
p_m = torch.tensor([0.0, 0, 0, 0, 1, 2, 3, 4, 5, 6])  # real positions, 0 at the pads
seen = torch.arange(10) >= 3  # (L,): the query sees every real key
logit = torch.randn(10)  # (L,), standing for q . k / sqrt(Dh)
biases = {"BLOOM: m p_m": 0.5 * p_m, "relative: -m (p_l - p_m)": -0.5 * (6 - p_m)}
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
for (label, bias), style in zip(biases.items(), ("o-", "x--")):
    weight = (logit + bias).masked_fill(~seen, float("-inf")).softmax(-1)  # (L,)
    ax0.plot(torch.arange(3, 10), bias[seen], style, label=label)
    ax1.plot(torch.arange(3, 10), weight[seen], style, ms=8, label=label)
for ax, ylabel in ((ax0, "bias (logit units)"), (ax1, "attention weight")):
    ax.axvspan(-0.5, 2.5, color="0.85", label="padding" if ax is ax0 else None)
    ax.set(xlabel="key index m", ylabel=ylabel, xlim=(-0.5, 9.5))
    ax.legend(fontsize="small")
fig.suptitle("BLOOM's per-key bias is the relative bias plus a constant per query:\n"
             "the softmax weights are the same (left padding, m = 1/2)")
plt.show()

# %%
# From scratch
# ------------
# BLOOM takes the padding mask ``(B, L)`` (1 for a token, 0 for padding) and gives each
# key its position among the real tokens, ``p_m``, with 0 at padding: ``(cumsum - 1) *
# mask`` in its code. Written here without a cumulative sum, by counting the real
# tokens one row at a time. The bias ``m_h * p_m`` is the same for every query: shape
# ``(B, Nh, 1, L)``, broadcast over the queries.


def real_positions(mask):
    """Position of each key among the real tokens of its row, 0 at padding: (B, L)."""
    pos = torch.zeros(mask.shape, dtype=torch.long, device=mask.device)  # (B, L)
    for b in range(mask.shape[0]):
        real = mask[b].bool()  # (L,)
        pos[b, real] = torch.arange(int(real.sum()), device=mask.device)
    return pos


def bloom_bias(mask, slopes):
    """BLOOM's per-key ALiBi bias m_h * p_m: (B, Nh, 1, L)."""
    pos = real_positions(mask).to(slopes.dtype)  # (B, L)
    return slopes[None, :, None, None] * pos[:, None, None, :]  # (B, Nh, 1, L)



# %%
# The book's bias for query ``l`` and key ``m`` is ``-m_h (p_l - p_m)``, with positions
# among the real tokens, plus a mask of ``-inf`` on keys after the query and on pads.


def allowed(mask):
    """Key m visible to query l: m <= l and m is a token: (B, L, L)."""
    _, Lm = mask.shape
    causal = torch.ones(Lm, Lm, dtype=torch.bool, device=mask.device).tril()  # (L, L)
    return causal[None] & mask.bool()[:, None, :]  # (B, L, L)


def relative_bias(mask, slopes):
    """Book's ALiBi at real positions, -inf on future keys and pads: (B, Nh, L, L)."""
    p = real_positions(mask).to(slopes.dtype)  # (B, L)
    rel = p[:, :, None] - p[:, None, :]  # (B, L, L), p_l - p_m
    bias = -slopes[None, :, None, None] * rel[:, None]  # (B, Nh, L, L)
    return bias.masked_fill(~allowed(mask)[:, None], float("-inf"))



# %%
# BLOOM's bias: one row per sequence
# ----------------------------------
# The batch has left padding (the usual padding for generation), right padding, no
# padding, and a hole in the middle.
B, L, Nh = 4, 10, 6
mask = torch.ones(B, L, dtype=torch.long, device=device)  # (B, L)
mask[0, :3] = 0  # left padding: 3 pads, 7 tokens
mask[1, 6:] = 0  # right padding: 6 tokens, 4 pads
mask[3, 3:5] = 0  # a hole at positions 3 and 4
slopes = alibi_slopes(Nh, device)  # (Nh,)
ours = bloom_bias(mask, slopes)  # (B, Nh, 1, L)
theirs = build_alibi_tensor(mask, Nh, torch.float32).view(B, Nh, 1, L)
for name, b in (("left pad", 0), ("hole", 3)):
    print(f"{name:8s}: mask {mask[b].tolist()}, p_m {real_positions(mask)[b].tolist()}")
print(f"max|ours - build_alibi_tensor| = {(ours - theirs).abs().max().item():.2e}")
torch.testing.assert_close(ours, theirs)

# %%
# The same weights as the relative bias
# -------------------------------------
# BLOOM's row ``m_h * p_m`` differs from it by ``m_h * p_l``: a constant along each
# query's row, which softmax ignores (``softmax(x + c) = softmax(x)``). Both get the
# same random logits (standing for ``q . k / sqrt(Dh)``: the claim holds for any) and
# the same causal-and-padding mask, written for BLOOM as its eager path writes it, 0 or
# the float32 minimum, added. The weights are compared on the real queries (a padded
# query has no real key before it under left padding; its output is never used).
scores = torch.randn(B, Nh, L, L, device=device)  # (B, Nh, L, L), any logits
keep = allowed(mask)[:, None]  # (B, 1, L, L)
hf_mask = torch.zeros(keep.shape, device=device).masked_fill(
    ~keep, torch.finfo(torch.float32).min)  # (B, 1, L, L), BLOOM's additive mask
w_rel = (scores + relative_bias(mask, slopes)).softmax(dim=-1)  # (B, Nh, L, L)
w_bloom = (scores + theirs + hf_mask).softmax(dim=-1)  # (B, Nh, L, L)
real_q = mask.bool()  # (B, L), queries that are tokens
gap = (theirs - relative_bias(mask, slopes)).masked_fill(~keep, 0)  # (B, Nh, L, L)
bias_gap_max = gap.max().item()  # the gap is m_h p_l >= 0, asserted exactly below
print(f"biases differ by up to {bias_gap_max:.2f}; max|weights "
      f"BLOOM - relative| on real queries = "
      f"{(w_bloom - w_rel).abs()[real_q[:, None].expand(B, Nh, L)].max().item():.2e}")
assert bias_gap_max > 4.0  # m_h p_l at m = 1/2, p_l = 9 (the unpadded row)
for b in range(B):
    torch.testing.assert_close(w_bloom[b][:, real_q[b]], w_rel[b][:, real_q[b]])

# %%
# Proof: the book's slopes are BLOOM's, for 8, 12 and 6 heads
# -----------------------------------------------------------
# ``build_alibi_tensor`` with a mask of ones returns ``m_h * m`` for key ``m``: its
# entry at ``m = 1`` is the slope. Checked for 8 heads (a power of two), 12 and 6 (not:
# 6 takes the slopes of 4 heads, then 2 in between).
ones = torch.ones(1, 2, dtype=torch.long, device=device)  # (B = 1, L = 2), no padding
for n in (8, 12, 6):
    bloom_slopes = build_alibi_tensor(ones, n, torch.float32)[:, 0, 1]  # (Nh,)
    print(f"Nh = {n:2d}: BLOOM slopes 1/x, x =",
          " ".join(f"{1 / s:g}" for s in bloom_slopes.tolist()))
    torch.testing.assert_close(alibi_slopes(n, device), bloom_slopes)

# %%
# Proof: the last key's position, and the idea's figure, in this batch
# --------------------------------------------------------------------
# With left padding, the first real token is at index 3 but at position 0: its bias
# is 0, as it would be without padding. The last key's bias is ``m_h * 6`` for the
# left-padded row, ``m_h * 9`` for the unpadded one, and ``m_h * 7`` after the hole
# (index 9, but only 7 real tokens before it).
last = ours.squeeze(2)[:, 0, -1] / slopes[0]  # (B,), p of the last key
print("last key's p_m per row:", last.tolist())
assert last.tolist() == [6.0, 0.0, 9.0, 7.0]  # 0 for the padded key of row 1

# %%
# The idea's figure drew row 0 and head 4 of this batch: its positions and its slope.
assert slopes[4].item() == 0.5  # the steepest of the figure
assert real_positions(mask)[0].tolist() == p_m.tolist()  # the left-padded row

# %%
# Proof: BLOOM's bias minus the relative bias is exactly ``m_h * p_l``
# --------------------------------------------------------------------
# The difference is exactly ``m_h * p_l`` on every visible key: the per-query
# constant, not something that happens to cancel.
p = real_positions(mask).to(slopes.dtype)  # (B, L)
row_const = (slopes[None, :, None, None] * p[:, None, :, None]).expand(B, Nh, L, L)
torch.testing.assert_close(gap, row_const.masked_fill(~keep, 0))
print("BLOOM bias - relative bias == m_h * p_l on every visible (query, key) pair")

# %%
# Proof: a whole BLOOM's attention is the book's
# ----------------------------------------------
# A random two-layer ``BloomModel``: ``D = 48``, ``Nh = 6`` heads of ``Dh = 8``,
# eager attention. Every parameter is moved off its initialization. A hook records each
# layer's attention input (the normalized hidden states and the residual) and output;
# the attention is then recomputed from those inputs with the book's relative bias at
# real positions and the causal-and-padding mask, and compared on every real token of
# the padded batch above. Only the attention is written here: the embedding norm, the
# MLP and the final norm are BLOOM's, and the comparison starts from each layer's
# recorded input.
from transformers import BloomConfig, BloomModel

V, D = 100, 48
cfg = BloomConfig(vocab_size=V, hidden_size=D, n_layer=2, n_head=Nh, pad_token_id=3,
                  attn_implementation="eager")
model = BloomModel(cfg).to(device).eval()
assert model.config._attn_implementation == "eager"
with torch.no_grad():
    for prm in model.parameters():
        prm.add_(0.1 * torch.randn_like(prm))
print(f"BloomModel: D = {D}, Nh = {Nh}, Dh = {D // Nh}, layers = {cfg.n_layer}")

# %%
# A hook records each attention's input and output.


def recorder(records):
    """A forward hook that appends (x, residual, output) of an attention to records."""
    def record(module, args, kwargs, output):
        records.append((args[1], args[0], output[0]))  # BloomBlock passes x, residual
    return record


# %%
# Both layers recorded on the padded batch above (pads get BLOOM's pad token).
records = []
hooks = [blk.self_attention.register_forward_hook(recorder(records), with_kwargs=True)
         for blk in model.h]
ids = torch.randint(4, V, (B, L), device=device)  # (B, L), no special tokens
ids = ids.masked_fill(mask == 0, cfg.pad_token_id)
with torch.no_grad():
    model(input_ids=ids, attention_mask=mask)
for hk in hooks:
    hk.remove()


# %%
# The attention, written with the book's bias. BLOOM's fused ``query_key_value``
# projection interleaves per head: for head ``h`` its output rows are ``[q_h, k_h,
# v_h]``, each ``Dh`` wide.
def bloom_alibi_attention(x, residual, attn, mask, slopes):
    """Causal ALiBi attention at real positions: x, residual (B, L, D) -> (B, L, D);
    attn a BloomAttention (its weights), slopes (Nh,)."""
    Bx, Lx, Dx = x.shape
    Nh = slopes.numel()
    qkv = (x @ attn.query_key_value.weight.T + attn.query_key_value.bias)  # (B, L, 3D)
    qkv = qkv.view(Bx, Lx, Nh, 3, Dx // Nh)  # (B, L, Nh, 3, Dh)
    q, k, v = qkv.permute(3, 0, 2, 1, 4).unbind(0)  # each (B, Nh, L, Dh)
    logits = q @ k.mT / math.sqrt(Dx // Nh)  # (B, Nh, L, L)
    w = (logits + relative_bias(mask, slopes)).softmax(dim=-1)  # (B, Nh, L, L)
    ctx = (w @ v).transpose(1, 2).reshape(Bx, Lx, Dx)  # (B, L, D)
    return ctx @ attn.dense.weight.T + attn.dense.bias + residual


# %%
# Recomputed from each layer's recorded input, compared on the real tokens.
with torch.no_grad():
    for i, (residual, x, out) in enumerate(records):
        mine = bloom_alibi_attention(x, residual, model.h[i].self_attention, mask,
                                     slopes)  # (B, L, D)
        err = (mine - out)[mask.bool()].abs().max().item()
        print(f"layer {i}: max|book's ALiBi attention - BloomAttention| on real tokens"
              f" = {err:.2e}")
        torch.testing.assert_close(mine[mask.bool()], out[mask.bool()])

# %%
# Try it: build the bias from raw indices. Where does it break?
# -------------------------------------------------------------
# Use ``m_h * m``, the key's raw index, instead of its real position (what BLOOM does
# without an attention mask). Which rows of the batch get other weights?

# %%
# With left or right padding, the raw index differs from the real position by a
# constant per row, so a bias built from raw indices gives the same weights. A hole
# is different: row 3's tokens after the hole are two indices but zero real tokens
# away from the token before it. A bias ``m_h * m`` on raw indices (what BLOOM does
# without an attention mask) gives those rows other weights.
raw = slopes[:, None, None] * torch.arange(L, device=device)  # (Nh, 1, L), m_h * m
w_raw = (scores + raw + hf_mask).softmax(dim=-1)  # (B, Nh, L, L)
d_pad = (w_raw - w_bloom)[:3].abs()[real_q[:3, None].expand(3, Nh, L)].max().item()
d_hole = (w_raw - w_bloom)[3].abs()[:, real_q[3]].max().item()
print(f"raw index vs real position: max|weights difference| padded rows {d_pad:.2e},"
      f" hole {d_hole:.2f}")
for b in range(3):
    torch.testing.assert_close(w_raw[b][:, real_q[b]], w_bloom[b][:, real_q[b]])
assert d_hole > 0.1  # printed above


# %%
# References
# ----------
# ``transformers.models.bloom.modeling_bloom.build_alibi_tensor``, ``BloomModel``,
# ``BloomConfig`` (transformers 5.23.0); ``torch.Tensor.register_forward_hook``.
# :footcite:t:`Press2021`; BigScience (Le Scao et al.)
# :footcite:p:`Scao2022`.
#
# .. footbibliography::
