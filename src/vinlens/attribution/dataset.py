"""Attribution over a data slice as one operation: aggregate maps and camera reliance.

Three entry points share one shape (:func:`vinlens.operations.run_operation`):

* :func:`aggregate_attributions`: per-camera map statistics (:mod:`~vinlens.attribution.maps`);
* :func:`camera_reliance_over`: per-camera score drops (:mod:`~vinlens.attribution.reliance`);
* :func:`explain_dataset`: both in one pass over the batches, plus the first samples'
  images, as one frozen :class:`DatasetExplanation` (what the viewer's dataset view shows).

**The fold.** Every batch becomes one partial (a :class:`DatasetAccumulator` holding the
batch's map statistics and reliance); partials are merged in batch order, and a merge
renumbers the later partial's sample ids after the earlier ones. The result depends only
on the batches and their order, not on where they ran. The running (tasks, shards, the
shared argument checks) is in :mod:`vinlens.attribution._fold`, the mean image in
:mod:`vinlens.attribution.mean_image`.

**Where it runs.** ``batches`` is either

* an iterable of batches (a ``DataLoader``, a list, a generator): read here, in one
  task, one batch at a time (memory independent of the number of batches); or
* a :class:`vinlens.workers.ShardedBatches` (or, with an executor, a list, one batch a
  shard): each shard is a task. With ``executor=`` (any ``concurrent.futures.Executor``:
  a process pool, ``distributed.Client(...).get_executor()``) the tasks run there;
  ``model`` must then be a :class:`vinlens.workers.ModelRecipe`, built once per worker,
  and ``forward``, ``score``, ``batch_images`` and ``batch_labels`` must pickle
  (top-level functions). The fold is the same in process and on any executor, so the
  records are equal (``==``).

**Progress and cancel.** ``progress(done, total)`` counts batches for an iterable (``total``
is ``0`` when the iterable has no length) and shards for a ``ShardedBatches``; with
``baseline="mean"`` the batches read for the mean image count first (see
:func:`explain_dataset`). ``cancel`` (a :class:`vinlens.operations.CancelToken` or a
``threading.Event``) is looked at between batches; a cancel raises
:class:`vinlens.operations.OperationCancelled` and no further batch is read.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from vinlens.attribution._fold import (
    Forward,
    ModelSource,
    as_shards,
    check_count,
    fold,
    length_of,
    model_check,
    progress_of,
)
from vinlens.attribution.batches import BatchImages, BatchLabels
from vinlens.attribution.explain import OutputScore
from vinlens.attribution.maps import AttributionAggregate
from vinlens.attribution.mean_image import baseline_label, camera_image_means, resolve_baseline
from vinlens.attribution.partials import (
    DatasetAccumulator,
    DatasetExplanation,
    KeptSample,
    _Request,
    check_percentiles,
)
from vinlens.attribution.reliance import Baseline, RelianceSummary
from vinlens.attribution.targets import CameraExplanationTarget
from vinlens.operations import CancelToken, ProgressCallback, as_cancel_token, check_executor
from vinlens.workers import ShardedBatches

__all__ = [
    "DatasetAccumulator",
    "DatasetExplanation",
    "KeptSample",
    "aggregate_attributions",
    "camera_image_means",
    "camera_reliance_over",
    "explain_dataset",
]


def aggregate_attributions(
    model: ModelSource,
    batches: Iterable[Any] | ShardedBatches,
    targets: Sequence[CameraExplanationTarget],
    *,
    score: int | OutputScore | None = None,
    method: str = "grad_cam",
    bins: int = 32,
    top_k: int = 5,
    forward: Forward | None = None,
    batch_images: BatchImages | None = None,
    batch_labels: BatchLabels | None = None,
    first_sample_id: int = 0,
    channel_batch_size: int = 32,
    progress: Callable[..., None] | None = None,
    executor: concurrent.futures.Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> AttributionAggregate:
    """Fold :func:`explain_cameras` over every batch into an :class:`AttributionAggregate`.

    Args:
        model: The model (see :func:`explain_cameras` for what happens to it), or a
            :class:`~vinlens.workers.ModelRecipe` (needed with ``executor``).
        batches: A ``DataLoader`` or any iterable of batches, or a
            :class:`~vinlens.workers.ShardedBatches`. A batch is a mapping camera key ->
            images ``[B, C, H, W]``, or ``(images, labels, ...)``; otherwise pass
            ``batch_images`` (and ``batch_labels``).
        targets: One target per camera to explain.
        score: What to explain: a class index, a callable on the model output, or
            ``None`` for each sample's own class (its label, else the prediction).
        method: A name in :data:`~vinlens.attribution.registry.METHOD_REGISTRY`.
        bins: Histogram bins per cell for the percentile maps.
        top_k: Samples kept as most and least concentrated per camera and class.
        forward: How to run the model on the camera mapping.
        batch_images: ``batch -> mapping camera key -> images``.
        batch_labels: ``batch -> labels [B]`` (or ``None``); a sample's class is its label,
            else the model's predicted class, else ``None`` (no grouping). Labels must be
            integer class indices of the model's output.
        first_sample_id: Id of the first sample (for shards folded apart and merged).
        channel_batch_size: Ablation-CAM channels per forward.
        progress: ``progress(done, total)`` after each batch (each shard of a
            ``ShardedBatches``); a one-argument callable gets ``done`` only.
        executor: Run the shards on this ``concurrent.futures.Executor``.
        cancel: A :class:`~vinlens.operations.CancelToken` or ``threading.Event``.

    Returns:
        The aggregate; call :meth:`AttributionAggregate.finish` for the maps. A map with a
        NaN or infinite value is counted in ``nonfinite`` and left out of the statistics.
    """
    request = _Request(
        maps=True,
        reliance=False,
        targets=tuple(targets),
        score=score,
        method=method,
        bins=bins,
        top_k=top_k,
        forward=forward,
        batch_images=batch_images,
        batch_labels=batch_labels,
        channel_batch_size=channel_batch_size,
    )
    folded = fold(
        model_check(model),
        batches,
        request,
        executor=check_executor(executor),
        progress=progress_of(progress),
        cancel=as_cancel_token(cancel),
    )
    assert folded.aggregate is not None
    return folded.aggregate.shifted(first_sample_id)


def camera_reliance_over(
    model: ModelSource,
    batches: Iterable[Any] | ShardedBatches,
    score: int | OutputScore | None = None,
    *,
    baseline: Baseline = "zeros",
    cameras: Sequence[str] | None = None,
    forward: Forward | None = None,
    batch_images: BatchImages | None = None,
    batch_labels: BatchLabels | None = None,
    progress: Callable[..., None] | None = None,
    executor: concurrent.futures.Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> RelianceSummary:
    """Fold :func:`camera_reliance` over every batch into a :class:`RelianceSummary`.

    ``baseline="mean"`` uses the slice's own mean image per camera
    (:func:`camera_image_means`), one more pass: ``batches`` must then be re-iterable (a
    ``DataLoader`` without shuffling, a list or a ``ShardedBatches``), not a generator.
    ``model``, ``batches``, ``progress``, ``executor`` and ``cancel`` as in
    :func:`aggregate_attributions`.
    """
    pool = check_executor(executor)
    token = as_cancel_token(cancel)
    report = progress_of(progress)
    resolved, batches = resolve_baseline(
        baseline,
        batches,
        batch_images=batch_images,
        executor=pool,
        progress=None,
        cancel=token,
        max_batches=None,
        total=0,
    )
    request = _Request(
        maps=False,
        reliance=True,
        score=score,
        baseline=resolved,
        baseline_label=baseline_label(baseline),
        cameras=None if cameras is None else tuple(cameras),
        forward=forward,
        batch_images=batch_images,
        batch_labels=batch_labels,
    )
    folded = fold(
        model_check(model), batches, request, executor=pool, progress=report, cancel=token
    )
    if folded.reliance is None:
        raise ValueError("camera_reliance_over: the batches are empty.")
    return folded.reliance


def explain_dataset(
    model: ModelSource,
    batches: Iterable[Any] | ShardedBatches,
    targets: Sequence[CameraExplanationTarget],
    *,
    score: int | OutputScore | None = None,
    method: str = "grad_cam",
    baseline: Baseline = "zeros",
    cameras: Sequence[str] | None = None,
    percentiles: Sequence[float] = (50.0, 90.0),
    bins: int = 32,
    top_k: int = 5,
    keep_samples: int = 0,
    max_batches: int | None = None,
    forward: Forward | None = None,
    batch_images: BatchImages | None = None,
    batch_labels: BatchLabels | None = None,
    channel_batch_size: int = 32,
    progress: Callable[..., None] | None = None,
    executor: concurrent.futures.Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> DatasetExplanation:
    """Aggregate maps and camera reliance over a slice in one pass, as one record.

    Each batch is explained (:func:`explain_cameras`) and scored with each camera
    replaced by ``baseline`` (:func:`camera_reliance`), and folded as described in the
    module docstring.

    Args:
        model, batches, targets, score, method, bins, top_k, forward, batch_images,
        batch_labels, channel_batch_size, executor, cancel: As for
            :func:`aggregate_attributions`.
        baseline: ``"zeros"``, ``"mean"`` (the slice's own mean image per camera, one
            pass more; see below), a mapping camera key -> image, or a callable
            ``(camera, images) -> images``.
        cameras: Cameras whose reliance is measured (default: every camera).
        percentiles: Percentile maps finished beside the mean map.
        keep_samples: The first this many samples keep their images in the record.
        max_batches: Read at most this many batches of an iterable.
        progress: ``progress(done, total)`` per batch (per shard of a
            ``ShardedBatches``). With ``baseline="mean"`` the mean pass comes first and
            ``total`` counts both passes (the first half of the steps are the mean pass).

    ``baseline="mean"`` with a generator or a shuffled ``DataLoader`` needs
    ``max_batches``: those batches are held once and read by both passes, so the mean
    image comes from exactly the batches explained; without ``max_batches`` it is refused
    before a batch is read. A cancel during the mean pass stops reading at once.

    Raises:
        ValueError: On a bad count, percentile or baseline, or when there are no batches.
        vinlens.operations.OperationCancelled: When cancelled.
    """
    checked = check_percentiles(percentiles)
    request = _Request(
        maps=True,
        reliance=True,
        targets=tuple(targets),
        score=score,
        method=method,
        bins=bins,
        top_k=top_k,
        baseline=baseline,
        baseline_label=baseline_label(baseline),
        cameras=None if cameras is None else tuple(cameras),
        forward=forward,
        batch_images=batch_images,
        batch_labels=batch_labels,
        channel_batch_size=channel_batch_size,
        keep_samples=check_count("keep_samples", keep_samples, minimum=0),
    )
    folded = _fold_after_baseline(
        model_check(model),
        _checked_batches(batches),
        request,
        executor=check_executor(executor),
        progress=progress_of(progress),
        cancel=as_cancel_token(cancel),
        limit=None if max_batches is None else check_count("max_batches", max_batches, minimum=1),
    )
    return folded.finish(checked)


def _checked_batches(batches: Any) -> Iterable[Any] | ShardedBatches:
    if isinstance(batches, Mapping) or not isinstance(batches, Iterable | ShardedBatches):
        raise TypeError(
            "batches must be a DataLoader, an iterable of batches or a ShardedBatches, got "
            f"{type(batches).__name__}."
        )
    return batches


def _fold_after_baseline(
    source: ModelSource,
    batches: Iterable[Any] | ShardedBatches,
    request: _Request,
    *,
    executor: concurrent.futures.Executor | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | None,
    limit: int | None,
) -> DatasetAccumulator:
    """Resolve ``request.baseline`` (a pass for the mean image first, where asked) and fold
    the request over the batches; ``progress`` counts the steps of both passes.

    Raises:
        ValueError: When there are no batches.
    """
    passes = 2 if isinstance(request.baseline, str) and request.baseline == "mean" else 1
    steps = _step_count(batches, executor, limit)
    total = steps * passes
    resolved, batches = resolve_baseline(
        request.baseline,
        batches,
        batch_images=request.batch_images,
        executor=executor,
        progress=progress,
        cancel=cancel,
        max_batches=limit,
        total=total,
    )
    local = executor is None and not isinstance(batches, ShardedBatches)
    folded = fold(
        source,
        batches,
        replace(request, baseline=resolved),
        executor=executor,
        progress=_offset_progress(progress, steps if passes == 2 else 0, total),
        cancel=cancel,
        # After a mean pass over a limit, the held batches are exactly the ones to explain.
        max_batches=limit if local and passes == 1 else None,
        total=total,
    )
    if folded.batches == 0:
        raise ValueError("the batches are empty; nothing to explain.")
    return folded


def _step_count(
    batches: Iterable[Any] | ShardedBatches,
    executor: concurrent.futures.Executor | None,
    limit: int | None,
) -> int:
    """Steps of one pass as progress counts them: shards, else batches of an iterable (the
    limit where its length is unknown; 0 where neither is known)."""
    if executor is not None or isinstance(batches, ShardedBatches):
        return len(as_shards(batches, executor))
    length = length_of(batches)
    if length is None:
        return 0 if limit is None else limit
    return length if limit is None else min(length, limit)


def _offset_progress(
    progress: ProgressCallback | None, done_before: int, total: int
) -> ProgressCallback | None:
    """``progress`` for a pass that starts after ``done_before`` steps of ``total``."""
    if progress is None:
        return None
    report = progress

    def shifted(done: int, _total: int) -> None:
        report(done_before + done, total)

    return shifted
