"""
A whole block, pre-LN and post-LN
=================================

A transformer block is two residual sublayers, multi-head self-attention and then a GELU MLP,
each paired with a LayerNorm. GPT-2 normalizes the input of each sublayer (pre-LN); the original
Transformer normalizes after each residual sum (post-LN). This page writes both from scratch
and proves them equal to ``nn.TransformerEncoderLayer`` (``norm_first=True`` and ``False``), with
and without a causal mask, on PyTorch's fused fast path and on its plain one. It ends with a
PyTorch caveat for GPT-2's tanh GELU and with what each order does to the residual stream.
"""

# %%
# Setup
# -----
# Every page picks its device at run time and prints it; each claim holds on CPU and GPU.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The block from scratch
# ----------------------
# Attention uses one packed in-projection ``Linear(D, 3D)`` whose output splits into ``q, k, v``
# (the rows of its weight are ``[W_q; W_k; W_v]``, PyTorch's ``in_proj_weight`` layout), scales
# the logits by ``1 / sqrt(Dh)`` *before* the softmax, and masks the future with ``-inf`` when
# asked. The MLP is ``D -> 4D -> D`` with GELU. Only the place of the two LayerNorms differs
# between the two orders.
import math

import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """One transformer block on (B, L, D): pre-LN (GPT-2) or post-LN (the 2017 Transformer)."""

    def __init__(self, D, Nh, norm_first=True, approximate="none"):
        super().__init__()
        self.Nh, self.norm_first, self.approximate = Nh, norm_first, approximate
        self.ln_1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)  # packed in-projection
        self.out = nn.Linear(D, D)
        self.ln_2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.proj = nn.Linear(4 * D, D)

    def attn(self, x, causal=False):
        B, L, D = x.shape
        Nh, Dh = self.Nh, D // self.Nh
        q, k, v = self.qkv(x).split(D, dim=-1)  # 3 x (B, L, D)
        q, k, v = (t.reshape(B, L, Nh, Dh).transpose(1, 2) for t in (q, k, v))  # (B, Nh, L, Dh)
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
        if causal:
            future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
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
# ``nn.TransformerEncoderLayer`` holds the same twelve tensors under other names. Dropout is set
# to 0 and the layer put in eval mode. Its fresh biases are zero and its LayerNorm weights one,
# which would hide a bias or a norm weight copied to the wrong place, so every parameter is
# moved off its init first. ``load_state_dict`` is strict: a missing or extra name fails it.
B, L, D, Nh = 2, 10, 32, 4
NAMES = {  # ours -> nn.TransformerEncoderLayer's
    "ln_1.weight": "norm1.weight",
    "ln_1.bias": "norm1.bias",
    "qkv.weight": "self_attn.in_proj_weight",  # (3D, D)
    "qkv.bias": "self_attn.in_proj_bias",  # (3D,)
    "out.weight": "self_attn.out_proj.weight",
    "out.bias": "self_attn.out_proj.bias",
    "ln_2.weight": "norm2.weight",
    "ln_2.bias": "norm2.bias",
    "fc.weight": "linear1.weight",  # (4D, D)
    "fc.bias": "linear1.bias",
    "proj.weight": "linear2.weight",  # (D, 4D)
    "proj.bias": "linear2.bias",
}


def torch_layer(norm_first, activation="gelu"):
    """nn.TransformerEncoderLayer in eval mode, every parameter moved off its init."""
    layer = nn.TransformerEncoderLayer(
        d_model=D, nhead=Nh, dim_feedforward=4 * D, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first,
    ).to(device).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return layer


def ours_from(layer, approximate="none"):
    """Our Block carrying the layer's weights."""
    block = Block(D, Nh, layer.norm_first, approximate).to(device).eval()
    state = layer.state_dict()
    block.load_state_dict({ours: state[theirs] for ours, theirs in NAMES.items()})
    return block


layer = torch_layer(norm_first=True)
assert sorted(NAMES.values()) == sorted(name for name, _ in layer.named_parameters())
print(f"all {len(NAMES)} parameters of nn.TransformerEncoderLayer are mapped")

# %%
# Both orders, with and without a causal mask, on both of PyTorch's paths
# -----------------------------------------------------------------------
# In eval mode, under ``torch.no_grad()``, ``TransformerEncoderLayer`` takes its "sparsity fast
# path": one fused kernel, ``torch._transformer_encoder_layer_fwd``. With autograd on (and
# weights that require grad) it runs the plain Python path instead. Both are compared with our
# block. The causal mask is PyTorch's float mask (``-inf`` above the diagonal), passed with
# ``is_causal=True`` as a hint, never alone.
x = torch.randn(B, L, D, device=device)  # (B, L, D)
causal_mask = nn.Transformer.generate_square_subsequent_mask(L, device=device)  # (L, L)
assert torch.equal(causal_mask.isinf(), torch.ones(L, L, dtype=torch.bool, device=device).triu(1))

for norm_first in (True, False):
    layer = torch_layer(norm_first)
    block = ours_from(layer)
    for causal in (False, True):
        mask = causal_mask if causal else None
        with torch.no_grad():
            ours = block(x, causal)  # (B, L, D)
            fast = layer(x, src_mask=mask, is_causal=causal)  # fused kernel
        slow = layer(x, src_mask=mask, is_causal=causal).detach()  # autograd on: Python path
        order = "pre-LN " if norm_first else "post-LN"
        print(f"{order} causal={causal!s:5}: max|ours - fast path| = "
              f"{(ours - fast).abs().max().item():.1e}, max|ours - plain path| = "
              f"{(ours - slow).abs().max().item():.1e}")
        torch.testing.assert_close(ours, fast)
        torch.testing.assert_close(ours, slow)

# %%
# The causal mask is not decoration here: the same pre-LN block without it gives other numbers.
layer = torch_layer(norm_first=True)
block = ours_from(layer)
with torch.no_grad():
    gap = (block(x, causal=True) - block(x, causal=False)).abs().max().item()
print(f"pre-LN, max|causal - full| = {gap:.2f}")
assert gap > 0.1

# %%
# ``activation="gelu"`` is the exact GELU; GPT-2 used the tanh form
# -----------------------------------------------------------------
# The string ``"gelu"`` becomes ``F.gelu``, the exact ``x * Phi(x)``. GPT-2 was trained with the
# tanh approximation, which differs by up to ``5e-4`` per activation
# (:doc:`/generated/transformer/plot_04_conv1d_feedforward`). The natural way to ask for it is
# ``activation=nn.GELU(approximate="tanh")``; the plain path honours it.
print(f"activation='gelu' stored as F.gelu: {layer.activation is F.gelu}")
assert layer.activation is F.gelu

layer_tanh = torch_layer(norm_first=True, activation=nn.GELU(approximate="tanh"))
block_tanh = ours_from(layer_tanh, approximate="tanh")
block_exact = ours_from(layer_tanh, approximate="none")
slow = layer_tanh(x).detach()
with torch.no_grad():
    ours_tanh, ours_exact, fast = block_tanh(x), block_exact(x), layer_tanh(x)
print(f"plain path: max|ours (tanh) - torch| = {(ours_tanh - slow).abs().max().item():.1e}")
torch.testing.assert_close(ours_tanh, slow)

# %%
# The fast path does not: it only learns "GELU or ReLU" (``activation_relu_or_gelu == 2`` for
# any ``nn.GELU``) and its fused kernel computes the exact GELU. So the same layer, in eval
# mode, gives the tanh answer with autograd on and the exact one under ``torch.no_grad()``
# (checked with torch 2.13). Turning the fast path off restores the tanh form.
print(f"fast path: max|ours (exact) - torch| = {(ours_exact - fast).abs().max().item():.1e}, "
      f"max|fast - plain| = {(fast - slow).abs().max().item():.1e}")
torch.testing.assert_close(ours_exact, fast)
assert (fast - slow).abs().max() > 1e-4

torch.backends.mha.set_fastpath_enabled(False)
with torch.no_grad():
    no_fast = layer_tanh(x)
torch.backends.mha.set_fastpath_enabled(True)
print(f"fast path off: max|ours (tanh) - torch| = {(ours_tanh - no_fast).abs().max().item():.1e}")
torch.testing.assert_close(ours_tanh, no_fast)


# %%
# What each order does to the residual stream
# -------------------------------------------
# Stack eight freshly initialized blocks of each order and follow the root mean square of a
# token's vector, ``sqrt(mean over D of x**2)``, block by block. Post-LN ends every block with a
# LayerNorm (weight 1, bias 0 at init), so each token leaves it with unit RMS, up
# to ``eps / (2 var)``. Pre-LN never normalizes the stream: each block *adds* its sublayer
# outputs, so the RMS grows with depth (GPT-2 ends its stack with one more LayerNorm, ``ln_f``).
# That untouched identity path from the last block back to the first is why pre-LN is the usual
# choice for deep stacks: gradients reach early blocks without passing through any LayerNorm.
def stream_rms(norm_first, depth=8):
    """RMS over D of the residual stream after each of `depth` fresh blocks, mean over tokens."""
    torch.manual_seed(1)  # the same input and the same draw of weights for both orders
    h = torch.randn(4, 16, 64, device=device)  # (B, L, D), unit-variance tokens
    rms = [h.pow(2).mean(dim=-1).sqrt()]  # (B, L) per entry of the list
    with torch.no_grad():
        for _ in range(depth):
            h = Block(64, Nh, norm_first).to(device)(h)
            rms.append(h.pow(2).mean(dim=-1).sqrt())
    return torch.stack(rms)  # (depth + 1, B, L)


pre, post = stream_rms(True), stream_rms(False)
pre_mean, post_mean = pre.mean(dim=(1, 2)), post.mean(dim=(1, 2))  # (depth + 1,)
print("pre-LN  RMS by block:", " ".join(f"{r:.3f}" for r in pre_mean.tolist()))
print("post-LN RMS by block:", " ".join(f"{r:.3f}" for r in post_mean.tolist()))
print(f"post-LN: max|token RMS - 1| after a block = {(post[1:] - 1).abs().max().item():.1e}")
assert (post[1:] - 1).abs().max() < 1e-4  # LayerNorm's eps: off by eps / (2 var) ~ 5e-6
assert torch.all(pre_mean[1:] > pre_mean[:-1])  # grows at every block
assert pre_mean[-1] > 1.1 * pre_mean[0]  # measured 1.20

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
ax.plot(pre_mean.cpu(), "o-", label="pre-LN (GPT-2): x + f(LN(x))")
ax.plot(post_mean.cpu(), "s-", label="post-LN (2017): LN(x + f(x))")
ax.set_xlabel("blocks applied")
ax.set_ylabel("RMS of a token's vector (mean over tokens)")
ax.set_title("Pre-LN lets the residual stream grow block by block;\n"
             "post-LN resets every token to unit RMS")
ax.legend()
plt.show()
