"""Camera images as the model gets them: one normaliser for every caller of the engine.

:func:`camera_image_batches` turns what a notebook user has at hand (tensors or numpy
arrays, one sample or a batch, channels first or last) into camera key -> float
tensor ``[B, C, H, W]``, with one set of checks and messages, so that
:func:`~vinlens.attribution.explain_cameras`, the dataset aggregation and a viewer
accept the same inputs and refuse bad ones alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import numpy as np
import torch

__all__ = ["ARRAY_LAYOUTS", "ImageLike", "camera_image_batches"]

ImageLike: TypeAlias = torch.Tensor | np.ndarray
"""One camera's image or batch of images: a torch tensor or a numpy array."""

ARRAY_LAYOUTS: tuple[str, ...] = ("CHW", "HWC")
"""How :func:`camera_image_batches` reads numpy arrays: channels first (as tensors) or last."""


def _as_batch(key: str, image: ImageLike, array_layout: str) -> torch.Tensor:
    if isinstance(image, torch.Tensor):
        tensor = image.detach()
        if tensor.ndim == 3:
            tensor = tensor.unsqueeze(0)
        expected = "[C, H, W] or [B, C, H, W]"
    elif isinstance(image, np.ndarray):
        array = image
        if array_layout == "HWC":
            if array.ndim == 2:
                array = array[:, :, None]
            if array.ndim == 3:
                array = array[None]
            # [B, H, W, C] -> [B, C, H, W]
            array = array.transpose(0, 3, 1, 2) if array.ndim == 4 else array
            expected = "[H, W], [H, W, C] or [B, H, W, C] (channels last)"
        else:
            if array.ndim == 3:
                array = array[None]
            expected = "[C, H, W] or [B, C, H, W]"
        # Arrays come from image libraries in any dtype; models take float32.
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32)
    else:
        raise TypeError(
            f"camera {key!r}: image must be a torch.Tensor or numpy array, got "
            f"{type(image).__name__}."
        )
    if tensor.ndim != 4:
        raise ValueError(
            f"camera {key!r} image has shape {tuple(image.shape)}; expected {expected}."
        )
    if tensor.shape[-1] < 1 or tensor.shape[-2] < 1 or tensor.shape[1] < 1:
        raise ValueError(f"camera {key!r}: image is empty, shape {tuple(image.shape)}.")
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.float32)
    return tensor


def camera_image_batches(
    images: Mapping[str, ImageLike],
    *,
    array_layout: str = "CHW",
    samples: int | None = None,
    device: torch.device | str | None = None,
) -> dict[str, torch.Tensor]:
    """Camera key -> floating tensor ``[B, C, H, W]``, values unchanged.

    Args:
        images: Camera key -> image. Tensors are ``[C, H, W]`` or ``[B, C, H, W]``;
            numpy arrays the same with ``array_layout="CHW"``, or ``[H, W]``,
            ``[H, W, C]`` or ``[B, H, W, C]`` with ``array_layout="HWC"`` (as image
            libraries give them). Arrays, and integer tensors, become float32 with the
            same values; floating tensors keep their dtype.
        array_layout: ``"CHW"`` or ``"HWC"``, for numpy arrays only.
        samples: When given, every camera must have exactly this many samples (a
            viewer showing one image per camera passes 1).
        device: Where the tensors go (the model's device); ``None`` keeps them.

    Raises:
        ValueError: On an empty mapping, a key that is not a non-empty string, an image
            of the wrong rank or empty, cameras with different batch sizes, or a batch
            size other than ``samples``.
        TypeError: On an image that is neither a tensor nor an array.
    """
    if array_layout not in ARRAY_LAYOUTS:
        raise ValueError(f"array_layout={array_layout!r} is not one of {list(ARRAY_LAYOUTS)}.")
    if not isinstance(images, Mapping) or not images:
        raise ValueError(
            "images must be a non-empty mapping camera key -> image tensor/array, got "
            f"{type(images).__name__}."
        )
    batches: dict[str, torch.Tensor] = {}
    batch_size: int | None = None
    for key, image in images.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"camera keys must be non-empty strings, got {key!r}.")
        tensor = _as_batch(key, image, array_layout)
        if samples is not None and tensor.shape[0] != samples:
            raise ValueError(
                f"camera {key!r} has {tensor.shape[0]} samples (image shape "
                f"{tuple(image.shape)}); expected {samples}"
                + (f": pass one sample (e.g. images[{key!r}][0])." if samples == 1 else ".")
            )
        if batch_size is not None and tensor.shape[0] != batch_size:
            raise ValueError(
                f"camera {key!r} has batch size {tensor.shape[0]}, other cameras {batch_size}."
            )
        batch_size = tensor.shape[0]
        batches[key] = tensor if device is None else tensor.to(device)
    return batches
