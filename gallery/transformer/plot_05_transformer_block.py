"""
A whole block, pre-LN and post-LN
=================================

A transformer block is two residual sublayers, multi-head self-attention and then a GELU
MLP, each paired with a LayerNorm: before each sublayer (pre-LN, GPT-2) or after each
residual sum (post-LN, 2017). This page writes both and checks them against PyTorch's.

**You will learn**

- how a block chains attention and MLP, each inside a residual connection
- where pre-LN and post-LN put their LayerNorms, and how to load PyTorch's weights
- why the pre-LN residual stream grows with depth while post-LN resets it
- which GELU PyTorch's fused fast path computes (a caveat for GPT-2)

**Prerequisites:** :doc:`/generated/transformer/plot_02_multihead_attention` (packed
attention), :doc:`/generated/transformer/plot_04_causal_attention` (the causal mask),
:doc:`/generated/transformer/plot_03_conv1d_feedforward` (the MLP, GELU),
:doc:`/generated/normalization/plot_04_layernorm` (LayerNorm).
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
# Each sublayer adds its output to the residual stream ``x``. The two orders differ
# only in where the LayerNorms sit: pre-LN (GPT-2 :footcite:p:`Radford2019`) normalizes
# each sublayer's input, post-LN (2017, :footcite:t:`Vaswani2017`) each residual sum:
#
# .. math::
#
#    \begin{aligned}
#    \text{pre-LN:}&\quad x \leftarrow x + \mathrm{Attn}(\mathrm{LN}_1(x)), &
#    x &\leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x));\\
#    \text{post-LN:}&\quad x \leftarrow \mathrm{LN}_1(x + \mathrm{Attn}(x)), &
#    x &\leftarrow \mathrm{LN}_2(x + \mathrm{MLP}(x)).
#    \end{aligned}
fig, axes = plt.subplots(1, 2, figsize=(7.5, 4.2))
styles = {"LN": "tab:orange", "Attn": "tab:blue", "MLP": "tab:green", "+": "0.8",
          "x": "0.95", "out": "0.95"}
orders = {  # (label, height), bottom to top; skips: residual (from, to) heights
    "pre-LN (GPT-2)": ([("x", 0), ("LN_1", 1), ("Attn", 2), ("+", 3), ("LN_2", 4),
                        ("MLP", 5), ("+", 6), ("out", 7)], [(0, 3), (3, 6)]),
    "post-LN (2017)": ([("x", 0), ("Attn", 1), ("+", 2), ("LN_1", 3), ("MLP", 4),
                        ("+", 5), ("LN_2", 6), ("out", 7)], [(0, 2), (3, 5)]),
}
for ax, (name, (nodes, skips)) in zip(axes, orders.items()):
    for i, (label, y) in enumerate(nodes):
        color = styles[label.split("_")[0]]
        ax.text(0, y, label, ha="center", va="center", fontsize=10,
                bbox={"boxstyle": "circle" if label == "+" else "round,pad=0.4",
                      "fc": color, "alpha": 0.5})
        if i:
            ax.annotate("", xy=(0, y - 0.3), xytext=(0, y - 0.7),
                        arrowprops={"arrowstyle": "->", "lw": 1.5})
    for j, (y0, y1) in enumerate(skips):  # the residual path, around the sublayer
        right = 0.75 + 0.35 * j
        ax.plot([0.25, right, right], [y0 + 0.1 * j, y0 + 0.1 * j, y1], color="0.3",
                lw=1.2)
        ax.annotate("", xy=(0.25, y1), xytext=(right, y1),
                    arrowprops={"arrowstyle": "->", "lw": 1.2, "color": "0.3"})
    ax.set_xlim(-1.2, 1.4)
    ax.set_ylim(-0.6, 7.6)
    ax.axis("off")
    ax.set_title(name)
fig.suptitle("Pre-LN keeps a path from input to output that no LayerNorm touches;\n"
             "post-LN normalizes the stream after every residual sum")
plt.show()

# %%
# From scratch
# ------------
# Attention with one packed ``Linear(D, 3D)`` (rows ``[W_q; W_k; W_v]``, PyTorch's
# ``in_proj_weight`` layout) and an optional causal mask; a ``D -> 4D -> D`` GELU MLP.


class TransformerBlock(nn.Module):
    """One transformer block on (B, L, D): pre-LN (GPT-2) or post-LN (2017's)."""

    def __init__(self, D, Nh, norm_first=True, approximate="none"):
        super().__init__()
        self.Nh, self.norm_first, self.approximate = Nh, norm_first, approximate
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)  # qkv: packed
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def attn(self, x, causal=False):
        B, L, D = x.shape
        Nh, Dh = self.Nh, D // self.Nh
        q, k, v = self.qkv(x).split(D, dim=-1)  # 3 x (B, L, D), then 3 x (B, Nh, L, Dh)
        q, k, v = (t.reshape(B, L, Nh, Dh).transpose(1, 2) for t in (q, k, v))
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
        if causal:
            future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # L, L
            logits = logits.masked_fill(future, float("-inf"))
        y = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
        return self.out(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)

    def mlp(self, x):
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))  # (B, L, D)

    def forward(self, x, causal=False):
        if self.norm_first:  # pre-LN: the residual stream itself is never normalized
            x = x + self.attn(self.ln_1(x), causal)
            x = x + self.mlp(self.ln_2(x))
        else:  # post-LN: every residual sum is normalized
            x = self.ln_1(x + self.attn(x, causal))
            x = self.ln_2(x + self.mlp(x))
        return x


# %%
# PyTorch's layer and the weight map
# ----------------------------------
# ``nn.TransformerEncoderLayer`` holds the same twelve tensors under other names; each
# is moved off its init (a zero bias or unit weight would hide one copied wrongly).
B, L, D, Nh = 2, 10, 32, 4
NAMES = {  # ours -> nn.TransformerEncoderLayer's
    "ln_1.weight": "norm1.weight", "ln_1.bias": "norm1.bias",
    "qkv.weight": "self_attn.in_proj_weight", "qkv.bias": "self_attn.in_proj_bias",
    "out.weight": "self_attn.out_proj.weight", "out.bias": "self_attn.out_proj.bias",
    "ln_2.weight": "norm2.weight", "ln_2.bias": "norm2.bias",
    "fc.weight": "linear1.weight", "fc.bias": "linear1.bias",  # (4D, D), (4D,)
    "proj.weight": "linear2.weight", "proj.bias": "linear2.bias",  # (D, 4D), (D,)
}


def torch_layer(D, Nh, norm_first, activation="gelu", device="cpu"):
    """nn.TransformerEncoderLayer in eval mode, every parameter moved off its init."""
    layer = nn.TransformerEncoderLayer(
        d_model=D, nhead=Nh, dim_feedforward=4 * D, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first).to(device).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return layer


def block_from_torch(layer, names, approximate="none"):
    """Our TransformerBlock carrying the layer's weights; names: ours -> theirs."""
    D, Nh = layer.linear1.in_features, layer.self_attn.num_heads
    block = TransformerBlock(D, Nh, layer.norm_first, approximate).eval()
    state = layer.state_dict()
    block.load_state_dict({ours: state[theirs] for ours, theirs in names.items()})
    return block.to(layer.linear1.weight.device)



# %%
# Both orders, with and without a causal mask, equal PyTorch's layer (its plain path,
# autograd on; the fused fast path is in a Proof below).
x = torch.randn(B, L, D, device=device)  # (B, L, D)
float_mask = nn.Transformer.generate_square_subsequent_mask(L, device=device)  # (L, L)
for norm_first in (True, False):
    layer = torch_layer(D, Nh, norm_first, device=device)
    block = block_from_torch(layer, NAMES)
    for causal in (False, True):
        with torch.no_grad():
            ours = block(x, causal)  # (B, L, D)
        # PyTorch's float -inf mask, with is_causal=True as a hint, never alone
        theirs = layer(x, src_mask=float_mask if causal else None, is_causal=causal)
        print(f"{'pre-LN ' if norm_first else 'post-LN'} causal={causal!s:5}: "
              f"max|ours - torch| = {(ours - theirs).abs().max().item():.1e}")
        torch.testing.assert_close(ours, theirs.detach())

# %%
# Proof: both orders, with and without a causal mask, on both of PyTorch's paths
# ------------------------------------------------------------------------------
# In eval mode, under ``torch.no_grad()``, ``TransformerEncoderLayer`` takes its
# "sparsity fast path": one fused op, ``torch._transformer_encoder_layer_fwd``. With
# autograd on (and weights that require grad) it runs the plain Python path instead.
# Which path ran is read from the profiler's op names (a PyTorch-internals fact, checked
# with torch 2.13).
#
# Both paths are compared with our block, and here the device matters. The plain path
# computes the exact GELU that ``"gelu"`` asks for, on every device. The fast path does
# so on CPU (torch 2.13); on CUDA its fused kernel computes the *tanh* GELU whatever it
# is asked, ``4e-4`` away from the exact one and ``5e-6`` from a tanh block (measured
# on an H100 with torch 2.11; not yet verified by a GPU build of the book). So on CUDA
# the fast path is compared with our block in tanh GELU, at the default tolerances.
# The float mask is ``-inf`` exactly above the diagonal, and the name map is complete.
from functools import partial

FAST_GELU = "tanh" if device == "cuda" else "none"  # what the fused kernel computes
FUSED_OP = "aten::_transformer_encoder_layer_fwd"


def run_profiled(fn):
    """fn()'s result and the names of the aten ops it dispatched."""
    with torch.autograd.profiler.profile(use_kineto=False) as prof:  # starts in ms
        out = fn()
    return out, {e.key for e in prof.key_averages()}


# %%
above = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
assert torch.equal(float_mask.isinf(), above)
layer = torch_layer(D, Nh, True, device=device)  # the map covers all its parameters
assert sorted(NAMES.values()) == sorted(name for name, _ in layer.named_parameters())
print(f"all {len(NAMES)} parameters of nn.TransformerEncoderLayer are mapped")
fast_gelu = "tanh" if FAST_GELU == "tanh" else "exact"
print(f"max|ours - torch|, ours with the exact GELU against the plain path\n"
      f"and with the {fast_gelu} GELU against the fast path:")
for norm_first in (True, False):
    layer = torch_layer(D, Nh, norm_first, device=device)
    block = block_from_torch(layer, NAMES)  # the exact GELU, as asked
    block_fast = block_from_torch(layer, NAMES, FAST_GELU)  # the fast path's GELU
    for causal in (False, True):
        call = partial(layer, x, src_mask=float_mask if causal else None,
                       is_causal=causal)
        with torch.no_grad():
            ours, ours_fast = block(x, causal), block_fast(x, causal)  # (B, L, D)
            fast, ops_fast = run_profiled(call)  # the fast path
        slow, ops_slow = run_profiled(call)  # autograd on: the plain path
        slow = slow.detach()
        order = "pre-LN " if norm_first else "post-LN"
        print(f"    {order} causal={causal!s:5}: plain path "
              f"{(ours - slow).abs().max().item():.1e}, fast path "
              f"{(ours_fast - fast).abs().max().item():.1e}")
        assert FUSED_OP in ops_fast and FUSED_OP not in ops_slow
        torch.testing.assert_close(ours, slow)
        torch.testing.assert_close(ours_fast, fast)
        if device == "cuda":  # tanh, not the exact GELU (H100, torch 2.11)
            assert (ours - fast).abs().max() > 1e-4

# %%
# Proof: ``activation="gelu"`` is the exact GELU; GPT-2 used the tanh form
# ------------------------------------------------------------------------
# The string ``"gelu"`` becomes ``F.gelu``, the exact ``x * Phi(x)``. GPT-2 was trained
# with the tanh approximation, which differs by up to
# :measured:`plot_03_conv1d_feedforward.max_gap:.1e` per activation
# (:doc:`/generated/transformer/plot_03_conv1d_feedforward`). The natural way to ask for
# it is ``activation=nn.GELU(approximate="tanh")``; the plain path honours it.
print(f"activation='gelu' stored as F.gelu: {layer.activation is F.gelu}")
assert layer.activation is F.gelu

layer_tanh = torch_layer(D, Nh, True, nn.GELU(approximate="tanh"), device)
block_tanh = block_from_torch(layer_tanh, NAMES, "tanh")
block_exact = block_from_torch(layer_tanh, NAMES, "none")
slow = layer_tanh(x).detach()
with torch.no_grad():
    ours_tanh, ours_exact, fast = block_tanh(x), block_exact(x), layer_tanh(x)
print(f"plain path: max|ours (tanh) - torch| = "
      f"{(ours_tanh - slow).abs().max().item():.1e}")
torch.testing.assert_close(ours_tanh, slow)

# %%
# The fast path cannot: the layer hands its fused kernel one flag,
# ``activation_relu_or_gelu``, which is ``2`` for ``"gelu"`` and for any ``nn.GELU``
# alike (a PyTorch-internals fact of torch 2.13; torch 2.11 on CUDA behaves the same
# way, measured on an H100). The kernel then computes its own GELU: the exact one on
# CPU (torch 2.13), the tanh one on CUDA (measured on an H100 with torch 2.11, not yet
# verified by a GPU build of the book). So on CPU the same layer, in eval mode, gives
# the tanh answer with autograd on and the exact one under ``torch.no_grad()``; on CUDA
# it gives the tanh answer both ways, as asked, but by accident. Turning the fast path
# off gives the tanh form on every device.
print(f"activation_relu_or_gelu: 'gelu' {layer.activation_relu_or_gelu}, "
      f"nn.GELU(approximate='tanh') {layer_tanh.activation_relu_or_gelu}")
assert layer.activation_relu_or_gelu == layer_tanh.activation_relu_or_gelu == 2
print(f"fast path: max|ours (exact) - torch| = "
      f"{(ours_exact - fast).abs().max().item():.1e}, max|ours (tanh) - torch| = "
      f"{(ours_tanh - fast).abs().max().item():.1e}")
# CUDA (measured on an H100 with torch 2.11): the tanh GELU, 5.2e-6 from the plain
# path and 3.0e-4 from the exact GELU. CPU: the exact GELU (both gaps printed above).
if device == "cuda":
    computes, other = ours_tanh, ours_exact
else:
    computes, other = ours_exact, ours_tanh
torch.testing.assert_close(computes, fast)
assert (fast - other).abs().max() > 1e-4

torch.backends.mha.set_fastpath_enabled(False)
with torch.no_grad():
    no_fast = layer_tanh(x)
torch.backends.mha.set_fastpath_enabled(True)
print(f"fast path off: max|ours (tanh) - torch| = "
      f"{(ours_tanh - no_fast).abs().max().item():.1e}")
torch.testing.assert_close(ours_tanh, no_fast)


# %%
# Try it: stack eight fresh blocks. Whose residual stream grows?
# --------------------------------------------------------------
# Follow the root mean square of a token's vector, :math:`\sqrt{\frac{1}{D} \sum_d
# x_d^2}`, block by block, through eight freshly initialized blocks of each order.


def stream_rms(norm_first, Nh, device, depth=8):
    """RMS over D of the residual stream after each of `depth` fresh blocks."""
    torch.manual_seed(1)  # the same input and the same draw of weights for both orders
    h = torch.randn(4, 16, 64, device=device)  # (B, L, D), unit-variance tokens
    states = [h]
    with torch.no_grad():
        for _ in range(depth):
            h = TransformerBlock(64, Nh, norm_first).to(device)(h)
            states.append(h)
    return torch.stack(states).pow(2).mean(dim=-1).sqrt()  # (depth + 1, B, L)


# %%
pre, post = stream_rms(True, Nh, device), stream_rms(False, Nh, device)
# The RMS itself, checked on the input stream drawn again: the vector norm over D
# divided by sqrt(D), computed by torch.linalg instead.
torch.manual_seed(1)
h0 = torch.randn(4, 16, 64, device=device)  # (B, L, D), the stream before block 1
rms0 = torch.linalg.vector_norm(h0, dim=-1) / math.sqrt(64)  # (B, L)
print(f"before block 1: max|RMS - norm / sqrt(D)| = "
      f"{(pre[0] - rms0).abs().max().item():.1e}, token RMS from "
      f"{rms0.min().item():.2f} to {rms0.max().item():.2f}")
torch.testing.assert_close(pre[0], rms0)
pre_mean, post_mean = pre.mean(dim=(1, 2)), post.mean(dim=(1, 2))  # (depth + 1,)
torch.testing.assert_close(pre_mean[0], rms0.mean())  # a mean RMS, as printed
print("pre-LN  RMS by block:", " ".join(f"{r:.3f}" for r in pre_mean.tolist()))
print("post-LN RMS by block:", " ".join(f"{r:.3f}" for r in post_mean.tolist()))
print(f"post-LN: max|token RMS - 1| after a block = "
      f"{(post[1:] - 1).abs().max().item():.1e}")
assert (post[1:] - 1).abs().max() < 1e-4  # LayerNorm's eps: off by eps / (2 var) ~ 5e-6
assert len(pre_mean) == 9 and torch.all(pre_mean[1:] > pre_mean[:-1])  # at all 8 blocks
assert pre_mean[-1] > 1.1 * pre_mean[0]  # the last RMS printed above

# %%
fig, ax = plt.subplots()
ax.plot(pre_mean.cpu(), "o-", label="pre-LN (GPT-2): x + f(LN(x))")
ax.plot(post_mean.cpu(), "s-", label="post-LN (2017): LN(x + f(x))")
ax.set_xlabel("blocks applied")
ax.set_ylabel("RMS of a token's vector (mean over tokens)")
ax.set_title("Pre-LN lets the residual stream grow block by block;\n"
             "post-LN resets every token to unit RMS")
ax.legend()
plt.show()

# %%
# Post-LN ends every block with a LayerNorm (weight 1, bias 0 at init), so each token
# leaves it with unit RMS, up to :math:`\epsilon / (2 v)` (row variance :math:`v`).
# Pre-LN never normalizes the stream: each block *adds* its sublayer outputs, so the
# RMS grows with depth (GPT-2 ends its stack with one more LayerNorm, ``ln_f``).

# %%
# Try it: drop the causal mask. Does the block notice?
# ----------------------------------------------------
# Run the same pre-LN block with ``causal=False`` and compare.
layer = torch_layer(D, Nh, True, device=device)
block = block_from_torch(layer, NAMES)
with torch.no_grad():
    gap = (block(x, causal=True) - block(x, causal=False)).abs().max().item()
print(f"pre-LN, max|causal - full| = {gap:.2f}")
assert gap > 0.1

# %%
# Yes: the causal mask is not decoration here, the block gives other numbers.

# %%
# Try it: which order passes more gradient back to the first block?
# -----------------------------------------------------------------
# Stack 24 fresh blocks of each order and follow the gradient of a loss at the top back
# down the residual stream. Which order delivers more of it to block 1?
def stream_grads(norm_first, Nh, device, depth=24):
    """Norms of the loss's gradient w.r.t. the stream before each block, and the top."""
    torch.manual_seed(1)
    stream = [torch.randn(4, 16, 64, device=device, requires_grad=True)]  # (B, L, D)
    for _ in range(depth):
        stream.append(TransformerBlock(64, Nh, norm_first).to(device)(stream[-1]))
        stream[-1].retain_grad()
    readout = torch.randn(4, 16, 64, device=device)  # (B, L, D), a fixed linear loss
    loss = (F.layer_norm(stream[-1], (64,)) * readout).sum()
    loss.backward()
    return torch.stack([h.grad.norm() for h in stream])  # (depth + 1,)


# %%
g_pre, g_post = stream_grads(True, Nh, device), stream_grads(False, Nh, device)
r_pre, r_post = (g_pre[0] / g_pre[-1]).item(), (g_post[0] / g_post[-1]).item()
print(f"|grad| before block 1 / at the top: pre-LN {r_pre:.2f}, post-LN {r_post:.2f}")
assert torch.all(g_pre[:-1] > g_pre[1:])  # pre-LN: grows at every block on the way back
# The ratio is the product of the per-block factors (telescoping), in float64.
for r, g in ((r_pre, g_pre), (r_post, g_post)):
    # r is a float32 quotient, off by at most 2**-24 relative: float64's defaults hold
    torch.testing.assert_close(r, (g[:-1].double() / g[1:].double()).prod().item())
assert r_pre > 1.3  # pre-LN: the gradient reaching block 1 is larger than at the top
assert r_post < 0.95  # post-LN: smaller

# %%
# Pre-LN. Its stream has a path from the last block back to the first that no LayerNorm
# and no branch touches: ``x + f(LN(x))`` passes the gradient it receives back
# unchanged and adds its branch's part. In post-LN every gradient passes two LayerNorms
# per block on the way back. Measure it: a deeper stack of 24 fresh blocks of each
# order, GPT-2's final LayerNorm (no affine) and a fixed random linear readout as the
# loss, and the norm of the gradient that reaches the stream before each block. For
# this seed and PyTorch's default init, a measured fact and not a bound: going back, the
# pre-LN gradient grows at every block, to :measured:`r_pre:.2f` times its size at the
# top; the post-LN gradient reaches the first block at :measured:`r_post:.2f` times its
# size at the top.

# %%
fig, ax = plt.subplots()
ax.plot((g_pre / g_pre[-1]).cpu(), "o-", label="pre-LN (GPT-2)")
ax.plot((g_post / g_post[-1]).cpu(), "s-", label="post-LN (2017)")
ax.axhline(1, color="gray", lw=0.8)
ax.set_xlabel("block (the stream before it; 24 = the top)")
ax.set_ylabel("gradient norm / gradient norm at the top")
ax.set_title("Going back through 24 blocks, pre-LN's gradient grows at every block;\n"
             "post-LN's, passing 48 LayerNorms, shrinks")
ax.legend()
plt.show()

# %%
# References
# ----------
# Post-LN: :footcite:t:`Vaswani2017`, section 3.1. Pre-LN: GPT-2
# :footcite:p:`Radford2019`, section 2.3.
#
# .. footbibliography::
