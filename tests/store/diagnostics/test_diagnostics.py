"""Every statistic of ``collect_vin_offline_dataset_stats`` against independent numpy on the samples."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vinlens.store.diagnostics import (
    POSE_DIAGNOSTICS,
    NumericSummary,
    VinOfflineDatasetStats,
    collect_vin_offline_dataset_stats,
    select_vin_offline_sample_indices,
)
from vinlens.store.format import VinOfflineSample, VinOfflineStoreConfig
from vinlens.store.synthetic import (
    SyntheticStoreRecord,
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_store,
)
from vinlens.store.writer import VinOfflineStoreWriter

SPEC = SyntheticStoreSpec(
    num_scenes=3,
    snippets_per_scene=5,
    samples_per_snippet=3,
    num_candidates=12,
    rows_per_shard=7,
    seed=7,
)


@pytest.fixture(scope="module")
def labelled(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[SyntheticStoreRecord, list[VinOfflineSample]]:
    root = tmp_path_factory.mktemp("labelled")
    record = write_synthetic_store(root / "store", SPEC)
    return record, make_synthetic_samples(SPEC)


def _summary(values: np.ndarray) -> NumericSummary:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return NumericSummary(0, None, None, None)
    return NumericSummary(
        int(values.size), float(values.min()), float(values.mean()), float(values.max())
    )


def _assert_summary(got: NumericSummary | None, want: NumericSummary) -> None:
    assert got is not None
    assert got.count == want.count
    for name in ("minimum", "mean", "maximum"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12), name


def _index_rows(store_dir: Path) -> list[dict[str, object]]:
    return [
        json.loads(line) for line in (store_dir / "sample_index.jsonl").read_text().splitlines()
    ]


def _rotation_matrices(q: np.ndarray) -> np.ndarray:
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=1,
    )


def _pose_reference(poses: np.ndarray) -> dict[str, np.ndarray]:
    """Pose diagnostics through rotation matrices (not the quaternion formulas of the module)."""
    t = poses[:, :3].astype(np.float64)
    r = _rotation_matrices(poses[:, 3:].astype(np.float64))
    deg = 180 / math.pi
    trace = np.trace(r, axis1=1, axis2=2)
    return {
        "distance_m": np.sqrt((t**2).sum(axis=1)),
        "azimuth_deg": np.degrees(np.arctan2(t[:, 1], t[:, 0])),
        "elevation_deg": np.degrees(np.arcsin(t[:, 2] / np.sqrt((t**2).sum(axis=1)))),
        "rotation_angle_deg": np.arccos(np.clip((trace - 1) / 2, -1, 1)) * deg,
        "yaw_deg": np.arctan2(r[:, 1, 0], r[:, 0, 0]) * deg,
        "pitch_deg": np.arcsin(np.clip(-r[:, 2, 0], -1, 1)) * deg,
        "roll_deg": np.arctan2(r[:, 2, 1], r[:, 2, 2]) * deg,
    }


def _check_against_numpy(
    stats: VinOfflineDatasetStats,
    samples: list[VinOfflineSample],
    selected: list[int],
    spec: SyntheticStoreSpec,
) -> None:
    chosen = [samples[i] for i in selected]
    assert stats.sampled_samples == len(selected)
    assert stats.num_samples == len(samples)
    assert stats.split_counts == dict(sorted(Counter(s.split for s in samples).items()))
    assert stats.num_scenes == len({s.scene_id for s in samples})
    assert stats.num_snippets == len({(s.scene_id, s.snippet_id) for s in samples})

    counts = np.array([int(s.candidate_valid.sum()) for s in chosen])
    _assert_summary(stats.candidate_count, _summary(counts))
    assert stats.candidate_count_values == counts.tolist()

    rri = np.concatenate([s.rri[s.candidate_valid & np.isfinite(s.rri)] for s in chosen])
    _assert_summary(stats.rri, _summary(rri))
    assert stats.rri_values == rri.astype(np.float64).tolist()

    lengths = np.array([s.vin_points.shape[0] for s in chosen])
    _assert_summary(stats.vin_points, _summary(lengths))
    assert stats.vin_point_values == lengths.tolist()

    for name in spec.rri_components:
        comp = np.concatenate(
            [
                s.rri_components[name][s.candidate_valid & np.isfinite(s.rri_components[name])]
                for s in chosen
            ]
        )
        _assert_summary(stats.rri_component_summaries[name], _summary(comp))
        assert stats.rri_component_values[name] == comp.astype(np.float64).tolist()
        pairs = []
        for s in chosen:
            if s.candidate_ids is None:
                continue
            ids = s.candidate_ids
            id_counts = Counter(ids.tolist())
            for j in range(spec.num_candidates):
                c = s.rri_components[name][j]
                if (
                    s.candidate_valid[j]
                    and ids[j] >= 0
                    and id_counts[int(ids[j])] == 1
                    and np.isfinite(s.rri[j])
                    and np.isfinite(c)
                ):
                    pairs.append((float(s.rri[j]), float(c)))
        assert stats.rri_component_pairs[name] == pairs
    unpaired = [s.sample_key for s in chosen if s.candidate_ids is None]
    assert stats.rri_pairing_unavailable_sample_keys == unpaired
    assert stats.rri_pairing_unavailable_count == len(unpaired)

    valid_poses = np.concatenate([s.candidate_poses[s.candidate_valid] for s in chosen])
    reference = _pose_reference(valid_poses)
    assert set(stats.candidate_pose_values) == set(POSE_DIAGNOSTICS)
    for name in POSE_DIAGNOSTICS:
        got = np.array(stats.candidate_pose_values[name])
        tolerance = 1e-4 if name.endswith("_deg") else 1e-9
        np.testing.assert_allclose(got, reference[name], atol=tolerance, rtol=0)
        summary = stats.candidate_pose_summaries[name]
        assert summary.count == valid_poses.shape[0]
        assert summary.mean == pytest.approx(float(reference[name].mean()), abs=tolerance)

    by_field = {b.field: b for b in stats.backbone_diagnostics}
    assert set(by_field) == {name for name, _, _ in spec.backbone_fields}
    for name, shape, dtype in spec.backbone_fields:
        values = np.concatenate([s.backbone[name].astype(np.float64).ravel() for s in chosen])
        got = by_field[name]
        assert got.shape == shape and got.numel == math.prod(shape)
        assert got.sampled_rows == len(chosen)
        assert got.count == values.size
        assert got.mean == pytest.approx(values.mean(), rel=1e-6, abs=1e-12)
        assert got.std == pytest.approx(values.std(), rel=1e-6)
        assert got.abs_mean == pytest.approx(np.abs(values).mean(), rel=1e-6)
        assert got.nz_frac == pytest.approx(float((np.abs(values) > 1e-6).mean()), rel=1e-12)
        assert (got.minimum, got.maximum) == (values.min(), values.max())
        assert str(np.dtype(dtype)) in {"float16", "float32"}

    c = spec.num_candidates
    backbone_bytes = sum(
        math.prod(shape) * np.dtype(dtype).itemsize for _, shape, dtype in spec.backbone_fields
    )
    per_row = {
        "vin_points": np.array([s.vin_points.shape[0] * 12 for s in chosen]),
        "oracle_rri": np.array(
            [
                c
                + 4 * c
                + 4 * c * len(spec.rri_components)
                + (8 * c if s.candidate_ids is not None else 0)
                for s in chosen
            ]
        ),
        "candidate_poses": np.full(len(chosen), 28 * c),
        "backbone": np.full(len(chosen), backbone_bytes),
    }
    per_row["total"] = sum(per_row.values())
    memory = {m.component: m for m in stats.memory_diagnostics}
    assert set(memory) == set(per_row)
    for name, values in per_row.items():
        mib = values / 2**20
        assert memory[name].mean_mib == pytest.approx(mib.mean(), rel=1e-12)
        assert memory[name].median_mib == pytest.approx(np.median(mib), rel=1e-12)
        assert memory[name].p95_mib == pytest.approx(np.percentile(mib, 95), rel=1e-12)


def test_full_scan_matches_numpy(
    labelled: tuple[SyntheticStoreRecord, list[VinOfflineSample]],
) -> None:
    record, samples = labelled
    stats = collect_vin_offline_dataset_stats(record.config, max_samples=None)
    _check_against_numpy(stats, samples, list(range(len(samples))), SPEC)
    assert stats.integrity_problems == []
    assert stats.scene_labels_available is True
    assert stats.version == 1
    assert stats.store_dir == str(record.store_dir)
    assert stats.max_samples is None
    assert stats.materialized_blocks == {
        "backbone": True,
        "rri_components": True,
        "candidate_ids": True,
        "candidate_poses": True,
    }


def test_manifest_derived_fields(
    labelled: tuple[SyntheticStoreRecord, list[VinOfflineSample]],
) -> None:
    record, samples = labelled
    manifest = json.loads((record.store_dir / "manifest.json").read_text())
    stats = collect_vin_offline_dataset_stats(record.config, max_samples=0)
    assert stats.sampled_samples == 0 and stats.rri == NumericSummary(0, None, None, None)
    blocks = [(s["shard_id"], b) for s in manifest["shards"] for b in s["blocks"]]
    assert [
        (d.shard_id, d.name, d.kind, d.dtype, list(d.shape), d.optional)
        for d in stats.block_diagnostics
    ] == [(sid, b["name"], b["kind"], b["dtype"], b["shape"], b["optional"]) for sid, b in blocks]
    expected_bytes = [
        None if b["dtype"] is None else math.prod(b["shape"]) * np.dtype(b["dtype"]).itemsize
        for _, b in blocks
    ]
    assert [d.estimated_bytes for d in stats.block_diagnostics] == expected_bytes
    assert stats.numeric_bytes == sum(v for v in expected_bytes if v is not None)
    shapes: dict[str, list[int]] = {}
    for _, b in blocks:
        if b["kind"] == "zarr_array":
            rows = shapes.get(b["name"], [0])[0] + b["shape"][0]
            shapes[b["name"]] = [rows, *b["shape"][1:]]
    assert {k: list(v) for k, v in stats.block_shapes.items()} == shapes
    assert stats.block_shapes["candidate_ids"][0] < len(samples)  # the unpaired shard has none


def test_max_samples_spreads_and_matches_numpy(
    labelled: tuple[SyntheticStoreRecord, list[VinOfflineSample]],
) -> None:
    record, samples = labelled
    rows = _index_rows(record.store_dir)
    groups = [(str(r["split"]), str(r["shard_id"])) for r in rows]
    selected = select_vin_offline_sample_indices(groups, 10)
    assert len(selected) == 10 and selected != list(range(10))
    assert {groups[i][0] for i in selected} == {g[0] for g in groups}  # every split
    assert len({groups[i][1] for i in selected}) >= 4  # several shards, not the first rows
    stats = collect_vin_offline_dataset_stats(record.config, max_samples=10)
    _check_against_numpy(stats, samples, selected, SPEC)
    assert [s.sample_index for s in stats.sample_summaries] == selected
    for summary in stats.sample_summaries:
        sample = samples[summary.sample_index]
        row = rows[summary.sample_index]
        assert (summary.sample_key, summary.scene_id, summary.snippet_id, summary.split) == (
            sample.sample_key,
            sample.scene_id,
            sample.snippet_id,
            sample.split,
        )
        assert (summary.shard_id, summary.row) == (row["shard_id"], row["row"])
        assert summary.candidate_count == int(sample.candidate_valid.sum())
        assert summary.vin_points == sample.vin_points.shape[0]
        _assert_summary(
            summary.rri, _summary(sample.rri[sample.candidate_valid & np.isfinite(sample.rri)])
        )
    assert stats == collect_vin_offline_dataset_stats(
        record.config, max_samples=10
    )  # deterministic


def test_batch_preview_uses_the_real_collate(
    labelled: tuple[SyntheticStoreRecord, list[VinOfflineSample]],
) -> None:
    record, samples = labelled
    stats = collect_vin_offline_dataset_stats(record.config, max_samples=5)
    assert stats.batch_shapes_available
    first = [samples[s.sample_index] for s in stats.sample_summaries[:4]]
    n_max = max(s.vin_points.shape[0] for s in first)
    c = SPEC.num_candidates
    expected = {
        "sample_index": (4,),
        "vin_points": (4, n_max, 3),
        "vin_points_mask": (4, n_max),
        "vin_points_lengths": (4,),
        "candidate_valid": (4, c),
        "rri": (4, c),
        "candidate_poses": (4, c, 7),
        "backbone.voxel_features": (4, 8, 4, 4),
        "backbone.global_features": (4, 32),
        **{f"rri_components.{n}": (4, c) for n in SPEC.rri_components},
    }
    if all(s.candidate_ids is not None for s in first):
        expected["candidate_ids"] = (4, c)
    assert stats.batch_shapes == expected


def test_unlabelled_store_reports_unavailable_not_zero(tmp_path: Path) -> None:
    spec = SyntheticStoreSpec(scene_labels=False, num_scenes=2, seed=3)
    record = write_synthetic_store(tmp_path / "unlabelled", spec)
    samples = make_synthetic_samples(spec)
    stats = collect_vin_offline_dataset_stats(record.config, max_samples=None)
    assert stats.scene_labels_available is False
    assert stats.candidate_count is None and stats.rri is None
    assert stats.batch_shapes_available is False and stats.batch_shapes == {}
    assert stats.candidate_count_values == [] and stats.rri_values == []
    assert all(s.candidate_count is None and s.rri is None for s in stats.sample_summaries)
    assert stats.rri_pairing_unavailable_sample_keys == []
    # Poses without labels: every candidate whose pose is not all-zero padding.
    poses = np.concatenate(
        [s.candidate_poses[(s.candidate_poses != 0).any(axis=1)] for s in samples]
    )
    np.testing.assert_allclose(
        stats.candidate_pose_values["distance_m"],
        np.linalg.norm(poses[:, :3].astype(np.float64), axis=1),
        rtol=1e-12,
    )
    memory = {m.component for m in stats.memory_diagnostics}
    assert "oracle_rri" not in memory and "vin_points" in memory


def _write(
    path: Path, samples: list[VinOfflineSample], *, labels: bool = True, c: int = 4, rows: int = 4
) -> VinOfflineStoreConfig:
    with VinOfflineStoreWriter(
        path, num_candidates=c, scene_labels=labels, rows_per_shard=rows, fsync=False
    ) as writer:
        writer.add_batch(samples)
    return VinOfflineStoreConfig(store_dir=path)


def _sample(i: int, **blocks: object) -> VinOfflineSample:
    return VinOfflineSample(
        sample_key=f"s{i}",
        scene_id=f"scene_{i % 2}",
        snippet_id=f"snippet_{i}",
        split="train",
        vin_points=np.full((i + 1, 3), 0.5, dtype=np.float32),
        **blocks,  # type: ignore[arg-type]
    )


def test_labelled_store_with_zero_labels_is_not_unavailable(tmp_path: Path) -> None:
    c = 4
    samples = [
        _sample(
            i, candidate_valid=np.zeros(c, dtype=bool), rri=np.full(c, np.nan, dtype=np.float32)
        )
        for i in range(6)
    ]
    stats = collect_vin_offline_dataset_stats(_write(tmp_path / "zeros", samples), max_samples=None)
    assert stats.scene_labels_available is True
    assert stats.candidate_count == NumericSummary(6, 0.0, 0.0, 0.0)
    assert stats.rri == NumericSummary(0, None, None, None)
    assert stats.candidate_count_values == [0] * 6
    assert all(s.candidate_count == 0 for s in stats.sample_summaries)
    assert stats.batch_shapes_available and stats.batch_shapes["rri"] == (4, c)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_backbone_moments_are_float64_accurate_on_offset_data(tmp_path: Path, dtype: str) -> None:
    """A large mean and small spread: naive float32 sum-of-squares would lose the variance."""
    rng = np.random.default_rng(11)
    offset, scale = (1000.0, 3.0) if dtype == "float16" else (1.0e4, 0.01)
    samples = []
    for i in range(40):
        value = (offset + scale * rng.standard_normal((64, 33))).astype(dtype)
        value[0, : i % 3] = 0.0
        samples.append(_sample(i, backbone={"features": value}))
    config = _write(tmp_path / dtype, samples, labels=False, rows=9)
    stats = collect_vin_offline_dataset_stats(config, max_samples=None)
    values = np.concatenate([s.backbone["features"].astype(np.float64).ravel() for s in samples])
    (got,) = stats.backbone_diagnostics
    assert got.count == values.size and got.sampled_rows == 40
    assert got.mean == pytest.approx(values.mean(), rel=1e-6)
    assert got.std == pytest.approx(values.std(), rel=1e-6)
    assert got.abs_mean == pytest.approx(np.abs(values).mean(), rel=1e-6)
    assert got.nz_frac == pytest.approx(float((np.abs(values) > 1e-6).mean()), rel=1e-12)


def test_chunk_layouts_do_not_change_the_numbers(tmp_path: Path) -> None:
    """Rows split over inner chunks, many rows per chunk, and zstd (zarr-decoded) chunks agree."""
    rng = np.random.default_rng(5)
    c = 6
    samples = [
        _sample(
            i,
            candidate_valid=rng.random(c) > 0.3,
            rri=rng.random(c).astype(np.float32),
            rri_components={"v": rng.random(c).astype(np.float32)},
            candidate_ids=np.arange(c, dtype=np.int64),
            candidate_poses=np.tile(np.array([1, 2, 2, 1, 0, 0, 0], np.float32), (c, 1)),
            backbone={
                "big": rng.normal(size=(64, 33)).astype(np.float32),
                "half": rng.normal(size=(5, 7)).astype(np.float16),
            },
        )
        for i in range(23)
    ]
    results = []
    for name, chunk_bytes, compressor in [
        ("raw", 1 << 20, None),
        ("split", 1000, None),
        ("zstd", 1000, "zstd"),
    ]:
        path = tmp_path / name
        with VinOfflineStoreWriter(
            path,
            num_candidates=c,
            rows_per_shard=10,
            chunk_bytes=chunk_bytes,
            compressor=compressor,
            fsync=False,
        ) as writer:
            writer.add_batch(samples)
        stats = collect_vin_offline_dataset_stats(path, max_samples=None)
        assert stats.integrity_problems == []
        results.append(stats)
    # Block partitioning changes the float64 merge order: equal to the last few bits.
    for other in results[1:]:
        for ours, theirs in zip(
            results[0].backbone_diagnostics, other.backbone_diagnostics, strict=True
        ):
            assert (ours.field, ours.count, ours.sampled_rows) == (
                theirs.field,
                theirs.count,
                theirs.sampled_rows,
            )
            for name in ("mean", "std", "abs_mean", "nz_frac"):
                assert getattr(ours, name) == pytest.approx(getattr(theirs, name), rel=1e-12)
    plain = [
        dataclasses.replace(r, store_dir="", generation={}, backbone_diagnostics=[])
        for r in results
    ]
    assert plain[0] == plain[1] == plain[2]
    values = np.concatenate([s.backbone["big"].astype(np.float64).ravel() for s in samples])
    big = next(b for b in results[0].backbone_diagnostics if b.field == "big")
    assert big.std == pytest.approx(values.std(), rel=1e-6)
    assert (
        results[0].rri_values
        == np.concatenate([s.rri[s.candidate_valid] for s in samples]).astype(np.float64).tolist()
    )
