"""The ``vinlens`` command line.

Each area registers its own subcommands in its own module (``register(subparsers)``),
so the engines stay importable without argparse and this file stays a table.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules exposing ``register(subparsers: argparse._SubParsersAction) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "vinlens.cli_model",
    "vinlens.store.cli",
    "vinlens.demo.cli",
)


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
