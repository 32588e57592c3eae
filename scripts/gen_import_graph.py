"""Write the real package-level import graph of ``src/vinlens`` into docs/architecture.md.

The graph is read from the source with ``ast`` (every ``import`` / ``from ... import``,
including the ones inside functions that keep heavy or optional imports lazy), grouped by
the units the architecture talks about: the bottom modules (``operations``, ``hooks``,
``wrappers``), ``workers``, each engine package, ``store.diagnostics`` apart from ``store``,
the outputs and the widgets; the store is split into its layers: ``store.compare`` above
``store.diagnostics`` above the store core, and the ``store`` package's ``__init__``
(which re-exports every subpackage) apart from the core it re-exports.

``MAY_IMPORT`` is the layering rule: for each unit, the units it may import.
:func:`violations` lists every arrow of a graph the rule does not allow; the docs test
fails on any, so a new arrow against the layering is a failing test, not a drift. The
rule is written into docs/architecture.md with the graph. This script replaces what
stands between the two markers below in docs/architecture.md; ``--check`` only says
whether that text is current (the docs test runs it).

    python scripts/gen_import_graph.py          # rewrite the section
    python scripts/gen_import_graph.py --check  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "vinlens"
DOC = ROOT / "docs" / "architecture.md"
START = "<!-- import-graph:start (scripts/gen_import_graph.py writes this section) -->"
END = "<!-- import-graph:end -->"

#: The ``store`` package's own ``__init__`` (re-exporting every subpackage): a unit apart
#: from the store core, since it imports the layers above the core.
STORE_DOOR = "vinlens.store.__init__"

#: Units of the graph, most specific first: a module belongs to the first unit it falls in.
UNITS = (
    "vinlens.errors",
    "vinlens.store.compare",
    "vinlens.store.diagnostics",
    STORE_DOOR,
    "vinlens.operations",
    "vinlens.hooks",
    "vinlens.workers",
    "vinlens.wrappers",
    "vinlens.model_inspection",
    "vinlens.health",
    "vinlens.attribution",
    "vinlens.store",
    "vinlens.export",
    "vinlens.plotting",
    "vinlens.widgets",
    "vinlens.cli",
    "vinlens.demo",
    "vinlens.integrations",
)


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


_BOTTOM = frozenset({"vinlens.operations", "vinlens.hooks", "vinlens.wrappers"})
_ENGINES = frozenset(
    {
        "vinlens.model_inspection",
        "vinlens.health",
        "vinlens.attribution",
        "vinlens.store",
        "vinlens.store.diagnostics",
        "vinlens.store.compare",
        STORE_DOOR,
    }
)
_OUTPUTS = frozenset({"vinlens.export", "vinlens.plotting"})

#: The layering rule (docs/architecture.md, "Who may import whom"): the units each unit may
#: import. Engines build only downwards; inside the store, ``store.compare`` ->
#: ``store.diagnostics`` -> the store core, never back; outputs build on engines; the
#: widgets, the CLI and the demo sit on top. An arrow missing here fails tests/test_docs.py.
_RULE: dict[str, frozenset[str]] = {
    "vinlens.errors": frozenset(),
    "vinlens.operations": frozenset(),
    "vinlens.hooks": frozenset(),
    "vinlens.workers": frozenset({"vinlens.operations"}),
    "vinlens.wrappers": frozenset(),
    "vinlens.model_inspection": _BOTTOM | {"vinlens.workers"},
    "vinlens.health": _BOTTOM | {"vinlens.workers", "vinlens.model_inspection"},
    "vinlens.attribution": _BOTTOM | {"vinlens.workers", "vinlens.model_inspection"},
    "vinlens.store": frozenset({"vinlens.operations", "vinlens.workers"}),
    "vinlens.store.diagnostics": frozenset(
        {"vinlens.operations", "vinlens.workers", "vinlens.store"}
    ),
    "vinlens.store.compare": frozenset(
        {"vinlens.operations", "vinlens.workers", "vinlens.store", "vinlens.store.diagnostics"}
    ),
    STORE_DOOR: frozenset({"vinlens.store", "vinlens.store.diagnostics", "vinlens.store.compare"}),
    "vinlens.export": _BOTTOM | _ENGINES,
    "vinlens.plotting": _BOTTOM | _ENGINES,
    "vinlens.widgets": _BOTTOM | _ENGINES | _OUTPUTS | {"vinlens.workers"},
    "vinlens.cli": _BOTTOM | _ENGINES | _OUTPUTS | {"vinlens.workers", "vinlens.demo"},
    "vinlens.demo": _BOTTOM | _ENGINES | _OUTPUTS | {"vinlens.workers"},
    "vinlens.integrations": _BOTTOM | {"vinlens.workers", "vinlens.health"},
}
#: ``vinlens.errors`` holds only the root of every error: any unit may raise a VinlensError.
MAY_IMPORT: dict[str, frozenset[str]] = {
    unit: allowed | ({"vinlens.errors"} if unit != "vinlens.errors" else set())
    for unit, allowed in _RULE.items()
}


def unit_of(module: str) -> str | None:
    if module == "vinlens.store":
        return STORE_DOOR
    for unit in UNITS:
        if module == unit or module.startswith(unit + "."):
            return unit
    return None


def violations(
    edges: dict[str, set[str]], rule: dict[str, frozenset[str]] | None = None
) -> list[str]:
    """Every arrow of ``edges`` that ``rule`` (default :data:`MAY_IMPORT`) does not allow.

    A unit the rule does not know is a violation too, so a new unit must state its layer.
    """
    rule = MAY_IMPORT if rule is None else rule
    found = []
    for unit, targets in edges.items():
        if unit not in rule:
            found.append(f"{short(unit)} has no layer in MAY_IMPORT")
            continue
        found += [
            f"{short(unit)} -> {short(t)}"
            for t in sorted(targets, key=_order)
            if t not in rule[unit]
        ]
    return found


def _order(unit: str) -> int:
    return UNITS.index(unit) if unit in UNITS else len(UNITS)


def imported_modules(path: Path, module: str) -> set[str]:
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = module.split(".") if is_pkg else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("vinlens")}


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {unit: set() for unit in UNITS}
    for path in sorted(SRC.rglob("*.py")):
        source = unit_of(module_name(path))
        if source is None:
            continue
        for target in imported_modules(path, module_name(path)):
            unit = unit_of(target)
            if unit is not None and unit != source:
                edges[source].add(unit)
    return {unit: targets for unit, targets in edges.items() if targets or _exists(unit)}


def _exists(unit: str) -> bool:
    if unit == STORE_DOOR:
        return (SRC / "store" / "__init__.py").is_file()
    rel = Path(*unit.split(".")[1:])
    return (SRC / rel).is_dir() or (SRC / rel).with_suffix(".py").is_file()


def short(unit: str) -> str:
    return unit.removeprefix("vinlens.")


def _node(unit: str) -> str:
    return f"{short(unit).replace('.', '_')}[{short(unit)}]"


def render(edges: dict[str, set[str]]) -> str:
    lines = [
        START,
        "",
        "Who imports whom, read from the source by `scripts/gen_import_graph.py` (imports",
        "inside functions included; `tests/test_docs.py` fails when this section is stale).",
        "Arrows point from the importer to what it imports.",
        "",
        "```mermaid",
        "graph TD",
    ]
    for unit in edges:
        for target in sorted(edges[unit], key=_order):
            lines.append(f"  {_node(unit)} --> {_node(target)}")
    lines += ["```", "", "| unit | imports | may import (`MAY_IMPORT`) |", "| --- | --- | --- |"]
    for unit, targets in edges.items():
        names = ", ".join(f"`{short(t)}`" for t in sorted(targets, key=_order)) or "—"
        allowed = ", ".join(f"`{short(t)}`" for t in sorted(MAY_IMPORT.get(unit, ()), key=_order))
        lines.append(f"| `{short(unit)}` | {names} | {allowed or '—'} |")
    lines += [
        "",
        "The last column is the layering rule, `MAY_IMPORT` in the script: `tests/test_docs.py`",
        "fails on any arrow it does not allow (inside the store: `store.compare` →",
        "`store.diagnostics` → the store core, never back; `store.__init__` is the",
        "package's `__init__` (`vinlens/store/__init__.py`, which re-exports every subpackage).",
        "",
        END,
    ]
    return "\n".join(lines)


def updated(text: str, section: str) -> str:
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        return head + section + tail
    return text.rstrip("\n") + "\n\n## The import graph\n\n" + section + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the section is stale")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = updated(text, render(graph()))
    if args.check:
        if new != text:
            print(f"{DOC}: the import graph is stale; run python scripts/gen_import_graph.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
