"""Hostile stores: every chunk read applies the reader's checks, damage is listed naming the file.

Each test damages a private copy of the 24-sample, 3-shard synthetic store (shards of 8
rows) in one way and checks that ``integrity_problems()`` does not raise, that the damage
is listed naming the file, and that statistics leave the damaged rows out instead of
reporting numbers computed from refused bytes.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import shutil
from pathlib import Path

import msgpack
import numpy as np
import pytest

from vinlens.store.diagnostics import (
    VinOfflineDatasetStats,
    collect_vin_offline_dataset_stats,
)
from vinlens.store.format import RecordDecodeError, VinOfflineSample, decode_record, decode_records
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreRecord
from vinlens.store.writer import VinOfflineStoreWriter

DAMAGED = "00001"


def _clean_rri_count_without(stats: VinOfflineDatasetStats, shard_id: str) -> int:
    return sum(
        s.rri.count for s in stats.sample_summaries if s.shard_id != shard_id and s.rri is not None
    )


def _problems(store: Path) -> list[tuple[str, str | None, str | None]]:
    with VinOfflineStoreReader(store) as reader:
        return [(p.kind, p.block, p.path) for p in reader.integrity_problems()]


def _chunk(store: Path, block: str, shard: str = DAMAGED) -> Path:
    return store / "shards" / shard / "arrays" / block / "c" / "0" / "0"


def _check_rri_left_out(store: Path, clean: VinOfflineDatasetStats, block: str) -> None:
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    chunk = str(_chunk(store, block))
    refused = [p for p in stats.integrity_problems if p.kind == "CorruptChunkError"]
    assert refused and refused[0].path == chunk and refused[0].block == block
    assert stats.rri is not None and clean.rri is not None
    assert stats.rri.count == _clean_rri_count_without(clean, DAMAGED)
    low, high, clean_low, clean_high = (
        stats.rri.minimum,
        stats.rri.maximum,
        clean.rri.minimum,
        clean.rri.maximum,
    )
    assert low is not None and high is not None and clean_low is not None
    assert clean_high is not None and clean_low <= low <= high <= clean_high
    assert all(s.rri is None for s in stats.sample_summaries if s.shard_id == DAMAGED)
    assert stats.num_samples == 24


def test_chunk_with_extra_bytes_is_refused(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    clean = collect_vin_offline_dataset_stats(store, max_samples=None)
    with open(_chunk(store, "rri"), "ab") as handle:
        handle.write(b"\x00" * 64)
    _check_rri_left_out(store, clean, "rri")


def test_chunk_symlinked_to_a_device_is_refused(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    clean = collect_vin_offline_dataset_stats(store, max_samples=None)
    os.remove(_chunk(store, "rri"))
    os.symlink("/dev/urandom", _chunk(store, "rri"))
    _check_rri_left_out(store, clean, "rri")


def test_candidate_valid_on_dev_zero_feeds_no_count(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    clean = collect_vin_offline_dataset_stats(store, max_samples=None)
    os.remove(_chunk(store, "candidate_valid"))
    os.symlink("/dev/zero", _chunk(store, "candidate_valid"))
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert any(
        p.kind == "CorruptChunkError" and p.path == str(_chunk(store, "candidate_valid"))
        for p in stats.integrity_problems
    )
    assert stats.candidate_count is not None and clean.candidate_count is not None
    assert stats.candidate_count.count == 16  # shards 00000 and 00002 only
    assert all(s.candidate_count is None for s in stats.sample_summaries if s.shard_id == DAMAGED)


def test_chunk_that_is_a_directory_is_listed(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    clean = collect_vin_offline_dataset_stats(store, max_samples=None)
    os.remove(_chunk(store, "rri"))
    (_chunk(store, "rri") / "inner").mkdir(parents=True)
    listed = _problems(store)
    assert any(
        block == "rri" and path is not None and "arrays/rri" in path for _, block, path in listed
    )
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert stats.rri is not None
    assert stats.rri.count == _clean_rri_count_without(clean, DAMAGED)


def test_shard_directory_replaced_by_a_file_is_listed(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    shard = store / "shards" / DAMAGED
    shutil.rmtree(shard)
    shard.write_bytes(b"not a directory")
    listed = _problems(store)
    assert ("MissingShardError", None, str(shard)) in listed
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert any(
        p.kind == "MissingShardError" and p.path == str(shard) for p in stats.integrity_problems
    )
    assert stats.vin_points.count == 16 and stats.num_samples == 24


def _rewrite_first_record(store: Path, record: bytes) -> Path:
    records = store / "shards" / DAMAGED / "records"
    data = (records / "vin_points.msgpack").read_bytes()
    offsets = np.frombuffer((records / "vin_points.offsets").read_bytes(), dtype="<u8")
    pieces = [data[int(a) : int(b)] for a, b in itertools.pairwise(offsets)]
    pieces[0] = record
    new_offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype("<u8")
    (records / "vin_points.msgpack").write_bytes(b"".join(pieces))
    (records / "vin_points.offsets").write_bytes(new_offsets.tobytes())
    return records / "vin_points.msgpack"


def test_record_declaring_an_impossible_shape_is_listed(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    bad = msgpack.packb(
        {"points": {"dtype": "float32", "shape": [2**62, 2**62, 0], "data": b""}},
        use_bin_type=True,
    )
    with pytest.raises(RecordDecodeError):
        decode_record(bad)
    with pytest.raises(RecordDecodeError):
        list(decode_records(bad, [0, len(bad)]))
    path = _rewrite_first_record(store, bad)
    assert _problems(store) == []  # offsets and sizes are consistent
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    unreadable = [p for p in stats.integrity_problems if p.block == "vin_points"]
    assert unreadable and unreadable[0].kind == "CorruptRecordError"
    assert unreadable[0].path == str(path) and "1 unreadable" in unreadable[0].message
    assert stats.vin_points.count == 23


def _edit_json(path: Path, edit: object) -> None:
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))


def test_huge_declared_grid_is_checked_by_the_files_that_exist(
    small_store: SyntheticStoreRecord,
) -> None:
    """zarr.json and manifest agree on [8, 2**34] with [1, 1] chunks: 2**37 declared chunks."""
    store = small_store.store_dir
    block = "backbone.global_features"
    huge = [8, 2**34]

    def zarr_edit(meta: dict) -> None:  # type: ignore[type-arg]
        meta["shape"] = huge
        meta["chunk_grid"]["configuration"]["chunk_shape"] = [1, 1]

    def manifest_edit(manifest: dict) -> None:  # type: ignore[type-arg]
        for spec in manifest["shards"][1]["blocks"]:
            if spec["name"] == block:
                spec["shape"] = huge

    _edit_json(store / "shards" / DAMAGED / "arrays" / block / "zarr.json", zarr_edit)
    _edit_json(store / "manifest.json", manifest_edit)
    with VinOfflineStoreReader(store) as reader:
        problems = reader.integrity_problems()
        status = reader.chunk_status(DAMAGED, block)
    assert [p.kind for p in problems] == ["MissingChunksError"]
    assert status.expected_chunks == 8 * 2**34
    assert status.initialized_chunks == 1  # c/0/0 is a key of the new grid too
    assert status.missing_examples[:2] == ("c/0/1", "c/0/2")
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert stats.num_samples == 24
    fields = {b.field: b for b in stats.backbone_diagnostics}
    assert fields["global_features"].sampled_rows == 16  # shard 00001 left out


def test_zero_chunk_extent_is_a_named_error(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    path = store / "shards" / DAMAGED / "arrays" / "rri" / "zarr.json"

    def edit(meta: dict) -> None:  # type: ignore[type-arg]
        meta["chunk_grid"]["configuration"]["chunk_shape"] = [0, 16]

    _edit_json(path, edit)
    listed = _problems(store)
    assert listed == [("BlockMismatchError", "rri", str(path))]
    with VinOfflineStoreReader(store) as reader:
        message = reader.integrity_problems()[0].message
    assert "chunk_shape [0, 16]" in message and ">= 1" in message
    stats = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert any(p.kind == "BlockMismatchError" for p in stats.integrity_problems)


def test_compressed_chunk_on_a_device_is_refused_and_feeds_no_number(tmp_path: Path) -> None:
    c = 4
    rng = np.random.default_rng(0)
    path = tmp_path / "zstd"
    with VinOfflineStoreWriter(
        path, num_candidates=c, rows_per_shard=6, compressor="zstd", fsync=False
    ) as writer:
        for i in range(12):
            writer.add(
                VinOfflineSample(
                    sample_key=f"k{i}",
                    scene_id="scene_1",
                    snippet_id=f"snippet_{i}",
                    split="train",
                    vin_points=np.zeros((3, 3), np.float32),
                    candidate_valid=np.ones(c, bool),
                    rri=rng.random(c).astype(np.float32),
                )
            )
    chunk = path / "shards" / DAMAGED / "arrays" / "rri" / "c" / "0" / "0"
    assert chunk.is_file()
    chunk.unlink()
    os.symlink("/dev/urandom", chunk)
    stats = collect_vin_offline_dataset_stats(path, max_samples=None)
    refused = [p for p in stats.integrity_problems if p.block == "rri"]
    assert [p.kind for p in refused] == ["CorruptChunkError"]
    assert refused[0].path is not None and refused[0].path.startswith(str(chunk.parents[2]))
    assert "character device" in refused[0].message and str(chunk) in refused[0].message
    assert stats.rri is not None and stats.rri.count == 6 * c  # shard 00000 only
    assert stats.rri.minimum is not None and stats.rri.minimum >= 0.0
    assert stats.rri.maximum is not None and stats.rri.maximum <= 1.0


def test_damage_is_listed_the_same_on_a_process_pool(small_store: SyntheticStoreRecord) -> None:
    store = small_store.store_dir
    with open(_chunk(store, "rri"), "ab") as handle:
        handle.write(b"\x00" * 64)
    shard = store / "shards" / "00002"
    shutil.rmtree(shard)
    shard.write_bytes(b"not a directory")
    local = collect_vin_offline_dataset_stats(store, max_samples=None)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        remote = collect_vin_offline_dataset_stats(store, max_samples=None, executor=pool)
    assert remote == local
    assert [p.kind for p in local.integrity_problems] == ["MissingShardError", "CorruptChunkError"]
