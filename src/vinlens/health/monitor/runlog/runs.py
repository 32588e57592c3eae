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
import itertools
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


#: Monitors this process built with a log under an initialized process group: the ranks
#: build their monitors in the same order, so the n-th of each rank is the same run.
_GENERATION = itertools.count()


def new_run_id() -> str:
    """A fresh run id. Under an initialized ``torch.distributed`` process group the ranks
    share one: the first rank to ask puts its id in the group's key-value store
    (``compare_set``, no collective: a rank that builds no monitor blocks nobody) and
    every rank reads it back."""
    run_id = uuid.uuid4().hex
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return run_id
    key = f"vinlens/run_id/{next(_GENERATION)}"
    try:
        store = dist.distributed_c10d._get_default_store()
        shared = store.compare_set(key, "", run_id)
    except (AttributeError, RuntimeError, ValueError):
        return run_id  # no store to share through: each rank's run is its own
    return shared.decode() if isinstance(shared, bytes) else str(shared)


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
