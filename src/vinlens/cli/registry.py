"""Every ``vinlens`` command in one table.

A command is a name (group words, then the command: ``"store stats"``), its help, a
function adding its options to an argparse parser and a handler returning the exit
code. Command modules import nothing heavy at import time, so building the whole
parser (for ``--help`` or an argument error) stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NamedTuple

from vinlens.cli import demo, model, run, store, store_compare

__all__ = ["COMMANDS", "GROUPS", "Command", "Group"]


class Group(NamedTuple):
    """A word that gathers commands (``vinlens store ...``)."""

    name: str
    help: str
    description: str


class Command(NamedTuple):
    """One ``vinlens`` command: ``name`` is its words after ``vinlens``, space-separated."""

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


GROUPS: tuple[Group, ...] = (
    Group(
        "store",
        "write demo stores and inspect VIN offline stores",
        "Write demo stores and inspect VIN offline stores (format v1), local or on object storage.",
    ),
    Group(
        "run",
        "inspect training run logs",
        "Inspect training run logs written by TrainingMonitor(log_dir=...).",
    ),
)

COMMANDS: tuple[Command, ...] = (
    Command("model", model.HELP, model.DESCRIPTION, model.add_arguments, model.run),
    Command(
        "store make-demo",
        store.MAKE_DEMO_HELP,
        store.MAKE_DEMO_DESCRIPTION,
        store.add_make_demo_arguments,
        store.make_demo,
    ),
    Command(
        "store info", store.INFO_HELP, store.INFO_DESCRIPTION, store.add_info_arguments, store.info
    ),
    Command(
        "store stats",
        store.STATS_HELP,
        store.STATS_DESCRIPTION,
        store.add_stats_arguments,
        store.stats,
    ),
    Command(
        "store coverage",
        store.COVERAGE_HELP,
        store.COVERAGE_DESCRIPTION,
        store.add_coverage_arguments,
        store.coverage,
    ),
    Command(
        "store compare",
        store_compare.COMPARE_HELP,
        store_compare.COMPARE_DESCRIPTION,
        store_compare.add_compare_arguments,
        store_compare.compare,
    ),
    Command("run show", run.SHOW_HELP, run.SHOW_DESCRIPTION, run.add_show_arguments, run.show),
    Command(
        "run replay",
        run.REPLAY_HELP,
        run.REPLAY_DESCRIPTION,
        run.add_replay_arguments,
        run.replay,
    ),
    Command("run diff", run.DIFF_HELP, run.DIFF_DESCRIPTION, run.add_diff_arguments, run.diff),
    Command("demo", demo.HELP, demo.DESCRIPTION, demo.add_arguments, demo.run),
)
