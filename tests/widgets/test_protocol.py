"""The command protocol of every vinlens widget, exercised through a minimal subclass."""

import threading

import pytest
import traitlets

from vinlens.widgets._base import (
    BrowserSafeState,
    CommandCancelled,
    CommandError,
    TableExport,
    VinlensWidget,
    command,
)


class Echo(VinlensWidget):
    _esm = "export default { render() {} }"
    value = traitlets.Int(0).tag(sync=True)

    @command("echo")
    def _echo(self, args, ctx):
        return {"args": args}

    @command("fail")
    def _fail(self, args, ctx):
        raise CommandError("bad thing at path 'x'")

    @command("crash")
    def _crash(self, args, ctx):
        raise KeyboardInterrupt

    @command("slow", background=True)
    def _slow(self, args, ctx):
        for i in range(1000):
            ctx.progress(i, 1000)
            threading.Event().wait(0.005)
        return {"done": True}


def sent_messages(widget, monkeypatch):
    out = []
    monkeypatch.setattr(
        widget, "send", lambda content, buffers=None: out.append((content, buffers))
    )
    return out


def test_result_and_errors_are_replies_not_exceptions(monkeypatch):
    w = Echo()
    sent = sent_messages(w, monkeypatch)
    assert w.run_command("echo", {"x": 1}) == {
        "kind": "result",
        "id": sent[0][0]["id"],
        "data": {"args": {"x": 1}},
    }
    reply = w.run_command("fail")
    assert reply["kind"] == "error" and "path 'x'" in reply["message"]
    assert w.status == "error" and w.error == reply["message"]
    reply = w.run_command("crash")
    assert reply["kind"] == "error" and "KeyboardInterrupt" in reply["message"]
    assert "Traceback" in reply["traceback"]
    reply = w.run_command("nope")
    assert reply["kind"] == "error" and "unknown command 'nope'" in reply["message"]
    assert "echo" in reply["message"]


def test_hostile_messages_never_raise(monkeypatch):
    w = Echo()
    sent = sent_messages(w, monkeypatch)
    for content in [
        None,
        5,
        "x",
        [],
        {"kind": "command"},
        {"kind": "command", "id": 3},
        {"kind": "command", "id": "a" * 500, "name": "echo"},
        {"kind": "command", "id": "i", "name": "echo", "args": [1]},
        {"kind": "command", "id": "j", "name": {"__class__": 1}},
        {"kind": "weird", "id": "k"},
    ]:
        w._on_custom_msg(w, content, [])
    errors = [c for c, _ in sent if c.get("kind") == "error"]
    assert {e["id"] for e in errors} == {"i", "j", "k"}
    assert "'args' must be an object" in next(e for e in errors if e["id"] == "i")["message"]
    assert w.status == "error"


def test_background_command_reports_progress_and_can_be_cancelled(monkeypatch):
    w = Echo()
    sent = sent_messages(w, monkeypatch)
    w._dispatch({"kind": "command", "id": "r1", "name": "slow", "args": {}})
    for _ in range(500):
        if any(c.get("kind") == "progress" for c, _ in sent):
            break
        threading.Event().wait(0.01)
    w._dispatch({"kind": "cancel", "id": "r1"})
    for _ in range(500):
        if any(c.get("id") == "r1" and c["kind"] == "error" for c, _ in sent):
            break
        threading.Event().wait(0.01)
    final = [c for c, _ in sent if c.get("kind") in ("result", "error")]
    assert final == [c for c, _ in sent if c.get("id") == "r1" and c["kind"] == "error"]
    assert final[0]["cancelled"] is True
    assert w.status == "idle" and w.error == ""


class Worker(VinlensWidget):
    """Long commands gated by events the test controls."""

    _esm = "export default { render() {} }"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []

    @command("long", background=True, exclusive=True, busy="a long job is already running")
    def _long(self, args, ctx):
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        while not self.release.wait(0.01):
            ctx.check_cancelled()
        return {"who": args.get("who")}

    @command("meet", background=True, exclusive=True)
    def _meet(self, args, ctx):
        BARRIERS[args["barrier"]].wait(20)  # raises BrokenBarrierError when the others never arrive
        return {"met": True}

    @command("quick", background=True)
    def _quick(self, args, ctx):
        return {"ok": True}

    @command("blocking", background=True, exclusive=True)
    def _blocking(self, args, ctx):
        # A call that never looks at cancellation: ctx.call still answers a cancel at once.
        return ctx.call(lambda: self.release.wait(30))


BARRIERS: dict[str, threading.Barrier] = {}


def wait_for(predicate, timeout=20.0):
    pause = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        pause.wait(0.01)
    return False


def test_long_commands_of_different_widgets_run_concurrently():
    # Four widgets' long commands must all be running at once to pass the barrier: a
    # shared pool (or one queue) of fewer workers would leave some waiting behind others.
    BARRIERS["four"] = threading.Barrier(4)
    widgets = [Worker() for _ in range(4)]
    tasks = [w.start_command("meet", {"barrier": "four"}) for w in widgets]
    assert [t.wait(30) for t in tasks] == [{"met": True}] * 4
    for w in widgets:
        w.close()


def test_exclusive_single_flight_refuses_a_second_command_without_touching_status():
    w = Worker()
    first = w.start_command("long", {"who": "first"})
    assert w.entered.wait(10) and w.current_task is first and w.status == "busy"
    reply = w.run_command("long", {"who": "second"})
    assert reply["kind"] == "error" and reply["message"] == "a long job is already running"
    assert reply["cancelled"] is False
    assert w.status == "busy" and w.error == ""  # the running command's state is left alone
    with pytest.raises(RuntimeError, match="already running"):
        w.start_command("long")
    # Another exclusive command is refused too; a non-exclusive one runs beside it.
    assert w.run_command("blocking")["kind"] == "error"
    assert w.run_command("quick")["data"] == {"ok": True}
    w.release.set()
    assert first.wait(10) == {"who": "first"}
    assert w.current_task is None and w.last_task is first
    # The flight is free before the reply goes out: the next command starts at once.
    w.release.clear()
    second = w.start_command("long", {"who": "third"})
    w.release.set()
    assert second.wait(10) == {"who": "third"} and w.status == "idle"


def test_tasks_started_from_python_can_be_cancelled_by_their_id(monkeypatch):
    w = Worker()
    sent = sent_messages(w, monkeypatch)
    task = w.start_command("long", trigger="construction", id_prefix="job")
    assert task.request_id.startswith("job-") and task.ctx.trigger == "construction"
    assert w.entered.wait(10)
    w._dispatch({"kind": "cancel", "id": task.request_id})
    assert task.join(10)
    with pytest.raises(CommandCancelled):
        task.wait(0)
    reply = next(c for c, _ in sent if c.get("id") == task.request_id and c["kind"] == "error")
    assert reply["cancelled"] is True and w.status == "idle" and w.error == ""
    assert w.current_task is None


def test_ctx_call_answers_a_cancel_while_the_call_blocks(monkeypatch):
    w = Worker()
    sent = sent_messages(w, monkeypatch)
    w._dispatch({"kind": "command", "id": "b1", "name": "blocking", "args": {}})
    assert wait_for(lambda: w.current_task is not None)
    w._dispatch({"kind": "cancel", "id": "b1"})
    assert wait_for(lambda: any(c.get("id") == "b1" for c, _ in sent))
    reply = next(c for c, _ in sent if c.get("id") == "b1")
    assert reply["kind"] == "error" and reply["cancelled"] is True
    assert not w.release.is_set()  # the call is still blocked; the command answered anyway
    w.release.set()


def test_background_failures_are_error_replies_and_task_exceptions():
    class Failing(VinlensWidget):
        _esm = "export default { render() {} }"

        @command("boom", background=True, exclusive=True)
        def _boom(self, args, ctx):
            raise ValueError("bad value at 'p'")

    w = Failing()
    task = w.start_command("boom")
    with pytest.raises(ValueError, match="bad value"):
        task.wait(10)
    assert w.status == "error" and "ValueError: bad value at 'p'" in w.error
    assert "Traceback" in w.error_traceback
    reply = w.run_command("boom")
    assert reply["kind"] == "error" and "boom failed: ValueError" in reply["message"]
    with pytest.raises(KeyError, match="unknown command 'nope'"):
        w.start_command("nope")


def test_background_commands_run_on_the_widgets_own_threads():
    a, b = Worker(), Worker()
    for w in (a, b):
        w.release.set()
        w.run_command("long")
    assert a.threads[0].startswith("vinlens-Worker") and b.threads[0].startswith("vinlens-Worker")
    a.close()
    reply = b.run_command("long")  # closing one widget leaves the other's runtime alone
    assert reply["kind"] == "result"


def test_unknown_keywords_fail_for_every_widget():
    with pytest.raises(TypeError, match=r"Echo got unexpected keyword argument\(s\) valeu$"):
        Echo(valeu=3)
    assert Echo(value=3).value == 3


def test_browser_updates_that_do_not_validate_become_the_widgets_error():
    class Safe(BrowserSafeState):
        _esm = "export default { render() {} }"
        mode = traitlets.Enum(("grid", "single"), default_value="grid").tag(sync=True)

    w = Safe()
    w.set_state({"mode": "sideways"})  # what ipywidgets calls for a browser update
    assert w.mode == "grid" and w.status == "error"
    assert "ignored a browser update of mode" in w.error and "sideways" in w.error
    w.set_state({"mode": "single"})
    assert w.mode == "single"


def test_one_export_mixin_serves_every_table_widget():
    from vinlens.widgets import (
        ConfigTreeWidget,
        CoverageHeatmapWidget,
        ModuleTableWidget,
        SnapshotBrowserWidget,
        SnapshotTableWidget,
    )

    for widget_type in (
        ConfigTreeWidget,
        CoverageHeatmapWidget,
        ModuleTableWidget,
        SnapshotBrowserWidget,
        SnapshotTableWidget,
    ):
        assert issubclass(widget_type, TableExport)
        for name in ("to_rows", "to_dataframe", "export"):
            assert getattr(widget_type, name) is getattr(TableExport, name), (widget_type, name)
