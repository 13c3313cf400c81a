"""
SDPA backends and FlexAttention
===============================

``scaled_dot_product_attention`` is one formula in front of four kernels (flash,
memory-efficient, cuDNN, math); FlexAttention takes the mask as a function and skips
the blocks it hides. Every float32 answer is the formula's.

**You will learn**

- how ``sdpa_kernel`` forces one of the four backends, and what each refuses
- how the profiler tells which kernel a default call ran
- how FlexAttention's ``mask_mod`` and ``score_mod`` write this page's four masks
- how a ``BlockMask`` sorts blocks into skipped, full and partial

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention` (the causal
mask), :doc:`/generated/transformer/plot_12_sliding_window_sinks` (the window),
:doc:`/generated/positional/plot_06_alibi` (ALiBi).

.. index:: ! SDPA
.. index:: ! FlexAttention
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Every backend computes one formula, with a mask :math:`M` that is ``0`` where query
# :math:`l` may see key :math:`m`, :math:`-\infty` where it may not, or any additive
# bias (ALiBi's :math:`-\mathrm{slope}_h (l - m)`):
#
# .. math::
#
#    \mathrm{SDPA}(q, k, v) = \mathrm{softmax}\Big(\frac{q k^\top}{\sqrt{D_h}}
#    + M\Big)\, v .
#
# FlexAttention skips a ``128 x 128`` block of :math:`M` that is all :math:`-\infty`; a
# block with none needs no mask (*full*); the rest are *partial*. This page's four
# masks at ``L = 512`` (ALiBi: the last head's bias, slope ``2**-8``):
L_flex, W_flex = 512, 100  # sliding window: l - 100 < m <= l
lengths = [100, 60, 96, 256]  # four packed documents, L_flex tokens in all
ones = torch.ones(L_flex, L_flex, dtype=torch.bool, device=device)
dense = {"causal": ones.tril(), "sliding window": ones.tril().triu(-(W_flex - 1)),
         "document": torch.block_diag(*[torch.ones(n, n, device=device).tril()
                                        for n in lengths]).bool()}
dense["ALiBi"] = dense["causal"]
dense = {name: dense[name] for name in ["causal", "ALiBi", "sliding window",
                                        "document"]}
pos_flex = torch.arange(L_flex, device=device)
closed_form = torch.tensor([2 ** (-8 * h / 4) for h in range(1, 5)],
                           device=device)  # (Nh = 4,): 1/4, 1/16, 1/64, 1/256
alibi_flex = (closed_form[:, None, None]
              * (pos_flex[None, :] - pos_flex[:, None])).masked_fill(
    ~dense["causal"], -math.inf)  # (Nh, L, L): -slope * (l - m), future -inf
nb = L_flex // 128
fig, axs = plt.subplots(1, 4, figsize=(11, 4.4), sharey=True, layout="constrained")
for ax, (name, keep) in zip(axs, dense.items()):
    blocks = keep.reshape(nb, 128, nb, 128)  # (q block, row, kv block, col)
    visited = blocks.any(dim=3).any(dim=1).cpu()  # (nb, nb)
    full = blocks.all(dim=3).all(dim=1).cpu()  # (nb, nb)
    if name == "ALiBi":
        ax.imshow(alibi_flex[-1].cpu(), cmap="viridis", interpolation="nearest")
    else:
        ax.imshow(keep.cpu(), cmap="Blues", vmin=-0.3, vmax=1, interpolation="nearest")
    for r in range(nb):
        for c in range(nb):
            corner = (c * 128 - 0.5, r * 128 - 0.5)
            if not visited[r, c]:
                ax.add_patch(plt.Rectangle(corner, 128, 128, color="0.55", alpha=0.6))
            elif full[r, c]:
                ax.add_patch(plt.Rectangle(corner, 128, 128, fill=False,
                                           edgecolor="C1", lw=2))
    ax.set_xticks(range(0, L_flex + 1, 128))
    ax.set_yticks(range(0, L_flex + 1, 128))
    ax.grid(True, color="0.4", lw=0.5)
    ax.set_title(f"{name}: {int(visited.sum())} of {nb * nb} blocks\n"
                 f"visited, {int(full.sum())} full", fontsize="medium")
    ax.set_xlabel("key m")
axs[0].set_ylabel("query l")
marks = [plt.Rectangle((0, 0), 1, 1, color=plt.get_cmap("Blues")(1.0)),
         plt.Rectangle((0, 0), 1, 1, color=plt.get_cmap("Blues")(0.23)),
         plt.Rectangle((0, 0), 1, 1, color="0.55", alpha=0.6),
         plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="C1", lw=2)]
fig.legend(marks, ["kept by the mask", "masked out", "empty block: skipped",
                   "full block: no mask needed"], loc="outside lower center", ncol=4)
fig.suptitle("A mask decides which 128 x 128 blocks need computing: FlexAttention\n"
             "skips the empty ones; full ones need no mask (ALiBi: the bias, "
             "yellow near 0)")
plt.show()

# %%
# Proof: causal_mask and alibi_slopes, as their pages define them
# ----------------------------------------------------------------
# The causal mask of :doc:`/generated/transformer/plot_04_causal_attention` and ALiBi's
# slopes of :doc:`/generated/positional/plot_06_alibi`, :math:`2^{-8h/N_h}` for
# :math:`h = 1, \dots, N_h` when :math:`N_h` is a power of two, copied as they stand.


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# Copied from positional/plot_06_alibi.py: alibi_slopes
def alibi_slopes(Nh, device=None):
    """ALiBi slope of each head: (Nh,)."""
    P = 2 ** math.floor(math.log2(Nh))  # largest power of two <= Nh
    first = 2.0 ** (-8 * torch.arange(1, P + 1, device=device) / P)  # (P,)
    # every other slope of the 2P sequence: 2 ** (-8 (2j + 1) / (2P)), j < Nh - P
    extra = 2.0 ** (-4 * (2 * torch.arange(Nh - P, device=device) + 1) / P)  # (Nh - P,)
    return torch.cat([first, extra])


# %%
# ``alibi_slopes`` beyond powers of two. This page's head counts (8, then 4) are
# powers of two. For others, ALiBi's rule takes the slopes of the next power of two
# below and every other slope of the one above:
# for ``Nh = 12``, the 8 slopes of ``Nh = 8`` and 4 of the 16 of ``Nh = 16``.
closed_8 = torch.tensor([2 ** (-8 * h / 8) for h in range(1, 9)])  # (8,)
closed_16 = torch.tensor([2 ** (-8 * h / 16) for h in range(1, 17)])  # (16,)
slopes_12 = [f"{s:.4f}" for s in alibi_slopes(12).tolist()]
print("alibi_slopes(12):", ", ".join(slopes_12[:8]))  # the 8 of the power of two
print("                 ", ", ".join(slopes_12[8:]))  # then every other of 16
torch.testing.assert_close(alibi_slopes(12), torch.cat([closed_8, closed_16[0::2][:4]]))

# %%
# From scratch
# ------------
# The formula in ordinary ops, the reference every backend is held to.


def sdpa_formula(q, k, v, is_causal=False, attn_mask=None):
    """softmax(q k^T / sqrt(Dh) + M) v, the formula, in the inputs' dtype."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    if is_causal:  # key m after query l: -inf
        l_pos = torch.arange(q.size(-2), device=q.device)[:, None]  # (L, 1)
        m_pos = torch.arange(k.size(-2), device=q.device)[None, :]  # (1, L)
        logits = logits.masked_fill(m_pos > l_pos, -math.inf)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        logits = logits.masked_fill(~attn_mask, -math.inf)
    elif attn_mask is not None:
        logits = logits + attn_mask
    return logits.softmax(dim=-1) @ v  # (B, Nh, L, Dh)



# %%
# FlexAttention's masks: a ``mask_mod`` picks the keys a query sees, a ``score_mod``
# rewrites a scaled logit.
def causal_mod(b, h, q_idx, kv_idx):
    """FlexAttention mask_mod: key kv_idx visible from query q_idx when not later."""
    return q_idx >= kv_idx


def sliding_window(W):
    """A mask_mod keeping the W keys q_idx - W < kv_idx <= q_idx."""
    def window_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < W)
    return window_mod


def documents(doc):
    """doc (L,): the document id of each token of the packed sequence."""
    def document_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    return document_mod


def alibi_score_mod(slopes):
    """slopes (Nh,): ALiBi's slope of each head."""
    def alibi_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return alibi_mod


# %%
# **Four kernels, one answer:** each backend that takes the inputs gives the formula's.
from torch.nn.attention import SDPBackend, sdpa_kernel

gen = torch.Generator().manual_seed(1)  # its own stream: the page's stays as is
q, k, v = (torch.randn(1, 2, 64, 16, generator=gen).to(device) for _ in range(3))
formula64 = sdpa_formula(q.double(), k.double(), v.double(), is_causal=True)
took = []
for be in [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
           SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]:
    try:
        with sdpa_kernel(be):  # this backend only
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (1,2,64,16)
    except RuntimeError:  # this backend refuses the inputs
        continue
    took.append(be.name)
    torch.testing.assert_close(out, formula64.float())
print(f"float32, causal: {', '.join(took)} took the inputs, each equal to the formula")
assert "MATH" in took and len(took) >= 2

# %%
# FlexAttention: the mask as a function
# -------------------------------------
# ``create_block_mask`` evaluates a ``mask_mod`` and sorts the ``128 x 128`` blocks into
# a ``BlockMask``, as the idea's figure did by hand; ALiBi is a ``score_mod`` on top of
# the causal block mask; ``4 x 4`` blocks here. ``flex_attention`` runs eagerly on CPU
# (time budget), compiled on CUDA.
from torch.autograd.profiler import profile
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

B, Nh, L, Dh, W = 2, 4, L_flex, 16, W_flex
q, k, v = (torch.randn(B, Nh, L, Dh, device=device) for _ in range(3))
doc = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                              torch.tensor(lengths, device=device))  # (L,) document ids
window_mod, document_mod = sliding_window(W), documents(doc)
alibi_mod = alibi_score_mod(alibi_slopes(Nh, device))  # slopes (Nh,)
block_masks = {name: create_block_mask(mod, None, None, L, L, device=device)
               for name, mod in [("causal", causal_mod), ("sliding window", window_mod),
                                 ("document", document_mod)]}
block_masks["ALiBi"] = block_masks["causal"]
warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
flex = torch.compile(flex_attention) if device == "cuda" else flex_attention
ARGS = {"causal": {"block_mask": block_masks["causal"]},
        "ALiBi": {"score_mod": alibi_mod, "block_mask": block_masks["ALiBi"]},
        "sliding window": {"block_mask": block_masks["sliding window"]},
        "document": {"block_mask": block_masks["document"]}}
flex_out, flex_events = {}, {}  # mask name -> output / the profiler's events
for name, kw in ARGS.items():
    with profile(use_kineto=False, record_shapes=True) as prof_flex:
        flex_out[name] = flex(q, k, v, **kw)  # (B, Nh, L, Dh)
    flex_events[name] = prof_flex.function_events

# %%
# Each output equals SDPA's with the idea's dense mask (ALiBi as a float ``attn_mask``).
sdpa_out = {name: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            for name, mask in {**dense, "ALiBi": alibi_flex}.items()}  # (B, Nh, L, Dh)
gaps = {name: (flex_out[name] - sdpa_out[name]).abs().max().item() for name in ARGS}
print("max|flex - SDPA|: " + ", ".join(f"{name.replace('sliding ', '')} {gap:.1e}"
                                        for name, gap in gaps.items()))
for name in ARGS:
    torch.testing.assert_close(flex_out[name], sdpa_out[name])

# %%
# Proof: the BlockMask's blocks, and eager or compiled flex
# ---------------------------------------------------------
# ``create_block_mask`` ran eagerly on this device (its ``device=`` argument), and its
# blocks are those of the dense mask, as the idea's figure sorted them: a block is
# visited where the dense mask has any ``True`` entry, and *full* where it has only
# ``True`` entries. The dense ALiBi bias came from the slopes' closed form per head,
# not from ``alibi_slopes``, and the dense masks from ``tril``, ``triu`` and
# ``block_diag``, not from the ``*_mod`` functions.
print(block_masks["document"])
visits = {}  # mask name -> number of blocks visited
for name in ["causal", "sliding window", "document"]:
    bm = block_masks[name]
    print(f"{name:15s} on {bm.kv_num_blocks.device.type}: ", end="")
    assert bm.kv_num_blocks.device.type == device
    blocks = dense[name].reshape(nb, 128, nb, 128)  # (q block, row, kv block, col)
    visited = bm.to_dense()[0, 0].bool()  # (nb, nb)
    full = torch.zeros(nb, nb, dtype=torch.bool, device=device)
    for r in range(nb):
        full[r, bm.full_kv_indices[0, 0, r, :bm.full_kv_num_blocks[0, 0, r]]] = True
    print(f"visits {int(visited.sum())} of {nb * nb} blocks, {int(full.sum())} of them "
          f"full, sparsity {bm.sparsity():.1f} %")
    assert torch.equal(visited, blocks.any(dim=3).any(dim=1))
    assert torch.equal(full, blocks.all(dim=3).all(dim=1))
    visits[name] = int(visited.sum())
visits_causal, visits_window = visits["causal"], visits["sliding window"]
visits_document, n_blocks = visits["document"], nb * nb

# %%
# Eager on CPU, compiled on CUDA
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The profiler shows which of the two ran, call by call: a compiled call runs the graph
# Inductor generated (an event ``## Call CompiledFxGraph ...``) and no op sees a
# ``(B, Nh, L, L)`` tensor; an eager call runs no compiled graph, and its ops do see the
# scores. (torch also warns about eager calls, but once per process only, so the page
# does not rely on that.) The page does not time the compilation: a time would differ
# from build to build. The CUDA side is not yet verified by a GPU build of the book.
compiled, materialized = {}, {}  # mask name -> True, False
for name, events in flex_events.items():
    compiled[name] = any(e.name.startswith("## Call CompiledFxGraph") for e in events)
    materialized[name] = any(list(shape) == [B, Nh, L, L]
                             for e in events for shape in e.input_shapes)
    print(f"{name:15s} on {device}: compiled graph ran {compiled[name]!s:5s}, "
          f"(B, Nh, L, L) scores in memory {materialized[name]}")
if device == "cuda":  # compiled: Inductor's graph ran, nothing materialized the scores
    assert all(compiled.values()) and not any(materialized.values())
else:  # eager: no compiled graph, the scores in memory
    assert not any(compiled.values()) and all(materialized.values())

# %%
# Proof: every backend, dtype and mask
# ------------------------------------
# ``torch.nn.attention.sdpa_kernel`` allows only the backends it is given:
# ``FLASH_ATTENTION`` (FlashAttention, Dao et al. 2022: the scores tile by tile, never
# stored), ``EFFICIENT_ATTENTION`` (the memory-efficient kernel after Rabe and Staats
# 2021), ``CUDNN_ATTENTION`` (NVIDIA's cuDNN) and ``MATH`` (the formula in ordinary
# PyTorch ops); if none of them takes the inputs the call raises ``RuntimeError``. The
# shape is that of the H100 measurements this page's CUDA side comes from. The masks:
# none, ``is_causal=True``, a boolean ``(L, L)`` sliding window of ``W`` keys, and an
# additive float ALiBi bias with the causal :math:`-\infty`, as ``(Nh, L, L)`` and as
# ``(1, Nh, L, L)``; the end of this Proof builds each mask a second way.
from torch.nn.attention import SDPBackend, sdpa_kernel

B, Nh, L, Dh = 2, 8, 256, 64
W = 64  # the sliding window: each query sees itself and the 63 keys before it
BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
NAMES = [be.name for be in BACKENDS]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
f64 = torch.float64
q64, k64, v64 = (torch.randn(B, Nh, L, Dh, device=device, dtype=f64) for _ in range(3))

causal_LL = causal_mask(L, device)  # (L, L): True where query l may see key m <= l
window_LL = causal_mask(L, device).triu(-(W - 1))  # (L, L): l - W < m <= l
slopes = alibi_slopes(Nh, device).to(f64)  # (Nh,), exact powers of two
pos = torch.arange(L, device=device, dtype=f64)
alibi = slopes[:, None, None] * (pos[None, None, :] - pos[None, :, None])  # (Nh, L, L)
alibi = alibi.masked_fill(~causal_LL, -math.inf)  # -slope * (l - m), future -inf
MASKS = {"none": {}, "is_causal": {"is_causal": True},
         "bool (L,L)": {"attn_mask": window_LL},
         "float (Nh,L,L)": {"attn_mask": alibi},
         "float (1,Nh,L,L)": {"attn_mask": alibi[None]}}

ref = {mask: sdpa_formula(q64, k64, v64, **kw)
       for mask, kw in MASKS.items()}  # float64
L_sdpa, W_sdpa, Nh_sdpa = L, W, Nh  # for the proof of the masks below

# %%
# A helper: the float masks in the queries' dtype, as SDPA requires.
def cast(kwargs, dtype):
    """The mask arguments with float masks in the queries' dtype (SDPA requires it)."""
    return {key: val.to(dtype) if torch.is_tensor(val) and val.is_floating_point()
            else val for key, val in kwargs.items()}


# %%
# Every combination runs under ``sdpa_kernel(backend)``, and once more with no backend
# forced; a refusal is caught. The warnings a refusal raises (the reason, on CPU) are
# caught too. All of it runs inside the profiler, which names the op each call
# dispatches (the approach of :doc:`plot_02_multihead_attention` and
# :doc:`plot_07_attention_cost`): the Proof below reads it.
import contextlib
import textwrap

outs, refusals = {}, {}  # (dtype, mask, backend name) -> output / error message
labels = {}  # (dtype, mask, backend name or "default") -> the call's profiler label
# The autograd profiler without Kineto: the same op names, a start in milliseconds.
with (torch.autograd.profiler.profile(use_kineto=False) as prof,
      warnings.catch_warnings(record=True) as caught):
    warnings.simplefilter("always")
    for dtype in DTYPES:
        q, k, v = q64.to(dtype), k64.to(dtype), v64.to(dtype)  # (B, Nh, L, Dh)
        for mask, kw in MASKS.items():
            for be in BACKENDS + [None]:
                key = (dtype, mask, be.name if be else "default")
                labels[key] = f"call {len(labels)}"
                try:
                    with (torch.profiler.record_function(labels[key]),
                          sdpa_kernel(be) if be else contextlib.nullcontext()):
                        outs[key] = F.scaled_dot_product_attention(q, k, v,
                                                                   **cast(kw, dtype))
                except RuntimeError as err:
                    refusals[key] = str(err).split(".")[0]
            outs[dtype, mask, "naive"] = sdpa_formula(q, k, v, **cast(kw, dtype))
accepted = {key: key in outs for key in labels}

# %%
# Every float32 answer, forced or default, equals the float64 reference at float32's
# default tolerances.
n_float32 = sum(1 for (dtype, _, name) in outs
                if dtype == torch.float32 and name != "naive")
print(f"{n_float32} float32 answers against the float64 reference")
for (dtype, mask, name), out in outs.items():
    if dtype == torch.float32 and name != "naive":
        torch.testing.assert_close(out, ref[mask].to(dtype))

# %%
# The masks the backends got are the masks they claim
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Built another way: the window from the positions' difference, the slopes from the
# closed form per head. The window keeps ``W`` keys per query.
l_idx = torch.arange(L_sdpa, device=device)[:, None]  # (L, 1): query position l
m_idx = torch.arange(L_sdpa, device=device)[None, :]  # (1, L): key position m
window_ref = (m_idx <= l_idx) & (l_idx - m_idx < W_sdpa)  # (L, L): m = l - W + 1 .. l
slopes_ref = torch.tensor([2 ** (-8 * (h + 1) / Nh_sdpa) for h in range(Nh_sdpa)],
                          dtype=f64, device=device)  # 1/2, 1/4, .., 1/256 for Nh = 8
alibi_ref = torch.where(m_idx <= l_idx,  # (Nh, L, L): -slope * (l - m), future -inf
                        -slopes_ref[:, None, None] * (l_idx - m_idx), -math.inf)
keys_per_query = window_LL.sum(dim=-1)  # (L,)
window_width = keys_per_query.max().item()
print(f"window: keys per query {keys_per_query[:3].tolist()} .. "
      f"{keys_per_query[-3:].tolist()}, at most {window_width}")
# query l sees itself and the keys before it, at most W in all: 1, 2, .., W, W, ..
assert torch.equal(keys_per_query,
                   torch.arange(1, L_sdpa + 1, device=device).clamp(max=W_sdpa))
assert window_width == W_sdpa and torch.equal(window_LL, window_ref)
torch.testing.assert_close(alibi, alibi_ref, rtol=0, atol=0)  # the same numbers
print("the window and the ALiBi bias equal their second construction")

# %%
# Which backend takes what, and which runs by default
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The profiler named the op each call dispatched; the default call is named by the
# forced backend whose op it ran. The table: ``refused`` is ``RuntimeError`` under
# ``sdpa_kernel(backend)``, a number is the largest gap to the float64 reference.
def descendants(event):
    """Every profiler event below `event`, depth first."""
    for child in event.cpu_children:
        yield child
        yield from descendants(child)


# %%
# Each call's kernel op, read from the profiler's events under its label.
by_label = {e.name: e for e in prof.function_events if e.name.startswith("call ")}
op = {}  # (dtype, mask, backend or "default") -> the kernel op's name
for key, label in labels.items():
    if accepted[key]:
        kernels = {e.name for e in descendants(by_label[label])
                   if e.name.startswith("aten::_scaled_dot_product")}
        assert len(kernels) == 1, kernels  # one kernel op per call
        op[key] = kernels.pop()
for be in BACKENDS:
    print(f"{be.name:20s} runs", *sorted({o for key, o in op.items()
                                            if key[2] == be.name}))
default = {}  # (dtype, mask) -> the backends whose op the default call ran
for dtype in DTYPES:
    for mask in MASKS:
        default[dtype, mask] = [n for n in NAMES if accepted[dtype, mask, n]
                                and op[dtype, mask, n] == op[dtype, mask, "default"]]
short = {be.name: be.name.removesuffix("_ATTENTION") for be in BACKENDS}
print(f"{'dtype':9s}{'mask':17s}" + "".join(f"{short[be.name]:>10s}" for be in BACKENDS)
      + f"{'naive':>10s} {'default':s}")
for dtype in DTYPES:
    for mask in MASKS:
        cells = []
        for name in [be.name for be in BACKENDS] + ["naive"]:
            out = outs.get((dtype, mask, name))
            cells.append("refused" if out is None else
                         f"{(out.to(f64) - ref[mask]).abs().max().item():.1e}")
        print(f"{str(dtype).removeprefix('torch.'):9s}{mask:17s}"
              + "".join(f"{c:>10s}" for c in cells)
              + " " + "/".join(short[n] for n in default[dtype, mask]))
print("refusals:")
for message in sorted(set(refusals.values())):
    who = sorted({f"{short[b]}" for (_, _, b), m in refusals.items() if m == message})
    print(f"  {message!r}: {', '.join(who)}")
print("warnings raised by these calls:")
messages = sorted({str(w.message).split(" (Triggered")[0] for w in caught})
for message in messages:
    print(textwrap.indent(textwrap.fill(message, 84), "  "))

# %%
# What each device accepts. On CPU (torch 2.13, measured for this page) the efficient
# and cuDNN backends are not there at all: the CPU dispatcher finds "no viable
# backend". Flash takes every dtype and mask but a 3-D one (it wants 2 or 4 dims, its
# warning says), and the default is flash wherever flash accepts, math otherwise. On
# CUDA the expectations come from measurements on an H100 with torch 2.11
# (``is_causal`` and the 3-D ``(Nh, L, L)`` float mask at this shape; not yet verified
# by a GPU build of the book): flash and cuDNN refuse float32, and they refuse that 3-D
# float mask in every dtype; the memory-efficient kernel accepts all of these; every
# refusal says "No available kernel". PyTorch's dispatcher checks a mask's shape as
# well as its dtype, and the 2-D and 4-D masks were not measured on a GPU: they, and
# the kernel CUDA picks by default, are printed above, not asserted. On either device
# the default runs the op of exactly one backend that accepts the inputs.
if device == "cuda":
    expected = {}
    for dt in DTYPES:
        sixteen = dt != torch.float32
        expected[dt, "is_causal"] = dict(zip(NAMES, [sixteen, True, sixteen, True]))
        expected[dt, "float (Nh,L,L)"] = dict(zip(NAMES[:3], [False, True, False]))
else:
    expected = {(dt, m): dict(zip(NAMES, [m != "float (Nh,L,L)", False, False, True]))
                for dt in DTYPES for m in MASKS}
for (dt, mask), exp in expected.items():
    assert {n: accepted[dt, mask, n] for n in exp} == exp, (dt, mask)
print(f"asserted {len(expected)} of {len(DTYPES) * len(MASKS)} rows on {device}")
assert all(len(default[dt, m]) == 1 for dt in DTYPES for m in MASKS)  # one, accepting
if device == "cpu":  # torch 2.13: two kinds of refusal; flash by default, else math
    # flash's warning gives the shapes it takes: 2-D and 4-D masks
    assert any("2d -" in m and "4d -" in m for m in messages)
    assert {m for (_, _, b), m in refusals.items() if b != "FLASH_ATTENTION"} == {
        "No viable backend for scaled_dot_product_attention was found"}
    assert {m for (_, _, b), m in refusals.items() if b == "FLASH_ATTENTION"} == {
        "No available kernel"}
    flash_or_math = {m: ["MATH" if m == "float (Nh,L,L)" else "FLASH_ATTENTION"]
                     for m in MASKS}
    assert all(default[dt, m] == flash_or_math[m] for dt in DTYPES for m in MASKS)
else:  # H100, torch 2.11: each refusal says "No available kernel"; no CPU kernel runs
    assert {refusals[dt, m, n] for (dt, m), exp in expected.items()
            for n, ok in exp.items() if not ok} == {"No available kernel"}
    assert not any(name.endswith("_for_cpu") for name in op.values())

# %%
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.attention.sdpa_kernel``, ``torch.nn.attention.SDPBackend``,
# ``torch.nn.attention.flex_attention.flex_attention``,
# ``torch.nn.attention.flex_attention.create_block_mask``, ``torch.compile``,
# ``torch.autograd.profiler.profile``. FlashAttention
# :footcite:p:`Dao2022`; :footcite:t:`Rabe2021`; ALiBi
# :footcite:p:`Press2021`; FlexAttention :footcite:p:`Dong2024`.
#
# .. footbibliography::
