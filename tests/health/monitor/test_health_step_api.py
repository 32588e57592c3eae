"""TrainingMonitor's step-level API (begin_step / end_step / abort_step / monitored_step)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from health_models import RandomFault
from torch import nn

from vinlens.health import MonitoredStep, NonFiniteGradientError, TrainingMonitor
from vinlens.hooks import leftover_hooks


def _model(rate: float = 0.2) -> tuple[nn.Sequential, RandomFault]:
    torch.manual_seed(0)
    fault = RandomFault(rate)
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), fault, nn.Linear(4, 1)), fault


def _train(style: str, steps: int = 24) -> tuple[TrainingMonitor, nn.Module, list[bool]]:
    model, fault = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor = TrainingMonitor(model, every=3, on_nonfinite="record")
    x = torch.randn(5, 4)
    torch.manual_seed(7)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss

    for _ in range(steps):
        calls = len(fault.fired)
        if style == "run_step":
            monitor.run_step(step)
            event = monitor.events[-1] if monitor.events else None
            nonfinite = event is not None and event.step == monitor.step - 1
        elif style == "callbacks":  # as a Lightning / HF callback pair drives it
            monitor.begin_step()
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            nonfinite = monitor.end_step(loss, replay=step) is not None
        else:
            with monitor.monitored_step(replay=step) as handle:
                handle.result = step()
            nonfinite = handle.event is not None
        assert nonfinite == fault.fired[calls]
        if nonfinite:  # replayed once with the same draws
            assert fault.fired[calls:] == [True, True]
        else:
            optimizer.step()
    return monitor, model, fault.fired


@pytest.mark.parametrize("style", ["callbacks", "context"])
def test_begin_end_is_the_same_as_run_step(style: str) -> None:
    reference, reference_model, reference_fired = _train("run_step")
    monitor, model, fired = _train(style)
    assert fired == reference_fired
    assert [e.step for e in monitor.events] == [e.step for e in reference.events] != []
    for event in monitor.events:
        assert event.replayed and event.origin is not None
        assert event.origin.module_path == "2"
    assert monitor.step == reference.step == 24
    ours, theirs = monitor.history_matrix(), reference.history_matrix()
    assert ours.steps == theirs.steps == tuple(range(0, 24, 3))
    np.testing.assert_array_equal(ours.values, theirs.values)
    for mine, other in zip(model.parameters(), reference_model.parameters(), strict=True):
        torch.testing.assert_close(mine, other, rtol=0, atol=0)
    assert leftover_hooks(model.modules()) == []


def test_hooks_are_armed_from_begin_to_end_of_a_sampled_step_only() -> None:
    model, _ = _model(0.0)
    monitor = TrainingMonitor(model, every=2)
    x = torch.randn(3, 4)
    for step in range(4):
        assert monitor.begin_step() == step
        assert (leftover_hooks(model.modules()) != []) == (step % 2 == 0)
        model(x).sum().backward()
        assert monitor.end_step() is None
        assert leftover_hooks(model.modules()) == []
    assert monitor.history.steps == (0, 2)
    assert monitor.history.modules["0"].output_total.count == 2 * 3 * 4


def test_end_step_without_replay_records_an_unreplayed_event() -> None:
    model, fault = _model(1.0)
    x = torch.randn(3, 4)
    monitor = TrainingMonitor(model, every=1, on_nonfinite="record")
    monitor.begin_step()
    model(x).sum().backward()
    event = monitor.end_step()
    assert event is not None and event.step == 0
    assert event.origin is None and not event.replayed
    assert len(fault.fired) == 1  # nothing ran again
    assert monitor.events == (event,)

    raising = TrainingMonitor(model, every=1)
    raising.begin_step()
    model(x).sum().backward()
    with pytest.raises(NonFiniteGradientError, match="not replayed") as raised:
        raising.end_step()
    assert raised.value.event.replayed is False
    assert leftover_hooks(model.modules()) == []
    assert raising.begin_step() == 1  # free again after the raise
    raising.abort_step()


def test_a_failure_between_begin_and_end_never_leaves_hooks() -> None:
    model, _ = _model(0.0)
    monitor = TrainingMonitor(model, every=1)
    x = torch.randn(3, 4)

    # The step raised and the loop says so: abort_step removes the hooks.
    monitor.begin_step()
    assert leftover_hooks(model.modules()) != []
    assert monitor.abort_step() is True
    assert leftover_hooks(model.modules()) == []
    assert monitor.abort_step() is False

    # The loop never said so: the next begin_step refuses, clearly, and cleans up.
    monitor.begin_step()
    with pytest.raises(RuntimeError, match="step 1 is still in progress on this thread"):
        monitor.begin_step()
    assert leftover_hooks(model.modules()) == []
    with pytest.raises(RuntimeError, match="no step in progress"):
        monitor.end_step()

    # The monitor works again; abandoned steps keep their numbers and record nothing.
    assert monitor.begin_step() == 2
    model(x).sum().backward()
    assert monitor.end_step() is None
    assert monitor.history.steps == (2,)

    # A block that raises abandons its step and the exception propagates.
    with pytest.raises(ValueError, match="boom"), monitor.monitored_step() as handle:
        assert isinstance(handle, MonitoredStep) and handle.step == 3
        assert leftover_hooks(model.modules()) != []
        raise ValueError("boom")
    assert leftover_hooks(model.modules()) == []
    assert monitor.history.steps == (2,)

    # A replay that is not callable: refused, and the step's hooks are gone too.
    monitor.begin_step()
    with pytest.raises(TypeError):
        monitor.end_step(replay=42)  # type: ignore[arg-type]
    assert leftover_hooks(model.modules()) == []
    assert monitor.begin_step() == 5
    monitor.abort_step()


def test_a_step_begun_on_another_thread_is_left_running() -> None:
    model, _ = _model(0.0)
    monitor = TrainingMonitor(model, every=1)
    began, release = threading.Event(), threading.Event()
    results: list[object] = []

    def trainer() -> None:
        monitor.begin_step()
        began.set()
        release.wait(timeout=30)
        model(torch.randn(2, 4)).sum().backward()
        results.append(monitor.end_step())

    thread = threading.Thread(target=trainer)
    thread.start()
    assert began.wait(timeout=30)
    try:
        with pytest.raises(RuntimeError, match="run_step is already running"):
            monitor.begin_step()
        with pytest.raises(RuntimeError, match="begun on another thread"):
            monitor.end_step()
        assert leftover_hooks(model.modules()) != []  # the trainer's step is intact
    finally:
        release.set()
        thread.join(timeout=30)
    assert not thread.is_alive() and results == [None]
    assert monitor.history.steps == (0,)
    assert leftover_hooks(model.modules()) == []
