"""
QK-norm in practice: per head or over the width
===============================================

:doc:`/generated/normalization/plot_07_qk_norm` proves what QK-norm bounds. Models since
2024 apply it in two ways, both with RMSNorm and both before RoPE: Qwen3 and Gemma 3
normalize each head's query and key, a row of width ``Dh``; OLMo 2 normalizes the whole
projection, a row of width ``Nh * Dh``, before it is split into heads. This page writes
both from scratch and proves each equal to its Hugging Face attention module
(``Qwen3Attention``, ``Olmo2Attention``) with grouped-query attention; proves the two
different on generic inputs and equal where every head has the same RMS; and shows how
either meets RoPE: the rotation keeps each head's RMS, but RMSNorm's weight does not
commute with it. Last, Gemma 3's per-head norm with its ``1 + w`` weight and its logit
scale ``query_pre_attn_scalar ** -0.5``, equal to ``Gemma3Attention``, and each of the
two details shown to matter.
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
import torch
import transformers
from transformers import Olmo2Config, Qwen3Config
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The references: two attention modules from random configs
# ---------------------------------------------------------
# ``D = 64``, ``Nh = 4`` query heads of ``Dh = 16`` sharing ``Nkv = 2`` key/value heads
# (grouped-query attention), ``rope_theta = 1000`` and ``rms_norm_eps = 1e-3``: the
# inputs are small (mean square of ``q`` :measured:`q_mean_square:.1e`), so a norm
# without ``eps``
# fails. Eager attention is the reference path. Every parameter is moved off its
# initialization (fresh RMSNorm weights are ones), and then query head ``h`` is scaled
# by ``2**(h - 1)``: heads of a trained model differ in size, and this is where the two
# QK-norms part.
D, Nh, Nkv, Dh = 64, 4, 2, 16
THETA, EPS = 1000.0, 1e-3
common = dict(
    hidden_size=D, num_attention_heads=Nh, num_key_value_heads=Nkv, head_dim=Dh,
    intermediate_size=128, num_hidden_layers=1, vocab_size=100, rms_norm_eps=1e-3,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},  # THETA, EPS
    attn_implementation="eager", pad_token_id=0, bos_token_id=1, eos_token_id=2,
)
qwen_cfg = Qwen3Config(**common)
olmo_cfg = Olmo2Config(**common)
head_scale = 2.0 ** (torch.arange(Nh) - 1)  # (Nh,): 0.5, 1, 2, 4
modules = {}
for name, cls, cfg in (("qwen3", Qwen3Attention, qwen_cfg),
                       ("olmo2", Olmo2Attention, olmo_cfg)):
    m = cls(cfg, layer_idx=0).eval()  # perturbed on CPU: the same numbers on any device
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
        m.q_proj.weight.mul_(head_scale.repeat_interleave(Dh)[:, None])
    m = m.to(device)
    assert m.config._attn_implementation == "eager"
    modules[name] = m
    shapes = [f"{n} {tuple(p.shape)}" for n, p in m.named_parameters()]
    print(f"{cls.__name__}:\n  " + ", ".join(shapes[:3]) + "\n  "
          + ", ".join(shapes[3:]))

# %%
# The two QK-norms from scratch
# -----------------------------
# RMSNorm over the last dimension, :math:`w \odot x / \sqrt{\mathrm{mean}(x^2) +
# \epsilon}`. Per head it runs on ``(B, L, Nh, Dh)`` with a weight of ``Dh``; over the
# width it runs on ``(B, L, Nh * Dh)`` with a weight of ``Nh * Dh``, and the heads are
# split afterwards. Everything else is the same attention: RoPE in the rotate-half
# layout on the normalized ``q`` and ``k``, then causal grouped-query attention. (Gemma
# 3's two changes, ``1 + w`` and its logit scale, are options used at the end.)


def rms_norm(x, weight, eps=EPS):
    """RMSNorm over the last dimension of x, with weight of that width."""
    return weight * x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def rope_cos_sin(pos, dim=Dh, theta=THETA):
    """cos, sin (B, L, dim) for positions pos (B, L), rotate-half layout."""
    inv_freq = theta ** -(torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = pos[..., None].float() * inv_freq.to(pos.device)  # (B, L, dim / 2)
    angles = torch.cat([angles, angles], dim=-1)  # (B, L, dim)
    return angles.cos(), angles.sin()


def rope(t, cos, sin):
    """Rotate t (B, heads, L, Dh): pair i with i + Dh/2, by the angles in cos, sin."""
    t1, t2 = t[..., : Dh // 2], t[..., Dh // 2 :]
    rotated = torch.cat([-t2, t1], dim=-1)
    return t * cos[:, None] + rotated * sin[:, None]


def attention(x, P, pos, per_head, one_plus=False, scaling=Dh ** -0.5):
    """Causal GQA with QK-norm per head or over the width. x (B, L, D) -> (B, L, D).

    one_plus: the norms' weight is 1 + w (Gemma); scaling: the logits' factor."""
    B, L, _ = x.shape
    q, k, v = x @ P["wq"].T, x @ P["wk"].T, x @ P["wv"].T  # (B, L, Nh*Dh), ..
    w_q, w_k = P["q_norm"], P["k_norm"]
    if one_plus:  # Gemma stores w and multiplies by 1 + w
        w_q, w_k = 1 + w_q, 1 + w_k
    if per_head:  # Qwen3, Gemma 3: rows of width Dh
        q = rms_norm(q.view(B, L, Nh, Dh), w_q)
        k = rms_norm(k.view(B, L, Nkv, Dh), w_k)
    else:  # OLMo 2: rows of width Nh * Dh, split afterwards
        q, k = rms_norm(q, w_q), rms_norm(k, w_k)
    q = q.reshape(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
    k = k.reshape(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
    v = v.reshape(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
    cos, sin = rope_cos_sin(pos)
    q, k = rope(q, cos, sin), rope(k, cos, sin)  # the norm came first
    k = k.repeat_interleave(Nh // Nkv, dim=1)  # (B, Nh, L, Dh): head h reads h // 2
    v = v.repeat_interleave(Nh // Nkv, dim=1)
    z = q @ k.transpose(-1, -2) * scaling  # (B, Nh, L, L)
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    z = z.masked_fill(~causal, float("-inf"))
    out = (z.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, L, Nh * Dh)
    return out @ P["wo"].T  # (B, L, D)


# %%
# Each equal to its Hugging Face module
# -------------------------------------
# Our names map to Hugging Face's one to one (printed), loaded with ``strict=True``.
# The positions are uneven (row 1 steps by 3 from 2), the mask is causal, and the
# module receives our ``cos, sin``, checked first against each model's rotary embedding.
from transformers.models.olmo2.modeling_olmo2 import Olmo2RotaryEmbedding
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

NAMES = {"wq": "q_proj.weight", "wk": "k_proj.weight", "wv": "v_proj.weight",
         "wo": "o_proj.weight", "q_norm": "q_norm.weight", "k_norm": "k_norm.weight"}
print("ours -> theirs:")
for ours, hf in NAMES.items():
    print(f"  {ours:6} -> {hf}")
B, L = 2, 10
x = (0.05 * torch.randn(B, L, D)).to(device)  # (B, L, D), drawn on CPU
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
cos, sin = rope_cos_sin(pos)  # (B, L, Dh) each
for rotary, cfg in ((Qwen3RotaryEmbedding, qwen_cfg), (Olmo2RotaryEmbedding, olmo_cfg)):
    cos_hf, sin_hf = rotary(cfg).to(device)(x, pos)
    torch.testing.assert_close((cos, sin), (cos_hf, sin_hf))
mask = torch.full((L, L), torch.finfo(torch.float32).min, device=device).triu(1)
mask = mask.expand(B, 1, L, L)  # (B, 1, L, L) additive causal mask for eager

params, outs = {}, {}
for name, per_head in (("qwen3", True), ("olmo2", False)):
    m = modules[name]
    theirs = m.state_dict()
    P = {ours: theirs[hf].clone() for ours, hf in NAMES.items()}
    check = type(m)(m.config, layer_idx=0).to(device)
    check.load_state_dict({NAMES[k]: v for k, v in P.items()}, strict=True)
    with torch.no_grad():
        ref, _ = m(x, position_embeddings=(cos_hf, sin_hf), attention_mask=mask)
        outs[name] = attention(x, P, pos, per_head)
    params[name] = P
    print(f"{type(m).__name__}: q_norm {tuple(P['q_norm'].shape)}, max|ours - HF| = "
          f"{(outs[name] - ref).abs().max().item():.1e}")
    torch.testing.assert_close(outs[name], ref)
assert params["qwen3"]["q_norm"].shape == (Dh,)
assert params["olmo2"]["q_norm"].shape == (Nh * Dh,)

# %%
# Different from each other, except where every head has the same RMS
# ---------------------------------------------------------------------
# Give both variants the same projections and the same norm weight (OLMo 2's
# width-``Nh * Dh`` weight is Qwen3's ``Dh`` weight repeated per head), so that only
# the row the RMS is taken over differs. Per head, every head of ``q`` leaves the norm
# with RMS about 1 (times the weight); over the width, the heads keep their relative
# sizes and only their joint RMS is 1. So the two disagree unless all heads of ``q``
# (and of ``k``) have the same RMS in every token. Two cases where they do: one head
# (the same formula on the same row), and projections in which head
# ``h`` is an orthogonal rotation ``R_h`` of head 0, so
# :math:`\|q_h\| = \|R_h q_0\| = \|q_0\|` for every input.
P_head = dict(params["qwen3"])
P_width = dict(P_head, q_norm=P_head["q_norm"].repeat(Nh),
               k_norm=P_head["k_norm"].repeat(Nkv))
with torch.no_grad():
    out_head = attention(x, P_head, pos, per_head=True)
    out_width = attention(x, P_width, pos, per_head=False)
rel = ((out_head - out_width).norm() / out_head.norm()).item()
print(f"same weights, per head vs over the width: relative gap {rel:.3f}")
assert rel > 0.1  # heads of RMS 1/2 .. 4 normalized differently


def orthogonal_heads(w, n):
    """Projection (n*Dh, D) whose head h is a random rotation of head 0 of w."""
    rotations = [torch.eye(Dh, device=device)] + [
        torch.linalg.qr(torch.randn(Dh, Dh).to(device))[0] for _ in range(n - 1)]
    return torch.cat([R @ w[:Dh] for R in rotations])  # (n*Dh, D)


P_eq_head = dict(P_head, wq=orthogonal_heads(P_head["wq"], Nh),
                 wk=orthogonal_heads(P_head["wk"], Nkv))
P_eq_width = dict(P_width, wq=P_eq_head["wq"], wk=P_eq_head["wk"])
with torch.no_grad():
    q_eq = (x @ P_eq_head["wq"].T).view(B, L, Nh, Dh)  # (B, L, Nh, Dh)
    head_ms = q_eq.pow(2).mean(dim=-1)  # (B, L, Nh)
    out_eq_head = attention(x, P_eq_head, pos, per_head=True)
    out_eq_width = attention(x, P_eq_width, pos, per_head=False)
print(f"rotated heads: per-head mean square of q spreads by "
      f"{(head_ms.amax(-1) - head_ms.amin(-1)).max().item():.1e}\n"
      f"               max|per head - over width| = "
      f"{(out_eq_head - out_eq_width).abs().max().item():.1e}")
torch.testing.assert_close(head_ms, head_ms[..., :1].expand_as(head_ms))
torch.testing.assert_close(out_eq_head, out_eq_width)

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
# Per-head RMS of ``q``, before and after each norm (the figure). Per head, each head
# of each token lands at :math:`\sqrt{m / (m + \epsilon)}` for its own mean square
# :math:`m` (1 up to ``eps``, which pulls the smallest head, ``m`` below ``eps``, down
# to :measured:`smallest_head_rms:.2f` on average); over the width, each token's heads
# keep their ratios (about 1 : 2 : 4 : 8, the head scales).
import matplotlib.pyplot as plt

ones_h, ones_w = torch.ones(Dh, device=device), torch.ones(Nh * Dh, device=device)
with torch.no_grad():
    q_raw = x @ P_head["wq"].T  # (B, L, Nh*Dh)
    before = q_raw.view(B, L, Nh, Dh)
    after_head = rms_norm(before, ones_h)  # (B, L, Nh, Dh)
    after_width = rms_norm(q_raw, ones_w).view(B, L, Nh, Dh)
ms = before.pow(2).mean(dim=-1)  # (B, L, Nh): each head's mean square, per token
q_mean_square = ms.mean().item()
rms_tok_head = after_head.pow(2).mean(dim=-1).sqrt()  # (B, L, Nh)
rms_tok_width = after_width.pow(2).mean(dim=-1).sqrt()  # (B, L, Nh)
torch.testing.assert_close(rms_tok_head, (ms / (ms + EPS)).sqrt())
torch.testing.assert_close(rms_tok_width / rms_tok_width[..., :1],
                           (ms / ms[..., :1]).sqrt())
joint = ms.mean(dim=-1)  # (B, L): mean square of q over the whole width
torch.testing.assert_close(rms_tok_width.pow(2).mean(dim=-1), joint / (joint + EPS))


def head_rms(t):
    """Mean over tokens of each head's RMS: (B, L, Nh, Dh) -> (Nh,)."""
    return t.pow(2).mean(dim=-1).sqrt().mean(dim=(0, 1))


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

fig, ax = plt.subplots(figsize=(6.4, 3.6))
idx = torch.arange(Nh)
for i, (label, r) in enumerate((("before the norm", rms_before),
                                ("per head (Qwen3)", rms_head),
                                ("over the width (OLMo 2)", rms_width))):
    ax.bar(idx + (i - 1) * 0.27, r.cpu(), width=0.27, label=label)
ax.set_xticks(idx, [f"head {h}" for h in range(Nh)])
ax.set_ylabel("RMS of q in the head")
ax.set_yscale("log")
ax.set_title("Per head, every head moves toward RMS 1 (eps holds back the smallest);\n"
             "over the width, the heads keep their ratios 1 : 2 : 4 : 8")
ax.legend(fontsize=8)
plt.show()

# %%
# How QK-norm meets RoPE
# ----------------------
# Both models normalize and then rotate. RoPE turns each pair
# :math:`(q_i, q_{i + D_h/2})` by an angle, which keeps the pair's norm, so each head's
# RMS, and with it the norm's divisor, is the same before and after the rotation
# (asserted for both variants). But the outputs of norm-then-rotate and
# rotate-then-norm differ: the weight multiplies coordinate :math:`i` and the rotation
# then mixes :math:`i` with :math:`i + D_h/2`, so the two commute only if
# :math:`w_i = w_{i + D_h/2}`, a weight uniform within each rotation pair (asserted
# both ways).
with torch.no_grad():
    q_heads = before.transpose(1, 2)  # (B, Nh, L, Dh), unnormalized
    rotated = rope(q_heads, cos, sin)
    rms_q = q_heads.pow(2).mean(dim=-1).sqrt()  # (B, Nh, L)
    torch.testing.assert_close(rotated.pow(2).mean(dim=-1).sqrt(), rms_q)

    def flat(t):  # (B, Nh, L, Dh) -> (B, L, Nh*Dh)
        return t.transpose(1, 2).reshape(B, L, Nh * Dh)

    def unflat(t):  # (B, L, Nh*Dh) -> (B, Nh, L, Dh)
        return t.view(B, L, Nh, Dh).transpose(1, 2)

    w = P_head["q_norm"]  # (Dh,), moved off its init: not uniform within pairs
    w_pairs = torch.cat([w[: Dh // 2], w[: Dh // 2]])  # (Dh,): w_i = w_{i + Dh/2}
    variants = {"per head": lambda t, w: rms_norm(t, w),
                "over width": lambda t, w: unflat(rms_norm(flat(t), w.repeat(Nh)))}
    m = q_heads.pow(2).mean(dim=-1)  # (B, Nh, L): each head's mean square
    # With weight 1, a head leaves the norm with mean square m / (m + eps) per head,
    # m / (M + eps) over the width, M the token's mean over its heads: whatever the
    # rotation, since it changes neither m nor M.
    expected = {"per head": m / (m + EPS),
                "over width": m / (m.mean(dim=1, keepdim=True) + EPS)}
    rope_gaps = []  # relative gap of the two orders, per variant
    for label, norm in variants.items():
        nr, rn = rope(norm(q_heads, w), cos, sin), norm(rotated, w)
        ones = torch.ones_like(w)  # the divisor alone, without the weight
        nr_1, rn_1 = rope(norm(q_heads, ones), cos, sin), norm(rotated, ones)
        torch.testing.assert_close(nr_1.pow(2).mean(-1), expected[label])
        torch.testing.assert_close(rn_1.pow(2).mean(-1), expected[label])
        gap = ((nr - rn).norm() / nr.norm()).item()
        nr_p, rn_p = rope(norm(q_heads, w_pairs), cos, sin), norm(rotated, w_pairs)
        print(f"{label:10}: norm-then-rotate vs rotate-then-norm: relative gap "
              f"{gap:.3f};\n            with w uniform within pairs, max gap "
              f"{(nr_p - rn_p).abs().max().item():.1e}")
        assert gap > 0.03  # w is about 10 % off uniform
        torch.testing.assert_close(nr_p, rn_p)
        rope_gaps.append(gap)
rope_gap_lo, rope_gap_hi = min(rope_gaps), max(rope_gaps)
assert all(rope_gap_lo <= g <= rope_gap_hi for g in rope_gaps)  # the range quoted

# %%
# Gemma 3: per head, with ``1 + w`` and its own logit scale
# ---------------------------------------------------------
# Gemma 3, which replaced Gemma 2's attention-logit soft-cap with QK-norm, normalizes
# each head of ``q`` and ``k`` like Qwen3, before RoPE, with Gemma's RMSNorm: it stores
# ``w`` (initialized at 0) and multiplies by ``1 + w`` in float32. That is the page's
# dtype, so the cast changes nothing here (in 16 bits the order of cast and weight
# matters: :doc:`/generated/normalization/plot_09_norms_16bit`). Its logits are scaled
# by ``query_pre_attn_scalar ** -0.5``, not ``1/sqrt(Dh)``; the scalar is 8 here, not
# ``Dh = 16``, so that the scale shows. The layer is a ``"full_attention"`` one (Gemma 3
# interleaves them with sliding-window layers, which get a banded mask; not run here).
# Shapes, ``rope_theta``, ``eps`` and perturbation as above (no head scales): every
# parameter, ``q_norm`` and ``k_norm`` included, is moved off its init, so ``1 + w`` is
# near 1 and ``w`` near 0. The name map is the same.
from transformers import Gemma3TextConfig
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3RotaryEmbedding,
)

SCALAR = 8  # query_pre_attn_scalar
rope_1000 = {"rope_type": "default", "rope_theta": 1000.0}  # THETA
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

theirs = gemma.state_dict()
P_gemma = {ours: theirs[hf].clone() for ours, hf in NAMES.items()}
check = Gemma3Attention(gemma_cfg, layer_idx=0).to(device)  # the map covers every name:
check.load_state_dict({NAMES[k]: v for k, v in P_gemma.items()}, strict=True)
with torch.no_grad():
    ref_g, _ = gemma(x, position_embeddings=(cos_g, sin_g), attention_mask=mask)
    out_g = attention(x, P_gemma, pos, per_head=True, one_plus=True,
                      scaling=SCALAR ** -0.5)
print(f"Gemma3Attention: q_norm {tuple(P_gemma['q_norm'].shape)}, "
      f"max|ours - HF| = {(out_g - ref_g).abs().max().item():.1e}")
torch.testing.assert_close(out_g, ref_g)

# %%
# Each of Gemma's two details matters. Gemma 3's weights load into ``Qwen3Attention``
# with ``strict=True`` (same names, same shapes), and given Gemma's logit scale that
# module is our code with ``w`` for ``1 + w``; ``Gemma3Attention`` built with
# ``query_pre_attn_scalar = Dh`` is our code with the ``1/sqrt(Dh)`` scale. Each equals
# its from-scratch variant and misses the real module by far more than the tolerance.
# Storing ``w`` and multiplying by ``1 + w`` only reparametrizes the norm: a Gemma
# weight ``w`` stands for ``1 + w`` in Qwen3's RMSNorm (Llama's), and then the two agree
# bit for bit in float32 (:doc:`/generated/normalization/plot_09_norms_16bit`). What
# goes wrong is reading one convention's weights with the other's code, and nothing in
# the names warns.
qwen_w = Qwen3Attention(qwen_cfg, layer_idx=0).to(device).eval()
qwen_w.load_state_dict(gemma.state_dict(), strict=True)
qwen_w.scaling = SCALAR ** -0.5  # Gemma's scale; Qwen3's is Dh ** -0.5
gemma_dh = Gemma3Attention(Gemma3TextConfig(**gemma_common, query_pre_attn_scalar=Dh),
                           layer_idx=0).to(device).eval()
gemma_dh.load_state_dict(gemma.state_dict(), strict=True)
with torch.no_grad():
    wrong = {  # label: (ours, Hugging Face's)
        "w, not 1 + w": (attention(x, P_gemma, pos, per_head=True,
                                   scaling=SCALAR ** -0.5), qwen_w),
        "1/sqrt(Dh) scale": (attention(x, P_gemma, pos, per_head=True, one_plus=True),
                             gemma_dh)}
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
