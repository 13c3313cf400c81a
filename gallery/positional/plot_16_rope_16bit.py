"""
RoPE in 16 bits
===============

RoPE turns pair ``i`` at position ``p`` by ``p * inv_freq[i]``, a number as large as
the position, which a 16-bit float (8 significant bits in bfloat16, 11 in float16)
rounds. Today's recipe (angles and cos/sin in float32, only cos/sin cast to 16 bits)
keeps RoPE's relative-position property.

**You will learn**

- which positions bfloat16 and float16 hold exactly, and how the rest round
- why 16-bit angles miss by over pi from position 1028 (bfloat16), 8196 (float16)
- why float16 cannot even hold Llama 3's base
- the recipe: float32 angles, 16-bit cos and sin, and how close it stays to float64
- how 16-bit angles break the relative position property of the logits

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (RoPE, both layouts),
:doc:`/generated/normalization/plot_16_norms_16bit` (floating-point formats, rounding).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math

import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Pair :math:`i` turns by the angle :math:`p\,\omega_i`, :math:`\omega_i = b^{-2i/D_h}`
# (``inv_freq``, base :math:`b`). The fastest pair has :math:`\omega_0 = 1`: its angle
# *is* the position. A float with :math:`t` significant bits holds every integer up to
# :math:`2^t`; above, it rounds :math:`p \in [2^e, 2^{e+1})` to a multiple of
# :math:`2^{e+1-t}`, so
#
# .. math::
#
#    |\mathrm{fl}(p\,\omega_0) - p\,\omega_0| = |\mathrm{fl}(p) - p|
#    \le 2^{\lfloor \log_2 p \rfloor - t} \quad\text{rad},
#
# more than :math:`\pi` (a rotation that may point anywhere) once :math:`p` reaches
# :math:`2^{t+2}`, with :math:`t = 8` (bfloat16) or 11 (float16). The figure casts every
# position below :math:`2^{17}` with ``.to(dtype)``.
import matplotlib.pyplot as plt

DTYPES = (torch.bfloat16, torch.float16)
P = 2**17 - 1
pos = torch.arange(1, P + 1, device=device)  # (P,) positions 1 .. 131071
p64 = pos.double()  # exact
bucket = (8 * torch.log2(p64)).floor().long()  # (P,) eighth-of-an-octave index
n_buckets = int(bucket.max()) + 1
x_bucket = 2.0 ** (torch.arange(n_buckets, dtype=torch.float64) / 8)  # left edges

fig, ax = plt.subplots()
for dtype, color in zip(DTYPES, ("C1", "C2")):  # float32: exact to 2^24, no line
    rounding = (pos.to(dtype).double() - p64).abs()  # (P,) |fl(p) - p|
    worst = torch.zeros(n_buckets, dtype=torch.float64, device=device)
    worst = worst.scatter_reduce(0, bucket, rounding, "amax", include_self=False)
    shown = (worst > 0).cpu()  # exact positions: nothing to draw on a log scale
    ax.loglog(x_bucket[shown], worst.cpu()[shown], color=color,
              label=str(dtype).removeprefix("torch."))
ax.axhline(math.pi, color="gray", lw=0.8)
ax.text(1.5, math.pi * 1.3, "π", color="gray")
ax.set_xlim(1, 2**17)
ax.set_xlabel("position p")
ax.set_ylabel("|fl(p) - p|: error of the fastest angle (rad)")
ax.set_title("A 16-bit position is off by more than π from p ≈ 1000 (bfloat16)\n"
             "and p ≈ 8000 (float16); float32 holds every position to 2^24")
ax.legend(loc="lower right")
plt.show()

# %%
# Which positions a 16-bit float holds
# ------------------------------------
# ``finfo(dtype).eps`` is the spacing at 1, :math:`2^{1-\text{bits}}`: 8 significant
# bits for bfloat16, 11 for float16, 24 for float32 (the implicit leading 1 included).

def significant_bits(dtype):
    """1 + the stored mantissa bits, read off finfo: eps = 2 ** (1 - bits)."""
    return 1 - int(math.log2(torch.finfo(dtype).eps))


# %%
# The angle in each dtype
# -----------------------
# RoPE's angle table (:doc:`RoPE <plot_04_rope>`, ``1 / base ** (2i / Dh)`` as in
# Llama's code) with every step in one dtype: float32 is what implementations compute,
# 16 bits what a model run wholly in 16 bits does.
def rope_angles(pos, Dh, base, dtype):
    """p * inv_freq_i with every step in `dtype`. pos (L,) integers -> (L, Dh/2)."""
    base = torch.tensor(base, device=pos.device).to(dtype)  # the base too
    two_i = torch.arange(0, Dh, 2, device=pos.device).to(dtype)  # (Dh/2,)
    inv_freq = 1.0 / base ** (two_i / Dh)  # (Dh/2,)
    return pos.to(dtype)[:, None] * inv_freq[None, :]  # (L, Dh/2)


Dh = 128  # Llama's head width
BASES = (10_000.0, 500_000.0)
one = torch.tensor([1], device=device)  # (1,) position 1: the angles are inv_freq


# %%
# The recipe: float32 angles, 16-bit cos and sin
# ----------------------------------------------
# Hugging Face's :doc:`Llama </generated/transformer/plot_11_llama_decoder_layer>` casts
# only cos and sin to the model's dtype; the naive version differs in ``angle_dtype``
# alone.
def rope_cos_sin_16bit(pos, Dh, base, angle_dtype, dtype):
    """cos and sin of the angles computed in `angle_dtype`, cast to `dtype`.

    pos (L,) -> cos, sin, each (L, Dh/2)."""
    angles = rope_angles(pos, Dh, base, angle_dtype)  # (L, Dh/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


# %%
# Rotating a query in 16 bits
# ---------------------------
# Adjacent pairs :math:`(2i, 2i+1)`, in the 16-bit dtype with the cast tables. Each pair
# of ``q`` is a unit vector, so one tolerance fits every entry.
def rotate_pairs(x, cos, sin):
    """Turn adjacent pairs of x (..., L, Dh) by cos, sin (L, Dh/2). Same shape as x."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, Dh/2)
    out_even = x_even * cos - x_odd * sin  # out[2i]
    out_odd = x_even * sin + x_odd * cos  # out[2i+1]
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2)  # interleaved, Dh


def rope_logits_16bit(q, k, pos, Dh, base, angle_dtype):
    """(L, Dh) x 2 -> (L, L) logits <R_m q_m, R_n k_n>, rotated and multiplied in q's
    dtype with cos/sin from `angle_dtype` angles."""
    cos, sin = rope_cos_sin_16bit(pos, Dh, base, angle_dtype, q.dtype)
    return rotate_pairs(q, cos, sin) @ rotate_pairs(k, cos, sin).T


# %%
# Proof: the logits' inputs, their budget, and float64's logits
# --------------------------------------------------------------
# :math:`\langle R_m q, R_n k\rangle` depends only on :math:`n - m`
# (:doc:`RoPE <plot_04_rope>`), so shifting every position by ``s`` must leave the
# ``(L, L)`` logits unchanged. In 16 bits each logit carries the dtype's rounding,
# measured without any RoPE code of this page: :math:`E_0` is the error of float64's
# rotated q and k (positions ``0 .. L-1``), cast to the dtype and multiplied there. The
# recipe rounds a few more times (cos, sin, two products, a sum); as FlashAttention's
# tests do with their baseline, allow twice it, :math:`2 E_0`. At a shift ``s`` the
# float32 angles add at most :math:`\sum_i 2\,\delta_i(s)` (pairs of unit length: a
# pair turned by :math:`\delta` moves its dot product by at most :math:`\delta`), with
# :math:`\delta_i(s)` pair ``i``'s float32 angle error there. So
# :math:`|\text{logits}(p+s) - \text{float64}| \le 2E_0 + \sum_i 2\delta_i(s)`
# (asserted here, which also catches an error that every position shares), and the
# shifted logits differ from the unshifted ones by at most :math:`E_0` more (asserted in
# view below: the property attention relies on). The reference rotates in float64, as
# complex numbers times :math:`e^{\mathrm{i}\,p\,\omega_i}`, with :math:`\omega_i` from
# Python's ``math.pow``.
def rotate_reference(x, angles):
    """float64: x (L, Dh) times exp(1j * angles (L, Dh/2)) as complex pairs."""
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)
                              ).flatten(-2)  # (L, Dh)


def inv_freq_reference(Dh, base, device=None):
    """inv_freq_i = base ** (-2i / Dh) in float64 (RoFormer's theta_i): (Dh/2,)."""
    return torch.tensor([math.pow(base, -2 * i / Dh) for i in range(Dh // 2)],
                        dtype=torch.float64, device=device)


def unit_pairs(L, Dh, generator, device=None):
    """(L, Dh) float64 whose adjacent pairs are unit vectors at random angles."""
    phi = 2 * math.pi * torch.rand(L, Dh // 2, dtype=torch.float64,
                                   generator=generator).to(device)  # (L, Dh/2)
    return torch.stack([phi.cos(), phi.sin()], dim=-1).flatten(-2)  # (L, Dh)


# %%
# Base 500,000 (Llama 3's); 16 positions, shifted by up to 60,000; every pair of q and k
# a unit vector at a random angle.
base = 500_000.0
freqs64 = inv_freq_reference(Dh, base, device)  # (Dh/2,)
gen = torch.Generator().manual_seed(0)
L = 16
q64 = unit_pairs(L, Dh, gen, device)  # (L, Dh)
k64 = unit_pairs(L, Dh, gen, device)  # (L, Dh)
pos0 = torch.arange(L, device=device)  # (L,)
shifts = (1_000, 30_000, 60_000)  # float16 positions stay below 65520

# %%
shift_budget = {}  # per (dtype, s): the atol of the shift check, E0 + budget
for dtype in DTYPES:
    q, k = q64.to(dtype), k64.to(dtype)  # (L, Dh) each
    a0 = pos0.double()[:, None] * freqs64[None, :]  # (L, Dh/2)
    ref = (rotate_reference(q, a0) @ rotate_reference(k, a0).T).to(dtype)  # (L, L)
    # the dtype's rounding alone: float64's rotated q and k, cast, multiplied in dtype
    q0, k0 = rotate_reference(q, a0).to(dtype), rotate_reference(k, a0).to(dtype)
    E0 = ((q0 @ k0.T).double() - ref.double()).abs().max().item()
    print(f"{str(dtype):15s} E0 = {E0:.1e} (logits up to {ref.abs().max():.1f})")
    for s in shifts:
        a_s = (pos0 + s).double()[:, None] * freqs64[None, :]  # (L, Dh/2)
        d_i = (rope_angles(pos0 + s, Dh, base, torch.float32).double()
               - a_s).abs().amax(dim=0)  # (Dh/2,) delta_i(s)
        budget = 2 * E0 + 2 * d_i.sum().item()  # the model above
        ours = rope_logits_16bit(q, k, pos0 + s, Dh, base, torch.float32)  # (L, L)
        err_s = (ours.double() - ref.double()).abs().max().item()
        print(f"  s={s:6d}: vs float64 {err_s:.1e} (<= {budget:.1e}), "
              f"shift budget {E0 + budget:.1e}")
        torch.testing.assert_close(ours, ref, rtol=0, atol=budget)  # vs float64
        shift_budget[dtype, s] = E0 + budget

# %%
# The logits: relative position in 16 bits
# ----------------------------------------
# Shifting every position by ``s`` must leave the logits unchanged. With the recipe the
# logits of 16 positions (base 500,000) stay within the budget of the Proof above;
# 16-bit angles move them by :measured:`naive_shift_min:.1f` to
# :measured:`naive_shift_max:.1f`, over ten times that budget.
naive_shifts = []  # max|logits(p + s) - logits(p)| with 16-bit angles, per dtype and s
for dtype in DTYPES:
    q, k = q64.to(dtype), k64.to(dtype)  # (L, Dh) each
    at0 = rope_logits_16bit(q, k, pos0, Dh, base, torch.float32)  # (L, L)
    gaps, bads = [], []
    for s in shifts:
        atol = shift_budget[dtype, s]
        ours = rope_logits_16bit(q, k, pos0 + s, Dh, base, torch.float32)  # (L, L)
        bad = rope_logits_16bit(q, k, pos0 + s, Dh, base, dtype)
        gaps.append((ours.double() - at0.double()).abs().max().item())
        bads.append((bad.double() - at0.double()).abs().max().item())
        torch.testing.assert_close(ours, at0, rtol=0, atol=atol)  # shift
        assert bads[-1] > 10 * atol, "naive 16-bit angles keep it?"
    print(f"{str(dtype)[6:]:8s} shift moves the recipe's logits by {max(gaps):.1e}; "
          f"16-bit angles' by " + ", ".join(f"{x:.1f}" for x in bads))
    naive_shifts += bads
naive_shift_min, naive_shift_max = min(naive_shifts), max(naive_shifts)

# %%
# Proof: what each dtype rounds, and by how much
# ----------------------------------------------
#
# float16 overflows at 65520; neither holds 500,000
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# float16's largest number is 65504, and the spacing there is 32: every position from
# 65504 + 16 = 65520 up rounds to ``inf``. bfloat16 has float32's exponent range and
# never overflows on a position, but its 8 bits round Llama 3's base 500,000 (Dubey et
# al., 2024) to 499,712, and float16 cannot hold that base at all.
fmax = torch.finfo(torch.float16).max
_, e_max = math.frexp(fmax)  # 65504 = 0.9995 * 2^16
limit = fmax + 2.0 ** (e_max - significant_bits(torch.float16)) / 2  # 65520
edge = torch.tensor([limit - 1, limit], device=device)  # float32 holds both
edge16 = edge.to(torch.float16)
base_exact = torch.tensor(500_000.0, device=device)  # float32 holds it exactly
print(f"float16: {limit - 1:.0f} -> {edge16[0].item():.0f}, "
      f"{limit:.0f} -> {edge16[1].item()}; 500000 -> "
      f"{base_exact.to(torch.float16).item()} (float16), "
      f"{base_exact.to(torch.bfloat16).item():.0f} (bfloat16)")
assert edge16[0] == fmax and torch.isinf(edge16[1]), "float16 overflow moved?"
assert torch.isinf(base_exact.to(torch.float16)), "500000 fits in float16?"
assert base_exact.to(torch.bfloat16) == 499_712, "bfloat16 rounds 500000 elsewhere?"

# %%
# Integers exact up to 2^bits, then rounded once, ties to even
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
for dtype in DTYPES:
    bits = significant_bits(dtype)
    ints = torch.arange(2**bits + 2, device=device)  # (2^bits + 2,): 0 .. 2^bits + 1
    back = ints.to(dtype).to(torch.int64)
    print(f"{str(dtype):15s} {bits:2d} significant bits: integers exact up to "
          f"{2**bits}, {2**bits + 1} -> {back[-1].item()}")
    inexact = ints[back != ints].tolist()
    assert inexact == [2**bits + 1], "not exact up to 2^bits, then inexact?"
    assert back[-1] == 2**bits, "2^bits + 1 does not round (to even) to 2^bits?"
print(f"torch.float32   {significant_bits(torch.float32)} significant bits: "
      f"integers exact up to {2**24}")

# %%
# The cast rounds each position once, to the nearest multiple of its spacing (ties to
# even), checked for every position below :math:`2^{17}`: the model is computed in
# float64 from ``frexp`` (:math:`p = m\, 2^e`, :math:`m \in [0.5, 1)`), and the cast
# must match it bit for bit. The largest error in :math:`[2^{14}, 2^{15})` is half a
# spacing: 64 positions in bfloat16, 8 in float16.
_, e = torch.frexp(p64)  # p = m * 2^e, m in [0.5, 1)
for dtype in DTYPES:
    bits = significant_bits(dtype)
    spacing = torch.ldexp(torch.ones_like(p64), e - bits)  # (P,) 2^(e - bits)
    model = torch.round(p64 / spacing) * spacing  # nearest multiple, ties to even
    rounded = pos.to(dtype)  # (P,)
    fits = model <= torch.finfo(dtype).max  # float16 overflows above, see above
    # Exact: a cast is one correctly rounded operation on every device.
    torch.testing.assert_close(rounded[fits], model[fits].to(dtype), rtol=0, atol=0)
    assert torch.isinf(rounded[~fits]).all(), "a position past the largest is finite?"
    octave = (pos >= 2**14) & (pos < 2**15)
    worst = (rounded.double() - p64)[octave].abs().max().item()
    print(f"{str(dtype):15s} max|p - fl(p)| on [2^14, 2^15) = {worst:g} positions")
    assert worst == 2.0 ** (14 - bits), "not half a spacing?"  # 64 and 8

# %%
# Each dtype's angle error, within a few roundings
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every position below :math:`2^{17}`, every pair, both bases, each dtype, against
# float64.
angle64, err = {}, {}  # per base: (P, Dh/2) reference; per (base, dtype): |error|
naive0 = {}  # per (base, dtype): (P,) the 16-bit angle of the fastest pair
for base in BASES:
    inv_freq64 = inv_freq_reference(Dh, base, device)  # (Dh/2,)
    angle64[base] = p64[:, None] * inv_freq64[None, :]  # (P, Dh/2)
    inv_freq32 = rope_angles(one, Dh, base, torch.float32)[0]  # (Dh/2,)
    # float32's frequencies are float64's rounded, to float32's default tolerance
    torch.testing.assert_close(inv_freq32, inv_freq64.float())
    for dtype in (torch.float32, *DTYPES):
        angles = rope_angles(pos, Dh, base, dtype)  # (P, Dh/2)
        err[base, dtype] = angles.double().sub_(angle64[base]).abs_()  # (P, Dh/2)
        naive0[base, dtype] = angles[:, 0]

# %%
# float32 keeps the angle within a few unit roundoffs :math:`u = 2^{-24}` of
# :math:`p\,\omega_i`: the frequency (``pow`` within 4 ulps, a generous bound for a
# float32 math library, then a correctly rounded reciprocal) and the product each
# round it. That bound is :math:`10\,u\,p\,\omega_i`, below 0.08 rad for every
# position up to :math:`2^{17}`; the measured error reaches
# :measured:`rel32_max_u:.1f` u.
u32 = torch.finfo(torch.float32).eps / 2
rel32, err128k = {}, {}  # per base: max |error| / (p inv_freq), in u; max |error|, rad
for base in BASES:
    rel = (err[base, torch.float32] / angle64[base]).max().item() / u32
    at_32k = err[base, torch.float32][: 2**15].max().item()
    at_128k = err[base, torch.float32].max().item()
    print(f"float32  base {base:>7,.0f}: max|angle - float64| {at_32k:.1e} rad "
          f"(p < 32k), {at_128k:.1e} (p < 128k)")
    print(f"{'':22s} max|angle - float64| / (p inv_freq) = {rel:.2f} u")
    assert rel <= 10, "float32 angle error above 10 unit roundoffs?"
    rel32[base], err128k[base] = rel, at_128k
rel32_max_u = max(rel32.values())
err128k_500k = err128k[500_000.0]  # rad, every position below 2^17, base 500,000

# %%
# In 16 bits the same roundings (the base, ``pow``, the reciprocal, the position, the
# product) cost :math:`u = 2^{-8}` (bfloat16) or :math:`2^{-11}` (float16) each: the
# error stays within :math:`5\,u\,p\,\omega_i`, with the fastest pair
# (:math:`\omega_0 = \text{base}^0 = 1` exactly, in every dtype) carrying the whole
# rounding of the position. Its angle *is* the rounded position, so its error reaches
# half a spacing of the position in each octave, and passes :math:`\pi` (a rotation
# that points anywhere) at :math:`2^{\text{bits}+2} + 4`: position 1028 in bfloat16,
# 8196 in float16.
for base in BASES:
    for dtype in DTYPES:
        bits, u = significant_bits(dtype), torch.finfo(dtype).eps / 2
        e16 = err[base, dtype]  # (P, Dh/2)
        finite = pos < limit  # float16 positions past 65519 are inf
        first = pos[e16[:, 0] > math.pi][0].item()
        print(f"{str(dtype)[6:]:8s} base {base:>7,.0f}: max|angle - float64| "
              f"{e16[: 2**15].max().item():7.1f} rad (p < 32k), > pi from p = {first}")
        if not (dtype == torch.float16 and base == 500_000.0):  # base inf: below
            rel = (e16 / angle64[base])[finite].max().item() / u
            print(f"{'':22s} max|angle - float64| / (p inv_freq) = {rel:.2f} u")
            assert rel <= 5, "16-bit angle error above five roundings?"
        # exact: inv_freq_0 = 1, so the product does not round
        torch.testing.assert_close(naive0[base, dtype][finite], pos[finite].to(dtype),
                                   rtol=0, atol=0)
        assert first == 2 ** (bits + 2) + 4, "the error passes pi elsewhere?"

# %%
# float16 with Llama 3's base is worse than rounding: the base is ``inf``, so
# :math:`\omega_i = 1 / \infty^{2i/D_h} = 0` for every pair but the first. All other
# pairs never turn, at any position.
inv_freq16 = rope_angles(one, Dh, 500_000.0, torch.float16)[0]  # (Dh/2,)
print(f"float16, base 500,000: inv_freq = {inv_freq16[:3].tolist()} ..., "
      f"{int((inv_freq16 == 0).sum())} of {Dh // 2} are 0")
assert inv_freq16[0] == 1 and (inv_freq16[1:] == 0).all(), "float16 holds base 500000?"

# %%
# Every pair, both bases, every position below 2^17
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The error against the position: the worst pair at each position, bucketed in eighths
# of an octave. The dashed lines are half a spacing of the position in each 16-bit
# dtype, the rounding of the position alone. float16 with base 500,000 is the line on
# top (its frequencies are 0), and it ends at 65520 (dotted), where its positions are
# inf.
filled = torch.bincount(bucket, minlength=n_buckets) > 0  # below p = 8 most are empty
fig, axs = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True, layout="constrained")
colors = {torch.float32: "C0", torch.bfloat16: "C1", torch.float16: "C2"}
for ax, base in zip(axs, BASES):
    for dtype in (torch.float32, *DTYPES):
        worst_pair = err[base, dtype].amax(dim=1)  # (P,)
        worst = torch.zeros(n_buckets, dtype=torch.float64, device=device)
        worst = worst.scatter_reduce(0, bucket, worst_pair, "amax", include_self=False)
        shown = (filled & (worst > 0)).cpu()  # no empty bucket, no exact zero
        label = str(dtype).removeprefix("torch.")
        ax.loglog(x_bucket[shown], worst.cpu()[shown], color=colors[dtype], label=label)
    for dtype in DTYPES:
        e_bucket = torch.frexp(x_bucket)[1]  # exponent of each bucket's left edge
        half_spacing = torch.ldexp(torch.ones_like(x_bucket),
                                   e_bucket - significant_bits(dtype)) / 2
        ax.loglog(x_bucket, half_spacing, color=colors[dtype], ls="--", lw=0.8,
                  label=f"half the {str(dtype).removeprefix('torch.')} spacing at p")
    ax.axhline(math.pi, color="gray", lw=0.8)
    ax.axvline(limit, color=colors[torch.float16], lw=0.8, ls=":",
               label=f"float16 overflows at {limit:,.0f}")
    ax.text(1.5, math.pi * 1.3, "π", color="gray")
    ax.set_xlabel("position p")
    ax.set_title(f"base {base:,.0f}")
axs[0].set_ylabel("max over pairs |angle - float64| (rad)")
axs[0].legend(loc="upper left")  # every line and mark, named
fig.suptitle("RoPE angles in 16 bits: the error grows with p and passes π at 1028\n"
             "(bfloat16) and 8196 (float16); float32's stays below 0.08 rad to 128k")
plt.show()

# %%
# Proof: the recipe stays within its error model
# ----------------------------------------------
#
# The cos and sin tables, within the error model
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Against float64's cos and sin rounded to the dtype, for every position below
# :math:`2^{15}` and base 500,000. An error model in one line: cos and sin move by at
# most the angle's float32 error :math:`\delta` (measured here, on the same positions),
# float32's cos/sin add at most 2 ulps, and each of the two roundings to the dtype at
# most a quarter of eps (both values lie in [-1, 1]). The naive tables, angles in the
# dtype, miss by up to :measured:`naive_table_gap:.2f`.
L32k = 2**15
pos32k = torch.arange(L32k, device=device)  # (L,) positions 0 .. 32767
a64 = pos32k.double()[:, None] * freqs64[None, :]  # (L, Dh/2)
cs64 = (a64.cos(), a64.sin())
delta = (rope_angles(pos32k, Dh, base, torch.float32).double() - a64).abs().max().item()
eps32 = torch.finfo(torch.float32).eps
naive_gaps = []  # max|naive table - float64| per dtype and function
for dtype in DTYPES:
    eps = torch.finfo(dtype).eps
    atol = delta + 2 * eps32 + eps / 2  # the model above
    recipe = rope_cos_sin_16bit(pos32k, Dh, base, torch.float32, dtype)
    naive = rope_cos_sin_16bit(pos32k, Dh, base, dtype, dtype)
    for name, ours, bad, ref in zip(("cos", "sin"), recipe, naive, cs64):
        ref = ref.to(dtype)  # float64's, rounded once
        gap = (ours.double() - ref.double()).abs().max().item()
        bad_gap = (bad.double() - ref.double()).abs().max().item()
        print(f"{str(dtype):15s} {name}: recipe {gap:.1e} (model {atol:.1e}), "
              f"naive {bad_gap:.2f}")
        torch.testing.assert_close(ours, ref, rtol=0, atol=atol)
        assert bad_gap > 100 * atol, "the naive table is about right?"
        naive_gaps.append(bad_gap)
naive_table_gap = max(naive_gaps)

# %%
# So float32 is not exact either: at positions up to 32k its angle error,
# :math:`\delta =` :measured:`delta:.1e` rad, is close to bfloat16's rounding of cos
# and sin (half an eps, 3.9e-3) and :measured:`delta_over_half_eps16:.1f` times
# float16's (4.9e-4). Both recipes' tables differ from float64's by more than the
# dtype's own rounding there; the float32 one by a bounded amount, the naive one by
# anything.
half_eps16 = torch.finfo(torch.float16).eps / 2
delta_over_half_eps16 = delta / half_eps16
print(f"delta = {delta:.1e} rad; float16 rounds cos and sin to {half_eps16:.1e}: "
      f"delta is {delta_over_half_eps16:.1f} times that")
assert delta_over_half_eps16 > 2, "float32 angles finer than float16 at 32k?"

# %%
# A rotated query, within the error model
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The model: each output ``x_e cos - x_o sin`` takes the tables' error
# (:math:`\delta` + a quarter of eps, times :math:`|x_e| + |x_o| \le \sqrt 2`) and four
# roundings of at most half an eps (two products, the difference, the reference's cast):
# within :math:`2\delta + 3\,\mathrm{eps}`. At position 30000 the naive rotation is off
# by the size of the entries themselves.
pos_far = 30_000 + torch.arange(L, device=device)  # (L,) far positions
a_far = pos_far.double()[:, None] * freqs64[None, :]  # (L, Dh/2)
for dtype in DTYPES:
    q = q64.to(dtype)  # (L, Dh) the 16-bit query
    ref = rotate_reference(q, a_far).to(dtype)  # (L, Dh)
    ours = rotate_pairs(q, *rope_cos_sin_16bit(pos_far, Dh, base, torch.float32, dtype))
    bad = rotate_pairs(q, *rope_cos_sin_16bit(pos_far, Dh, base, dtype, dtype))
    atol = 2 * delta + 3 * torch.finfo(dtype).eps
    gap = (ours.double() - ref.double()).abs().max().item()
    bad_gap = (bad.double() - ref.double()).abs().max().item()
    print(f"{str(dtype):15s} |R_p q - float64|: recipe {gap:.1e} (model {atol:.1e}), "
          f"naive {bad_gap:.2f}")
    torch.testing.assert_close(ours, ref, rtol=0, atol=atol)
    assert bad_gap > 0.5, "the naive rotation is about right?"

# %%
# Proof: the rotate-half layout, and CUDA
# ---------------------------------------
#
# The rotate-half layout rounds bit for bit alike
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Llama in Hugging Face pairs channel ``i`` with ``i + Dh/2`` ("rotate half",
# :doc:`RoPE <plot_04_rope>`). In 16 bits it performs the same two products and one
# sum per entry, so after the channel permutation it is bit for bit the adjacent-pairs
# result.


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
perm = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)]).to(device)  # (Dh,)
for dtype in DTYPES:
    cos, sin = rope_cos_sin_16bit(pos_far, Dh, base, torch.float32, dtype)  # (L, Dh/2)
    q = q64.to(dtype)[:, perm]  # (L, Dh) halves layout: pair i is (i, i + Dh/2)
    cos2, sin2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)  # (L, Dh)
    halves = rope(q, cos2, sin2)  # Llama's formula
    adjacent = rotate_pairs(q64.to(dtype), cos, sin)[:, perm]  # (L, Dh)
    print(f"{str(dtype):15s} max|rotate half - adjacent pairs| = "
          f"{(halves - adjacent).abs().max().item():.1e}")
    torch.testing.assert_close(halves, adjacent, rtol=0, atol=0)  # bit for bit

# %%
# What to expect on CUDA
# ~~~~~~~~~~~~~~~~~~~~~~
# Nothing here branches on the device. Casts, products, sums and the reciprocal are
# IEEE operations, correctly rounded on CPU and CUDA alike, so the exact (``rtol=0,
# atol=0``) checks must hold on both, and no device difference is expected. ``pow``,
# ``cos`` and ``sin`` come from another math library on CUDA and may differ from the
# CPU's by an ulp or two in float32; the error models allow for that (4 ulps for
# ``pow``, 2 for cos and sin) and use the float32 angle error measured on the device
# that runs the page. This is expected, not verified: no GPU build of the book has run
# this page yet, and the ledger shows on which devices it has.

# %%
# Try it: check the norms. Can a norm check see a wrong angle?
# ------------------------------------------------------------
# Rotate the unit-pair query with the recipe and with 16-bit angles, and compare the
# length of every pair before and after.

# %%
# No: the naive rotation is still a rotation: cos and sin are rounded from one angle, so
# :math:`\cos^2 + \sin^2 = 1` to the dtype's precision and every pair keeps its length
# (checked at the dtype's default tolerance). A norm check cannot see a wrong angle.
for dtype in DTYPES:
    q = q64.to(dtype)  # (L, Dh)
    pair_len_in = q.double().reshape(L, Dh // 2, 2).norm(dim=-1)  # (L, Dh/2)
    for angle_dtype in (torch.float32, dtype):  # the recipe, the naive one
        cos, sin = rope_cos_sin_16bit(pos_far, Dh, base, angle_dtype, dtype)
        rotated = rotate_pairs(q, cos, sin)  # (L, Dh)
        pair_len = rotated.double().reshape(L, Dh // 2, 2).norm(dim=-1)  # (L, Dh/2)
        torch.testing.assert_close(pair_len.to(dtype), pair_len_in.to(dtype))

# %%
# Try it: float16 angles at position 65520. What do cos and sin give?
# -------------------------------------------------------------------
# Build the naive float16 tables for positions 65519 and 65520.

# %%
# Position 65520 and beyond do not exist in float16: the naive angle is ``inf`` and its
# cos is NaN, which propagates to every logit that touches it.
edge_pos = torch.tensor([65_519, 65_520], device=device)  # last finite, first inf
cos_nan, _ = rope_cos_sin_16bit(edge_pos, Dh, 10_000.0, torch.float16, torch.float16)
print(f"float16 angles, cos at p = 65519 and 65520: {cos_nan[:, 0].tolist()}")
assert not cos_nan[0].isnan().any() and cos_nan[1].isnan().all(), "no NaN at 65520?"

# %%
# References
# ----------
# :footcite:t:`Su2021`; :footcite:t:`Dubey2024`, for the base
# 500,000. ``torch.finfo``, ``torch.frexp``, ``torch.ldexp``,
# ``torch.polar``, ``torch.Tensor.scatter_reduce``.
#
# .. footbibliography::
