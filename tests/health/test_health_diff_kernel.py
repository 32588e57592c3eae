"""compare_models' compiled pair pass: the same answers as the torch pair pass, in float64."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import vinlens.health._diff_metrics as diff_metrics
from vinlens.health import compare_models
from vinlens.model_inspection.summary import finite_pair_sums

pytest.importorskip("numba")

U = 2.0**-53


def _gamma(k: int) -> float:
    return k * U / (1 - k * U)


def _oracle(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float, float]:
    x = a.double().numpy().reshape(-1)
    y = b.double().numpy().reshape(-1)
    d = x - y
    return float(np.abs(d).max()), float(d @ d), float(x @ y), float(np.abs(x * y).sum())


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pair_sums_are_float64_sums_within_the_documented_bound(
    layout: str, dtype: torch.dtype
) -> None:
    generator = torch.Generator().manual_seed(5)
    a = torch.randn(3, 8, 17, 19, generator=generator, dtype=dtype) + 0.25
    b = a + 1e-3 * torch.randn(a.shape, generator=generator, dtype=dtype)
    if layout == "channels_last":
        a = a.contiguous(memory_format=torch.channels_last)
        b = b.contiguous(memory_format=torch.channels_last)
    found = finite_pair_sums(a, b)
    assert found is not None
    largest, distance, product = found
    want_max, want_distance, want_product, abs_product = _oracle(a, b)
    n = a.numel()
    assert largest == want_max  # |x - y| of widened values is exact (float32) or one rounding
    assert abs(distance - want_distance) <= 2 * _gamma(n) * want_distance
    assert abs(product - want_product) <= 2 * _gamma(n) * abs_product


def test_pair_sums_decline_what_they_cannot_read_in_step() -> None:
    a = torch.randn(4, 6)
    assert finite_pair_sums(a, a.t().contiguous().t()) is None  # other strides
    assert finite_pair_sums(a, a.double()) is None  # other dtypes
    assert finite_pair_sums(a.half(), a.half()) is None  # not float32/float64
    assert finite_pair_sums(a[:, ::2], a[:, ::2]) is None  # gaps: not dense
    assert finite_pair_sums(a[:0], a[:0]) is None  # nothing to read


def test_compare_models_gives_the_same_answers_with_and_without_the_compiled_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    model_a = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)
    ).eval()
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b[3].weight.mul_(1.001)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        compiled = compare_models(model_a, model_b, lambda m: m(x))
        monkeypatch.setattr(diff_metrics, "finite_pair_sums", lambda a, b: None)
        torch_pass = compare_models(model_a, model_b, lambda m: m(x))
    assert [m.module_path for m in compiled.modules] == [m.module_path for m in torch_pass.modules]
    for fast, slow in zip(compiled.modules, torch_pass.modules, strict=True):
        assert fast.summary_a == slow.summary_a and fast.summary_b == slow.summary_b
        # The torch pass accumulates in float32 (backend dots): agreement to its precision.
        assert fast.max_abs_diff == pytest.approx(slow.max_abs_diff, rel=1e-6, abs=1e-12)
        assert fast.relative_l2 == pytest.approx(slow.relative_l2, rel=1e-4, abs=1e-12)
        assert fast.cosine == pytest.approx(slow.cosine, abs=1e-6)
    by_path = {m.module_path: m for m in compiled.modules}
    assert by_path["3"].relative_l2 > 0
    assert by_path["0"].relative_l2 == 0.0 and by_path["0"].cosine == 1.0  # unchanged layer
