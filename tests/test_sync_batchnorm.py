"""Synchronized BatchNorm across two real processes equals BatchNorm on the whole batch.

The page gallery/normalization/plot_09_sync_batchnorm.py proves the algebra with the
ranks simulated in one process; this test runs it for real: two processes started with
torch.multiprocessing (start method "spawn"), a torch.distributed process group with the
gloo backend on 127.0.0.1 (a free port), each process holding half of a batch.

nn.SyncBatchNorm cannot be used here: in torch 2.13, when a process group is initialized
and the module is in training mode, its forward raises ValueError ("SyncBatchNorm
expected input tensor to be on GPU or XPU or ...") for an input on the CPU (see
torch/nn/modules/batchnorm.py). The test asserts that refusal, then writes the
all-reduce out with torch.distributed: each rank all-reduces (sum) its count, sum and
sum of squares per channel, normalizes its half with the global mean and biased
variance, and updates the running variance with the unbiased one (N - 1, N the global
count). The forward all-reduce is the differentiable one of
torch.distributed.nn.functional, so the gradient with respect to each rank's input
includes the other rank's contribution through the shared statistics; weight and bias
gradients are all-reduced (summed) afterwards: the gradient of the loss summed over the
whole batch (DistributedDataParallel sums and then divides by the number of ranks).

Asserted against nn.BatchNorm2d on the whole batch in one process, in float64 at default
tolerances: the concatenated outputs, running_mean, running_var, the concatenated input
gradients, the summed weight and bias gradients; and that per-rank BatchNorm differs.
Runs in 4-10 s (two fresh interpreters import torch; the all-reduces take
milliseconds). Every rank destroys its process group, and the processes are killed if
they outlive a deadline, so the test cannot hang.
"""

import datetime
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
B_RANK, C, H, W = 3, 4, 5, 5  # samples per rank, channels, spatial dims
EPS, MOMENTUM = 1e-5, 0.1
DEADLINE_S = 60  # the whole two-process run; measured 4-10 s on 2 busy cores


def make_data():
    """The whole batch (rank r's half has mean 2 r), affine, upstream grad; float64."""
    g = torch.Generator().manual_seed(0)
    halves = [2.0 * r + torch.randn(B_RANK, C, H, W, generator=g, dtype=torch.float64)
              for r in range(WORLD)]
    x = torch.cat(halves)  # (WORLD * B_RANK, C, H, W)
    weight = 1 + torch.randn(C, generator=g, dtype=torch.float64)
    bias = torch.randn(C, generator=g, dtype=torch.float64)
    grad_out = torch.randn(x.shape, generator=g, dtype=torch.float64)
    return x, weight, bias, grad_out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, port, out_dir):
    import torch.distributed.nn.functional as dist_fn

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=30))
    try:
        x, weight, bias, grad_out = make_data()
        part = slice(rank * B_RANK, (rank + 1) * B_RANK)
        x_local = x[part].clone().requires_grad_(True)  # (B_RANK, C, H, W)

        # nn.SyncBatchNorm refuses CPU tensors (see the module docstring).
        sync = torch.nn.SyncBatchNorm(C).to(torch.float64)
        try:
            sync(x_local)
            refusal = ""
        except ValueError as err:
            refusal = str(err)

        w = weight.clone().requires_grad_(True)
        b = bias.clone().requires_grad_(True)
        dims = [0, 2, 3]
        count = torch.full((C,), x_local.numel() // C, dtype=torch.float64)
        stats = torch.stack([count, x_local.sum(dim=dims), (x_local**2).sum(dim=dims)])
        n, s, q = dist_fn.all_reduce(stats)  # (3, C) summed over the ranks
        mean = s / n  # (C,)
        var = q / n - mean**2  # (C,), biased
        shape = (1, C, 1, 1)
        z = (x_local - mean.view(shape)) / torch.sqrt(var.view(shape) + EPS)
        y = z * w.view(shape) + b.view(shape)  # (B_RANK, C, H, W)
        (y * grad_out[part]).sum().backward()
        grads = torch.stack([w.grad, b.grad])  # (2, C), this rank's share
        dist.all_reduce(grads)  # summed over the ranks (DDP would then divide by WORLD)
        with torch.no_grad():
            running_mean = MOMENTUM * mean  # from the initial 0
            running_var = (1 - MOMENTUM) + MOMENTUM * var * n / (n - 1)  # from 1
        torch.save({"y": y.detach(), "x_grad": x_local.grad, "grads": grads,
                    "running_mean": running_mean, "running_var": running_var,
                    "refusal": refusal}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_processes_equal_whole_batch(tmp_path):
    context = mp.start_processes(worker, args=(free_port(), str(tmp_path)),
                                 nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not context.join(timeout=1):  # raises if a rank failed
            if time.monotonic() > deadline:
                pytest.fail(f"the two ranks did not finish within {DEADLINE_S} s")
    finally:
        for p in context.processes:
            if p.is_alive():
                p.kill()
                p.join()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]

    for r in ranks:
        assert "expected input tensor to be on GPU" in r["refusal"], r["refusal"]

    x, weight, bias, grad_out = make_data()
    x = x.clone().requires_grad_(True)
    bn = torch.nn.BatchNorm2d(C, eps=EPS, momentum=MOMENTUM, dtype=torch.float64)
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    y = bn(x)
    (y * grad_out).sum().backward()

    torch.testing.assert_close(torch.cat([r["y"] for r in ranks]), y.detach())
    torch.testing.assert_close(torch.cat([r["x_grad"] for r in ranks]), x.grad)
    for r in ranks:
        torch.testing.assert_close(r["running_mean"], bn.running_mean)
        torch.testing.assert_close(r["running_var"], bn.running_var)
        torch.testing.assert_close(r["grads"], torch.stack([bn.weight.grad,
                                                            bn.bias.grad]))
    # The halves' own statistics are not the batch's: per-rank BatchNorm differs.
    local = torch.nn.BatchNorm2d(C, dtype=torch.float64)
    with torch.no_grad():
        local.weight.copy_(weight)
        local.bias.copy_(bias)
        y_local = torch.cat([local(h) for h in x.detach().split(B_RANK)])
    assert (y_local - y.detach()).abs().max() > 1  # measured 3.5
