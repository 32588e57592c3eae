"""The small model of the torch.compile tests, and a backend that records what dynamo traced."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._guards
from torch import nn
from torch._dynamo.utils import counters

import vinlens
from vinlens.health import TrainingMonitor

VINLENS_DIR = Path(vinlens.__file__).resolve().parent
PATHS = ("<root>", "enc", "mid", "mid.lin", "head")
STEPS = 8
PLANT = 7


class Mid(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("gate", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.gate


class Net(nn.Module):
    """enc -> mid (lin times a gate buffer: fill it with NaN to plant a fault) -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.mid = Mid()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mid(torch.relu(self.enc(x)))))


class TracedCode:
    """A dynamo backend that records the file of every frame dynamo traced into each graph
    (the compiled frame and every function it inlined), then hands the graph to ``inner``.
    """

    def __init__(self, inner: Callable[..., Any] | str) -> None:
        self.inner = torch._dynamo.lookup_backend(inner) if isinstance(inner, str) else inner
        self.files: list[set[str]] = []  # one set per graph

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        codes = torch._guards.TracingContext.get_traced_code() or []
        self.files.append({str(Path(code.co_filename).resolve()) for code in codes})
        return self.inner(gm, example_inputs)

    def traced(self) -> set[str]:
        return set().union(*self.files)

    def vinlens_files(self) -> set[str]:
        """Traced files of the vinlens package (must stay empty)."""
        return {f for f in self.traced() if Path(f).is_relative_to(VINLENS_DIR)}


def train_planted(
    style: str, monitored: bool, backend: object, device: str = "cpu"
) -> tuple[nn.Module, nn.Module, TrainingMonitor | None, int]:
    """``STEPS`` SGD steps on ``device``, NaN planted in ``mid`` before step ``PLANT``;
    ``style`` "eager", "wrap" (``torch.compile(model)``) or "inplace" (``model.compile()``):
    (model, called, monitor, graphs)."""
    torch.manual_seed(0)
    model = Net().to(device)
    called: nn.Module = model
    if style == "wrap":
        called = torch.compile(model, backend=backend)
    elif style == "inplace":
        model.compile(backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8).to(device)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = called(x).square().mean()
        loss.backward()
        return loss

    monitor = TrainingMonitor(called, every=3, on_nonfinite="record") if monitored else None
    for index in range(STEPS):
        if index == PLANT:
            model.mid.gate.fill_(float("nan"))
        if monitor is not None:
            monitor.run_step(step)
        else:
            step()
        if index < PLANT:
            optimizer.step()
    return model, called, monitor, int(counters["stats"]["unique_graphs"])
