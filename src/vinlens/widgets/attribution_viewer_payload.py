"""What the attribution viewer sends the browser, and the PNGs it writes.

Engine records in, JSON-safe payloads out (through :func:`vinlens.widgets._payload.to_jsonable`
and binary arrays): one camera's map (:func:`record_payload`), the camera images
(:func:`images_payload`), the layer choices (:func:`layers_payload`) and the dataset view
(:func:`dataset_payload`). :func:`write_pngs` colours maps as the browser does
(``js/widgets/attribution/text.ts:displayRange``) for ``export_png``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vinlens.attribution import (
    CameraAttribution,
    CameraExplanationTarget,
    MapFlatness,
    VisionCaptureMode,
    map_flatness,
    method_labels,
)
from vinlens.attribution.dataset import DatasetExplanation
from vinlens.attribution.layers import LayerOptions
from vinlens.attribution.maps import CameraMapStatistics
from vinlens.widgets._payload import encode_array, to_jsonable

__all__ = [
    "CAPTURE_MODES",
    "METHOD_LABELS",
    "choices_by_mode",
    "dataset_payload",
    "display_image",
    "flatness_of",
    "image_map",
    "images_payload",
    "layer_map",
    "layers_payload",
    "record_payload",
    "write_pngs",
]

METHOD_LABELS: dict[str, str] = method_labels()
"""The engine's methods in its order, with the names papers use."""
CAPTURE_MODES = tuple(mode.value for mode in VisionCaptureMode)


# -- one camera's map -----------------------------------------------------------------------
def layer_map(record: CameraAttribution) -> np.ndarray:
    return np.asarray(record.raw_map, dtype=np.float32)


def image_map(record: CameraAttribution) -> np.ndarray:
    return np.asarray(record.upsampled_map, dtype=np.float32)


def flatness_of(records: Mapping[str, CameraAttribution]) -> dict[str, MapFlatness]:
    # Judged across every camera on screen, so a recompute of some cameras re-judges all.
    return map_flatness({key: (r.raw_min, r.raw_max) for key, r in records.items()})


def record_payload(record: CameraAttribution, flatness: MapFlatness) -> dict[str, Any]:
    """What the browser needs of one record: the image-sized raw map plus its labels."""
    target = record.target
    # Through to_jsonable so a NaN or infinite score or range arrives as an explicit value.
    payload: dict[str, Any] = to_jsonable(
        {
            "camera_key": record.camera_key,
            "method": record.method,
            "method_label": METHOD_LABELS.get(record.method, record.method),
            "layer": target.target.module_path,
            "capture_mode": target.capture_mode,
            "target": describe_target(target),
            "score": float(record.score),
            "map": image_map(record),
            "layer_shape": list(record.layer_shape),
            "min": record.raw_min,
            "max": record.raw_max,
            "span": flatness.span,
            "relative_span": flatness.relative_span,
            "largest_camera": flatness.largest_camera,
            "flat": flatness.flat,
            "flat_reason": flatness.reason,
        }
    )
    return payload


def describe_target(target: CameraExplanationTarget) -> str:
    out = f"{target.target.module_path} ({target.capture_mode}"
    if target.invocation_index is not None:
        out += f", call {target.invocation_index}"
    if target.stacked_camera_index is not None:
        out += f", slice {target.stacked_camera_index}/{target.stacked_camera_count}"
    return out + ")"


# -- images and layers ----------------------------------------------------------------------
def images_payload(inputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    return {key: encode_array(display_image(image)) for key, image in inputs.items()}


def display_image(tensor: torch.Tensor) -> np.ndarray:
    """uint8 ``[H, W, C]`` (C = 1, 3 or 4) for the canvas.

    Values in [0, 1] are scaled by 255, values in [0, 255] kept, and anything else
    (e.g. mean/std-normalised inputs) stretched to its own min..max so it stays visible.
    """
    array = tensor.detach().to("cpu", torch.float32)[0].numpy()
    if array.shape[0] not in (1, 3, 4):
        array = array.mean(axis=0, keepdims=True)
    array = np.transpose(array, (1, 2, 0))
    finite = array[np.isfinite(array)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if lo >= 0.0 and hi <= 1.0:
        scaled = array * 255.0
    elif lo >= 0.0 and hi <= 255.0:
        scaled = array
    else:
        scaled = (array - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(array)
    image: np.ndarray = np.nan_to_num(np.clip(np.rint(scaled), 0, 255)).astype(np.uint8)
    return image


def layers_payload(options: LayerOptions) -> list[dict[str, Any]]:
    """The ``layers`` traitlet: each choice's path, module type and capture modes."""
    return [
        {"path": o.path, "type": o.module_type, "modes": list(o.modes)} for o in options.options
    ]


def choices_by_mode(layers: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """The layer options per capture mode (what ``layer_choices`` holds)."""
    return {
        mode: [{"path": c["path"], "type": c["type"]} for c in layers if mode in c["modes"]]
        for mode in CAPTURE_MODES
    }


# -- the dataset view -------------------------------------------------------------------------
def dataset_payload(
    record: DatasetExplanation,
    *,
    score_label: str,
    layer: str,
    camera_keys: list[str],
) -> dict[str, Any]:
    """The dataset view's payload: the engine's record as maps, flatness and reliance rows.

    The all-classes statistics (``class_index=None``) fill ``aggregates``, each class's
    fill ``class_aggregates`` under its index as a string, and ``concentration`` holds,
    per class choice and camera, the most and least concentrated samples (with the one
    concentration they all share, when they do). A kept sample's index on the slider is
    its sample id: both count samples in loader order from the first batch.
    """
    groups: dict[int | None, list[CameraMapStatistics]] = {}
    for statistic in record.map_statistics:
        groups.setdefault(statistic.class_index, []).append(statistic)
    overall = groups.get(None, [])
    kept = len(record.kept)
    stats: list[dict[str, str]] = [{"value": "mean", "label": "mean map (raw)"}]
    for p in record.percentiles:
        stats.append({"value": f"p{p:g}", "label": f"{p:g}th percentile (normalised maps)"})
    classes = [{"value": "all", "label": f"all classes ({record.samples})"}]
    class_aggregates: dict[str, dict[str, dict[str, Any]]] = {}
    concentration: dict[str, dict[str, dict[str, Any]]] = {
        "all": _concentration_rows(overall, camera_keys, kept)
    }
    for index in sorted(c for c in groups if c is not None):
        members = groups[index]
        classes.append({"value": str(index), "label": f"class {index} ({members[0].count})"})
        class_aggregates[str(index)] = _aggregate_maps(members, camera_keys)
        concentration[str(index)] = _concentration_rows(members, camera_keys, kept)
    by_key = {r.camera_key: r for r in record.reliance_statistics}
    drops = {key: r.mean_drop for key, r in by_key.items()}
    positive = sum(max(d, 0.0) for d in drops.values() if math.isfinite(d))
    rows = [
        {
            "camera": key,
            "drop": drops[key],
            "std": by_key[key].std_drop,
            "share": max(drops[key], 0.0) / positive if positive > 0 else 0.0,
        }
        for key in camera_keys
        if key in drops
    ]
    payload: dict[str, Any] = to_jsonable(
        {
            "samples": record.samples,
            "batches": record.batches,
            "kept": [sample.label for sample in record.kept],
            "baseline": record.baseline,
            "score_label": score_label,
            "method": record.method,
            "method_label": METHOD_LABELS.get(record.method, record.method),
            "layer": layer,
            "nonfinite_maps": record.nonfinite_maps,
            "stats": stats,
            "aggregates": _aggregate_maps(overall, camera_keys),
            "classes": classes,
            "class_aggregates": class_aggregates,
            "concentration": concentration,
            "reliance": rows,
        }
    )
    return payload


def _aggregate_maps(
    statistics: Sequence[CameraMapStatistics], camera_keys: list[str]
) -> dict[str, dict[str, Any]]:
    """stat -> camera -> map with its range and flatness, judged across the cameras."""
    by_camera = {s.camera_key: s for s in statistics}
    maps: dict[str, dict[str, np.ndarray]] = {"mean": {}}
    for key in camera_keys:
        if key not in by_camera:
            continue
        maps["mean"][key] = np.asarray(by_camera[key].mean_map, dtype=np.float32)
        for p, values in by_camera[key].percentile_maps.items():
            maps.setdefault(f"p{p:g}", {})[key] = np.asarray(values, dtype=np.float32)
    aggregates: dict[str, dict[str, Any]] = {}
    for stat, per_camera in maps.items():
        ranges = {k: finite_range(v) for k, v in per_camera.items()}
        flatness = map_flatness(ranges)
        aggregates[stat] = {
            key: {
                "map": values,
                "min": ranges[key][0],
                "max": ranges[key][1],
                "span": flatness[key].span,
                "relative_span": flatness[key].relative_span,
                "largest_camera": flatness[key].largest_camera,
                "flat": flatness[key].flat,
                "flat_reason": flatness[key].reason,
                "nonfinite": by_camera[key].nonfinite_count,
            }
            for key, values in per_camera.items()
        }
    return aggregates


def _concentration_rows(
    statistics: Sequence[CameraMapStatistics], camera_keys: list[str], kept: int
) -> dict[str, dict[str, Any]]:
    """camera -> "most" / "least" -> the engine's samples with their slider index or None."""
    by_camera = {s.camera_key: s for s in statistics}
    return {
        key: {
            "uniform": by_camera[key].uniform_concentration,
            **{
                which: [
                    {
                        "sample_id": sample.sample_id,
                        "concentration": sample.concentration,
                        "kept_index": sample.sample_id if 0 <= sample.sample_id < kept else None,
                        "map": np.asarray(sample.raw_map, dtype=np.float32),
                    }
                    for sample in samples
                ]
                for which, samples in (
                    ("most", by_camera[key].most_concentrated),
                    ("least", by_camera[key].least_concentrated),
                )
            },
        }
        for key in camera_keys
        if key in by_camera
    }


def finite_range(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    return (float(finite.min()), float(finite.max())) if finite.size else (math.nan, math.nan)


# -- PNG export -------------------------------------------------------------------------------
def display_ranges(scale: str, maps: Mapping[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """The colour-scale range per camera, as js/widgets/attribution/text.ts:displayRange."""

    def own_range(values: np.ndarray) -> tuple[float, float]:
        lo, hi = finite_range(values)
        return (lo, hi) if math.isfinite(lo) else (0.0, 0.0)

    own = {key: own_range(values) for key, values in maps.items()}
    if scale == "normalized":
        return own
    shared = (min(0.0, *(lo for lo, _ in own.values())), max(hi for _, hi in own.values()))
    return {key: shared for key in maps}


def _normalized(values: np.ndarray, vmin: float, vmax: float) -> np.ndarray:
    if not vmax > vmin:
        return np.full_like(values, 0.5)
    return np.clip((values - vmin) / (vmax - vmin), 0.0, 1.0)


def _safe_filename(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key) or "camera"


def write_pngs(
    directory: str | Path,
    maps: Mapping[str, np.ndarray],
    inputs: Mapping[str, torch.Tensor],
    *,
    colormap: str,
    scale: str,
    opacity: float,
    overlay: bool,
) -> list[Path]:
    """Write ``<camera>.png`` per map, coloured as the widget shows them; paths in camera order."""
    from matplotlib import colormaps
    from matplotlib.image import imsave

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmap = colormaps[colormap]
    ranges = display_ranges(scale, maps)
    written: list[Path] = []
    for key, values in maps.items():
        vmin, vmax = ranges[key]
        name = _safe_filename(key)
        if out_dir / f"{name}.png" in written:  # two keys that sanitise alike
            name = f"{name}-{len(written)}"
        path = out_dir / f"{name}.png"
        if overlay:
            colour = cmap(_normalized(values, vmin, vmax))[..., :3]
            image = display_image(inputs[key]).astype(np.float32) / 255.0
            if image.shape[-1] == 1:
                image = np.repeat(image, 3, axis=-1)
            blended = (1 - opacity) * image[..., :3] + opacity * colour
            imsave(path, np.clip(blended, 0.0, 1.0))
        else:
            imsave(path, values, cmap=cmap, vmin=vmin, vmax=vmax)
        written.append(path)
    return written
