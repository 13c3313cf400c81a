"""
autocast: 16-bit products, a float32 residual stream
====================================================

``torch.autocast`` runs some operations in bfloat16 or float16 and leaves the others
alone: which ones, on CPU and CUDA, what exactly it does, and what it means for a block.

**You will learn**

- which ops autocast runs in 16 bits, which in float32, and which in their input's dtype
- why autocast is exactly "cast the inputs, run the op", bit for bit
- why a pre-LN block's residual stream stays float32 under autocast
- what autocast buys against converting the whole block to 16 bits

**Prerequisites:** :doc:`/generated/transformer/plot_05_transformer_block` (the pre-LN
block), :doc:`/generated/normalization/plot_16_norms_16bit` (float16 and bfloat16),
:doc:`/generated/transformer/plot_20_softmax_masks_16bit` (softmax in 16 bits).
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
# The block this page shares with another, copied verbatim: the causal mask (from
# :doc:`/generated/transformer/plot_04_causal_attention`).


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


# %%
# The idea
# --------
# autocast keeps per device a *lower-precision* list and a *float32* list of ops. An op
# on a list casts its floating inputs to the list's dtype and runs; any other op runs in
# the dtype it is given. For a 16-bit dtype :math:`d` and an op :math:`f` on the
# lower-precision list, and type promotion at the residual sum:
#
# .. math::
#
#    \mathrm{autocast}_d\big(f\big)(x, W) = f\big(\mathrm{cast}_d(x),
#    \mathrm{cast}_d(W)\big), \qquad
#    \underbrace{x}_{\text{float32}} + \underbrace{\mathrm{branch}(x)}_{d}
#    \;\to\; \text{float32} .
#
# So in a pre-LN block:
fig, ax = plt.subplots(figsize=(11, 3.6))
boxes = [  # (x, y, label, dtype of its output under autocast)
    (0.3, 1.5, "x", "float32"), (1.3, 2.8, "LayerNorm", "float32"),
    (2.7, 2.8, "Linear qkv", "16-bit"), (4.3, 2.8, "softmax(qk^T) v", "16-bit*"),
    (5.9, 2.8, "Linear out", "16-bit"), (7.0, 1.5, "h = x + attn", "float32"),
    (7.9, 0.2, "LayerNorm", "float32"), (9.2, 0.2, "Linear fc", "16-bit"),
    (10.5, 0.2, "GELU", "16-bit"), (11.8, 0.2, "Linear proj", "16-bit"),
    (12.7, 1.5, "y = h + mlp", "float32")]
color = {"float32": "C0", "16-bit": "C1", "16-bit*": "C1"}
for bx, by, label, kind in boxes:
    ax.text(bx, by, f"{label}\n{kind}", ha="center", va="center", fontsize=8.5,
            bbox=dict(boxstyle="round", fc=color[kind], alpha=0.3, ec=color[kind]))
branches = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9),
            (9, 10)]
for i, j in branches + [(0, 5), (5, 10)]:  # the last two: the residual stream
    stream = (i, j) in [(0, 5), (5, 10)]
    ax.annotate("", boxes[j][:2], boxes[i][:2], arrowprops=dict(
        arrowstyle="->", shrinkA=20, shrinkB=20, color="C0" if stream else "k",
        lw=2.5 if stream else 1))
ax.text(3.6, 1.62, "residual stream, float32", color="C0", ha="center")
ax.text(4.0, 0.2, "* softmax: 16-bit on CPU,\nfloat32 on CUDA (its float32 list)",
        ha="center", va="center", fontsize=8)
ax.set_xlim(-0.2, 13.4)
ax.set_ylim(-0.4, 3.4)
ax.axis("off")
ax.set_title("Under autocast the products run in 16 bits (orange); the residual "
             "stream stays float32 (blue)")
plt.show()
# %%
# From scratch
# ------------
# The chapter's block (:doc:`plot_05_transformer_block`) in its pre-LN order, causal.
from torch import nn


class PreLNBlock(nn.Module):
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
        future = ~causal_mask(L, x.device)  # (L, L): True where a key is later
        logits = logits.masked_fill(future, float("-inf"))
        y = torch.einsum("bhlm,bhmd->bhld", logits.softmax(dim=-1), v)  # (B, Nh, L, Dh)
        return self.out(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)

    def mlp(self, x):
        return self.proj(F.gelu(self.fc(x)))  # (B, L, D)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# %%
# Which dtype each operation runs in, and how
# -------------------------------------------
# An op on neither list runs in its inputs' dtype, so the answer depends on what comes
# in: float32 from a user, 16 bits from a preceding ``Linear``. Both, per 16-bit dtype
# (the full table is in the first Proof below):
L, D = 16, 64
x32, w = torch.randn(L, D, device=device), torch.randn(D, D, device=device) / 8
b = torch.randn(D, device=device)  # x32 (L, D) float32, w (D, D), b (D,)
gamma, beta = 1 + 0.5 * torch.randn(D, device=device), torch.randn(D, device=device)
OPS = {  # name -> the op, on x and its float32 parameters (PARAMS)
    "matmul": lambda t, w: t @ w, "linear": lambda t, w, b: F.linear(t, w, b),
    "sdpa": lambda t: F.scaled_dot_product_attention(t[None], t[None], t[None]),
    "softmax": lambda t: t.softmax(dim=-1),
    "layer_norm": lambda t, g, b: F.layer_norm(t, (D,), g, b),
    "rms_norm": lambda t: F.rms_norm(t, (D,)), "gelu": lambda t: F.gelu(t)}
PARAMS = {"matmul": (w,), "linear": (w, b), "layer_norm": (gamma, beta)}
DTYPES = [torch.bfloat16, torch.float16]
short = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
out = {}  # (16-bit dtype, input "float32" or "16-bit", op) -> output under autocast
for dt in DTYPES:
    for given, t in [("float32", x32), ("16-bit", x32.to(dt))]:  # t: (L, D)
        runs = {}  # output dtype -> the ops that return it
        with torch.autocast(device, dtype=dt):
            for name, op in OPS.items():
                out[dt, given, name] = op(t, *PARAMS.get(name, ()))
                runs.setdefault(short[out[dt, given, name].dtype], []).append(name)
        print(f"autocast({short[dt]}), {given} input:")
        for k, v in runs.items():
            print(f"    {k:8s} <- {', '.join(v)}")

# %%
# And autocast is "cast the inputs, run the op": its ``linear`` equals ``F.linear`` on
# inputs cast by hand (the float32 weight and bias too), bit for bit (every op: below).
by_hand = F.linear(*(t.to(torch.bfloat16) for t in (x32, w, b)))  # (L, D) bfloat16
torch.testing.assert_close(out[torch.bfloat16, "float32", "linear"], by_hand,
                           rtol=0, atol=0)
print("autocast's linear equals F.linear on inputs cast by hand, bit for bit")

# %%
# A pre-LN block under autocast
# -----------------------------
# Both branches come out in 16 bits and ``x + branch`` promotes to float32: **the
# residual stream stays float32**, and so does the block's output, on every device.

B, L, D, Nh = 2, 16, 64, 4
block = PreLNBlock(D, Nh).to(device).eval()
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
# Proof: the full table, asserted on each device, each op a cast then the op
# --------------------------------------------------------------------------
# The full table. A 16-bit input is also how the H100 measurements behind this page's
# CUDA side probed softmax and the norms. The norms carry a float32 weight, as a
# module's would; ``rms_norm`` runs without one (a float32 weight on a 16-bit input
# makes it warn that it cannot use its fused kernel).
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
# And every op of the table is "cast the inputs, run the op", bit for bit. Each output
# equals the same op, written out again below, run outside autocast on inputs cast by
# hand: to the 16-bit dtype for the lower-precision list (the float32
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
# Proof: autocast's ``linear`` accumulates in float32 on CPU
# ----------------------------------------------------------
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
# Proof: the block under autocast is the hand-cast block, bit for bit, and causal
# --------------------------------------------------------------------------------
# The block computed by hand (``block_by_hand``, below): the same weights, each
# ``Linear`` and ``einsum`` fed tensors cast to the dtype, the LayerNorms and (on CUDA)
# the softmax in float32, written without the class's methods. Both branches and the
# block's output equal autocast's, bit for bit. (On CPU the softmax's dtype cannot be
# seen here: its 16-bit kernel computes in float32 and rounds once, so
# float32-then-round gives the same bits.)
def block_by_hand(block, x, dt):
    """autocast's pre-LN `block`, cast by cast; x (B, L, D) float32; 3 x (B, L, D)."""
    B, L, D = x.shape
    P = dict(block.named_parameters())  # name -> parameter
    Dh = D // block.Nh
    soft = torch.float32 if x.device.type == "cuda" else dt  # the dtype softmax runs in
    a = F.layer_norm(x, (D,), P["ln_1.weight"], P["ln_1.bias"])  # float32
    qkv = F.linear(a.to(dt), P["qkv.weight"].to(dt), P["qkv.bias"].to(dt))
    q, k, v = (t.reshape(B, L, block.Nh, Dh).transpose(1, 2) for t in qkv.split(D, -1))
    s = torch.einsum("bhld,bhmd->bhlm", q, k) / math.sqrt(Dh)  # (B, Nh, L, L), dt
    s = s.masked_fill(~causal_mask(L, x.device), float("-inf"))  # later keys: -inf
    p = s.to(soft).softmax(dim=-1).to(dt)  # (B, Nh, L, L)
    y = torch.einsum("bhlm,bhmd->bhld", p, v).transpose(1, 2).reshape(B, L, D)
    att = F.linear(y, P["out.weight"].to(dt), P["out.bias"].to(dt))  # (B, L, D), dt
    h = x + att  # float32: the residual stream
    c = F.layer_norm(h, (D,), P["ln_2.weight"], P["ln_2.bias"]).to(dt)
    m = F.gelu(F.linear(c, P["fc.weight"].to(dt), P["fc.bias"].to(dt)))
    mlp = F.linear(m, P["proj.weight"].to(dt), P["proj.bias"].to(dt))  # (B, L, D), dt
    return att, mlp, h + mlp  # the branches and the block's output (float32)


# %%
# Both, for each dtype:
for dt in DTYPES:
    with torch.no_grad(), torch.autocast(device, dtype=dt):
        att = block.attn(block.ln_1(x))  # (B, L, D)
        mlp = block.mlp(block.ln_2(x + att))  # (B, L, D)
        y = block(x)  # (B, L, D) float32
    with torch.no_grad():  # outside autocast
        hand_att, hand_mlp, hand_y = block_by_hand(block, x, dt)
    torch.testing.assert_close(att, hand_att, rtol=0, atol=0)
    torch.testing.assert_close(mlp, hand_mlp, rtol=0, atol=0)
    torch.testing.assert_close(y, hand_y, rtol=0, atol=0)  # float32
print("both branches and the block under autocast equal the hand-cast ones, bit "
      "for bit")

# %%
# And the block is causal: changing the last token moves no earlier output.
x_later = x.clone()
x_later[:, -1] += torch.randn_like(x[:, -1])  # change the last token only
with torch.no_grad():
    moved = (block(x_later) - block(x)).abs().amax(dim=(0, 2))  # (L,)
print(f"changing the last token moves earlier outputs by {moved[:-1].max():.1e}, "
      f"the last by {moved[-1]:.2f}")
assert moved[:-1].max() < 1e-5 < 0.1 < moved[-1]  # causal: no query sees a later key

# %%
# Try it: convert the whole block to 16 bits. How far is it from float64?
# -----------------------------------------------------------------------
# ``block.to(dt)`` stores the weights, the input and so the residual stream in 16 bits.
# Compare its error against float64 with autocast's, for five seeds.

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
    blk = PreLNBlock(D, Nh).to(device).eval()
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
# References
# ----------
# ``torch.autocast``, ``torch.testing.assert_close``. PyTorch's
# "Automatic Mixed Precision" notes list the ops of each autocast list per device.
# :footcite:t:`Micikevicius2018`.
#
# .. footbibliography::
