"""inspect_config: pre-order walk of a Pydantic config tree that never builds the target."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from vinlens.model_inspection import ConfigFieldSpec, ModelStructureSpec, inspect_config


class Backbone(enum.Enum):
    RESNET18 = "resnet18"
    EFFICIENTNET = "efficientnet"


class Fusion(enum.StrEnum):
    CONCAT = "concat"
    ATTENTION = "attention"


@dataclasses.dataclass
class Intrinsics:
    fx: float = 1.0
    fy: float = 1.0


class CameraConfig(BaseModel):
    name: str
    height: int = 224
    intrinsics: Intrinsics = Field(default_factory=Intrinsics)


class EncoderConfig(BaseModel):
    backbone: Backbone = Backbone.RESNET18
    depth: int = 18
    pretrained: bool = False


class VinModel(nn.Module):
    pass


class VinConfig(BaseModel):
    """A VIN model config whose setup_target must never run during inspection."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    target_type: type[nn.Module] = VinModel
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    cameras: list[CameraConfig] = Field(
        default_factory=lambda: [CameraConfig(name="front"), CameraConfig(name="rear")]
    )
    heads: tuple[EncoderConfig, ...] = ()
    fusion: Fusion = Fusion.ATTENTION
    dropout: float | None = 0.1
    mode: Literal["train", "eval"] = "train"
    loss_weights: dict[str, float] = Field(default_factory=lambda: {"pose": 1.0})
    sizes: list[int] = Field(default_factory=lambda: [1, 2])

    def setup_target(self) -> nn.Module:
        raise AssertionError("inspect_config must never call setup_target")


def paths(spec: ModelStructureSpec) -> list[tuple[str, ...]]:
    return [field.path for field in spec.fields]


def test_walk_is_preorder_in_declaration_and_index_order() -> None:
    spec = inspect_config(VinConfig())
    assert paths(spec) == [
        ("target_type",),
        ("encoder",),
        ("encoder", "backbone"),
        ("encoder", "depth"),
        ("encoder", "pretrained"),
        ("cameras",),
        ("cameras", "0"),
        ("cameras", "0", "name"),
        ("cameras", "0", "height"),
        ("cameras", "0", "intrinsics"),
        ("cameras", "1"),
        ("cameras", "1", "name"),
        ("cameras", "1", "height"),
        ("cameras", "1", "intrinsics"),
        ("heads",),
        ("fusion",),
        ("dropout",),
        ("mode",),
        ("loss_weights",),
        ("sizes",),
    ]
    assert all(isinstance(part, str) for path in paths(spec) for part in path)


def test_types_values_and_target_are_qualified() -> None:
    spec = inspect_config(VinConfig())
    assert spec.config_type == f"{__name__}.VinConfig"
    assert spec.target_type == f"{__name__}.VinModel"
    by_path = {field.path: field for field in spec.fields}
    assert by_path[("encoder", "depth")] == ConfigFieldSpec(
        ("encoder", "depth"), "int", "builtins.int", 18
    )
    assert by_path[("encoder",)].configured_type == f"{__name__}.EncoderConfig"
    assert by_path[("encoder",)].value == f"<{__name__}.EncoderConfig>"
    assert by_path[("cameras", "1")].declared_type == f"{__name__}.CameraConfig"
    assert by_path[("cameras", "1", "name")].value == "rear"
    assert by_path[("cameras",)].declared_type == f"list[{__name__}.CameraConfig]"
    assert by_path[("dropout",)].declared_type == "float | None"
    assert by_path[("mode",)].declared_type == "Literal['train', 'eval']"
    assert by_path[("target_type",)].value == f"<class {__name__}.VinModel>"


def test_enums_keep_the_member() -> None:
    spec = inspect_config(VinConfig())
    by_path = {field.path: field for field in spec.fields}
    assert by_path[("encoder", "backbone")].value is Backbone.RESNET18
    assert by_path[("fusion",)].value is Fusion.ATTENTION
    assert by_path[("fusion",)].configured_type == f"{__name__}.Fusion"


def test_mappings_dataclasses_and_scalar_lists_are_markers_not_entered() -> None:
    spec = inspect_config(VinConfig())
    by_path = {field.path: field for field in spec.fields}
    assert by_path[("loss_weights",)].value == "<builtins.dict>"
    assert by_path[("cameras", "0", "intrinsics")].value == f"<{__name__}.Intrinsics>"
    assert by_path[("sizes",)].value == "<builtins.list>"
    assert not any(len(path) > 1 and path[0] in {"loss_weights", "sizes"} for path in by_path)
    assert not any(path[-1] in {"fx", "fy"} for path in by_path)


def test_models_in_tuples_get_indexed_records() -> None:
    config = VinConfig(heads=(EncoderConfig(depth=3), EncoderConfig(depth=5)))
    spec = inspect_config(config)
    depths = [f.value for f in spec.fields if f.path[:1] == ("heads",) and f.path[-1] == "depth"]
    assert depths == [3, 5]
    assert ("heads", "1", "depth") in paths(spec)


def test_repeated_inspection_is_equal_and_json_safe_for_value_enums() -> None:
    config = VinConfig()
    first, second = inspect_config(config), inspect_config(config)
    assert first == second and first is not second
    payload = dataclasses.asdict(first)
    # Plain enums stay enum members (the widget payload turns them into values).
    json.dumps(payload, default=lambda value: value.value)


def test_reflects_current_values_after_mutation() -> None:
    config = VinConfig()
    config.encoder.depth = 50
    by_path = {field.path: field for field in inspect_config(config).fields}
    assert by_path[("encoder", "depth")].value == 50


def test_absent_target_type_is_none_and_string_target_is_kept() -> None:
    assert inspect_config(EncoderConfig()).target_type is None

    class Named(BaseModel):
        target_type: str = "vin.models.VinNet"

    assert inspect_config(Named()).target_type == "vin.models.VinNet"


def test_extra_fields_follow_declared_ones() -> None:
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int = 1

    spec = inspect_config(Open(b=2))  # type: ignore[call-arg]
    assert [(f.path, f.declared_type, f.value) for f in spec.fields] == [
        (("a",), "int", 1),
        (("b",), "<extra>", 2),
    ]


class Node(BaseModel):
    model_config = ConfigDict(validate_assignment=False)
    child: Any = None
    children: list[Any] = Field(default_factory=list)


def test_self_reference_is_a_clear_error() -> None:
    root = Node(child=Node())
    root.child.child = root
    with pytest.raises(ValueError, match=r"self-referencing: field 'child\.child' refers back"):
        inspect_config(root)


def test_cycle_through_a_list_is_a_clear_error() -> None:
    root = Node()
    root.children.append(root)
    with pytest.raises(ValueError, match="self-referencing"):
        inspect_config(root)


def test_shared_subconfig_is_not_a_cycle() -> None:
    shared = EncoderConfig()

    class Twin(BaseModel):
        left: EncoderConfig
        right: EncoderConfig

    spec = inspect_config(Twin(left=shared, right=shared))
    assert ("right", "depth") in paths(spec)


def test_deep_config_does_not_hit_recursion_limit() -> None:
    root = Node()
    current = root
    for _ in range(3000):
        current.child = Node()
        current = current.child
    spec = inspect_config(root)
    assert max(len(field.path) for field in spec.fields) == 3001


def test_rejects_non_pydantic_input() -> None:
    with pytest.raises(TypeError, match=r"pydantic\.BaseModel instance, got builtins\.dict"):
        inspect_config({"a": 1})  # type: ignore[arg-type]
