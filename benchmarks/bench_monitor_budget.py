"""The overhead budget against the cost it promises: ``TrainingMonitor(every=1, budget=b)``.

A monitor sampling every step (``every=1``) costs a light CNN 1.3x or more; with
``budget=b`` it stretches its sampling interval. This prints, for each loop run side by
side in the same repetitions (interleaved, shuffled each time, best main-thread CPU time of the
repetitions: on a shared machine other work only ever adds time; torch on one thread): the plain loop, ``every=1`` without a budget, and
``every=1, budget=b``; the ratios of the monitored loops to the plain one; the monitor's
own measured share (``monitor.overhead``) and how many steps it sampled. Target: the
budgeted loop's ratio <= 1 + b plus noise, and ``overhead`` <= b once the run is long
enough that the first sample (taken before any cost is known) is amortised, provided the
per-step check alone (one fused gradient norm) costs less than ``b``: on small batches of a
parameter-heavy model it does not, and no sampling interval can help (the printed
``overhead`` then converges to the check's share).

A step is ``zero_grad``, forward, loss, backward and an SGD step on one batch.

    python benchmarks/bench_monitor_budget.py [--model mobilenet_v3_large] [--steps 200]
        [--budget 0.02] [--repetitions 3] [--size 128] [--batch 8]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from torch import nn

from cnn_models import MODELS
from vinlens.health import TrainingMonitor


def loop(
    model: nn.Module, batch: torch.Tensor, steps: int, monitor: TrainingMonitor | None
) -> float:
    target = torch.randint(0, 10, (batch.shape[0],))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(batch)[:, :10], target)
        loss.backward()
        return loss

    start = time.thread_time()
    for _ in range(steps):
        if monitor is None:
            step()
        else:
            monitor.run_step(step)
        optimizer.step()
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="mobilenet_v3_large", choices=sorted(MODELS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--budget", type=float, default=0.02)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = MODELS[args.model]()
    model.train()
    batch = torch.randn(args.batch, 3, args.size, args.size)
    loop(model, batch, 3, None)  # warm-up
    best: dict[str, float] = {}
    reports: dict[str, tuple[float, int]] = {}
    variants = ["plain", "every=1", f"every=1, budget={args.budget}"]
    for _ in range(args.repetitions):
        random.shuffle(variants)
        for name in variants:
            monitor = None
            if name != "plain":
                budget = None if name == "every=1" else args.budget
                monitor = TrainingMonitor(model, every=1, budget=budget)
            seconds = loop(model, batch, args.steps, monitor)
            best[name] = min(best.get(name, seconds), seconds)
            if monitor is not None:
                reports[name] = (monitor.overhead, monitor.history.samples)
    plain = best["plain"]
    print(f"{args.model}, {args.steps} steps, batch {args.batch} x {args.size} x {args.size}")
    print(f"  plain                      {plain:8.2f} s")
    for name in sorted(reports):
        overhead, samples = reports[name]
        print(
            f"  {name:26s} {best[name]:8.2f} s  {best[name] / plain:6.3f}x  "
            f"overhead {overhead:.4f}  sampled {samples}/{args.steps}"
        )


if __name__ == "__main__":
    main()
