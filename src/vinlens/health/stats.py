"""Streaming statistics: per-module output summaries over many batches, in mergeable
accumulators."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

from vinlens.health.summaries import (
    check_callable,
    check_model,
    floating_tensors,
    labelled_modules,
)
from vinlens.hooks import HookSet
from vinlens.model_inspection import SummaryAccumulator, TensorSummary
from vinlens.model_inspection.summary import SummaryCache

__all__ = ["ActivationAccumulator", "ActivationStats", "collect_activation_stats"]

_Batch = TypeVar("_Batch")


@dataclass(frozen=True)
class ActivationStats:
    """Per-module output statistics over every batch of a stream.

    Attributes:
        modules: Module path to the summary of all its outputs over every call and batch,
            in order of each path's first return.
        batches: Number of batches that ran.
    """

    modules: Mapping[str, TensorSummary]
    batches: int


class ActivationAccumulator:
    """Mergeable per-module accumulators behind :class:`ActivationStats`.

    ``update(path, value)`` adds every floating tensor in a module output,
    ``merge`` folds another accumulator (for example one per worker or shard) in,
    ``finish`` returns the record. Memory is a few numbers per module path,
    independent of the number of batches.
    """

    def __init__(self) -> None:
        self._modules: dict[str, SummaryAccumulator] = {}
        self.batches = 0
        # A container's output is usually its last child's tensor: reduced once.
        self._cache = SummaryCache()

    def __getstate__(self) -> dict[str, object]:
        # The per-forward cache holds weak references; accumulators travel without it.
        return {"_modules": self._modules, "batches": self.batches}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._modules = state["_modules"]
        self.batches = state["batches"]
        self._cache = SummaryCache()

    def update(self, module_path: str, value: object) -> ActivationAccumulator:
        """Add the floating tensors found in ``value`` (a module output) to ``module_path``."""
        accumulator = self._modules.get(module_path)
        if accumulator is None:
            accumulator = self._modules[module_path] = SummaryAccumulator()
        for _, tensor in floating_tensors(value, "output"):
            accumulator.merge(self._cache.moments(tensor))
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
        self.batches += other.batches
        return self

    def finish(self) -> ActivationStats:
        """The statistics of everything added so far."""
        modules = {path: acc.finish() for path, acc in self._modules.items()}
        return ActivationStats(modules=types.MappingProxyType(modules), batches=self.batches)


def _default_run(model: nn.Module, batch: Any) -> object:
    return model(batch)


def collect_activation_stats(
    model: nn.Module,
    batches: Iterable[_Batch],
    run: Callable[[nn.Module, _Batch], object] | None = None,
    module_paths: Sequence[str] | None = None,
) -> ActivationStats:
    """Summarize each module's outputs over every batch of a stream.

    Each batch is driven through ``run(model, batch)`` (default ``model(batch)``)
    while one hook per module folds its floating outputs into a per-path
    :class:`ActivationAccumulator` on the outputs' device. Nothing per batch is
    kept, so memory is independent of the number of batches; batches are read
    lazily, so a ``DataLoader`` streams.

    Args:
        model: Constructed model whose registered modules are observed.
        batches: Any iterable of batches (a ``DataLoader``, a generator, a list).
        run: Callable taking the model and one batch that drives its forward.
        module_paths: Paths to summarize, or None for every registered module.

    Returns:
        Per-path summaries over every call of every batch, and the batch count.

    Raises:
        TypeError: bad model, run or batches.
        ValueError: unknown module paths.
        Exception: whatever ``run`` or the iterator raises, after hooks are removed.
    """
    check_model(model)
    if run is None:
        run = _default_run
    check_callable(run, "takes the model and one batch and drives the forward")
    if not isinstance(batches, Iterable):
        raise TypeError(f"batches must be an iterable of batches, got {type(batches).__qualname__}")
    targets = labelled_modules(model, module_paths)
    accumulator = ActivationAccumulator()

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        accumulator.update(label, output)

    with HookSet() as hooks:
        hooks.hook_modules(targets, post=post)
        for batch in batches:
            run(model, batch)
            accumulator.batches += 1
    return accumulator.finish()
