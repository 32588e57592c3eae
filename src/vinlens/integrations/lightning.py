"""A :class:`~vinlens.health.TrainingMonitor` inside a Lightning 2 ``Trainer``.

``pip install 'vinlens[lightning]'``; the ``lightning`` package is used when installed, else
``pytorch_lightning``::

    from vinlens.integrations.lightning import TrainingMonitorCallback

    callback = TrainingMonitorCallback(every=100)          # TrainingMonitor's arguments
    trainer = lightning.pytorch.Trainer(callbacks=[callback])
    trainer.fit(module, loader)                            # NonFiniteGradientError on a NaN step
    callback.monitor.events

One monitor step is one optimizer step (``accumulate_grad_batches`` batches). The step
begins at the first batch's ``on_train_batch_start`` (before its ``training_step``) and is
checked in ``on_before_optimizer_step``, which Lightning calls inside the optimizer
closure after the backward (and after a ``GradScaler``'s unscale) and before gradient
clipping and ``optimizer.step``. A non-finite step is replayed through the trainer's own
``strategy.training_step`` on the same batches (its precision context, the module's
``backward``, the loss divided by ``accumulate_grad_batches`` and scaled by the precision
plugin's ``GradScaler`` as Lightning does), with ``self.log`` silenced so that nothing is
logged twice; with ``on_nonfinite="raise"`` the error leaves ``trainer.fit`` before the
optimizer step, so the weights are still finite.

Manual optimization (``automatic_optimization = False``) is refused at ``on_fit_start``:
its ``training_step`` steps the optimizers itself, so replaying it would step the weights
again. Drive the monitor from that ``training_step`` instead (``monitor.run_step``, or
``begin_step``/``end_step`` around ``manual_backward``).
"""

from __future__ import annotations

import contextlib
import importlib
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from vinlens.health import TrainingMonitor
from vinlens.integrations._common import (
    check_monitor_kwargs,
    loss_of,
    missing_extra,
    not_found,
    unbuilt,
    with_scaler,
)

__all__ = ["TrainingMonitorCallback"]


def _framework() -> types.ModuleType:
    """``lightning.pytorch``, else ``pytorch_lightning``; ImportError naming the extra."""
    try:
        return _checked(importlib.import_module("lightning.pytorch"))
    except ModuleNotFoundError as error:
        if not not_found(error, "lightning", "lightning.pytorch"):
            raise  # Lightning is there, one of its own dependencies is not
    try:
        return _checked(importlib.import_module("pytorch_lightning"))
    except ModuleNotFoundError as error:
        if not not_found(error, "pytorch_lightning"):
            raise
        raise missing_extra(
            __name__, "Lightning 2 (lightning or pytorch_lightning)", "lightning", error
        ) from error


def _checked(framework: types.ModuleType) -> types.ModuleType:
    major = str(getattr(framework, "__version__", "0")).split(".")[0]
    if not major.isdigit() or int(major) < 2:
        raise ImportError(
            f"{__name__} needs Lightning 2, found {framework.__name__} "
            f"{getattr(framework, '__version__', '(unknown version)')}; "
            "install the extra: pip install 'vinlens[lightning]'"
        )
    return framework


_pl = _framework()
_in_signature: Callable[..., bool] = importlib.import_module(
    f"{_pl.__name__}.utilities.signature_utils"
).is_param_in_hook_signature

if TYPE_CHECKING:
    from lightning.pytorch import Callback, LightningModule, Trainer
else:
    Callback, LightningModule, Trainer = _pl.Callback, _pl.LightningModule, _pl.Trainer

_NAME = "vinlens.integrations.lightning.TrainingMonitorCallback"


class TrainingMonitorCallback(Callback):
    """Check every optimizer step of ``Trainer.fit`` with a :class:`TrainingMonitor`.

    Args:
        **monitor_kwargs: :class:`TrainingMonitor`'s arguments other than the model
            (``every``, ``module_paths``, ``on_nonfinite``, ``log_dir``, ...); the
            monitor is built on the ``LightningModule`` at ``on_fit_start``.

    Attributes:
        monitor_kwargs: The arguments the monitor is built with.

    Raises:
        TypeError: ``model=`` or an argument :class:`TrainingMonitor` does not take.
    """

    def __init__(self, **monitor_kwargs: Any) -> None:
        super().__init__()
        self.monitor_kwargs = check_monitor_kwargs(_NAME, monitor_kwargs)
        self._monitor: TrainingMonitor | None = None
        self._module: LightningModule | None = None
        self._batches: list[tuple[Any, int]] = []  # the open step's (batch, batch_idx)
        self._loss: Any = None

    @property
    def monitor(self) -> TrainingMonitor:
        """The :class:`TrainingMonitor` (built at ``on_fit_start``; RuntimeError before)."""
        if self._monitor is None:
            raise unbuilt(_NAME, "on_fit_start")
        return self._monitor

    # ------------------------------------------------------------------ Lightning hooks

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not pl_module.automatic_optimization:
            raise ValueError(
                f"{_NAME} supports automatic optimization only: {type(pl_module).__name__} "
                "sets automatic_optimization = False, so its training_step steps the "
                "optimizers itself and cannot be replayed without stepping the weights "
                "again; call monitor.run_step (or begin_step/end_step around "
                "manual_backward) inside that training_step instead (docs/health.md, "
                "Framework adapters)"
            )
        if self._monitor is None or self._module is not pl_module:
            kwargs = with_scaler(self.monitor_kwargs, trainer.precision_plugin)
            self._monitor = TrainingMonitor(pl_module, **kwargs)
            self._module = pl_module
        self._abandon()

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        monitor = self.monitor
        if not self._batches:  # the first batch of an optimizer step
            monitor.begin_step()
        self._batches.append((batch, batch_idx))

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Any) -> None:
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        loss = loss.detach() * trainer.accumulate_grad_batches  # the step's own loss
        self._loss = loss if scaler is None else loss / scaler.get_scale()

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Any
    ) -> None:
        if not self._batches:  # no step of ours is open (the batch start was not seen)
            return
        batches, loss = self._batches, self._loss
        self._batches, self._loss = [], None

        def replay() -> None:
            self._replay(trainer, pl_module, batches)

        self.monitor.end_step(loss, replay=replay)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # A full accumulation window without an optimizer step (a skipped step): nothing to
        # check; the next batch begins a new step.
        if len(self._batches) >= trainer.accumulate_grad_batches:
            self._abandon()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._abandon()

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._abandon()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._abandon()

    # ------------------------------------------------------------------ the step

    def _abandon(self) -> None:
        """End the open step without a check (its optimizer step never came); no hooks stay."""
        self._batches, self._loss = [], None
        if self._monitor is not None:
            self._monitor.abort_step()

    def _replay(
        self, trainer: Trainer, module: LightningModule, batches: list[tuple[Any, int]]
    ) -> None:
        """The step again, as Lightning's automatic optimization runs it, on the same batches."""
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        module.zero_grad(set_to_none=True)
        with _silenced(module):
            for batch, batch_idx in batches:
                args = [batch]
                if _in_signature(module.training_step, "batch_idx", min_args=2):
                    args.append(batch_idx)
                loss = loss_of(trainer.strategy.training_step(*args))
                if loss is None:  # training_step skipped this batch (returned None)
                    continue
                loss = loss / trainer.accumulate_grad_batches
                module.backward(loss if scaler is None else scaler.scale(loss))


@contextlib.contextmanager
def _silenced(module: LightningModule) -> Iterator[None]:
    """``module.log`` and ``module.log_dict`` do nothing (the replay logs nothing twice)."""

    def ignore(*args: Any, **kwargs: Any) -> None:
        return None

    module.__dict__["log"] = ignore
    module.__dict__["log_dict"] = ignore
    try:
        yield
    finally:
        module.__dict__.pop("log", None)
        module.__dict__.pop("log_dict", None)
