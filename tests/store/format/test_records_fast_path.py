"""The fast decoder of ndarray records agrees with the bounded msgpack path on any bytes.

``decode_records`` reads writer-shaped records (maps of ndarray maps) by parsing their
headers directly; everything else goes through msgpack. This property test feeds both
paths the same batches, valid and damaged, and requires identical results or identical
errors.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vinlens.store.format._records as records
from vinlens.store.format import NUMERIC_DTYPES

DTYPES = sorted(NUMERIC_DTYPES)
SHAPES = st.lists(st.sampled_from([0, 1, 2, 3, 5, 70]), min_size=0, max_size=3).map(tuple)


@st.composite
def record_bytes(draw: st.DrawFn) -> bytes:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    keys = draw(
        st.lists(st.sampled_from(["points", "a", "ü"]), min_size=1, max_size=3, unique=True)
    )
    record: dict[str, object] = {}
    for key in keys:
        shape = draw(SHAPES)
        record[key] = (rng.random(shape) * 10).astype(draw(st.sampled_from(DTYPES)))
    if draw(st.booleans()):
        record["n"] = draw(st.integers(-5, 5))
    return records.encode_record(record)


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    if draw(st.booleans()):  # same-shape runs, as the writer produces for vin_points
        dtype, shape = (
            draw(st.sampled_from(DTYPES)),
            draw(st.sampled_from([(0, 3), (5, 3), (40, 3), ()])),
        )
        rng = np.random.default_rng(draw(st.integers(0, 1000)))
        recs = [
            bytearray(records.encode_record({"points": (rng.random(shape) * 10).astype(dtype)}))
            for _ in range(draw(st.integers(1, 5)))
        ]
    else:
        recs = [bytearray(b) for b in draw(st.lists(record_bytes(), min_size=1, max_size=4))]
    damage = draw(st.sampled_from(["none", "flip", "truncate", "insert"]))
    if damage != "none":
        i = draw(st.integers(0, len(recs) - 1))
        j = draw(st.integers(0, max(len(recs[i]) - 1, 0)))
        byte = draw(st.integers(0, 255))
        if damage == "flip":
            recs[i][j] = byte
        elif damage == "truncate":
            del recs[i][j:]
        else:
            recs[i].insert(j, byte)
    return [bytes(r) for r in recs]


def _outcome(data: bytes, bounds: list[int]) -> tuple[object, ...]:
    try:
        return ("ok", list(records.decode_records(data, bounds)))
    except records.RecordDecodeError as exc:
        return ("error", str(exc), exc.index)


def _assert_same(reference: tuple[object, ...], fast: tuple[object, ...]) -> None:
    assert reference[0] == fast[0], (reference, fast)
    if reference[0] == "error":
        assert reference[1:] == fast[1:]
        return
    ref_records, fast_records = reference[1], fast[1]
    assert isinstance(ref_records, list) and isinstance(fast_records, list)
    assert len(ref_records) == len(fast_records)
    for ref, got in zip(ref_records, fast_records, strict=True):
        assert ref.keys() == got.keys()
        for key, value in ref.items():
            if isinstance(value, np.ndarray):
                out = got[key]
                assert (
                    isinstance(out, np.ndarray)
                    and out.dtype == value.dtype
                    and out.shape == value.shape
                )
                assert np.array_equal(out, value, equal_nan=True)
                assert not out.flags.writeable  # views into the batch's bytes stay read-only
            else:
                assert got[key] == value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches())
def test_fast_path_matches_msgpack_path(batch: list[bytes]) -> None:
    data = b"".join(batch)
    bounds = [0, *itertools.accumulate(len(b) for b in batch)]
    fast = _outcome(data, bounds)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "_fast_ndarray_record", lambda *args, **kwargs: None)
        reference = _outcome(data, bounds)
    _assert_same(reference, fast)


def test_writer_shaped_records_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    hits = []
    original = records._fast_ndarray_record

    def spy(*args: object, **kwargs: object) -> object:
        out = original(*args, **kwargs)
        hits.append(out is not None)
        return out

    monkeypatch.setattr(records, "_fast_ndarray_record", spy)
    batch = [records.encode_record({"points": np.full((5, 3), i, np.float32)}) for i in range(4)]
    bounds = [0, *itertools.accumulate(len(b) for b in batch)]
    decoded = list(records.decode_records(b"".join(batch), bounds))
    assert hits and all(hits)
    assert [float(d["points"][0, 0]) for d in decoded] == [0.0, 1.0, 2.0, 3.0]
