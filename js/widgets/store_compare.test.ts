import { afterEach, describe, expect, it, vi } from "vitest";
import { FakeModel, dataView, stringColumn } from "../lib/fake-model";
import widget, { overlaySvg, rankedOrder, type CompareModel } from "./store_compare";

const HOSTILE = "<img src=x onerror=alert(1)>";
const NAMES = ["backbone.voxel", "rri", HOSTILE];

function f64(values: number[]) {
  return { $array: { dtype: "float64", shape: [values.length], data: dataView(new Float64Array(values)) } };
}

function fieldsTable() {
  const col = (name: string, values: number[]) => ({ name, dtype: "float64", data: dataView(new Float64Array(values)) });
  return { $table: { length: 3, columns: [
    stringColumn("name", NAMES),
    col("count_a", [10, 20, 5]), col("count_b", [10, 22, 0]),
    stringColumn("dtype_a", ["float16", "float32", "float32"]), stringColumn("dtype_b", ["float16", "float32", ""]),
    { name: "exact", dtype: "bool", data: dataView(new Uint8Array([1, 0, 0])) },
    col("mean_a", [0, 0.3, 1]), col("mean_b", [0, 0.5, NaN]), col("std_a", [1, 0.1, 0]), col("std_b", [1, 0.1, NaN]),
    col("js_distance", [0, 0.6, NaN]), col("psi", [0, 1.2, NaN]), col("wasserstein", [0, 0.2, NaN]), col("ks_statistic", [0, 0.5, NaN]),
  ] } };
}

function payload() {
  const hist = { edges: f64([0, 0.5, 1]), a: f64([3, 7]), b: f64([8, 2]) };
  return {
    header: {
      store_a: "/a", store_b: HOSTILE, num_samples_a: 4, num_samples_b: 5, sampled_samples_a: 4, sampled_samples_b: 5,
      max_samples: null, split_counts_a: { train: 4 }, split_counts_b: { train: 3, val: 2 },
      float32_relative_resolution: 0.0078125, psi_bins: 10, psi_epsilon: 0.0001, engine_seconds: 0.1,
    },
    fields: fieldsTable(),
    rankings: { js_distance: [1, 0, 2], psi: [1, 0, 2], wasserstein: [1, 0, 2], ks_statistic: [1, 0, 2] },
    histograms: [hist, hist, { edges: f64([]), a: f64([]), b: f64([]) }],
    samples_only_in_a: 1, samples_only_in_b: 2,
    sample_keys_only_in_a: { $table: { length: 1, columns: [stringColumn("key", ["s/a/1"])] } },
    sample_keys_only_in_b: { $table: { length: 2, columns: [stringColumn("key", ["s/b/1", HOSTILE])] } },
    scenes_only_in_a: ["scene_9"], scenes_only_in_b: [],
    problems_a: [], problems_b: [{ kind: "NonFiniteValues", shard_id: "00000", block: "rri", path: "/b", message: HOSTILE }],
  };
}

function makeModel(state: Partial<CompareModel> = {}) {
  return new FakeModel<CompareModel>({
    store_a_path: "/a", store_b_path: HOSTILE, max_samples: 512, metric: "js_distance", payload: {},
    acquisition: { id: "", state: "idle", step: "", done: 0, total: 0, trigger: "", message: "" },
    status: "idle", error: "", error_traceback: "", ...state,
  });
}

function mount(model: FakeModel<CompareModel>) {
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model: model as any, el } as any);
  return { el, cleanup };
}

afterEach(() => { document.body.replaceChildren(); });

describe("store compare widget", () => {
  it("shows the engine's ranking, the top field's overlay and kernel strings as text", () => {
    const model = makeModel({ payload: payload() as any });
    const { el, cleanup } = mount(model);
    expect(el.querySelector(".vl-sc-field-name")?.textContent).toBe("rri");
    expect(el.querySelectorAll(".vl-sc-bar-a").length).toBe(2);
    expect(el.querySelector(".vl-sc-step-b")?.getAttribute("d")).toMatch(/^M/);
    expect(el.querySelector("img")).toBeNull();
    expect(el.textContent).toContain(HOSTILE);
    expect(el.querySelector(".vl-sc-has-errors")?.textContent).toContain("NonFiniteValues");
    expect(el.querySelector('[data-list="scenes_only_in_a"]')?.textContent).toContain("(1)");
    cleanup();
  });

  it("switches the ranking through the metric traitlet and sends commands", () => {
    const model = makeModel({ payload: payload() as any });
    const { el, cleanup } = mount(model);
    const sel = el.querySelector(".vl-sc-metric") as HTMLSelectElement;
    sel.value = "psi";
    sel.dispatchEvent(new Event("change"));
    expect(model.get("metric")).toBe("psi");
    expect(el.querySelector(".vl-sc-fields h4")?.textContent).toContain("PSI");
    (el.querySelector('.vl-sc-export[data-what="samples_only_in_b"]') as HTMLButtonElement).click();
    expect(model.sent.at(-1)?.content).toMatchObject({ kind: "command", name: "export", args: { what: "samples_only_in_b" } });
    (el.querySelector(".vl-sc-refresh") as HTMLButtonElement).click();
    expect(model.sent.at(-1)?.content).toMatchObject({ name: "refresh", args: { max_samples: 512 } });
    cleanup();
  });

  it("shows progress with a cancel button while running", () => {
    const model = makeModel({ acquisition: { id: "c1", state: "running", step: "reading both stores", done: 3, total: 9, unit: "rows", trigger: "", message: "" } });
    const { el, cleanup } = mount(model);
    const cancel = el.querySelector(".vl-sc-cancel") as HTMLButtonElement;
    expect(cancel.hidden).toBe(false);
    cancel.click();
    expect(model.sent.at(-1)?.content).toEqual({ kind: "cancel", id: "c1" });
    expect(el.textContent).toContain("3 / 9 rows");
    cleanup();
  });

  it("draws log counts and keeps the engine's order", () => {
    const svg = overlaySvg({ edges: { dtype: "float64", shape: [3], data: new Float64Array([0, 1, 2]) },
      a: { dtype: "float64", shape: [2], data: new Float64Array([1, 1000]) },
      b: { dtype: "float64", shape: [2], data: new Float64Array([0, 10]) } }, { logY: true, label: "x" });
    expect(svg.textContent).toContain("count (log scale)");
    expect(rankedOrder({ rankings: { psi: [2, 0, 1] } }, "psi")).toEqual([2, 0, 1]);
    expect(rankedOrder({}, "psi")).toEqual([]);
    vi.restoreAllMocks();
  });
});
