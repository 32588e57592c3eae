import { describe, expect, it } from "vitest";
import { FakeModel, dataView } from "../lib/fake-model";
import { createModuleTable } from "../lib/module-table";
import widget from "./module_table";

/** Build the payload module_table_payload() sends, from paths (pre-order). */
function modulesPayload(paths: string[], types: string[], typeOf: (p: string) => number) {
  const n = paths.length;
  const index = new Map(paths.map((p, i) => [p, i]));
  const parent = new Int32Array(n).fill(-1);
  const depth = new Int32Array(n);
  paths.forEach((p, i) => {
    if (p === "<root>") return;
    const dot = p.lastIndexOf(".");
    parent[i] = dot >= 0 ? index.get(p.slice(0, dot))! : 0;
    depth[i] = p.split(".").length;
  });
  const end = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    let j = i + 1;
    while (j < n && depth[j] > depth[i]) j++;
    end[i] = j;
  }
  const enc = new TextEncoder();
  const bytes = paths.map((p) => enc.encode(p));
  const offsets = new Uint32Array(n + 1);
  bytes.forEach((b, i) => { offsets[i + 1] = offsets[i] + b.length; });
  const data = new Uint8Array(offsets[n]);
  bytes.forEach((b, i) => data.set(b, offsets[i]));
  const num = (name: string, dtype: string, arr: ArrayBufferView) => ({ name, dtype, data: dataView(arr) });
  const params = Float64Array.from(paths, (_, i) => (i * 10) % 70);
  return {
    $table: {
      length: n,
      columns: [
        { name: "path", dtype: "string", offsets: dataView(offsets), data: dataView(data) },
        num("type", "int32", Int32Array.from(paths, typeOf)),
        num("direct_parameters", "float64", params),
        num("subtree_parameters", "float64", Float64Array.from(paths, (_, i) => params.slice(i, end[i]).reduce((a, b) => a + b, 0))),
        num("trainable_parameters", "float64", params.map((v) => v / 2)),
        num("direct_buffers", "float64", new Float64Array(n)),
        num("training", "bool", Uint8Array.from(paths, (_, i) => i % 2)),
        num("parent", "int32", parent),
        num("depth", "int32", depth),
        num("subtree_end", "int32", end),
      ],
    },
    types,
  };
}

const PATHS = ["<root>", "enc", "enc.0", "enc.0.attn", "enc.1", "head", "head.fc", "<img src=x onerror=__pwned=1>"];
const TYPES = ["m.Model", "torch.nn.Linear", "torch.nn.Sequential"];

function setup(selected: string[] = [], paths = PATHS) {
  const payload = modulesPayload(paths, TYPES, (p) => (p === "<root>" ? 0 : p.includes(".") ? 1 : 2));
  const model = new FakeModel<any>({
    modules: { $table: payload.$table },
    model_summary: { model_type: "m.Model", total_parameters: 1234, trainable_parameters: 617, total_buffers: 0, module_count: paths.length, types: TYPES },
    selected_paths: selected,
    tree_view: true,
    status: "idle", error: "", error_traceback: "",
  });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const names = (el: HTMLElement) =>
  Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
    .sort((a, b) => Number(a.dataset.row) - Number(b.dataset.row))
    .map((r) => r.querySelector(".vl-mt-name")!.textContent);

function clickRow(el: HTMLElement, name: string, init: MouseEventInit = {}) {
  const row = Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
    .find((r) => r.querySelector(".vl-mt-name")!.textContent === name)!;
  row.querySelector(".vl-mt-name")!.dispatchEvent(new MouseEvent("click", { bubbles: true, ...init }));
  return row;
}

describe("module table widget", () => {
  it("shows the tree with totals and hostile names as text", () => {
    const { el } = setup();
    expect(names(el)).toEqual(["<root>", "enc", "0", "attn", "1", "head", "fc", "<img src=x onerror=__pwned=1>"]);
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector(".vl-mt-totals")!.textContent).toContain("1,234 parameters");
    expect(el.querySelector(".vl-mt-totals")!.textContent).toContain("8 modules");
  });

  it("parent rows show their subtree total beside their own count", () => {
    const { el } = setup();
    const cell = (name: string, key: string) => Array.from(el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
      .find((r) => r.querySelector(".vl-mt-name")!.textContent === name)!.querySelector(`[data-key="${key}"]`)!.textContent;
    // params are (i * 10) % 70 in path order: enc=10, enc.0=20, enc.0.attn=30, enc.1=40
    expect(cell("enc", "direct_parameters")).toBe("10");
    expect(cell("enc", "subtree_parameters")).toBe("100");
    expect(cell("0", "subtree_parameters")).toBe("50");
    expect(cell("attn", "subtree_parameters")).toBe(""); // a leaf: its own count says it all
    expect(el.querySelector('[data-key="subtree_parameters"]')!.getAttribute("title")).toContain("every module below it");
  });

  it("says which view is shown with two labelled states and keeps the toolbar the same", () => {
    const { el, model } = setup();
    const tree = el.querySelector<HTMLButtonElement>(".vl-mt-view-tree")!;
    const flat = el.querySelector<HTMLButtonElement>(".vl-mt-view-flat")!;
    const toolbar = () => Array.from(el.querySelector(".vl-mt-toolbar")!.children).map((c) => c.className);
    const before = toolbar();
    expect(el.querySelector(".vl-mt-view")!.getAttribute("aria-label")).toBe("View");
    expect([tree.textContent, tree.getAttribute("aria-pressed"), flat.textContent, flat.getAttribute("aria-pressed")]).toEqual(["Tree", "true", "Flat", "false"]);
    flat.click();
    expect(model.get("tree_view")).toBe(false);
    expect([tree.getAttribute("aria-pressed"), flat.getAttribute("aria-pressed")]).toEqual(["false", "true"]);
    expect([tree.textContent, flat.textContent]).toEqual(["Tree", "Flat"]);
    expect(toolbar()).toEqual(before);
    flat.click(); // pressing the shown state again changes nothing
    expect(model.get("tree_view")).toBe(false);
    tree.click();
    expect(model.get("tree_view")).toBe(true);
  });

  it("selects by click, ctrl-click and shift-click and syncs selected_paths", () => {
    const { el, model } = setup();
    clickRow(el, "enc");
    expect(model.get("selected_paths")).toEqual(["enc"]);
    clickRow(el, "1", { shiftKey: true });
    expect(model.get("selected_paths")).toEqual(["enc", "enc.0", "enc.0.attn", "enc.1"]);
    clickRow(el, "fc", { ctrlKey: true });
    expect(model.get("selected_paths")).toEqual(["enc", "enc.0", "enc.0.attn", "enc.1", "head.fc"]);
    expect(model.saved).toBeGreaterThan(2);
    expect(el.querySelectorAll(".vl-vt-row.vl-selected").length).toBe(5);
    clickRow(el, "fc");
    expect(model.get("selected_paths")).toEqual(["head.fc"]);
  });

  it("follows the file-browser click rule and shows it, also after a selection from Python", () => {
    const { el, model } = setup();
    expect(el.querySelector(".vl-mt-click-rule")!.textContent).toBe(
      "Click selects one module · Ctrl/⌘-click adds or removes one · Shift-click selects a range (Ctrl/⌘+Shift adds it)");
    // Python selected three modules; ctrl-click adds to them, a plain click replaces them and says so.
    model.kernelSet("selected_paths", ["enc", "enc.1", "head"]);
    clickRow(el, "fc", { metaKey: true });
    expect(model.get("selected_paths")).toEqual(["enc", "enc.1", "head", "head.fc"]);
    clickRow(el, "fc", { ctrlKey: true });
    expect(model.get("selected_paths")).toEqual(["enc", "enc.1", "head"]);
    clickRow(el, "0");
    expect(model.get("selected_paths")).toEqual(["enc.0"]);
    expect(el.querySelector(".vl-mt-replaced")!.textContent).toBe("(replaced 3; Ctrl/⌘-click adds)");
    // Shift-click extends from the clicked row; with Ctrl/⌘ the range is added.
    clickRow(el, "1", { shiftKey: true });
    expect(model.get("selected_paths")).toEqual(["enc.0", "enc.0.attn", "enc.1"]);
    expect(el.querySelector(".vl-mt-replaced")).toBeNull();
    clickRow(el, "head", { ctrlKey: true });
    clickRow(el, "fc", { shiftKey: true, ctrlKey: true });
    expect(model.get("selected_paths")).toEqual(["enc.0", "enc.0.attn", "enc.1", "head", "head.fc"]);
    // A selection set from Python is where a shift-click range starts.
    model.kernelSet("selected_paths", ["enc"]);
    clickRow(el, "1", { shiftKey: true });
    expect(model.get("selected_paths")).toEqual(["enc", "enc.0", "enc.0.attn", "enc.1"]);
  });

  it("follows selected_paths set by the kernel and selects subtrees", () => {
    const { el, model } = setup(["head"]);
    expect(el.querySelectorAll(".vl-selected").length).toBe(1);
    model.kernelSet("selected_paths", ["enc.1", "head.fc"]);
    const sel = Array.from(el.querySelectorAll(".vl-vt-row.vl-selected .vl-mt-name")).map((n) => n.textContent);
    expect(sel.sort()).toEqual(["1", "fc"]);
    expect(el.querySelector(".vl-mt-selected-count")!.textContent).toContain("2");
    clickRow(el, "enc");
    (el.querySelector(".vl-mt-select-subtree") as HTMLButtonElement).click();
    expect(model.get("selected_paths")).toEqual(["enc", "enc.0", "enc.0.attn", "enc.1"]);
    (el.querySelector(".vl-mt-clear") as HTMLButtonElement).click();
    expect(model.get("selected_paths")).toEqual([]);
  });

  it("collapses and expands subtrees by twisty, keys and buttons", () => {
    const { el } = setup();
    const row = clickRow(el, "enc");
    (row.querySelector(".vl-mt-twisty") as HTMLElement).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(names(el)).toEqual(["<root>", "enc", "head", "fc", "<img src=x onerror=__pwned=1>"]);
    const viewport = el.querySelector(".vl-vt-viewport")!;
    viewport.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
    expect(names(el)).toContain("attn");
    (el.querySelector(".vl-mt-collapse-all") as HTMLButtonElement).click();
    expect(names(el)).toEqual(["<root>", "enc", "head", "<img src=x onerror=__pwned=1>"]);
    (el.querySelector(".vl-mt-expand-all") as HTMLButtonElement).click();
    expect(names(el).length).toBe(8);
  });

  it("filters by text (revealing ancestors) and by type, flat or tree", () => {
    const { el } = setup();
    const search = el.querySelector(".vl-mt-search") as HTMLInputElement;
    search.value = "ATTN";
    search.dispatchEvent(new Event("input"));
    expect(names(el)).toEqual(["<root>", "enc", "0", "attn"]);
    expect(el.querySelectorAll(".vl-mt-context").length).toBe(3);
    (el.querySelector(".vl-mt-view-flat") as HTMLButtonElement).click();
    expect(names(el)).toEqual(["enc.0.attn"]);
    search.value = "";
    search.dispatchEvent(new Event("input"));
    const select = el.querySelector(".vl-mt-type-filter") as HTMLSelectElement;
    expect(Array.from(select.options).map((o) => o.textContent)).toEqual(["All types", "Model (1)", "Linear (4)", "Sequential (3)"]);
    select.value = "2";
    select.dispatchEvent(new Event("change"));
    expect(names(el)).toEqual(["enc", "head", "<img src=x onerror=__pwned=1>"]);
  });

  it("sorts siblings in tree mode and all rows in flat mode", () => {
    const { el, model } = setup();
    const header = el.querySelector('[data-key="direct_parameters"] button') as HTMLButtonElement;
    header.click(); // descending params (0 10 20 30 40 50 60 0), siblings under their parent
    expect(names(el)).toEqual(["<root>", "head", "fc", "enc", "1", "0", "attn", "<img src=x onerror=__pwned=1>"]);
    model.kernelSet("tree_view", false);
    expect(names(el)).toEqual(["head.fc", "head", "enc.1", "enc.0.attn", "enc.0", "enc", "<root>", "<img src=x onerror=__pwned=1>"]);
    header.click(); // ascending
    expect(names(el)[0]).toBe("<root>");
    header.click(); // unsorted
    expect(names(el)).toEqual(PATHS);
  });

  it("keyboard: space toggles, shift+arrow extends the selection", () => {
    const { el, model } = setup();
    const viewport = el.querySelector(".vl-vt-viewport")!;
    const key = (k: string, shiftKey = false) => viewport.dispatchEvent(new KeyboardEvent("keydown", { key: k, shiftKey }));
    key("ArrowDown");
    key("ArrowDown");
    key(" ");
    expect(model.get("selected_paths")).toEqual(["enc"]);
    key("ArrowDown", true);
    key("ArrowDown", true);
    expect(model.get("selected_paths")).toEqual(["enc", "enc.0", "enc.0.attn"]);
  });

  it("cleans up its listeners", () => {
    const { model, cleanup } = setup();
    expect(model.listenerCount("change:selected_paths")).toBe(1);
    cleanup();
    expect(model.listenerCount("change:selected_paths")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });

  it("is reusable as a component on another model", () => {
    const { model } = setup();
    const mt = createModuleTable(model as any, { title: null, height: 100 });
    expect(mt.view().length).toBe(8);
    mt.dispose();
  });
});
