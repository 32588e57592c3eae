"""Run identity: which run each segment of a log directory belongs to.

Every writer stamps its segments with a run identity: a random id and a digest of the
module paths it watches. A directory reused for another run (a changed model, a segment
copied in, two monitors on one directory) then holds several runs, and the reader keeps
each in its own series. A restarted script is the same run when its monitor is built with
``resume=True``: it takes the latest run's id (refused when that run watched other module
paths) and numbers its steps on from the last one logged. Without ``resume`` a monitor
starts a new run. A log written without identity is one run, ``run_id`` None.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RunInfo", "new_run_id", "paths_digest", "resume_point"]


@dataclass(frozen=True)
class RunInfo:
    """One run in a log directory.

    Attributes:
        run_id: The run's id (None for a log written without run identity).
        ranks: The ranks that wrote to it.
        first_step: Its first step logged (None before any).
        last_step: Its last step logged (None before any).
        started: When its latest writer started (seconds since the epoch).
        module_count: How many module paths it watches.
    """

    run_id: str | None
    ranks: tuple[int, ...]
    first_step: int | None
    last_step: int | None
    started: float
    module_count: int


def paths_digest(module_paths: Sequence[str]) -> str:
    """A digest of the watched module paths, in order (16 hex digits)."""
    joined = "\n".join(module_paths).encode()
    return hashlib.sha256(joined).hexdigest()[:16]


def new_run_id(collective: bool) -> str:
    """A fresh run id; with ``collective`` (every rank builds the monitor and the ranks
    agree on each step), rank 0's, so all ranks of one run share it."""
    run_id = uuid.uuid4().hex
    if collective:
        import torch.distributed as dist

        box: list[object] = [run_id]
        dist.broadcast_object_list(box, src=0)
        run_id = str(box[0])
    return run_id


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
    from vinlens.health.monitor.runlog.reader import TrainingRun

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
