"""The attribution viewer's dataset view: one engine operation, its progress and its record.

:class:`DatasetView` is the viewer's dataset half (its traitlets, ``explain_dataset``,
``show_sample`` and the engine's statistics of the last pass); the viewer supplies what
to explain with (:class:`DatasetContext`). :func:`run_dataset_view` starts :func:`vinlens.attribution.explain_dataset` (aggregate maps,
camera reliance and the kept samples in one pass) with the viewer's method, targets and
score, forwards its ``progress(done, total)`` to the widget's command (with the phase:
the mean-image pass, then the maps) and maps the widget's Cancel onto the operation's
cancel token, so a cancel stops reading the loader at once, in either phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import traitlets
from torch import nn

from vinlens.attribution import CameraAttribution, CameraExplanationTarget
from vinlens.attribution.batches import BatchImages
from vinlens.attribution.dataset import DatasetExplanation, KeptSample, explain_dataset
from vinlens.attribution.maps import CameraMapStatistics
from vinlens.attribution.reliance import Baseline, CameraRelianceStatistics
from vinlens.operations import CancelToken, OperationCancelled
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandCancelled,
    CommandContext,
    CommandError,
    CommandTask,
    command,
)
from vinlens.widgets.attribution_viewer_payload import dataset_payload

__all__ = [
    "BUSY",
    "DatasetContext",
    "DatasetSource",
    "DatasetView",
    "check_dataset_source",
    "run_dataset_view",
]

BUSY = "an explanation is already running for this viewer; wait for it or cancel it."


@dataclass(frozen=True, eq=False)
class DatasetContext:
    """What the viewer explains a dataset with: its model, applied targets, score, method."""

    model: nn.Module
    targets: tuple[CameraExplanationTarget, ...]
    score: Any
    method: str
    forward: Callable[[dict[str, Any]], Any] | None
    score_label: str
    layer_label: str
    camera_keys: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class DatasetSource:
    """What ``explain_dataset(loader, ...)`` was given, checked."""

    loader: Iterable[Any]
    max_batches: int | None
    baseline: Baseline
    percentiles: tuple[float, ...]
    keep_samples: int
    batch_images: BatchImages | None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_dataset_source(
    loader: Iterable[Any],
    *,
    max_batches: int | None,
    baseline: Baseline,
    percentiles: Sequence[float],
    keep_samples: int,
    batch_images: BatchImages | None,
) -> DatasetSource:
    """The arguments of ``AttributionViewerWidget.explain_dataset`` as a :class:`DatasetSource`.

    Raises:
        TypeError: On a loader that is a mapping or not iterable.
        ValueError: On a bad ``max_batches``, ``keep_samples`` or percentile.
    """
    if isinstance(loader, Mapping) or not isinstance(loader, Iterable):
        raise TypeError(
            "loader must be a DataLoader or an iterable of batches, got "
            f"{type(loader).__name__}; for one sample use the images argument."
        )
    if max_batches is not None and (not _is_count(max_batches) or max_batches < 1):
        raise ValueError(f"max_batches must be a positive integer or None, got {max_batches!r}.")
    if not _is_count(keep_samples) or keep_samples < 1:
        raise ValueError(f"keep_samples must be a positive integer, got {keep_samples!r}.")
    checked = tuple(float(p) for p in percentiles)
    if not all(0.0 <= p <= 100.0 for p in checked):
        raise ValueError(f"percentiles must lie in [0, 100], got {list(percentiles)}.")
    return DatasetSource(loader, max_batches, baseline, checked, keep_samples, batch_images)


def run_dataset_view(
    model: nn.Module,
    source: DatasetSource,
    targets: Sequence[CameraExplanationTarget],
    *,
    score: Any,
    method: str,
    forward: Callable[[dict[str, Any]], Any] | None,
    ctx: CommandContext,
    publish: Callable[[dict[str, Any]], None],
) -> DatasetExplanation:
    """Run the dataset operation for the viewer; ``publish`` gets each task state.

    Raises:
        CommandCancelled: When the widget's Cancel (or ``task.cancel()``) stopped it.
        CommandError: When the loader gave no batches or an argument was refused.
    """
    state: dict[str, Any] = {
        "id": ctx.request_id,
        "state": "running",
        "phase": "maps",
        "done": 0,
        "total": 0,
    }
    two_passes = isinstance(source.baseline, str) and source.baseline == "mean"
    if two_passes:
        state["phase"] = "mean"
    publish(dict(state))

    def progress(done: int, total: int) -> None:
        # With the mean baseline the first half of the steps read the mean image.
        half = total // 2 if two_passes else 0
        state["phase"] = "mean" if two_passes and done < half else "maps"
        shown_total = total - half if two_passes else total
        state["done"] = done - half if state["phase"] == "maps" else done
        state["total"] = shown_total
        publish(dict(state))
        ctx.progress(done, total)

    try:
        record = explain_dataset(
            model,
            source.loader,
            targets,
            score=score,
            method=method,
            baseline=source.baseline,
            percentiles=source.percentiles,
            keep_samples=source.keep_samples,
            max_batches=source.max_batches,
            forward=forward,
            batch_images=source.batch_images,
            progress=progress,
            cancel=CancelToken(ctx.cancel_event),
        )
    except OperationCancelled:
        publish({**state, "state": "cancelled"})
        raise CommandCancelled("cancelled by the user") from None
    except CommandCancelled:
        publish({**state, "state": "cancelled"})
        raise
    except ValueError as exc:
        publish({**state, "state": "failed", "message": str(exc)})
        if "empty" in str(exc):
            raise CommandError("the loader gave no batches; nothing to aggregate.") from None
        raise CommandError(str(exc)) from None
    except BaseException as exc:
        publish({**state, "state": "failed", "message": str(exc)})
        raise
    publish({**state, "state": "done", "phase": "maps"})
    return record


class DatasetView(BrowserSafeState):
    """The dataset half of the attribution viewer (see ``AttributionViewerWidget``).

    A subclass provides :meth:`_dataset_context` (what to explain with),
    :meth:`_explain_now` (show one kept sample in the camera panels) and ``records``.
    """

    dataset = traitlets.Dict().tag(sync=True)
    dataset_task = traitlets.Dict().tag(sync=True)
    sample_index = traitlets.Int(0).tag(sync=True)
    aggregate_stat = traitlets.Unicode("mean").tag(sync=True)
    # "all" or a class index as a string: which class's aggregate maps the dataset view shows.
    aggregate_class = traitlets.Unicode("all").tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        # The dataset view: samples the slider can show, the engine's statistics of the
        # last pass, and what that pass was given.
        self._kept: tuple[KeptSample, ...] = ()
        self._map_statistics: tuple[CameraMapStatistics, ...] = ()
        self._class_statistics: tuple[CameraMapStatistics, ...] = ()
        self._reliance: tuple[CameraRelianceStatistics, ...] = ()
        self._dataset_source: DatasetSource | None = None
        super().__init__(**kwargs)

    def _dataset_context(self) -> DatasetContext:
        raise NotImplementedError

    def _explain_now(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def records(self) -> dict[str, CameraAttribution]:
        raise NotImplementedError

    @traitlets.validate("aggregate_stat")
    def _valid_aggregate_stat(self, proposal: Any) -> str:
        stats = [s["value"] for s in self.dataset.get("stats", [])] or ["mean"]
        return _check_trait("aggregate_stat", proposal["value"], stats)

    @traitlets.validate("aggregate_class")
    def _valid_aggregate_class(self, proposal: Any) -> str:
        classes = [c["value"] for c in self.dataset.get("classes", [])] or ["all"]
        return _check_trait("aggregate_class", proposal["value"], classes)

    @traitlets.validate("sample_index")
    def _valid_sample_index(self, proposal: Any) -> int:
        # The slider's position: a kept sample, or 0 before any pass.
        value = proposal["value"]
        if not _is_count(value) or not 0 <= value < max(len(self._kept), 1):
            raise traitlets.TraitError(
                f"sample_index={value!r} is not a kept sample; expected an integer in "
                f"[0, {max(len(self._kept), 1)})."
            )
        return int(value)

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

        Runs one engine operation, :func:`~vinlens.attribution.explain_dataset` (aggregate
        maps and camera reliance in one pass over the batches), with the viewer's current
        method, layer, capture mode and target, on the widget's task runtime: progress and
        Cancel show in the widget, memory stays independent of the number of batches. The
        first ``keep_samples`` samples stay on the slider; the first of them is explained
        and shown in the camera panels.

        Args:
            loader: A ``DataLoader`` or any iterable of batches: a mapping camera key ->
                images ``[B, C, H, W]``, or ``(images, labels, ...)``; otherwise give
                ``batch_images``.
            max_batches: Stop after this many batches (``None``: all of them).
            baseline: What replaces a camera's input for reliance: ``"zeros"``, ``"mean"``
                (the slice's mean image per camera; one more pass over ``loader``, from
                the same batches the maps use: a generator or shuffled loader needs
                ``max_batches``), a mapping camera key -> image, or a callable
                ``(camera, images) -> images``.
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
        self._dataset_source = check_dataset_source(
            loader,
            max_batches=max_batches,
            baseline=baseline,
            percentiles=percentiles,
            keep_samples=keep_samples,
            batch_images=batch_images,
        )
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

    @command("explain_dataset", background=True, exclusive=True, busy=BUSY)
    def _explain_dataset(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        source = self._dataset_source
        if source is None:
            raise CommandError(
                "no data loader yet; call viewer.explain_dataset(loader) in Python first."
            )
        context = self._dataset_context()

        def publish(state: dict[str, Any]) -> None:
            self.dataset_task = state

        record = run_dataset_view(
            context.model,
            source,
            context.targets,
            score=context.score,
            method=context.method,
            forward=context.forward,
            ctx=ctx,
            publish=publish,
        )
        self._map_statistics = record.overall_statistics
        self._class_statistics = record.class_statistics
        self._reliance = record.reliance_statistics
        self._kept = record.kept
        payload = dataset_payload(
            record,
            score_label=context.score_label,
            layer=context.layer_label,
            camera_keys=list(context.camera_keys),
        )
        with self.hold_sync():
            self.dataset = payload
            stats = [s["value"] for s in payload["stats"]]
            if self.aggregate_stat not in stats:
                self.aggregate_stat = stats[0]
            if self.aggregate_class not in [c["value"] for c in payload["classes"]]:
                self.aggregate_class = "all"
        self._explain_now({"sample": 0}, ctx)
        return {"samples": record.samples, "batches": record.batches}

    def _check_sample(self, value: Any) -> int:
        if not self._kept:
            raise CommandError("no dataset samples yet; run viewer.explain_dataset(loader) first.")
        if not _is_count(value) or not 0 <= value < len(self._kept):
            raise CommandError(
                f"sample must be an integer in [0, {len(self._kept)}), got {value!r}."
            )
        return int(value)


def _check_trait(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise traitlets.TraitError(f"{name}={value!r} is not one of {list(choices)}.")
    return str(value)
