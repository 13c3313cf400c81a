"""
Attention maps and the cost of L x L
====================================

Every head builds an ``(L, L)`` map of attention weights, one probability distribution over the
keys for each query. This page draws such maps, full and causal, with and without QK-norm, and
then measures what the map costs as the sequence grows: the manual path materializes all
``(B, Nh, L, L)`` scores, so its memory grows as ``L**2``, while
``scaled_dot_product_attention`` returns the same output without keeping that tensor.
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
# Attention weights of one head
# -----------------------------
# The notes' ``SelfAttention`` layout: one ``Linear(D, 3D)``, reshaped to
# ``(B, L, 3, Nh, Dh)`` and split into ``q, k, v``; optional QK-norm, a ``LayerNorm(Dh)`` on each
# query and key. The logits are scaled by ``1 / sqrt(Dh)`` *before* the softmax (the notes scale
# after it, see :doc:`/generated/transformer/plot_01_self_attention`). The projection weights are
# taken at four times their init scale, as weights may grow in training, which makes the
# difference QK-norm makes visible. Each map is checked against ``scaled_dot_product_attention``
# through the output it produces.
import math

import torch.nn.functional as F

B, L, D, Nh = 1, 16, 64, 4
Dh = D // Nh
x = torch.randn(B, L, D, device=device)  # (B, L, D)
qkv_proj = torch.nn.Linear(D, 3 * D).to(device)
q_norm = torch.nn.LayerNorm(Dh).to(device)
k_norm = torch.nn.LayerNorm(Dh).to(device)
with torch.no_grad():
    qkv_proj.weight.mul_(4)


def attention_map(qk_norm, causal):
    """Attention weights (B, Nh, L, L), after checking their output against SDPA."""
    with torch.no_grad():
        qkv = qkv_proj(x).reshape(B, L, 3, Nh, Dh).permute(2, 0, 3, 1, 4)  # (3, B, Nh, L, Dh)
        q, k, v = qkv.unbind(0)  # (B, Nh, L, Dh)
        if qk_norm:
            q, k = q_norm(q), k_norm(k)
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
        if causal:  # query l may only look at keys m <= l
            future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
            logits = logits.masked_fill(future, float("-inf"))
        weights = logits.softmax(dim=-1)  # (B, Nh, L, L)
        out = torch.einsum("bhlm,bhmd->bhld", weights, v)  # (B, Nh, L, Dh)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, Nh, L, Dh)
    print(f"qk_norm={qk_norm!s:5} causal={causal!s:5}: max|manual - sdpa| = "
          f"{(out - ref).abs().max().item():.1e}, mean largest weight per row = "
          f"{weights.amax(dim=-1).mean().item():.2f}")
    torch.testing.assert_close(out, ref)
    return weights


maps = {}
for qk in (False, True):
    for causal in (False, True):
        maps[qk, causal] = attention_map(qk, causal)

# %%
# Each row is a probability distribution, the causal mask leaves exactly zero weight above the
# diagonal, and QK-norm keeps the rows spread: without it, at this weight scale, the largest
# weight of a row averages above 0.6 (near one-hot); with it, below 0.4.
for (qk, causal), w in maps.items():
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(B, Nh, L, device=device))
    assert torch.all(w >= 0)
    if causal:
        assert torch.all(w.triu(1) == 0)
assert maps[False, False].amax(dim=-1).mean() > 0.6
assert maps[True, False].amax(dim=-1).mean() < 0.4
print("rows sum to 1; causal maps are exactly 0 above the diagonal")

# %%
# The four maps of head 0, as an image each: query position down, key position across.
import matplotlib.pyplot as plt

fig, axes = plt.subplots(2, 2, figsize=(6.4, 6.4), sharex=True, sharey=True)
for row, qk in enumerate((False, True)):
    for col, causal in enumerate((False, True)):
        ax = axes[row, col]
        im = ax.imshow(maps[qk, causal][0, 0].cpu(), vmin=0, vmax=1)
        ax.set_title(f"{'causal' if causal else 'full'}, {'with' if qk else 'no'} QK-norm")
        ax.grid(False)
for ax in axes[1]:
    ax.set_xlabel("key position m")
for ax in axes[:, 0]:
    ax.set_ylabel("query position l")
fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
fig.suptitle("The causal mask keeps only the lower triangle;\n"
             "QK-norm keeps the weights spread (head 0)")
plt.show()

# %%
# The manual path against the fused kernel, as L grows
# ----------------------------------------------------
# The manual path is the textbook formula, nanoGPT's fallback: it builds the ``(B, Nh, L, L)``
# scores, then their softmax, then multiplies by ``v``. ``F.scaled_dot_product_attention``
# (flash or memory-efficient kernels on GPU, a blocked flash kernel on CPU) never stores the
# whole ``L x L`` tensor. The sweep is short on CPU; a GPU goes further.
B, Nh, Dh = 1, 4, 16
Ls = [256, 512, 1024, 2048, 4096, 8192] if device == "cuda" else [64, 128, 256, 512, 1024, 2048]


def manual(q, k, v):
    """softmax(q k^T / sqrt(Dh)) v with the (B, Nh, L, L) scores in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    return scores.softmax(dim=-1) @ v  # (B, Nh, L, Dh)


def fused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)


def qkv_of_length(L):
    g = torch.Generator(device=device).manual_seed(L)  # each L its own reproducible stream
    return [torch.randn(B, Nh, L, Dh, device=device, generator=g) for _ in range(3)]


# %%
# The score tensor alone takes ``B * Nh * L * L * 4`` bytes in float32: exact arithmetic,
# checked on a real tensor at the largest ``L``.
q, k, v = qkv_of_length(Ls[-1])
scores = q @ k.transpose(-2, -1)  # (B, Nh, L, L)
score_bytes = [B * Nh * L * L * 4 for L in Ls]
print(f"L = {Ls[-1]}: scores {tuple(scores.shape)} take {scores.numel() * scores.element_size():,}"
      f" bytes = B*Nh*L*L*4 = {score_bytes[-1]:,}")
assert scores.numel() * scores.element_size() == score_bytes[-1]
del q, k, v, scores

# %%
# Measured peak memory
# --------------------
# On CUDA the caching allocator keeps a peak counter: reset it, call, read the peak, subtract
# what was allocated before. The CPU allocator has no such counter, so there ``torch.profiler``
# (with ``profile_memory=True``) records every allocation (+bytes) and free (-bytes) in time
# order, and the running sum of those events within a call peaks where the call's memory does.
# Both count the extra bytes a call holds at its worst moment, its output included.
import itertools


def peak_bytes_cuda(fn, q, k, v):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(q, k, v)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, out


def peak_bytes_cpu(prof, label):
    """Peak of the running sum of allocations inside record_function(label)."""
    events = prof.profiler.kineto_results.events()  # the raw trace: ops, ranges, [memory]
    span = next(e for e in events if e.name() == label)
    start, end = span.start_ns(), span.start_ns() + span.duration_ns()
    mem = sorted((e for e in events if e.name() == "[memory]" and start <= e.start_ns() <= end),
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

# %%
# Same output at every length; the manual path's peak holds the scores (and a second ``L x L``
# tensor, the softmax, while the scores are still alive), so it grows fourfold per doubling of
# ``L``, up to its ``O(L)`` output. The fused kernel's peak stays far below the scores alone.
for i, L in enumerate(Ls):
    out_m, out_f = outputs["manual", L], outputs["fused", L]
    print(f"L={L:5d}: max|manual - sdpa| = {(out_m - out_f).abs().max().item():.1e}, "
          f"peak manual {peaks['manual'][i] / 2**20:8.2f} MiB, "
          f"fused {peaks['fused'][i] / 2**20:6.2f} MiB, scores {score_bytes[i] / 2**20:7.2f} MiB")
    torch.testing.assert_close(out_m, out_f)
    assert score_bytes[i] <= peaks["manual"][i] <= 3 * score_bytes[i]
ratios = [b / a for a, b in zip(peaks["manual"][2:], peaks["manual"][3:])]
print(f"manual peak ratio per doubling of L, from L = {Ls[2]}:",
      " ".join(f"{r:.3f}" for r in ratios))
assert all(abs(r - 4) < 0.25 for r in ratios)  # the O(L) output pulls it just below 4
assert peaks["fused"][-1] < score_bytes[-1] / 10
del outputs

# %%
fig, ax = plt.subplots()
ax.loglog(Ls, peaks["manual"], "o-", label="manual path, measured peak")
ax.loglog(Ls, peaks["fused"], "s-", label="scaled_dot_product_attention, measured peak")
ax.loglog(Ls, score_bytes, "k--", lw=1, label="B·Nh·L·L·4 bytes (the scores), slope 2")
ax.set_xlabel("sequence length L (tokens)")
ax.set_ylabel("extra memory at peak (bytes)")
ax.set_title(f"Manual attention's memory grows as L² (×4 per doubling);\n"
             f"SDPA's stays {score_bytes[-1] / peaks['fused'][-1]:.0f}× below the scores "
             f"at L = {Ls[-1]}")
ax.legend()
plt.show()

# %%
# Time
# ----
# ``torch.utils.benchmark.Timer`` handles warm-up and CUDA synchronization and by default runs on
# one thread. Timings depend on the machine, so they are printed and plotted, never asserted.
from torch.utils import benchmark

times = {"manual": [], "fused": []}
for L in Ls:
    q, k, v = qkv_of_length(L)
    for fn in (manual, fused):
        timer = benchmark.Timer("fn(q, k, v)", globals={"fn": fn, "q": q, "k": k, "v": v})
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
             f"manual {times['manual'][-1] * 1e3:.1f} ms, fused {times['fused'][-1] * 1e3:.1f} ms")
ax.legend()
plt.show()
