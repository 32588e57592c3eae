"""precision_headroom: counts equal numpy's on planted values, for float16 and bfloat16."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import ModulePrecision, PrecisionReport, precision_headroom
from vinlens.hooks import leftover_hooks

PLANTED = np.array(
    [0.0, -0.0, 1e-6, 7e4, -7e5, 3.0, 1e-9, -1e-5, 65504.0, 65505.0, 1e-40, 2e38, np.inf, np.nan],
    dtype=np.float32,
)


class Emit(nn.Module):
    """Returns the planted values (times its input, a scalar one)."""

    def __init__(self, values: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("values", torch.from_numpy(values.copy()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.values * x
        return out


def numpy_row(values: np.ndarray, dtype: type) -> tuple[int, float, int, int, float]:
    info = np.finfo(dtype) if dtype is np.float16 else None
    high = float(info.max) if info else float(torch.finfo(torch.bfloat16).max)
    tiny = float(info.tiny) if info else float(torch.finfo(torch.bfloat16).tiny)
    wide = values.astype(np.float64)
    magnitude = np.abs(wide[np.isfinite(wide)])
    top = float(magnitude.max())
    # the oracle for overflow is the cast itself: float32 -> dtype rounds once, to nearest even
    target = torch.float16 if dtype is np.float16 else torch.bfloat16
    cast_infinite = int(torch.from_numpy(values.copy()).to(target).isinf().sum())
    return (
        values.size,
        top,
        cast_infinite,
        int(((magnitude > 0) & (magnitude < tiny)).sum()),
        math.log2(high / top),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_counts_equal_numpy_on_planted_values(dtype: torch.dtype) -> None:
    model = nn.Sequential(Emit(PLANTED), nn.Identity(), nn.Tanh())
    report = precision_headroom(model, lambda: model(torch.ones(())), dtype)
    assert isinstance(report, PrecisionReport)
    assert [(r.module_path, r.call_index) for r in report.modules] == [
        ("0", 0),
        ("1", 0),
        ("2", 0),
        ("<root>", 0),
    ]
    row = report.modules[0]
    assert isinstance(row, ModulePrecision)
    count, top, over, under, bits = numpy_row(
        PLANTED, np.float16 if dtype == torch.float16 else None
    )  # type: ignore[arg-type]
    assert (row.count, row.abs_max, row.overflow_count, row.underflow_count) == (
        count,
        pytest.approx(top),
        over,
        under,
    )
    assert row.headroom_bits == -math.inf  # the planted inf leaves no headroom
    assert (bits < 0) == (dtype == torch.float16)  # finite abs_max 2e38 vs max
    if dtype == torch.float16:
        # 7e4, 7e5, 2e38, inf (65505 rounds to 65504) | 1e-5, 1e-6, 1e-9, 1e-40
        assert (over, under) == (4, 4)
    else:
        assert (over, under) == (1, 1)  # bfloat16 reaches 3.4e38: only the inf | 1e-40
    assert report.first_overflow_path == "0"
    tanh = report.modules[2]
    assert tanh.overflow_count == 0 and tanh.abs_max == 1.0
    assert tanh.headroom_bits == pytest.approx(math.log2(float(torch.finfo(dtype).max)))
    assert report.lowest_headroom()["0"] == row.headroom_bits
    assert report.dtype == str(dtype)
    assert leftover_hooks(model.modules()) == []


def test_zero_and_empty_outputs() -> None:
    model = nn.Sequential(Emit(np.zeros(3, np.float32)), Emit(np.array([np.nan], np.float32)))
    report = precision_headroom(model, lambda: model[1](model[0](torch.ones(()))))
    zero, nan = report.modules
    assert zero.abs_max == 0 and zero.headroom_bits == math.inf
    assert math.isnan(nan.abs_max) and math.isnan(nan.headroom_bits) and nan.count == 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_model_already_running_in_low_precision(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).to(dtype)
    x = torch.randn(4, 8, dtype=dtype) * 100
    report = precision_headroom(model, lambda: model(x))
    with torch.no_grad():
        out = model[0](x).float().abs()
    assert report.modules[0].abs_max == pytest.approx(float(out.max()))
    assert report.modules[0].count == 32


def test_autocast() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    x = torch.randn(4, 8) * 1e3

    def run() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)

    report = precision_headroom(model, run, torch.float16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        first = model[0](x)
    assert first.dtype == torch.bfloat16
    assert report.modules[0].abs_max == float(first.float().abs().max())


def test_bad_dtype_and_hooks_after_an_exception() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"floating torch\.dtype"):
        precision_headroom(model, lambda: model(torch.ones(2)), torch.int8)
    with pytest.raises(RuntimeError):
        precision_headroom(model, lambda: model(torch.ones(3)))
    assert leftover_hooks([model]) == []


@pytest.mark.parametrize(
    ("dtype", "values", "expected"),
    [
        (torch.float16, [65510.0, 65519.0, 65520.0, 1e6], 2),  # boundary max + ulp/2 = 65520
        (torch.bfloat16, [3.390e38, 3.3961e38], 0),  # both round to bfloat16's max
        (torch.float16, [65504.0, -65520.0, -np.inf], 2),
    ],
)
def test_overflow_counts_values_whose_cast_is_infinite(
    dtype: torch.dtype, values: list[float], expected: int
) -> None:
    planted = np.array(values, dtype=np.float32)
    model = nn.Sequential(Emit(planted))
    report = precision_headroom(model, lambda: model(torch.ones(())), dtype)
    row = report.modules[0]
    assert row.overflow_count == expected
    assert row.overflow_count == int(torch.from_numpy(planted).to(dtype).isinf().sum())
    assert report.first_overflow_path == ("0" if expected else None)


class Blow(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x * 1e3
        return out


@pytest.mark.parametrize("run_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_an_output_already_holding_inf_names_the_module(run_dtype: torch.dtype) -> None:
    model = nn.Sequential(nn.Identity(), Blow(), nn.Identity())
    x = torch.full((4,), 100.0, dtype=run_dtype)  # 1e5: inf in float16, finite otherwise
    report = precision_headroom(model, lambda: model(x), torch.float16)
    blow = next(r for r in report.modules if r.module_path == "1")
    assert blow.overflow_count == 4
    assert report.first_overflow_path == "1"
    assert blow.headroom_bits < 0


def test_float16_autocast_output_holding_inf() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(1e3)
    x = torch.full((2, 8), 1e2)

    def run() -> None:
        with torch.autocast("cpu", dtype=torch.float16):
            model(x)

    report = precision_headroom(model, run, torch.float16)
    first = report.modules[0]
    assert first.module_path == "0"
    assert first.overflow_count == 16  # 8e5 per element: inf in the float16 output
    assert first.headroom_bits == -math.inf
    assert report.first_overflow_path == "0"
