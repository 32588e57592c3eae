"""Raw-dataset coverage: the raw tars' snippets against a store's sample index, per scene.

Part of :mod:`vinlens.store.coverage` (its docstring states the rules).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from vinlens.operations import CancelToken, check_executor
from vinlens.store.coverage._keys import display_name
from vinlens.store.coverage._rawscan import raw_partials
from vinlens.store.coverage._records import (
    MAX_COVERAGE_EXAMPLES,
    SnippetPair,
    VinOfflineCoverageSceneDiagnostic,
    VinOfflineCoverageStats,
)
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader, as_store_config


def collect_vin_offline_dataset_coverage(
    store: VinOfflineStoreConfig,
    *,
    max_tars: int | None = None,
    progress_cb: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> VinOfflineCoverageStats:
    """Compare raw ASE tar-header coverage against an immutable VIN store.

    ``store.raw_dataset_dir`` names the raw dataset (a directory or an fsspec URL; URLs use
    ``store.storage_options``). ``max_tars`` caps the shards scanned (the first ones in
    sorted path order). ``progress_cb(done, total)`` is called with ``done=0`` before the
    first tar and after each tar finishes (in completion order with an executor).
    ``executor`` is any :class:`concurrent.futures.Executor` (a process pool, or
    ``distributed.Client(...).get_executor()``): each task carries the raw dataset's
    location, storage options and one tar's relative path, never an open handle, and the
    record is equal (``==``) with or without it. Each tar's partial is cached in this process
    by (URL or path, size, ETag/version or inode times), so a rescan of unchanged tars reads
    nothing but the listing. ``cancel`` (a :class:`~vinlens.operations.CancelToken` or a
    ``threading.Event``) stops the scan between tars: queued tars are dropped and
    :class:`~vinlens.operations.OperationCancelled` is raised.

    A tar that cannot be scanned (truncated, corrupt, hostile headers, not a regular file)
    raises an error naming it; a store replaced while coverage was computed raises
    :class:`~vinlens.store.format.StoreReplacedError`; an ``executor`` other than ``None``
    or an ``Executor`` instance is a ``TypeError`` naming what is accepted.
    """
    check_executor(executor)
    config = as_store_config(store)
    if config.raw_dataset_dir is None:
        raise ValueError(
            f"{config.store_dir}: coverage needs the raw dataset directory "
            "(VinOfflineStoreConfig.raw_dataset_dir, or --raw DIR on the command line)"
        )
    if max_tars is not None and max_tars < 0:
        raise ValueError(f"max_tars must be None or >= 0, got {max_tars}")

    with VinOfflineStoreReader(config) as reader:
        store_pairs = {(row.scene_id, row.snippet_id) for row in reader.samples}
        store_dir = str(reader.store_dir)

        raw = raw_partials(config, max_tars, progress_cb, executor, cancel)
        raw_root, found, partials = raw.root, raw.found, raw.partials
        # The sample index was read at open; make sure it still is the store at the path.
        reader.check_generation()

    dataset_pairs: set[SnippetPair] = set()
    unparseable_examples: list[str] = []
    non_utf8_examples: list[str] = []
    for partial in partials:
        dataset_pairs |= partial.pairs
        free = MAX_COVERAGE_EXAMPLES - len(unparseable_examples)
        unparseable_examples.extend(partial.unparseable_examples[:free])
        free = MAX_COVERAGE_EXAMPLES - len(non_utf8_examples)
        non_utf8_examples.extend(partial.non_utf8_examples[:free])
    return _coverage_record(
        store_dir=store_dir,
        raw_dataset_dir=raw_root,
        tar_shards_scanned=len(partials),
        tar_shards_found=found,
        members_scanned=sum(p.members for p in partials),
        dataset_pairs=dataset_pairs,
        store_pairs=store_pairs,
        unparseable=sum(p.unparseable for p in partials),
        unparseable_examples=unparseable_examples,
        meta_members_skipped=sum(p.meta_members for p in partials),
        non_utf8_members=sum(p.non_utf8 for p in partials),
        non_utf8_examples=non_utf8_examples,
    )


def _ratio(covered: int, total: int) -> float | None:
    return covered / total if total else None


def _coverage_record(
    *,
    store_dir: str,
    raw_dataset_dir: str,
    tar_shards_scanned: int,
    tar_shards_found: int,
    members_scanned: int,
    dataset_pairs: set[SnippetPair],
    store_pairs: set[SnippetPair],
    unparseable: int,
    unparseable_examples: list[str],
    meta_members_skipped: int,
    non_utf8_members: int,
    non_utf8_examples: list[str],
) -> VinOfflineCoverageStats:
    covered = dataset_pairs & store_pairs
    missing = dataset_pairs - store_pairs
    outside = store_pairs - dataset_pairs

    def by_scene(pairs: set[SnippetPair]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for scene, _ in pairs:
            counts[scene] = counts.get(scene, 0) + 1
        return counts

    dataset_by, store_by = by_scene(dataset_pairs), by_scene(store_pairs)
    covered_by, missing_by, outside_by = by_scene(covered), by_scene(missing), by_scene(outside)
    per_scene = [
        VinOfflineCoverageSceneDiagnostic(
            scene_id=display_name(scene),
            dataset_snippets=dataset_by.get(scene, 0),
            store_snippets=store_by.get(scene, 0),
            covered_snippets=covered_by.get(scene, 0),
            missing_in_store=missing_by.get(scene, 0),
            outside_dataset=outside_by.get(scene, 0),
            coverage=_ratio(covered_by.get(scene, 0), dataset_by.get(scene, 0)),
        )
        for scene in sorted(set(dataset_by) | set(store_by))
    ]
    return VinOfflineCoverageStats(
        store_dir=store_dir,
        tar_shards_scanned=tar_shards_scanned,
        dataset_scenes=len(dataset_by),
        store_scenes=len(store_by),
        dataset_snippets=len(dataset_pairs),
        store_snippets=len(store_pairs),
        covered_snippets=len(covered),
        missing_in_store=len(missing),
        outside_dataset=len(outside),
        coverage=_ratio(len(covered), len(dataset_pairs)),
        per_scene=per_scene,
        missing_examples=_display_pairs(heapq.nsmallest(MAX_COVERAGE_EXAMPLES, missing)),
        outside_examples=_display_pairs(heapq.nsmallest(MAX_COVERAGE_EXAMPLES, outside)),
        tar_shards_found=tar_shards_found,
        members_scanned=members_scanned,
        unparseable_members=unparseable,
        unparseable_examples=unparseable_examples,
        raw_dataset_dir=raw_dataset_dir,
        meta_members_skipped=meta_members_skipped,
        non_utf8_members=non_utf8_members,
        non_utf8_examples=non_utf8_examples,
    )


def _display_pairs(pairs: list[SnippetPair]) -> list[SnippetPair]:
    return [(display_name(scene), display_name(snippet)) for scene, snippet in pairs]
