"""Small accumulators, one per kind of statistic, each with ``update``, ``merge`` and ``finish``.

``update(window)`` takes one window of rows read from one shard; ``merge(other)`` folds
another accumulator of the same kind into this one and returns it, never changing
``other`` (the one rule of :mod:`vinlens.operations`), and is associative, exactly,
so a store's result does not depend on how its shards were grouped; ``finish()`` returns
the record fields. State is bounded by the histogram, reservoir and listing limits, never
by the number of rows, so the accumulators after one shard are that shard's *partial*:
small and picklable.

The label and pose accumulators are in :mod:`.labels`, the integrity one in
:mod:`.integrity` (store compare keeps one too); all are importable from here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vinlens.store.diagnostics.integrity import IntegrityStats
from vinlens.store.diagnostics.kernels import Moments, Summary, weighted_percentile
from vinlens.store.diagnostics.labels import LabelStats, LabelWindow, PoseStats
from vinlens.store.diagnostics.records import (
    VinOfflineMemoryDiagnostic,
)
from vinlens.store.diagnostics.sampling import Reservoir
from vinlens.store.diagnostics.series import merge_dict, reservoir_column

__all__ = [
    "BackboneStats",
    "BackboneWindow",
    "IntegrityStats",
    "LabelStats",
    "LabelWindow",
    "MemoryStats",
    "MemoryWindow",
    "PoseStats",
    "StatsPartial",
    "VinPointStats",
    "VinPointWindow",
]

_MIB = float(1 << 20)
#: Components of ``memory_diagnostics``, in record order.
MEMORY_COMPONENTS = ("vin_points", "oracle_rri", "candidate_poses", "backbone", "total")


# --------------------------------------------------------------------------------------
# Backbone moments
# --------------------------------------------------------------------------------------


@dataclass
class BackboneWindow:
    """Readable selected rows of one backbone field in one window."""

    shard_id: str
    block: str  # the stored block name (``backbone.<field>``)
    field: str
    row_shape: tuple[int, ...]
    values: np.ndarray
    rows: int


class BackboneStats:
    """Exact moments per backbone field (see :class:`~.kernels.Moments`)."""

    def __init__(self) -> None:
        self.moments: dict[str, Moments] = {}
        self.rows: Counter[str] = Counter()
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.nonfinite: Counter[tuple[str, str]] = Counter()

    def update(self, window: BackboneWindow) -> None:
        self.shapes.setdefault(window.field, window.row_shape)
        moments = self.moments.setdefault(window.field, Moments())
        bad = moments.update(window.values)
        if bad:
            self.nonfinite[(window.shard_id, window.block)] += bad
        self.rows[window.field] += window.rows

    def merge(self, other: BackboneStats) -> BackboneStats:
        merge_dict(self.moments, other.moments)
        self.rows.update(other.rows)
        for name, shape in other.shapes.items():
            self.shapes.setdefault(name, shape)
        self.nonfinite.update(other.nonfinite)
        return self

    def finish(self) -> list[tuple[str, tuple[int, ...], int, tuple[Any, ...], tuple[Any, ...]]]:
        """Per field, by name: ``(field, row shape, sampled rows, moments, (min, max))``.

        ``moments`` is ``(count, mean, std, abs_mean, nz_frac)``.
        """
        return [
            (
                name,
                self.shapes[name],
                self.rows[name],
                self.moments[name].finish(),
                self.moments[name].extremes(),
            )
            for name in sorted(self.moments)
        ]


# --------------------------------------------------------------------------------------
# VIN points
# --------------------------------------------------------------------------------------


@dataclass
class VinPointWindow:
    shard_id: str
    sample_index: np.ndarray  # int64
    lengths: np.ndarray  # int64 point counts
    nonfinite: int


class VinPointStats:
    """Point counts per scanned snippet."""

    def __init__(self, summary_rows: frozenset[int] = frozenset()) -> None:
        self.summary_rows = summary_rows
        self.summary = Summary()
        self.values = Reservoir(1, salt=3)
        self.row_points: dict[int, int] = {}
        self.nonfinite: Counter[tuple[str, str]] = Counter()

    def update(self, window: VinPointWindow) -> None:
        if window.nonfinite:
            self.nonfinite[(window.shard_id, "vin_points")] += window.nonfinite
        if window.lengths.size == 0:
            return
        self.summary.update(window.lengths)
        self.values.update(window.sample_index, window.lengths)
        for si, n in zip(window.sample_index.tolist(), window.lengths.tolist(), strict=True):
            if si in self.summary_rows:
                self.row_points[si] = int(n)

    def merge(self, other: VinPointStats) -> VinPointStats:
        self.summary_rows = self.summary_rows | other.summary_rows
        self.summary.merge(other.summary)
        self.values.merge(other.values)
        self.row_points.update(other.row_points)
        self.nonfinite.update(other.nonfinite)
        return self

    def finish(self) -> dict[str, Any]:
        return {
            "vin_points": self.summary.finish(),
            "vin_point_values": [int(v) for v in reservoir_column(self.values)],
        }


# --------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------


@dataclass
class MemoryWindow:
    """Per-sample tensor bytes of the scanned rows of one shard."""

    oracle_bytes: int
    pose_bytes: int
    backbone_bytes: int
    rows: int
    vin_bytes: list[int] = field(default_factory=list)


class MemoryStats:
    """Counts of per-sample bytes per component: exact medians and percentiles at finish."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[int]] = {name: Counter() for name in MEMORY_COMPONENTS}

    def update(self, window: MemoryWindow) -> None:
        k = window.rows
        self.counts["vin_points"].update(window.vin_bytes)
        self.counts["oracle_rri"][window.oracle_bytes] += k
        self.counts["candidate_poses"][window.pose_bytes] += k
        self.counts["backbone"][window.backbone_bytes] += k
        fixed = window.oracle_bytes + window.pose_bytes + window.backbone_bytes
        self.counts["total"].update(fixed + b for b in window.vin_bytes)

    def merge(self, other: MemoryStats) -> MemoryStats:
        for name in MEMORY_COMPONENTS:
            self.counts[name].update(other.counts[name])
        return self

    def finish(self) -> list[VinOfflineMemoryDiagnostic]:
        out = []
        for name in MEMORY_COMPONENTS:
            counts = self.counts[name]
            if name not in ("vin_points", "total") and not any(v for v in counts):
                continue
            n = sum(counts.values())
            mean = sum(v * c for v, c in counts.items()) / n if n else 0.0
            out.append(
                VinOfflineMemoryDiagnostic(
                    component=name,
                    mean_mib=mean / _MIB,
                    median_mib=weighted_percentile(counts, 50.0) / _MIB,
                    p95_mib=weighted_percentile(counts, 95.0) / _MIB,
                )
            )
        return out


# --------------------------------------------------------------------------------------
# The partial: every accumulator after some shards
# --------------------------------------------------------------------------------------


@dataclass
class StatsPartial:
    """The accumulators' state after the shards in ``shard_ids`` (in manifest order).

    The partial of one shard is what a worker returns; :meth:`merge` folds the partial of
    the shards that follow (associative: any grouping of consecutive shards gives the
    same final partial, bit for bit).
    """

    shard_ids: list[str] = field(default_factory=list)
    rows_scanned: int = 0
    labels: LabelStats = field(default_factory=LabelStats)
    poses: PoseStats = field(default_factory=PoseStats)
    backbone: BackboneStats = field(default_factory=BackboneStats)
    vin_points: VinPointStats = field(default_factory=VinPointStats)
    memory: MemoryStats = field(default_factory=MemoryStats)
    integrity: IntegrityStats = field(default_factory=IntegrityStats)

    @classmethod
    def empty(cls, labels: bool, summary_rows: frozenset[int]) -> StatsPartial:
        return cls(
            labels=LabelStats(summary_rows),
            poses=PoseStats(labels),
            vin_points=VinPointStats(summary_rows),
        )

    def merge(self, other: StatsPartial) -> StatsPartial:
        self.shard_ids.extend(other.shard_ids)
        self.rows_scanned += other.rows_scanned
        self.labels.merge(other.labels)
        self.poses.merge(other.poses)
        self.backbone.merge(other.backbone)
        self.vin_points.merge(other.vin_points)
        self.memory.merge(other.memory)
        self.integrity.merge(other.integrity)
        return self

    def nonfinite(self) -> Counter[tuple[str, str]]:
        total: Counter[tuple[str, str]] = Counter()
        for part in (self.labels, self.poses, self.backbone, self.vin_points, self.integrity):
            total.update(part.nonfinite)
        return total
