"""Store statistics' partial of one shard: its selected rows through every accumulator.

The rows are read through :class:`~vinlens.store.diagnostics.shard_reads.ShardReads`, the
scanning core store compare shares; this module decides what each window feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vinlens.store.diagnostics.accumulators import (
    BackboneWindow,
    LabelWindow,
    MemoryWindow,
    StatsPartial,
    VinPointWindow,
)
from vinlens.store.diagnostics.shard_reads import ShardReads, row_bytes
from vinlens.store.format import BACKBONE_PREFIX, RRI_COMPONENT_PREFIX
from vinlens.store.reader import VinOfflineStoreReader

__all__ = ["ShardPlan", "scan_shard"]

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


class _ShardScan(ShardReads):
    def __init__(self, reader: VinOfflineStoreReader, plan: ShardPlan) -> None:
        self.plan = plan
        self.partial = StatsPartial.empty(plan.labels, plan.summary_rows)
        self.partial.shard_ids.append(plan.shard_id)
        super().__init__(reader, plan.shard_id, plan.rows, self.partial.integrity)

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
        index_array = np.asarray(plan.sample_indices, dtype=np.int64)
        for i, j, data, readable in self.windows(names):
            window = LabelWindow(
                plan.shard_id, index_array[i:j], data, readable, components, plan.num_candidates
            )
            if plan.labels:
                self.partial.labels.update(window)
            self.partial.poses.update(window)

    def backbone(self) -> None:
        for spec in self.shard.blocks:
            if not spec.name.startswith(BACKBONE_PREFIX) or not self.usable(spec.name):
                continue
            name = spec.name[len(BACKBONE_PREFIX) :]
            for batch in self.batches(spec):
                self.partial.backbone.update(
                    BackboneWindow(
                        self.shard_id, spec.name, name, spec.row_shape, batch, len(batch)
                    )
                )

    def vin_points(self) -> None:
        plan = self.plan
        lengths: list[int] = []
        indices: list[int] = []
        nonfinite = 0
        if "vin_points" not in self.broken:
            sample_of_row = dict(zip(plan.rows, plan.sample_indices, strict=True))
            for row, points in self.vin_point_records():
                lengths.append(int(points.shape[0]))
                indices.append(sample_of_row[row])
                nonfinite += int(points.size - np.count_nonzero(np.isfinite(points)))
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
