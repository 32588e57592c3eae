"""Store statistics and raw coverage through S3 (moto server) against the same local files.

Writes a synthetic store and two raw tar sets locally: "small" tars (many small members,
each tar below ``SMALL_TAR_BYTES``) and "big" tars (few members of ``--big-member-mib``
MiB, above it), uploads everything to an in-process moto S3 server on 127.0.0.1, then
measures side by side in one run (best of ``--repeat``):

  * ``collect_vin_offline_dataset_stats(max_samples=None)``: local vs ``s3://``;
  * ``collect_vin_offline_dataset_coverage`` (partial cache cleared before each run):
    local vs ``s3://``, for the small and for the big tars;

and prints ``s3 / local`` time ratios, plus the GET and HEAD requests the S3 server saw per
tar during one coverage scan of each set (small tars: one GET each; big tars: ranged GETs
that hop from header to header, never transferring member data). The moto server runs in this process, so the S3
figures include its request handling on the same cores; they measure request count and
overhead, not a real network.

Usage: ``python benchmarks/bench_store_s3.py [--quick] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vinlens.store.coverage import (
    SMALL_TAR_BYTES,
    clear_coverage_cache,
    collect_vin_offline_dataset_coverage,
)
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

_REQUEST = re.compile(r"(GET|HEAD) (/\S+) HTTP")


class _RequestLog(logging.Handler):
    """Counts the S3 server's requests per object key (werkzeug's access log)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: Counter[tuple[str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        match = _REQUEST.search(record.getMessage())
        if match:
            self.requests[(match.group(1), match.group(2).split("?")[0])] += 1


def _write_tars(raw: Path, tars: int, members: int, member_bytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    payload = rng.bytes(member_bytes)
    raw.mkdir(parents=True, exist_ok=True)
    import io

    for t in range(tars):
        with tarfile.open(raw / f"shard-{t:06d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for m in range(members):
                sample = t * members + m
                info = tarfile.TarInfo(
                    f"scene_{sample // 40:06d}/snippet_{sample % 40:06d}.rgb.jpg"
                )
                info.size = member_bytes
                tar.addfile(info, io.BytesIO(payload))


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _upload(fs: Any, local: Path, key: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe_file(f"{key}/{path.relative_to(local).as_posix()}", path.read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller store and tar sets")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big-member-mib", type=int, default=4)
    args = parser.parse_args(argv)

    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(key, value)
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.mkdir("bench")

    quick = args.quick
    spec = SyntheticStoreSpec(
        num_scenes=4 if quick else 16,
        snippets_per_scene=8,
        samples_per_snippet=2,
        num_candidates=64,
        rows_per_shard=32,
        backbone_fields=(("voxel_features", (16, 8, 8), "float16"), ("global", (256,), "float32")),
    )
    small_tars, small_members = (8, 400) if quick else (32, 2000)
    big_tars, big_members = (2, 6) if quick else (4, 12)
    with tempfile.TemporaryDirectory(prefix="vinlens-bench-s3-") as tmp:
        root = Path(tmp)
        store = write_synthetic_store(root / "store", spec)
        _write_tars(root / "small", small_tars, small_members, 512, seed=1)
        _write_tars(root / "big", big_tars, big_members, args.big_member_mib << 20, seed=2)
        for sub in ("store", "small", "big"):
            _upload(fs, root / sub, f"bench/{sub}")
        local = {
            raw: VinOfflineStoreConfig(store_dir=store.store_dir, raw_dataset_dir=root / raw)
            for raw in ("small", "big")
        }
        remote = {
            raw: VinOfflineStoreConfig(
                store_dir="s3://bench/store",
                raw_dataset_dir=f"s3://bench/{raw}",
                storage_options=options,
            )
            for raw in ("small", "big")
        }
        sizes = {
            raw: [p.stat().st_size for p in sorted((root / raw).glob("*.tar"))]
            for raw in ("small", "big")
        }
        assert max(sizes["small"]) <= SMALL_TAR_BYTES < min(sizes["big"])

        def stats(config: VinOfflineStoreConfig) -> Any:
            return collect_vin_offline_dataset_stats(config, max_samples=None)

        def coverage(config: VinOfflineStoreConfig) -> Any:
            clear_coverage_cache()
            return collect_vin_offline_dataset_coverage(config)

        remote_stats, local_stats = stats(remote["small"]), stats(local["small"])
        assert remote_stats.num_samples == local_stats.num_samples
        rows = []
        t_local = _best(lambda: stats(local["small"]), args.repeat)
        t_s3 = _best(lambda: stats(remote["small"]), args.repeat)
        rows.append(("stats (every row)", t_local, t_s3))
        for raw in ("small", "big"):
            assert coverage(remote[raw]).covered_snippets == coverage(local[raw]).covered_snippets
            t_local = _best(lambda raw=raw: coverage(local[raw]), args.repeat)  # type: ignore[misc]
            t_s3 = _best(lambda raw=raw: coverage(remote[raw]), args.repeat)  # type: ignore[misc]
            rows.append((f"coverage, {raw} tars", t_local, t_s3))

        log = _RequestLog()
        werkzeug = logging.getLogger("werkzeug")
        saved = werkzeug.handlers[:]
        werkzeug.handlers = [log]  # count, do not print, every request
        werkzeug.propagate = False
        werkzeug.setLevel(logging.INFO)
        counts = {}
        for raw in ("small", "big"):
            log.requests.clear()
            coverage(remote[raw])
            prefix = f"/bench/{raw}/"
            per_method = Counter[str]()
            for (method, path), n in log.requests.items():
                if path.startswith(prefix) and path.endswith(".tar"):
                    per_method[method] += n
            counts[raw] = (
                per_method["GET"] / len(sizes[raw]),
                per_method["HEAD"] / len(sizes[raw]),
            )
        werkzeug.handlers = saved
        werkzeug.setLevel(logging.WARNING)
        server.stop()

    print(f"store: {spec.num_samples} samples, {len(store.shard_ids)} shards")
    print(
        f"small tars: {small_tars} x {small_members} members, "
        f"{np.mean(sizes['small']) / 2**20:.2f} MiB each; big tars: {big_tars} x {big_members} "
        f"members of {args.big_member_mib} MiB, {np.mean(sizes['big']) / 2**20:.1f} MiB each"
    )
    print(f"{'':28s} {'local s':>9s} {'s3 s':>9s} {'s3/local':>9s}")
    for label, a, b in rows:
        print(f"{label:28s} {a:9.3f} {b:9.3f} {b / a:8.1f}x")
    for raw in ("small", "big"):
        gets, heads = counts[raw]
        print(f"coverage, {raw} tars: {gets:.1f} GET and {heads:.1f} HEAD requests per tar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
