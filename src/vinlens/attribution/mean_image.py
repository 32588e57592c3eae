"""The per-camera mean image of a data slice, and the reliance baseline built from it.

:func:`camera_image_means` folds float64 sums per camera over the batches (one pass,
memory of one image per camera); :func:`resolve_baseline` turns ``baseline="mean"``
into that mapping before the batches are explained, holding or refusing batches that
cannot be read twice.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from vinlens.attribution._fold import (
    as_shards,
    is_one_shot,
    is_shuffled,
    length_of,
    limited,
    progress_of,
)
from vinlens.attribution.batches import BatchImages
from vinlens.attribution.partials import _MeanAccumulator
from vinlens.attribution.reliance import RELIANCE_BASELINES, Baseline
from vinlens.operations import (
    CancelToken,
    ProgressCallback,
    as_cancel_token,
    check_executor,
    run_operation,
)
from vinlens.workers import ShardedBatches

__all__ = ["camera_image_means"]


@dataclass(frozen=True, eq=False)
class _MeanShard:
    source: ShardedBatches
    shard: int
    batch_images: BatchImages | None


def _run_mean_shard(task: _MeanShard) -> _MeanAccumulator:
    result = _MeanAccumulator(task.batch_images)
    for batch in task.source.batches(task.shard):
        result.merge(_MeanAccumulator(task.batch_images).update(batch))
    return result


def camera_image_means(
    batches: Iterable[Any] | ShardedBatches,
    *,
    batch_images: BatchImages | None = None,
    executor: concurrent.futures.Executor | None = None,
    progress: Callable[..., None] | None = None,
    cancel: CancelToken | threading.Event | None = None,
    max_batches: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-camera mean image ``[C, H, W]`` (float64 sums, one pass, memory of one image each).

    ``executor``, ``progress`` and ``cancel`` as in the module docstring; ``max_batches``
    reads at most that many batches of an iterable.
    """
    token = as_cancel_token(cancel)
    report = progress_of(progress)
    pool = check_executor(executor)
    if pool is not None or isinstance(batches, ShardedBatches):
        sharded = as_shards(batches, pool)
        tasks = [_MeanShard(sharded.for_shard(i), i, batch_images) for i in range(sharded.count)]
        folded = run_operation(
            tasks,
            _run_mean_shard,
            start=lambda: _MeanAccumulator(batch_images),
            executor=pool,
            progress=report,
            cancel=token,
        )
        return folded.finish()
    result = _MeanAccumulator(batch_images)
    length = length_of(batches)
    total = length if max_batches is None or length is None else min(length, max_batches)
    for done, batch in enumerate(limited(batches, max_batches, token), start=1):
        result.merge(_MeanAccumulator(batch_images).update(batch))
        if report is not None:
            report(done, total or 0)
    return result.finish()


def resolve_baseline(
    baseline: Baseline,
    batches: Iterable[Any] | ShardedBatches,
    *,
    batch_images: BatchImages | None,
    executor: concurrent.futures.Executor | None,
    progress: ProgressCallback | None,
    cancel: CancelToken | None,
    max_batches: int | None,
    total: int,
) -> tuple[Baseline, Iterable[Any] | ShardedBatches]:
    """The baseline to send to every batch, and the batches to explain after it.

    ``"mean"`` reads the batches once for the mean image. A one-shot iterator cannot be
    read twice: with ``max_batches`` its first batches are held (once) and both passes
    read them, so the mean comes from the batches explained; without, it is refused
    before a batch is read. A shuffled ``DataLoader`` would give other batches the
    second time, so it is held the same way (or refused).
    """
    if isinstance(baseline, str) and baseline not in RELIANCE_BASELINES:
        raise ValueError(
            f"baseline={baseline!r} is not one of {list(RELIANCE_BASELINES)}, a mapping or a "
            "callable."
        )
    if not (isinstance(baseline, str) and baseline == "mean"):
        return baseline, batches
    local = not isinstance(batches, ShardedBatches) and executor is None
    if not isinstance(batches, ShardedBatches) and executor is None and max_batches is not None:
        # The first max_batches batches are held once and read by both passes, so the mean
        # comes from exactly the batches explained (whatever the loader gives next time).
        held: list[Any] = []
        for batch in limited(batches, max_batches, cancel):
            held.append(batch)
            if progress is not None:
                progress(len(held), total)
        return camera_image_means(held, batch_images=batch_images, cancel=cancel), held
    if (
        not isinstance(batches, ShardedBatches)
        and (is_one_shot(batches) or is_shuffled(batches))
        and local
    ):
        what = "a one-shot iterator" if is_one_shot(batches) else "a shuffled DataLoader"
        raise ValueError(
            f"baseline='mean' reads the batches twice (the mean image, then the maps), but "
            f"they are {what}, which gives other batches (or none) the second time; pass "
            "max_batches=n (those n batches are held and read twice), a list or an "
            "unshuffled DataLoader, or a mapping from camera_image_means()."
        )

    def mean_progress(done: int, _total: int) -> None:
        if progress is not None:
            progress(done, total)

    means = camera_image_means(
        batches,
        batch_images=batch_images,
        executor=executor,
        progress=mean_progress,
        cancel=cancel,
        max_batches=None if isinstance(batches, ShardedBatches) else max_batches,
    )
    return means, batches


def baseline_label(baseline: Baseline) -> str:
    return baseline if isinstance(baseline, str) else type(baseline).__name__
