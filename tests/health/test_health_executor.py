"""collect_activation_stats on executors: equal (==) to the same call in process, on a
process pool and on a Dask LocalCluster; every hook removed; clear errors."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading

import pytest
import torch
from health_models import StatsNet, load_stats_shard, run_scaled, stats_batch

from vinlens.health import ActivationStats, collect_activation_stats
from vinlens.hooks import leftover_hooks
from vinlens.operations import CancelToken, OperationCancelled
from vinlens.workers import ModelRecipe, ShardedBatches

SHARDS = ShardedBatches(load_stats_shard, 4)


def _recipe() -> ModelRecipe:
    live = StatsNet(width=5, seed=3)
    with torch.no_grad():  # weights that differ from the seeded constructor's: they must travel
        live.head[2].weight.mul_(1.5)
    return ModelRecipe.from_model(live.eval(), StatsNet, {"width": 5, "seed": 3})


def _assert_equal(a: ActivationStats, b: ActivationStats) -> None:
    assert list(a.modules) == list(b.modules)
    for path in a.modules:
        assert a.modules[path] == b.modules[path], path
    assert a.batches == b.batches
    assert dict(a.modules) == dict(b.modules)


def test_in_process_recipe_equals_the_live_model_shard_by_shard() -> None:
    recipe = _recipe()
    here = collect_activation_stats(recipe, SHARDS)
    live = recipe.build()
    with torch.no_grad():
        direct = collect_activation_stats(live, SHARDS)
    _assert_equal(here, direct)
    assert here.batches == 12
    assert leftover_hooks(live.modules()) == []
    # A plain list is one batch a shard, with a recipe or a live model alike.
    batches = [stats_batch(i) for i in range(5)]
    with torch.no_grad():
        _assert_equal(
            collect_activation_stats(recipe, batches), collect_activation_stats(live, batches)
        )
        _assert_equal(
            collect_activation_stats(live, batches), collect_activation_stats(live, iter(batches))
        )


def test_process_pool_equals_in_process() -> None:
    recipe = _recipe()
    here = collect_activation_stats(
        recipe, SHARDS, run_scaled, module_paths=["stem.0", "act", "head"]
    )
    seen: list[tuple[int, int]] = []
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn) as pool:
        there = collect_activation_stats(
            recipe,
            SHARDS,
            run_scaled,
            module_paths=["stem.0", "act", "head"],
            executor=pool,
            progress=lambda done, total: seen.append((done, total)),
        )
        batches = [stats_batch(i) for i in range(3)]
        listed = collect_activation_stats(recipe, batches, executor=pool)
    _assert_equal(here, there)
    assert list(there.modules) == ["stem.0", "act", "head"]
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    _assert_equal(listed, collect_activation_stats(recipe, batches))


def test_dask_local_cluster_equals_in_process() -> None:
    distributed = pytest.importorskip("distributed")
    recipe = _recipe()
    here = collect_activation_stats(recipe, SHARDS)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        there = collect_activation_stats(recipe, SHARDS, executor=client.get_executor())
    _assert_equal(here, there)


def test_executor_needs_a_recipe_and_picklable_parts() -> None:
    live = StatsNet()
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(TypeError, match=r"pass a vinlens\.workers\.ModelRecipe"),
    ):
        collect_activation_stats(live, SHARDS, executor=pool)
    assert leftover_hooks(live.modules()) == []
    fork = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    with fork, pytest.raises(ValueError, match=r"forks its workers.*get_context\('spawn'\)"):
        collect_activation_stats(_recipe(), SHARDS, executor=fork)
    with pytest.raises(TypeError, match="executor must be None"):
        collect_activation_stats(_recipe(), SHARDS, executor="process")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot be split across workers"):
        collect_activation_stats(_recipe(), (stats_batch(i) for i in range(2)))
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(TypeError, match="cannot be sent to a worker"),
    ):
        collect_activation_stats(_recipe(), SHARDS, lambda m, b: m(b), executor=pool)


def test_unknown_path_on_a_worker_is_the_same_value_error() -> None:
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(ValueError, match="unknown module path"),
    ):
        collect_activation_stats(_recipe(), SHARDS, module_paths=["nope"], executor=pool)


def test_cancel_between_batches_leaves_no_hook() -> None:
    live = StatsNet()
    token = CancelToken()
    count = [0]

    def run(model: torch.nn.Module, batch: torch.Tensor) -> object:
        count[0] += 1
        if count[0] == 2:
            token.cancel()
        return model(batch)

    with pytest.raises(OperationCancelled):
        collect_activation_stats(live, SHARDS, run, cancel=token)
    assert count[0] == 2
    assert leftover_hooks(live.modules()) == []
    event = threading.Event()
    event.set()
    with pytest.raises(OperationCancelled):
        collect_activation_stats(_recipe(), SHARDS, cancel=event)
