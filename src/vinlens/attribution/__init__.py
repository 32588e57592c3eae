"""Per-camera attribution for multi-camera models: Grad-CAM, Grad-CAM++, Ablation-CAM.

Engine only (torch + numpy, no UI imports). :func:`explain_cameras` is the entry
point a viewer uses; :mod:`vinlens.attribution.methods` has the per-camera methods
(listed in :mod:`vinlens.attribution.registry`), :mod:`vinlens.attribution.capture`
the hook helpers they share and :mod:`vinlens.attribution.layout` how a layer output
is read as a feature map. :mod:`vinlens.attribution.dataset` folds maps and camera
reliance over a whole data slice on the one operation shape (:func:`explain_dataset`;
:mod:`vinlens.attribution.aggregate` keeps the names together).
"""

from __future__ import annotations

from vinlens.attribution.aggregate import (
    AttributionAggregate,
    CameraMapStatistics,
    CameraReliance,
    CameraRelianceStatistics,
    DatasetExplanation,
    KeptSample,
    RelianceSummary,
    aggregate_attributions,
    batch_camera_images,
    camera_image_means,
    camera_reliance,
    camera_reliance_over,
    explain_dataset,
)
from vinlens.attribution.explain import (
    ATTRIBUTION_METHODS,
    CameraAttribution,
    check_camera_targets,
    explain_cameras,
    near_flat_cameras,
    normalize_map,
)
from vinlens.attribution.flatness import MapFlatness, map_flatness
from vinlens.attribution.images import ImageLike, camera_image_batches
from vinlens.attribution.layout import LAYER_LAYOUTS, LayerLayoutError
from vinlens.attribution.methods import ablation_cam, grad_cam, grad_cam_plus_plus
from vinlens.attribution.registry import METHOD_REGISTRY, AttributionMethod, method_labels
from vinlens.attribution.targets import (
    CAMERA_PLACEHOLDER,
    CameraExplanationTarget,
    LayerCalls,
    LayerChoice,
    LayerTarget,
    VisionCaptureMode,
    camera_layer_templates,
    camera_targets_for_layer,
    capture_modes_for_layer,
    layer_choices,
    probe_layer_calls,
)

__all__ = [
    "ATTRIBUTION_METHODS",
    "CAMERA_PLACEHOLDER",
    "LAYER_LAYOUTS",
    "METHOD_REGISTRY",
    "AttributionAggregate",
    "AttributionMethod",
    "CameraAttribution",
    "CameraExplanationTarget",
    "CameraMapStatistics",
    "CameraReliance",
    "CameraRelianceStatistics",
    "DatasetExplanation",
    "ImageLike",
    "KeptSample",
    "LayerCalls",
    "LayerChoice",
    "LayerLayoutError",
    "LayerTarget",
    "MapFlatness",
    "RelianceSummary",
    "VisionCaptureMode",
    "ablation_cam",
    "aggregate_attributions",
    "batch_camera_images",
    "camera_image_batches",
    "camera_image_means",
    "camera_layer_templates",
    "camera_reliance",
    "camera_reliance_over",
    "camera_targets_for_layer",
    "capture_modes_for_layer",
    "check_camera_targets",
    "explain_cameras",
    "explain_dataset",
    "grad_cam",
    "grad_cam_plus_plus",
    "layer_choices",
    "map_flatness",
    "method_labels",
    "near_flat_cameras",
    "normalize_map",
    "probe_layer_calls",
]
