"""The records and partials of the dataset operation (:mod:`vinlens.attribution.dataset`).

:class:`DatasetAccumulator` is the one partial: one batch explained (its map statistics,
its reliance, its first samples' images), mergeable in batch order in the accumulator
protocol of :mod:`vinlens.operations` (``merge`` mutates and returns ``self``, never
``other``); :class:`DatasetExplanation` is the frozen record it finishes into.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import torch
from torch import nn

from vinlens.attribution.batches import (
    BatchImages,
    BatchLabels,
    _ClassRecorder,
    _default_batch_labels,
    batch_camera_images,
)
from vinlens.attribution.explain import CameraAttribution, OutputScore, explain_cameras
from vinlens.attribution.images import camera_image_batches
from vinlens.attribution.maps import AttributionAggregate, CameraMapStatistics, records_equal
from vinlens.attribution.reliance import (
    CameraReliance,
    CameraRelianceStatistics,
    RelianceSummary,
    camera_reliance,
)
from vinlens.attribution.targets import CameraExplanationTarget

__all__ = ["DatasetAccumulator", "DatasetExplanation", "KeptSample"]

Forward = Callable[[dict[str, torch.Tensor]], Any]


def check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    """Percentiles as floats, each in ``[0, 100]`` (``ValueError`` otherwise)."""
    checked = tuple(float(p) for p in percentiles)
    if any(not 0.0 <= p <= 100.0 for p in checked):
        raise ValueError(f"percentiles must lie in [0, 100], got {list(percentiles)}.")
    return checked


# -- records ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KeptSample:
    """One of the first samples of a slice, kept with its images (for a viewer's slider).

    Attributes:
        sample_id: Position of the sample in the slice (loader order, from 0).
        label: ``"batch <b> #<i>"``: its batch and place in the batch.
        images: Camera key -> float tensor ``[1, C, H, W]`` on the CPU.
    """

    sample_id: int
    label: str
    images: Mapping[str, torch.Tensor]

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class DatasetExplanation:
    """Attribution over a slice: map statistics, camera reliance and the kept samples.

    Attributes:
        method: The attribution method of the maps.
        baseline: What replaced a camera's input for reliance: ``"zeros"``, ``"mean"``
            (the slice's own mean image), or the type name of the mapping or callable.
        batches: Batches read.
        samples: Samples explained.
        percentiles: Percentile maps finished in ``map_statistics``.
        aggregate: The folded map statistics (mergeable; ``finish`` for other percentiles).
        reliance: The folded reliance (mergeable).
        map_statistics: ``aggregate.finish(percentiles)``: per camera, every sample
            (``class_index=None``) first, then each class.
        reliance_statistics: ``reliance.finish()``: per camera, largest mean drop first.
        kept: The first ``keep_samples`` samples with their images.
        nonfinite_maps: Maps left out of the statistics for a NaN or infinite value (per
            camera in each :class:`~vinlens.attribution.maps.CameraMapStatistics`).
    """

    method: str
    baseline: str
    batches: int
    samples: int
    percentiles: tuple[float, ...]
    aggregate: AttributionAggregate
    reliance: RelianceSummary
    map_statistics: tuple[CameraMapStatistics, ...]
    reliance_statistics: tuple[CameraRelianceStatistics, ...]
    kept: tuple[KeptSample, ...] = ()
    nonfinite_maps: int = 0

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    @property
    def class_statistics(self) -> tuple[CameraMapStatistics, ...]:
        """The per-class part of :attr:`map_statistics`."""
        return tuple(s for s in self.map_statistics if s.class_index is not None)

    @property
    def overall_statistics(self) -> tuple[CameraMapStatistics, ...]:
        """The every-sample part of :attr:`map_statistics` (one per camera)."""
        return tuple(s for s in self.map_statistics if s.class_index is None)


# -- the accumulator ----------------------------------------------------------------------


# An accumulator folds its explained batches into the histograms in groups of about this
# many samples: each histogram is copied once per group, not once per batch, and the
# buffered records (with their image-size maps) stay a few MB.
FOLD_SAMPLES = 64


@dataclass(eq=False)
class _Explained:
    """One batch explained, before it is folded: records and classes, reliance, images."""

    records: Sequence[CameraAttribution]
    classes: list[int | None] | None
    reliance: CameraReliance | None
    kept: tuple[dict[str, torch.Tensor], ...]
    size: int


@dataclass(eq=False)
class DatasetAccumulator:
    """The partial of one or more batches, in the operations module's accumulator protocol.

    ``update(batch, model)`` explains one more batch in place; ``merge(other)`` appends
    ``other``'s batches (their sample ids renumbered after this one's) in place and returns
    ``self``, never changing ``other``; ``finish(percentiles)`` returns a
    :class:`DatasetExplanation`. Both parts are optional, so one shape serves maps only,
    reliance only, or both. The fold depends only on the batches and how they are split
    into tasks, so the same tasks give equal records wherever they run.
    """

    request: _Request
    aggregate: AttributionAggregate | None = None
    reliance: RelianceSummary | None = None
    batches: int = 0
    samples: int = 0
    kept: tuple[KeptSample, ...] = ()
    pending: list[tuple[Sequence[CameraAttribution], list[int | None] | None]] = field(
        default_factory=list
    )
    pending_samples: int = 0

    def __post_init__(self) -> None:
        if self.request.maps and self.aggregate is None:
            r = self.request
            self.aggregate = AttributionAggregate(r.method, bins=r.bins, top_k=r.top_k)

    def update(self, batch: Any, model: nn.Module | None = None) -> Self:
        """Explain one batch with ``model`` and fold it in."""
        if model is None:
            raise ValueError("DatasetAccumulator.update needs the model to explain the batch.")
        return self.add(_explain_batch(model, batch, self.request))

    def add(self, explained: _Explained) -> Self:
        """Fold one explained batch in, after the batches already here."""
        if self.request.maps:
            self.pending.append((explained.records, explained.classes))
            self.pending_samples += explained.size
            if self.pending_samples >= FOLD_SAMPLES:
                self.flush()
        if explained.reliance is not None:
            found = explained.reliance
            self.reliance = (self.reliance or RelianceSummary(found.camera_keys)).update(found)
        free = self.request.keep_samples - len(self.kept)
        if free > 0:
            self.kept = (
                *self.kept,
                *(
                    KeptSample(self.samples + i, _sample_label(self.batches, i), images)
                    for i, images in enumerate(explained.kept[:free])
                ),
            )
        self.batches += 1
        self.samples += explained.size
        return self

    def flush(self) -> Self:
        """Fold the buffered batches into the histograms now."""
        self.aggregate = self._folded()
        self.pending, self.pending_samples = [], 0
        return self

    def _folded(self) -> AttributionAggregate | None:
        if not self.pending or self.aggregate is None:
            return self.aggregate
        return self.aggregate.update_batches(self.pending)

    def merge(self, other: DatasetAccumulator) -> Self:
        """``other``'s batches after this one's (``other`` is not changed)."""
        if (
            other.request.maps != self.request.maps
            or other.request.reliance != self.request.reliance
        ):
            raise ValueError("cannot merge dataset partials of different requests.")
        self.flush()
        offset = self.samples
        theirs = other._folded()
        if theirs is not None:
            shifted = theirs.shifted(offset)
            self.aggregate = shifted if self.aggregate is None else self.aggregate.merge(shifted)
        if other.reliance is not None:
            self.reliance = (
                other.reliance if self.reliance is None else self.reliance.merge(other.reliance)
            )
        free = self.request.keep_samples - len(self.kept)
        if free > 0 and other.kept:
            moved = [
                KeptSample(s.sample_id + offset, _sample_label(self.batches + b, i), s.images)
                for s, (b, i) in zip(
                    other.kept[:free], [_parse_label(k.label) for k in other.kept], strict=False
                )
            ]
            self.kept = (*self.kept, *moved)
        self.batches += other.batches
        self.samples += other.samples
        return self

    def finish(self, percentiles: Sequence[float] = (50.0, 90.0)) -> DatasetExplanation:
        """The record (raises ``ValueError`` when no batch was folded and reliance was asked)."""
        r = self.request
        checked = check_percentiles(percentiles)
        if r.reliance and self.reliance is None:
            raise ValueError("the batches are empty; nothing to explain.")
        folded = self._folded()
        aggregate = folded or AttributionAggregate(r.method, bins=r.bins, top_k=r.top_k)
        reliance = self.reliance or RelianceSummary(())
        return DatasetExplanation(
            method=r.method,
            baseline=r.baseline_label,
            batches=self.batches,
            samples=self.samples,
            percentiles=checked,
            aggregate=aggregate,
            reliance=reliance,
            map_statistics=aggregate.finish(checked) if r.maps else (),
            reliance_statistics=reliance.finish(),
            kept=self.kept,
            nonfinite_maps=aggregate.nonfinite_maps,
        )


def _sample_label(batch: int, index: int) -> str:
    return f"batch {batch} #{index}"


def _parse_label(label: str) -> tuple[int, int]:
    batch, _, index = label.removeprefix("batch ").partition(" #")
    return int(batch), int(index)


@dataclass(frozen=True, eq=False)
class _Request:
    """What every batch of one operation is explained with (picklable for an executor)."""

    maps: bool
    reliance: bool
    targets: tuple[CameraExplanationTarget, ...] = ()
    score: int | OutputScore | None = None
    method: str = "grad_cam"
    bins: int = 32
    top_k: int = 5
    baseline: Any = "zeros"
    baseline_label: str = "zeros"
    cameras: tuple[str, ...] | None = None
    forward: Forward | None = None
    batch_images: BatchImages | None = None
    batch_labels: BatchLabels | None = None
    channel_batch_size: int = 32
    keep_samples: int = 0


def _explain_batch(model: nn.Module, batch: Any, request: _Request) -> _Explained:
    """One batch explained (maps, reliance, the first samples' images), not yet folded."""
    to_images = request.batch_images or batch_camera_images
    labels = (request.batch_labels or _default_batch_labels)(batch)
    images = to_images(batch)
    records: Sequence[CameraAttribution] = ()
    classes: list[int | None] | None = None
    size = 0
    if request.maps:
        recorder = _ClassRecorder(request.score, labels)
        records = explain_cameras(
            model,
            images,
            recorder,
            request.targets,
            method=request.method,
            forward=request.forward,
            channel_batch_size=request.channel_batch_size,
        )
        found_classes = recorder.classes
        classes = None if found_classes is None else [int(c) for c in found_classes.tolist()]
        size = max((r.sample_index for r in records), default=-1) + 1
    reliance: CameraReliance | None = None
    if request.reliance:
        reliance = camera_reliance(
            model,
            images,
            request.score,
            baseline=request.baseline,
            cameras=request.cameras,
            labels=labels,
            forward=request.forward,
        )
        size = len(reliance.scores)
    kept: tuple[dict[str, torch.Tensor], ...] = ()
    if request.keep_samples > 0:
        tensors = camera_image_batches(images)
        kept = tuple(
            {key: value[i : i + 1].detach().cpu() for key, value in tensors.items()}
            for i in range(min(request.keep_samples, size))
        )
    return _Explained(records, classes, reliance, kept, size)


# -- the mean image -------------------------------------------------------------------------


@dataclass(eq=False)
class _MeanAccumulator:
    """float64 per-camera sums and the sample count, merged by addition in order."""

    batch_images: BatchImages | None
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    count: int = 0

    def update(self, batch: Any) -> Self:
        images = camera_image_batches((self.batch_images or batch_camera_images)(batch))
        for key, tensor in images.items():
            total = tensor.detach().to("cpu", torch.float64).sum(dim=0)
            self.sums[key] = self.sums[key] + total if key in self.sums else total
        self.count += next(iter(images.values())).shape[0] if images else 0
        return self

    def merge(self, other: _MeanAccumulator) -> Self:
        for key, total in other.sums.items():
            self.sums[key] = self.sums[key] + total if key in self.sums else total.clone()
        self.count += other.count
        return self

    def finish(self) -> dict[str, torch.Tensor]:
        if not self.count:
            raise ValueError("camera_image_means: the batches are empty.")
        return {key: (value / self.count).to(torch.float32) for key, value in self.sums.items()}
