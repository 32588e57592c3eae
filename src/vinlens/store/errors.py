"""Every error the store package raises, in one hierarchy under :class:`VinlensStoreError`
(itself a :class:`~vinlens.errors.VinlensError`, the root of every vinlens error).

The root is a plain marker: each family also derives from the builtin a caller already
catches (``ValueError`` for broken contracts and undecodable bytes, ``OSError`` for
unreachable locations and special files), so ``except ValueError`` and ``except OSError``
keep working while ``except VinlensStoreError`` catches any store failure at once::

    VinlensStoreError
    ├── VinOfflineStoreError (ValueError)      a store breaks the v1 contract
    │   ├── StoreNotFoundError (FileNotFoundError)
    │   ├── ManifestError ── UnsupportedFormatError
    │   ├── SampleIndexError, MissingShardError, MissingBlockError, BlockMismatchError
    │   ├── MissingChunksError, CorruptChunkError, CorruptRecordError
    │   ├── StoreExistsError (FileExistsError), InvalidSampleError, StoreVerificationError
    │   ├── SpecialFileError (OSError) ── DirectoryInsteadOfFileError (IsADirectoryError)
    │   └── StoreReplacedError                  another generation appeared mid-read
    │       └── VinOfflineStoreReplacedError    not the generation a request captured
    ├── StoreAccessError (OSError)             network, credentials, permissions
    ├── RecordDecodeError (ValueError)         bytes that are not one v1 msgpack record
    └── TarScanError (ValueError)              a raw-dataset tar that cannot be scanned
        └── TruncatedTarError, TarHeaderChecksumError, TarHeaderFormatError,
            TarExtendedHeaderTooLargeError

The modules whose operations raise these (:mod:`~vinlens.store.format`,
:mod:`~vinlens.store.access`, :mod:`~vinlens.store.records`, :mod:`~vinlens.store.tarscan`,
:mod:`~vinlens.store.diagnostics`) re-export them under the same names.
"""

from __future__ import annotations

import os
from pathlib import Path

from vinlens.errors import VinlensError

__all__ = [
    "BlockMismatchError",
    "CorruptChunkError",
    "CorruptRecordError",
    "DirectoryInsteadOfFileError",
    "InvalidSampleError",
    "ManifestError",
    "MissingBlockError",
    "MissingChunksError",
    "MissingShardError",
    "RecordDecodeError",
    "SampleIndexError",
    "SpecialFileError",
    "StoreAccessError",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StoreVerificationError",
    "TarExtendedHeaderTooLargeError",
    "TarHeaderChecksumError",
    "TarHeaderFormatError",
    "TarScanError",
    "TruncatedTarError",
    "UnsupportedFormatError",
    "VinOfflineStoreError",
    "VinOfflineStoreReplacedError",
    "VinlensStoreError",
]


class VinlensStoreError(VinlensError):
    """Root of every store error (contract, access, record decoding, tar scanning)."""


class VinOfflineStoreError(VinlensStoreError, ValueError):
    """A store breaks the v1 contract; the message names the file, location and expectation.

    ``path`` is the offending file (or directory), ``location`` the field path or
    ``line N`` inside it when there is one, ``expected`` a short statement of what the
    spec requires. Subclasses say which rule was broken so tests and callers can tell
    them apart without parsing messages.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        location: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.location = location
        self.expected = expected
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if location:
            parts.append(location)
        prefix = ": ".join(parts)
        text = f"{prefix}: {message}" if prefix else message
        if expected:
            text = f"{text} (expected {expected})"
        super().__init__(text)


class StoreNotFoundError(VinOfflineStoreError, FileNotFoundError):
    """The store directory or its ``manifest.json`` does not exist (not published, or mid-replace)."""


class ManifestError(VinOfflineStoreError):
    """``manifest.json`` is not valid JSON or does not match the v1 schema."""


class UnsupportedFormatError(ManifestError):
    """``format`` or ``version`` in ``manifest.json`` is not one this reader supports."""


class SampleIndexError(VinOfflineStoreError):
    """``sample_index.jsonl`` is malformed or disagrees with the manifest (gaps, duplicates, ...)."""


class MissingShardError(VinOfflineStoreError):
    """A shard declared in the manifest has no directory on disk."""


class MissingBlockError(VinOfflineStoreError):
    """A block is declared (or required by the spec) but its files are missing."""


class BlockMismatchError(VinOfflineStoreError):
    """A stored block's shape, dtype or layout differs from what the manifest declares."""


class MissingChunksError(VinOfflineStoreError):
    """A zarr block lacks chunk files; zarr would silently return fill values for them."""


class CorruptChunkError(VinOfflineStoreError):
    """A zarr chunk file exists but cannot be decoded (truncated or overwritten)."""


class CorruptRecordError(VinOfflineStoreError):
    """A msgpack record block or its offsets file is truncated, out of range or not v1 msgpack."""


class StoreExistsError(VinOfflineStoreError, FileExistsError):
    """The writer's target path exists and ``replace=True`` was not given (or is not a store)."""


class SpecialFileError(VinOfflineStoreError, OSError):
    """A file the store or raw dataset needs is a FIFO, device, socket or other non-regular file.

    Reading such a file could block forever (a FIFO) or never end (``/dev/zero``), so it is
    refused from its ``stat`` before any byte is read.
    """


class DirectoryInsteadOfFileError(SpecialFileError, IsADirectoryError):
    """A directory sits where the store or raw dataset needs a file."""


class InvalidSampleError(VinOfflineStoreError):
    """A sample given to the writer breaks the format (type, name or value range); nothing is written."""


class StoreVerificationError(VinOfflineStoreError):
    """A store the writer just built failed its read-back check; it was not published."""


class StoreReplacedError(VinOfflineStoreError):
    """The directory at the store path was replaced (another generation) while it was being read."""


class VinOfflineStoreReplacedError(StoreReplacedError):
    """The store at the request's path is not the generation the request captured.

    Raised when the store was replaced (or a top-level file changed) before the read
    started or while it ran; the acquisition returns nothing.
    """


class StoreAccessError(VinlensStoreError, OSError):
    """A location could not be reached (network, credentials, permissions); names the URL."""


class RecordDecodeError(VinlensStoreError, ValueError):
    """The bytes are not one v1 msgpack record; the reader adds file and row to the message."""

    index: int | None = None  # position in a batch, set by decode_records


class TarScanError(VinlensStoreError, ValueError):
    """A tar file could not be scanned; ``path`` and ``offset`` say where."""

    def __init__(self, path: str | os.PathLike[str], offset: int, message: str) -> None:
        self.path = str(path)
        self.offset = offset
        super().__init__(f"{self.path}: at byte {offset}: {message}")


class TruncatedTarError(TarScanError):
    """The file ends inside a header or member data, or before the end-of-archive marker."""


class TarHeaderChecksumError(TarScanError):
    """A header block's checksum does not match its contents."""


class TarHeaderFormatError(TarScanError):
    """A header field or pax record cannot be parsed."""


class TarExtendedHeaderTooLargeError(TarScanError):
    """A pax or GNU long-name header declares more bytes than the scanner accepts."""
