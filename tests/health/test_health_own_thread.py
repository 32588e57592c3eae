"""Hooks armed by a sampled monitor step or by precision_headroom count only the forwards of
the thread that runs them; a second concurrent run_step on one monitor is refused."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from vinlens.health import TrainingMonitor, precision_headroom
from vinlens.hooks import leftover_hooks


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 2))


def _forward_on_another_thread(model: nn.Module, x: torch.Tensor, times: int) -> None:
    """Forward ``model`` ``times`` times on a second thread, finished before returning."""

    def serve() -> None:
        with torch.no_grad():
            for _ in range(times):
                model(x)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_precision_headroom_ignores_another_threads_forwards() -> None:
    model = _model()
    x = torch.randn(4, 8)

    def run() -> None:
        model(x)
        _forward_on_another_thread(model, x, 5)  # while the hooks are armed

    report = precision_headroom(model, run)
    assert [(r.module_path, r.call_index) for r in report.modules] == [
        ("0", 0),
        ("1", 0),
        ("2", 0),
        ("<root>", 0),
    ]
    assert leftover_hooks(model.modules()) == []


def test_a_sampled_step_ignores_another_threads_forwards() -> None:
    model = _model()
    monitor = TrainingMonitor(model, every=1)
    x = torch.randn(6, 8)

    def step() -> None:
        model.zero_grad()
        model(x).sum().backward()
        _forward_on_another_thread(model, x, 3)

    for _ in range(2):
        monitor.run_step(step)
    history = monitor.history
    assert history.samples == 2
    assert history.modules["1"].output_total.count == 2 * 6 * 6  # the two steps' only
    assert history.modules["<root>"].output_total.count == 2 * 6 * 2
    assert leftover_hooks(model.modules()) == []


def test_concurrent_run_step_is_refused() -> None:
    model = _model()
    monitor = TrainingMonitor(model, every=1)
    x = torch.randn(6, 8)
    inside, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def slow_step() -> None:
        model.zero_grad()
        model(x).sum().backward()
        inside.set()
        release.wait(timeout=30)

    def first() -> None:
        try:
            monitor.run_step(slow_step)
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(timeout=30)
    try:
        with pytest.raises(RuntimeError, match="run_step is already running"):
            monitor.run_step(lambda: None)
    finally:
        release.set()
        thread.join(timeout=30)
    assert not thread.is_alive() and failures == []
    assert monitor.step == 1 and monitor.history.samples == 1
    monitor.run_step(slow_step)  # free again once the first step finished
    assert monitor.step == 2
    assert leftover_hooks(model.modules()) == []


def test_run_step_inside_its_own_step_is_refused() -> None:
    monitor = TrainingMonitor(_model(), every=1)
    with pytest.raises(RuntimeError, match="one monitor runs one step at a time"):
        monitor.run_step(lambda: monitor.run_step(lambda: None))
    monitor.run_step(lambda: None)
    assert monitor.step == 2
