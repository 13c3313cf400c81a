"""
Self-attention, step by step
============================

Every token makes a query, a key and a value; its output is the average of all the
values, weighted by how well its query matches each key. This page builds the layer,
walks its shapes, and checks it against PyTorch's ``scaled_dot_product_attention``.

**You will learn**

- how queries, keys and values become attention weights, each row a softmax over keys
- why the scale :math:`1/\\sqrt{D_h}` goes on the logits, before the softmax
- how one fused projection splits into ``Nh`` heads of width ``Dh``
- how to check a layer against ``scaled_dot_product_attention``

**Prerequisites:** :doc:`/generated/normalization/plot_04_layernorm` (QK-norm is a
LayerNorm over each head's features).

.. index:: ! self-attention
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
# Query :math:`q_l` matches key :math:`k_m` by the dot product, divided by
# :math:`\sqrt{D_h}` so that its spread does not grow with the head width; a softmax
# over the keys makes each row positive weights summing to 1, which average the values:
#
# .. math::
#
#    \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(
#    \frac{Q K^\top}{\sqrt{D_h}}\right) V,
#    \qquad Q, K, V \in \mathbb{R}^{L \times D_h}.
gen = torch.Generator().manual_seed(1)  # its own stream: the page's numbers stay put
q_toy, k_toy = torch.randn(2, 6, 8, generator=gen)  # (L, Dh) each
w_toy = (q_toy @ k_toy.T / 8**0.5).softmax(dim=-1)  # (L, L): rows = queries

fig, ax = plt.subplots()
ax.imshow(w_toy, cmap="viridis", vmin=0)
w_rows = w_toy.tolist()  # the weights, written in their cells
for i in range(6):
    for j in range(6):
        ax.text(j, i, f"{w_rows[i][j]:.2f}", ha="center", va="center", fontsize=8,
                color="k" if w_rows[i][j] > 0.25 else "w")
ax.set_xlabel("key position m (what is looked at)")
ax.set_ylabel("query position l (who looks)")
ax.set_title("softmax(q k^T / √Dh): each query's row of weights\n"
             "is positive and sums to 1")
plt.show()

# %%
# From scratch
# ------------
# Width ``D`` splits into ``Nh`` heads side by side, each on ``Dh = D // Nh`` features.


def split_heads(t, Nh):
    """(B, L, D) -> (B, Nh, L, Dh): head i owns features i*Dh .. (i+1)*Dh - 1."""
    B, L, D = t.shape
    return t.reshape(B, L, Nh, D // Nh).transpose(1, 2)


# %%
# One fused ``Linear`` to ``q, k, v``,
# :doc:`QK-norm </generated/normalization/plot_10_qk_norm>` per head, attention, heads
# merged, an output projection. The subclass with PyTorch's attention in the middle is a
# reference.


class SelfAttention(torch.nn.Module):
    """Fused QKV projection, QK-norm per head, attention, out projection: (B, L, D)."""

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh = Nh
        self.qkv_proj = torch.nn.Linear(D, 3 * D)
        self.out_proj = torch.nn.Linear(D, D)
        self.q_norm = torch.nn.LayerNorm(D // Nh)
        self.k_norm = torch.nn.LayerNorm(D // Nh)

    def attend(self, q, k, v):
        """softmax(q k^T / sqrt(Dh)) v, scale on the logits. (B, Nh, L, Dh) -> same."""
        scale = q.size(-1) ** -0.5
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) * scale  # (B, Nh, L, L)
        return torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B,Nh,L,Dh)

    def forward(self, x):
        B, L, D = x.shape
        qkv = self.qkv_proj(x).reshape(B, L, 3, self.Nh, D // self.Nh)  # (B,L,3,Nh,Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, Nh, L, Dh)
        out = self.attend(self.q_norm(q), self.k_norm(k), v)  # (B, Nh, L, Dh)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, D))  # (B, L, D)


class SelfAttentionSDPA(SelfAttention):
    """The same layer with PyTorch's fused attention in the middle."""

    def attend(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B,Nh,L,Dh)


# %%
# The shape walk
# --------------
# The layer's ``forward`` line by line, each shape recorded (QK-norm's affine is
# redrawn off its 1 and 0, so that a swapped or dropped norm shows).
B, L, D, Nh = 2, 12, 32, 4  # L != Dh so that (B, Nh, L, L) and (B, Nh, L, Dh) differ
Dh = D // Nh
layer = SelfAttention(D, Nh).to(device)
with torch.no_grad():
    for p in (*layer.q_norm.parameters(), *layer.k_norm.parameters()):
        p.add_(0.5 * torch.randn_like(p))
x = torch.randn(B, L, D, device=device)  # (B, L, D)
with torch.no_grad():
    proj = layer.qkv_proj(x)  # (B, L, 3D)
    qkv = proj.reshape(B, L, 3, Nh, Dh)  # (B, L, 3, Nh, Dh)
    qkv_heads = qkv.permute(2, 0, 3, 1, 4)  # (3, B, Nh, L, Dh)
    q_raw, k_raw, v = qkv_heads.unbind(0)  # each (B, Nh, L, Dh)
    q, k = layer.q_norm(q_raw), layer.k_norm(k_raw)  # QK-norm over Dh, per token
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / Dh**0.5  # (B, Nh, L, L)
    attn = logits.softmax(dim=-1)  # (B, Nh, L, L)
    heads = torch.einsum("bhlm,bhmd->bhld", attn, v)  # (B, Nh, L, Dh)
    merged = heads.permute(0, 2, 1, 3).reshape(B, L, D)  # (B, L, D)
    out = layer.out_proj(merged)  # (B, L, D)

walk = {"x": x, "qkv_proj(x)": proj, "reshape": qkv, "permute": qkv_heads, "q, k, v": q,
        "attention": attn, "attn @ v": heads, "merge heads": merged, "out_proj": out}
print(*(f"{name:12s} {tuple(t.shape)}" for name, t in walk.items()), sep="\n")
shapes = [tuple(t.shape) for t in walk.values()]
assert shapes == [(B, L, D), (B, L, 3 * D), (B, L, 3, Nh, Dh), (3, B, Nh, L, Dh),
                  (B, Nh, L, Dh), (B, Nh, L, L), (B, Nh, L, Dh), (B, L, D), (B, L, D)]

# %%
# Every row of weights is a distribution over the keys, and the whole layer equals the
# one with ``scaled_dot_product_attention`` in the middle (same weights, by name).
sdpa = SelfAttentionSDPA(D, Nh).to(device)
sdpa.load_state_dict(layer.state_dict())  # strict: same parameter names and shapes
with torch.no_grad():
    y_layer, y_sdpa = layer(x), sdpa(x)  # each (B, L, D)
row_sums = attn.sum(dim=-1)  # (B, Nh, L)
print(f"min weight {attn.min().item():.3f}, "
      f"max|row sum - 1| = {(row_sums - 1).abs().max().item():.2e}, "
      f"max|layer - SDPA layer| = {(y_layer - y_sdpa).abs().max().item():.2e}")
assert (attn >= 0).all()
torch.testing.assert_close(row_sums, torch.ones_like(row_sums))  # softmax over the keys
torch.testing.assert_close(y_layer, y_sdpa)

# %%
# Proof: q, k, v are three stacked projections, and each step equals SDPA's
# -------------------------------------------------------------------------
# ``qkv_proj.weight`` has shape ``(3D, D)``. Putting the ``3`` before ``Nh`` in the
# reshape means ``q`` is made from output features ``0 .. D-1``, ``k`` from
# ``D .. 2D-1`` and ``v`` from ``2D .. 3D-1``: three ordinary ``(D, D)`` projections
# stacked, each split into heads. That is exactly how ``nn.MultiheadAttention`` stores
# its ``in_proj_weight`` (next page).
W, b = layer.qkv_proj.weight, layer.qkv_proj.bias  # (3D, D), (3D,)
with torch.no_grad():
    for name, ours, rows in (("q", q_raw, slice(0, D)), ("k", k_raw, slice(D, 2 * D)),
                             ("v", v, slice(2 * D, 3 * D))):
        ref = split_heads(x @ W[rows].T + b[rows], Nh)  # (B, Nh, L, Dh)
        print(f"{name} = rows {rows.start}:{rows.stop} of qkv_proj: "
              f"max|diff| = {(ours - ref).abs().max().item():.2e}")
        torch.testing.assert_close(ours, ref)

# %%
# The heads equal PyTorch's fused attention, whose default ``scale`` is
# ``1 / sqrt(q.size(-1))``, and the shape walk above, independent code, equals the SDPA
# layer: it checks the head merge and the output projection too.
with torch.no_grad():
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)
err = (heads - fused).abs().max().item()
print(f"max|heads - scaled_dot_product_attention| = {err:.2e}")
print(f"max|shape walk - SDPA layer| = {(out - y_sdpa).abs().max().item():.2e}")
torch.testing.assert_close(heads, fused)
torch.testing.assert_close(out, y_sdpa)

# %%
# .. _errata-attn-does-not-run:
#
# Proof: the notes' module does not run as written
# ------------------------------------------------
# The source notes' module, copied unchanged (renamed ``NotesSelfAttention``; their
# ``H`` is the book's ``Nh`` and their ``Dt`` the book's ``D``). Their example moves it
# with ``.cuda()``, which raises on a machine without a GPU; ``.to(device)`` runs
# anywhere. With that fixed, the first call raises ``NameError``: the snippet uses
# ``math.sqrt`` but never imports ``math`` (nothing on this page has imported it yet).
# One import later the module runs.
class NotesSelfAttention(torch.nn.Module):
    def __init__(self,
                token_dim: int,
                num_heads: int,
                ):
        super().__init__()
        assert token_dim % num_heads == 0
        head_dim = token_dim // num_heads

        self.token_dim = token_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.qkv_proj = torch.nn.Linear(token_dim, 3 * token_dim)
        self.out_proj = torch.nn.Linear(token_dim, token_dim)
        self.q_norm = torch.nn.LayerNorm(head_dim)
        self.k_norm = torch.nn.LayerNorm(head_dim)

    def forward(self, x: torch.Tensor):
        """
        x: [B, L, Dt]
        """
        B, L, Dt = x.shape
        H, Dh = self.num_heads, self.head_dim
        qkv = self.qkv_proj(x).reshape(B, L, 3, H, Dh)  # [B, L, 3, H, Dh]
        qkv = qkv.permute(2, 0, 3, 1, 4)                # [3, B, H, L, Dh]
        q, k, v = torch.unbind(qkv, dim=0)              # [B, H, L, Dh]

        q = self.q_norm(q)
        k = self.k_norm(k)

        # this part below is usually replaced by scaled_dot_product_attention
        attn_weights = torch.einsum('bhld,bhmd->bhlm', q, k)  # [B, H, L, L]
        attn_weights = attn_weights.softmax(dim=-1)           # [B, H, L, L]
        attn_scale = 1 / math.sqrt(self.head_dim)
        attn_weights = attn_weights * attn_scale              # [B, H, L, L]
        attn_output = torch.einsum('bhlm,bhmd->bhld', attn_weights, v)  # [B, H, L, Dh]
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(B, L, Dt) # [B, L, Dt]

        final_output = self.out_proj(attn_output)
        return final_output


token_dim, num_heads = 1024, 16  # the notes' example sizes
try:
    NotesSelfAttention(token_dim, num_heads).cuda()
except (AssertionError, RuntimeError) as err:  # a CPU-only build / no GPU
    print(f"notes' .cuda(): {type(err).__name__}: {err}")
    assert not torch.cuda.is_available() and str(err)  # torch's message, not an assert
else:
    print("notes' .cuda() works here: this machine has a GPU (it fails on one without)")
    assert torch.cuda.is_available()

self_attention = NotesSelfAttention(token_dim, num_heads).to(device)
x_notes = torch.randn(3, 5, token_dim, device=device)  # (B, L, D): the notes' B, L
try:
    self_attention(x_notes)
except NameError as err:
    print(f"notes' forward: NameError: {err}")
else:
    raise AssertionError("expected the notes' snippet to fail without `import math`")

import math  # noqa: E402  (the notes' missing import: only now, to show it missing)

with torch.no_grad():
    out_notes = self_attention(x_notes)  # (B, L, D)
print(f"with math imported: output shape {tuple(out_notes.shape)}")
assert out_notes.shape == x_notes.shape

# %%
# .. _errata-attn-scale-after-softmax:
#
# Proof: the notes scale after the softmax
# ----------------------------------------
# The notes multiply the *probabilities* by :math:`1 / \sqrt{D_h}`; the scale is a
# temperature and belongs on the logits, before the softmax. After the softmax it only
# shrinks every row to sum :math:`1 / \sqrt{D_h}`, and the distribution itself is the
# unscaled (sharper) one. (The notes' row sums are an illustration, true by
# construction.) The check is on the weights themselves: the notes' row is
# :math:`\mathrm{softmax}(q k^\top)` times :math:`1 / \sqrt{D_h}`, computed here
# independently with ``@`` instead of ``einsum``.
with torch.no_grad():
    attn_notes = torch.einsum("bhld,bhmd->bhlm", q, k).softmax(dim=-1)  # notes' order:
    attn_notes = attn_notes * (1 / math.sqrt(Dh))  # softmax, then scale (B, Nh, L, L)
    unscaled_w = (q @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, Nh, L, L), no scale
notes_sums = attn_notes.sum(dim=-1)  # (B, Nh, L)
print(f"notes' row sums {notes_sums.mean().item():.4f} "
      f"(1/sqrt(Dh) = {Dh**-0.5:.4f}; an illustration, true by construction)")
print(f"max|notes' weights - softmax(q k^T) / sqrt(Dh)| = "
      f"{(attn_notes - unscaled_w / math.sqrt(Dh)).abs().max().item():.2e}")
torch.testing.assert_close(attn_notes, unscaled_w / math.sqrt(Dh))
gap = (attn_notes @ v - fused).abs().max().item()
print(f"max|notes - scaled_dot_product_attention| = {gap:.2e}")
assert gap > 0.1, "the notes' order now matches scaled_dot_product_attention?"

# %%
# The notes' whole layer, loaded with the same weights, differs from the corrected
# one. What it computes instead is now easy to name: attention *without* any scale
# (``scale=1``), shrunk by :math:`\sqrt{D_h}` before the output projection.
notes = NotesSelfAttention(D, Nh).to(device)
notes.load_state_dict(layer.state_dict())  # strict: the notes' parameter names
with torch.no_grad():
    y_notes = notes(x)  # (B, L, D)
    unscaled = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
    y_named = notes.out_proj(unscaled.transpose(1, 2).reshape(B, L, D) / math.sqrt(Dh))
gap = (y_notes - y_sdpa).abs().max().item()
print(f"max|notes layer - SDPA layer| = {gap:.2e}")
print(f"max|notes layer - out_proj(unscaled attention / sqrt(Dh))| = "
      f"{(y_notes - y_named).abs().max().item():.2e}")
assert gap > 0.05, "the notes' layer now matches the corrected one?"
torch.testing.assert_close(y_notes, y_named)

# %%
# The notes' row (blue) is a softmax at temperature 1 instead of :math:`\sqrt{D_h}`,
# squeezed to sum :math:`1 / \sqrt{D_h}`. Renormalized (orange), it is sharper than the
# correct row (green) for every query: a lower temperature always raises the largest
# weight.
notes_renorm = attn_notes / attn_notes.sum(dim=-1, keepdim=True)  # softmax(q k^T)
print(f"max|notes renormalized - softmax(q k^T)| = "
      f"{(notes_renorm - unscaled_w).abs().max().item():.2e}")
print(f"largest weight, mean over rows: corrected {attn.amax(-1).mean().item():.3f}, "
      f"notes renormalized {notes_renorm.amax(-1).mean().item():.3f}")
torch.testing.assert_close(notes_renorm, unscaled_w)
assert (notes_renorm.amax(-1) >= attn.amax(-1)).all()

keys = torch.arange(L)
fig, ax = plt.subplots()
ax.plot(keys, attn_notes[0, 0, 0].cpu(), "o-",
        label=f"notes: softmax, then × 1/√Dh (sum {Dh**-0.5:.2f})")
ax.plot(keys, notes_renorm[0, 0, 0].cpu(), "s--", label="notes, renormalized to sum 1")
ax.plot(keys, attn[0, 0, 0].cpu(), "^-",
        label="corrected: × 1/√Dh, then softmax (sum 1)")
ax.set_xlabel("key position m")
ax.set_ylabel("attention weight of query 0 (head 0)")
ax.set_title(f"Scaling after the softmax (Dh = {Dh}): the row sums to 1/√Dh\n"
             "and, renormalized, is sharper than the correct one")
ax.legend()
plt.show()

# %%
# Try it: reshape to ``(B, L, Nh, 3, Dh)`` instead. Do you still get ``q``?
# -------------------------------------------------------------------------
# The fused projection's output is ``(B, L, 3D)``. What if the reshape put the heads
# before the ``3``?
with torch.no_grad():
    q_swapped = proj.reshape(B, L, Nh, 3, Dh).permute(3, 0, 2, 1, 4)[0]  # (B,Nh,L,Dh)
    gap = (q_swapped - q_raw).abs().max().item()
print(f"reshape(B, L, Nh, 3, Dh) instead: max|q_swapped - q| = {gap:.2f}")
assert gap > 0.1, "the axis order of the reshape no longer matters?"

# %%
# No: swapping the ``3`` and ``Nh`` axes interleaves ``q``, ``k`` and ``v`` features
# inside every head, and the "q" it slices is a mix of all three.

# %%
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention``, ``torch.nn.Linear``,
# ``torch.nn.LayerNorm``, ``torch.einsum``.
