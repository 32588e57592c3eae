"""TrainingMonitor(budget=...): the sampling interval stretched to the measured overhead.

The clock is injected, so the costs are exact and the bounds follow from the rule: a step
is sampled only when ``spent + cost <= budget * (elapsed + work + cost)``.
"""

from __future__ import annotations

import math

import pytest
import torch
from health_models import assert_no_hooks
from torch import nn

import vinlens.health.monitor._steps as steps_module
from vinlens.health import TrainingMonitor
from vinlens.health.monitor._budget import MAX_STRETCH
from vinlens.health.stats import ActivationAccumulator
from vinlens.hooks import leftover_hooks

WORK = 0.1  # the loop's own work per step, seconds of the fake clock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def small_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))


def armed(model: nn.Module) -> bool:
    # Instance hooks, global hooks or forward taps (which leftover_hooks reports).
    return bool(leftover_hooks(model.modules()))


def run(
    monitor: TrainingMonitor,
    model: nn.Module,
    clock: FakeClock,
    steps: int,
    *,
    hidden: float = 0.0,
) -> list[int]:
    """``steps`` steps of WORK each (plus ``hidden`` on a sampled one, outside the hooks);
    returns the sampled steps."""
    x = torch.randn(3, 4)
    sampled = []

    def step() -> None:
        model.zero_grad()
        if armed(model):
            sampled.append(monitor.step - 1)
            clock.now += hidden
        model(x).sum().backward()
        clock.now += WORK

    for _ in range(steps):
        monitor.run_step(step)
    return sampled


@pytest.fixture
def slow_hooks(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, list[float]]:
    """A deliberately slow hook path: each fold of a module's output costs ``cost[0]``."""
    clock = FakeClock()
    cost = [0.0]
    update = ActivationAccumulator.update

    def slow_update(self: ActivationAccumulator, label: str, output: object) -> object:
        clock.now += cost[0]
        return update(self, label, output)

    monkeypatch.setattr(ActivationAccumulator, "update", slow_update)
    return clock, cost


def budgeted(model: nn.Module, clock: FakeClock, budget: float, every: int = 1) -> TrainingMonitor:
    monitor = TrainingMonitor(model, every=every, budget=budget)
    monitor._budget.clock = clock
    return monitor


@pytest.mark.parametrize("where", ["hooks", "hidden"])
def test_overhead_stays_under_the_budget(
    slow_hooks: tuple[FakeClock, list[float]], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    clock, cost = slow_hooks
    model = small_model()
    sample_cost = 0.05  # half a step: every=1 would cost 33%
    per_step = 0.0005  # the per-step check: 0.5%, under the budget
    finite_norm = steps_module.finite_norm

    def slow_check(grads: object) -> tuple[bool, float]:
        clock.now += per_step
        return finite_norm(grads)  # type: ignore[arg-type]

    monkeypatch.setattr(steps_module, "finite_norm", slow_check)
    budget = 0.02
    monitor = budgeted(model, clock, budget)
    calls = 4  # modules hooked per sampled step: the Sequential and its three children
    if where == "hooks":
        cost[0] = sample_cost / calls
        sampled = run(monitor, model, clock, 600)
    else:  # outside the monitor's clock: priced against the unsampled steps
        sampled = run(monitor, model, clock, 600, hidden=sample_cost)
    assert sampled == list(monitor.history.steps)
    elapsed = clock.now
    # Every sample after the first leaves spent <= budget * elapsed, and unsampled steps
    # (0.5% each) only lower the share.
    assert len(sampled) >= 2
    assert monitor.overhead <= budget + 1e-12
    # The monitor declines a sample only when it would pass the budget: it uses all of it
    # but one sample and one step.
    assert monitor.overhead >= budget - (sample_cost + WORK + sample_cost) / elapsed
    # About budget * elapsed / sample_cost samples (the per-step check's share aside).
    expected = (budget * elapsed - 600 * per_step) / sample_cost
    assert abs(len(sampled) - expected) <= 2
    spent = len(sampled) * sample_cost + (600 - len(sampled)) * per_step
    assert monitor.overhead == pytest.approx(spent / elapsed, rel=1e-9)
    assert_no_hooks(model)


def test_without_a_budget_every_is_kept_and_overhead_measured(
    slow_hooks: tuple[FakeClock, list[float]],
) -> None:
    clock, cost = slow_hooks
    cost[0] = 1.0  # costly samples change nothing without a budget
    model = small_model()
    monitor = TrainingMonitor(model, every=5)
    monitor._budget.clock = clock
    assert monitor.budget is None and monitor.overhead == 0.0
    sampled = run(monitor, model, clock, 20)
    assert sampled == [0, 5, 10, 15]
    assert monitor.overhead == pytest.approx(16.0 / (16.0 + 20 * WORK))


def test_budget_samples_at_least_every_max_stretch(
    slow_hooks: tuple[FakeClock, list[float]],
) -> None:
    clock, cost = slow_hooks
    cost[0] = 1000.0  # no budget allows this sample
    model = small_model()
    monitor = budgeted(model, clock, 0.01, every=2)
    sampled = run(monitor, model, clock, 2 * MAX_STRETCH * 2 + 10)
    assert sampled == [0, 2 * MAX_STRETCH, 4 * MAX_STRETCH]


def test_budget_respects_every_as_the_shortest_interval(
    slow_hooks: tuple[FakeClock, list[float]],
) -> None:
    clock, _ = slow_hooks  # hooks cost nothing on the fake clock: the budget never binds
    model = small_model()
    monitor = budgeted(model, clock, 0.5, every=3)
    sampled = run(monitor, model, clock, 12)
    assert sampled == [0, 3, 6, 9]  # step 1 and 2 price the first sample


def test_real_clock_overhead_is_a_fraction() -> None:
    model = small_model()
    monitor = TrainingMonitor(model, every=2, budget=0.5)
    x = torch.randn(3, 4)

    def step() -> None:
        model.zero_grad()
        model(x).sum().backward()

    for _ in range(6):
        monitor.run_step(step)
    assert 0 < monitor.overhead < 1
    assert not math.isnan(monitor.overhead)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True, "2%", math.nan])
def test_bad_budget_names_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match=r"budget must be None or a fraction .* got"):
        TrainingMonitor(small_model(), budget=bad)  # type: ignore[arg-type]
