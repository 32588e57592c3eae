"""map_flatness: which cameras' raw maps are near-flat next to the others."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vinlens.attribution import camera_targets_for_layer, explain_cameras, map_flatness
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images


def test_the_issue_example_is_flat_next_to_a_camera_that_matters():
    found = map_flatness({"rgb": (0.0, 0.8), "slam-left": (1.8e-4, 2.0e-4), "slam-right": (0, 0.3)})
    assert [k for k, f in found.items() if f.flat] == ["slam-left"]
    left = found["slam-left"]
    assert left.span == pytest.approx(2e-5)
    assert left.relative_span == pytest.approx(2e-5 / 0.8)
    assert left.largest_camera == "rgb"
    assert "rgb" in left.reason and "%" in left.reason
    assert found["rgb"].relative_span == 1.0 and found["rgb"].reason == ""
    assert found["slam-right"].relative_span == pytest.approx(0.375)


def test_absolute_floor_applies_alone_and_with_one_camera():
    assert map_flatness({"only": (0.5, 0.5 + 1e-7)})["only"].flat
    assert not map_flatness({"only": (0.0, 1e-3)})["only"].flat
    # Two cameras equally tiny: neither is small next to the other, both under the floor.
    both = map_flatness({"a": (0.0, 1e-7), "b": (0.0, 2e-7)})
    assert all(f.flat and "at most" in f.reason for f in both.values())
    assert not map_flatness({"a": (0.0, 1e-7)}, absolute_span=0.0)["a"].flat


def test_thresholds_are_inclusive_and_configurable():
    ranges = {"a": (0.0, 1.0), "b": (0.0, 0.01), "c": (0.0, 0.011)}
    found = map_flatness(ranges)
    assert found["b"].flat and not found["c"].flat
    assert map_flatness(ranges, relative_span=0.2)["c"].flat
    assert not map_flatness(ranges, relative_span=0.0)["b"].flat


def test_non_finite_ranges_are_never_called_flat_and_do_not_set_the_scale():
    found = map_flatness({"nan": (math.nan, 1.0), "inf": (0.0, math.inf), "ok": (0.0, 2.0)})
    assert not found["nan"].flat and not found["inf"].flat
    assert math.isnan(found["nan"].span) and math.isnan(found["inf"].relative_span)
    assert found["ok"].largest_camera == "ok" and found["ok"].relative_span == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"relative_span": -0.1}, "relative_span must be a finite number >= 0"),
        ({"absolute_span": math.nan}, "absolute_span must be a finite number >= 0"),
    ],
)
def test_bad_thresholds_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        map_flatness({"a": (0.0, 1.0)}, **kwargs)


def test_a_range_with_min_above_max_names_the_camera():
    with pytest.raises(
        ValueError, match=re.escape("camera 'rgb': range min 2.0 is larger than max 1.0")
    ):
        map_flatness({"rgb": (2.0, 1.0)})


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.tuples(st.floats(-1e3, 1e3, allow_nan=False), st.floats(0, 1e3, allow_nan=False)).map(
            lambda t: (t[0], t[0] + t[1])
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_largest_camera_is_never_flat_relatively_and_relative_spans_are_in_unit_range(ranges):
    found = map_flatness(ranges)
    assert list(found) == list(ranges)
    for f in found.values():
        assert 0.0 <= f.relative_span <= 1.0
        assert f.flat == (
            f.span <= 1e-6 or (f.camera_key != f.largest_camera and f.relative_span <= 0.01)
        )


def test_demo_camera_without_evidence_is_flat_and_cameras_with_evidence_are_not():
    images = {
        k: v[0]
        for k, v in make_camera_images(
            evidence={"rgb": (24, 70), "slam-left": (60, 18)}, seed=3
        ).items()
    }
    model = MultiCameraDemoModel()
    targets = camera_targets_for_layer("encoders.{camera}.conv3", "dedicated_layer", list(images))
    records = explain_cameras(model, images, EVIDENCE_CLASS, targets)
    found = map_flatness({r.camera_key: (r.raw_min, r.raw_max) for r in records})
    assert {k: f.flat for k, f in found.items()} == {
        "rgb": False,
        "slam-left": False,
        "slam-right": True,
    }
