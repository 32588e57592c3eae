"""VIN offline store v1: format, read-only access, reader, writer, torch dataset, synthetic data.

The normative format is ``docs/store-format.md``; every public name with its signature is in
``docs/api.md`` (generated from ``__all__``); changes are recorded in ``CHANGELOG.md``.

Packages (each imported through its ``__init__``, whose ``__all__`` lists its public names;
the ``_modules`` inside it are private):

- ``errors``: every store error, one hierarchy under ``VinlensStoreError``.
- ``format``: what is on disk (the v1 contract, manifest rules, msgpack records, sample).
- ``access``: how bytes are reached (local paths, fsspec URLs, zarr stores).
- ``reader``: reading a store and its checks (generation, integrity, validation).
- ``coverage``: raw-dataset tar coverage and the tar header scanner.
- ``diagnostics``: store stats; ``compare`` (above diagnostics): store B against store A.
- ``writer`` (publishing through ``_publish``), ``dataset`` (imports torch), ``synthetic``:
  beside them; ``records``, ``sample`` and ``tarscan`` re-export names for code that
  imports them there.
- Command line: ``vinlens.cli.store`` (``vinlens store --help``), not imported here.
"""

from __future__ import annotations

from vinlens.store.access import (
    FileStat,
    FsspecStoreAccess,
    LocalStoreAccess,
    StoreAccess,
    open_store_access,
)
from vinlens.store.compare import FieldDrift, StoreComparison, compare_vin_offline_stores
from vinlens.store.errors import (
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    InvalidSampleError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    SampleIndexError,
    SpecialFileError,
    StoreAccessError,
    StoreExistsError,
    StoreNotFoundError,
    StoreReplacedError,
    StoreVerificationError,
    UnsupportedFormatError,
    VinlensStoreError,
    VinOfflineStoreError,
)
from vinlens.store.format import (
    BlockKind,
    SampleIndexRow,
    StoreBlockSpec,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineSample,
    VinOfflineStoreConfig,
)
from vinlens.store.reader import (
    ChunkStatus,
    StoreGeneration,
    StoreIntegrityProblem,
    VinOfflineStoreReader,
    capture_store_generation,
    open_vin_offline_store,
)

__all__ = [
    "BlockKind",
    "BlockMismatchError",
    "ChunkStatus",
    "CorruptChunkError",
    "CorruptRecordError",
    "FieldDrift",
    "FileStat",
    "FsspecStoreAccess",
    "InvalidSampleError",
    "LocalStoreAccess",
    "ManifestError",
    "MissingBlockError",
    "MissingChunksError",
    "MissingShardError",
    "SampleIndexError",
    "SampleIndexRow",
    "SpecialFileError",
    "StoreAccess",
    "StoreAccessError",
    "StoreBlockSpec",
    "StoreComparison",
    "StoreExistsError",
    "StoreGeneration",
    "StoreIntegrityProblem",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StoreShardSpec",
    "StoreVerificationError",
    "UnsupportedFormatError",
    "VinOfflineManifest",
    "VinOfflineSample",
    "VinOfflineStoreConfig",
    "VinOfflineStoreError",
    "VinOfflineStoreReader",
    "VinlensStoreError",
    "capture_store_generation",
    "compare_vin_offline_stores",
    "open_store_access",
    "open_vin_offline_store",
]
