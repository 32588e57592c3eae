"""Attribution over a data slice as one operation: aggregate maps and camera reliance.

Three entry points share one shape (:func:`vinlens.operations.run_operation`):

* :func:`aggregate_attributions`: per-camera map statistics (:mod:`~vinlens.attribution.maps`);
* :func:`camera_reliance_over`: per-camera score drops (:mod:`~vinlens.attribution.reliance`);
* :func:`explain_dataset`: both in one pass over the batches, plus the first samples'
  images, as one frozen :class:`DatasetExplanation` (what the viewer's dataset view shows).

**The fold.** Every batch becomes one partial (a :class:`DatasetAccumulator` holding the
batch's map statistics and reliance); partials are merged in batch order, and a merge
renumbers the later partial's sample ids after the earlier ones. The result depends only
on the batches and their order, not on where they ran.

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
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.attribution.batches import (
    BatchImages,
    BatchLabels,
)
from vinlens.attribution.explain import OutputScore
from vinlens.attribution.maps import AttributionAggregate
from vinlens.attribution.partials import (
    DatasetAccumulator,
    DatasetExplanation,
    KeptSample,
    _explain_batch,
    _MeanAccumulator,
    _Request,
    check_percentiles,
)
from vinlens.attribution.reliance import (
    RELIANCE_BASELINES,
    Baseline,
    RelianceSummary,
)
from vinlens.attribution.targets import CameraExplanationTarget
from vinlens.operations import (
    CancelToken,
    ProgressCallback,
    as_cancel_token,
    check_executor,
    run_operation,
)
from vinlens.workers import ModelRecipe, ShardedBatches, as_sharded_batches, models_released

__all__ = [
    "DatasetAccumulator",
    "DatasetExplanation",
    "KeptSample",
    "aggregate_attributions",
    "camera_image_means",
    "camera_reliance_over",
    "explain_dataset",
]

Forward = Callable[[dict[str, torch.Tensor]], Any]
ModelSource = nn.Module | ModelRecipe


# -- running ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _ShardTask:
    """One shard of a :class:`ShardedBatches`: everything a worker needs, by value."""

    model: ModelSource
    source: ShardedBatches
    shard: int
    request: _Request


def _worker_model(model: ModelSource) -> nn.Module:
    return model.model() if isinstance(model, ModelRecipe) else model


def _run_shard(task: _ShardTask) -> DatasetAccumulator:
    model = _worker_model(task.model)
    result = DatasetAccumulator(task.request)
    for batch in task.source.batches(task.shard):
        result.add(_explain_batch(model, batch, task.request))
    return result.flush()  # sent back folded: no buffered records cross to the caller


@dataclass(eq=False)
class _StreamTask:
    """A whole iterable read here, one batch at a time, with per-batch progress and cancel."""

    model: nn.Module
    batches: Iterable[Any]
    request: _Request
    total: int
    progress: ProgressCallback | None
    cancel: CancelToken | None
    done_before: int = 0
    limit: int | None = None


def _run_stream(task: _StreamTask) -> DatasetAccumulator:
    result = DatasetAccumulator(task.request)
    for done, batch in enumerate(_limited(task.batches, task.limit, task.cancel), start=1):
        result.add(_explain_batch(task.model, batch, task.request))
        if task.progress is not None:
            task.progress(task.done_before + done, task.total)
    return result.flush()


def _limited(
    batches: Iterable[Any], limit: int | None, cancel: CancelToken | None
) -> Iterator[Any]:
    """The batches, at most ``limit``, looking at ``cancel`` before reading each one."""
    iterator = iter(batches)
    count = 0
    while limit is None or count < limit:
        if cancel is not None:
            cancel.raise_if_cancelled()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        count += 1
        yield batch


def _progress_of(progress: Callable[..., None] | None) -> ProgressCallback | None:
    """``progress(done, total)``; a one-argument callable (the earlier form) gets ``done``."""
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError(f"progress must be callable as progress(done, total), got {progress!r}.")
    try:
        parameters = inspect.signature(progress).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the new form
        return progress
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    if len(positional) == 1 and not varargs:
        single = progress

        def done_only(done: int, total: int) -> None:
            single(done)

        return done_only
    return progress


def _length(batches: Any) -> int | None:
    try:
        return len(batches)
    except TypeError:  # a generator, an IterableDataset loader
        return None


def _check_count(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _is_one_shot(batches: Iterable[Any]) -> bool:
    return isinstance(batches, Iterator)


def _is_shuffled(batches: Any) -> bool:
    sampler = getattr(batches, "sampler", None)
    return isinstance(sampler, torch.utils.data.RandomSampler)


def _fold(
    model: ModelSource,
    batches: Iterable[Any] | ShardedBatches,
    request: _Request,
    *,
    executor: concurrent.futures.Executor | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | None,
    max_batches: int | None = None,
    done_before: int = 0,
    total: int | None = None,
) -> DatasetAccumulator:
    """Fold every batch of ``batches`` with ``request`` on the one operation shape."""
    if executor is not None or isinstance(batches, ShardedBatches):
        sharded = _as_shards(batches, executor)
        if executor is not None and not isinstance(model, ModelRecipe):
            raise TypeError(
                "executor= runs each shard on a worker, which builds its own model: pass "
                "model=vinlens.workers.ModelRecipe(factory, kwargs, state_dict) (e.g. "
                f"ModelRecipe.from_model(model, factory)), not a live {type(model).__name__}."
            )
        if max_batches is not None:
            raise ValueError(
                "max_batches applies to an iterable of batches; for ShardedBatches choose the "
                "shards (ShardedBatches(load, count)) instead."
            )
        tasks = [
            _ShardTask(model, sharded.for_shard(index), index, request)
            for index in range(sharded.count)
        ]
        with models_released():  # an in-process run's recipe models do not outlive the call
            return run_operation(
                tasks,
                _run_shard,
                start=lambda: DatasetAccumulator(request),
                executor=executor,
                progress=progress,
                cancel=cancel,
            )
    if isinstance(model, ModelRecipe):
        model = model.build()  # streamed on this thread: not cached beyond the call
    length = _length(batches)
    if total is None:
        total = length if max_batches is None or length is None else min(length, max_batches)
        total = total if total is not None else 0
    stream = _StreamTask(model, batches, request, total, progress, cancel, done_before, max_batches)
    # One task: the iterable is read here in order; run_operation still owns the cancel
    # check around it and the empty start.
    return run_operation(
        [stream], _run_stream, start=lambda: DatasetAccumulator(request), cancel=cancel
    )


def _as_shards(
    batches: Iterable[Any] | ShardedBatches, executor: concurrent.futures.Executor | None
) -> ShardedBatches:
    if isinstance(batches, ShardedBatches):
        return batches
    if isinstance(batches, Sequence) and not isinstance(batches, str | bytes):
        return as_sharded_batches(batches)
    raise TypeError(
        "executor= needs batches that can be split across workers: "
        "vinlens.workers.ShardedBatches(load, count) or a list of batches, got "
        f"{type(batches).__name__} (a loader or generator is read in one process only)."
    )


def _model_check(model: Any) -> ModelSource:
    if not isinstance(model, nn.Module | ModelRecipe):
        raise TypeError(
            f"model must be a torch.nn.Module or a vinlens.workers.ModelRecipe, got "
            f"{type(model).__name__}."
        )
    return model


# -- the mean image -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _MeanShard:
    source: ShardedBatches
    shard: int
    batch_images: BatchImages | None


def _run_mean_shard(task: _MeanShard) -> _MeanAccumulator:
    result = _MeanAccumulator(task.batch_images)
    for batch in task.source.batches(task.shard):
        result.merge(_MeanAccumulator(task.batch_images).update(batch))
    return result


def camera_image_means(
    batches: Iterable[Any] | ShardedBatches,
    *,
    batch_images: BatchImages | None = None,
    executor: concurrent.futures.Executor | None = None,
    progress: Callable[..., None] | None = None,
    cancel: CancelToken | threading.Event | None = None,
    max_batches: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-camera mean image ``[C, H, W]`` (float64 sums, one pass, memory of one image each).

    ``executor``, ``progress`` and ``cancel`` as in the module docstring; ``max_batches``
    reads at most that many batches of an iterable.
    """
    token = as_cancel_token(cancel)
    report = _progress_of(progress)
    pool = check_executor(executor)
    if pool is not None or isinstance(batches, ShardedBatches):
        sharded = _as_shards(batches, pool)
        tasks = [_MeanShard(sharded.for_shard(i), i, batch_images) for i in range(sharded.count)]
        folded = run_operation(
            tasks,
            _run_mean_shard,
            start=lambda: _MeanAccumulator(batch_images),
            executor=pool,
            progress=report,
            cancel=token,
        )
        return folded.finish()
    result = _MeanAccumulator(batch_images)
    length = _length(batches)
    total = length if max_batches is None or length is None else min(length, max_batches)
    for done, batch in enumerate(_limited(batches, max_batches, token), start=1):
        result.merge(_MeanAccumulator(batch_images).update(batch))
        if report is not None:
            report(done, total or 0)
    return result.finish()


# -- entry points ---------------------------------------------------------------------------


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
    folded = _fold(
        _model_check(model),
        batches,
        request,
        executor=check_executor(executor),
        progress=_progress_of(progress),
        cancel=as_cancel_token(cancel),
    )
    assert folded.aggregate is not None
    return folded.aggregate.shifted(first_sample_id)


def _resolve_baseline(
    baseline: Baseline,
    batches: Iterable[Any] | ShardedBatches,
    *,
    batch_images: BatchImages | None,
    executor: concurrent.futures.Executor | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | None,
    max_batches: int | None,
    total: int,
) -> tuple[Baseline, Iterable[Any] | ShardedBatches]:
    """The baseline to send to every batch, and the batches to explain after it.

    ``"mean"`` reads the batches once for the mean image. A one-shot iterator cannot be
    read twice: with ``max_batches`` its first batches are held (once) and both passes
    read them, so the mean comes from the batches explained; without, it is refused
    before a batch is read. A shuffled ``DataLoader`` would give other batches the
    second time, so it is held the same way (or refused).
    """
    if isinstance(baseline, str) and baseline not in RELIANCE_BASELINES:
        raise ValueError(
            f"baseline={baseline!r} is not one of {list(RELIANCE_BASELINES)}, a mapping or a "
            "callable."
        )
    if not (isinstance(baseline, str) and baseline == "mean"):
        return baseline, batches
    local = not isinstance(batches, ShardedBatches) and executor is None
    if not isinstance(batches, ShardedBatches) and executor is None and max_batches is not None:
        # The first max_batches batches are held once and read by both passes, so the mean
        # comes from exactly the batches explained (whatever the loader gives next time).
        held: list[Any] = []
        for batch in _limited(batches, max_batches, cancel):
            held.append(batch)
            if progress is not None:
                progress(len(held), total)
        return camera_image_means(held, batch_images=batch_images, cancel=cancel), held
    if (
        not isinstance(batches, ShardedBatches)
        and (_is_one_shot(batches) or _is_shuffled(batches))
        and local
    ):
        what = "a one-shot iterator" if _is_one_shot(batches) else "a shuffled DataLoader"
        raise ValueError(
            f"baseline='mean' reads the batches twice (the mean image, then the maps), but "
            f"they are {what}, which gives other batches (or none) the second time; pass "
            "max_batches=n (those n batches are held and read twice), a list or an "
            "unshuffled DataLoader, or a mapping from camera_image_means()."
        )

    def mean_progress(done: int, _total: int) -> None:
        if progress is not None:
            progress(done, total)

    means = camera_image_means(
        batches,
        batch_images=batch_images,
        executor=executor,
        progress=mean_progress,
        cancel=cancel,
        max_batches=None if isinstance(batches, ShardedBatches) else max_batches,
    )
    return means, batches


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
    report = _progress_of(progress)
    resolved, batches = _resolve_baseline(
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
        baseline_label=_baseline_label(baseline),
        cameras=None if cameras is None else tuple(cameras),
        forward=forward,
        batch_images=batch_images,
        batch_labels=batch_labels,
    )
    folded = _fold(
        _model_check(model), batches, request, executor=pool, progress=report, cancel=token
    )
    if folded.reliance is None:
        raise ValueError("camera_reliance_over: the batches are empty.")
    return folded.reliance


def _baseline_label(baseline: Baseline) -> str:
    return baseline if isinstance(baseline, str) else type(baseline).__name__


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
    pool = check_executor(executor)
    token = as_cancel_token(cancel)
    report = _progress_of(progress)
    checked = check_percentiles(percentiles)
    keep = _check_count("keep_samples", keep_samples, minimum=0)
    limit = None if max_batches is None else _check_count("max_batches", max_batches, minimum=1)
    source = _model_check(model)
    if isinstance(batches, Mapping) or not isinstance(batches, Iterable | ShardedBatches):
        raise TypeError(
            "batches must be a DataLoader, an iterable of batches or a ShardedBatches, got "
            f"{type(batches).__name__}."
        )
    steps: int
    if pool is not None or isinstance(batches, ShardedBatches):
        steps = len(_as_shards(batches, pool))
    else:
        length = _length(batches)
        steps = 0 if length is None else (length if limit is None else min(length, limit))
        if steps == 0 and limit is not None and length is None:
            steps = limit
    passes = 2 if isinstance(baseline, str) and baseline == "mean" else 1
    total = steps * passes
    resolved, batches = _resolve_baseline(
        baseline,
        batches,
        batch_images=batch_images,
        executor=pool,
        progress=report,
        cancel=token,
        max_batches=limit,
        total=total,
    )
    if passes == 2 and pool is None and not isinstance(batches, ShardedBatches):
        limit = None  # with a limit the held batches are exactly the ones to explain
    request = _Request(
        maps=True,
        reliance=True,
        targets=tuple(targets),
        score=score,
        method=method,
        bins=bins,
        top_k=top_k,
        baseline=resolved,
        baseline_label=_baseline_label(baseline),
        cameras=None if cameras is None else tuple(cameras),
        forward=forward,
        batch_images=batch_images,
        batch_labels=batch_labels,
        channel_batch_size=channel_batch_size,
        keep_samples=keep,
    )
    done_before = steps if passes == 2 else 0

    def shard_progress(done: int, _total: int) -> None:
        if report is not None:
            report(done_before + done, total)

    folded = _fold(
        source,
        batches,
        request,
        executor=pool,
        progress=shard_progress if report is not None else None,
        cancel=token,
        max_batches=limit if pool is None and not isinstance(batches, ShardedBatches) else None,
        done_before=0,
        total=total,
    )
    if folded.batches == 0:
        raise ValueError("the batches are empty; nothing to explain.")
    return folded.finish(checked)
