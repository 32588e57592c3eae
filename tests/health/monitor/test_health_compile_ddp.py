"""DDP and torch.compile in either order: the engines report the wrapped model's paths.

One gloo rank (world size 1) is enough for the paths; the multi-rank behaviour is in
test_distributed.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.distributed as dist
from compile_models import PATHS, Net
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from vinlens import wrappers
from vinlens.health import TrainingMonitor
from vinlens.hooks import leftover_hooks

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


PARAMS = [
    "enc.weight",
    "enc.bias",
    "mid.lin.weight",
    "mid.lin.bias",
    "head.weight",
    "head.bias",
]


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group(
        "gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=60)
    )
    torch._dynamo.reset()
    try:
        yield
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()


def _wrapped(order: str, model: nn.Module) -> nn.Module:
    if order == "ddp(compile)":
        return DDP(torch.compile(model, backend="aot_eager"))
    if order == "compile(ddp)":
        return torch.compile(DDP(model), backend="aot_eager")
    return DDP(model)


@pytest.mark.parametrize("order", ["ddp", "ddp(compile)", "compile(ddp)"])
def test_ddp_and_compile_in_either_order_give_the_models_paths(one_rank: None, order: str) -> None:
    torch.manual_seed(0)
    model = Net()
    called = _wrapped(order, model)
    assert wrappers.unwrap_model(called) is model
    assert [name for name, _ in wrappers.named_modules(called)] == [
        "",
        "enc",
        "mid",
        "mid.lin",
        "head",
    ]
    assert [name for name, _ in wrappers.named_parameters(called)] == PARAMS
    assert wrappers.compiled_paths(called) == (() if order == "ddp" else ("<root>",))
    x = torch.randn(4, 8)

    def step() -> torch.Tensor:
        called.zero_grad(set_to_none=True)
        loss = called(x).sum()
        loss.backward()
        return loss

    monitor = TrainingMonitor(called, every=2, on_nonfinite="record")
    assert monitor.module_paths == PATHS
    for index in range(4):
        if index == 3:
            model.mid.gate.fill_(float("nan"))
        monitor.run_step(step)
    assert set(monitor.history.modules) == set(PATHS)
    assert all(h.output[0].count > 0 for h in monitor.history.modules.values())
    (event,) = monitor.events
    assert event.step == 3
    assert event.origin is not None and event.origin.module_path == "mid"
    assert event.replayed_eagerly == (order != "ddp")
    assert leftover_hooks(called.modules()) == []
