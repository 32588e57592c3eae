"""One rank of the distributed monitor tests: ``python distributed_worker.py SCENARIO RANK
WORLD PORT OUT``; writes its findings as JSON to OUT."""

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


def model(rank: int) -> nn.Sequential:
    torch.manual_seed(0)
    inner = nn.Sequential()
    inner.add_module("enc", nn.Linear(4, 8))
    inner.add_module("mid", Planted(100.0 if rank == 1 else -100.0))
    inner.add_module("dec", nn.Linear(8, 2))
    return inner


def main() -> None:
    scenario, rank, world, port, out = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    from vinlens.health import NonFiniteGradientError, TrainingMonitor
    from vinlens.health import distributed as vdist
    from vinlens.hooks import leftover_hooks

    inner = model(rank)
    ddp = nn.parallel.DistributedDataParallel(inner)
    torch.manual_seed(1 + rank)
    x = torch.rand(3, 4)

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
    dist.barrier()
    found["leftover"] = leftover_hooks(list(ddp.modules()))
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
