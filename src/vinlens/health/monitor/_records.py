"""The records of :class:`~vinlens.health.monitor.TrainingMonitor` (its events, history and
totals), apart from the monitor so that the loop reads on its own."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np

from vinlens.errors import VinlensError
from vinlens.health.gradient import GradientOrigin
from vinlens.health.stats import ActivationAccumulator
from vinlens.model_inspection import SummaryAccumulator, TensorSummary


@dataclass(frozen=True)
class RunMeta:
    """What a run log records of the monitor that writes it: its first record."""

    module_paths: tuple[str, ...]
    every: int
    rank: int
    fields: tuple[str, ...]
    #: The run identity stamped on the log's segments (see runlog/runs.py); None: none.
    run_id: str | None = None


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
    "headroom_bits",
]
#: History fields that are not fields of the output summary (after the grad norm in a row).
EXTRA_FIELDS: tuple[str, ...] = ("headroom_bits",)
#: The output summary's fields, in the order of a history row (its grad norm, then the
#: :data:`EXTRA_FIELDS`, last).
SUMMARY_FIELDS: tuple[str, ...] = tuple(
    f for f in get_args(HistoryField)[1:] if f not in EXTRA_FIELDS
)
GRAD_NORM = len(SUMMARY_FIELDS)
#: Column of the sampled step's precision headroom (bits, for its low-precision dtype).
HEADROOM = GRAD_NORM + 1
#: Columns of one module's history row.
ROW_WIDTH = HEADROOM + 1
#: The fields of a history row, in order (the run log's ``fields``).
ROW_FIELDS: tuple[str, ...] = (*SUMMARY_FIELDS, "grad_norm", *EXTRA_FIELDS)
COLUMNS: dict[str, int] = {name: i for i, name in enumerate(ROW_FIELDS)}


COMPILED_FINITE = (
    " (the step ran compiled code and was replayed eagerly: the compiled code's own"
    " numerics, or random numbers it drew itself, made the NaN or Inf, so no module can be"
    " named; torch._inductor.config.fallback_random=True makes inductor draw as eager does)"
)


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
            every rank of a ``ranks="all"`` monitor (see :mod:`vinlens.health.monitor._distributed`);
            this rank's alone, or (), otherwise.
        replayed: False when the step was not replayed (:meth:`TrainingMonitor.end_step`
            got no ``replay``), so ``origin`` is None without a search.
        replayed_eagerly: The model runs ``torch.compile``'d code and the step was replayed
            eagerly (compiled code cannot be watched module by module): ``origin`` is the
            eager replay's. None there means the compiled step's NaN or Inf did not recur
            eagerly (made by the compiled code's own numerics, or by random numbers it drew
            itself), and a ``RuntimeWarning`` says so.
        skipped_by_scaler: The monitor's ``scaler`` (a ``torch.amp.GradScaler``) skips this
            step's optimizer step (its gradients overflowed at the loss scale): expected,
            never raised for, unless the scaler's limits (``min_scale``,
            ``max_skipped_streak``) were passed. Kept for the first skipped step of each
            streak (its origin named) and for the step that passed a limit.
        loss_scale: The scaler's loss scale this step's gradients were scaled by (None
            without a ``scaler``).
    """

    step: int
    origin: GradientOrigin | None
    rank: int = 0
    made_on_ranks: tuple[int, ...] = ()
    replayed: bool = True
    replayed_eagerly: bool = False
    skipped_by_scaler: bool = False
    loss_scale: float | None = None


class NonFiniteGradientError(VinlensError, RuntimeError):
    """Raised by :meth:`TrainingMonitor.run_step` for a non-finite step (``on_nonfinite="raise"``).

    Attributes:
        event: The recorded :class:`NonFiniteEvent`.
        reason: Why a step the ``scaler`` skips was raised for (the loss scale fell below
            ``min_scale``, or a streak of skipped steps passed ``max_skipped_streak``);
            None for any other non-finite step.
    """

    def __init__(self, event: NonFiniteEvent, *, reason: str | None = None) -> None:
        origin = event.origin
        where = (
            "not replayed (end_step got no replay function), origin unknown"
            if not event.replayed
            else "the replay stayed finite" + (COMPILED_FINITE if event.replayed_eagerly else "")
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
        why = "" if reason is None else f" ({reason})"
        super().__init__(f"step {event.step}: non-finite parameter gradients{why}, {where}")
        self.event = event
        self.reason = reason


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
        headroom_bits: Precision headroom of the module's outputs, one float per sampled
            step: ``log2(finfo(dtype).max / abs_max)`` for the step's low-precision dtype
            (the autocast dtype, else a float16/bfloat16 output's own), as
            :func:`~vinlens.health.precision_headroom` computes it (-inf when an output held
            an infinity); NaN when the step had no such dtype or the module did not run.
    """

    grad_norm: tuple[float, ...]
    output: tuple[TensorSummary, ...]
    grad_norm_total: TensorSummary
    output_total: TensorSummary
    headroom_bits: tuple[float, ...] = ()


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
        field: ``"grad_norm"``, ``"headroom_bits"`` or a :class:`TensorSummary` field of the
            outputs.
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


@dataclass
class MonitoredStep:
    """The step of a :meth:`TrainingMonitor.monitored_step` block.

    Attributes:
        step: Its step number.
        result: Set it to the step's loss for the run log.
        event: After the block, what :meth:`TrainingMonitor.end_step` returned.
    """

    step: int
    result: object = None
    event: NonFiniteEvent | None = None


def summary_of_row(values: np.ndarray[Any, np.dtype[np.float64]]) -> TensorSummary:
    fields: dict[str, Any] = {}
    for name, value in zip(SUMMARY_FIELDS, values[:GRAD_NORM], strict=True):
        fields[name] = (
            int(value)
            if name in ("count", "nan_count", "posinf_count", "neginf_count")
            else float(value)
        )
    return TensorSummary(**fields)


class StepSeries(NamedTuple):
    """The every-step series of one rank: ``steps`` (int64), ``grad_norm`` (float64, the
    global L2 norm of the parameters' gradients), ``loss`` (float64, NaN where ``step_fn``
    returned no scalar)."""

    steps: np.ndarray[Any, np.dtype[np.int64]]
    grad_norm: np.ndarray[Any, np.dtype[np.float64]]
    loss: np.ndarray[Any, np.dtype[np.float64]]
