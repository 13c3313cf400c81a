"""
A Llama decoder layer from scratch
==================================

Llama's decoder layer is GPT-2's pre-norm block with three pieces exchanged: RMSNorm
for LayerNorm, rotary position embeddings (in the rotate-half layout) on queries and
keys, and a SwiGLU MLP. Grouped-query attention (Ainslie et al., 2023) came later, in
Llama 2's 34B and 70B models and in every Llama 3 model (LLaMA 1 gives each query head
its own keys and values); Hugging Face's Llama takes either, and this page's model uses
it. This page writes each piece from scratch and proves it equal to its counterpart in
Hugging Face's Llama, then the whole layer equal to ``LlamaDecoderLayer`` from a random
``LlamaConfig`` with the map of every parameter name, then two layers with the
embedding, the final norm and the LM head equal to ``LlamaForCausalLM``'s hidden states
and logits. The positions are uneven and ``rope_theta`` is not the default, so that a
RoPE with the wrong base, the wrong pairing or the wrong positions fails, and the
inputs are small enough for RMSNorm's ``eps`` to matter.
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
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The reference: a random two-layer Llama
# ---------------------------------------
# ``D = 64`` split into ``Nh = 4`` query heads of ``Dh = 16`` that share ``Nkv = 2``
# key/value heads, an MLP of width ``Dff = 128``, a vocabulary of 100 tokens. Two
# settings are not the defaults, on purpose: ``rope_theta = 1000`` (Llama 2 uses
# 10000, Llama 3 500000), so that a RoPE with a hard-coded base fails, and
# ``rms_norm_eps = 1e-3``, which is 10 % of the mean square of this model's embeddings
# (weights of standard deviation about 0.1), so that dropping ``eps`` fails. Eager
# attention is the reference path. A fresh model has RMSNorm weights of one, which
# would hide a norm weight loaded into the wrong place, so every parameter is moved
# off its initialization.
V, D, Nh, Nkv, Dff = 100, 64, 4, 2, 128
Dh = D // Nh
THETA, EPS = 1000.0, 1e-3
cfg = LlamaConfig(
    vocab_size=V, hidden_size=D, num_attention_heads=Nh, num_key_value_heads=Nkv,
    intermediate_size=Dff, num_hidden_layers=2, rms_norm_eps=EPS,
    rope_parameters={"rope_type": "default", "rope_theta": THETA},
    attn_implementation="eager",
)
model = LlamaForCausalLM(cfg).to(device).eval()
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
assert model.config._attn_implementation == "eager"
print(f"LlamaForCausalLM: {sum(p.numel() for p in model.parameters())} parameters, "
      f"tie_word_embeddings={cfg.tie_word_embeddings}")

# The inputs. Row 0 has positions 0 .. L-1, row 1 every third position from 2: the
# relative distances differ, so positions that were ignored or mis-scaled show.
B, L = 2, 12
ids = torch.randint(3, V, (B, L), device=device)  # (B, L), no special tokens
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
x = 0.05 * torch.randn(B, L, D, device=device)  # (B, L, D): mean square 2.5e-3
print("positions, row 0:", pos[0].tolist())
print("positions, row 1:", pos[1].tolist())

# %%
# RMSNorm
# -------
# RMSNorm (Zhang and Sennrich, 2019) divides each token by the root mean square of
# its ``D`` features, without subtracting the mean, and scales by a learned weight:
# ``y = w * x / sqrt(mean(x**2) + eps)``. ``LlamaRMSNorm`` computes this in float32
# and multiplies by the weight after casting back to the input's dtype, which only
# matters in 16 bits (not run here). At this input's mean square, 2.5e-3, an ``eps``
# of 1e-3 shrinks the output by about 15 % (``1 - 1/sqrt(1.4)``).
import math

from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, D, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D)
        x32 = x.float()
        rms = torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x32 / rms).to(x.dtype)


hf_layer = model.model.layers[0]
norm = RMSNorm(D, EPS).to(device)
norm.load_state_dict(hf_layer.input_layernorm.state_dict())
ref = hf_layer.input_layernorm(x)
norm.eps = 0.0
gap_eps = (norm(x) - ref).abs().max().item()
norm.eps = EPS
print(f"max |ours - LlamaRMSNorm| = {(norm(x) - ref).abs().max():.1e}; "
      f"without eps: {gap_eps:.2f}")
torch.testing.assert_close(norm(x), ref)
assert gap_eps > 0.1  # visible: eps is 40 % of the mean square here

# %%
# Rotary embeddings, rotate-half layout
# -------------------------------------
# RoPE (Su et al., 2021) turns 2-D planes of each query and key by the angle
# ``p * theta_i``, ``theta_i = rope_theta ** (-2i / Dh)``, for the token's position
# ``p``. Hugging
# Face's Llama pairs channel ``i`` with channel ``i + Dh/2`` (rotate half):
# ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x1, x2) = (-x2, x1)`` and the
# angles repeated on both halves. GPT-J and RoFormer pair adjacent channels
# ``(2i, 2i+1)`` instead; the two layouts are the same rotation up to a permutation of
# the channels (see :doc:`/generated/positional/plot_04_rope`), so weights trained for
# one give another model under the other. Our ``cos`` and ``sin`` come from
# ``rope_theta`` and the position ids, and are checked against what
# ``LlamaRotaryEmbedding`` hands every layer.


def rope_cos_sin(pos, Dh, theta):
    """pos (B, L) -> cos, sin (B, L, Dh): angle p * theta**(-2i/Dh) at i, i + Dh/2."""
    two_i = torch.arange(0, Dh, 2, device=pos.device)  # 0, 2, .., Dh - 2
    angles = pos[..., None].float() * theta ** (-two_i / Dh)  # (B, L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (B, L, Dh)
    return angles.cos(), angles.sin()


def rope(x, cos, sin):
    """Rotate-half RoPE. x (B, N, L, Dh), cos and sin (B, L, Dh) -> (B, N, L, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # channel i pairs with channel i + Dh/2
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


def rope_adjacent(x, cos, sin):
    """GPT-J / RoFormer pairing (2i, 2i+1), same angles: the wrong layout for Llama."""
    c, s = cos[:, None, :, : Dh // 2], sin[:, None, :, : Dh // 2]  # (B, 1, L, Dh/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


cos, sin = rope_cos_sin(pos, Dh, THETA)  # (B, L, Dh) each
cos_hf, sin_hf = model.model.rotary_emb(x, pos)
print(f"cos, sin {tuple(cos.shape)}: max |ours - LlamaRotaryEmbedding| = "
      f"{(cos - cos_hf).abs().max():.1e}, {(sin - sin_hf).abs().max():.1e}")
torch.testing.assert_close(cos, cos_hf)
torch.testing.assert_close(sin, sin_hf)
cos_10k, _ = rope_cos_sin(pos, Dh, 10000.0)
gap_theta = (cos_10k - cos_hf).abs().max().item()
print(f"with rope_theta = 10000: max |cos - HF's| = {gap_theta:.2f}")
assert gap_theta > 0.1  # the base is visible at these positions

# The two layouts are one rotation up to a permutation of the channels: listing the
# even channels first, then the odd ones, turns adjacent pairs (2i, 2i+1) into halves
# (i, i + Dh/2). Permute, rotate half, permute back: GPT-J's RoPE.
halves = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)]).to(device)
t = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh)
via_halves = torch.empty_like(t)
via_halves[..., halves] = rope(t[..., halves], cos, sin)
gap_layout = (rope_adjacent(t, cos, sin) - rope(t, cos, sin)).abs().max().item()
print(f"adjacent pairs vs permuted rotate-half: max |diff| = "
      f"{(rope_adjacent(t, cos, sin) - via_halves).abs().max():.1e}; "
      f"vs rotate-half itself: {gap_layout:.2f}")
torch.testing.assert_close(rope_adjacent(t, cos, sin), via_halves)
assert gap_layout > 0.1  # the same weights give another model under the other layout

# %%
# Grouped-query attention with RoPE
# ---------------------------------
# Four projections without bias: ``q`` to ``Nh`` heads, ``k`` and ``v`` to ``Nkv``
# heads, ``o`` back to ``D``. RoPE turns ``q`` and ``k`` (never ``v``); then query head
# ``h`` attends, causally, to key/value head ``h // (Nh / Nkv)``, computed as on
# :doc:`/generated/transformer/plot_10_gqa_mqa` without copying ``k`` or ``v``. The
# eager ``LlamaAttention`` adds the mask it is given and masks nothing by itself, so
# it gets an additive causal mask, ``(1, 1, L, L)``.
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
causal = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))[None, None]


class Attention(nn.Module):
    def __init__(self, D, Nh, Nkv):
        super().__init__()
        self.Nh, self.Nkv, self.rope = Nh, Nkv, rope
        self.q = nn.Linear(D, Nh * Dh, bias=False)
        self.k = nn.Linear(D, Nkv * Dh, bias=False)
        self.v = nn.Linear(D, Nkv * Dh, bias=False)
        self.o = nn.Linear(Nh * Dh, D, bias=False)

    def forward(self, x, cos, sin):  # x (B, L, D) -> (B, L, D)
        B, L, D = x.shape
        Nh, Nkv, G = self.Nh, self.Nkv, self.Nh // self.Nkv
        q = self.q(x).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.k(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        v = self.v(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        qg = q.reshape(B, Nkv, G * L, Dh)  # the G query heads of a group, stacked
        logits = (qg @ k.mT).view(B, Nkv, G, L, L) / math.sqrt(Dh)  # k.mT: (.., Dh, L)
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # future
        weights = logits.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (weights.view(B, Nkv, G * L, L) @ v).view(B, Nh, L, Dh)  # (B, Nh, L, Dh)
        out = self.o(y.transpose(1, 2).reshape(B, L, Nh * Dh))  # (B, L, D)
        return out, weights.view(B, Nh, L, L)  # head h = j * G + g, as in q


attn = Attention(D, Nh, Nkv).to(device)
attn.load_state_dict({f"{n}.weight": getattr(hf_layer.self_attn, f"{n}_proj").weight
                      for n in "qkvo"})
h = norm(x)  # (B, L, D): what the layer's attention sees
out, weights = attn(h, cos, sin)  # (B, L, D), (B, Nh, L, L)
ref, weights_hf = hf_layer.self_attn(h, position_embeddings=(cos_hf, sin_hf),
                                     attention_mask=causal)
print(f"max |ours - LlamaAttention| = {(out - ref).abs().max():.1e}, attention weights "
      f"{(weights - weights_hf).abs().max():.1e}")
torch.testing.assert_close(out, ref)
torch.testing.assert_close(weights, weights_hf)
# The future gets weight exactly 0 (exp(-inf)); a finite mask would leave e.g. e^-100.
print(f"largest weight on a future key: ours {weights[:, :, future].max():.0f}, "
      f"LlamaAttention {weights_hf[:, :, future].max():.0f}")
assert (weights[:, :, future] == 0).all() and (weights_hf[:, :, future] == 0).all()

# %%
# SwiGLU MLP
# ----------
# Llama's MLP is a gated linear unit with the SiLU (Swish) gate (Shazeer, 2020):
# ``down(silu(gate(x)) * up(x))`` with ``silu(z) = z * sigmoid(z)``, three matrices
# where GPT-2 has two. Which projection passes through SiLU matters: swapping ``gate``
# and ``up`` gives another function.


class SwiGLU(nn.Module):
    def __init__(self, D, Dff):
        super().__init__()
        self.gate = nn.Linear(D, Dff, bias=False)
        self.up = nn.Linear(D, Dff, bias=False)
        self.down = nn.Linear(Dff, D, bias=False)

    def forward(self, x):  # (B, L, D) -> (B, L, Dff) -> (B, L, D)
        g = self.gate(x)
        return self.down(g * torch.sigmoid(g) * self.up(x))


mlp = SwiGLU(D, Dff).to(device)
mlp.load_state_dict({f"{n}.weight": getattr(hf_layer.mlp, f"{n}_proj").weight
                     for n in ("gate", "up", "down")})
ref = hf_layer.mlp(h)
swapped = mlp.down(torch.sigmoid(mlp.up(h)) * mlp.up(h) * mlp.gate(h))
gap_swap = (swapped - ref).abs().max().item()
print(f"max |ours - LlamaMLP| = {(mlp(h) - ref).abs().max():.1e}; "
      f"gate and up swapped: {gap_swap:.2f}")
torch.testing.assert_close(mlp(h), ref)
assert gap_swap > 0.1  # another function

# %%
# The whole layer, and the map of its parameters
# ----------------------------------------------
# Pre-norm residuals, as in GPT-2: ``x + attn(norm_1(x))``, then ``x + mlp(norm_2(x))``.
# ``LlamaDecoderLayer`` is called as ``LlamaModel`` calls it in transformers 5.23: the
# hidden states, the attention mask, and ``position_embeddings=(cos, sin)`` computed
# once per forward by ``LlamaRotaryEmbedding``; it returns a tensor. Our layer is loaded
# from its state dict through the map below, strictly (a missing or extra name
# fails).


class DecoderLayer(nn.Module):
    def __init__(self, D, Nh, Nkv, Dff, eps):
        super().__init__()
        self.norm_1 = RMSNorm(D, eps)
        self.attn = Attention(D, Nh, Nkv)
        self.norm_2 = RMSNorm(D, eps)
        self.mlp = SwiGLU(D, Dff)

    def forward(self, x, cos, sin):  # (B, L, D) -> (B, L, D)
        x = x + self.attn(self.norm_1(x), cos, sin)[0]
        return x + self.mlp(self.norm_2(x))


LAYER_NAMES = {  # ours -> LlamaDecoderLayer's
    "norm_1.weight": "input_layernorm.weight",  # (D,)
    "attn.q.weight": "self_attn.q_proj.weight",  # (Nh * Dh, D)
    "attn.k.weight": "self_attn.k_proj.weight",  # (Nkv * Dh, D)
    "attn.v.weight": "self_attn.v_proj.weight",  # (Nkv * Dh, D)
    "attn.o.weight": "self_attn.o_proj.weight",  # (D, Nh * Dh)
    "norm_2.weight": "post_attention_layernorm.weight",  # (D,)
    "mlp.gate.weight": "mlp.gate_proj.weight",  # (Dff, D)
    "mlp.up.weight": "mlp.up_proj.weight",  # (Dff, D)
    "mlp.down.weight": "mlp.down_proj.weight",  # (D, Dff)
}
for ours_name, theirs in LAYER_NAMES.items():
    print(f"{ours_name:16s} <- {theirs}")
assert sorted(LAYER_NAMES.values()) == sorted(n for n, _ in hf_layer.named_parameters())

layer = DecoderLayer(D, Nh, Nkv, Dff, EPS).to(device)
state = hf_layer.state_dict()
layer.load_state_dict({ours: state[theirs] for ours, theirs in LAYER_NAMES.items()},
                      strict=True)
ours = layer(x, cos, sin)  # (B, L, D)
ref_layer = hf_layer(x, attention_mask=causal, position_ids=pos,
                     position_embeddings=(cos_hf, sin_hf))
print(f"max |ours - LlamaDecoderLayer| = {(ours - ref_layer).abs().max():.1e}")
torch.testing.assert_close(ours, ref_layer)

# The eager layer masks nothing by itself: without a mask, token l sees the future.
no_mask = hf_layer(x, attention_mask=None, position_embeddings=(cos_hf, sin_hf))
print(f"LlamaDecoderLayer without attention_mask: max |diff| = "
      f"{(no_mask - ref_layer).abs().max():.2f}")
assert (no_mask - ref_layer).abs().max() > 0.1  # the future leaks in
torch.testing.assert_close(no_mask[:, -1], ref_layer[:, -1])  # last token: no future

# %%
# What a wrong piece costs
# ------------------------
# Each line below is our layer with one thing wrong, against ``LlamaDecoderLayer``:
# RoPE with the default base 10000, or with the positions ``0 .. L-1`` instead of the
# ids, or with adjacent pairs (GPT-J), RMSNorm without ``eps``, and the MLP's ``gate``
# and ``up`` swapped. Each misses by far more than the float32 tolerance (``1e-5``
# absolute).
import copy

positions_0_to_L = torch.arange(L, device=device).expand(B, L)
no_eps = copy.deepcopy(layer)
no_eps.norm_1.eps = no_eps.norm_2.eps = 0.0
adjacent = copy.deepcopy(layer)
adjacent.attn.rope = rope_adjacent
gate_up = copy.deepcopy(layer)
gate_up.mlp.gate, gate_up.mlp.up = gate_up.mlp.up, gate_up.mlp.gate
wrong = {
    "rope_theta 10000": layer(x, *rope_cos_sin(pos, Dh, 10000.0)),
    "positions 0..L-1": layer(x, *rope_cos_sin(positions_0_to_L, Dh, THETA)),
    "adjacent pairs": adjacent(x, cos, sin),
    "RMSNorm eps = 0": no_eps(x, cos, sin),
    "gate <-> up": gate_up(x, cos, sin),
}
gaps = {name: (out - ref_layer).abs().max().item() for name, out in wrong.items()}
for name, gap in gaps.items():
    print(f"{name:18s} max |ours - LlamaDecoderLayer| = {gap:.3f}")
    assert gap > 0.1  # 10^4 times the tolerance (1e-5)
gap_min, gap_max = min(gaps.values()), max(gaps.values())

# %%
# Two layers, the final norm and the LM head
# ------------------------------------------
# ``LlamaForCausalLM`` embeds the tokens, computes ``cos`` and ``sin`` once from the
# position ids, runs the layers, applies a final RMSNorm and the LM head, a linear map
# to the vocabulary without bias. The head is tied to the embedding when
# ``tie_word_embeddings`` says so (``False`` by default for Llama; some checkpoints,
# such as the small Llama 3.2 ones, tie).
#
# Its ``hidden_states`` (with ``output_hidden_states=True``) are the embeddings and the
# output of every layer but the last, whose entry is replaced by the *normed* final
# output. With ``use_cache=False`` and no ``attention_mask``, transformers 5.23 reads
# position ids that jump (as row 1's do) as several sequences packed in one row, and
# masks each from the others; an all-ones ``attention_mask`` says there is one
# sequence per row. (With a cache, as ``use_cache=True`` makes, it never looks.)


class Llama(nn.Module):
    def __init__(self, V, D, Nh, Nkv, Dff, n_layers, eps, theta, tie):
        super().__init__()
        self.theta = theta
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(DecoderLayer(D, Nh, Nkv, Dff, eps)
                                    for _ in range(n_layers))
        self.norm = RMSNorm(D, eps)
        self.lm_head = nn.Linear(D, V, bias=False)
        if tie:
            self.lm_head.weight = self.embed.weight  # one tensor, two uses

    def forward(self, ids, pos):
        """ids, pos (B, L) -> logits (B, L, V) and the hidden states, (B, L, D) each."""
        x = self.embed(ids)
        cos, sin = rope_cos_sin(pos, Dh, self.theta)  # once, for every layer
        hidden = [x]
        for layer in self.layers:
            x = layer(x, cos, sin)
            hidden.append(x)
        return self.lm_head(self.norm(x)), hidden


def names_for(n_layers):
    """ours -> LlamaForCausalLM's, for every parameter."""
    names = {"embed.weight": "model.embed_tokens.weight"}
    for i in range(n_layers):
        names |= {f"layers.{i}.{a}": f"model.layers.{i}.{b}"
                  for a, b in LAYER_NAMES.items()}
    names["norm.weight"] = "model.norm.weight"
    names["lm_head.weight"] = "lm_head.weight"
    return names


def ours_from(model):
    c = model.config
    ours = Llama(c.vocab_size, c.hidden_size, c.num_attention_heads,
                 c.num_key_value_heads, c.intermediate_size, c.num_hidden_layers,
                 c.rms_norm_eps, c.rope_parameters["rope_theta"], c.tie_word_embeddings)
    ours = ours.to(device)
    state = model.state_dict()
    names = names_for(c.num_hidden_layers)
    ours.load_state_dict({a: state[b] for a, b in names.items()}, strict=True)
    return ours


NAMES = names_for(cfg.num_hidden_layers)
for ours_name in ("embed.weight", "layers.1.attn.k.weight", "norm.weight",
                  "lm_head.weight"):
    print(f"{ours_name:22s} <- {NAMES[ours_name]}")
print(f"... {len(NAMES)} names in all")
assert sorted(NAMES.values()) == sorted(n for n, _ in model.named_parameters())

ours = ours_from(model)
logits, hidden = ours(ids, pos)
with torch.no_grad():
    out = model(ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                use_cache=False, output_hidden_states=True)
print(f"logits {tuple(logits.shape)}: max |ours - LlamaForCausalLM| = "
      f"{(logits - out.logits).abs().max():.1e}")
torch.testing.assert_close(logits, out.logits)
assert len(out.hidden_states) == 3
torch.testing.assert_close(hidden[0], out.hidden_states[0])  # the embeddings
torch.testing.assert_close(hidden[1], out.hidden_states[1])  # after layer 0
torch.testing.assert_close(ours.norm(hidden[2]), out.hidden_states[2])  # normed
last_gap = (hidden[2] - out.hidden_states[2]).abs().max().item()
print(f"hidden_states[-1] vs layer 1's raw output: max |diff| = {last_gap:.2f}")
assert last_gap > 0.1  # the normed output, not the layer's
assert ours.lm_head.weight is not ours.embed.weight  # untied, as the config says
assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()

# No attention_mask and no cache: row 1's jumping positions become packed sequences.
with torch.no_grad():
    packed = model(ids, position_ids=pos, use_cache=False).logits
gap_row1 = (packed[1] - logits[1]).abs().max().item()
gap_row0 = (packed[0] - logits[0]).abs().max().item()
print(f"no attention_mask: row 0 max |diff| = {gap_row0:.1e}, row 1 = {gap_row1:.2f}")
torch.testing.assert_close(packed[0], logits[0])  # positions 0..L-1: one sequence
assert gap_row1 > 0.1  # row 1: every token its own sequence
# Row 1 as Hugging Face read it: 12 sequences of one token each, at their positions.
alone, _ = ours(ids[1].view(L, 1), pos[1].view(L, 1))  # (L, 1, V)
torch.testing.assert_close(packed[1], alone[:, 0])
# With the config's default use_cache=True the model builds a cache, and then it does
# not look for packed sequences: the same call without a mask is one sequence per row.
with torch.no_grad():
    cached = model(ids, position_ids=pos).logits
torch.testing.assert_close(cached, logits)

# %%
# A tied head
# -----------
# The same config with ``tie_word_embeddings=True``: Hugging Face's head and embedding
# are one tensor, ours too, and the logits agree.
tied_cfg = LlamaConfig(**{**cfg.to_dict(), "tie_word_embeddings": True})
tied = LlamaForCausalLM(tied_cfg).to(device).eval()
with torch.no_grad():
    for p in tied.parameters():
        p.add_(0.1 * torch.randn_like(p))
assert tied.lm_head.weight is tied.model.embed_tokens.weight
ours_tied = ours_from(tied)
assert ours_tied.lm_head.weight is ours_tied.embed.weight
with torch.no_grad():
    ref = tied(ids, position_ids=pos).logits  # with a cache: one sequence per row
logits_tied, _ = ours_tied(ids, pos)
print(f"tied: max |ours - LlamaForCausalLM| = {(logits_tied - ref).abs().max():.1e}")
torch.testing.assert_close(logits_tied, ref)

# %%
# Every wrong piece misses by far more than the tolerance
# -------------------------------------------------------
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
names = ["nothing wrong"] + list(gaps)
values = [(layer(x, cos, sin) - ref_layer).abs().max().item()] + list(gaps.values())
ax.barh(names, values, color=["C2"] + ["C3"] * len(gaps))
ax.axvline(1e-5, color="C0", linestyle="--", label="float32 tolerance (atol 1e-5)")
ax.set_xscale("log")
ax.set_xlim(1e-7, 5)
ax.set_xlabel("max |our layer - LlamaDecoderLayer|")
ax.legend(loc="lower right", fontsize=8)
ax.set_title(f"One wrong piece moves the layer's output by {gap_min:.2f} to "
             f"{gap_max:.2f},\nover {10 ** math.floor(math.log10(gap_min / 1e-5)):,} "
             "times the tolerance")
plt.show()

# %%
# References
# ----------
# Touvron et al., *LLaMA: Open and Efficient Foundation Language Models*, 2023;
# Touvron et al., *Llama 2: Open Foundation and Fine-Tuned Chat Models*, 2023
# (grouped-query attention in its 34B and 70B models); Dubey et al., *The Llama 3 Herd
# of Models*, 2024;
# Zhang and Sennrich, *Root Mean Square Layer Normalization*, 2019; Su et al.,
# *RoFormer*, 2021; Shazeer, *GLU Variants Improve Transformer*, 2020; Ainslie et
# al., *GQA*, 2023. APIs: ``transformers.LlamaConfig`` and
# ``transformers.LlamaForCausalLM``, with ``LlamaDecoderLayer``, ``LlamaRMSNorm``,
# ``LlamaRotaryEmbedding``, ``LlamaAttention`` and ``LlamaMLP`` inside it.
