"""Diagnostics on damaged stores: errors or integrity problems naming the file, never fill values."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from malformed_stores import MALFORMED_CASES, MalformedCase

from vinlens.store.coverage import collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.format import VinOfflineSample, VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticStoreRecord, write_synthetic_dataset
from vinlens.store.writer import VinOfflineStoreWriter


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda c: c.name)
def test_malformed_store_surfaces_naming_the_file(
    small_store: SyntheticStoreRecord, case: MalformedCase
) -> None:
    store = small_store.store_dir
    assert collect_vin_offline_dataset_stats(store, max_samples=None).integrity_problems == []
    case.mutate(store)
    named = str(store / case.names_file.split("/c/")[0])
    if case.stage == "open":
        # The manifest or sample index itself is broken: no statistics at all.
        with pytest.raises(case.error) as info:
            collect_vin_offline_dataset_stats(store, max_samples=None)
        assert named in str(info.value)
        return
    # Shard/block damage: the rest of the store is still described, the damage listed.
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    matching = [p for p in stats.integrity_problems if p.kind == case.error.__name__]
    assert matching, f"{case.name}: {stats.integrity_problems}"
    assert any(
        (p.path is not None and p.path.startswith(named)) or named in p.message for p in matching
    )
    assert stats.num_samples == 24


def _sample(i: int, c: int, **blocks: object) -> VinOfflineSample:
    return VinOfflineSample(
        sample_key=f"k{i}",
        scene_id="scene_000001",
        snippet_id=f"snippet_{i:06d}",
        split="train",
        vin_points=np.full((i % 5 + 1, 3), 0.25, dtype=np.float32),
        **blocks,  # type: ignore[arg-type]
    )


def test_missing_chunk_rows_are_left_out_not_read_as_fill_values(tmp_path: Path) -> None:
    c = 4
    rri_rows = [np.full(c, 0.01 * (i + 1), np.float32) for i in range(40)]
    path = tmp_path / "store"
    with VinOfflineStoreWriter(
        path, num_candidates=c, rows_per_shard=64, chunk_bytes=64, fsync=False
    ) as writer:
        for i in range(40):
            writer.add(_sample(i, c, candidate_valid=np.ones(c, bool), rri=rri_rows[i]))
    (path / "shards/00000/arrays/rri/c/3/0").unlink()  # rows 12..15
    stats = collect_vin_offline_dataset_stats(path, max_samples=None)
    kept = [i for i in range(40) if not 12 <= i < 16]
    expected = np.concatenate([rri_rows[i] for i in kept]).astype(np.float64)
    assert stats.rri_values == expected.tolist()
    assert stats.rri is not None and stats.rri.count == expected.size
    assert stats.candidate_count is not None and stats.candidate_count.count == 40
    (problem,) = [p for p in stats.integrity_problems if p.kind == "MissingChunksError"]
    assert problem.block == "rri" and problem.path == str(path / "shards/00000/arrays/rri")
    assert "c/3/0" in problem.message
    summaries = {s.sample_index: s for s in stats.sample_summaries}
    assert summaries[13].rri is None and summaries[13].candidate_count == c
    assert summaries[20].rri is not None and summaries[20].rri.count == c


def test_non_finite_values_are_integrity_problems_and_excluded(tmp_path: Path) -> None:
    c = 3
    samples = []
    for i in range(6):
        rri = np.array([0.1, np.nan, 0.3], np.float32)
        poses = np.tile(np.array([1, 0, 0, 1, 0, 0, 0], np.float32), (c, 1))
        f16 = np.full((2, 2), 1.5, np.float16)
        f32 = np.full(5, 2.0, np.float32)
        points = np.zeros((4, 3), np.float32)
        if i == 2:
            rri[2] = np.inf
            poses[0, 4] = np.nan
            f16[0, 0] = np.inf
            f32[1] = np.nan
            points[1, 1] = np.nan
        samples.append(
            VinOfflineSample(
                sample_key=f"k{i}",
                scene_id="scene_000001",
                snippet_id=f"snippet_{i:06d}",
                split="train",
                vin_points=points,
                candidate_valid=np.array([True, True, True]),
                rri=rri,
                candidate_poses=poses,
                backbone={"half": f16, "single": f32},
            )
        )
    path = tmp_path / "store"
    with VinOfflineStoreWriter(path, num_candidates=c, rows_per_shard=4, fsync=False) as writer:
        writer.add_batch(samples)
    stats = collect_vin_offline_dataset_stats(path, max_samples=None)
    flagged = {(p.kind, p.shard_id, p.block) for p in stats.integrity_problems}
    assert flagged == {
        ("NonFiniteValues", "00000", "rri"),
        ("NonFiniteValues", "00000", "candidate_poses"),
        ("NonFiniteValues", "00000", "backbone.half"),
        ("NonFiniteValues", "00000", "backbone.single"),
        ("NonFiniteValues", "00000", "vin_points"),
    }
    assert all(str(path / "shards/00000") in p.path for p in stats.integrity_problems if p.path)
    by_field = {b.field: b for b in stats.backbone_diagnostics}
    assert by_field["half"].count == 6 * 4 - 1 and by_field["half"].mean == 1.5
    assert by_field["single"].count == 6 * 5 - 1 and by_field["single"].std == 0.0
    assert stats.rri is not None and stats.rri.count == 6 * 2 - 1  # NaN skipped, inf excluded
    assert stats.candidate_pose_summaries["distance_m"].count == 6 * 3 - 1


def test_duplicate_candidate_ids_are_not_paired(tmp_path: Path) -> None:
    c = 4
    samples = [
        _sample(
            i,
            c,
            candidate_valid=np.ones(c, bool),
            rri=np.array([0.1, 0.2, 0.3, 0.4], np.float32),
            rri_components={"v": np.array([1, 2, 3, 4], np.float32)},
            candidate_ids=np.array([5, 5, 7, -1] if i == 0 else [1, 2, 3, 4], np.int64),
        )
        for i in range(3)
    ]
    path = tmp_path / "store"
    with VinOfflineStoreWriter(path, num_candidates=c, fsync=False) as writer:
        writer.add_batch(samples)
    stats = collect_vin_offline_dataset_stats(path, max_samples=None)
    pairs = stats.rri_component_pairs["v"]
    assert pairs[0] == pytest.approx((0.3, 3.0))  # row 0: only id 7 is unique and >= 0
    assert len(pairs) == 1 + 2 * 4
    assert [p.kind for p in stats.integrity_problems] == ["DuplicateCandidateIds"]
    assert len(stats.rri_component_values["v"]) == 12  # marginals keep every valid candidate


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest.update(
            f"{path.relative_to(root)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}".encode()
        )
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_diagnostics_never_write(tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path / "d")
    before = _tree_digest(tmp_path)
    collect_vin_offline_dataset_stats(data.config, max_samples=None)
    collect_vin_offline_dataset_stats(data.config, max_samples=3)
    collect_vin_offline_dataset_coverage(data.config)
    assert _tree_digest(tmp_path) == before


def test_non_store_paths_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="absent"):
        collect_vin_offline_dataset_stats(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="file"):
        collect_vin_offline_dataset_stats(VinOfflineStoreConfig(store_dir=tmp_path / "file"))
    with pytest.raises(ValueError, match="max_samples"):
        collect_vin_offline_dataset_stats(tmp_path, max_samples=-1)
