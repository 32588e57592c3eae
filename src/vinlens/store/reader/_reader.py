"""``VinOfflineStoreReader``, assembled from the package's parts, and ``open_vin_offline_store``.

Part of :mod:`vinlens.store.reader` (its docstring maps the package).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from vinlens.store.access import StoreAccess
from vinlens.store.errors import SampleIndexError, StoreReplacedError, VinOfflineStoreError
from vinlens.store.format import (
    BACKBONE_PREFIX,
    MANIFEST_FILE,
    RRI_COMPONENT_PREFIX,
    SAMPLE_INDEX_FILE,
    BlockKind,
    SampleIndexRow,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineSample,
    VinOfflineStoreConfig,
    check_manifest_blocks,
    parse_manifest,
    parse_sample_index,
    sample_index_byte_limit,
)
from vinlens.store.reader._core import RecordBlock, ZarrBlock
from vinlens.store.reader._generation import (
    StoreGeneration,
    as_store_config,
    capture_store_generation,
    open_config_access,
    read_manifest_bytes,
    stat_root,
)
from vinlens.store.reader._integrity import ChunkStatus, StoreIntegrityProblem
from vinlens.store.reader._validation import StoreChecks
from vinlens.store.reader._zarr_blocks import RowWindow

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


class VinOfflineStoreReader(StoreChecks):
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
        self.access = access if access is not None else open_config_access(self.config)
        self._lock = threading.RLock()
        self._zarr: dict[tuple[str, str], ZarrBlock] = {}
        self._records: dict[tuple[str, str], RecordBlock] = {}
        self._row_cache: dict[tuple[str, str], tuple[int, int, np.ndarray]] = {}
        self._checked_shards: set[str] = set()

        root_stat = stat_root(self.access)
        manifest_bytes, manifest_stat = read_manifest_bytes(self.access)
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

    def rows_by_split(self) -> dict[str, list[int]]:
        """Sample indices per split, in sample order."""
        out: dict[str, list[int]] = {}
        for row in self.samples:
            out.setdefault(row.split, []).append(row.sample_index)
        return out

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
