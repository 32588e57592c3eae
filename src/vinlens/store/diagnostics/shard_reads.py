"""The scanning core that store statistics and store compare share: one shard's selected rows.

Every zarr read goes through :meth:`VinOfflineStoreReader.read_window`, which applies the
reader's chunk checks and says which rows were readable: a refused chunk is listed as a
problem and its rows feed no number. :class:`ShardReads` yields the selected rows of a
shard window by window (per-candidate blocks together, backbone fields chunk by chunk,
``vin_points`` records in contiguous runs); what each scan counts is its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np

from vinlens.store.diagnostics.integrity import IntegrityStats
from vinlens.store.errors import StoreReplacedError, VinOfflineStoreError
from vinlens.store.format import BlockKind, SampleIndexRow, StoreBlockSpec
from vinlens.store.reader import StoreIntegrityProblem, VinOfflineStoreReader

__all__ = [
    "WINDOW_BYTES",
    "RowWindow",
    "ShardReads",
    "consecutive_groups",
    "contiguous_runs",
    "row_bytes",
    "row_windows",
    "selected_by_shard",
    "shard_problem",
]

T = TypeVar("T")

#: Windows of several blocks hold about this many bytes of those blocks together.
WINDOW_BYTES = 8 << 20

#: ``(i, j, data, readable)``: the selected rows ``rows[i:j]``, each block's values at
#: those rows and where they were readable (a block whose read was refused is absent).
RowWindow = tuple[int, int, dict[str, np.ndarray], dict[str, np.ndarray]]


def shard_problem(
    shard_id: str, block: str | None, exc: VinOfflineStoreError
) -> StoreIntegrityProblem:
    """``exc``, met reading ``block`` of ``shard_id``, as a listed integrity problem."""
    return StoreIntegrityProblem(type(exc).__name__, shard_id, block, exc.path, str(exc))


def row_bytes(spec: StoreBlockSpec) -> int:
    if spec.dtype is None:
        return 0
    return math.prod(spec.row_shape) * np.dtype(spec.dtype).itemsize


def row_windows(
    rows: Sequence[int], row_chunk: int, row_size: int, max_bytes: int = WINDOW_BYTES
) -> Iterator[tuple[int, int, int, int]]:
    """``(start, stop, i, j)``: windows of whole row chunks (~``max_bytes``) over sorted ``rows``.

    ``rows[i:j]`` are the rows inside ``start:stop``.
    """
    per_window = max(1, max_bytes // max(1, row_size * row_chunk)) * row_chunk
    i = 0
    while i < len(rows):
        window = rows[i] // per_window
        j = i
        while j < len(rows) and rows[j] // per_window == window:
            j += 1
        yield rows[i], rows[j - 1] + 1, i, j
        i = j


def contiguous_runs(rows: Sequence[int]) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each run of consecutive values in sorted ``rows``."""
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and rows[j] == rows[j - 1] + 1:
            j += 1
        yield rows[i], rows[j - 1] + 1
        i = j


def consecutive_groups(
    items: Sequence[T], weights: Sequence[int], count: int, max_items: int | None = None
) -> list[tuple[T, ...]]:
    """``items`` cut into about ``count`` runs of consecutive items with equal shares of ``weights``.

    A run also ends at ``max_items`` items. Cutting at equal shares rather than when a run
    reaches a budget keeps the last run as long as the others: a short last task leaves
    a worker idle for most of a task's time at the end of a scan.
    """
    total = sum(weights)
    groups: list[tuple[T, ...]] = []
    current: list[T] = []
    done = 0
    for item, weight in zip(items, weights, strict=True):
        current.append(item)
        done += weight
        if (total and done * count >= total * (len(groups) + 1)) or (
            max_items is not None and len(current) >= max_items
        ):
            groups.append(tuple(current))
            current = []
    if current:
        groups.append(tuple(current))
    return groups


def selected_by_shard(
    samples: Sequence[SampleIndexRow], selected: Sequence[int]
) -> dict[str, list[int]]:
    """The sample indices ``selected`` grouped by shard id, each shard's in row order."""
    by_shard: dict[str, list[int]] = {}
    for index in selected:
        by_shard.setdefault(samples[index].shard_id, []).append(index)
    for indices in by_shard.values():
        indices.sort(key=lambda i: samples[i].row)
    return by_shard


class ShardReads:
    """One shard's selected ``rows`` (sorted), read under the integrity rule every scan shares.

    The shard's listed integrity problems go into ``integrity`` once. A missing chunk or
    a chunk of the wrong size is refused read by read (the block stays usable and the
    check's problem is that block's one listed refusal); any other problem makes its
    block unusable.
    """

    def __init__(
        self,
        reader: VinOfflineStoreReader,
        shard_id: str,
        rows: Sequence[int],
        integrity: IntegrityStats,
    ) -> None:
        self.reader = reader
        self.shard_id = shard_id
        self.shard = reader.shard(shard_id)
        self.rows = rows
        self.rows_array = np.asarray(rows, dtype=np.int64)
        self.integrity = integrity
        problems = reader.integrity_problems([shard_id])
        chunk_level = ("MissingChunksError", "CorruptChunkError")
        for problem in problems:
            if problem.kind == "CorruptChunkError" and problem.block is not None:
                integrity.refused(shard_id, problem.block, problem)
        integrity.update(tuple(p for p in problems if p.kind != "CorruptChunkError"))
        self.broken = {p.block for p in problems if p.kind not in chunk_level}

    def usable(self, name: str) -> bool:
        spec = self.shard.block(name)
        return spec is not None and spec.kind is BlockKind.ZARR_ARRAY and name not in self.broken

    def read(self, name: str, start: int, stop: int) -> tuple[np.ndarray | None, np.ndarray]:
        window = self.reader.read_window(self.shard_id, name, start, stop)
        for exc in window.problems:
            self.integrity.refused(self.shard_id, name, shard_problem(self.shard_id, name, exc))
        return window.values, window.readable

    def windows(self, names: Sequence[str]) -> Iterator[RowWindow]:
        """The usable zarr blocks ``names`` at the selected rows, read together.

        Windows are aligned to the largest row chunk of the blocks, so each chunk is
        decoded once and the blocks of a row are joined in memory.
        """
        chunk = max(self.reader.chunk_rows(self.shard_id, n) for n in names)
        size = sum(row_bytes(spec) for n in names if (spec := self.shard.block(n)) is not None)
        for start, stop, i, j in row_windows(self.rows, chunk, size):
            local = self.rows_array[i:j] - start
            data: dict[str, np.ndarray] = {}
            readable: dict[str, np.ndarray] = {}
            for name in names:
                values, ok = self.read(name, start, stop)
                if values is not None:
                    data[name] = values[local]
                    readable[name] = ok[local]
            yield i, j, data, readable

    def batches(self, spec: StoreBlockSpec) -> Iterator[np.ndarray]:
        """The readable selected rows of the usable zarr block ``spec``, one row chunk a read.

        One row chunk per read keeps raw chunks zero-copy views; a chunk whose rows are
        all selected and readable (full scans) is yielded without a gather copy.
        """
        chunk = self.reader.chunk_rows(self.shard_id, spec.name)
        for start, stop, i, j in row_windows(self.rows, chunk, row_bytes(spec), 0):
            values, readable = self.read(spec.name, start, stop)
            if values is None:
                continue
            local = self.rows_array[i:j] - start
            take = local[readable[local]]
            yield values if take.size == stop - start else values[take]

    def vin_point_records(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(row, points)`` of every selected row whose ``vin_points`` record decodes.

        Runs of consecutive rows stream in bounded byte batches. A record that breaks a
        run is read alone; when it fails again it is listed as unreadable and the run goes
        on, so every readable record is kept. A store replaced under the scan is never one
        row's damage: :class:`StoreReplacedError` propagates.
        """
        for start, stop in contiguous_runs(self.rows):
            row = start
            while row < stop:
                try:
                    for r, points in self.reader.iter_vin_points(self.shard_id, row, stop):
                        yield r, points
                        row = r + 1
                except StoreReplacedError:
                    raise
                except VinOfflineStoreError:
                    try:
                        points = self.reader.read_vin_points(self.shard_id, row)
                    except StoreReplacedError:
                        raise
                    except VinOfflineStoreError as exc:
                        self.integrity.unreadable_record(
                            self.shard_id, shard_problem(self.shard_id, "vin_points", exc)
                        )
                    else:
                        yield row, points
                    row += 1
