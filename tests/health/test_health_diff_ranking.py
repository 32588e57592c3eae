"""ModelDiff.most_drifted (the ranking the health widget shows) and the precision of
compare_models' cosine near 1, against float64 oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import ModelDiff, ModuleDiff, compare_models, most_drifted
from vinlens.model_inspection import summarize_tensor

_SUMMARY = summarize_tensor(torch.zeros(1))


def _entry(path: str, index: int, relative: float) -> ModuleDiff:
    return ModuleDiff(path, index, relative, relative, 1.0, _SUMMARY, _SUMMARY)


def test_most_drifted_ranks_each_path_by_its_worst_call_nan_first() -> None:
    diff = ModelDiff(
        modules=(
            _entry("a", 0, 0.1),
            _entry("b", 0, 0.5),
            _entry("a", 1, 0.7),  # a's worst call
            _entry("c", 0, math.nan),  # one side non-finite: above every number
            _entry("d", 0, 0.5),  # ties b: keeps execution order
            _entry("b", 1, 0.5),  # ties b's first call: the earlier call is kept
            _entry("e", 0, 0.0),
        )
    )
    ranked = diff.most_drifted()
    assert [(m.module_path, m.call_index) for m in ranked] == [
        ("c", 0),
        ("a", 1),
        ("b", 0),
        ("d", 0),
        ("e", 0),
    ]
    assert most_drifted(diff, k=2) == ranked[:2]
    assert diff.most_drifted(0) == ()
    assert ModelDiff(modules=()).most_drifted() == ()
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="k must be None or a non-negative int"):
            diff.most_drifted(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a ModelDiff"):
        most_drifted(ranked)  # type: ignore[arg-type]


class Const(nn.Module):
    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("value", value)

    def forward(self) -> torch.Tensor:
        return self.value * 1.0


def _oracle_one_minus_cos(a: torch.Tensor, b: torch.Tensor) -> float:
    x = a.double().numpy().reshape(-1)
    y = b.double().numpy().reshape(-1)
    # 1 - cos from the distance, all in float64: exact enough to judge 1e-10.
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    return float((np.sum((x - y) ** 2) - (nx - ny) ** 2) / (2 * nx * ny))


@pytest.mark.parametrize("scale", [1e-4, 1e-5, 1e-3])
def test_cosine_near_one_keeps_its_relative_precision(scale: float) -> None:
    generator = torch.Generator().manual_seed(7)
    a = torch.randn(3_000_000, generator=generator) + 0.5
    b = a + scale * torch.randn(a.shape, generator=generator)  # 1 - cos ~ scale^2 / 2
    diff = compare_models(Const(a), Const(b), lambda model: model())
    (entry,) = diff.modules
    want = _oracle_one_minus_cos(a, b)
    assert want < 1e-5
    # A float32 dot product leaves ~1e-7 of absolute noise in 1 - cos: 1e3 times the
    # value at the smallest scale.
    assert 1.0 - entry.cosine == pytest.approx(want, rel=1e-3)
    cos64 = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0).item()
    assert entry.cosine == pytest.approx(cos64, abs=1e-12)


def test_cosine_far_from_one_and_of_opposite_vectors() -> None:
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(50_000, generator=generator)
    b = torch.randn(50_000, generator=generator)
    (entry,) = compare_models(Const(a), Const(b), lambda model: model()).modules
    want = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0).item()
    assert entry.cosine == pytest.approx(want, abs=1e-6)
    (opposite,) = compare_models(Const(a), Const(-a), lambda model: model()).modules
    assert opposite.cosine == pytest.approx(-1.0, abs=1e-12)
    (same,) = compare_models(Const(a), Const(a.clone()), lambda model: model()).modules
    assert same.cosine == 1.0
