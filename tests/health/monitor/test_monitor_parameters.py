"""Issue 30.8: the parameters a TrainingMonitor checks are the model's at each step.

A backbone unfrozen after the monitor was built, a head replaced or weights loaded with
``assign=True`` (new Parameter objects), sparse gradients, and gradients kept as views
of one flat buffer (DDP/ZeRO bucket style), which a replay must keep writing into.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from health_models import NanBackward
from torch import nn

from vinlens.health import NonFiniteGradientError, TrainingMonitor, find_nonfinite_gradient_origin
from vinlens.hooks import leftover_hooks


class FaultAt(nn.Module):
    """A linear map whose backward turns NaN on the first run of step ``step`` (and its replay)."""

    def __init__(self, width: int, step: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width)
        self.step = step
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.weight.T
        self.calls += 1
        out: torch.Tensor = NanBackward.apply(h) if self.calls > self.step else h
        return out


def _train(
    model: nn.Module, monitor: TrainingMonitor, steps: int, change: Callable[[int], None]
) -> int | None:
    """Run ``steps`` steps (``change(i)`` before step i); the step that raised, or None."""
    x = torch.randn(6, 4)
    for index in range(steps):
        change(index)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(optimizer: torch.optim.Optimizer = optimizer) -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            return loss

        try:
            monitor.run_step(step)
        except NonFiniteGradientError as error:
            assert error.event.step == index
            return index
        optimizer.step()
    return None


def test_a_backbone_unfrozen_after_construction_is_caught_at_its_nan_step() -> None:
    torch.manual_seed(0)
    backbone = FaultAt(4, step=8)
    model = nn.Sequential(backbone, nn.Linear(4, 1))
    backbone.requires_grad_(False)
    monitor = TrainingMonitor(model, every=100)

    def unfreeze(index: int) -> None:
        if index == 5:
            backbone.requires_grad_(True)

    assert _train(model, monitor, 12, unfreeze) == 8
    event = monitor.events[0]
    assert event.origin is not None and event.origin.module_path == "0"
    assert "0.weight" in event.origin.parameter_paths
    # Raised before the optimizer step: the weights stayed finite.
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert leftover_hooks(model.modules()) == []


def test_a_layer_replaced_after_construction_is_checked_and_sampled() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=4)
    new_layer = FaultAt(4, step=8 - 3)  # built at step 3, its 6th forward is step 8

    def replace(index: int) -> None:
        if index == 3:
            model[0] = new_layer  # a new module with parameters the monitor never saw

    assert _train(model, monitor, 12, replace) == 8
    event = monitor.events[0]
    assert event.origin is not None and event.origin.module_path == "0"
    assert "0.weight" in event.origin.parameter_paths
    # Sampled step 4 watched the new module: its outputs and its own gradient norm.
    history = monitor.history
    assert history.steps == (0, 4, 8)
    module = history.modules["0"]
    assert module.output[1].count == 6 * 4
    assert math.isfinite(module.grad_norm[1]) and module.grad_norm[1] > 0


def test_parameters_loaded_with_assign_are_the_ones_checked() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=100, on_nonfinite="record")
    old = list(model.parameters())
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    assert all(a is not b for a, b in zip(old, model.parameters(), strict=True))
    x = torch.randn(3, 4)

    def poisoned() -> None:
        model.zero_grad()
        model(x).sum().backward()
        model[1].weight.grad[0, 0] = math.inf  # type: ignore[index]

    event = monitor.run_step(poisoned)
    assert [e.step for e in monitor.events] == [0]
    assert event is None  # run_step returns step_fn's result
    assert leftover_hooks(model.modules()) == []


def test_sparse_gradients_in_the_origin_search_and_a_replayed_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 4), nn.Linear(4, 1))
    x = torch.tensor([1, 2, 2, 3])
    model(x).sum().backward()  # finite: no origin, no error
    assert find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward()) is None

    def nan_into_embedding() -> None:
        model.zero_grad()
        h = NanBackward.apply(model[0](x))
        model[2](model[1](h)).sum().backward()

    origin = find_nonfinite_gradient_origin(model, nan_into_embedding)
    assert origin is not None and origin.module_path == "0"
    assert origin.parameter_paths == ("0.weight",)
    monitor = TrainingMonitor(model, every=1, on_nonfinite="record")
    monitor.run_step(nan_into_embedding)
    (event,) = monitor.events
    assert event.origin is not None and event.origin.module_path == "0"
    grad = model[0].weight.grad
    assert grad is not None and grad.is_sparse and bool(grad.coalesce().values().isnan().all())
    assert leftover_hooks(model.modules()) == []


@pytest.mark.parametrize("zero", ["in_place", "to_none"])
def test_a_replayed_step_leaves_each_grad_the_tensor_the_step_wrote(zero: str) -> None:
    """Gradients kept as views of one flat buffer keep reaching it after a replay."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    parameters = list(model.parameters())
    flat = torch.zeros(sum(p.numel() for p in parameters))
    offset = 0
    for p in parameters:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    views = [p.grad for p in parameters]
    x = torch.randn(5, 4)
    runs: list[list[torch.Tensor]] = []

    def step() -> None:
        if zero == "in_place":
            for p in parameters:
                assert p.grad is not None
                p.grad.zero_()  # zero_grad(set_to_none=False): the bucket views stay
        else:
            model.zero_grad(set_to_none=True)
        model(x).square().sum().backward()
        bias = parameters[-1].grad
        assert bias is not None
        bias[0] = math.nan  # one gradient goes bad, in place
        runs.append([p.grad.clone() for p in parameters if p.grad is not None])
        written.append([p.grad for p in parameters if p.grad is not None])

    written: list[list[torch.Tensor]] = []
    monitor = TrainingMonitor(model, every=100, on_nonfinite="record")
    for _ in range(2):  # two replayed steps (the first sampled, the second not)
        written.clear()
        runs.clear()
        monitor.run_step(step)
        assert len(written) == 2  # the step and its replay
        grads = [p.grad for p in parameters]
        # Each grad is the tensor the step's own run wrote into, holding its values.
        assert all(g is w for g, w in zip(grads, written[0], strict=True))
        for grad, value in zip(grads, runs[0], strict=True):
            torch.testing.assert_close(grad, value, equal_nan=True)
    assert [e.step for e in monitor.events] == [0, 1]
    if zero == "in_place":
        assert all(g is v for g, v in zip(grads, views, strict=True))
        # The flat buffer holds the step's gradients, not a stale copy.
        torch.testing.assert_close(flat, torch.cat([r.flatten() for r in runs[0]]), equal_nan=True)
    assert leftover_hooks(model.modules()) == []
