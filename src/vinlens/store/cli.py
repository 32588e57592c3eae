"""``vinlens store ...``: make a demo store, summarise a store's manifest.

The group is extensible: every module named in :data:`STORE_COMMAND_MODULES` exposes
``register_store_commands(store_subparsers)`` and adds its own subcommands (the
diagnostics add ``stats`` and ``coverage``), so this module never imports them.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections import Counter
from pathlib import Path

from vinlens.cli import format_table  # re-exported: the store commands' table format
from vinlens.store.format import BlockKind

__all__ = ["STORE_COMMAND_MODULES", "format_table", "register"]

# Modules exposing ``register_store_commands(store_subparsers) -> None``.
STORE_COMMAND_MODULES: tuple[str, ...] = ("vinlens.store.cli_diagnostics",)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``store`` command group to the top-level ``vinlens`` parser."""
    store = subparsers.add_parser(
        "store",
        help="write demo stores and inspect VIN offline stores",
        description="Write demo stores and inspect VIN offline stores (format v1).",
    )
    store.set_defaults(handler=lambda _args: _print_help(store))
    store_sub = store.add_subparsers(dest="store_command", metavar="STORE_COMMAND")

    demo = store_sub.add_parser(
        "make-demo",
        help="write a seeded synthetic store (and optionally matching raw tar shards)",
        description="Write a deterministic synthetic VIN offline store for demos and tests.",
    )
    demo.add_argument("path", type=Path, help="store directory to create")
    demo.add_argument("--scenes", type=int, default=3, help="number of scenes (default 3)")
    demo.add_argument("--snippets", type=int, default=4, help="snippets per scene (default 4)")
    demo.add_argument(
        "--samples-per-snippet", type=int, default=2, help="samples per snippet (default 2)"
    )
    demo.add_argument(
        "--candidates", type=int, default=16, help="candidates per sample (default 16)"
    )
    demo.add_argument("--rows-per-shard", type=int, default=8, help="rows per shard (default 8)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument(
        "--unlabelled",
        action="store_true",
        help="no scene labels (capabilities.scene_labels false)",
    )
    demo.add_argument("--no-backbone", action="store_true", help="do not store backbone fields")
    demo.add_argument("--no-poses", action="store_true", help="do not store candidate poses")
    demo.add_argument("--no-candidate-ids", action="store_true", help="do not store candidate ids")
    demo.add_argument("--no-components", action="store_true", help="do not store RRI components")
    demo.add_argument(
        "--raw", type=Path, default=None, help="also write raw ASE tar shards into this directory"
    )
    demo.add_argument(
        "--replace", action="store_true", help="atomically replace an existing store at PATH"
    )
    demo.set_defaults(handler=_make_demo)

    info = store_sub.add_parser(
        "info",
        help="summarise a store's manifest as a table",
        description="Validate manifest.json and sample_index.jsonl and print a summary.",
    )
    info.add_argument("path", type=Path, help="store directory")
    info.add_argument("--json", action="store_true", help="print the manifest as JSON instead")
    info.set_defaults(handler=_info)

    for name in STORE_COMMAND_MODULES:
        importlib.import_module(name).register_store_commands(store_sub)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _make_demo(args: argparse.Namespace) -> int:
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
    rows: list[tuple[str, object]] = [
        ("store", record.store_dir),
        ("samples", record.num_samples),
        ("shards", len(record.shard_ids)),
        ("scenes", len(record.scene_ids)),
        ("snippets", len(record.store_pairs)),
        ("splits", " ".join(f"{k}={v}" for k, v in record.split_counts.items())),
        ("scene_labels", str(spec.scene_labels).lower()),
    ]
    if args.raw is not None:
        raw = write_synthetic_raw_dataset(args.raw, record)
        rows += [
            ("raw_dir", raw.raw_dir),
            ("raw_tars", len(raw.tar_paths)),
            ("missing_in_store", len(raw.missing_in_store)),
            ("outside_dataset", len(raw.outside_dataset)),
            ("unparseable_members", len(raw.unparseable_members)),
        ]
    print(format_table(("field", "value"), rows))
    return 0


def _info(args: argparse.Namespace) -> int:
    from vinlens.store.reader import VinOfflineStoreReader

    with VinOfflineStoreReader(args.path) as reader:
        manifest = reader.manifest
        if args.json:
            print(json.dumps(manifest.to_json_dict(), indent=2))
            return 0
        splits = Counter(row.split for row in reader.samples)
        scenes = {row.scene_id for row in reader.samples}
        snippets = {(row.scene_id, row.snippet_id) for row in reader.samples}
        flags = manifest.materialized_blocks.model_dump()
        summary: list[tuple[str, object]] = [
            ("store", reader.store_dir),
            ("format", f"{manifest.format} v{manifest.version}"),
            ("created_at", manifest.created_at),
            ("samples", manifest.num_samples),
            ("candidates", manifest.num_candidates),
            ("scene_labels", str(manifest.capabilities.scene_labels).lower()),
            ("splits", " ".join(f"{k}={v}" for k, v in sorted(splits.items())) or "-"),
            ("scenes", len(scenes)),
            ("snippets", len(snippets)),
            ("shards", len(manifest.shards)),
            ("materialized", " ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items())),
        ]
        print(format_table(("field", "value"), summary))
        print()
        rows = []
        for shard in manifest.shards:
            for block in shard.blocks:
                kind = "zarr" if block.kind is BlockKind.ZARR_ARRAY else "msgpack"
                size = block.estimated_bytes
                rows.append(
                    (
                        shard.shard_id,
                        shard.num_rows,
                        block.name,
                        kind,
                        block.dtype or "-",
                        "[" + ", ".join(str(n) for n in block.shape) + "]",
                        "yes" if block.optional else "no",
                        "-" if size is None else size,
                    )
                )
        print(
            format_table(
                ("shard", "rows", "block", "kind", "dtype", "shape", "optional", "bytes"), rows
            )
        )
    return 0
