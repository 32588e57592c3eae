"""Capturing a module whose output is a non-contiguous 8192 x 8192 float32 tensor (target <= 1.05x).

The module computes ``(x + 1).t()``: a 256 MiB result whose row-major order is
not its memory order. A sampler that flattened it (``.contiguous()``,
``reshape(-1)``, ``.flatten()``) would copy another 256 MiB; the capture must
copy only the 32 leading elements. Reported:

* time of the forward with capture / without (in this process, interleaved,
  medians);
* peak RSS with capture / without, each measured in a fresh subprocess
  (``ru_maxrss``), plus a naive hook that flattens the output, for scale.

    python benchmarks/bench_capture_prefix.py [--quick]   # --quick: 4096 x 4096, 3 repetitions
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from torch import nn

from vinlens.model_inspection import capture_model


class TransposedSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1).t()


def naive_hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
    """What a capture without index arithmetic does: flatten, then take the prefix."""
    output.reshape(-1)[:32].tolist()


def child(mode: str, size: int) -> None:
    """One forward in a fresh process; prints peak RSS in MiB as JSON."""
    torch.set_num_threads(1)
    model = TransposedSum()
    x = torch.randn(size, size)
    if mode == "capture":
        with torch.no_grad(), capture_model(model) as capture:
            out = model(x)
        assert capture.snapshots[-1].values == tuple(out[0, :32].tolist())
    elif mode == "naive":
        model.register_forward_hook(naive_hook)
        with torch.no_grad():
            out = model(x)
    else:
        with torch.no_grad():
            out = model(x)
    assert not out.is_contiguous()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"mode": mode, "peak_rss_mib": peak_mib}))


def peak_rss(mode: str, size: int) -> float:
    result = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--size", str(size)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(result.stdout.strip().splitlines()[-1])["peak_rss_mib"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4096 x 4096 and 3 repetitions")
    parser.add_argument("--size", type=int, help="side of the square tensor (default 8192)")
    parser.add_argument("--child", choices=["plain", "capture", "naive"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size or (4096 if args.quick else 8192)
    if args.child:
        child(args.child, size)
        return
    repetitions = 3 if args.quick else 9
    torch.set_num_threads(1)
    model = TransposedSum()
    x = torch.randn(size, size)
    wall: dict[str, list[float]] = {"plain": [], "capture": []}
    cpu: dict[str, list[float]] = {"plain": [], "capture": []}
    with torch.no_grad():
        model(x)
        for _ in range(repetitions):
            for mode in ("plain", "capture"):
                w, c = time.perf_counter(), time.thread_time()
                if mode == "capture":
                    with capture_model(model):
                        out = model(x)
                else:
                    out = model(x)
                wall[mode].append(time.perf_counter() - w)
                cpu[mode].append(time.thread_time() - c)
                del out
    del x

    rss = {mode: peak_rss(mode, size) for mode in ("plain", "capture", "naive")}
    print(
        f"(x + 1).t() on {size}x{size} float32 ({size * size * 4 / 2**20:.0f} MiB, non-contiguous "
        f"output), 1 torch thread; {repetitions} interleaved repetitions, medians"
    )
    for mode in ("plain", "capture"):
        print(
            f"  {mode:<8} wall {statistics.median(wall[mode]) * 1e3:8.1f} ms   "
            f"cpu {statistics.median(cpu[mode]) * 1e3:8.1f} ms   peak RSS {rss[mode]:8.0f} MiB"
        )
    print(f"  naive flattening hook:                          peak RSS {rss['naive']:8.0f} MiB")
    wall_ratio = statistics.median(wall["capture"]) / statistics.median(wall["plain"])
    cpu_ratio = statistics.median(cpu["capture"]) / statistics.median(cpu["plain"])
    rss_ratio = rss["capture"] / rss["plain"]
    for label, ratio in (
        ("time (cpu)", cpu_ratio),
        ("time (wall)", wall_ratio),
        ("peak RSS", rss_ratio),
    ):
        verdict = "PASS" if ratio <= 1.05 else "MISS"
        print(f"  capture/plain {label:<12} {ratio:.3f}x (target <= 1.05x) {verdict}")
    print(f"  naive/plain peak RSS         {rss['naive'] / rss['plain']:.3f}x (what is avoided)")


if __name__ == "__main__":
    main()
