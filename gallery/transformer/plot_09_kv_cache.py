"""
The KV cache
============

A decoder keeps the keys and values of past tokens, which never change: the KV cache.
This page adds it to the book's GPT-2, proves that decoding with it gives the full
pass's logits at every step, as Hugging Face's ``past_key_values`` does, and measures
its cost.

**You will learn**

- why the keys and values of past tokens can be kept, and what each step computes
- which rows of the causal mask the new queries need, and what the wrong rows cost
- how to add GPT-2's ``layer_past`` to the book's model and check it step by step
- how the cache grows with the sequence, in bytes, and what it saves in time

**Prerequisites:** :doc:`/generated/transformer/plot_08_gpt2_vs_hugging_face` (the
book's GPT-2), :doc:`/generated/transformer/plot_04_causal_attention` (the causal mask).

.. index:: ! KV cache
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
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")

# %%
# The idea
# --------
# Under the causal mask, token ``j``'s key and value never change once computed. A
# step that feeds ``nd`` new tokens projects only those, appends their keys and values
# to the ``ns - nd`` cached ones, and lets the new queries meet all ``ns`` keys. Query
# ``i`` sits at position ``ns - nd + i``: it needs *that* row of the mask :math:`M`:
#
# .. math::
#
#    y_i = \mathrm{softmax}\Big(\frac{q_i K^\top}{\sqrt{D_h}} + M_{ns - nd + i}\Big)\,
#    V, \qquad K, V \in \mathbb{R}^{ns \times D_h}, \quad i = 0 .. nd - 1,
#
# GPT-2's slice ``bias[:, :, ns - nd:ns, :ns]``; the cache holds
# :math:`2\, n_\mathrm{layer} B N_h L D_h` numbers.
ns, nd = 8, 3
corner = torch.ones(ns, ns, dtype=torch.bool).tril()  # (ns, ns): True, may attend
panels = {"full pass (no cache):\nall ns rows": corner,
          "cached chunk, right:\nrows ns - nd .. ns - 1": corner[ns - nd:ns],
          "cached chunk, wrong:\nrows 0 .. nd - 1": corner[:nd]}
fig, axes = plt.subplots(1, 3, figsize=(8, 2.6), layout="constrained")
for ax, (title, m) in zip(axes, panels.items()):
    ax.imshow(m, cmap="gray", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key position")
    ax.set_yticks(range(m.shape[0]), [f"q {ns - m.shape[0] + r}" for r in
                                      range(m.shape[0])], fontsize=9)
    ax.grid(False)
fig.suptitle("With a cache, the nd new queries need the mask's last nd rows "
             "(white: attend)")
plt.show()

# %%
# Proof: GPT-2's unchanged pieces, and a random GPT-2 to load
# ------------------------------------------------------------
# The pieces that do not change with a cache, copied unchanged from
# :doc:`/generated/transformer/plot_08_gpt2_vs_hugging_face`; then a random two-layer
# ``GPT2LMHeadModel`` (dropout 0, the eager path), every parameter moved off its init so
# that a misplaced bias shows, whose weights ours loads below.


# Copied from transformer/plot_03_conv1d_feedforward.py: Conv1D
class Conv1D(nn.Module):
    """GPT-2's linear layer, y = x @ weight + bias; weight (nx, nf), input first."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)  # (nx, nf)
        self.bias = nn.Parameter(torch.zeros(nf))  # (nf,)

    def forward(self, x):  # (..., nx) -> (..., nf)
        size_out = x.shape[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)  # (N, nf)
        return x.view(size_out)


# Copied from transformer/plot_03_conv1d_feedforward.py: gelu_tanh
def gelu_tanh(x):
    """GPT-2's GELU: the tanh approximation, as its code writes it."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# Copied from transformer/plot_08_gpt2_vs_hugging_face.py: GPT2MLP
class GPT2MLP(nn.Module):
    """c_proj(gelu_tanh(c_fc(x))): D -> n_state -> D, Hugging Face's names."""

    def __init__(self, n_state, D):
        super().__init__()
        self.c_fc = Conv1D(n_state, D)  # D -> n_state
        self.c_proj = Conv1D(D, n_state)  # n_state -> D

    def forward(self, x):  # (B, L, D)
        return self.c_proj(gelu_tanh(self.c_fc(x)))


# %%
V, n_ctx, D, Nh, n_layer = 96, 256, 64, 4, 2
cfg = GPT2Config(
    vocab_size=V, n_positions=n_ctx, n_embd=D, n_head=Nh, n_layer=n_layer,
    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
    bos_token_id=None, eos_token_id=None,  # no special tokens (GPT-2's 50256 > V)
)
hf = GPT2LMHeadModel(cfg).to(device).eval()
with torch.no_grad():
    for p in hf.parameters():
        p.add_(0.1 * torch.randn_like(p))


# %%
# From scratch
# ------------
# The book's GPT-2 with ``layer_past``: each attention layer appends the new keys and
# values to the cached ones and returns them (``present``) for the next step.


class CachedGPT2Attention(nn.Module):
    """GPT2Attention with layer_past: the new tokens' queries meet every cached key."""

    def __init__(self, D, Nh, n_ctx):
        super().__init__()
        self.Nh = Nh
        self.c_attn = Conv1D(3 * D, D)  # D -> q, k, v
        self.c_proj = Conv1D(D, D)
        causal = torch.ones(n_ctx, n_ctx, dtype=torch.bool).tril()  # True: may attend
        self.register_buffer("bias", causal.view(1, 1, n_ctx, n_ctx), persistent=False)

    def split_heads(self, x):  # (B, L, D) -> (B, Nh, L, Dh)
        B, L, D = x.shape
        return x.reshape(B, L, self.Nh, D // self.Nh).transpose(1, 2)

    def causal_mask(self, nd, ns):  # (1, 1, nd, ns): query i is at position ns - nd + i
        return self.bias[:, :, ns - nd:ns, :ns]

    def forward(self, x, layer_past=None):  # x (B, nd, D): the new tokens only
        B, nd, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=-1)  # 3 x (B, nd, D)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        if layer_past is not None:  # the cache: (B, Nh, ns - nd, Dh) each
            k = torch.cat([layer_past[0], k], dim=-2)  # (B, Nh, ns, Dh)
            v = torch.cat([layer_past[1], v], dim=-2)  # (B, Nh, ns, Dh)
        ns = k.size(-2)
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, nd, ns)
        w = w.masked_fill(~self.causal_mask(nd, ns), float("-inf")).softmax(dim=-1)
        y = (w @ v).transpose(1, 2).reshape(B, nd, D)  # (B, Nh, nd, Dh) -> (B, nd, D)
        return self.c_proj(y), (k, v)  # the output, and the cache for the next step


# %%
# Proof: the block passes the cache through
# -----------------------------------------
# GPT-2's pre-LN block, its attention now taking and returning the cache.
class CachedGPT2Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x)); passes the cache through."""

    def __init__(self, D, Nh, n_ctx, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D, eps=eps)
        self.attn = CachedGPT2Attention(D, Nh, n_ctx)
        self.ln_2 = nn.LayerNorm(D, eps=eps)
        self.mlp = GPT2MLP(4 * D, D)

    def forward(self, x, layer_past=None):  # (B, nd, D)
        a, present = self.attn(self.ln_1(x), layer_past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


# %%
# Decoding with the cache equals the full pass
# --------------------------------------------
# The new tokens' positions start after the cached ones; each layer gets its own cache.
class CachedGPT2(nn.Module):
    """New token ids (B, nd) and the cache -> logits (B, nd, V) and the new cache."""

    def __init__(self, V, n_ctx, D, Nh, n_layer, eps=1e-5):
        super().__init__()
        self.transformer = nn.ModuleDict({  # HF's GPT2Model: transformer.wte, ...
            "wte": nn.Embedding(V, D),  # token embedding
            "wpe": nn.Embedding(n_ctx, D),  # learned position embedding
            "h": nn.ModuleList([CachedGPT2Block(D, Nh, n_ctx, eps)
                                for _ in range(n_layer)]),
            "ln_f": nn.LayerNorm(D, eps=eps),
        })
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one Parameter, (V, D)

    def forward(self, ids, past=None):  # past: n_layer x (k, v), (B, Nh, ns - nd, Dh)
        t = self.transformer
        n_past = 0 if past is None else past[0][0].size(-2)
        pos = torch.arange(n_past, n_past + ids.size(1), device=ids.device)  # (nd,)
        x = t.wte(ids) + t.wpe(pos)  # (B, nd, D)
        presents = []
        for i, block in enumerate(t.h):
            x, present = block(x, None if past is None else past[i])
            presents.append(present)
        return self.lm_head(t.ln_f(x)), presents  # (B, nd, V), n_layer x (k, v)


# %%
# Decoding: a *prefill* (``nd = ns``), a *chunk* of given tokens (a prompt in parts, a
# draft to verify), then greedy one-token steps; a full pass, no cache, must agree.
def decode_ours(model, ids, n_prompt, n_new):
    """Prefill, chunk, n_new greedy steps: tokens, logits, the cache after each call."""
    seq, steps, caches, past = ids, [], [], None
    feeds = [ids[:, :n_prompt], ids[:, n_prompt:]]  # prefill, then the chunk
    for t in range(2 + n_new):
        if t >= 2:  # greedy: feed back the token with the largest logit, (B, 1)
            feeds.append(steps[-1][:, -1:].argmax(dim=-1))
            seq = torch.cat([seq, feeds[-1]], dim=1)
        logits, past = model(feeds[t], past)  # (B, nd, V), n_layer x (k, v)
        steps.append(logits)
        caches.append(past)
    return seq, torch.cat(steps, dim=1), caches  # (B, n), (B, n, V), one per call


# %%
ours = CachedGPT2(V, n_ctx, D, Nh, n_layer).to(device).eval()
ours.load_state_dict(hf.state_dict(), strict=True)  # the same names, none missing
B, n_prompt, n_chunk, n_new = 2, 5, 3, 12
ids = torch.randint(0, V, (B, n_prompt + n_chunk), device=device)  # (B, 8)
with torch.no_grad():
    seq, cached, caches = decode_ours(ours, ids, n_prompt, n_new)
    full, _ = ours(seq)  # (B, 20, V), no cache
n, P, PC = n_prompt + n_chunk + n_new, n_prompt, n_prompt + n_chunk  # 20, 5, 8
err = (cached - full).abs().amax(dim=(0, 2))  # (n,): per position
print(f"max|cached - full|: prefill {err[:P].max().item():.1e}, chunk "
      f"{err[P:PC].max().item():.1e}, one-token steps {err[PC:].max().item():.1e}")
torch.testing.assert_close(cached[:, :P], full[:, :P])  # prefill: nd = ns = 5
torch.testing.assert_close(cached[:, P:PC], full[:, P:PC])  # chunk: nd 3, ns 8
torch.testing.assert_close(cached[:, PC:], full[:, PC:])  # steps: nd 1, ns 9..20

# %%
# Proof: Hugging Face's cache does the same
# -----------------------------------------
# First our cache itself: after each call it holds every token fed so far, and the
# logits have one row per position. Then the same three kinds of step with Hugging
# Face's ``DynamicCache``, which each call extends in place (``use_cache=True``). Its
# logits equal its own full pass, and ours; its cache holds the same keys and values as
# ours. And the load: the same names exactly, and the LayerNorms' ``eps``, which no
# state dict holds, alike.
Dh = D // Nh
past = caches[-1]  # n_layer x (k, v), (B, Nh, n, Dh)
ours_lengths = [c[0][0].size(-2) for c in caches]
print(f"cache length after each call: {ours_lengths}")
assert ours_lengths == [P, PC] + list(range(PC + 1, n + 1))
assert cached.shape == full.shape == (B, n, V)
assert hf.config._attn_implementation == "eager"
assert sorted(ours.state_dict()) == sorted(hf.state_dict())
norms = [m for m in ours.modules() if isinstance(m, nn.LayerNorm)]
assert len(norms) == 2 * n_layer + 1
assert all(m.eps == cfg.layer_norm_epsilon for m in norms)  # not in the state dict


# %%
def decode_hf(model, ids, n_prompt, n_new):
    """The same decoding with a DynamicCache: tokens, logits, cache, lengths, bytes."""
    cache = DynamicCache(config=model.config)
    steps, lengths, sizes = [], [], []
    for chunk in (ids[:, :n_prompt], ids[:, n_prompt:]):  # prefill, then chunk
        logits = model(chunk, past_key_values=cache, use_cache=True).logits
        steps.append(logits)
        lengths.append(cache.get_seq_length())
    seq = ids
    for _ in range(n_new):
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        seq = torch.cat([seq, nxt], dim=1)
        logits = model(nxt, past_key_values=cache, use_cache=True).logits
        steps.append(logits)
        lengths.append(cache.get_seq_length())
        sizes.append(sum(layer.keys.nbytes + layer.values.nbytes
                         for layer in cache.layers))
    return seq, torch.cat(steps, dim=1), cache, lengths, sizes


# %%
with torch.no_grad():
    seq_hf, cached_hf, cache, hf_lengths, hf_bytes = decode_hf(hf, ids, n_prompt,
                                                               n_new)
    full_hf = hf(seq_hf, use_cache=False).logits  # (B, 20, V)
print(f"HF: max|cached - full| = {(cached_hf - full_hf).abs().max().item():.1e}, "
      f"max|HF - ours| = {(cached_hf - cached).abs().max().item():.1e}; "
      f"cache lengths as ours: {hf_lengths == ours_lengths}")
assert hf_lengths == ours_lengths
torch.testing.assert_close(cached_hf[:, :P], full_hf[:, :P])  # prefill
torch.testing.assert_close(cached_hf[:, P:PC], full_hf[:, P:PC])  # chunk
torch.testing.assert_close(cached_hf[:, PC:], full_hf[:, PC:])  # one-token steps
torch.testing.assert_close(cached, cached_hf)
for i, (k, v) in enumerate(past):
    assert k.shape == v.shape == cache.layers[i].keys.shape == (B, Nh, n, Dh)
    torch.testing.assert_close(k, cache.layers[i].keys)
    torch.testing.assert_close(v, cache.layers[i].values)

# %%
# Proof: the same greedy tokens, four ways
# ----------------------------------------
# Ours with the cache, Hugging Face with its cache, Hugging Face without a cache
# (the whole sequence again at every step), and ``generate(do_sample=False)``, which
# decodes greedily with a cache of its own, given the 8 tokens as one prompt.
# The toy vocabulary has no end-of-text token, so ``generate`` never stops early.
with torch.no_grad():
    seq_nc = ids
    for _ in range(n_new):
        logits = hf(seq_nc, use_cache=False).logits  # (B, L, V), the whole sequence
        seq_nc = torch.cat([seq_nc, logits[:, -1:].argmax(dim=-1)], dim=1)
    seq_gen = hf.generate(ids, do_sample=False, max_new_tokens=n_new)  # (B, n)
print("generated tokens (ours, cached):")
for row in seq[:, PC:].tolist():
    print("   ", row)
same = [torch.equal(seq, s) for s in (seq_hf, seq_nc, seq_gen)]
print(f"identical to HF cached, HF without cache, generate: {same}")
assert torch.equal(seq, seq_hf)  # Hugging Face, with its cache
assert torch.equal(seq, seq_nc)  # Hugging Face, the whole sequence at every step
assert torch.equal(seq, seq_gen)  # generate(do_sample=False)

# Rounding could not have flipped a choice: at every greedy step the best logit leads
# the second by far more than the logits' discrepancies above.
choosing = full[:, PC - 1:-1]  # (B, n_new, V): the logits each greedy choice read
top2 = choosing.topk(2, dim=-1).values  # (B, n_new, 2)
leads = top2[..., 0] - top2[..., 1]  # (B, n_new)
print(f"smallest lead of the chosen token: {leads.min().item():.2e}")
assert torch.equal(choosing.argmax(dim=-1), seq[:, PC:])  # the full pass's choices
assert (leads > 1e-4).all()  # far above the discrepancies allowed above (1e-5 + rtol)

# %%
# Proof: the cache holds 2 n_layer B Nh L Dh numbers
# ----------------------------------------------------
# A key and a value of ``Dh`` numbers per head, per layer, per token of each sequence,
# 4 bytes each in float32, linear in ``L``: the formula of "The idea" against the bytes
# of the tensors (``nbytes``), ours and Hugging Face's, after each greedy step above and
# after a prefill of ``L`` tokens up to ``n_ctx = 256``. And for GPT-2 small.
def cache_bytes(past):
    """Bytes held by the keys and values of every layer: ours, or a DynamicCache."""
    if isinstance(past, DynamicCache):
        past = [(layer.keys, layer.values) for layer in past.layers]
    return sum(k.nbytes + v.nbytes for k, v in past)


# %%
lengths = list(range(PC + 1, n + 1))  # cache length after each greedy step
ours_bytes = [cache_bytes(c) for c in caches[2:]]
long = [32, 64, 128, 256]
tokens = torch.randint(0, V, (B, n_ctx), device=device)
with torch.no_grad():
    for L in long:
        ours_bytes.append(cache_bytes(ours(tokens[:, :L])[1]))
        hf_bytes.append(cache_bytes(hf(tokens[:, :L], use_cache=True).past_key_values))
lengths += long
formula = [2 * n_layer * B * Nh * L * Dh * 4 for L in lengths]
for L, mine, theirs_b, f in zip(lengths, ours_bytes, hf_bytes, formula):
    if L in (PC + 1, n) or L in long:  # first, last greedy step; the long ones
        print(f"L = {L:3d}: ours {mine:6d} bytes, HF {theirs_b:6d}, formula {f:6d}")
assert ours_bytes == formula
assert hf_bytes == formula
per_token = 2 * 12 * 1 * 12 * 64 * 4  # GPT-2 small: 12 layers, 12 heads, Dh 64, B 1
print(f"the same formula for GPT-2 small, one sequence of 1024 tokens, float32: "
      f"{per_token * 1024 / 2**20:.0f} MiB")

# %%
fig, ax = plt.subplots(figsize=(6.4, 3.6))
ax.plot(lengths, [b / 1024 for b in formula], "-", color="gray",
        label=r"$2\, n_{layer} B N_h L D_h \cdot 4$ bytes")
ax.plot(lengths, [b / 1024 for b in ours_bytes], "o", label="ours (measured)")
ax.plot(lengths, [b / 1024 for b in hf_bytes], "x", label="Hugging Face (measured)")
ax.set_xlabel("cached tokens L")
ax.set_ylabel("cache size (KiB)")
ax.set_title("The KV cache grows linearly with the sequence:\n"
             f"{formula[0] // lengths[0]} bytes per token here (B = {B}, float32)")
ax.legend()
plt.show()

# %%
# Try it: the mask's first rows
# ------------------------------
# Replace the slice by the buffer's top-left corner, ``bias[:, :, :nd, :ns]``, what one
# would write thinking of the no-cache case. Which steps notice?
import types


# Without a cache nd = ns and the two slices are the same, so the full pass and the
# prefill cannot tell. With a cache they are not: one new token gets row 0 of the mask
# and sees only the first token; the chunk's queries get rows 0-2. The wrong method
# replaces causal_mask in every attention layer of a copy of our model.
def first_rows_mask(self, nd, ns):
    """The wrong mask with a cache: rows 0 .. nd - 1 of the buffer, (1, 1, nd, ns)."""
    return self.bias[:, :, :nd, :ns]


# %%
wrong = CachedGPT2(V, n_ctx, D, Nh, n_layer).to(device).eval()
wrong.load_state_dict(ours.state_dict())
for block in wrong.transformer.h:
    block.attn.causal_mask = types.MethodType(first_rows_mask, block.attn)
with torch.no_grad():
    full_wrong, _ = wrong(seq)  # no cache
    prefill, past_w = wrong(seq[:, :P])
    chunk, past_w = wrong(seq[:, P:PC], past_w)
    steps = []
    for t in range(PC, n):  # the same tokens, fed one at a time
        logits_t, past_w = wrong(seq[:, t:t + 1], past_w)  # (B, 1, V)
        steps.append(logits_t)
    steps = torch.cat(steps, dim=1)  # (B, n_new, V)
gap_chunk = (chunk - full[:, P:PC]).abs().max().item()
gap_steps = (steps - full[:, PC:]).abs().amax(dim=(0, 2))  # (n_new,)
gap_steps_min, gap_steps_max = gap_steps.min().item(), gap_steps.max().item()
print(f"unsliced mask: full pass max|diff| = {(full_wrong - full).abs().max():.1e}, "
      f"prefill {(prefill - full[:, :P]).abs().max():.1e};\n"
      f"with the cache: chunk max|diff| = {gap_chunk:.2f}, one-token steps "
      f"{gap_steps_min:.2f} to {gap_steps_max:.2f}")
torch.testing.assert_close(full_wrong, full)
torch.testing.assert_close(prefill, full[:, :P])
assert gap_chunk > 0.1
assert (gap_steps > 0.1).all()

# %%
# The two masks for the chunk, ``nd = 3`` new queries against ``ns = 8`` keys, as the
# two models hold them (drawn in "The idea" above), against the rule itself: the query
# at position ``p`` may see key ``j`` when ``j <= p``.
query_pos = torch.arange(P, PC, device=device)  # (nd,): positions 5, 6, 7
rule = torch.arange(PC, device=device) <= query_pos[:, None]  # (nd, ns)
right = ours.transformer.h[0].attn.causal_mask(n_chunk, PC)[0, 0]  # (nd, ns)
unsliced = wrong.transformer.h[0].attn.causal_mask(n_chunk, PC)[0, 0]  # (nd, ns)
print(f"keys visible to queries 5, 6, 7: rule {rule.sum(-1).tolist()}, sliced "
      f"{right.sum(-1).tolist()}, unsliced {unsliced.sum(-1).tolist()}")
assert torch.equal(right, rule)
assert not torch.equal(unsliced, rule)
assert torch.equal(right.cpu(), panels["cached chunk, right:\nrows ns - nd .. ns - 1"])
assert torch.equal(unsliced.cpu(), panels["cached chunk, wrong:\nrows 0 .. nd - 1"])

# %%
# Try it: time one step
# ----------------------
# Without a cache, the step after ``L`` tokens runs the model over all ``L + 1``; with
# one, over the new token only. How do the two times grow with ``L``, up to 256?
import statistics
import time


# One step is timed both ways (ours) with time.perf_counter; the median of 7 calls is
# kept. Timings depend on the machine and its load, so they are printed and plotted,
# never asserted. At this tiny size fixed per-call costs weigh heavily; the gap widens
# with the model and the sequence.
def sync(device):
    """Wait for the GPU before reading the clock (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def step_cost(model, L, B, V, reps=7):
    """Median seconds of one greedy step after L tokens, with and without a cache."""
    device = model.lm_head.weight.device
    tokens = torch.randint(0, V, (B, L + 1), device=device)  # L cached, 1 new
    costs = {}
    with torch.no_grad():
        _, past = model(tokens[:, :L])  # the cache of the first L tokens
        calls = {"with cache": lambda: model(tokens[:, L:], past),
                 "without cache": lambda: model(tokens)}
        for name, call in calls.items():
            call()  # warm-up
            times = []
            for _ in range(reps):
                sync(device)
                t0 = time.perf_counter()
                call()
                sync(device)
                times.append(time.perf_counter() - t0)
            costs[name] = statistics.median(times)
    return costs


# %%
timed = [16, 32, 64, 128, 255]
costs = [step_cost(ours, L, B, V) for L in timed]
for L, c in zip(timed, costs):
    print(f"L = {L:3d}: " + ", ".join(f"{k} {1e3 * t:.2f} ms" for k, t in c.items()))

# %%
fig, ax = plt.subplots(figsize=(6.4, 3.6))
for name in costs[0]:
    ax.plot(timed, [1e3 * c[name] for c in costs], "o-", label=name)
ax.set_xlabel("tokens already seen L")
ax.set_ylabel("time for the next token (ms)")
ax.set_ylim(bottom=0)
ax.set_title(f"Time per generated token, median of 7 ({device}):\n"
             "without the cache each step runs the whole sequence again")
ax.legend()
plt.show()

# %%
# References
# ----------
# ``transformers.GPT2LMHeadModel`` (``past_key_values``, ``use_cache``, ``generate``),
# ``transformers.DynamicCache``, ``torch.Tensor.nbytes``, ``time.perf_counter``.
