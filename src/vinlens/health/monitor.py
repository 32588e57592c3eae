"""Health of a training loop at almost no cost: :class:`TrainingMonitor`.

Every step costs one fused norm over the parameters' gradients and one scalar read:
a step whose gradients hold NaN or Inf is replayed once, from the random-number state
saved when it started (torch's CPU and CUDA generators, Python's ``random`` and NumPy's
global generator), under :func:`find_nonfinite_gradient_origin`, then the model's buffers
and gradients are put back as the step left them, and the step is recorded as a
:class:`NonFiniteEvent` (raising :class:`NonFiniteGradientError` before the caller's
optimizer step, unless told to only record). One step in ``every`` is *sampled*: module
hooks are armed for that step only, fold each module's outputs into a summary, and the
gradient norm of each module's own parameters is read after the backward. The samples
live in a ring of the last :data:`HISTORY_SAMPLES` sampled steps beside streaming totals
over every sampled step, so memory does not grow with the length of the run.
"""

from __future__ import annotations

import math
import os
import random
import threading
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import torch
from torch import nn

from vinlens.health.distributed import RankSync, unwrap_ddp
from vinlens.health.gradient import GradientOrigin, find_nonfinite_gradient_origin
from vinlens.health.stats import ActivationAccumulator
from vinlens.health.summaries import check_callable, check_model, labelled_modules
from vinlens.hooks import HookSet
from vinlens.model_inspection import ROOT_PATH, SummaryAccumulator, TensorSummary
from vinlens.wrappers import (
    compiled_paths,
    has_compile_wrappers,
    named_parameters,
    run_eagerly,
    unwrap_model,
)

if TYPE_CHECKING:
    from vinlens.health.runlog.writer import RunLogWriter

__all__ = [
    "EVENTS_KEPT",
    "HISTORY_SAMPLES",
    "HistoryMatrix",
    "ModuleHistory",
    "ModuleTotals",
    "MonitorTotals",
    "NonFiniteEvent",
    "NonFiniteGradientError",
    "TrainingHistory",
    "TrainingMonitor",
]

#: Sampled steps kept in the ring of :attr:`TrainingMonitor.history` (older ones live on
#: only in the totals).
HISTORY_SAMPLES = 512

#: Non-finite events a monitor keeps in full (:attr:`TrainingMonitor.events`, ~2.5 KB
#: each). Past them a step is counted (:attr:`TrainingMonitor.nonfinite_count`,
#: :attr:`TrainingMonitor.last_nonfinite_step`), and with ``on_nonfinite="record"`` not
#: replayed: a NaN flood (weights already NaN) costs neither memory nor a replay per step.
EVENTS_KEPT = 100

_Result = TypeVar("_Result")
_SUMMARY_FIELDS = (
    "count",
    "mean",
    "std",
    "min",
    "max",
    "abs_max",
    "zero_fraction",
    "nan_count",
    "posinf_count",
    "neginf_count",
)
_GRAD_NORM = len(_SUMMARY_FIELDS)
#: Columns of :meth:`TrainingMonitor.history_matrix`.
HistoryField = Literal[
    "grad_norm",
    "count",
    "mean",
    "std",
    "min",
    "max",
    "abs_max",
    "zero_fraction",
    "nan_count",
    "posinf_count",
    "neginf_count",
]
_COLUMNS: dict[str, int] = {name: i for i, name in enumerate(_SUMMARY_FIELDS)} | {
    "grad_norm": _GRAD_NORM
}


@dataclass(frozen=True)
class NonFiniteEvent:
    """A training step whose parameter gradients held NaN or Inf.

    Attributes:
        step: The step number (0 for the first :meth:`TrainingMonitor.run_step` call).
        origin: Where the replayed step's gradients first became non-finite; None when
            the replay stayed finite (a step that does not repeat given the same random
            state and inputs).
        rank: The rank (process) that ran the step: ``torch.distributed``'s rank, 0 when
            it is not initialized.
        made_on_ranks: The ranks whose local replay found an origin, the same tuple on
            every rank of a ``ranks="all"`` monitor (see :mod:`vinlens.health.distributed`);
            this rank's alone, or (), otherwise.
        replayed_eagerly: The model runs ``torch.compile``'d code and the step was replayed
            eagerly (compiled code cannot be watched module by module): ``origin`` is the
            eager replay's. None there means the compiled step's NaN or Inf did not recur
            eagerly (made by the compiled code's own numerics, or by random numbers it drew
            itself), and a ``RuntimeWarning`` says so.
    """

    step: int
    origin: GradientOrigin | None
    rank: int = 0
    made_on_ranks: tuple[int, ...] = ()
    replayed_eagerly: bool = False


class NonFiniteGradientError(RuntimeError):
    """Raised by :meth:`TrainingMonitor.run_step` for a non-finite step (``on_nonfinite="raise"``).

    Attributes:
        event: The recorded :class:`NonFiniteEvent`.
    """

    def __init__(self, event: NonFiniteEvent) -> None:
        origin = event.origin
        where = (
            "the replay stayed finite" + (_COMPILED_FINITE if event.replayed_eagerly else "")
            if origin is None
            else "already non-finite where it entered the model (made by the loss), first"
            f" reaching {origin.module_path!r} (call {origin.call_index})"
            if origin.entered_nonfinite
            else f"first made in {origin.module_path!r} (call {origin.call_index})"
            + (
                f", parameters {', '.join(origin.parameter_paths)}"
                if origin.parameter_paths
                else ""
            )
            + (" during the forward" if origin.forward_origin is not None else "")
        )
        made = event.made_on_ranks
        if made and made != (event.rank,):
            where += f" on rank {event.rank}; the replays found an origin on rank(s) " + ", ".join(
                map(str, made)
            )
        super().__init__(f"step {event.step}: non-finite parameter gradients, {where}")
        self.event = event


@dataclass(frozen=True)
class ModuleHistory:
    """One module over the sampled steps in the ring.

    Attributes:
        grad_norm: L2 norm of the module's own parameters' gradients, one float per sampled
            step (NaN when it has no parameter with a gradient).
        output: Summary of the module's floating outputs (every call), one per sampled step
            (``count == 0`` when it did not run).
        grad_norm_total: Statistics of ``grad_norm`` over every sampled step of the run,
            including those that left the ring.
        output_total: Summary of the outputs over every sampled step of the run.
    """

    grad_norm: tuple[float, ...]
    output: tuple[TensorSummary, ...]
    grad_norm_total: TensorSummary
    output_total: TensorSummary


@dataclass(frozen=True)
class TrainingHistory:
    """The sampled steps of a monitored run.

    Attributes:
        steps: Step numbers of the sampled steps in the ring, oldest first.
        modules: Per module path (registration order), its history.
        steps_run: Steps run so far.
        samples: Sampled steps so far (``len(steps)`` until the ring is full).
    """

    steps: tuple[int, ...]
    modules: Mapping[str, ModuleHistory]
    steps_run: int
    samples: int


@dataclass(frozen=True)
class HistoryMatrix:
    """One statistic of every module over the sampled steps in the ring.

    Attributes:
        field: ``"grad_norm"`` or a :class:`TensorSummary` field of the outputs.
        steps: Sampled step numbers, oldest first (the columns).
        module_paths: The rows.
        values: ``float64`` array of shape ``(len(module_paths), len(steps))``.
    """

    field: str
    steps: tuple[int, ...]
    module_paths: tuple[str, ...]
    values: np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True)
class ModuleTotals:
    """One module over every sampled step of a run (those that left the ring included).

    Attributes:
        output: Summary of the module's outputs over every sampled step.
        grad_norm: Statistics of its gradient norm over the sampled steps (``count`` is
            the number of samples; NaN norms, modules without parameters, are counted as
            ``nan_count``).
    """

    output: TensorSummary
    grad_norm: TensorSummary


class MonitorTotals:
    """Streaming totals behind the history (the accumulator protocol of
    :mod:`vinlens.operations`): ``update((outputs, grad_norms))`` adds one sampled step,
    ``merge(other)`` folds another run's totals in without changing it, ``finish()``
    returns the per-module :class:`ModuleTotals`."""

    def __init__(self, module_paths: Sequence[str]) -> None:
        self.module_paths = tuple(module_paths)
        self.outputs = ActivationAccumulator()
        self.grad_norms = [SummaryAccumulator() for _ in self.module_paths]
        self.samples = 0

    def update(self, sample: tuple[ActivationAccumulator, Sequence[float]]) -> MonitorTotals:
        outputs, norms = sample
        self.outputs.merge(outputs)
        for moments, norm in zip(self.grad_norms, norms, strict=True):
            moments.update_value(norm)
        self.samples += 1
        return self

    def merge(self, other: MonitorTotals) -> MonitorTotals:
        if not isinstance(other, MonitorTotals) or other.module_paths != self.module_paths:
            raise ValueError(
                "can only merge the totals of a monitor watching the same module paths"
            )
        self.outputs.merge(other.outputs)
        for mine, theirs in zip(self.grad_norms, other.grad_norms, strict=True):
            mine.merge(theirs)
        self.samples += other.samples
        return self

    def finish(self) -> Mapping[str, ModuleTotals]:
        outputs = self.outputs.finish().modules
        empty = SummaryAccumulator().finish()
        return types.MappingProxyType(
            {
                path: ModuleTotals(outputs.get(path, empty), moments.finish())
                for path, moments in zip(self.module_paths, self.grad_norms, strict=True)
            }
        )


_RngStates = tuple[torch.Tensor, list[torch.Tensor] | None, object, object]


def _rng_states() -> _RngStates:
    """torch's CPU and CUDA generators, Python's ``random`` and NumPy's global generator."""
    cuda = (
        torch.cuda.get_rng_state_all()
        if torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        else None
    )
    return torch.get_rng_state(), cuda, random.getstate(), np.random.get_state()


def _restore_rng(states: _RngStates) -> None:
    cpu, cuda, python, legacy_numpy = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(python)  # type: ignore[arg-type]
    np.random.set_state(legacy_numpy)  # type: ignore[arg-type]


def _replay(
    model: nn.Module,
    parameters: Sequence[nn.Parameter],
    step_fn: Callable[[], object],
    rng: _RngStates,
) -> GradientOrigin | None:
    """Run ``step_fn`` again under the origin search, leaving the model as the step left it.

    The replay starts from the random state saved before the step, so it draws the same
    dropout masks and augmentations. Afterwards the buffers (BatchNorm running statistics
    and ``num_batches_tracked``) and the gradients are put back as the original step left
    them, so the monitored step updates them once, exactly as an unmonitored one would.
    """
    with torch.no_grad():
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [None if p.grad is None else p.grad.detach().clone() for p in parameters]
    _restore_rng(rng)
    try:
        return find_nonfinite_gradient_origin(model, step_fn)
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for parameter, grad in zip(parameters, grads, strict=True):
            parameter.grad = grad


class TrainingMonitor:
    """Watch a training loop: a cheap finiteness check per step, module history per sample.

    ``run_step(step_fn)`` runs one step: ``step_fn`` zeroes the gradients, runs forward and
    backward and may return the loss; the caller steps the optimizer after ``run_step``
    returns. Steps are numbered from 0 by calls to ``run_step``. A non-finite step is run
    a second time, so ``step_fn`` should take its batch from outside (fetch it before
    ``run_step``, not with ``next(loader)`` inside); random draws repeat because torch's,
    Python's and NumPy's global generators are restored first, and the model's buffers and
    gradients are left as the first run made them.

    Args:
        model: The model being trained.
        every: Sample one step in ``every`` (steps 0, every, 2 * every, ...).
        module_paths: Paths whose history is kept, or None for every registered module.
        on_nonfinite: ``"raise"`` raises :class:`NonFiniteGradientError` after recording a
            non-finite step (before the caller's optimizer step, so the weights stay
            finite); ``"record"`` records it and returns normally.
        log_dir: A directory (a path or an fsspec URL such as ``s3://bucket/runs/exp42``)
            the monitor appends its run log to (see :mod:`vinlens.health.runlog`); read
            it with :func:`vinlens.health.open_run`. None keeps everything in memory.
        storage_options: fsspec options for a ``log_dir`` URL.
        replay_max_bytes: Bound of one replay bundle (written with ``log_dir`` for each
            non-finite step, the first 16 of a run; 256 MiB by default); past it the
            bundle keeps the inputs and the output gradient, not the model's state.
        ranks: Under ``torch.distributed``: ``"all"`` (every rank monitors and the ranks
            agree on each step's verdict, one tiny all-reduce per step), ``"local"`` (this
            rank alone, no collective), or None: ``"all"`` for a DDP or FSDP2 model, else
            ``"local"``. See :mod:`vinlens.health.distributed`.

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: ``every`` is not a positive integer, unknown ``module_paths``, or an
            ``on_nonfinite`` other than ``"raise"`` and ``"record"``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        every: int = 100,
        module_paths: Sequence[str] | None = None,
        on_nonfinite: Literal["raise", "record"] = "raise",
        log_dir: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        replay_max_bytes: int = 256 << 20,
        ranks: Literal["all", "local"] | None = None,
    ) -> None:
        check_model(model)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(
                f"every must be a positive integer (sample one step in every), got {every!r}"
            )
        if on_nonfinite not in ("raise", "record"):
            raise ValueError(f"on_nonfinite must be 'raise' or 'record', got {on_nonfinite!r}")
        self.model = model
        self._module = unwrap_ddp(model)  # a DDP model's paths are its wrapped module's
        self.every = every
        self.on_nonfinite: Literal["raise", "record"] = on_nonfinite
        self._targets = labelled_modules(self._module, module_paths)
        self.module_paths: tuple[str, ...] = tuple(path for path, _ in self._targets)
        # Every parameter, frozen ones included: a step checks the gradients that exist,
        # so a parameter that gains requires_grad after construction is checked too.
        self._parameters = list(self._module.parameters())
        # Row of each parameter's owner among the watched paths (-1: not watched).
        rows = {path: row for row, path in enumerate(self.module_paths)}
        self._owner_rows: list[int] = []
        for name, _ in named_parameters(self._module):
            self._owner_rows.append(rows.get(name.rpartition(".")[0] or ROOT_PATH, -1))
        self._lock = threading.Lock()
        self._running = threading.Lock()  # held by the run_step in progress
        self._events: list[NonFiniteEvent] = []
        self._nonfinite_count = 0
        self._last_nonfinite_step: int | None = None
        self._step = 0
        self._samples = 0
        self._ring_steps = np.zeros(HISTORY_SAMPLES, dtype=np.int64)
        self._ring = np.full((HISTORY_SAMPLES, len(self.module_paths), _GRAD_NORM + 1), math.nan)
        self._totals = MonitorTotals(self.module_paths)
        self._listeners: list[Callable[[TrainingMonitor], None]] = []
        self._ranks = RankSync(model, self._parameters, ranks)
        self.rank = self._ranks.rank
        self._log: RunLogWriter | None = None
        self._last_norm = math.nan
        if isinstance(replay_max_bytes, bool) or not isinstance(replay_max_bytes, int):
            raise ValueError(f"replay_max_bytes must be an integer, got {replay_max_bytes!r}")
        self.replay_max_bytes = replay_max_bytes
        if log_dir is not None:
            from vinlens.health.runlog.writer import open_monitor_log

            self._log = open_monitor_log(
                self, log_dir, storage_options, (*_SUMMARY_FIELDS, "grad_norm")
            )

    # ------------------------------------------------------------------ the loop

    @property
    def step(self) -> int:
        """The number the next :meth:`run_step` call gets (steps run so far)."""
        return self._step

    @property
    def events(self) -> tuple[NonFiniteEvent, ...]:
        """The first :data:`EVENTS_KEPT` non-finite steps, in step order (later ones are
        counted in :attr:`nonfinite_count`)."""
        with self._lock:
            return tuple(self._events)

    @property
    def nonfinite_count(self) -> int:
        """Non-finite steps so far, those past :data:`EVENTS_KEPT` included."""
        return self._nonfinite_count

    @property
    def last_nonfinite_step(self) -> int | None:
        """The latest non-finite step (kept in :attr:`events` or only counted), or None."""
        return self._last_nonfinite_step

    def run_step(self, step_fn: Callable[[], _Result]) -> _Result:
        """Run one training step and check its gradients; returns what ``step_fn`` returned.

        A sampled step records only module calls on the thread running ``run_step``
        (forwards of the same model on an evaluation or serving thread are not counted).

        Raises:
            RuntimeError: another ``run_step`` of this monitor is in progress (a second
                thread, or ``step_fn`` calling it again).
            NonFiniteGradientError: the step's gradients held NaN or Inf and
                ``on_nonfinite="raise"``.
            Exception: whatever ``step_fn`` raises (every hook removed first).
        """
        check_callable(step_fn, "runs one training step (zero_grad, forward, backward)")
        if not self._running.acquire(blocking=False):
            raise RuntimeError(
                f"TrainingMonitor.run_step is already running (step {self._step - 1}); one "
                "monitor runs one step at a time: call run_step from one training thread "
                "and give other threads their own monitor"
            )
        try:
            return self._run_step(step_fn)
        finally:
            self._running.release()

    def _run_step(self, step_fn: Callable[[], _Result]) -> _Result:
        step = self._step
        self._step += 1
        rng = _rng_states()
        start_buffers = None
        if self._log is not None:  # the replay bundle's state is the step's start
            start_buffers = self._log.start_state(self._module)
        sampled = step % self.every == 0
        outputs: ActivationAccumulator | None = None
        if sampled:
            outputs = ActivationAccumulator()
            fold = outputs.update
            owner = threading.get_ident()

            def post(label: str, args: tuple[Any, ...], output: Any) -> None:
                if threading.get_ident() == owner:  # not an eval/serving thread's forward
                    fold(label, output)

            # Eagerly, so that a compiled model's hooks fire and dynamo never traces them.
            with run_eagerly(), HookSet() as hooks:
                hooks.hook_modules(
                    self._targets, None, post, use_global=not has_compile_wrappers(self.model)
                )
                result = step_fn()
        else:
            result = step_fn()
        grads = self._ranks.local([p.grad for p in self._parameters])
        if sampled:
            assert outputs is not None
            finite = self._record_sample(step, outputs, grads)
        else:
            finite, self._last_norm = self._checked_norm(grads)
        if self._log is not None:
            self._log.check()
            self._log.step(step, self._last_norm, result)  # the loss, read when written
        if not finite:
            with self._lock:
                keep = len(self._events) < EVENTS_KEPT
                self._nonfinite_count += 1
                self._last_nonfinite_step = step
            if not keep and self.on_nonfinite == "record":
                self._notify()  # counted only (see EVENTS_KEPT)
                return result
            capture = None
            if self._log is not None:
                capture = self._log.capture(unwrap_model(self._module), start_buffers)
            replayed = step_fn if capture is None else capture.wrap(step_fn)
            with self._ranks.replaying():
                origin = _replay(self._module, self._parameters, replayed, rng)
            made_on = self._ranks.made_on_ranks(origin is not None)
            eagerly = bool(compiled_paths(self._module))
            event = NonFiniteEvent(step, origin, self.rank, made_on, eagerly)
            if eagerly and origin is None:
                warnings.warn(
                    f"TrainingMonitor: step {step} had non-finite gradients but its replay stayed"
                    f" finite{_COMPILED_FINITE}",
                    RuntimeWarning,
                    stacklevel=3,
                )
            if keep:
                with self._lock:
                    self._events.append(event)
            if self._log is not None:
                self._log.nonfinite(step, self.rank, origin, capture, rng, self.replay_max_bytes)
            self._notify()
            if self.on_nonfinite == "raise":
                raise NonFiniteGradientError(event)
        elif sampled:
            self._notify()
        return result

    # ------------------------------------------------------------------ run log

    def close(self) -> None:
        """Flush the run log and close it (nothing to do without ``log_dir``; idempotent).

        Raises:
            RunLogError: the log's destination refused the last records.
        """
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> TrainingMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ history

    def _record_sample(
        self, step: int, outputs: ActivationAccumulator, grads: list[torch.Tensor | None]
    ) -> bool:
        finite, norms = self._checked_norms(grads)
        squares = [0.0] * len(self.module_paths)
        has = [False] * len(self.module_paths)
        for norm, row, grad in zip(norms, self._owner_rows, grads, strict=True):
            if row >= 0 and grad is not None:
                squares[row] += norm * norm
                has[row] = True
        module_norms = [math.sqrt(s) if h else math.nan for s, h in zip(squares, has, strict=True)]
        stats = outputs.finish().modules
        empty = SummaryAccumulator().finish()
        block = np.empty((len(self.module_paths), _GRAD_NORM + 1))
        for row, path in enumerate(self.module_paths):
            summary = stats.get(path, empty)
            block[row, :_GRAD_NORM] = [getattr(summary, f) for f in _SUMMARY_FIELDS]
            block[row, _GRAD_NORM] = module_norms[row]
        with self._lock:
            slot = self._samples % HISTORY_SAMPLES
            self._ring_steps[slot] = step
            self._ring[slot] = block
            self._samples += 1
            self._totals.update((outputs, module_norms))
        if self._log is not None:
            self._last_norm = math.sqrt(math.fsum(n * n for n in norms))
            self._log.sample(step, block)
        return finite

    def _checked_norms(self, grads: Sequence[torch.Tensor | None]) -> tuple[bool, Sequence[float]]:
        """Every rank's verdict and each parameter's gradient norm (global when sharded)."""
        norms = _parameter_norms(grads)
        finite = all(math.isfinite(n) for n in norms) or _all_finite(grads)
        return self._ranks.agree_norms(finite, norms)

    def _checked_norm(self, grads: Sequence[torch.Tensor | None]) -> tuple[bool, float]:
        """Every rank's verdict and the global gradient norm."""
        if not self._ranks.per_parameter:
            return self._ranks.agree_norm(*_finite_norm(grads))
        finite, norms = self._checked_norms(grads)
        return finite, math.sqrt(math.fsum(n * n for n in norms))

    def _order(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        count = min(self._samples, HISTORY_SAMPLES)
        start = self._samples - count
        return np.arange(start, self._samples, dtype=np.int64) % HISTORY_SAMPLES

    def history_matrix(self, field: HistoryField = "grad_norm") -> HistoryMatrix:
        """One statistic of every watched module over the sampled steps in the ring."""
        return self.history_matrices((field,))[0]

    def history_matrices(self, fields: Sequence[HistoryField]) -> tuple[HistoryMatrix, ...]:
        """Several statistics from one consistent snapshot of the ring (one per field)."""
        columns = []
        for field in fields:
            column = _COLUMNS.get(field)
            if column is None:
                raise ValueError(
                    f"field must be one of {', '.join(sorted(_COLUMNS))}, got {field!r}"
                )
            columns.append(column)
        with self._lock:
            order = self._order()
            steps = tuple(int(s) for s in self._ring_steps[order])
            ring = self._ring[order]
        return tuple(
            HistoryMatrix(field, steps, self.module_paths, ring[:, :, column].T.copy())
            for field, column in zip(fields, columns, strict=True)
        )

    @property
    def history(self) -> TrainingHistory:
        """The sampled steps in the ring and the totals over every sampled step."""
        with self._lock:
            order = self._order()
            steps = tuple(int(s) for s in self._ring_steps[order])
            ring = self._ring[order]
            totals = self._totals.finish()
            samples, steps_run = self._samples, self._step
        modules: dict[str, ModuleHistory] = {}
        for row, path in enumerate(self.module_paths):
            values = ring[:, row, :]
            modules[path] = ModuleHistory(
                grad_norm=tuple(float(v) for v in values[:, _GRAD_NORM]),
                output=tuple(_summary(v) for v in values),
                grad_norm_total=totals[path].grad_norm,
                output_total=totals[path].output,
            )
        return TrainingHistory(steps, types.MappingProxyType(modules), steps_run, samples)

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Callable[[TrainingMonitor], None]) -> Callable[[], None]:
        """Call ``listener(monitor)`` after each sampled or non-finite step; returns its remover.

        A listener runs on the training thread, so it should be quick; an exception it
        raises becomes a warning, never a failed step.
        """
        check_callable(listener, "takes the monitor")
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(self)
            except Exception as error:  # a view must never fail the training step
                warnings.warn(f"training monitor listener failed: {error!r}", stacklevel=3)


def _summary(values: np.ndarray[Any, np.dtype[np.float64]]) -> TensorSummary:
    fields: dict[str, Any] = {}
    for name, value in zip(_SUMMARY_FIELDS, values[:_GRAD_NORM], strict=True):
        fields[name] = (
            int(value)
            if name in ("count", "nan_count", "posinf_count", "neginf_count")
            else float(value)
        )
    return TensorSummary(**fields)


_LOW_PRECISION = (torch.float16, torch.bfloat16)
_COMPILED_FINITE = (
    " (the step ran compiled code and was replayed eagerly: the compiled code's own"
    " numerics, or random numbers it drew itself, made the NaN or Inf, so no module can be"
    " named; torch._inductor.config.fallback_random=True makes inductor draw as eager does)"
)


def _grouped_norms(
    grads: Sequence[torch.Tensor | None],
) -> list[tuple[list[int], torch.Tensor]]:
    """Per (device, dtype): the indices of its gradients and their L2 norms, one fused call.

    Norms of float16 and bfloat16 gradients are taken in float32: a norm overflows long
    before its elements do.
    """
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[int], list[torch.Tensor]]] = {}
    for index, grad in enumerate(grads):
        if grad is not None:
            grad = _dense_values(grad)  # nn.Embedding(sparse=True): its summed values
            indices, tensors = groups.setdefault((grad.device, grad.dtype), ([], []))
            indices.append(index)
            tensors.append(grad)
    found = []
    for (_, dtype), (indices, tensors) in groups.items():
        if dtype in _LOW_PRECISION:
            norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
        else:
            norms = torch._foreach_norm(tensors)
        found.append((indices, torch.stack(norms)))
    return found


def _dense_values(grad: torch.Tensor) -> torch.Tensor:
    """A gradient's stored values (a sparse gradient's coalesced values)."""
    return grad.coalesce().values() if grad.is_sparse else grad


def _all_finite(grads: Sequence[torch.Tensor | None]) -> bool:
    """Whether every gradient is finite (see :func:`_finite_norm`)."""
    return _finite_norm(grads)[0]


def _finite_norm(grads: Sequence[torch.Tensor | None]) -> tuple[bool, float]:
    """Whether every gradient is finite, and the global L2 norm.

    One fused norm per device and dtype, one read each; only when their squares are not
    finite is each gradient checked on its own (finite values near 1e19 overflow a float32
    norm, whose global norm is then reported as inf).
    """
    squares = 0.0
    for _, norms in _grouped_norms(grads):
        squares += norms.double().square().sum().item()
    if math.isfinite(squares):
        return True, math.sqrt(squares)
    finite = all(bool(torch.isfinite(_dense_values(g)).all()) for g in grads if g is not None)
    return finite, math.inf if finite else math.nan


def _parameter_norms(grads: Sequence[torch.Tensor | None]) -> list[float]:
    """L2 norm of each gradient (0 for None), one host transfer per device and dtype."""
    norms = [0.0] * len(grads)
    for indices, values in _grouped_norms(grads):
        for i, value in zip(indices, values.tolist(), strict=True):
            norms[i] = value
    return norms
