"""
M-RoPE: one rotary table, three position axes
=============================================

A vision-language model puts image tokens and text tokens in one sequence. Qwen2-VL's
multimodal RoPE (M-RoPE) gives every token three positions, time, row and column, and
lets each frequency pair of a head read one of them; text tokens get the same number
on all three, so for text M-RoPE is 1-D RoPE. This page builds the positions, writes
Qwen2-VL's and Qwen3-VL's two layouts and Pixtral's 2-D RoPE, and proves each equal
to Hugging Face's.

**You will learn**

- how Qwen2-VL numbers text, a merged image and text again with ``(T, H, W)``
  positions, and why the text after an image resumes at the largest position plus one
- how ``mrope_section`` hands each frequency pair to one axis: contiguous blocks
  (Qwen2-VL) against an interleaved pattern (Qwen3-VL)
- why text-only positions make M-RoPE 1-D RoPE, in either layout
- how Pixtral's vision encoder rotates image patches by row and column, the axial RoPE
  of the N-D page in the rotate-half layout

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
from transformers import PixtralVisionConfig, Qwen2VLConfig
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
#    \phi_k(n) = p_{a(k)}(n)\, \omega_k, \qquad
#    a_{\text{Qwen2-VL}}(k) = \begin{cases} T & k < 16 \\ H & 16 \le k < 40 \\
#    W & 40 \le k < 64 \end{cases}, \qquad
#    a_{\text{Qwen3-VL}}(k) = \begin{cases} H & k \bmod 3 = 1,\ k < 60 \\
#    W & k \bmod 3 = 2,\ k < 60 \\ T & \text{otherwise} \end{cases}
#
# If :math:`p_T = p_H = p_W = n`, every pair turns by :math:`n\,\omega_k`, whatever its
# owner: 1-D RoPE. Qwen2-VL (sections ``[16, 24, 24]``) cuts the 64 pairs of a
# ``Dh = 128`` head into three blocks, so the columns of an image get only the slowest
# frequencies; Qwen3-VL (``[24, 20, 20]``, interleaved) deals the same 64 frequencies
# out in turn, so each axis has fast and slow ones.
owner_2 = torch.repeat_interleave(torch.arange(3), torch.tensor([16, 24, 24]))  # (64,)
owner_3 = torch.arange(64) % 3 * (torch.arange(64) < 60)  # (64,): T H W T H W ... T T

fig, ax = plt.subplots(figsize=(9, 2.4), layout="constrained")
colors = ["#4c72b0", "#dd8452", "#55a868"]
ax.imshow(torch.stack([owner_2, owner_3]), cmap=ListedColormap(colors), aspect="auto",
          vmin=0, vmax=2)
ax.grid(False)
ax.set_yticks([0, 1], ["Qwen2-VL\n[16, 24, 24]", "Qwen3-VL\n[24, 20, 20]\ninterleaved"])
ax.set_xlabel("frequency pair k of a Dh = 128 head (k = 0 fastest, k = 63 slowest)")
ax.set_title("Same 64 frequencies, two owners: Qwen2-VL gives the columns (W) only\n"
             "the slowest 24; Qwen3-VL gives each axis fast and slow pairs")
fig.legend(handles=[Patch(color=c, label=f"axis {a}") for c, a in zip(colors, "THW")],
           loc="outside right center")
plt.show()

# %%
# Positions: text, an image, text
# -------------------------------
# An image of ``H x W`` patches (``T = 1`` for a still image) reaches the language
# model as ``H/m x W/m`` tokens, each merging ``m x m`` patches (Qwen2-VL:
# ``spatial_merge_size = 2``); a segment is ``("text", n)`` or ``("image", (T, H,
# W))`` in patches.


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
last_pos = pos[:, -1].max().item()
assert pos[:, 3:7].tolist() == [[3, 3, 3, 3], [3, 3, 4, 4], [3, 4, 3, 4]]
assert pos[:, 7].tolist() == [pos[:, :7].max().item() + 1] * 3 and last_pos == 6

# %%
# Hugging Face builds them in ``Qwen2VLModel.get_rope_index``, a method that reads
# only ``config.vision_config.spatial_merge_size`` and ``get_vision_position_ids``: a
# bare object with those two attributes calls it, no model built. It marks each token
# text (0) or image (1) and takes the image's ``grid_thw`` in patches.


class RopeIndexHost:
    """What Qwen2VLModel.get_rope_index reads from `self`: config, one method."""

    config = Qwen2VLConfig(vision_config={"spatial_merge_size": 2})
    get_vision_position_ids = modeling_qwen2_vl.Qwen2VLModel.get_vision_position_ids


def hf_rope_index(segments):
    """Qwen2VLModel.get_rope_index of one sequence of segments: (3, L), rope delta."""
    kinds = [int(kind == "image") for kind, size in segments
             for _ in range(size if kind == "text" else size[0] * size[1] * size[2] // 4)]
    grids = [size for kind, size in segments if kind == "image"]
    types = torch.tensor([kinds])  # (1, L): 0 text, 1 image
    ids, delta = modeling_qwen2_vl.Qwen2VLModel.get_rope_index(
        RopeIndexHost(), torch.zeros_like(types), types, torch.tensor(grids))
    return ids[:, 0], delta.item()  # (3, L), max position + 1 - L


hf_pos, hf_delta = hf_rope_index(segments)
print(f"max|ours - get_rope_index| = {(pos - hf_pos).abs().max().item()}; "
      f"rope delta {hf_delta} = max + 1 - L = {pos.max().item() + 1 - pos.shape[1]}")
assert torch.equal(pos, hf_pos)
assert hf_delta == pos.max().item() + 1 - pos.shape[1]

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
    """Qwen3-VL: pair a + Nc m (m < sections[a]) to axis a >= 1, others to 0: (Dh/2,)."""
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
# The owners are those of the figure, with the sections' counts:
own_2, own_3 = contiguous_owner([16, 24, 24]), interleaved_owner([24, 20, 20])
print(f"pairs per axis T, H, W: Qwen2-VL {own_2.bincount().tolist()}, "
      f"Qwen3-VL {own_3.bincount().tolist()}; Qwen3-VL starts {own_3[:7].tolist()}")
assert torch.equal(own_2, owner_2) and torch.equal(own_3, owner_3)
assert own_3.bincount().tolist() == [24, 20, 20]

# %%
# Text alone (``T = H = W``): both layouts are 1-D RoPE, bit for bit. Qwen2-VL's real
# head (``Dh = 128``, base :math:`10^6`; the config below), positions up to 4095.
text_pos = torch.arange(4096, device=device).expand(3, 4096)  # (3, L), T = H = W
cos_1d, sin_1d = rope_cos_sin(text_pos[0], 128, 1e6)  # (L, Dh) each
for name, owner in [("Qwen2-VL", own_2), ("Qwen3-VL", own_3)]:
    cos_m, sin_m = mrope_cos_sin(text_pos, owner, 128, 1e6)  # (L, Dh) each
    print(f"{name}, text only: max|M-RoPE - 1-D RoPE| = "
          f"{(cos_m - cos_1d).abs().max().item():.1e} (cos), "
          f"{(sin_m - sin_1d).abs().max().item():.1e} (sin)")
    assert torch.equal(cos_m, cos_1d) and torch.equal(sin_m, sin_1d)

# %%
# On the image tokens the two layouts differ. With the real configs (below), the
# fastest pair the column axis owns turns across a row of 32 image tokens (an image of
# 896 pixels: 14-pixel patches, merged 2 x 2) by :measured:`w_sweep_2:.4f` rad in
# Qwen2-VL and :measured:`w_sweep_3:.1f` rad in Qwen3-VL: Qwen2-VL tells columns apart
# only by small angles.
qwen2_vl_7b = {"head_dim": 3584 // 28, "rope_theta": 1e6,  # Qwen/Qwen2-VL-7B-Instruct
               "mrope_section": [16, 24, 24]}               # config.json
qwen3_vl_8b = {"head_dim": 128, "rope_theta": 5e6,          # Qwen/Qwen3-VL-8B-Instruct
               "mrope_section": [24, 20, 20], "mrope_interleaved": True}  # config.json
inv_2 = rope_inv_freq(qwen2_vl_7b["head_dim"], qwen2_vl_7b["rope_theta"])  # (64,)
inv_3 = rope_inv_freq(qwen3_vl_8b["head_dim"], qwen3_vl_8b["rope_theta"])  # (64,)
w_sweep_2 = 31 * inv_2[own_2 == 2].max().item()  # columns 0 .. 31
w_sweep_3 = 31 * inv_3[own_3 == 2].max().item()
print(f"fastest W pair over 32 columns: Qwen2-VL {w_sweep_2:.4f} rad (pair "
      f"{(own_2 == 2).nonzero()[0].item()}), Qwen3-VL {w_sweep_3:.1f} rad (pair "
      f"{(own_3 == 2).nonzero()[0].item()})")
assert w_sweep_2 < 0.01 and w_sweep_3 > 6.3  # less than a degree; more than a turn

# %%
# Hugging Face's rotary embeddings, ``Qwen2VLRotaryEmbedding`` and
# ``Qwen3VLTextRotaryEmbedding``, built from the real rope parameters on a head of
# ``Dh = 128``, give the same ``cos`` and ``sin`` for the nine tokens above, and their
# ``apply_rotary_pos_emb`` rotates queries as ``rope`` does.
cfg_2 = Qwen2VLConfig(text_config={
    "hidden_size": 256, "num_attention_heads": 2, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}})
cfg_3 = Qwen3VLTextConfig(hidden_size=256, num_attention_heads=2, head_dim=128,
                          rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                           "mrope_section": [24, 20, 20],
                                           "mrope_interleaved": True})
hf_rot_2 = modeling_qwen2_vl.Qwen2VLRotaryEmbedding(cfg_2.text_config).to(device)
hf_rot_3 = modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(cfg_3).to(device)
q = torch.randn(1, 2, pos.shape[1], 128, device=device)  # (B, Nh, L, Dh)
pos_d = pos.to(device)  # (3, L)
for name, hf_rot, hf_mod, owner, base in [
        ("Qwen2-VL", hf_rot_2, modeling_qwen2_vl, own_2, 1e6),
        ("Qwen3-VL", hf_rot_3, modeling_qwen3_vl, own_3, 5e6)]:
    cos, sin = mrope_cos_sin(pos_d, owner, 128, base)  # (L, Dh) each
    hf_cos, hf_sin = hf_rot(q, pos_d[:, None])  # (B, L, Dh) each, positions (3, B, L)
    hf_q, _ = hf_mod.apply_rotary_pos_emb(q, q, hf_cos, hf_sin)  # (B, Nh, L, Dh)
    print(f"{name}: max|cos - HF| = {(cos - hf_cos[0]).abs().max().item():.1e}, "
          f"max|rope(q) - HF| = {(rope(q, cos, sin) - hf_q).abs().max().item():.1e}")
    torch.testing.assert_close(torch.stack([cos, sin]), torch.stack([hf_cos, hf_sin])[:, 0])
    torch.testing.assert_close(rope(q, cos, sin), hf_q)
