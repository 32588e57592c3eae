"""One rank of a logged run as the history a live monitor offers (:class:`RankView`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

from vinlens.health.monitor._records import (
    HistoryField,
    HistoryMatrix,
    NonFiniteEvent,
    StepSeries,
    TrainingHistory,
)

if TYPE_CHECKING:
    from vinlens.health.monitor.runlog.replay import Replay

__all__ = ["RankView"]


class _Run(Protocol):
    """What a view reads of its :class:`~vinlens.health.TrainingRun`."""

    log_dir: str | Any

    def meta(self, rank: int = 0) -> Mapping[str, Any]: ...
    @property
    def events(self) -> tuple[NonFiniteEvent, ...]: ...
    def history(self, rank: int = 0) -> TrainingHistory: ...
    def history_matrix(self, field: str = "grad_norm", rank: int = 0) -> HistoryMatrix: ...
    def step_series(self, rank: int = 0) -> StepSeries: ...
    def sampled_steps(self, rank: int = 0) -> tuple[int, ...]: ...
    def load_replay(self, step: int, *, model: nn.Module, rank: int = 0) -> Replay: ...


class RankView:
    """One rank of a :class:`~vinlens.health.TrainingRun`: what the monitor of that rank
    offered live, with the same names, kinds and values (:class:`~vinlens.health.RunHistory`).

    A live monitor keeps the last :data:`~vinlens.health.HISTORY_SAMPLES` sampled steps in its
    ring; the log keeps every one, so :attr:`history` and :meth:`history_matrix` here hold the
    monitor's steps and the older ones before them. The view reads the run as it is at each
    call (after :meth:`TrainingRun.refresh`, a view sees what was appended).
    """

    def __init__(self, run: _Run, rank: int) -> None:
        run.meta(rank)  # a rank the run does not have is refused here, not at first use
        self.run = run
        self.rank = rank

    @property
    def module_paths(self) -> tuple[str, ...]:
        """The module paths this rank watched."""
        return tuple(self.run.meta(self.rank)["module_paths"])

    @property
    def every(self) -> int:
        """The rank's sampling interval (``TrainingMonitor(every=...)``)."""
        return int(self.run.meta(self.rank)["every"])

    @property
    def meta(self) -> Mapping[str, Any]:
        """The rank's metadata record (see :meth:`TrainingRun.meta`)."""
        return self.run.meta(self.rank)

    @property
    def events(self) -> tuple[NonFiniteEvent, ...]:
        """This rank's non-finite events, in step order."""
        return tuple(e for e in self.run.events if e.rank == self.rank)

    @property
    def history(self) -> TrainingHistory:
        """Every sampled step logged, with totals recomputed from the logged summaries."""
        return self.run.history(self.rank)

    def history_matrix(self, field: HistoryField = "grad_norm") -> HistoryMatrix:
        """One statistic of every module over every sampled step logged."""
        return self.run.history_matrix(field, rank=self.rank)

    def step_series(self) -> StepSeries:
        """Every step's number, global gradient norm and loss."""
        return self.run.step_series(self.rank)

    def sampled_steps(self) -> tuple[int, ...]:
        """The sampled steps logged, in order."""
        return self.run.sampled_steps(self.rank)

    def load_replay(self, step: int, *, model: nn.Module) -> Replay:
        """Load this rank's replay bundle of ``step`` into ``model`` (see
        :meth:`TrainingRun.load_replay`)."""
        return self.run.load_replay(step, model=model, rank=self.rank)

    def __repr__(self) -> str:
        return f"RankView({self.run.log_dir!r}, rank={self.rank})"
