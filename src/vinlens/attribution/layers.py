"""Which layers a viewer may offer, in which capture modes, and the targets a choice makes.

The rules a layer chooser follows, kept beside the targets they produce:

* :func:`layer_options`: every layer choice with the capture modes it can be read in,
  found by one probe forward on the given images (:func:`~vinlens.attribution.layer_choices`),
  so a mode is offered only where the layer really runs that way; when the model's forward
  fails, the structural choices with the reason (``probe_error``).
* :func:`check_layer_mode`: refuse a mode the probe did not find for a layer, naming the
  modes it can be read in.
* :func:`layer_targets`: the per-camera targets of a layer path and mode, each checked to
  be a module of the model.
* :func:`targets_by_camera`: exactly one explicit target per camera.
* :func:`modules_for_layer` / :func:`layer_for_modules`: a ``{camera}`` template and the
  module paths it reads, both ways (for a selection shared with a module table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.attribution.explain import check_camera_targets
from vinlens.attribution.targets import (
    CAMERA_PLACEHOLDER,
    CameraExplanationTarget,
    VisionCaptureMode,
    camera_targets_for_layer,
    layer_choices,
)

__all__ = [
    "CAPTURE_MODE_WORDS",
    "LayerOption",
    "LayerOptions",
    "check_layer_mode",
    "layer_for_modules",
    "layer_options",
    "layer_targets",
    "modules_for_layer",
    "targets_by_camera",
]

CAPTURE_MODE_WORDS: dict[str, str] = {
    VisionCaptureMode.DEDICATED_LAYER.value: "'dedicated_layer' (one module per camera)",
    VisionCaptureMode.PER_CAMERA_CALL.value: "'per_camera_call' (one call per camera)",
    VisionCaptureMode.STACKED_CAMERA_BATCH.value: (
        "'stacked_camera_batch' (cameras stacked in one call)"
    ),
}
"""Each capture mode in words, for messages."""


@dataclass(frozen=True)
class LayerOption:
    """One layer choice: its path, module type and the capture modes it can be read in."""

    path: str
    module_type: str
    modes: tuple[str, ...]


@dataclass(frozen=True)
class LayerOptions:
    """Every layer choice in module order, and why the probe forward failed (``""``: it ran)."""

    options: tuple[LayerOption, ...]
    probe_error: str = ""

    def modes_for(self, layer: str) -> tuple[str, ...]:
        """The capture modes of ``layer`` (none for a path that is not a choice)."""
        return next((o.modes for o in self.options if o.path == layer), ())


def layer_options(
    model: nn.Module,
    camera_keys: Sequence[str],
    *,
    images: Mapping[str, torch.Tensor] | None = None,
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
) -> LayerOptions:
    """Every layer choice with its capture modes (one probe forward when ``images`` are given).

    When that forward fails, the structurally possible modes are returned and
    ``probe_error`` says why, so a viewer still opens and shows the model's error.
    """
    keys = list(camera_keys)
    note = ""
    if images is None:
        found = layer_choices(model, keys)
    else:
        try:
            found = layer_choices(model, keys, images=images, forward=forward)
        except Exception as exc:  # the user's model: anything may come out of its forward
            found = layer_choices(model, keys)
            note = (
                "could not run the model once on these images to find which capture modes "
                f"each layer can be read in ({type(exc).__name__}: {exc}); every structurally "
                "possible mode is offered."
            )
    by_path: dict[str, tuple[str, list[str]]] = {}
    for mode, choices in found.items():
        for choice in choices:
            by_path.setdefault(choice.path, (choice.module_type, []))[1].append(mode)
    options = tuple(
        LayerOption(path, module_type, tuple(modes))
        for path, (module_type, modes) in by_path.items()
    )
    return LayerOptions(options, note)


def check_layer_mode(options: LayerOptions, layer: str, mode: str) -> None:
    """Raise ``ValueError`` unless ``layer`` can be read in ``mode`` (as the probe found)."""
    modes = options.modes_for(layer)
    if mode in modes:
        return
    labels = [CAPTURE_MODE_WORDS.get(m, m) for m in modes]
    hint = (
        f"it can be read in {' or '.join(labels)}"
        if labels
        else "it runs neither once per camera, nor once on the stacked cameras, nor as "
        "each camera's own module; pick another layer"
    )
    raise ValueError(
        f"layer {layer!r} cannot be read in capture mode {mode!r} on this model: {hint}."
    )


def layer_targets(
    model: nn.Module, layer: str, mode: str, camera_keys: Sequence[str]
) -> dict[str, CameraExplanationTarget]:
    """Per-camera targets of a layer path and mode, each checked to be a module of ``model``.

    Raises:
        ValueError: When the layer and mode make no targets, or a target's module is not
            one of the model's.
    """
    try:
        made = camera_targets_for_layer(layer, mode, list(camera_keys))
    except ValueError as exc:
        raise ValueError(f"layer {layer!r} in capture mode {mode!r}: {exc}") from None
    targets = {t.camera_key: t for t in made}
    check_target_modules(model, targets)
    return targets


def check_target_modules(model: nn.Module, targets: Mapping[str, CameraExplanationTarget]) -> None:
    """Raise ``ValueError`` naming the first target whose module path ``model`` lacks."""
    for target in targets.values():
        path = target.target.module_path
        try:
            model.get_submodule(path)
        except AttributeError:
            raise ValueError(
                f"layer {path!r} (camera {target.camera_key!r}) is not a module of "
                f"{type(model).__name__}; pick one of its module paths."
            ) from None


def targets_by_camera(
    targets: Sequence[CameraExplanationTarget], camera_keys: Sequence[str]
) -> dict[str, CameraExplanationTarget]:
    """The engine's target checks, then one target per camera, no camera without one."""
    keys = list(camera_keys)
    by_camera: dict[str, CameraExplanationTarget] = {}
    for target in check_camera_targets(targets, keys):
        if target.camera_key in by_camera:
            raise ValueError(f"two targets for camera {target.camera_key!r}.")
        by_camera[target.camera_key] = target
    missing = [k for k in keys if k not in by_camera]
    if missing:
        raise ValueError(f"no target for camera(s) {missing}; give one target per image.")
    return by_camera


def modules_for_layer(layer: str, camera_keys: Sequence[str]) -> list[str]:
    """The module paths a layer choice reads: one per camera for a ``{camera}`` template."""
    if not layer:
        return []
    if CAMERA_PLACEHOLDER in layer:
        return [layer.replace(CAMERA_PLACEHOLDER, key) for key in camera_keys]
    return [layer]


def layer_for_modules(
    paths: Sequence[str], options: LayerOptions, camera_keys: Sequence[str]
) -> str | None:
    """The layer choice for the latest picked module that is one, else ``None``."""
    choices = [o.path for o in options.options if o.modes]
    for path in reversed(paths):
        for choice in choices:
            if path in modules_for_layer(choice, camera_keys):
                return choice
    return None
