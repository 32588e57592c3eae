"""A NaN flood in record mode (issue 30.9): the first events kept in full, then counts."""

from __future__ import annotations

import torch
from torch import nn

from vinlens.health import EVENTS_KEPT, NonFiniteGradientError, TrainingMonitor


class Counting(nn.Module):
    """Two linear layers that count their forwards (a replayed step runs them again)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.head = nn.Linear(2, 1)
        self.forwards = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        out: torch.Tensor = self.head(self.lin(x))
        return out


def flooded(on_nonfinite: str) -> tuple[Counting, TrainingMonitor]:
    torch.manual_seed(0)
    model = Counting()
    with torch.no_grad():
        model.lin.weight.fill_(float("nan"))  # every step's head gradients are NaN
    return model, TrainingMonitor(model, every=7, on_nonfinite=on_nonfinite)  # type: ignore[arg-type]


def test_record_mode_keeps_the_first_events_and_counts_the_rest_without_replaying() -> None:
    model, monitor = flooded("record")
    x = torch.randn(4, 3)
    steps = EVENTS_KEPT + 150
    forwards = []
    for _ in range(steps):
        before = model.forwards
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
        forwards.append(model.forwards - before)
    events = monitor.events
    assert len(events) == EVENTS_KEPT
    assert [e.step for e in events] == list(range(EVENTS_KEPT))
    assert all(e.origin is not None for e in events)
    assert monitor.nonfinite_count == steps and monitor.last_nonfinite_step == steps - 1
    # A kept event's step ran again under the origin search; a counted one ran once.
    assert min(forwards[:EVENTS_KEPT]) >= 2
    assert set(forwards[EVENTS_KEPT:]) == {1}
    # Sampled steps past the bound still reach the history.
    assert monitor.history_matrix().steps[-1] == (steps - 1) // 7 * 7


def test_raise_mode_past_the_bound_still_names_the_origin_but_keeps_only_counts() -> None:
    model, monitor = flooded("raise")
    x = torch.randn(4, 3)
    errors = []
    for _ in range(EVENTS_KEPT + 3):
        try:
            monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
        except NonFiniteGradientError as error:
            errors.append(error)
    assert len(errors) == EVENTS_KEPT + 3
    assert errors[-1].event.step == EVENTS_KEPT + 2
    assert errors[-1].event.origin is not None
    assert len(monitor.events) == EVENTS_KEPT and monitor.nonfinite_count == EVENTS_KEPT + 3


def test_counts_start_at_zero() -> None:
    monitor = TrainingMonitor(nn.Linear(2, 2))
    assert monitor.nonfinite_count == 0 and monitor.last_nonfinite_step is None
