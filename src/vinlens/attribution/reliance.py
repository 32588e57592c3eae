"""Camera reliance: how much the score drops when one camera's input is replaced.

:func:`camera_reliance` replaces one camera's input at a time by a baseline (zeros, a
dataset mean from :func:`camera_image_means`, or a callable) and measures the score drop
per sample; a :class:`RelianceSummary` folds batches into per-camera count, mean and M2
of the absolute and relative drops, merged with Chan's formula
(:func:`vinlens.operations.chan_merge`), so memory does not grow with the slice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vinlens.attribution.batches import BatchImages, _ClassRecorder, batch_camera_images
from vinlens.attribution.explain import OutputScore
from vinlens.attribution.images import ImageLike, camera_image_batches
from vinlens.attribution.maps import records_equal
from vinlens.attribution.state import explanation_mode
from vinlens.operations import chan_merge

__all__ = [
    "RELIANCE_BASELINES",
    "Baseline",
    "CameraReliance",
    "CameraRelianceStatistics",
    "RelianceSummary",
    "camera_image_means",
    "camera_reliance",
]

_RELATIVE_EPS = 1e-8
RELIANCE_BASELINES: tuple[str, ...] = ("zeros", "mean")
"""Named baselines :func:`camera_reliance_over` accepts (plus a mapping or a callable)."""

Baseline = str | Mapping[str, torch.Tensor] | Callable[[str, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, eq=False)
class CameraReliance:
    """Score drops of one batch when each camera's input is replaced by a baseline.

    Attributes:
        camera_keys: Cameras, in the order of ``drops``' columns.
        baseline: ``"zeros"``, or the type name of the mapping or callable given.
        scores: float64 ``[B]`` unperturbed scores.
        drops: float64 ``[B, C]``: score minus the score with that camera replaced.
        classes: ``[B]`` the class whose score was measured, per sample: its label (or
            the unperturbed prediction) for ``score=None``, the index itself for an int
            ``score``; ``None`` for a score callable, which explains no class.
    """

    camera_keys: tuple[str, ...]
    baseline: str
    scores: np.ndarray
    drops: np.ndarray
    classes: tuple[int, ...] | None

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    @property
    def relative_drops(self) -> np.ndarray:
        """``drops / |scores|`` (scores near zero guarded)."""
        denominator = np.maximum(np.abs(self.scores), _RELATIVE_EPS)[:, None]
        relative: np.ndarray = self.drops / denominator
        return relative

    def ranking(self) -> tuple[str, ...]:
        """Cameras by mean drop over the batch, largest first (ties by camera order)."""
        means = self.drops.mean(axis=0)
        order = sorted(range(len(self.camera_keys)), key=lambda i: (-means[i], i))
        return tuple(self.camera_keys[i] for i in order)


def _baseline_tensor(baseline: Baseline, camera: str, images: torch.Tensor) -> torch.Tensor:
    if isinstance(baseline, str):
        if baseline == "zeros":
            return torch.zeros_like(images)
        raise ValueError(
            f"baseline={baseline!r}: camera_reliance takes 'zeros', a mapping camera key -> "
            "image (e.g. camera_image_means(...)) or a callable (camera, images) -> images; "
            "'mean' is resolved by camera_reliance_over."
        )
    if isinstance(baseline, Mapping):
        if camera not in baseline:
            raise ValueError(
                f"baseline mapping has no image for camera {camera!r}; it has {sorted(baseline)}."
            )
        value = torch.as_tensor(baseline[camera]).to(images.device, images.dtype)
    elif callable(baseline):
        value = baseline(camera, images)
    else:
        raise TypeError(f"baseline must be a string, a mapping or a callable, got {baseline!r}.")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"baseline for camera {camera!r} is {type(value).__name__}, not a tensor.")
    try:
        expanded = value.to(images.device, images.dtype).expand_as(images)
    except RuntimeError:
        raise ValueError(
            f"baseline for camera {camera!r} has shape {tuple(value.shape)}, which does not "
            f"broadcast to the camera's images {tuple(images.shape)}."
        ) from None
    return expanded


def _model_device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def camera_reliance(
    model: nn.Module,
    images: Mapping[str, ImageLike],
    score: int | OutputScore | None = None,
    *,
    baseline: Baseline = "zeros",
    cameras: Sequence[str] | None = None,
    labels: torch.Tensor | None = None,
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
) -> CameraReliance:
    """How much the score drops when each camera's input is replaced by ``baseline``.

    One unperturbed forward and one per camera, in eval mode without gradients (the
    model's flags come back unchanged).

    Args:
        model: The model.
        images: Camera key -> images (all cameras the model needs).
        score: Class index, callable on the output, or ``None`` for each sample's own
            class (``labels`` if given, else the unperturbed prediction; the same class
            is scored in every perturbed forward).
        baseline: ``"zeros"``, a mapping camera key -> image broadcastable to the camera's
            images (e.g. the dataset mean from :func:`camera_image_means`), or a callable
            ``(camera_key, images) -> images``.
        cameras: Cameras to test; defaults to every camera in ``images``.
        labels: Per-sample classes for ``score=None``.
        forward: How to run the model on the camera mapping.
    """
    batches = camera_image_batches(images, device=_model_device(model))
    keys = list(batches) if cameras is None else list(cameras)
    unknown = [key for key in keys if key not in batches]
    if unknown:
        raise ValueError(f"cameras {unknown} have no images; images has {list(batches)}.")
    run = forward if forward is not None else model
    recorder = _ClassRecorder(score, labels)
    with explanation_mode(model, enable_parameter_grads=False), torch.no_grad():
        base = _scores(recorder(run(batches)), "score")
        drops = []
        for key in keys:
            replacement = _baseline_tensor(baseline, key, batches[key])
            perturbed = _scores(recorder(run({**batches, key: replacement})), "score")
            drops.append(base - perturbed)
    classes = recorder.explained_classes()
    return CameraReliance(
        camera_keys=tuple(keys),
        baseline=baseline if isinstance(baseline, str) else type(baseline).__name__,
        scores=base.cpu().numpy(),
        drops=torch.stack(drops, dim=1).cpu().numpy() if drops else np.zeros((len(base), 0)),
        classes=classes,
    )


def _scores(value: Any, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.ndim > 1:
        raise ValueError(
            f"{what} must be a floating tensor with one score per sample, got "
            f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}."
        )
    return value.detach().reshape(-1).to(torch.float64)


@dataclass(frozen=True)
class CameraRelianceStatistics:
    """One camera's reliance over a slice: mean and standard deviation of the drops."""

    camera_key: str
    count: int
    mean_drop: float
    std_drop: float
    mean_relative_drop: float
    std_relative_drop: float


@dataclass(frozen=True, eq=False)
class RelianceSummary:
    """Mergeable reliance over a slice: per camera count, mean and M2 of absolute and relative drops.

    Attributes:
        camera_keys: Cameras, in column order.
        count: Samples folded in.
        mean: float64 ``[2, C]``: mean drop (row 0) and mean relative drop (row 1).
        m2: float64 ``[2, C]``: sums of squared deviations, as ``mean``.
    """

    camera_keys: tuple[str, ...]
    count: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None

    def __eq__(self, other: object) -> bool:
        return records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def update(self, reliance: CameraReliance) -> RelianceSummary:
        """This summary with one batch's :class:`CameraReliance` folded in."""
        if reliance.camera_keys != self.camera_keys:
            raise ValueError(
                f"reliance over cameras {list(reliance.camera_keys)} does not fit a summary of "
                f"{list(self.camera_keys)}."
            )
        values = np.stack([reliance.drops, reliance.relative_drops])  # [2, B, C]
        count = values.shape[1]
        if not count:
            return self
        mean = values.mean(axis=1)
        m2 = ((values - mean[:, None, :]) ** 2).sum(axis=1)
        return self.merge(RelianceSummary(self.camera_keys, count, mean, m2))

    def merge(self, other: RelianceSummary) -> RelianceSummary:
        """Both slices together (Chan's parallel formula)."""
        if other.camera_keys != self.camera_keys:
            raise ValueError(
                f"cannot merge reliance over {list(other.camera_keys)} into {list(self.camera_keys)}."
            )
        if other.count == 0 or other.mean is None or other.m2 is None:
            return self
        if self.count == 0 or self.mean is None or self.m2 is None:
            return other
        mean, m2 = chan_merge(self.count, self.mean, self.m2, other.count, other.mean, other.m2)
        return RelianceSummary(self.camera_keys, self.count + other.count, mean, m2)

    def finish(self) -> tuple[CameraRelianceStatistics, ...]:
        """Per-camera statistics, largest mean drop first (ties by camera order)."""
        if not self.count or self.mean is None or self.m2 is None:
            return ()
        std = np.sqrt(self.m2 / self.count)
        stats = [
            CameraRelianceStatistics(
                key,
                self.count,
                float(self.mean[0, i]),
                float(std[0, i]),
                float(self.mean[1, i]),
                float(std[1, i]),
            )
            for i, key in enumerate(self.camera_keys)
        ]
        order = sorted(range(len(stats)), key=lambda i: (-stats[i].mean_drop, i))
        return tuple(stats[i] for i in order)

    def ranking(self) -> tuple[str, ...]:
        """Cameras by mean drop over the slice, largest first."""
        return tuple(s.camera_key for s in self.finish())


def camera_image_means(
    batches: Iterable[Any], *, batch_images: BatchImages | None = None
) -> dict[str, torch.Tensor]:
    """Per-camera mean image ``[C, H, W]`` (float64 sums, one pass, memory of one image each)."""
    to_images = batch_images or batch_camera_images
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for batch in batches:
        images = camera_image_batches(to_images(batch))
        for key, tensor in images.items():
            total = tensor.to(torch.float64).sum(dim=0)
            sums[key] = sums[key] + total if key in sums else total
        count += next(iter(images.values())).shape[0]
    if not count:
        raise ValueError("camera_image_means: the batches are empty.")
    return {key: (value / count).to(torch.float32) for key, value in sums.items()}
