"""The tables ``vinlens store info|stats|coverage`` print, from the engines' records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vinlens.cli.table import format_bytes, format_fields, format_table

if TYPE_CHECKING:
    from vinlens.store.coverage import VinOfflineCoverageStats
    from vinlens.store.diagnostics import NumericSummary, VinOfflineDatasetStats
    from vinlens.store.reader import VinOfflineStoreReader

__all__ = ["format_coverage", "format_info", "format_stats"]


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v:,}" for k, v in counts.items()) or "-"


def _flags(flags: dict[str, bool]) -> str:
    return " ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items())


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def _section(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    right: set[int] | None = None,
) -> str:
    if not rows:
        return ""
    return f"{title}\n{format_table(headers, rows, right=right or set())}\n"


def format_info(reader: VinOfflineStoreReader) -> str:
    """The manifest summary and one row per shard and block (what ``store info`` prints)."""
    from vinlens.store.format import BlockKind

    manifest = reader.manifest
    splits = Counter(row.split for row in reader.samples)
    scenes = {row.scene_id for row in reader.samples}
    snippets = {(row.scene_id, row.snippet_id) for row in reader.samples}
    summary: list[tuple[str, object]] = [
        ("store", reader.store_dir),
        ("format", f"{manifest.format} v{manifest.version}"),
        ("created_at", manifest.created_at),
        ("samples", manifest.num_samples),
        ("candidates", manifest.num_candidates),
        ("scene_labels", manifest.capabilities.scene_labels),
        ("splits", _counts(dict(sorted(splits.items())))),
        ("scenes", len(scenes)),
        ("snippets", len(snippets)),
        ("shards", len(manifest.shards)),
        ("materialized", _flags(manifest.materialized_blocks.model_dump())),
    ]
    rows = [
        (
            shard.shard_id,
            shard.num_rows,
            block.name,
            "zarr" if block.kind is BlockKind.ZARR_ARRAY else "msgpack",
            block.dtype or "-",
            "[" + ", ".join(str(n) for n in block.shape) + "]",
            "yes" if block.optional else "no",
            block.estimated_bytes,
        )
        for shard in manifest.shards
        for block in shard.blocks
    ]
    table = format_table(
        ("shard", "rows", "block", "kind", "dtype", "shape", "optional", "bytes"), rows
    )
    return f"{format_fields(summary)}\n\n{table}"


def _summary_row(name: str, summary: NumericSummary | None) -> tuple[object, ...]:
    if summary is None:
        return (name, None, None, None, None)
    return (name, summary.count, summary.minimum, summary.mean, summary.maximum)


def _problem_counts(problems: Sequence[dict[str, str]]) -> str:
    from vinlens.store.diagnostics import PROBLEM_SEVERITIES

    counts = Counter(p["severity"] for p in problems)
    parts = [f"{counts[s]:,} {s}(s)" for s in PROBLEM_SEVERITIES if counts[s]]
    return ", ".join(parts) or "none"


def format_stats(stats: VinOfflineDatasetStats) -> str:
    """The record as readable tables (what ``vinlens store stats`` prints).

    The problems section is the engine's ranked list (the one the store dashboard shows),
    so the command line and the widget never disagree about what is a warning.
    """
    from vinlens.store.diagnostics import dashboard_problems, scan_scope

    problems = stats.integrity_problems
    ranked = dashboard_problems(stats)
    overview: list[tuple[str, object]] = [
        ("store", stats.store_dir),
        ("version", stats.version),
        ("samples", stats.num_samples),
        ("rows", scan_scope(stats)),  # "512 of 10,000 rows sampled", as the dashboard says
        ("splits", _counts(stats.split_counts)),
        ("scenes", stats.num_scenes),
        ("snippets", stats.num_snippets),
        ("scene_labels", "yes" if stats.scene_labels_available else "no (unavailable)"),
        ("materialized", _flags(stats.materialized_blocks)),
        ("numeric_bytes", format_bytes(stats.numeric_bytes)),
        ("integrity", "ok" if not problems else f"{len(problems):,} problem(s)"),
        ("problems", _problem_counts(ranked)),
    ]
    parts = [format_fields(overview) + "\n"]
    parts.append(
        _section(
            "problems (most severe first)",
            ("severity", "problem", "detail"),
            [(p["severity"], p["title"], p["detail"]) for p in ranked],
        )
    )
    parts.extend(_stats_tables(stats))
    return "\n".join(part for part in parts if part).rstrip()


def _stats_tables(stats: VinOfflineDatasetStats) -> list[str]:
    """The tables after the overview: distributions, backbone, memory, batch, RRI pairs."""
    parts: list[str] = []
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
                    _shape(b.shape),
                    b.sampled_rows,
                    b.count,
                    b.mean,
                    b.std,
                    b.abs_mean,
                    b.nz_frac,
                )
                for b in stats.backbone_diagnostics
            ],
        )
    )
    parts.append(
        _section(
            "memory per sample",
            ("component", "mean", "median", "p95"),
            [
                (
                    m.component,
                    format_bytes(m.mean_mib * 2**20),
                    format_bytes(m.median_mib * 2**20),
                    format_bytes(m.p95_mib * 2**20),
                )
                for m in stats.memory_diagnostics
            ],
            right={1, 2, 3},
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
    if stats.scene_labels_available:
        pairs: list[tuple[str, object]] = [
            (name, len(values)) for name, values in stats.rri_component_pairs.items()
        ]
        pairs.append(
            ("samples without candidate ids (unpaired)", stats.rri_pairing_unavailable_count)
        )
        parts.append(_section("RRI/component pairs (by candidate id)", ("series", "count"), pairs))
    return parts


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_coverage(coverage: VinOfflineCoverageStats) -> str:
    """The record as readable tables (what ``vinlens store coverage`` prints)."""
    overview: list[tuple[str, object]] = [
        ("store", coverage.store_dir),
        ("raw", coverage.raw_dataset_dir),
        ("tars scanned", f"{coverage.tar_shards_scanned:,} of {coverage.tar_shards_found:,}"),
        ("members", coverage.members_scanned),
        ("scenes", f"raw {coverage.dataset_scenes:,}, store {coverage.store_scenes:,}"),
        ("snippets", f"raw {coverage.dataset_snippets:,}, store {coverage.store_snippets:,}"),
        ("covered", coverage.covered_snippets),
        ("missing in store", coverage.missing_in_store),
        ("outside raw data", coverage.outside_dataset),
        ("coverage", _ratio(coverage.coverage)),
        ("unparseable members", coverage.unparseable_members),
    ]
    parts = [format_fields(overview) + "\n"]
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
            right={6},
        )
    )
    parts.append(
        _section("examples missing in store", ("scene", "snippet"), coverage.missing_examples)
    )
    parts.append(
        _section("examples outside the raw data", ("scene", "snippet"), coverage.outside_examples)
    )
    parts.append(
        _section(
            "unparseable members (examples)",
            ("tar: member",),
            [(e,) for e in coverage.unparseable_examples],
        )
    )
    return "\n".join(part for part in parts if part).rstrip()
