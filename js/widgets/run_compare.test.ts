import { describe, expect, it } from "vitest";
HTMLCanvasElement.prototype.getContext = (() => null) as any; // jsdom has no canvas: strips stay blank
import { FakeModel, dataView } from "../lib/fake-model";
import { sharedCurves, stepX } from "../lib/step-curves";
import widget, { buckets, DifferenceMap, shortLabel, stepSpan, verdictText, type Verdict } from "./run_compare";

const arr = (dtype: string, shape: number[], data: ArrayBufferView) => ({ $array: { dtype, shape, data: dataView(data) } });
const PATHS = ["0", "1", "2"];

function series(steps: number[], loss: number[], norm: number[], bad: number[] = []) {
  const n = steps.length;
  const flags = Uint8Array.from(steps.map((_, i) => (bad.includes(i) ? 1 : 0)));
  return {
    steps: arr("int32", [n], Int32Array.from(steps)), steps_total: n, last_step: steps[n - 1],
    loss_lo: arr("float64", [n], Float64Array.from(loss)), loss_hi: arr("float64", [n], Float64Array.from(loss)), loss_bad: arr("uint8", [n], flags),
    grad_norm_lo: arr("float64", [n], Float64Array.from(norm)), grad_norm_hi: arr("float64", [n], Float64Array.from(norm)), grad_norm_bad: arr("uint8", [n], flags),
  };
}

const DIVERGED: Verdict = {
  identical: false, steps_compared: 40, ranks: [0], first_step: 12, rank: 0, cause: "data",
  module: "1", field: "inputs[0].sum", value_a: 3.5, value_b: 3.25, unmatched: [], note: null,
  module_paths: PATHS,
  module_weights: arr("int32", [3], Int32Array.from([13, 13, -1])),
  module_outputs: arr("int32", [3], Int32Array.from([12, 12, 15])),
  module_grads: arr("int32", [3], Int32Array.from([12, 12, 12])),
};

function difference() {
  // row-major [module, step]: module 0 equal throughout, module 1 apart from step 12 on
  const values = Float32Array.from([0, 0, 0, 0, 0, 1e-6, 1e-3, NaN, 0, 0, 0.5, 0.25]);
  return { field: "grad_norm", paths: PATHS, values: arr("float32", [3, 4], values), steps: arr("int32", [4], Int32Array.from([0, 10, 20, 30])), samples: 4, step_range: [0, 39] };
}

function setup(extra: Record<string, any> = {}) {
  const steps = Array.from({ length: 40 }, (_, i) => i);
  const model = new FakeModel<any>({
    runs: { a: { label: "runs/base", live: false }, b: { label: "runs/changed", live: false }, ranks: [0], rank: 0 },
    curves: { a: series(steps, steps.map((s) => 2 / (1 + s)), steps.map(() => 1.5)), b: series(steps, steps.map((s) => (s < 12 ? 2 / (1 + s) : 3 / (1 + s))), steps.map(() => 1.5), [30]) },
    verdict: DIVERGED, difference: difference(), fields: ["grad_norm", "weight_norm", "std"], field: "grad_norm",
    rank: 0, selected_paths: [], status: "idle", error: "", error_traceback: "",
    ...extra,
  });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const row = (el: HTMLElement, path: string) => Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
  .find((r) => r.querySelector('[data-key="path"]')!.textContent === path)!;

describe("verdict text", () => {
  it("names the step, the field, the module, both values and the cause", () => {
    expect(verdictText(DIVERGED)).toBe(
      "The runs part ways at step 12; inputs[0].sum of 1 differs first: A 3.5, B 3.25. Likely cause: the inputs differ.",
    );
  });
  it("names the rank only when there are several, and says when the runs are identical", () => {
    expect(verdictText({ ...DIVERGED, ranks: [0, 1], rank: 1, cause: "optimizer" })).toContain("step 12 (rank 1);");
    expect(verdictText({ ...DIVERGED, ranks: [0, 1], rank: 1, cause: "optimizer" })).toContain("the gradients agreed but the update did not");
    expect(verdictText({ identical: true, steps_compared: 1200, ranks: [0, 1] })).toBe("The runs are identical: 1,200 steps compared on ranks 0, 1.");
  });
  it("shows the kernel's note when there is no divergence record", () => {
    expect(verdictText({ note: "a live TrainingMonitor has no fingerprints" })).toBe("a live TrainingMonitor has no fingerprints");
  });
});

describe("shared curves", () => {
  it("puts both runs on one log value axis and one step axis", () => {
    const a = { steps: [0, 10], lo: [1, 10], hi: [1, 10], bad: [0, 0] };
    const b = { steps: [0, 20], lo: [100, 100], hi: [100, 100], bad: [0, 1] };
    const shared = sharedCurves([a, b], 0, 20);
    expect(shared.log).toBe(true);
    expect([shared.lo, shared.hi]).toEqual([1, 100]);
    // A's 1 at the bottom, B's 100 at the top, A's last step half way along
    expect(shared.curves[0].lines[0]).toEqual(["0.0,96.0", "500.0,50.0"]);
    expect(shared.curves[1].lines[0][1]).toBe("1000.0,4.0");
    expect(shared.curves[1].bad).toEqual([1000]);
  });
  it("breaks a curve where a bucket has no finite value and goes linear with a non-positive value", () => {
    const shared = sharedCurves([{ steps: [0, 1, 2, 3], lo: [-1, NaN, 1, 2], hi: [-1, NaN, 1, 2], bad: [0, 1, 0, 0] }], 0, 3);
    expect(shared.log).toBe(false);
    expect(shared.curves[0].lines.filter((l) => l.length > 1)).toHaveLength(2); // steps 2 and 3, highs and lows
    expect(shared.curves[0].lines.some((l) => l.length === 1)).toBe(true); // step 0 alone: a dot
    expect(stepX(5, 5, 5)).toBe(500);
  });
  it("spans the steps of both runs", () => {
    const a = series([0, 1, 2], [1, 1, 1], [1, 1, 1]);
    const b = series([5, 9], [1, 1], [1, 1]);
    expect(stepSpan(a, b)).toEqual([0, 9]);
    expect(stepSpan(undefined, {})).toEqual([0, 0]);
    expect(buckets({}, "loss")).toBeNull();
  });
});

describe("run labels", () => {
  it("keep a short path whole and the last two parts of a long one", () => {
    expect(shortLabel("runs/base")).toBe("runs/base");
    expect(shortLabel("/tmp/pytest-of-root/pytest-82/lab0/tmp/vinlens-runs-x1/base")).toBe("…/vinlens-runs-x1/base");
    expect(shortLabel("s3://bucket/a/very/long/prefix/of/experiments/exp42/run")).toBe("…/exp42/run");
  });
});

describe("difference map", () => {
  it("scales log10 of the positive differences and leaves equal steps blank", () => {
    const map = new DifferenceMap(1, 4, [0, 1e-6, 1e-2, NaN]);
    expect([map.vmin, map.vmax]).toEqual([-6, -2]);
    const px = map.rowPixels(0);
    expect(px[3]).toBe(0); // equal: transparent
    expect(px[7]).toBe(255);
    expect(Array.from(px.subarray(12, 16))).toEqual([0, 160, 160, 255]); // NaN marked
  });
});

describe("run compare view", () => {
  it("draws both runs' curves, marks the first divergent step and highlights the divergent module", () => {
    const { el, cleanup } = setup();
    expect(el.querySelector(".vl-rc-run-a")!.textContent).toBe("A: runs/base");
    expect(el.querySelector(".vl-rc-run-b")!.textContent).toBe("B: runs/changed");
    expect(el.querySelectorAll(".vl-rc-curve")).toHaveLength(2);
    const loss = el.querySelector('[data-curve="loss"]')!;
    expect(loss.querySelectorAll("polyline.vl-rc-line-a").length).toBeGreaterThan(0);
    expect(loss.querySelectorAll("polyline.vl-rc-line-b").length).toBeGreaterThan(0);
    const mark = loss.querySelector("line.vl-rc-first")!;
    expect(mark.getAttribute("x1")).toBe((1000 * 12 / 39).toFixed(1));
    expect(el.querySelector(".vl-rc-tick-first-divergent")!.textContent).toBe("parts at 12");
    expect(el.querySelectorAll('[data-curve="grad_norm"] .vl-rc-bad')).toHaveLength(1); // B's step 30
    expect(el.querySelector(".vl-rc-verdict")!.classList.contains("vl-rc-diverged")).toBe(true);
    expect(row(el, "1").classList.contains("vl-rc-divergent")).toBe(true);
    expect(row(el, "0").classList.contains("vl-rc-divergent")).toBe(false);
    expect(row(el, "2").querySelector('[data-key="weights"]')!.textContent).toBe("—");
    expect(row(el, "1").querySelector('[data-key="outputs"]')!.textContent).toBe("12");
    expect(el.querySelector(".vl-rc-steps")!.textContent).toBe("3 modules · steps 0–39");
    cleanup();
  });

  it("'Go to module' picks the divergent module in selected_paths", () => {
    const { el, model, cleanup } = setup();
    const button = el.querySelector<HTMLButtonElement>(".vl-rc-goto")!;
    expect(button.hidden).toBe(false);
    button.click();
    expect(model.get("selected_paths")).toEqual(["1"]);
    expect(model.saved).toBe(1);
    cleanup();
  });

  it("identical runs: no mark, no button, the verdict says so", () => {
    const { el, cleanup } = setup({ verdict: { identical: true, steps_compared: 40, ranks: [0], first_step: null, module: null, module_paths: [] } });
    expect(el.querySelector(".vl-rc-first")).toBeNull();
    expect(el.querySelector<HTMLButtonElement>(".vl-rc-goto")!.hidden).toBe(true);
    expect(el.querySelector(".vl-rc-verdict")!.classList.contains("vl-rc-identical")).toBe(true);
    cleanup();
  });

  it("the field and rank pickers set the synced traitlets; kernel strings stay text", () => {
    const { el, model, cleanup } = setup({
      runs: { a: { label: "<img src=x onerror=alert(1)>", live: false }, b: { label: "b", live: false }, ranks: [0, 1], rank: 0 },
    });
    expect(el.querySelector("img")).toBeNull();
    const field = el.querySelector<HTMLSelectElement>(".vl-rc-field")!;
    field.value = "weight_norm";
    field.dispatchEvent(new Event("change"));
    expect(model.get("field")).toBe("weight_norm");
    const rank = el.querySelector<HTMLSelectElement>(".vl-rc-rank")!;
    expect(el.querySelector<HTMLElement>(".vl-rc-rank-label")!.hidden).toBe(false);
    rank.value = "1";
    rank.dispatchEvent(new Event("change"));
    expect(model.get("rank")).toBe(1);
    cleanup();
  });

  it("a live monitor side: the curves and the kernel's note, no table", () => {
    const { el, cleanup } = setup({ verdict: { note: "needs two run logs" }, difference: {} });
    expect(el.querySelector(".vl-rc-verdict-text")!.textContent).toBe("needs two run logs");
    expect(el.querySelector<HTMLElement>(".vl-rc-table")!.hidden).toBe(true);
    expect(el.querySelectorAll(".vl-rc-curve")).toHaveLength(2);
    cleanup();
  });

  it("cleanup removes every listener it added", () => {
    const { model, cleanup } = setup();
    cleanup();
    for (const name of ["change:runs", "change:curves", "change:verdict", "change:difference", "change:selected_paths"]) {
      expect(model.listenerCount(name)).toBe(0);
    }
  });
});
