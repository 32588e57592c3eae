"""Attribution over a data slice, streamed: per-camera map statistics and camera reliance.

Two questions one heatmap cannot answer:

* **What does each camera usually look at?** :func:`aggregate_attributions` runs
  :func:`~vinlens.attribution.explain_cameras` on every batch of a ``DataLoader`` (or
  any iterable of batches) and folds the maps into an :class:`AttributionAggregate`:
  per camera and per class, the mean map, per-pixel percentile maps and the ``k``
  samples whose map is most and least concentrated.
* **Which camera does the model rely on?** :func:`camera_reliance` replaces one camera's
  input at a time by a baseline (zeros, a dataset mean, or a callable) and measures
  how much the score drops, per sample; :func:`camera_reliance_over` folds that over
  a slice into a :class:`RelianceSummary`.

Both fold into frozen, picklable records with ``update`` / ``merge`` / ``finish``, so a
slice can be split over workers and merged; memory does not grow with the number of
batches:

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
* Reliance keeps per camera the count, mean and M2 of the score drop and of the
  relative drop, merged with Chan's formula.

Sample ids default to the running position in the slice (``0, 1, ...`` in batch
order); pass ``first_sample_id`` when folding a shard that starts elsewhere, so merged
ids stay global.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from vinlens.attribution.explain import (
    CameraAttribution,
    OutputScore,
    _output_score,
    explain_cameras,
)
from vinlens.attribution.images import ImageLike, camera_image_batches
from vinlens.attribution.methods import explanation_mode
from vinlens.attribution.registry import METHOD_REGISTRY
from vinlens.attribution.targets import CameraExplanationTarget
from vinlens.operations import chan_merge

__all__ = [
    "RELIANCE_BASELINES",
    "AttributionAggregate",
    "CameraMapStatistics",
    "CameraReliance",
    "CameraRelianceStatistics",
    "ConcentrationSample",
    "MapAccumulator",
    "RelianceSummary",
    "aggregate_attributions",
    "batch_camera_images",
    "camera_image_means",
    "camera_reliance",
    "camera_reliance_over",
    "map_concentration",
]

_TOP_SHARE = 0.1
# aggregate_attributions folds explained batches into the histograms in groups of about
# this many samples; the buffered records (with their image-size maps) stay a few MB.
_FOLD_SAMPLES = 64
_RELATIVE_EPS = 1e-8
RELIANCE_BASELINES: tuple[str, ...] = ("zeros", "mean")
"""Named baselines :func:`camera_reliance_over` accepts (plus a mapping or a callable)."""

Baseline = str | Mapping[str, torch.Tensor] | Callable[[str, torch.Tensor], torch.Tensor]
BatchImages = Callable[[Any], Mapping[str, ImageLike]]
BatchLabels = Callable[[Any], torch.Tensor | None]


# -- map statistics -------------------------------------------------------------------------


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
    """

    camera_key: str
    class_index: int | None
    count: int
    map_sum: np.ndarray
    histogram: np.ndarray
    most: tuple[ConcentrationSample, ...]
    least: tuple[ConcentrationSample, ...]
    top_k: int

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
        count = len(values)
        if len(sample_ids) != count:
            raise ValueError(f"{len(sample_ids)} sample ids for {count} maps.")
        if not count:
            return self
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
    """

    camera_key: str
    class_index: int | None
    count: int
    mean_map: np.ndarray
    percentile_maps: Mapping[float, np.ndarray]
    most_concentrated: tuple[ConcentrationSample, ...]
    least_concentrated: tuple[ConcentrationSample, ...]


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


# -- driving a DataLoader -------------------------------------------------------------------


def batch_camera_images(batch: Any) -> Mapping[str, ImageLike]:
    """The camera mapping of a loader batch, as the dataset functions read it by default.

    A batch that is a mapping camera key -> images is returned as is; for
    ``(images, labels, ...)`` the first item is returned. Anything else raises a
    ``TypeError`` that says to pass ``batch_images``.
    """
    if isinstance(batch, Mapping):
        return batch
    if isinstance(batch, list | tuple) and batch and isinstance(batch[0], Mapping):
        return batch[0]
    raise TypeError(
        f"a batch of type {type(batch).__name__} is neither a mapping camera key -> images nor "
        "(images, labels, ...); pass batch_images=fn that returns the camera mapping."
    )


def _default_batch_labels(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, list | tuple) and len(batch) > 1 and isinstance(batch[1], torch.Tensor):
        return batch[1]
    return None


class _ClassRecorder:
    """Score callable that also notes each sample's class from the first (unperturbed) output.

    With ``score=None`` it explains each sample's own class (its label, else the model's
    prediction); it understands outputs of a batch repeated ``r`` times (Ablation-CAM).
    """

    def __init__(self, score: int | OutputScore | None, labels: torch.Tensor | None) -> None:
        self.score = None if score is None else _output_score(score)
        self.classes: torch.Tensor | None = None if labels is None else labels.reshape(-1)

    def __call__(self, output: Any) -> torch.Tensor:
        if self.classes is None:
            if isinstance(output, torch.Tensor) and output.ndim == 2:
                self.classes = output.detach().argmax(dim=1)
            elif self.score is None:
                raise ValueError(
                    "score=None explains each sample's own class, which needs a model output of "
                    "shape [B, classes] or labels in the batch; pass a score."
                )
        if self.score is None:
            assert self.classes is not None
            classes = self.classes.to(output.device)
            repeats = output.shape[0] // classes.shape[0]
            picked: torch.Tensor = output.gather(1, classes.repeat(repeats)[:, None]).squeeze(1)
            return picked
        return self.score(output)


def aggregate_attributions(
    model: nn.Module,
    batches: Iterable[Any],
    targets: Sequence[CameraExplanationTarget],
    *,
    score: int | OutputScore | None = None,
    method: str = "grad_cam",
    bins: int = 32,
    top_k: int = 5,
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
    batch_images: BatchImages | None = None,
    batch_labels: BatchLabels | None = None,
    first_sample_id: int = 0,
    channel_batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> AttributionAggregate:
    """Fold :func:`explain_cameras` over every batch into an :class:`AttributionAggregate`.

    Args:
        model: The model (see :func:`explain_cameras` for what happens to it).
        batches: A ``DataLoader`` or any iterable of batches. A batch is a mapping camera
            key -> images ``[B, C, H, W]``, or ``(images, labels, ...)``; otherwise pass
            ``batch_images`` (and ``batch_labels``).
        targets: One target per camera to explain.
        score: What to explain: a class index, a callable on the model output, or
            ``None`` for each sample's own class (its label, else the prediction).
        method: A name in :data:`~vinlens.attribution.registry.METHOD_REGISTRY`.
        bins: Histogram bins per cell for the percentile maps.
        top_k: Samples kept as most and least concentrated per camera and class.
        forward: How to run the model on the camera mapping.
        batch_images: ``batch -> mapping camera key -> images``.
        batch_labels: ``batch -> labels [B]`` (or ``None``); a sample's class is its label,
            else the model's predicted class, else ``None`` (no grouping).
        first_sample_id: Id of the first sample (for shards folded apart and merged).
        channel_batch_size: Ablation-CAM channels per forward.
        progress: Called with the number of batches done after each batch.

    Returns:
        The aggregate; call :meth:`AttributionAggregate.finish` for the maps.
    """
    to_images = batch_images or batch_camera_images
    to_labels = batch_labels or _default_batch_labels
    aggregate = AttributionAggregate(method, bins=bins, top_k=top_k)
    pending: list[tuple[Sequence[CameraAttribution], list[int | None] | None]] = []
    pending_samples = 0
    for done, batch in enumerate(batches, start=1):
        recorder = _ClassRecorder(score, to_labels(batch))
        records = explain_cameras(
            model,
            to_images(batch),
            recorder,
            targets,
            method=method,
            forward=forward,
            channel_batch_size=channel_batch_size,
        )
        classes = recorder.classes
        pending.append((records, None if classes is None else [int(c) for c in classes.tolist()]))
        pending_samples += len(records) // max(1, len(targets))
        # Fold a bounded buffer of batches at once: memory stays independent of the
        # number of batches, and each histogram is copied once per buffer.
        if pending_samples >= _FOLD_SAMPLES:
            aggregate = aggregate.update_batches(
                pending, first_sample_id=first_sample_id + aggregate.samples
            )
            pending, pending_samples = [], 0
        if progress is not None:
            progress(done)
    if pending:
        aggregate = aggregate.update_batches(
            pending, first_sample_id=first_sample_id + aggregate.samples
        )
    return aggregate


# -- camera reliance ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CameraReliance:
    """Score drops of one batch when each camera's input is replaced by a baseline.

    Attributes:
        camera_keys: Cameras, in the order of ``drops``' columns.
        baseline: ``"zeros"``, or the type name of the mapping or callable given.
        scores: float64 ``[B]`` unperturbed scores.
        drops: float64 ``[B, C]``: score minus the score with that camera replaced.
        classes: ``[B]`` class explained per sample, or ``None``.
    """

    camera_keys: tuple[str, ...]
    baseline: str
    scores: np.ndarray
    drops: np.ndarray
    classes: tuple[int, ...] | None

    @property
    def relative_drops(self) -> np.ndarray:
        """``drops / |scores|`` (scores near zero guarded)."""
        denominator = np.maximum(np.abs(self.scores), _RELATIVE_EPS)[:, None]
        relative: np.ndarray = self.drops / denominator
        return relative

    def ranking(self) -> tuple[str, ...]:
        """Cameras by mean drop over the batch, largest first (ties by camera order)."""
        means = self.drops.mean(axis=0)
        order = sorted(range(len(self.camera_keys)), key=lambda i: (-means[i], i))
        return tuple(self.camera_keys[i] for i in order)


def _baseline_tensor(baseline: Baseline, camera: str, images: torch.Tensor) -> torch.Tensor:
    if isinstance(baseline, str):
        if baseline == "zeros":
            return torch.zeros_like(images)
        raise ValueError(
            f"baseline={baseline!r}: camera_reliance takes 'zeros', a mapping camera key -> "
            "image (e.g. camera_image_means(...)) or a callable (camera, images) -> images; "
            "'mean' is resolved by camera_reliance_over."
        )
    if isinstance(baseline, Mapping):
        if camera not in baseline:
            raise ValueError(
                f"baseline mapping has no image for camera {camera!r}; it has {sorted(baseline)}."
            )
        value = torch.as_tensor(baseline[camera]).to(images.device, images.dtype)
    elif callable(baseline):
        value = baseline(camera, images)
    else:
        raise TypeError(f"baseline must be a string, a mapping or a callable, got {baseline!r}.")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"baseline for camera {camera!r} is {type(value).__name__}, not a tensor.")
    try:
        expanded = value.to(images.device, images.dtype).expand_as(images)
    except RuntimeError:
        raise ValueError(
            f"baseline for camera {camera!r} has shape {tuple(value.shape)}, which does not "
            f"broadcast to the camera's images {tuple(images.shape)}."
        ) from None
    return expanded


def _model_device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def camera_reliance(
    model: nn.Module,
    images: Mapping[str, ImageLike],
    score: int | OutputScore | None = None,
    *,
    baseline: Baseline = "zeros",
    cameras: Sequence[str] | None = None,
    labels: torch.Tensor | None = None,
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
) -> CameraReliance:
    """How much the score drops when each camera's input is replaced by ``baseline``.

    One unperturbed forward and one per camera, in eval mode without gradients (the
    model's flags come back unchanged).

    Args:
        model: The model.
        images: Camera key -> images (all cameras the model needs).
        score: Class index, callable on the output, or ``None`` for each sample's own
            class (``labels`` if given, else the unperturbed prediction; the same class
            is scored in every perturbed forward).
        baseline: ``"zeros"``, a mapping camera key -> image broadcastable to the camera's
            images (e.g. the dataset mean from :func:`camera_image_means`), or a callable
            ``(camera_key, images) -> images``.
        cameras: Cameras to test; defaults to every camera in ``images``.
        labels: Per-sample classes for ``score=None``.
        forward: How to run the model on the camera mapping.
    """
    batches = camera_image_batches(images, device=_model_device(model))
    keys = list(batches) if cameras is None else list(cameras)
    unknown = [key for key in keys if key not in batches]
    if unknown:
        raise ValueError(f"cameras {unknown} have no images; images has {list(batches)}.")
    run = forward if forward is not None else model
    recorder = _ClassRecorder(score, labels)
    with explanation_mode(model, enable_parameter_grads=False), torch.no_grad():
        base = _scores(recorder(run(batches)), "score")
        drops = []
        for key in keys:
            replacement = _baseline_tensor(baseline, key, batches[key])
            perturbed = _scores(recorder(run({**batches, key: replacement})), "score")
            drops.append(base - perturbed)
    classes = recorder.classes
    return CameraReliance(
        camera_keys=tuple(keys),
        baseline=baseline if isinstance(baseline, str) else type(baseline).__name__,
        scores=base.cpu().numpy(),
        drops=torch.stack(drops, dim=1).cpu().numpy() if drops else np.zeros((len(base), 0)),
        classes=None if classes is None else tuple(int(c) for c in classes.tolist()),
    )


def _scores(value: Any, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.ndim > 1:
        raise ValueError(
            f"{what} must be a floating tensor with one score per sample, got "
            f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}."
        )
    return value.detach().reshape(-1).to(torch.float64)


@dataclass(frozen=True)
class CameraRelianceStatistics:
    """One camera's reliance over a slice: mean and standard deviation of the drops."""

    camera_key: str
    count: int
    mean_drop: float
    std_drop: float
    mean_relative_drop: float
    std_relative_drop: float


@dataclass(frozen=True, eq=False)
class RelianceSummary:
    """Mergeable reliance over a slice: per camera count, mean and M2 of absolute and relative drops.

    Attributes:
        camera_keys: Cameras, in column order.
        count: Samples folded in.
        mean: float64 ``[2, C]``: mean drop (row 0) and mean relative drop (row 1).
        m2: float64 ``[2, C]``: sums of squared deviations, as ``mean``.
    """

    camera_keys: tuple[str, ...]
    count: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None

    def update(self, reliance: CameraReliance) -> RelianceSummary:
        """This summary with one batch's :class:`CameraReliance` folded in."""
        if reliance.camera_keys != self.camera_keys:
            raise ValueError(
                f"reliance over cameras {list(reliance.camera_keys)} does not fit a summary of "
                f"{list(self.camera_keys)}."
            )
        values = np.stack([reliance.drops, reliance.relative_drops])  # [2, B, C]
        count = values.shape[1]
        if not count:
            return self
        mean = values.mean(axis=1)
        m2 = ((values - mean[:, None, :]) ** 2).sum(axis=1)
        return self.merge(RelianceSummary(self.camera_keys, count, mean, m2))

    def merge(self, other: RelianceSummary) -> RelianceSummary:
        """Both slices together (Chan's parallel formula)."""
        if other.camera_keys != self.camera_keys:
            raise ValueError(
                f"cannot merge reliance over {list(other.camera_keys)} into {list(self.camera_keys)}."
            )
        if other.count == 0 or other.mean is None or other.m2 is None:
            return self
        if self.count == 0 or self.mean is None or self.m2 is None:
            return other
        mean, m2 = chan_merge(self.count, self.mean, self.m2, other.count, other.mean, other.m2)
        return RelianceSummary(self.camera_keys, self.count + other.count, mean, m2)

    def finish(self) -> tuple[CameraRelianceStatistics, ...]:
        """Per-camera statistics, largest mean drop first (ties by camera order)."""
        if not self.count or self.mean is None or self.m2 is None:
            return ()
        std = np.sqrt(self.m2 / self.count)
        stats = [
            CameraRelianceStatistics(
                key,
                self.count,
                float(self.mean[0, i]),
                float(std[0, i]),
                float(self.mean[1, i]),
                float(std[1, i]),
            )
            for i, key in enumerate(self.camera_keys)
        ]
        order = sorted(range(len(stats)), key=lambda i: (-stats[i].mean_drop, i))
        return tuple(stats[i] for i in order)

    def ranking(self) -> tuple[str, ...]:
        """Cameras by mean drop over the slice, largest first."""
        return tuple(s.camera_key for s in self.finish())


def camera_image_means(
    batches: Iterable[Any], *, batch_images: BatchImages | None = None
) -> dict[str, torch.Tensor]:
    """Per-camera mean image ``[C, H, W]`` (float64 sums, one pass, memory of one image each)."""
    to_images = batch_images or batch_camera_images
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for batch in batches:
        images = camera_image_batches(to_images(batch))
        for key, tensor in images.items():
            total = tensor.to(torch.float64).sum(dim=0)
            sums[key] = sums[key] + total if key in sums else total
        count += next(iter(images.values())).shape[0]
    if not count:
        raise ValueError("camera_image_means: the batches are empty.")
    return {key: (value / count).to(torch.float32) for key, value in sums.items()}


def camera_reliance_over(
    model: nn.Module,
    batches: Iterable[Any],
    score: int | OutputScore | None = None,
    *,
    baseline: Baseline = "zeros",
    cameras: Sequence[str] | None = None,
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
    batch_images: BatchImages | None = None,
    batch_labels: BatchLabels | None = None,
) -> RelianceSummary:
    """Fold :func:`camera_reliance` over every batch into a :class:`RelianceSummary`.

    ``baseline="mean"`` uses the slice's own mean image per camera
    (:func:`camera_image_means`), which needs a second pass: ``batches`` must then be
    re-iterable (a ``DataLoader`` or a list, not a generator).
    """
    to_images = batch_images or batch_camera_images
    to_labels = batch_labels or _default_batch_labels
    if isinstance(baseline, str) and baseline not in RELIANCE_BASELINES:
        raise ValueError(
            f"baseline={baseline!r} is not one of {list(RELIANCE_BASELINES)}, a mapping or a "
            "callable."
        )
    if baseline == "mean":
        if iter(batches) is batches:
            raise ValueError(
                "baseline='mean' needs two passes over the batches, but they are a one-shot "
                "iterator; pass a DataLoader or list, or a mapping from camera_image_means()."
            )
        baseline = camera_image_means(batches, batch_images=to_images)
    summary: RelianceSummary | None = None
    for batch in batches:
        reliance = camera_reliance(
            model,
            to_images(batch),
            score,
            baseline=baseline,
            cameras=cameras,
            labels=to_labels(batch),
            forward=forward,
        )
        summary = (summary or RelianceSummary(reliance.camera_keys)).update(reliance)
    if summary is None:
        raise ValueError("camera_reliance_over: the batches are empty.")
    return summary
