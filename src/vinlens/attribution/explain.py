"""Explain every camera of a multi-camera model in one call, as frozen records for a viewer.

:func:`explain_cameras` takes what a notebook user has at hand (the model, the
camera images, a class index or a score function, the per-camera targets) and
returns one :class:`CameraAttribution` per camera and sample. Raw map values are
kept as computed; display normalisation is a separate, explicit step
(:func:`normalize_map`, :meth:`CameraAttribution.normalized`) so a viewer can show
raw values, per-camera normalised maps, or maps on one shared scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vinlens.attribution.flatness import DEFAULT_RELATIVE_SPAN, map_flatness
from vinlens.attribution.images import ImageLike, camera_image_batches
from vinlens.attribution.methods import (
    ablation_cam_with_scores,
    cam_from_channel_weights,
    gradient_captures,
)
from vinlens.attribution.registry import METHOD_REGISTRY, AttributionMethod
from vinlens.attribution.targets import CameraExplanationTarget

__all__ = [
    "ATTRIBUTION_METHODS",
    "NEAR_FLAT_SPREAD",
    "CameraAttribution",
    "ImageLike",
    "check_camera_targets",
    "explain_cameras",
    "near_flat_cameras",
    "normalize_map",
]

NEAR_FLAT_SPREAD = DEFAULT_RELATIVE_SPAN
"""Default of :func:`near_flat_cameras`: the relative span of
:func:`~vinlens.attribution.flatness.map_flatness` (a map whose spread is at most this
fraction of the widest spread among the cameras explained with it is near flat)."""

ATTRIBUTION_METHODS: tuple[str, ...] = tuple(METHOD_REGISTRY)
"""Method names :func:`explain_cameras` accepts, in the order a viewer lists them
(the keys of :data:`~vinlens.attribution.registry.METHOD_REGISTRY`)."""


def check_camera_targets(
    targets: Sequence[CameraExplanationTarget], camera_keys: Iterable[str]
) -> tuple[CameraExplanationTarget, ...]:
    """``targets`` as a tuple, after checking each is a record whose camera has an image.

    Public so a front end (the attribution viewer) rejects bad targets with the same
    messages :func:`explain_cameras` gives, instead of keeping its own copy of the checks.

    Raises:
        ValueError: When ``targets`` is empty or a target's camera is not in ``camera_keys``.
        TypeError: When an element is not a :class:`CameraExplanationTarget`.
    """
    checked = tuple(targets)
    if not checked:
        raise ValueError("targets is empty; pass at least one CameraExplanationTarget.")
    keys = sorted(camera_keys)
    for target in checked:
        if not isinstance(target, CameraExplanationTarget):
            raise TypeError(
                f"targets must hold CameraExplanationTarget records, got {type(target).__name__}."
            )
        if target.camera_key not in keys:
            raise ValueError(
                f"Target camera {target.camera_key!r} has no image; images has {keys}."
            )
    return checked


OutputScore = Callable[[Any], torch.Tensor]


@dataclass(frozen=True, eq=False)
class CameraAttribution:
    """One camera's attribution map for one sample.

    Attributes:
        camera_key: The camera this map explains.
        method: One of :data:`ATTRIBUTION_METHODS`.
        target: Where the map was read (layer, capture mode, camera routing).
        sample_index: Index of the sample in the batch of images given.
        score: The explained score of this sample before any perturbation (for a
            score callable that returns one scalar for the whole batch, that scalar).
        raw_map: float32 ``[h, w]`` at the target layer's resolution, ReLU applied,
            unscaled. Read-only.
        upsampled_map: float32 ``[H, W]``: ``raw_map`` bilinearly resized to the camera
            image (``align_corners=False``). Read-only. Bilinear interpolation stays
            within the raw range, so ``raw_min``/``raw_max`` bound it too.
        raw_min: Minimum of ``raw_map``.
        raw_max: Maximum of ``raw_map``.
    """

    camera_key: str
    method: str
    target: CameraExplanationTarget
    sample_index: int
    score: float
    raw_map: np.ndarray
    upsampled_map: np.ndarray
    raw_min: float
    raw_max: float

    @property
    def layer_shape(self) -> tuple[int, int]:
        """``(h, w)`` of the target layer's map."""
        return (int(self.raw_map.shape[0]), int(self.raw_map.shape[1]))

    @property
    def spread(self) -> float:
        """``raw_max - raw_min``: how much the map varies at all."""
        return self.raw_max - self.raw_min

    @property
    def image_shape(self) -> tuple[int, int]:
        """``(H, W)`` of the camera image."""
        return (int(self.upsampled_map.shape[0]), int(self.upsampled_map.shape[1]))

    def normalized(
        self,
        *,
        upsampled: bool = True,
        vmin: float | None = None,
        vmax: float | None = None,
    ) -> np.ndarray:
        """Display map in ``[0, 1]``: this camera's own range unless ``vmin``/``vmax`` given."""
        values = self.upsampled_map if upsampled else self.raw_map
        return normalize_map(
            values,
            vmin=self.raw_min if vmin is None else vmin,
            vmax=self.raw_max if vmax is None else vmax,
        )


def near_flat_cameras(
    records: Iterable[CameraAttribution], *, relative_spread: float = NEAR_FLAT_SPREAD
) -> frozenset[tuple[int, str]]:
    """``(sample_index, camera_key)`` of the maps that are near flat beside the others.

    Normalised per camera, a map spanning 1.8e-4 to 2.0e-4 looks as hot as one spanning
    0 to 0.5. A map is near flat when its :attr:`~CameraAttribution.spread` is at most
    ``relative_spread`` times the widest spread among the records of the same sample
    (every map of a sample is near flat when all their spreads are zero), or at most the
    absolute floor of :func:`~vinlens.attribution.flatness.map_flatness`, which applies
    the rule to each sample's records. A viewer marks these and shows their raw range.
    """
    if not 0.0 <= relative_spread < 1.0:
        raise ValueError(f"relative_spread must be in [0, 1), got {relative_spread!r}.")
    by_sample: dict[int, list[CameraAttribution]] = {}
    for record in records:
        by_sample.setdefault(record.sample_index, []).append(record)
    flat: set[tuple[int, str]] = set()
    for sample, found in by_sample.items():
        ranges = {record.camera_key: (record.raw_min, record.raw_max) for record in found}
        judged = map_flatness(ranges, relative_span=relative_spread)
        flat.update((sample, key) for key, verdict in judged.items() if verdict.flat)
    return frozenset(flat)


def normalize_map(
    values: np.ndarray, *, vmin: float | None = None, vmax: float | None = None
) -> np.ndarray:
    """Scale ``values`` linearly to float32 ``[0, 1]`` for display, clipping outside the range.

    ``vmin``/``vmax`` default to the array's own range; pass the min of all
    cameras' ``raw_min`` and max of their ``raw_max`` to put several cameras on one
    scale. A flat map (``vmax <= vmin``) becomes all zeros, not NaN, because a
    camera the score ignores is a normal outcome.
    """
    array = np.asarray(values, dtype=np.float32)
    low = float(array.min()) if vmin is None else float(vmin)
    high = float(array.max()) if vmax is None else float(vmax)
    if not np.isfinite(low) or not np.isfinite(high):
        raise ValueError(f"normalize_map needs finite bounds, got vmin={low}, vmax={high}.")
    if high <= low:
        return np.zeros_like(array)
    scaled: np.ndarray = np.clip((array - low) / (high - low), 0.0, 1.0).astype(np.float32)
    return scaled


def _model_device(model: nn.Module) -> torch.device:
    for parameter in model.parameters():
        return parameter.device
    for buffer in model.buffers():
        return buffer.device
    return torch.device("cpu")


def _output_score(score: int | OutputScore) -> OutputScore:
    if isinstance(score, bool):
        raise TypeError("score must be a class index (int) or a callable, got a bool.")
    if isinstance(score, int):
        class_index = score

        def class_logit(output: Any) -> torch.Tensor:
            if not isinstance(output, torch.Tensor) or output.ndim != 2:
                shape = tuple(output.shape) if isinstance(output, torch.Tensor) else None
                raise ValueError(
                    f"score={class_index} selects a class column, which needs a model output "
                    f"of shape [B, classes]; got {type(output).__name__} with shape {shape}. "
                    "Pass a score callable instead."
                )
            if not -output.shape[1] <= class_index < output.shape[1]:
                raise ValueError(
                    f"score={class_index} is not a class index of an output with "
                    f"{output.shape[1]} classes."
                )
            return output[:, class_index]

        return class_logit
    if not callable(score):
        raise TypeError(f"score must be a class index or a callable, got {score!r}.")
    return score


def explain_cameras(
    model: nn.Module,
    images: Mapping[str, ImageLike],
    score: int | OutputScore,
    targets: Sequence[CameraExplanationTarget],
    *,
    method: str = "grad_cam",
    forward: Callable[[dict[str, torch.Tensor]], Any] | None = None,
    channel_batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[CameraAttribution, ...]:
    """Attribution maps for each target camera, one record per camera and sample.

    Args:
        model: The model; it runs in eval mode during the call and comes back with
            its training flags, ``requires_grad`` flags and ``.grad`` fields unchanged.
        images: Camera key -> image, ``[C, H, W]`` or ``[B, C, H, W]`` tensor or numpy
            array (all cameras the model needs, not only the explained ones). Values are
            passed to the model as they are (no scaling); they are moved to the model's
            device.
        score: A class index (the model output must be ``[B, classes]``; the score is
            that column) or a callable taking the model output and returning one score
            per sample ``[B]`` (or a scalar).
        targets: One :class:`CameraExplanationTarget` per camera to explain, e.g. from
            :func:`~vinlens.attribution.targets.camera_targets_for_layer`.
        method: One of :data:`ATTRIBUTION_METHODS`.
        forward: How to run the model on the image mapping; defaults to
            ``model(images)``.
        channel_batch_size: Ablation-CAM channels evaluated per forward.
        progress: Called as ``progress(done, total)`` after each unit of work, for a
            viewer's progress bar.

    Returns:
        Records ordered by sample, then by ``targets`` order.

    Raises:
        ValueError: Unknown method, a target camera missing from ``images``, images of
            the wrong rank, or errors from the methods (bad layer path, bad score, an
            output index out of range, or a
            :class:`~vinlens.attribution.layout.LayerLayoutError` for a layer output that
            cannot be read as ``[B, C, H, W]`` without a ``layout`` or ``reshape_transform``).
        RuntimeError: When a target layer never sees its camera or the score does not
            depend on it (see :mod:`vinlens.attribution.methods`).
    """
    _check_call(score, targets, method)
    targets = check_camera_targets(targets, images)
    batched = camera_image_batches(images, device=_model_device(model))
    output_score = _output_score(score)
    run_forward = forward if forward is not None else model

    def scored(images: dict[str, torch.Tensor]) -> torch.Tensor:
        return output_score(run_forward(images))

    entry = METHOD_REGISTRY[method]
    if entry.kind == "ablation":
        maps, scores = _ablation_maps(
            model, targets, entry, batched, scored, channel_batch_size, progress
        )
    else:
        captured, scores = gradient_captures(model, targets, lambda: scored(batched))
        maps = [
            cam_from_channel_weights(entry.channel_weights(activation, gradient), activation)
            for activation, gradient in captured
        ]
        if progress is not None:
            progress(len(targets), len(targets))
    return _records(targets, maps, scores, batched, method)


def _check_call(score: object, targets: object, method: str) -> None:
    """Refuse swapped ``score``/``targets`` arguments and an unknown ``method``."""
    if isinstance(score, Sequence) or not isinstance(targets, Sequence):
        raise TypeError(
            "explain_cameras(model, images, score, targets): score must be a class index or "
            "a callable and targets a sequence of CameraExplanationTarget; got score of type "
            f"{type(score).__name__} and targets of type {type(targets).__name__} "
            "(swapped arguments?)."
        )
    if method not in ATTRIBUTION_METHODS:
        raise ValueError(
            f"Unknown attribution method {method!r}; expected one of {ATTRIBUTION_METHODS}."
        )


def _ablation_maps(
    model: nn.Module,
    targets: Sequence[CameraExplanationTarget],
    entry: AttributionMethod,
    batched: dict[str, torch.Tensor],
    scored: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    channel_batch_size: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One Ablation-CAM map per target (one target at a time, ``progress`` after each) and
    the unablated scores ``[B]``."""

    def replicated_score(repeats: int) -> torch.Tensor:
        return scored({key: image.repeat(repeats, 1, 1, 1) for key, image in batched.items()})

    maps: list[torch.Tensor] = []
    scores = torch.empty(0)  # replaced below: check_camera_targets refuses no targets
    for done, target in enumerate(targets, start=1):
        cam, scores = ablation_cam_with_scores(
            model,
            target,
            lambda: scored(batched),
            replicated_score=replicated_score,
            channel_batch_size=channel_batch_size,
            channel_weights=entry.channel_weights,
        )
        maps.append(cam)
        if progress is not None:
            progress(done, len(targets))
    return maps, scores


def _records(
    targets: tuple[CameraExplanationTarget, ...],
    maps: list[torch.Tensor],
    scores: torch.Tensor,
    images: dict[str, torch.Tensor],
    method: str,
) -> tuple[CameraAttribution, ...]:
    batch_size = maps[0].shape[0]
    flat_scores = scores.detach().reshape(-1).to("cpu", torch.float64)
    records = []
    upsampled_per_target = []
    for target, cam in zip(targets, maps, strict=True):
        image_size = tuple(images[target.camera_key].shape[-2:])
        upsampled = F.interpolate(
            cam.detach().unsqueeze(1).float(),
            size=image_size,
            mode="bilinear",
            align_corners=False,
        ).squeeze(1)
        upsampled_per_target.append(upsampled.cpu().numpy())
    for sample in range(batch_size):
        value = flat_scores[sample] if flat_scores.numel() == batch_size else flat_scores.sum()
        for target, cam, upsampled_maps in zip(targets, maps, upsampled_per_target, strict=True):
            raw = cam[sample].detach().float().cpu().numpy().copy()
            upsampled_map = upsampled_maps[sample].copy()
            raw.setflags(write=False)
            upsampled_map.setflags(write=False)
            records.append(
                CameraAttribution(
                    camera_key=target.camera_key,
                    method=method,
                    target=target,
                    sample_index=sample,
                    score=float(value),
                    raw_map=raw,
                    upsampled_map=upsampled_map,
                    raw_min=float(raw.min()),
                    raw_max=float(raw.max()),
                )
            )
    return tuple(records)
