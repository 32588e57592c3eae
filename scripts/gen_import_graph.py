"""Write the real package-level import graph of ``src/vinlens`` into docs/architecture.md.

The graph is read from the source with ``ast`` (every ``import`` / ``from ... import``,
including the ones inside functions that keep heavy or optional imports lazy), grouped by
the units the architecture talks about: the two bottom modules (``operations``,
``hooks``), ``workers``, each engine package, ``store.diagnostics`` apart from ``store``,
the outputs and the widgets. It replaces what stands between the two markers below in
docs/architecture.md; ``--check`` only says whether that text is current (the docs test
runs it).

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

#: Units of the graph, most specific first: a module belongs to the first unit it falls in.
UNITS = (
    "vinlens.store.diagnostics",
    "vinlens.operations",
    "vinlens.hooks",
    "vinlens.workers",
    "vinlens.model_inspection",
    "vinlens.health",
    "vinlens.attribution",
    "vinlens.store",
    "vinlens.export",
    "vinlens.plotting",
    "vinlens.widgets",
    "vinlens.cli",
    "vinlens.demo",
)


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def unit_of(module: str) -> str | None:
    for unit in UNITS:
        if module == unit or module.startswith(unit + "."):
            return unit
    return None


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
    rel = Path(*unit.split(".")[1:])
    return (SRC / rel).is_dir() or (SRC / rel).with_suffix(".py").is_file()


def short(unit: str) -> str:
    return unit.removeprefix("vinlens.")


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
        for target in sorted(edges[unit], key=UNITS.index):
            lines.append(
                f"  {short(unit).replace('.', '_')}[{short(unit)}] --> "
                f"{short(target).replace('.', '_')}[{short(target)}]"
            )
    lines += ["```", "", "| unit | imports |", "| --- | --- |"]
    for unit, targets in edges.items():
        names = ", ".join(f"`{short(t)}`" for t in sorted(targets, key=UNITS.index)) or "—"
        lines.append(f"| `{short(unit)}` | {names} |")
    lines += ["", END]
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
