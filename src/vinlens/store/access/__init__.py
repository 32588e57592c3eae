"""The one small, read-only file-access layer under the store reader and the diagnostics.

Every byte the reader, the dataset and the diagnostics take from a store (or from a raw
dataset directory of tar shards) comes through a :class:`StoreAccess`: ``stat``, ``list``,
``read`` a whole small file, ``read_range`` of a large one, ``open_binary`` for streaming
headers, and ``zarr_store`` for zarr's own reads. Keeping it this narrow is what lets the
fsspec-backed :class:`FsspecStoreAccess` (object storage: ``s3://``, ``gs://``,
``memory://``) and per-shard worker tasks serve every statistic unchanged.

Only regular files are ever read: a FIFO, device or socket where a store or raw-dataset file
belongs is refused from its ``stat`` (descriptors are opened ``O_NONBLOCK`` and checked with
``S_ISREG`` before any read), so a hostile directory can neither block a read forever nor feed
it ``/dev/zero``.

Paths given to an access object are relative, ``/``-separated and may not escape its root.
Nothing here writes; the zarr store handed out is opened ``read_only=True``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vinlens.store.access._base import FileStat, StoreAccess, open_regular_fd
from vinlens.store.access._fsspec import (
    DEFAULT_S3_OPTIONS,
    REQUEST_DEADLINE_S,
    S3FS_RETRIES,
    FsspecStoreAccess,
)
from vinlens.store.access._local import LocalStoreAccess
from vinlens.store.errors import StoreAccessError
from vinlens.store.format import is_url

__all__ = [
    "DEFAULT_S3_OPTIONS",
    "REQUEST_DEADLINE_S",
    "S3FS_RETRIES",
    "FileStat",
    "FsspecStoreAccess",
    "LocalStoreAccess",
    "StoreAccess",
    "StoreAccessError",
    "open_regular_fd",
    "open_store_access",
]


def open_store_access(
    location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> StoreAccess:
    """The access object for ``location``: a local directory, or an fsspec URL.

    ``file://`` URLs and plain paths are local (``storage_options`` unused); any other
    ``scheme://`` goes through :class:`FsspecStoreAccess`. An unknown protocol raises
    ``ValueError`` and a missing backend ``ImportError``, both naming the URL (and, for S3,
    the extra to install: ``pip install 'vinlens[s3]'``).
    """
    text = os.fspath(location)
    if isinstance(location, str) and is_url(text):
        scheme, _, rest = text.partition("://")
        if scheme.lower() == "file":
            return LocalStoreAccess(rest or "/")
        return FsspecStoreAccess(text, storage_options)
    return LocalStoreAccess(text)
