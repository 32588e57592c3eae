"""vinlens.integrations.transformers on a real Hugging Face Trainer (CPU, report_to none).

The environment: ``transformers.Trainer`` imports its image utilities, which import
torchvision when it looks installed, and the dev extras' torchvision 0.28.0 is a CUDA build
that cannot load beside the CPU torch 2.13.0 (PyPI has no CPU build of it). These tests run
with torchvision hidden (``framework_shim.torchvision_hidden``, autouse per module in this
directory's conftest, restored after the module); transformers is imported inside a
fixture, under that shim.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from health_models import NanBackward
from torch import nn

from vinlens.health import NonFiniteGradientError
from vinlens.hooks import leftover_hooks

BATCH = 4
STEPS = 6
PLANTED = 3  # the optimizer step whose batch is poisoned


@pytest.fixture(scope="module")
def hf(hidden_torchvision: None) -> types.ModuleType:
    pytest.importorskip("accelerate", reason="the transformers extra")
    module = pytest.importorskip("transformers", reason="the transformers extra")
    module.logging.set_verbosity_error()
    return module


@pytest.fixture(scope="module")
def adapter(hf: types.ModuleType) -> types.ModuleType:
    return importlib.import_module("vinlens.integrations.transformers")


class Planted(nn.Module):
    """Linear whose backward turns NaN for a batch that holds a poisoned sample."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, poison: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        out: torch.Tensor = NanBackward.apply(h) if bool(poison.any()) else h
        return out


class Regressor(nn.Module):
    """A plain module the Trainer accepts: keyword inputs, a dict with the loss."""

    def __init__(self, fail_at_call: int | None = None) -> None:
        super().__init__()
        self.fail_at_call = fail_at_call
        torch.manual_seed(0)
        self.enc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.25)  # the replay must draw the same mask
        self.mid = Planted()
        self.head = nn.Linear(4, 1)
        self.calls = 0

    def forward(
        self, x: torch.Tensor, poison: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.fail_at_call:
            raise ValueError("the data were bad")
        h = self.mid(self.drop(torch.tanh(self.enc(x))), poison)
        return {"loss": (self.head(h) - labels).square().mean()}


class Samples(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, poisoned_batches: set[int]) -> None:
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(BATCH * 8, 4, generator=generator)
        self.y = torch.randn(BATCH * 8, 1, generator=generator)
        self.poisoned = poisoned_batches

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        poison = torch.tensor(index // BATCH in self.poisoned)
        return {"x": self.x[index], "poison": poison, "labels": self.y[index]}


def _train(
    hf: types.ModuleType,
    tmp_path: Path,
    model: nn.Module,
    callbacks: list[Any],
    poisoned: set[int],
    **overrides: Any,
) -> Any:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": STEPS,
        "per_device_train_batch_size": BATCH,
        "learning_rate": 0.05,
        "optim": "sgd",
        "lr_scheduler_type": "constant",
        "train_sampling_strategy": "sequential",
        "report_to": "none",
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "seed": 2,
    }
    settings.update(overrides)
    trainer = hf.Trainer(
        model=model,
        args=hf.TrainingArguments(**settings),
        train_dataset=Samples(poisoned),
        callbacks=callbacks,
    )
    trainer.train()
    return trainer


def _finite(module: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in module.parameters())


def test_a_planted_nan_stops_train_before_the_optimizer_step(
    hf: types.ModuleType, adapter: types.ModuleType, tmp_path: Path
) -> None:
    model = Regressor()
    callback = adapter.TrainingMonitorCallback(every=2)
    with pytest.raises(RuntimeError, match="on_train_begin"):
        callback.monitor  # noqa: B018  (built once the model is known)
    with pytest.raises(NonFiniteGradientError) as raised:
        _train(hf, tmp_path, model, [callback], {PLANTED})
    event = raised.value.event
    assert event.step == PLANTED and event.replayed
    assert event.origin is not None and event.origin.module_path == "mid"
    assert callback.monitor.events == (event,)
    assert callback.monitor.history.steps == (0, 2)
    assert model.calls == PLANTED + 2  # the step and its replay

    # Stopped before the optimizer step: the weights are those of PLANTED clean steps.
    reference = Regressor()
    _train(hf, tmp_path, reference, [], set(), max_steps=PLANTED)
    assert _finite(model)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    assert leftover_hooks(model.modules()) == []


def test_record_mode_keeps_training_with_accumulated_batches(
    hf: types.ModuleType, adapter: types.ModuleType, tmp_path: Path
) -> None:
    model = Regressor()
    callback = adapter.TrainingMonitorCallback(every=1, on_nonfinite="record")
    trainer = _train(
        hf,
        tmp_path,
        model,
        [callback],
        {2 * PLANTED + 1},  # the second micro-batch of optimizer step PLANTED
        max_steps=4,
        gradient_accumulation_steps=2,
    )
    assert trainer.state.global_step == 4
    monitor = callback.monitor
    assert monitor.step == 4  # one monitor step per optimizer step
    (event,) = monitor.events
    assert event.step == PLANTED and event.replayed and event.origin is not None
    # The replay runs both micro-batches, forward and backward each: the second one's call.
    assert (event.origin.module_path, event.origin.call_index) == ("mid", 1)
    assert model.calls == 8 + 2
    assert monitor.history.steps == (0, 1, 2, 3)
    assert "training_step" not in trainer.__dict__  # unwrapped at on_train_end
    assert leftover_hooks(model.modules()) == []


def test_a_step_that_raises_leaves_no_hooks(
    hf: types.ModuleType, adapter: types.ModuleType, tmp_path: Path
) -> None:
    model = Regressor(fail_at_call=3)  # step 2, a sampled step (every=2): hooks armed
    callback = adapter.TrainingMonitorCallback(every=2)
    with pytest.raises(ValueError, match="the data were bad"):
        _train(hf, tmp_path, model, [callback], set())
    assert leftover_hooks(model.modules()) == []
    assert callback.monitor.begin_step() == 3  # free again
    callback.monitor.abort_step()


def test_bad_monitor_arguments_fail_at_construction(adapter: types.ModuleType) -> None:
    with pytest.raises(TypeError, match=r"unknown TrainingMonitor argument.*evry"):
        adapter.TrainingMonitorCallback(evry=3)
    with pytest.raises(TypeError, match="not model="):
        adapter.TrainingMonitorCallback(model=nn.Linear(1, 1))


def test_outside_a_trainer_it_says_so(hf: types.ModuleType, adapter: types.ModuleType) -> None:
    callback = adapter.TrainingMonitorCallback()
    with pytest.raises(RuntimeError, match=r"inside transformers\.Trainer\.train"):
        callback.on_train_begin(None, None, None, model=nn.Linear(2, 2))


def test_a_missing_transformers_names_the_extra(
    adapter: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "vinlens.integrations.transformers")
    with pytest.raises(ImportError, match=r"pip install 'vinlens\[transformers\]'"):
        importlib.import_module("vinlens.integrations.transformers")
