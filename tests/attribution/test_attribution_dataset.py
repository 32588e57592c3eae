"""The dataset operation: one fold in process, on a process pool and on a Dask cluster.

Also the attribution faults of the third hostile round: NaN maps, bad labels, the
reliance record's classes, the mean baseline over one-shot and shuffled loaders, and a
cancel during the mean pass.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vinlens.attribution import (
    DatasetExplanation,
    aggregate_attributions,
    camera_reliance,
    camera_reliance_over,
    explain_dataset,
)
from vinlens.attribution.aggregate import camera_image_means
from vinlens.demo import CAMERA_KEYS, EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
from vinlens.operations import CancelToken, OperationCancelled
from vinlens.workers import ModelRecipe, ShardedBatches

EVIDENCE = {"rgb": (30, 62), "slam-left": (56, 20), "slam-right": (22, 44)}


def demo_batches(count: int = 3, size: int = 2) -> list[dict[str, torch.Tensor]]:
    return [make_camera_images(size, evidence=EVIDENCE, seed=20 + i) for i in range(count)]


def demo_model() -> MultiCameraDemoModel:
    """Top level, so a worker can build it by name."""
    return MultiCameraDemoModel("dedicated_layer", seed=3)


def _run_all(model: Any, batches: Any, executor: Any) -> tuple[Any, Any, DatasetExplanation]:
    targets = demo_model().camera_targets()
    aggregate = aggregate_attributions(
        model, batches, targets, score=EVIDENCE_CLASS, executor=executor
    )
    reliance = camera_reliance_over(
        model, batches, EVIDENCE_CLASS, baseline="mean", executor=executor
    )
    record = explain_dataset(
        model,
        batches,
        targets,
        score=EVIDENCE_CLASS,
        baseline="mean",
        keep_samples=3,
        executor=executor,
    )
    return aggregate, reliance, record


@pytest.fixture(scope="module")
def in_process() -> tuple[Any, Any, DatasetExplanation]:
    recipe = ModelRecipe(demo_model)
    return _run_all(recipe, ShardedBatches.from_sequence(demo_batches()), None)


def test_in_process_record_is_the_engines_statistics(
    in_process: tuple[Any, Any, DatasetExplanation],
) -> None:
    aggregate, reliance, record = in_process
    assert record.samples == 6 and record.batches == 3 and record.baseline == "mean"
    assert record.aggregate == aggregate
    assert record.reliance == reliance
    assert record.map_statistics == aggregate.finish((50.0, 90.0))
    assert record.reliance_statistics == reliance.finish()
    assert [s.sample_id for s in record.kept] == [0, 1, 2]
    assert [s.label for s in record.kept] == ["batch 0 #0", "batch 0 #1", "batch 1 #0"]
    first = demo_batches()[1]["rgb"][0:1]
    assert torch.equal(record.kept[2].images["rgb"], first)
    # Sample ids run on across shards: every kept top-k id is a global position.
    ids = {s.sample_id for m in record.map_statistics for s in m.most_concentrated}
    assert ids <= set(range(6)) and max(ids) >= 2


def test_process_pool_equals_in_process(in_process: tuple[Any, Any, DatasetExplanation]) -> None:
    recipe = ModelRecipe(demo_model)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        remote = _run_all(recipe, demo_batches(), pool)  # a list: one batch a shard
    assert remote == in_process


def test_dask_local_cluster_equals_in_process(
    in_process: tuple[Any, Any, DatasetExplanation],
) -> None:
    distributed = pytest.importorskip("distributed")
    recipe = ModelRecipe(demo_model)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        remote = _run_all(
            recipe, ShardedBatches.from_sequence(demo_batches()), client.get_executor()
        )
    assert remote == in_process


def test_a_loader_read_here_gives_the_shards_statistics() -> None:
    model = demo_model()
    targets = model.camera_targets()
    batches = demo_batches()
    streamed = aggregate_attributions(model, iter(batches), targets, score=EVIDENCE_CLASS)
    sharded = aggregate_attributions(
        model, ShardedBatches.from_sequence(batches), targets, score=EVIDENCE_CLASS
    )
    # Same samples, ids, histograms and kept maps; the float sums differ only by grouping.
    assert streamed.samples == sharded.samples == 6
    for a, b in zip(streamed.accumulators, sharded.accumulators, strict=True):
        assert (a.camera_key, a.class_index, a.count) == (b.camera_key, b.class_index, b.count)
        np.testing.assert_array_equal(a.histogram, b.histogram)
        np.testing.assert_allclose(a.map_sum, b.map_sum, rtol=1e-12)
        assert a.most == b.most and a.least == b.least
    assert streamed != aggregate_attributions(model, batches[:2], targets, score=EVIDENCE_CLASS)


def test_executor_needs_a_recipe_and_splittable_batches() -> None:
    model = demo_model()
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(TypeError, match="ModelRecipe"),
    ):
        aggregate_attributions(model, demo_batches(), model.camera_targets(), executor=pool)
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(TypeError, match="ShardedBatches"),
    ):
        aggregate_attributions(
            ModelRecipe(demo_model), iter(demo_batches()), model.camera_targets(), executor=pool
        )
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor"):
        aggregate_attributions(model, demo_batches(), model.camera_targets(), executor="process")  # type: ignore[arg-type]


def test_progress_is_done_and_total_and_a_one_argument_callable_still_works() -> None:
    model = demo_model()
    seen: list[tuple[int, int]] = []
    aggregate_attributions(
        model,
        demo_batches(),
        model.camera_targets(),
        score=EVIDENCE_CLASS,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]
    old: list[int] = []
    aggregate_attributions(
        model, demo_batches(2), model.camera_targets(), score=EVIDENCE_CLASS, progress=old.append
    )
    assert old == [1, 2]


def test_cancel_stops_between_batches() -> None:
    model = demo_model()
    token = CancelToken()
    read: list[int] = []

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        for i, batch in enumerate(demo_batches(5)):
            read.append(i)
            yield batch

    def progress(done: int, total: int) -> None:
        if done == 2:
            token.cancel()

    with pytest.raises(OperationCancelled):
        aggregate_attributions(
            model, batches(), model.camera_targets(), progress=progress, cancel=token
        )
    assert read == [0, 1]


# -- class 6: attribution faults -------------------------------------------------------------


def test_a_nan_map_is_counted_and_left_out_not_a_crash() -> None:
    model = demo_model()

    def poison(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        out = output.clone()
        out[1, 0, 1, 1] = float("nan")  # one NaN pixel in sample 1's rgb activation
        return out

    handle = model.encoders["rgb"].conv3.register_forward_hook(poison)
    try:
        aggregate = aggregate_attributions(
            model, demo_batches(1, size=3), model.camera_targets(), score=EVIDENCE_CLASS
        )
    finally:
        handle.remove()
    stats = aggregate.finish()
    rgb = next(s for s in stats if s.camera_key == "rgb" and s.class_index is None)
    assert rgb.nonfinite_count == 1 and rgb.count == 2
    assert np.isfinite(rgb.mean_map).all()
    assert 1 not in {s.sample_id for s in (*rgb.most_concentrated, *rgb.least_concentrated)}
    assert aggregate.nonfinite_maps >= 1
    record = explain_dataset(
        model, demo_batches(1, size=2), model.camera_targets(), score=EVIDENCE_CLASS
    )
    assert record.nonfinite_maps == 0


@pytest.mark.parametrize(
    ("labels", "error", "match"),
    [
        (torch.tensor([99, 0]), ValueError, r"label 99 is not a class index .* \d+ classes"),
        (torch.tensor([-1, 0]), ValueError, "label -1 is not a class index"),
        (torch.tensor([0.0, 1.0]), TypeError, "integer tensor of class indices"),
        (torch.tensor([0, 1, 2]), ValueError, "3 labels for a model output of 2 samples"),
    ],
)
def test_bad_labels_are_named_before_a_gather(
    labels: torch.Tensor, error: type[Exception], match: str
) -> None:
    model = demo_model()
    batch = [(make_camera_images(2, seed=1), labels)]
    with pytest.raises(error, match=match):
        aggregate_attributions(model, batch, model.camera_targets())
    with pytest.raises(error, match=match):
        camera_reliance(model, batch[0][0], labels=labels)


def test_reliance_classes_are_the_class_whose_score_was_measured() -> None:
    model = demo_model()
    images = make_camera_images(3, seed=2)
    assert camera_reliance(model, images, 2).classes == (2, 2, 2)
    labels = torch.tensor([1, 0, 2])
    assert camera_reliance(model, images, labels=labels).classes == (1, 0, 2)
    predicted = tuple(int(c) for c in model(images).argmax(dim=1))
    assert camera_reliance(model, images).classes == predicted
    assert camera_reliance(model, images, lambda out: out[:, 0]).classes is None


# -- class 7: the mean baseline --------------------------------------------------------------


class Samples(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, count: int) -> None:
        self.images = make_camera_images(count, evidence=EVIDENCE, seed=5)

    def __len__(self) -> int:
        return int(self.images["rgb"].shape[0])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[index] for key, value in self.images.items()}


def test_mean_baseline_refuses_a_generator_before_reading_it() -> None:
    model = demo_model()
    read: list[int] = []

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        for i, batch in enumerate(demo_batches(3)):
            read.append(i)
            yield batch

    with pytest.raises(ValueError, match="max_batches"):
        explain_dataset(model, batches(), model.camera_targets(), baseline="mean")
    assert read == []
    loader = DataLoader(Samples(8), batch_size=2, shuffle=True)
    with pytest.raises(ValueError, match="shuffled DataLoader"):
        camera_reliance_over(model, loader, baseline="mean")


def test_mean_baseline_comes_from_the_batches_explained() -> None:
    model = demo_model()
    batches = demo_batches(4)
    read: list[int] = []

    def generator() -> Iterator[dict[str, torch.Tensor]]:
        for i, batch in enumerate(batches):
            read.append(i)
            yield batch

    steps: list[tuple[int, int]] = []
    record = explain_dataset(
        model,
        generator(),
        model.camera_targets(),
        score=EVIDENCE_CLASS,
        baseline="mean",
        max_batches=2,
        progress=lambda done, total: steps.append((done, total)),
    )
    assert read == [0, 1] and record.batches == 2 and record.baseline == "mean"
    # The mean pass counts first: 2 batches read, then 2 explained.
    assert steps[-1] == (4, 4) and (2, 4) in steps
    means = camera_image_means(batches[:2])
    expected = camera_reliance_over(model, batches[:2], EVIDENCE_CLASS, baseline=means)
    assert record.reliance == expected
    # A shuffled loader with max_batches: the held batches serve both passes.
    loader = DataLoader(Samples(8), batch_size=2, shuffle=True)
    shuffled = explain_dataset(
        model, loader, model.camera_targets(), score=EVIDENCE_CLASS, baseline="mean", max_batches=2
    )
    assert shuffled.samples == 4


def test_cancel_during_the_mean_pass_stops_reading_the_loader() -> None:
    model = demo_model()
    read: list[int] = []
    event = threading.Event()

    class Loader:
        """Re-iterable, with a length, slow enough that the cancel lands mid-pass."""

        def __len__(self) -> int:
            return 50

        def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
            for i in range(50):
                read.append(i)
                if i == 2:
                    event.set()  # the caller cancels now
                yield make_camera_images(1, seed=i)

    def progress(done: int, total: int) -> None:
        if event.is_set():
            token.cancel()

    token = CancelToken()
    with pytest.raises(OperationCancelled):
        explain_dataset(
            model,
            Loader(),
            model.camera_targets(),
            score=EVIDENCE_CLASS,
            baseline="mean",
            progress=progress,
            cancel=token,
        )
    assert len(read) <= 4, read  # stopped within a batch of the cancel, not 50


def test_explain_dataset_argument_errors() -> None:
    model = demo_model()
    targets = model.camera_targets()
    with pytest.raises(ValueError, match="max_batches"):
        explain_dataset(model, demo_batches(), targets, max_batches=0)
    with pytest.raises(ValueError, match="percentiles"):
        explain_dataset(model, demo_batches(), targets, percentiles=(120,))
    with pytest.raises(ValueError, match="baseline='median'"):
        explain_dataset(model, demo_batches(), targets, baseline="median")
    with pytest.raises(ValueError, match="empty"):
        explain_dataset(model, [], targets)
    with pytest.raises(TypeError, match=r"nn\.Module or a vinlens\.workers\.ModelRecipe"):
        explain_dataset("model", demo_batches(), targets)  # type: ignore[arg-type]
    assert CAMERA_KEYS
