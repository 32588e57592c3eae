"""Dataset aggregation of attribution maps and camera reliance, against direct computations."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from vinlens.attribution import explain_cameras
from vinlens.attribution.aggregate import (
    AttributionAggregate,
    RelianceSummary,
    aggregate_attributions,
    camera_image_means,
    camera_reliance,
    camera_reliance_over,
    map_concentration,
)
from vinlens.demo import CAMERA_KEYS, EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images

EVIDENCE = {"rgb": (30, 62), "slam-left": (56, 20), "slam-right": (22, 44)}


class CameraSamples(Dataset[dict[str, torch.Tensor]]):
    """Demo images, one sample per item, as a DataLoader would see a real dataset."""

    def __init__(self, count: int, evidence: dict[str, tuple[float, float]] | None = None) -> None:
        self.images = make_camera_images(count, evidence=evidence or EVIDENCE, seed=11)

    def __len__(self) -> int:
        return next(iter(self.images.values())).shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[index] for key, value in self.images.items()}


def test_aggregation_over_20_batches_equals_the_mean_of_per_batch_maps() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    targets = model.camera_targets()
    loader = DataLoader(CameraSamples(40), batch_size=2, shuffle=False)
    aggregate = aggregate_attributions(model, loader, targets, score=EVIDENCE_CLASS, bins=16)
    assert aggregate.samples == 40
    stats = {s.camera_key: s for s in aggregate.finish() if s.class_index is None}
    per_batch: dict[str, list[np.ndarray]] = {key: [] for key in CAMERA_KEYS}
    all_maps: dict[str, list[np.ndarray]] = {key: [] for key in CAMERA_KEYS}
    for batch in loader:
        records = explain_cameras(model, batch, EVIDENCE_CLASS, targets)
        for key in CAMERA_KEYS:
            maps = np.stack([r.raw_map for r in records if r.camera_key == key])
            per_batch[key].append(maps.mean(axis=0))
            all_maps[key].extend(maps)
    assert len(per_batch["rgb"]) == 20
    for key in CAMERA_KEYS:
        expected = np.mean(per_batch[key], axis=0)
        assert stats[key].count == 40
        np.testing.assert_allclose(stats[key].mean_map, expected, rtol=1e-5, atol=1e-9)
        # Percentiles of the normalised maps, within half a bin of the exact ones.
        maps = np.stack(all_maps[key]).astype(np.float64)
        normalised = maps / maps.reshape(40, -1).max(axis=1)[:, None, None]
        for percentile, found in stats[key].percentile_maps.items():
            exact = np.percentile(normalised, percentile, axis=0, method="inverted_cdf")
            assert np.abs(found - exact).max() <= 0.5 / 16 + 1e-6, (key, percentile)
        # Most and least concentrated: the same samples as ranking every map directly.
        concentration = map_concentration(maps)
        order = sorted(range(40), key=lambda i: (-concentration[i], i))
        assert [s.sample_id for s in stats[key].most_concentrated] == order[:5]
        least = sorted(range(40), key=lambda i: (concentration[i], i))
        assert [s.sample_id for s in stats[key].least_concentrated] == least[:5]
        kept = stats[key].most_concentrated[0]
        np.testing.assert_array_equal(kept.raw_map, maps[kept.sample_id].astype(np.float32))
    # Memory does not grow with batches: one sum and one histogram per camera and class.
    for accumulator in aggregate.accumulators:
        assert accumulator.histogram.shape == (16, *accumulator.map_sum.shape)


def test_shards_merge_to_the_single_pass_and_pickle() -> None:
    model = MultiCameraDemoModel("stacked_camera_batch")
    targets = model.camera_targets()
    batches = [make_camera_images(2, evidence=EVIDENCE, seed=s) for s in range(4)]
    labels = [torch.tensor([s % 2, 1]) for s in range(4)]
    data = list(zip(batches, labels, strict=True))
    whole = aggregate_attributions(model, data, targets, score=EVIDENCE_CLASS, top_k=3)
    first = aggregate_attributions(model, data[:2], targets, score=EVIDENCE_CLASS, top_k=3)
    second = aggregate_attributions(
        model, data[2:], targets, score=EVIDENCE_CLASS, top_k=3, first_sample_id=4
    )
    merged = pickle.loads(pickle.dumps(first)).merge(pickle.loads(pickle.dumps(second)))
    assert merged.samples == whole.samples == 8
    assert whole.classes == (0, 1)
    for a, b in zip(whole.accumulators, merged.accumulators, strict=True):
        assert (a.camera_key, a.class_index, a.count) == (b.camera_key, b.class_index, b.count)
        np.testing.assert_allclose(a.map_sum, b.map_sum, rtol=1e-12)
        np.testing.assert_array_equal(a.histogram, b.histogram)
        assert [s.sample_id for s in a.most] == [s.sample_id for s in b.most]
    # Folding the explain_cameras records batch by batch gives the same aggregate.
    by_batch = AttributionAggregate("grad_cam", top_k=3)
    for images, label in data:
        records = explain_cameras(model, images, EVIDENCE_CLASS, targets)
        by_batch = by_batch.update(records, label.tolist())
    for a, b in zip(whole.accumulators, by_batch.accumulators, strict=True):
        np.testing.assert_allclose(a.map_sum, b.map_sum, rtol=1e-12)
        np.testing.assert_array_equal(a.histogram, b.histogram)
        assert [s.sample_id for s in a.least] == [s.sample_id for s in b.least]
    finished = whole.finish()
    by_class = {(s.camera_key, s.class_index): s.count for s in finished}
    assert by_class[("rgb", None)] == 8 and by_class[("rgb", 0)] == 2 and by_class[("rgb", 1)] == 6
    with pytest.raises(FrozenInstanceError):
        whole.samples = 0  # type: ignore[misc]
    with pytest.raises(ValueError, match="cannot merge an aggregate of 'grad_cam' \\(bins=32"):
        AttributionAggregate("ablation_cam").merge(whole)


def test_each_sample_explains_its_own_class_by_default() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    images = make_camera_images(3, evidence=EVIDENCE, seed=2)
    with torch.no_grad():
        predicted = model(images).argmax(dim=1)

    def own_class(out: torch.Tensor) -> torch.Tensor:
        # Ablation-CAM scores the batch repeated r times (Tensor.repeat order).
        return out.gather(1, predicted.repeat(len(out) // 3)[:, None])[:, 0]

    for method in ("grad_cam", "ablation_cam"):
        aggregate = aggregate_attributions(model, [images], model.camera_targets(), method=method)
        assert {a.class_index for a in aggregate.accumulators} == set(predicted.tolist())
        own = explain_cameras(model, images, own_class, model.camera_targets(), method=method)
        stats = {s.camera_key: s for s in aggregate.finish() if s.class_index is None}
        expected = np.mean([r.raw_map for r in own if r.camera_key == "rgb"], axis=0)
        np.testing.assert_allclose(stats["rgb"].mean_map, expected, rtol=1e-5, atol=1e-9)


def test_aggregation_input_errors() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    with pytest.raises(TypeError, match="pass batch_images=fn"):
        aggregate_attributions(model, [torch.zeros(1)], model.camera_targets())
    with pytest.raises(ValueError, match="Unknown attribution method 'lime'"):
        AttributionAggregate("lime")
    with pytest.raises(ValueError, match="bins must be >= 2"):
        AttributionAggregate("grad_cam", bins=1)


# -- camera reliance -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["dedicated_layer", "per_camera_call", "stacked_camera_batch"])
@pytest.mark.parametrize("camera", list(CAMERA_KEYS))
def test_reliance_ranks_the_camera_with_planted_evidence_first(mode: str, camera: str) -> None:
    model = MultiCameraDemoModel(mode)
    images = make_camera_images(3, evidence={camera: EVIDENCE[camera]}, seed=4)
    reliance = camera_reliance(model, images, EVIDENCE_CLASS)
    assert reliance.ranking()[0] == camera
    # Per sample, the drop is the score minus the score with that camera zeroed.
    with torch.no_grad():
        base = model(images)[:, EVIDENCE_CLASS].double()
        zeroed = model({**images, camera: torch.zeros_like(images[camera])})[:, EVIDENCE_CLASS]
    column = list(reliance.camera_keys).index(camera)
    np.testing.assert_allclose(reliance.scores, base.numpy(), rtol=1e-6)
    np.testing.assert_allclose(reliance.drops[:, column], (base - zeroed).numpy(), atol=1e-6)
    others = np.delete(reliance.drops, column, axis=1)
    assert (reliance.drops[:, column] > 0.2).all() and (np.abs(others) < 0.05).all()


def test_reliance_over_a_slice_with_each_baseline() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    model.train()
    dataset = CameraSamples(8, {"slam-right": EVIDENCE["slam-right"]})
    loader = DataLoader(dataset, batch_size=3)
    zeros = camera_reliance_over(model, loader, EVIDENCE_CLASS)
    assert zeros.count == 8 and zeros.ranking()[0] == "slam-right"
    assert model.training  # flags restored
    means = camera_image_means(loader)
    assert means["rgb"].shape == (3, 96, 96)
    expected_mean = dataset.images["rgb"].mean(dim=0)
    assert torch.allclose(means["rgb"], expected_mean, atol=1e-6)
    by_mean = camera_reliance_over(model, loader, EVIDENCE_CLASS, baseline="mean")
    by_mapping = camera_reliance_over(model, loader, EVIDENCE_CLASS, baseline=means)
    np.testing.assert_allclose(by_mean.mean, by_mapping.mean)  # type: ignore[arg-type]
    # Every sample has its blob at the same place, so the mean image keeps it: replacing
    # slam-right by the mean removes far less evidence than replacing it by zeros.
    column = zeros.camera_keys.index("slam-right")
    assert abs(by_mean.mean[0, column]) < 0.5 * zeros.mean[0, column]  # type: ignore[index]

    def blurred(_camera: str, images: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(images, 9, stride=1, padding=4)

    assert camera_reliance_over(model, loader, EVIDENCE_CLASS, baseline=blurred).ranking()[0] == (
        "slam-right"
    )
    # Two halves merged equal one pass.
    batches = list(loader)
    halves = [
        camera_reliance_over(model, part, EVIDENCE_CLASS) for part in (batches[:1], batches[1:])
    ]
    merged = pickle.loads(pickle.dumps(halves[0])).merge(halves[1])
    assert merged.count == 8
    np.testing.assert_allclose(merged.mean, zeros.mean)  # type: ignore[arg-type]
    np.testing.assert_allclose(merged.m2, zeros.m2, atol=1e-12)  # type: ignore[arg-type]
    stats = merged.finish()
    assert stats[0].camera_key == "slam-right" and stats[0].std_drop >= 0
    single = camera_reliance(model, batches[0], EVIDENCE_CLASS)
    assert RelianceSummary(single.camera_keys).update(single).count == 3


def test_reliance_errors() -> None:
    model = MultiCameraDemoModel("dedicated_layer")
    images = make_camera_images(2)
    generator: Any = (batch for batch in [images])
    with pytest.raises(ValueError, match="one-shot iterator"):
        camera_reliance_over(model, generator, 0, baseline="mean")
    with pytest.raises(ValueError, match="baseline='median' is not one of"):
        camera_reliance_over(model, [images], 0, baseline="median")
    with pytest.raises(ValueError, match="no image for camera 'rgb'"):
        camera_reliance(model, images, 0, baseline={"slam-left": torch.zeros(1, 80, 64)})
    with pytest.raises(ValueError, match=r"baseline for camera 'rgb' has shape \(2, 5\)"):
        camera_reliance(model, images, 0, baseline=lambda _c, _x: torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"cameras \['depth'\] have no images"):
        camera_reliance(model, images, 0, cameras=["depth"])
    with pytest.raises(ValueError, match="score=9 is not a class index"):
        camera_reliance(model, images, 9)
