"""The float64 sums of squares behind the per-module weight and gradient norms that every
step logs: within the documented error bound of an exact sum, on the compiled CPU pass and
on the torch fallback alike."""

from __future__ import annotations

import math

import pytest
import torch

import vinlens.health.monitor._fingerprint as fingerprint
from vinlens.model_inspection.summary import sums_of_squares

pytest.importorskip("numba")

U = 2.0**-53


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def exact(tensor: torch.Tensor) -> float:
    """The sum of squares of the widened values, correctly rounded (squares of float32
    values are exact in float64; fsum adds them without error)."""
    return math.fsum(v * v for v in tensor.double().reshape(-1).tolist())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sums_of_squares_are_within_the_bound(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(3)
    tensors = [
        torch.randn(64, 33, generator=generator, dtype=dtype) * 1e3,
        torch.randn(2, 8, 5, 7, generator=generator, dtype=dtype).contiguous(
            memory_format=torch.channels_last
        ),
        torch.zeros(0, dtype=dtype),
        torch.tensor([1e-30, -0.0, 3.0], dtype=dtype),
    ]
    found = sums_of_squares(tensors)
    assert found is not None
    for tensor, value in zip(tensors, found, strict=True):
        want = exact(tensor)
        k = max(tensor.numel(), 1)
        # Squares of float64 values round once each: one more gamma for them.
        slack = gamma(k) + (U if dtype == torch.float64 else 0.0)
        assert abs(value - want) <= 2 * slack * want


def test_sums_of_squares_decline_what_they_cannot_read() -> None:
    a = torch.randn(4, 6)
    assert sums_of_squares([a, a.half()]) is None  # not float32/float64
    assert sums_of_squares([a[:, ::2]]) is None  # gaps: not dense
    assert sums_of_squares([a.t()]) is not None  # permuted but dense: read in memory order


def test_the_compiled_and_the_torch_paths_agree_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generator = torch.Generator().manual_seed(4)
    dense = [torch.randn(n, generator=generator) for n in (1, 17, 4096, 300_000, 70_000)]
    compiled = fingerprint._squares(dense)
    monkeypatch.setattr(fingerprint, "sums_of_squares", lambda tensors: None)
    fallback = fingerprint._squares(dense)
    assert compiled.dtype == fallback.dtype == torch.float64
    assert compiled[-1] == fallback[-1] == 0.0  # the pad the gather reads
    for tensor, a, b in zip(dense, compiled[:-1].tolist(), fallback[:-1].tolist(), strict=True):
        want = exact(tensor)
        # The fallback squares a float64 norm: two more roundings than the sum itself.
        bound = 2 * (gamma(tensor.numel()) + 4 * U) * want
        assert abs(a - want) <= bound and abs(b - want) <= bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_input_batch_sum_and_squares_are_within_the_bound(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(6)
    batch = torch.randn(4, 3, 16, 16, generator=generator, dtype=dtype).contiguous(
        memory_format=torch.channels_last
    )
    compiled = fingerprint._sum_and_squares(batch)
    assert compiled.dtype == torch.float64 and compiled.shape == (2,)
    total, squares = compiled.tolist()
    values = batch.double().reshape(-1).tolist()
    k = batch.numel()
    assert abs(total - math.fsum(values)) <= 2 * gamma(k) * math.fsum(abs(v) for v in values)
    want = exact(batch)
    assert abs(squares - want) <= 2 * (gamma(k) + U) * want
    # A layout the compiled pass cannot read takes the torch path, to the same bound.
    strided = batch.double()[:, :, ::2]
    total, squares = fingerprint._sum_and_squares(strided).tolist()
    values = strided.reshape(-1).tolist()
    assert abs(total - math.fsum(values)) <= 2 * gamma(k) * math.fsum(abs(v) for v in values)
    assert abs(squares - exact(strided)) <= 2 * (gamma(k) + U) * exact(strided)
