"""Attribution over a data slice, streamed: per-camera map statistics and camera reliance.

Two questions one heatmap cannot answer:

* **What does each camera usually look at?** :func:`aggregate_attributions` runs
  :func:`~vinlens.attribution.explain_cameras` on every batch of a ``DataLoader`` (or
  any iterable of batches, or a sharded source on an executor) and folds the maps into
  an :class:`AttributionAggregate`: per camera and per class, the mean map, per-pixel
  percentile maps and the ``k`` samples whose map is most and least concentrated
  (:mod:`vinlens.attribution.maps`).
* **Which camera does the model rely on?** :func:`camera_reliance` replaces one camera's
  input at a time by a baseline (zeros, a dataset mean, or a callable) and measures
  how much the score drops, per sample; :func:`camera_reliance_over` folds that over
  a slice into a :class:`RelianceSummary` (:mod:`vinlens.attribution.reliance`).

Both run on the one operation shape (:mod:`vinlens.attribution.dataset`, over
:func:`vinlens.operations.run_operation`), as does :func:`explain_dataset`, which answers
both in one pass. This module keeps the names in one place; the concepts live in
``maps`` (map statistics), ``reliance`` (score drops), ``batches`` (reading a loader's
batches) and ``dataset`` (the operation).

Sample ids default to the running position in the slice (``0, 1, ...`` in batch
order); pass ``first_sample_id`` when folding a shard that starts elsewhere, so merged
ids stay global.
"""

from __future__ import annotations

from vinlens.attribution.batches import BatchImages, BatchLabels, batch_camera_images
from vinlens.attribution.dataset import (
    DatasetAccumulator,
    DatasetExplanation,
    KeptSample,
    aggregate_attributions,
    camera_image_means,
    camera_reliance_over,
    explain_dataset,
)
from vinlens.attribution.maps import (
    AttributionAggregate,
    CameraMapStatistics,
    ConcentrationSample,
    MapAccumulator,
    map_concentration,
)
from vinlens.attribution.reliance import (
    RELIANCE_BASELINES,
    Baseline,
    CameraReliance,
    CameraRelianceStatistics,
    RelianceSummary,
    camera_reliance,
)

__all__ = [
    "RELIANCE_BASELINES",
    "AttributionAggregate",
    "Baseline",
    "BatchImages",
    "BatchLabels",
    "CameraMapStatistics",
    "CameraReliance",
    "CameraRelianceStatistics",
    "ConcentrationSample",
    "DatasetAccumulator",
    "DatasetExplanation",
    "KeptSample",
    "MapAccumulator",
    "RelianceSummary",
    "aggregate_attributions",
    "batch_camera_images",
    "camera_image_means",
    "camera_reliance",
    "camera_reliance_over",
    "explain_dataset",
    "map_concentration",
]
