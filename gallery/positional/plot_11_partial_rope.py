"""
Partial RoPE
============

GPT-NeoX (``rotary_pct = 0.25``) and Phi (``partial_rotary_factor = 0.5``) rotate only
the first ``R = int(Dh * factor)`` channels of each query and key head, in the
rotate-half layout within those ``R`` channels, with frequencies spread over ``R``
instead of ``Dh``; the other ``Dh - R`` channels pass through unchanged. This page
writes partial RoPE from scratch, proves its ``cos``/``sin``, its rotated queries and
keys and a whole attention layer equal to Hugging Face's GPT-NeoX and Phi, and proves
what the split does to a logit: the unrotated channels contribute the plain dot
product, whatever the positions, and the rotated channels a term that depends only
on the relative position ``m - n``.
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
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import transformers
from transformers import GPTNeoXConfig, PhiConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    GPTNeoXAttention,
    GPTNeoXRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.models.phi.modeling_phi import PhiAttention, PhiRotaryEmbedding

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# Partial RoPE from scratch
# -------------------------
# With the book's notation (:doc:`/generated/positional/plot_04_rope`), a head vector
# ``x`` of width ``Dh`` at position ``p`` is split into ``x[:R]`` and ``x[R:]``. The
# first part is turned by rotate-half RoPE of width ``R``: channel ``i`` pairs with
# ``i + R/2`` and turns by ``p * theta_i``, ``theta_i = base ** (-2i / R)``, so the
# slowest pair turns at ``base ** (-(R-2)/R)``, not ``base ** (-(Dh-2)/Dh)``. The
# second part is copied. The frequencies and angles are computed in float32, in the
# order of GPT-NeoX's own code, ``1 / base ** (2i / R)``: at positions near 2000 a
# frequency one float32 step off moves ``cos`` by about 1.5e-5, more than float32's
# default tolerance (:doc:`/generated/positional/plot_08_rope_16bit` says why angles
# are computed in float32 at all).
import math


def partial_cos_sin(pos, Dh, factor, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, R), R = int(Dh * factor): rotate-half."""
    R = int(Dh * factor)  # rotary_dim: the channels that turn
    two_i = torch.arange(0, R, 2, device=pos.device)  # 0, 2, .., R - 2
    theta = 1.0 / base ** (two_i.to(dtype) / R)  # (R/2,), as GPT-NeoX's code
    angles = pos[..., None].to(dtype) * theta  # (..., L, R/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, R): channels i and i + R/2
    return angles.cos(), angles.sin()


def partial_rope(x, cos, sin):
    """x (B, N, L, Dh), cos, sin (B, L, R) -> (B, N, L, Dh): turn x[:R], copy x[R:]."""
    R = cos.shape[-1]
    x_rot, x_pass = x[..., :R], x[..., R:]  # (B, N, L, R), (B, N, L, Dh - R)
    x1, x2 = x_rot.chunk(2, dim=-1)  # (B, N, L, R/2) each: pair i is (i, i + R/2)
    turned = x_rot * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]
    return torch.cat([turned, x_pass], dim=-1)


# %%
# GPT-NeoX: rotary_pct = 0.25
# ---------------------------
# GPT-NeoX-20B (Black et al., 2022) has ``Dh = 96`` and rotates 24 channels. Its
# config takes the old names ``rotary_pct`` and ``rotary_emb_base``, which
# ``transformers`` 5.23 moves into ``rope_parameters`` (printed). Here ``D = 96``,
# ``Nh = 4``, so ``Dh = 24`` and ``R = 6``; the base is 1000, not the default 10000,
# so that a hard-coded base fails. Positions are uneven and reach 2000, so that every
# frequency has turned through several periods.
V, D, Nh = 100, 96, 4
Dh = D // Nh
BASE = 1000.0
cfg_neox = GPTNeoXConfig(
    vocab_size=V, hidden_size=D, num_attention_heads=Nh, num_hidden_layers=2,
    intermediate_size=128, rotary_pct=0.25, rotary_emb_base=BASE,
    attn_implementation="eager",
)
print("GPT-NeoX:",
      ", ".join(f"{k}={v}" for k, v in cfg_neox.rope_parameters.items()))
FACTOR = cfg_neox.rope_parameters["partial_rotary_factor"]
assert FACTOR == 0.25 and cfg_neox.rope_parameters["rope_theta"] == BASE

B, L = 2, 10
pos = torch.stack([torch.arange(L) * 7 + 3,
                   torch.sort(torch.randperm(2000)[:L]).values]).to(device)  # (B, L)
print("positions, row 0:", pos[0].tolist())
print("positions, row 1:", pos[1].tolist())

rotary_neox = GPTNeoXRotaryEmbedding(cfg_neox).to(device)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
cos_hf, sin_hf = rotary_neox(x, pos)  # (B, L, R) each
cos, sin = partial_cos_sin(pos, Dh, FACTOR, BASE)  # (B, L, R) each
R = cos.shape[-1]
print(f"Dh = {Dh}, R = int(Dh * {FACTOR}) = {R}; cos, sin {tuple(cos.shape)}")
print(f"max |ours - GPTNeoXRotaryEmbedding|: cos {(cos - cos_hf).abs().max():.1e}, "
      f"sin {(sin - sin_hf).abs().max():.1e}")
torch.testing.assert_close(cos, cos_hf)
torch.testing.assert_close(sin, sin_hf)

# %%
# The frequencies are spread over the ``R`` rotated channels, down to
# ``base ** (-(R-2)/R)``. A port that took the first ``R/2`` frequencies of full
# RoPE's table (spread over ``Dh``) would keep only its fastest pairs, down to
# ``base ** (-(R-2)/Dh)``, and turn them by other angles:
theta_R = BASE ** (-torch.arange(0, R, 2) / R)
theta_Dh = BASE ** (-torch.arange(0, R, 2) / Dh)
print(f"theta over R:  {[round(t, 4) for t in theta_R.tolist()]}")
print(f"theta over Dh: {[round(t, 4) for t in theta_Dh.tolist()]}")
cos_full, sin_full = partial_cos_sin(pos, Dh, 1.0, BASE)  # (B, L, Dh): full RoPE
assert cos_full.shape[-1] == Dh  # factor 1: every channel turns
cos_sliced = torch.cat([cos_full[..., :R // 2]] * 2, dim=-1)  # (B, L, R)
gap_Dh = (cos_sliced - cos_hf).abs().max().item()
print(f"full RoPE's first R/2 frequencies: max |cos - HF's| = {gap_Dh:.2f}")
assert gap_Dh > 0.5  # printed above: the denominator of the exponent is R

# %%
# The rotated queries and keys, against ``apply_rotary_pos_emb`` of GPT-NeoX (which
# itself slices ``q[..., :R]`` off and concatenates the rest back). ``Nh`` heads of
# random queries and keys, ``(B, Nh, L, Dh)``:
q = torch.randn(B, Nh, L, Dh, device=device)  # (B, Nh, L, Dh)
k = torch.randn(B, Nh, L, Dh, device=device)
q_hf, k_hf = apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
q_ours, k_ours = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
print(f"max |ours - apply_rotary_pos_emb|: q {(q_ours - q_hf).abs().max():.1e}, "
      f"k {(k_ours - k_hf).abs().max():.1e}")
torch.testing.assert_close(q_ours, q_hf)
torch.testing.assert_close(k_ours, k_hf)
moved = (q_ours[..., :R] - q[..., :R]).abs().max().item()
print(f"channels [:R] moved by up to {moved:.2f}; channels [R:] equal to the input: "
      f"{torch.equal(q_ours[..., R:], q[..., R:])}")
assert moved > 0.5  # printed above: the first R channels do turn
assert torch.equal(q_ours[..., R:], q[..., R:])  # bit for bit: copied, not computed

# %%
# A whole attention layer
# -----------------------
# GPT-NeoX projects ``x`` with one fused ``query_key_value`` linear whose output, per
# head, lays out ``q``, ``k`` and ``v`` next to each other (``(B, L, Nh, 3 Dh)``,
# then split in three): a layout unlike Llama's separate projections. Then partial
# RoPE, causal attention scaled by ``1 / sqrt(Dh)`` (the full head width, not ``R``)
# and the output projection ``dense``. Our weights are drawn at random and loaded
# into ``GPTNeoXAttention`` through the printed name map; the eager path is the
# reference, and it adds the additive causal mask it is given.
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
causal = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))  # (L, L)


def attend(q, k, v, cos, sin):
    """Partial RoPE on q, k; causal softmax attention. (B, Nh, L, Dh) -> (B, L, D)."""
    q, k = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + causal  # (B, Nh, L, L)
    out = scores.softmax(dim=-1) @ v  # (B, Nh, L, Dh)
    return out.transpose(1, 2).flatten(2)  # (B, L, Nh * Dh)


def neox_attention(x, W, cos, sin):
    """GPT-NeoX attention from the weights W. x (B, L, D) -> (B, L, D)."""
    qkv = x @ W["qkv_w"].T + W["qkv_b"]  # (B, L, 3D)
    qkv = qkv.unflatten(-1, (Nh, 3 * Dh)).transpose(1, 2)  # (B, Nh, L, 3 Dh): per head
    q, k, v = qkv.split(Dh, dim=-1)  # (B, Nh, L, Dh) each
    return attend(q, k, v, cos, sin) @ W["out_w"].T + W["out_b"]


W_neox = {"qkv_w": torch.randn(3 * D, D) / math.sqrt(D), "qkv_b": torch.randn(3 * D),
          "out_w": torch.randn(D, D) / math.sqrt(D), "out_b": torch.randn(D)}
W_neox = {name: w.to(device) for name, w in W_neox.items()}
NAMES_NEOX = {"qkv_w": "query_key_value.weight", "qkv_b": "query_key_value.bias",
              "out_w": "dense.weight", "out_b": "dense.bias"}


def load_ours(module, names, W):
    """Our weights W into a Hugging Face attention module, by the name map `names`
    (strict: a name missing on either side fails). Prints the map."""
    print(f"ours -> {type(module).__name__}:")
    for ours_name, hf_name in names.items():
        print(f"  {ours_name:6s} -> {hf_name}")
    module.load_state_dict({names[n]: w for n, w in W.items()}, strict=True)
    assert module.config._attn_implementation == "eager"
    return module.to(device).eval()


attn_neox = load_ours(GPTNeoXAttention(cfg_neox, layer_idx=0), NAMES_NEOX, W_neox)

mask_hf = torch.full((L, L), torch.finfo(torch.float32).min, device=device).triu(1)
with torch.no_grad():
    ref, _ = attn_neox(x, attention_mask=mask_hf[None, None],
                       position_embeddings=(cos_hf, sin_hf))
ours = neox_attention(x, W_neox, cos, sin)  # (B, L, D)
print(f"GPTNeoXAttention: max |ours - HF| = {(ours - ref).abs().max():.1e}")
torch.testing.assert_close(ours, ref)

# %%
# The same layer with full RoPE (``R = Dh``) or with no RoPE is another function:
gap_full = (neox_attention(x, W_neox, cos_full, sin_full) - ref).abs().max().item()
cos_none = torch.ones(B, L, 0, device=device)  # R = 0: nothing turns
gap_none = (neox_attention(x, W_neox, cos_none, cos_none) - ref).abs().max().item()
print(f"max |output - HF's|: with full RoPE {gap_full:.2f}, without RoPE "
      f"{gap_none:.2f}")
assert gap_full > 0.1 and gap_none > 0.1  # printed above

# %%
# Phi: partial_rotary_factor = 0.5
# --------------------------------
# Phi-1 (Gunasekar et al., 2023) rotates 32 of the 64 channels of each head.
# ``PhiAttention`` has separate ``q_proj``, ``k_proj``, ``v_proj`` (with biases) and
# slices the rotated channels itself before calling rotate-half RoPE. Here ``D = 64``,
# ``Nh = 4``, ``Dh = 16``, ``R = 8``, base 1000. ``PhiConfig`` takes
# ``partial_rotary_factor`` directly and moves it into ``rope_parameters``.
D_phi, FACTOR_phi = 64, 0.5
Dh_phi = D_phi // Nh
cfg_phi = PhiConfig(
    vocab_size=V, hidden_size=D_phi, num_attention_heads=Nh, num_hidden_layers=2,
    intermediate_size=128, partial_rotary_factor=FACTOR_phi,
    rope_parameters={"rope_type": "default", "rope_theta": BASE},
    attn_implementation="eager",
)
print("Phi:",
      ", ".join(f"{k}={v}" for k, v in cfg_phi.rope_parameters.items()))
assert cfg_phi.rope_parameters["partial_rotary_factor"] == FACTOR_phi

x_phi = torch.randn(B, L, D_phi, device=device)  # (B, L, D)
cos_phi_hf, sin_phi_hf = PhiRotaryEmbedding(cfg_phi).to(device)(x_phi, pos)
cos_phi, sin_phi = partial_cos_sin(pos, Dh_phi, FACTOR_phi, BASE)  # (B, L, R)
print(f"Dh = {Dh_phi}, R = {cos_phi.shape[-1]}: max |ours - PhiRotaryEmbedding| = "
      f"{(cos_phi - cos_phi_hf).abs().max():.1e}, "
      f"{(sin_phi - sin_phi_hf).abs().max():.1e}")
torch.testing.assert_close(cos_phi, cos_phi_hf)
torch.testing.assert_close(sin_phi, sin_phi_hf)


def phi_attention(x, W, cos, sin):
    """Phi attention from the weights W. x (B, L, D) -> (B, L, D)."""
    def heads(t):  # (B, L, D) -> (B, Nh, L, Dh)
        return t.unflatten(-1, (Nh, -1)).transpose(1, 2)
    q, k, v = (heads(x @ W[f"{n}_w"].T + W[f"{n}_b"]) for n in "qkv")
    return attend(q, k, v, cos, sin) @ W["out_w"].T + W["out_b"]


W_phi = {f"{n}_{p}": (torch.randn(D_phi, D_phi) / math.sqrt(D_phi) if p == "w"
                      else torch.randn(D_phi)).to(device)
         for n in ["q", "k", "v", "out"] for p in "wb"}
NAMES_PHI = {f"{n}_{p}": f"{n}_proj.{'weight' if p == 'w' else 'bias'}"
             for n in "qkv" for p in "wb"}
NAMES_PHI |= {"out_w": "dense.weight", "out_b": "dense.bias"}
attn_phi = load_ours(PhiAttention(cfg_phi, layer_idx=0), NAMES_PHI, W_phi)
with torch.no_grad():
    ref_phi, _ = attn_phi(x_phi, (cos_phi_hf, sin_phi_hf), mask_hf[None, None])
ours_phi = phi_attention(x_phi, W_phi, cos_phi, sin_phi)  # (B, L, D)
print(f"PhiAttention: max |ours - HF| = {(ours_phi - ref_phi).abs().max():.1e}")
torch.testing.assert_close(ours_phi, ref_phi)

# %%
# A logit in two parts
# --------------------
# The logit of a query at position ``m`` and a key at position ``n`` splits along the
# channels: ``q_m . k_n = rot(q[:R], m) . rot(k[:R], n) + q[R:] . k[R:]``. The second
# term never sees a position. The first is RoPE's (Su et al., 2021): a product of
# two rotations, ``q[:R]^T R_(n-m) k[:R]``, which depends on ``m - n`` only. Both are
# asserted on our partial RoPE (proved equal to Hugging Face's above), for one head
# of GPT-NeoX-20B's shape, ``Dh = 96``, ``rotary_pct = 0.25``, base 10000, in float64
# so that positions near 5000 keep their angles exact to ~1e-12 (in float32 the
# angle's rounding, ~2e-4 rad there, would show at default tolerances).
Dh_20b, FACTOR_20b = 96, 0.25
R_20b = int(Dh_20b * FACTOR_20b)  # 24
q1 = torch.randn(Dh_20b, dtype=torch.float64, device=device)  # (Dh,)
k1 = q1 + 0.5 * torch.randn(Dh_20b, dtype=torch.float64, device=device)  # near q1


def at_positions(x, p):
    """One head vector x (Dh,) under partial RoPE at the positions p (P,) -> (P, Dh)."""
    c, s = partial_cos_sin(p[None], Dh_20b, FACTOR_20b, 10000.0, torch.float64)
    return partial_rope(x.expand(1, 1, len(p), -1), c, s)[0, 0]  # (P, Dh)


def logit_parts(m, n):
    """The rotated and the unrotated part of the logit for positions m, n (P,)."""
    qm, kn = at_positions(q1, m), at_positions(k1, n)  # (P, Dh)
    return ((qm[:, :R_20b] * kn[:, :R_20b]).sum(-1),
            (qm[:, R_20b:] * kn[:, R_20b:]).sum(-1))


m = torch.randint(0, 4096, (64,), device=device)  # (P,) query positions
n = torch.randint(0, 4096, (64,), device=device)  # (P,) key positions
shift = 977
rot, unrot = logit_parts(m, n)
rot_shifted, unrot_shifted = logit_parts(m + shift, n + shift)
plain = (q1[R_20b:] * k1[R_20b:]).sum()  # the dot product without any position
print(f"unrotated part: spread over 64 position pairs {unrot.max() - unrot.min():.1e}, "
      f"max |part - plain dot| = {(unrot - plain).abs().max():.1e}")
torch.testing.assert_close(unrot, plain.expand(64))
torch.testing.assert_close(unrot_shifted, unrot)
rot_spread = (rot.max() - rot.min()).item()
print(f"rotated part: spread {rot_spread:.2f}; shifting both by {shift}: "
      f"max |change| = {(rot_shifted - rot).abs().max():.1e}")
torch.testing.assert_close(rot_shifted, rot)
# the spread is the largest difference between two of the 64 position pairs
torch.testing.assert_close(rot_spread, (rot[:, None] - rot[None, :]).abs().max().item())
assert rot_spread > 1.0  # printed above: it does depend on m - n
plain_rot = (q1[:R_20b] * k1[:R_20b]).sum()
gap_rot = (rot - plain_rot).abs().max().item()
print(f"rotated part vs its dot product without positions: max |diff| = {gap_rot:.2f}")
assert gap_rot > 1.0  # printed above: the first R channels do carry position

# %%
# The figure: a query at position ``1000 + r`` against a key at ``1000``, for
# distances ``r = 0 .. 512``. The unrotated 72 channels add a constant; everything the
# logit knows about distance comes from the first 24.
import matplotlib.pyplot as plt

r = torch.arange(0, 513, device=device)  # (P,) relative distances
rot_r, unrot_r = logit_parts(1000 + r, torch.full_like(r, 1000))
fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
ax.plot(r.cpu(), (rot_r + unrot_r).cpu(), color="0.6", lw=1, label="whole logit")
ax.plot(r.cpu(), rot_r.cpu(), label=f"rotated channels [:{R_20b}]")
ax.plot(r.cpu(), unrot_r.cpu(), label=f"unrotated channels [{R_20b}:]")
ax.set_xlabel("relative distance m - n (positions)")
ax.set_ylabel("contribution to q . k")
ax.set_title("Partial RoPE: only the rotated quarter of the logit moves with distance")
ax.set_ylim(top=1.3 * (rot_r + unrot_r).max().item())  # room for the legend
ax.legend(fontsize=8, ncols=3, loc="upper center")
plt.show()
