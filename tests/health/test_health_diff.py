"""compare_models: the perturbed layer is the first divergent path; identical models agree."""

from __future__ import annotations

import copy
import math
import threading

import pytest
import torch
from health_models import assert_no_hooks, deep_model
from torch import nn

from vinlens.health import ModelDiff, ModuleDiff, compare_models
from vinlens.model_inspection import ROOT_PATH


def block(model: nn.Module, index: int) -> nn.Linear:
    """The Linear inside block ``index`` of a deep_model."""
    linear = model.get_submodule(f"{index}.linear")
    assert isinstance(linear, nn.Linear)
    return linear


def run_on(x: torch.Tensor):  # type: ignore[no-untyped-def]
    def run(model: nn.Module) -> torch.Tensor:
        with torch.no_grad():
            result: torch.Tensor = model(x)
        return result

    return run


def test_one_perturbed_layer_is_the_first_divergent_path() -> None:
    model_a = deep_model(depth=10)
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        block(model_b, 6).weight[0, 0] += 0.5
    x = torch.randn(5, 8)
    diff = compare_models(model_a, model_b, run_on(x))
    assert isinstance(diff, ModelDiff) and diff.unpaired_paths == ()
    assert diff.first_divergent_path() == "6.linear"
    paths = [m.module_path for m in diff.modules]
    # Execution order: each block's linear, then the block; the model returns last.
    assert paths[:4] == ["0.linear", "0", "1.linear", "1"] and paths[-1] == ROOT_PATH
    by_path = {m.module_path: m for m in diff.modules}
    for j in range(6):
        assert by_path[f"{j}.linear"].max_abs_diff == 0.0
        assert by_path[f"{j}.linear"].relative_l2 == 0.0
        assert by_path[f"{j}.linear"].cosine == pytest.approx(1.0)
    perturbed = by_path["6.linear"]
    a = model_a[:6](x)
    expected = block(model_b, 6)(a) - block(model_a, 6)(a)
    reference = block(model_a, 6)(a)
    assert perturbed.max_abs_diff == pytest.approx(expected.abs().max().item(), rel=1e-5)
    assert perturbed.relative_l2 == pytest.approx(
        (expected.norm() / reference.norm()).item(), rel=1e-5
    )
    cosine = torch.nn.functional.cosine_similarity(
        reference.reshape(1, -1), block(model_b, 6)(a).reshape(1, -1)
    ).item()
    assert perturbed.cosine == pytest.approx(cosine, rel=1e-5)
    assert perturbed.summary_a.count == perturbed.summary_b.count == 40
    assert perturbed.summary_a.mean == pytest.approx(reference.mean().item(), rel=1e-5)
    # A tolerance above the drift reports nothing divergent at that layer.
    assert diff.first_divergent_path(rtol=10.0) is None
    assert_no_hooks(model_a, model_b)


def test_identical_models_give_zero_drift() -> None:
    model_a = deep_model(depth=5)
    model_b = copy.deepcopy(model_a)
    diff = compare_models(model_a, model_b, run_on(torch.randn(3, 8)))
    assert len(diff.modules) == 11  # 5 blocks + 5 linears + the model
    assert all(isinstance(m, ModuleDiff) for m in diff.modules)
    assert all(m.max_abs_diff == 0 and m.relative_l2 == 0 for m in diff.modules)
    assert all(m.cosine == pytest.approx(1.0) for m in diff.modules)
    assert diff.first_divergent_path() is None
    # A model compared with itself: the same module objects carry both sides' hooks.
    same = compare_models(model_a, model_a, run_on(torch.randn(3, 8)))
    assert [m.module_path for m in same.modules] == [m.module_path for m in diff.modules]
    assert same.first_divergent_path(rtol=0.0) is None
    assert_no_hooks(model_a, model_b)


def test_module_paths_restrict_and_nan_on_one_side_diverges() -> None:
    model_a = deep_model(depth=4)
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        block(model_b, 2).bias[1] = math.nan
    diff = compare_models(model_a, model_b, run_on(torch.randn(2, 8)), module_paths=["1", "2"])
    assert [m.module_path for m in diff.modules] == ["1", "2"]
    assert math.isnan(diff.modules[1].max_abs_diff)
    assert diff.first_divergent_path() == "2"
    assert diff.modules[1].summary_b.nan_count == 2


class TwoWay(nn.Module):
    """Calls its two layers in an order (and a number of times) set per instance."""

    def __init__(self, order: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.order:
            x = (self.first if name == "f" else self.second)(x)
        return x


def test_extra_modules_are_unpaired_and_calls_out_of_step_are_an_error() -> None:
    model_a = deep_model(depth=3)
    model_b = deep_model(depth=4)
    diff = compare_models(model_a, model_b, run_on(torch.randn(2, 8)))
    assert diff.unpaired_paths == ("3", "3.linear")
    assert diff.first_divergent_path() == ROOT_PATH  # one more block before the output
    assert_no_hooks(model_a, model_b)

    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"out of step: model A returned from 'first'"):
        compare_models(TwoWay("fs"), TwoWay("sf"), run_on(x))
    with pytest.raises(ValueError, match=r"model A returned from 'second' .*after model B"):
        compare_models(TwoWay("fs"), TwoWay("f"), run_on(x), module_paths=["first", "second"])
    with pytest.raises(ValueError, match=r"model B called 'second' .*after model A"):
        compare_models(TwoWay("f"), TwoWay("fs"), run_on(x), module_paths=["first", "second"])
    forward_first, second_first = TwoWay("fs"), TwoWay("sf")
    with pytest.raises(ValueError):
        compare_models(forward_first, second_first, run_on(x))
    assert_no_hooks(forward_first, second_first)
    # Restricted to one path, both make one call of it: comparable.
    diff = compare_models(TwoWay("fs"), TwoWay("fs"), run_on(x), module_paths=["second"])
    assert [m.module_path for m in diff.modules] == ["second"]
    with pytest.raises(ValueError, match=r"'3'.*not in model_b"):
        compare_models(deep_model(depth=4), deep_model(depth=3), run_on(x), module_paths=["3"])
    with pytest.raises(ValueError, match="unknown module path"):
        compare_models(forward_first, second_first, run_on(x), module_paths=["nope"])


def test_run_raising_on_either_side_propagates_and_leaves_no_hooks() -> None:
    model_a = deep_model(depth=3)
    model_b = copy.deepcopy(model_a)

    def failing_b(model: nn.Module) -> None:
        model(torch.randn(2, 8))
        if model is model_b:
            raise RuntimeError("loader broke")

    with pytest.raises(RuntimeError, match="loader broke"):
        compare_models(model_a, model_b, failing_b)
    assert_no_hooks(model_a, model_b)

    def failing_a(model: nn.Module) -> None:
        if model is model_a:
            raise KeyError("missing batch")
        model(torch.randn(2, 8))

    with pytest.raises(KeyError, match="missing batch"):
        compare_models(model_a, model_b, failing_a)
    assert_no_hooks(model_a, model_b)
    assert threading.active_count() == 1 or all(
        t.name != "vinlens-compare-model-b" for t in threading.enumerate()
    )


def test_grad_mode_of_the_caller_applies_to_both_forwards() -> None:
    model_a = deep_model(depth=2)
    model_b = copy.deepcopy(model_a)
    modes: list[bool] = []

    def run(model: nn.Module) -> None:
        modes.append(torch.is_grad_enabled())
        model(torch.randn(1, 8))

    with torch.no_grad():
        compare_models(model_a, model_b, run)
    assert modes == [False, False]


def test_bad_arguments_are_refused() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"model_b must be a torch\.nn\.Module"):
        compare_models(model, None, lambda m: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="run must be a callable"):
        compare_models(model, model, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rtol"):
        ModelDiff(modules=()).first_divergent_path(rtol=-1)


class Block(nn.Module):
    """A container returning its child's output tensor, optionally changed in place."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.inner = nn.Linear(6, 6)
        self.in_place = in_place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        if self.in_place:
            y.mul_(3.0)  # the same tensor, changed after the child's hook saw it
        return y


def test_a_container_returning_its_childs_output_reuses_the_pair_unless_changed_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vinlens.health.diff as diff_module

    torch.manual_seed(0)
    model_a = nn.Sequential(Block(in_place=False), Block(in_place=True))
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b[1].inner.weight.add_(0.01)
    compared = []
    original = diff_module._compare_outputs

    def counting(path: str, *args: object) -> ModuleDiff:
        compared.append(path)
        return original(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(diff_module, "_compare_outputs", counting)
    x = torch.randn(3, 6)
    with torch.no_grad():
        diff = compare_models(model_a, model_b, lambda m: m(x))
    by_path = {m.module_path: m for m in diff.modules}
    # "0" returns "0.inner"'s tensor untouched: reused. "1" scaled "1.inner"'s output in
    # place: compared again. The root returns "1"'s tensor untouched: reused.
    assert compared == ["0.inner", "1.inner", "1"]
    for reused, source in (("0", "0.inner"), (ROOT_PATH, "1")):
        assert by_path[reused].summary_a == by_path[source].summary_a
        assert by_path[reused].max_abs_diff == by_path[source].max_abs_diff
        assert by_path[reused].call_index == 0
    with torch.no_grad():
        y_a, y_b = model_a[1].inner(model_a[0](x)), model_b[1].inner(model_b[0](x))
    # The changed tensor is what "1" returned: three times the child's values.
    assert by_path["1"].max_abs_diff == pytest.approx(
        float((3 * y_a - 3 * y_b).abs().max()), rel=1e-5
    )
    assert by_path["1"].summary_a.max == pytest.approx(float((3 * y_a).max()), rel=1e-6)
    assert by_path["1.inner"].summary_a.max == pytest.approx(float(y_a.max()), rel=1e-6)
    assert_no_hooks(model_a, model_b)
