"""The partial of one shard: its selected rows read window by window into the accumulators.

Every zarr read goes through :meth:`VinOfflineStoreReader.read_window`, which applies the
reader's chunk checks and says which rows were readable: a refused chunk is listed as a
problem and its rows feed no number.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from vinlens.store.diagnostics.accumulators import (
    BackboneWindow,
    IntegrityStats,
    LabelWindow,
    MemoryWindow,
    StatsPartial,
    VinPointWindow,
)
from vinlens.store.errors import StoreReplacedError, VinOfflineStoreError
from vinlens.store.format import BACKBONE_PREFIX, RRI_COMPONENT_PREFIX, BlockKind, StoreBlockSpec
from vinlens.store.reader import StoreIntegrityProblem, VinOfflineStoreReader

__all__ = ["ShardPlan", "scan_shard"]

# Label windows hold about this many bytes of all label blocks together.
_BATCH_BYTES = 8 << 20
_ORACLE_BLOCKS = ("candidate_valid", "rri", "candidate_ids")
_LABEL_BLOCKS = (*_ORACLE_BLOCKS, "candidate_poses")


@dataclass(frozen=True)
class ShardPlan:
    """What to scan in one shard: its selected rows (sorted) and their sample indices."""

    shard_id: str
    rows: tuple[int, ...]
    sample_indices: tuple[int, ...]
    summary_rows: frozenset[int]  # sample indices that get a per-row summary
    labels: bool
    num_candidates: int


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
    rows: Sequence[int], row_chunk: int, row_size: int, max_bytes: int = _BATCH_BYTES
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


class ShardReads:
    """One shard's windowed reads under the integrity rule every shard scan shares.

    The shard's listed integrity problems go into ``integrity`` once. A missing chunk or
    a chunk of the wrong size is refused read by read (the block stays usable and the
    check's problem is that block's one listed refusal); any other problem makes its
    block unusable. Store statistics and store compare both scan through this.
    """

    def __init__(
        self, reader: VinOfflineStoreReader, shard_id: str, integrity: IntegrityStats
    ) -> None:
        self.reader = reader
        self.shard_id = shard_id
        self.shard = reader.shard(shard_id)
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


class _ShardScan(ShardReads):
    def __init__(self, reader: VinOfflineStoreReader, plan: ShardPlan) -> None:
        self.plan = plan
        self.partial = StatsPartial.empty(plan.labels, plan.summary_rows)
        self.partial.shard_ids.append(plan.shard_id)
        super().__init__(reader, plan.shard_id, self.partial.integrity)
        sample_of_row: dict[int, int] = dict(zip(plan.rows, plan.sample_indices, strict=True))
        self.sample_of_row = sample_of_row

    def run(self) -> StatsPartial:
        plan = self.plan
        self.partial.rows_scanned = len(plan.rows)
        if not plan.rows or None in self.broken:
            return self.partial  # nothing selected, or the shard directory is unusable
        self.labels()
        self.backbone()
        self.vin_points()
        return self.partial

    def labels(self) -> None:
        plan = self.plan
        shard = self.shard
        components = [
            n[len(RRI_COMPONENT_PREFIX) :]
            for n in shard.block_names
            if n.startswith(RRI_COMPONENT_PREFIX)
        ]
        names = [n for n in _LABEL_BLOCKS if self.usable(n)]
        names += [
            f"{RRI_COMPONENT_PREFIX}{c}"
            for c in components
            if self.usable(f"{RRI_COMPONENT_PREFIX}{c}")
        ]
        if plan.labels and shard.block("candidate_ids") is None:
            samples = self.reader.samples
            self.partial.labels.update_unpaired(
                [samples[i].sample_key for i in plan.sample_indices]
            )
        if not names:
            return
        window_chunk = max(self.reader.chunk_rows(plan.shard_id, n) for n in names)
        size = sum(row_bytes(spec) for n in names if (spec := shard.block(n)) is not None)
        rows_array = np.asarray(plan.rows, dtype=np.int64)
        index_array = np.asarray(plan.sample_indices, dtype=np.int64)
        for start, stop, i, j in row_windows(plan.rows, window_chunk, size):
            local = rows_array[i:j] - start
            data: dict[str, np.ndarray] = {}
            readable: dict[str, np.ndarray] = {}
            for name in names:
                values, ok = self.read(name, start, stop)
                if values is not None:
                    data[name] = values[local]
                    readable[name] = ok[local]
            window = LabelWindow(
                plan.shard_id, index_array[i:j], data, readable, components, plan.num_candidates
            )
            if plan.labels:
                self.partial.labels.update(window)
            self.partial.poses.update(window)

    def backbone(self) -> None:
        plan = self.plan
        rows_array = np.asarray(plan.rows, dtype=np.int64)
        for spec in self.shard.blocks:
            if not spec.name.startswith(BACKBONE_PREFIX) or not self.usable(spec.name):
                continue
            name = spec.name[len(BACKBONE_PREFIX) :]
            chunk = self.reader.chunk_rows(plan.shard_id, spec.name)
            # One row chunk per read: raw chunks arrive as zero-copy views.
            for start, stop, i, j in row_windows(plan.rows, chunk, row_bytes(spec), 0):
                values, readable = self.read(spec.name, start, stop)
                if values is None:
                    continue
                local = rows_array[i:j] - start
                take = local[readable[local]]
                # Every row of the window selected (full scans): no gather copy.
                batch = values if take.size == stop - start else values[take]
                self.partial.backbone.update(
                    BackboneWindow(
                        plan.shard_id, spec.name, name, spec.row_shape, batch, int(take.size)
                    )
                )

    def vin_points(self) -> None:
        plan = self.plan
        lengths: list[int] = []
        indices: list[int] = []
        nonfinite = 0
        if "vin_points" not in self.broken:

            def take(row: int, points: np.ndarray) -> None:
                nonlocal nonfinite
                lengths.append(int(points.shape[0]))
                indices.append(self.sample_of_row[row])
                nonfinite += int(points.size - np.count_nonzero(np.isfinite(points)))

            for start, stop in contiguous_runs(plan.rows):
                row = start
                while row < stop:
                    try:
                        # Streams the run in bounded byte batches.
                        for r, points in self.reader.iter_vin_points(plan.shard_id, row, stop):
                            take(r, points)
                            row = r + 1
                    except StoreReplacedError:
                        raise  # the file changed under the scan: never one row's damage
                    except VinOfflineStoreError:
                        # Isolate the bad record, keep every readable one.
                        try:
                            take(row, self.reader.read_vin_points(plan.shard_id, row))
                        except StoreReplacedError:
                            raise
                        except VinOfflineStoreError as exc:
                            self.partial.integrity.unreadable_record(
                                plan.shard_id, shard_problem(plan.shard_id, "vin_points", exc)
                            )
                        row += 1
        self.partial.vin_points.update(
            VinPointWindow(
                plan.shard_id,
                np.asarray(indices, dtype=np.int64),
                np.asarray(lengths, dtype=np.int64),
                nonfinite,
            )
        )
        self.memory([n * 12 for n in lengths])

    def memory(self, vin_bytes: list[int]) -> None:
        shard = self.shard
        oracle = sum(
            row_bytes(spec)
            for spec in shard.blocks
            if spec.name in _ORACLE_BLOCKS or spec.name.startswith(RRI_COMPONENT_PREFIX)
        )
        poses_spec = shard.block("candidate_poses")
        backbone = sum(
            row_bytes(spec) for spec in shard.blocks if spec.name.startswith(BACKBONE_PREFIX)
        )
        self.partial.memory.update(
            MemoryWindow(
                oracle_bytes=oracle,
                pose_bytes=row_bytes(poses_spec) if poses_spec is not None else 0,
                backbone_bytes=backbone,
                rows=len(self.plan.rows),
                vin_bytes=vin_bytes,
            )
        )


def scan_shard(reader: VinOfflineStoreReader, plan: ShardPlan) -> StatsPartial:
    """The partial of one shard: its selected rows through every accumulator."""
    return _ShardScan(reader, plan).run()
