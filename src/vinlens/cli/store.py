"""``vinlens store make-demo|info|stats|coverage``: write demo stores, inspect real ones.

STORE arguments are local paths or fsspec URLs (``s3://bucket/prefix``, ``file:///…``);
``--storage-option KEY=VALUE`` goes to fsspec. ``stats`` and ``coverage`` run in this
process, on ``--workers N`` local processes, or on a Dask cluster (``--scheduler``), and
draw a progress bar on stderr (when it is a terminal, or with ``--progress``) so stdout
stays clean for pipes.

The store engine (pydantic, zarr, numpy) is imported inside the handlers, so
``vinlens --help`` and argument errors do not pay for it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vinlens.cli.arguments import non_negative_int, positive_int
from vinlens.cli.progress import ProgressBar
from vinlens.cli.table import format_fields, print_json, to_json_value

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from vinlens.store.format import VinOfflineStoreConfig

__all__ = [
    "DASK_EXTRA_HINT",
    "add_coverage_arguments",
    "add_info_arguments",
    "add_make_demo_arguments",
    "add_stats_arguments",
    "add_storage_option_argument",
    "coverage",
    "info",
    "make_demo",
    "open_executor",
    "parse_storage_options",
    "stats",
]

DASK_EXTRA_HINT = "pip install 'vinlens[dask]'"
#: Seconds ``--scheduler`` waits for the cluster's first worker.
SCHEDULER_WORKER_TIMEOUT = 30.0


# --------------------------------------------------------------------------- argument types


def _storage_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. anon=true or client_kwargs.endpoint_url=http://host:9000), "
            f"got {text!r}"
        )
    import json

    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def add_storage_option_argument(
    parser: argparse.ArgumentParser,
    *,
    flag: str = "--storage-option",
    dest: str = "storage_options",
    help: str = "fsspec storage option for URLs, repeatable (e.g. anon=true, "
    "client_kwargs.endpoint_url=http://127.0.0.1:9000)",
) -> None:
    """A repeatable ``KEY=VALUE`` option collected as pairs for :func:`parse_storage_options`."""
    parser.add_argument(
        flag,
        dest=dest,
        type=_storage_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=help,
    )


def parse_storage_options(items: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """``--storage-option`` pairs as fsspec's ``storage_options`` dict (``None`` when empty).

    Values are JSON where they parse (``true``, ``3``, ``{"a": 1}``), else strings; a
    dotted KEY nests (``client_kwargs.endpoint_url=...`` becomes
    ``{"client_kwargs": {"endpoint_url": ...}}``), as s3fs expects for its client.
    """
    if not items:
        return None
    options: dict[str, Any] = {}
    for key, value in items:
        *parents, leaf = key.split(".")
        node = options
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: i + 1])
                raise ValueError(f"--storage-option {key}: {where} is already set to a value")
            node = child
        node[leaf] = value
    return options


# --------------------------------------------------------------------------- shared options


def _add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="store directory or URL (s3://, file://, …)")
    add_storage_option_argument(parser)


def _add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="scan on up to N local processes, capped at the CPUs and at the shards or tars "
        "to scan (default: in this process)",
    )
    where.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help=f"scan shards on a Dask cluster, e.g. tcp://host:8786 (needs {DASK_EXTRA_HINT})",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    parser.add_argument("--json", action="store_true", help="print the record as JSON")


@contextlib.contextmanager
def open_executor(workers: int | None, scheduler: str | None) -> Iterator[Executor | None]:
    """``None`` (in process), a ``ProcessPoolExecutor(workers)``, or a Dask client's executor."""
    if workers is not None and scheduler is not None:
        raise ValueError("--workers and --scheduler exclude each other")
    if workers is not None:
        from vinlens.operations import BoundedProcessPool

        # Capped at the CPUs and at the scan's tasks (shards, tars), and said so: N
        # processes for 3 shards only cost forks (64 for 3 shards; 10000 hit the cap).
        def say(message: str) -> None:
            print(f"vinlens: --workers {workers}: {message}", file=sys.stderr)

        with BoundedProcessPool(workers, on_cap=say) as pool:
            yield pool
        return
    if scheduler is None:
        yield None
        return
    from vinlens.store.diagnostics import dask_executor

    with contextlib.ExitStack() as stack:
        # Only connecting is wrapped: an OSError from the scan itself keeps its own message.
        try:
            executor = stack.enter_context(
                dask_executor(scheduler, worker_timeout=SCHEDULER_WORKER_TIMEOUT, timeout="10s")
            )
        except TimeoutError:
            raise  # reached, but no worker: its message names the address and the count
        except OSError as exc:
            raise OSError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc
        yield executor


def _store_config(
    store: str, storage_options: dict[str, Any] | None, raw: str | None = None
) -> VinOfflineStoreConfig:
    from vinlens.store.format import VinOfflineStoreConfig

    return VinOfflineStoreConfig(
        store_dir=store, raw_dataset_dir=raw, storage_options=storage_options
    )


@contextlib.contextmanager
def _progress(args: argparse.Namespace, label: str, unit: str) -> Iterator[ProgressBar | None]:
    enabled = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = ProgressBar(label, unit, sys.stderr) if enabled else None
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# --------------------------------------------------------------------------- make-demo

MAKE_DEMO_HELP = "write a synthetic store (and optionally matching raw tar shards)"
MAKE_DEMO_DESCRIPTION = (
    "Write a deterministic synthetic VIN offline store (the same bytes for the same options) "
    "for demos and tests, and with --raw the raw tar shards it would have been built from."
)


def add_make_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens store make-demo``."""
    parser.add_argument("path", type=Path, help="store directory to create")
    parser.add_argument("--scenes", type=int, default=3, help="number of scenes (default 3)")
    parser.add_argument("--snippets", type=int, default=4, help="snippets per scene (default 4)")
    parser.add_argument(
        "--samples-per-snippet", type=int, default=2, help="samples per snippet (default 2)"
    )
    parser.add_argument(
        "--candidates", type=int, default=16, help="candidates per sample (default 16)"
    )
    parser.add_argument("--rows-per-shard", type=int, default=8, help="rows per shard (default 8)")
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed of the synthetic data (default 0)"
    )
    parser.add_argument(
        "--unlabelled",
        action="store_true",
        help="no scene labels (capabilities.scene_labels false)",
    )
    parser.add_argument("--no-backbone", action="store_true", help="do not store backbone fields")
    parser.add_argument("--no-poses", action="store_true", help="do not store candidate poses")
    parser.add_argument(
        "--no-candidate-ids", action="store_true", help="do not store candidate ids"
    )
    parser.add_argument("--no-components", action="store_true", help="do not store RRI components")
    parser.add_argument(
        "--raw", type=Path, default=None, help="also write raw ASE tar shards into this directory"
    )
    parser.add_argument(
        "--replace", action="store_true", help="atomically replace an existing store at PATH"
    )


def make_demo(args: argparse.Namespace) -> int:
    """Write the synthetic store (and raw shards) and print what was written."""
    from vinlens.store.synthetic import (
        SyntheticStoreSpec,
        write_synthetic_raw_dataset,
        write_synthetic_store,
    )

    defaults = SyntheticStoreSpec()
    spec = SyntheticStoreSpec(
        num_scenes=args.scenes,
        snippets_per_scene=args.snippets,
        samples_per_snippet=args.samples_per_snippet,
        num_candidates=args.candidates,
        rows_per_shard=args.rows_per_shard,
        seed=args.seed,
        scene_labels=not args.unlabelled,
        rri_components=() if args.no_components else defaults.rri_components,
        candidate_ids=not args.no_candidate_ids,
        candidate_poses=not args.no_poses,
        backbone_fields=() if args.no_backbone else defaults.backbone_fields,
    )
    record = write_synthetic_store(args.path, spec, replace=args.replace)
    fields: list[tuple[str, object]] = [
        ("store", record.store_dir),
        ("samples", record.num_samples),
        ("shards", len(record.shard_ids)),
        ("scenes", len(record.scene_ids)),
        ("snippets", len(record.store_pairs)),
        ("splits", " ".join(f"{k}={v:,}" for k, v in record.split_counts.items())),
        ("scene_labels", spec.scene_labels),
    ]
    if args.raw is not None:
        raw = write_synthetic_raw_dataset(args.raw, record)
        fields += [
            ("raw_dir", raw.raw_dir),
            ("raw_tars", len(raw.tar_paths)),
            ("missing_in_store", len(raw.missing_in_store)),
            ("outside_dataset", len(raw.outside_dataset)),
            ("unparseable_members", len(raw.unparseable_members)),
        ]
    print(format_fields(fields))
    return 0


# --------------------------------------------------------------------------- info

INFO_HELP = "summarise a store's manifest as a table"
INFO_DESCRIPTION = (
    "Validate manifest.json and sample_index.jsonl and print the store's format, sizes, "
    "splits and capabilities, then one row per shard and block. Reads no payload arrays."
)


def add_info_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens store info``."""
    _add_store_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON instead")


def info(args: argparse.Namespace) -> int:
    """Print the manifest summary (or the manifest as JSON)."""
    from vinlens.cli.store_tables import format_info
    from vinlens.store.reader import VinOfflineStoreReader

    config = _store_config(args.store, parse_storage_options(args.storage_options))
    with VinOfflineStoreReader(config) as reader:
        if args.json:
            print_json(reader.manifest.to_json_dict())
        else:
            print(format_info(reader))
    return 0


# --------------------------------------------------------------------------- stats

STATS_HELP = "statistics and integrity problems of a store"
STATS_DESCRIPTION = (
    "Scan a store and print its statistics: samples per split, scenes and snippets, valid "
    "candidates per sample, RRI and its components, candidate poses, backbone field "
    "moments, memory per sample, the batch shapes a DataLoader would produce, and the "
    "problems found, ranked as the store dashboard ranks them: integrity errors (a damaged "
    "chunk is listed, never counted), warnings and notices. Per-sample "
    "statistics read --max-samples rows spread over splits and shards; --all reads every "
    "row with bounded memory."
)


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens store stats``."""
    _add_store_argument(parser)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-samples",
        type=non_negative_int,
        default=512,
        metavar="N",
        help="rows read for per-sample statistics (default 512)",
    )
    budget.add_argument("--all", action="store_true", help="read every row (memory stays bounded)")
    _add_execution_arguments(parser)


def stats(args: argparse.Namespace) -> int:
    """Collect the store's statistics and print them as tables (or JSON)."""
    from vinlens.cli.store_tables import format_stats
    from vinlens.store.diagnostics import (
        capture_vin_offline_dataset_stats_request,
        dashboard_problems,
        inspect_vin_offline_dataset_stats_with_progress,
    )

    config = _store_config(args.store, parse_storage_options(args.storage_options))
    max_samples = None if args.all else args.max_samples
    with (
        open_executor(args.workers, args.scheduler) as executor,
        _progress(args, "scanning", "rows") as bar,
    ):
        request = capture_vin_offline_dataset_stats_request(config, max_samples=max_samples)
        record = inspect_vin_offline_dataset_stats_with_progress(request, bar, executor=executor)
    if args.json:
        # The record plus the engine's ranked problems (what the dashboard shows).
        print_json({**to_json_value(record), "problems": dashboard_problems(record)})
    else:
        print(format_stats(record))
    return 0


# --------------------------------------------------------------------------- coverage

COVERAGE_HELP = "which raw snippets (tar headers) the store contains"
COVERAGE_DESCRIPTION = (
    "Read the headers of the raw WebDataset *.tar shards under --raw (never their payloads) "
    "and compare the scenes and snippets found there with the store's sample index: "
    "covered, missing in the store, only in the store, per scene."
)


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens store coverage``."""
    _add_store_argument(parser)
    parser.add_argument(
        "--raw", required=True, metavar="DIR", help="raw dataset directory or URL (*.tar)"
    )
    parser.add_argument(
        "--max-tars", type=non_negative_int, default=None, metavar="N", help="scan N tars only"
    )
    _add_execution_arguments(parser)


def coverage(args: argparse.Namespace) -> int:
    """Compare the raw tar shards with the store and print the coverage tables (or JSON)."""
    from vinlens.cli.store_tables import format_coverage
    from vinlens.store.coverage import collect_vin_offline_dataset_coverage

    config = _store_config(args.store, parse_storage_options(args.storage_options), args.raw)
    with (
        open_executor(args.workers, args.scheduler) as executor,
        _progress(args, "reading tar headers", "tars") as bar,
    ):
        record = collect_vin_offline_dataset_coverage(
            config, max_tars=args.max_tars, progress_cb=bar, executor=executor
        )
    if args.json:
        print_json(record)
    else:
        print(format_coverage(record))
    return 0
