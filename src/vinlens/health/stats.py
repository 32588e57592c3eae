"""Streaming statistics: per-module output summaries over many batches, in mergeable
accumulators."""

from __future__ import annotations

import concurrent.futures
import pickle
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from vinlens.health.summaries import (
    check_callable,
    check_model,
    floating_tensors,
    labelled_modules,
    reducible,
    summarizable,
)
from vinlens.hooks import HookSet
from vinlens.model_inspection import SummaryAccumulator, TensorSummary
from vinlens.model_inspection.capture import normalize_module_paths
from vinlens.model_inspection.summary import SummaryCache
from vinlens.operations import (
    CancelToken,
    ProgressCallback,
    as_cancel_token,
    check_executor,
    run_operation,
)
from vinlens.workers import ModelRecipe, ShardedBatches, models_released
from vinlens.wrappers import run_eagerly

__all__ = ["ActivationAccumulator", "ActivationStats", "collect_activation_stats"]

_Batch = TypeVar("_Batch")


@dataclass(frozen=True)
class ActivationStats:
    """Per-module output statistics over every batch of a stream.

    Attributes:
        modules: Module path to the summary of all its outputs over every call and batch,
            in order of each path's first return.
        batches: Number of batches that ran.
        walk_truncated: Paths whose outputs held more containers and tensors than one walk
            visits (``MAX_WALK_NODES`` nodes, ``MAX_WALK_DEPTH`` levels), in order of first
            truncation: their summaries cover only the tensors that walk reached.
    """

    modules: Mapping[str, TensorSummary]
    batches: int
    walk_truncated: tuple[str, ...] = ()


class ActivationAccumulator:
    """Mergeable per-module accumulators behind :class:`ActivationStats`.

    ``update(path, value)`` adds every floating tensor in a module output,
    ``merge`` folds another accumulator (for example one per worker or shard) in,
    ``finish`` returns the record. Memory is a few numbers per module path,
    independent of the number of batches.
    """

    def __init__(self) -> None:
        self._modules: dict[str, SummaryAccumulator] = {}
        self._truncated: dict[str, None] = {}
        self.batches = 0
        # A container's output is usually its last child's tensor: reduced once.
        self._cache = SummaryCache()

    def __getstate__(self) -> dict[str, object]:
        # The per-forward cache holds weak references; accumulators travel without it.
        return {"_modules": self._modules, "_truncated": self._truncated, "batches": self.batches}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._modules = state["_modules"]
        self._truncated = state.get("_truncated", {})
        self.batches = state["batches"]
        self._cache = SummaryCache()

    def update(self, module_path: str, value: object) -> ActivationAccumulator:
        """Add the floating tensors found in ``value`` (a module output) to ``module_path``."""
        accumulator = self._modules.get(module_path)
        if accumulator is None:
            accumulator = self._modules[module_path] = SummaryAccumulator()
        if isinstance(value, torch.Tensor):  # the common output: no walk, no closure
            if summarizable(value):
                accumulator.merge(self._cache.moments(reducible(value)))
            return self
        truncated = self._truncated
        for _, tensor in floating_tensors(
            value, "output", truncated=lambda: truncated.setdefault(module_path, None)
        ):
            accumulator.merge(self._cache.moments(reducible(tensor)))
        return self

    def merge(self, other: ActivationAccumulator) -> ActivationAccumulator:
        """Fold ``other`` into this accumulator; paths new to this one keep their order."""
        if not isinstance(other, ActivationAccumulator):
            raise TypeError(
                f"can only merge an ActivationAccumulator, got {type(other).__module__}."
                f"{type(other).__qualname__}"
            )
        for path, accumulator in other._modules.items():
            mine = self._modules.get(path)
            if mine is None:
                mine = self._modules[path] = SummaryAccumulator()
            mine.merge(accumulator)
        for path in other._truncated:
            self._truncated.setdefault(path, None)
        self.batches += other.batches
        return self

    def finish(self) -> ActivationStats:
        """The statistics of everything added so far."""
        modules = {path: acc.finish() for path, acc in self._modules.items()}
        return ActivationStats(
            modules=types.MappingProxyType(modules),
            batches=self.batches,
            walk_truncated=tuple(self._truncated),
        )


def _default_run(model: nn.Module, batch: Any) -> object:
    return model(batch)


class _Collector:
    """Hooks' target: the accumulator of the shard now running (swapped per shard)."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current = ActivationAccumulator()

    def post(self, label: str, args: tuple[Any, ...], output: Any) -> None:
        self.current.update(label, output)

    def shard(
        self,
        model: nn.Module,
        batches: Iterable[Any],
        run: Callable[[nn.Module, Any], object],
        token: CancelToken | None,
    ) -> ActivationAccumulator:
        """The partial of one shard: its batches folded into one fresh accumulator."""
        partial = self.current = ActivationAccumulator()
        for batch in batches:
            if token is not None:
                token.raise_if_cancelled()
            run(model, batch)
            partial.batches += 1
        return partial


@dataclass(frozen=True)
class _StatsTask:
    """One shard of :func:`collect_activation_stats` on a worker (plain, picklable data)."""

    recipe: ModelRecipe
    source: ShardedBatches
    shard: int
    run: Callable[[nn.Module, Any], object]
    module_paths: tuple[str, ...] | None
    threads: int


def _stats_task(task: _StatsTask) -> ActivationAccumulator:
    """The partial of one shard, with the model of ``task.recipe`` built on this worker."""
    model = task.recipe.model()
    threads = torch.get_num_threads()
    collector = _Collector()
    try:
        # The same intra-op thread count as the caller's: reductions then split alike.
        torch.set_num_threads(task.threads)
        with torch.no_grad(), run_eagerly(), HookSet() as hooks:
            hooks.hook_modules(
                labelled_modules(model, task.module_paths),
                post=collector.post,
                own_thread=True,
            )
            return collector.shard(model, task.source.batches(task.shard), task.run, None)
    finally:
        torch.set_num_threads(threads)


def _check_start_method(executor: concurrent.futures.Executor | None) -> None:
    """Refuse a fork-started process pool: its workers hang in torch's thread pool.

    A child forked after this process ran a parallel torch op inherits a locked
    OpenMP pool (a known PyTorch limitation), so the first convolution on the worker
    never returns. ``spawn`` and ``forkserver`` pools start clean.
    """
    if not isinstance(executor, concurrent.futures.ProcessPoolExecutor):
        return
    context = getattr(executor, "_mp_context", None)
    method = context.get_start_method() if context is not None else None
    if method == "fork":
        raise ValueError(
            "collect_activation_stats cannot use a ProcessPoolExecutor that forks its workers: "
            "torch's thread pool does not survive fork and the workers hang; create it with "
            "mp_context=multiprocessing.get_context('spawn') (or 'forkserver')"
        )


def _check_picklable(value: object, what: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise TypeError(
            f"{what} {value!r:.80} cannot be sent to a worker ({type(error).__name__}: "
            f"{error}); use a function defined at the top level of a module"
        ) from None


def collect_activation_stats(
    model: nn.Module | ModelRecipe,
    batches: Iterable[_Batch] | ShardedBatches,
    run: Callable[[nn.Module, _Batch], object] | None = None,
    module_paths: Sequence[str] | None = None,
    *,
    executor: concurrent.futures.Executor | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> ActivationStats:
    """Summarize each module's outputs over every batch of a stream.

    Each batch is driven through ``run(model, batch)`` (default ``model(batch)``)
    while one hook per module folds its floating outputs into a per-path
    :class:`ActivationAccumulator` on the outputs' device. Nothing per batch is
    kept, so memory is independent of the number of batches; batches are read
    lazily, so a ``DataLoader`` streams.

    The batches are folded shard by shard, in shard order (one operation of
    :mod:`vinlens.operations`): a shard's batches go into one accumulator, which is then
    merged into the result. A plain iterable is one batch a shard. With an ``executor``
    the shards run on workers: ``model`` is then a :class:`~vinlens.workers.ModelRecipe`
    (each worker builds the model once, in eval mode unless the recipe says otherwise,
    and runs under ``torch.no_grad()`` with the caller's torch thread count) and
    ``batches`` a :class:`~vinlens.workers.ShardedBatches` or a list; a process pool must
    start its workers with ``spawn`` or ``forkserver``. The result equals
    (``==``) the same call without an executor, which runs the same shards here.

    Args:
        model: Constructed model whose registered modules are observed, or a
            :class:`~vinlens.workers.ModelRecipe` to build it from (needed with an
            executor).
        batches: Any iterable of batches (a ``DataLoader``, a generator, a list), or a
            :class:`~vinlens.workers.ShardedBatches`; with a recipe, a list or
            ``ShardedBatches`` (a generator cannot be split across workers).
        run: Callable taking the model and one batch that drives its forward (a
            top-level function with an executor).
        module_paths: Paths to summarize, or None for every registered module.
        executor: None to run here, or any ``concurrent.futures.Executor`` (a process
            pool, ``distributed.Client(...).get_executor()``).
        progress: ``progress(done, total)`` in shards, when their number is known.
        cancel: A :class:`~vinlens.operations.CancelToken` or ``threading.Event``; once
            set, :class:`~vinlens.operations.OperationCancelled` is raised between batches
            (between shards on an executor), with every hook removed.

    Returns:
        Per-path summaries over every call of every batch, and the batch count.

    Raises:
        TypeError: bad model, run, batches or executor (an ``nn.Module`` with an
            executor: pass a ``ModelRecipe``).
        ValueError: unknown module paths, or a process pool that forks its workers (they
            hang in torch's thread pool: use ``mp_context=get_context("spawn")``).
        Exception: whatever ``run`` or the iterator raises, after hooks are removed.
    """
    executor = check_executor(executor)
    run = _default_run if run is None else run
    check_callable(run, "takes the model and one batch and drives the forward")
    if isinstance(model, ModelRecipe):
        return _recipe_stats(model, batches, run, module_paths, executor, progress, cancel)
    check_model(model)
    if executor is not None:
        raise TypeError(
            "collect_activation_stats(executor=...) builds the model on each worker: pass a "
            "vinlens.workers.ModelRecipe (for example ModelRecipe.from_model(model, factory, "
            f"kwargs)) instead of the {type(model).__qualname__} instance"
        )
    if not isinstance(batches, (Iterable, ShardedBatches)):
        raise TypeError(f"batches must be an iterable of batches, got {type(batches).__qualname__}")
    return _local_stats(model, batches, run, module_paths, progress, cancel)


def _local_stats(
    model: nn.Module,
    batches: Iterable[_Batch] | ShardedBatches,
    run: Callable[[nn.Module, _Batch], object],
    module_paths: Sequence[str] | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | threading.Event | None,
) -> ActivationStats:
    """:func:`collect_activation_stats` here, one shard at a time under one set of hooks
    (a plain iterable is one batch a shard)."""
    targets = labelled_modules(model, module_paths)
    token = as_cancel_token(cancel)
    shards: Iterable[Iterable[Any]]
    if isinstance(batches, ShardedBatches):
        source = batches
        shards = (source.batches(index) for index in range(source.count))
        total: int | None = source.count
    else:
        shards = ([batch] for batch in batches)
        total = len(batches) if isinstance(batches, Sized) else None
    result = ActivationAccumulator()
    collector = _Collector()
    with run_eagerly(), HookSet() as hooks:
        hooks.hook_modules(targets, post=collector.post, own_thread=True)
        if progress is not None and total is not None:
            progress(0, total)
        for done, shard in enumerate(shards, start=1):
            result.merge(collector.shard(model, shard, run, token))
            if progress is not None and total is not None:
                progress(done, total)
    if token is not None:
        token.raise_if_cancelled()
    return result.finish()


def _recipe_stats(
    recipe: ModelRecipe,
    batches: object,
    run: Callable[[nn.Module, Any], object],
    module_paths: Sequence[str] | None,
    executor: concurrent.futures.Executor | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | threading.Event | None,
) -> ActivationStats:
    paths = normalize_module_paths(module_paths)
    threads = torch.get_num_threads()
    if executor is not None:
        _check_start_method(executor)
        _check_picklable(run, "run")
    if isinstance(batches, ShardedBatches):
        tasks = [
            _StatsTask(recipe, batches, index, run, paths, threads)
            for index in range(batches.count)
        ]
    elif isinstance(batches, Sequence) and not isinstance(batches, (str, bytes)):
        # One batch a shard; each task carries only its own batch.
        tasks = [
            _StatsTask(recipe, ShardedBatches.from_sequence([batch]), 0, run, paths, threads)
            for batch in batches
        ]
    else:
        raise TypeError(
            "with a ModelRecipe, batches must be a list or tuple of batches or "
            "vinlens.workers.ShardedBatches(load, count), got "
            f"{type(batches).__qualname__}: an iterator or data loader cannot be split "
            "across workers"
        )
    with models_released():  # an in-process run's recipe models do not outlive the call
        folded = run_operation(
            tasks,
            _stats_task,
            start=ActivationAccumulator,
            executor=executor,
            progress=progress,
            cancel=cancel,
        )
    return folded.finish()
