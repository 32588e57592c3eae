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

Which layers a user can pick, per mode (:func:`layer_choices`, with ``{camera}``
templates from :func:`camera_layer_templates`), and which modes a picked layer can
satisfy (:func:`capture_modes_for_layer`), are answered here too, so every front end
offers the same choices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from enum import StrEnum

import torch
from torch import nn

from vinlens.attribution.images import ImageLike, camera_image_batches
from vinlens.attribution.layout import parse_layout
from vinlens.attribution.state import explanation_mode
from vinlens.hooks import HookSet

__all__ = [
    "CAMERA_PLACEHOLDER",
    "CameraExplanationTarget",
    "LayerCalls",
    "LayerChoice",
    "LayerTarget",
    "VisionCaptureMode",
    "camera_layer_templates",
    "camera_targets_for_layer",
    "capture_modes_for_layer",
    "layer_choices",
    "probe_layer_calls",
]

CAMERA_PLACEHOLDER = "{camera}"
"""Stands for the camera key in a dedicated-layer path (``"encoders.{camera}.conv3"``)."""


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


# -- layer choices -------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerChoice:
    """A layer a user can pick: module path (or ``{camera}`` template) and its module type."""

    path: str
    module_type: str


@dataclass(frozen=True)
class LayerCalls:
    """How often a module ran in one forward, and the batch size of each call's output.

    ``batch_sizes`` holds ``None`` for a call whose output had no tensor to measure.
    """

    path: str
    batch_sizes: tuple[int | None, ...]

    @property
    def calls(self) -> int:
        """Number of calls in the forward."""
        return len(self.batch_sizes)


def camera_layer_templates(
    module_paths: Iterable[str], camera_keys: Sequence[str]
) -> tuple[str, ...]:
    """``{camera}`` templates that name one module per camera, in first-seen order.

    A template is offered when a path has a camera key as one of its dotted parts and
    the path with that part replaced by each camera key exists
    (``encoders.rgb.conv3`` -> ``encoders.{camera}.conv3`` when ``encoders.<key>.conv3``
    exists for every key).
    """
    paths = list(module_paths)
    existing = set(paths)
    keys = list(camera_keys)
    templates: dict[str, None] = {}
    for path in paths:
        parts = path.split(".")
        for index, part in enumerate(parts):
            if part not in keys:
                continue
            template = ".".join([*parts[:index], CAMERA_PLACEHOLDER, *parts[index + 1 :]])
            if template not in templates and all(
                template.replace(CAMERA_PLACEHOLDER, key) in existing for key in keys
            ):
                templates[template] = None
    return tuple(templates)


def _module_types(model: nn.Module) -> dict[str, str]:
    return {path: type(module).__name__ for path, module in model.named_modules() if path}


def layer_choices(
    model: nn.Module,
    camera_keys: Sequence[str],
    *,
    images: Mapping[str, ImageLike] | None = None,
    forward: Callable[[dict[str, torch.Tensor]], object] | None = None,
) -> dict[str, tuple[LayerChoice, ...]]:
    """The layers a user can pick, per capture mode value, in ``named_modules`` order.

    Without ``images``: every module for the shared modes (``per_camera_call``,
    ``stacked_camera_batch``), and the ``{camera}`` templates
    (:func:`camera_layer_templates`) for ``dedicated_layer`` (every module when there
    is one camera). With ``images`` (camera key -> image, as the model gets them) one
    forward (:func:`probe_layer_calls`) keeps for each mode only the layers that can
    satisfy it (:func:`capture_modes_for_layer`).
    """
    keys = list(camera_keys)
    types = _module_types(model)
    shared = tuple(LayerChoice(path, module_type) for path, module_type in types.items())
    if len(keys) == 1:
        dedicated = shared
    else:
        dedicated = tuple(
            LayerChoice(template, types[template.replace(CAMERA_PLACEHOLDER, keys[0])])
            for template in camera_layer_templates(types, keys)
        )
    choices = {
        VisionCaptureMode.DEDICATED_LAYER.value: dedicated,
        VisionCaptureMode.PER_CAMERA_CALL.value: shared,
        VisionCaptureMode.STACKED_CAMERA_BATCH.value: shared,
    }
    if images is None:
        return choices
    calls, batch = _probe(model, keys, images, forward)
    return {
        mode: tuple(c for c in options if _satisfies(c.path, mode, keys, calls, batch))
        for mode, options in choices.items()
    }


def capture_modes_for_layer(
    model: nn.Module,
    layer: str | Mapping[str, str],
    camera_keys: Sequence[str],
    *,
    images: Mapping[str, ImageLike] | None = None,
    forward: Callable[[dict[str, torch.Tensor]], object] | None = None,
) -> tuple[str, ...]:
    """The capture mode values a layer choice can satisfy, in :class:`VisionCaptureMode` order.

    Without ``images`` the answer is structural: ``dedicated_layer`` needs a mapping or
    a ``{camera}`` template naming an existing module for every camera (or one module
    and one camera); the shared modes need one existing module path without
    ``{camera}``. With ``images`` one forward also checks how the layer runs:
    ``dedicated_layer`` needs each camera's module called once with the batch size of
    the images; ``per_camera_call`` one call per camera, each with that batch size;
    ``stacked_camera_batch`` one call whose batch is ``cameras x batch size``.
    """
    keys = list(camera_keys)
    calls: dict[str, LayerCalls] | None = None
    batch = 0
    if images is not None:
        calls, batch = _probe(model, keys, images, forward)
    types = _module_types(model)
    modes = []
    for mode in VisionCaptureMode:
        try:
            targets = camera_targets_for_layer(layer, mode, keys)
        except ValueError:
            continue
        paths = {target.target.module_path for target in targets}
        if not all(path in types for path in paths):
            continue
        if calls is not None and not all(
            _satisfies(path, mode.value, keys, calls, batch, templated=False) for path in paths
        ):
            continue
        modes.append(mode.value)
    return tuple(modes)


def probe_layer_calls(
    model: nn.Module,
    images: Mapping[str, ImageLike],
    *,
    forward: Callable[[dict[str, torch.Tensor]], object] | None = None,
) -> dict[str, LayerCalls]:
    """Run one forward (eval mode, no gradients) and record every module's calls.

    Images are normalised with
    :func:`~vinlens.attribution.images.camera_image_batches` and moved to the model's
    device; the model comes back with its training flags unchanged and no hooks left.
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    batches = camera_image_batches(images, device=device)
    sizes: dict[str, list[int | None]] = {path: [] for path, _ in model.named_modules() if path}

    def recorder(path: str) -> Callable[[nn.Module, object, object], None]:
        def record(_module: nn.Module, _inputs: object, output: object) -> None:
            tensor = output
            if isinstance(output, tuple):
                tensor = next((item for item in output if isinstance(item, torch.Tensor)), None)
            sizes[path].append(
                int(tensor.shape[0]) if isinstance(tensor, torch.Tensor) and tensor.ndim else None
            )

        return record

    with ExitStack() as stack:
        stack.enter_context(explanation_mode(model, enable_parameter_grads=False))
        stack.enter_context(torch.no_grad())
        hooks = stack.enter_context(HookSet())
        for path, module in model.named_modules():
            if path:
                hooks.forward(module, recorder(path))
        (forward if forward is not None else model)(batches)
    return {path: LayerCalls(path, tuple(values)) for path, values in sizes.items()}


def _probe(
    model: nn.Module,
    keys: list[str],
    images: Mapping[str, ImageLike],
    forward: Callable[[dict[str, torch.Tensor]], object] | None,
) -> tuple[dict[str, LayerCalls], int]:
    calls = probe_layer_calls(model, images, forward=forward)
    batch = next(iter(camera_image_batches(images).values())).shape[0]
    return calls, int(batch)


def _satisfies(
    path: str,
    mode: str,
    keys: list[str],
    calls: Mapping[str, LayerCalls],
    batch: int,
    *,
    templated: bool = True,
) -> bool:
    """Whether the module(s) behind a layer choice ran the way ``mode`` reads them."""
    if mode == VisionCaptureMode.DEDICATED_LAYER.value:
        paths = (
            [path.replace(CAMERA_PLACEHOLDER, key) for key in keys]
            if templated and CAMERA_PLACEHOLDER in path
            else [path]
        )
        return all(path in calls and calls[path].batch_sizes == (batch,) for path in paths)
    record = calls.get(path)
    if record is None:
        return False
    if mode == VisionCaptureMode.PER_CAMERA_CALL.value:
        return record.batch_sizes == (batch,) * len(keys)
    return record.batch_sizes == (batch * len(keys),)
