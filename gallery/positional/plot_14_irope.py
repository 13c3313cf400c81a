"""
iRoPE: chunked RoPE layers, NoPE layers and attention temperature
=================================================================

In Llama 4, three layers of four rotate (RoPE) within chunks of tokens; every fourth
(NoPE) attends to the whole past, its queries sharpened as the position grows. We write
both from scratch, equal to Hugging Face's ``Llama4TextAttention`` and its masks.

**You will learn**

- which layers of Llama 4 use RoPE, as Hugging Face's config builds it
- how the chunked causal mask differs from the causal mask and from a sliding window
- how NoPE layers' query temperature :math:`1 + 0.1 \\ln(1 + \\lfloor (p+1)/8192
  \\rfloor)` grows with ``p``
- what SmolLM3's NoPE layers share with Llama 4's, and where they differ

**Prerequisites:** :doc:`/generated/positional/plot_07_nope_causal` (NoPE),
:doc:`/generated/positional/plot_04_rope` (RoPE as complex numbers),
:doc:`/generated/transformer/plot_12_sliding_window_sinks` (local masks),
:doc:`/generated/transformer/plot_10_gqa_mqa` (shared key/value heads).

.. index:: ! iRoPE
.. index:: ! chunked attention
.. index:: ! attention temperature
.. index:: Llama 4
.. index:: SmolLM3
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every module is built from a small random config; nothing is
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
from transformers import AttentionInterface, Llama4TextConfig, SmolLM3Config
from transformers.masking_utils import create_causal_mask, create_chunked_causal_mask
from transformers.models.llama4 import modeling_llama4
from transformers.models.smollm3.modeling_smollm3 import SmolLM3Attention

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The blocks this page shares with others, copied verbatim: the causal mask (from
# :doc:`/generated/transformer/plot_04_causal_attention`) and RoPE on adjacent pairs
# as complex numbers, the form Llama 4 uses (from
# :doc:`/generated/positional/plot_04_rope`).


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# Copied from positional/plot_04_rope.py: rope_complex
def rope_complex(x, pos, base=10000.0):
    """Adjacent pairs as complex numbers times exp(1j pos inv_freq).

    x (..., L, Dh), pos (L,) -> (..., L, Dh)."""
    Dh = x.shape[-1]
    inv_freq = rope_inv_freq(Dh, base, x.dtype).to(x.device)  # (Dh/2,)
    angles = pos[:, None].to(x.dtype) * inv_freq[None, :]  # (L, Dh/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # (L, Dh/2), |.| = 1
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2))  # (..., L, Dh/2)
    return torch.view_as_real(z * rotation).flatten(-2)  # (..., L, Dh/2, 2) -> Dh


# %%
# The idea
# --------
# A RoPE layer meets unseen angles beyond its training length; a
# :doc:`NoPE layer </generated/positional/plot_07_nope_causal>` has none. Llama 4's
# *interleaved* RoPE (iRoPE) :footcite:p:`Meta2025` rotates in layer ``l`` when
# :math:`(l + 1) \bmod 4 \neq 0`, within chunks of :math:`L_c` tokens (8192); a NoPE
# layer attends to the whole past and multiplies the query at position ``p`` by
# :math:`\tau(p)` (after Scalable-Softmax :footcite:p:`Nakanishi2025`):
#
# .. math::
#
#    \mathrm{keep}(i, j) &= [\, j \le i \,] \wedge
#    \big[\, \lfloor i / L_c \rfloor = \lfloor j / L_c \rfloor \,\big],
#
#    \tau(p) &= 1 + s \ln\!\Big(1 + \Big\lfloor \frac{p + 1}{F} \Big\rfloor\Big),
#
# with :math:`s` = ``attn_scale`` = 0.1, :math:`F` = ``floor_scale`` = 8192: 1 for the
# first 8191 positions, then a logarithmic staircase that sharpens a softmax spread
# over more keys. The masks at 16 tokens with :math:`L_c = 4`, and :math:`\tau`:
Lf, Lcf = 16, 4  # tokens, tokens per chunk
i_f, j_f = torch.arange(Lf)[:, None], torch.arange(Lf)[None, :]
causal_f = j_f <= i_f  # (L, L)
chunked_f = causal_f & (i_f // Lcf == j_f // Lcf)  # (L, L)
p_f = torch.arange(0, 131072, 64)  # positions up to 128k
tau_f = 1 + 0.1 * torch.log1p(torch.floor((p_f + 1) / 8192))

fig, axs = plt.subplots(1, 3, figsize=(9.5, 2.9), layout="none",
                        gridspec_kw={"width_ratios": [1, 1, 1.9]})
fig.subplots_adjust(left=0.04, right=0.99, bottom=0.17, top=0.78, wspace=0.3)
for ax, keep, name in [(axs[0], causal_f, "NoPE layers: causal"),
                       (axs[1], chunked_f, f"RoPE layers: chunks of {Lcf}")]:
    ax.imshow(keep, cmap="Blues", vmin=0, vmax=1.3)
    ax.set(title=name, xlabel="key j", ylabel="query i", xticks=[], yticks=[])
axs[2].plot(p_f / 1024, tau_f, color="C3", drawstyle="steps-post")
marks_f = 1 + 0.1 * torch.log1p(torch.floor(torch.tensor([8192, 65536]) / 8192))
for p_mark, t in zip((8191, 65535), marks_f.tolist()):  # checked below
    axs[2].plot(p_mark / 1024, t, "o", color="C3")
    axs[2].annotate(f"p = {p_mark}: {t:.4f}", (p_mark / 1024, t), xytext=(6, -12),
                    textcoords="offset points", fontsize=8)
axs[2].set(xlabel="query position p (thousands)", ylabel=r"$\tau(p)$",
           title="NoPE layers: query temperature")
fig.suptitle("Three layers of four see only their chunk; every fourth sees the whole "
             "past,\nits queries sharpened by a temperature that steps up every 8192 "
             "tokens")
plt.show()

# %%
# From scratch: which layers rotate
# ---------------------------------
# Hugging Face's ``no_rope_layers``: one flag per layer, and 1 means *uses RoPE*.
def rope_layers(n_layers, interval=4):
    """Flag per layer, as Hugging Face's no_rope_layers: 1 = RoPE, 0 = NoPE."""
    return [int((layer + 1) % interval != 0) for layer in range(n_layers)]


# %%
# Llama 4 Scout's text model (``Llama4TextConfig``'s defaults): our flags are its own.
scout = Llama4TextConfig()
flags = rope_layers(48)
nope_scout = [layer for layer, f in enumerate(flags) if f == 0]
print(f"Scout: {sum(flags)} RoPE layers of {len(flags)}; NoPE layers {nope_scout}")
assert flags == scout.no_rope_layers and nope_scout == list(range(3, 48, 4))

# %%
# From scratch: chunked mask, temperature, layer
# -----------------------------------------------
# The causal mask cut at every multiple of ``Lc``; the temperature, in float32.
def chunked_mask(L, Lc, device=None):
    """(L, L) bool: query i keeps key j <= i of its own chunk of Lc tokens."""
    i = torch.arange(L, device=device)[:, None]  # (L, 1)
    j = torch.arange(L, device=device)[None, :]  # (1, L)
    return causal_mask(L, device) & (i // Lc == j // Lc)


def attn_temperature(pos, attn_scale=0.1, floor_scale=8192):
    """pos (L,) integer positions -> (L,) float32 query scales 1 + s ln(1 + floor)."""
    steps = torch.floor((pos.float() + 1.0) / floor_scale)  # (L,)
    return 1.0 + attn_scale * torch.log1p(steps)


# %%
# A layer of either kind (grouped-query). RoPE: rotate ``q``, ``k``, divide each head
# by its root mean square (``Llama4TextL2Norm``), attend within the chunk. NoPE: scale
# each query by :math:`\tau(p)`, attend causally.
def rms_unit(x, eps):
    """x (..., Dh) / its root mean square over the last dim; no weight."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


class Llama4Attention(nn.Module):
    """Llama 4's attention: RoPE, qk norm and chunks, or NoPE and a temperature."""

    def __init__(self, D, Nh, Nkv, Dh, use_rope, Lc, base, eps, attn_scale,
                 floor_scale, temperature=True):
        super().__init__()
        self.Nh, self.Nkv, self.Dh, self.use_rope, self.Lc = Nh, Nkv, Dh, use_rope, Lc
        self.base, self.eps, self.temperature = base, eps, temperature
        self.attn_scale, self.floor_scale = attn_scale, floor_scale  # tau's constants
        self.q_proj = nn.Linear(D, Nh * Dh, bias=False)
        self.k_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.v_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.o_proj = nn.Linear(Nh * Dh, D, bias=False)

    def forward(self, x):  # x (B, L, D) -> out (B, L, D), weights (B, Nh, L, L)
        B, L, _ = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        q = self.q_proj(x).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.k_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        v = self.v_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        pos = torch.arange(L, device=x.device)  # (L,)
        if self.use_rope:
            q, k = rope_complex(q, pos, self.base), rope_complex(k, pos, self.base)
            q, k = rms_unit(q, self.eps), rms_unit(k, self.eps)
            keep = chunked_mask(L, self.Lc, x.device)  # (L, L)
        else:
            if self.temperature:
                tau = attn_temperature(pos, self.attn_scale, self.floor_scale)  # (L,)
                q = q * tau[:, None]  # query l scaled by tau(l)
            keep = causal_mask(L, x.device)  # (L, L)
        k, v = (t.repeat_interleave(Nh // Nkv, dim=1) for t in (k, v))  # (B, Nh, L, Dh)
        logits = q @ k.mT / math.sqrt(Dh)  # (B, Nh, L, L)
        weights = logits.masked_fill(~keep, float("-inf")).softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, L, Nh * Dh)  # (B, L, Nh Dh)
        return self.o_proj(out), weights


# %%
# Proof: Hugging Face's masks, query scale and attention layers, recorded
# -----------------------------------------------------------------------
# ``create_chunked_causal_mask`` and ``create_causal_mask`` (``masking_utils``) build
# what ``Llama4TextModel`` hands its chunked and full layers; for eager attention, 0
# where a key is kept and the float32 minimum elsewhere (``allow_is_causal_skip=False``
# keeps them from answering ``None`` where the mask is plain causal). Ten tokens in
# chunks of 4 (three chunks, the last one short), and one whole chunk.
#
# ``Llama4TextAttention`` computes its temperature inside ``forward``, from the
# cache's length (``past_key_values.get_seq_length``); it asks the cache nothing else
# but to append the new keys. A stand-in that answers length ``p`` puts the query at
# position ``p``, without 65535 cached keys. A registered attention function records
# the query it is handed;
# divided by the plain projection ``q_proj(x)``, that is the scale Hugging Face
# applied, at Scout's ``attn_scale`` and ``floor_scale`` (the defaults).
def query_recorder(seen):
    """An attention function: eager attention that keeps its query in seen."""
    def record_query(module, query, key, value, attention_mask, **kwargs):
        seen["query"] = query  # (B, Nh, L, Dh): after RoPE or the temperature
        return modeling_llama4.eager_attention_forward(module, query, key, value,
                                                       attention_mask, **kwargs)
    return record_query


class CacheOfLength:
    """Stands in for a cache that holds p tokens: their keys are never read here."""

    def __init__(self, p):
        self.p = p

    def get_seq_length(self, layer_idx=0):
        return self.p

    def update(self, key, value, layer_idx):
        return key, value  # (B, Nkv, L, Dh) each: only the new tokens


def attention_recorder(records):
    """A forward hook: appends (input, mask, output, weights) of an attention."""
    def record(module, args, kwargs, output):
        records.append((kwargs["hidden_states"], kwargs["attention_mask"], *output))
    return record


# %%
tiny = dict(vocab_size=64, hidden_size=32, intermediate_size=16,
            intermediate_size_mlp=16, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, num_local_experts=2, rms_norm_eps=1e-3)
hf_masks = {}
for L_check in (10, 4):
    cfg_mask = Llama4TextConfig(**tiny, attention_chunk_size=4,
                                attn_implementation="eager")
    embeds = torch.zeros(1, L_check, 32, device=device)  # only its shape matters
    kw = dict(config=cfg_mask, inputs_embeds=embeds, attention_mask=None,
              past_key_values=None,
              position_ids=torch.arange(L_check, device=device)[None])
    hf_masks[L_check] = (create_chunked_causal_mask(**kw, allow_is_causal_skip=False),
                         create_causal_mask(**kw, allow_is_causal_skip=False))

seen = {}
AttentionInterface.register("record_query", query_recorder(seen))
cfg_temp = Llama4TextConfig(**tiny, attn_implementation="record_query")
hf_nope = modeling_llama4.Llama4TextAttention(cfg_temp, layer_idx=3).to(device)
assert hf_nope.use_rope == 0 and cfg_temp.floor_scale == 8192
gen = torch.Generator(device=device).manual_seed(1)
hf_scale = {}
with torch.no_grad():
    for p in (8190, 8191, 65535):
        x1 = torch.randn(1, 1, 32, device=device, generator=gen)  # (B, 1, D)
        hf_nope(x1, position_embeddings=None, attention_mask=None,
                past_key_values=CacheOfLength(p))
        plain = hf_nope.q_proj(x1).view(1, 1, 4, 8).transpose(1, 2)  # (B, Nh, 1, Dh)
        hf_scale[p] = (seen["query"] / plain).flatten()  # (Nh Dh,)

# Ours are both masks; on a single chunk the chunked mask is the causal one; query
# ``i`` keeps ``i mod Lc + 1`` keys.
for L_check, (hf_chunked, hf_causal) in hf_masks.items():
    ours = chunked_mask(L_check, 4, device)
    print(f"L = {L_check}: chunked mask == HF's: "
          f"{torch.equal(ours, hf_chunked[0, 0] == 0)}, kept pairs {int(ours.sum())} "
          f"of the causal mask's {int(causal_mask(L_check).sum())}")
    assert torch.equal(ours, hf_chunked[0, 0] == 0)
    assert torch.equal(causal_mask(L_check, device), hf_causal[0, 0] == 0)
assert torch.equal(chunked_mask(4, 4), causal_mask(4))  # one chunk: the causal mask
assert torch.equal(chunked_mask(10, 4).sum(dim=-1), torch.arange(10) % 4 + 1)

# %%
# A random ``Llama4TextModel``: four layers (three RoPE, one NoPE), chunks of 4 tokens
# over 10, a temperature that steps every 4 positions with ``attn_scale = 0.5`` so
# that it changes within 10 tokens (Scout's constants would leave it at 1 there), base
# 50, ``rms_norm_eps`` 1e-3 (so the qk norm's eps shows), eager attention. Every
# parameter, MoE ones included, moves off its initialization. A hook records each
# layer's attention input, the mask ``Llama4TextModel`` built for it, and its output
# and weights.
cfg = Llama4TextConfig(**tiny, attention_chunk_size=4, floor_scale=4, attn_scale=0.5,
                       rope_parameters={"rope_type": "default", "rope_theta": 50.0},
                       attn_implementation="eager")
hf_model = modeling_llama4.Llama4TextModel(cfg).to(device).eval()
with torch.no_grad():
    for prm in hf_model.parameters():
        prm.copy_(torch.randn(prm.shape, device=device, generator=gen) / 4)
records = []
hooks = [layer.self_attn.register_forward_hook(attention_recorder(records),
                                               with_kwargs=True)
         for layer in hf_model.layers]
L_hf = 10
ids = torch.randint(1, 64, (2, L_hf), device=device, generator=gen)  # (B, L)
with torch.no_grad():
    hf_model(ids)
for h in hooks:
    h.remove()
hf_attn = [layer.self_attn for layer in hf_model.layers]
assert [a.use_rope for a in hf_attn] == rope_layers(4) == [1, 1, 1, 0]
assert [hasattr(a, "qk_norm") for a in hf_attn] == [True, True, True, False]
assert cfg.rms_norm_eps == hf_attn[0].qk_norm.eps == 1e-3
for layer_idx, (_, mask_hf, _, _) in enumerate(records):  # the mask of each kind
    rope_here = cfg.no_rope_layers[layer_idx]
    keep = chunked_mask(L_hf, 4, device) if rope_here else causal_mask(L_hf, device)
    assert torch.equal(mask_hf[0, 0] == 0, keep)

# %%
# Scout's config is ``transformers``' ``Llama4TextConfig`` defaults (its docstring's
# checkpoint, ``meta-llama/Llama-4-Scout-17B-16E``): each RoPE layer chunked, each NoPE
# layer full. A chunked layer caches at most ``Lc`` keys, so at 128k tokens Scout's
# layers cache :measured:`cache_share:.1%` of the keys full attention would.
SCOUT = dict(num_hidden_layers=48, no_rope_layer_interval=4, attention_chunk_size=8192,
             attn_scale=0.1, floor_scale=8192, use_qk_norm=True, head_dim=128)
assert {k: getattr(scout, k) for k in SCOUT} == SCOUT
assert scout.layer_types == ["chunked_attention" if f else "full_attention"
                             for f in flags]
cached = [min(131072, 8192) if f else 131072 for f in flags]  # keys per layer at 128k
cache_share = sum(cached) / (48 * 131072)
print(f"keys cached at 131072 tokens: {cache_share:.4f} of full attention's")
assert cache_share == (36 * 8192 + 12 * 131072) / (48 * 131072)

# %%
# Equal to Hugging Face's Llama 4
# -------------------------------
# Each attention layer of a random ``Llama4TextModel`` loads into ours, output equal.
ours_layers = []
for layer_idx, (h_in, mask_hf, out_hf, w_hf) in enumerate(records):
    use_rope = cfg.no_rope_layers[layer_idx]
    ours_attn = Llama4Attention(32, 4, 2, 8, use_rope, Lc=4, base=50.0, eps=1e-3,
                                attn_scale=0.5, floor_scale=4).to(device)
    ours_attn.load_state_dict(hf_attn[layer_idx].state_dict(), strict=True)
    ours_layers.append(ours_attn)
    with torch.no_grad():
        out, w = ours_attn(h_in)
    print(f"layer {layer_idx} ({'RoPE' if use_rope else 'NoPE'}): max |ours - HF| = "
          f"{(out - out_hf).abs().max():.1e}, weights {(w - w_hf).abs().max():.1e}")
    torch.testing.assert_close(out, out_hf)
    torch.testing.assert_close(w, w_hf)

# %%
# Proof: tau's steps; the qk norm is an RMS norm, and commutes with RoPE
# ----------------------------------------------------------------------
# Our temperature is the scale ``Llama4TextAttention`` gives its queries: at Scout's
# constants 1 up to position 8190, then 1.0693 and 1.2197, the figure's two marks.
tau = attn_temperature(torch.tensor([8190, 8191, 65535], device=device))  # (3,)
for p, t in zip((8190, 8191, 65535), tau.tolist()):
    print(f"p = {p:5d}: tau = {t:.4f}, Llama4TextAttention's scale "
          f"{hf_scale[p].min():.4f} to {hf_scale[p].max():.4f}")
    torch.testing.assert_close(hf_scale[p], torch.full_like(hf_scale[p], t))
tau_8190, tau_8191, tau_65535 = tau.tolist()
assert tau_8190 == 1.0 and round(tau_8191, 4) == 1.0693
assert round(tau_65535, 4) == 1.2197
assert abs(tau_65535 - (1 + 0.1 * math.log(9))) < 1e-6  # 1 + s ln 9: float32's eps
torch.testing.assert_close(marks_f.to(device), tau[1:])  # the figure's two marks

# %%
# After ``rms_unit`` every head of ``q`` has norm :math:`\sqrt{D_h}` (the mean square
# is 1, less the eps), not 1: "L2 norm" names the norm it divides by, not its result.
# A rotation keeps each pair's length, hence the mean square: normalising before or
# after RoPE gives the same vector, so Hugging Face's order (RoPE first) is one choice
# of two equal ones.
q_try = torch.randn(2, 4, 10, 8, device=device, generator=gen)  # (B, Nh, L, Dh)
pos10 = torch.arange(10, device=device)
after = rms_unit(rope_complex(q_try, pos10, 50.0), 1e-3)  # (B, Nh, L, Dh)
before = rope_complex(rms_unit(q_try, 1e-3), pos10, 50.0)
norms = after.norm(dim=-1)  # (B, Nh, L)
print(f"qk norm: head norms {norms.min():.3f} to {norms.max():.3f}, sqrt(Dh) = "
      f"{math.sqrt(8):.3f}")
print(f"max |norm then RoPE - RoPE then norm| = {(after - before).abs().max():.1e}")
torch.testing.assert_close(after, before)
assert norms.max() < math.sqrt(8) and norms.min() > 0.99 * math.sqrt(8)

# %%
# SmolLM3: the same flags, plain NoPE layers
# ------------------------------------------
# SmolLM3 :footcite:p:`HuggingFace2025` shares the flags (:measured:`n_rope_smol`
# RoPE layers of 36), not chunks, temperature or qk norm; its optional window goes to
# its *NoPE* layers. Its NoPE layer is ours with the temperature off (proved below).

# %%
# Proof: SmolLM3's NoPE layer is ours without the temperature
# -----------------------------------------------------------
# ``SmolLM3Config``'s flags are ours, and its window goes to the NoPE layers. A random
# ``SmolLM3Attention`` at layer 3 (NoPE: no rotary, no qk norm), every weight off its
# initialization, eager attention with the additive causal mask ``SmolLM3Model`` would
# build, loads strictly into ours with ``temperature=False``.
smol = SmolLM3Config()
n_rope_smol = sum(smol.no_rope_layers)
print(f"SmolLM3: {n_rope_smol} RoPE layers of {smol.num_hidden_layers}, flags == "
      f"rope_layers: {smol.no_rope_layers == rope_layers(smol.num_hidden_layers)}")
assert smol.no_rope_layers == rope_layers(36) and n_rope_smol == 27
smol_sw = SmolLM3Config(num_hidden_layers=8, use_sliding_window=True, sliding_window=4)
windowed = [layer for layer, t in enumerate(smol_sw.layer_types)
            if t == "sliding_attention"]
print(f"SmolLM3 with use_sliding_window, 8 layers: windowed layers {windowed}")
assert windowed == [layer for layer, f in enumerate(rope_layers(8)) if f == 0]
smol_cfg = SmolLM3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         attn_implementation="eager")
assert smol_cfg._attn_implementation == "eager"
hf_smol = SmolLM3Attention(smol_cfg, layer_idx=3).to(device)
assert hf_smol.use_rope == 0 and not hasattr(hf_smol, "qk_norm")
with torch.no_grad():
    for prm in hf_smol.parameters():
        prm.copy_(torch.randn(prm.shape, device=device, generator=gen) / 4)
h_smol = torch.randn(2, L_hf, 32, device=device, generator=gen)  # (B, L, D)
smol_mask = create_causal_mask(config=smol_cfg, inputs_embeds=h_smol,
                               attention_mask=None, past_key_values=None,
                               position_ids=torch.arange(L_hf, device=device)[None],
                               allow_is_causal_skip=False)  # (1, 1, L, L), additive
ours_smol = Llama4Attention(32, 4, 2, 8, 0, Lc=4, base=50.0, eps=smol_cfg.rms_norm_eps,
                            attn_scale=0.5, floor_scale=4, temperature=False)
ours_smol.to(device).load_state_dict(hf_smol.state_dict(), strict=True)
with torch.no_grad():
    out_smol, _ = hf_smol(h_smol, position_embeddings=None,
                          attention_mask=smol_mask)
    mine_smol, _ = ours_smol(h_smol)
print(f"SmolLM3 NoPE layer: max |ours, no temperature - SmolLM3Attention| = "
      f"{(mine_smol - out_smol).abs().max():.1e}")
torch.testing.assert_close(mine_smol, out_smol)

# %%
# Try it: is the chunked mask a sliding window of Lc tokens?
# ----------------------------------------------------------
# Both keep at most ``Lc`` keys per query. Compare masks, and three layers' reach.

# %%
# They differ: the window slides, the chunk restarts. The first query of a chunk keeps
# only itself; a window keeps its ``Lc - 1`` predecessors too. Through stacked layers a
# window's reach grows, a chunk's never does: no token ever reads across a chunk
# boundary in a RoPE layer, which is why every fourth layer (NoPE, global) has to.
L_try, Lc_try = 16, 4
i_t = torch.arange(L_try)[:, None]  # (L, 1)
window = causal_mask(L_try) & (torch.arange(L_try)[None, :] > i_t - Lc_try)  # (L, L)
chunk = chunked_mask(L_try, Lc_try)
differ = int((window != chunk).sum())
print(f"L = {L_try}, Lc = {Lc_try}: pairs kept by the window only {differ}, by the "
      f"chunk only {int((chunk & ~window).sum())}")
print(f"mean keys per query: window {window.sum(-1).float().mean():.2f}, chunk "
      f"{chunk.sum(-1).float().mean():.2f}")
assert not (chunk & ~window).any()  # the chunk is inside the window
# each chunk after the first: its query r keeps Lc - 1 - r keys of the chunk before
assert differ == (L_try // Lc_try - 1) * Lc_try * (Lc_try - 1) // 2

reach_w, reach_c = window, chunk  # keys reaching each query through one layer
for _ in range(2):  # through two more: a path through one more layer each time
    reach_w = (reach_w.float() @ window.float()) > 0
    reach_c = (reach_c.float() @ chunk.float()) > 0
print(f"three layers reach back: window {int((reach_w.sum(-1) - 1).max())} "
      f"tokens, chunk {int((reach_c.sum(-1) - 1).max())}")
assert torch.equal(reach_c, chunk)  # the chunk never grows
assert int((reach_w.sum(-1) - 1).max()) == 3 * (Lc_try - 1)

# %%
# Try it: turn the temperature off. Which queries change?
# -------------------------------------------------------
# Run the random model's NoPE layer 3 with ``temperature=False``, query by query.

# %%
# The first three queries agree (:math:`\tau = 1` while ``p + 1 < floor_scale``, 4
# here); from position 3 on the scaled queries give other outputs, so the check above
# would fail without the temperature.
ours_cold = ours_layers[3]
ours_cold.temperature = False
with torch.no_grad():
    out_cold, _ = ours_cold(records[3][0])
ours_cold.temperature = True
gap_rows = (out_cold - records[3][2]).abs().amax(dim=(0, 2))  # (L,)
print("max |no temperature - HF| per query:\n"
      + " ".join(f"{g:.0e}" for g in gap_rows.tolist()))
assert (gap_rows[:3] < 1e-6).all() and (gap_rows[3:] > 1e-3).all()

# %%
# Try it: write ``no_rope_layers=[]``. Which layers rotate?
# ---------------------------------------------------------
# An empty list looks like "no flags"; ask both configs.

# %%
# ``Llama4TextConfig`` reads an empty list as unset (``if self.no_rope_layers``) and
# builds the every-fourth pattern; ``SmolLM3Config`` only fills ``None`` in and then
# fails indexing the empty list.
empty = Llama4TextConfig(no_rope_layers=[], num_hidden_layers=8).no_rope_layers
print(f"Llama4TextConfig(no_rope_layers=[]): {empty}")
assert empty == rope_layers(8)
try:
    SmolLM3Config(no_rope_layers=[], num_hidden_layers=8)
except IndexError:
    print("SmolLM3Config(no_rope_layers=[]): IndexError")
else:
    raise AssertionError("SmolLM3Config accepted an empty no_rope_layers")

# %%
# References
# ----------
# Llama 4 :footcite:p:`Meta2025`; NoPE :footcite:p:`Kazemnejad2023`; Scalable-Softmax
# :footcite:p:`Nakanishi2025`; windowed RoPE beside global NoPE :footcite:p:`Yang2025b`;
# SmolLM3 :footcite:p:`HuggingFace2025`; RoPE :footcite:p:`Su2021`.
#
# .. footbibliography::
