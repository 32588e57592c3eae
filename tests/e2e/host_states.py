"""Build every widget as the tour does and write its synced state to JSON, for host pages.

``python tests/e2e/host_states.py OUT_DIR DEMO_DIR`` writes ``OUT_DIR/<bundle>.json`` per
widget (the bundle name is the ``static/<bundle>.js`` it renders with), ``{"title", "bundle",
"state"}``, bytes as ``{"$b64": ...}``. Run in its own process so the test process holds no
torch model and no widget threads. A page without JupyterLab (tests/e2e/host_page) renders
them with the built ESM/CSS and a small model like js/lib/fake-model.ts.
"""

from __future__ import annotations

import base64
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _jsonable(node: Any) -> Any:
    if isinstance(node, (bytes, bytearray, memoryview)):
        return {"$b64": base64.b64encode(bytes(node)).decode("ascii")}
    if isinstance(node, dict):
        return {str(k): _jsonable(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_jsonable(v) for v in node]
    return node


def widget_state(widget: Any) -> dict[str, Any]:
    """The synced traitlets a front end gets, without anywidget's own (_esm, _css, ...)."""
    state = widget.get_state()
    return {k: _jsonable(v) for k, v in state.items() if not k.startswith("_")}


def builders() -> dict[str, Callable[[], Any]]:
    """bundle name -> a function making that widget with the tour's data (shown, computed)."""
    import torch
    from torch.utils.data import DataLoader

    from vinlens.demo import CAMERA_KEYS, EVIDENCE_CLASS, make_camera_images
    from vinlens.demo.config import DemoVinConfig
    from vinlens.demo.data import DEMO_STORE_SPEC, ensure_demo_data
    from vinlens.model_inspection import CaptureLimits
    from vinlens.widgets import (
        AttributionViewerWidget,
        ConfigTreeWidget,
        CoverageHeatmapWidget,
        ModelHealthWidget,
        ModuleTableWidget,
        SnapshotBrowserWidget,
        StoreDashboardWidget,
    )

    torch.manual_seed(0)
    demo = ensure_demo_data()
    config = DemoVinConfig()
    model = config.setup_target().eval()
    images = make_camera_images(batch_size=2, seed=0)
    evidence = {"rgb": (30, 62), "slam-left": (52, 20)}
    views = {k: v[0] for k, v in make_camera_images(evidence=evidence).items()}
    assert set(views) == set(CAMERA_KEYS)

    def module_table() -> Any:
        table = ModuleTableWidget(model)
        table.selected_paths = ["encoders.rgb.conv3", "encoders.slam-left.conv3", "head"]
        return table

    def snapshot_browser() -> Any:
        table = module_table()
        browser = SnapshotBrowserWidget(
            model, lambda: model(images), module_table=table, limits=CaptureLimits(max_tensors=32)
        )
        browser.capture()
        return browser

    def store_dashboard() -> Any:
        w = StoreDashboardWidget(demo.store)
        w.wait(180)
        return w

    def coverage_heatmap() -> Any:
        w = CoverageHeatmapWidget(demo.store)
        w.wait(180)
        return w

    def attribution_viewer() -> Any:
        viewer = AttributionViewerWidget(
            model,
            views,
            target_class=EVIDENCE_CLASS,
            layer="encoders.{camera}.conv3",
            capture_mode="dedicated_layer",
        )
        batches = [
            make_camera_images(batch_size=4, seed=s, evidence={"rgb": (30, 62)}) for s in range(2)
        ]
        viewer.explain_dataset(DataLoader(batches, batch_size=None), keep_samples=4)
        return viewer

    def model_health() -> Any:
        broken = copy.deepcopy(model)
        with torch.no_grad():
            broken.get_submodule("encoders.slam-left.conv2").weight[0, 0, 0, 0] = float("nan")
        return ModelHealthWidget(broken, lambda m: m(images))

    def store_compare() -> Any:
        import dataclasses

        from vinlens.store.synthetic import write_synthetic_store
        from vinlens.widgets.store_compare import StoreCompareWidget

        other = dataclasses.replace(DEMO_STORE_SPEC, seed=DEMO_STORE_SPEC.seed + 1)
        store_b = write_synthetic_store(
            Path(demo.store_dir).parent / "store-b", other, replace=True
        )
        w = StoreCompareWidget(demo.store, store_b.config)
        w.wait(180)
        return w

    def training_monitor() -> Any:
        # The tour's training cell: a norm with its epsilon outside the square root and one
        # all-zero sample at step 120; the monitor names the module on the bad step.
        from torch import nn

        from vinlens.demo.training import build_model
        from vinlens.health import NonFiniteGradientError, TrainingMonitor, precision_headroom
        from vinlens.widgets.training_monitor import TrainingMonitorWidget

        net = build_model()  # RMSNorm with its epsilon outside the square root; seed 0
        inputs = torch.randn(200, 8, 16) * 2e4
        targets = torch.randint(0, 4, (200, 8))
        inputs[120, 3] = 0.0
        monitor = TrainingMonitor(net, every=10)
        view = TrainingMonitorWidget(
            monitor, precision=precision_headroom(net, lambda: net(inputs[0]))
        )
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
        loss_fn = nn.CrossEntropyLoss()
        for step in range(len(inputs)):

            def train_step(step: int = step) -> torch.Tensor:
                optimizer.zero_grad()
                loss = loss_fn(net(inputs[step]), targets[step])
                loss.backward()
                return loss

            try:
                monitor.run_step(train_step)
            except NonFiniteGradientError:
                break
            optimizer.step()
        view.refresh()
        return view

    def run_compare() -> Any:
        # The tour's part 14: the demo network trained twice, the second run's learning rate
        # doubled after step 60; compared from their run logs.
        from vinlens.demo.notebooks import TWO_RUNS
        from vinlens.widgets.run_compare import RunCompareWidget

        made: dict[str, Any] = {"torch": torch}  # imported by the tour's first cell
        exec(TWO_RUNS, made)  # the tour's own cell, not a copy of it
        return RunCompareWidget(made["base_log"], made["changed_log"], interval=3600)

    return {
        "config_tree": lambda: ConfigTreeWidget(config),
        "module_table": module_table,
        "snapshot_browser": snapshot_browser,
        "store_dashboard": store_dashboard,
        "coverage_heatmap": coverage_heatmap,
        "attribution_viewer": attribution_viewer,
        "model_health": model_health,
        "store_compare": store_compare,
        "training_monitor": training_monitor,
        "run_compare": run_compare,
    }


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for bundle, build in builders().items():
        widget = build()
        doc = {"title": type(widget).__name__, "bundle": bundle, "state": widget_state(widget)}
        (out_dir / f"{bundle}.json").write_text(json.dumps(doc), encoding="utf-8")
        widget.close()
        print(f"[host-states] {bundle}: {type(widget).__name__}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
