"""How the dataset operations run: every batch folded into one partial, in order.

Every batch becomes a :class:`~vinlens.attribution.partials.DatasetAccumulator`; an
iterable is read here as one task (:class:`_StreamTask`), a
:class:`~vinlens.workers.ShardedBatches` (or, with an executor, a list) is one task a
shard (:class:`_ShardTask`), both on :func:`vinlens.operations.run_operation`. The
argument checks the entry points share live here too.
"""

from __future__ import annotations

import concurrent.futures
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.attribution.partials import DatasetAccumulator, _explain_batch, _Request
from vinlens.operations import CancelToken, ProgressCallback, run_operation
from vinlens.workers import ModelRecipe, ShardedBatches, as_sharded_batches, models_released

Forward = Callable[[dict[str, torch.Tensor]], Any]
ModelSource = nn.Module | ModelRecipe


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
    for done, batch in enumerate(limited(task.batches, task.limit, task.cancel), start=1):
        result.add(_explain_batch(task.model, batch, task.request))
        if task.progress is not None:
            task.progress(task.done_before + done, task.total)
    return result.flush()


def limited(batches: Iterable[Any], limit: int | None, cancel: CancelToken | None) -> Iterator[Any]:
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


def progress_of(progress: Callable[..., None] | None) -> ProgressCallback | None:
    """``progress(done, total)``; a one-argument callable gets ``done`` only."""
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError(f"progress must be callable as progress(done, total), got {progress!r}.")
    try:
        parameters = inspect.signature(progress).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume (done, total)
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


def length_of(batches: Any) -> int | None:
    try:
        return len(batches)
    except TypeError:  # a generator, an IterableDataset loader
        return None


def check_count(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def is_one_shot(batches: Iterable[Any]) -> bool:
    return isinstance(batches, Iterator)


def is_shuffled(batches: Any) -> bool:
    sampler = getattr(batches, "sampler", None)
    return isinstance(sampler, torch.utils.data.RandomSampler)


def fold(
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
        sharded = as_shards(batches, executor)
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
    length = length_of(batches)
    if total is None:
        total = length if max_batches is None or length is None else min(length, max_batches)
        total = total if total is not None else 0
    stream = _StreamTask(model, batches, request, total, progress, cancel, done_before, max_batches)
    # One task: the iterable is read here in order; run_operation still owns the cancel
    # check around it and the empty start.
    return run_operation(
        [stream], _run_stream, start=lambda: DatasetAccumulator(request), cancel=cancel
    )


def as_shards(
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


def model_check(model: Any) -> ModelSource:
    if not isinstance(model, nn.Module | ModelRecipe):
        raise TypeError(
            f"model must be a torch.nn.Module or a vinlens.workers.ModelRecipe, got "
            f"{type(model).__name__}."
        )
    return model
