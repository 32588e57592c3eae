"""Read-only access to a published VIN offline store, with every cross check the spec implies.

:class:`VinOfflineStoreReader` loads and validates ``manifest.json`` and
``sample_index.jsonl`` when it opens (cheap), and checks each block the first time it
is touched (zarr metadata against the manifest, chunk completeness, offsets files).
:meth:`VinOfflineStoreReader.validate` checks everything up front and
:meth:`VinOfflineStoreReader.integrity_problems` lists every problem without raising,
for diagnostics. All file access goes through :mod:`vinlens.store.access`.

Zarr returns the fill value for a chunk that is missing on disk, without any error. The
reader therefore lists each array's chunk files (through the access layer), compares
them with the chunk grid, and raises :class:`MissingChunksError` for any read that
touches a missing chunk; fill values are never presented as data.

A store path can name another store between two reads (atomic replace), so the reader
records a :class:`StoreGeneration` from the handles it actually read and
:meth:`VinOfflineStoreReader.check_generation` compares it with the path's current one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vinlens.store.access import FileStat, StoreAccess, open_store_access
from vinlens.store.format import (
    BACKBONE_PREFIX,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    NUMERIC_DTYPES,
    RRI_COMPONENT_PREFIX,
    SAMPLE_INDEX_FILE,
    BlockKind,
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    SampleIndexError,
    SampleIndexRow,
    StoreBlockSpec,
    StoreNotFoundError,
    StoreReplacedError,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineStoreConfig,
    VinOfflineStoreError,
    arrays_dir,
    block_kind_for,
    expected_block_dtype,
    parse_manifest,
    parse_sample_index,
    record_paths,
    sample_index_byte_limit,
    shard_dir,
)
from vinlens.store.records import RecordDecodeError, decode_record, decode_records
from vinlens.store.sample import VinOfflineSample

__all__ = [
    "ChunkStatus",
    "RowWindow",
    "StoreGeneration",
    "StoreIntegrityProblem",
    "VinOfflineStoreReader",
    "as_store_config",
    "capture_store_generation",
    "check_manifest_blocks",
    "open_vin_offline_store",
]

# Batches for streaming scans: big enough to amortise per-call overhead, small enough that
# peak memory does not grow with the store.
DEFAULT_BATCH_BYTES = 1 << 20
# How many missing chunk keys an error or a ChunkStatus spells out.
_MAX_LISTED_CHUNKS = 8
# Up to this many expected chunk files are checked with one stat each instead of a listing.
_STAT_CHUNKS_UP_TO = 32


def as_store_config(store: VinOfflineStoreConfig | str | os.PathLike[str]) -> VinOfflineStoreConfig:
    """Accept a config or a bare path wherever a store is expected."""
    if isinstance(store, VinOfflineStoreConfig):
        return store
    return VinOfflineStoreConfig(store_dir=os.fspath(store))


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreGeneration:
    """Identity of the store directory currently at a path (changes when it is replaced).

    Device, inode, size, ``mtime_ns`` and ``ctime_ns`` of the store directory,
    ``manifest.json`` and ``sample_index.jsonl``, plus the SHA-256 of the manifest bytes
    (a same-size rewrite inside the timestamp resolution is invisible to ``stat``).
    """

    store_dir: FileStat
    manifest: FileStat
    sample_index: FileStat
    manifest_sha256: str

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-safe, canonical form (for request digests); paths are included."""

        def one(st: FileStat) -> dict[str, Any]:
            out: dict[str, Any] = {
                "path": st.path,
                "device": st.device,
                "inode": st.inode,
                "size": st.size,
                "mtime_ns": st.mtime_ns,
                "ctime_ns": st.ctime_ns,
            }
            if st.etag or st.version:  # object stores; local digests stay as they were
                out["etag"], out["version"] = st.etag, st.version
            return out

        return {
            "store_dir": one(self.store_dir),
            "manifest": one(self.manifest),
            "sample_index": one(self.sample_index),
            "manifest_sha256": self.manifest_sha256,
        }


def _stat_root(access: StoreAccess) -> FileStat:
    try:
        st = access.stat("")
    except FileNotFoundError as exc:
        raise StoreNotFoundError(
            "store directory does not exist",
            path=access.root,
            expected="a published VIN offline store directory",
        ) from exc
    if not st.is_dir:
        raise StoreNotFoundError(
            "is not a directory", path=access.root, expected="a VIN offline store directory"
        )
    return st


def _read_manifest_bytes(access: StoreAccess) -> tuple[bytes, FileStat]:
    try:
        return access.read_bytes_limited(MANIFEST_FILE, MAX_MANIFEST_BYTES)
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise StoreNotFoundError(
            "manifest.json is missing: not a published store, or one being replaced",
            path=access.describe(MANIFEST_FILE),
            expected="a store directory with manifest.json, which the writer publishes last",
        ) from exc


def _open_config_access(config: VinOfflineStoreConfig) -> StoreAccess:
    return open_store_access(config.store_dir, config.storage_options)


def capture_store_generation(
    store: VinOfflineStoreConfig | str | os.PathLike[str] | StoreAccess,
) -> StoreGeneration:
    """The generation at the store path now (reads only the manifest's bytes for its hash)."""
    access = (
        store if isinstance(store, StoreAccess) else _open_config_access(as_store_config(store))
    )
    root = _stat_root(access)
    data, manifest_stat = _read_manifest_bytes(access)
    try:
        index_stat = access.stat(SAMPLE_INDEX_FILE)
    except FileNotFoundError as exc:
        raise SampleIndexError(
            "sample_index.jsonl is missing", path=access.describe(SAMPLE_INDEX_FILE)
        ) from exc
    return StoreGeneration(root, manifest_stat, index_stat, hashlib.sha256(data).hexdigest())


# --------------------------------------------------------------------------------------
# Records for problems
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkStatus:
    """Chunk completeness of one zarr block: expected vs initialized chunk files."""

    shard_id: str
    block: str
    path: str
    expected_chunks: int
    initialized_chunks: int
    missing_chunks: int
    missing_examples: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return self.missing_chunks == 0


@dataclass(frozen=True)
class StoreIntegrityProblem:
    """One problem found by :meth:`VinOfflineStoreReader.integrity_problems`.

    ``kind`` is the error class name (``MissingChunksError``, ``BlockMismatchError``, ...),
    ``path`` the offending file, ``message`` the full error text.
    """

    kind: str
    shard_id: str | None
    block: str | None
    path: str | None
    message: str


# --------------------------------------------------------------------------------------
# Manifest rules from the spec's block table
# --------------------------------------------------------------------------------------


def check_manifest_blocks(manifest: VinOfflineManifest, *, path: str) -> None:
    """Raise :class:`ManifestError` where shards break the spec's block table.

    Per shard: ``vin_points`` is a record block; with ``scene_labels`` there are
    ``candidate_valid`` and ``rri``; without it no labelled block appears; a block family
    whose ``materialized_blocks`` flag is false is absent; known blocks have the spec's
    kind, dtype and ``[R, C]`` / ``[R, C, 7]`` shape. Unknown block names are allowed.
    """
    labels = manifest.capabilities.scene_labels
    flags = manifest.materialized_blocks
    num_c = manifest.num_candidates
    for s_index, shard in enumerate(manifest.shards):
        where_shard = f"field shards[{s_index}] (shard {shard.shard_id!r})"
        required = ["vin_points"] + (["candidate_valid", "rri"] if labels else [])
        for name in required:
            if shard.block(name) is None:
                raise ManifestError(
                    f"required block {name!r} is not declared",
                    path=path,
                    location=f"{where_shard}.blocks",
                    expected=f"blocks {required}",
                )
        for b_index, block in enumerate(shard.blocks):
            where = f"field shards[{s_index}].blocks[{b_index}] ({block.name!r})"
            name = block.name
            labelled = name in {"candidate_valid", "rri", "candidate_ids"} or name.startswith(
                RRI_COMPONENT_PREFIX
            )
            if labelled and not labels:
                raise ManifestError(
                    "labelled block in a store whose capabilities.scene_labels is false",
                    path=path,
                    location=where,
                    expected="no candidate_valid/rri/rri_components/candidate_ids blocks",
                )
            family_flag = {
                "candidate_ids": flags.candidate_ids,
                "candidate_poses": flags.candidate_poses,
            }.get(name)
            if name.startswith(BACKBONE_PREFIX):
                family_flag = flags.backbone
            elif name.startswith(RRI_COMPONENT_PREFIX):
                family_flag = flags.rri_components
            if family_flag is False:
                raise ManifestError(
                    "block present although materialized_blocks marks its family false",
                    path=path,
                    location=where,
                    expected="materialized_blocks flag true for every stored block family",
                )
            kind = block_kind_for(name)
            if kind is not None and block.kind is not kind:
                raise ManifestError(
                    f"kind {block.kind.value!r}",
                    path=path,
                    location=f"{where}.kind",
                    expected=repr(kind.value),
                )
            dtypes = expected_block_dtype(name)
            if dtypes is not None and block.dtype not in dtypes:
                raise ManifestError(
                    f"dtype {block.dtype!r}",
                    path=path,
                    location=f"{where}.dtype",
                    expected=f"one of {sorted(dtypes)}",
                )
            expected_shape: tuple[int, ...] | None = None
            if name in {"candidate_valid", "rri", "candidate_ids"} or name.startswith(
                RRI_COMPONENT_PREFIX
            ):
                expected_shape = (shard.num_rows, num_c)
            elif name == "candidate_poses":
                expected_shape = (shard.num_rows, num_c, 7)
            if expected_shape is not None and block.shape != expected_shape:
                raise ManifestError(
                    f"shape {list(block.shape)}",
                    path=path,
                    location=f"{where}.shape",
                    expected=f"{list(expected_shape)} ([num_rows, num_candidates{', 7' if len(expected_shape) == 3 else ''}])",
                )


# --------------------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------------------


@dataclass
class _ZarrBlock:
    spec: StoreBlockSpec
    path: str
    group_rel: str
    meta: _ArrayLayout  # parsed from zarr.json, read through the access layer
    row_chunk: int
    status: ChunkStatus
    # Row-chunk indices whose every chunk file is present: the set is bounded by the files
    # that exist, never by the grid the metadata declares.
    complete_rows: frozenset[int]
    # Set when chunks are raw bytes holding whole rows (our writer's layout): rows are then
    # read straight from the chunk files into the output array, bypassing zarr's pipeline.
    raw_dtype: np.dtype[Any] | None = None
    array: Any = None  # zarr.Array, opened on first need


@dataclass(frozen=True)
class RowWindow:
    """Rows ``start:stop`` of one zarr block, as :meth:`VinOfflineStoreReader.read_window` read them.

    ``readable[i]`` says whether row ``start + i`` was read from chunk files that passed the
    reader's checks; ``values`` holds zeros (never data) in the other rows, and is ``None``
    when no row is readable. ``values`` may be a read-only view of the chunk bytes.
    ``problems`` are the chunks refused in this window (wrong size, not a regular file,
    undecodable); missing chunk files are not repeated there, they are one
    ``MissingChunksError`` of :meth:`VinOfflineStoreReader.integrity_problems`.
    """

    start: int
    stop: int
    values: np.ndarray | None
    readable: np.ndarray
    problems: tuple[VinOfflineStoreError, ...] = ()


@dataclass
class _RecordBlock:
    spec: StoreBlockSpec
    msgpack_rel: str
    offsets: np.ndarray  # uint64, num_rows + 1


class VinOfflineStoreReader:
    """A read-only, validated view of one published store.

    Open with ``VinOfflineStoreReader(store)`` or :func:`open_vin_offline_store`; use as a
    context manager or call :meth:`close`. Instances are safe to share between threads for
    reading; in DataLoader workers open one per worker (see :mod:`vinlens.store.dataset`).
    """

    def __init__(
        self,
        store: VinOfflineStoreConfig | str | os.PathLike[str],
        *,
        access: StoreAccess | None = None,
    ) -> None:
        self.config = as_store_config(store)
        self.access = access if access is not None else _open_config_access(self.config)
        self._lock = threading.RLock()
        self._zarr: dict[tuple[str, str], _ZarrBlock] = {}
        self._records: dict[tuple[str, str], _RecordBlock] = {}
        self._row_cache: dict[tuple[str, str], tuple[int, int, np.ndarray]] = {}
        self._checked_shards: set[str] = set()

        root_stat = _stat_root(self.access)
        manifest_bytes, manifest_stat = _read_manifest_bytes(self.access)
        manifest_path = self.access.describe(MANIFEST_FILE)
        self.manifest: VinOfflineManifest = parse_manifest(manifest_bytes, path=manifest_path)
        check_manifest_blocks(self.manifest, path=manifest_path)

        index_path = self.access.describe(SAMPLE_INDEX_FILE)
        try:
            index_bytes, index_stat = self.access.read_bytes_limited(
                SAMPLE_INDEX_FILE, sample_index_byte_limit(self.manifest.num_samples)
            )
        except FileNotFoundError as exc:
            raise SampleIndexError(
                "sample_index.jsonl is missing",
                path=index_path,
                expected="one JSON line per sample",
            ) from exc
        self.samples: tuple[SampleIndexRow, ...] = parse_sample_index(
            index_bytes, path=index_path, manifest=self.manifest
        )
        self.generation = StoreGeneration(
            root_stat, manifest_stat, index_stat, hashlib.sha256(manifest_bytes).hexdigest()
        )
        self._shards: dict[str, StoreShardSpec] = {s.shard_id: s for s in self.manifest.shards}

    # ---- basics -----------------------------------------------------------------------

    @property
    def store_dir(self) -> Path | str:
        """Absolute store directory (a ``Path``), or the store's URL for remote stores."""
        return self.access.root if self.access.is_remote else Path(self.access.root)

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __enter__(self) -> VinOfflineStoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop cached arrays and file handles."""
        with self._lock:
            self._zarr.clear()
            self._records.clear()
            self._row_cache.clear()
        self.access.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            "VinOfflineStoreReader is not picklable; pass the VinOfflineStoreConfig and open "
            "a reader in each process (VinOfflineDataset does this per worker)"
        )

    def check_generation(self) -> None:
        """Raise :class:`StoreReplacedError` if the path now names another store generation."""
        try:
            current = capture_store_generation(self.access)
        except VinOfflineStoreError as exc:
            raise StoreReplacedError(
                f"store disappeared while being read ({exc})", path=self.access.root
            ) from exc
        if current != self.generation:
            raise StoreReplacedError(
                "store directory was replaced or changed while it was being read",
                path=self.access.root,
                expected=f"the generation read at open (manifest sha256 {self.generation.manifest_sha256[:12]}...)",
            )

    def shard(self, shard_id: str) -> StoreShardSpec:
        """Manifest entry of a shard (``KeyError`` naming the store for an unknown id)."""
        try:
            return self._shards[shard_id]
        except KeyError:
            raise KeyError(f"{self.access.root}: no shard {shard_id!r} in manifest.json") from None

    def block_spec(self, shard_id: str, name: str) -> StoreBlockSpec | None:
        """Manifest entry of a block, or ``None`` when the shard does not store it."""
        return self.shard(shard_id).block(name)

    def rows_by_split(self) -> dict[str, list[int]]:
        """Sample indices per split, in sample order."""
        out: dict[str, list[int]] = {}
        for row in self.samples:
            out.setdefault(row.split, []).append(row.sample_index)
        return out

    # ---- shards and zarr blocks ---------------------------------------------------------

    def _check_shard_dir(self, shard_id: str) -> None:
        if shard_id in self._checked_shards:
            return
        rel = shard_dir(shard_id)
        try:
            is_dir = self.access.stat(rel).is_dir
        except (FileNotFoundError, NotADirectoryError):
            is_dir = None
        except OSError as exc:
            raise MissingShardError(
                f"shard {shard_id!r}: cannot stat its directory ({type(exc).__name__}: {exc})",
                path=self.access.describe(rel),
                expected="shards/<shard_id>/ with arrays/ and records/",
            ) from exc
        if is_dir is None:
            raise MissingShardError(
                f"shard {shard_id!r} declared in manifest.json has no directory",
                path=self.access.describe(rel),
                expected="shards/<shard_id>/ with arrays/ and records/",
            )
        if not is_dir:
            raise MissingShardError(
                f"shard {shard_id!r} is a file, not a directory",
                path=self.access.describe(rel),
                expected="shards/<shard_id>/ with arrays/ and records/",
            )
        self._checked_shards.add(shard_id)

    def _require_block(self, shard_id: str, name: str, kind: BlockKind) -> StoreBlockSpec:
        spec = self.block_spec(shard_id, name)
        if spec is None:
            raise MissingBlockError(
                f"shard {shard_id!r} does not declare block {name!r}",
                path=self.access.describe(MANIFEST_FILE),
                expected=f"one of {list(self.shard(shard_id).block_names)}",
            )
        if spec.kind is not kind:
            raise BlockMismatchError(
                f"block {name!r} of shard {shard_id!r} is a {spec.kind.value}",
                path=self.access.describe(MANIFEST_FILE),
                expected=kind.value,
            )
        return spec

    def _open_zarr(self, shard_id: str, name: str) -> _ZarrBlock:
        key = (shard_id, name)
        with self._lock:
            cached = self._zarr.get(key)
            if cached is not None:
                return cached
        spec = self._require_block(shard_id, name, BlockKind.ZARR_ARRAY)
        self._check_shard_dir(shard_id)
        group_rel = arrays_dir(shard_id)
        rel = f"{group_rel}/{name}"
        path = self.access.describe(rel)
        if not self._is_file(f"{rel}/zarr.json"):
            raise MissingBlockError(
                f"zarr block {name!r} of shard {shard_id!r} is missing",
                path=self.access.describe(f"{rel}/zarr.json"),
                expected="a zarr v3 array declared in manifest.json",
            )
        try:
            meta = _parse_array_layout(self.access.read_bytes(f"{rel}/zarr.json"))
        except Exception as exc:  # zarr raises many types for bad metadata
            raise BlockMismatchError(
                f"cannot open as a zarr v3 array ({type(exc).__name__}: {exc})",
                path=self.access.describe(f"{rel}/zarr.json"),
                expected="valid zarr v3 array metadata (zarr.json)",
            ) from exc
        stored_dtype = meta.dtype
        if tuple(meta.shape) != spec.shape:
            raise BlockMismatchError(
                f"stored shape {list(meta.shape)} differs from manifest.json",
                path=path,
                expected=f"shape {list(spec.shape)}",
            )
        if stored_dtype.name != spec.dtype:
            raise BlockMismatchError(
                f"stored dtype {stored_dtype.name} differs from manifest.json",
                path=path,
                expected=f"dtype {spec.dtype}",
            )
        status, complete_rows, row_chunk = self._chunk_status(shard_id, name, rel, meta)
        block = _ZarrBlock(
            spec,
            rel,
            group_rel,
            meta,
            row_chunk,
            status,
            complete_rows,
            meta.raw_dtype,
        )
        with self._lock:
            self._zarr[key] = block
        return block

    def _zarr_handle(self, block: _ZarrBlock) -> Any:
        if block.array is None:
            import zarr

            try:
                block.array = zarr.open_array(
                    self.access.zarr_store(block.group_rel),
                    path=block.spec.name,
                    mode="r",
                    zarr_format=3,
                )
            except Exception as exc:
                raise BlockMismatchError(
                    f"cannot open as a zarr v3 array ({type(exc).__name__}: {exc})",
                    path=self.access.describe(block.path),
                    expected="valid zarr v3 array metadata (zarr.json)",
                ) from exc
        return block.array

    def _is_file(self, rel: str) -> bool:
        """Whether ``rel`` exists and is not a directory (a path through a file is absent)."""
        try:
            return not self.access.stat(rel).is_dir
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _chunk_status(
        self, shard_id: str, name: str, rel: str, meta: _ArrayLayout
    ) -> tuple[ChunkStatus, frozenset[int], int]:
        # The chunk grid is the storage-key grid: with the sharding codec one key holds a
        # whole shard, and completeness is checked per key, the unit zarr can silently miss.
        # The work is bounded by the chunk files that exist (one listing), never by the
        # grid: a metadata edit can declare 2**37 chunks in a directory that holds eight.
        grid = meta.chunk_shape
        shape = tuple(meta.shape)
        counts = [-(-n // c) for n, c in zip(shape, grid, strict=True)]
        expected = math.prod(counts)
        inner_total = expected // counts[0] if counts and counts[0] else 1
        prefix = f"{rel}/"
        present: set[tuple[int, ...]] = set()
        if expected and expected <= _STAT_CHUNKS_UP_TO:
            for coords in itertools.product(*(range(n) for n in counts)):
                if self._is_file(f"{prefix}{meta.encode_key(coords)}"):
                    present.add(coords)
        elif expected:
            for file_rel in self.access.walk_files(rel):
                coords_or_none = meta.decode_key(file_rel[len(prefix) :], counts)
                if coords_or_none is not None:
                    present.add(coords_or_none)
        per_row: dict[int, int] = {}
        for coords in present:
            first = coords[0] if coords else 0
            per_row[first] = per_row.get(first, 0) + 1
        complete_rows = frozenset(r for r, n in per_row.items() if n == inner_total)
        missing = expected - len(present)
        examples: list[str] = []
        if missing:
            # The first missing keys in grid order: at most len(present) + a few steps.
            for coords in _grid(counts):
                if coords not in present:
                    examples.append(meta.encode_key(coords))
                    if len(examples) >= _MAX_LISTED_CHUNKS:
                        break
        status = ChunkStatus(
            shard_id=shard_id,
            block=name,
            path=self.access.describe(rel),
            expected_chunks=expected,
            initialized_chunks=expected - missing,
            missing_chunks=missing,
            missing_examples=tuple(examples),
        )
        return status, complete_rows, int(grid[0]) if grid else 1

    def _rows_complete(self, block: _ZarrBlock, start: int, stop: int) -> bool:
        if start >= stop or block.status.complete:
            return True
        first, last = start // block.row_chunk, (stop - 1) // block.row_chunk
        return all(r in block.complete_rows for r in range(first, last + 1))

    def zarr_array(self, shard_id: str, name: str) -> Any:
        """The read-only ``zarr.Array`` of a block, verified against the manifest."""
        return self._zarr_handle(self._open_zarr(shard_id, name))

    def chunk_rows(self, shard_id: str, name: str) -> int:
        """Rows per storage key of a zarr block (the shard shape's rows under sharding)."""
        return max(1, self._open_zarr(shard_id, name).row_chunk)

    def chunk_status(self, shard_id: str, name: str) -> ChunkStatus:
        """Expected vs initialized chunk files of one zarr block."""
        return self._open_zarr(shard_id, name).status

    def _raise_missing(self, block: _ZarrBlock, start: int, stop: int) -> None:
        status = block.status
        examples = ", ".join(status.missing_examples) or "?"
        raise MissingChunksError(
            f"rows {start}:{stop} of block {status.block!r} touch missing chunk files "
            f"({status.missing_chunks} of {status.expected_chunks} missing, e.g. {examples}); "
            "zarr would return fill values",
            path=status.path,
            expected=f"all {status.expected_chunks} chunk files",
        )

    def read_rows(self, shard_id: str, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a zarr block as a numpy array (a fresh, writable copy)."""
        block = self._open_zarr(shard_id, name)
        num_rows = block.spec.num_rows
        if not 0 <= start <= stop <= num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: rows {start}:{stop} outside 0:{num_rows}"
            )
        if not self._rows_complete(block, start, stop):
            self._raise_missing(block, start, stop)
        if block.raw_dtype is not None:
            return self._read_rows_raw(block, start, stop)
        if start < stop:
            # zarr opens chunk files itself: refuse directories and special files first (a
            # FIFO would block the open, a device has size 0 and endless bytes).
            expected = None
            if block.meta.stored_dtype is not None:
                expected = math.prod(block.meta.chunk_shape) * block.meta.stored_dtype.itemsize
            rc = block.row_chunk
            for r in range(start // rc, (stop - 1) // rc + 1):
                for inner in self._inner_coords(block.meta):
                    rel = f"{block.path}/{block.meta.encode_key((r, *inner))}"
                    try:
                        self._check_chunk_file(rel, expected, block, (start, stop))
                    except FileNotFoundError:
                        self._raise_missing(block, start, stop)
        try:
            data = self._zarr_handle(block)[start:stop]
        except Exception as exc:
            raise CorruptChunkError(
                f"cannot decode rows {start}:{stop} ({type(exc).__name__}: {exc})",
                path=self.access.describe(block.path),
                expected=f"chunks of dtype {block.spec.dtype} with the array's codecs",
            ) from exc
        return np.asarray(data)

    def _read_rows_raw(self, block: _ZarrBlock, start: int, stop: int) -> np.ndarray:
        assert block.raw_dtype is not None
        row_shape = block.spec.row_shape
        out = np.empty((stop - start, *row_shape), dtype=block.raw_dtype)
        row_bytes = math.prod(row_shape) * block.raw_dtype.itemsize
        chunk_bytes = block.row_chunk * row_bytes
        flat = memoryview(out.reshape(-1).view(np.uint8).data) if out.size else memoryview(b"")
        rest = (0,) * len(row_shape)
        row = start
        while row < stop:
            chunk = row // block.row_chunk
            chunk_start = chunk * block.row_chunk
            upto = min(stop, chunk_start + block.row_chunk)
            rel = f"{block.path}/{block.meta.encode_key((chunk, *rest))}"
            self._check_chunk_file(rel, chunk_bytes, block, (start, stop))
            want = (upto - row) * row_bytes
            target = flat[(row - start) * row_bytes : (row - start) * row_bytes + want]
            try:
                got = self.access.read_range_into(rel, (row - chunk_start) * row_bytes, target)
            except OSError as exc:
                raise self._unreadable_chunk(rel, exc) from exc
            if got != want:
                raise CorruptChunkError(
                    f"short read of rows {row}:{upto} ({got} of {want} bytes)",
                    path=self.access.describe(rel),
                    expected=f"{chunk_bytes} bytes",
                )
            row = upto
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def _unreadable_chunk(self, rel: str, exc: OSError) -> CorruptChunkError:
        return CorruptChunkError(
            f"cannot read chunk file ({type(exc).__name__}: {exc.strerror or exc})",
            path=self.access.describe(rel),
            expected="a readable regular file",
        )

    def _check_chunk_file(
        self, rel: str, size: int | None, block: _ZarrBlock, rows: tuple[int, int]
    ) -> None:
        """Refuse a directory, or a chunk that is not exactly ``size`` bytes (raw layouts).

        Decided from ``stat`` alone, before anything is opened: a device (``/dev/zero``,
        ``/dev/urandom``) or FIFO has size 0, never a raw chunk's size. Encoded chunks
        (``size`` None) are opened by zarr through the access layer's store, which refuses
        FIFOs and devices by name without blocking.
        """
        try:
            st = self.access.stat(rel)
        except FileNotFoundError:
            raise  # a missing chunk: the caller knows it from the chunk status
        except OSError as exc:
            raise self._unreadable_chunk(rel, exc) from exc
        if st.is_dir:
            raise CorruptChunkError(
                f"cannot decode rows {rows[0]}:{rows[1]}: chunk is a directory",
                path=self.access.describe(rel),
                expected="a regular chunk file",
            )
        if size is not None and st.size != size:
            raise CorruptChunkError(
                f"cannot decode rows {rows[0]}:{rows[1]}: chunk file has {st.size} bytes",
                path=self.access.describe(rel),
                expected=f"{size} bytes (raw {block.spec.dtype}, chunk shape "
                f"{list(block.meta.chunk_shape)})",
            )

    def read_window(self, shard_id: str, name: str, start: int, stop: int) -> RowWindow:
        """Rows ``start:stop`` of a zarr block with a per-row readable mask; never raises for damage.

        Every chunk is checked the way :meth:`read_rows` checks it (a regular file, exactly
        the size its raw layout implies); rows in missing or refused chunks are marked
        unreadable and their values are never filled in. Uncompressed chunks are read whole
        and viewed without a copy when the window lies in one chunk; encoded ones are
        decoded by zarr one row chunk at a time. Raises only for a block that cannot be
        opened at all (listed by :meth:`integrity_problems`) or a range outside the block.
        """
        block = self._open_zarr(shard_id, name)
        num_rows = block.spec.num_rows
        if not 0 <= start <= stop <= num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: rows {start}:{stop} outside 0:{num_rows}"
            )
        readable = np.zeros(stop - start, dtype=bool)
        problems: list[VinOfflineStoreError] = []
        if start == stop:
            return RowWindow(start, stop, None, readable)
        meta = block.meta
        rc = block.row_chunk
        if meta.metadata is None and meta.stored_dtype is not None:
            return self._read_window_plain(block, start, stop)
        out: np.ndarray | None = None
        for r in range(start // rc, (stop - 1) // rc + 1):
            a, b = max(start, r * rc), min(stop, (r + 1) * rc)
            if r not in block.complete_rows and not block.status.complete:
                continue
            try:
                part = self.read_rows(shard_id, name, a, b)  # checks every chunk file first
            except (CorruptChunkError, MissingChunksError) as exc:
                problems.append(exc)
                continue
            if out is None:
                out = np.zeros((stop - start, *part.shape[1:]), dtype=part.dtype)
            out[a - start : b - start] = part
            readable[a - start : b - start] = True
        return RowWindow(start, stop, out, readable, tuple(problems))

    @staticmethod
    def _inner_coords(meta: _ArrayLayout) -> Iterator[tuple[int, ...]]:
        counts = [-(-n // c) for n, c in zip(meta.shape[1:], meta.chunk_shape[1:], strict=True)]
        return itertools.product(*(range(n) for n in counts))

    def _read_window_plain(self, block: _ZarrBlock, start: int, stop: int) -> RowWindow:
        meta = block.meta
        assert meta.stored_dtype is not None
        stored = meta.stored_dtype
        shape = meta.shape
        rc = block.row_chunk
        chunk_bytes = math.prod(meta.chunk_shape) * stored.itemsize
        inner_counts = [-(-n // c) for n, c in zip(shape[1:], meta.chunk_shape[1:], strict=True)]
        single_inner = all(n == 1 for n in inner_counts)
        readable = np.zeros(stop - start, dtype=bool)
        problems: list[VinOfflineStoreError] = []
        out: np.ndarray | None = None
        for r in range(start // rc, (stop - 1) // rc + 1):
            r0 = r * rc
            a, b = max(start, r0), min(stop, r0 + rc)
            if r not in block.complete_rows and not block.status.complete:
                continue  # listed once as MissingChunksError by the chunk status
            ok = True
            for inner in itertools.product(*(range(n) for n in inner_counts)):
                rel = f"{block.path}/{meta.encode_key((r, *inner))}"
                try:
                    self._check_chunk_file(rel, chunk_bytes, block, (a, b))
                    data = self.access.read_range(rel, 0, chunk_bytes)
                except FileNotFoundError:
                    ok = False
                    break
                except CorruptChunkError as exc:
                    problems.append(exc)
                    ok = False
                    break
                except OSError as exc:
                    problems.append(self._unreadable_chunk(rel, exc))
                    ok = False
                    break
                if len(data) != chunk_bytes:
                    problems.append(
                        CorruptChunkError(
                            f"short read: {len(data)} of {chunk_bytes} bytes",
                            path=self.access.describe(rel),
                            expected=f"{chunk_bytes} bytes",
                        )
                    )
                    ok = False
                    break
                chunk = np.frombuffer(data, dtype=stored).reshape(meta.chunk_shape)
                if not stored.isnative:
                    chunk = chunk.astype(stored.newbyteorder("="))
                if single_inner and start // rc == (stop - 1) // rc:
                    # The whole window in one chunk: a zero-copy view of its bytes.
                    readable[:] = True
                    return RowWindow(start, stop, chunk[a - r0 : b - r0], readable)
                if out is None:
                    out = np.zeros((stop - start, *shape[1:]), dtype=meta.dtype)
                spans = [
                    (i * c, min((i + 1) * c, n))
                    for i, c, n in zip(inner, meta.chunk_shape[1:], shape[1:], strict=True)
                ]
                target = (slice(a - start, b - start), *(slice(lo, hi) for lo, hi in spans))
                source = (slice(a - r0, b - r0), *(slice(0, hi - lo) for lo, hi in spans))
                out[target] = chunk[source]
            if ok:
                readable[a - start : b - start] = True
            elif out is not None:
                out[a - start : b - start] = 0  # never leave a partly read row chunk as data
        return RowWindow(start, stop, out if readable.any() else None, readable, tuple(problems))

    def read_row(self, shard_id: str, name: str, row: int) -> np.ndarray:
        """One row of a zarr block; decodes the row's whole chunk once and serves neighbours from it."""
        block = self._open_zarr(shard_id, name)
        key = (shard_id, name)
        cached = self._row_cache.get(key)
        if cached is not None and cached[0] <= row < cached[1]:
            return np.array(cached[2][row - cached[0]])
        if not 0 <= row < block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: row {row} outside 0:{block.spec.num_rows}"
            )
        start = (row // block.row_chunk) * block.row_chunk
        stop = min(start + block.row_chunk, block.spec.num_rows)
        data = self.read_rows(shard_id, name, start, stop)
        self._row_cache[key] = (start, stop, data)
        return np.array(data[row - start])

    def iter_row_batches(
        self, shard_id: str, name: str, *, max_bytes: int = DEFAULT_BATCH_BYTES
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, rows)`` batches covering a zarr block, chunk-aligned and memory-bounded."""
        block = self._open_zarr(shard_id, name)
        row_bytes = max(1, math.prod(block.spec.row_shape) * np.dtype(block.spec.dtype).itemsize)
        per_batch = max(1, max_bytes // (row_bytes * block.row_chunk)) * block.row_chunk
        for start in range(0, block.spec.num_rows, per_batch):
            stop = min(start + per_batch, block.spec.num_rows)
            yield start, self.read_rows(shard_id, name, start, stop)

    # ---- record blocks ------------------------------------------------------------------

    def _open_records(self, shard_id: str, name: str) -> _RecordBlock:
        key = (shard_id, name)
        with self._lock:
            cached = self._records.get(key)
            if cached is not None:
                return cached
        spec = self._require_block(shard_id, name, BlockKind.MSGPACK_INDEXED_RECORDS)
        self._check_shard_dir(shard_id)
        msgpack_rel, offsets_rel = record_paths(shard_id, name)
        for rel in (msgpack_rel, offsets_rel):
            if not self._is_file(rel):
                raise MissingBlockError(
                    f"record block {name!r} of shard {shard_id!r} is missing a file",
                    path=self.access.describe(rel),
                    expected=f"{name}.msgpack and {name}.offsets",
                )
        offsets_path = self.access.describe(offsets_rel)
        msgpack_path = self.access.describe(msgpack_rel)
        expected_size = (spec.num_rows + 1) * 8
        offsets_size = self.access.stat(offsets_rel).size
        if offsets_size != expected_size:
            raise CorruptRecordError(
                f"offsets file has {offsets_size} bytes",
                path=offsets_path,
                expected=f"{expected_size} bytes (num_rows + 1 = {spec.num_rows + 1} little-endian uint64)",
            )
        offsets = np.frombuffer(self.access.read_range(offsets_rel, 0, expected_size), dtype="<u8")
        if offsets.size != spec.num_rows + 1:
            raise CorruptRecordError("offsets file shrank while reading", path=offsets_path)
        data_size = self.access.stat(msgpack_rel).size
        if int(offsets[0]) != 0:
            raise CorruptRecordError(
                f"first offset is {int(offsets[0])}", path=offsets_path, expected="first offset 0"
            )
        decreasing: np.ndarray = (
            np.flatnonzero(np.diff(offsets.astype(np.int64, copy=False)) < 0)
            if offsets.size > 1
            else np.zeros(0, dtype=np.int64)
        )
        huge = np.flatnonzero(offsets > np.uint64(data_size))
        if (
            len(huge)
            and (not len(decreasing) or huge[0] <= decreasing[0])
            and huge[0] < spec.num_rows
        ):
            i = int(huge[0])
            raise CorruptRecordError(
                f"offset {i} is {int(offsets[i])}, out of range of {name}.msgpack ({data_size} bytes)",
                path=offsets_path,
                expected=f"offsets within 0..{data_size}, never decreasing",
            )
        if len(decreasing):
            i = int(decreasing[0]) + 1
            raise CorruptRecordError(
                f"offset {i} ({int(offsets[i])}) is smaller than offset {i - 1} ({int(offsets[i - 1])})",
                path=offsets_path,
                expected="offsets that never decrease",
            )
        last = int(offsets[-1])
        if last > data_size:
            raise CorruptRecordError(
                f"file is truncated: {data_size} bytes but the offsets end at {last}",
                path=msgpack_path,
                expected=f"{last} bytes (the last offset)",
            )
        if last < data_size:
            raise CorruptRecordError(
                f"file has {data_size - last} bytes after the last record (offset {last})",
                path=msgpack_path,
                expected=f"file size equal to the last offset {last}",
            )
        block = _RecordBlock(spec, msgpack_rel, offsets.astype(np.int64))
        with self._lock:
            self._records[key] = block
        return block

    def record_offsets(self, shard_id: str, name: str) -> np.ndarray:
        """The validated ``num_rows + 1`` byte offsets of a record block (int64 copy)."""
        return self._open_records(shard_id, name).offsets.copy()

    def _decode(self, block: _RecordBlock, row: int, data: bytes | memoryview) -> dict[str, Any]:
        try:
            return decode_record(data)
        except RecordDecodeError as exc:
            raise CorruptRecordError(
                str(exc),
                path=self.access.describe(block.msgpack_rel),
                location=f"record {row} (bytes {int(block.offsets[row])}:{int(block.offsets[row + 1])})",
                expected="one msgpack map per record",
            ) from exc

    def read_record(self, shard_id: str, name: str, row: int) -> dict[str, Any]:
        """Record ``row`` of a record block, decoded (ndarray maps become numpy arrays)."""
        block = self._open_records(shard_id, name)
        if not 0 <= row < block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.msgpack_rel)}: record {row} outside 0:{block.spec.num_rows}"
            )
        start, stop = int(block.offsets[row]), int(block.offsets[row + 1])
        data = self.access.read_range(block.msgpack_rel, start, stop - start)
        if len(data) != stop - start:
            raise CorruptRecordError(
                f"short read: got {len(data)} of {stop - start} bytes of record {row}",
                path=self.access.describe(block.msgpack_rel),
                expected="a file as long as its offsets say",
            )
        return self._decode(block, row, data)

    def iter_records(
        self,
        shard_id: str,
        name: str,
        start: int = 0,
        stop: int | None = None,
        *,
        max_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(row, record)`` for rows ``start:stop``, read in bounded contiguous batches."""
        block = self._open_records(shard_id, name)
        stop = block.spec.num_rows if stop is None else stop
        if not 0 <= start <= stop <= block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.msgpack_rel)}: records {start}:{stop} "
                f"outside 0:{block.spec.num_rows}"
            )
        offsets: list[int] = block.offsets[start : stop + 1].tolist()
        row = start
        while row < stop:
            end = row + 1
            limit = offsets[row - start] + max_bytes
            while end < stop and offsets[end + 1 - start] <= limit:
                end += 1
            base = offsets[row - start]
            length = offsets[end - start] - base
            data = self.access.read_range(block.msgpack_rel, base, length)
            if len(data) != length:
                raise CorruptRecordError(
                    f"short read at records {row}:{end}",
                    path=self.access.describe(block.msgpack_rel),
                    expected="a file as long as its offsets say",
                )
            try:
                yield from enumerate(
                    decode_records(data, offsets[row - start : end - start + 1]), start=row
                )
            except RecordDecodeError as exc:
                bad = row + (exc.index or 0)
                raise CorruptRecordError(
                    str(exc),
                    path=self.access.describe(block.msgpack_rel),
                    location=f"record {bad} (bytes {int(block.offsets[bad])}:{int(block.offsets[bad + 1])})",
                    expected="one msgpack map per record",
                ) from exc
            row = end

    def read_vin_points(self, shard_id: str, row: int) -> np.ndarray:
        """The ``points`` float32 ``[n, 3]`` array of a ``vin_points`` record."""
        record = self.read_record(shard_id, "vin_points", row)
        return self._vin_points_from(record, shard_id, row)

    def _vin_points_from(self, record: Mapping[str, Any], shard_id: str, row: int) -> np.ndarray:
        points = record.get("points")
        if (
            not isinstance(points, np.ndarray)
            or points.dtype != np.float32
            or points.ndim != 2
            or points.shape[1] != 3
        ):
            described = (
                f"{points.dtype.name} {list(points.shape)}"
                if isinstance(points, np.ndarray)
                else type(points).__name__
            )
            raise CorruptRecordError(
                f"vin_points record has points {described}",
                path=self.access.describe(record_paths(shard_id, "vin_points")[0]),
                location=f"record {row}",
                expected='{"points": ndarray float32 [n, 3]}',
            )
        return points

    def iter_vin_points(
        self, shard_id: str, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(row, points)`` over a shard's ``vin_points`` records, streamed in batches."""
        for row, record in self.iter_records(shard_id, "vin_points", start, stop):
            yield row, self._vin_points_from(record, shard_id, row)

    # ---- samples ------------------------------------------------------------------------

    def read_sample(self, sample_index: int) -> VinOfflineSample:
        """Every stored block of one sample (numpy arrays)."""
        if not 0 <= sample_index < len(self.samples):
            raise IndexError(
                f"{self.access.root}: sample_index {sample_index} outside 0:{len(self.samples)}"
            )
        entry = self.samples[sample_index]
        shard = self.shard(entry.shard_id)
        blocks: dict[str, np.ndarray] = {}
        for spec in shard.blocks:
            if spec.kind is BlockKind.ZARR_ARRAY:
                blocks[spec.name] = self.read_row(entry.shard_id, spec.name, entry.row)
        return VinOfflineSample(
            sample_key=entry.sample_key,
            scene_id=entry.scene_id,
            snippet_id=entry.snippet_id,
            split=entry.split,
            vin_points=self.read_vin_points(entry.shard_id, entry.row),
            candidate_valid=blocks.get("candidate_valid"),
            rri=blocks.get("rri"),
            rri_components={
                n[len(RRI_COMPONENT_PREFIX) :]: v
                for n, v in blocks.items()
                if n.startswith(RRI_COMPONENT_PREFIX)
            },
            candidate_ids=blocks.get("candidate_ids"),
            candidate_poses=blocks.get("candidate_poses"),
            backbone={
                n[len(BACKBONE_PREFIX) :]: v
                for n, v in blocks.items()
                if n.startswith(BACKBONE_PREFIX)
            },
        )

    # ---- whole-store checks -------------------------------------------------------------

    def _check_block(self, shard_id: str, spec: StoreBlockSpec) -> None:
        if spec.kind is BlockKind.ZARR_ARRAY:
            block = self._open_zarr(shard_id, spec.name)
            if not block.status.complete:
                self._raise_missing(block, 0, spec.num_rows)
        else:
            self._open_records(shard_id, spec.name)

    def validate(self) -> None:
        """Check every shard and block (existence, metadata, chunk files, offsets); raise the first problem."""
        for shard in self.manifest.shards:
            self._check_shard_dir(shard.shard_id)
            for spec in shard.blocks:
                self._check_block(shard.shard_id, spec)

    def integrity_problems(
        self, shard_ids: Iterable[str] | None = None
    ) -> tuple[StoreIntegrityProblem, ...]:
        """Every shard/block problem found by the checks :meth:`validate` runs, without raising.

        ``shard_ids`` limits the checks to those shards (in the order given); the default
        checks every shard in manifest order. Damage of any kind (a shard that is a file, a
        chunk that is a directory, an unreadable file) is a listed problem naming the file.
        """
        problems: list[StoreIntegrityProblem] = []
        ids = [s.shard_id for s in self.manifest.shards] if shard_ids is None else shard_ids
        for shard_id in ids:
            shard = self.shard(shard_id)
            try:
                self._check_shard_dir(shard.shard_id)
            except VinOfflineStoreError as exc:
                problems.append(
                    StoreIntegrityProblem(
                        type(exc).__name__, shard.shard_id, None, exc.path, str(exc)
                    )
                )
                continue
            for spec in shard.blocks:
                try:
                    self._check_block(shard.shard_id, spec)
                except VinOfflineStoreError as exc:
                    problems.append(
                        StoreIntegrityProblem(
                            type(exc).__name__, shard.shard_id, spec.name, exc.path, str(exc)
                        )
                    )
                except OSError as exc:
                    path = exc.filename if isinstance(exc.filename, str) else None
                    problems.append(
                        StoreIntegrityProblem(
                            type(exc).__name__,
                            shard.shard_id,
                            spec.name,
                            path or self.access.describe(shard_dir(shard.shard_id)),
                            f"block {spec.name!r} of shard {shard.shard_id!r} cannot be read: {exc}",
                        )
                    )
        return tuple(problems)

    def missing_chunks(self) -> tuple[ChunkStatus, ...]:
        """Chunk status of every zarr block that lacks chunk files (opens every zarr block)."""
        out: list[ChunkStatus] = []
        for shard in self.manifest.shards:
            for spec in shard.blocks:
                if spec.kind is BlockKind.ZARR_ARRAY:
                    status = self.chunk_status(shard.shard_id, spec.name)
                    if not status.complete:
                        out.append(status)
        return tuple(out)


def _grid(counts: list[int]) -> Iterator[tuple[int, ...]]:
    """Grid coordinates in C order, lazily (``itertools.product`` would build every range)."""
    if any(n <= 0 for n in counts):
        return
    coords = [0] * len(counts)
    while True:
        yield tuple(coords)
        axis = len(counts) - 1
        while axis >= 0:
            coords[axis] += 1
            if coords[axis] < counts[axis]:
                break
            coords[axis] = 0
            axis -= 1
        if axis < 0:
            return


@dataclass(frozen=True)
class _ArrayLayout:
    """What the reader needs from a zarr v3 ``zarr.json``: shapes, dtype, chunk keys, raw layout."""

    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]  # the storage-key grid (the shard shape under sharding)
    dtype: np.dtype[Any]  # native byte order
    raw_dtype: np.dtype[Any] | None  # on-disk dtype when chunks are raw bytes of whole rows
    metadata: Any  # zarr ArrayV3Metadata when zarr had to parse it, else None
    stored_dtype: np.dtype[Any] | None = None  # on-disk dtype of a plain layout's chunks

    def encode_key(self, coords: tuple[int, ...]) -> str:
        if self.metadata is not None:
            return str(self.metadata.encode_chunk_key(coords))
        return "c/" + "/".join(str(c) for c in coords) if coords else "c"

    def decode_key(self, key: str, counts: list[int]) -> tuple[int, ...] | None:
        """Grid coordinates of chunk key ``key``, or ``None`` for a name outside the grid."""
        if key == "zarr.json":
            return None
        # Parse any spelling of the integers, then accept only the array's own spelling.
        body = key[1:].lstrip("/.") if key.startswith("c") else key
        try:
            coords = tuple(int(part) for part in body.replace(".", "/").split("/")) if body else ()
        except ValueError:
            return None
        if len(coords) != len(counts) or not all(
            0 <= c < n for c, n in zip(coords, counts, strict=True)
        ):
            return None
        # Only the canonical spelling names a chunk ("c/01" is not "c/1").
        return coords if self.encode_key(coords) == key else None


def _parse_array_layout(data: bytes) -> _ArrayLayout:
    """Parse ``zarr.json``; the plain layout our writer produces needs no zarr machinery.

    Plain means: regular chunk grid, default ``c/`` chunk keys with ``/``, and a single
    ``bytes`` codec (no compression, filters, sharding or storage transformers). Anything
    else is handed to zarr's own metadata parser and read through zarr.
    """
    raw = json.loads(data)
    grid_config = raw.get("chunk_grid") if isinstance(raw, dict) else None
    declared = (
        grid_config.get("configuration", {}).get("chunk_shape")
        if isinstance(grid_config, dict) and isinstance(grid_config.get("configuration"), dict)
        else None
    )
    if isinstance(declared, list) and any(
        isinstance(n, int) and not isinstance(n, bool) and n <= 0 for n in declared
    ):
        # A zero extent would divide by zero (or declare no chunks at all) further on.
        raise ValueError(f"chunk_shape {declared} has an extent <= 0; every extent must be >= 1")
    if not isinstance(raw, dict) or raw.get("zarr_format") != 3:
        found = raw.get("zarr_format") if isinstance(raw, dict) else None
        raise ValueError(f"zarr_format is {found!r}, expected 3")
    if raw.get("node_type") != "array":
        raise ValueError(f"node_type is {raw.get('node_type')!r}, expected 'array'")
    grid = raw.get("chunk_grid")
    keys = raw.get("chunk_key_encoding")
    codecs = raw.get("codecs")
    shape = raw.get("shape")
    dtype_name = raw.get("data_type")
    plain = (
        isinstance(shape, list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        and isinstance(dtype_name, str)
        and dtype_name in NUMERIC_DTYPES
        and isinstance(grid, dict)
        and grid.get("name") == "regular"
        and isinstance(grid.get("configuration"), dict)
        and isinstance(grid["configuration"].get("chunk_shape"), list)
        and len(grid["configuration"]["chunk_shape"]) == len(shape)
        and all(isinstance(n, int) and n > 0 for n in grid["configuration"]["chunk_shape"])
        and isinstance(keys, dict)
        and keys.get("name") == "default"
        and (keys.get("configuration") or {}).get("separator", "/") == "/"
        and isinstance(codecs, list)
        and len(codecs) == 1
        and isinstance(codecs[0], dict)
        and codecs[0].get("name") == "bytes"
        and not raw.get("storage_transformers")
    )
    if plain:
        assert isinstance(shape, list) and isinstance(grid, dict) and isinstance(codecs, list)
        chunk_shape = tuple(int(n) for n in grid["configuration"]["chunk_shape"])
        dtype = np.dtype(str(dtype_name))
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        if endian not in ("little", "big"):
            raise ValueError(f"bytes codec endian {endian!r}, expected 'little' or 'big'")
        on_disk = (
            dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
        )
        whole_rows = bool(shape) and chunk_shape[1:] == tuple(shape[1:])
        return _ArrayLayout(
            tuple(shape), chunk_shape, dtype, on_disk if whole_rows else None, None, on_disk
        )

    from zarr.core.metadata import ArrayV3Metadata

    meta = ArrayV3Metadata.from_dict(raw)
    chunk_shape = tuple(int(n) for n in getattr(meta.chunk_grid, "chunk_shape", ()))
    if len(chunk_shape) != len(meta.shape) or any(n <= 0 for n in chunk_shape):
        raise ValueError(
            f"chunk grid {list(chunk_shape)} for shape {list(meta.shape)}: expected a regular "
            "grid with one extent >= 1 per dimension"
        )
    return _ArrayLayout(
        shape=tuple(meta.shape),
        chunk_shape=chunk_shape,
        dtype=np.dtype(meta.dtype.to_native_dtype()),
        raw_dtype=None,
        metadata=meta,
    )


def open_vin_offline_store(
    store: VinOfflineStoreConfig | str | os.PathLike[str], *, validate: bool = False
) -> VinOfflineStoreReader:
    """Open a store read-only; with ``validate=True`` also check every shard and block now."""
    reader = VinOfflineStoreReader(store)
    if validate:
        try:
            reader.validate()
        except BaseException:
            reader.close()
            raise
    return reader
