"""Health engine under hostile models (issue 23, class 5): complex and float8 values,
walk limits reported, train-mode dropout refused, forwards on a helper thread."""

from __future__ import annotations

import copy
import math
import threading
import warnings

import pytest
import torch
from health_models import assert_no_hooks
from torch import nn

from vinlens.health import collect_activation_stats, compare_models, find_nonfinite_origin
from vinlens.health.summaries import MAX_WALK_NODES

FLOAT8 = [
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)
]


class ToComplex(nn.Module):
    """Makes a complex output and plants -inf in the real part of one element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.complex(x, -x)
        z[0, 0] = complex(-math.inf, 0.0)
        return z


class Magnitude(nn.Module):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.abs()


def test_complex_minus_inf_is_blamed_on_the_module_that_made_it() -> None:
    model = nn.Sequential(nn.Linear(3, 3), ToComplex(), Magnitude())
    origin = find_nonfinite_origin(model, lambda: model(torch.randn(2, 3)))
    assert origin is not None
    assert origin.module_path == "1" and not origin.input_nonfinite
    (output,) = origin.outputs
    assert output.dtype == "torch.complex64" and output.shape == (2, 3)
    assert output.summary.neginf_count == 1  # over the real and imaginary parts
    assert [trace.dtype for trace in origin.inputs] == ["torch.float32"]
    assert origin.propagated_to == ("2", "<root>")
    assert_no_hooks(model)


class ToFloat8(nn.Module):
    def __init__(self, dtype: torch.dtype, nan: bool = False) -> None:
        super().__init__()
        self.dtype = dtype
        self.nan = nan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clamp(-4, 4)
        if self.nan:
            y = y.clone()
            y[0, 0] = math.nan
        return y.to(self.dtype)


class Widen(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float32) * 2


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_activations_are_checked_summarized_and_compared(dtype: torch.dtype) -> None:
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    finite = nn.Sequential(nn.Linear(3, 3), ToFloat8(dtype), Widen())
    assert find_nonfinite_origin(finite, lambda: finite(x)) is None
    broken = nn.Sequential(copy.deepcopy(finite[0]), ToFloat8(dtype, nan=True), Widen())
    origin = find_nonfinite_origin(broken, lambda: broken(x))
    assert origin is not None and origin.module_path == "1"
    assert origin.outputs[0].dtype == str(dtype) and origin.outputs[0].summary.nan_count == 1
    stats = collect_activation_stats(finite, [x, x])
    with torch.no_grad():
        want = finite[1](finite[0](x)).to(torch.float64)
    assert stats.modules["1"].count == 2 * want.numel()
    assert stats.modules["1"].mean == pytest.approx(want.mean().item(), rel=1e-12)
    diff = compare_models(finite, broken, lambda m: m(x))
    assert diff.first_divergent_path() == "1"
    assert_no_hooks(finite, broken)


class ManyOutputs(nn.Module):
    """Returns more tensors than one walk visits; NaN only in the last (or nowhere)."""

    def __init__(self, count: int, nan_last: bool) -> None:
        super().__init__()
        self.count = count
        self.nan_last = nan_last

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = [x + index for index in range(self.count)]
        if self.nan_last:
            out[-1] = out[-1].clone()
            out[-1][0, 0] = math.nan
        return out


class First(nn.Module):
    def forward(self, items: list[torch.Tensor]) -> torch.Tensor:
        return items[0]


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - 10)


def test_a_nan_past_the_walk_limit_is_never_silent() -> None:
    count = MAX_WALK_NODES + 904
    model = nn.Sequential(nn.Linear(3, 3), ManyOutputs(count, nan_last=True), First())
    with pytest.warns(RuntimeWarning, match=r"'1'.*more than 4096 containers and tensors"):
        assert find_nonfinite_origin(model, lambda: model(torch.randn(2, 3))) is None
    # An origin found elsewhere still lists the calls that were not walked entirely.
    later = nn.Sequential(nn.Linear(3, 3), ManyOutputs(count, nan_last=False), First(), Log())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        origin = find_nonfinite_origin(later, lambda: later(torch.randn(2, 3)))
    assert origin is not None and origin.module_path == "3"
    assert origin.walk_truncated == ("1", "2")  # 1's output, 2's input
    small = nn.Sequential(nn.Linear(3, 3), Log())
    found = find_nonfinite_origin(small, lambda: small(torch.randn(2, 3)))
    assert found is not None and found.walk_truncated == ()
    assert_no_hooks(model, later)


def test_activation_stats_say_which_outputs_were_not_walked_entirely() -> None:
    import pickle

    from vinlens.health import ActivationAccumulator

    count = MAX_WALK_NODES + 904
    model = nn.Sequential(nn.Linear(3, 3), ManyOutputs(count, nan_last=False), First())
    x = torch.randn(2, 3)
    stats = collect_activation_stats(model, [x, x])
    assert stats.walk_truncated == ("1",)  # only the list output; the rest were whole
    # The summary covers the tensors the walk reached, never more than it visited.
    assert stats.modules["1"].count < 2 * count * x.numel()  # 2 batches
    small = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    assert collect_activation_stats(small, [x]).walk_truncated == ()
    # Partials carry it through pickling (workers) and merging, in first-seen order.
    a, b = ActivationAccumulator(), ActivationAccumulator()
    a.update("p", torch.ones(2))
    b.update("q", [torch.ones(1)] * count)
    b.update("p", [torch.ones(1)] * count)
    merged = a.merge(pickle.loads(pickle.dumps(b))).finish()
    assert merged.walk_truncated == ("q", "p")
    assert_no_hooks(model, small)


def _dropout_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))


def test_train_mode_dropout_is_refused_and_eval_twins_agree() -> None:
    a = _dropout_net()
    b = copy.deepcopy(a)

    # One shared input: both forwards run at once, so a `run` drawing from torch's global
    # generator would race with itself (the same reason train-mode dropout is refused).
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))

    def run(model: nn.Module) -> object:
        return model(x)

    with pytest.raises(ValueError, match=r"model_a has dropout in train mode \('1'\).*\.eval\(\)"):
        compare_models(a, b, run)
    a.eval()
    with pytest.raises(ValueError, match=r"model_b has dropout in train mode"):
        compare_models(a, b, run)
    b.eval()
    diff = compare_models(a, b, run)
    assert diff.first_divergent_path() is None
    assert all(m.relative_l2 == 0.0 for m in diff.modules)
    b.train()
    b[1].p = 0.0  # no randomness left: allowed
    assert compare_models(a, b, run).first_divergent_path() is None
    assert_no_hooks(a, b)


def _on_a_helper_thread(model: nn.Module, x: torch.Tensor) -> object:
    out: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            out.append(model(x))
        except BaseException as error:  # re-raised on the caller's thread
            errors.append(error)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return out[0]


def test_forwards_on_another_thread_than_the_engines_are_not_observed() -> None:
    # The engines observe the thread that runs them only: a forward on any other thread
    # (a helper thread here, a serving thread in practice) is not theirs.
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    a = _dropout_net().eval()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b[2].weight.add_(0.1)
    assert compare_models(a, b, lambda m: _on_a_helper_thread(m, x)).modules == ()
    broken = nn.Sequential(nn.Linear(4, 4), Log())
    assert find_nonfinite_origin(broken, lambda: _on_a_helper_thread(broken, x)) is None
    origin = find_nonfinite_origin(broken, lambda: broken(x))
    assert origin is not None and origin.module_path == "1"
    stats = collect_activation_stats(a, [x], lambda m, batch: _on_a_helper_thread(m, batch))
    assert all(module.count == 0 for module in stats.modules.values())
    assert_no_hooks(a, b, broken)
