"""Synthetic Aria-like camera images with visible structure and optional planted evidence.

Each camera image has a smooth brightness ramp, a few large low-contrast shapes
(rectangles, disks, rings) and, where the caller asks for it, one small bright
Gaussian "evidence" blob. The demo model's evidence class responds to such blobs,
so a faithful attribution map must light up where the blob was planted, which is
what tests and the viewer's pixel test check.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = [
    "CAMERA_KEYS",
    "CAMERA_SHAPES",
    "EVIDENCE_AMPLITUDE",
    "EVIDENCE_SIGMA",
    "make_camera_images",
]

# Channel, height, width per camera, after the Project Aria glasses: one RGB camera
# and two grayscale SLAM cameras (downscaled so tests run in milliseconds).
CAMERA_SHAPES: dict[str, tuple[int, int, int]] = {
    "rgb": (3, 96, 96),
    "slam-left": (1, 80, 64),
    "slam-right": (1, 80, 64),
}
CAMERA_KEYS: tuple[str, ...] = tuple(CAMERA_SHAPES)

EVIDENCE_SIGMA = 2.5
"""Standard deviation in pixels of the planted blob."""
EVIDENCE_AMPLITUDE = 0.8
"""Peak brightness added by the planted blob (images are clipped to [0, 1])."""

_SHAPES_PER_IMAGE = 4


def _background(channels: int, height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """Ramp plus large, low-contrast shapes: structure that is not evidence."""
    rows = torch.linspace(0.0, 1.0, height).reshape(height, 1)
    cols = torch.linspace(0.0, 1.0, width).reshape(1, width)
    angle = float(torch.rand((), generator=generator)) * 2 * torch.pi
    ramp = 0.25 + 0.1 * (
        torch.cos(torch.tensor(angle)) * rows + torch.sin(torch.tensor(angle)) * cols
    )
    image = ramp.expand(channels, height, width).clone()
    yy = torch.arange(height, dtype=torch.float32).reshape(height, 1)
    xx = torch.arange(width, dtype=torch.float32).reshape(1, width)
    for _ in range(_SHAPES_PER_IMAGE):
        kind = int(torch.randint(0, 3, (), generator=generator))
        cy = float(torch.randint(0, height, (), generator=generator))
        cx = float(torch.randint(0, width, (), generator=generator))
        size = float(torch.randint(12, 22, (), generator=generator))
        if kind == 0:
            mask = ((yy - cy).abs() < size) & ((xx - cx).abs() < size * 0.7)
        elif kind == 1:
            mask = ((yy - cy) ** 2 + (xx - cx) ** 2) < size**2
        else:
            radius = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
            mask = (radius > size - 6) & (radius < size)
        contrast = (torch.rand(channels, 1, 1, generator=generator) - 0.5) * 0.2
        image = image + contrast * mask.to(torch.float32)
    return image


def _blob(height: int, width: int, row: float, col: float) -> torch.Tensor:
    yy = torch.arange(height, dtype=torch.float32).reshape(height, 1)
    xx = torch.arange(width, dtype=torch.float32).reshape(1, width)
    distance2 = (yy - row) ** 2 + (xx - col) ** 2
    return EVIDENCE_AMPLITUDE * torch.exp(-distance2 / (2 * EVIDENCE_SIGMA**2))


def make_camera_images(
    batch_size: int = 1,
    *,
    evidence: Mapping[str, tuple[float, float]] | None = None,
    seed: int = 0,
    camera_shapes: Mapping[str, tuple[int, int, int]] = CAMERA_SHAPES,
) -> dict[str, torch.Tensor]:
    """Make deterministic camera images ``{camera_key: float32 [B, C, H, W] in [0, 1]}``.

    Args:
        batch_size: Samples per camera; each sample gets its own background.
        evidence: Camera key -> ``(row, col)`` pixel centre of a bright blob to plant in
            every sample of that camera. Cameras not named get no blob.
        seed: Seed for the backgrounds; the same seed gives identical images.
        camera_shapes: Camera key -> ``(C, H, W)``; defaults to the Aria-like rig.

    Raises:
        ValueError: On a non-positive batch size, an unknown camera key or a blob
            centre outside its image.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    evidence = dict(evidence or {})
    for key, (row, col) in evidence.items():
        if key not in camera_shapes:
            raise ValueError(
                f"evidence names camera {key!r}, which is not one of {list(camera_shapes)}."
            )
        _, height, width = camera_shapes[key]
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(
                f"evidence centre (row={row}, col={col}) for camera {key!r} lies outside its "
                f"{height}x{width} image."
            )
    generator = torch.Generator().manual_seed(seed)
    images: dict[str, torch.Tensor] = {}
    for key, (channels, height, width) in camera_shapes.items():
        samples = []
        for _ in range(batch_size):
            image = _background(channels, height, width, generator)
            if key in evidence:
                row, col = evidence[key]
                image = image + _blob(height, width, row, col)
            samples.append(image.clamp(0.0, 1.0))
        images[key] = torch.stack(samples).contiguous()
    return images
