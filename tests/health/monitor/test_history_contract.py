"""One history contract, written once, run against a live monitor and one rank of the run log
it wrote (as zarr's ``StoreTests`` runs against every store): the same names, the same kinds
(property or method) and the same values for the same steps."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from runlog_train import batch, build_model

from vinlens.health import (
    HistoryMatrix,
    RankView,
    RunHistory,
    StepSeries,
    TrainingHistory,
    TrainingMonitor,
    open_run,
)

STEPS = 11
EVERY = 3
NAN_STEP = 7
PATHS = ("<root>", "0", "1", "2", "3", "4")


@dataclass(frozen=True)
class Trained:
    monitor: TrainingMonitor
    log_dir: Path
    losses: tuple[float, ...]


def train(log_dir: Path) -> Trained:
    """A short run with a non-finite step, written to ``log_dir`` while kept live."""
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses: list[float] = []
    with TrainingMonitor(model, every=EVERY, on_nonfinite="record", log_dir=log_dir) as monitor:
        for step in range(STEPS):
            x = batch(step, NAN_STEP)

            def step_fn(x: torch.Tensor = x) -> torch.Tensor:
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                return loss

            loss = monitor.run_step(step_fn)
            losses.append(float(loss.detach()))
            if monitor.last_nonfinite_step != step:
                optimizer.step()
    return Trained(monitor, log_dir, tuple(losses))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train(tmp_path_factory.mktemp("contract") / "run")


@pytest.fixture(params=["live", "logged"])
def source(request: pytest.FixtureRequest, trained: Trained) -> RunHistory:
    if request.param == "live":
        return trained.monitor
    return open_run(trained.log_dir).rank(0)


class TestRunHistory:
    """What a notebook may rely on of any rank's history, live or logged."""

    def test_is_a_run_history(self, source: RunHistory) -> None:
        assert isinstance(source, RunHistory)

    def test_kinds_are_the_same(self, source: RunHistory) -> None:
        kind = type(source)
        for name in ("events", "history"):
            assert isinstance(inspect.getattr_static(kind, name), property), name
        for name in ("history_matrix", "step_series"):
            assert inspect.isfunction(inspect.getattr_static(kind, name)), name
        assert inspect.signature(source.history_matrix).parameters["field"].default == "grad_norm"

    def test_module_paths(self, source: RunHistory) -> None:
        assert source.module_paths == PATHS

    def test_step_series_holds_every_step(self, source: RunHistory, trained: Trained) -> None:
        series = source.step_series()
        assert isinstance(series, StepSeries)
        assert series.steps.tolist() == list(range(STEPS))
        assert series.loss.tolist() == list(trained.losses)
        finite = np.isfinite(series.grad_norm)
        assert not finite[NAN_STEP]
        assert finite.sum() == STEPS - 1
        assert (series.grad_norm[finite] > 0).all()

    def test_history_holds_the_sampled_steps(self, source: RunHistory) -> None:
        history = source.history
        assert isinstance(history, TrainingHistory)
        assert history.steps == tuple(range(0, STEPS, EVERY))
        assert history.steps_run == STEPS
        assert history.samples == len(history.steps)
        assert tuple(history.modules) == PATHS

    def test_history_matrix_agrees_with_history(self, source: RunHistory) -> None:
        history = source.history
        for field in ("grad_norm", "std", "nan_count"):
            matrix = source.history_matrix(field)
            assert isinstance(matrix, HistoryMatrix)
            assert matrix.steps == history.steps
            assert matrix.module_paths == PATHS
            assert matrix.values.shape == (len(PATHS), len(history.steps))
            for row, path in enumerate(PATHS):
                module = history.modules[path]
                expected = (
                    module.grad_norm
                    if field == "grad_norm"
                    else tuple(getattr(s, field) for s in module.output)
                )
                np.testing.assert_array_equal(matrix.values[row], np.array(expected, float))

    def test_default_field_is_the_gradient_norm(self, source: RunHistory) -> None:
        assert source.history_matrix().field == "grad_norm"

    def test_unknown_field_is_refused_by_name(self, source: RunHistory) -> None:
        with pytest.raises(ValueError, match="'no_such_field'"):
            source.history_matrix("no_such_field")  # type: ignore[arg-type]

    def test_events_name_the_step_and_the_module(self, source: RunHistory) -> None:
        (event,) = source.events
        assert event.step == NAN_STEP
        assert event.rank == 0
        assert event.origin is not None and event.origin.module_path == "1"


def test_live_and_logged_values_are_equal(trained: Trained) -> None:
    live: RunHistory = trained.monitor
    logged = open_run(trained.log_dir).rank(0)
    a, b = live.step_series(), logged.step_series()
    for name in StepSeries._fields:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for field in ("grad_norm", "mean", "std", "min", "max", "zero_fraction", "headroom_bits"):
        x, y = live.history_matrix(field), logged.history_matrix(field)  # type: ignore[arg-type]
        assert x.steps == y.steps
        np.testing.assert_array_equal(x.values, y.values)
    assert repr(live.events) == repr(logged.events)  # NaN summaries: equal, not ==
    hl, hr = live.history, logged.history
    for path in PATHS:
        np.testing.assert_array_equal(hl.modules[path].grad_norm, hr.modules[path].grad_norm)
        assert repr(hl.modules[path].output) == repr(hr.modules[path].output)
        # Totals: the live fold against one recomputed from the logged summaries.
        left, right = hl.modules[path].grad_norm_total, hr.modules[path].grad_norm_total
        assert left.count == right.count
        assert math.isclose(left.mean, right.mean) or (
            math.isnan(left.mean) and math.isnan(right.mean)
        )


def test_a_rank_the_run_does_not_have_is_refused(trained: Trained) -> None:
    run = open_run(trained.log_dir)
    assert isinstance(run.rank(0), RankView)
    with pytest.raises(ValueError, match="no rank 3"):
        run.rank(3)


def test_the_run_keeps_its_rank_keyword_api(trained: Trained) -> None:
    run = open_run(trained.log_dir)
    view = run.rank(0)
    np.testing.assert_array_equal(
        run.history_matrix("grad_norm", rank=0).values, view.history_matrix().values
    )
    assert run.history(0).steps == view.history.steps
    np.testing.assert_array_equal(run.step_series(0).loss, view.step_series().loss)
