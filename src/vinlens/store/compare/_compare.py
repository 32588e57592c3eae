"""``compare_vin_offline_stores``: both stores' tasks, partials and fold, and the record.

Part of :mod:`vinlens.store.compare` (its docstring maps the package).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator

from vinlens.operations import (
    CancelToken,
    OperationCancelled,
    ProgressCallback,
    check_executor,
    executor_workers,
    run_operation,
)
from vinlens.store.compare._binning import (
    FLOAT32_RELATIVE_RESOLUTION,
    PSI_BINS,
    PSI_EPSILON,
    FieldHistogram,
    drift_metrics,
)
from vinlens.store.compare._records import DRIFT_METRICS, FieldDrift, StoreComparison
from vinlens.store.compare._scan import (
    CAMERA_AXIS_MAX,
    ComparePartial,
    CompareTask,
    SidePartial,
    compare_plans,
    compare_tasks,
    replaced_error,
    run_compare_task,
    scan_task,
)
from vinlens.store.diagnostics.records import check_max_samples
from vinlens.store.errors import (
    StoreReplacedError,
    VinOfflineStoreError,
    VinOfflineStoreReplacedError,
)
from vinlens.store.format import VinOfflineStoreConfig, shard_dir
from vinlens.store.reader import (
    StoreGeneration,
    StoreIntegrityProblem,
    VinOfflineStoreReader,
    as_store_config,
    capture_store_generation,
)

__all__ = [
    "CAMERA_AXIS_MAX",
    "DRIFT_METRICS",
    "FLOAT32_RELATIVE_RESOLUTION",
    "PSI_BINS",
    "PSI_EPSILON",
    "FieldDrift",
    "StoreComparison",
    "compare_vin_offline_stores",
]

StoreLike = VinOfflineStoreConfig | str | os.PathLike[str]


def _pinned(store: StoreLike) -> tuple[VinOfflineStoreConfig, StoreGeneration]:
    """The config workers get (the canonical path or URL) and the generation seen now."""
    config = as_store_config(store)
    generation = capture_store_generation(config)
    return (
        VinOfflineStoreConfig(
            store_dir=generation.store_dir.path, storage_options=config.storage_options
        ),
        generation,
    )


def _current(config: VinOfflineStoreConfig) -> StoreGeneration | None:
    try:
        return capture_store_generation(config)
    except (VinOfflineStoreError, OSError):
        return None


@contextlib.contextmanager
def _open_pinned(
    config: VinOfflineStoreConfig, generation: StoreGeneration
) -> Iterator[VinOfflineStoreReader]:
    try:
        reader = VinOfflineStoreReader(config)
    except (VinOfflineStoreError, OSError) as exc:
        if _current(config) != generation:
            raise replaced_error(str(config.store_dir), generation, "while it was opened") from exc
        raise
    try:
        if reader.generation != generation:
            raise replaced_error(str(config.store_dir), generation, "before the read started")
        yield reader
    finally:
        reader.close()


def _check_after(
    reader: VinOfflineStoreReader, config: VinOfflineStoreConfig, pinned: StoreGeneration
) -> None:
    try:
        reader.check_generation()
    except StoreReplacedError as exc:
        raise replaced_error(str(config.store_dir), pinned, "while it was being read") from exc
    if _current(config) != pinned:
        raise replaced_error(str(config.store_dir), pinned, "while it was being read")


def _field_drift(name: str, a: FieldHistogram | None, b: FieldHistogram | None) -> FieldDrift:
    sa = a.summary() if a is not None else None
    sb = b.summary() if b is not None else None
    present = [s for s in (sa, sb) if s is not None]
    if sa is None or sb is None:
        only = present[0]
        empty = FieldHistogram(only.kind, only.dtype).summary()
        sa, sb = (only, empty) if sa is not None else (empty, only)
    metrics = drift_metrics(sa, sb)
    return FieldDrift(
        name=name,
        count_a=sa.count,
        count_b=sb.count,
        mean_a=sa.mean,
        mean_b=sb.mean,
        std_a=sa.std,
        std_b=sb.std,
        psi=metrics.psi,
        js_distance=metrics.js_distance,
        wasserstein=metrics.wasserstein,
        ks_statistic=metrics.ks_statistic,
        dtype_a=a.dtype if a is not None else None,
        dtype_b=b.dtype if b is not None else None,
        exact=metrics.exact,
        histogram_edges=metrics.edges,
        histogram_a=metrics.display_a,
        histogram_b=metrics.display_b,
    )


def _problems(
    reader: VinOfflineStoreReader, side: SidePartial
) -> tuple[StoreIntegrityProblem, ...]:
    return tuple(side.integrity.finish(lambda s: reader.access.describe(shard_dir(s)), []))


def compare_vin_offline_stores(
    store_a: StoreLike,
    store_b: StoreLike,
    *,
    max_samples: int | None = 512,
    executor: concurrent.futures.Executor | None = None,
    progress_cb: ProgressCallback | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> StoreComparison:
    """Compare store B with store A, field by field, and their sample and scene sets.

    Each store is a :class:`~vinlens.store.format.VinOfflineStoreConfig` (a path, or an
    fsspec URL with ``storage_options``) or a path; the two may live on different file
    systems. ``max_samples`` rows of each store are scanned, chosen by the store
    statistics' rule (``None`` reads every row). ``executor`` (any
    ``concurrent.futures.Executor``) computes the partials of both stores on its workers;
    they are folded in manifest shard order (A's shards, then B's), so the record equals
    (``==``) the in-process one. ``progress_cb(done, total)`` counts scanned rows of both
    stores; an exception it raises (a cancel) stops the scan and propagates, as does a set
    ``cancel`` (a :class:`~vinlens.operations.CancelToken` or ``threading.Event``, checked
    between tasks: :class:`~vinlens.operations.OperationCancelled`).

    Raises:
        VinOfflineStoreReplacedError: a store was replaced or changed before or during
            the read (nothing is returned).
        ValueError: a bad ``max_samples``; TypeError: a bad ``executor``.
    """
    checked = check_max_samples(max_samples)
    executor = check_executor(executor)
    config_a, pinned_a = _pinned(store_a)
    config_b, pinned_b = _pinned(store_b)
    with _open_pinned(config_a, pinned_a) as reader_a, _open_pinned(config_b, pinned_b) as reader_b:
        sides = {"a": (reader_a, config_a, pinned_a), "b": (reader_b, config_b, pinned_b)}
        try:
            partial = _scan_both(sides, checked, executor, progress_cb, cancel)
        except (VinOfflineStoreReplacedError, OperationCancelled):
            raise
        except Exception as exc:
            for config, pinned in ((config_a, pinned_a), (config_b, pinned_b)):
                if _current(config) != pinned:
                    raise replaced_error(
                        str(config.store_dir), pinned, "while it was being read"
                    ) from exc
            raise
        result = _comparison(sides, partial, checked)
        _check_after(reader_a, config_a, pinned_a)
        _check_after(reader_b, config_b, pinned_b)
        return result


_Side = tuple[VinOfflineStoreReader, VinOfflineStoreConfig, StoreGeneration]


def _scan_both(
    sides: dict[str, _Side],
    max_samples: int | None,
    executor: concurrent.futures.Executor | None,
    progress_cb: ProgressCallback | None,
    cancel: CancelToken | threading.Event | None,
) -> ComparePartial:
    """Both stores' partials: one task per shard here, or tasks of shards on ``executor``."""
    plans = {side: compare_plans(reader, max_samples) for side, (reader, _, _) in sides.items()}
    if executor is None:
        tasks = [
            CompareTask(side, config, pinned, (plan,))
            for side, (_, config, pinned) in sides.items()
            for plan in plans[side]
        ]
        return run_operation(
            tasks,
            lambda task: scan_task(sides[task.side][0], task),
            start=ComparePartial,
            progress=progress_cb,
            cancel=cancel,
            weight=lambda task: task.rows,
        )
    workers = executor_workers(executor)
    tasks = [
        task
        for side, (_, config, pinned) in sides.items()
        for task in compare_tasks(side, config, pinned, plans[side], workers)
    ]
    return run_operation(
        tasks,
        run_compare_task,
        start=ComparePartial,
        executor=executor,
        progress=progress_cb,
        cancel=cancel,
        weight=lambda task: task.rows,
    )


def _comparison(
    sides: dict[str, _Side], partial: ComparePartial, max_samples: int | None
) -> StoreComparison:
    """The record: field drifts from the folded partials, sample and scene sets from the indices."""
    (reader_a, _, pinned_a), (reader_b, _, pinned_b) = sides["a"], sides["b"]
    names = sorted(set(partial.a.fields) | set(partial.b.fields))
    fields = tuple(_field_drift(n, partial.a.fields.get(n), partial.b.fields.get(n)) for n in names)
    keys_a = {row.sample_key for row in reader_a.samples}
    keys_b = {row.sample_key for row in reader_b.samples}
    scenes_a = {row.scene_id for row in reader_a.samples}
    scenes_b = {row.scene_id for row in reader_b.samples}
    only_a = tuple(sorted(keys_a - keys_b))
    only_b = tuple(sorted(keys_b - keys_a))
    return StoreComparison(
        store_a=str(reader_a.store_dir),
        store_b=str(reader_b.store_dir),
        fields=fields,
        samples_only_in_a=len(only_a),
        samples_only_in_b=len(only_b),
        scenes_only_in_a=tuple(sorted(scenes_a - scenes_b)),
        scenes_only_in_b=tuple(sorted(scenes_b - scenes_a)),
        split_counts_a=dict(sorted(Counter(r.split for r in reader_a.samples).items())),
        split_counts_b=dict(sorted(Counter(r.split for r in reader_b.samples).items())),
        problems_a=_problems(reader_a, partial.a),
        problems_b=_problems(reader_b, partial.b),
        sample_keys_only_in_a=only_a,
        sample_keys_only_in_b=only_b,
        num_samples_a=len(reader_a.samples),
        num_samples_b=len(reader_b.samples),
        sampled_samples_a=partial.a.rows_scanned,
        sampled_samples_b=partial.b.rows_scanned,
        max_samples=max_samples,
        generation_a=pinned_a.to_json_dict(),
        generation_b=pinned_b.to_json_dict(),
    )
