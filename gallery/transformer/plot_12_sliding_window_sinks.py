"""
Sliding-window attention and attention sinks
============================================

Mistral 7B (v0.1, with a window of 4096) lets each token attend only to the last ``W``
tokens; StreamingLLM keeps the first ``Ns`` tokens as well, as *attention sinks*;
gpt-oss gives each head a learned sink logit that takes a share of the softmax and is
dropped. This page builds the three from scratch and proves them against Hugging Face's
Mistral and gpt-oss and against a cache that evicts keys.

**You will learn**

- how a sliding window, and a window plus sinks, are boolean masks over ``(query, key)``
- why a window that covers the sequence is causal attention
- how a learned sink logit lets a head's weights sum to less than one
- why two windowed layers reach ``2 (W - 1)`` tokens back

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention` (the causal
mask), :doc:`/generated/positional/plot_04_rope` (RoPE),
:doc:`/generated/transformer/plot_10_gqa_mqa` (shared key/value heads).

.. index:: ! sliding window
.. index:: ! attention sinks
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
import torch.nn.functional as F
import transformers

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")

# %%
# The causal mask, copied verbatim from
# :doc:`/generated/transformer/plot_04_causal_attention`.


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# %%
# The idea
# --------
# ``keep[i, j]``: may query ``i`` look at key ``j`` (causal: ``j <= i``)? A window keeps
# the last ``W`` keys, its own included (cost ``O(L W)``, not ``O(L^2)``);
# StreamingLLM's sinks add the first ``Ns``:
#
# .. math::
#
#    \mathrm{keep}^{\mathrm{window}}_{ij} = [\, i - W < j \le i \,], \qquad
#    \mathrm{keep}^{\mathrm{sinks}}_{ij} = [\, j \le i \,]
#    \wedge \big([\, j > i - W \,] \vee [\, j < N_s \,]\big).
#
# gpt-oss's learned sink is one logit :math:`s_h` per head that joins each row of the
# softmax as an extra key with no value:
#
# .. math::
#
#    p_{ij} = \frac{e^{\ell_{ij}}}{e^{s_h} + \sum_{m} e^{\ell_{im}}},
#    \qquad \sum_j p_{ij} = 1 - \frac{e^{s_h}}{e^{s_h} + \sum_m e^{\ell_{im}}} < 1 ,
#
# the sums running over the keys that query ``i`` keeps: a head can put part of its
# attention "nowhere" instead of on some key. The three masks, for ``L = 12``,
# ``W = 4``, ``Ns = 2``, drawn with ``tril`` and ``triu``:
L, W, Ns = 12, 4, 2
ones = torch.ones(L, L, dtype=torch.bool)  # (L, L)
idea_masks = {"causal": ones.tril(),
              f"window W = {W}": ones.tril() & ones.triu(-(W - 1)),
              f"sinks Ns = {Ns} + window": ones.tril() & (ones.triu(-(W - 1))
                                                         | (torch.arange(L) < Ns))}
fig, axes = plt.subplots(1, 3, figsize=(9, 4.2), sharey=True, layout="constrained")
for ax, (name, keep) in zip(axes, idea_masks.items()):
    ax.imshow(keep, cmap="Greys", vmin=0, vmax=1.5)
    ax.grid(False)
    ax.set_title(f"{name}: {keep.sum().item()} keys")
fig.supxlabel("key position j (grey: attended)")  # one label, below all three
axes[0].set_ylabel("query position i")
fig.suptitle(f"A window keeps at most W = {W} keys per query, O(L W) in all;\n"
             f"sinks keep the first Ns = {Ns} keys as well")
plt.show()

# %%
# Three masks from scratch
# ------------------------
# Each ``True`` where a query keeps a key (the causal mask is in Setup).
def window_mask(L, W, device=None):
    """(L, L) bool: query i keeps the W keys i - W < j <= i."""
    i = torch.arange(L, device=device)[:, None]  # (L, 1)
    j = torch.arange(L, device=device)[None, :]  # (1, L)
    return (j <= i) & (j > i - W)


def sink_window_mask(L, Ns, W, device=None):
    """(L, L) bool: the window of W keys plus the first Ns keys (the sinks)."""
    i = torch.arange(L, device=device)[:, None]  # (L, 1)
    j = torch.arange(L, device=device)[None, :]  # (1, L)
    return (j <= i) & ((j > i - W) | (j < Ns))


# %%
# Query ``i`` has ``i + 1`` keys so far; the window keeps ``min(i + 1, W)``, the sinks
# add up to ``Ns``.
for name, keep in (("window", window_mask(L, W, device)),
                   ("sinks+window", sink_window_mask(L, Ns, W, device))):
    print(f"{name:>12}: keys per query {keep.sum(dim=-1).tolist()}")
n_keys = torch.arange(1, L + 1, device=device)
assert torch.equal(window_mask(L, W, device).sum(dim=-1), n_keys.clamp(max=W))
assert torch.equal(sink_window_mask(L, Ns, W, device).sum(dim=-1),
                   n_keys.clamp(max=Ns + W))

# %%
# Attention with a mask, and with learned sinks
# ---------------------------------------------
# Masked logits are ``-inf``; ``sinks`` (one logit per head, or ``None``) joins the
# denominator.
def attend_with_sinks(q, k, v, keep, sinks=None):
    """q, k, v (B, Nh, L, Dh), keep (L, L) bool, sinks (Nh,) or None.

    Returns the output (B, Nh, L, Dh) and the weights (B, Nh, L, L)."""
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~keep, float("-inf"))  # (B, Nh, L, L)
    if sinks is None:
        p = logits.softmax(dim=-1)
    else:
        s = sinks.view(1, -1, 1, 1)  # (1, Nh, 1, 1)
        top = torch.maximum(logits.amax(dim=-1, keepdim=True), s)  # for a stable exp
        e = (logits - top).exp()  # (B, Nh, L, L)
        p = e / (e.sum(dim=-1, keepdim=True) + (s - top).exp())
    return torch.einsum("bhlm,bhmd->bhld", p, v), p


# %%
# A window over the whole sequence is causal
# ------------------------------------------
# With ``W >= L`` no key is out of reach: the window equals
# :func:`~torch.nn.functional.scaled_dot_product_attention` with ``is_causal=True``.
# With ``W < L`` the first ``W`` queries agree; every later one has lost keys.
B, Nh, Dh = 2, 4, 16
q, k, v = torch.randn(3, B, Nh, L, Dh, device=device).unbind(0)  # 3 x (B, Nh, L, Dh)
causal_ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, Nh, L, Dh)
for W_try in (L, L + 5):
    out, _ = attend_with_sinks(q, k, v, window_mask(L, W_try, device))
    print(f"W = {W_try:2d} >= L: max|window - causal| = "
          f"{(out - causal_ref).abs().max().item():.1e}",
          end="; " if W_try == L else "\n")  # both on one line
    torch.testing.assert_close(out, causal_ref)
out, _ = attend_with_sinks(q, k, v, window_mask(L, W, device))
per_query = (out - causal_ref).abs().amax(dim=(0, 1, 3))  # (L,): max over B, Nh, Dh
print(f"W = {W:2d} <  L: max|window - causal| per query\n    "
      + " ".join(f"{d:.0e}" if d < 1e-3 else f"{d:.2f}" for d in per_query.tolist()))
torch.testing.assert_close(out[:, :, :W], causal_ref[:, :, :W])
assert (per_query[W:] > 0.1).all()  # from query W on, every query has lost a key

# %%
# Proof: the idea's figure drew these masks
# -----------------------------------------
# The figure built its masks with ``tril`` and ``triu``; the functions above give the
# same ones.
assert torch.equal(causal_mask(L).cpu(), idea_masks["causal"])
assert torch.equal(window_mask(L, W).cpu(), idea_masks[f"window W = {W}"])
assert torch.equal(sink_window_mask(L, Ns, W).cpu(),
                   idea_masks[f"sinks Ns = {Ns} + window"])
print("causal_mask, window_mask, sink_window_mask: the idea's three masks")

# %%
# Proof: Hugging Face's Mistral keeps exactly ``W`` keys
# ------------------------------------------------------
# ``MistralConfig(sliding_window=W)`` builds its mask in ``masking_utils.py``
# (``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``, and'ed with
# ``kv_idx <= q_idx``). A tiny random Mistral (2 layers, ``D = 64``, ``Nh = 4`` query
# heads sharing ``Nkv = 2`` key/value heads) runs on the eager path with
# ``L = 12 > W = 4``, and a forward hook on each attention layer keeps what the model
# gave it and got back: its input, the additive mask, its output and its attention
# weights. Every parameter is moved off its init first.
from transformers import MistralConfig, MistralModel

cfg = MistralConfig(
    vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=Nh, num_key_value_heads=2, sliding_window=W,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 1e4},
    pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager",
)
mistral = MistralModel(cfg).to(device).eval()
assert mistral.config._attn_implementation == "eager"
with torch.no_grad():
    for p in mistral.parameters():
        p.add_(0.1 * torch.randn_like(p))

# %%
# A forward hook on each attention layer records what it saw and returned.


def run_and_record(model, ids):
    """Run the model on ids (B, L); per layer, what its self_attn saw and returned."""
    seen = {}

    def record(module, args, kwargs, output):
        attn_out, weights = output  # (B, L, D), (B, Nh, L, L)
        seen[module.layer_idx] = (kwargs["hidden_states"], kwargs["attention_mask"],
                                  attn_out, weights)

    hooks = [layer.self_attn.register_forward_hook(record, with_kwargs=True)
             for layer in model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for hook in hooks:
        hook.remove()
    return seen


# %%
# The model's mask, as the first layer received it: ``0`` where kept.
ids = torch.randint(3, cfg.vocab_size, (B, L), device=device)
seen = run_and_record(mistral, ids)
hf_mask = seen[0][1]  # (B, 1, L, L) float: 0 where kept
hf_keep = hf_mask[0, 0] == 0  # (L, L)
lowest = torch.finfo(hf_mask.dtype).min
print(f"HF's mask {tuple(hf_mask.shape)}, {hf_mask.dtype}: 0 or {hf_mask.min():.2e}")
assert ((hf_mask == 0) | (hf_mask == lowest)).all()  # finfo.min, not -inf

# %%
# Hugging Face keeps exactly ``W`` keys, ``i - W < j <= i``: one key more or one key
# less is another mask. Mistral's first one-file reference code (``one_file_ref.py`` in
# ``mistral-src``, 2023) banded its mask with ``torch.triu(mask, diagonal=-W)``, which
# keeps ``i - W <= j <= i``: ``W + 1`` keys, as the Mistral paper's wording "positions
# between ``i - W`` and ``i``" reads. The two conventions differ by one diagonal.
ones = torch.ones(L, L, device=device)
one_file_ref = torch.triu(torch.tril(ones), diagonal=-W) == 1  # (L, L)
for name, keep in (("W - 1", window_mask(L, W - 1, device)),
                   ("W", window_mask(L, W, device)),
                   ("W + 1", window_mask(L, W + 1, device)),
                   ("causal", causal_mask(L, device)), ("triu(-W)", one_file_ref)):
    print(f"ours with {name:>8}: {(keep != hf_keep).sum().item():2d} of {L * L} "
          f"entries differ from HF's mask")
assert torch.equal(window_mask(L, W, device), hf_keep)
assert not torch.equal(window_mask(L, W - 1, device), hf_keep)
assert not torch.equal(window_mask(L, W + 1, device), hf_keep)
assert not torch.equal(causal_mask(L, device), hf_keep)
assert torch.equal(one_file_ref, window_mask(L, W + 1, device))  # W + 1 keys per query
for layer_idx, (_, mask, _, weights) in seen.items():  # every layer, every head
    assert torch.equal(mask, hf_mask)
    assert (weights[:, :, ~hf_keep] == 0).all() and (weights[:, :, hf_keep] > 0).all()
print("HF's weights, both layers: exactly 0 outside the window, > 0 inside it")

# %%
# Proof: our layer equals Hugging Face's ``MistralAttention``
# -----------------------------------------------------------
# Our layer, from scratch. Mistral's attention: bias-free projections, rotary embeddings
# on ``q`` and ``k`` (the rotate-half layout of
# :doc:`/generated/positional/plot_04_rope`, ``base`` its RoPE base), ``Nkv`` key/value
# heads each shared by ``Nh / Nkv`` consecutive query heads, then ``attend_with_sinks``.
# gpt-oss, below, adds biases and the learned sinks. The parameters carry Hugging Face's
# names, so its weights load strictly, as they are.
from torch import nn


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


class WindowAttention(nn.Module):
    """Attention on (B, L, D) with Nkv shared key/value heads, RoPE, a keep mask and,
    optionally, one learned sink logit per head."""

    def __init__(self, D, Nh, Nkv, Dh, base, bias=False, sinks=False):
        super().__init__()
        self.Nh, self.Nkv, self.Dh, self.base = Nh, Nkv, Dh, base
        self.q_proj = nn.Linear(D, Nh * Dh, bias=bias)
        self.k_proj = nn.Linear(D, Nkv * Dh, bias=bias)
        self.v_proj = nn.Linear(D, Nkv * Dh, bias=bias)
        self.o_proj = nn.Linear(Nh * Dh, D, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(Nh)) if sinks else None

    def rotated_qk(self, x):
        """x (B, L, D) -> rotated q (B, Nh, L, Dh), k repeated to (B, Nh, L, Dh)."""
        B, L, D = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        q = self.q_proj(x).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.k_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        cos, sin = rope_cos_sin(torch.arange(L, device=x.device), Dh, self.base)
        q, k = rope(q, cos, sin), rope(k, cos, sin)  # cos, sin (L, Dh)
        # query head h reads key/value head h // (Nh / Nkv), as in repeat_kv
        return q, k.repeat_interleave(Nh // Nkv, dim=1)

    def forward(self, x, keep):
        B, L, D = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        q, k = self.rotated_qk(x)  # (B, Nh, L, Dh) each
        v = self.v_proj(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        v = v.repeat_interleave(Nh // Nkv, dim=1)  # (B, Nh, L, Dh)
        y, p = attend_with_sinks(q, k, v, keep, self.sinks)  # y (B, Nh, L, Dh)
        return self.o_proj(y.transpose(1, 2).reshape(B, L, Nh * Dh)), p  # (B, L, D)


def window_attention_from(hf_attn, device, **kwargs):
    """Our WindowAttention carrying the weights of a Hugging Face attention layer."""
    c = hf_attn.config
    ours = WindowAttention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                           hf_attn.head_dim, c.rope_parameters["rope_theta"], **kwargs)
    state = hf_attn.state_dict()
    assert sorted(ours.state_dict()) == sorted(state)  # the same names, every tensor
    ours.load_state_dict(state, strict=True)
    return ours.to(device)


# %%
# In both layers our attention, fed the input the model gave Hugging Face's, returns the
# same output and the same weights with our window mask. With a window one key narrower
# or wider, or with no window at all, it does not.
for layer_idx, (x, _, hf_out, hf_p) in seen.items():
    ours = window_attention_from(mistral.layers[layer_idx].self_attn, device)
    with torch.no_grad():
        out, p = ours(x, window_mask(L, W, device))  # (B, L, D), (B, Nh, L, L)
        wrong = {name: (ours(x, keep)[0] - hf_out).abs().max().item()
                 for name, keep in (("W - 1", window_mask(L, W - 1, device)),
                                    ("W + 1", window_mask(L, W + 1, device)),
                                    ("causal", causal_mask(L, device)))}
    print(f"layer {layer_idx}: max|ours - HF| output {(out - hf_out).abs().max():.1e}, "
          f"weights {(p - hf_p).abs().max():.1e}\n    with the wrong mask: "
          + ", ".join(f"{n} {g:.2f}" for n, g in wrong.items()))
    torch.testing.assert_close(out, hf_out)
    torch.testing.assert_close(p, hf_p)
    assert min(wrong.values()) > 0.1  # each wrong mask is another layer

# %%
# Proof: StreamingLLM's sink mask equals a cache that evicts
# ----------------------------------------------------------
# StreamingLLM streams text with a key/value cache of fixed size ``Ns + W``: the first
# ``Ns`` tokens stay, and once the cache is full the oldest of the others is evicted.
# ``transformers`` 5.23 has no implementation to compare with: the ``SinkCache`` of
# its 4.x versions became a ``custom_generate`` repository on the Hub, which this
# offline page does not download.
print(f"transformers {transformers.__version__} has SinkCache: "
      f"{hasattr(transformers, 'SinkCache')}")
assert not hasattr(transformers, "SinkCache")

# %%
# The independent reference is the cache itself: tokens arrive one by one, their keys
# and values are appended to Python lists, the evicted ones are deleted from the lists,
# and each query runs plain attention, with no mask, over what is left. Our mask gives
# the same output for every query. The ``q, k`` here carry no position; StreamingLLM
# also numbers positions inside the cache, which this check does not cover.
cache_k, cache_v, streamed = [], [], []
for t in range(L):
    cache_k.append(k[:, :, t])  # (B, Nh, Dh)
    cache_v.append(v[:, :, t])
    if len(cache_k) > Ns + W:  # full: evict the oldest token after the sinks
        del cache_k[Ns], cache_v[Ns]
    K, V = torch.stack(cache_k, dim=2), torch.stack(cache_v, dim=2)  # (B, Nh, n, Dh)
    w = (torch.einsum("bhd,bhnd->bhn", q[:, :, t], K) / math.sqrt(Dh)).softmax(dim=-1)
    streamed.append(torch.einsum("bhn,bhnd->bhd", w, V))  # (B, Nh, Dh)
streamed = torch.stack(streamed, dim=2)  # (B, Nh, L, Dh)
out_sinks, p_sinks = attend_with_sinks(q, k, v, sink_window_mask(L, Ns, W, device))
print(f"cache of {len(cache_k)} entries; max|sink mask - cache| = "
      f"{(out_sinks - streamed).abs().max():.1e}")
torch.testing.assert_close(out_sinks, streamed)

# %%
# Proof: gpt-oss's learned sinks equal Hugging Face's
# ---------------------------------------------------
# A tiny random gpt-oss (2 layers: the first with a sliding window of ``W``, the second
# full, as ``layer_types`` alternates; 2 experts, eager attention). Like the real one,
# its heads are not ``D / Nh`` wide: ``Nh Dh = 4 x 8 = 32`` against ``D = 64`` (gpt-oss:
# ``64 x 64 = 4096`` against ``2880``). Its attention has biases (so do the MoE MLP's
# router and experts, listed below; that MLP is not compared here) and a parameter
# ``sinks`` of one logit per head, which ``eager_attention_forward`` in
# ``modeling_gpt_oss.py`` appends as a last column of the logits and drops after the
# softmax. The sinks start near zero; they are moved here to ``-1, 0.5, 2, 3.5`` (plus
# noise), so that they take between a few percent and nearly all of a row's mass.
from transformers import GptOssConfig, GptOssModel

gcfg = GptOssConfig(
    vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=Nh, num_key_value_heads=2, head_dim=8, sliding_window=W,
    num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 1e4},
    pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager",
)
print(f"layer_types: {gcfg.layer_types}")
gpt_oss = GptOssModel(gcfg).to(device).eval()
assert gpt_oss.config._attn_implementation == "eager"
with torch.no_grad():
    for p in gpt_oss.parameters():
        p.add_(0.1 * torch.randn_like(p))
    for layer in gpt_oss.layers:
        layer.self_attn.sinks.add_(torch.tensor([-1.0, 0.5, 2.0, 3.5], device=device))
seen_oss = run_and_record(gpt_oss, ids)
oss_biases = [n for n, _ in gpt_oss.layers[0].named_parameters() if "bias" in n]
print("a gpt-oss layer's biases:\n    " + "\n    ".join(oss_biases))
assert oss_biases == [f"self_attn.{x}_proj.bias" for x in "qkvo"] + [
    "mlp.router.bias", "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_bias"]

# %%
# Both layers agree with ours, the sliding one under our window mask and the full one
# under our causal mask; the same layer without its sinks does not. Every row of
# Hugging Face's weights sums to less than one, and to one minus the sink's share
# :math:`\sigma(s_h - \log\sum_m e^{\ell_{im}})`, computed here from our logits.
keeps = {"sliding_attention": window_mask(L, W, device),
         "full_attention": causal_mask(L, device)}
sink_share = {}
for layer_idx, (x, mask, hf_out, hf_p) in seen_oss.items():
    keep = keeps[gcfg.layer_types[layer_idx]]
    assert torch.equal(mask[0, 0] == 0, keep)
    hf_attn = gpt_oss.layers[layer_idx].self_attn
    ours = window_attention_from(hf_attn, device, bias=True, sinks=True)
    with torch.no_grad():
        out, p = ours(x, keep)
        sinks = ours.sinks  # (Nh,)
        ours.sinks = None
        no_sinks, _ = ours(x, keep)
        qh, kh = ours.rotated_qk(x)  # (B, Nh, L, Dh) each
        logits = qh @ kh.transpose(-1, -2) / math.sqrt(ours.Dh)  # (B, Nh, L, L)
        lse = logits.masked_fill(~keep, float("-inf")).logsumexp(dim=-1)  # (B, Nh, L)
        share = torch.sigmoid(sinks.view(1, -1, 1) - lse)  # (B, Nh, L)
    sink_share[layer_idx] = share
    row_sums = hf_p.sum(dim=-1)  # (B, Nh, L)
    print(f"layer {layer_idx} ({gcfg.layer_types[layer_idx]}): max|ours - HF| output "
          f"{(out - hf_out).abs().max():.1e}, weights {(p - hf_p).abs().max():.1e}\n"
          f"    ours without sinks: {(no_sinks - hf_out).abs().max():.2f}; "
          f"HF's row sums: {row_sums.min():.3f} to {row_sums.max():.3f}\n"
          f"    max|HF's row sum - (1 - sink share)| = "
          f"{(row_sums - (1 - share)).abs().max():.1e}")
    torch.testing.assert_close(out, hf_out)
    torch.testing.assert_close(p, hf_p)
    assert (no_sinks - hf_out).abs().max() > 0.1  # the sinks matter
    assert (row_sums < 1).all()  # every row gives the sink a share
    assert row_sums.min() < 0.1  # a sink can take nearly all of a row
    torch.testing.assert_close(row_sums, 1 - share)

# %%
# Where each row's attention goes. Left, StreamingLLM's mask on this page's random
# ``q, k``: once the cache is full the first ``Ns`` keys keep a share of the mass that a
# window alone would have lost (random weights spread it evenly; trained models put much
# more on the first tokens, which is why StreamingLLM keeps them). Right, Hugging Face's
# gpt-oss, full-attention layer: each head's rows sum to one minus its sink's share
# (lines: our closed form; dots: Hugging Face's row sums).
on_sinks = p_sinks[..., :Ns].sum(dim=-1).mean(dim=(0, 1)).cpu()  # (L,)
on_window = p_sinks[..., Ns:].sum(dim=-1).mean(dim=(0, 1)).cpu()
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
ax1.plot(on_sinks, "o-", label=f"on the {Ns} sink keys")
ax1.plot(on_window, "s-", label="on the other keys")
ax1.axvline(Ns + W - 0.5, color="gray", lw=1, ls="--")
ax1.set_xlabel("query position i")
ax1.set_ylabel("attention mass (mean over B, Nh)")
ax1.set_ylim(-0.02, 1.3)
ax1.set_title("StreamingLLM: sinks keep mass after eviction (dashed)")
ax1.legend(loc="upper right")
hf_rows = seen_oss[1][3].sum(dim=-1)[0].cpu()  # (Nh, L), first sequence
sinks = gpt_oss.layers[1].self_attn.sinks
for h in range(Nh):
    line, = ax2.plot(1 - sink_share[1][0, h].cpu(), lw=1)
    ax2.plot(hf_rows[h], "o", color=line.get_color(), ms=4,
             label=f"head {h}, s = {sinks[h].item():.1f}")
ax2.set_xlabel("query position i")
ax2.set_ylabel("row sum of the weights")
ax2.set_ylim(0, 1.3)
ax2.set_title("gpt-oss: row sum = 1 - sink share < 1")
ax2.legend(loc="upper center", ncol=2, fontsize="small")
fig.suptitle("Sinks take mass: kept keys in StreamingLLM, a learned logit in gpt-oss")
plt.show()

# %%
# Try it: how far back does the last output of two windowed layers see?
# ---------------------------------------------------------------------
# One layer moves information at most ``W - 1`` positions forward. Take the gradient of
# the Mistral model's last output with respect to its input embeddings: which input
# positions does it depend on?

# %%
# A stack of ``n`` layers reaches ``n (W - 1)`` back: the Mistral paper's argument that
# a small window still gives a long reach (the paper counts ``n W``, as its
# ``W + 1``-key window does). The gradient is exactly zero beyond ``2 (W - 1) = 6``
# tokens back, non-zero within (the masked weights are exactly zero, and so is their
# gradient).
emb = mistral.embed_tokens(ids).detach().requires_grad_()  # (B, L, D)
mistral(inputs_embeds=emb).last_hidden_state[:, -1].sum().backward()
reach = emb.grad.abs().sum(dim=(0, 2))  # (L,): how much each input position matters
seen_from_last = (reach > 0).nonzero().flatten().tolist()
print(f"the last position's output depends on input positions {seen_from_last}")
assert seen_from_last == list(range(L - 1 - 2 * (W - 1), L))

# %%
# Try it: evict without sinks. Does the window alone match the cache?
# -------------------------------------------------------------------
# Compare the evicting cache above with the window mask alone, and with full causal
# attention, for ``L = 12 > Ns + W = 6``.

# %%
# Neither does: the first ``Ns`` keys matter, and so does the eviction.
out_window, _ = attend_with_sinks(q, k, v, window_mask(L, W, device))
print(f"max|window alone - cache| = {(out_window - streamed).abs().max():.2f}, "
      f"max|causal - cache| = {(causal_ref - streamed).abs().max():.2f}")
assert (out_window - streamed).abs().max() > 0.1  # the sinks matter
assert (causal_ref - streamed).abs().max() > 0.1  # and so does the eviction

# %%
# References
# ----------
# Mistral 7B :footcite:p:`Jiang2023`; StreamingLLM :footcite:p:`Xiao2023`; the gpt-oss
# model card :footcite:p:`OpenAI2025`.
# ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.Module.register_forward_hook``.
#
# .. footbibliography::
