"""Capture overhead on light CNNs at default limits (target <= 1.10x).

Models are resnet50, efficientnet_b0 and mobilenet_v3_large as built in
``benchmarks/cnn_models.py`` from torch.nn alone (torchvision's layer structure,
random initialisation, nothing downloaded), in eval mode, one 3 x 128 x 128 image, under ``torch.no_grad()``, torch on one
thread. Per repetition, interleaved: a plain forward, then a fresh
``capture_model(model)`` (every module, default limits) entered, run and left,
entry and exit included; then the same with summaries switched off
(``max_summary_elements=0``), to show what they cost. Ratios of median main-thread CPU time are the verdict
(CPU time is what other tenants of a shared machine disturb least); wall ratios
are printed beside them.

    python benchmarks/bench_capture_cnn.py [--quick]   # --quick: 5 repetitions
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from cnn_models import MODELS
from vinlens.model_inspection import CaptureLimits, capture_model

TARGET = 1.10


NO_SUMMARIES = CaptureLimits(max_summary_elements=0)


def measure(model: nn.Module, image: torch.Tensor, repetitions: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        "plain": [],
        "capture": [],
        "plain_wall": [],
        "wall": [],
        "no_summaries": [],
    }
    with torch.no_grad():
        for _ in range(2):  # warm-up: allocator, kernels, hook paths
            model(image)
            with capture_model(model):
                model(image)
        for _ in range(repetitions):
            w, c = time.perf_counter(), time.thread_time()
            model(image)
            times["plain"].append(time.thread_time() - c)
            times["plain_wall"].append(time.perf_counter() - w)
            w, c = time.perf_counter(), time.thread_time()
            with capture_model(model):
                model(image)
            times["capture"].append(time.thread_time() - c)
            times["wall"].append(time.perf_counter() - w)
            c = time.thread_time()
            with capture_model(model, limits=NO_SUMMARIES):
                model(image)
            times["no_summaries"].append(time.thread_time() - c)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repetitions instead of 15")
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    args = parser.parse_args()
    repetitions = 5 if args.quick else 15
    torch.set_num_threads(1)
    torch.manual_seed(0)
    image = torch.randn(1, 3, 128, 128)
    print(
        f"capture_model(model) at default limits, 1 x 3 x 128 x 128, eval, no_grad, 1 torch "
        f"thread; {repetitions} interleaved repetitions, medians"
    )
    for name in args.models:
        model = MODELS[name]().eval()
        modules = sum(1 for _ in model.modules())
        times = measure(model, image, repetitions)
        plain = statistics.median(times["plain"])
        ratio = statistics.median(times["capture"]) / plain
        wall = statistics.median(times["wall"]) / statistics.median(times["plain_wall"])
        bare = statistics.median(times["no_summaries"]) / plain
        verdict = "PASS" if ratio <= TARGET else "MISS"
        print(
            f"  {name:<20} {modules:4d} modules  plain cpu {plain * 1e3:7.1f} ms  "
            f"capture {ratio:.3f}x cpu, {wall:.3f}x wall (target <= {TARGET}x) {verdict}; "
            f"without summaries {bare:.3f}x cpu"
        )


if __name__ == "__main__":
    main()
