"""Reader behaviour beyond round trips: read-only, generations, streaming, the access layer."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from vinlens.store.access import LocalStoreAccess, open_store_access
from vinlens.store.format import StoreNotFoundError, StoreReplacedError
from vinlens.store.reader import VinOfflineStoreReader, capture_store_generation
from vinlens.store.synthetic import SyntheticStoreRecord, SyntheticStoreSpec, write_synthetic_store


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.stat()
        h.update(f"{path.relative_to(root)}|{st.st_size}|{st.st_mtime_ns}".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_reading_everything_never_writes(small_store: SyntheticStoreRecord) -> None:
    before = _tree_digest(small_store.store_dir)
    with VinOfflineStoreReader(small_store.config) as reader:
        reader.validate()
        reader.integrity_problems()
        for i in range(reader.num_samples):
            reader.read_sample(i)
        array = reader.zarr_array("00000", "rri")
        with pytest.raises(Exception, match=r"(?i)read.only"):
            array[0, 0] = 1.0
    assert _tree_digest(small_store.store_dir) == before


def test_generation_is_stable_for_one_store_and_changes_on_replace(
    small_store: SyntheticStoreRecord, tmp_path: Path
) -> None:
    path = small_store.store_dir
    with VinOfflineStoreReader(path) as reader:
        assert capture_store_generation(path) == reader.generation
        reader.check_generation()
        write_synthetic_store(
            path, SyntheticStoreSpec(seed=7), replace=True
        )  # same content, new dir
        assert capture_store_generation(path) != reader.generation
        with pytest.raises(StoreReplacedError, match="replaced"):
            reader.check_generation()


def test_same_size_manifest_rewrite_changes_the_generation(
    small_store: SyntheticStoreRecord,
) -> None:
    path = small_store.store_dir
    before = capture_store_generation(path)
    manifest = path / "manifest.json"
    data = manifest.read_bytes()
    stat = manifest.stat()
    manifest.write_bytes(data.replace(b"T", b"t", 1))  # created_at "...T..." -> same size
    os.utime(manifest, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = capture_store_generation(path)
    assert after.manifest.size == before.manifest.size
    assert after.manifest_sha256 != before.manifest_sha256
    assert after != before
    assert set(after.to_json_dict()) == {"store_dir", "manifest", "sample_index", "manifest_sha256"}


def test_store_moved_away_mid_read_is_reported(
    small_store: SyntheticStoreRecord, tmp_path: Path
) -> None:
    reader = VinOfflineStoreReader(small_store.config)
    small_store.store_dir.rename(tmp_path / "aside")
    with pytest.raises(StoreReplacedError, match="disappeared"):
        reader.check_generation()
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        VinOfflineStoreReader(small_store.config)


def test_streaming_scans_are_chunk_aligned_and_bounded(small_store: SyntheticStoreRecord) -> None:
    with VinOfflineStoreReader(small_store.config) as reader:
        batches = list(reader.iter_row_batches("00000", "backbone.voxel_features", max_bytes=1))
        assert [start for start, _ in batches] == [0]  # one chunk holds all 8 rows
        assert batches[0][1].shape == (8, 8, 4, 4)
        records = list(reader.iter_records("00001", "vin_points", 2, 6, max_bytes=1))
        assert [row for row, _ in records] == [2, 3, 4, 5]
        for row, record in records:
            np.testing.assert_array_equal(record["points"], reader.read_vin_points("00001", row))
        offsets = reader.record_offsets("00001", "vin_points")
        assert (
            offsets[0] == 0
            and offsets[-1]
            == (small_store.store_dir / "shards/00001/records/vin_points.msgpack").stat().st_size
        )


def test_access_layer_is_confined_to_its_root(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.bin").write_bytes(b"0123456789")
    (tmp_path / "a" / "sub").mkdir()
    (tmp_path / "a" / "sub" / "g.tar").write_bytes(b"")
    access = open_store_access(tmp_path / "a")
    assert isinstance(access, LocalStoreAccess)
    assert access.read_range("f.bin", 3, 4) == b"3456"
    assert access.read_range("f.bin", 8, 10) == b"89"
    data, st = access.read_bytes_with_stat("f.bin")
    assert data == b"0123456789" and st.size == 10 and not st.is_dir
    assert list(access.walk_files(suffix=".tar")) == ["sub/g.tar"]
    assert access.list_dir() == ("f.bin", "sub")
    for bad in ("../a/f.bin", "/etc/passwd", "sub/../f.bin"):
        with pytest.raises(ValueError, match="store path"):
            access.read_bytes(bad)
    with pytest.raises(ValueError, match="nosuchproto://bucket/store: unknown protocol"):
        open_store_access("nosuchproto://bucket/store")
    access.close()


def _rewrite_array(store: Path, shard: str, name: str, **create_kwargs: object) -> np.ndarray:
    """Rewrite one zarr block as another writer might (other codecs), same values."""
    import shutil

    import zarr

    group_path = store / f"shards/{shard}/arrays"
    values = zarr.open_array(group_path / name, mode="r")[...]
    shutil.rmtree(group_path / name)
    group = zarr.open_group(group_path, mode="a", zarr_format=3)
    array = group.create_array(name, shape=values.shape, dtype=values.dtype, **create_kwargs)
    array[...] = values
    return np.asarray(values)


def test_blocks_from_other_writers_read_the_same(small_store: SyntheticStoreRecord) -> None:
    """Big-endian raw chunks, zstd, and the sharding codec: all read back identically."""
    from zarr.codecs import BytesCodec

    store = small_store.store_dir
    big_endian = _rewrite_array(
        store, "00000", "rri", chunks=(3, 16), serializer=BytesCodec(endian="big"), compressors=None
    )
    sharded = _rewrite_array(
        store, "00001", "backbone.global_features", chunks=(2, 32), shards=(4, 32), compressors=None
    )
    with VinOfflineStoreReader(store) as reader:
        reader.validate()
        got = reader.read_rows("00000", "rri", 0, 8)
        assert got.dtype == np.float32 and got.dtype.isnative
        np.testing.assert_array_equal(got, big_endian)
        np.testing.assert_array_equal(
            reader.read_rows("00001", "backbone.global_features", 0, 8), sharded
        )
        assert reader.chunk_status("00001", "backbone.global_features").expected_chunks == 2
    # A missing shard file is a missing storage key like any chunk file.
    (store / "shards/00001/arrays/backbone.global_features/c/1/0").unlink()
    with VinOfflineStoreReader(store) as reader:
        (status,) = reader.missing_chunks()
        assert (status.block, status.missing_examples) == ("backbone.global_features", ("c/1/0",))
        np.testing.assert_array_equal(
            reader.read_rows("00001", "backbone.global_features", 0, 4), sharded[:4]
        )


def test_an_empty_store_round_trips(tmp_path: Path) -> None:
    from vinlens.store.writer import VinOfflineStoreWriter

    with VinOfflineStoreWriter(tmp_path / "empty", num_candidates=4, fsync=False):
        pass
    with VinOfflineStoreReader(tmp_path / "empty") as reader:
        reader.validate()
        assert reader.num_samples == 0 and reader.manifest.shards == ()
        assert reader.manifest.materialized_blocks.backbone is False
