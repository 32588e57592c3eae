"""The monitor on a model compiled with inductor (CPU): the eager answers, no extra graph,
no vinlens frame traced, no hook left. Few and small: every compile costs seconds."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
from compile_models import PATHS, PLANT, TracedCode, train_planted
from torch._dynamo.utils import counters

from vinlens.health import find_nonfinite_origin
from vinlens.hooks import leftover_hooks


def _cpp_compiler() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return str(get_cpp_compiler())
    except Exception:  # no compiler found: inductor cannot build CPU kernels here
        return None


pytestmark = [
    pytest.mark.inductor,
    pytest.mark.skipif(_cpp_compiler() is None, reason="inductor on CPU needs a C++ compiler"),
    # inductor's own use of torch.jit.script_method in this torch
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("style", ["wrap", "inplace"])
def test_monitor_on_inductor_matches_eager_without_extra_graphs(style: str) -> None:
    _, _, eager, _ = train_planted("eager", True, None)
    assert eager is not None
    torch._dynamo.reset()
    counters.clear()
    _, _, _, plain_graphs = train_planted(style, False, "inductor")
    assert plain_graphs >= 1
    torch._dynamo.reset()
    counters.clear()
    backend = TracedCode("inductor")
    model, called, monitor, graphs = train_planted(style, True, backend)
    assert monitor is not None
    assert graphs == plain_graphs  # the monitor made dynamo compile nothing more

    assert monitor.module_paths == eager.module_paths == PATHS
    (event,) = monitor.events
    (eager_event,) = eager.events
    assert event.step == eager_event.step == PLANT
    assert event.origin is not None and eager_event.origin is not None
    assert event.origin.module_path == eager_event.origin.module_path == "mid"
    assert event.replayed_eagerly and not eager_event.replayed_eagerly
    # Sampled steps ran eagerly on weights the compiled steps trained: the same gradient
    # norms as eager training up to float32 rounding (eps 1.2e-7) of inductor's reordered
    # sums, carried through 7 SGD steps at lr 0.01: far below 1e-4 relative.
    assert monitor.history.steps == eager.history.steps
    for path in PATHS:
        got, want = monitor.history.modules[path], eager.history.modules[path]
        assert got.output[0].count == want.output[0].count > 0
        for a, b in zip(got.grad_norm, want.grad_norm, strict=True):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-4)

    forward = find_nonfinite_origin(called, lambda: called(torch.randn(4, 8)))
    assert forward is not None and forward.module_path == "mid"
    assert int(counters["stats"]["unique_graphs"]) == plain_graphs
    assert backend.vinlens_files() == set()
    assert str((Path(__file__).parents[1] / "compile_models.py").resolve()) in backend.traced()
    assert leftover_hooks(model.modules()) == []
