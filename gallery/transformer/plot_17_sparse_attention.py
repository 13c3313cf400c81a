"""
Sparse attention from an indexer: each query reads its top-k keys
=================================================================

DeepSeek-V3.2's sparse attention :footcite:p:`DeepSeekAI2025` lets a small, cheap
*lightning indexer* score every earlier key for each query, keeps the ``K`` best and
runs attention over those only. This page writes both from scratch and proves them
equal to Hugging Face's ``DeepseekV32Indexer`` and ``DeepseekV32Attention``.

**You will learn**

- how the indexer scores keys: a few ReLU heads, weighted per query, one shared key
- how top-k selection under the causal mask gives each query ``min(K, l + 1)`` keys
- that sparse attention is dense causal attention when ``K >= L``
- how the same selection runs as a gather, as a boolean mask and as a FlexAttention mask

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention`,
:doc:`/generated/positional/plot_04_rope`,
:doc:`/generated/normalization/plot_04_layernorm`,
:doc:`/generated/transformer/plot_13_sdpa_backends_flex`.

.. index:: ! sparse attention
.. index:: ! DeepSeek Sparse Attention
.. index:: ! lightning indexer
.. index:: ! top-k attention
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
import torch.nn.functional as F
import transformers
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The causal mask, rotate-half RoPE and LayerNorm, copied verbatim from
# :doc:`/generated/transformer/plot_04_causal_attention`,
# :doc:`/generated/positional/plot_04_rope` and
# :doc:`/generated/normalization/plot_04_layernorm`.


# Copied from transformer/plot_04_causal_attention.py: causal_mask
def causal_mask(L, device=None):
    """(L, L) bool: True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


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


# Copied from normalization/plot_04_layernorm.py: layer_norm
def layer_norm(x, weight, bias, eps=1e-5):
    """Normalize over x's last weight.dim() dims; weight, bias: that trailing shape."""
    dims = list(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


# %%
# The idea
# --------
# Causal attention reads all ``l + 1`` earlier keys for query ``l``, :math:`L^2` per
# sequence. A *lightning indexer* with ``Ni`` small heads of width ``Di`` scores query
# ``t`` against every earlier token ``s``,
#
# .. math::
#
#    I_{t,s} = \sum_{j=1}^{N_i} w_{t,j}\,
#    \mathrm{ReLU}\Big(\frac{q_{t,j} \cdot k_s}{\sqrt{D_i}}\Big),
#    \qquad S_t = \operatorname{top-}K_{\,s \le t}\; I_{t,s},
#
# with weights :math:`w_{t,j}` and queries :math:`q_{t,j}` from token :math:`t` and one
# key :math:`k_s`, shared by all heads, from token :math:`s`. The model's attention then
# reads only the keys :math:`s \in S_t`: the indexer still scores all :math:`L^2` pairs,
# in a few cheap heads (FP8 in DeepSeek's kernel). Below, ``K =`` :measured:`K_fig` of
# ``L =`` :measured:`L_fig` keys from random scores; a query with fewer keeps them all.
L_fig, K_fig = 16, 4
gen = torch.Generator().manual_seed(3)
scores_fig = torch.randn(L_fig, L_fig, generator=gen)  # (L, L) stand-in index scores
visible_fig = causal_mask(L_fig)  # (L, L): key s <= query t
picks_fig = scores_fig.masked_fill(~visible_fig, -math.inf).topk(K_fig).indices
selected_fig = torch.zeros(L_fig, L_fig, dtype=torch.bool).scatter(1, picks_fig, True)
selected_fig &= visible_fig  # picks of -inf (queries with fewer than K keys) dropped
fig, axes = plt.subplots(1, 2, figsize=(8, 3.7), layout="constrained")
for ax, shown, name in [(axes[0], visible_fig, "causal"),
                        (axes[1], selected_fig, f"indexer, top-{K_fig}")]:
    ax.imshow(shown, cmap="Blues", vmin=-0.3, vmax=1.2)
    ax.set(xlabel="key s", ylabel="query t",
           title=f"{name}: {int(shown.sum())} of {L_fig * L_fig} pairs")
    ax.grid(False)
skipped_fig = (visible_fig & ~selected_fig).float()  # (L, L)
axes[1].imshow(skipped_fig, cmap="Greys", alpha=0.25 * visible_fig.float())
fig.suptitle(f"Each query keeps its {K_fig} best earlier keys (grey: skipped), or all "
             f"of them if fewer")
plt.show()
pairs_causal, pairs_sparse = int(visible_fig.sum()), int(selected_fig.sum())
assert pairs_causal == L_fig * (L_fig + 1) // 2
assert pairs_sparse == K_fig * (K_fig + 1) // 2 + (L_fig - K_fig) * K_fig

# %%
# From scratch: the indexer and attention over its keys
# -----------------------------------------------------
# Queries read MLA's query latent ``q_lat`` (width ``Dq``), the one key head reads the
# token ``x`` through a LayerNorm; rotate-half RoPE turns the first ``Dr`` channels of
# both. The head weights ``w`` are a linear map of ``x`` over :math:`\sqrt{N_i}`.
# Module names as Hugging Face's, so its state dict loads as it is.
class Indexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: index scores of every (query, key) pair."""

    def __init__(self, D, Dq, Ni, Di, Dr):
        super().__init__()
        self.Ni, self.Di, self.Dr = Ni, Di, Dr
        self.wq_b = nn.Linear(Dq, Ni * Di, bias=False)  # Ni query heads
        self.wk = nn.Linear(D, Di, bias=False)  # one key head, shared
        self.k_norm = nn.LayerNorm(Di, eps=1e-6)  # holds weight and bias
        self.weights_proj = nn.Linear(D, Ni, bias=False)  # w: one weight per head

    def project(self, x, q_lat, cos, sin):
        """x (B, L, D), q_lat (B, L, Dq), cos and sin (L, Dr) -> the Ni queries
        (B, L, Ni, Di), the key (B, L, Di) and the head weights w (B, L, Ni)."""
        B, L, _ = x.shape
        Ni, Di, Dr = self.Ni, self.Di, self.Dr
        q = self.wq_b(q_lat).view(B, L, Ni, Di)  # (B, L, Ni, Di)
        k = layer_norm(self.wk(x), self.k_norm.weight, self.k_norm.bias, eps=1e-6)
        q = torch.cat([rope(q[..., :Dr], cos[:, None], sin[:, None]), q[..., Dr:]], -1)
        k = torch.cat([rope(k[..., :Dr], cos, sin), k[..., Dr:]], dim=-1)  # (B, L, Di)
        return q, k, self.weights_proj(x) / math.sqrt(Ni)

    def forward(self, x, q_lat, cos, sin):
        """Index scores of every (query, key) pair: (B, L, L)."""
        return index_scores(*self.project(x, q_lat, cos, sin))


def index_scores(q, k, w):
    """sum_j w_j ReLU(q_j . k / sqrt(Di)): q (B, L, Ni, Di), k (B, L, Di), w (B, L, Ni)
    -> (B, L, L), query by key."""
    logits = torch.einsum("blid,bmd->blim", q, k) / math.sqrt(q.shape[-1])
    # logits (B, L, Ni, L): each head's query against every key
    return torch.einsum("bli,blim->blm", w, logits.relu())


def select_keys(scores, K):
    """scores (B, L, L) -> each query's K best visible keys, best first: (B, L, K);
    a query with fewer is padded with future keys (score -inf)."""
    L = scores.shape[-1]
    hidden = ~causal_mask(L, scores.device)  # (L, L): the future
    return scores.masked_fill(hidden, -math.inf).topk(min(K, L), dim=-1).indices


# %%
# A sparse kernel *gathers* each query's ``K`` selected keys and values and runs softmax
# over them; the same selection as a boolean ``(L, L)`` mask serves a dense kernel.
def sparse_attention(q, k, v, idx, scale):
    """Each query attends to its keys idx (B, L, K) that are not in its future:
    q, k and v (B, Nh, L, Dh) -> (B, Nh, L, Dh)."""
    B, Nh, L, _ = q.shape
    b = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    h = torch.arange(Nh, device=q.device).view(1, Nh, 1, 1)
    k_sel, v_sel = k[b, h, idx[:, None]], v[b, h, idx[:, None]]  # (B, Nh, L, K, Dh)
    logits = torch.einsum("bhld,bhlkd->bhlk", q, k_sel) * scale  # (B, Nh, L, K)
    pos = torch.arange(L, device=q.device).view(L, 1)  # query l sits at position l
    logits = logits.masked_fill(idx[:, None] > pos, -math.inf)  # a future pick
    return torch.einsum("bhlk,bhlkd->bhld", logits.softmax(dim=-1), v_sel)


def selection_mask(idx, L):
    """idx (B, L, K) -> keep (B, L, L): True at the selected keys not in the future."""
    B = idx.shape[0]
    picked = torch.zeros(B, L, L, dtype=torch.bool, device=idx.device)
    return picked.scatter(-1, idx, True) & causal_mask(L, idx.device)


# %%
# Proof: the inputs, where every term counts
# ------------------------------------------
# A seeded random indexer, every parameter moved off its initial value (its key
# projection small, so that the LayerNorm's ``eps`` counts), random ``x`` and ``q_lat``,
# and random queries, keys and values for the attention.
B, L, K = 2, 12, 5
D, Dq, Ni, Di, Dr = 32, 24, 8, 16, 8
indexer = Indexer(D, Dq, Ni, Di, Dr).to(device)
with torch.no_grad():
    for p in indexer.parameters():
        p.copy_(p + 0.3 * torch.randn_like(p))
    indexer.wk.weight.mul_(0.002)
x = torch.randn(B, L, D, device=device)  # (B, L, D)
q_lat = torch.randn(B, L, Dq, device=device)  # (B, L, Dq)
cos, sin = rope_cos_sin(torch.arange(L, device=device), Dr, 10000.0)  # (L, Dr)
Nh, Dh = 4, 16
q, k, v = (torch.randn(B, Nh, L, Dh, device=device) for _ in range(3))
scale = Dh**-0.5

# %%
# The selection, and attention over it
# ------------------------------------
# Each query keeps ``min(K, l + 1)`` keys, all visible. With ``K = L`` sparse attention
# is causal SDPA; with ``K < L`` the gather equals SDPA with the boolean mask ``keep``.
with torch.no_grad():
    ours = indexer(x, q_lat, cos, sin)  # (B, L, L)
idx = select_keys(ours, K)  # (B, L, K)
keep = selection_mask(idx, L)  # (B, L, L)
counts = keep.sum(dim=-1)  # (B, L)
expected = (torch.arange(L, device=device) + 1).clamp(max=K).expand(B, L)
print(f"keys kept per query (K = {K}): {counts[0].tolist()}")
assert torch.equal(counts, expected)
assert not (keep & ~causal_mask(L, device)).any()
dense = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # its own 1/sqrt(Dh)
full = sparse_attention(q, k, v, select_keys(ours, L), scale)  # K = L
err_full = (full - dense).abs().max().item()
print(f"K = L = {L}: max |sparse - causal SDPA| = {err_full:.1e}")
torch.testing.assert_close(full, dense)

gathered = sparse_attention(q, k, v, idx, scale)  # K < L
masked = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None])
print(f"K = {K}: max |gather - boolean mask| = {(gathered - masked).abs().max():.1e}")
torch.testing.assert_close(gathered, masked)

# %%
# Proof: with ``K < L``, dense for the first ``K`` queries; a future pick weighs zero
# -------------------------------------------------------------------------------------
# Queries ``l < K`` keep all their keys; later ones skip some, so their output moves.
gap_dense = (gathered - dense).abs().max().item()
print(f"K = {K}: max |gather - dense| = {gap_dense:.2f}")
torch.testing.assert_close(gathered[:, :, :K], dense[:, :, :K])  # l < K: all keys
assert gap_dense > 0.1  # later queries skip keys: another output

# %%
# A query ``l < K`` is handed ``K - l - 1`` future keys by ``topk`` (their scores are
# ``-inf``). With the queries a hundred times larger, a visible key's logit can fall
# below -100, so a finite fill in place of ``-inf`` would let the future in.
sharp = sparse_attention(100 * q, k, v, idx, scale)
sharp_ref = F.scaled_dot_product_attention(100 * q, k, v, attn_mask=keep[:, None])
err_sharp = (sharp - sharp_ref).abs().max().item()
print(f"queries x 100: max |gather - boolean mask| = {err_sharp:.1e}")
torch.testing.assert_close(sharp, sharp_ref)

# %%
# Proof: what it saves at DeepSeek-V3.2's size
# --------------------------------------------
# From DeepSeek-V3.2-Exp's published ``config.json`` (Hugging Face Hub,
# ``deepseek-ai/DeepSeek-V3.2-Exp``), the fields of the indexer; they are also
# ``DeepseekV32Config``'s defaults. Over ``L =`` :measured:`L_long` tokens, the keys
# that the attention reads, summed over queries, against dense causal attention's:
# :measured:`share_read:.4f` of them.
from transformers import DeepseekV32Config

DEEPSEEK_V32 = dict(index_topk=2048, index_n_heads=64, index_head_dim=128,
                    qk_rope_head_dim=64, num_attention_heads=128)
defaults = DeepseekV32Config()
assert all(getattr(defaults, name) == value for name, value in DEEPSEEK_V32.items())
L_long, K_v32 = 128 * 1024, DEEPSEEK_V32["index_topk"]
read_sparse = (torch.arange(L_long, dtype=torch.float64) + 1).clamp(max=K_v32).sum()
read_dense = L_long * (L_long + 1) / 2
share_read = (read_sparse / read_dense).item()
print(f"L = {L_long}, K = {K_v32}: attention reads {share_read:.4f} of causal's keys")
assert read_sparse == K_v32 * (K_v32 + 1) / 2 + (L_long - K_v32) * K_v32
assert share_read < 2 * K_v32 / L_long  # about 2 K / L

# %%
# Proof: the selection as a FlexAttention ``mask_mod``
# ----------------------------------------------------
# FlexAttention takes a mask as a function of the query and key index. Reading
# ``keep``, it must give that mask back (``create_mask``). Its kernel runs here on
# CUDA only: its first eager call on CPU costs more than this page's whole time budget
# (:doc:`/generated/transformer/plot_13_sdpa_backends_flex` runs it there).
from torch.nn.attention.flex_attention import (
    create_block_mask,
    create_mask,
    flex_attention,
)


def selection_mod(keep):
    """keep (B, L, L) -> the same selection as a FlexAttention mask_mod."""
    def keep_mod(b, h, q_idx, kv_idx):
        return keep[b, q_idx, kv_idx]
    return keep_mod


# %%
flex_mask = create_mask(selection_mod(keep), B, None, L, L, device=device)
# flex_mask (B, 1, L, L)
print(f"FlexAttention's mask from keep_mod equals keep: "
      f"{torch.equal(flex_mask[:, 0], keep)}")
assert torch.equal(flex_mask[:, 0], keep)
if device == "cuda":  # the kernel, eager (a compiled one would compile first)
    block_mask = create_block_mask(selection_mod(keep), B, None, L, L, device=device)
    flexed = flex_attention(q, k, v, block_mask=block_mask)
    print(f"max |gather - flex_attention| = {(gathered - flexed).abs().max():.1e}")
    torch.testing.assert_close(gathered, flexed)

# %%
# Proof: equal to Hugging Face's ``DeepseekV32Indexer`` and ``DeepseekV32Attention``
# ----------------------------------------------------------------------------------
# ``DeepseekV32Indexer`` from a tiny random config of the same sizes loads our
# indexer's weights with ``strict=True``, so every parameter of it moves off its
# initial value. Hugging Face returns only the selected indices; a
# ``TorchFunctionMode`` catches the scores it passes to ``topk``. The inputs have no
# ties among the index scores that decide the selection (the check after this one),
# so the indices are unique and compared exactly.
from transformers import DeepseekV32Config
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf_v32


class CatchTopk(torch.overrides.TorchFunctionMode):
    """Records the tensor passed to Tensor.topk inside the `with` block."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.topk:
            self.scores = args[0]
        return func(*args, **(kwargs or {}))


# %%
cfg = DeepseekV32Config(vocab_size=64, hidden_size=D, num_attention_heads=4,
                        num_key_value_heads=4, q_lora_rank=Dq, kv_lora_rank=16,
                        qk_nope_head_dim=8, qk_rope_head_dim=Dr, v_head_dim=8 + Dr,
                        index_n_heads=Ni, index_head_dim=Di, index_topk=K,
                        num_hidden_layers=1, pad_token_id=0)
cfg._attn_implementation = "eager"
hf_indexer = hf_v32.DeepseekV32Indexer(cfg, layer_idx=0).to(device)
init = {name: p.clone() for name, p in hf_indexer.state_dict().items()}
hf_indexer.load_state_dict(indexer.state_dict(), strict=True)
moved = [name for name, p in hf_indexer.state_dict().items()
         if not torch.equal(p, init[name])]
print(f"parameters moved off init: {len(moved)} of {len(init)}:\n  {', '.join(moved)}")
assert len(moved) == len(init) == 5
hf_cos, hf_sin = hf_v32.DeepseekV32RotaryEmbedding(cfg).to(device)(
    x, torch.arange(L, device=device)[None])  # (1, L, Dr)
torch.testing.assert_close(hf_cos[0], cos)  # the same rotary tables, base 10000
torch.testing.assert_close(hf_sin[0], sin)
with torch.no_grad():
    k_raw = indexer.wk(x)  # (B, L, Di), before the LayerNorm
    k_eps, k_no_eps = (layer_norm(k_raw, indexer.k_norm.weight, indexer.k_norm.bias,
                                  eps=e) for e in (1e-6, 0.0))
eps_share = ((k_eps - k_no_eps).norm() / k_eps.norm()).item()
print(f"key before its LayerNorm: variance {k_raw.var(dim=-1).mean():.1e}, "
      f"so eps = 1e-6 moves the key by {eps_share:.1%}")
assert eps_share > 0.01  # every term of the key counts below


# %%
visible = causal_mask(L, device).expand(B, L, L)  # (B, L, L), True: key not in future
with CatchTopk() as caught:
    hf_idx = hf_indexer(x, q_lat, (hf_cos, hf_sin), visible, None)  # (B, L, K)
err = (ours - caught.scores).abs()[visible].max().item()
print(f"index scores: max |ours - HF| over visible pairs = {err:.1e}")
torch.testing.assert_close(ours[visible], caught.scores[visible])
assert caught.scores[~visible].eq(-math.inf).all()  # HF masks the future with -inf
real = idx <= torch.arange(L, device=device).view(L, 1)  # (B, L, K): not a future pick
print(f"selected keys equal HF's: {torch.equal(idx[real], hf_idx.long()[real])} "
      f"({int(real.sum())} real picks, {int((~real).sum())} future fillers)")
assert torch.equal(idx[real], hf_idx.long()[real])
assert torch.equal(real, hf_idx.long() <= torch.arange(L, device=device).view(L, 1))

# %%
# No ties: for every query, its visible scores sorted, each of the first ``K + 1`` is
# apart from the next by more than a hundred times the scores' float32 rounding
# (printed above), so the top ``K`` and their order are fixed.
top = ours.masked_fill(~visible, -math.inf).sort(dim=-1, descending=True).values
gaps = (top[..., :K] - top[..., 1:K + 1])  # (B, L, K): consecutive differences
gaps = gaps[torch.isfinite(gaps)]  # queries with fewer than K + 1 keys: their gaps only
print(f"smallest gap between consecutive top scores: {gaps.min():.2e}")
assert gaps.min() > 100 * max(err, 1e-7)

# %%
# The whole ``DeepseekV32Attention`` layer runs DeepSeek-V3's multi-head latent
# attention (MLA), asks the indexer for the top-``K`` keys and, in its eager path,
# folds them into the additive mask.
# Under an attention function of its own name it passes the indices instead; we
# register ``sparse_attention`` there, so that Hugging Face's projections feed *our*
# gather form. The two layer outputs must agree, and the indices it passes must be
# those of our indexer fed the layer's ``q_lat``. Then, with ``index_topk >= L``, the
# layer must equal DeepSeek-V3's dense ``DeepseekV3Attention`` holding the same
# weights. (``v_head_dim`` equals the query-key width here, so all widths are ``Dh``.)
from transformers import AttentionInterface, DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention


def gather_interface(module, query, key, value, attention_mask, scaling=None,
                     dropout=0.0, indices=None, **kwargs):
    """Hugging Face's attention-function signature around sparse_attention."""
    module.seen_indices = indices  # (B, L, K), as the layer passes them
    out = sparse_attention(query, key, value, indices.long(), scaling)  # (B, Nh, L, Dh)
    return out.transpose(1, 2), None  # (B, L, Nh, Dh)


# %%
AttentionInterface.register("indexer_gather", gather_interface)
layer = hf_v32.DeepseekV32Attention(cfg, layer_idx=0).to(device)
init = {name: p.clone() for name, p in layer.state_dict().items()}
with torch.no_grad():
    for p in layer.parameters():
        p.copy_(p + 0.3 * torch.randn_like(p))
assert all(not torch.equal(p, init[n]) for n, p in layer.state_dict().items())
additive = torch.zeros(L, L, device=device).masked_fill(
    ~causal_mask(L, device), torch.finfo(torch.float32).min).expand(B, 1, L, L)
with torch.no_grad():
    out_eager, _ = layer(x, (hf_cos, hf_sin), additive)  # (B, L, D)
    cfg._attn_implementation = "indexer_gather"
    out_gather, _ = layer(x, (hf_cos, hf_sin), additive)
    cfg._attn_implementation = "eager"
    q_lat_layer = layer.q_a_layernorm(layer.q_a_proj(x))  # (B, L, Dq)
    indexer.load_state_dict({n.removeprefix("indexer."): p for n, p in
                             layer.state_dict().items() if n.startswith("indexer.")})
    idx_layer = select_keys(indexer(x, q_lat_layer, cos, sin), K)  # (B, L, K)
real = idx_layer <= torch.arange(L, device=device).view(L, 1)
err_layer = (out_eager - out_gather).abs().max().item()
print(f"layer, eager mask vs our gather: max |diff| = {err_layer:.1e}; indices equal: "
      f"{torch.equal(layer.seen_indices.long()[real], idx_layer[real])}")
torch.testing.assert_close(out_eager, out_gather)
assert torch.equal(layer.seen_indices.long()[real], idx_layer[real])

# %%
# DeepSeek-V3.2 with ``index_topk >= L`` is DeepSeek-V3: the dense layer loads all but
# the indexer's weights and gives the same output; with ``index_topk < L`` it does not.
names = ["vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads",
         "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
         "v_head_dim", "num_hidden_layers", "pad_token_id"]
cfg_v3 = DeepseekV3Config(**{name: getattr(cfg, name) for name in names})
cfg_v3._attn_implementation = "eager"
dense_layer = DeepseekV3Attention(cfg_v3, layer_idx=0).to(device)
result = dense_layer.load_state_dict(layer.state_dict(), strict=False)
assert not result.missing_keys and all(n.startswith("indexer.")
                                       for n in result.unexpected_keys)
with torch.no_grad():
    out_v3, _ = dense_layer(x, (hf_cos, hf_sin), additive)
    layer.indexer.index_topk = L
    out_all, _ = layer(x, (hf_cos, hf_sin), additive)
    layer.indexer.index_topk = K
err_v3 = (out_all - out_v3).abs().max().item()
gap_v3 = (out_eager - out_v3).abs().max().item()
print(f"index_topk = {L}: max |V3.2 - V3| = {err_v3:.1e}; "
      f"index_topk = {K}: {gap_v3:.2f}")
torch.testing.assert_close(out_all, out_v3)
assert gap_v3 > 0.01

# %%
# Try it: drop the ReLU. Does the indexer select the same keys?
# -------------------------------------------------------------
# DeepSeek chose ReLU for throughput. Without it, a negative logit lowers a score.
indexer.load_state_dict(hf_indexer.state_dict())
with torch.no_grad():
    q_i, k_i, w_i = indexer.project(x, q_lat, cos, sin)
    linear = torch.einsum("bli,blid,bmd->blm", w_i, q_i, k_i) / math.sqrt(q_i.shape[-1])
keep_linear = selection_mask(select_keys(linear, K), L)  # (B, L, L)
changed = (keep_linear != keep).any(dim=-1)  # (B, L): another selection
print(f"without ReLU, {changed.sum().item()} of {B * L} queries select other keys")
assert changed.any()
assert not changed[:, :K].any()  # the first K queries keep all their keys either way

# %%
# Try it: rotate the indexer's channels in MLA's interleaved layout
# -----------------------------------------------------------------
# MLA's RoPE turns pairs ``(2i, 2i + 1)``, the indexer's ``(i, i + Dr/2)``. Same keys?

# Same weights, same positions, other pairs of channels: other scores, other keys.
with torch.no_grad():
    q_raw = indexer.wq_b(q_lat).view(B, L, Ni, Di)  # (B, L, Ni, Di), before RoPE
    k_raw = layer_norm(indexer.wk(x), indexer.k_norm.weight, indexer.k_norm.bias,
                       eps=1e-6)[:, :, None]  # (B, L, 1, Di)
    q_rot, k_rot = hf_v32.apply_rotary_pos_emb_interleave(
        q_raw[..., :Dr], k_raw[..., :Dr], hf_cos, hf_sin, unsqueeze_dim=2)
    q_adj = torch.cat([q_rot, q_raw[..., Dr:]], dim=-1)  # (B, L, Ni, Di)
    k_adj = torch.cat([k_rot, k_raw[..., Dr:]], dim=-1)[:, :, 0]  # (B, L, Di)
    adjacent = index_scores(q_adj, k_adj, w_i)  # (B, L, L)
moved_adj = (adjacent - ours).abs()[visible].max().item()
changed_adj = (selection_mask(select_keys(adjacent, K), L) != keep).any(dim=-1)
print(f"interleaved RoPE: max |scores - ours| = {moved_adj:.2f}; "
      f"{changed_adj.sum().item()} of {B * L} queries select other keys")
assert moved_adj > 0.01 and changed_adj.any()
assert not changed_adj[:, :K].any()  # the first K queries keep all their keys

# %%
# Try it: rotate q and k by a Hadamard matrix. Other keys?
# --------------------------------------------------------
# DeepSeek's code rotates them before rounding to FP8; Hugging Face's skips it.

# An orthogonal map keeps every dot product, so the scores, and the selection, stay.
hadamard = torch.ones(1, 1, device=device)
while hadamard.shape[0] < Di:  # Sylvester's construction, Di a power of two
    hadamard = torch.cat([torch.cat([hadamard, hadamard], 1),
                          torch.cat([hadamard, -hadamard], 1)])
hadamard = hadamard / math.sqrt(Di)  # (Di, Di), orthogonal
assert torch.equal(hadamard, hadamard.T)  # symmetric: x @ H rotates x by H
torch.testing.assert_close(hadamard @ hadamard, torch.eye(Di, device=device))
rotated = index_scores(q_i @ hadamard, k_i @ hadamard, w_i)  # (B, L, L)
err_h = (rotated - ours).abs().max().item()
print(f"Hadamard-rotated q, k: max |scores - scores before| = {err_h:.1e}, "
      f"same keys: {torch.equal(select_keys(rotated, K), idx)}")
torch.testing.assert_close(rotated, ours)
assert torch.equal(select_keys(rotated, K), idx)

# %%
# References
# ----------
# :footcite:t:`DeepSeekAI2025` (DeepSeek Sparse Attention, its lightning indexer);
# :footcite:t:`Dong2024` (FlexAttention). APIs: ``transformers``'
# ``DeepseekV32Indexer``, ``DeepseekV32Attention``, ``DeepseekV3Attention`` and
# ``AttentionInterface``; ``torch.nn.attention.flex_attention``.
#
# .. footbibliography::
