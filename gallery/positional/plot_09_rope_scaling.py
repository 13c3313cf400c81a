"""
The RoPE scaling family
=======================

A long-context model changes RoPE's frequencies with one line of its config
(``rope_type: "linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``, ``factor: 4``). This
page writes the five rules from their papers and reference code, from scratch in
float64: Position Interpolation, the NTK-aware base change, dynamic NTK, YaRN with its
attention temperature, and Llama 3's frequency-dependent scaling. It proves each equal
to Hugging Face's inverse frequencies and attention scaling for the same config
(dynamic NTK also through the rotary module, past and back below the original
length), shows which wavelengths each rule stretches and which it keeps, and proves
that every variant keeps RoPE's relative-position property.
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
from transformers import LlamaConfig

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The unscaled frequencies and the setting
# ----------------------------------------
# RoPE (:doc:`page 04 <plot_04_rope>`) turns pair :math:`i` at position :math:`p` by
# :math:`p\,\theta_i`, :math:`\theta_i = b^{-2i/D_h}`, a wavelength
# :math:`\lambda_i = 2\pi/\theta_i` tokens. A model pretrained on ``M`` tokens has seen
# every pair with :math:`\lambda_i < M` turn through whole periods and the slow pairs
# only through part of one; at ``s * M`` tokens the slow pairs reach angles never seen
# in training. Every rule below changes :math:`\theta_i` (and YaRN also the logits'
# scale) so that ``s * M`` tokens look like ``M``. The setting is small but keeps every
# term alive: ``Dh = 32`` (16 frequencies), base 10000, ``M = 1024``, ``s = 4``; the
# wavelengths run from 6.3 to 35,000 tokens, so they lie on both sides of every
# threshold below and inside every ramp.
import math

Dh, BASE, M, S = 32, 10_000.0, 1024, 4.0
i = torch.arange(Dh // 2, dtype=torch.float64, device=device)  # (Dh/2,) pair index


def theta(base):
    """RoFormer's theta_i = base ** (-2i / Dh), float64: (Dh/2,)."""
    return base ** (-2 * i / Dh)


theta0 = theta(BASE)  # (Dh/2,)
lam0 = 2 * math.pi / theta0  # (Dh/2,) wavelengths in tokens
print("wavelengths:", " ".join(f"{v:.0f}" for v in lam0.tolist()))

# %%
# Five rules, from the papers
# ---------------------------
# **Position Interpolation** (Chen et al., 2023) runs positions :math:`p/s`, the same
# as :math:`\theta_i/s`: every wavelength :math:`s` times longer.
#
# **NTK-aware** (bloc97, 2023, on Reddit) changes the base instead:
# :math:`b' = b\,s^{D_h/(D_h-2)}`, chosen so that the slowest pair
# (:math:`i = D_h/2-1`) is interpolated by exactly :math:`s` while the fastest
# (:math:`\theta_0 = 1` for any base) is left alone; between them the stretch
# :math:`s^{2i/(D_h-2)}` grows geometrically.
#
# **Dynamic NTK** (Hugging Face's ``"dynamic"``, whose code credits the Reddit users
# bloc97 and emozilla) applies the NTK-aware base with a scale read off the current
# length ``L``: :math:`s(L) = s\,L/M - (s - 1)` for :math:`L > M`, and no change up to
# ``M`` (:math:`s(M) = 1`, so the rule is continuous).
def position_interpolation(s):
    return theta0 / s  # (Dh/2,)


def ntk_aware(s):
    return theta(BASE * s ** (Dh / (Dh - 2)))  # (Dh/2,)


def dynamic_ntk(s, L):
    if L <= M:
        return theta0  # within the pretrained length: RoPE unchanged
    return ntk_aware(s * L / M - (s - 1))


# %%
# **YaRN** (Peng et al., 2023) counts how many turns pair :math:`i` makes in the
# pretrained context, :math:`r_i = M/\lambda_i`. A pair with
# :math:`r_i \ge \beta_\text{fast}` (32) turns often enough to extrapolate and is
# kept; a pair with :math:`r_i \le \beta_\text{slow}` (1) is interpolated,
# :math:`\theta_i/s`; between, the two are blended,
# :math:`(1-\gamma_i)\,\theta_i/s + \gamma_i\,\theta_i`. The paper writes
# :math:`\gamma` linear in :math:`r`; its reference code (and Hugging Face) makes it
# linear in the pair index instead, between the index where
# :math:`r = \beta_\text{fast}` rounded down and the index where
# :math:`r = \beta_\text{slow}` rounded up, and that is the rule written here. YaRN
# also divides the logits by a temperature :math:`t` with
# :math:`\sqrt{1/t} = 0.1 \ln s + 1`, applied as a factor on both cos and sin.
#
# **Llama 3** (the rule of Llama 3.1, Dubey et al., 2024, as ``"llama3"``) is the
# same idea with thresholds in wavelengths: keep :math:`\lambda_i < M/h`
# (``high_freq_factor`` :math:`h`), divide by :math:`s` when :math:`\lambda_i > M/l`
# (``low_freq_factor`` :math:`l`), and between them blend with
# :math:`\gamma_i = (M/\lambda_i - l)/(h - l)`, linear in :math:`r_i`.
BETA_FAST, BETA_SLOW = 32.0, 1.0
LOW, HIGH = 1.0, 4.0


def yarn(s, beta_fast=BETA_FAST, beta_slow=BETA_SLOW, rounded=True):
    """(theta (Dh/2,), mscale): the ramp from the reference code, in pair indices."""
    def index_of(turns):  # the (fractional) i where M / lambda_i == turns
        return Dh * math.log(M / (2 * math.pi * turns)) / (2 * math.log(BASE))

    lo, hi = index_of(beta_fast), index_of(beta_slow)
    if rounded:  # the reference code rounds the ramp's ends outwards
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, Dh - 1)
    keep = ((hi - i) / (hi - lo)).clamp(0, 1)  # (Dh/2,) gamma: 1 keep, 0 interpolate
    mscale = 0.1 * math.log(s) + 1
    return (1 - keep) * theta0 / s + keep * theta0, mscale


def llama3(s):
    out = []
    for th, lam in zip(theta0.tolist(), lam0.tolist()):
        if lam < M / HIGH:
            out.append(th)  # fast pairs: kept
        elif lam > M / LOW:
            out.append(th / s)  # slow pairs: interpolated
        else:
            g = (M / lam - LOW) / (HIGH - LOW)
            out.append((1 - g) * th / s + g * th)
    return torch.tensor(out, dtype=torch.float64, device=device)  # (Dh/2,)


# %%
# Equal to Hugging Face
# ---------------------
# ``ROPE_INIT_FUNCTIONS[rope_type](config, device)`` returns the float32 inverse
# frequencies and the attention scaling of a config (``rope_parameters`` in 5.23). Two
# details of the library: the dynamic rule takes the current length as ``seq_len`` and
# reads ``M`` from ``max_position_embeddings``, and there is no static NTK-aware type,
# so the static rule is checked through ``"dynamic"`` at the length where
# :math:`s(L) = s`: :math:`L = M(2s-1)/s = 1792`. The comparison is float32 at its
# default tolerances: the library computes in float32, ours in float64 rounded to it.
# The attention factor is checked at float64's default tolerances: the library
# computes it with Python floats, as we do.
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


def config(rope_type, max_pos, **extra):
    params = {"rope_type": rope_type, "rope_theta": BASE, "factor": S, **extra}
    return LlamaConfig(hidden_size=2 * Dh, num_attention_heads=2,  # Dh = D / Nh
                       max_position_embeddings=max_pos, rope_parameters=params)


L_STATIC = int(M * (2 * S - 1) / S)  # 1792: s(L) = S
L_LONG = 3000  # past M: dynamic NTK kicks in with s(L) = 8.72
yarn_theta, yarn_mscale = yarn(S)
CASES = {  # name: (ours (Dh/2,), our attention factor, config, seq_len)
    "linear (PI)": (position_interpolation(S), 1.0, config("linear", int(S * M)), None),
    "NTK-aware": (ntk_aware(S), 1.0, config("dynamic", M), L_STATIC),
    "dynamic NTK": (dynamic_ntk(S, L_LONG), 1.0, config("dynamic", M), L_LONG),
    "YaRN": (yarn_theta, yarn_mscale, config(
        "yarn", int(S * M), original_max_position_embeddings=M, beta_fast=BETA_FAST,
        beta_slow=BETA_SLOW), None),
    "Llama 3": (llama3(S), 1.0, config(
        "llama3", int(S * M), original_max_position_embeddings=M, low_freq_factor=LOW,
        high_freq_factor=HIGH), None),
}
OURS = {}  # name: (theta (Dh/2,) float64, attention factor)
for name, (ours, factor, cfg, seq_len) in CASES.items():
    rope_type = cfg.rope_parameters["rope_type"]
    ref, ref_factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, device, seq_len=seq_len)
    err = (ours.float() - ref).abs().max().item()
    print(f"{name:12s} ({rope_type:7s}) max|ours - HF| = {err:.1e}, attention "
          f"factor {factor:.6f} (HF {ref_factor:.6f})")
    torch.testing.assert_close(ours.float(), ref)
    torch.testing.assert_close(torch.tensor(factor, dtype=torch.float64),
                               torch.tensor(ref_factor, dtype=torch.float64))
    OURS[name] = (ours, factor)

# %%
# The rounding of the ramp's ends is an option of the library, ``truncate`` (gpt-oss's
# config in transformers sets it to ``False``). Without it the ends are the fractional
# indices themselves; with :math:`\beta_\text{fast} = 256` the fast end falls below
# index 0 (no pair turns 256 times in 1024 tokens) and is clamped there. Our rule
# equals the library's in that setting too.
ours, mscale = yarn(S, beta_fast=256.0, beta_slow=2.0, rounded=False)
cfg = config("yarn", int(S * M), original_max_position_embeddings=M, beta_fast=256.0,
             beta_slow=2.0, truncate=False)
ref, ref_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, device)
print(f"YaRN, truncate=False: max|ours - HF| = {(ours.float() - ref).abs().max():.1e}")
torch.testing.assert_close(ours.float(), ref)
torch.testing.assert_close(mscale, ref_factor)

# %%
# Dynamic NTK through the rotary module
# -------------------------------------
# In a model the dynamic rule runs inside ``LlamaRotaryEmbedding.forward``: its
# ``dynamic_rope_update`` decorator recomputes the ``inv_freq`` buffer from the longest
# position it is given, ``L = max(position_ids) + 1``, when ``L`` grows past what it
# holds, and restores the original frequencies when a sequence shorter than ``M``
# follows. The buffer after each call equals our rule at that ``L``: stretched by
# :math:`s(3000) = 8.72` on the slowest pair at ``L = 3000``, plain RoPE again at
# ``L = 512``. (The cos tables are not compared here: a float32 angle ``p * theta``
# at ``p = 3000`` is off by about :math:`10^{-4}` rad whatever the frequencies, the
# subject of :doc:`page 08 <plot_08_rope_16bit>`.)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

rotary = LlamaRotaryEmbedding(CASES["dynamic NTK"][2]).to(device)
x = torch.empty(0, device=device)  # only its dtype and device are read
for L, stretch_slowest in ((L_LONG, S * L_LONG / M - (S - 1)), (512, 1.0)):
    rotary(x, torch.arange(L, device=device)[None])  # (1, L) position_ids
    ref = rotary.inv_freq  # (Dh/2,) float32, as the forward left it
    ours = dynamic_ntk(S, L)  # (Dh/2,)
    err = (ours.float() - ref).abs().max().item()
    st = (theta0[-1] / ref[-1].double()).item()
    print(f"L = {L:4d}: max|inv_freq ours - HF| = {err:.1e}, slowest pair "
          f"stretched by {st:.3f}")
    torch.testing.assert_close(ours.float(), ref)
    torch.testing.assert_close(st, stretch_slowest)

# %%
# YaRN's temperature reaches the logits the same way: the library multiplies cos and
# sin by the attention factor, so a query and a key rotated with them have their dot
# product multiplied by its square, :math:`1/t = (0.1 \ln 4 + 1)^2 = 1.296`.
rotary = LlamaRotaryEmbedding(CASES["YaRN"][2]).to(device)
pos = torch.arange(8, device=device)  # (8,)
cos_hf, sin_hf = rotary(x, pos[None])  # (1, 8, Dh) each
angles = pos[:, None].double() * yarn_theta[None, :]  # (8, Dh/2)
emb = torch.cat([angles, angles], dim=-1)  # (8, Dh)
err = max((yarn_mscale * emb.cos()).float().sub(cos_hf[0]).abs().max().item(),
          (yarn_mscale * emb.sin()).float().sub(sin_hf[0]).abs().max().item())
print(f"YaRN: 1/t = mscale^2 = {yarn_mscale ** 2:.4f}; max|mscale cos, sin - HF| = "
      f"{err:.1e}")
torch.testing.assert_close((yarn_mscale * emb.cos()).float(), cos_hf[0])
torch.testing.assert_close((yarn_mscale * emb.sin()).float(), sin_hf[0])

# %%
# Which wavelengths move
# ----------------------
# The stretch of each wavelength, :math:`\lambda_i'/\lambda_i = \theta_i/\theta_i'`,
# per rule. Linear divides every frequency by ``s``. NTK-aware keeps the fastest pair
# exactly and stretches the slowest by exactly ``s``; dynamic NTK does the same with
# :math:`s(3000) = 8.72`. YaRN keeps every pair that turns at least 32 times in ``M``
# tokens (:math:`\lambda_i \le 32`), interpolates every pair that turns at most once
# (:math:`\lambda_i \ge 1024`) and blends strictly between. Llama 3 keeps
# :math:`\lambda_i < 256`, interpolates :math:`\lambda_i > 1024`, blends between. The
# sets are computed from the wavelengths, not from the rules.
stretch = {name: theta0 / th for name, (th, _) in OURS.items()}  # (Dh/2,) each
one = torch.ones_like(theta0)
torch.testing.assert_close(stretch["linear (PI)"], S * one)
for name, s in (("NTK-aware", S), ("dynamic NTK", S * L_LONG / M - (S - 1))):
    st = stretch[name]
    print(f"{name:12s} stretch {st[0].item():.3f} (fastest) .. {st[-1].item():.3f} "
          f"(slowest), s = {s:.3f}")
    torch.testing.assert_close(st[[0, -1]], torch.tensor([1.0, s], dtype=st.dtype))
    torch.testing.assert_close(st, s ** (2 * i / (Dh - 2)))  # geometric in i
    assert (st.diff() > 0).all(), "NTK stretch not growing with the wavelength?"
turns = M / lam0  # (Dh/2,) r_i
for name, kept, moved in (("YaRN", turns >= BETA_FAST, turns <= BETA_SLOW),
                          ("Llama 3", lam0 < M / HIGH, lam0 > M / LOW)):
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
# The paper's ramp and the code's are not the same function: linear in :math:`r_i`
# against linear in :math:`i`, with the ends rounded outwards. They agree on the pairs
# kept and the pairs interpolated and differ inside the ramp; the library follows the
# code.
gamma_paper = ((turns - BETA_SLOW) / (BETA_FAST - BETA_SLOW)).clamp(0, 1)  # (Dh/2,)
theta_paper = (1 - gamma_paper) * theta0 / S + gamma_paper * theta0
gap = (theta_paper / yarn_theta - 1).abs().max().item()
print(f"YaRN: paper's ramp vs the code's: max relative gap in theta = {gap:.2f}")
assert gap > 0.1, "the two ramps agree?"  # 0.39
ends = (turns >= BETA_FAST) | (turns <= BETA_SLOW)  # (Dh/2,) kept or interpolated
torch.testing.assert_close(theta_paper[ends], yarn_theta[ends])

# %%
# The figure: one curve per rule, the stretch of each pair's wavelength against the
# original wavelength (log-log). Linear is the flat line at ``s``; the four others keep
# the fastest pair (stretch 1, local order) and stretch the slowest by ``s`` (by
# :math:`s(L)` for dynamic NTK): NTK-aware geometrically across all pairs, YaRN and
# Llama 3 only past their thresholds (dotted: :math:`M/\beta_\text{fast} = 32` and
# :math:`M/h = 256` tokens), and both divide every wavelength past ``M`` by ``s``.
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 4))
for name, st in stretch.items():
    label = f"{name} (L = {L_LONG})" if name == "dynamic NTK" else name
    ax.plot(lam0.cpu(), st.cpu(), marker="o", ms=3, label=label)
for x_at, txt in ((M / BETA_FAST, "M / beta_fast"), (M / HIGH, "M / h"), (M, "M")):
    ax.axvline(x_at, color="gray", lw=0.7, ls=":")
    ax.text(x_at, 9.5, f" {txt}", fontsize=7, color="gray", va="top")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_yticks([1, 2, 4, 8], labels=["1", "2", "4 = s", "8"])
ax.minorticks_off()
ax.set_xlabel(r"original wavelength $\lambda_i = 2\pi/\theta_i$ (tokens)")
ax.set_ylabel(r"stretch $\lambda_i'/\lambda_i$")
ax.set_title("Linear stretches every wavelength by s = 4; the others keep the\n"
             "shortest and stretch the longest by s (dynamic NTK: by s(L))")
ax.legend(fontsize=8)
plt.show()

# %%
# Every variant keeps the relative-position property
# --------------------------------------------------
# A rule only changes the :math:`\theta_i` (and YaRN a common factor), so the logit of
# a query at position :math:`m` and a key at :math:`n` still depends on :math:`m - n`
# alone: for each variant, ``q`` and ``k`` rotated at 48 positions up to 3995 (well
# past ``M``) in the rotate-half layout, with YaRN's factor on cos and sin, give the
# same logits as ``q`` rotated by :math:`m - n` against an unrotated ``k`` (float64, its
# default tolerances).
def rotate(x, pos, th, mscale):
    """Rotate-half RoPE with frequencies th. x (Dh,), pos (P,) -> (P, Dh)."""
    angles = pos[:, None].double() * th[None, :]  # (P, Dh/2)
    emb = torch.cat([angles, angles], dim=-1)  # (P, Dh)
    x1, x2 = x.chunk(2)  # (Dh/2,) each
    return mscale * (x * emb.cos() + torch.cat([-x2, x1]) * emb.sin())


# drawn on the CPU, so that every device checks the same vectors and positions
q, k = torch.randn(2, Dh, dtype=torch.float64).to(device)  # (Dh,) each
pos = torch.randint(0, 4000, (48,)).to(device)  # (48,)
for name, (th, mscale) in OURS.items():
    logits = rotate(q, pos, th, mscale) @ rotate(k, pos, th, mscale).T  # (48, 48)
    rel = pos[:, None] - pos[None, :]  # (48, 48) m - n
    by_offset = rotate(q, rel.flatten(), th, mscale) @ (mscale * k)  # (48 * 48,)
    err = (logits - by_offset.view(48, 48)).abs().max().item()
    print(f"{name:12s} max|logit(m, n) - logit(m - n, 0)| = {err:.1e}")
    torch.testing.assert_close(logits, by_offset.view(48, 48))
