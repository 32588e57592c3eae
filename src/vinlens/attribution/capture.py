"""Activation and gradient capture helpers for attribution methods.

These hooks know how to find one camera's tensor at a target layer in each
:class:`~vinlens.attribution.targets.VisionCaptureMode`; the methods in
:mod:`vinlens.attribution.methods` register and remove them.
"""

from __future__ import annotations

from typing import TypeAlias

import torch

from vinlens.attribution.layout import LayerLayoutError, SpatialReader, spatial_reader
from vinlens.attribution.targets import CameraExplanationTarget, VisionCaptureMode
from vinlens.hooks import HookSet

__all__ = [
    "ActivationCapture",
    "CameraHook",
    "GradientCapture",
    "TensorModuleOutput",
    "replace_camera_tensor",
    "select_camera_tensor",
    "select_tensor_output",
    "should_capture_invocation",
]

# What a target layer may return: one tensor, or a tuple whose entries may be None
# (stages of some backbones return optional per-scale outputs).
TensorModuleOutput: TypeAlias = torch.Tensor | tuple[torch.Tensor | None, ...]


class CameraHook:
    """Base of the per-camera forward hooks: call counting, output and camera selection.

    :meth:`forward_hook` counts every call of the layer and hands the calls of this
    camera to :meth:`keep`; a subclass says what it keeps by overriding :meth:`keep`
    (this class keeps the camera's activation, detached, of the last such call). A hook
    that changes the output instead calls :meth:`_camera_output` itself.

    Also decides once, at the first matching call, how the layer output is read as
    ``[B, C, H, W]`` (:func:`~vinlens.attribution.layout.spatial_reader`); a layout
    that cannot be decided is kept and raised when a map needs it, so capturing alone
    works on any layer.
    """

    def __init__(self, target: CameraExplanationTarget) -> None:
        self.target = target
        self.call_index = 0
        #: Where gradient (tensor) hooks are registered; methods set it to their own
        #: set so those hooks go with it. Without one, each hook lives as long as the
        #: tensor it is on (the autograd graph of that forward).
        self.hooks: HookSet | None = None
        self.reader: SpatialReader | None = None
        self.layout_error: LayerLayoutError | None = None
        self.activation: torch.Tensor | None = None

    def forward_hook(
        self,
        module: torch.nn.Module,
        module_input: tuple[torch.Tensor, ...],
        module_output: TensorModuleOutput,
    ) -> None:
        """The forward hook to register on the target layer (``module_input`` is unused)."""
        selected = self._camera_output(module, module_output)
        if selected is not None:
            self.keep(*selected)

    def _camera_output(
        self, module: torch.nn.Module, module_output: TensorModuleOutput
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(layer output, camera slice)`` for a call of this camera, else ``None``."""
        current_call_index = self.call_index
        self.call_index += 1
        if not should_capture_invocation(call_index=current_call_index, target=self.target):
            return None
        layer = self.target.target
        output = _layer_output(module_output, layer.module_path, layer.output_index)
        if self.reader is None and self.layout_error is None:
            try:
                self.reader = spatial_reader(
                    layer.module_path,
                    layer.layout,
                    layer.reshape_transform,
                    module,
                    output,
                    camera_key=self.target.camera_key,
                )
            except LayerLayoutError as exc:
                self.layout_error = exc
        return output, select_camera_tensor(tensor=output, target=self.target)

    def keep(self, layer_output: torch.Tensor, camera_output: torch.Tensor) -> None:
        """Keep what this hook needs of one call of its camera: the whole layer output
        (graph-attached) and the camera's slice of it."""
        self.activation = camera_output.detach()

    def require_activation(self) -> torch.Tensor:
        """The captured camera activation (detached) of the most recent forward pass.

        Raises:
            RuntimeError: If the forward hook did not run for this camera.
        """
        if self.activation is None:
            raise RuntimeError("Target activation was not captured.")
        return self.activation

    def require_reader(self) -> SpatialReader:
        """How the captured output is read as ``[B, C, H, W]``.

        Raises:
            LayerLayoutError: When the layout is ambiguous or does not fit the output.
            RuntimeError: When no output was captured.
        """
        if self.layout_error is not None:
            raise self.layout_error
        if self.reader is None:
            raise RuntimeError("Target activation was not captured.")
        return self.reader


class GradientCapture(CameraHook):
    """Keeps one camera's activation and, through a tensor hook on it, its gradient."""

    def __init__(self, target: CameraExplanationTarget) -> None:
        super().__init__(target)
        self.gradient: torch.Tensor | None = None

    def keep(self, layer_output: torch.Tensor, camera_output: torch.Tensor) -> None:
        """Keep the activation and hook the layer output for its gradient.

        Raises:
            RuntimeError: If the activation does not require gradients, or if the layer
                already produced an activation for this camera in this forward pass,
                which would pair the last activation with the gradient of an earlier one.
        """
        if self.activation is not None:
            raise RuntimeError(
                f"Target layer was invoked more than once for camera "
                f"'{self.target.camera_key}' in capture mode "
                f"'{self.target.capture_mode}'; the activation/gradient "
                "pairing would be ambiguous. Use a per-camera capture mode or "
                "a more specific target layer."
            )
        if not layer_output.requires_grad:
            raise RuntimeError("Target activation does not require gradients.")
        super().keep(layer_output, camera_output)
        hooks = self.hooks if self.hooks is not None else HookSet()
        hooks.tensor(layer_output, self.gradient_hook)

    def gradient_hook(self, gradient: torch.Tensor) -> None:
        """Record the camera's slice of the layer output's gradient, detached."""
        self.gradient = select_camera_tensor(tensor=gradient, target=self.target).detach()

    def require_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(activation, gradient)`` from the most recent forward and backward pass.

        Raises:
            RuntimeError: If either hook did not run.
        """
        activation = self.require_activation()
        if self.gradient is None:
            raise RuntimeError("Target gradient was not captured.")
        return activation, self.gradient

    def require_nchw_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`require_tensors` read as ``[B, C, H, W]`` by the layer's layout."""
        activation, gradient = self.require_tensors()
        reader = self.require_reader()
        return reader.to_nchw(activation), reader.to_nchw(gradient)


class ActivationCapture(CameraHook):
    """Keeps one camera's activation (of the last matching call) without gradients."""


def _layer_output(
    value: TensorModuleOutput, module_path: str, output_index: int | None
) -> torch.Tensor:
    """:func:`select_tensor_output` with the layer named when ``output_index`` is out of range."""
    if (
        output_index is not None
        and isinstance(value, tuple)
        and not -len(value) <= output_index < len(value)
    ):
        raise ValueError(
            f"Target layer {module_path!r} returned a tuple of length {len(value)}; "
            f"output_index={output_index} is out of range (valid: 0..{len(value) - 1})."
        )
    if not isinstance(value, torch.Tensor | tuple):
        raise TypeError(
            f"Target layer {module_path!r} returned {type(value).__name__}; attribution needs "
            "a tensor or a tuple of tensors."
        )
    # select_tensor_output, public, passes a single tensor through whatever the index;
    # here an index the output cannot have is refused, so a caller who asked for output 3
    # is not silently shown output 0.
    if isinstance(value, torch.Tensor) and output_index not in (None, 0, -1):
        raise ValueError(
            f"Target layer {module_path!r} returned a single tensor of shape "
            f"{tuple(value.shape)}, not a tuple, so output_index={output_index} names no "
            "output; leave output_index None (or 0) for a layer with one output."
        )
    return select_tensor_output(value, output_index)


def select_tensor_output(
    value: TensorModuleOutput,
    output_index: int | None,
) -> torch.Tensor:
    """Select the tensor output used for attribution.

    Args:
        value: Tensor output from a module hook, or a tuple of tensor/None
            entries from modules such as DFormer stages.
        output_index: Optional index used when the target layer returns a tuple.
            ``None`` selects the first non-None tensor output.

    Returns:
        The tensor to use as the attribution target.

    Raises:
        RuntimeError: If ``output_index`` selects ``None``.
        RuntimeError: If no tensor output is available.
    """
    if isinstance(value, torch.Tensor):
        return value

    if output_index is not None:
        if not -len(value) <= output_index < len(value):
            raise ValueError(
                f"Target layer output_index={output_index} is out of range for a tuple "
                f"output of length {len(value)}."
            )
        indexed_value = value[output_index]
        if indexed_value is None:
            raise RuntimeError(f"Target layer output_index={output_index} has no tensor.")
        return indexed_value

    for tensor in value:
        if tensor is not None:
            return tensor
    raise RuntimeError("Target layer did not produce a tensor output.")


def select_camera_tensor(
    tensor: torch.Tensor,
    target: CameraExplanationTarget,
) -> torch.Tensor:
    """Select the camera-specific slice from a captured target tensor.

    Args:
        tensor: Tensor selected from the target-layer output.
        target: Concrete camera target describing capture routing.

    Returns:
        Tensor belonging to the requested camera.

    Raises:
        RuntimeError: If a stacked camera batch cannot be split evenly.
    """
    if target.capture_mode != VisionCaptureMode.STACKED_CAMERA_BATCH.value:
        return tensor
    if target.stacked_camera_index is None or target.stacked_camera_count is None:
        raise RuntimeError(
            "Stacked camera capture requires stacked_camera_index and stacked_camera_count."
        )
    if tensor.shape[0] % target.stacked_camera_count != 0:
        raise RuntimeError(
            f"Cannot split stacked camera batch of size {tensor.shape[0]} into "
            f"{target.stacked_camera_count} cameras."
        )
    reshaped = tensor.reshape(
        tensor.shape[0] // target.stacked_camera_count,
        target.stacked_camera_count,
        *tensor.shape[1:],
    )
    return reshaped[:, target.stacked_camera_index].reshape(
        -1,
        *tensor.shape[1:],
    )


def replace_camera_tensor(
    tensor: torch.Tensor,
    replacement: torch.Tensor,
    target: CameraExplanationTarget,
) -> torch.Tensor:
    """Replace the camera-specific slice inside a target-layer tensor.

    Args:
        tensor: Original target-layer tensor.
        replacement: Replacement tensor for the selected camera.
        target: Concrete camera target describing capture routing.

    Returns:
        Tensor with the selected camera slice replaced.

    Raises:
        RuntimeError: If a stacked camera batch cannot be split evenly.
    """
    if target.capture_mode != VisionCaptureMode.STACKED_CAMERA_BATCH.value:
        return replacement
    if target.stacked_camera_index is None or target.stacked_camera_count is None:
        raise RuntimeError(
            "Stacked camera replacement requires stacked_camera_index and stacked_camera_count."
        )
    if tensor.shape[0] % target.stacked_camera_count != 0:
        raise RuntimeError(
            f"Cannot split stacked camera batch of size {tensor.shape[0]} into "
            f"{target.stacked_camera_count} cameras."
        )
    reshaped = tensor.reshape(
        tensor.shape[0] // target.stacked_camera_count,
        target.stacked_camera_count,
        *tensor.shape[1:],
    ).clone()
    reshaped[:, target.stacked_camera_index] = replacement.reshape(
        tensor.shape[0] // target.stacked_camera_count,
        *tensor.shape[1:],
    )
    return reshaped.reshape_as(tensor)


def should_capture_invocation(
    call_index: int,
    target: CameraExplanationTarget,
) -> bool:
    """Return whether a hook call belongs to the requested camera."""
    if target.capture_mode != VisionCaptureMode.PER_CAMERA_CALL.value:
        return True
    return call_index == target.invocation_index
