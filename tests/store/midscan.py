"""Changing a store's files *between a shard's listing and its reads* (tests' fault injection).

A scan lists each shard first (``integrity_problems([shard_id])`` opens every block: chunk
listing, offsets) and reads it afterwards. :func:`after_listing` wraps that call so a
callback runs right after a chosen shard was listed, which is exactly the window in which
a file deleted or rewritten by someone else used to be silently left out or mixed in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vinlens.store.reader import VinOfflineStoreReader

MUTATIONS = ("delete", "same_size", "replace")


@contextlib.contextmanager
def after_listing(
    monkeypatch: pytest.MonkeyPatch, shard_id: str, change: Callable[[], None]
) -> Iterator[list[str]]:
    """Run ``change`` once, right after ``shard_id`` was listed; yields the shards seen."""
    original = VinOfflineStoreReader.integrity_problems
    seen: list[str] = []
    done = [False]

    def listing_then_change(
        self: VinOfflineStoreReader, shard_ids: Iterable[str] | None = None
    ) -> Any:
        ids = None if shard_ids is None else list(shard_ids)
        result = original(self, ids)
        if ids is not None:
            seen.extend(ids)
        if not done[0] and ids is not None and shard_id in ids:
            done[0] = True
            change()
        return result

    with monkeypatch.context() as patch:
        patch.setattr(VinOfflineStoreReader, "integrity_problems", listing_then_change)
        yield seen
    assert done[0], f"shard {shard_id!r} was never listed"


def other_bytes(data: bytes) -> bytes:
    """Bytes of the same length that differ from ``data`` in every position."""
    return bytes(b ^ 0x5A for b in data)


def mutate_local(path: Path, kind: str) -> None:
    """Delete ``path``, rewrite it in place with same-size bytes, or replace it by rename."""
    if kind == "delete":
        path.unlink()
        return
    data = other_bytes(path.read_bytes())
    if kind == "same_size":
        with open(path, "r+b") as handle:
            handle.write(data)
        return
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def mutate_s3(fs: Any, path: str, kind: str) -> None:
    """The same three changes on an object (``bucket/key``); replace and rewrite coincide."""
    if kind == "delete":
        fs.rm_file(path)
        return
    fs.pipe_file(path, other_bytes(fs.cat_file(path)))
