"""The integrity accumulator every shard scan fills: reader checks, refused reads, bad values.

Store statistics and store compare both keep one per partial; it merges like the other
accumulators (associative, never changing ``other``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vinlens.store.format import RRI_COMPONENT_PREFIX
from vinlens.store.reader import StoreIntegrityProblem

__all__ = ["IntegrityStats"]


class IntegrityStats:
    """Problems found while scanning: the reader's per-shard checks and refused reads."""

    def __init__(self) -> None:
        self.checks: list[StoreIntegrityProblem] = []  # reader checks, manifest shard order
        self.corrupt: dict[tuple[str, str], StoreIntegrityProblem] = {}  # first per block
        self.unreadable: dict[str, tuple[int, StoreIntegrityProblem]] = {}  # vin_points
        self.nonfinite: Counter[tuple[str, str]] = Counter()
        self.duplicate_ids: Counter[str] = Counter()

    def update(self, problems: tuple[StoreIntegrityProblem, ...]) -> None:
        """The reader's integrity problems of the shard being scanned."""
        self.checks.extend(problems)

    def refused(self, shard_id: str, block: str, problem: StoreIntegrityProblem) -> None:
        self.corrupt.setdefault((shard_id, block), problem)

    def unreadable_record(self, shard_id: str, problem: StoreIntegrityProblem) -> None:
        count, first = self.unreadable.get(shard_id, (0, problem))
        self.unreadable[shard_id] = (count + 1, first)

    def merge(self, other: IntegrityStats) -> IntegrityStats:
        self.checks.extend(other.checks)
        for key, problem in other.corrupt.items():
            self.corrupt.setdefault(key, problem)
        for shard_id, (count, first) in other.unreadable.items():
            mine = self.unreadable.get(shard_id)
            self.unreadable[shard_id] = (
                (count, first) if mine is None else (mine[0] + count, mine[1])
            )
        self.nonfinite.update(other.nonfinite)
        self.duplicate_ids.update(other.duplicate_ids)
        return self

    def finish(
        self, describe_shard: Any, extra: list[StoreIntegrityProblem]
    ) -> list[StoreIntegrityProblem]:
        """Problems in a fixed order: checks, ``extra``, refused chunks, records, values, ids."""
        problems = [*self.checks, *extra]
        problems.extend(problem for _, problem in sorted(self.corrupt.items()))
        for shard_id, (count, first) in sorted(self.unreadable.items()):
            problems.append(
                StoreIntegrityProblem(
                    first.kind,
                    shard_id,
                    "vin_points",
                    first.path,
                    f"{count} unreadable vin_points record{'s' if count != 1 else ''}; "
                    f"first: {first.message}",
                )
            )
        for (shard_id, block), count in sorted(self.nonfinite.items()):
            problems.append(
                StoreIntegrityProblem(
                    "NonFiniteValues",
                    shard_id,
                    block,
                    describe_shard(shard_id),
                    f"shard {shard_id!r} block {block!r}: {count} non-finite value"
                    f"{'s' if count != 1 else ''} in scanned rows where the format allows none"
                    + (
                        " (infinite RRI)" if block.startswith(("rri", RRI_COMPONENT_PREFIX)) else ""
                    ),
                )
            )
        for shard_id, count in sorted(self.duplicate_ids.items()):
            problems.append(
                StoreIntegrityProblem(
                    "DuplicateCandidateIds",
                    shard_id,
                    "candidate_ids",
                    describe_shard(shard_id),
                    f"shard {shard_id!r}: {count} scanned row{'s' if count != 1 else ''} repeat "
                    "a candidate id; those candidates are left out of RRI/component pairs",
                )
            )
        return problems
