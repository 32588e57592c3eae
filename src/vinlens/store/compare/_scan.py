"""Store compare's per-shard partials: each store's selected rows counted on the shared bins.

A task is plain data (which side, the store config, the pinned generation, the shard
plans), so it pickles to any ``concurrent.futures.Executor``; the worker opens the store
through the reader, checks that it sees the pinned generation, and returns the partial
of its shards. Every zarr read goes through
:meth:`~vinlens.store.reader.VinOfflineStoreReader.read_window`, so rows in missing or
refused chunks feed no number and are listed as problems, as in the store statistics.

Fields counted per scanned row (the names of :class:`~vinlens.store.compare.FieldDrift`):

* ``rri`` and ``rri_components.<name>``: values of valid candidates that are finite
  (the spec's RRI values); infinite ones are integrity problems;
* ``candidate_poses``: the 7 pose numbers of every valid candidate (of every candidate
  whose pose is not all zeros in a store without scene labels);
* ``backbone.<field>``: every value; a field whose row shape has two or more axes and
  whose first axis (camera or channel) has 2 to :data:`CAMERA_AXIS_MAX` entries also
  gets one row per entry, ``backbone.<field>[i]``;
* ``valid_candidate_count`` (``candidate_valid[row].sum()``, labelled stores) and
  ``vin_point_count`` (``n`` of the row's ``vin_points`` record).

``candidate_ids`` (identifiers) and ``candidate_valid`` (summarised by
``valid_candidate_count``) get no rows of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vinlens.store.compare._binning import FieldHistogram
from vinlens.store.diagnostics.integrity import IntegrityStats
from vinlens.store.diagnostics.sampling import select_vin_offline_sample_indices
from vinlens.store.diagnostics.shard_reads import (
    ShardReads,
    consecutive_groups,
    selected_by_shard,
)
from vinlens.store.errors import VinOfflineStoreReplacedError
from vinlens.store.format import BACKBONE_PREFIX, RRI_COMPONENT_PREFIX, VinOfflineStoreConfig
from vinlens.store.reader import StoreGeneration, VinOfflineStoreReader

__all__ = [
    "CAMERA_AXIS_MAX",
    "ComparePartial",
    "CompareShardPlan",
    "CompareTask",
    "SidePartial",
    "compare_plans",
    "compare_tasks",
    "run_compare_task",
    "scan_compare_shard",
]

#: Largest first backbone axis (cameras, channels) that gets one field row per entry.
CAMERA_AXIS_MAX = 8
VALID_CANDIDATE_COUNT = "valid_candidate_count"
VIN_POINT_COUNT = "vin_point_count"
# Tasks per worker and store on an executor: enough to balance, few enough that
# unpickling and merging partials stays small next to the scan.
_TASKS_PER_WORKER = 4


@dataclass(frozen=True)
class CompareShardPlan:
    """The selected rows (sorted) of one shard of one store."""

    shard_id: str
    rows: tuple[int, ...]
    labels: bool


@dataclass(frozen=True)
class CompareTask:
    """One executor task: plain, picklable data; the worker reopens the store itself."""

    side: str  # "a" or "b"
    config: VinOfflineStoreConfig
    generation: StoreGeneration
    plans: tuple[CompareShardPlan, ...]

    @property
    def rows(self) -> int:
        return sum(len(plan.rows) for plan in self.plans)


@dataclass
class SidePartial:
    """One store's field histograms and integrity after some shards (in manifest order)."""

    fields: dict[str, FieldHistogram] = field(default_factory=dict)
    integrity: IntegrityStats = field(default_factory=IntegrityStats)
    rows_scanned: int = 0

    def histogram(self, name: str, dtype: np.dtype[np.generic] | str) -> FieldHistogram:
        hist = self.fields.get(name)
        if hist is None:
            hist = self.fields[name] = FieldHistogram.for_dtype(dtype)
        return hist

    def merge(self, other: SidePartial) -> SidePartial:
        for name, hist in other.fields.items():
            mine = self.fields.get(name)
            if mine is None:
                mine = self.fields[name] = FieldHistogram(hist.kind, hist.dtype)
            mine.merge(hist)
        self.integrity.merge(other.integrity)
        self.rows_scanned += other.rows_scanned
        return self


@dataclass
class ComparePartial:
    """Both stores' partials; a task fills one side."""

    a: SidePartial = field(default_factory=SidePartial)
    b: SidePartial = field(default_factory=SidePartial)

    def side(self, side: str) -> SidePartial:
        return self.a if side == "a" else self.b

    def merge(self, other: ComparePartial) -> ComparePartial:
        self.a.merge(other.a)
        self.b.merge(other.b)
        return self


# --------------------------------------------------------------------------------------
# Plans and tasks
# --------------------------------------------------------------------------------------


def compare_plans(reader: VinOfflineStoreReader, max_samples: int | None) -> list[CompareShardPlan]:
    """One plan per manifest shard, with the rows the stats' selection rule picks."""
    samples = reader.samples
    selected = select_vin_offline_sample_indices(
        [(row.split, row.shard_id) for row in samples], max_samples
    )
    by_shard = selected_by_shard(samples, selected)
    labels = reader.manifest.capabilities.scene_labels
    return [
        CompareShardPlan(
            shard.shard_id, tuple(samples[i].row for i in by_shard.get(shard.shard_id, ())), labels
        )
        for shard in reader.manifest.shards
    ]


def compare_tasks(
    side: str,
    config: VinOfflineStoreConfig,
    generation: StoreGeneration,
    plans: Sequence[CompareShardPlan],
    workers: int,
) -> list[CompareTask]:
    """Consecutive shards cut into about ``_TASKS_PER_WORKER * workers`` tasks of equal rows."""
    # Shards with no selected rows weigh 1: they still get their integrity checks.
    weights = [max(1, len(plan.rows)) for plan in plans]
    count = max(1, min(len(plans), workers * _TASKS_PER_WORKER))
    groups = consecutive_groups(plans, weights, count)
    return [CompareTask(side, config, generation, group) for group in groups]


def replaced_error(
    store: str, generation: StoreGeneration, when: str
) -> VinOfflineStoreReplacedError:
    return VinOfflineStoreReplacedError(
        f"store was replaced or changed {when}",
        path=store,
        expected="the generation pinned when the compare started "
        f"(manifest sha256 {generation.manifest_sha256[:12]}...)",
    )


def run_compare_task(task: CompareTask) -> ComparePartial:
    """The partial of a task's shards (what an executor runs; see :class:`CompareTask`)."""
    with VinOfflineStoreReader(task.config) as reader:
        if reader.generation != task.generation:
            raise replaced_error(
                str(task.config.store_dir), task.generation, "while it was being read (worker)"
            )
        return scan_task(reader, task)


def scan_task(reader: VinOfflineStoreReader, task: CompareTask) -> ComparePartial:
    side: SidePartial | None = None
    for plan in task.plans:
        shard = scan_compare_shard(reader, plan)
        # The first shard's partial is the task's own: no copy of its histograms.
        side = shard if side is None else side.merge(shard)
    if side is None:
        return ComparePartial()
    return ComparePartial(a=side) if task.side == "a" else ComparePartial(b=side)


# --------------------------------------------------------------------------------------
# One shard
# --------------------------------------------------------------------------------------


class _ShardScan(ShardReads):
    def __init__(self, reader: VinOfflineStoreReader, plan: CompareShardPlan) -> None:
        self.plan = plan
        self.partial = SidePartial(rows_scanned=len(plan.rows))
        super().__init__(reader, plan.shard_id, plan.rows, self.partial.integrity)

    def nonfinite(self, block: str, count: int) -> None:
        if count:
            self.partial.integrity.nonfinite[(self.plan.shard_id, block)] += count

    def run(self) -> SidePartial:
        if not self.plan.rows or None in self.broken:
            return self.partial
        self.labels()
        self.backbone()
        self.vin_points()
        return self.partial

    def labels(self) -> None:
        plan = self.plan
        components = [n for n in self.shard.block_names if n.startswith(RRI_COMPONENT_PREFIX)]
        valued = [n for n in ("rri", *components) if self.usable(n)] if plan.labels else []
        names = [n for n in ("candidate_valid", *valued, "candidate_poses") if self.usable(n)]
        if not names or (plan.labels and "candidate_valid" not in names):
            return  # without validity no candidate value can be told from padding
        for _i, _j, data, readable in self.windows(names):
            self._label_window(data, readable, valued)

    def _label_window(
        self, data: dict[str, np.ndarray], readable: dict[str, np.ndarray], valued: list[str]
    ) -> None:
        part = self.partial
        valid: np.ndarray | None = None
        valid_ok: np.ndarray | None = None
        if self.plan.labels:
            if "candidate_valid" not in data:
                return
            valid = data["candidate_valid"].astype(bool, copy=False)
            valid_ok = readable["candidate_valid"]
            counts = valid[valid_ok].sum(axis=1, dtype=np.int64)
            part.histogram(VALID_CANDIDATE_COUNT, np.dtype(np.int64)).update(counts)
        for name in valued:
            if name not in data or valid is None or valid_ok is None:
                continue
            ok = valid_ok & readable[name]
            values = data[name][ok][valid[ok]]
            finite = np.isfinite(values)
            self.nonfinite(name, int(np.count_nonzero(np.isinf(values))))
            part.histogram(name, values.dtype).update(values[finite])
        if "candidate_poses" in data:
            poses = data["candidate_poses"]
            ok = readable["candidate_poses"]
            if valid is not None and valid_ok is not None:
                ok = ok & valid_ok
                chosen = poses[ok][valid[ok]]
            else:
                rows = poses[ok]
                chosen = rows[np.any(rows != 0, axis=-1)]
            finite = np.isfinite(chosen)
            self.nonfinite("candidate_poses", int(chosen.size - np.count_nonzero(finite)))
            part.histogram("candidate_poses", chosen.dtype).update(chosen[finite])

    def backbone(self) -> None:
        for spec in self.shard.blocks:
            if not spec.name.startswith(BACKBONE_PREFIX) or not self.usable(spec.name):
                continue
            assert spec.dtype is not None
            dtype = np.dtype(spec.dtype)
            shape = spec.row_shape
            split = len(shape) >= 2 and 2 <= shape[0] <= CAMERA_AXIS_MAX
            whole = self.partial.histogram(spec.name, dtype)
            parts = (
                [self.partial.histogram(f"{spec.name}[{k}]", dtype) for k in range(shape[0])]
                if split
                else []
            )
            for batch in self.batches(spec):
                bad = 0
                if split:
                    # Each camera binned once, into its part and the whole field in place.
                    for k, hist in enumerate(parts):
                        bad += hist.update(batch[:, k], also=whole)
                else:
                    bad = whole.update(batch)
                self.nonfinite(spec.name, bad)

    def vin_points(self) -> None:
        if "vin_points" in self.broken:
            return
        lengths: list[int] = []
        bad = 0
        for _row, points in self.vin_point_records():
            lengths.append(int(points.shape[0]))
            bad += int(points.size - np.count_nonzero(np.isfinite(points)))
        self.nonfinite("vin_points", bad)
        self.partial.histogram(VIN_POINT_COUNT, np.dtype(np.int64)).update(
            np.asarray(lengths, dtype=np.int64)
        )


def scan_compare_shard(reader: VinOfflineStoreReader, plan: CompareShardPlan) -> SidePartial:
    """One store's partial of one shard: its selected rows counted on the shared bins."""
    return _ShardScan(reader, plan).run()
