"""A training script for the run-log tests: a NaN planted at a known step and module.

Run as ``python runlog_train.py LOG_DIR --steps N --nan-step K [--sleep S] [--dump F]``.
The batch of step ``K`` holds a value past ``SPIKE``; module ``"1"`` (a :class:`Spike`)
turns its backward into NaN for such an input, so the origin is module ``"1"``, call 0,
parameter ``"1.weight"``. Steps whose gradients are not finite skip the optimizer step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn

SPIKE = 100.0


class _Poison(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, threshold: float) -> torch.Tensor:
        ctx.poison = bool((x.abs() > threshold).any())
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return (grad * float("nan") if ctx.poison else grad), None


class Spike(nn.Module):
    """Scales its input; its backward is NaN when an input is past ``threshold``."""

    def __init__(self, width: int, threshold: float = SPIKE) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Poison.apply(x * self.weight, self.threshold)


def build_model(width: int = 8, seed: int = 0, spike: float = SPIKE) -> nn.Sequential:
    """The trained model; ``spike`` above the planted value builds one whose backward stays
    finite (a replay that does not reproduce the NaN)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(4, width), Spike(width, spike), nn.Tanh(), nn.Dropout(0.25), nn.Linear(width, 1)
    )


def batch(step: int, nan_step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(16, 4, generator=generator)
    if step == nan_step:
        x[3, 1] = 1e6
    return x


def main(argv: list[str]) -> None:
    from vinlens.health import TrainingMonitor

    parser = argparse.ArgumentParser()
    parser.add_argument("log_dir")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--nan-step", type=int, default=37)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--dump")
    parser.add_argument("--storage-options", default="{}")
    parser.add_argument("--replay-max-bytes", type=int, default=256 << 20)
    args = parser.parse_args(argv)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TrainingMonitor(
        model,
        every=args.every,
        on_nonfinite="record",
        log_dir=args.log_dir,
        storage_options=json.loads(args.storage_options) or None,
        replay_max_bytes=args.replay_max_bytes,
    ) as monitor:
        for step in range(args.steps):
            x = batch(step, args.nan_step)

            def step_fn() -> torch.Tensor:
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()  # noqa: B023 (run within the iteration)
                loss.backward()
                return loss

            before = len(monitor.events)
            monitor.run_step(step_fn)
            if len(monitor.events) == before:
                optimizer.step()
            if args.sleep:
                time.sleep(args.sleep)
            print(step, flush=True)
    if args.dump:
        fields = ("grad_norm", "mean", "std", "max", "nan_count")
        matrices = monitor.history_matrices(fields)
        np.savez(
            args.dump,
            steps=np.asarray(matrices[0].steps),
            **{m.field: m.values for m in matrices},
        )


if __name__ == "__main__":
    main(sys.argv[1:])
