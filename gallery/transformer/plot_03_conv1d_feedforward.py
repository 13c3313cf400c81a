"""
GPT-2's Conv1D and the feed-forward block
=========================================

GPT-2 calls its linear layers ``Conv1D``: ``Conv1D(nf, nx)`` is ``nn.Linear(nx, nf)``
with the weight stored transposed, so its *first* argument is the output width. This
page builds GPT-2's ``D -> 4D -> D`` feed-forward block from it and measures how far
GPT-2's tanh GELU lies from the exact one; the notes' errata follow in Proof sections.

**You will learn**

- why ``Conv1D(nf, nx)`` is ``nn.Linear(nx, nf)`` with its weight stored ``(nx, nf)``
- why it is called ``Conv1D``: a convolution of kernel width 1 along the tokens
- how the feed-forward block widens each token to ``4D`` and back
- how far GPT-2's tanh GELU is from the exact GELU, and what dropout does

**Prerequisites:** :doc:`/generated/transformer/plot_01_self_attention` (the tokens'
shapes ``(B, L, D)``).
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
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# The feed-forward block acts on every token alone: it widens the token's ``D``
# features to ``4D``, applies a GELU, and projects back,
#
# .. math::
#
#    \mathrm{FF}(x) = \mathrm{GELU}(x\, W_{fc} + b_{fc})\, W_{proj} + b_{proj},
#    \qquad W_{fc} \in \mathbb{R}^{D \times 4D},\ W_{proj} \in \mathbb{R}^{4D \times D}.
#
# GPT-2 stores each weight as written here, ``(nx, nf)``; ``nn.Linear`` the transpose.
fig, ax = plt.subplots(figsize=(8, 2.6))
boxes = [("x\n(B, L, D)", "0.9"), ("c_fc = Conv1D(4D, D)\nweight (D, 4D)", "tab:blue"),
         ("GELU\n(B, L, 4D)", "tab:orange"),
         ("c_proj = Conv1D(D, 4D)\nweight (4D, D)", "tab:blue"),
         ("dropout\n(B, L, D)", "tab:green")]
for i, (text, color) in enumerate(boxes):
    ax.text(i * 2.2, 0, text, ha="center", va="center", fontsize=9,
            bbox={"boxstyle": "round,pad=0.5", "fc": color, "alpha": 0.35})
    if i:
        ax.annotate("", xy=(i * 2.2 - 0.95, 0), xytext=(i * 2.2 - 1.25, 0),
                    arrowprops={"arrowstyle": "->", "lw": 1.5})
ax.set_xlim(-0.9, 9.7)
ax.set_ylim(-1, 1)
ax.axis("off")
ax.set_title("GPT-2's feed-forward block: D -> 4D -> D per token;\n"
             "Conv1D(nf, nx) takes the OUTPUT width first")
plt.show()

# %%
# From scratch
# ------------


class Conv1D(nn.Module):
    """GPT-2's linear layer, y = x @ weight + bias; weight (nx, nf), input first."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)  # (nx, nf)
        self.bias = nn.Parameter(torch.zeros(nf))  # (nf,)

    def forward(self, x):  # (..., nx) -> (..., nf)
        size_out = x.shape[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)  # (N, nf)
        return x.view(size_out)


# %%
# ``Conv1D(nf, nx)`` is ``nn.Linear(nx, nf)``: copy a ``D -> 4D`` layer's weights over.
B, L, D = 2, 5, 32
conv = Conv1D(4 * D, D).to(device)  # nf = 4D outputs, nx = D inputs
assert conv.weight.shape == (D, 4 * D)
linear = nn.Linear(D, 4 * D).to(device)
assert torch.equal(conv.bias, torch.zeros(4 * D, device=device))  # starts at zero
with torch.no_grad():
    conv.bias.normal_()  # a zero bias would hide a bias not copied
    linear.weight.copy_(conv.weight.T)  # (4D, D)
    linear.bias.copy_(conv.bias)  # (4D,)
    x = torch.randn(B, L, D, device=device)  # (B, L, D)
    ours, ref = conv(x), linear(x)  # (B, L, 4D)
print(f"max|Conv1D - Linear| = {(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

# %%
# The feed-forward block
# ----------------------
# GPT-2's order: ``c_fc = Conv1D(4D, D)``, ``c_proj = Conv1D(D, 4D)``; hidden: n_state.


class FeedForward(nn.Module):
    """(B, L, d_model) -> (B, L, n_state) -> (B, L, d_model); Conv1D(nf=out, nx=in)."""

    def __init__(self, dropout, d_model=768, n_state=768 * 4):
        super().__init__()
        self.c_fc = Conv1D(n_state, d_model)  # d_model -> n_state
        self.c_proj = Conv1D(d_model, n_state)  # n_state -> d_model
        self.act = F.gelu
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))

# %%
# It is ``Linear -> GELU -> Linear``: copy the weights, redrawn at a scale where GELU is
# far from linear, into PyTorch's own MLP; ``eval()`` makes dropout the identity
# (proven in a Proof section below).
ff = FeedForward(dropout=0.1, d_model=D, n_state=4 * D).to(device).eval()
mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
mlp = mlp.to(device).eval()
assert mlp[1].approximate == "none"  # nn.GELU() is the exact GELU, F.gelu's default
with torch.no_grad():
    for p in ff.parameters():
        p.normal_(std=0.2)
    mlp[0].weight.copy_(ff.c_fc.weight.T)  # (4D, D)
    mlp[0].bias.copy_(ff.c_fc.bias)
    mlp[2].weight.copy_(ff.c_proj.weight.T)  # (D, 4D)
    mlp[2].bias.copy_(ff.c_proj.bias)
    ours, ref = ff(x), mlp(x)  # (B, L, D)
print(f"max|FeedForward - Sequential(Linear, GELU, Linear)| = "
      f"{(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

# %%
# Proof: the shapes, flat tokens, and GPT-2's width ``(B, L, 768)``
# -----------------------------------------------------------------
print(f"Conv1D(nf={4 * D}, nx={D}).weight: {tuple(conv.weight.shape)} (nx, nf)")
print(f"nn.Linear({D}, {4 * D}).weight:  {tuple(linear.weight.shape)} (out, in)")
with torch.no_grad():
    x_flat = torch.randn(B * L, D, device=device)  # (B*L, D)
    ours, ref = conv(x_flat), linear(x_flat)  # (B*L, 4D)
print(f"input {tuple(x_flat.shape)}: max|Conv1D - Linear| = "
      f"{(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

D_MODEL = 768  # GPT-2's D
x768 = torch.randn(B, L, D_MODEL, device=device)  # (B, L, 768)
block768 = FeedForward(dropout=0.0).to(device)  # the widths are the point here
out768 = block768(x768)  # (B, L, 768)
print(f"FeedForward: {tuple(x768.shape)} -> {tuple(out768.shape)}, "
      f"c_fc.weight {tuple(block768.c_fc.weight.shape)}: 768 -> 3072")
assert out768.shape == x768.shape
assert block768.c_fc.weight.shape == (D_MODEL, 4 * D_MODEL)

# %%
# Exact GELU and GPT-2's tanh approximation
# -----------------------------------------
# ``F.gelu(x)`` is the exact :math:`x\, \Phi(x)` (:math:`\Phi` the normal CDF). GPT-2
# was trained with the tanh approximation below, PyTorch's ``approximate="tanh"``. On
# ``[-6, 6]`` the two differ by at most :measured:`max_gap:.1e`, at :math:`x = \pm`\
# :measured:`at_abs:.2f`: small, but far above ``assert_close``'s float32 tolerance
# (a Proof section below measures by how much).


def gelu_tanh(x):
    """GPT-2's GELU: the tanh approximation, as its code writes it."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# %%
xs = torch.linspace(-6, 6, 2401, dtype=torch.float64, device=device)
gap = F.gelu(xs) - F.gelu(xs, approximate="tanh")  # exact - tanh; float64: no rounding
max_gap, at = gap.abs().max().item(), xs[gap.abs().argmax()].item()
print(f"max|exact - tanh| = {max_gap:.2e} at x = {at:.2f} (and at x = {-at:.2f})")
at_abs = abs(at)
assert 2e-4 < max_gap < 1e-3  # printed above: different functions, close ones
# %%
# .. _errata-conv1d-view:
#
# Proof: the notes' Conv1D breaks on a strided input
# --------------------------------------------------
# The notes' ``Conv1D`` (copied verbatim below and renamed ``NotesConv1D``; the notes
# take it from a GPT-2 port, and their snippet uses ``nn`` and ``Parameter`` without
# importing them) differs from the one above in one word: its ``forward`` flattens
# the leading dims with ``x.view(-1, nx)``, and a view needs
# strides that merge. A transposed tensor's do not: ``(L, B, D)`` made from
# ``(B, L, D)`` by ``transpose(0, 1)`` (the layout of ``batch_first=False``) raises.
# ``reshape`` views when it can and copies when it must; with it the layer equals
# ``nn.Linear`` there too.
from torch.nn import Parameter  # noqa: E402  (the notes' import)


class NotesConv1D(nn.Module):
    def __init__(self, nf, nx):
        super(NotesConv1D, self).__init__()
        self.nf = nf
        w = torch.empty(nx, nf)
        nn.init.normal_(w, std=0.02)
        self.weight = Parameter(w)
        self.bias = Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        # x.size(-1) should be equal to nx
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(*size_out)
        return x


# %%
notes_conv = NotesConv1D(4 * D, D).to(device)
notes_conv.load_state_dict(conv.state_dict())
with torch.no_grad():
    err = (notes_conv(x) - conv(x)).abs().max().item()  # (B, L, 4D), contiguous input
print(f"contiguous input: max|notes' Conv1D - the book's| = {err:.2e}")
torch.testing.assert_close(notes_conv(x), conv(x))
x_lbd = x.transpose(0, 1)  # (L, B, D), not contiguous
try:
    notes_conv(x_lbd)
except RuntimeError as err:
    print(f"Conv1D on x.transpose(0, 1): RuntimeError:\n    {str(err).split(' (')[0]}")
else:
    raise AssertionError("expected x.view(-1, nx) to fail on a transposed input")

with torch.no_grad():
    ours, ref = conv(x_lbd), linear(x_lbd)  # (L, B, 4D)
print(f"the book's Conv1D (reshape), input {tuple(x_lbd.shape)} transposed:\n"
      f"max|Conv1D - Linear| = "
      f"{(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

# %%
# .. _errata-ff-swapped-widths:
#
# Proof: the notes' FeedForward swaps the widths
# ----------------------------------------------
# The notes build GPT-2's feed-forward block, ``d_model -> 4 d_model -> d_model``, as
# below (verbatim, at GPT-2's ``d_model = 768``). Called on a batch of tokens, it
# crashes. (Renamed ``NotesFeedForward``; the notes' constant ``D_MODEL = 768`` is
# written into the defaults, so that the class lifts alone; its ``Conv1D`` is the one
# above, which takes its arguments in the same order as theirs.)


class NotesFeedForward(nn.Module):
    def __init__(self, dropout, d_model=768, nx=768*4):
         super().__init__()
         self.c_fc    = Conv1D(d_model, nx)
         self.c_proj  = Conv1D(nx, d_model)
         self.act     = F.gelu
         self.dropout = nn.Dropout(dropout)

    def forward(self, x):
         return self.dropout(self.c_proj(self.act(self.c_fc(x))))


# %%
# Called on a batch of tokens at ``d_model = 768``:
ff_notes = NotesFeedForward(dropout=0.1).to(device)
x768 = torch.randn(B, L, D_MODEL, device=device)  # (B, L, 768)
try:
    ff_notes(x768)
except RuntimeError as err:
    print(f"RuntimeError: {err}")
else:
    raise AssertionError("expected the notes' FeedForward to fail")

# %%
# ``Conv1D`` takes the *output* width first, so ``Conv1D(d_model, nx)`` is a
# ``3072 -> 768`` layer, and the very first matmul meets a 768-wide input. The weights'
# shapes say so:
print(f"notes' c_fc.weight {tuple(ff_notes.c_fc.weight.shape)}: maps 3072 -> 768")
print(f"notes' c_proj.weight {tuple(ff_notes.c_proj.weight.shape)}: maps 768 -> 3072")
assert ff_notes.c_fc.weight.shape == (4 * D_MODEL, D_MODEL)
assert ff_notes.c_proj.weight.shape == (D_MODEL, 4 * D_MODEL)

# %%
# The names set the trap. ``Conv1D``'s second parameter is called ``nx``, and it is its
# *input* width; the notes' ``FeedForward`` also has an ``nx``, and it is the *hidden*
# width, ``4 d_model``, the output of ``c_fc``. So ``Conv1D(d_model, nx)`` passes each
# name to its namesake and looks right. GPT-2 calls the hidden width ``n_state``
# (``MLP(n_state=4 * n_embd)``) and keeps ``nx`` for the model width, the input of
# ``c_fc``: ``Conv1D(n_state, nx)``.
import inspect

print(f"Conv1D{inspect.signature(NotesConv1D)}: nx = weight rows = input width")
print(f"NotesFeedForward{inspect.signature(NotesFeedForward)}: nx = hidden width")
assert conv.weight.shape[0] == D and ff_notes.c_fc.weight.shape[0] == 4 * D_MODEL


# %%
# Proof: GPT-2's gelu is PyTorch's tanh form; the gap, far above ``assert_close``
# ---------------------------------------------------------------------------------
# ``gelu_tanh`` is PyTorch's ``approximate="tanh"``, in float32 and float64; the exact
# form differs from it by the amounts quoted above.
for dtype in (torch.float32, torch.float64):
    t = torch.linspace(-6, 6, 2401, dtype=dtype, device=device)
    err = (gelu_tanh(t) - F.gelu(t, approximate="tanh")).abs().max().item()
    print(f"{dtype}: max|GPT-2 gelu - F.gelu(approximate='tanh')| = {err:.1e}")
    torch.testing.assert_close(gelu_tanh(t), F.gelu(t, approximate="tanh"))

# %%
# The gap over the whole range: it vanishes at ``x = 0`` and for large ``|x|``, where
# both forms tend to 0 and to ``x``, and is largest near ``|x| =``
# :measured:`at_abs:.1f`.
fig, ax = plt.subplots()
ax.plot(xs.cpu(), gap.cpu(), label="exact − tanh")
i_worst = gap.abs().argmax()  # the point the title names
ax.plot(xs[i_worst].cpu(), gap[i_worst].cpu(), "o", color="C3",
        label="the largest gap")
ax.axhline(0, color="gray", lw=0.8)
ax.set_xlabel("pre-activation x")
ax.set_ylabel("exact − tanh GELU (float64)")
ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
ax.set_title(f"GPT-2's tanh GELU is within {max_gap:.1e} of the exact GELU, "
             f"worst at |x| ≈ {abs(at):.1f}")
ax.legend(loc="lower center")  # between the two dips
plt.show()

# %%
# ``assert_close`` allows :math:`\mathrm{atol} + \mathrm{rtol} \cdot |\mathrm{ref}|`
# in float32, with ``atol = 1e-5`` and ``rtol = 1.3e-6``. The exact-tanh gap is
# :measured:`ratio_at:.0f` times more at the positive point,
# :measured:`ratio_max:.0f` times at the negative one, where the GELU is near 0 and the
# tolerance is ``atol`` alone.
ATOL, RTOL = 1e-5, 1.3e-6  # assert_close's defaults for float32
over = gap.abs() / (ATOL + RTOL * F.gelu(xs, approximate="tanh").abs())  # (2401,)
for point in (at, -at):
    i = (xs - point).abs().argmin()
    tol = ATOL + RTOL * F.gelu(xs[i], approximate="tanh").abs().item()
    print(f"x = {point:5.2f}: |exact - tanh| = {over[i].item():.0f} x the float32 "
          f"tolerance {tol:.2e}")
ratio_at = over[(xs - at).abs().argmin()].item()  # at the positive point
ratio_max = over.max().item()
print(f"largest ratio {ratio_max:.0f} at x = {xs[over.argmax()].item():.2f}")
assert 30 < ratio_at < 40 and 40 < ratio_max < 55  # the two ratios printed above
assert xs[over.argmax()].item() == -at_abs  # the largest ratio: where GELU is near 0

# %%
# Proof: the largest ratio is the tolerance factor ``isclose`` needs
# ------------------------------------------------------------------
# The largest ratio is exactly the factor by which both tolerances would have to grow:
# ``torch.isclose``, the comparison ``assert_close`` makes, accepts every point at that
# factor and, a part in a million below it, rejects one point: the worst one.
MARGIN = 1e-6  # far above float64 rounding (1e-16), far below a 1e-3 slip in `over`
r = over.max().item()
exact, tanh = F.gelu(xs), F.gelu(xs, approximate="tanh")  # (2401,) each
above, below = (torch.isclose(exact, tanh, rtol=RTOL * f, atol=ATOL * f)  # (2401,)
                for f in (r * (1 + MARGIN), r * (1 - MARGIN)))
rejected = (~below).nonzero().flatten().tolist()  # indices into xs
print(f"isclose at {r:.6f} x the tolerances rejects {(~above).sum().item()} points;\n"
      f"a part in a million less, x = {[round(xs[i].item(), 3) for i in rejected]}")
assert above.all() and rejected == [over.argmax().item()]

# %%
# .. _errata-ff-dropout:
#
# Proof: dropout is the identity in eval mode, a rescaled mask in train mode
# --------------------------------------------------------------------------
# ``nn.Dropout(p)`` in eval mode returns its input untouched. In train mode it zeroes
# each entry independently with probability :math:`p` and multiplies the survivors by
# :math:`1 / (1 - p)`, so every entry keeps its expected value. Over :math:`n` entries
# the kept fraction has standard deviation :math:`\sqrt{p (1 - p) / n}`; six of those
# bound it (a miss has probability about ``2e-9``). The notes' ``Attention`` hard-wires
# ``nn.Dropout(0.1)`` on its attention weights: it cannot be switched off by argument,
# only by ``eval()``. The dropout checked is the block's own, ``ff.dropout``, the one
# the comparison with ``nn.Sequential`` above ran in eval mode.
#
# The input is ``linspace(1, 2, n)``: no entry is zero by construction, so in train mode
# a zero in the output marks exactly a dropped entry (a random input might hold an
# exact zero: ``torch.randn`` on CUDA does for some seeds).
p = 0.1
drop = ff.dropout  # the block's own nn.Dropout(0.1), in eval mode since its comparison
z = torch.linspace(1, 2, 2**20, device=device)  # (n,), entries in [1, 2]

drop.eval()
assert torch.equal(drop(z), z)
print("eval mode: Dropout returns its input unchanged")

drop.train()
y = drop(z)
kept = y != 0
frac = kept.float().mean().item()
sigma = math.sqrt(p * (1 - p) / z.numel())
print(f"train mode: kept fraction {frac:.5f} (1 - p = {1 - p}, "
      f"6 sigma = {6 * sigma:.1e})")
assert abs(frac - (1 - p)) < 6 * sigma
scaled = z[kept] * (1 / (1 - p))
print(f"survivors: max|y - x / (1 - p)| = {(y[kept] - scaled).abs().max().item():.1e}")
torch.testing.assert_close(y[kept], scaled)

# %%
# Try it: why "Conv1D"? Compare it with ``nn.Conv1d(D, 4D, kernel_size=1)``
# -------------------------------------------------------------------------
# Copy ``conv``'s weights into a convolution of kernel width 1 that slides along the
# token axis, and compare the outputs.
conv1d = nn.Conv1d(D, 4 * D, kernel_size=1).to(device)  # in (B, D, L); w (4D, D, 1)

# %%
# On CUDA, cuDNN may run a float32 convolution in TF32 (a 10-bit mantissa): that is its
# default, while matmuls run in full float32 by default. TF32 is switched off for this
# comparison, so that both sides compute in float32 and the default tolerances apply;
# on CPU the flag changes nothing.
tf32 = torch.backends.cudnn.allow_tf32
torch.backends.cudnn.allow_tf32 = False
with torch.no_grad():
    conv1d.weight.copy_(conv.weight.T.unsqueeze(-1))  # (4D, D, 1)
    conv1d.bias.copy_(conv.bias)  # (4D,)
    ours = conv(x)  # (B, L, 4D)
    ref = conv1d(x.transpose(1, 2)).transpose(1, 2)  # (B, D, L) -> (B, 4D, L) -> back
torch.backends.cudnn.allow_tf32 = tf32
print(f"max|Conv1D - nn.Conv1d(kernel_size=1)| = {(ours - ref).abs().max().item():.2e}")
torch.testing.assert_close(ours, ref)

# %%
# They are equal: the convolution applies the same ``D -> 4D`` map to every token, and
# that is all ``Conv1D`` does.

# %%
# Try it: the block uses ``F.gelu``, the exact form. Does it reproduce GPT-2?
# ---------------------------------------------------------------------------
# Load GPT-2's weights into ``FeedForward`` (as the notes' block, it uses ``F.gelu``):
# does it compute what GPT-2 computes?
with torch.no_grad():
    h = ff.c_fc(x)  # (B, L, 4D)
    y_tanh, y_exact = ff.c_proj(F.gelu(h, approximate="tanh")), ff.c_proj(F.gelu(h))
    moved = (y_tanh - y_exact).abs().max().item()
print(f"FeedForward output, max|tanh GELU - exact GELU| = {moved:.1e}")
assert moved > 1e-4

# %%
# No: GPT-2 uses the tanh form, and on the block above the tanh form moves
# the output by more than ``assert_close`` allows. Pass ``approximate="tanh"`` to match
# GPT-2.
