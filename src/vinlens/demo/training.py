"""A training script that blows up at a known step, writing a run log (the tour's part 13).

``python -m vinlens.demo.training LOG_DIR`` trains :func:`build_model` under a
:class:`~vinlens.health.TrainingMonitor` with ``log_dir=LOG_DIR``. Its ``RMSNorm`` has the
epsilon outside the square root; at step :data:`DARK_STEP` one sample is all zeros (a
camera that went dark), whose ``sqrt`` backward is infinite: the step's gradients are NaN,
the monitor names ``encoder.1`` and the script stops with
:class:`~vinlens.health.NonFiniteGradientError` (exit status 1), leaving the log and the
step's replay bundle behind. Any process can then ``open_run(LOG_DIR)`` and
``load_replay(DARK_STEP, model=build_model())``; from a shell, ``vinlens run replay LOG_DIR
--step 120 --model vinlens.demo.training.build_model``.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import torch
from torch import nn

__all__ = ["DARK_STEP", "RMSNorm", "build_model", "main"]

#: The step whose batch holds an all-zero sample.
DARK_STEP = 120


class RMSNorm(nn.Module):
    """RMS normalisation with its epsilon outside the square root: the bug."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)


def build_model() -> nn.Sequential:
    """The trained architecture, with the weights of step 0 (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            encoder=nn.Sequential(nn.Linear(16, 64, bias=False), RMSNorm(64), nn.ReLU()),
            head=nn.Linear(64, 4),
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Train until the dark step; returns the exit status (1: the run blew up)."""
    from vinlens.health import NonFiniteGradientError, TrainingMonitor

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m vinlens.demo.training LOG_DIR", file=sys.stderr)
        return 2
    model = build_model()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(200, 8, 16, generator=generator) * 2e4  # raw sensor units
    targets = torch.randint(0, 4, (200, 8), generator=generator)
    inputs[DARK_STEP, 3] = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    with TrainingMonitor(model, every=10, log_dir=args[0]) as monitor:
        for step in range(len(inputs)):

            def train_step() -> torch.Tensor:
                optimizer.zero_grad()
                loss: torch.Tensor = loss_fn(model(inputs[step]), targets[step])  # noqa: B023
                torch.autograd.backward(loss)
                return loss

            try:
                monitor.run_step(train_step)
            except NonFiniteGradientError as error:
                print(error, file=sys.stderr)
                return 1
            optimizer.step()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
