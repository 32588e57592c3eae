"""The wire contract: Python payloads and the TypeScript decoders agree, for every widget.

Each widget is built for real (torch models, a zarr store, raw tars); its synced state is
split the way ipywidgets sends it (binary parts out, with their paths) and written to a
fixture directory together with what the state *means* (``payload_decode.canonical``,
the spec in docs/architecture.md read in Python). ``js/lib/wire-contract.test.ts``
then decodes every fixture with ``js/lib/payload.ts`` and must arrive at the same
meaning. A widget added to vinlens gets a case in ``_cases`` below.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import pytest
import torch
from ipywidgets.widgets.widget import _remove_buffers
from payload_decode import canonical

from vinlens.widgets._base import STATIC_DIR
from vinlens.widgets._payload import encode_array, encode_float, encode_table, split_buffers

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("npx") is None or not (REPO / "node_modules").exists(),
    reason="needs node and the JS dev dependencies (npm install)",
)

_ANYWIDGET_TRAITS = set(anywidget.AnyWidget.class_trait_names(sync=True)) | {
    "_esm",
    "_css",
    "_anywidget_id",
}


def _widget_state(widget: Any) -> dict[str, Any]:
    """The synced traitlets a vinlens widget adds, serialized as ipywidgets sends them."""
    names = sorted(set(widget.trait_names(sync=True)) - _ANYWIDGET_TRAITS)
    state: dict[str, Any] = widget.get_state(names)
    return state


def _edge_cases() -> dict[str, Any]:
    """Every dtype and the corners of the spec, beside the widgets' real payloads."""
    big = np.array([0, 2**40, -(2**40)], dtype=np.int64)  # does not fit int32: float64
    return {
        "floats": [encode_float(v) for v in (1.5, float("nan"), float("inf"), -float("inf"))],
        "arrays": {
            dtype: encode_array(np.array([0, 1, 2, 3, 4, 5], dtype=dtype).reshape(2, 3))
            for dtype in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32")
        },
        "float16": encode_array(np.array([0.5, np.nan, np.inf, 65504], dtype=np.float16)),
        "float32": encode_array(np.array([1e-45, -0.0, 3.4e38, np.nan], dtype=np.float32)),
        "float64": encode_array(np.array([[1 / 3, -np.inf]], dtype=np.float64)),
        "big_endian": encode_array(np.array([1, 258, -3], dtype=">i4")),
        "int64_small": encode_array(np.array([1, -2, 2**31 - 1], dtype=np.int64)),
        "int64_big": encode_array(big),
        "uint64": encode_array(np.array([2**53], dtype=np.uint64)),
        "empty_array": encode_array(np.zeros((0, 4), dtype=np.float32)),
        "scalar_array": encode_array(np.array(7.25, dtype=np.float64)),
        "table": encode_table(
            {
                "name": ["", "ascii", "Grüße", "场景/片段", "emoji 🙂", "tab\tnewline\n"],
                "count": np.array([0, 1, 2, 3, 4, 2**31 - 1], dtype=np.int64),
                "ratio": np.array([0.0, np.nan, 0.5, np.inf, -1.0, 1e-300]),
                "flag": np.array([True, False, True, False, True, False]),
            }
        ),
        "empty_table": encode_table({"name": [], "value": np.zeros(0)}),
        "raw_bytes": b"\x00\x01\xfe\xff",
        "nested": [{"deep": [encode_array(np.arange(3, dtype=np.uint16))]}],
    }


def _cases(tmp_path: Path) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(name, make payload) for every widget; the payload is a widget or a plain tree."""
    from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
    from vinlens.demo.config import DemoVinConfig
    from vinlens.model_inspection import CaptureLimits
    from vinlens.store.synthetic import SyntheticRawSpec, write_synthetic_dataset
    from vinlens.widgets import (
        AttributionViewerWidget,
        ConfigTreeWidget,
        CoverageHeatmapWidget,
        ModelHealthWidget,
        ModuleTableWidget,
        RunCompareWidget,
        SnapshotBrowserWidget,
        StoreCompareWidget,
        StoreDashboardWidget,
        TrainingMonitorWidget,
    )

    model = MultiCameraDemoModel()
    images = {k: v[0] for k, v in make_camera_images(seed=3).items()}
    dataset = write_synthetic_dataset(
        tmp_path / "ds", raw_spec=SyntheticRawSpec(missing_snippets_per_scene=2)
    )

    def snapshot_browser() -> Any:
        batch = make_camera_images(seed=1)
        w = SnapshotBrowserWidget(
            model, lambda: model(batch), limits=CaptureLimits(max_samples_per_tensor=8)
        )
        w.capture(module_paths=["encoders.rgb.conv1", "head"])
        return w

    def model_health() -> Any:
        from vinlens.health import collect_activation_stats, find_nonfinite_origin

        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            net[0].weight[0, 0] = float("nan")  # a NaN origin, non-finite statistics
        stats = collect_activation_stats(net, [x, x * 2])
        origin = find_nonfinite_origin(net, lambda: net(x))
        return ModelHealthWidget(net, stats=stats, origin=origin)

    def model_health_diff() -> Any:
        from vinlens.health import compare_models

        a = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        b = copy.deepcopy(a)
        with torch.no_grad():
            b[2].weight[0, 0] += 0.5
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(2))
        return ModelHealthWidget(a, diff=compare_models(a, b, lambda m: m(x)))

    def attribution_dataset() -> Any:
        # Labelled batches: the payload then has per-class maps and concentration strips,
        # some of whose samples are past the kept ones (kept_index null).
        batches = []
        for b in range(2):
            parts = [make_camera_images(seed=20 + 2 * b + i) for i in range(2)]
            camera_batch = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            batches.append((camera_batch, torch.tensor([b, 1])))
        w = AttributionViewerWidget(
            model, images, target_class=EVIDENCE_CLASS, layer="encoders.{camera}.conv3"
        )
        w.explain_dataset(batches, keep_samples=3, percentiles=(50,))
        assert len(w.dataset["classes"]) == 3, w.dataset["classes"]
        return w

    def dashboard() -> Any:
        w = StoreDashboardWidget(dataset.config, max_samples=None)
        w.wait(120)
        return w

    def store_compare() -> Any:
        from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

        other = write_synthetic_store(tmp_path / "other", SyntheticStoreSpec(seed=1, num_scenes=4))
        w = StoreCompareWidget(dataset.config, other.config, max_samples=None)
        w.wait(120)
        return w

    def training_monitor() -> Any:
        # Sampled steps (history heatmaps), one recorded NaN event with its origin and
        # traces (float specials in summaries), and a precision column.
        from vinlens.health import TrainingMonitor, precision_headroom

        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
        monitor = TrainingMonitor(net, every=2, on_nonfinite="record")
        for step in range(7):

            def run(step: int = step) -> None:
                net.zero_grad()
                out = net(x)
                loss = (out * 0).sqrt().sum() if step == 5 else out.square().mean()
                loss.backward()

            monitor.run_step(run)
        assert [event.step for event in monitor.events] == [5]
        report = precision_headroom(net, lambda: net(x * 1e4))
        return TrainingMonitorWidget(monitor, precision=report, interval=0)

    def training_monitor_events_message() -> Any:
        # The message a live monitor's widget sends for a new event (the event alone).
        from vinlens.health import TrainingMonitor

        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
        monitor = TrainingMonitor(net, every=2, on_nonfinite="record")
        w = TrainingMonitorWidget(monitor, interval=3600)
        sent: list[Any] = []
        w.send = lambda content, buffers=None: sent.append(content)  # type: ignore[method-assign]
        for step in range(3):

            def run(step: int = step) -> None:
                net.zero_grad()
                out = net(x)
                (((out * 0).sqrt().sum()) if step == 2 else out.square().mean()).backward()

            monitor.run_step(run)
        w.close()
        (message,) = [m for m in sent if m.get("kind") == "events"]
        return message

    def training_monitor_run() -> Any:
        # A run log (open_run): the every-step curves, an event with a replay bundle, and
        # the replay's recomputed origin in `replays`.
        from vinlens.health import TrainingMonitor, open_run

        def make() -> torch.nn.Module:
            torch.manual_seed(4)
            return torch.nn.Sequential(
                torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
            )

        net = make()
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
        log = tmp_path / "run"
        with TrainingMonitor(net, every=2, on_nonfinite="record", log_dir=log) as monitor:
            for step in range(7):

                def run(step: int = step) -> torch.Tensor:
                    net.zero_grad()
                    out = net(x)
                    loss = (out * 0).sqrt().sum() if step == 5 else out.square().mean()
                    loss.backward()
                    return loss

                monitor.run_step(run)
        w = TrainingMonitorWidget(open_run(log), model=make(), interval=3600)
        assert w.replay(5)["agrees"] is True
        return w

    def run_compare() -> Any:
        # Two run logs of one model, the second with one weight initialised differently:
        # both runs' curves, the divergence (module rows as arrays), the relative difference.
        from vinlens.health import TrainingMonitor

        def train(log: Path, nudge: float) -> None:
            torch.manual_seed(4)
            net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
            with torch.no_grad():
                net[2].weight[0, 0] += nudge
            x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            with TrainingMonitor(net, every=2, log_dir=log) as monitor:
                for _ in range(6):

                    def run() -> torch.Tensor:
                        optimizer.zero_grad()
                        loss = net(x).square().mean()
                        loss.backward()
                        return loss

                    monitor.run_step(run)
                    optimizer.step()

        train(tmp_path / "compare-a", 0.0)
        train(tmp_path / "compare-b", 0.01)
        return RunCompareWidget(tmp_path / "compare-a", tmp_path / "compare-b", interval=3600)

    def coverage() -> Any:
        w = CoverageHeatmapWidget(dataset.config)
        w.wait(120)
        return w

    def coverage_reply() -> Any:
        w = coverage()
        scene = w.record.per_scene[0].scene_id
        reply = w.run_command("scene_snippets", {"scene_id": scene})
        assert reply["kind"] == "result", reply
        return reply

    yield "config_tree", lambda: ConfigTreeWidget(DemoVinConfig())
    yield "module_table", lambda: ModuleTableWidget(model)
    yield "snapshot_browser", snapshot_browser
    yield (
        "attribution_viewer",
        lambda: AttributionViewerWidget(
            model, images, target_class=EVIDENCE_CLASS, layer="encoders.{camera}.conv3"
        ),
    )
    yield "attribution_viewer_dataset", attribution_dataset
    yield "model_health_stats_and_origin", model_health
    yield "model_health_diff", model_health_diff
    yield "store_dashboard", dashboard
    yield "store_compare", store_compare
    yield "training_monitor", training_monitor
    yield "training_monitor_run", training_monitor_run
    yield "training_monitor_events_message", training_monitor_events_message
    yield "run_compare", run_compare
    yield "coverage_heatmap", coverage
    yield "coverage_heatmap_scene_snippets_reply", coverage_reply
    yield "edge_cases", _edge_cases


def _write_fixture(out: Path, name: str, made: Any) -> None:
    if isinstance(made, anywidget.AnyWidget):
        state = _widget_state(made)
        made.close()
        meaning = canonical(state)
        stripped, paths, buffers = _remove_buffers(state)
    else:
        # A custom message or a plain tree: split as _base sends it, then placed back
        # at the same spots, as the browser's joinBuffers does.
        meaning = canonical(made)
        stripped, paths, buffers = _remove_buffers(made)
        assert split_buffers(made)[1] == [bytes(b) for b in buffers]
    for i, buffer in enumerate(buffers):
        (out / f"{name}.{i}.bin").write_bytes(bytes(buffer))
    fixture = {"name": name, "state": stripped, "buffer_paths": paths, "expected": meaning}
    (out / f"{name}.json").write_text(json.dumps(fixture, allow_nan=False), encoding="utf-8")


@pytest.mark.skipif(not (STATIC_DIR / "config_tree.js").exists(), reason="bundle not built")
def test_every_widget_payload_decodes_in_the_browser_to_what_python_sent(tmp_path):
    torch.manual_seed(0)
    out = tmp_path / "fixtures"
    out.mkdir()
    names = []
    for name, make in _cases(tmp_path):
        _write_fixture(out, name, make())
        names.append(name)
    report = tmp_path / "vitest.json"
    done = subprocess.run(
        [
            "npx",
            "vitest",
            "run",
            "js/lib/wire-contract.test.ts",
            "--reporter=json",
            f"--outputFile={report}",
        ],
        cwd=REPO,
        env={**os.environ, "VINLENS_WIRE_FIXTURES": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert report.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(report.read_text(encoding="utf-8"))
    tests = {t["title"]: t for suite in results["testResults"] for t in suite["assertionResults"]}
    failures = {
        title: "\n".join(t.get("failureMessages", []))[:2000]
        for title, t in tests.items()
        if t["status"] != "passed"
    }
    assert not failures, f"{sorted(failures)} disagree; first: {next(iter(failures.values()), '')}"
    assert set(names) <= set(tests), (names, sorted(tests))
    assert "attribution_viewer_dataset has what the dataset view reads" in tests, sorted(tests)
    assert "training_monitor has what the monitor view reads" in tests, sorted(tests)
    assert "training_monitor_run has what the run view reads" in tests, sorted(tests)
    assert "training_monitor_events_message is one new event" in tests, sorted(tests)
    assert "run_compare has what the comparison view reads" in tests, sorted(tests)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
