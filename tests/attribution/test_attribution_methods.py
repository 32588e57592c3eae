"""Grad-CAM, Grad-CAM++ and Ablation-CAM against independent computations, plus hygiene.

References here never use the vinlens capture helpers: they keep every raw output
of the target layer, pick the camera by plain indexing (``out[i::n]`` for a stacked
batch, the i-th call for a shared layer) and differentiate with
``torch.autograd.grad``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import numpy as np
import pytest
import torch
from captum.attr import LayerGradCam
from torch import nn

from vinlens.attribution import (
    CameraExplanationTarget,
    LayerTarget,
    ablation_cam,
    grad_cam,
    grad_cam_plus_plus,
)
from vinlens.demo import CAMERA_KEYS, EVIDENCE_CLASS, MultiCameraDemoModel

Images = dict[str, torch.Tensor]


def evidence_score(model: nn.Module, images: Images) -> Callable[[], torch.Tensor]:
    return lambda: model(images)[:, EVIDENCE_CLASS]


def camera_rows(target: CameraExplanationTarget, outputs: list[torch.Tensor]) -> torch.Tensor:
    """The camera's activation, found without the library's routing helpers."""
    if target.capture_mode == "per_camera_call":
        assert target.invocation_index is not None
        return outputs[target.invocation_index]
    assert len(outputs) == 1
    return outputs[0]


def camera_slice(target: CameraExplanationTarget, tensor: torch.Tensor) -> torch.Tensor:
    if target.capture_mode == "stacked_camera_batch":
        assert target.stacked_camera_count is not None
        return tensor[target.stacked_camera_index :: target.stacked_camera_count]
    return tensor


def manual_activation_and_gradient(
    model: nn.Module, target: CameraExplanationTarget, score: Callable[[], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    module = model.get_submodule(target.target.module_path)
    outputs: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, out: outputs.append(out))
    try:
        value = score()
    finally:
        handle.remove()
    layer_output = camera_rows(target, outputs)
    (gradient,) = torch.autograd.grad(value.sum(), layer_output)
    return camera_slice(target, layer_output).detach(), camera_slice(target, gradient)


def manual_grad_cam(activation: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    weights = gradient.mean(dim=(2, 3))
    return torch.relu(torch.einsum("bc,bchw->bhw", weights, activation))


def numpy_grad_cam_plus_plus(activation: torch.Tensor, gradient: torch.Tensor) -> np.ndarray:
    """The pytorch-grad-cam formulation, in numpy."""
    acts, grads = activation.double().numpy(), gradient.double().numpy()
    g2, g3 = grads**2, grads**3
    sum_acts = acts.sum(axis=(2, 3))
    aij = g2 / (2 * g2 + sum_acts[:, :, None, None] * g3 + 1e-6)
    aij = np.where(grads != 0, aij, 0)
    weights = (np.maximum(grads, 0) * aij).sum(axis=(2, 3))
    cam = (weights[:, :, None, None] * acts).sum(axis=1)
    return np.maximum(cam, 0)


def slow_ablation_reference(
    model: nn.Module, target: CameraExplanationTarget, images: Images
) -> torch.Tensor:
    """One forward per channel, zeroing that channel by direct indexing."""
    module = model.get_submodule(target.target.module_path)
    with torch.no_grad():
        outputs: list[torch.Tensor] = []
        handle = module.register_forward_hook(lambda _m, _i, out: outputs.append(out))
        try:
            base = model(images)[:, EVIDENCE_CLASS]
        finally:
            handle.remove()
        activation = camera_slice(target, camera_rows(target, outputs))
        weights = []
        for channel in range(activation.shape[1]):
            calls = []

            def zero_channel(
                _m: nn.Module,
                _i: object,
                out: torch.Tensor,
                channel: int = channel,
                calls: list[None] = calls,
            ) -> torch.Tensor:
                calls.append(None)
                if (
                    target.capture_mode == "per_camera_call"
                    and len(calls) - 1 != target.invocation_index
                ):
                    return out
                out = out.clone()
                if target.capture_mode == "stacked_camera_batch":
                    assert target.stacked_camera_count is not None
                    out[target.stacked_camera_index :: target.stacked_camera_count, channel] = 0
                else:
                    out[:, channel] = 0
                return out

            handle = module.register_forward_hook(zero_channel)
            try:
                ablated = model(images)[:, EVIDENCE_CLASS]
            finally:
                handle.remove()
            weights.append((base - ablated) / base)
        channel_weights = torch.stack(weights, dim=1)  # [B, C]
        return torch.relu(torch.einsum("bc,bchw->bhw", channel_weights, activation))


def all_hooks_removed(model: nn.Module) -> bool:
    return all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
        for m in model.modules()
    )


# -- agreement with independent computations ------------------------------------------------


def test_grad_cam_matches_manual_autograd_in_every_mode(
    model: MultiCameraDemoModel, images: Images
) -> None:
    score = evidence_score(model, images)
    for target in model.camera_targets():
        activation, gradient = manual_activation_and_gradient(model, target, score)
        cam = grad_cam(model, target, score)
        assert cam.shape == (2, *activation.shape[2:])
        assert torch.allclose(cam, manual_grad_cam(activation, gradient), atol=1e-7, rtol=1e-5)
        assert cam.max() > 0


def test_grad_cam_plus_plus_matches_the_reference_formula(
    model: MultiCameraDemoModel, images: Images
) -> None:
    score = evidence_score(model, images)
    for target in model.camera_targets():
        activation, gradient = manual_activation_and_gradient(model, target, score)
        cam = grad_cam_plus_plus(model, target, score)
        expected = numpy_grad_cam_plus_plus(activation, gradient)
        np.testing.assert_allclose(cam.numpy(), expected, rtol=1e-4, atol=1e-6)


def captum_grad_cam(model: nn.Module, layer: nn.Module, images: Images) -> torch.Tensor:
    def forward(*cameras: torch.Tensor) -> torch.Tensor:
        return model(dict(zip(CAMERA_KEYS, cameras, strict=True)))  # type: ignore[no-any-return]

    attribution = LayerGradCam(forward, layer).attribute(
        tuple(images[key] for key in CAMERA_KEYS), target=EVIDENCE_CLASS, relu_attributions=True
    )
    return attribution.squeeze(1).detach()  # type: ignore[no-any-return]


def test_grad_cam_equals_captum_for_dedicated_layers(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    for target in model.camera_targets():
        layer = model.get_submodule(target.target.module_path)
        ours = grad_cam(model, target, evidence_score(model, images))
        assert torch.allclose(ours, captum_grad_cam(model, layer, images), atol=1e-7, rtol=1e-5)


def test_shared_layer_map_is_per_camera_where_captum_only_sees_the_last_call(
    images: Images,
) -> None:
    model = MultiCameraDemoModel("per_camera_call")
    captum = captum_grad_cam(model, model.encoder.conv3, images)
    rgb, _, slam_right = model.camera_targets()
    # Captum keeps the last call's activation: that is our slam-right map ...
    ours_last = grad_cam(model, slam_right, evidence_score(model, images))
    assert torch.allclose(ours_last, captum, atol=1e-7, rtol=1e-5)
    # ... while we also give the rgb camera its own map (at its own resolution).
    ours_rgb = grad_cam(model, rgb, evidence_score(model, images))
    assert ours_rgb.shape == (2, 48, 48) and captum.shape == (2, 40, 32)


def test_ablation_cam_matches_the_one_channel_reference(mode: str, images: Images) -> None:
    # A narrower CAM layer keeps the one-forward-per-channel reference quick.
    model = MultiCameraDemoModel(mode, width=6)

    def replicated(repeats: int) -> torch.Tensor:
        tiled = {key: image.repeat(repeats, 1, 1, 1) for key, image in images.items()}
        return model(tiled)[:, EVIDENCE_CLASS]

    for target in model.camera_targets():
        expected = slow_ablation_reference(model, target, images)
        assert expected.max() > 0
        # No replicated score (one forward per channel), then chunks that do and do not
        # divide the channel count, then all channels in one forward.
        for channel_batch_size in (None, 1, 4, 64):
            cam = ablation_cam(
                model,
                target,
                evidence_score(model, images),
                replicated_score=replicated if channel_batch_size is not None else None,
                channel_batch_size=channel_batch_size or 32,
            )
            assert torch.allclose(cam, expected, atol=1e-5, rtol=1e-4), channel_batch_size


def test_ablation_rejects_a_replicated_score_that_does_not_repeat_the_batch(
    model: MultiCameraDemoModel, images: Images
) -> None:
    target = model.camera_targets()[0]
    score = evidence_score(model, images)
    with pytest.raises(RuntimeError, match="must repeat every input r times"):
        ablation_cam(
            model, target, score, replicated_score=lambda _r: score(), channel_batch_size=4
        )
    assert all_hooks_removed(model)


def test_ablation_needs_one_score_per_sample(model: MultiCameraDemoModel, images: Images) -> None:
    with pytest.raises(ValueError, match=r"returned 1 score\(s\).*batch size 2"):
        ablation_cam(model, model.camera_targets()[0], lambda: model(images)[:, 0].sum())


class TupleStage(nn.Module):
    """A backbone stage returning optional per-scale outputs, like DFormer stages."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, torch.relu(self.conv(x))


class TupleNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.stage = TupleStage()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, features = self.stage(x)
        return self.head(features.mean(dim=(2, 3)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("output_index", [None, 1])
def test_tuple_output_layers(output_index: int | None) -> None:
    net = TupleNet().eval()
    x = torch.rand(2, 3, 8, 8)
    target = CameraExplanationTarget("cam", LayerTarget("stage", output_index), "dedicated_layer")
    outputs: list[torch.Tensor] = []
    handle = net.stage.register_forward_hook(lambda _m, _i, out: outputs.append(out[1]))
    score = net(x)[:, 1]
    handle.remove()
    (gradient,) = torch.autograd.grad(score.sum(), outputs[0])
    expected = manual_grad_cam(outputs[0].detach(), gradient)
    assert torch.allclose(grad_cam(net, target, lambda: net(x)[:, 1]), expected, atol=1e-7)
    # Ablation writes the ablated tensor back into the tuple at the same position.
    with torch.no_grad():
        base = net(x)[:, 1]
        weights = []
        for channel in range(4):
            stage_out = outputs[0].detach().clone()
            stage_out[:, channel] = 0
            weights.append((base - net.head(stage_out.mean(dim=(2, 3)))[:, 1]) / base)
        reference = torch.relu(
            torch.einsum("bc,bchw->bhw", torch.stack(weights, 1), outputs[0].detach())
        )
    assert torch.allclose(ablation_cam(net, target, lambda: net(x)[:, 1]), reference, atol=1e-6)
    with pytest.raises(RuntimeError, match="output_index=0 has no tensor"):
        grad_cam(
            net,
            CameraExplanationTarget("cam", LayerTarget("stage", 0), "dedicated_layer"),
            lambda: net(x)[:, 1],
        )
    assert all_hooks_removed(net)


# -- hooks, model state, graph ------------------------------------------------------------

METHODS = [grad_cam, grad_cam_plus_plus, ablation_cam]


@pytest.mark.parametrize("method", METHODS)
def test_hooks_are_removed_when_score_raises(
    model: MultiCameraDemoModel, images: Images, method: Callable[..., torch.Tensor]
) -> None:
    def failing_score() -> torch.Tensor:
        model(images)
        raise KeyError("boom")

    for target in model.camera_targets():
        with pytest.raises(KeyError, match="boom"):
            method(model, target, failing_score)
        assert all_hooks_removed(model)


@pytest.mark.parametrize("method", METHODS)
def test_a_call_index_never_reached_is_reported_and_leaves_no_hooks(
    images: Images, method: Callable[..., torch.Tensor]
) -> None:
    model = MultiCameraDemoModel("per_camera_call")
    target = CameraExplanationTarget(
        "slam-left", LayerTarget("encoder.conv3"), "per_camera_call", invocation_index=7
    )
    with pytest.raises(
        RuntimeError, match=r"'encoder\.conv3' never produced camera 'slam-left'.*ran 3 time"
    ):
        method(model, target, evidence_score(model, images))
    assert all_hooks_removed(model)


def test_bad_layer_and_score_errors(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    rgb = model.camera_targets()[0]
    score = evidence_score(model, images)
    with pytest.raises(
        ValueError, match=r"'encoders\.rgb\.conv9' is not a submodule.*encoders\.rgb\.conv"
    ):
        grad_cam(
            model,
            CameraExplanationTarget("rgb", LayerTarget("encoders.rgb.conv9"), "dedicated_layer"),
            score,
        )
    head = CameraExplanationTarget("rgb", LayerTarget("head"), "dedicated_layer")
    with pytest.raises(ValueError, match=r"shape \(2, 4\).*\[B, C, H, W\]"):
        grad_cam(model, head, score)
    with pytest.raises(TypeError, match=r"must return a torch\.Tensor, got float"):
        grad_cam(model, rgb, lambda: 1.0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"scalar or one score per sample.*\(2, 4\)"):
        grad_cam(model, rgb, lambda: model(images))
    with pytest.raises(RuntimeError, match="does not require gradients"):
        grad_cam(model, rgb, lambda: score().detach())

    def disconnected() -> torch.Tensor:
        model(images)
        return model.encoders["slam-right"](images["slam-right"]).sum()

    with pytest.raises(RuntimeError, match="does not depend on camera 'rgb'"):
        grad_cam(model, rgb, disconnected)
    assert all_hooks_removed(model)


def test_a_dedicated_layer_called_twice_is_refused(images: Images) -> None:
    model = MultiCameraDemoModel("per_camera_call")
    # Wrong mode for a shared encoder: the layer runs once per camera.
    wrong = CameraExplanationTarget("rgb", LayerTarget("encoder.conv3"), "dedicated_layer")
    with pytest.raises(RuntimeError, match="invoked more than once for camera 'rgb'"):
        grad_cam(model, wrong, evidence_score(model, images))
    with pytest.raises(RuntimeError, match=r"invoked 3 times for camera 'rgb'.*ambiguous"):
        ablation_cam(model, wrong, evidence_score(model, images))
    assert all_hooks_removed(model)


@pytest.mark.parametrize("method", METHODS)
def test_training_flags_requires_grad_grads_and_buffers_are_restored(
    model: MultiCameraDemoModel, images: Images, method: Callable[..., torch.Tensor]
) -> None:
    model.train()
    first_bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    first_bn.eval()  # a deliberately mixed state must survive too
    params = list(model.parameters())
    for index, parameter in enumerate(params):
        parameter.requires_grad_(index % 3 != 0)
        parameter.grad = torch.full_like(parameter, 0.5) if index % 2 else None
    training = {name: m.training for name, m in model.named_modules()}
    requires = [p.requires_grad for p in params]
    grads = [None if p.grad is None else p.grad.clone() for p in params]
    buffers = {name: b.clone() for name, b in model.named_buffers()}

    target = model.camera_targets()[1]
    method(model, target, evidence_score(model, images))

    assert {name: m.training for name, m in model.named_modules()} == training
    assert [p.requires_grad for p in params] == requires
    for parameter, grad in zip(params, grads, strict=True):
        if grad is None:
            assert parameter.grad is None
        else:
            assert torch.equal(parameter.grad, grad)
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, buffers[name]), f"buffer {name} changed"


def test_the_explanation_runs_in_eval_mode(images: Images) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    target = model.camera_targets()[0]
    expected = grad_cam(model, target, evidence_score(model, images))
    model.train()  # batch norm would use batch statistics if left in train mode
    assert torch.allclose(grad_cam(model, target, evidence_score(model, images)), expected)
    assert model.training


def test_frozen_model_under_no_grad_still_explains(images: Images) -> None:
    model = MultiCameraDemoModel("stacked_camera_batch").requires_grad_(False)
    target = model.camera_targets()[2]
    reference_model = MultiCameraDemoModel("stacked_camera_batch")
    reference = grad_cam(reference_model, target, evidence_score(reference_model, images))
    with torch.no_grad():
        cam = grad_cam(model, target, evidence_score(model, images))
    assert torch.allclose(cam, reference)
    assert not any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("method", [grad_cam, grad_cam_plus_plus])
def test_no_autograd_graph_survives_the_call(
    model: MultiCameraDemoModel, images: Images, method: Callable[..., torch.Tensor]
) -> None:
    outputs: list[weakref.ref[torch.Tensor]] = []

    def score() -> torch.Tensor:
        logits = model(images)
        outputs.append(weakref.ref(logits))
        return logits[:, EVIDENCE_CLASS]

    cam = method(model, model.camera_targets()[0], score)
    gc.collect()
    assert outputs and outputs[0]() is None, "the forward's output (and its graph) is still alive"
    assert cam.grad_fn is None and not cam.requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", METHODS)
def test_cuda_matches_cpu(images: Images, method: Callable[..., torch.Tensor]) -> None:
    for mode in ("dedicated_layer", "per_camera_call", "stacked_camera_batch"):
        cpu_model = MultiCameraDemoModel(mode)
        cuda_model = MultiCameraDemoModel(mode).cuda()
        cuda_images = {key: image.cuda() for key, image in images.items()}
        for target in cpu_model.camera_targets():
            on_cpu = method(cpu_model, target, evidence_score(cpu_model, images))
            on_cuda = method(cuda_model, target, evidence_score(cuda_model, cuda_images))
            assert on_cuda.device.type == "cuda"
            assert torch.allclose(on_cuda.cpu(), on_cpu, atol=1e-5, rtol=1e-3)
