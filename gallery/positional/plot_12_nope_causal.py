"""
NoPE: a causal mask carries position
====================================

A model without positional embedding (NoPE) is not blind to order once its attention is
causal. This page proves, for a random multi-head attention layer in float64, that
without a mask the layer is permutation-equivariant (permuting the tokens permutes the
outputs, for every permutation tried), and that with a causal mask it is not. Then it
reads the position back from the outputs: uniform causal attention averages the
``t + 1`` tokens it sees, so over sequences of unit-norm tokens the mean squared norm
of output ``t`` is exactly ``1 / (t + 1)`` and a fixed probe recovers ``t``; a random
causal layer's output statistics vary with ``t`` too, while the unmasked layer's are
the same at every position.
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
# A random attention layer, no positional embedding
# -------------------------------------------------
# One :class:`torch.nn.MultiheadAttention` layer (``Nh = 2`` heads; query, key, value
# and output projections with biases), moved off its initialization, in float64 so that
# a rounding of the summation order cannot pass for an effect of the order of the
# tokens. Inputs are drawn on the CPU and moved, so every device sees the same numbers.
# The causal mask is boolean: ``True`` marks the keys a query may *not* see (``m > l``).
B, L, D, Nh = 4, 32, 16, 2
dtype = torch.float64
layer = torch.nn.MultiheadAttention(D, Nh, batch_first=True, dtype=dtype).to(device)
with torch.no_grad():
    for p in layer.parameters():
        p.add_(0.1 * torch.randn(p.shape, dtype=dtype).to(device))  # drawn on the CPU
layer.eval()
causal = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L), True: hide


def attend(module, x, mask=None):
    """Self-attention of `module` over x: (B, L, D) -> (B, L, D)."""
    with torch.no_grad():
        return module(x, x, x, attn_mask=mask, need_weights=False)[0]


x = torch.randn(B, L, D, dtype=dtype).to(device)  # (B, L, D)
print(f"layer: D = {D}, Nh = {Nh}, L = {L}, {dtype}; mask {tuple(causal.shape)}, "
      f"{int(causal.sum())} of {L * L} keys hidden")

# %%
# Without a mask: permutation-equivariant
# ---------------------------------------
# Nothing in unmasked attention refers to where a token sits: query ``l`` compares
# itself with every key and averages every value, the same set whatever the order. So
# for every permutation ``P`` of the tokens, ``f(P x) = P f(x)``. :doc:`Page 01
# </generated/positional/plot_01_formulation>` shows it for one head and two
# permutations; here for the whole layer and eight random permutations plus the
# reversal, at float64's default tolerances. With the causal mask the same permutations
# change the outputs themselves, not only their places: token ``l`` now sees other
# predecessors.
perms = [torch.arange(L - 1, -1, -1)] + [torch.randperm(L) for _ in range(8)]
gaps = {"no mask": [], "causal": []}
for i, perm in enumerate(perms):
    perm = perm.to(device)
    for name, mask in (("no mask", None), ("causal", causal)):
        permuted_in = attend(layer, x[:, perm], mask)  # (B, L, D): f(P x)
        permuted_out = attend(layer, x, mask)[:, perm]  # (B, L, D): P f(x)
        gaps[name].append((permuted_in - permuted_out).abs().max().item())
        if mask is None:
            torch.testing.assert_close(permuted_in, permuted_out)  # float64 defaults
    print(f"permutation {i} ({'reversed' if i == 0 else 'random'}): "
          f"max|f(Px) - P f(x)| no mask {gaps['no mask'][-1]:.1e}, "
          f"causal {gaps['causal'][-1]:.2f}")
nomask_max, causal_min = max(gaps["no mask"]), min(gaps["causal"])
print(f"no mask: at most {nomask_max:.1e}; causal: at least {causal_min:.2f}")
assert all(g <= nomask_max for g in gaps["no mask"]), "not the largest?"
assert all(g >= causal_min for g in gaps["causal"]), "not the smallest?"
assert causal_min > 0.1, "causal attention permutation-equivariant?"

# %%
# Uniform causal attention averages what it sees
# ----------------------------------------------
# Zero the query projection (weights and bias): every query is 0, so every logit is 0
# whatever the keys, and the causal softmax gives each of the ``t + 1`` visible keys
# the weight ``1 / (t + 1)``.
# Output ``t`` is then the value projection of the running mean of the tokens,
# :math:`o_t = W_o (W_v \bar x_t + b_v) + b_o` with
# :math:`\bar x_t = \frac{1}{t+1}\sum_{s \le t} x_s`: checked against a reference that
# never calls the layer, a cumulative sum divided by ``t + 1``.
import copy


def uniform_copy(module):
    """A copy of `module` with a zero query projection: every logit is 0."""
    out = copy.deepcopy(module)
    with torch.no_grad():
        out.in_proj_weight[:D].zero_()
        out.in_proj_bias[:D].zero_()
    return out


uniform = uniform_copy(layer)
W_v, b_v = layer.in_proj_weight[2 * D:], layer.in_proj_bias[2 * D:]  # (D, D), (D,)
W_o, b_o = layer.out_proj.weight, layer.out_proj.bias  # (D, D), (D,)
counts = torch.arange(1, L + 1, dtype=dtype, device=device)  # (L,): t + 1
running_mean = x.cumsum(dim=1) / counts[:, None]  # (B, L, D)
reference = (running_mean @ W_v.T + b_v) @ W_o.T + b_o  # (B, L, D)
ours = attend(uniform, x, causal)  # (B, L, D)
print(f"uniform causal: max|o_t - W_o(W_v mean(x_0..x_t) + b_v) - b_o| = "
      f"{(ours - reference).abs().max():.1e}")
torch.testing.assert_close(ours, reference)

# %%
# The expectation, exactly
# -------------------------
# Take unit-norm tokens :math:`u_s` and an orthogonal value and output projection with
# zero biases, so :math:`\lVert o_t \rVert = \lVert \bar x_t \rVert`. Flip the sign of
# each token independently, :math:`x_s = \epsilon_s u_s`: the cross terms of
# :math:`\lVert \sum_{s \le t} \epsilon_s u_s \rVert^2` average to zero, and
#
# .. math::
#
#    E\,\lVert o_t \rVert^2 = \frac{1}{(t+1)^2} \sum_{s \le t} \lVert u_s \rVert^2
#    = \frac{1}{t+1}.
#
# The average is exact over the rows of an ``L x L`` Hadamard matrix (Sylvester's
# construction, entries ``±1``): any two of its columns are orthogonal, so a batch of
# ``L`` sign patterns cancels every cross term. Its statistic
# :math:`S_t = \frac{1}{B}\sum_b \lVert o_{b,t} \rVert^2` is then ``1 / (t + 1)`` up to
# rounding, for any unit-norm tokens, and the fixed probe
# :math:`\hat t = \mathrm{round}(1 / S_t - 1)` reads every position back.
hadamard = torch.ones(1, 1, dtype=dtype)
while hadamard.shape[0] < L:
    hadamard = torch.cat([torch.cat([hadamard, hadamard], 1),
                          torch.cat([hadamard, -hadamard], 1)], 0)  # Sylvester
assert torch.equal(hadamard @ hadamard.T, L * torch.eye(L, dtype=dtype))  # columns
orthogonal = copy.deepcopy(uniform)
with torch.no_grad():
    Q_v = torch.linalg.qr(torch.randn(D, D, dtype=dtype))[0]  # (D, D), orthogonal
    Q_o = torch.linalg.qr(torch.randn(D, D, dtype=dtype))[0]  # (D, D), orthogonal
    orthogonal.in_proj_weight[2 * D:] = Q_v.to(device)
    orthogonal.out_proj.weight.copy_(Q_o.to(device))
    orthogonal.in_proj_bias[2 * D:].zero_()
    orthogonal.out_proj.bias.zero_()

u = torch.randn(L, D, dtype=dtype)  # (L, D)
u = (u / u.norm(dim=-1, keepdim=True)).to(device)  # unit-norm tokens
signed = hadamard.to(device)[:, :, None] * u  # (B = L, L, D): row b flips by H[b]
S_exact = attend(orthogonal, signed, causal).pow(2).sum(-1).mean(0)  # (L,)
theory = 1 / counts  # (L,): 1 / (t + 1)
t_hat = (1 / S_exact - 1).round().long()  # (L,)
print(f"Hadamard batch: max|S_t - 1/(t+1)| = {(S_exact - theory).abs().max():.1e}; "
      f"probe: t_hat = t for {int((t_hat.cpu() == torch.arange(L)).sum())} of {L}")
torch.testing.assert_close(S_exact, theory)
assert torch.equal(t_hat.cpu(), torch.arange(L))

# %%
# The same from random tokens
# ---------------------------
# With i.i.d. tokens of random signs (every entry ``±1 / sqrt(D)``, norm 1) the cross
# terms average to zero only in expectation, and :math:`S_t` estimated over a batch
# scatters around ``1 / (t + 1)`` by about :math:`\sqrt{2/D} / \sqrt{B}` relative. The
# probe needs less than ``0.5 / (t + 1)`` relative, 3.1 % at ``t = 15``: with
# ``B = 4096`` sequences of 16 tokens it reads every position, for each of four seeds.
L_iid, B_iid = 16, 4096
worst = 0.0
for seed in range(4):
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (B_iid, L_iid, D), generator=gen, dtype=dtype)
    tokens = ((2 * signs - 1) / D**0.5).to(device)  # (B, L_iid, D), norm 1 each
    S_iid = attend(orthogonal, tokens, causal[:L_iid, :L_iid]).pow(2).sum(-1).mean(0)
    error = (1 / S_iid - 1).cpu() - torch.arange(L_iid)  # (L_iid,): probe's error
    worst = max(worst, error.abs().max().item())
    print(f"seed {seed}: probe error 1/S_t - 1 - t from {error.min():+.3f} "
          f"to {error.max():+.3f}")
    assert torch.equal((1 / S_iid - 1).round().long().cpu(), torch.arange(L_iid))
print(f"worst probe error {worst:.3f} < 0.5: every t < {L_iid} read back")

# %%
# A random causal layer: statistics that depend on ``t``
# ------------------------------------------------------
# Back to the random layer, queries and keys included: as drawn, and with its query
# projection times 16, which multiplies every logit by 16 (a softmax at temperature
# 1/16), checked on the attention weights the layer returns. The statistic is the total
# variance over the batch, :math:`V_t = \sum_d \mathrm{Var}_b(o_{b,t,d})`. The batch
# holds every cyclic shift of each sequence, so without the mask, by equivariance, each
# position sees the same set of outputs: :math:`V_t` is the same at every ``t``, and no
# probe can read the position. With the mask, output ``0`` is the value of token 0
# alone, whatever the queries and keys, and later outputs mix more tokens. As drawn,
# the layer's attention is broad and :math:`V_t` falls :measured:`drawn_fall:.1f`-fold
# over 32 positions; sharpened, each query nearly picks one key, and :math:`V_t` still
# varies with ``t`` (its largest value :measured:`sharp_ratio:.2f` times its
# smallest), but weakly, and it ends above :math:`V_0`: how much position survives,
# and in which statistic, depends on the weights.
B_base = 64
base = torch.randn(B_base, L, D, dtype=dtype)  # (B_base, L, D)
shifted = torch.cat([base.roll(c, dims=1) for c in range(L)]).to(device)  # (B, L, D)


def sharpened(module, factor):
    """A copy of `module` with its query projection times `factor`: logits x factor."""
    out = copy.deepcopy(module)
    with torch.no_grad():
        out.in_proj_weight[:D] *= factor
        out.in_proj_bias[:D] *= factor
    return out


def weights(module, x, mask):
    """Per-head attention weights: (B, L, D) -> (B, Nh, L, L)."""
    with torch.no_grad():
        return module(x, x, x, attn_mask=mask, average_attn_weights=False)[1]


sharp = sharpened(layer, 16)
p_drawn, p_sharp = weights(layer, x, causal), weights(sharp, x, causal)  # (B, Nh, L, L)
# softmax(16 * log p) = softmax(16 * logits): the row's log-normalizer cancels
tempered = torch.softmax(16 * p_drawn.log(), dim=-1)  # (B, Nh, L, L)
print(f"query x16: max|p_sharp - softmax(16 log p)| = "
      f"{(p_sharp - tempered).abs().max():.1e}")
print(f"largest weight per row, mean: {p_drawn.amax(-1).mean():.2f} as drawn, "
      f"{p_sharp.amax(-1).mean():.2f} with the query x16")
torch.testing.assert_close(p_sharp, tempered)

V = {}  # name -> (L,) total variance per position
for name, module in (("as drawn", layer), ("query x16", sharp)):
    out_causal = attend(module, shifted, causal)  # (B, L, D)
    first = (shifted[:, 0] @ W_v.T + b_v) @ W_o.T + b_o  # (B, D): token 0's value
    torch.testing.assert_close(out_causal[:, 0], first)
    V[f"causal, {name}"] = out_causal.var(dim=0).sum(-1)
    V[f"no mask, {name}"] = attend(module, shifted).var(dim=0).sum(-1)
    # V_0 is the total variance of token 0's value, whatever the queries and keys
    spread_first = (first - first.mean(dim=0)).pow(2).sum() / (first.shape[0] - 1)
    torch.testing.assert_close(V[f"causal, {name}"][0], spread_first)
for name, v in V.items():
    print(f"{name:19s}: V_0 = {v[0]:.3f}, V_{L - 1} = {v[-1]:.3f}, "
          f"V_{L - 1} / V_0 = {v[-1] / v[0]:.3f}, max/min = {v.max() / v.min():.2f}")
for name, v in V.items():
    if name.startswith("no mask"):
        torch.testing.assert_close(v, v[0].expand(L))  # same at every position
drawn, sharp_v = V["causal, as drawn"], V["causal, query x16"]
drawn_fall = (drawn[0] / drawn[-1]).item()  # V_0 / V_(L-1): its inverse is printed
sharp_ratio = (sharp_v.max() / sharp_v.min()).item()
assert drawn_fall > 5, "V_t no longer falls with t?"
assert sharp_ratio > 1.05, "V_t no longer varies with t when sharpened?"
assert sharp_v[-1] / sharp_v[0] > 1.05, "V_t no longer ends above V_0?"

# %%
# One sequence, exactly: a beginning-of-sequence marker
# -----------------------------------------------------
# Kazemnejad et al. (2023) prove that a decoder without PE can represent absolute
# positions. The simplest mechanism needs no batch: let only the first token carry a
# marker, a 1 in channel 0 (a beginning-of-sequence token), and let the value
# projection of uniform causal attention read channel 0 alone. Output ``t`` then holds
# ``1 / (t + 1)`` in channel 0, whatever the other channels of the tokens hold, and
# ``round(1 / o_t - 1)`` reads ``t`` from a single sequence, here of 1024 tokens.
L_long = 1024
marker_layer = copy.deepcopy(uniform)
with torch.no_grad():
    reads_marker = torch.zeros(D, D, dtype=dtype)  # (D, D)
    reads_marker[0, 0] = 1.0  # value channel 0 = token channel 0, nothing else
    marker_layer.in_proj_weight[2 * D:] = reads_marker.to(device)
    marker_layer.in_proj_bias[2 * D:].zero_()
    marker_layer.out_proj.weight.copy_(torch.eye(D, dtype=dtype))
    marker_layer.out_proj.bias.zero_()
seq = torch.randn(1, L_long, D, dtype=dtype)  # (1, L_long, D)
seq[0, :, 0] = 0.0
seq[0, 0, 0] = 1.0  # the marker, on the first token only
mask_long = torch.ones(L_long, L_long, dtype=torch.bool, device=device).triu(1)
marker = attend(marker_layer, seq.to(device), mask_long)[0, :, 0]  # (L_long,)
t_long = torch.arange(L_long)
expected = 1 / torch.arange(1, L_long + 1, dtype=dtype)  # (L_long,): 1 / (t + 1)
read = (1 / marker - 1).round().long().cpu()  # (L_long,)
print(f"marker: max|o_t[0] - 1/(t+1)| = {(marker.cpu() - expected).abs().max():.1e}; "
      f"t read back for {int((read == t_long).sum())} of {L_long} positions")
torch.testing.assert_close(marker.cpu(), expected)
assert torch.equal(read, t_long)

# %%
# Position read back from the outputs
# -----------------------------------
# The mean squared norm of uniform causal attention's outputs follows ``1 / (t + 1)``
# exactly (Hadamard batch) and within sampling error (random tokens); the random causal
# layer's output variance falls with ``t`` too, while without the mask it is flat.
import matplotlib.pyplot as plt

t = torch.arange(L)
fig, ax = plt.subplots()
ax.plot(t + 1, theory.cpu(), "-", color="gray", lw=3, alpha=0.5, label="1 / (t + 1)")
ax.plot(t + 1, S_exact.cpu(), "o", ms=4, label="uniform causal, Hadamard batch: S_t")
ax.plot(t[:L_iid] + 1, S_iid.cpu(), "x", ms=5, label="uniform causal, random tokens")
for name, v in V.items():
    style = "--" if name.startswith("no mask") else "-"
    ax.plot(t + 1, (v / v[0]).cpu(), style, label=f"random layer, {name}: V_t/V_0")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("position t + 1 (tokens the query sees under the mask)")
ax.set_ylabel("output statistic")
ax.set_title("A causal mask makes output statistics depend on t:\n"
             "uniform attention gives exactly 1/(t+1); without the mask they are flat")
ax.legend(fontsize=8)
plt.show()

# %%
# The permutation test, per permutation: without a mask ``f(P x)`` and ``P f(x)`` agree
# to float64 rounding; with the causal mask they differ by order one.
fig, ax = plt.subplots()
ax.plot(range(len(perms)), gaps["no mask"], "o", label="no mask")
ax.plot(range(len(perms)), gaps["causal"], "s", label="causal mask")
ax.set_yscale("log")
ax.set_xticks(range(len(perms)), ["rev"] + [str(i) for i in range(1, len(perms))])
ax.set_xlabel("permutation (0: reversed, then random)")
ax.set_ylabel("max |f(Px) - P f(x)|")
ax.set_title("Without a mask attention is permutation-equivariant (to 1e-16);\n"
             "with a causal mask every permutation changes the outputs")
ax.legend()
plt.show()

# %%
# References
# ----------
# ``torch.nn.MultiheadAttention``, ``torch.linalg.qr``, ``torch.Tensor.cumsum``,
# ``torch.Tensor.roll``, ``torch.Generator``.
