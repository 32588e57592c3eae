import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { colormap } from "../lib/colormap";
import { FakeModel, dataView, stringColumn } from "../lib/fake-model";
import { decodeTable } from "../lib/payload";
import widget, { cellAt, gridLayout, sceneRows, sortOrder, type CoverageModel } from "./coverage_heatmap";

const HOSTILE = "<img src=x onerror=alert(1)>";


interface Scene { id: string; raw: number; store: number; covered: number; missing: number; outside: number; coverage: number }

const SCENES: Scene[] = [
  { id: "scene_000002", raw: 4, store: 4, covered: 2, missing: 2, outside: 2, coverage: 0.5 },
  { id: "scene_000001", raw: 4, store: 4, covered: 4, missing: 0, outside: 0, coverage: 1 },
  { id: HOSTILE, raw: 1, store: 0, covered: 0, missing: 1, outside: 0, coverage: 0 },
  { id: "scene_000003", raw: 0, store: 3, covered: 0, missing: 0, outside: 3, coverage: NaN },
];

function scenesTable(scenes: Scene[]) {
  const i32 = (f: (s: Scene) => number) => dataView(new Int32Array(scenes.map(f)));
  return { $table: { length: scenes.length, columns: [
    stringColumn("scene_id", scenes.map((s) => s.id)),
    { name: "dataset_snippets", dtype: "int32", data: i32((s) => s.raw) },
    { name: "store_snippets", dtype: "int32", data: i32((s) => s.store) },
    { name: "covered_snippets", dtype: "int32", data: i32((s) => s.covered) },
    { name: "missing_in_store", dtype: "int32", data: i32((s) => s.missing) },
    { name: "outside_dataset", dtype: "int32", data: i32((s) => s.outside) },
    { name: "coverage", dtype: "float64", data: dataView(new Float64Array(scenes.map((s) => s.coverage))) },
  ] } };
}

function coverage(scenes = SCENES) {
  return {
    totals: {
      store_dir: "/s", raw_dataset_dir: "/r", tar_shards_scanned: 3, tar_shards_found: 3, members_scanned: 40,
      dataset_scenes: 3, store_scenes: 3, dataset_snippets: 9, store_snippets: 11, covered_snippets: 6,
      missing_in_store: 3, outside_dataset: 5, coverage: 6 / 9, unparseable_members: 2,
      unparseable_examples: ["shard-0.tar: README_0.txt"],
    },
    scenes: scenesTable(scenes), missing_examples: [], outside_examples: [],
  };
}

function makeModel(state: Partial<CoverageModel> = {}) {
  return new FakeModel<CoverageModel>({
    store_path: "/s", raw_dataset_dir: "/r", coverage: {}, selected_scene: "", replacement: { replaced: false },
    acquisition: { id: "", state: "idle", step: "", done: 0, total: 0, message: "" },
    status: "idle", error: "", error_traceback: "", ...state,
  });
}

let fills: { style: string; x: number; y: number }[] = [];
let strokes: { style: string; x: number; y: number; dashed: boolean }[] = [];

beforeEach(() => {
  fills = [];
  strokes = [];
  let dash: number[] = [];
  const ctx: any = {
    fillStyle: "", strokeStyle: "", lineWidth: 1,
    setTransform() {}, clearRect() { strokes = []; },
    setLineDash(d: number[]) { dash = d; },
    strokeRect(x: number, y: number) { strokes.push({ style: ctx.strokeStyle, x, y, dashed: dash.length > 0 }); },
    fillRect(x: number, y: number) { fills.push({ style: ctx.fillStyle, x, y }); },
  };
  HTMLCanvasElement.prototype.getContext = vi.fn(() => ctx) as any;
});
afterEach(() => { document.body.replaceChildren(); });

function mount(model: FakeModel<CoverageModel>) {
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model: model as any, el } as any);
  return { el, cleanup };
}

function rgb(t: number) {
  const [r, g, b] = colormap("viridis").rgb(t);
  return `rgb(${r},${g},${b})`;
}

describe("sorting and layout", () => {
  const rows = sceneRows(decodeTable(scenesTable(SCENES)));

  it("sorts by coverage with undefined coverage last in both directions", () => {
    const ids = (o: Uint32Array) => Array.from(o, (i) => rows.sceneId(i));
    expect(ids(sortOrder(rows, "coverage", false))).toEqual([HOSTILE, "scene_000002", "scene_000001", "scene_000003"]);
    expect(ids(sortOrder(rows, "coverage", true))).toEqual(["scene_000001", "scene_000002", HOSTILE, "scene_000003"]);
    expect(ids(sortOrder(rows, "scene_id", false))).toEqual([HOSTILE, "scene_000001", "scene_000002", "scene_000003"]);
    // Ties (raw 4 and 4) break by scene id.
    expect(ids(sortOrder(rows, "dataset_snippets", true)).slice(0, 2)).toEqual(["scene_000001", "scene_000002"]);
  });

  it("shrinks cells to fit many scenes and maps pixels back to cells", () => {
    const small = gridLayout(10, 700);
    expect(small.cell).toBe(20);
    const medium = gridLayout(5000, 700, 420);
    expect(medium.height).toBeLessThanOrEqual(420);
    expect(medium.cols * medium.rows).toBeGreaterThanOrEqual(5000);
    // 100,000 scenes stop at 2 px cells; the wrapper scrolls rather than cells vanishing.
    const big = gridLayout(100000, 700, 420);
    expect(big.cell).toBe(2);
    expect(big.cols * big.rows).toBeGreaterThanOrEqual(100000);
    expect(cellAt(small, 0, 0, 10)).toBe(0);
    expect(cellAt(small, 21, 0, 10)).toBe(1);
    expect(cellAt(small, 20.7, 0, 10)).toBe(-1); // the gap between cells
    expect(cellAt(small, 0, 21, 10)).toBe(-1); // second row is empty (10 < cols)
  });
});

describe("coverage heatmap", () => {
  it("shows scan progress and cancels the scan by its id", () => {
    const model = makeModel({ acquisition: { id: "scan-1", state: "running", step: "scanning raw tar headers", done: 2, total: 5, message: "" } });
    const { el } = mount(model);
    expect(el.querySelector(".vl-progress-label")!.textContent).toBe("scanning raw tar headers: tar 2 / 5");
    expect((el.querySelector(".vl-progress") as HTMLProgressElement).value).toBe(2);
    expect(el.querySelector(".vl-cov-empty")!.textContent).toContain("Scanning");
    (el.querySelector(".vl-cov-cancel") as HTMLButtonElement).click();
    expect(model.sent[0].content).toEqual({ kind: "cancel", id: "scan-1" });
  });

  it("draws one cell per scene coloured by coverage, grey where undefined", () => {
    const { el } = mount(makeModel({ coverage: coverage() }));
    expect(fills.map((f) => f.style)).toEqual([rgb(0), rgb(0.5), rgb(1), "rgb(128,128,128)"]);
    expect(el.querySelector(".vl-cov-totals")!.textContent).toContain("66.7%");
    expect(el.querySelector(".vl-cov-totals")!.textContent).toContain("2 unparseable members");
    expect(el.querySelector(".vl-cov-gradient")!.getAttribute("style")).toContain("linear-gradient");
  });

  it("re-sorts when the sort key or direction changes", () => {
    const { el } = mount(makeModel({ coverage: coverage() }));
    const sel = el.querySelector(".vl-cov-sort") as HTMLSelectElement;
    sel.value = "scene_id";
    sel.dispatchEvent(new Event("change"));
    const firstRow = () => el.querySelector(".vl-cov-row")!.getAttribute("data-scene");
    expect(firstRow()).toBe(HOSTILE);
    (el.querySelector(".vl-cov-dir") as HTMLButtonElement).click();
    expect(firstRow()).toBe("scene_000003");
    expect(el.querySelector(".vl-cov-dir")!.textContent).toBe("descending");
  });

  it("shows the numbers on hover and lists a clicked scene's snippets as text", () => {
    const model = makeModel({ coverage: coverage() });
    const { el } = mount(model);
    const canvas = el.querySelector("canvas")!;
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: 3, clientY: 3 }));
    const tip = el.querySelector(".vl-cov-tooltip") as HTMLElement;
    expect(tip.hidden).toBe(false);
    expect(tip.textContent).toContain(HOSTILE);
    expect(tip.textContent).toContain("missing 1 · outside 0");
    expect(tip.querySelector("img")).toBeNull();

    canvas.dispatchEvent(new MouseEvent("click", { clientX: 21 + 3, clientY: 3 }));
    const cmd = model.sent.at(-1)!.content;
    expect(cmd).toMatchObject({ kind: "command", name: "scene_snippets", args: { scene_id: "scene_000002" } });
    expect(model.get("selected_scene")).toBe("scene_000002");
    model.receive({ kind: "progress", id: cmd.id, done: 1, total: 3 });
    expect((el.querySelector(".vl-cov-detail progress") as HTMLProgressElement).value).toBe(1);
    model.receive({ kind: "result", id: cmd.id, data: {
      scene_id: "scene_000002", dataset_snippets: 4, store_snippets: 4, covered_snippets: 2, coverage: 0.5,
      missing_in_store: ["snippet_000005", HOSTILE], outside_dataset: ["snippet_000004"], source: "record",
    } });
    return Promise.resolve().then(() => Promise.resolve()).then(() => {
      const detail = el.querySelector(".vl-cov-detail")!;
      const missing = [...detail.querySelectorAll(".vl-cov-missing li")].map((li) => li.textContent);
      const outside = [...detail.querySelectorAll(".vl-cov-outside li")].map((li) => li.textContent);
      expect(missing).toEqual(["snippet_000005", HOSTILE]);
      expect(outside).toEqual(["snippet_000004"]);
      expect(detail.querySelector("img")).toBeNull();
      expect(detail.textContent).toContain("coverage 50.0%");
    });
  });

  it("is keyboard reachable: arrows move the cursor, Enter selects", () => {
    const model = makeModel({ coverage: coverage() });
    const { el } = mount(model);
    const canvas = el.querySelector("canvas")!;
    canvas.focus();
    canvas.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
    canvas.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
    expect(el.querySelector(".vl-cov-live")!.textContent).toContain("scene_000001: coverage 100.0%");
    canvas.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter" }));
    expect(model.sent.at(-1)!.content.args).toEqual({ scene_id: "scene_000001" });
    const row = el.querySelector('.vl-cov-row[data-scene="scene_000003"]') as HTMLElement;
    expect(row.getAttribute("tabindex")).toBe("0");
    row.dispatchEvent(new KeyboardEvent("keydown", { key: " " }));
    expect(model.sent.at(-1)!.content.args).toEqual({ scene_id: "scene_000003" });
  });

  it("downloads the CSV the kernel exported", async () => {
    const model = makeModel({ coverage: coverage() });
    const { el } = mount(model);
    const created: Blob[] = [];
    URL.createObjectURL = vi.fn((b: Blob) => { created.push(b); return "blob:x"; }) as any;
    URL.revokeObjectURL = vi.fn();
    const click = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(() => {});
    (el.querySelector(".vl-cov-csv") as HTMLButtonElement).click();
    const cmd = model.sent.at(-1)!.content;
    expect(cmd.name).toBe("csv");
    model.receive({ kind: "result", id: cmd.id, data: { filename: "store-coverage.csv", text: "scene_id\nscene_000001\n" } });
    await new Promise((r) => setTimeout(r, 0));
    expect(click).toHaveBeenCalled();
    const text = await new Promise<string>((resolve) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result));
      reader.readAsText(created[0]);
    });
    expect(text).toBe("scene_id\nscene_000001\n");
    click.mockRestore();
  });

  it("shows the replacement banner as text", () => {
    const model = makeModel({ coverage: coverage() });
    const { el } = mount(model);
    model.kernelSet("replacement", { replaced: true, message: `store ${HOSTILE} replaced` });
    const banner = el.querySelector(".vl-cov-replaced") as HTMLElement;
    expect(banner.hidden).toBe(false);
    expect(banner.textContent).toContain(HOSTILE);
    expect(banner.querySelector("img")).toBeNull();
  });

  it("cleans up its listeners", () => {
    const model = makeModel({ coverage: coverage() });
    const { cleanup } = mount(model);
    cleanup();
    expect(model.listenerCount("change:coverage")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });

  it("draws the selection and the keyboard cursor differently, and the cursor follows the selection when re-sorted", () => {
    const model = makeModel({ coverage: coverage() });
    const { el } = mount(model);
    const canvas = el.querySelector("canvas")!;
    // Select scene_000001 (position 2 when sorted by coverage ascending), then re-sort.
    canvas.dispatchEvent(new MouseEvent("click", { clientX: 2 * 21 + 3, clientY: 3 }));
    expect(model.get("selected_scene")).toBe("scene_000001");
    canvas.focus();
    const sel = el.querySelector(".vl-cov-sort") as HTMLSelectElement;
    sel.value = "scene_id";
    sel.dispatchEvent(new Event("change"));
    // By scene id scene_000001 moved to position 1; cursor and selection are both there.
    const solid = strokes.filter((s) => !s.dashed);
    const dashed = strokes.filter((s) => s.dashed);
    expect(solid.length).toBeGreaterThan(0);
    expect(dashed.length).toBe(1);
    const cellOf = (s: { x: number }) => Math.floor(s.x / 21);
    expect(new Set(solid.map(cellOf))).toEqual(new Set([1]));
    expect(cellOf(dashed[0])).toBe(1);
    // Moving the cursor away leaves a dashed ring on another cell and the solid one in place.
    canvas.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
    expect(strokes.filter((s) => s.dashed).map(cellOf)).toEqual([2]);
    expect(new Set(strokes.filter((s) => !s.dashed).map(cellOf))).toEqual(new Set([1]));
    expect(el.querySelector(".vl-cov-legend")!.textContent).toContain("keyboard cursor");
  });

  it("lists member names that are not UTF-8 with their tar, collapsed", () => {
    const cov = coverage();
    const odd = Array.from({ length: 7 }, (_, i) => `shard-${i}.tar: sc\\xe8ne/snippet_${i}.rgb.jpg`);
    (cov.totals as any).non_utf8_members = 9;
    (cov.totals as any).non_utf8_examples = odd;
    const { el } = mount(makeModel({ coverage: cov }));
    const totals = el.querySelector(".vl-cov-totals")!;
    expect(totals.textContent).toContain("9 member names not valid UTF-8");
    const box = [...totals.querySelectorAll(".vl-cov-unparseable")].at(-1)!;
    expect([...box.querySelectorAll("li")].map((li) => li.textContent)).toEqual(odd.slice(0, 3));
    (box.querySelector(".vl-collapsed-toggle") as HTMLButtonElement).click();
    const items = [...box.querySelectorAll("li")].map((li) => li.textContent);
    expect(items.slice(0, 7)).toEqual(odd);
    expect(items[7]).toBe("… and 2 more not listed");
    expect(items[0]).toContain("shard-0.tar: sc\\xe8ne");
  });
});
