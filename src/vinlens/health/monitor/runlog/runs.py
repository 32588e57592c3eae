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
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RunInfo", "new_run_id", "paths_digest", "run_infos"]


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


def run_infos(states: Iterable[tuple[int, str, Any]]) -> tuple[RunInfo, ...]:
    """The :class:`RunInfo` of each run key among ``(rank, run key, that rank's records of
    the run)``, oldest first (the key ``""``: a log written without run identity)."""
    by_key: dict[str, list[tuple[int, Any]]] = {}
    for rank, key, state in states:
        if state.meta:
            by_key.setdefault(key, []).append((rank, state))
    infos = []
    for key, found in by_key.items():
        firsts = [s.first_step for _, s in found if s.first_step is not None]
        lasts = [s.last_step for _, s in found if s.last_step >= 0]
        infos.append(
            RunInfo(
                key or None,
                tuple(rank for rank, _ in found),
                min(firsts) if firsts else None,
                max(lasts) if lasts else None,
                max(s.started for _, s in found),
                len(found[0][1].meta["module_paths"]),
            )
        )
    return tuple(sorted(infos, key=lambda info: info.started))
