"""Import paths of earlier releases keep working.

A module that became a package (``format``, ``reader``, ...) kept its name; the few flat
modules whose names moved into a package stay as thin modules re-exporting that package's
objects, so old imports get the very same classes and functions.
"""

from __future__ import annotations

import importlib

import pytest

#: old flat module -> the package its names now come from
OLD_PATHS = {
    "vinlens.store.records": "vinlens.store.format",
    "vinlens.store.sample": "vinlens.store.format",
    "vinlens.store.tarscan": "vinlens.store.coverage",
}


@pytest.mark.parametrize(("old", "package"), sorted(OLD_PATHS.items()))
def test_old_module_re_exports_the_packages_objects(old: str, package: str) -> None:
    old_module = importlib.import_module(old)
    package_module = importlib.import_module(package)
    assert old_module.__all__, old
    for name in old_module.__all__:
        assert getattr(old_module, name) is getattr(package_module, name), (old, name)


def test_classes_in_other_signatures_name_the_package_and_every_class_keeps_its_hints() -> None:
    """Signatures in docs/api.md name the public path (``vinlens.store.format.BlockKind``),
    and ``typing.get_type_hints`` still resolves every public class of each package."""
    import typing

    import vinlens.store.compare as compare
    import vinlens.store.coverage as coverage
    import vinlens.store.format as fmt
    import vinlens.store.reader as reader

    for name in ("BlockKind", "Capabilities", "MaterializedBlocks", "StoreBlockSpec"):
        assert getattr(fmt, name).__module__ == "vinlens.store.format", name
    hints = str(typing.get_type_hints(fmt.VinOfflineManifest))
    assert "_contract" not in hints and "_models" not in hints
    for package in (fmt, reader, coverage, compare):
        for name in package.__all__:
            value = getattr(package, name)
            if isinstance(value, type):
                typing.get_type_hints(value)  # raises NameError where a hint does not resolve
