"""The training monitor's CUDA paths: inductor on CUDA, float16 autocast with a CUDA
GradScaler. Skipped without CUDA (the 2-process NCCL tests are in test_distributed.py)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import pytest
import torch
from compile_models import PATHS, PLANT, train_planted
from health_models import Boost, assert_no_hooks
from torch import nn
from torch._dynamo.utils import counters

from vinlens.health import TrainingMonitor

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_inductor_on_cuda_names_the_eager_module_without_extra_graphs() -> None:
    _, _, _, plain_graphs = train_planted("wrap", False, "inductor", device="cuda")
    torch._dynamo.reset()
    counters.clear()
    model, _, monitor, graphs = train_planted("wrap", True, "inductor", device="cuda")
    assert monitor is not None
    assert graphs == plain_graphs
    (event,) = monitor.events
    assert event.step == PLANT and event.replayed_eagerly
    assert event.origin is not None and event.origin.module_path == "mid"
    assert monitor.module_paths == PATHS
    assert_no_hooks(model)


def scaler_run(device: str) -> None:
    """float16 autocast with a GradScaler on ``device``: unscaled norms in the history, an
    overflow streak skipped as expected, its first step named."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("enc", nn.Linear(16, 16, bias=False))
    model.add_module("boost", Boost())
    model.add_module("head", nn.Linear(16, 4))
    model.to(device)
    twin = copy.deepcopy(model)  # the same steps without a scaler or a monitor
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**16)
    monitor = TrainingMonitor(model, every=1, scaler=scaler)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)

    def step(net: nn.Module, scale: torch.amp.GradScaler | None) -> torch.Tensor:
        net.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = (net(x).float() - y).pow(2).mean()
        (loss if scale is None else scale.scale(loss)).backward()
        return loss

    for _ in range(2):
        monitor.run_step(lambda: step(model, scaler))
        scaler.step(optimizer)
        scaler.update()
    step(twin, None)
    for path in ("enc", "head"):  # a power-of-two scale, divided back out
        want = torch.linalg.vector_norm(
            torch.cat([p.grad.flatten() for p in getattr(twin, path).parameters()])
        )
        got = monitor.history.modules[path].grad_norm
        assert got[-1] == pytest.approx(float(want), rel=1e-2)  # float16 rounding
    assert monitor.skipped_steps == ()
    model.boost.factor = math.inf  # every later step overflows: the scaler skips it
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        monitor.run_step(lambda: step(model, scaler))
        scaler.step(optimizer)
        scaler.update()
    assert monitor.skipped_steps == (2, 3, 4)
    (event,) = monitor.events  # the first step of the streak
    assert event.step == 2 and event.skipped_by_scaler and event.loss_scale == 2.0**16
    assert event.origin is not None and event.origin.module_path == "boost"
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**13
    assert_no_hooks(model)


def test_cuda_float16_grad_scaler_skips_are_expected_and_named() -> None:
    scaler_run("cuda")
