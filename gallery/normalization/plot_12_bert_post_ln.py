"""
Post-LN: BERT's encoder layer
=============================

BERT (Devlin et al., 2018) is
:doc:`post-LN </generated/transformer/plot_05_transformer_block>`: it normalizes the
residual stream *after* each sum, so the stream every layer hands on is a LayerNorm's
output. This page writes BERT's layer from scratch (LayerNorm, attention with biases and
a padding mask, an exact-GELU MLP) and proves it equal to Hugging Face's ``BertLayer``.

**You will learn**

- what post-LN computes, and why its stream is a LayerNorm's output
- how an encoder masks padding keys, and how ``BertLayer`` wants that mask
- how to write BERT's layer from scratch, equal to ``BertLayer``
- what each detail is worth: the mask, the placement, eps, the exact GELU

**Prerequisites:** :doc:`plot_11_norm_placement` (the four placements),
:doc:`/generated/normalization/plot_04_layernorm` (LayerNorm),
:doc:`/generated/transformer/plot_02_multihead_attention` (multi-head attention).
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. The model is built from a small random config; nothing is
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
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# With ``f`` a sublayer (attention, then the MLP), post-LN is ``x <- LN(x + f(x))``,
# twice per layer, with LayerNorm (mean removed, biased variance, weight and bias):
#
# .. math::
#
#    x \leftarrow \mathrm{LN}(x + f(x)), \qquad
#    \mathrm{LN}(z) = \frac{z - \mu(z)}{\sqrt{\sigma^2(z) + \epsilon}} \odot \gamma
#    + \beta .
#
# BERT's layer is an encoder's: every token sees every key (no
# :doc:`causal mask </generated/transformer/plot_04_causal_attention>`, no
# :doc:`RoPE </generated/positional/plot_04_rope>`: BERT adds
# :doc:`learned positions </generated/positional/plot_03_learned_absolute>` before the
# first layer), except keys that are padding. The attention and the MLP have biases, and
# the MLP is ``down(GELU(up(x)))`` with the
# :doc:`exact GELU </generated/transformer/plot_03_conv1d_feedforward>`,
# :math:`z\,\Phi(z)` (``Phi`` the standard normal CDF).
fig, ax = plt.subplots(figsize=(8, 2.2), layout="constrained")
ax.annotate("", (8.6, 0), (-0.4, 0), arrowprops=dict(arrowstyle="->", color="gray"))
for a, f in ((0, "attention\n(padding keys masked)"), (4, "MLP\n(exact GELU)")):
    ax.plot([a, a, a + 2, a + 2], [0, 1, 1, 0], color="gray")  # the branch through f
    ax.text(a + 1, 1, f, ha="center", va="center", fontsize=9,
            bbox=dict(boxstyle="round", fc="#9ecae1"))
    ax.text(a + 2, 0, "+", ha="center", va="center", bbox=dict(boxstyle="circle",
                                                               fc="w"))
    ax.text(a + 3, 0, "LayerNorm", ha="center", va="center", fontsize=9,
            bbox=dict(boxstyle="round", fc="#fdae6b"))
ax.text(-0.5, 0, "x", ha="right", va="center", style="italic")
ax.text(8.7, 0, "out", va="center")
ax.set(xlim=(-1, 9.4), ylim=(-0.5, 1.5),
       title="post-LN: each sum goes through a LayerNorm, so the stream is its output")
ax.axis("off")
plt.show()

# %%
# From scratch
# ------------
# LayerNorm, attention with biases that masks padding keys and nothing else, the exact
# GELU, the MLP, and the layer: ``placement`` is ``"post"`` (BERT) or ``"pre"``
# (the same two norms moved before their sublayers, for the exercise below).


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(biased var + eps) * weight + bias over the last dim."""

    def __init__(self, D, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,)
        self.bias = nn.Parameter(torch.zeros(D))  # (D,)
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
    """The exact GELU, z * Phi(z)."""
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


class EncoderMLP(nn.Module):
    """down(act(up(x))): (B, L, D) -> (B, L, Dff) -> (B, L, D)."""

    def __init__(self, D, Dff, act):
        super().__init__()
        self.up, self.down, self.act = nn.Linear(D, Dff), nn.Linear(Dff, D), act

    def forward(self, x):  # (B, L, D) -> (B, L, D)
        return self.down(self.act(self.up(x)))


class EncoderBlock(nn.Module):
    """BERT's layer: post-LN around padding-masked attention, then a GELU MLP."""

    def __init__(self, D, Nh, Dff, eps):
        super().__init__()
        self.placement = "post"
        self.attn, self.mlp = EncoderAttention(D, Nh), EncoderMLP(D, Dff, gelu_erf)
        self.norms = nn.ModuleDict({"attn_sum": LayerNorm(D, eps),
                                    "mlp_sum": LayerNorm(D, eps)})

    def sublayer(self, x, f, name):  # one residual step around sublayer f
        if self.placement == "pre":
            return x + f(self.norms[name + "_in"](x))
        return self.norms[name + "_sum"](x + f(x))  # post

    def forward(self, x, pad):  # (B, L, D), pad (B, L) -> (B, L, D)
        x = self.sublayer(x, lambda h: self.attn(h, pad), "attn")
        return self.sublayer(x, self.mlp, "mlp")


# %%
# The decisive property of post-LN, on a fresh layer (LayerNorm weight one, bias
# zero) and an input of RMS 10: every output token has mean 0 and variance
# ``s / (s + eps)`` below 1, where ``s`` is its pre-norm variance, whatever the input's
# scale.
D, Nh, Dff, EPS = 64, 4, 128, 1e-3
B, L = 2, 12
fresh = EncoderBlock(D, Nh, Dff, EPS).to(device)
big = 10 * torch.randn(B, L, D, device=device)  # (B, L, D), RMS 10
no_pad = torch.zeros(B, L, dtype=torch.bool, device=device)
with torch.no_grad():
    y = fresh(big, no_pad)  # (B, L, D)
    mid = fresh.sublayer(big, lambda h: fresh.attn(h, no_pad), "attn")
    s = (mid + fresh.mlp(mid)).var(-1, unbiased=False)  # (B, L): pre-norm variance
print(f"output token means: max |mean| {y.mean(-1).abs().max():.1e}; variances "
      f"{y.var(-1, unbiased=False).min():.4f} to {y.var(-1, unbiased=False).max():.4f}")
torch.testing.assert_close(y.mean(-1), torch.zeros(B, L, device=device))
torch.testing.assert_close(y.var(-1, unbiased=False), s / (s + EPS))

# %%
# Proof: equal to Hugging Face's ``BertLayer``
# --------------------------------------------
# ``BertLayer`` from a random ``BertConfig`` (the same ``D = 64``, ``Nh = 4``,
# ``Dff = 128``, eager attention, eval mode: no dropout; every parameter moved off its
# init). Its eager attention *adds* ``attention_mask`` to the logits, so it wants what
# ``BertModel`` builds from a (B, L) padding mask: a float (B, 1, L, L) tensor, 0 where
# a key is seen and float32's most negative number where it is padding. We build it by
# hand and check it equals ``create_bidirectional_mask``'s. The second sequence ends in
# 4 padding tokens; ours gets the same padding as a boolean (B, L) key mask.
import transformers
from transformers import BertConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer

print(f"transformers {transformers.__version__}")
bert_cfg = BertConfig(hidden_size=D, num_attention_heads=Nh, intermediate_size=Dff,
                      hidden_act="gelu", layer_norm_eps=EPS,
                      attn_implementation="eager")
assert bert_cfg._attn_implementation == "eager"
hf_bert = BertLayer(bert_cfg).to(device).eval()
with torch.no_grad():
    for p in hf_bert.parameters():
        p.add_(0.1 * torch.randn_like(p))

x = 0.05 * torch.randn(B, L, D, device=device)  # (B, L, D)
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

# %%
# The names: BERT nests its modules (``attention.self.query``, ``intermediate.dense``,
# ``output.LayerNorm``), so this one map sends each of our parameters to its, strictly.
NAMES = {
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
for ours_name, theirs in NAMES.items():
    if "norm" in ours_name:
        print(f"bert: {ours_name:22s} <- {theirs}")
bert = EncoderBlock(D, Nh, Dff, EPS).to(device)
state = hf_bert.state_dict()
assert sorted(NAMES.values()) == sorted(state)
bert.load_state_dict({a: state[b] for a, b in NAMES.items()}, strict=True)
with torch.no_grad():
    ref = hf_bert(x, attention_mask=additive)
    out = bert(x, pad)
print(f"bert  : max |ours - BertLayer| = {(out - ref).abs().max():.1e}")
torch.testing.assert_close(out, ref)

# %%
# ``layer_norm_eps = 1e-3`` (BERT's is 1e-12) with this input (RMS 0.05): the first
# norm's input has a variance of :measured:`first_var_lo:.3f` to
# :measured:`first_var_hi:.3f` over ``D`` (printed below), where eps is visible.
seen = []  # what the block's first LayerNorm receives, recorded by a hook
hook = bert.norms["attn_sum"].register_forward_hook(lambda m, i, o: seen.append(i[0]))
with torch.no_grad():
    first_sum = x + bert.attn(x, pad)  # (B, L, D): the first LayerNorm's input
    bert(x, pad)
hook.remove()
torch.testing.assert_close(first_sum, seen[0])  # it is that norm's input
first_var = first_sum.var(-1, unbiased=False)  # (B, L): what the LayerNorm divides by
first_var_lo, first_var_hi = first_var.min().item(), first_var.max().item()
print(f"first LayerNorm's input: variance over D {first_var_lo:.3f} to "
      f"{first_var_hi:.3f}, against eps = {EPS}")
assert ((first_var_lo <= first_var) & (first_var <= first_var_hi)).all()  # the range
assert ((10 * EPS < first_var) & (first_var < 100 * EPS)).all()  # eps a 1 to 10 % term

# %%
# Try it: which detail of BERT's layer costs the most?
# ----------------------------------------------------
# Take the layer that matches ``BertLayer`` and change one thing: drop the padding
# mask, move each LayerNorm before its sublayer (pre-LN, same weights), set eps to 0,
# use the tanh GELU; or give Hugging Face's layer a boolean mask instead of the
# additive one. Which misses by the most? Does the boolean mask raise an error?
import copy


# Copied from normalization/plot_11_norm_placement.py: variant
def variant(block, change, ref, *inputs):
    """Max |block - ref| for a copy of `block` changed in place by `change`."""
    block = copy.deepcopy(block)
    change(block)
    with torch.no_grad():
        return (block(*inputs) - ref).abs().max().item()


def bert_as_pre(b):  # the same two LayerNorms, now before attention and the MLP
    b.placement = "pre"
    b.norms = nn.ModuleDict({"attn_in": b.norms["attn_sum"],
                             "mlp_in": b.norms["mlp_sum"]})


def bert_eps_0(b):
    for n in b.norms.values():
        n.eps = 0.0


# Copied from transformer/plot_03_conv1d_feedforward.py: gelu_tanh
def gelu_tanh(x):
    """GPT-2's GELU: the tanh approximation, as its code writes it."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# %%
# Our tanh GELU is torch's ``gelu(approximate="tanh")``. Hugging Face's eager
# attention adds the boolean mask to the logits as 0 and 1 without complaint
# (asserted: the same output as the float mask 0 and 1). Every gap is at least 20
# times float32's tolerance (``1e-5`` absolute).
assert variant(bert, lambda b: None, ref, x, pad) < 1e-5  # the control: still matches
z = torch.linspace(-6, 6, 101, device=device)
torch.testing.assert_close(gelu_tanh(z), nn.functional.gelu(z, approximate="tanh"))
with torch.no_grad():
    bool_out = hf_bert(x, attention_mask=~pad[:, None, None, :])  # True: seen
    zero_one = hf_bert(x, attention_mask=(~pad[:, None, None, :]).float())
torch.testing.assert_close(bool_out, zero_one)  # True is added as 1, False as 0
bert_gaps = {
    "bert without padding mask": variant(bert, lambda b: None, ref, x,
                                         torch.zeros_like(pad)),
    "bert as pre-LN": variant(bert, bert_as_pre, ref, x, pad),
    "bert eps 0, not 1e-3": variant(bert, bert_eps_0, ref, x, pad),
    "bert tanh GELU": variant(bert, lambda b: setattr(b.mlp, "act", gelu_tanh),
                              ref, x, pad),
    "BertLayer, boolean mask": (bool_out - ref).abs().max().item(),
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
# References
# ----------
# BERT: :footcite:t:`Devlin2018`. Post-LN: :footcite:t:`Vaswani2017`.
#
# .. footbibliography::
