"""The on-disk contract of a VIN offline store, version 1, as validated Pydantic models.

Everything a reader, writer or diagnostic needs to know about *what* is stored lives here:
the manifest, its shards and blocks, one ``sample_index.jsonl`` row, the block names and
dtypes the spec fixes, and (re-exported from :mod:`vinlens.store.errors`) the errors raised when a store breaks
the contract. *How* files
are reached is :mod:`vinlens.store.access`; *reading* them is :mod:`vinlens.store.reader`.

Errors name the file, the line or field, and what was expected, because a store is usually
written by one tool and read by another, and the person reading the message has to find
the offending byte without our source code.

The package's private modules, reached through its ``__init__``:

- ``_contract``: constants, store locations, the spec's block table, path helpers.
- ``_models``: ``VinOfflineStoreConfig``, the manifest, shard, block and sample-index models.
- ``_parsing``: parsing the manifest and the sample index with located errors.
- ``_manifest_rules``: the spec's block table as checks on a parsed manifest.
- ``_records``: msgpack record rows and their bounded decoding.
- ``_sample``: ``VinOfflineSample``, one sample in memory.
"""

from __future__ import annotations

from vinlens.store.errors import (
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    DirectoryInsteadOfFileError,
    InvalidSampleError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    RecordDecodeError,
    SampleIndexError,
    SpecialFileError,
    StoreExistsError,
    StoreNotFoundError,
    StoreReplacedError,
    StoreVerificationError,
    UnsupportedFormatError,
    VinOfflineStoreError,
)
from vinlens.store.format._contract import (
    BACKBONE_DTYPES,
    BACKBONE_PREFIX,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    MAX_SAMPLE_INDEX_LINE_BYTES,
    NUMERIC_DTYPES,
    RRI_COMPONENT_PREFIX,
    SAMPLE_INDEX_FILE,
    SHARDS_DIR,
    STORE_FORMAT,
    SUPPORTED_VERSIONS,
    BlockKind,
    arrays_dir,
    block_kind_for,
    block_name_problem,
    expected_block_dtype,
    is_url,
    normalize_location,
    record_paths,
    shard_dir,
)
from vinlens.store.format._manifest_rules import check_manifest_blocks
from vinlens.store.format._models import (
    Capabilities,
    MaterializedBlocks,
    SampleIndexRow,
    StoreBlockSpec,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineStoreConfig,
)
from vinlens.store.format._parsing import (
    format_validation_error,
    parse_manifest,
    parse_sample_index,
    parse_sample_index_line,
    sample_index_byte_limit,
)
from vinlens.store.format._records import (
    decode_ndarray,
    decode_record,
    decode_records,
    encode_ndarray,
    encode_record,
)
from vinlens.store.format._sample import VinOfflineSample

__all__ = [
    "BACKBONE_DTYPES",
    "BACKBONE_PREFIX",
    "MANIFEST_FILE",
    "MAX_MANIFEST_BYTES",
    "MAX_SAMPLE_INDEX_LINE_BYTES",
    "NUMERIC_DTYPES",
    "RRI_COMPONENT_PREFIX",
    "SAMPLE_INDEX_FILE",
    "SHARDS_DIR",
    "STORE_FORMAT",
    "SUPPORTED_VERSIONS",
    "BlockKind",
    "BlockMismatchError",
    "Capabilities",
    "CorruptChunkError",
    "CorruptRecordError",
    "DirectoryInsteadOfFileError",
    "InvalidSampleError",
    "ManifestError",
    "MaterializedBlocks",
    "MissingBlockError",
    "MissingChunksError",
    "MissingShardError",
    "RecordDecodeError",
    "SampleIndexError",
    "SampleIndexRow",
    "SpecialFileError",
    "StoreBlockSpec",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StoreShardSpec",
    "StoreVerificationError",
    "UnsupportedFormatError",
    "VinOfflineManifest",
    "VinOfflineSample",
    "VinOfflineStoreConfig",
    "VinOfflineStoreError",
    "arrays_dir",
    "block_kind_for",
    "block_name_problem",
    "check_manifest_blocks",
    "decode_ndarray",
    "decode_record",
    "decode_records",
    "encode_ndarray",
    "encode_record",
    "expected_block_dtype",
    "format_validation_error",
    "is_url",
    "normalize_location",
    "parse_manifest",
    "parse_sample_index",
    "parse_sample_index_line",
    "record_paths",
    "sample_index_byte_limit",
    "shard_dir",
]

# Classes that appear in the signatures of others name this package as their module, so
# reprs, pickles and the signatures in docs/api.md read ``vinlens.store.format.BlockKind``,
# the path users import them from. (Only these: this module's namespace resolves their
# type hints; it would not resolve ``VinOfflineSample``'s or ``VinOfflineStoreConfig``'s.)
for _cls in (BlockKind, Capabilities, MaterializedBlocks, StoreBlockSpec, StoreShardSpec):
    _cls.__module__ = __name__
del _cls
