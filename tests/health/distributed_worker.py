"""One rank of the distributed monitor tests: ``python distributed_worker.py SCENARIO RANK
WORLD PORT OUT``; writes its findings as JSON to OUT.

``VINLENS_TEST_DIST_BACKEND=nccl`` runs the DDP scenarios with NCCL, rank ``r`` on
``cuda:r`` (the default is gloo on the CPU)."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


class Planted(nn.Module):
    """log(x - shift): NaN on rank 1 only (its shift is large)."""

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - self.shift)


BACKEND = os.environ.get("VINLENS_TEST_DIST_BACKEND", "gloo")


def device(rank: int) -> torch.device:
    return torch.device("cuda", rank) if BACKEND == "nccl" else torch.device("cpu")


def model(rank: int) -> nn.Sequential:
    torch.manual_seed(0)
    inner = nn.Sequential()
    inner.add_module("enc", nn.Linear(4, 8))
    inner.add_module("mid", Planted(100.0 if rank == 1 else -100.0))
    inner.add_module("dec", nn.Linear(8, 2))
    return inner


class Bumped(nn.Linear):
    """A linear layer whose output can be shifted by ``bump`` (a planted forward change)."""

    bump = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.bump


def diverge(rank: int) -> nn.Module:
    """``VINLENS_TEST_PLANT`` on rank 1 only, logged to ``VINLENS_TEST_LOG_DIR``: ``"none"``,
    ``"data"`` (rank 1's batch of step 3 changed) or ``"forward"`` (``mid``'s output bumped
    from step 2); 5 SGD steps of DDP, every step sampled."""
    from vinlens.health import TrainingMonitor

    plant, log_dir = os.environ["VINLENS_TEST_PLANT"], os.environ["VINLENS_TEST_LOG_DIR"]
    torch.manual_seed(0)
    inner = nn.Sequential()
    inner.add_module("enc", nn.Linear(4, 8))
    inner.add_module("act", nn.Tanh())
    inner.add_module("mid", Bumped(8, 8))
    inner.add_module("dec", nn.Linear(8, 2))
    inner = inner.to(device(rank))
    ddp = nn.parallel.DistributedDataParallel(
        inner, device_ids=[rank] if BACKEND == "nccl" else None
    )
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with TrainingMonitor(ddp, every=1, log_dir=log_dir) as monitor:
        for index in range(5):
            x = torch.rand(3, 4, generator=torch.Generator().manual_seed(10 * index + rank))
            if rank == 1 and plant == "data" and index == 3:
                x[0, 0] += 0.25
            if rank == 1 and plant == "forward" and index == 2:
                inner.mid.bump = 1e-3
            x = x.to(device(rank))

            def step(x: torch.Tensor = x) -> torch.Tensor:
                optimizer.zero_grad(set_to_none=True)
                loss = ddp(x).square().mean()
                loss.backward()
                return loss

            monitor.run_step(step)
            optimizer.step()
    return ddp


def main() -> None:
    scenario, rank, world, port, out = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if BACKEND == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(BACKEND, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    from vinlens.health import NonFiniteGradientError, TrainingMonitor
    from vinlens.health.monitor import _distributed as vdist
    from vinlens.hooks import leftover_hooks

    inner = model(rank).to(device(rank))
    ids = [rank] if BACKEND == "nccl" else None
    ddp = nn.parallel.DistributedDataParallel(inner, device_ids=ids)
    torch.manual_seed(1 + rank)
    x = torch.rand(3, 4).to(device(rank))

    def step() -> torch.Tensor:
        ddp.zero_grad(set_to_none=True)
        loss = ddp(x).sum()
        loss.backward()
        return loss

    found: dict[str, object] = {"rank": rank}
    if scenario == "all":
        monitor = TrainingMonitor(ddp, every=1)
        found["paths"] = list(monitor.module_paths)
        try:
            monitor.run_step(step)
            found["raised"] = False
        except NonFiniteGradientError as error:
            found["raised"] = True
            found["message"] = str(error)
            event = error.event
            found["made_on_ranks"] = list(event.made_on_ranks)
            found["event_rank"] = event.rank
            found["origin"] = None if event.origin is None else event.origin.module_path
    elif scenario == "refused":
        vdist.HANDSHAKE_TIMEOUT_S = 2.0
        if rank == 0:
            try:
                TrainingMonitor(ddp)
                found["refused"] = False
            except RuntimeError as error:
                found["refused"] = str(error)
            local = TrainingMonitor(ddp, ranks="local", on_nonfinite="record")
            local.run_step(step)
            event = local.events[0]
            found["made_on_ranks"] = list(event.made_on_ranks)
            found["origin"] = None if event.origin is None else event.origin.module_path
        else:
            step()  # the peer trains unmonitored
        step()  # and both ranks keep training together afterwards
        found["trained_on"] = True
    elif scenario == "diverge":
        ddp = diverge(rank)
    elif scenario == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fsdp = model(0)  # finite on every rank
        reference = model(0)
        fully_shard(fsdp.enc)
        fully_shard(fsdp.dec)
        fully_shard(fsdp)
        found["fsdp_hooks"] = leftover_hooks(list(fsdp.modules()))  # FSDP's own
        torch.manual_seed(7)
        full = torch.rand(2 * world, 4)  # the same global batch on every rank
        mine = full[2 * rank : 2 * rank + 2]

        def sharded_step() -> torch.Tensor:
            fsdp.zero_grad(set_to_none=True)
            loss = fsdp(mine).mean()
            loss.backward()
            return loss

        def reference_step() -> torch.Tensor:
            reference.zero_grad(set_to_none=True)
            loss = reference(full).mean()  # the mean over ranks of each rank's mean
            loss.backward()
            return loss

        monitor = TrainingMonitor(fsdp, every=1, on_nonfinite="record")
        plain = TrainingMonitor(reference, every=1)
        monitor.run_step(sharded_step)
        plain.run_step(reference_step)
        found["norms"] = {p: monitor.history.modules[p].grad_norm[0] for p in ("enc", "dec")}
        found["reference"] = {p: plain.history.modules[p].grad_norm[0] for p in ("enc", "dec")}
        found["refused_local"] = False
        try:
            TrainingMonitor(fsdp, ranks="local")
        except ValueError as error:
            found["refused_local"] = str(error)
        if rank == 1:  # a NaN in one element of rank 1's shard of dec.weight only
            with torch.no_grad():
                fsdp.dec.weight.to_local()[0, 0] = float("nan")
        monitor.run_step(sharded_step)
        found["events"] = [list(e.made_on_ranks) for e in monitor.events]
        ddp = fsdp
    dist.barrier()
    found["leftover"] = leftover_hooks(list(ddp.modules()))
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
