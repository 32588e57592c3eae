"""The storage contract: every :class:`StoreAccess` method, one suite, every backend.

Each test runs against the local backend, fsspec ``memory://`` and the session's moto S3
server (``tests/store/conftest.py``). A new backend is added by adding one parameter to
``BACKENDS`` and one :class:`Backend` that can write, replace and remove a file there.

The contract (what the reader, the diagnostics and the zarr store rely on):

* paths are relative and ``/``-separated; anything else is a ``ValueError``;
* ``stat``/``exists``/``list_dir``/``walk_files``/``walk_file_stats`` see files and
  directories as written; a missing path is ``FileNotFoundError`` naming it;
* whole, limited and ranged reads return the written bytes, short only at end of file;
* pinned reads serve only the listed file: a replaced file is ``StoreReplacedError``,
  a removed one ``FileNotFoundError``; a replaced top-level file's stat no longer matches
  the listing (the generation check), nor does any replaced file's for a new access object;
* ``zarr_store`` reads a real zarr v3 array, pinned chunk by chunk, and refuses a chunk
  missing from its listing with ``MissingChunksError``;
* the access object pickles (worker tasks) and ``close`` may be called twice.
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3_server import S3Server, s3_filesystem

from vinlens.store.access import FileStat, FsspecStoreAccess, LocalStoreAccess, StoreAccess
from vinlens.store.errors import MissingChunksError, StoreReplacedError

FILES: dict[str, bytes] = {
    "manifest.json": b'{"generation": 1}',
    "shards/00000/records.bin": bytes(range(256)) * 4,
    "shards/00000/c/0": b"chunk zero",
    "shards/00001/c/0": b"chunk one!",
    "shards/00001/c/1.txt": b"",
    "shards/readme.txt": b"shards",
}
SHARD = "shards/00000/records.bin"
BAD_PATHS = ("../x", "/abs", "a//b", "a/./b", "a\\b", "shards/..")


@dataclass
class Backend:
    """One place files can live: writes the fixture files and opens an access object."""

    name: str
    root: str
    write: Callable[[str, bytes], None]
    remove: Callable[[str], None]
    open: Callable[[], StoreAccess]
    is_remote: bool

    def replace(self, rel: str, data: bytes) -> None:
        """Put a new file at ``rel`` (a new object / a new inode, as a publish does)."""
        self.write(rel, data)


def _local(tmp_path: Path) -> Backend:
    root = tmp_path / "store"

    def write(rel: str, data: bytes) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = path.with_name(path.name + ".new")
        fresh.write_bytes(data)
        os.replace(fresh, path)  # a new inode, as a writer publishing over it

    return Backend(
        "local",
        str(root),
        write,
        lambda rel: (root / rel).unlink(),
        lambda: LocalStoreAccess(root),
        False,
    )


def _memory() -> Backend:
    import fsspec

    fs = fsspec.filesystem("memory")
    url = f"memory://vinlens-contract-{uuid.uuid4().hex}"

    return Backend(
        "memory",
        url,
        lambda rel, data: fs.pipe_file(f"{url}/{rel}", data),
        lambda rel: fs.rm_file(f"{url}/{rel}"),
        lambda: FsspecStoreAccess(url),
        True,
    )


def _s3(server: S3Server) -> Backend:
    fs = s3_filesystem(server)
    key = f"contract-{uuid.uuid4().hex}"

    def write(rel: str, data: bytes) -> None:
        fs.pipe_file(f"{server.bucket}/{key}/{rel}", data)
        fs.invalidate_cache()

    def remove(rel: str) -> None:
        fs.rm_file(f"{server.bucket}/{key}/{rel}")
        fs.invalidate_cache()

    return Backend(
        "s3",
        server.url(key),
        write,
        remove,
        lambda: FsspecStoreAccess(server.url(key), server.storage_options),
        True,
    )


BACKENDS = ("local", "memory", "s3")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    name = request.param
    if name == "local":
        made = _local(tmp_path)
    elif name == "memory":
        made = _memory()
    else:
        made = _s3(request.getfixturevalue("s3_server"))
    for rel, data in FILES.items():
        made.write(rel, data)
    return made


@pytest.fixture
def access(backend: Backend) -> Iterator[StoreAccess]:
    opened = backend.open()
    yield opened
    opened.close()


def _named(exc: pytest.ExceptionInfo[BaseException], access: StoreAccess, rel: str) -> None:
    assert access.describe(rel) in str(exc.value)


# ---------------------------------------------------------------------- names and paths


def test_root_describe_and_remoteness(backend: Backend, access: StoreAccess) -> None:
    assert access.root == backend.root
    assert access.is_remote is backend.is_remote
    assert access.describe("") == access.root
    assert access.describe(SHARD) == f"{access.root}/{SHARD}"


@pytest.mark.parametrize("rel", BAD_PATHS)
@pytest.mark.parametrize(
    "call",
    [
        lambda a, rel: a.stat(rel),
        lambda a, rel: a.exists(rel),
        lambda a, rel: a.list_dir(rel),
        lambda a, rel: list(a.walk_files(rel)),
        lambda a, rel: a.read_bytes(rel),
        lambda a, rel: a.read_bytes_with_stat(rel),
        lambda a, rel: a.read_range(rel, 0, 1),
        lambda a, rel: a.open_binary(rel),
        lambda a, rel: a.describe(rel),
    ],
    ids=["stat", "exists", "list_dir", "walk", "read", "read_stat", "range", "open", "describe"],
)
def test_paths_must_be_relative_and_slash_separated(
    access: StoreAccess, call: Callable[[StoreAccess, str], Any], rel: str
) -> None:
    with pytest.raises(ValueError, match="store path"):
        call(access, rel)


# ---------------------------------------------------------------------- listing and sizes


def test_stat_sizes_and_kinds(access: StoreAccess) -> None:
    for rel, data in FILES.items():
        st = access.stat(rel)
        assert (st.size, st.is_dir) == (len(data), False), rel
        assert st.path == access.describe(rel)
    assert access.stat("shards").is_dir and access.stat("shards/00001/c").is_dir
    assert access.exists("") and access.exists("shards") and access.exists(SHARD)
    assert not access.exists("shards/00002") and not access.exists("nope.json")


def test_list_dir_names_sorted_entries(access: StoreAccess) -> None:
    assert access.list_dir("") == ("manifest.json", "shards")
    assert access.list_dir("shards") == ("00000", "00001", "readme.txt")
    assert access.list_dir("shards/00001/c") == ("0", "1.txt")


def test_walk_lists_every_file_below_with_its_stat(access: StoreAccess) -> None:
    assert sorted(access.walk_files()) == sorted(FILES)
    below = sorted(rel for rel in FILES if rel.startswith("shards/00001/"))
    assert sorted(access.walk_files("shards/00001")) == below
    assert sorted(access.walk_files("shards", suffix=".txt")) == [
        "shards/00001/c/1.txt",
        "shards/readme.txt",
    ]
    stats = dict(access.walk_file_stats("shards"))
    assert sorted(stats) == sorted(rel for rel in FILES if rel.startswith("shards/"))
    for rel, st in stats.items():
        assert st.size == len(FILES[rel]) and not st.is_dir
        assert st.pin_mismatch(access.stat(rel)) is None  # the listing is the file's identity


# ---------------------------------------------------------------------- reads and ranges


def test_whole_reads(access: StoreAccess) -> None:
    for rel, data in FILES.items():
        assert access.read_bytes(rel) == data
        got, st = access.read_bytes_with_stat(rel)
        assert got == data and st.size == len(data)
        assert st.pin_mismatch(access.stat(rel)) is None


def test_limited_reads_hold_at_most_one_byte_over(access: StoreAccess) -> None:
    data = FILES[SHARD]
    assert access.read_bytes_limited(SHARD, len(data))[0] == data
    got, st = access.read_bytes_limited(SHARD, 10)
    assert got == data[:11] and st.size == len(data)


@pytest.mark.parametrize(
    ("start", "length"), [(0, 0), (0, 7), (100, 300), (1000, 100), (1024, 5), (5000, 3)]
)
def test_ranges_are_short_only_at_end_of_file(access: StoreAccess, start: int, length: int) -> None:
    data = FILES[SHARD]
    expected = data[start : start + length]
    assert access.read_range(SHARD, start, length) == expected
    buffer = bytearray(length)
    assert access.read_range_into(SHARD, start, memoryview(buffer)) == len(expected)
    assert bytes(buffer[: len(expected)]) == expected
    pin = access.stat(SHARD)
    assert access.read_pinned(SHARD, pin, start, length) == expected
    buffer = bytearray(length)
    assert access.read_pinned_into(SHARD, pin, start, memoryview(buffer)) == len(expected)
    assert bytes(buffer[: len(expected)]) == expected


def test_ranges_into_typed_buffers(access: StoreAccess) -> None:
    out = np.zeros(64, dtype=np.uint32)  # multi-byte items: the view is cast to bytes
    assert access.read_range_into(SHARD, 256, memoryview(out)) == 256
    assert out.tobytes() == FILES[SHARD][256:512]


def test_negative_ranges_are_refused(access: StoreAccess) -> None:
    with pytest.raises(ValueError, match="invalid byte range"):
        access.read_range(SHARD, -1, 4)
    with pytest.raises(ValueError, match="invalid byte range"):
        access.read_range(SHARD, 0, -4)
    with pytest.raises(ValueError, match="invalid byte range"):
        access.read_pinned(SHARD, access.stat(SHARD), -1, 4)


def test_open_binary_and_open_pinned_seek_and_read(access: StoreAccess) -> None:
    data = FILES[SHARD]
    for handle in (access.open_binary(SHARD), access.open_pinned(SHARD, access.stat(SHARD))):
        with handle:
            assert handle.read(10) == data[:10]
            assert handle.seek(1000) == 1000 and handle.tell() == 1000
            assert handle.read() == data[1000:]
            handle.seek(0)
            assert handle.read() == data


# ---------------------------------------------------------------------- missing files


@pytest.mark.parametrize(
    "call",
    [
        lambda a, rel: a.stat(rel),
        lambda a, rel: a.list_dir(rel),
        lambda a, rel: a.read_bytes(rel),
        lambda a, rel: a.read_bytes_with_stat(rel),
        lambda a, rel: a.read_bytes_limited(rel, 10),
        lambda a, rel: a.read_range(rel, 0, 4),
        lambda a, rel: a.open_binary(rel),
    ],
    ids=["stat", "list_dir", "read", "read_stat", "limited", "range", "open"],
)
def test_a_missing_path_is_file_not_found_naming_it(
    access: StoreAccess, call: Callable[[StoreAccess, str], Any]
) -> None:
    rel = "shards/00009/missing.bin"
    with pytest.raises(FileNotFoundError) as exc:
        call(access, rel)
    _named(exc, access, rel)


def test_a_directory_is_not_read_as_a_file(access: StoreAccess) -> None:
    with pytest.raises(IsADirectoryError):
        access.read_bytes_with_stat("shards")
    with pytest.raises(IsADirectoryError):
        access.open_binary("shards")


# ---------------------------------------------------------------------- replaced and removed


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "other-size"])
@pytest.mark.parametrize(
    "read",
    [
        lambda a, rel, pin: a.read_pinned(rel, pin),
        lambda a, rel, pin: a.read_pinned(rel, pin, 4, 10),
        lambda a, rel, pin: a.read_pinned_into(rel, pin, 0, memoryview(bytearray(8))),
        lambda a, rel, pin: a.open_pinned(rel, pin).read(),
    ],
    ids=["pinned", "pinned-range", "pinned-into", "open-pinned"],
)
def test_a_replaced_file_is_never_served_for_its_listing(
    backend: Backend,
    access: StoreAccess,
    read: Callable[[StoreAccess, str, FileStat], Any],
    same_size: bool,
) -> None:
    for rel in (SHARD, "manifest.json"):
        pin = dict(access.walk_file_stats())[rel]
        served = read(access, rel, pin)  # while it is the listed file
        assert served
        old = FILES[rel]
        new = bytes(255 - b for b in old) if same_size else old + b"grown"
        backend.replace(rel, new)
        # Either refused, or the listed file's own bytes (a local descriptor opened before
        # the replacement still reads the listed inode): never the new file's.
        try:
            again = read(access, rel, pin)
        except StoreReplacedError as exc:
            assert access.describe(rel) in str(exc)
        else:
            assert again == served
        # An access object holding nothing from before refuses it outright.
        later = backend.open()
        with pytest.raises(StoreReplacedError) as refused:
            read(later, rel, pin)
        _named(refused, later, rel)
        # A new listing pins the new file.
        assert later.read_pinned(rel, dict(later.walk_file_stats())[rel]) == new


def test_a_removed_file_is_file_not_found_for_its_listing(
    backend: Backend, access: StoreAccess
) -> None:
    pin = access.stat(SHARD)
    backend.remove(SHARD)
    with pytest.raises(FileNotFoundError) as exc:
        access.read_pinned(SHARD, pin)
    _named(exc, access, SHARD)
    assert SHARD not in set(backend.open().walk_files())


def test_generation_check_sees_a_replaced_file(backend: Backend, access: StoreAccess) -> None:
    listed = {rel: access.stat(rel) for rel in FILES}
    backend.replace("manifest.json", b'{"generation": 2}')
    backend.replace(SHARD, FILES[SHARD][::-1])
    # Top-level files carry the generation: asked fresh on every stat.
    assert listed["manifest.json"].pin_mismatch(access.stat("manifest.json")) is not None
    data, st = access.read_bytes_with_stat("manifest.json")
    assert data == b'{"generation": 2}' and listed["manifest.json"].pin_mismatch(st) is not None
    # Every file, for a new access object (a new scan); unchanged files still match.
    fresh = backend.open()
    assert listed[SHARD].pin_mismatch(fresh.stat(SHARD)) is not None
    for rel in set(FILES) - {"manifest.json", SHARD}:
        assert listed[rel].pin_mismatch(fresh.stat(rel)) is None, rel


# ---------------------------------------------------------------------- zarr, pickling, close


def test_zarr_store_reads_a_real_array_pinned_to_its_listing(
    backend: Backend, access: StoreAccess, tmp_path: Path
) -> None:
    import zarr

    local = tmp_path / "zarr-src"
    values = np.arange(24, dtype=np.float32).reshape(6, 4)
    array = zarr.create_array(local, shape=(6, 4), chunks=(2, 4), dtype="float32")
    array[:] = values
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        backend.write(f"arrays/x/{path.relative_to(local).as_posix()}", path.read_bytes())
    access = backend.open()
    pins = {rel[len("arrays/x/") :]: st for rel, st in access.walk_file_stats("arrays/x")}
    opened = zarr.open_array(access.zarr_store("arrays/x", pins=pins), mode="r")
    assert np.array_equal(opened[:], values)
    chunk = next(key for key in pins if key.startswith("c/"))
    del pins[chunk]
    partial = zarr.open_array(access.zarr_store("arrays/x", pins=pins), mode="r")
    with pytest.raises(MissingChunksError, match="not in the block's listing"):
        partial[:]


def test_access_pickles_for_worker_tasks_and_closes_twice(access: StoreAccess) -> None:
    again = pickle.loads(pickle.dumps(access))
    assert again.root == access.root
    assert again.read_range(SHARD, 10, 5) == FILES[SHARD][10:15]
    assert again.stat(SHARD).pin_mismatch(access.stat(SHARD)) is None
    again.close()
    again.close()
    access.close()
    access.close()
    assert access.read_bytes("manifest.json") == FILES["manifest.json"]  # reopens on demand
