"""TensorSummary equals torch reductions on the whole tensor, without copying the tensor."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import vinlens.model_inspection.summary as summary_module
from vinlens.model_inspection import (
    CaptureLimits,
    SummaryAccumulator,
    TensorSummary,
    capture_model,
    summarize_tensor,
)
from vinlens.model_inspection.summary import _blocks

INF = math.inf


def reference(tensor: torch.Tensor) -> TensorSummary:
    """The oracle: plain torch reductions over a float64 copy of every element."""
    flat = tensor.detach().to(torch.float64).reshape(-1)
    finite = flat[torch.isfinite(flat)]
    nan = math.nan
    if finite.numel():
        stats = (
            finite.mean().item(),
            finite.std(correction=0).item(),
            finite.min().item(),
            finite.max().item(),
            finite.abs().max().item(),
            (finite == 0).double().mean().item(),
        )
    else:
        stats = (nan,) * 6
    return TensorSummary(
        flat.numel(),
        *stats,
        int(torch.isnan(flat).sum()),
        int((flat == INF).sum()),
        int((flat == -INF).sum()),
    )


def assert_summary_close(got: TensorSummary, want: TensorSummary, rtol: float = 1e-5) -> None:
    for field in dataclasses.fields(TensorSummary):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if isinstance(b, int):
            assert a == b, field.name
        elif math.isnan(b):
            assert math.isnan(a), field.name
        else:
            # std is derived from a sum of squares on the fast path: scale its tolerance.
            assert a == pytest.approx(b, rel=rtol, abs=rtol * (1 + abs(want.mean))), field.name


def planted(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.view(-1)
    flat[3] = math.nan
    flat[10] = INF
    flat[11] = -INF
    flat[12] = -INF
    flat[20:30] = 0
    return tensor


CASES: dict[str, Any] = {
    "contiguous": lambda: torch.randn(4, 8, 16) * 3 + 1,
    "permuted-sliced": lambda: torch.randn(40, 30, 7).permute(2, 0, 1)[:, ::3, 1:],
    "expanded": lambda: torch.randn(1, 6, 1).expand(50, 6, 9),
    "expanded-sliced": lambda: (torch.randn(3, 1) * 2).expand(3, 1000)[:, ::7],
    "scalar": lambda: torch.tensor(2.5),
    "float64": lambda: torch.randn(17, 5, dtype=torch.float64),
    "float16": lambda: (torch.randn(64, 33) * 4).half().t(),
    "bfloat16": lambda: (torch.randn(64, 33) + 100).bfloat16()[::2],
    "planted-float32": lambda: planted(torch.randn(8, 9)).t(),
    "planted-float16": lambda: planted(torch.randn(8, 9).half()),
    "planted-bfloat16-expanded": lambda: planted(torch.randn(1, 40).bfloat16()).expand(5, 40),
    "all-nan": lambda: torch.full((3, 4), math.nan),
    "only-infinities": lambda: torch.tensor([INF, -INF, INF]),
    "empty": lambda: torch.empty(0, 3),
    "relu-zeros": lambda: torch.relu(torch.randn(1000)),
    "huge-finite": lambda: torch.tensor([3e38, -3e38, 1e38]),
    "negative-zeros": lambda: torch.tensor([-0.0, 0.0, -0.0, 1.5, -2.0]),
    "negative-zeros-float64": lambda: torch.tensor([[-0.0, 3.0], [0.0, -1.0]], dtype=torch.float64),
    "zeros-outside-range": lambda: torch.rand(50) + 1,
    # hardswish(x) is -0.0 for x <= -3: many signed zeros in a permuted view.
    "hardswish-permuted": lambda: torch.nn.functional.hardswish(torch.randn(6, 7, 40) * 4).permute(
        2, 0, 1
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_summary_equals_torch_reductions_on_the_whole_tensor(case: str) -> None:
    tensor = CASES[case]()
    assert_summary_close(summarize_tensor(tensor), reference(tensor))


@pytest.mark.parametrize(
    "case", ["permuted-sliced", "float16", "planted-float32", "expanded", "hardswish-permuted"]
)
def test_blockwise_path_agrees_when_blocks_are_small(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_blocks, "BLOCK_ELEMENTS", 7)
    tensor = CASES[case]()
    assert_summary_close(summarize_tensor(tensor), reference(tensor))


def _is_table(out: torch.Tensor) -> bool:
    """The blockwise summary's table of per-block results: rows of nine float64 numbers."""
    return out.dim() == 2 and out.shape[1] == 9 and out.dtype == torch.float64


class Allocations(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Largest tensor any aten op returns, and whether anything was copied to another device."""

    # Views, plus the table of per-block results (nine float64 scalars per block).
    VIEWS: ClassVar[frozenset[str]] = frozenset(
        {"aten::detach", "aten::as_strided", "aten::select", "aten::narrow", "aten::slice"}
        | {"aten::view", "aten::alias", "aten::t", "aten::permute", "aten::expand"}
        | {"aten::stack", "aten::cat"}
    )

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.largest = 0
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        self.ops.add(name)
        if isinstance(out, torch.Tensor) and name not in self.VIEWS and not _is_table(out):
            self.largest = max(self.largest, out.numel())
        return out


@pytest.mark.parametrize("case", ["permuted-sliced", "contiguous", "expanded", "float16"])
def test_no_copy_of_the_tensor_is_made(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = CASES[case]()
    monkeypatch.setattr(_blocks, "BLOCK_ELEMENTS", 64)
    mode = Allocations()
    with mode:
        summarize_tensor(tensor)
    assert "aten::clone" not in mode.ops and "aten::contiguous" not in mode.ops
    # Every dtype is widened (float32 into float64 too) one bounded block at a time.
    assert mode.largest <= 64 < tensor.numel()


def test_expanded_tensor_is_never_materialized() -> None:
    # 2**40 logical elements over 8 stored ones: any materialization would fail outright.
    source = torch.tensor([1.0, -2.0, 0.0, 4.0, math.nan, 6.0, INF, 8.0]).half()
    tensor = source.view(8, 1).expand(8, 2**37)
    mode = Allocations()
    with mode:
        summary = summarize_tensor(tensor)
    assert mode.largest <= 8
    repeat = 2**37
    assert summary.count == 8 * repeat
    assert (summary.nan_count, summary.posinf_count, summary.neginf_count) == (repeat, repeat, 0)
    assert summary.mean == pytest.approx((1 - 2 + 0 + 4 + 6 + 8) / 6)
    assert summary.zero_fraction == pytest.approx(1 / 6)
    assert (summary.min, summary.max, summary.abs_max) == (-2.0, 8.0, 8.0)


def test_summary_leaves_autograd_alone() -> None:
    weight = torch.randn(5, 5, requires_grad=True)
    summary = summarize_tensor(weight * 2)
    assert weight.grad is None and summary.count == 25


@pytest.mark.parametrize(
    ("tensor", "error", "match"),
    [
        (torch.arange(3), TypeError, "torch.int64 is not a real floating dtype"),
        (torch.ones(2, dtype=torch.complex64), TypeError, "complex64"),
        (torch.empty(2, device="meta"), ValueError, "meta tensor"),
        (torch.eye(2).to_sparse(), ValueError, "sparse"),
    ],
)
def test_unsupported_tensors_are_refused_naming_why(
    tensor: torch.Tensor, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        summarize_tensor(tensor)
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor"):
        summarize_tensor([1.0])  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    parts=st.lists(
        st.lists(
            st.one_of(
                st.floats(-1e4, 1e4, width=32),
                st.sampled_from([math.nan, INF, -INF, 0.0]),
            ),
            max_size=30,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_merged_accumulators_equal_the_summary_of_the_concatenation(
    parts: list[list[float]],
) -> None:
    tensors = [torch.tensor(part, dtype=torch.float32) for part in parts]
    merged = SummaryAccumulator()
    for tensor in tensors:
        merged.merge(SummaryAccumulator().update(tensor))
    streamed = SummaryAccumulator()
    for tensor in tensors:
        streamed.update(tensor)
    whole = torch.cat(tensors)
    assert_summary_close(merged.finish(), reference(whole), rtol=1e-4)
    assert_summary_close(streamed.finish(), reference(whole), rtol=1e-4)


def test_capture_summarizes_floating_tensors_only() -> None:
    class Mixed(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.half() * 2, x.argmax(dim=-1)

    model = Mixed()
    x = torch.randn(3, 4)
    with capture_model(model, limits=CaptureLimits(max_samples_per_tensor=2)) as capture:
        model(x)
    by_path = {s.tensor_path: s for s in capture.snapshots}
    assert by_path["output[1]"].summary is None
    assert_summary_close(by_path["args[0]"].summary, reference(x))  # type: ignore[arg-type]
    assert_summary_close(
        by_path["output[0]"].summary,  # type: ignore[arg-type]
        reference(x.half() * 2),
    )
    # Sampling is unchanged by summaries: the same bounded prefix as before.
    assert by_path["args[0]"].values == tuple(x.reshape(-1)[:2].tolist())


def test_capture_summary_budget_and_shared_tensors() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Identity())
    x = torch.randn(2, 4)
    # Each distinct tensor is charged once: x (8), the Linear output (8), the ReLU output
    # (8, passed on unchanged by Identity and returned by the model). A budget of 16
    # covers the first two tensors only.
    limits = CaptureLimits(max_summary_elements=16)
    with capture_model(model, limits=limits) as capture:
        model(x)
    summarized = {
        (s.module_path, s.direction, s.tensor_path) for s in capture.snapshots if s.summary
    }
    assert summarized == {
        ("<root>", "input", "args[0]"),
        ("0", "input", "args[0]"),
        ("0", "output", "output"),
        ("1", "input", "args[0]"),
    }
    with capture_model(model, limits=CaptureLimits(max_summary_elements=0)) as capture:
        model(x)
    assert all(s.summary is None for s in capture.snapshots)
    with capture_model(model) as capture:
        model(x)
    outputs = [s for s in capture.snapshots if s.direction == "output"]
    assert {s.module_path for s in outputs} == {"0", "1", "2", "<root>"}
    assert len({id(s.summary) for s in outputs if s.module_path in ("1", "2", "<root>")}) >= 1
    assert_summary_close(outputs[-1].summary, reference(model(x)))  # type: ignore[arg-type]


def test_in_place_change_is_summarized_again() -> None:
    class InPlace(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mul_(2)

    model = nn.Sequential(nn.Identity(), InPlace())
    x = torch.ones(3)
    with capture_model(model) as capture:
        model(x)
    before = next(s for s in capture.snapshots if s.module_path == "1" and s.direction == "input")
    after = next(s for s in capture.snapshots if s.module_path == "1" and s.direction == "output")
    assert before.summary is not None and before.summary.mean == 1.0
    assert after.summary is not None and after.summary.mean == 2.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", sorted(CASES))
def test_summary_on_cuda_equals_the_reference_without_host_copies(case: str) -> None:
    tensor = CASES[case]().cuda()
    mode = Allocations()
    with mode:
        summary = summarize_tensor(tensor)
    assert_summary_close(summary, reference(tensor.cpu()))
    assert mode.largest <= max(summary_module.BLOCK_ELEMENTS, 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_capture_on_cuda_summarizes_on_the_device() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with capture_model(model) as capture:
        model(x)
    out = next(s for s in capture.snapshots if s.module_path == "1" and s.direction == "output")
    assert out.device.startswith("cuda") and out.summary is not None
    assert_summary_close(out.summary, reference(model(x).cpu()))


def test_update_value_equals_the_summary_of_a_tensor_of_those_values() -> None:
    values = [0.5, -2.0, 0.0, math.nan, 3.25, math.inf, -math.inf, 1e-3, 0.0]
    acc = SummaryAccumulator()
    for value in values:
        acc.update_value(value)
    expected = summarize_tensor(torch.tensor(values, dtype=torch.float64))
    got = acc.finish()
    assert (got.count, got.nan_count, got.posinf_count, got.neginf_count) == (
        expected.count,
        expected.nan_count,
        expected.posinf_count,
        expected.neginf_count,
    )
    assert (got.min, got.max, got.abs_max, got.zero_fraction) == (
        expected.min,
        expected.max,
        expected.abs_max,
        expected.zero_fraction,
    )
    assert got.mean == pytest.approx(expected.mean, rel=1e-12)
    assert got.std == pytest.approx(expected.std, rel=1e-12)
