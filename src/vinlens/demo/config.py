"""A Pydantic configuration tree for the demo model, as a VIN training repo would have.

It has what real configs have and :func:`vinlens.model_inspection.inspect_config` must
handle: nested models, a list of per-camera models, an enum, a tuple, a mapping (recorded,
not entered), a ``target_type`` and a ``setup_target`` that builds the model. Inspection
never calls ``setup_target``; the notebooks call it to get the model.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from vinlens.attribution.targets import VisionCaptureMode
from vinlens.demo.images import CAMERA_SHAPES
from vinlens.demo.model import MultiCameraDemoModel

__all__ = ["CameraConfig", "CameraRole", "DemoVinConfig", "EncoderConfig", "OptimizerConfig"]


class CameraRole(enum.Enum):
    RGB = "rgb"
    SLAM = "slam"


class CameraConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    role: CameraRole
    channels: int = Field(ge=1)
    height: int = Field(ge=8)
    width: int = Field(ge=8)


class EncoderConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    width: int = Field(default=16, ge=2, description="Channels of conv2/conv3, the CAM layer.")
    capture_mode: VisionCaptureMode = VisionCaptureMode.DEDICATED_LAYER
    seed: int = 0


class OptimizerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    schedule: dict[str, float] = Field(
        default_factory=lambda: {"warmup_steps": 500.0, "decay": 0.1}
    )


def _default_cameras() -> list[CameraConfig]:
    return [
        CameraConfig(
            key=key,
            role=CameraRole.RGB if key == "rgb" else CameraRole.SLAM,
            channels=shape[0],
            height=shape[1],
            width=shape[2],
        )
        for key, shape in CAMERA_SHAPES.items()
    ]


class DemoVinConfig(BaseModel):
    """Root config: ``setup_target()`` builds :class:`~vinlens.demo.model.MultiCameraDemoModel`."""

    model_config = ConfigDict(frozen=True)

    target_type: ClassVar[type[MultiCameraDemoModel]] = MultiCameraDemoModel

    name: str = "aria-demo-vin"
    cameras: list[CameraConfig] = Field(default_factory=_default_cameras)
    encoder: EncoderConfig = EncoderConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    num_classes: int = 4

    def setup_target(self) -> MultiCameraDemoModel:
        shapes = {c.key: (c.channels, c.height, c.width) for c in self.cameras}
        return self.target_type(
            self.encoder.capture_mode,
            width=self.encoder.width,
            seed=self.encoder.seed,
            camera_shapes=shapes,
        )
