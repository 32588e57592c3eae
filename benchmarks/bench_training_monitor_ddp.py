"""Cost of TrainingMonitor on a 2-process DDP loop (gloo, CPU, 127.0.0.1).

Target: monitored steps at ``every=100`` / plain DDP steps <= 1.05x. Each rank runs blocks
of 100 plain steps and 100 monitored steps (zero_grad, forward, loss, backward; the
gradient all-reduce included, the optimizer step left out), alternating, on one torch
thread; the ratio is of the best block's wall time on rank 0 (collectives wait, so CPU
time would hide them).

    python benchmarks/bench_training_monitor_ddp.py [--blocks 5] [--width 512]
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def run(rank: int, world: int, port: int, blocks: int, width: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    from vinlens.health import TrainingMonitor

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(*layers, nn.Linear(width, 10)))
    x, y = torch.randn(32, width), torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> torch.Tensor:
        ddp.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        return loss

    monitor = TrainingMonitor(ddp, every=100)

    def plain_block() -> None:
        for _ in range(100):
            step()

    def monitored_block() -> None:
        for _ in range(100):
            monitor.run_step(step)

    plain_block()  # warm-up
    times: dict[str, list[float]] = {"plain": [], "monitored": []}
    for index in range(blocks):
        order = [("plain", plain_block), ("monitored", monitored_block)]
        for name, block in order if index % 2 == 0 else order[::-1]:
            dist.barrier()
            start = time.perf_counter()
            block()
            times[name].append(time.perf_counter() - start)
    if rank == 0:
        plain, monitored = min(times["plain"]), min(times["monitored"])
        ratio = monitored / plain
        print(
            f"DDP 2 x gloo, MLP width {width}, batch 32, {blocks} blocks of 100 steps: plain "
            f"{plain * 10:.2f} ms/step, monitored every=100 {monitored * 10:.2f} ms/step: "
            f"{ratio:.3f}x (<= 1.05x {'PASS' if ratio <= 1.05 else 'MISS'})"
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port, args.blocks, args.width), nprocs=2, join=True)


if __name__ == "__main__":
    main()
