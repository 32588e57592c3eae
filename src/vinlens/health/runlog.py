"""The run log's public names at the import path they had before the monitor became a
package (:mod:`vinlens.health.monitor.runlog` is where they live)."""

from __future__ import annotations

from vinlens.health.monitor.runlog import (
    DEFAULT_FLUSH_INTERVAL,
    DEFAULT_REPLAY_MAX_BYTES,
    Replay,
    RunLogError,
    StepSeries,
    TrainingRun,
    load_replay,
    open_run,
)

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_REPLAY_MAX_BYTES",
    "Replay",
    "RunLogError",
    "StepSeries",
    "TrainingRun",
    "load_replay",
    "open_run",
]
