"""Per-camera map statistics over a data slice, folded from explained batches.

:class:`AttributionAggregate` folds :func:`~vinlens.attribution.explain_cameras` records
into one :class:`MapAccumulator` per camera and class: the mean map, per-pixel
percentile maps and the ``k`` samples whose map is most and least concentrated. Memory
does not grow with the number of batches:

* Mean maps are float64 sums and counts at the target layer's resolution (a bilinear
  resize to the image commutes with the mean).
* Percentile maps come from per-pixel fixed-bin histograms over **normalised** maps
  (each sample's map divided by its own maximum, so values lie in ``[0, 1]``; an
  all-zero map counts as zeros). ``bins`` bins per pixel; a percentile is reported as
  the centre of the bin where the cumulative count reaches it, so it is within
  ``0.5 / bins`` of the exact percentile of the normalised values. Memory:
  ``bins * h * w`` int64 per camera and class.
* Concentration of a map is the share of its total in its hottest 10 % of cells
  (``1.0``: everything there; ``0.1``: uniform; ``0.0`` for an all-zero map). The
  ``k`` most and least concentrated samples keep their id, concentration and raw map.
* A map with a NaN or infinite value is not folded into any statistic (one such pixel
  would poison the mean and has no histogram bin); it is counted in
  :attr:`MapAccumulator.nonfinite` and :attr:`CameraMapStatistics.nonfinite_count`, so
  the record says how many maps were left out.

The records are frozen and compare by value (``==`` on every field, arrays elementwise),
so a fold on an executor can be checked against one in process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from vinlens.attribution.explain import CameraAttribution
from vinlens.attribution.registry import METHOD_REGISTRY

__all__ = [
    "UNIFORM_CONCENTRATION_SPREAD",
    "AttributionAggregate",
    "CameraMapStatistics",
    "ConcentrationSample",
    "MapAccumulator",
    "map_concentration",
]

_TOP_SHARE = 0.1
UNIFORM_CONCENTRATION_SPREAD = 0.01
"""Kept samples whose concentrations all lie within this of each other say nothing apart
(:attr:`CameraMapStatistics.uniform_concentration`)."""


def _value_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_value_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_value_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def records_equal(a: Any, b: Any) -> bool:
    """Whether two dataclass records of one type hold equal values (arrays elementwise)."""
    if type(a) is not type(b):
        return False
    return all(_value_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


def map_concentration(maps: np.ndarray) -> np.ndarray:
    """Share of each map's total in its hottest 10 % of cells, ``[N, h, w]`` -> ``[N]``."""
    flat = np.asarray(maps).reshape(len(maps), -1)
    top = max(1, math.ceil(_TOP_SHARE * flat.shape[1]))
    hottest = np.partition(flat, flat.shape[1] - top, axis=1)[:, flat.shape[1] - top :]
    total = flat.sum(axis=1, dtype=np.float64)
    share: np.ndarray = np.divide(
        hottest.sum(axis=1), total, out=np.zeros_like(total), where=total > 0
    )
    return share


@dataclass(frozen=True, eq=False)
class ConcentrationSample:
    """One sample kept as most or least concentrated: id, concentration, raw map (read-only)."""

    sample_id: int
    concentration: float
    raw_map: np.ndarray

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


def _keep(
    kept: Sequence[ConcentrationSample], new: Sequence[ConcentrationSample], k: int, most: bool
) -> tuple[ConcentrationSample, ...]:
    sign = -1.0 if most else 1.0
    merged = sorted([*kept, *new], key=lambda s: (sign * s.concentration, s.sample_id))
    return tuple(merged[:k])


@dataclass(frozen=True, eq=False)
class MapAccumulator:
    """Streaming statistics of one camera's maps for one class (``None``: every class).

    Attributes:
        camera_key: The camera.
        class_index: The class the samples belong to, ``None`` for all of them.
        count: Samples folded in.
        map_sum: float64 ``[h, w]`` sum of raw maps.
        histogram: int64 ``[bins, h, w]`` counts of normalised map values per cell.
        most: Up to ``k`` most concentrated samples, most first.
        least: Up to ``k`` least concentrated samples, least first.
        top_k: ``k``.
        nonfinite: Maps left out because they hold a NaN or infinite value (not in
            ``count``).
    """

    camera_key: str
    class_index: int | None
    count: int
    map_sum: np.ndarray
    histogram: np.ndarray
    most: tuple[ConcentrationSample, ...]
    least: tuple[ConcentrationSample, ...]
    top_k: int
    nonfinite: int = 0

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def empty(
        cls, camera_key: str, class_index: int | None, shape: tuple[int, int], bins: int, top_k: int
    ) -> MapAccumulator:
        """An accumulator with nothing folded in."""
        return cls(
            camera_key,
            class_index,
            0,
            np.zeros(shape, np.float64),
            np.zeros((bins, *shape), np.int64),
            (),
            (),
            top_k,
        )

    @property
    def bins(self) -> int:
        """Histogram bins per cell."""
        return int(self.histogram.shape[0])

    def update(self, maps: np.ndarray, sample_ids: Sequence[int]) -> MapAccumulator:
        """This accumulator with raw maps ``[N, h, w]`` of samples ``sample_ids`` folded in."""
        values = np.asarray(maps, dtype=np.float32)
        if values.ndim != 3 or values.shape[1:] != self.map_sum.shape:
            raise ValueError(
                f"camera {self.camera_key!r}: maps of shape {values.shape} do not fit the "
                f"accumulated [N, {self.map_sum.shape[0]}, {self.map_sum.shape[1]}] (the target "
                "layer's resolution must not change between batches)."
            )
        if len(sample_ids) != len(values):
            raise ValueError(f"{len(sample_ids)} sample ids for {len(values)} maps.")
        finite = np.asarray(np.isfinite(values).reshape(len(values), -1).all(axis=1))
        left_out = int(len(values) - int(finite.sum()))
        if left_out:
            values = values[finite]
            keep = [bool(k) for k in finite]
            sample_ids = [i for i, k in zip(sample_ids, keep, strict=True) if k]
        count = len(values)
        if not count:
            return replace(self, nonfinite=self.nonfinite + left_out) if left_out else self
        bins = self.bins
        cells = self.map_sum.size
        flat = values.reshape(count, -1)
        peak = flat.max(axis=1)
        # Each map divided by its own maximum, then binned: bin = floor(value * bins).
        per_map = (bins / np.where(peak > 0, peak, 1.0)).astype(np.float32)[:, None]
        # bin = floor(value / peak * bins), clipped to [0, bins - 1], then the flat histogram
        # position bin * cells + cell, computed in place in float32 where that is exact
        # (positions below 2**24), else in float64.
        exact = np.float32 if bins * cells < 2**24 else np.float64
        position = flat.astype(exact) * per_map.astype(exact)
        np.clip(position, 0.0, bins - 1, out=position)
        np.floor(position, out=position)
        position *= cells
        position += np.arange(cells, dtype=exact)
        counts = np.bincount(position.astype(np.intp).ravel(), minlength=bins * cells)
        concentration = map_concentration(values)
        ids = [int(sample_id) for sample_id in sample_ids]
        # Only samples that can enter a top-k list keep a copy of their map.
        ranked = sorted(range(count), key=lambda i: (-concentration[i], ids[i]))
        chosen = set(ranked[: self.top_k]) | set(ranked[::-1][: self.top_k])
        samples = []
        for position in sorted(chosen):
            kept = values[position].copy()
            kept.setflags(write=False)
            samples.append(ConcentrationSample(ids[position], float(concentration[position]), kept))
        return replace(
            self,
            count=self.count + count,
            map_sum=self.map_sum + values.sum(axis=0, dtype=np.float64),
            histogram=self.histogram + counts.reshape(self.histogram.shape),
            most=_keep(self.most, samples, self.top_k, most=True),
            least=_keep(self.least, samples, self.top_k, most=False),
            nonfinite=self.nonfinite + left_out,
        )

    def merge(self, other: MapAccumulator) -> MapAccumulator:
        """Both accumulators' samples together (same camera, class, shape and bins)."""
        if (other.camera_key, other.class_index) != (self.camera_key, self.class_index) or (
            other.histogram.shape != self.histogram.shape
        ):
            raise ValueError(
                f"cannot merge map statistics of camera {other.camera_key!r} class "
                f"{other.class_index} {other.histogram.shape} into camera {self.camera_key!r} "
                f"class {self.class_index} {self.histogram.shape}."
            )
        return replace(
            self,
            count=self.count + other.count,
            map_sum=self.map_sum + other.map_sum,
            histogram=self.histogram + other.histogram,
            most=_keep(self.most, other.most, self.top_k, most=True),
            least=_keep(self.least, other.least, self.top_k, most=False),
            nonfinite=self.nonfinite + other.nonfinite,
        )

    def shifted(self, offset: int) -> MapAccumulator:
        """This accumulator with every kept sample id moved by ``offset``.

        A shard folded on its own numbers its samples from 0; merged after ``offset``
        earlier samples, its ids become global.
        """
        if not offset:
            return self
        return replace(
            self,
            most=tuple(replace(s, sample_id=s.sample_id + offset) for s in self.most),
            least=tuple(replace(s, sample_id=s.sample_id + offset) for s in self.least),
        )

    def finish(self, percentiles: Sequence[float]) -> CameraMapStatistics:
        """Mean and percentile maps (see the module docstring for the percentile bound)."""
        mean = self.map_sum / self.count if self.count else np.zeros_like(self.map_sum)
        cumulative = np.cumsum(self.histogram, axis=0)
        maps: dict[float, np.ndarray] = {}
        for percentile in percentiles:
            if not 0.0 <= float(percentile) <= 100.0:
                raise ValueError(f"percentile {percentile!r} is not in [0, 100].")
            if not self.count:
                maps[float(percentile)] = np.zeros(self.map_sum.shape, np.float32)
                continue
            needed = max(1.0, float(percentile) / 100.0 * self.count)
            first_bin = np.argmax(cumulative >= needed - 1e-9, axis=0)
            value = ((first_bin + 0.5) / self.bins).astype(np.float32)
            value.setflags(write=False)
            maps[float(percentile)] = value
        mean32 = mean.astype(np.float32)
        mean32.setflags(write=False)
        return CameraMapStatistics(
            camera_key=self.camera_key,
            class_index=self.class_index,
            count=self.count,
            mean_map=mean32,
            percentile_maps=maps,
            most_concentrated=self.most,
            least_concentrated=self.least,
            nonfinite_count=self.nonfinite,
        )


@dataclass(frozen=True, eq=False)
class CameraMapStatistics:
    """Finished map statistics of one camera over a slice, for one class or all.

    Attributes:
        camera_key: The camera.
        class_index: The class, ``None`` for every sample.
        count: Samples.
        mean_map: float32 ``[h, w]`` mean raw map (layer resolution).
        percentile_maps: percentile -> float32 ``[h, w]`` percentile of the normalised maps.
        most_concentrated: Up to ``k`` samples, most concentrated first.
        least_concentrated: Up to ``k`` samples, least concentrated first.
        nonfinite_count: Maps left out of every statistic for a NaN or infinite value.
    """

    camera_key: str
    class_index: int | None
    count: int
    mean_map: np.ndarray
    percentile_maps: Mapping[float, np.ndarray]
    most_concentrated: tuple[ConcentrationSample, ...]
    least_concentrated: tuple[ConcentrationSample, ...]
    nonfinite_count: int = 0

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    @property
    def uniform_concentration(self) -> float | None:
        """The concentration every kept sample shares, when they all do; else ``None``.

        Two or more kept samples whose concentrations lie within
        :data:`UNIFORM_CONCENTRATION_SPREAD` of each other (typically a near-flat camera:
        every map about 0.10) say nothing apart; the value is their mean, rounded to the
        spread.
        """
        values = [s.concentration for s in (*self.most_concentrated, *self.least_concentrated)]
        if len(values) < 2 or max(values) - min(values) > UNIFORM_CONCENTRATION_SPREAD:
            return None
        return round(sum(values) / len(values), 2)


@dataclass(frozen=True, eq=False)
class AttributionAggregate:
    """Mergeable map statistics of every camera and class over a slice.

    Attributes:
        method: The attribution method the maps came from.
        bins: Histogram bins per cell.
        top_k: Samples kept as most and least concentrated.
        samples: Samples folded in.
        accumulators: One :class:`MapAccumulator` per (camera, class), sorted by camera
            (first-seen order) and class.
    """

    method: str
    bins: int = 32
    top_k: int = 5
    samples: int = 0
    accumulators: tuple[MapAccumulator, ...] = ()

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.method not in METHOD_REGISTRY:
            raise ValueError(
                f"Unknown attribution method {self.method!r}; expected one of "
                f"{list(METHOD_REGISTRY)}."
            )
        if self.bins < 2 or self.top_k < 0:
            raise ValueError(f"bins must be >= 2 and top_k >= 0, got {self.bins}, {self.top_k}.")

    @property
    def camera_keys(self) -> tuple[str, ...]:
        """Cameras in first-seen order."""
        return tuple(dict.fromkeys(a.camera_key for a in self.accumulators))

    @property
    def nonfinite_maps(self) -> int:
        """Maps (of every camera) left out for a NaN or infinite value."""
        return sum(a.nonfinite for a in self.accumulators)

    def shifted(self, offset: int) -> AttributionAggregate:
        """This aggregate with every kept sample id moved by ``offset`` (see
        :meth:`MapAccumulator.shifted`)."""
        if not offset:
            return self
        return replace(self, accumulators=tuple(a.shifted(offset) for a in self.accumulators))

    @property
    def classes(self) -> tuple[int | None, ...]:
        """Classes seen, sorted (``None`` when samples had no class)."""
        found = {a.class_index for a in self.accumulators}
        return tuple(sorted(found, key=lambda c: (c is not None, c if c is not None else 0)))

    def update(
        self,
        records: Sequence[CameraAttribution],
        classes: Sequence[int | None] | None = None,
        *,
        first_sample_id: int | None = None,
    ) -> AttributionAggregate:
        """Fold one batch of :func:`explain_cameras` records in.

        Args:
            records: Records of one batch (every camera for every sample).
            classes: Class of each sample (by ``sample_index``), ``None`` for no grouping.
            first_sample_id: Id of the batch's sample 0; defaults to :attr:`samples`.
        """
        return self.update_batches([(records, classes)], first_sample_id=first_sample_id)

    def update_batches(
        self,
        batches: Sequence[tuple[Sequence[CameraAttribution], Sequence[int | None] | None]],
        *,
        first_sample_id: int | None = None,
    ) -> AttributionAggregate:
        """Fold several batches ``(records, classes)`` at once (same result as one by one).

        Sample ids run on from ``first_sample_id`` (default :attr:`samples`) in batch
        order. Folding a few batches together copies each histogram once instead of
        once per batch.
        """
        offset = self.samples if first_sample_id is None else first_sample_id
        grouped: dict[tuple[str, int | None], tuple[list[np.ndarray], list[int]]] = {}
        samples = 0
        for records, classes in batches:
            if not records:
                continue
            batch = max(r.sample_index for r in records) + 1
            if classes is not None and len(classes) != batch:
                raise ValueError(f"{len(classes)} classes for a batch of {batch} samples.")
            for record in records:
                if record.method != self.method:
                    raise ValueError(
                        f"record of camera {record.camera_key!r} comes from {record.method!r}; "
                        f"this aggregate folds {self.method!r} maps."
                    )
                group = classes[record.sample_index] if classes is not None else None
                key = (record.camera_key, None if group is None else int(group))
                maps, ids = grouped.setdefault(key, ([], []))
                maps.append(record.raw_map)
                ids.append(offset + samples + record.sample_index)
            samples += batch
        if not grouped:
            return self
        table = {(a.camera_key, a.class_index): a for a in self.accumulators}
        for (camera, group), (maps, ids) in grouped.items():
            current = table.get((camera, group))
            if current is None:
                shape = (int(maps[0].shape[0]), int(maps[0].shape[1]))
                current = MapAccumulator.empty(camera, group, shape, self.bins, self.top_k)
            table[(camera, group)] = current.update(np.stack(maps), ids)
        return replace(self, samples=self.samples + samples, accumulators=_sorted(table))

    def merge(self, other: AttributionAggregate) -> AttributionAggregate:
        """Both slices together; equal (up to float rounding) to folding them in one pass."""
        if (other.method, other.bins, other.top_k) != (self.method, self.bins, self.top_k):
            raise ValueError(
                f"cannot merge an aggregate of {other.method!r} (bins={other.bins}, "
                f"top_k={other.top_k}) into one of {self.method!r} (bins={self.bins}, "
                f"top_k={self.top_k})."
            )
        table = {(a.camera_key, a.class_index): a for a in self.accumulators}
        for accumulator in other.accumulators:
            key = (accumulator.camera_key, accumulator.class_index)
            table[key] = table[key].merge(accumulator) if key in table else accumulator
        return replace(self, samples=self.samples + other.samples, accumulators=_sorted(table))

    def finish(
        self, percentiles: Sequence[float] = (10.0, 50.0, 90.0)
    ) -> tuple[CameraMapStatistics, ...]:
        """Statistics per camera: all samples (``class_index=None``) first, then each class."""
        out: list[CameraMapStatistics] = []
        for camera in self.camera_keys:
            parts = [a for a in self.accumulators if a.camera_key == camera]
            if len(parts) == 1:  # one class: its statistics are the camera's, computed once
                finished = parts[0].finish(percentiles)
                out.append(replace(finished, class_index=None))
                if parts[0].class_index is not None:
                    out.append(finished)
                continue
            overall = replace(parts[0], class_index=None)
            for part in parts[1:]:
                overall = overall.merge(replace(part, class_index=None))
            out.append(overall.finish(percentiles))
            out.extend(part.finish(percentiles) for part in parts)
        return tuple(out)


def _sorted(table: Mapping[tuple[str, int | None], MapAccumulator]) -> tuple[MapAccumulator, ...]:
    cameras = list(dict.fromkeys(camera for camera, _ in table))
    return tuple(
        table[key]
        for key in sorted(
            table,
            key=lambda k: (cameras.index(k[0]), k[1] is not None, k[1] if k[1] is not None else 0),
        )
    )
