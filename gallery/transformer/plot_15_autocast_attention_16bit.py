"""
autocast and attention in 16 bits
=================================

``torch.autocast`` runs some operations in bfloat16 or float16 and leaves the others
alone. This page asserts which of the chapter's operations run in which dtype, on CPU
and on CUDA, proves that each is exactly "cast the inputs, run the op", and measures
what that means for a pre-LN block against the same block run entirely in 16 bits.
Then it judges ``scaled_dot_product_attention`` in bfloat16 and float16 the way
FlashAttention's own tests do: against a float64 reference, relative to the error of
the naive 16-bit computation.
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# Which dtype each operation runs in
# ----------------------------------
# autocast keeps per device three kinds of ops: a *lower-precision* list (run in the
# 16-bit dtype: every floating input is cast to it), a *float32* list (every input is
# cast to float32), and everything else, which runs in the dtype of its inputs. So the
# answer depends on what comes in. A float32 tensor is what a user hands in; a 16-bit
# tensor is what a preceding ``Linear`` hands on inside the block, and is how the H100
# measurements behind this page's CUDA side probed softmax and the norms. The norms
# below carry a float32 weight, as a module's would; ``rms_norm`` runs without one (a
# float32 weight on a 16-bit input makes it warn that it cannot use its fused kernel).
import math

import torch.nn.functional as F

L, D = 16, 64
x32 = torch.randn(L, D, device=device)  # (L, D) float32
w = torch.randn(D, D, device=device) / 8  # (D, D)
b = torch.randn(D, device=device)  # (D,)
gamma = 1 + 0.5 * torch.randn(D, device=device)  # (D,) norm weight off its init
beta = torch.randn(D, device=device)  # (D,)
OPS = {  # name -> the op, on x and its float32 parameters (PARAMS)
    "matmul": lambda t, w: t @ w,
    "linear": lambda t, w, b: F.linear(t, w, b),
    "sdpa": lambda t: F.scaled_dot_product_attention(t[None], t[None], t[None]),
    "softmax": lambda t: t.softmax(dim=-1),
    "layer_norm": lambda t, g, b: F.layer_norm(t, (D,), g, b),
    "rms_norm": lambda t: F.rms_norm(t, (D,)),
    "gelu": lambda t: F.gelu(t),
}
PARAMS = {"matmul": (w,), "linear": (w, b), "layer_norm": (gamma, beta)}
DTYPES = [torch.bfloat16, torch.float16]
short = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

out = {}  # (16-bit dtype, input "float32" or "16-bit", op) -> output under autocast
for dt in DTYPES:
    x16 = x32.to(dt)  # (L, D)
    with torch.autocast(device, dtype=dt):
        for name, op in OPS.items():
            out[dt, "float32", name] = op(x32, *PARAMS.get(name, ()))
            out[dt, "16-bit", name] = op(x16, *PARAMS.get(name, ()))
print(f"{'':11s}" + "".join(f"{'under autocast(' + short[dt] + ')':>36s}"
                            for dt in DTYPES))
print(f"{'op':11s}" + "".join(f"{'float32 input':>18s}{'16-bit input':>18s}"
                            for dt in DTYPES))
for n in OPS:
    print(f"{n:11s}" + "".join(f"{short[out[dt, given, n].dtype]:>18s}"
                               for dt in DTYPES for given in ["float32", "16-bit"]))

# %%
# The table, asserted. On CPU (torch 2.13, measured for this page) the lower-precision
# list holds ``matmul``, ``linear`` and SDPA; softmax, the norms and GELU are on neither
# list, so they run in whatever dtype they are given: float32 from the user, 16 bits
# after a ``Linear``. CPU autocast takes float16 as well as bfloat16 in torch 2.13, with
# the same lists. On CUDA (measured on an H100 with torch 2.11, bfloat16 and 16-bit
# inputs only; not yet verified by a GPU build of the book) softmax and ``layer_norm``
# are on the float32 list: they return float32 even from a 16-bit input. What was not
# measured there (float16, float32 inputs beyond ``matmul`` and ``linear``) is printed
# above and asserted only where it follows from the lower-precision list, which
# PyTorch's ``autocast_mode.cpp`` shares between the two 16-bit dtypes and which holds
# SDPA on CUDA too.
LOWER = ["matmul", "linear", "sdpa"]  # the lower-precision list on both devices
FLOAT32_ON_CUDA = ["softmax", "layer_norm"]  # the float32 list (of these ops), CUDA
for dt in DTYPES:
    for name in LOWER:
        assert out[dt, "float32", name].dtype == dt, (dt, name)
    if device == "cpu":  # torch 2.13: the rest keep their input's dtype
        for name in set(OPS) - set(LOWER):
            assert out[dt, "float32", name].dtype == torch.float32, (dt, name)
            assert out[dt, "16-bit", name].dtype == dt, (dt, name)
if device == "cuda":  # H100, torch 2.11, bfloat16 on a bfloat16 input
    expected = {n: torch.float32 if n in FLOAT32_ON_CUDA else torch.bfloat16
                for n in OPS}
    assert {n: out[torch.bfloat16, "16-bit", n].dtype for n in OPS} == expected

# %%
# autocast is "cast the inputs, run the op"
# -----------------------------------------
# Each output equals the same op, written out again below, run outside autocast on
# inputs cast by hand: to the 16-bit dtype for the lower-precision list (the float32
# weight and bias too), to float32 for CUDA's float32 list, and not at all for the
# rest. Bit for bit (``rtol=0, atol=0``): autocast adds a cast and nothing else.
PLAIN = {  # name -> the op on (x, its parameters), outside autocast
    "matmul": torch.matmul,
    "linear": F.linear,
    "sdpa": lambda t: F.scaled_dot_product_attention(t[None], t[None], t[None]),
    "softmax": lambda t: torch.softmax(t, dim=1),  # (L, D): over the D channels
    "layer_norm": lambda t, g, b: F.layer_norm(t, [D], weight=g, bias=b),
    "rms_norm": lambda t: F.rms_norm(t, [D]),
    "gelu": F.gelu,
}
for dt in DTYPES:
    x16 = x32.to(dt)  # (L, D)
    for name in LOWER:
        args = [t.to(dt) for t in PARAMS.get(name, ())]
        for given, t in [("float32", x32), ("16-bit", x16)]:
            by_hand = PLAIN[name](t.to(dt), *args)
            torch.testing.assert_close(out[dt, given, name], by_hand, rtol=0, atol=0)
    for name in set(OPS) - set(LOWER):
        cast = torch.float32 if device == "cuda" and name in FLOAT32_ON_CUDA else dt
        by_hand = PLAIN[name](x16.to(cast), *PARAMS.get(name, ()))
        torch.testing.assert_close(out[dt, "16-bit", name], by_hand, rtol=0, atol=0)
print("every autocast output equals the op on inputs cast by hand, bit for bit")

# %%
# A lower-precision op need not compute *in* 16 bits. On CPU (torch 2.13, measured for
# this page) autocast's ``linear`` multiplies 16-bit numbers and accumulates in float32,
# rounding once at the end: it equals the exact (float64) product of its rounded
# inputs, rounded to the dtype, at the dtype's default tolerances (bfloat16
# ``rtol=1.6e-2``, two units of its ``eps``; float16 ``rtol=1e-3``, about one), and its
# worst relative error, printed in units of ``eps``, is below one unit (half a unit is
# what a single rounding costs): :measured:`linear_eps_bf16:.2f` in bfloat16,
# :measured:`linear_eps_f16:.2f` in float16. On CUDA, cuBLAS may also add partial sums
# in the 16-bit dtype:
# ``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction`` and
# ``allow_fp16_reduced_precision_reduction`` are ``True`` by default (asserted), so
# there the error is printed and not asserted (not yet verified by a GPU build).
reduced = (torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
           torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
print(f"CUDA matmuls may reduce in bfloat16, float16: {reduced[0]}, {reduced[1]}")
assert reduced == (True, True)  # torch's defaults
linear_eps = {}  # 16-bit dtype -> worst relative error of autocast's linear, in eps
for dt in DTYPES:
    exact = (x32.to(dt).double() @ w.to(dt).double().T
             + b.to(dt).double())  # (L, D): the rounded inputs' product, in float64
    got = out[dt, "float32", "linear"]
    rel = ((got.double() - exact).abs() / exact.abs()).max().item()
    linear_eps[dt] = rel / torch.finfo(dt).eps
    print(f"{short[dt]:9s} max relative error of autocast's linear: "
          f"{linear_eps[dt]:.2f} eps")
    if device == "cpu":  # float32 accumulation, one rounding
        torch.testing.assert_close(got, exact.to(dt))
        # below one unit, and at least a quarter: over L * D outputs some must round by
        # nearly half a unit (the error is one rounding, not none)
        assert 0.25 < linear_eps[dt] < 1
linear_eps_bf16, linear_eps_f16 = linear_eps[torch.bfloat16], linear_eps[torch.float16]

# %%
# A pre-LN block under autocast
# -----------------------------
# The chapter's block (:doc:`plot_05_transformer_block`) in its pre-LN order with a
# causal mask. Under autocast its ``Linear`` layers and its two ``einsum`` products run
# in 16 bits; its LayerNorms see the float32 residual stream and stay float32; the
# softmax gets 16-bit logits and runs in 16 bits on CPU, in float32 on CUDA. The
# residual sum ``x + branch`` adds a 16-bit branch to a float32 stream, and type
# promotion makes it float32: under autocast **the residual stream stays float32**, and
# so does the block's output, on every device.
from torch import nn


class Block(nn.Module):
    """A pre-LN block with a causal mask on (B, L, D)."""

    def __init__(self, D, Nh):
        super().__init__()
        self.Nh = Nh
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def attn(self, x):
        B, L, D = x.shape
        Nh, Dh = self.Nh, D // self.Nh
        q, k, v = self.qkv(x).split(D, dim=-1)  # 3 x (B, L, D)
        q, k, v = (t.reshape(B, L, Nh, Dh).transpose(1, 2) for t in (q, k, v))
        logits = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L)
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
        logits = logits.masked_fill(future, float("-inf"))
        y = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
        return self.out(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)

    def mlp(self, x):
        return self.proj(F.gelu(self.fc(x)))  # (B, L, D)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


B, L, D, Nh = 2, 16, 64, 4
block = Block(D, Nh).to(device).eval()
with torch.no_grad():
    for p in block.parameters():
        p.add_(0.1 * torch.randn_like(p))  # biases and norm weights off their init
x = 8 * torch.randn(B, L, D, device=device)  # (B, L, D): a residual stream of std 8
for dt in DTYPES:
    with torch.no_grad(), torch.autocast(device, dtype=dt):
        y = block(x)
        branches = block.attn(block.ln_1(x)), block.mlp(block.ln_2(x))
    print(f"autocast {short[dt]:9s} block output {short[y.dtype]}, branches "
          f"{short[branches[0].dtype]} and {short[branches[1].dtype]}")
    assert y.dtype == torch.float32 and branches[0].dtype == branches[1].dtype == dt

# %%
# The block, computed by hand. The same weights, each ``Linear`` and ``einsum`` fed
# tensors cast to the dtype, the LayerNorms and (on CUDA) the softmax in float32,
# written without the class. Both branches and the block's output equal autocast's,
# bit for bit. (On CPU the softmax's dtype cannot be seen here: its 16-bit kernel
# computes in float32 and rounds once, so float32-then-round gives the same bits.)
P = dict(block.named_parameters())  # name -> parameter


def by_hand(x, dt):
    """autocast's pre-LN block, cast by cast; x (B, L, D) float32; 3 x (B, L, D)."""
    B, L, D = x.shape
    Dh = D // Nh
    soft = torch.float32 if device == "cuda" else dt  # the dtype softmax runs in
    a = F.layer_norm(x, (D,), P["ln_1.weight"], P["ln_1.bias"])  # float32
    qkv = F.linear(a.to(dt), P["qkv.weight"].to(dt), P["qkv.bias"].to(dt))
    q, k, v = (t.reshape(B, L, Nh, Dh).transpose(1, 2) for t in qkv.split(D, -1))
    s = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L), dt
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1),
                      float("-inf"))
    p = s.to(soft).softmax(dim=-1).to(dt)  # (B, Nh, L, L)
    y = torch.einsum("bhlm,bhmd->bhld", p, v).transpose(1, 2).reshape(B, L, D)
    att = F.linear(y, P["out.weight"].to(dt), P["out.bias"].to(dt))  # (B, L, D), dt
    h = x + att  # float32: the residual stream
    c = F.layer_norm(h, (D,), P["ln_2.weight"], P["ln_2.bias"]).to(dt)
    m = F.gelu(F.linear(c, P["fc.weight"].to(dt), P["fc.bias"].to(dt)))
    mlp = F.linear(m, P["proj.weight"].to(dt), P["proj.bias"].to(dt))  # (B, L, D), dt
    return att, mlp, h + mlp  # the branches and the block's output (float32)


for dt in DTYPES:
    with torch.no_grad(), torch.autocast(device, dtype=dt):
        att = block.attn(block.ln_1(x))  # (B, L, D)
        mlp = block.mlp(block.ln_2(x + att))  # (B, L, D)
        y = block(x)  # (B, L, D) float32
    with torch.no_grad():  # outside autocast
        hand_att, hand_mlp, hand_y = by_hand(x, dt)
    torch.testing.assert_close(att, hand_att, rtol=0, atol=0)
    torch.testing.assert_close(mlp, hand_mlp, rtol=0, atol=0)
    torch.testing.assert_close(y, hand_y, rtol=0, atol=0)  # float32
print("both branches and the block under autocast equal the hand-cast ones, bit "
      "for bit")

# %%
# What autocast buys: the block's error against float64 (the same weights and input in
# float64), under autocast and with the whole block, weights and input, converted to
# the 16-bit dtype, for five seeds of weights and input. The fully 16-bit block stores
# the residual stream in 16 bits: its rounding alone costs up to ``|x| eps / 2`` per
# entry, with ``x`` of std 8, where autocast keeps the stream in float32 and rounds
# only the branches, which are of order one.
import copy

SEEDS = range(5)
block_err = {}  # (dtype, "autocast" or "16-bit block", seed) -> max |y - float64|
worse = {}  # dtype -> the least factor by which the 16-bit block is worse
for seed in SEEDS:
    torch.manual_seed(seed)
    blk = Block(D, Nh).to(device).eval()
    with torch.no_grad():
        for p in blk.parameters():
            p.add_(0.1 * torch.randn_like(p))
        xs = 8 * torch.randn(B, L, D, device=device)  # (B, L, D)
        ref = copy.deepcopy(blk).double()(xs.double())  # (B, L, D) float64
        for dt in DTYPES:
            with torch.autocast(device, dtype=dt):
                y_auto = blk(xs)
            y_16 = copy.deepcopy(blk).to(dt)(xs.to(dt))
            for how, y in [("autocast", y_auto), ("16-bit block", y_16)]:
                block_err[dt, how, seed] = (y.double() - ref).abs().max().item()
for dt in DTYPES:
    auto = [block_err[dt, "autocast", s] for s in SEEDS]
    full = [block_err[dt, "16-bit block", s] for s in SEEDS]
    print(f"{short[dt]:9s} max|y - f64|: autocast {min(auto):.1e} to {max(auto):.1e}, "
          f"16-bit block {min(full):.1e} to {max(full):.1e}")
    worse[dt] = min(f / a for f, a in zip(full, auto))
    print(f"{'':9s} the 16-bit block is at least {worse[dt]:.1f} times worse")
    assert all(f / a >= worse[dt] for f, a in zip(full, auto))  # the bound quoted
    assert all(f / a > 2 for f, a in zip(full, auto)), dt  # more than 2x, every seed
worse_bf16, worse_f16 = worse[torch.bfloat16], worse[torch.float16]

# %%
# Attention in 16 bits, judged as FlashAttention judges it
# --------------------------------------------------------
# A 16-bit kernel cannot match a float64 reference to float64's precision; the question
# is whether it loses more than 16-bit arithmetic must. FlashAttention's tests
# (``tests/test_flash_attn.py`` of Dao-AILab/flash-attention at commit 0251105, e.g.
# ``test_flash_attn_qkvpacked``) draw ``q, k, v`` in the 16-bit dtype, compute a
# reference from them in float32 (``attention_ref(..., upcast=True)``, rounded back to
# the dtype), the same formula in the 16-bit dtype (``upcast=False, reorder_ops=True``:
# the scale moved onto ``k``), and assert
# ``max|out - out_ref| <= 2 * max|out_pt - out_ref|`` ("at most twice the numerical
# error of a Pytorch implementation"; ``+ 1e-5`` in the causal and split-KV tests, a
# factor of 3, or 5 with ALiBi, for the KV-cache kernel). Here the reference is
# float64 and the naive computation is
# :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h})\, v` step by step in the 16-bit dtype.
# The factor stays 2: a kernel that keeps the scores and the softmax in float32 and
# rounds once should beat the naive one, which rounds the scores, the probabilities and
# the product; 2 leaves room for another summation order and for rounding the
# probabilities before ``P @ v``, while a real slip (a lost scale, a mask off by one)
# costs far more. The comparison runs in the 16-bit dtype, against the reference rounded
# to it, so ``rtol = eps`` covers that one rounding:
# ``|out - ref| <= 2 max|naive - ref| + eps |ref|``.
# The device's default kernel runs (:doc:`plot_13_sdpa_backends_flex` names it: the
# flash kernel on CPU for these inputs).
B, Nh, L = 2, 4, 128
HEADS = [16, 64, 128]


def formula(q, k, v, causal=False, bias=None):
    """softmax(q k^T / sqrt(Dh) + bias) v, masked if causal; (B, Nh, L, Dh)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
    if bias is not None:
        scores = scores + bias
    if causal:
        future = torch.ones_like(scores, dtype=torch.bool).triu(1)  # key after query
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v


def inputs(dt, Dh, positive_v=False):
    """q, k, v drawn in float32 and rounded to dt: the kernel sees exact inputs."""
    q, k, v = (torch.randn(B, Nh, L, Dh, device=device) for _ in range(3))
    if positive_v:
        v = 1 + torch.rand(B, Nh, L, Dh, device=device)  # values in [1, 2)
    return q.to(dt), k.to(dt), v.to(dt)  # (B, Nh, L, Dh) each


err = {}  # (dtype, Dh, causal, "kernel" or "naive") -> max |out - float64|
kern, ref = {}, {}  # (dtype, Dh, causal) -> SDPA's output, the float64 reference
for dt in DTYPES:
    for Dh in HEADS:
        q, k, v = inputs(dt, Dh)
        for causal in [False, True]:
            case = (dt, Dh, causal)
            ref[case] = formula(q.double(), k.double(), v.double(), causal)
            kern[case] = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            naive = formula(q, k, v, causal)
            for who, o in [("kernel", kern[case]), ("naive", naive)]:
                err[case + (who,)] = (o.double() - ref[case]).abs().max().item()
print(f"{'dtype':9s}{'Dh':>4s} {'mask':7s}{'kernel':>10s}{'naive':>10s}{'ratio':>7s}")
for (dt, Dh, causal, who), e in err.items():
    if who == "kernel":
        n = err[dt, Dh, causal, "naive"]
        print(f"{short[dt]:9s}{Dh:4d} {'causal' if causal else 'none':7s}"
              f"{e:10.2e}{n:10.2e}{e / n:7.2f}")
ratios = [err[k] / err[k[:3] + ("naive",)] for k in err if k[3] == "kernel"]
best, worst = min(ratios), max(ratios)
print(f"ratio kernel / naive: {best:.2f} to {worst:.2f} (FlashAttention's tests allow "
      "2)")

# %%
# The ratio test, for each dtype and head size, without and with the causal mask.
for dt in DTYPES:
    eps = torch.finfo(dt).eps  # covers rounding the float64 reference to dt
    for Dh in HEADS:
        none, causal = (dt, Dh, False), (dt, Dh, True)
        torch.testing.assert_close(kern[none], ref[none].to(dt), rtol=eps,
                                   atol=2 * err[none + ("naive",)])
        torch.testing.assert_close(kern[causal], ref[causal].to(dt), rtol=eps,
                                   atol=2 * err[causal + ("naive",)])

# %%
# At torch.testing's defaults for the dtype
# -----------------------------------------
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
fails = {}  # (dtype, Dh, causal) -> share of entries outside the defaults, v ~ N(0,1)
pos_kern, pos_ref = {}, {}  # (dtype, Dh, causal) -> output, float64 reference; v > 0
for dt in DTYPES:
    for Dh in HEADS:
        for causal in [False, True]:
            q, k, v = inputs(dt, Dh)
            r64 = formula(q.double(), k.double(), v.double(), causal)
            out16 = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            close = torch.isclose(out16.double(), r64.to(dt).double(),
                                  rtol=1.6e-2 if dt == torch.bfloat16 else 1e-3,
                                  atol=1e-5)
            fails[dt, Dh, causal] = 1 - close.double().mean().item()
            q, k, v = inputs(dt, Dh, positive_v=True)  # outputs of one sign
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
# Each backend forced, on CUDA
# ----------------------------
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
                q, k, v = inputs(dt, Dh)  # (B, Nh, L, Dh) each
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
    print("on cpu: the forced-backend section did not run (flash and math only here; "
          "see plot_13)")

# %%
# The errors in one figure: the default kernel against the naive 16-bit computation,
# for each dtype, head size and mask, on a log scale.
import matplotlib.pyplot as plt

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
# References
# ----------
# ``torch.autocast``, ``torch.nn.functional.scaled_dot_product_attention``,
# ``torch.nn.attention.sdpa_kernel``, ``torch.testing.assert_close``. PyTorch's
# "Automatic Mixed Precision" notes list the ops of each autocast list per device.
# Micikevicius et al., *Mixed Precision Training* (2018), arXiv:1710.03740; Dao,
# *FlashAttention-2* (2023), arXiv:2307.08691, and its repository's
# ``tests/test_flash_attn.py`` (Dao-AILab/flash-attention, commit 0251105).
