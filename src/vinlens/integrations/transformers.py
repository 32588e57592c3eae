"""A :class:`~vinlens.health.TrainingMonitor` inside a Hugging Face ``Trainer``.

``pip install 'vinlens[transformers]'`` (transformers and accelerate)::

    from vinlens.integrations.transformers import TrainingMonitorCallback

    callback = TrainingMonitorCallback(every=100)          # TrainingMonitor's arguments
    trainer = transformers.Trainer(model, args, train_dataset=data, callbacks=[callback])
    trainer.train()                                        # NonFiniteGradientError on a NaN step
    callback.monitor.events

One monitor step is one optimizer step (``gradient_accumulation_steps`` micro-batches): it
begins at ``on_step_begin`` (before the first micro-batch's ``training_step``) and is
checked in ``on_pre_optimizer_step``, after the backward and the Trainer's gradient
clipping and before ``optimizer.step()``. A non-finite step is replayed through the
trainer's own ``training_step`` on the same micro-batches (its ``compute_loss``, the loss
scaling for accumulation and ``accelerator.backward``, a ``GradScaler`` included); with
``on_nonfinite="raise"`` the error leaves ``trainer.train()`` before the optimizer step, so
the weights are still finite.

The Trainer hands its callbacks neither itself nor the batch, so at ``on_train_begin`` the
callback finds the ``Trainer`` that called it on the call stack and wraps that trainer's
``training_step`` (an instance attribute, removed at ``on_train_end``) to keep the open
step's micro-batches for the replay; nothing else of the trainer changes.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vinlens.health import TrainingMonitor
from vinlens.integrations._common import (
    check_monitor_kwargs,
    missing_extra,
    not_found,
    unbuilt,
    with_scaler,
)

__all__ = ["TrainingMonitorCallback"]


def _framework() -> types.ModuleType:
    try:
        return importlib.import_module("transformers")
    except ModuleNotFoundError as error:
        if not not_found(error, "transformers"):
            raise
        raise missing_extra(__name__, "Hugging Face transformers", "transformers", error) from error


_hf = _framework()

if TYPE_CHECKING:
    from transformers import TrainerCallback
else:
    TrainerCallback = _hf.TrainerCallback

_NAME = "vinlens.integrations.transformers.TrainingMonitorCallback"
_MicroBatch = tuple[Any, Any, Any]  # (model, inputs, num_items_in_batch) of training_step


class TrainingMonitorCallback(TrainerCallback):
    """Check every optimizer step of ``Trainer.train`` with a :class:`TrainingMonitor`.

    Args:
        **monitor_kwargs: :class:`TrainingMonitor`'s arguments other than the model
            (``every``, ``module_paths``, ``on_nonfinite``, ``log_dir``, ...); the
            monitor is built on the trainer's model at ``on_train_begin``.

    Attributes:
        monitor_kwargs: The arguments the monitor is built with.

    Raises:
        TypeError: ``model=`` or an argument :class:`TrainingMonitor` does not take.
    """

    def __init__(self, **monitor_kwargs: Any) -> None:
        super().__init__()
        self.monitor_kwargs = check_monitor_kwargs(_NAME, monitor_kwargs)
        self._monitor: TrainingMonitor | None = None
        self._model: Any = None
        self._trainer: Any = None
        self._batches: list[_MicroBatch] | None = None  # the open step's; None: no step open
        self._losses: list[Any] = []

    @property
    def monitor(self) -> TrainingMonitor:
        """The :class:`TrainingMonitor` (built at ``on_train_begin``; RuntimeError before)."""
        if self._monitor is None:
            raise unbuilt(_NAME, "on_train_begin")
        return self._monitor

    # ------------------------------------------------------------------ Trainer events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if model is None:
            raise RuntimeError(f"{_NAME}: the Trainer passed no model to on_train_begin")
        trainer = _calling_trainer()
        if self._monitor is None or self._model is not model:
            kwargs = with_scaler(self.monitor_kwargs, getattr(trainer, "accelerator", None))
            self._monitor = TrainingMonitor(model, **kwargs)
            self._model = model
        self._abandon()
        self._unwrap()
        self._trainer = trainer
        original = trainer.training_step

        def training_step(model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            try:
                loss = original(model, inputs, num_items_in_batch)
            except BaseException:
                self._abandon()  # the Trainer has no exception event: remove the hooks here
                raise
            if self._batches is not None:
                self._batches.append((model, inputs, num_items_in_batch))
                self._losses.append(loss)
            return loss

        training_step.__wrapped__ = original  # type: ignore[attr-defined]
        trainer.__dict__["training_step"] = training_step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._abandon()  # a step whose optimizer step never came
        self.monitor.begin_step()
        self._batches, self._losses = [], []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._batches is None:
            return
        batches, losses = self._batches, self._losses
        self._batches, self._losses = None, []
        trainer = self._trainer
        step: Callable[..., Any] = trainer.__dict__["training_step"].__wrapped__

        def replay() -> None:
            if batches:
                batches[0][0].zero_grad(set_to_none=True)
            for model, inputs, num_items_in_batch in batches:
                step(model, inputs, num_items_in_batch)

        loss = sum(losses) if losses else None  # each already divided for accumulation
        self.monitor.end_step(loss, replay=replay)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._abandon()
        self._unwrap()

    # ------------------------------------------------------------------ the step

    def _abandon(self) -> None:
        self._batches, self._losses = None, []
        if self._monitor is not None:
            self._monitor.abort_step()

    def _unwrap(self) -> None:
        if self._trainer is not None:
            self._trainer.__dict__.pop("training_step", None)
            self._trainer = None


def _calling_trainer() -> Any:
    """The ``transformers.Trainer`` whose loop called this callback (found on the stack)."""
    trainer_type = _hf.Trainer
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, trainer_type):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    raise RuntimeError(
        f"{_NAME} runs inside transformers.Trainer.train (callbacks=[...]); no Trainer "
        "called this on_train_begin, so its training step cannot be replayed"
    )
