"""``vinlens demo`` command."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="make the demo store and notebooks, then open the tour in JupyterLab",
        description=(
            "Generate a synthetic VIN offline store and raw tar shards (once, cached), write the "
            "tour notebooks where missing, and start JupyterLab on 127.0.0.1 with token auth."
        ),
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="cache directory (default: $VINLENS_DEMO_DIR or ~/.cache/vinlens/demo)",
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
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from vinlens.demo.launch import check_notebook, prepare_demo, run_lab
    from vinlens.demo.notebooks import TOUR_NOTEBOOK

    data = prepare_demo(args.dir)
    # Kernels started by JupyterLab or nbclient inherit this, so the notebooks find the data.
    os.environ["VINLENS_DEMO_DIR"] = str(data.root)
    if args.check:
        return check_notebook(data.root / TOUR_NOTEBOOK, timeout=args.timeout)
    return run_lab(data, port=args.port, open_browser=not args.no_browser)
