"""explain_cameras records, display normalisation, and the planted-evidence check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vinlens.attribution import (
    ATTRIBUTION_METHODS,
    ablation_cam,
    check_camera_targets,
    explain_cameras,
    grad_cam,
    grad_cam_plus_plus,
    near_flat_cameras,
    normalize_map,
)
from vinlens.demo import CAMERA_SHAPES, EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images

Images = dict[str, torch.Tensor]


def test_records_carry_raw_and_upsampled_maps(model: MultiCameraDemoModel, images: Images) -> None:
    targets = model.camera_targets()
    records = explain_cameras(model, images, EVIDENCE_CLASS, targets)
    assert [(r.sample_index, r.camera_key) for r in records] == [
        (sample, key) for sample in (0, 1) for key in ("rgb", "slam-left", "slam-right")
    ]
    with torch.no_grad():
        logits = model(images)[:, EVIDENCE_CLASS]
    direct = {
        t.camera_key: grad_cam(model, t, lambda: model(images)[:, EVIDENCE_CLASS]) for t in targets
    }
    for record in records:
        _, height, width = CAMERA_SHAPES[record.camera_key]
        assert record.method == "grad_cam"
        assert record.target == targets[("rgb", "slam-left", "slam-right").index(record.camera_key)]
        assert record.image_shape == (height, width)
        assert record.raw_map.dtype == np.float32 and record.upsampled_map.dtype == np.float32
        expected_raw = direct[record.camera_key][record.sample_index]
        np.testing.assert_allclose(record.raw_map, expected_raw.numpy(), rtol=1e-6)
        expected_up = F.interpolate(
            expected_raw[None, None], size=(height, width), mode="bilinear", align_corners=False
        )[0, 0]
        np.testing.assert_allclose(record.upsampled_map, expected_up.numpy(), rtol=1e-5, atol=1e-9)
        assert record.raw_min == pytest.approx(float(expected_raw.min()))
        assert record.raw_max == pytest.approx(float(expected_raw.max()))
        assert record.upsampled_map.min() >= record.raw_min - 1e-9
        assert record.upsampled_map.max() <= record.raw_max + 1e-9
        assert record.score == pytest.approx(float(logits[record.sample_index]), rel=1e-5)


def test_records_are_frozen_and_their_arrays_read_only(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    (record, *_) = explain_cameras(model, images, EVIDENCE_CLASS, model.camera_targets())
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.score = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        record.raw_map[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        record.upsampled_map[0, 0] = 1.0


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_each_method_matches_the_direct_call(method: str, images: Images) -> None:
    model = MultiCameraDemoModel("stacked_camera_batch", width=6)
    targets = model.camera_targets()
    records = explain_cameras(model, images, EVIDENCE_CLASS, targets, method=method)
    direct_method = {
        "grad_cam": grad_cam,
        "grad_cam_plus_plus": grad_cam_plus_plus,
        "ablation_cam": ablation_cam,
    }[method]
    for target in targets:
        expected = direct_method(model, target, lambda: model(images)[:, EVIDENCE_CLASS])
        got = np.stack([r.raw_map for r in records if r.camera_key == target.camera_key])
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)
    assert {r.method for r in records} == {method}


def test_score_callable_numpy_and_unbatched_images(images: Images) -> None:
    model = MultiCameraDemoModel("per_camera_call")
    targets = model.camera_targets()
    by_index = explain_cameras(model, images, EVIDENCE_CLASS, targets)
    by_callable = explain_cameras(model, images, lambda out: out[:, EVIDENCE_CLASS], targets)
    for a, b in zip(by_index, by_callable, strict=True):
        np.testing.assert_array_equal(a.raw_map, b.raw_map)
    # A viewer passes one sample as [C, H, W] numpy arrays.
    single = {key: image[1].numpy() for key, image in images.items()}
    progress: list[tuple[int, int]] = []
    one = explain_cameras(
        model,
        single,
        EVIDENCE_CLASS,
        targets,
        progress=lambda done, total: progress.append((done, total)),
    )
    assert [r.sample_index for r in one] == [0, 0, 0]
    for record, batched in zip(one, by_index[3:], strict=True):
        np.testing.assert_allclose(record.raw_map, batched.raw_map, rtol=1e-4, atol=1e-8)
    assert progress[-1] == (3, 3)


def test_check_camera_targets_is_the_check_explain_cameras_applies() -> None:
    targets = MultiCameraDemoModel("dedicated_layer").camera_targets()
    assert check_camera_targets(list(targets), ["rgb", "slam-left", "slam-right"]) == tuple(targets)
    with pytest.raises(
        ValueError, match=r"Target camera 'slam-left' has no image; images has \['rgb'\]"
    ):
        check_camera_targets(targets, ["rgb"])
    with pytest.raises(TypeError, match="must hold CameraExplanationTarget records, got str"):
        check_camera_targets(["rgb"], ["rgb"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="targets is empty"):
        check_camera_targets([], ["rgb"])


def test_explain_cameras_errors(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    targets = model.camera_targets()
    with pytest.raises(ValueError, match=r"Unknown attribution method 'lime'"):
        explain_cameras(model, images, EVIDENCE_CLASS, targets, method="lime")
    with pytest.raises(TypeError, match="swapped arguments"):
        explain_cameras(model, images, targets, EVIDENCE_CLASS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Target camera 'slam-left' has no image"):
        explain_cameras(model, {"rgb": images["rgb"]}, EVIDENCE_CLASS, targets)
    with pytest.raises(ValueError, match=r"score=9 is not a class index of an output with 4"):
        explain_cameras(model, images, 9, targets)
    with pytest.raises(ValueError, match=r"'rgb' image has shape \(96, 96\)"):
        explain_cameras(model, {**images, "rgb": images["rgb"][0, 0]}, EVIDENCE_CLASS, targets)
    with pytest.raises(ValueError, match="targets is empty"):
        explain_cameras(model, images, EVIDENCE_CLASS, [])


def test_normalize_map_for_display() -> None:
    values = np.array([[0.0, 1.0], [2.0, 4.0]], dtype=np.float32)
    np.testing.assert_allclose(normalize_map(values), [[0, 0.25], [0.5, 1.0]])
    np.testing.assert_allclose(normalize_map(values, vmin=0.0, vmax=8.0), [[0, 0.125], [0.25, 0.5]])
    np.testing.assert_allclose(normalize_map(values, vmin=1.0, vmax=2.0), [[0, 0], [1, 1]])
    flat = normalize_map(np.full((3, 3), 0.7))
    assert flat.dtype == np.float32 and not flat.any()
    with pytest.raises(ValueError, match="finite"):
        normalize_map(values, vmax=float("nan"))


def test_record_normalisation_keeps_raw_values(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    records = explain_cameras(model, images, EVIDENCE_CLASS, model.camera_targets())
    record = records[0]
    raw_before = record.raw_map.copy()
    display = record.normalized()
    assert display.shape == record.image_shape
    # Scaled by the raw range: the layer map spans [0, 1]; its bilinear upsampling stays inside.
    layer_display = record.normalized(upsampled=False)
    assert layer_display.min() == 0.0 and layer_display.max() == 1.0
    assert display.min() >= 0.0 and display.max() <= 1.0
    np.testing.assert_array_equal(record.raw_map, raw_before)
    # One shared scale across cameras: the weaker camera stays dim.
    vmax = max(r.raw_max for r in records[:3])
    dims = [r.normalized(upsampled=False, vmin=0.0, vmax=vmax).max() for r in records[:3]]
    assert max(dims) == pytest.approx(1.0) and min(dims) < 0.5
    assert record.normalized(upsampled=False).shape == record.layer_shape


def test_planted_blob_raises_the_evidence_score(mode: str) -> None:
    model = MultiCameraDemoModel(mode)
    plain = make_camera_images(1, seed=5)
    for key, centre in {"rgb": (50, 50), "slam-left": (40, 30), "slam-right": (20, 20)}.items():
        planted = make_camera_images(1, seed=5, evidence={key: centre})
        assert model(planted)[0, EVIDENCE_CLASS] > model(plain)[0, EVIDENCE_CLASS] + 0.1


BLOB_PLACES = {
    "rgb": [(14, 16), (48, 80), (82, 40)],
    "slam-left": [(12, 50), (40, 12), (70, 33)],
    "slam-right": [(66, 52), (25, 30), (10, 10)],
}


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_hot_region_sits_on_the_planted_blob(mode: str, method: str) -> None:
    model = MultiCameraDemoModel(mode, width=8)
    targets = model.camera_targets()
    for place in range(3):
        evidence = {
            key: places[place]
            for key, places in BLOB_PLACES.items()
            if key != "slam-right" or place != 1
        }
        images = make_camera_images(1, seed=place, evidence=evidence)
        records = explain_cameras(model, images, EVIDENCE_CLASS, targets, method=method)
        for record in records:
            if record.camera_key not in evidence:
                continue
            row, col = evidence[record.camera_key]
            hot_row, hot_col = np.unravel_index(np.argmax(record.upsampled_map), record.image_shape)
            distance = float(np.hypot(hot_row - row, hot_col - col))
            assert distance <= 4.0, (record.camera_key, (row, col), (hot_row, hot_col))
            # The whole hot region (at least half the map's peak) lies within the blob's reach.
            hot = np.argwhere(record.normalized() >= 0.5)
            assert np.hypot(hot[:, 0] - row, hot[:, 1] - col).max() <= 10.0


def test_near_flat_cameras_judges_each_sample_with_map_flatness(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    records = explain_cameras(model, images, EVIDENCE_CLASS, model.camera_targets())
    assert near_flat_cameras(records) == frozenset()  # every camera has a planted blob
    flat = dataclasses.replace(records[0], raw_min=0.5, raw_max=0.5)
    assert flat.spread == 0.0
    assert near_flat_cameras([flat]) == {(0, flat.camera_key)}  # alone and flat
    assert near_flat_cameras([flat, records[1]]) == {(0, flat.camera_key)}
    with pytest.raises(ValueError, match="relative_spread must be in"):
        near_flat_cameras(records, relative_spread=1.0)
