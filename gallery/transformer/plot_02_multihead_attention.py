"""
Multi-head attention as PyTorch packs it
========================================

``torch.nn.MultiheadAttention`` holds the same four projections as a from-scratch layer,
packed differently: ``W_q``, ``W_k``, ``W_v`` stacked into one ``in_proj_weight``
``(3D, D)``. This page maps a from-scratch layer onto it, outputs and weights equal.

**You will learn**

- how ``Nh`` heads each attend on their own slice of ``Dh = D // Nh`` features
- how ``in_proj_weight`` packs ``W_q``, ``W_k``, ``W_v``, so a fused QKV loads as is
- what ``batch_first``, ``need_weights`` and ``average_attn_weights`` change
- why no output can test the key bias

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (one attention
layer, its heads and its shapes).

.. index:: ! multi-head attention
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Each head ``i`` has its own slice of the query, key and value projections, attends
# on its own, and the heads' outputs are concatenated and projected back to ``D``:
#
# .. math::
#
#    \mathrm{head}_i = \mathrm{softmax}\!\left(\frac{Q_i K_i^\top}{\sqrt{D_h}}\right)
#    V_i, \qquad
#    \mathrm{out} = [\mathrm{head}_0, \dots, \mathrm{head}_{N_h - 1}]\, W_o^\top + b_o,
#
# with :math:`Q_i = (x W_q^\top + b_q)[:, i D_h : (i + 1) D_h]` and likewise
# :math:`K_i, V_i`. PyTorch stores the three input projections as one matrix:
fig, ax = plt.subplots(figsize=(6.4, 3.6))
colors = {"W_q": "tab:blue", "W_k": "tab:orange", "W_v": "tab:green"}
Nh_fig = 4
row_ranges = ("0 .. D-1", "D .. 2D-1", "2D .. 3D-1")
for j, ((name, color), rows) in enumerate(zip(colors.items(), row_ranges)):
    for h in range(Nh_fig):
        top = 3 * Nh_fig - (j * Nh_fig + h)  # rows run downwards
        ax.add_patch(plt.Rectangle((0, top - 1), 4, 1, fc=color, ec="w",
                                   alpha=0.45 + 0.12 * h))
        ax.text(2, top - 0.5, f"head {h}: Dh rows", ha="center", va="center",
                fontsize=8)
    ax.text(-0.3, 3 * Nh_fig - j * Nh_fig - Nh_fig / 2,
            f"{name}\nrows {rows}", ha="right", va="center", fontsize=9)
ax.annotate("", xy=(7.2, 6), xytext=(4.3, 6),
            arrowprops={"arrowstyle": "->", "lw": 2})
ax.text(5.75, 6.4, "reshape(B, L, 3, Nh, Dh)", ha="center", fontsize=8)
ax.text(7.4, 6, "q, k, v:\n(B, Nh, L, Dh)\neach", va="center", fontsize=9)
ax.text(2, -0.6, "D input features (columns)", ha="center", fontsize=9)
ax.set_xlim(-3.5, 9.5)
ax.set_ylim(-1, 3 * Nh_fig + 0.3)
ax.axis("off")
ax.set_title("in_proj_weight (3D, D) stacks W_q, W_k, W_v;\n"
             "each splits into Nh heads of Dh rows")
plt.show()

# %%
# From scratch
# ------------
# Queries from ``x_q`` (``L`` tokens), keys and values from ``x_k``, ``x_v`` (``M``
# tokens); self-attention passes the same tensor three times.
import math

import torch.nn.functional as F


def multi_head_attention(x_q, x_k, x_v, W_q, W_k, W_v, b_q, b_k, b_v, W_o, b_o, Nh):
    """x_q (B, L, D), x_k and x_v (B, M, *) -> out (B, L, D), weights (B, Nh, L, M)."""
    B, L, D = x_q.shape
    M, Dh = x_k.shape[1], D // Nh
    q = F.linear(x_q, W_q, b_q).reshape(B, L, Nh, Dh).transpose(1, 2)  # (B, Nh, L, Dh)
    k = F.linear(x_k, W_k, b_k).reshape(B, M, Nh, Dh).transpose(1, 2)  # (B, Nh, M, Dh)
    v = F.linear(x_v, W_v, b_v).reshape(B, M, Nh, Dh).transpose(1, 2)  # (B, Nh, M, Dh)
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, M)
    weights = logits.softmax(dim=-1)  # (B, Nh, L, M)
    heads = torch.einsum("bhlm,bhmd->bhld", weights, v)  # (B, Nh, L, Dh)
    out = F.linear(heads.transpose(1, 2).reshape(B, L, D), W_o, b_o)  # (B, L, D)
    return out, weights


# %%
# Sizes, input, weights and nonzero biases, so a misplaced bias shows (but one: Try it).
B, L, D, Nh = 2, 6, 32, 4
Dh = D // Nh
x = torch.randn(B, L, D, device=device)  # (B, L, D)
W_q, W_k, W_v, W_o = (torch.randn(D, D, device=device) / math.sqrt(D) for _ in range(4))
b_q, b_k, b_v, b_o = (0.1 * torch.randn(D, device=device) for _ in range(4))

# %%
# Proof: what ``nn.MultiheadAttention`` holds, and its defaults
# -------------------------------------------------------------
# Built with only the required arguments (plus ``batch_first=True`` for ``(B, L, D)``
# inputs), the module has one packed input projection and one output projection, no
# dropout, and its biases start at zero. The default ``batch_first`` is ``False``: a
# later section uses that.
mha = torch.nn.MultiheadAttention(D, Nh, batch_first=True).to(device)
params = {name: tuple(p.shape) for name, p in mha.named_parameters()}
for name, shape in params.items():
    print(f"{name}: {shape}")
print(f"dropout={mha.dropout}, head_dim={mha.head_dim}, "
      f"in_proj_bias all zero: {bool((mha.in_proj_bias == 0).all())}")
assert params == {"in_proj_weight": (3 * D, D), "in_proj_bias": (3 * D,),
                  "out_proj.weight": (D, D), "out_proj.bias": (D,)}
assert mha.dropout == 0.0 and mha.head_dim == Dh and mha.bias_k is None
assert (mha.in_proj_bias == 0).all() and (mha.out_proj.bias == 0).all()
assert torch.nn.MultiheadAttention(D, Nh).batch_first is False

# %%
# Mapping the weights
# -------------------
# ``in_proj_weight`` is ``cat(W_q, W_k, W_v)`` along the output features,
# ``in_proj_bias`` likewise; ``out_proj`` is an ordinary ``nn.Linear``.
with torch.no_grad():  # mha: built in the Proof above, batch_first=True
    mha.in_proj_weight.copy_(torch.cat([W_q, W_k, W_v]))  # (3D, D)
    mha.in_proj_bias.copy_(torch.cat([b_q, b_k, b_v]))  # (3D,)
    mha.out_proj.weight.copy_(W_o)
    mha.out_proj.bias.copy_(b_o)

    ours, ours_w = multi_head_attention(x, x, x, W_q, W_k, W_v, b_q, b_k, b_v,
                                        W_o, b_o, Nh)
    ref, ref_w = mha(x, x, x)  # need_weights=True, average_attn_weights=True by default
    _, ref_w_heads = mha(x, x, x, average_attn_weights=False)
print(f"output {tuple(ref.shape)}: "
      f"max|ours - torch| = {(ours - ref).abs().max().item():.2e}")
print(f"weights, averaged {tuple(ref_w.shape)}: max|ours - torch| "
      f"{(ours_w.mean(dim=1) - ref_w).abs().max().item():.2e}, per head "
      f"{tuple(ref_w_heads.shape)}: {(ours_w - ref_w_heads).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)
torch.testing.assert_close(ours_w.mean(dim=1), ref_w)  # (B, L, L): mean over the heads
torch.testing.assert_close(ours_w, ref_w_heads)  # (B, Nh, L, L)

# %%
# A fused QKV projection loads as it is
# -------------------------------------
# The previous page's ``nn.Linear(D, 3D)``, split by ``reshape(B, L, 3, Nh, Dh)``, has
# the same packing: its weights load with the keys renamed and nothing reordered.
qkv_proj = torch.nn.Linear(D, 3 * D).to(device)
out_proj = torch.nn.Linear(D, D).to(device)
mha_fused = torch.nn.MultiheadAttention(D, Nh, batch_first=True).to(device)
mha_fused.load_state_dict({"in_proj_weight": qkv_proj.weight, "in_proj_bias":
                           qkv_proj.bias, "out_proj.weight": out_proj.weight,
                           "out_proj.bias": out_proj.bias})
with torch.no_grad():
    qkv = qkv_proj(x).reshape(B, L, 3, Nh, Dh).permute(2, 0, 3, 1, 4)  # (3,B,Nh,L,Dh)
    heads = F.scaled_dot_product_attention(*qkv.unbind(0))  # (B, Nh, L, Dh)
    y_fused = out_proj(heads.transpose(1, 2).reshape(B, L, D))  # (B, L, D)
    y_mha, _ = mha_fused(x, x, x)
print(f"fused Linear(D, 3D) layer vs MultiheadAttention: "
      f"max|diff| = {(y_fused - y_mha).abs().max().item():.2e}")
torch.testing.assert_close(y_fused, y_mha)

# %%
# Proof: which code computes it (fast path, fused kernel)
# -------------------------------------------------------
# ``need_weights=False`` returns ``None`` for the weights; the output does not change.
mha.eval()
with torch.no_grad():
    fast, none = mha(x, x, x, need_weights=False)
print(f"need_weights=False: weights {none}, "
      f"max|ours - torch| = {(ours - fast).abs().max():.2e}")
assert none is None
torch.testing.assert_close(ours, fast)

# %%
# Which code runs is a PyTorch-internals fact, read here from the profiler's op names
# (checked with torch 2.13). In eval mode without autograd the module takes its *fast
# path*, one native op, ``aten::_native_multi_head_attention``. With autograd on it runs
# its Python path, which hands the attention to ``scaled_dot_product_attention`` (a
# fused kernel) when no weights are asked for, and computes the weights with ``bmm``
# and ``softmax`` when they are. So the fused kernel is not what the fast path runs on
# CPU: there the native op computes ``bmm`` and ``softmax`` itself, and
# ``need_weights=False`` reaches SDPA's CPU flash kernel only on the Python path. On
# CUDA the kernels underneath depend on dtype and shape; the page prints them and
# asserts the dispatch that does not depend on the device (and that no ``_for_cpu``
# kernel ran) until a GPU build of the book records them.
def aten_ops(fn):
    """The names of the aten ops that fn() dispatches, as the profiler records them."""
    # The autograd profiler without Kineto: it records the same op names and starts in
    # milliseconds, not the second or so that Kineto's first start takes.
    with torch.autograd.profiler.profile(use_kineto=False) as prof:
        fn()
    return {e.key for e in prof.key_averages() if e.key.startswith("aten::")}


# %%
# Each path, profiled: the ops it dispatched.
KERNELS = {"aten::bmm", "aten::_softmax"}  # the unfused attention's two kernels
with torch.no_grad():
    ops_fast = aten_ops(lambda: mha(x, x, x, need_weights=False))  # eval, no autograd
ops_sdpa = aten_ops(lambda: mha(x, x, x, need_weights=False))  # autograd on
ops_weights = aten_ops(lambda: mha(x, x, x, need_weights=True))
for name, ops in (("no_grad", ops_fast), ("autograd, need_weights=False", ops_sdpa),
                  ("autograd, need_weights=True", ops_weights)):
    print(f"{name}:", *(op for op in sorted(ops) if "attention" in op or op in KERNELS),
          sep="\n    ")
assert "aten::_native_multi_head_attention" in ops_fast
assert "aten::_native_multi_head_attention" not in ops_sdpa | ops_weights
assert "aten::scaled_dot_product_attention" in ops_sdpa
assert "aten::scaled_dot_product_attention" not in ops_weights
assert KERNELS <= ops_weights
if device == "cpu":  # the CPU kernels, torch 2.13
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops_sdpa
    assert KERNELS <= ops_fast
    assert not any("scaled_dot_product" in op for op in ops_fast)
else:  # CUDA tensors dispatch no CPU kernel; which CUDA ones is printed, not asserted
    assert not any(op.endswith("_for_cpu") for op in ops_fast | ops_sdpa | ops_weights)

# %%
# Proof: ``batch_first=False`` expects ``(L, B, D)``
# --------------------------------------------------
# The default layout puts the tokens first. With the same weights, transposing the input
# and the output gives the same numbers; the returned weights stay ``(B, L, L)`` in both
# layouts.
mha_lbd = torch.nn.MultiheadAttention(D, Nh).to(device)  # batch_first=False
mha_lbd.load_state_dict(mha.state_dict())
with torch.no_grad():
    x_lbd = x.transpose(0, 1)  # (L, B, D)
    y_lbd, w_lbd = mha_lbd(x_lbd, x_lbd, x_lbd)  # (L, B, D), (B, L, L)
print(f"(L, B, D) in, {tuple(y_lbd.shape)} out, weights {tuple(w_lbd.shape)}, "
      f"max|diff| = "
      f"{(y_lbd.transpose(0, 1) - ref).abs().max().item():.2e}")
torch.testing.assert_close(y_lbd.transpose(0, 1), ref)
torch.testing.assert_close(w_lbd, ref_w)

# %%
# Proof: cross-attention, and keys and values of other widths
# -----------------------------------------------------------
# Queries from one sequence of ``L`` tokens, keys and values from another of ``M``
# tokens (an encoder's output, say). The weights are ``(B, L, M)``: one row per query,
# one column per key.
M = 9
memory = torch.randn(B, M, D, device=device)  # (B, M, D)
with torch.no_grad():
    ours_x, ours_xw = multi_head_attention(x, memory, memory, W_q, W_k, W_v,
                                           b_q, b_k, b_v, W_o, b_o, Nh)
    ref_x, ref_xw = mha(x, memory, memory)
print(f"cross-attention: output {tuple(ref_x.shape)}, weights {tuple(ref_xw.shape)}, "
      f"max|ours - torch| = {(ours_x - ref_x).abs().max().item():.2e}")
assert ref_xw.shape == (B, L, M)
torch.testing.assert_close(ours_x, ref_x)
torch.testing.assert_close(ours_xw.mean(dim=1), ref_xw)

# %%
# With ``kdim`` or ``vdim`` different from ``D`` the three input projections no longer
# share a shape, so the module stores them apart: ``q_proj_weight (D, D)``,
# ``k_proj_weight (D, kdim)``, ``v_proj_weight (D, vdim)``, and ``in_proj_weight`` is
# ``None``. The bias stays packed.
Dk, Dv = 12, 20
mha_kv = torch.nn.MultiheadAttention(D, Nh, kdim=Dk, vdim=Dv, batch_first=True)
mha_kv = mha_kv.to(device)
params = {name: tuple(p.shape) for name, p in mha_kv.named_parameters()}
for name, shape in params.items():
    print(f"{name}: {shape}")
assert mha_kv.in_proj_weight is None
assert params == {"q_proj_weight": (D, D), "k_proj_weight": (D, Dk),
                  "v_proj_weight": (D, Dv), "in_proj_bias": (3 * D,),
                  "out_proj.weight": (D, D), "out_proj.bias": (D,)}

keys = torch.randn(B, M, Dk, device=device)  # (B, M, kdim)
values = torch.randn(B, M, Dv, device=device)  # (B, M, vdim)
with torch.no_grad():
    mha_kv.in_proj_bias.normal_(std=0.1)
    bq, bk, bv = mha_kv.in_proj_bias.chunk(3)  # each (D,)
    ours_kv, _ = multi_head_attention(x, keys, values, mha_kv.q_proj_weight,
                                      mha_kv.k_proj_weight, mha_kv.v_proj_weight,
                                      bq, bk, bv, mha_kv.out_proj.weight,
                                      mha_kv.out_proj.bias, Nh)
    ref_kv, _ = mha_kv(x, keys, values)
print(f"kdim={Dk}, vdim={Dv}: "
      f"max|ours - torch| = {(ours_kv - ref_kv).abs().max().item():.2e}")
torch.testing.assert_close(ours_kv, ref_kv)

# %%
# Try it: change the key bias. What happens to the output?
# --------------------------------------------------------
# Replace ``b_k`` by another vector and run the layer again.
with torch.no_grad():
    b_k_other = b_k + torch.randn_like(b_k)  # (D,), a different key bias
    other, other_w = multi_head_attention(x, x, x, W_q, W_k, W_v, b_q, b_k_other, b_v,
                                          W_o, b_o, Nh)
print(f"another key bias: max|output change| = "
      f"{(other - ours).abs().max().item():.2e}, "
      f"max|weight change| = {(other_w - ours_w).abs().max().item():.2e}")
torch.testing.assert_close(other, ours)
torch.testing.assert_close(other_w, ours_w)

# %%
# Nothing changes, so no output can test the key bias:
# ``q . (k_m + b_k) = q . k_m + q . b_k`` shifts every logit of a row by the same
# amount, and a softmax ignores a shift. Any other key bias gives the same output and
# weights.

# %%
# Try it: hand a ``(B, L, D)`` tensor to ``batch_first=False``. Does it raise?
# ----------------------------------------------------------------------------
# The module built with the default layout expects ``(L, B, D)``.
with torch.no_grad():
    y_wrong, _ = mha_lbd(x, x, x)  # (B, L, D) read as (L', B', D) with L' = B, B' = L
gap = (y_wrong - ref).abs().max().item()
print(f"(B, L, D) into batch_first=False: shape {tuple(y_wrong.shape)}, "
      f"max|diff| = {gap:.2f}")
assert y_wrong.shape == ref.shape and gap > 0.1

# %%
# It raises nothing: the module reads
# ``B`` as the number of tokens and ``L`` as the batch, attends across the batch, and
# returns a tensor of the expected shape holding other numbers.

# %%
# Try it: what do the weights returned by default hold?
# -----------------------------------------------------
# ``mha(x, x, x)`` returns weights of shape ``(B, L, L)``, though each of the ``Nh``
# heads has its own. Which ones are they?
row = ours_w[0, :, 0].cpu()  # (Nh, L): query 0 of batch element 0, every head
peaks = ", ".join(f"{p:.2f}" for p in row.amax(dim=-1).tolist())
print(f"query 0: largest weight per head {peaks}; "
      f"in the average {ref_w[0, 0].amax().item():.2f}")
torch.testing.assert_close(row.mean(dim=0), ref_w[0, 0].cpu())

fig, ax = plt.subplots()
for h in range(Nh):
    ax.plot(row[h], "o-", alpha=0.6, label=f"head {h}")
ax.plot(ref_w[0, 0].cpu(), "k-", lw=2.5, label="returned (mean of heads)")
ax.set_xlabel("key position m")
ax.set_ylabel("attention weight of query 0")
ax.set_title("average_attn_weights=True (the default)\n"
             "returns the mean of the heads' rows")
ax.set_ylim(-0.02, 1.2)  # headroom for the legend
ax.legend(loc="upper center", ncol=3, fontsize="small")
plt.show()

# %%
# Their plain mean (``average_attn_weights=True``). Each head has its own distribution
# over the keys, and the mean can look flatter than any single head: the figure shows
# one query's row in every head.

# %%
# References
# ----------
# ``torch.nn.MultiheadAttention`` (``in_proj_weight``, ``q_proj_weight``,
# ``batch_first``, ``need_weights``, ``average_attn_weights``),
# ``torch.nn.functional.scaled_dot_product_attention``, ``torch.nn.functional.linear``.
