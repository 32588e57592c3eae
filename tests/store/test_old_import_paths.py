"""Import paths of earlier releases keep working after the store moved into rooms.

A module that became a room (``format``, ``reader``, ...) kept its name as a package; the
few flat modules that moved behind a door stay as thin modules re-exporting the door's
objects, so old imports get the very same classes and functions.
"""

from __future__ import annotations

import importlib

import pytest

#: old flat module -> the door its names now come from
OLD_PATHS = {
    "vinlens.store.records": "vinlens.store.format",
    "vinlens.store.sample": "vinlens.store.format",
}


@pytest.mark.parametrize(("old", "door"), sorted(OLD_PATHS.items()))
def test_old_module_re_exports_the_doors_objects(old: str, door: str) -> None:
    old_module = importlib.import_module(old)
    door_module = importlib.import_module(door)
    assert old_module.__all__, old
    for name in old_module.__all__:
        assert getattr(old_module, name) is getattr(door_module, name), (old, name)


def test_room_classes_name_their_door_as_their_module() -> None:
    """Reprs, pickles and the signatures in docs/api.md name the public path, not ``_x``."""
    import vinlens.store.format as fmt

    for name in fmt.__all__:
        value = getattr(fmt, name)
        if isinstance(value, type) and value.__module__.startswith("vinlens.store.format"):
            assert value.__module__ == "vinlens.store.format", name
