"""The demo three-camera model and synthetic images: determinism, modes, errors."""

from __future__ import annotations

import pytest
import torch

from vinlens.attribution import VisionCaptureMode, explain_cameras, map_flatness
from vinlens.demo import (
    CAMERA_KEYS,
    CAMERA_SHAPES,
    CLASS_NAMES,
    EVIDENCE_CLASS,
    MultiCameraDemoModel,
    make_camera_images,
)


def test_images_are_deterministic_structured_and_in_range() -> None:
    first = make_camera_images(2, seed=7)
    again = make_camera_images(2, seed=7)
    other = make_camera_images(2, seed=8)
    assert list(first) == list(CAMERA_KEYS)
    for key, (channels, height, width) in CAMERA_SHAPES.items():
        image = first[key]
        assert image.shape == (2, channels, height, width) and image.dtype == torch.float32
        assert torch.equal(image, again[key])
        assert not torch.equal(image, other[key])
        assert image.min() >= 0.0 and image.max() <= 1.0
        assert image.std() > 0.02  # ramps and shapes, not a flat field
        assert not torch.equal(image[0], image[1])  # each sample has its own background


def test_evidence_blob_is_planted_where_asked() -> None:
    plain = make_camera_images(1, seed=1)
    planted = make_camera_images(1, seed=1, evidence={"slam-left": (10, 50)})
    difference = (planted["slam-left"] - plain["slam-left"])[0, 0]
    row, col = divmod(int(difference.argmax()), difference.shape[1])
    assert (row, col) == (10, 50)
    assert torch.equal(planted["rgb"], plain["rgb"])


def test_image_errors() -> None:
    with pytest.raises(ValueError, match=r"camera 'depth', which is not one of"):
        make_camera_images(evidence={"depth": (1, 1)})
    with pytest.raises(
        ValueError, match=r"\(row=90, col=10\) for camera 'slam-right' lies outside its 80x64"
    ):
        make_camera_images(evidence={"slam-right": (90, 10)})
    with pytest.raises(ValueError, match="batch_size"):
        make_camera_images(0)


@pytest.mark.parametrize("mode", list(VisionCaptureMode))
def test_model_is_seeded_and_runs_in_every_mode(mode: VisionCaptureMode) -> None:
    images = make_camera_images(3, seed=0)
    model = MultiCameraDemoModel(mode.value, seed=4)
    assert not model.training  # designed weights: starts in eval mode
    with torch.no_grad():
        logits = model(images)
        assert logits.shape == (3, len(CLASS_NAMES))
        assert torch.equal(logits, MultiCameraDemoModel(mode, seed=4)(images))
        assert not torch.equal(logits, MultiCameraDemoModel(mode, seed=5)(images))
    for target in model.camera_targets():
        assert target.capture_mode == mode.value
        model.get_submodule(target.target.module_path)  # the path exists


def test_layer_paths_follow_the_mode() -> None:
    dedicated = MultiCameraDemoModel("dedicated_layer")
    assert dedicated.layer_path("slam-left") == "encoders.slam-left.conv3"
    assert MultiCameraDemoModel("per_camera_call").layer_path("rgb", "conv2") == "encoder.conv2"
    with pytest.raises(ValueError, match="Unknown camera 'depth'"):
        dedicated.layer_path("depth")


def test_model_input_errors() -> None:
    model = MultiCameraDemoModel("stacked_camera_batch")
    images = make_camera_images(1)
    with pytest.raises(ValueError, match=r"missing cameras \['slam-right'\]"):
        model({k: v for k, v in images.items() if k != "slam-right"})
    with pytest.raises(
        ValueError, match=r"'rgb' image has shape \(1, 1, 96, 96\), expected \[B, 3, 96, 96\]"
    ):
        model({**images, "rgb": images["rgb"][:, :1]})
    with pytest.raises(ValueError, match="batch size 2, other cameras 1"):
        model({**images, "slam-right": images["slam-right"].repeat(2, 1, 1, 1)})
    with pytest.raises(ValueError, match="capture_mode='mixed'"):
        MultiCameraDemoModel("mixed")


@pytest.mark.parametrize("mode", list(VisionCaptureMode))
@pytest.mark.parametrize("method", ["grad_cam", "grad_cam_plus_plus", "ablation_cam"])
def test_the_camera_without_evidence_gets_a_near_flat_map(
    mode: VisionCaptureMode, method: str
) -> None:
    # The tour's views: blobs in rgb and slam-left, none in slam-right.
    views = {
        key: value[0]
        for key, value in make_camera_images(
            evidence={"rgb": (30, 62), "slam-left": (52, 20)}
        ).items()
    }
    model = MultiCameraDemoModel(mode)
    records = explain_cameras(model, views, EVIDENCE_CLASS, model.camera_targets(), method=method)
    flatness = map_flatness({r.camera_key: (r.raw_min, r.raw_max) for r in records})
    assert [key for key, judged in flatness.items() if judged.flat] == ["slam-right"]
    spreads = {record.camera_key: record.raw_max - record.raw_min for record in records}
    assert spreads["slam-right"] < 5e-3 * min(spreads["rgb"], spreads["slam-left"])
