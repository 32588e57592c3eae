"""A small deterministic three-camera classifier usable in every capture mode.

The model mirrors how real multi-camera VIN models route cameras through a backbone,
so each :class:`~vinlens.attribution.targets.VisionCaptureMode` has a concrete
example:

* ``dedicated_layer``: one encoder per camera (``encoders.<camera>.conv3``); the RGB
  encoder takes 3 channels, the SLAM encoders 1.
* ``per_camera_call``: one shared encoder (``encoder.conv3``) called once per camera
  in :data:`~vinlens.demo.images.CAMERA_KEYS` order; grayscale SLAM images are repeated
  to 3 channels, sizes stay as they are.
* ``stacked_camera_batch``: one shared encoder called once on all cameras stacked
  batch-major (``[s0_rgb, s0_left, s0_right, s1_rgb, ...]``). Stacking needs equal
  shapes, so SLAM images are repeated to 3 channels and bilinearly resized to the RGB
  size (96x96). Resizing (not padding) keeps every map cell over real image content,
  so a map is brought back to its camera with a plain bilinear resize.

Weights are random from a seeded generator except for one designed path: channel 0
of ``conv1`` is a difference-of-Gaussians blob detector with a threshold bias,
``conv2``/``conv3`` pass channel 0 through, and the head's
:data:`EVIDENCE_CLASS` logit weighs each camera's pooled channel 0 heavily. So the
evidence score rises when a bright blob is planted
(:func:`~vinlens.demo.images.make_camera_images`), and a faithful attribution map of
that camera peaks over the blob.

A camera with no planted blob gets a near-flat map by design: its blob channel stays
below the detector threshold, so the CAM layer holds only the constant floor
``_CAM_CHANNEL_FLOOR`` there, and the evidence logit weighs the other (random)
channels some 10^5 times less than the blob channel. Its raw map spans a range hundreds of
times narrower than a planted camera's (e.g. ``slam-right`` in the tour's views, which
plant blobs in ``rgb`` and ``slam-left``), which is what a viewer's flat-map mark
(:func:`~vinlens.attribution.map_flatness`) is for. Replacing a planted camera's
input by zeros drops the evidence score by about one logit, any other camera's by
almost nothing, so camera reliance ranks the planted camera first.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from vinlens.attribution.targets import (
    CameraExplanationTarget,
    VisionCaptureMode,
    camera_targets_for_layer,
)
from vinlens.demo.images import CAMERA_SHAPES, EVIDENCE_AMPLITUDE, EVIDENCE_SIGMA

__all__ = [
    "CLASS_NAMES",
    "EVIDENCE_CLASS",
    "CameraEncoder",
    "MultiCameraDemoModel",
]

CLASS_NAMES: tuple[str, ...] = ("evidence", "ramp", "shapes", "texture")
EVIDENCE_CLASS = 0
"""Logit index that responds to planted evidence blobs."""

_DETECTOR_KERNEL = 9
_DETECTOR_PEAK = 2.0  # conv1 channel-0 response at the centre of a planted blob
_DETECTOR_THRESHOLD = 0.95  # bias subtracted so ramps and large shapes stay below zero
_EVIDENCE_HEAD_WEIGHT = 1000.0  # pooled means are small: a blob covers ~1/1000 of the map
_CAM_CHANNEL_FLOOR = 0.001


def _gaussian_kernel(size: int, sigma: float) -> torch.Tensor:
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    kernel = g[:, None] * g[None, :]
    return kernel / kernel.sum()


def _blob_detector_kernel() -> torch.Tensor:
    """Difference of Gaussians scaled so a planted blob's centre responds with ``_DETECTOR_PEAK``.

    The kernel sums to zero, so smooth ramps give no response at all.
    """
    dog = _gaussian_kernel(_DETECTOR_KERNEL, 1.5) - _gaussian_kernel(_DETECTOR_KERNEL, 3.5)
    coords = torch.arange(_DETECTOR_KERNEL, dtype=torch.float64) - (_DETECTOR_KERNEL - 1) / 2
    distance2 = coords[:, None] ** 2 + coords[None, :] ** 2
    blob = EVIDENCE_AMPLITUDE * torch.exp(-distance2 / (2 * EVIDENCE_SIGMA**2))
    response = float((dog * blob).sum())
    return (dog * (_DETECTOR_PEAK / response)).to(torch.float32)


class CameraEncoder(nn.Module):
    """Three conv layers; ``conv3`` (``[B, width, H/2, W/2]``) is the usual CAM layer."""

    def __init__(self, in_channels: int, width: int, generator: torch.Generator) -> None:
        super().__init__()
        if width < 2:
            raise ValueError(f"width must be >= 2, got {width}.")
        # Stride 2 in the first layer keeps the 9x9 detector cheap; conv2/conv3 stay at H/2.
        self.conv1 = nn.Conv2d(
            in_channels, 8, _DETECTOR_KERNEL, stride=2, padding=_DETECTOR_KERNEL // 2
        )
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)
        self.act2 = nn.ReLU()
        self.conv3 = nn.Conv2d(width, width, 3, padding=1)
        self.act3 = nn.ReLU()
        self._init_weights(in_channels, generator)

    @torch.no_grad()
    def _init_weights(self, in_channels: int, generator: torch.Generator) -> None:
        for conv in (self.conv1, self.conv2, self.conv3):
            fan_in = conv.weight[0].numel()
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator) / fan_in**0.5)
            assert conv.bias is not None
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=generator) * 0.05)
        # Channel 0: blob detector on luminance, thresholded, then passed straight through.
        self.conv1.weight[0] = _blob_detector_kernel().expand(in_channels, -1, -1) / in_channels
        assert self.conv1.bias is not None and self.conv2.bias is not None
        assert self.conv3.bias is not None
        self.conv1.bias[0] = -_DETECTOR_THRESHOLD
        for conv in (self.conv2, self.conv3):
            conv.weight[0].zero_()
            conv.weight[0, 0, 1, 1] = 1.0
            bias = conv.bias
            assert bias is not None
            bias[0] = 0.0
        # A small positive floor keeps channel 0 above act3's ReLU everywhere, so the
        # evidence logit's gradient reaches every cell of the CAM layer, not only the blob.
        self.conv3.bias[0] = _CAM_CHANNEL_FLOOR

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.conv1(image))
        x = self.act2(self.bn2(self.conv2(x)))
        features: torch.Tensor = self.act3(self.conv3(x))
        return features


class MultiCameraDemoModel(nn.Module):
    """Classifier over the rgb, slam-left and slam-right cameras: ``forward(images) -> [B, 4]``.

    Args:
        capture_mode: How cameras reach the encoder (see the module docstring); a
            :class:`VisionCaptureMode` or its string value.
        width: Channels of ``conv2``/``conv3`` (the CAM layer).
        seed: Seed of the weight generator; the same seed gives identical weights.
        camera_shapes: Camera key -> ``(C, H, W)`` the model accepts.
    """

    def __init__(
        self,
        capture_mode: VisionCaptureMode | str = VisionCaptureMode.DEDICATED_LAYER,
        *,
        width: int = 16,
        seed: int = 0,
        camera_shapes: Mapping[str, tuple[int, int, int]] = CAMERA_SHAPES,
    ) -> None:
        super().__init__()
        valid_modes = [mode.value for mode in VisionCaptureMode]
        if capture_mode not in valid_modes:
            raise ValueError(f"capture_mode={capture_mode!r} is not one of {valid_modes}.")
        self.capture_mode = VisionCaptureMode(capture_mode)
        self.camera_shapes = dict(camera_shapes)
        self.camera_keys: tuple[str, ...] = tuple(self.camera_shapes)
        self.width = width
        generator = torch.Generator().manual_seed(seed)
        if self.capture_mode is VisionCaptureMode.DEDICATED_LAYER:
            self.encoders = nn.ModuleDict(
                {
                    key: CameraEncoder(shape[0], width, generator)
                    for key, shape in self.camera_shapes.items()
                }
            )
        else:
            self.encoder = CameraEncoder(3, width, generator)
        self.head = nn.Linear(len(self.camera_keys) * width, len(CLASS_NAMES))
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.05)
            self.head.bias.zero_()
            # Evidence logit: mostly each camera's blob channel, a little of the rest.
            self.head.weight[EVIDENCE_CLASS] *= 0.2
            self.head.weight[EVIDENCE_CLASS, 0::width] = _EVIDENCE_HEAD_WEIGHT
        # The weights are final (designed, not trained), so start in eval mode: batch
        # norm must use its running statistics for the blob channel to pass through.
        self.eval()

    def layer_path(self, camera_key: str, layer: str = "conv3") -> str:
        """Module path of ``layer`` in the encoder that sees ``camera_key``."""
        self._check_camera(camera_key)
        if self.capture_mode is VisionCaptureMode.DEDICATED_LAYER:
            return f"encoders.{camera_key}.{layer}"
        return f"encoder.{layer}"

    def camera_targets(self, layer: str = "conv3") -> tuple[CameraExplanationTarget, ...]:
        """One attribution target per camera at ``layer`` of the encoder(s)."""
        path: str | dict[str, str]
        if self.capture_mode is VisionCaptureMode.DEDICATED_LAYER:
            path = {key: self.layer_path(key, layer) for key in self.camera_keys}
        else:
            path = f"encoder.{layer}"
        return camera_targets_for_layer(path, self.capture_mode, self.camera_keys)

    def _check_camera(self, camera_key: str) -> None:
        if camera_key not in self.camera_shapes:
            raise ValueError(
                f"Unknown camera {camera_key!r}; expected one of {list(self.camera_keys)}."
            )

    def _checked_images(self, images: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        missing = [key for key in self.camera_keys if key not in images]
        if missing:
            raise ValueError(f"images is missing cameras {missing}; got {sorted(images)}.")
        checked = []
        batch_size: int | None = None
        for key in self.camera_keys:
            image = images[key]
            expected = self.camera_shapes[key]
            if image.ndim != 4 or tuple(image.shape[1:]) != expected:
                raise ValueError(
                    f"Camera {key!r} image has shape {tuple(image.shape)}, expected "
                    f"[B, {', '.join(map(str, expected))}]."
                )
            if batch_size is not None and image.shape[0] != batch_size:
                raise ValueError(
                    f"Camera {key!r} has batch size {image.shape[0]}, other cameras {batch_size}."
                )
            batch_size = image.shape[0]
            checked.append(image)
        return checked

    def forward(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        camera_images = self._checked_images(images)
        batch_size = camera_images[0].shape[0]
        if self.capture_mode is VisionCaptureMode.DEDICATED_LAYER:
            features = [
                self.encoders[key](image).mean(dim=(2, 3))
                for key, image in zip(self.camera_keys, camera_images, strict=True)
            ]
        elif self.capture_mode is VisionCaptureMode.PER_CAMERA_CALL:
            features = [
                self.encoder(image.expand(-1, 3, -1, -1)).mean(dim=(2, 3))
                for image in camera_images
            ]
        else:
            height, width = self.camera_shapes[self.camera_keys[0]][1:]
            same_size = [
                F.interpolate(
                    image.expand(-1, 3, -1, -1),
                    size=(height, width),
                    mode="bilinear",
                    align_corners=False,
                )
                if tuple(image.shape[2:]) != (height, width)
                else image.expand(-1, 3, -1, -1)
                for image in camera_images
            ]
            stacked = torch.stack(same_size, dim=1).reshape(-1, 3, height, width)
            pooled = self.encoder(stacked).mean(dim=(2, 3))
            features = list(pooled.reshape(batch_size, len(self.camera_keys), -1).unbind(dim=1))
        logits: torch.Tensor = self.head(torch.cat(features, dim=1))
        return logits
