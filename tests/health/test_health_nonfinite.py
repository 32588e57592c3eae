"""find_nonfinite_origin on deep planted models: the producing module, not the next one."""

from __future__ import annotations

import math

import pytest
import torch
from health_models import Log, assert_no_hooks, deep_model
from torch import nn

from vinlens.health import NonFiniteOrigin, find_nonfinite_origin
from vinlens.model_inspection import ROOT_PATH


@pytest.mark.parametrize("k", [0, 5, 11])
def test_log_of_a_negative_in_module_k_is_reported_as_k(k: int) -> None:
    model = deep_model(depth=12, log_at=k)
    x = torch.randn(4, 8)
    origin = find_nonfinite_origin(model, lambda: model(x))
    assert isinstance(origin, NonFiniteOrigin)
    assert (origin.module_path, origin.call_index) == (f"{k}.2", 0)
    assert not origin.input_nonfinite
    assert all(t.summary.nonfinite_count == 0 for t in origin.inputs)
    assert origin.inputs[0].tensor_path == "args[0]"
    # tanh(.) - 5 < 0 everywhere: every output value is NaN.
    assert origin.outputs[0].summary.nan_count == 32
    assert origin.outputs[0].summary.count == 32
    # The NaN then reached the parent Sequential, every later block, and the model.
    later = [f"{j}.linear" for j in range(k + 1, 12)]
    assert origin.propagated_to[0] == str(k)
    for path in [*later, ROOT_PATH]:
        assert path in origin.propagated_to
    assert f"{k}.0" not in origin.propagated_to and f"{k}.2" not in origin.propagated_to
    assert_no_hooks(model)


def test_in_place_log_still_reports_finite_inputs() -> None:
    class InPlaceLog(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sub_(3).log_()

    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), InPlaceLog(), nn.Linear(4, 2))
    origin = find_nonfinite_origin(model, lambda: model(torch.randn(2, 4)))
    assert origin is not None and origin.module_path == "2"
    assert not origin.input_nonfinite
    # The input was finite before the call; the call changed it in place, and says so.
    assert origin.inputs_modified_in_place is True
    assert origin.inputs[0].summary.nan_count == 8
    assert origin.outputs[0].summary.nan_count == 8


def test_inputs_left_alone_are_summarized_exactly_and_say_so() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), Log(), nn.Linear(4, 2))
    x = torch.randn(2, 4)
    origin = find_nonfinite_origin(model, lambda: model(x))
    assert origin is not None and origin.module_path == "2"
    assert origin.inputs_modified_in_place is False
    expected = torch.tanh(model[0](x)).detach()
    assert origin.inputs[0].summary.mean == pytest.approx(expected.mean().item(), rel=1e-5)
    assert origin.inputs[0].summary.nonfinite_count == 0


def test_inference_mode_inputs_cannot_be_told_apart() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), Log(), nn.Linear(4, 2))
    with torch.inference_mode():
        origin = find_nonfinite_origin(model, lambda: model(torch.randn(2, 4)))
    assert origin is not None and origin.module_path == "2"
    assert origin.inputs_modified_in_place is None


def test_a_finite_sum_that_overflows_is_not_taken_for_infinity() -> None:
    big = torch.full((4,), 3.0e38)  # finite, but its float32 sum overflows
    model = nn.Sequential(nn.Identity(), nn.Identity())
    assert find_nonfinite_origin(model, lambda: model(big)) is None


def test_infinity_counts_too_and_zero_gives_minus_infinity() -> None:
    model = nn.Sequential(nn.ReLU(), nn.Identity(), Log(), nn.Linear(3, 3))
    x = torch.tensor([[-1.0, 2.0, 3.0]])
    origin = find_nonfinite_origin(model, lambda: model(x))
    assert origin is not None and origin.module_path == "2"
    assert origin.outputs[0].summary.neginf_count == 1
    assert origin.outputs[0].summary.max == pytest.approx(math.log(3.0))


def test_input_that_already_holds_nan_reports_the_first_module_and_says_so() -> None:
    model = deep_model(depth=6)
    x = torch.randn(3, 8)
    x[1, 2] = math.nan
    origin = find_nonfinite_origin(model, lambda: model(x))
    assert origin is not None
    assert origin.input_nonfinite
    assert (origin.module_path, origin.call_index) == (ROOT_PATH, 0)
    assert origin.inputs[0].summary.nan_count == 1
    assert origin.outputs[0].summary.nonfinite_count > 0
    assert origin.propagated_to[:2] == ("0.linear", "0")
    assert_no_hooks(model)


def test_nan_made_between_modules_names_the_first_module_that_received_it() -> None:
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Linear(4, 4)
            self.second = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            result: torch.Tensor = self.second(torch.log(self.first(x).abs().neg()))
            return result

    model = Functional()
    origin = find_nonfinite_origin(model, lambda: model(torch.randn(2, 4)))
    # The model's own forward code made the NaN: the model is the origin, with finite inputs.
    assert origin is not None
    assert (origin.module_path, origin.input_nonfinite) == (ROOT_PATH, False)
    assert origin.propagated_to == ("second",)


def test_finite_forward_returns_none_and_leaves_no_hooks() -> None:
    model = deep_model(depth=8)
    assert find_nonfinite_origin(model, lambda: model(torch.randn(2, 8))) is None
    assert_no_hooks(model)


def test_hooks_are_removed_when_run_raises() -> None:
    model = deep_model(depth=4, log_at=2)

    def run() -> None:
        model(torch.randn(2, 8))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        find_nonfinite_origin(model, run)
    assert_no_hooks(model)

    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        find_nonfinite_origin(model, lambda: model(torch.randn(2, 3)))
    assert_no_hooks(model)


def test_outputs_are_unchanged_and_non_tensor_outputs_are_fine() -> None:
    class Mixed(nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, object]:
            return {"y": x * 2, "label": "text", "index": x.argmax()}

    model = nn.Sequential(nn.Linear(3, 3), Mixed())
    x = torch.randn(2, 3)
    expected = model(x)
    seen: list[object] = []
    assert find_nonfinite_origin(model, lambda: seen.append(model(x))) is None
    out = seen[0]
    assert isinstance(out, dict)
    torch.testing.assert_close(out["y"], expected["y"], rtol=0, atol=0)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        find_nonfinite_origin("model", lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="run must be a callable"):
        find_nonfinite_origin(nn.Linear(2, 2), None)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nan_origin_on_cuda() -> None:
    model = deep_model(depth=6, log_at=3).cuda()
    x = torch.randn(4, 8, device="cuda")
    origin = find_nonfinite_origin(model, lambda: model(x))
    assert origin is not None and origin.module_path == "3.2"
    assert origin.outputs[0].summary.nan_count == 32
