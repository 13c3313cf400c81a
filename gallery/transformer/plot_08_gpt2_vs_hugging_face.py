"""
GPT-2, whole, against Hugging Face
==================================

The chapter's pieces stacked into GPT-2 under Hugging Face's names: a random
``GPT2LMHeadModel``'s state dict loads into ours as it is, and hidden states, logits
and gradients come out equal.

**You will learn**

- how GPT-2's embeddings, blocks, ``ln_f`` and LM head fit together, in equations
- how to write ``GPT2Attention``, ``GPT2MLP``, ``GPT2Block`` and ``GPT2`` from scratch
- why naming modules as Hugging Face does replaces a hand-written name map
- what weight tying is (one tensor, not two equal ones), and how a gradient shows it

**Prerequisites:** :doc:`/generated/transformer/plot_04_causal_attention`,
:doc:`/generated/transformer/plot_03_conv1d_feedforward`,
:doc:`/generated/transformer/plot_05_transformer_block`.
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
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")

# %%
# The idea
# --------
# GPT-2 adds a
# :doc:`learned position vector </generated/positional/plot_03_learned_absolute>` to
# each token's embedding, runs ``n_layer`` pre-LN blocks, normalizes, and reads the
# logits off the matrix that embedded them:
#
# .. math::
#
#    &x_0 = W_{te}[\mathrm{ids}] + W_{pe}[0 .. L-1], \qquad &&
#    \mathrm{logits} = \mathrm{LN}_f(x_{n_\mathrm{layer}})\, W_{te}^\top,
#
#    &h = x_l + \mathrm{Attn}(\mathrm{LN}_1(x_l)), \qquad &&
#    x_{l+1} = h + W_2\, \mathrm{GELU}_{\tanh}(W_1\, \mathrm{LN}_2(h) + b_1) + b_2,
#
# attention :math:`\mathrm{softmax}(q k^\top / \sqrt{D_h} + M)\, v` per head, causal
# (:math:`M` is ``-inf`` above the diagonal).
arrow = dict(arrowstyle="->", color="gray")
rows = {  # y of a row: its boxes, left to right
    3.0: ["ids (B, L)", "wte(ids)\n+ wpe(pos)", "h: GPT2Block\nx n_layer", "ln_f",
          "lm_head:\nx @ wte.T", "logits\n(B, L, V)"],
    1.0: ["x", "ln_1", "attn: causal,\n1 / sqrt(Dh)", "+", "ln_2",
          "mlp: Conv1D,\ngelu_tanh", "+"],
}
fig, ax = plt.subplots(figsize=(8, 2.5), layout="none")  # a diagram: no axes to fit
fig.subplots_adjust(left=0, right=1, bottom=0, top=0.92)
ax.set_axis_off()
ax.set(xlim=(-0.6, 12.6), ylim=(-0.1, 4.6))
for row_y, texts in rows.items():
    xs = [c * 12 / (len(texts) - 1) for c in range(len(texts))]
    for col, (box_x, text) in enumerate(zip(xs, texts)):
        if col:
            ax.annotate("", (box_x - 0.55, row_y), (xs[col - 1] + 0.55, row_y),
                        arrowprops=arrow)
        if text == "+":  # the residual: from before the norm, over it, into the sum
            ax.plot([xs[col - 3], xs[col - 3], box_x, box_x],
                    [row_y, row_y + 0.6, row_y + 0.6, row_y + 0.25], color="gray", lw=1)
        box = dict(boxstyle="circle" if text == "+" else "round", fc="C0", ec="C0",
                   alpha=0.2)
        ax.text(box_x, row_y, text, ha="center", va="center", fontsize=8, bbox=box)
ax.annotate("", (9.6, 3.45), (2.4, 3.45), arrowprops=dict(
    arrowstyle="->", color="C3", ls="--", connectionstyle="arc3,rad=-0.15"))
ax.text(6.0, 4.35, "tied: one Parameter wte.weight (V, D), used at both ends",
        ha="center", color="C3", fontsize=8)
ax.text(6.0, 1.95, "one GPT2Block (pre-LN)", ha="center", fontsize=8)
ax.set_title("GPT-2: pre-LN blocks between an embedding and a head that share "
             "one matrix")
plt.show()

# %%
# Proof: Conv1D as its page defines it, and a random GPT-2
# ---------------------------------------------------------
# ``Conv1D(nf, nx)`` stores its weight ``(nx, nf)``, input width first; it is copied
# from :doc:`/generated/transformer/plot_03_conv1d_feedforward`. Then a random
# two-layer ``GPT2LMHeadModel`` (dropout 0, the eager attention path), every parameter
# moved off its init so that a misplaced bias shows.


# Copied from transformer/plot_03_conv1d_feedforward.py: Conv1D
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
V, n_ctx, D, Nh, n_layer = 96, 32, 64, 4, 2
Dh = D // Nh
cfg = GPT2Config(
    vocab_size=V, n_positions=n_ctx, n_embd=D, n_head=Nh, n_layer=n_layer,
    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
    bos_token_id=None, eos_token_id=None,  # no special tokens (GPT-2's 50256 > V)
)
hf = GPT2LMHeadModel(cfg).to(device).eval()
with torch.no_grad():
    for p in hf.parameters():
        p.add_(0.1 * torch.randn_like(p))
theirs = hf.state_dict()
B, L = 2, 12  # the tokens below: (B, L)


# %%
# From scratch
# ------------
# Hugging Face's names; the head *is* ``wte``; a cache slices the mask ``bias``
# (:doc:`/generated/transformer/plot_09_kv_cache`).


# Copied from transformer/plot_03_conv1d_feedforward.py: gelu_tanh
def gelu_tanh(x):
    """GPT-2's GELU: the tanh approximation, as its code writes it."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


class GPT2MLP(nn.Module):
    """c_proj(gelu_tanh(c_fc(x))): D -> n_state -> D, Hugging Face's names."""

    def __init__(self, n_state, D):
        super().__init__()
        self.c_fc = Conv1D(n_state, D)  # D -> n_state
        self.c_proj = Conv1D(D, n_state)  # n_state -> D

    def forward(self, x):  # (B, L, D)
        return self.c_proj(gelu_tanh(self.c_fc(x)))


# %%
class GPT2Attention(nn.Module):
    """Causal multi-head attention, q, k, v from one Conv1D; Hugging Face's names."""

    def __init__(self, D, Nh, n_ctx):
        super().__init__()
        self.Nh = Nh
        self.c_attn = Conv1D(3 * D, D)  # D -> q, k, v
        self.c_proj = Conv1D(D, D)
        causal = torch.ones(n_ctx, n_ctx, dtype=torch.bool).tril()  # True: may attend
        self.register_buffer("bias", causal.view(1, 1, n_ctx, n_ctx), persistent=False)

    def split_heads(self, x):  # (B, L, D) -> (B, Nh, L, Dh)
        B, L, D = x.shape
        return x.reshape(B, L, self.Nh, D // self.Nh).transpose(1, 2)

    def forward(self, x):  # (B, L, D)
        B, L, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=-1)  # 3 x (B, L, D)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Nh, L, L)
        b = self.bias[:, :, :L, :L]  # (1, 1, L, L)
        w = w.masked_fill(~b, float("-inf")).softmax(dim=-1)
        y = (w @ v).transpose(1, 2).reshape(B, L, D)  # (B, Nh, L, Dh) -> (B, L, D)
        return self.c_proj(y)


# %%
class GPT2Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, D, Nh, n_ctx, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D, eps=eps)
        self.attn = GPT2Attention(D, Nh, n_ctx)
        self.ln_2 = nn.LayerNorm(D, eps=eps)
        self.mlp = GPT2MLP(4 * D, D)

    def forward(self, x):  # (B, L, D)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# %%
class GPT2(nn.Module):
    """Token ids (B, L) -> logits (B, L, V) and the hidden states, GPT-2's layout."""

    def __init__(self, V, n_ctx, D, Nh, n_layer, eps=1e-5):
        super().__init__()
        self.transformer = nn.ModuleDict({  # HF's GPT2Model: transformer.wte, ...
            "wte": nn.Embedding(V, D),  # token embedding
            "wpe": nn.Embedding(n_ctx, D),  # learned position embedding
            "h": nn.ModuleList([GPT2Block(D, Nh, n_ctx, eps) for _ in range(n_layer)]),
            "ln_f": nn.LayerNorm(D, eps=eps),
        })
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one Parameter, (V, D)

    def forward(self, ids):  # (B, L)
        t = self.transformer
        pos = torch.arange(ids.size(1), device=ids.device)  # (L,)
        x = t.wte(ids) + t.wpe(pos)  # (B, L, D)
        hidden = [x]  # the embeddings, then the output of every block
        for block in t.h:
            x = block(x)
            hidden.append(x)
        return self.lm_head(t.ln_f(x)), hidden  # (B, L, V), n_layer + 1 x (B, L, D)


# %%
# **Equal to Hugging Face's GPT-2:** its state dict loads strictly, the logits agree.
ours = GPT2(V, n_ctx, D, Nh, n_layer).to(device).eval()
ours.load_state_dict(theirs, strict=True)  # the same names: no map
ids = torch.randint(0, V, (B, L), device=device)  # (B, L)
with torch.no_grad():
    out = hf(ids, output_hidden_states=True)
    logits, hidden = ours(ids)  # (B, L, V), n_layer + 1 x (B, L, D)
errs = {"logits": (logits - out.logits).abs().max().item()}
print(f"max|ours - HF| on the logits = {errs['logits']:.1e}")
torch.testing.assert_close(logits, out.logits)

# %%
# Proof: the same names, settings and hidden states
# -------------------------------------------------
# Every tensor of Hugging Face's state dict, under the name ours has too, with its
# shape. No weight is transposed: both ``Conv1D`` store ``(nx, nf)``. The config is
# the one a reader would expect: the eager path, GPT-2's tanh GELU (``"gelu_new"``),
# and ``layer_norm_epsilon`` equal to our default. The state dict holds no
# LayerNorm's ``eps``, so it must agree by construction; it does, in all five.
for name, tensor in theirs.items():
    print(f"{name:36s} {tuple(tensor.shape)}")
assert sorted(ours.state_dict()) == sorted(theirs)  # the same names, all of them
print(f"attention: {hf.config._attn_implementation}, activation: "
      f"{cfg.activation_function}, LayerNorm eps: {cfg.layer_norm_epsilon}")
assert hf.config._attn_implementation == "eager"
assert cfg.activation_function == "gelu_new"  # GPT-2's tanh GELU
assert cfg.layer_norm_epsilon == 1e-5  # our GPT2's default eps
hf_modules = dict(hf.named_modules())
ln_eps = {n: m.eps for n, m in ours.named_modules() if isinstance(m, nn.LayerNorm)}
print(f"{len(ln_eps)} LayerNorms, eps ours {set(ln_eps.values())}, Hugging Face's "
      f"{ {hf_modules[name].eps for name in ln_eps} }")
assert all(hf_modules[name].eps == e for name, e in ln_eps.items())
assert len(ln_eps) == 2 * n_layer + 1

# %%
# Hugging Face's hidden states are the embeddings, then one per block, except that the
# last is taken *after* ``ln_f``; ours equal them.
with torch.no_grad():
    last = hf.transformer(ids).last_hidden_state  # (B, L, D)
    ours_states = hidden[:-1] + [ours.transformer.ln_f(hidden[-1])]
assert len(out.hidden_states) == n_layer + 1
names = ["embeddings"] + [f"block {i}" for i in range(n_layer - 1)] + ["ln_f (last)"]
states = {}
for name, mine, hf_state in zip(names, ours_states, out.hidden_states, strict=True):
    states[name] = (mine - hf_state).abs().max().item()
    print(f"{name:11s} max|ours - HF| = {states[name]:.1e}")
    torch.testing.assert_close(mine, hf_state)
torch.testing.assert_close(out.hidden_states[-1], last)
print(f"(the logits lie in [{logits.min():.1f}, {logits.max():.1f}])")
errs = {**states, **errs}  # in the order of the model: the states, then the logits

# %%
# Proof: the same logits with SDPA
# --------------------------------
# ``attn_implementation="sdpa"`` swaps the eager ``softmax(q k^T * scale + mask) v`` for
# PyTorch's ``scaled_dot_product_attention``, Hugging Face's default path. The same
# weights give the same logits at the default tolerances. On CPU, SDPA in float32
# runs a blocked flash kernel; on CUDA, the memory-efficient kernel (flash and cuDNN
# refuse float32), ``1.6e-6`` from float64 at ``L = 256`` (measured on an H100 with
# torch 2.11, not yet verified by a GPU build of the book).
cfg_sdpa = GPT2Config.from_dict(cfg.to_dict(), attn_implementation="sdpa")
hf_sdpa = GPT2LMHeadModel(cfg_sdpa).to(device).eval()
hf_sdpa.load_state_dict(theirs, strict=True)
with torch.no_grad():
    logits_sdpa = hf_sdpa(ids).logits  # (B, L, V)
errs["logits (SDPA)"] = (logits - logits_sdpa).abs().max().item()
print(f"attention: {hf_sdpa.config._attn_implementation}, max|ours - HF (sdpa)| = "
      f"{errs['logits (SDPA)']:.1e}")
assert hf_sdpa.config._attn_implementation == "sdpa"
torch.testing.assert_close(logits, logits_sdpa)

# %%
# .. _hf-conv1d-view:
#
# Proof: ``reshape``, not ``view``
# --------------------------------
# Inside the model every ``Conv1D`` input is contiguous, and ``view`` and ``reshape``
# flatten it alike. Called on its own with a strided input, such as an ``(L, B, D)``
# tensor made by ``transpose(0, 1)``, a ``view`` raises. Hugging Face's ``Conv1D``
# (``transformers.pytorch_utils``, version 5.23) still flattens with ``view``, as the
# notes' copy does (:ref:`errata-conv1d-view`); ours takes the strided input and gives
# Hugging Face's result on a contiguous copy of it.
x_lbd = torch.randn(B, L, D, device=device).transpose(0, 1)  # (L, B, D), strided
c_fc_hf = hf.transformer.h[0].mlp.c_fc
try:
    c_fc_hf(x_lbd)
except RuntimeError as err:
    print("HF's Conv1D, input transposed: RuntimeError:\n   ", str(err).split(" (")[0])
else:
    raise AssertionError("expected HF's Conv1D (view) to fail on a strided input")
with torch.no_grad():
    mine, ref = ours.transformer.h[0].mlp.c_fc(x_lbd), c_fc_hf(x_lbd.contiguous())
print(f"ours, input transposed: max|ours - HF on a copy| = "
      f"{(mine - ref).abs().max():.1e}")
torch.testing.assert_close(mine, ref)  # (L, B, 4D)

# %%
# Proof: GPT-2's MLP and GELU alone
# ---------------------------------
# Hugging Face names GPT-2's activation ``"gelu_new"``: the tanh approximation. Ours
# equals it and PyTorch's ``F.gelu(approximate="tanh")`` on ``[-6, 6]``, and differs
# from the exact GELU (``F.gelu``'s default) by far more than the tolerance; our MLP
# equals Hugging Face's ``GPT2MLP`` holding the same weights.
import torch.nn.functional as F

z = torch.linspace(-6, 6, 1201, device=device)  # pre-activations
with torch.no_grad():
    x = torch.randn(B, L, D, device=device)  # (B, L, D)
    mlp_hf = hf.transformer.h[0].mlp(x)  # (B, L, D)
    mlp_ours = ours.transformer.h[0].mlp(x)
act_hf = hf.transformer.h[0].mlp.act
print(f"max|gelu_tanh - HF gelu_new| = {(gelu_tanh(z) - act_hf(z)).abs().max():.1e}, "
      f"max|gelu_tanh - exact GELU| = {(gelu_tanh(z) - F.gelu(z)).abs().max():.1e}")
print(f"max|our MLP - HF's GPT2MLP| = {(mlp_ours - mlp_hf).abs().max():.1e}")
torch.testing.assert_close(gelu_tanh(z), act_hf(z))
torch.testing.assert_close(gelu_tanh(z), F.gelu(z, approximate="tanh"))
assert (gelu_tanh(z) - F.gelu(z)).abs().max() > 1e-4  # measured on the Conv1D page
torch.testing.assert_close(mlp_ours, mlp_hf)

# %%
# Try it: skip ln_f, the scale, the mask
# --------------------------------------
# How far off is our output without ``ln_f``, or attention with scale 1 or no mask?

# Their last hidden state is not the last block's output: ln_f moves it by a lot.
ln_f_gap = (hidden[-1] - out.hidden_states[-1]).abs().max().item()
print(f"max|last block's output - HF's last hidden state| = {ln_f_gap:.2f}")
assert ln_f_gap > 0.1
misses = {"no ln_f (last state)": ln_f_gap}

# Our attention equals PyTorch's causal attention, a reference independent of Hugging
# Face; the scale 1 and the missing mask each move the output far beyond the tolerance.
attn0 = ours.transformer.h[0].attn
with torch.no_grad():
    x = ours.transformer.h[0].ln_1(out.hidden_states[0])  # (B, L, D)
    q, k, v = (t.view(B, L, Nh, Dh).transpose(1, 2)  # 3 x (B, Nh, L, Dh)
               for t in attn0.c_attn(x).split(D, dim=-1))
    variants = {
        "SDPA, causal": F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "scale 1 (attention)":
            F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0),
        "no mask (attention)": F.scaled_dot_product_attention(q, k, v),
    }  # each (B, Nh, L, Dh)
    outs = {name: attn0.c_proj(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)
            for name, y in variants.items()}
    mine = attn0(x)  # (B, L, D)
ref = outs.pop("SDPA, causal")
print(f"first attention: max|ours - SDPA causal| = {(mine - ref).abs().max():.1e}")
torch.testing.assert_close(mine, ref)
for name, y in outs.items():
    misses[name] = (y - ref).abs().max().item()
    print(f"    {name}: max|change| = {misses[name]:.2f}")
assert min(misses.values()) > 0.05

# %%
# Try it: untie the head
# ----------------------
# A copy with its own head, equal to ``wte``: do its logits tell, or ``wte``'s gradient?


# Tying means one Parameter: the same Python object, the same memory, so a change made
# through one name is seen through the other (123.0 is written into wte and read back
# through the head, then undone). Both tied models list it once among their parameters
# and twice in their state dicts; the untied copy fails all three.
def tied(label, model, wte, head):
    """Is the head's weight the embedding's: the same object, memory, values written?"""
    same = head.weight is wte.weight
    shared = head.weight.data_ptr() == wte.weight.data_ptr()
    with torch.no_grad():
        old = wte.weight[3, 5].item()
        wte.weight[3, 5] = 123.0  # a write through the embedding's name ...
        seen = head.weight[3, 5].item()  # ... read through the head's
        wte.weight[3, 5] = old
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{label:6s} head is wte: {same!s:5s}, same data_ptr: {shared!s:5s}, "
          f"head reads {seen:8.4f}, {n_params} parameters")
    return same, shared, seen == 123.0


# %%
assert tied("HF", hf, hf.transformer.wte, hf.lm_head) == (True, True, True)
assert tied("ours", ours, ours.transformer.wte, ours.lm_head) == (True, True, True)
n_hf = sum(p.numel() for p in hf.parameters())
assert n_hf == sum(p.numel() for p in ours.parameters())
assert n_hf < sum(t.numel() for t in theirs.values())  # the state dict holds it twice

# %%
# The untied copy gives the very same logits, so the logits cannot tell. The gradient
# can: a tied weight receives the gradient of both of its uses, the lookup and the head,
# summed. One cross-entropy step of next-token prediction (Hugging Face shifts
# ``labels`` inside) gives the same loss and the same gradient for every parameter in
# ours and Hugging Face's; the untied copy's embedding gets only the lookup's share.
untied = GPT2(V, n_ctx, D, Nh, n_layer).to(device).eval()
untied.lm_head.weight = nn.Parameter(torch.empty(V, D, device=device))  # a 2nd tensor
untied.load_state_dict(ours.state_dict(), strict=True)
assert tied("untied", untied, untied.transformer.wte, untied.lm_head) == (
    False, False, False)
with torch.no_grad():
    logits_untied, _ = untied(ids)  # (B, L, V)
print(f"untied: max|logits - tied logits| = {(logits_untied - logits).abs().max():.1e}")
torch.testing.assert_close(logits_untied, logits)

hf.loss_type = "ForCausalLM"  # 5.23 finds none in the name GPT2LMHeadModel and warns
loss_hf = hf(ids, labels=ids).loss
loss_hf.backward()
for model in (ours, untied):
    logits_m, _ = model(ids)  # (B, L, V): position t predicts token t + 1
    F.cross_entropy(logits_m[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1)).backward()
loss_ours = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
print(f"loss: ours {loss_ours.item():.6f}, HF {loss_hf.item():.6f}")
torch.testing.assert_close(loss_ours, loss_hf.detach())
hf_params = dict(hf.named_parameters())  # lm_head.weight is listed once, as wte
worst = max((p.grad - hf_params[n].grad).abs().max().item()
            for n, p in ours.named_parameters())
errs["gradients"] = worst
print(f"all {len(list(ours.parameters()))} gradients: max|ours - HF| = {worst:.1e}")
for name, p in ours.named_parameters():
    torch.testing.assert_close(p.grad, hf_params[name].grad)
wte_grad = ours.transformer.wte.weight.grad
untied_gap = (untied.transformer.wte.weight.grad - wte_grad).abs().max().item()
both = untied.transformer.wte.weight.grad + untied.lm_head.weight.grad  # summed
head_share = both - wte_grad
print(f"untied embedding's gradient: max|diff| = {untied_gap:.2e}; plus the head's: "
      f"max|diff| = {head_share.abs().max().item():.1e}")
assert untied_gap > 1e-3
misses["untied wte (gradient)"] = untied_gap
torch.testing.assert_close(both, wte_grad)

# %%
# Every comparison at once: what ours and Hugging Face's disagree by, and what each slip
# above would have changed. A log axis has no zero: an exact match (the same bits) gets
# no bar, a mark on the axis's floor instead.
floor = 1e-9  # the axis's floor: below every nonzero difference here
names = [k.replace(" (", "\n(") for k in errs]
fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
ax.bar(names, [e if e > 0 else 0 for e in errs.values()], color="C0",
       label="max |ours - Hugging Face|")
zeros = [i for i, e in enumerate(errs.values()) if e == 0]
ax.plot(zeros, [floor * 1.5] * len(zeros), "v", color="C0", markersize=9,
        label="exactly 0: the same bits")
ax.bar([k.replace(" (", "\n(") for k in misses], list(misses.values()), color="C3",
       label="a slip's change")
ax.axhline(1e-5, color="gray", ls="--", label="float32 atol, 1e-5")
ax.set_yscale("log")
ax.set_ylim(floor, 30)
ax.set_ylabel("max absolute difference")
ax.tick_params(axis="x", labelsize="small")
ax.set_title("Ours equals Hugging Face's GPT-2 to float32 rounding or better;\n"
             r"each slip changes the result by $10^4$ times the tolerance or more")
ax.legend(fontsize="small", loc="center left")
plt.show()

# %%
# References
# ----------
# ``transformers.GPT2LMHeadModel``, ``transformers.GPT2Config``
# (``attn_implementation``, ``output_hidden_states``), ``torch.nn.Embedding``,
# ``torch.nn.LayerNorm``, ``torch.nn.Module.load_state_dict``,
# ``torch.Tensor.data_ptr``, ``torch.nn.functional.cross_entropy``.
