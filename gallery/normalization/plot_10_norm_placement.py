"""
Where the norm sits
===================

A transformer block adds two sublayers (attention, MLP) to a residual stream; models
differ in where they normalize. Pre-LN (GPT-2, Llama) normalizes the sublayer's input,
post-LN (the original Transformer, BERT) the sum, OLMo 2 the sublayer's output before
it is added, and Gemma 2 and 3 both the input and the output ("peri-LN", or sandwich).
This page writes one block with the four placements from scratch and proves each equal
to a Hugging Face layer: pre-LN to ``LlamaDecoderLayer``, OLMo 2's to
``Olmo2DecoderLayer``, peri-LN to ``Gemma2DecoderLayer``, and post-LN, as BERT's encoder
layer with LayerNorm and a padding mask, to ``BertLayer`` (post-LN is also proven equal
to ``nn.TransformerEncoderLayer`` on
:doc:`/generated/transformer/plot_05_transformer_block`). Then it stacks 24 random
layers of each kind and measures the residual stream and the gradients through depth:
the two placements that normalize the sublayer's output bound what each layer can add.
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
from transformers import BertConfig, Gemma2Config, LlamaConfig, Olmo2Config
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.gemma2.modeling_gemma2 import (
    Gemma2DecoderLayer,
    Gemma2RotaryEmbedding,
)
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRotaryEmbedding,
)
from transformers.models.olmo2.modeling_olmo2 import (
    Olmo2DecoderLayer,
    Olmo2RotaryEmbedding,
)

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# One block, four placements
# --------------------------
# With ``f`` a sublayer (attention, then the MLP) and ``N`` a norm with its own weight
# at each place, one step of the residual stream ``x`` is
#
# .. math::
#
#    \text{pre-LN: } x + f(N(x)), \quad \text{post-LN: } N(x + f(x)), \quad
#    \text{OLMo 2: } x + N(f(x)), \quad \text{peri-LN: } x + N_2(f(N_1(x))).
#
# Everything else is shared and written once: RMSNorm, whose weight is ``w`` (Llama,
# OLMo 2) or ``1 + w`` (Gemma, initialized at ``w = 0``); grouped-query attention
# with rotate-half RoPE (:doc:`/generated/transformer/plot_11_llama_decoder_layer`),
# optional RMSNorm of ``q`` and ``k`` over the whole width before the head split
# (OLMo 2, see :doc:`plot_07_qk_norm`), a logit scale and an optional tanh soft-cap
# (Gemma 2); a gated MLP with SiLU (Llama, OLMo 2) or tanh-GELU (Gemma 2).
import math

from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, D, eps, one_plus=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(D) if one_plus else torch.ones(D))
        self.eps, self.one_plus = eps, one_plus

    def forward(self, x):  # (..., D) -> (..., D), computed in float32 or float64
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        n = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return n * (1 + self.weight if self.one_plus else self.weight)


def rope(x, cos, sin):
    """Rotate-half RoPE. x (B, N, L, Dh), cos and sin (B, L, Dh) -> (B, N, L, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # channel i pairs with channel i + Dh/2
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


def rope_cos_sin(pos, Dh, theta):
    """pos (B, L) -> cos, sin (B, L, Dh): angle p * theta**(-2i/Dh) at i, i + Dh/2."""
    two_i = torch.arange(0, Dh, 2, device=pos.device)
    angles = pos[..., None].double() * theta ** (-two_i / Dh)  # (B, L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (B, L, Dh)
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    def __init__(self, D, Nh, Nkv, Dh, eps, qk_norm=False, scale=None, softcap=None):
        super().__init__()
        self.Nh, self.Nkv, self.Dh = Nh, Nkv, Dh
        self.scale = Dh ** -0.5 if scale is None else scale
        self.softcap = softcap
        self.q = nn.Linear(D, Nh * Dh, bias=False)
        self.k = nn.Linear(D, Nkv * Dh, bias=False)
        self.v = nn.Linear(D, Nkv * Dh, bias=False)
        self.o = nn.Linear(Nh * Dh, D, bias=False)
        if qk_norm:  # over all heads at once, before the split (OLMo 2)
            self.q_norm, self.k_norm = RMSNorm(Nh * Dh, eps), RMSNorm(Nkv * Dh, eps)

    def forward(self, x, cos, sin):  # (B, L, D) -> (B, L, D)
        B, L, _ = x.shape
        Nh, Nkv, Dh, G = self.Nh, self.Nkv, self.Dh, self.Nh // self.Nkv
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, L, Nh*Dh), (B, L, Nkv*Dh) x2
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q = rope(q.view(B, L, Nh, Dh).transpose(1, 2), cos, sin)  # (B, Nh, L, Dh)
        k = rope(k.view(B, L, Nkv, Dh).transpose(1, 2), cos, sin)  # (B, Nkv, L, Dh)
        v = v.view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        qg = q.reshape(B, Nkv, G * L, Dh)  # the G query heads of a group, stacked
        logits = (qg @ k.mT).view(B, Nkv, G, L, L) * self.scale
        if self.softcap is not None:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
        weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (weights.view(B, Nkv, G * L, L) @ v).view(B, Nh, L, Dh)
        return self.o(y.transpose(1, 2).reshape(B, L, Nh * Dh))


class GatedMLP(nn.Module):
    def __init__(self, D, Dff, act):
        super().__init__()
        self.gate = nn.Linear(D, Dff, bias=False)
        self.up = nn.Linear(D, Dff, bias=False)
        self.down = nn.Linear(Dff, D, bias=False)
        self.act = act

    def forward(self, x):  # (B, L, D) -> (B, L, Dff) -> (B, L, D)
        return self.down(self.act(self.gate(x)) * self.up(x))


def silu(z):
    return z * torch.sigmoid(z)


def gelu_tanh(z):
    return 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))


class Block(nn.Module):
    """One decoder layer; ``placement`` is "pre", "post", "olmo2" or "peri"."""

    def __init__(self, placement, D, Nh, Nkv, Dh, Dff, eps, act=silu, one_plus=False,
                 **attn_options):
        super().__init__()
        self.placement = placement
        self.attn = Attention(D, Nh, Nkv, Dh, eps, **attn_options)
        self.mlp = GatedMLP(D, Dff, act)
        names = {"pre": ["attn_in", "mlp_in"], "post": ["attn_sum", "mlp_sum"],
                 "olmo2": ["attn_out", "mlp_out"],
                 "peri": ["attn_in", "attn_out", "mlp_in", "mlp_out"]}[placement]
        self.norms = nn.ModuleDict({n: RMSNorm(D, eps, one_plus) for n in names})

    def sublayer(self, x, f, name):  # one residual step around sublayer f
        N = self.norms
        if self.placement == "pre":
            return x + f(N[name + "_in"](x))
        if self.placement == "post":
            return N[name + "_sum"](x + f(x))
        if self.placement == "olmo2":
            return x + N[name + "_out"](f(x))
        return x + N[name + "_out"](f(N[name + "_in"](x)))  # peri

    def forward(self, x, cos, sin):  # (B, L, D) -> (B, L, D)
        x = self.sublayer(x, lambda h: self.attn(h, cos, sin), "attn")
        return self.sublayer(x, self.mlp, "mlp")


# %%
# Three Hugging Face layers from random configs
# ---------------------------------------------
# ``D = 64``, ``Nh = 4`` query heads of ``Dh = 24`` sharing ``Nkv = 2`` key/value heads
# (``Nh * Dh = 96`` is not ``D``, nor is it in Gemma: the projections' shapes matter),
# ``Dff = 128``, ``rms_norm_eps = 1e-3`` (visible at this input's mean square of
# 2.5e-3), eager attention. Gemma 2's own settings are chosen so that each shows:
# ``query_pre_attn_scalar = 36``, so the logits are scaled by ``1/6`` and not by
# ``1/sqrt(Dh) = 0.204``; ``attn_logit_softcapping = 0.5``, small enough to bend these
# logits; the layer's type is ``"full_attention"``, which switches its sliding window
# off (at ``L = 12`` a window of 4096 would change nothing anyway). Each layer is
# built alone in float32 (its RMSNorms compute in float32 whatever the input's dtype),
# with every parameter moved off its initialization, and gets the additive causal
# mask and the ``(cos, sin)`` of its model's rotary embedding, which ours must match.
D, Nh, Nkv, Dh, Dff, EPS, THETA = 64, 4, 2, 24, 128, 1e-3, 1000.0
SCALAR, SOFTCAP = 36, 0.5
common = dict(vocab_size=100, hidden_size=D, num_attention_heads=Nh,
              num_key_value_heads=Nkv, head_dim=Dh, intermediate_size=Dff,
              num_hidden_layers=1, rms_norm_eps=EPS, attn_implementation="eager",
              rope_parameters={"rope_type": "default", "rope_theta": THETA},
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
configs = {
    "llama": LlamaConfig(**common),
    "olmo2": Olmo2Config(**common),
    "gemma2": Gemma2Config(**common, query_pre_attn_scalar=SCALAR,
                           attn_logit_softcapping=SOFTCAP,
                           layer_types=["full_attention"]),
}
hf_classes = {"llama": LlamaDecoderLayer, "olmo2": Olmo2DecoderLayer,
              "gemma2": Gemma2DecoderLayer}
hf_rotary = {"llama": LlamaRotaryEmbedding, "olmo2": Olmo2RotaryEmbedding,
             "gemma2": Gemma2RotaryEmbedding}
hf = {}
for name, cfg in configs.items():
    assert cfg._attn_implementation == "eager"
    hf[name] = hf_classes[name](cfg, layer_idx=0).to(device).eval()
    with torch.no_grad():
        for p in hf[name].parameters():
            p.add_(0.1 * torch.randn_like(p))
print("Gemma 2 attention: scaling", hf["gemma2"].self_attn.scaling, "softcap",
      hf["gemma2"].self_attn.attn_logit_softcapping, "sliding window",
      hf["gemma2"].self_attn.sliding_window)

B, L = 2, 12
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
cos, sin = (t.float() for t in rope_cos_sin(pos, Dh, THETA))  # (B, L, Dh) each
x = 0.05 * torch.randn(B, L, D, device=device)  # (B, L, D)
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)
causal = torch.zeros(L, L, device=device)
causal = causal.masked_fill(future, float("-inf"))[None, None]  # (1, 1, L, L)
hf_cos_sin = {name: hf_rotary[name](cfg).to(device)(x, pos)
              for name, cfg in configs.items()}
for name, (cos_hf, sin_hf) in hf_cos_sin.items():
    torch.testing.assert_close((cos, sin), (cos_hf, sin_hf))
print(f"our cos, sin {tuple(cos.shape)} = each model's rotary embedding's")

# %%
# The maps of names, and the three comparisons
# --------------------------------------------
# Each map sends every parameter of our block to the Hugging Face layer's, strictly: a
# name missing on either side fails. Reading the right-hand sides shows the placement:
# Llama has ``input_layernorm`` and ``post_attention_layernorm`` (which, despite its
# name, normalizes the MLP's *input*); OLMo 2 has no input norm at all and normalizes
# each sublayer's output; Gemma 2 has all four.
ATTN = {"attn.q.weight": "self_attn.q_proj.weight",
        "attn.k.weight": "self_attn.k_proj.weight",
        "attn.v.weight": "self_attn.v_proj.weight",
        "attn.o.weight": "self_attn.o_proj.weight",
        "mlp.gate.weight": "mlp.gate_proj.weight",
        "mlp.up.weight": "mlp.up_proj.weight",
        "mlp.down.weight": "mlp.down_proj.weight"}
NAMES = {
    "llama": ATTN | {"norms.attn_in.weight": "input_layernorm.weight",
                     "norms.mlp_in.weight": "post_attention_layernorm.weight"},
    "olmo2": ATTN | {"attn.q_norm.weight": "self_attn.q_norm.weight",
                     "attn.k_norm.weight": "self_attn.k_norm.weight",
                     "norms.attn_out.weight": "post_attention_layernorm.weight",
                     "norms.mlp_out.weight": "post_feedforward_layernorm.weight"},
    "gemma2": ATTN | {"norms.attn_in.weight": "input_layernorm.weight",
                      "norms.attn_out.weight": "post_attention_layernorm.weight",
                      "norms.mlp_in.weight": "pre_feedforward_layernorm.weight",
                      "norms.mlp_out.weight": "post_feedforward_layernorm.weight"},
}
for ours_name, theirs in NAMES["gemma2"].items():
    if "norm" in ours_name:
        print(f"gemma2: {ours_name:22s} <- {theirs}")
for name in ("olmo2",):
    for ours_name, theirs in NAMES[name].items():
        if "norm" in ours_name:
            print(f"{name}:  {ours_name:22s} <- {theirs}")

shape = dict(D=D, Nh=Nh, Nkv=Nkv, Dh=Dh, Dff=Dff, eps=EPS)
ours = {
    "llama": Block("pre", **shape),
    "olmo2": Block("olmo2", **shape, qk_norm=True),
    "gemma2": Block("peri", **shape, act=gelu_tanh, one_plus=True,
                    scale=SCALAR ** -0.5, softcap=SOFTCAP),
}
refs = {}
for name, block in ours.items():
    block.to(device)
    state = hf[name].state_dict()
    assert sorted(NAMES[name].values()) == sorted(state)
    block.load_state_dict({a: state[b] for a, b in NAMES[name].items()}, strict=True)
    with torch.no_grad():
        refs[name] = hf[name](x, attention_mask=causal, position_ids=pos,
                              position_embeddings=hf_cos_sin[name])
        out = block(x, cos, sin)
    print(f"{name:6s}: max |ours - {hf_classes[name].__name__}| = "
          f"{(out - refs[name]).abs().max():.1e}")
    torch.testing.assert_close(out, refs[name])

# %%
# What each detail is worth
# -------------------------
# Each line is one of our blocks with one thing changed, against its Hugging Face
# layer: the wrong placement (OLMo 2's weights in a peri-LN block with added input
# norms of weight one, and Gemma's in a pre-LN block without its output norms), Gemma's
# norm weight used as ``w`` instead of ``1 + w``, its logits scaled by ``1/sqrt(Dh)``,
# no soft-cap, and OLMo 2 without its q/k norm. Every gap is far above float32's
# tolerance (``1e-5`` absolute).
import copy


def variant(name, change, *inputs):
    """Max |block - HF layer| for a copy of our block `name` changed by `change`; the
    block's inputs are (x, cos, sin) unless given."""
    block = copy.deepcopy(ours[name])
    change(block)
    with torch.no_grad():
        return (block(*(inputs or (x, cos, sin))) - refs[name]).abs().max().item()


def drop_qk_norm(b):
    del b.attn.q_norm, b.attn.k_norm


def gemma_as_pre(b):
    b.placement = "pre"


def olmo2_as_peri(b):  # the extra input norms are RMSNorm with weight 1
    b.placement = "peri"
    for n in ("attn_in", "mlp_in"):
        b.norms[n] = RMSNorm(D, EPS).to(device)


def gemma_plain_w(b):
    for n in b.norms.values():
        n.one_plus = False


for name in ours:  # the control: unchanged, each block still matches
    assert variant(name, lambda b: None) < 1e-5  # float32 tolerance, as above
gaps = {
    "olmo2 as peri-LN": variant("olmo2", olmo2_as_peri),
    "olmo2 without q/k norm": variant("olmo2", drop_qk_norm),
    "gemma2 as pre-LN": variant("gemma2", gemma_as_pre),
    "gemma2 weight w, not 1 + w": variant("gemma2", gemma_plain_w),
    "gemma2 scale 1/sqrt(Dh)": variant(
        "gemma2", lambda b: setattr(b.attn, "scale", Dh ** -0.5)),
    "gemma2 without soft-cap": variant(
        "gemma2", lambda b: setattr(b.attn, "softcap", None)),
}
for what, gap in gaps.items():
    print(f"{what:27s} max |ours - HF| = {gap:.2e}")
    assert gap > 0.1  # ten thousand times float32's tolerance
gaps_lo, gaps_hi = min(gaps.values()), max(gaps.values())
assert all(gaps_lo <= g <= gaps_hi for g in gaps.values())  # the range quoted

# %%
# Post-LN against BERT's encoder layer
# ------------------------------------
# BERT (Devlin et al., 2018) is post-LN: ``x <- N(x + f(x))`` around attention, then
# around the MLP, with LayerNorm (mean removed, biased variance, weight and bias) as
# ``N``. Its layer is an encoder's: every token sees every key (no causal mask, no
# RoPE: BERT adds learned positions before the first layer), except keys that are
# padding. The attention and the MLP have biases, and the MLP is ``down(GELU(up(x)))``
# with the exact GELU, :math:`z\,\Phi(z)` (``Phi`` the standard normal CDF). Our
# residual step is the page's own ``Block.sublayer`` with ``placement = "post"``, the
# line the depth study below also runs. ``layer_norm_eps = 1e-3`` (BERT's is 1e-12)
# with this page's input (RMS 0.05): the first norm's input has a variance of
# :measured:`first_var_lo:.3f` to :measured:`first_var_hi:.3f` over ``D`` (printed
# below), where eps is visible.


class LayerNorm(nn.Module):
    def __init__(self, D, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))
        self.bias = nn.Parameter(torch.zeros(D))
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D)
        centred = x - x.mean(dim=-1, keepdim=True)
        var = centred.pow(2).mean(dim=-1, keepdim=True)  # biased: divides by D
        return centred / torch.sqrt(var + self.eps) * self.weight + self.bias


class EncoderAttention(nn.Module):
    """Multi-head self-attention with biases; padding keys masked, nothing else."""

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh, self.Dh = Nh, D // Nh
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x, pad):  # x (B, L, D), pad (B, L) True at padding -> (B, L, D)
        q, k, v = (t(x).unflatten(-1, (self.Nh, self.Dh)).transpose(1, 2)
                   for t in (self.q, self.k, self.v))  # (B, Nh, L, Dh) each
        logits = q @ k.mT / math.sqrt(self.Dh)  # (B, Nh, L, L)
        logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
        y = logits.softmax(dim=-1) @ v  # (B, Nh, L, Dh)
        return self.o(y.transpose(1, 2).flatten(2))  # (B, L, Nh * Dh = D) -> (B, L, D)


def gelu_erf(z):
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


class MLP(nn.Module):
    def __init__(self, D, Dff, act):
        super().__init__()
        self.up, self.down, self.act = nn.Linear(D, Dff), nn.Linear(Dff, D), act

    def forward(self, x):  # (B, L, D) -> (B, L, Dff) -> (B, L, D)
        return self.down(self.act(self.up(x)))


class EncoderBlock(nn.Module):
    """BERT's layer: post-LN around padding-masked attention, then a GELU MLP."""

    sublayer = Block.sublayer  # the page's residual step; here placement "post"

    def __init__(self, D, Nh, Dff, eps):
        super().__init__()
        self.placement = "post"
        self.attn, self.mlp = EncoderAttention(D, Nh), MLP(D, Dff, gelu_erf)
        self.norms = nn.ModuleDict({"attn_sum": LayerNorm(D, eps),
                                    "mlp_sum": LayerNorm(D, eps)})

    def forward(self, x, pad):  # (B, L, D), pad (B, L) -> (B, L, D)
        x = self.sublayer(x, lambda h: self.attn(h, pad), "attn")
        return self.sublayer(x, self.mlp, "mlp")


# %%
# Hugging Face's ``BertLayer`` from a random ``BertConfig`` (same ``D``, ``Nh``,
# ``Dff``, eager attention, eval mode: no dropout; every parameter moved off its init).
# Its eager attention *adds* ``attention_mask`` to the logits, so it wants what
# ``BertModel`` builds from a (B, L) padding mask: a float (B, 1, L, L) tensor, 0 where
# a key is seen and float32's most negative number where it is padding. We build it by
# hand and check it equals ``create_bidirectional_mask``'s. The second sequence ends in
# 4 padding tokens; ours gets the same padding as a boolean (B, L) key mask.
bert_cfg = BertConfig(hidden_size=D, num_attention_heads=Nh, intermediate_size=Dff,
                      hidden_act="gelu", layer_norm_eps=EPS,
                      attn_implementation="eager")
assert bert_cfg._attn_implementation == "eager"
hf_bert = BertLayer(bert_cfg).to(device).eval()
with torch.no_grad():
    for p in hf_bert.parameters():
        p.add_(0.1 * torch.randn_like(p))

pad = torch.zeros(B, L, dtype=torch.bool, device=device)  # (B, L), True at padding
pad[1, -4:] = True
additive = torch.zeros(B, 1, L, L, device=device)  # (B, 1, L, L)
additive = additive.masked_fill(pad[:, None, None, :], torch.finfo(torch.float32).min)
built = create_bidirectional_mask(config=bert_cfg, inputs_embeds=x,
                                  attention_mask=(~pad).long())
assert torch.equal(additive, built)
print(f"padding keys per sequence: {pad.sum(-1).tolist()}; BertLayer's mask: "
      f"{tuple(built.shape)} {built.dtype},\nvalues 0 and {built.min():.2e} "
      "(float32's most negative)")

NAMES["bert"] = {
    "attn.q.weight": "attention.self.query.weight",
    "attn.q.bias": "attention.self.query.bias",
    "attn.k.weight": "attention.self.key.weight",
    "attn.k.bias": "attention.self.key.bias",
    "attn.v.weight": "attention.self.value.weight",
    "attn.v.bias": "attention.self.value.bias",
    "attn.o.weight": "attention.output.dense.weight",
    "attn.o.bias": "attention.output.dense.bias",
    "norms.attn_sum.weight": "attention.output.LayerNorm.weight",
    "norms.attn_sum.bias": "attention.output.LayerNorm.bias",
    "mlp.up.weight": "intermediate.dense.weight",
    "mlp.up.bias": "intermediate.dense.bias",
    "mlp.down.weight": "output.dense.weight",
    "mlp.down.bias": "output.dense.bias",
    "norms.mlp_sum.weight": "output.LayerNorm.weight",
    "norms.mlp_sum.bias": "output.LayerNorm.bias",
}
for ours_name, theirs in NAMES["bert"].items():
    if "norm" in ours_name:
        print(f"bert: {ours_name:22s} <- {theirs}")
bert = EncoderBlock(D, Nh, Dff, EPS).to(device)
state = hf_bert.state_dict()
assert sorted(NAMES["bert"].values()) == sorted(state)
bert.load_state_dict({a: state[b] for a, b in NAMES["bert"].items()}, strict=True)
with torch.no_grad():
    refs["bert"] = hf_bert(x, attention_mask=additive)
    out = bert(x, pad)
print(f"bert  : max |ours - BertLayer| = {(out - refs['bert']).abs().max():.1e}")
torch.testing.assert_close(out, refs["bert"])
with torch.no_grad():
    first_sum = x + bert.attn(x, pad)  # (B, L, D): the first LayerNorm's input
first_var = first_sum.var(-1, unbiased=False)  # (B, L): what the LayerNorm divides by
first_var_lo, first_var_hi = first_var.min().item(), first_var.max().item()
print(f"first LayerNorm's input: variance over D {first_var_lo:.3f} to "
      f"{first_var_hi:.3f}, against eps = {EPS}")
assert ((first_var_lo <= first_var) & (first_var <= first_var_hi)).all()  # the range
assert ((10 * EPS < first_var) & (first_var < 100 * EPS)).all()  # eps a 1 to 10 % term

# %%
# What each detail is worth, for BERT: the same layer without the padding mask, with
# each LayerNorm moved before its sublayer (pre-LN, same weights), with eps 0, with
# the tanh GELU; and Hugging Face's layer given the boolean (B, 1, 1, L) mask instead
# of the additive one: its eager attention adds it to the logits as 0 and 1 without
# complaint (asserted: the same output as the float mask 0 and 1). Every gap is at
# least 20 times float32's tolerance (``1e-5`` absolute).


def bert_as_pre(b):  # the same two LayerNorms, now before attention and the MLP
    b.placement = "pre"
    b.norms = nn.ModuleDict({"attn_in": b.norms["attn_sum"],
                             "mlp_in": b.norms["mlp_sum"]})


def bert_eps_0(b):
    for n in b.norms.values():
        n.eps = 0.0


ours["bert"] = bert
assert variant("bert", lambda b: None, x, pad) < 1e-5  # the control: still matches
with torch.no_grad():
    bool_out = hf_bert(x, attention_mask=~pad[:, None, None, :])  # True: seen
    zero_one = hf_bert(x, attention_mask=(~pad[:, None, None, :]).float())
torch.testing.assert_close(bool_out, zero_one)  # True is added as 1, False as 0
bert_gaps = {
    "bert without padding mask": variant("bert", lambda b: None, x,
                                         torch.zeros_like(pad)),
    "bert as pre-LN": variant("bert", bert_as_pre, x, pad),
    "bert eps 0, not 1e-3": variant("bert", bert_eps_0, x, pad),
    "bert tanh GELU": variant("bert", lambda b: setattr(b.mlp, "act", gelu_tanh),
                              x, pad),
    "BertLayer, boolean mask": (bool_out - refs["bert"]).abs().max().item(),
}
for what, gap in bert_gaps.items():
    print(f"{what:27s} max |ours - HF| = {gap:.2e}")
    assert gap > 2e-4  # at least 20 times float32's tolerance
ours_gaps = [gap for what, gap in bert_gaps.items() if what.startswith("bert ")]
bert_gaps_lo, bert_gaps_hi = min(ours_gaps), max(ours_gaps)
assert all(bert_gaps_lo <= g <= bert_gaps_hi for g in ours_gaps)  # the range quoted
bert_eps_gap = bert_gaps["bert eps 0, not 1e-3"]
bert_bool_gap = bert_gaps["BertLayer, boolean mask"]


# %%
# 24 random layers: the residual stream through depth
# ---------------------------------------------------
# The same block in each placement, 24 layers deep, in float64, one seed, the same
# linear weights in every placement: PyTorch's default initialization (uniform, standard
# deviation ``1/sqrt(3 fan_in)``) times a gain of 1 or 3, norm weights one. The input
# has RMS 1 per token. For each placement we record the RMS of the stream after every
# layer, and the norm of the gradient of a fixed random readout of the last layer with
# respect to each layer's input.
#
# What is a bound, and asserted: where the sublayer's output is normalized (OLMo 2,
# peri-LN), each step adds ``N(f(.))``, whose RMS over a token is at most ``max|w|``
# (here 1), so after ``l`` layers (``2 l`` steps) a token's RMS is at most
# ``RMS(x_0) + 2 l``, whatever the weights of ``f``. Post-LN's stream is the output of
# a norm, RMS at most 1. Pre-LN has no such bound: ``f``'s output is not normalized,
# so how fast its stream grows depends on the weights.
Ldepth, Bd, Ld = 24, 1, 8
torch.manual_seed(1)
x0 = torch.randn(Bd, Ld, D, dtype=torch.float64).to(device)  # CPU stream, any device
x0 = x0 / x0.pow(2).mean(-1, keepdim=True).sqrt()  # every token RMS 1
pos_d = torch.arange(Ld, device=device).expand(Bd, Ld)
cos_d, sin_d = rope_cos_sin(pos_d, Dh, THETA)
readout = torch.randn(D, dtype=torch.float64).to(device)
PLACEMENTS = {"pre": "pre-LN (Llama)", "post": "post-LN (BERT)",
              "olmo2": "norm after sublayer (OLMo 2)", "peri": "peri-LN (Gemma 2)"}
GAINS = (1.0, 3.0)


def build_stack(placement, gain):
    torch.manual_seed(2)  # the same linear weights in every placement
    stack = [Block(placement, **shape).to(device, torch.float64)
             for _ in range(Ldepth)]
    with torch.no_grad():
        for module in (m for b in stack for m in b.modules()):
            if isinstance(module, nn.Linear):
                module.weight.mul_(gain)
    return stack


def run_stack(placement, gain):
    """-> stream RMS and each token's RMS (Bd, Ld) after each layer; the gradient's
    norm at each layer's input, and the gradient at the first layer's input."""
    h = x0.clone().requires_grad_(True)
    inputs, rms, token_rms = [], [], []
    for block in build_stack(placement, gain):
        inputs.append(h)
        h = block(h, cos_d, sin_d)
        h.retain_grad()
        rms.append(h.pow(2).mean().sqrt().item())
        token_rms.append(h.detach().pow(2).mean(-1).sqrt())  # (Bd, Ld)
    (h @ readout).sum().backward()
    return rms, token_rms, [t.grad.norm().item() for t in inputs], inputs[0].grad


runs = {(p, g): run_stack(p, g) for p in PLACEMENTS for g in GAINS}
print("stream RMS after layer 1 / 12 / 24, at gain 1 and at gain 3")
for p in PLACEMENTS:
    line = "   ".join(" ".join(f"{runs[p, g][0][i]:5.2f}" for i in (0, 11, 23))
                      for g in GAINS)
    print(f"{p:6s} {line}")
bound = [1 + 2 * (i + 1) for i in range(Ldepth)]  # RMS(x_0) = 1, max|w| = 1
for g in GAINS:
    for p in ("olmo2", "peri"):
        # a bound, whatever the weights
        assert all((t <= b).all() for t, b in zip(runs[p, g][1], bound))
    assert all((t <= 1.0).all() for t in runs["post", g][1])  # a norm's output
    # and close to 1 over the whole stream: the sum's mean square dwarfs eps = 1e-3
    assert 0.99 < min(runs["post", g][0]) <= max(runs["post", g][0]) <= 1.0

# The gradients come from backward through the stack; a central difference of the
# readout along a random direction of the input checks the first layer's one
# (float64, step 1e-6: its truncation error, as the step squared, is 2e-10 relative).
v = torch.randn(x0.shape, dtype=torch.float64).to(device)
with torch.no_grad():
    J = []
    for sign in (1, -1):
        h = x0 + sign * 1e-6 * v
        for block in build_stack("peri", 3.0):
            h = block(h, cos_d, sin_d)
        J.append((h @ readout).sum())
fd = ((J[0] - J[1]) / 2e-6).item()
ad = (runs["peri", 3.0][3] * v).sum().item()
print(f"peri-LN, gain 3, slope along v: backward {ad:.6f}, central "
      f"difference {fd:.6f}")
assert abs(fd - ad) < 1e-6 * abs(ad)  # far above the truncation error

# Measured for this seed (asserted with margin, not a bound): pre-LN's last-layer RMS
# grows more than fivefold when the weights triple, OLMo 2's and peri-LN's change by
# less than 10 % (all four printed).
pre_1, pre_3 = runs["pre", 1.0][0][-1], runs["pre", 3.0][0][-1]
print(f"pre-LN, layer 24: RMS {pre_1:.2f} at gain 1, {pre_3:.2f} at gain 3")
assert pre_3 > 5 * pre_1  # grows with the weights
for p in ("olmo2", "peri"):
    a, b = runs[p, 1.0][0][-1], runs[p, 3.0][0][-1]
    print(f"{p}, layer 24: RMS {a:.2f} at gain 1, {b:.2f} at gain 3")
    assert abs(b - a) < 0.1 * a  # within 10 %: the weights hardly matter
stay = [runs[p, g][0][-1] for p in ("olmo2", "peri") for g in GAINS]
stay_lo, stay_hi = min(stay), max(stay)
assert all(stay_lo <= r <= stay_hi for r in stay)  # the range quoted

# %%
# The figure. Left: the stream's RMS after each layer (solid: gain 1, dashed: gain 3).
# Right: the gradient norm at each layer's input, relative to the last layer's (gain
# 1 and 3). The gradient numbers are measured for one seed and only shown; they vary
# with the seed, the gain and the shapes.
grad_ratio = {(p, g): runs[p, g][2][0] / runs[p, g][2][-1]
              for p in PLACEMENTS for g in GAINS}  # layer 1's / layer 24's
print("gradient norm at layer 1's input / at layer 24's, at gain 1 and at gain 3")
for p in PLACEMENTS:
    print(f"{p:6s} " + "  ".join(f"{grad_ratio[p, g]:8,.1f}" for g in GAINS))
grad_g1_lo = min(grad_ratio[p, 1.0] for p in PLACEMENTS)
grad_g1_hi = max(grad_ratio[p, 1.0] for p in PLACEMENTS)
assert all(grad_g1_lo <= grad_ratio[p, 1.0] <= grad_g1_hi for p in PLACEMENTS)
grad_pre_3, grad_post_3, grad_olmo2_3, grad_peri_3 = (grad_ratio[p, 3.0]
                                                      for p in PLACEMENTS)
import matplotlib.pyplot as plt

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
layers = range(1, Ldepth + 1)
for k, (p, label) in enumerate(PLACEMENTS.items()):
    for g, style in zip(GAINS, ("-", "--")):
        rms, _, grad, _ = runs[p, g]
        kw = dict(color=f"C{k}", ls=style, label=label if g == 1.0 else None)
        ax1.plot(layers, rms, **kw)
        ax2.plot(layers, [v / grad[-1] for v in grad], **kw)
ax1.set(xlabel="layer", ylabel="RMS of the residual stream",
        title="output norms bound the stream; pre-LN's\ngrowth follows the weights")
ax2.set(xlabel="layer", ylabel="gradient norm / last layer's", yscale="log",
        title="gradient at each layer's input, at init\n(solid gain 1, dashed 3)")
ax1.legend(fontsize=7)
plt.show()
