"""The records of store compare: one :class:`FieldDrift` per field, one :class:`StoreComparison`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vinlens.store.compare._binning import (
    FLOAT32_RELATIVE_RESOLUTION,
    PSI_BINS,
    PSI_EPSILON,
)
from vinlens.store.reader import StoreIntegrityProblem

__all__ = ["DRIFT_METRICS", "FieldDrift", "StoreComparison"]

#: The metrics :meth:`StoreComparison.most_drifted` ranks by.
DRIFT_METRICS = ("js_distance", "psi", "wasserstein", "ks_statistic")


@dataclass(frozen=True)
class FieldDrift:
    """How one field's values moved from store A to store B.

    ``count_*``/``mean_*``/``std_*`` are each store's finite values (population std,
    exact up to one rounding; ``None`` without values). The four metrics come from the
    shared binning (``vinlens.store.compare._binning``) and are ``None`` when either
    store has no value of the field. ``exact`` is true when the values were counted
    exactly (float16 bit patterns, integers) and false for float32 bins, whose width is
    :attr:`StoreComparison.float32_relative_resolution` of the values' magnitude.
    ``histogram_edges`` (``len + 1`` of the counts) with ``histogram_a``/``histogram_b``
    is a display histogram of both stores on the same equal-width bins.
    """

    name: str
    count_a: int
    count_b: int
    mean_a: float | None
    mean_b: float | None
    std_a: float | None
    std_b: float | None
    psi: float | None
    js_distance: float | None
    wasserstein: float | None
    ks_statistic: float | None
    dtype_a: str | None = None
    dtype_b: str | None = None
    exact: bool = True
    histogram_edges: tuple[float, ...] = ()
    histogram_a: tuple[int, ...] = ()
    histogram_b: tuple[int, ...] = ()

    def metric(self, name: str) -> float | None:
        """The value of one of :data:`DRIFT_METRICS`."""
        _check_metric(name)
        value: float | None = getattr(self, name)
        return value


def _check_metric(metric: object) -> str:
    if not isinstance(metric, str) or metric not in DRIFT_METRICS:
        raise ValueError(f"metric must be one of {', '.join(DRIFT_METRICS)}, got {metric!r}")
    return metric


@dataclass(frozen=True)
class StoreComparison:
    """What changed from store A to store B, field by field and in their sample sets.

    ``fields`` are sorted by name. ``samples_only_in_a``/``_b`` count the ``sample_key``s
    in one store only (listed, sorted, in ``sample_keys_only_in_a``/``_b``);
    ``scenes_only_in_a``/``_b`` are the scene ids of one store only, sorted.
    ``split_counts_a``/``_b`` are each store's samples per split; ``problems_a``/``_b``
    each store's integrity problems (the reader's checks of every shard, refused
    chunks, unreadable records and non-finite values in the scanned rows).
    ``sampled_samples_*`` rows of each store were scanned (``max_samples`` per store).
    """

    store_a: str
    store_b: str
    fields: tuple[FieldDrift, ...]
    samples_only_in_a: int
    samples_only_in_b: int
    scenes_only_in_a: tuple[str, ...]
    scenes_only_in_b: tuple[str, ...]
    split_counts_a: dict[str, int]
    split_counts_b: dict[str, int]
    problems_a: tuple[StoreIntegrityProblem, ...]
    problems_b: tuple[StoreIntegrityProblem, ...]
    sample_keys_only_in_a: tuple[str, ...] = ()
    sample_keys_only_in_b: tuple[str, ...] = ()
    num_samples_a: int = 0
    num_samples_b: int = 0
    sampled_samples_a: int = 0
    sampled_samples_b: int = 0
    max_samples: int | None = 512
    generation_a: dict[str, Any] | None = None
    generation_b: dict[str, Any] | None = None
    float32_relative_resolution: float = FLOAT32_RELATIVE_RESOLUTION
    psi_bins: int = PSI_BINS
    psi_epsilon: float = PSI_EPSILON

    def field(self, name: str) -> FieldDrift:
        """The drift of the field called ``name``; ``KeyError`` names the fields there are."""
        for drift in self.fields:
            if drift.name == name:
                return drift
        raise KeyError(
            f"no field {name!r} in this comparison; fields: "
            + ", ".join(d.name for d in self.fields)
        )

    def most_drifted(self, metric: str = "js_distance", k: int = 5) -> tuple[FieldDrift, ...]:
        """The ``k`` fields with the largest ``metric``, largest first.

        Ties keep name order; fields without the metric (a field one store lacks) come
        last. ``metric`` is one of :data:`DRIFT_METRICS`.
        """
        _check_metric(metric)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        return ranked_fields(self.fields, metric)[:k]

    @property
    def problems(self) -> tuple[StoreIntegrityProblem, ...]:
        """Both stores' problems, A's first."""
        return (*self.problems_a, *self.problems_b)


def ranked_fields(fields: tuple[FieldDrift, ...], metric: str) -> tuple[FieldDrift, ...]:
    """``fields`` sorted by ``metric``, largest first, missing values last, ties by name."""
    _check_metric(metric)

    def key(drift: FieldDrift) -> tuple[int, float, str]:
        value = getattr(drift, metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return (1, 0.0, drift.name)
        return (0, -float(value), drift.name)

    return tuple(sorted(fields, key=key))
