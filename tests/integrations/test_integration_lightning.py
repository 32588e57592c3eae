"""vinlens.integrations.lightning on a real Lightning 2 Trainer (CPU, no logger/checkpoints).

The environment: Lightning imports torchmetrics, which imports torchvision when it looks
installed, and the dev extras' torchvision 0.28.0 is a CUDA build that cannot load beside
the CPU torch 2.13.0 (PyPI has no CPU build of it). These tests therefore run with
torchvision hidden (``framework_shim.torchvision_hidden``, autouse per module in this
directory's conftest): ``sys.modules["torchvision"] = None`` and no torchvision in
``importlib.metadata``, restored after the module, so the grad-cam oracle tests, which swap
``sys.modules["torchvision"]`` themselves, see the environment unchanged. Lightning and
torchmetrics are imported inside a fixture, under that shim.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import pytest
import torch
from health_models import NanBackward
from torch import nn

from vinlens.health import NonFiniteGradientError
from vinlens.hooks import leftover_hooks

STEPS = 6
PLANTED = 3  # the optimizer step whose backward the planted module poisons


@pytest.fixture(scope="module")
def pl(hidden_torchvision: None) -> types.ModuleType:
    return pytest.importorskip("lightning.pytorch", reason="the lightning extra")


@pytest.fixture(scope="module")
def adapter(pl: types.ModuleType) -> types.ModuleType:
    return importlib.import_module("vinlens.integrations.lightning")


class InfBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")  # an overflow, as a too-high loss scale makes one


class Planted(nn.Module):
    """Linear whose backward turns NaN on the batches listed in ``poisoned`` (by batch index)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.poisoned: set[int] = set()
        self.overflowing: set[int] = set()
        self.batch_idx = -1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.batch_idx in self.poisoned:
            h = NanBackward.apply(h)
        if self.batch_idx in self.overflowing:
            h = InfBackward.apply(h)
        return h


def _module_class(
    pl: types.ModuleType, manual: bool = False, fail_at_call: int | None = None
) -> type:
    class Regressor(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.enc = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.25)  # the replay must draw the same mask
            self.mid = Planted()
            self.head = nn.Linear(4, 1)
            self.automatic_optimization = not manual
            self.steps_run = 0
            self.logged = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.mid(self.drop(torch.tanh(self.enc(x)))))
            return out

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.steps_run += 1
            if self.steps_run == fail_at_call:
                raise ValueError("the data were bad")
            self.mid.batch_idx = batch_idx
            x, y = batch
            loss = (self(x) - y).square().mean()
            self.log("train_loss", loss)
            if manual:
                optimizer = self.optimizers()
                optimizer.zero_grad()
                self.manual_backward(loss)
                optimizer.step()
            return loss

        def log(self, *args: Any, **kwargs: Any) -> None:
            self.logged += 1
            super().log(*args, **kwargs)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Regressor


def _loader() -> torch.utils.data.DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=generator)
    y = torch.randn(32, 1, generator=generator)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


def _fit(pl: types.ModuleType, module: Any, callbacks: list[Any], **trainer: Any) -> Any:
    fit = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=trainer.pop("max_steps", STEPS),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **trainer,
    )
    torch.manual_seed(2)
    fit.fit(module, _loader())
    return fit


def _finite(module: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in module.parameters())


def test_a_planted_nan_stops_fit_before_the_optimizer_step(
    pl: types.ModuleType, adapter: types.ModuleType
) -> None:
    Regressor = _module_class(pl)
    module = Regressor()
    module.mid.poisoned = {PLANTED}
    callback = adapter.TrainingMonitorCallback(every=2)
    with pytest.raises(RuntimeError, match="on_fit_start"):
        callback.monitor  # noqa: B018  (built once the model is known)
    with pytest.raises(NonFiniteGradientError) as raised:
        _fit(pl, module, [callback])
    event = raised.value.event
    assert event.step == PLANTED and event.replayed
    assert event.origin is not None and event.origin.module_path == "mid"
    assert callback.monitor.events == (event,)
    assert callback.monitor.history.steps == (0, 2)  # sampled steps 0 and 2 ran
    assert module.steps_run == PLANTED + 2  # the step and its replay
    assert module.logged == PLANTED + 1  # the replay logged nothing

    # Stopped before the optimizer step: the weights are those of PLANTED clean steps.
    reference = Regressor()
    _fit(pl, reference, [], max_steps=PLANTED)
    assert _finite(module)
    for mine, theirs in zip(module.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    assert leftover_hooks(module.modules()) == []


def test_record_mode_keeps_training_with_accumulated_batches(
    pl: types.ModuleType, adapter: types.ModuleType
) -> None:
    module = _module_class(pl)()
    module.mid.poisoned = {2 * PLANTED + 1}  # the second batch of optimizer step PLANTED
    callback = adapter.TrainingMonitorCallback(every=1, on_nonfinite="record")
    fit = _fit(pl, module, [callback], accumulate_grad_batches=2, max_steps=4)
    assert fit.global_step == 4
    monitor = callback.monitor
    assert monitor.step == 4  # one monitor step per optimizer step
    (event,) = monitor.events
    assert event.step == PLANTED and event.replayed and event.origin is not None
    # The replay runs both batches, forward and backward each: the second one's call.
    assert (event.origin.module_path, event.origin.call_index) == ("mid", 1)
    assert module.steps_run == 8 + 2  # the two batches of step 3 ran again
    assert monitor.history.steps == (0, 1, 2, 3)
    assert leftover_hooks(module.modules()) == []


def test_steps_the_grad_scaler_skips_are_expected(
    pl: types.ModuleType, adapter: types.ModuleType
) -> None:
    # 16-mixed with a GradScaler (on the CPU, where Trainer(precision="16-mixed") would
    # fall back to bf16 without one): the adapter hands the monitor the plugin's scaler.
    module = _module_class(pl)()
    module.mid.overflowing = {1, 2}  # a streak of two overflowing steps
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    precision = pl.plugins.precision.MixedPrecision("16-mixed", "cpu", scaler=scaler)
    callback = adapter.TrainingMonitorCallback(every=1)  # on_nonfinite="raise"
    fit = _fit(pl, module, [callback], plugins=[precision])
    monitor = callback.monitor
    assert fit.global_step == STEPS and monitor.step == STEPS  # nothing raised
    assert monitor.skipped_steps == (1, 2)
    (event,) = monitor.events  # the first step of the streak, its origin named
    assert event.step == 1 and event.skipped_by_scaler
    assert event.origin is not None and event.origin.module_path == "mid"
    scales = monitor.loss_scales
    assert list(scales.steps) == list(range(STEPS))
    assert list(scales.scales[:4]) == [2.0**10, 2.0**10, 2.0**9, 2.0**8]
    assert _finite(module)  # the skipped steps never reached the weights
    assert leftover_hooks(module.modules()) == []

    # scaler=None given explicitly: no scaler for the monitor, the overflow raises.
    module = _module_class(pl)()
    module.mid.overflowing = {1}
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    precision = pl.plugins.precision.MixedPrecision("16-mixed", "cpu", scaler=scaler)
    with pytest.raises(NonFiniteGradientError):
        _fit(pl, module, [adapter.TrainingMonitorCallback(scaler=None)], plugins=[precision])


def test_manual_optimization_is_refused(pl: types.ModuleType, adapter: types.ModuleType) -> None:
    module = _module_class(pl, manual=True)()
    callback = adapter.TrainingMonitorCallback()
    with pytest.raises(ValueError, match="automatic optimization only"):
        _fit(pl, module, [callback])
    assert module.steps_run == 0
    assert leftover_hooks(module.modules()) == []


def test_a_step_that_raises_leaves_no_hooks(
    pl: types.ModuleType, adapter: types.ModuleType
) -> None:
    module = _module_class(pl, fail_at_call=3)()  # step 2, a sampled step: hooks armed
    callback = adapter.TrainingMonitorCallback(every=2)
    with pytest.raises(ValueError, match="the data were bad"):
        _fit(pl, module, [callback])
    assert leftover_hooks(module.modules()) == []
    assert callback.monitor.begin_step() == 3  # free again
    callback.monitor.abort_step()


def test_bad_monitor_arguments_fail_at_construction(adapter: types.ModuleType) -> None:
    with pytest.raises(TypeError, match=r"unknown TrainingMonitor argument.*evry"):
        adapter.TrainingMonitorCallback(evry=3)
    with pytest.raises(TypeError, match="not model="):
        adapter.TrainingMonitorCallback(model=nn.Linear(1, 1))


def test_without_lightning_it_uses_pytorch_lightning(
    adapter: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytorch_lightning = pytest.importorskip("pytorch_lightning")
    for name in ("lightning", "lightning.pytorch"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "vinlens.integrations.lightning")
    fallback = importlib.import_module("vinlens.integrations.lightning")
    assert issubclass(fallback.TrainingMonitorCallback, pytorch_lightning.Callback)
    module = _module_class(pytorch_lightning)()
    module.mid.poisoned = {PLANTED}
    callback = fallback.TrainingMonitorCallback()
    with pytest.raises(NonFiniteGradientError) as raised:
        _fit(pytorch_lightning, module, [callback])
    assert raised.value.event.step == PLANTED
    assert raised.value.event.origin is not None
    assert raised.value.event.origin.module_path == "mid"
    assert _finite(module)


def test_a_missing_lightning_names_the_extra(
    adapter: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "vinlens.integrations.lightning")
    with pytest.raises(ImportError, match=r"pip install 'vinlens\[lightning\]'"):
        importlib.import_module("vinlens.integrations.lightning")
