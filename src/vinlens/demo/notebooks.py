"""The tour and per-area notebooks, kept as code so they never drift from the API.

``notebooks/*.ipynb`` in the repository are written from here (``python -m
vinlens.demo.notebooks notebooks``); a test checks they are in sync and the suite
executes every one of them. ``vinlens demo`` writes them next to the demo data.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbformat.sign import NotebookNotary
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

__all__ = [
    "NOTEBOOKS",
    "TOUR_NOTEBOOK",
    "build_notebook",
    "notebook_metadata",
    "trust_notebook",
    "write_notebooks",
]

TOUR_NOTEBOOK = "tour.ipynb"

_Cell = tuple[str, str]  # ("md" | "code", source)

_SETUP = """\
import torch
import vinlens
from vinlens.demo import CAMERA_KEYS, EVIDENCE_CLASS, make_camera_images
from vinlens.demo.config import DemoVinConfig
from vinlens.demo.data import ensure_demo_data

torch.manual_seed(0)
demo = ensure_demo_data()  # a synthetic store + raw tar shards, made once and cached
config = DemoVinConfig()
model = config.setup_target().eval()
images = make_camera_images(batch_size=2, seed=0)
# one image per camera, with bright evidence planted in the rgb and the left slam camera
views = {k: v[0] for k, v in make_camera_images(evidence={'rgb': (30, 62), 'slam-left': (52, 20)}).items()}
demo.store_dir"""

#: Tour part 14: the demo network trained twice, the second run with one planted change
#: (a learning rate doubled after step 60); also run by the run comparison's e2e test.
TWO_RUNS = """\
import tempfile

from torch import nn

from vinlens.demo.training import build_model
from vinlens.health import TrainingMonitor, compare_runs


def train(log_dir, lr_after_60):
    net = build_model()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(100, 8, 16, generator=generator) * 2e4
    targets = torch.randint(0, 4, (100, 8), generator=generator)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    with TrainingMonitor(net, every=10, log_dir=log_dir) as monitor:
        for step in range(100):
            def train_step():
                optimizer.zero_grad()
                loss = loss_fn(net(inputs[step]), targets[step])
                loss.backward()
                return loss
            monitor.run_step(train_step)
            if step == 60:
                optimizer.param_groups[0]['lr'] = lr_after_60
            optimizer.step()


runs = tempfile.mkdtemp(prefix='vinlens-runs-')
base_log, changed_log = runs + '/base', runs + '/changed'
train(base_log, lr_after_60=0.05)
train(changed_log, lr_after_60=0.1)  # the planted change
found = compare_runs(base_log, changed_log)
print('first step', found.first_step, '| cause', found.cause, '| module', found.module,
      '|', found.field, found.value_a, '->', found.value_b)"""

TOUR: list[_Cell] = [
    (
        "md",
        "# vinlens tour\n\n"
        "Everything vinlens shows, on a small three-camera model (an RGB and two SLAM cameras, "
        "as on Aria glasses) and a synthetic VIN offline store. Run the cells top to bottom; "
        "every widget answers clicks by asking the kernel, so keep the kernel running.",
    ),
    ("code", _SETUP),
    (
        "md",
        "## 1. The config, without constructing anything\n\n"
        "`inspect_config` walks the Pydantic tree and never calls `setup_target`. "
        "Search, expand and collapse in the widget.",
    ),
    ("code", "vinlens.show(config)"),
    (
        "md",
        "## 2. The constructed model as a module table\n\n"
        "Choose the modules to capture as in a file browser: a click selects one row, "
        "Ctrl/⌘-click adds or removes a row, Shift-click selects a range (or use *Select subtree*). "
        "The selection is the `selected_paths` traitlet, so Python sees it and can set it.",
    ),
    (
        "code",
        "from vinlens.widgets import ModuleTableWidget\n\ntable = ModuleTableWidget(model)\ntable",
    ),
    (
        "code",
        "table.selected_paths = ['encoders.rgb.conv3', 'encoders.slam-left.conv3', 'head']\n"
        "table.selected_paths",
    ),
    (
        "md",
        "## 3. Bounded tensor snapshots\n\n"
        "`run` is your ordinary forward. *Capture* hooks the selected modules, runs it, and removes "
        "the hooks again, whatever happens. At most `max_bytes` of values are ever copied.",
    ),
    (
        "code",
        "from vinlens.model_inspection import CaptureLimits\n"
        "from vinlens.widgets import SnapshotBrowserWidget\n\n"
        "browser = SnapshotBrowserWidget(model, lambda: model(images), module_table=table,\n"
        "                                limits=CaptureLimits(max_tensors=32))\n"
        "browser",
    ),
    (
        "code",
        "snapshots = browser.capture()\n"
        "try:\n"
        "    display(browser.to_dataframe().head())\n"
        "except ImportError as missing:  # pandas comes with the optional vinlens[export] extra\n"
        "    print(missing)",
    ),
    ("code", "browser.export('snapshots.csv')\nprint(open('snapshots.csv').read()[:400])"),
    (
        "md",
        "## 4. The offline training store\n\n"
        "Statistics are computed off the kernel's main thread; *Refresh* re-reads and tells you "
        "if the store on disk was replaced in between.",
    ),
    (
        "code",
        "from vinlens.widgets import StoreDashboardWidget\n\nStoreDashboardWidget(demo.store)",
    ),
    (
        "md",
        "## 5. Coverage of the raw ASE tar shards\n\n"
        "Only tar headers are read. Click a scene to list its missing and outside snippets.",
    ),
    (
        "code",
        "from vinlens.widgets import CoverageHeatmapWidget\n\n"
        "coverage = CoverageHeatmapWidget(demo.store)\ncoverage",
    ),
    (
        "md",
        "## 6. What each camera looks at\n\n"
        "Grad-CAM for one camera at a time, whether the cameras have their own layers "
        "(here), share one layer called per camera, or share one stacked batch.",
    ),
    (
        "code",
        "from vinlens.widgets import AttributionViewerWidget\n\n"
        "viewer = AttributionViewerWidget(model, views, target_class=EVIDENCE_CLASS,\n"
        "                                 layer='encoders.{camera}.conv3', capture_mode='dedicated_layer')\n"
        "viewer",
    ),
    (
        "code",
        "shared = DemoVinConfig(encoder={'capture_mode': 'stacked_camera_batch'}).setup_target().eval()\n"
        "AttributionViewerWidget(shared, views, target_class=EVIDENCE_CLASS,\n"
        "                        layer='encoder.conv3', capture_mode='stacked_camera_batch')",
    ),
    (
        "md",
        "## 7. Where did the NaN come from?\n\n"
        "A copy of the model gets one NaN weight in the left SLAM camera's `conv2`. "
        "`ModelHealthWidget` runs one forward, shows every module's activation statistics and "
        "highlights the first module whose finite inputs gave a non-finite output (the origin), "
        "and the modules the NaN reached after it. The same records come from "
        "`vinlens.health.find_nonfinite_origin` and `collect_activation_stats` in scripts.",
    ),
    (
        "code",
        "import copy\n"
        "from vinlens.widgets import ModelHealthWidget\n\n"
        "broken = copy.deepcopy(model)\n"
        "with torch.no_grad():\n"
        "    broken.get_submodule('encoders.slam-left.conv2').weight[0, 0, 0, 0] = float('nan')\n"
        "health = ModelHealthWidget(broken, lambda m: m(images))\n"
        "print('NaN origin:', health.origin.module_path)\n"
        "health",
    ),
    (
        "md",
        "## 8. What changed between two checkpoints?\n\n"
        "With `model_b` the health view is in diff mode: both models run the same input in "
        "lockstep (`vinlens.health.compare_models`) and each module gets a drift bar "
        "(relative L2, max |diff|, cosine). Here the RGB camera's `conv2` of the copy is scaled by "
        "1.1, so the drift starts there. A `ModuleSelection` shared with a module table keeps "
        "both views on the same modules: pick rows in either one.",
    ),
    (
        "code",
        "from vinlens.widgets import ModuleSelection\n\n"
        "tuned = copy.deepcopy(model)\n"
        "with torch.no_grad():\n"
        "    tuned.get_submodule('encoders.rgb.conv2').weight.mul_(1.1)\n"
        "selection = ModuleSelection()\n"
        "drift = ModelHealthWidget(model, lambda m: m(images), model_b=tuned, selection=selection)\n"
        "linked_table = ModuleTableWidget(model, selection=selection)\n"
        "selection.paths = [drift.diff.first_divergent_path()]  # shows in both widgets\n"
        "display(drift, linked_table)",
    ),
    (
        "md",
        "## 9. Which camera does the model rely on, over a data slice?\n\n"
        "`explain_dataset` streams a `DataLoader` through the viewer's method and layer: "
        "the mean (and percentile) attribution maps per camera, a slider over the first samples, "
        "and camera reliance bars (how much the target score drops when one camera's input "
        "is replaced by a baseline). Here the evidence is planted in the RGB camera only.",
    ),
    (
        "code",
        "from torch.utils.data import DataLoader\n\n"
        "batches = [make_camera_images(batch_size=4, seed=s, evidence={'rgb': (30, 62)}) for s in range(4)]\n"
        "slice_viewer = AttributionViewerWidget(model, views, target_class=EVIDENCE_CLASS,\n"
        "                                       layer='encoders.{camera}.conv3', capture_mode='dedicated_layer')\n"
        "slice_viewer.explain_dataset(DataLoader(batches, batch_size=None), keep_samples=8)\n"
        "slice_viewer",
    ),
    (
        "md",
        "## 10. The store behind a URL, statistics in other processes\n\n"
        "Stores open from any fsspec URL (`file://`, `memory://`, `s3://bucket/store` with "
        "`storage_options={...}` for credentials or an endpoint; `pip install 'vinlens[s3]'`). "
        "`executor=` takes any `concurrent.futures.Executor` for the statistics: a process pool "
        "here, or a Dask cluster's `distributed.Client(...).get_executor()` "
        "(`pip install 'vinlens[dask]'`).",
    ),
    (
        "code",
        "from concurrent.futures import ProcessPoolExecutor\n\n"
        "pool = ProcessPoolExecutor(2)\n"
        "StoreDashboardWidget('file://' + str(demo.store_dir), executor=pool)",
    ),
    (
        "md",
        "## 11. A training run that blows up at a known step\n\n"
        "The small network below (`vinlens.demo.training.build_model`) has an `RMSNorm` with its "
        "epsilon outside the square root (its `forward` is printed). "
        "At step 120 one sample is all zeros (a camera that went dark): the forward stays "
        "finite, but the gradient of `sqrt` at 0 is infinite and the backward makes NaN. "
        "`TrainingMonitor` checks every step with one gradient norm, replays the bad step "
        "from its saved random state and names the module; `TrainingMonitorWidget`, shown "
        "before the loop, updates while it runs: gradient norm and activation std per module "
        "and step, the event on the step axis, the origin row highlighted, and the float16 "
        "headroom of each module (`encoder.0` would overflow: under 1 bit). See "
        "`docs/health.md`.",
    ),
    (
        "code",
        "import inspect\n\nfrom torch import nn\n\nfrom vinlens.demo.training import RMSNorm, build_model\nfrom vinlens.health import NonFiniteGradientError, TrainingMonitor, precision_headroom\nfrom vinlens.widgets import TrainingMonitorWidget\n\nnet = build_model()  # encoder (Linear, RMSNorm, ReLU), head; seeded\nprint(inspect.getsource(RMSNorm.forward))  # the bug: + 1e-6 after the sqrt\ninputs = torch.randn(200, 8, 16) * 2e4  # raw sensor units\ntargets = torch.randint(0, 4, (200, 8))\ninputs[120, 3] = 0.0  # at step 120 one camera went dark: an all-zero sample\nmonitor = TrainingMonitor(net, every=10)\nview = TrainingMonitorWidget(monitor, precision=precision_headroom(net, lambda: net(inputs[0])))\n",
    ),
    ("code", "view"),
    (
        "code",
        "optimizer = torch.optim.SGD(net.parameters(), lr=0.05)\nloss_fn = nn.CrossEntropyLoss()\nfor step in range(len(inputs)):\n    def train_step():\n        optimizer.zero_grad()\n        loss = loss_fn(net(inputs[step]), targets[step])\n        loss.backward()\n        return loss\n    try:\n        monitor.run_step(train_step)\n    except NonFiniteGradientError as error:\n        print(error)\n        break\n    optimizer.step()\nview.refresh()\n",
    ),
    (
        "md",
        "## 12. What changed between two store versions?\n\n"
        "`demo.shifted_store` is the demo store regenerated the way a team regenerates its store: "
        "a new oracle (RRI scaled by 1.25 and shifted by 0.05), one scene dropped and four "
        "samples added. `compare_vin_offline_stores` counts every field of both stores on one "
        "shared binning (float16 exactly, float32 to 2**-7 of the value) and gives each field "
        "PSI, Jensen-Shannon distance, Wasserstein distance and KS statistic; the widget ranks "
        "the fields by the metric you pick (the drifted `rri` comes first), overlays both "
        "histograms, lists the samples and scenes found in one store only and each store's "
        "problems. Same from a shell: `vinlens store compare A B`.",
    ),
    (
        "code",
        "from vinlens.store import compare_vin_offline_stores\n"
        "from vinlens.widgets import StoreCompareWidget\n\n"
        "comparison = compare_vin_offline_stores(demo.store, demo.shifted_store, max_samples=None)\n"
        "print([f.name for f in comparison.most_drifted(k=3)], comparison.scenes_only_in_a)\n"
        "StoreCompareWidget(demo.store, demo.shifted_store, max_samples=None)",
    ),
    (
        "md",
        "## 13. A run from a script: open its log, replay the failing step\n\n"
        "Real training runs in a script, on another machine, for days. `vinlens.demo.training` "
        "is such a script: the network of part 11 under a `TrainingMonitor` with "
        "`log_dir=...` (a path or an `s3://` URL). It stops at step 120 with the "
        "`NonFiniteGradientError`, and its run log holds every step's loss and gradient norm, "
        "every sampled step's per-module row, the event, and a replay bundle: the weights as "
        "the step started, the model's inputs and the gradient at its output. Any process "
        "opens the log (while it grows, too) and re-executes exactly that step in a model it "
        "builds itself; from a shell, `vinlens run show LOG_DIR` and `vinlens run replay "
        "LOG_DIR --step 120 --model vinlens.demo.training.build_model`. See `docs/health.md`.",
    ),
    (
        "code",
        "import subprocess\nimport sys\nimport tempfile\n\n"
        "from vinlens.demo.training import build_model\n"
        "from vinlens.health import open_run\n\n"
        "log_dir = tempfile.mkdtemp(prefix='vinlens-run-') + '/exp42'\n"
        "script = subprocess.run([sys.executable, '-m', 'vinlens.demo.training', log_dir],\n"
        "                        capture_output=True, text=True)\n"
        "print('script exit status', script.returncode, '|', script.stderr.strip().splitlines()[-1])\n"
        "run = open_run(log_dir)\n"
        "series = run.step_series()\n"
        "print(len(series.steps), 'steps logged,', len(run.sampled_steps()), 'sampled;',\n      [(e.step, e.rank, e.origin.module_path) for e in run.events])\n"
        "replay = run.load_replay(120, model=build_model())\n"
        "recomputed = replay.run()\n"
        "print('recorded', replay.origin.module_path, '| recomputed', recomputed.module_path)\n",
    ),
    (
        "md",
        "The same log in `TrainingMonitorWidget`: the every-step loss and gradient-norm curves "
        "above the per-module heatmaps, the event at step 120 and, with `model=`, a Replay "
        "button that re-executes the step in a fresh model and shows the recomputed origin "
        "beside the recorded one. On a log that still grows, the view follows it.",
    ),
    ("code", "TrainingMonitorWidget(run, model=build_model())"),
    (
        "md",
        "## 14. Where two runs part ways\n\n"
        "A rerun should repeat a run bit for bit; when it does not, the question is at which "
        "step and in which module the two first differ. Below, the network of part 11 "
        "trains twice for 100 steps (before the dark step) under a `TrainingMonitor` with "
        "`log_dir=`: the same seed, the same batches, one planted change in the second run "
        "(its learning-rate schedule doubles the rate after step 60). Each step's log holds "
        "fingerprints: every module's weight norm and parameter-gradient norm and the "
        "model's inputs. `compare_runs` reads both logs and names the first step where "
        "anything differs, the module, what differed and the likely cause (`init`, `data`, "
        "`optimizer`, `forward` or `backward`); from a shell, `vinlens run diff A B`. "
        "`RunCompareWidget` shows both runs' loss and gradient-norm curves with that step "
        "marked, and a module by step heatmap of the relative difference, the divergent "
        'module highlighted; "Go to module" picks it in the module table linked to the '
        "same `ModuleSelection`. It takes log directories, `TrainingRun`s, one rank "
        "(`open_run(d).rank(r)`) or a live `TrainingMonitor`, and follows runs still being "
        "written.",
    ),
    ("code", TWO_RUNS),
    (
        "code",
        "from vinlens.widgets import ModuleSelection, ModuleTableWidget, RunCompareWidget\n\n"
        "picked = ModuleSelection()\n"
        "compare = RunCompareWidget(base_log, changed_log, selection=picked)\n"
        "compare",
    ),
    ("code", "ModuleTableWidget(build_model(), selection=picked)"),
]

MODEL_INSPECTION: list[_Cell] = [
    (
        "md",
        "# Model inspection without a notebook UI\n\n"
        "The engines return frozen records you can use in scripts and tests.",
    ),
    ("code", _SETUP),
    (
        "code",
        "from vinlens.model_inspection import inspect_config, inspect_model, capture_model, CaptureLimits\n\n"
        "spec = inspect_config(config)\n"
        "print(spec.config_type, '->', spec.target_type)\n"
        "for field in spec.fields[:8]:\n"
        "    print('.'.join(field.path), '|', field.declared_type, '|', field.value)",
    ),
    (
        "code",
        "meta = inspect_model(model)\n"
        "print(meta.model_type, meta.total_parameters, meta.trainable_parameters)\n"
        "[(m.path, m.module_type.rsplit('.', 1)[-1], m.direct_parameters) for m in meta.modules[:6]]",
    ),
    (
        "code",
        "with capture_model(model, module_paths=['head'], limits=CaptureLimits(max_samples_per_tensor=4)) as cap:\n"
        "    model(images)\n"
        "for s in cap.snapshots:\n"
        "    print(s.module_path, s.call_index, s.direction, s.tensor_path, s.shape, s.values)",
    ),
    (
        "code",
        "from vinlens.export import to_dataframe\n\n"
        "try:\n"
        "    display(to_dataframe(cap.snapshots).head())\n"
        "except ImportError as missing:  # pandas comes with the optional vinlens[export] extra\n"
        "    print(missing)",
    ),
]

STORE_DIAGNOSTICS: list[_Cell] = [
    (
        "md",
        "# Store diagnostics from Python\n\nThe same statistics the dashboard shows, as records.",
    ),
    ("code", _SETUP),
    (
        "code",
        "from vinlens.store.diagnostics import collect_vin_offline_dataset_stats, collect_vin_offline_dataset_coverage\n\n"
        "stats = collect_vin_offline_dataset_stats(demo.store, max_samples=128)\n"
        "stats.num_samples, stats.sampled_samples, stats.split_counts, stats.candidate_count",
    ),
    (
        "code",
        "coverage = collect_vin_offline_dataset_coverage(demo.store)\n"
        "print(f'{coverage.coverage:.1%} of {coverage.dataset_snippets} raw snippets are in the store')\n"
        "coverage.missing_examples[:5]",
    ),
    (
        "code",
        "from vinlens import plotting\n\nplotting.plot_rri_histogram(stats)",
    ),
    ("code", "plotting.plot_scene_coverage(coverage)"),
]

ATTRIBUTION: list[_Cell] = [
    ("md", "# Per-camera attribution from Python"),
    ("code", _SETUP),
    (
        "code",
        "from vinlens.attribution import explain_cameras, camera_targets_for_layer\n\n"
        "targets = camera_targets_for_layer('encoders.{camera}.conv3', 'dedicated_layer', CAMERA_KEYS)\n"
        "attributions = explain_cameras(model, views, EVIDENCE_CLASS, targets)\n"
        "[(a.camera_key, a.method, a.raw_map.shape) for a in attributions]",
    ),
]

NOTEBOOKS: dict[str, list[_Cell]] = {
    TOUR_NOTEBOOK: TOUR,
    "01_model_inspection.ipynb": MODEL_INSPECTION,
    "02_store_diagnostics.ipynb": STORE_DIAGNOSTICS,
    "03_attribution.ipynb": ATTRIBUTION,
}


def notebook_metadata() -> dict[str, Any]:
    """The metadata a running ipykernel reports, so JupyterLab has nothing to update on open.

    Lab copies the kernel's ``kernelspec`` and ``language_info`` into the notebook once the
    kernel is up; any difference would mark a freshly opened notebook as modified.
    """
    return {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {
            "codemirror_mode": {"name": "ipython", "version": 3},
            "file_extension": ".py",
            "mimetype": "text/x-python",
            "name": "python",
            "nbconvert_exporter": "python",
            "pygments_lexer": "ipython3",
            "version": platform.python_version(),
        },
    }


def build_notebook(cells: list[_Cell]) -> nbformat.NotebookNode:
    """A notebook (current nbformat, no outputs, stable cell ids) from ``(kind, source)`` cells."""
    nb = new_notebook(metadata=notebook_metadata())  # type: ignore[no-untyped-call]
    nb.cells = [
        new_markdown_cell(src) if kind == "md" else new_code_cell(src)  # type: ignore[no-untyped-call]
        for kind, src in cells
    ]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids so regenerated files do not churn
    return nb  # type: ignore[no-any-return]


def _same_cells(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    return [(c.cell_type, c.source) for c in a.cells] == [(c.cell_type, c.source) for c in b.cells]


def trust_notebook(path: str | Path) -> None:
    """Record ``path``'s signature in the user's notary database, as ``jupyter trust`` does.

    Without it the server logs "Notebook ... is not trusted" when the notebook opens.
    """
    nb = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    notary = NotebookNotary()  # type: ignore[no-untyped-call]
    try:
        notary.sign(nb)  # type: ignore[no-untyped-call]
    finally:
        notary.store.close()


def write_notebooks(
    directory: str | Path, *, overwrite: bool = True, trust: bool = False
) -> list[Path]:
    """Write every notebook into ``directory``; with ``overwrite=False`` keep existing files.

    With ``trust=True`` each notebook whose cells are still the ones written here (new or
    unedited) is signed in the user's notary database, so it opens trusted; a notebook
    the user edited is left to the user.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, cells in NOTEBOOKS.items():
        path = out / name
        expected = build_notebook(cells)
        if overwrite or not path.exists():
            nbformat.write(expected, str(path))  # type: ignore[no-untyped-call]
            written.append(path)
        if trust:
            current = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
            if _same_cells(current, expected):
                trust_notebook(path)
    return written


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for path in write_notebooks(sys.argv[1] if len(sys.argv) > 1 else "notebooks"):
        print(path)
