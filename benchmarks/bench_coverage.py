"""Raw-dataset coverage: tar header listing speed, side by side in one run.

Writes ``--tars`` WebDataset-style tar shards of ``--members`` members each (ustar, GNU and
pax in turn; some GNU/pax names longer than 100 bytes; small payloads), warms the page
cache, then measures members per second of

  * ``vinlens.store.coverage.list_tar_member_names`` over every tar;
  * ``tarfile`` listing (``TarFile.getnames()``) over the first ``--tarfile-tars`` tars
    (it is slow; its rate is per member, so a subset measures it fairly);
  * GNU ``tar -tf`` over every tar (one process per tar, output to /dev/null);
  * ``collect_vin_offline_dataset_coverage`` end to end against a small store;

and prints ``scan / tarfile`` (target >= 4x) and ``GNU tar / scan`` (target <= 4x, i.e. the
scanner within 4x of GNU tar). Best of ``--repeat`` runs each.

Usage: ``python benchmarks/bench_coverage.py [--quick] [--tars N] [--members N] [--keep DIR]``;
``--quick`` uses 20 tars x 2,000 members instead of 200 x 5,000.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vinlens.store.coverage import collect_vin_offline_dataset_coverage, list_tar_member_names
from vinlens.store.format import VinOfflineSample, VinOfflineStoreConfig
from vinlens.store.writer import VinOfflineStoreWriter

_FORMATS = (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT)
_SUFFIXES = ("rgb.jpg", "depth.png", "json", "cls", "vin.npy")
_LONG = "ase_raw/" + "/".join(f"level_{i:02d}_directory" for i in range(5)) + "/"


def write_tars(raw: Path, tars: int, members: int, seed: int = 0) -> list[Path]:
    """``tars`` shards of ``members`` members; headers through tarfile's own encoder."""
    rng = np.random.default_rng(seed)
    payload = rng.bytes(4096)
    paths = []
    raw.mkdir(parents=True, exist_ok=True)
    per_sample = len(_SUFFIXES)
    for t in range(tars):
        fmt = _FORMATS[t % len(_FORMATS)]
        path = raw / f"shard-{t:06d}.tar"
        sizes = rng.integers(0, 1500, size=members)
        with path.open("wb") as handle:
            for m in range(members):
                sample = (t * members + m) // per_sample
                scene, snippet = sample // 100, sample % 100
                prefix = _LONG if fmt != tarfile.USTAR_FORMAT and sample % 7 == 0 else ""
                info = tarfile.TarInfo(
                    f"{prefix}scene_{scene:06d}/snippet_{snippet:06d}.{_SUFFIXES[m % per_sample]}"
                )
                info.size = int(sizes[m])
                info.mtime = 1_700_000_000
                handle.write(info.tobuf(format=fmt))
                handle.write(payload[: info.size])
                handle.write(bytes(-info.size % 512))
            handle.write(bytes(1024))  # end-of-archive: two zero blocks
            handle.write(bytes(-handle.tell() % 10240))  # pad to tar's 10 KiB record
        paths.append(path)
    return paths


def write_store(path: Path, tars: int, members: int) -> None:
    """A small unlabelled store holding every other raw snippet (plus a few of its own)."""
    samples = tars * members // len(_SUFFIXES)
    with VinOfflineStoreWriter(path, num_candidates=1, scene_labels=False, fsync=False) as w:
        for sample in [*range(0, samples, 2), samples + 1, samples + 3]:
            scene, snippet = f"scene_{sample // 100:06d}", f"snippet_{sample % 100:06d}"
            w.add(
                VinOfflineSample(
                    sample_key=f"{scene}/{snippet}",
                    scene_id=scene,
                    snippet_id=snippet,
                    split="train",
                    vin_points=np.zeros((1, 3), np.float32),
                )
            )


def _best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 tars x 2,000 members")
    parser.add_argument("--tars", type=int, default=None)
    parser.add_argument("--members", type=int, default=None)
    parser.add_argument("--tarfile-tars", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) data here")
    args = parser.parse_args(argv)
    tars = args.tars or (20 if args.quick else 200)
    members = args.members or (2000 if args.quick else 5000)

    tmp = None
    root = args.keep
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="vinlens-bench-coverage-"))
        root = tmp
    raw, store = root / f"raw-{tars}x{members}", root / f"store-{tars}x{members}"
    try:
        paths = sorted(raw.glob("*.tar")) if raw.exists() else []
        if len(paths) != tars:
            shutil.rmtree(raw, ignore_errors=True)
            start = time.perf_counter()
            paths = write_tars(raw, tars, members)
            print(f"wrote {tars} tars x {members} members in {time.perf_counter() - start:.1f} s")
        if not (store / "manifest.json").exists():
            write_store(store, tars, members)
        total_bytes = sum(p.stat().st_size for p in paths)
        for p in paths:  # warm the page cache
            with p.open("rb") as handle:
                while handle.read(1 << 22):
                    pass

        scan_s, scan_n = _best(
            lambda: sum(len(list_tar_member_names(p)) for p in paths), args.repeat
        )
        subset = paths[: max(1, min(args.tarfile_tars, len(paths)))]

        def tarfile_listing() -> int:
            count = 0
            for p in subset:
                with tarfile.open(p) as tf:
                    count += len(tf.getnames())
            return count

        tarfile_s, tarfile_n = _best(tarfile_listing, max(1, args.repeat - 1))
        gnu = shutil.which("tar")
        gnu_rate = None
        if gnu is not None:

            def gnu_listing() -> int:
                with open(os.devnull, "wb") as sink:
                    for p in paths:
                        subprocess.run([gnu, "-tf", str(p)], stdout=sink, check=True)
                return scan_n

            gnu_s, _ = _best(gnu_listing, args.repeat)
            gnu_rate = scan_n / gnu_s
        config = VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw)
        cov_s, _ = _best(
            lambda: collect_vin_offline_dataset_coverage(config).covered_snippets, args.repeat
        )

        scan_rate = scan_n / scan_s
        tarfile_rate = tarfile_n / tarfile_s
        print(f"{len(paths)} tars, {scan_n} members, {total_bytes / 1e6:.0f} MB")
        print(f"tarscan          {scan_rate:12,.0f} members/s")
        print(f"tarfile listing  {tarfile_rate:12,.0f} members/s  ({len(subset)} tars)")
        if gnu_rate is not None:
            print(f"GNU tar -tf      {gnu_rate:12,.0f} members/s")
        print(f"coverage         {scan_n / cov_s:12,.0f} members/s  (scan + keys + sets + store)")
        print(f"ratio tarscan/tarfile  {scan_rate / tarfile_rate:6.1f}x  (target >= 4x)")
        if gnu_rate is not None:
            print(f"ratio GNU tar/tarscan  {gnu_rate / scan_rate:6.2f}x  (target <= 4x)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
