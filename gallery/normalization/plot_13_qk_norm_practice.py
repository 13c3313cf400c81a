"""
QK-norm in practice: per head or over the width
===============================================

Models since 2024 apply QK-norm (:doc:`plot_10_qk_norm`) in two ways, both with
RMSNorm and both before RoPE: Qwen3 and Gemma 3 normalize each head's query and key,
OLMo 2 the whole projection before it is split into heads. Per head, every head comes
out at RMS about 1; over the width, the heads keep their relative sizes.

**You will learn**

- the two QK-norms: rows of width ``Dh`` (Qwen3, Gemma 3) or ``Nh * Dh`` (OLMo 2)
- why they differ, and the one case where they agree (heads of equal RMS)
- how QK-norm meets RoPE: the rotation keeps the RMS, the weight does not commute
- how to write both from scratch, equal to ``Qwen3Attention``, ``Olmo2Attention`` and
  ``Gemma3Attention`` (with its ``1 + w`` weight and logit scale)

**Prerequisites:** :doc:`plot_10_qk_norm`,
:doc:`/generated/normalization/plot_05_groupnorm_rmsnorm`,
:doc:`/generated/positional/plot_04_rope`,
:doc:`/generated/transformer/plot_10_gqa_mqa`.
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
import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The blocks this page shares with others, copied verbatim: RMSNorm as a function
# (from :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm`), the rope family
# (from :doc:`/generated/positional/plot_04_rope`) and the causal mask (from
# :doc:`/generated/transformer/plot_04_causal_attention`).


# Copied from normalization/plot_05_groupnorm_rmsnorm.py: rms_norm
def rms_norm(x, weight, eps):
    """x / sqrt(mean(x**2) over the last dim + eps) * weight; x (..., D), weight (D,)"""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# Copied from positional/plot_04_rope.py: rope_cos_sin
def rope_cos_sin(pos, Dh, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dh), rotate-half layout, angles in `dtype`.

    Channel i and channel i + Dh/2 form pair i and share its angle pos * inv_freq[i]."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    angles = pos[..., None].to(dtype) * inv_freq  # (..., L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, Dh)
    return angles.cos(), angles.sin()


# Copied from positional/plot_04_rope.py: rotate_half
def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: x (..., Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat([-x2, x1], dim=-1)


# Copied from positional/plot_04_rope.py: rope
def rope(x, cos, sin):
    """Rotate-half RoPE: x (..., L, Dh); cos, sin broadcast to it, e.g. (L, Dh) or
    (B, 1, L, Dh) for x (B, Nh, L, Dh)."""
    return x * cos + rotate_half(x) * sin


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()

# %%
# The idea
# --------
# RMSNorm divides a row by its root mean square. For a query ``q`` of ``Nh`` heads of
# ``Dh`` each, the row is one head (per head) or all of them (over the width):
#
# .. math::
#
#    \text{per head: } q_h \leftarrow \frac{w \odot q_h}
#    {\sqrt{\tfrac{1}{D_h}\|q_h\|^2 + \epsilon}}, \qquad
#    \text{over the width: } q_h \leftarrow \frac{w_h \odot q_h}
#    {\sqrt{\tfrac{1}{N_h D_h}\sum_{h'}\|q_{h'}\|^2 + \epsilon}},
#
# and the same for ``k``. Per head, each head lands at RMS
# :math:`\sqrt{m_h / (m_h + \epsilon)}` for its own mean square :math:`m_h`; over the
# width, all heads share one divisor and keep their ratios. Here, on queries whose four
# heads have RMS in the ratio 1 : 2 : 4 : 8, the smallest below ``sqrt(eps)``:
Nh_demo, Dh_demo, eps_demo = 4, 16, 1e-3
scales = torch.tensor([1.0, 2, 4, 8])  # (Nh,)
q_demo = 0.02 * torch.randn(20, Nh_demo, Dh_demo) * scales[:, None]  # (tokens, Nh, Dh)
by_head = torch.nn.functional.rms_norm(q_demo, (Dh_demo,), eps=eps_demo)
by_width = torch.nn.functional.rms_norm(q_demo.flatten(1), (Nh_demo * Dh_demo,),
                                        eps=eps_demo).view_as(q_demo)
fig, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
for i, (label, t) in enumerate((("before the norm", q_demo), ("per head (Qwen3)",
                                by_head), ("over the width (OLMo 2)", by_width))):
    rms = t.pow(2).mean(-1).sqrt().mean(0)  # (Nh,): each head's RMS, mean over tokens
    ax.bar(torch.arange(Nh_demo) + (i - 1) * 0.27, rms, width=0.27, label=label)
ax.set(xticks=range(Nh_demo), xticklabels=[f"head {h}" for h in range(Nh_demo)],
       ylabel="RMS of q in the head", yscale="log",
       title="per head, every head moves to RMS 1 (eps holds back the smallest);\n"
             "over the width, the heads keep their ratios 1 : 2 : 4 : 8")
ax.legend(fontsize=8)
plt.show()

# %%
# Asserted, token by token: per head, :math:`m_h / (m_h + \epsilon)`; over the width,
# :math:`m_h / (\bar m + \epsilon)` with :math:`\bar m` the mean of the token's
# :math:`m_h`.
m_demo = q_demo.pow(2).mean(-1)  # (tokens, Nh): each head's mean square
mbar_demo = m_demo.mean(-1, keepdim=True)  # (tokens, 1)
torch.testing.assert_close(by_head.pow(2).mean(-1), m_demo / (m_demo + eps_demo))
torch.testing.assert_close(by_width.pow(2).mean(-1), m_demo / (mbar_demo + eps_demo))
head_rms = m_demo.sqrt().mean(0)  # (Nh,): the RMS of each head, as drawn
assert head_rms[0] < eps_demo**0.5 < head_rms[1]  # only the smallest below sqrt(eps)

# %%
# From scratch
# ------------
# RMSNorm, RoPE and the causal mask are copied in Setup. The parameters carry Hugging
# Face's names (``q_proj.weight``..., ``q_norm.weight``), so they load into its modules
# as they are. The norm's weight has ``Dh`` entries per head, or ``Nh * Dh`` over the
# width; RoPE in the rotate-half layout on the normalized ``q`` and ``k``, then causal
# grouped-query attention. (Gemma 3's ``1 + w`` and logit scale are options.)


def qk_norm_attention(x, P, cos, sin, Nh, Nkv, per_head, eps, one_plus=False,
                      scaling=None):
    """Causal GQA with QK-norm per head or over the width. x (B, L, D) -> (B, L, D);
    cos, sin (B, L, Dh). one_plus: the norms' weight is 1 + w (Gemma); scaling: the
    logits' factor (default Dh ** -0.5)."""
    B, L, _ = x.shape
    Dh = cos.shape[-1]
    q, k, v = (x @ P[f"{n}_proj.weight"].T for n in "qkv")  # (B, L, N*Dh) each
    w_q, w_k = P["q_norm.weight"], P["k_norm.weight"]
    if one_plus:  # Gemma stores w and multiplies by 1 + w
        w_q, w_k = 1 + w_q, 1 + w_k
    if per_head:  # Qwen3, Gemma 3: rows of width Dh
        q = rms_norm(q.view(B, L, Nh, Dh), w_q, eps)
        k = rms_norm(k.view(B, L, Nkv, Dh), w_k, eps)
    else:  # OLMo 2: rows of width Nh * Dh, split afterwards
        q, k = rms_norm(q, w_q, eps), rms_norm(k, w_k, eps)
    q = q.reshape(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
    k = k.reshape(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
    v = v.reshape(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
    cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, Dh)
    q, k = rope(q, cos, sin), rope(k, cos, sin)  # the norm came first
    k = k.repeat_interleave(Nh // Nkv, dim=1)  # (B, Nh, L, Dh): head h reads h // 2
    v = v.repeat_interleave(Nh // Nkv, dim=1)
    z = q @ k.transpose(-1, -2) * (Dh ** -0.5 if scaling is None else scaling)
    z = z.masked_fill(~causal_mask(L, x.device), float("-inf"))  # (B, Nh, L, L)
    out = (z.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, L, Nh * Dh)
    return out @ P["o_proj.weight"].T  # (B, L, D)


def random_params(D, Nh, Nkv, Dh, per_head, head_scale):
    """Random attention weights with Hugging Face's names; query head h scaled by
    head_scale[h]; norm weights 1 + 0.1 N(0, 1), so not uniform."""
    nq, nk = (Dh, Dh) if per_head else (Nh * Dh, Nkv * Dh)  # the norms' widths
    P = {"q_proj.weight": 0.1 * torch.randn(Nh * Dh, D)
         * head_scale.repeat_interleave(Dh)[:, None],
         "k_proj.weight": 0.1 * torch.randn(Nkv * Dh, D),
         "v_proj.weight": 0.1 * torch.randn(Nkv * Dh, D),
         "o_proj.weight": 0.1 * torch.randn(D, Nh * Dh)}
    P["q_norm.weight"] = 1 + 0.1 * torch.randn(nq)
    P["k_norm.weight"] = 1 + 0.1 * torch.randn(nk)
    return P


# %%
# Two norms, two answers
# ----------------------
# ``D = 64``, ``Nh = 4`` query heads of ``Dh = 16`` sharing ``Nkv = 2``, ``eps = 1e-3``
# at small inputs (mean square of ``q`` :measured:`q_mean_square:.1e`), query head
# ``h`` scaled by ``2**(h - 1)`` as heads of a trained model differ in size, uneven
# positions. Both variants get the same projections and the same norm weight (OLMo 2's
# width-``Nh * Dh`` weight is Qwen3's ``Dh`` weight repeated per head): only the row
# the RMS is taken over differs.
D, Nh, Nkv, Dh = 64, 4, 2, 16
BASE, EPS = 1000.0, 1e-3
head_scale = 2.0 ** (torch.arange(Nh) - 1)  # (Nh,): 0.5, 1, 2, 4
P_qwen = random_params(D, Nh, Nkv, Dh, True, head_scale)  # drawn on CPU
P_olmo = random_params(D, Nh, Nkv, Dh, False, head_scale)
P_qwen, P_olmo = ({k: v.to(device) for k, v in P.items()} for P in (P_qwen, P_olmo))
B, L = 2, 10
x = (0.05 * torch.randn(B, L, D)).to(device)  # (B, L, D), drawn on CPU
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
cos, sin = rope_cos_sin(pos, Dh, BASE)  # (B, L, Dh) each
gqa = dict(Nh=Nh, Nkv=Nkv, eps=EPS)

P_head = dict(P_qwen)
P_width = dict(P_head, **{"q_norm.weight": P_head["q_norm.weight"].repeat(Nh),
                          "k_norm.weight": P_head["k_norm.weight"].repeat(Nkv)})
with torch.no_grad():
    out_head = qk_norm_attention(x, P_head, cos, sin, per_head=True, **gqa)
    out_width = qk_norm_attention(x, P_width, cos, sin, per_head=False, **gqa)
rel = ((out_head - out_width).norm() / out_head.norm()).item()
print(f"same weights, per head vs over the width: relative gap {rel:.3f}")
assert rel > 0.1  # heads of RMS 1/2 .. 4 normalized differently

# %%
# Proof: heads of equal RMS make the two norms agree
# --------------------------------------------------
# The two disagree unless all heads of ``q`` (and of ``k``) have the same RMS in every
# token. Two cases where they do: one head (the same formula on the same row, proven
# below on Hugging Face's modules), and projections in which head ``h`` is an
# orthogonal rotation ``R_h`` of head 0, so :math:`\|q_h\| = \|R_h q_0\| = \|q_0\|`
# for every input.


def orthogonal_heads(w, n, Dh):
    """Projection (n*Dh, D) whose head h is a random rotation of head 0 of w."""
    rotations = [torch.eye(Dh)] + [torch.linalg.qr(torch.randn(Dh, Dh))[0]
                                   for _ in range(n - 1)]
    return torch.cat([R.to(w.device) @ w[:Dh] for R in rotations])  # (n*Dh, D)


# %%
# The rotated projections, in both variants:
rotated_q = orthogonal_heads(P_head["q_proj.weight"], Nh, Dh)
rotated_k = orthogonal_heads(P_head["k_proj.weight"], Nkv, Dh)
P_eq_head = dict(P_head, **{"q_proj.weight": rotated_q, "k_proj.weight": rotated_k})
P_eq_width = dict(P_width, **{"q_proj.weight": rotated_q, "k_proj.weight": rotated_k})
with torch.no_grad():
    q_eq = (x @ rotated_q.T).view(B, L, Nh, Dh)  # (B, L, Nh, Dh)
    head_ms = q_eq.pow(2).mean(dim=-1)  # (B, L, Nh)
    out_eq_head = qk_norm_attention(x, P_eq_head, cos, sin, per_head=True, **gqa)
    out_eq_width = qk_norm_attention(x, P_eq_width, cos, sin, per_head=False, **gqa)
print(f"rotated heads: per-head mean square of q spreads by "
      f"{(head_ms.amax(-1) - head_ms.amin(-1)).max().item():.1e}\n"
      f"               max|per head - over width| = "
      f"{(out_eq_head - out_eq_width).abs().max().item():.1e}")
torch.testing.assert_close(head_ms, head_ms[..., :1].expand_as(head_ms))
torch.testing.assert_close(out_eq_head, out_eq_width)

# %%
# Proof: RoPE keeps each head's RMS; the weight does not commute
# --------------------------------------------------------------
# Both models normalize and then rotate. RoPE turns each pair
# :math:`(q_i, q_{i + D_h/2})` by an angle, which keeps the pair's norm, so each head's
# RMS, and with it the norm's divisor, is the same before and after the rotation
# (asserted for both variants). But the outputs of norm-then-rotate and
# rotate-then-norm differ: the weight multiplies coordinate :math:`i` and the rotation
# then mixes :math:`i` with :math:`i + D_h/2`, so the two commute only if
# :math:`w_i = w_{i + D_h/2}`, a weight uniform within each rotation pair (asserted
# both ways).
with torch.no_grad():
    before = (x @ P_head["q_proj.weight"].T).view(B, L, Nh, Dh)  # unnormalized q
    q_heads = before.transpose(1, 2)  # (B, Nh, L, Dh)
    rotated = rope(q_heads, cos[:, None], sin[:, None])
    rms_q = q_heads.pow(2).mean(dim=-1).sqrt()  # (B, Nh, L)
    torch.testing.assert_close(rotated.pow(2).mean(dim=-1).sqrt(), rms_q)

    w = P_head["q_norm.weight"]  # (Dh,), 1 + noise: not uniform within pairs
    w_pairs = torch.cat([w[: Dh // 2], w[: Dh // 2]])  # (Dh,): w_i = w_{i + Dh/2}
    variants = {  # (B, Nh, L, Dh) -> (B, Nh, L, Dh); over the width via (B, L, Nh*Dh)
        "per head": lambda t, w: rms_norm(t, w, EPS),
        "over width": lambda t, w: rms_norm(t.transpose(1, 2).flatten(2),
                                            w.repeat(Nh), EPS)
        .unflatten(-1, (Nh, Dh)).transpose(1, 2)}
    m = q_heads.pow(2).mean(dim=-1)  # (B, Nh, L): each head's mean square
    # With weight 1, a head leaves the norm with mean square m / (m + eps) per head,
    # m / (mbar + eps) over the width, mbar the token's mean over its heads: whatever
    # the rotation, since it changes neither m nor mbar.
    expected = {"per head": m / (m + EPS),
                "over width": m / (m.mean(dim=1, keepdim=True) + EPS)}
    rope_gaps = []  # relative gap of the two orders, per variant
    for label, norm in variants.items():
        nr = rope(norm(q_heads, w), cos[:, None], sin[:, None])
        rn = norm(rotated, w)
        # the rotation keeps every row's mean square, the weight's included
        torch.testing.assert_close(nr.pow(2).mean(-1), norm(q_heads, w).pow(2).mean(-1))
        ones = torch.ones_like(w)  # the divisor alone, without the weight
        nr_1 = rope(norm(q_heads, ones), cos[:, None], sin[:, None])
        rn_1 = norm(rotated, ones)
        torch.testing.assert_close(nr_1.pow(2).mean(-1), expected[label])
        torch.testing.assert_close(rn_1.pow(2).mean(-1), expected[label])
        gap = ((nr - rn).norm() / nr.norm()).item()
        nr_p = rope(norm(q_heads, w_pairs), cos[:, None], sin[:, None])
        rn_p = norm(rotated, w_pairs)
        print(f"{label:10}: norm-then-rotate vs rotate-then-norm: relative gap "
              f"{gap:.3f};\n            with w uniform within pairs, max gap "
              f"{(nr_p - rn_p).abs().max().item():.1e}")
        assert gap > 0.03  # w is about 10 % off uniform
        torch.testing.assert_close(nr_p, rn_p)
        rope_gaps.append(gap)
rope_gap_lo, rope_gap_hi = min(rope_gaps), max(rope_gaps)
assert all(rope_gap_lo <= g <= rope_gap_hi for g in rope_gaps)  # the range quoted

# %%
# Proof: each equal to its Hugging Face module
# --------------------------------------------
# ``Qwen3Attention`` and ``Olmo2Attention`` from random configs with the shapes above,
# eager attention (the reference path). Our parameters load into each with
# ``strict=True`` as they are (a name or a shape missing on either side fails). The
# module receives our ``cos, sin``, checked first against each model's rotary
# embedding, and an additive causal mask.
import transformers
from transformers import Olmo2Config, Qwen3Config
from transformers.models.olmo2.modeling_olmo2 import (
    Olmo2Attention,
    Olmo2RotaryEmbedding,
)
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3Attention,
    Qwen3RotaryEmbedding,
)

print(f"transformers {transformers.__version__}")
common = dict(
    hidden_size=D, num_attention_heads=Nh, num_key_value_heads=Nkv, head_dim=Dh,
    intermediate_size=128, num_hidden_layers=1, vocab_size=100, rms_norm_eps=1e-3,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},  # BASE, EPS
    attn_implementation="eager", pad_token_id=0, bos_token_id=1, eos_token_id=2,
)
qwen_cfg = Qwen3Config(**common)
olmo_cfg = Olmo2Config(**common)
for rotary, cfg in ((Qwen3RotaryEmbedding, qwen_cfg), (Olmo2RotaryEmbedding, olmo_cfg)):
    cos_hf, sin_hf = rotary(cfg).to(device)(x, pos)
    torch.testing.assert_close((cos, sin), (cos_hf, sin_hf))
mask = torch.full((L, L), torch.finfo(torch.float32).min, device=device).triu(1)
mask = mask.expand(B, 1, L, L)  # (B, 1, L, L) additive causal mask for eager

params, outs = {"qwen3": P_qwen, "olmo2": P_olmo}, {}
for name, cls, cfg, per_head in (("qwen3", Qwen3Attention, qwen_cfg, True),
                                 ("olmo2", Olmo2Attention, olmo_cfg, False)):
    m = cls(cfg, layer_idx=0).to(device).eval()
    m.load_state_dict(params[name], strict=True)
    assert m.config._attn_implementation == "eager"
    with torch.no_grad():
        ref, _ = m(x, position_embeddings=(cos_hf, sin_hf), attention_mask=mask)
        outs[name] = qk_norm_attention(x, params[name], cos, sin, per_head=per_head,
                                       **gqa)
    print(f"{cls.__name__}: q_norm {tuple(params[name]['q_norm.weight'].shape)}, "
          f"max|ours - HF| = {(outs[name] - ref).abs().max().item():.1e}")
    torch.testing.assert_close(outs[name], ref)
assert params["qwen3"]["q_norm.weight"].shape == (Dh,)
assert params["olmo2"]["q_norm.weight"].shape == (Nh * Dh,)

# %%
# One head: with ``Nh = Nkv = 1`` the two Hugging Face modules themselves agree, given
# the same parameters (then their names and shapes coincide).
one = dict(common, num_attention_heads=1, num_key_value_heads=1)
qwen_1 = Qwen3Attention(Qwen3Config(**one), layer_idx=0).eval()
olmo_1 = Olmo2Attention(Olmo2Config(**one), layer_idx=0).eval()
with torch.no_grad():
    for p in qwen_1.parameters():
        p.add_(0.1 * torch.randn_like(p))
    olmo_1.load_state_dict(qwen_1.state_dict(), strict=True)
    qwen_1, olmo_1 = qwen_1.to(device), olmo_1.to(device)
    y_qwen = qwen_1(x, position_embeddings=(cos_hf, sin_hf), attention_mask=mask)[0]
    y_olmo = olmo_1(x, position_embeddings=(cos_hf, sin_hf), attention_mask=mask)[0]
print(f"one head: max|Qwen3Attention - Olmo2Attention| = "
      f"{(y_qwen - y_olmo).abs().max().item():.1e}")
torch.testing.assert_close(y_qwen, y_olmo)

# %%
# Proof: each head's RMS after each norm, exactly
# -----------------------------------------------
# The figure's finding on this page's queries. Per head, each head of each token lands
# at :math:`\sqrt{m / (m + \epsilon)}` for its own mean square :math:`m` (1 up to
# ``eps``, which pulls the smallest head, ``m`` below ``eps``, down to
# :measured:`smallest_head_rms:.2f` on average); over the width, each token's heads
# keep their ratios (about 1 : 2 : 4 : 8, the head scales).
ones_h, ones_w = torch.ones(Dh, device=device), torch.ones(Nh * Dh, device=device)
with torch.no_grad():
    after_head = rms_norm(before, ones_h, EPS)  # (B, L, Nh, Dh)
    after_width = rms_norm(before.flatten(2), ones_w, EPS).view(B, L, Nh, Dh)
ms = before.pow(2).mean(dim=-1)  # (B, L, Nh): each head's mean square, per token
q_mean_square = ms.mean().item()
rms_tok_head = after_head.pow(2).mean(dim=-1).sqrt()  # (B, L, Nh)
rms_tok_width = after_width.pow(2).mean(dim=-1).sqrt()  # (B, L, Nh)
torch.testing.assert_close(rms_tok_head, (ms / (ms + EPS)).sqrt())
torch.testing.assert_close(rms_tok_width / rms_tok_width[..., :1],
                           (ms / ms[..., :1]).sqrt())
joint = ms.mean(dim=-1)  # (B, L): mean square of q over the whole width
torch.testing.assert_close(rms_tok_width.pow(2).mean(dim=-1), joint / (joint + EPS))

# %%
# The figure's bars, on these queries: each head's RMS, averaged over the tokens.


def head_rms(t):
    """Mean over tokens of each head's RMS: (B, L, Nh, Dh) -> (Nh,)."""
    return t.pow(2).mean(dim=-1).sqrt().mean(dim=(0, 1))


# %%
# Averaged over the tokens, head by head:
rms_before, rms_head, rms_width = map(head_rms, (before, after_head, after_width))
for label, r in (("before", rms_before), ("per head", rms_head),
                 ("over width", rms_width)):
    print(f"per-head RMS of q, {label:10}: " + "  ".join(f"{v:.3f}" for v in r))
# The heads' sizes follow the scales of the setup, up to the random heads' own
# spread (printed); the smallest head's RMS after the per-head norm is eps's doing.
scales_1248 = torch.tensor([1.0, 2, 4, 8], device=device)
head_spread_pct = 100 * ((rms_before / rms_before[0]) / scales_1248 - 1).abs().max()
smallest_head_rms = rms_head.min().item()
print(f"head RMS ratios off 1 : 2 : 4 : 8 by at most {head_spread_pct:.0f} %;\n"
      f"smallest head after the per-head norm {smallest_head_rms:.2f}")
torch.testing.assert_close(rms_before / rms_before[0], scales_1248, rtol=0.2, atol=0.0)
assert smallest_head_rms < 0.9  # eps pulls the head with m below eps down

# %%
# Proof: Gemma 3's per-head norm equals ``Gemma3Attention``
# ---------------------------------------------------------
# Gemma 3, which replaced Gemma 2's attention-logit soft-cap with QK-norm, normalizes
# each head of ``q`` and ``k`` like Qwen3, before RoPE, with Gemma's RMSNorm: it stores
# ``w`` (initialized at 0) and multiplies by ``1 + w`` in float32. That is the page's
# dtype, so the cast changes nothing here (in 16 bits the order of cast and weight
# matters: :doc:`/generated/normalization/plot_16_norms_16bit`). Its logits are scaled
# by ``query_pre_attn_scalar ** -0.5``, not ``1/sqrt(Dh)``; the scalar is 8 here, not
# ``Dh = 16``, so that the scale shows. The layer is a ``"full_attention"`` one (Gemma 3
# interleaves them with
# :doc:`sliding-window </generated/transformer/plot_12_sliding_window_sinks>` layers,
# which get a banded mask; not run here). Shapes, ``rope_theta`` and ``eps`` as above
# (no head scales): every parameter, ``q_norm`` and ``k_norm`` included, is moved off
# its init, so ``1 + w`` is near 1 and ``w`` near 0. Its parameters have the names of
# ours.
from transformers import Gemma3TextConfig
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3RotaryEmbedding,
)

SCALAR = 8  # query_pre_attn_scalar
rope_1000 = {"rope_type": "default", "rope_theta": 1000.0}  # BASE
gemma_common = dict(common, layer_types=["full_attention"],
                    rope_parameters={"full_attention": rope_1000,
                                     "sliding_attention": rope_1000})
gemma_cfg = Gemma3TextConfig(**gemma_common, query_pre_attn_scalar=SCALAR)
gemma = Gemma3Attention(gemma_cfg, layer_idx=0).eval()
with torch.no_grad():
    for p in gemma.parameters():
        p.add_(0.1 * torch.randn_like(p))
gemma = gemma.to(device)
assert gemma.config._attn_implementation == "eager"
assert gemma.sliding_window is None  # a full-attention layer
assert gemma.attn_logit_softcapping is None  # QK-norm, no soft-cap (its default)
print(f"Gemma3Attention: scaling {gemma.scaling:.4f} = {SCALAR} ** -0.5, "
      f"1/sqrt(Dh) = {Dh ** -0.5:.4f}")
cos_g, sin_g = Gemma3RotaryEmbedding(gemma_cfg).to(device)(x, pos, "full_attention")
torch.testing.assert_close((cos, sin), (cos_g, sin_g))

P_gemma = {k: v.clone() for k, v in gemma.state_dict().items()}
assert sorted(P_gemma) == sorted(P_qwen)  # the same six names as ours, nothing else
with torch.no_grad():
    ref_g, _ = gemma(x, position_embeddings=(cos_g, sin_g), attention_mask=mask)
    out_g = qk_norm_attention(x, P_gemma, cos, sin, per_head=True, one_plus=True,
                              scaling=SCALAR ** -0.5, **gqa)
print(f"Gemma3Attention: q_norm {tuple(P_gemma['q_norm.weight'].shape)}, "
      f"max|ours - HF| = {(out_g - ref_g).abs().max().item():.1e}")
torch.testing.assert_close(out_g, ref_g)

# %%
# Try it: read Gemma 3's weights with Qwen3's code. How far off?
# --------------------------------------------------------------
# Gemma's weights load into ``Qwen3Attention`` with ``strict=True`` (same names, same
# shapes), and nothing in the names warns that Gemma's norm multiplies by ``1 + w``.
# How far is that from the real module, and how far is Gemma with the ``1/sqrt(Dh)``
# logit scale?

# %%
# Given Gemma's logit scale, ``Qwen3Attention`` is our code with ``w`` for ``1 + w``;
# ``Gemma3Attention`` built with ``query_pre_attn_scalar = Dh`` is our code with the
# ``1/sqrt(Dh)`` scale. Each equals its from-scratch variant and misses the real module
# by far more than the tolerance. Storing ``w`` and multiplying by ``1 + w`` only
# reparametrizes the norm: a Gemma weight ``w`` stands for ``1 + w`` in Qwen3's RMSNorm
# (:doc:`Llama's </generated/transformer/plot_11_llama_decoder_layer>`), and then the
# two agree bit for bit in float32
# (:doc:`/generated/normalization/plot_16_norms_16bit`). What goes wrong is reading one
# convention's weights with the other's code.
qwen_w = Qwen3Attention(qwen_cfg, layer_idx=0).to(device).eval()
qwen_w.load_state_dict(gemma.state_dict(), strict=True)
qwen_w.scaling = SCALAR ** -0.5  # Gemma's scale; Qwen3's is Dh ** -0.5
gemma_dh = Gemma3Attention(Gemma3TextConfig(**gemma_common, query_pre_attn_scalar=Dh),
                           layer_idx=0).to(device).eval()
gemma_dh.load_state_dict(gemma.state_dict(), strict=True)
with torch.no_grad():
    wrong = {  # label: (ours, Hugging Face's)
        "w, not 1 + w": (qk_norm_attention(x, P_gemma, cos, sin, per_head=True,
                                           scaling=SCALAR ** -0.5, **gqa), qwen_w),
        "1/sqrt(Dh) scale": (qk_norm_attention(x, P_gemma, cos, sin, per_head=True,
                                               one_plus=True, **gqa), gemma_dh)}
    gemma_gaps = {}
    for label, (ours, module) in wrong.items():
        theirs = module(x, position_embeddings=(cos_g, sin_g), attention_mask=mask)[0]
        gap = ((ours - ref_g).norm() / ref_g.norm()).item()
        print(f"Gemma 3 with {label:16}: {type(module).__name__} equal to ours "
              f"(max {(ours - theirs).abs().max().item():.0e}),\n"
              f"{'':14}relative gap to the real Gemma3Attention {gap:.3f}")
        torch.testing.assert_close(ours, theirs)
        assert gap > 0.1  # far beyond the tolerance
        gemma_gaps[label] = gap
gemma_gap_w = gemma_gaps["w, not 1 + w"]
gemma_gap_scale = gemma_gaps["1/sqrt(Dh) scale"]
