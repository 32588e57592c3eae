"""Widget faults (issue 23, class 7): refused double analyses, closed widgets, cancel states,
and a status that says busy while any command of the widget still runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from vinlens.operations import CancelToken
from vinlens.store.synthetic import write_synthetic_store
from vinlens.widgets import ModelHealthWidget, ModuleTableWidget
from vinlens.widgets import store_dashboard as dashboard_module
from vinlens.widgets._base import CommandContext, VinlensWidget, command
from vinlens.widgets.store_dashboard import StoreDashboardWidget

X = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Scanner(VinlensWidget):
    """A long exclusive scan beside a quick side command, as the store widgets have."""

    _esm = "export default { render() {} }"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()

    @command("scan", background=True, exclusive=True)
    def _scan(self, args, ctx: CommandContext):
        self.entered.set()
        while not self.release.wait(0.01):
            ctx.check_cancelled()
        return {"scanned": True}

    @command("peek", background=True)
    def _peek(self, args, ctx):
        return {"peeked": True}

    @command("engine")
    def _engine(self, args, ctx: CommandContext):
        token = ctx.cancel_token
        assert isinstance(token, CancelToken) and token.event is ctx.cancel_event
        ctx.cancel_event.set()  # the user cancels while the engine runs
        token.raise_if_cancelled()
        return {}


def test_a_side_command_that_ends_leaves_status_busy_while_the_scan_runs():
    w = Scanner()
    task = w.start_command("scan")
    assert w.entered.wait(10)
    assert w.status == "busy"
    reply = w.run_command("peek", timeout=30)
    assert reply["kind"] == "result" and reply["data"] == {"peeked": True}
    assert w.status == "busy", "the scan still runs: a side command must not say idle"
    w.release.set()
    assert task.wait(30) == {"scanned": True}
    assert w.status == "idle"
    w.close()


def test_an_engine_cancelled_through_the_context_token_ends_as_a_cancel():
    w = Scanner()
    reply = w.run_command("engine")
    assert reply["kind"] == "error" and reply["cancelled"] is True
    assert w.status == "idle" and w.error == "" and reply["traceback"] == ""


def test_a_closed_widget_refuses_new_commands_with_a_clear_error():
    w = ModuleTableWidget(nn.Sequential(nn.Linear(2, 2)))
    w.close()
    reply = w.run_command("refresh")
    assert reply["kind"] == "error" and "closed" in reply["message"]
    assert "ModuleTableWidget" in reply["message"]
    with pytest.raises(RuntimeError, match="closed"):
        w.start_command("refresh")
    scanner = Scanner()
    scanner.close()
    reply = scanner.run_command("scan")
    assert reply["kind"] == "error" and "closed" in reply["message"]
    assert not scanner.entered.is_set()


def test_analyze_from_python_is_refused_while_the_analyze_command_runs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    main = threading.current_thread()
    entered, release = threading.Event(), threading.Event()

    def run(m: nn.Module) -> None:
        if threading.current_thread() is not main and not entered.is_set():
            entered.set()
            release.wait(30)
        m(X)

    w = ModelHealthWidget(model, run, analyze=False)
    w._dispatch({"kind": "command", "id": "a1", "name": "analyze", "args": {}})
    assert entered.wait(30)
    with pytest.raises(RuntimeError, match="already running"):
        w.analyze()
    release.set()
    _wait_for(lambda: any(r["id"] == "a1" for r in w.replies))
    reply = next(r for r in w.replies if r["id"] == "a1")
    assert reply["kind"] == "result", reply
    # One forward per analysis: counts are those of one batch, not doubled.
    assert w.stats.batches == 1
    assert w.stats.modules["0"].count == X.shape[0] * 4
    # Once it ended, analyze() runs again (and the browser command is refused meanwhile
    # only while it runs, which on this thread is never observable).
    assert w.analyze()["mode"] == "stats"
    assert w.stats.modules["0"].count == X.shape[0] * 4
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.analyze()


def test_after_a_dashboard_cancel_the_state_stays_cancelled(tmp_path: Path, monkeypatch):
    store = write_synthetic_store(tmp_path / "store")
    w = StoreDashboardWidget(store.config.store_dir)
    w.wait(120)
    entered, release, reported = threading.Event(), threading.Event(), threading.Event()
    real_inspect = dashboard_module.inspect_vin_offline_dataset_stats_with_progress

    def slow_engine(request, progress_cb, **kwargs):
        # An engine that only looks for a cancel between shards: it reports once more
        # after the user cancelled, from its own thread, as the real one does.
        entered.set()
        release.wait(30)
        try:
            progress_cb(1, 10)
        finally:
            reported.set()
        return real_inspect(request, progress_cb, **kwargs)

    monkeypatch.setattr(
        dashboard_module, "inspect_vin_offline_dataset_stats_with_progress", slow_engine
    )
    w._dispatch({"kind": "command", "id": "r1", "name": "refresh", "args": {}})
    assert entered.wait(30)
    w._dispatch({"kind": "cancel", "id": "r1"})
    _wait_for(lambda: any(r["id"] == "r1" for r in w.replies))
    assert w.acquisition["state"] == "cancelled" and w.status == "idle"
    release.set()
    assert reported.wait(30)
    time.sleep(0.05)
    assert w.status == "idle"
    assert w.acquisition["state"] == "cancelled", w.acquisition
    w.close()
