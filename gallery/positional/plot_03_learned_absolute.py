"""
Learned absolute embeddings
===========================

The simplest positional embedding is a table: ``nn.Embedding(max_len, D)`` holds one
learned vector per position, added to the token embeddings. It is
:doc:`the formulation <plot_01_formulation>`'s interface with a table lookup as the PE
code; it has a hard limit, ``max_len``, and a freshly initialized table, unlike the
sinusoidal code, has no relative structure.

**You will learn**

- how GPT-2 style models add a learned position vector to each token embedding
- that this is the general interface with a table lookup as the PE code
- why a position ``>= max_len`` has no code at all
- why a random table, unlike the sinusoidal code, knows nothing about offsets

**Prerequisites:** :doc:`/generated/positional/plot_01_formulation` (the interface),
:doc:`/generated/positional/plot_02_sinusoidal` (the sinusoidal code).

GPT-2's own table, ``wpe``, is loaded on
:doc:`/generated/transformer/plot_08_gpt2_vs_hugging_face`.
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
# The blocks this page shares with others, copied verbatim: the interface ``apply_pe``
# (from :doc:`/generated/positional/plot_01_formulation`) and the sinusoidal code (from
# :doc:`/generated/positional/plot_02_sinusoidal`).


# Copied from positional/plot_01_formulation.py: apply_pe
def apply_pe(tokens, I, indices_to_pe, combine=torch.add):
    """tokens (..., N, D), I (..., N, C) long -> tokens with PE, (..., N, D)."""
    pe_code = indices_to_pe(I)  # (..., N, D)
    return combine(tokens, pe_code)  # (..., N, D)


# Copied from positional/plot_02_sinusoidal.py: sinusoidal_pe
def sinusoidal_pe(positions, D, base=10000.0, dtype=torch.float32):
    """positions (...,) integers -> (..., D): channels 2i, 2i+1 = sin, cos of p w_i."""
    i = torch.arange(D // 2, device=positions.device, dtype=dtype)  # (D/2,)
    w = base ** (-2 * i / D)  # (D/2,)
    angles = positions.to(dtype)[..., None] * w  # (..., D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., D)

# %%
# The idea
# --------
# A second embedding table ``P`` of ``max_len`` rows, one per position, is looked up at
# the positions and added to the token embeddings ``E[ids]``:
#
# .. math::
#
#    h_l = E[\mathrm{id}_l] + P[l], \qquad P \in \mathbb{R}^{\mathrm{max\_len}
#    \times D}, \quad l = 0, \dots, L - 1 < \mathrm{max\_len}.
#
# Each row is a free parameter: nothing ties row ``p`` to row ``p + k``. Below, each dot
# is one pair of positions ``(p, p + k)`` of a table drawn as ``nn.Embedding`` draws it,
# ``N(0, 1)``, next to the sinusoidal code (:doc:`plot_02_sinusoidal`, written out with
# ``torch``): the sinusoidal pairs collapse to one value per offset, the learned ones do
# not.
max_len_fig, D_fig = 64, 16
table_fig = torch.randn(max_len_fig, D_fig, dtype=torch.float64)  # (max_len, D)
w_fig = 10000 ** (-2 * torch.arange(D_fig // 2, dtype=torch.float64) / D_fig)
angles_fig = torch.arange(max_len_fig)[:, None] * w_fig  # (max_len, D/2)
sin_fig = torch.stack([angles_fig.sin(), angles_fig.cos()], -1).flatten(-2)  # (., D)
offsets_fig = range(1, 17)
fig, ax = plt.subplots(layout="constrained")
for name, t, marker in (("learned table (random init)", table_fig, "o"),
                        ("sinusoidal", sin_fig, "s")):
    gram = t @ t.T  # (max_len, max_len)
    ks = torch.cat([torch.full((max_len_fig - k,), k) for k in offsets_fig])
    dots = torch.cat([gram.diagonal(k) for k in offsets_fig])
    ax.plot(ks, dots, marker, ms=3, alpha=0.5, label=name)
ax.set_xlabel("offset k (tokens)")
ax.set_ylabel("PE(p) · PE(p + k), one dot per p")
ax.set_title("A random learned table scatters at every offset k;\n"
             "the sinusoidal code gives one value per offset")
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))  # offsets are integers
fig.legend(loc="outside lower center", ncol=2, markerscale=2)  # off the dots
plt.show()

# %%
# From scratch: token embedding plus position embedding
# -----------------------------------------------------
# GPT-2 style: token ids ``(B, L)`` look up ``(B, L, D)`` vectors, positions
# ``0 .. L-1`` look up ``(L, D)`` vectors in a second table, and the sum broadcasts over
# the batch.
B, L, D, vocab, max_len = 2, 10, 16, 50, 64
tok_emb = torch.nn.Embedding(vocab, D).to(device)
pos_emb = torch.nn.Embedding(max_len, D).to(device)
ids = torch.randint(vocab, (B, L), device=device)  # (B, L)
with torch.no_grad():
    x = tok_emb(ids)  # (B, L, D)
    positions = torch.arange(L, device=device)  # (L,)
    pe = pos_emb(positions)  # (L, D)
    h = x + pe  # (B, L, D), the same codes for every sequence
print(f"tokens {tuple(x.shape)} + pos_emb(arange(L)) {tuple(pe.shape)} "
      f"-> {tuple(h.shape)}")
assert x.shape == (B, L, D) and pe.shape == (L, D) and h.shape == (B, L, D)

# %%
# An instance of the general formulation
# --------------------------------------
# In :doc:`the formulation's <plot_01_formulation>` terms: the indices are
# ``I = [[0], [1], ..., [L-1]]`` (``C = 1``), the PE code is the table lookup of
# ``I[..., 0]`` and ``combine`` is addition (``apply_pe``, copied in Setup).
I = torch.arange(L, device=device).unsqueeze(-1)  # (L, 1), sequence indices
with torch.no_grad():
    general = apply_pe(x, I, lambda I: pos_emb(I[..., 0]))  # (B, L, D)
print(f"max|apply_pe(x, I, lookup) - (x + pos_emb(arange(L)))| = "
      f"{(general - h).abs().max():.1e}")
torch.testing.assert_close(general, h)

# %%
# The hard limit: ``max_len``
# ---------------------------
# A sequence longer than the table asks for rows that do not exist: on CPU an
# ``IndexError``; on CUDA a device-side assert that leaves the CUDA context unusable (so
# never run, hence not verified, here). The page checks the bound explicitly at the
# boundary (``max_len`` tokens fit, one more does not), against a lookup on the CPU.
def fits(positions, num_embeddings):
    """True when every position has a row in a table of `num_embeddings` rows."""
    return bool(positions.max() < num_embeddings)


# %%
table_cpu = pos_emb.weight.detach().cpu()  # (max_len, D)
outcomes = {}  # n_tokens -> (fits, CPU lookup works)
for n_tokens in (max_len, max_len + 1):  # the longest sequence that fits, one more
    positions = torch.arange(n_tokens, device=device)  # (n_tokens,)
    try:
        torch.nn.functional.embedding(positions.cpu(), table_cpu)  # (n_tokens, D)
        looked_up, outcome = True, "lookup works"
    except IndexError as err:
        looked_up, outcome = False, f"IndexError: {err}"
    print(f"{n_tokens} tokens, {pos_emb.num_embeddings} rows: "
          f"fits = {fits(positions, pos_emb.num_embeddings)}; on CPU: {outcome}")
    outcomes[n_tokens] = (fits(positions, pos_emb.num_embeddings), looked_up)
assert outcomes == {max_len: (True, True), max_len + 1: (False, False)}

# %%
# No relative structure in a random table
# ---------------------------------------
# For the sinusoidal code ``PE(p) . PE(p + k)`` is the same number for every ``p``
# (:doc:`plot_02_sinusoidal`). For a freshly initialized table (entries drawn from
# ``N(0, 1)``) the rows are independent random vectors: the dot product at a fixed
# offset scatters with a standard deviation of about ``sqrt(D)``. Training may or may
# not teach the table a relative structure; nothing builds it in. Float64 for the
# sinusoidal side, so that "the same number" is tested to 1e-7. The sinusoidal code is
# that of :doc:`plot_02_sinusoidal` (copied in Setup).
table = pos_emb.weight.detach().double()  # (max_len, D)
sin_table = sinusoidal_pe(torch.arange(max_len, device=device), D, dtype=torch.float64)
gram_learned = table @ table.T  # (max_len, max_len)
gram_sin = sin_table @ sin_table.T  # (max_len, max_len)
offsets = range(1, 17)  # at least max_len - 16 = 48 pairs per offset
spread_learned = torch.stack([gram_learned.diagonal(k).std() for k in offsets])  # (16,)
spread_sin = torch.stack([gram_sin.diagonal(k).std() for k in offsets])  # (16,)
print(f"std over p of PE(p).PE(p+k), k = 1..16: learned table, smallest "
      f"{spread_learned.min():.2f} (sqrt(D) = {D ** 0.5:.0f})")
print(f"                                          sinusoidal, largest "
      f"{spread_sin.max():.0e}")
assert spread_learned.min() > 1.0, "the random table has a relative structure?"
for k in offsets:
    diag = gram_sin.diagonal(k)  # (max_len - k,), every pair (p, p + k)
    torch.testing.assert_close(diag, diag[:1].expand_as(diag))

# %%
# Proof: a lookup is a product with one-hot rows
# ----------------------------------------------
# The table is the module's only parameter, ``max_len * D`` numbers, and a lookup is a
# product with one-hot rows: an independent way to compute the same codes. The product
# runs in float64, where it is exact on every device (on CUDA a float32 matmul would be
# exact too under PyTorch's default precision, but not if TF32 were switched on).
params = {name: tuple(p.shape) for name, p in pos_emb.named_parameters()}
print(f"pos_emb: num_embeddings = {pos_emb.num_embeddings}, parameters {params}")
assert params == {"weight": (max_len, D)} and pos_emb.num_embeddings == max_len
positions = torch.arange(L, device=device)  # (L,), as above
one_hot = torch.nn.functional.one_hot(positions, max_len).double()  # (L, max_len)
with torch.no_grad():
    by_product = one_hot @ pos_emb.weight.double()  # (L, D)
    gap = (pe.double() - by_product).abs().max()
    print(f"max|lookup - one_hot @ table| = {gap:.1e}")
    torch.testing.assert_close(pe.double(), by_product)
    torch.testing.assert_close(h[1, 3], tok_emb.weight[ids[1, 3]] + pos_emb.weight[3])

# %%
# Proof: our sinusoidal code is the paper's formula and the figure's
# ------------------------------------------------------------------
# The sinusoidal code of :doc:`plot_02_sinusoidal` is a formula, defined at any
# position. Here it is checked against the paper's formula written out, ``PE(p, 2i) =
# sin(p / 10000^(2i/D))`` and ``PE(p, 2i+1) = cos(p / 10000^(2i/D))``, at positions
# where every channel but the first pair depends on the constant 10000 (at ``p = 0``
# none does). Float64, because at ``p = 640`` the angles reach 640 rad, where float32
# rounds them by up to :measured:`angle_f32_err:.1e` rad (printed below). Last, the
# code The idea's figure wrote out with torch is this one.
probe = [1, 5, 37, 10 * max_len]  # positions
angles = torch.tensor([10 * max_len / 10000 ** (2 * i / D) for i in range(D // 2)],
                      dtype=torch.float64)  # (D/2,) the angles at the last probe
angle_f32_err = (angles.float().double() - angles).abs().max().item()
print(f"angles at p = {10 * max_len}: max|float32 - float64| = {angle_f32_err:.1e} rad")
assert 0 < angle_f32_err <= 2.0 ** -24 * angles.max()  # half an ulp at the largest
paper = [[0.0] * D for _ in probe]
for row, p in enumerate(probe):
    for i in range(D // 2):
        paper[row][2 * i] = math.sin(p / 10000 ** (2 * i / D))
        paper[row][2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
paper = torch.tensor(paper, dtype=torch.float64, device=device)  # (4, D)
ours = sinusoidal_pe(torch.tensor(probe, device=device), D, dtype=torch.float64)
torch.testing.assert_close(angles.sin().to(device), ours[3, 0::2])  # the angles above
print(f"positions {probe}: max|sinusoidal_pe - paper's formula| = "
      f"{(ours - paper).abs().max():.1e}")
torch.testing.assert_close(ours, paper)
# The figure drew the same code, written out with torch: it is this one.
sin_code_fig = sinusoidal_pe(torch.arange(max_len_fig), D_fig, dtype=torch.float64)
torch.testing.assert_close(sin_fig, sin_code_fig)

# %%
# Try it: the sinusoidal code far past max_len. Is it defined at 10 * max_len?
# ----------------------------------------------------------------------------
# Evaluate ``sinusoidal_pe`` at position ``10 * max_len``, where the table has no row.

# %%
# At ``10 * max_len`` the code is finite, with the same norm ``sqrt(D / 2)`` as
# everywhere. That does not make it useful there: a model trained on positions below
# ``max_len`` never saw those codes.
far = sinusoidal_pe(torch.tensor([10 * max_len], device=device), D)  # (1, D)
print(f"sinusoidal PE at position {10 * max_len}: "
      f"finite = {torch.isfinite(far).all().item()}, norm = {far.norm().item():.4f} "
      f"(sqrt(D/2) = {(D / 2) ** 0.5:.4f})")
assert torch.isfinite(far).all()
torch.testing.assert_close(far.norm(), torch.tensor((D / 2) ** 0.5, device=device))

# %%
# References
# ----------
# ``torch.nn.Embedding``, ``torch.nn.functional.embedding``,
# ``torch.nn.functional.one_hot``.
