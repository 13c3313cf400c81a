"""
Large bases and long positions
==============================

Long-context models raise RoPE's base (Llama 3: 500,000; RoFormer: 10,000), so fewer
pairs complete a turn within the context. Long positions cost precision: a float32
angle near a million tokens is off by hundredths of a radian unless reduced modulo
``2 pi`` in float64 first.

**You will learn**

- how the base sets the slowest pair's wavelength, ``2 pi base ** ((Dh - 2) / Dh)``
- how many pairs complete a turn within ``L`` tokens, in closed form
- what a float32 angle loses at positions near a million, and why (an error model)
- how reducing the angle in float64 before the cast keeps cos and sin exact to float32

**Prerequisites:** :doc:`/generated/positional/plot_04_rope` (RoPE's frequencies),
:doc:`/generated/transformer/plot_11_llama_decoder_layer` (Llama's rotary embedding).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import math

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

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
# Pair ``i`` turns by ``inv_freq[i]`` (RoFormer's :math:`\theta_i`) per token, so it
# completes one turn every
#
# .. math::
#
#    \lambda_i = \frac{2\pi}{\theta_i} = 2\pi\, \text{base}^{2i/D_h}
#    \quad\text{tokens}, \qquad
#    \lambda_{D_h/2 - 1} = 2\pi\, \text{base}^{(D_h - 2)/D_h}.
#
# Left: the slowest wavelength against the base, the contexts as dashed lines. Right:
# the pairs that complete a turn within ``L`` tokens (``Dh = 128``).
Dh_fig = 128
base_grid = torch.logspace(3, 7, 200, dtype=torch.float64)  # bases 1e3 .. 1e7
slowest_grid = 2 * math.pi * base_grid ** ((Dh_fig - 2) / Dh_fig)  # (200,) tokens
contexts_fig = {4_096: "4k", 8_192: "8k", 32_768: "32k", 131_072: "128k", 2**20: "1M"}
L_fig = [2**k for k in range(8, 21)]  # 256 .. 1M tokens
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
ax0.loglog(base_grid, slowest_grid, color="C0")
for L_line, name in contexts_fig.items():
    ax0.axhline(L_line, color="gray", lw=0.8, ls="--")
    ax0.text(1.5e6, L_line * 1.1, f"L = {name}", color="gray", fontsize=8)
for base_fig in (10_000.0, 500_000.0, 1_000_000.0):
    ax0.plot(base_fig, 2 * math.pi * base_fig ** ((Dh_fig - 2) / Dh_fig), "o",
             label=f"base {base_fig:,.0f}")
    inv_freq_fig = base_fig ** (-torch.arange(0, Dh_fig, 2, dtype=torch.float64)
                                / Dh_fig)  # (Dh/2,)
    n_fig = [int((L_ * inv_freq_fig >= 2 * math.pi).sum()) for L_ in L_fig]
    ax1.semilogx(L_fig, n_fig, "o-", label=f"base {base_fig:,.0f}")
ax0.set_xlabel("base")
ax0.set_ylabel("slowest wavelength (tokens)")
ax0.legend(loc="upper left")
ax0.set_title("the slowest wavelength grows with the base:\n"
              "base 500k puts it above every context up to 1M")
ax1.set_xlabel("context length L (tokens)")
ax1.set_ylabel(f"pairs (of {Dh_fig // 2}) with a full turn within L")
ax1.legend(loc="upper left")
ax1.set_title("a larger base leaves more pairs\nbelow one turn at every L")
plt.show()

# %%
# From scratch: the wavelengths
# -----------------------------
# The frequencies as Llama's code computes them (``rope_inv_freq``), here in float64,
# the wavelengths checked against the formula evaluated with Python's ``math.pow``.
Dh = 128  # Llama's head width
BASES = (10_000.0, 500_000.0, 1_000_000.0)
wavelength = {}  # per base: (Dh/2,) float64 wavelengths in tokens
slowest_wl = {}  # per base: the slowest pair's wavelength, checked against the formula
for base in BASES:
    inv_freq = rope_inv_freq(Dh, base, torch.float64).to(device)  # (Dh/2,)
    wavelength[base] = 2 * math.pi / inv_freq  # (Dh/2,)
    formula = torch.tensor([2 * math.pi * math.pow(base, 2 * i / Dh)
                            for i in range(Dh // 2)],
                           dtype=torch.float64, device=device)  # (Dh/2,)
    slowest = 2 * math.pi * math.pow(base, (Dh - 2) / Dh)
    print(f"base {base:>9,.0f}: slowest wavelength "
          f"{wavelength[base][-1].item():>12,.0f} tokens (formula {slowest:,.0f})")
    torch.testing.assert_close(wavelength[base], formula)  # float64 tolerances
    assert wavelength[base][-1].item() == max(wavelength[base].tolist()), "not last?"
    torch.testing.assert_close(wavelength[base][-1].item(), slowest)
    slowest_wl[base] = wavelength[base][-1].item()

# %%
# The float32 angle at a million
# ------------------------------
# Implementations (Llama's in Hugging Face 5.23; 16 bits are hopeless,
# :doc:`RoPE in 16 bits <plot_16_rope_16bit>`) build the angle table in float32, with
# one product: the float32 frequency :math:`\hat\theta_i`, a few
# :doc:`ulps </generated/normalization/plot_16_norms_16bit>` off, times the cast
# position (exact up to :math:`2^{24}`), rounded by at most half an ulp:
#
# .. math::
#
#    |\mathrm{fl}(p\,\hat\theta_i) - p\,\theta_i| \le p\,|\hat\theta_i - \theta_i| +
#    \tfrac12\,\mathrm{ulp}(\mathrm{fl}(p\,\hat\theta_i)).
#
# Both grow with ``p``: an ulp of an angle in :math:`[2^{19}, 2^{20})` is
# :math:`2^{-4}` rad. The fastest pair is exact (:math:`\theta_0 = 1`: its angle is the
# position). The reference is float64 (:math:`\theta_i` from ``math.pow``), whose own
# error, four float64 eps of the angle, is added to the model.
gen = torch.Generator().manual_seed(0)
pos = torch.cat([torch.arange(1, 2**12),  # every small position
                 torch.randint(2**12, 2**20, (2**16,), generator=gen),
                 torch.arange(2**20 - 64, 2**20)])
pos = pos.unique().to(device)  # (P,) sorted
assert pos.numel() < 2**17  # the sample stays small: 4095 + at most 2^16 + 64 positions
p64 = pos.double()  # (P,) exact
near = pos >= 2**20 - 64  # (P,) the last 64 positions, up to 2^20 - 1
eps64, eps32 = torch.finfo(torch.float64).eps, torch.finfo(torch.float32).eps
angle64, err32, model = {}, {}, {}  # per base: (P, Dh/2)
parts = {}  # per base: what the Proof below checks piece by piece
for base in (10_000.0, 500_000.0):
    theta64 = torch.tensor([math.pow(base, -2 * i / Dh) for i in range(Dh // 2)],
                           dtype=torch.float64, device=device)  # (Dh/2,)
    theta32 = rope_inv_freq(Dh, base).to(device)  # (Dh/2,) float32, as models do
    angle32 = pos.to(torch.float32)[:, None] * theta32[None, :]  # (P, Dh/2)
    angle64[base] = p64[:, None] * theta64[None, :]  # (P, Dh/2)
    err32[base] = (angle32.double() - angle64[base]).abs()  # (P, Dh/2)
    half_ulp = (torch.nextafter(angle32, torch.tensor(math.inf, device=device))
                - angle32).double() / 2  # (P, Dh/2)
    theta_term = p64[:, None] * (theta32.double() - theta64).abs()[None, :]
    model[base] = theta_term + half_ulp + 4 * eps64 * angle64[base]
    rel = ((theta32.double() - theta64) / theta64).abs()  # (Dh/2,)
    print(f"base {base:>7,.0f}: p near 2^20: max err {err32[base][near].max():.3f} "
          f"rad, model {model[base][near].max():.3f}")
    assert (err32[base] <= model[base]).all(), "an angle outside the error model?"
    assert err32[base][near].max() > 0.03, "float32 angles at 1M within 0.03 rad?"
    parts[base] = (theta64, theta32, angle32, rel, theta_term, half_ulp)

# %%
# The remedy: reduce in float64, then cast
# ----------------------------------------
# cos and sin only need the angle modulo :math:`2\pi`: reduce it in float64
# (``torch.remainder``), then cast; the reduced angle rounds by at most :math:`2^{-22}`
# rad, and float32's cos and sin of it stay within that plus two ulps of float64's
# (``math.cos`` and ``math.sin`` on a sample of the angles; another route, in a Proof),
# for one float64 table per length.
base = 500_000.0
sample = torch.arange(0, pos.numel(), 64, device=device)  # (P/64,) every 64th position
a_s = angle64[base][sample]  # (P/64, Dh/2) float64 angles
ref = torch.tensor([[math.cos(a), math.sin(a)] for a in a_s.flatten().tolist()],
                   dtype=torch.float64, device=device).reshape(*a_s.shape, 2)
reduced = torch.remainder(a_s, 2 * math.pi).to(torch.float32)  # (P/64, Dh/2), [0, 2pi)
results = {"reduced in float64": torch.stack([reduced.cos(), reduced.sin()], dim=-1)}
gap = {}
gap_reduced = gap["reduced in float64"] = (results["reduced in float64"].double()
                                           - ref).abs().max().item()
print(f"reduced in float64 : max|cos, sin - float64| = {gap_reduced:.1e} "
      f"({gap_reduced / eps32:,.1f} eps32)")
# one rounding of the reduced angle (<= 2^-22 rad) and cos/sin within an ulp or two
torch.testing.assert_close(results["reduced in float64"].double(), ref, rtol=0,
                           atol=2 ** -22 + 2 * eps32)


# %%
# Proof: the slowest pair against the context length
# ---------------------------------------------------
# With base 10,000 the slowest pair completes a turn in
# :measured:`slowest_10k:,.0f` tokens, so at 128k tokens (Llama 3.1's context, Dubey et
# al., 2024) even the slowest pair has turned :measured:`turns_128k_10k:.2f` times and
# no pair stays below one turn. Llama 3's base 500,000 puts the slowest wavelength at
# :measured:`slowest_500k:,.0f` tokens, base 1,000,000 at
# :measured:`slowest_1m:,.0f`: below one turn at every context up to :math:`2^{20}`.
slowest_10k = slowest_wl[10_000.0]
slowest_500k = slowest_wl[500_000.0]
slowest_1m = slowest_wl[1_000_000.0]
CONTEXTS = {4_096: "4k", 8_192: "8k", 32_768: "32k", 131_072: "128k", 2**20: "1M"}
below = {}  # per base: the contexts over which the slowest pair turns less than once
turns_at = {}  # per base: {context: turns of the slowest pair}
for base in BASES:
    turns = [L / wavelength[base][-1].item() for L in CONTEXTS]
    turns_at[base] = dict(zip(CONTEXTS, turns))
    below[base] = [L for L, t in zip(CONTEXTS, turns) if t < 1]
    print(f"base {base:>9,.0f}, slowest pair's turns: "
          + ", ".join(f"{CONTEXTS[L]} {t:.2f}" for L, t in zip(CONTEXTS, turns)))
assert below[10_000.0] == [4_096, 8_192, 32_768], "base 10k: another boundary?"
assert below[500_000.0] == list(CONTEXTS), "base 500k turns within 1M?"
assert below[1_000_000.0] == list(CONTEXTS), "base 1M turns within 1M?"
turns_128k_10k = turns_at[10_000.0][131_072]
assert turns_128k_10k > 2, "base 10k: the slowest pair turns less than twice in 128k?"

# %%
# Proof: how many pairs turn at least once within ``L`` tokens
# ------------------------------------------------------------
# Pair ``i`` completes a turn within ``L`` tokens when :math:`L\theta_i \ge 2\pi`,
# i.e. :math:`i \le \tfrac{D_h}{2}\log_{\text{base}}(L / 2\pi)`. The count is the
# closed form
# :math:`n(L) = \lfloor \tfrac{D_h}{2}\log_{\text{base}}(L/2\pi) \rfloor + 1`
# (clipped to :math:`[0, D_h/2]`); the remaining pairs see less than one period during
# training at length ``L``. Liu et al. call the boundary the critical dimension
# (Liu et al., 2023); Xiong et al. (2023) raise the base to 500,000 for long contexts.
# The count from the frequencies is checked against the closed form at every ``L``
# below.
L_grid = [2**k for k in range(8, 21)] + [4, 3_000, 100_000, 1_000_000]  # 4 < 2 pi
n_turn = {}  # per base: list of counts over L_grid
for base in BASES:
    inv_freq = rope_inv_freq(Dh, base, torch.float64).to(device)  # (Dh/2,)
    counted = [int((L * inv_freq >= 2 * math.pi).sum()) for L in L_grid]
    closed = [min(Dh // 2, max(0, math.floor(Dh / 2 * math.log(L / (2 * math.pi))
                                             / math.log(base)) + 1)) for L in L_grid]
    n_turn[base] = counted
    print(f"base {base:>9,.0f}, pairs (of {Dh // 2}) with a full turn within 8k: "
          f"{counted[L_grid.index(8192)]:2d}, 128k: "
          f"{counted[L_grid.index(131_072)]:2d}, 1M: {counted[-1]:2d}")
    assert counted == closed, "the count is not the closed form?"
assert n_turn[10_000.0][L_grid.index(8192)] == 50, "base 10k, 8k: 50 pairs?"
assert n_turn[500_000.0][L_grid.index(8192)] == 35, "base 500k, 8k: 35 pairs?"
assert n_turn[10_000.0][L_grid.index(4)] == 0, "a turn within 4 tokens?"

# %%
# Proof: the error model, at every position and piece by piece
# ------------------------------------------------------------
# The float32 frequencies' relative error, the fastest pair's exact angle, and what the
# chapter quotes near :math:`2^{20}`: each base's worst angle error and the model's
# two terms there.
freq_rel, err_near, terms = {}, {}, {}  # per base: in eps32; rad; (rad, rad)
for base in (10_000.0, 500_000.0):
    _, _, _, rel, theta_term, half_ulp = parts[base]
    print(f"base {base:>7,.0f}: |theta32 / theta - 1| <= {rel.max() / eps32:.2f} eps32 "
          f"(mean {rel.mean() / eps32:.2f}); pair 0's angle error: "
          f"{err32[base][:, 0].max():.0f}")
    assert (err32[base][:, 0] == 0).all(), "the fastest pair's angle is not exact?"
    freq_rel[base] = (rel.max() / eps32).item()
    err_near[base] = err32[base][near].max().item()
    terms[base] = (theta_term[near].max().item(), half_ulp[near].max().item())
freq_rel_max = max(freq_rel.values())  # in eps32, printed above
err_near_10k, err_near_500k = err_near[10_000.0], err_near[500_000.0]
term_min = min(min(t) for t in terms.values())
term_max = max(max(t) for t in terms.values())

# %%
# The worst float32 angle error over the pairs at each position, bucketed
# in eighths of an octave, against the error model and half an ulp of the angle.
bucket = (8 * torch.log2(p64)).floor().long()  # (P,)
n_buckets = int(bucket.max()) + 1
x_bucket = 2.0 ** (torch.arange(n_buckets, dtype=torch.float64) / 8)  # left edges
filled = (torch.bincount(bucket, minlength=n_buckets) > 0).cpu()
fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
for color, base in (("C0", 10_000.0), ("C1", 500_000.0)):
    for values, ls, what in ((err32[base], "-", "float32 angle"),
                             (model[base], "--", "model")):
        worst = torch.zeros(n_buckets, dtype=torch.float64, device=device)
        worst = worst.scatter_reduce(0, bucket, values.amax(dim=1), "amax",
                                     include_self=False).cpu()
        shown = filled & (worst > 0)
        ax.loglog(x_bucket[shown], worst[shown], color=color, ls=ls,
                  label=f"{what}, base {base:,.0f}")
ax.axhline(eps32, color="gray", lw=0.8, ls=":")
ax.text(1e3, eps32 * 0.5, "float32 eps (the reduced route's cos/sin)", color="gray",
        fontsize=8, va="top")
ax.set_xlabel("position p")
ax.set_ylabel("max over pairs |angle - float64| (rad)")
ax.legend(loc="upper left", fontsize=8)
ax.set_title(f"float32 angles lose {min(err_near.values()):.3f} to "
             f"{max(err_near.values()):.3f} rad near p = 2^20,\n"
             "within the model (frequency rounding x p + half an ulp)")
plt.show()

# %%
# The model rests on four facts, checked per base: the float64 reference frequencies
# are ``rope_inv_freq``'s; the float32 product is one correctly rounded operation; the
# float32 frequencies are within ``pow``'s budget of ulps (the math library's, then a
# correctly rounded reciprocal: :math:`|\hat\theta_i / \theta_i - 1| \le (k + 1/2)
# \epsilon / (1 - k \epsilon)`), yet rounded; and both terms matter near :math:`2^{20}`,
# so that the model is tight.
# float32 pow's error in ulps: CUDA's documented maximum for powf (CPU libraries such
# as glibc document 1); the exponents 2i/Dh and the bases are exact in float32
POW_ULPS = 4
freq_bound = (POW_ULPS + 0.5) * eps32 / (1 - POW_ULPS * eps32)
for base in (10_000.0, 500_000.0):
    theta64, theta32, angle32, rel, theta_term, half_ulp = parts[base]
    inv_freq64 = rope_inv_freq(Dh, base, torch.float64).to(device)  # (Dh/2,)
    torch.testing.assert_close(theta64, inv_freq64)
    # the product is one correctly rounded operation: float64's exact product, rounded
    exact = (p64[:, None] * theta32.double()[None, :]).to(torch.float32)  # (P, Dh/2)
    torch.testing.assert_close(angle32, exact, rtol=0, atol=0)
    assert rel.max() <= freq_bound, "float32 frequencies outside pow's budget?"
    assert rel.mean() > 0.1 * eps32, "float32 frequencies exact?"  # rounded, printed
    # both terms matter: the frequency's rounding times p is about the half ulp
    print(f"base {base:>7,.0f}: terms near 2^20: p |theta32 - theta| "
          f"{theta_term[near].max():.3f}, half ulp {half_ulp[near].max():.3f}")
    assert theta_term[near].max() > 0.25 * half_ulp[near].max(), "tiny?"
    # the model is tight: the worst angle near 2^20 reaches half the model's worst
    assert err32[base][near].max() > 0.5 * model[base][near].max(), "model loose?"

# %%
# The chapter quotes the range of these terms near :math:`2^{20}`: half an ulp is
# :math:`2^{-5}` rad for both bases, and the two frequency terms fall on either side.
print(f"terms near 2^20: {term_min:.4f} to {term_max:.4f} rad (2^-5 = {2**-5:.4f})")
assert all(ulp == 2**-5 for _, ulp in terms.values()), "half an ulp is not 2^-5?"
assert term_min == terms[10_000.0][0] and term_max == terms[500_000.0][0]
assert term_min < 2**-5 < term_max, "the frequency terms no longer straddle 2^-5?"

# %%
# Proof: the other route, torch.polar cast to complex64
# -----------------------------------------------------
# ``torch.polar`` on the float64 angles, cast to ``complex64``, rounds cos and sin once:
# within half an ulp of float32.
polar = torch.polar(torch.ones_like(a_s), a_s).to(torch.complex64)  # (P/64, Dh/2)
results["polar in float64"] = torch.view_as_real(polar)  # (P/64, Dh/2, 2)
gap_polar = gap["polar in float64"] = (results["polar in float64"].double()
                                       - ref).abs().max().item()
print(f"polar in float64   : max|cos, sin - float64| = {gap_polar:.1e} "
      f"({gap_polar / eps32:,.1f} eps32)")
torch.testing.assert_close(results["polar in float64"].double(), ref, rtol=0,
                           atol=eps32 / 2)  # one rounding of values in [-1, 1]

# %%
# Proof: what changes on CUDA
# ---------------------------
# Nothing branches on the device. The cast of the positions, the product, the
# reciprocal and the remainder are correctly rounded on CPU and CUDA; ``cos`` and
# ``sin`` come from another math library on CUDA. ``rope_inv_freq`` computes the
# frequencies on the CPU, whatever the device; the bound on them still allows the 4
# ulps that CUDA documents for float32 ``powf`` (not correctly rounded; this build
# measures at most :measured:`freq_rel_max:.2f` eps with the reciprocal), for a model
# that computes them on the GPU. The cos/sin tolerances allow two ulps. This is
# expected, not verified: no GPU build of the book has run this page yet; the ledger
# shows on which devices it has.

# %%
# Try it: cast the float64 angle to float32. Are cos and sin fixed?
# -----------------------------------------------------------------
# Compute the angles in float64, cast them to float32 unreduced, and take cos and sin.

# %%
# No: the cast alone rounds the angle to a multiple of :math:`2^{-4}` near
# :math:`8 \times 10^5`, and cos and sin inherit the error.
cast = a_s.to(torch.float32)  # (P/64, Dh/2) the float64 angle, cast
cs_cast = torch.stack([cast.cos(), cast.sin()], dim=-1)  # (P/64, Dh/2, 2)
gap_cast = (cs_cast.double() - ref).abs().max().item()
print(f"cast to float32    : max|cos, sin - float64| = {gap_cast:.1e} "
      f"({gap_cast / eps32:,.1f} eps32)")
assert gap_cast > 1e5 * eps32, "the cast angle keeps cos and sin?"
# and no more than the cast's rounding: half an ulp of an angle below 2^20, 2^-5 rad,
# which moves cos and sin by at most as much, plus float32's cos/sin (two eps)
assert gap_cast <= 2**-5 + 2 * eps32, "the cast angle off by more than its rounding?"

# %%
# References
# ----------
# :footcite:t:`Su2021`; :footcite:t:`Dubey2024`; :footcite:t:`Xiong2023`;
# :footcite:t:`Liu2023`. ``torch.nextafter``,
# ``torch.remainder``, ``torch.polar``, ``torch.Tensor.scatter_reduce``.
#
# .. footbibliography::
