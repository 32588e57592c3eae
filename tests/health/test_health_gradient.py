"""find_nonfinite_gradient_origin: planted backward faults name their module and parameter."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vinlens.health import GradientOrigin, find_nonfinite_gradient_origin
from vinlens.hooks import leftover_hooks


class SqrtAtZero(nn.Module):
    """sqrt(x * scale) with one scale entry exactly 0: finite forward, NaN backward."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(width))
        with torch.no_grad():
            self.scale[1] = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x * self.scale)


class NanBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


class CustomNan(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = NanBackward.apply(x)
        return out


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def hooks_left(model: nn.Module) -> list[str]:
    found = leftover_hooks(model.modules())
    for name, parameter in model.named_parameters():
        if parameter._backward_hooks:
            found.append(f"tensor hook on {name}")
        if getattr(parameter, "_post_accumulate_grad_hooks", None):
            found.append(f"post-accumulate-grad hook on {name}")
    return found


def finite(traces: tuple) -> bool:  # type: ignore[type-arg]
    return all(t.summary.nonfinite_count == 0 for t in traces)


@pytest.mark.parametrize("k", [2, 4])
def test_sqrt_at_an_exact_zero_names_module_k_and_its_parameter(k: int) -> None:
    torch.manual_seed(k)
    layers: list[nn.Module] = [nn.Linear(4, 4), nn.Sigmoid(), nn.Linear(4, 4), nn.Sigmoid()]
    # After a Sigmoid the sqrt's argument is >= 0, so the forward stays finite.
    layers.insert(k, SqrtAtZero(4))
    model = nn.Sequential(*layers, nn.Linear(4, 1))
    x = torch.randn(3, 4)
    origin = find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward())
    assert isinstance(origin, GradientOrigin)
    assert origin.module_path == str(k)
    assert origin.call_index == 0
    assert origin.parameter_paths == (f"{k}.scale",)
    assert origin.forward_origin is None
    assert finite(origin.grad_outputs) and origin.grad_outputs[0].tensor_path == "output"
    assert origin.grad_inputs and not finite(origin.grad_inputs)
    assert origin.grad_inputs[0].tensor_path == "args[0]"
    # Every module before it in the forward is reached afterwards, in backward order (the
    # root's input needs no gradient, so nothing non-finite leaves the model).
    assert origin.propagated_to == tuple(str(i) for i in range(k - 1, -1, -1))
    assert hooks_left(model) == []


def test_overflowing_weight_gradient_with_a_finite_input_gradient_names_the_weight() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Scale(1e20), nn.Linear(4, 4), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].weight.mul_(1e-20)  # forward stays ~1; weight grad = 1e20 * 1e20 overflows
    x = torch.randn(3, 4)
    origin = find_nonfinite_gradient_origin(model, lambda: (model(x).sum() * 1e20).backward())
    assert origin is not None
    assert origin.module_path == "2"
    assert origin.parameter_paths == ("2.weight",)
    assert finite(origin.grad_outputs) and finite(origin.grad_inputs)
    assert not math.isfinite(model[2].weight.grad.abs().max().item())
    assert math.isfinite(model[2].bias.grad.abs().max().item())


def test_custom_function_whose_backward_returns_nan() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), CustomNan(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    origin = find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward())
    assert origin is not None
    assert origin.module_path == "2"
    assert origin.parameter_paths == ()
    assert finite(origin.grad_outputs)
    assert origin.grad_inputs[0].summary.nan_count == 12
    assert origin.propagated_to == ("1", "0")


def test_a_finite_step_gives_none_and_leaves_gradients_unchanged() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(144, 2),
    )
    x = torch.randn(2, 3, 8, 8, requires_grad=True)

    def step() -> None:
        model.zero_grad()
        x.grad = None
        model(x).sum().backward()

    step()
    plain = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    assert find_nonfinite_gradient_origin(model, step) is None
    watched = [p.grad for p in model.parameters()] + [x.grad]
    for a, b in zip(plain, watched, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert hooks_left(model) == []


def test_a_forward_nan_gives_the_forward_origin() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Log(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    origin = find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward())
    assert origin is not None and origin.forward_origin is not None
    assert origin.module_path == origin.forward_origin.module_path == "1"
    assert origin.forward_origin.outputs[0].summary.nan_count > 0
    assert not origin.forward_origin.input_nonfinite


def test_a_module_called_twice_names_the_call() -> None:
    class Poisoned(nn.Module):
        def forward(self, x: torch.Tensor, poison: bool = False) -> torch.Tensor:
            out: torch.Tensor = NanBackward.apply(x) if poison else x * 2
            return out

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = nn.Linear(4, 4)
            self.pick = Poisoned()
            self.head = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.pick(self.block(x))
            h = self.pick(self.block(h), poison=True)
            out: torch.Tensor = self.head(h)
            return out

    model = Twice()
    x = torch.randn(2, 4)
    origin = find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward())
    assert origin is not None
    assert (origin.module_path, origin.call_index) == ("pick", 1)
    # block's weight gradient sums both calls: it is non-finite, and block is reached.
    assert origin.propagated_to == ("block",)
    assert origin.parameter_paths == ()


class PoisonedWeight(nn.Module):
    """A linear map whose weight gradient (only) is NaN while ``poison`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4) / 2)
        self.poison = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = NanBackward.apply(self.weight) / 2 if self.poison else self.weight
        out: torch.Tensor = x @ weight.T
        return out


@pytest.mark.parametrize("poisoned_pass", [0, 1, 2])
def test_a_step_of_several_backward_passes_names_the_pass_that_made_it(
    poisoned_pass: int,
) -> None:
    # Gradient accumulation: one forward and one backward per micro-batch in one step.
    # A parameter's gradient belongs to the call of its own backward, not to the path's
    # first call (whose backward ran, finite, one pass earlier).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), PoisonedWeight(), nn.Linear(4, 1))
    batches = torch.randn(3, 2, 4)

    def step() -> None:
        for index, batch in enumerate(batches):
            model[1].poison = index == poisoned_pass
            model(batch).sum().backward()

    origin = find_nonfinite_gradient_origin(model, step)
    assert origin is not None
    assert (origin.module_path, origin.call_index) == ("1", poisoned_pass)
    assert origin.parameter_paths == ("1.weight",)
    assert leftover_hooks(model.modules()) == []


def test_hooks_are_removed_when_the_step_raises() -> None:
    model = nn.Sequential(nn.Linear(4, 4), CustomNan(), nn.Linear(4, 1))
    x = torch.randn(3, 4)

    def step() -> None:
        model(x).sum().backward()
        raise KeyError("planted")

    with pytest.raises(KeyError, match="planted"):
        find_nonfinite_gradient_origin(model, step)
    assert hooks_left(model) == []

    def forward_fails() -> None:
        model(torch.randn(3, 5))

    with pytest.raises(RuntimeError):
        find_nonfinite_gradient_origin(model, forward_fails)
    assert hooks_left(model) == []
    # The model still trains normally afterwards.
    model.zero_grad()
    nn.Sequential(model[0], model[2])(x).sum().backward()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        find_nonfinite_gradient_origin(object(), lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        find_nonfinite_gradient_origin(nn.Linear(2, 2), 3)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sqrt_at_zero() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), SqrtAtZero(4), nn.Linear(4, 1)).cuda()
    x = torch.randn(3, 4, device="cuda")
    origin = find_nonfinite_gradient_origin(model, lambda: model(x).sum().backward())
    assert origin is not None and origin.module_path == "2"
    assert origin.parameter_paths == ("2.scale",)
    assert hooks_left(model) == []
