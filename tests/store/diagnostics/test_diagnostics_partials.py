"""Per-shard partials: any grouping, any executor, any worker count gives the same record."""

from __future__ import annotations

import concurrent.futures
import functools
import math
import pickle
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vinlens.store.diagnostics import (
    StatsPartial,
    VinOfflineDatasetStats,
    capture_vin_offline_dataset_stats_request,
    collect_vin_offline_dataset_stats,
    dask_executor,
    inspect_vin_offline_dataset_stats,
    inspect_vin_offline_dataset_stats_with_progress,
)
from vinlens.store.diagnostics import tasks as stats_tasks
from vinlens.store.diagnostics.build import build_stats_record
from vinlens.store.diagnostics.kernels import Moments
from vinlens.store.diagnostics.sampling import Reservoir
from vinlens.store.diagnostics.scan import scan_shard
from vinlens.store.format import VinOfflineSample
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store
from vinlens.store.writer import VinOfflineStoreWriter

# 3 scenes x 4 snippets x 2 samples = 24 rows in 8 shards of 3: many groupings.
SPEC = SyntheticStoreSpec(
    num_scenes=3, snippets_per_scene=4, samples_per_snippet=2, rows_per_shard=3, seed=11
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_store(tmp_path_factory.mktemp("partials") / "store", SPEC).store_dir


@functools.lru_cache(maxsize=4)
def _shard_partials(
    store: Path, max_samples: int | None
) -> tuple[list[bytes], Any, VinOfflineDatasetStats]:
    """Pickled per-shard partials (fresh copies per example), the request, the sequential record."""
    request = capture_vin_offline_dataset_stats_request(store, max_samples=max_samples)
    with VinOfflineStoreReader(store) as reader:
        partials = [
            pickle.dumps(scan_shard(reader, plan))
            for plan in stats_tasks.shard_plans(reader, max_samples)
        ]
    sequential = inspect_vin_offline_dataset_stats(request)
    return partials, request, sequential


@pytest.mark.parametrize("max_samples", [None, 7])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.booleans(), min_size=7, max_size=7))
def test_any_grouping_of_shards_gives_the_sequential_record(
    store: Path, max_samples: int | None, cuts: list[bool]
) -> None:
    partials, request, sequential = _shard_partials(store, max_samples)
    assert len(partials) == 8
    with VinOfflineStoreReader(store) as reader:
        groups: list[StatsPartial] = []
        current: StatsPartial | None = None
        for i, blob in enumerate(partials):
            part = pickle.loads(blob)
            current = part if current is None else current.merge(part)
            if i == len(partials) - 1 or cuts[i]:
                groups.append(pickle.loads(pickle.dumps(current)))
                current = None
        folded = StatsPartial()
        for group in groups:
            folded.merge(group)
        assert build_stats_record(reader, folded, request) == sequential


def _assert_identical(a: VinOfflineDatasetStats, b: VinOfflineDatasetStats) -> None:
    assert a == b
    # Bit for bit, not only ==: NaN-free floats compare by value, so compare their bits too.
    for x, y in zip(a.backbone_diagnostics, b.backbone_diagnostics, strict=True):
        assert np.float64(x.mean).tobytes() == np.float64(y.mean).tobytes()
        assert np.float64(x.std).tobytes() == np.float64(y.std).tobytes()


@pytest.mark.parametrize("max_samples", [None, 5])
def test_process_pool_equals_in_process(store: Path, max_samples: int | None) -> None:
    request = capture_vin_offline_dataset_stats_request(store, max_samples=max_samples)
    local = inspect_vin_offline_dataset_stats(request)
    calls: list[tuple[int, int]] = []
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        remote = inspect_vin_offline_dataset_stats_with_progress(
            request, lambda done, total: calls.append((done, total)), executor=pool
        )
        again = collect_vin_offline_dataset_stats(store, max_samples=max_samples, executor=pool)
    _assert_identical(local, remote)
    _assert_identical(local, again)
    total = local.sampled_samples
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_tasks_group_consecutive_shards_into_a_few_per_worker(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store is far below the 8 MiB floor: drop the floor so the per-worker target decides.
    monkeypatch.setattr(stats_tasks, "_TASK_BYTES", 1)
    request = capture_vin_offline_dataset_stats_request(store, max_samples=None)
    with VinOfflineStoreReader(store) as reader:
        plans = stats_tasks.shard_plans(reader, None)
        config = reader.config
        one = stats_tasks.shard_tasks(reader, config, request, plans, 1)
        many = stats_tasks.shard_tasks(reader, config, request, plans, 8)
    assert [p for task in one for p in task.plans] == plans
    assert [p for task in many for p in task.plans] == plans
    assert len(one) == stats_tasks._TASKS_PER_WORKER  # 8 equal shards, 2 per task
    assert len(many) == len(plans)  # more tasks wanted than shards: one shard each
    local = inspect_vin_offline_dataset_stats(request)
    calls: list[tuple[int, int]] = []
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        remote = inspect_vin_offline_dataset_stats_with_progress(
            request, lambda done, total: calls.append((done, total)), executor=pool
        )
    _assert_identical(local, remote)
    assert len(calls) == 1 + stats_tasks._TASKS_PER_WORKER


def test_executor_progress_callback_can_cancel(store: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store, max_samples=None)

    class Cancelled(Exception):
        pass

    def cancel_after_first(done: int, total: int) -> None:
        if done:
            raise Cancelled

    with (
        concurrent.futures.ThreadPoolExecutor(2) as pool,
        pytest.raises(Cancelled),
    ):
        inspect_vin_offline_dataset_stats_with_progress(request, cancel_after_first, executor=pool)


def test_dask_local_cluster_equals_in_process(store: Path) -> None:
    distributed = pytest.importorskip("distributed")
    local = collect_vin_offline_dataset_stats(store, max_samples=None)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        dask_executor(cluster.scheduler_address) as executor,
    ):
        remote = collect_vin_offline_dataset_stats(store, max_samples=None, executor=executor)
    _assert_identical(local, remote)


def test_missing_dask_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what a missing package looks like
    with pytest.raises(ImportError, match=r"vinlens\[dask\]"), dask_executor():
        pass


def test_float16_moments_are_exact(tmp_path: Path) -> None:
    """float16 bit-pattern counts give the exactly rounded mean and std of the values."""
    rng = np.random.default_rng(3)
    rows = [(rng.normal(size=(6, 5)) * 40 + 1000).astype(np.float16) for _ in range(9)]
    rows[2][0, 0] = np.float16(np.inf)  # listed as non-finite, left out of the moments
    with VinOfflineStoreWriter(
        tmp_path / "s", num_candidates=2, scene_labels=False, rows_per_shard=4, fsync=False
    ) as w:
        for i, voxel in enumerate(rows):
            w.add(
                VinOfflineSample(
                    sample_key=f"k{i}",
                    scene_id="scene_1",
                    snippet_id=f"snippet_{i}",
                    split="train",
                    vin_points=np.zeros((2, 3), np.float32),
                    backbone={"voxel": voxel},
                )
            )
    stats = collect_vin_offline_dataset_stats(tmp_path / "s", max_samples=None)
    values = [Fraction(float(v)) for r in rows for v in r.reshape(-1) if np.isfinite(v)]
    n = len(values)
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / n
    (field,) = stats.backbone_diagnostics
    assert field.count == n and field.sampled_rows == 9
    assert field.mean == float(mean)
    # The exact variance rounded once to float64, then the float64 square root.
    assert field.std == math.sqrt(float(variance))
    assert field.abs_mean == float(sum(abs(v) for v in values) / n)
    assert (field.minimum, field.maximum) == (float(min(values)), float(max(values)))
    assert [p.kind for p in stats.integrity_problems] == ["NonFiniteValues"]


def test_moments_merge_is_exact_and_order_free() -> None:
    rng = np.random.default_rng(5)
    blocks = [rng.normal(size=int(rng.integers(1, 5000))) * 1e6 + 1e8 for _ in range(6)]
    parts = []
    for block in blocks:
        m = Moments()
        m.update(block.astype(np.float32))
        parts.append(m)
    forward = Moments()
    for m in parts:
        forward.merge(pickle.loads(pickle.dumps(m)))
    backward = Moments()
    for m in reversed(parts):
        backward.merge(pickle.loads(pickle.dumps(m)))
    assert forward.finish() == backward.finish()
    values = np.concatenate([b.astype(np.float32).astype(np.float64) for b in blocks])
    count, mean, std, _, _ = forward.finish()
    assert count == values.size
    assert mean == pytest.approx(values.mean(), rel=1e-14)
    assert std == pytest.approx(values.std(), rel=1e-9)
    assert forward.extremes() == (values.min(), values.max())


def test_s3_store_on_a_process_pool_equals_in_process(s3_dataset: Any) -> None:
    """Tasks carry the URL and storage options; each worker reopens the store over S3."""
    request = capture_vin_offline_dataset_stats_request(s3_dataset.remote, max_samples=None)
    local = inspect_vin_offline_dataset_stats(request)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        remote = inspect_vin_offline_dataset_stats(request, executor=pool)
    _assert_identical(local, remote)
    assert remote.store_dir == s3_dataset.remote.store_dir


def test_reservoir_state_is_bounded_by_its_limit_not_by_the_rows_seen() -> None:
    sizes = []
    for rows in (1_000, 100_000):
        reservoir = Reservoir(2, salt=9, limit=500)
        positions = np.arange(rows, dtype=np.int64)
        reservoir.update(positions, np.stack([positions, -positions], axis=1).astype(np.float64))
        sizes.append(len(pickle.dumps(reservoir)))
        assert reservoir.finish().shape == (500, 2)
    assert sizes[1] <= sizes[0] * 1.05
    # Split in two partials, merged either way round: the same kept rows.
    a, b = Reservoir(1, salt=9, limit=50), Reservoir(1, salt=9, limit=50)
    a.update(np.arange(0, 300), np.arange(0, 300, dtype=np.float64))
    b.update(np.arange(300, 700), np.arange(300, 700, dtype=np.float64))
    left = pickle.loads(pickle.dumps(a))
    left.merge(pickle.loads(pickle.dumps(b)))
    right = pickle.loads(pickle.dumps(b))
    right.merge(pickle.loads(pickle.dumps(a)))
    whole = Reservoir(1, salt=9, limit=50)
    whole.update(np.arange(0, 700), np.arange(0, 700, dtype=np.float64))
    assert np.array_equal(left.finish(), whole.finish())
    assert np.array_equal(right.finish(), whole.finish())


def test_thread_pool_workers_close_their_readers_after_the_call(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[int] = []
    closed: list[int] = []
    real_init = VinOfflineStoreReader.__init__
    real_close = VinOfflineStoreReader.close

    def tracking_init(self: VinOfflineStoreReader, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(id(self))

    def tracking_close(self: VinOfflineStoreReader) -> None:
        closed.append(id(self))
        real_close(self)

    monkeypatch.setattr(VinOfflineStoreReader, "__init__", tracking_init)
    monkeypatch.setattr(VinOfflineStoreReader, "close", tracking_close)
    local = collect_vin_offline_dataset_stats(store, max_samples=None)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for _ in range(2):  # the second call opens fresh readers, reused across its tasks
            assert (
                collect_vin_offline_dataset_stats(store, max_samples=None, executor=pool) == local
            )
            assert set(opened) <= set(closed)
            assert not stats_tasks._readers
    # Per call: the coordinator's reader plus at most one per pool thread, not one per task.
    assert len(opened) <= 3 * (1 + 3)
