"""Label accumulators: candidate counts, RRI, RRI components and their pairs, candidate poses.

Both read the same :class:`LabelWindow` (the per-candidate blocks of some rows, joined).
Part of the accumulators of :mod:`vinlens.store.diagnostics.accumulators`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from vinlens.store.diagnostics.kernels import Summary
from vinlens.store.diagnostics.records import (
    MAX_LISTED_SAMPLE_KEYS,
    POSE_DIAGNOSTICS,
    NumericSummary,
)
from vinlens.store.diagnostics.sampling import Reservoir
from vinlens.store.diagnostics.series import merge_dict, reservoir_column, reservoir_salt
from vinlens.store.format import RRI_COMPONENT_PREFIX

__all__ = ["LabelStats", "LabelWindow", "PoseStats"]


# --------------------------------------------------------------------------------------
# Labels: candidate counts, RRI, RRI components, RRI/component pairs
# --------------------------------------------------------------------------------------


@dataclass
class LabelWindow:
    """Selected rows of one label window: per block, values and a readable mask per row."""

    shard_id: str
    sample_index: np.ndarray  # int64, the rows' global sample indices
    data: dict[str, np.ndarray]
    readable: dict[str, np.ndarray]
    components: list[str]
    num_candidates: int

    @property
    def positions(self) -> np.ndarray:
        c = self.num_candidates
        return self.sample_index[:, None] * max(c, 1) + np.arange(c)[None, :]

    def rows_with(self, *names: str) -> np.ndarray | None:
        """Mask of rows whose blocks ``names`` were all read, or ``None`` if one is absent."""
        if any(name not in self.data for name in names):
            return None
        mask = np.ones(self.sample_index.size, dtype=bool)
        for name in names:
            mask &= self.readable[name]
        return mask


class LabelStats:
    """Candidate counts, RRI and RRI components of the scanned rows (valid candidates)."""

    def __init__(self, summary_rows: frozenset[int] = frozenset()) -> None:
        self.summary_rows = summary_rows
        self.candidate_count = Summary()
        self.rri = Summary()
        self.candidate_count_values = Reservoir(1, salt=1)
        self.rri_values = Reservoir(1, salt=2)
        self.component_summaries: dict[str, Summary] = {}
        self.component_values: dict[str, Reservoir] = {}
        self.component_pairs: dict[str, Reservoir] = {}
        # Per-row summaries of the rows listed in ``sample_summaries``.
        self.row_counts: dict[int, int] = {}
        self.row_rri: dict[int, NumericSummary] = {}
        self.unpaired_keys: list[str] = []
        self.unpaired_count = 0
        self.nonfinite: Counter[tuple[str, str]] = Counter()
        self.duplicate_ids: Counter[str] = Counter()

    def update_unpaired(self, sample_keys: list[str]) -> None:
        """Labelled rows of a shard without ``candidate_ids``: listed, never paired."""
        self.unpaired_count += len(sample_keys)
        free = MAX_LISTED_SAMPLE_KEYS - len(self.unpaired_keys)
        self.unpaired_keys.extend(sample_keys[: max(free, 0)])

    def update(self, window: LabelWindow) -> None:
        valid_rows = window.rows_with("candidate_valid")
        if valid_rows is None:
            return
        data, readable = window.data, window.readable
        sample_index = window.sample_index
        positions = window.positions
        valid = data["candidate_valid"]
        counts = valid[valid_rows].sum(axis=1)
        self.candidate_count.update(counts)
        self.candidate_count_values.update(sample_index[valid_rows], counts)
        for si, count in zip(sample_index[valid_rows].tolist(), counts.tolist(), strict=True):
            if si in self.summary_rows:
                self.row_counts[si] = int(count)
        rri_rows = window.rows_with("candidate_valid", "rri")
        if rri_rows is not None:
            rri = data["rri"]
            infinite = int(np.count_nonzero(np.isinf(rri[readable["rri"]])))
            if infinite:
                self.nonfinite[(window.shard_id, "rri")] += infinite
            mask = valid & np.isfinite(rri) & rri_rows[:, None]
            self.rri.update(rri[mask])
            self.rri_values.update(positions[mask], rri[mask])
            for i in np.flatnonzero(rri_rows).tolist():
                si = int(sample_index[i])
                if si in self.summary_rows:
                    row_summary = Summary()
                    row_summary.update(rri[i][mask[i]])
                    self.row_rri[si] = row_summary.finish()
        unique = None
        if "candidate_ids" in data:
            unique = self._unique_ids(window.shard_id, data["candidate_ids"])
        for name in window.components:
            block = f"{RRI_COMPONENT_PREFIX}{name}"
            comp_rows = window.rows_with("candidate_valid", block)
            if comp_rows is None:
                continue
            comp = data[block]
            infinite = int(np.count_nonzero(np.isinf(comp[readable[block]])))
            if infinite:
                self.nonfinite[(window.shard_id, block)] += infinite
            cmask = valid & np.isfinite(comp) & comp_rows[:, None]
            self.component_summaries.setdefault(name, Summary()).update(comp[cmask])
            self.component_values.setdefault(
                name, Reservoir(1, salt=reservoir_salt("component", name))
            ).update(positions[cmask], comp[cmask])
            pair_rows = window.rows_with("candidate_valid", block, "rri", "candidate_ids")
            if pair_rows is not None and unique is not None:
                rri = data["rri"]
                pmask = cmask & np.isfinite(rri) & unique & pair_rows[:, None]
                self.component_pairs.setdefault(
                    name, Reservoir(2, salt=reservoir_salt("pair", name))
                ).update(positions[pmask], np.stack([rri[pmask], comp[pmask]], axis=1))

    def _unique_ids(self, shard_id: str, ids: np.ndarray) -> np.ndarray:
        """Mask of candidates whose id is >= 0 and occurs once in its row."""
        order = np.sort(ids, axis=1)
        dup_sorted = np.zeros_like(order, dtype=bool)
        same = order[:, 1:] == order[:, :-1]
        dup_sorted[:, 1:] |= same
        dup_sorted[:, :-1] |= same
        unique = ids >= 0
        rows_with_dups = np.flatnonzero((dup_sorted & (order >= 0)).any(axis=1))
        for r in rows_with_dups.tolist():
            values, counts = np.unique(ids[r], return_counts=True)
            repeated = values[(counts > 1) & (values >= 0)]
            unique[r] &= ~np.isin(ids[r], repeated)
            self.duplicate_ids[shard_id] += 1
        return unique

    def merge(self, other: LabelStats) -> LabelStats:
        self.summary_rows = self.summary_rows | other.summary_rows
        self.candidate_count.merge(other.candidate_count)
        self.rri.merge(other.rri)
        self.candidate_count_values.merge(other.candidate_count_values)
        self.rri_values.merge(other.rri_values)
        merge_dict(self.component_summaries, other.component_summaries)
        merge_dict(self.component_values, other.component_values)
        merge_dict(self.component_pairs, other.component_pairs)
        self.row_counts.update(other.row_counts)
        self.row_rri.update(other.row_rri)
        free = MAX_LISTED_SAMPLE_KEYS - len(self.unpaired_keys)
        self.unpaired_keys.extend(other.unpaired_keys[: max(free, 0)])
        self.unpaired_count += other.unpaired_count
        self.nonfinite.update(other.nonfinite)
        self.duplicate_ids.update(other.duplicate_ids)
        return self

    def finish(self) -> dict[str, Any]:
        """Record fields (``candidate_count``, ``rri`` ... ``rri_pairing_unavailable_count``)."""

        def pairs(reservoir: Reservoir) -> list[tuple[float, float]]:
            rows = reservoir.finish()
            return list(zip(rows[:, 0].tolist(), rows[:, 1].tolist(), strict=True))

        return {
            "candidate_count": self.candidate_count.finish(),
            "rri": self.rri.finish(),
            "candidate_count_values": [
                int(v) for v in reservoir_column(self.candidate_count_values)
            ],
            "rri_values": reservoir_column(self.rri_values),
            "rri_component_values": {
                name: reservoir_column(self.component_values[name])
                for name in sorted(self.component_values)
            },
            "rri_component_summaries": {
                name: self.component_summaries[name].finish()
                for name in sorted(self.component_summaries)
            },
            "rri_component_pairs": {
                name: pairs(self.component_pairs[name]) for name in sorted(self.component_pairs)
            },
            "rri_pairing_unavailable_sample_keys": list(self.unpaired_keys),
            "rri_pairing_unavailable_count": self.unpaired_count,
        }


# --------------------------------------------------------------------------------------
# Candidate poses
# --------------------------------------------------------------------------------------


class PoseStats:
    """Pose diagnostics of valid candidates (labelled) or non-padding ones (unlabelled)."""

    def __init__(self, labels: bool = True) -> None:
        self.labels = labels
        self.summaries = {name: Summary() for name in POSE_DIAGNOSTICS}
        self.values = {name: Reservoir(1, salt=100 + i) for i, name in enumerate(POSE_DIAGNOSTICS)}
        self.nonfinite: Counter[tuple[str, str]] = Counter()

    def update(self, window: LabelWindow) -> None:
        if self.labels:
            pose_rows = window.rows_with("candidate_poses", "candidate_valid")
            if pose_rows is None:
                return
            poses = window.data["candidate_poses"]
            mask = window.data["candidate_valid"] & pose_rows[:, None]
        else:
            pose_rows = window.rows_with("candidate_poses")
            if pose_rows is None:
                return
            poses = window.data["candidate_poses"]
            mask = (poses != 0).any(axis=2) & pose_rows[:, None]
        chosen = poses[mask].astype(np.float64)
        where = window.positions[mask]
        finite = np.isfinite(chosen).all(axis=1)
        q = chosen[:, 3:7]
        norm = np.linalg.norm(q, axis=1)
        good = finite & (norm > 0)
        bad = int(chosen.shape[0] - np.count_nonzero(good))
        if bad:
            self.nonfinite[(window.shard_id, "candidate_poses")] += bad
            chosen, where, q, norm = chosen[good], where[good], q[good], norm[good]
        if chosen.shape[0] == 0:
            return
        # Contiguous columns: the element-wise math below runs on unit-stride arrays.
        t = np.ascontiguousarray(chosen[:, :3].T).T
        qw, qx, qy, qz = (q / norm[:, None]).T.copy()
        deg = 180.0 / math.pi
        values = {
            "distance_m": np.linalg.norm(t, axis=1),
            "azimuth_deg": np.arctan2(t[:, 1], t[:, 0]) * deg,
            "elevation_deg": np.arctan2(t[:, 2], np.hypot(t[:, 0], t[:, 1])) * deg,
            "rotation_angle_deg": 2.0 * np.arccos(np.clip(np.abs(qw), 0.0, 1.0)) * deg,
            "yaw_deg": np.arctan2(2 * (qw * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz)) * deg,
            "pitch_deg": np.arcsin(np.clip(2 * (qw * qy - qz * qx), -1.0, 1.0)) * deg,
            "roll_deg": np.arctan2(2 * (qw * qx + qy * qz), 1 - 2 * (qx * qx + qy * qy)) * deg,
        }
        for name, series in values.items():
            self.summaries[name].update(series)
            self.values[name].update(where, series)

    def merge(self, other: PoseStats) -> PoseStats:
        for name in POSE_DIAGNOSTICS:
            self.summaries[name].merge(other.summaries[name])
            self.values[name].merge(other.values[name])
        self.nonfinite.update(other.nonfinite)
        return self

    def finish(self) -> dict[str, Any]:
        seen = [name for name in POSE_DIAGNOSTICS if self.summaries[name].count]
        return {
            "candidate_pose_values": {name: reservoir_column(self.values[name]) for name in seen},
            "candidate_pose_summaries": {name: self.summaries[name].finish() for name in seen},
        }
