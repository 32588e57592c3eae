"""The small model of the torch.compile tests, and a backend that records what dynamo traced."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._guards
from torch import nn

import vinlens

VINLENS_DIR = Path(vinlens.__file__).resolve().parent
PATHS = ("<root>", "enc", "mid", "mid.lin", "head")


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
