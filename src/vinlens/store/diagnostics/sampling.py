"""Deterministic choices: which rows a budget scans, and which values a bounded list keeps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vinlens.store.diagnostics.records import (
    MAX_HISTOGRAM_VALUES,
    SELECTION_RUN_LENGTH,
    check_max_samples,
)


def apportion(sizes: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` over groups of ``sizes``: at least one each, the rest proportionally.

    Returns counts ``c`` with ``sum(c) == min(budget, sum(sizes))`` and ``c[i] <= sizes[i]``.
    When ``budget`` covers one row per non-empty group, every non-empty group gets one and
    the remainder ``r`` is shared in proportion to ``sizes[i] - 1`` by largest remainders
    (ties to the earlier group), so ``c[i] - 1`` is ``floor`` or ``ceil`` of its exact
    quota. A smaller budget gives one row to each of the largest groups (ties: earlier).
    """
    if budget < 0 or any(s < 0 for s in sizes):
        raise ValueError("sizes and budget must be non-negative")
    total = sum(sizes)
    if budget >= total:
        return list(sizes)
    nonempty = [i for i, s in enumerate(sizes) if s > 0]
    counts = [0] * len(sizes)
    if budget < len(nonempty):
        for i in sorted(nonempty, key=lambda i: (-sizes[i], i))[:budget]:
            counts[i] = 1
        return counts
    for i in nonempty:
        counts[i] = 1
    remainder = budget - len(nonempty)
    weight = total - len(nonempty)
    if remainder == 0 or weight == 0:
        return counts
    fractions = []
    handed = 0
    for i in nonempty:
        share, rest = divmod(remainder * (sizes[i] - 1), weight)
        counts[i] += share
        handed += share
        fractions.append((-rest, i))
    for _, i in sorted(fractions)[: remainder - handed]:
        counts[i] += 1
    return counts


def _runs(cell: Sequence[int], count: int) -> list[int]:
    """``count`` members of ``cell`` as evenly spaced runs of consecutive members."""
    size = len(cell)
    if count >= size:
        return list(cell)
    if count == 0:
        return []
    groups = math.ceil(count / SELECTION_RUN_LENGTH)
    chosen: list[int] = []
    done = 0
    for g in range(groups):
        take = count // groups + (1 if g < count % groups else 0)
        # Windows proportional to the run sizes always fit their run.
        lo = (size * done) // count
        hi = (size * (done + take)) // count
        start = lo + (hi - lo - take) // 2
        chosen.extend(cell[start : start + take])
        done += take
    return chosen


def select_vin_offline_sample_indices(
    groups: Sequence[tuple[str, str]], max_samples: int | None
) -> list[int]:
    """Sample indices to scan, sorted: ``groups[i]`` is ``(split, shard_id)`` of sample ``i``.

    Deterministic in its inputs; see the module docstring for the rules.
    """
    check_max_samples(max_samples)
    if max_samples is None or max_samples >= len(groups):
        return list(range(len(groups)))
    cells: dict[str, dict[str, list[int]]] = {}
    for index, (split, shard_id) in enumerate(groups):
        cells.setdefault(split, {}).setdefault(shard_id, []).append(index)
    splits = sorted(cells)
    split_quota = apportion([sum(len(c) for c in cells[s].values()) for s in splits], max_samples)
    chosen: list[int] = []
    for split, quota in zip(splits, split_quota, strict=True):
        shard_ids = sorted(cells[split])
        shard_quota = apportion([len(cells[split][k]) for k in shard_ids], quota)
        for shard_id, count in zip(shard_ids, shard_quota, strict=True):
            chosen.extend(_runs(cells[split][shard_id], count))
    chosen.sort()
    return chosen


def _priorities(positions: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of positions: a fixed pseudo-random priority per observed value."""
    z = positions.astype(np.uint64) + np.uint64((salt * 0x9E3779B97F4A7C15) & (2**64 - 1))
    # In place, one scratch array: this runs for every value of every histogram series.
    shifted = np.right_shift(z, np.uint64(30))
    np.bitwise_xor(z, shifted, out=z)
    np.multiply(z, np.uint64(0xBF58476D1CE4E5B9), out=z)
    np.right_shift(z, np.uint64(27), out=shifted)
    np.bitwise_xor(z, shifted, out=z)
    np.multiply(z, np.uint64(0x94D049BB133111EB), out=z)
    np.right_shift(z, np.uint64(31), out=shifted)
    np.bitwise_xor(z, shifted, out=z)
    return z


class Reservoir:
    """At most ``limit`` rows of values: the ones whose position hashes lowest.

    A uniform sample without replacement that depends only on which positions were seen,
    not on reading order or grouping: :meth:`merge` of two reservoirs keeps the lowest
    priorities of the union, so any grouping of shards keeps the same rows. Kept rows are
    returned in position order. Priorities are
    distinct (splitmix64 is a bijection), so once ``limit`` rows are kept, a new row whose
    priority is not below the largest kept one can never be kept and is dropped at once.
    """

    __slots__ = (
        "_pending",
        "_pending_rows",
        "_threshold",
        "columns",
        "limit",
        "position",
        "priority",
        "salt",
        "values",
    )

    def __init__(self, columns: int, salt: int, limit: int = MAX_HISTOGRAM_VALUES) -> None:
        self.limit = limit
        self.salt = salt
        self.columns = columns
        self.priority = np.zeros(0, dtype=np.uint64)
        self.position = np.zeros(0, dtype=np.int64)
        self.values = np.zeros((0, columns), dtype=np.float64)
        self._threshold: np.uint64 | None = None  # largest kept priority once full
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0

    def add(self, positions: np.ndarray, values: np.ndarray) -> None:
        if positions.size == 0:
            return
        positions = positions.astype(np.int64, copy=False)
        values = values.reshape(positions.size, -1)
        self._push(positions, values, _priorities(positions, self.salt))

    def _push(self, positions: np.ndarray, values: np.ndarray, priority: np.ndarray) -> None:
        if self._threshold is not None:
            keep = priority < self._threshold
            if not keep.any():
                return
            if not keep.all():
                positions, values, priority = positions[keep], values[keep], priority[keep]
        self._pending.append((positions, values, priority))
        self._pending_rows += positions.size
        if self._pending_rows >= self.limit:
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        positions = np.concatenate([self.position, *(p for p, _, _ in self._pending)])
        values = np.concatenate(
            [self.values, *(v.astype(np.float64, copy=False) for _, v, _ in self._pending)]
        )
        priority = np.concatenate([self.priority, *(q for _, _, q in self._pending)])
        self._pending = []
        self._pending_rows = 0
        if positions.size > self.limit:
            keep = np.argpartition(priority, self.limit - 1)[: self.limit]
            positions, values, priority = positions[keep], values[keep], priority[keep]
        if positions.size >= self.limit:
            self._threshold = priority.max()
        self.position, self.values, self.priority = positions, values, priority

    def update(self, positions: np.ndarray, values: np.ndarray) -> None:
        self.add(positions, values)

    def merge(self, other: Reservoir) -> Reservoir:
        """Fold ``other`` (same salt and width) into this one; ``other`` is left as it was."""
        # Pending like added values: a fold over many shards compacts once per ``limit``
        # new rows, not once per shard. ``_push`` only reads the arrays (filters copy).
        if other.position.size:
            self._push(other.position, other.values, other.priority)
        for positions, values, priority in other._pending:
            self._push(positions, values, priority)
        return self

    def rows(self) -> np.ndarray:
        self._compact()
        # Positions are distinct, so the (faster) default sort gives the stable order.
        return self.values[np.argsort(self.position)]

    def finish(self) -> np.ndarray:
        """The kept rows in position order (``[n, columns]`` float64)."""
        return self.rows()

    def __getstate__(self) -> dict[str, Any]:
        # Partials travel between processes: only the compacted, bounded state, and not the
        # priorities (a third of it), which follow from the positions and the salt.
        self._compact()
        return {
            "columns": self.columns,
            "limit": self.limit,
            "salt": self.salt,
            "position": self.position,
            "values": self.values,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.columns = state["columns"]
        self.limit = state["limit"]
        self.salt = state["salt"]
        self.position = state["position"]
        self.values = state["values"]
        self.priority = _priorities(self.position, self.salt)
        self._threshold = self.priority.max() if self.position.size >= self.limit else None
        self._pending = []
        self._pending_rows = 0
