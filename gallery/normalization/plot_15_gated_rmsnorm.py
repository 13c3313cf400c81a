"""
Gated RMSNorm: normalize, then gate with SiLU
=============================================

Qwen3-Next's linear-attention layers end each head with a gated RMSNorm: the head's
output is normalized, weighed, and multiplied by the SiLU of a gate computed from the
token. Built on the book's RMSNorm and equal, bit for bit, to Hugging Face's
``Qwen3NextRMSNormGated``; Mamba-2's gated norm gates first and normalizes after.

**You will learn**

- the gated RMSNorm, RMSNorm of ``x`` times SiLU of a gate ``z``, with Hugging Face's
  roundings in 16 bits
- why the order matters: gating first lets the norm undo the gate's size
- that one model stores its two RMSNorms' weights differently (``w`` and ``1 + w``)

**Prerequisites:** :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm` (RMSNorm),
:doc:`/generated/transformer/plot_11_llama_decoder_layer` (SiLU, RMSNorm in float32).

.. index:: ! gated RMSNorm
.. index:: ! RMSNormGated
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

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}")

# %%
# The book's RMSNorm, copied verbatim from
# :doc:`/generated/normalization/plot_05_groupnorm_rmsnorm`: float32 statistics, the
# result rounded to the input's dtype, then weighed.


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


# %%
# The idea
# --------
# Qwen3-Next's :doc:`Gated DeltaNet </generated/transformer/plot_18_linear_attention>`
# :footcite:p:`Yang2024b` normalizes each head's output :math:`x` (width :math:`D`) and
# multiplies it by :math:`\mathrm{SiLU}(z)`, :math:`z` a second projection of the token;
# Mamba-2 :footcite:p:`Dao2024` gates first:
#
# .. math::
#
#    y = \Big(w \odot \frac{x}{\sqrt{\overline{x^2} + \epsilon}}\Big) \odot
#    \mathrm{SiLU}(z), \qquad \mathrm{SiLU}(z) = z\, \sigma(z),
#
# .. math::
#
#    y_\text{Mamba-2} = w \odot \mathrm{RMSNorm}\big(x \odot \mathrm{SiLU}(z)\big).
#
# The norm removes the size of whatever enters it. Gating after the norm, the gate
# sets the output's size; gating before, a gate that scales every channel alike is
# undone. Below, two tokens and a gate of one value :math:`c` in every channel
# (float64), at Qwen3-Next's eps.
from transformers import Qwen3NextConfig

gen = torch.Generator().manual_seed(0)
eps_fig = Qwen3NextConfig().rms_norm_eps  # the gated norm reads rms_norm_eps
x_fig = torch.randn(2, 64, generator=gen, dtype=torch.float64)  # (2, D) two tokens
c = torch.linspace(-6, 6, 241, dtype=torch.float64)[:, None, None]  # (241, 1, 1)
x_hat = x_fig * torch.rsqrt(x_fig.pow(2).mean(dim=-1, keepdim=True) + eps_fig)  # (2, D)
norm_first = (x_hat * F.silu(c)).pow(2).mean(dim=-1).sqrt()  # (241, 2) output RMS
gated = x_fig * F.silu(c)  # (241, 2, D)
gated = gated * torch.rsqrt(gated.pow(2).mean(dim=-1, keepdim=True) + eps_fig)
gate_first = gated.pow(2).mean(dim=-1).sqrt()  # (241, 2)
c = c[:, :, 0]  # (241, 1)
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.plot(c, norm_first[:, 0], lw=2, label="norm, then gate (Qwen3-Next)")
ax.plot(c, gate_first[:, 0], lw=2, ls="--", label="gate, then norm (Mamba-2)")
ax.set(xlabel="gate value c in every channel", ylabel="RMS of the output")
ax.legend(fontsize=8)
ax.set_title("Norm first, the gate sets the output's size; gate first, the norm "
             "undoes it")
plt.show()

# %%
# With :math:`s = \mathrm{SiLU}(c)` and :math:`m = \overline{x^2}`: normalized first,
# the output's RMS is :math:`|s| \sqrt{m / (m + \epsilon)}`, the gate's size; gated
# first, it is :math:`\sqrt{s^2 m / (s^2 m + \epsilon)}`, 1 wherever
# :math:`s^2 m \gg \epsilon`, whatever the gate.
s, m = F.silu(c), x_fig.pow(2).mean(dim=-1)  # (241, 1), (2,)
far = s.abs().flatten() > 0.1  # (241,) s**2 * m >> eps
print(f"eps = {eps_fig:.0e}; norm first: RMS from {norm_first.min():.4f} to "
      f"{norm_first.max():.2f}")
print(f"gate first: RMS from {gate_first[far].min():.6f} to {gate_first[far].max():.6f}"
      f" for |SiLU(c)| > 0.1 ({int(far.sum())} of {len(c)} values)")
assert eps_fig == 1e-6
torch.testing.assert_close(norm_first, s.abs() * torch.sqrt(m / (m + eps_fig)))
torch.testing.assert_close(gate_first, torch.sqrt(s**2 * m / (s**2 * m + eps_fig)))

# %%
# From scratch
# ------------
# The gated norm is the book's RMSNorm, then the gate: ``SiLU`` of the gate in float32,
# the product rounded to the input's dtype once more at the end, in this order, as
# Hugging Face's ``Qwen3NextRMSNormGated`` does.
class RMSNormGated(nn.Module):
    """RMSNorm(x) * SiLU(gate), the gate in float32; x, gate (..., D) -> x's dtype."""

    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # (D,) as RMSNorm's
        self.eps = eps

    def forward(self, x, gate):
        normed = RMSNorm.forward(self, x)  # the book's RMSNorm, this weight and eps
        return (normed * F.silu(gate.float())).to(x.dtype)


def rms_norm_gate_first(norm, x, gate):
    """Mamba-2's order: norm(x * SiLU(gate)), the product in float32; (..., D)."""
    return norm(x.float() * F.silu(gate.float())).to(x.dtype)


# %%
# Equal to Hugging Face's, bit for bit in 16 bits
# -----------------------------------------------
# As in Qwen3-Next's Gated DeltaNet: rows of one head's width ``Dv``, eps ``1e-3`` at a
# mean square near it (eps shows), every weight moved off its initialization of 1.
from transformers.models.qwen3_next import modeling_qwen3_next as hf_qwen3_next

Dv, eps = 32, 1e-3
hf = hf_qwen3_next.Qwen3NextRMSNormGated(Dv, eps=eps).to(device)
with torch.no_grad():
    hf.weight.copy_(1 + 0.5 * torch.randn(Dv))
ours = RMSNormGated(Dv, eps=eps).to(device)
ours.load_state_dict(hf.state_dict())  # strict: the same names
x = 0.03 * torch.randn(2, 3, Dv, device=device)  # (B, L, Dv): one head per token
z = 2 * torch.randn(2, 3, Dv, device=device)  # (B, L, Dv): the gate
with torch.no_grad():
    gap32 = (ours(x, z) - hf(x, z)).abs().max().item()
    print(f"float32: max |ours - Qwen3NextRMSNormGated| = {gap32:.1e}")
    torch.testing.assert_close(ours(x, z), hf(x, z))
    for dtype in (torch.bfloat16, torch.float16):
        x16, z16 = x.to(dtype), z.to(dtype)
        same = torch.equal(ours.to(dtype)(x16, z16), hf.to(dtype)(x16, z16))
        print(f"{str(dtype):15s}: bit for bit equal: {same}")
        assert same
hf.float()

# %%
# Proof: the roundings, the weights' two conventions, Mamba-2's order
# -------------------------------------------------------------------
# In 16 bits, Hugging Face rounds the normalized ``x`` to the input's dtype before the
# weight and rounds the gated product again: two roundings. Computing all in float32
# and rounding once gives other bits in some entries (norms in 16 bits:
# :doc:`/generated/normalization/plot_16_norms_16bit`).
with torch.no_grad():
    x16, z16 = x.to(torch.bfloat16), z.to(torch.bfloat16)  # (B, L, Dv)
    two = hf.to(torch.bfloat16)(x16, z16)
    w32 = hf.weight.float()
    hf.float()
    x32 = x16.float()
    once = (w32 * x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
            * F.silu(z16.float())).to(torch.bfloat16)
n_diff = int((two != once).sum())
max_diff = (two.float() - once.float()).abs().max()
print(f"bfloat16: one rounding differs from Hugging Face's two in {n_diff} of "
      f"{two.numel()} entries,\n  by at most {max_diff:.1e}")
assert not torch.equal(two, once)
# two roundings: at most 2 bfloat16 ulps apart, each at most 2**-7 relative
torch.testing.assert_close(two.float(), once.float(), atol=0, rtol=2**-6)

# %%
# One Qwen3-Next layer stores its weights two ways: its other RMSNorms (and its
# QK-norm) weigh by ``1 + w`` from ``w = 0``; the gated norm by ``w`` from 1. The
# gated norm sits in every Gated DeltaNet layer at the width of one value head.
config = Qwen3NextConfig(hidden_size=48, linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_value_head_dim=Dv)
delta = hf_qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0)
plain = hf_qwen3_next.Qwen3NextRMSNorm(Dv)
print(f"Gated DeltaNet's norm: {type(delta.norm).__name__}, width "
      f"{delta.norm.weight.shape[0]}; weight at init {delta.norm.weight[0]:.0f}")
print(f"Qwen3NextRMSNorm: weight at init {plain.weight[0]:.0f} (weighs by 1 + w)")
assert isinstance(delta.norm, hf_qwen3_next.Qwen3NextRMSNormGated)
assert delta.norm.weight.shape == (Dv,)
assert (delta.num_k_heads, delta.num_v_heads) == (2, 4)  # 2 key heads, 4 value heads
assert delta.out_proj.weight.shape == (48, 4 * Dv)  # (D, Nh * Dv): heads joined after
assert (delta.norm.weight == 1).all() and (plain.weight == 0).all()

# %%
# Mamba-2's gated norm, Hugging Face's ``MambaRMSNormGated`` over one group of the
# full width, is our RMSNorm of the gated input (float32); the two orders differ.
from transformers.models.mamba2.modeling_mamba2 import MambaRMSNormGated

mamba = MambaRMSNormGated(Dv, group_size=Dv, eps=eps).to(device)
mamba.load_state_dict(hf.state_dict())  # the same weight
plain_norm = RMSNorm(Dv, eps=eps).to(device)
plain_norm.load_state_dict(hf.state_dict())
with torch.no_grad():
    gate_first = rms_norm_gate_first(plain_norm, x, z)
    ref_mamba = mamba(x, z)
    order_gap = ((hf(x, z) - ref_mamba).norm() / ref_mamba.norm()).item()
print(f"max |ours - MambaRMSNormGated| = {(gate_first - ref_mamba).abs().max():.1e}")
print(f"norm first vs gate first: relative gap {order_gap:.2f}")
torch.testing.assert_close(gate_first, ref_mamba)
assert order_gap > 0.3

# %%
# Try it: drop eps. Does it show here?
# ------------------------------------
# ``x``'s mean square is near ``eps = 1e-3``. Run the gated norm with ``eps = 0``.

# Yes: each row grows by sqrt((m + eps) / m) for its own mean square m, a visible
# fraction here.
no_eps = RMSNormGated(Dv, eps=0.0).to(device)
no_eps.load_state_dict(hf.state_dict())
with torch.no_grad():
    m_rows = x.pow(2).mean(dim=-1, keepdim=True)  # (B, L, 1)
    eps_gap = ((no_eps(x, z) - hf(x, z)).norm() / hf(x, z).norm()).item()
    print(f"mean square of x: {x.pow(2).mean():.1e}; eps = 0 misses by {eps_gap:.2f}")
    grown = hf(x, z) * torch.sqrt((m_rows + eps) / m_rows)  # (B, L, Dv)
    torch.testing.assert_close(no_eps(x, z), grown)
assert eps_gap > 0.1

# %%
# Try it: normalize all heads of a token at once
# ----------------------------------------------
# Hugging Face reshapes the Gated DeltaNet's output to rows of one head before the
# norm. Normalize a token's ``Nh`` heads together instead (one RMS over ``Nh * Dv``,
# the weight repeated per head). Same output?

# Only when every head has the same RMS: heads 1 to 2x apart miss, the same heads
# brought to one RMS (unit length) agree.
x_heads = torch.linspace(1.0, 2.0, 3, device=device).unsqueeze(1) * x[0]  # (Nh, Dv)
x_same = F.normalize(x_heads, dim=-1)  # (Nh, Dv): one RMS for every head
wide = RMSNormGated(3 * Dv, eps=eps).to(device)  # one token's Nh = 3 heads at once
with torch.no_grad():
    wide.weight.copy_(hf.weight.repeat(3))
    joint, joint_same = (wide(t.reshape(1, 3 * Dv), z[0].reshape(1, 3 * Dv)).view(3, Dv)
                         for t in (x_heads, x_same))
    head_gap = ((joint - hf(x_heads, z[0])).norm() / hf(x_heads, z[0]).norm()).item()
    print(f"one RMS over the token's heads: relative gap {head_gap:.2f}")
    torch.testing.assert_close(joint_same, hf(x_same, z[0]))
assert head_gap > 0.1

# %%
# References
# ----------
# Gated DeltaNet :footcite:p:`Yang2024b`; Mamba-2 :footcite:p:`Dao2024`; RMSNorm
# :footcite:p:`Zhang2019`. APIs: ``Qwen3NextRMSNormGated``, ``Qwen3NextRMSNorm``,
# ``Qwen3NextGatedDeltaNet``, ``MambaRMSNormGated``.
#
# .. footbibliography::
