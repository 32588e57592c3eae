"""Every engine that hooks a model leaves no hook behind: after success, after an
exception raised mid-forward, and after a cancel (OperationCancelled, KeyboardInterrupt).

Checked on every module's own hook tables and on PyTorch's global hook dicts
(``torch.nn.modules.module._global_*``), with the parameters' post-accumulate-grad hooks.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from vinlens.attribution.methods import ablation_cam, grad_cam
from vinlens.attribution.targets import CameraExplanationTarget, LayerTarget, probe_layer_calls
from vinlens.health import (
    TrainingMonitor,
    collect_activation_stats,
    compare_models,
    find_nonfinite_gradient_origin,
    find_nonfinite_origin,
    precision_headroom,
)
from vinlens.hooks import leftover_hooks
from vinlens.model_inspection import capture_model
from vinlens.operations import CancelToken, OperationCancelled


class Trip(nn.Module):
    """Passes its input on, or raises what the test planted, in the middle of the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.action: Callable[[], None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.action is not None:
            self.action()
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.stage = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU())
        self.trip = Trip()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3))

    def forward(self, x: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if isinstance(x, dict):
            x = x["cam"]
        return self.head(self.trip(self.stage(self.stem(x))))


def _plant(model: Net, outcome: str) -> type[BaseException] | None:
    if outcome == "success":
        model.trip.action = None
        return None
    if outcome == "exception":

        def fail() -> None:
            raise ValueError("planted fault")

        model.trip.action = fail
        return ValueError
    if outcome == "cancel":
        token = CancelToken()
        token.cancel()
        model.trip.action = token.raise_if_cancelled
        return OperationCancelled

    def interrupt() -> None:
        raise KeyboardInterrupt

    model.trip.action = interrupt
    return KeyboardInterrupt


def _x() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def _capture(model: Net) -> None:
    with capture_model(model):
        model(_x())


def _capture_some(model: Net) -> None:
    with capture_model(model, module_paths=["stem", "head.2"]):
        model(_x())


def _origin(model: Net) -> None:
    find_nonfinite_origin(model, lambda: model(_x()))


def _diff(model: Net) -> None:
    twin = Net()
    twin.trip.action = model.trip.action
    compare_models(model, twin, lambda m: m(_x()))
    assert leftover_hooks(twin.modules()) == []


def _diff_self(model: Net) -> None:
    compare_models(model, model, lambda m: m(_x()))


def _stats(model: Net) -> None:
    collect_activation_stats(model, [_x(), _x()])


def _stats_some(model: Net) -> None:
    collect_activation_stats(model, [_x()], module_paths=["stage.0"])


def _gradient_origin(model: Net) -> None:
    find_nonfinite_gradient_origin(model, lambda: model(_x()).sum().backward())


def _headroom(model: Net) -> None:
    precision_headroom(model, lambda: model(_x()))


def _monitor_sampled_step(model: Net) -> None:
    TrainingMonitor(model, every=1).run_step(lambda: model(_x()).sum().backward())


TARGET = CameraExplanationTarget("cam", LayerTarget("stage"), "dedicated_layer")


def _grad_cam(model: Net) -> None:
    grad_cam(model, TARGET, lambda: model(_x())[:, 1])


def _ablation(model: Net) -> None:
    ablation_cam(model, TARGET, lambda: model(_x())[:, 1])


def _probe(model: Net) -> None:
    probe_layer_calls(model, {"cam": _x()})


ENGINES = {
    "capture": _capture,
    "capture_some_paths": _capture_some,
    "find_nonfinite_origin": _origin,
    "compare_models": _diff,
    "compare_models_same_model": _diff_self,
    "collect_activation_stats": _stats,
    "collect_activation_stats_some_paths": _stats_some,
    "find_nonfinite_gradient_origin": _gradient_origin,
    "precision_headroom": _headroom,
    "training_monitor_sampled_step": _monitor_sampled_step,
    "grad_cam": _grad_cam,
    "ablation_cam": _ablation,
    "probe_layer_calls": _probe,
}


@pytest.mark.parametrize("outcome", ["success", "exception", "cancel", "interrupt"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_leaves_no_hook(engine: str, outcome: str) -> None:
    model = Net()
    assert leftover_hooks(model.modules()) == []
    expected = _plant(model, outcome)
    if expected is None:
        ENGINES[engine](model)
    else:
        with pytest.raises(expected):
            ENGINES[engine](model)
    assert leftover_hooks(model.modules()) == []
    for name, parameter in model.named_parameters():
        assert not getattr(parameter, "_post_accumulate_grad_hooks", None), name
        assert not parameter._backward_hooks, name  # tensor hooks
    # The model still runs plainly, and nothing fires on it any more.
    model.trip.action = None
    model(_x())
