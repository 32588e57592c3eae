"""Demo material: a deterministic three-camera model and synthetic camera images.

Used by tests, notebooks and the demo command to exercise attribution and the
widgets without a real checkpoint or dataset.
"""

from __future__ import annotations

from vinlens.demo.images import CAMERA_KEYS, CAMERA_SHAPES, make_camera_images
from vinlens.demo.model import (
    CLASS_NAMES,
    EVIDENCE_CLASS,
    CameraEncoder,
    MultiCameraDemoModel,
)

__all__ = [
    "CAMERA_KEYS",
    "CAMERA_SHAPES",
    "CLASS_NAMES",
    "EVIDENCE_CLASS",
    "CameraEncoder",
    "MultiCameraDemoModel",
    "make_camera_images",
]
