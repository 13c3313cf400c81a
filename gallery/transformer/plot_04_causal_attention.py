"""
Causal attention and padding masks
==================================

A decoder such as GPT-2 must not let token ``t`` see the tokens after it: a causal mask
gives every future key zero weight. This page builds GPT-2's masked attention and
proves it blind to the future; the notes' layer, which never applies its mask, too.

**You will learn**

- how a causal mask sets every logit above the diagonal to :math:`-\\infty`
- how to test causality: change the future, watch the past not move
- four equal ways to write the mask: GPT-2's, boolean, additive, ``is_causal=True``
- how padding masks work, and ``nn.MultiheadAttention``'s opposite convention

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (attention and
its heads), :doc:`/generated/transformer/plot_03_conv1d_feedforward` (GPT-2's
``Conv1D``).

.. index:: ! causal mask
.. index:: ! padding mask
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Token ``l`` sees keys ``m <= l`` only: :math:`-\infty` on future logits: weight 0.
#
# .. math::
#
#    \mathrm{CausalAttention}(Q, K, V) = \mathrm{softmax}\!\left(
#    \frac{Q K^\top}{\sqrt{D_h}} + M\right) V, \qquad
#    M_{lm} = \begin{cases} 0 & m \le l \\ -\infty & m > l. \end{cases}
#
gen = torch.Generator().manual_seed(1)  # its own stream: the page's numbers stay put
q_toy, k_toy = torch.randn(2, 6, 8, generator=gen)  # (L, Dh) each
logits_toy = q_toy @ k_toy.T / 8**0.5  # (L, L)
future_toy = torch.ones(6, 6, dtype=torch.bool).triu(1)  # (L, L), True = future
w_full = logits_toy.softmax(dim=-1)  # (L, L)
w_causal = logits_toy.masked_fill(future_toy, float("-inf")).softmax(dim=-1)

fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), sharey=True, layout="constrained")
names = ("full attention", "causal (M added)")
for ax, w, name in zip(axes, (w_full, w_causal), names):
    im = ax.imshow(w, vmin=0, vmax=1)
    ax.grid(False)
    ax.set_title(name)
    ax.set_xlabel("key position m")
axes[0].set_ylabel("query position l")
fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
fig.suptitle("The causal mask zeroes every weight above the diagonal; "
             "rows still sum to 1")
plt.show()

# %%
# From scratch
# ------------


def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# %%
# GPT-2's linear layer ``Conv1D(nf, nx)``: ``nn.Linear(nx, nf)``, weight ``(nx, nf)``.


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


# %%
# GPT-2's attention layer: ``_attn`` keeps the visible logits and sets every future one
# to ``-1e4`` (OpenAI's code: ``1e10``); ``ns - nd`` serves cached keys.


class CausalAttention(nn.Module):
    """GPT-2's attention, (B, L, D) -> (B, L, D); mask buffer `bias`, as in GPT-2."""

    def __init__(self, d_model, n_head, n_ctx):
        super().__init__()
        self.n_head, self.d_model = n_head, d_model
        self.c_attn = Conv1D(3 * d_model, d_model)  # D -> 3D
        self.register_buffer(  # (1, 1, n_ctx, n_ctx): 1 where key <= query
            "bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))
        self.c_proj = Conv1D(d_model, d_model)

    def split_heads(self, x):  # (B, L, D) -> (B, Nh, L, Dh)
        return x.unflatten(-1, (self.n_head, -1)).transpose(1, 2)

    def merge_heads(self, x):  # (B, Nh, L, Dh) -> (B, L, D)
        return x.transpose(1, 2).flatten(-2)

    def _attn(self, q, k, v):
        w = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(v.size(-1))  # (B,Nh,nd,ns)
        nd, ns = w.size(-2), w.size(-1)  # queries, keys (ns > nd with cached keys)
        b = self.bias[:, :, ns - nd:ns, :ns]  # (1, 1, nd, ns): 1 where key <= query
        w = w * b - 1e4 * (1 - b)
        return torch.matmul(w.softmax(dim=-1), v)  # (B, Nh, nd, Dh)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.d_model, dim=-1)  # each (B, L, D)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        return self.c_proj(self.merge_heads(self._attn(q, k, v)))  # (B, L, D)


def draw_weights(layer):
    """Redraw c_attn and c_proj for a small D: std 1/sqrt(nx), nonzero biases."""
    with torch.no_grad():
        for conv in (layer.c_attn, layer.c_proj):
            conv.weight.normal_(std=conv.weight.shape[0] ** -0.5)  # weight is (nx, nf)
            conv.bias.normal_(std=0.1)
    return layer


# %%
# The test of causality: change the tokens after ``t``; outputs ``0 .. t`` stay put.


def future_leak(layer, x):
    """Largest change of the outputs at positions <= t when tokens after t change.

    layer maps (B, L, D) -> (B, L, D); x (B, L, D)."""
    B, L, D = x.shape
    g = torch.Generator(device=x.device).manual_seed(1)
    leak = 0.0
    with torch.no_grad():
        y = layer(x)  # (B, L, D)
        for t in range(L - 1):
            x_new = x.clone()
            x_new[:, t + 1:] = torch.randn(B, L - t - 1, D, device=x.device,
                                          generator=g)
            moved = (layer(x_new)[:, : t + 1] - y[:, : t + 1]).abs().max().item()
            leak = max(leak, moved)
    return leak

# %%
# The layer (weights redrawn for ``D = 32``, ``n_ctx > L``, ``L != Dh``) is blind to the
# future, exactly.
B, L, D, Nh, n_ctx = 2, 10, 32, 4, 16
Dh = D // Nh
gpt2 = draw_weights(CausalAttention(D, Nh, n_ctx)).to(device).eval()
x = torch.randn(B, L, D, device=device)  # (B, L, D)
leak_gpt2 = future_leak(gpt2, x)
print(f"GPT-2 layer: past outputs move by {leak_gpt2} when the future changes")
assert leak_gpt2 == 0.0  # exactly: the future's weights are exactly zero

# %%
# Proof: four ways to write the mask; cached keys; why ``-1e4`` is enough
# -----------------------------------------------------------------------
# ``scaled_dot_product_attention`` takes a **boolean** ``attn_mask`` where ``True``
# means *may attend*, or a **float** mask that is *added* to the logits (``0`` to keep,
# ``-inf`` to drop), or ``is_causal=True``, which builds the lower-triangular mask
# itself. The whole layer equals PyTorch's attention with ``is_causal=True`` too.


def qkv_heads(attn, x):
    """The layer's own projection and head split: q, k, v each (B, Nh, L, Dh)."""
    q, k, v = attn.c_attn(x).split(attn.d_model, dim=-1)  # each (B, L, D)
    return attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)


# %%
with torch.no_grad():
    q, k, v = qkv_heads(gpt2, x)  # each (B, Nh, L, Dh)
    masked = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, Nh, L, Dh)
    causal = gpt2.c_proj(gpt2.merge_heads(masked))  # (B, L, D)
    y_gpt2 = gpt2(x)
print(f"max|GPT-2 layer - causal SDPA layer| = "
      f"{(y_gpt2 - causal).abs().max().item():.2e}")
torch.testing.assert_close(y_gpt2, causal)
with torch.no_grad():
    keep = causal_mask(L, device)  # (L, L), True = attend
    additive = torch.zeros(L, L, device=device).masked_fill(~keep, float("-inf"))
    versions = {
        "GPT-2 w * b - 1e4 * (1 - b)": gpt2._attn(q, k, v),
        "boolean attn_mask (True = attend)":
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
        "additive attn_mask (0 / -inf)":
            F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
    }
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, Nh, L, Dh)
for name, out in versions.items():
    print(f"{name:34s} max|diff to is_causal| = {(out - ref).abs().max().item():.2e}")
    torch.testing.assert_close(out, ref)

# %%
# Cached keys, where ``ns - nd`` matters.
#
# Without a cache ``nd = ns`` and the slice is the buffer's top-left corner, so nothing
# above would notice ``self.bias[:, :, :nd, :ns]`` instead. It matters when GPT-2
# generates: the keys and values of the tokens already seen are cached (``layer_past``
# in its code) and only the new tokens are projected, so ``nd`` queries meet ``ns > nd``
# keys. Query ``i`` of the new block sits at position ``ns - nd + i`` and needs that row
# of the mask. Here the first 6 tokens are cached and the last ``nd = 4`` are new: their
# outputs must be the last 4 rows of the full computation.
def attention_with_cache(layer, x_new, k_past, v_past):
    """The layer on new tokens (B, nd, D), given cached keys, values (B, Nh, *, Dh)."""
    q, k, v = qkv_heads(layer, x_new)  # each (B, Nh, nd, Dh)
    k = torch.cat([k_past, k], dim=-2)  # (B, Nh, ns, Dh)
    v = torch.cat([v_past, v], dim=-2)  # (B, Nh, ns, Dh)
    return layer.c_proj(layer.merge_heads(layer._attn(q, k, v)))  # (B, nd, D)


# %%
n_past = 6
with torch.no_grad():
    x_past, x_new = x[:, :n_past].contiguous(), x[:, n_past:].contiguous()
    _, k_past, v_past = qkv_heads(gpt2, x_past)  # the cache, (B, Nh, 6, Dh) each
    y_cached = attention_with_cache(gpt2, x_new, k_past, v_past)  # (B, 4, D)
print(f"nd = {L - n_past} new tokens, ns = {L} keys: max|cached - full, last rows| = "
      f"{(y_cached - y_gpt2[:, n_past:]).abs().max().item():.2e}")
torch.testing.assert_close(y_cached, y_gpt2[:, n_past:])

# %%
# Why ``-1e4`` is enough here, and why it is not ``-inf``.
#
# In float32 :math:`e^{-10^4 - z_{\max}}` (:math:`z_{\max}` the row's largest logit)
# underflows to exactly 0, so the future gets weight exactly zero; but a finite constant
# works only while it lies far below every real logit (and fits the dtype), which fails
# for logits of magnitude ``1e4`` and, for OpenAI's ``1e10``, in
# :doc:`float16 </generated/normalization/plot_16_norms_16bit>`.
with torch.no_grad():
    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(Dh)  # (B, Nh, L, L)
    b = gpt2.bias[:, :, :L, :L]  # (1, 1, L, L)
    weights = (logits * b - 1e4 * (1 - b)).softmax(dim=-1)  # (B, Nh, L, L)
above = weights[..., ~keep]  # every weight above the diagonal
print(f"float32: logits in [{logits.min():.1f}, {logits.max():.1f}], "
      f"largest future weight "
      f"{above.max().item()}")
assert (above == 0).all()

big = torch.full((L, L), -2e4, device=device)  # every logit -2e4: below the mask value
leaky = (big * b[0, 0] - 1e4 * (1 - b[0, 0])).softmax(dim=-1)  # (L, L)
exact = (big + additive).softmax(dim=-1)  # (L, L)
print(f"logits at -2e4: weight on the future with -1e4 {leaky[0, 1:].sum().item():.2f} "
      f"(query 0), with -inf {exact[0, 1:].sum().item():.2f}")
assert leaky[0, 1:].sum() > 0.99 and (exact[~keep] == 0).all()

mask_value16 = torch.tensor(1e10, dtype=torch.float16)  # float16's largest: 65504
print(f"float16(1e10) = {mask_value16.item()}, so (1 - b) * it has NaN where b = 1")
assert mask_value16.isinf() and ((1 - b.half()) * mask_value16).isnan().any()

# %%
# Without the mask (the notes' layer, scaled here, so only the mask differs) every query
# spreads weight over the future; with it, the rows still sum to 1.
with torch.no_grad():
    full = logits.softmax(dim=-1)  # (B, Nh, L, L), no mask
print(f"weight above the diagonal: full attention {full[0, 0][~keep].sum().item():.2f} "
      f"(over all queries), causal {weights[0, 0][~keep].sum().item()}")
assert full[0, 0][~keep].sum() > 1.0
torch.testing.assert_close(weights.sum(dim=-1), torch.ones(B, Nh, L, device=device))

# %%
# .. _errata-causal-does-not-run:
#
# Proof: the notes' layer does not run
# ------------------------------------
# The source notes' GPT-2 ``Attention``, verbatim but renamed ``NotesAttention`` (their
# ``Conv1D`` is the one above, with ``view`` for ``reshape``; their snippet uses ``nn``
# and ``Parameter`` without importing them). ``Conv1D(nf, nx)`` takes the *output* width
# first, but the notes build ``Conv1D(d_model, d_model * 3)``: a weight that maps
# ``3 * 768`` features to ``768``, so the first call fails. GPT-2 writes
# ``Conv1D(3 * D, D)``. (``c_proj = Conv1D(d_model, d_model)`` is square, so its
# argument order cannot go wrong.)
class NotesAttention(nn.Module):

    def __init__(
        self,
        d_model=768,
        n_head=12,
        n_ctx=1024,
        d_head=64,
        bias=True,
        scale=False,
    ):
        super().__init__()
        self.n_head = n_head
        self.d_model = d_model
        self.c_attn = Conv1D(d_model, d_model * 3)
        self.scale = scale
        self.softmax = nn.Softmax(dim=-1)
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))
        self.dropout = nn.Dropout(0.1)
        self.c_proj = Conv1D(d_model, d_model)

    def split_heads(self, x):
        "return shape [`batch`, `head`, `sequence`, `features`]"
        new_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_shape)
        return x.permute(0, 2, 1, 3)

    def _attn(self, q, k, v, attn_mask=None):
        scores = torch.matmul(q, k.transpose(-2, -1))
        if self.scale:
            scores = scores / math.sqrt(v.size(-1))
        nd, ns = scores.size(-2), scores.size(-1)  # noqa: F841 (the notes, verbatim)
        if attn_mask is not None:
            scores = scores + attn_mask
        scores = self.softmax(scores)
        scores = self.dropout(scores)
        outputs = torch.matmul(scores, v)
        return outputs

    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_shape = x.size()[:-2] + (x.size(-2) * x.size(-1), )
        return x.view(*new_shape)

    def forward(self, x):
        # original x shape: ..., n_batch, d_model
        # x shape: ..., n_batch, 3 * d_model
        x = self.c_attn(x)
        # q, k, v shape: ..., n_batch, d_model
        q, k, v = x.split(self.d_model, dim=-1)
        # q, k, v shape: ..., n_head, n_batch, d_key
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        # out shape: ..., n_head, n_batch, d_key
        out = self._attn(q, k, v)
        # out shape: ..., n_batch, d_model
        out = self.merge_heads(out)
        # out shape: ..., n_batch, d_model
        out = self.c_proj(out)
        return out


# Used in the 3-D section below: the notes' layer, split and merge over the last dims.
class NotesAttentionAnyDims(NotesAttention):
    """The notes' layer with split_heads and merge_heads over the last dims only."""

    def split_heads(self, x):  # (..., L, D) -> (..., Nh, L, Dh)
        x = x.view(*x.size()[:-1], self.n_head, x.size(-1) // self.n_head)
        return x.transpose(-3, -2)

    def merge_heads(self, x):  # (..., Nh, L, Dh) -> (..., L, D)
        x = x.transpose(-3, -2).contiguous()  # (..., L, Nh, Dh)
        return x.view(*x.size()[:-2], x.size(-2) * x.size(-1))



# %%
# Built as the notes build it, at GPT-2's width, the layer fails on its first call.
try:
    NotesAttention().to(device)(torch.randn(1, 10, 768, device=device))  # D = 768
except RuntimeError as err:
    print(f"RuntimeError: {err}")
else:
    raise AssertionError("expected the notes' Attention to fail on its c_attn shapes")


# %%
# The mask the notes register is the causal mask (their layer never reads it). With
# ``c_attn`` rebuilt in GPT-2's order and the GPT-2 layer's weights loaded (same names,
# same mask buffer), the layer runs.
notes = NotesAttention(d_model=D, n_head=Nh, n_ctx=n_ctx)
print(f"notes' buffer == causal_mask(n_ctx): "
      f"{torch.equal(notes.bias[0, 0], causal_mask(n_ctx).float())}")
assert torch.equal(notes.bias[0, 0], causal_mask(n_ctx).float())
notes.c_attn = Conv1D(3 * D, D)
notes.load_state_dict(gpt2.state_dict())
notes = notes.to(device)
print(f"c_attn.weight {tuple(notes.c_attn.weight.shape)}, "
      f"output {tuple(notes(x).shape)}, scale={notes.scale}, "
      f"dropout p={notes.dropout.p}")
assert notes(x).shape == (B, L, D)

# %%
# Two smaller slips. The attention dropout ``p = 0.1`` is hard-wired, so the layer is
# random in training mode (two calls differ) and deterministic only after ``.eval()``.
# And ``d_head`` and ``bias`` are accepted but never used (the name ``bias`` is then
# taken by the mask buffer); ``nd, ns`` are computed and never used, and the comments
# call the sequence axis ``n_batch``.
with torch.no_grad():
    train_gap = (notes(x) - notes(x)).abs().max().item()
notes.eval()
with torch.no_grad():
    eval_gap = (notes(x) - notes(x)).abs().max().item()
print(f"two calls differ by {train_gap:.2f} in train mode, by {eval_gap} in eval mode")
assert train_gap > 0.01 and eval_gap == 0
odd = NotesAttention(d_model=D, n_head=Nh, n_ctx=n_ctx, d_head=1000, bias=False)
shapes = {name: tuple(t.shape) for name, t in odd.state_dict().items()}
plain = NotesAttention(d_model=D, n_head=Nh, n_ctx=n_ctx)
print("d_head=1000, bias=False: the default state_dict")
for name, shape in shapes.items():
    print(f"    {name} {shape}")
assert shapes == {name: tuple(t.shape) for name, t in plain.state_dict().items()}

# %%
# .. _errata-causal-3d-only:
#
# Proof: the notes' layer takes only 3-D inputs
# ---------------------------------------------
# The notes' comments promise shapes ``..., n_batch, d_model``: any leading dims. Their
# ``Conv1D`` keeps that promise (it flattens every leading dim), but ``split_heads``
# ends with ``permute(0, 2, 1, 3)``, which needs exactly four dims after the head split,
# so only a 3-D input ``(B, L, D)`` gets through (and ``merge_heads`` has the same
# ``permute``). One sequence ``(L, D)``, or a batch of batches ``(N, B, L, D)``, raises.
for shape in ((L, D), (3, B, L, D)):
    try:
        notes(torch.randn(*shape, device=device))
    except RuntimeError as err:
        print(f"input {shape}: RuntimeError: ... {str(err).split('i.e. ')[-1]}")
    else:
        raise AssertionError(f"expected the notes' split_heads to fail on {shape}")


# %%
# Splitting and merging over the *last* dims keeps the promise: ``transpose(-3, -2)``
# instead of ``permute(0, 2, 1, 3)``. With the notes' weights, one sequence gives its
# row of the batched output, and ``(N, B, L, D)`` gives the ``(N * B, L, D)`` output
# (``NotesAttentionAnyDims``, defined next to the notes' layer above).
any_dims = NotesAttentionAnyDims(d_model=D, n_head=Nh, n_ctx=n_ctx)
any_dims.c_attn = Conv1D(3 * D, D)
any_dims.load_state_dict(notes.state_dict())
any_dims = any_dims.to(device).eval()
x4 = torch.randn(3, B, L, D, device=device)  # (N, B, L, D)
with torch.no_grad():
    one, one_ref = any_dims(x[0]), notes(x[:1])[0]  # (L, D)
    four, four_ref = any_dims(x4), notes(x4.flatten(0, 1)).view(3, B, L, D)
print(f"(L, D) input: max|diff| = {(one - one_ref).abs().max().item():.2e}; "
      f"(N, B, L, D) input: max|diff| = {(four - four_ref).abs().max().item():.2e}")
torch.testing.assert_close(one, one_ref)
torch.testing.assert_close(four, four_ref)

# %%
# .. _errata-causal-no-scale:
#
# Proof: the notes' layer has no mask and no scale
# ------------------------------------------------
# Its ``_attn`` is called with ``attn_mask=None`` and ``scale=False`` is the default, so
# it is attention with *no mask and no scale*: PyTorch's attention with ``scale=1`` and
# nothing else. GPT-2's model builds this layer with ``scale=True`` and applies its
# mask.
with torch.no_grad():
    q, k, v = qkv_heads(notes, x)  # each (B, Nh, L, Dh)
    unscaled = F.scaled_dot_product_attention(q, k, v, scale=1.0)  # no mask (B,Nh,L,Dh)
    named = notes.c_proj(notes.merge_heads(unscaled))  # (B, L, D)
    y_notes = notes(x)  # (B, L, D)
gap = (y_notes - causal).abs().max().item()  # causal: the GPT-2 layer's output, above
err = (y_notes - named).abs().max().item()
print(f"max|notes - attention(scale=1, no mask)| = {err:.2e}")
print(f"max|notes - causal scaled attention|     = {gap:.2f}")
torch.testing.assert_close(y_notes, named)
assert gap > 0.1

# %%
# .. _errata-causal-sees-future:
#
# Proof: the notes' layer sees the future
# ---------------------------------------
# The decisive test of causality, run on the notes' layer: the outputs at positions
# ``0 .. t`` move for every ``t`` when the tokens after ``t`` change.
leak_notes = future_leak(notes, x)
print(f"notes' layer: past outputs move by up to {leak_notes:.2f} "
      f"when the future changes")
assert leak_notes > 0.1

# %%
# Try it: pad a sequence. Do its real tokens notice, in an encoder?
# -----------------------------------------------------------------
# Give the second sequence ``6`` real tokens and ``4`` padding, run *bidirectional*
# attention with and without a padding mask: do real tokens match the sequence alone?


def encoder_attention(layer, x, mask=None):
    """layer's projections, bidirectional attention; x (B, L, D), mask (B, 1, 1, L)."""
    q, k, v = qkv_heads(layer, x)  # each (B, Nh, L, Dh)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, Nh, L, Dh)
    return layer.c_proj(layer.merge_heads(heads))  # (B, L, D)


# %%
# Masked, unmasked, and the second sequence alone.
n = 6  # real tokens in the second sequence
lengths = torch.tensor([L, n], device=device)
real = torch.arange(L, device=device) < lengths[:, None]  # (B, L), True = real token
x_pad = x.clone()  # the padding positions hold arbitrary vectors
with torch.no_grad():
    q, k, v = qkv_heads(gpt2, x_pad)
    logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(Dh)  # (B, Nh, L, L)
    pad_weights = logits.masked_fill(~real[:, None, None, :], float("-inf"))
    pad_weights = pad_weights.softmax(dim=-1)  # (B, Nh, L, L)
    y_masked = encoder_attention(gpt2, x_pad, real[:, None, None, :])  # (B, L, D)
    y_unmasked = encoder_attention(gpt2, x_pad)
    y_alone = encoder_attention(gpt2, x_pad[1:, :n])  # the second sequence, no padding
err = (y_masked[1, :n] - y_alone[0]).abs().max().item()
gap = (y_unmasked[1, :n] - y_alone[0]).abs().max().item()
print(f"weight on padded keys: {pad_weights[1, ..., n:].max().item()}")
print(f"real tokens vs the sequence alone: masked {err:.2e}, unmasked {gap:.2f}")
assert (pad_weights[1, ..., n:] == 0).all()
torch.testing.assert_close(y_masked[1, :n], y_alone[0])
assert gap > 0.1, "padding no longer changes the real tokens' outputs?"

# %%
# Only with the mask. Unmasked, the real tokens attend to the padding and move; the
# ``(B, 1, 1, L)`` boolean mask (``True`` = attend) broadcasts over heads and queries
# and gives the padding keys exactly zero weight.

# %%
# Try it: does a causal layer need a padding mask for trailing padding?
# ---------------------------------------------------------------------
# Run the causal layer on the padded batch, no padding mask: do the real tokens match?
with torch.no_grad():
    y_causal_pad, y_causal_alone = gpt2(x_pad), gpt2(x_pad[1:, :n])
print(f"causal layer, real tokens vs alone: "
      f"max|diff| = {(y_causal_pad[1, :n] - y_causal_alone[0]).abs().max().item():.2e}")
torch.testing.assert_close(y_causal_pad[1, :n], y_causal_alone[0])

# %%
# No: *trailing* padding needs nothing more: every padding key lies
# after every real query, so the causal mask already hides it.

# %%
# Try it: give ``nn.MultiheadAttention`` the mask ``real`` as ``key_padding_mask``
# --------------------------------------------------------------------------------
# ``real`` is ``True`` on the tokens to attend, as SDPA wants: what does MHA do with it?
mha = nn.MultiheadAttention(D, Nh, batch_first=True).to(device)
mha.load_state_dict({"in_proj_weight": gpt2.c_attn.weight.T,
                     "in_proj_bias": gpt2.c_attn.bias,
                     "out_proj.weight": gpt2.c_proj.weight.T,
                     "out_proj.bias": gpt2.c_proj.bias})
with torch.no_grad():
    y_mha, w_mha = mha(x_pad, x_pad, x_pad, key_padding_mask=~real)
    y_flipped, _ = mha(x_pad, x_pad, x_pad, key_padding_mask=real)  # SDPA's, wrong
gap = (y_flipped[1, :n] - y_masked[1, :n]).abs().max().item()
print(f"key_padding_mask=~real: max|MHA - SDPA with attn_mask=real| = "
      f"{(y_mha - y_masked).abs().max().item():.2e}")
print(f"key_padding_mask=real (True read as ignore): max|diff| on real tokens = "
      f"{gap:.2f};\nthe unpadded sequence, every key ignored, is all NaN: "
      f"{y_flipped[0].isnan().all().item()}")
torch.testing.assert_close(y_mha, y_masked)
assert (w_mha[1, :, n:] == 0).all()  # (B, L, L) weights: padded keys get none
assert gap > 0.1 and y_flipped[0].isnan().all()

# %%
# It ignores exactly the real tokens. ``nn.MultiheadAttention`` takes the padding as
# ``key_padding_mask`` of shape ``(B, L)`` where ``True`` marks a key to **ignore**:
# the opposite of ``scaled_dot_product_attention``'s boolean ``attn_mask``, where
# ``True`` means attend.
# So ``key_padding_mask = ~real``. The weights map across by transposing: ``Conv1D``
# stores ``(nx, nf)``, ``nn.Linear`` stores ``(nf, nx)``.

# %%
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention`` (``attn_mask``, ``is_causal``),
# ``torch.nn.MultiheadAttention`` (``key_padding_mask``), ``torch.tril``,
# ``torch.Tensor.masked_fill``.
