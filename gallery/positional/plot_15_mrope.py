"""
M-RoPE: one rotary table, three position axes
=============================================

A vision-language model puts image and text tokens in one sequence. Qwen2-VL's
multimodal RoPE (M-RoPE) gives every token a time, a row and a column position and lets
each frequency pair of a head read one of them. This page builds the positions, writes
Qwen2-VL's and Qwen3-VL's layouts and Pixtral's 2-D RoPE, and proves each equal to
Hugging Face's.

**You will learn**

- how Qwen2-VL numbers text, an image and text again with ``(T, H, W)`` positions
- how ``mrope_section`` gives each frequency pair to one axis, in blocks or interleaved
- why M-RoPE is 1-D RoPE on text, in either layout
- how Pixtral rotates image patches by row and column (the N-D page's axial RoPE)

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (rotate-half RoPE),
:doc:`/generated/positional/plot_08_rope_nd` (axial RoPE for images).

.. index:: ! M-RoPE
.. index:: ! multimodal RoPE
.. index:: ! mrope_section
.. index:: ! 2-D RoPE (Pixtral)
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every module is built from a small config; nothing is
# downloaded (``HF_HUB_OFFLINE=1``).
#
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import matplotlib.pyplot as plt
import torch
import transformers
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from transformers import PixtralVisionConfig, Qwen2VLConfig, Qwen2VLTextConfig
from transformers.models.pixtral import modeling_pixtral
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen3_vl import modeling_qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# Rotate-half RoPE, copied verbatim from :doc:`/generated/positional/plot_04_rope`.


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# Copied from positional/plot_04_rope.py: rope_cos_sin
def rope_cos_sin(pos, Dh, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dh), rotate-half layout, angles in `dtype`.

    Channel i and channel i + Dh/2 form pair i and share its angle pos * inv_freq[i]."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    angles = pos[..., None].to(dtype) * inv_freq  # (..., L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, Dh)
    return angles.cos(), angles.sin()


# Copied from positional/plot_04_rope.py: rotate_half
def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: x (..., Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat([-x2, x1], dim=-1)


# Copied from positional/plot_04_rope.py: rope
def rope(x, cos, sin):
    """Rotate-half RoPE: x (..., L, Dh); cos, sin broadcast to it, e.g. (L, Dh) or
    (B, 1, L, Dh) for x (B, Nh, L, Dh)."""
    return x * cos + rotate_half(x) * sin


# %%
# The idea
# --------
# Token ``n`` carries three positions :math:`p_T(n), p_H(n), p_W(n)`. A text token at
# :math:`s` has :math:`(s, s, s)`; the merged image patch in row :math:`i`, column
# :math:`j` of an image that starts at :math:`s` has :math:`(s, s + i, s + j)`; the
# text after the image resumes at the largest position so far plus one. Frequency
# pair :math:`k` of a head (:math:`\omega_k = b^{-2k/D_h}`) turns by the position of
# its own axis :math:`a(k)`, and the model's ``mrope_section`` says which axis owns
# which pair:
#
# .. math::
#
#    \phi_k(n) = p_{a(k)}(n)\, \omega_k, \qquad \omega_k = b^{-2k/D_h}, \qquad
#    k = 0, \ldots, D_h/2 - 1,
#
#    a_{\text{Qwen2-VL}}(k) = \begin{cases} T & k < 16 \\ H & 16 \le k < 40 \\
#    W & 40 \le k < 64 \end{cases}
#    \qquad
#    a_{\text{Qwen3-VL}}(k) = \begin{cases} H & k \bmod 3 = 1,\ k < 60 \\
#    W & k \bmod 3 = 2,\ k < 60 \\ T & \text{otherwise} \end{cases}
#
# If :math:`p_T = p_H = p_W = n`, every pair turns by :math:`n\,\omega_k`, whatever its
# owner: 1-D RoPE. Qwen2-VL (sections ``[16, 24, 24]``) cuts the 64 pairs of a
# ``Dh = 128`` head into three blocks, so the columns of an image get only the slowest
# frequencies; Qwen3-VL (``[24, 20, 20]``, interleaved) deals the same 64 pairs out in
# turn, so each axis has fast and slow ones.
owner_2 = torch.repeat_interleave(torch.arange(3), torch.tensor([16, 24, 24]))  # (64,)
owner_3 = torch.tensor([0, 1, 2] * 20 + [0] * 4)  # (64,): T H W T H W ... T H W T T T T

fig, ax = plt.subplots(figsize=(9, 2.4), layout="constrained")
colors = ["#4c72b0", "#dd8452", "#55a868"]
ax.imshow(torch.stack([owner_2, owner_3]), cmap=ListedColormap(colors), aspect="auto",
          vmin=0, vmax=2)
ax.grid(False)
ax.set_yticks([0, 1], ["Qwen2-VL\n[16, 24, 24]", "Qwen3-VL\n[24, 20, 20]\ninterleaved"])
ax.set_xlabel("frequency pair k of a Dh = 128 head (k = 0 fastest, k = 63 slowest)")
ax.set_title("Same 64 frequency pairs, two owners: Qwen2-VL gives the columns (W)\n"
             "only the slowest 24; Qwen3-VL gives each axis fast and slow pairs")
fig.legend(handles=[Patch(color=c, label=f"axis {a}") for c, a in zip(colors, "THW")],
           loc="outside right center")
plt.show()

# %%
# Positions: text, an image, text
# -------------------------------
# An image of ``H x W`` patches (``T = 1``) reaches the language model as ``H/m x W/m``
# tokens (Qwen2-VL merges ``m x m = 2 x 2`` patches); a segment is ``("text", n)`` or
# ``("image", (T, H, W))``.


def mrope_position_ids(segments, merge):
    """Qwen2-VL's (T, H, W) positions of text and image segments in order: (3, L)."""
    start, parts = 0, []
    for kind, size in segments:
        if kind == "text":
            ids = torch.arange(start, start + size).expand(3, size)  # (3, n): T = H = W
        else:
            T, H, W = size[0], size[1] // merge, size[2] // merge  # merged tokens
            t, i, j = torch.meshgrid(torch.arange(T), torch.arange(H), torch.arange(W),
                                     indexing="ij")  # each (T, H, W)
            ids = torch.stack([t, i, j]).reshape(3, T * H * W) + start  # (3, T*H*W)
        parts.append(ids)
        start = ids.max().item() + 1  # the next segment starts after the largest
    return torch.cat(parts, dim=1)  # (3, L)


# %%
# Three text tokens, an image of ``4 x 4`` patches (``2 x 2`` tokens), two text
# tokens: nine tokens, but the last text token sits at position
# :measured:`last_pos`, not 8, because the image spends four tokens on only two
# steps of each axis.
segments = [("text", 3), ("image", (1, 4, 4)), ("text", 2)]
pos = mrope_position_ids(segments, merge=2)  # (3, L)
for axis, row in zip("THW", pos.tolist()):
    print(f"{axis}: {row}")
last_pos, = pos[:, -1].unique().tolist()  # T = H = W
assert pos[:, 3:7].tolist() == [[3, 3, 3, 3], [3, 3, 4, 4], [3, 4, 3, 4]]
assert pos[:, 7].tolist() == [pos[:, :7].max().item() + 1] * 3 and last_pos == 6

# %%
# M-RoPE
# ------
# The owner of each pair, from ``mrope_section``: contiguous blocks, or, as Qwen3-VL
# does, axis ``a >= 1`` takes every third pair from pair ``a`` on, until it has its
# section, and ``T`` keeps the rest. Each pair then reads its owner's position.


def contiguous_owner(sections):
    """Qwen2-VL: pairs 0.. go to axis 0, the next sections[1] to axis 1...: (Dh/2,)."""
    return torch.repeat_interleave(torch.arange(len(sections)), torch.tensor(sections))


def interleaved_owner(sections):
    """Qwen3-VL: pair a + Nc m (m < sections[a]) to axis a >= 1, the rest to 0: (Dh/2,)
    """
    Nc = len(sections)
    owner = torch.zeros(sum(sections), dtype=torch.long)  # (Dh/2,)
    for a in range(1, Nc):
        owner[a:Nc * sections[a]:Nc] = a
    return owner


def mrope_cos_sin(pos, owner, Dh, base, dtype=torch.float32):
    """pos (Nc, ..., L) per axis, owner (Dh/2,) -> cos, sin (..., L, Dh), rotate-half.

    Pair k (channels k and k + Dh/2) turns by pos[owner[k]] * inv_freq[k]."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    pair_pos = pos[owner.to(pos.device)].movedim(0, -1)  # (..., L, Dh/2)
    angles = pair_pos.to(dtype) * inv_freq  # (..., L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, Dh)
    return angles.cos(), angles.sin()


# %%
# With the real models' rope parameters (their ``config.json``), the owners are the
# figure's, and on text alone (positions up to :measured:`text_last:d`, ``T = H = W``)
# both layouts are 1-D RoPE, bit for bit.
qwen2_vl_7b = {"head_dim": 128, "rope_theta": 1e6,  # Qwen/Qwen2-VL-7B-Instruct
               "mrope_section": [16, 24, 24]}  # head_dim: hidden 3584 / 28 heads
qwen3_vl_8b = {"head_dim": 128, "rope_theta": 5e6,  # Qwen/Qwen3-VL-8B-Instruct
               "mrope_section": [24, 20, 20], "mrope_interleaved": True}
own_2 = contiguous_owner(qwen2_vl_7b["mrope_section"])  # (Dh/2,)
own_3 = interleaved_owner(qwen3_vl_8b["mrope_section"])  # (Dh/2,)
print(f"pairs per axis T, H, W: Qwen2-VL {own_2.bincount().tolist()}, "
      f"Qwen3-VL {own_3.bincount().tolist()}")
assert torch.equal(own_2, owner_2) and torch.equal(own_3, owner_3)
assert own_3.bincount().tolist() == [24, 20, 20]
# Text alone (T = H = W): both layouts are 1-D RoPE, bit for bit (Dh = 128, base 1e6)
text_pos = mrope_position_ids([("text", 4096)], merge=None).to(device)  # (3, L)
text_last = text_pos.max().item()
cos_1d, sin_1d = rope_cos_sin(text_pos[:1], 128, 1e6)  # (1, L, Dh) each
for name, owner in [("Qwen2-VL", own_2), ("Qwen3-VL", own_3)]:
    cos_m, sin_m = mrope_cos_sin(text_pos[:, None], owner, 128, 1e6)  # (1, L, Dh)
    print(f"{name}, text only: max|M-RoPE - 1-D RoPE| = "
          f"{(cos_m - cos_1d).abs().max().item():.1e} (cos), "
          f"{(sin_m - sin_1d).abs().max().item():.1e} (sin)")
    assert torch.equal(cos_m, cos_1d) and torch.equal(sin_m, sin_1d)

# %%
# Pixtral's 2-D RoPE
# ------------------
# Pixtral's vision encoder sees patches only, at row :math:`i` and column :math:`j`: the
# axial RoPE of :doc:`/generated/positional/plot_08_rope_nd`, in the rotate-half layout.
# Its first ``Dh/4`` pairs turn with the row, at the even-indexed frequencies
# :math:`\omega_0, \omega_2, \ldots`; the next ``Dh/4`` with the column, at the odd
# ones :math:`\omega_1, \omega_3, \ldots`. That is M-RoPE with two axes, interleaved,
# its pairs sorted by axis (a Proof below).


def pixtral_cos_sin(pos, Dh, base, dtype=torch.float32):
    """pos (2, ..., N) rows, columns -> cos, sin (..., N, Dh): rows turn pairs 0 ..
    Dh/4 - 1 at frequencies 0, 2, 4 ..., columns the next Dh/4 at 1, 3, 5 ..."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    angles = torch.cat([pos[0][..., None].to(dtype) * inv_freq[0::2],
                        pos[1][..., None].to(dtype) * inv_freq[1::2]], dim=-1)
    angles = torch.cat([angles, angles], dim=-1)  # (..., N, Dh)
    return angles.cos(), angles.sin()


# %%
# Proof: how far the columns turn in the real models
# ---------------------------------------------------
# On the image tokens the two layouts differ. With the real configs, the fastest pair
# the column axis owns turns across a row of 32 image tokens (an image of 896 pixels:
# 14-pixel patches, merged 2 x 2) by :measured:`w_sweep_2:.4f` rad in Qwen2-VL (pair
# 40: :math:`31 \cdot 10^{-6 \cdot 80/128}`) and :measured:`w_sweep_3:.1f` rad in
# Qwen3-VL (pair 2): Qwen2-VL tells columns apart only by small angles.
inv_2 = rope_inv_freq(qwen2_vl_7b["head_dim"], qwen2_vl_7b["rope_theta"])  # (64,)
inv_3 = rope_inv_freq(qwen3_vl_8b["head_dim"], qwen3_vl_8b["rope_theta"])  # (64,)
w_sweep_2 = 31 * inv_2[own_2 == 2].max().item()  # columns 0 .. 31
w_sweep_3 = 31 * inv_3[own_3 == 2].max().item()
print(f"fastest W pair, 32 columns: Qwen2-VL {w_sweep_2:.4f} rad (pair "
      f"{(own_2 == 2).nonzero()[0].item()}), Qwen3-VL {w_sweep_3:.1f} rad (pair "
      f"{(own_3 == 2).nonzero()[0].item()})")
assert w_sweep_2 < 0.01 and w_sweep_3 > 6.3  # less than a degree; more than a turn
assert abs(w_sweep_2 - 31 * 1e6 ** (-80 / 128)) < 1e-9  # float32 frequency: 1e-7 rel.
assert abs(w_sweep_3 - 31 * 5e6 ** (-4 / 128)) < 1e-5

# %%
# Proof: the positions equal Hugging Face's get_rope_index
# --------------------------------------------------------
# Hugging Face builds them in ``Qwen2VLModel.get_rope_index``, a method that reads
# only ``config.vision_config.spatial_merge_size`` and ``get_vision_position_ids``: a
# bare object with those two attributes calls it, no model built. It marks each token
# text (0) or image (1) and takes the image's ``grid_thw`` in patches.


class RopeIndexHost:
    """What Qwen2VLModel.get_rope_index reads from `self`: config, one method."""

    config = Qwen2VLConfig()  # vision_config.spatial_merge_size = 2, Qwen2-VL's
    get_vision_position_ids = modeling_qwen2_vl.Qwen2VLModel.get_vision_position_ids


def hf_rope_index(segments):
    """Qwen2VLModel.get_rope_index of one sequence of segments: (3, L), rope delta."""
    lengths = [size if kind == "text" else size[0] * size[1] * size[2] // 4
               for kind, size in segments]  # tokens: an image merges 2 x 2 patches
    types = torch.cat([torch.full((n,), int(kind == "image"))
                       for (kind, _), n in zip(segments, lengths)])[None]  # (1, L)
    grids = [size for kind, size in segments if kind == "image"]
    ids, delta = modeling_qwen2_vl.Qwen2VLModel.get_rope_index(
        RopeIndexHost(), types, types, torch.tensor(grids))  # input_ids: shape only
    return ids.squeeze(1), delta.item()  # (3, L), max position + 1 - L


# %%
hf_pos, hf_delta = hf_rope_index(segments)
print(f"max|ours - get_rope_index| = {(pos - hf_pos).abs().max().item()}; "
      f"rope delta {hf_delta} = max + 1 - L = {pos.max().item() + 1 - pos.shape[1]}")
assert torch.equal(pos, hf_pos)
assert hf_delta == pos.max().item() + 1 - pos.shape[1]

# %%
# Two images of other shapes, and the rope delta
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A ``2 x 2`` image cannot tell rows from columns. Two images, ``3 x 4`` and ``2 x 1``
# tokens, between texts: ours equals ``get_rope_index``, and each text resumes at the
# image's start plus its larger side (Hugging Face's rule, the same as max + 1 for a
# still image). The rope delta, max + 1 - L, is what Hugging Face keeps to continue
# the positions while it generates.
segments_2 = [("text", 4), ("image", (1, 6, 8)), ("text", 3), ("image", (1, 4, 2)),
              ("text", 2)]
pos_2 = mrope_position_ids(segments_2, merge=2)  # (3, L)
hf_pos_2, hf_delta_2 = hf_rope_index(segments_2)
print(f"L = {pos_2.shape[1]}: max|ours - get_rope_index| = "
      f"{(pos_2 - hf_pos_2).abs().max().item()}, rope delta {hf_delta_2}")
print(f"text after image 1 starts at {pos_2[0, 16].item()}, "
      f"after image 2 at {pos_2[0, 21].item()}")
assert torch.equal(pos_2, hf_pos_2) and hf_delta_2 == pos_2.max().item() + 1 - 23
assert pos_2[0, 16].item() == 4 + 4 and pos_2[0, 21].item() == 11 + 2
assert pos_2[1:, 4:16].amax(dim=1).tolist() == [4 + 2, 4 + 3]  # rows, then columns

# %%
# Proof: cos and sin equal Qwen2-VL's and Qwen3-VL's rotary embeddings
# --------------------------------------------------------------------
# Hugging Face's rotary embeddings, ``Qwen2VLRotaryEmbedding`` and
# ``Qwen3VLTextRotaryEmbedding``, built from the real rope parameters on a head of
# ``Dh = 128``, give the same ``cos`` and ``sin`` for the nine tokens above, and their
# ``apply_rotary_pos_emb`` rotates queries as ``rope`` does. (Qwen3-VL's config
# defaults to ``head_dim = 128``; its text width is not read.)
cfg_2 = Qwen2VLTextConfig(hidden_size=128, num_attention_heads=1, rope_parameters={
    "rope_type": "default", "rope_theta": qwen2_vl_7b["rope_theta"],
    "mrope_section": qwen2_vl_7b["mrope_section"]})
cfg_3 = Qwen3VLTextConfig(rope_parameters={
    "rope_type": "default", "rope_theta": qwen3_vl_8b["rope_theta"],
    "mrope_section": qwen3_vl_8b["mrope_section"], "mrope_interleaved": True})
assert cfg_3.head_dim == qwen3_vl_8b["head_dim"] == qwen2_vl_7b["head_dim"] == 128
hf_rot_2 = modeling_qwen2_vl.Qwen2VLRotaryEmbedding(cfg_2).to(device)
hf_rot_3 = modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(cfg_3).to(device)
q = torch.randn(1, 2, pos.shape[1], 128, device=device)  # (B, Nh, L, Dh)
pos_d = pos[:, None].to(device)  # (3, B, L)
for name, hf_rot, hf_mod, owner, real in [
        ("Qwen2-VL", hf_rot_2, modeling_qwen2_vl, own_2, qwen2_vl_7b),
        ("Qwen3-VL", hf_rot_3, modeling_qwen3_vl, own_3, qwen3_vl_8b)]:
    cos, sin = mrope_cos_sin(pos_d, owner, 128, real["rope_theta"])  # (B, L, Dh) each
    hf_cos, hf_sin = hf_rot(q, pos_d)  # (B, L, Dh) each
    hf_q, _ = hf_mod.apply_rotary_pos_emb(q, q, hf_cos, hf_sin)  # (B, Nh, L, Dh)
    rot_q = rope(q, cos[:, None], sin[:, None])  # (B, Nh, L, Dh)
    print(f"{name}: max|cos - HF| = {(cos - hf_cos).abs().max().item():.1e}, "
          f"max|rope(q) - HF| = {(rot_q - hf_q).abs().max().item():.1e}")
    torch.testing.assert_close(torch.stack([cos, sin]), torch.stack([hf_cos, hf_sin]))
    torch.testing.assert_close(rot_q, hf_q)

# %%
# With the same frequencies (one base), the two layouts agree on the text tokens and
# differ on the image tokens, where the three axes part.
cos_a, _ = mrope_cos_sin(pos, own_2, 128, 1e6)  # (L, Dh)
cos_b, _ = mrope_cos_sin(pos, own_3, 128, 1e6)  # (L, Dh)
same = (pos == pos[0]).all(dim=0)  # (L,): T = H = W (text, and the image's first)
layout_gap = (cos_a - cos_b)[~same].abs().max().item()
print(f"the two layouts at base 1e6: max|cos gap| where T = H = W "
      f"{(cos_a - cos_b)[same].abs().max().item():.1e}, elsewhere {layout_gap:.2f}")
assert torch.equal(cos_a[same], cos_b[same]) and layout_gap > 0.1
assert same.tolist() == [True] * 4 + [False] * 3 + [True] * 2

# %%
# Proof: Pixtral's 2-D RoPE equals Hugging Face's and is interleaved M-RoPE
# -------------------------------------------------------------------------
# Pixtral-12B's vision encoder (its config below: Hugging Face's
# ``PixtralVisionConfig`` defaults to it) on a ``3 x 5`` grid of patches, against
# ``PixtralVisionRotaryEmbedding`` and Pixtral's ``apply_rotary_pos_emb``. Hugging
# Face passes the positions as ``(N, 2)``, rows first, as ``PixtralVisionModel`` builds
# them.
pixtral_12b_vision = {"hidden_size": 1024, "num_attention_heads": 16,  # Pixtral-12B
                      "rope_theta": 1e4}  # mistral-community/pixtral-12b config.json
px_cfg = PixtralVisionConfig()
assert (px_cfg.hidden_size, px_cfg.num_attention_heads, px_cfg.rope_parameters) == (
    1024, 16, {"rope_type": "axial", "rope_theta": pixtral_12b_vision["rope_theta"]})
assert pixtral_12b_vision["hidden_size"] == px_cfg.hidden_size
assert pixtral_12b_vision["num_attention_heads"] == px_cfg.num_attention_heads
Dh_px, base_px = px_cfg.head_dim, pixtral_12b_vision["rope_theta"]  # 64, 1e4
rows, cols = torch.meshgrid(torch.arange(3, device=device),
                            torch.arange(5, device=device), indexing="ij")  # (H, W)
grid = torch.stack([rows, cols]).reshape(2, 15)  # (2, N): row, column of each patch
assert grid[:, -1].tolist() == [2, 4]  # 3 rows, 5 columns
hf_px = modeling_pixtral.PixtralVisionRotaryEmbedding(px_cfg).to(device)
q_px = torch.randn(1, 2, 15, Dh_px, device=device)  # (B, Nh, N, Dh)
cos_px, sin_px = pixtral_cos_sin(grid[:, None], Dh_px, base_px)  # (B, N, Dh) each
hf_cos_px, hf_sin_px = hf_px(q_px, grid.T)  # (N, Dh) each
hf_q_px, _ = modeling_pixtral.apply_rotary_pos_emb(q_px, q_px, hf_cos_px, hf_sin_px,
                                                    unsqueeze_dim=0)  # (B, Nh, N, Dh)
rot_q_px = rope(q_px, cos_px[:, None], sin_px[:, None])  # (B, Nh, N, Dh)
print(f"Pixtral: max|cos - HF| = {(cos_px[0] - hf_cos_px).abs().max().item():.1e}, "
      f"max|rope(q) - HF| = {(rot_q_px - hf_q_px).abs().max().item():.1e}")
torch.testing.assert_close(torch.stack([cos_px, sin_px]),
                           torch.stack([hf_cos_px, hf_sin_px])[:, None])
torch.testing.assert_close(rot_q_px, hf_q_px)

# %%
# The N-D page's frequencies
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# For Pixtral-12B's vision head, the rows' frequencies are exactly the N-D page's
# per-axis list :math:`b^{-2k/(D_h/2)}`; the columns' are each a factor
# :math:`b^{-2/D_h}` slower.
inv64 = rope_inv_freq(Dh_px, base_px, torch.float64)  # (Dh/2,)
nd_page = 1e4 ** (-torch.arange(0, Dh_px // 2, 2, dtype=torch.float64) / (Dh_px // 2))
col_ratio = inv64[1::2] / inv64[0::2]  # (Dh/4,), one ratio for every column pair
print(f"max|row freqs - N-D page's| = {(inv64[0::2] - nd_page).abs().max().item():.1e}")
print(f"column / row in [{col_ratio.min().item():.6f}, {col_ratio.max().item():.6f}]"
      f" = b^(-2/Dh) = {1e4 ** (-2 / 64):.6f}")
torch.testing.assert_close(inv64[0::2], nd_page)
torch.testing.assert_close(col_ratio, torch.full_like(col_ratio, 1e4 ** (-2 / 64)))

# %%
# Two-axis interleaved M-RoPE, sorted
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Two axes dealt in turn (``interleaved_owner([16, 16])``: pair ``k`` to axis ``k mod
# 2``), then the pairs sorted, rows' first: that is ``pixtral_cos_sin``. And, as on the
# N-D page, moving the whole grid changes no logit, while transposing it does
# (float64).
sort = torch.arange(32).reshape(16, 2).T.flatten()  # (Dh/2,): 0, 2, .. 30, 1, .. 31
sort = torch.cat([sort, 32 + sort])  # (Dh,): both halves of the rotate-half layout
cos_il, sin_il = mrope_cos_sin(grid[:, None], interleaved_owner([16, 16]), Dh_px,
                               base_px)  # (B, N, Dh) each
print(f"max|Pixtral - sorted interleaved M-RoPE| = "
      f"{(cos_il[..., sort] - cos_px).abs().max().item():.1e}")
torch.testing.assert_close(cos_il[..., sort], cos_px)
torch.testing.assert_close(sin_il[..., sort], sin_px)
qp, kp = torch.randn(2, 1, 15, Dh_px, dtype=torch.float64, device=device)  # B, N, Dh


# %%
def pixtral_logits(q, k, pos, base):
    """<rope(q_n), rope(k_m)> for q, k (B, N, Dh) at patches pos (2, N): (B, N, N)."""
    cos, sin = pixtral_cos_sin(pos, q.shape[-1], base, q.dtype)  # (N, Dh) each
    return rope(q, cos, sin) @ rope(k, cos, sin).mT


# %%
moved = grid + torch.randint(-50, 50, (2, 1), device=device)  # (2, N): any shift
transposed = grid.flip(0)  # (2, N): patch n at (its column, its row)
assert transposed[:, 1].tolist() == [1, 0]
px_logits = pixtral_logits(qp, kp, grid, base_px)  # (B, N, N)
px_moved = pixtral_logits(qp, kp, moved, base_px)  # (B, N, N)
px_transposed = pixtral_logits(qp, kp, transposed, base_px)  # (B, N, N)
print(f"grid moved by {(moved - grid)[:, 0].tolist()}: max|logit change| = "
      f"{(px_moved - px_logits).abs().max().item():.1e}, "
      f"transposed: {(px_transposed - px_logits).abs().max():.2f}")
torch.testing.assert_close(px_moved, px_logits)
assert (px_transposed - px_logits).abs().max() > 0.1

# %%
# Proof: the logits see only each axis's offset
# ---------------------------------------------
# A pair's angle is linear in its owner's position, so a logit depends only on the
# offsets :math:`p_a(n) - p_a(m)` of the three axes: shifting each axis by its own
# constant changes no logit, in either layout. Swapping an image's rows and columns
# does. float64, so that the check sees the identity, not rounding.
q64 = torch.randn(3, 23, 128, dtype=torch.float64)  # (B, L, Dh)
k64 = torch.randn(3, 23, 128, dtype=torch.float64)  # (B, L, Dh)


# %%
def mrope_logits(q, k, pos, owner, base):
    """<rope(q_n), rope(k_m)> for q, k (B, L, Dh) at pos (3, L): (B, L, L)."""
    cos, sin = mrope_cos_sin(pos, owner, q.shape[-1], base, q.dtype)  # (L, Dh) each
    return rope(q, cos, sin) @ rope(k, cos, sin).mT


# %%
swapped = pos_2.clone()
swapped[1:, 4:16] = pos_2[1:, 4:16].flip(0)  # image 1: rows and columns exchanged
assert torch.equal(swapped[[2, 1], 4:16], pos_2[1:, 4:16])
shifted_pos = pos_2 + torch.randint(-1000, 1000, (3, 1))  # (3, L): a shift per axis
for name, owner, real in [("Qwen2-VL", own_2, qwen2_vl_7b),
                          ("Qwen3-VL", own_3, qwen3_vl_8b)]:
    base_logits = mrope_logits(q64, k64, pos_2, owner, real["rope_theta"])  # (B, L, L)
    shifted = mrope_logits(q64, k64, shifted_pos, owner, real["rope_theta"])
    shift_gap = (shifted - base_logits).abs().max().item()
    swap_gap = (mrope_logits(q64, k64, swapped, owner, real["rope_theta"])
                - base_logits).abs().max()
    print(f"{name}: per-axis shift moves logits by {shift_gap:.1e}, "
          f"swapping the image's axes by {swap_gap:.2f}")
    torch.testing.assert_close(shifted, base_logits)
    assert swap_gap > 0.1

# %%
# Try it: give the interleaved layout Qwen2-VL's sections. What does each axis get?
# ---------------------------------------------------------------------------------
# Load ``mrope_section = [16, 24, 24]`` into Qwen3-VL's interleaved code (a Qwen2-VL
# checkpoint in a Qwen3-VL class). Count the pairs of each axis.

# %%
# Every third pair from 1 (and from 2) up to ``3 * 24 = 72`` runs past pair 63: H and
# W each get :measured:`mixed_h` pairs, not 24, and T the rest. Nothing fails; the
# model silently gets other positions. Hugging Face's class does the same.
mixed = interleaved_owner(qwen2_vl_7b["mrope_section"])  # (Dh/2,)
mixed_t, mixed_h, mixed_w = mixed.bincount().tolist()
hf_mixed = modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(Qwen3VLTextConfig(
    rope_parameters={"rope_type": "default", "rope_theta": qwen2_vl_7b["rope_theta"],
                     "mrope_section": qwen2_vl_7b["mrope_section"],
                     "mrope_interleaved": True}))
hf_cos_mixed, _ = hf_mixed(q.cpu(), pos[:, None])  # (B, L, Dh)
cos_mixed, _ = mrope_cos_sin(pos[:, None], mixed, 128, qwen2_vl_7b["rope_theta"])
print(f"interleaved {qwen2_vl_7b['mrope_section']}: pairs per axis T, H, W = "
      f"{[mixed_t, mixed_h, mixed_w]}; max|cos - HF| = "
      f"{(cos_mixed - hf_cos_mixed).abs().max():.1e}")
assert [mixed_t, mixed_h, mixed_w] == [64 - 2 * mixed_h, 21, 21]
torch.testing.assert_close(cos_mixed, hf_cos_mixed)

# %%
# References
# ----------
# :footcite:t:`Su2021`, RoPE; :footcite:t:`Wang2024b`, Qwen2-VL and M-RoPE;
# :footcite:t:`Bai2025`, Qwen3-VL and interleaved M-RoPE; :footcite:t:`Agrawal2024`,
# Pixtral and its 2-D RoPE; :footcite:t:`Heo2024`, axial 2-D RoPE.
#
# .. footbibliography::
