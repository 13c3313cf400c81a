"""
The cost of L x L: memory and time of attention as the sequence grows
=====================================================================

The manual path of attention materializes all ``(B, Nh, L, L)`` scores, so its memory
grows as ``L**2``, while ``scaled_dot_product_attention`` returns the same output
without keeping that tensor. This page proves the two outputs equal at every length,
measures the peak memory of each, asserts the ``L**2`` growth of the manual path, and
times both.
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The manual path against the fused kernel, as L grows
# ----------------------------------------------------
# The manual path is the textbook formula, nanoGPT's fallback: it builds the
# ``(B, Nh, L, L)`` scores, then their softmax, then multiplies by ``v``.
# ``F.scaled_dot_product_attention`` picks a kernel by device, dtype, shape and mask. On
# CPU (torch 2.13) it is a blocked flash kernel, named in the profiler's op names
# ``aten::_scaled_dot_product_flash_attention_for_cpu`` (asserted below). On CUDA in
# float32, as here, the flash and cuDNN kernels refuse the input and the
# memory-efficient kernel accepts it (measured on an H100 with torch 2.11; not yet
# verified by a GPU build of the book). Neither stores the whole ``L x L`` tensor, and
# the memory check below would fail if SDPA fell back to its math kernel, which does.
# The sweep is short on CPU; a GPU goes further.
import math

import torch.nn.functional as F

B, Nh, Dh = 1, 4, 16
if device == "cuda":
    Ls = [256, 512, 1024, 2048, 4096, 8192]
else:
    Ls = [64, 128, 256, 512, 1024, 2048]


def manual(q, k, v):
    """softmax(q k^T / sqrt(Dh)) v with the (B, Nh, L, L) scores in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    return scores.softmax(dim=-1) @ v  # (B, Nh, L, Dh)


def fused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)


def qkv_of_length(L):
    g = torch.Generator(device=device).manual_seed(L)  # each L its own stream
    return [torch.randn(B, Nh, L, Dh, device=device, generator=g) for _ in range(3)]


# %%
# The score tensor alone takes ``B * Nh * L * L * 4`` bytes in float32: arithmetic,
# checked against a real tensor's size at the largest ``L`` (the measured peaks below
# are checked against it).
q, k, v = qkv_of_length(Ls[-1])
scores = q @ k.transpose(-2, -1)  # (B, Nh, L, L)
score_bytes = [B * Nh * L * L * 4 for L in Ls]
print(f"L = {Ls[-1]}: scores {tuple(scores.shape)} take "
      f"{scores.numel() * scores.element_size():,} bytes = B*Nh*L*L*4")
assert scores.numel() * scores.element_size() == score_bytes[-1]
del q, k, v, scores

# %%
# Measured peak memory
# --------------------
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


for fn in (manual, fused):  # warm-up: one-time allocations do not belong to any L
    fn(*qkv_of_length(Ls[0]))

peaks = {"manual": [], "fused": []}
outputs = {}
if device == "cuda":
    for L in Ls:
        q, k, v = qkv_of_length(L)
        for fn in (manual, fused):
            peak, outputs[fn.__name__, L] = peak_bytes_cuda(fn, q, k, v)
            peaks[fn.__name__].append(peak)
else:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        for L in Ls:
            q, k, v = qkv_of_length(L)
            for fn in (manual, fused):
                with torch.profiler.record_function(f"{fn.__name__} L={L}"):
                    outputs[fn.__name__, L] = fn(q, k, v)
    for name in peaks:
        peaks[name] = [peak_bytes_cpu(prof, f"{name} L={L}") for L in Ls]
    kernels = {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}
    print("SDPA's ops on CPU:", *sorted(kernels), sep="\n    ")
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels  # torch 2.13

# %%
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
import matplotlib.pyplot as plt

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
# Time
# ----
# ``torch.utils.benchmark.Timer`` handles warm-up and CUDA synchronization and by
# default runs on one thread. Timings depend on the machine, so they are printed and
# plotted, never asserted.
from torch.utils import benchmark

times = {"manual": [], "fused": []}
for L in Ls:
    q, k, v = qkv_of_length(L)
    for fn in (manual, fused):
        timer = benchmark.Timer("fn(q, k, v)",
                                globals={"fn": fn, "q": q, "k": k, "v": v})
        times[fn.__name__].append(timer.blocked_autorange(min_run_time=0.02).median)
    print(f"L={L:5d}: manual {times['manual'][-1] * 1e3:8.3f} ms, "
          f"fused {times['fused'][-1] * 1e3:8.3f} ms")

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
