"""
Self-attention, step by step
============================

The source notes build a self-attention layer from a fused QKV projection, per-head
QK-norm, attention and an output projection. This page runs their module as written (it
fails twice before it computes anything, then computes the wrong thing), walks the
shapes from ``(B, L, D)`` back to ``(B, L, D)``, and proves the corrected layer equal to
one whose middle is PyTorch's ``scaled_dot_product_attention``.
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
# The notes' module, verbatim
# ---------------------------
# Copied unchanged from the notes, including their letters: their ``H`` is the book's
# ``Nh`` and their ``Dt`` the book's ``D``. Note that nothing on this page has imported
# ``math`` yet.
class SelfAttention(torch.nn.Module):
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


# %%
# .. _errata-attn-does-not-run:
#
# The notes' example does not run
# -------------------------------
# Their example moves the module with ``.cuda()``, which raises on a machine without a
# GPU; ``.to(device)`` runs anywhere. With that fixed, the first call raises
# ``NameError``: the snippet uses ``math.sqrt`` but never imports ``math``.
token_dim, num_heads = 1024, 16  # the notes' example sizes
try:
    SelfAttention(token_dim, num_heads).cuda()
except (AssertionError, RuntimeError) as err:  # a CPU-only build / no GPU
    print(f"notes' .cuda(): {type(err).__name__}: {err}")
    assert not torch.cuda.is_available()
else:
    print("notes' .cuda() works here: this machine has a GPU (it fails on one without)")
    assert torch.cuda.is_available()

self_attention = SelfAttention(token_dim, num_heads).to(device)
x_notes = torch.randn(3, 5, token_dim, device=device)  # (B, L, D): the notes' B, L
try:
    self_attention(x_notes)
except NameError as err:
    print(f"notes' forward: NameError: {err}")
else:
    raise AssertionError("expected the notes' snippet to fail without `import math`")

# %%
# One import later the module runs. Whether it computes attention is the rest of this
# page.
import math

with torch.no_grad():
    out_notes = self_attention(x_notes)  # (B, L, D)
print(f"with math imported: output shape {tuple(out_notes.shape)}")
assert out_notes.shape == x_notes.shape

# %%
# The shape walk
# --------------
# From here on the sizes are small. The steps below are the notes' ``forward`` line by
# line, with the scale moved to where it belongs (see the next sections); each shape is
# recorded.
B, L, D, Nh = 2, 12, 32, 4  # L != Dh so that (B, Nh, L, L) and (B, Nh, L, Dh) differ
Dh = D // Nh
notes = SelfAttention(D, Nh).to(device)
with torch.no_grad():  # QK-norm's affine starts at 1 and 0 for both q and k: redraw it,
    for p in (*notes.q_norm.parameters(), *notes.k_norm.parameters()):  # so that a
        p.add_(0.5 * torch.randn_like(p))  # swapped or dropped norm shows
x = torch.randn(B, L, D, device=device)  # (B, L, D)

with torch.no_grad():
    proj = notes.qkv_proj(x)  # (B, L, 3D)
    qkv = proj.reshape(B, L, 3, Nh, Dh)  # (B, L, 3, Nh, Dh)
    qkv_heads = qkv.permute(2, 0, 3, 1, 4)  # (3, B, Nh, L, Dh)
    q_raw, k_raw, v = qkv_heads.unbind(0)  # each (B, Nh, L, Dh)
    q, k = notes.q_norm(q_raw), notes.k_norm(k_raw)  # QK-norm over Dh, per token
    logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
    attn = logits.softmax(dim=-1)  # (B, Nh, L, L)
    heads = torch.einsum("bhlm,bhmd->bhld", attn, v)  # (B, Nh, L, Dh)
    merged = heads.permute(0, 2, 1, 3).reshape(B, L, D)  # (B, L, D)
    out = notes.out_proj(merged)  # (B, L, D)

walk = {"x": x, "qkv_proj(x)": proj, "reshape": qkv, "permute": qkv_heads, "q, k, v": q,
        "attention": attn, "attn @ v": heads, "merge heads": merged, "out_proj": out}
for name, t in walk.items():
    print(f"{name:12s} {tuple(t.shape)}")
shapes = [tuple(t.shape) for t in walk.values()]
assert shapes == [(B, L, D), (B, L, 3 * D), (B, L, 3, Nh, Dh), (3, B, Nh, L, Dh),
                  (B, Nh, L, Dh), (B, Nh, L, L), (B, Nh, L, Dh), (B, L, D), (B, L, D)]

# %%
# Why ``reshape(B, L, 3, Nh, Dh)`` and not another order
# ------------------------------------------------------
# ``qkv_proj.weight`` has shape ``(3D, D)``. Putting the ``3`` before ``Nh`` means ``q``
# is made from output features ``0 .. D-1``, ``k`` from ``D .. 2D-1`` and ``v`` from
# ``2D .. 3D-1``: three ordinary ``(D, D)`` projections stacked. That is exactly how
# ``nn.MultiheadAttention`` stores its ``in_proj_weight`` (next page).
W, b = notes.qkv_proj.weight, notes.qkv_proj.bias  # (3D, D), (3D,)


def split_heads(t):
    """(B, L, D) -> (B, Nh, L, Dh): head i owns features i*Dh .. (i+1)*Dh - 1."""
    return t.reshape(B, L, Nh, Dh).transpose(1, 2)


with torch.no_grad():
    for name, ours, rows in (("q", q_raw, slice(0, D)), ("k", k_raw, slice(D, 2 * D)),
                             ("v", v, slice(2 * D, 3 * D))):
        ref = split_heads(x @ W[rows].T + b[rows])  # (B, Nh, L, Dh)
        print(f"{name} = rows {rows.start}:{rows.stop} of qkv_proj: "
              f"max|diff| = {(ours - ref).abs().max().item():.2e}")
        torch.testing.assert_close(ours, ref)

    # Swapping the 3 and Nh axes interleaves q, k and v features inside every head.
    q_swapped = proj.reshape(B, L, Nh, 3, Dh).permute(3, 0, 2, 1, 4)[0]  # (B,Nh,L,Dh)
    gap = (q_swapped - q_raw).abs().max().item()
print(f"reshape(B, L, Nh, 3, Dh) instead: max|q_swapped - q| = {gap:.2f}")
assert gap > 0.1, "the axis order of the reshape no longer matters?"

# %%
# .. _errata-attn-scale-after-softmax:
#
# The notes scale after the softmax
# ---------------------------------
# The notes multiply the *probabilities* by :math:`1 / \sqrt{D_h}`; the scale is a
# temperature and belongs on the logits, before the softmax. After the softmax it only
# shrinks every row to sum :math:`1 / \sqrt{D_h}`, and the distribution itself is the
# unscaled (sharper) one.
with torch.no_grad():
    attn_notes = torch.einsum("bhld,bhmd->bhlm", q, k).softmax(dim=-1)  # notes' order:
    attn_notes = attn_notes * (1 / math.sqrt(Dh))  # softmax, then scale (B, Nh, L, L)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, Nh, L, Dh)

row_sums = attn.sum(dim=-1)  # (B, Nh, L)
notes_sums = attn_notes.sum(dim=-1)  # (B, Nh, L)
print(f"corrected: min weight {attn.min().item():.3f}, "
      f"max|row sum - 1| = {(row_sums - 1).abs().max().item():.2e}")
print(f"notes:     row sums {notes_sums.mean().item():.4f} "
      f"(1/sqrt(Dh) = {Dh**-0.5:.4f}; an illustration, true by construction)")
assert (attn >= 0).all()
torch.testing.assert_close(row_sums, torch.ones_like(row_sums))  # softmax over the keys

# %%
# (The notes' row sums are an illustration, not a check: a softmax row sums to 1, so
# times :math:`c` it sums to :math:`c`.) The check is on the weights themselves: the
# notes' row is the softmax at temperature 1, :math:`\mathrm{softmax}(q k^\top)`, times
# :math:`1 / \sqrt{D_h}`, computed here independently with ``@`` instead of ``einsum``.
# What the notes' *module* computes is checked below.
with torch.no_grad():
    unscaled_w = (q @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, Nh, L, L), no scale
print(f"max|notes' weights - softmax(q k^T) / sqrt(Dh)| = "
      f"{(attn_notes - unscaled_w / math.sqrt(Dh)).abs().max().item():.2e}")
torch.testing.assert_close(attn_notes, unscaled_w / math.sqrt(Dh))

# %%
# Scale first, then softmax, is what ``scaled_dot_product_attention`` computes: its
# default ``scale`` is ``1 / sqrt(q.size(-1))``. The notes' output is a different,
# shrunken one.
gap = (attn_notes @ v - fused).abs().max().item()
err = (heads - fused).abs().max().item()
print(f"max|corrected - scaled_dot_product_attention| = {err:.2e}")
print(f"max|notes     - scaled_dot_product_attention| = {gap:.2e}")
torch.testing.assert_close(heads, fused)
assert gap > 0.1, "the notes' order now matches scaled_dot_product_attention?"

# %%
# The whole layer, corrected
# --------------------------
# The corrected layer keeps the notes' parameter names, so it loads their ``state_dict``
# unchanged. Its only change is the attention step; a subclass swaps that step for
# ``scaled_dot_product_attention`` to give an independent reference for the whole layer.


class SelfAttentionFixed(torch.nn.Module):
    """Fused QKV projection, QK-norm per head, attention, output projection.

    (B, L, D) -> (B, L, D).
    """

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh = Nh
        self.qkv_proj = torch.nn.Linear(D, 3 * D)
        self.out_proj = torch.nn.Linear(D, D)
        self.q_norm = torch.nn.LayerNorm(D // Nh)
        self.k_norm = torch.nn.LayerNorm(D // Nh)

    def attend(self, q, k, v):
        """softmax(q k^T / sqrt(Dh)) v, scale on the logits. (B, Nh, L, Dh) -> same."""
        scale = 1 / math.sqrt(q.size(-1))
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) * scale  # (B, Nh, L, L)
        return torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B,Nh,L,Dh)

    def forward(self, x):
        B, L, D = x.shape
        qkv = self.qkv_proj(x).reshape(B, L, 3, self.Nh, D // self.Nh)  # (B,L,3,Nh,Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, Nh, L, Dh)
        out = self.attend(self.q_norm(q), self.k_norm(k), v)  # (B, Nh, L, Dh)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, D))  # (B, L, D)


class SelfAttentionSDPA(SelfAttentionFixed):
    """The same layer with PyTorch's fused attention in the middle."""

    def attend(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B,Nh,L,Dh)


fixed = SelfAttentionFixed(D, Nh).to(device)
sdpa = SelfAttentionSDPA(D, Nh).to(device)
fixed.load_state_dict(notes.state_dict())  # strict: same parameter names and shapes
sdpa.load_state_dict(notes.state_dict())
with torch.no_grad():
    y_fixed, y_sdpa, y_notes = fixed(x), sdpa(x), notes(x)  # each (B, L, D)
gap = (y_notes - y_sdpa).abs().max().item()
print(f"max|fixed layer - SDPA layer| = {(y_fixed - y_sdpa).abs().max().item():.2e}")
print(f"max|notes layer - SDPA layer| = {gap:.2e}")
torch.testing.assert_close(y_fixed, y_sdpa)
# The shape walk above is the same layer written out step by step, and independent
# code: compared with the SDPA layer it checks the walk's head merge and projection.
print(f"max|shape walk - SDPA layer| = {(out - y_sdpa).abs().max().item():.2e}")
torch.testing.assert_close(out, y_sdpa)
assert gap > 0.05, "the notes' layer now matches the corrected one?"

# %%
# What the notes' layer computes instead is now easy to name: attention *without* any
# scale (``scale=1``), shrunk by :math:`\sqrt{D_h}` before the output projection.
with torch.no_grad():
    unscaled = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
    y_named = notes.out_proj(unscaled.transpose(1, 2).reshape(B, L, D) / math.sqrt(Dh))
print(f"max|notes layer - out_proj(unscaled attention / sqrt(Dh))| = "
      f"{(y_notes - y_named).abs().max().item():.2e}")
torch.testing.assert_close(y_notes, y_named)

# %%
# One query, three rows of weights
# --------------------------------
# The notes' row (blue) is a softmax at temperature 1 instead of :math:`\sqrt{D_h}`,
# squeezed to sum :math:`1 / \sqrt{D_h}`. Renormalized (orange), it is sharper than the
# correct row (green) for every query: a lower temperature always raises the largest
# weight.
import matplotlib.pyplot as plt

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
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention``, ``torch.nn.Linear``,
# ``torch.nn.LayerNorm``, ``torch.einsum``.
