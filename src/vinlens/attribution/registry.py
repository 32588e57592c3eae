"""The attribution methods, one registry entry each: name, label, kind, channel weights.

Every method here is a class activation map ``ReLU(sum_k w_k A_k)`` over the camera's
feature map ``A`` (``[B, C, H, W]``); methods differ only in how the channel weights
``w`` (``[B, C]``) are found:

* ``"gradient"``: from the activation and the score's gradient at the layer
  (one forward and one backward for all cameras), ``channel_weights(A, dS/dA)``;
* ``"ablation"``: from the score with each channel ablated (one forward per channel
  batch), ``channel_weights(base_scores [B], ablated_scores [C, B])``.

Adding a method of either kind is one entry in :data:`METHOD_REGISTRY`;
:func:`~vinlens.attribution.explain_cameras` accepts it by name and a viewer lists it
with its label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from vinlens.attribution.methods import (
    ablation_weights,
    grad_cam_plus_plus_weights,
    grad_cam_weights,
)

__all__ = ["METHOD_KINDS", "METHOD_REGISTRY", "AttributionMethod", "method_labels"]

METHOD_KINDS: tuple[str, ...] = ("gradient", "ablation")
"""How a method finds its channel weights (see the module docstring)."""


@dataclass(frozen=True)
class AttributionMethod:
    """One attribution method.

    Attributes:
        name: The key :func:`~vinlens.attribution.explain_cameras` takes (``"grad_cam"``).
        label: The name papers use, for display (``"Grad-CAM"``).
        kind: One of :data:`METHOD_KINDS`.
        channel_weights: ``[B, C]`` channel weights from ``(activation, gradient)``
            (gradient kind) or ``(base_scores, ablated_scores)`` (ablation kind).
    """

    name: str
    label: str
    kind: str
    # Out of the repr: a function's repr carries its memory address.
    channel_weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = field(repr=False)

    def __post_init__(self) -> None:
        if self.kind not in METHOD_KINDS:
            raise ValueError(
                f"AttributionMethod {self.name!r}: kind={self.kind!r} is not one of "
                f"{list(METHOD_KINDS)}."
            )


METHOD_REGISTRY: Mapping[str, AttributionMethod] = MappingProxyType(
    {
        method.name: method
        for method in (
            AttributionMethod("grad_cam", "Grad-CAM", "gradient", grad_cam_weights),
            AttributionMethod(
                "grad_cam_plus_plus", "Grad-CAM++", "gradient", grad_cam_plus_plus_weights
            ),
            AttributionMethod("ablation_cam", "Ablation-CAM", "ablation", ablation_weights),
        )
    }
)
"""Method name -> :class:`AttributionMethod`, in the order a viewer lists them (read-only)."""


def method_labels() -> dict[str, str]:
    """Method name -> display label, in registry order."""
    return {name: method.label for name, method in METHOD_REGISTRY.items()}
