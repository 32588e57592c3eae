"""``vinlens store compare A B``: what changed between two stores, field by field.

Prints the fields sorted by drift (``--metric``, Jensen-Shannon distance by default), the
sample and scene set differences, the samples per split of both stores and each store's
integrity problems; ``--json`` prints the whole record instead. A and B are local paths
or fsspec URLs (they may live on different file systems; ``--storage-option`` goes to
every URL store, ``--storage-option-a`` / ``--storage-option-b`` to one of them, over the
shared ones: two S3 endpoints or two sets of credentials). The scan runs in this process, on ``--workers N`` local processes or on
a Dask cluster (``--scheduler``), with the options of ``vinlens store stats``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vinlens.cli.arguments import non_negative_int
from vinlens.cli.store import (
    _add_execution_arguments,
    _progress,
    add_storage_option_argument,
    open_executor,
    parse_storage_options,
)
from vinlens.cli.table import format_fields, format_table, print_json, to_json_value

if TYPE_CHECKING:
    from vinlens.store.compare import StoreComparison
    from vinlens.store.format import VinOfflineStoreConfig

__all__ = [
    "COMPARE_DESCRIPTION",
    "COMPARE_HELP",
    "DEFAULT_METRIC",
    "METRIC_HEADERS",
    "add_compare_arguments",
    "check_metric",
    "compare",
    "format_comparison",
]

COMPARE_HELP = "what changed between two stores, field by field"
COMPARE_DESCRIPTION = (
    "Scan two stores (--max-samples rows of each, spread over splits and shards; --all "
    "reads every row) and compare every numeric field (RRI and its components, candidate "
    "poses, backbone fields and their camera/channel slices, valid candidates and VIN "
    "points per sample) on one shared binning: counts, means, stds, PSI, Jensen-Shannon "
    "distance, Wasserstein distance and KS statistic, the fields sorted by drift. Also "
    "the sample keys and scenes found in one store only, the samples per split of both, "
    "and the integrity problems of each. Both stores are only read."
)
#: Sample keys and scenes listed per side before "... and N more" (``--json`` lists all).
LISTED = 20
#: The metric the fields are sorted by without ``--metric``.
DEFAULT_METRIC = "js_distance"
#: Column headers of the engine's metrics (a metric without one is headed by its name).
METRIC_HEADERS = {
    "js_distance": "JS",
    "psi": "PSI",
    "wasserstein": "Wasserstein",
    "ks_statistic": "KS",
}


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens store compare``."""
    parser.add_argument("store_a", metavar="A", help="the reference store: directory or URL")
    parser.add_argument("store_b", metavar="B", help="the store compared with A: directory or URL")
    add_storage_option_argument(
        parser,
        help="fsspec storage option for URL stores, repeatable (e.g. anon=true, "
        "client_kwargs.endpoint_url=http://127.0.0.1:9000)",
    )
    for side in ("a", "b"):
        add_storage_option_argument(
            parser,
            flag=f"--storage-option-{side}",
            dest=f"storage_options_{side}",
            help=f"storage option for store {side.upper()} only (another endpoint or "
            "credentials), repeatable; it overrides --storage-option's value of the same key",
        )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-samples",
        type=non_negative_int,
        default=512,
        metavar="N",
        help="rows read from each store (default 512)",
    )
    budget.add_argument("--all", action="store_true", help="read every row of both stores")
    # Checked against the engine's DRIFT_METRICS when the command runs (not argparse
    # choices: building the parser imports no numpy, and a bad name is one error line).
    parser.add_argument(
        "--metric",
        default=DEFAULT_METRIC,
        metavar="METRIC",
        help=f"the drift the fields are sorted by (default {DEFAULT_METRIC}): any metric of "
        "vinlens.store.compare.DRIFT_METRICS (JS, PSI, Wasserstein, KS); an unknown name "
        "lists them",
    )
    _add_execution_arguments(parser)


def _config(location: str, options: dict[str, Any] | None) -> VinOfflineStoreConfig:
    from vinlens.store.format import VinOfflineStoreConfig, is_url

    return VinOfflineStoreConfig(
        store_dir=location, storage_options=options if is_url(location) else None
    )


def _listed(items: Sequence[str]) -> str:
    if not items:
        return "-"
    shown = ", ".join(items[:LISTED])
    more = len(items) - LISTED
    return shown + (f", ... and {more:,} more" if more > 0 else "")


def _splits(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in counts.items()) or "-"


def format_comparison(result: StoreComparison, metric: str = DEFAULT_METRIC) -> str:
    """The comparison as readable tables (what ``vinlens store compare`` prints)."""
    from vinlens.store.compare import ranked_fields

    overview: list[tuple[str, object]] = [
        ("store A", result.store_a),
        ("store B", result.store_b),
        ("samples", f"A {result.num_samples_a:,}, B {result.num_samples_b:,}"),
        (
            "scanned",
            f"A {result.sampled_samples_a:,}, B {result.sampled_samples_b:,}"
            + (" (all)" if result.max_samples is None else ""),
        ),
        ("splits A", _splits(result.split_counts_a)),
        ("splits B", _splits(result.split_counts_b)),
        ("samples only in A", result.samples_only_in_a),
        ("samples only in B", result.samples_only_in_b),
        ("scenes only in A", _listed(result.scenes_only_in_a)),
        ("scenes only in B", _listed(result.scenes_only_in_b)),
        ("problems", f"A {len(result.problems_a):,}, B {len(result.problems_b):,}"),
        (
            "binning",
            "float16 exact; float32 bins 2**-7 of |x|; "
            f"PSI over {result.psi_bins} A-decile bins, epsilon {result.psi_epsilon:g}",
        ),
    ]
    parts = [format_fields(overview) + "\n"]
    from vinlens.store.compare import DRIFT_METRICS

    rows = [
        (
            d.name,
            d.count_a,
            d.count_b,
            d.mean_a,
            d.mean_b,
            d.std_a,
            d.std_b,
            *(d.metric(m) for m in DRIFT_METRICS),
            "yes" if d.exact else "binned",
        )
        for d in ranked_fields(result.fields, metric)
    ]
    headers = (
        "field",
        "count A",
        "count B",
        "mean A",
        "mean B",
        "std A",
        "std B",
        *(METRIC_HEADERS.get(m, m) for m in DRIFT_METRICS),
        "exact",
    )
    parts.append(f"fields by {metric} (largest first)\n{format_table(headers, rows)}\n")
    for side, keys in (("A", result.sample_keys_only_in_a), ("B", result.sample_keys_only_in_b)):
        if keys:
            parts.append(f"sample keys only in {side}\n  {_listed(keys)}\n")
    for side, problems in (("A", result.problems_a), ("B", result.problems_b)):
        if problems:
            table = format_table(
                ("problem", "shard", "block", "detail"),
                [(p.kind, p.shard_id, p.block, p.message) for p in problems],
            )
            parts.append(f"problems of store {side}\n{table}\n")
    return "\n".join(parts).rstrip() + "\n"


def check_metric(metric: str) -> str:
    """``metric`` if the engine ranks by it; else ``ValueError`` naming every choice."""
    from vinlens.store.compare import DRIFT_METRICS

    if metric not in DRIFT_METRICS:
        raise ValueError(
            f"--metric: unknown drift metric {metric!r}; choose one of {', '.join(DRIFT_METRICS)}"
        )
    return metric


def compare(args: argparse.Namespace) -> int:
    """Compare the two stores and print the result as tables (or JSON)."""
    from vinlens.store.compare import compare_vin_offline_stores

    metric = check_metric(args.metric)  # before any store is opened

    # Side-specific pairs come last, so their keys override the shared ones.
    config_a = _config(
        args.store_a, parse_storage_options([*args.storage_options, *args.storage_options_a])
    )
    config_b = _config(
        args.store_b, parse_storage_options([*args.storage_options, *args.storage_options_b])
    )
    max_samples = None if args.all else args.max_samples
    with (
        open_executor(args.workers, args.scheduler) as executor,
        _progress(args, "comparing", "rows") as bar,
    ):
        result = compare_vin_offline_stores(
            config_a, config_b, max_samples=max_samples, executor=executor, progress_cb=bar
        )
    if args.json:
        print_json(to_json_value(result))
    else:
        print(format_comparison(result, metric), end="")
    return 0
