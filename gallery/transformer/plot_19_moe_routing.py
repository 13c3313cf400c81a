"""
Mixture-of-experts routing
==========================

A mixture-of-experts (MoE) layer replaces a decoder layer's MLP by ``E`` experts, and a
router sends each token to ``K`` of them. This page writes the routers of Mixtral,
gpt-oss and DeepSeek-V3, proves the first two one function, and each router, and the
MoE layers of Mixtral and DeepSeek-V3, equal to Hugging Face's.

**You will learn**

- how a router picks ``K`` of ``E`` experts and weighs their outputs
- why softmax, top-K, renormalise (Mixtral) equals top-K, then softmax (gpt-oss)
- how DeepSeek-V3 scores with a sigmoid, balances load with a bias used only to select,
  and keeps each token's experts within a few groups
- how tokens are dispatched to experts, and how many each expert receives

**Prerequisites:** :doc:`/generated/transformer/plot_11_llama_decoder_layer` (the
SwiGLU MLP each expert is), :doc:`/generated/transformer/plot_12_sliding_window_sinks`
(gpt-oss).

.. index:: ! mixture of experts
.. index:: ! MoE
.. index:: ! router (MoE)
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every module is built from a small random config; nothing is
# downloaded (``HF_HUB_OFFLINE=1``).
#
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import transformers
from torch import nn
from transformers import DeepseekV3Config, GptOssConfig, MixtralConfig
from transformers.models.deepseek_v3 import modeling_deepseek_v3
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter
from transformers.models.mixtral import modeling_mixtral

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The idea
# --------
# A router is one linear map from a token ``x`` to ``E`` logits
# :math:`\ell = W_r x`. It keeps the set :math:`\mathcal{T}` of the ``K`` best experts,
# runs only those, and adds their outputs, each weighted by a gate :math:`g_e`:
#
# .. math::
#
#    y = \sum_{e \in \mathcal{T}} g_e\, \mathrm{MLP}_e(x), \qquad
#    g_e^\mathrm{DeepSeek} = \gamma\,
#    \frac{\sigma(\ell_e)}{\sum_{j \in \mathcal{T}} \sigma(\ell_j)}, \\
#    g_e^\mathrm{Mixtral} = \frac{\mathrm{softmax}(\ell)_e}
#    {\sum_{j \in \mathcal{T}} \mathrm{softmax}(\ell)_j}
#    = \frac{e^{\ell_e}}{\sum_{j \in \mathcal{T}} e^{\ell_j}}
#    = g_e^\mathrm{gpt\text{-}oss} .
#
# The softmax's denominator cancels: renormalising the top ``K`` of a softmax is a
# softmax over the top ``K`` logits. DeepSeek-V3 scores each expert with a sigmoid
# :math:`\sigma` and picks :math:`\mathcal{T}` by :math:`\sigma(\ell) + b`: the bias
# ``b`` decides *which* experts, never *how much*. Training nudges ``b`` up for experts
# short of their share of tokens, down for busy ones, with no loss term. A router that
# favours a few experts, before and after 100 nudges (on fresh batches):
g = torch.Generator().manual_seed(1)
Nf, Df, Ef, Kf = 512, 32, 16, 2  # tokens, width, experts, experts per token
mu = torch.randn(Df, generator=g)
mu = mu / mu.norm()  # (D,): a direction every token shares
spread = torch.linspace(-1, 1, Ef)[:, None]  # experts lean more or less along it
W_fig = 0.5 * torch.randn(Ef, Df, generator=g) / Df**0.5 + spread * mu  # (E, D)


def scores_fig(n, W, mu, g):  # sigmoid scores (n, E) of n tokens around mu (D,)
    x = 3 * torch.randn(n, len(mu), generator=g) / len(mu)**0.5 + 1.5 * mu  # (n, D)
    return (x @ W.T).sigmoid(), x


def load_fig(scores, b, K):  # tokens per expert: biased top-K of the scores, counted
    picked = (scores + b).topk(K, dim=-1).indices  # (n, K)
    return torch.bincount(picked.flatten(), minlength=len(b))  # (E,)


s_fig, x_fig = scores_fig(Nf, W_fig, mu, g)  # the held-out batch
steps, speed = 100, 0.004
s_train, _ = scores_fig(steps * Nf, W_fig, mu, g)  # (steps * N, E): fresh batches
bias_fig = torch.zeros(Ef)
load_before = load_fig(s_fig, bias_fig, Kf)
for s_batch in s_train.split(Nf):  # DeepSeek-V3: b += speed * sign(mean load - load)
    bias_fig += speed * (Nf * Kf / Ef - load_fig(s_batch, bias_fig, Kf)).sign()
load_after = load_fig(s_fig, bias_fig, Kf)
busiest_before, busiest_after = load_before.max().item(), load_after.max().item()
fair = Nf * Kf // Ef  # every expert its share

fig, ax = plt.subplots(figsize=(7.5, 2.6), layout="none")  # fixed margins: faster
fig.subplots_adjust(left=0.09, right=0.99, bottom=0.17, top=0.84)
experts = torch.arange(Ef)
ax.bar(experts - 0.2, load_before, width=0.4, color="C3", label="bias 0")
ax.bar(experts + 0.2, load_after, width=0.4, color="C0",
       label=f"bias after {steps} updates")
ax.axhline(fair, color="gray", linestyle="--", label=f"fair share N K / E = {fair}")
ax.set(xlabel="expert", ylabel="tokens routed to it", xticks=experts.tolist())
ax.legend(fontsize=8)
ax.set_title(f"A bias used only to select evens the load: the busiest expert's "
             f"{busiest_before} tokens\nfall to {busiest_after} "
             f"(of {Nf} tokens, K = {Kf} of E = {Ef} experts each)")
plt.show()

# %%
# From scratch: three routers
# ---------------------------
# Each takes the logits ``(N, E)`` of ``N`` tokens and returns the gates and the
# chosen experts, ``(N, K)`` each, best first.
def mixtral_route(logits, K):
    """Softmax over all E experts, keep the K best, renormalise to sum 1."""
    probs = logits.softmax(dim=-1)  # (N, E)
    top, idx = probs.topk(K, dim=-1)  # (N, K)
    return top / top.sum(dim=-1, keepdim=True), idx


def gpt_oss_route(logits, K):
    """Keep the K best logits, softmax over those alone."""
    top, idx = logits.topk(K, dim=-1)  # (N, K)
    return top.softmax(dim=-1), idx


# %%
# DeepSeek-V3 splits the ``E`` experts into ``n_group`` groups of consecutive ones (in
# training, the devices that hold them), scores a group by the sum of its two best
# biased scores, keeps the ``topk_group`` best groups, and picks the ``K`` experts
# among theirs; the gates are the unbiased scores, renormalised and scaled by
# :math:`\gamma` (``routed_scaling_factor``).
def deepseek_route(logits, bias, K, n_group, topk_group, scale):
    """Sigmoid scores; bias (E,) used to select only; experts of the best groups."""
    N, E = logits.shape
    scores = logits.sigmoid()  # (N, E)
    choice = scores + bias  # (N, E): decides which experts, never their weight
    per_group = choice.view(N, n_group, E // n_group)  # consecutive experts
    group_score = per_group.topk(2, dim=-1).values.sum(dim=-1)  # (N, n_group)
    best = group_score.topk(topk_group, dim=-1).indices  # (N, topk_group)
    allowed = torch.zeros_like(group_score, dtype=torch.bool).scatter(1, best, True)
    allowed = allowed.repeat_interleave(E // n_group, dim=1)  # (N, E)
    idx = choice.masked_fill(~allowed, float("-inf")).topk(K, dim=-1).indices  # (N, K)
    gates = scores.gather(1, idx)  # (N, K): the unbiased scores
    return scale * gates / gates.sum(dim=-1, keepdim=True), idx


# %%
# Proof: random Hugging Face routers and MoE block
# ------------------------------------------------
# Each Hugging Face router holds the ``(E, D)`` matrix ``weight`` (gpt-oss a bias
# ``(E,)`` too; DeepSeek-V3 the selection bias ``e_score_correction_bias``), all
# randomised here, for 64 tokens of width 32; its forward returns the logits, the gates
# and the indices. DeepSeek-V3's: 4 groups of 4 experts, 2 groups kept,
# :math:`\gamma = 2.5`, and a bias the size of the gaps between scores. Mixtral's and
# gpt-oss's routers, given the same ``weight`` and a zero bias, pick the same experts
# with the same gates: the identity above, in Hugging Face's code. The
# ``MixtralSparseMoeBlock`` (``E = 8`` experts, ``K = 2``, ``Dff = 48``, the eager loop
# over experts) allocates its tensors with ``torch.empty``: every one is set here.
gen = torch.Generator(device=device).manual_seed(2)
E, K, N, D = 16, 4, 64, 32
x = torch.randn(N, D, device=device, generator=gen)  # (N, D): N tokens
mix_cfg = MixtralConfig(hidden_size=D, num_local_experts=E, num_experts_per_tok=K)
oss_cfg = GptOssConfig(hidden_size=D, num_local_experts=E, num_experts_per_tok=K)
ds_cfg = DeepseekV3Config(hidden_size=D, n_routed_experts=E, num_experts_per_tok=K,
                          n_group=4, topk_group=2, routed_scaling_factor=2.5)
hf_mix = modeling_mixtral.MixtralTopKRouter(mix_cfg).to(device)
hf_oss = GptOssTopKRouter(oss_cfg).to(device)
hf_ds = DeepseekV3TopkRouter(ds_cfg).to(device)
oss_like_mix = GptOssTopKRouter(oss_cfg).to(device)
with torch.no_grad():
    for router in (hf_mix, hf_oss, hf_ds):
        for t in [*router.parameters(), *router.buffers()]:  # all off their init
            t.copy_(torch.randn(t.shape, device=device, generator=gen))
    hf_ds.e_score_correction_bias.mul_(0.1)  # a bias the size of the score gaps
    oss_like_mix.weight.copy_(hf_mix.weight)  # its bias stays 0
    logits_mix, ref_mix, ref_idx_mix = hf_mix(x)
    logits_oss, ref_oss, ref_idx_oss = hf_oss(x)
    logits_ds, ref_ds, ref_idx_ds = hf_ds(x)
    _, gates_cross, idx_cross = oss_like_mix(x)
# DeepSeek's come unordered (topk(sorted=False)): best first, by the biased score.
biased = (x @ hf_ds.weight.T).sigmoid() + hf_ds.e_score_correction_bias  # (N, E)
order = biased.gather(1, ref_idx_ds).argsort(dim=-1, descending=True)  # (N, K)
ref_idx_ds, ref_ds = ref_idx_ds.gather(1, order), ref_ds.gather(1, order)
torch.testing.assert_close(logits_mix, x @ hf_mix.weight.T)
torch.testing.assert_close(logits_oss, x @ hf_oss.weight.T + hf_oss.bias)
torch.testing.assert_close(logits_ds, x @ hf_ds.weight.T)
print(f"GptOssTopKRouter, Mixtral's weight: same experts "
      f"{torch.equal(idx_cross, ref_idx_mix)}, max |gates - Mixtral's| = "
      f"{(gates_cross - ref_mix).abs().max():.1e}")
assert torch.equal(idx_cross, ref_idx_mix)
torch.testing.assert_close(gates_cross, ref_mix)

Em, Km, Dff, Bm, Lm = 8, 2, 48, 2, 24
moe_cfg = MixtralConfig(hidden_size=D, intermediate_size=Dff, num_local_experts=Em,
                        num_experts_per_tok=Km, experts_implementation="eager")
hf_moe = modeling_mixtral.MixtralSparseMoeBlock(moe_cfg).to(device).eval()
x_moe = torch.randn(Bm, Lm, D, device=device, generator=gen)  # (B, L, D)
with torch.no_grad():
    for p in hf_moe.parameters():
        p.copy_(torch.randn(p.shape, device=device, generator=gen) / D**0.5)
    ref_moe = hf_moe(x_moe)
    _, _, hf_idx = hf_moe.gate(x_moe.view(Bm * Lm, D))  # (N, K)

# %%
# Equal to Hugging Face's routers
# -------------------------------
# On float64 logits of ``(B, L)`` tokens, Mixtral's and gpt-oss's routers pick the same
# experts in the same order with the same gates (an identity: float64's tolerance).
# On three random Hugging Face routers (folded above: 64 tokens, 16 experts,
# ``K = 4``), ours pick their experts and give their gates.
logits64 = 2 * torch.randn(2, 32, E, device=device, dtype=torch.float64, generator=gen)
gates64_mix, idx64_mix = mixtral_route(logits64, K)  # (B, L, K)
gates64_oss, idx64_oss = gpt_oss_route(logits64, K)
assert torch.equal(idx64_mix, idx64_oss)
torch.testing.assert_close(gates64_mix, gates64_oss)  # float64 defaults: rtol 1e-7

ours_mix, idx_mix = mixtral_route(x @ hf_mix.weight.T, K)
ours_oss, idx_oss = gpt_oss_route(x @ hf_oss.weight.T + hf_oss.bias, K)
ours_ds, idx_ds = deepseek_route(x @ hf_ds.weight.T, hf_ds.e_score_correction_bias,
                                 K, n_group=4, topk_group=2, scale=2.5)
gap_identity = (gates64_mix - gates64_oss).abs().max()
print(f"max |Mixtral's - gpt-oss's gates| = {gap_identity:.0e}")
print(f"max |gates - HF's|: Mixtral {(ours_mix - ref_mix).abs().max():.0e}, gpt-oss "
      f"{(ours_oss - ref_oss).abs().max():.0e}, DeepSeek-V3 "
      f"{(ours_ds - ref_ds).abs().max():.0e}")
assert torch.equal(idx_mix, ref_idx_mix) and torch.equal(idx_oss, ref_idx_oss)
assert torch.equal(idx_ds, ref_idx_ds)
torch.testing.assert_close(ours_mix, ref_mix)
torch.testing.assert_close(ours_oss, ref_oss)
torch.testing.assert_close(ours_ds, ref_ds)

# %%
# Proof: why the two routers agree
# --------------------------------
# With :math:`Z = \sum_{j=1}^{E} e^{\ell_j}`,
# :math:`\mathrm{softmax}(\ell)_e = e^{\ell_e} / Z` is increasing in :math:`\ell_e`,
# so the ``K`` largest probabilities belong to the ``K`` largest logits, in the same
# order; and
# :math:`\mathrm{softmax}(\ell)_e / \sum_{j \in \mathcal{T}} \mathrm{softmax}(\ell)_j =
# (e^{\ell_e}/Z) / (\sum_{j \in \mathcal{T}} e^{\ell_j} / Z)`, where :math:`Z` cancels.
# What renormalising removes is the mass of the experts left out: without it the gates
# sum to less than one (and never less than ``K / E``).
probs = logits64.softmax(dim=-1)  # (B, L, E)
kept = probs.topk(K, dim=-1).values.sum(dim=-1)  # (B, L): mass of the K chosen
print(f"softmax mass on the {K} chosen of {E}: mean {kept.mean():.3f}, "
      f"min {kept.min():.3f}, max {kept.max():.3f}")
print(f"renormalised gates sum to {gates64_mix.sum(dim=-1).min():.6f} .. "
      f"{gates64_mix.sum(dim=-1).max():.6f}")
assert kept.max() < 0.999  # without renormalising, every token loses some mass
assert kept.min() >= K / E  # the K largest of E probabilities hold at least K / E
torch.testing.assert_close(gates64_mix.sum(dim=-1), torch.ones_like(kept))
torch.testing.assert_close(gates64_oss, logits64.gather(-1, idx64_oss).softmax(dim=-1))

# %%
# Proof: DeepSeek-V3's bias selects and does not weigh; its groups limit the choice
# ---------------------------------------------------------------------------------
# On the random router above (``E = 16`` experts in 4 groups of 4, ``topk_group = 2``,
# ``K = 4``). The gates are the *unbiased* sigmoid scores of the chosen experts,
# renormalised, times :math:`\gamma = 2.5`; for every token whose chosen set the bias
# leaves unchanged, the gates with and without it are the same (to rounding: the sum
# over the chosen runs in another order), while the bias changes the choice of others.
# Gates gathered from the biased scores instead would differ. Every token's experts
# lie in at most 2 groups, and without the limit some tokens would reach into more.
bias_ds = hf_ds.e_score_correction_bias
scores_ds = (x @ hf_ds.weight.T).sigmoid()  # (N, E)
picked = scores_ds.gather(1, idx_ds)  # (N, K)
torch.testing.assert_close(ours_ds, 2.5 * picked / picked.sum(-1, keepdim=True))
torch.testing.assert_close(ours_ds.sum(dim=-1), torch.full((N,), 2.5, device=device))
g0, i0 = deepseek_route(x @ hf_ds.weight.T, torch.zeros_like(bias_ds), K, 4, 2, 2.5)
i0, order0 = i0.sort(dim=-1)  # compare as sets: sorted by expert
i1, order1 = idx_ds.sort(dim=-1)
g0, g1 = g0.gather(1, order0), ours_ds.gather(1, order1)
same_set = (i0 == i1).all(dim=-1)  # (N,): tokens whose choice the bias kept
print(f"the bias changes the experts of {(~same_set).sum()} of {N} tokens; on the "
      f"{same_set.sum()} others, gates move by "
      f"{(g0 - g1)[same_set].abs().max():.0e}")
assert (~same_set).sum() >= 5  # the bias matters for selection
torch.testing.assert_close(g0[same_set], g1[same_set])  # never for weighting
wrong = (scores_ds + bias_ds).gather(1, idx_ds)  # (N, K): biased
wrong = 2.5 * wrong / wrong.sum(-1, keepdim=True)
gap_biased = (wrong - ours_ds).abs().max().item()
print(f"gates from the biased scores: max |diff| = {gap_biased:.2f}")
torch.testing.assert_close(wrong.sum(-1), ours_ds.sum(-1))  # both sum to 2.5
assert gap_biased > 0.05
groups_used = torch.tensor([len(set(row)) for row in (idx_ds // 4).tolist()])
_, idx_free = deepseek_route(x @ hf_ds.weight.T, bias_ds, K, 1, 1, 2.5)  # one group
groups_free = torch.tensor([len(set(row)) for row in (idx_free // 4).tolist()])
print(f"groups per token: at most {groups_used.max()} with the limit; up to "
      f"{groups_free.max()} without it, for {(groups_free > 2).sum()} tokens")
assert groups_used.max() <= 2
assert (groups_free > 2).sum() >= 5  # the limit changes the choice
assert torch.equal(idx_free, (scores_ds + bias_ds).topk(K, dim=-1).indices)

# %%
# The figure's routing, through our router with one group, gives the same counts. The
# bias moved by at most ``steps * speed``, and after the updates every expert holds
# between half and one and a half of its fair share (before, some had none).
gates_fig, idx_fig = deepseek_route(x_fig @ W_fig.T, bias_fig, Kf, 1, 1, 1.0)
assert torch.equal(torch.bincount(idx_fig.flatten(), minlength=Ef), load_after)
torch.testing.assert_close(gates_fig.sum(-1), torch.ones(Nf))
print(f"tokens per expert: before {load_before.min()} .. {load_before.max()}, after "
      f"{load_after.min()} .. {load_after.max()} (fair {fair}); |bias| <= "
      f"{bias_fig.abs().max():.3f}")
assert load_after.sum() == load_before.sum() == Nf * Kf
assert fair / 2 < load_after.min() and load_after.max() < 1.5 * fair
assert load_before.min() == 0 and load_before.max() > 6 * fair
assert bias_fig.abs().max() <= steps * speed + 1e-6  # float32 sums of steps

# %%
# From scratch: the MoE layer
# ---------------------------
# Each expert is a SwiGLU MLP, as Llama's; Hugging Face stacks the ``E`` experts in two
# tensors. The layer runs each expert on the tokens routed to it only and adds its
# output, times the gate, to theirs: an expert's compute is its number of tokens. In
# DeepSeek-V3 (its config, folded below) a token chooses among
# :measured:`ds_candidates` of :measured:`ds_experts` routed experts and runs
# :measured:`ds_active`, one of them shared by all tokens.
class MixtralSparseMoeBlock(nn.Module):
    """(B, L, D) -> (B, L, D): each token through its K experts, weighted by gates."""

    def __init__(self, E, D, Dff, K):
        super().__init__()
        self.K = K
        self.gate = nn.Linear(D, E, bias=False)  # the router: gate.weight (E, D)
        self.experts = nn.ParameterDict({  # E SwiGLU MLPs, Hugging Face's layout
            "gate_up_proj": nn.Parameter(torch.empty(E, 2 * Dff, D)),  # gate; up rows
            "down_proj": nn.Parameter(torch.empty(E, D, Dff)),
        })

    def forward(self, x):
        """-> the output (B, L, D) and the tokens each expert ran on (E,)."""
        B, L, D = x.shape
        x = x.reshape(B * L, D)  # (N, D)
        gates, idx = mixtral_route(self.gate(x), self.K)  # (N, K) each
        y = torch.zeros_like(x)  # (N, D)
        counts = []
        for e in range(self.gate.out_features):
            token, slot = (idx == e).nonzero(as_tuple=True)  # the tokens routed to e
            gate, up = (x[token] @ self.experts.gate_up_proj[e].T).chunk(2, dim=-1)
            out = (F.silu(gate) * up) @ self.experts.down_proj[e].T  # (n, D)
            y.index_add_(0, token, out * gates[token, slot, None])
            counts.append(len(token))
        return y.view(B, L, D), torch.tensor(counts)


# %%
# Equal to the random ``MixtralSparseMoeBlock`` (folded above), whose state dict loads
# into ours by name: on 2 sequences of 24 tokens, the same output; each expert ran on
# the tokens Hugging Face's router sent it, ``N K`` in all.
moe = MixtralSparseMoeBlock(Em, D, Dff, Km).to(device)
moe.load_state_dict(hf_moe.state_dict())  # strict: the same 3 names, no map
with torch.no_grad():
    ours_moe, counts = moe(x_moe)
print(f"max |ours - MixtralSparseMoeBlock| = {(ours_moe - ref_moe).abs().max():.1e}")
print(f"tokens per expert: {counts.tolist()}, sum {counts.sum()} = N K")
torch.testing.assert_close(ours_moe, ref_moe)
assert counts.sum() == Bm * Lm * Km
assert torch.equal(counts, torch.bincount(hf_idx.flatten().cpu(), minlength=Em))

# %%
# Proof: the sparse dispatch equals the dense definition
# ------------------------------------------------------
# The definition, written independently: run *every* expert on every token and weigh
# each output by a dense ``(N, E)`` gate matrix that is zero off the chosen experts.
# It costs ``E / K`` times the dispatch's compute and gives the same output.
def dense_moe(x, router_weight, gate_up_proj, down_proj, K):
    """All E experts on all N tokens, gated densely: x (N, D) -> (N, D)."""
    probs = (x @ router_weight.T).softmax(dim=-1)  # (N, E)
    top = probs.topk(K, dim=-1)
    dense = torch.zeros_like(probs).scatter(1, top.indices, top.values)  # (N, E)
    dense = dense / dense.sum(dim=-1, keepdim=True)
    hidden = torch.einsum("nd,efd->enf", x, gate_up_proj)  # (E, N, 2 Dff)
    gate, up = hidden.chunk(2, dim=-1)  # (E, N, Dff) each
    outs = torch.einsum("enf,edf->end", F.silu(gate) * up, down_proj)  # (E, N, D)
    return torch.einsum("ne,end->nd", dense, outs)


# %%
with torch.no_grad():
    dense = dense_moe(x_moe.view(Bm * Lm, D), hf_moe.gate.weight,
                      hf_moe.experts.gate_up_proj, hf_moe.experts.down_proj, Km)
gap_dense = (dense.view(Bm, Lm, D) - ours_moe).abs().max()
print(f"max |dense - sparse dispatch| = {gap_dense:.1e}")
assert sorted(moe.state_dict()) == sorted(hf_moe.state_dict())  # 3 names alike
torch.testing.assert_close(dense.view(Bm, Lm, D), ours_moe)

# %%
# Proof: DeepSeek-V3's MoE layer, with shared experts
# ---------------------------------------------------
# DeepSeek-V3's layer adds to the routed sum a *shared* SwiGLU that every token runs
# (DeepSeekMoE), of width ``n_shared * Dff``; its router is the one above. Written with
# Hugging Face's names, our layer takes a random ``DeepseekV3MoE``'s state dict (two
# shared experts and :math:`\gamma = 1.5` here, where DeepSeek-V3 has one and 2.5) and
# gives its output; without the shared part it would not.
class DeepseekV3MoE(nn.Module):
    """Routed experts, DeepSeek-V3's router, plus shared: (B, L, D) -> (B, L, D)."""

    def __init__(self, E, D, Dff, K, n_group, topk_group, scale, n_shared):
        super().__init__()
        self.route = dict(K=K, n_group=n_group, topk_group=topk_group, scale=scale)
        self.gate = nn.Linear(D, E, bias=False)  # gate.weight (E, D)
        self.gate.register_buffer("e_score_correction_bias", torch.empty(E))  # (E,)
        self.experts = nn.ParameterDict({
            "gate_up_proj": nn.Parameter(torch.empty(E, 2 * Dff, D)),  # (E, 2 Dff, D)
            "down_proj": nn.Parameter(torch.empty(E, D, Dff)),  # (E, D, Dff)
        })
        self.shared_experts = nn.ModuleDict({  # one SwiGLU, n_shared experts wide
            "gate_proj": nn.Linear(D, n_shared * Dff, bias=False),
            "up_proj": nn.Linear(D, n_shared * Dff, bias=False),
            "down_proj": nn.Linear(n_shared * Dff, D, bias=False),
        })

    def forward(self, x):
        B, L, D = x.shape
        x = x.reshape(B * L, D)  # (N, D)
        logits = self.gate(x)  # (N, E)
        gates, idx = deepseek_route(logits, self.gate.e_score_correction_bias,
                                    **self.route)  # (N, K) each
        dense = torch.zeros_like(logits).scatter(1, idx, gates)  # (N, E)
        hidden = torch.einsum("nd,efd->enf", x, self.experts.gate_up_proj)
        gate, up = hidden.chunk(2, dim=-1)  # (E, N, Dff) each
        y = torch.einsum("ne,enf,edf->nd", dense, F.silu(gate) * up,
                         self.experts.down_proj)  # (N, D)
        s = self.shared_experts  # every token, no gate
        y = y + s.down_proj(F.silu(s.gate_proj(x)) * s.up_proj(x))
        return y.view(B, L, D)


# %%
import copy

dsm_cfg = DeepseekV3Config(hidden_size=D, moe_intermediate_size=24, n_routed_experts=E,
                           num_experts_per_tok=K, n_group=4, topk_group=2,
                           routed_scaling_factor=1.5, n_shared_experts=2,
                           experts_implementation="eager")
hf_dsm = modeling_deepseek_v3.DeepseekV3MoE(dsm_cfg).to(device).eval()
with torch.no_grad():
    for t in [*hf_dsm.parameters(), *hf_dsm.buffers()]:
        t.copy_(torch.randn(t.shape, device=device, generator=gen) / D**0.5)
    ref_dsm = hf_dsm(x_moe)
    dsm = DeepseekV3MoE(E, D, 24, K, 4, 2, 1.5, n_shared=2).to(device)
    dsm.load_state_dict(hf_dsm.state_dict())  # strict: Hugging Face's 7 names
    ours_dsm = dsm(x_moe)
    routed_only = copy.deepcopy(dsm)
    routed_only.shared_experts.down_proj.weight.zero_()  # the shared part gives 0
    gap_shared = (routed_only(x_moe) - ref_dsm).abs().max().item()
print(f"max |ours - DeepseekV3MoE| = {(ours_dsm - ref_dsm).abs().max():.1e}; "
      f"without the shared experts {gap_shared:.2f}")
assert sorted(dsm.state_dict()) == sorted(hf_dsm.state_dict())
torch.testing.assert_close(ours_dsm, ref_dsm)
assert gap_shared > 0.1

# %%
# Proof: real models, from their published configs
# ------------------------------------------------
# The routing sizes of three released models, from each checkpoint's ``config.json``
# on the Hugging Face Hub (``mistralai/Mixtral-8x7B-v0.1``, ``openai/gpt-oss-120b``,
# ``deepseek-ai/DeepSeek-V3``), and checked against ``MixtralConfig()``,
# ``GptOssConfig()`` and ``DeepseekV3Config()``, whose defaults are these models'.
real = {  # E routed experts, K per token, D, Dff of one expert, MoE layers
    "Mixtral-8x7B-v0.1": dict(E=8, K=2, D=4096, Dff=14336, layers=32),
    "gpt-oss-120b": dict(E=128, K=4, D=2880, Dff=2880, layers=36),
    "DeepSeek-V3": dict(E=256, K=8, D=7168, Dff=2048, layers=61 - 3,  # 3 dense
                        n_group=8, topk_group=4, shared=1, scale=2.5),
}
for name, r in real.items():
    per_expert = 3 * r["D"] * r["Dff"]  # gate, up, down: SwiGLU weights
    print(f"{name:17s} K = {r['K']} of E = {r['E']:3d} experts "
          f"({r['K'] / r['E']:6.2%}): {r['K'] * per_expert / 1e6:3.0f} M of "
          f"{r['E'] * per_expert / 1e9:5.2f} G weights a layer")
ds = real["DeepSeek-V3"]
ds_candidates = ds["topk_group"] * ds["E"] // ds["n_group"]
ds_active = ds["K"] + ds["shared"]
ds_experts = ds["E"]
print(f"DeepSeek-V3: a token chooses among {ds_candidates} of {ds['E']} experts and "
      f"runs {ds_active} (with the shared one)")
assert ds_candidates == ds["E"] // 2 and ds_active == 9
for name, c, cfg in [("Mixtral-8x7B-v0.1", "num_local_experts", MixtralConfig()),
                     ("gpt-oss-120b", "num_local_experts", GptOssConfig()),
                     ("DeepSeek-V3", "n_routed_experts", DeepseekV3Config())]:
    r = real[name]
    moe_layers = cfg.num_hidden_layers - getattr(cfg, "first_k_dense_replace", 0)
    assert (getattr(cfg, c), cfg.num_experts_per_tok, cfg.hidden_size) == \
        (r["E"], r["K"], r["D"]) and moe_layers == r["layers"]
    assert getattr(cfg, "moe_intermediate_size", cfg.intermediate_size) == r["Dff"]
ds_cfg_real = DeepseekV3Config()
assert (ds_cfg_real.n_group, ds_cfg_real.topk_group, ds_cfg_real.n_shared_experts,
        ds_cfg_real.routed_scaling_factor) == \
    (ds["n_group"], ds["topk_group"], ds["shared"], ds["scale"])

# %%
# Try it: Mixtral's router with K = 1. What gradient reaches the router?
# ----------------------------------------------------------------------
# With one expert per token, renormalising the top-1 probability gives the gate 1 for
# every token. Does the router's weight still learn from the loss? Compare the Switch
# Transformer's gate, the softmax probability itself.

# The gate is p / p = 1 whatever the logits: its gradient is zero (to rounding), the
# router learns nothing from the output (Mixtral uses K = 2). Switch keeps p, whose
# gradient is not zero. gpt-oss's top-1 then softmax is a softmax of one logit: 1 too.
w_r = torch.randn(E, D, device=device, generator=gen, requires_grad=True)  # (E, D)
x1 = torch.randn(N, D, device=device, generator=gen)  # (N, D)
target = torch.randn(N, 1, device=device, generator=gen)
gates_1, _ = mixtral_route(x1 @ w_r.T, 1)  # (N, 1)
switch = (x1 @ w_r.T).softmax(dim=-1).max(dim=-1, keepdim=True).values  # (N, 1)
grad_mix, grad_switch = (torch.autograd.grad((gates * target).sum(), w_r)[0]
                         for gates in (gates_1, switch))  # one loss, two gates
print(f"K = 1: gates all 1: {bool((gates_1 == 1).all())}; |router grad| Mixtral "
      f"{grad_mix.abs().max():.1e}, Switch {grad_switch.abs().max():.2f}")
assert switch.shape == gates_1.shape == (N, 1)
assert (gates_1 == 1).all()
assert grad_mix.abs().max() < 1e-5  # zero but for rounding in p / p
assert grad_switch.abs().max() > 0.1
assert (gpt_oss_route(x1 @ w_r.T, 1)[0] == 1).all()

# %%
# References
# ----------
# The sparsely-gated MoE layer :footcite:p:`Shazeer2017`; Switch Transformer
# :footcite:p:`Fedus2021`; Mixtral :footcite:p:`Jiang2024`; gpt-oss
# :footcite:p:`OpenAI2025`; DeepSeekMoE's shared experts :footcite:p:`Dai2024`;
# auxiliary-loss-free balancing :footcite:p:`Wang2024` and DeepSeek-V3
# :footcite:p:`DeepSeekAI2024`. APIs: ``transformers``' ``MixtralTopKRouter``,
# ``MixtralSparseMoeBlock``, ``GptOssTopKRouter``, ``DeepseekV3TopkRouter`` and
# ``DeepseekV3MoE``.
#
# .. footbibliography::
