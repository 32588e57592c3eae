"""Dataset aggregation of attribution maps vs the explanations it is made of.

Target: aggregate_attributions over N batches / N single-batch explain_cameras calls
on the same batches <= 1.1 (folding maps into means, histograms and top-k costs
little beside the explanations). Both sides run interleaved in one process, eval
mode, one thread; the median of the rounds is compared, because this machine is
shared and noisy.

    .venv/bin/python benchmarks/bench_attr_aggregate.py [--quick]
"""

from __future__ import annotations

import argparse

import torch

from _attr_timing import interleaved_medians, verdict
from vinlens.attribution import (
    CameraExplanationTarget,
    aggregate_attributions,
    explain_cameras,
)
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images

TARGET_RATIO = 1.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer and smaller batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Ablation-CAM costs a forward per channel batch, so it gets a smaller slice.
    sizes = {
        "grad_cam": (4, 5, 3) if args.quick else (8, 20, 5),
        "ablation_cam": (2, 3, 3) if args.quick else (4, 8, 3),
    }
    evidence = {"rgb": (40, 40), "slam-left": (30, 30)}
    worst = 0.0
    for method, (batch, count, rounds) in sizes.items():
        batches = [make_camera_images(batch, evidence=evidence, seed=s) for s in range(count)]
        model = MultiCameraDemoModel("dedicated_layer")
        targets = model.camera_targets()

        def explain_each(
            method: str = method,
            model: MultiCameraDemoModel = model,
            targets: tuple[CameraExplanationTarget, ...] = targets,
            batches: list[dict[str, torch.Tensor]] = batches,
        ) -> None:
            for images in batches:
                explain_cameras(model, images, EVIDENCE_CLASS, targets, method=method)

        def aggregate(
            method: str = method,
            model: MultiCameraDemoModel = model,
            targets: tuple[CameraExplanationTarget, ...] = targets,
            batches: list[dict[str, torch.Tensor]] = batches,
        ) -> None:
            aggregate_attributions(
                model, batches, targets, score=EVIDENCE_CLASS, method=method
            ).finish()

        plain_s, folded_s = interleaved_medians(explain_each, aggregate, rounds=rounds, repeats=1)
        ratio = folded_s / plain_s
        worst = max(worst, ratio)
        print(
            f"{method:12s} {count} batches of {batch}: explain_cameras x{count} "
            f"{plain_s * 1e3:8.1f} ms  aggregate_attributions {folded_s * 1e3:8.1f} ms  "
            f"ratio {ratio:.3f}"
        )
    print(verdict(worst, TARGET_RATIO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
