"""
Gated attention: a sigmoid gate on every head's output
======================================================

Qwen3-Next's full-attention layers multiply each head's attention output by a sigmoid
gate computed from the token's own input, just before the output projection. Written
from scratch, equal to Hugging Face's ``Qwen3NextAttention``; the gate lets a head
output nothing, which softmax attention alone cannot.

**You will learn**

- where the gate sits: after the attention, before ``o_proj``, one value per channel
- why a softmax head cannot go below its values' floor, and how the gate can
- how ``q_proj`` emits query and gate interleaved per head (another split is another
  model)
- that an infinite gate gives plain attention back

**Prerequisites:** :doc:`/generated/transformer/plot_10_gqa_mqa` (GQA),
:doc:`/generated/transformer/plot_11_llama_decoder_layer` (a Llama attention layer),
:doc:`/generated/positional/plot_11_partial_rope` (partial RoPE),
:doc:`/generated/normalization/plot_13_qk_norm_practice` (per-head QK-norm),
:doc:`/generated/transformer/plot_12_sliding_window_sinks` (attention sinks).

.. index:: ! gated attention
.. index:: ! output gate
.. index:: ! Qwen3-Next
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
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import matplotlib.pyplot as plt
import torch
import transformers
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# Gemma's RMSNorm (weight ``1 + w``, which Qwen3-Next's QK-norm uses), rotate-half and
# partial RoPE and grouped-query attention, copied verbatim from
# :doc:`/generated/normalization/plot_11_norm_placement`,
# :doc:`/generated/positional/plot_04_rope`,
# :doc:`/generated/positional/plot_11_partial_rope` and
# :doc:`/generated/transformer/plot_10_gqa_mqa`.


# Copied from normalization/plot_11_norm_placement.py: GemmaRMSNorm
class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: weight 1 + w, w initialized at 0; in float32."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(D))  # (D,)
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D), in x's dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return ((1 + self.weight) * x32).to(x.dtype)


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


# Copied from positional/plot_11_partial_rope.py: partial_cos_sin
def partial_cos_sin(pos, Dh, factor, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dr), Dr = int(Dh * factor): rotate-half."""
    return rope_cos_sin(pos, int(Dh * factor), base, dtype)  # RoPE of width Dr


# Copied from positional/plot_11_partial_rope.py: partial_rope
def partial_rope(x, cos, sin):
    """x (B, Nh, L, Dh), cos, sin (B, L, Dr) -> (B, Nh, L, Dh): turns x[:Dr], copies the
    rest."""
    Dr = cos.shape[-1]
    x_rot, x_pass = x[..., :Dr], x[..., Dr:]  # (B, Nh, L, Dr), (B, Nh, L, Dh - Dr)
    turned = rope(x_rot, cos[:, None], sin[:, None])  # pair i is (i, i + Dr/2)
    return torch.cat([turned, x_pass], dim=-1)


# Copied from transformer/plot_10_gqa_mqa.py: grouped_attention
def grouped_attention(q, k, v):
    """Causal GQA. q (B, Nh, L, Dh); k, v (B, Nkv, L, Dh) -> (B, Nh, L, Dh)."""
    B, Nh, L, Dh = q.shape
    Nkv = k.shape[1]
    G = Nh // Nkv  # query heads per key/value head
    qg = q.reshape(B, Nkv, G * L, Dh)  # group j: heads j*G .. j*G+G-1, stacked as rows
    logits = qg @ k.mT / math.sqrt(Dh)  # k.mT (B, Nkv, Dh, L); (B, Nkv, G * L, L)
    logits = logits.view(B, Nkv, G, L, L)
    future = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)  # (L, L)
    weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = weights.view(B, Nkv, G * L, L) @ v  # (B, Nkv, G * L, Dh)
    return y.view(B, Nh, L, Dh)


# %%
# The idea
# --------
# A softmax head returns a convex combination of its values: the weights
# :math:`p_{tj}` are positive and sum to one. Qwen3-Next :footcite:p:`Qiu2025` widens
# ``q_proj`` so that it also emits a gate :math:`g_{t,h}` for every head and channel,
# and scales the head's output by its sigmoid before ``o_proj``:
#
# .. math::
#
#    [\,q_{t,h} \,;\, g_{t,h}\,] = W^Q_h x_t, \qquad
#    o_{t,h} = \sigma(g_{t,h}) \odot \sum_{j \le t} p_{tj,h}\, v_{j,h},
#
# .. math::
#
#    y_t = W^O\, [\,o_{t,1} ; \dots ; o_{t,N_h}\,].
#
# Without the gate, for any unit vector :math:`u`,
# :math:`u^\top o_t = \sum_j p_{tj}\, u^\top v_j \ge \min_{j \le t} u^\top v_j`: when
# the values share a direction, no attention pattern takes the head's output to zero.
# The nearest a head gets is to put its weight on the token with the smallest value,
# an *attention sink* :footcite:p:`Xiao2023`. The gate, computed from :math:`x_t` alone,
# scales the output down for any pattern. Below, 12 values share a direction ``u``;
# for each query token, 200 random attention patterns (soft to one-hot) with and
# without random gates.
gen = torch.Generator().manual_seed(0)
L_fig, Dh_fig, n_pat = 12, 16, 200
u = torch.ones(Dh_fig) / math.sqrt(Dh_fig)  # (Dh,) unit: the values' shared direction
v_fig = u + 0.3 * torch.randn(L_fig, Dh_fig, generator=gen)  # (L, Dh)
floor = torch.cummin(v_fig @ u, dim=0).values  # (L,) min over j <= t of u . v_j
temps = torch.logspace(-1, 2, n_pat)[:, None]  # (n_pat, 1) soft to near one-hot
plain_norms, gated_norms = [], []
for t in range(L_fig):
    p = (torch.randn(n_pat, t + 1, generator=gen) * temps).softmax(dim=-1)  # (n, t+1)
    o = p @ v_fig[: t + 1]  # (n_pat, Dh): convex combinations of the values
    g0 = 10 * torch.rand(n_pat, 1, generator=gen) - 8  # (n_pat, 1) a level per pattern
    gate = torch.sigmoid(g0 + torch.randn(n_pat, Dh_fig, generator=gen))  # (n_pat, Dh)
    plain_norms.append(o.norm(dim=-1))
    gated_norms.append((gate * o).norm(dim=-1))
plain_norms = torch.stack(plain_norms)  # (L, n_pat)
gated_norms = torch.stack(gated_norms)  # (L, n_pat)

fig, ax = plt.subplots(figsize=(8, 3.6))
tt = torch.arange(L_fig)[:, None].expand(-1, n_pat)  # (L, n_pat)
ax.scatter(tt - 0.15, plain_norms, s=4, color="0.55", alpha=0.4, rasterized=True,
           label="softmax attention, ||o_t||")
ax.scatter(tt + 0.15, gated_norms, s=4, color="C0", alpha=0.4, rasterized=True,
           label="gated, ||sigmoid(g) * o_t||")
ax.step(torch.arange(L_fig), floor, where="mid", color="C3", lw=2,
        label="floor: min over j <= t of u . v_j")
ax.set(yscale="log", ylim=(None, 20), xlabel="query token t (sees keys 0 .. t)",
       ylabel="norm of the head's output")
ax.legend(loc="upper center", ncol=3, fontsize=8, markerscale=3)
ax.set_title("No attention pattern takes a head below its values' floor; the gate does")
plt.show()

# %%
# Every softmax output lies above the floor, which is positive; at every query token
# some gated outputs go below 5 % of it.
margin = (plain_norms - floor[:, None]).min().item()
deepest = gated_norms.min(dim=1).values / floor  # (L,) per query token
print(f"floor > 0 at every token: {bool((floor > 0).all())}; "
      f"min over patterns of ||o|| - floor = {margin:.3f}")
print(f"smallest gated ||o|| / floor, the largest over query tokens: "
      f"{deepest.max():.4f}")
assert (floor > 0).all()
assert (plain_norms >= floor[:, None]).all()
assert (deepest < 0.05).all()

# %%
# From scratch
# ------------
# ``q_proj`` emits ``2 * Dh`` numbers per head: the head's query, then its gate, head
# after head. The query and the key are normalized per head by Gemma's RMSNorm
# (weight ``1 + w``), turned by partial RoPE on their first ``Dr`` channels, and meet in
# grouped-query attention. The gate multiplies the attention output channel by channel.
class Qwen3NextAttention(nn.Module):
    """Gated causal GQA with per-head QK-norm and partial RoPE; Hugging Face's names."""

    def __init__(self, D, Nh, Nkv, Dh, eps):
        super().__init__()
        self.Nh, self.Nkv, self.Dh = Nh, Nkv, Dh
        self.q_proj = nn.Linear(D, Nh * Dh * 2, bias=False)  # query and gate
        self.k_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.v_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.o_proj = nn.Linear(Nh * Dh, D, bias=False)
        self.q_norm = GemmaRMSNorm(Dh, eps)  # per head, over Dh
        self.k_norm = GemmaRMSNorm(Dh, eps)

    def split(self, x):  # x (B, L, D)
        """-> query, gate logits (B, L, Nh, Dh) each: per head [q_h | g_h]."""
        B, L, _ = x.shape
        return self.q_proj(x).view(B, L, self.Nh, 2 * self.Dh).chunk(2, dim=-1)

    def heads(self, x, cos, sin):  # x (B, L, D); cos, sin (B, L, Dr)
        """-> attention output before the gate, gate logits: (B, L, Nh, Dh) each."""
        B, L, _ = x.shape
        q, gate = self.split(x)
        q = self.q_norm(q).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.k_norm(self.k_proj(x).view(B, L, self.Nkv, self.Dh)).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.Nkv, self.Dh).transpose(1, 2)  # (B,Nkv,L,Dh)
        q, k = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
        return grouped_attention(q, k, v).transpose(1, 2), gate

    def forward(self, x, cos, sin):  # -> (B, L, D)
        y, gate = self.heads(x, cos, sin)  # (B, L, Nh, Dh) each
        return self.o_proj((y * torch.sigmoid(gate)).flatten(2))  # (B, L, Nh * Dh)


# %%
# Equal to Hugging Face's ``Qwen3NextAttention``
# ----------------------------------------------
# A tiny random ``Qwen3NextConfig`` (``D = 48``, ``Nh = 4``, ``Nkv = 2``, ``Dh = 16``,
# partial RoPE factor 0.25 as Qwen3-Next, so ``Dr = 4``), eager attention, every
# parameter moved off its initialization, the norms' included. Hugging Face's names
# load strictly; its layer gets the additive causal mask its model would build.
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next import modeling_qwen3_next as hf_qwen3_next

B, L, D, Nh, Nkv, Dh, BASE = 3, 8, 48, 4, 2, 16, 1000.0
config = Qwen3NextConfig(
    hidden_size=D, num_attention_heads=Nh, num_key_value_heads=Nkv, head_dim=Dh,
    num_hidden_layers=4, vocab_size=64, rms_norm_eps=1e-3,
    rope_parameters={"rope_type": "default", "rope_theta": BASE,
                     "partial_rotary_factor": 0.25},
    attn_implementation="eager")
hf = hf_qwen3_next.Qwen3NextAttention(config, layer_idx=3).to(device).eval()
with torch.no_grad():
    for name, p in hf.named_parameters():  # off init: norms' w from 0, the rest random
        scale = 0.3 if "norm" in name else 1 / math.sqrt(p.shape[-1])
        p.copy_(scale * torch.randn_like(p))
ours = Qwen3NextAttention(D, Nh, Nkv, Dh, eps=config.rms_norm_eps).to(device)
print(ours.load_state_dict(hf.state_dict(), strict=True))

# Small inputs: every head of q and k has a mean square between eps = 1e-3 and 100 eps,
# so eps moves the norms' output (asserted).
x = 0.1 * torch.randn(B, L, D, device=device)  # (B, L, D)
pos = torch.randint(0, 200, (B, L)).sort(dim=-1).values.to(device)  # (B, L) rising
cos, sin = partial_cos_sin(pos, Dh, 0.25, BASE)  # (B, L, Dr)
cos_hf, sin_hf = hf_qwen3_next.Qwen3NextRotaryEmbedding(config).to(device)(x, pos)
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
causal = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))
causal = causal[None, None]  # (1, 1, L, L), added to the logits
with torch.no_grad():
    ref, _ = hf(x, position_embeddings=(cos_hf, sin_hf), attention_mask=causal)
    out = ours(x, cos, sin)  # (B, L, D)
gap_hf = (out - ref).abs().max().item()
print(f"cos, sin: {tuple(cos.shape)}, Dr = {cos.shape[-1]} of Dh = {Dh}")
with torch.no_grad():
    q_heads = ours.split(x)[0]  # (B, L, Nh, Dh) before the norm
    k_heads = ours.k_proj(x).view(B, L, Nkv, Dh)  # (B, L, Nkv, Dh)
eps_qk = config.rms_norm_eps
ms = torch.cat([q_heads.pow(2).mean(-1).flatten(), k_heads.pow(2).mean(-1).flatten()])
print(f"mean square per head of q and k: {ms.min():.1e} to {ms.max():.1e}")
print(f"max |ours - Qwen3NextAttention| = {gap_hf:.1e}")
for heads in (q_heads, k_heads):
    assert eps_qk < heads.pow(2).mean(-1).min()
    assert heads.pow(2).mean(-1).max() < 100 * eps_qk
torch.testing.assert_close(cos, cos_hf)
torch.testing.assert_close(sin, sin_hf)
torch.testing.assert_close(out, ref)

# %%
# Proof: an infinite gate is plain attention, a zero gate halves it
# -----------------------------------------------------------------
# The gate, switched off and halved, in Hugging Face's layer: a forward hook on its
# ``q_proj`` overwrites the gate logits (the second half of each head's ``2 * Dh``).
# At :math:`g = +\infty`, :math:`\sigma(g) = 1` exactly and the layer is plain
# attention, ``o_proj`` of our ungated heads; at :math:`g = 0` every head is halved.
def gate_hook(value, Dh):
    """A forward hook on q_proj that sets every gate logit to `value`."""

    def hook(module, args, output):  # output (B, L, Nh * 2 * Dh)
        out = output.unflatten(-1, (-1, 2, Dh))  # (B, L, Nh, 2, Dh): [q_h, g_h]
        gate_row = torch.tensor([1], device=out.device)
        return out.index_fill(-2, gate_row, value).flatten(2)
    return hook


# %%
with torch.no_grad():
    y_plain, _ = ours.heads(x, cos, sin)  # (B, L, Nh, Dh), before the gate
    plain = ours.o_proj(y_plain.flatten(2))  # (B, L, D): attention without a gate
    outs = {}
    for value in (float("inf"), 0.0):
        handle = hf.q_proj.register_forward_hook(gate_hook(value, Dh))
        outs[value], _ = hf(x, position_embeddings=(cos_hf, sin_hf),
                            attention_mask=causal)
        handle.remove()
gap_off = (outs[float("inf")] - plain).abs().max().item()
gate_effect = ((ref - plain).norm() / plain.norm()).item()
print(f"gate = +inf: max |HF - plain attention| = {gap_off:.1e}")
print(f"gate = 0: max |HF - plain / 2| = {(outs[0.0] - plain / 2).abs().max():.1e}")
print(f"with its gate, the layer is {gate_effect:.2f} (relative) away from plain")
torch.testing.assert_close(outs[float("inf")], plain)
torch.testing.assert_close(outs[0.0], plain / 2)
assert gate_effect > 0.3

# %%
# Proof: Qwen3-Next-80B-A3B's sizes, from its config
# --------------------------------------------------
# The published ``config.json`` of Qwen/Qwen3-Next-80B-A3B-Instruct on the Hugging Face
# Hub (the fields used here; ``Qwen3NextConfig``'s defaults are that checkpoint's). One
# layer in four is full attention; the gate is a fifth projection as large as the
# query's.
QWEN3_NEXT_80B = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2,
                      head_dim=256, partial_rotary_factor=0.25, num_hidden_layers=48)
defaults = Qwen3NextConfig()
for key, value in QWEN3_NEXT_80B.items():
    hf_value = (defaults.rope_parameters[key] if key == "partial_rotary_factor"
                else getattr(defaults, key))
    assert hf_value == value, key
n_full = defaults.layer_types.count("full_attention")
with torch.device("meta"):  # shapes only, no memory
    big = hf_qwen3_next.Qwen3NextAttention(defaults, layer_idx=3)
n_attn = sum(p.numel() for p in big.parameters())
cfg = QWEN3_NEXT_80B
n_gate = cfg["hidden_size"] * cfg["num_attention_heads"] * cfg["head_dim"]  # q_proj/2
gate_share = n_gate / n_attn
print(f"full-attention layers: {n_full} of {defaults.num_hidden_layers}; "
      f"q_proj {tuple(big.q_proj.weight.shape)}")
print(f"gate: {n_gate:,} of {n_attn:,} attention parameters ({gate_share:.1%})")
assert n_full == 12
with torch.device("meta"):
    rotary = hf_qwen3_next.Qwen3NextRotaryEmbedding(defaults)
Dr_big = int(cfg["head_dim"] * cfg["partial_rotary_factor"])  # channels RoPE turns
print(f"partial RoPE: {Dr_big} of {cfg['head_dim']} channels per head turn")
assert 2 * rotary.inv_freq.shape[-1] == Dr_big == 64
assert big.q_proj.weight.shape == (2 * n_gate // cfg["hidden_size"], cfg["hidden_size"])
assert big.q_proj.weight.numel() == 2 * n_gate

# %%
# Proof: every piece of the layer matters on this input
# -----------------------------------------------------
# Our layer with one piece changed, each against Hugging Face's output: the QK-norm
# weights at their initialization (``w = 0``), the weight ``w`` for ``1 + w``, no eps,
# RoPE on all ``Dh`` channels, no gate. Each misses by far more than float32's
# tolerance (1.3e-6 relative); the unchanged copy, run the same way, does not.
import copy


class PlainWeightNorm(nn.Module):
    """The QK-norm with weight w instead of 1 + w."""

    def __init__(self, D, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(D))  # (D,)
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (self.weight * x32).to(x.dtype)


def plain_weight(layer):
    """Both QK-norms weigh by w."""
    for name in ("q_norm", "k_norm"):
        norm = getattr(layer, name)
        wrong = PlainWeightNorm(layer.Dh, norm.eps).to(norm.weight.device)
        wrong.load_state_dict(norm.state_dict())
        setattr(layer, name, wrong)


def norms_at_init(layer):
    """Both QK-norms' w back to 0."""
    with torch.no_grad():
        layer.q_norm.weight.zero_()
        layer.k_norm.weight.zero_()


def no_eps(layer):
    """Both QK-norms without eps."""
    layer.q_norm.eps = layer.k_norm.eps = 0.0


# %%
# PlainWeightNorm is Gemma's norm but for the weight: given 1 + w, it is the same.
shifted = PlainWeightNorm(Dh, config.rms_norm_eps).to(device)
with torch.no_grad():
    shifted.weight.copy_(1 + ours.q_norm.weight)
    q_probe = 0.03 * torch.randn(B, L, Nh, Dh, device=device)  # (B, L, Nh, Dh)
    torch.testing.assert_close(shifted(q_probe), ours.q_norm(q_probe))

changes = {"unchanged": lambda layer: None, "QK-norm weights at init": norms_at_init,
           "QK-norm weight w, not 1 + w": plain_weight, "QK-norm without eps": no_eps}
cos_full, sin_full = partial_cos_sin(pos, Dh, 1.0, BASE)  # (B, L, Dh): every channel
with torch.no_grad():
    outs_changed = {}
    for name, change in changes.items():
        layer = copy.deepcopy(ours)
        change(layer)
        outs_changed[name] = layer(x, cos, sin)
    outs_changed["RoPE on all Dh channels"] = ours(x, cos_full, sin_full)
    outs_changed["no gate"] = plain
assert cos_full.shape[-1] == Dh
torch.testing.assert_close(outs_changed.pop("unchanged"), ref)
gaps = {}
for name, o in outs_changed.items():
    gaps[name] = ((o - ref).norm() / ref.norm()).item()
    print(f"{name:28s}: relative gap {gaps[name]:.3f}")
assert all(gap > 0.03 for gap in gaps.values())

# %%
# Try it: split ``q_proj``'s output as [all queries | all gates]. Same model?
# -----------------------------------------------------------------------------
# ``torch.chunk(q_proj(x), 2, dim=-1)`` reads the first ``Nh * Dh`` numbers as the
# queries. Hugging Face's layer views ``(B, L, Nh, 2 * Dh)`` first. Do the two agree?

# No: the weights are the same, the rows mean other things. Only the checkpoint's
# layout is right. (Our layer with its split replaced: q_proj's output read as
# [all queries | all gates], each (B, L, Nh * Dh), then cut into heads.)
halves = copy.deepcopy(ours)
halves.split = lambda x: tuple(t.unflatten(-1, (Nh, Dh))
                               for t in halves.q_proj(x).chunk(2, dim=-1))
with torch.no_grad():
    gap_split = ((halves(x, cos, sin) - ref).norm() / ref.norm()).item()
    # The two layouts are one permutation of q_proj's rows apart: (Nh, 2, Dh) rows
    # reordered to (2, Nh, Dh) make the halves split Hugging Face's model again.
    w = hf.q_proj.weight.unflatten(0, (Nh, 2, Dh)).transpose(0, 1).flatten(0, 2)
    halves.q_proj.weight.copy_(w)
    permuted = halves(x, cos, sin)
print(f"[queries | gates] split: relative gap to Hugging Face {gap_split:.2f}")
print(f"with q_proj's rows permuted: max |diff| = {(permuted - ref).abs().max():.1e}")
assert gap_split > 0.1
torch.testing.assert_close(permuted, ref)

# %%
# Try it: gate the values instead of the output. Same layer?
# ----------------------------------------------------------
# Scale each value :math:`v_j` by a gate :math:`\gamma_j \in [0, 1]`, one number per
# key token, before attention, instead of scaling the output per query token (the
# paper compares such positions :footcite:p:`Qiu2025`). Can the head switch itself
# off at query 3 and not at query 4?

# No. The figure's values (u . v_j > 0), causal weights p_tj > 0: silencing query 3
# needs u . o_3 = sum_j p_3j gamma_j u . v_j = 0, so gamma_j = 0 for every j <= 3,
# and query 4 reads those values too. The output gate belongs to the query token.
gen = torch.Generator().manual_seed(1)
v_t = u + 0.3 * torch.randn(L_fig, Dh_fig, generator=gen)  # (L, Dh) the figure's kind
later = torch.ones(L_fig, L_fig, dtype=torch.bool).triu(1)  # (L, L) keys after t
p_t = torch.randn(L_fig, L_fig, generator=gen).masked_fill(later, -math.inf)
p_t = p_t.softmax(dim=-1)  # (L, L) causal attention weights
o_t = p_t @ v_t  # (L, Dh) the ungated outputs
out_gate = torch.ones(L_fig, 1)  # (L, 1) one gate per query token
out_gate[3] = 0.0
value_gate = torch.ones(L_fig, 1)  # (L, 1) one gate per key token
value_gate[:4] = 0.0  # the only value gate that silences query 3
gated_out, gated_values = out_gate * o_t, p_t @ (value_gate * v_t)  # (L, Dh) each
print(f"min u . v_j = {(v_t @ u).min():.2f}")
print(f"output gate: ||o_3|| = {gated_out[3].norm():.2f}, "
      f"||o_4|| = {gated_out[4].norm():.2f} (unchanged)")
print(f"value gate:  ||o_3|| = {gated_values[3].norm():.2f}, "
      f"||o_4|| = {gated_values[4].norm():.2f}")
assert (v_t @ u).min() > 0
assert gated_out[3].norm() == 0 and gated_values[3].norm() == 0
assert gated_values[-1].norm() > 0.1  # later queries still read ungated values
torch.testing.assert_close(gated_out[4], o_t[4])
assert (gated_values[4] - o_t[4]).norm() > 0.5 * o_t[4].norm()

# %%
# References
# ----------
# Gated attention and its use in Qwen3-Next :footcite:p:`Qiu2025`; attention sinks
# :footcite:p:`Xiao2023`; Qwen3 :footcite:p:`Yang2025`. APIs: ``Qwen3NextAttention``,
# ``Qwen3NextConfig``, ``Qwen3NextRotaryEmbedding``.
#
# .. footbibliography::
