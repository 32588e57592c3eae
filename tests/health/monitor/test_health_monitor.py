"""TrainingMonitor: gated faults found at their step, history equal to torch's norms."""

from __future__ import annotations

import math

import pytest
import torch
from health_models import NanBackward, RandomFault
from torch import nn

from vinlens.health import (
    HISTORY_SAMPLES,
    MonitorTotals,
    NonFiniteEvent,
    NonFiniteGradientError,
    TrainingMonitor,
)
from vinlens.hooks import leftover_hooks


@pytest.mark.parametrize("seed", range(5))
def test_a_randomly_gated_fault_is_found_at_its_step_every_time(seed: int) -> None:
    torch.manual_seed(seed)
    fault = RandomFault(0.15)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), fault, nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = TrainingMonitor(model, every=4, on_nonfinite="record")
    x = torch.randn(5, 4)
    first_draws: list[bool] = []
    for _ in range(30):

        def step() -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            return loss

        calls = len(fault.fired)
        loss = monitor.run_step(step)
        assert isinstance(loss, torch.Tensor)
        first_draws.append(fault.fired[calls])
        if first_draws[-1]:
            # Replayed once, and the restored generator drew the same fault again.
            assert fault.fired[calls:] == [True, True]
        else:
            assert len(fault.fired) == calls + 1
            optimizer.step()
    expected = [step for step, fired in enumerate(first_draws) if fired]
    assert expected, "the seed should plant at least one fault"
    assert [event.step for event in monitor.events] == expected
    for event in monitor.events:
        assert isinstance(event, NonFiniteEvent) and event.origin is not None
        assert event.origin.module_path == "2"
        assert event.origin.forward_origin is None
    assert monitor.step == 30
    assert monitor.history.steps == tuple(range(0, 30, 4))


def test_raise_stops_before_the_optimizer_step_and_weights_stay_finite() -> None:
    torch.manual_seed(0)
    fault = RandomFault(1.0)
    model = nn.Sequential(nn.Linear(4, 4), fault, nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = TrainingMonitor(model, every=100)
    x = torch.randn(3, 4)
    with pytest.raises(NonFiniteGradientError) as raised:
        monitor.run_step(lambda: model(x).sum().backward())
        optimizer.step()
    error = raised.value
    assert isinstance(error, RuntimeError)
    assert error.event.step == 0 and error.event.origin is not None
    assert error.event.origin.module_path == "1"
    assert "step 0" in str(error) and "'1'" in str(error)
    assert monitor.events == (error.event,)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert leftover_hooks(model.modules()) == []


def test_history_grad_norms_equal_torch_vector_norm_at_the_sampled_steps() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8)), nn.Linear(8, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor = TrainingMonitor(model, every=3)
    x = torch.randn(6, 4)
    expected: dict[int, dict[str, float]] = {}
    outputs: dict[int, float] = {}
    for step_number in range(10):

        def step() -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            return loss

        monitor.run_step(step)
        if step_number % 3 == 0:
            expected[step_number] = {
                path: float(
                    torch.linalg.vector_norm(
                        torch.cat([p.grad.flatten() for p in module.parameters(recurse=False)])
                    )
                )
                for path, module in model.named_modules()
                if path and list(module.parameters(recurse=False))
            }
            with torch.no_grad():
                outputs[step_number] = float(model[1](model[0](x)).std(correction=0))
        optimizer.step()
    history = monitor.history
    assert history.steps == (0, 3, 6, 9)
    assert history.steps_run == 10 and history.samples == 4
    for column, step_number in enumerate(history.steps):
        for path, norm in expected[step_number].items():
            assert history.modules[path].grad_norm[column] == pytest.approx(norm, rel=1e-6)
        assert history.modules["1"].output[column].std == pytest.approx(
            outputs[step_number], rel=1e-6
        )
    # Modules without parameters of their own have no gradient norm.
    assert all(math.isnan(v) for v in history.modules["1"].grad_norm)
    assert all(math.isnan(v) for v in history.modules["2"].grad_norm)
    totals = history.modules["0"].grad_norm_total
    norms = [expected[s]["0"] for s in history.steps]
    assert totals.count == 4
    assert totals.mean == pytest.approx(sum(norms) / 4, rel=1e-6)
    assert totals.max == pytest.approx(max(norms), rel=1e-6)
    assert history.modules["1"].output_total.count == 4 * 6 * 8
    matrix = monitor.history_matrix("grad_norm")
    assert matrix.values.shape == (len(matrix.module_paths), 4)
    assert matrix.values[matrix.module_paths.index("0"), 1] == pytest.approx(expected[3]["0"])


def test_hooks_are_armed_only_on_sampled_steps() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=2, module_paths=["1"])
    x = torch.randn(2, 4)
    seen: list[bool] = []

    def step() -> None:
        seen.append(bool(leftover_hooks(model.modules())))
        model.zero_grad()
        model(x).sum().backward()

    for _ in range(5):
        monitor.run_step(step)
        assert leftover_hooks(model.modules()) == []
    assert seen == [True, False, True, False, True]
    assert tuple(monitor.history.modules) == ("1",)

    def fails() -> None:
        raise ValueError("planted")

    with pytest.raises(ValueError, match="planted"):
        monitor.run_step(fails)  # step 5: unsampled
    with pytest.raises(ValueError, match="planted"):
        monitor.run_step(fails)  # step 6: sampled
    assert leftover_hooks(model.modules()) == []
    assert monitor.step == 7


def test_the_ring_keeps_the_last_samples_and_the_totals_keep_all() -> None:
    model = nn.Linear(2, 1)
    monitor = TrainingMonitor(model, every=1)
    x = torch.ones(1, 2)
    runs = HISTORY_SAMPLES + 5
    for _ in range(runs):
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
    history = monitor.history
    assert history.steps == tuple(range(5, runs))
    assert history.samples == runs
    assert history.modules["<root>"].grad_norm_total.count == runs
    assert len(history.modules["<root>"].output) == HISTORY_SAMPLES


def test_totals_merge_without_changing_the_other() -> None:
    a, b = MonitorTotals(["m"]), MonitorTotals(["m"])
    from vinlens.health import ActivationAccumulator

    a.update((ActivationAccumulator().update("m", torch.ones(3)), [1.0]))
    b.update((ActivationAccumulator().update("m", torch.zeros(2)), [3.0]))
    before = b.finish()
    merged = a.merge(b).finish()
    assert b.finish() == before
    assert merged["m"].grad_norm.count == 2 and merged["m"].grad_norm.mean == 2.0
    assert merged["m"].grad_norm.std == 1.0
    assert merged["m"].output.count == 5


def test_bad_arguments_are_refused() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="every"):
        TrainingMonitor(model, every=0)
    with pytest.raises(ValueError, match="on_nonfinite"):
        TrainingMonitor(model, on_nonfinite="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown module path"):
        TrainingMonitor(model, module_paths=["nope"])
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        TrainingMonitor(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        TrainingMonitor(model).run_step(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="field"):
        TrainingMonitor(model).history_matrix("nope")  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gated_fault_replays_with_the_cuda_generator() -> None:
    torch.manual_seed(3)

    class CudaFault(RandomFault):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            fire = bool(torch.rand((), device=x.device) < self.rate)
            self.fired.append(fire)
            out: torch.Tensor = NanBackward.apply(h) if fire else h
            return out

    fault = CudaFault(0.3)
    model = nn.Sequential(nn.Linear(4, 4), fault, nn.Linear(4, 1)).cuda()
    monitor = TrainingMonitor(model, every=5, on_nonfinite="record")
    x = torch.randn(5, 4, device="cuda")
    first: list[bool] = []
    for _ in range(20):
        calls = len(fault.fired)
        monitor.run_step(lambda: (model.zero_grad(), model(x).sum().backward()))
        first.append(fault.fired[calls])
    assert [e.step for e in monitor.events] == [i for i, f in enumerate(first) if f]
    assert all(e.origin is not None and e.origin.module_path == "1" for e in monitor.events)


def test_half_and_double_gradients_whose_norm_overflows_float16_are_finite() -> None:
    model = nn.Sequential(nn.Linear(100, 100).half(), nn.Linear(2, 2).double())
    monitor = TrainingMonitor(model, every=1)

    def step() -> None:
        for parameter in model.parameters():
            parameter.grad = torch.full_like(parameter, 1000.0)  # float16 norm 1e5 > 65504

    monitor.run_step(step)
    assert monitor.events == ()
    norm = monitor.history.modules["0"].grad_norm[0]
    assert norm == pytest.approx(1000.0 * math.sqrt(100 * 100 + 100), rel=1e-3)
    model[1].weight.grad = None

    def bad() -> None:
        step()
        model[1].bias.grad[0] = math.inf  # type: ignore[index]

    with pytest.raises(NonFiniteGradientError):
        monitor.run_step(bad)


class NanGrad(nn.Module):
    """A finite forward whose backward makes NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = NanBackward.apply(x)
        return out


def _bn_model() -> nn.Sequential:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), NanGrad(), nn.Linear(6, 1))


def test_a_replayed_step_updates_buffers_grads_and_every_generator_once() -> None:
    import random

    import numpy as np

    x = torch.randn(8, 4)

    def run(monitored: bool) -> tuple[dict[str, torch.Tensor], list[torch.Tensor], tuple]:
        model = _bn_model()
        random.seed(11)
        np.random.seed(11)
        torch.manual_seed(11)

        def step() -> None:
            model.zero_grad(set_to_none=False)  # in place: a replay would overwrite these
            scale = 1.0 + random.random() + float(np.random.rand())
            (model(x * scale) * torch.rand(())).sum().backward()

        if monitored:
            monitor = TrainingMonitor(model, every=1000, on_nonfinite="record")
            monitor.run_step(step)
            assert [event.step for event in monitor.events] == [0]
            origin = monitor.events[0].origin
            assert origin is not None and origin.module_path == "2"
        else:
            step()
        after = (random.random(), float(np.random.rand()), float(torch.rand(())))
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return dict(model.state_dict()), grads, after

    plain_state, plain_grads, plain_after = run(False)
    state, grads, after = run(True)
    assert int(state["1.num_batches_tracked"]) == 1  # the replay's forward is not counted
    assert state.keys() == plain_state.keys()
    for name, value in plain_state.items():
        torch.testing.assert_close(state[name], value, equal_nan=True, msg=name)
    assert len(grads) == len(plain_grads)
    for grad, plain in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(grad, plain, equal_nan=True)
    # Each generator advanced by one step's draws, not two.
    assert after == plain_after


def test_a_gradient_the_loss_made_non_finite_is_reported_as_entering_the_model() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1), nn.Identity())
    monitor = TrainingMonitor(model, every=100)
    x = torch.randn(3, 4)
    # d sqrt(u)/du is infinite at u = 0, and 0 * inf is NaN: the loss makes the NaN.
    with pytest.raises(NonFiniteGradientError, match="entered the model") as raised:
        monitor.run_step(lambda: (model(x) * 0).sqrt().sum().backward())
    origin = raised.value.event.origin
    assert origin is not None and origin.entered_nonfinite
    assert origin.module_path == "3" and origin.parameter_paths == ()
    # A module that makes the NaN itself is not "entered".
    fault = nn.Sequential(nn.Linear(4, 4), NanGrad(), nn.Linear(4, 1))
    with pytest.raises(NonFiniteGradientError, match="first made in '1'") as raised:
        TrainingMonitor(fault).run_step(lambda: fault(x).sum().backward())
    assert raised.value.event.origin is not None
    assert not raised.value.event.origin.entered_nonfinite


def test_a_parameter_unfrozen_after_construction_is_checked_and_sampled() -> None:
    """Issue 30.8: a parameter frozen at construction and unfrozen later is still watched."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    for parameter in model[1].parameters():
        parameter.requires_grad_(False)
    monitor = TrainingMonitor(model, every=1, on_nonfinite="record")
    for parameter in model[1].parameters():
        parameter.requires_grad_(True)
    x = torch.randn(3, 4)
    monitor.run_step(lambda: model(x).sum().backward())
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model[1].parameters()]))
    assert monitor.history.modules["1"].grad_norm[-1] == pytest.approx(float(norm), rel=1e-6)
    model.zero_grad()

    def poisoned() -> None:
        model(x).sum().backward()
        assert model[1].bias.grad is not None
        model[1].bias.grad[0] = math.nan  # only the once-frozen parameter goes bad

    monitor.run_step(poisoned)
    assert [event.step for event in monitor.events] == [1]
    assert leftover_hooks(model.modules()) == []


def test_sparse_embedding_gradients_are_checked_and_their_norm_recorded() -> None:
    """Issue 30.8: nn.Embedding(sparse=True) gradients (repeated indices summed)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1))
    monitor = TrainingMonitor(model, every=1, on_nonfinite="record")
    x = torch.tensor([1, 2, 2, 3])
    monitor.run_step(lambda: model(x).sum().backward())
    grad = model[0].weight.grad
    assert grad is not None and grad.is_sparse
    norm = torch.linalg.vector_norm(grad.to_dense())
    assert monitor.history.modules["0"].grad_norm[-1] == pytest.approx(float(norm), rel=1e-6)
    assert monitor.events == ()
    model.zero_grad()
    monitor.run_step(lambda: (model(x).sum() * math.inf).backward())
    assert [event.step for event in monitor.events] == [1]
    assert leftover_hooks(model.modules()) == []
