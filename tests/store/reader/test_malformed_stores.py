"""Every way the malformed-store table breaks a store gives its own error naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from malformed_stores import MALFORMED_CASES, MalformedCase

from vinlens.store.dataset import VinOfflineDataset
from vinlens.store.format import VinOfflineStoreError
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreRecord


def _trigger(store: Path, stage: str) -> None:
    with VinOfflineStoreReader(store) as reader:
        if stage == "open":
            return
        reader.validate()
        if stage == "validate":
            return
        for index in range(reader.num_samples):
            reader.read_sample(index)


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda c: c.name)
def test_malformed_store_raises_its_error_naming_the_file(
    small_store: SyntheticStoreRecord, case: MalformedCase
) -> None:
    store = small_store.store_dir
    _trigger(store, "read")  # the untouched store reads cleanly
    case.mutate(store)
    with pytest.raises(case.error) as info:
        _trigger(store, "read")
    exc = info.value
    assert type(exc) is case.error, f"{case.name}: got {type(exc).__name__}: {exc}"
    assert str(store / case.names_file) in str(exc)
    assert exc.path is not None and exc.path.startswith(
        str(store / case.names_file.split("/c/")[0])
    )
    assert case.phrase in str(exc)


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda c: c.name)
def test_problem_surfaces_at_the_documented_stage(
    small_store: SyntheticStoreRecord, case: MalformedCase
) -> None:
    """Structural problems are caught before any payload is decoded; payload damage on read."""
    store = small_store.store_dir
    case.mutate(store)
    stages = ["open", "validate", "read"]
    for stage in stages[: stages.index(case.stage)]:
        _trigger(store, stage)  # must not raise yet
    with pytest.raises(case.error):
        _trigger(store, case.stage)


@pytest.mark.parametrize(
    "case",
    [c for c in MALFORMED_CASES if c.stage in ("validate", "read")],
    ids=lambda c: c.name,
)
def test_dataset_reading_a_damaged_store_raises_instead_of_returning_fill_values(
    small_store: SyntheticStoreRecord, case: MalformedCase
) -> None:
    case.mutate(small_store.store_dir)
    dataset = VinOfflineDataset(small_store.config)
    with pytest.raises(VinOfflineStoreError) as info:
        for index in range(len(dataset)):
            dataset[index]
    assert str(small_store.store_dir / case.names_file.split("/c/")[0]) in str(info.value)


def test_integrity_problems_lists_every_damaged_block_without_raising(
    small_store: SyntheticStoreRecord,
) -> None:
    store = small_store.store_dir
    (store / "shards/00002/arrays/candidate_valid/c/0/0").unlink()
    (store / "shards/00000/records/vin_points.offsets").write_bytes(b"\0" * 8)
    with VinOfflineStoreReader(store) as reader:
        problems = reader.integrity_problems()
        assert [(p.kind, p.shard_id, p.block) for p in problems] == [
            ("CorruptRecordError", "00000", "vin_points"),
            ("MissingChunksError", "00002", "candidate_valid"),
        ]
        (missing,) = reader.missing_chunks()
        assert (missing.expected_chunks, missing.initialized_chunks, missing.missing_examples) == (
            1,
            0,
            ("c/0/0",),
        )
        # Rows of other blocks stay readable; the damaged block refuses.
        reader.read_row("00002", "rri", 0)
        with pytest.raises(VinOfflineStoreError):
            reader.read_row("00002", "candidate_valid", 0)


def test_missing_chunk_only_blocks_the_rows_it_holds(tmp_path: Path) -> None:
    """With several chunks per block, rows in intact chunks still read; others raise."""
    import numpy as np

    from vinlens.store.format import MissingChunksError, VinOfflineSample
    from vinlens.store.writer import VinOfflineStoreWriter

    path = tmp_path / "s"
    with VinOfflineStoreWriter(
        path, num_candidates=4, rows_per_shard=64, chunk_bytes=64, fsync=False
    ) as w:
        for i in range(40):
            w.add(
                VinOfflineSample(
                    f"k{i}",
                    "scene_000001",
                    f"snippet_{i:06d}",
                    "train",
                    np.zeros((1, 3), np.float32),
                    candidate_valid=np.ones(4, bool),
                    rri=np.full(4, i, np.float32),
                )
            )
    with VinOfflineStoreReader(path) as reader:
        status = reader.chunk_status("00000", "rri")
        assert status.expected_chunks == 10  # 64 bytes = 4 rows of 4 float32
    (path / "shards/00000/arrays/rri/c/3/0").unlink()
    with VinOfflineStoreReader(path) as reader:
        assert reader.read_rows("00000", "rri", 0, 12)[:, 0].tolist() == list(range(12))
        assert reader.read_rows("00000", "rri", 16, 40)[0, 0] == 16
        with pytest.raises(MissingChunksError, match=r"rows 10:14 .*c/3/0"):
            reader.read_rows("00000", "rri", 10, 14)
