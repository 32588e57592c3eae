"""The byte-copy prefix of contiguous CPU tensors gives exactly torch's ``tolist`` scalars."""

from __future__ import annotations

import math

import pytest
import torch

from vinlens.model_inspection.snapshots import _ARRAY_CODES, _row_major_prefix

SPECIAL = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 3.4e38, 1e-45]


@pytest.mark.parametrize("dtype", sorted(_ARRAY_CODES, key=str))
def test_byte_copy_prefix_equals_tolist(dtype: torch.dtype) -> None:
    if dtype.is_floating_point:
        source = torch.tensor(SPECIAL * 5, dtype=dtype).reshape(5, -1)
    else:
        info = torch.iinfo(dtype)
        source = torch.tensor([info.min, info.max, 0, 1, -1 if info.min < 0 else 2] * 9)
        source = source.to(dtype).reshape(3, -1)
    for count in (1, 7, source.numel()):
        got = _row_major_prefix(source, count)
        want = tuple(source.reshape(-1)[:count].tolist())
        assert len(got) == count
        for a, b in zip(got, want, strict=True):
            assert type(a) is type(b)
            assert a == b or (math.isnan(a) and math.isnan(b))
            if isinstance(a, float):
                assert math.copysign(1.0, a) == math.copysign(1.0, b)  # -0.0 kept


def test_byte_copy_prefix_of_a_view_starts_at_its_offset_and_does_not_alias() -> None:
    base = torch.arange(40, dtype=torch.float32)
    view = base[13:29].view(4, 4)  # contiguous, storage offset 13
    values = _row_major_prefix(view, 5)
    assert values == (13.0, 14.0, 15.0, 16.0, 17.0)
    base.zero_()
    assert values == (13.0, 14.0, 15.0, 16.0, 17.0)


def test_negated_and_grad_tensors_keep_their_values() -> None:
    weight = torch.randn(6, requires_grad=True)
    assert _row_major_prefix(weight, 6) == tuple(weight.detach().tolist())
    negated = torch._neg_view(torch.arange(4.0))
    assert negated.is_neg()
    assert _row_major_prefix(negated, 4) == (-0.0, -1.0, -2.0, -3.0)
