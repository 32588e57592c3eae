import { describe, expect, it } from "vitest";
import { FakeModel, dataView, stringColumn } from "../lib/fake-model";
import { statText, summaryBoxesSvg } from "../lib/histogram";
import widget, { SUMMARY_FIELDS, nonFiniteText } from "./model_health";

// <root> > enc > enc.0 (origin), enc.1 ; head
const PATHS = ["<root>", "enc", "enc.0", "enc.1", "head"];
const PARENT = [-1, 0, 1, 1, 0];
const DEPTH = [0, 1, 2, 2, 1];
const END = [5, 4, 3, 4, 5];
const num = (name: string, arr: ArrayBufferView, dtype = "float64") => ({ name, dtype, data: dataView(arr) });

function modules() {
  const n = PATHS.length;
  return {
    $table: {
      length: n,
      columns: [
        stringColumn("path", PATHS), num("type", new Int32Array(n), "int32"),
        num("direct_parameters", new Float64Array(n)), num("subtree_parameters", new Float64Array(n)),
        num("trainable_parameters", new Float64Array(n)), num("direct_buffers", new Float64Array(n)),
        num("training", new Uint8Array(n), "bool"), num("parent", Int32Array.from(PARENT), "int32"),
        num("depth", Int32Array.from(DEPTH), "int32"), num("subtree_end", Int32Array.from(END), "int32"),
      ],
    },
  };
}

/** What health_payload() sends: per-side summaries, drift, origin flags. */
function health(mode: "stats" | "diff") {
  const n = PATHS.length;
  const cols: any[] = [];
  for (const side of ["a", "b"]) {
    const has = side === "a" || mode === "diff";
    cols.push(num(`has_${side}`, Uint8Array.from(PATHS, (_, i) => (has && i > 0 ? 1 : 0)), "bool"));
    for (const f of SUMMARY_FIELDS) {
      cols.push(num(`${side}_${f}`, Float64Array.from(PATHS, (_, i) => {
        if (!has || i === 0) return NaN;
        if (f === "nan_count") return i === 2 ? 7 : 0;
        if (f === "mean") return side === "a" ? i * 0.1 : i * 0.1 + 0.05;
        if (f === "std") return 0.5;
        if (f === "min") return -1;
        if (f === "max") return side === "a" ? 1 : 2;
        if (f === "count") return 128;
        return 0;
      })));
    }
  }
  const drift = mode === "diff" ? [NaN, 0.1, Infinity, 0.4, 0] : new Array(n).fill(NaN);
  cols.push(num("max_abs_diff", Float64Array.from(drift)), num("relative_l2", Float64Array.from(drift)));
  cols.push(num("cosine", Float64Array.from(PATHS, () => (mode === "diff" ? 0.99 : NaN))));
  cols.push(num("calls", Int32Array.from(PATHS, () => 1), "int32"));
  cols.push(num("origin", Uint8Array.from(PATHS, (_, i) => (i === 2 ? 1 : 0)), "bool"));
  cols.push(num("reached", Uint8Array.from(PATHS, (_, i) => (i === 1 || i === 0 ? 1 : 0)), "bool"));
  const summary = { count: 128, mean: 0, std: 0, min: 0, max: 0, abs_max: 0, zero_fraction: 0, nan_count: 7, posinf_count: 1, neginf_count: 0 };
  return {
    mode, table: { $table: { length: n, columns: cols } },
    origin: {
      module_path: "enc.0", call_index: 0, input_nonfinite: false, reached: ["enc", "<root>"],
      inputs: [{ tensor_path: "args[0]", shape: [4], dtype: "torch.float32", summary: { ...summary, nan_count: 0, posinf_count: 0 } }],
      outputs: [{ tensor_path: "output", shape: [4], dtype: "torch.float32", summary }],
    },
    first_divergent: mode === "diff" ? "enc" : null, unknown_paths: [], unpaired_paths: [], batches: mode === "stats" ? 3 : null,
  };
}

function setup(mode: "stats" | "diff" = "stats", selected: string[] = []) {
  const model = new FakeModel<any>({
    modules: modules(), model_summary: { model_type: "m.Net", types: ["m.Net"] },
    selected_paths: selected, tree_view: true, health: health(mode), can_analyze: true,
    status: "idle", error: "", error_traceback: "",
  });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const row = (el: HTMLElement, name: string) => Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
  .find((r) => r.querySelector(".vl-mt-name")!.textContent === name)!;
const cell = (el: HTMLElement, name: string, key: string) => row(el, name).querySelector<HTMLElement>(`[data-key="${key}"]`)!;

describe("model health view", () => {
  it("shows summaries as module-table columns and highlights the NaN origin", () => {
    const { el } = setup();
    expect(cell(el, "0", "mh_mean").textContent).toBe("0.2");
    expect(cell(el, "0", "mh_std").textContent).toBe("0.5");
    expect(cell(el, "0", "mh_nonfinite").textContent).toBe("7");
    expect(cell(el, "0", "mh_nonfinite").classList.contains("vl-mh-bad")).toBe(true);
    expect(cell(el, "<root>", "mh_mean").textContent).toBe(""); // no summary: empty, not NaN
    expect(row(el, "0").classList.contains("vl-mh-origin")).toBe(true);
    expect(row(el, "enc").classList.contains("vl-mh-reached")).toBe(true);
    expect(row(el, "head").classList.contains("vl-mh-origin")).toBe(false);
    expect(el.querySelector('[data-key="mh_drift"]')).toBeNull(); // not in stats mode
    const banner = el.querySelector(".vl-mh-origin-box")!;
    expect(banner.textContent).toContain("First non-finite value: enc.0 (call 0): its inputs were finite, its output has 7 NaN, 1 +Inf.");
    expect(banner.textContent).toContain("It then reached 2 modules.");
    expect(el.querySelector(".vl-mh-mode")!.textContent).toBe("Output statistics over 3 batches");
  });

  it("says which outputs were too large to walk entirely", () => {
    const { model, el } = setup();
    model.set("health", { ...model.get("health"), walk_truncated: ["enc.0"] });
    expect(el.querySelector(".vl-mh-mode")!.textContent).toBe(
      "Output statistics over 3 batches · outputs of enc.0 too large to walk entirely: their statistics cover part of them");
  });

  it("Show in table selects the origin and opens its detail; one model has no 'A' column", () => {
    const { el, model } = setup();
    expect(el.querySelector(".vl-mh-detail")!.textContent).toBe("");
    (el.querySelector(".vl-mh-goto") as HTMLButtonElement).click();
    expect(model.get("selected_paths")).toEqual(["enc.0"]);
    expect(el.querySelector(".vl-mt-selected-count")!.textContent).toContain("1");
    expect(row(el, "0").classList.contains("vl-selected")).toBe(true);
    const detail = el.querySelector(".vl-mh-detail")!;
    expect(detail.textContent).toContain("Output of enc.0");
    const head = Array.from(detail.querySelectorAll(".vl-mh-facts-head span")).map((s) => s.textContent);
    expect(head).toEqual(["", "output"]);
    const keys = Array.from(detail.querySelectorAll(".vl-mh-fact-key")).map((s) => s.textContent);
    expect(keys).toContain("mean (finite)");
    expect(keys).toContain("std (finite)");
    expect(keys).toContain("finite values");
    expect(detail.textContent).toContain("121"); // 128 values, 7 NaN
    expect(detail.querySelector("svg")!.textContent).not.toContain("A");
    expect(el.querySelector('[data-key="mh_mean"]')!.textContent).toContain("Mean (finite)");
    expect(el.querySelector(".vl-mh-origin-box")!.textContent).toContain("count only the finite values");
  });

  it("sorts by a statistic with missing values last", () => {
    const { el } = setup();
    const header = el.querySelector('[data-key="mh_mean"] button') as HTMLButtonElement;
    header.click(); // descending
    const names = () => Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
      .sort((a, b) => Number(a.dataset.row) - Number(b.dataset.row)).map((r) => r.querySelector(".vl-mt-name")!.textContent);
    expect(names()).toEqual(["<root>", "head", "enc", "1", "0"]); // siblings by mean, tree kept
  });

  it("diff mode: drift bars, the first divergent module, A and B side by side on click", () => {
    const { el, model } = setup("diff");
    expect(el.querySelector(".vl-mh-mode")!.textContent).toBe("A vs B · first divergent: enc");
    const bar = cell(el, "1", "mh_drift").querySelector<HTMLElement>(".vl-mh-drift-bar")!;
    expect(bar.style.width).toBe("calc(1 * (100% - 64px))"); // 0.4 is the largest finite drift
    expect(cell(el, "enc", "mh_drift").querySelector<HTMLElement>(".vl-mh-drift-bar")!.style.width).toBe("calc(0.25 * (100% - 64px))");
    expect(cell(el, "0", "mh_drift").querySelector(".vl-mh-drift-nonfinite")).not.toBeNull(); // inf drift: full, red
    expect(cell(el, "0", "mh_drift").textContent).toBe("Infinity");
    row(el, "1").querySelector(".vl-mt-name")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(model.get("selected_paths")).toEqual(["enc.1"]);
    const detail = el.querySelector(".vl-mh-detail")!;
    expect(detail.textContent).toContain("Output of enc.1");
    const head = Array.from(detail.querySelectorAll(".vl-mh-facts-head span")).map((s) => s.textContent);
    expect(head).toEqual(["", "A", "B"]);
    expect(detail.textContent).toContain("relative L2 0.4");
    const svg = detail.querySelector("svg.vl-boxes")!;
    expect(svg.querySelectorAll("rect.vl-boxes-box").length).toBe(2);
    expect(svg.getAttribute("aria-label")).toContain("A: min -1, mean 0.3 ± 0.5, max 1; B: min -1, mean 0.35 ± 0.5, max 2");
  });

  it("follows a selection made elsewhere and says when a module has no statistics", () => {
    const { el, model } = setup("stats");
    model.kernelSet("selected_paths", ["head"]);
    expect(el.querySelector(".vl-mh-detail")!.textContent).toContain("Output of head");
    expect(row(el, "head").classList.contains("vl-selected")).toBe(true);
    model.kernelSet("selected_paths", ["<root>"]);
    expect(el.querySelector(".vl-mh-detail")!.textContent).toContain("No statistics for <root>");
  });

  it("Analyze sends the command, shows progress and errors", async () => {
    const { el, model } = setup();
    const button = el.querySelector<HTMLButtonElement>(".vl-mh-analyze")!;
    button.click();
    const sent = model.sent.at(-1)!.content;
    expect(sent).toMatchObject({ kind: "command", name: "analyze" });
    model.receive({ kind: "progress", id: sent.id, done: 1, total: 3 });
    expect(el.querySelector(".vl-mh-progress")!.textContent).toBe("Analyzing… 1 / 3");
    model.receive({ kind: "error", id: sent.id, message: "analyze failed: RuntimeError: boom", traceback: "tb" });
    await new Promise((r) => setTimeout(r, 0));
    expect(button.disabled).toBe(false);
    expect(el.querySelector(".vl-error")!.textContent).toContain("boom");
    model.kernelSet("can_analyze", false);
    expect(button.hidden).toBe(true);
  });

  it("formats statistics and counts, and cleans up", () => {
    expect(statText(0.123456)).toBe("0.1235");
    expect(statText(1.5e-7)).toBe("1.500e-7");
    expect(statText(NaN)).toBe("NaN");
    expect(nonFiniteText([])).toBe("no floating tensor");
    const boxes = summaryBoxesSvg([{ label: "A", min: NaN, max: NaN, mean: NaN, std: NaN }]);
    expect(boxes.textContent).toContain("no finite values");
    const { model, cleanup } = setup();
    cleanup();
    expect(model.listenerCount("change:health")).toBe(0);
    expect(model.listenerCount("change:selected_paths")).toBe(0);
  });
});
