"""Acquisition: a generation-bound request, per-shard partials (in process or on an executor), the fold.

The coordinator opens the store once (manifest, sample index, generation), chooses the
rows, and cuts the shards into tasks of consecutive shards. A task is plain data (the
store config, the request, the shard plans), so it pickles to any
``concurrent.futures.Executor``; a worker reopens the store through the reader (one
reader per worker thread and request, reused across its tasks), checks that it sees the
request's generation, and returns the partial of its shards. Partials are folded in
manifest shard order; the fold is exact and associative, so the record is equal (``==``)
with or without an executor, on any number of workers.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vinlens.operations import (
    CancelToken,
    OperationCancelled,
    ProgressCallback,
    check_executor,
    executor_workers,
    run_operation,
)
from vinlens.store.diagnostics.accumulators import StatsPartial
from vinlens.store.diagnostics.records import (
    BATCH_PREVIEW_SIZE,
    MAX_SAMPLE_SUMMARIES,
    VinOfflineBackboneDiagnostic,
    VinOfflineBlockDiagnostic,
    VinOfflineDatasetStats,
    VinOfflineDatasetStatsRequest,
    VinOfflineSampleDiagnostic,
    VinOfflineStoreReplacedError,
    VinOfflineStoreSelection,
    check_max_samples,
)
from vinlens.store.diagnostics.sampling import select_vin_offline_sample_indices
from vinlens.store.diagnostics.scan import ShardPlan, row_bytes, scan_shard
from vinlens.store.errors import StoreReplacedError, VinOfflineStoreError
from vinlens.store.format import BlockKind, VinOfflineStoreConfig, shard_dir
from vinlens.store.reader import (
    StoreGeneration,
    StoreIntegrityProblem,
    VinOfflineStoreReader,
    as_store_config,
    capture_store_generation,
)

__all__ = [
    "ShardTask",
    "build_stats_record",
    "capture_vin_offline_dataset_stats_request",
    "collect_vin_offline_dataset_stats",
    "dask_executor",
    "inspect_vin_offline_dataset_stats",
    "inspect_vin_offline_dataset_stats_with_progress",
    "run_shard_task",
]

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


# --------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------


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
        raise _replaced(task.request, "while it was being read (seen by a worker)")
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


# --------------------------------------------------------------------------------------
# Plans and the fold
# --------------------------------------------------------------------------------------


def _plans(reader: VinOfflineStoreReader, max_samples: int | None) -> list[ShardPlan]:
    """One plan per manifest shard (empty ones too: they still get integrity checks)."""
    samples = reader.samples
    groups = [(row.split, row.shard_id) for row in samples]
    selected = select_vin_offline_sample_indices(groups, max_samples)
    budget = MAX_SAMPLE_SUMMARIES if max_samples is None else min(max_samples, MAX_SAMPLE_SUMMARIES)
    summary = set(select_vin_offline_sample_indices(groups, budget))
    by_shard: dict[str, list[int]] = {}
    for index in selected:
        by_shard.setdefault(samples[index].shard_id, []).append(index)
    labels = reader.manifest.capabilities.scene_labels
    plans = []
    for shard in reader.manifest.shards:
        indices = sorted(by_shard.get(shard.shard_id, ()), key=lambda i: samples[i].row)
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


def _tasks(
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
    # Cut at equal shares of the bytes, not when a task reaches the budget: a short last
    # task leaves a worker idle for most of a task's time at the end of the scan.
    count = max(1, min(len(plans), -(-total // budget)))
    tasks: list[ShardTask] = []
    current: list[ShardPlan] = []
    size = 0
    for plan, plan_size in zip(plans, sizes, strict=True):
        current.append(plan)
        size += plan_size
        if (total and size * count >= total * (len(tasks) + 1)) or len(current) >= _TASK_SHARDS:
            tasks.append(ShardTask(config, request, tuple(current)))
            current = []
    if current:
        tasks.append(ShardTask(config, request, tuple(current)))
    return tasks


def _fold_in_process(
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


def _fold_on_executor(
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


# --------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------


def _batch_preview(
    reader: VinOfflineStoreReader, indices: Sequence[int], labels: bool
) -> tuple[dict[str, tuple[int, ...]], bool, StoreIntegrityProblem | None]:
    """Shapes of one real ``VinOracleBatch``: dataset samples through the dataset's collate.

    Rows come from ``read_sample`` of the already open (generation-checked) reader, the
    call ``VinOfflineDataset.__getitem__`` makes, turned into ``VinOracleSample`` tensors
    by the same ``to_oracle_sample``, and batched by ``collate_vin_oracle_batch``.
    """
    if not labels or not indices:
        return {}, False, None
    from vinlens.store.dataset import collate_vin_oracle_batch, to_oracle_sample

    items = []
    try:
        for index in indices:
            items.append(to_oracle_sample(reader.samples[index], reader.read_sample(index)))
        batch = collate_vin_oracle_batch(items)
    except (VinOfflineStoreError, ValueError, OSError) as exc:
        path = exc.path if isinstance(exc, VinOfflineStoreError) else reader.access.root
        problem = StoreIntegrityProblem(
            type(exc).__name__, None, None, path, f"batch preview failed: {exc}"
        )
        return {}, False, problem
    return batch.shapes(), True, None


def _manifest_blocks(
    reader: VinOfflineStoreReader,
) -> tuple[
    list[VinOfflineBlockDiagnostic], dict[str, tuple[int, ...]], int, list[StoreIntegrityProblem]
]:
    block_diagnostics: list[VinOfflineBlockDiagnostic] = []
    block_shapes: dict[str, tuple[int, ...]] = {}
    numeric_bytes = 0
    problems: list[StoreIntegrityProblem] = []
    for shard in reader.manifest.shards:
        for spec in shard.blocks:
            estimated = spec.estimated_bytes
            block_diagnostics.append(
                VinOfflineBlockDiagnostic(
                    shard_id=shard.shard_id,
                    name=spec.name,
                    kind=spec.kind.value,
                    dtype=spec.dtype,
                    shape=tuple(spec.shape),
                    optional=spec.optional,
                    estimated_bytes=estimated,
                )
            )
            if spec.kind is not BlockKind.ZARR_ARRAY:
                continue
            numeric_bytes += estimated or 0
            previous = block_shapes.get(spec.name)
            if previous is None:
                block_shapes[spec.name] = tuple(spec.shape)
            elif previous[1:] == spec.row_shape:
                block_shapes[spec.name] = (previous[0] + spec.num_rows, *spec.row_shape)
            else:
                problems.append(
                    StoreIntegrityProblem(
                        "BlockMismatchError",
                        shard.shard_id,
                        spec.name,
                        reader.access.describe("manifest.json"),
                        f"block {spec.name!r} of shard {shard.shard_id!r} has row shape "
                        f"{list(spec.row_shape)} but earlier shards store "
                        f"{list(previous[1:])}",
                    )
                )
    return block_diagnostics, block_shapes, numeric_bytes, problems


def build_stats_record(
    reader: VinOfflineStoreReader,
    partial: StatsPartial,
    request: VinOfflineDatasetStatsRequest,
) -> VinOfflineDatasetStats:
    """Finish every accumulator of the folded ``partial`` into the record."""
    manifest = reader.manifest
    samples = reader.samples
    labels = manifest.capabilities.scene_labels
    summary_rows = sorted(partial.labels.summary_rows | partial.vin_points.summary_rows)
    shapes, batch_ok, preview_problem = _batch_preview(
        reader, summary_rows[:BATCH_PREVIEW_SIZE], labels
    )
    block_diagnostics, block_shapes, numeric_bytes, shape_problems = _manifest_blocks(reader)
    integrity = partial.integrity
    integrity.nonfinite = partial.nonfinite()
    integrity.duplicate_ids.update(partial.labels.duplicate_ids)
    extra = ([preview_problem] if preview_problem is not None else []) + shape_problems
    problems = integrity.finish(lambda shard_id: reader.access.describe(shard_dir(shard_id)), extra)

    backbone = [
        VinOfflineBackboneDiagnostic(
            field=name,
            shape=shape,
            numel=_numel(shape),
            sampled_rows=rows,
            count=count,
            mean=mean,
            std=std,
            abs_mean=abs_mean,
            nz_frac=nz,
            minimum=low,
            maximum=high,
        )
        for name, shape, rows, (count, mean, std, abs_mean, nz), (low, high) in (
            partial.backbone.finish()
        )
    ]
    summaries = []
    for si in summary_rows:
        row = samples[si]
        summaries.append(
            VinOfflineSampleDiagnostic(
                sample_index=si,
                sample_key=row.sample_key,
                scene_id=row.scene_id,
                snippet_id=row.snippet_id,
                split=row.split,
                shard_id=row.shard_id,
                row=row.row,
                candidate_count=partial.labels.row_counts.get(si) if labels else None,
                rri=partial.labels.row_rri.get(si) if labels else None,
                vin_points=partial.vin_points.row_points.get(si),
            )
        )
    label_fields = partial.labels.finish()
    if not labels:
        label_fields["candidate_count"] = None
        label_fields["rri"] = None
    return VinOfflineDatasetStats(
        store_dir=str(reader.store_dir),
        version=manifest.version,
        num_samples=len(samples),
        sampled_samples=partial.rows_scanned,
        split_counts=dict(sorted(Counter(row.split for row in samples).items())),
        num_scenes=len({row.scene_id for row in samples}),
        num_snippets=len({(row.scene_id, row.snippet_id) for row in samples}),
        materialized_blocks=dict(manifest.materialized_blocks.model_dump()),
        numeric_bytes=numeric_bytes,
        block_shapes=block_shapes,
        block_diagnostics=block_diagnostics,
        sample_summaries=summaries,
        **label_fields,
        **partial.vin_points.finish(),
        **partial.poses.finish(),
        memory_diagnostics=partial.memory.finish(),
        backbone_diagnostics=backbone,
        scene_labels_available=labels,
        batch_shapes_available=batch_ok,
        batch_shapes=shapes,
        integrity_problems=problems,
        max_samples=request.max_samples,
        generation=request.generation.to_json_dict(),
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def capture_vin_offline_dataset_stats_request(
    store: VinOfflineStoreConfig | str | os.PathLike[str],
    *,
    max_samples: int | None = 512,
) -> VinOfflineDatasetStatsRequest:
    """Capture a root-only diagnostics request without reading payload arrays.

    Reads the top-level stats and the manifest bytes (for its SHA-256) only.
    """
    checked = check_max_samples(max_samples)
    config = as_store_config(store)
    generation = capture_store_generation(config)
    selection = VinOfflineStoreSelection(
        store_dir=generation.store_dir.path, storage_options=config.storage_options
    )
    return VinOfflineDatasetStatsRequest(
        selection=selection, generation=generation, max_samples=checked
    )


def _replaced(request: VinOfflineDatasetStatsRequest, when: str) -> VinOfflineStoreReplacedError:
    return VinOfflineStoreReplacedError(
        f"store was replaced or changed {when}",
        path=request.selection.store_dir,
        expected="the generation captured by the request "
        f"(manifest sha256 {request.generation.manifest_sha256[:12]}...)",
    )


def _current_generation(config: VinOfflineStoreConfig) -> StoreGeneration | None:
    try:
        return capture_store_generation(config)
    except (VinOfflineStoreError, OSError):
        return None


def inspect_vin_offline_dataset_stats(
    request: VinOfflineDatasetStatsRequest,
    executor: concurrent.futures.Executor | None = None,
) -> VinOfflineDatasetStats:
    """Acquire detached root statistics while rejecting pre-read or mid-read replacement.

    The path's generation must equal the request's before reading; the reader's
    generation (taken from the very handles it read ``manifest.json`` and
    ``sample_index.jsonl`` through) must too, in the caller and in every worker; and so
    must the path's generation after everything was read. Otherwise
    :class:`VinOfflineStoreReplacedError` is raised and nothing is returned. Errors met
    while reading a store that was replaced meanwhile are reported as that replacement.

    ``executor`` (any ``concurrent.futures.Executor``: a ``ProcessPoolExecutor``, or
    ``distributed.Client(...).get_executor()``) runs the per-shard partials; ``None``
    runs them here. The record is equal (``==``) either way; anything else is a
    ``TypeError`` naming what is accepted.
    """
    check_executor(executor)
    return inspect_vin_offline_dataset_stats_with_progress(request, None, executor=executor)


def inspect_vin_offline_dataset_stats_with_progress(
    request: VinOfflineDatasetStatsRequest,
    progress_cb: Callable[[int, int], None] | None,
    *,
    executor: concurrent.futures.Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> VinOfflineDatasetStats:
    """:func:`inspect_vin_offline_dataset_stats` calling ``progress_cb(rows_done, rows_total)``.

    ``progress_cb(rows_done: int, rows_total: int) -> None`` is called on the calling
    thread: once with ``rows_done=0`` before any row is read, then each time a shard (in
    process) or a task of consecutive shards (on an ``executor``) finishes, in the order
    they finish, with the rows scanned so far; ``rows_total`` is the number of rows the
    request's ``max_samples`` selects. An exception raised by the callback (a cancel)
    stops the acquisition: pending tasks are cancelled and the exception propagates. A set
    ``cancel`` (a :class:`~vinlens.operations.CancelToken` or ``threading.Event``) stops it
    the same way between tasks, raising :class:`~vinlens.operations.OperationCancelled`.
    """
    check_executor(executor)
    # The config travels to workers: a path or URL plus storage options, never a handle.
    config = VinOfflineStoreConfig(
        store_dir=request.selection.store_dir,
        storage_options=request.selection.storage_options,
    )
    if _current_generation(config) != request.generation:
        raise _replaced(request, "before the read started")
    try:
        reader = VinOfflineStoreReader(config)
    except (VinOfflineStoreError, OSError) as exc:
        if _current_generation(config) != request.generation:
            raise _replaced(request, "while it was being opened") from exc
        raise
    try:
        if reader.generation != request.generation:
            raise _replaced(request, "between the request and the read")
        try:
            plans = _plans(reader, request.max_samples)
            if executor is None:
                partial = _fold_in_process(reader, plans, progress_cb, cancel)
            else:
                try:
                    partial = _fold_on_executor(
                        executor,
                        _tasks(reader, config, request, plans, executor_workers(executor)),
                        progress_cb,
                        cancel,
                    )
                finally:
                    release_worker_readers(request)
            result = build_stats_record(reader, partial, request)
        except (VinOfflineStoreReplacedError, OperationCancelled):
            raise
        except Exception as exc:
            if _current_generation(config) != request.generation:
                raise _replaced(request, "while it was being read") from exc
            raise
        try:
            reader.check_generation()
        except StoreReplacedError as exc:
            raise _replaced(request, "while it was being read") from exc
        if _current_generation(config) != request.generation:
            raise _replaced(request, "while it was being read")
        return result
    finally:
        reader.close()


def collect_vin_offline_dataset_stats(
    store: VinOfflineStoreConfig | str | os.PathLike[str],
    *,
    max_samples: int | None = 512,
    executor: concurrent.futures.Executor | None = None,
) -> VinOfflineDatasetStats:
    """Collect coverage, shape, RRI, and memory diagnostics for a VIN store.

    ``max_samples`` caps the rows scanned for per-sample tensor statistics (chosen as the
    package docstring describes); ``None`` scans the whole store with bounded memory;
    ``0`` reads no payload rows. ``executor`` runs per-shard partials on any
    ``concurrent.futures.Executor`` (see :func:`inspect_vin_offline_dataset_stats`).
    Equivalent to capturing a request and inspecting it at once.
    """
    check_executor(executor)
    request = capture_vin_offline_dataset_stats_request(store, max_samples=max_samples)
    return inspect_vin_offline_dataset_stats(request, executor=executor)


#: Seconds :func:`dask_executor` waits for a scheduler's first worker by default.
DASK_WORKER_TIMEOUT = 30.0


@contextlib.contextmanager
def dask_executor(
    address: str | None = None, *, worker_timeout: float = DASK_WORKER_TIMEOUT, **client_kwargs: Any
) -> Iterator[concurrent.futures.Executor]:
    """A ``concurrent.futures.Executor`` on a Dask cluster, for ``with`` blocks.

    ``address`` is the scheduler's (``None`` starts a local cluster); ``client_kwargs``
    go to ``distributed.Client``. The block starts once the scheduler has a worker: a
    scheduler with none after ``worker_timeout`` seconds raises ``TimeoutError`` naming
    its address and worker count (tasks sent to it would wait forever). The client
    closes when the block ends. Needs the ``vinlens[dask]`` extra.
    """
    if isinstance(worker_timeout, bool) or not isinstance(worker_timeout, int | float):
        raise TypeError(f"worker_timeout must be a number of seconds, got {worker_timeout!r}")
    if not worker_timeout > 0:
        raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout!r}")
    try:
        # Imported by name: distributed ships no type hints, and it is an optional extra.
        distributed: Any = importlib.import_module("distributed")
    except ImportError as exc:
        raise ImportError(
            "Dask executors need the optional dask extra: pip install 'vinlens[dask]'"
        ) from exc
    client = distributed.Client(address, **client_kwargs)
    try:
        try:
            client.wait_for_workers(1, timeout=worker_timeout)
        except TimeoutError:
            raise _no_workers(client, address, worker_timeout) from None
        yield client.get_executor()
    finally:
        client.close()


def _no_workers(client: Any, address: str | None, timeout: float) -> TimeoutError:
    where = address
    try:
        info = client.scheduler_info()
        count = len(info.get("workers", {}))
        where = info.get("address") or address
    except Exception:  # the scheduler went away while we asked: say what we know
        count = 0
    return TimeoutError(
        f"the Dask scheduler at {where} has {count} worker{'s' if count != 1 else ''} after "
        f"waiting {timeout:g} s; start a worker (dask worker {where}) or use a scheduler "
        "that has workers"
    )
