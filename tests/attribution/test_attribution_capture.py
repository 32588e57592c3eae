"""The seed capture helpers: stated behaviour and error messages."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vinlens.attribution import CameraExplanationTarget, LayerTarget
from vinlens.attribution.capture import (
    ActivationCapture,
    GradientCapture,
    replace_camera_tensor,
    select_camera_tensor,
    select_tensor_output,
    should_capture_invocation,
)

LAYER = LayerTarget("conv")
DEDICATED = CameraExplanationTarget("rgb", LAYER, "dedicated_layer")


def per_call(index: int) -> CameraExplanationTarget:
    return CameraExplanationTarget("cam", LAYER, "per_camera_call", invocation_index=index)


def stacked(index: int, count: int = 3) -> CameraExplanationTarget:
    return CameraExplanationTarget(
        "cam", LAYER, "stacked_camera_batch", stacked_camera_index=index, stacked_camera_count=count
    )


def stacked_batch(samples: int, cameras: int) -> torch.Tensor:
    """[samples * cameras, 2, 1, 1] whose channel 0 is the sample and channel 1 the camera."""
    sample = torch.arange(samples).repeat_interleave(cameras)
    camera = torch.arange(cameras).repeat(samples)
    return torch.stack([sample, camera], dim=1).float().reshape(-1, 2, 1, 1)


# -- select_tensor_output ------------------------------------------------------------------


def test_select_tensor_output_passes_a_tensor_through() -> None:
    value = torch.ones(2)
    assert select_tensor_output(value, output_index=5) is value


def test_select_tensor_output_indexes_tuples_and_skips_none_by_default() -> None:
    a, b = torch.zeros(1), torch.ones(1)
    assert select_tensor_output((None, a, b), output_index=None) is a
    assert select_tensor_output((None, a, b), output_index=2) is b
    assert select_tensor_output((None, a, b), output_index=-1) is b


def test_select_tensor_output_errors() -> None:
    with pytest.raises(RuntimeError, match=r"^Target layer output_index=0 has no tensor\.$"):
        select_tensor_output((None, torch.ones(1)), output_index=0)
    with pytest.raises(RuntimeError, match=r"^Target layer did not produce a tensor output\.$"):
        select_tensor_output((None, None), output_index=None)


# -- select_camera_tensor / replace_camera_tensor -----------------------------------------


def test_select_camera_tensor_is_identity_outside_stacked_mode() -> None:
    tensor = torch.randn(6, 2, 1, 1)
    assert select_camera_tensor(tensor, DEDICATED) is tensor
    assert select_camera_tensor(tensor, per_call(1)) is tensor


@pytest.mark.parametrize("camera", [0, 1, 2])
def test_select_camera_tensor_takes_the_batch_major_slice(camera: int) -> None:
    picked = select_camera_tensor(stacked_batch(4, 3), stacked(camera))
    assert picked.shape == (4, 2, 1, 1)
    assert picked[:, 0].flatten().tolist() == [0, 1, 2, 3]  # samples in order
    assert set(picked[:, 1].flatten().tolist()) == {camera}  # one camera only


def test_select_and_replace_reject_a_batch_that_does_not_split() -> None:
    message = r"^Cannot split stacked camera batch of size 7 into 3 cameras\.$"
    with pytest.raises(RuntimeError, match=message):
        select_camera_tensor(torch.zeros(7, 2), stacked(0))
    with pytest.raises(RuntimeError, match=message):
        replace_camera_tensor(torch.zeros(7, 2), torch.zeros(2, 2), stacked(0))


def test_stacked_helpers_reject_targets_missing_their_routing_fields() -> None:
    # Construction validates these fields; the helpers still guard a target whose
    # fields were removed afterwards, as the contract states.
    broken = stacked(0)
    object.__setattr__(broken, "stacked_camera_count", None)
    with pytest.raises(RuntimeError, match=r"^Stacked camera capture requires"):
        select_camera_tensor(torch.zeros(6, 2), broken)
    with pytest.raises(RuntimeError, match=r"^Stacked camera replacement requires"):
        replace_camera_tensor(torch.zeros(6, 2), torch.zeros(2, 2), broken)


def test_replace_camera_tensor_outside_stacked_mode_returns_the_replacement() -> None:
    replacement = torch.zeros(2, 2, 1, 1)
    assert replace_camera_tensor(torch.ones(2, 2, 1, 1), replacement, DEDICATED) is replacement


def test_replace_camera_tensor_changes_only_the_chosen_slice_and_not_the_input() -> None:
    original = stacked_batch(2, 3)
    before = original.clone()
    replacement = torch.full((2, 2, 1, 1), -1.0)
    replaced = replace_camera_tensor(original, replacement, stacked(1))
    assert torch.equal(original, before)
    assert torch.equal(select_camera_tensor(replaced, stacked(1)), replacement)
    for other in (0, 2):
        assert torch.equal(
            select_camera_tensor(replaced, stacked(other)),
            select_camera_tensor(original, stacked(other)),
        )


def test_should_capture_invocation() -> None:
    assert [should_capture_invocation(i, per_call(1)) for i in range(3)] == [False, True, False]
    assert all(should_capture_invocation(i, DEDICATED) for i in range(3))
    assert all(should_capture_invocation(i, stacked(2)) for i in range(3))


# -- GradientCapture / ActivationCapture ---------------------------------------------------


class SharedConvNet(nn.Module):
    """One conv called once per input, as a shared camera encoder is."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, *cameras: torch.Tensor) -> torch.Tensor:
        return sum((self.conv(camera) ** 2).sum() for camera in cameras)  # type: ignore[return-value]


def test_gradient_capture_records_the_chosen_call_and_its_gradient() -> None:
    net = SharedConvNet()
    first, second = torch.randn(1, 2, 5, 5), torch.randn(1, 2, 5, 5)
    capture = GradientCapture(per_call(1))
    handle = net.conv.register_forward_hook(capture.forward_hook)
    try:
        net(first, second).backward()
    finally:
        handle.remove()
    activation, gradient = capture.require_tensors()
    expected = net.conv(second).detach()
    assert capture.call_index == 2
    assert torch.allclose(activation, expected)
    assert torch.allclose(gradient, 2 * expected)  # d(sum x^2)/dx
    assert not activation.requires_grad and not gradient.requires_grad


def test_gradient_capture_slices_a_stacked_gradient() -> None:
    net = SharedConvNet()
    batch = torch.randn(6, 2, 5, 5)
    capture = GradientCapture(stacked(2))
    handle = net.conv.register_forward_hook(capture.forward_hook)
    try:
        net(batch).backward()
    finally:
        handle.remove()
    activation, gradient = capture.require_tensors()
    expected = net.conv(batch).detach()[2::3]
    assert torch.allclose(activation, expected)
    assert torch.allclose(gradient, 2 * expected)


def test_gradient_capture_refuses_a_second_invocation() -> None:
    net = SharedConvNet()
    capture = GradientCapture(DEDICATED)
    handle = net.conv.register_forward_hook(capture.forward_hook)
    try:
        with pytest.raises(
            RuntimeError,
            match=r"^Target layer was invoked more than once for camera 'rgb' in capture mode "
            r"'dedicated_layer'; the activation/gradient pairing would be ambiguous",
        ):
            net(torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4))
    finally:
        handle.remove()


def test_gradient_capture_needs_an_activation_that_requires_grad() -> None:
    net = SharedConvNet().requires_grad_(False)
    capture = GradientCapture(DEDICATED)
    handle = net.conv.register_forward_hook(capture.forward_hook)
    try:
        with pytest.raises(RuntimeError, match=r"^Target activation does not require gradients\.$"):
            net(torch.randn(1, 2, 4, 4))
    finally:
        handle.remove()


def test_require_tensors_says_which_hook_did_not_run() -> None:
    capture = GradientCapture(DEDICATED)
    with pytest.raises(RuntimeError, match=r"^Target activation was not captured\.$"):
        capture.require_tensors()
    capture.activation = torch.zeros(1)
    with pytest.raises(RuntimeError, match=r"^Target gradient was not captured\.$"):
        capture.require_tensors()


def test_activation_capture_keeps_the_chosen_camera_without_grad() -> None:
    net = SharedConvNet()
    first, second, third = (torch.randn(1, 2, 4, 4) for _ in range(3))
    capture = ActivationCapture(per_call(0))
    assert capture.call_index == 0
    with pytest.raises(RuntimeError, match=r"^Target activation was not captured\.$"):
        capture.require_activation()
    handle = net.conv.register_forward_hook(capture.forward_hook)
    try:
        net(first, second, third)
    finally:
        handle.remove()
    assert capture.call_index == 3
    activation = capture.require_activation()
    assert torch.allclose(activation, net.conv(first))
    assert not activation.requires_grad
