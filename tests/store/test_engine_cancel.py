"""Every store engine takes ``cancel=``: set before it starts, or set while it runs, it stops
with OperationCancelled, nothing queued runs afterwards, and the store is not written."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vinlens.operations import CancelToken, OperationCancelled
from vinlens.store.compare import compare_vin_offline_stores
from vinlens.store.coverage import (
    clear_coverage_cache,
    collect_vin_offline_dataset_coverage,
    raw_snippets_by_scene,
)
from vinlens.store.diagnostics import (
    capture_vin_offline_dataset_stats_request,
    inspect_vin_offline_dataset_stats_with_progress,
)
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    write_synthetic_dataset,
    write_synthetic_store,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("cancel")
    return write_synthetic_dataset(
        root / "ds",
        store_spec=SyntheticStoreSpec(num_scenes=6, rows_per_shard=4),
        raw_spec=SyntheticRawSpec(num_tars=6),
    )


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


def _engines(dataset: Any, other: Any) -> dict[str, Callable[..., Any]]:
    config = dataset.config
    return {
        "stats": lambda progress, cancel, executor: inspect_vin_offline_dataset_stats_with_progress(
            capture_vin_offline_dataset_stats_request(config, max_samples=None),
            progress,
            executor=executor,
            cancel=cancel,
        ),
        "compare": lambda progress, cancel, executor: compare_vin_offline_stores(
            config,
            other.config,
            max_samples=None,
            progress_cb=progress,
            executor=executor,
            cancel=cancel,
        ),
        "coverage": lambda progress, cancel, executor: collect_vin_offline_dataset_coverage(
            config, progress_cb=progress, executor=executor, cancel=cancel
        ),
        "raw_snippets": lambda progress, cancel, executor: raw_snippets_by_scene(
            config, progress_cb=progress, executor=executor, cancel=cancel
        ),
    }


ENGINES = ["stats", "compare", "coverage", "raw_snippets"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pooled", [False, True], ids=["in-process", "thread-pool"])
def test_a_cancel_set_while_the_engine_runs_stops_it(
    dataset: Any, tmp_path: Path, engine: str, pooled: bool
) -> None:
    other = write_synthetic_store(tmp_path / "other", SyntheticStoreSpec(seed=5, num_scenes=6))
    before = _tree(Path(dataset.config.store_dir))
    clear_coverage_cache()  # a cached tar would finish without a task to cancel between
    event = threading.Event()
    reports: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        reports.append((done, total))
        if done > 0:
            event.set()  # the user presses Cancel after the first finished task

    pool = concurrent.futures.ThreadPoolExecutor(1) if pooled else None
    try:
        with pytest.raises(OperationCancelled):
            _engines(dataset, other)[engine](progress, CancelToken(event), pool)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    finished = [done for done, _ in reports if done > 0]
    assert finished, reports
    if not pooled:
        # It stopped before the end: the tasks after the cancel never ran. (On a pool the
        # tasks already running when the cancel lands finish; no record comes back.)
        assert finished[-1] < reports[-1][1], reports
    assert _tree(Path(dataset.config.store_dir)) == before  # read only


@pytest.mark.parametrize("engine", ENGINES)
def test_a_cancel_set_before_the_start_runs_no_task(
    dataset: Any, tmp_path: Path, engine: str
) -> None:
    other = write_synthetic_store(tmp_path / "other", SyntheticStoreSpec(seed=5))
    clear_coverage_cache()
    token = CancelToken()
    token.cancel()
    reports: list[tuple[int, int]] = []
    with pytest.raises(OperationCancelled):
        _engines(dataset, other)[engine](lambda d, t: reports.append((d, t)), token, None)
    assert all(done == 0 for done, _ in reports), reports
