"""AttributionViewerWidget: state, binary payloads, the explain command and its errors, export."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch
import traitlets
from matplotlib.image import imread

from vinlens.attribution import (
    camera_targets_for_layer,
    capture_modes_for_layer,
    explain_cameras,
    map_flatness,
    method_labels,
    near_flat_cameras,
)
from vinlens.attribution.aggregate import aggregate_attributions, camera_reliance_over
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
from vinlens.widgets import ModuleSelection, ModuleTableWidget
from vinlens.widgets._base import CommandCancelled, CommandTask
from vinlens.widgets.attribution_viewer import AttributionViewerWidget

EVIDENCE = {"rgb": (24, 70), "slam-left": (60, 18), "slam-right": (16, 44)}
LAYERS = {
    "dedicated_layer": "encoders.{camera}.conv3",
    "per_camera_call": "encoder.conv3",
    "stacked_camera_batch": "encoder.conv3",
}


@pytest.fixture(scope="module")
def images() -> dict[str, torch.Tensor]:
    return {k: v[0] for k, v in make_camera_images(evidence=EVIDENCE, seed=3).items()}


def viewer(images, mode="dedicated_layer", **kwargs) -> AttributionViewerWidget:
    kwargs.setdefault("target_class", EVIDENCE_CLASS)
    kwargs.setdefault("layer", LAYERS[mode])
    return AttributionViewerWidget(
        kwargs.pop("model", None) or MultiCameraDemoModel(mode),
        images,
        capture_mode=mode,
        **kwargs,
    )


def sent_messages(widget, monkeypatch):
    out = []
    monkeypatch.setattr(
        widget, "send", lambda content, buffers=None: out.append((content, buffers))
    )
    return out


def hook_count(model: torch.nn.Module) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


# -- state and payloads ---------------------------------------------------------------------
def test_images_cross_as_uint8_bytes_with_shape(images):
    w = viewer(images, compute=False)
    assert w.camera_keys == ["rgb", "slam-left", "slam-right"]
    rgb = w.images["rgb"]["$array"]
    assert rgb["dtype"] == "uint8" and rgb["shape"] == [96, 96, 3]
    assert isinstance(rgb["data"], bytes) and len(rgb["data"]) == 96 * 96 * 3
    left = w.images["slam-left"]["$array"]
    assert left["shape"] == [80, 64, 1] and len(left["data"]) == 80 * 64
    pixels = np.frombuffer(rgb["data"], dtype=np.uint8).reshape(96, 96, 3)
    expected = np.rint(images["rgb"].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    np.testing.assert_array_equal(pixels, expected)
    assert w.attributions == {} and w.maps == {}


def test_maps_cross_as_float32_bytes_at_image_size_and_equal_the_engine(images):
    model = MultiCameraDemoModel("per_camera_call")
    w = viewer(images, "per_camera_call", model=model)
    targets = camera_targets_for_layer("encoder.conv3", "per_camera_call", list(images))
    direct = explain_cameras(model, images, EVIDENCE_CLASS, targets)
    for record in direct:
        payload = w.attributions[record.camera_key]
        node = payload["map"]["$array"]
        assert node["dtype"] == "float32" and isinstance(node["data"], bytes)
        assert node["shape"] == list(record.image_shape)
        sent = np.frombuffer(node["data"], dtype="<f4").reshape(node["shape"])
        np.testing.assert_array_equal(sent, record.upsampled_map)
        np.testing.assert_array_equal(w.maps[record.camera_key], record.upsampled_map)
        np.testing.assert_array_equal(w.layer_maps[record.camera_key], record.raw_map)
        assert payload["min"] == record.raw_min and payload["max"] == record.raw_max
        assert payload["layer_shape"] == list(record.layer_shape)
        assert payload["score"] == pytest.approx(record.score)
        assert payload["capture_mode"] == "per_camera_call"
        assert payload["method_label"] == "Grad-CAM"
    assert w.layer_maps["rgb"].shape == (48, 48)
    assert w.maps["slam-left"].shape == (80, 64)
    # .maps hands out copies: editing one cannot change what the widget shows
    w.maps["rgb"][:] = -1
    assert w.maps["rgb"].min() >= 0


def test_payload_marks_the_flat_camera_with_the_engines_rule(images):
    # The tour's views: no blob in slam-right, whose map the demo model makes near-flat.
    planted = {"rgb": (30, 62), "slam-left": (52, 20)}
    flat_images = {k: v[0] for k, v in make_camera_images(evidence=planted).items()}
    w = viewer(flat_images)
    expected = map_flatness({k: (r.raw_min, r.raw_max) for k, r in w.records.items()})
    assert w.flatness == expected
    assert near_flat_cameras(w.records.values()) == {(0, "slam-right")}
    assert [k for k, p in w.attributions.items() if p["flat"]] == ["slam-right"]
    right = w.attributions["slam-right"]
    assert right["flat_reason"] == expected["slam-right"].reason and right["flat_reason"]
    assert right["span"] == pytest.approx(right["max"] - right["min"])
    assert right["largest_camera"] == expected["slam-right"].largest_camera
    assert right["relative_span"] < 0.01
    assert w.attributions["rgb"]["flat"] is False and w.attributions["rgb"]["flat_reason"] == ""
    # Flatness is judged across the cameras on screen: a recompute of one camera re-judges
    # every payload (slam-left alone at a flat layer channel would not change rgb's record).
    reply = w.run_command("explain", {"cameras": ["slam-right"], "method": "ablation_cam"})
    assert reply["kind"] == "result"
    assert w.attributions["slam-right"]["flat"] is w.flatness["slam-right"].flat


def test_non_finite_ranges_cross_as_explicit_floats(images):
    w = viewer(images)
    record = dataclasses.replace(w.records["rgb"], raw_max=float("nan"))
    from vinlens.widgets.attribution_viewer_payload import record_payload as _record_payload

    payload = _record_payload(
        record, map_flatness({"rgb": (record.raw_min, record.raw_max)})["rgb"]
    )
    assert payload["max"] == {"$float": "NaN"} and payload["span"] == {"$float": "NaN"}
    assert payload["flat"] is False


@pytest.mark.parametrize("mode", list(LAYERS))
def test_each_camera_map_peaks_on_its_planted_evidence(images, mode):
    w = viewer(images, mode)
    for camera, (row, col) in EVIDENCE.items():
        hot = np.unravel_index(np.argmax(w.maps[camera]), w.maps[camera].shape)
        assert np.hypot(hot[0] - row, hot[1] - col) <= 4, (mode, camera, hot)


def test_layer_choices_come_from_the_models_module_paths(images):
    w = viewer(images, compute=False)
    dedicated = {c["path"]: c["type"] for c in w.layer_choices["dedicated_layer"]}
    assert dedicated["encoders.{camera}.conv3"] == "Conv2d"
    assert "encoders.{camera}.bn2" in dedicated and "head" not in dedicated
    shared = viewer(images, "stacked_camera_batch", compute=False).layer_choices
    paths = [c["path"] for c in shared["stacked_camera_batch"]]
    assert paths[:3] == ["encoder", "encoder.conv1", "encoder.act1"]
    assert "head" not in paths and "<root>" not in paths  # head runs once on the whole batch
    assert [m["value"] for m in w.methods] == ["grad_cam", "grad_cam_plus_plus", "ablation_cam"]
    assert [m["label"] for m in w.methods] == list(method_labels().values())
    assert w.capture_modes == ["dedicated_layer", "per_camera_call", "stacked_camera_batch"]
    # One list of layers, each with the modes it is offered in; layer_choices is its view per mode.
    options = {c["path"]: c["modes"] for c in w.layers}
    for mode, choices in w.layer_choices.items():
        assert [c["path"] for c in choices] == [p for p, m in options.items() if mode in m]


@pytest.mark.parametrize("mode", list(LAYERS))
def test_modes_offered_per_layer_are_the_engines(images, mode):
    model = MultiCameraDemoModel(mode)
    w = viewer(images, mode, model=model, compute=False)
    offered = {c["path"]: c["modes"] for c in w.layers}
    for path, modes in offered.items():
        engine = capture_modes_for_layer(model, path, list(images), images=w._inputs)
        assert modes == list(engine), path
    assert offered[LAYERS[mode]] == [mode]
    # The layers the model does not run per camera are offered in no mode (the demo
    # model's head sees all cameras at once; one camera's own encoder is not shared).
    assert "head" not in offered
    assert "encoders.rgb.conv3" not in offered


def test_a_mode_the_layer_cannot_satisfy_fails_with_a_clear_message(images):
    w = viewer(images)  # dedicated encoders: encoders.rgb.conv3 runs once, for rgb only
    reply = w.run_command(
        "explain", {"capture_mode": "per_camera_call", "layer": "encoders.rgb.conv3"}
    )
    assert reply["kind"] == "error"
    assert reply["message"] == (
        "layer 'encoders.rgb.conv3' cannot be read in capture mode 'per_camera_call' on this "
        "model: it runs neither once per camera, nor once on the stacked cameras, nor as each "
        "camera's own module; pick another layer."
    )
    # The engine's own message, when a script asks it directly, has no doubled quote either.
    model = MultiCameraDemoModel()
    targets = camera_targets_for_layer("encoders.rgb.conv3", "per_camera_call", list(images))
    with pytest.raises(RuntimeError) as raised:
        explain_cameras(model, images, EVIDENCE_CLASS, targets)
    assert "''" not in str(raised.value)
    assert "never produced camera 'slam-left': no activation" in str(raised.value)


def test_layer_chooser_shares_the_module_selection_with_a_module_table(images):
    model = MultiCameraDemoModel()
    picked = ModuleSelection()
    table = ModuleTableWidget(model, selection=picked)
    w = viewer(images, model=model, selection=picked, compute=False)
    assert w.selection is picked
    # The viewer's layer seeds the fresh selection: one module per camera of the template.
    conv3 = [f"encoders.{k}.conv3" for k in images]
    assert picked.paths == conv3 and table.selected_paths == conv3
    # A module picked in the table moves the viewer's chooser (not the applied layer).
    table.selected_paths = ["encoders.slam-left.conv2"]
    assert w.selected_layer == "encoders.{camera}.conv2" and w.layer == "encoders.{camera}.conv3"
    # A pick that is no layer choice here leaves the chooser and the shared selection alone.
    picked.paths = ["<root>"]
    assert w.selected_layer == "encoders.{camera}.conv2" and picked.paths == ["<root>"]
    # Choosing in the viewer (as the browser does) picks the layer's modules everywhere.
    w.set_state({"selected_layer": "encoders.{camera}.conv1"})
    assert table.selected_paths == [f"encoders.{k}.conv1" for k in images]
    # A value that is no layer choice, sent by a browser, is refused without an exception.
    w.set_state({"selected_layer": "encoders.{camera}.nope"})
    assert w.selected_layer == "encoders.{camera}.conv1"
    assert "selected_layer" in w.error and w.status == "error"
    # Recompute applies the chooser; the applied layer and the chooser agree again.
    assert w.run_command("explain", {"layer": "encoders.{camera}.conv1"})["kind"] == "result"
    assert w.layer == w.selected_layer == "encoders.{camera}.conv1"
    assert picked.paths == [f"encoders.{k}.conv1" for k in images]


def test_score_callable_and_numpy_images(images):
    arrays = {k: v.permute(1, 2, 0).numpy() for k, v in images.items()}
    arrays["slam-left"] = arrays["slam-left"][:, :, 0]  # [H, W]
    calls = []

    def evidence_minus_ramp(output):
        calls.append(tuple(output.shape))
        return output[:, 0] - output[:, 1]

    w = AttributionViewerWidget(
        MultiCameraDemoModel(),
        arrays,
        score=evidence_minus_ramp,
        layer="encoders.{camera}.conv3",
    )
    assert calls == [(1, 4)]
    assert w.target_class is None and w.target_label == "score evidence_minus_ramp"
    assert w.images["slam-left"]["$array"]["shape"] == [80, 64, 1]
    reply = w.run_command("explain", {"target_class": 2})
    assert reply["kind"] == "error" and "score callable" in reply["message"]


def test_display_state_set_from_python_is_checked(images):
    w = viewer(images, compute=False)
    w.colormap, w.scale, w.view, w.opacity = "magma", "raw", "single", 0.25
    assert (w.colormap, w.scale, w.view, w.opacity) == ("magma", "raw", "single", 0.25)
    for name, value in [("colormap", "jet"), ("scale", "log"), ("view", "3d"), ("opacity", 1.5)]:
        with pytest.raises(traitlets.TraitError, match=name):
            setattr(w, name, value)
    assert (w.colormap, w.scale, w.view, w.opacity) == ("magma", "raw", "single", 0.25)
    # The choices are Enum traits, so a browser update outside them is the widget's error.
    assert list(w.traits()["view"].values) == ["grid", "single"]
    w.set_state({"view": "3d"})
    assert w.view == "single" and "view" in w.error


# -- the explain command -------------------------------------------------------------------------
def test_recompute_with_another_method_layer_and_class(images):
    w = viewer(images)
    before = w.maps
    reply = w.run_command(
        "explain",
        {"method": "grad_cam_plus_plus", "layer": "encoders.{camera}.conv2", "target_class": 1},
    )
    assert reply["kind"] == "result" and reply["data"] == {"cameras": list(EVIDENCE)}
    assert (w.method, w.layer, w.target_class, w.status) == (
        "grad_cam_plus_plus",
        "encoders.{camera}.conv2",
        1,
        "idle",
    )
    assert {r.method for r in w.records.values()} == {"grad_cam_plus_plus"}
    assert not np.array_equal(before["rgb"], w.maps["rgb"])
    assert w.attributions["rgb"]["method_label"] == "Grad-CAM++"


def test_recompute_one_camera_leaves_the_others(images):
    w = viewer(images)
    before = w.records
    reply = w.run_command("explain", {"cameras": ["slam-left"], "method": "ablation_cam"})
    assert reply["kind"] == "result" and reply["data"] == {"cameras": ["slam-left"]}
    assert w.records["slam-left"].method == "ablation_cam"
    assert w.records["rgb"] is before["rgb"] and w.records["slam-right"] is before["slam-right"]
    assert list(w.attributions) == ["rgb", "slam-left", "slam-right"]


def test_progress_is_reported_per_camera_for_ablation(images, monkeypatch):
    w = viewer(images, compute=False)
    sent = sent_messages(w, monkeypatch)
    reply = w.run_command("explain", {"method": "ablation_cam"})
    assert reply["kind"] == "result"
    progress = [(c["done"], c["total"]) for c, _ in sent if c["kind"] == "progress"]
    assert progress == [(0, 3), (1, 3), (2, 3), (3, 3)]
    # the result itself is small: maps travel in the attributions traitlet
    result = next(c for c, _ in sent if c["kind"] == "result")
    assert result["data"] == {"cameras": list(EVIDENCE)}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"layer": "encoders.{camera}.nope"}, "'encoders.rgb.nope'"),
        ({"layer": "encoders.rgb.conv3"}, "each need their own"),
        ({"layer": 3}, "module path string"),
        ({"method": "lime"}, "unknown method 'lime'"),
        ({"capture_mode": "sideways"}, "unknown capture_mode 'sideways'"),
        ({"cameras": ["rgb", "depth"]}, "unknown camera key(s) ['depth']"),
        ({"cameras": "rgb"}, "must be a list of camera keys"),
        ({"cameras": []}, "name at least one camera"),
        ({"target_class": -1}, "non-negative integer"),
        ({"target_class": "0"}, "non-negative integer"),
        ({"target_class": 9}, "not a class index of an output with 4 classes"),
        (
            {"capture_mode": "stacked_camera_batch", "layer": "head"},
            "layer 'head' cannot be read in capture mode 'stacked_camera_batch' on this model: "
            "it runs neither once per camera",
        ),
        (
            {"capture_mode": "per_camera_call", "layer": "encoder.conv3"},
            "layer 'encoder.conv3' (camera 'rgb') is not a module",
        ),
    ],
)
def test_bad_arguments_are_error_replies_and_keep_the_maps(images, args, expected):
    w = viewer(images)
    before = {k: v.copy() for k, v in w.maps.items()}
    payload = dict(w.attributions)
    reply = w.run_command("explain", args)
    assert reply["kind"] == "error", reply
    assert expected in reply["message"], reply["message"]
    assert w.status == "error" and w.error == reply["message"]
    assert w.attributions == payload
    for key, values in before.items():
        np.testing.assert_array_equal(w.maps[key], values)
    assert hook_count(w._model) == 0
    assert (w.method, w.layer) == ("grad_cam", "encoders.{camera}.conv3")


class FailingDemoModel(MultiCameraDemoModel):
    fail = False

    def forward(self, images):
        if self.fail:
            raise RuntimeError("sensor packet corrupted")
        return super().forward(images)


def test_a_model_that_fails_on_the_probe_still_opens_with_structural_choices(images):
    model = FailingDemoModel("per_camera_call")
    model.fail = True
    w = viewer(images, "per_camera_call", model=model, compute=False)
    assert "sensor packet corrupted" in w.error and w.status == "error"
    assert "every structurally possible mode is offered" in w.error
    offered = {c["path"]: c["modes"] for c in w.layers}
    assert offered["encoder.conv3"] == ["per_camera_call", "stacked_camera_batch"]
    assert hook_count(model) == 0
    # The model's own error is what an explanation then reports.
    reply = w.run_command("explain", {})
    assert reply["kind"] == "error" and "sensor packet corrupted" in reply["message"]


@pytest.mark.parametrize("method", ["grad_cam", "ablation_cam"])
def test_exception_in_forward_is_an_error_reply_with_no_hooks_left(images, method):
    model = FailingDemoModel("per_camera_call")
    model.train()
    w = viewer(images, "per_camera_call", model=model)
    model.fail = True
    reply = w.run_command("explain", {"method": method})
    assert reply["kind"] == "error"
    assert "RuntimeError: sensor packet corrupted" in reply["message"]
    assert "sensor packet corrupted" in reply["traceback"]
    assert w.error_traceback and w.status == "error"
    assert hook_count(model) == 0
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    model.fail = False
    assert w.run_command("explain", {"method": method})["kind"] == "result"
    assert w.status == "idle" and w.error == ""


def test_cancel_keeps_the_previous_maps(images, monkeypatch):
    gate = threading.Event()

    class SlowModel(MultiCameraDemoModel):
        def forward(self, images):
            gate.wait(5)
            return super().forward(images)

    w = viewer(images, model=SlowModel())
    before = w.maps
    gate.clear()
    sent = sent_messages(w, monkeypatch)
    w._dispatch(
        {"kind": "command", "id": "r1", "name": "explain", "args": {"method": "ablation_cam"}}
    )
    for _ in range(500):
        if any(c["kind"] == "progress" for c, _ in sent):
            break
        threading.Event().wait(0.01)
    w._dispatch({"kind": "cancel", "id": "r1"})
    gate.set()
    for _ in range(1000):
        if any(c.get("id") == "r1" and c["kind"] in ("result", "error") for c, _ in sent):
            break
        threading.Event().wait(0.01)
    reply = next(c for c, _ in sent if c.get("id") == "r1" and c["kind"] in ("result", "error"))
    assert reply["kind"] == "error" and reply["cancelled"]
    assert w.status == "idle"
    assert {r.method for r in w.records.values()} == {"grad_cam"}
    np.testing.assert_array_equal(w.maps["rgb"], before["rgb"])
    assert hook_count(w._model) == 0


def test_a_second_explain_while_one_runs_is_refused(images):
    gate = threading.Event()

    class SlowModel(MultiCameraDemoModel):
        def forward(self, images):
            gate.wait(5)
            return super().forward(images)

    w = viewer(images, model=SlowModel(), compute=False)
    replies: list[dict] = []
    first = threading.Thread(target=lambda: replies.append(w.run_command("explain", {})))
    first.start()
    for _ in range(500):
        if w.current_task is not None:
            break
        threading.Event().wait(0.01)
    second = w.run_command("explain", {"method": "grad_cam_plus_plus"})
    gate.set()
    first.join(30)
    assert second["kind"] == "error" and "already running for this viewer" in second["message"]
    assert replies[0]["kind"] == "result"
    assert {r.method for r in w.records.values()} == {"grad_cam"}
    assert hook_count(w._model) == 0


# -- construction errors --------------------------------------------------------------------------
def test_constructor_rejects_bad_inputs_with_clear_errors(images):
    model = MultiCameraDemoModel()
    with pytest.raises(ValueError, match="exactly one of score"):
        AttributionViewerWidget(model, images, layer="encoders.{camera}.conv3")
    with pytest.raises(ValueError, match="exactly one of score"):
        AttributionViewerWidget(model, images, score=lambda o: o[:, 0], target_class=0)
    batch = {k: v.unsqueeze(0).repeat(2, 1, 1, 1) for k, v in images.items()}
    with pytest.raises(ValueError, match=r"camera 'rgb'.*one sample"):
        AttributionViewerWidget(model, batch, target_class=0)
    with pytest.raises(ValueError, match=r"'encoders\.rgb\.conv9' .*not a module"):
        AttributionViewerWidget(model, images, target_class=0, layer="encoders.{camera}.conv9")
    with pytest.raises(ValueError, match="Target camera 'depth' has no image"):
        targets = camera_targets_for_layer("x", "per_camera_call", ["rgb", "depth"])
        AttributionViewerWidget(model, images, target_class=0, targets=targets)
    with pytest.raises(ValueError, match="colormap='jet'"):
        AttributionViewerWidget(model, images, target_class=0, colormap="jet")
    with pytest.raises(ValueError, match="target_class must be a non-negative integer"):
        AttributionViewerWidget(model, images, target_class=True)
    with pytest.raises(ValueError, match="opacity"):
        AttributionViewerWidget(model, images, target_class=0, opacity=2)
    with pytest.raises(TypeError, match=r"camera 'rgb'.*list"):
        AttributionViewerWidget(model, {"rgb": [[0.0]]}, target_class=0)


# -- export -------------------------------------------------------------------------------------
def test_export_png_writes_the_maps_as_shown(images, tmp_path):
    w = viewer(images)
    with pytest.raises(RuntimeError, match="no attribution maps yet"):
        viewer(images, compute=False).export_png(tmp_path / "none")
    paths = w.export_png(tmp_path / "maps")
    assert [p.name for p in paths] == ["rgb.png", "slam-left.png", "slam-right.png"]
    for path, (camera, (row, col)) in zip(paths, EVIDENCE.items(), strict=True):
        pixels = imread(path)
        assert pixels.shape[:2] == w.maps[camera].shape
        # viridis' brightest colour is its top: the brightest pixel is the map's maximum
        brightness = pixels[..., :3].mean(axis=-1)
        hot = np.unravel_index(np.argmax(brightness), brightness.shape)
        assert np.hypot(hot[0] - row, hot[1] - col) <= 4, (camera, hot)
    w.opacity = 1.0
    w.colormap = "magma"
    overlay = w.export_png(tmp_path / "overlay", overlay=True)
    plain = imread(tmp_path / "maps" / "rgb.png")[..., :3]
    blended = imread(overlay[0])[..., :3]
    assert blended.shape == plain.shape and not np.allclose(blended, plain)
    w.opacity = 0.0
    only_image = imread(w.export_png(tmp_path / "image", overlay=True)[0])[..., :3]
    expected = np.rint(images["rgb"].permute(1, 2, 0).numpy() * 255) / 255
    np.testing.assert_allclose(only_image, expected, atol=1 / 255)


def test_export_png_keeps_cameras_whose_keys_sanitise_alike(images, tmp_path):
    model = MultiCameraDemoModel("per_camera_call")
    renamed = {"cam/a": images["rgb"], "cam_a": images["slam-left"], "c": images["slam-right"]}

    def forward(inputs):
        return model(dict(zip(images, inputs.values(), strict=True)))

    w = AttributionViewerWidget(
        model,
        renamed,
        target_class=EVIDENCE_CLASS,
        layer="encoder.conv3",
        capture_mode="per_camera_call",
        forward=forward,
    )
    paths = w.export_png(tmp_path)
    assert [p.name for p in paths] == ["cam_a.png", "cam_a-1.png", "c.png"]
    assert imread(paths[0]).shape[:2] == (96, 96) and imread(paths[1]).shape[:2] == (80, 64)


def test_export_png_raw_scale_shares_one_range(images, tmp_path):
    w = viewer(images)
    w.scale = "raw"
    weakest = min(w.maps, key=lambda k: w.maps[k].max())
    strongest = max(w.maps, key=lambda k: w.maps[k].max())
    w.export_png(tmp_path)
    top_weak = imread(tmp_path / f"{weakest}.png")[..., :3].mean(axis=-1).max()
    top_strong = imread(tmp_path / f"{strongest}.png")[..., :3].mean(axis=-1).max()
    if w.maps[weakest].max() < 0.9 * w.maps[strongest].max():
        assert top_weak < top_strong


# -- dataset view ----------------------------------------------------------------------------------
class CameraDataset(torch.utils.data.Dataset):
    """Demo samples with their class; even samples carry evidence in every camera, odd in rgb."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        planted = EVIDENCE if i % 2 == 0 else {"rgb": EVIDENCE["rgb"]}
        images = make_camera_images(evidence=planted, seed=10 + i)
        return {k: v[0] for k, v in images.items()}, i % 4


def loader(n=8, batch_size=4):
    return torch.utils.data.DataLoader(CameraDataset(n), batch_size=batch_size)


def test_dataset_view_payload_is_the_engines_aggregate_and_reliance(images):
    model = MultiCameraDemoModel()
    w = viewer(images, model=model)
    task = w.explain_dataset(loader(), keep_samples=6, percentiles=(50, 90))
    assert task.exception is None and w.status == "idle"
    targets = camera_targets_for_layer("encoders.{camera}.conv3", "dedicated_layer", list(images))
    engine = aggregate_attributions(model, loader(), targets, score=EVIDENCE_CLASS).finish((50, 90))
    overall = {s.camera_key: s for s in engine if s.class_index is None}
    summary = camera_reliance_over(model, loader(), EVIDENCE_CLASS)
    payload = w.dataset
    assert (payload["samples"], payload["batches"]) == (8, 2)
    assert payload["kept"] == [f"batch {b} #{i}" for b in (0, 1) for i in range(4)][:6]
    assert [s["value"] for s in payload["stats"]] == ["mean", "p50", "p90"]
    for key in images:
        node = payload["aggregates"]["mean"][key]["map"]["$array"]
        sent = np.frombuffer(node["data"], dtype="<f4").reshape(node["shape"])
        np.testing.assert_allclose(sent, overall[key].mean_map, rtol=1e-6)
        p90 = payload["aggregates"]["p90"][key]["map"]["$array"]
        np.testing.assert_array_equal(
            np.frombuffer(p90["data"], dtype="<f4").reshape(p90["shape"]),
            overall[key].percentile_maps[90.0],
        )
    engine_rows = {r.camera_key: r for r in summary.finish()}
    rows = payload["reliance"]
    assert [r["camera"] for r in rows] == list(images)  # camera order, as the panels
    for row in rows:
        assert row["drop"] == pytest.approx(engine_rows[row["camera"]].mean_drop)
        assert row["std"] == pytest.approx(engine_rows[row["camera"]].std_drop)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    # rgb has evidence in every sample, the SLAM cameras in half: rgb matters most.
    assert max(rows, key=lambda r: r["drop"])["camera"] == "rgb"
    assert w.reliance[0].camera_key == "rgb" and len(w.map_statistics) == 3
    assert w.dataset_task["state"] == "done" and w.dataset_task["done"] == 2
    assert w.dataset_task["total"] == 2


def test_dataset_slider_shows_the_chosen_sample_with_its_own_maps(images):
    model = MultiCameraDemoModel()
    w = viewer(images, model=model)
    w.explain_dataset(loader(), keep_samples=5)
    # The pass ends showing kept sample 0.
    first, _ = CameraDataset(8)[0]
    assert w.sample_index == 0
    rgb = np.frombuffer(w.images["rgb"]["$array"]["data"], dtype=np.uint8)
    np.testing.assert_array_equal(
        rgb, np.rint(first["rgb"].permute(1, 2, 0).numpy() * 255).astype(np.uint8).ravel()
    )
    before = w.images
    records = w.show_sample(3)  # what the slider sends
    assert w.sample_index == 3 and w.images != before
    third, _ = CameraDataset(8)[3]
    targets = camera_targets_for_layer("encoders.{camera}.conv3", "dedicated_layer", list(images))
    direct = explain_cameras(model, {k: v[None] for k, v in third.items()}, EVIDENCE_CLASS, targets)
    for record in direct:
        np.testing.assert_array_equal(records[record.camera_key].raw_map, record.raw_map)
    # slam-left of an odd sample has no evidence: its map is near-flat and marked so.
    assert w.attributions["slam-left"]["flat"] and not w.attributions["rgb"]["flat"]
    # Bad sample requests are error replies; the shown sample stays.
    for bad, expected in [(5, "in [0, 5)"), (-1, "in [0, 5)"), ("2", "in [0, 5)")]:
        reply = w.run_command("explain", {"sample": bad})
        assert reply["kind"] == "error" and expected in reply["message"]
    reply = w.run_command("explain", {"sample": 1, "cameras": ["rgb"]})
    assert reply["kind"] == "error" and "every camera" in reply["message"]
    assert w.sample_index == 3


def _sent(node: dict) -> np.ndarray:
    array = node["$array"]
    return np.frombuffer(array["data"], dtype="<f4").reshape(array["shape"])


def test_dataset_view_offers_each_class_and_its_most_and_least_concentrated_samples(images):
    model = MultiCameraDemoModel()
    w = viewer(images, model=model)
    w.explain_dataset(loader(), keep_samples=3)
    targets = camera_targets_for_layer("encoders.{camera}.conv3", "dedicated_layer", list(images))
    engine = aggregate_attributions(model, loader(), targets, score=EVIDENCE_CLASS).finish((50, 90))
    payload = w.dataset
    # The loader's labels are i % 4: four classes of two samples each, after "all".
    assert [c["value"] for c in payload["classes"]] == ["all", "0", "1", "2", "3"]
    assert payload["classes"][2]["label"] == "class 1 (2)"
    for s in engine:
        group = "all" if s.class_index is None else str(s.class_index)
        maps = payload["aggregates"] if group == "all" else payload["class_aggregates"][group]
        np.testing.assert_allclose(_sent(maps["mean"][s.camera_key]["map"]), s.mean_map, rtol=1e-6)
        np.testing.assert_array_equal(
            _sent(maps["p90"][s.camera_key]["map"]), s.percentile_maps[90.0]
        )
        rows = payload["concentration"][group][s.camera_key]
        for which, samples in (("most", s.most_concentrated), ("least", s.least_concentrated)):
            assert [r["sample_id"] for r in rows[which]] == [x.sample_id for x in samples]
            assert [r["concentration"] for r in rows[which]] == pytest.approx(
                [x.concentration for x in samples]
            )
            for row, sample in zip(rows[which], samples, strict=True):
                # Only the first three samples stay on the slider; their index is their id.
                expected = sample.sample_id if sample.sample_id < 3 else None
                assert row["kept_index"] == expected
                np.testing.assert_array_equal(_sent(row["map"]), sample.raw_map)
    # Class 0 holds samples 0 and 4, which carry evidence in every camera.
    ids = {r["sample_id"] for r in payload["concentration"]["0"]["rgb"]["most"]}
    assert ids == {0, 4}
    assert {s.class_index for s in w.class_map_statistics} == {0, 1, 2, 3}
    w.aggregate_class = "2"
    with pytest.raises(traitlets.TraitError, match="aggregate_class"):
        w.aggregate_class = "7"
    # A pass whose classes do not include the chosen one goes back to all classes.
    w.explain_dataset(loader(4, 2), max_batches=1)
    assert [c["value"] for c in w.dataset["classes"]] == ["all", "0", "1"]
    assert w.aggregate_class == "all"


def test_dataset_pass_can_be_cancelled_and_keeps_the_previous_results(images):
    gate = threading.Event()

    class SlowLoader:
        def __iter__(self):
            for batch in loader():
                yield batch
                gate.wait(5)

    w = viewer(images)
    w.explain_dataset(loader(4, 2))
    previous = w.dataset
    task = w.explain_dataset(SlowLoader(), wait=False)
    for _ in range(500):
        task_state = w.dataset_task
        if task_state["id"] == task.request_id and task_state["done"] >= 1:
            break
        threading.Event().wait(0.01)
    assert w.dataset_task["state"] == "running" and w.dataset_task["total"] == 0  # no len()
    # A second explanation while the pass runs is refused.
    assert w.run_command("explain", {})["kind"] == "error"
    w._dispatch({"kind": "cancel", "id": w.dataset_task["id"]})  # what the browser's Cancel sends
    gate.set()
    task.join(30)
    assert isinstance(task.exception, CommandCancelled)
    assert w.dataset_task["state"] == "cancelled" and w.status == "idle"
    assert w.dataset == previous


def test_dataset_pass_errors(images):
    w = viewer(images)
    with pytest.raises(TypeError, match="iterable of batches"):
        w.explain_dataset(images)
    with pytest.raises(ValueError, match="max_batches"):
        w.explain_dataset(loader(), max_batches=0)
    with pytest.raises(ValueError, match="keep_samples"):
        w.explain_dataset(loader(), keep_samples=0)
    with pytest.raises(ValueError, match="percentiles"):
        w.explain_dataset(loader(), percentiles=(50, 150))
    with pytest.raises(RuntimeError, match="gave no batches"):
        w.explain_dataset([])
    assert w.dataset_task["state"] == "failed"
    with pytest.raises(RuntimeError, match="neither a mapping"):
        w.explain_dataset([torch.zeros(2, 3, 8, 8)])
    assert w.dataset == {} and w.status == "error"
    reply = w.run_command("explain", {"sample": 0})
    assert reply["kind"] == "error" and "no dataset samples yet" in reply["message"]
    # max_batches stops early; the browser can pick another aggregate statistic only
    # among those the pass made.
    w.explain_dataset(loader(8, 2), max_batches=2, keep_samples=2)
    assert (w.dataset["batches"], w.dataset["samples"]) == (2, 4)
    w.aggregate_stat = "p90"
    with pytest.raises(traitlets.TraitError, match="aggregate_stat"):
        w.aggregate_stat = "p99"


def test_interrupting_a_waiting_dataset_pass_cancels_it(images, monkeypatch):
    gate = threading.Event()

    class SlowLoader:
        def __iter__(self):
            for batch in loader():
                gate.wait(5)
                yield batch

    real_join = CommandTask.join
    calls = []

    def interrupted_join(self, timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the user interrupts the kernel during the wait
        gate.set()
        return real_join(self, timeout)

    monkeypatch.setattr(CommandTask, "join", interrupted_join)
    w = viewer(images)
    with pytest.raises(KeyboardInterrupt):
        w.explain_dataset(SlowLoader())
    assert w.dataset_task["state"] == "cancelled" and w.dataset == {}
    assert w.current_task is None and hook_count(w._model) == 0


# -- faults of the third hostile round (issue 23, class 7) ---------------------------------------


def test_browser_updates_naming_no_sample_or_camera_are_refused(images):
    w = viewer(images)
    w.explain_dataset(loader(4, 2), keep_samples=3)
    for state, name in [
        ({"sample_index": -5}, "sample_index"),
        ({"sample_index": 3}, "sample_index"),
        ({"focused_camera": "ghost"}, "focused_camera"),
    ]:
        w.set_state(state)
        assert name in w.error, (state, w.error)
    assert (w.sample_index, w.focused_camera) == (0, w.camera_keys[0])
    w.set_state({"sample_index": 2, "focused_camera": w.camera_keys[1]})
    assert (w.sample_index, w.focused_camera) == (2, w.camera_keys[1])


def test_mean_baseline_pass_ends_with_its_results(images):
    w = viewer(images)
    w.explain_dataset(loader(8, 2), baseline="mean", keep_samples=4)
    assert w.dataset["baseline"] == "mean" and w.dataset["samples"] == 8
    assert w.dataset_task["state"] == "done" and w.status == "idle"
    assert len(w.reliance) == len(w.camera_keys)


def test_mean_baseline_over_a_generator_reads_the_maps_batches_only(images):
    read = []

    def generator():
        for i, batch in enumerate(loader(12, 2)):
            read.append(i)
            yield batch

    w = viewer(images)
    with pytest.raises(RuntimeError, match="max_batches"):
        w.explain_dataset(generator(), baseline="mean")
    assert read == []  # refused before the generator was touched
    w.explain_dataset(generator(), baseline="mean", max_batches=2, keep_samples=2)
    assert read == [0, 1] and w.dataset["batches"] == 2


def test_cancel_during_the_mean_pass_stops_reading_the_loader(images):
    read = []
    started = threading.Event()
    gate = threading.Event()

    class SlowLoader:
        def __len__(self):
            return 40

        def __iter__(self):
            for i in range(40):
                read.append(i)
                started.set()
                gate.wait(0.05)
                yield make_camera_images(1, evidence=EVIDENCE, seed=i)

    w = viewer(images)
    task = w.explain_dataset(SlowLoader(), baseline="mean", wait=False)
    assert started.wait(30)
    for _ in range(500):
        if w.dataset_task.get("phase") == "mean" and w.dataset_task.get("done", 0) >= 1:
            break
        threading.Event().wait(0.01)
    assert w.dataset_task["phase"] == "mean" and w.dataset_task["total"] == 40
    w._dispatch({"kind": "cancel", "id": w.dataset_task["id"]})
    task.join(30)
    count = len(read)
    threading.Event().wait(0.3)
    assert isinstance(task.exception, CommandCancelled)
    assert w.dataset_task["state"] == "cancelled"
    assert len(read) == count and count < 40  # nothing reads the loader after the cancel
