"""Every store error lives in ``store.errors``: the project imports it from there only, and
the modules that re-export it hand out the very same class."""

from __future__ import annotations

import ast
from pathlib import Path

import vinlens.store as store
import vinlens.store.access as access
import vinlens.store.diagnostics as diagnostics
import vinlens.store.diagnostics.records as diagnostics_records
import vinlens.store.errors as errors
import vinlens.store.format as fmt
import vinlens.store.tarscan as tarscan

REPO = Path(__file__).resolve().parents[2]


def test_store_errors_are_imported_only_from_the_errors_module():
    names = set(errors.__all__)
    wrong = []
    for root in ("src", "benchmarks", "scripts"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("vinlens")
                    and node.module != "vinlens.store.errors"
                ):
                    wrong += [
                        f"{path.relative_to(REPO)}:{node.lineno} {a.name} from {node.module}"
                        for a in node.names
                        if a.name in names
                    ]
    assert not wrong, "import store errors from vinlens.store.errors:\n" + "\n".join(wrong)


def test_old_error_import_paths_still_work_and_are_the_same_classes():
    for module in (store, fmt, access, tarscan):
        for name in errors.__all__:
            if hasattr(module, name):
                assert getattr(module, name) is getattr(errors, name), (module.__name__, name)
    assert fmt.ManifestError is errors.ManifestError
    assert store.StoreReplacedError is errors.StoreReplacedError
    assert access.StoreAccessError is errors.StoreAccessError
    assert tarscan.TarScanError is errors.TarScanError


def test_the_request_replacement_error_is_a_store_error_on_every_import_path():
    from vinlens.store.diagnostics.records import VinOfflineStoreReplacedError

    assert VinOfflineStoreReplacedError is errors.VinOfflineStoreReplacedError
    assert diagnostics.VinOfflineStoreReplacedError is errors.VinOfflineStoreReplacedError
    assert diagnostics_records.VinOfflineStoreReplacedError is errors.VinOfflineStoreReplacedError
    # Callers catching the generic replacement (or any store error) still catch it.
    assert issubclass(VinOfflineStoreReplacedError, errors.StoreReplacedError)
    assert issubclass(VinOfflineStoreReplacedError, errors.VinlensStoreError)
