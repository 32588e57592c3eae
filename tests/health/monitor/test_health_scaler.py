"""TrainingMonitor(scaler=...): a real model under CPU autocast with a GradScaler."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import pytest
import torch
from health_models import Boost, assert_no_hooks
from torch import nn

from vinlens.health import (
    NonFiniteGradientError,
    TrainingMonitor,
    find_nonfinite_gradient_origin,
    open_run,
    precision_headroom,
)

FP16_MAX = float(torch.finfo(torch.float16).max)


def scaled_model() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("enc", nn.Linear(16, 16, bias=False))
    model.add_module("boost", Boost())
    model.add_module("act", nn.Tanh())
    model.add_module("mid", nn.Linear(16, 16))
    model.add_module("head", nn.Linear(16, 4))
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return 0.01 * torch.randn(8, 16, generator=generator), torch.randn(8, 4, generator=generator)


def step_fn(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    dtype: torch.dtype,
    *,
    unscale: bool = False,
) -> Callable[[], torch.Tensor]:
    x, y = batch()

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = (model(x).float() - y).pow(2).mean()
        (loss if scaler is None else scaler.scale(loss)).backward()
        if unscale and scaler is not None:
            scaler.unscale_(optimizer)  # as a loop that clips does
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        return loss

    return step


def train(
    monitor: TrainingMonitor,
    step: Callable[[], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    steps: int,
) -> None:
    for _ in range(steps):
        monitor.run_step(step)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()


@pytest.mark.parametrize("unscale", [False, True], ids=["scaled", "unscale_called"])
def test_history_grad_norms_are_unscaled(unscale: bool) -> None:
    plain_model = scaled_model()
    model = copy.deepcopy(plain_model)
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    plain = TrainingMonitor(plain_model, every=1)
    scaled = TrainingMonitor(model, every=1, scaler=scaler)
    train(plain, step_fn(plain_model, plain_opt, None, torch.bfloat16), plain_opt, None, 3)
    step = step_fn(model, opt, scaler, torch.bfloat16, unscale=unscale)
    train(scaled, step, opt, scaler, 3)
    want = plain.history_matrix("grad_norm").values
    got = scaled.history_matrix("grad_norm").values
    assert scaled.history.steps == (0, 1, 2)
    finite = ~torch.isnan(torch.from_numpy(want)).numpy()
    assert finite.sum() == 9  # enc, mid, head over 3 steps
    # A power-of-two scale is exact in floating point: the unscaled norms are the plain ones.
    assert got[finite] == pytest.approx(want[finite], rel=1e-6)
    assert scaled.skipped_steps == ()
    assert scaled.loss_scales.steps.tolist() == [0, 1, 2]
    assert scaled.loss_scales.scales.tolist() == [2.0**16] * 3
    assert_no_hooks(model)


def _threshold_factor(model: nn.Sequential, log2_scale: float) -> float:
    """A backward factor at ``boost`` whose float16 product overflows at scales above
    ``2**log2_scale`` and stays finite below it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    probe = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    step_fn(model, opt, probe, torch.float16)()
    unscaled = model.boost.incoming / 2.0**16
    return FP16_MAX / (unscaled * 2.0**log2_scale)


def test_skipped_streak_recorded_with_the_origin_of_its_first_step() -> None:
    model = scaled_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    monitor = TrainingMonitor(model, every=4, scaler=scaler)
    step = step_fn(model, opt, scaler, torch.float16, unscale=True)
    train(monitor, step, opt, scaler, 2)  # finite at 2**16
    model.boost.factor = _threshold_factor(model, 14.5)  # overflows at 2**16 and 2**15
    twin = copy.deepcopy(model)  # the same step without a monitor
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.0)
    twin_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    eager = find_nonfinite_gradient_origin(
        twin, step_fn(twin, twin_opt, twin_scaler, torch.float16, unscale=True)
    )
    train(monitor, step, opt, scaler, 6)  # no raise: the scaler skips them
    assert eager is not None and eager.module_path == "boost"
    assert monitor.skipped_steps == (2, 3)
    assert monitor.loss_scales.scales.tolist() == [2.0**16] * 3 + [2.0**15] + [2.0**14] * 4
    (event,) = monitor.events
    assert event.step == 2 and event.skipped_by_scaler and event.loss_scale == 2.0**16
    assert event.origin is not None and event.origin.module_path == eager.module_path == "boost"
    assert monitor.nonfinite_count == 2
    assert scaler.get_scale() == 2.0**14
    assert_no_hooks(model)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_streak_past_max_skipped_streak_raises(dtype: torch.dtype) -> None:
    model = scaled_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    monitor = TrainingMonitor(model, every=3, scaler=scaler)  # max_skipped_streak=10
    model.boost.factor = math.inf  # every step overflows, whatever the scale
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteGradientError, match="max_skipped_streak=10") as raised:
        train(monitor, step_fn(model, opt, scaler, dtype), opt, scaler, 20)
    assert raised.value.event.step == 10
    assert raised.value.event.skipped_by_scaler
    assert raised.value.event.origin is not None
    assert raised.value.event.origin.module_path == "boost"
    assert monitor.skipped_steps == tuple(range(11))
    assert [e.step for e in monitor.events] == [0, 10]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert_no_hooks(model)


def test_a_scale_below_min_scale_raises_and_record_mode_returns() -> None:
    model = scaled_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    monitor = TrainingMonitor(model, every=100, scaler=scaler)  # min_scale=1.0
    model.boost.factor = math.inf
    with pytest.raises(NonFiniteGradientError, match="below min_scale=1") as raised:
        train(monitor, step_fn(model, opt, scaler, torch.bfloat16), opt, scaler, 20)
    # 16 -> 8 -> 4 -> 2 -> 1 are skipped as expected; the skip at 1 would fall to 0.5.
    assert raised.value.event.step == 4
    assert raised.value.event.loss_scale == 1.0
    assert "0.5" in str(raised.value)

    recorded = TrainingMonitor(
        model, every=100, scaler=(s := torch.amp.GradScaler("cpu", init_scale=16.0))
    )
    recorded.on_nonfinite = "record"
    train(recorded, step_fn(model, opt, s, torch.bfloat16), opt, s, 8)
    assert recorded.skipped_steps == tuple(range(8))
    assert [e.step for e in recorded.events] == [0, 4]  # the streak's first, the limit
    assert s.get_scale() == 16.0 / 2**8


def test_bad_scaler_arguments_name_the_value() -> None:
    model = scaled_model()
    with pytest.raises(TypeError, match=r"torch\.amp\.GradScaler"):
        TrainingMonitor(model, scaler="fp16")  # type: ignore[arg-type]
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(ValueError, match=r"min_scale must be a finite number >= 0 .*, got -1"):
        TrainingMonitor(model, scaler=scaler, min_scale=-1)
    with pytest.raises(ValueError, match="max_skipped_streak must be a positive integer"):
        TrainingMonitor(model, scaler=scaler, max_skipped_streak=0)


def test_sampled_headroom_is_precision_headroom_of_the_autocast_dtype(tmp_path: object) -> None:
    model = scaled_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    log_dir = f"{tmp_path}/run"
    with TrainingMonitor(model, every=2, scaler=scaler, log_dir=log_dir) as monitor:
        train(monitor, step_fn(model, opt, scaler, torch.bfloat16), opt, scaler, 3)
        model.boost.factor = math.inf
        monitor.on_nonfinite = "record"
        train(monitor, step_fn(model, opt, scaler, torch.bfloat16), opt, scaler, 1)
    x, _ = batch()

    def forward() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)

    want = precision_headroom(model, forward, torch.bfloat16).lowest_headroom()
    history = monitor.history
    assert history.steps == (0, 2)
    for path in ("enc", "boost", "act", "mid", "head", "<root>"):
        bits = history.modules[path].headroom_bits
        assert bits == (want[path], want[path]), path
    assert 100 < want["head"] < 130  # bfloat16's range is float32's
    run = open_run(log_dir)
    assert run.history_matrix("headroom_bits").values.tolist() == (
        monitor.history_matrix("headroom_bits").values.tolist()
    )
    assert run.history().modules["head"].headroom_bits == history.modules["head"].headroom_bits
    (event,) = run.events
    assert event.step == 3 and event.skipped_by_scaler and event.loss_scale == 2.0**16


def test_headroom_is_nan_without_a_low_precision_dtype() -> None:
    model = scaled_model()
    monitor = TrainingMonitor(model, every=1)
    x, y = batch()

    def step() -> None:
        model.zero_grad()
        (model(x) - y).pow(2).mean().backward()

    monitor.run_step(step)
    assert all(math.isnan(m.headroom_bits[0]) for m in monitor.history.modules.values())


def test_optimizers_match_each_gradient_to_its_unscale() -> None:
    plain_model = scaled_model()
    model = copy.deepcopy(plain_model)
    plain = TrainingMonitor(plain_model, every=1)
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.0)
    train(plain, step_fn(plain_model, plain_opt, None, torch.bfloat16), plain_opt, None, 1)
    body = torch.optim.SGD([*model.enc.parameters(), *model.mid.parameters()], lr=0.0)
    head = torch.optim.SGD(model.head.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    monitor = TrainingMonitor(model, every=1, scaler=scaler, optimizers=[body, head])
    x, y = batch()

    def step() -> None:
        body.zero_grad()
        head.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (model(x).float() - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(body)  # the head's gradients stay scaled

    monitor.run_step(step)
    want = plain.history_matrix("grad_norm").values
    got = monitor.history_matrix("grad_norm").values
    finite = ~torch.isnan(torch.from_numpy(want)).numpy()
    assert got[finite] == pytest.approx(want[finite], rel=1e-6)
    with pytest.raises(TypeError, match=r"optimizers must be a torch\.optim\.Optimizer"):
        TrainingMonitor(model, scaler=scaler, optimizers=[body, "head"])  # type: ignore[list-item]
