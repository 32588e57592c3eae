"""The ``vinlens`` command line.

Each area registers its own subcommands in its own module (``register(subparsers)``),
so the engines stay importable without argparse and this file stays a table.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence

# Modules exposing ``register(subparsers: argparse._SubParsersAction) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "vinlens.cli_model",
    "vinlens.store.cli",
    "vinlens.demo.cli",
)


def format_table(
    headers: Sequence[object], rows: Sequence[Sequence[object]], *, right: Collection[int] = ()
) -> str:
    """Rows as columns separated by two spaces under a header rule; ``right`` columns right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *map(line, cells[1:])])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vinlens",
        description="Inspect multi-camera VIN models, their tensors and offline training stores.",
    )
    from vinlens import __version__

    parser.add_argument("--version", action="version", version=f"vinlens {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"vinlens: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
