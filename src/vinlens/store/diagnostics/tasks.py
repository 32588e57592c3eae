"""Tasks of the statistics scan: shard plans, tasks of consecutive shards, the workers' readers, the folds.

A task is plain data (the store config, the request, the shard plans), so it pickles to
any ``concurrent.futures.Executor``; a worker reopens the store through the reader (one
reader per worker thread and request, reused across its tasks), checks that it sees the
request's generation, and returns the partial of its shards.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass

from vinlens.operations import (
    CancelToken,
    ProgressCallback,
    run_operation,
)
from vinlens.store.diagnostics.accumulators import StatsPartial
from vinlens.store.diagnostics.records import (
    MAX_SAMPLE_SUMMARIES,
    VinOfflineDatasetStatsRequest,
)
from vinlens.store.diagnostics.sampling import select_vin_offline_sample_indices
from vinlens.store.diagnostics.scan import ShardPlan, scan_shard
from vinlens.store.diagnostics.shard_reads import (
    consecutive_groups,
    row_bytes,
    selected_by_shard,
)
from vinlens.store.errors import VinOfflineStoreReplacedError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import (
    VinOfflineStoreReader,
)

#: Tasks per worker: each task returns a partial (about 1.6 MB pickled on a VIN store) that
#: the coordinator unpickles and merges on the same cores the workers use, so a task per
#: ~9 MB shard spent a third of the 2-worker speed-up there; a few tasks per worker keep
#: that cost small and still balance the load and report progress several times a worker.
_TASKS_PER_WORKER = 4
#: Consecutive shards are grouped until a task reads at least this many payload bytes...
_TASK_BYTES = 8 << 20
#: ... and at most this many (progress on very large stores) ...
_TASK_MAX_BYTES = 256 << 20
#: ... or holds this many shards (integrity checks of shards with no selected rows).
_TASK_SHARDS = 64
#: Tasks submitted ahead of the fold: bounds the partials held by the coordinator.
_IN_FLIGHT = 32


@dataclass(frozen=True)
class ShardTask:
    """One executor task: plain, picklable data; the worker reopens the store itself."""

    config: VinOfflineStoreConfig
    request: VinOfflineDatasetStatsRequest
    plans: tuple[ShardPlan, ...]

    @property
    def rows(self) -> int:
        return sum(len(plan.rows) for plan in self.plans)


# One reader per worker thread and request: it parses the sample index once per request,
# not once per task. In a process pool the worker's reader lives until the next request;
# readers opened by threads of the coordinating process (a thread pool) are released when
# the request's fold ends, so no thread keeps a store open after the call.
class _CachedReader:
    __slots__ = ("busy", "reader", "released")

    def __init__(self, reader: VinOfflineStoreReader) -> None:
        self.reader = reader
        self.busy = True
        self.released = False


_readers_lock = threading.Lock()
_readers: dict[tuple[int, str], _CachedReader] = {}


def _acquire_reader(task: ShardTask) -> _CachedReader:
    """This thread's reader for the task's request, marked busy (opened once per request)."""
    thread = threading.get_ident()
    key = (thread, task.request.digest())
    stale: list[_CachedReader] = []
    with _readers_lock:
        entry = _readers.get(key)
        if entry is not None:
            entry.busy = True
            return entry
        for other in [k for k in _readers if k[0] == thread]:
            stale.append(_readers.pop(other))
    for old in stale:
        old.reader.close()
    reader = VinOfflineStoreReader(task.config)
    if reader.generation != task.request.generation:
        reader.close()
        raise replaced_error(task.request, "while it was being read (seen by a worker)")
    entry = _CachedReader(reader)
    with _readers_lock:
        _readers[key] = entry
    return entry


def _release_task_reader(entry: _CachedReader) -> None:
    with _readers_lock:
        entry.busy = False
        close = entry.released
    if close:
        entry.reader.close()


def release_worker_readers(request: VinOfflineDatasetStatsRequest) -> None:
    """Close this process's cached readers of ``request`` (a busy one when its task ends)."""
    digest = request.digest()
    idle: list[_CachedReader] = []
    with _readers_lock:
        for key in [k for k in _readers if k[1] == digest]:
            entry = _readers.pop(key)
            entry.released = True
            if not entry.busy:
                idle.append(entry)
    for entry in idle:
        entry.reader.close()


def run_shard_task(task: ShardTask) -> StatsPartial:
    """The partial of a task's shards (what an executor runs; see :class:`ShardTask`)."""
    entry = _acquire_reader(task)
    try:
        partial: StatsPartial | None = None
        for plan in task.plans:
            part = scan_shard(entry.reader, plan)
            partial = part if partial is None else partial.merge(part)
    finally:
        _release_task_reader(entry)
    return partial if partial is not None else StatsPartial()


def shard_plans(reader: VinOfflineStoreReader, max_samples: int | None) -> list[ShardPlan]:
    """One plan per manifest shard (empty ones too: they still get integrity checks)."""
    samples = reader.samples
    groups = [(row.split, row.shard_id) for row in samples]
    selected = select_vin_offline_sample_indices(groups, max_samples)
    budget = MAX_SAMPLE_SUMMARIES if max_samples is None else min(max_samples, MAX_SAMPLE_SUMMARIES)
    summary = set(select_vin_offline_sample_indices(groups, budget))
    by_shard = selected_by_shard(samples, selected)
    labels = reader.manifest.capabilities.scene_labels
    plans = []
    for shard in reader.manifest.shards:
        indices = by_shard.get(shard.shard_id, [])
        plans.append(
            ShardPlan(
                shard_id=shard.shard_id,
                rows=tuple(samples[i].row for i in indices),
                sample_indices=tuple(indices),
                summary_rows=frozenset(i for i in indices if i in summary),
                labels=labels,
                num_candidates=reader.manifest.num_candidates,
            )
        )
    return plans


def shard_tasks(
    reader: VinOfflineStoreReader,
    config: VinOfflineStoreConfig,
    request: VinOfflineDatasetStatsRequest,
    plans: list[ShardPlan],
    workers: int,
) -> list[ShardTask]:
    """Consecutive shards per task, about ``_TASKS_PER_WORKER`` tasks per worker."""
    sizes = [
        len(plan.rows) * sum(row_bytes(spec) for spec in reader.shard(plan.shard_id).blocks)
        for plan in plans
    ]
    total = sum(sizes)
    target = -(-total // (workers * _TASKS_PER_WORKER))
    budget = min(_TASK_MAX_BYTES, max(_TASK_BYTES, target))
    count = max(1, min(len(plans), -(-total // budget)))
    groups = consecutive_groups(plans, sizes, count, _TASK_SHARDS)
    return [ShardTask(config, request, group) for group in groups]


def fold_in_process(
    reader: VinOfflineStoreReader,
    plans: list[ShardPlan],
    progress_cb: ProgressCallback | None,
    cancel: CancelToken | threading.Event | None,
) -> StatsPartial:
    """One task per shard, here, on the already open reader."""
    return run_operation(
        plans,
        lambda plan: scan_shard(reader, plan),
        start=StatsPartial,
        progress=progress_cb,
        cancel=cancel,
        weight=lambda plan: len(plan.rows),
    )


def fold_on_executor(
    executor: concurrent.futures.Executor,
    tasks: list[ShardTask],
    progress_cb: ProgressCallback | None,
    cancel: CancelToken | threading.Event | None,
) -> StatsPartial:
    """Run tasks on ``executor``; fold results in task order; report progress as they finish."""
    return run_operation(
        tasks,
        run_shard_task,
        start=StatsPartial,
        executor=executor,
        progress=progress_cb,
        cancel=cancel,
        weight=lambda task: task.rows,
        max_in_flight=_IN_FLIGHT,
    )


def replaced_error(
    request: VinOfflineDatasetStatsRequest, when: str
) -> VinOfflineStoreReplacedError:
    return VinOfflineStoreReplacedError(
        f"store was replaced or changed {when}",
        path=request.selection.store_dir,
        expected="the generation captured by the request "
        f"(manifest sha256 {request.generation.manifest_sha256[:12]}...)",
    )
