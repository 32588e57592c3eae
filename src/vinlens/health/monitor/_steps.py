"""The step machinery of :class:`~vinlens.health.monitor.TrainingMonitor`: the random
state a step starts from, the replay of a non-finite step, and the fused gradient norms."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.health.gradient import GradientOrigin, find_nonfinite_gradient_origin
from vinlens.health.monitor._amp import LowPrecision, ScalerWatch, unscaled_norms
from vinlens.health.monitor._budget import Budget
from vinlens.health.monitor._distributed import RankSync
from vinlens.health.monitor._rng import RngStates, restore_rng
from vinlens.health.monitor._rng import rng_states as rng_states  # the monitor's begin_step
from vinlens.health.stats import ActivationAccumulator
from vinlens.hooks import HookSet
from vinlens.model_inspection import ROOT_PATH
from vinlens.wrappers import hold_eager, named_parameters


def replay_step(
    model: nn.Module,
    parameters: Sequence[nn.Parameter],
    step_fn: Callable[[], object],
    rng: RngStates,
) -> GradientOrigin | None:
    """Run ``step_fn`` again under the origin search, leaving the model as the step left it.

    The replay starts from the random state saved before the step, so it draws the same
    dropout masks and augmentations. Afterwards the buffers (BatchNorm running statistics
    and ``num_batches_tracked``) and the gradients are put back as the original step left
    them, so the monitored step updates them once, exactly as an unmonitored one would.
    Both are restored in place: each ``p.grad`` is again the tensor the step wrote into
    (gradients kept as views of one flat buffer, DDP or ZeRO bucket style, keep reaching
    it), holding the step's values.
    """
    with torch.no_grad():
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
        written = [p.grad for p in parameters]
        grads = [None if g is None else g.detach().clone() for g in written]
    restore_rng(rng)
    try:
        return find_nonfinite_gradient_origin(model, step_fn)
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
            for parameter, grad, kept in zip(parameters, written, grads, strict=True):
                if grad is not None and kept is not None:
                    grad.copy_(kept)  # the replay may have accumulated into it
                parameter.grad = grad


class ModelTree:
    """A model's parameters, read again only when its tree changed.

    :meth:`changed` compares, by identity, every module's registered parameters and
    children with those seen last time: one list over the modules, no ``named_parameters``
    walk (its memo hashes every parameter), so a step pays little for noticing a layer
    replaced, a parameter reassigned (``load_state_dict(..., assign=True)``) or deleted.
    """

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._read()

    def _read(self) -> None:
        self._modules = list(self._model.modules())
        self._members = self._now()
        self.parameters: list[nn.Parameter] = list(self._model.parameters())

    def _now(self) -> list[object]:
        return [
            member
            for module in self._modules
            for members in (module._parameters, module._modules)
            for member in members.values()
        ]

    def changed(self) -> bool:
        """Whether the tree changed since the last call (then :attr:`parameters` is new)."""
        now, seen = self._now(), self._members
        if len(now) == len(seen) and all(map(operator.is_, now, seen)):
            return False
        self._read()
        return True


def owner_rows(model: nn.Module, module_paths: Sequence[str]) -> list[int]:
    """Row of each parameter's owner among ``module_paths`` (-1: not watched), in the order
    of ``model.parameters()``."""
    rows = {path: row for row, path in enumerate(module_paths)}
    return [
        rows.get(name.rpartition(".")[0] or ROOT_PATH, -1) for name, _ in named_parameters(model)
    ]


@dataclass
class OpenStep:
    """What :meth:`TrainingMonitor.begin_step` saved for :meth:`TrainingMonitor.end_step`."""

    step: int
    thread: int
    rng: RngStates
    start_buffers: list[torch.Tensor] | None
    outputs: ActivationAccumulator | None  # None: not a sampled step
    hooks: HookSet | None
    release_eager: Callable[[], None] | None = None  # ends the sampled step's eager stance


class StepSlot:
    """The step in progress and the lock it holds while it runs.

    Apart from the monitor so that a finalizer can release it without keeping the monitor
    alive: the taps a sampled step armed are process-wide (every instance of a hooked class
    runs through them), so an open step must end with the monitor at the latest.
    """

    def __init__(self) -> None:
        self.open: OpenStep | None = None
        self.running = threading.Lock()

    def release(self, number: int | None = None) -> bool:
        """Abandon the open step (only step ``number``, when given): remove its hooks, end
        its eager stance, free the monitor. Returns whether a step was abandoned."""
        step = self.open
        if step is None or (number is not None and step.step != number):
            return False
        self.open = None
        try:
            if step.hooks is not None:
                step.hooks.remove()
            if step.release_eager is not None:
                step.release_eager()
        finally:
            self.running.release()
        return True


LOW_PRECISION = (torch.float16, torch.bfloat16)


def grouped_norms(
    grads: Sequence[torch.Tensor | None],
) -> list[tuple[list[int], torch.Tensor]]:
    """Per (device, dtype): the indices of its gradients and their L2 norms, one fused call.

    Norms of float16 and bfloat16 gradients are taken in float32: a norm overflows long
    before its elements do.
    """
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[int], list[torch.Tensor]]] = {}
    for index, grad in enumerate(grads):
        if grad is not None:
            if grad.is_sparse:  # nn.Embedding(sparse=True): its summed values
                grad = grad.coalesce().values()
            indices, tensors = groups.setdefault((grad.device, grad.dtype), ([], []))
            indices.append(index)
            tensors.append(grad)
    found = []
    for (_, dtype), (indices, tensors) in groups.items():
        if dtype in LOW_PRECISION:
            norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
        else:
            norms = torch._foreach_norm(tensors)
        found.append((indices, torch.stack(norms)))
    return found


def dense_values(grad: torch.Tensor) -> torch.Tensor:
    """A gradient's stored values (a sparse gradient's coalesced values)."""
    return grad.coalesce().values() if grad.is_sparse else grad


def all_finite(grads: Sequence[torch.Tensor | None]) -> bool:
    """Whether every gradient is finite (see :func:`finite_norm`)."""
    return finite_norm(grads)[0]


def finite_norm(grads: Sequence[torch.Tensor | None]) -> tuple[bool, float]:
    """Whether every gradient is finite, and the global L2 norm.

    One fused norm per device and dtype, one read each; only when their squares are not
    finite is each gradient checked on its own (finite values near 1e19 overflow a float32
    norm, whose global norm is then reported as inf).
    """
    squares = 0.0
    for _, norms in grouped_norms(grads):
        # One op over the stacked norms, squared in float64 (no overflow below float32's max).
        squares += torch.linalg.vector_norm(norms, dtype=torch.float64).item() ** 2
    if math.isfinite(squares):
        return True, math.sqrt(squares)
    finite = all(bool(torch.isfinite(dense_values(g)).all()) for g in grads if g is not None)
    return finite, math.inf if finite else math.nan


def parameter_norms(grads: Sequence[torch.Tensor | None]) -> list[float]:
    """L2 norm of each gradient (0 for None), one host transfer per device and dtype."""
    norms = [0.0] * len(grads)
    for indices, values in grouped_norms(grads):
        for i, value in zip(indices, values.tolist(), strict=True):
            norms[i] = value
    return norms


def checked_norms(
    ranks: RankSync,
    amp: ScalerWatch | None,
    parameters: Sequence[nn.Parameter],
    grads: Sequence[torch.Tensor | None],
) -> tuple[bool, Sequence[float]]:
    """Every rank's verdict and each parameter's gradient norm (global when sharded), unscaled
    by the GradScaler's divisors so that the history's norms are the model's."""
    local = parameter_norms(grads)
    finite = all(math.isfinite(n) for n in local) or all_finite(grads)
    finite, norms = ranks.agree_norms(finite, local)
    if amp is not None and amp.enabled:
        norms = unscaled_norms(norms, amp.divisors(parameters))
    return finite, norms


def checked_norm(
    ranks: RankSync,
    amp: ScalerWatch | None,
    parameters: Sequence[nn.Parameter],
    grads: Sequence[torch.Tensor | None],
) -> tuple[bool, float]:
    """Every rank's verdict and the global gradient norm: one fused norm, or the parameters'
    norms summed where optimizers unscaled differently or the gradients are sharded."""
    divisor: float | None = 1.0
    if amp is not None and amp.enabled:
        divisors = amp.divisors(parameters)  # a sequence: some optimizers unscaled, some not
        divisor = divisors if isinstance(divisors, float) else None
    if divisor is None or ranks.per_parameter:
        finite, norms = checked_norms(ranks, amp, parameters, grads)
        return finite, math.sqrt(math.fsum(n * n for n in norms))
    finite, norm = ranks.agree_norm(*finite_norm(grads))
    return finite, norm / divisor


def arm_sample(
    targets: Sequence[tuple[str, nn.Module]], owner: int, budget: Budget
) -> tuple[ActivationAccumulator, LowPrecision, HookSet, Callable[[], None]]:
    """Hook the watched modules for one sampled step: their outputs folded into summaries on
    the training thread ``owner`` only (an evaluation or serving thread's forward of the
    same model is not this step's), the time spent charged to the budget.

    Returns the summaries, the step's low-precision dtype watch, the hooks and the release of
    the eager stance, which the step's end (or abandonment) calls after removing the hooks.
    """
    outputs = ActivationAccumulator()
    fold = outputs.update
    low = LowPrecision()
    clock, spend = budget.clock, budget.spend

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        if threading.get_ident() == owner:
            start = clock()
            fold(label, output)
            low.note(output)
            spend(clock() - start)

    # Eagerly, so that a compiled model's hooks fire and dynamo never traces them.
    release_eager = hold_eager()
    hooks = HookSet()
    try:
        hooks.hook_modules(targets, None, post)
    except BaseException:
        hooks.remove()
        release_eager()
        raise
    return outputs, low, hooks, release_eager
