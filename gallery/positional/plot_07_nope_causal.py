"""
NoPE: a causal mask carries position
====================================

A model without positional embedding (NoPE) is not blind to order once its attention is
causal: query ``t`` sees ``t + 1`` tokens, and how many it averages leaves a trace in
its output. This page proves both halves on a random attention layer in float64.

**You will learn**

- why unmasked attention is permutation-equivariant, and a causal mask breaks it
- how uniform causal attention averages the ``t + 1`` tokens it sees
- why the mean squared norm of output ``t`` is exactly ``1 / (t + 1)``, and how a probe
  reads ``t`` back
- how a single beginning-of-sequence marker gives absolute position in one sequence

**Prerequisites:** :doc:`/generated/positional/plot_01_formulation` (equivariance, one
head), :doc:`/generated/transformer/plot_04_causal_attention` (the causal mask).

.. index:: ! NoPE
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import matplotlib.pyplot as plt
import torch

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
# Unmasked, query ``t`` averages every token wherever it sits; causal, only the
# ``t + 1`` up to itself. Take uniform attention (every
# :doc:`logit </generated/transformer/plot_01_self_attention>` 0) over tokens
# :math:`x_s = \epsilon_s u_s` of unit norm and independent random signs: the output is
# the running mean :math:`\bar x_t`, its cross terms average to zero, and
#
# .. math::
#
#    E\,\lVert \bar x_t \rVert^2
#    = E\,\Big\lVert \frac{1}{t+1} \sum_{s \le t} \epsilon_s u_s \Big\rVert^2
#    = \frac{1}{(t+1)^2} \sum_{s \le t} \lVert u_s \rVert^2 = \frac{1}{t+1}.
gen_demo = torch.Generator().manual_seed(1)  # its own stream: the page's stays as is
signs_demo = torch.randint(0, 2, (4096, 32, 16), generator=gen_demo).double()
tokens_demo = (2 * signs_demo - 1) / 16**0.5  # (B, L, D): entries ±1/sqrt(D), norm 1
steps = torch.arange(1, 33, dtype=torch.float64)  # (L,): t + 1
causal_mean = tokens_demo.cumsum(dim=1) / steps[:, None]  # (B, L, D): running mean
full_mean = tokens_demo.mean(dim=1, keepdim=True).expand_as(tokens_demo)  # (B, L, D)
fig, ax = plt.subplots()
ax.plot(steps, 1 / steps, "-", color="gray", lw=3, alpha=0.5, label="1 / (t + 1)")
ax.plot(steps, causal_mean.pow(2).sum(-1).mean(0), "o", ms=4,
        label="uniform causal attention")
ax.plot(steps, full_mean.pow(2).sum(-1).mean(0), "s", ms=4,
        label="uniform attention, no mask")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("position t + 1 (tokens the query sees under the mask)")
ax.set_ylabel("mean squared norm of output t")
ax.set_title("A causal mask alone carries position:\n"
             "the output's norm falls as 1/(t+1), without the mask it is flat")
ax.legend(fontsize=8)
plt.show()

# %%
# From scratch
# ------------
# :class:`torch.nn.MultiheadAttention`
# (:doc:`multi-head attention </generated/transformer/plot_02_multihead_attention>` in
# one module) reads a boolean mask the other way round (``True``: hidden), so we pass
# ``~causal_mask(L)``. A zero query projection makes every logit 0: uniform attention
# (``in_proj_weight`` stacks ``W_q, W_k, W_v``).
import copy


def mha_attend(module, x, mask=None):
    """Self-attention of `module` over x: (B, L, D) -> (B, L, D)."""
    with torch.no_grad():
        return module(x, x, x, attn_mask=mask, need_weights=False)[0]


def uniform_copy(module):
    """A copy of `module` with a zero query projection: every logit is 0."""
    out, D = copy.deepcopy(module), module.embed_dim
    with torch.no_grad():
        out.in_proj_weight[:D].zero_()
        out.in_proj_bias[:D].zero_()
    return out


# %%
# Without a mask: permutation-equivariant
# ---------------------------------------
# Unmasked, query ``l`` averages every value, the same set whatever the order: for every
# permutation ``P``, ``f(P x) = P f(x)`` (:doc:`the formulation
# </generated/positional/plot_01_formulation>`: one head); masked, token ``l`` sees
# other predecessors. A random :class:`torch.nn.MultiheadAttention` layer (``Nh = 2``,
# biases) in float64, inputs drawn on the CPU; the reversal and eight random ``P``.
B, L, D, Nh = 4, 32, 16, 2
dtype = torch.float64
layer = torch.nn.MultiheadAttention(D, Nh, batch_first=True, dtype=dtype).to(device)
with torch.no_grad():
    for p in layer.parameters():
        p.add_(0.1 * torch.randn(p.shape, dtype=dtype).to(device))  # drawn on the CPU
layer.eval()
causal = ~causal_mask(L, device)  # (L, L), True: hide (m > l)
x = torch.randn(B, L, D, dtype=dtype).to(device)  # (B, L, D)
print(f"layer: D = {D}, Nh = {Nh}, L = {L}, {dtype}; mask {tuple(causal.shape)}, "
      f"{int(causal.sum())} of {L * L} keys hidden")
perms = [torch.arange(L - 1, -1, -1)] + [torch.randperm(L) for _ in range(8)]
gaps = {"no mask": [], "causal": []}
for i, perm in enumerate(perms):
    perm = perm.to(device)
    for name, mask in (("no mask", None), ("causal", causal)):
        permuted_in = mha_attend(layer, x[:, perm], mask)  # (B, L, D): f(P x)
        permuted_out = mha_attend(layer, x, mask)[:, perm]  # (B, L, D): P f(x)
        gaps[name].append((permuted_in - permuted_out).abs().max().item())
        if mask is None:
            torch.testing.assert_close(permuted_in, permuted_out)  # float64 defaults
nomask_max, causal_min = max(gaps["no mask"]), min(gaps["causal"])
print(f"{len(perms)} permutations, max|f(Px) - P f(x)|: no mask at most "
      f"{nomask_max:.1e}; causal at least {causal_min:.2f}")
assert causal_min > 0.1, "causal attention permutation-equivariant?"

# %%
# Uniform causal attention averages what it sees
# ----------------------------------------------
# Zero query projection: each visible key weighs ``1 / (t + 1)``, so
# :math:`o_t = W_o (W_v \bar x_t + b_v) + b_o`, checked against a cumulative sum.
uniform = uniform_copy(layer)
W_v, b_v = layer.in_proj_weight[2 * D:], layer.in_proj_bias[2 * D:]  # (D, D), (D,)
W_o, b_o = layer.out_proj.weight, layer.out_proj.bias  # (D, D), (D,)
counts = torch.arange(1, L + 1, dtype=dtype, device=device)  # (L,): t + 1
running_mean = x.cumsum(dim=1) / counts[:, None]  # (B, L, D)
reference = (running_mean @ W_v.T + b_v) @ W_o.T + b_o  # (B, L, D)
ours = mha_attend(uniform, x, causal)  # (B, L, D)
print(f"uniform causal: max|o_t - W_o(W_v mean(x_0..x_t) + b_v) - b_o| = "
      f"{(ours - reference).abs().max():.1e}")
torch.testing.assert_close(ours, reference)

# %%
# Proof: the permutation test, permutation by permutation
# -------------------------------------------------------
# Without a mask ``f(P x)`` and ``P f(x)`` agree to float64 rounding for each
# permutation; with the causal mask they differ by order one.
assert all(g <= nomask_max for g in gaps["no mask"]), "not the largest?"
assert all(g >= causal_min for g in gaps["causal"]), "not the smallest?"
for i in range(len(perms)):
    print(f"permutation {i} ({'reversed' if i == 0 else 'random'}): "
          f"max|f(Px) - P f(x)| no mask {gaps['no mask'][i]:.1e}, "
          f"causal {gaps['causal'][i]:.2f}")
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
# Proof: the expectation is exact over a Hadamard batch
# -----------------------------------------------------
# With an orthogonal value and output projection and zero biases,
# :math:`\lVert o_t \rVert = \lVert \bar x_t \rVert`. The average of the idea's
# equation is exact over the rows of an ``L x L`` Hadamard matrix (Sylvester's
# construction, entries ``±1``) used as the signs: any two of its columns are
# orthogonal, so a batch of ``L`` sign patterns cancels every cross term. The statistic
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
S_exact = mha_attend(orthogonal, signed, causal).pow(2).sum(-1).mean(0)  # (L,)
theory = 1 / counts  # (L,): 1 / (t + 1)
t_hat = (1 / S_exact - 1).round().long()  # (L,)
print(f"Hadamard batch: max|S_t - 1/(t+1)| = {(S_exact - theory).abs().max():.1e}; "
      f"probe: t_hat = t for {int((t_hat.cpu() == torch.arange(L)).sum())} of {L}")
torch.testing.assert_close(S_exact, theory)
assert torch.equal(t_hat.cpu(), torch.arange(L))

# %%
# Proof: the probe reads position from random tokens too
# ------------------------------------------------------
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
    S_iid = mha_attend(orthogonal, tokens, causal[:L_iid, :L_iid])  # (B, L_iid, D)
    S_iid = S_iid.pow(2).sum(-1).mean(0)  # (L_iid,)
    error = (1 / S_iid - 1).cpu() - torch.arange(L_iid)  # (L_iid,): probe's error
    worst = max(worst, error.abs().max().item())
    print(f"seed {seed}: probe error 1/S_t - 1 - t from {error.min():+.3f} "
          f"to {error.max():+.3f}")
    assert torch.equal((1 / S_iid - 1).round().long().cpu(), torch.arange(L_iid))
print(f"worst probe error {worst:.3f} < 0.5: every t < {L_iid} read back")

# %%
# Proof: a random causal layer's output statistics depend on ``t``
# ----------------------------------------------------------------
# Back to the random layer, queries and keys included. The statistic is the total
# variance over the batch, :math:`V_t = \sum_d \mathrm{Var}_b(o_{b,t,d})`. The batch
# holds every cyclic shift of each sequence. With the mask, output ``0`` is the value of
# token 0 alone, whatever the queries and keys, and later outputs mix more tokens: the
# layer's attention is broad and :math:`V_t` falls :measured:`drawn_fall:.1f`-fold
# over 32 positions.


def output_variance(out):
    """Total variance over the batch of each position's output: (B, L, D) -> (L,)."""
    return out.var(dim=0).sum(-1)


# %%
B_base = 64
base = torch.randn(B_base, L, D, dtype=dtype)  # (B_base, L, D)
shifted = torch.cat([base.roll(c, dims=1) for c in range(L)]).to(device)  # (B, L, D)
first = (shifted[:, 0] @ W_v.T + b_v) @ W_o.T + b_o  # (B, D): token 0's value
# V_0 is the total variance of token 0's value, whatever the queries and keys
spread_first = (first - first.mean(dim=0)).pow(2).sum() / (first.shape[0] - 1)
V = {}  # name -> (L,) total variance per position
out_drawn = mha_attend(layer, shifted, causal)  # (B, L, D)
torch.testing.assert_close(out_drawn[:, 0], first)
V["causal, as drawn"] = output_variance(out_drawn)
torch.testing.assert_close(V["causal, as drawn"][0], spread_first)
drawn = V["causal, as drawn"]
drawn_fall = (drawn[0] / drawn[-1]).item()  # V_0 / V_(L-1): its inverse is printed
print(f"causal, as drawn: V_0 = {drawn[0]:.3f}, V_{L - 1} = {drawn[-1]:.3f}, "
      f"V_{L - 1} / V_0 = {drawn[-1] / drawn[0]:.3f}")
assert drawn_fall > 5, "V_t no longer falls with t?"

# %%
# Try it: can a marker on the first token give position in one sequence?
# ----------------------------------------------------------------------
# (:footcite:t:`Kazemnejad2023`.) Only the first token carries a marker, a 1 in
# channel 0; uniform causal attention's value reads channel 0 alone. What is output
# ``t`` there?

# %%
# Output ``t`` holds ``1 / (t + 1)`` in channel 0, whatever the other channels of the
# tokens hold, and ``round(1 / o_t - 1)`` reads ``t`` from a single sequence, here of
# 1024 tokens.
L_long = 1024
marker_layer = copy.deepcopy(uniform)
with torch.no_grad():
    reads_marker = torch.zeros(D, D, dtype=dtype)  # (D, D)
    reads_marker[0, 0] = 1.0  # value channel 0 = token channel 0, nothing else
    marker_layer.in_proj_weight[2 * D:] = reads_marker.to(device)
    marker_layer.in_proj_bias[2 * D:].zero_()
    marker_layer.out_proj.weight.copy_(torch.eye(D, dtype=dtype))
    marker_layer.out_proj.bias.zero_()
gen_seq = torch.Generator().manual_seed(2)  # its own stream
seq = torch.randn(1, L_long, D, dtype=dtype, generator=gen_seq)  # (1, L_long, D)
seq[0, :, 0] = 0.0
seq[0, 0, 0] = 1.0  # the marker, on the first token only
mask_long = ~causal_mask(L_long, device)  # (L_long, L_long), True: hide
marker = mha_attend(marker_layer, seq.to(device), mask_long)[0, :, 0]  # (L_long,)
t_long = torch.arange(L_long)
expected = 1 / torch.arange(1, L_long + 1, dtype=dtype)  # (L_long,): 1 / (t + 1)
read = (1 / marker - 1).round().long().cpu()  # (L_long,)
print(f"marker: max|o_t[0] - 1/(t+1)| = {(marker.cpu() - expected).abs().max():.1e}; "
      f"t read back for {int((read == t_long).sum())} of {L_long} positions")
torch.testing.assert_close(marker.cpu(), expected)
assert torch.equal(read, t_long)

# %%
# Try it: take the mask away. Does :math:`V_t` still depend on ``t``?
# -------------------------------------------------------------------
# Same layer, same batch of cyclic shifts, no mask.

# %%
# No: by equivariance each position sees the same set of outputs over the batch of
# shifts, so :math:`V_t` is the same at every ``t``, and no probe can read the position.
V["no mask, as drawn"] = output_variance(mha_attend(layer, shifted))
print(f"no mask, as drawn: V_0 = {V['no mask, as drawn'][0]:.3f}, max/min = "
      f"{V['no mask, as drawn'].max() / V['no mask, as drawn'].min():.2f}")
torch.testing.assert_close(V["no mask, as drawn"],
                           V["no mask, as drawn"][0].expand(L))  # same at every t

# %%
# Try it: does the position survive queries times 16 (a sharp softmax)?
# ---------------------------------------------------------------------
# Every logit times 16 (temperature 1/16): each query nearly picks one key.

# %%
# It survives, weakly: :math:`V_t` still varies with ``t`` (its largest value
# :measured:`sharp_ratio:.2f` times its smallest), and it ends above :math:`V_0`. How
# much position survives, and in which statistic, depends on the weights. First the
# temperature, checked on the attention weights the layer returns.
import copy


def sharpened(module, factor):
    """A copy of `module` with its query projection times `factor`: logits x factor."""
    out, D = copy.deepcopy(module), module.embed_dim
    with torch.no_grad():
        out.in_proj_weight[:D] *= factor
        out.in_proj_bias[:D] *= factor
    return out


def head_weights(module, x, mask):
    """Per-head attention weights: (B, L, D) -> (B, Nh, L, L)."""
    with torch.no_grad():
        return module(x, x, x, attn_mask=mask, average_attn_weights=False)[1]


# %%
sharp = sharpened(layer, 16)
p_drawn = head_weights(layer, x, causal)  # (B, Nh, L, L)
p_sharp = head_weights(sharp, x, causal)  # (B, Nh, L, L)
# softmax(16 * log p) = softmax(16 * logits): the row's log-normalizer cancels
tempered = torch.softmax(16 * p_drawn.log(), dim=-1)  # (B, Nh, L, L)
print(f"query x16: max|p_sharp - softmax(16 log p)| = "
      f"{(p_sharp - tempered).abs().max():.1e}")
print(f"largest weight per row, mean: {p_drawn.amax(-1).mean():.2f} as drawn, "
      f"{p_sharp.amax(-1).mean():.2f} with the query x16")
torch.testing.assert_close(p_sharp, tempered)

out_sharp = mha_attend(sharp, shifted, causal)  # (B, L, D)
torch.testing.assert_close(out_sharp[:, 0], first)
V["causal, query x16"] = output_variance(out_sharp)
torch.testing.assert_close(V["causal, query x16"][0], spread_first)
V["no mask, query x16"] = output_variance(mha_attend(sharp, shifted))
torch.testing.assert_close(V["no mask, query x16"],
                           V["no mask, query x16"][0].expand(L))  # flat again
for name, v in V.items():
    print(f"{name:19s}: V_0 = {v[0]:.3f}, V_{L - 1} = {v[-1]:.3f}, "
          f"V_{L - 1} / V_0 = {v[-1] / v[0]:.3f}, max/min = {v.max() / v.min():.2f}")
sharp_v = V["causal, query x16"]
sharp_ratio = (sharp_v.max() / sharp_v.min()).item()
assert sharp_ratio > 1.05, "V_t no longer varies with t when sharpened?"
assert sharp_v[-1] / sharp_v[0] > 1.05, "V_t no longer ends above V_0?"

# %%
# All the statistics of the page: uniform causal attention's :math:`S_t` follows
# ``1 / (t + 1)`` exactly (Hadamard batch) and within sampling error (random tokens);
# the random causal layer's output variance depends on ``t`` too, without the mask it
# is flat.
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
# References
# ----------
# ``torch.nn.MultiheadAttention``, ``torch.linalg.qr``, ``torch.Tensor.cumsum``,
# ``torch.Tensor.roll``, ``torch.Generator``. NoPE in a causal decoder:
# :footcite:t:`Haviv2022`; :footcite:t:`Kazemnejad2023`.
#
# .. footbibliography::
