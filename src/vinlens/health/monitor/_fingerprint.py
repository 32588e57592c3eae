"""Every-step fingerprints of a monitored run (written with ``log_dir``): what each step saw,
started from and left behind, so that two logs can be compared step by step
(:func:`~vinlens.health.compare_runs`).

Per step: the root module's inputs at its first call of the step (float64 sum and sum of
squares of each tensor, with shapes and dtypes), each watched module's own weight norm as
the step begins and its own parameter-gradient norm after the backward (float64, over
``parameters(recurse=False)``). Everything stays on the device that computed it: the run
log's writer copies a flush's worth to the host on its own thread, so a step waits for no
read of its own. On sampled steps, the order of outputs and of parameter gradients too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from vinlens.health.monitor._steps import ModelTree
from vinlens.health.summaries import labelled_modules
from vinlens.hooks import HookSet
from vinlens.model_inspection.summary import sum_and_squares, sums_of_squares

if TYPE_CHECKING:
    from vinlens.health.monitor.runlog.writer import RunLogWriter

__all__ = ["StepPrints"]


def _tensors(value: object, found: list[torch.Tensor], depth: int = 0) -> list[torch.Tensor]:
    """The tensors in ``value`` (nested tuples, lists and dict values), in order."""
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif depth < 8 and isinstance(value, tuple | list):
        for item in value:
            _tensors(item, found, depth + 1)
    elif depth < 8 and isinstance(value, dict):
        for item in value.values():
            _tensors(item, found, depth + 1)
    return found


def _own_parameters(
    targets: Sequence[tuple[str, nn.Module]], paths: Sequence[str]
) -> list[tuple[nn.Parameter, int]]:
    """Each parameter a watched module registers itself, with that module's row."""
    rows = {path: row for row, path in enumerate(paths)}
    return [
        (parameter, rows[path])
        for path, module in targets
        if path in rows
        for parameter in module.parameters(recurse=False)
    ]


def _sum_and_squares(x: torch.Tensor) -> torch.Tensor:
    """``[sum, sum of squares]`` of ``x`` in float64: one compiled pass over a dense CPU
    float32/float64 tensor's memory where numba is installed (no copy of the batch), else
    one float64 copy reduced twice (the squares as a dot product, not a second tensor)."""
    found = sum_and_squares(x)
    if found is not None:
        return torch.tensor(found, dtype=torch.float64)
    wide = x.to(torch.float64).reshape(-1)
    return torch.stack((wide.sum(), torch.dot(wide, wide)))


def _moved(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; asynchronously unless the copy lands on the CPU (where an
    asynchronous copy from an accelerator could be read before it is written)."""
    if tensor.device == device:
        return tensor
    return tensor.to(device, non_blocking=device.type != "cpu")


#: Tensors this large take the compiled CPU pass; smaller ones one fused float64 norm
#: together, whose per-call cost is lower than a kernel call per tensor.
_COMPILED_FROM = 1 << 15


def _squares(dense: list[torch.Tensor]) -> torch.Tensor:
    """The float64 sums of squares of one device's and dtype's tensors, then a 0 (the pad
    the gather reads). On the CPU, with numba, each large tensor takes one compiled pass: a
    float64 ``_foreach_norm`` widens element by element there, several times slower than
    the step's own float32 work. Everything else is one ``_foreach_norm`` in float64."""
    values = torch.zeros(len(dense) + 1, dtype=torch.float64, device=dense[0].device)
    large = [i for i, t in enumerate(dense) if t.numel() >= _COMPILED_FROM]
    found = sums_of_squares([dense[i] for i in large]) if large else None
    rest = range(len(dense)) if found is None else sorted(set(range(len(dense))) - set(large))
    if found is not None:
        values[large] = torch.tensor(found, dtype=torch.float64)
    if rest:
        norms = torch._foreach_norm([dense[i] for i in rest], 2, dtype=torch.float64)
        values[list(rest)] = torch.stack(norms).square()
    return values


class _Norms:
    """Per-module L2 norms of a set of tensors: one ``_foreach_norm`` per device and dtype
    in float64, each module's squares gathered into a ``(modules, most owned)`` block and
    summed along its rows on the device. A sum along a dimension is deterministic where
    ``index_add_`` is not (atomics on CUDA): two equal runs log equal bits."""

    def __init__(self, modules: int) -> None:
        self._modules = modules
        self._key: tuple[object, ...] | None = None
        self._groups: list[tuple[list[int], torch.Tensor]] = []
        self._device = torch.device("cpu")
        self._empty: torch.Tensor | None = None

    def __call__(self, tensors: Sequence[torch.Tensor | None], rows: Sequence[int]) -> torch.Tensor:
        # Where each tensor lives: the gather indices are rebuilt only when that changes.
        key = tuple(None if t is None else (t.device, t.dtype) for t in tensors)
        if key != self._key:
            self._plan(tensors, rows, key)
        total = None
        for indices, gather in self._groups:
            group = [t for t in (tensors[i] for i in indices) if t is not None]
            dense = [t.coalesce().values() if t.is_sparse else t for t in group]
            padded = _squares(dense)
            squares = _moved(padded[gather].sum(dim=1), self._device)
            total = squares if total is None else total + squares
        if total is None:
            total = torch.zeros(self._modules, dtype=torch.float64, device=self._device)
        assert self._empty is not None
        return total.sqrt().masked_fill_(self._empty, float("nan"))

    def _plan(
        self, tensors: Sequence[torch.Tensor | None], rows: Sequence[int], key: tuple[object, ...]
    ) -> None:
        by: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, t in enumerate(tensors):
            if t is not None:
                by.setdefault((t.device, t.dtype), []).append(i)
        self._groups = []
        for (device, _), indices in by.items():
            members: list[list[int]] = [[] for _ in range(self._modules)]
            for position, i in enumerate(indices):
                members[rows[i]].append(position)
            width = max((len(m) for m in members), default=0)
            pad = len(indices)  # the zero appended after the group's squares
            gather = [m + [pad] * (width - len(m)) for m in members]
            self._groups.append((indices, torch.tensor(gather, dtype=torch.long, device=device)))
        first = next((t for t in tensors if t is not None), None)
        self._device = first.device if first is not None else torch.device("cpu")
        owned = torch.ones(self._modules, dtype=torch.bool)
        owned[list(rows)] = False
        self._empty = owned.to(self._device)
        self._key = key


class StepPrints:
    """The fingerprints a :class:`~vinlens.health.TrainingMonitor` logs for every step.

    One instance forward pre-hook on ``model`` (the object the caller trains, its
    ``torch.compile`` or DDP wrapper included, so that the hook runs eagerly outside any
    compiled code) is held for the monitor's life and records the first call of each step.
    Without a run log (``log`` None) it registers nothing and each call returns at once.
    A model compiled in place (``model.compile()``) runs its hooks inside its compiled call,
    where dynamo would trace them: its inputs are not fingerprinted (logged as ``()``, which
    :func:`~vinlens.health.compare_runs` reads as "not recorded").
    """

    def __init__(
        self, model: nn.Module, module: nn.Module, paths: Sequence[str], log: RunLogWriter | None
    ):
        self._log = log
        self._paths = tuple(paths)
        self._module = module
        self._weights = _Norms(len(paths))
        self._grads = _Norms(len(paths))
        self._owned: list[tuple[nn.Parameter, int]] = []
        self._tree: ModelTree | None = None  # built on the first step, when log is set
        self._armed = False
        self._thread = 0
        self._inputs: tuple[Any, torch.Tensor | None] = ((), None)
        self._start: torch.Tensor | None = None
        self._grad_order: list[int] = []
        self._last_order: tuple[list[str], list[str]] | None = None
        self._hooks = HookSet()
        if log is not None and getattr(model, "_compiled_call_impl", None) is None:
            self._hooks.forward_pre(model, self._pre, with_kwargs=True)

    def _targets(self) -> list[tuple[nn.Parameter, int]]:
        """The watched modules' own parameters, found again when the model's tree changed
        (:class:`ModelTree`: an identity check of each module's members, no walk a step)."""
        if self._tree is None or self._tree.changed():
            self._tree = self._tree or ModelTree(self._module)
            self._owned = _own_parameters(labelled_modules(self._module, None), self._paths)
        return self._owned

    def _pre(self, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._armed or threading.get_ident() != self._thread:
            return
        self._armed = False
        tensors = _tensors((args, kwargs), [])
        if not tensors:
            return
        with torch.no_grad():
            values = []
            for t in tensors:
                x = t.detach()
                values.append(_sum_and_squares(torch.view_as_real(x) if x.is_complex() else x))
            device = self._start.device if self._start is not None else values[0].device
            joined = torch.cat([_moved(v, device) for v in values])
        signature = tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in tensors)
        self._inputs = (signature, joined)

    def begin(self, hooks: HookSet | None) -> None:
        """The step begins: its weight norms now; its inputs at the root's first call; with
        the sampled step's ``hooks``, the order its parameter gradients are produced in."""
        if self._log is None:
            return
        owned = self._targets()
        with torch.no_grad():
            self._start = self._weights([p for p, _ in owned], [r for _, r in owned])
        self._inputs = ((), None)
        self._thread = threading.get_ident()
        self._armed = True
        self._grad_order = []
        if hooks is not None:
            order = self._grad_order
            seen: set[int] = set()
            for parameter, row in owned:
                if parameter.requires_grad:

                    def note(_p: torch.Tensor, row: int = row) -> None:
                        if row not in seen:
                            seen.add(row)
                            order.append(row)

                    hooks.post_accumulate_grad(parameter, note)

    def end(self, step: int) -> None:
        """The step's backward is done: its gradient norms, and the step to the log."""
        if self._log is None:
            return
        self._armed = False
        owned = self._owned
        with torch.no_grad():
            grads = self._grads([p.grad for p, _ in owned], [r for _, r in owned])
            start = self._start if self._start is not None else grads
            signature, inputs = self._inputs
            parts = [start, _moved(grads, start.device)]
            if inputs is not None:
                parts.append(_moved(inputs, start.device))
            values = torch.cat(parts)
        self._log.fingerprint(step, signature, values)

    def sampled(self, step: int, outputs: Sequence[str]) -> None:
        """A sampled step's order of outputs and of gradients, logged when it changed."""
        if self._log is None:
            return
        order = (list(outputs), [self._paths[r] for r in self._grad_order])
        if order != self._last_order:
            self._last_order = order
            self._log.order(step, *order)

    def close(self) -> None:
        self._hooks.remove()
