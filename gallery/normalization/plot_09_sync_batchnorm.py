"""
Synchronized BatchNorm across devices
=====================================

A batch split across devices in training mode needs the whole batch's BatchNorm
statistics on every device, or each device normalizes with its own slice's. One
all-reduce of count, sum and sum of squares fixes it. The two-process run with
``torch.distributed`` is a test of the book, ``tests/test_sync_batchnorm.py``; here the
ranks are simulated in one process.

**You will learn**

- why per-device BatchNorm statistics differ from the batch's
- how one all-reduce of count, sum and sum of squares gives the batch's statistics
- how each rank then updates its running buffers to the whole batch's

**Prerequisites:** :doc:`/generated/normalization/plot_02_batchnorm` (BatchNorm, train
and eval), :doc:`/generated/normalization/plot_06_running_stats` (the running
statistics), :doc:`/generated/normalization/plot_08_batchnorm_practice` (BatchNorm
frozen and folded).
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
# The idea
# --------
# In training mode a batch split across ranks :math:`r` (devices) needs the whole
# batch's statistics on every rank: from each rank's count :math:`n_r`, sum :math:`S_r`
# and sum of squares :math:`Q_r` per channel,
#
# .. math::
#
#    N = \sum_r n_r, \qquad \mu = \frac{1}{N} \sum_r S_r, \qquad
#    \sigma^2 = \frac{1}{N} \sum_r Q_r - \mu^2
import matplotlib.pyplot as plt

gen = torch.Generator().manual_seed(4)
halves = [2.0 * r + torch.randn(3, 3, 5, 5, generator=gen, dtype=torch.float64)
          for r in range(2)]  # each (B_rank, C, H, W); rank r has mean 2r
batch_norm = torch.nn.functional.batch_norm  # training=True: the batch's statistics
views = {"per-device statistics": [batch_norm(h, None, None, training=True)
                                   for h in halves],
         "synchronized statistics": batch_norm(torch.cat(halves), None, None,
                                               training=True).split(3)}
fig, axes = plt.subplots(1, 2, figsize=(9, 2.9), sharey=True, layout="constrained")
for ax, (panel_title, panel) in zip(axes, views.items()):
    for rank, normed in enumerate(panel):  # normed (B_rank, C, H, W)
        ax.hist(normed[:, 0].flatten(), bins=30, range=(-3, 3), alpha=0.6,
                label=f"rank {rank} (input mean {2 * rank})")
    ax.set(title=panel_title, xlabel="channel 0, normalized")
    ax.legend(fontsize="small")
axes[0].set_ylabel("count")
fig.suptitle("Per-device BatchNorm erases the difference between the devices' data;\n"
             "synchronized statistics keep it")
plt.show()

# %%
# From scratch: the ranks simulated
# ---------------------------------
# Each rank normalizes its slice with the slice's own statistics (MegDet,
# :footcite:t:`Peng2018`, synchronizes them). Two half-batches (means 0 and 2), float64.
def fresh_bn(gamma, beta, start_mean, start_var):
    """A BatchNorm2d with weight gamma, bias beta and running buffers, all (C,)."""
    bn = torch.nn.BatchNorm2d(gamma.shape[0], device=gamma.device, dtype=gamma.dtype)
    with torch.no_grad():
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
        bn.running_mean.copy_(start_mean)
        bn.running_var.copy_(start_var)
    return bn


# %%
f64 = torch.float64
ranks = 2
B_rank, C, H, W = 3, 3, 5, 5  # so few samples per rank that biased and unbiased differ
g = torch.Generator().manual_seed(4)
slices = [(2.0 * r + torch.randn(B_rank, C, H, W, generator=g, dtype=f64)).to(device)
          for r in range(ranks)]  # each (B_rank, C, H, W)
x_all = torch.cat(slices)  # (ranks * B_rank, C, H, W): the whole batch
gamma = torch.randn(C, generator=g, dtype=f64).to(device)
beta = torch.randn(C, generator=g, dtype=f64).to(device)
start_mean = torch.randn(C, generator=g, dtype=f64).to(device)  # "pretrained" buffers
start_var = (0.5 + torch.rand(C, generator=g, dtype=f64)).to(device)
whole = fresh_bn(gamma, beta, start_mean, start_var)
y_whole = whole(x_all)  # the whole batch on one device

# %%
# The fix: all-reduce (here a plain sum) each rank's :math:`n_r, S_r, Q_r` and
# normalize with The idea's :math:`\mu, \sigma^2`.
def local_stats(s):
    """What one rank contributes for its slice s (B_rank, C, H, W): count, sum, sum of
    squares per channel, (3, C)."""
    dims = [0, 2, 3]
    C = s.shape[1]
    n = torch.full((C,), s.numel() // C, device=s.device, dtype=s.dtype)
    return torch.stack([n, s.sum(dim=dims), (s * s).sum(dim=dims)])  # (3, C)


def all_reduce(tensors):
    """A sum over the ranks, as dist.all_reduce(op=SUM) computes it."""
    return torch.stack(tensors).sum(dim=0)


# %%
n_tot, s_tot, q_tot = all_reduce([local_stats(s) for s in slices])  # each (C,)
mu = s_tot / n_tot  # (C,)
var = q_tot / n_tot - mu**2  # (C,), biased
synced = []
for s in slices:  # each rank normalizes its own slice with the global statistics
    z = (s - mu.view(1, C, 1, 1)) / torch.sqrt(var.view(1, C, 1, 1) + 1e-5)
    synced.append(z * gamma.view(1, C, 1, 1) + beta.view(1, C, 1, 1))
y_synced = torch.cat(synced)
print(f"synchronized vs whole batch: max|diff| {(y_synced - y_whole).abs().max():.1e}")
torch.testing.assert_close(y_synced, y_whole)  # float64 defaults

# %%
# Proof: the running statistics agree too
# ---------------------------------------
# Each rank updates its buffers with the global mean and the *unbiased* global
# variance :math:`\sigma^2 N / (N - 1)`, :math:`N` the global count: equal to the
# buffers of BatchNorm over the whole batch.
m = 0.1  # BatchNorm's default momentum
running_mean = (1 - m) * start_mean + m * mu
running_var = (1 - m) * start_var + m * var * n_tot / (n_tot - 1)
print(f"running_mean {(running_mean - whole.running_mean).abs().max():.1e}, "
      f"running_var {(running_var - whole.running_var).abs().max():.1e}")
torch.testing.assert_close(running_mean, whole.running_mean)
torch.testing.assert_close(running_var, whole.running_var)

# %%
# Proof: two processes (a test of the book)
# -----------------------------------------
# ``tests/test_sync_batchnorm.py`` runs the same algebra in two processes with
# ``torch.distributed`` (gloo backend, 127.0.0.1), each holding half of a batch, and
# asserts that the concatenated outputs, the running statistics and the gradients
# equal BatchNorm over the whole batch in one process. On CPU it cannot use
# ``nn.SyncBatchNorm``: in torch 2.13 its forward raises ``ValueError`` ("expected
# input tensor to be on GPU or XPU ...") when the input is on the CPU and a process
# group is initialized, so the test asserts that refusal and writes the all-reduce out
# with ``torch.distributed``. The page does not spawn processes itself: a sphinx-gallery
# build is no place for them. (``nn.SyncBatchNorm`` all-gathers each rank's mean,
# inverse standard deviation and count instead of sums and combines them; the result
# is the same. The sum-of-squares form above cancels digits when
# :math:`|\mu| \gg \sigma`, one reason to prefer the mean-and-variance form in low
# precision; here it is float64.)

# %%
# Try it: per-device statistics. How far off?
# -------------------------------------------
# Give each rank its own ``BatchNorm2d`` (same parameters and buffers) and compare the
# concatenated outputs with BatchNorm over the whole batch.

# %%
per_device = [fresh_bn(gamma, beta, start_mean, start_var) for _ in range(ranks)]
y_local = torch.cat([bn(s) for bn, s in zip(per_device, slices)])
local_gap = (y_local - y_whole).abs().max().item()
print(f"per-device BatchNorm vs whole batch: max|diff| = {local_gap:.2f}")
assert local_gap > 0.5  # per-device statistics are not the batch's

# %%
# Try it: keep rank 0's buffers, as DDP does. Right?
# --------------------------------------------------
# Compare rank 0's ``running_mean`` with that of BatchNorm over the whole batch.

# %%
# The per-device modules' running statistics are wrong as well: each holds its own
# slice's, and data-parallel training that keeps one rank's buffers (as
# ``DistributedDataParallel`` does when it broadcasts rank 0's) keeps rank 0's.
rank0_gap = (per_device[0].running_mean - whole.running_mean).abs().max().item()
print(f"rank 0's running_mean vs the whole batch's: max|diff| = {rank0_gap:.2f}")
assert rank0_gap > 0.05  # rank 0 saw mean 0, the batch has mean 1

# %%
# References
# ----------
# Synchronized BatchNorm: MegDet, :footcite:t:`Peng2018`.
#
# .. footbibliography::
