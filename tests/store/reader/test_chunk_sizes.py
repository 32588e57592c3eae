"""One size rule for uncompressed chunks in validate, integrity_problems and stats (issue 23, class 8).

Statistics refused an uncompressed chunk whose file is not exactly the size its dtype and
chunk shape imply, while ``validate()`` and ``integrity_problems()`` reported nothing for it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import pytest

from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.errors import CorruptChunkError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

SPEC = SyntheticStoreSpec(
    num_scenes=3, snippets_per_scene=2, samples_per_snippet=4, num_candidates=12, rows_per_shard=8
)
CHUNK = "shards/00001/arrays/rri/c/0/0"


def _store(root: Path, compressor: Literal["zstd"] | None = None) -> Path:
    return write_synthetic_store(root, SPEC, compressor=compressor).store_dir


def _resize(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "truncated":
        os.truncate(path, size // 2)
    else:
        with open(path, "ab") as handle:
            handle.write(b"\0" * 8)


def _numbers(record: Any) -> Any:
    return dataclasses.replace(record, store_dir="", generation={}, integrity_problems=())


@pytest.mark.parametrize("how", ["truncated", "extended"])
def test_validate_integrity_problems_and_stats_agree_on_a_wrong_size_chunk(
    tmp_path: Path, how: str
) -> None:
    store = _store(tmp_path / "store")
    _resize(store / CHUNK, how)
    with VinOfflineStoreReader(store) as reader:
        with pytest.raises(CorruptChunkError, match="chunk file has") as info:
            reader.validate()
        assert info.value.path == str(store / CHUNK)
        listed = [p for p in reader.integrity_problems() if p.kind == "CorruptChunkError"]
    assert [p.path for p in listed] == [str(store / CHUNK)]
    assert listed[0].block == "rri"
    record = collect_vin_offline_dataset_stats(
        VinOfflineStoreConfig(store_dir=store), max_samples=None
    )
    in_stats = [p for p in record.integrity_problems if p.path == str(store / CHUNK)]
    assert [p.kind for p in in_stats] == ["CorruptChunkError"]  # listed once, not twice
    # The block stays usable: only the refused chunk's rows are left out, as if absent.
    reference = tmp_path / "reference"
    shutil.copytree(store, reference)
    (reference / CHUNK).unlink()
    expected = collect_vin_offline_dataset_stats(
        VinOfflineStoreConfig(store_dir=reference), max_samples=None
    )
    assert _numbers(record) == _numbers(expected)


def test_a_wrong_size_chunk_outside_the_sampled_rows_is_still_listed(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    _resize(store / CHUNK, "truncated")
    record = collect_vin_offline_dataset_stats(
        VinOfflineStoreConfig(store_dir=store), max_samples=1
    )
    assert any(p.path == str(store / CHUNK) for p in record.integrity_problems)


def test_compressed_chunks_have_no_size_rule(tmp_path: Path) -> None:
    store = _store(tmp_path / "store", "zstd")
    with VinOfflineStoreReader(store) as reader:
        reader.validate()
        assert reader.integrity_problems() == ()


def test_store_compare_applies_the_same_rule_as_stats(tmp_path: Path) -> None:
    # Both scans read through one ShardReads: the chunk is listed once and only its rows
    # are left out, so the comparison equals one against the store without that chunk.
    from vinlens.store import compare_vin_offline_stores

    clean = _store(tmp_path / "clean")
    store = tmp_path / "store"
    shutil.copytree(clean, store)
    _resize(store / CHUNK, "truncated")
    reference = tmp_path / "reference"
    shutil.copytree(clean, reference)
    (reference / CHUNK).unlink()
    damaged = compare_vin_offline_stores(clean, store, max_samples=None)
    expected = compare_vin_offline_stores(clean, reference, max_samples=None)
    listed = [p for p in damaged.problems_b if p.path == str(store / CHUNK)]
    assert [p.kind for p in listed] == ["CorruptChunkError"]
    assert damaged.field("rri") == expected.field("rri")
    assert (
        damaged.field("rri").count_b == expected.field("rri").count_b < damaged.field("rri").count_a
    )
