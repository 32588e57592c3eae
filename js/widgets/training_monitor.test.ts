import { describe, expect, it } from "vitest";
HTMLCanvasElement.prototype.getContext = (() => null) as any; // jsdom has no canvas: strips stay blank
import { FakeModel, dataView } from "../lib/fake-model";
import widget, {
  countersText, curveGeometry, LogHeatmap, LOW_HEADROOM_BITS, mergeEvents, originText, replayText, stepPosition, type NonFiniteEvent,
} from "./training_monitor";

const PATHS = ["<root>", "0", "1", "2"];
const STEPS = [0, 100, 200];
const arr = (dtype: string, shape: number[], data: ArrayBufferView) => ({ $array: { dtype, shape, data: dataView(data) } });
const trace = (nan: number) => ({
  tensor_path: nan ? "args[0]" : "output", shape: [3], dtype: "torch.float32",
  summary: { count: 3, mean: 0, std: 0, min: 0, max: 0, abs_max: 0, zero_fraction: 0, nan_count: nan, posinf_count: 0, neginf_count: 0 },
});
const EVENT: NonFiniteEvent = {
  step: 150,
  origin: {
    module_path: "1", call_index: 0, grad_outputs: [trace(0)], grad_inputs: [trace(3)],
    parameter_paths: ["1.weight"], propagated_to: ["0"], forward_origin: null, entered_nonfinite: false,
  },
};

function history(events: NonFiniteEvent[] = [EVENT]) {
  const m = PATHS.length;
  const s = STEPS.length;
  // row-major [module, step]: the root has no parameters (NaN), module 2 overflows at the end
  const grad = Float32Array.from({ length: m * s }, (_, i) => (i < s ? NaN : i === m * s - 1 ? Infinity : 10 ** (i % s)));
  const std = Float32Array.from({ length: m * s }, (_, i) => 0.5 + i);
  return {
    paths: PATHS, steps: arr("int32", [s], Int32Array.from(STEPS)),
    grad_norm: arr("float32", [m, s], grad), std: arr("float32", [m, s], std),
    steps_run: 201, every: 100, on_nonfinite: "record", events_total: events.length, events_kept: events.length,
  };
}

function setup(events: NonFiniteEvent[] = [EVENT], extra: Record<string, any> = {}) {
  const model = new FakeModel<any>({
    history: history(events),
    events, series: {}, rank: 0, replays: {},
    precision: { dtype: "torch.float16", headroom: arr("float64", [4], Float64Array.from([Infinity, 9.5, 0.4, -2])), first_overflow_path: "2" },
    selected_event: -1, status: "idle", error: "", error_traceback: "",
    ...extra,
  });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const row = (el: HTMLElement, path: string) => Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
  .find((r) => r.querySelector('[data-key="path"]')!.textContent === path)!;
const cell = (el: HTMLElement, path: string, key: string) => row(el, path).querySelector<HTMLElement>(`[data-key="${key}"]`)!;

describe("log heatmap", () => {
  it("scales log10 of positive finite values and leaves the rest out", () => {
    const map = new LogHeatmap(2, 3, [1, 10, 100, NaN, 0, Infinity]);
    expect([map.vmin, map.vmax]).toEqual([0, 2]);
    const second = map.rowPixels(1);
    expect(second[3]).toBe(0); // NaN: transparent
    expect(second[7]).toBe(0); // zero has no logarithm: transparent
    expect(Array.from(second.subarray(8, 12))).toEqual([220, 20, 60, 255]); // +Inf: marked
    const first = map.rowPixels(0);
    expect(first[3]).toBe(255);
    expect(Array.from(first.subarray(0, 3))).not.toEqual(Array.from(first.subarray(8, 11)));
  });

  it("places steps on the axis of sampled steps", () => {
    expect(stepPosition(150, 100, 200)).toBe(0.5);
    expect(stepPosition(50, 100, 200)).toBe(0);
    expect(stepPosition(7, 7, 7)).toBe(0.5);
  });

  it("names the origin of an event", () => {
    expect(originText(EVENT)).toBe("Step 150: gradient first non-finite in 1 (call 0): incoming finite, to its inputs 3 NaN; parameters 1.weight.");
    expect(originText({ step: 3, origin: null })).toContain("the replay stayed finite");
    const entered = { ...EVENT.origin!, parameter_paths: [], grad_outputs: EVENT.origin!.grad_inputs, entered_nonfinite: true };
    expect(originText({ step: 9, origin: entered })).toBe(
      "Step 9: the gradient was already non-finite where it entered the model (3 NaN; made by the loss or code outside the modules), first reaching 1 (call 0).");
    const forward = { ...EVENT.origin!, forward_origin: { module_path: "1", call_index: 0, input_nonfinite: false } };
    expect(originText({ step: 4, origin: forward })).toBe("Step 4: 1 (call 0) made NaN/Inf in the forward; the backward only spread it.");
  });
});

describe("training monitor view", () => {
  it("shows rows, latest values, headroom and the selected event's origin", () => {
    const { el } = setup();
    expect(el.querySelectorAll(".vl-vt-row:not([hidden])").length).toBe(4);
    expect(cell(el, "0", "grad").textContent).toBe("100");
    expect(cell(el, "<root>", "grad").textContent).toBe(""); // no parameters: no norm
    expect(cell(el, "1", "headroom").textContent).toBe("0.4");
    expect(cell(el, "1", "headroom").classList.contains("vl-tm-low")).toBe(true);
    expect(cell(el, "2", "headroom").classList.contains("vl-tm-low")).toBe(true);
    expect(cell(el, "0", "headroom").classList.contains("vl-tm-low")).toBe(false);
    expect(cell(el, "<root>", "headroom").textContent).toBe("∞");
    expect(LOW_HEADROOM_BITS).toBe(1);
    expect(row(el, "1").classList.contains("vl-tm-origin")).toBe(true);
    expect(row(el, "0").classList.contains("vl-tm-reached")).toBe(true);
    expect(el.querySelector(".vl-tm-origin-text")!.textContent).toContain("first non-finite in 1 (call 0)");
    expect(el.querySelector(".vl-tm-counters")!.textContent).toBe("step 201 · sampled every 100 · 3 samples shown · 1 non-finite step");
    expect(el.querySelector('[data-key="headroom"] .vl-vt-hlabel')!.textContent).toBe("Headroom (fp16)");
    const mark = el.querySelector<HTMLElement>(".vl-tm-mark")!;
    expect(mark.style.left).toBe("75%");
    expect(cell(el, "0", "grad_map").querySelector("canvas")).not.toBeNull();
  });

  it("selects an event from its mark and follows live updates", () => {
    const second: NonFiniteEvent = { step: 180, origin: { ...EVENT.origin!, module_path: "2", propagated_to: ["1", "0"] } };
    const { el, model, cleanup } = setup([EVENT, second]);
    expect(row(el, "2").classList.contains("vl-tm-origin")).toBe(true); // latest by default
    el.querySelectorAll<HTMLElement>(".vl-tm-mark")[0].click();
    expect(model.get("selected_event")).toBe(0);
    expect(row(el, "1").classList.contains("vl-tm-origin")).toBe(true);
    model.kernelSet("history", { ...history([EVENT, second]), steps_run: 301 });
    expect(el.querySelector(".vl-tm-counters")!.textContent).toContain("step 301");
    // A new event arrives alone at once; the traitlet follows with the same list.
    const third: NonFiniteEvent = { step: 190, origin: null };
    model.receive({ kind: "events", start: 2, events: [third] });
    expect(el.querySelectorAll(".vl-tm-mark").length).toBe(3);
    model.receive({ kind: "events", start: 9, events: [third] }); // a gap: ignored
    expect(el.querySelectorAll(".vl-tm-mark").length).toBe(3);
    model.kernelSet("events", [EVENT, second]); // an older list does not undo the message
    expect(el.querySelectorAll(".vl-tm-mark").length).toBe(3);
    model.kernelSet("history", { ...history([EVENT, second, third]), events_total: 250 });
    expect(el.querySelector(".vl-tm-counters")!.textContent).toContain("250 non-finite steps");
    cleanup();
    expect(model.listenerCount("change:history")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });

  it("says when nothing went wrong yet", () => {
    const { el } = setup([]);
    expect(el.querySelector(".vl-tm-origin-text")!.textContent).toBe("No non-finite gradient so far.");
    expect(el.querySelector<HTMLElement>(".vl-tm-goto")!.hidden).toBe(true);
    expect(el.querySelectorAll(".vl-tm-mark").length).toBe(0);
  });
});

const f64 = (values: number[]) => arr("float64", [values.length], Float64Array.from(values));
const u8 = (values: number[]) => arr("uint8", [values.length], Uint8Array.from(values));

describe("run log view", () => {
  const series = {
    steps: arr("int32", [4], Int32Array.from([0, 50, 100, 150])), steps_total: 200, last_step: 199,
    loss_lo: f64([1, 0.5, NaN, 0.1]), loss_hi: f64([2, 1, NaN, 0.2]), loss_bad: u8([0, 0, 1, 0]),
    grad_norm_lo: f64([1, 1, 1, 1]), grad_norm_hi: f64([1, 3, 1000, 1]), grad_norm_bad: u8([0, 0, 1, 0]),
  };
  const runEvent: NonFiniteEvent = { ...EVENT, rank: 1, replay: true };
  function runSetup(extra: Record<string, any> = {}) {
    const made = setup([runEvent], { series, ...extra });
    made.model.kernelSet("history", { ...history([runEvent]), source: "run", ranks: [0, 1], rank: 0, log_dir: "s3://bucket/<b>run</b>", samples: 3, step_range: [0, 200], events_total: 1 });
    return made;
  }

  it("places curve points on the step axis, breaks them at buckets without finite values and marks non-finite ones", () => {
    const g = curveGeometry([0, 50, 100, 150], [1, 0.5, NaN, 0.1], [2, 1, NaN, 0.2], [0, 0, 1, 0], 0, 200);
    expect(g.log).toBe(true);
    expect([g.lo, g.hi]).toEqual([0.1, 2]);
    expect(g.bad).toEqual([500]);
    expect(g.lines.length).toBe(4); // hi and lo, each broken at the NaN bucket
    expect(g.lines[0][0]).toBe("0.0,4.0"); // the highest value at the top
    expect(g.lines[1]).toEqual(["750.0,74.7"]); // hi after the gap
    expect(g.lines[3]).toEqual(["750.0,96.0"]); // the lowest value at the bottom
    const linear = curveGeometry([0, 1], [-1, 1], [-1, 1], [0, 0], 0, 1);
    expect(linear.log).toBe(false);
  });

  it("says how many samples share the columns and how many events are listed", () => {
    expect(countersText({ steps_run: 10000, every: 1, samples: 10000, events_total: 250 }, 262, 100))
      .toBe("step 10,000 · sampled every 1 · 10,000 samples in 262 columns (largest of each) · 250 non-finite steps (first 100 listed)");
    expect(countersText({ steps_run: 3, every: 1, samples: 3 }, 3, 0)).toBe("step 3 · sampled every 1 · 3 samples shown · no non-finite step");
    expect(replayText({ step: 150, rank: 0, origin: EVENT.origin, agrees: true })).toBe(
      "gradient first non-finite in 1 (call 0): incoming finite, to its inputs 3 NaN; parameters 1.weight. Same module, call and parameters as recorded.");
    expect(replayText({ step: 150, rank: 0, origin: null, agrees: false })).toContain("the replay stayed finite");
  });

  it("keeps an event list received message by message unless the traitlet differs", () => {
    const a = { step: 1, origin: null, rank: 0 };
    const b = { step: 2, origin: null, rank: 1 };
    expect(mergeEvents([a], [a, b])).toEqual([a, b]);
    expect(mergeEvents([b], [a, b])).toEqual([b]); // a run's events re-sorted: the traitlet wins
  });

  it("draws the curves, the rank selector and the run's source as text", () => {
    const { el, model } = runSetup();
    expect(el.querySelectorAll(".vl-tm-curve").length).toBe(2);
    expect(el.querySelector('[data-curve="loss"] .vl-tm-curve-bad')).not.toBeNull();
    expect(el.querySelector('[data-curve="grad_norm"]')!.textContent).toContain("1 – 1,000 (log) · 1 non-finite");
    expect(el.querySelector(".vl-tm-source")!.textContent).toBe("s3://bucket/<b>run</b>");
    expect(el.querySelector(".vl-tm-source b")).toBeNull(); // a kernel string is never markup
    const ranks = el.querySelector<HTMLSelectElement>(".vl-tm-rank")!;
    expect(Array.from(ranks.options).map((o) => o.value)).toEqual(["0", "1"]);
    expect(el.querySelector<HTMLElement>(".vl-tm-rank-label")!.hidden).toBe(false);
    ranks.value = "1";
    ranks.dispatchEvent(new Event("change"));
    expect(model.get("rank")).toBe(1);
    expect(model.saved).toBeGreaterThan(0);
    expect(el.querySelector(".vl-tm-events option")!.textContent).toBe("step 150 · rank 1");
    expect(el.querySelector(".vl-tm-origin-text")!.textContent).toMatch(/^Rank 1, step 150: gradient first non-finite in 1/);
    // The curves and the marks share the step axis: step 150 of 0..200 (sampled to 200).
    expect(el.querySelector<HTMLElement>(".vl-tm-mark")!.style.left).toBe("75%");
  });

  it("replays an event in the kernel and shows the recomputed origin beside the recorded one", async () => {
    const { el, model } = runSetup();
    const button = el.querySelector<HTMLButtonElement>(".vl-tm-replay")!;
    expect(button.hidden).toBe(false);
    expect(el.querySelector<HTMLElement>(".vl-tm-recomputed")!.hidden).toBe(true);
    button.click();
    const request = model.sent.at(-1)!.content;
    expect(request).toMatchObject({ kind: "command", name: "replay", args: { step: 150, rank: 1 } });
    expect(button.disabled).toBe(true);
    expect(button.textContent).toBe("Replaying…");
    model.kernelSet("replays", { "1:150": { step: 150, rank: 1, origin: EVENT.origin, agrees: true } });
    model.receive({ kind: "result", id: request.id, data: {} });
    await new Promise((r) => setTimeout(r, 0));
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe("Replay again");
    const side = el.querySelector<HTMLElement>(".vl-tm-recomputed")!;
    expect(side.hidden).toBe(false);
    expect(side.classList.contains("vl-tm-agrees")).toBe(true);
    expect(side.textContent).toContain("Same module, call and parameters as recorded.");
    expect(el.querySelector(".vl-tm-origin-text")!.textContent).toContain("first non-finite in 1");
    // A failed replay: the kernel's reply shows in the error box.
    button.click();
    const again = model.sent.at(-1)!.content;
    model.receive({ kind: "error", id: again.id, message: "rank 1 has no replay bundle for step 150", traceback: "", cancelled: false });
    await new Promise((r) => setTimeout(r, 0));
    expect(el.querySelector(".vl-error-message")!.textContent).toContain("no replay bundle");
  });

  it("has no Replay button without a model (the kernel flags events it can replay)", () => {
    const { el } = setup([EVENT]);
    expect(el.querySelector<HTMLElement>(".vl-tm-replay")!.hidden).toBe(true);
    expect(el.querySelector<HTMLElement>(".vl-tm-curves")!.hidden).toBe(true);
    expect(el.querySelector<HTMLElement>(".vl-tm-rank-label")!.hidden).toBe(true);
  });
});
