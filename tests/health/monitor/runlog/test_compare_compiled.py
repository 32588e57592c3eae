"""compare_runs of a torch.compile'd model against its eager twin: the same paths, no
vinlens frame traced, and a planted change named as in eager runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
from compile_models import PATHS, Net, TracedCode

from vinlens.health import TrainingMonitor, compare_runs


def _cpp_compiler() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return str(get_cpp_compiler())
    except Exception:  # no compiler found: inductor cannot build CPU kernels here
        return None


#: Compiled kernels may reorder a reduction (inductor fuses and vectorizes): compare a
#: compiled run with its eager twin within float32's rounding of O(1) values, a few ulps
#: accumulated over the steps.
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train(log_dir: Path, style: str, backend: object = None, gate_at: int | None = None) -> Path:
    """6 SGD steps, every other one sampled; ``gate_at``: ``mid``'s gate buffer set to 1.5
    from that step on (a change inside ``mid``, after ``mid.lin``)."""
    torch.manual_seed(0)
    model = Net()
    called: torch.nn.Module = model
    if style == "wrap":
        called = torch.compile(model, backend=backend)
    elif style == "inplace":
        model.compile(backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with TrainingMonitor(called, every=2, log_dir=log_dir) as monitor:
        for index in range(6):
            if index == gate_at:
                model.mid.gate.fill_(1.5)
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(index))

            def step(x: torch.Tensor = x) -> torch.Tensor:
                optimizer.zero_grad()
                loss = called(x).square().mean()
                loss.backward()
                return loss

            monitor.run_step(step)
            optimizer.step()
    return log_dir


def _compare_with_eager(tmp_path: Path, style: str, backend: str) -> None:
    eager = train(tmp_path / "eager", "eager")
    traced = TracedCode(backend)
    twin = train(tmp_path / "twin", style, traced)
    result = compare_runs(eager, twin, rtol=RTOL, atol=ATOL)
    assert result.identical and result.unmatched == ()
    assert {m.path for m in result.modules} == set(PATHS)
    assert traced.files and not traced.vinlens_files()
    torch._dynamo.reset()
    planted = train(tmp_path / "planted", style, TracedCode(backend), gate_at=4)
    found = compare_runs(eager, planted, rtol=RTOL, atol=ATOL)
    assert (found.first_step, found.cause, found.module) == (4, "forward", "mid")


@pytest.mark.parametrize("style", ["wrap", "inplace"])
def test_aot_eager_twin(tmp_path: Path, style: str) -> None:
    _compare_with_eager(tmp_path, style, "aot_eager")


@pytest.mark.inductor
@pytest.mark.skipif(_cpp_compiler() is None, reason="inductor on CPU needs a C++ compiler")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_inductor_twin(tmp_path: Path) -> None:
    _compare_with_eager(tmp_path, "wrap", "inductor")
