"""ModuleSelection: one selection shared by the module table, snapshot browser and others."""

import pytest
import torch
import traitlets
from torch import nn

from vinlens.widgets import ModuleSelection, ModuleTableWidget, SnapshotBrowserWidget
from vinlens.widgets._selection import link_single_path


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 2)))


def test_a_module_picked_in_one_widget_is_picked_in_all():
    model = net()
    picked = ModuleSelection()
    table = ModuleTableWidget(model, selection=picked)
    browser = SnapshotBrowserWidget(model, lambda: model(torch.ones(1, 4)), selection=picked)
    assert table.selection is picked and browser.selection is picked
    table.selected_paths = ["2.0"]
    assert picked.paths == ["2.0"] and browser.selected_paths == ["2.0"]
    # a click in the browser's view arrives as a browser update of selected_paths
    browser.set_state({"selected_paths": ["0", "2"]})
    assert picked.paths == ["0", "2"] and table.selected_paths == ["0", "2"]
    picked.paths = ["1"]
    assert table.selected_paths == ["1"] == browser.selected_paths
    picked.clear()
    assert table.selected_paths == [] == browser.selected_paths
    # the capture follows the shared selection
    picked.paths = ["2.0"]
    browser.run_command("capture", {})
    assert {s.module_path for s in browser.snapshots} == {"2.0"}


def test_paths_a_widget_does_not_know_stay_in_the_shared_selection():
    picked = ModuleSelection()
    small = ModuleTableWidget(nn.Sequential(nn.Linear(2, 2)), selection=picked)
    big = ModuleTableWidget(net(), selection=picked)
    picked.paths = ["2.0", "0"]
    assert big.selected_paths == ["0", "2.0"]
    assert small.selected_paths == ["0"]  # 2.0 is not a module of the small model
    assert picked.paths == ["2.0", "0"]  # ...and the small table did not erase it
    assert small.error == ""  # not an error: the shared selection spans models


def test_defaults_and_the_linked_module_table_share_one_selection():
    model = net()
    a, b = ModuleTableWidget(model), ModuleTableWidget(model)
    assert a.selection is not b.selection  # by default each widget has its own
    a.selected_paths = ["0"]
    assert b.selected_paths == []
    seeded = ModuleTableWidget(model, selected_paths=["1"])
    assert seeded.selection.paths == ["1"]  # a fresh selection starts from the widget
    browser = SnapshotBrowserWidget(model, lambda: None, module_table=a)
    assert browser.selection is a.selection and browser.selected_paths == ["0"]
    a.selected_paths = ["2"]
    assert browser.selected_paths == ["2"]
    with pytest.raises(ValueError, match="either module_table or selection"):
        SnapshotBrowserWidget(model, lambda: None, module_table=a, selection=ModuleSelection())
    with pytest.raises(TypeError, match="ModuleSelection"):
        ModuleTableWidget(model, selection=["0"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of module paths"):
        ModuleSelection("0")


def test_a_one_path_trait_follows_the_latest_acceptable_pick():
    class Viewer(traitlets.HasTraits):
        layer = traitlets.Unicode("")

    picked = ModuleSelection()
    table = ModuleTableWidget(net(), selection=picked)
    viewer = Viewer()
    link = link_single_path(picked, viewer, "layer", accept=lambda p: p in {"0", "2.0"})
    table.selected_paths = ["0", "1"]
    assert viewer.layer == "0"  # "1" is not a layer the viewer can use
    table.selected_paths = ["1"]
    assert viewer.layer == "0" and picked.paths == ["1"]  # kept, and no echo back
    viewer.layer = "2.0"
    assert picked.paths == ["2.0"] and table.selected_paths == ["2.0"]
    viewer.layer = ""
    assert picked.paths == [] and table.selected_paths == []
    link.unlink()
    picked.paths = ["0"]
    assert viewer.layer == ""
