"""Zarr blocks of a store: opened against the manifest, chunk files listed, rows read.

Zarr returns the fill value for a chunk that is missing on disk, without any error. The
reader therefore lists each array's chunk files (through the access layer), compares
them with the chunk grid, and raises :class:`MissingChunksError` for any read that
touches a missing chunk; fill values are never presented as data. Uncompressed chunks
holding whole rows are read straight into the output array, bypassing zarr's pipeline.
"""

from __future__ import annotations

import errno
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from vinlens.store.access import FileStat
from vinlens.store.errors import (
    BlockMismatchError,
    CorruptChunkError,
    MissingBlockError,
    MissingChunksError,
    StoreReplacedError,
    VinOfflineStoreError,
)
from vinlens.store.format import BlockKind, arrays_dir
from vinlens.store.reader._core import DEFAULT_BATCH_BYTES, ReaderCore, ZarrBlock
from vinlens.store.reader._integrity import ChunkStatus
from vinlens.store.reader._zarr_layout import ArrayLayout, grid_coords, parse_array_layout

__all__ = ["MAX_LISTED_CHUNKS", "RowWindow", "ZarrBlockReads"]

# How many missing chunk keys an error or a ChunkStatus spells out.
MAX_LISTED_CHUNKS = 8
# Up to this many expected chunk files are checked with one stat each instead of a listing.
STAT_CHUNKS_UP_TO = 32


@dataclass(frozen=True)
class RowWindow:
    """Rows ``start:stop`` of one zarr block, as :meth:`VinOfflineStoreReader.read_window` read them.

    ``readable[i]`` says whether row ``start + i`` was read from chunk files that passed the
    reader's checks; ``values`` holds zeros (never data) in the other rows, and is ``None``
    when no row is readable. ``values`` may be a read-only view of the chunk bytes.
    ``problems`` are the chunks refused in this window (wrong size, not a regular file,
    undecodable); missing chunk files are not repeated there, they are one
    ``MissingChunksError`` of :meth:`VinOfflineStoreReader.integrity_problems`.
    """

    start: int
    stop: int
    values: np.ndarray | None
    readable: np.ndarray
    problems: tuple[VinOfflineStoreError, ...] = ()


class ZarrBlockReads(ReaderCore):
    """The reader's zarr-block part: open, check and read rows of ``zarr_array`` blocks."""

    def _open_zarr(self, shard_id: str, name: str) -> ZarrBlock:
        key = (shard_id, name)
        with self._lock:
            cached = self._zarr.get(key)
            if cached is not None:
                return cached
        spec = self._require_block(shard_id, name, BlockKind.ZARR_ARRAY)
        self._check_shard_dir(shard_id)
        group_rel = arrays_dir(shard_id)
        rel = f"{group_rel}/{name}"
        path = self.access.describe(rel)
        if not self._is_file(f"{rel}/zarr.json"):
            raise MissingBlockError(
                f"zarr block {name!r} of shard {shard_id!r} is missing",
                path=self.access.describe(f"{rel}/zarr.json"),
                expected="a zarr v3 array declared in manifest.json",
            )
        try:
            meta = parse_array_layout(self.access.read_bytes(f"{rel}/zarr.json"))
        except Exception as exc:  # zarr raises many types for bad metadata
            raise BlockMismatchError(
                f"cannot open as a zarr v3 array ({type(exc).__name__}: {exc})",
                path=self.access.describe(f"{rel}/zarr.json"),
                expected="valid zarr v3 array metadata (zarr.json)",
            ) from exc
        stored_dtype = meta.dtype
        if tuple(meta.shape) != spec.shape:
            raise BlockMismatchError(
                f"stored shape {list(meta.shape)} differs from manifest.json",
                path=path,
                expected=f"shape {list(spec.shape)}",
            )
        if stored_dtype.name != spec.dtype:
            raise BlockMismatchError(
                f"stored dtype {stored_dtype.name} differs from manifest.json",
                path=path,
                expected=f"dtype {spec.dtype}",
            )
        status, complete_rows, row_chunk, pins = self._chunk_status(shard_id, name, rel, meta)
        block = ZarrBlock(
            spec,
            rel,
            group_rel,
            meta,
            row_chunk,
            status,
            complete_rows,
            meta.raw_dtype,
            pins=pins,
        )
        with self._lock:
            self._zarr[key] = block
        return block

    def _zarr_handle(self, block: ZarrBlock) -> Any:
        if block.array is None:
            import zarr

            try:
                block.array = zarr.open_array(
                    self.access.zarr_store(
                        block.group_rel,
                        pins={
                            rel[len(block.group_rel) + 1 :]: st for rel, st in block.pins.items()
                        },
                    ),
                    path=block.spec.name,
                    mode="r",
                    zarr_format=3,
                )
            except Exception as exc:
                raise BlockMismatchError(
                    f"cannot open as a zarr v3 array ({type(exc).__name__}: {exc})",
                    path=self.access.describe(block.path),
                    expected="valid zarr v3 array metadata (zarr.json)",
                ) from exc
        return block.array

    def _chunk_status(
        self, shard_id: str, name: str, rel: str, meta: ArrayLayout
    ) -> tuple[ChunkStatus, frozenset[int], int, dict[str, FileStat]]:
        # The chunk grid is the storage-key grid: with the sharding codec one key holds a
        # whole shard, and completeness is checked per key, the unit zarr can silently miss.
        # The work is bounded by the chunk files that exist (one listing), never by the
        # grid: a metadata edit can declare 2**37 chunks in a directory that holds eight.
        grid = meta.chunk_shape
        shape = tuple(meta.shape)
        counts = [-(-n // c) for n, c in zip(shape, grid, strict=True)]
        expected = math.prod(counts)
        inner_total = expected // counts[0] if counts and counts[0] else 1
        prefix = f"{rel}/"
        present: set[tuple[int, ...]] = set()
        # What the listing saw of each chunk file: every later read is pinned to it, so a
        # chunk that vanishes or is rewritten mid-scan is damage or a replacement, never
        # silently other bytes (or zarr's fill value).
        pins: dict[str, FileStat] = {}
        if expected and expected <= STAT_CHUNKS_UP_TO:
            for coords in itertools.product(*(range(n) for n in counts)):
                chunk_rel = f"{prefix}{meta.encode_key(coords)}"
                try:
                    st = self.access.stat(chunk_rel)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                if not st.is_dir:
                    present.add(coords)
                    pins[chunk_rel] = st
        elif expected:
            for file_rel, st in self.access.walk_file_stats(rel):
                coords_or_none = meta.decode_key(file_rel[len(prefix) :], counts)
                if coords_or_none is not None:
                    present.add(coords_or_none)
                    pins[file_rel] = st
        per_row: dict[int, int] = {}
        for coords in present:
            first = coords[0] if coords else 0
            per_row[first] = per_row.get(first, 0) + 1
        complete_rows = frozenset(r for r, n in per_row.items() if n == inner_total)
        missing = expected - len(present)
        examples: list[str] = []
        if missing:
            # The first missing keys in grid order: at most len(present) + a few steps.
            for coords in grid_coords(counts):
                if coords not in present:
                    examples.append(meta.encode_key(coords))
                    if len(examples) >= MAX_LISTED_CHUNKS:
                        break
        status = ChunkStatus(
            shard_id=shard_id,
            block=name,
            path=self.access.describe(rel),
            expected_chunks=expected,
            initialized_chunks=expected - missing,
            missing_chunks=missing,
            missing_examples=tuple(examples),
        )
        return status, complete_rows, int(grid[0]) if grid else 1, pins

    def _rows_complete(self, block: ZarrBlock, start: int, stop: int) -> bool:
        if start >= stop or block.status.complete:
            return True
        first, last = start // block.row_chunk, (stop - 1) // block.row_chunk
        return all(r in block.complete_rows for r in range(first, last + 1))

    def zarr_array(self, shard_id: str, name: str) -> Any:
        """The read-only ``zarr.Array`` of a block, verified against the manifest."""
        return self._zarr_handle(self._open_zarr(shard_id, name))

    def chunk_rows(self, shard_id: str, name: str) -> int:
        """Rows per storage key of a zarr block (the shard shape's rows under sharding)."""
        return max(1, self._open_zarr(shard_id, name).row_chunk)

    def chunk_status(self, shard_id: str, name: str) -> ChunkStatus:
        """Expected vs initialized chunk files of one zarr block."""
        return self._open_zarr(shard_id, name).status

    def _raise_missing(self, block: ZarrBlock, start: int, stop: int) -> None:
        status = block.status
        examples = ", ".join(status.missing_examples) or "?"
        raise MissingChunksError(
            f"rows {start}:{stop} of block {status.block!r} touch missing chunk files "
            f"({status.missing_chunks} of {status.expected_chunks} missing, e.g. {examples}); "
            "zarr would return fill values",
            path=status.path,
            expected=f"all {status.expected_chunks} chunk files",
        )

    def read_rows(self, shard_id: str, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a zarr block as a numpy array (a fresh, writable copy)."""
        block = self._open_zarr(shard_id, name)
        num_rows = block.spec.num_rows
        if not 0 <= start <= stop <= num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: rows {start}:{stop} outside 0:{num_rows}"
            )
        if not self._rows_complete(block, start, stop):
            self._raise_missing(block, start, stop)
        if block.raw_dtype is not None:
            return self._read_rows_raw(block, start, stop)
        if start < stop:
            # zarr opens chunk files itself: refuse directories and special files first (a
            # FIFO would block the open, a device has size 0 and endless bytes).
            expected = self._raw_chunk_bytes(block)
            rc = block.row_chunk
            for r in range(start // rc, (stop - 1) // rc + 1):
                for inner in self._inner_coords(block.meta):
                    rel = f"{block.path}/{block.meta.encode_key((r, *inner))}"
                    try:
                        self._check_chunk_file(rel, expected, block, (start, stop))
                    except FileNotFoundError:
                        self._raise_missing(block, start, stop)
        try:
            data = self._zarr_handle(block)[start:stop]
        except (MissingChunksError, StoreReplacedError):
            raise  # a chunk vanished or changed after the listing: not a decoding problem
        except Exception as exc:
            raise CorruptChunkError(
                f"cannot decode rows {start}:{stop} ({type(exc).__name__}: {exc})",
                path=self.access.describe(block.path),
                expected=f"chunks of dtype {block.spec.dtype} with the array's codecs",
            ) from exc
        return np.asarray(data)

    def _read_rows_raw(self, block: ZarrBlock, start: int, stop: int) -> np.ndarray:
        assert block.raw_dtype is not None
        row_shape = block.spec.row_shape
        out = np.empty((stop - start, *row_shape), dtype=block.raw_dtype)
        row_bytes = math.prod(row_shape) * block.raw_dtype.itemsize
        chunk_bytes = block.row_chunk * row_bytes
        flat = memoryview(out.reshape(-1).view(np.uint8).data) if out.size else memoryview(b"")
        rest = (0,) * len(row_shape)
        row = start
        while row < stop:
            chunk = row // block.row_chunk
            chunk_start = chunk * block.row_chunk
            upto = min(stop, chunk_start + block.row_chunk)
            rel = f"{block.path}/{block.meta.encode_key((chunk, *rest))}"
            try:
                pin = self._check_chunk_file(rel, chunk_bytes, block, (start, stop))
            except FileNotFoundError:
                self._raise_missing(block, start, stop)
            want = (upto - row) * row_bytes
            target = flat[(row - start) * row_bytes : (row - start) * row_bytes + want]
            try:
                got = self.access.read_pinned_into(
                    rel, pin, (row - chunk_start) * row_bytes, target
                )
            except (FileNotFoundError, NotADirectoryError):
                raise self._vanished(block, rel, (start, stop)) from None
            except OSError as exc:
                raise self._unreadable_chunk(rel, exc) from exc
            if got != want:
                raise CorruptChunkError(
                    f"short read of rows {row}:{upto} ({got} of {want} bytes)",
                    path=self.access.describe(rel),
                    expected=f"{chunk_bytes} bytes",
                )
            row = upto
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def _unreadable_chunk(self, rel: str, exc: OSError) -> CorruptChunkError:
        return CorruptChunkError(
            f"cannot read chunk file ({type(exc).__name__}: {exc.strerror or exc})",
            path=self.access.describe(rel),
            expected="a readable regular file",
        )

    def _vanished(self, block: ZarrBlock, rel: str, rows: tuple[int, int]) -> MissingChunksError:
        return MissingChunksError(
            f"rows {rows[0]}:{rows[1]} of block {block.spec.name!r}: chunk file vanished after "
            "the block was listed",
            path=self.access.describe(rel),
            expected="the chunk files the listing saw (a published store does not change)",
        )

    @staticmethod
    def _raw_chunk_bytes(block: ZarrBlock) -> int | None:
        """Bytes of every chunk file of an uncompressed layout (``None``: encoded chunks)."""
        stored = block.meta.stored_dtype
        return None if stored is None else math.prod(block.meta.chunk_shape) * stored.itemsize

    def _check_chunk_sizes(self, block: ZarrBlock) -> None:
        """The size rule every read applies, over every listed chunk; raises the first breach.

        :meth:`validate` and :meth:`integrity_problems` use it, so they report exactly the
        uncompressed chunks that :meth:`read_rows`, :meth:`read_window` and the statistics
        refuse. Decided from the block's listing: no chunk file is opened.
        """
        size = self._raw_chunk_bytes(block)
        if size is None:
            return
        bad = [rel for rel, st in block.pins.items() if st.is_dir or st.size != size]
        if not bad:
            return
        meta = block.meta
        counts = [-(-n // c) for n, c in zip(meta.shape, meta.chunk_shape, strict=True)]
        prefix = f"{block.path}/"

        def grid_order(rel: str) -> tuple[int, ...]:
            return meta.decode_key(rel[len(prefix) :], counts) or ()

        rel = min(bad, key=grid_order)
        first = grid_order(rel)[0] if grid_order(rel) else 0
        rows = (first * block.row_chunk, min((first + 1) * block.row_chunk, block.spec.num_rows))
        self._check_chunk_file(rel, size, block, rows)

    def _check_chunk_file(
        self, rel: str, size: int | None, block: ZarrBlock, rows: tuple[int, int]
    ) -> FileStat:
        """The listed stat of a chunk; refuse one that is not exactly ``size`` bytes (raw layouts).

        Decided from the block's listing alone, before anything is opened: a device
        (``/dev/zero``) or FIFO has size 0, never a raw chunk's size. The read that follows
        is pinned to this stat, so a file that changed since is caught there; encoded
        chunks (``size`` None) are opened by zarr through the access layer's store, which
        refuses FIFOs and devices by name without blocking. A chunk the listing lacks is
        ``FileNotFoundError`` (the caller knows it from the chunk status).
        """
        st = block.pins.get(rel)
        if st is None:
            raise FileNotFoundError(
                errno.ENOENT, "not in the block's chunk listing", self.access.describe(rel)
            )
        if st.is_dir:
            raise CorruptChunkError(
                f"cannot decode rows {rows[0]}:{rows[1]}: chunk is a directory",
                path=self.access.describe(rel),
                expected="a regular chunk file",
            )
        if size is not None and st.size != size:
            raise CorruptChunkError(
                f"cannot decode rows {rows[0]}:{rows[1]}: chunk file has {st.size} bytes",
                path=self.access.describe(rel),
                expected=f"{size} bytes (raw {block.spec.dtype}, chunk shape "
                f"{list(block.meta.chunk_shape)})",
            )
        return st

    def read_window(self, shard_id: str, name: str, start: int, stop: int) -> RowWindow:
        """Rows ``start:stop`` of a zarr block with a per-row readable mask; never raises for damage.

        Every chunk is checked the way :meth:`read_rows` checks it (a regular file, exactly
        the size its raw layout implies); rows in missing or refused chunks are marked
        unreadable and their values are never filled in. Uncompressed chunks are read whole
        and viewed without a copy when the window lies in one chunk; encoded ones are
        decoded by zarr one row chunk at a time. Raises only for a block that cannot be
        opened at all (listed by :meth:`integrity_problems`) or a range outside the block.
        """
        block = self._open_zarr(shard_id, name)
        num_rows = block.spec.num_rows
        if not 0 <= start <= stop <= num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: rows {start}:{stop} outside 0:{num_rows}"
            )
        readable = np.zeros(stop - start, dtype=bool)
        problems: list[VinOfflineStoreError] = []
        if start == stop:
            return RowWindow(start, stop, None, readable)
        meta = block.meta
        rc = block.row_chunk
        if meta.metadata is None and meta.stored_dtype is not None:
            return self._read_window_plain(block, start, stop)
        out: np.ndarray | None = None
        for r in range(start // rc, (stop - 1) // rc + 1):
            a, b = max(start, r * rc), min(stop, (r + 1) * rc)
            if r not in block.complete_rows and not block.status.complete:
                continue
            try:
                part = self.read_rows(shard_id, name, a, b)  # checks every chunk file first
            except (CorruptChunkError, MissingChunksError) as exc:
                problems.append(exc)
                continue
            if out is None:
                out = np.zeros((stop - start, *part.shape[1:]), dtype=part.dtype)
            out[a - start : b - start] = part
            readable[a - start : b - start] = True
        return RowWindow(start, stop, out, readable, tuple(problems))

    @staticmethod
    def _inner_coords(meta: ArrayLayout) -> Iterator[tuple[int, ...]]:
        counts = [-(-n // c) for n, c in zip(meta.shape[1:], meta.chunk_shape[1:], strict=True)]
        return itertools.product(*(range(n) for n in counts))

    def _read_window_plain(self, block: ZarrBlock, start: int, stop: int) -> RowWindow:
        meta = block.meta
        assert meta.stored_dtype is not None
        stored = meta.stored_dtype
        shape = meta.shape
        rc = block.row_chunk
        chunk_bytes = math.prod(meta.chunk_shape) * stored.itemsize
        inner_counts = [-(-n // c) for n, c in zip(shape[1:], meta.chunk_shape[1:], strict=True)]
        single_inner = all(n == 1 for n in inner_counts)
        readable = np.zeros(stop - start, dtype=bool)
        problems: list[VinOfflineStoreError] = []
        out: np.ndarray | None = None
        for r in range(start // rc, (stop - 1) // rc + 1):
            r0 = r * rc
            a, b = max(start, r0), min(stop, r0 + rc)
            if r not in block.complete_rows and not block.status.complete:
                continue  # listed once as MissingChunksError by the chunk status
            ok = True
            for inner in itertools.product(*(range(n) for n in inner_counts)):
                rel = f"{block.path}/{meta.encode_key((r, *inner))}"
                try:
                    pin = self._check_chunk_file(rel, chunk_bytes, block, (a, b))
                    data = self.access.read_pinned(rel, pin, 0, chunk_bytes)
                except (FileNotFoundError, NotADirectoryError):
                    # Present when the block was listed (complete row chunk), gone now.
                    problems.append(self._vanished(block, rel, (a, b)))
                    ok = False
                    break
                except CorruptChunkError as exc:
                    problems.append(exc)
                    ok = False
                    break
                except OSError as exc:
                    problems.append(self._unreadable_chunk(rel, exc))
                    ok = False
                    break
                if len(data) != chunk_bytes:
                    problems.append(
                        CorruptChunkError(
                            f"short read: {len(data)} of {chunk_bytes} bytes",
                            path=self.access.describe(rel),
                            expected=f"{chunk_bytes} bytes",
                        )
                    )
                    ok = False
                    break
                chunk = np.frombuffer(data, dtype=stored).reshape(meta.chunk_shape)
                if not stored.isnative:
                    chunk = chunk.astype(stored.newbyteorder("="))
                if single_inner and start // rc == (stop - 1) // rc:
                    # The whole window in one chunk: a zero-copy view of its bytes.
                    readable[:] = True
                    return RowWindow(start, stop, chunk[a - r0 : b - r0], readable)
                if out is None:
                    out = np.zeros((stop - start, *shape[1:]), dtype=meta.dtype)
                spans = [
                    (i * c, min((i + 1) * c, n))
                    for i, c, n in zip(inner, meta.chunk_shape[1:], shape[1:], strict=True)
                ]
                target = (slice(a - start, b - start), *(slice(lo, hi) for lo, hi in spans))
                source = (slice(a - r0, b - r0), *(slice(0, hi - lo) for lo, hi in spans))
                out[target] = chunk[source]
            if ok:
                readable[a - start : b - start] = True
            elif out is not None:
                out[a - start : b - start] = 0  # never leave a partly read row chunk as data
        return RowWindow(start, stop, out if readable.any() else None, readable, tuple(problems))

    def read_row(self, shard_id: str, name: str, row: int) -> np.ndarray:
        """One row of a zarr block; decodes the row's whole chunk once and serves neighbours from it."""
        block = self._open_zarr(shard_id, name)
        key = (shard_id, name)
        cached = self._row_cache.get(key)
        if cached is not None and cached[0] <= row < cached[1]:
            return np.array(cached[2][row - cached[0]])
        if not 0 <= row < block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.path)}: row {row} outside 0:{block.spec.num_rows}"
            )
        start = (row // block.row_chunk) * block.row_chunk
        stop = min(start + block.row_chunk, block.spec.num_rows)
        data = self.read_rows(shard_id, name, start, stop)
        self._row_cache[key] = (start, stop, data)
        return np.array(data[row - start])

    def iter_row_batches(
        self, shard_id: str, name: str, *, max_bytes: int = DEFAULT_BATCH_BYTES
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, rows)`` batches covering a zarr block, chunk-aligned and memory-bounded."""
        block = self._open_zarr(shard_id, name)
        row_bytes = max(1, math.prod(block.spec.row_shape) * np.dtype(block.spec.dtype).itemsize)
        per_batch = max(1, max_bytes // (row_bytes * block.row_chunk)) * block.row_chunk
        for start in range(0, block.spec.num_rows, per_batch):
            stop = min(start + per_batch, block.spec.num_rows)
            yield start, self.read_rows(shard_id, name, start, stop)
