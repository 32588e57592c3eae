"""What every health engine shares: traced tensors, the bounded tensor walk, argument checks.

A :class:`TensorTrace` is one floating tensor of a module call with its whole-tensor
:class:`~vinlens.model_inspection.TensorSummary`. The helpers below are used by the
forward origin, the diff, the streaming statistics and the training-time engines of
this package; they are public within :mod:`vinlens.health` (not re-exported).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.model_inspection import ROOT_PATH, TensorSummary
from vinlens.model_inspection.capture import normalize_module_paths
from vinlens.model_inspection.summary import SummaryCache
from vinlens.model_inspection.walk import walk_tensors

__all__ = [
    "MAX_WALK_DEPTH",
    "MAX_WALK_NODES",
    "Found",
    "TensorTrace",
    "check_callable",
    "check_model",
    "floating_tensors",
    "input_tensors",
    "labelled_modules",
    "summarizable",
    "tensor_traces",
]

#: Containers and tensors visited in one module input or output (like CaptureLimits').
MAX_WALK_NODES = 4096
#: Container edges followed from an input or output root.
MAX_WALK_DEPTH = 32

#: (container path, tensor) pairs found in one module input or output.
Found = list[tuple[str, torch.Tensor]]


@dataclass(frozen=True)
class TensorTrace:
    """One floating tensor of a module call's inputs or output, with its summary.

    Attributes:
        tensor_path: Container path, as in snapshots: ``args[0]``, ``kwargs['x']``, ``output[1]``.
        shape: Shape of the tensor.
        dtype: String form of its dtype.
        summary: Whole-tensor statistics.
    """

    tensor_path: str
    shape: tuple[int, ...]
    dtype: str
    summary: TensorSummary


def floating_tensors(value: object, root: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for the real floating dense tensors in a bounded walk of ``value``."""
    if isinstance(value, torch.Tensor):  # the common module output: no walk
        if summarizable(value):
            yield root, value
        return
    for path, tensor in walk_tensors(((root, value),), MAX_WALK_NODES, MAX_WALK_DEPTH):
        if summarizable(tensor):
            yield path, tensor


def summarizable(tensor: torch.Tensor) -> bool:
    """True for a real floating, strided, materialized, non-nested tensor."""
    return (
        tensor.is_floating_point()
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and not tensor.is_nested
    )


def check_model(model: object, name: str = "model") -> nn.Module:
    """``model`` itself when it is a module, else a TypeError naming ``name``."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{name} must be a torch.nn.Module, got {type(model).__module__}."
            f"{type(model).__qualname__}"
        )
    return model


def check_callable(run: object, what: str) -> None:
    """A TypeError saying ``run`` must be a callable that ``what``, unless it is one."""
    if not callable(run):
        raise TypeError(f"run must be a callable that {what}, got {type(run).__qualname__}")


def labelled_modules(
    model: nn.Module, module_paths: Sequence[str] | None
) -> list[tuple[str, nn.Module]]:
    """(path, module) for every module, or for the named paths (unknown ones refused)."""
    modules = [(name or ROOT_PATH, module) for name, module in model.named_modules()]
    wanted = normalize_module_paths(module_paths)
    if wanted is None:
        return modules
    known = dict(modules)
    unknown = [path for path in wanted if path not in known]
    if unknown:
        raise ValueError(
            f"unknown module path(s) {', '.join(repr(p) for p in unknown)}: expected "
            f"named_modules() paths of {type(model).__qualname__}, with {ROOT_PATH!r} "
            "for the model itself"
        )
    return [(path, known[path]) for path in wanted]


def tensor_traces(cache: SummaryCache, tensors: Found) -> tuple[TensorTrace, ...]:
    """One :class:`TensorTrace` per found tensor, summaries through ``cache``."""
    return tuple(
        TensorTrace(path, tuple(tensor.shape), str(tensor.dtype), cache.summary(tensor))
        for path, tensor in tensors
    )


def input_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Found:
    """The floating tensors of a call's positional and keyword inputs."""
    found = list(floating_tensors(args, "args"))
    if kwargs:
        found.extend(floating_tensors(kwargs, "kwargs"))
    return found
