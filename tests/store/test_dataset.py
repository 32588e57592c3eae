"""VinOfflineDataset and the VinOracleBatch collate, in-process and in DataLoader workers."""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vinlens.store.dataset import VinOfflineDataset, VinOracleBatch, collate_vin_oracle_batch
from vinlens.store.format import StoreReplacedError
from vinlens.store.synthetic import (
    SyntheticStoreRecord,
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_store,
)


def _by_key(record: SyntheticStoreRecord) -> dict:
    return {s.sample_key: s for s in make_synthetic_samples(record.spec)}


def test_dataloader_with_workers_yields_every_sample_exactly_as_written(
    small_store: SyntheticStoreRecord,
) -> None:
    dataset = VinOfflineDataset(small_store.config)
    written = _by_key(small_store)
    loader = DataLoader(
        dataset,
        batch_size=5,
        num_workers=2,
        collate_fn=collate_vin_oracle_batch,
        multiprocessing_context="fork",
    )
    seen: list[str] = []
    for batch in loader:
        assert isinstance(batch, VinOracleBatch)
        for i, key in enumerate(batch.sample_keys):
            sample = written[key]
            n = sample.vin_points.shape[0]
            assert int(batch.vin_points_lengths[i]) == n
            assert batch.vin_points_mask[i].sum() == n
            np.testing.assert_array_equal(batch.vin_points[i, :n].numpy(), sample.vin_points)
            assert not batch.vin_points[i, n:].any()
            np.testing.assert_array_equal(batch.rri[i].numpy(), sample.rri)
            np.testing.assert_array_equal(batch.candidate_valid[i].numpy(), sample.candidate_valid)
            np.testing.assert_array_equal(
                batch.backbone["voxel_features"][i].numpy(), sample.backbone["voxel_features"]
            )
        seen.extend(batch.sample_keys)
    assert seen == list(small_store.sample_keys)


def test_batch_shapes_and_dtypes(small_store: SyntheticStoreRecord) -> None:
    dataset = VinOfflineDataset(small_store.config)
    batch = collate_vin_oracle_batch([dataset[i] for i in range(4)])
    c = small_store.spec.num_candidates
    n_max = max(int(dataset[i].vin_points.shape[0]) for i in range(4))
    assert batch.shapes() == {
        "sample_index": (4,),
        "vin_points": (4, n_max, 3),
        "vin_points_mask": (4, n_max),
        "vin_points_lengths": (4,),
        "candidate_valid": (4, c),
        "rri": (4, c),
        "candidate_ids": (4, c),
        "candidate_poses": (4, c, 7),
        "rri_components.visibility": (4, c),
        "rri_components.novelty": (4, c),
        "backbone.voxel_features": (4, 8, 4, 4),
        "backbone.global_features": (4, 32),
    }
    assert batch.backbone["voxel_features"].dtype == torch.float16
    assert batch.backbone["global_features"].dtype == torch.float32
    assert batch.candidate_valid is not None and batch.candidate_valid.dtype == torch.bool
    assert batch.candidate_ids is not None and batch.candidate_ids.dtype == torch.int64
    assert batch.to("cpu").shapes() == batch.shapes()


def test_candidate_ids_are_left_out_of_a_batch_mixing_shards_with_and_without_them(
    small_store: SyntheticStoreRecord,
) -> None:
    dataset = VinOfflineDataset(small_store.config)
    assert small_store.unpaired_sample_keys  # the last shard has no candidate ids
    first, last = dataset[0], dataset[len(dataset) - 1]
    assert first.candidate_ids is not None and last.candidate_ids is None
    batch = collate_vin_oracle_batch([first, last])
    assert batch.candidate_ids is None
    assert batch.rri is not None and batch.rri.shape == (2, small_store.spec.num_candidates)


def test_split_selects_that_split_in_store_order(small_store: SyntheticStoreRecord) -> None:
    for split, count in small_store.split_counts.items():
        dataset = VinOfflineDataset(small_store.config, split=split)
        assert len(dataset) == count
        assert {dataset[i].split for i in range(len(dataset))} == {split}
        indices = [row.sample_index for row in dataset.samples]
        assert indices == sorted(indices)
    available = sorted(small_store.split_counts)
    with pytest.raises(
        ValueError, match=re.escape(f"no split 'nope'; available splits: {available}")
    ):
        VinOfflineDataset(small_store.config, split="nope")


def test_dataset_pickles_without_its_reader_and_reopens_lazily(
    small_store: SyntheticStoreRecord,
) -> None:
    """What spawn-started workers get: config and row table, no open handles."""
    dataset = VinOfflineDataset(small_store.config)
    first = dataset[3]
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone._reader is None
    again = clone[3]
    assert again.sample_key == first.sample_key
    assert torch.equal(again.vin_points, first.vin_points)
    assert clone._reader is not None


def test_unlabelled_store_batches_without_labels(tmp_path: Path) -> None:
    record = write_synthetic_store(tmp_path / "u", SyntheticStoreSpec(scene_labels=False))
    dataset = VinOfflineDataset(record.config)
    batch = collate_vin_oracle_batch([dataset[0], dataset[1]])
    assert batch.rri is None and batch.candidate_valid is None and batch.candidate_ids is None
    assert batch.candidate_poses is not None and batch.rri_components == {}


def test_worker_refuses_a_store_replaced_after_the_dataset_was_built(
    small_store: SyntheticStoreRecord, tmp_path: Path
) -> None:
    dataset = VinOfflineDataset(small_store.config)
    replacement = write_synthetic_store(tmp_path / "other", SyntheticStoreSpec(seed=99))
    shutil.rmtree(small_store.store_dir)
    replacement.store_dir.rename(small_store.store_dir)
    with pytest.raises(StoreReplacedError, match="not the one this dataset was built on"):
        dataset[0]


def test_collate_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty"):
        collate_vin_oracle_batch([])
