"""Camera reliance for C cameras vs C + 1 plain forwards.

Target: camera_reliance over C cameras / (C + 1) plain forwards (eval mode, no
gradients) on the same batch <= 1.2: reliance is one unperturbed forward and one per
camera, so anything beyond that is overhead. Interleaved rounds in one process, one
thread, medians compared.

    .venv/bin/python benchmarks/bench_attr_reliance.py [--quick]
"""

from __future__ import annotations

import argparse

import torch

from _attr_timing import interleaved_medians, verdict
from vinlens.attribution import camera_reliance
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images

TARGET_RATIO = 1.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch, rounds, repeats = (4, 3, 3) if args.quick else (16, 5, 5)
    images = make_camera_images(batch, evidence={"rgb": (40, 40)}, seed=0)
    worst = 0.0
    for mode in ("dedicated_layer", "per_camera_call", "stacked_camera_batch"):
        model = MultiCameraDemoModel(mode)
        cameras = len(images)

        def plain_forwards(model: MultiCameraDemoModel = model, cameras: int = cameras) -> None:
            with torch.no_grad():
                for _ in range(cameras + 1):
                    model(images)[:, EVIDENCE_CLASS]

        def reliance(model: MultiCameraDemoModel = model) -> None:
            camera_reliance(model, images, EVIDENCE_CLASS)

        plain_s, reliance_s = interleaved_medians(
            plain_forwards, reliance, rounds=rounds, repeats=repeats
        )
        ratio = reliance_s / plain_s
        worst = max(worst, ratio)
        print(
            f"{mode:22s} batch={batch}  {cameras + 1} forwards {plain_s * 1e3:7.2f} ms  "
            f"camera_reliance({cameras} cameras) {reliance_s * 1e3:7.2f} ms  ratio {ratio:.3f}"
        )
    print(verdict(worst, TARGET_RATIO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
