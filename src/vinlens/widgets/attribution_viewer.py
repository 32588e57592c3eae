"""Per-camera attribution heatmaps over the camera images of a multi-camera model.

:class:`AttributionViewerWidget` holds the model, one image per camera and what to
explain (a target class or a score callable), asks :func:`vinlens.attribution.explain_cameras`
for one frozen :class:`~vinlens.attribution.CameraAttribution` record per camera, and
sends the browser each camera's image (uint8 ``[H, W, C]``) and raw map at the image's
resolution (float32 ``[H, W]``) as binary arrays. Colormap, opacity, normalised or raw
scale and the layout are display state the browser applies on its own; method, layer,
capture mode and target are applied by the ``explain`` command, an exclusive background
command of the widget's task runtime that reports progress per camera and answers
errors (a bad layer path, method or camera key, an exception in the model's forward) as
error replies the widget shows.

The viewer tells the truth about what it shows: a map that is near-flat next to the
other cameras' (:func:`vinlens.attribution.map_flatness`) is marked, with its raw span
beside the largest camera's; the layer list and the capture modes offered for a layer
are the engine's (:func:`vinlens.attribution.layer_choices`, one probe forward), so a
mode the layer cannot be read in is never offered. The layer chooser can share a
:class:`~vinlens.widgets.ModuleSelection` with a module table, snapshot browser or
health view. ``explain_dataset(loader)`` adds the dataset view: aggregate maps per
camera and a reliance bar per camera from one engine operation
(:func:`vinlens.attribution.explain_dataset`, run by
:mod:`vinlens.widgets.attribution_viewer_dataset`), and a slider over kept samples. A class menu
(``aggregate_class``) switches the maps to one class's samples; under each map, the
samples whose map is most and least concentrated jump the slider when it holds them.

The payloads are built in :mod:`vinlens.widgets.attribution_viewer_payload`; the layer
rules (which modes a layer can be read in, the targets a choice makes) are the engine's
(:mod:`vinlens.attribution.layers`).

From Python: ``.maps`` (camera -> raw map as shown), ``.layer_maps`` (at the target
layer's resolution), ``.records`` (the engine's records), ``.flatness``,
``.recompute(...)``, ``.export_png(directory)``, ``.explain_dataset(loader)``,
``.show_sample(i)``, ``.map_statistics``, ``.class_map_statistics`` and ``.reliance``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import traitlets
from torch import nn

from vinlens.attribution import (
    CameraAttribution,
    CameraExplanationTarget,
    ImageLike,
    MapFlatness,
    VisionCaptureMode,
    camera_image_batches,
    camera_targets_for_layer,
    explain_cameras,
)
from vinlens.attribution.layers import (
    LayerOptions,
    check_layer_mode,
    check_target_modules,
    layer_for_modules,
    layer_options,
    layer_targets,
    modules_for_layer,
    targets_by_camera,
)
from vinlens.widgets._base import (
    CommandContext,
    CommandError,
    command,
    widget_asset,
)
from vinlens.widgets._selection import NO_CHANGE, ModuleSelection, SelectionLink
from vinlens.widgets.attribution_viewer_dataset import BUSY, DatasetContext, DatasetView
from vinlens.widgets.attribution_viewer_payload import (
    CAPTURE_MODES,
    METHOD_LABELS,
    choices_by_mode,
    flatness_of,
    image_map,
    images_payload,
    layer_map,
    layers_payload,
    record_payload,
    write_pngs,
)

__all__ = ["AttributionViewerWidget"]

COLORMAPS = ("viridis", "magma", "coolwarm")
"""The colormaps js/lib/colormap.ts ships; matplotlib has the same names for export."""
SCALES = ("normalized", "raw")
VIEWS = ("grid", "single")


Score = Callable[[Any], torch.Tensor]
Forward = Callable[[dict[str, torch.Tensor]], Any]


class AttributionViewerWidget(DatasetView):
    """Show what each camera of a multi-camera model looks at, as heatmaps over its image.

    Args:
        model: The model; it is called as ``model(inputs)`` (or ``forward(inputs)``) with
            ``inputs`` a dict camera key -> float tensor ``[1, C, H, W]`` made from ``images``.
        images: Camera key -> one image: a tensor ``[C, H, W]`` (or ``[1, C, H, W]``) or
            an array ``[H, W, C]`` / ``[H, W]``. Arrays become float32 tensors with
            their values unchanged, so pass what the model expects. The order of the
            keys is the camera order (per-camera call index, stacking index).
        score: ``score(output) -> Tensor`` turning the model's output into the score
            to explain (one value per sample). Give this or ``target_class``.
        target_class: Explain ``output[:, target_class]`` (the logit of that class).
        targets: Explicit per-camera targets; otherwise ``layer`` and ``capture_mode``
            make them with :func:`vinlens.attribution.camera_targets_for_layer`.
        layer: Module path of the target layer (for ``dedicated_layer`` a path with
            ``{camera}`` or a mapping camera key -> path).
        capture_mode: How the cameras reach ``layer`` (a :class:`VisionCaptureMode`).
        method: ``"grad_cam"``, ``"grad_cam_plus_plus"`` or ``"ablation_cam"``.
        colormap, opacity, scale, view: Initial display state.
        forward: How to run the model on the image dict, when not ``model(inputs)``.
        compute: Explain right away (synchronously) so the widget opens with maps.
        selection: A :class:`~vinlens.widgets.ModuleSelection` shared with a module table,
            snapshot browser or health view: a module picked there that is a layer choice
            here (or one camera's module of a ``{camera}`` layer) becomes the layer in the
            chooser, and a layer chosen here picks its modules there. Without it the viewer
            has a selection of its own (``.selection``).

    Raises:
        ValueError: On images that are not one image per camera, a target that names a
            camera without an image, both or neither of ``score`` and ``target_class``,
            or a bad method, mode or display value.
    """

    _esm = widget_asset("attribution_viewer.js")
    _css = widget_asset("attribution_viewer.css")

    camera_keys = traitlets.List(traitlets.Unicode()).tag(sync=True)
    images = traitlets.Dict().tag(sync=True)
    attributions = traitlets.Dict().tag(sync=True)
    methods = traitlets.List(traitlets.Dict()).tag(sync=True)
    capture_modes = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layers = traitlets.List(traitlets.Dict()).tag(sync=True)
    layer_choices = traitlets.Dict().tag(sync=True)
    explicit_targets = traitlets.Bool(False).tag(sync=True)
    method = traitlets.Unicode("grad_cam").tag(sync=True)
    layer = traitlets.Unicode("").tag(sync=True)
    selected_layer = traitlets.Unicode("").tag(sync=True)
    capture_mode = traitlets.Unicode(VisionCaptureMode.DEDICATED_LAYER.value).tag(sync=True)
    target_class = traitlets.Int(None, allow_none=True).tag(sync=True)
    target_label = traitlets.Unicode("").tag(sync=True)
    # Display choices set from Python are checked too: a value the browser cannot draw
    # is refused, so the screen and export_png never disagree.
    colormap = traitlets.Enum(COLORMAPS, "viridis").tag(sync=True)
    opacity = traitlets.Float(0.5).tag(sync=True)
    scale = traitlets.Enum(SCALES, "normalized").tag(sync=True)
    view = traitlets.Enum(VIEWS, "grid").tag(sync=True)
    focused_camera = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        model: nn.Module,
        images: Mapping[str, ImageLike],
        *,
        score: Score | None = None,
        target_class: int | None = None,
        targets: Sequence[CameraExplanationTarget] | None = None,
        layer: str | Mapping[str, str] | None = None,
        capture_mode: VisionCaptureMode | str | None = None,
        method: str = "grad_cam",
        colormap: str = "viridis",
        opacity: float = 0.5,
        scale: str = "normalized",
        view: str = "grid",
        forward: Forward | None = None,
        compute: bool = True,
        selection: ModuleSelection | None = None,
    ) -> None:
        target_class = _check_model_and_score(model, score, target_class)
        self._model = model
        self._inputs = _model_inputs(images)
        keys = list(self._inputs)
        self._score = score
        self._forward = forward
        self._records: dict[str, CameraAttribution] = {}
        self._python_targets, mode = _initial_targets(targets, layer, capture_mode, keys)
        self._layer_options: LayerOptions = layer_options(
            model, keys, images=self._inputs, forward=forward
        )
        layers = layers_payload(self._layer_options)
        probe_note = self._layer_options.probe_error
        super().__init__(
            camera_keys=keys,
            images=images_payload(self._inputs),
            methods=[{"value": k, "label": v} for k, v in METHOD_LABELS.items()],
            capture_modes=list(CAPTURE_MODES),
            layers=layers,
            layer_choices=choices_by_mode(layers),
            explicit_targets=self._python_targets is not None,
            method=_check_choice("method", method, tuple(METHOD_LABELS)),
            layer=layer if isinstance(layer, str) else "",
            selected_layer=layer if isinstance(layer, str) else "",
            capture_mode=mode,
            target_class=target_class,
            target_label=_score_label(score, target_class),
            colormap=_check_choice("colormap", colormap, COLORMAPS),
            opacity=_check_opacity(opacity),
            scale=_check_choice("scale", scale, SCALES),
            view=_check_choice("view", view, VIEWS),
            focused_camera=keys[0],
        )
        if probe_note:
            self._report_error("", probe_note)
        if isinstance(layer, str):
            try:  # fail at construction, not at the first click
                self._targets_for(layer, mode)
            except CommandError as exc:
                raise ValueError(str(exc)) from None
        self._link_selection(selection)
        if compute and (layer is not None or targets is not None):
            reply = self.run_command("explain", {})
            if reply["kind"] == "error":
                raise RuntimeError(reply["message"])

    def _link_selection(self, selection: ModuleSelection | None) -> None:
        """Share the selected layer with other widgets through ``selection``."""
        self.selection = ModuleSelection() if selection is None else selection
        self._selection_link = SelectionLink(
            self.selection,
            self,
            "selected_layer",
            to_owner=self._layer_for_modules,
            from_owner=self._modules_for_layer,
        )

    @traitlets.validate("selected_layer")
    def _valid_selected_layer(self, proposal: Any) -> str:
        value = proposal["value"]
        if value == "" or value == self.layer or value in {c["path"] for c in self.layers}:
            return str(value)
        raise traitlets.TraitError(
            f"selected_layer={value!r} is not one of this viewer's layer choices."
        )

    @traitlets.validate("focused_camera")
    def _valid_focused_camera(self, proposal: Any) -> str:
        value = proposal["value"]
        if isinstance(value, str) and value in self.camera_keys:
            return value
        raise traitlets.TraitError(
            f"focused_camera={value!r} is not one of this viewer's cameras {list(self.camera_keys)}."
        )

    @traitlets.validate("opacity")
    def _valid_opacity(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not 0.0 <= value <= 1.0:
            raise traitlets.TraitError(f"opacity must be in [0, 1], got {value!r}.")
        return value

    # -- Python API ------------------------------------------------------------------------
    @property
    def records(self) -> dict[str, CameraAttribution]:
        """The engine's record per camera for the maps on screen (camera order)."""
        return dict(self._records)

    @property
    def maps(self) -> dict[str, np.ndarray]:
        """Camera key -> raw (not normalised) map at the camera image's size, float32 [H, W]."""
        return {key: image_map(record).copy() for key, record in self._records.items()}

    @property
    def flatness(self) -> dict[str, MapFlatness]:
        """Camera key -> how flat its raw map is next to the other cameras' (the mark on screen)."""
        return flatness_of(self._records)

    @property
    def layer_maps(self) -> dict[str, np.ndarray]:
        """Camera key -> raw map at the target layer's resolution, float32 [h, w]."""
        return {key: layer_map(record).copy() for key, record in self._records.items()}

    def recompute(
        self,
        *,
        method: str | None = None,
        layer: str | None = None,
        capture_mode: str | None = None,
        target_class: int | None = None,
        cameras: Sequence[str] | None = None,
    ) -> dict[str, CameraAttribution]:
        """Explain again (as the Recompute button does) and return the new records.

        Arguments left ``None`` keep the current choice; ``layer=""`` goes back to the
        targets given at construction.

        Raises:
            RuntimeError: With the message the widget shows, when the command fails.
        """
        args: dict[str, Any] = {
            "method": method,
            "layer": layer,
            "capture_mode": capture_mode,
            "target_class": target_class,
            "cameras": list(cameras) if cameras is not None else None,
        }
        reply = self.run_command("explain", {k: v for k, v in args.items() if v is not None})
        if reply["kind"] == "error":
            raise RuntimeError(reply["message"])
        return self.records

    def _dataset_context(self) -> DatasetContext:
        """What the dataset pass explains with: the applied layer's targets and the score."""
        if not self.layer and self._python_targets is None:
            raise CommandError("no target layer chosen; pick a layer and press Recompute first.")
        targets = self._targets_for(self.layer, self.capture_mode)
        if self.layer:
            self._check_mode(self.layer, self.capture_mode)
        score = self._score if self._score is not None else self.target_class
        assert score is not None  # __init__ requires score or target_class
        return DatasetContext(
            model=self._model,
            targets=tuple(targets.values()),
            score=score,
            method=self.method,
            forward=self._forward,
            score_label=self.target_label,
            layer_label=self.layer or "(targets given in Python)",
            camera_keys=tuple(self.camera_keys),
        )

    def export_png(self, directory: str | Path, *, overlay: bool = False) -> list[Path]:
        """Write the current maps as ``<camera>.png``, coloured as the widget shows them.

        Uses the widget's colormap and scale (normalised per camera, or the shared raw
        range). With ``overlay=True`` the heatmap is blended over the camera image at
        the widget's opacity, as on screen. Returns the written paths in camera order.

        Raises:
            RuntimeError: When no maps have been computed yet.
        """
        if not self._records:
            raise RuntimeError("no attribution maps yet; call recompute() first.")
        return write_pngs(
            directory,
            self.maps,
            self._inputs,
            colormap=self.colormap,
            scale=self.scale,
            opacity=self.opacity,
            overlay=overlay,
        )

    # -- commands ------------------------------------------------------------------------
    # Exclusive: two runs at once would hook the same modules concurrently.
    @command("explain", background=True, exclusive=True, busy=BUSY)
    def _explain(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        return self._explain_now(args, ctx)

    def _explain_now(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        """The explain command's work; the dataset pass runs it too, inside its own flight."""
        inputs, sample = self._inputs, None
        if args.get("sample") is not None:
            # Another kept sample: every camera is explained again, on its images.
            sample = self._check_sample(args["sample"])
            inputs = dict(self._kept[sample].images)
            if args.get("cameras") is not None:
                raise CommandError("a new sample explains every camera; leave cameras out.")
        method = _check_arg_choice("method", args.get("method", self.method), tuple(METHOD_LABELS))
        mode = _check_arg_choice(
            "capture_mode", args.get("capture_mode", self.capture_mode), CAPTURE_MODES
        )
        layer = args.get("layer", self.layer)
        if layer is not None and not isinstance(layer, str):
            raise CommandError(f"layer must be a module path string or null, got {layer!r}.")
        target_class = self.target_class
        if "target_class" in args and args["target_class"] is not None:
            if self._score is not None:
                raise CommandError(
                    "this viewer explains a score callable; target_class does not apply."
                )
            target_class = _check_class(args["target_class"])
        cameras = self._check_cameras(args.get("cameras"))
        targets = self._targets_for(layer or "", mode)
        if layer:
            self._check_mode(layer, mode)
        if not layer:  # the targets given in Python carry their own capture mode
            modes = {targets[key].capture_mode for key in cameras}
            mode = modes.pop() if len(modes) == 1 else mode
        score: int | Score
        if self._score is not None:
            score = self._score
        else:
            assert target_class is not None  # __init__ requires score or target_class
            score = target_class

        # Gradient methods explain every camera in one shared forward/backward pass (the
        # engine reports once at the end); Ablation-CAM reports after each camera.
        # ctx.progress also raises CommandCancelled when the user cancels; raised inside
        # the engine's callback it unwinds through the engine's finally blocks.
        ctx.progress(0, len(cameras))
        found = explain_cameras(
            self._model,
            inputs,
            score,
            [targets[key] for key in cameras],
            method=method,
            forward=self._forward,
            progress=ctx.progress,
        )
        records = {record.camera_key: record for record in found if record.sample_index == 0}
        merged = records if sample is not None else {**self._records, **records}
        self._records = {key: merged[key] for key in self.camera_keys if key in merged}
        with self.hold_sync():
            if sample is not None:
                self._inputs = inputs
                self.images = images_payload(inputs)
                self.sample_index = sample
            self.method = method
            self.capture_mode = mode
            self.layer = layer or ""
            self.selected_layer = layer or ""
            self.target_class = target_class
            flatness = flatness_of(self._records)
            self.attributions = {
                key: record_payload(record, flatness[key]) for key, record in self._records.items()
            }
        return {"cameras": list(records)}

    def _check_mode(self, layer: str, mode: str) -> None:
        """Refuse a mode the layer cannot be read in, as the engine's probe found at creation."""
        try:
            check_layer_mode(self._layer_options, layer, mode)
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    # -- linked selection ------------------------------------------------------------------
    def _layer_for_modules(self, paths: list[str]) -> Any:
        """The layer choice for the latest picked module that is one (else keep the chooser)."""
        found = layer_for_modules(paths, self._layer_options, list(self.camera_keys))
        return NO_CHANGE if found is None else found

    def _modules_for_layer(self, layer: Any) -> list[str]:
        """The module paths a layer choice reads: one per camera for a ``{camera}`` template."""
        return modules_for_layer(str(layer) if layer else "", list(self.camera_keys))

    # -- helpers ---------------------------------------------------------------------------
    def _check_cameras(self, cameras: Any) -> list[str]:
        if cameras is None:
            return list(self.camera_keys)
        if not isinstance(cameras, list) or not all(isinstance(c, str) for c in cameras):
            raise CommandError(f"cameras must be a list of camera keys, got {cameras!r}.")
        unknown = [c for c in cameras if c not in self.camera_keys]
        if unknown:
            raise CommandError(
                f"unknown camera key(s) {unknown}; this viewer has {list(self.camera_keys)}."
            )
        if not cameras:
            raise CommandError("cameras is empty; name at least one camera.")
        return cameras

    def _targets_for(self, layer: str, mode: str) -> dict[str, CameraExplanationTarget]:
        """Per-camera targets for a layer choice, checked against the model's modules."""
        try:
            if layer:
                return layer_targets(self._model, layer, mode, list(self.camera_keys))
            if self._python_targets is None:
                raise CommandError(
                    "no target layer chosen; pick a layer (module path) and press Recompute."
                )
            check_target_modules(self._model, self._python_targets)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        return self._python_targets


# -- validators -----------------------------------------------------------------------------
def _model_inputs(images: Mapping[str, ImageLike]) -> dict[str, torch.Tensor]:
    """Camera key -> float tensor ``[1, C, H, W]`` as the model gets it (arrays channels last)."""
    return camera_image_batches(images, array_layout="HWC", samples=1)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _score_label(score: Score | None, target_class: int | None) -> str:
    if score is None:
        return f"class {target_class}"
    return f"score {getattr(score, '__name__', None) or type(score).__name__}"


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    value = value.value if isinstance(value, VisionCaptureMode) else value
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}.")
    return str(value)


def _check_arg_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise CommandError(f"unknown {name} {value!r}; expected one of {list(choices)}.")
    return value


def _check_class(value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CommandError(f"target_class must be a non-negative integer, got {value!r}.")
    return value


def _check_opacity(value: float) -> float:
    if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"opacity must be a number in [0, 1], got {value!r}.")
    return float(value)


def _check_model_and_score(model: object, score: object, target_class: int | None) -> int | None:
    """Refuse a model that is not a module and anything but exactly one of ``score`` (a
    callable) and ``target_class`` (a class index); returns the checked class index."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if (score is None) == (target_class is None):
        raise ValueError(
            "give exactly one of score (a callable output -> score) and target_class "
            f"(an int); got score={score!r}, target_class={target_class!r}."
        )
    if score is not None and not callable(score):
        raise TypeError(f"score must be callable, got {type(score).__name__}.")
    if target_class is None:
        return None
    try:
        return _check_class(target_class)
    except CommandError as exc:
        raise ValueError(str(exc)) from None


def _initial_targets(
    targets: Sequence[CameraExplanationTarget] | None,
    layer: str | Mapping[str, str] | None,
    capture_mode: VisionCaptureMode | str | None,
    keys: list[str],
) -> tuple[dict[str, CameraExplanationTarget] | None, str]:
    """The targets given in Python (by ``targets`` or a per-camera ``layer`` mapping), or
    None where the viewer resolves a layer name itself, and the capture mode to show."""
    mode = _check_choice("capture_mode", capture_mode, CAPTURE_MODES) if capture_mode else None
    if targets is not None:
        if layer is not None:
            raise ValueError("give either targets or layer, not both.")
        by_camera = targets_by_camera(targets, keys)
        modes = {t.capture_mode for t in by_camera.values()}
        return by_camera, mode or (modes.pop() if len(modes) == 1 else None) or _DEDICATED
    if isinstance(layer, Mapping):
        chosen = camera_targets_for_layer(
            dict(layer), mode or VisionCaptureMode.DEDICATED_LAYER, keys
        )
        return {t.camera_key: t for t in chosen}, mode or _DEDICATED
    return None, mode or _DEDICATED


_DEDICATED = VisionCaptureMode.DEDICATED_LAYER.value
