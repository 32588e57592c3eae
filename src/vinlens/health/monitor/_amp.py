"""Mixed precision in :class:`~vinlens.health.monitor.TrainingMonitor`: the GradScaler's
loss scale, its skipped steps and their limits (:class:`ScalerWatch`), and the precision
headroom of a sampled step's outputs (:class:`LowPrecision`)."""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vinlens.health.summaries import floating_tensors
from vinlens.model_inspection import TensorSummary

LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class LossScales:
    """The GradScaler's loss scale at every ended step (:attr:`TrainingMonitor.loss_scales`).

    Attributes:
        steps: Step numbers (int64), ascending; a step abandoned by ``abort_step`` has none.
        scales: The scale each step's gradients were scaled by (float64, same length).
    """

    steps: np.ndarray[Any, np.dtype[np.int64]]
    scales: np.ndarray[Any, np.dtype[np.float64]]


def _optimizers(optimizers: object) -> list[torch.optim.Optimizer]:
    if optimizers is None:
        return []
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    if isinstance(optimizers, Sequence) and not isinstance(optimizers, str):
        found = list(optimizers)
        if all(isinstance(o, torch.optim.Optimizer) for o in found):
            return found
    raise TypeError(
        "optimizers must be a torch.optim.Optimizer or a sequence of them (those stepping "
        f"the model's parameters through the scaler), got {optimizers!r}"
    )


class ScalerWatch:
    """What the monitor knows of its ``torch.amp.GradScaler``.

    A step whose gradients are not finite is one the scaler skips (``scaler.step`` finds
    the infinities when it unscales and does not step the optimizer; ``scaler.update``
    then multiplies the scale by its backoff factor). The monitor expects such steps: it
    records them and raises only past ``min_scale`` or ``max_skipped_streak``.
    """

    def __init__(
        self,
        scaler: object,
        optimizers: object,
        min_scale: object,
        max_skipped_streak: object,
    ) -> None:
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                f"scaler must be a torch.amp.GradScaler (the one scaling this model's loss), "
                f"got {scaler!r}"
            )
        if (
            isinstance(min_scale, bool)
            or not isinstance(min_scale, int | float)
            or not math.isfinite(min_scale)
            or min_scale < 0
        ):
            raise ValueError(
                f"min_scale must be a finite number >= 0 (the lowest loss scale the run may "
                f"fall to), got {min_scale!r}"
            )
        if (
            isinstance(max_skipped_streak, bool)
            or not isinstance(max_skipped_streak, int)
            or max_skipped_streak < 1
        ):
            raise ValueError(
                "max_skipped_streak must be a positive integer (skipped steps in a row "
                f"before the monitor raises), got {max_skipped_streak!r}"
            )
        self.scaler = scaler
        self.min_scale = float(min_scale)
        self.max_skipped_streak = max_skipped_streak
        self._optimizers = _optimizers(optimizers)
        self._skipped: list[int] = []
        self._streak = 0
        self._limit_reported = False
        self._runs: list[list[float]] = []  # [first step, last step, scale]
        self.scale = math.nan

    @property
    def enabled(self) -> bool:
        return bool(self.scaler.is_enabled())

    @property
    def skipped_steps(self) -> tuple[int, ...]:
        return tuple(self._skipped)

    @property
    def streak(self) -> int:
        return self._streak

    def loss_scales(self) -> LossScales:
        runs = list(self._runs)
        if not runs:
            return LossScales(np.empty(0, np.int64), np.empty(0, np.float64))
        steps = np.concatenate([np.arange(int(a), int(b) + 1, dtype=np.int64) for a, b, _ in runs])
        lengths = [int(b) - int(a) + 1 for a, b, _ in runs]
        scales = np.repeat(np.array([s for _, _, s in runs], dtype=np.float64), lengths)
        return LossScales(steps, scales)

    def read(self, step: int) -> float:
        """The scale of ``step`` (read before the caller's ``scaler.step``/``update``)."""
        scale = float(self.scaler.get_scale())
        self.scale = scale
        last = self._runs[-1] if self._runs else None
        if last is not None and last[1] == step - 1 and last[2] == scale:
            last[1] = step
        else:
            self._runs.append([step, step, scale])
        return scale

    def divisors(self, parameters: Sequence[nn.Parameter]) -> float | list[float]:
        """What each gradient is divided by to unscale it: one number for all, or one per
        parameter (the optimizers passed and only some unscaled with ``scaler.unscale_``)."""
        scale = self.scale
        states = self.scaler._per_optimizer_states  # id(optimizer) -> {"stage": ...}
        unscaled = {
            key
            for key, state in list(states.items())
            if state.get("stage") is torch.amp.grad_scaler.OptState.UNSCALED
        }
        if not unscaled:
            return scale
        if not self._optimizers:  # one optimizer, the common case: unscale_ unscaled it all
            return 1.0
        done = {  # the parameters of the optimizers unscaled this step
            id(p)
            for optimizer in self._optimizers
            if id(optimizer) in unscaled
            for group in optimizer.param_groups
            for p in group["params"]
        }
        per = [1.0 if id(p) in done else scale for p in parameters]
        if all(d == per[0] for d in per):
            return per[0] if per else scale
        return per

    def finite(self) -> None:
        """A step the scaler steps: the streak ends."""
        self._streak = 0
        self._limit_reported = False

    def skip(self, step: int) -> tuple[bool, str | None]:
        """A step the scaler skips: (first of its streak, the limit it passed or None)."""
        self._skipped.append(step)
        self._streak += 1
        reason = None
        if not self._limit_reported:
            after = self.scale * float(self.scaler.get_backoff_factor())
            if self._streak > self.max_skipped_streak:
                reason = (
                    f"the GradScaler skipped {self._streak} steps in a row, more than "
                    f"max_skipped_streak={self.max_skipped_streak}: lowering the loss scale "
                    f"(now {self.scale:g}) does not make the gradients finite"
                )
            elif after < self.min_scale:
                reason = (
                    f"the GradScaler's loss scale falls from {self.scale:g} to {after:g} "
                    f"after this skipped step, below min_scale={self.min_scale:g}"
                )
            self._limit_reported = reason is not None
        return self._streak == 1, reason

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Run a replay with fresh per-optimizer states, so that a ``scaler.unscale_`` in
        the step function does not meet the step's own (unscale_ once per update)."""
        scaler: Any = self.scaler
        saved = scaler._per_optimizer_states
        scaler._per_optimizer_states = defaultdict(saved.default_factory)
        try:
            yield
        finally:
            scaler._per_optimizer_states = saved


def unscaled_norms(norms: Sequence[float], divisors: float | Sequence[float]) -> list[float]:
    if isinstance(divisors, float | int):
        return [n / divisors for n in norms]
    return [n / d for n, d in zip(norms, divisors, strict=True)]


class LowPrecision:
    """The low-precision dtype of a sampled step: the autocast dtype of its forward, or
    the dtype of a float16/bfloat16 output when no autocast runs."""

    def __init__(self) -> None:
        self.dtype: torch.dtype | None = None

    def note(self, output: Any) -> None:
        if self.dtype is not None:
            return
        for _, tensor in floating_tensors(output, "output"):
            device = tensor.device.type
            if torch.is_autocast_enabled(device):
                self.dtype = torch.get_autocast_dtype(device)
            elif tensor.dtype in LOW_PRECISION:
                self.dtype = tensor.dtype
            return


def headroom_bits(summary: TensorSummary, dtype: torch.dtype | None) -> float:
    """``log2(finfo(dtype).max / abs_max)`` of a module's outputs, as
    :func:`~vinlens.health.precision_headroom` computes it for the lowest of its calls."""
    if dtype is None or summary.count == 0:
        return math.nan
    if summary.posinf_count or summary.neginf_count:
        return -math.inf
    if math.isnan(summary.abs_max):
        return math.nan
    if summary.abs_max == 0:
        return math.inf
    return math.log2(float(torch.finfo(dtype).max)) - math.log2(summary.abs_max)
