"""Channels-last and token layers: maps against hand-written Grad-CAM and pytorch-grad-cam.

Two small multi-camera models built here, a Swin-like block (channels-last output
``[B, H, W, C]``) and a ViT-like block (tokens ``[B, 1 + H*W, C]`` with a class
token), each in the three capture modes. References never use vinlens' capture or
layout code: they keep the layer's raw outputs, pick the camera by plain indexing,
permute by hand, and differentiate with ``torch.autograd.grad``; pytorch-grad-cam
gets the matching ``reshape_transform``.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vinlens.attribution import (
    CameraExplanationTarget,
    LayerTarget,
    ablation_cam,
    camera_targets_for_layer,
    explain_cameras,
    grad_cam,
    grad_cam_plus_plus,
)
from vinlens.attribution.layout import LayerLayoutError
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images


def _import_pytorch_grad_cam() -> Any:
    """pytorch_grad_cam, even where torchvision's compiled ops do not load.

    pytorch-grad-cam imports torchvision only for image pre-processing helpers and the
    detection targets, none of which these oracles call. Where the installed torchvision
    was built for another torch variant (a CUDA wheel beside a CPU torch: ``import
    torchvision`` raises), it is imported against a stand-in torchvision whose
    helpers raise if ever called, and the stand-in is removed again afterwards.
    """
    try:
        return importlib.import_module("pytorch_grad_cam")
    except (RuntimeError, OSError):
        pass

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("torchvision is not importable here; this helper is stubbed.")

    names = ["torchvision", "torchvision.transforms", "torchvision.transforms.functional"]
    saved = {name: sys.modules.pop(name, None) for name in names}
    stubs = {name: types.ModuleType(name) for name in names}
    for attribute in ("Compose", "Normalize", "ToTensor"):
        setattr(stubs["torchvision.transforms"], attribute, unavailable)
    stubs["torchvision.transforms.functional"].resize = unavailable  # type: ignore[attr-defined]
    stubs["torchvision"].transforms = stubs["torchvision.transforms"]  # type: ignore[attr-defined]
    stubs["torchvision.transforms"].functional = stubs["torchvision.transforms.functional"]  # type: ignore[attr-defined]
    sys.modules.update(stubs)
    try:
        for name in [n for n in sys.modules if n.startswith("pytorch_grad_cam")]:
            del sys.modules[name]
        return importlib.import_module("pytorch_grad_cam")
    finally:
        for name in names:
            del sys.modules[name]
            if saved[name] is not None:
                sys.modules[name] = saved[name]  # type: ignore[assignment]


_pgc = _import_pytorch_grad_cam()
GradCAM = _pgc.GradCAM
GradCAMPlusPlus = _pgc.GradCAMPlusPlus

CAMERAS = ("front", "side")
WIDTH = 8
GRID = 4  # 16x16 images, patch 4
SCORE_CLASS = 1
MODES = ["dedicated_layer", "per_camera_call", "stacked_camera_batch"]


class SwinLikeEncoder(nn.Module):
    """Patch embedding, channels-last MLP block, LayerNorm: ``norm`` gives ``[B, 4, 4, C]``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, WIDTH, 4, stride=4)
        self.norm1 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        )
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.embed(image).permute(0, 2, 3, 1)
        x = x + self.mlp(self.norm1(x))
        # A nonlinear read-out so gradients differ between grid cells.
        features: torch.Tensor = F.gelu(self.norm(x)).mean(dim=(1, 2))
        return features


class ViTLikeEncoder(nn.Module):
    """Patch tokens after a class token, one attention block: ``norm`` gives ``[B, 17, C]``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, WIDTH, 4, stride=4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, WIDTH) * 0.1)
        self.pos = nn.Parameter(torch.randn(1, 1 + GRID * GRID, WIDTH) * 0.1)
        self.attn = nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        )
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1) + self.pos
        x = x + self.attn(x, x, x, need_weights=False)[0]
        x = x + self.mlp(x)
        x = self.norm(x)
        features: torch.Tensor = x[:, 0] + F.gelu(x[:, 1:]).mean(dim=1)
        return features


class MultiCamera(nn.Module):
    """Two cameras through ``encoder_type`` in one of the three capture modes."""

    def __init__(self, encoder_type: type[nn.Module], mode: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mode = mode
        if mode == "dedicated_layer":
            self.encoders = nn.ModuleDict({key: encoder_type() for key in CAMERAS})
        else:
            self.encoder = encoder_type()
        self.head = nn.Linear(len(CAMERAS) * WIDTH, 3)
        with torch.no_grad():
            # Positive read-out weights and LayerNorm offsets keep every camera's map from
            # being all zero (LayerNorm's default affine centres activations on 0).
            self.head.weight.uniform_(0.0, 0.5)
            for norm in (m for m in self.modules() if isinstance(m, nn.LayerNorm)):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(0.0, 0.5)
        self.eval()

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.mode == "dedicated_layer":
            features = [self.encoders[key](images[key]) for key in CAMERAS]
        elif self.mode == "per_camera_call":
            features = [self.encoder(images[key]) for key in CAMERAS]
        else:
            batch = images[CAMERAS[0]].shape[0]
            stacked = torch.stack([images[key] for key in CAMERAS], dim=1).flatten(0, 1)
            features = list(self.encoder(stacked).reshape(batch, len(CAMERAS), -1).unbind(1))
        logits: torch.Tensor = self.head(torch.cat(features, dim=1))
        return logits

    def layer(self, camera: str) -> str:
        return f"encoders.{camera}.norm" if self.mode == "dedicated_layer" else "encoder.norm"


def swin_reshape(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.permute(0, 3, 1, 2)


def vit_reshape(tensor: torch.Tensor) -> torch.Tensor:
    """pytorch-grad-cam's ViT recipe: drop the class token, grid, channels first."""
    grid = tensor[:, 1:, :].reshape(tensor.shape[0], GRID, GRID, tensor.shape[2])
    return grid.permute(0, 3, 1, 2)


KINDS: dict[str, tuple[type[nn.Module], str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "swin": (SwinLikeEncoder, "NHWC", swin_reshape),
    "vit": (ViTLikeEncoder, "tokens", vit_reshape),
}


@pytest.fixture
def images() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return {key: torch.rand(2, 3, 16, 16, generator=generator) for key in CAMERAS}


def targets_for(
    model: MultiCamera, mode: str, **layer_kwargs: object
) -> tuple[CameraExplanationTarget, ...]:
    layer: str | dict[str, str] = (
        {key: model.layer(key) for key in CAMERAS} if mode == "dedicated_layer" else "encoder.norm"
    )
    return camera_targets_for_layer(layer, mode, CAMERAS, **layer_kwargs)  # type: ignore[arg-type]


def raw_camera_outputs(
    model: MultiCamera, images: dict[str, torch.Tensor], camera: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(layer output for the camera, its gradient, score)`` found by plain indexing."""
    index = CAMERAS.index(camera)
    module = model.get_submodule(model.layer(camera))
    outputs: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, out: outputs.append(out))
    try:
        score = model(images)[:, SCORE_CLASS]
    finally:
        handle.remove()
    live = outputs[index] if model.mode == "per_camera_call" else outputs[0]
    (gradient,) = torch.autograd.grad(score.sum(), live)
    if model.mode == "stacked_camera_batch":
        return live[index :: len(CAMERAS)].detach(), gradient[index :: len(CAMERAS)], score
    return live.detach(), gradient, score


def hand_written_grad_cam(activation: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    weights = gradient.mean(dim=(2, 3))
    return torch.relu(torch.einsum("bc,bchw->bhw", weights, activation))


def pytorch_grad_cam_map(
    cam_type: Any,
    model: MultiCamera,
    images: dict[str, torch.Tensor],
    camera: str,
    reshape: Callable[[torch.Tensor], torch.Tensor],
) -> np.ndarray:
    """pytorch-grad-cam's raw (ReLU'd, unscaled) map for one camera of our model.

    Its hooks keep one activation per layer call; for a shared layer the camera is the
    call of that index, for a stacked batch the camera's rows, picked inside the
    reshape_transform as one would with the library.
    """
    index = CAMERAS.index(camera)
    layer = model.get_submodule(model.layer(camera))
    transform = reshape
    if model.mode == "stacked_camera_batch":

        def transform(tensor: torch.Tensor) -> torch.Tensor:
            return reshape(tensor[index :: len(CAMERAS)])

    cam = cam_type(model=model, target_layers=[layer], reshape_transform=transform)
    try:
        output = cam.activations_and_grads(images)
        output[:, SCORE_CLASS].sum().backward()
        call = index if model.mode == "per_camera_call" else 0
        activations = cam.activations_and_grads.activations[call].numpy()
        gradients = cam.activations_and_grads.gradients[call].numpy()
        raw = cam.get_cam_image(None, layer, None, activations, gradients)
    finally:
        cam.activations_and_grads.release()
    model.zero_grad(set_to_none=True)
    relu: np.ndarray = np.maximum(raw, 0)
    return relu


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_grad_cam_equals_hand_written_and_pytorch_grad_cam(
    kind: str, mode: str, images: dict[str, torch.Tensor]
) -> None:
    encoder_type, layout, reshape = KINDS[kind]
    model = MultiCamera(encoder_type, mode)
    by_layout = targets_for(model, mode, layout=layout)
    by_transform = targets_for(model, mode, reshape_transform=reshape)
    records = explain_cameras(model, images, SCORE_CLASS, by_layout)
    for camera, target, transform_target in zip(CAMERAS, by_layout, by_transform, strict=True):
        activation, gradient, _ = raw_camera_outputs(model, images, camera)
        expected = hand_written_grad_cam(reshape(activation), reshape(gradient))
        assert expected.shape == (2, GRID, GRID) and bool((expected.amax(dim=(1, 2)) > 0).all())
        score = lambda: model(images)[:, SCORE_CLASS]  # noqa: E731
        ours = grad_cam(model, target, score)
        assert torch.allclose(ours, expected, atol=1e-6), (kind, mode, camera)
        assert torch.allclose(grad_cam(model, transform_target, score), expected, atol=1e-6)
        reference = pytorch_grad_cam_map(GradCAM, model, images, camera, reshape)
        np.testing.assert_allclose(ours.numpy(), reference, atol=1e-6)
        plus = grad_cam_plus_plus(model, target, score)
        reference_plus = pytorch_grad_cam_map(GradCAMPlusPlus, model, images, camera, reshape)
        np.testing.assert_allclose(plus.numpy(), reference_plus, atol=1e-5)
        for sample in range(2):
            record = records[sample * len(CAMERAS) + CAMERAS.index(camera)]
            assert record.camera_key == camera and record.layer_shape == (GRID, GRID)
            np.testing.assert_allclose(record.raw_map, expected[sample].numpy(), atol=1e-6)


def hand_written_ablation(
    model: MultiCamera, images: dict[str, torch.Tensor], camera: str, kind: str
) -> torch.Tensor:
    """One forward per channel with the channel zeroed in the layer's own layout."""
    index = CAMERAS.index(camera)
    module = model.get_submodule(model.layer(camera))
    activation, _, score = raw_camera_outputs(model, images, camera)
    base = score.detach()
    channels = activation.shape[-1]
    drops = []
    for channel in range(channels):
        calls = [0]

        def ablate(
            _m: nn.Module,
            _i: object,
            out: torch.Tensor,
            channel: int = channel,
            calls: list[int] = calls,
        ) -> torch.Tensor:
            call, calls[0] = calls[0], calls[0] + 1
            if model.mode == "per_camera_call" and call != index:
                return out
            out = out.clone()
            rows = (
                slice(index, None, len(CAMERAS))
                if model.mode == "stacked_camera_batch"
                else slice(None)
            )
            if kind == "swin":
                out[rows, :, :, channel] = 0
            else:  # grid tokens only: the class token is not part of the map
                out[rows, 1:, channel] = 0
            return out

        handle = module.register_forward_hook(ablate)
        try:
            with torch.no_grad():
                drops.append((base - model(images)[:, SCORE_CLASS]) / base)
        finally:
            handle.remove()
    weights = torch.stack(drops, dim=1)  # [B, C]
    reshape = KINDS[kind][2]
    return torch.relu(torch.einsum("bc,bchw->bhw", weights, reshape(activation)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_ablation_cam_ablates_channels_in_the_layers_own_layout(
    kind: str, mode: str, images: dict[str, torch.Tensor]
) -> None:
    encoder_type, layout, reshape = KINDS[kind]
    model = MultiCamera(encoder_type, mode)
    records = explain_cameras(
        model, images, SCORE_CLASS, targets_for(model, mode, layout=layout), method="ablation_cam"
    )
    by_transform = targets_for(model, mode, reshape_transform=reshape)
    for camera, transform_target in zip(CAMERAS, by_transform, strict=True):
        expected = hand_written_ablation(model, images, camera, kind)
        assert expected.max() > 0
        for sample in range(2):
            record = records[sample * len(CAMERAS) + CAMERAS.index(camera)]
            np.testing.assert_allclose(record.raw_map, expected[sample].numpy(), atol=1e-5)
        # A reshape_transform that only rearranges is inverted for the write-back.
        ours = ablation_cam(model, transform_target, lambda: model(images)[:, SCORE_CLASS])
        assert torch.allclose(ours, expected, atol=1e-5)


# -- no hint: decide only where unambiguous -------------------------------------------------


class CubeNet(nn.Module):
    """``feat`` outputs ``[B, 7, 7, 7]`` made by a permute: no way to tell the channel axis."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 7, 3, padding=1)
        self.feat = nn.Identity()
        self.head = nn.Linear(7, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.feat(self.conv(x).permute(0, 2, 3, 1))
        return self.head(features.mean(dim=(1, 2)))  # type: ignore[no-any-return]


def all_hooks_removed(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("method", [grad_cam, grad_cam_plus_plus, ablation_cam])
def test_an_ambiguous_layout_is_an_error_never_a_map(
    method: Callable[..., torch.Tensor],
) -> None:
    net = CubeNet().eval()
    x = torch.rand(2, 3, 7, 7)
    target = CameraExplanationTarget("cam", LayerTarget("feat"), "dedicated_layer")
    with pytest.raises(LayerLayoutError) as raised:
        method(net, target, lambda: net(x)[:, 1])
    message = str(raised.value)
    assert "'feat'" in message and "(2, 7, 7, 7)" in message
    assert "layout=" in message and "reshape_transform" in message
    assert all_hooks_removed(net)
    # Told the layout, the same layer explains.
    told = CameraExplanationTarget("cam", LayerTarget("feat", layout="NHWC"), "dedicated_layer")
    assert method(net, told, lambda: net(x)[:, 1]).shape == (2, 7, 7)


@pytest.mark.parametrize("kind", list(KINDS))
def test_unhinted_channels_last_and_token_layers_are_refused(
    kind: str, images: dict[str, torch.Tensor]
) -> None:
    model = MultiCamera(KINDS[kind][0], "dedicated_layer")
    expected_shape = "(2, 4, 4, 8)" if kind == "swin" else "(2, 17, 8)"
    for method in ("grad_cam", "grad_cam_plus_plus", "ablation_cam"):
        with pytest.raises(LayerLayoutError, match=r"'encoders\.front\.norm'") as raised:
            explain_cameras(
                model, images, SCORE_CLASS, targets_for(model, "dedicated_layer"), method=method
            )
        assert expected_shape in str(raised.value)
    assert all_hooks_removed(model)


@pytest.mark.parametrize(
    "layer", ["encoders.rgb.conv3", "encoders.rgb.act3", "encoders.rgb.bn2", "encoders.rgb"]
)
def test_convolutional_layers_are_read_as_nchw_without_a_hint(layer: str) -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    images = make_camera_images(1, evidence={"rgb": (30, 40)})
    target = CameraExplanationTarget("rgb", LayerTarget(layer), "dedicated_layer")
    told = CameraExplanationTarget("rgb", LayerTarget(layer, layout="NCHW"), "dedicated_layer")
    score = lambda: model(images)[:, EVIDENCE_CLASS]  # noqa: E731
    for method in (grad_cam, ablation_cam):
        assert torch.equal(method(model, target, score), method(model, told, score))


# -- the token rule and LayerTarget checks -------------------------------------------------


def test_layer_target_layout_arguments_are_checked() -> None:
    assert LayerTarget("x", layout="nhwc").layout == "NHWC"
    assert LayerTarget("x", layout="Tokens:1").layout == "tokens:1"
    with pytest.raises(ValueError, match=r"LayerTarget\('x'\): layout='NWHC' is not one of"):
        LayerTarget("x", layout="NWHC")
    with pytest.raises(ValueError, match="tokens:<n>"):
        LayerTarget("x", layout="tokens:-1")
    with pytest.raises(ValueError, match="give layout or reshape_transform, not both"):
        LayerTarget("x", layout="NHWC", reshape_transform=swin_reshape)
    with pytest.raises(TypeError, match="reshape_transform must be a callable"):
        LayerTarget("x", reshape_transform="permute")  # type: ignore[arg-type]


class Tokens(nn.Module):
    """Outputs ``tokens`` leading-token-first tokens of width 4, for the token rule."""

    def __init__(self, tokens: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tokens = tokens
        self.proj = nn.Linear(3, 4)
        self.out = nn.Identity()
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = self.out(self.proj(x[:, : self.tokens]))
        return self.head(values.mean(dim=1)).squeeze(1)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("tokens", "layout", "expected"),
    [
        (17, "tokens", (4, 4)),
        (16, "tokens", (4, 4)),
        (21, "tokens", (4, 4)),  # 5 leading (class + 4 registers)
        (17, "tokens:1", (4, 4)),
        (17, "tokens:8", (3, 3)),
        (40, "tokens", (6, 6)),  # 4 leading
        (16, "tokens:0", (4, 4)),
    ],
)
def test_token_grid_rule(tokens: int, layout: str, expected: tuple[int, int]) -> None:
    net = Tokens(tokens).eval()
    x = torch.rand(2, 40, 3)
    target = CameraExplanationTarget("cam", LayerTarget("out", layout=layout), "dedicated_layer")
    assert grad_cam(net, target, lambda: net(x)).shape == (2, *expected)


@pytest.mark.parametrize(
    ("tokens", "layout", "message"),
    [
        (35, "tokens", r"35 tokens .*grid 5x5 leaves 10 leading tokens, more than the 8"),
        (17, "tokens:2", r"layout='tokens:2' leaves 15, not a square grid"),
        (17, "NHWC", r"shape \(2, 17, 4\); layout 'NHWC' needs a 4-D output"),
    ],
)
def test_token_grid_rule_errors(tokens: int, layout: str, message: str) -> None:
    net = Tokens(tokens).eval()
    x = torch.rand(2, 40, 3)
    target = CameraExplanationTarget("cam", LayerTarget("out", layout=layout), "dedicated_layer")
    with pytest.raises(LayerLayoutError, match=message):
        grad_cam(net, target, lambda: net(x))


def test_a_transform_that_computes_cannot_be_ablated_but_explains_by_gradient() -> None:
    net = CubeNet().eval()
    x = torch.rand(2, 3, 7, 7)

    def scaled(tensor: torch.Tensor) -> torch.Tensor:
        return 2 * tensor.permute(0, 3, 1, 2)

    target = CameraExplanationTarget(
        "cam", LayerTarget("feat", reshape_transform=scaled), "dedicated_layer"
    )
    assert grad_cam(net, target, lambda: net(x)[:, 1]).shape == (2, 7, 7)
    with pytest.raises(LayerLayoutError, match="does not only rearrange"):
        ablation_cam(net, target, lambda: net(x)[:, 1])

    def flat(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.flatten(1)

    bad = CameraExplanationTarget(
        "cam", LayerTarget("feat", reshape_transform=flat), "dedicated_layer"
    )
    with pytest.raises(LayerLayoutError, match=r"into Tensor of shape \(2, 343\); it must return"):
        grad_cam(net, bad, lambda: net(x)[:, 1])
    assert all_hooks_removed(net)


# -- output_index out of range -------------------------------------------------------------


class PairStage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, torch.relu(y)


class PairNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stage = PairStage()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, features = self.stage(x)
        return self.head(features.mean(dim=(2, 3)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("method", [grad_cam, grad_cam_plus_plus, ablation_cam])
@pytest.mark.parametrize("index", [5, -3])
def test_an_output_index_out_of_range_names_layer_index_and_length(
    method: Callable[..., torch.Tensor], index: int
) -> None:
    net = PairNet().eval()
    x = torch.rand(2, 3, 6, 6)
    target = CameraExplanationTarget("cam", LayerTarget("stage", index), "dedicated_layer")
    with pytest.raises(
        ValueError,
        match=rf"Target layer 'stage' returned a tuple of length 2; output_index={index} is out "
        r"of range \(valid: 0\.\.1\)",
    ):
        method(net, target, lambda: net(x)[:, 1])
    assert all_hooks_removed(net)
    in_range = CameraExplanationTarget("cam", LayerTarget("stage", -1), "dedicated_layer")
    assert method(net, in_range, lambda: net(x)[:, 1]).shape == (2, 6, 6)


class PoolNet(nn.Module):
    """conv -> AvgPool2d (a 7x5 channels-first grid of 6 channels) -> head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.conv(x)).mean(dim=(2, 3)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("method", [grad_cam, grad_cam_plus_plus, ablation_cam])
def test_a_layout_hint_that_contradicts_the_evidence_is_an_error(method: Any) -> None:
    net = PoolNet().eval()
    x = torch.rand(2, 3, 14, 10)  # pool output [2, 6, 7, 5]
    target = CameraExplanationTarget("cam", LayerTarget("pool", layout="NHWC"), "dedicated_layer")
    with pytest.raises(LayerLayoutError, match=r"layout='NHWC' .*contradicts.*channels-first"):
        method(net, target, lambda: net(x)[:, 1])
    # The hint that agrees still reads the 7x5 grid.
    agreeing = CameraExplanationTarget("cam", LayerTarget("pool", layout="NCHW"), "dedicated_layer")
    assert method(net, agreeing, lambda: net(x)[:, 1]).shape == (2, 7, 5)


def test_a_token_grid_that_needs_a_guess_is_an_error() -> None:
    net = Tokens(52).eval()  # 4 x 13 tokens: not a square grid after a known token count
    x = torch.rand(2, 52, 3)
    target = CameraExplanationTarget("cam", LayerTarget("out", layout="tokens"), "dedicated_layer")
    with pytest.raises(LayerLayoutError, match=r"52 tokens.*guess.*tokens:<n>.*reshape_transform"):
        grad_cam(net, target, lambda: net(x))
    exact = CameraExplanationTarget("cam", LayerTarget("out", layout="tokens:3"), "dedicated_layer")
    assert grad_cam(net, exact, lambda: net(x)).shape == (2, 7, 7)


@pytest.mark.parametrize("method", [grad_cam, ablation_cam])
def test_an_output_index_on_a_single_tensor_output_is_an_error(method: Any) -> None:
    net = PoolNet().eval()
    x = torch.rand(2, 3, 14, 10)
    target = CameraExplanationTarget("cam", LayerTarget("conv", output_index=3), "dedicated_layer")
    with pytest.raises(ValueError, match=r"'conv' returned a single tensor.*output_index=3"):
        method(net, target, lambda: net(x)[:, 1])
    zero = CameraExplanationTarget("cam", LayerTarget("conv", output_index=0), "dedicated_layer")
    assert method(net, zero, lambda: net(x)[:, 1]).shape == (2, 14, 10)
