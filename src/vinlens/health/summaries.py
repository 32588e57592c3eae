"""What every health engine shares: traced tensors, the bounded tensor walk, argument checks.

A :class:`TensorTrace` is one floating tensor of a module call with its whole-tensor
:class:`~vinlens.model_inspection.TensorSummary`. The helpers below are used by the
forward origin, the diff, the streaming statistics and the training-time engines of
this package; they are public within :mod:`vinlens.health` (not re-exported).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.hooks import module_walk
from vinlens.model_inspection import ROOT_PATH, TensorSummary
from vinlens.model_inspection.capture import normalize_module_paths
from vinlens.model_inspection.summary import SummaryCache
from vinlens.model_inspection.walk import walk_tensors
from vinlens.wrappers import fold_module_walk, unwrap_model

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
    "output_tensors",
    "reducible",
    "summarizable",
    "tensor_traces",
]

#: Containers and tensors visited in one module input or output (like CaptureLimits').
MAX_WALK_NODES = 4096
#: Container edges followed from an input or output root.
MAX_WALK_DEPTH = 32

# The walk's paths of the first positional arguments, made once.
_ARG_PATHS = tuple(f"args[{position}]" for position in range(16))

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


def floating_tensors(
    value: object,
    root: str,
    *,
    complex_too: bool = False,
    truncated: Callable[[], None] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for the real floating dense tensors in a bounded walk of ``value``.

    ``complex_too`` adds complex dense tensors (reduce them through :func:`reducible`).
    ``truncated()`` is called when the walk limits (:data:`MAX_WALK_NODES`,
    :data:`MAX_WALK_DEPTH`) leave part of ``value`` unvisited.
    """
    if isinstance(value, torch.Tensor):  # the common module output: no walk
        if summarizable(value) or (complex_too and _dense_complex(value)):
            yield root, value
        return
    for path, tensor in walk_tensors(
        ((root, value),), MAX_WALK_NODES, MAX_WALK_DEPTH, on_limit=truncated
    ):
        if summarizable(tensor) or (complex_too and _dense_complex(tensor)):
            yield path, tensor


def summarizable(tensor: torch.Tensor) -> bool:
    """True for a real floating, strided, materialized, non-nested tensor."""
    return (
        tensor.is_floating_point()
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and not tensor.is_nested
    )


def _dense_complex(tensor: torch.Tensor) -> bool:
    return (
        tensor.is_complex()
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and not tensor.is_nested
    )


# float8 formats have no reductions in torch; float16 holds every value of these exactly
# (their largest finite value is at most 57,344 and their smallest subnormal 2**-17).
_FLOAT8_IN_FLOAT16 = frozenset(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    if hasattr(torch, name)
)
# An exponent-only format spanning 2**-127 .. 2**127: float32 holds it exactly.
_FLOAT8_IN_FLOAT32 = frozenset(
    getattr(torch, name) for name in ("float8_e8m0fnu",) if hasattr(torch, name)
)


def reducible(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a real floating tensor torch can reduce, with the same values.

    A complex tensor is viewed as its real and imaginary parts (``view_as_real``; a
    NaN or infinity in either part is one in the result); a float8 tensor is widened
    to float16 (float32 for ``float8_e8m0fnu``), exactly. Others are returned as they
    are.
    """
    if tensor.is_complex():
        return torch.view_as_real(tensor.resolve_conj())
    if tensor.dtype in _FLOAT8_IN_FLOAT16:
        return tensor.detach().to(torch.float16)
    if tensor.dtype in _FLOAT8_IN_FLOAT32:
        return tensor.detach().to(torch.float32)
    return tensor


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
    """(path, module) for every module, or for the named paths (unknown ones refused).

    Paths are those of the original model (see :mod:`vinlens.wrappers`): on
    ``torch.compile(model)`` the same as on ``model``. The walk is the one
    :func:`vinlens.hooks.module_walk` keeps per model structure, shared with capture.
    """
    original = unwrap_model(model)
    walk = fold_module_walk(original, module_walk(original))
    modules = [(name or ROOT_PATH, module) for name, module in walk]
    wanted = normalize_module_paths(module_paths)
    if wanted is None:
        return modules
    known = dict(modules)
    unknown = [path for path in wanted if path not in known]
    if unknown:
        raise ValueError(
            f"unknown module path(s) {', '.join(repr(p) for p in unknown)}: expected "
            f"named_modules() paths of {type(unwrap_model(model)).__qualname__}, with "
            f"{ROOT_PATH!r} "
            "for the model itself"
        )
    return [(path, known[path]) for path in wanted]


def tensor_traces(cache: SummaryCache, tensors: Found) -> tuple[TensorTrace, ...]:
    """One :class:`TensorTrace` per found tensor, summaries through ``cache``."""
    return tuple(
        TensorTrace(path, tuple(tensor.shape), str(tensor.dtype), cache.summary(reducible(tensor)))
        for path, tensor in tensors
    )


def output_tensors(
    output: object, *, complex_too: bool = False, truncated: Callable[[], None] | None = None
) -> Found:
    """``list(floating_tensors(output, "output", ...))``, without the generator for the
    common output, one tensor (a hook per module call pays for every step)."""
    if isinstance(output, torch.Tensor):
        if summarizable(output) or (complex_too and _dense_complex(output)):
            return [("output", output)]
        return []
    return list(floating_tensors(output, "output", complex_too=complex_too, truncated=truncated))


def input_tensors(
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    complex_too: bool = False,
    truncated: Callable[[], None] | None = None,
) -> Found:
    """The floating tensors of a call's positional and keyword inputs (see
    :func:`floating_tensors` for the keywords)."""
    if not kwargs and len(args) < MAX_WALK_NODES:
        # The common call, tensors passed positionally: the pairs the walk below finds
        # (the args tuple and each tensor are one node each, all within the quota).
        found: Found = []
        for position, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor):
                break
            if summarizable(arg) or (complex_too and _dense_complex(arg)):
                path = _ARG_PATHS[position] if position < 16 else f"args[{position}]"
                found.append((path, arg))
        else:
            return found
    found = list(floating_tensors(args, "args", complex_too=complex_too, truncated=truncated))
    if kwargs:
        found.extend(
            floating_tensors(kwargs, "kwargs", complex_too=complex_too, truncated=truncated)
        )
    return found
