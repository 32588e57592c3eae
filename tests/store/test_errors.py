"""One error hierarchy for the store package, with every class importable from its old home."""

from __future__ import annotations

import importlib

import pytest

from vinlens.store import errors

OLD_HOMES = {
    "vinlens.store.format": [
        "BlockMismatchError",
        "CorruptChunkError",
        "CorruptRecordError",
        "DirectoryInsteadOfFileError",
        "InvalidSampleError",
        "ManifestError",
        "MissingBlockError",
        "MissingChunksError",
        "MissingShardError",
        "SampleIndexError",
        "SpecialFileError",
        "StoreExistsError",
        "StoreNotFoundError",
        "StoreReplacedError",
        "StoreVerificationError",
        "UnsupportedFormatError",
        "VinOfflineStoreError",
    ],
    "vinlens.store.access": ["StoreAccessError"],
    "vinlens.store.records": ["RecordDecodeError"],
    "vinlens.store.tarscan": [
        "TarScanError",
        "TruncatedTarError",
        "TarHeaderChecksumError",
        "TarHeaderFormatError",
        "TarExtendedHeaderTooLargeError",
    ],
    "vinlens.store": ["StoreAccessError", "VinOfflineStoreError", "VinlensStoreError"],
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, ns in OLD_HOMES.items() for n in ns])
def test_every_error_is_the_one_in_errors(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert cls is getattr(errors, name)
    assert issubclass(cls, errors.VinlensStoreError)


def test_builtin_bases_are_kept() -> None:
    assert issubclass(errors.VinOfflineStoreError, ValueError)
    assert issubclass(errors.StoreAccessError, OSError)
    assert issubclass(errors.RecordDecodeError, ValueError)
    assert issubclass(errors.TarScanError, ValueError)
    assert issubclass(errors.StoreNotFoundError, FileNotFoundError)
    assert issubclass(errors.DirectoryInsteadOfFileError, IsADirectoryError)
    # Every class the module defines is in the hierarchy.
    defined = [
        v for v in vars(errors).values() if isinstance(v, type) and v.__module__ == errors.__name__
    ]
    assert len(defined) == len(errors.__all__)
    assert all(issubclass(c, errors.VinlensStoreError) for c in defined)
