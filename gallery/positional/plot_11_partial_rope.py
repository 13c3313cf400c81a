"""
Partial RoPE
============

GPT-NeoX (``rotary_pct = 0.25``) and Phi (``partial_rotary_factor = 0.5``) rotate only
the first ``Dr = int(Dh * factor)`` channels of each query and key head, with RoPE of
width ``Dr``; the other ``Dh - Dr`` channels pass through unchanged. A logit then splits
in two: a plain dot product that never sees a position, and a RoPE term that depends
only on the relative position.

**You will learn**

- how partial RoPE is full RoPE of width ``Dr`` on the first ``Dr`` channels
- why the frequencies are spread over ``Dr``, not over ``Dh``
- how a logit splits into a position-free part and a relative-position part
- that it equals Hugging Face's GPT-NeoX and Phi, tables and whole attention layers

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (RoPE, the rotate-half
layout), :doc:`/generated/positional/plot_05_rope_attention` (RoPE inside attention),
:doc:`/generated/transformer/plot_04_causal_attention` (the causal attention of its
GPT-NeoX layer).

.. index:: ! partial RoPE
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
import torch
import transformers
from transformers import GPTNeoXConfig, PhiConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    GPTNeoXAttention,
    GPTNeoXRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.models.phi.modeling_phi import PhiAttention, PhiRotaryEmbedding

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The blocks this page shares with another, copied verbatim: the rotate-half RoPE family
# (from :doc:`/generated/positional/plot_04_rope`).


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

# %%
# The idea
# --------
# A head vector ``x`` of width ``Dh`` at position ``p`` is split into ``x[:Dr]`` and
# ``x[Dr:]``: the first part turns by rotate-half RoPE of width ``Dr`` (pair :math:`i`,
# channels ``i`` and ``i + Dr/2``, by :math:`p\,\omega_i`,
# :math:`\omega_i = b^{-2i/D_r}`), the second is copied. Rotations compose, so the logit
# of a query at :math:`m` and a key at :math:`n` splits along the channels:
#
# .. math::
#
#    q_m \cdot k_n
#    = \underbrace{q_{[:D_r]}^\top R_{(n - m)\omega}\, k_{[:D_r]}}_{\text{relative}}
#    + \underbrace{q_{[D_r:]} \cdot k_{[D_r:]}}_{\text{no position}} .
#
# Per pair, :math:`u^\top R_\delta v = (u \cdot v) \cos\delta + (u_2 v_1 - u_1 v_2)
# \sin\delta`. The figure draws both parts from that formula for one head of
# GPT-NeoX-20B's shape (``Dh = 96``, ``Dr = 24``, base 10000): a query at ``1000 + r``
# against a key at ``1000``. The unrotated 72 channels add a constant; everything the
# logit knows about distance comes from the first 24 (the page checks these curves
# against its partial RoPE below).
import matplotlib.pyplot as plt

Dh_20b, FACTOR_20b = 96, 0.25
Dr_20b = int(Dh_20b * FACTOR_20b)  # 24
gen = torch.Generator().manual_seed(1)  # its own stream, apart from the page's
q_fig = torch.randn(Dh_20b, dtype=torch.float64, generator=gen)  # (Dh,)
k_fig = q_fig + 0.5 * torch.randn(Dh_20b, dtype=torch.float64, generator=gen)  # near q
r_fig = torch.arange(0, 513, dtype=torch.float64)  # (P,) distances m - n
omega = 10000.0 ** (-torch.arange(0, Dr_20b, 2).double() / Dr_20b)  # (Dr/2,)
delta = -r_fig[:, None] * omega  # (P, Dr/2): (n - m) * omega_i
u1, u2 = q_fig[: Dr_20b // 2], q_fig[Dr_20b // 2: Dr_20b]  # pair i: i, i + Dr/2
v1, v2 = k_fig[: Dr_20b // 2], k_fig[Dr_20b // 2: Dr_20b]
rot_fig = ((u1 * v1 + u2 * v2) * delta.cos()
           + (u2 * v1 - u1 * v2) * delta.sin()).sum(-1)  # (P,)
unrot_fig = (q_fig[Dr_20b:] * k_fig[Dr_20b:]).sum().expand(len(r_fig))  # (P,)

fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
ax.plot(r_fig, rot_fig + unrot_fig, color="0.6", lw=1, label="whole logit")
ax.plot(r_fig, rot_fig, label=f"rotated channels [:{Dr_20b}]")
ax.plot(r_fig, unrot_fig, label=f"unrotated channels [{Dr_20b}:]")
ax.set_xlabel("relative distance m - n (positions)")
ax.set_ylabel("contribution to q . k")
ax.set_title("Partial RoPE: only the rotated quarter of the logit moves with distance")
ax.set_ylim(top=1.3 * (rot_fig + unrot_fig).max().item())  # room for the legend
ax.legend(fontsize=8, ncols=3, loc="upper center")
plt.show()

# %%
# Partial RoPE from scratch
# -------------------------
# RoPE of width ``Dr`` is the book's rotate-half RoPE (copied in Setup):
# ``rope_cos_sin`` with ``Dh = Dr`` gives the tables of the ``Dr`` rotated channels, so
# the slowest pair turns at ``base ** (-(Dr-2)/Dr)``, not ``base ** (-(Dh-2)/Dh)``.
# Frequencies and angles are float32, in the order of GPT-NeoX's own code,
# ``1 / base ** (2i / Dr)``; the rest of the channels is copied.
def partial_cos_sin(pos, Dh, factor, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dr), Dr = int(Dh * factor): rotate-half."""
    return rope_cos_sin(pos, int(Dh * factor), base, dtype)  # RoPE of width Dr


def partial_rope(x, cos, sin):
    """x (B, Nh, L, Dh), cos, sin (B, L, Dr) -> (B, Nh, L, Dh): turns x[:Dr], copies the
    rest."""
    Dr = cos.shape[-1]
    x_rot, x_pass = x[..., :Dr], x[..., Dr:]  # (B, Nh, L, Dr), (B, Nh, L, Dh - Dr)
    turned = rope(x_rot, cos[:, None], sin[:, None])  # pair i is (i, i + Dr/2)
    return torch.cat([turned, x_pass], dim=-1)


# %%
# A logit in two parts
# --------------------
# ``q_m . k_n = rot(q[:Dr], m) . rot(k[:Dr], n) + q[Dr:] . k[Dr:]``: the second term
# never sees a position, the first (RoPE's, :footcite:t:`Su2021`) depends on ``m - n``
# only.
# Both asserted on our partial RoPE (equal to Hugging Face's, Proofs below) for one head
# of GPT-NeoX-20B's shape, in float64 so that the angles' rounding at positions near
# 5000 stays below float64's default tolerances.
BASE_20b = 10000.0  # GPT-NeoX-20B's base
q1 = torch.randn(Dh_20b, dtype=torch.float64, device=device)  # (Dh,)
k1 = q1 + 0.5 * torch.randn(Dh_20b, dtype=torch.float64, device=device)  # near q1


# %%
def at_positions(x, p, factor, base):
    """One head vector x (Dh,) under partial RoPE at the positions p (P,) -> (P, Dh)."""
    c, s = partial_cos_sin(p[None], x.shape[-1], factor, base, torch.float64)
    return partial_rope(x.expand(1, 1, len(p), -1), c, s)[0, 0]  # (P, Dh)


def logit_parts(q, k, m, n, factor, base):
    """The rotated and the unrotated part of the logit q_m . k_n at m, n (P,)."""
    Dr = int(q.shape[-1] * factor)
    qm, kn = at_positions(q, m, factor, base), at_positions(k, n, factor, base)
    rot, rest = (qm[:, :Dr] * kn[:, :Dr]).sum(-1), (qm[:, Dr:] * kn[:, Dr:]).sum(-1)
    return rot, rest  # (P,) each


# %%
m = torch.randint(0, 4096, (64,), device=device)  # (P,) query positions
n = torch.randint(0, 4096, (64,), device=device)  # (P,) key positions
shift = 977
rot, unrot = logit_parts(q1, k1, m, n, FACTOR_20b, BASE_20b)
rot_shifted, unrot_shifted = logit_parts(q1, k1, m + shift, n + shift, FACTOR_20b,
                                         BASE_20b)
plain = (q1[Dr_20b:] * k1[Dr_20b:]).sum()  # the dot product without any position
print(f"unrotated part: spread over 64 position pairs {unrot.max() - unrot.min():.1e}, "
      f"max |part - plain dot| = {(unrot - plain).abs().max():.1e}")
torch.testing.assert_close(unrot, plain.expand(64))
torch.testing.assert_close(unrot_shifted, unrot)
rot_spread = (rot.max() - rot.min()).item()
print(f"rotated part: spread {rot_spread:.2f}; shifting both by {shift}: "
      f"max |change| = {(rot_shifted - rot).abs().max():.1e}")
torch.testing.assert_close(rot_shifted, rot)
# the spread is the largest difference between two of the 64 position pairs
torch.testing.assert_close(rot_spread, (rot[:, None] - rot[None, :]).abs().max().item())
assert rot_spread > 1.0  # printed above: it does depend on m - n
plain_rot = (q1[:Dr_20b] * k1[:Dr_20b]).sum()
gap_rot = (rot - plain_rot).abs().max().item()
print(f"rotated part vs its dot product without positions: max |diff| = {gap_rot:.2f}")
assert gap_rot > 1.0  # printed above: the first Dr channels do carry position

# %%
# Proof: the figure's curves are partial RoPE's two parts
# -------------------------------------------------------
# Partial RoPE at ``1000 + r`` and ``1000`` gives the per-pair formula of the idea.
r = torch.arange(0, 513, device=device)  # (P,) relative distances
rot_r, unrot_r = logit_parts(q_fig.to(device), k_fig.to(device), 1000 + r,
                             torch.full_like(r, 1000), FACTOR_20b, BASE_20b)
print(f"max |partial RoPE - the idea's formula|: rotated "
      f"{(rot_r.cpu() - rot_fig).abs().max():.1e}, unrotated "
      f"{(unrot_r.cpu() - unrot_fig).abs().max():.1e}")
torch.testing.assert_close(rot_r.cpu(), rot_fig)
torch.testing.assert_close(unrot_r.cpu(), unrot_fig)

# %%
# Proof: GPT-NeoX's tables, queries and keys equal ours
# -----------------------------------------------------
# GPT-NeoX-20B (:footcite:t:`Black2022`) has ``Dh = 96`` and rotates 24 channels. Its
# config takes the old names ``rotary_pct`` and ``rotary_emb_base``, which
# ``transformers`` 5.23 moves into ``rope_parameters`` (printed). Here ``D = 96``,
# ``Nh = 4``, so ``Dh = 24`` and ``Dr = 6``; the base is 1000, not the default 10000,
# so that a hard-coded base fails. Positions are uneven and reach 2000, so that every
# frequency has turned through several periods.
V, D, Nh = 100, 96, 4
Dh = D // Nh
BASE = 1000.0
cfg_neox = GPTNeoXConfig(
    vocab_size=V, hidden_size=D, num_attention_heads=Nh, num_hidden_layers=2,
    intermediate_size=128, rotary_pct=0.25, rotary_emb_base=BASE,
    attn_implementation="eager",
)
print("GPT-NeoX:",
      ", ".join(f"{k}={v}" for k, v in cfg_neox.rope_parameters.items()))
FACTOR = cfg_neox.rope_parameters["partial_rotary_factor"]
assert FACTOR == 0.25 and cfg_neox.rope_parameters["rope_theta"] == BASE

B, L = 2, 10
pos = torch.stack([torch.arange(L) * 7 + 3,
                   torch.sort(torch.randperm(2000)[:L]).values]).to(device)  # (B, L)
print("positions, row 0:", pos[0].tolist())
print("positions, row 1:", pos[1].tolist())

rotary_neox = GPTNeoXRotaryEmbedding(cfg_neox).to(device)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
cos_hf, sin_hf = rotary_neox(x, pos)  # (B, L, Dr) each
cos, sin = partial_cos_sin(pos, Dh, FACTOR, BASE)  # (B, L, Dr) each
Dr = cos.shape[-1]
print(f"Dh = {Dh}, Dr = int(Dh * {FACTOR}) = {Dr}; cos, sin {tuple(cos.shape)}")
print(f"max |ours - GPTNeoXRotaryEmbedding|: cos {(cos - cos_hf).abs().max():.1e}, "
      f"sin {(sin - sin_hf).abs().max():.1e}")
torch.testing.assert_close(cos, cos_hf)
torch.testing.assert_close(sin, sin_hf)

# %%
# The rotated queries and keys, against ``apply_rotary_pos_emb`` of GPT-NeoX (which
# itself slices ``q[..., :Dr]`` off and concatenates the rest back). ``Nh`` heads of
# random queries and keys, ``(B, Nh, L, Dh)``:
q = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh)
k = torch.randn(B, Nh, L, Dh, device=device)
q_hf, k_hf = apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
q_ours, k_ours = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
print(f"max |ours - apply_rotary_pos_emb|: q {(q_ours - q_hf).abs().max():.1e}, "
      f"k {(k_ours - k_hf).abs().max():.1e}")
torch.testing.assert_close(q_ours, q_hf)
torch.testing.assert_close(k_ours, k_hf)
moved = (q_ours[..., :Dr] - q[..., :Dr]).abs().max().item()
print(f"channels [:Dr] moved by up to {moved:.2f}; channels [Dr:] equal to the input: "
      f"{torch.equal(q_ours[..., Dr:], q[..., Dr:])}")
assert moved > 0.5  # printed above: the first Dr channels do turn
assert torch.equal(q_ours[..., Dr:], q[..., Dr:])  # bit for bit: copied, not computed

# %%
# Proof: a whole GPT-NeoX attention layer equals Hugging Face's
# -------------------------------------------------------------
# GPT-NeoX projects ``x`` with one fused ``query_key_value`` linear whose output, per
# head, lays out ``q``, ``k`` and ``v`` next to each other (``(B, L, Nh, 3 Dh)``, then
# split in three): a layout unlike
# :doc:`Llama's </generated/transformer/plot_11_llama_decoder_layer>` separate
# projections. Then partial RoPE, causal attention scaled by ``1 / sqrt(Dh)`` (the full
# head width, not ``Dr``) and the output projection ``dense``. Our weights are drawn at
# random, named as Hugging Face names them, and loaded into ``GPTNeoXAttention`` with
# ``strict=True``; the eager path is the reference, and it adds the additive causal mask
# it is given.


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


def partial_rope_attention(q, k, v, cos, sin, mask):
    """Partial RoPE on q, k; softmax attention with an additive mask (L, L).

    q, k, v (B, Nh, L, Dh) -> (B, L, Nh * Dh)."""
    q, k = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask  # (B, Nh, L, L)
    out = scores.softmax(dim=-1) @ v  # (B, Nh, L, Dh)
    return out.transpose(1, 2).flatten(2)  # (B, L, Nh * Dh)


def neox_attention(x, W, cos, sin, Nh, mask):
    """GPT-NeoX attention from its weights W (Hugging Face's names). (B, L, D)."""
    Dh = x.shape[-1] // Nh
    qkv = x @ W["query_key_value.weight"].T + W["query_key_value.bias"]  # (B, L, 3D)
    qkv = qkv.unflatten(-1, (Nh, 3 * Dh)).transpose(1, 2)  # (B, Nh, L, 3 Dh): per head
    q, k, v = qkv.split(Dh, dim=-1)  # (B, Nh, L, Dh) each
    out = partial_rope_attention(q, k, v, cos, sin, mask)  # (B, L, D)
    return out @ W["dense.weight"].T + W["dense.bias"]


def load_hf(module, W, device=None):
    """Our weights W, named as Hugging Face names them, into its attention module
    (strict: a name missing on either side fails)."""
    module.load_state_dict(W, strict=True)
    assert module.config._attn_implementation == "eager"
    return module.to(device).eval()


# %%
future = ~causal_mask(L, device)  # (L, L), keys after the query
causal = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))  # (L, L)
W_neox = {"query_key_value.weight": torch.randn(3 * D, D) / math.sqrt(D),
          "query_key_value.bias": torch.randn(3 * D),
          "dense.weight": torch.randn(D, D) / math.sqrt(D),
          "dense.bias": torch.randn(D)}
W_neox = {name: w.to(device) for name, w in W_neox.items()}
attn_neox = load_hf(GPTNeoXAttention(cfg_neox, layer_idx=0), W_neox, device)

mask_hf = torch.full((L, L), torch.finfo(torch.float32).min, device=device).triu(1)
with torch.no_grad():
    ref, _ = attn_neox(x, attention_mask=mask_hf[None, None],
                       position_embeddings=(cos_hf, sin_hf))
ours = neox_attention(x, W_neox, cos, sin, Nh, causal)  # (B, L, D)
print(f"GPTNeoXAttention: max |ours - HF| = {(ours - ref).abs().max():.1e}")
torch.testing.assert_close(ours, ref)

# %%
# Proof: Phi's partial_rotary_factor = 0.5, tables and attention layer
# --------------------------------------------------------------------
# Phi-1 (:footcite:t:`Gunasekar2023`) rotates 32 of the 64 channels of each head.
# ``PhiAttention`` has separate ``q_proj``, ``k_proj``, ``v_proj`` (with biases) and
# slices the rotated channels itself before calling rotate-half RoPE. Here ``D = 64``,
# ``Nh = 4``, ``Dh = 16``, ``Dr = 8``, base 1000. ``PhiConfig`` takes
# ``partial_rotary_factor`` directly and moves it into ``rope_parameters``.
D_phi, FACTOR_phi = 64, 0.5
Dh_phi = D_phi // Nh
cfg_phi = PhiConfig(
    vocab_size=V, hidden_size=D_phi, num_attention_heads=Nh, num_hidden_layers=2,
    intermediate_size=128, partial_rotary_factor=FACTOR_phi,
    rope_parameters={"rope_type": "default", "rope_theta": BASE},
    attn_implementation="eager",
)
print("Phi:",
      ", ".join(f"{k}={v}" for k, v in cfg_phi.rope_parameters.items()))
assert cfg_phi.rope_parameters["partial_rotary_factor"] == FACTOR_phi

x_phi = torch.randn(B, L, D_phi, device=device)  # (B, L, D)
cos_phi_hf, sin_phi_hf = PhiRotaryEmbedding(cfg_phi).to(device)(x_phi, pos)
cos_phi, sin_phi = partial_cos_sin(pos, Dh_phi, FACTOR_phi, BASE)  # (B, L, Dr)
print(f"Dh = {Dh_phi}, Dr = {cos_phi.shape[-1]}: max |ours - PhiRotaryEmbedding| = "
      f"{(cos_phi - cos_phi_hf).abs().max():.1e}, "
      f"{(sin_phi - sin_phi_hf).abs().max():.1e}")
torch.testing.assert_close(cos_phi, cos_phi_hf)
torch.testing.assert_close(sin_phi, sin_phi_hf)


# %%
def phi_attention(x, W, cos, sin, Nh, mask):
    """Phi attention from its weights W (Hugging Face's names). (B, L, D)."""
    def heads(t):  # (B, L, D) -> (B, Nh, L, Dh)
        return t.unflatten(-1, (Nh, -1)).transpose(1, 2)
    q, k, v = (heads(x @ W[f"{n}_proj.weight"].T + W[f"{n}_proj.bias"]) for n in "qkv")
    out = partial_rope_attention(q, k, v, cos, sin, mask)  # (B, L, D)
    return out @ W["dense.weight"].T + W["dense.bias"]


# %%
W_phi = {f"{n}.{p}": (torch.randn(D_phi, D_phi) / math.sqrt(D_phi) if p == "weight"
                      else torch.randn(D_phi)).to(device)
         for n in ["q_proj", "k_proj", "v_proj", "dense"] for p in ("weight", "bias")}
attn_phi = load_hf(PhiAttention(cfg_phi, layer_idx=0), W_phi, device)
with torch.no_grad():
    ref_phi, _ = attn_phi(x_phi, (cos_phi_hf, sin_phi_hf), mask_hf[None, None])
ours_phi = phi_attention(x_phi, W_phi, cos_phi, sin_phi, Nh, causal)  # (B, L, D)
print(f"PhiAttention: max |ours - HF| = {(ours_phi - ref_phi).abs().max():.1e}")
torch.testing.assert_close(ours_phi, ref_phi)

# %%
# Try it: take the first ``Dr/2`` frequencies of full RoPE's table. What changes?
# -------------------------------------------------------------------------------
# A port might slice full RoPE's tables (frequencies spread over ``Dh``) instead of
# building RoPE of width ``Dr``. Compare its ``cos`` with GPT-NeoX's.

# %%
# The frequencies are spread over the ``Dr`` rotated channels, down to
# ``base ** (-(Dr-2)/Dr)``. The sliced table keeps only full RoPE's fastest pairs, down
# to ``base ** (-(Dr-2)/Dh)``, and turns them by other angles:
inv_freq_R = BASE ** (-torch.arange(0, Dr, 2) / Dr)
inv_freq_Dh = BASE ** (-torch.arange(0, Dr, 2) / Dh)
print(f"inv_freq over Dr:  {[round(t, 4) for t in inv_freq_R.tolist()]}")
print(f"inv_freq over Dh: {[round(t, 4) for t in inv_freq_Dh.tolist()]}")
cos_full, sin_full = partial_cos_sin(pos, Dh, 1.0, BASE)  # (B, L, Dh): full RoPE
assert cos_full.shape[-1] == Dh  # factor 1: every channel turns
cos_sliced = torch.cat([cos_full[..., :Dr // 2]] * 2, dim=-1)  # (B, L, Dr)
gap_Dh = (cos_sliced - cos_hf).abs().max().item()
print(f"full RoPE's first Dr/2 frequencies: max |cos - HF's| = {gap_Dh:.2f}")
assert gap_Dh > 0.5  # printed above: the denominator of the exponent is Dr

# %%
# Try it: run the layer with full RoPE, or with none. Does it still match?
# ------------------------------------------------------------------------
# Give ``neox_attention`` the tables of full RoPE (``Dr = Dh``), then tables of width 0
# (nothing turns), and compare with GPT-NeoX's output.

# %%
# Neither does: the same layer with full RoPE or with no RoPE is another function.
out_full = neox_attention(x, W_neox, cos_full, sin_full, Nh, causal)  # Dr = Dh
gap_full = (out_full - ref).abs().max().item()
cos_none = torch.ones(B, L, 0, device=device)  # Dr = 0: nothing turns
out_none = neox_attention(x, W_neox, cos_none, cos_none, Nh, causal)  # Dr = 0
gap_none = (out_none - ref).abs().max().item()
print(f"max |output - HF's|: with full RoPE {gap_full:.2f}, without RoPE "
      f"{gap_none:.2f}")
assert gap_full > 0.1 and gap_none > 0.1  # printed above

# %%
# References
# ----------
# RoPE: :footcite:t:`Su2021`. Partial RoPE: GPT-NeoX-20B, :footcite:t:`Black2022`;
# Phi-1, :footcite:t:`Gunasekar2023`.
#
# .. footbibliography::
