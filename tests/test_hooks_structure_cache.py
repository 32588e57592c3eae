"""The walk and the filing of taps are kept per model structure: reused while nothing
changed, and never once a module was added, removed or replaced, or gained hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from vinlens.health.summaries import labelled_modules
from vinlens.hooks import HookSet, leftover_hooks, module_walk
from vinlens.model_inspection import capture_model


class Activations(nn.ModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = layer(x)
        return x


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 4)), Activations([nn.Tanh()])
    )


def _add(model: nn.Sequential) -> None:
    model[1].extra = nn.Identity()


def _remove(model: nn.Sequential) -> None:
    del model[1][0]


def _replace(model: nn.Sequential) -> None:
    model[0] = nn.Linear(4, 4)


def _insert(model: nn.Sequential) -> None:
    model[2].insert(0, nn.Sigmoid())  # writes the table directly, no setattr


def _reassign_table(model: nn.Sequential) -> None:
    model[1]._modules = {"only": nn.GELU()}


def _grow_a_leaf(model: nn.Sequential) -> None:
    model[0]._modules["inner"] = nn.Identity()  # a leaf's own table, written directly


def _swap_names(model: nn.Sequential) -> None:
    table = model[1]._modules
    first, second = table["0"], table["1"]
    table["0"], table["1"] = second, first


CHANGES: dict[str, Callable[[nn.Sequential], None]] = {
    "add": _add,
    "remove": _remove,
    "replace": _replace,
    "insert": _insert,
    "reassign": _reassign_table,
    "grow_leaf": _grow_a_leaf,
    "swap": _swap_names,
}


def _pairs(walk: list[tuple[str, nn.Module]]) -> list[tuple[str, int]]:
    return [(name, id(module)) for name, module in walk]


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_walk_follows_every_change_of_the_tree(change: str) -> None:
    model = _model()
    assert _pairs(module_walk(model)) == _pairs(list(model.named_modules()))
    assert _pairs(module_walk(model)) == _pairs(list(model.named_modules()))  # reused
    CHANGES[change](model)
    assert _pairs(module_walk(model)) == _pairs(list(model.named_modules()))
    # The engines' labels come from the same walk.
    expected = [(name or "<root>", id(m)) for name, m in model.named_modules()]
    assert [(p, id(m)) for p, m in labelled_modules(model, None)] == expected


def test_a_capture_after_a_replaced_layer_hooks_the_new_layer() -> None:
    model = _model()
    x = torch.randn(2, 4)
    with capture_model(model) as first:
        model(x)
    model[1][1] = nn.Linear(4, 4)
    old = model[1][1]
    with capture_model(model) as second:
        model(x)
    outputs = {s.module_path for s in second.snapshots if s.direction == "output"}
    assert "1.1" in outputs and {s.module_path for s in first.snapshots} == {
        s.module_path for s in second.snapshots
    }
    assert leftover_hooks(model.modules()) == [] and old is model[1][1]


def _outputs(model: nn.Module, targets: list[tuple[str, nn.Module]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def post(label: str, _args: tuple[Any, ...], output: Any) -> None:
        seen[label] = output

    with HookSet() as hooks:
        hooks.hook_modules(targets, post=post)
        model(torch.ones(1, 4))
    return seen


def test_a_filing_is_not_reused_once_a_module_gains_hooks_or_a_forward() -> None:
    model = _model()
    targets = labelled_modules(model, None)
    plain = _outputs(model, targets)
    assert _outputs(model, targets).keys() == plain.keys()  # the filing reused

    # An instance forward hook changes the output: ours must run after it and see it.
    handle = model[0].register_forward_hook(lambda _m, _a, out: out * 0.0)
    hooked = _outputs(model, targets)
    assert torch.count_nonzero(hooked["0"]) == 0
    handle.remove()

    # An instance forward of its own: a tap would never see its calls.
    model[1][1].forward = lambda x: torch.full_like(x, 7.0)  # type: ignore[method-assign]
    own = _outputs(model, targets)
    assert torch.equal(own["1.1"], torch.full((1, 4), 7.0))
    del model[1][1].forward
    assert torch.equal(_outputs(model, targets)["1.1"], plain["1.1"])
    assert leftover_hooks(model.modules()) == []
