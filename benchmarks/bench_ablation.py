"""Batched Ablation-CAM vs the one-channel-at-a-time loop, same model, same maps.

The batched run evaluates ``channel_batch_size`` ablations per forward over a
repeated batch (``replicated_score``); the loop runs one forward per channel. Both
run interleaved in one process on one thread; medians are compared and the maps
are checked to agree before a speed-up is printed.

    .venv/bin/python benchmarks/bench_ablation.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from vinlens.attribution import VisionCaptureMode, ablation_cam
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="narrower layer, fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)
    width, repeats = (8, 2) if args.quick else (32, 3)
    images = make_camera_images(1, evidence={"slam-left": (30, 30)}, seed=0)
    for mode in VisionCaptureMode:
        model = MultiCameraDemoModel(mode, width=width)
        target = model.camera_targets()[1]

        def score(model: MultiCameraDemoModel = model) -> torch.Tensor:
            scores: torch.Tensor = model(images)[:, EVIDENCE_CLASS]
            return scores

        def replicated(repeats: int, model: MultiCameraDemoModel = model) -> torch.Tensor:
            tiled = {key: image.repeat(repeats, 1, 1, 1) for key, image in images.items()}
            scores: torch.Tensor = model(tiled)[:, EVIDENCE_CLASS]
            return scores

        loop_times, batched_times = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            looped = ablation_cam(model, target, score)
            loop_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            batched = ablation_cam(
                model, target, score, replicated_score=replicated, channel_batch_size=width
            )
            batched_times.append(time.perf_counter() - start)
        if not torch.allclose(looped, batched, atol=1e-5, rtol=1e-4):
            raise SystemExit(f"{mode.value}: batched and looped maps differ")
        loop_s, batched_s = statistics.median(loop_times), statistics.median(batched_times)
        print(
            f"{mode.value:22s} channels={width}  one-channel loop {loop_s * 1e3:8.1f} ms  "
            f"batched {batched_s * 1e3:8.1f} ms  speed-up {loop_s / batched_s:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
