"""Pearson r of the RRI pairs in a statistics record (:func:`rri_component_correlations`).

Each RRI component's pairs are ``(rri, value)`` tuples aligned by candidate identity
(:attr:`VinOfflineDatasetStats.rri_component_pairs`). Their correlation is a diagnostic,
so it is computed here, once, and every front end (the dashboard, a script) reads the
same number.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vinlens.store.diagnostics.records import VinOfflineDatasetStats

__all__ = ["RriPairCorrelation", "pearson_r", "rri_component_correlations", "rri_pair_arrays"]


@dataclass(frozen=True)
class RriPairCorrelation:
    """How one RRI component moves with the oracle RRI over the record's pairs.

    Attributes:
        name: The component's name (a key of ``rri_component_pairs``).
        count: Pairs the correlation was computed from.
        pearson: Pearson's r of (component value, RRI); ``None`` below 2 pairs or when
            either side has no spread (not 0: an undefined correlation is not "none").
    """

    name: str
    count: int
    pearson: float | None


def pearson_r(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Pearson's correlation of two equally long series; ``None`` below 2 values or without spread."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.size != b.size:
        raise ValueError(f"pearson_r needs equally long series, got {a.size} and {b.size}")
    if a.size < 2 or float(np.std(a)) == 0.0 or float(np.std(b)) == 0.0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def rri_pair_arrays(
    pairs: Sequence[tuple[float, float]], *, name: str = "pairs"
) -> tuple[np.ndarray, np.ndarray]:
    """(rri, value) float64 arrays of one component's ``(rri, value)`` pairs.

    Raises:
        ValueError: an entry is not a pair (naming the component).
    """
    if not set(map(len, pairs)) <= {2}:
        raise ValueError(f"RRI pairs of {name!r} must be (rri, value) tuples")
    flat = itertools.chain.from_iterable(pairs)
    arr = np.fromiter(flat, dtype=np.float64, count=2 * len(pairs)).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def rri_component_correlations(
    stats: VinOfflineDatasetStats | Mapping[str, Sequence[tuple[float, float]]],
) -> tuple[RriPairCorrelation, ...]:
    """Pearson r of every RRI component with the RRI, by component name.

    ``stats`` is a statistics record or its ``rri_component_pairs`` mapping.
    """
    pairs = stats.rri_component_pairs if isinstance(stats, VinOfflineDatasetStats) else stats
    out = []
    for name in sorted(pairs):
        rri, value = rri_pair_arrays(pairs[name], name=name)
        out.append(
            RriPairCorrelation(name=name, count=int(rri.size), pearson=pearson_r(value, rri))
        )
    return tuple(out)
