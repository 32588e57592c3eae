"""ModelRecipe: the per-thread model cache follows the recipe's content, built models do not
outlive an in-process call on the caller's thread, an unpicklable factory names itself."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import multiprocessing
import threading
import weakref

import pytest
import torch
from health_models import StatsNet, load_stats_shard

from vinlens.health import ActivationStats, collect_activation_stats
from vinlens.workers import ModelRecipe, ShardedBatches

SHARDS = ShardedBatches(load_stats_shard, 2)


def _assert_equal(a: ActivationStats, b: ActivationStats) -> None:
    assert list(a.modules) == list(b.modules)
    for path in a.modules:
        assert a.modules[path] == b.modules[path], path


def _recipe(scale: float) -> ModelRecipe:
    live = StatsNet(width=5, seed=3)
    with torch.no_grad():
        live.head[2].weight.mul_(scale)
    return ModelRecipe.from_model(live.eval(), StatsNet, {"width": 5, "seed": 3})


def test_replaced_state_dict_gives_the_new_weights_in_process_and_on_a_pool() -> None:
    old = _recipe(1.5)
    new_state = _recipe(-3.0).state_dict
    new = dataclasses.replace(old, state_dict=new_state)
    assert new.token == old.token  # the token travels; the content differs
    first = collect_activation_stats(old, SHARDS)
    here = collect_activation_stats(new, SHARDS)
    assert here.modules["head"] != first.modules["head"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        _assert_equal(collect_activation_stats(old, SHARDS, executor=pool), first)
        _assert_equal(collect_activation_stats(new, SHARDS, executor=pool), here)
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        _assert_equal(collect_activation_stats(new, SHARDS, executor=pool), here)
    built = new.build()
    with torch.no_grad():
        _assert_equal(collect_activation_stats(built, SHARDS), here)


def test_same_content_reuses_one_build_per_thread() -> None:
    recipe = _recipe(1.5)
    assert recipe.model() is recipe.model()
    twin = ModelRecipe(recipe.factory, recipe.kwargs, recipe.state_dict)
    assert twin.content_digest() == recipe.content_digest()
    assert twin.model() is recipe.model()
    other = dataclasses.replace(recipe, kwargs={"width": 5, "seed": 4}, state_dict=None)
    assert other.content_digest() != recipe.content_digest()


def test_the_built_model_does_not_outlive_an_in_process_call() -> None:
    recipe = _recipe(1.25)  # content no other test caches on this thread
    built: list[weakref.ref[torch.nn.Module]] = []
    original = ModelRecipe.build

    def tracking_build(self: ModelRecipe) -> torch.nn.Module:
        model = original(self)
        built.append(weakref.ref(model))
        return model

    ModelRecipe.build = tracking_build  # type: ignore[method-assign]
    try:
        collect_activation_stats(recipe, SHARDS)
        collect_activation_stats(recipe, [SHARDS.load(0)[0]])
    finally:
        ModelRecipe.build = original  # type: ignore[method-assign]
    gc.collect()
    assert built and all(ref() is None for ref in built)


class LockedFactory:
    """A callable factory holding a lock: it does not pickle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, **kwargs: object) -> torch.nn.Module:
        return StatsNet(width=5, seed=3)


def test_an_unpicklable_factory_on_a_spawn_pool_names_recipe_and_factory() -> None:
    recipe = ModelRecipe(LockedFactory())
    spawn = multiprocessing.get_context("spawn")
    with (
        concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool,
        pytest.raises(TypeError, match=r"ModelRecipe\(factory=.*LockedFactory.*does not pickle"),
    ):
        collect_activation_stats(recipe, SHARDS, executor=pool)
