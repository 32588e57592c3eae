"""Resuming a run: where a restarted script's monitor continues the latest run of its
log directory (see :mod:`~vinlens.health.monitor.runlog.runs`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vinlens.health.monitor.runlog.reader import TrainingRun

__all__ = ["resume_point"]


def resume_point(
    log_dir: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None,
    module_paths: Sequence[str],
) -> tuple[str | None, int] | None:
    """``(run_id, first step)`` for a monitor resuming the latest run of ``log_dir``, or
    None when the directory holds no run yet.

    Raises:
        ValueError: the latest run watched other module paths than ``module_paths``.
    """
    try:
        run = TrainingRun(log_dir, storage_options=storage_options)
    except FileNotFoundError:
        return None
    logged = run.module_paths
    if tuple(logged) != tuple(module_paths):
        missing = [p for p in module_paths if p not in logged][:3]
        extra = [p for p in logged if p not in module_paths][:3]
        raise ValueError(
            f"resume=True: the latest run in {run.log_dir!r} (run {run.run_id}) watched"
            f" {len(logged)} module paths and this monitor watches {len(module_paths)}"
            f" (the model's only: {missing}; the run's only: {extra}); resume a run of the"
            " same model, or leave resume False to start a new run in the directory"
        )
    (info,) = (info for info in run.runs if info.run_id == run.run_id)
    return run.run_id, (0 if info.last_step is None else info.last_step + 1)
