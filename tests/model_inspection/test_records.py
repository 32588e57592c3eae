"""Records are frozen dataclasses that standard serialization handles; limits validate."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from vinlens.model_inspection import (
    CaptureLimits,
    ModuleMetadata,
    TensorSnapshot,
    TensorSummary,
    capture_model,
    inspect_model,
)

# The reference's five positive quotas; max_summary_elements (added after them, so
# positional construction is unchanged) may be 0 and is tested on its own.
FIELDS = [field.name for field in dataclasses.fields(CaptureLimits)][:5]


def test_capture_limits_defaults_match_the_reference() -> None:
    limits = CaptureLimits()
    assert dataclasses.astuple(limits) == (64, 32, 16 * 1024, 4096, 32, 1 << 18)
    assert FIELDS == [
        "max_tensors",
        "max_samples_per_tensor",
        "max_bytes",
        "max_traversal_nodes",
        "max_container_depth",
    ]


def test_max_summary_elements_may_be_zero_but_not_negative_or_a_bool() -> None:
    assert CaptureLimits(max_summary_elements=0).max_summary_elements == 0
    with pytest.raises(ValueError, match=r"max_summary_elements must be a non-negative int"):
        CaptureLimits(max_summary_elements=-1)
    with pytest.raises(TypeError, match=r"max_summary_elements must be a non-negative int"):
        CaptureLimits(max_summary_elements=True)
    assert CaptureLimits.from_mapping({"max_summary_elements": 0}).max_summary_elements == 0


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("bad", [0, -1, -4096])
def test_capture_limits_rejects_non_positive_naming_the_field(field: str, bad: int) -> None:
    with pytest.raises(ValueError, match=rf"CaptureLimits\.{field} must be a positive int"):
        CaptureLimits(**{field: bad})


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("bad", [True, False, 1.0, 2.5, "3", None])
def test_capture_limits_rejects_non_int_and_bool_naming_the_field(field: str, bad: object) -> None:
    with pytest.raises(TypeError, match=rf"CaptureLimits\.{field} must be a positive int"):
        CaptureLimits(**{field: bad})


def test_records_are_frozen() -> None:
    limits = CaptureLimits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_tensors = 3  # type: ignore[misc]
    metadata = inspect_model(nn.Linear(2, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.modules[0].training = False  # type: ignore[misc]


def test_inspected_rows_equal_regularly_constructed_records(small_cnn: nn.Module) -> None:
    for row in inspect_model(small_cnn).modules:
        regular = ModuleMetadata(**dataclasses.asdict(row))
        assert row == regular
        assert hash(row) == hash(regular)
        assert repr(row) == repr(regular)
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.path = "other"  # type: ignore[misc]


def test_records_round_trip_through_asdict_and_json(small_cnn: nn.Module) -> None:
    metadata = inspect_model(small_cnn)
    with capture_model(small_cnn) as capture:
        small_cnn(torch.randn(1, 3, 8, 8))
    for record in (metadata, capture.limits, *capture.snapshots):
        payload = json.loads(json.dumps(dataclasses.asdict(record)))
        assert set(payload) == {field.name for field in dataclasses.fields(record)}
    snapshot = capture.snapshots[0]
    assert isinstance(snapshot, TensorSnapshot)
    assert json.loads(json.dumps(dataclasses.asdict(snapshot)))["values"] == list(snapshot.values)


def test_captured_snapshots_equal_regularly_constructed_records() -> None:
    model = nn.Linear(3, 2)
    with capture_model(model) as capture:
        model(torch.randn(4, 3))
    for snapshot in capture.snapshots:
        fields = dataclasses.asdict(snapshot)
        assert fields["summary"] is not None  # float32 activations are summarized
        fields["summary"] = TensorSummary(**fields["summary"])
        rebuilt = TensorSnapshot(**fields)
        assert rebuilt == snapshot and hash(rebuilt) == hash(snapshot)
        assert repr(rebuilt) == repr(snapshot)
        with pytest.raises(dataclasses.FrozenInstanceError):
            snapshot.values = ()  # type: ignore[misc]


@settings(max_examples=80, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    bad=st.one_of(
        st.integers(max_value=0),
        st.booleans(),
        st.floats(allow_nan=True),
        st.text(max_size=3),
        st.none(),
        st.lists(st.integers(), max_size=2),
    ),
)
def test_any_bad_quota_is_rejected_naming_the_field(field: str, bad: object) -> None:
    with pytest.raises(
        (TypeError, ValueError), match=rf"CaptureLimits\.{field} must be a positive int"
    ):
        CaptureLimits(**{field: bad})


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(1, 10**9), min_size=5, max_size=5))
def test_any_positive_quotas_are_accepted(values: list[int]) -> None:
    limits = CaptureLimits(*values)
    assert dataclasses.astuple(limits)[:5] == tuple(values)


def test_capture_limits_from_mapping_keeps_defaults_for_missing_fields() -> None:
    assert CaptureLimits.from_mapping({}) == CaptureLimits()
    limits = CaptureLimits.from_mapping({"max_tensors": 200, "max_bytes": 8})
    assert limits == CaptureLimits(max_tensors=200, max_bytes=8)
    every = dict(zip(FIELDS, (1, 2, 3, 4, 5), strict=True))
    assert dataclasses.astuple(CaptureLimits.from_mapping(every))[:5] == (1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("mapping", "error", "expected"),
    [
        ({"max_tensors": 0}, ValueError, r"CaptureLimits\.max_tensors must be a positive int"),
        ({"max_bytes": -5}, ValueError, r"CaptureLimits\.max_bytes must be a positive int"),
        ({"max_samples_per_tensor": 1.5}, TypeError, r"max_samples_per_tensor .*float 1\.5"),
        ({"max_tensors": None}, TypeError, r"max_tensors must be a positive int.*None"),
        ({"max_tensors": True}, TypeError, r"max_tensors must be a positive int.*bool"),
        ({"max_tensors": "8"}, TypeError, r"max_tensors must be a positive int.*'8'"),
        ({"bogus": 3, "max_tensors": 2}, ValueError, r"'bogus'.*expected some of max_tensors"),
        ({1: 3}, ValueError, r"unknown capture limit\(s\) 1"),
    ],
)
def test_capture_limits_from_mapping_refuses_naming_the_field(
    mapping: dict[object, object], error: type[Exception], expected: str
) -> None:
    with pytest.raises(error, match=expected):
        CaptureLimits.from_mapping(mapping)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [[1, 2], (("max_tensors", 3),), "max_tensors=3", None, 7])
def test_capture_limits_from_mapping_refuses_non_mappings(bad: object) -> None:
    with pytest.raises(TypeError, match="must be a mapping of CaptureLimits fields"):
        CaptureLimits.from_mapping(bad)  # type: ignore[arg-type]


def test_root_path_constant_names_the_model_in_every_record() -> None:
    from vinlens.model_inspection import ROOT_PATH

    model = nn.Sequential(nn.Linear(2, 2))
    assert inspect_model(model).modules[0].path == ROOT_PATH == "<root>"
    with capture_model(model, module_paths=[""]) as capture:
        model(torch.ones(1, 2))
    assert {s.module_path for s in capture.snapshots} == {ROOT_PATH}
