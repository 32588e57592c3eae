"""Health of a training loop at almost no cost: :class:`TrainingMonitor` (one fused gradient
norm per step, a non-finite step replayed to its origin, one step in ``every`` sampled into
a bounded history; its parts are the private modules beside this one).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import torch
from torch import nn

from vinlens.health.monitor._amp import (
    LossScales,
    LowPrecision,
    ScalerWatch,
    headroom_bits,
)
from vinlens.health.monitor._budget import Budget
from vinlens.health.monitor._distributed import RankSync
from vinlens.health.monitor._fingerprint import StepPrints
from vinlens.health.monitor._history import Listeners, SampleHistory
from vinlens.health.monitor._records import (
    COMPILED_FINITE,
    GRAD_NORM,
    HEADROOM,
    ROW_FIELDS,
    ROW_WIDTH,
    SUMMARY_FIELDS,
    HistoryField,
    HistoryMatrix,
    MonitoredStep,
    NonFiniteEvent,
    NonFiniteGradientError,
    RunMeta,
    StepSeries,
    TrainingHistory,
)
from vinlens.health.monitor._steps import (
    ModelTree,
    OpenStep,
    StepSlot,
    arm_sample,
    checked_norm,
    checked_norms,
    owner_rows,
    replay_step,
    rng_states,
)
from vinlens.health.stats import ActivationAccumulator
from vinlens.health.summaries import check_callable, check_model, labelled_modules
from vinlens.model_inspection import SummaryAccumulator
from vinlens.wrappers import (
    compiled_paths,
    unwrap_model,
)

if TYPE_CHECKING:
    from vinlens.health.monitor.runlog.writer import RunLogWriter

__all__ = ["EVENTS_KEPT", "TrainingMonitor"]

#: Non-finite events a monitor keeps in full (:attr:`TrainingMonitor.events`, ~2.5 KB
#: each). Past them a step is counted (:attr:`TrainingMonitor.nonfinite_count`,
#: :attr:`TrainingMonitor.last_nonfinite_step`), and with ``on_nonfinite="record"`` not
#: replayed: a NaN flood (weights already NaN) costs neither memory nor a replay per step.
EVENTS_KEPT = 100

_Result = TypeVar("_Result")


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
            the monitor appends its run log to (see :mod:`vinlens.health.monitor.runlog`); read
            it with :func:`vinlens.health.open_run`. None keeps everything in memory.
        storage_options: fsspec options for a ``log_dir`` URL.
        resume: With ``log_dir``: continue the latest run there (a restarted script: its
            steps are numbered on from the last one logged) instead of starting a new run.
        replay_max_bytes: Bound of one replay bundle (written with ``log_dir`` for each
            non-finite step, the first 16 of a run; 256 MiB by default); past it the
            bundle keeps the inputs and the output gradient, not the model's state.
        ranks: Under ``torch.distributed``: ``"all"`` (every rank monitors and the ranks
            agree on each step's verdict, one tiny all-reduce per step), ``"local"`` (this
            rank alone, no collective), or None: ``"all"`` for a DDP or FSDP2 model, else
            ``"local"``. See :mod:`vinlens.health.monitor._distributed`.
        scaler: The ``torch.amp.GradScaler`` scaling the loss, or None. A step whose
            gradients overflow is then one the scaler skips: expected, recorded in
            :attr:`skipped_steps` (the first of each streak also in :attr:`events`, its
            origin named, ``skipped_by_scaler=True``), never raised for unless a limit
            below is passed. The history's gradient norms are unscaled, and
            :attr:`loss_scales` holds every step's scale.
        optimizers: The optimizers the scaler steps (an optimizer or a sequence), needed
            only when several optimizers step the model and the loop calls
            ``scaler.unscale_`` on some of them before :meth:`end_step`; without them an
            ``unscale_`` this step counts for every gradient.
        min_scale: With a ``scaler``: raise (``on_nonfinite="raise"``) at the skipped step
            whose backoff takes the loss scale below ``min_scale``.
        max_skipped_streak: With a ``scaler``: raise at a skipped step past this many in a
            row (the scale keeps falling and the gradients stay non-finite).
        budget: None samples one step in ``every``. A fraction (0.02: 2%) makes the
            monitor time its own work against the loop's and sample a step only when that
            keeps its share within ``budget`` (``every`` is then the shortest interval);
            :attr:`overhead` reports the share (docs/health.md, "An overhead budget").

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: ``every`` is not a positive integer, unknown ``module_paths``, an
            ``on_nonfinite`` other than ``"raise"`` and ``"record"``, or ``resume`` onto
            a run that watched other module paths.
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
        resume: bool = False,
        replay_max_bytes: int = 256 << 20,
        ranks: Literal["all", "local"] | None = None,
        scaler: torch.amp.GradScaler | None = None,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        min_scale: float = 1.0,
        max_skipped_streak: int = 10,
        budget: float | None = None,
    ) -> None:
        check_model(model)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(
                f"every must be a positive integer (sample one step in every), got {every!r}"
            )
        if on_nonfinite not in ("raise", "record"):
            raise ValueError(f"on_nonfinite must be 'raise' or 'record', got {on_nonfinite!r}")
        self.model = model
        # Paths are the wrapped module's, behind DDP and torch.compile (vinlens.wrappers).
        self._module = model
        self.every = every
        self.on_nonfinite: Literal["raise", "record"] = on_nonfinite
        self._targets = labelled_modules(self._module, module_paths)
        self.module_paths: tuple[str, ...] = tuple(path for path, _ in self._targets)
        self._rows = frozenset(self.module_paths)
        # Every parameter, frozen ones included, re-read at each step (see _watched): a
        # parameter unfrozen, replaced or added after construction is checked too.
        self._tree = ModelTree(self._module)
        self._parameters = self._tree.parameters
        self._owner_rows = owner_rows(self._module, self.module_paths)
        self._lock = threading.Lock()
        # The step in progress, released by close(), __exit__ or, for a monitor dropped
        # with a step open, the finalizer: its taps and eager stance never outlive it.
        self._slot = StepSlot()
        weakref.finalize(self, self._slot.release)
        self._events: list[NonFiniteEvent] = []
        self._nonfinite_count = 0
        self._last_nonfinite_step: int | None = None
        self._step = 0
        self._history = SampleHistory(self.module_paths)
        self._listeners: Listeners[TrainingMonitor] = Listeners()
        self._ranks = RankSync(model, self._parameters, ranks)
        self.rank = self._ranks.rank
        self._log: RunLogWriter | None = None
        self._last_norm = math.nan
        self._amp = (
            None
            if scaler is None
            else ScalerWatch(scaler, optimizers, min_scale, max_skipped_streak)
        )
        self._low = LowPrecision()  # the sampled step's low-precision dtype
        self._budget = Budget(budget, every)
        self.budget: float | None = self._budget.fraction
        if isinstance(replay_max_bytes, bool) or not isinstance(replay_max_bytes, int):
            raise ValueError(f"replay_max_bytes must be an integer, got {replay_max_bytes!r}")
        self.replay_max_bytes = replay_max_bytes
        #: Where the run log goes (None: in memory only), its options and the run's id.
        self.log_dir, self.storage_options = log_dir, storage_options
        self.run_id: str | None = None
        if log_dir is not None:
            from vinlens.health.monitor.runlog.runs import new_run_id
            from vinlens.health.monitor.runlog.writer import open_monitor_log

            meta = RunMeta(tuple(self.module_paths), every, self.rank, ROW_FIELDS, new_run_id())
            self._log = open_monitor_log(meta, log_dir, storage_options, resume=resume)
            self._step = self._log.first_step
            self.run_id = self._log.run_id
        self._prints = StepPrints(model, self._module, self.module_paths, self._log)

    # ------------------------------------------------------------------ the loop

    @property
    def step(self) -> int:
        """The number the next step gets (steps begun so far, by :meth:`run_step` or
        :meth:`begin_step`)."""
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

    @property
    def skipped_steps(self) -> tuple[int, ...]:
        """The steps the ``scaler`` skips (gradients not finite at the loss scale), in order;
        () without a scaler."""
        return () if self._amp is None else self._amp.skipped_steps

    @property
    def loss_scales(self) -> LossScales:
        """The ``scaler``'s loss scale of every ended step (empty without a scaler)."""
        if self._amp is None:
            return LossScales(np.empty(0, np.int64), np.empty(0, np.float64))
        return self._amp.loss_scales()

    @property
    def overhead(self) -> float:
        """The monitor's measured share of the loop's time so far (0.02: 2%): its own work
        (``begin_step``, the sampled steps' hooks, ``end_step`` without replays, the
        listeners) over the time from the first ``begin_step`` to the latest ``end_step``
        (replays excluded); 0.0 before a step ended."""
        return self._budget.overhead

    def run_step(self, step_fn: Callable[[], _Result]) -> _Result:
        """Run one training step and check its gradients; returns what ``step_fn`` returned.

        The same as ``begin_step()``, ``result = step_fn()``,
        ``end_step(result, replay=step_fn)``, with :meth:`abort_step` when ``step_fn``
        raises. A sampled step records only module calls on the thread running
        ``run_step`` (forwards of the same model on an evaluation or serving thread are
        not counted).

        Raises:
            RuntimeError: another step of this monitor is in progress (a second thread,
                or ``step_fn`` calling ``run_step`` again).
            NonFiniteGradientError: the step's gradients held NaN or Inf and
                ``on_nonfinite="raise"``.
            Exception: whatever ``step_fn`` raises (every hook removed first).
        """
        check_callable(step_fn, "runs one training step (zero_grad, forward, backward)")
        step = self.begin_step()
        try:
            result = step_fn()
        except BaseException:
            self._abandon(step)
            raise
        self.end_step(result, replay=step_fn)
        return result

    def begin_step(self) -> int:
        """Begin a step whose work the caller runs itself; returns its step number.

        For loops that cannot hand their step to :meth:`run_step` (Lightning, the Hugging
        Face Trainer: callbacks before the forward and after the backward). Saves the
        random-number state (and, with ``log_dir``, the buffers) the step starts from and,
        on a sampled step, arms the module hooks. Call it before the step's forward; then
        :meth:`end_step` after its backward and before the optimizer step, on the same
        thread, or :meth:`abort_step` when the step failed in between.

        Raises:
            RuntimeError: a step is already in progress. On this thread (``begin_step``
                twice without ``end_step``), that step is abandoned first, its hooks
                removed, so the monitor is free again; a step begun on another thread is
                left running.
        """
        if not self._slot.running.acquire(blocking=False):
            stale = self._slot.open
            if stale is not None and stale.thread == threading.get_ident():
                self._abandon(stale.step)
                raise RuntimeError(
                    f"TrainingMonitor.begin_step: step {stale.step} is still in progress on "
                    "this thread (begin_step twice without end_step, or run_step inside its "
                    "own step); one monitor runs one step at a time, so that step was abandoned "
                    "and its hooks removed: end each step (end_step, or abort_step when it "
                    "failed) before beginning the next"
                )
            raise RuntimeError(
                f"TrainingMonitor.run_step is already running (step {self._step - 1}) on "
                "another thread; one monitor runs one step at a time: run its steps from "
                "one training thread and give other threads their own monitor"
            )
        hooks = None
        release_eager: Callable[[], None] | None = None
        try:
            step = self._step
            self._step += 1
            mark, sample = self._budget.begin(step)  # every, or stretched to the budget
            rng = rng_states()
            start_buffers = None
            if self._log is not None:  # the replay bundle's state is the step's start
                start_buffers = self._log.start_state(self._module)
            outputs: ActivationAccumulator | None = None
            owner = threading.get_ident()
            if sample:
                # The modules at the watched paths now (a layer replaced since is hooked).
                self._targets = [
                    (path, module)
                    for path, module in labelled_modules(self._module, None)
                    if path in self._rows
                ]
                outputs, self._low, hooks, release_eager = arm_sample(
                    self._targets, owner, self._budget
                )
            self._prints.begin(hooks)  # every step's fingerprint, with a run log
            self._slot.open = OpenStep(
                step, owner, rng, start_buffers, outputs, hooks, release_eager
            )
            self._budget.spend_since(mark)
        except BaseException:
            if hooks is not None:
                hooks.remove()
            if release_eager is not None:
                release_eager()
            self._slot.running.release()
            raise
        return step

    def end_step(
        self, result: object = None, *, replay: Callable[[], object] | None = None
    ) -> NonFiniteEvent | None:
        """End the step :meth:`begin_step` began: disarm its hooks and check its gradients.

        Call it after the backward, before the optimizer step. ``result`` is the step's
        loss for the run log (a scalar tensor or a number; anything else is logged as
        NaN). ``replay`` re-runs the step from the start (zero_grad, forward, backward on
        the same batch), taking no arguments: a non-finite step is replayed with it under
        the origin search, from the random state saved by ``begin_step``, then the model's
        buffers and gradients are put back as the step left them. Without ``replay`` a
        non-finite step is recorded with ``origin=None`` and ``replayed=False``.

        Returns:
            The step's :class:`NonFiniteEvent` (with ``on_nonfinite="record"``; past
            :data:`EVENTS_KEPT` one that is only counted, not kept or replayed), or None
            when its gradients are finite.

        Raises:
            RuntimeError: no step in progress, or it was begun on another thread (that
                step is left running).
            NonFiniteGradientError: non-finite gradients and ``on_nonfinite="raise"``.
        """
        step = self._slot.open
        if step is None:
            raise RuntimeError(
                "TrainingMonitor.end_step: no step in progress (call begin_step before the "
                "step's forward, and end_step once after its backward)"
            )
        if step.thread != threading.get_ident():
            raise RuntimeError(
                f"TrainingMonitor.end_step: step {step.step} was begun on another thread; "
                "end a step on the thread that began it"
            )
        mark = self._budget.mark()
        try:
            if step.hooks is not None:
                step.hooks.remove()
            if step.release_eager is not None:
                step.release_eager()
            if replay is not None:
                check_callable(replay, "re-runs the step (zero_grad, forward, backward)")
            return self._finish(step, result, replay)
        finally:
            self._slot.open = None
            self._budget.spend_since(mark, ends_step=True)
            self._slot.running.release()

    def abort_step(self) -> bool:
        """Abandon the step in progress (its step failed): remove its hooks, record nothing.

        Returns whether a step was in progress. The step number stays used.
        """
        return self._slot.release()

    @contextlib.contextmanager
    def monitored_step(
        self, *, replay: Callable[[], object] | None = None
    ) -> Iterator[MonitoredStep]:
        """:meth:`begin_step` and :meth:`end_step` around a ``with`` block.

        ``with monitor.monitored_step(replay=step) as s: s.result = step()``; after the
        block ``s.event`` holds what :meth:`end_step` returned. A block that raises
        abandons the step (:meth:`abort_step`) and the exception propagates.
        """
        handle = MonitoredStep(self.begin_step())
        try:
            yield handle
        except BaseException:
            self._abandon(handle.step)
            raise
        handle.event = self.end_step(handle.result, replay=replay)

    def _abandon(self, number: int) -> bool:
        """Remove the hooks of step ``number`` if it is still in progress and free the monitor."""
        return self._slot.release(number)

    def _finish(
        self, open_step: OpenStep, result: object, replay: Callable[[], object] | None
    ) -> NonFiniteEvent | None:
        step, sampled = open_step.step, open_step.outputs is not None
        amp = self._amp if self._amp is not None and self._amp.enabled else None
        if amp is not None:
            amp.read(step)  # the scale this step's gradients carry
        parameters = self._watched()
        grads = self._ranks.local([p.grad for p in parameters])
        if open_step.outputs is not None:
            finite = self._record_sample(step, open_step.outputs, grads)
        else:
            finite, self._last_norm = checked_norm(self._ranks, self._amp, self._parameters, grads)
        self._history.add_step(step, self._last_norm, result)
        if self._log is not None:
            self._log.check()
            self._log.step(step, self._last_norm, result)  # the loss, read when written
            self._prints.end(step)
        if finite:
            if amp is not None:
                amp.finite()
            if sampled:
                self._notify()
            return None
        with self._lock:
            keep = len(self._events) < EVENTS_KEPT
            self._nonfinite_count += 1
            self._last_nonfinite_step = step
        scaled: dict[str, Any] = {}
        reason = None
        if amp is not None:  # the scaler skips this step: expected
            first, reason = amp.skip(step)
            scaled = {"skipped_by_scaler": True, "loss_scale": amp.scale}
            if not first and reason is None:
                self._notify()  # later in its streak: counted in skipped_steps only
                return NonFiniteEvent(step, None, self.rank, replayed=False, **scaled)
        if not keep and (self.on_nonfinite == "record" or (amp is not None and reason is None)):
            self._notify()  # counted only (see EVENTS_KEPT): neither kept nor replayed
            return NonFiniteEvent(step, None, self.rank, replayed=False, **scaled)
        capture = None
        if self._log is not None:
            capture = self._log.capture(unwrap_model(self._module), open_step.start_buffers)
        origin = None
        if replay is not None:
            replayed = replay if capture is None else capture.wrap(replay)
            started = self._budget.clock()
            try:
                with self._ranks.replaying(), amp.replaying() if amp else contextlib.nullcontext():
                    origin = replay_step(self._module, parameters, replayed, open_step.rng)
            finally:  # neither the loop's time nor avoidable by sampling less
                self._budget.exclude(self._budget.clock() - started)
        made_on = self._ranks.made_on_ranks(origin is not None)
        eagerly = replay is not None and bool(compiled_paths(self._module))
        event = NonFiniteEvent(
            step,
            origin,
            self.rank,
            made_on,
            replayed=replay is not None,
            replayed_eagerly=eagerly,
            **scaled,
        )
        if eagerly and origin is None:
            warnings.warn(
                f"TrainingMonitor: step {step} had non-finite gradients but its replay stayed"
                f" finite{COMPILED_FINITE}",
                RuntimeWarning,
                stacklevel=3,
            )
        if keep:
            with self._lock:
                self._events.append(event)
        if self._log is not None:
            self._log.nonfinite(event, capture, open_step.rng, self.replay_max_bytes)
        self._notify()
        if self.on_nonfinite == "raise" and (amp is None or reason is not None):
            raise NonFiniteGradientError(event, reason=reason)
        return event

    def _watched(self) -> list[nn.Parameter]:
        """The model's parameters at this step; the owner rows follow when they changed."""
        if self._tree.changed():
            self._parameters = self._tree.parameters
            self._ranks.watch(self._parameters)
            self._owner_rows = owner_rows(self._module, self.module_paths)
        return self._parameters

    # ------------------------------------------------------------------ run log

    def close(self) -> None:
        """Abandon a step left open (an exception between :meth:`begin_step` and
        :meth:`end_step`: its hooks removed, its eager stance released), then flush the run
        log and close it. Idempotent.

        Raises:
            RunLogError: the log's destination refused the last records.
        """
        self._slot.release()
        self._prints.close()
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
        finite, norms = checked_norms(self._ranks, self._amp, self._parameters, grads)
        squares = [0.0] * len(self.module_paths)
        has = [False] * len(self.module_paths)
        for norm, row, grad in zip(norms, self._owner_rows, grads, strict=True):
            if row >= 0 and grad is not None:
                squares[row] += norm * norm
                has[row] = True
        module_norms = [math.sqrt(s) if h else math.nan for s, h in zip(squares, has, strict=True)]
        stats = outputs.finish().modules
        empty = SummaryAccumulator().finish()
        block = np.empty((len(self.module_paths), ROW_WIDTH))
        for row, path in enumerate(self.module_paths):
            summary = stats.get(path, empty)
            block[row, :GRAD_NORM] = [getattr(summary, f) for f in SUMMARY_FIELDS]
            block[row, GRAD_NORM] = module_norms[row]
            block[row, HEADROOM] = headroom_bits(summary, self._low.dtype)
        self._history.add_sample(step, block, outputs, module_norms)
        self._prints.sampled(step, tuple(stats))  # the order outputs were produced in
        self._last_norm = math.sqrt(math.fsum(n * n for n in norms))
        if self._log is not None:
            self._log.sample(step, block)
        return finite

    def step_series(self) -> StepSeries:
        """Every step's number, global gradient norm (unscaled) and loss (NaN where the step
        returned no scalar), as the run log holds them."""
        return self._history.step_series()

    def history_matrix(self, field: HistoryField = "grad_norm") -> HistoryMatrix:
        """One statistic of every watched module over the sampled steps in the ring."""
        return self._history.history_matrices((field,))[0]

    def history_matrices(self, fields: Sequence[HistoryField]) -> tuple[HistoryMatrix, ...]:
        """Several statistics from one consistent snapshot of the ring (one per field)."""
        return self._history.history_matrices(fields)

    @property
    def history(self) -> TrainingHistory:
        """The sampled steps in the ring and the totals over every sampled step."""
        return self._history.history(self._step)

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Callable[[TrainingMonitor], None]) -> Callable[[], None]:
        """Call ``listener(monitor)`` after each sampled or non-finite step; returns its remover.

        A listener runs on the training thread, so it should be quick; an exception it
        raises becomes a warning, never a failed step.
        """
        check_callable(listener, "takes the monitor")
        return self._listeners.add(listener)

    def _notify(self) -> None:
        self._listeners.notify(self)
