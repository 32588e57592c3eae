"""``TensorSummary.std`` on large float32 tensors against a float64 numpy oracle.

A float32 sum of squares (one BLAS ``sdot``, or ``vector_norm`` on a strided view) had a
relative std error of ~1e-5 at 16M contiguous elements and ~7e-3 on a 16M-element sliced
view; the documented error model is ``eps * (1 + mean^2 / var)``, ~1e-7 here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vinlens.model_inspection import summarize_tensor
from vinlens.model_inspection.summary import SummaryAccumulator

#: A few float64-accumulated roundings and no more (the old float32 sums: 1e-5 to 7e-3).
TOLERANCE = 1e-7
#: The mean is a float32 sum (a tree of float32 adds, rounded once to float32).
MEAN_TOLERANCE = 3e-7


def _oracle(tensor: torch.Tensor) -> tuple[float, float]:
    values = np.ascontiguousarray(tensor.numpy()).astype(np.float64)
    return float(values.mean()), float(values.std())


def _relative(value: float, expected: float) -> float:
    return abs(value - expected) / abs(expected)


@pytest.fixture(scope="module")
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(2024)


def test_std_of_a_large_contiguous_float32_tensor(generator: torch.Generator) -> None:
    tensor = torch.randn(1 << 24, generator=generator) * 3.0 + 1.0
    mean, std = _oracle(tensor)
    summary = summarize_tensor(tensor)
    assert _relative(summary.std, std) < TOLERANCE
    assert _relative(summary.mean, mean) < MEAN_TOLERANCE
    assert summary.count == tensor.numel()


def test_std_of_a_large_sliced_float32_view(generator: torch.Generator) -> None:
    base = torch.randn(4096, 8192, generator=generator) * 3.0 + 1.0
    view = base[:, ::2]  # 16M elements, not contiguous: the strided path
    assert not view.is_contiguous()
    mean, std = _oracle(view)
    summary = summarize_tensor(view)
    assert _relative(summary.std, std) < TOLERANCE
    assert _relative(summary.mean, mean) < MEAN_TOLERANCE
    # The view is only read.
    assert torch.equal(view, base[:, ::2])


def test_std_of_a_large_permuted_view_and_a_tail_that_is_not_a_whole_chunk(
    generator: torch.Generator,
) -> None:
    tensor = (torch.rand(5_000_003, generator=generator) * 4.0 - 1.0).reshape(-1, 1)
    permuted = tensor.t()
    mean, std = _oracle(permuted)
    summary = summarize_tensor(permuted)
    assert _relative(summary.std, std) < TOLERANCE
    assert _relative(summary.mean, mean) < MEAN_TOLERANCE


def test_merged_accumulators_of_large_tensors_equal_the_oracle(
    generator: torch.Generator,
) -> None:
    parts = [torch.randn(3_000_000, generator=generator) * s + s for s in (0.5, 2.0, 7.0)]
    acc = SummaryAccumulator()
    for part in parts:
        acc.merge(SummaryAccumulator().update(part))
    mean, std = _oracle(torch.cat(parts))
    assert _relative(acc.finish().std, std) < TOLERANCE
    assert _relative(acc.finish().mean, mean) < MEAN_TOLERANCE
