"""Model health: where the first NaN appeared, what differs between two models, and
activation statistics over many batches.

Everything here observes the caller's own forward through module hooks that return
``None`` (outputs are never changed), registered through :mod:`vinlens.hooks` and
removed on every exit path, including exceptions raised by the forward. Tensor
statistics are :class:`~vinlens.model_inspection.TensorSummary` records computed on the
tensors' own device (see :mod:`vinlens.model_inspection.summary` for their cost); no
activation is copied to the host.

* :func:`find_nonfinite_origin`: the first module call whose inputs were finite
  and whose output is not (:mod:`vinlens.health.origin`).
* :func:`compare_models`: per-module drift between two models run on the same
  input, in lockstep, so that no activation is retained (:mod:`vinlens.health.diff`).
* :func:`collect_activation_stats`: per-module summaries streamed over batches
  in mergeable accumulators (:mod:`vinlens.health.stats`).
* :func:`find_nonfinite_gradient_origin`: the first module whose backward made a NaN or
  Inf in a training step (:mod:`vinlens.health.gradient`).
* :func:`precision_headroom`: how far each module's outputs are from float16/bfloat16
  overflow and underflow (:mod:`vinlens.health.precision`).
* :class:`TrainingMonitor`: a per-step finiteness check with replay to the gradient
  origin, and sampled per-module history (:mod:`vinlens.health.monitor`), written to a
  run log with ``log_dir=`` and read back with :func:`open_run` (:mod:`vinlens.health.monitor.runlog`).

Shared records and helpers live in :mod:`vinlens.health.summaries`.
"""

from __future__ import annotations

from vinlens.health.diff import ModelDiff, ModuleDiff, compare_models, most_drifted
from vinlens.health.gradient import GradientOrigin, find_nonfinite_gradient_origin
from vinlens.health.monitor import (
    EVENTS_KEPT,
    HISTORY_SAMPLES,
    HistoryMatrix,
    LossScales,
    ModuleHistory,
    ModuleTotals,
    MonitoredStep,
    MonitorTotals,
    NonFiniteEvent,
    NonFiniteGradientError,
    RankView,
    RunHistory,
    TrainingHistory,
    TrainingMonitor,
)
from vinlens.health.monitor.runlog import (
    Cause,
    Fingerprints,
    ModuleDivergence,
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
from vinlens.health.origin import NonFiniteOrigin, find_nonfinite_origin
from vinlens.health.precision import ModulePrecision, PrecisionReport, precision_headroom
from vinlens.health.stats import ActivationAccumulator, ActivationStats, collect_activation_stats
from vinlens.health.summaries import TensorTrace
from vinlens.model_inspection import TensorSummary

__all__ = [
    "EVENTS_KEPT",
    "HISTORY_SAMPLES",
    "ActivationAccumulator",
    "ActivationStats",
    "Cause",
    "Fingerprints",
    "GradientOrigin",
    "HistoryMatrix",
    "LossScales",
    "ModelDiff",
    "ModuleDiff",
    "ModuleDivergence",
    "ModuleHistory",
    "ModulePrecision",
    "ModuleTotals",
    "MonitorTotals",
    "MonitoredStep",
    "NonFiniteEvent",
    "NonFiniteGradientError",
    "NonFiniteOrigin",
    "PrecisionReport",
    "RankView",
    "Replay",
    "RunDivergence",
    "RunHistory",
    "RunLogError",
    "StepSeries",
    "TensorSummary",
    "TensorTrace",
    "TrainingHistory",
    "TrainingMonitor",
    "TrainingRun",
    "collect_activation_stats",
    "compare_models",
    "compare_runs",
    "find_nonfinite_gradient_origin",
    "find_nonfinite_origin",
    "load_replay",
    "most_drifted",
    "open_run",
    "precision_headroom",
    "relative_difference",
]
