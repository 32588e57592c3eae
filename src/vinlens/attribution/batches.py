"""Reading a loader's batches: the camera images, the labels, and each sample's class.

A batch is a mapping camera key -> images ``[B, C, H, W]``, or ``(images, labels, ...)``;
anything else needs ``batch_images`` (and ``batch_labels``). Labels name the class each
sample is explained for when no score is given, so they are checked before they reach
a ``gather`` (an integer tensor of one class index per sample, each within the model's
classes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from vinlens.attribution.explain import OutputScore, _output_score
from vinlens.attribution.images import ImageLike

__all__ = ["BatchImages", "BatchLabels", "batch_camera_images"]

BatchImages = Callable[[Any], Mapping[str, ImageLike]]
BatchLabels = Callable[[Any], torch.Tensor | None]


def batch_camera_images(batch: Any) -> Mapping[str, ImageLike]:
    """The camera mapping of a loader batch, as the dataset functions read it by default.

    A batch that is a mapping camera key -> images is returned as is; for
    ``(images, labels, ...)`` the first item is returned. Anything else raises a
    ``TypeError`` that says to pass ``batch_images``.
    """
    if isinstance(batch, Mapping):
        return batch
    if isinstance(batch, list | tuple) and batch and isinstance(batch[0], Mapping):
        return batch[0]
    raise TypeError(
        f"a batch of type {type(batch).__name__} is neither a mapping camera key -> images nor "
        "(images, labels, ...); pass batch_images=fn that returns the camera mapping."
    )


def _default_batch_labels(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, list | tuple) and len(batch) > 1 and isinstance(batch[1], torch.Tensor):
        return batch[1]
    return None


def _check_labels(labels: Any) -> torch.Tensor:
    """One integer class index per sample, ``>= 0`` (the upper bound needs the output)."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(
            f"labels must be a tensor of class indices [B], got {type(labels).__name__}; "
            "pass batch_labels=fn returning one, or None."
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(
            f"labels must be an integer tensor of class indices, got dtype {labels.dtype} "
            f"(e.g. {labels.reshape(-1)[:3].tolist()}); convert with labels.long() if they "
            "are whole numbers."
        )
    flat = labels.detach().reshape(-1)
    if flat.numel() and int(flat.min()) < 0:
        bad = int(flat[flat < 0][0])
        raise ValueError(f"label {bad} is not a class index; labels must be >= 0.")
    return flat


class _ClassRecorder:
    """Score callable that also notes each sample's class from the first (unperturbed) output.

    With ``score=None`` it explains each sample's own class (its label, else the model's
    prediction); it understands outputs of a batch repeated ``r`` times (Ablation-CAM).
    Labels are checked against the first output: as many as samples, each below its
    number of classes.
    """

    def __init__(self, score: int | OutputScore | None, labels: torch.Tensor | None) -> None:
        self.given = score
        self.score = None if score is None else _output_score(score)
        self.classes: torch.Tensor | None = None if labels is None else _check_labels(labels)
        self._checked = False

    def explained_classes(self) -> tuple[int, ...] | None:
        """The class whose score was measured per sample: the label or prediction with no
        score, the index for an int score, ``None`` for a score callable."""
        if self.given is None:
            return None if self.classes is None else tuple(int(c) for c in self.classes.tolist())
        if isinstance(self.given, int) and self.classes is not None:
            return (int(self.given),) * int(self.classes.shape[0])
        return None

    def _check_against(self, output: Any) -> None:
        self._checked = True
        if self.classes is None or not isinstance(output, torch.Tensor):
            return
        if output.ndim >= 1 and output.shape[0] != self.classes.shape[0]:
            raise ValueError(
                f"{self.classes.shape[0]} labels for a model output of {output.shape[0]} "
                "samples; give one label per sample."
            )
        if output.ndim == 2 and self.classes.numel():
            top = int(self.classes.max())
            if top >= output.shape[1]:
                raise ValueError(
                    f"label {top} is not a class index of a model output with "
                    f"{output.shape[1]} classes (valid: 0..{output.shape[1] - 1})."
                )

    def __call__(self, output: Any) -> torch.Tensor:
        if not self._checked:
            self._check_against(output)
        if self.classes is None:
            if isinstance(output, torch.Tensor) and output.ndim == 2:
                self.classes = output.detach().argmax(dim=1)
            elif self.score is None:
                raise ValueError(
                    "score=None explains each sample's own class, which needs a model output of "
                    "shape [B, classes] or labels in the batch; pass a score."
                )
        if self.score is None:
            assert self.classes is not None
            if not isinstance(output, torch.Tensor) or output.ndim != 2:
                raise ValueError(
                    "score=None explains each sample's labelled class, which needs a model "
                    f"output of shape [B, classes], got {type(output).__name__} "
                    f"{tuple(getattr(output, 'shape', ()))}; pass a score."
                )
            classes = self.classes.to(output.device)
            repeats = output.shape[0] // classes.shape[0]
            picked: torch.Tensor = output.gather(1, classes.repeat(repeats)[:, None]).squeeze(1)
            return picked
        return self.score(output)
