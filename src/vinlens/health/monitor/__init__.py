"""The training monitor: :class:`TrainingMonitor` and its records, and the run log it writes
(:mod:`vinlens.health.monitor.runlog`, read back with :func:`open_run`).

The monitor's parts are private modules of this package: ``_monitor`` (the class),
``_records`` (events, history, totals; the only module the run log imports), ``_steps``
(one step's hooks and replay), ``_amp`` (mixed precision), ``_budget`` (the sampling
budget), ``_rng`` (random-number state) and ``_distributed`` (the ranks' agreement).
"""

from __future__ import annotations

from vinlens.health.monitor._amp import LossScales
from vinlens.health.monitor._history import HISTORY_SAMPLES, RunHistory
from vinlens.health.monitor._monitor import EVENTS_KEPT, TrainingMonitor
from vinlens.health.monitor._records import (
    SUMMARY_FIELDS,
    HistoryField,
    HistoryMatrix,
    ModuleHistory,
    ModuleTotals,
    MonitoredStep,
    MonitorTotals,
    NonFiniteEvent,
    NonFiniteGradientError,
    RunMeta,
    TrainingHistory,
)
from vinlens.health.monitor.runlog import (
    DEFAULT_FLUSH_INTERVAL,
    DEFAULT_REPLAY_MAX_BYTES,
    Cause,
    Fingerprints,
    ModuleDivergence,
    RankView,
    Replay,
    RunDivergence,
    RunLogError,
    StepSeries,
    TrainingRun,
    compare_runs,
    load_replay,
    open_run,
    relative_difference,
)

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_REPLAY_MAX_BYTES",
    "EVENTS_KEPT",
    "HISTORY_SAMPLES",
    "SUMMARY_FIELDS",
    "Cause",
    "Fingerprints",
    "HistoryField",
    "HistoryMatrix",
    "LossScales",
    "ModuleDivergence",
    "ModuleHistory",
    "ModuleTotals",
    "MonitorTotals",
    "MonitoredStep",
    "NonFiniteEvent",
    "NonFiniteGradientError",
    "RankView",
    "Replay",
    "RunDivergence",
    "RunHistory",
    "RunLogError",
    "RunMeta",
    "StepSeries",
    "TrainingHistory",
    "TrainingMonitor",
    "TrainingRun",
    "compare_runs",
    "load_replay",
    "open_run",
    "relative_difference",
]
