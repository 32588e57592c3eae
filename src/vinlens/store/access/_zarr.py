"""zarr v3 reads through the access layer, each chunk pinned to the reader's listing.

zarr asked through its own stores turns a chunk key whose file is absent into the array's
fill value, silently, and reads whatever bytes the path holds at that moment. The reader
gives zarr this store instead: metadata comes through the access layer as usual, every
chunk read is a pinned read of the file the block's listing saw, and a chunk the listing
lacks or whose file has vanished raises :class:`~vinlens.store.errors.MissingChunksError`,
so fill values never reach a statistic as data.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from vinlens.store.access._base import FileStat, StoreAccess
from vinlens.store.errors import MissingChunksError

__all__ = ["AccessZarrStore"]

_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


def _span(byte_range: ByteRequest | None, size: int) -> tuple[int, int | None]:
    if byte_range is None:
        return 0, None
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.start, max(0, byte_range.end - byte_range.start)
    if isinstance(byte_range, OffsetByteRequest):
        return byte_range.offset, None
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, size - byte_range.suffix), None
    raise ValueError(f"unexpected byte range {byte_range!r}")


class AccessZarrStore(Store):
    """A read-only zarr store over ``access`` below ``rel``; chunk reads pinned to ``pins``."""

    def __init__(
        self, access: StoreAccess, rel: str = "", pins: Mapping[str, FileStat] | None = None
    ) -> None:
        super().__init__(read_only=True)
        self._access = access
        self._rel = rel.strip("/")
        self._pins = dict(pins) if pins is not None else None

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_deletes(self) -> bool:
        return False

    @property
    def supports_listing(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AccessZarrStore)
            and other._access is self._access
            and other._rel == self._rel
        )

    def __hash__(self) -> int:
        return hash((id(self._access), self._rel))

    def _full(self, key: str) -> str:
        key = key.strip("/")
        return f"{self._rel}/{key}" if self._rel and key else (self._rel or key)

    def _read(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        rel = self._full(key)
        if key.rsplit("/", 1)[-1] in _METADATA_NAMES:
            try:
                data = self._access.read_bytes(rel)
            except (FileNotFoundError, NotADirectoryError):
                return None
            start, length = _span(byte_range, len(data))
            return data[start:] if length is None else data[start : start + length]
        pin = self._pins.get(key) if self._pins is not None else None
        if self._pins is not None and pin is None:
            raise MissingChunksError(
                "chunk file is not in the block's listing; zarr would return fill values",
                path=self._access.describe(rel),
                expected="every chunk file the array's grid declares",
            )
        try:
            if pin is None:
                pin = self._access.stat(rel)  # no listing given: pinned to the file now
            start, length = _span(byte_range, pin.size)
            return self._access.read_pinned(rel, pin, start, length)
        except (FileNotFoundError, NotADirectoryError):
            raise MissingChunksError(
                "chunk file vanished after the block was listed; zarr would return fill values",
                path=self._access.describe(rel),
                expected="the chunk files the block's listing saw",
            ) from None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        data = await asyncio.to_thread(self._read, key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._access.exists, self._full(key))

    async def set(self, key: str, value: Buffer) -> None:
        raise PermissionError(f"{self._access.describe(self._full(key))}: store is read-only")

    async def delete(self, key: str) -> None:
        raise PermissionError(f"{self._access.describe(self._full(key))}: store is read-only")

    async def list(self) -> AsyncIterator[str]:
        prefix = f"{self._rel}/" if self._rel else ""
        try:
            files = await asyncio.to_thread(lambda: list(self._access.walk_files(self._rel)))
        except FileNotFoundError:
            return
        for rel in files:
            yield rel[len(prefix) :]

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        try:
            names = await asyncio.to_thread(self._access.list_dir, self._full(prefix))
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            yield name

    def __repr__(self) -> str:
        return f"AccessZarrStore({self._access.describe(self._rel)!r})"
