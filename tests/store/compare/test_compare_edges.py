"""Store compare at its edges: a field's dtype changing between shards of one store."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from vinlens.cli import main
from vinlens.store import compare_vin_offline_stores
from vinlens.store.compare._binning import FieldHistogram
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.format import VinOfflineSample
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_store,
)
from vinlens.store.writer import VinOfflineStoreWriter

METRICS = ("psi", "js_distance", "wasserstein", "ks_statistic")
CAMS = SyntheticStoreSpec(
    num_scenes=2,
    snippets_per_scene=2,
    samples_per_snippet=4,
    seed=11,
    candidate_ids=False,
    backbone_fields=(("cams", (4, 8), "float16"), ("glob", (16,), "float32")),
)


def _write_shards(
    path: Path, samples: list[VinOfflineSample], dtypes: list[str], rows: int = 4
) -> Path:
    """``rows`` samples per shard; shard ``i`` stores ``backbone.cams`` as ``dtypes[i]``."""
    with VinOfflineStoreWriter(path, num_candidates=CAMS.num_candidates, rows_per_shard=rows) as w:
        for i, sample in enumerate(samples):
            if i and i % rows == 0:
                w.finish_shard()
            backbone = dict(sample.backbone)
            backbone["cams"] = backbone["cams"].astype(dtypes[(i // rows) % len(dtypes)])
            w.add(dataclasses.replace(sample, backbone=backbone))
    return path


@pytest.fixture(scope="module")
def dtype_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dtype-shards")
    samples = make_synthetic_samples(CAMS)
    return {
        "mixed": _write_shards(root / "mixed", samples, ["float16", "float32"]),
        "mixed_rev": _write_shards(root / "mixed_rev", samples, ["float32", "float16"]),
        "float16": _write_shards(root / "f16", samples, ["float16"]),
        "float32": _write_shards(root / "f32", samples, ["float32"]),
    }


def test_field_whose_dtype_changes_between_shards_compares_on_float32_bins(
    dtype_stores: dict[str, Path],
) -> None:
    mixed = dtype_stores["mixed"]
    shards = json.loads((mixed / "manifest.json").read_text())["shards"]
    dtypes = [b["dtype"] for s in shards for b in s["blocks"] if b["name"] == "backbone.cams"]
    assert dtypes == ["float16", "float32"] * 2  # the writer publishes such a store
    # The same numbers in every store: on the float32 bins there is no drift at all.
    for other in ("mixed_rev", "float16", "float32"):
        for a, b in ((mixed, dtype_stores[other]), (dtype_stores[other], mixed)):
            result = compare_vin_offline_stores(a, b, max_samples=None)
            for name in ("backbone.cams", "backbone.cams[0]", "backbone.cams[3]"):
                drift = result.field(name)
                assert [getattr(drift, m) for m in METRICS] == [0.0] * 4, (other, name)
                assert drift.count_a == drift.count_b == 16 * (32 if "[" not in name else 8)
                assert drift.mean_a == drift.mean_b and drift.std_a == drift.std_b
                assert drift.histogram_a == drift.histogram_b
            assert result.field("backbone.cams").dtype_a == (
                "float32" if a != dtype_stores["float16"] else "float16"
            )
    # Its mean is the statistics' mean of the same store.
    stats = collect_vin_offline_dataset_stats(mixed, max_samples=None)
    drift = compare_vin_offline_stores(mixed, dtype_stores["float16"], max_samples=None)
    cams = drift.field("backbone.cams")
    (diag,) = [d for d in stats.backbone_diagnostics if d.field == "cams"]
    assert cams.mean_a == pytest.approx(diag.mean, rel=1e-12)
    # Folded in other groupings (tasks of several shards on an executor): the same record.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pooled = compare_vin_offline_stores(
            mixed, dtype_stores["float16"], max_samples=None, executor=pool
        )
    assert pooled.fields == drift.fields


def test_cli_compares_a_store_whose_field_dtype_changes_between_shards(
    dtype_stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = dtype_stores["mixed"], dtype_stores["float16"]
    assert main(["store", "compare", str(a), str(b), "--all", "--json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert fields["backbone.cams"]["ks_statistic"] == 0.0
    assert (fields["backbone.cams"]["dtype_a"], fields["backbone.cams"]["dtype_b"]) == (
        "float32",
        "float16",
    )
    assert main(["store", "compare", str(a), str(b), "--all"]) == 0
    assert "backbone.cams" in capsys.readouterr().out


def test_histogram_merge_across_dtypes_is_exact_and_leaves_the_other_alone() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=500).astype(np.float16)
    half16, half32 = FieldHistogram.for_dtype("float16"), FieldHistogram.for_dtype("float32")
    half16.update(values[:200])
    half32.update(values[200:].astype(np.float32))
    whole = FieldHistogram.for_dtype("float32")
    whole.update(values.astype(np.float32))
    before = half16.summary()
    merged = [
        FieldHistogram(first.kind, first.dtype).merge(first).merge(second).summary()
        for first, second in ((half16, half32), (half32, half16))
    ]
    assert merged[0] == merged[1]  # exact in any order
    expected = whole.summary()
    assert np.array_equal(merged[0].counts, expected.counts)
    assert np.array_equal(merged[0].values, expected.values)
    assert merged[0].count == 500
    # The float32 part's moments are float64 block sums (one rounding per block).
    sum_abs = float(np.abs(values.astype(np.float64)).sum())
    assert merged[0].mean == pytest.approx(expected.mean, abs=4 * 500 * 2.0**-53 * sum_abs / 500)
    assert half16.summary() == before and half16.kind == "float16"
    with pytest.raises(ValueError, match="integers in one shard"):
        FieldHistogram.for_dtype("int64").merge(half16)


def test_statistics_and_compare_lose_only_the_damaged_vin_points_record(tmp_path: Path) -> None:
    """Both scans read shards through one core: a record that does not decode is listed by
    each as the same problem, and every other record of its run still counts."""
    store = write_synthetic_store(tmp_path / "store", SyntheticStoreSpec(seed=5)).store_dir
    records = store / "shards/00000/records/vin_points.msgpack"
    data = bytearray(records.read_bytes())
    data[0] = 0xC1  # the one byte msgpack never uses: the shard's first record is garbage
    records.write_bytes(bytes(data))
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    result = compare_vin_offline_stores(store, store, max_samples=None)
    listed = [p for p in stats.integrity_problems if p.block == "vin_points"]
    assert len(listed) == 1 and "1 unreadable" in listed[0].message
    assert [p for p in result.problems_a if p.block == "vin_points"] == listed
    assert stats.vin_points.count == stats.num_samples - 1
    assert result.field("vin_point_count").count_a == stats.vin_points.count
