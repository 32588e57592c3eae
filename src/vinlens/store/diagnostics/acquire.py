"""Acquisition: a generation-bound request, per-shard partials (in process or on an executor), the fold.

The coordinator opens the store once (manifest, sample index, generation), chooses the
rows, and cuts the shards into tasks of consecutive shards (:mod:`.tasks`: plain data a
worker runs after reopening the store and checking its generation). Partials are folded
in manifest shard order; the fold is exact and associative, so the record is equal
(``==``) with or without an executor, on any number of workers. :mod:`.build` turns the
folded partial into the record; :mod:`.executors` holds the Dask executor.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable

from vinlens.operations import (
    CancelToken,
    OperationCancelled,
    check_executor,
    executor_workers,
)
from vinlens.store.diagnostics.build import build_stats_record
from vinlens.store.diagnostics.executors import dask_executor
from vinlens.store.diagnostics.records import (
    VinOfflineDatasetStats,
    VinOfflineDatasetStatsRequest,
    VinOfflineStoreSelection,
    check_max_samples,
)
from vinlens.store.diagnostics.tasks import (
    ShardTask,
    fold_in_process,
    fold_on_executor,
    release_worker_readers,
    replaced_error,
    run_shard_task,
    shard_plans,
    shard_tasks,
)
from vinlens.store.errors import (
    StoreReplacedError,
    VinOfflineStoreError,
    VinOfflineStoreReplacedError,
)
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import (
    StoreGeneration,
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
        raise replaced_error(request, "before the read started")
    try:
        reader = VinOfflineStoreReader(config)
    except (VinOfflineStoreError, OSError) as exc:
        if _current_generation(config) != request.generation:
            raise replaced_error(request, "while it was being opened") from exc
        raise
    try:
        if reader.generation != request.generation:
            raise replaced_error(request, "between the request and the read")
        try:
            plans = shard_plans(reader, request.max_samples)
            if executor is None:
                partial = fold_in_process(reader, plans, progress_cb, cancel)
            else:
                try:
                    partial = fold_on_executor(
                        executor,
                        shard_tasks(reader, config, request, plans, executor_workers(executor)),
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
                raise replaced_error(request, "while it was being read") from exc
            raise
        try:
            reader.check_generation()
        except StoreReplacedError as exc:
            raise replaced_error(request, "while it was being read") from exc
        if _current_generation(config) != request.generation:
            raise replaced_error(request, "while it was being read")
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
