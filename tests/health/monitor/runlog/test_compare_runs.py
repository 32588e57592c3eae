"""compare_runs on a small net whose twin runs differ in one planted thing at one step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import (
    ModuleDivergence,
    RunDivergence,
    TrainingMonitor,
    compare_runs,
    open_run,
    relative_difference,
)


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


class Plantable(nn.Linear):
    """A linear layer whose output can be bumped (``bump``: added, ``factor``: multiplied)
    and whose incoming gradient can be scaled (``grad_scale``)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.bump = 0.0
        self.factor = 1.0
        self.grad_scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if self.bump or self.factor != 1.0:
            out = out * self.factor + self.bump
        if self.grad_scale != 1.0:
            out = _ScaleGrad.apply(out, self.grad_scale)
        return out


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Plantable(4, 8)
        self.block = nn.Sequential(Plantable(8, 8), nn.Tanh(), Plantable(8, 8))
        self.head = Plantable(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.block(self.stem(x))))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator)


def train(
    log_dir: Path,
    *,
    seed: int = 0,
    steps: int = 10,
    every: int = 1,
    plant: str | None = None,
    at: int = 0,
    model: nn.Module | None = None,
) -> Path:
    """Train ``steps`` SGD steps, logging to ``log_dir``; ``plant`` changes one thing at
    step ``at``: ``"data"`` (that step's batch), ``"forward"`` (``block.0``'s output bumped
    from then on), ``"tiny"`` (``block.0``'s output times 1 + 1e-7 from then on),
    ``"backward"`` (``block.2``'s incoming gradient doubled at that step), ``"optimizer"``
    (the learning rate of the head's parameter group after that step's gradients)."""
    torch.manual_seed(seed)
    net = Net() if model is None else model
    inner: Any = getattr(net, "_orig_mod", net)
    head = list(inner.head.parameters())
    rest = [p for p in inner.parameters() if all(p is not h for h in head)]
    optimizer = torch.optim.SGD([{"params": rest}, {"params": head}], lr=0.05)
    with TrainingMonitor(net, every=every, log_dir=log_dir) as monitor:
        for step in range(steps):
            x, y = batch(step)
            if plant == "data" and step == at:
                x[0, 0] += 0.5
            if plant == "forward" and step == at:
                inner.block[0].bump = 1e-3
            if plant == "tiny" and step == at:
                inner.block[0].factor = 1.0 + 1e-7
            inner.block[2].grad_scale = 2.0 if plant == "backward" and step == at else 1.0

            def run(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(net(x), y)
                loss.backward()
                return loss

            monitor.run_step(run)
            if plant == "optimizer" and step == at:
                optimizer.param_groups[1]["lr"] = 0.07
            optimizer.step()
    return log_dir


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("base") / "run")


def test_fingerprints_are_logged_and_read_back(base: Path) -> None:
    run = open_run(base)
    prints = run.fingerprints()
    assert prints.steps.tolist() == list(range(10))
    assert prints.module_paths == run.module_paths
    torch.manual_seed(0)
    fresh = Net()
    column = prints.module_paths.index("block.0")
    own = torch.cat([p.detach().double().flatten() for p in fresh.block[0].parameters()])
    assert prints.weight_norm[0, column] == pytest.approx(float(own.norm()), rel=1e-12)
    # A container owns no parameters: NaN, not its children's norm.
    assert np.isnan(prints.weight_norm[:, prints.module_paths.index("block")]).all()
    assert (prints.grad_norm[:, column] > 0).all()
    x, _ = batch(3)
    ((shape, dtype, total, squares),) = prints.inputs[3]
    assert (shape, dtype) == ((16, 4), "float32")
    assert total == float(x.double().sum())
    assert squares == float(x.double().square().sum())
    # A container's output comes after its children's; gradients come head first.
    order = prints.output_order
    assert order.index("block.0") < order.index("block.2") < order.index("block")
    assert order[-1] == "<root>"
    assert prints.grad_order[0] == "head"
    assert prints.grad_order.index("block.2") < prints.grad_order.index("block.0")


def test_one_seed_is_identical(base: Path, tmp_path: Path) -> None:
    result = compare_runs(base, train(tmp_path / "b"))
    assert isinstance(result, RunDivergence)
    assert result.identical and result.first_step is None and result.cause is None
    assert result.steps_compared == 10 and result.ranks == (0,)
    assert (
        all(m == ModuleDivergence(m.path, None, None, None) for m in result.modules)
        and result.modules
    )
    assert result.note is None


def test_another_seed_is_init(base: Path, tmp_path: Path) -> None:
    result = compare_runs(base, train(tmp_path / "b", seed=1))
    assert (result.first_step, result.cause, result.module, result.rank) == (0, "init", "stem", 0)
    assert result.field == "weight_norm" and result.value_a != result.value_b


def test_changed_input_is_data(base: Path, tmp_path: Path) -> None:
    result = compare_runs(base, train(tmp_path / "b", plant="data", at=7))
    assert (result.first_step, result.cause, result.module) == (7, "data", None)
    assert result.field == "inputs[0].sum"
    rows = {m.path: m for m in result.modules}
    assert rows["stem"].outputs == 7 and rows["stem"].weights == 8 and rows["stem"].grads == 7


def test_bumped_output_is_forward_naming_the_module(base: Path, tmp_path: Path) -> None:
    result = compare_runs(open_run(base), open_run(train(tmp_path / "b", plant="forward", at=5)))
    assert (result.first_step, result.cause, result.module) == (5, "forward", "block.0")
    assert result.field is not None and result.field.startswith("output.")
    rows = {m.path: m for m in result.modules}
    assert rows["stem"].outputs == 6  # only through the updated weights, a step later
    assert rows["block"].outputs == rows["block.2"].outputs == 5
    assert [m.path for m in result.modules].index("block.0") < [
        m.path for m in result.modules
    ].index("block")


def test_forward_on_an_unsampled_step_says_so(tmp_path: Path) -> None:
    a = train(tmp_path / "a", every=4)
    result = compare_runs(a, train(tmp_path / "b", every=4, plant="forward", at=5))
    assert (result.first_step, result.cause, result.module) == (5, "forward", None)
    assert result.field == "loss"
    assert result.note is not None and "every=1" in result.note


def test_scaled_gradient_is_backward_naming_the_module(base: Path, tmp_path: Path) -> None:
    result = compare_runs(base, train(tmp_path / "b", plant="backward", at=6))
    assert (result.first_step, result.cause, result.module) == (6, "backward", "block.2")
    assert result.field == "grad_norm"
    assert result.value_b == pytest.approx(2 * result.value_a, rel=1e-6)
    rows = {m.path: m for m in result.modules}
    assert rows["head"].grads is None or rows["head"].grads > 6


def test_changed_learning_rate_is_optimizer(base: Path, tmp_path: Path) -> None:
    result = compare_runs(base, train(tmp_path / "b", plant="optimizer", at=4))
    assert (result.first_step, result.cause, result.module) == (5, "optimizer", "head")
    rows = {m.path: m for m in result.modules}
    assert rows["head"].weights == 5 and rows["stem"].weights == 6


def test_tolerance_hides_a_tiny_bump(base: Path, tmp_path: Path) -> None:
    b = train(tmp_path / "b", plant="tiny", at=8)
    exact = compare_runs(base, b)
    assert (exact.first_step, exact.cause, exact.module) == (8, "forward", "block.0")
    # A relative change of 1e-7 in one output of a net of O(1) values stays far below 1e-4
    # relative (plus 1e-6 absolute where a statistic is near zero) over the two steps left.
    assert compare_runs(base, b, rtol=1e-4, atol=1e-6).identical


def test_relative_difference_matrix(base: Path, tmp_path: Path) -> None:
    a, b = open_run(base), open_run(train(tmp_path / "b", plant="optimizer", at=4))
    matrix = relative_difference(a, b, field="weight_norm")
    assert matrix.steps == tuple(range(10))
    assert matrix.values.shape == (len(matrix.module_paths), 10)
    head = matrix.module_paths.index("head")
    assert (matrix.values[:, :5] == 0).all() and matrix.values[head, 5] > 0
    sampled = relative_difference(a, b, field="mean")
    assert sampled.values.shape == matrix.values.shape


def test_refusals(base: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a vinlens run log"):
        compare_runs(base, tmp_path)
    with pytest.raises(ValueError, match="rtol must be a number >= 0"):
        compare_runs(base, base, rtol=-1.0)
    empty = tmp_path / "empty"
    TrainingMonitor(Net(), log_dir=empty).close()  # a run that logged no step
    with pytest.raises(ValueError, match="no step in common"):
        compare_runs(base, empty)


def test_run_diff_exit_codes_and_json(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vinlens.cli import main

    same = train(tmp_path / "same")
    assert main(["run", "diff", str(base), str(same)]) == 0
    assert "identical" in capsys.readouterr().out
    forward = train(tmp_path / "forward", plant="forward", at=5)
    assert main(["run", "diff", str(base), str(forward), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["identical"], report["first_step"], report["cause"]) == (False, 5, "forward")
    assert (report["module"], report["rank"]) == ("block.0", 0)
    rows = {m["path"]: m for m in report["modules"]}
    assert rows["block.0"] == {"path": "block.0", "weights": 6, "outputs": 5, "grads": 5}
    assert main(["run", "diff", str(base), str(forward)]) == 1
    text = capsys.readouterr().out
    assert "step 5, rank 0, cause forward, module block.0" in text
    lines = text.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("module"))) + 2 :]
    assert table[0].split()[0] == "block.0"  # the table is in step order
    assert main(["run", "diff", str(base), str(forward), "--rtol", "1e-2", "--atol", "1e-2"]) == 0
    capsys.readouterr()
    assert main(["run", "diff", str(base), str(tmp_path / "nothing")]) == 2
    assert "is not a vinlens run log" in capsys.readouterr().out
    assert main(["run", "diff", str(base), str(forward), "--rank", "3"]) == 2
    assert "ranks must be among" in capsys.readouterr().out


def _strip_fingerprints(log: Path) -> None:
    """Rewrite a log's segments as a writer without fingerprints wrote them."""
    from vinlens.health.monitor.runlog.format import (
        FINGERPRINTS,
        HEADER_SIZE,
        ORDER,
        iter_records,
    )

    for segment in log.glob("rank-*/seg-*.vlr"):
        data = segment.read_bytes()
        kept = b"".join(
            data[offset - HEADER_SIZE : end]
            for kind, offset, end in iter_records(data)
            if kind not in (FINGERPRINTS, ORDER)
        )
        assert len(kept) < len(data)  # the segment held fingerprints
        segment.write_bytes(kept)


def test_a_log_without_fingerprints_compares_on_what_it_has(base: Path, tmp_path: Path) -> None:
    old = train(tmp_path / "old", plant="forward", at=5)
    _strip_fingerprints(old)
    assert not open_run(old).fingerprints().logged
    result = compare_runs(base, old)
    assert (result.first_step, result.cause, result.module) == (5, "forward", "block.0")
    assert result.note is not None and "without every-step fingerprints" in result.note
    same = train(tmp_path / "same")
    _strip_fingerprints(same)
    assert compare_runs(base, same).identical


def test_runs_with_other_module_paths_compare_on_the_shared_ones(
    base: Path, tmp_path: Path
) -> None:
    class Wider(Net):
        def __init__(self) -> None:
            super().__init__()
            self.extra = nn.Identity()

    torch.manual_seed(0)
    result = compare_runs(base, train(tmp_path / "b", model=Wider()))
    assert result.identical and result.unmatched == ("extra",)
    assert "extra" not in {m.path for m in result.modules}
