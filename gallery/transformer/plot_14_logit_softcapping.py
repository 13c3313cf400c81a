"""
Logit soft-capping: c tanh(x / c) on attention and final logits
===============================================================

Gemma 2 passes each scaled attention logit through :math:`50 \\tanh(x / 50)` before the
mask, and each final logit through :math:`30 \\tanh(x / 30)`. This page writes both from
scratch and proves them equal to Hugging Face's Gemma 2 and to a FlexAttention
``score_mod``.

**You will learn**

- why :math:`c \\tanh(x / c)` is almost the identity below the cap and flat beyond it
- where Gemma 2 caps: after the attention scale, before the mask, and on the head
- how to write the cap as a FlexAttention ``score_mod``
- where the cap's gradient fades, and what the final cap bounds

**Prerequisites:** :doc:`/generated/transformer/plot_11_llama_decoder_layer`,
:doc:`/generated/transformer/plot_13_sdpa_backends_flex`.

.. index:: ! soft-capping
.. index:: ! logit soft-capping
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
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import transformers
from torch import nn
from transformers import Gemma2Config, Gemma2ForCausalLM

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The rotary pieces are copied from :doc:`/generated/positional/plot_04_rope` and the
# causal ``mask_mod`` from :doc:`/generated/transformer/plot_13_sdpa_backends_flex`.


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


# Copied from transformer/plot_13_sdpa_backends_flex.py: causal_mod
def causal_mod(b, h, q_idx, kv_idx):
    """FlexAttention mask_mod: key kv_idx visible from query q_idx when not later."""
    return q_idx >= kv_idx


# %%
# The idea
# --------
# A logit far above the others takes all of the softmax. Soft-capping keeps small
# values almost as they are and squeezes all others into ``(-c, c)``, in order:
#
# .. math::
#
#    \mathrm{softcap}_c(x) = c \tanh\Big(\frac{x}{c}\Big), \qquad
#    \frac{d}{dx}\,\mathrm{softcap}_c(x) = 1 - \tanh^2\Big(\frac{x}{c}\Big).
#
# Gemma 2 caps the scaled attention logits at :math:`c = 50`, before the mask
# :math:`M` (its scale :math:`s = \mathrm{query\_pre\_attn\_scalar}^{-1/2}` is not
# always :math:`D_h^{-1/2}`), and the final logits at :math:`c = 30`:
#
# .. math::
#
#    y = \mathrm{softmax}\big(\mathrm{softcap}_{50}(s\, q k^\top) + M\big)\, v,
#    \qquad \mathrm{logits} = \mathrm{softcap}_{30}(h\, W_\mathrm{head}^\top).
xs = torch.linspace(-150.0, 150.0, 601, dtype=torch.float64)  # raw logits
us = torch.linspace(0.0, 12.0, 2401, requires_grad=True)  # x / c, float32
(slope32,) = torch.autograd.grad(torch.tanh(us).sum(), us)  # float32 autograd
slope64 = 1 - torch.tanh(us.detach().double()) ** 2
flat32 = us[slope32 == 0].min().item()  # first x / c where float32's slope is 0
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
ax.plot(xs, xs, ":", color="gray", label="no cap")
for c, color in [(50.0, "C0"), (30.0, "C3")]:
    ax.plot(xs, c * torch.tanh(xs / c), color=color, label=f"c = {c:.0f}")
    ax.axhline(c, color=color, lw=0.6, ls="--")
ax.set(xlabel="raw logit x", ylabel="capped logit", ylim=(-80, 80))
ax.legend(fontsize=8)
ax2.semilogy(us.detach(), slope64, color="C0", label="exact (float64)")
ax2.semilogy(us.detach()[slope32 > 0], slope32[slope32 > 0], "--", color="C1",
             label="float32 autograd")
ax2.axvline(flat32, color="C1", lw=0.8)
ax2.text(flat32 - 0.2, 1e-2, f"float32: exactly 0\nfrom x = {flat32:.2f} c",
         ha="right", fontsize=8)
ax2.set(xlabel="x / c", ylabel="slope d softcap / dx", ylim=(1e-9, 2))
ax2.legend(fontsize=8, loc="lower left")
slope_c, slope_2c_fig = 1 - math.tanh(1) ** 2, 1 - math.tanh(2) ** 2
fig.suptitle(f"Soft-capping keeps small logits and flattens large ones: its slope is "
             f"{slope_c:.2f} at x = c,\n{slope_2c_fig:.3f} at 2c, and exactly 0 in "
             f"float32 from {flat32:.1f}c", fontsize=10)
plt.show()


# %%
# From scratch
# ------------
# The cap is one line; its slope, written out, is what autograd must give.
def softcap(x, cap):
    """cap * tanh(x / cap), elementwise: any shape, values in [-cap, cap]."""
    return cap * torch.tanh(x / cap)


def softcap_slope(x, cap):
    """d softcap(x, cap) / dx = 1 - tanh(x / cap)**2, elementwise."""
    return 1 - torch.tanh(x / cap) ** 2


# %%
# **Near the identity, bounded, order kept.** As :math:`u - u^3/3 \le \tanh u \le u`
# for :math:`u \ge 0`, a logit moves by at most :math:`|x|^3 / (3c^2)`: by
# :measured:`rel_quarter:.1%` at a quarter of the cap (float64).
c = 50.0
x = torch.linspace(-10 * c, 10 * c, 20001, dtype=torch.float64, device=device)
capped = softcap(x, c)
moved = (capped - x).abs()
rel_quarter = (1 - softcap(torch.tensor(c / 4), c) / (c / 4)).item()
print(f"moved by {100 * rel_quarter:.1f} % at c/4, {100 * (1 - math.tanh(1)):.0f} % at "
      f"c; max |softcap| on [-10c, 10c] = {capped.abs().max():.6f} (c = {c:.0f})")
assert (moved <= x.abs() ** 3 / (3 * c**2) + 1e-9).all()  # the Taylor bound
assert 0.015 < rel_quarter < 0.021  # about (1/4)**2 / 3 = 2.1 %
assert (capped.abs() <= c).all() and (capped.diff() > 0).all()  # bounded, increasing


# %%
# **Soft-capped attention** is Llama's grouped-query attention with RoPE (see
# :doc:`/generated/transformer/plot_11_llama_decoder_layer`), its logits scaled by
# ``query_pre_attn_scalar ** -0.5`` and capped before the mask. Hugging Face's names.
class SoftcapAttention(nn.Module):
    """Causal GQA with RoPE, scaled logits capped at `cap` (None: no cap)."""

    def __init__(self, D, Nh, Nkv, Dh, query_pre_attn_scalar, cap):
        super().__init__()
        self.Nh, self.Nkv, self.Dh, self.cap = Nh, Nkv, Dh, cap
        self.scale = query_pre_attn_scalar ** -0.5  # Gemma 2: not always Dh ** -0.5
        self.q_proj = nn.Linear(D, Nh * Dh, bias=False)
        self.k_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.v_proj = nn.Linear(D, Nkv * Dh, bias=False)
        self.o_proj = nn.Linear(Nh * Dh, D, bias=False)

    def qkv(self, x, cos, sin):  # x (B, L, D); cos, sin (B, L, Dh)
        """-> q (B, Nh, L, Dh), k and v (B, Nkv, L, Dh), q and k rotated."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.Nh, self.Dh).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.Nkv, self.Dh).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.Nkv, self.Dh).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, Dh): the same for every head
        return rope(q, cos, sin), rope(k, cos, sin), v

    def forward(self, x, cos, sin):
        """-> the output (B, L, D) and the attention weights (B, Nh, L, L)."""
        B, L, _ = x.shape
        Nh, Nkv, Dh = self.Nh, self.Nkv, self.Dh
        G = Nh // Nkv  # query heads per key/value head
        q, k, v = self.qkv(x, cos, sin)
        qg = q.reshape(B, Nkv, G * L, Dh)  # the G query heads of a group, stacked
        logits = (qg @ k.mT).view(B, Nkv, G, L, L) * self.scale  # (B, Nkv, G, L, L)
        if self.cap is not None:
            logits = softcap(logits, self.cap)  # before the mask: masked stays -inf
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L)
        weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (weights.view(B, Nkv, G * L, L) @ v).view(B, Nh, L, Dh)  # (B, Nh, L, Dh)
        out = self.o_proj(y.transpose(1, 2).reshape(B, L, Nh * Dh))  # (B, L, D)
        return out, weights.view(B, Nh, L, L)


# %%
# In FlexAttention the cap is a ``score_mod``, rewriting each logit after the scale.
def softcap_score_mod(cap):
    """A FlexAttention score_mod capping each scaled logit at cap."""
    def capped(score, b, h, q_idx, kv_idx):
        return cap * (score / cap).tanh()  # a method: no global looked up when traced
    return capped


# %%
# Proof: a random Gemma 2, watched by a hook
# ------------------------------------------
# Two layers, ``D = 48``, ``Nh = 4`` query heads of ``Dh = 16``, ``Nkv = 2``, and
# ``query_pre_attn_scalar = 24``, not ``Dh``, so a scale of ``Dh ** -0.5`` fails. Every
# weight moves off its initialization; the query and key projections and the final
# norm are scaled up so that the raw logits reach far beyond both caps, as they must for
# a cap to show. A hook keeps what the first layer's attention receives and returns.
V, D, Nh, Nkv, Dh, QPAS = 96, 48, 4, 2, 16, 24
ATTN_CAP, FINAL_CAP = 50.0, 30.0  # Gemma 2's
cfg = Gemma2Config(
    vocab_size=V, hidden_size=D, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=Nh, num_key_value_heads=Nkv, head_dim=Dh,
    query_pre_attn_scalar=QPAS, attn_logit_softcapping=ATTN_CAP,
    final_logit_softcapping=FINAL_CAP,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    attn_implementation="eager",
)
model = Gemma2ForCausalLM(cfg).to(device).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        p.add_(0.1 * torch.randn_like(p))
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            p.mul_(12.0)  # raw attention logits beyond 50
    model.model.norm.weight.add_(25.0)  # raw final logits beyond 30
hf_attn = model.model.layers[0].self_attn
seen = {}
hook = hf_attn.register_forward_hook(
    lambda mod, args, kwargs, out: seen.update(kwargs, out=out), with_kwargs=True)
B, L = 2, 10
ids = torch.randint(1, V, (B, L), device=device)  # (B, L), no padding token
out_hf = model(ids, labels=ids)
hook.remove()
with torch.no_grad():
    hidden = model.model(ids).last_hidden_state  # (B, L, D), after the final norm
    raw_logits = model.lm_head(hidden)  # (B, L, V), uncapped
h0 = seen["hidden_states"]  # (B, L, D): the normed input of layer 0
ref, weights_hf = seen["out"]  # Gemma2Attention's output and weights
pos = torch.arange(L, device=device).expand(B, L)  # (B, L)

# %%
# Equal to Gemma 2
# ----------------
# The first layer's weights load into ours, strictly, and from the same hidden states
# ours gives its output; the head's raw logits capped at 30 give the model's.
attn = SoftcapAttention(D, Nh, Nkv, Dh, QPAS, ATTN_CAP).to(device)
attn.load_state_dict(hf_attn.state_dict(), strict=True)  # the same names: no map
cos, sin = rope_cos_sin(pos, Dh, 1000.0)  # (B, L, Dh) each, computed by us
ours, weights = attn(h0, cos, sin)
logits = softcap(raw_logits, FINAL_CAP)  # (B, L, V)
print(f"max |ours - Gemma2Attention| = {(ours - ref).abs().max():.1e}; final logits: "
      f"{(logits - out_hf.logits).abs().max():.1e}")
torch.testing.assert_close(ours, ref)
torch.testing.assert_close(logits, out_hf.logits)

# %%
# Proof: the cap binds, the future stays zero, and the wiring
# -----------------------------------------------------------
# The raw logits reach far beyond both caps on both sides; the weights equal Hugging
# Face's and are exactly 0 on the future. The cap keeps the order, so greedy decoding
# picks the same tokens, yet the probabilities are others.
q, k, v = attn.qkv(h0, cos, sin)
raw = (q.reshape(B, Nkv, -1, Dh) @ k.mT) * QPAS ** -0.5  # (B, Nkv, G * L, L) uncapped
lo_raw, hi_raw = raw.min().item(), raw.max().item()
max_raw_attn = max(-lo_raw, hi_raw)
p_gap = (logits.softmax(-1) - raw_logits.softmax(-1)).abs().max().item()
print(f"raw attention logits from {lo_raw:.0f} to {hi_raw:.0f} (cap {ATTN_CAP:.0f}); "
      f"max |weights - HF| = {(weights - weights_hf).abs().max():.1e}")
print(f"raw final logits up to {raw_logits.abs().max():.0f}; same greedy tokens: "
      f"{torch.equal(logits.argmax(-1), raw_logits.argmax(-1))}, probabilities moved "
      f"by up to {p_gap:.2f}")
torch.testing.assert_close(weights, weights_hf)
assert lo_raw < -3 * ATTN_CAP and hi_raw > 3 * ATTN_CAP  # the cap binds, both sides
assert torch.equal(weights.eq(0), weights_hf.eq(0))  # the future exactly 0 in both
assert raw_logits.abs().max() > 2 * FINAL_CAP and logits.abs().max() < FINAL_CAP
assert torch.equal(logits.argmax(-1), raw_logits.argmax(-1)) and p_gap > 0.1

# %%
# What the hook saw: the eager path, and an additive mask in which the future holds the
# most negative float32, not :math:`-\infty`; capped before it is added, that number
# still masks. The cap sits after the scale: the raw logits divided by
# ``query_pre_attn_scalar ** 0.5`` then capped give Hugging Face's weights. A share of
# :measured:`beyond:.2f` of the visible raw logits lies past ``c``, where the slope is
# under :math:`1 - \tanh^2 1`: there the gradients below are checked too.
mask_hf = seen["attention_mask"]  # (B, 1, L, L)
future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)
print(f"{cfg._attn_implementation} attention; the mask holds "
      f"{mask_hf[0, 0, 0, 1].item():.3g} for the future, 0 elsewhere")
assert cfg._attn_implementation == "eager"
assert (mask_hf[:, 0] == torch.finfo(torch.float32).min).eq(future).all()
assert torch.equal(weights_hf.eq(0), future.expand(B, Nh, L, L))  # exactly 0 there
assert sorted(attn.state_dict()) == sorted(hf_attn.state_dict())  # 4 names alike

capped_w = softcap(raw, ATTN_CAP).view(B, Nkv, -1, L, L).masked_fill(
    future, -math.inf).softmax(-1).view(B, Nh, L, L)
torch.testing.assert_close(capped_w, weights_hf)  # scale, then cap, then mask
assert capped_w.masked_select(future).eq(0).all()  # -inf: the future exactly 0
beyond = (raw.abs() > ATTN_CAP)[..., ~future.repeat(Nh // Nkv, 1)].float().mean().item()
print(f"share of the visible raw logits beyond the cap: {beyond:.2f}")
assert 0.25 < beyond < 0.6

# %%
# The gradients of a loss through all four projections, and the input's, equal
# Hugging Face's.
h0g = h0  # a tensor of the model's graph: its gradient is taken below
hf_out, _ = hf_attn(h0g, position_embeddings=seen["position_embeddings"],
                    attention_mask=mask_hf)
target = torch.randn_like(hf_out)
hf_grads = torch.autograd.grad((hf_out * target).sum(), [h0g, *hf_attn.parameters()])
our_out, _ = attn(h0g, cos, sin)
our_grads = torch.autograd.grad((our_out * target).sum(), [h0g, *attn.parameters()])
names = ["input", *(n for n, _ in attn.named_parameters())]
print("max |grad ours - grad HF|:\n  " + ", ".join(
    f"{n.removesuffix('.weight')} {(a - b).abs().max():.1e}"
    for n, a, b in zip(names, our_grads, hf_grads)))
rel = max_raw_attn * 2**-24  # a float32 logit of size x is known to x * 2**-24
assert rel < 2e-5  # the gradients agree to 2e-5 of their size
for a, b in zip(our_grads, hf_grads):  # so is each gradient, relative to its size
    torch.testing.assert_close(a, b, rtol=1.3e-6, atol=rel * b.abs().max().item())

# %%
# The cap keeps attention causal: the first 7 tokens of one sequence alone give the
# first 7 outputs.
ours_7, _ = attn(h0[:1, :7], cos[:1, :7], sin[:1, :7])
print(f"first 7 tokens alone: max |diff| = {(ours_7 - ref[:1, :7]).abs().max():.1e}")
torch.testing.assert_close(ours_7, ref[:1, :7])

# %%
# Proof: the cap as a FlexAttention ``score_mod``
# -----------------------------------------------
# The same ``q``, ``k``, ``v`` through ``flex_attention`` with the cap as a
# ``score_mod``, Gemma 2's scale and the causal block mask, then ``o_proj``, give
# Gemma 2's output. One call: on CPU, Dynamo traces it once for an unfused eager path
# that builds the full ``(B, Nh, L, L)`` scores. That path has no backward: torch 2.13
# refuses, on CPU, inputs that require a gradient (CUDA takes them), so the forward
# runs on detached inputs.
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
block_mask = create_block_mask(causal_mod, None, None, L, L, device=device)
flex_kw = dict(score_mod=softcap_score_mod(ATTN_CAP), block_mask=block_mask,
               scale=QPAS ** -0.5, enable_gqa=True)
with torch.no_grad():
    y_flex = flex_attention(q.detach(), k.detach(), v.detach(), **flex_kw)
    out_flex = attn.o_proj(y_flex.transpose(1, 2).reshape(B, L, Nh * Dh))  # (B, L, D)
print(f"max |flex score_mod - Gemma2Attention| = {(out_flex - ref).abs().max():.1e}")
torch.testing.assert_close(out_flex, ref)
try:
    flex_attention(q, k, v, **flex_kw)  # q, k, v carry the projections' graph
    refused = ""
except NotImplementedError as e:
    refused = str(e)
print(f"inputs that require grad, on {device}: {refused[:44] or 'accepted'}...")
assert bool(refused) == (device == "cpu")  # CUDA takes them

# %%
# Proof: the final cap bounds every token's loss, in Gemma 2's sizes too
# ----------------------------------------------------------------------
# A capped logit lies in ``[-c, c]``, so a token's probability
# is at least :math:`e^{-c} / (e^{-c} + (V - 1) e^{c})` and its cross-entropy at most
# :math:`2c + \ln V` nats, whatever the model. Hugging Face's loss is taken on the
# capped logits.
loss_tok = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),
                           reduction="none")  # (B * (L - 1),) next-token losses
loss_raw = F.cross_entropy(raw_logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),
                           reduction="none")
bound = 2 * FINAL_CAP + math.log(V)
print(f"worst token loss: capped {loss_tok.max():.1f}, uncapped {loss_raw.max():.1f},"
      f" bound 2c + ln V = {bound:.1f} nats")
assert loss_tok.max() <= bound < loss_raw.max()
extreme = torch.full((1, V), FINAL_CAP)  # every other token at +c ...
extreme[0, 0] = -FINAL_CAP  # ... and the label at -c: the worst case
worst = F.cross_entropy(extreme, torch.tensor([0])).item()
assert 0 < bound - worst < math.log(V / (V - 1)) + 1e-5  # attained, up to ln V/(V-1)
torch.testing.assert_close(loss_tok.mean(), out_hf.loss)

# %%
# **Gemma 2's published caps and scales**, from the ``config.json`` of
# ``google/gemma-2-2b``, ``-9b`` and ``-27b`` on the Hugging Face Hub.
# ``Gemma2Config()``'s defaults are the 2B's. The 27B scales its logits by
# ``144 ** -0.5`` with ``Dh = 128``, a few percent smaller than ``Dh ** -0.5``. With
# Gemma 2's 256000-token vocabulary, the loss of one token is bounded by
# ``2 * 30 + ln 256000`` nats.
GEMMA2 = {  # name: (head_dim, query_pre_attn_scalar, attention cap, final cap, vocab)
    "gemma-2-2b": (256, 256, 50.0, 30.0, 256000),
    "gemma-2-9b": (256, 256, 50.0, 30.0, 256000),
    "gemma-2-27b": (128, 144, 50.0, 30.0, 256000),
}
d = Gemma2Config()
assert GEMMA2["gemma-2-2b"] == (d.head_dim, d.query_pre_attn_scalar,
                                d.attn_logit_softcapping, d.final_logit_softcapping,
                                d.vocab_size)
ratio_27b = (144 / 128) ** -0.5
loss_bound_gemma2 = 2 * 30.0 + math.log(256000)
print(f"27B: scale 144**-0.5 = {ratio_27b:.3f} x 128**-0.5; "
      f"loss bound {loss_bound_gemma2:.2f} nats")
assert all(m[2:4] == (ATTN_CAP, FINAL_CAP) for m in GEMMA2.values())
assert 0.94 < ratio_27b < 0.95 and 72.4 < loss_bound_gemma2 < 72.5

# %%
# Proof: odd, its limits, its slope, and where rounding makes that zero
# ----------------------------------------------------------------------
# **Odd, and** :math:`\pm c` **at** :math:`\pm\infty`.
print(f"softcap(+-inf) = {softcap(torch.tensor([math.inf, -math.inf]), c).tolist()}")
assert softcap(torch.tensor([math.inf, -math.inf]), c).tolist() == [c, -c]
torch.testing.assert_close(softcap(-x, c), -capped)  # odd

# %%
# **The slope is** :math:`1 - \tanh^2`, as autograd computes it, and falls fast: about
# :math:`4 e^{-2x/c}` beyond the cap.
auto_slope = torch.func.vmap(torch.func.grad(softcap), in_dims=(0, None))(x, c)
ks = (0.5, 1, 2, 3)  # x in units of c
at = softcap_slope(torch.tensor(ks, dtype=torch.float64) * c, c)  # (4,)
print("slope at x = " + ", ".join(f"{k}c: {s:.4f}" for k, s in zip(ks, at.tolist())))
torch.testing.assert_close(auto_slope, softcap_slope(x, c))
torch.testing.assert_close(at, torch.tensor([1 - math.tanh(k) ** 2 for k in ks],
                                            dtype=torch.float64))  # float64 exactly
assert at[0] > 0.78 and 0.41 < at[1] < 0.43 and 0.07 < at[2] < 0.071 < at[3] * 8
assert abs(at[3] - 4 * math.exp(-6)) < 1e-3  # the tail 4 exp(-2x/c)


# %%
# **Rounding ends the gradient.** Where ``tanh(x / c)`` rounds to exactly 1, the
# capped logit is exactly ``c`` and autograd's slope ``1 - 1**2`` exactly 0. That
# happens once :math:`1 - \tanh u \approx 2 e^{-2u}` falls below half the gap under 1,
# :math:`\epsilon / 4` for a dtype whose machine epsilon is :math:`\epsilon`: from
# :math:`u = \tfrac12 \ln(8 / \epsilon)` on: :measured:`flat_fp32:.2f` in float32,
# :measured:`flat_bf16:.2f` in bfloat16,
# the dtype Gemma 2 ships in.
def first_flat(dtype, device):
    """The smallest u >= 0 (to 1e-6, on dtype's grid) where autograd's d tanh(u)/du
    is exactly 0, found by bisection."""
    lo, hi = 0.0, 40.0  # the slope is 1 at 0 and 0 at 40 in every float dtype
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        u = torch.tensor(mid, device=device).to(dtype).requires_grad_(True)
        (g,) = torch.autograd.grad(torch.tanh(u), u)
        lo, hi = (lo, mid) if g == 0 else (mid, hi)
    return hi


# %%
flat = {dt: first_flat(dt, device) for dt in (torch.bfloat16, torch.float32,
                                              torch.float64)}
flat_bf16, flat_fp32 = flat[torch.bfloat16], flat[torch.float32]
print("slope exactly 0 from x / c = " + ", ".join(
    f"{str(dt).removeprefix('torch.')}: {u:.2f}" for dt, u in flat.items()))
print(f"for c = 50 (Gemma 2's attention): from a raw logit of {50 * flat_bf16:.0f} in "
      f"bfloat16, {50 * flat_fp32:.0f} in float32")
for dt, u in flat.items():  # the closed form, to one step of dt's grid near u
    eps = torch.finfo(dt).eps
    assert abs(u - math.log(8 / eps) / 2) < 1e-4 + u * eps
assert 3.4 < flat_bf16 < 3.5 and 9.0 < flat_fp32 < 9.02 and 19.0 < flat[torch.float64]
assert abs(flat_fp32 - flat32) < 0.01  # the figure's float32 curve ends there too


# %%
# Try it: cap after the mask. Does the mask still hold?
# -----------------------------------------------------
# Mask first, then cap: what weight goes to the future when all logits are near -c?

# After the mask, tanh(-inf) = -1 turns every masked logit into exactly -c: a finite
# logit. Where the visible logits sit near -c too, the future takes a large share.
def cap_after_mask(logits, cap):
    """The wrong order: logits (..., L, L) masked causally with -inf, then capped."""
    L = logits.shape[-1]
    future = torch.ones(L, L, dtype=torch.bool, device=logits.device).triu(1)
    return softcap(logits.masked_fill(future, float("-inf")), cap).softmax(dim=-1)


# %%
low = torch.full((1, 1, 4, 4), -200.0, device=device)  # every raw logit far below -c
leak = cap_after_mask(low, ATTN_CAP)[0, 0, 0, 1:].sum().item()  # query 0's future
print(f"cap after the mask: masked logits become "
      f"{softcap(torch.tensor(-math.inf), 50).item()};\n  query 0 gives its future "
      f"keys {leak:.2f} of its weight")
visible = softcap(torch.tensor(-200.0), ATTN_CAP).item()  # key 0, a bit above -c
expected = 3 * math.exp(-ATTN_CAP) / (3 * math.exp(-ATTN_CAP) + math.exp(visible))
torch.testing.assert_close(leak, expected)  # 3 future keys at -c, 1 visible near -c
assert leak > 0.7

# %%
# Try it: scale by ``Dh ** -0.5``. Does anyone notice?
# ----------------------------------------------------
# Here ``query_pre_attn_scalar = 24``, ``Dh = 16``: how far off is it? And no cap?
wrong = SoftcapAttention(D, Nh, Nkv, Dh, Dh, ATTN_CAP).to(device)
wrong.load_state_dict(hf_attn.state_dict())
gap_scale = (wrong(h0, cos, sin)[0] - ref).abs().max().item()
uncapped = SoftcapAttention(D, Nh, Nkv, Dh, QPAS, None).to(device)
uncapped.load_state_dict(hf_attn.state_dict())
gap_nocap = (uncapped(h0, cos, sin)[0] - ref).abs().max().item()
print(f"scale Dh**-0.5: {gap_scale:.2f} away; no cap: {gap_nocap:.2f} away")
assert gap_scale > 0.1 and gap_nocap > 0.1  # other models, not rounding

# %%
# References
# ----------
# Gemma 2 :footcite:p:`Team2024b` (soft-capping of attention and final logits);
# FlexAttention :footcite:p:`Dong2024`; logits clipped by :math:`C \tanh(\cdot)`
# earlier in :footcite:t:`Bello2016`. APIs: ``transformers.Gemma2ForCausalLM`` (its
# ``Gemma2Attention``), ``torch.nn.attention.flex_attention.flex_attention``.
#
# .. footbibliography::
