"""RunCompareWidget: two runs' curves, where they part ways, per-module differences, live."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from payload_decode import array, wait_for
from torch import nn

from vinlens.health import TrainingMonitor, compare_runs, open_run, relative_difference
from vinlens.health.monitor import SUMMARY_FIELDS
from vinlens.health.monitor.runlog.writer import RunLogWriter
from vinlens.widgets import ModuleSelection, ModuleTableWidget, RunCompareWidget
from vinlens.widgets.run_compare_payload import difference_payload
from vinlens.widgets.training_monitor_payload import MAX_HEATMAP_CELLS

STEPS = 24
CHANGED_STEP = 9
FIELDS = [*SUMMARY_FIELDS, "grad_norm"]


def build_model(nudge: bool = False) -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    if nudge:  # one weight of module "2" initialised differently: an init change
        with torch.no_grad():
            model[2].weight[0, 0] += 1e-3
    return model


def batches(change: bool) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    xs = [torch.randn(16, 4, generator=generator) for _ in range(STEPS)]
    if change:
        xs[CHANGED_STEP][2, 1] += 0.5  # one sample of one batch differs: a data change
    return xs


def train(
    log_dir: Path | None, *, change: bool = False, nudge: bool = False, steps: int = STEPS
) -> TrainingMonitor:
    model = build_model(nudge)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    xs = batches(change)
    monitor = TrainingMonitor(model, every=3, log_dir=log_dir)
    for step in range(steps):

        def step_fn(x: torch.Tensor = xs[step]) -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        monitor.run_step(step_fn)
        optimizer.step()
    if log_dir is not None:
        monitor.close()
    return monitor


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    train(root / "base")
    train(root / "rerun")
    train(root / "changed", change=True)
    train(root / "nudged", nudge=True)
    return root / "base", root / "rerun", root / "changed", root / "nudged"


def test_a_planted_change_is_found_marked_and_shown_per_module(
    logs: tuple[Path, Path, Path, Path],
) -> None:
    base, _, changed, _ = logs
    widget = RunCompareWidget(base, changed, interval=3600)
    found = compare_runs(base, changed)
    assert widget.divergence == found
    assert found.first_step == CHANGED_STEP and found.cause == "data"
    verdict = widget.verdict
    assert verdict["identical"] is False and verdict["first_step"] == CHANGED_STEP
    assert verdict["cause"] == "data" and verdict["field"] == found.field
    assert verdict["module"] is None  # the inputs differ: no module made the difference
    # One row per shared module in production order, its first differing steps as arrays.
    assert verdict["module_paths"] == [m.path for m in found.modules]
    grads = [-1 if m.grads is None else m.grads for m in found.modules]
    assert array(verdict["module_grads"]).tolist() == grads
    assert min(g for g in grads if g >= 0) == CHANGED_STEP
    # Both runs' every-step curves, apart from the changed step on.
    a, b = widget.curves["a"], widget.curves["b"]
    assert array(a["steps"]).tolist() == list(range(STEPS)) == array(b["steps"]).tolist()
    loss_a, loss_b = array(a["loss_hi"]), array(b["loss_hi"])
    np.testing.assert_array_equal(loss_a[:CHANGED_STEP], loss_b[:CHANGED_STEP])
    assert loss_a[CHANGED_STEP] != loss_b[CHANGED_STEP]
    # The heatmap is the engine's relative difference of the picked field.
    matrix = relative_difference(open_run(base), open_run(changed), field="grad_norm")
    difference = widget.difference
    assert difference["paths"] == list(matrix.module_paths) == verdict["module_paths"]
    np.testing.assert_array_equal(array(difference["values"]), matrix.values.astype(np.float32))
    values = array(difference["values"])
    assert (values[:, :CHANGED_STEP] == 0).all() and (values[:, CHANGED_STEP] > 0).any()
    assert widget.runs["a"]["label"] == str(base) and widget.runs["ranks"] == [0]
    widget.close()


def test_go_to_module_picks_the_divergent_module_in_a_linked_module_table(
    logs: tuple[Path, Path, Path, Path],
) -> None:
    base, _, _, nudged = logs
    picked = ModuleSelection()
    table = ModuleTableWidget(build_model(), selection=picked)
    widget = RunCompareWidget(open_run(base), open_run(nudged), selection=picked, interval=3600)
    module = widget.verdict["module"]
    assert (module, widget.verdict["cause"], widget.verdict["first_step"]) == ("2", "init", 0)
    widget.go_to_module()
    assert widget.selected_paths == [module]
    assert picked.paths == [module] and table.selected_paths == [module]
    widget.selected_paths = []  # what the browser's selection sets: shared as well
    assert table.selected_paths == []
    widget.close()


def test_identical_runs_and_the_field_picker(logs: tuple[Path, Path, Path, Path]) -> None:
    base, rerun, _, _ = logs
    widget = RunCompareWidget(str(base), open_run(rerun).rank(0), interval=0.05)
    verdict = widget.verdict
    assert verdict["identical"] is True and verdict["first_step"] is None
    assert verdict["steps_compared"] == STEPS
    assert (array(widget.difference["values"]) == 0).all()
    with pytest.raises(ValueError, match="did not diverge"):
        widget.go_to_module()
    widget.field = "weight_norm"  # what the browser's picker sets: recomputed off the comms
    wait_for(lambda: widget.difference.get("field") == "weight_norm")
    assert array(widget.difference["steps"]).tolist() == list(range(STEPS))
    widget.field = "std"
    wait_for(lambda: widget.difference.get("field") == "std")
    assert array(widget.difference["steps"]).tolist() == list(range(0, STEPS, 3))
    widget.field = "nonsense"  # a stale or hostile browser: refused, shown, the old kept
    assert widget.field == "std" and "unknown field" in widget.error
    widget.close()


def test_a_live_monitor_shows_its_curves_beside_a_log(
    logs: tuple[Path, Path, Path, Path],
) -> None:
    base, _, _, _ = logs
    monitor = train(None, steps=10)
    widget = RunCompareWidget(base, monitor, interval=0.05)
    assert widget.runs["b"]["live"] is True
    assert widget.divergence is None and "log_dir=" in widget.verdict["note"]
    np.testing.assert_array_equal(array(widget.curves["b"]["loss_hi"]), monitor.step_series().loss)
    assert widget.curves["a"]["steps_total"] == STEPS
    widget.close()


def test_a_monitor_with_a_run_log_is_compared_through_its_log(
    logs: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    _, _, changed, _ = logs
    monitor = train(tmp_path / "live")  # closed: every record flushed
    widget = RunCompareWidget(monitor, changed, interval=3600)
    assert widget.divergence == compare_runs(monitor.log_dir, changed)
    assert widget.divergence is not None and widget.divergence.first_step == CHANGED_STEP
    assert widget.runs["a"]["live"] is False
    widget.close()


def test_a_growing_log_is_compared_again_when_it_moves(tmp_path: Path) -> None:
    paths = ["enc", "head"]
    meta = {"module_paths": paths, "fields": FIELDS, "every": 1}

    def write(run: RunLogWriter, steps: range, loss: Callable[[int], float]) -> None:
        for step in steps:
            run.sample(step, np.full((len(paths), len(FIELDS)), 1.0 + step))
            run.step(step, 2.0, loss(step))
        run.flush()

    a = RunLogWriter(tmp_path / "a", storage_options=None, rank=0, meta=meta)
    write(a, range(20), lambda s: 1.0 / (1 + s))
    a.close()
    b = RunLogWriter(tmp_path / "b", storage_options=None, rank=0, meta=meta)
    write(b, range(8), lambda s: 1.0 / (1 + s))
    widget = RunCompareWidget(tmp_path / "a", tmp_path / "b", interval=0.05)
    assert widget.verdict["identical"] is True and widget.verdict["steps_compared"] == 8
    # B goes on with another loss from step 12: the view follows while the kernel waits.
    write(b, range(8, 16), lambda s: 1.0 / (1 + s) if s < 12 else 0.5)
    wait_for(lambda: widget.verdict.get("first_step") == 12)
    assert widget.verdict["field"] == "loss" and widget.curves["b"]["steps_total"] == 16
    assert widget.verdict["note"]  # no fingerprints in these logs: the engine says so
    b.close()
    widget.close()


def test_the_heatmap_is_bounded_and_keeps_the_largest_difference() -> None:
    from vinlens.health import HistoryMatrix

    modules, steps = 1000, 5000
    values = np.zeros((modules, steps))
    values[417, 3210] = 0.75
    matrix = HistoryMatrix(
        "grad_norm", tuple(range(steps)), tuple(map(str, range(modules))), values
    )
    payload = difference_payload(matrix)
    thinned = array(payload["values"])
    assert thinned.shape[0] == modules and thinned.size <= MAX_HEATMAP_CELLS
    assert payload["samples"] == steps and payload["step_range"] == [0, steps - 1]
    assert thinned[417].max() == np.float32(0.75) and thinned.sum() == np.float32(0.75)


def test_bad_arguments_are_refused_with_what_was_expected(
    logs: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    base, _, _, _ = logs
    with pytest.raises(
        TypeError, match=r"b must be a run log's directory or URL.*got builtins.int"
    ):
        RunCompareWidget(base, 3)
    with pytest.raises(FileNotFoundError):
        RunCompareWidget(base, tmp_path / "nothing-here")
    with pytest.raises(ValueError, match="field must be one of grad_norm, weight_norm, std"):
        RunCompareWidget(base, base, field="loss")
    with pytest.raises(TypeError, match=r"selection must be a vinlens\.widgets\.ModuleSelection"):
        RunCompareWidget(base, base, selection=["0"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval"):
        RunCompareWidget(base, base, interval=-1)
