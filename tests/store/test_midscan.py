"""Files that change under a running scan (issue 23, class 1).

Every read is pinned to what the listing saw: a chunk or record file deleted between a
shard's listing and its read is a listed problem (never silently left out, never zarr's
fill value), and one rewritten with other bytes is a StoreReplacedError (never mixed in),
locally and on S3; a tar replaced while its headers are walked is a replacement too.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import tarfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from midscan import after_listing, mutate_local, mutate_s3
from s3_server import S3Server, s3_filesystem

from vinlens.store.access import FsspecStoreAccess, LocalStoreAccess, open_store_access
from vinlens.store.coverage import clear_coverage_cache, collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.errors import MissingChunksError, StoreReplacedError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

pytestmark = pytest.mark.timeout(180)

SPEC = SyntheticStoreSpec(
    num_scenes=3,
    snippets_per_scene=2,
    samples_per_snippet=4,
    num_candidates=12,
    rows_per_shard=8,
    backbone_fields=(("g", (4,), "float16"),),
)
SHARD = "00001"
CHUNK = f"shards/{SHARD}/arrays/rri/c/0/0"


def _store(root: Path, compressor: Literal["zstd"] | None) -> Path:
    return write_synthetic_store(root, SPEC, compressor=compressor).store_dir


@pytest.fixture(params=[None, "zstd"], ids=["raw", "zstd"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return _store(tmp_path / "store", request.param)


def _numbers(record: Any) -> Any:
    return dataclasses.replace(record, store_dir="", generation={}, integrity_problems=())


def _stats(location: str | Path, options: dict[str, Any] | None = None) -> Any:
    config = VinOfflineStoreConfig(store_dir=location, storage_options=options)
    return collect_vin_offline_dataset_stats(config, max_samples=None)


def _copy_without(store: Path, tmp_path: Path, rel: str) -> Path:
    reference = tmp_path / "reference"
    shutil.copytree(store, reference)
    (reference / rel).unlink()
    return reference


def test_chunk_deleted_after_listing_is_listed_and_leaves_the_undamaged_numbers(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _stats(_copy_without(store, tmp_path, CHUNK))
    with after_listing(monkeypatch, SHARD, lambda: (store / CHUNK).unlink()):
        record = _stats(store)
    missing = [p for p in record.integrity_problems if p.kind == "MissingChunksError"]
    assert missing and any(CHUNK in (p.path or "") for p in missing), record.integrity_problems
    # The rows of the vanished chunk are left out, exactly as if it had been missing at
    # the listing; zarr's fill values (zstd) are never counted.
    assert _numbers(record) == _numbers(reference)
    assert record.rri.count == reference.rri.count < _stats(_store(tmp_path / "u", None)).rri.count


@pytest.mark.parametrize("kind", ["same_size", "replace"])
def test_chunk_rewritten_after_listing_is_a_replacement(
    store: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    with (
        after_listing(monkeypatch, SHARD, lambda: mutate_local(store / CHUNK, kind)),
        pytest.raises(StoreReplacedError, match="changed while the scan read it"),
    ):
        _stats(store)


def test_read_window_lists_a_vanished_chunk(store: Path) -> None:
    with VinOfflineStoreReader(store) as reader:
        assert reader.integrity_problems([SHARD]) == ()
        (store / CHUNK).unlink()
        window = reader.read_window(SHARD, "rri", 0, 8)
        assert not window.readable.any()
        assert [type(p) for p in window.problems] == [MissingChunksError]
        assert "vanished" in str(window.problems[0])
        with pytest.raises(MissingChunksError, match="vanished"):
            reader.read_rows(SHARD, "rri", 0, 8)


def test_zarr_never_fills_a_chunk_the_listing_lacks(tmp_path: Path) -> None:
    store = _store(tmp_path / "store", "zstd")
    with VinOfflineStoreReader(store) as reader:
        array = reader.zarr_array(SHARD, "rri")
        (store / CHUNK).unlink()
        with pytest.raises(MissingChunksError):
            np.asarray(array[0:8])


def test_records_deleted_after_listing_are_listed(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = f"shards/{SHARD}/records/vin_points.msgpack"
    with after_listing(monkeypatch, SHARD, lambda: (store / rel).unlink()):
        record = _stats(store)
    assert any(rel in (p.path or "") for p in record.integrity_problems), record.integrity_problems


def test_local_pinned_reads_check_identity_around_the_read(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 64)
    access = LocalStoreAccess(tmp_path)
    pin = access.stat("f.bin")
    assert access.read_pinned("f.bin", pin, 8, 8) == b"a" * 8
    with open(path, "r+b") as handle:
        handle.write(b"b" * 64)  # same size, in place: mtime moves
    with pytest.raises(StoreReplacedError, match="mtime_ns"):
        access.read_pinned("f.bin", pin)
    path.unlink()
    access.close()
    with pytest.raises(FileNotFoundError):
        access.read_pinned("f.bin", pin)


# --------------------------------------------------------------------------------------
# S3 (moto)
# --------------------------------------------------------------------------------------


@pytest.fixture
def s3_store(s3_server: S3Server, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    local = _store(tmp_path / "store", "zstd" if "zstd" in request.node.name else None)
    return s3_server.upload(local, f"midscan/{request.node.name}/store")


@pytest.mark.parametrize("layout", ["raw", "zstd"])
def test_s3_chunk_deleted_after_listing_is_listed(
    s3_server: S3Server, s3_store: str, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    fs = s3_filesystem(s3_server)
    key = s3_store.removeprefix("s3://") + "/" + CHUNK
    with after_listing(monkeypatch, SHARD, lambda: mutate_s3(fs, key, "delete")):
        record = _stats(s3_store, s3_server.storage_options)
    reference = _stats(s3_store, s3_server.storage_options)  # the chunk is gone now
    missing = [p for p in record.integrity_problems if p.kind == "MissingChunksError"]
    assert any(CHUNK in (p.path or "") for p in missing), record.integrity_problems
    assert _numbers(record) == _numbers(reference)


@pytest.mark.parametrize("layout", ["raw", "zstd"])
def test_s3_chunk_replaced_after_listing_is_a_replacement(
    s3_server: S3Server, s3_store: str, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    fs = s3_filesystem(s3_server)
    key = s3_store.removeprefix("s3://") + "/" + CHUNK
    with (
        after_listing(monkeypatch, SHARD, lambda: mutate_s3(fs, key, "same_size")),
        pytest.raises(StoreReplacedError, match="changed while the scan read it"),
    ):
        _stats(s3_store, s3_server.storage_options)


def test_s3_ranged_get_carries_the_listed_etag(s3_server: S3Server) -> None:
    fs = s3_filesystem(s3_server)
    path = f"{s3_server.bucket}/midscan/etag/object.bin"
    fs.pipe_file(path, b"x" * 100)
    access = open_store_access(f"s3://{path.rsplit('/', 1)[0]}", s3_server.storage_options)
    assert isinstance(access, FsspecStoreAccess)
    pin = access.stat("object.bin")
    assert pin.etag
    assert access.read_pinned("object.bin", pin, 10, 5) == b"xxxxx"
    fs.pipe_file(path, b"y" * 100)  # same size, another ETag
    with pytest.raises(StoreReplacedError, match="ETag"):
        access.read_pinned("object.bin", pin, 10, 5)


# --------------------------------------------------------------------------------------
# Tars replaced while their headers are walked
# --------------------------------------------------------------------------------------


def _tar_bytes(names: list[str], member_size: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = member_size
            tar.addfile(info, io.BytesIO(b"\0" * member_size))
    return buffer.getvalue()


def _big_tar(snippet: str) -> bytes:
    # Over 8 MiB, so S3 coverage walks it with ranged reads instead of one GET.
    names = [f"scene_000-{snippet}-{i:04d}.rgb.jpg" for i in range(6)]
    return _tar_bytes(names, 2 << 20)


def _coverage_config(store: Path, raw: str, options: dict[str, Any] | None) -> Any:
    return VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw, storage_options=options)


def _replace_during_walk(monkeypatch: pytest.MonkeyPatch, cls: type, attr: str, swap: Any) -> None:
    original = getattr(cls, attr)
    calls = [0]

    def reading(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            swap()  # after the first header was read
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, attr, reading)


def test_s3_big_tar_replaced_while_its_headers_are_walked(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "store", None)
    fs = s3_filesystem(s3_server)
    raw = f"{s3_server.bucket}/midscan/bigtar/raw"
    fs.pipe_file(f"{raw}/a.tar", _big_tar("snip_a"))
    clear_coverage_cache()
    _replace_during_walk(
        monkeypatch,
        FsspecStoreAccess,
        "read_pinned",
        lambda: fs.pipe_file(f"{raw}/a.tar", _big_tar("snip_b")),
    )
    with pytest.raises(StoreReplacedError, match=r"a\.tar"):
        collect_vin_offline_dataset_coverage(
            _coverage_config(store, f"s3://{raw}", s3_server.storage_options)
        )


def test_local_tar_replaced_while_its_headers_are_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "store", None)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.tar").write_bytes(
        _tar_bytes([f"scene_000-snip_a-{i:04d}.rgb.jpg" for i in range(40)], 70 << 10)
    )
    clear_coverage_cache()

    def swap() -> None:
        # Rewritten in place (same inode, same size): the one way local bytes could mix; a
        # rename leaves the open descriptor on the listed file, which is then read whole.
        data = _tar_bytes([f"scene_000-snip_b-{i:04d}.rgb.jpg" for i in range(40)], 70 << 10)
        with open(raw / "a.tar", "r+b") as handle:
            handle.write(data)

    import os as _os

    from vinlens.store.access import _local as access_local

    real_preadv = _os.preadv
    calls = [0]

    def preadv(fd: int, buffers: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] == 2:
            swap()
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(access_local.os, "preadv", preadv)
    with pytest.raises(StoreReplacedError, match=r"a\.tar"):
        collect_vin_offline_dataset_coverage(_coverage_config(store, str(raw), None))
