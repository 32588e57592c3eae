"""The ``vinlens`` command line: one parser built from :data:`vinlens.cli.registry.COMMANDS`.

Nothing here or in the command modules imports torch, zarr, numpy or pandas at import
time; each handler imports what it needs, so ``vinlens --help`` and argument errors
answer at interpreter speed. Errors a user can act on (a missing file, a damaged store,
a bad option value) end in one ``vinlens: error: ...`` line naming the path and exit
code 1; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vinlens.cli.registry import COMMANDS, GROUPS, Command, Group
from vinlens.cli.table import format_table

__all__ = [
    "COMMANDS",
    "GROUPS",
    "Command",
    "Group",
    "build_parser",
    "describe_error",
    "format_table",
    "main",
]

_SubParsers = argparse._SubParsersAction  # argparse exposes no public name for it


def _debug_flag(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="on an error, show the full traceback instead of one line",
    )


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def build_parser(
    commands: Sequence[Command] = COMMANDS, groups: Sequence[Group] = GROUPS
) -> argparse.ArgumentParser:
    """The ``vinlens`` parser with one subcommand per entry of ``commands``."""
    from vinlens import __version__

    parser = argparse.ArgumentParser(
        prog="vinlens",
        description="Inspect multi-camera VIN models, their tensors and offline training stores.",
    )
    parser.add_argument("--version", action="version", version=f"vinlens {__version__}")
    _debug_flag(parser, default=False)
    parser.set_defaults(handler=lambda _args: _print_help(parser))
    known_groups = {g.name: g for g in groups}
    subparsers: dict[tuple[str, ...], _SubParsers[argparse.ArgumentParser]] = {
        (): parser.add_subparsers(dest="command", metavar="COMMAND")
    }
    for command in commands:
        *path, leaf = command.name.split()
        for depth in range(len(path)):
            prefix = tuple(path[: depth + 1])
            if prefix in subparsers:
                continue
            name = prefix[-1]
            if " ".join(prefix) not in known_groups:
                raise ValueError(f"command {command.name!r}: no group {' '.join(prefix)!r}")
            group = known_groups[" ".join(prefix)]
            group_parser = subparsers[prefix[:-1]].add_parser(
                name, help=group.help, description=group.description
            )
            _debug_flag(group_parser, default=argparse.SUPPRESS)
            group_parser.set_defaults(handler=lambda _args, p=group_parser: _print_help(p))
            subparsers[prefix] = group_parser.add_subparsers(
                dest="_".join(prefix) + "_command", metavar="COMMAND"
            )
        leaf_parser = subparsers[tuple(path)].add_parser(
            leaf, help=command.help, description=command.description
        )
        # SUPPRESS keeps `vinlens --debug store info` working: only the level that
        # sees the flag sets it, so it may come before or after any command word.
        _debug_flag(leaf_parser, default=argparse.SUPPRESS)
        command.add_arguments(leaf_parser)
        leaf_parser.set_defaults(handler=command.run)
    return parser


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def describe_error(exc: BaseException) -> str | None:
    """One line for an error the user can act on, naming the path; ``None`` for a bug.

    OSErrors (missing files, permissions, symlink loops, a file where a directory is
    expected), the store's errors (``VinOfflineStoreError`` is a ``ValueError``), bad
    values and missing optional extras are the user's to fix; anything else is a bug
    and keeps its traceback.
    """
    if isinstance(exc, OSError):
        if exc.filename is None:
            return _one_line(str(exc))
        where = os.fsdecode(exc.filename)
        if exc.filename2 is not None:
            where = f"{where} -> {os.fsdecode(exc.filename2)}"
        return _one_line(f"{where}: {exc.strerror or exc}")
    if isinstance(exc, ValueError | RuntimeError | ImportError):
        return _one_line(str(exc)) or type(exc).__name__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``vinlens`` command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("vinlens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`vinlens ... | head`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:
        message = describe_error(exc)
        if args.debug or message is None:
            raise
        print(f"vinlens: error: {message}", file=sys.stderr)
        return 1
