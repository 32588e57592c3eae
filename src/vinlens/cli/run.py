"""``vinlens run show``: what a training run log holds (written by ``TrainingMonitor(log_dir=)``)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from vinlens.cli.store import add_storage_option_argument, parse_storage_options
from vinlens.cli.table import format_table

__all__ = ["SHOW_DESCRIPTION", "SHOW_HELP", "add_show_arguments", "show"]

SHOW_HELP = "summarize a training run log"
SHOW_DESCRIPTION = (
    "Steps, sampled steps, ranks, the non-finite events (step, rank, module, parameters) and"
    " the modules with the largest gradient norms of a run log written by"
    " TrainingMonitor(log_dir=...), local or on object storage, finished or still growing."
)
_TOP = 10


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log_dir", metavar="LOG_DIR", help="run directory or URL (s3://, ...)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_storage_option_argument(parser)


def show(args: argparse.Namespace) -> int:
    import numpy as np

    from vinlens.health import open_run

    try:
        run = open_run(args.log_dir, storage_options=parse_storage_options(args.storage_options))
    except (FileNotFoundError, ValueError, TypeError) as error:
        print(f"vinlens run show: {error}")
        return 2
    ranks: list[dict[str, Any]] = []
    for rank in run.ranks:
        series = run.step_series(rank)
        matrix = run.history_matrix("grad_norm", rank)
        with np.errstate(all="ignore"):
            peaks = [
                float(np.nanmax(row)) if np.isfinite(row).any() else math.nan
                for row in np.where(np.isfinite(matrix.values), matrix.values, np.nan)
            ]
        order = sorted(
            (i for i, p in enumerate(peaks) if math.isfinite(p)), key=lambda i: -peaks[i]
        )
        ranks.append(
            {
                "rank": rank,
                "steps": len(series.steps),
                "sampled_steps": len(matrix.steps),
                "top_grad_norm": [
                    {"module": matrix.module_paths[i], "max_grad_norm": peaks[i]}
                    for i in order[:_TOP]
                ],
            }
        )
    events: list[dict[str, Any]] = [
        {
            "step": e.step,
            "rank": e.rank,
            "module": None if e.origin is None else e.origin.module_path,
            "parameters": [] if e.origin is None else list(e.origin.parameter_paths),
        }
        for e in run.events
    ]
    if args.json:
        print(json.dumps({"log_dir": str(args.log_dir), "ranks": ranks, "events": events}))
        return 0
    print(f"run log {args.log_dir}: ranks {', '.join(str(r['rank']) for r in ranks)}")
    print(
        format_table(
            ["rank", "steps", "sampled steps"],
            [[str(r["rank"]), str(r["steps"]), str(r["sampled_steps"])] for r in ranks],
        )
    )
    print(f"non-finite events: {len(events)}")
    if events:
        print(
            format_table(
                ["step", "rank", "module", "parameters"],
                [
                    [str(e["step"]), str(e["rank"]), str(e["module"]), ", ".join(e["parameters"])]
                    for e in events
                ],
            )
        )
    for r in ranks:
        print(f"largest gradient norms (rank {r['rank']}):")
        print(
            format_table(
                ["module", "max grad norm"],
                [[t["module"], f"{t['max_grad_norm']:.4g}"] for t in r["top_grad_norm"]],
            )
        )
    return 0
