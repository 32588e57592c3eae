"""``vinlens demo``: the demo store and notebooks, opened in JupyterLab (or run headless)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "run"]

HELP = "make the demo store and notebooks, then open the tour in JupyterLab"
DESCRIPTION = (
    "Generate a synthetic VIN offline store and raw tar shards (once, cached), write the "
    "tour notebooks where missing, and start JupyterLab on 127.0.0.1 with token auth. "
    "The demo lives in --dir, else $VINLENS_DEMO_DIR, else ~/.cache/vinlens/demo."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens demo``."""
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="demo directory (default: $VINLENS_DEMO_DIR or ~/.cache/vinlens/demo)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="port for JupyterLab (default: a free one)"
    )
    parser.add_argument(
        "--no-browser",
        action="store_true",
        help="do not open a browser; print the URL with its token",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="run the tour headless and exit non-zero if a cell fails",
    )
    parser.add_argument(
        "--timeout", type=int, default=600, help="per-cell timeout for --check, seconds"
    )


def run(args: argparse.Namespace) -> int:
    """Prepare the demo, then run the tour headless (``--check``) or serve it in JupyterLab."""
    from vinlens.demo.launch import check_notebook, prepare_demo, run_lab
    from vinlens.demo.notebooks import TOUR_NOTEBOOK

    data = prepare_demo(args.dir)
    # Kernels started by JupyterLab or nbclient inherit this, so the notebooks find the data.
    os.environ["VINLENS_DEMO_DIR"] = str(data.root)
    if args.check:
        return check_notebook(data.root / TOUR_NOTEBOOK, timeout=args.timeout)
    return run_lab(data, port=args.port, open_browser=not args.no_browser)
