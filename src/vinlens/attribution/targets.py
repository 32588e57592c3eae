"""Where a camera's attribution is read from: layer, capture mode and camera routing.

A multi-camera model exposes a camera's feature map in one of three ways, and the
capture helpers in :mod:`vinlens.attribution.capture` need to know which one to pick
the right tensor:

* ``dedicated_layer``: the camera has its own layer (its own encoder); every call of
  that layer belongs to the camera.
* ``per_camera_call``: one shared layer is called once per camera in a forward pass;
  ``invocation_index`` says which call (0-based) belongs to the camera.
* ``stacked_camera_batch``: cameras are stacked batch-major into one call
  (``[sample0_cam0, sample0_cam1, ..., sample1_cam0, ...]``); ``stacked_camera_index``
  and ``stacked_camera_count`` say which slice belongs to the camera.

Targets are frozen and validated at construction, so a wrong routing field fails
where it was written rather than as a silently wrong heatmap later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import torch

from vinlens.attribution.layout import parse_layout

__all__ = [
    "CameraExplanationTarget",
    "LayerTarget",
    "VisionCaptureMode",
    "camera_targets_for_layer",
]

CAMERA_PLACEHOLDER = "{camera}"


class VisionCaptureMode(StrEnum):
    """How a camera's activation appears at the target layer."""

    DEDICATED_LAYER = "dedicated_layer"
    PER_CAMERA_CALL = "per_camera_call"
    STACKED_CAMERA_BATCH = "stacked_camera_batch"


def _is_int(value: object) -> bool:
    # bool is an int subclass; True as an index is almost always a mistake.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class LayerTarget:
    """A module inside the model, by its dotted path, which output to use and how to read it.

    Attributes:
        module_path: Dotted path as in ``model.named_modules()`` (e.g. ``"encoders.rgb.conv3"``).
        output_index: Index into a tuple output; ``None`` picks the first tensor output.
        layout: How the output holds a feature map: ``"NCHW"``, ``"NHWC"`` (channels
            last, e.g. Swin), ``"tokens"`` (``[B, N, C]`` with a square patch grid after
            leading class/register tokens, their count inferred) or ``"tokens:<n>"``
            (``n`` leading tokens). ``None``: decided only where unambiguous, see
            :mod:`vinlens.attribution.layout`. Stored normalised (``"nchw"`` -> ``"NCHW"``).
        reshape_transform: Callable from the layer's output (a camera's part of it, batch
            first) to ``[B, C, H, W]``, as in pytorch-grad-cam. Give this or ``layout``.
    """

    module_path: str
    output_index: int | None = None
    layout: str | None = None
    reshape_transform: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.module_path, str) or not self.module_path.strip():
            raise ValueError(
                f"LayerTarget.module_path must be a non-empty dotted module path, "
                f"got {self.module_path!r}."
            )
        if self.output_index is not None and not _is_int(self.output_index):
            raise ValueError(
                f"LayerTarget.output_index must be an int or None, got {self.output_index!r}."
            )
        if self.layout is not None and self.reshape_transform is not None:
            raise ValueError(
                f"LayerTarget({self.module_path!r}): give layout or reshape_transform, not both "
                f"(got layout={self.layout!r} and a reshape_transform)."
            )
        if self.reshape_transform is not None and not callable(self.reshape_transform):
            raise TypeError(
                f"LayerTarget({self.module_path!r}).reshape_transform must be a callable "
                f"output -> [B, C, H, W], got {type(self.reshape_transform).__name__}."
            )
        if self.layout is not None:
            try:
                kind, leading = parse_layout(self.layout)
            except ValueError as exc:
                raise ValueError(f"LayerTarget({self.module_path!r}): {exc}") from None
            canonical = kind if leading is None else f"{kind}:{leading}"
            object.__setattr__(self, "layout", canonical)


@dataclass(frozen=True)
class CameraExplanationTarget:
    """One camera's attribution target: the layer and how to find the camera in it.

    ``capture_mode`` accepts a :class:`VisionCaptureMode` or its string value and is
    stored as the plain string value, which is what the capture helpers compare against
    and what serialises to JSON unchanged.
    """

    camera_key: str
    target: LayerTarget
    capture_mode: str
    invocation_index: int | None = None
    stacked_camera_index: int | None = None
    stacked_camera_count: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.camera_key, str) or not self.camera_key:
            raise ValueError(
                f"CameraExplanationTarget.camera_key must be a non-empty string, "
                f"got {self.camera_key!r}."
            )
        if not isinstance(self.target, LayerTarget):
            raise TypeError(
                f"CameraExplanationTarget.target must be a LayerTarget, got "
                f"{type(self.target).__name__} {self.target!r}."
            )
        valid_modes = [mode.value for mode in VisionCaptureMode]
        if not isinstance(self.capture_mode, str) or self.capture_mode not in valid_modes:
            raise ValueError(
                f"CameraExplanationTarget.capture_mode={self.capture_mode!r} for camera "
                f"{self.camera_key!r} is not one of {valid_modes}."
            )
        mode = VisionCaptureMode(self.capture_mode)
        object.__setattr__(self, "capture_mode", mode.value)
        for name in ("invocation_index", "stacked_camera_index", "stacked_camera_count"):
            value = getattr(self, name)
            if value is not None and not _is_int(value):
                raise ValueError(
                    f"CameraExplanationTarget.{name} must be an int or None, got {value!r} "
                    f"(camera {self.camera_key!r})."
                )
        if mode is VisionCaptureMode.DEDICATED_LAYER:
            self._require_unset(
                mode, "invocation_index", "stacked_camera_index", "stacked_camera_count"
            )
        elif mode is VisionCaptureMode.PER_CAMERA_CALL:
            self._require_unset(mode, "stacked_camera_index", "stacked_camera_count")
            if self.invocation_index is None or self.invocation_index < 0:
                raise ValueError(
                    f"CameraExplanationTarget.invocation_index={self.invocation_index!r} for "
                    f"camera {self.camera_key!r}: capture mode 'per_camera_call' needs the "
                    "0-based index of the layer call that processes this camera."
                )
        else:
            self._require_unset(mode, "invocation_index")
            count = self.stacked_camera_count
            index = self.stacked_camera_index
            if count is None or count < 1:
                raise ValueError(
                    f"CameraExplanationTarget.stacked_camera_count={count!r} for camera "
                    f"{self.camera_key!r}: capture mode 'stacked_camera_batch' needs the "
                    "number of cameras stacked into the batch (>= 1)."
                )
            if index is None or not 0 <= index < count:
                raise ValueError(
                    f"CameraExplanationTarget.stacked_camera_index={index!r} for camera "
                    f"{self.camera_key!r}: capture mode 'stacked_camera_batch' needs an "
                    f"index in [0, {count})."
                )

    def _require_unset(self, mode: VisionCaptureMode, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if value is not None:
                raise ValueError(
                    f"CameraExplanationTarget.{name}={value!r} for camera {self.camera_key!r} "
                    f"does not apply to capture mode {mode.value!r}; leave it None."
                )


def camera_targets_for_layer(
    layer: str | Mapping[str, str],
    capture_mode: VisionCaptureMode | str,
    camera_keys: Sequence[str],
    *,
    output_index: int | None = None,
    layout: str | None = None,
    reshape_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[CameraExplanationTarget, ...]:
    """Build one target per camera from a layer choice and a capture mode.

    This is what a viewer needs when the user picks one layer path and a mode rather
    than writing targets by hand. ``camera_keys`` order carries meaning:

    * ``per_camera_call``: the order in which the model calls the shared layer, so
      camera ``i`` gets ``invocation_index=i``.
    * ``stacked_camera_batch``: the stacking order, so camera ``i`` gets
      ``stacked_camera_index=i`` and ``stacked_camera_count=len(camera_keys)``.
    * ``dedicated_layer``: each camera needs its own layer, so ``layer`` is either a
      mapping camera key -> module path, or a path containing ``{camera}`` which is
      replaced by the camera key (``"encoders.{camera}.conv3"``).

    ``output_index``, ``layout`` and ``reshape_transform`` go to every camera's
    :class:`LayerTarget`.

    Raises:
        ValueError: On an empty or duplicated camera list, or a layer that cannot give
            each camera its own module in ``dedicated_layer`` mode.
    """
    keys = list(camera_keys)
    if isinstance(camera_keys, str) or not keys:
        raise ValueError(f"camera_keys must be a non-empty sequence of keys, got {camera_keys!r}.")
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"camera_keys contains duplicates: {duplicates}.")
    valid_modes = [mode.value for mode in VisionCaptureMode]
    if capture_mode not in valid_modes:
        raise ValueError(f"capture_mode={capture_mode!r} is not one of {valid_modes}.")
    mode = VisionCaptureMode(capture_mode)

    if mode is VisionCaptureMode.DEDICATED_LAYER:
        paths = _dedicated_layer_paths(layer, keys)
        return tuple(
            CameraExplanationTarget(
                camera_key=key,
                target=LayerTarget(paths[key], output_index, layout, reshape_transform),
                capture_mode=mode,
            )
            for key in keys
        )
    if not isinstance(layer, str):
        raise ValueError(
            f"capture mode {mode.value!r} uses one shared layer; pass its module path as a "
            f"string, got {layer!r}."
        )
    layer_target = LayerTarget(layer, output_index, layout, reshape_transform)
    if mode is VisionCaptureMode.PER_CAMERA_CALL:
        return tuple(
            CameraExplanationTarget(key, layer_target, mode, invocation_index=index)
            for index, key in enumerate(keys)
        )
    return tuple(
        CameraExplanationTarget(
            key,
            layer_target,
            mode,
            stacked_camera_index=index,
            stacked_camera_count=len(keys),
        )
        for index, key in enumerate(keys)
    )


def _dedicated_layer_paths(layer: str | Mapping[str, str], keys: list[str]) -> dict[str, str]:
    if isinstance(layer, Mapping):
        missing = [key for key in keys if key not in layer]
        if missing:
            raise ValueError(
                f"dedicated_layer: no module path given for cameras {missing}; "
                f"the mapping has {sorted(layer)}."
            )
        return {key: layer[key] for key in keys}
    if CAMERA_PLACEHOLDER in layer:
        return {key: layer.replace(CAMERA_PLACEHOLDER, key) for key in keys}
    if len(keys) == 1:
        return {keys[0]: layer}
    raise ValueError(
        f"dedicated_layer: layer {layer!r} names one module but {len(keys)} cameras "
        f"{keys} each need their own; use a path with {CAMERA_PLACEHOLDER!r} or a mapping "
        "camera key -> module path."
    )
