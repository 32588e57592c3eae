"""What every part of the store reader shares: the open store's state and its shard checks.

:class:`ReaderCore` holds the attributes :class:`~vinlens.store.reader.VinOfflineStoreReader`
sets when it opens (access layer, manifest, caches, lock) and the lookups that the zarr
block, record block and whole-store parts all use.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vinlens.store.access import FileStat, StoreAccess
from vinlens.store.errors import BlockMismatchError, MissingBlockError, MissingShardError
from vinlens.store.format import (
    MANIFEST_FILE,
    BlockKind,
    SampleIndexRow,
    StoreBlockSpec,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineStoreConfig,
    shard_dir,
)
from vinlens.store.reader._generation import StoreGeneration
from vinlens.store.reader._integrity import ChunkStatus
from vinlens.store.reader._zarr_layout import ArrayLayout

__all__ = ["DEFAULT_BATCH_BYTES", "ReaderCore", "RecordBlock", "ZarrBlock"]

# Batches for streaming scans: big enough to amortise per-call overhead, small enough that
# peak memory does not grow with the store.
DEFAULT_BATCH_BYTES = 1 << 20


@dataclass
class ZarrBlock:
    spec: StoreBlockSpec
    path: str
    group_rel: str
    meta: ArrayLayout  # parsed from zarr.json, read through the access layer
    row_chunk: int
    status: ChunkStatus
    # Row-chunk indices whose every chunk file is present: the set is bounded by the files
    # that exist, never by the grid the metadata declares.
    complete_rows: frozenset[int]
    # Set when chunks are raw bytes holding whole rows (our writer's layout): rows are then
    # read straight from the chunk files into the output array, bypassing zarr's pipeline.
    raw_dtype: np.dtype[Any] | None = None
    array: Any = None  # zarr.Array, opened on first need
    # Chunk file (relative to the store) -> its stat when the block was listed.
    pins: dict[str, FileStat] = field(default_factory=dict)


@dataclass
class RecordBlock:
    spec: StoreBlockSpec
    msgpack_rel: str
    offsets: np.ndarray  # uint64, num_rows + 1
    # The msgpack file as the block's opening saw it: every record read is pinned to it.
    msgpack_pin: FileStat | None = None


class ReaderCore:
    """State of one open store and the shard/block lookups every reader part uses."""

    config: VinOfflineStoreConfig
    access: StoreAccess
    manifest: VinOfflineManifest
    samples: tuple[SampleIndexRow, ...]
    generation: StoreGeneration
    _lock: threading.RLock
    _zarr: dict[tuple[str, str], ZarrBlock]
    _records: dict[tuple[str, str], RecordBlock]
    _row_cache: dict[tuple[str, str], tuple[int, int, np.ndarray]]
    _checked_shards: set[str]
    _shards: dict[str, StoreShardSpec]

    def shard(self, shard_id: str) -> StoreShardSpec:
        """Manifest entry of a shard (``KeyError`` naming the store for an unknown id)."""
        try:
            return self._shards[shard_id]
        except KeyError:
            raise KeyError(f"{self.access.root}: no shard {shard_id!r} in manifest.json") from None

    def block_spec(self, shard_id: str, name: str) -> StoreBlockSpec | None:
        """Manifest entry of a block, or ``None`` when the shard does not store it."""
        return self.shard(shard_id).block(name)

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

    def _is_file(self, rel: str) -> bool:
        """Whether ``rel`` exists and is not a directory (a path through a file is absent)."""
        try:
            return not self.access.stat(rel).is_dir
        except (FileNotFoundError, NotADirectoryError):
            return False
