"""torch.compile: the engines answer with the original model's paths, and dynamo never traces them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
from compile_models import PATHS, Net, TracedCode
from torch import nn
from torch._dynamo.utils import counters

from vinlens.health import (
    TrainingMonitor,
    collect_activation_stats,
    compare_models,
    find_nonfinite_gradient_origin,
    find_nonfinite_origin,
    precision_headroom,
)
from vinlens.hooks import HookSet, leftover_hooks
from vinlens.model_inspection import capture_model


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _run(style: str, monitored: bool) -> tuple[object, int]:
    torch.manual_seed(0)
    model = Net()
    called: nn.Module = model
    if style == "wrap":
        called = torch.compile(model, backend="aot_eager")
    else:
        model.compile(backend="aot_eager")
    x = torch.randn(4, 8)

    def step() -> torch.Tensor:
        model.zero_grad()
        loss = called(x).sum()
        loss.backward()
        return loss

    monitor = TrainingMonitor(called, every=3, on_nonfinite="record") if monitored else None
    for index in range(8):
        if index == 7:
            model.mid.gate.fill_(float("nan"))
        if monitor is not None:
            monitor.run_step(step)
        else:
            step()
    assert leftover_hooks(model.modules()) == []
    result = monitor if monitor is not None else None
    return result, counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("style", ["wrap", "inplace"])
def test_monitor_on_a_compiled_model_names_the_eager_paths_without_recompiles(style: str) -> None:
    _, plain_graphs = _run(style, monitored=False)
    torch._dynamo.reset()
    counters.clear()
    monitor, graphs = _run(style, monitored=True)
    assert isinstance(monitor, TrainingMonitor)
    assert graphs == plain_graphs
    assert monitor.module_paths == PATHS
    assert all(h.output[0].count > 0 for h in monitor.history.modules.values())
    (event,) = monitor.events
    assert event.step == 7 and event.replayed_eagerly
    assert event.origin is not None and event.origin.module_path == "mid"


def test_forward_origin_on_torch_compile_names_the_original_module() -> None:
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)
    compiled(x)
    model.mid.gate.fill_(float("nan"))
    origin = find_nonfinite_origin(compiled, lambda: compiled(x))
    assert origin is not None and origin.module_path == "mid"
    assert leftover_hooks(model.modules()) == []


@pytest.mark.parametrize("style", ["wrap", "inplace"])
def test_compare_models_on_compiled_checkpoints_pairs_the_eager_paths(style: str) -> None:
    torch.manual_seed(0)
    model_a = Net()
    model_b = Net()
    model_b.load_state_dict(model_a.state_dict())
    with torch.no_grad():
        model_b.mid.lin.weight.add_(0.5)
    x = torch.randn(4, 8)
    eager = compare_models(model_a, model_b, lambda m: m(x))
    if style == "wrap":
        called_a: nn.Module = torch.compile(model_a, backend="aot_eager")
        called_b: nn.Module = torch.compile(model_b, backend="aot_eager")
    else:
        model_a.compile(backend="aot_eager")
        model_b.compile(backend="aot_eager")
        called_a, called_b = model_a, model_b
    called_a(x), called_b(x)  # compiled before the diff: its hooks must still fire
    graphs = counters["stats"]["unique_graphs"]
    diff = compare_models(called_a, called_b, lambda m: m(x))
    assert counters["stats"]["unique_graphs"] == graphs  # nothing recompiled
    assert [(d.module_path, d.call_index) for d in diff.modules] == [
        (d.module_path, d.call_index) for d in eager.modules
    ]
    assert [d.module_path for d in diff.modules] == ["enc", "mid.lin", "mid", "head", "<root>"]
    assert diff.first_divergent_path() == eager.first_divergent_path() == "mid.lin"
    for got, want in zip(diff.modules, eager.modules, strict=True):
        assert got.relative_l2 == pytest.approx(want.relative_l2, rel=1e-6, abs=1e-12)
    assert diff.unpaired_paths == ()
    assert leftover_hooks([*model_a.modules(), *model_b.modules()]) == []


def test_traced_code_sees_a_vinlens_hook_that_dynamo_traces() -> None:
    """The detector of the next test works: a vinlens hook present while dynamo traces
    (outside run_eagerly) is found among the traced frames."""
    model = Net()
    backend = TracedCode("aot_eager")
    compiled = torch.compile(model, backend=backend)
    with HookSet() as hooks:
        hooks.hook_modules([("mid", model.mid)], post=lambda *_: None, use_global=False)
        compiled(torch.randn(4, 8))
    assert backend.vinlens_files()


@pytest.mark.parametrize("style", ["wrap", "inplace"])
def test_no_vinlens_frame_is_traced_on_a_monitored_compiled_run(style: str) -> None:
    torch.manual_seed(0)
    model = Net()
    backend = TracedCode("aot_eager")
    called: nn.Module = model
    if style == "wrap":
        called = torch.compile(model, backend=backend)
    else:
        model.compile(backend=backend)
    x = torch.randn(4, 8)

    def step() -> torch.Tensor:
        model.zero_grad()
        loss = called(x).sum()
        loss.backward()
        return loss

    monitor = TrainingMonitor(called, every=2, on_nonfinite="record")
    for index in range(5):
        if index == 4:
            model.mid.gate.fill_(float("nan"))
        monitor.run_step(step)
    assert monitor.events[0].origin is not None
    assert find_nonfinite_origin(called, lambda: called(x)) is not None
    assert find_nonfinite_gradient_origin(called, step) is not None
    model.mid.gate.fill_(1.0)
    precision_headroom(called, lambda: called(x))
    collect_activation_stats(called, [x])
    with capture_model(called):
        called(x)
    assert backend.files, "nothing was compiled"
    assert str(Path(__file__).with_name("compile_models.py").resolve()) in backend.traced()
    assert backend.vinlens_files() == set()
    assert leftover_hooks(model.modules()) == []
