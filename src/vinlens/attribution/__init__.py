"""Per-camera attribution for multi-camera models: Grad-CAM, Grad-CAM++, Ablation-CAM.

Engine only (torch + numpy, no UI imports). :func:`explain_cameras` is the entry
point a viewer uses; :mod:`vinlens.attribution.methods` has the per-camera methods
and :mod:`vinlens.attribution.capture` the hook helpers they share.
"""

from __future__ import annotations

from vinlens.attribution.explain import (
    ATTRIBUTION_METHODS,
    CameraAttribution,
    check_camera_targets,
    explain_cameras,
    normalize_map,
)
from vinlens.attribution.flatness import MapFlatness, map_flatness
from vinlens.attribution.layout import LAYER_LAYOUTS, LayerLayoutError
from vinlens.attribution.methods import ablation_cam, grad_cam, grad_cam_plus_plus
from vinlens.attribution.targets import (
    CameraExplanationTarget,
    LayerTarget,
    VisionCaptureMode,
    camera_targets_for_layer,
)

__all__ = [
    "ATTRIBUTION_METHODS",
    "LAYER_LAYOUTS",
    "CameraAttribution",
    "CameraExplanationTarget",
    "LayerLayoutError",
    "LayerTarget",
    "MapFlatness",
    "VisionCaptureMode",
    "ablation_cam",
    "camera_targets_for_layer",
    "check_camera_targets",
    "explain_cameras",
    "grad_cam",
    "grad_cam_plus_plus",
    "map_flatness",
    "normalize_map",
]
