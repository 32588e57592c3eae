"""collect_activation_stats: streaming equals the concatenation, memory does not grow."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from collections.abc import Iterator

import pytest
import torch
from health_models import assert_no_hooks, deep_model
from torch import nn

from vinlens.health import (
    ActivationAccumulator,
    ActivationStats,
    collect_activation_stats,
    find_nonfinite_origin,
)
from vinlens.model_inspection import ROOT_PATH, TensorSummary


def reference(tensor: torch.Tensor) -> TensorSummary:
    flat = tensor.detach().double().reshape(-1)
    finite = flat[torch.isfinite(flat)]
    return TensorSummary(
        flat.numel(),
        finite.mean().item(),
        finite.std(correction=0).item(),
        finite.min().item(),
        finite.max().item(),
        finite.abs().max().item(),
        (finite == 0).double().mean().item(),
        int(torch.isnan(flat).sum()),
        int((flat == math.inf).sum()),
        int((flat == -math.inf).sum()),
    )


def assert_close(got: TensorSummary, want: TensorSummary) -> None:
    for field in dataclasses.fields(TensorSummary):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if isinstance(b, int):
            assert a == b, field.name
        else:
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), field.name


def batches(count: int, seed: int = 0) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        yield torch.randn(4, 8, generator=generator) * 2 + 0.5


def test_fifty_batches_equal_the_summary_of_the_concatenated_outputs() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        stats = collect_activation_stats(model, batches(50))
        inputs = torch.cat(list(batches(50)))
        hidden = model[0](inputs)
        expected = {
            "0": hidden,
            "1": torch.relu(hidden),
            "2": model(inputs),
            ROOT_PATH: model(inputs),
        }
    assert isinstance(stats, ActivationStats) and stats.batches == 50
    assert list(stats.modules) == ["0", "1", "2", ROOT_PATH]  # order of first return
    for path, output in expected.items():
        assert_close(stats.modules[path], reference(output))
    assert stats.modules["1"].zero_fraction > 0.2  # ReLU zeros are counted
    assert_no_hooks(model)


def test_run_and_module_paths_and_a_model_called_twice_per_batch() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def run(m: nn.Module, batch: dict[str, torch.Tensor]) -> None:
        m(batch["left"])
        m(batch["right"])

    data = [{"left": torch.randn(2, 8), "right": torch.randn(3, 8)} for _ in range(5)]
    stats = collect_activation_stats(model, data, run=run, module_paths=["1"])
    assert list(stats.modules) == ["1"]
    with torch.no_grad():
        outputs = torch.cat([model(b[key]) for b in data for key in ("left", "right")])
    assert_close(stats.modules["1"], reference(outputs))


def test_accumulators_merge_like_one_stream() -> None:
    model = deep_model(depth=3)
    with torch.no_grad():
        whole = collect_activation_stats(model, batches(12))
        parts = []
        for seed_batches in (list(batches(12))[:5], list(batches(12))[5:]):
            accumulator = ActivationAccumulator()
            handles = [
                module.register_forward_hook(
                    lambda _m, _a, out, _p=(name or ROOT_PATH), acc=accumulator: (
                        acc.update(_p, out) and None
                    )
                )
                for name, module in model.named_modules()
            ]
            try:
                for batch in seed_batches:
                    model(batch)
                    accumulator.batches += 1
            finally:
                for handle in handles:
                    handle.remove()
            parts.append(accumulator)
    merged = parts[0].merge(parts[1]).finish()
    assert merged.batches == whole.batches == 12
    assert set(merged.modules) == set(whole.modules)
    for path, summary in whole.modules.items():
        assert_close(merged.modules[path], summary)
    with pytest.raises(TypeError, match="ActivationAccumulator"):
        parts[0].merge(whole)  # type: ignore[arg-type]


def test_memory_does_not_grow_with_the_batch_count() -> None:
    model = deep_model(depth=4)

    def peak(count: int) -> int:
        def stream() -> Iterator[torch.Tensor]:
            for _ in range(count):
                yield torch.randn(16, 8)

        tracemalloc.start()
        try:
            with torch.no_grad():
                collect_activation_stats(model, stream())
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(5)  # warm caches (type names, dtype strings)
    small, large = peak(10), peak(200)
    assert large < small * 1.5 + 64 * 1024, (small, large)


def test_hooks_removed_when_run_or_iterator_raises() -> None:
    model = deep_model(depth=2)

    def broken() -> Iterator[torch.Tensor]:
        yield torch.randn(2, 8)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        collect_activation_stats(model, broken())
    assert_no_hooks(model)
    with pytest.raises(RuntimeError):
        collect_activation_stats(model, [torch.randn(2, 3)])
    assert_no_hooks(model)
    with pytest.raises(TypeError, match="batches must be an iterable"):
        collect_activation_stats(model, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown module path"):
        collect_activation_stats(model, [], module_paths=["9"])


def test_accumulators_pickle_for_workers() -> None:
    import pickle

    model = deep_model(depth=2)
    with torch.no_grad():
        stats = collect_activation_stats(model, batches(3))
    accumulator = ActivationAccumulator()
    with torch.no_grad():
        accumulator.update("x", model(torch.randn(4, 8)))
    copy = pickle.loads(pickle.dumps(accumulator))
    assert copy.finish() == accumulator.finish()
    assert copy.update("x", torch.ones(2)).finish().modules["x"].count == 34
    assert stats.batches == 3


def test_a_module_with_its_own_hooks_is_observed_after_them() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    # The caller's own hook replaces the first layer's output: the statistics see what
    # the forward then used, and the caller's hook stays registered.
    handle = model[0].register_forward_hook(lambda _m, _a, out: out * 0 + 2)
    try:
        stats = collect_activation_stats(model, [torch.randn(4, 3) for _ in range(3)])
        assert stats.modules["0"].mean == 2.0 and stats.modules["0"].std == 0.0
        assert stats.modules["1"].min == 2.0
        assert len(model[0]._forward_hooks) == 1
    finally:
        handle.remove()
    assert_no_hooks(model)


def test_kwargs_reach_the_nan_origin_through_the_global_pre_hook() -> None:
    class Scale(nn.Module):
        def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
            return x * scale

    model = nn.Sequential(nn.Identity())
    scale_module = Scale()
    bad = torch.tensor([math.nan])
    origin = find_nonfinite_origin(scale_module, lambda: scale_module(torch.ones(2), scale=bad))
    assert origin is not None and origin.input_nonfinite
    assert [t.tensor_path for t in origin.inputs] == ["args[0]", "kwargs['scale']"]
    assert_no_hooks(model, scale_module)
