"""Issue 30.10: the monitor's per-step floor, and the exactness of the states it saves.

Python's and NumPy's states are taken again only when the generator changed since the
last time (their raw state is compared in place); what the monitor saves must still be
exactly what ``random.getstate()`` and ``np.random.get_state()`` return at that moment.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from health_models import NanBackward
from torch import nn

from vinlens.health import TrainingMonitor
from vinlens.health.monitor._steps import rng_states


def _same_numpy(saved: Any, now: Any) -> bool:
    if isinstance(now, dict):
        return bool(saved == now) if not isinstance(saved, tuple) else False
    return (
        saved[0] == now[0]
        and bool(np.array_equal(saved[1], now[1]))
        and tuple(saved[2:]) == tuple(now[2:])
    )


def test_saved_states_equal_the_generators_through_every_kind_of_change() -> None:
    python_start, numpy_start = random.getstate(), np.random.get_state()
    choose = random.Random(0)
    kept: list[tuple[object, Any]] = []
    try:
        for _ in range(1500):
            action = choose.randrange(11)
            if action == 0:
                random.random()
            elif action == 1:
                random.gauss(0.0, 1.0)  # Python's cached gauss_next
            elif action == 2:
                np.random.rand()
            elif action == 3:
                np.random.randn()  # the legacy RandomState's cached Gaussian
            elif action == 4:
                np.random.seed(choose.randrange(3))
            elif action == 5:
                random.seed(choose.randrange(3))
            elif action == 6:
                kept.append((random.getstate(), np.random.get_state()))
            elif action == 7 and kept:
                # A state restored by hand, cached Gaussians included: the raw key may
                # equal a saved one's while has_gauss differs.
                python, legacy = choose.choice(kept)
                random.setstate(python)  # type: ignore[arg-type]
                np.random.set_state(legacy)
            # 8-10: nothing drawn (the saved state is reused)
            _, _, python_saved, numpy_saved = rng_states()
            assert python_saved == random.getstate()
            assert _same_numpy(numpy_saved, np.random.get_state())
        # Another bit generator behind the legacy functions, then MT19937 again.
        np.random.set_bit_generator(np.random.PCG64(1))  # type: ignore[attr-defined]
        np.random.random()
        np.random.set_bit_generator(np.random.MT19937(2))  # type: ignore[attr-defined]
        for _ in range(3):
            assert _same_numpy(rng_states()[3], np.random.get_state())
            np.random.randn()
    finally:
        np.random.set_bit_generator(np.random.MT19937(0))  # type: ignore[attr-defined]
        random.setstate(python_start)
        np.random.set_state(numpy_start)


def test_steps_that_draw_nothing_from_python_or_numpy_take_their_states_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What made the floor: 124 us per step, 79 of them np.random.get_state()."""
    calls = {"python": 0, "numpy": 0}
    python_getstate, numpy_get_state = random.getstate, np.random.get_state

    def counted_python() -> object:
        calls["python"] += 1
        return python_getstate()

    def counted_numpy(*args: Any, **kwargs: Any) -> Any:
        calls["numpy"] += 1
        return numpy_get_state(*args, **kwargs)

    monkeypatch.setattr(random, "getstate", counted_python)
    monkeypatch.setattr(np.random, "get_state", counted_numpy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    monitor = TrainingMonitor(model, every=100)
    x = torch.randn(3, 4)
    random.random()
    np.random.rand()  # changed once before the first step
    for _ in range(20):
        monitor.run_step(lambda: model(x).sum().backward())
    assert calls["python"] <= 1 and calls["numpy"] <= 1
    np.random.rand()  # a draw between steps: taken again, once
    for _ in range(5):
        monitor.run_step(lambda: model(x).sum().backward())
    assert calls["numpy"] <= 2


class NumpyGated(nn.Module):
    """A NaN backward when NumPy's and Python's draws (in the step) say so."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fired: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        fire = bool(np.random.rand() < 0.3) and random.random() < 0.8
        np.random.randn()  # odd draws of the legacy Gaussian: has_gauss flips
        self.fired.append(fire)
        out: torch.Tensor = NanBackward.apply(h) if fire else h
        return out


def test_a_fault_gated_by_numpy_and_python_draws_is_replayed_exactly() -> None:
    np.random.seed(5)
    random.seed(5)
    torch.manual_seed(0)
    fault = NumpyGated()
    model = nn.Sequential(nn.Linear(4, 4), fault, nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=7, on_nonfinite="record")
    x = torch.randn(5, 4)
    faulty = []
    for step in range(60):
        if step % 3 == 0:
            np.random.randn()  # augmentation between steps, some steps only
        if step % 4 == 0:
            random.random()
        calls = len(fault.fired)

        def step_fn() -> None:
            model.zero_grad()
            model(x).sum().backward()

        monitor.run_step(step_fn)
        if fault.fired[calls]:
            faulty.append(step)
            assert fault.fired[calls:] == [True, True]  # the replay drew the same
        else:
            assert len(fault.fired) == calls + 1
    assert faulty and [e.step for e in monitor.events] == faulty
