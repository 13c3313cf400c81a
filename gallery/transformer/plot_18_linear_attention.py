"""
Linear attention and Gated DeltaNet: attention with a state of constant size
============================================================================

Drop the softmax and causal attention becomes a recurrence over one ``(Dk, Dv)`` matrix
per head, a state that does not grow. Gated DeltaNet (Qwen3-Next's hybrids) writes into
it with the delta rule and forgets through a gate; here from scratch, recurrent and
chunked, equal to Hugging Face's ``Qwen3NextGatedDeltaNet``.

**You will learn**

- why causal attention without softmax is a recurrence over a ``(Dk, Dv)`` state
- how the delta rule writes a correction, and the gate :math:`\\alpha` forgets
- how the chunked form computes the same recurrence with a few matrix products
- what a hybrid (3 DeltaNet layers to 1 attention layer) caches, against a KV cache

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention` (the mask),
:doc:`/generated/transformer/plot_09_kv_cache` (the KV cache),
:doc:`/generated/transformer/plot_10_gqa_mqa` (shared heads),
:doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` (RMSNorm).

.. index:: ! linear attention
.. index:: ! delta rule
.. index:: ! Gated DeltaNet
.. index:: ! hybrid attention
"""

# %%
# Setup
# -----
# This page compares with Hugging Face ``transformers``, the implementation most
# readers run: it needs ``pip install transformers==5.23.0`` (the book's pin) besides
# torch and matplotlib. Every model is built from a small random config; nothing is
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

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The idea
# --------
# Without the softmax, causal attention's sum of :math:`(q_t^\top k_s)\, v_s` regroups
# as one matrix read by the query (linear attention :footcite:p:`Katharopoulos2020`):
# :math:`o_t = S_t^\top q_t`, :math:`S_t = S_{t-1} + k_t v_t^\top`, a ``(Dk, Dv)`` state
# per head. The delta rule :footcite:p:`Schlag2021,Yang2024` instead writes a fraction
# :math:`\beta_t` of the correction to what the state returns for :math:`k_t`; Gated
# DeltaNet :footcite:p:`Yang2024b` decays the state by :math:`\alpha_t = e^{g_t} \le 1`:
#
# .. math::
#
#    S_t = \alpha_t \big(I - \beta_t k_t k_t^\top\big) S_{t-1} + \beta_t k_t v_t^\top,
#    \qquad o_t = S_t^\top q_t .
#
# Qwen3-Next puts one attention layer after every three DeltaNet layers: its 36 DeltaNet
# layers hold :measured:`linear_mib:.0f` MiB per sequence at any length (one layer, the
# keys and values of :measured:`tokens_equal:.0f` tokens); at :measured:`L_max:,` tokens
# it caches :measured:`ratio_max:.2f` times less than 48 attention layers.

# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json on the Hugging Face Hub (fields used).
QWEN3_NEXT = dict(num_hidden_layers=48, num_key_value_heads=2, head_dim=256,
                  linear_num_key_heads=16, linear_num_value_heads=32,
                  linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_conv_kernel_dim=4, full_attention_interval=4)


def cache_numbers(cfg, L):
    """Numbers one sequence of L tokens caches: (DeltaNet layers, attention layers).

    A DeltaNet layer keeps its state (Nv, Dk, Dv) and its convolution's last inputs
    (q, k, v channels, conv_kernel_dim of them, as Hugging Face keeps); an attention
    layer keys and values (2, Nkv, L, Dh)."""
    n_full = cfg["num_hidden_layers"] // cfg["full_attention_interval"]
    n_linear = cfg["num_hidden_layers"] - n_full
    Nk, Nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    Dk, Dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    channels = 2 * Nk * Dk + Nv * Dv
    per_linear = Nv * Dk * Dv + channels * cfg["linear_conv_kernel_dim"]
    per_full = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * L
    return n_linear * per_linear, n_full * per_full


L_max = 2**18  # the 262,144 tokens of the model card
lengths = [2**i for i in range(6, 19)]
mib = 2 / 2**20  # bf16: 2 bytes a number
linear_mib = cache_numbers(QWEN3_NEXT, 1)[0] * mib
hybrid = [sum(cache_numbers(QWEN3_NEXT, n)) * mib for n in lengths]
all_attention = {**QWEN3_NEXT, "full_attention_interval": 1}  # every layer attention
all_full = [cache_numbers(all_attention, n)[1] * mib for n in lengths]
ratio_max = all_full[-1] / hybrid[-1]
fig, ax = plt.subplots(figsize=(7, 3.1), layout="none")  # fixed margins: faster
fig.subplots_adjust(left=0.12, right=0.97, bottom=0.15, top=0.84)
ax.plot(lengths, all_full, "o-", color="C7", ms=3, label="48 attention layers")
ax.plot(lengths, hybrid, "o-", color="C3", ms=3,
        label="Qwen3-Next: 36 DeltaNet + 12 attention layers")
ax.plot(lengths, [linear_mib] * len(lengths), "--", color="C0",
        label="its 36 DeltaNet layers alone")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("tokens in the sequence, L")
ax.set_ylabel("cache per sequence (MiB, bf16)")
ax.legend(fontsize=8)
ax.set_title(f"36 DeltaNet layers hold {linear_mib:.0f} MiB at any length; at "
             f"{L_max // 1024}K tokens\nthe hybrid caches {ratio_max:.1f}x less than "
             "48 attention layers")
plt.show()

# %%
# Linear attention is a recurrence
# --------------------------------
# All at once, the scores :math:`QK^\top` with the future zeroed (no softmax, so no
# :math:`-\infty`); token by token, one outer product added to the state.
def linear_attention(q, k, v):
    """Causal attention without softmax: q, k (B, Nh, L, Dk), v (B, Nh, L, Dv)."""
    return (q @ k.mT).tril() @ v  # (B, Nh, L, L) scores, the future zeroed


def linear_attention_recurrent(q, k, v):
    """The same as a recurrence: -> out (B, Nh, L, Dv), the state (B, Nh, Dk, Dv)."""
    B, Nh, L, Dk = k.shape
    state = k.new_zeros(B, Nh, Dk, v.shape[-1])
    out = []
    for t in range(L):
        state = state + k[:, :, t, :, None] * v[:, :, t, None, :]  # + k_t v_t^T
        out.append((q[:, :, t, None] @ state)[:, :, 0])  # S_t^T q_t: (B, Nh, Dv)
    return torch.stack(out, dim=2), state


# %%
B, Nh, L, Dk, Dv = 2, 3, 10, 6, 5
q, k = torch.randn(2, B, Nh, L, Dk, device=device, dtype=torch.float64)
v = torch.randn(B, Nh, L, Dv, device=device, dtype=torch.float64)
out_rec, state = linear_attention_recurrent(q, k, v)
print(f"float64: max |recurrent - all at once| = "
      f"{(out_rec - linear_attention(q, k, v)).abs().max():.1e}; "
      f"state {tuple(state.shape)} after {L} tokens")
torch.testing.assert_close(out_rec, linear_attention(q, k, v))

# %%
# The gated delta rule
# --------------------
# Forget by :math:`\alpha_t`, read what the state returns for :math:`k_t`, write
# :math:`\beta_t` times its difference from :math:`v_t`.
def gated_delta_rule(q, k, v, g, beta, state=None):
    """S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T; S_t^T q_t.

    q, k (B, Nh, L, Dk), v (B, Nh, L, Dv), g <= 0 and beta (B, Nh, L), a state
    (B, Nh, Dk, Dv) or zeros -> out (B, Nh, L, Dv), the last state."""
    B, Nh, L, Dk = k.shape
    if state is None:
        state = k.new_zeros(B, Nh, Dk, v.shape[-1])
    out = []
    for t in range(L):
        k_t = k[:, :, t]  # (B, Nh, Dk)
        state = g[:, :, t, None, None].exp() * state  # forget: alpha_t S
        read = (k_t[:, :, None] @ state)[:, :, 0]  # S^T k_t: (B, Nh, Dv)
        delta = beta[:, :, t, None] * (v[:, :, t] - read)  # the correction, (B, Nh, Dv)
        state = state + k_t[..., None] * delta[:, :, None]  # + k_t delta^T
        out.append((q[:, :, t, None] @ state)[:, :, 0])
    return torch.stack(out, dim=2), state


# %%
# :math:`\beta = 1`, a unit key: a second write replaces the value; linear adds both.
k1 = F.normalize(torch.randn(Dk, dtype=torch.float64), dim=0)  # (Dk,)
kk = k1.expand(1, 1, 2, Dk)  # the same key twice
v12 = torch.randn(1, 1, 2, Dv, dtype=torch.float64)  # v1, then v2
g0, b1 = torch.zeros(1, 1, 2, dtype=torch.float64), torch.ones(1, 1, 2).double()
read_delta = k1 @ gated_delta_rule(kk, kk, v12, g0, b1)[1][0, 0]  # (Dv,)
read_linear = k1 @ linear_attention_recurrent(kk, kk, v12)[1][0, 0]
gap_v2, gap_sum = read_delta - v12[0, 0, 1], read_linear - v12[0, 0].sum(0)
print(f"read back: delta rule |read - v2| = {gap_v2.abs().max():.1e}, "
      f"linear |read - (v1 + v2)| = {gap_sum.abs().max():.1e}")
torch.testing.assert_close(read_delta, v12[0, 0, 1])
torch.testing.assert_close(read_linear, v12[0, 0].sum(0))
assert (read_delta - read_linear).abs().max() > 0.1

# %%
# The chunked form
# ----------------
# A loop of ``L`` small steps runs poorly on a GPU. Within a chunk of ``Lc`` tokens the
# corrections :math:`\delta_t` depend on each other linearly: with
# :math:`\Gamma_t` the product of the :math:`\alpha` since the chunk's start and
# :math:`S_0` the state before it,
#
# .. math::
#
#    \delta_t + \beta_t \sum_{s<t} \tfrac{\Gamma_t}{\Gamma_s} (k_t^\top k_s)\,
#    \delta_s = \beta_t \big(v_t - \Gamma_t S_0^\top k_t\big),
#
# a triangular solve per chunk (the "UT transform" of :footcite:t:`Yang2024`), then
# matrix products.
def gated_delta_rule_chunked(q, k, v, g, beta, Lc, state=None):
    """gated_delta_rule, Lc tokens at a time; the same arguments and results."""
    B, Nh, L, Dk = k.shape
    if state is None:
        state = k.new_zeros(B, Nh, Dk, v.shape[-1])
    out = []
    for start in range(0, L, Lc):  # the last chunk may be shorter
        qc, kc, vc = (x[:, :, start:start + Lc] for x in (q, k, v))  # (B, Nh, n, Dk)
        bc = beta[:, :, start:start + Lc, None]  # (B, Nh, n, 1)
        G = g[:, :, start:start + Lc].cumsum(-1)  # log Gamma_t: (B, Nh, n)
        n = G.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=k.device).triu(1)
        decay = (G[..., :, None] - G[..., None, :]).masked_fill(future, float("-inf"))
        decay = decay.exp()  # Gamma_t / Gamma_s for s <= t, else 0: (B, Nh, n, n)
        system = torch.eye(n, dtype=k.dtype, device=k.device) + (bc * kc @ kc.mT *
                                                                  decay).tril(-1)
        rhs = bc * (vc - G.exp()[..., None] * (kc @ state))  # (B, Nh, n, Dv)
        delta = torch.linalg.solve_triangular(system, rhs, upper=False)
        out.append(G.exp()[..., None] * (qc @ state) + (qc @ kc.mT * decay) @ delta)
        to_end = (G[..., -1:] - G).exp()[..., None]  # Gamma_n / Gamma_s: (B, Nh, n, 1)
        state = G[..., -1, None, None].exp() * state + (kc * to_end).mT @ delta
    return torch.cat(out, dim=2), state


# %%
# Proof: chunked equals recurrent for every chunk length; the state's size
# -------------------------------------------------------------------------
# Keys of unit length and :math:`\beta \in (0, 1)`, as the layer makes them; chunks of
# 1, 3 (the last one shorter), 4 and all 10 tokens; in float64 each equals the
# recurrence to rounding. And linear attention's state is :math:`K^\top V`, of one
# shape after 3 tokens and after 10.
kn = F.normalize(k, dim=-1)  # (B, Nh, L, Dk), unit rows
torch.testing.assert_close(kn.norm(dim=-1), torch.ones_like(k[..., 0]))
g = -torch.rand(B, Nh, L, device=device, dtype=torch.float64)  # (B, Nh, L), g <= 0
beta = torch.rand(B, Nh, L, device=device, dtype=torch.float64)  # (B, Nh, L)
S0 = torch.randn(B, Nh, Dk, Dv, device=device, dtype=torch.float64)  # a past state
out_ref, state_ref = gated_delta_rule(q, kn, v, g, beta, S0)
gaps_chunk = {}
for Lc in (1, 3, 4, L):
    out_c, state_c = gated_delta_rule_chunked(q, kn, v, g, beta, Lc, S0)
    gaps_chunk[Lc] = (out_c - out_ref).abs().max().item()
    torch.testing.assert_close(out_c, out_ref)
    torch.testing.assert_close(state_c, state_ref)
print("max |chunked - recurrent| by chunk length: "
      + ", ".join(f"{n} {gap:.0e}" for n, gap in gaps_chunk.items()))
state_3 = linear_attention_recurrent(q[:, :, :3], k[:, :, :3], v[:, :, :3])[1]
assert state.shape == state_3.shape == (B, Nh, Dk, Dv)  # after 10 tokens and after 3
torch.testing.assert_close(state, k.mT @ v)  # the state is K^T V, summed over tokens
torch.testing.assert_close(state_3, k[:, :, :3].mT @ v[:, :, :3])


# %%
# Proof: equal to ``Qwen3NextGatedDeltaNet``, kernels and layer
# -------------------------------------------------------------
# Qwen3-Next wraps the rule in a layer: one projection makes ``q``, ``k``, ``v`` and an
# output gate ``z``, another ``b`` and ``a`` per head, :math:`\beta = \sigma(b)` and
# :math:`g = -e^{A}\,\mathrm{softplus}(a + b_{dt})` (:math:`\log A` and
# :math:`b_{dt}` learned per head: ``A_log``, ``dt_bias``); ``q``, ``k``, ``v`` pass a
# causal depthwise convolution of ``Kc`` taps and SiLU; ``q``, ``k`` are scaled to unit
# length (``q`` then by :math:`1/\sqrt{D_k}`); ``Nk`` query/key heads serve ``Nv``
# value heads, GQA's sharing the other way round; output via a
# :doc:`gated RMSNorm </generated/normalization/plot_15_gated_rmsnorm>` (RMSNorm times
# :math:`\mathrm{SiLU}(z)`). Its cache: the convolution's last ``Kc - 1`` inputs and
# the state. Written with Hugging Face's names, it equals ``Qwen3NextGatedDeltaNet``.
# (Hugging Face's state is ``(Dk, Dv)``, as here; the papers write its transpose.)
def l2_normalize(x, eps=1e-6):
    """x / sqrt(sum(x**2) + eps) over the last dim, eps inside (as FLA and HF)."""
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


# Copied from normalization/plot_05_groupnorm_rmsnorm.py: RMSNorm
class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last dim, in float32 (as Llama)."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,)
        self.eps = eps

    def forward(self, x):  # (..., D) -> (..., D), in x's dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


# Copied from normalization/plot_15_gated_rmsnorm.py: RMSNormGated
class RMSNormGated(nn.Module):
    """RMSNorm(x) * SiLU(gate), the gate in float32; x, gate (..., D) -> x's dtype."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,) as RMSNorm's
        self.eps = eps

    def forward(self, x, gate):
        normed = RMSNorm.forward(self, x)  # the book's RMSNorm, this weight and eps
        return (normed * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's linear-attention layer, Hugging Face's names."""

    def __init__(self, D, Nk, Nv, Dk, Dv, Kc, eps=1e-6, Lc=64):
        super().__init__()
        self.Nk, self.Nv, self.Dk, self.Dv, self.Kc, self.Lc = Nk, Nv, Dk, Dv, Kc, Lc
        channels = 2 * Nk * Dk + Nv * Dv  # q, k, v: convolved each on its own
        self.conv1d = nn.Conv1d(channels, channels, Kc, groups=channels, bias=False)
        self.in_proj_qkvz = nn.Linear(D, 2 * Nk * Dk + 2 * Nv * Dv, bias=False)
        self.in_proj_ba = nn.Linear(D, 2 * Nv, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(Nv))  # (Nv,)
        self.A_log = nn.Parameter(torch.zeros(Nv))  # (Nv,)
        self.norm = RMSNormGated(Dv, eps)
        self.out_proj = nn.Linear(Nv * Dv, D, bias=False)

    def project(self, x):
        """x (B, L, D) -> q, k (B, L, Nk, Dk), v, z (B, L, Nv, Dv), b, a (B, L, Nv).

        The projections are laid out key head by key head, as Hugging Face's are."""
        B, L, _ = x.shape
        r, Dk, Dv = self.Nv // self.Nk, self.Dk, self.Dv  # value heads per key head
        qkvz = self.in_proj_qkvz(x).view(B, L, self.Nk, 2 * Dk + 2 * r * Dv)
        q, k, v, z = qkvz.split([Dk, Dk, r * Dv, r * Dv], dim=-1)
        b, a = self.in_proj_ba(x).view(B, L, self.Nk, 2 * r).split([r, r], dim=-1)
        v, z = v.reshape(B, L, self.Nv, Dv), z.reshape(B, L, self.Nv, Dv)
        return q, k, v, z, b.reshape(B, L, self.Nv), a.reshape(B, L, self.Nv)

    def forward(self, x, cache=None):
        """x (B, L, D), the tokens after the cache's -> (B, L, D), the new cache.

        The cache: the convolution's last Kc - 1 inputs, the state (B, Nv, Dk, Dv)."""
        B, L, _ = x.shape
        Nk, Nv, Dk, Dv = self.Nk, self.Nv, self.Dk, self.Dv
        q, k, v, z, b, a = self.project(x)
        qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1).mT
        if cache is None:  # zeros before the first token
            cache = (qkv.new_zeros(B, qkv.shape[1], self.Kc - 1), None)
        past, state = cache
        qkv = torch.cat([past, qkv], dim=-1)  # (B, channels, Kc - 1 + L)
        conv_state = qkv[..., qkv.shape[-1] - (self.Kc - 1):]
        qkv = F.silu(F.conv1d(qkv, self.conv1d.weight, groups=qkv.shape[1])).mT
        q, k, v = qkv.split([Nk * Dk, Nk * Dk, Nv * Dv], dim=-1)  # (B, L, ...)
        q = l2_normalize(q.view(B, L, Nk, Dk)).repeat_interleave(Nv // Nk, 2) * Dk**-0.5
        k = l2_normalize(k.view(B, L, Nk, Dk)).repeat_interleave(Nv // Nk, 2)
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)  # (B, L, Nv), below 0
        q, k, v, g, beta = (t.transpose(1, 2) for t in (q, k, v.view(B, L, Nv, Dv), g,
                                                         b.sigmoid()))
        out, state = gated_delta_rule_chunked(q, k, v, g, beta, self.Lc, state)
        out = self.norm(out.transpose(1, 2), z)  # (B, L, Nv, Dv)
        return self.out_proj(out.reshape(B, L, Nv * Dv)), (conv_state, state)


# %%
# A tiny config with every width different (``D = 32``, ``Nk = 2``, ``Nv = 6``,
# ``Dk = 7``, ``Dv = 5``, ``Kc = 3``); every parameter moved off its init, and
# ``A_log`` set so that the gate :math:`\alpha` lies well inside (0, 1): the past
# matters and so does the decay. Hugging Face runs its torch path (the fused kernels of
# ``flash-linear-attention`` and ``causal-conv1d`` are not installed), in float32: its
# kernels cast to float32, so they are compared at float32's default tolerances.
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import (
    Qwen3NextGatedDeltaNet,
    Qwen3NextRMSNormGated,
    l2norm,
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

transformers.logging.set_verbosity_error()  # no "falling back to torch" notes
SIZES = dict(D=32, Nk=2, Nv=6, Dk=7, Dv=5, Kc=3)  # GatedDeltaNet's
D, Nk, Nv, Dk, Dv, Kc = SIZES.values()
cfg = Qwen3NextConfig(
    vocab_size=64, hidden_size=D, num_hidden_layers=4, num_attention_heads=2,
    num_key_value_heads=1, head_dim=8, linear_num_key_heads=Nk,
    linear_num_value_heads=Nv, linear_key_head_dim=Dk, linear_value_head_dim=Dv,
    linear_conv_kernel_dim=Kc,
    intermediate_size=16, mlp_only_layers=[0, 1, 2, 3], pad_token_id=0)
hf = Qwen3NextGatedDeltaNet(cfg, layer_idx=0).to(device).eval()
with torch.no_grad():
    for p in hf.parameters():
        p.add_(0.1 * torch.randn_like(p))
    hf.A_log.copy_(torch.linspace(-2.5, -0.5, Nv))  # A from 0.08 to 0.6

layer = GatedDeltaNet(**SIZES).to(device)
assert layer.norm.eps == cfg.rms_norm_eps == hf.norm.variance_epsilon  # 1e-6
layer.load_state_dict(hf.state_dict(), strict=True)
assert sorted(layer.state_dict()) == sorted(hf.state_dict())  # the same 7 names
Bx, Lx = 2, 9
x = torch.randn(Bx, Lx, D, device=device)  # (B, L, D)
with torch.no_grad():
    ref = hf(x)
    out, cache_full = layer(x)
    a = layer.project(x)[5]  # (B, L, Nv)
    alpha = (-hf.A_log.exp() * F.softplus(a + hf.dt_bias)).exp()
print(f"max |GatedDeltaNet - Qwen3NextGatedDeltaNet| = {(out - ref).abs().max():.1e}; "
      f"alpha from {alpha.min():.2f} to {alpha.max():.2f}")
torch.testing.assert_close(out, ref)
assert 0.1 < alpha.min() < alpha.max() < 0.98

# %%
# The two small functions, where their ``eps`` matters: vectors of mean square
# about 1e-8, below the ``eps`` of 1e-6 both keep. ``l2_normalize`` is Hugging Face's
# ``l2norm`` (eps inside the root), not ``F.normalize`` (which divides by
# ``max(|x|, 1e-12)``); the gated norm with its default ``eps`` is
# ``Qwen3NextRMSNormGated`` with its own.
tiny = 1e-4 * torch.randn(Bx, Lx, Dv, device=device)  # (B, L, Dv)
z = torch.randn_like(tiny)
hf_norm = Qwen3NextRMSNormGated(Dv).to(device)
with torch.no_grad():
    hf_norm.weight.add_(0.1 * torch.randn_like(hf_norm.weight))
    norm = RMSNormGated(Dv).to(device)
    norm.load_state_dict(hf_norm.state_dict(), strict=True)
    assert list(norm.state_dict()) == list(hf_norm.state_dict()) == ["weight"]
    gap_normalize = (l2_normalize(tiny) - F.normalize(tiny, dim=-1)).abs().max().item()
    torch.testing.assert_close(l2_normalize(tiny), l2norm(tiny))
    torch.testing.assert_close(norm(tiny, z), hf_norm(tiny, z))
print(f"mean square {tiny.pow(2).mean():.0e}: |l2_normalize - F.normalize| up to "
      f"{gap_normalize:.2f}; gated norm eps {hf_norm.variance_epsilon:g}")
assert gap_normalize > 0.5 and hf_norm.variance_epsilon == norm.eps == 1e-6

# %%
# The kernels alone: Hugging Face's take ``(B, L, heads, width)`` and scale ``q`` by
# :math:`1/\sqrt{D_k}` themselves; with ``use_qk_l2norm_in_kernel`` they normalize
# ``q`` and ``k`` too (the layer passes ``True``). Both equal ours, and its chunked
# kernel pads ``L`` to a multiple of its ``chunk_size`` (here 4: 9 padded to 12).
qh, kh = torch.randn(2, Bx, Lx, Nk, Dk, device=device)  # (B, L, Nk, Dk)
vh = torch.randn(Bx, Lx, Nv, Dv, device=device)  # (B, L, Nv, Dv)
gh, bh = -torch.rand(Bx, Lx, Nv, device=device), torch.rand(Bx, Lx, Nv, device=device)
S0h = torch.randn(Bx, Nv, Dk, Dv, device=device)  # (B, Nv, Dk, Dv)
qs = (l2_normalize(qh) * Dk**-0.5).repeat_interleave(Nv // Nk, 2).transpose(1, 2)
ks = l2_normalize(kh).repeat_interleave(Nv // Nk, 2).transpose(1, 2)  # (B, Nv, L, Dk)
ours_k = gated_delta_rule(qs, ks, vh.transpose(1, 2), gh.mT, bh.mT, S0h)
kw = dict(initial_state=S0h, output_final_state=True, use_qk_l2norm_in_kernel=True)
hf_chunk = torch_chunk_gated_delta_rule(qh, kh, vh, gh, bh, chunk_size=4, **kw)
hf_rec = torch_recurrent_gated_delta_rule(qh, kh, vh, gh, bh, **kw)
for name, (o, s) in [("chunk", hf_chunk), ("recurrent", hf_rec)]:
    print(f"torch_{name}_gated_delta_rule: max |ours - HF| "
          f"{(ours_k[0].transpose(1, 2) - o).abs().max():.1e}, state "
          f"{tuple(s.shape)} {(ours_k[1] - s).abs().max():.1e}")
    torch.testing.assert_close(ours_k[0].transpose(1, 2), o)
    torch.testing.assert_close(ours_k[1], s)

# %%
# Proof: cached decoding equals one full pass; the cache does not grow
# --------------------------------------------------------------------
# A prefill of 6 tokens, then 3 tokens one at a time, each from the cache alone: ours
# and ``Qwen3NextGatedDeltaNet`` with a ``DynamicCache``. Every step equals the full
# pass's row. Hugging Face keeps ``Kc`` inputs of the convolution, one more than it
# reads: its last ``Kc - 1`` are ours. Its recurrent state equals ours, and the
# numbers the layer's cache holds are the same after 6, 7, 8 and 9 tokens.
from transformers import DynamicCache

hf_cache, cache = DynamicCache(config=cfg), None
steps, steps_hf, held = [], [], []
with torch.no_grad():
    for start, stop in [(0, 6), (6, 7), (7, 8), (8, 9)]:
        o, cache = layer(x[:, start:stop], cache)
        steps.append(o)
        steps_hf.append(hf(x[:, start:stop], cache_params=hf_cache))
        cached = hf_cache.layers[0]
        held.append(cached.conv_states[0].numel() + cached.recurrent_states[0].numel())
decoded, decoded_hf = torch.cat(steps, dim=1), torch.cat(steps_hf, dim=1)
print(f"cached decoding vs full pass: ours {(decoded - ref).abs().max():.1e}, "
      f"HF {(decoded_hf - ref).abs().max():.1e}")
print(f"HF's cache: conv {tuple(cached.conv_states[0].shape)}, state "
      f"{tuple(cached.recurrent_states[0].shape)}; numbers held after each call:\n"
      f"  {held}")
torch.testing.assert_close(decoded, ref)
torch.testing.assert_close(decoded_hf, ref)
torch.testing.assert_close(cached.recurrent_states[0], cache[1])
torch.testing.assert_close(cached.conv_states[0][..., 1:], cache[0])
torch.testing.assert_close(cache[1], cache_full[1])  # the state after 9 tokens, twice
assert cached.conv_states[0].shape[-1] == Kc
assert held == [Bx * (Nv * Dk * Dv + (2 * Nk * Dk + Nv * Dv) * Kc)] * 4

# %%
# Proof: the hybrid layout, and the figure's numbers
# --------------------------------------------------
# ``layer_types`` puts an attention layer at every ``full_attention_interval``-th
# place: 3 DeltaNet layers to 1. In a tiny random ``Qwen3NextModel`` of 4 layers, the
# cache of a DeltaNet layer keeps its shape from 5 tokens to 8 (a prefill of 5, then 3
# more from the cache), while the attention layer's keys grow with every token; the
# cached model equals one full pass.
# ``Qwen3NextConfig()``'s defaults are the published config the figure reads.
from transformers import Qwen3NextModel

hf_defaults = Qwen3NextConfig()
types = hf_defaults.layer_types
print(f"Qwen3-Next's layer_types: {', '.join(t.split('_')[0] for t in types[:4])}, "
      f"... : {types.count('linear_attention')} linear, "
      f"{types.count('full_attention')} full")
for field, value in QWEN3_NEXT.items():
    if field != "full_attention_interval":
        assert getattr(hf_defaults, field) == value, field
assert types == ["linear_attention"] * 3 + ["full_attention"] * 1 + types[4:]
assert types == types[:4] * 12 and len(types) == 48
assert cfg.layer_types == types[:4]

model = Qwen3NextModel(cfg).to(device).eval()
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
ids = torch.randint(1, cfg.vocab_size, (Bx, 8), device=device)  # (B, L)
with torch.no_grad():
    full = model(ids).last_hidden_state
    past = model(ids[:, :5], use_cache=True).past_key_values
    shapes_5 = (past.layers[0].recurrent_states[0].shape, past.layers[3].keys.shape)
    cached_3 = model(ids[:, 5:], past_key_values=past).last_hidden_state
shapes_8 = (past.layers[0].recurrent_states[0].shape, past.layers[3].keys.shape)
print(f"after 5 tokens: DeltaNet state {tuple(shapes_5[0])}, keys "
      f"{tuple(shapes_5[1])};\nafter 8 tokens: DeltaNet state "
      f"{tuple(shapes_8[0])}, keys {tuple(shapes_8[1])}")
torch.testing.assert_close(cached_3, full[:, 5:])
assert shapes_5[0] == shapes_8[0] == (Bx, Nv, Dk, Dv)
assert shapes_5[1][2] == 5 and shapes_8[1][2] == 8
assert [type(lay).__name__ for lay in past.layers] == ["LinearAttentionLayer"] * 3 + [
    "DynamicLayer"]

linear_n, full_n = cache_numbers(QWEN3_NEXT, L_max)
per_layer = linear_n // 36  # one DeltaNet layer: state and convolution
tokens_equal = per_layer / (2 * 2 * 256)  # the KV of one attention layer per token
print(f"one DeltaNet layer holds {per_layer:,} numbers (the KV of {tokens_equal:.0f} "
      f"tokens);\nat {L_max:,} tokens the hybrid caches {ratio_max:.2f}x less than "
      "all attention")
assert per_layer == 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 4
assert tokens_equal == 544 and 3.9 < ratio_max < 4  # the KV alone would give 4

# %%
# Try it: set :math:`\beta = 0`. What does the gate alone do to a state?
# ------------------------------------------------------------------------
# Start from a random state ``S0`` and run ``gated_delta_rule`` with every
# :math:`\beta_t = 0`.

# %%
# Nothing is written: the state only decays, by :math:`e^{\sum_t g_t}`, each head at
# its own rate, and reading it returns ever less of the past.
_, S_end = gated_delta_rule(q, k, v, g, torch.zeros_like(g), S0)
print(f"beta = 0: the state decays by exp(sum g), here {g.sum(-1).exp().min():.3f} "
      f"to {g.sum(-1).exp().max():.3f}")
torch.testing.assert_close(S_end, g.sum(-1).exp()[..., None, None] * S0)

# %%
# Try it: keys not scaled to unit length. What does the delta rule do?
# --------------------------------------------------------------------
# Run the recurrence over 80 tokens at :math:`\beta = 0.5`, keys 1, 1.9 and 3 long.

# %%
# Along :math:`k_t`, :math:`I - \beta_t k_t k_t^\top` multiplies by
# :math:`1 - \beta_t \lVert k_t \rVert^2`: within :math:`[0, 1]` for a unit key and
# :math:`\beta \in (0, 1)`, so the state stays bounded; below :math:`-1` once
# :math:`\beta_t \lVert k_t \rVert^2 > 2`, and the state grows at every step.
kr = torch.randn(1, 1, 80, Dk, dtype=torch.float64)  # (1, 1, L, Dk)
vr = torch.randn(1, 1, 80, Dv, dtype=torch.float64)
br = torch.full((1, 1, 80), 0.5, dtype=torch.float64)  # beta
gr = torch.zeros(1, 1, 80, dtype=torch.float64)  # no decay
norms = {}
for scale in (1, 1.9, 3):
    keys = scale * F.normalize(kr, dim=-1)
    norms[scale] = gated_delta_rule(keys, keys, vr, gr, br)[1].norm().item()
print("||state|| after 80 tokens, by the keys' length: "
      + ", ".join(f"{s}: {n:.2g}" for s, n in norms.items()))
assert norms[1] < 10 and norms[1.9] < 10 * norms[1]  # beta |k|^2 = 1.8: bounded
assert norms[3] > 1e6 * norms[1]  # beta |k|^2 = 4.5: 1 - 4.5 = -3.5 at each step

# %%
# References
# ----------
# Qwen3-Next :footcite:p:`Qwen2025`; APIs: ``transformers.models.qwen3_next``.
#
# .. footbibliography::
