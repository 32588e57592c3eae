"""The documentation that is generated or copied stays in step with the code and the spec."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", REPO / "scripts" / "gen_api_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current():
    generated = _load_generator().render()
    committed = (REPO / "docs" / "api.md").read_text()
    assert committed == generated, (
        "docs/api.md is stale: run `.venv/bin/python scripts/gen_api_docs.py`"
    )


def test_api_reference_names_every_seed_name():
    text = (REPO / "docs" / "api.md").read_text()
    for name in [
        "CaptureLimits", "ConfigFieldSpec", "ModelCapture", "ModelMetadata", "ModelStructureSpec",
        "ModuleMetadata", "TensorSnapshot", "capture_model", "inspect_config", "inspect_model",
        "NumericSummary", "VinOfflineBackboneDiagnostic", "VinOfflineBlockDiagnostic",
        "VinOfflineCoverageSceneDiagnostic", "VinOfflineCoverageStats", "VinOfflineDatasetStats",
        "VinOfflineDatasetStatsRequest", "VinOfflineMemoryDiagnostic", "VinOfflineSampleDiagnostic",
        "capture_vin_offline_dataset_stats_request", "collect_vin_offline_dataset_coverage",
        "collect_vin_offline_dataset_stats", "inspect_vin_offline_dataset_stats",
        "GradientCapture", "ActivationCapture", "select_tensor_output", "select_camera_tensor",
        "replace_camera_tensor", "should_capture_invocation",
    ]:  # fmt: skip
        assert re.search(rf"### `{name}\b", text), f"{name} missing from docs/api.md"


def _section(text: str, module: str) -> str:
    start = text.index(f"## `{module}`\n")
    end = text.find("\n## `", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_api_reference_has_an_entry_for_every_public_name():
    """Each name in a documented module's ``__all__`` has its own entry in that module's section."""
    import importlib

    text = (REPO / "docs" / "api.md").read_text()
    missing = []
    for modname in _load_generator().MODULES:
        module = importlib.import_module(modname)
        section = _section(text, modname)
        for name in getattr(module, "__all__", ()):
            if not re.search(rf"^### `{re.escape(name)}\b", section, re.M):
                missing.append(f"{modname}.{name}")
    assert not missing, f"public names without an entry in docs/api.md: {missing}"


def test_every_widget_class_is_public_and_documented_with_its_constructor():
    """Every ``*Widget`` class of a widget module is in ``vinlens.widgets.__all__`` and api.md.

    (Shared trait bases such as ``ModuleTableState`` are building blocks, not widgets.)
    """
    import importlib
    import inspect
    import pkgutil

    import anywidget

    import vinlens.widgets as widgets

    text = _section((REPO / "docs" / "api.md").read_text(), "vinlens.widgets")
    found = set()
    for info in pkgutil.iter_modules(widgets.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"vinlens.widgets.{info.name}")
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, anywidget.AnyWidget)
                and obj.__module__ == module.__name__
                and name.endswith("Widget")
            ):
                found.add(name)
    assert found, "no widget classes found"
    assert found <= set(widgets.__all__), sorted(found - set(widgets.__all__))
    for name in sorted(found):
        cls = getattr(widgets, name)
        assert f"### `{name}{inspect.signature(cls)}`" in text, name
        assert (inspect.getdoc(cls) or "").split("\n")[0] in text, name


def test_store_format_doc_keeps_the_normative_spec():
    """docs/store-format.md is the spec plus implementation notes: every spec heading survives."""
    doc = (REPO / "docs" / "store-format.md").read_text()
    for heading in [
        "## Layout",
        "## manifest.json",
        "## sample_index.jsonl",
        "## Blocks",
        "## Raw dataset tar shards (coverage)",
        "## Generation and request digest",
    ]:
        assert heading in doc


def _load_import_graph():
    spec = importlib.util.spec_from_file_location(
        "gen_import_graph", REPO / "scripts" / "gen_import_graph.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_architecture_import_graph_is_current():
    module = _load_import_graph()
    committed = (REPO / "docs" / "architecture.md").read_text()
    assert module.updated(committed, module.render(module.graph())) == committed, (
        "the import graph in docs/architecture.md is stale: run "
        "`.venv/bin/python scripts/gen_import_graph.py`"
    )
    # The bottom modules import no other vinlens unit but the error root: every engine may
    # build on them.
    edges = module.graph()
    assert edges["vinlens.operations"] <= {"vinlens.errors"}
    assert edges["vinlens.hooks"] <= {"vinlens.errors"}
    assert edges["vinlens.errors"] == set()


def test_the_import_graph_proves_the_written_layering():
    """Every arrow of the real graph is one ``MAY_IMPORT`` (shown in architecture.md) allows."""
    module = _load_import_graph()
    assert module.violations(module.graph()) == []
    # The graph speaks for the whole package: every module but the root is in a unit.
    unplaced = [
        name
        for path in sorted(module.SRC.rglob("*.py"))
        if (name := module.module_name(path)) != "vinlens" and module.unit_of(name) is None
    ]
    assert unplaced == []
    # Inside the store: compare above diagnostics above the core, and the door apart.
    assert module.unit_of("vinlens.store") == module.STORE_DOOR
    assert module.unit_of("vinlens.store.compare") == "vinlens.store.compare"
    assert module.unit_of("vinlens.store.reader._core") == "vinlens.store"
    rule = module.MAY_IMPORT
    assert "vinlens.store.diagnostics" in rule["vinlens.store.compare"]
    assert "vinlens.store.compare" not in rule["vinlens.store.diagnostics"]
    assert not {"vinlens.store.diagnostics", "vinlens.store.compare"} & rule["vinlens.store"]


def test_an_arrow_against_the_layering_fails():
    """Synthetic edges the rule forbids are each reported; an unknown unit is too."""
    module = _load_import_graph()
    edges = {unit: set(targets) for unit, targets in module.graph().items()}
    edges["vinlens.store.diagnostics"].add("vinlens.store.compare")
    edges["vinlens.store"].add("vinlens.store.diagnostics")
    edges["vinlens.operations"].add("vinlens.hooks")
    edges["vinlens.health"].add("vinlens.widgets")
    assert sorted(module.violations(edges)) == [
        "health -> widgets",
        "operations -> hooks",
        "store -> store.diagnostics",
        "store.diagnostics -> store.compare",
    ]
    assert module.violations({"vinlens.newpkg": set()}) == ["newpkg has no layer in MAY_IMPORT"]


def test_a_new_import_line_against_the_layering_fails(tmp_path: Path):
    """The whole path: an import statement in a source file, read by the graph, is refused."""
    module = _load_import_graph()
    for rel, text in {
        "store/__init__.py": "",
        "store/format/__init__.py": "",
        "store/compare/__init__.py": "from vinlens.store.diagnostics import stats\n",
        "store/diagnostics/__init__.py": "",
        "store/diagnostics/scan.py": (
            "def later():\n    from vinlens.store.compare import _binning  # lazy, still an arrow\n"
        ),
    }.items():
        (tmp_path / "vinlens" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "vinlens" / rel).write_text(text)
    module.SRC = tmp_path / "vinlens"
    assert module.violations(module.graph()) == ["store.diagnostics -> store.compare"]
