"""The synthetic generator is deterministic and its record tells the truth about what it planted."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from vinlens.store.reader import open_vin_offline_store
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_dataset,
    write_synthetic_store,
)


def _payload_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    spec = SyntheticStoreSpec(seed=11)
    a = write_synthetic_store(tmp_path / "a", spec)
    b = write_synthetic_store(tmp_path / "b", spec)
    c = write_synthetic_store(tmp_path / "c", SyntheticStoreSpec(seed=12))
    assert _payload_files(a.store_dir) == _payload_files(b.store_dir)
    assert _payload_files(a.store_dir) != _payload_files(c.store_dir)
    assert a.sample_keys == b.sample_keys


def test_store_record_matches_the_store(tmp_path: Path) -> None:
    spec = SyntheticStoreSpec(
        num_scenes=4, snippets_per_scene=3, samples_per_snippet=3, rows_per_shard=10, seed=5
    )
    record = write_synthetic_store(tmp_path / "s", spec)
    with open_vin_offline_store(record.config, validate=True) as reader:
        rows = reader.samples
        assert record.num_samples == len(rows) == 36
        assert record.shard_ids == reader.manifest.shard_ids == ("00000", "00001", "00002", "00003")
        assert record.store_pairs == {(r.scene_id, r.snippet_id) for r in rows}
        assert len(record.store_pairs) == 12
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.split] = counts.get(r.split, 0) + 1
        assert dict(record.split_counts) == counts
        # Trailing shard without candidate ids; its keys are the recorded unpaired ones.
        unpaired = [
            r.sample_key for r in rows if reader.block_spec(r.shard_id, "candidate_ids") is None
        ]
        assert tuple(unpaired) == record.unpaired_sample_keys and unpaired
        for key in record.no_valid_candidate_sample_keys:
            row = next(r for r in rows if r.sample_key == key)
            assert not reader.read_row(row.shard_id, "candidate_valid", row.row).any()
        assert record.no_valid_candidate_sample_keys


def test_samples_are_realistic(tmp_path: Path) -> None:
    samples = make_synthetic_samples(SyntheticStoreSpec(seed=1, num_scenes=5))
    valid = np.stack([s.candidate_valid for s in samples])
    rri = np.stack([s.rri for s in samples])
    ids = np.stack([s.candidate_ids for s in samples if s.candidate_ids is not None])
    poses = np.stack([s.candidate_poses for s in samples])
    assert 0 < valid.mean() < 1
    assert np.isnan(rri[valid]).any() and np.isfinite(rri[valid]).any()
    assert (ids[:, -2:] == -1).all() and not valid[:, -2:].any()  # padding is never valid
    np.testing.assert_allclose(np.linalg.norm(poses[..., 3:], axis=-1), 1.0, rtol=1e-5)
    distance = np.linalg.norm(poses[..., :3], axis=-1)
    assert distance.min() >= 0.5 - 1e-5 and distance.max() <= 3.0 + 1e-5
    assert {s.backbone["voxel_features"].dtype.name for s in samples} == {"float16"}
    assert {s.backbone["global_features"].dtype.name for s in samples} == {"float32"}
    assert len({s.vin_points.shape[0] for s in samples}) > 1


def test_raw_dataset_plants_the_recorded_gaps_and_long_names(tmp_path: Path) -> None:
    dataset = write_synthetic_dataset(tmp_path, raw_spec=SyntheticRawSpec(num_tars=3))
    raw, store = dataset.raw, dataset.store
    assert dataset.config.raw_dataset_dir == raw.raw_dir
    # Recompute coverage from the real tar member lists.
    names: list[str] = []
    for path in raw.tar_paths:
        with tarfile.open(path) as tar:
            names.extend(m.name for m in tar.getmembers())
    assert names == list(raw.member_names)
    pairs = set()
    unparsed = []
    for name in names:
        key = name.split("/")
        key[-1] = key[-1].split(".", 1)[0]
        if len(key) < 2:
            unparsed.append(name)
        else:
            pairs.add((key[-2], key[-1]))
    assert pairs == raw.raw_pairs
    assert tuple(unparsed) == raw.unparseable_members and unparsed
    assert set(raw.missing_in_store) == pairs - store.store_pairs and raw.missing_in_store
    assert set(raw.outside_dataset) == store.store_pairs - pairs and raw.outside_dataset
    assert set(raw.covered) == pairs & store.store_pairs
    assert any(
        scene not in store.scene_ids for scene, _ in raw.missing_in_store
    )  # a raw-only scene
    # Long names really use the GNU ././@LongLink and pax "x" headers.
    assert raw.tar_formats == ("ustar", "gnu", "pax")
    assert raw.long_name_members and all(len(n.encode()) > 100 for n in raw.long_name_members)
    gnu_bytes = raw.tar_paths[1].read_bytes()
    pax_bytes = raw.tar_paths[2].read_bytes()
    assert b"././@LongLink" in gnu_bytes
    assert any(pax_bytes[i + 156 : i + 157] == b"x" for i in range(0, len(pax_bytes), 512))
    assert all(len(n.encode()) <= 100 for n in names if n in _members_of(raw.tar_paths[0]))


def test_missing_snippet_spread_varies_coverage_by_scene(tmp_path: Path) -> None:
    store_spec = SyntheticStoreSpec(num_scenes=8)
    raw_spec = SyntheticRawSpec(
        missing_snippets_per_scene=0, missing_snippets_spread=3, raw_only_scenes=0
    )
    dataset = write_synthetic_dataset(tmp_path, store_spec, raw_spec)
    per_scene = {scene: 0 for scene in dataset.store.scene_ids}
    names = [n for p in dataset.raw.tar_paths for n in _members_of(p)]
    raw_pairs = {(n.split("/")[-2], n.split("/")[-1].split(".", 1)[0]) for n in names if "/" in n}
    for scene, _snippet in raw_pairs - dataset.store.store_pairs:
        per_scene[scene] += 1
    assert set(raw_pairs - dataset.store.store_pairs) == set(dataset.raw.missing_in_store)
    assert all(0 <= n <= 3 for n in per_scene.values())
    assert len(set(per_scene.values())) > 1  # not the same gap in every scene
    with pytest.raises(ValueError, match="missing_snippets_spread"):
        SyntheticRawSpec(missing_snippets_spread=-1)


def _members_of(path: Path) -> set[str]:
    with tarfile.open(path) as tar:
        return set(tar.getnames())


def test_specs_refuse_impossible_values() -> None:
    with pytest.raises(ValueError, match="float16 or float32"):
        SyntheticStoreSpec(backbone_fields=(("x", (2,), "int8"),))
    with pytest.raises(ValueError, match="padded_candidates"):
        SyntheticStoreSpec(num_candidates=2, padded_candidates=2)
    with pytest.raises(ValueError, match="formats"):
        SyntheticRawSpec(formats=("v7",))
