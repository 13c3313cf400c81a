"""
The RoPE scaling family
=======================

A long-context model changes RoPE's frequencies with one line of its config
(``rope_type: "yarn"``, ``factor: 4``). This page writes the five rules in float64 from
their papers and reference code, and proves each equal to Hugging Face's.

**You will learn**

- why ``s * L0`` tokens need slower frequencies, and what "wavelength" means for a pair
- the five rules: Position Interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3
- which wavelengths each rule keeps, stretches by ``s`` or blends
- why every static rule keeps relative positions, and dynamic NTK with a KV cache not

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (RoPE and its
frequencies), :doc:`/generated/transformer/plot_09_kv_cache` (the KV cache).

.. index:: ! YaRN
.. index:: ! NTK-aware scaling
.. index:: ! position interpolation
.. index:: ! RoPE scaling
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
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import transformers
from transformers import LlamaConfig

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The block this page shares with another, copied verbatim: ``rope_inv_freq`` (from
# :doc:`/generated/positional/plot_04_rope`).


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# %%
# The idea
# --------
# Pair :math:`i` turns by :math:`p\,\omega_i` at position :math:`p`
# (:math:`\omega_i = b^{-2i/D_h}`, ``inv_freq``), a wavelength
# :math:`\lambda_i = 2\pi/\omega_i` tokens. A model pretrained on ``L0`` tokens has seen
# the slow pairs turn through part of one period only; at ``s * L0`` tokens they reach
# angles never seen in training. Every rule replaces :math:`\omega_i` by
# :math:`\omega_i'` (stretch :math:`\lambda_i'/\lambda_i = \omega_i/\omega_i'`); YaRN
# and Llama 3 blend "keep" and "interpolate" with a ramp :math:`\gamma_i \in [0, 1]`:
#
# .. math::
#
#    \omega_i' = \frac{\omega_i}{s} \ \text{(PI)}, \qquad
#    b' = b\, s^{D_h/(D_h-2)} \ \text{(NTK)},
#
# .. math::
#
#    \omega_i' = (1 - \gamma_i)\,\frac{\omega_i}{s} + \gamma_i\,\omega_i
#    \ \text{(YaRN, Llama 3)}.
#
# The figure draws these closed forms (the rules below are checked equal to them) for
# ``Dh = 32``, base 10000, ``L0 = 1024``, ``s = 4``: wavelengths from
# :measured:`lam_min:.1f` to :measured:`lam_max:,.0f` tokens, on both sides of every
# threshold below and inside every ramp.
import matplotlib.pyplot as plt

Dh, BASE, L0, S = 32, 10_000.0, 1024, 4.0
BETA_FAST, BETA_SLOW = 32.0, 1.0  # YaRN: turns in L0 tokens
LOW, HIGH = 1.0, 4.0  # Llama 3: low_freq_factor, high_freq_factor
L_LONG = 3000  # past L0: dynamic NTK's length
s_long = S * L_LONG / L0 - (S - 1)  # s(L_LONG)
i = torch.arange(Dh // 2, dtype=torch.float64)  # (Dh/2,) pair index
lam = 2 * math.pi * BASE ** (2 * i / Dh)  # (Dh/2,) wavelengths in tokens
ends = [Dh * math.log(L0 / (2 * math.pi * b)) / (2 * math.log(BASE))
        for b in (BETA_FAST, BETA_SLOW)]  # YaRN's ramp ends, in pair indices
g_yarn = ((math.ceil(ends[1]) - i) / (math.ceil(ends[1]) - math.floor(ends[0])))
g_llama = (L0 / lam - LOW) / (HIGH - LOW)  # (Dh/2,)
stretch_fig = {  # name: lambda' / lambda, (Dh/2,)
    "linear (PI)": S * torch.ones_like(i),
    "NTK-aware": S ** (2 * i / (Dh - 2)),
    "dynamic NTK": s_long ** (2 * i / (Dh - 2)),
    "YaRN": 1 / ((1 - g_yarn.clamp(0, 1)) / S + g_yarn.clamp(0, 1)),
    "Llama 3": 1 / ((1 - g_llama.clamp(0, 1)) / S + g_llama.clamp(0, 1)),
}

fig, ax = plt.subplots(figsize=(7, 3.3))
for name, st in stretch_fig.items():
    label = f"{name} (L = {L_LONG})" if name == "dynamic NTK" else name
    ax.plot(lam, st, marker="o", ms=3, label=label)
marks = ((L0 / BETA_FAST, "L0 / beta_fast"), (L0 / HIGH, "L0 / h"), (L0, "L0"))
for x_at, txt in marks:
    ax.axvline(x_at, color="gray", lw=0.7, ls=":")
    ax.text(x_at, 9.5, f" {txt}", fontsize=7, color="gray", va="top")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_yticks([1, 2, 4, 8], labels=["1", "2", "4 = s", "8"])
ax.minorticks_off()
ax.set_xlabel(r"original wavelength $\lambda_i = 2\pi/\omega_i$ (tokens)")
ax.set_ylabel(r"stretch $\lambda_i'/\lambda_i$")
ax.set_title("Linear stretches every wavelength by s = 4; the others keep the\n"
             "shortest and stretch the longest by s (dynamic NTK: by s(L))")
ax.legend(fontsize=8)
plt.show()

i = i.to(device)  # (Dh/2,) pair index
inv_freq0 = rope_inv_freq(Dh, BASE, torch.float64).to(device)  # (Dh/2,)
lam0 = 2 * math.pi / inv_freq0  # (Dh/2,) wavelengths in tokens
lam_min, lam_max = lam0.min().item(), lam0.max().item()

# %%
# Five rules, from the papers
# ---------------------------
# **Position Interpolation** (:footcite:t:`Chen2023`) runs positions :math:`p/s`, the
# same as :math:`\omega_i/s`: every wavelength :math:`s` times longer.
#
# **NTK-aware** (:footcite:t:`Bloc972023`, on Reddit) changes the base to
# :math:`b\,s^{D_h/(D_h-2)}`: the slowest pair is stretched by exactly :math:`s`, the
# fastest (:math:`\omega_0 = 1`) not at all, the ones between geometrically.
#
# **Dynamic NTK** (Hugging Face's ``"dynamic"``, credited to bloc97 and emozilla) uses
# NTK-aware with the scale :math:`s(L) = s\,L/L_0 - (s - 1)` of the current length
# :math:`L > L_0`, and plain RoPE up to ``L0``.
def position_interpolation(inv_freq, s):
    """Every frequency divided by s: (Dh/2,) -> (Dh/2,)."""
    return inv_freq / s


def ntk_aware(Dh, base, s, device=None):
    """RoPE's frequencies with the base b * s ** (Dh / (Dh - 2)), float64: (Dh/2,)."""
    return rope_inv_freq(Dh, base * s ** (Dh / (Dh - 2)), torch.float64).to(device)


def dynamic_ntk(Dh, base, s, L, L0, device=None):
    """NTK-aware at the scale s(L) = s L / L0 - (s - 1) past L0, plain RoPE up to L0."""
    if L <= L0:
        return rope_inv_freq(Dh, base, torch.float64).to(device)  # RoPE unchanged
    return ntk_aware(Dh, base, s * L / L0 - (s - 1), device)


# %%
# **YaRN** (:footcite:t:`Peng2023`) keeps a pair that turns
# :math:`r_i = L_0/\lambda_i \ge 32` times in ``L0`` tokens, interpolates one with
# :math:`r_i \le 1`, and blends between, :math:`\gamma` linear in the pair index (the
# reference code's ramp, ends rounded outwards; the paper's is linear in :math:`r`). Its
# temperature, :math:`\sqrt{1/t} = 0.1 \ln s + 1`, multiplies cos and sin.
#
# **Llama 3** (``"llama3"``, from Meta's ``apply_scaling`` :footcite:p:`MetaLlama2024`,
# not the paper of :footcite:t:`Dubey2024`) keeps :math:`\lambda_i < L_0/h`, divides by
# :math:`s` past :math:`L_0/l`, and blends between with
# :math:`\gamma_i = (L_0/\lambda_i - l)/(h - l)`.
def yarn(Dh, base, s, L0, beta_fast=32.0, beta_slow=1.0, rounded=True, device=None):
    """(inv_freq (Dh/2,), mscale): the ramp from the reference code, in pair indices."""
    def index_of(turns):  # the (fractional) i where L0 / lambda_i == turns
        return Dh * math.log(L0 / (2 * math.pi * turns)) / (2 * math.log(base))

    inv_freq = rope_inv_freq(Dh, base, torch.float64).to(device)  # (Dh/2,)
    i = torch.arange(Dh // 2, dtype=torch.float64, device=device)  # (Dh/2,)
    lo, hi = index_of(beta_fast), index_of(beta_slow)
    if rounded:  # the reference code rounds the ramp's ends outwards
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, Dh - 1)
    keep = ((hi - i) / (hi - lo)).clamp(0, 1)  # (Dh/2,) gamma: 1 keep, 0 interpolate
    mscale = 0.1 * math.log(s) + 1
    return (1 - keep) * inv_freq / s + keep * inv_freq, mscale


def llama3(Dh, base, s, L0, low=1.0, high=4.0, device=None):
    """Llama 3: keep lambda < L0 / high, divide by s past L0 / low, blend between."""
    out = []
    inv_freq = rope_inv_freq(Dh, base, torch.float64)  # (Dh/2,)
    for f, lam in zip(inv_freq.tolist(), (2 * math.pi / inv_freq).tolist()):
        if lam < L0 / high:
            out.append(f)  # fast pairs: kept
        elif lam > L0 / low:
            out.append(f / s)  # slow pairs: interpolated
        else:
            g = (L0 / lam - low) / (high - low)
            out.append((1 - g) * f / s + g * f)
    return torch.tensor(out, dtype=torch.float64, device=device)  # (Dh/2,)


# %%
# Which wavelengths move
# ----------------------
# Each rule's stretch :math:`\omega_i/\omega_i'` is exactly the figure's closed form
# (YaRN's attention factor is the only one not 1).
yarn_inv_freq, yarn_mscale = yarn(Dh, BASE, S, L0, BETA_FAST, BETA_SLOW, device=device)
OURS = {  # name: (inv_freq (Dh/2,) float64, attention factor)
    "linear (PI)": (position_interpolation(inv_freq0, S), 1.0),
    "NTK-aware": (ntk_aware(Dh, BASE, S, device), 1.0),
    "dynamic NTK": (dynamic_ntk(Dh, BASE, S, L_LONG, L0, device), 1.0),
    "YaRN": (yarn_inv_freq, yarn_mscale),
    "Llama 3": (llama3(Dh, BASE, S, L0, LOW, HIGH, device), 1.0),
}
stretch = {name: inv_freq0 / f for name, (f, _) in OURS.items()}  # (Dh/2,) each
for name, st in stretch.items():
    print(f"{name:12s} stretch {st[0].item():.3f} .. {st[-1].item():.3f}, "
          f"max|rule - closed form| = {(st.cpu() - stretch_fig[name]).abs().max():.1e}")
    torch.testing.assert_close(st.cpu(), stretch_fig[name])  # the figure's closed forms

# %%
# **Dynamic NTK and the KV cache.** A cache stores keys already rotated: with a static
# rule, the keys a full pass computes. With dynamic NTK a key cached at a shorter length
# keeps that length's rotation while later queries get a longer one's, so the logit of
# query :math:`m` and key :math:`n` no longer depends on :math:`m - n` alone (the last
# Proof, on a Hugging Face Llama).

# %%
# Proof: what the rules keep
# --------------------------
#
# At a fixed length, every variant keeps relative positions
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A rule only changes the :math:`\omega_i` (and YaRN a common factor), so with one set
# of frequencies the logit of a query at position :math:`m` and a key at :math:`n`
# still depends on :math:`m - n` alone: for each variant, ``q`` and ``k`` rotated at 48
# positions up to 3995 (well past ``L0``) in the rotate-half layout, with YaRN's factor
# on cos and sin, give the same logits as ``q`` rotated by :math:`m - n` against an
# unrotated ``k`` (float64, its default tolerances). For dynamic NTK that set is the
# one of ``L = 3000``; its frequencies change with the length, and the next section
# shows what that does to a KV cache.
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


def rope_scaled(x, pos, inv_freq, mscale):
    """Rotate-half RoPE with frequencies inv_freq and YaRN's factor on cos and sin.

    x (Dh,), pos (P,), inv_freq (Dh/2,) -> (P, Dh)."""
    angles = pos[:, None].double() * inv_freq[None, :]  # (P, Dh/2)
    emb = torch.cat([angles, angles], dim=-1)  # (P, Dh)
    return rope(x, mscale * emb.cos(), mscale * emb.sin())


# %%
# The vectors are drawn on the CPU from their own generator: every device checks the
# same ones.
gen = torch.Generator().manual_seed(0)
q, k = torch.randn(2, Dh, dtype=torch.float64, generator=gen).to(device)  # (Dh,) each
pos = torch.randint(0, 4000, (48,), generator=gen).to(device)  # (48,)
for name, (f, mscale) in OURS.items():
    logits = rope_scaled(q, pos, f, mscale) @ rope_scaled(k, pos, f, mscale).T
    rel = pos[:, None] - pos[None, :]  # (48, 48) m - n
    by_offset = rope_scaled(q, rel.flatten(), f, mscale) @ (mscale * k)  # (48*48,)
    err = (logits - by_offset.view(48, 48)).abs().max().item()
    print(f"{name:12s} max|logit(m, n) - logit(m - n, 0)| = {err:.1e}")
    torch.testing.assert_close(logits, by_offset.view(48, 48))


# %%
# Which pairs each rule keeps, stretches by s, or blends
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The stretch of each wavelength, :math:`\lambda_i'/\lambda_i = \omega_i/\omega_i'`,
# per rule. Linear divides every frequency by ``s``. NTK-aware keeps the fastest pair
# exactly and stretches the slowest by exactly ``s``; dynamic NTK does the same with
# :math:`s(3000) =` :measured:`s_long:.2f`. YaRN keeps every pair that turns at least
# 32 times in ``L0`` tokens (:math:`\lambda_i \le 32`), interpolates every pair that
# turns at most once (:math:`\lambda_i \ge 1024`) and blends strictly between. Llama 3
# keeps :math:`\lambda_i < 256`, interpolates :math:`\lambda_i > 1024`, blends
# between. The sets are computed from the wavelengths, not from the rules.
print("wavelengths:", " ".join(f"{v:.0f}" for v in lam0.tolist()))
one = torch.ones_like(inv_freq0)
torch.testing.assert_close(stretch["linear (PI)"], S * one)
for name, s in (("NTK-aware", S), ("dynamic NTK", s_long)):
    st = stretch[name]
    print(f"{name:12s} stretch {st[0].item():.3f} (fastest) .. {st[-1].item():.3f} "
          f"(slowest), s = {s:.3f}")
    torch.testing.assert_close(st[[0, -1]], torch.tensor([1.0, s], dtype=st.dtype))
    torch.testing.assert_close(st, s ** (2 * i / (Dh - 2)))  # geometric in i
    assert (st.diff() > 0).all(), "NTK stretch not growing with the wavelength?"
turns = L0 / lam0  # (Dh/2,) r_i
for name, kept, moved in (("YaRN", turns >= BETA_FAST, turns <= BETA_SLOW),
                          ("Llama 3", lam0 < L0 / HIGH, lam0 > L0 / LOW)):
    st = stretch[name]
    blend = ~(kept | moved)
    print(f"{name:12s} kept i = {i[kept].int().tolist()}, blended "
          f"{i[blend].int().tolist()},\n{'':12s} divided by s "
          f"{i[moved].int().tolist()}")
    torch.testing.assert_close(st[kept], one[kept])
    torch.testing.assert_close(st[moved], S * one[moved])
    assert ((st[blend] > 1 + 1e-3) & (st[blend] < S - 1e-3)).all(), "no ramp?"
    assert kept.any() and blend.any() and moved.any(), "a region is empty?"


# %%
# Proof: equal to Hugging Face's rules and modules
# ------------------------------------------------
#
# Every rule equals Hugging Face's
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``ROPE_INIT_FUNCTIONS[rope_type](config, device)`` returns the float32 inverse
# frequencies and the attention scaling of a config (``rope_parameters`` in 5.23). Two
# details of the library: the dynamic rule takes the current length as ``seq_len`` and
# reads ``L0`` from ``max_position_embeddings``, and there is no static NTK-aware type,
# so the static rule is checked through ``"dynamic"`` at the length where
# :math:`s(L) = s`: :math:`L = L_0(2s-1)/s = 1792`. The comparison is relative, at
# float32's default ``rtol`` (1.3e-6, about 11 eps) with ``atol=0``: the library
# computes in float32 (a ``pow`` of a few
# :doc:`ulps </generated/normalization/plot_16_norms_16bit>`, a reciprocal, for YaRN and
# Llama 3 a blend of two such values), ours in float64 rounded once. An absolute
# tolerance would not do: the pairs each rule changes are the slow ones, whose inverse
# frequencies lie below 1e-3, and float32's default ``atol`` of 1e-5 would accept an
# error of :measured:`atol_accepts_min:.0%` to :measured:`atol_accepts_max:.0%` on the
# slowest three of Llama 3's (a check at the end of this section shows it). The
# attention factor is checked at float64's default tolerances: the library computes it
# with Python floats, as we do.
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

F32_RTOL = 1.3e-6  # float32's default rtol: a few roundings of float32 values


# %%
def config(rope_type, max_pos, Dh, base, s, **extra):
    """A small LlamaConfig with these rope parameters (head width Dh, two heads)."""
    params = {"rope_type": rope_type, "rope_theta": base, "factor": s, **extra}
    return LlamaConfig(hidden_size=2 * Dh, num_attention_heads=2,  # Dh = D / Nh
                       max_position_embeddings=max_pos, rope_parameters=params)


# %%
L_STATIC = int(L0 * (2 * S - 1) / S)  # 1792: s(L) = S
CASES = {  # name: (config, seq_len)
    "linear (PI)": (config("linear", int(S * L0), Dh, BASE, S), None),
    "NTK-aware": (config("dynamic", L0, Dh, BASE, S), L_STATIC),
    "dynamic NTK": (config("dynamic", L0, Dh, BASE, S), L_LONG),
    "YaRN": (config("yarn", int(S * L0), Dh, BASE, S,
                    original_max_position_embeddings=L0, beta_fast=BETA_FAST,
                    beta_slow=BETA_SLOW), None),
    "Llama 3": (config("llama3", int(S * L0), Dh, BASE, S,
                       original_max_position_embeddings=L0, low_freq_factor=LOW,
                       high_freq_factor=HIGH), None),
}
for name, (cfg, seq_len) in CASES.items():
    ours, factor = OURS[name]
    rope_type = cfg.rope_parameters["rope_type"]
    ref, ref_factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, device, seq_len=seq_len)
    err = (ours.float().double() / ref.double() - 1).abs().max().item()
    print(f"{name:12s} ({rope_type:7s}) max|ours / HF - 1| = {err:.1e}, "
          f"factor {factor:.4f}, HF's - ours {ref_factor - factor:.0e}")
    torch.testing.assert_close(ours.float(), ref, rtol=F32_RTOL, atol=0)  # relative
    torch.testing.assert_close(torch.tensor(factor, dtype=torch.float64),
                               torch.tensor(ref_factor, dtype=torch.float64))

# %%
# The rounding of the ramp's ends is an option of the library, ``truncate`` (gpt-oss's
# config in transformers sets it to ``False``). Without it the ends are the fractional
# indices themselves; with :math:`\beta_\text{fast} = 256` the fast end falls below
# index 0 (no pair turns 256 times in 1024 tokens) and is clamped there. Our rule
# equals the library's in that setting too.
ours, mscale = yarn(Dh, BASE, S, L0, beta_fast=256.0, beta_slow=2.0, rounded=False,
                    device=device)
cfg = config("yarn", int(S * L0), Dh, BASE, S, original_max_position_embeddings=L0,
             beta_fast=256.0, beta_slow=2.0, truncate=False)
ref, ref_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, device)
err = (ours.float().double() / ref.double() - 1).abs().max().item()
print(f"YaRN, truncate=False: max|ours / HF - 1| = {err:.1e}")
torch.testing.assert_close(ours.float(), ref, rtol=F32_RTOL, atol=0)  # relative
torch.testing.assert_close(mscale, ref_factor)

# %%
# Dynamic NTK through the rotary module
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# In a model the dynamic rule runs inside ``LlamaRotaryEmbedding.forward`` (the rotary
# module of
# :doc:`Llama's decoder layer </generated/transformer/plot_11_llama_decoder_layer>`):
# its ``dynamic_rope_update`` decorator (transformers 5.23) reads the length from the
# largest position id of the call, ``L = max(position_ids) + 1``, taken over the whole
# batch. It recomputes the ``inv_freq`` buffer only when ``L`` exceeds the largest
# length the module has seen, and restores the original frequencies only when a call's
# ``L`` is below ``L0``. So the frequencies a call gets depend on more than its own
# length. Five calls in a row, each checked against our rule at the length it should
# see: 3000 tokens; then 2000 tokens, which keep the frequencies of 3000; 512 tokens,
# plain RoPE again; 2000 tokens alone, now at ``s(2000)``; and the same 2000 tokens
# left-padded in a batch beside a sequence of 3000, at ``s(3000)``. (The cos tables are
# not compared here: a float32 angle ``p * inv_freq`` at ``p = 3000`` is off by about
# :math:`10^{-4}` rad whatever the frequencies, the subject of
# :doc:`RoPE in 16 bits <plot_16_rope_16bit>`.)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

rotary = LlamaRotaryEmbedding(CASES["dynamic NTK"][0]).to(device)
x = torch.empty(0, device=device)  # only its dtype and device are read


# %%
def positions(*lengths, device="cpu"):
    """Left-padded position ids of a batch, (B, max length): 0 at the padding."""
    width = max(lengths)
    return torch.stack([torch.cat([torch.zeros(width - n, dtype=torch.long),
                                   torch.arange(n)]) for n in lengths]).to(device)


# %%
CALLS = (  # (what, position_ids, the length whose frequencies the call gets)
    ("3000 tokens", positions(L_LONG, device=device), L_LONG),
    ("then 2000", positions(2000, device=device), L_LONG),
    ("then 512", positions(512, device=device), 512),
    ("then 2000", positions(2000, device=device), 2000),
    ("2000 beside 3000", positions(2000, L_LONG, device=device), L_LONG),
)
for what, position_ids, L in CALLS:
    rotary(x, position_ids)
    ref = rotary.inv_freq  # (Dh/2,) float32, as the forward left it
    ours = dynamic_ntk(Dh, BASE, S, L, L0, device)  # (Dh/2,)
    err = (ours.float().double() / ref.double() - 1).abs().max().item()
    st = (inv_freq0[-1] / ref[-1].double()).item()
    print(f"{what:16s}: L = {L:4d}, max|ours / HF - 1| = {err:.1e}, slowest "
          f"wavelength x {st:.3f}")
    torch.testing.assert_close(ours.float(), ref, rtol=F32_RTOL, atol=0)  # relative
    torch.testing.assert_close(st, S * max(L, L0) / L0 - (S - 1))

# %%
# YaRN's temperature reaches the logits
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# YaRN's temperature reaches the logits the same way: the library multiplies cos and
# sin by the attention factor, so a query and a key rotated with them have their dot
# product multiplied by its square, :math:`1/t = (0.1 \ln 4 + 1)^2 = 1.296`.
rotary = LlamaRotaryEmbedding(CASES["YaRN"][0]).to(device)
pos = torch.arange(8, device=device)  # (8,)
cos_hf, sin_hf = rotary(x, pos[None])  # (1, 8, Dh) each
angles = pos[:, None].double() * yarn_inv_freq[None, :]  # (8, Dh/2)
emb = torch.cat([angles, angles], dim=-1)  # (8, Dh)
err = max((yarn_mscale * emb.cos()).float().sub(cos_hf[0]).abs().max().item(),
          (yarn_mscale * emb.sin()).float().sub(sin_hf[0]).abs().max().item())
print(f"YaRN: 1/t = mscale^2 = {yarn_mscale ** 2:.4f}; max|mscale cos, sin - HF| = "
      f"{err:.1e}")
torch.testing.assert_close((yarn_mscale * emb.cos()).float(), cos_hf[0])
torch.testing.assert_close((yarn_mscale * emb.sin()).float(), sin_hf[0])

# %%
# DeepSeek-V3's mscale and mscale_all_dim
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# YaRN's factor above is the library's default. With ``mscale`` (:math:`a`) and
# ``mscale_all_dim`` (:math:`a'`) both set, ``_compute_yarn_parameters`` returns the
# ratio :math:`g(s, a) / g(s, a')`, with :math:`g(s, x) = 0.1\,x \ln s + 1`.
# DeepSeek-V3's config sets both to 1 (with factor 40 and ``L0 = 4096``): its factor on
# cos and sin is 1, and its attention multiplies the softmax scale
# :math:`1/\sqrt{D_h}` by :math:`g(40, 1)^2 = (0.1 \ln 40 + 1)^2` instead, on the
# whole head (the channels it leaves unrotated too). Checked on the library's
# function and on a ``DeepseekV3Attention`` built from a small config with those rope
# parameters, and for a ratio that is not 1 (``mscale`` 1, ``mscale_all_dim`` 0.5).
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

DS_S, DS_M = 40.0, 4096  # DeepSeek-V3's factor and original_max_position_embeddings
for mscale, mscale_all_dim in ((1.0, 1.0), (1.0, 0.5)):
    params = {"rope_type": "yarn", "rope_theta": BASE, "factor": DS_S,
              "original_max_position_embeddings": DS_M, "beta_fast": BETA_FAST,
              "beta_slow": BETA_SLOW, "mscale": mscale,
              "mscale_all_dim": mscale_all_dim}
    ds = DeepseekV3Config(  # a small MLA attention: 8 rotated and 16 plain channels
        hidden_size=64, num_attention_heads=2, q_lora_rank=None, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, rope_parameters=params)
    _, ds_factor = ROPE_INIT_FUNCTIONS["yarn"](ds, device)
    ds_scaling = DeepseekV3Attention(ds, layer_idx=0).scaling
    g = 0.1 * mscale * math.log(DS_S) + 1, 0.1 * mscale_all_dim * math.log(DS_S) + 1
    print(f"mscale {mscale}, mscale_all_dim {mscale_all_dim}:\n"
          f"    factor on cos, sin {ds_factor:.6f} "
          f"(g(s, a) / g(s, a') {g[0] / g[1]:.6f})\n"
          f"    softmax scale x sqrt(Dh) {ds_scaling * math.sqrt(16 + 8):.6f} "
          f"(g(s, a')^2 {g[1] ** 2:.6f})")
    torch.testing.assert_close(ds_factor, g[0] / g[1])
    torch.testing.assert_close(ds_scaling, g[1] ** 2 / math.sqrt(16 + 8))
    # far from the default factor g(40, 1): the inputs tell the two formulas apart
    assert abs(ds_factor - (0.1 * math.log(DS_S) + 1)) > 0.1, "the default factor?"

# %%
# Proof: cached decoding under dynamic NTK disagrees with a full pass
# ----------------------------------------------------------------------
# The experiment, on a one-layer ``LlamaForCausalLM`` (``Dh = 32``, random weights
# drawn with ``initializer_range`` 0.1 so that the logits are of order 1) with
# ``max_position_embeddings`` ``L0 = 16`` and factor 4: a prefill of 12 tokens with a
# ``DynamicCache``, then 20 tokens decoded one at a time, to position 31. The logits of
# the cached run are compared with those of one full pass over the same 32 tokens.
# The two runs do the same float32 operations in another order (a row of queries
# against the cache instead of the whole product), so where the model computes the
# same function they agree to float32's rounding: ``assert_close``'s float32
# defaults. The last token is the telling one: its query is rotated with exactly the
# frequencies of the full pass (both at ``L = 32``), and in this one-layer model the
# cached values are the full pass's too (values are not rotated); only the cached
# keys differ.
from transformers import DynamicCache, LlamaForCausalLM

L0_KV, L_KV, PREFILL = 16, 32, 12  # the model's L0, the tokens, the prefill
VOCAB = 64
tokens = torch.randint(0, VOCAB, (1, L_KV), generator=torch.Generator().manual_seed(0))
tokens = tokens.to(device)  # (1, L_KV)
KV_RULES = {  # name: (rope_parameters, max_position_embeddings)
    "plain RoPE": ({"rope_type": "default"}, L0_KV),
    "linear": ({"rope_type": "linear", "factor": S}, int(S * L0_KV)),
    "YaRN": ({"rope_type": "yarn", "factor": S,
              "original_max_position_embeddings": L0_KV}, int(S * L0_KV)),
    "Llama 3": ({"rope_type": "llama3", "factor": S, "low_freq_factor": LOW,
                 "high_freq_factor": HIGH, "original_max_position_embeddings": L0_KV},
                int(S * L0_KV)),
    "dynamic NTK": ({"rope_type": "dynamic", "factor": S}, L0_KV),
}
gap_all, gap_last = {}, {}  # name: max|cached - full| over all logits, last token
for name, (params, max_pos) in KV_RULES.items():
    torch.manual_seed(0)  # the same weights for every rule
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=2 * Dh, intermediate_size=4 * Dh,
        num_hidden_layers=1, num_attention_heads=2, initializer_range=0.1,
        max_position_embeddings=max_pos, rope_parameters={"rope_theta": BASE, **params},
        attn_implementation="eager")).to(device).eval()
    with torch.no_grad():
        full = model(tokens).logits[0]  # (L_KV, vocab)
        cache = DynamicCache(config=model.config)
        steps = [model(tokens[:, :PREFILL], past_key_values=cache).logits[0]]
        for t in range(PREFILL, L_KV):  # one token at a time, positions 12 .. 31
            steps.append(model(tokens[:, t:t + 1], past_key_values=cache).logits[0])
    cached = torch.cat(steps)  # (L_KV, vocab)
    gap_all[name] = (cached - full).abs().max().item()
    gap_last[name] = (cached[-1] - full[-1]).abs().max().item()
    print(f"{name:12s} max|cached - full pass| = {gap_all[name]:.1e} (last token "
          f"{gap_last[name]:.1e}); logits up to {full.abs().max().item():.1f}")
    if name != "dynamic NTK":
        torch.testing.assert_close(cached, full)  # float32 defaults: rounding only
kv_gap_static = max(gap for name, gap in gap_all.items() if name != "dynamic NTK")
kv_gap_dynamic = gap_all["dynamic NTK"]
kv_gap_dynamic_last = gap_last["dynamic NTK"]
# 0.1 is 10^4 times float32's atol: not rounding, at the last token too
assert kv_gap_dynamic > 0.1 and kv_gap_dynamic_last > 0.1, "dynamic NTK cached = full?"

# %%
# What it means for serving: a model configured with ``"dynamic"`` and served with a
# KV cache does not compute the function that one full pass over the same tokens
# computes. In ``transformers`` 5.23 a token's logits depend on how its context was
# split into prefill and decode steps (above), on the longest sequence in its batch
# and on the lengths the rotary module saw before (the five calls in the section on
# the rotary module). The static rules have none of these dependencies. Dynamic NTK
# would keep the full pass's logits only if every cached key were rotated again
# whenever the frequencies change, or if the cache held keys before rotation and
# rotated them at every step.

# %%
# Try it: compare at float32's default ``atol``. What slips through?
# ------------------------------------------------------------------
# Make the three slowest of Llama 3's frequencies 5 % wrong and compare with the
# library's at ``atol=1e-5`` instead of ``atol=0``.

# %%
# The same comparison at float32's default ``atol`` of 1e-5 accepts
# Llama 3's rule with the three slowest pairs' frequencies 5 % off, the pairs the rule
# divides by ``s``; ``atol=0`` rejects it.
ours, _ = OURS["Llama 3"]
ref = ROPE_INIT_FUNCTIONS["llama3"](CASES["Llama 3"][0], device)[0]  # (Dh/2,)
accepts = (1e-5 + F32_RTOL * ref[-3:]) / ref[-3:]  # relative error atol 1e-5 lets by
atol_accepts_min, atol_accepts_max = accepts.min().item(), accepts.max().item()
print(f"atol 1e-5 accepts relative errors of {atol_accepts_min:.0%} to "
      f"{atol_accepts_max:.0%} on the three slowest pairs")
wrong = ours.clone()
wrong[-3:] *= 1.05  # a 5 % slip on the three slowest pairs
print(f"Llama 3, slowest three pairs 5 % off: max|wrong - HF| = "
      f"{(wrong.float() - ref).abs().max():.1e}")
assert torch.allclose(wrong.float(), ref, rtol=F32_RTOL, atol=1e-5), "atol sees it?"
assert not torch.allclose(wrong.float(), ref, rtol=F32_RTOL, atol=0), "rtol misses it?"
assert torch.allclose(ours.float(), ref, rtol=F32_RTOL, atol=0), "the rule fails?"

# %%
# Try it: YaRN's ramp as the paper writes it. Do the frequencies change?
# ----------------------------------------------------------------------
# The paper makes :math:`\gamma` linear in :math:`r_i`; write that ramp and compare its
# frequencies with the code's.

# %%
# The paper's ramp and the code's are not the same function: linear in :math:`r_i`
# against linear in :math:`i`, with the ends rounded outwards. They agree on the pairs
# kept and the pairs interpolated and differ inside the ramp; the library follows the
# code.
gamma_paper = ((turns - BETA_SLOW) / (BETA_FAST - BETA_SLOW)).clamp(0, 1)  # (Dh/2,)
inv_freq_paper = (1 - gamma_paper) * inv_freq0 / S + gamma_paper * inv_freq0
gap = (inv_freq_paper / yarn_inv_freq - 1).abs().max().item()
print(f"YaRN: paper's ramp vs the code's: max relative gap in inv_freq = {gap:.2f}")
assert gap > 0.1, "the two ramps agree?"
ends = (turns >= BETA_FAST) | (turns <= BETA_SLOW)  # (Dh/2,) kept or interpolated
torch.testing.assert_close(inv_freq_paper[ends], yarn_inv_freq[ends])

# %%
# References
# ----------
# :footcite:t:`Chen2023`; :footcite:t:`Bloc972023`; :footcite:t:`Peng2023`;
# Meta's ``apply_scaling`` :footcite:p:`MetaLlama2024`. RoPE: :footcite:t:`Su2021`.
#
# .. footbibliography::
