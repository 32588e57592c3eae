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
camera and a reliance bar per camera from the engine's streaming aggregation
(:mod:`vinlens.attribution.aggregate`), and a slider over kept samples.

From Python: ``.maps`` (camera -> raw map as shown), ``.layer_maps`` (at the target
layer's resolution), ``.records`` (the engine's records), ``.flatness``,
``.recompute(...)``, ``.export_png(directory)``, ``.explain_dataset(loader)``,
``.show_sample(i)``, ``.map_statistics`` and ``.reliance``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import traitlets
from torch import nn

from vinlens.attribution import (
    CAMERA_PLACEHOLDER,
    CameraAttribution,
    CameraExplanationTarget,
    ImageLike,
    MapFlatness,
    VisionCaptureMode,
    batch_camera_images,
    camera_image_batches,
    camera_targets_for_layer,
    check_camera_targets,
    explain_cameras,
    layer_choices,
    map_flatness,
    method_labels,
)
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandCancelled,
    CommandContext,
    CommandError,
    CommandTask,
    command,
    widget_asset,
)
from vinlens.widgets._payload import encode_array, to_jsonable
from vinlens.widgets._selection import NO_CHANGE, ModuleSelection, SelectionLink

if TYPE_CHECKING:
    from vinlens.attribution.aggregate import (
        AttributionAggregate,
        Baseline,
        BatchImages,
        CameraMapStatistics,
        CameraRelianceStatistics,
        RelianceSummary,
    )

__all__ = ["AttributionViewerWidget"]

METHOD_LABELS: dict[str, str] = method_labels()
"""The engine's methods in its order, with the names papers use."""
COLORMAPS = ("viridis", "magma", "coolwarm")
"""The colormaps js/lib/colormap.ts ships; matplotlib has the same names for export."""
CAPTURE_MODES = tuple(mode.value for mode in VisionCaptureMode)
_MODE_WORDS = {
    VisionCaptureMode.DEDICATED_LAYER.value: "'dedicated_layer' (one module per camera)",
    VisionCaptureMode.PER_CAMERA_CALL.value: "'per_camera_call' (one call per camera)",
    VisionCaptureMode.STACKED_CAMERA_BATCH.value: "'stacked_camera_batch' (cameras stacked in one call)",
}

_BUSY = "an explanation is already running for this viewer; wait for it or cancel it."

Score = Callable[[Any], torch.Tensor]
Forward = Callable[[dict[str, torch.Tensor]], Any]


class AttributionViewerWidget(BrowserSafeState):
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
    colormap = traitlets.Unicode("viridis").tag(sync=True)
    opacity = traitlets.Float(0.5).tag(sync=True)
    scale = traitlets.Unicode("normalized").tag(sync=True)
    view = traitlets.Unicode("grid").tag(sync=True)
    focused_camera = traitlets.Unicode("").tag(sync=True)
    dataset = traitlets.Dict().tag(sync=True)
    dataset_task = traitlets.Dict().tag(sync=True)
    sample_index = traitlets.Int(0).tag(sync=True)
    aggregate_stat = traitlets.Unicode("mean").tag(sync=True)
    # "all" or a class index as a string: which class's aggregate maps the dataset view shows.
    aggregate_class = traitlets.Unicode("all").tag(sync=True)

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
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        if (score is None) == (target_class is None):
            raise ValueError(
                "give exactly one of score (a callable output -> score) and target_class "
                f"(an int); got score={score!r}, target_class={target_class!r}."
            )
        if score is not None and not callable(score):
            raise TypeError(f"score must be callable, got {type(score).__name__}.")
        if target_class is not None:
            try:
                target_class = _check_class(target_class)
            except CommandError as exc:
                raise ValueError(str(exc)) from None
        self._model = model
        self._inputs = _model_inputs(images)
        keys = list(self._inputs)
        self._score = score
        self._forward = forward
        self._records: dict[str, CameraAttribution] = {}
        # The dataset view: samples the slider can show (label, camera -> [1, C, H, W]),
        # the engine's folded statistics, and what the last pass was given.
        self._kept: list[tuple[str, dict[str, torch.Tensor]]] = []
        self._map_statistics: tuple[CameraMapStatistics, ...] = ()
        self._class_statistics: tuple[CameraMapStatistics, ...] = ()
        self._reliance: tuple[CameraRelianceStatistics, ...] = ()
        self._dataset_source: dict[str, Any] | None = None
        self._python_targets: dict[str, CameraExplanationTarget] | None = None

        mode = _check_choice("capture_mode", capture_mode, CAPTURE_MODES) if capture_mode else None
        if targets is not None:
            if layer is not None:
                raise ValueError("give either targets or layer, not both.")
            self._python_targets = _targets_by_camera(targets, keys)
            modes = {t.capture_mode for t in self._python_targets.values()}
            mode = mode or (modes.pop() if len(modes) == 1 else None)
        elif isinstance(layer, Mapping):
            self._python_targets = {
                t.camera_key: t
                for t in camera_targets_for_layer(
                    dict(layer), mode or VisionCaptureMode.DEDICATED_LAYER, keys
                )
            }
            mode = mode or VisionCaptureMode.DEDICATED_LAYER.value
        mode = mode or VisionCaptureMode.DEDICATED_LAYER.value

        layers, probe_note = _layer_options(model, self._inputs, forward)
        super().__init__(
            camera_keys=keys,
            images=_images_payload(self._inputs),
            methods=[{"value": k, "label": v} for k, v in METHOD_LABELS.items()],
            capture_modes=list(CAPTURE_MODES),
            layers=layers,
            layer_choices=_choices_by_mode(layers),
            explicit_targets=self._python_targets is not None,
            method=_check_choice("method", method, tuple(METHOD_LABELS)),
            layer=layer if isinstance(layer, str) else "",
            selected_layer=layer if isinstance(layer, str) else "",
            capture_mode=mode,
            target_class=target_class,
            target_label=_score_label(score, target_class),
            colormap=_check_choice("colormap", colormap, COLORMAPS),
            opacity=_check_opacity(opacity),
            scale=_check_choice("scale", scale, ("normalized", "raw")),
            view=_check_choice("view", view, ("grid", "single")),
            focused_camera=keys[0],
        )
        if probe_note:
            self._report_error("", probe_note)
        if isinstance(layer, str):
            try:  # fail at construction, not at the first click
                self._targets_for(layer, mode)
            except CommandError as exc:
                raise ValueError(str(exc)) from None
        self.selection = ModuleSelection() if selection is None else selection
        self._selection_link = SelectionLink(
            self.selection,
            self,
            "selected_layer",
            to_owner=self._layer_for_modules,
            from_owner=self._modules_for_layer,
        )
        if compute and (layer is not None or targets is not None):
            reply = self.run_command("explain", {})
            if reply["kind"] == "error":
                raise RuntimeError(reply["message"])

    # Display state may also be set from Python (w.colormap = "magma"): refuse what the
    # browser cannot draw rather than letting screen and export_png disagree.
    @traitlets.validate("colormap")
    def _valid_colormap(self, proposal: Any) -> str:
        return _check_trait("colormap", proposal["value"], COLORMAPS)

    @traitlets.validate("scale")
    def _valid_scale(self, proposal: Any) -> str:
        return _check_trait("scale", proposal["value"], ("normalized", "raw"))

    @traitlets.validate("view")
    def _valid_view(self, proposal: Any) -> str:
        return _check_trait("view", proposal["value"], ("grid", "single"))

    @traitlets.validate("selected_layer")
    def _valid_selected_layer(self, proposal: Any) -> str:
        value = proposal["value"]
        if value == "" or value == self.layer or value in {c["path"] for c in self.layers}:
            return str(value)
        raise traitlets.TraitError(
            f"selected_layer={value!r} is not one of this viewer's layer choices."
        )

    @traitlets.validate("aggregate_stat")
    def _valid_aggregate_stat(self, proposal: Any) -> str:
        value = proposal["value"]
        stats = [s["value"] for s in self.dataset.get("stats", [])] or ["mean"]
        return _check_trait("aggregate_stat", value, stats)

    @traitlets.validate("aggregate_class")
    def _valid_aggregate_class(self, proposal: Any) -> str:
        classes = [c["value"] for c in self.dataset.get("classes", [])] or ["all"]
        return _check_trait("aggregate_class", proposal["value"], classes)

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
        return {key: _image_map(record).copy() for key, record in self._records.items()}

    @property
    def flatness(self) -> dict[str, MapFlatness]:
        """Camera key -> how flat its raw map is next to the other cameras' (the mark on screen)."""
        return _flatness(self._records)

    @property
    def layer_maps(self) -> dict[str, np.ndarray]:
        """Camera key -> raw map at the target layer's resolution, float32 [h, w]."""
        return {key: _layer_map(record).copy() for key, record in self._records.items()}

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

    # -- dataset view ------------------------------------------------------------------------
    def explain_dataset(
        self,
        loader: Iterable[Any],
        *,
        max_batches: int | None = None,
        baseline: Baseline = "zeros",
        percentiles: Sequence[float] = (50.0, 90.0),
        keep_samples: int = 32,
        batch_images: BatchImages | None = None,
        wait: bool = True,
    ) -> CommandTask:
        """Attribution over a data slice: aggregate maps, camera reliance and a sample slider.

        Runs the engine's streaming aggregation
        (:func:`~vinlens.attribution.aggregate.aggregate_attributions`) and camera reliance
        (:func:`~vinlens.attribution.aggregate.camera_reliance_over`) one batch at a time
        with the viewer's current method, layer, capture mode and target, on the widget's
        task runtime: progress and Cancel show in the widget, memory stays independent of
        the number of batches. The first ``keep_samples`` samples stay on the slider; the
        first of them is explained and shown in the camera panels.

        Args:
            loader: A ``DataLoader`` or any iterable of batches: a mapping camera key ->
                images ``[B, C, H, W]``, or ``(images, labels, ...)``; otherwise give
                ``batch_images``.
            max_batches: Stop after this many batches (``None``: all of them).
            baseline: What replaces a camera's input for reliance: ``"zeros"``, ``"mean"``
                (the slice's mean image per camera; one more pass over ``loader``), a
                mapping camera key -> image, or a callable ``(camera, images) -> images``.
            percentiles: Percentile maps to offer beside the mean map.
            keep_samples: Samples the slider can show (their images stay in memory).
            batch_images: ``batch -> mapping camera key -> images``.
            wait: Block until the pass ends and raise its error (interrupting the kernel
                cancels the pass). With ``wait=False`` it returns at once and the cell is
                free: the widget's Cancel button works (it cannot reach a kernel that is
                busy in this call), and ``task.wait()`` / ``task.cancel()`` do too, but the
                model is hooked while the pass runs, so leave it alone until it ends.

        Returns:
            The pass's task.

        Raises:
            RuntimeError: With the widget's message when the pass fails (``wait=True``), or
                when an explanation is already running.
            ValueError: On a bad ``max_batches``, ``keep_samples`` or percentile.
        """
        if isinstance(loader, Mapping) or not isinstance(loader, Iterable):
            raise TypeError(
                "loader must be a DataLoader or an iterable of batches, got "
                f"{type(loader).__name__}; for one sample use the images argument."
            )
        if max_batches is not None and (not _is_count(max_batches) or max_batches < 1):
            raise ValueError(
                f"max_batches must be a positive integer or None, got {max_batches!r}."
            )
        if not _is_count(keep_samples) or keep_samples < 1:
            raise ValueError(f"keep_samples must be a positive integer, got {keep_samples!r}.")
        checked = tuple(float(p) for p in percentiles)
        if not all(0.0 <= p <= 100.0 for p in checked):
            raise ValueError(f"percentiles must lie in [0, 100], got {list(percentiles)}.")
        self._dataset_source = {
            "loader": loader,
            "max_batches": max_batches,
            "baseline": baseline,
            "percentiles": checked,
            "keep_samples": keep_samples,
            "batch_images": batch_images,
        }
        task = self.start_command(
            "explain_dataset", trigger="explain_dataset()", id_prefix="dataset"
        )
        if wait:
            try:
                task.join()
            except KeyboardInterrupt:
                task.cancel()
                task.join()
                raise
            if task.exception is not None and not isinstance(task.exception, CommandCancelled):
                raise RuntimeError(self.error or str(task.exception)) from task.exception
        return task

    def show_sample(self, index: int) -> dict[str, CameraAttribution]:
        """Explain and show kept sample ``index`` of the last dataset pass (as the slider does).

        Raises:
            RuntimeError: With the message the widget shows, when the command fails.
        """
        reply = self.run_command("explain", {"sample": index})
        if reply["kind"] == "error":
            raise RuntimeError(reply["message"])
        return self.records

    @property
    def map_statistics(self) -> tuple[CameraMapStatistics, ...]:
        """The engine's per-camera map statistics of the last dataset pass (all classes)."""
        return self._map_statistics

    @property
    def class_map_statistics(self) -> tuple[CameraMapStatistics, ...]:
        """The engine's per-camera map statistics of each class of the last dataset pass."""
        return self._class_statistics

    @property
    def reliance(self) -> tuple[CameraRelianceStatistics, ...]:
        """The engine's camera reliance of the last dataset pass, largest mean drop first."""
        return self._reliance

    @command("explain_dataset", background=True, exclusive=True, busy=_BUSY)
    def _explain_dataset(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        source = self._dataset_source
        if source is None:
            raise CommandError(
                "no data loader yet; call viewer.explain_dataset(loader) in Python first."
            )
        state = {"id": ctx.request_id, "state": "running", "done": 0, "total": 0}
        try:
            summary = self._dataset_pass(source, ctx, state)
        except CommandCancelled:
            self.dataset_task = {**state, "state": "cancelled"}
            raise
        except BaseException as exc:
            self.dataset_task = {**state, "state": "failed", "message": str(exc)}
            raise
        self.dataset_task = {**state, "state": "done"}
        return summary

    def _dataset_pass(
        self, source: dict[str, Any], ctx: CommandContext, state: dict[str, Any]
    ) -> dict[str, Any]:
        # Imported here: the per-image viewer does not need the dataset engine loaded.
        from vinlens.attribution.aggregate import (
            aggregate_attributions,
            camera_image_means,
            camera_reliance_over,
        )

        if not self.layer and self._python_targets is None:
            raise CommandError("no target layer chosen; pick a layer and press Recompute first.")
        targets = self._targets_for(self.layer, self.capture_mode)
        if self.layer:
            self._check_mode(self.layer, self.capture_mode)
        score = self._score if self._score is not None else self.target_class
        assert score is not None  # __init__ requires score or target_class
        loader = source["loader"]
        limit = source["max_batches"]
        total = _length(loader)
        total = min(total, limit) if total is not None and limit is not None else (total or limit)
        state["total"] = total or 0
        self.dataset_task = dict(state)
        ctx.progress(0, total or 0)

        baseline = source["baseline"]
        if isinstance(baseline, str) and baseline == "mean":
            # The slice's own mean image: one pass more, as the engine documents.
            baseline = ctx.call(
                lambda: camera_image_means(
                    islice(loader, limit), batch_images=source["batch_images"]
                )
            )
        kept: list[tuple[str, dict[str, torch.Tensor]]] = []
        aggregate: AttributionAggregate | None = None
        reliance: RelianceSummary | None = None
        batches = 0
        for batches, batch in enumerate(islice(loader, limit), start=1):
            first = aggregate.samples if aggregate is not None else 0
            found = aggregate_attributions(
                self._model,
                [batch],
                list(targets.values()),
                score=score,
                method=self.method,
                forward=self._forward,
                batch_images=source["batch_images"],
                first_sample_id=first,
            )
            aggregate = found if aggregate is None else aggregate.merge(found)
            ctx.check_cancelled()
            batch_reliance = camera_reliance_over(
                self._model,
                [batch],
                score,
                baseline=baseline,
                forward=self._forward,
                batch_images=source["batch_images"],
            )
            reliance = batch_reliance if reliance is None else reliance.merge(batch_reliance)
            _keep_samples(kept, batch, batches - 1, source, self.camera_keys)
            state["done"] = batches
            self.dataset_task = dict(state)
            ctx.progress(batches, total or 0)
        if aggregate is None or reliance is None:
            raise CommandError("the loader gave no batches; nothing to aggregate.")

        statistics = aggregate.finish(source["percentiles"])
        self._map_statistics = tuple(s for s in statistics if s.class_index is None)
        self._class_statistics = tuple(s for s in statistics if s.class_index is not None)
        self._reliance = reliance.finish()
        self._kept = kept
        payload = _dataset_payload(
            statistics,
            self._reliance,
            kept,
            samples=aggregate.samples,
            batches=batches,
            baseline=baseline
            if isinstance(source["baseline"], str)
            else type(source["baseline"]).__name__,
            score_label=self.target_label,
            method_label=METHOD_LABELS.get(self.method, self.method),
            layer=self.layer or "(targets given in Python)",
            camera_keys=list(self.camera_keys),
        )
        with self.hold_sync():
            self.dataset = payload
            stats = [s["value"] for s in payload["stats"]]
            if self.aggregate_stat not in stats:
                self.aggregate_stat = stats[0]
            if self.aggregate_class not in [c["value"] for c in payload["classes"]]:
                self.aggregate_class = "all"
        self._explain_now({"sample": 0}, ctx)
        return {"samples": aggregate.samples, "batches": batches}

    def _check_sample(self, value: Any) -> int:
        if not self._kept:
            raise CommandError("no dataset samples yet; run viewer.explain_dataset(loader) first.")
        if not _is_count(value) or not 0 <= value < len(self._kept):
            raise CommandError(
                f"sample must be an integer in [0, {len(self._kept)}), got {value!r}."
            )
        return int(value)

    def export_png(self, directory: str | Path, *, overlay: bool = False) -> list[Path]:
        """Write the current maps as ``<camera>.png``, coloured as the widget shows them.

        Uses the widget's colormap and scale (normalised per camera, or the shared raw
        range). With ``overlay=True`` the heatmap is blended over the camera image at
        the widget's opacity, as on screen. Returns the written paths in camera order.

        Raises:
            RuntimeError: When no maps have been computed yet.
        """
        from matplotlib import colormaps
        from matplotlib.image import imsave

        if not self._records:
            raise RuntimeError("no attribution maps yet; call recompute() first.")
        out_dir = Path(directory)
        out_dir.mkdir(parents=True, exist_ok=True)
        cmap = colormaps[self.colormap]
        maps = self.maps
        ranges = _display_ranges(self.scale, maps)
        written: list[Path] = []
        for key, values in maps.items():
            vmin, vmax = ranges[key]
            name = _safe_filename(key)
            if out_dir / f"{name}.png" in written:  # two keys that sanitise alike
                name = f"{name}-{len(written)}"
            path = out_dir / f"{name}.png"
            if overlay:
                colour = cmap(_normalized(values, vmin, vmax))[..., :3]
                image = _display_image(key, self._inputs[key]).astype(np.float32) / 255.0
                if image.shape[-1] == 1:
                    image = np.repeat(image, 3, axis=-1)
                blended = (1 - self.opacity) * image[..., :3] + self.opacity * colour
                imsave(path, np.clip(blended, 0.0, 1.0))
            else:
                imsave(path, values, cmap=cmap, vmin=vmin, vmax=vmax)
            written.append(path)
        return written

    # -- commands ------------------------------------------------------------------------
    # Exclusive: two runs at once would hook the same modules concurrently.
    @command("explain", background=True, exclusive=True, busy=_BUSY)
    def _explain(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        return self._explain_now(args, ctx)

    def _explain_now(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        """The explain command's work; the dataset pass runs it too, inside its own flight."""
        inputs, sample = self._inputs, None
        if args.get("sample") is not None:
            # Another kept sample: every camera is explained again, on its images.
            sample = self._check_sample(args["sample"])
            inputs = self._kept[sample][1]
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
                self.images = _images_payload(inputs)
                self.sample_index = sample
            self.method = method
            self.capture_mode = mode
            self.layer = layer or ""
            self.selected_layer = layer or ""
            self.target_class = target_class
            flatness = _flatness(self._records)
            self.attributions = {
                key: _record_payload(record, flatness[key]) for key, record in self._records.items()
            }
        return {"cameras": list(records)}

    def _check_mode(self, layer: str, mode: str) -> None:
        """Refuse a mode the layer cannot be read in, as the engine's probe found at creation."""
        offered = {c["path"]: c["modes"] for c in self.layers}
        modes = offered.get(layer, [])
        if mode in modes:
            return
        labels = [_MODE_WORDS.get(m, m) for m in modes]
        hint = (
            f"it can be read in {' or '.join(labels)}"
            if labels
            else "it runs neither once per camera, nor once on the stacked cameras, nor as "
            "each camera's own module; pick another layer"
        )
        raise CommandError(
            f"layer {layer!r} cannot be read in capture mode {mode!r} on this model: {hint}."
        )

    # -- linked selection ------------------------------------------------------------------
    def _layer_for_modules(self, paths: list[str]) -> Any:
        """The layer choice for the latest picked module that is one (else keep the chooser)."""
        choices = [c["path"] for c in self.layers if c["modes"]]
        for path in reversed(paths):
            for choice in choices:
                if path in self._modules_for_layer(choice):
                    return choice
        return NO_CHANGE

    def _modules_for_layer(self, layer: Any) -> list[str]:
        """The module paths a layer choice reads: one per camera for a ``{camera}`` template."""
        if not layer:
            return []
        layer = str(layer)
        if CAMERA_PLACEHOLDER in layer:
            return [layer.replace(CAMERA_PLACEHOLDER, key) for key in self.camera_keys]
        return [layer]

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
        keys = list(self.camera_keys)
        if not layer:
            if self._python_targets is None:
                raise CommandError(
                    "no target layer chosen; pick a layer (module path) and press Recompute."
                )
            targets = self._python_targets
        else:
            try:
                made = camera_targets_for_layer(layer, mode, keys)
            except ValueError as exc:
                raise CommandError(f"layer {layer!r} in capture mode {mode!r}: {exc}") from None
            targets = {t.camera_key: t for t in made}
        for target in targets.values():
            path = target.target.module_path
            try:
                self._model.get_submodule(path)
            except AttributeError:
                raise CommandError(
                    f"layer {path!r} (camera {target.camera_key!r}) is not a module of "
                    f"{type(self._model).__name__}; pick one of its module paths."
                ) from None
        return targets


# -- image and payload conversion ---------------------------------------------------------
def _model_inputs(images: Mapping[str, ImageLike]) -> dict[str, torch.Tensor]:
    """Camera key -> float tensor ``[1, C, H, W]`` as the model gets it (arrays channels last)."""
    return camera_image_batches(images, array_layout="HWC", samples=1)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable without a length (a generator, an IterableDataset loader)
        return None


def _keep_samples(
    kept: list[tuple[str, dict[str, torch.Tensor]]],
    batch: Any,
    batch_index: int,
    source: Mapping[str, Any],
    camera_keys: Sequence[str],
) -> None:
    """Append this batch's samples to ``kept`` until it holds ``keep_samples`` of them."""
    room = source["keep_samples"] - len(kept)
    if room <= 0:
        return
    to_images = source["batch_images"] or batch_camera_images
    images = camera_image_batches(to_images(batch))
    size = next(iter(images.values())).shape[0]
    for i in range(min(room, size)):
        one = {key: images[key][i : i + 1].detach().cpu() for key in camera_keys}
        kept.append((f"batch {batch_index} #{i}", one))


def _dataset_payload(
    statistics: Sequence[CameraMapStatistics],
    reliance: Sequence[CameraRelianceStatistics],
    kept: Sequence[tuple[str, Any]],
    *,
    samples: int,
    batches: int,
    baseline: str,
    score_label: str,
    method_label: str,
    layer: str,
    camera_keys: list[str],
) -> dict[str, Any]:
    """The dataset view's payload: engine statistics as maps, flatness and reliance rows.

    ``statistics`` is everything the engine finished: the all-classes records
    (``class_index=None``) fill ``aggregates``, each class's fill ``class_aggregates``
    under its index as a string, and ``concentration`` holds, per class choice and
    camera, the most and least concentrated samples. A kept sample's index on the slider
    is its sample id: both count samples in loader order from the first batch.
    """
    groups: dict[int | None, list[CameraMapStatistics]] = {}
    for statistic in statistics:
        groups.setdefault(statistic.class_index, []).append(statistic)
    overall = groups.get(None, [])
    stats: list[dict[str, str]] = [{"value": "mean", "label": "mean map (raw)"}]
    for statistic in overall[:1]:
        for p in statistic.percentile_maps:
            stats.append({"value": f"p{p:g}", "label": f"{p:g}th percentile (normalised maps)"})
    classes = [{"value": "all", "label": f"all classes ({samples})"}]
    class_aggregates: dict[str, dict[str, dict[str, Any]]] = {}
    concentration: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {
        "all": _concentration_rows(overall, camera_keys, len(kept))
    }
    for index in sorted(c for c in groups if c is not None):
        members = groups[index]
        classes.append({"value": str(index), "label": f"class {index} ({members[0].count})"})
        class_aggregates[str(index)] = _aggregate_maps(members, camera_keys)
        concentration[str(index)] = _concentration_rows(members, camera_keys, len(kept))
    by_key = {r.camera_key: r for r in reliance}
    drops = {key: r.mean_drop for key, r in by_key.items()}
    positive = sum(max(d, 0.0) for d in drops.values() if math.isfinite(d))
    rows = [
        {
            "camera": key,
            "drop": drops[key],
            "std": by_key[key].std_drop,
            "share": max(drops[key], 0.0) / positive if positive > 0 else 0.0,
        }
        for key in camera_keys
        if key in drops
    ]
    payload: dict[str, Any] = to_jsonable(
        {
            "samples": samples,
            "batches": batches,
            "kept": [label for label, _ in kept],
            "baseline": baseline,
            "score_label": score_label,
            "method_label": method_label,
            "layer": layer,
            "stats": stats,
            "aggregates": _aggregate_maps(overall, camera_keys),
            "classes": classes,
            "class_aggregates": class_aggregates,
            "concentration": concentration,
            "reliance": rows,
        }
    )
    return payload


def _aggregate_maps(
    statistics: Sequence[CameraMapStatistics], camera_keys: list[str]
) -> dict[str, dict[str, Any]]:
    """stat -> camera -> map with its range and flatness, judged across the cameras."""
    by_camera = {s.camera_key: s for s in statistics}
    maps: dict[str, dict[str, np.ndarray]] = {"mean": {}}
    for key in camera_keys:
        if key not in by_camera:
            continue
        maps["mean"][key] = np.asarray(by_camera[key].mean_map, dtype=np.float32)
        for p, values in by_camera[key].percentile_maps.items():
            maps.setdefault(f"p{p:g}", {})[key] = np.asarray(values, dtype=np.float32)
    aggregates: dict[str, dict[str, Any]] = {}
    for stat, per_camera in maps.items():
        ranges = {k: _finite_range(v) for k, v in per_camera.items()}
        flatness = map_flatness(ranges)
        aggregates[stat] = {
            key: {
                "map": values,
                "min": ranges[key][0],
                "max": ranges[key][1],
                "span": flatness[key].span,
                "relative_span": flatness[key].relative_span,
                "largest_camera": flatness[key].largest_camera,
                "flat": flatness[key].flat,
                "flat_reason": flatness[key].reason,
            }
            for key, values in per_camera.items()
        }
    return aggregates


def _concentration_rows(
    statistics: Sequence[CameraMapStatistics], camera_keys: list[str], kept: int
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """camera -> "most" / "least" -> the engine's samples, each with its slider index or None."""
    by_camera = {s.camera_key: s for s in statistics}
    return {
        key: {
            which: [
                {
                    "sample_id": sample.sample_id,
                    "concentration": sample.concentration,
                    "kept_index": sample.sample_id if 0 <= sample.sample_id < kept else None,
                    "map": np.asarray(sample.raw_map, dtype=np.float32),
                }
                for sample in samples
            ]
            for which, samples in (
                ("most", by_camera[key].most_concentrated),
                ("least", by_camera[key].least_concentrated),
            )
        }
        for key in camera_keys
        if key in by_camera
    }


def _finite_range(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    return (float(finite.min()), float(finite.max())) if finite.size else (math.nan, math.nan)


def _images_payload(inputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    return {key: encode_array(_display_image(key, image)) for key, image in inputs.items()}


def _display_image(key: str, tensor: torch.Tensor) -> np.ndarray:
    """uint8 ``[H, W, C]`` (C = 1, 3 or 4) for the canvas.

    Values in [0, 1] are scaled by 255, values in [0, 255] kept, and anything else
    (e.g. mean/std-normalised inputs) stretched to its own min..max so it stays visible.
    """
    array = tensor.detach().to("cpu", torch.float32)[0].numpy()
    channels = array.shape[0]
    if channels not in (1, 3, 4):
        array = array.mean(axis=0, keepdims=True)
    array = np.transpose(array, (1, 2, 0))
    finite = array[np.isfinite(array)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if lo >= 0.0 and hi <= 1.0:
        scaled = array * 255.0
    elif lo >= 0.0 and hi <= 255.0:
        scaled = array
    else:
        scaled = (array - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(array)
    image: np.ndarray = np.nan_to_num(np.clip(np.rint(scaled), 0, 255)).astype(np.uint8)
    return image


def _layer_map(record: CameraAttribution) -> np.ndarray:
    return np.asarray(record.raw_map, dtype=np.float32)


def _image_map(record: CameraAttribution) -> np.ndarray:
    return np.asarray(record.upsampled_map, dtype=np.float32)


def _flatness(records: Mapping[str, CameraAttribution]) -> dict[str, MapFlatness]:
    # Judged across every camera on screen, so a recompute of some cameras re-judges all.
    return map_flatness({key: (r.raw_min, r.raw_max) for key, r in records.items()})


def _record_payload(record: CameraAttribution, flatness: MapFlatness) -> dict[str, Any]:
    """What the browser needs of one record: the image-sized raw map plus its labels."""
    values = _image_map(record)
    layer_shape = list(record.layer_shape)
    target = record.target
    # Through to_jsonable so a NaN or infinite score or range arrives as an explicit value.
    payload: dict[str, Any] = to_jsonable(
        {
            "camera_key": record.camera_key,
            "method": record.method,
            "method_label": METHOD_LABELS.get(record.method, record.method),
            "layer": target.target.module_path,
            "capture_mode": target.capture_mode,
            "target": _describe_target(target),
            "score": float(record.score),
            "map": values,
            "layer_shape": layer_shape,
            "min": record.raw_min,
            "max": record.raw_max,
            "span": flatness.span,
            "relative_span": flatness.relative_span,
            "largest_camera": flatness.largest_camera,
            "flat": flatness.flat,
            "flat_reason": flatness.reason,
        }
    )
    return payload


def _describe_target(target: CameraExplanationTarget) -> str:
    out = f"{target.target.module_path} ({target.capture_mode}"
    if target.invocation_index is not None:
        out += f", call {target.invocation_index}"
    if target.stacked_camera_index is not None:
        out += f", slice {target.stacked_camera_index}/{target.stacked_camera_count}"
    return out + ")"


def _choices_by_mode(layers: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """The layer options per capture mode (what ``layer_choices`` holds)."""
    return {
        mode: [{"path": c["path"], "type": c["type"]} for c in layers if mode in c["modes"]]
        for mode in CAPTURE_MODES
    }


def _layer_options(
    model: nn.Module,
    inputs: Mapping[str, torch.Tensor],
    forward: Forward | None,
) -> tuple[list[dict[str, Any]], str]:
    """Every layer choice with the capture modes it can be read in, in module order.

    The engine runs one probe forward on the viewer's images, so a mode is offered for a
    layer only when the layer really runs that way (once per camera, stacked, ...). When
    that forward fails, the structural choices are offered and the second item says why,
    so the viewer still opens and shows the model's error.
    """
    keys = list(inputs)
    note = ""
    try:
        found = layer_choices(model, keys, images=inputs, forward=forward)
    except Exception as exc:  # the user's model: anything may come out of its forward
        found = layer_choices(model, keys)
        note = (
            "could not run the model once on these images to find which capture modes each "
            f"layer can be read in ({type(exc).__name__}: {exc}); every structurally "
            "possible mode is offered."
        )
    by_path: dict[str, dict[str, Any]] = {}
    for mode, choices in found.items():
        for choice in choices:
            entry = by_path.setdefault(
                choice.path, {"path": choice.path, "type": choice.module_type, "modes": []}
            )
            entry["modes"].append(mode)
    return list(by_path.values()), note


def _targets_by_camera(
    targets: Sequence[CameraExplanationTarget], keys: list[str]
) -> dict[str, CameraExplanationTarget]:
    """The engine's target checks, then the viewer's own rule: exactly one target per image."""
    by_camera: dict[str, CameraExplanationTarget] = {}
    for target in check_camera_targets(targets, keys):
        if target.camera_key in by_camera:
            raise ValueError(f"two targets for camera {target.camera_key!r}.")
        by_camera[target.camera_key] = target
    missing = [k for k in keys if k not in by_camera]
    if missing:
        raise ValueError(f"no target for camera(s) {missing}; give one target per image.")
    return by_camera


def _display_ranges(scale: str, maps: Mapping[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """The colour-scale range per camera, as js/widgets/attribution_viewer.ts:displayRange."""

    def finite_range(values: np.ndarray) -> tuple[float, float]:
        lo, hi = _finite_range(values)
        return (lo, hi) if math.isfinite(lo) else (0.0, 0.0)

    own = {key: finite_range(values) for key, values in maps.items()}
    if scale == "normalized":
        return own
    shared = (min(0.0, *(lo for lo, _ in own.values())), max(hi for _, hi in own.values()))
    return {key: shared for key in maps}


def _normalized(values: np.ndarray, vmin: float, vmax: float) -> np.ndarray:
    if not vmax > vmin:
        return np.full_like(values, 0.5)
    return np.clip((values - vmin) / (vmax - vmin), 0.0, 1.0)


def _safe_filename(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key) or "camera"


def _score_label(score: Score | None, target_class: int | None) -> str:
    if score is None:
        return f"class {target_class}"
    return f"score {getattr(score, '__name__', None) or type(score).__name__}"


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    value = value.value if isinstance(value, VisionCaptureMode) else value
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}.")
    return str(value)


def _check_trait(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise traitlets.TraitError(f"{name}={value!r} is not one of {list(choices)}.")
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
