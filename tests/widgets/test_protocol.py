"""The command protocol of every vinlens widget, exercised through a minimal subclass."""

import threading

import traitlets

from vinlens.widgets._base import CommandError, VinlensWidget, command


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
