"""A step left open by an exception between begin_step and end_step ends with the monitor:
``close()``, ``__exit__`` and garbage collection release its taps, hooks and eager stance."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
import torch
import torch._dynamo  # loaded, so that a sampled step holds dynamo's eager stance
from torch import nn

from vinlens import wrappers
from vinlens.health import TrainingMonitor
from vinlens.hooks import leftover_hooks

ORIGINAL_FORWARD = nn.Linear.forward


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def assert_released(net: nn.Module) -> None:
    assert leftover_hooks([net]) == []
    assert nn.Linear.forward is ORIGINAL_FORWARD
    assert wrappers._EAGER._holders == 0


def forward_then_fail(monitor: TrainingMonitor, net: nn.Module, error: BaseException) -> None:
    monitor.begin_step()  # step 0 is sampled: its modules are tapped
    net(torch.randn(2, 4)).sum().backward()
    assert nn.Linear.forward is not ORIGINAL_FORWARD  # the tap is in place mid-step
    raise error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("loader failed")])
def test_exit_abandons_a_step_an_exception_left_open(error: BaseException) -> None:
    net = model()
    with pytest.raises(type(error)), TrainingMonitor(net, every=1) as monitor:
        forward_then_fail(monitor, net, error)
    assert_released(net)
    # The monitor is free again: a next step runs and is recorded.
    monitor.run_step(lambda: net(torch.randn(2, 4)).sum().backward())
    assert monitor.history.steps == (1,)
    assert_released(net)


def test_close_abandons_an_open_step() -> None:
    net = model()
    monitor = TrainingMonitor(net, every=1)
    with pytest.raises(RuntimeError):
        forward_then_fail(monitor, net, RuntimeError("step failed"))
    assert nn.Linear.forward is not ORIGINAL_FORWARD
    monitor.close()
    assert_released(net)
    monitor.close()  # idempotent
    assert monitor.abort_step() is False


def test_a_collected_monitor_releases_its_open_step() -> None:
    net = model()

    def leave_open() -> Callable[[], None]:
        monitor = TrainingMonitor(net, every=1)
        with pytest.raises(RuntimeError):
            forward_then_fail(monitor, net, RuntimeError("step failed"))
        return monitor.close  # dropped below with the monitor

    leave_open()
    gc.collect()
    assert_released(net)


def test_an_unsampled_open_step_is_released_too() -> None:
    net = model()
    with pytest.raises(RuntimeError), TrainingMonitor(net, every=5) as monitor:
        monitor.run_step(lambda: net(torch.randn(2, 4)).sum().backward())  # step 0, sampled
        monitor.begin_step()  # step 1: not sampled, nothing tapped, the lock held
        raise RuntimeError("step failed")
    assert_released(net)
    assert monitor.begin_step() == 2
    monitor.end_step()
