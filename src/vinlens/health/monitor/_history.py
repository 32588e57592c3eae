"""What a monitor remembers of its run: the every-step series, the ring of sampled steps and
the totals over every sampled step, behind the history API that a live
:class:`~vinlens.health.TrainingMonitor` and one rank of a logged
:class:`~vinlens.health.TrainingRun` share (:class:`RunHistory`)."""

from __future__ import annotations

import math
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from vinlens.health.monitor._records import (
    COLUMNS,
    GRAD_NORM,
    HEADROOM,
    ROW_WIDTH,
    HistoryField,
    HistoryMatrix,
    ModuleHistory,
    MonitorTotals,
    NonFiniteEvent,
    StepSeries,
    TrainingHistory,
    summary_of_row,
)
from vinlens.health.stats import ActivationAccumulator

#: Sampled steps kept in the ring of :attr:`TrainingMonitor.history` (older ones live on
#: only in the totals).
HISTORY_SAMPLES = 512

#: Losses on an accelerator wait this many steps before they are read, so that a step
#: never waits for its own loss: one device-to-host copy per batch of steps.
_DEFERRED_LOSSES = 64


@runtime_checkable
class RunHistory(Protocol):
    """The history one rank keeps of a run, live (:class:`~vinlens.health.TrainingMonitor`)
    or logged (``open_run(log_dir).rank(r)``): the same names, kinds and values."""

    @property
    def module_paths(self) -> tuple[str, ...]: ...
    @property
    def events(self) -> tuple[NonFiniteEvent, ...]: ...
    @property
    def history(self) -> TrainingHistory: ...
    def history_matrix(self, field: HistoryField = "grad_norm") -> HistoryMatrix: ...
    def step_series(self) -> StepSeries: ...


def _loss_value(loss: object) -> float:
    """A step's loss as a float: a one-element tensor or a number, NaN for anything else."""
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach().reshape(()).float())
    if isinstance(loss, int | float) and not isinstance(loss, bool):
        return float(loss)
    return math.nan


class _Series:
    """Every step's number, global gradient norm and loss, in arrays that double as they fill
    (24 bytes a step: a million steps hold 24 MB)."""

    def __init__(self) -> None:
        self._steps = np.empty(1024, np.int64)
        self._values = np.empty((1024, 2), np.float64)
        self._n = 0
        self._deferred: list[tuple[int, torch.Tensor]] = []

    def append(self, step: int, grad_norm: float, loss: object) -> None:
        if self._n == len(self._steps):
            self._steps = np.concatenate([self._steps, np.empty_like(self._steps)])
            self._values = np.concatenate([self._values, np.empty_like(self._values)])
        row = self._n
        self._steps[row] = step
        self._values[row, 0] = grad_norm
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.device.type != "cpu":
            self._values[row, 1] = math.nan
            self._deferred.append((row, loss.detach()))
            if len(self._deferred) >= _DEFERRED_LOSSES:
                self.settle()
        else:
            self._values[row, 1] = _loss_value(loss)
        self._n += 1

    def settle(self) -> None:
        """Read the losses left on an accelerator (one copy per device)."""
        deferred, self._deferred = self._deferred, []
        by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        for row, loss in deferred:
            by_device.setdefault(loss.device, []).append((row, loss))
        for items in by_device.values():
            values = torch.stack([loss.reshape(()).double() for _, loss in items]).cpu()
            for (row, _), value in zip(items, values.tolist(), strict=True):
                self._values[row, 1] = value

    def series(self) -> StepSeries:
        self.settle()
        n = self._n
        return StepSeries(
            self._steps[:n].copy(), self._values[:n, 0].copy(), self._values[:n, 1].copy()
        )


class SampleHistory:
    """A live monitor's history: the step series, the sampled ring and the totals, under
    one lock so that a view reads one consistent snapshot while the loop appends."""

    def __init__(self, module_paths: tuple[str, ...]) -> None:
        self.module_paths = module_paths
        self.lock = threading.Lock()
        self.samples = 0
        self._ring_steps = np.zeros(HISTORY_SAMPLES, dtype=np.int64)
        self._ring = np.full((HISTORY_SAMPLES, len(module_paths), ROW_WIDTH), math.nan)
        self._totals = MonitorTotals(module_paths)
        self._series = _Series()

    def add_step(self, step: int, grad_norm: float, loss: object) -> None:
        with self.lock:
            self._series.append(step, grad_norm, loss)

    def add_sample(
        self,
        step: int,
        block: np.ndarray[Any, np.dtype[np.float64]],
        outputs: ActivationAccumulator,
        module_norms: Sequence[float],
    ) -> None:
        with self.lock:
            slot = self.samples % HISTORY_SAMPLES
            self._ring_steps[slot] = step
            self._ring[slot] = block
            self.samples += 1
            self._totals.update((outputs, module_norms))

    def step_series(self) -> StepSeries:
        with self.lock:
            return self._series.series()

    def _order(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        count = min(self.samples, HISTORY_SAMPLES)
        start = self.samples - count
        return np.arange(start, self.samples, dtype=np.int64) % HISTORY_SAMPLES

    def history_matrices(self, fields: Sequence[HistoryField]) -> tuple[HistoryMatrix, ...]:
        columns = []
        for field in fields:
            column = COLUMNS.get(field)
            if column is None:
                raise ValueError(
                    f"field must be one of {', '.join(sorted(COLUMNS))}, got {field!r}"
                )
            columns.append(column)
        with self.lock:
            order = self._order()
            steps = tuple(int(s) for s in self._ring_steps[order])
            ring = self._ring[order]
        return tuple(
            HistoryMatrix(field, steps, self.module_paths, ring[:, :, column].T.copy())
            for field, column in zip(fields, columns, strict=True)
        )

    def history(self, steps_run: int) -> TrainingHistory:
        with self.lock:
            order = self._order()
            steps = tuple(int(s) for s in self._ring_steps[order])
            ring = self._ring[order]
            totals = self._totals.finish()
            samples = self.samples
        modules: dict[str, ModuleHistory] = {}
        for row, path in enumerate(self.module_paths):
            values = ring[:, row, :]
            modules[path] = ModuleHistory(
                grad_norm=tuple(float(v) for v in values[:, GRAD_NORM]),
                output=tuple(summary_of_row(v) for v in values),
                grad_norm_total=totals[path].grad_norm,
                output_total=totals[path].output,
                headroom_bits=tuple(float(v) for v in values[:, HEADROOM]),
            )
        return TrainingHistory(steps, types.MappingProxyType(modules), steps_run, samples)


_Source = TypeVar("_Source")


class Listeners(Generic[_Source]):
    """The views that follow a live history, called on the training thread after a step
    they should see; a failing view becomes a warning, never a failed step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[_Source], None]] = []

    def add(self, listener: Callable[[_Source], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def notify(self, source: _Source) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(source)
            except Exception as error:  # a view must never fail the training step
                warnings.warn(f"training monitor listener failed: {error!r}", stacklevel=4)
