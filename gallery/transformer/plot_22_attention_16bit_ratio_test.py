"""
Attention in 16 bits, judged as FlashAttention judges it
========================================================

A 16-bit attention kernel cannot match a float64 reference to float64's precision; the
question is whether it loses more than 16-bit arithmetic must. FlashAttention's tests
answer it with a ratio: the kernel's error may be at most twice that of the naive
computation in the same dtype. This page applies that test to
``scaled_dot_product_attention`` in bfloat16 and float16.

**You will learn**

- how FlashAttention's tests judge a kernel: error at most twice the naive 16-bit error
- why a float64 reference computed from the *rounded* 16-bit inputs is the fair one
- why torch.testing's default tolerances fail attention outputs that cancel
- which SDPA backends accept which 16-bit inputs on CUDA

**Prerequisites:** :doc:`/generated/transformer/plot_13_sdpa_backends_flex` (SDPA's
backends), :doc:`/generated/transformer/plot_20_softmax_masks_16bit` (softmax in 16
bits), :doc:`/generated/transformer/plot_21_autocast_attention_16bit` (autocast).
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
DTYPES = [torch.bfloat16, torch.float16]
short = {torch.bfloat16: "bfloat16", torch.float16: "float16"}

# %%
# The idea
# --------
# Let :math:`o` be the kernel's output, :math:`o_{\mathrm{naive}}` the formula
# :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h})\, v` computed step by step in the
# 16-bit dtype, and :math:`o_{64}` the same formula in float64, all from the same
# 16-bit inputs. The kernel passes when
#
# .. math::
#
#    \lvert o - o_{64} \rvert \le 2 \max \lvert o_{\mathrm{naive}} - o_{64} \rvert
#    + \varepsilon \lvert o_{64} \rvert ,
#
# the :math:`\varepsilon` term for rounding the reference to the dtype. The figure:
# SDPA's default kernel against the naive computation, for each dtype, head size and
# mask.
#
# The formula, its float64 reference and the inputs, from scratch:


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


def formula(q, k, v, causal=False, bias=None):
    """softmax(q k^T / sqrt(Dh) + bias) v, masked if causal; (B, Nh, L, Dh)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    if bias is not None:
        scores = scores + bias
    if causal:
        future = ~causal_mask(scores.shape[-1], scores.device)  # key after query
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v


def inputs(dt, B, Nh, L, Dh, device, positive_v=False):
    """q, k, v drawn in float32 and rounded to dt: the kernel sees exact inputs."""
    q, k, v = (torch.randn(B, Nh, L, Dh, device=device) for _ in range(3))
    if positive_v:
        v = 1 + torch.rand(B, Nh, L, Dh, device=device)  # values in [1, 2)
    return q.to(dt), k.to(dt), v.to(dt)  # (B, Nh, L, Dh) each


# %%
# The default kernel and the naive computation, each against float64, and the figure.
B, Nh, L = 2, 4, 128
HEADS = [16, 64, 128]

err = {}  # (dtype, Dh, causal, "kernel" or "naive") -> max |out - float64|
kern, ref = {}, {}  # (dtype, Dh, causal) -> SDPA's output, the float64 reference
for dt in DTYPES:
    for Dh in HEADS:
        q, k, v = inputs(dt, B, Nh, L, Dh, device)
        for causal in [False, True]:
            case = (dt, Dh, causal)
            ref[case] = formula(q.double(), k.double(), v.double(), causal)
            kern[case] = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            naive = formula(q, k, v, causal)
            for who, o in [("kernel", kern[case]), ("naive", naive)]:
                err[case + (who,)] = (o.double() - ref[case]).abs().max().item()
ratios = [err[k] / err[k[:3] + ("naive",)] for k in err if k[3] == "kernel"]
best, worst = min(ratios), max(ratios)
cases = [(dt, Dh, c) for dt in DTYPES for Dh in HEADS for c in [False, True]]
pos = torch.arange(len(cases)).tolist()
fig, ax = plt.subplots(figsize=(9, 3.6))
ax.bar([p - 0.2 for p in pos], [err[c + ("kernel",)] for c in cases], 0.4,
       label="SDPA kernel (default)")
ax.bar([p + 0.2 for p in pos], [err[c + ("naive",)] for c in cases], 0.4,
       label="naive, step by step in 16 bits")
ax.set_yscale("log")
tick = {torch.bfloat16: "bf16", torch.float16: "fp16"}
ax.set_xticks(pos, [f"{tick[dt]}\n{Dh}\n{'causal' if c else 'none'}"
                    for dt, Dh, c in cases], fontsize="small")
ax.set_ylabel("max |out - float64|")
ax.set_xlabel("dtype / head size Dh / mask")
ax.legend(fontsize="small")
ax.set_title(f"SDPA in 16 bits on {device}: at most {worst:.2f} times the naive "
             "error (the test allows 2)", fontsize="medium")
plt.show()

# %%
# The ratio test
# --------------
# A 16-bit kernel cannot match a float64 reference to float64's precision; the question
# is whether it loses more than 16-bit arithmetic must. FlashAttention's tests
# (``tests/test_flash_attn.py`` of Dao-AILab/flash-attention at commit 0251105, e.g.
# ``test_flash_attn_qkvpacked``) draw ``q, k, v`` in the 16-bit dtype, compute a
# reference from them in float32 (``attention_ref(..., upcast=True)``, rounded back to
# the dtype), the same formula in the 16-bit dtype (``upcast=False, reorder_ops=True``:
# the scale moved onto ``k``), and assert
# ``max|out - out_ref| <= 2 * max|out_pt - out_ref|`` ("at most twice the numerical
# error of a Pytorch implementation"; ``+ 1e-5`` in the causal and split-KV tests, a
# factor of 3, or 5 with :doc:`ALiBi </generated/positional/plot_06_alibi>`, for the
# :doc:`KV-cache </generated/transformer/plot_09_kv_cache>` kernel). Here the reference
# is float64 and the naive computation is
# :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h})\, v` step by step in the 16-bit dtype.
# The factor stays 2: a kernel that keeps the scores and the softmax in float32 and
# rounds once should beat the naive one, which rounds the scores, the probabilities and
# the product; 2 leaves room for another summation order and for rounding the
# probabilities before ``P @ v``, while a real slip (a lost scale, a mask off by one)
# costs far more. The comparison runs in the 16-bit dtype, against the reference rounded
# to it, so ``rtol = eps`` covers that one rounding:
# ``|out - ref| <= 2 max|naive - ref| + eps |ref|``. The device's default kernel runs
# (:doc:`plot_13_sdpa_backends_flex` names it: the flash kernel on CPU for these
# inputs).
#
# For each dtype and head size, without and with the causal mask: the idea's
# inequality, with ``rtol = eps`` and ``atol`` twice the naive error.
print(f"{'dtype':9s}{'Dh':>4s} {'mask':7s}{'kernel':>10s}{'naive':>10s}{'ratio':>7s}")
for (dt, Dh, causal, who), e in err.items():
    if who == "kernel":
        n = err[dt, Dh, causal, "naive"]
        print(f"{short[dt]:9s}{Dh:4d} {'causal' if causal else 'none':7s}"
              f"{e:10.2e}{n:10.2e}{e / n:7.2f}")
print(f"ratio kernel / naive: {best:.2f} to {worst:.2f} (FlashAttention's tests allow "
      "2)")
for dt in DTYPES:
    eps = torch.finfo(dt).eps  # covers rounding the float64 reference to dt
    for Dh in HEADS:
        none, causal = (dt, Dh, False), (dt, Dh, True)
        torch.testing.assert_close(kern[none], ref[none].to(dt), rtol=eps,
                                   atol=2 * err[none + ("naive",)])
        torch.testing.assert_close(kern[causal], ref[causal].to(dt), rtol=eps,
                                   atol=2 * err[causal + ("naive",)])

# %%
# Try it: judge the kernel at torch.testing's default tolerances. Does it pass?
# -----------------------------------------------------------------------------
# ``assert_close(out, ref.to(dt))`` with no tolerance given: bfloat16
# ``rtol=1.6e-2``, float16 ``rtol=1e-3``, both ``atol=1e-5``. Try values ``v`` of mean
# zero, then values of one sign.

# %%
# The ratio test is needed because the defaults (bfloat16 ``rtol=1.6e-2``, float16
# ``rtol=1e-3``, both ``atol=1e-5``) are relative: with values ``v`` of mean zero some
# outputs are sums that cancel to nearly nothing, and there an error of a few units of
# ``eps`` times the size of the terms exceeds ``rtol`` times the tiny result. With
# values of one sign (``v`` in ``[1, 2)``: each output is an average with nothing to
# cancel) the kernel's largest relative error is printed in units of ``eps``. On CPU
# (torch 2.13, measured for this page) that output equals the float64 reference at the
# defaults in both dtypes, every head size, with and without the mask, while
# :measured:`fail_min_pct:.1f` to :measured:`fail_max_pct:.1f` % of the entries fail
# them when ``v`` has mean zero; both are asserted on CPU only. On
# CUDA they are printed: no GPU measurement backs them yet, and float16's ``rtol``
# (1.02 ``eps``) leaves a kernel little room beyond the rounding of the reference.
def within_defaults(actual, expected, dt):
    """Elementwise, torch.testing's defaults for dt: |a - e| <= atol + rtol |e|."""
    rtol = 1.6e-2 if dt == torch.bfloat16 else 1e-3
    return torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=1e-5)


# our elementwise reading of the defaults: inside atol (at 0) and rtol (at 1)
# torch.testing passes and so does within_defaults; at twice them it does not
for dt in DTYPES:
    rtol = 1.6e-2 if dt == torch.bfloat16 else 1e-3
    zero_one = torch.tensor([0.0, 1.0], dtype=dt)  # (2,)
    inside = zero_one + torch.tensor([0.5e-5, 0.5 * rtol], dtype=dt)
    outside = zero_one + torch.tensor([2e-5, 2 * rtol], dtype=dt)
    torch.testing.assert_close(inside, zero_one)  # the defaults for dt
    assert within_defaults(inside, zero_one, dt).all()
    assert not within_defaults(outside, zero_one, dt).any()

# %%
# The share of outputs outside the defaults, with ``v`` of mean zero and of one sign.
fails = {}  # (dtype, Dh, causal) -> share of entries outside the defaults, v ~ N(0,1)
pos_kern, pos_ref = {}, {}  # (dtype, Dh, causal) -> output, float64 reference; v > 0
for dt in DTYPES:
    for Dh in HEADS:
        for causal in [False, True]:
            q, k, v = inputs(dt, B, Nh, L, Dh, device)
            r64 = formula(q.double(), k.double(), v.double(), causal)
            out16 = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            close = within_defaults(out16, r64.to(dt), dt)  # (B, Nh, L, Dh)
            fails[dt, Dh, causal] = 1 - close.double().mean().item()
            q, k, v = inputs(dt, B, Nh, L, Dh, device,
                             positive_v=True)  # outputs of one sign
            pos_ref[dt, Dh, causal] = formula(q.double(), k.double(), v.double(),
                                              causal)
            pos_kern[dt, Dh, causal] = F.scaled_dot_product_attention(
                q, k, v, is_causal=causal)
        none, causal = (dt, Dh, False), (dt, Dh, True)
        if device == "cpu":  # torch 2.13: at dt's default tolerances
            torch.testing.assert_close(pos_kern[none], pos_ref[none].to(dt))
            torch.testing.assert_close(pos_kern[causal], pos_ref[causal].to(dt))
pos_eps = {}  # 16-bit dtype -> the kernel's worst relative error for v in [1, 2)
for dt in DTYPES:
    share = [fails[dt, Dh, c] for Dh in HEADS for c in [False, True]]
    pos_eps[dt] = max(((pos_kern[c].double() - pos_ref[c]).abs() / pos_ref[c]).max()
                      .item() for c in pos_kern if c[0] == dt) / torch.finfo(dt).eps
    print(f"{short[dt]:9s} v ~ N(0, 1): {100 * min(share):.1f} to "
          f"{100 * max(share):.1f} % of entries fail the defaults; v in [1, 2): "
          f"{pos_eps[dt]:.2f} eps")
    if device == "cpu":
        assert all(0.02 < f < 0.15 for f in share)  # a few % fail, every case
fail_min_pct = 100 * min(fails.values())
fail_max_pct = 100 * max(fails.values())
pos_eps_max = max(pos_eps.values())

# %%
# Proof: ``formula`` with a bias is SDPA with a float ``attn_mask``
# -----------------------------------------------------------------
# The forced-backend section below adds a float bias through ``formula``; on any
# device, in float64, that path equals SDPA's (the math kernel).
q, k, v = (t.double() for t in inputs(torch.float32, 1, Nh, 16, 8, device))
bias64 = torch.randn(Nh, 16, 16, device=device, dtype=torch.float64)  # (Nh, L, L)
later = torch.ones(16, 16, dtype=torch.bool, device=device).triu(1)  # key after query
for causal in [False, True]:
    mask64 = bias64.masked_fill(later, float("-inf")) if causal else bias64
    torch.testing.assert_close(
        formula(q, k, v, causal, bias64),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask64))
print("formula(q, k, v, causal, bias) = SDPA with attn_mask=bias, float64, both masks")

# %%
# Proof: each backend forced, on CUDA
# -----------------------------------
# On CUDA four kernels stand behind SDPA (:doc:`plot_13_sdpa_backends_flex` tabulates
# which accepts which dtype and mask on each device). Here each is forced in turn with
# ``sdpa_kernel`` at the shape of the H100 measurements (``B = 2``, ``Nh = 8``,
# ``L = 256``), for the three head sizes, without a mask, with ``is_causal`` and with
# a float ``(Nh, L, L)`` bias, and every output it accepts is judged by the ratio test
# above. Measured on an H100 with torch 2.11 (``Dh = 64``, causal; not yet verified by
# a GPU build of the book): all four accept bfloat16 and float16; flash and cuDNN
# refuse the 3-D float ``(Nh, L, L)`` bias used here (2-D and 4-D biases were not
# measured), the memory-efficient kernel takes it; the errors against
# float64 inputs *not* rounded to 16 bits were ``1.33e-2`` for every kernel against
# ``1.50e-2`` naive in bfloat16, and ``1.54e-3`` for all in float16 (the rounding of
# the inputs dominates there, which is why this page rounds them first). The head
# sizes 16 and 128 were not measured: they are printed, not asserted. On CPU this
# section does not run, and the ledger shows its claims as not run.
import warnings

from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
short_be = {be: be.name.removesuffix("_ATTENTION") for be in BACKENDS}
MASKS = ["none", "is_causal", "float bias"]


if device == "cuda":
    B, Nh, L = 2, 8, 256
    bias = torch.randn(Nh, L, L, device=device)  # (Nh, L, L): an additive float mask
    accepted, ratio = {}, {}  # (backend, dtype, Dh, mask) -> True/False, err / naive
    with warnings.catch_warnings(record=True) as caught:  # refusals warn their reason
        warnings.simplefilter("always")
        for dt in DTYPES:
            eps = torch.finfo(dt).eps
            for Dh in HEADS:
                q, k, v = inputs(dt, B, Nh, L, Dh, device)  # (B, Nh, L, Dh) each
                for mask in MASKS:
                    kw = {"is_causal": mask == "is_causal",
                          "attn_mask": bias.to(dt) if mask == "float bias" else None}
                    causal, b16 = kw["is_causal"], kw["attn_mask"]
                    ref = formula(q.double(), k.double(), v.double(), causal,
                                  None if b16 is None else b16.double())  # float64
                    naive = formula(q, k, v, causal, b16)  # step by step in dt
                    e_naive = (naive.double() - ref).abs().max().item()
                    for be in BACKENDS:
                        try:
                            with sdpa_kernel(be):
                                o = F.scaled_dot_product_attention(q, k, v, **kw)
                        except RuntimeError:
                            accepted[be, dt, Dh, mask] = False
                            continue
                        accepted[be, dt, Dh, mask] = True
                        e = (o.double() - ref).abs().max().item()
                        ratio[be, dt, Dh, mask] = e / e_naive
                        torch.testing.assert_close(o, ref.to(dt), rtol=eps,
                                                   atol=2 * e_naive)
    print(f"{len(caught)} warnings from refused calls, caught")
    print(f"{'backend':10s}{'dtype':9s}{'mask':11s}" + "".join(
        f"{'Dh ' + str(Dh):>9s}" for Dh in HEADS) + "  (error / naive error)")
    for be in BACKENDS:
        for dt in DTYPES:
            for mask in MASKS:
                cells = [f"{ratio[be, dt, Dh, mask]:.2f}" if accepted[be, dt, Dh, mask]
                         else "refused" for Dh in HEADS]
                print(f"{short_be[be]:10s}{short[dt]:9s}{mask:11s}"
                      + "".join(f"{c:>9s}" for c in cells))
    for dt in DTYPES:  # H100, torch 2.11, Dh = 64
        assert all(accepted[be, dt, 64, "is_causal"] for be in BACKENDS)
        assert [accepted[be, dt, 64, "float bias"] for be in BACKENDS[:3]] == [
            False, True, False]
else:
    print("on cpu: the forced-backend section did not run (flash and math only here;\n"
          "see the page on SDPA's backends)")

# %%
# References
# ----------
# ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.attention.sdpa_kernel``, ``torch.testing.assert_close``.
# :footcite:t:`Dao2023` and its repository's
# ``tests/test_flash_attn.py`` (Dao-AILab/flash-attention, commit 0251105).
#
# .. footbibliography::
