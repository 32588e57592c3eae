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
    "vinlens.store.tarscan": "vinlens.store.coverage",
}


@pytest.mark.parametrize(("old", "door"), sorted(OLD_PATHS.items()))
def test_old_module_re_exports_the_doors_objects(old: str, door: str) -> None:
    old_module = importlib.import_module(old)
    door_module = importlib.import_module(door)
    assert old_module.__all__, old
    for name in old_module.__all__:
        assert getattr(old_module, name) is getattr(door_module, name), (old, name)


def test_classes_in_other_signatures_name_the_door_and_every_class_keeps_its_hints() -> None:
    """Signatures in docs/api.md name the public path (``vinlens.store.format.BlockKind``),
    and ``typing.get_type_hints`` still resolves every public class of a room's door."""
    import typing

    import vinlens.store.compare as compare
    import vinlens.store.coverage as coverage
    import vinlens.store.format as fmt
    import vinlens.store.reader as reader

    for name in ("BlockKind", "Capabilities", "MaterializedBlocks", "StoreBlockSpec"):
        assert getattr(fmt, name).__module__ == "vinlens.store.format", name
    assert "_contract" not in str(typing.get_type_hints(fmt.VinOfflineManifest))
    for door in (fmt, reader, coverage, compare):
        for name in door.__all__:
            value = getattr(door, name)
            if isinstance(value, type):
                typing.get_type_hints(value)  # raises NameError where a hint does not resolve
