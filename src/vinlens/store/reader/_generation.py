"""Which store generation a path names: the identity a reader records at open and re-checks.

A store path can name another store between two reads (atomic replace), so the reader
records a :class:`StoreGeneration` from the handles it actually read and compares it with
the path's current one (:func:`capture_store_generation`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from vinlens.store.access import FileStat, StoreAccess, open_store_access
from vinlens.store.errors import SampleIndexError, StoreNotFoundError
from vinlens.store.format import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    SAMPLE_INDEX_FILE,
    VinOfflineStoreConfig,
)

__all__ = [
    "StoreGeneration",
    "as_store_config",
    "capture_store_generation",
    "open_config_access",
    "read_manifest_bytes",
    "stat_root",
]


def as_store_config(store: VinOfflineStoreConfig | str | os.PathLike[str]) -> VinOfflineStoreConfig:
    """Accept a config or a bare path wherever a store is expected."""
    if isinstance(store, VinOfflineStoreConfig):
        return store
    return VinOfflineStoreConfig(store_dir=os.fspath(store))


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


def stat_root(access: StoreAccess) -> FileStat:
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


def read_manifest_bytes(access: StoreAccess) -> tuple[bytes, FileStat]:
    try:
        return access.read_bytes_limited(MANIFEST_FILE, MAX_MANIFEST_BYTES)
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise StoreNotFoundError(
            "manifest.json is missing: not a published store, or one being replaced",
            path=access.describe(MANIFEST_FILE),
            expected="a store directory with manifest.json, which the writer publishes last",
        ) from exc


def open_config_access(config: VinOfflineStoreConfig) -> StoreAccess:
    return open_store_access(config.store_dir, config.storage_options)


def capture_store_generation(
    store: VinOfflineStoreConfig | str | os.PathLike[str] | StoreAccess,
) -> StoreGeneration:
    """The generation at the store path now (reads only the manifest's bytes for its hash)."""
    access = store if isinstance(store, StoreAccess) else open_config_access(as_store_config(store))
    root = stat_root(access)
    data, manifest_stat = read_manifest_bytes(access)
    try:
        index_stat = access.stat(SAMPLE_INDEX_FILE)
    except FileNotFoundError as exc:
        raise SampleIndexError(
            "sample_index.jsonl is missing", path=access.describe(SAMPLE_INDEX_FILE)
        ) from exc
    return StoreGeneration(root, manifest_stat, index_stat, hashlib.sha256(data).hexdigest())
