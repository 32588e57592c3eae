// Module table component: the registered modules of a model (vinlens/widgets/module_table.py)
// in a virtual table. The module table, snapshot browser and model health widgets embed it,
// so it binds to whichever model carries the `modules`, `model_summary`, `selected_paths`
// and `tree_view` traitlets.
import type { AnyModel } from "@anywidget/types";
import "./theme.css";
import "./module-table.css";
import { h, lastDotted, replaceChildren } from "./dom";
import { decodeTable, formatNumber, type Table, type TypedArray } from "./payload";
import { VirtualTable, setText, type SortDir, type VTColumn } from "./virtual-table";

export interface ModuleTableModel {
  modules: any;
  model_summary: {
    model_type?: string; total_parameters?: number; trainable_parameters?: number;
    total_buffers?: number; module_count?: number; types?: string[];
  };
  selected_paths: string[];
  tree_view: boolean;
  status: string;
  error: string;
  error_traceback: string;
}

type SortKey = string;

const COLUMNS: VTColumn[] = [
  { key: "path", label: "Module", minWidth: 220, grow: 4, sortable: true },
  { key: "type", label: "Type", minWidth: 140, grow: 2, sortable: true },
  { key: "direct_parameters", label: "Params", minWidth: 90, align: "right", sortable: true, title: "Parameters registered directly on the module" },
  { key: "subtree_parameters", label: "Subtree params", minWidth: 120, align: "right", sortable: true, title: "Parameters of the module and every module below it" },
  { key: "trainable_parameters", label: "Trainable", minWidth: 90, align: "right", sortable: true, title: "Direct parameters with requires_grad" },
  { key: "direct_buffers", label: "Buffers", minWidth: 80, align: "right", sortable: true, title: "Elements of buffers registered directly on the module" },
  { key: "training", label: "Mode", minWidth: 60, sortable: true, title: "training flag" },
];

/** Decoded module rows plus the tree structure sent by the kernel. */
export class ModuleRows {
  readonly n: number;
  readonly parent: TypedArray;
  readonly depth: TypedArray;
  readonly subtreeEnd: TypedArray;
  readonly typeCode: TypedArray;
  readonly params: TypedArray;
  readonly subtreeParams: TypedArray;
  readonly trainable: TypedArray;
  readonly buffers: TypedArray;
  readonly training: TypedArray;
  readonly types: string[];
  private readonly table: Table;
  private pathCache: string[] | null = null;
  private lowerCache: string[] | null = null;
  private indexCache: Map<string, number> | null = null;

  constructor(payload: any, types: string[]) {
    this.table = decodeTable(payload);
    this.n = this.table.length;
    const num = (name: string) => {
      const c = this.table.column(name);
      if (c.kind !== "numeric") throw new Error(`column ${name} is not numeric`);
      return c.values;
    };
    this.parent = num("parent");
    this.depth = num("depth");
    this.subtreeEnd = num("subtree_end");
    this.typeCode = num("type");
    this.params = num("direct_parameters");
    this.subtreeParams = num("subtree_parameters");
    this.trainable = num("trainable_parameters");
    this.buffers = num("direct_buffers");
    this.training = num("training");
    this.types = types;
  }

  /** One path, decoded on demand (painting needs only the rows in view). */
  path(i: number): string {
    if (this.pathCache) return this.pathCache[i];
    const c = this.table.column("path");
    return c.kind === "string" ? c.get(i) : "";
  }

  paths(): string[] {
    if (!this.pathCache) {
      const c = this.table.column("path");
      const out = new Array<string>(this.n);
      for (let i = 0; i < this.n; i++) out[i] = c.kind === "string" ? c.get(i) : "";
      this.pathCache = out;
    }
    return this.pathCache;
  }

  lowerPaths(): string[] {
    if (!this.lowerCache) this.lowerCache = this.paths().map((p) => p.toLowerCase());
    return this.lowerCache;
  }

  indexOf(path: string): number {
    if (!this.indexCache) this.indexCache = new Map(this.paths().map((p, i) => [p, i]));
    return this.indexCache.get(path) ?? -1;
  }

  typeName(i: number): string {
    return this.types[this.typeCode[i]] ?? "?";
  }

  hasChildren(i: number): boolean {
    return this.subtreeEnd[i] > i + 1;
  }
}

/** A column another widget adds to the module table (the health view's statistics). */
export interface ModuleExtraColumn extends VTColumn {
  /** Fill the cell of module `i` (a row of the payload, not of the view); set everything. */
  render(i: number, cell: HTMLElement): void;
  /** Sort key of module `i`; NaN sorts last. Without it the column does not sort. */
  sortValue?(i: number): number;
}

export interface ModuleTableOptions {
  height?: number;
  extraColumns?: ModuleExtraColumn[];
  /** Keys of the module table's own columns to show (default: all); "path" is always shown. */
  baseColumns?: string[];
  /** Extra class names for the row of module `i` (e.g. a highlighted NaN origin). */
  rowClass?(i: number): string;
  /** Title shown in the toolbar (the snapshot browser uses its own). */
  title?: string | null;
}

export interface ModuleTableView {
  el: HTMLElement;
  table: VirtualTable;
  /** View order (row indices) currently shown; for tests and the snapshot browser. */
  view(): Int32Array;
  /** Row index of a module path, or -1. */
  indexOf(path: string): number;
  /** Expand the ancestors of module `i`, move the cursor to it and scroll it into view. */
  reveal(i: number): void;
  dispose(): void;
}

/** Build the module table UI bound to `model`'s module-table traitlets. */
export function createModuleTable(model: AnyModel<ModuleTableModel>, opts: ModuleTableOptions = {}): ModuleTableView {
  let rows: ModuleRows | null = null;
  let view = new Int32Array(0);
  let collapsed = new Uint8Array(0);
  let selected = new Uint8Array(0);
  let selectedCount = 0;
  let anchor = -1; // row index where a shift-click range starts
  let replaced = 0; // modules a plain click just replaced (shown once, so it is not silent)
  let sort: { key: SortKey; dir: SortDir } | null = null;
  let query = "";
  let typeFilter = -1;
  let treeMode = Boolean(model.get("tree_view"));
  let children: { start: Int32Array; list: Int32Array } | null = null;
  let filtering = false;
  const extra = new Map((opts.extraColumns ?? []).map((c) => [c.key, c]));

  const search = h("input", {
    class: "vl-input vl-mt-search", type: "search", placeholder: "Filter paths",
    "aria-label": "Filter modules by path",
  });
  const typeSelect = h("select", { class: "vl-input vl-mt-type-filter", "aria-label": "Filter modules by type" });
  // Two labelled states rather than one button that names the current mode (which reads
  // as either "this is a tree" or "switch to tree").
  const treeButton = h("button", {
    class: "vl-button vl-mt-view-tree", type: "button", "aria-pressed": "true",
    title: "Show modules nested under their parents",
  }, "Tree");
  const flatButton = h("button", {
    class: "vl-button vl-mt-view-flat", type: "button", "aria-pressed": "false",
    title: "Show every module as one flat list of full paths",
  }, "Flat");
  const viewToggle = h("span", { class: "vl-mt-view", role: "group", "aria-label": "View" },
    h("span", { class: "vl-muted vl-mt-view-label" }, "View"), treeButton, flatButton);
  const expandAll = h("button", { class: "vl-button vl-mt-expand-all", type: "button" }, "Expand all");
  const collapseAll = h("button", { class: "vl-button vl-mt-collapse-all", type: "button" }, "Collapse all");
  const selectSubtree = h("button", {
    class: "vl-button vl-mt-select-subtree", type: "button",
    title: "Add the module under the cursor and everything below it to the selection",
  }, "Select subtree");
  const clearSel = h("button", { class: "vl-button vl-mt-clear", type: "button" }, "Clear selection");
  const totals = h("div", { class: "vl-mt-totals", "aria-live": "polite" });
  const title = opts.title === null ? null : h("span", { class: "vl-title" }, opts.title ?? "Modules");

  const table = new VirtualTable({
    columns: [
      ...COLUMNS.filter((c) => c.key === "path" || !opts.baseColumns || opts.baseColumns.includes(c.key)),
      ...(opts.extraColumns ?? []).map((c) => ({ ...c, sortable: c.sortable ?? Boolean(c.sortValue) }))],
    height: opts.height ?? 360,
    label: "Model modules",
    renderCell,
    rowSelected: (r) => selected[view[r]] === 1,
    rowClass: (r) => {
      const own = opts.rowClass?.(view[r]) ?? "";
      return filtering && treeMode && !matches(view[r]) ? `vl-mt-context ${own}`.trim() : own;
    },
    onRowClick,
    onActivate: (r, ev) => {
      const i = view[r];
      if (ev.key === " ") toggle(i);
      else selectOnly(i);
      anchor = i;
      commitSelection();
    },
    onCursorMove: (r, prev, ev) => {
      if (!ev.shiftKey) return;
      if (anchor < 0 && prev >= 0) anchor = view[prev];
      selectRange(anchor, view[r]);
      commitSelection();
    },
    onKey: (r, ev) => {
      if (!rows || !treeMode || filtering) return false;
      const i = view[r];
      if (ev.key === "ArrowRight" && rows.hasChildren(i) && collapsed[i]) { setCollapsed(i, false); return true; }
      if (ev.key === "ArrowLeft") {
        if (rows.hasChildren(i) && !collapsed[i]) { setCollapsed(i, true); return true; }
        const p = rows.parent[i];
        const pr = p >= 0 ? view.indexOf(p) : -1;
        if (pr >= 0) { table.setCursor(pr); return true; }
      }
      return false;
    },
    onSort: (key) => {
      const k = key as SortKey;
      // Each header cycles: natural direction (text ascending, numbers descending), the
      // other direction, unsorted.
      const natural: SortDir = k === "path" || k === "type" ? "asc" : "desc";
      if (!sort || sort.key !== k) sort = { key: k, dir: natural };
      else if (sort.dir === natural) sort = { key: k, dir: natural === "asc" ? "desc" : "asc" };
      else sort = null;
      table.setSort(sort?.key ?? null, sort?.dir);
      rebuild();
    },
  });

  const toolbar = h("div", { class: "vl-toolbar vl-mt-toolbar" },
    title, search, typeSelect, viewToggle, expandAll, collapseAll, selectSubtree, clearSel);
  // Actions of the embedding widget (Refresh) sit at the end of the totals line, so the
  // toolbar keeps one line at notebook width in both views.
  const actions = h("div", { class: "vl-mt-actions" });
  const infobar = h("div", { class: "vl-mt-infobar" }, totals, actions);
  // The click rule of file browsers, written where the rows are.
  const clickRule = h("div", { class: "vl-muted vl-mt-click-rule" },
    "Click selects one module · Ctrl/⌘-click adds or removes one · Shift-click selects a range (Ctrl/⌘+Shift adds it)");
  const el = h("div", { class: "vl-mt" }, toolbar, infobar, clickRule, table.el);

  function matches(i: number): boolean {
    if (!rows) return false;
    if (typeFilter >= 0 && rows.typeCode[i] !== typeFilter) return false;
    if (query && !rows.lowerPaths()[i].includes(query)) return false;
    return true;
  }

  function renderCell(r: number, key: string, cell: HTMLElement): void {
    if (!rows) return;
    const i = view[r];
    switch (key) {
      case "path": {
        // The cell's two spans are made once and reused: scrolling repaints ~40 rows per
        // frame, so per-row work stays a few property writes.
        let twisty = cell.firstElementChild as HTMLElement | null;
        let name = twisty?.nextElementSibling as HTMLElement | null;
        if (!twisty || !name) {
          twisty = h("span", { class: "vl-mt-twisty", "aria-hidden": "true", "data-action": "toggle" });
          name = h("span", { class: "vl-mt-name" });
          replaceChildren(cell, twisty, name);
        }
        const path = rows.path(i);
        // Writes only where the value differs: an unchanged attribute or text costs no
        // style or layout work in the frame.
        if (cell.title !== path) cell.title = path;
        const row = cell.parentElement;
        if (treeMode) {
          const open = !(collapsed[i] && !filtering);
          twisty.hidden = false;
          setText(twisty, rows.hasChildren(i) ? (open ? "▾" : "▸") : "");
          const pad = `${8 + rows.depth[i] * 14}px`;
          if (cell.style.paddingLeft !== pad) cell.style.paddingLeft = pad;
          setText(name, lastDotted(path));
          if (row && rows.hasChildren(i)) row.setAttribute("aria-expanded", open ? "true" : "false");
          else row?.removeAttribute("aria-expanded");
        } else {
          twisty.hidden = true;
          if (cell.style.paddingLeft) cell.style.paddingLeft = "";
          setText(name, path);
          row?.removeAttribute("aria-expanded");
        }
        break;
      }
      case "type": {
        const t = rows.typeName(i);
        if (cell.title !== t) cell.title = t;
        setText(cell, lastDotted(t));
        break;
      }
      case "direct_parameters": setText(cell, formatNumber(rows.params[i])); break;
      case "subtree_parameters":
        // A leaf's subtree is itself: repeating its own count would only add noise.
        setText(cell, rows.hasChildren(i) ? formatNumber(rows.subtreeParams[i]) : "");
        break;
      case "trainable_parameters": setText(cell, formatNumber(rows.trainable[i])); break;
      case "direct_buffers": setText(cell, formatNumber(rows.buffers[i])); break;
      case "training": setText(cell, rows.training[i] ? "train" : "eval"); break;
      default: extra.get(key)?.render(i, cell);
    }
  }

  function onRowClick(r: number, ev: MouseEvent): void {
    if (!rows) return;
    const i = view[r];
    const target = ev.target as Element | null;
    if (target?.closest?.("[data-action=toggle]") && treeMode && !filtering && rows.hasChildren(i)) {
      setCollapsed(i, !collapsed[i]);
      return;
    }
    const before = selectedCount;
    const additive = ev.ctrlKey || ev.metaKey;
    if (ev.shiftKey && anchor >= 0) selectRange(anchor, i, additive);
    else if (additive) { toggle(i); anchor = i; }
    else {
      const was = before - (selected[i] ? 1 : 0);
      selectOnly(i);
      anchor = i;
      commitSelection();
      if (was > 0) { replaced = before; updateTotals(); }
      return;
    }
    commitSelection();
  }

  function toggle(i: number): void {
    selected[i] ^= 1;
    selectedCount += selected[i] ? 1 : -1;
  }

  function selectOnly(i: number): void {
    selected.fill(0);
    selected[i] = 1;
    selectedCount = 1;
  }

  /** Replace the selection by the rows between a and b in the current view order
   * (``additive``: add them to it). */
  function selectRange(a: number, b: number, additive = false): void {
    let ra = view.indexOf(a);
    let rb = view.indexOf(b);
    if (ra < 0) ra = rb;
    if (ra > rb) [ra, rb] = [rb, ra];
    if (!additive) { selected.fill(0); selectedCount = 0; }
    for (let r = ra; r <= rb; r++) if (!selected[view[r]]) { selected[view[r]] = 1; selectedCount++; }
  }

  function commitSelection(): void {
    if (!rows) return;
    replaced = 0;
    const out: string[] = [];
    for (let i = 0; i < rows.n; i++) if (selected[i]) out.push(rows.path(i));
    model.set("selected_paths", out);
    model.save_changes();
    updateTotals();
    updateButtons();
    table.refresh();
  }

  function syncSelectionFromModel(): void {
    if (!rows) return;
    const wanted = model.get("selected_paths") ?? [];
    selected.fill(0);
    selectedCount = 0;
    for (const p of wanted) {
      const i = typeof p === "string" ? rows.indexOf(p) : -1;
      if (i >= 0 && !selected[i]) { selected[i] = 1; selectedCount++; }
    }
    // A selection set from Python gives shift-click a start, as a click would have.
    if (anchor < 0 || !selected[anchor]) {
      anchor = -1;
      for (let i = rows.n - 1; i >= 0; i--) if (selected[i]) { anchor = i; break; }
    }
    updateTotals();
    updateButtons();
    table.refresh();
  }

  function setCollapsed(i: number, value: boolean): void {
    collapsed[i] = value ? 1 : 0;
    const cursorRow = table.cursor >= 0 ? view[table.cursor] : i;
    rebuild();
    const r = view.indexOf(cursorRow);
    if (r >= 0) table.setCursor(r, false);
  }

  function buildChildren(): { start: Int32Array; list: Int32Array } {
    if (children) return children;
    const n = rows!.n;
    const count = new Int32Array(n + 1);
    for (let i = 0; i < n; i++) { const p = rows!.parent[i]; if (p >= 0) count[p + 1]++; }
    for (let i = 0; i < n; i++) count[i + 1] += count[i];
    const fill = count.slice(0, n);
    const list = new Int32Array(n);
    for (let i = 0; i < n; i++) { const p = rows!.parent[i]; if (p >= 0) list[fill[p]++] = i; }
    children = { start: count, list };
    return children;
  }

  function comparator(): ((a: number, b: number) => number) | null {
    if (!sort || !rows) return null;
    const R = rows;
    const sign = sort.dir === "asc" ? 1 : -1;
    let key: (i: number) => number | string;
    switch (sort.key) {
      case "path": { const p = R.paths(); key = (i) => p[i]; break; }
      case "type": key = (i) => R.typeName(i); break;
      case "direct_parameters": key = (i) => R.params[i]; break;
      case "subtree_parameters": key = (i) => R.subtreeParams[i]; break;
      case "trainable_parameters": key = (i) => R.trainable[i]; break;
      case "direct_buffers": key = (i) => R.buffers[i]; break;
      case "training": key = (i) => R.training[i]; break;
      default: {
        const col = extra.get(sort.key);
        if (!col?.sortValue) return null;
        const value = col.sortValue.bind(col);
        // NaN (no statistic for the module) sorts last in either direction.
        return (a, b) => {
          const va = value(a);
          const vb = value(b);
          const na = Number.isNaN(va);
          const nb = Number.isNaN(vb);
          if (na || nb) return na && nb ? a - b : na ? 1 : -1;
          return (va < vb ? -1 : va > vb ? 1 : 0) * sign || a - b;
        };
      }
    }
    return (a, b) => {
      const ka = key(a);
      const kb = key(b);
      return (ka < kb ? -1 : ka > kb ? 1 : 0) * sign || a - b;
    };
  }

  /** Recompute the view order from tree mode, collapse state, filters and sort. */
  function rebuild(): void {
    if (!rows) { view = new Int32Array(0); table.setRowCount(0); updateTotals(); return; }
    const n = rows.n;
    filtering = query !== "" || typeFilter >= 0;
    const cmp = comparator();
    let keep: Uint8Array | null = null;
    if (filtering) {
      keep = new Uint8Array(n);
      for (let i = 0; i < n; i++) if (matches(i)) keep[i] = 1;
      if (treeMode) {
        // Ancestors follow their descendants in reverse pre-order: one backward pass
        // keeps the path from the root to every match.
        for (let i = n - 1; i >= 0; i--) if (keep[i] && rows.parent[i] >= 0) keep[rows.parent[i]] = 1;
      }
    }
    const out = new Int32Array(n);
    let m = 0;
    if (!treeMode) {
      for (let i = 0; i < n; i++) if (!keep || keep[i]) out[m++] = i;
      if (cmp) out.subarray(0, m).sort(cmp);
    } else if (!cmp) {
      for (let i = 0; i < n;) {
        if (keep && !keep[i]) { i++; continue; }
        out[m++] = i;
        i = !filtering && collapsed[i] ? rows.subtreeEnd[i] : i + 1;
      }
    } else {
      const ch = buildChildren();
      const roots: number[] = [];
      for (let i = 0; i < n; i++) if (rows.parent[i] < 0) roots.push(i);
      const stack: number[] = roots.sort(cmp).reverse();
      while (stack.length) {
        const i = stack.pop()!;
        if (keep && !keep[i]) continue;
        out[m++] = i;
        if (!filtering && collapsed[i]) continue;
        const kids = Array.from(ch.list.subarray(ch.start[i], ch.start[i + 1])).sort(cmp);
        for (let k = kids.length - 1; k >= 0; k--) stack.push(kids[k]);
      }
    }
    view = out.slice(0, m);
    table.setRowCount(m);
    updateTotals();
    updateButtons();
  }

  function updateTotals(): void {
    const s = model.get("model_summary") ?? {};
    const n = rows?.n ?? 0;
    const parts = [
      h("span", { class: "vl-mt-model-type vl-mono", title: s.model_type ?? "" }, lastDotted(s.model_type ?? "")),
      h("span", {}, h("b", {}, formatNumber(n)), " modules"),
      h("span", {}, h("b", { class: "vl-mt-total-params" }, formatNumber(s.total_parameters ?? 0)), " parameters"),
      h("span", {}, h("b", {}, formatNumber(s.trainable_parameters ?? 0)), " trainable"),
      h("span", {}, h("b", {}, formatNumber(s.total_buffers ?? 0)), " buffer elements"),
      h("span", { class: "vl-mt-selected-count" }, h("b", {}, formatNumber(selectedCount)), " selected"),
      replaced > 1 ? h("span", { class: "vl-mt-replaced" }, `(replaced ${formatNumber(replaced)}; Ctrl/⌘-click adds)`) : null,
      filtering ? h("span", { class: "vl-muted" }, `${formatNumber(view.length)} rows shown`) : null,
    ];
    replaceChildren(totals, ...parts);
  }

  function updateButtons(): void {
    treeButton.setAttribute("aria-pressed", treeMode ? "true" : "false");
    // Rows carry aria-expanded in the tree view, which ARIA allows in a treegrid only.
    table.viewport.setAttribute("role", treeMode ? "treegrid" : "grid");
    flatButton.setAttribute("aria-pressed", treeMode ? "false" : "true");
    expandAll.disabled = !treeMode;
    collapseAll.disabled = !treeMode;
    selectSubtree.disabled = table.cursor < 0;
    clearSel.disabled = selectedCount === 0;
  }

  function loadTypes(): void {
    const types = rows?.types ?? [];
    const counts = new Map<number, number>();
    if (rows) for (let i = 0; i < rows.n; i++) counts.set(rows.typeCode[i], (counts.get(rows.typeCode[i]) ?? 0) + 1);
    replaceChildren(typeSelect, h("option", { value: "-1" }, "All types"),
      ...types.map((t, code) => h("option", { value: String(code), title: t }, `${lastDotted(t)} (${counts.get(code) ?? 0})`)));
    typeSelect.value = typeFilter >= 0 && typeFilter < types.length ? String(typeFilter) : "-1";
    typeFilter = Number(typeSelect.value);
  }

  function load(): void {
    const payload = model.get("modules");
    const summary = model.get("model_summary") ?? {};
    rows = payload && payload.$table ? new ModuleRows(payload, summary.types ?? []) : null;
    const n = rows?.n ?? 0;
    collapsed = new Uint8Array(n);
    selected = new Uint8Array(n);
    selectedCount = 0;
    children = null;
    anchor = -1;
    loadTypes();
    rebuild();
    syncSelectionFromModel();
  }

  search.addEventListener("input", () => { query = search.value.trim().toLowerCase(); rebuild(); });
  typeSelect.addEventListener("change", () => { typeFilter = Number(typeSelect.value); rebuild(); });
  const setTreeMode = (tree: boolean) => {
    if (tree === treeMode) return;
    treeMode = tree;
    model.set("tree_view", treeMode);
    model.save_changes();
    rebuild();
  };
  treeButton.addEventListener("click", () => setTreeMode(true));
  flatButton.addEventListener("click", () => setTreeMode(false));
  expandAll.addEventListener("click", () => { collapsed.fill(0); rebuild(); });
  collapseAll.addEventListener("click", () => {
    if (!rows) return;
    // Keep the root open so its direct children stay visible.
    for (let i = 0; i < rows.n; i++) collapsed[i] = rows.hasChildren(i) && rows.parent[i] >= 0 ? 1 : 0;
    rebuild();
  });
  selectSubtree.addEventListener("click", () => {
    if (!rows || table.cursor < 0) return;
    const i = view[table.cursor];
    for (let j = i; j < rows.subtreeEnd[i]; j++) if (!selected[j]) { selected[j] = 1; selectedCount++; }
    commitSelection();
  });
  clearSel.addEventListener("click", () => { selected.fill(0); selectedCount = 0; anchor = -1; commitSelection(); });

  const onModules = () => load();
  const onSelection = () => syncSelectionFromModel();
  const onTree = () => { treeMode = Boolean(model.get("tree_view")); rebuild(); };
  const onSummary = () => { if (rows) rows.types.splice(0, rows.types.length, ...(model.get("model_summary")?.types ?? [])); updateTotals(); };
  model.on("change:modules", onModules);
  model.on("change:model_summary", onSummary);
  model.on("change:selected_paths", onSelection);
  model.on("change:tree_view", onTree);
  load();

  return {
    el,
    table,
    view: () => view,
    indexOf: (path) => rows?.indexOf(path) ?? -1,
    reveal(i) {
      if (!rows || i < 0 || i >= rows.n) return;
      for (let p = rows.parent[i]; p >= 0; p = rows.parent[p]) collapsed[p] = 0;
      rebuild();
      const r = view.indexOf(i);
      if (r >= 0) table.setCursor(r);
    },
    dispose() {
      model.off("change:modules", onModules);
      model.off("change:model_summary", onSummary);
      model.off("change:selected_paths", onSelection);
      model.off("change:tree_view", onTree);
      table.destroy();
    },
  };
}
