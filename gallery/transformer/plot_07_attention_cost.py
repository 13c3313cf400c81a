"""
The cost of L x L: memory and time of attention as the sequence grows
=====================================================================

The manual path of attention materializes all ``(B, Nh, L, L)`` scores, so its memory
grows as ``L**2``; ``scaled_dot_product_attention`` returns the same output without
keeping them. This page measures both, and times them.

**You will learn**

- why the textbook formula needs memory that grows as the square of the length
- how a fused kernel computes the same output without storing the scores
- how to measure the peak memory of one call, on CPU and on CUDA
- how to time both with ``torch.utils.benchmark``

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (attention),
:doc:`/generated/transformer/plot_06_attention_maps` (the ``L x L`` map).
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

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Every head compares every query with every key: the scores
# :math:`S = Q K^\top / \sqrt{D_h}` form an :math:`L \times L` matrix per head, while
# :math:`Q, K, V` and the output have :math:`L \times D_h` entries each. Written as the
# formula reads, attention keeps
#
# .. math::
#
#    \underbrace{B\, N_h\, L^2 \cdot 4\ \text{bytes}}_{\text{scores, float32}}
#    \quad\text{against}\quad
#    \underbrace{4\, B\, N_h\, L\, D_h \cdot 4\ \text{bytes}}_
#    {q,\ k,\ v,\ \text{output}},
#
# so past :math:`L = 4 D_h` the scores dominate, and doubling :math:`L` quadruples
# them. A fused kernel visits the scores block by block and never stores them whole.
B, Nh, Dh = 1, 4, 16
L_axis = [2**i for i in range(5, 15)]  # 32 .. 16384 tokens
assert L_axis[0] < 4 * Dh < L_axis[-1]  # the range holds the crossover
fig, ax = plt.subplots()
ax.loglog(L_axis, [B * Nh * L * L * 4 for L in L_axis], "o-",
          label="scores B·Nh·L·L·4 bytes (slope 2)")
ax.loglog(L_axis, [4 * B * Nh * L * Dh * 4 for L in L_axis], "s-",
          label=f"q, k, v, output: 4·B·Nh·L·Dh·4 bytes (slope 1, Dh = {Dh})")
ax.axvline(4 * Dh, color="gray", lw=0.8, ls=":")
ax.set_xlabel("sequence length L (tokens)")
ax.set_ylabel("bytes (float32)")
ax.set_title("The L×L scores outgrow everything else: ×4 per doubling of L,\n"
             f"larger than q, k, v and the output together past L = 4·Dh = {4 * Dh}")
ax.legend()
plt.show()

# %%
# From scratch
# ------------
# The manual path is the textbook formula, nanoGPT's fallback: it builds the
# ``(B, Nh, L, L)`` scores, then their softmax, then multiplies by ``v``.
# ``F.scaled_dot_product_attention`` runs a fused kernel that does not (which one: in
# the Proof below).


def manual(q, k, v):
    """softmax(q k^T / sqrt(Dh)) v with the (B, Nh, L, L) scores in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    return scores.softmax(dim=-1) @ v  # (B, Nh, L, Dh)


def fused(q, k, v):
    """PyTorch's fused attention: the same output, no (B, Nh, L, L) tensor kept."""
    return F.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)


def qkv_of_length(L, B, Nh, Dh, device):
    """q, k, v, each (B, Nh, L, Dh), from a stream seeded by L."""
    g = torch.Generator(device=device).manual_seed(L)  # each L its own stream
    return [torch.randn(B, Nh, L, Dh, device=device, generator=g) for _ in range(3)]


# %%
# Proof: how the peaks are measured, and which kernel SDPA runs
# -------------------------------------------------------------
# ``F.scaled_dot_product_attention`` picks a kernel by device, dtype, shape and mask. On
# CPU (torch 2.13) it is a blocked flash kernel, named in the profiler's op names
# ``aten::_scaled_dot_product_flash_attention_for_cpu`` (asserted here). On CUDA in
# float32, as here, the flash and cuDNN kernels refuse the input and the
# memory-efficient kernel accepts it (measured on an H100 with torch 2.11; not yet
# verified by a GPU build of the book). Neither stores the whole ``L x L`` tensor, and
# the memory check would fail if SDPA fell back to its math kernel, which does.

# %%
# The sweep is short on CPU; a GPU goes further.
if device == "cuda":
    Ls = [256, 512, 1024, 2048, 4096, 8192]
else:
    Ls = [64, 128, 256, 512, 1024, 2048]
assert max(Ls) == (8192 if device == "cuda" else 2048)  # each device's own sweep
score_bytes = [B * Nh * L * L * 4 for L in Ls]  # the scores alone, float32

# %%
# Each device measures in its own way, and both count the same thing: the extra bytes
# of tensors a call holds at its worst moment, its output included. On CUDA the caching
# allocator keeps the counters: ``torch.cuda.memory_allocated`` is the memory occupied
# by tensors now, ``torch.cuda.max_memory_allocated`` its peak since
# ``torch.cuda.reset_peak_memory_stats`` (so, right after the reset, the current
# value). Reset, read the current value, call, read the peak: the difference is the
# call's. The CPU allocator has no such counter, so there ``torch.profiler`` (with
# ``profile_memory=True``) records every allocation (+bytes) and free (-bytes) in time
# order, and the running sum of those events within a call peaks where the call's
# memory does. The CUDA side passed on an H100 with torch 2.11; it is not yet verified
# by a GPU build of the book.
import itertools


def peak_bytes_cuda(fn, q, k, v):
    """Peak of the bytes occupied by tensors during fn(q, k, v), above those before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(q, k, v)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, out


def peak_bytes_cpu(prof, label):
    """Peak of the running sum of allocations inside record_function(label)."""
    events = prof.profiler.kineto_results.events()  # the raw trace: ops, [memory] ...
    span = next(e for e in events if e.name() == label)
    start, end = span.start_ns(), span.start_ns() + span.duration_ns()
    mem = sorted((e for e in events
                  if e.name() == "[memory]" and start <= e.start_ns() <= end),
                 key=lambda e: e.start_ns())
    return max(itertools.accumulate((e.nbytes() for e in mem), initial=0))


# %%
# Measure both paths at every length.
for fn in (manual, fused):  # warm-up: one-time allocations do not belong to any L
    fn(*qkv_of_length(Ls[0], B, Nh, Dh, device))

peaks = {"manual": [], "fused": []}
outputs = {}
if device == "cuda":
    for L in Ls:
        q, k, v = qkv_of_length(L, B, Nh, Dh, device)
        for fn in (manual, fused):
            peak, outputs[fn.__name__, L] = peak_bytes_cuda(fn, q, k, v)
            peaks[fn.__name__].append(peak)
else:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        for L in Ls:
            q, k, v = qkv_of_length(L, B, Nh, Dh, device)
            for fn in (manual, fused):
                with torch.profiler.record_function(f"{fn.__name__} L={L}"):
                    outputs[fn.__name__, L] = fn(q, k, v)
    for name in peaks:
        peaks[name] = [peak_bytes_cpu(prof, f"{name} L={L}") for L in Ls]
    kernels = {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}
    print("SDPA's ops on CPU:", *sorted(kernels), sep="\n    ")
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels  # torch 2.13

# %%
# Measured peak memory
# --------------------
# Same output at every length; the manual path's peak holds the scores (and a second
# ``L x L`` tensor, the softmax, while the scores are still alive), so it grows fourfold
# per doubling of ``L``, up to its ``O(L)`` output. The fused kernel's peak stays far
# below the scores alone.
for i, L in enumerate(Ls):
    out_m, out_f = outputs["manual", L], outputs["fused", L]
    print(f"L={L:5d}: max|manual - sdpa| = {(out_m - out_f).abs().max().item():.1e}; "
          f"MiB: manual {peaks['manual'][i] / 2**20:7.2f}, "
          f"fused {peaks['fused'][i] / 2**20:5.2f}, "
          f"scores {score_bytes[i] / 2**20:7.2f}")
    torch.testing.assert_close(out_m, out_f)
    assert score_bytes[i] <= peaks["manual"][i] <= 3 * score_bytes[i]
ratios = [b / a for a, b in zip(peaks["manual"][2:], peaks["manual"][3:])]
print(f"manual peak ratio per doubling of L, from L = {Ls[2]}:",
      " ".join(f"{r:.3f}" for r in ratios))
assert all(abs(r - 4) < 0.25 for r in ratios)  # the O(L) output pulls it just below 4
assert peaks["fused"][-1] < score_bytes[-1] / 10  # far below the scores (printed above)
del outputs

# %%
fig, ax = plt.subplots()
ax.loglog(Ls, peaks["manual"], "o-", label="manual path, measured peak")
ax.loglog(Ls, peaks["fused"], "s-", label="scaled_dot_product_attention, measured peak")
ax.loglog(Ls, score_bytes, "k--", lw=1,
          label="B·Nh·L·L·4 bytes (the scores), slope 2")
ax.set_xlabel("sequence length L (tokens)")
ax.set_ylabel("extra memory at peak (bytes)")
ax.set_title(f"Manual attention's memory grows as L² (×4 per doubling);\n"
             f"SDPA's stays {score_bytes[-1] / peaks['fused'][-1]:.0f}× below "
             f"the scores "
             f"at L = {Ls[-1]}")
ax.legend()
plt.show()

# %%
# Proof: the scores take ``B * Nh * L * L * 4`` bytes
# ---------------------------------------------------
# The score tensor alone takes ``B * Nh * L * L * 4`` bytes in float32: arithmetic,
# checked against a real tensor's size at the largest ``L`` (the measured peaks above
# are checked against it).
q, k, v = qkv_of_length(Ls[-1], B, Nh, Dh, device)
scores = q @ k.transpose(-2, -1)  # (B, Nh, L, L)
print(f"L = {Ls[-1]}: scores {tuple(scores.shape)} take "
      f"{scores.numel() * scores.element_size():,} bytes = B*Nh*L*L*4")
assert scores.numel() * scores.element_size() == score_bytes[-1]
del q, k, v, scores

# %%
# Try it: time both paths. Is the fused kernel faster?
# ----------------------------------------------------
# Both do :math:`O(L^2 D_h)` work per head; only the manual one writes the ``L x L``
# scores to memory and reads them back. Time them with ``torch.utils.benchmark``.
from torch.utils import benchmark

times = {"manual": [], "fused": []}
for L in Ls:
    q, k, v = qkv_of_length(L, B, Nh, Dh, device)
    for fn in (manual, fused):
        timer = benchmark.Timer("fn(q, k, v)",
                                globals={"fn": fn, "q": q, "k": k, "v": v})
        times[fn.__name__].append(timer.blocked_autorange(min_run_time=0.02).median)
    print(f"L={L:5d}: manual {times['manual'][-1] * 1e3:8.3f} ms, "
          f"fused {times['fused'][-1] * 1e3:8.3f} ms")

# %%
# It depends on the machine, so the timings are printed and plotted, never asserted.
# ``torch.utils.benchmark.Timer`` handles warm-up and CUDA synchronization and by
# default runs on one thread.

# %%
fig, ax = plt.subplots()
ax.loglog(Ls, times["manual"], "o-", label="manual path")
ax.loglog(Ls, times["fused"], "s-", label="scaled_dot_product_attention")
ref = [times["manual"][-1] * (L / Ls[-1]) ** 2 for L in Ls]
ax.loglog(Ls, ref, "k--", lw=1, label="∝ L² (reference slope)")
ax.set_xlabel("sequence length L (tokens)")
ax.set_ylabel("time per call (s)")
ax.set_title(f"Both paths do O(L²) work; at L = {Ls[-1]} on this {device.upper()}:\n"
             f"manual {times['manual'][-1] * 1e3:.1f} ms, "
             f"fused {times['fused'][-1] * 1e3:.1f} ms")
ax.legend()
plt.show()
