"""
Sliding-window attention and attention sinks
============================================

Mistral 7B (v0.1, with a window of 4096; later Mistral releases ship
``sliding_window: null`` and attend causally) lets each token attend only to a window of
recent tokens: in Hugging Face's implementation the last ``W``, itself included, one
fewer than in Mistral's first reference code. StreamingLLM keeps the first ``S`` tokens
as well when it evicts old keys from its cache, as *attention sinks*; gpt-oss instead
gives each head a learned sink logit, an extra column of the softmax that takes its
share of the mass and is then dropped. This page builds the three from scratch and
proves them: the window equal to causal attention when it covers the sequence and to
Hugging Face's Mistral on the eager path (a window one key wider or narrower fails),
the sink mask equal to a cache that physically evicts keys, and the learned sinks equal
to Hugging Face's gpt-oss attention, whose rows then sum to one minus the sink's share.
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

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")

# %%
# Three masks from scratch
# ------------------------
# A boolean ``keep[i, j]`` says whether query ``i`` may look at key ``j``. Causal:
# ``j <= i``. A sliding window of ``W`` keys: ``i - W < j <= i``, the query's own key
# included, so each query sees at most ``W`` keys and attention costs ``O(L W)``
# instead of ``O(L^2)``. StreamingLLM's sinks: the window, plus the first ``S`` keys
# (those that exist yet: ``j <= i`` still holds).
L, W, S = 12, 4, 2


def causal_mask(L):
    """(L, L) bool: query i keeps key j when j <= i."""
    i = torch.arange(L, device=device)[:, None]  # (L, 1)
    j = torch.arange(L, device=device)[None, :]  # (1, L)
    return j <= i


def window_mask(L, W):
    """(L, L) bool: query i keeps the W keys i - W < j <= i."""
    i = torch.arange(L, device=device)[:, None]
    j = torch.arange(L, device=device)[None, :]
    return (j <= i) & (j > i - W)


def sink_window_mask(L, S, W):
    """(L, L) bool: the window of W keys plus the first S keys (the sinks)."""
    i = torch.arange(L, device=device)[:, None]
    j = torch.arange(L, device=device)[None, :]
    return (j <= i) & ((j > i - W) | (j < S))


for name, keep in (("window", window_mask(L, W)),
                   ("sinks+window", sink_window_mask(L, S, W))):
    print(f"{name:>12}: keys per query {keep.sum(dim=-1).tolist()}")
    for row in keep.tolist():
        print(" " * 14 + "".join("x" if kept else "." for kept in row))
# query i has i + 1 keys so far; the window keeps min(i + 1, W), sinks add up to S
n_keys = torch.arange(1, L + 1, device=device)
assert torch.equal(window_mask(L, W).sum(dim=-1), n_keys.clamp(max=W))
assert torch.equal(sink_window_mask(L, S, W).sum(dim=-1), n_keys.clamp(max=S + W))

# %%
# Attention with a mask, and with learned sinks
# ---------------------------------------------
# One function computes the three variants. Masked logits are ``-inf``, so their weight
# is exactly zero. ``sinks``, one logit :math:`s_h` per head, joins each row of the
# softmax as an extra key with no value:
#
# .. math::
#
#    p_{ij} = \frac{e^{\ell_{ij}}}{e^{s_h} + \sum_{m} e^{\ell_{im}}},
#    \qquad \sum_j p_{ij} = 1 - \frac{e^{s_h}}{e^{s_h} + \sum_m e^{\ell_{im}}} < 1 ,
#
# the sums running over the keys that query ``i`` keeps: a head can put part of its
# attention "nowhere" instead of on some key.
import math

import torch.nn.functional as F


def attend(q, k, v, keep, sinks=None):
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
# A window that covers the sequence is causal attention
# -----------------------------------------------------
# With ``W >= L`` no key is ever out of reach, and the windowed attention equals
# :func:`~torch.nn.functional.scaled_dot_product_attention` with ``is_causal=True``.
# With ``W < L`` the first ``W`` queries still see all their keys and agree; every later
# query has lost keys and differs.
B, Nh, Dh = 2, 4, 16
q, k, v = torch.randn(3, B, Nh, L, Dh, device=device).unbind(0)  # 3 x (B, Nh, L, Dh)
causal_ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, Nh, L, Dh)
for W_try in (L, L + 5):
    out, _ = attend(q, k, v, window_mask(L, W_try))
    print(f"W = {W_try:2d} >= L: max|window - causal| = "
          f"{(out - causal_ref).abs().max().item():.1e}")
    torch.testing.assert_close(out, causal_ref)
out, _ = attend(q, k, v, window_mask(L, W))
per_query = (out - causal_ref).abs().amax(dim=(0, 1, 3))  # (L,): max over B, Nh, Dh
print(f"W = {W:2d} <  L: max|window - causal| per query\n    "
      + " ".join(f"{d:.0e}" if d < 1e-3 else f"{d:.2f}" for d in per_query.tolist()))
torch.testing.assert_close(out[:, :, :W], causal_ref[:, :, :W])
assert (per_query[W:] > 0.1).all()  # from query W on, every query has lost a key

# %%
# Hugging Face's Mistral: which ``W`` keys?
# -----------------------------------------
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
for name, keep in (("W - 1", window_mask(L, W - 1)), ("W", window_mask(L, W)),
                   ("W + 1", window_mask(L, W + 1)), ("causal", causal_mask(L)),
                   ("triu(-W)", one_file_ref)):
    print(f"ours with {name:>8}: {(keep != hf_keep).sum().item():2d} of {L * L} "
          f"entries differ from HF's mask")
assert torch.equal(window_mask(L, W), hf_keep)
assert not torch.equal(window_mask(L, W - 1), hf_keep)
assert not torch.equal(window_mask(L, W + 1), hf_keep)
assert not torch.equal(causal_mask(L), hf_keep)
assert torch.equal(one_file_ref, window_mask(L, W + 1))  # W + 1 keys per query
for layer_idx, (_, mask, _, weights) in seen.items():  # every layer, every head
    assert torch.equal(mask, hf_mask)
    assert (weights[:, :, ~hf_keep] == 0).all() and (weights[:, :, hf_keep] > 0).all()
print("HF's weights, both layers: exactly 0 outside the window, > 0 inside it")

# %%
# The attention layer from scratch
# --------------------------------
# Mistral's attention: bias-free projections, rotary embeddings on ``q`` and ``k``
# (the "halves" layout: dims ``d`` and ``d + Dh/2`` rotate together, angle
# :math:`t\,\theta^{-2d/D_h}` at position ``t``), ``Nkv`` key/value heads each shared
# by ``Nh / Nkv`` consecutive query heads, then ``attend``. gpt-oss, below, adds biases
# and the learned sinks. The weights come from Hugging Face's layer through an explicit
# map, loaded strictly.
from torch import nn


def rope(x, theta):
    """Rotary embedding, halves layout, of x (B, Nh, L, Dh) at positions 0 .. L-1."""
    L, Dh = x.shape[-2:]
    inv_freq = theta ** (-torch.arange(0, Dh, 2, device=x.device) / Dh)  # (Dh/2,)
    angle = torch.arange(L, device=x.device)[:, None] * inv_freq  # (L, Dh/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class WindowAttention(nn.Module):
    """Attention on (B, L, D) with Nkv shared key/value heads, RoPE, a keep mask and,
    optionally, one learned sink logit per head."""

    def __init__(self, D, Nh, Nkv, Dh, theta, bias=False, sinks=False):
        super().__init__()
        self.Nh, self.Nkv, self.Dh, self.theta = Nh, Nkv, Dh, theta
        self.wq = nn.Linear(D, Nh * Dh, bias=bias)
        self.wk = nn.Linear(D, Nkv * Dh, bias=bias)
        self.wv = nn.Linear(D, Nkv * Dh, bias=bias)
        self.wo = nn.Linear(Nh * Dh, D, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(Nh)) if sinks else None

    def forward(self, x, keep):
        B, L, D = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        q = self.wq(x).view(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
        k = self.wk(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        v = self.wv(x).view(B, L, Nkv, Dh).transpose(1, 2)  # (B, Nkv, L, Dh)
        q, k = rope(q, self.theta), rope(k, self.theta)
        # query head h reads key/value head h // (Nh / Nkv), as in repeat_kv
        k = k.repeat_interleave(Nh // Nkv, dim=1)  # (B, Nh, L, Dh)
        v = v.repeat_interleave(Nh // Nkv, dim=1)
        y, p = attend(q, k, v, keep, self.sinks)  # (B, Nh, L, Dh), (B, Nh, L, L)
        return self.wo(y.transpose(1, 2).reshape(B, L, Nh * Dh)), p  # (B, L, D)


NAMES = {  # ours -> Hugging Face's MistralAttention
    "wq.weight": "q_proj.weight",  # (Nh Dh, D)
    "wk.weight": "k_proj.weight",  # (Nkv Dh, D)
    "wv.weight": "v_proj.weight",  # (Nkv Dh, D)
    "wo.weight": "o_proj.weight",  # (D, Nh Dh)
}
print("\n".join(f"    {ours:9} <- {theirs}" for ours, theirs in NAMES.items()))


def ours_from(hf_attn, names, **kwargs):
    """Our WindowAttention carrying the weights of a Hugging Face attention layer."""
    c = hf_attn.config
    ours = WindowAttention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                           hf_attn.head_dim, c.rope_parameters["rope_theta"], **kwargs)
    state = hf_attn.state_dict()
    assert sorted(names.values()) == sorted(state)  # every tensor of theirs is mapped
    ours.load_state_dict({o: state[t] for o, t in names.items()}, strict=True)
    return ours.to(device)


# %%
# In both layers our attention, fed the input the model gave Hugging Face's, returns the
# same output and the same weights with our window mask. With a window one key narrower
# or wider, or with no window at all, it does not.
for layer_idx, (x, _, hf_out, hf_p) in seen.items():
    ours = ours_from(mistral.layers[layer_idx].self_attn, NAMES)
    with torch.no_grad():
        out, p = ours(x, window_mask(L, W))  # (B, L, D), (B, Nh, L, L)
        wrong = {name: (ours(x, keep)[0] - hf_out).abs().max().item()
                 for name, keep in (("W - 1", window_mask(L, W - 1)),
                                    ("W + 1", window_mask(L, W + 1)),
                                    ("causal", causal_mask(L)))}
    print(f"layer {layer_idx}: max|ours - HF| output {(out - hf_out).abs().max():.1e}, "
          f"weights {(p - hf_p).abs().max():.1e}\n    with the wrong mask: "
          + ", ".join(f"{n} {g:.2f}" for n, g in wrong.items()))
    torch.testing.assert_close(out, hf_out)
    torch.testing.assert_close(p, hf_p)
    assert min(wrong.values()) > 0.1  # each wrong mask is another layer

# %%
# Two windowed layers reach ``2 (W - 1)`` tokens back
# ---------------------------------------------------
# One layer moves information at most ``W - 1`` positions forward; a stack of ``n``
# layers, ``n (W - 1)``: the Mistral paper's argument that a small window still gives a
# long reach (the paper counts ``n W``, as its ``W + 1``-key window does). The gradient
# of the model's last output with respect to its input embeddings shows it: exactly zero
# beyond ``2 (W - 1) = 6`` tokens back, non-zero within (the masked weights are exactly
# zero, and so is their gradient).
emb = mistral.embed_tokens(ids).detach().requires_grad_()  # (B, L, D)
mistral(inputs_embeds=emb).last_hidden_state[:, -1].sum().backward()
reach = emb.grad.abs().sum(dim=(0, 2))  # (L,): how much each input position matters
seen_from_last = (reach > 0).nonzero().flatten().tolist()
print(f"the last position's output depends on input positions {seen_from_last}")
assert seen_from_last == list(range(L - 1 - 2 * (W - 1), L))

# %%
# StreamingLLM's sinks: a mask, or a cache that evicts
# ----------------------------------------------------
# StreamingLLM streams text with a key/value cache of fixed size ``S + W``: the first
# ``S`` tokens stay, and once the cache is full the oldest of the others is evicted.
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
# the same output for every query; the window alone (no sinks) does not, nor does full
# causal attention, once ``L = 12 > S + W = 6``. The ``q, k`` here carry no position;
# StreamingLLM also numbers positions inside the cache, which this check does not cover.
cache_k, cache_v, streamed = [], [], []
for t in range(L):
    cache_k.append(k[:, :, t])  # (B, Nh, Dh)
    cache_v.append(v[:, :, t])
    if len(cache_k) > S + W:  # full: evict the oldest token after the sinks
        del cache_k[S], cache_v[S]
    K, V = torch.stack(cache_k, dim=2), torch.stack(cache_v, dim=2)  # (B, Nh, n, Dh)
    w = (torch.einsum("bhd,bhnd->bhn", q[:, :, t], K) / math.sqrt(Dh)).softmax(dim=-1)
    streamed.append(torch.einsum("bhn,bhnd->bhd", w, V))  # (B, Nh, Dh)
streamed = torch.stack(streamed, dim=2)  # (B, Nh, L, Dh)
out_sinks, p_sinks = attend(q, k, v, sink_window_mask(L, S, W))
out_window, _ = attend(q, k, v, window_mask(L, W))
print(f"cache of {len(cache_k)} entries; max|sink mask - cache| = "
      f"{(out_sinks - streamed).abs().max():.1e}, window alone "
      f"{(out_window - streamed).abs().max():.2f}, causal "
      f"{(causal_ref - streamed).abs().max():.2f}")
torch.testing.assert_close(out_sinks, streamed)
assert (out_window - streamed).abs().max() > 0.1  # the sinks matter
assert (causal_ref - streamed).abs().max() > 0.1  # and so does the eviction

# %%
# gpt-oss's learned sinks against Hugging Face's
# ----------------------------------------------
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

NAMES_OSS = {  # ours -> Hugging Face's GptOssAttention
    **NAMES,
    "wq.bias": "q_proj.bias",
    "wk.bias": "k_proj.bias",
    "wv.bias": "v_proj.bias",
    "wo.bias": "o_proj.bias",
    "sinks": "sinks",  # (Nh,)
}
print("NAMES, plus:\n" + "\n".join(f"    {ours:9} <- {theirs}"
                                   for ours, theirs in NAMES_OSS.items()
                                   if ours not in NAMES))

# %%
# Both layers agree with ours, the sliding one under our window mask and the full one
# under our causal mask; the same layer without its sinks does not. Every row of
# Hugging Face's weights sums to less than one, and to one minus the sink's share
# :math:`\sigma(s_h - \log\sum_m e^{\ell_{im}})`, computed here from our logits.
keeps = {"sliding_attention": window_mask(L, W), "full_attention": causal_mask(L)}
sink_share = {}
for layer_idx, (x, mask, hf_out, hf_p) in seen_oss.items():
    keep = keeps[gcfg.layer_types[layer_idx]]
    assert torch.equal(mask[0, 0] == 0, keep)
    hf_attn = gpt_oss.layers[layer_idx].self_attn
    ours = ours_from(hf_attn, NAMES_OSS, bias=True, sinks=True)
    with torch.no_grad():
        out, p = ours(x, keep)
        sinks = ours.sinks  # (Nh,)
        ours.sinks = None
        no_sinks, _ = ours(x, keep)
        qh = rope(ours.wq(x).view(B, L, Nh, -1).transpose(1, 2), ours.theta)
        kh = rope(ours.wk(x).view(B, L, ours.Nkv, -1).transpose(1, 2), ours.theta)
        kh = kh.repeat_interleave(Nh // ours.Nkv, dim=1)  # (B, Nh, L, Dh)
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
# Where the mass goes
# -------------------
# The three masks side by side, for ``L = 12``, ``W = 4``, ``S = 2``.
import matplotlib.pyplot as plt

masks = {"causal": causal_mask(L), f"window W = {W}": window_mask(L, W),
         f"sinks S = {S} + window": sink_window_mask(L, S, W)}
fig, axes = plt.subplots(1, 3, figsize=(9, 3.8), sharey=True, layout="constrained")
for ax, (name, keep) in zip(axes, masks.items()):
    ax.imshow(keep.cpu(), cmap="Greys", vmin=0, vmax=1.5)
    ax.grid(False)
    ax.set_title(f"{name}: {keep.sum().item()} keys")
    ax.set_xlabel("key position j")
axes[0].set_ylabel("query position i")
fig.suptitle(f"A window keeps at most W = {W} keys per query, O(L W) in all;\n"
             f"sinks keep the first S = {S} keys as well")
plt.show()

# %%
# Where each row's attention goes. Left, StreamingLLM's mask on this page's random
# ``q, k``: once the cache is full the first ``S`` keys keep a share of the mass that a
# window alone would have lost (random weights spread it evenly; trained models put much
# more on the first tokens, which is why StreamingLLM keeps them). Right, Hugging Face's
# gpt-oss, full-attention layer: each head's rows sum to one minus its sink's share
# (lines: our closed form; dots: Hugging Face's row sums).
on_sinks = p_sinks[..., :S].sum(dim=-1).mean(dim=(0, 1)).cpu()  # (L,)
on_window = p_sinks[..., S:].sum(dim=-1).mean(dim=(0, 1)).cpu()
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
ax1.plot(on_sinks, "o-", label=f"on the {S} sink keys")
ax1.plot(on_window, "s-", label="on the other keys")
ax1.axvline(S + W - 0.5, color="gray", lw=1, ls="--")
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
