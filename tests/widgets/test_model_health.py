"""ModelHealthWidget: engine records as module-table columns, NaN origin, A/B diff, selection."""

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import collect_activation_stats, compare_models, find_nonfinite_origin
from vinlens.model_inspection import inspect_model
from vinlens.widgets import ModelHealthWidget, ModuleSelection, ModuleTableWidget
from vinlens.widgets.model_health import health_payload


class Log(nn.Module):
    """log of its input: NaN for negative values (the planted origin)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def planted() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8),
        nn.Sequential(nn.Tanh(), Log()),  # tanh output has negatives: log gives NaN here
        nn.Linear(8, 2),
    )


def finite() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 8)), nn.Linear(8, 2)
    )


X = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))


def column(payload, name):
    table = payload["table"]["$table"]
    col = next(c for c in table["columns"] if c["name"] == name)
    return np.frombuffer(col["data"], dtype=col["dtype"])


def test_stats_are_columns_aligned_with_the_module_rows():
    model = finite()
    stats = collect_activation_stats(model, [X, X * 2])
    widget = ModelHealthWidget(model, stats=stats)
    paths = [m.path for m in inspect_model(model).modules]
    health = widget.health
    assert health["mode"] == "stats" and health["batches"] == 2 and health["origin"] is None
    assert health["walk_truncated"] == list(stats.walk_truncated) == []
    mean, std = column(health, "a_mean"), column(health, "a_std")
    has_a = column(health, "has_a")
    for path, summary in stats.modules.items():
        i = paths.index(path)
        assert has_a[i] and mean[i] == summary.mean and std[i] == summary.std
        assert column(health, "a_nan_count")[i] == summary.nan_count
    assert widget.stats is stats and widget.diff is None
    assert math.isnan(column(health, "relative_l2")[0])  # no diff: drift unknown


def test_nan_origin_is_flagged_on_its_row_and_the_modules_it_reached():
    model = planted()
    origin = find_nonfinite_origin(model, lambda: model(X))
    assert origin is not None and origin.module_path == "1.1"
    widget = ModelHealthWidget(model, origin=origin)
    paths = [m.path for m in inspect_model(model).modules]
    flags = column(widget.health, "origin")
    assert [p for p, f in zip(paths, flags, strict=True) if f] == ["1.1"]
    reached = column(widget.health, "reached")
    assert {p for p, f in zip(paths, reached, strict=True) if f} == set(origin.propagated_to)
    info = widget.health["origin"]
    assert info["module_path"] == "1.1" and info["input_nonfinite"] is False
    assert info["outputs"][0]["summary"]["nan_count"] > 0
    assert info["inputs"][0]["summary"]["nan_count"] == 0


def test_diff_mode_shows_both_summaries_and_drift_and_names_the_divergent_module():
    model_a = finite()
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b[1][1].weight[0, 0] += 0.5
    diff = compare_models(model_a, model_b, lambda m: m(X))
    widget = ModelHealthWidget(model_a, diff=diff)
    health = widget.health
    assert health["mode"] == "diff" and health["first_divergent"] == "1.1"
    paths = [m.path for m in inspect_model(model_a).modules]
    drift = column(health, "relative_l2")
    assert drift[paths.index("0")] == 0 and drift[paths.index("1.1")] > 0
    assert column(health, "has_b")[paths.index("1.1")]
    entry = next(d for d in diff.modules if d.module_path == "1.1")
    assert column(health, "b_mean")[paths.index("1.1")] == entry.summary_b.mean
    assert column(health, "a_mean")[paths.index("1.1")] == entry.summary_a.mean
    assert column(health, "cosine")[paths.index("1.1")] == entry.cosine


def test_a_module_called_twice_shows_its_most_drifted_call():
    shared = nn.Linear(4, 4)
    model_a = nn.Sequential(shared, nn.ReLU(), shared)
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b[0].bias += 0.1
    diff = compare_models(model_a, model_b, lambda m: m(X))
    calls = [d for d in diff.modules if d.module_path == "0"]
    assert len(calls) == 2
    payload = health_payload(inspect_model(model_a), diff=diff)
    i = [m.path for m in inspect_model(model_a).modules].index("0")
    assert column(payload, "calls")[i] == 2
    assert column(payload, "relative_l2")[i] == max(d.relative_l2 for d in calls)


def test_analyze_runs_the_engines_in_the_background_and_reports_progress():
    model_a = planted()
    model_b = copy.deepcopy(model_a)
    widget = ModelHealthWidget(model_a, lambda m: m(X), model_b=model_b, analyze=False)
    assert widget.can_analyze and widget.health["mode"] == "empty"
    reply = widget.run_command("analyze", {})
    assert reply["kind"] == "result", reply
    assert reply["data"] == {"mode": "diff", "origin": "1.1", "first_divergent": None}
    assert widget.origin.module_path == "1.1" and widget.stats.batches == 1
    assert widget.health["origin"]["module_path"] == "1.1"
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model_a.modules())
    # analysed at construction (in the cell) when run is given and nothing else
    auto = ModelHealthWidget(model_a, lambda m: m(X))
    assert auto.origin.module_path == "1.1" and auto.health["mode"] == "stats"
    assert auto.last_task is None


def test_analyze_errors_are_replies_and_bad_arguments_are_named():
    model = finite()

    def run(m):
        raise RuntimeError("forward exploded")

    widget = ModelHealthWidget(model, run, analyze=False)
    reply = widget.run_command("analyze", {})
    assert reply["kind"] == "error" and "forward exploded" in reply["message"]
    assert all(not m._forward_hooks for m in model.modules())
    with pytest.raises(RuntimeError, match="forward exploded"):
        ModelHealthWidget(model, run)  # analysed in the cell: the error is the cell's
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    no_run = ModelHealthWidget(model)
    assert not no_run.can_analyze
    assert no_run.run_command("analyze", {})["kind"] == "error"
    with pytest.raises(TypeError, match="run must be a callable"):
        ModelHealthWidget(model, run=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model_b needs run"):
        ModelHealthWidget(model, model_b=finite())
    with pytest.raises(TypeError, match=r"model_b must be a torch\.nn\.Module"):
        ModelHealthWidget(model, run, model_b="ckpt.pt")  # type: ignore[arg-type]


def test_records_of_another_model_name_the_paths_they_could_not_place():
    model = finite()
    other = nn.Sequential(
        nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    )
    stats = collect_activation_stats(other, [X])
    widget = ModelHealthWidget(model, stats=stats)
    assert widget.health["unknown_paths"] == ["1.2"]


def test_health_view_shares_the_selection_with_the_module_table():
    model = planted()
    picked = ModuleSelection()
    table = ModuleTableWidget(model, selection=picked)
    health = ModelHealthWidget(model, selection=picked)
    table.selected_paths = ["1.1"]
    assert health.selected_paths == ["1.1"] and picked.paths == ["1.1"]
    health.set_state({"selected_paths": ["2"]})  # a click in the health view's table
    assert table.selected_paths == ["2"]


def test_health_summary_table_exports_as_rows_dataframe_and_files(tmp_path):
    pd = pytest.importorskip("pandas")
    model_a = finite()
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b[1][1].weight[0, 0] += 0.5
    diff = compare_models(model_a, model_b, lambda m: m(X))
    widget = ModelHealthWidget(model_a, diff=diff)
    rows = widget.to_rows()
    metadata = inspect_model(model_a)
    assert [r["path"] for r in rows] == [m.path for m in metadata.modules]
    assert [r["module_type"] for r in rows] == [m.module_type for m in metadata.modules]
    by_path = {r["path"]: r for r in rows}
    entry = next(d for d in diff.modules if d.module_path == "1.1")
    row = by_path["1.1"]
    assert row["relative_l2"] == entry.relative_l2 and row["cosine"] == entry.cosine
    assert row["a_mean"] == entry.summary_a.mean and row["b_std"] == entry.summary_b.std
    assert row["has_b"] is True and row["calls"] == 1 and row["origin"] is False
    # The rows are the columns the browser gets, value for value (NaN where unknown).
    for name in ("a_mean", "b_max", "relative_l2", "calls", "origin"):
        exported = np.array([r[name] for r in rows], dtype=np.float64)
        np.testing.assert_array_equal(exported, column(widget.health, name).astype(np.float64))
    frame = widget.to_dataframe()
    assert list(frame["path"]) == [m.path for m in metadata.modules]
    assert frame.loc[frame["path"] == "1.1", "relative_l2"].item() == entry.relative_l2
    written = widget.export(tmp_path / "health.csv")
    back = pd.read_csv(written)
    assert list(back.columns[:2]) == ["path", "module_type"] and len(back) == len(rows)
    assert back.loc[back["path"] == "1.1", "relative_l2"].item() == pytest.approx(entry.relative_l2)
    # A new record replaces the exported table too.
    origin_model = planted()
    origin = find_nonfinite_origin(origin_model, lambda: origin_model(X))
    flagged = ModelHealthWidget(origin_model, origin=origin).to_rows()
    assert [r["path"] for r in flagged if r["origin"]] == ["1.1"]
