"""
A Llama decoder layer from scratch
==================================

Llama's decoder layer is GPT-2's pre-norm block with three pieces exchanged: RMSNorm,
rotary position embeddings on queries and keys, a SwiGLU MLP. This page writes each,
names the model as Hugging Face does, and proves it equal to a random
``LlamaForCausalLM`` loaded with one ``load_state_dict``.

**You will learn**

- which three pieces Llama exchanges in GPT-2's pre-norm block, and their equations
- how grouped-query attention with rotate-half RoPE is written in a few lines
- why a SwiGLU MLP has three matrices, and which one passes through SiLU
- how naming modules as Hugging Face does makes its state dict load strictly

**Prerequisites:** :doc:`/generated/transformer/plot_08_gpt2_vs_hugging_face` (the
GPT-2 block), :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` (RMSNorm),
:doc:`/generated/positional/plot_04_rope` (rotary embeddings),
:doc:`/generated/transformer/plot_10_gqa_mqa` (grouped-query attention).
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
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The idea
# --------
# Llama keeps GPT-2's pre-norm wiring, :math:`h = x + \mathrm{Attn}(\mathrm{Norm}_1(x))`
# and :math:`y = h + \mathrm{MLP}(\mathrm{Norm}_2(h))`, and exchanges three pieces: a
# norm by the root mean square (no mean subtracted), queries and keys rotated by angles
# proportional to the position ``p`` (channel ``i`` paired with ``i + Dh/2``), and a
# SiLU gate in the MLP:
#
# .. math::
#
#    \mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\frac{1}{D}\sum_{i=1}^{D} x_i^2 + \epsilon}}
#    \odot w
#
# .. math::
#
#    \mathrm{RoPE}_p(x) = x \odot \cos(p\,\omega) + \mathrm{rotate\_half}(x) \odot
#    \sin(p\,\omega), \qquad \omega_i = \omega_{i + D_h/2} = \mathrm{base}^{-2i/D_h}
#
# .. math::
#
#    \mathrm{MLP}(x) = W_\mathrm{down}\big(\mathrm{SiLU}(W_\mathrm{gate}\, x) \odot
#    W_\mathrm{up}\, x\big), \qquad \mathrm{SiLU}(z) = z\, \sigma(z)
#
# Like Llama 2's larger models and Llama 3, the model shares key/value heads (GQA).
columns = [  # x of the column, its name, its pieces bottom to top, their colour
    (3.3, "GPT-2 block", ["x = wte(ids) + wpe(pos)", "LayerNorm", "causal attention",
                          "+", "LayerNorm", "MLP: GELU, 2 matrices", "+"], "C0"),
    (9.1, "Llama decoder layer", ["x = embed_tokens(ids)", "RMSNorm",
                                  "attention, RoPE on q and k", "+", "RMSNorm",
                                  "MLP: SwiGLU, 3 matrices", "+"], "C3"),
]
ys = [0.2, 1.5, 2.8, 4.0, 5.2, 6.5, 7.7, 8.8]  # bottom to top; the last: the output
arrow = dict(arrowstyle="->", color="gray")
fig, ax = plt.subplots(figsize=(8, 3.1), layout="none")  # a diagram: no axes to fit
fig.subplots_adjust(left=0, right=1, bottom=0, top=0.93)
ax.set_axis_off()
ax.set(xlim=(0, 12), ylim=(-0.4, 9.4))
for cx, name, texts, color in columns:
    ax.text(cx, 9.1, name, ha="center", va="center", fontsize=11, weight="bold")
    for i, text in enumerate(texts):
        y = ys[i]
        ax.annotate("", (cx, ys[i + 1] - 0.3), (cx, y + 0.3), arrowprops=arrow)
        if text == "+":  # the residual: from below the norm, around it, into the sum
            ax.plot([cx, cx - 2.4, cx - 2.4, cx - 0.3], [y - 2.75, y - 2.75, y, y],
                    color="gray", lw=1)
        c = "C0" if text == "+" else color
        box = dict(boxstyle="circle" if text == "+" else "round", ec=c, fc=c,
                   alpha=0.25)
        ax.text(cx, y, text, ha="center", va="center", fontsize=9,
                bbox=box if i else None)
ax.set_title("Llama keeps GPT-2's pre-norm block and exchanges three pieces (red)")
plt.show()

# %%
# Proof: RMSNorm and RoPE, as their pages define them
# ----------------------------------------------------
# Both are taught on their own pages,
# :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` and
# :doc:`/generated/positional/plot_04_rope`, and copied here as they stand there.


# Copied from normalization/plot_05_groupnorm_rmsnorm.py: RMSNorm
class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last dim, in float32 (as Llama)."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,)
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D), in x's dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


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
# Grouped-query attention with RoPE
# ---------------------------------
# Four projections without bias, Hugging Face's names. RoPE turns ``q`` and ``k``, never
# ``v``; query head ``h`` reads key/value head ``h // G``, ``G = Nh / Nkv``, uncopied.
class LlamaAttention(nn.Module):
    """Causal grouped-query attention with RoPE on q and k; Hugging Face's names."""

    def __init__(self, D, Nh, Nkv, Dh):
        super().__init__()
        self.Nh, self.Nkv, self.Dh = Nh, Nkv, Dh
        self.q_proj = nn.Linear(D, Nh * Dh, bias=False)
        self.k_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.v_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.o_proj = nn.Linear(Nh * Dh, D, bias=False)

    def forward(self, x, cos, sin):  # x (B, L, D); cos, sin (B, L, Dh)
        """-> the output (B, L, D) and the attention weights (B, Nh, L, L)."""
        B, L, _ = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        G = Nh // Nkv  # query heads per key/value head
        q = self.q_proj(x).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.k_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        v = self.v_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, Dh): the same for every head
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        qg = q.reshape(B, Nkv, G * L, Dh)  # the G query heads of a group, stacked
        logits = (qg @ k.mT).view(B, Nkv, G, L, L) / math.sqrt(Dh)  # k.mT: (.., Dh, L)
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
        weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (weights.view(B, Nkv, G * L, L) @ v).view(B, Nh, L, Dh)  # (B, Nh, L, Dh)
        out = self.o_proj(y.transpose(1, 2).reshape(B, L, Nh * Dh))  # (B, L, D)
        return out, weights.view(B, Nh, L, L)  # head h = j * G + g, as in q


# %%
# SwiGLU MLP and the layer
# ------------------------
# A gated linear unit with the SiLU gate (Shazeer, 2020): three matrices where GPT-2
# has two, only ``gate_proj``'s output through SiLU. The layer wires the pieces with
# GPT-2's pre-norm residuals.
class LlamaMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases; Hugging Face's names."""

    def __init__(self, D, Dff):
        super().__init__()
        self.gate_proj = nn.Linear(D, Dff, bias=False)
        self.up_proj = nn.Linear(D, Dff, bias=False)
        self.down_proj = nn.Linear(Dff, D, bias=False)

    def forward(self, x):  # (B, L, D) -> (B, L, Dff) -> (B, L, D)
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


# %%
class LlamaDecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)): (B, L, D) -> (B, L, D)."""

    def __init__(self, D, Nh, Nkv, Dh, Dff, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(D, eps)
        self.self_attn = LlamaAttention(D, Nh, Nkv, Dh)
        self.post_attention_layernorm = RMSNorm(D, eps)
        self.mlp = LlamaMLP(D, Dff)

    def forward(self, x, cos, sin):  # x (B, L, D); cos, sin (B, L, Dh)
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)[0]
        return x + self.mlp(self.post_attention_layernorm(x))


# %%
# Proof: a random LlamaForCausalLM, and its first layer's output
# ---------------------------------------------------------------
# A random two-layer ``LlamaForCausalLM`` (``D = 64``, ``Nh = 4`` query heads of
# ``Dh = 16``, ``Nkv = 2``), its RoPE base and RMSNorm ``eps`` off their defaults and
# every weight moved off its initialization, so that a wrong piece shows. Its first
# layer runs on ``x``, whose mean square, 2.5e-3, is small enough for an ``eps`` of 1e-3
# to matter, at positions that start at 0 in row 0 and jump by 3 in row 1; the eager
# layer masks nothing by itself, so it is given the additive
# :doc:`causal mask </generated/transformer/plot_04_causal_attention>`.
V, D, Nh, Nkv, Dff = 100, 64, 4, 2, 128
Dh = D // Nh
BASE, EPS = 1000.0, 1e-3
cfg = LlamaConfig(
    vocab_size=V, hidden_size=D, num_attention_heads=Nh, num_key_value_heads=Nkv,
    intermediate_size=Dff, num_hidden_layers=2, rms_norm_eps=EPS,
    rope_parameters={"rope_type": "default", "rope_theta": BASE},
    attn_implementation="eager",
)
model = LlamaForCausalLM(cfg).to(device).eval()
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
hf_layer = model.model.layers[0]

B, L = 2, 12
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
x = 0.05 * torch.randn(B, L, D, device=device)  # (B, L, D): mean square 2.5e-3
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
causal = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))[None, None]
cos_hf, sin_hf = model.model.rotary_emb(x, pos)
ref_layer = hf_layer(x, attention_mask=causal, position_ids=pos,
                     position_embeddings=(cos_hf, sin_hf))

# %%
# Equal to Hugging Face's layer
# -----------------------------
# The random model's first layer loads into ours as it is; ours gives its output.
layer = LlamaDecoderLayer(D, Nh, Nkv, Dh, Dff, EPS).to(device)
layer.load_state_dict(hf_layer.state_dict(), strict=True)  # the same names: no map
cos, sin = rope_cos_sin(pos, Dh, BASE)  # (B, L, Dh) each
ours_layer = layer(x, cos, sin)  # (B, L, D)
print(f"max |ours - LlamaDecoderLayer| = {(ours_layer - ref_layer).abs().max():.1e}")
torch.testing.assert_close(ours_layer, ref_layer)

# %%
# Proof: each piece equals Hugging Face's
# ---------------------------------------
# The config is the one a reader would expect: the eager path, and the names of our
# layer exactly Hugging Face's. Then piece by piece, on the input ``x`` above. ``cos``
# and ``sin``
# against what ``LlamaRotaryEmbedding`` hands every layer (the base is 1000, where Llama
# 2 uses 10000 and Llama 3 500000, so a hard-coded base fails); the eager
# ``LlamaAttention`` masks nothing by itself, so it gets the additive causal mask,
# ``(1, 1, L, L)``, and returns its attention weights, which ours must equal too.
# ``LlamaDecoderLayer`` is called as ``LlamaModel`` calls it in transformers 5.23.
assert model.config._attn_implementation == "eager"
assert sorted(layer.state_dict()) == sorted(hf_layer.state_dict())  # 9 names alike
norm = layer.input_layernorm
assert RMSNorm(D).eps == LlamaConfig().rms_norm_eps  # the default eps: Llama's, 1e-6
ref = hf_layer.input_layernorm(x)
print(f"max |ours - LlamaRMSNorm| = {(norm(x) - ref).abs().max():.1e}")
torch.testing.assert_close(norm(x), ref)

print(f"cos, sin {tuple(cos.shape)}: max |ours - LlamaRotaryEmbedding| = "
      f"{(cos - cos_hf).abs().max():.1e}, {(sin - sin_hf).abs().max():.1e}")
torch.testing.assert_close(cos, cos_hf)
torch.testing.assert_close(sin, sin_hf)

h = norm(x)  # (B, L, D): what the layer's attention sees
out_attn, weights = layer.self_attn(h, cos, sin)  # (B, L, D), (B, Nh, L, L)
ref, weights_hf = hf_layer.self_attn(h, position_embeddings=(cos_hf, sin_hf),
                                     attention_mask=causal)
print(f"max |ours - LlamaAttention| = {(out_attn - ref).abs().max():.1e}, attention "
      f"weights {(weights - weights_hf).abs().max():.1e}")
torch.testing.assert_close(out_attn, ref)
torch.testing.assert_close(weights, weights_hf)
# The future gets weight exactly 0 (exp(-inf)); a finite mask would leave e.g. e^-100.
print(f"largest weight on a future key: ours {weights[:, :, future].max():.0f}, "
      f"LlamaAttention {weights_hf[:, :, future].max():.0f}")
assert (weights[:, :, future] == 0).all() and (weights_hf[:, :, future] == 0).all()

mlp = layer.mlp
ref = hf_layer.mlp(h)
print(f"max |ours - LlamaMLP| = {(mlp(h) - ref).abs().max():.1e}")
torch.testing.assert_close(mlp(h), ref)

# The eager layer masks nothing by itself: without a mask, token l sees the future.
no_mask = hf_layer(x, attention_mask=None, position_embeddings=(cos_hf, sin_hf))
print(f"LlamaDecoderLayer without attention_mask: max |diff| = "
      f"{(no_mask - ref_layer).abs().max():.2f}")
assert (no_mask - ref_layer).abs().max() > 0.1  # the future leaks in
torch.testing.assert_close(no_mask[:, -1], ref_layer[:, -1])  # last token: no future

# %%
# Proof: two RoPE layouts, one rotation
# -------------------------------------
# Hugging Face's Llama pairs channel ``i`` with ``i + Dh/2`` (rotate half); GPT-J and
# RoFormer pair adjacent channels ``(2i, 2i+1)`` at the same angles. Listing the even
# channels first, then the odd ones, turns adjacent pairs into halves: permute, rotate
# half, permute back, and one gets GPT-J's RoPE. Without the permutation the two
# differ, so weights trained for one give another model under the other.
def rope_adjacent(x, cos, sin):
    """GPT-J / RoFormer pairing (2i, 2i+1) at rotate-half's angles: x (..., L, Dh)."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]  # one angle per pair: (..., L, Dh/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


# %%
halves = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)]).to(device)
t = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh)
c4, s4 = cos[:, None], sin[:, None]  # (B, 1, L, Dh)
via_halves = torch.empty_like(t)
via_halves[..., halves] = rope(t[..., halves], c4, s4)
gap_layout = (rope_adjacent(t, c4, s4) - rope(t, c4, s4)).abs().max().item()
print(f"adjacent pairs vs permuted rotate-half: max|diff| = "
      f"{(rope_adjacent(t, c4, s4) - via_halves).abs().max():.1e}; "
      f"vs rotate-half itself: {gap_layout:.2f}")
torch.testing.assert_close(rope_adjacent(t, c4, s4), via_halves)
assert gap_layout > 0.1  # the same weights give another model under the other layout

# %%
# Proof: the whole model equals Hugging Face's
# --------------------------------------------
# The model embeds the tokens, computes ``cos`` and ``sin`` once from the position ids,
# runs the layers, applies a final RMSNorm and the LM head, a linear map to the
# vocabulary without bias, tied to the embedding when the config says so. Hugging Face
# keeps the embedding, the layers and the final norm in a ``LlamaModel`` under
# ``model.``; a ``ModuleDict`` gives ours the same names, so the whole state dict loads.
class Llama(nn.Module):
    """Token ids and positions (B, L) -> logits (B, L, V) and the hidden states."""

    def __init__(self, V, D, Nh, Nkv, Dh, Dff, n_layers, eps, base, tie):
        super().__init__()
        self.Dh, self.base = Dh, base
        self.model = nn.ModuleDict({  # Hugging Face's LlamaModel: model.embed_tokens..
            "embed_tokens": nn.Embedding(V, D),
            "layers": nn.ModuleList(LlamaDecoderLayer(D, Nh, Nkv, Dh, Dff, eps)
                                    for _ in range(n_layers)),
            "norm": RMSNorm(D, eps),
        })
        self.lm_head = nn.Linear(D, V, bias=False)
        if tie:
            self.lm_head.weight = self.model.embed_tokens.weight  # one tensor, two uses

    def forward(self, ids, pos):  # ids, pos (B, L)
        """-> logits (B, L, V); the embeddings and each layer's output (B, L, D)."""
        x = self.model.embed_tokens(ids)  # (B, L, D)
        cos, sin = rope_cos_sin(pos, self.Dh, self.base)  # once, for every layer
        hidden = [x]
        for layer in self.model.layers:
            x = layer(x, cos, sin)
            hidden.append(x)
        return self.lm_head(self.model.norm(x)), hidden


def llama_from_hf(hf):
    """Our Llama with the config and the weights of a Hugging Face LlamaForCausalLM."""
    c = hf.config
    ours = Llama(c.vocab_size, c.hidden_size, c.num_attention_heads,
                 c.num_key_value_heads, c.head_dim, c.intermediate_size,
                 c.num_hidden_layers, c.rms_norm_eps, c.rope_parameters["rope_theta"],
                 c.tie_word_embeddings).to(hf.device)
    ours.load_state_dict(hf.state_dict(), strict=True)  # the same names, no map
    return ours


# %%
ids = torch.randint(3, V, (B, L), device=device)  # (B, L), no special tokens
ours = llama_from_hf(model)
assert sorted(ours.state_dict()) == sorted(model.state_dict())  # every name alike
logits, hidden = ours(ids, pos)  # (B, L, V)
with torch.no_grad():
    out = model(ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                use_cache=False, output_hidden_states=True)
print(f"{len(model.state_dict())} tensors loaded by name; logits "
      f"{tuple(logits.shape)}: max |ours - LlamaForCausalLM| = "
      f"{(logits - out.logits).abs().max():.1e}")
torch.testing.assert_close(logits, out.logits)

# ``hidden_states`` (with ``output_hidden_states=True``) are the embeddings and the
# output of every layer but the last, whose entry is replaced by the *normed* final
# output. With ``use_cache=False`` and no ``attention_mask``, transformers 5.23 reads
# position ids that jump (as row 1's do) as several sequences packed in one row, and
# masks each from the others; the all-ones ``attention_mask`` above says there is one
# sequence per row. (With a cache, as ``use_cache=True`` makes, it never looks.)
assert len(out.hidden_states) == 3
torch.testing.assert_close(hidden[0], out.hidden_states[0])  # the embeddings
torch.testing.assert_close(hidden[1], out.hidden_states[1])  # after layer 0
torch.testing.assert_close(ours.model.norm(hidden[2]), out.hidden_states[2])  # normed
last_gap = (hidden[2] - out.hidden_states[2]).abs().max().item()
print(f"hidden_states[-1] vs layer 1's raw output: max |diff| = {last_gap:.2f}")
assert last_gap > 0.1  # the normed output, not the layer's
assert ours.lm_head.weight is not ours.model.embed_tokens.weight  # untied, as config
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

# The same config with tie_word_embeddings=True (False by default for Llama; the small
# Llama 3.2 checkpoints tie): head and embedding are one tensor, in both models.
tied_cfg = LlamaConfig(**{**cfg.to_dict(), "tie_word_embeddings": True})
tied = LlamaForCausalLM(tied_cfg).to(device).eval()
with torch.no_grad():
    for p in tied.parameters():
        p.add_(0.1 * torch.randn_like(p))
assert tied.lm_head.weight is tied.model.embed_tokens.weight
ours_tied = llama_from_hf(tied)
assert ours_tied.lm_head.weight is ours_tied.model.embed_tokens.weight
with torch.no_grad():
    ref = tied(ids, position_ids=pos).logits  # with a cache: one sequence per row
logits_tied, _ = ours_tied(ids, pos)
print(f"tied: max |ours - LlamaForCausalLM| = {(logits_tied - ref).abs().max():.1e}")
torch.testing.assert_close(logits_tied, ref)

# %%
# Try it: which wrong piece costs the most?
# -----------------------------------------
# One thing wrong: RoPE's base 10000, positions ``0 .. L-1``, adjacent pairs (GPT-J),
# RMSNorm without ``eps``, or ``gate_proj`` and ``up_proj`` swapped. Does any of them
# keep our layer within float32's tolerance (``1e-5``) of ``LlamaDecoderLayer``?
import copy

# Each piece first, on its own: the base shows in cos at these positions, eps in the
# norm at this mean square, the swap in the MLP.

cos_10k, _ = rope_cos_sin(pos, Dh, 10000.0)
gap_theta = (cos_10k - cos_hf).abs().max().item()
no_eps_norm = copy.deepcopy(norm)
no_eps_norm.eps = 0.0
gap_eps = (no_eps_norm(x) - hf_layer.input_layernorm(x)).abs().max().item()
up, gate = mlp.up_proj(h), mlp.gate_proj(h)  # (B, L, Dff) each
swapped = mlp.down_proj(up * torch.sigmoid(up) * gate)  # SiLU on the wrong one
gap_swap = (swapped - hf_layer.mlp(h)).abs().max().item()
print(f"with base 10000: max |cos - HF's| = {gap_theta:.2f}")
print(f"RMSNorm without eps: {gap_eps:.2f}; gate and up swapped: {gap_swap:.2f}")
assert gap_theta > 0.1  # the base is visible at these positions
assert gap_eps > 0.1  # visible: eps is 40 % of the mean square here
assert gap_swap > 0.1  # another function

# %%
# Adjacent pairs on these weights are rotate-half on weights whose ``q`` and ``k`` rows
# are reordered within each head, even channels first (the permutation above, applied
# to ``q = W x``): the logits are the same, and so that is the layer built here.
adjacent = copy.deepcopy(layer)
with torch.no_grad():
    for proj in (adjacent.self_attn.q_proj, adjacent.self_attn.k_proj):
        proj.weight.copy_(proj.weight.view(-1, Dh, D)[:, halves].reshape(-1, D))
q = layer.self_attn.q_proj(h).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
k = layer.self_attn.k_proj(h).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
k = k.repeat_interleave(Nh // Nkv, dim=1)  # (B, Nh, L, Dh): query head h reads h // G
logits_adj = rope_adjacent(q, c4, s4) @ rope_adjacent(k, c4, s4).mT / math.sqrt(Dh)
weights_adj = logits_adj.masked_fill(future, float("-inf")).softmax(dim=-1)
torch.testing.assert_close(adjacent.self_attn(h, cos, sin)[1], weights_adj)

no_eps = copy.deepcopy(layer)
no_eps.input_layernorm.eps = no_eps.post_attention_layernorm.eps = 0.0
gate_up = copy.deepcopy(layer)
gate_up.mlp.gate_proj, gate_up.mlp.up_proj = gate_up.mlp.up_proj, gate_up.mlp.gate_proj
positions_0_to_L = torch.arange(L, device=device).expand(B, L)
wrong = {
    "rope_theta 10000": layer(x, *rope_cos_sin(pos, Dh, 10000.0)),
    "positions 0..L-1": layer(x, *rope_cos_sin(positions_0_to_L, Dh, BASE)),
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
fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="none")  # fixed margins: faster
fig.subplots_adjust(left=0.24, right=0.97, bottom=0.15, top=0.84)
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
# LLaMA :footcite:p:`Touvron2023`; Llama 2 :footcite:p:`Touvron2023b` (grouped-query
# attention in its 34B and 70B models); Llama 3 :footcite:p:`Dubey2024`; RMSNorm
# :footcite:p:`Zhang2019`; RoPE :footcite:p:`Su2021`; SwiGLU :footcite:p:`Shazeer2020`;
# GQA :footcite:p:`Ainslie2023`. APIs: ``transformers.LlamaConfig`` and
# ``transformers.LlamaForCausalLM``, with ``LlamaDecoderLayer``, ``LlamaRMSNorm``,
# ``LlamaRotaryEmbedding``, ``LlamaAttention`` and ``LlamaMLP`` inside it.
#
# .. footbibliography::
