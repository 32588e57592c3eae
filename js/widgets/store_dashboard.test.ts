import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { FakeModel, dataView, stringColumn } from "../lib/fake-model";
import widget, { formatBytes, formatMiB, seriesHistogram, type DashboardModel, type Series } from "./store_dashboard";

const HOSTILE = "<img src=x onerror=alert(1)>";

function f32(values: number[]) {
  return { $array: { dtype: "float32", shape: [values.length], data: dataView(new Float32Array(values)) } };
}


function series(key: string, title: string, values: number[] | null, unavailable: string | null = null): Series {
  return {
    key, title, count: values?.length ?? 0, unavailable,
    summary: values ? { count: values.length, minimum: Math.min(...values), mean: 1, maximum: Math.max(...values) } : null,
    values: values ? (f32(values) as any) : null,
  };
}

function payload(overrides: Record<string, any> = {}) {
  return {
    header: {
      store_dir: `/data/${HOSTILE}`, version: 1, num_samples: 100000, sampled_samples: 512,
      num_scenes: 1000, num_snippets: 4000, numeric_bytes: 3 * 1024 ** 3,
      split_counts: { train: 70000, val: 30000 }, materialized_blocks: { backbone: true, candidate_ids: false },
      scene_labels_available: true, batch_shapes_available: true,
      digest: "abcdef0123456789abcdef0123456789", max_samples: 512, acquired_at: "", engine_seconds: 1,
      scan_scope: "512 of 100,000 rows sampled",
    },
    problems: [
      { severity: "error", title: "MissingChunksError in shard 00000/rri", detail: `chunk c/0/0 ${HOSTILE}` },
      { severity: "notice", title: "3 labelled rows without candidate IDs (512 of 100,000 rows sampled)", detail: "" },
    ],
    blocks: { $table: { length: 2, columns: [
      stringColumn("shard_id", ["00000", "00000"]), stringColumn("name", ["rri", "vin_points"]),
      stringColumn("kind", ["zarr_array", "msgpack_indexed_records"]), stringColumn("dtype", ["float32", ""]),
      stringColumn("shape", ["[256, 64]", "[256]"]),
      { name: "optional", dtype: "bool", data: dataView(new Uint8Array([0, 0])) },
      { name: "estimated_bytes", dtype: "float64", data: dataView(new Float64Array([65536, NaN])) },
    ] } },
    histograms: [
      series("candidate_count", "Valid candidates per sample", [3, 3, 4, 5, 5, 5]),
      series("rri", "Oracle RRI (valid candidates)", [0.1, 0.2, 0.25, 0.5, 0.9, NaN]),
      series("vin_points", "VIN points per snippet", [16, 40, 160]),
    ],
    components: [series("component:novelty", "RRI component: novelty", [0.1, 0.3])],
    poses: [series("pose:distance_m", "distance_m", [0.5, 1.7, 3])],
    pairs: {
      components: [{ name: "novelty", count: 3, pearson: 0.93, rri: f32([0.1, 0.2, 0.3]), value: f32([0.05, 0.1, 0.2]) }],
      unpaired_count: 3, unpaired_examples: ["s/a/0", HOSTILE],
    },
    memory: [{ component: "total", mean_mib: 2.5, median_mib: 2, p95_mib: 4 }],
    backbone: [{ field: "global", shape: [32], numel: 32, sampled_rows: 24, count: 768, mean: 0, std: 1, abs_mean: 0.8, nz_frac: 0.97 }],
    batch_shapes: [{ name: "rri", shape: "[4, 16]" }],
    ...overrides,
  };
}

function makeModel(state: Partial<DashboardModel> = {}) {
  return new FakeModel<DashboardModel>({
    store_path: "/data/store", max_samples: 512, payload: {}, stale: false,
    acquisition: { id: "", state: "idle", step: "", done: 0, total: 0, trigger: "", message: "" },
    replacement: { replaced: false, when: "", message: "", previous_digest: "", current_digest: "" },
    status: "idle", error: "", error_traceback: "", ...state,
  });
}

function mount(model: FakeModel<DashboardModel>) {
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model: model as any, el } as any);
  return { el, cleanup };
}

beforeEach(() => {
  HTMLCanvasElement.prototype.getContext = vi.fn(() => null) as any;
});
afterEach(() => { document.body.replaceChildren(); });

describe("store dashboard", () => {
  it("shows the header, splits and digest, with hostile strings as text", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    const dl = el.querySelector(".vl-sd-dl")!;
    expect(dl.textContent).toContain(`/data/${HOSTILE}`);
    expect(dl.textContent).toContain("100,000 (512 of 100,000 rows sampled)");
    expect(el.querySelector(".vl-sd-scope")!.textContent).toBe("shown: 512 of 100,000 rows sampled");
    expect(el.querySelector(".vl-toolbar")!.textContent).not.toContain("rows sampled 512");
    expect(dl.textContent).toContain("train 70,000 · val 30,000");
    expect(dl.textContent).toContain("abcdef0123456789");
    expect(dl.textContent).toContain("3.0 GiB");
    expect(el.querySelector("img")).toBeNull();
    expect(el.textContent).toContain("✗ candidate_ids");
  });

  it("puts integrity errors first, prominently, as an alert", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    const box = el.querySelector(".vl-sd-problems")!;
    expect(box.getAttribute("role")).toBe("alert");
    expect(box.classList.contains("vl-sd-has-errors")).toBe(true);
    expect(box.querySelector("h4")!.textContent).toBe("1 integrity problem · 1 notice");
    const items = [...box.querySelectorAll("li")].map((li) => li.textContent);
    expect(items[0]).toContain("MissingChunksError");
    expect(items[0]).toContain(HOSTILE);
    // The problems box sits above the tabs.
    expect(box.compareDocumentPosition(el.querySelector(".vl-sd-tabs")!) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();

    const ok = mount(makeModel({ payload: payload({ problems: [] }) }));
    expect(ok.el.querySelector(".vl-sd-problems")!.textContent).toContain("No integrity problems found");
  });

  it("bins histograms in the browser and rebins when the bin count changes", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    const hist = (key: string) => el.querySelector(`figure[data-key="${key}"]`)!;
    // Integer series: one bar per whole number 3..5.
    const counts = [...hist("candidate_count").querySelectorAll("rect.vl-chart-bar")].map((r) => Number(r.getAttribute("data-count")));
    expect(counts).toEqual([2, 1, 3]);
    expect(hist("rri").querySelectorAll("rect.vl-chart-bar").length).toBe(30);
    const select = el.querySelector("select.vl-sd-bins") as HTMLSelectElement;
    select.value = "10";
    select.dispatchEvent(new Event("change"));
    expect(hist("rri").querySelectorAll("rect.vl-chart-bar").length).toBe(10);
    const titles = [...hist("rri").querySelectorAll("rect title")].map((t) => t.textContent);
    expect(titles[0]).toMatch(/^\[0\.1, 0\.18\): 1 \(20\.0%\)$/);
    expect(hist("rri").getAttribute("aria-label")).toContain("n 6");
  });

  it("explains unavailable series instead of drawing zeros", () => {
    const p = payload({ histograms: [series("candidate_count", "Valid candidates per sample", null, "no scene labels in this store")] });
    const { el } = mount(makeModel({ payload: p }));
    const fig = el.querySelector('figure[data-key="candidate_count"]')!;
    expect(fig.querySelector("svg")).toBeNull();
    expect(fig.textContent).toContain("no scene labels in this store");
  });

  it("switches tabs with the keyboard and shows the scatter with the unpaired count", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    const first = el.querySelector('.vl-sd-tabbtn[data-tab="overview"]') as HTMLElement;
    first.focus();
    first.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    const active = el.querySelector(".vl-sd-tabbtn.vl-sd-active") as HTMLElement;
    expect(active.dataset.tab).toBe("components");
    expect(document.activeElement).toBe(active);
    expect(active.getAttribute("aria-selected")).toBe("true");
    expect(el.querySelector(".vl-scatter")!.getAttribute("aria-label")).toBe("scatter of 3 points");
    expect(el.textContent).toContain("3 pairs · Pearson r 0.930");
    const note = el.querySelector(".vl-sd-pairnote")!;
    expect(note.textContent).toContain("3 labelled rows without candidate IDs");
    expect(note.textContent).not.toContain("sampled labelled");
    expect(note.textContent).toContain(HOSTILE);
  });

  it("lists blocks with estimated bytes and the other tables", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    (el.querySelector('.vl-sd-tabbtn[data-tab="blocks"]') as HTMLElement).click();
    const cells = [...el.querySelectorAll(".vl-sd-table tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent));
    expect(cells[0]).toEqual(["00000", "rri", "zarr_array", "float32", "[256, 64]", "no", "64.0 KiB"]);
    expect(cells[1][6]).toBe("–");
    (el.querySelector('.vl-sd-tabbtn[data-tab="poses"]') as HTMLElement).click();
    const poseRow = [...el.querySelectorAll(".vl-sd-table tbody tr")][0];
    expect([...poseRow.children].map((td) => td.textContent)).toEqual(["distance_m", "3", "0.5", "1", "3"]);
    expect(el.querySelectorAll('figure[data-key="pose:distance_m"] rect.vl-chart-bar').length).toBe(30);
    (el.querySelector('.vl-sd-tabbtn[data-tab="memory"]') as HTMLElement).click();
    expect(el.textContent).toContain("global");
    expect(el.textContent).toContain("97.0%");
    (el.querySelector('.vl-sd-tabbtn[data-tab="batch"]') as HTMLElement).click();
    expect(el.textContent).toContain("[4, 16]");
  });

  it("refreshes with the chosen row budget and cancels the running acquisition by its id", () => {
    const model = makeModel({ payload: payload() });
    const { el } = mount(model);
    const input = el.querySelector(".vl-sd-max-samples") as HTMLInputElement;
    expect(input.value).toBe("512");
    input.value = "64";
    (el.querySelector(".vl-sd-refresh") as HTMLButtonElement).click();
    expect(model.sent[0].content).toMatchObject({ kind: "command", name: "refresh", args: { max_samples: 64 } });
    input.value = "";
    (el.querySelector(".vl-sd-refresh") as HTMLButtonElement).click();
    expect(model.sent[1].content.args).toEqual({ max_samples: null });

    model.kernelSet("acquisition", { id: "acquire-1", state: "running", step: "reading store", done: 256, total: 1024, unit: "rows", trigger: "refresh", message: "" });
    const cancel = el.querySelector(".vl-sd-cancel") as HTMLButtonElement;
    expect(cancel.hidden).toBe(false);
    expect((el.querySelector(".vl-sd-refresh") as HTMLButtonElement).disabled).toBe(true);
    expect(el.querySelector(".vl-progress-label")!.textContent).toBe("reading store: 256 / 1,024 rows");
    expect((el.querySelector(".vl-progress") as HTMLProgressElement).value).toBe(256);
    cancel.click();
    expect(model.sent[2].content).toEqual({ kind: "cancel", id: "acquire-1" });
    model.kernelSet("acquisition", { id: "acquire-1", state: "cancelled", step: "", done: 0, total: 3, trigger: "refresh", message: "" });
    expect(cancel.hidden).toBe(true);
    expect(el.textContent).toContain("Acquisition cancelled");
  });

  it("says plainly when the store was replaced, and when the numbers are stale", () => {
    const model = makeModel({ payload: payload() });
    const { el } = mount(model);
    const banner = el.querySelector(".vl-sd-replaced") as HTMLElement;
    expect(banner.hidden).toBe(true);
    model.kernelSet("replacement", { replaced: true, when: "during", message: `The store at ${HOSTILE} was replaced while…`, previous_digest: "a", current_digest: "" });
    model.kernelSet("stale", true);
    expect(banner.hidden).toBe(false);
    expect(banner.getAttribute("role")).toBe("alert");
    expect(banner.textContent).toContain("Store replaced while reading.");
    expect(banner.textContent).toContain(HOSTILE);
    expect(banner.textContent).toContain("out of date");
    expect(banner.querySelector("img")).toBeNull();
  });

  it("shows progress before the first payload and renders it when it arrives", () => {
    const model = makeModel({ acquisition: { id: "a", state: "running", step: "capturing request", done: 0, total: 0, trigger: "construction", message: "" } });
    const { el } = mount(model);
    expect(el.querySelector(".vl-sd-body")!.textContent).toContain("Acquiring store statistics");
    expect(el.querySelector(".vl-progress-label")!.textContent).toBe("capturing request…");
    expect(el.querySelector(".vl-progress")!.hasAttribute("value")).toBe(false);
    model.kernelSet("payload", payload());
    expect(el.querySelector(".vl-sd-dl")).not.toBeNull();
  });

  it("cleans up its listeners", () => {
    const model = makeModel({ payload: payload() });
    const { cleanup } = mount(model);
    expect(model.listenerCount("change:payload")).toBe(1);
    cleanup();
    expect(model.listenerCount("change:payload")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });
});

describe("helpers", () => {
  it("formats bytes in binary units", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(null)).toBe("–");
    expect(formatMiB(9.817e-4)).toBe("1.0 KiB");
    expect(formatMiB(1536)).toBe("1.5 GiB");
  });

  it("bins a series only when it has values", () => {
    expect(seriesHistogram(series("x", "x", null, "n/a"), 10)).toBeNull();
    const decoded = { ...series("x", "x", [1.5, 2.5]), values: { dtype: "float32" as const, shape: [2], data: new Float32Array([1.5, 2.5]) } };
    expect(seriesHistogram(decoded, 4)!.counts.length).toBe(4);
  });
});

describe("dashboard polish", () => {
  it("picks the memory unit per value instead of printing tiny MiB", () => {
    const memory = [
      { component: "labels", mean_mib: 9.817e-4, median_mib: 0.5 / 1024 / 1024, p95_mib: 2.5 },
      { component: "backbone", mean_mib: 2048, median_mib: 2.5, p95_mib: 700 },
    ];
    const { el } = mount(makeModel({ payload: payload({ memory }) }));
    (el.querySelector('.vl-sd-tabbtn[data-tab="memory"]') as HTMLElement).click();
    const rows = [...el.querySelectorAll(".vl-sd-table tbody tr")].slice(0, 2).map((tr) => [...tr.children].map((td) => td.textContent));
    expect(rows).toEqual([["labels", "1.0 KiB", "0.5 B", "2.5 MiB"], ["backbone", "2.0 GiB", "2.5 MiB", "700 MiB"]]);
    expect(el.querySelector(".vl-sd-tab")!.textContent).not.toMatch(/e-\d/);
  });

  it("collapses a long list of unpaired keys behind show all", () => {
    const keys = Array.from({ length: 32 }, (_, i) => `scene/snippet/${i}`);
    const p = payload();
    (p as any).pairs = { ...(p as any).pairs, unpaired_count: 40, unpaired_examples: keys };
    const { el } = mount(makeModel({ payload: p }));
    (el.querySelector('.vl-sd-tabbtn[data-tab="components"]') as HTMLElement).click();
    const note = el.querySelector(".vl-sd-pairnote")!;
    const items = () => [...note.querySelectorAll("li")].map((li) => li.textContent);
    expect(items()).toEqual(keys.slice(0, 5));
    const toggle = note.querySelector(".vl-collapsed-toggle") as HTMLButtonElement;
    expect(toggle.textContent).toBe("show all 32");
    toggle.click();
    expect(items()).toEqual([...keys, "… and 8 more not listed"]);
    expect(note.textContent).not.toContain(",");
    toggle.click();
    expect(items()).toHaveLength(5);
  });

  it("reserves each tab label's bold width so the active tab does not move the others", () => {
    const { el } = mount(makeModel({ payload: payload() }));
    for (const b of el.querySelectorAll(".vl-sd-tabbtn")) {
      const label = b.querySelector(".vl-sd-tablabel")!;
      expect(label.getAttribute("data-label")).toBe(b.textContent);
    }
  });
});
