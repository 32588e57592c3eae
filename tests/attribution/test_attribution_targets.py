"""Targets: capture-mode normalisation, mode-specific validation, per-camera target building."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vinlens.attribution import (
    CameraExplanationTarget,
    LayerTarget,
    VisionCaptureMode,
    camera_targets_for_layer,
)

LAYER = LayerTarget("encoder.conv3")


def test_capture_mode_values_are_the_documented_strings() -> None:
    assert [mode.value for mode in VisionCaptureMode] == [
        "dedicated_layer",
        "per_camera_call",
        "stacked_camera_batch",
    ]
    assert isinstance(VisionCaptureMode.PER_CAMERA_CALL, str)


@pytest.mark.parametrize("given_mode", [VisionCaptureMode.PER_CAMERA_CALL, "per_camera_call"])
def test_capture_mode_is_stored_as_the_plain_enum_value(given_mode: str) -> None:
    target = CameraExplanationTarget("rgb", LAYER, given_mode, invocation_index=0)
    assert target.capture_mode == VisionCaptureMode.PER_CAMERA_CALL.value
    assert type(target.capture_mode) is str
    assert json.dumps(target.capture_mode) == '"per_camera_call"'
    # Enum and string spellings build equal, equally hashed targets.
    other = CameraExplanationTarget("rgb", LAYER, "per_camera_call", invocation_index=0)
    assert target == other and hash(target) == hash(other)


def test_targets_are_frozen() -> None:
    target = CameraExplanationTarget("rgb", LAYER, "dedicated_layer")
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.camera_key = "slam-left"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        LAYER.module_path = "x"  # type: ignore[misc]


def test_unknown_capture_mode_names_the_value_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"capture_mode='stacked'.*dedicated_layer"):
        CameraExplanationTarget("rgb", LAYER, "stacked")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"capture_mode": "dedicated_layer", "invocation_index": 0}, "invocation_index"),
        ({"capture_mode": "dedicated_layer", "stacked_camera_index": 0}, "stacked_camera_index"),
        ({"capture_mode": "per_camera_call"}, "invocation_index"),
        ({"capture_mode": "per_camera_call", "invocation_index": -1}, "invocation_index"),
        (
            {"capture_mode": "per_camera_call", "invocation_index": 0, "stacked_camera_count": 3},
            "stacked_camera_count",
        ),
        (
            {"capture_mode": "stacked_camera_batch", "stacked_camera_index": 0},
            "stacked_camera_count",
        ),
        (
            {"capture_mode": "stacked_camera_batch", "stacked_camera_count": 3},
            "stacked_camera_index",
        ),
        (
            {
                "capture_mode": "stacked_camera_batch",
                "stacked_camera_index": 3,
                "stacked_camera_count": 3,
            },
            "stacked_camera_index",
        ),
        (
            {
                "capture_mode": "stacked_camera_batch",
                "stacked_camera_index": 0,
                "stacked_camera_count": 0,
            },
            "stacked_camera_count",
        ),
        (
            {
                "capture_mode": "stacked_camera_batch",
                "stacked_camera_index": 0,
                "stacked_camera_count": 2,
                "invocation_index": 1,
            },
            "invocation_index",
        ),
        ({"capture_mode": "per_camera_call", "invocation_index": True}, "invocation_index"),
        ({"capture_mode": "per_camera_call", "invocation_index": 1.0}, "invocation_index"),
    ],
)
def test_mode_specific_fields_are_validated_with_the_field_named(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=rf"CameraExplanationTarget\.{field}.*'slam-left'"):
        CameraExplanationTarget(camera_key="slam-left", target=LAYER, **kwargs)  # type: ignore[arg-type]


def test_camera_key_and_layer_types_are_checked() -> None:
    with pytest.raises(ValueError, match="camera_key"):
        CameraExplanationTarget("", LAYER, "dedicated_layer")
    with pytest.raises(TypeError, match="must be a LayerTarget"):
        CameraExplanationTarget("rgb", "encoder.conv3", "dedicated_layer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="module_path"):
        LayerTarget("  ")
    with pytest.raises(ValueError, match="output_index"):
        LayerTarget("encoder", output_index="0")  # type: ignore[arg-type]


@given(count=st.integers(1, 16), index=st.integers(-4, 20))
def test_stacked_index_accepted_exactly_inside_the_camera_count(count: int, index: int) -> None:
    def build() -> CameraExplanationTarget:
        return CameraExplanationTarget(
            "cam",
            LAYER,
            "stacked_camera_batch",
            stacked_camera_index=index,
            stacked_camera_count=count,
        )

    if 0 <= index < count:
        assert build().stacked_camera_index == index
    else:
        with pytest.raises(ValueError, match="stacked_camera_index"):
            build()


KEYS = ("rgb", "slam-left", "slam-right")


def test_targets_for_a_shared_layer_called_per_camera() -> None:
    targets = camera_targets_for_layer("encoder.conv3", VisionCaptureMode.PER_CAMERA_CALL, KEYS)
    assert [(t.camera_key, t.invocation_index) for t in targets] == [
        ("rgb", 0),
        ("slam-left", 1),
        ("slam-right", 2),
    ]
    assert {t.target for t in targets} == {LayerTarget("encoder.conv3")}


def test_targets_for_a_stacked_batch() -> None:
    targets = camera_targets_for_layer(
        "encoder.conv3", "stacked_camera_batch", KEYS, output_index=0
    )
    assert [(t.stacked_camera_index, t.stacked_camera_count) for t in targets] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    assert targets[0].target == LayerTarget("encoder.conv3", 0)


def test_targets_for_dedicated_layers_from_a_template_or_a_mapping() -> None:
    from_template = camera_targets_for_layer("encoders.{camera}.conv3", "dedicated_layer", KEYS)
    assert [t.target.module_path for t in from_template] == [
        "encoders.rgb.conv3",
        "encoders.slam-left.conv3",
        "encoders.slam-right.conv3",
    ]
    mapping = {key: f"towers.{index}.out" for index, key in enumerate(KEYS)}
    from_mapping = camera_targets_for_layer(mapping, "dedicated_layer", KEYS)
    assert [t.target.module_path for t in from_mapping] == [
        "towers.0.out",
        "towers.1.out",
        "towers.2.out",
    ]
    assert all(t.invocation_index is None and t.stacked_camera_index is None for t in from_mapping)


def test_target_building_errors() -> None:
    with pytest.raises(ValueError, match=r"names one module but 3 cameras"):
        camera_targets_for_layer("encoder.conv3", "dedicated_layer", KEYS)
    with pytest.raises(ValueError, match=r"no module path given for cameras \['slam-right'\]"):
        camera_targets_for_layer({"rgb": "a", "slam-left": "b"}, "dedicated_layer", KEYS)
    with pytest.raises(ValueError, match="shared layer"):
        camera_targets_for_layer({"rgb": "a"}, "per_camera_call", ["rgb"])
    with pytest.raises(ValueError, match="duplicates"):
        camera_targets_for_layer("encoder.conv3", "per_camera_call", ["rgb", "rgb"])
    with pytest.raises(ValueError, match="non-empty"):
        camera_targets_for_layer("encoder.conv3", "per_camera_call", [])
    with pytest.raises(ValueError, match="capture_mode='batch'"):
        camera_targets_for_layer("encoder.conv3", "batch", KEYS)
