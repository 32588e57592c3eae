"""ConfigTreeWidget: the inspect_config records as the browser receives them."""

import enum
import json
import math

import pytest
from pydantic import BaseModel, Field

from vinlens.widgets._payload import split_buffers
from vinlens.widgets.config_tree import ConfigTreeWidget


class Backbone:  # a target type: must never be constructed by the widget
    def __init__(self, *args, **kwargs):
        raise AssertionError("the config tree must not construct its target")


class Norm(enum.Enum):
    BATCH = "batch"
    LAYER = "layer"


class LayerConfig(BaseModel):
    width: int = 64
    norm: Norm = Norm.LAYER


class VinConfig(BaseModel):
    target_type: type = Backbone
    name: str = "<img src=x onerror=__pwned=1>"
    lr: float = 3e-4
    warmup: float = math.nan
    cameras: int = 7
    layers: list[LayerConfig] = Field(
        default_factory=lambda: [LayerConfig(), LayerConfig(width=32)]
    )
    extra: dict[str, int] = Field(default_factory=lambda: {"a": 1})
    note: str | None = None
    digits: str = "1"

    def setup_target(self):
        raise AssertionError("setup_target must not be called")


def field(widget, *path):
    return next(f for f in widget.spec["fields"] if f["path"] == list(path))


def test_spec_lists_fields_in_tree_order_with_readable_values():
    widget = ConfigTreeWidget(VinConfig())
    spec = widget.spec
    assert spec["config_type"].endswith("VinConfig")
    assert spec["target_type"] == f"{__name__}.Backbone"
    paths = [tuple(f["path"]) for f in spec["fields"]]
    assert paths[:6] == [
        ("target_type",),
        ("name",),
        ("lr",),
        ("warmup",),
        ("cameras",),
        ("layers",),
    ]
    assert paths[6:12] == [("layers", "0"), ("layers", "0", "width"), ("layers", "0", "norm"),
                           ("layers", "1"), ("layers", "1", "width"), ("layers", "1", "norm")]  # fmt: skip
    assert field(widget, "name")["value_text"] == "'<img src=x onerror=__pwned=1>'"
    assert field(widget, "name")["value_kind"] == "string"
    assert field(widget, "digits")["value_text"] == "'1'"  # a string, not the number 1
    assert field(widget, "cameras")["value_text"] == "7" and field(widget, "cameras")["value"] == 7
    assert field(widget, "warmup")["value"] == {"$float": "NaN"}  # strict JSON
    assert field(widget, "warmup")["value_text"] == "nan"
    norm = field(widget, "layers", "0", "norm")
    assert (
        norm["value_kind"] == "enum"
        and norm["value_text"] == "Norm.LAYER"
        and norm["value"] == "layer"
    )
    extra = field(widget, "extra")
    assert extra["value_kind"] == "marker" and extra["value_text"] == "<builtins.dict>"
    assert extra["declared_type"] == "dict[str, int]"
    assert field(widget, "note")["value_kind"] == "none"
    content, buffers = split_buffers(spec)
    json.dumps(content, allow_nan=False)
    assert buffers == []


def test_refresh_after_in_place_change_and_query_sync():
    config = VinConfig()
    widget = ConfigTreeWidget(config, query="width")
    assert widget.query == "width"
    config.layers[1].width = 16
    assert widget.run_command("refresh")["kind"] == "result"
    assert field(widget, "layers", "1", "width")["value_text"] == "16"
    widget.set_state({"query": "norm"})
    assert widget.query == "norm"
    widget.set_state({"query": 12})  # hostile: reported, not raised
    assert widget.query == "norm" and "query" in widget.error


def test_rejects_non_pydantic_and_unknown_commands():
    with pytest.raises(TypeError, match=r"pydantic\.BaseModel instance, got builtins\.dict"):
        ConfigTreeWidget({"a": 1})
    widget = ConfigTreeWidget(LayerConfig())
    assert widget.spec["target_type"] is None
    reply = widget.run_command("delete_everything")
    assert reply["kind"] == "error" and "unknown command" in reply["message"]


def test_export(tmp_path):
    widget = ConfigTreeWidget(VinConfig())
    rows = widget.to_rows()
    assert rows[1]["path"] == ("name",)
    text = widget.export(tmp_path / "config.csv").read_text()
    assert '"[""layers"",""0"",""width""]"' in text
