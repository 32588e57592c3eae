"""ModuleTableWidget: binary table payload, tree structure, selection rules, export."""

import json

import pytest
import torch
import traitlets
from hypothesis import given, settings
from hypothesis import strategies as st
from payload_decode import table_column
from torch import nn

from vinlens.model_inspection import inspect_model
from vinlens.widgets._payload import payload_nbytes, split_buffers
from vinlens.widgets.module_table import ModuleTableWidget, module_table_payload


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.norm(self.conv(x))


def small_model() -> nn.Module:
    model = nn.Sequential()
    model.add_module("stem", Block())
    model.add_module("head", nn.Sequential(nn.Flatten(), nn.Linear(4 * 6 * 6, 2)))
    model.head[1].weight.requires_grad_(False)
    model.eval()
    model.stem.train()
    return model


def column(table, name):
    values = table_column(table, name)
    return values if isinstance(values, list) else values.tolist()


def test_payload_is_binary_columns_with_tree_structure():
    model = small_model()
    widget = ModuleTableWidget(model)
    table = widget.modules
    paths = column(table, "path")
    assert paths == [name or "<root>" for name, _ in model.named_modules()]
    assert table["$table"]["length"] == len(paths)
    # every column is raw bytes: nothing per-row crosses as JSON
    content, buffers = split_buffers(table)
    assert len(json.dumps(content)) < 2200 and len(buffers) == 11
    parent = column(table, "parent")
    depth = column(table, "depth")
    end = column(table, "subtree_end")
    i = paths.index
    assert parent[i("<root>")] == -1 and depth[i("<root>")] == 0
    assert parent[i("stem.conv")] == i("stem") and depth[i("stem.conv")] == 2
    assert parent[i("head")] == i("<root>")
    assert end[i("<root>")] == len(paths)
    assert paths[i("stem") : end[i("stem")]] == ["stem", "stem.conv", "stem.norm"]
    assert end[i("head.1")] == i("head.1") + 1
    types = widget.model_summary["types"]
    assert types[column(table, "type")[i("head.1")]] == "torch.nn.modules.linear.Linear"
    assert column(table, "direct_parameters")[i("head.1")] == 4 * 6 * 6 * 2 + 2
    assert column(table, "trainable_parameters")[i("head.1")] == 2
    # parents carry the total of their subtree beside their own count
    subtree = column(table, "subtree_parameters")
    direct = column(table, "direct_parameters")
    assert subtree[i("<root>")] == sum(direct) == inspect_model(model).total_parameters
    assert subtree[i("head")] == direct[i("head.1")] and direct[i("head")] == 0
    assert subtree[i("stem")] == direct[i("stem.conv")] + direct[i("stem.norm")]
    assert subtree[i("head.1")] == direct[i("head.1")]
    assert column(table, "direct_buffers")[i("stem.norm")] == 4 + 4 + 1
    training = column(table, "training")
    assert training[i("stem.conv")] is True and training[i("head")] is False
    summary = widget.model_summary
    meta = inspect_model(model)
    assert summary["total_parameters"] == meta.total_parameters
    assert summary["trainable_parameters"] == meta.trainable_parameters
    assert summary["module_count"] == len(paths)


def test_binary_payload_is_much_smaller_than_per_row_json():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.ReLU()) for _ in range(300)])
    meta = inspect_model(model)
    table, _ = module_table_payload(meta)
    as_json = json.dumps([
        {"path": m.path, "module_type": m.module_type, "direct_parameters": m.direct_parameters,
         "trainable_parameters": m.trainable_parameters, "direct_buffers": m.direct_buffers,
         "training": m.training} for m in meta.modules
    ])  # fmt: skip
    assert payload_nbytes(table) < len(as_json) / 2


def test_selected_paths_python_side_validation_and_order():
    widget = ModuleTableWidget(small_model())
    widget.selected_paths = ["head.1", "stem", "head.1"]
    assert widget.selected_paths == ["stem", "head.1"]  # table order, no duplicates
    with pytest.raises(
        traitlets.TraitError, match=r"unknown module path\(s\) 'stem.con'.*did you mean 'stem.conv'"
    ):
        widget.selected_paths = ["stem.con"]
    assert widget.selected_paths == ["stem", "head.1"]
    widget.selected_paths = []
    widget.select_subtree("stem")
    assert widget.selected_paths == ["stem", "stem.conv", "stem.norm"]
    with pytest.raises(KeyError, match="nope"):
        widget.select_subtree("nope")


def test_browser_selection_updates_and_hostile_values_never_raise():
    widget = ModuleTableWidget(small_model())
    widget.set_state({"selected_paths": ["head", "stem.norm"]})
    assert widget.selected_paths == ["stem.norm", "head"]  # normalised to table order
    assert widget.error == ""
    # stale or hostile entries from a browser are dropped and reported, not raised
    widget.set_state({"selected_paths": ["head", 5, {"x": 1}, "gone"]})
    assert widget.selected_paths == ["head"]
    assert "unknown module path" in widget.error and "'gone'" in widget.error
    widget.set_state({"tree_view": "not a bool"})
    assert widget.tree_view is True and "tree_view" in widget.error
    widget.set_state({"selected_paths": "head"})  # not a list at all
    assert widget.selected_paths == ["head"]


def test_refresh_picks_up_mode_changes_and_keeps_valid_selection():
    model = small_model()
    widget = ModuleTableWidget(model, selected_paths=["stem.conv"])
    assert column(widget.modules, "training")[2] is True
    model.eval()
    reply = widget.run_command("refresh")
    assert reply["kind"] == "result"
    assert not any(column(widget.modules, "training"))
    assert widget.selected_paths == ["stem.conv"]


def test_rejects_non_modules_and_unknown_commands():
    with pytest.raises(TypeError, match=r"a torch\.nn\.Module, got builtins\.str"):
        ModuleTableWidget("resnet")
    widget = ModuleTableWidget(nn.Linear(2, 2))
    reply = widget.run_command("explode", {"x": 1})
    assert reply["kind"] == "error" and "unknown command 'explode'" in reply["message"]
    assert "refresh" in reply["message"]


def test_hostile_module_names_cross_as_plain_utf8():
    model = nn.Module()
    hostile = "<img src=x onerror=__pwned=1>"
    model.add_module(hostile, nn.Linear(1, 1))
    model.add_module("<script>__pwned=2</script>", nn.ReLU())
    widget = ModuleTableWidget(model)
    assert column(widget.modules, "path") == ["<root>", hostile, "<script>__pwned=2</script>"]


def test_export_methods(tmp_path):
    widget = ModuleTableWidget(small_model())
    rows = widget.to_rows()
    assert rows[0]["path"] == "<root>" and set(rows[0]) >= {"module_type", "direct_parameters"}
    path = widget.export(tmp_path / "modules.csv")
    lines = path.read_text().splitlines()
    assert lines[0].split(",")[:2] == ["path", "module_type"] and len(lines) == len(rows) + 1
    frame = widget.to_dataframe()
    assert list(frame["path"]) == [r["path"] for r in rows]


def test_shared_modules_and_lazy_layers():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared, nn.LazyLinear(4))
    widget = ModuleTableWidget(model)
    paths = column(widget.modules, "path")
    assert paths == ["<root>", "0", "1", "3"]  # named_modules lists a shared module once
    assert column(widget.modules, "direct_parameters")[-1] == 0
    assert column(widget.modules, "subtree_end") == [4, 2, 3, 4]
    model(torch.zeros(1, 3))
    widget.refresh()
    assert column(widget.modules, "direct_parameters")[-1] == 16


def test_counts_beyond_int32_survive_the_payload():
    big = nn.Linear(2**16, 2**16, device="meta")  # 4.3e9 parameters, no memory
    widget = ModuleTableWidget(nn.Sequential(big, nn.Linear(2, 2)))
    params = column(widget.modules, "direct_parameters")
    assert params == [0, 2**32 + 2**16, 6]
    assert widget.model_summary["total_parameters"] == 2**32 + 2**16 + 6


@settings(max_examples=40, deadline=None)
@given(st.recursive(st.just(0), lambda kids: st.lists(kids, max_size=4), max_leaves=30))
def test_tree_columns_match_the_paths_for_random_trees(shape):
    def build(node) -> nn.Module:
        if not isinstance(node, list):
            return nn.ReLU()
        module = nn.Module()
        for index, child in enumerate(node):
            module.add_module(f"m{index}", build(child))
        return module

    model = build(shape)
    table, _ = module_table_payload(inspect_model(model))
    paths = column(table, "path")
    parent, depth, end = (column(table, name) for name in ("parent", "depth", "subtree_end"))
    for i, path in enumerate(paths):
        below = [p for p in paths if path == "<root>" or p.startswith(path + ".")]
        assert paths[i : end[i]] == ([path, *below] if path != "<root>" else paths)
        if path == "<root>":
            assert parent[i] == -1 and depth[i] == 0
        else:
            expected_parent = path.rpartition(".")[0] or "<root>"
            assert paths[parent[i]] == expected_parent and depth[i] == path.count(".") + 1
