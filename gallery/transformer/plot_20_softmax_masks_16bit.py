"""
Softmax and masks in 16 bits
============================

A mask is a number added to the logits, and in 16 bits numbers run out: ``-1e9``
overflows float16 to ``-inf``, ``finfo.min`` plus a logit can overflow too, and
``-1e4`` stops masking once logits come near ten thousand. This page measures each mask
value in float32, bfloat16 and float16 against the ``-inf`` mask, and what a fully
masked row returns (NaN, zeros or a uniform average, depending on who computes it).

**You will learn**

- why a finite mask value is exact only while ``exp`` of the masked logit underflows
- how ``-1e9``, ``finfo.min`` and ``-1e4`` are stored, and where each fails
- what a fully masked row returns in naive code, ``torch.softmax`` and SDPA
- why unscaled ``q @ k.T`` overflows float16, and what bfloat16 pays in precision

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention` (the causal
mask), :doc:`/generated/normalization/plot_16_norms_16bit` (float16 and bfloat16),
:doc:`/generated/transformer/plot_13_sdpa_backends_flex` (SDPA).
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
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The causal mask (``True`` where a query may attend), copied verbatim from
# :doc:`/generated/transformer/plot_04_causal_attention`.


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# %%
# The idea
# --------
# A mask adds :math:`m_j = 0` to a kept logit and a constant :math:`c` (``-inf``,
# ``finfo.min``, ``-1e4``, ``-1e9``) to a masked one, and the softmax does the rest:
#
# .. math::
#
#    p_j = \frac{e^{z_j + m_j - \max_k (z_k + m_k)}}{\sum_k e^{z_k + m_k
#    - \max_k (z_k + m_k)}}, \qquad
#    p_j^{\text{masked}} = 0 \iff
#    \mathrm{round}\big(e^{\,\mathrm{round}(s) + \mathrm{round}(c) - \max}\big) = 0 .
#
# A finite :math:`c` masks exactly only while ``exp(s + c)`` underflows in the dtype.
# With :math:`c = -10^4` (one key kept at 0, three masked at :math:`s`) the masked keys
# take weight once :math:`s` nears :math:`10^4`, in every dtype:
s_scan = torch.arange(9700.0, 10100.0, 1.0, dtype=torch.float64)  # masked logits s
rows_scan = torch.zeros(len(s_scan), 4, dtype=torch.float64)
rows_scan[:, 1:] = s_scan[:, None]  # key 0 kept at 0, keys 1..3 masked at s
idea_leak = {}  # dtype -> (len(s_scan),): the weight on the masked keys
fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
for dt in (torch.float32, torch.bfloat16, torch.float16):
    add = torch.tensor([0.0, -1e4, -1e4, -1e4]).to(device, dt)  # (4,): the mask
    p_scan = torch.softmax(rows_scan.to(device, dt) + add, dim=-1)  # (len(s_scan), 4)
    idea_leak[dt] = p_scan[:, 1:].sum(dim=-1).double().cpu()
    ax.semilogy(s_scan, idea_leak[dt].clamp_min(1e-46),
                label=f"{dt}".replace("torch.", ""))
idea_margin = 1e4 - min(s_scan[leak > 0][0].item() for leak in idea_leak.values())
ax.axvline(1e4, color="gray", lw=0.8, ls="--")
ax.set_xlabel("logit s of the masked keys (kept key at 0), mask -1e4 added")
ax.set_ylabel("weight on masked keys")
ax.set_ylim(1e-46, 2)
ax.legend()
ax.set_title(f"-1e4 masks exactly until masked logits come within {idea_margin:.0f} "
             "of 1e4")
plt.show()
# %%
# From scratch
# ------------
# A softmax with a mask value, and a float64 reference that uses no mask.
def kept_softmax64(z):
    """Row i: float64 softmax of z[i, :i+1], zeros after; no mask involved."""
    out = torch.zeros(z.shape, dtype=torch.float64, device=z.device)
    for i in range(z.shape[-1]):
        out[i, : i + 1] = torch.softmax(z[i, : i + 1].double(), dim=-1)
    return out


def masked_softmax(z, keep, value):
    """softmax(z + mask) with `value` where keep is False; z (..., L, L)."""
    mask = torch.where(keep, 0.0, value).to(z.dtype)  # float32, rounded to z's dtype
    return torch.softmax(z + mask, dim=-1)


# %%
# Attention itself, naive: every step in the inputs' dtype.
def naive_attention(q, k, v, keep, value):
    """softmax(q k^T / sqrt(Dh) + mask) v, all in q's dtype; q, k, v (B, Nh, L, Dh)."""
    z = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, Nh, L, L)
    z = z.masked_fill(~keep, value)
    m = z.amax(dim=-1, keepdim=True)
    e = torch.exp(z - m)
    return (e / e.sum(dim=-1, keepdim=True)) @ v  # (B, Nh, L, Dh)

# %%
# Partially masked rows: all masks agree
# --------------------------------------
# With a key kept, ``exp(masked - max)`` underflows to exactly 0 for every mask value
# while the logits are moderate (here ``|z| <= 8``). The reference is ``kept_softmax64``
# of the same 16-bit logits, rounded once: torch.testing's defaults for the dtype.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LOW = (torch.bfloat16, torch.float16)
FINITE = (-1e4, -1e9)  # the finite masks besides finfo.min, as code writes them
L = 16  # a power of two: a uniform row's weights 1/L are exact in every dtype
g = torch.Generator().manual_seed(1)
z64 = 4 * torch.randn(L, L, generator=g, dtype=torch.float64).clamp(-2, 2)  # (L, L)
z64, keep = z64.to(device), causal_mask(L, device)  # keep (L, L): True = attend

for dt in LOW:
    z = z64.to(dt)
    ref64 = kept_softmax64(z)  # (L, L)
    ref = ref64.to(dt)
    errs = []  # max|p - float64 reference| per mask value
    for value in (float("-inf"), torch.finfo(dt).min, *FINITE):
        p = masked_softmax(z, keep, value)  # (L, L)
        errs.append(f"{(p.double() - ref64).abs().max().item():.1e}")
        torch.testing.assert_close(p, ref)  # defaults for dt: one rounding of p
        assert (p[~keep] == 0).all()  # exactly zero, not just small
    print(f"{str(dt)[6:]:8s} masks -inf, finfo.min, -1e4, -1e9: max|p - ref| "
          f"{' '.join(errs)}")

# %%
# A fully masked row
# ------------------
# A query whose every key is masked (a padding query, an empty window) has no valid
# softmax. With ``-inf`` the naive softmax computes ``exp(-inf - (-inf))``: NaN, and so
# does ``torch.softmax``, in that row only (row 3 here). What ``finfo.min`` and SDPA
# return instead is proved below.
B, Nh, Dh = 1, 2, 8
g = torch.Generator().manual_seed(2)
q64, k64, v64 = (torch.randn(B, Nh, L, Dh, generator=g, dtype=torch.float64)
                 for _ in range(3))  # each (B, Nh, L, Dh)
# 3 q: sharp rows, the unmasked output is far from the mean of v
q64, k64, v64 = 3 * q64.to(device), k64.to(device), v64.to(device)
dead = 3  # the fully masked query
keep_full = keep.clone()
keep_full[dead] = False  # (L, L)
nan_rows = []
for dt in DTYPES:
    q, k, v = q64.to(dt), k64.to(dt), v64.to(dt)
    z = (q @ k.transpose(-2, -1) / Dh ** 0.5).masked_fill(~keep_full, float("-inf"))
    naive = naive_attention(q, k, v, keep_full, float("-inf"))
    soft = torch.softmax(z, dim=-1)
    nan_rows.append(f"{str(dt)[6:]} {naive[..., dead, :].isnan().all().item()} "
                    f"{soft[..., dead, :].isnan().all().item()}")
    assert naive[..., dead, :].isnan().all() and soft[..., dead, :].isnan().all()
    assert not naive[..., :dead, :].isnan().any()  # only that row
print(f"-inf mask, row {dead} all NaN? (naive, torch.softmax):", *nan_rows,
      sep="\n    ")

# %%
# Proof: how each dtype stores, fills and adds the mask values
# ------------------------------------------------------------
# float16 keeps 5 exponent bits (largest finite ``65504``), bfloat16 keeps float32's 8
# with a 7-bit mantissa (so ``-1e4`` is stored as ``-9984``). ``-1e9`` does not fit in
# float16: it *is* ``-inf`` there.
for dt in DTYPES:
    fi = torch.finfo(dt)
    stored = {c: torch.tensor(c, dtype=dt, device=device).item() for c in FINITE}
    print(f"{str(dt):15s} finfo.min {fi.min:11.4e}  -1e4 -> {stored[-1e4]:8.0f}  "
          f"-1e9 -> {stored[-1e9]:.4e}")
neg = {dt: {c: torch.tensor(c, dtype=dt, device=device) for c in FINITE}
       for dt in DTYPES}
assert neg[torch.float16][-1e9].isinf()  # float16(-1e9) = -inf
assert neg[torch.bfloat16][-1e9].item() == -998244352.0  # finite, 8 bits of mantissa
assert neg[torch.bfloat16][-1e4].item() == -9984.0  # bfloat16's -1e4 is -9984
assert neg[torch.float16][-1e4].item() == -1e4  # float16 stores -1e4 exactly

# %%
# ``masked_fill`` refuses the overflow instead of rounding it (so the masks of this page
# are built in float32 with ``torch.where`` and then rounded with ``.to(dtype)``).
try:
    torch.zeros(2, dtype=torch.float16, device=device).masked_fill(
        torch.tensor([True, False], device=device), -1e9)
except RuntimeError as err:
    print(f"float16 masked_fill(-1e9): RuntimeError:\n    {err}")
else:
    raise AssertionError("expected masked_fill(-1e9) to refuse float16")

# %%
# Hugging Face fills masked logits with ``finfo(dtype).min``. Whatever is then *added*
# to it is rounded at ``finfo.min``'s spacing: ``2**5 = 32`` in float16, so a logit of
# ``-16`` or less pushes it to ``-inf`` and one of ``+16`` moves it to ``-65472``. In
# bfloat16 and float32 the spacing there is ``2**120`` and ``2**104``: any real logit
# vanishes. Two masks added together (causal + padding) overflow in every dtype.
for dt in DTYPES:
    fi = torch.finfo(dt)
    m = torch.tensor(fi.min, dtype=dt, device=device)
    spacing = fi.eps * 2.0 ** math.floor(math.log2(fi.max))  # one ulp at finfo.min
    got = {z: (m + z).item() for z in (-16.0, -15.0, 16.0)}
    named = {z: "min" if x == fi.min else f"{x:g}" for z, x in got.items()}
    print(f"{str(dt)[6:]:9s} ulp(min) {spacing:.0e}: min-16 -> {named[-16.0]}, "
          f"min-15 -> {named[-15.0]}, min+16 -> {named[16.0]}, 2 min -> {m + m:g}")
    assert (m + m).isinf()  # two finfo.min masks added: -inf in every dtype
    if dt == torch.float16:
        assert spacing == 32  # the masked logit moves to -inf or by one spacing:
        assert named == {-16.0: "-inf", -15.0: "min", 16.0: "-65472"}
    else:
        assert set(named.values()) == {"min"}  # every logit absorbed

# %%
# Proof: where ``-1e4`` leaks, predicted point by point
# -----------------------------------------------------
# ``-1e4`` is added, so a masked logit ``s`` becomes ``s - 1e4``. One kept key at logit
# 0 and three masked keys at logit ``s``: the masked weight is exactly 0 while
# ``exp(s - 1e4)`` underflows, and the whole row is wrong once ``s`` nears ``1e4``. The
# softmax kernel computes ``exp`` in float32 and rounds each weight to the dtype, so
# the leak starts where ``round_dt(exp(round_dt(s) + round_dt(-1e4)))`` leaves 0: that
# model, computed in float64, predicts every point of the scan on CPU. The float32 leak
# starts at ``exp(-103)``, its smallest subnormal; float16's weights cannot be smaller
# than ``2**-24``, so the leak appears only ``16`` below ``1e4``; bfloat16 rounds ``s``
# to steps of 64 and ``-1e4`` to ``-9984``, so it leaks first (the idea's figure).
s_grid = torch.arange(9700.0, 10100.0, 1.0, dtype=torch.float64)  # masked logits
row64 = torch.zeros(len(s_grid), 4, dtype=torch.float64)
row64[:, 1:] = s_grid[:, None]  # key 0 kept at 0, keys 1..3 masked at s
row_keep = torch.tensor([True, False, False, False])
leaks, first = {}, {}
for dt in DTYPES:
    rows = row64.to(device, dt)
    p = masked_softmax(rows, row_keep.to(device), -1e4)  # (len(s_grid), 4)
    p_inf = masked_softmax(rows, row_keep.to(device), float("-inf"))
    leak = p[:, 1:].sum(dim=-1).double().cpu()  # weight on the masked keys
    leaks[dt] = leak
    x = s_grid.to(dt).double() + torch.tensor(-1e4, dtype=dt).double()  # exact sum
    model = torch.exp(x).to(dt) > 0  # each masked weight, rounded once
    i_leak = int((leak > 0).nonzero()[0])
    i_kept = int((p[:, 0] != 1).nonzero()[0])
    first[dt] = s_grid[i_leak].item()
    assert torch.equal(leak, idea_leak[dt])  # the idea's figure is this scan
    print(f"{str(dt)[6:]:9s} masked weight > 0 from s = {s_grid[i_leak]:.0f} "
          f"({leak[i_leak]:.1e}), kept < 1 from {s_grid[i_kept]:.0f}, "
          f"at 1e4: {leak[s_grid == 1e4].item():.2f}")
    torch.testing.assert_close(p[: i_leak], p_inf[: i_leak], rtol=0, atol=0)
    assert leak[s_grid == 1e4].item() >= 0.5  # masked keys outweigh the kept one
    if device == "cpu":
        assert torch.equal(leak > 0, model)  # the model predicts the scan exactly
        # the first leaking logit on CPU, torch 2.13 (printed above), per dtype
        assert first[dt] == {torch.float32: 9897.0, torch.bfloat16: 9889.0,
                             torch.float16: 9980.0}[dt]
    else:  # not measured on a GPU: only what any kernel must do
        assert (leak[s_grid <= 9700] == 0).all()
first_float32, first_bfloat16 = first[torch.float32], first[torch.bfloat16]
first_float16 = first[torch.float16]
leak_margin = 1e4 - min(first.values())  # how close to 1e4 a masked logit may come

# %%
# Proof: every finite mask is bit-equal to ``-inf`` in partial rows
# -----------------------------------------------------------------
# Each finite mask against the ``-inf`` mask directly, in the dtype: equal bit for bit
# here (``rtol=0, atol=0``), since the masked weights are exactly 0 and the kept logits
# see the same arithmetic.
for dt in LOW:
    z = z64.to(dt)
    p_inf = masked_softmax(z, keep, float("-inf"))
    for value in (torch.finfo(dt).min, -1e4):
        p = masked_softmax(z, keep, value)
        torch.testing.assert_close(p, p_inf, rtol=0, atol=0)
    p_1e9 = masked_softmax(z, keep, -1e9)
    torch.testing.assert_close(p_1e9, p_inf, rtol=0, atol=0)  # f16: -1e9 *is* -inf
print("finfo.min, -1e4, -1e9 masks: bit-equal to the -inf mask in bfloat16 and float16")

# %%
# Proof: a fully masked row: the mean of ``v``, SDPA's zeros, float16 unmasked
# ----------------------------------------------------------------------------
# The reference of this section, ``kept_attention64``, uses no mask: float64, each row
# over its kept keys only. In float32 the naive code with the ``-inf`` mask matches it
# on every row that keeps a key, at the default tolerances.
def kept_attention64(q, k, v, keep):
    """float64, row by row over the kept keys only; zeros where a row keeps none."""
    q, k, v = q.double(), k.double(), v.double()  # each (B, Nh, L, Dh)
    out = torch.zeros_like(q)
    for i in range(q.shape[-2]):
        idx = keep[i].nonzero()[:, 0]  # the keys query i may see
        if len(idx):
            z = q[..., i : i + 1, :] @ k[..., idx, :].transpose(-2, -1)
            z = z / q.shape[-1] ** 0.5  # (B, Nh, 1, len(idx))
            out[..., i, :] = (torch.softmax(z, dim=-1) @ v[..., idx, :])[..., 0, :]
    return out


# %%
live = keep_full.any(dim=-1)  # (L,), rows that keep a key
q, k, v = q64.float(), k64.float(), v64.float()
naive = naive_attention(q, k, v, keep_full, float("-inf"))  # (B, Nh, L, Dh)
ref32 = kept_attention64(q, k, v, keep_full).float()
torch.testing.assert_close(naive[..., live, :], ref32[..., live, :])

# %%
# With ``finfo.min`` the naive row is the mean of ``v``: its weights are exactly ``1/L``
# and the reference is ``v``'s mean in float64, rounded once (default tolerances for
# the dtype).
for dt in LOW:
    q, k, v = q64.to(dt), k64.to(dt), v64.to(dt)
    naive = naive_attention(q, k, v, keep_full, torch.finfo(dt).min)
    mean_v = v.double().mean(dim=-2).to(dt)  # (B, Nh, Dh), of the 16-bit v
    err = (naive[..., dead, :].double() - v.double().mean(dim=-2)).abs().max().item()
    print(f"{str(dt):15s} finfo.min: naive row - mean of v: {err:.1e}")
    torch.testing.assert_close(naive[..., dead, :], mean_v)

# %%
# ``scaled_dot_product_attention`` with a boolean mask that masks a whole row returns
# **zeros** for that row on CPU (torch 2.13, float32, bfloat16 and float16 alike; also
# with an additive ``-inf`` mask). This was not measured on a GPU: on CUDA the page
# prints the row there and asserts only the other rows. The common fix for one's own
# code gives the same zeros: ``torch.nan_to_num`` on the weights, or ``torch.where`` on
# the rows that keep a key; neither touches the other rows. SDPA's other rows are judged
# as FlashAttention's tests judge a kernel: against float64 (each row over its kept keys
# only, no mask), its error at most twice the naive computation's in the same dtype
# (a kernel may round at other places than the naive code, not at many more).
for dt in DTYPES:
    q, k, v = q64.to(dt), k64.to(dt), v64.to(dt)
    ref64 = kept_attention64(q, k, v, keep_full)  # (B, Nh, L, Dh)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=keep_full)
    add_inf = torch.zeros(L, L, dtype=dt, device=device).masked_fill(~keep_full,
                                                                      float("-inf"))
    sdpa_inf = F.scaled_dot_product_attention(q, k, v, attn_mask=add_inf)
    z = (q @ k.transpose(-2, -1) / Dh ** 0.5).masked_fill(~keep_full, float("-inf"))
    w = torch.softmax(z, dim=-1)  # (B, Nh, L, L), row `dead` is NaN
    fixed_nan = torch.nan_to_num(w, nan=0.0) @ v  # (B, Nh, L, Dh)
    fixed_where = torch.where(live[:, None], w, 0.0) @ v
    naive_err = (fixed_nan - ref64).abs().max().item()
    if dt == torch.float32:  # the fix and the reference agree at float32's defaults
        torch.testing.assert_close(fixed_nan, ref64.float())
    sdpa_err = (sdpa[..., live, :] - ref64[..., live, :]).abs().max().item()
    print(f"{str(dt)[6:]:9s} SDPA row {dead}: {sdpa[0, 0, dead, :3].tolist()} ... "
          f"({device}); others: SDPA err {sdpa_err:.1e}, naive {naive_err:.1e}")
    assert (fixed_nan[..., dead, :] == 0).all()
    torch.testing.assert_close(fixed_nan[..., live, :], (w @ v)[..., live, :],
                               rtol=0, atol=0)  # the fix leaves the other rows alone
    torch.testing.assert_close(fixed_where, fixed_nan, rtol=0, atol=0)
    torch.testing.assert_close(sdpa[..., live, :], ref64.to(dt)[..., live, :],
                               rtol=0, atol=2 * naive_err)  # the error model above
    if device == "cpu":  # measured on CPU, torch 2.13: the row is exactly 0
        torch.testing.assert_close(sdpa[..., dead, :], fixed_nan[..., dead, :],
                                   rtol=0, atol=0)
        torch.testing.assert_close(sdpa_inf, sdpa, rtol=0, atol=0)  # -inf = boolean

# %%
# SDPA with an additive ``finfo.min`` mask, on CPU: in bfloat16 the row is uniform (the
# mean of ``v``, as in the naive code), but in float16 the kernel adds the mask in
# float32, where ``-65504`` is just a constant shift: the fully masked query attends as
# if **unmasked**. Measured on CPU with torch 2.13; not measured on a GPU, where it is
# printed only. Error model for float16: float32's spacing at ``65504`` is ``2**-8``, so
# each shifted logit moves by up to ``2**-9`` and the output row by up to
# ``2 * 2**-9 * max|v|``, plus one float16 rounding of the output.
for dt in LOW:
    q, k, v = q64.to(dt), k64.to(dt), v64.to(dt)
    add = torch.zeros(L, L, dtype=dt, device=device).masked_fill(~keep_full,
                                                                  torch.finfo(dt).min)
    row = F.scaled_dot_product_attention(q, k, v, attn_mask=add)[..., dead, :]
    mean_v = v.double().mean(dim=-2)  # (B, Nh, Dh)
    free = F.scaled_dot_product_attention(q.double(), k.double(),
                                          v.double())[..., dead, :]  # unmasked, f64
    to_mean = (row.double() - mean_v).abs().max().item()
    to_free = (row.double() - free).abs().max().item()
    print(f"{str(dt):15s} SDPA, finfo.min: row - mean of v {to_mean:.1e}, "
          f"row - unmasked {to_free:.1e}")
    if device == "cpu" and dt == torch.bfloat16:
        torch.testing.assert_close(row, mean_v.to(dt))
        assert to_free > 0.1  # far from the unmasked attention
    elif device == "cpu":
        bound = 2 * 2**-9 * v.abs().max().item()
        torch.testing.assert_close(row, free.to(dt), rtol=torch.finfo(dt).eps,
                                   atol=bound)  # the error model above
        assert to_mean > 0.1  # far from the mean of v

# %%
# Try it: drop ``1/sqrt(Dh)``. When does ``q @ k.T`` overflow float16?
# --------------------------------------------------------------------
# Take queries and keys whose every entry is ``a``: every logit is ``Dh * a**2``. From
# which ``a`` is it ``inf`` at ``Dh = 64``, and at ``Dh = 128``?

# %%
# With constant entries ``a`` every logit is ``Dh * a**2``. float16 rounds to ``inf``
# from ``65504 + 16`` on (half the spacing ``32`` above its largest number), so the
# unscaled logits overflow exactly when ``Dh * a**2 >= 65520``: from ``a = 32`` at
# ``Dh = 64``, ``a = 22.6`` at ``Dh = 128``. ``Dh = 455`` puts the exact tie
# ``455 * 12**2 = 65520`` on the scan: it rounds to even, that is to ``inf``.
# ``Dh = 554`` puts ``554 * 10.875**2 = 65519.16`` there, above 65504 and rounded down
# to it. On CPU the matmul accumulates in float32 and rounds once, and the prediction
# holds at every point of the scan; on any device logits at half the limit are finite
# and at twice the limit are ``inf``.
f16 = torch.finfo(torch.float16)
limit = f16.max + f16.eps * 2.0 ** math.floor(math.log2(f16.max)) / 2  # 65520
a_grid = torch.arange(8.0, 64.0, 0.125, device=device).half()  # exact in float16
for Dh in (32, 64, 128, 256, 455, 554):
    qa = a_grid[:, None].expand(-1, Dh)  # (len(a_grid), Dh): row j is a_j * ones(Dh)
    logits = (qa[:, None, :] @ qa[:, :, None]).flatten()  # (len(a_grid),): Dh * a_j**2
    exact = Dh * a_grid.double() ** 2
    pred = exact >= limit
    a_first = a_grid[logits.isinf()][0].item()
    print(f"Dh = {Dh:3d}: logits inf from a = {a_first:6.3f}; "
          f"sqrt(65520 / Dh) = {math.sqrt(limit / Dh):6.3f}")
    assert logits[exact <= limit / 2].isfinite().all()
    assert logits[exact >= 2 * limit].isinf().all()
    if device == "cpu":
        assert torch.equal(logits.isinf(), pred)  # exactly the finfo prediction

# %%
# Attention with such queries and keys (``Dh = 64``, entries about 33, a little noise
# so that the keys differ): unscaled, float16's logits are ``inf`` and the softmax is
# NaN; dividing ``q`` by ``sqrt(Dh) = 8`` first keeps every logit near ``8712``,
# finite. bfloat16 has float32's range: nothing overflows, and since the scale is a
# power of two, scaling before or after the matmul gives the same bits. Finite is not
# accurate: at ``8712`` float16's spacing is 8 and bfloat16's 64, far above the logits'
# spread (about 2), so the naive 16-bit softmax is wrong either way: it is the exact
# attention of its rounded logits, far from that of the true ones. SDPA on CPU
# computes the logits in float32; its error model against float64: the weights and
# the output rounded once each to the dtype, ``|sdpa - ref| <= eps * max|v|`` (float32's
# logit rounding at 8712, ``2**-11``, adds ten times less); the same bound holds
# between the naive result and the exact attention of its rounded logits. On CUDA, not
# measured on a GPU for such inputs: printed, and only finiteness asserted.
Dh, L2 = 64, 16
g = torch.Generator().manual_seed(3)
qo64 = (33 + 0.05 * torch.randn(1, 1, L2, Dh, generator=g, dtype=torch.float64))
ko64 = (33 + 0.05 * torch.randn(1, 1, L2, Dh, generator=g, dtype=torch.float64))
vo64 = torch.randn(1, 1, L2, Dh, generator=g, dtype=torch.float64)
qo64, ko64, vo64 = qo64.to(device), ko64.to(device), vo64.to(device)
for dt in LOW:
    q, k, v = qo64.to(dt), ko64.to(dt), vo64.to(dt)  # each (1, 1, L2, Dh)
    z_after = q @ k.transpose(-2, -1) / 8  # (1, 1, L2, L2), scale after
    z_first = (q / 8) @ k.transpose(-2, -1)  # scale first
    after = torch.softmax(z_after, dim=-1) @ v  # (1, 1, L2, Dh)
    first = torch.softmax(z_first, dim=-1) @ v
    sdpa = F.scaled_dot_product_attention(q, k, v)  # (1, 1, L2, Dh)
    ref64 = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    naive_err = (first.double() - ref64).abs().max().item()
    sdpa_err = (sdpa.double() - ref64).abs().max().item()
    print(f"{str(dt)[6:]:9s} scale after: NaN {after.isnan().all().item()}; "
          f"scale first: finite, err {naive_err:.1e}; SDPA err {sdpa_err:.1e}")
    assert first.isfinite().all() and sdpa.isfinite().all()
    assert naive_err > 0.1  # the naive 16-bit softmax is wrong (printed above)
    of_rounded = torch.softmax(z_first.double(), dim=-1) @ v.double()  # (1,1,L2,Dh)
    if device == "cpu":
        torch.testing.assert_close(first, of_rounded.to(dt), rtol=0,
                                   atol=torch.finfo(dt).eps * v.abs().max().item())
        torch.testing.assert_close(sdpa, ref64.to(dt), rtol=0,
                                   atol=torch.finfo(dt).eps * v.abs().max().item())
    if dt == torch.float16:
        assert z_after.isinf().all() and after.isnan().all()  # inf - inf
    else:
        torch.testing.assert_close(z_after, z_first, rtol=0, atol=0)  # same bits

# %%
# Try it: shift every logit by ``M``. What does bfloat16's softmax cost?
# ----------------------------------------------------------------------
# Softmax is shift-invariant: ``softmax(M + u) = softmax(u)`` exactly. How far is the
# 16-bit softmax of ``M + u`` from float64's, for ``M`` from 1 to ``1e5``?

# %%
# Softmax is shift-invariant, so ``softmax(M + u)`` is ``softmax(u)`` for any offset
# ``M``; but rounding ``M + u`` to the dtype moves each logit by up to half a spacing at
# ``M``, ``M * 2**-8`` in bfloat16, ``M * 2**-11`` in float16. The softmax's Jacobian
# has row sums ``2 p (1 - p) <= 1/2``, so the weights move by at most half the largest
# logit error ``delta``. Error model for each dtype:
# ``max|p - p64| <= delta / 2 + 4 eps``
# (the ``4 eps`` for ``exp``, sum, division and the output's rounding). float16 turns
# to ``inf`` (NaN weights) above ``65504``. Three seeds, 64 keys.
M_grid = torch.logspace(0, 5, 31, dtype=torch.float64)  # offsets 1 .. 1e5
errors = {dt: torch.full((3, len(M_grid)), float("nan")) for dt in DTYPES}
for seed in range(3):
    u = torch.randn(64, generator=torch.Generator().manual_seed(10 + seed),
                    dtype=torch.float64).to(device)  # (64,)
    p64 = torch.softmax(u, dim=-1)  # exact: the shift changes nothing
    for j, M in enumerate(M_grid.tolist()):
        for dt in DTYPES:
            z = (M + u).to(dt)
            p = torch.softmax(z, dim=-1)
            if dt == torch.float16 and M + u.max().item() >= limit:
                assert p.isnan().all()  # logits inf: inf - inf
                continue
            delta = (z.double() - (M + u)).abs().max().item()
            errors[dt][seed, j] = (p.double() - p64).abs().max().item()
            torch.testing.assert_close(p, p64.to(dt), rtol=0,
                                       atol=delta / 2 + 4 * torch.finfo(dt).eps)
worst = {dt: errors[dt].amax(dim=0) for dt in DTYPES}  # (31,), NaN: float16 is inf
at = {M: int((M_grid - M).abs().argmin()) for M in (1.0, 1e3, 1e4)}
for dt in DTYPES:
    print(f"{str(dt)[6:]:9s} max|p - p64| at M = 1: {worst[dt][at[1.0]]:.1e}, "
          f"1e3: {worst[dt][at[1e3]]:.1e}, 1e4: {worst[dt][at[1e4]]:.1e}")
worst_bf16_1e3 = worst[torch.bfloat16][at[1e3]].item()
assert worst_bf16_1e3 > 0.1  # bfloat16's weights are wrong at M = 1e3
assert worst[torch.float16][at[1e3]] < 0.1 < worst[torch.float16][at[1e4]]
assert worst[torch.float32][at[1e4]] < 1e-3  # float32 still holds at M = 1e4

# %%
# The figure: the worst of the three seeds per offset. float16 stops at ``65504``.
fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
for dt in DTYPES:
    ax.loglog(M_grid, worst[dt], "o-", ms=3,
              label=str(dt).replace("torch.", ""))
ax.axvline(f16.max, color="gray", lw=0.8, ls="--")
ax.text(f16.max * 0.9, 1e-8, "float16 max", ha="right", color="gray")
ax.set_xlabel("logit magnitude M (logits M + u, u ~ N(0, 1))")
ax.set_ylabel("max |softmax - float64|")
ax.legend()
ax.set_title("Softmax error grows with logit magnitude; bfloat16's is "
             f"{worst_bf16_1e3:.1f} at 1e3")
plt.show()

# %%
# References
# ----------
# ``torch.finfo``, ``torch.softmax``, ``torch.nan_to_num``, ``torch.where``,
# ``torch.Tensor.masked_fill``,
# ``torch.nn.functional.scaled_dot_product_attention`` (``attn_mask``).
