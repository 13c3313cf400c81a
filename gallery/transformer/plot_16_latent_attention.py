"""
Multi-head latent attention: a cache of one latent per token
============================================================

Multi-head latent attention (MLA: DeepSeek-V2 and V3, Kimi K2) caches one latent and one
small rotary key per token, shared by all heads, and rebuilds every head's keys and
values from them. Written from scratch, equal to Hugging Face's ``DeepseekV3Attention``.

**You will learn**

- how MLA compresses keys and values into one latent per token, rebuilt per head
- why RoPE needs a decoupled key of its own, shared by all heads
- what the cache holds per token and layer, DeepSeek-V3's against Llama 3's GQA and MHA
- how absorbing the key up-projection into the query makes MLA a multi-query attention

**Prerequisites:** :doc:`/generated/transformer/plot_10_gqa_mqa` (GQA),
:doc:`/generated/transformer/plot_11_llama_decoder_layer` (RMSNorm, RoPE),
:doc:`/generated/transformer/plot_09_kv_cache`,
:doc:`/generated/positional/plot_09_rope_scaling` (YaRN).

.. index:: ! MLA
.. index:: ! multi-head latent attention
.. index:: ! weight absorption
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
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"
import matplotlib.pyplot as plt
import torch
import transformers
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# RMSNorm and rotate-half RoPE, copied verbatim from
# :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` and
# :doc:`/generated/positional/plot_04_rope`.


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


# Copied from positional/plot_04_rope.py: rope_inv_freq
def rope_inv_freq(Dh, base, dtype=torch.float32):
    """Per-pair frequencies base ** (-2i / Dh) for i < Dh/2: (Dh/2,), in `dtype`."""
    return 1.0 / base ** (torch.arange(0, Dh, 2, dtype=dtype) / Dh)


# Copied from positional/plot_04_rope.py: rope_cos_sin
def rope_cos_sin(pos, Dh, base, dtype=torch.float32):
    """pos (..., L) -> cos, sin (..., L, Dh), rotate-half layout, angles in `dtype`.

    Channel i and channel i + Dh/2 form pair i and share its angle pos * inv_freq[i]."""
    inv_freq = rope_inv_freq(Dh, base, dtype).to(pos.device)  # (Dh/2,)
    angles = pos[..., None].to(dtype) * inv_freq  # (..., L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., L, Dh)
    return angles.cos(), angles.sin()


# Copied from positional/plot_04_rope.py: rotate_half
def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: x (..., Dh)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat([-x2, x1], dim=-1)


# Copied from positional/plot_04_rope.py: rope
def rope(x, cos, sin):
    """Rotate-half RoPE: x (..., L, Dh); cos, sin broadcast to it, e.g. (L, Dh) or
    (B, 1, L, Dh) for x (B, Nh, L, Dh)."""
    return x * cos + rotate_half(x) * sin


# %%
# The idea
# --------
# Multi-head attention caches :math:`2 N_h D_h` numbers per token and layer, GQA
# :math:`2 N_{kv} D_h`. MLA keeps one latent :math:`c_t` (width :math:`D_c`), of which
# head :math:`i`'s key and value are linear images, and one rotary key :math:`k^R_t`
# (width :math:`D_r`) that all heads share: a rotation by the position cannot be
# folded into a fixed matrix.
#
# .. math::
#
#    c_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad v_{t,i} = W^{UV}_i c_t,
#
#    k_{t,i} = \big[\, W^{UK}_i c_t \,;\; \mathrm{RoPE}_t(W^{KR} h_t) \,\big],
#
# .. math::
#
#    q_{s,i}^\top k_{t,i} = \big(W^{UK\top}_i q^C_{s,i}\big)^\top c_t
#    + q^{R\top}_{s,i}\, k^R_t .
#
# The last line is *weight absorption*: :math:`W^{UK}_i` moves onto the query, and
# attention reads the cache, :math:`D_c + D_r` numbers per token and layer, as it lies.

# Published config.json files on the Hugging Face Hub: deepseek-ai/DeepSeek-V3,
# meta-llama/Meta-Llama-3-8B and meta-llama/Meta-Llama-3-70B (the fields used here).
DEEPSEEK_V3 = dict(num_hidden_layers=61, hidden_size=7168, num_attention_heads=128,
                   q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                   qk_rope_head_dim=64, v_head_dim=128)
LLAMA3_8B = dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                 num_key_value_heads=8)
LLAMA3_70B = dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64,
                  num_key_value_heads=8)


def cache_per_token_layer(cfg, kv_heads=None):
    """Numbers a decoder caches per token and layer, from a config dict.

    MLA (a config with kv_lora_rank): the latent and the shared rotary key. Otherwise
    a key and a value per key/value head; kv_heads overrides the config's (MHA: Nh)."""
    if "kv_lora_rank" in cfg and kv_heads is None:
        return cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    if "kv_lora_rank" in cfg:  # MLA's heads uncompressed: keys Dn + Dr, values Dv
        Dk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        return kv_heads * (Dk + cfg["v_head_dim"])
    Dh = cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * (kv_heads or cfg["num_key_value_heads"]) * Dh


bars = {  # label: (numbers per token and layer, layers)
    "DeepSeek-V3, MLA": (cache_per_token_layer(DEEPSEEK_V3), DEEPSEEK_V3),
    "Llama 3 8B, GQA": (cache_per_token_layer(LLAMA3_8B), LLAMA3_8B),
    "Llama 3 70B, GQA": (cache_per_token_layer(LLAMA3_70B), LLAMA3_70B),
    "Llama 3 8B as MHA": (cache_per_token_layer(LLAMA3_8B, 32), LLAMA3_8B),
    "Llama 3 70B as MHA": (cache_per_token_layer(LLAMA3_70B, 64), LLAMA3_70B),
    "DeepSeek-V3 as MHA": (cache_per_token_layer(DEEPSEEK_V3, 128), DEEPSEEK_V3),
}
bars = {k: (n, cfg["num_hidden_layers"]) for k, (n, cfg) in bars.items()}
fig, ax = plt.subplots(figsize=(8, 2.9), layout="none")  # fixed margins: faster
fig.subplots_adjust(left=0.22, right=0.97, bottom=0.17, top=0.83)
names = list(bars)
ax.barh(names, [n for n, _ in bars.values()],
        color=["C3", "C0", "C0", "C7", "C7", "C7"])
for name, (n, layers) in bars.items():
    ax.annotate(f" {n}  ({n * layers * 2 / 2**10:,.0f} KiB per token, bf16)",
                (n, name), va="center", fontsize=8)
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlim(300, 4e6)
ax.set_xlabel("numbers cached per token and layer (log scale)")
mla_n, gqa_n = bars["DeepSeek-V3, MLA"][0], bars["Llama 3 8B, GQA"][0]
ax.set_title(f"MLA caches {mla_n} numbers per token and layer: {gqa_n / mla_n:.1f}x "
             f"fewer than\nLlama 3's GQA, "
             f"{bars['DeepSeek-V3 as MHA'][0] / mla_n:.0f}x fewer than its own heads "
             "uncompressed")
plt.show()

# %%
# From scratch
# ------------
# Hugging Face's names; the queries pass through a latent of width ``Dq`` too.
# DeepSeek-V3 rotates *adjacent* channel pairs: listing the even channels first turns
# them into rotate-half's pairs (:doc:`/generated/positional/plot_04_rope`).
class LatentAttention(nn.Module):
    """Multi-head latent attention, Hugging Face's names; its cache is (c, k_rot)."""

    def __init__(self, D, Nh, Dq, Dc, Dn, Dr, Dv, interleave=True):
        super().__init__()
        self.Nh, self.Dq, self.Dc, self.Dn, self.Dr, self.Dv = Nh, Dq, Dc, Dn, Dr, Dv
        self.interleave = interleave  # rotary channels stored as adjacent pairs
        if Dq is None:  # no query latent (DeepSeek-V2-Lite)
            self.q_proj = nn.Linear(D, Nh * (Dn + Dr), bias=False)
        else:
            self.q_a_proj = nn.Linear(D, Dq, bias=False)
            self.q_a_layernorm = RMSNorm(Dq)
            self.q_b_proj = nn.Linear(Dq, Nh * (Dn + Dr), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(D, Dc + Dr, bias=False)  # c and k_rot
        self.kv_a_layernorm = RMSNorm(Dc)
        self.kv_b_proj = nn.Linear(Dc, Nh * (Dn + Dv), bias=False)  # k_nope, v per head
        self.o_proj = nn.Linear(Nh * Dv, D, bias=False)

    def rotate(self, x, cos, sin):  # x (B, 1 or Nh, L, Dr); cos, sin (B, L, Dr)
        if self.interleave:  # pairs (0, 1), (2, 3), .. -> halves: even channels first
            x = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)
        return rope(x, cos[:, None], sin[:, None])

    def queries(self, x, cos, sin):  # (B, L, D) -> (B, Nh, L, Dn), (B, Nh, L, Dr)
        B, L, _ = x.shape
        if self.Dq is None:
            q = self.q_proj(x)  # (B, L, Nh * (Dn + Dr))
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, L, self.Nh, self.Dn + self.Dr).transpose(1, 2)
        q_nope, q_rot = q.split([self.Dn, self.Dr], dim=-1)
        return q_nope, self.rotate(q_rot, cos, sin)

    def compress(self, x, cos, sin):  # -> c (B, 1, L, Dc), k_rot (B, 1, L, Dr)
        c, k_rot = self.kv_a_proj_with_mqa(x).split([self.Dc, self.Dr], dim=-1)
        return self.kv_a_layernorm(c)[:, None], self.rotate(k_rot[:, None], cos, sin)

    def forward(self, x, cos, sin, scale, cache=None):  # x: the last L of M positions
        """-> out (B, L, D), weights (B, Nh, L, M), the cache (c, k_rot) of all M."""
        B, L, _ = x.shape
        q_nope, q_rot = self.queries(x, cos, sin)
        c, k_rot = self.compress(x, cos, sin)  # what the cache keeps
        if cache is not None:
            c, k_rot = torch.cat([cache[0], c], dim=2), torch.cat([cache[1], k_rot], 2)
        M = c.shape[2]
        kv = self.kv_b_proj(c[:, 0]).view(B, M, self.Nh, self.Dn + self.Dv)
        k_nope, v = kv.transpose(1, 2).split([self.Dn, self.Dv], dim=-1)  # per head
        k = torch.cat([k_nope, k_rot.expand(B, self.Nh, M, self.Dr)], dim=-1)
        logits = torch.cat([q_nope, q_rot], dim=-1) @ k.mT * scale  # (B, Nh, L, M)
        future = torch.ones(L, M, dtype=torch.bool, device=x.device).triu(M - L + 1)
        weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, L, self.Nh * self.Dv)
        return self.o_proj(y), weights, (c, k_rot)


# %%
# Weight absorption
# -----------------
# ``kv_b_proj`` holds, head by head, :math:`W^{UK}_i` (``Dn`` rows), :math:`W^{UV}_i`
# (``Dv``). The output is read in latent space and up-projected once per query.
def absorbed_attention(attn, x, cos, sin, scale, cache=None):
    """MLA on the latent, keys and values never built: -> out, weights, as forward."""
    B, L, _ = x.shape
    Nh, Dn, Dv = attn.Nh, attn.Dn, attn.Dv
    q_nope, q_rot = attn.queries(x, cos, sin)  # (B, Nh, L, Dn), (B, Nh, L, Dr)
    c, k_rot = attn.compress(x, cos, sin)  # (B, 1, L, Dc), (B, 1, L, Dr)
    if cache is not None:
        c, k_rot = torch.cat([cache[0], c], dim=2), torch.cat([cache[1], k_rot], dim=2)
    M = c.shape[2]
    W = attn.kv_b_proj.weight.view(Nh, Dn + Dv, attn.Dc)
    W_uk, W_uv = W[:, :Dn], W[:, Dn:]  # (Nh, Dn, Dc), (Nh, Dv, Dc)
    q_lat = torch.einsum("bhld,hdc->bhlc", q_nope, W_uk)  # (B, Nh, L, Dc)
    logits = (q_lat @ c.mT + q_rot @ k_rot.mT) * scale  # (B, Nh, L, M)
    future = torch.ones(L, M, dtype=torch.bool, device=x.device).triu(M - L + 1)
    weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
    y_lat = weights @ c  # (B, Nh, L, Dc): the values are the latents
    y = torch.einsum("bhlc,hvc->blhv", y_lat, W_uv)  # (B, L, Nh, Dv)
    return attn.o_proj(y.reshape(B, L, Nh * Dv)), weights


# %%
# Proof: a random ``DeepseekV3Attention``, every weight moved
# -----------------------------------------------------------
# A tiny config with every width different (``D = 48``, ``Nh = 4``, ``Dq = 24``,
# ``Dc = 16``, ``Dn = 12``, ``Dr = 8``, ``Dv = 10``), so that a swapped width cannot
# pass; RoPE's base 1000 at positions that jump by 3 in row 1, so that a wrong base or
# layout shows; the eager path, given the additive causal mask (it masks nothing by
# itself); every parameter, the norms' weights included, moved off its init.
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

SIZES = dict(D=48, Nh=4, Dq=24, Dc=16, Dn=12, Dr=8, Dv=10)  # LatentAttention's
D, Nh, Dq, Dc, Dn, Dr, Dv = SIZES.values()
BASE = 1000.0


def tiny_config(sizes, base, **extra):
    """A DeepseekV3Config with LatentAttention's sizes; extra fields override."""
    s = sizes
    fields = dict(vocab_size=100, hidden_size=s["D"], num_attention_heads=s["Nh"],
                  num_key_value_heads=s["Nh"], q_lora_rank=s["Dq"],
                  kv_lora_rank=s["Dc"], qk_nope_head_dim=s["Dn"],
                  qk_rope_head_dim=s["Dr"], v_head_dim=s["Dv"], num_hidden_layers=1,
                  pad_token_id=0, attn_implementation="eager",
                  rope_parameters={"rope_type": "default", "rope_theta": base})
    return DeepseekV3Config(**{**fields, **extra})


def hf_attention(cfg, device):
    """DeepseekV3Attention and its rotary embedding; every parameter moved."""
    hf = DeepseekV3Attention(cfg, layer_idx=0).to(device).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return hf, DeepseekV3RotaryEmbedding(cfg).to(device)


def additive_causal(L, device):
    """(1, 1, L, L): 0 on and below the diagonal, -inf above, as the eager path adds."""
    future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)
    additive = torch.zeros(L, L, device=device).masked_fill(future, float("-inf"))
    return additive[None, None]


cfg = tiny_config(SIZES, BASE)
hf, hf_rotary = hf_attention(cfg, device)
B, L = 2, 7
pos = torch.stack([torch.arange(L), 3 * torch.arange(L) + 2]).to(device)  # (B, L)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
cos_hf, sin_hf = hf_rotary(x, pos)  # (B, L, Dr) each
with torch.no_grad():
    ref, ref_weights = hf(x, (cos_hf, sin_hf), additive_causal(L, device))
print(f"DeepseekV3Attention: scaling {hf.scaling:.6f} = 1/sqrt(Dn + Dr), "
      f"rope_interleave {cfg.rope_interleave}")

# %%
# Equal to ``DeepseekV3Attention``, absorbed or not
# -------------------------------------------------
# The random module's state dict loads into ours by name, with no map.
attn = LatentAttention(**SIZES).to(device)
attn.load_state_dict(hf.state_dict(), strict=True)
cos, sin = rope_cos_sin(pos, Dr, BASE)  # (B, L, Dr)
scale = (Dn + Dr) ** -0.5  # the head's width for queries and keys
with torch.no_grad():
    out, weights, (c, k_rot) = attn(x, cos, sin, scale)
    out_abs, weights_abs = absorbed_attention(attn, x, cos, sin, scale)
print(f"max |ours - DeepseekV3Attention|: naive {(out - ref).abs().max():.1e}, "
      f"absorbed {(out_abs - ref).abs().max():.1e}")
torch.testing.assert_close(out, ref)
torch.testing.assert_close(weights, ref_weights)
torch.testing.assert_close(out_abs, ref)
torch.testing.assert_close(weights_abs, ref_weights)

# %%
# Proof: the cache holds the latent; decoding from it equals one full pass
# ------------------------------------------------------------------------
# Hugging Face's ``DynamicCache`` receives the latent and the rotated shared key, each
# as one "head": ``(B, 1, L, Dc)`` and ``(B, 1, L, Dr)``, exactly what ``compress``
# returns, where an uncompressed cache would hold ``Nh`` keys of ``Dn + Dr`` and
# ``Nh`` values of ``Dv``. Then a prefill of 4 tokens and 3 tokens one at a time, each
# from the cache alone: ours (naive and absorbed) and ``DeepseekV3Attention`` with a
# ``DynamicCache``; every step equals the full pass's row at its position. The future
# gets weight exactly 0 (``exp(-inf)``; a finite mask would leave a little).
from transformers import DynamicCache

assert sorted(attn.state_dict()) == sorted(hf.state_dict())  # 7 names alike
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)
assert (weights[..., future] == 0).all() and (ref_weights[..., future] == 0).all()
assert (weights[..., ~future] > 0).all()  # and every past key some weight
assert (weights_abs[..., future] == 0).all()
hf_cache = DynamicCache(config=cfg)
with torch.no_grad():
    hf(x, (cos_hf, sin_hf), additive_causal(L, device), past_key_values=hf_cache)
cached = hf_cache.layers[0]
per_token = (cached.keys.numel() + cached.values.numel()) // (B * L)
print(f"DynamicCache: keys {tuple(cached.keys.shape)}, values "
      f"{tuple(cached.values.shape)}: {per_token} numbers per token")
print(f"uncompressed: {Nh} keys of {Dn + Dr} and {Nh} values of {Dv}, "
      f"{Nh * (Dn + Dr + Dv)} numbers per token")
assert cached.keys.shape == (B, 1, L, Dc) and cached.values.shape == (B, 1, L, Dr)
torch.testing.assert_close(cached.keys, c)
torch.testing.assert_close(cached.values, k_rot)
assert per_token == Dc + Dr

n_prefill = 4
cache_ours, hf_cache = None, DynamicCache(config=cfg)
steps, steps_abs, steps_hf = [], [], []
with torch.no_grad():
    for start, stop in [(0, n_prefill)] + [(t, t + 1) for t in range(n_prefill, L)]:
        xs = x[:, start:stop]
        cs, ss = cos[:, start:stop], sin[:, start:stop]
        o, _, cache_new = attn(xs, cs, ss, scale, cache_ours)
        steps_abs.append(absorbed_attention(attn, xs, cs, ss, scale, cache_ours)[0])
        cache_ours = cache_new
        mask = additive_causal(n_prefill, device) if start == 0 else None  # 1: sees all
        steps_hf.append(hf(xs, (cos_hf[:, start:stop], sin_hf[:, start:stop]),
                           attention_mask=mask, past_key_values=hf_cache)[0])
        steps.append(o)
decoded, decoded_abs = torch.cat(steps, dim=1), torch.cat(steps_abs, dim=1)
decoded_hf = torch.cat(steps_hf, dim=1)
print(f"cached decoding vs full pass: ours {(decoded - ref).abs().max():.1e}, "
      f"absorbed {(decoded_abs - ref).abs().max():.1e}, "
      f"HF {(decoded_hf - ref).abs().max():.1e}")
torch.testing.assert_close(decoded, ref)
torch.testing.assert_close(decoded_abs, ref)
torch.testing.assert_close(decoded_hf, ref)
torch.testing.assert_close(hf_cache.layers[0].keys, cache_ours[0])  # (B, 1, L, Dc)
torch.testing.assert_close(hf_cache.layers[0].values, cache_ours[1])  # (B, 1, L, Dr)

# %%
# Proof: absorbed equals naive in float64, and is multi-query attention
# ---------------------------------------------------------------------
# In float64 the two orders of the same products agree to float64's rounding, far
# inside ``assert_close``'s float64 tolerances (1e-7 relative): no wrong term passes.
attn64 = LatentAttention(**SIZES).to(device).double()
attn64.load_state_dict(hf.state_dict(), strict=True)
x64, cos64, sin64 = x.double(), *rope_cos_sin(pos, Dr, BASE, torch.float64)
with torch.no_grad():
    naive, naive_weights, _ = attn64(x64, cos64, sin64, scale)
    absorbed, absorbed_weights = absorbed_attention(attn64, x64, cos64, sin64, scale)
print(f"float64: max |absorbed - naive| = {(absorbed - naive).abs().max():.1e}")
torch.testing.assert_close(absorbed, naive)
torch.testing.assert_close(absorbed_weights, naive_weights)
assert (absorbed_weights[..., future] == 0).all()  # -inf: exactly 0, even in float64

# %%
# Absorbed, MLA is multi-query attention with one key/value head
# (:doc:`/generated/transformer/plot_10_gqa_mqa`): keys ``[c ; k_rot]`` of width
# ``Dc + Dr``, values ``c``, shared by all ``Nh`` queries ``[W_UK^T q_nope ; q_rot]``.
# PyTorch's SDPA computes it with ``enable_gqa=True``, given MLA's scale; its default,
# ``1/sqrt(Dc + Dr)``, is another model: MLA's with that scale.
import torch.nn.functional as F


def latent_mqa(attn, x, cos, sin, scale=None):
    """Absorbed MLA through SDPA with one key/value head: x (B, L, D) -> (B, L, D).
    scale None: SDPA's default, 1/sqrt of the query width Dc + Dr."""
    B, L, _ = x.shape
    Nh, Dn, Dv, Dc = attn.Nh, attn.Dn, attn.Dv, attn.Dc
    q_nope, q_rot = attn.queries(x, cos, sin)
    c, k_rot = attn.compress(x, cos, sin)  # (B, 1, L, Dc), (B, 1, L, Dr)
    W = attn.kv_b_proj.weight.view(Nh, Dn + Dv, Dc)
    q = torch.cat([torch.einsum("bhld,hdc->bhlc", q_nope, W[:, :Dn]), q_rot], dim=-1)
    k = torch.cat([c, k_rot], dim=-1)  # (B, 1, L, Dc + Dr): the cache itself
    y_lat = F.scaled_dot_product_attention(q, k, c, is_causal=True, scale=scale,
                                           enable_gqa=True)  # (B, Nh, L, Dc)
    y = torch.einsum("bhlc,hvc->blhv", y_lat, W[:, Dn:])  # (B, L, Nh, Dv)
    return attn.o_proj(y.reshape(B, L, Nh * Dv))


# %%
with torch.no_grad():
    mqa = latent_mqa(attn64, x64, cos64, sin64, scale)
    mqa_default = latent_mqa(attn64, x64, cos64, sin64)
    wide = absorbed_attention(attn64, x64, cos64, sin64, (Dc + Dr) ** -0.5)[0]
gap_scale = (mqa_default - naive).abs().max().item()
print(f"max |SDPA as MQA - naive| = {(mqa - naive).abs().max():.1e}; with SDPA's "
      f"default scale 1/sqrt({Dc + Dr}): {gap_scale:.3f}")
torch.testing.assert_close(mqa, naive)
assert gap_scale > 0.01  # another model ...
torch.testing.assert_close(mqa_default, wide)  # ... MLA's with 1/sqrt(Dc + Dr)

# %%
# Proof: one rotary key per token; the layouts, ``q_proj``, the latent norms' eps
# -------------------------------------------------------------------------------
# ``kv_a_proj_with_mqa`` makes ``Dc + Dr`` numbers per token (MQA's single key, hence
# the name) where the queries get ``Dn + Dr`` per head. DeepSeek-V3's checkpoints
# rotate adjacent channel pairs (``rope_interleave=True``, the default); with
# ``rope_interleave=False`` Hugging Face rotates halves, and ours equals it too, while
# the two layouts on the same weights are two models. DeepSeek-V2-Lite has no query
# latent (``q_lora_rank=None``): one ``q_proj``, equal too. The latent norms keep
# their own ``eps`` of 1e-6 whatever ``rms_norm_eps`` says (so does DeepSeek's
# reference code), visible at a small input.
print(f"kv_a_proj_with_mqa: {hf.kv_a_proj_with_mqa.out_features} = Dc + Dr outputs; "
      f"q_b_proj: {hf.q_b_proj.out_features} = Nh (Dn + Dr)")
assert hf.kv_a_proj_with_mqa.out_features == Dc + Dr
assert hf.q_b_proj.out_features == Nh * (Dn + Dr)

cfg_halves = tiny_config(SIZES, BASE, rope_interleave=False)
hf_halves, _ = hf_attention(cfg_halves, device)
ours_halves = LatentAttention(**SIZES, interleave=False).to(device)
ours_halves.load_state_dict(hf_halves.state_dict(), strict=True)
ours_pairs = LatentAttention(**SIZES).to(device)
ours_pairs.load_state_dict(hf_halves.state_dict(), strict=True)
with torch.no_grad():
    ref_halves = hf_halves(x, (cos_hf, sin_hf), additive_causal(L, device))[0]
    out_halves = ours_halves(x, cos, sin, scale)[0]
    gap_layout = (ours_pairs(x, cos, sin, scale)[0] - ref_halves).abs().max().item()
print(f"rope_interleave=False: max |ours - HF| = "
      f"{(out_halves - ref_halves).abs().max():.1e}; adjacent pairs on those weights: "
      f"{gap_layout:.2f}")
torch.testing.assert_close(out_halves, ref_halves)
assert gap_layout > 0.1  # the layout is part of the checkpoint


cfg_noq = tiny_config(SIZES, BASE, q_lora_rank=None)
hf_noq, _ = hf_attention(cfg_noq, device)
ours_noq = LatentAttention(**{**SIZES, "Dq": None}).to(device)
ours_noq.load_state_dict(hf_noq.state_dict(), strict=True)
with torch.no_grad():
    ref_noq = hf_noq(x, (cos_hf, sin_hf), additive_causal(L, device))[0]
    out_noq = ours_noq(x, cos, sin, scale)[0]
print(f"q_lora_rank=None: max |ours - HF| = {(out_noq - ref_noq).abs().max():.1e}")
torch.testing.assert_close(out_noq, ref_noq)

cfg_eps = tiny_config(SIZES, BASE, rms_norm_eps=1e-2)
hf_eps, _ = hf_attention(cfg_eps, device)
ours_eps = LatentAttention(**SIZES).to(device)
ours_eps.load_state_dict(hf_eps.state_dict(), strict=True)
x_small = 5e-4 * x  # the latents' mean square falls below eps
with torch.no_grad():
    ref_small = hf_eps(x_small, (cos_hf, sin_hf), additive_causal(L, device))[0]
    out_small = ours_eps(x_small, cos, sin, scale)[0]
    ms = hf_eps.kv_a_proj_with_mqa(x_small)[..., :Dc].pow(2).mean().item()
print(f"rms_norm_eps 1e-2, latent mean square {ms:.0e}: max |ours (eps 1e-6) - HF| = "
      f"{(out_small - ref_small).abs().max():.1e}")
assert hf_eps.config.rms_norm_eps == 1e-2  # the config's, unused by these norms
assert hf_eps.kv_a_layernorm.variance_epsilon == 1e-6 and 1e-8 < ms < 1e-6
torch.testing.assert_close(out_small, ref_small)

# %%
# Proof: the published configs, and "GQA with 2.25 groups"
# --------------------------------------------------------
# ``DeepseekV3Config()``'s defaults are DeepSeek-V3's widths, so the dict above agrees
# with Hugging Face's record of them. DeepSeek-V2's paper (section 2.1) counts MLA's
# cache as GQA's with 2.25 groups of DeepSeek's head width 128; Llama 3's 8B and 70B
# both cache 8 key/value heads of 128, so their per-layer caches are equal and the
# 70B's per token is larger by its layers alone.
hf_defaults = DeepseekV3Config()
for field in DEEPSEEK_V3:
    assert getattr(hf_defaults, field) == DEEPSEEK_V3[field], field
mla = cache_per_token_layer(DEEPSEEK_V3)
gqa_8b, gqa_70b = cache_per_token_layer(LLAMA3_8B), cache_per_token_layer(LLAMA3_70B)
groups = mla / (2 * DEEPSEEK_V3["qk_nope_head_dim"])
mla_kib = mla * 61 * 2 / 2**10  # all 61 layers, 2 bytes (bf16)
gqa_8b_kib, gqa_70b_kib = gqa_8b * 32 * 2 / 2**10, gqa_70b * 80 * 2 / 2**10
print(f"per token and layer: MLA {mla} = 512 + 64 = GQA with {groups} groups; "
      f"Llama 3's GQA {gqa_8b}, {gqa_70b}")
print(f"per token, all layers, bf16: DeepSeek-V3 {mla_kib:.1f} KiB, Llama 3 8B "
      f"{gqa_8b_kib:.0f} KiB, 70B {gqa_70b_kib:.0f} KiB")
assert mla == 576 and groups == 2.25
assert gqa_8b == gqa_70b == 2048
assert bars["DeepSeek-V3 as MHA"][0] == 128 * (128 + 64 + 128)  # 40960
assert bars["Llama 3 8B as MHA"][0] == 2 * 32 * 128  # Dh = 128 in both
assert bars["Llama 3 70B as MHA"][0] == 2 * 64 * 128
assert round(mla_kib, 1) == 68.6 and gqa_8b_kib == 128 and gqa_70b_kib == 320

# %%
# Proof: YaRN's softmax scale, as DeepSeek-V3 applies it
# ------------------------------------------------------
# DeepSeek-V3 reaches 128K tokens with YaRN
# (:doc:`/generated/positional/plot_09_rope_scaling`) on its rotary channels: factor
# :math:`s = 40` over an original 4096 positions, with ``mscale`` and
# ``mscale_all_dim`` both 1. Its reference code
# (``inference/model.py``) multiplies the softmax scale :math:`1/\sqrt{D_n + D_r}` by
# :math:`(0.1 \ln s + 1)^2` on the whole head, when it is set to serve more than the
# original length; Hugging Face's ``yarn_apply_mscale`` multiplies by
# ``yarn_get_mscale(s, mscale_all_dim) ** 2`` whenever the rope type is not the
# default, and its rotary embedding multiplies cos and sin by the ratio
# ``g(s, mscale) / g(s, mscale_all_dim)``, here 1. The frequencies are YaRN's (the
# function copied from the scaling page) on the ``Dr`` rotary channels.
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    yarn_apply_mscale,
    yarn_get_mscale,
)


def deepseek_softmax_scale(Dn, Dr, max_seq_len, original_seq_len, rope_factor,
                           mscale):
    """The softmax scale of DeepSeek-V3's reference MLA (inference/model.py)."""
    softmax_scale = (Dn + Dr) ** -0.5
    if max_seq_len > original_seq_len:
        m = 0.1 * mscale * math.log(rope_factor) + 1.0
        softmax_scale = softmax_scale * m * m
    return softmax_scale


# Copied from positional/plot_09_rope_scaling.py: yarn
def yarn(Dh, base, s, L0, beta_fast=32.0, beta_slow=1.0, rounded=True, device=None):
    """(inv_freq (Dh/2,), mscale): the ramp from the reference code, in pair indices."""
    def index_of(turns):  # the (fractional) i where L0 / lambda_i == turns
        return Dh * math.log(L0 / (2 * math.pi * turns)) / (2 * math.log(base))

    inv_freq = rope_inv_freq(Dh, base, torch.float64).to(device)  # (Dh/2,)
    i = torch.arange(Dh // 2, dtype=torch.float64, device=device)  # (Dh/2,)
    lo, hi = index_of(beta_fast), index_of(beta_slow)
    if rounded:  # the reference code rounds the ramp's ends outwards
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, Dh - 1)
    keep = ((hi - i) / (hi - lo)).clamp(0, 1)  # (Dh/2,) gamma: 1 keep, 0 interpolate
    mscale = 0.1 * math.log(s) + 1
    return (1 - keep) * inv_freq / s + keep * inv_freq, mscale


# %%
S_YARN, L0_YARN = 40.0, 4096  # DeepSeek-V3's rope_scaling: factor, original positions
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": S_YARN,
        "original_max_position_embeddings": L0_YARN, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
mscale_sq = (0.1 * math.log(40) + 1) ** 2
ref_scale = deepseek_softmax_scale(Dn, Dr, 16384, L0_YARN, S_YARN, 1.0)
print(f"(0.1 ln 40 + 1)^2 = {mscale_sq:.6f}; yarn_get_mscale(40, 1)^2 = "
      f"{yarn_get_mscale(S_YARN, 1.0) ** 2:.6f}")
assert round(mscale_sq, 6) == 1.873854
assert yarn_get_mscale(S_YARN, 1.0) ** 2 == mscale_sq
torch.testing.assert_close(yarn_apply_mscale(YARN, (Dn + Dr) ** -0.5), ref_scale)
# the reference reads mscale, Hugging Face mscale_all_dim: equal in V3's config
half = {**YARN, "mscale": 0.5, "mscale_all_dim": 0.5}
torch.testing.assert_close(yarn_apply_mscale(half, (Dn + Dr) ** -0.5),
                           deepseek_softmax_scale(Dn, Dr, 16384, L0_YARN, S_YARN, 0.5))
# the reference switches YaRN off when it serves no more than the original 4096 tokens
assert deepseek_softmax_scale(Dn, Dr, 4096, L0_YARN, S_YARN, 1.0) == (Dn + Dr) ** -0.5
assert yarn_apply_mscale({"rope_type": "default"}, 0.5) == 0.5  # plain RoPE: unchanged

cfg_yarn = tiny_config(SIZES, BASE, rope_parameters=YARN,
                       max_position_embeddings=163840)
hf_yarn, rotary_yarn = hf_attention(cfg_yarn, device)
cos_y, sin_y = rotary_yarn(x, 1000 * pos)  # positions far past 4096: YaRN at work
inv_freq, g = yarn(Dr, 10000.0, S_YARN, L0_YARN, device=device)
assert g ** 2 == mscale_sq  # the scaling page's temperature, squared
angles = (1000 * pos)[..., None].double() * inv_freq  # (B, L, Dr/2)
cos_ours, sin_ours = torch.cat([angles, angles], dim=-1).cos(), torch.cat(
    [angles, angles], dim=-1).sin()  # cos and sin unscaled: the ratio g / g is 1
ours_yarn = LatentAttention(**SIZES).to(device)
ours_yarn.load_state_dict(hf_yarn.state_dict(), strict=True)
with torch.no_grad():
    ref_yarn = hf_yarn(x, (cos_y, sin_y), additive_causal(L, device))[0]
    out_yarn = ours_yarn(x, cos_ours.float(), sin_ours.float(), ref_scale)[0]
    plain = ours_yarn(x, cos_ours.float(), sin_ours.float(), scale)[0]
gap_mscale = (plain - ref_yarn).abs().max().item()
print(f"HF scaling x sqrt(Dn + Dr) = {hf_yarn.scaling * math.sqrt(Dn + Dr):.6f}, "
      f"factor on cos and sin {rotary_yarn.attention_scaling}")
print(f"max |ours - HF| under YaRN {(out_yarn - ref_yarn).abs().max():.1e}, "
      f"without the mscale^2 {gap_mscale:.2f}")
torch.testing.assert_close(hf_yarn.scaling, ref_scale)
assert rotary_yarn.attention_scaling == 1.0  # g(40, 1) / g(40, 1)
torch.testing.assert_close(cos_y, cos_ours.float())
torch.testing.assert_close(sin_y, sin_ours.float())
torch.testing.assert_close(out_yarn, ref_yarn)
assert gap_mscale > 0.05  # the scale is visible in the output

# %%
# Try it: put RoPE on the compressed keys. Can you still absorb?
# --------------------------------------------------------------
# Drop the decoupled key and rotate the up-projected keys :math:`W^{UK}_i c_t` (and
# the queries) instead. Is :math:`q^\top R_{t-s} W^{UK}_i c_t` still
# :math:`(\text{one matrix} \cdot q)^\top c_t`?

# The rotation between query and latent depends on the distance t - s: no single
# matrix absorbs it. Absorbing W_UK alone, as if the rotation were not there, gives
# other logits. (float64; the rotation uses the first Dr of the Dn channels' pairs.)
with torch.no_grad():
    q_nope, _ = attn64.queries(x64, cos64, sin64)  # (B, Nh, L, Dn)
    c64, _ = attn64.compress(x64, cos64, sin64)  # (B, 1, L, Dc)
    W_uk = attn64.kv_b_proj.weight.view(Nh, Dn + Dv, Dc)[:, :Dn]  # (Nh, Dn, Dc)
    k_nope = torch.einsum("hdc,bxlc->bhld", W_uk, c64)  # (B, Nh, L, Dn)
    cos_n, sin_n = rope_cos_sin(pos, Dn, BASE, torch.float64)  # (B, L, Dn)
    rotated = rope(q_nope, cos_n[:, None], sin_n[:, None]) @ rope(
        k_nope, cos_n[:, None], sin_n[:, None]).mT  # (B, Nh, L, L)
    absorbed_fixed = torch.einsum("bhld,hdc->bhlc", q_nope, W_uk) @ c64.mT
gap_rope = (rotated - absorbed_fixed).abs().max().item()
print(f"RoPE on W_UK c: max |rotated logits - absorbed W_UK| = {gap_rope:.2f}")
assert gap_rope > 0.1
# At equal positions (t = s) the rotations cancel: only the diagonal agrees.
diag = torch.arange(L)
torch.testing.assert_close(rotated[..., diag, diag], absorbed_fixed[..., diag, diag])

# %%
# References
# ----------
# DeepSeek-V2 (MLA, its section 2.1) :footcite:p:`DeepSeekAI2024b`; DeepSeek-V3
# :footcite:p:`DeepSeekAI2024`; YaRN :footcite:p:`Peng2023`; Llama 3
# :footcite:p:`Dubey2024`. APIs: ``DeepseekV3Attention``, ``yarn_apply_mscale``,
# ``transformers.DynamicCache``, ``torch.nn.functional.scaled_dot_product_attention``.
#
# .. footbibliography::
