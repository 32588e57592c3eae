"""How a target layer's output is read as a feature map ``[B, C, H, W]``.

Class activation maps weight channels and sum them over a spatial grid, so they need
to know which axis of the layer output holds the channels and which hold the grid.
Convolutional layers give ``[B, C, H, W]`` (``"NCHW"``); channels-last models (Swin,
ConvNeXt in channels-last mode) give ``[B, H, W, C]`` (``"NHWC"``); vision
transformers give tokens ``[B, N, C]`` whose last ``H * W`` tokens are a square patch
grid after some leading tokens (a class token, distillation or register tokens)
(``"tokens"``). :class:`~vinlens.attribution.targets.LayerTarget` says which, with
``layout`` or with a ``reshape_transform`` callable (as in pytorch-grad-cam).

With neither, the layout is decided only where the evidence is unambiguous; a map is
never computed from a guessed axis. The rule (:func:`infer_nchw_evidence`):

* a 4-D output is read as ``NCHW`` when the target module is a 2-D convolution,
  pooling, batch-norm, padding, dropout or upsampling module (their outputs are
  channels-first by definition), or when the output's autograd history, followed back
  through elementwise steps only (activations, additions, multiplications, clones),
  reaches such an operation and no permute, transpose or layer norm;
* anything else (a 4-D output without that evidence, e.g. ``[B, 7, 7, 7]`` or a
  channels-last block's ``[B, 7, 7, 768]``; any 3-D token output) raises
  :class:`LayerLayoutError` naming the layer, its output shape and the two ways to
  say the layout.

A layout that is given is checked against the same evidence: ``layout="NHWC"`` on an
output that is channels-first by the rule above (a pooling or convolution output) is a
contradiction and raises, instead of reading the channels as the grid.

Token rule: ``layout="tokens"`` reads ``N`` tokens as ``N - k*k`` leading tokens and a
``k x k`` grid with ``k = isqrt(N)`` (the largest square that fits), accepted only when
that leaves a leading-token count real vision transformers use
(:data:`INFERRED_LEADING_TOKENS`: none, a class token, class + distillation, 4 registers,
class + 4 registers) and ``k >= 2``; any other remainder (52 tokens would be 3 leading
and 7x7, or a 4x13 grid) would be a guess and raises, pointing at ``"tokens:<n>"`` and
``reshape_transform``;
``layout="tokens:<n>"`` gives the number of leading tokens explicitly (``"tokens:0"``
for a grid without class token) and needs ``N - n`` to be a square. Leading tokens are
not part of the map (their gradients and activations are ignored), as with
pytorch-grad-cam's usual ViT ``reshape_transform``. Non-square token grids need a
``reshape_transform``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vinlens.errors import VinlensError

__all__ = [
    "INFERRED_LEADING_TOKENS",
    "LAYER_LAYOUTS",
    "MAX_INFERRED_LEADING_TOKENS",
    "LayerLayoutError",
    "SpatialReader",
    "infer_nchw_evidence",
    "layout_is_known",
    "parse_layout",
    "spatial_reader",
]

LAYER_LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC", "tokens")
"""Layout names :class:`~vinlens.attribution.targets.LayerTarget` accepts (plus ``"tokens:<n>"``)."""

MAX_INFERRED_LEADING_TOKENS = 8
"""Most leading tokens ``layout="tokens"`` infers (class + distillation + registers).

More than that is far likelier a non-square grid than extra tokens, so it is refused
and the count must be given as ``"tokens:<n>"``."""

INFERRED_LEADING_TOKENS: tuple[int, ...] = (0, 1, 2, 4, 5)
"""Leading-token counts ``layout="tokens"`` infers: none, a class token, class +
distillation token (DeiT), 4 registers, class + 4 registers (DINOv2 with registers).
Every count is at most :data:`MAX_INFERRED_LEADING_TOKENS`."""

ReshapeTransform = Callable[[torch.Tensor], torch.Tensor]

# Modules whose 4-D output is channels-first by definition.
_NCHW_MODULES: tuple[type[nn.Module], ...] = (
    nn.Conv2d,
    nn.ConvTranspose2d,
    nn.BatchNorm2d,
    nn.InstanceNorm2d,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.LPPool2d,
    nn.FractionalMaxPool2d,
    nn.Dropout2d,
    nn.ZeroPad2d,
    nn.ConstantPad2d,
    nn.ReflectionPad2d,
    nn.ReplicationPad2d,
    nn.Upsample,
    nn.PixelShuffle,
    nn.PixelUnshuffle,
)
# Autograd nodes (names without the "Backward<n>" suffix) that produce a channels-first
# 4-D result, that keep the layout of their input, and that change it.
_NCHW_NODES = (
    "Convolution",
    "CudnnConvolution",
    "MkldnnConvolution",
    "SlowConv2D",
    "ConvDepthwise2D",
    "NativeBatchNorm",
    "CudnnBatchNorm",
    "MiopenBatchNorm",
    "MaxPool2DWithIndices",
    "AvgPool2D",
    "AdaptiveAvgPool2D",
    "AdaptiveMaxPool2D",
    "UpsampleBilinear2D",
    "UpsampleNearest2D",
    "UpsampleBicubic2D",
    "ConstantPadNd",
    "ReflectionPad2D",
    "ReplicationPad2D",
)
_ELEMENTWISE_NODES = (
    "Relu",
    "Relu6",
    "Gelu",
    "Silu",
    "Mish",
    "Sigmoid",
    "Tanh",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "LeakyRelu",
    "Elu",
    "Softplus",
    "Threshold",
    "Clamp",
    "ClampMin",
    "ClampMax",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Clone",
    "ToCopy",
    "Dropout",
    "NativeDropout",
)
_LAYOUT_CHANGING_NODES = ("Permute", "Transpose", "NativeLayerNorm")
_MAX_WALK = 256


class LayerLayoutError(VinlensError, ValueError):
    """A layer output that cannot be read as ``[B, C, H, W]`` as it stands."""


def parse_layout(layout: str) -> tuple[str, int | None]:
    """``(kind, leading_tokens)`` of a layout name; ``leading_tokens`` only for ``"tokens:<n>"``.

    Raises:
        ValueError: For anything but ``"NCHW"``, ``"NHWC"``, ``"tokens"`` or ``"tokens:<n>"``
            with ``n >= 0``.
    """
    if isinstance(layout, str):
        upper = layout.strip().upper()
        if upper in ("NCHW", "NHWC"):
            return upper, None
        kind, _, count = layout.strip().partition(":")
        if kind.lower() == "tokens":
            if not count:
                return "tokens", None
            if count.isdigit():
                return "tokens", int(count)
    raise ValueError(
        f"layout={layout!r} is not one of 'NCHW', 'NHWC', 'tokens' (leading tokens inferred) "
        "or 'tokens:<n>' (n leading tokens before a square grid)."
    )


def _node_name(node: object) -> str:
    name = type(node).__name__
    index = name.find("Backward")
    return name[:index] if index > 0 else name


def layout_is_known(
    layout: str | None, reshape_transform: ReshapeTransform | None, module: nn.Module
) -> bool:
    """Whether the layout is settled without looking at the output's autograd history."""
    return layout is not None or reshape_transform is not None or isinstance(module, _NCHW_MODULES)


def infer_nchw_evidence(module: nn.Module, output: torch.Tensor) -> bool:
    """Whether ``output`` (4-D) is provably channels-first (see the module docstring)."""
    if output.ndim != 4:
        return False
    if isinstance(module, _NCHW_MODULES):
        return True
    pending = [output.grad_fn]
    seen: set[int] = set()
    found = False
    while pending and len(seen) < _MAX_WALK:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        name = _node_name(node)
        if name in _NCHW_NODES:
            found = True
        elif name in _LAYOUT_CHANGING_NODES:
            return False
        elif name in _ELEMENTWISE_NODES:
            pending.extend(next_node for next_node, _ in node.next_functions)
    return found


def _evidence(module: nn.Module) -> str:
    if isinstance(module, _NCHW_MODULES):
        return f"{type(module).__name__} outputs are channels-first by definition"
    return "its computation ends in a channels-first operation with no permute after it"


def _hint(path: str) -> str:
    return (
        f"Say how to read it: LayerTarget({path!r}, layout='NCHW' | 'NHWC' | 'tokens' | "
        f"'tokens:<n>'), or LayerTarget({path!r}, reshape_transform=fn) with fn mapping the "
        "output to [B, C, H, W]."
    )


@dataclass(frozen=True)
class SpatialReader:
    """Reads one layer's output (a camera's part of it) as ``[B, C, H, W]``.

    Attributes:
        module_path: The layer, for error messages.
        description: How the output is read (``"NCHW"``, ``"tokens (1 leading, 7x7)"``...).
        convert: The rearrangement itself.
    """

    module_path: str
    description: str
    convert: ReshapeTransform

    def to_nchw(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as ``[B, C, H, W]``; checks what a ``reshape_transform`` returned."""
        result = self.convert(tensor)
        if not isinstance(result, torch.Tensor) or result.ndim != 4:
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else None
            raise LayerLayoutError(
                f"reshape_transform of layer {self.module_path!r} turned an output of shape "
                f"{tuple(tensor.shape)} into {type(result).__name__} of shape {shape}; it must "
                "return a [B, C, H, W] tensor."
            )
        if result.shape[0] != tensor.shape[0]:
            raise LayerLayoutError(
                f"reshape_transform of layer {self.module_path!r} changed the batch size from "
                f"{tensor.shape[0]} to {result.shape[0]} (output shape {tuple(tensor.shape)}); "
                "it must keep the batch axis first."
            )
        return result

    def source_index(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """For each ``[B, C, H, W]`` cell, the flat index of the output element it reads.

        Lets a perturbation made on the ``[B, C, H, W]`` view (Ablation-CAM zeroing a
        channel) be written back into the layer's own layout.

        Raises:
            LayerLayoutError: When the reader is not a pure rearrangement (a
                ``reshape_transform`` that computes rather than moves values).
        """
        count = math.prod(shape)
        positions = torch.arange(count, dtype=torch.float64, device=device).reshape(shape)
        mapped = self.to_nchw(positions)
        index = mapped.round().to(torch.int64)
        exact = bool(torch.equal(index.to(mapped.dtype), mapped))
        in_range = bool(((index >= 0) & (index < count)).all()) if index.numel() else True
        if not exact or not in_range or torch.unique(index).numel() != index.numel():
            raise LayerLayoutError(
                f"reshape_transform of layer {self.module_path!r} does not only rearrange the "
                "output's values (slicing, permuting, reshaping); Ablation-CAM needs that to "
                "write an ablated channel back into the layer's output. Use layout= instead."
            )
        return index


def _tokens_reader(
    path: str, shape: tuple[int, ...], leading: int | None, where: str
) -> SpatialReader:
    if len(shape) != 3:
        raise LayerLayoutError(
            f"Layer {path!r}{where} has an output of shape {shape}; layout 'tokens' needs "
            f"[B, N, C]. {_hint(path)}"
        )
    tokens = shape[1]
    if leading is None:
        side = math.isqrt(tokens)
        inferred = tokens - side * side
        if side < 2 or inferred > MAX_INFERRED_LEADING_TOKENS:
            raise LayerLayoutError(
                f"Layer {path!r}{where} has {tokens} tokens (output shape {shape}); the largest "
                f"square grid {side}x{side} leaves {inferred} leading tokens, more than the "
                f"{MAX_INFERRED_LEADING_TOKENS} layout='tokens' infers. Give the count as "
                f"layout='tokens:<n>', or a reshape_transform for a non-square grid."
            )
        if inferred not in INFERRED_LEADING_TOKENS:
            raise LayerLayoutError(
                f"Layer {path!r}{where} has {tokens} tokens (output shape {shape}); reading "
                f"them as {inferred} leading tokens and a {side}x{side} grid would be a guess "
                f"({inferred} is not a leading-token count vision transformers use: "
                f"{', '.join(map(str, INFERRED_LEADING_TOKENS))}), and {tokens} tokens may as "
                f"well be a non-square grid. Give the count as layout='tokens:<n>', or a "
                "reshape_transform that returns [B, C, H, W]."
            )
        leading = inferred
    else:
        side = math.isqrt(max(tokens - leading, 0))
        if leading >= tokens or side * side != tokens - leading:
            raise LayerLayoutError(
                f"Layer {path!r}{where} has {tokens} tokens (output shape {shape}); "
                f"layout='tokens:{leading}' leaves {tokens - leading}, not a square grid. "
                "Use a reshape_transform for a non-square grid."
            )
    first = leading

    def convert(tensor: torch.Tensor) -> torch.Tensor:
        grid = tensor[:, first:, :]
        return grid.reshape(tensor.shape[0], side, side, tensor.shape[2]).permute(0, 3, 1, 2)

    return SpatialReader(path, f"tokens ({leading} leading, {side}x{side} grid)", convert)


def _identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _channels_last(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.permute(0, 3, 1, 2)


def spatial_reader(
    module_path: str,
    layout: str | None,
    reshape_transform: ReshapeTransform | None,
    module: nn.Module,
    output: torch.Tensor,
    *,
    camera_key: str | None = None,
) -> SpatialReader:
    """How to read ``output`` (the layer's full output, before camera slicing) as NCHW.

    Raises:
        LayerLayoutError: When the layout is not given and not unambiguous, or the given
            layout does not fit the output's shape.
    """
    shape = tuple(output.shape)
    where = f" (camera {camera_key!r})" if camera_key is not None else ""
    if reshape_transform is not None:
        return SpatialReader(module_path, "reshape_transform", reshape_transform)
    if layout is not None:
        kind, leading = parse_layout(layout)
        if kind == "tokens":
            return _tokens_reader(module_path, shape, leading, where)
        if len(shape) != 4:
            raise LayerLayoutError(
                f"Layer {module_path!r}{where} has an output of shape {shape}; layout {kind!r} "
                f"needs a 4-D output. {_hint(module_path)}"
            )
        if kind == "NCHW":
            return SpatialReader(module_path, "NCHW", _identity)
        if infer_nchw_evidence(module, output):
            raise LayerLayoutError(
                f"layout='NHWC' for layer {module_path!r}{where} contradicts its output: a "
                f"{type(module).__name__} output of shape {shape} is channels-first "
                f"[B, C, H, W] ({_evidence(module)}), so reading it as [B, H, W, C] would take "
                f"the channels for a grid. Use layout='NCHW' (or leave layout out), or a "
                "reshape_transform if the output really is channels-last."
            )
        return SpatialReader(module_path, "NHWC", _channels_last)
    if len(shape) == 4:
        if infer_nchw_evidence(module, output):
            return SpatialReader(module_path, "NCHW", _identity)
        raise LayerLayoutError(
            f"Cannot tell which axis of layer {module_path!r}'s output of shape {shape}{where} "
            "holds the channels: it could be [B, C, H, W] or [B, H, W, C], and the module "
            f"({type(module).__name__}) and its computation do not say. {_hint(module_path)}"
        )
    if len(shape) == 3:
        raise LayerLayoutError(
            f"Layer {module_path!r}{where} has a 3-D output of shape {shape}, which may be "
            f"tokens [B, N, C] but is not read as such without being told. {_hint(module_path)}"
        )
    raise LayerLayoutError(
        f"Layer {module_path!r}{where} gives an activation of shape {shape}; class "
        "activation maps need [B, C, H, W] (or a layout / reshape_transform that makes it "
        "so). Pick a convolutional or token layer."
    )
