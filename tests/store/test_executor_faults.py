"""Issue 23 class 3 and class 2 (Dask): executors and arguments refused with a clear message."""

from __future__ import annotations

import concurrent.futures
import decimal
import fractions
import time
from pathlib import Path

import numpy as np
import pytest

from vinlens.operations import BoundedProcessPool
from vinlens.store.coverage import collect_vin_offline_dataset_coverage, raw_snippets_by_scene
from vinlens.store.diagnostics import (
    capture_vin_offline_dataset_stats_request,
    check_max_samples,
    collect_vin_offline_dataset_stats,
    dask_executor,
    inspect_vin_offline_dataset_stats,
)
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticStoreRecord


@pytest.mark.parametrize(
    "value",
    [np.int64(5), np.int32(5), np.uint8(5), 5, 5.0, np.float32(5.0), fractions.Fraction(10, 2)],
)
def test_max_samples_accepts_every_integral_number(value: object) -> None:
    checked = check_max_samples(value)
    assert checked == 5 and type(checked) is int


@pytest.mark.parametrize(
    "value",
    [
        np.bool_(True),
        True,
        2.5,
        np.float64(2.5),
        np.int64(-1),
        float("nan"),
        decimal.Decimal("NaN"),
        fractions.Fraction(1, 2),
        1 + 0j,
        np.array(5),
        "5",
    ],
)
def test_max_samples_refuses_the_rest(value: object) -> None:
    with pytest.raises(ValueError, match=r"max_samples must be None or an integer >= 0, got"):
        check_max_samples(value)


def test_numpy_max_samples_reaches_the_record(small_store: SyntheticStoreRecord) -> None:
    record = collect_vin_offline_dataset_stats(small_store.config, max_samples=np.int64(2))  # type: ignore[arg-type]
    assert record.max_samples == 2 and type(record.max_samples) is int
    assert record == collect_vin_offline_dataset_stats(small_store.config, max_samples=2)


BAD_EXECUTORS = [42, "process", concurrent.futures.ProcessPoolExecutor]


@pytest.mark.parametrize("bad", BAD_EXECUTORS)
def test_stats_refuse_a_bad_executor_with_a_type_error(
    small_store: SyntheticStoreRecord, bad: object
) -> None:
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor instance"):
        collect_vin_offline_dataset_stats(small_store.config, executor=bad)  # type: ignore[arg-type]
    request = capture_vin_offline_dataset_stats_request(small_store.config, max_samples=2)
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor instance"):
        inspect_vin_offline_dataset_stats(request, executor=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_EXECUTORS)
def test_coverage_refuses_a_bad_executor_with_a_type_error(
    small_store: SyntheticStoreRecord, tmp_path: Path, bad: object
) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    config = VinOfflineStoreConfig(store_dir=small_store.config.store_dir, raw_dataset_dir=raw)
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor instance"):
        collect_vin_offline_dataset_coverage(config, executor=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor instance"):
        raw_snippets_by_scene(config, executor=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Process pools capped at the tasks and CPUs; Dask schedulers without workers
# --------------------------------------------------------------------------------------


def test_bounded_pool_starts_no_more_processes_than_tasks(
    small_store: SyntheticStoreRecord,
) -> None:
    messages: list[str] = []
    local = collect_vin_offline_dataset_stats(small_store.config, max_samples=None)
    with BoundedProcessPool(64, on_cap=messages.append) as pool:
        record = collect_vin_offline_dataset_stats(
            small_store.config, max_samples=None, executor=pool
        )
        assert pool.workers is not None and pool.workers <= 3  # 3 shards
    assert record == local
    assert len(messages) == 1
    assert f"using {pool.workers} worker process" in messages[0]
    assert "not the 64 asked for" in messages[0]


def test_bounded_pool_with_fewer_workers_than_tasks_says_nothing() -> None:
    messages: list[str] = []
    with BoundedProcessPool(1, on_cap=messages.append) as pool:
        assert list(pool.map(abs, [-1, -2, -3])) == [1, 2, 3]
        assert pool.workers == 1
    assert messages == []
    with pytest.raises(ValueError, match="max_workers must be an int >= 1, got 0"):
        BoundedProcessPool(0)


@pytest.mark.timeout(120)
def test_dask_scheduler_without_workers_times_out_naming_address_and_count() -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        t0 = time.monotonic()
        with (
            pytest.raises(TimeoutError) as info,
            dask_executor(address, worker_timeout=1.5),
        ):
            pytest.fail("the block must not start without a worker")
        assert time.monotonic() - t0 < 30
    message = str(info.value)
    assert address in message
    assert "has 0 workers" in message
    assert "1.5 s" in message
    with (
        pytest.raises(ValueError, match="worker_timeout must be > 0"),
        dask_executor(worker_timeout=0),
    ):
        pass
