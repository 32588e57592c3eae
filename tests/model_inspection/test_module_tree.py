"""module_tree: parent, depth, subtree range and subtree sums of inspect_model's rows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from vinlens.model_inspection import ModuleTree, inspect_model, module_tree


def _model() -> nn.Module:
    model = nn.Module()
    model.stem = nn.Sequential()
    model.stem.add_module("conv", nn.Conv2d(3, 4, 3))
    model.stem.add_module("norm", nn.BatchNorm2d(4))
    model.head = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    return model


def test_tree_of_a_small_model() -> None:
    metadata = inspect_model(_model())
    tree = module_tree(metadata)
    assert isinstance(tree, ModuleTree)
    assert tree.paths == ("<root>", "stem", "stem.conv", "stem.norm", "head", "head.0", "head.1")
    assert tree.parent == (-1, 0, 1, 1, 0, 4, 4)
    assert tree.depth == (0, 1, 2, 2, 1, 2, 2)
    assert tree.subtree_end == (7, 4, 3, 4, 7, 6, 7)
    direct = [m.direct_parameters for m in metadata.modules]
    assert tree.subtree_parameters[0] == sum(direct) == metadata.total_parameters
    assert tree.subtree_parameters[1] == direct[2] + direct[3]
    assert tree.subtree_parameters[4] == direct[6]
    assert tree.subtree_paths("stem") == ("stem", "stem.conv", "stem.norm")
    assert tree.subtree_paths("head.1") == ("head.1",)
    assert tree.subtree_paths("<root>") == tree.paths
    with pytest.raises(KeyError, match="'nope'"):
        tree.subtree_paths("nope")


def test_tied_weights_count_under_both_owners() -> None:
    model = nn.Module()
    model.a = nn.Linear(3, 3, bias=False)
    model.b = nn.Linear(3, 3, bias=False)
    model.b.weight = model.a.weight
    metadata = inspect_model(model)
    tree = module_tree(metadata)
    assert metadata.total_parameters == 9
    assert tree.subtree_parameters == (18, 9, 9)


def test_empty_record_and_bad_input() -> None:
    with pytest.raises(TypeError, match=r"ModelMetadata.*builtins\.str"):
        module_tree("model")  # type: ignore[arg-type]
    metadata = inspect_model(nn.Identity())
    assert module_tree(metadata).subtree_end == (1,)


@st.composite
def _nested(draw: st.DrawFn, depth: int = 0) -> nn.Module:
    module = nn.Module()
    children = draw(st.integers(0, 3 if depth < 3 else 0))
    for k in range(children):
        if draw(st.booleans()):
            module.add_module(f"c{k}", draw(_nested(depth + 1)))
        else:
            module.add_module(f"c{k}", nn.Linear(1, draw(st.integers(1, 3))))
    return module


@settings(max_examples=60, deadline=None)
@given(_nested())
def test_ranges_are_exactly_the_registered_descendants(model: nn.Module) -> None:
    metadata = inspect_model(model)
    tree = module_tree(metadata)
    for i, path in enumerate(tree.paths):
        below = [p for p in tree.paths if path == "<root>" or p.startswith(path + ".")]
        inside = [p for p in tree.paths[i : tree.subtree_end[i]] if p != path]
        assert inside == [p for p in below if p != path]
        expected_parent = "<root>" if "." not in path else path.rpartition(".")[0]
        if path != "<root>":
            assert tree.paths[tree.parent[i]] == expected_parent
            assert tree.depth[i] == path.count(".") + 1
        rows = range(i, tree.subtree_end[i])
        assert tree.subtree_parameters[i] == sum(
            metadata.modules[r].direct_parameters for r in rows
        )
