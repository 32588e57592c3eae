"""TrainingMonitorWidget: the monitor's records as heatmaps, events and headroom, updated live."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from health_models import NanBackward
from torch import nn

from vinlens.health import EVENTS_KEPT, TrainingMonitor, precision_headroom
from vinlens.widgets import TrainingMonitorWidget
from vinlens.widgets.training_monitor import monitor_payload
from vinlens.widgets.training_monitor_payload import series_payload


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


def sent_messages(widget: TrainingMonitorWidget) -> list[dict]:  # type: ignore[type-arg]
    """The custom messages the widget sends from now on (``{"kind": ...}`` contents)."""
    messages: list[dict] = []  # type: ignore[type-arg]
    send = widget.send

    def record(content: dict, buffers: object = None) -> None:  # type: ignore[type-arg]
        messages.append(content)
        send(content, buffers=buffers)  # type: ignore[arg-type]

    widget.send = record  # type: ignore[method-assign]
    return messages


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
    assert payload["steps_run"] == 8 and payload["every"] == 2
    assert payload["samples"] == 4 and payload["step_range"] == [0, 6]
    assert (payload["events_kept"], payload["events_total"]) == (1, 1)
    assert payload["last_nonfinite_step"] == 5
    widget = TrainingMonitorWidget(monitor)
    assert [e["step"] for e in widget.events] == [5]
    assert widget.events[0]["origin"]["module_path"] == "2"
    assert widget.events[0]["origin"]["entered_nonfinite"] is False
    widget.close()


def test_live_updates_are_throttled_and_events_sent_at_once() -> None:
    model, monitor, x = training()
    widget = TrainingMonitorWidget(monitor, interval=30.0)
    sent: list[int] = []
    widget.observe(lambda change: sent.append(change["new"]["steps_run"]), names="history")
    for _ in range(5):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    messages = sent_messages(widget)
    assert sent == []  # sampled steps 0, 2, 4 within the interval: one timer pending
    monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))  # step 5: event
    assert sent == []  # the heatmaps wait for the interval; the event went out at once:
    (message,) = [m for m in messages if m.get("kind") == "events"]
    assert message["start"] == 0 and [e["step"] for e in message["events"]] == [5]
    assert message["events"][0]["origin"]["module_path"] == "2"
    monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))  # step 6: sampled
    assert sent == []
    widget.refresh()
    assert sent == [7]
    assert [e["step"] for e in widget.events] == [5]
    assert widget.history["events_total"] == 1
    widget.close()
    for _ in range(2):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    assert sent == [7]  # no longer listening


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
    with pytest.raises(ValueError, match="TrainingRun"):
        TrainingMonitorWidget(monitor, model=nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        TrainingMonitorWidget(monitor, model="net")
    widget = TrainingMonitorWidget(monitor)
    assert widget.history["steps_run"] == 0 and widget.events == []
    assert array(widget.history["grad_norm"]).shape == (1, 0)
    widget.close()


def test_a_nan_flood_sends_each_kept_event_once_and_counts_the_rest() -> None:
    # Issue 30.9: with the widget open, every new event re-sent every event on the training
    # thread. Now a kept event goes out once, alone; past EVENTS_KEPT only counts change.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.fill_(float("nan"))
    monitor = TrainingMonitor(model, every=7, on_nonfinite="record")
    widget = TrainingMonitorWidget(monitor, interval=3600.0)
    training_thread = threading.current_thread()
    on_training_thread: list[dict] = []  # type: ignore[type-arg]
    send = widget._send  # every message to the front end (custom and state) passes here

    def record(msg: dict, buffers: object = None) -> None:  # type: ignore[type-arg]
        # Recorded before the comm decides whether a kernel is there to take it, so the
        # test does not depend on which comm an earlier test left installed.
        if threading.current_thread() is training_thread:
            on_training_thread.append(msg)
        send(msg, buffers=buffers)

    widget._send = record  # type: ignore[method-assign]
    x = torch.randn(4, 3)
    steps = EVENTS_KEPT + 40
    for _ in range(steps):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    customs = [m["content"] for m in on_training_thread if m.get("method") == "custom"]
    assert [m["start"] for m in customs] == list(range(EVENTS_KEPT))
    assert all(len(m["events"]) == 1 for m in customs)
    assert [m["events"][0]["step"] for m in customs] == list(range(EVENTS_KEPT))
    # No state (history, events) was sent from the training thread: the timer sends it.
    assert [m for m in on_training_thread if m.get("method") != "custom"] == []
    widget.refresh()
    assert len(widget.events) == EVENTS_KEPT
    assert widget.history["events_total"] == steps
    assert widget.history["last_nonfinite_step"] == steps - 1
    assert widget.history["events_kept"] == EVENTS_KEPT
    widget.close()


def test_the_heatmaps_are_thinned_to_the_bound_keeping_every_step_and_its_spikes() -> None:
    from vinlens.health.monitor import HistoryMatrix
    from vinlens.widgets.training_monitor_payload import (
        MAX_HEATMAP_CELLS,
        heatmap_columns,
        heatmap_payload,
    )

    rng = np.random.default_rng(0)
    modules, steps = 1000, 10_000
    values = rng.uniform(1, 2, (modules, steps))
    values[7, 4321] = 1e9  # a spike in the middle of a thinned column
    values[8, 9999] = np.inf  # the last step
    values[9, :] = np.nan  # a module without parameters of its own
    values[10, 5000] = np.nan
    grad = HistoryMatrix(
        "grad_norm", tuple(range(0, 2 * steps, 2)), tuple(map(str, range(modules))), values
    )
    std = HistoryMatrix("std", grad.steps, grad.module_paths, np.ones_like(values))
    payload = heatmap_payload([grad, std])
    g = array(payload["grad_norm"])
    columns = heatmap_columns(modules)
    assert g.shape == (modules, columns) and g.size <= MAX_HEATMAP_CELLS
    first_steps = array(payload["steps"]).astype(np.int64)
    assert first_steps[0] == 0 and len(first_steps) == columns
    assert payload["samples"] == steps and payload["step_range"] == [0, 2 * (steps - 1)]
    # Not truncated: each sampled step is in the column that starts at or before it.
    column = np.searchsorted(first_steps, 2 * 4321, side="right") - 1
    assert g[7, column] == np.float32(1e9) and g[7].max() == np.float32(1e9)
    assert np.isposinf(g[8, -1])
    assert np.isnan(g[9]).all() and not np.isnan(g[10]).any()


def test_a_live_monitor_sends_its_every_step_loss_and_grad_norm_curves() -> None:
    model, monitor, x = training()
    widget = TrainingMonitorWidget(monitor, interval=3600)
    assert widget.series["steps_total"] == 0

    def step() -> torch.Tensor:
        model.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss

    for _ in range(7):
        monitor.run_step(step)
    widget.refresh()
    series = monitor.step_series()
    assert widget.series["steps_total"] == 7 and widget.series["last_step"] == 6
    assert array(widget.series["steps"]).tolist() == list(range(7))
    # Every step, sampled or not, with the loss step_fn returned; the NaN step is flagged.
    np.testing.assert_array_equal(array(widget.series["loss_hi"]), series.loss)
    finite = np.isfinite(series.grad_norm)
    np.testing.assert_array_equal(
        array(widget.series["grad_norm_hi"])[finite], series.grad_norm[finite]
    )
    assert array(widget.series["grad_norm_bad"]).nonzero()[0].tolist() == [5]
    assert widget.series == series_payload(*series)
    widget.close()
