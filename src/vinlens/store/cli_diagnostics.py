"""``vinlens store stats`` and ``vinlens store coverage``: store diagnostics on the command line.

Readable tables by default; ``--json`` prints one JSON object (the record, with NaN and
infinities spelled out as strings) for scripts. Long scans draw a progress bar on stderr
when stderr is a terminal (``--progress``/``--no-progress`` force it on or off), so stdout
stays clean for pipes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from vinlens.store.cli import format_table
from vinlens.store.coverage import VinOfflineCoverageStats, collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import (
    NumericSummary,
    VinOfflineDatasetStats,
    capture_vin_offline_dataset_stats_request,
    inspect_vin_offline_dataset_stats_with_progress,
)
from vinlens.store.format import VinOfflineStoreConfig

__all__ = [
    "ProgressBar",
    "format_coverage",
    "format_stats",
    "register_store_commands",
    "to_json_value",
]


def register_store_commands(
    store_subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``stats`` and ``coverage`` to the ``vinlens store`` command group."""
    stats = store_subparsers.add_parser(
        "stats",
        help="diagnostics of a store: splits, candidates, RRI, poses, backbone, memory",
        description=(
            "Collect store diagnostics (seed 001). Rows for per-sample statistics are "
            "chosen deterministically, spread over splits and shards."
        ),
    )
    stats.add_argument("path", type=Path, help="store directory")
    budget = stats.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-samples",
        type=_non_negative_int,
        default=512,
        metavar="N",
        help="rows scanned for per-sample statistics (default 512)",
    )
    budget.add_argument("--all", action="store_true", help="scan every row (memory stays bounded)")
    stats.add_argument("--json", action="store_true", help="print the record as JSON")
    _progress_flags(stats)
    stats.set_defaults(handler=_stats)

    coverage = store_subparsers.add_parser(
        "coverage",
        help="which raw ASE snippets (tar headers) the store contains",
        description="Compare the raw WebDataset tar shards under --raw with the store.",
    )
    coverage.add_argument("path", type=Path, help="store directory")
    coverage.add_argument(
        "--raw", type=Path, required=True, metavar="DIR", help="raw dataset directory (*.tar)"
    )
    coverage.add_argument(
        "--max-tars", type=_non_negative_int, default=None, metavar="N", help="scan N tars only"
    )
    coverage.add_argument("--json", action="store_true", help="print the record as JSON")
    _progress_flags(coverage)
    coverage.set_defaults(handler=_coverage)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


class ProgressBar:
    """A one-line ``[#####.....] done/total unit`` bar redrawn in place on ``stream``."""

    def __init__(self, label: str, unit: str, stream: IO[str], width: int = 30) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream
        self.width = width
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return  # redraw at most ten times a second
        self._last = now
        filled = self.width if total == 0 else int(self.width * done / total)
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {self.unit}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _progress(args: argparse.Namespace, label: str, unit: str) -> ProgressBar | None:
    enabled = args.progress if args.progress is not None else sys.stderr.isatty()
    return ProgressBar(label, unit, sys.stderr) if enabled else None


def to_json_value(value: Any) -> Any:
    """JSON-safe form of a record: dataclasses to dicts, tuples to lists, NaN/inf as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Path):
        return str(value)
    return value


def _print_json(record: Any) -> None:
    print(json.dumps(to_json_value(record), indent=2, allow_nan=False))


def _run_with_progress(
    bar: ProgressBar | None, work: Callable[[Callable[[int, int], None] | None], Any]
) -> Any:
    try:
        return work(bar)
    finally:
        if bar is not None:
            bar.close()


def _stats(args: argparse.Namespace) -> int:
    max_samples = None if args.all else args.max_samples
    request = capture_vin_offline_dataset_stats_request(args.path, max_samples=max_samples)
    stats = _run_with_progress(
        _progress(args, "scanning", "rows"),
        lambda cb: inspect_vin_offline_dataset_stats_with_progress(request, cb),
    )
    if args.json:
        _print_json(stats)
    else:
        print(format_stats(stats))
    return 0


def _coverage(args: argparse.Namespace) -> int:
    config = VinOfflineStoreConfig(store_dir=args.path, raw_dataset_dir=args.raw)
    coverage = _run_with_progress(
        _progress(args, "reading tar headers", "tars"),
        lambda cb: collect_vin_offline_dataset_coverage(
            config, max_tars=args.max_tars, progress_cb=cb
        ),
    )
    if args.json:
        _print_json(coverage)
    else:
        print(format_coverage(coverage))
    return 0


# --------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------


def _num(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}g}"


def _summary_row(name: str, summary: NumericSummary | None) -> tuple[str, str, str, str, str]:
    if summary is None:
        return (name, "unavailable", "-", "-", "-")
    return (
        name,
        str(summary.count),
        _num(summary.minimum),
        _num(summary.mean),
        _num(summary.maximum),
    )


def _size(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} GiB"


def _section(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    if not rows:
        return ""
    return f"{title}\n{format_table(headers, rows)}\n"


def format_stats(stats: VinOfflineDatasetStats) -> str:
    """The record as readable tables (what ``vinlens store stats`` prints)."""
    flags = " ".join(f"{k}={'yes' if v else 'no'}" for k, v in stats.materialized_blocks.items())
    overview: list[tuple[str, object]] = [
        ("store", stats.store_dir),
        ("version", stats.version),
        ("samples", stats.num_samples),
        ("scanned", f"{stats.sampled_samples}" + (" (all)" if stats.max_samples is None else "")),
        ("splits", " ".join(f"{k}={v}" for k, v in stats.split_counts.items()) or "-"),
        ("scenes", stats.num_scenes),
        ("snippets", stats.num_snippets),
        ("scene_labels", "yes" if stats.scene_labels_available else "no (unavailable)"),
        ("materialized", flags),
        ("numeric_bytes", _size(stats.numeric_bytes)),
        (
            "integrity",
            "ok" if not stats.integrity_problems else f"{len(stats.integrity_problems)} problem(s)",
        ),
    ]
    parts = [format_table(("field", "value"), overview) + "\n"]
    summaries = [
        _summary_row("valid candidates / sample", stats.candidate_count),
        _summary_row("RRI (valid, finite)", stats.rri),
        _summary_row("VIN points / sample", stats.vin_points),
        *(
            _summary_row(f"RRI component {name}", s)
            for name, s in stats.rri_component_summaries.items()
        ),
        *(_summary_row(f"pose {name}", s) for name, s in stats.candidate_pose_summaries.items()),
    ]
    parts.append(_section("distributions", ("series", "count", "min", "mean", "max"), summaries))
    parts.append(
        _section(
            "backbone fields",
            ("field", "shape", "rows", "count", "mean", "std", "abs_mean", "nz_frac"),
            [
                (
                    b.field,
                    "x".join(str(n) for n in b.shape),
                    b.sampled_rows,
                    b.count,
                    _num(b.mean),
                    _num(b.std),
                    _num(b.abs_mean),
                    _num(b.nz_frac),
                )
                for b in stats.backbone_diagnostics
            ],
        )
    )
    parts.append(
        _section(
            "memory per sample (MiB)",
            ("component", "mean", "median", "p95"),
            [
                (m.component, f"{m.mean_mib:.4f}", f"{m.median_mib:.4f}", f"{m.p95_mib:.4f}")
                for m in stats.memory_diagnostics
            ],
        )
    )
    parts.append(
        _section(
            "batch preview (VinOracleBatch)",
            ("tensor", "shape"),
            [(k, list(v)) for k, v in stats.batch_shapes.items()],
        )
        if stats.batch_shapes_available
        else "batch preview: unavailable (no scene labels)\n"
    )
    pairs = [(name, len(values)) for name, values in stats.rri_component_pairs.items()]
    if stats.scene_labels_available:
        unpaired = stats.rri_pairing_unavailable_count
        pairs.append(("samples without candidate ids (unpaired)", unpaired))
        parts.append(_section("RRI/component pairs (by candidate id)", ("series", "count"), pairs))
    parts.append(
        _section(
            "integrity problems",
            ("kind", "shard", "block", "message"),
            [
                (p.kind, p.shard_id or "-", p.block or "-", p.message)
                for p in stats.integrity_problems
            ],
        )
    )
    return "\n".join(part for part in parts if part).rstrip()


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_coverage(coverage: VinOfflineCoverageStats) -> str:
    """The record as readable tables (what ``vinlens store coverage`` prints)."""
    overview: list[tuple[str, object]] = [
        ("store", coverage.store_dir),
        ("raw", coverage.raw_dataset_dir),
        ("tars scanned", f"{coverage.tar_shards_scanned} of {coverage.tar_shards_found}"),
        ("members", coverage.members_scanned),
        ("scenes", f"raw {coverage.dataset_scenes}, store {coverage.store_scenes}"),
        ("snippets", f"raw {coverage.dataset_snippets}, store {coverage.store_snippets}"),
        ("covered", coverage.covered_snippets),
        ("missing in store", coverage.missing_in_store),
        ("outside raw data", coverage.outside_dataset),
        ("coverage", _ratio(coverage.coverage)),
        ("unparseable members", coverage.unparseable_members),
    ]
    parts = [format_table(("field", "value"), overview) + "\n"]
    parts.append(
        _section(
            "per scene",
            ("scene", "raw", "store", "covered", "missing", "outside", "coverage"),
            [
                (
                    r.scene_id,
                    r.dataset_snippets,
                    r.store_snippets,
                    r.covered_snippets,
                    r.missing_in_store,
                    r.outside_dataset,
                    _ratio(r.coverage),
                )
                for r in coverage.per_scene
            ],
        )
    )
    parts.append(
        _section(
            "examples missing in store",
            ("scene", "snippet"),
            coverage.missing_examples,
        )
    )
    parts.append(
        _section(
            "examples outside the raw data",
            ("scene", "snippet"),
            coverage.outside_examples,
        )
    )
    parts.append(
        _section(
            "unparseable members (examples)",
            ("tar: member",),
            [(e,) for e in coverage.unparseable_examples],
        )
    )
    return "\n".join(part for part in parts if part).rstrip()
