"""vinlens.show(obj) picks the widget that fits obj."""

import pytest
import torch
from pydantic import BaseModel
from torch import nn

import vinlens
from vinlens.model_inspection import capture_model, inspect_model
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store
from vinlens.widgets import (
    ConfigTreeWidget,
    ModuleTableWidget,
    SnapshotTableWidget,
    StoreDashboardWidget,
)
from vinlens.widgets import show as widgets_show


class Config(BaseModel):
    depth: int = 2


def test_configs_models_and_captures():
    assert vinlens.show is not widgets_show  # the top-level one forwards lazily
    widget = vinlens.show(Config(), query="depth")
    assert isinstance(widget, ConfigTreeWidget) and widget.query == "depth"
    model = nn.Sequential(nn.Linear(2, 2))
    table = vinlens.show(model, selected_paths=["0"])
    assert isinstance(table, ModuleTableWidget) and table.selected_paths == ["0"]
    with capture_model(model) as cap:
        model(torch.ones(1, 2))
    view = vinlens.show(cap)
    assert isinstance(view, SnapshotTableWidget) and view.snapshots == cap.snapshots


def test_stores_by_config_or_path(tmp_path):
    store_dir = tmp_path / "store"
    write_synthetic_store(store_dir, SyntheticStoreSpec(num_scenes=1, snippets_per_scene=1))
    by_config = widgets_show(VinOfflineStoreConfig(store_dir=store_dir), max_samples=8)
    assert isinstance(by_config, StoreDashboardWidget)
    for path in (store_dir, str(store_dir)):
        assert isinstance(vinlens.show(path, max_samples=8), StoreDashboardWidget)


def test_anything_else_is_a_clear_error(tmp_path):
    with pytest.raises(TypeError, match=r"cannot show a builtins\.int; it accepts a pydantic"):
        vinlens.show(3)
    with pytest.raises(TypeError, match=r"ModelMetadata.*torch\.nn\.Module"):
        vinlens.show(inspect_model(nn.ReLU()))
    with pytest.raises(FileNotFoundError, match="not an existing directory"):
        vinlens.show(tmp_path / "missing")
    with pytest.raises(TypeError, match="unexpected keyword"):
        vinlens.show(Config(), colour="red")


def test_health_records_name_the_widget_that_shows_them_with_their_model():
    from vinlens.health import collect_activation_stats, compare_models, find_nonfinite_origin

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    x = torch.randn(2, 3)
    stats = collect_activation_stats(model, [x])
    diff = compare_models(model, model, lambda m: m(x))

    def bad() -> None:
        model(torch.full((2, 3), float("nan")))

    origin = find_nonfinite_origin(model, bad)
    assert origin is not None
    for record, argument in ((stats, "stats"), (diff, "diff"), (origin, "origin")):
        name = type(record).__name__
        with pytest.raises(
            TypeError,
            match=rf"cannot show a {name} on its own.*"
            rf"ModelHealthWidget\(model, {argument}=record\)",
        ):
            vinlens.show(record)
