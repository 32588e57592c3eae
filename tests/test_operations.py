"""The one operation shape: fold order, executors, progress, cancel, executor checks, recipes."""

from __future__ import annotations

import concurrent.futures
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from vinlens.operations import (
    Accumulator,
    CancelToken,
    OperationCancelled,
    as_cancel_token,
    chan_merge,
    check_executor,
    executor_workers,
    run_operation,
)
from vinlens.workers import ModelRecipe, ShardedBatches, as_sharded_batches


@dataclass
class Moments:
    """A real accumulator of float values: count, mean, M2 and the order values arrived in."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    order: list[int] = field(default_factory=list)

    def update(self, value: float) -> Moments:
        mean, m2 = chan_merge(self.count, self.mean, self.m2, 1, float(value), 0.0)
        self.count, self.mean, self.m2 = self.count + 1, mean, m2
        return self

    def merge(self, other: Moments) -> Moments:
        self.mean, self.m2 = chan_merge(
            self.count, self.mean, self.m2, other.count, other.mean, other.m2
        )
        self.count += other.count
        self.order.extend(other.order)
        return self

    def finish(self) -> tuple[int, float, float]:
        return self.count, self.mean, self.m2


def task_partial(task: tuple[int, list[float]]) -> Moments:
    index, values = task
    part = Moments(order=[index])
    for value in values:
        part.update(value)
    # Later tasks finish first on a pool, so completion order differs from task order.
    time.sleep(0.002 * (8 - index % 8))
    return part


def slow_partial(task: tuple[int, list[float]]) -> Moments:
    time.sleep(0.05)
    return task_partial(task)


def failing_partial(task: tuple[int, list[float]]) -> Moments:
    if task[0] == 3:
        raise ValueError("task 3 broke")
    return task_partial(task)


def _tasks(n: int = 24) -> list[tuple[int, list[float]]]:
    rng = np.random.default_rng(7)
    return [(i, rng.normal(1e3, 1.0, size=int(rng.integers(1, 40))).tolist()) for i in range(n)]


def test_accumulator_protocol_is_runtime_checkable() -> None:
    assert isinstance(Moments(), Accumulator)


def test_in_process_thread_and_process_pool_fold_identically_in_task_order() -> None:
    tasks = _tasks()
    local = run_operation(tasks, task_partial, start=Moments)
    assert local.order == list(range(len(tasks)))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        threaded = run_operation(tasks, task_partial, start=Moments, executor=pool, max_in_flight=3)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        processed = run_operation(tasks, task_partial, start=Moments, executor=pool)
    assert threaded == local
    assert processed == local
    # Oracle: numpy float64 over all values.
    values = np.concatenate([np.asarray(v) for _, v in tasks])
    count, mean, m2 = local.finish()
    assert count == values.size
    assert mean == pytest.approx(values.mean(), rel=1e-14)
    assert m2 == pytest.approx(((values - values.mean()) ** 2).sum(), rel=1e-9)


def test_fold_without_start_uses_first_partial_and_empty_needs_start() -> None:
    tasks = _tasks(5)
    assert run_operation(tasks, task_partial) == run_operation(tasks, task_partial, start=Moments)
    with pytest.raises(ValueError, match="no tasks"):
        run_operation([], task_partial)
    assert run_operation([], task_partial, start=Moments) == Moments()


def test_merge_never_mutates_other_and_known_partials_stay_intact() -> None:
    tasks = _tasks(6)
    cached = {2: task_partial(tasks[2]), 4: task_partial(tasks[4])}
    snapshot = {k: Moments(v.count, v.mean, v.m2, list(v.order)) for k, v in cached.items()}
    ran: list[int] = []

    def run(task: tuple[int, list[float]]) -> Moments:
        ran.append(task[0])
        return task_partial(task)

    calls: list[tuple[int, int]] = []
    result = run_operation(
        tasks,
        run,
        start=Moments,
        known=lambda task: cached.get(task[0]),
        progress=lambda d, t: calls.append((d, t)),
    )
    assert ran == [0, 1, 3, 5]
    assert result == run_operation(tasks, task_partial, start=Moments)
    assert cached == snapshot
    # Known tasks count as done at once, after the (0, total) call.
    assert calls[:2] == [(0, 6), (2, 6)]
    assert calls[-1] == (6, 6)
    with pytest.raises(ValueError, match="start="):
        run_operation(tasks, task_partial, known=lambda task: None)


def test_progress_one_signature_weights_and_zero_weight_tasks() -> None:
    tasks = _tasks(8)
    calls: list[tuple[int, int]] = []
    weights = {i: (0 if i % 3 == 0 else len(v)) for i, v in tasks}
    total = sum(weights.values())
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        run_operation(
            tasks,
            task_partial,
            start=Moments,
            executor=pool,
            progress=lambda done, tot: calls.append((done, tot)),
            weight=lambda task: weights[task[0]],
        )
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    assert len(calls) == 1 + sum(1 for w in weights.values() if w)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert {t for _, t in calls} == {total}


def test_cancel_mid_run_leaves_nothing_pending_and_raises() -> None:
    tasks = _tasks(40)
    token = CancelToken()
    started: list[int] = []
    lock = threading.Lock()

    def run(task: tuple[int, list[float]]) -> Moments:
        with lock:
            started.append(task[0])
        return slow_partial(task)

    def progress(done: int, total: int) -> None:
        if done >= 3:
            token.cancel()

    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        with pytest.raises(OperationCancelled):
            run_operation(tasks, run, start=Moments, executor=pool, progress=progress, cancel=token)
        count_at_return = len(started)
        # Nothing of the operation runs or is queued once it raised.
        assert pool._work_queue.qsize() == 0
        time.sleep(0.2)
        assert len(started) == count_at_return
        assert count_at_return < len(tasks)
    finally:
        pool.shutdown(wait=True)


def test_cancel_from_another_thread_while_a_task_runs() -> None:
    event = threading.Event()
    tasks = _tasks(6)
    timer = threading.Timer(0.08, event.set)
    timer.start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        t0 = time.perf_counter()
        with pytest.raises(OperationCancelled):
            run_operation(tasks, slow_partial, start=Moments, executor=pool, cancel=event)
        assert time.perf_counter() - t0 < 0.3 * len(tasks)
    timer.join()


def test_cancel_in_process_before_and_between_tasks() -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(OperationCancelled):
        run_operation(_tasks(3), task_partial, start=Moments, cancel=token)
    token = CancelToken()
    ran: list[int] = []

    def run(task: tuple[int, list[float]]) -> Moments:
        ran.append(task[0])
        if task[0] == 1:
            token.cancel()
        return task_partial(task)

    with pytest.raises(OperationCancelled):
        run_operation(_tasks(5), run, start=Moments, cancel=token)
    assert ran == [0, 1]


def test_task_error_propagates_and_cancels_queued_tasks() -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with pytest.raises(ValueError, match="task 3 broke"):
            run_operation(_tasks(30), failing_partial, start=Moments, executor=pool)
        assert pool._work_queue.qsize() == 0
    with pytest.raises(ValueError, match="task 3 broke"):
        run_operation(_tasks(30), failing_partial, start=Moments)


def test_cancel_token_wraps_an_event() -> None:
    event = threading.Event()
    token = CancelToken(event)
    assert not token.cancelled
    token.raise_if_cancelled()
    event.set()
    assert token.cancelled
    with pytest.raises(OperationCancelled):
        token.raise_if_cancelled()
    assert as_cancel_token(event).event is event  # type: ignore[union-attr]
    assert as_cancel_token(None) is None
    with pytest.raises(TypeError, match=r"threading\.Event"):
        CancelToken("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cancel must be"):
        as_cancel_token(True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (42, "int 42"),
        ("process", "the string 'process'"),
        (concurrent.futures.ProcessPoolExecutor, "the class concurrent.futures.process"),
        (concurrent.futures.ThreadPoolExecutor, "ThreadPoolExecutor(max_workers=4)"),
    ],
)
def test_bad_executor_is_a_type_error_naming_what_is_accepted(bad: object, named: str) -> None:
    with pytest.raises(TypeError) as info:
        check_executor(bad)
    message = str(info.value)
    assert "concurrent.futures.Executor instance" in message
    assert named in message
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor instance"):
        run_operation(_tasks(2), task_partial, executor=bad)  # type: ignore[arg-type]


def test_good_executors_pass_the_check() -> None:
    assert check_executor(None) is None
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert check_executor(pool) is pool
        assert executor_workers(pool) == 3
    assert executor_workers(None) == 1


def test_chan_merge_scalars_and_arrays_do_not_mutate_inputs() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(5.0, 2.0, size=(7, 3))
    b = rng.normal(-1.0, 0.5, size=(11, 3))
    mean_a, m2_a = a.mean(0), ((a - a.mean(0)) ** 2).sum(0)
    mean_b, m2_b = b.mean(0), ((b - b.mean(0)) ** 2).sum(0)
    copies = [x.copy() for x in (mean_a, m2_a, mean_b, m2_b)]
    mean, m2 = chan_merge(7, mean_a, m2_a, 11, mean_b, m2_b)
    both = np.concatenate([a, b])
    np.testing.assert_allclose(mean, both.mean(0), rtol=1e-14)
    np.testing.assert_allclose(m2, ((both - both.mean(0)) ** 2).sum(0), rtol=1e-12)
    for before, after in zip(copies, (mean_a, m2_a, mean_b, m2_b), strict=True):
        np.testing.assert_array_equal(before, after)
    empty_mean, empty_m2 = chan_merge(0, np.zeros(3), np.zeros(3), 11, mean_b, m2_b)
    assert empty_mean is not mean_b
    np.testing.assert_array_equal(empty_mean, mean_b)
    np.testing.assert_array_equal(empty_m2, m2_b)
    assert chan_merge(3, 2.0, 8.0, 0, 0.0, 0.0) == (2.0, 8.0)
    assert chan_merge(1, 1.0, 0.0, 1, 3.0, 0.0) == (2.0, 2.0)


# --------------------------------------------------------------------------------------
# vinlens.workers
# --------------------------------------------------------------------------------------


class TinyNet(torch.nn.Module):
    def __init__(self, width: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.lin = torch.nn.Linear(3, width)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(width, 3, generator=generator))
            # the bias too: a recipe without a state dict must determine every weight (a
            # fork-started worker no longer inherits the caller's cached build)
            self.lin.bias.copy_(torch.randn(width, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


def load_shard(index: int) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(index)
    for _ in range(2):
        yield torch.randn(5, 3, generator=generator)


def shard_output_sum(task: tuple[ModelRecipe, ShardedBatches, int]) -> Moments:
    recipe, source, index = task
    model = recipe.model()
    part = Moments(order=[index])
    with torch.no_grad():
        for batch in source.batches(index):
            for value in model(batch).reshape(-1).tolist():
                part.update(value)
    return part


def test_model_recipe_builds_the_same_model_after_pickling() -> None:
    live = TinyNet(width=6, seed=1).eval()
    assert ModelRecipe.from_model(TinyNet(), TinyNet).build().training  # the live mode travels
    with torch.no_grad():
        live.lin.bias.fill_(0.25)
    recipe = ModelRecipe.from_model(live, TinyNet, {"width": 6})
    copy = pickle.loads(pickle.dumps(recipe))
    assert copy.token == recipe.token
    built = copy.build()
    assert not built.training
    for name, value in live.state_dict().items():
        torch.testing.assert_close(built.state_dict()[name], value, rtol=0, atol=0)
    # Training the live model later does not change what the recipe builds.
    with torch.no_grad():
        live.lin.bias.fill_(9.0)
    assert float(copy.build().lin.bias[0].detach()) == 0.25
    assert copy.model() is copy.model()
    assert copy.model() is not copy.build()


def test_model_recipe_refuses_what_cannot_reach_a_worker() -> None:
    with pytest.raises(TypeError, match="lambda"):
        ModelRecipe(lambda: TinyNet())

    def local_factory() -> TinyNet:
        return TinyNet()

    with pytest.raises(TypeError, match="nested function"):
        ModelRecipe(local_factory)
    with pytest.raises(TypeError, match="kwargs"):
        ModelRecipe(TinyNet, kwargs=[("width", 3)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        ModelRecipe(dict).build()
    with pytest.raises(TypeError, match="state_dict"):
        ModelRecipe(TinyNet, state_dict=[1, 2])  # type: ignore[arg-type]


def test_sharded_batches_sources() -> None:
    batches = [torch.full((2, 3), float(i)) for i in range(5)]
    source = ShardedBatches.from_sequence(batches, batches_per_shard=2)
    assert source.count == 3
    assert [len(list(source.batches(i))) for i in range(3)] == [2, 2, 1]
    copy = pickle.loads(pickle.dumps(source))
    assert float(next(copy.batches(2))[0, 0]) == 4.0
    assert as_sharded_batches(batches).count == 5
    assert as_sharded_batches(source) is source
    with pytest.raises(TypeError, match="iterator or data loader"):
        as_sharded_batches(iter(batches))  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of range"):
        source.batches(3)
    with pytest.raises(ValueError, match="count"):
        ShardedBatches(load_shard, -1)
    with pytest.raises(TypeError, match="lambda"):
        ShardedBatches(lambda i: [], 2)


def test_a_task_of_a_list_source_carries_only_its_own_batches() -> None:
    """With an executor every task is pickled: each must carry its shard, not the list."""
    batches = [torch.randn(64, 256) for _ in range(40)]  # 64 KiB each
    source = ShardedBatches.from_sequence(batches, batches_per_shard=4)
    whole = len(pickle.dumps(source))
    for index in range(source.count):
        task = pickle.loads(pickle.dumps(source.for_shard(index)))
        assert task.count == source.count
        got = list(task.batches(index))
        assert [torch.equal(a, b) for a, b in zip(got, batches[4 * index :], strict=False)] == [
            True
        ] * len(got)
        assert len(pickle.dumps(source.for_shard(index))) < whole / 8
        with pytest.raises(IndexError, match="carries shard"):
            list(task.batches((index + 1) % source.count))
    # A user's own load reads the shard on the worker: the source itself travels.
    own = ShardedBatches(load_shard, 6)
    assert own.for_shard(2) is own
    with pytest.raises(IndexError, match="out of range"):
        own.for_shard(6)


def test_model_side_operation_equal_in_process_and_on_a_process_pool() -> None:
    recipe = ModelRecipe(TinyNet, {"width": 5, "seed": 3})
    source = ShardedBatches(load_shard, 6)
    tasks = [(recipe, source, i) for i in range(source.count)]
    local = run_operation(tasks, shard_output_sum, start=Moments)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        remote = run_operation(tasks, shard_output_sum, start=Moments, executor=pool)
    assert remote == local
    assert local.count == 6 * 2 * 5 * 5
