"""Layer choices, capture modes a layer can satisfy, the method registry and image batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vinlens.attribution import (
    ATTRIBUTION_METHODS,
    METHOD_REGISTRY,
    AttributionMethod,
    camera_image_batches,
    camera_layer_templates,
    capture_modes_for_layer,
    explain_cameras,
    layer_choices,
    method_labels,
    probe_layer_calls,
)
from vinlens.attribution.methods import grad_cam_weights
from vinlens.demo import CAMERA_KEYS, MultiCameraDemoModel, make_camera_images

KEYS = list(CAMERA_KEYS)


def no_hooks(model: torch.nn.Module) -> bool:
    return all(not m._forward_hooks for m in model.modules())


def test_camera_templates_need_the_module_for_every_camera() -> None:
    paths = ["enc.rgb.conv", "enc.left.conv", "enc.rgb.bn", "rgb", "left", "x.rgb"]
    assert camera_layer_templates(paths, ["rgb", "left"]) == ("enc.{camera}.conv", "{camera}")
    assert camera_layer_templates(paths, ["rgb"]) == (
        "enc.{camera}.conv",
        "enc.{camera}.bn",
        "{camera}",
        "x.{camera}",
    )


def test_static_layer_choices_per_mode() -> None:
    choices = layer_choices(MultiCameraDemoModel("dedicated_layer"), KEYS)
    dedicated = {c.path: c.module_type for c in choices["dedicated_layer"]}
    assert dedicated["encoders.{camera}.conv3"] == "Conv2d"
    assert dedicated["encoders.{camera}"] == "CameraEncoder" and "head" not in dedicated
    shared = [c.path for c in choices["per_camera_call"]]
    assert shared[:2] == ["encoders", "encoders.rgb"] and "head" in shared and "" not in shared
    assert choices["stacked_camera_batch"] == choices["per_camera_call"]


@pytest.mark.parametrize("mode", ["dedicated_layer", "per_camera_call", "stacked_camera_batch"])
def test_probed_choices_offer_only_modes_the_layer_satisfies(mode: str) -> None:
    model = MultiCameraDemoModel(mode)
    model.train()
    images = make_camera_images(2, seed=1)
    choices = layer_choices(model, KEYS, images=images)
    assert model.training and no_hooks(model)  # flags restored, hooks gone
    offered = {m: {c.path for c in options} for m, options in choices.items()}
    layer = "encoders.{camera}.conv3" if mode == "dedicated_layer" else "encoder.conv3"
    for other, paths in offered.items():
        if other == mode:
            assert layer in paths and "head" not in paths
        else:
            assert paths == set(), (mode, other, paths)
    assert capture_modes_for_layer(model, layer, KEYS, images=images) == (mode,)
    assert capture_modes_for_layer(model, "head", KEYS, images=images) == ()


def test_structural_capture_modes_without_images() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    assert capture_modes_for_layer(model, "encoders.{camera}.conv3", KEYS) == ("dedicated_layer",)
    mapping = {key: f"encoders.{key}.conv2" for key in KEYS}
    assert capture_modes_for_layer(model, mapping, KEYS) == ("dedicated_layer",)
    # One existing path can only be shared, structurally; a forward shows it is not.
    assert capture_modes_for_layer(model, "encoders.rgb.conv3", KEYS) == (
        "per_camera_call",
        "stacked_camera_batch",
    )
    images = make_camera_images(1)
    assert capture_modes_for_layer(model, "encoders.rgb.conv3", KEYS, images=images) == ()
    # With one camera, one call of batch B is all three modes at once.
    assert len(capture_modes_for_layer(model, "encoders.rgb.conv3", ["rgb"], images=images)) == 3
    assert capture_modes_for_layer(model, "encoders.{camera}.conv9", KEYS) == ()


def test_probe_counts_calls_and_batch_sizes() -> None:
    images = make_camera_images(2)
    per_call = probe_layer_calls(MultiCameraDemoModel("per_camera_call"), images)
    assert per_call["encoder.conv3"].batch_sizes == (2, 2, 2)
    assert per_call["encoder.conv3"].calls == 3 and per_call["head"].batch_sizes == (2,)
    stacked = probe_layer_calls(MultiCameraDemoModel("stacked_camera_batch"), images)
    assert stacked["encoder.conv3"].batch_sizes == (6,)


def test_method_registry_drives_names_and_labels() -> None:
    assert tuple(METHOD_REGISTRY) == ATTRIBUTION_METHODS
    assert method_labels() == {
        "grad_cam": "Grad-CAM",
        "grad_cam_plus_plus": "Grad-CAM++",
        "ablation_cam": "Ablation-CAM",
    }
    assert {m.kind for m in METHOD_REGISTRY.values()} == {"gradient", "ablation"}
    with pytest.raises(TypeError):
        METHOD_REGISTRY["x"] = METHOD_REGISTRY["grad_cam"]  # type: ignore[index]
    with pytest.raises(ValueError, match="kind='saliency' is not one of"):
        AttributionMethod("x", "X", "saliency", grad_cam_weights)


def test_explain_cameras_uses_each_entrys_weights() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    images = make_camera_images(1, evidence={"rgb": (30, 30)})
    for name in ATTRIBUTION_METHODS:
        records = explain_cameras(model, images, 0, model.camera_targets(), method=name)
        assert [r.method for r in records] == [name] * 3


def test_camera_image_batches() -> None:
    hwc = np.random.default_rng(0).random((8, 6, 3))
    batches = camera_image_batches(
        {"a": hwc, "b": (hwc[:, :, 0] * 255).astype(np.uint8)}, array_layout="HWC"
    )
    assert batches["a"].shape == (1, 3, 8, 6) and batches["a"].dtype == torch.float32
    assert torch.allclose(batches["a"][0, 1], torch.from_numpy(hwc[:, :, 1]).float())
    assert batches["b"].shape == (1, 1, 8, 6) and batches["b"].dtype == torch.float32
    chw = camera_image_batches({"a": hwc.transpose(2, 0, 1)})
    assert torch.equal(chw["a"], batches["a"])
    tensors = camera_image_batches({"a": torch.zeros(2, 3, 4, 4, dtype=torch.float64)})
    assert tensors["a"].dtype == torch.float64
    with pytest.raises(ValueError, match=r"camera 'a' has 2 samples .*pass one sample"):
        camera_image_batches({"a": torch.zeros(2, 3, 4, 4)}, samples=1)
    with pytest.raises(ValueError, match=r"camera 'b' has batch size 1, other cameras 2"):
        camera_image_batches({"a": torch.zeros(2, 3, 4, 4), "b": torch.zeros(3, 4, 4)})
    with pytest.raises(TypeError, match=r"camera 'a': image must be .*got list"):
        camera_image_batches({"a": [[0.0]]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"camera 'a' image has shape \(4, 4\); expected"):
        camera_image_batches({"a": torch.zeros(4, 4)})
    with pytest.raises(ValueError, match="non-empty mapping"):
        camera_image_batches({})
    with pytest.raises(ValueError, match="array_layout='NHWC'"):
        camera_image_batches({"a": hwc}, array_layout="NHWC")
    with pytest.raises(ValueError, match="empty"):
        camera_image_batches({"a": torch.zeros(1, 3, 0, 4)})
