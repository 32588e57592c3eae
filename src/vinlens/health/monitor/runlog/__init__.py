"""The training flight recorder: a run log a notebook opens while it grows.

``TrainingMonitor(log_dir=...)`` writes, per rank, segments of length-prefixed,
CRC-checked records (:mod:`~vinlens.health.monitor.runlog.format`, written by
:mod:`~vinlens.health.monitor.runlog.writer`); :func:`open_run` reads them back as the monitor's
own records (:mod:`~vinlens.health.monitor.runlog.reader`).
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
from vinlens.health.monitor.runlog.replay import DEFAULT_REPLAY_MAX_BYTES, Replay, load_replay
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
    "RunDivergence",
    "RunLogError",
    "StepSeries",
    "TrainingRun",
    "compare_runs",
    "load_replay",
    "open_run",
    "relative_difference",
]
