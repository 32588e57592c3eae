"""Every public name docs/api.md lists imports from the module it is listed under, and every
exception class vinlens defines is a VinlensError of a builtin family."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import vinlens
from vinlens.errors import VinlensError

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def listed_names() -> list[tuple[str, str]]:
    """``(module, name)`` of every entry in docs/api.md."""
    found: list[tuple[str, str]] = []
    module = None
    for line in API.read_text().splitlines():
        if match := re.match(r"^## `([\w.]+)`$", line):
            module = match.group(1)
        elif (match := re.match(r"^### `(\w+)", line)) and module is not None:
            found.append((module, match.group(1)))
    return found


NAMES = listed_names()


def test_the_reference_lists_names() -> None:
    modules = {m for m, _ in NAMES}
    assert {"vinlens", "vinlens.errors", "vinlens.health", "vinlens.widgets"} <= modules
    assert ("vinlens.health", "TrainingMonitor") in NAMES
    assert ("vinlens.errors", "VinlensError") in NAMES


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" for m, n in NAMES])
def test_each_listed_name_imports_from_its_module(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


# Old import paths users have in their code: they must keep resolving to the same objects.
OLD_PATHS = [
    ("vinlens.health.runlog", "open_run", "vinlens.health", "open_run"),
    ("vinlens.health.runlog", "TrainingRun", "vinlens.health", "TrainingRun"),
    ("vinlens.health.runlog", "DEFAULT_REPLAY_MAX_BYTES", "vinlens.health.monitor", None),
    ("vinlens.health.monitor", "TrainingMonitor", "vinlens.health", "TrainingMonitor"),
    ("vinlens.health.monitor", "HistoryMatrix", "vinlens.health", "HistoryMatrix"),
    ("vinlens.health.monitor", "SUMMARY_FIELDS", "vinlens.health.monitor._records", None),
]


@pytest.mark.parametrize(("old", "name", "new", "new_name"), OLD_PATHS)
def test_old_import_paths_still_work(old: str, name: str, new: str, new_name: str | None) -> None:
    value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), new_name or name)


# Raised to unwind a lockstep forward through any user ``except Exception`` in between: a
# BaseException by design, never seen by a caller.
CONTROL_FLOW = {"vinlens.health.diff._Abort"}
OPTIONAL = ("vinlens.integrations",)  # need their extras; their modules define no exception


def vinlens_exceptions() -> list[type[BaseException]]:
    for info in pkgutil.walk_packages(vinlens.__path__, "vinlens."):
        if not info.name.startswith(OPTIONAL) and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    seen: dict[str, type[BaseException]] = {}
    stack: list[type[BaseException]] = [BaseException]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub.__module__.startswith("vinlens"):
                seen.setdefault(f"{sub.__module__}.{sub.__qualname__}", sub)
            stack.append(sub)
    return list(seen.values())


def test_every_vinlens_exception_is_a_vinlens_error_of_a_builtin_family() -> None:
    found = vinlens_exceptions()
    assert len(found) >= 30
    roots = {VinlensError, importlib.import_module("vinlens.store.errors").VinlensStoreError}
    for cls in found:
        where = f"{cls.__module__}.{cls.__qualname__}"
        if where in CONTROL_FLOW:
            continue
        assert issubclass(cls, VinlensError), where
        if cls not in roots:
            families = [
                b
                for b in inspect.getmro(cls)[1:]
                if b.__module__ == "builtins" and b not in (Exception, BaseException, object)
            ]
            assert families, f"{where} derives from no builtin family"
