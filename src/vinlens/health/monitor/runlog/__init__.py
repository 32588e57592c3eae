"""The run log: a training run's records, which a notebook opens while they grow.

``TrainingMonitor(log_dir=...)`` writes, per rank, segments of length-prefixed,
CRC-checked records (:mod:`~vinlens.health.monitor.runlog.format`, written by
:mod:`~vinlens.health.monitor.runlog.writer`), each segment stamped with its run's identity
(:mod:`~vinlens.health.monitor.runlog.runs`); :func:`open_run` reads one run back as the
monitor's own records (:mod:`~vinlens.health.monitor.runlog.reader`), skipping and
reporting damaged records (:mod:`~vinlens.health.monitor.runlog.records_scan`).
"""

from __future__ import annotations

from vinlens.health.monitor.runlog.compare import (
    Cause,
    ModuleDivergence,
    RunDivergence,
    compare_runs,
    relative_difference,
)
from vinlens.health.monitor.runlog.fingerprints import Fingerprints
from vinlens.health.monitor.runlog.reader import StepSeries, TrainingRun, open_run
from vinlens.health.monitor.runlog.records_scan import RunDamage
from vinlens.health.monitor.runlog.replay import DEFAULT_REPLAY_MAX_BYTES, Replay, load_replay
from vinlens.health.monitor.runlog.runs import RunInfo
from vinlens.health.monitor.runlog.view import RankView
from vinlens.health.monitor.runlog.writer import DEFAULT_FLUSH_INTERVAL, RunLogError

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_REPLAY_MAX_BYTES",
    "Cause",
    "Fingerprints",
    "ModuleDivergence",
    "RankView",
    "Replay",
    "RunDamage",
    "RunDivergence",
    "RunInfo",
    "RunLogError",
    "StepSeries",
    "TrainingRun",
    "compare_runs",
    "load_replay",
    "open_run",
    "relative_difference",
]
