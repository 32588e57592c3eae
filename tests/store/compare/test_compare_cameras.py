"""Store compare with per-camera fields: counts added into the bins in place stay exact.

Each camera ``field[k]`` of a backbone field of shape ``(cameras, ...)`` is binned once per
row window and added into its own histogram and the whole field's; small batches wait as
bin indices (``PENDING_VALUES``) and are counted in place. Every count must equal one
histogram of all the values at once, across windows, shards, merges, copies and pickling.
"""

from __future__ import annotations

import concurrent.futures
import pickle
from pathlib import Path

import numpy as np
import pytest

from vinlens.store import compare_vin_offline_stores
from vinlens.store.compare import _binning as compare_binning
from vinlens.store.compare._binning import FieldHistogram, drift_metrics
from vinlens.store.format import VinOfflineSample
from vinlens.store.writer import VinOfflineStoreWriter

CAMERAS = 8
CANDIDATES = 4
ROWS = 40
METRICS = ("psi", "js_distance", "wasserstein", "ks_statistic")


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = (rng.normal(size=shape) * 2.0).astype(dtype)
    flat = values.reshape(-1)
    flat[:3] = [0.0, -0.0, -0.0]  # equal zeros must share a bin
    return values


def _write(path: Path, seed: int) -> dict[str, np.ndarray]:
    """A store of ``ROWS`` rows in 8-row shards, 2-row chunks (4 windows per shard)."""
    rng = np.random.default_rng(seed)
    feat = np.stack([_values(rng, (CAMERAS, 64), "float16") for _ in range(ROWS)])
    pooled = np.stack([_values(rng, (CAMERAS, 16), "float32") for _ in range(ROWS)])
    with VinOfflineStoreWriter(
        path, num_candidates=CANDIDATES, rows_per_shard=8, chunk_bytes=2048, fsync=False
    ) as writer:
        for i in range(ROWS):
            writer.add(
                VinOfflineSample(
                    sample_key=f"s{i // 8}/n{i:03d}",
                    scene_id=f"s{i // 8}",
                    snippet_id=f"n{i:03d}",
                    split="train",
                    vin_points=rng.normal(size=(5, 3)).astype(np.float32),
                    candidate_valid=np.ones(CANDIDATES, dtype=bool),
                    rri=rng.random(CANDIDATES).astype(np.float32),
                    candidate_poses=rng.normal(size=(CANDIDATES, 7)).astype(np.float32),
                    backbone={"feat": feat[i], "pooled": pooled[i]},
                )
            )
    return {"backbone.feat": feat, "backbone.pooled": pooled}


@pytest.fixture(scope="module")
def camera_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("cameras")
    return {
        "a": root / "a",
        "b": root / "b",
        "values_a": _write(root / "a", 0),
        "values_b": _write(root / "b", 1),
    }


def _one_histogram(values: np.ndarray) -> FieldHistogram:
    hist = FieldHistogram.for_dtype(values.dtype)
    hist.update(values)
    return hist


@pytest.mark.parametrize("pending", [compare_binning.PENDING_VALUES, 100])
def test_per_camera_counts_equal_one_histogram_of_all_values(
    camera_stores: dict[str, object], pending: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100: the pending indices are counted into the bins in place many times per field.
    monkeypatch.setattr(compare_binning, "PENDING_VALUES", pending)
    values_a = camera_stores["values_a"]
    values_b = camera_stores["values_b"]
    assert isinstance(values_a, dict) and isinstance(values_b, dict)
    result = compare_vin_offline_stores(camera_stores["a"], camera_stores["b"], max_samples=None)
    fields = {f.name: f for f in result.fields}
    for name in ("backbone.feat", "backbone.pooled"):
        expected: dict[str, tuple[np.ndarray, np.ndarray]] = {
            name: (values_a[name], values_b[name])
        }
        for k in range(CAMERAS):
            expected[f"{name}[{k}]"] = (values_a[name][:, k], values_b[name][:, k])
        for key, (va, vb) in expected.items():
            drift = fields[key]
            ha, hb = _one_histogram(va), _one_histogram(vb)
            sa, sb = ha.summary(), hb.summary()
            metrics = drift_metrics(sa, sb)
            assert (drift.count_a, drift.count_b) == (va.size, vb.size), key
            assert drift.histogram_a == metrics.display_a, key
            assert drift.histogram_b == metrics.display_b, key
            # The metrics follow from the counts alone: equal counts, equal metrics.
            for metric in METRICS:
                assert getattr(drift, metric) == getattr(metrics, metric), (key, metric)
            if va.dtype == np.float16:  # moments from the exact bit-pattern counts
                assert (drift.mean_a, drift.std_a) == (sa.mean, sa.std), key
            else:  # float64 block sums: one rounding per block of at most every value
                bound = 4 * va.size * 2.0**-53 * float(np.abs(va.astype(np.float64)).mean())
                assert drift.mean_a == pytest.approx(sa.mean, abs=bound), key


def test_per_camera_compare_equal_on_threads_and_in_process(
    camera_stores: dict[str, object],
) -> None:
    # Tasks of several shards on an executor merge pending indices across shards.
    alone = compare_vin_offline_stores(camera_stores["a"], camera_stores["b"], max_samples=None)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = compare_vin_offline_stores(
            camera_stores["a"], camera_stores["b"], max_samples=None, executor=pool
        )
    assert threaded == alone


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_small_batches_merges_copies_and_pickles_count_exactly(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare_binning, "PENDING_VALUES", 1000)
    rng = np.random.default_rng(3)
    values = _values(rng, (20_000,), dtype)
    values[10] = np.nan
    cuts = np.sort(rng.integers(0, values.size, size=60))
    batches = np.split(values, cuts)  # sizes 0 .. thousands: pending, flushed and dense
    batches.append(values[:3000])  # one batch above PENDING_VALUES, counted at once
    whole = np.concatenate(batches)
    expected = _one_histogram(whole)
    assert expected.counts is not None

    left, right = FieldHistogram.for_dtype(dtype), FieldHistogram.for_dtype(dtype)
    nonfinite = 0
    for i, batch in enumerate(batches):
        nonfinite += (left if i % 2 else right).update(batch)
    assert nonfinite == 2  # the NaN, in its batch and again in values[:3000]
    before = right.copy()
    merged = FieldHistogram.for_dtype(dtype).merge(left).merge(right)
    assert merged.counts is not None
    assert np.array_equal(merged.counts, expected.counts)
    assert merged.summary().counts.sum() == whole.size - 2  # NaNs are not counted
    # Merging never changed ``right``, nor do later updates of either side.
    merged.update(values[:500])
    right.update(values[:700])
    assert np.array_equal(merged.counts, expected.counts + _one_histogram(values[:500]).counts)
    assert before.summary() != right.summary()
    assert np.array_equal(
        before.counts + _one_histogram(values[:700]).counts,  # type: ignore[operator]
        right.counts,
    )
    again = pickle.loads(pickle.dumps(merged))
    assert again == merged and np.array_equal(again.counts, merged.counts)


def test_update_also_equals_a_fresh_histogram_merged_into_both() -> None:
    rng = np.random.default_rng(5)
    cams = _values(rng, (6, 4, 16), "float32")
    parts = [FieldHistogram.for_dtype("float32") for _ in range(4)]
    refs = [FieldHistogram.for_dtype("float32") for _ in range(4)]
    whole, ref_whole = FieldHistogram.for_dtype("float32"), FieldHistogram.for_dtype("float32")
    for k in range(4):
        parts[k].update(cams[:, k], also=whole)
        one = _one_histogram(cams[:, k])
        refs[k].merge(one)
        ref_whole.merge(one)
    # Counts, and the float32 moments (the same blocks), exactly.
    assert parts == refs
    assert whole == ref_whole and whole.summary().count == cams.size
    # Another kind falls back to a fresh histogram merged into both (float16 widened).
    half = FieldHistogram.for_dtype("float16")
    half.update(cams[:, 0].astype(np.float16), also=whole)
    assert half.summary().count == cams[:, 0].size
    assert whole.kind == "float32" and whole.summary().count == cams.size + cams[:, 0].size
