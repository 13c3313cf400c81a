"""
Running statistics converge, plotted
====================================

BatchNorm's running mean and variance are exponential moving averages of noisy batch
statistics. This page feeds ``BatchNorm1d`` batches from a known distribution and
watches the buffers reach the population values in about ``1 / momentum`` steps, then
stay as noisy as the batch size allows.

**You will learn**

- that the buffers follow the moving-average recursion exactly, step by step
- how fast they converge: the closed-form expectation and its ``1 / momentum`` time
- why a large momentum converges fast but stays noisy, and how the noise falls with
  ``B``
- how the gap between eval-mode and training-mode outputs closes as they converge

**Prerequisites:** :doc:`/generated/normalization/plot_02_batchnorm` (the update rule
and PyTorch's ``momentum``).
"""

# %%
# Setup
# -----
# Every page picks its device at run time, prints it, and asserts its claims there;
# where a device behaves differently, the page asserts each side. The
# :doc:`proof ledger </chapters/ledger>` shows on which devices this page was verified.
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"device: {device}, torch {torch.__version__}")

# %%
# The idea
# --------
# Each training step moves a running value :math:`r` a fraction :math:`m` (PyTorch's
# ``momentum``) toward the batch statistic :math:`s_t`. Taking expectations, the
# distance to the population value :math:`\tau` shrinks by :math:`1 - m` per step:
#
# .. math::
#
#    r_t = (1 - m)\, r_{t-1} + m\, s_t, \qquad
#    \mathrm{E}[r_t] = \tau + (r_0 - \tau)(1 - m)^t,
#
# to :math:`1 / e` of the start after :math:`1 / m` steps. BatchNorm treats every
# channel on its own, so ``C = 1024`` channels fed independent data are 1024 independent
# replicates of one experiment: a single channel shows one noisy run, the channel
# average shows the expectation. Every batch ``(B, C)`` is drawn from
# :math:`\mathcal{N}(\mu, \sigma^2)`; the buffers start at mean 0 and variance 1.
mu, sigma = 2.0, 3.0
B, C, Nt = 32, 1024, 300  # batch size, channels (replicates), training steps
momenta = [0.01, 0.03, 0.1, 0.3]
xs = mu + sigma * torch.randn(Nt, B, C, device=device)  # (Nt, B, C): Nt batches

# momentum -> (running_mean, running_var), each (Nt, C): the buffers after each step
history = {}
for m in momenta:
    bn = torch.nn.BatchNorm1d(C, momentum=m, affine=False).to(device)
    means, variances = [], []
    for xb in xs:
        bn(xb)
        means.append(bn.running_mean.clone())
        variances.append(bn.running_var.clone())
    history[m] = torch.stack(means), torch.stack(variances)

# %%
# Faint: one channel, i.e. one training run. Solid: the average over the 1024 channels.
# Dashed: the closed form, with a dot at step :math:`1 / m`, where 63 % of the way is
# covered. A small momentum converges slowly but smoothly; a large one converges fast
# and stays noisy.
steps = torch.arange(1, Nt + 1)  # (Nt,)
fig, ax = plt.subplots()
for m in momenta:
    runs = history[m][0].cpu()  # (Nt, C): running_mean after each step
    (line,) = ax.plot(steps, runs.mean(dim=1), label=f"momentum {m}")
    ax.plot(steps, runs[:, 0], color=line.get_color(), alpha=0.3, lw=0.8)
    ax.plot(steps, mu - mu * (1 - m) ** steps, "k--", lw=1)  # the closed form
    ax.plot(round(1 / m), mu - mu * (1 - m) ** round(1 / m), "ko", ms=4)
ax.plot([], [], color="gray", alpha=0.4, label="one channel")
ax.plot([], [], "k--", lw=1, label="closed form")
ax.plot([], [], "ko", ms=4, label="step 1 / momentum")
ax.axhline(mu, color="gray", lw=0.8)
ax.set_xscale("log")
ax.set_xlabel("training step (batches seen)")
ax.set_ylabel("running_mean")
ax.legend(fontsize="small")
ax.set_title(f"running_mean reaches μ = {mu:g} in about 1/momentum steps")
plt.show()


# %%
# From scratch
# ------------
# The recursion, as a function.
def ema(stats, m, start):
    """Moving averages of stats (Nt, C), weight m on the new value; (Nt, C)."""
    running = torch.full_like(stats[0], start)
    out = []
    for s in stats:
        running = (1 - m) * running + m * s
        out.append(running)
    return torch.stack(out)



# %%
# The buffers are exactly the moving average of the batch statistics: replaying the
# recursion on the batch means and on the *unbiased* batch variances reproduces every
# recorded value of every channel.
batch_mean = xs.mean(dim=1)  # (Nt, C)
batch_var = xs.var(dim=1, unbiased=True)  # (Nt, C)
for m, (running_mean, running_var) in history.items():
    mean_replay, var_replay = ema(batch_mean, m, 0.0), ema(batch_var, m, 1.0)
    print(f"momentum {m:4}: max|replay - buffer| = "
          f"{(mean_replay - running_mean).abs().max():.1e} (mean), "
          f"{(var_replay - running_var).abs().max():.1e} (var)")
    torch.testing.assert_close(mean_replay, running_mean)
    torch.testing.assert_close(var_replay, running_var)

# %%
# Small batches leave noisy statistics
# ------------------------------------
# After convergence ``running_mean`` still fluctuates around :math:`\mu`: it averages
# about :math:`(2 - m) / m` batch means, each with variance :math:`\sigma^2 / B`, so its
# standard deviation is :math:`\sqrt{m / (2 - m) \cdot \sigma^2 / B}`. Measure it as the
# spread across the 1024 channels after 100 steps at momentum 0.1
# (:math:`0.9^{100} < 10^{-4}`: the start is forgotten). A standard deviation estimated
# from :math:`C` independent values has a relative standard error of
# :math:`1 / \sqrt{2 (C - 1)}` (2.2 % here); the check allows 4 of them.
m = 0.1
batch_sizes = [2, 4, 8, 16, 32, 64, 128]
spread, predicted = [], []
for b in batch_sizes:
    bn = torch.nn.BatchNorm1d(C, momentum=m, affine=False).to(device)
    for _ in range(100):
        bn(mu + sigma * torch.randn(b, C, device=device))  # (b, C)
    spread.append(bn.running_mean.std().item())
    predicted.append((m / (2 - m) * sigma**2 / b) ** 0.5)

rel_tol = 4 / (2 * (C - 1)) ** 0.5
for b, s, p in zip(batch_sizes, spread, predicted):
    print(f"B = {b:3d}: std of running_mean across channels {s:.4f}, formula {p:.4f}, "
          f"ratio {s / p:.3f}")
    assert abs(s / p - 1) < rel_tol, f"B = {b}: spread off the formula by over 4 SE"

fig, ax = plt.subplots()
ax.loglog(batch_sizes, predicted, "k--", label="sqrt(m / (2 - m) · σ² / B)")
ax.errorbar(batch_sizes, spread, yerr=[rel_tol * p for p in predicted], fmt="o",
            label="std across 1024 channels (bars: ±4 SE)")
ax.set_xticks(batch_sizes, [str(b) for b in batch_sizes])
ax.set_yticks([0.05, 0.1, 0.2, 0.5], ["0.05", "0.1", "0.2", "0.5"])
ax.minorticks_off()
ax.set_xlabel("batch size B")
ax.set_ylabel("std of running_mean (step 100)")
ax.set_title("Noise of the running mean falls as 1/√B (momentum 0.1)")
ax.legend()
plt.show()


# %%
# Proof: the train/eval gap closes, down to a noise floor
# -------------------------------------------------------
# In eval mode BatchNorm normalizes with the running statistics, in training mode with
# the batch's own. Track the relative gap between the two on one fixed test batch while
# training at momentum 0.1. The training-mode output is computed with
# ``torch.nn.functional.batch_norm`` and no running statistics, so it does not touch the
# module's buffers; eval-mode calls never do. The dashed curve uses the closed-form
# expected statistics instead: the gap first falls with their bias, :math:`(1 - m)^t`,
# then levels off at the sampling noise of ``x_test``'s own statistics (512 values per
# channel). The measured curve sits above that floor by the noise of the running
# statistics themselves.
def rel_gap(y, y_train):
    """||y - y_train|| / ||y_train||, both of one shape; a float."""
    return ((y - y_train).norm() / y_train.norm()).item()


# %%
x_test = mu + sigma * torch.randn(512, C, device=device)  # (512, C), fixed
# Normalized with x_test's own statistics:
y_train = F.batch_norm(x_test, None, None, training=True)

bn = torch.nn.BatchNorm1d(C, momentum=m, affine=False).to(device)
gaps, gaps_expected = [], []
for t, xb in enumerate(xs, start=1):
    bn.train()
    bn(xb)  # one training step updates the buffers
    bn.eval()
    gaps.append(rel_gap(bn(x_test), y_train))
    # The expected running statistics, the same in every channel:
    mean_t = mu + (0.0 - mu) * (1 - m) ** t
    var_t = sigma**2 + (1.0 - sigma**2) * (1 - m) ** t
    y_expected = (x_test - mean_t) / (var_t + bn.eps) ** 0.5  # (512, C)
    gaps_expected.append(rel_gap(y_expected, y_train))

print(f"relative train/eval gap: step 1 {gaps[0]:.3f}, step {Nt} {gaps[-1]:.4f} "
      f"({gaps[0] / gaps[-1]:.0f}x smaller)")
assert gaps[-1] < gaps[0] / 10, "the eval output should approach the training output"

fig, ax = plt.subplots()
ax.semilogy(steps.cpu(), gaps, label="BatchNorm1d, momentum 0.1")
ax.semilogy(steps.cpu(), gaps_expected, "k--", lw=1,
            label="with the expected running stats")
ax.set_xlabel("training step (batches seen)")
ax.set_ylabel("‖eval − train‖ / ‖train‖ on x_test")
ax.set_title(f"The train/eval gap shrinks {gaps[0] / gaps[-1]:.0f}x, "
             "then stalls at a noise floor")
ax.legend()
plt.show()


# %%
# Proof: the channel average follows the closed form
# --------------------------------------------------
# Within 5 standard errors of it at every step. For the variance the
# target is exactly :math:`\sigma^2` because the update uses the unbiased batch
# variance. The standard error uses the *stationary* variance of the
# moving average, :math:`m / (2 - m)` times the variance of one batch statistic
# (:math:`\sigma^2 / B` for the mean, :math:`2 \sigma^4 / (B - 1)` for the unbiased
# variance), divided by ``C`` replicates. Before convergence fewer batches have entered
# the average, and its variance is lower, so this bound is conservative.
def expected(start, target, m, steps):
    """E[running statistic] after each of `steps` (Nt,); (Nt,)."""
    return target + (start - target) * (1 - m) ** steps


# %%
s_d = steps.to(device)  # (Nt,)
for m, (running_mean, running_var) in history.items():
    se_mean = (m / (2 - m) * sigma**2 / B / C) ** 0.5
    se_var = (m / (2 - m) * 2 * sigma**4 / (B - 1) / C) ** 0.5
    z_mean = (running_mean.mean(dim=1) - expected(0.0, mu, m, s_d)).abs() / se_mean
    z_var = (running_var.mean(dim=1) - expected(1.0, sigma**2, m, s_d)).abs() / se_var
    print(f"momentum {m:4}: farthest from the closed form in {Nt} steps: "
          f"{z_mean.max():.2f} SE (mean), {z_var.max():.2f} SE (var)")
    assert z_mean.max() < 5 and z_var.max() < 5, f"momentum {m}: off the closed form"


# %%
# Proof: the running variance settles at σ², not at the biased value
# ------------------------------------------------------------------
# The same figure for ``running_var``, which starts at 1 and settles at
# :math:`\sigma^2 = 9`, not at the biased :math:`(B - 1) / B \cdot 9`: the unbiased
# update has no bias to leave behind (the closed-form check above asserts it).
def plot_convergence(ax, runs_by_m, start, target):
    """One channel, the channel average and the closed form, per momentum m.

    runs_by_m: {m: (Nt, C) tensor}, the buffer after each of Nt steps.
    """
    for m, runs in runs_by_m.items():
        runs = runs.cpu()  # (Nt, C)
        steps = torch.arange(1, runs.shape[0] + 1)  # (Nt,)
        (line,) = ax.plot(steps, runs.mean(dim=1), label=f"momentum {m}")
        ax.plot(steps, runs[:, 0], color=line.get_color(), alpha=0.3, lw=0.8)
        ax.plot(steps, target + (start - target) * (1 - m) ** steps, "k--", lw=1)
        t_m = round(1 / m)
        ax.plot(t_m, target + (start - target) * (1 - m) ** t_m, "ko", ms=4)
    ax.plot([], [], color="gray", alpha=0.4, label="one channel")
    ax.plot([], [], "k--", lw=1, label="closed form")
    ax.plot([], [], "ko", ms=4, label="step 1 / momentum")
    ax.axhline(target, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training step (batches seen)")
    ax.legend(fontsize="small")


# %%
fig, ax = plt.subplots()
plot_convergence(ax, {m: history[m][1] for m in momenta}, 1.0, sigma**2)
ax.set_ylabel("running_var")
ax.set_title(f"running_var reaches σ² = {sigma**2:g} in about 1/momentum steps")
plt.show()

