"""Grad-CAM for one camera vs one plain forward + backward of the same model.

Target: ratio <= 1.2 (the explanation costs about one training step's forward and
backward). Both sides run interleaved in one process, eval mode, one thread, and
the median of the repeats is compared, because this machine is shared and noisy.

    .venv/bin/python benchmarks/bench_gradcam.py [--quick]
"""

from __future__ import annotations

import argparse

import torch

from _attr_timing import interleaved_medians, verdict
from vinlens.attribution import CameraExplanationTarget, VisionCaptureMode, grad_cam
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images

TARGET_RATIO = 1.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch, rounds, repeats = (2, 3, 3) if args.quick else (8, 5, 5)
    images = make_camera_images(batch, evidence={"rgb": (40, 40)}, seed=0)
    worst = 0.0
    for mode in VisionCaptureMode:
        model = MultiCameraDemoModel(mode)
        target = model.camera_targets()[0]

        def plain_step(model: MultiCameraDemoModel = model) -> None:
            model.zero_grad(set_to_none=True)
            model(images)[:, EVIDENCE_CLASS].sum().backward()

        def explain(
            model: MultiCameraDemoModel = model, target: CameraExplanationTarget = target
        ) -> torch.Tensor:
            def score() -> torch.Tensor:
                scores: torch.Tensor = model(images)[:, EVIDENCE_CLASS]
                return scores

            cam: torch.Tensor = grad_cam(model, target, score)
            return cam

        plain_s, cam_s = interleaved_medians(plain_step, explain, rounds=rounds, repeats=repeats)
        ratio = cam_s / plain_s
        worst = max(worst, ratio)
        print(
            f"{mode.value:22s} batch={batch}  forward+backward {plain_s * 1e3:7.2f} ms  "
            f"grad_cam({target.camera_key}) {cam_s * 1e3:7.2f} ms  ratio {ratio:.2f}"
        )
    print(verdict(worst, TARGET_RATIO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
