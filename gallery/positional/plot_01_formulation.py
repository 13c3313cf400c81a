"""
The formulation: tokens, indices, and a PE code
===============================================

Attention compares tokens by their content alone: without help it cannot tell where a
token sits. A positional embedding (PE) gives every token its integer position ``I``
(one index per axis: a sequence has one, an image grid two, a video three), turns
``I`` into a code, and combines the code with the token. Every page of this chapter is
one choice of that code and of that combination.

**You will learn**

- why self-attention without a PE and without a mask is blind to token order
- the interface of every PE: tokens ``(..., N, D)``, indices ``(..., N, C)``, a code
- how to build row-major index tables for sequences, image grids and video
- why a ViT's patch tokens come out in that same row-major order

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention`
(self-attention), :doc:`/generated/transformer/plot_04_causal_attention` (the causal
mask).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
# The notes call the tokens ``T``; the book names them ``tokens``, keeping ``T_frames``
# for video.
import functools
import math

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Give token ``n`` a row of ``C`` integers ``I[n]``, its position along each axis; map
# ``I`` to a code of width ``D``; combine code and tokens (add, or rotate as
# :doc:`RoPE </generated/positional/plot_04_rope>` does):
#
# .. math::
#
#    X' = \mathrm{combine}\big(X,\ \mathrm{PE}(I)\big), \qquad
#    X, X' \in \mathbb{R}^{N \times D},\quad I \in \mathbb{Z}^{N \times C}
#
#    I_{iW + j} = (i, j) \quad \text{on an } H \times W \text{ grid (row-major).}
#
# The rows of ``I`` follow the order of the tokens; images and video are flattened
# *row-major*: token ``n`` sits at row ``i = n // W``, column ``j = n % W``.
H_fig, W_fig = 3, 4
I_fig = torch.cartesian_prod(torch.arange(H_fig), torch.arange(W_fig))  # (H*W, 2)
rows, cols = I_fig[:, 0], I_fig[:, 1]  # (H*W,) each
fig, ax = plt.subplots(figsize=(6.4, 2.8), layout="constrained")
ax.plot(cols, rows, "-", color="gray", lw=1, zorder=1,
        label="token order n = 0, 1, 2, ...")
ax.scatter(cols, rows, s=600, zorder=2, label="patch (i, j)")
for n_fig, (i, j) in enumerate(I_fig.tolist()):
    ax.annotate(f"{n_fig}", (j, i), ha="center", va="center", color="white",
                fontsize=11)
ax.set_xticks(range(W_fig))
ax.set_yticks(range(H_fig))
ax.set_xlim(-0.6, W_fig - 0.4)
ax.set_ylim(H_fig - 0.4, -0.9)  # row 0 on top, as in an image; room for the legend
ax.set_xlabel("column j (patches)")
ax.set_ylabel("row i (patches)")
ax.set_title(f"Row-major order on a {H_fig}×{W_fig} grid: token n = i·W + j, "
             "column index fastest")
ax.legend(loc="upper center", ncol=2, markerscale=0.4)
plt.show()

# %%
# Why a PE: unmasked attention is blind to order
# ----------------------------------------------
# Nothing in self-attention without PE and mask refers to where a token sits: permute
# the tokens and each output moves with its token, ``attn(x[perm]) == attn(x)[perm]``.
def attention_no_pe(x, W_q, W_k, W_v, is_causal=False):
    """Single-head self-attention without PE. x (B, L, D), W_* (D, D) -> (B, L, D)."""
    q, k, v = x @ W_q, x @ W_k, x @ W_v  # (B, L, D) each
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return sdpa(q, k, v, is_causal=is_causal)  # (B, L, D)


# %%
B, L, D = 2, 6, 16
W_q, W_k, W_v = (torch.randn(3, D, D, device=device) / math.sqrt(D)).unbind(0)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
reverse = torch.arange(L - 1, -1, -1, device=device)  # (L,) the order reversed
shuffle = torch.randperm(L, device=device)  # (L,)
plain = attention_no_pe(x, W_q, W_k, W_v)  # (B, L, D)
gaps = {}  # name -> max|attn(x[perm]) - attn(x)[perm]|
for name, perm in (("reversed", reverse), ("shuffled", shuffle)):
    full = attention_no_pe(x[:, perm], W_q, W_k, W_v)  # (B, L, D)
    gaps[name] = f"{(full - plain[:, perm]).abs().max():.1e}"
    torch.testing.assert_close(full, plain[:, perm])
print("no mask: max|attn(x[perm]) - attn(x)[perm]|:",
      ", ".join(f"{name} {gap}" for name, gap in gaps.items()))

# %%
# Index builders
# --------------
# ``C = 1`` for a sequence, 2 for a grid, 3 for a video. Row-major: the *last* index
# runs fastest; token ``n``'s indices are its digits in the radix ``(T_frames, H, W)``.
def sequence_indices(L, device=None):
    """(L, 1) long: I[n] = [n]."""
    return torch.arange(L, device=device).unsqueeze(-1)  # (L, 1)


def grid_indices(H, W, device=None):
    """(H*W, 2) long, row-major: I[i*W + j] = [i, j]."""
    n = torch.arange(H * W, device=device)  # (H*W,)
    return torch.stack([n // W, n % W], dim=-1)  # (H*W, 2)


def video_indices(T_frames, H, W, device=None):
    """(T_frames*H*W, 3) long, row-major: I[(t*H + i)*W + j] = [t, i, j]."""
    n = torch.arange(T_frames * H * W, device=device)  # (T_frames*H*W,)
    return torch.stack([n // (H * W), n // W % H, n % W], dim=-1)  # (T_frames*H*W, 3)


# %%
L, H, W, T_frames = 7, 3, 4, 2
I_seq, I_grid = sequence_indices(L, device), grid_indices(H, W, device)
I_video = video_indices(T_frames, H, W, device)
print(f"grid I {tuple(I_grid.shape)}, row by row:",
      " ".join(f"{i},{j}" for i, j in I_grid.tolist()))
assert I_grid[1 * W + 2].tolist() == [1, 2]  # token i*W + j is (i, j)

# %%
# A working interface
# -------------------
# ``indices_to_pe`` maps ``(..., N, C)`` indices to a ``(..., N, D)`` code (any function
# will do); ``combine`` merges code and tokens (absolute PEs add; RoPE rotates q and k).
def apply_pe(tokens, I, indices_to_pe, combine=torch.add):
    """tokens (..., N, D), I (..., N, C) long -> tokens with PE, (..., N, D)."""
    pe_code = indices_to_pe(I)  # (..., N, D)
    return combine(tokens, pe_code)  # (..., N, D)


def linear_pe(I, proj):
    """A stand-in code for the shapes only: I (..., N, C) long @ proj (C, D)."""
    return I.float() @ proj


# %%
D = 8
proj = torch.randn(2, D, device=device)  # (C, D)
grid_pe = functools.partial(linear_pe, proj=proj)  # I -> code
tokens = torch.randn(H * W, D, device=device)  # (N, D), one token per grid cell
out = apply_pe(tokens, I_grid, grid_pe)  # (N, D)
print(f"apply_pe -> {tuple(out.shape)}; max|out - (tokens + PE(I))| = "
      f"{(out - (tokens + linear_pe(I_grid, proj))).abs().max().item():.2e}")
assert out.shape == tokens.shape
torch.testing.assert_close(out, tokens + linear_pe(I_grid, proj))

# %%
# Proof: the index builders are row-major
# ---------------------------------------
# Shapes and dtypes, then the row-major property, checked the slow way: one Python
# loop per index, no tensor tricks.
for name, I in (("sequence", I_seq), ("grid", I_grid), ("video", I_video)):
    print(f"{name:8s} I: {tuple(I.shape)} {I.dtype}, first rows {I[:3].tolist()}")
assert I_seq.shape == (L, 1) and I_grid.shape == (H * W, 2)
assert I_video.shape == (T_frames * H * W, 3)
assert I_seq.dtype == I_grid.dtype == I_video.dtype == torch.long
for n in range(L):
    assert I_seq[n].tolist() == [n]
for i in range(H):
    for j in range(W):
        assert I_grid[i * W + j].tolist() == [i, j]
for t in range(T_frames):
    for i in range(H):
        for j in range(W):
            assert I_video[(t * H + i) * W + j].tolist() == [t, i, j]
n_tokens = L + H * W + T_frames * H * W
print(f"row-major: I[n] matches the loops for all {n_tokens} tokens")

# %%
# PyTorch builds the same tables: ``cartesian_prod`` lists tuples with the last factor
# fastest. Integer tensors compare exactly.
rT, rH, rW = (torch.arange(n, device=device) for n in (T_frames, H, W))  # ranges
for name, ours, ref in (("grid", I_grid, torch.cartesian_prod(rH, rW)),
                        ("video", I_video, torch.cartesian_prod(rT, rH, rW))):
    print(f"cartesian_prod ({name}): max|ours - torch| = "
          f"{(ours - ref).abs().max().item()}")
    torch.testing.assert_close(ours, ref)

# %%
# ``meshgrid(indexing="ij")`` returns one ``(H, W)`` grid per axis, which stacked and
# flattened row by row give the same rows.
mesh_grid = torch.stack(torch.meshgrid(rH, rW, indexing="ij"), -1)  # (H, W, 2)
mesh_video = torch.stack(torch.meshgrid(rT, rH, rW, indexing="ij"), -1)
references = {
    "meshgrid ij (grid)": (I_grid, mesh_grid.reshape(H * W, 2)),
    "meshgrid ij (video)": (I_video, mesh_video.reshape(T_frames * H * W, 3)),
}
for name, (ours, ref) in references.items():
    print(f"{name:22s} max|ours - torch| = {(ours - ref).abs().max().item()}")
    torch.testing.assert_close(ours, ref)

# %%
# Proof: the position lives in I (batches, ViT patches)
# -----------------------------------------------------
# The position lives in ``I``, not in where a token sits in the tensor: shuffle the
# tokens together with their indices and the output is shuffled the same way. This is
# why ``I`` must be built in the same order as the tokens.
perm = torch.randperm(H * W, device=device)
shuffled = apply_pe(tokens[perm], I_grid[perm], grid_pe)  # (N, D)
print(f"max|apply_pe(shuffled) - shuffled(apply_pe)| = "
      f"{(shuffled - out[perm]).abs().max():.2e}")
torch.testing.assert_close(shuffled, out[perm])

# %%
# One index table serves a batch
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# When every sequence in a batch has the same layout, one ``(N, C)`` table serves all of
# them: ``expand`` makes a ``(B, N, C)`` view without copying (batch stride 0), and
# broadcasting in ``combine`` lets the plain ``(N, C)`` table work as well.
B = 3
tokens_b = torch.randn(B, H * W, D, device=device)  # (B, N, D)
I_batch = I_grid.expand(B, -1, -1)  # (B, N, C), a view
print(f"I_batch {tuple(I_batch.shape)}, strides {I_batch.stride()}")
assert I_batch.shape == (B, H * W, 2) and I_batch.stride(0) == 0
assert all(torch.equal(I_batch[b], I_grid) for b in range(B))
out_b = apply_pe(tokens_b, I_batch, grid_pe)  # (B, N, D)
out_bcast = apply_pe(tokens_b, I_grid, grid_pe)  # (B, N, D) by broadcasting
print(f"max|batched I - broadcast I| = {(out_b - out_bcast).abs().max().item():.2e}")
assert out_b.shape == (B, H * W, D)
torch.testing.assert_close(out_b, out_bcast)

# %%
# A ViT's patch tokens come out row-major
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A ViT cuts an image into ``P x P`` patches with a strided ``Conv2d`` (one output pixel
# per patch, ``(B, D, H, W)``) and turns the grid into tokens with
# ``.flatten(2).transpose(1, 2)``. Flattening the last two axes is row-major, so token
# ``n`` is patch ``I[n] = [i, j]``: check every token against the patch it should come
# from, embedded by hand. In float64, on every device: on CUDA, cuDNN may run a
# float32 convolution in TF32 (10-bit mantissa; cuDNN's default, unlike matmuls), and
# the check is about the order of the tokens, not the precision of the convolution.
P, C_img = 2, 3
patch_embed = torch.nn.Conv2d(C_img, D, kernel_size=P, stride=P)
patch_embed = patch_embed.to(device, torch.float64)
image = torch.randn(B, C_img, H * P, W * P, device=device, dtype=torch.float64)
with torch.no_grad():
    grid = patch_embed(image)  # (B, D, H, W), one vector per patch
    patch_tokens = grid.flatten(2).transpose(1, 2)  # (B, H*W, D)
    # (B, H*W, D): token n embedded from the patch at I[n]
    by_hand = torch.stack([
        torch.einsum("bcpq,dcpq->bd", image[:, :, i * P:(i + 1) * P, j * P:(j + 1) * P],
                     patch_embed.weight) + patch_embed.bias
        for i, j in I_grid.tolist()], dim=1)
gap = (patch_tokens - by_hand).abs().max()
print(f"patch tokens {tuple(patch_tokens.shape)}; "
      f"max|token n - embed(patch at I[n])| = {gap:.2e}")
assert patch_tokens.shape == (B, H * W, D)
torch.testing.assert_close(patch_tokens, by_hand)

# %%
# The same, reading one known pixel: a ``(B, C, H, W)`` grid flattened gives
# ``(B, H*W, C)``, and the value at row 2, column 1 lands at token ``2 * W + 1``.
feature_map = torch.zeros(B, C_img, H, W, device=device)  # (B, C, H, W)
feature_map[:, :, 2, 1] = 7.0
flat = feature_map.flatten(2).transpose(1, 2)  # (B, H*W, C)
hot = (flat[0, :, 0] == 7.0).nonzero().flatten().tolist()
print(f"pixel (2, 1) -> token {hot}, I[{hot[0]}] = {I_grid[hot[0]].tolist()}")
assert hot == [2 * W + 1] and I_grid[hot[0]].tolist() == [2, 1]

# %%
# .. _errata-pos-indexing:
#
# Proof: the notes' indexing ``I[..., n]`` picks an axis, not a token
# -------------------------------------------------------------------
# The notes write ``I[..., i] == [i]`` and ``I[..., i*W+j] == [i, j]``. With an ellipsis
# the last subscript indexes the *last* axis, the ``C`` index dims, not the token axis
# ``N``: token ``n`` is ``I[..., n, :]``. For the grid, ``I[..., 1]`` is the column of
# every token, and any ``i*W + j >= C`` is out of range.
print(f"I[..., 1]    = {I_grid[..., 1].tolist()} (shape {tuple(I_grid[..., 1].shape)})")
print(f"I[..., 1, :] = {I_grid[..., 1, :].tolist()}  (token 1 = row 0, column 1)")
assert I_grid[..., 1].shape == (H * W,) and I_grid[..., 1, :].tolist() == [0, 1]
try:
    I_grid[..., 1 * W + 2]  # token (i, j) = (1, 2), written as in the notes
except IndexError as err:
    print(f"I[..., 1*W+2]: IndexError: {err}")
else:
    raise AssertionError("expected the notes' indexing to fail")
assert I_grid[..., 1 * W + 2, :].tolist() == [1, 2]

# %%
# .. _errata-pos-pseudo-code:
#
# Proof: the notes' pseudo-code fails at every step of a minimal repair
# ---------------------------------------------------------------------
# The notes' plain-text copy lost its indentation (and blank lines) in the HTML
# extraction; they are restored here, every other character is the notes'. First, it
# does not parse: ``def apply_PE`` lacks the colon that ends a ``def`` line.
NOTES = '''\
def indice_to_PE(I) -> I_new:
    """
    I: [..., N, C], C-dimensional indices of the tokens
    I_new: [..., N, D], embedded indices
    """
    ...

def apply_PE(T, I) -> T_new
    """
    T: [..., N, D], tokens
    I: [..., N, C], C-dimensional indices of the tokens
    T_new: [..., N, D], tokens with PE information
    """
    I_new = indices_to_PE(I) # [..., N, D]
    T_new = apply_PE(T, I_new) # [..., N, D]
'''
try:
    compile(NOTES, "notes", "exec")
except SyntaxError as err:
    print(f"as written: SyntaxError: {err.msg} "
          f"(line {err.lineno}: {err.text.strip()!r})")
else:
    raise AssertionError("expected the notes' snippet not to parse")

# %%
# With the colon added it parses, but defining the functions evaluates their return
# annotations ``-> I_new`` and ``-> T_new``: names of results, not of types, and no such
# variables exist. (From Python 3.14 annotations are evaluated lazily, and this step
# passes silently.)
import sys

with_colon = NOTES.replace("-> T_new\n", "-> T_new:\n")
try:
    exec(with_colon, {})
except NameError as err:
    print(f"colon added: NameError: {err}")
else:
    print("colon added: defined (annotations are lazy on this Python)")
    assert sys.version_info >= (3, 14), "expected a NameError from the annotations"

# %%
# Without the annotations the functions are defined, and the first call fails: the PE
# function is defined as ``indice_to_PE`` but called as ``indices_to_PE``.
no_annotations = with_colon.replace(" -> I_new:", ":").replace(" -> T_new:", ":")
notes = {}
exec(no_annotations, notes)
tokens = torch.randn(L, 8, device=device)  # (N, D), any tokens will do
try:
    notes["apply_PE"](tokens, I_seq)
except NameError as err:
    print(f"annotations dropped: NameError: {err}")
else:
    raise AssertionError("expected the misspelled call to fail")

# %%
# With the name fixed, the structure is what fails: ``apply_PE`` calls *itself* with the
# PE code where the indices go, so it never stops (and it has no ``return``). With the
# notes' ``...`` placeholder it recurses until Python gives up; with a real PE code, the
# second call feeds a ``(N, D)`` code to a function that expects ``(N, C)`` indices. The
# combining step (add, or rotate) needs a function of its own.
fixed_name = no_annotations.replace("indices_to_PE(I)", "indice_to_PE(I)")
notes = {}
exec(fixed_name, notes)
try:
    notes["apply_PE"](tokens, I_seq)
except RecursionError as err:
    print(f"name fixed, placeholder PE: RecursionError: {err}")
else:
    raise AssertionError("expected unbounded recursion")

proj = torch.randn(1, 8, device=device)  # (C, D): a stand-in PE code for C = 1, D = 8
notes["indice_to_PE"] = lambda I: I.float() @ proj  # (N, C) -> (N, D)
try:
    notes["apply_PE"](tokens, I_seq)
except RuntimeError as err:
    print(f"name fixed, real PE code:   RuntimeError: {str(err).split(' (')[0]}")
else:
    raise AssertionError("expected the PE code of a PE code to fail")


# %%
# Try it: add a causal mask. Is attention still blind to order?
# -------------------------------------------------------------
# Reverse the tokens and run ``attention_no_pe`` with ``is_causal=True``: does each
# output just move with its token?

# %%
# No: token ``l`` sees only tokens ``0 .. l``, so after a permutation a token has other
# predecessors and its output changes, not only its place. Reversed, the last token
# comes first and sees only itself: its output is its own value vector, while in the
# original order it averaged over all ``L`` tokens. A causal model without PE is
# therefore not blind to order.
causal = attention_no_pe(x[:, reverse], W_q, W_k, W_v, is_causal=True)  # (B, L, D)
moved = attention_no_pe(x, W_q, W_k, W_v, is_causal=True)[:, reverse]  # permuted
per_token = (causal - moved).abs().amax(dim=-1)  # (B, L), change of each output
print(f"causal, reversed: per token max|attn(x[perm]) - attn(x)[perm]| from "
      f"{per_token.min():.2f} to {per_token.max():.2f}")
assert per_token.min() > 0.05, "causal attention is permutation-equivariant?"
torch.testing.assert_close(causal[:, 0], x[:, -1] @ W_v)  # first token: its own value

# %%
# Try it: meshgrid with NumPy's indexing="xy". Which tokens keep their place?
# ---------------------------------------------------------------------------
# Build the grid's table with ``torch.meshgrid(..., indexing="xy")`` and compare it
# row by row with ``I_grid``.

# %%
# ``indexing="xy"`` swaps the first two axes of the grids: flattened, it lists the
# tokens column by column. The rows of ``I`` are the same set, in a different order, so
# the tokens would be paired with the wrong positions. Row ``n = a*H + b`` of the
# ``"xy"`` table is ``[b, a]``, so the token ``(i, j)`` keeps its place only when
# ``j*H + i = i*W + j``, i.e. ``j (H - 1) = i (W - 1)``: for ``(H, W) = (3, 4)`` only
# ``(0, 0)`` and ``(2, 3)``, the first and the last token.
I_xy = torch.stack(torch.meshgrid(rH, rW, indexing="xy"), -1).reshape(H * W, 2)
wrong = (I_xy != I_grid).any(dim=-1).sum().item()
kept = [(i, j) for i in range(H) for j in range(W) if j * (H - 1) == i * (W - 1)]
print(f'indexing="xy": token 1 gets {I_xy[1].tolist()} instead of '
      f"{I_grid[1].tolist()}; {wrong} of {H * W} tokens misplaced")
print(f"tokens (i, j) with j (H - 1) = i (W - 1), which keep their place: {kept}")
in_place = [tuple(t) for t in I_grid[(I_xy == I_grid).all(dim=-1)].tolist()]
assert wrong == H * W - 2  # 10 of 12: all but the two corners
assert in_place == kept == [(0, 0), (H - 1, W - 1)]
assert sorted(I_xy.tolist()) == sorted(I_grid.tolist())  # same positions, other order

# %%
# References
# ----------
# ``torch.cartesian_prod``, ``torch.meshgrid``, ``torch.Tensor.expand``,
# ``torch.Tensor.flatten``, ``torch.nn.Conv2d``,
# ``torch.nn.functional.scaled_dot_product_attention``.
