"""SnapshotBrowserWidget: capture command, limits, failures, linking, payload, export."""

import json

import numpy as np
import pytest
import torch
import traitlets
from torch import nn

from vinlens.model_inspection import CaptureLimits, capture_model
from vinlens.widgets.module_table import ModuleTableWidget
from vinlens.widgets.snapshot_browser import (
    SnapshotBrowserWidget,
    SnapshotTableWidget,
    snapshot_table_payload,
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def no_hooks_left(model: nn.Module) -> bool:
    return all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._forward_hooks_with_kwargs
        for m in model.modules()
    )


def decode(payload):
    table = payload["table"]["$table"]
    out = {}
    for col in table["columns"]:
        if col["dtype"] == "string":
            offsets = np.frombuffer(col["offsets"], dtype="<u4")
            out[col["name"]] = [
                col["data"][offsets[i] : offsets[i + 1]].decode() for i in range(table["length"])
            ]
        else:
            out[col["name"]] = np.frombuffer(col["data"], dtype=col["dtype"]).tolist()
    values = np.frombuffer(payload["values"]["$array"]["data"], dtype="<f8")
    return out, values


def make(**kwargs):
    model = Net()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    calls = []

    def run():
        calls.append(1)
        return model(x)

    return model, SnapshotBrowserWidget(model, run, **kwargs), calls


def test_capture_command_runs_forward_and_publishes_snapshots():
    model, widget, calls = make(limits=CaptureLimits(max_samples_per_tensor=5))
    assert widget.can_capture and widget.embedded_table
    assert widget.modules["$table"]["length"] == 5  # the embedded module table
    reply = widget.run_command(
        "capture", {"module_paths": ["encoder.0", "head"], "limits": widget.limits}
    )
    assert reply["kind"] == "result", reply
    assert calls == [1] and no_hooks_left(model)
    snaps = widget.snapshots
    assert {s.module_path for s in snaps} == {"encoder.0", "head"}
    columns, values = decode(widget.snapshot_table)
    assert columns["module_path"] == [s.module_path for s in snaps]
    assert columns["direction"][:2] == ["input", "output"]
    assert columns["tensor_path"][0] == "args[0]"
    assert columns["shape"][0] == "[3,4]" and columns["numel"][0] == 12
    first = snaps[0]
    start, count = columns["values_start"][0], columns["values_count"][0]
    assert count == 5 and values[start : start + count].tolist() == list(first.values)
    assert values.tolist() == [v for s in snaps for v in s.values]
    summary = widget.capture_summary
    assert summary["tensors"] == len(snaps) and summary["max_tensors"] == 64
    assert summary["sampled_bytes"] == sum(s.sampled_bytes for s in snaps)
    assert summary["max_bytes"] == 16 * 1024 and summary["ok"] is True
    assert reply["data"] == summary


def test_selection_drives_capture_and_empty_selection_captures_everything():
    _model, widget, _ = make(module_paths=["head"])
    widget.run_command("capture", {})
    assert {s.module_path for s in widget.snapshots} == {"head"}
    widget.selected_paths = []
    snaps = widget.capture(limits={"max_tensors": 200})
    assert {s.module_path for s in snaps} == {"<root>", "encoder", "encoder.0", "encoder.1", "head"}
    assert widget.limits["max_tensors"] == 200


def test_bad_paths_and_bad_limits_are_error_replies_naming_them():
    model, widget, calls = make()
    reply = widget.run_command("capture", {"module_paths": ["encoder.9", "head"]})
    assert reply["kind"] == "error" and "'encoder.9'" in reply["message"]
    assert "did you mean" in reply["message"]
    reply = widget.run_command("capture", {"module_paths": "head"})
    assert reply["kind"] == "error" and "list of module paths" in reply["message"]
    for limits, expected in [
        ({"max_tensors": 0}, "max_tensors"),
        ({"max_bytes": -5}, "max_bytes"),
        ({"max_samples_per_tensor": 1.5}, "max_samples_per_tensor"),
        ({"max_tensors": None}, "max_tensors"),
        ({"max_tensors": True}, "max_tensors"),
        ({"bogus": 3}, "'bogus'"),
        ([1, 2], "mapping"),
    ]:
        reply = widget.run_command("capture", {"limits": limits})
        assert reply["kind"] == "error", limits
        assert expected in reply["message"] and widget.error == reply["message"]
    assert calls == [] and no_hooks_left(model)
    assert widget.run_command("frobnicate")["kind"] == "error"
    with pytest.raises(traitlets.TraitError, match="max_tensors"):
        widget.limits = {"max_tensors": 0}
    widget.set_state({"limits": {"max_tensors": -1}})  # from a browser: reported, not raised
    assert widget.limits["max_tensors"] == 64 and "max_tensors" in widget.error


def test_run_raising_is_shown_with_traceback_and_leaves_no_hooks():
    model = Net()

    def run():
        model.encoder(torch.ones(2, 4))
        raise RuntimeError("forward exploded at step 3")

    widget = SnapshotBrowserWidget(model, run)
    reply = widget.run_command("capture", {"module_paths": ["encoder.0"]})
    assert reply["kind"] == "error"
    assert "RuntimeError: forward exploded at step 3" in reply["message"]
    assert "forward exploded" in reply["traceback"] and "in run" in reply["traceback"]
    assert widget.status == "error" and "forward exploded" in widget.error
    assert "Traceback" in widget.error_traceback
    assert no_hooks_left(model)
    # the snapshots taken before the failure are still shown, marked partial
    assert widget.capture_summary["ok"] is False
    assert "forward exploded" in widget.capture_summary["error"]
    assert [s.module_path for s in widget.snapshots] == ["encoder.0", "encoder.0"]
    with pytest.raises(RuntimeError, match="forward exploded"):
        widget.capture()
    assert no_hooks_left(model)


def test_keyboard_interrupt_in_run_is_an_error_reply():
    model = Net()

    def run():
        raise KeyboardInterrupt

    widget = SnapshotBrowserWidget(model, run)
    reply = widget.run_command("capture", {})
    assert reply["kind"] == "error" and "KeyboardInterrupt" in reply["message"]
    assert no_hooks_left(model)


def test_linked_module_table_drives_the_selection_both_ways():
    model = Net()
    table = ModuleTableWidget(model, selected_paths=["head"])
    widget = SnapshotBrowserWidget(model, lambda: model(torch.ones(1, 4)), module_table=table)
    assert not widget.embedded_table and widget.modules == {}
    assert widget.selected_paths == ["head"]
    table.set_state({"selected_paths": ["encoder.1"]})  # a click in the module table
    assert widget.selected_paths == ["encoder.1"]
    widget.capture()
    assert {s.module_path for s in widget.snapshots} == {"encoder.1"}
    widget.selected_paths = ["encoder"]
    assert table.selected_paths == ["encoder"]
    with pytest.raises(ValueError, match="different model"):
        SnapshotBrowserWidget(Net(), lambda: None, module_table=table)


def test_constructor_validation():
    with pytest.raises(TypeError, match="zero-argument callable"):
        SnapshotBrowserWidget(Net(), run=42)
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        SnapshotBrowserWidget(object(), lambda: None)
    with pytest.raises(ValueError, match="max_bytes"):
        SnapshotBrowserWidget(Net(), lambda: None, limits={"max_bytes": 0})


def test_metadata_only_and_empty_tensors_and_dtypes():
    class Odd(nn.Module):
        def forward(self, x):
            return {"c": torch.complex(x, x), "e": x[:0], "b": x > 1, "i": x.long()}

    model = nn.Sequential(Odd())
    widget = SnapshotBrowserWidget(model, lambda: model(torch.tensor([[0.5, 2.0]])))
    widget.capture(module_paths=["0"])
    columns, values = decode(widget.snapshot_table)
    by_path = dict(zip(columns["tensor_path"], range(len(columns["tensor_path"])), strict=True))
    c = by_path["output['c']"]
    assert columns["sample_omission_reason"][c] != "" and columns["values_count"][c] == 0
    e = by_path["output['e']"]
    assert columns["shape"][e] == "[0,2]" and columns["values_count"][e] == 0
    assert columns["sample_omission_reason"][e] == ""
    b = by_path["output['b']"]
    start = columns["values_start"][b]
    assert columns["dtype"][b] == "torch.bool" and values[start : start + 2].tolist() == [0.0, 1.0]


def test_read_only_view_of_a_user_capture(tmp_path):
    model = Net()
    with capture_model(model, module_paths=["head"]) as cap:
        model(torch.ones(2, 4))
    view = SnapshotTableWidget(cap)
    assert not view.can_capture and view.snapshots == cap.snapshots
    assert view.capture_summary["tensors"] == 2
    assert view.run_command("capture", {})["kind"] == "error"  # no capture command here
    path = view.export(tmp_path / "snaps.json")
    data = json.loads(path.read_text())
    assert data[0]["module_path"] == "head" and data[0]["shape"] == [2, 8]


def test_export_methods_and_empty_payload(tmp_path):
    _, widget, _ = make()
    assert widget.snapshots == () and widget.to_rows() == []
    columns, values = decode(widget.snapshot_table)
    assert columns["module_path"] == [] and values.size == 0
    widget.capture(module_paths=["head"])
    rows = widget.to_rows()
    assert rows[0]["module_path"] == "head"
    text = widget.export(tmp_path / "s.csv").read_text().splitlines()
    assert text[0].startswith("module_path,call_index,direction,tensor_path,shape")
    assert len(widget.to_dataframe()) == len(rows)
    assert snapshot_table_payload(())["table"]["$table"]["length"] == 0


def test_rebound_model_warns_that_no_selected_module_ran():
    # A notebook re-runs `model = Net()` after the browser was built: run() now drives
    # the new object and the hooked modules never run.
    namespace = {"model": Net()}
    x = torch.ones(2, 4)
    widget = SnapshotBrowserWidget(namespace["model"], lambda: namespace["model"](x))
    namespace["model"] = Net()
    reply = widget.run_command("capture", {"module_paths": ["encoder.0", "head"]})
    assert reply["kind"] == "result"
    summary = widget.capture_summary
    assert summary["tensors"] == 0 and summary["ok"] is False and summary["error"] is None
    assert "none of the selected modules (encoder.0, head) ran" in summary["warning"]
    assert "re-assigned" in summary["warning"]
    with pytest.warns(RuntimeWarning, match="no module of the model ran"):
        assert widget.capture(module_paths=[]) == ()


def test_selected_modules_that_did_not_run_are_named():
    model = Net()
    x = torch.ones(2, 4)
    widget = SnapshotBrowserWidget(model, lambda: model.encoder(x))
    widget.run_command("capture", {"module_paths": ["encoder.0", "head"]})
    summary = widget.capture_summary
    assert summary["tensors"] == 2 and summary["ok"] is False
    assert summary["warning"] == "1 of 2 selected modules did not run during run(): head"
    # every module ran: no warning
    widget.run = lambda: model(x)
    widget.run_command("capture", {"module_paths": ["encoder.0", "head"]})
    assert widget.capture_summary["warning"] is None and widget.capture_summary["ok"] is True
    # a quota that runs out is not "did not run"
    widget.run_command(
        "capture", {"module_paths": ["encoder.0", "head"], "limits": {"max_tensors": 1}}
    )
    assert widget.capture_summary["warning"] is None


def test_whole_tensor_summaries_travel_with_the_snapshots():
    _model, widget, _ = make()
    widget.run_command(
        "capture", {"module_paths": ["head"], "limits": {"max_samples_per_tensor": 2}}
    )
    snaps = widget.snapshots
    assert all(s.summary is not None for s in snaps)
    columns, _ = decode(widget.snapshot_table)
    assert columns["has_summary"] == [True, True]
    assert columns["summary_mean"] == [s.summary.mean for s in snaps]
    assert columns["summary_count"] == [s.summary.count for s in snaps] == [3 * 8, 3 * 2]
    assert columns["summary_nan_count"] == [0, 0]
    # summaries turned off: NaN columns, has_summary false
    widget.run_command("capture", {"module_paths": ["head"], "limits": {"max_summary_elements": 0}})
    columns, _ = decode(widget.snapshot_table)
    assert columns["has_summary"] == [False, False]
    assert all(np.isnan(v) for v in columns["summary_std"])
