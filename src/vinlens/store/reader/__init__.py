"""Read-only access to a published VIN offline store, with every cross check the spec implies.

:class:`VinOfflineStoreReader` loads and validates ``manifest.json`` and
``sample_index.jsonl`` when it opens (cheap), and checks each block the first time it
is touched (zarr metadata against the manifest, chunk completeness, offsets files).
:meth:`VinOfflineStoreReader.validate` checks everything up front and
:meth:`VinOfflineStoreReader.integrity_problems` lists every problem without raising,
for diagnostics. All file access goes through :mod:`vinlens.store.access`.

The reader is assembled from the package's private modules, each one part of the class:
``_generation`` (which store a path names), ``_integrity`` (problem records),
``_zarr_layout`` (``zarr.json`` and chunk keys), ``_core`` (the open store's shared state
and shard checks), ``_zarr_blocks`` and ``_record_blocks`` (reads), ``_validation``
(whole-store checks) and ``_reader`` (the class itself); the spec's block table is
:func:`vinlens.store.format.check_manifest_blocks`.
"""

from __future__ import annotations

from vinlens.store.format import check_manifest_blocks
from vinlens.store.reader._generation import (
    StoreGeneration,
    as_store_config,
    capture_store_generation,
)
from vinlens.store.reader._integrity import ChunkStatus, StoreIntegrityProblem
from vinlens.store.reader._reader import VinOfflineStoreReader, open_vin_offline_store
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
