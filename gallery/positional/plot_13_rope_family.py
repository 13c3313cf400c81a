"""
The rest of the RoPE family: LongRoPE and proportional RoPE
===========================================================

Two more lines of a config change RoPE's frequencies: ``"longrope"`` (Phi-3) divides
each pair's frequency by its own searched factor, from one list up to the pretraining
length and from another past it; ``"proportional"`` (Gemma 4) keeps full RoPE's first
frequencies and stops every other pair. This page writes both in float64, proves them
equal to Hugging Face's rules and rotary modules, and draws every ``rope_type`` of the
book's pinned ``transformers`` on one axis.

**You will learn**

- how LongRoPE scales each pair by its own factor, and switches lists past ``L0``
- why Phi-3.5's attention factor :math:`\\sqrt{1 + \\ln s / \\ln L_0}` applies at every
  length, and what the switch does to a KV cache
- how proportional RoPE differs from partial RoPE: the same frequencies as full RoPE on
  the pairs that rotate, frequency 0 on the others
- where ``"axial"`` belongs: vision encoders, not a scaling rule

**Prerequisites:** :doc:`/generated/positional/plot_09_rope_scaling` (the scaling rules,
``L0``, ``s``), :doc:`/generated/positional/plot_11_partial_rope` (partial RoPE),
:doc:`/generated/positional/plot_04_rope` (RoPE's frequencies).

.. index:: ! LongRoPE
.. index:: ! proportional RoPE
.. index:: ! rope_type
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
from transformers import Gemma4TextConfig, LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

transformers.logging.set_verbosity_error()  # config advice, not the lesson
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The blocks this page shares with others, copied verbatim: ``rope_inv_freq``,
# ``rotate_half`` and ``rope`` (from :doc:`/generated/positional/plot_04_rope`).


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


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
# Every rule of :doc:`the scaling page <plot_09_rope_scaling>` replaces pair
# :math:`i`'s frequency :math:`\omega_i = b^{-2i/D_h}` by a slower one. LongRoPE
# (:footcite:t:`Ding2024`) searched one factor :math:`\lambda_i` per pair instead of a
# formula, and Phi-3 ships two lists: ``short_factor`` for sequences up to ``L0``,
# ``long_factor`` past it. Proportional RoPE (Gemma 4's global layers) rotates only the
# first :math:`R = \lfloor p D_h / 2 \rfloor` pairs, with the frequencies they have in
# full RoPE, and gives the others frequency 0:
#
# .. math::
#
#    \omega_i' = \frac{\omega_i}{\lambda_i}\ \text{(LongRoPE)},\qquad
#    \omega_i' = \begin{cases} \omega_i / s & i < R \\ 0 & i \ge R \end{cases}
#    \ \text{(proportional)},
#
# and LongRoPE multiplies cos and sin by :math:`\sqrt{1 + \ln s / \ln L_0}`, with
# :math:`s` = ``max_position_embeddings / L0``. The figure draws the scale
# :math:`\omega_i/\omega_i'` of every ``rope_type`` in the pinned library's
# ``ROPE_INIT_FUNCTIONS`` (and ``"default"``), computed by the library, for the head
# of Phi-3.5-mini (``Dh = 96``, base 10000, ``L0 = 4096``, ``s = 32``) with its
# published factor lists; proportional with Gemma 4's ``p = 0.25``.
import matplotlib.pyplot as plt

PHI35 = {  # microsoft/Phi-3.5-mini-instruct, config.json (Hugging Face Hub), the
    # float32 values there are these two-decimal numbers (rope_scaling)
    "Dh": 3072 // 32, "base": 10000.0, "L0": 4096, "max_pos": 131072,
    "short": [1.0, 1.02, 1.03, 1.03, 1.05, 1.05, 1.05, 1.05, 1.05, 1.07, 1.1, 1.11,
              1.16, 1.16, 1.17, 1.29, 1.34, 1.68, 1.79, 1.82, 1.85, 1.88, 1.91, 1.94,
              1.99, 2.02, 2.02, 2.02, 2.02, 2.02, 2.02, 2.03, 2.03, 2.03, 2.03, 2.03,
              2.03, 2.03, 2.03, 2.03, 2.08, 2.09, 2.19, 2.22, 2.59, 2.73, 2.75, 2.84],
    "long": [1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62, 3.23, 3.23, 4.79, 7.4, 7.7,
             9.09, 12.2, 17.67, 24.46, 28.57, 30.42, 30.84, 32.59, 32.93, 42.32, 44.96,
             50.34, 50.45, 57.55, 57.93, 58.21, 60.14, 62.61, 62.62, 62.71, 63.14,
             63.14, 63.77, 63.93, 63.96, 63.97, 64.03, 64.07, 64.08, 64.12, 64.41,
             64.48, 64.51, 64.53, 64.84],
}
GEMMA4_P = 0.25  # Gemma4TextConfig's default full_attention partial_rotary_factor
Dh, BASE, L0 = PHI35["Dh"], PHI35["base"], PHI35["L0"]
S = PHI35["max_pos"] / L0  # 32
F32_RTOL = 1.3e-6  # float32's default rtol: the library computes in float32


# %%
def hf_config(rope_type, Dh, base, L0, s, **extra):
    """A small LlamaConfig whose rope_parameters select `rope_type` (2 heads of Dh)."""
    params = {"rope_type": rope_type, "rope_theta": base, **extra}
    if rope_type in ("linear", "dynamic", "yarn", "llama3"):
        params["factor"] = s
    if rope_type in ("yarn", "llama3", "longrope"):
        params["original_max_position_embeddings"] = L0
    max_pos = L0 if rope_type == "dynamic" else int(s * L0)
    return LlamaConfig(hidden_size=2 * Dh, num_attention_heads=2,
                       max_position_embeddings=max_pos, rope_parameters=params)


# %%
L_NTK = int(L0 * (2 * S - 1) / S)  # dynamic's length where s(L) = s
FIG = {  # label: (rope_type, extra rope parameters, seq_len)
    "default": ("default", {}, None),
    "linear": ("linear", {}, None),
    f"dynamic (L = {L_NTK})": ("dynamic", {}, L_NTK),
    "yarn": ("yarn", {}, None),
    "llama3": ("llama3", {"low_freq_factor": 1.0, "high_freq_factor": 4.0}, None),
    "longrope, L <= L0": ("longrope", {"short_factor": PHI35["short"],
                                       "long_factor": PHI35["long"]}, None),
    "longrope, L > L0": ("longrope", {"short_factor": PHI35["short"],
                                      "long_factor": PHI35["long"]}, L0 + 1),
    "proportional": ("proportional", {"partial_rotary_factor": GEMMA4_P}, None),
}
covered = {rope_type for rope_type, _, _ in FIG.values()}
print(f"rope types drawn: {', '.join(sorted(covered))}")
assert covered == set(ROPE_INIT_FUNCTIONS) | {"default"}, "a new rope_type?"

omega = rope_inv_freq(Dh, BASE, torch.float64)  # (Dh/2,)
scale_fig = {}  # label: omega / omega', (Dh/2,); inf where omega' = 0
for label, (rope_type, extra, seq_len) in FIG.items():
    if rope_type == "default":
        scale_fig[label] = torch.ones_like(omega)
        continue
    cfg = hf_config(rope_type, Dh, BASE, L0, S, **extra)
    inv_freq, _ = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    scale_fig[label] = omega / inv_freq.double()

fig, ax = plt.subplots(figsize=(7, 4.4))
TOP = 200.0  # where frequency 0 (an infinite scale) is drawn
for label, sc in scale_fig.items():
    ls = "--" if label.startswith("longrope") else "-"
    ax.plot(sc.clamp(max=TOP), ls=ls, marker="o", ms=2.5, label=label)
ax.axhline(S, color="gray", lw=0.7, ls=":")
ax.text(0, S, " s = 32", fontsize=8, color="gray", va="bottom")
ax.text(Dh // 2 - 1, TOP, "frequency 0 ", fontsize=8, color="gray", ha="right",
        va="top")
ax.set_yscale("log")
ax.set_yticks([1, 2, 4, 32, TOP], labels=["1", "2", "4", "32", "inf"])
ax.minorticks_off()
ax.set_xlabel("pair index i (fast to slow)")
ax.set_ylabel(r"scale $\omega_i / \omega_i'$")
ax.set_title("Past L0 LongRoPE stretches Phi-3.5's slow pairs by twice s;\n"
             "proportional RoPE keeps 12 pairs as they are and stops the other 36")
ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
plt.show()

# %%
# What the figure shows, at the fastest and the slowest pair: every rule but linear
# keeps the fastest pair (LongRoPE's lists nearly), linear, dynamic (at this length),
# YaRN and Llama 3 stretch the slowest by exactly ``s``, LongRoPE by its list's last
# factor, and proportional RoPE stops it.
ENDS = {"default": (1, 1), "linear": (S, S), f"dynamic (L = {L_NTK})": (1, S),
        "yarn": (1, S), "llama3": (1, S),
        "longrope, L <= L0": (PHI35["short"][0], PHI35["short"][-1]),
        "longrope, L > L0": (PHI35["long"][0], PHI35["long"][-1]),
        "proportional": (1, math.inf)}
for label, sc in scale_fig.items():
    print(f"{label:22s} fastest pair {sc[0].item():6.2f}, slowest {sc[-1].item():6.2f}")
    torch.testing.assert_close(sc[[0, -1]], torch.tensor(ENDS[label], dtype=sc.dtype),
                               rtol=F32_RTOL, atol=0)  # the library's float32

# %%
# From scratch: LongRoPE
# ----------------------
# The inverse frequencies of RoPE divided pair by pair by the list of the current
# length, and one attention factor for every length (the paper's
# :math:`\sqrt{1 + \ln s / \ln L_0}`; 1 where :math:`s \le 1`).
def longrope(Dh, base, short_factor, long_factor, L0, s, L=None, device=None):
    """(inv_freq (Dh/2,) float64, attention factor): short list up to L0, long past."""
    lam = long_factor if L is not None and L > L0 else short_factor
    lam = torch.tensor(lam, dtype=torch.float64)  # (Dh/2,) per-pair factors
    inv_freq = rope_inv_freq(Dh, base, torch.float64) / lam  # (Dh/2,)
    factor = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(L0))
    return inv_freq.to(device), factor


# %%
# From scratch: proportional RoPE
# -------------------------------
# The first :math:`R` frequencies of full RoPE's table, spread over ``Dh``, then
# zeros; a common factor ``s`` divides them all. A pair of frequency 0 has cos 1 and
# sin 0 at every position: its two channels pass through.
def proportional(Dh, base, p, s=1.0, device=None):
    """Gemma 4's proportional RoPE: (Dh/2,) float64, R = floor(p Dh / 2) non-zero."""
    R = int(p * Dh // 2)  # pairs that rotate
    inv_freq = rope_inv_freq(Dh, base, torch.float64)  # (Dh/2,) full RoPE's table
    inv_freq[R:] = 0.0  # these pairs never turn
    return (inv_freq / s).to(device)


# %%
# Each rule's scale is exactly the figure's, which the library computed in float32:
# relative error within float32's default ``rtol`` (1.3e-6, a few roundings of
# float32 values), ``atol = 0`` because the slow pairs' frequencies lie far below
# float32's default ``atol``. Phi-3.5's attention factor is
# :math:`\sqrt{1 + \ln 32 / \ln 4096} = \sqrt{17/12} =` :measured:`phi_factor:.4f`.
short_ours, phi_factor = longrope(Dh, BASE, PHI35["short"], PHI35["long"], L0, S)
long_ours, _ = longrope(Dh, BASE, PHI35["short"], PHI35["long"], L0, S, L=L0 + 1)
prop_ours = proportional(Dh, BASE, GEMMA4_P)
R_gemma = int((prop_ours > 0).sum())
for label, ours in (("longrope, L <= L0", short_ours), ("longrope, L > L0", long_ours),
                    ("proportional", prop_ours)):
    sc = omega / ours  # (Dh/2,), inf where ours = 0
    fin = sc.isfinite()
    err = (sc[fin] / scale_fig[label][fin] - 1).abs().max().item()
    print(f"{label:18s} max|ours / HF - 1| = {err:.1e}, frequency 0 on "
          f"{int((~fin).sum())} pairs")
    torch.testing.assert_close(sc[fin], scale_fig[label][fin], rtol=F32_RTOL, atol=0)
    assert torch.equal(fin, scale_fig[label].isfinite()), "other pairs stopped?"
print(f"attention factor {phi_factor:.6f}; sqrt(17/12) = {math.sqrt(17 / 12):.6f}")
# and our scales are the published factors to float64's rounding, not float32's
for ours, lst in ((short_ours, PHI35["short"]), (long_ours, PHI35["long"])):
    torch.testing.assert_close(omega / ours, torch.tensor(lst, dtype=torch.float64),
                               rtol=1e-12, atol=0)  # float32 factors: 1e-8 off
torch.testing.assert_close(phi_factor, math.sqrt(17 / 12))
assert R_gemma == 12, "Gemma 4's p = 0.25 of 48 pairs"

# %%
# What Phi-3.5's lists do. Below ``L0`` its frequencies are not RoPE's: the short list
# slows the slowest pair by :measured:`short_max:.2f`. Past ``L0`` the long list
# stretches the slowest pairs by up to :measured:`long_max:.2f`, twice the context
# factor ``s = 32``; the fastest pair by :measured:`long_min:.2f` only.
short_max = max(PHI35["short"])
long_min, long_max = min(PHI35["long"]), max(PHI35["long"])
print(f"short factors 1 .. {short_max:.2f}; long factors {long_min:.2f} .. "
      f"{long_max:.2f}, {long_max / S:.2f} s")
assert short_max > 2 and long_max > 2 * S and long_min < 1.1, "Phi-3.5's lists?"
for lst in (PHI35["short"], PHI35["long"]):  # one factor per pair, slower pairs more
    assert len(lst) == Dh // 2 and all(a <= b for a, b in zip(lst, lst[1:]))
# the published lists, checked against a typo: their sums
assert (round(sum(PHI35["short"]), 2), round(sum(PHI35["long"]), 2)) == (83.47, 1828.04)

# %%
# Proof: equal to Hugging Face's rules and rotary modules
# -------------------------------------------------------
#
# The rules, on tiny configs with every parameter off its default
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A head of ``Dh = 16`` (8 pairs), base 500, ``L0 = 16``: LongRoPE on a
# ``Phi3Config`` with ``max_position_embeddings`` 64 (so ``s = 4`` from the two
# lengths, as Phi-3 does it), lists where every factor differs; then an explicit
# ``factor`` 8, then an explicit ``attention_factor`` (the library takes it as given).
# Proportional on ``Gemma4TextConfig``'s global layers (``global_head_dim`` 32) with
# ``p = 0.375`` and ``factor`` 2.
DH_T, BASE_T, L0_T = 16, 500.0, 16
SHORT_T = [1.0 + 0.15 * j for j in range(DH_T // 2)]  # (Dh/2,) all different
LONG_T = [1.5 * 1.6 ** j for j in range(DH_T // 2)]


# %%
def phi3_config(Dh, base, L0, max_pos, short, long, **extra):
    """A one-layer Phi3Config with LongRoPE; `extra` goes into rope_parameters."""
    params = {"rope_type": "longrope", "rope_theta": base, "short_factor": short,
              "long_factor": long, **extra}
    return Phi3Config(hidden_size=2 * Dh, num_attention_heads=2, num_hidden_layers=1,
                      intermediate_size=4 * Dh, vocab_size=64, pad_token_id=None,
                      initializer_range=0.1,
                      max_position_embeddings=max_pos,
                      original_max_position_embeddings=L0, rope_parameters=params)


# %%
LR_CASES = {  # name: (config, seq_len, s)
    "s from lengths, short": (phi3_config(DH_T, BASE_T, L0_T, 64, SHORT_T, LONG_T),
                              None, 4.0),
    "s from lengths, long": (phi3_config(DH_T, BASE_T, L0_T, 64, SHORT_T, LONG_T),
                             L0_T + 1, 4.0),
    "factor 8, long": (phi3_config(DH_T, BASE_T, L0_T, 64, SHORT_T, LONG_T,
                                   factor=8.0), 100, 8.0),
    "s = 1 (no scaling)": (phi3_config(DH_T, BASE_T, L0_T, L0_T, SHORT_T, LONG_T),
                           None, 1.0),
}
lr_factors, lr_refs = {}, {}  # name: our attention factor, HF's inv_freq
for name, (cfg, seq_len, s) in LR_CASES.items():
    ours, factor = longrope(DH_T, BASE_T, SHORT_T, LONG_T, L0_T, s, L=seq_len,
                            device=device)
    lr_factors[name] = factor
    ref, ref_factor = ROPE_INIT_FUNCTIONS["longrope"](cfg, device, seq_len=seq_len)
    lr_refs[name] = ref
    err = (ours.float().double() / ref.double() - 1).abs().max().item()
    print(f"longrope {name:22s} max|ours / HF - 1| = {err:.1e}, factor {factor:.4f}"
          f" (HF {ref_factor:.4f})")
    torch.testing.assert_close(ours.float(), ref, rtol=F32_RTOL, atol=0)
    torch.testing.assert_close(factor, ref_factor)  # both Python floats
assert lr_factors["s = 1 (no scaling)"] == 1.0, "s = 1 scales?"
# past L0 each of the library's frequencies moves by exactly long / short
switch = lr_refs["s from lengths, short"] / lr_refs["s from lengths, long"]  # (Dh/2,)
torch.testing.assert_close(switch, torch.tensor(LONG_T) / torch.tensor(SHORT_T))
assert lr_factors["factor 8, long"] > lr_factors["s from lengths, long"] > 1.0
cfg = phi3_config(DH_T, BASE_T, L0_T, 64, SHORT_T, LONG_T, attention_factor=0.7)
ref_factor = ROPE_INIT_FUNCTIONS["longrope"](cfg, device)[1]
print(f"an explicit attention_factor 0.7 is kept: HF {ref_factor}")
assert ref_factor == 0.7, "the library recomputes it?"


# %%
def gemma4_config(Dh_local, Dh_global, p, s):
    """A two-layer Gemma4TextConfig: a sliding layer and a global (proportional) one."""
    return Gemma4TextConfig(
        head_dim=Dh_local, global_head_dim=Dh_global, num_hidden_layers=2,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 20_000.0},
            "full_attention": {"rope_type": "proportional", "rope_theta": 300_000.0,
                               "partial_rotary_factor": p, "factor": s}})


# %%
DHG_T, P_T, S_T = 32, 0.375, 2.0
g_cfg = gemma4_config(16, DHG_T, P_T, S_T)
ref, ref_factor = ROPE_INIT_FUNCTIONS["proportional"](
    g_cfg.per_layer_config["full_attention"], device, layer_type="full_attention")
ours = proportional(DHG_T, 300_000.0, P_T, S_T, device)
rot = ours > 0  # (Dh/2,) the rotating pairs
err = (ours[rot].float().double() / ref[rot].double() - 1).abs().max().item()
print(f"proportional: max|ours / HF - 1| on the {int(rot.sum())} rotating pairs = "
      f"{err:.1e},\n  zeros equal: {torch.equal(ref == 0, ours == 0)}, "
      f"factor {ref_factor}")
torch.testing.assert_close(ours.float(), ref, rtol=F32_RTOL, atol=0)
assert int((ours > 0).sum()) == 6 and ref_factor == 1.0, "R = floor(0.375 * 32 / 2)"

# %%
# LongRoPE's switch in ``Phi3RotaryEmbedding``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The ``dynamic_rope_update`` decorator (transformers 5.23) reads
# ``L = max(position_ids) + 1`` at every call and picks the long list when
# ``L > L0``, the short one otherwise. Unlike dynamic NTK it keeps no memory: four
# calls in a row, at ``L0``, ``L0 + 1``, 40 and ``L0 / 2``, get the short, long,
# long and short list. The cos table carries the attention factor at every length,
# short ones included; it is compared with ours at float32's defaults (angles below
# 40 rad, a float32 product rounded once).
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

cfg = LR_CASES["s from lengths, short"][0]
rotary = Phi3RotaryEmbedding(cfg).to(device)
x = torch.empty(0, device=device)  # only its dtype and device are read
for L in (L0_T, L0_T + 1, 40, L0_T // 2):
    pos = torch.arange(L, device=device)  # (L,)
    cos, sin = rotary(x, pos[None])  # (1, L, Dh) each
    ours, factor = longrope(DH_T, BASE_T, SHORT_T, LONG_T, L0_T, 4.0, L=L,
                            device=device)
    angles = pos[:, None].double() * ours  # (L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (L, Dh)
    which = "long" if L > L0_T else "short"
    err = (cos[0].double() - factor * angles.cos()).abs().max().item()
    print(f"L = {L:2d}: {which:5s} list, max|cos - ours| = {err:.1e}, "
          f"scaling {rotary.attention_scaling:.4f}")
    torch.testing.assert_close(rotary.inv_freq, ours.float(), rtol=F32_RTOL, atol=0)
    torch.testing.assert_close(cos[0], (factor * angles.cos()).float())
    torch.testing.assert_close(sin[0], (factor * angles.sin()).float())
assert rotary.attention_scaling > 1.05, "short lengths unscaled?"

# %%
# Proportional RoPE in ``Gemma4TextRotaryEmbedding``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Gemma 4 keeps two tables, one per layer type: full RoPE of the sliding layers' head
# width (16 here, base 20000) and proportional RoPE of the global layers' (32). Both
# equal ours; on the global table the stopped pairs' cos is exactly 1 and sin exactly
# 0, so a rotated query keeps those channels bit for bit.
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

g_rotary = Gemma4TextRotaryEmbedding(g_cfg).to(device)
pos24 = torch.arange(24, device=device)  # (L,)
tables = {"sliding_attention": rope_inv_freq(16, 20_000.0, torch.float64).to(device),
          "full_attention": proportional(DHG_T, 300_000.0, P_T, S_T, device)}
for layer_type, f in tables.items():
    cos, sin = g_rotary(x, pos24[None], layer_type=layer_type)  # (1, L, Dh) each
    angles = pos24[:, None].double() * f  # (L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (L, Dh)
    print(f"{layer_type:17s} Dh = {cos.shape[-1]}: max|cos - ours| = "
          f"{(cos[0].double() - angles.cos()).abs().max():.1e}")
    torch.testing.assert_close(cos[0], angles.cos().float())
    torch.testing.assert_close(sin[0], angles.sin().float())
R_T = int(P_T * DHG_T // 2)  # 6 rotating pairs
half = DHG_T // 2
stopped = torch.cat([torch.arange(R_T, half), torch.arange(half + R_T, DHG_T)])
q = torch.randn(24, DHG_T, dtype=torch.float64, device=device)  # (L, Dh)
q_rot = rope(q, cos[0].double(), sin[0].double())  # (L, Dh)
print(f"stopped channels: {len(stopped)} of {DHG_T}, cos there all 1: "
      f"{bool((cos[0][:, stopped] == 1).all())}, rotated q equal there: "
      f"{torch.equal(q_rot[:, stopped], q[:, stopped])}")
assert torch.equal(q_rot[:, stopped], q[:, stopped]), "the stopped pairs move?"
assert not torch.equal(q_rot[1:, :R_T], q[1:, :R_T]), "the first pairs still?"

# %%
# The logits stay relative: with our float64 table, a query and a key rotated at
# positions 0 to 23 give logits that depend on :math:`m - n` only (every diagonal
# constant), the stopped pairs adding the same plain dot product everywhere.
angles = pos24[:, None].double() * tables["full_attention"]  # (L, Dh/2)
emb = torch.cat([angles, angles], dim=-1)  # (L, Dh)
q1 = torch.randn(DHG_T, dtype=torch.float64, device=device)  # (Dh,)
k1 = torch.randn(DHG_T, dtype=torch.float64, device=device)  # (Dh,)
q_all = rope(q1.expand(24, -1), emb.cos(), emb.sin())  # (L, Dh)
k_all = rope(k1.expand(24, -1), emb.cos(), emb.sin())  # (L, Dh)
logits = q_all @ k_all.T  # (L, L)
shift_gap = (logits[1:, 1:] - logits[:-1, :-1]).abs().max().item()
print(f"max|logit(m+1, n+1) - logit(m, n)| = {shift_gap:.1e}, logits span "
      f"{(logits.max() - logits.min()).item():.2f}")
torch.testing.assert_close(logits[1:, 1:], logits[:-1, :-1])  # float64 defaults
assert (logits.max() - logits.min()).item() > 0.5, "no position at all?"

# %%
# Proof: LongRoPE's switch and a KV cache
# ---------------------------------------
# The switch acts like dynamic NTK's (:doc:`scaling page <plot_09_rope_scaling>`): a
# one-layer ``Phi3ForCausalLM`` (the tiny config above, ``L0 = 16``, ``s = 4``) takes a
# prefill of 12 tokens, then decodes 12 one at a time with a ``DynamicCache``, to
# position 23. Up to position 15 the cached
# keys were rotated with the short list; from 16 on, queries get the long list. One
# full pass over the 24 tokens uses the long list everywhere. The cached logits agree
# with the full pass's to float32's rounding while the sequence stays within ``L0``
# (float32 defaults), and differ far beyond it once past.
from transformers import DynamicCache, Phi3ForCausalLM

L_KV, PREFILL = 24, 12
tokens = torch.randint(0, 64, (1, L_KV), generator=torch.Generator().manual_seed(0))
tokens = tokens.to(device)  # (1, L_KV)
torch.manual_seed(0)
model = Phi3ForCausalLM(LR_CASES["s from lengths, short"][0]).to(device).eval()
with torch.no_grad():
    full = model(tokens).logits[0]  # (L_KV, vocab)
    full_short = model(tokens[:, :L0_T]).logits[0]  # (L0, vocab): the short list
    cache = DynamicCache(config=model.config)
    steps = [model(tokens[:, :PREFILL], past_key_values=cache).logits[0]]
    for t in range(PREFILL, L_KV):
        steps.append(model(tokens[:, t:t + 1], past_key_values=cache).logits[0])
cached = torch.cat(steps)  # (L_KV, vocab)
D_T, I_T, V_T = 2 * DH_T, 4 * DH_T, 64  # Phi-3 fuses qkv and gate/up projections
n_params = sum(p.numel() for p in model.parameters())
print(f"one Phi-3 layer and its embeddings: {n_params:,} parameters")
assert n_params == 2 * V_T * D_T + 4 * D_T * D_T + 3 * D_T * I_T + 3 * D_T, n_params
kv_gap_within = (cached[:L0_T] - full_short).abs().max().item()
kv_gap_past = (cached[L0_T:] - full[L0_T:]).abs().max().item()
prefix_gap = (full[:L0_T] - full_short).abs().max().item()
print(f"cached vs full pass, positions < L0: {kv_gap_within:.1e}; past L0: "
      f"{kv_gap_past:.1e}\nthe same 16 tokens alone or inside 24 (short vs long "
      f"list): {prefix_gap:.1e}")
torch.testing.assert_close(cached[:L0_T], full_short)  # float32 rounding only
assert kv_gap_past > 0.1 and prefix_gap > 0.1, "the switch changes nothing?"

# %%
# Proof: ``"axial"`` is not a scaling rule
# ----------------------------------------
# The library's ``RopeParameters`` docstring names an eighth type, ``"axial"``. It has
# no entry in ``ROPE_INIT_FUNCTIONS``: it is the ``default_rope_type`` of vision and
# multimodal configs (Pixtral, Qwen2-VL's vision tower, Gemma 4's vision encoder ...),
# whose rotary modules compute their own 2-D frequencies (rows and columns of patches
# each get a share of the pairs) and refuse any other type. The book teaches that
# rotation in :doc:`RoPE in N dimensions <plot_08_rope_nd>`; it scales no
# frequency, so the scaling table leaves it out. The pinned library has
# :measured:`n_axial` model families whose configs default to it:
import pathlib
import re

models = pathlib.Path(transformers.__file__).parent / "models"
axial = sorted(p.parent.name for p in models.glob("*/configuration_*.py")
               if re.search(r'default_rope_type = "axial"', p.read_text()))
n_axial = len(axial)
named = [m for m in ("pixtral", "qwen2_vl", "gemma4") if m in axial]
print(f"{n_axial} model families default to 'axial', among them {', '.join(named)}")
assert "axial" not in ROPE_INIT_FUNCTIONS and len(named) == 3, "axial moved?"

# %%
# Try it: spread Gemma 4's frequencies over ``R`` pairs, as partial RoPE does
# ---------------------------------------------------------------------------
# :doc:`Partial RoPE <plot_11_partial_rope>` gives its ``Dr`` rotated channels the
# frequencies :math:`b^{-2i/D_r}`. Use that for Gemma 4's global head: how far from
# proportional RoPE's?

# %%
# Far: partial RoPE's frequency :math:`b^{-2i/D_r}` falls faster with :math:`i` than
# :math:`b^{-2i/D_h}`, so its slowest rotating pair turns
# :measured:`partial_vs_prop:,.0f` times slower than proportional RoPE's (Gemma 4's
# global head: ``Dh = 512``, base 1e6, 64 rotating pairs). Proportional RoPE keeps
# only fast pairs: the slow end of the spectrum is the stopped pairs.
Dh_g, base_g = 512, 1_000_000.0  # Gemma4TextConfig defaults: global_head_dim, theta
prop = proportional(Dh_g, base_g, GEMMA4_P)  # (Dh/2,)
R_g = int((prop > 0).sum())
partial = rope_inv_freq(2 * R_g, base_g, torch.float64)  # (Dr/2,), Dr = 2 R_g
partial_vs_prop = (prop[R_g - 1] / partial[-1]).item()
print(f"{R_g} rotating pairs; slowest: partial {partial[-1]:.2e}, proportional "
      f"{prop[R_g - 1]:.2e} rad/token\n  ({partial_vs_prop:,.0f} times slower)")
assert R_g == 64 and len(partial) == R_g and partial_vs_prop > 1000, "the same?"
# the closed form of the gap: base ** 2(R_g - 1)(1/Dr - 1/Dh), Dr = 2 R_g
torch.testing.assert_close(partial_vs_prop,
                           base_g ** (2 * (R_g - 1) * (1 / (2 * R_g) - 1 / Dh_g)))
torch.testing.assert_close(partial[0], prop[0])  # the fastest pair agrees

# %%
# Try it: switch at ``L >= L0`` instead of ``L > L0``. Which length disagrees?
# ----------------------------------------------------------------------------
# Write the comparison with ``>=`` and run it against the library at ``L = L0``.

# %%
# Exactly ``L = L0``: the library still uses the short list there, the off-by-one
# rule the long one; the two lists differ by :measured:`off_by_one:.1f` times on the
# slowest pair.
wrong, _ = longrope(DH_T, BASE_T, SHORT_T, LONG_T, L0_T, 4.0, L=L0_T + 1)  # as if >=
ref, _ = ROPE_INIT_FUNCTIONS["longrope"](LR_CASES["s from lengths, short"][0], "cpu",
                                          seq_len=L0_T)
off_by_one = (ref[-1] / wrong[-1]).item()  # = long / short factor of that pair
print(f"at L = L0: library's slowest frequency {ref[-1]:.2e}, the >= rule's "
      f"{wrong[-1]:.2e} ({off_by_one:.1f} times)")
assert off_by_one > 10, "the lists agree at L0?"
torch.testing.assert_close(off_by_one, LONG_T[-1] / SHORT_T[-1], rtol=F32_RTOL, atol=0)

# %%
# References
# ----------
# LongRoPE: :footcite:t:`Ding2024`; Phi-3: :footcite:t:`Abdin2024`. The scaling rules:
# :footcite:t:`Chen2023`, :footcite:t:`Peng2023`. RoPE: :footcite:t:`Su2021`.
#
# .. footbibliography::
