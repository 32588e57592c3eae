"""TrainingMonitorWidget: the monitor's records as heatmaps, events and headroom, updated live."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import TrainingMonitor, precision_headroom
from vinlens.widgets import TrainingMonitorWidget
from vinlens.widgets.training_monitor import monitor_payload


class NanBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


class FailsAt(nn.Module):
    """A NaN backward at one known step (counted by forwards of the first run of each step)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step = step
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        self.calls += 1
        out: torch.Tensor = (
            NanBackward.apply(h) if self.calls in (self.step + 1, self.step + 2) else h
        )
        return out


def array(node: dict, dtype: str = "float32") -> np.ndarray:  # type: ignore[type-arg]
    a = node["$array"]
    return np.frombuffer(a["data"], dtype=a["dtype"]).reshape(a["shape"])


def training() -> tuple[nn.Module, TrainingMonitor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), FailsAt(5), nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=2, on_nonfinite="record")
    return model, monitor, torch.randn(3, 4)


def test_the_payload_is_the_monitor_records() -> None:
    model, monitor, x = training()
    for _ in range(8):
        monitor.run_step(lambda: (model.zero_grad(), model(x).square().mean().backward()))
    payload = monitor_payload(monitor)
    grad = array(payload["grad_norm"])
    matrix = monitor.history_matrix("grad_norm")
    assert payload["paths"] == list(matrix.module_paths)
    assert array(payload["steps"], "int32").tolist() == [0, 2, 4, 6]
    np.testing.assert_allclose(grad, matrix.values.astype(np.float32))
    np.testing.assert_allclose(
        array(payload["std"]), monitor.history_matrix("std").values.astype(np.float32)
    )
    assert [e["step"] for e in payload["events"]] == [5]
    assert payload["events"][0]["origin"]["module_path"] == "2"
    assert payload["steps_run"] == 8 and payload["every"] == 2


def test_live_updates_are_throttled_and_events_sent_at_once() -> None:
    model, monitor, x = training()
    widget = TrainingMonitorWidget(monitor, interval=30.0)
    sent: list[int] = []
    widget.observe(lambda change: sent.append(change["new"]["steps_run"]), names="history")
    for _ in range(5):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    assert sent == []  # sampled steps 0, 2, 4 within the interval: one timer pending
    monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))  # step 5: event
    assert sent == [6]
    assert widget.history["events"][0]["origin"]["module_path"] == "2"
    monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))  # step 6: sampled
    assert sent == [6]
    widget.refresh()
    assert sent == [6, 7]
    widget.close()
    for _ in range(2):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    assert sent == [6, 7]  # no longer listening


def test_a_pending_update_is_flushed_after_the_interval() -> None:
    model, monitor, x = training()
    widget = TrainingMonitorWidget(monitor, interval=0.2)
    monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))  # within 0.2 s
    deadline = time.monotonic() + 5
    while widget.history["steps_run"] != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert widget.history["steps_run"] == 1
    widget.close()


def test_precision_column_aligned_to_the_modules() -> None:
    model, monitor, x = training()
    report = precision_headroom(model, lambda: model(x * 1e4))
    widget = TrainingMonitorWidget(monitor, precision=report)
    headroom = array(widget.precision["headroom"], "float64")
    lowest = report.lowest_headroom()
    assert headroom.tolist() == pytest.approx([lowest[p] for p in monitor.module_paths])
    assert widget.precision["dtype"] == "torch.float16"
    widget.show_precision(None)
    assert widget.precision == {}
    with pytest.raises(TypeError, match="PrecisionReport"):
        widget.show_precision("nope")
    widget.close()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="TrainingMonitor"):
        TrainingMonitorWidget(nn.Linear(2, 2))
    monitor = TrainingMonitor(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="interval"):
        TrainingMonitorWidget(monitor, interval=-1)
    with pytest.raises(TypeError, match="PrecisionReport"):
        TrainingMonitorWidget(monitor, precision=3)
    with pytest.raises(TypeError):
        TrainingMonitorWidget(monitor, colour="red")
    widget = TrainingMonitorWidget(monitor)
    assert widget.history["steps_run"] == 0 and widget.history["events"] == []
    assert array(widget.history["grad_norm"]).shape == (1, 0)
    widget.close()
