"""Shared fixtures: the demo three-camera model in each capture mode, and its images."""

from __future__ import annotations

import pytest
import torch

from vinlens.attribution import VisionCaptureMode
from vinlens.demo import MultiCameraDemoModel, make_camera_images

MODES = [mode.value for mode in VisionCaptureMode]

# Evidence blob centres (row, col) per camera, away from the borders.
EVIDENCE = {"rgb": (30, 62), "slam-left": (56, 20), "slam-right": (22, 44)}


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def model(mode: str) -> MultiCameraDemoModel:
    return MultiCameraDemoModel(mode, seed=0)


@pytest.fixture
def images() -> dict[str, torch.Tensor]:
    return make_camera_images(2, evidence=EVIDENCE, seed=3)
