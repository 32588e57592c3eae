import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeModel, dataView } from "./fake-model";
import { CommandClient, CommandError } from "./protocol";

function setup() {
  const model = new FakeModel({});
  const client = new CommandClient(model as any);
  return { model, client };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("CommandClient", () => {
  it("resolves with decoded data, buffers put back, and reports progress first", async () => {
    const { model, client } = setup();
    const progress: [number, number][] = [];
    const req = client.request("scan", { a: 1 }, { onProgress: (d, t) => progress.push([d, t]) });
    expect(model.sent[0].content).toEqual({ kind: "command", id: req.id, name: "scan", args: { a: 1 } });
    model.receive({ kind: "progress", id: req.id, done: 1, total: 2 });
    model.receive({ kind: "progress", id: "someone-else", done: 9, total: 9 });
    const values = new Float32Array([1.5, NaN]);
    model.receive(
      { kind: "result", id: req.id, data: { x: { $float: "NaN" }, a: { $array: { dtype: "float32", shape: [2], data: { $buffer: 0 } } } } },
      [dataView(values)],
    );
    const data = await req;
    expect(progress).toEqual([[1, 2]]);
    expect(Number.isNaN(data.x)).toBe(true);
    expect(Array.from(data.a.data as Float32Array).slice(0, 1)).toEqual([1.5]);
    expect(client.busy).toBe(false);
  });

  it("rejects with the kernel's message, traceback and cancelled flag", async () => {
    const { model, client } = setup();
    const req = client.request("boom");
    model.receive({ kind: "error", id: req.id, message: "bad path 'x'", traceback: "Traceback...", cancelled: false });
    const err = (await req.catch((e) => e)) as CommandError;
    expect(err).toBeInstanceOf(CommandError);
    expect(err.message).toBe("bad path 'x'");
    expect(err.traceback).toBe("Traceback...");
    expect(err.cancelled).toBe(false);
    expect(err.timedOut).toBe(false);
  });

  it("aborting cancels the command in the kernel and rejects at once as cancelled", async () => {
    const { model, client } = setup();
    const controller = new AbortController();
    const req = client.request("scan", {}, { signal: controller.signal });
    controller.abort();
    const err = (await req.catch((e) => e)) as CommandError;
    expect(err.cancelled).toBe(true);
    expect(model.sent.map((m) => m.content)).toEqual([
      { kind: "command", id: req.id, name: "scan", args: {} },
      { kind: "cancel", id: req.id },
    ]);
    // The kernel's late reply is ignored: the request already settled.
    model.receive({ kind: "result", id: req.id, data: {} });
    expect(client.busy).toBe(false);
  });

  it("an already aborted signal sends nothing", async () => {
    const { model, client } = setup();
    const controller = new AbortController();
    controller.abort();
    const err = (await client.request("scan", {}, { signal: controller.signal }).catch((e) => e)) as CommandError;
    expect(err.cancelled).toBe(true);
    expect(model.sent).toEqual([]);
  });

  it("a timeout cancels in the kernel and rejects with timedOut", async () => {
    vi.useFakeTimers();
    const { model, client } = setup();
    const req = client.request("slow", {}, { timeoutMs: 500 });
    const caught = req.catch((e) => e);
    vi.advanceTimersByTime(499);
    expect(client.busy).toBe(true);
    vi.advanceTimersByTime(1);
    const err = (await caught) as CommandError;
    expect(err.timedOut).toBe(true);
    expect(err.cancelled).toBe(false);
    expect(err.message).toContain("500 ms");
    expect(model.sent[1].content).toEqual({ kind: "cancel", id: req.id });
  });

  it("an answer before the timeout clears the timer", async () => {
    vi.useFakeTimers();
    const { model, client } = setup();
    const req = client.request("quick", {}, { timeoutMs: 100 });
    model.receive({ kind: "result", id: req.id, data: { ok: true } });
    expect(await req).toEqual({ ok: true });
    vi.advanceTimersByTime(1000);
    expect(model.sent).toHaveLength(1); // no cancel went out
  });

  it("dispose rejects every pending request as cancelled and stops listening", async () => {
    const { model, client } = setup();
    const controller = new AbortController();
    const a = client.request("a", {}, { signal: controller.signal }).catch((e) => e);
    const b = client.request("b").catch((e) => e);
    client.dispose();
    const [ea, eb] = (await Promise.all([a, b])) as CommandError[];
    expect(ea.cancelled && eb.cancelled).toBe(true);
    expect(eb.message).toContain("view was closed");
    expect(model.listenerCount("msg:custom")).toBe(0);
    controller.abort(); // the abort listener was removed: no cancel is sent after dispose
    expect(model.sent.filter((m) => m.content.kind === "cancel")).toEqual([]);
    const late = (await client.request("c").catch((e) => e)) as CommandError;
    expect(late.cancelled).toBe(true);
    expect(model.sent).toHaveLength(2);
    client.dispose(); // idempotent
  });

  it("ignores messages of unknown kind instead of dropping the request", async () => {
    const { model, client } = setup();
    const req = client.request("x");
    model.receive({ kind: "weird", id: req.id });
    expect(client.busy).toBe(true);
    model.receive({ kind: "result", id: req.id, data: 1 });
    expect(await req).toBe(1);
  });
});
