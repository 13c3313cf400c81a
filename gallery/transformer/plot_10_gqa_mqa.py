"""
GQA and MQA: query heads that share keys and values
===================================================

Grouped-query attention (GQA) gives ``Nh`` query heads only ``Nkv`` key/value heads:
each group of ``Nh / Nkv`` consecutive query heads reads the same keys and values, and
the KV cache shrinks by ``Nh / Nkv``. This page writes it from scratch without copying
``k`` or ``v`` and proves it equal to Hugging Face's ``repeat_kv`` followed by ordinary
attention and to PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)``.

**You will learn**

- which key/value head each query head reads in GQA, and why the order matters
- how to compute GQA with one matrix product per group, without repeating ``k``, ``v``
- that multi-query (``Nkv = 1``) and multi-head (``Nkv = Nh``) attention are its ends
- how much the KV cache shrinks, measured on real key and value tensors

**Prerequisites:** :doc:`/generated/transformer/plot_02_multihead_attention` (heads),
:doc:`/generated/transformer/plot_04_causal_attention` (the causal mask),
:doc:`/generated/transformer/plot_09_kv_cache` (the KV cache).

.. index:: ! GQA
.. index:: ! MQA
.. index:: ! grouped-query attention
.. index:: ! multi-query attention
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
from transformers.models.llama.modeling_llama import repeat_kv

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The idea
# --------
# Multi-head attention gives every query head its own keys and values. A decoder keeps
# those of every past token in its cache, so the number of key/value heads, not of
# query heads, sets the cache's size. GQA keeps ``Nkv`` of them, each read by a group
# of :math:`G = N_h / N_{kv}` consecutive query heads:
#
# .. math::
#
#    y_h = \mathrm{softmax}\Big(\frac{q_h K_{\lfloor h/G \rfloor}^\top}{\sqrt{D_h}}
#    + M\Big)\, V_{\lfloor h/G \rfloor}, \qquad h = 0 .. N_h - 1,
#
# and the cache holds :math:`2 B N_{kv} L D_h` numbers per layer instead of
# :math:`2 B N_h L D_h`. Multi-query attention (MQA) is the end ``Nkv = 1``,
# multi-head attention (MHA) the other, ``Nkv = Nh``.
fig, ax = plt.subplots(figsize=(8, 2.6), layout="none")  # fixed margins: faster
fig.subplots_adjust(left=0.16, right=0.99, bottom=0.04, top=0.88)
for panel, (label, n_kv_fig) in enumerate([("MHA", 8), ("GQA", 2), ("MQA", 1)]):
    left = 10 * panel  # each panel 8 heads wide, 2 apart
    per_group = 8 // n_kv_fig  # query heads per key/value head
    centers = [left + (kv + 0.5) * per_group - 0.5 for kv in range(n_kv_fig)]
    for qh in range(8):
        ax.plot([left + qh, centers[qh // per_group]], [1, 0],
                color=f"C{qh // per_group}")
    ax.scatter([left + qh for qh in range(8)], [1] * 8, s=50,
               c=[f"C{qh // per_group}" for qh in range(8)])
    ax.scatter(centers, [0] * n_kv_fig, s=140, marker="s",
               c=[f"C{kv}" for kv in range(n_kv_fig)])
    ax.text(left + 3.5, 1.3, f"{label}: Nkv = {n_kv_fig}, G = {per_group}",
            ha="center", fontsize=10)
ax.set(xlim=(-0.8, 27.8), ylim=(-0.3, 1.5), xticks=[])
ax.set_yticks([0, 1], ["key/value heads", "query heads"])
ax.grid(False)
ax.set_title("Query head h reads key/value head h // G: the cache keeps Nkv of Nh")
plt.show()

# %%
# From scratch
# ------------
# Reshaping ``q`` from ``(B, Nh, L, Dh)`` to ``(B, Nkv, G * L, Dh)`` stacks the ``G``
# heads of a group as ``G * L`` query rows that all meet the group's one ``(L, Dh)``
# block of keys: one matrix product per group, and ``k`` and ``v`` are read where they
# lie, never repeated. The causal mask hides key ``m > l`` from query ``l`` in every
# head.
def grouped_attention(q, k, v):
    """Causal GQA. q (B, Nh, L, Dh); k, v (B, Nkv, L, Dh) -> (B, Nh, L, Dh)."""
    B, Nh, L, Dh = q.shape
    Nkv = k.shape[1]
    G = Nh // Nkv  # query heads per key/value head
    qg = q.reshape(B, Nkv, G * L, Dh)  # group j: heads j*G .. j*G+G-1, stacked as rows
    logits = qg @ k.mT / math.sqrt(Dh)  # k.mT (B, Nkv, Dh, L); (B, Nkv, G * L, L)
    logits = logits.view(B, Nkv, G, L, L)
    future = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)  # (L, L)
    weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = weights.view(B, Nkv, G * L, L) @ v  # (B, Nkv, G * L, Dh)
    return y.view(B, Nh, L, Dh)


# %%
# Equal to ``repeat_kv`` + attention, and to SDPA
# -----------------------------------------------
# Hugging Face's :doc:`Llama </generated/transformer/plot_11_llama_decoder_layer>`
# (eager path) copies each key/value head ``G`` times with ``repeat_kv`` and runs
# ordinary attention, written here on its own; PyTorch's
# :func:`~torch.nn.functional.scaled_dot_product_attention` takes the ``Nkv`` heads
# directly with ``enable_gqa=True``. (``Dh = 16``: a wrong scale moves the scores by a
# factor of 4; ``L = 10 != Dh``: a transposed shape cannot pass.)
def causal_mha(q, k, v):
    """Ordinary causal attention, every head its own keys: (B, Nh, L, Dh) each."""
    L, Dh = q.shape[-2], q.shape[-1]
    scores = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
    mask = torch.full((L, L), float("-inf"), device=q.device).triu(1)  # 0 on/below
    return torch.einsum("bhlm,bhmd->bhld", (scores + mask).softmax(dim=-1), v)


def qkv(B, Nh, Nkv, L, Dh, seed, device):
    """Seeded random q (B, Nh, L, Dh) and k, v (B, Nkv, L, Dh)."""
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(B, Nh, L, Dh, device=device, generator=g)  # (B, Nh, L, Dh)
    k, v = (torch.randn(B, Nkv, L, Dh, device=device, generator=g) for _ in "kv")
    return q, k, v  # k, v: (B, Nkv, L, Dh)


# %%
B, Nh, L, Dh = 2, 8, 10, 16
Nkv = 2
G = Nh // Nkv
q, k, v = qkv(B, Nh, Nkv, L, Dh, seed=1, device=device)
ours = grouped_attention(q, k, v)  # (B, Nh, L, Dh)
hf = causal_mha(q, repeat_kv(k, G), repeat_kv(v, G))
sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
print(f"Nh = {Nh}, Nkv = {Nkv}: q {tuple(q.shape)}, k and v {tuple(k.shape)}")
print(f"max |ours - (repeat_kv + attention)| = {(ours - hf).abs().max():.1e}")
print(f"max |ours - sdpa(enable_gqa=True)|   = {(ours - sdpa).abs().max():.1e}")
torch.testing.assert_close(ours, hf)
torch.testing.assert_close(ours, sdpa)

# %%
# The KV cache shrinks by ``Nh / Nkv``
# ------------------------------------
# The bytes of actual key and value tensors, projected from ``L = 1024`` tokens by a
# ``Linear(D, Nkv * Dh)`` each as in Llama (``Nh = 8``, ``Dh = 16``).
from torch import nn

Lc, D = 1024, 128
x = torch.randn(1, Lc, D, device=device)  # (B = 1, L, D)
kv_bytes, k_cache = {}, {}
with torch.no_grad():
    for n_kv in (1, 2, 4, 8):
        k_proj = nn.Linear(D, n_kv * Dh, bias=False, device=device)
        v_proj = nn.Linear(D, n_kv * Dh, bias=False, device=device)
        k_c = k_proj(x).view(1, Lc, n_kv, Dh).transpose(1, 2)  # (1, Nkv, L, Dh)
        v_c = v_proj(x).view(1, Lc, n_kv, Dh).transpose(1, 2)
        assert k_c.shape == v_c.shape == (1, n_kv, Lc, Dh)
        kv_bytes[n_kv] = k_c.untyped_storage().nbytes() + v_c.untyped_storage().nbytes()
        k_cache[n_kv] = k_c
print("k and v per layer, KiB: "
      + ", ".join(f"Nkv = {n}: {b / 2**10:.0f}" for n, b in kv_bytes.items()))
print("MHA's cache over each: " + " ".join(f"{kv_bytes[Nh] / b:.0f}"
                                           for b in kv_bytes.values()))
for n_kv, nbytes in kv_bytes.items():
    assert kv_bytes[Nh] == (Nh // n_kv) * nbytes  # bytes of the real tensors, exact
assert kv_bytes[1] == 2 * Lc * Dh * 4  # MQA: one head of k and one of v, 4-byte floats

# %%
# Proof: the cache per ``Nkv`` drawn, and what ``repeat_kv`` copies
# -----------------------------------------------------------------
# Hugging Face's eager path expands the cached ``k`` and ``v`` back to ``Nh`` heads at
# every call: for MQA a free view (stride 0), for MHA ``k`` itself, in between a new
# tensor of MHA's size, so there the saving is in the cache, not in eager attention's
# working memory. Grouped attention above and SDPA's CPU flash kernel make no copy.
repeated_bytes, copied = {}, {}
for n_kv, k_c in k_cache.items():
    k_rep = repeat_kv(k_c, Nh // n_kv)  # (1, Nh, L, Dh)
    storage = k_rep.untyped_storage()
    copied[n_kv] = storage.data_ptr() != k_c.untyped_storage().data_ptr()
    repeated_bytes[n_kv] = storage.nbytes()
    print(f"Nkv = {n_kv}: repeat_kv(k, {Nh // n_kv}): "
          + (f"a new {repeated_bytes[n_kv] / 2**10:.0f} KiB tensor" if copied[n_kv]
             else "no copy"))
    assert copied[n_kv] == (1 < n_kv < Nh)  # MQA: a stride-0 view; MHA: k itself
    if copied[n_kv]:
        assert repeated_bytes[n_kv] == kv_bytes[Nh] // 2  # a new k of MHA's size

# %%
fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
n = list(kv_bytes)
ax.bar([str(i) for i in n], [kv_bytes[i] / 2**10 for i in n], color="C0")
for i, name in zip(n, ["MQA", "GQA", "GQA", "MHA"]):
    ax.annotate(f"{name}\n{kv_bytes[i] / 2**10:.0f} KiB", (str(i), kv_bytes[i] / 2**10),
                ha="center", va="bottom", fontsize=8)
ax.set_xlabel("key/value heads Nkv (Nh = 8 query heads)")
ax.set_ylabel("KV cache per layer (KiB)")
ax.set_ylim(0, 1.3 * kv_bytes[Nh] / 2**10)
ax.set_title(f"The KV cache is Nkv / Nh of MHA's: MQA keeps 1/{Nh}\n"
             f"(L = {Lc} tokens, Dh = {Dh}, float32)")
plt.show()

# %%
# Proof: query head h reads key/value head h // G
# -----------------------------------------------
# To read the map off each implementation, give key/value head ``j`` the constant value
# vector ``j``: every attention row averages equal vectors, so query head ``h``
# returns the index of the key/value head it reads. All three give ``h // G``:
# consecutive query heads share a key/value head, the order Hugging Face's Llama uses,
# so a checkpoint's ``q_proj`` rows are read that way.
def head_ids(B, Nkv, L, Dh, device):
    """(B, Nkv, L, Dh) values in which key/value head j holds the constant j."""
    ids = torch.arange(Nkv, device=device, dtype=torch.float32)  # (Nkv,)
    return ids.view(1, Nkv, 1, 1).expand(B, Nkv, L, Dh)


def reads(out):
    """(B, Nh, L, Dh) outputs of the probe -> the key/value head of each query head."""
    return out[0, :, -1, 0].round().long()  # (Nh,)


# %%
heads = torch.arange(Nh, device=device)
v_id = head_ids(B, Nkv, L, Dh, device)
consecutive, interleaved = heads // G, heads % Nkv
read_ours = reads(grouped_attention(q, k, v_id))
read_hf = reads(causal_mha(q, repeat_kv(k, G), repeat_kv(v_id, G)))
read_sdpa = reads(F.scaled_dot_product_attention(q, k, v_id, enable_gqa=True))
print("query head h    :", heads.tolist())
print("ours reads      :", read_ours.tolist())
print("repeat_kv reads :", read_hf.tolist())
print("sdpa reads      :", read_sdpa.tolist())
assert torch.equal(read_ours, consecutive)
assert torch.equal(read_hf, consecutive)
assert torch.equal(read_sdpa, consecutive)

# %%
# Proof: a masked key gets weight zero, whatever the scores
# ---------------------------------------------------------
# Here, in one sequence of 7 tokens, the scores rise along the keys from about -200 at
# the first to +40 at the last (q near 1, key m near -50 + 10 m), so future keys
# outscore the past by far more than 100: a finite mask, -100 filled in or added,
# lets them through (computed below). Both masks above use -inf.
rise = torch.linspace(-50.0, 10.0, 7, device=device).view(1, 1, 7, 1)  # -50 + 10 m
q_low = 1 + 0.1 * torch.randn(1, Nh, 7, Dh, device=device)  # (1, Nh, 7, Dh)
k_low = rise + 0.1 * torch.randn(1, Nkv, 7, Dh, device=device)  # (1, Nkv, 7, Dh)
v_low = torch.randn(1, Nkv, 7, Dh, device=device)
sdpa_low = F.scaled_dot_product_attention(q_low, k_low, v_low, is_causal=True,
                                          enable_gqa=True)
ours_low = grouped_attention(q_low, k_low, v_low)
hf_low = causal_mha(q_low, repeat_kv(k_low, G), repeat_kv(v_low, G))
print(f"rising scores: max |ours - sdpa| = {(ours_low - sdpa_low).abs().max():.1e}, "
      f"|repeat_kv + attention - sdpa| = {(hf_low - sdpa_low).abs().max():.1e}")
torch.testing.assert_close(ours_low, sdpa_low)
torch.testing.assert_close(hf_low, sdpa_low)

# %%
# The finite mask, computed: -100 instead of -inf, filled in or added. On the random
# q, k, v above (scores of order one) it masks as well as -inf; on the rising scores
# the future gets through and the output is another one.
def finite_mask(q, k, v, how):
    """Causal GQA via repeat_kv with -100 for the future, "filled" in or "added"."""
    L, Dh = q.shape[-2:]
    G = q.shape[1] // k.shape[1]  # query heads per key/value head
    scores = q @ repeat_kv(k, G).mT / math.sqrt(Dh)  # (B, Nh, L, L)
    future = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)  # (L, L)
    if how == "filled":
        scores = scores.masked_fill(future, -100.0)
    else:
        scores = scores - 100.0 * future
    return scores.softmax(dim=-1) @ repeat_kv(v, G)  # (B, Nh, L, Dh)


# %%
for how in ("filled", "added"):
    moderate = finite_mask(q, k, v, how)
    gap_rising = (finite_mask(q_low, k_low, v_low, how) - sdpa_low).abs().max().item()
    print(f"-100 {how}: max|finite - sdpa| on random scores "
          f"{(moderate - sdpa).abs().max():.1e}, on rising scores {gap_rising:.2f}")
    torch.testing.assert_close(moderate, sdpa)  # enough for scores of order one
    assert gap_rising > 0.1  # not for these: the future gets through

# %%
# Proof: MQA and MHA, the two ends
# --------------------------------
# ``Nkv = 1`` is multi-query attention (Shazeer, 2019): all ``Nh`` query heads read one
# key/value head. ``Nkv = Nh`` is ordinary multi-head attention: ``repeat_kv`` returns
# its input itself, and grouped attention must equal plain attention with no
# repetition and SDPA without ``enable_gqa``. At both ends ``h // G`` and ``h % Nkv``
# coincide; only in between do the two groupings differ.
for Nkv in (1, 2, 4, 8):
    G = Nh // Nkv
    q, k, v = qkv(B, Nh, Nkv, L, Dh, seed=10 + Nkv, device=device)
    ours = grouped_attention(q, k, v)
    hf = causal_mha(q, repeat_kv(k, G), repeat_kv(v, G))
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    read = reads(grouped_attention(q, k, head_ids(B, Nkv, L, Dh, device)))
    ends_agree = torch.equal(heads // G, heads % Nkv)
    print(f"Nkv = {Nkv}, G = {G}: |ours - repeat_kv| {(ours - hf).abs().max():.1e}, "
          f"|ours - sdpa| {(ours - sdpa).abs().max():.1e}, reads "
          + " ".join(str(j) for j in read.tolist()))
    torch.testing.assert_close(ours, hf)
    torch.testing.assert_close(ours, sdpa)
    assert torch.equal(read, heads // G)
    assert ends_agree == (Nkv in (1, Nh))  # the two groupings agree at the ends only
    if Nkv == Nh:  # MHA
        assert repeat_kv(k, G) is k  # n_rep = 1 returns the very tensor
        torch.testing.assert_close(ours, causal_mha(q, k, v))
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v,
                                                                        is_causal=True))
    if Nkv == 1:  # MQA: every query head reads key/value head 0
        assert read.eq(0).all()

# %%
# Proof: what ``enable_gqa`` requires, by device and kernel
# ---------------------------------------------------------
# ``Nh`` must be a multiple of ``Nkv``: 8 query heads cannot share 3 key/value heads,
# and SDPA says so. On CPU (torch 2.13) the default dispatch runs the blocked flash
# kernel ``aten::_scaled_dot_product_flash_attention_for_cpu`` with no repeat, while
# the math kernel (forced with ``torch.nn.attention.sdpa_kernel``) calls
# ``aten::repeat_interleave``, a copy of ``k`` and ``v``; both agree with ours (the op
# names come from the profiler and are asserted on CPU). On CUDA, torch 2.13's docstring
# says GQA "works only for Flash_attention and math kernel", while the CUDA
# dispatcher's source (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` at
# commit 001f694 of PyTorch's repository, not necessarily the 2.13 release) lets the
# flash, memory-efficient and cuDNN kernels all take dense GQA inputs. Neither is
# checked here. In float32, as here, the flash and cuDNN kernels refuse the input
# anyway (measured on an H100 with torch 2.11, not yet verified by a GPU build of the
# book). On CUDA the page asserts the default dispatch and the math kernel against
# ours, and prints the op names.
from torch.nn.attention import SDPBackend, sdpa_kernel

Nkv, G = 2, 4
q, k, v = qkv(B, Nh, Nkv, L, Dh, seed=3, device=device)
ours = grouped_attention(q, k, v)
k3 = k[:, :1].expand(B, 3, L, Dh)  # (B, 3, L, Dh)
try:
    F.scaled_dot_product_attention(q, k3, k3, enable_gqa=True)
    error = None
except RuntimeError as e:
    error = str(e)
print(f"Nh = 8, Nkv = 3: {str(error)[:76]}...")
assert error is not None and "must divide" in error


# %%
def ops_of(q, k, v):
    """Run SDPA with enable_gqa under the profiler: (output, its attention op names)."""
    # The autograd profiler without kineto: same op names, it starts in ms, not seconds.
    with torch.autograd.profiler.profile(use_kineto=False) as prof:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    names = {e.name for e in prof.function_events}
    return out, sorted(n for n in names if "attention_" in n or "repeat" in n)


# %%
out_default, ops_default = ops_of(q, k, v)
with sdpa_kernel(SDPBackend.MATH):
    out_math, ops_math = ops_of(q, k, v)
print("default dispatch:", [n.removeprefix("aten::") for n in ops_default])
print("math kernel     :", [n.removeprefix("aten::") for n in ops_math])
torch.testing.assert_close(out_default, ours)
torch.testing.assert_close(out_math, ours)
if device == "cpu":  # the CPU kernels, torch 2.13
    assert ops_default == ["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert "aten::repeat_interleave" in ops_math  # the math kernel copies k and v
else:  # CUDA tensors dispatch no CPU kernel; which CUDA ones is printed, not asserted
    assert not any(op.endswith("_for_cpu") for op in ops_default + ops_math)

# %%
# Try it: interleave the groups. Is it the same model?
# ----------------------------------------------------
# Let query head ``h`` read key/value head ``h % Nkv`` (0 1 0 1 ..) instead of
# ``h // G`` (0 0 0 0 1 1 1 1). It is a GQA too; does it give the reference's output
# on the same weights?

# Interleaving is computed by permuting the query heads into groups, running grouped
# attention, and permuting back. It is the model that tiles k and v with .repeat
# (0 1 0 1 ..), a common slip for repeat_interleave (0 0 .. 1 1 ..), which is what
# repeat_kv computes.
q1, k1, v1 = qkv(B, Nh, 2, L, Dh, seed=1, device=device)  # Nkv = 2, G = 4, as above
ref1 = causal_mha(q1, repeat_kv(k1, 4), repeat_kv(v1, 4))  # (B, Nh, L, Dh)
print("h % Nkv would be:", interleaved.tolist())
assert not torch.equal(consecutive, interleaved)  # 0 0 0 0 1 1 1 1 vs 0 1 0 1 ..
q_interleaved = q1.view(B, 4, 2, L, Dh).transpose(1, 2).reshape(B, Nh, L, Dh)
y = grouped_attention(q_interleaved, k1, v1)  # head i*Nkv + j of q lands at row j*G + i
y = y.view(B, 2, 4, L, Dh).transpose(1, 2).reshape(B, Nh, L, Dh)  # back to q's order
gap = (y - ref1).abs().max().item()
print(f"interleaved grouping vs repeat_kv: max |diff| = {gap:.2f}")
assert gap > 0.1  # printed above: another model, not a rounding error
tiled = causal_mha(q1, k1.repeat(1, 4, 1, 1), v1.repeat(1, 4, 1, 1))
gap_tiled = (y - tiled).abs().max().item()
print(f"interleaved grouping vs .repeat tiling: max |diff| = {gap_tiled:.1e}")
torch.testing.assert_close(y, tiled)
assert torch.equal(repeat_kv(k1, 4), k1.repeat_interleave(4, dim=1))  # bit for bit

# %%
# References
# ----------
# :footcite:t:`Ainslie2023`; :footcite:t:`Shazeer2019`. APIs:
# ``torch.nn.functional.scaled_dot_product_attention`` (``enable_gqa``),
# ``torch.nn.attention.sdpa_kernel``, and
# ``transformers.models.llama.modeling_llama.repeat_kv``.
#
# .. footbibliography::
