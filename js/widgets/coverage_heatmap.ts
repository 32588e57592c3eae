// CoverageHeatmapWidget front end: per-scene raw-dataset coverage of one VIN store.
//
// The kernel scans the raw tar headers in the background and publishes progress in the
// `acquisition` traitlet and the result in `coverage` (totals + a binary per-scene table).
// Scenes are drawn as cells on one canvas (a raw dataset can hold 100,000 scenes, too
// many for DOM cells), coloured by coverage through a perceptual LUT; NaN coverage (no raw
// snippet of the scene) is grey, never the colour of 0%. Hover or the keyboard cursor
// shows the numbers; a click, Enter or Space asks the kernel for the scene's missing and
// outside snippet ids. Sorting is a view order; every number comes from the engine.
import type { AnyModel, RenderProps } from "@anywidget/types";
import "../lib/theme.css";
import "./coverage_heatmap.css";
import { BAD_RGB, colormap, gradientCss, lutIndex, type ColormapName } from "../lib/colormap";
import { collapsedList, downloadText, h, replaceChildren } from "../lib/dom";
import { decode, formatNumber, type Table } from "../lib/payload";
import { CommandClient, type CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";
import { mountRoot, onThemeChange, themeVar } from "../lib/theme";

export type SortKey = "coverage" | "scene_id" | "dataset_snippets" | "store_snippets" | "missing_in_store" | "outside_dataset";

export const SORT_LABELS: Record<SortKey, string> = {
  coverage: "coverage",
  scene_id: "scene id",
  dataset_snippets: "snippets (raw)",
  store_snippets: "snippets (store)",
  missing_in_store: "missing from store",
  outside_dataset: "outside raw data",
};

const SEQUENTIAL: ColormapName[] = ["viridis", "magma"];
const PAGE = 100;

export interface CoverageModel {
  store_path: string;
  raw_dataset_dir: string;
  acquisition: { id: string; state: string; step: string; done: number; total: number; message: string };
  coverage: Record<string, unknown>;
  replacement: { replaced?: boolean; message?: string };
  selected_scene: string;
  status: string;
  error: string;
  error_traceback: string;
}

export type NumericKey = Exclude<SortKey, "scene_id"> | "covered_snippets";

export interface SceneRows {
  length: number;
  sceneId(i: number): string;
  num(key: NumericKey, i: number): number;
}

/** Typed access to the per-scene table the kernel sends (coverage_heatmap.py:coverage_payload). */
export function sceneRows(table: Table): SceneRows {
  const ids = table.column("scene_id");
  if (ids.kind !== "string") throw new Error("scene_id column must be strings");
  const cols = new Map<string, ArrayLike<number>>();
  for (const key of ["dataset_snippets", "store_snippets", "covered_snippets", "missing_in_store", "outside_dataset", "coverage"]) {
    const c = table.column(key);
    if (c.kind !== "numeric") throw new Error(`${key} column must be numeric`);
    cols.set(key, c.values);
  }
  const cache: (string | undefined)[] = new Array(table.length);
  return {
    length: table.length,
    sceneId: (i) => (cache[i] ??= ids.get(i)),
    num: (key, i) => Number(cols.get(key)![i]),
  };
}

/**
 * Row order for a sort key. NaN coverage (undefined ratio) always sorts last; ties break
 * by scene id so the order is stable across refreshes.
 */
export function sortOrder(rows: SceneRows, key: SortKey, descending: boolean): Uint32Array {
  const order = new Uint32Array(rows.length);
  for (let i = 0; i < rows.length; i++) order[i] = i;
  const byId = (a: number, b: number) => {
    const x = rows.sceneId(a);
    const y = rows.sceneId(b);
    return x < y ? -1 : x > y ? 1 : 0;
  };
  const sign = descending ? -1 : 1;
  let cmp: (a: number, b: number) => number;
  if (key === "scene_id") {
    cmp = (a, b) => sign * byId(a, b);
  } else {
    cmp = (a, b) => {
      const x = rows.num(key, a);
      const y = rows.num(key, b);
      const xn = Number.isNaN(x);
      const yn = Number.isNaN(y);
      if (xn || yn) return xn && yn ? byId(a, b) : xn ? 1 : -1;
      return x !== y ? sign * (x - y) : byId(a, b);
    };
  }
  return order.sort(cmp);
}

export interface GridLayout {
  cell: number;
  gap: number;
  cols: number;
  rows: number;
  width: number;
  height: number;
}

/** Square cells filling `width`; cells shrink (20 px down to 2 px) so the grid fits `maxHeight`. */
export function gridLayout(n: number, width: number, maxHeight = 420): GridLayout {
  const w = Math.max(40, Math.floor(width));
  let cell = 20;
  for (;;) {
    const gap = cell >= 6 ? 1 : 0;
    const cols = Math.max(1, Math.floor((w + gap) / (cell + gap)));
    const rows = Math.max(1, Math.ceil(n / cols));
    const height = rows * (cell + gap);
    if (height <= maxHeight || cell <= 2) {
      return { cell, gap, cols, rows, width: Math.min(cols, Math.max(1, n)) * (cell + gap), height };
    }
    cell -= 1;
  }
}

/** Position (index into the sort order) under a pixel, or -1. */
export function cellAt(layout: GridLayout, x: number, y: number, n: number): number {
  const step = layout.cell + layout.gap;
  if (x < 0 || y < 0) return -1;
  const col = Math.floor(x / step);
  const row = Math.floor(y / step);
  if (col >= layout.cols || x - col * step >= layout.cell + 0.5) return -1;
  const pos = row * layout.cols + col;
  return pos < n ? pos : -1;
}

function pct(v: number): string {
  return Number.isFinite(v) ? `${(100 * v).toFixed(1)}%` : "n/a";
}

function render({ model, el }: RenderProps<CoverageModel>): () => void {
  const client = new CommandClient(model as unknown as AnyModel);
  const status = statusView(model as unknown as AnyModel);
  const ui = { sort: "coverage" as SortKey, desc: false, cmap: "viridis" as ColormapName, cursor: 0, page: 0, hover: -1 };
  let rows: SceneRows | null = null;
  let order: Uint32Array = new Uint32Array(0);
  let layout: GridLayout = gridLayout(0, 720);
  let detailReq: (Promise<any> & { id: string }) | null = null;

  // ---- toolbar ---------------------------------------------------------------------------
  const rescanBtn = h("button", { class: "vl-button vl-primary vl-cov-rescan", type: "button", title: "Scan the raw tar headers again" }, "Rescan");
  const cancelBtn = h("button", { class: "vl-button vl-cov-cancel", type: "button", hidden: true }, "Cancel");
  const sortSel = h("select", { class: "vl-input vl-cov-sort", "aria-label": "Sort scenes by" },
    ...(Object.keys(SORT_LABELS) as SortKey[]).map((k) => h("option", { value: k }, SORT_LABELS[k])));
  const dirBtn = h("button", { class: "vl-button vl-cov-dir", type: "button", title: "Sort direction (click to reverse)" }, "ascending");
  const cmapSel = h("select", { class: "vl-input vl-cov-cmap", "aria-label": "Colour scale" },
    ...SEQUENTIAL.map((c) => h("option", { value: c }, c)));
  const csvBtn = h("button", { class: "vl-button vl-cov-csv", type: "button", disabled: true, title: "Download the per-scene table as CSV" }, "Download CSV");
  const toolbar = h("div", { class: "vl-toolbar" },
    h("span", { class: "vl-title" }, "Raw-dataset coverage"),
    h("label", { class: "vl-muted" }, "sort ", sortSel), dirBtn,
    h("label", { class: "vl-muted" }, "colours ", cmapSel),
    h("span", { class: "vl-cov-spacer" }), csvBtn, rescanBtn, cancelBtn);
  const paths = h("div", { class: "vl-muted vl-cov-paths" });
  const banner = h("div", { class: "vl-cov-replaced", role: "alert", hidden: true });
  const totalsEl = h("div", { class: "vl-cov-totals" });
  const legend = h("div", { class: "vl-cov-legend" });
  const canvas = h("canvas", {
    class: "vl-cov-canvas", tabindex: 0, role: "img",
    "aria-label": "Coverage per scene. Arrow keys move between scenes, Enter or Space lists a scene's missing and outside snippets.",
  });
  const tooltip = h("div", { class: "vl-cov-tooltip", role: "tooltip", hidden: true });
  const live = h("div", { class: "vl-cov-live", "aria-live": "polite" });
  const gridWrap = h("div", { class: "vl-cov-gridwrap" }, canvas, tooltip);
  const detail = h("section", { class: "vl-cov-detail", "aria-live": "polite", "aria-label": "Selected scene" });
  const tableWrap = h("div", { class: "vl-cov-tablewrap" });
  const body = h("div", { class: "vl-cov-body" }, totalsEl, legend, gridWrap, live, h("div", { class: "vl-cov-lower" }, detail, tableWrap));
  const empty = h("div", { class: "vl-muted vl-cov-empty" });
  const root = h("div", { class: "vl-root vl-cov" }, toolbar, paths, status.el, banner, empty, body);
  const stopScheme = mountRoot(el, root);

  // ---- actions ---------------------------------------------------------------------------
  rescanBtn.addEventListener("click", () => {
    client.request("rescan").catch((err: CommandError) => {
      if (!err.cancelled && !model.get("error")) status.showError(err.message, err.traceback);
    });
  });
  cancelBtn.addEventListener("click", () => {
    const id = model.get("acquisition")?.id;
    if (id) client.cancel(id);
  });
  sortSel.addEventListener("change", () => { ui.sort = sortSel.value as SortKey; resort(); });
  dirBtn.addEventListener("click", () => { ui.desc = !ui.desc; resort(); });
  cmapSel.addEventListener("change", () => { ui.cmap = cmapSel.value as ColormapName; renderLegend(); draw(); });
  csvBtn.addEventListener("click", async () => {
    csvBtn.disabled = true;
    try {
      const out = await client.request<{ filename: string; text: string }>("csv");
      downloadText(out.filename, out.text);
    } catch (err) {
      const e = err as CommandError;
      status.showError(e.message, e.traceback);
    } finally {
      csvBtn.disabled = !rows;
    }
  });

  function selectScene(sceneId: string) {
    if (!sceneId) return;
    if (detailReq) client.cancel(detailReq.id);
    model.set("selected_scene", sceneId);
    model.save_changes();
    const progress = h("progress", { class: "vl-progress", max: 1 });
    replaceChildren(detail, h("h4", {}, "Scene ", h("span", { class: "vl-mono" }, sceneId)), h("div", { class: "vl-muted" }, "Listing snippets… "), progress);
    const req = client.request("scene_snippets", { scene_id: sceneId }, {
      onProgress: (done, total) => { progress.max = Math.max(1, total); progress.value = done; },
    });
    detailReq = req;
    req.then((d) => { if (detailReq === req) renderDetail(d); })
      .catch((err: CommandError) => {
        if (detailReq !== req || err.cancelled) return;
        replaceChildren(detail, h("h4", {}, "Scene ", h("span", { class: "vl-mono" }, sceneId)), h("div", { class: "vl-error" }, err.message));
      })
      .finally(() => { if (detailReq === req) detailReq = null; });
    draw();
  }

  function snippetList(title: string, cls: string, ids: string[]): HTMLElement {
    const shown = ids.slice(0, 500);
    return h("div", { class: `vl-cov-list ${cls}` },
      h("h5", {}, `${title} (${formatNumber(ids.length)})`),
      ids.length
        ? h("ul", { class: "vl-mono" }, ...shown.map((s) => h("li", {}, s)), ids.length > shown.length ? h("li", { class: "vl-muted" }, `… and ${formatNumber(ids.length - shown.length)} more (export or call scene_snippets() in Python)`) : null)
        : h("div", { class: "vl-muted" }, "none"));
  }

  function renderDetail(d: any) {
    replaceChildren(detail,
      h("h4", {}, "Scene ", h("span", { class: "vl-mono vl-cov-detail-id" }, String(d.scene_id))),
      h("div", { class: "vl-muted" },
        `coverage ${pct(d.coverage === null ? NaN : d.coverage)} · raw ${formatNumber(d.dataset_snippets)} · store ${formatNumber(d.store_snippets)} · covered ${formatNumber(d.covered_snippets)}`),
      h("div", { class: "vl-cov-lists" },
        snippetList("Missing from the store", "vl-cov-missing", d.missing_in_store as string[]),
        snippetList("Outside the raw dataset", "vl-cov-outside", d.outside_dataset as string[])));
  }

  // ---- drawing ---------------------------------------------------------------------------
  function sceneColor(i: number): [number, number, number] {
    const v = rows!.num("coverage", i);
    const k = lutIndex(v);
    if (k < 0) return BAD_RGB;
    const lut = colormap(ui.cmap).lut;
    return [lut[3 * k], lut[3 * k + 1], lut[3 * k + 2]];
  }

  function draw() {
    if (!rows) return;
    const width = gridWrap.clientWidth || 720;
    layout = gridLayout(rows.length, width);
    const ratio = globalThis.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(layout.width * ratio));
    canvas.height = Math.max(1, Math.round(layout.height * ratio));
    canvas.style.width = `${layout.width}px`;
    canvas.style.height = `${layout.height}px`;
    canvas.dataset.step = String(layout.cell + layout.gap);
    canvas.dataset.cols = String(layout.cols);
    const ctx = canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, layout.width, layout.height);
    const step = layout.cell + layout.gap;
    const selected = model.get("selected_scene");
    let selPos = -1;
    for (let p = 0; p < order.length; p++) {
      const i = order[p];
      const [r, g, b] = sceneColor(i);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect((p % layout.cols) * step, Math.floor(p / layout.cols) * step, layout.cell, layout.cell);
      if (selected && rows.sceneId(i) === selected) selPos = p;
    }
    // Two states, two looks: the selected scene has a solid double ring (dark outside,
    // light inside, visible on any colour); the keyboard cursor a dashed brand-colour ring
    // drawn inside it, so both read apart even on one cell.
    const css = getComputedStyle(root);
    const outline = (p: number, color: string, w: number, inset: number, dash: number[]) => {
      if (p < 0) return;
      ctx.setLineDash?.(dash);
      ctx.strokeStyle = color;
      ctx.lineWidth = w;
      const o = inset + w / 2;
      ctx.strokeRect((p % layout.cols) * step + o, Math.floor(p / layout.cols) * step + o, layout.cell - 2 * o, layout.cell - 2 * o);
    };
    if (selPos >= 0) {
      outline(selPos, themeVar(css, "ui-font-color0", "#000"), 2, 0, []);
      if (layout.cell >= 8) outline(selPos, themeVar(css, "layout-color0", "#fff"), 1, 2, []);
    }
    if (document.activeElement === canvas) {
      const inset = selPos === ui.cursor && layout.cell >= 10 ? 3 : 0;
      outline(ui.cursor, themeVar(css, "brand-color1", "#1976d2"), 2, inset, [3, 2]);
    }
    ctx.setLineDash?.([]);
  }

  function positionOf(sceneId: string): number {
    if (!rows || !sceneId) return -1;
    for (let p = 0; p < order.length; p++) if (rows.sceneId(order[p]) === sceneId) return p;
    return -1;
  }

  function describe(p: number): string {
    if (!rows || p < 0 || p >= order.length) return "";
    const i = order[p];
    return `${rows.sceneId(i)}: coverage ${pct(rows.num("coverage", i))}, raw ${rows.num("dataset_snippets", i)}, store ${rows.num("store_snippets", i)}, covered ${rows.num("covered_snippets", i)}, missing ${rows.num("missing_in_store", i)}, outside ${rows.num("outside_dataset", i)}`;
  }

  function showTooltip(p: number, x: number, y: number) {
    if (!rows || p < 0) { tooltip.hidden = true; return; }
    const i = order[p];
    replaceChildren(tooltip,
      h("div", { class: "vl-mono vl-cov-tip-id" }, rows.sceneId(i)),
      h("div", {}, `coverage ${pct(rows.num("coverage", i))}`),
      h("div", { class: "vl-muted" }, `raw ${formatNumber(rows.num("dataset_snippets", i))} · store ${formatNumber(rows.num("store_snippets", i))} · covered ${formatNumber(rows.num("covered_snippets", i))}`),
      h("div", { class: "vl-muted" }, `missing ${formatNumber(rows.num("missing_in_store", i))} · outside ${formatNumber(rows.num("outside_dataset", i))}`));
    tooltip.hidden = false;
    const maxX = Math.max(0, layout.width - 220);
    tooltip.style.left = `${Math.min(x + 12, maxX)}px`;
    tooltip.style.top = `${y + 14}px`;
  }

  canvas.addEventListener("mousemove", (ev: MouseEvent) => {
    const rect = canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left;
    const y = ev.clientY - rect.top;
    ui.hover = cellAt(layout, x, y, order.length);
    showTooltip(ui.hover, x, y);
    canvas.style.cursor = ui.hover >= 0 ? "pointer" : "default";
  });
  canvas.addEventListener("mouseleave", () => { ui.hover = -1; tooltip.hidden = true; });
  canvas.addEventListener("click", (ev: MouseEvent) => {
    const rect = canvas.getBoundingClientRect();
    const p = cellAt(layout, ev.clientX - rect.left, ev.clientY - rect.top, order.length);
    if (p < 0 || !rows) return;
    ui.cursor = p;
    selectScene(rows.sceneId(order[p]));
  });
  canvas.addEventListener("focus", () => { live.textContent = describe(ui.cursor); draw(); });
  canvas.addEventListener("blur", () => { tooltip.hidden = true; draw(); });
  canvas.addEventListener("keydown", (ev: KeyboardEvent) => {
    if (!rows || !order.length) return;
    const n = order.length;
    let p = ui.cursor;
    switch (ev.key) {
      case "ArrowRight": p = Math.min(n - 1, p + 1); break;
      case "ArrowLeft": p = Math.max(0, p - 1); break;
      case "ArrowDown": p = Math.min(n - 1, p + layout.cols); break;
      case "ArrowUp": p = Math.max(0, p - layout.cols); break;
      case "Home": p = 0; break;
      case "End": p = n - 1; break;
      case "Enter": case " ":
        ev.preventDefault();
        selectScene(rows.sceneId(order[ui.cursor]));
        return;
      default: return;
    }
    ev.preventDefault();
    ui.cursor = p;
    const step = layout.cell + layout.gap;
    live.textContent = describe(p);
    showTooltip(p, (p % layout.cols) * step, Math.floor(p / layout.cols) * step);
    draw();
  });

  // ---- totals, legend, table -------------------------------------------------------------
  function renderTotals(t: any) {
    const items: [string, string][] = [
      ["coverage", pct(t.coverage === null ? NaN : t.coverage)],
      ["covered snippets", `${formatNumber(t.covered_snippets)} of ${formatNumber(t.dataset_snippets)} raw`],
      ["missing from store", formatNumber(t.missing_in_store)],
      ["outside raw data", formatNumber(t.outside_dataset)],
      ["scenes (raw / store)", `${formatNumber(t.dataset_scenes)} / ${formatNumber(t.store_scenes)}`],
      ["store snippets", formatNumber(t.store_snippets)],
      ["tar shards", t.tar_shards_found > t.tar_shards_scanned ? `${formatNumber(t.tar_shards_scanned)} of ${formatNumber(t.tar_shards_found)}` : formatNumber(t.tar_shards_scanned)],
    ];
    if (t.members_scanned !== null && t.members_scanned !== undefined) items.push(["members", formatNumber(t.members_scanned)]);
    replaceChildren(totalsEl, ...items.map(([k, v]) => h("div", { class: `vl-cov-total ${k === "missing from store" && t.missing_in_store ? "vl-cov-gap" : ""} ${k === "outside raw data" && t.outside_dataset ? "vl-cov-gap" : ""}` },
      h("div", { class: "vl-cov-total-value" }, v), h("div", { class: "vl-muted vl-cov-total-label" }, k))));
    const notice = (count: number, badge: string, examples: string[], what: string, note = "") =>
      totalsEl.append(h("div", { class: "vl-cov-unparseable" },
        h("span", { class: "vl-badge vl-warn" }, badge), note ? ` ${note}` : "",
        collapsedList(examples, { limit: 3, total: count, listClass: "vl-mono vl-muted", what })));
    if (t.unparseable_members) {
      notice(t.unparseable_members, `${formatNumber(t.unparseable_members)} unparseable members`,
        (t.unparseable_examples as string[]) ?? [], "unparseable members");
    }
    if (t.non_utf8_members) {
      notice(t.non_utf8_members, `${formatNumber(t.non_utf8_members)} member names not valid UTF-8`,
        (t.non_utf8_examples as string[]) ?? [], "member names that are not UTF-8",
        "shown with \\xNN escapes, per tar:");
    }
  }

  function renderLegend() {
    replaceChildren(legend,
      h("span", { class: "vl-muted" }, "0%"),
      h("span", { class: "vl-cov-gradient", style: `background: ${gradientCss(ui.cmap, 16)}`, role: "img", "aria-label": `colour scale ${ui.cmap}, 0% to 100% coverage` }),
      h("span", { class: "vl-muted" }, "100%"),
      h("span", { class: "vl-cov-na", style: `background: rgb(${BAD_RGB.join(",")})` }),
      h("span", { class: "vl-muted" }, "n/a (no raw snippets)"),
      h("span", { class: "vl-cov-key vl-cov-key-selected", "aria-hidden": "true" }),
      h("span", { class: "vl-muted" }, "selected"),
      h("span", { class: "vl-cov-key vl-cov-key-cursor", "aria-hidden": "true" }),
      h("span", { class: "vl-muted" }, "keyboard cursor"));
  }

  function renderTable() {
    if (!rows) { replaceChildren(tableWrap); return; }
    const pages = Math.max(1, Math.ceil(order.length / PAGE));
    ui.page = Math.min(ui.page, pages - 1);
    const start = ui.page * PAGE;
    const selected = model.get("selected_scene");
    const trs: HTMLElement[] = [];
    for (let p = start; p < Math.min(order.length, start + PAGE); p++) {
      const i = order[p];
      const id = rows.sceneId(i);
      const tr = h("tr", { tabindex: 0, class: `vl-cov-row ${id === selected ? "vl-selected" : ""}`, "data-scene": id },
        h("td", { class: "vl-mono", title: id }, id),
        h("td", { class: "vl-num" }, pct(rows.num("coverage", i))),
        ...(["dataset_snippets", "store_snippets", "covered_snippets", "missing_in_store", "outside_dataset"] as const).map((k) => h("td", { class: "vl-num" }, formatNumber(rows!.num(k, i)))));
      tr.addEventListener("click", () => { ui.cursor = p; selectScene(id); });
      tr.addEventListener("keydown", (ev: KeyboardEvent) => {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); ui.cursor = p; selectScene(id); }
      });
      trs.push(tr);
    }
    const prev = h("button", { class: "vl-button", type: "button", disabled: ui.page === 0 }, "‹ prev");
    const next = h("button", { class: "vl-button", type: "button", disabled: ui.page >= pages - 1 }, "next ›");
    prev.addEventListener("click", () => { ui.page--; renderTable(); });
    next.addEventListener("click", () => { ui.page++; renderTable(); });
    replaceChildren(tableWrap,
      h("div", { class: "vl-toolbar" }, prev, h("span", { class: "vl-muted" }, `scenes ${formatNumber(start + 1)}–${formatNumber(Math.min(order.length, start + PAGE))} of ${formatNumber(order.length)}`), next),
      h("div", { class: "vl-cov-scroll" }, h("table", { class: "vl-table vl-cov-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "scene"), ...["coverage", "raw", "store", "covered", "missing", "outside"].map((t) => h("th", { class: "vl-num" }, t)))),
        h("tbody", {}, ...trs))));
  }

  function resort() {
    dirBtn.textContent = ui.desc ? "descending" : "ascending";
    if (!rows) return;
    order = sortOrder(rows, ui.sort, ui.desc);
    // The cursor stays on the selected scene (at its new place), not on whatever moved to 0.
    ui.cursor = Math.max(0, positionOf(model.get("selected_scene")));
    ui.page = 0;
    draw();
    renderTable();
  }

  // ---- model sync ------------------------------------------------------------------------
  function renderAcquisition() {
    const acq = model.get("acquisition") ?? ({} as CoverageModel["acquisition"]);
    const running = acq.state === "running";
    rescanBtn.disabled = running;
    cancelBtn.hidden = !running;
    if (running) status.progress(acq.done, acq.total, acq.total ? `${acq.step}: tar ${acq.done} / ${acq.total}` : `${acq.step}…`);
    else status.clearProgress();
    root.classList.toggle("vl-cov-busy", running);
    if (!rows) {
      empty.hidden = false;
      empty.textContent = running ? "Scanning raw tar headers…" : acq.state === "failed" ? "No coverage: the scan failed (see the error above)." : acq.state === "cancelled" ? "Scan cancelled. Press Rescan to start again." : "No coverage yet.";
    }
  }

  function renderCoverage() {
    paths.textContent = `store ${model.get("store_path")} · raw ${model.get("raw_dataset_dir")}`;
    const raw = model.get("coverage");
    if (!raw || !Object.keys(raw).length) {
      rows = null;
      body.hidden = true;
      csvBtn.disabled = true;
      renderAcquisition();
      return;
    }
    const p = decode(raw);
    rows = sceneRows(p.scenes as Table);
    body.hidden = false;
    empty.hidden = true;
    csvBtn.disabled = false;
    renderTotals(p.totals);
    renderLegend();
    order = sortOrder(rows, ui.sort, ui.desc);
    ui.cursor = Math.min(ui.cursor, Math.max(0, order.length - 1));
    draw();
    renderTable();
  }

  function renderReplacement() {
    const r = model.get("replacement");
    banner.hidden = !r?.replaced;
    replaceChildren(banner, r?.replaced ? h("strong", {}, "Store replaced. ") : null, r?.replaced ? String(r.message ?? "") : null);
  }

  const onSelected = () => { draw(); renderTable(); };
  const onTheme = () => draw();
  const stopTheme = onThemeChange(onTheme);
  const resizeObserver = typeof ResizeObserver !== "undefined" ? new ResizeObserver(() => draw()) : null;
  resizeObserver?.observe(gridWrap);

  model.on("change:acquisition", renderAcquisition);
  model.on("change:coverage", renderCoverage);
  model.on("change:selected_scene", onSelected);
  model.on("change:replacement", renderReplacement);
  renderReplacement();
  renderCoverage();
  renderAcquisition();
  if (model.get("selected_scene") && rows) selectScene(model.get("selected_scene"));

  return () => {
    stopScheme();
    model.off("change:acquisition", renderAcquisition);
    model.off("change:coverage", renderCoverage);
    model.off("change:selected_scene", onSelected);
    model.off("change:replacement", renderReplacement);
    stopTheme();
    resizeObserver?.disconnect();
    client.dispose();
    status.dispose();
  };
}

export default { render };
