// Snapshot browser (vinlens/widgets/snapshot_browser.py): choose module paths (embedded
// module table or a linked one), edit capture limits, ask the kernel to capture around the
// user's forward, then browse the snapshots: a virtual table, a detail panel with the
// sampled values and a histogram, quota usage, and a CSV download.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./snapshot_browser.css";
import { csvField, downloadText, h, replaceChildren } from "../lib/dom";
import { histogramSvg, statText, summaryBoxesSvg } from "../lib/histogram";
import { decodeArray, decodeTable, formatNumber, type Table, type TypedArray } from "../lib/payload";
import { CommandClient } from "../lib/protocol";
import { statusView } from "../lib/status";
import { VirtualTable, type VTColumn } from "../lib/virtual-table";
import { createModuleTable, type ModuleTableModel, type ModuleTableView } from "../lib/module-table";

export interface SnapshotBrowserModel extends ModuleTableModel {
  snapshot_table: { table?: any; values?: any };
  capture_summary: {
    tensors?: number; max_tensors?: number | null; sampled_bytes?: number; max_bytes?: number | null;
    modules?: number; ok?: boolean; error?: string | null;
    /** Set when run() finished but selected modules never ran (e.g. `model` was re-assigned). */
    warning?: string | null;
  };
  limits: Record<string, number>;
  can_capture: boolean;
  embedded_table: boolean;
}

export const LIMIT_FIELDS: [string, string][] = [
  ["max_tensors", "Snapshots retained across the capture"],
  ["max_samples_per_tensor", "Values copied from one tensor"],
  ["max_bytes", "Source-dtype bytes copied in total"],
  ["max_traversal_nodes", "Containers and leaves visited in one input or output walk"],
  ["max_container_depth", "Container edges followed from an input or output root"],
  ["max_summary_elements", "Tensor elements read in total for whole-tensor summaries (0: none)"],
];

/** Limits that may be 0 (the engine's rule: 0 turns the feature off). */
const ZERO_ALLOWED = new Set(["max_summary_elements"]);

const CSV_COLUMNS = [
  "module_path", "call_index", "direction", "tensor_path", "shape", "dtype", "device",
  "numel", "sampled_bytes", "values", "sample_omission_reason",
];

const COLUMNS: VTColumn[] = [
  { key: "module_path", label: "Module", minWidth: 160, grow: 3 },
  { key: "call_index", label: "Call", minWidth: 50, align: "right" },
  { key: "direction", label: "Side", minWidth: 60 },
  { key: "tensor_path", label: "Tensor", minWidth: 110, grow: 2 },
  { key: "shape", label: "Shape", minWidth: 90, grow: 1 },
  { key: "dtype", label: "Dtype", minWidth: 100 },
  { key: "device", label: "Device", minWidth: 64 },
  { key: "numel", label: "Numel", minWidth: 70, align: "right" },
  { key: "sampled_bytes", label: "Bytes", minWidth: 60, align: "right", title: "Source-dtype bytes of the sampled values" },
  { key: "sample_omission_reason", label: "Not sampled", minWidth: 100, grow: 1, title: "Why the values were not sampled (metadata only)" },
];

const FITTED_COLUMNS = ["module_path", "tensor_path", "shape", "dtype", "sample_omission_reason"];

/** The decoded snapshot payload: metadata columns plus all sampled values. */
export class Snapshots {
  readonly table: Table | null;
  readonly values: TypedArray;
  readonly length: number;

  constructor(payload: { table?: any; values?: any } | undefined) {
    this.table = payload?.table?.$table ? decodeTable(payload.table) : null;
    this.values = payload?.values?.$array ? decodeArray(payload.values).data : new Float64Array(0);
    this.length = this.table?.length ?? 0;
  }

  text(row: number, name: string): string {
    const c = this.table!.column(name);
    return c.kind === "string" ? c.get(row) : String(c.values[row]);
  }

  num(row: number, name: string): number {
    const c = this.table!.column(name);
    return c.kind === "numeric" ? Number(c.values[row]) : NaN;
  }

  sample(row: number): TypedArray {
    const start = this.num(row, "values_start");
    return this.values.subarray(start, start + this.num(row, "values_count"));
  }

  /**
   * Sampled values as text: booleans as true/false, integers exactly, floats at their
   * dtype's precision (`exact`: as the kernel holds them, for the CSV that must match
   * `vinlens.export`).
   */
  sampleText(row: number, exact = false): string[] {
    const dtype = this.text(row, "dtype");
    const isBool = dtype === "torch.bool";
    const bits = exact ? undefined : MANTISSA_BITS[dtype];
    return Array.from(this.sample(row), (v) => (isBool ? (v ? "true" : "false") : numberText(v, bits)));
  }

  /** The longest text of column `name` over the first `limit` rows (for column fitting). */
  longest(name: string, limit = 2000): string {
    let out = "";
    for (let r = 0; r < Math.min(this.length, limit); r++) {
      const t = this.text(r, name);
      if (t.length > out.length) out = t;
    }
    return out;
  }
}

/** Explicit mantissa bits of the floating dtypes whose samples cross widened to float64. */
const MANTISSA_BITS: Record<string, number> = {
  "torch.float32": 23, "torch.float16": 10, "torch.bfloat16": 7,
  "torch.float8_e4m3fn": 3, "torch.float8_e4m3fnuz": 3, "torch.float8_e5m2": 2, "torch.float8_e5m2fnuz": 2,
};

/**
 * A sampled value as text. Samples travel as float64, so a float32 0.1 arrives as
 * 0.10000000149011612; given the source dtype's mantissa bits, print the fewest significant
 * digits that still identify the value in that dtype (float32: up to 9, float16: up to 5).
 */
export function numberText(v: number, mantissaBits?: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (mantissaBits === undefined || v === 0 || (Number.isInteger(v) && Math.abs(v) < 1e7)) return String(v);
  const halfUlp = 2 ** (Math.floor(Math.log2(Math.abs(v))) - mantissaBits - 1);
  const maxDigits = Math.ceil(mantissaBits * Math.log10(2)) + 2;
  for (let p = 1; p < maxDigits; p++) {
    const short = Number(v.toPrecision(p));
    if (Math.abs(short - v) < halfUlp) return String(short);
  }
  return String(Number(v.toPrecision(maxDigits)));
}

const NON_FINITE = new Set(["NaN", "Infinity", "-Infinity"]);

/** The CSV the Download button saves; same columns as `vinlens.export` of the snapshots. */
export function snapshotsCsv(s: Snapshots): string {
  const lines = [CSV_COLUMNS.join(",")];
  for (let r = 0; r < s.length; r++) {
    const cells = CSV_COLUMNS.map((name) => {
      // JSON like vinlens.export writes it: non-finite floats as strings.
      if (name === "values") return csvField(`[${s.sampleText(r, true).map((t) => (NON_FINITE.has(t) ? `"${t}"` : t)).join(",")}]`);
      return csvField(s.text(r, name));
    });
    lines.push(cells.join(","));
  }
  return lines.join("\r\n") + "\r\n";
}

function render({ model, el }: { model: AnyModel<SnapshotBrowserModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  const client = new CommandClient(model);
  const disposers: (() => void)[] = [];
  let snaps = new Snapshots(model.get("snapshot_table"));
  let detailRow = -1;

  // -- capture controls ------------------------------------------------------------------
  let moduleTable: ModuleTableView | null = null;
  const picker = h("div", { class: "vl-sb-picker" });
  const linkedNote = h("div", { class: "vl-sb-linked" });
  const limitInputs = new Map<string, HTMLInputElement>();
  const limitsForm = h("fieldset", { class: "vl-sb-limits" }, h("legend", {}, "Capture limits"));
  for (const [name, help] of LIMIT_FIELDS) {
    const input = h("input", { class: "vl-input vl-sb-limit", type: "number", min: ZERO_ALLOWED.has(name) ? 0 : 1, step: 1, name, "aria-label": name });
    input.addEventListener("input", () => onLimitInput());
    limitInputs.set(name, input);
    limitsForm.append(h("label", { class: "vl-sb-limit-field", title: help }, h("span", { class: "vl-mono" }, name), input));
  }
  const limitProblem = h("div", { class: "vl-sb-limit-problem", role: "status" });
  limitsForm.append(limitProblem);
  const captureButton = h("button", { class: "vl-button vl-primary vl-sb-capture", type: "button" }, "Capture");
  const selectionNote = h("span", { class: "vl-muted vl-sb-selection" });
  const controls = h("div", { class: "vl-sb-controls" }, picker, limitsForm,
    h("div", { class: "vl-toolbar" }, captureButton, selectionNote));

  // -- results ---------------------------------------------------------------------------
  const tensorsMeter = h("progress", { class: "vl-sb-meter vl-sb-tensors-meter", max: 1, value: 0 });
  const bytesMeter = h("progress", { class: "vl-sb-meter vl-sb-bytes-meter", max: 1, value: 0 });
  const tensorsText = h("span", { class: "vl-sb-quota-text vl-sb-tensors" });
  const bytesText = h("span", { class: "vl-sb-quota-text vl-sb-bytes" });
  const resultNote = h("span", { class: "vl-muted vl-sb-result-note" });
  const download = h("button", { class: "vl-button vl-sb-download", type: "button" }, "Download CSV");
  const quota = h("div", { class: "vl-sb-quota" },
    h("label", {}, "Tensors ", tensorsMeter, " ", tensorsText),
    h("label", {}, "Bytes ", bytesMeter, " ", bytesText), resultNote, download);
  const table = new VirtualTable({
    columns: COLUMNS, height: 260, label: "Tensor snapshots",
    renderCell(r, key, cell) {
      if (key === "numel" || key === "sampled_bytes" || key === "call_index") cell.textContent = formatNumber(snaps.num(r, key));
      else cell.textContent = snaps.text(r, key);
      cell.title = cell.textContent ?? ""; // the full text when the column is too narrow
    },
    rowSelected: (r) => r === detailRow,
    rowClass: (r) => (snaps.text(r, "sample_omission_reason") ? "vl-sb-omitted" : ""),
    onRowClick: (r) => showDetail(r),
    onActivate: (r) => showDetail(r),
  });
  const detail = h("div", { class: "vl-sb-detail", "aria-live": "polite" });
  const results = h("div", { class: "vl-sb-results" }, h("div", { class: "vl-title vl-sb-results-title" }, "Snapshots"), quota, table.el, detail);

  const root = h("div", { class: "vl-root vl-snapshot-browser" }, controls, results, status.el);
  const stopScheme = mountRoot(el, root);

  function setupPicker(): void {
    moduleTable?.dispose();
    moduleTable = null;
    const canCapture = Boolean(model.get("can_capture"));
    controls.hidden = !canCapture;
    if (!canCapture) return;
    if (model.get("embedded_table")) {
      moduleTable = createModuleTable(model, { title: "Modules to capture", height: 220 });
      replaceChildren(picker, moduleTable.el);
    } else {
      replaceChildren(picker, linkedNote);
    }
    updateSelectionNote();
  }

  function updateSelectionNote(): void {
    const paths = model.get("selected_paths") ?? [];
    selectionNote.textContent = paths.length
      ? `${paths.length} module${paths.length === 1 ? "" : "s"} selected`
      : "No module selected: Capture observes every module (within the limits)";
    if (!model.get("embedded_table")) {
      const shown = paths.slice(0, 8);
      replaceChildren(linkedNote, h("span", { class: "vl-muted" }, "Modules come from the linked module table: "),
        ...shown.map((p) => h("code", { class: "vl-sb-path" }, p)),
        paths.length > shown.length ? ` … and ${paths.length - shown.length} more` : "",
        paths.length === 0 ? "(none selected)" : "");
    }
  }

  function readLimits(): { values: Record<string, number | null>; problems: string[] } {
    const values: Record<string, number | null> = {};
    const problems: string[] = [];
    for (const [name, input] of limitInputs) {
      const v = input.value.trim() === "" ? null : Number(input.value);
      values[name] = v === null || Number.isNaN(v) ? null : v;
      const floor = ZERO_ALLOWED.has(name) ? 0 : 1;
      const ok = v !== null && Number.isInteger(v) && v >= floor;
      input.setAttribute("aria-invalid", ok ? "false" : "true");
      if (!ok) problems.push(`${name} must be a ${floor ? "positive" : "non-negative"} whole number`);
    }
    return { values, problems };
  }

  function onLimitInput(): void {
    const { values, problems } = readLimits();
    limitProblem.textContent = problems.join("; ");
    if (problems.length === 0) {
      model.set("limits", values as Record<string, number>);
      model.save_changes();
    }
  }

  function loadLimits(): void {
    const limits = model.get("limits") ?? {};
    for (const [name, input] of limitInputs) {
      const v = limits[name];
      if (typeof v === "number" && Number(input.value) !== v) input.value = String(v);
    }
    readLimits();
    limitProblem.textContent = "";
  }

  function loadSnapshots(): void {
    snaps = new Snapshots(model.get("snapshot_table"));
    detailRow = -1;
    replaceChildren(detail);
    table.setRowCount(snaps.length);
    // Paths are what people read here: size those columns to their longest entry
    // (bounded; the user can still drag a header edge).
    for (const key of FITTED_COLUMNS) if (snaps.table) table.fitColumn(key, snaps.longest(key), key === "module_path" ? 420 : 300);
    download.disabled = snaps.length === 0;
    loadSummary();
  }

  function loadSummary(): void {
    const s = model.get("capture_summary") ?? {};
    const tensors = s.tensors ?? 0;
    const bytes = s.sampled_bytes ?? 0;
    tensorsMeter.max = Math.max(1, s.max_tensors ?? tensors);
    tensorsMeter.value = tensors;
    bytesMeter.max = Math.max(1, s.max_bytes ?? bytes);
    bytesMeter.value = bytes;
    tensorsText.textContent = `${formatNumber(tensors)} / ${s.max_tensors == null ? "?" : formatNumber(s.max_tensors)}`;
    bytesText.textContent = `${formatNumber(bytes)} / ${s.max_bytes == null ? "?" : formatNumber(s.max_bytes)}`;
    const observed = `${formatNumber(s.modules ?? 0)} module${s.modules === 1 ? "" : "s"} observed`;
    if (s.tensors === undefined) resultNote.textContent = "No capture yet.";
    else if (s.error) resultNote.textContent = `Partial: run() raised ${s.error}`;
    else if (s.warning) resultNote.textContent = `${observed}. Warning: ${s.warning}`;
    else resultNote.textContent = observed;
    resultNote.classList.toggle("vl-sb-failed", Boolean(s.error));
    resultNote.classList.toggle("vl-sb-warning", !s.error && Boolean(s.warning));
    if (s.warning && !s.error) resultNote.setAttribute("role", "alert");
    else resultNote.removeAttribute("role");
  }

  function showDetail(r: number): void {
    if (r < 0 || r >= snaps.length) return;
    detailRow = r;
    table.refresh();
    const texts = snaps.sampleText(r);
    const reason = snaps.text(r, "sample_omission_reason");
    const numel = snaps.num(r, "numel");
    // divs, not dl/dt/dd: JupyterLab styles those inside outputs and would override ours
    const facts = h("div", { class: "vl-sb-facts" },
      ...[
        ["Module", snaps.text(r, "module_path")], ["Call", String(snaps.num(r, "call_index"))],
        ["Side", snaps.text(r, "direction")], ["Tensor", snaps.text(r, "tensor_path")],
        ["Shape", snaps.text(r, "shape")], ["Dtype", snaps.text(r, "dtype")], ["Device", snaps.text(r, "device")],
        ["Kept", `first ${formatNumber(texts.length)} of ${formatNumber(numel)} values (${formatNumber(snaps.num(r, "sampled_bytes"))} bytes)`],
      ].flatMap(([k, v]) => [h("span", { class: "vl-sb-fact-key" }, k), h("span", { class: "vl-sb-fact-value vl-mono" }, v)]));
    const shown = texts.slice(0, 512);
    const valuesBox = h("div", { class: "vl-sb-values vl-mono", "aria-label": "The first values in memory order (a prefix, not a random sample)" },
      ...shown.map((t) => h("span", { class: "vl-sb-value" }, t)),
      texts.length > shown.length ? h("span", { class: "vl-muted" }, ` … ${texts.length - shown.length} more`) : null);
    const whole = wholeTensor(r);
    // The kept values are the tensor's first ones in memory order (often the zero padding of
    // a conv output), so they never stand for its distribution when the whole-tensor
    // summary is there; without one, their histogram is drawn and titled as the prefix's.
    const prefixTitle = h("div", { class: "vl-sb-prefix-title" },
      texts.length === numel ? `All ${formatNumber(numel)} values, in memory order`
        : `First ${formatNumber(texts.length)} values in memory order (a prefix, not a random sample)`);
    const prefixHistogram = whole ? null : h("div", { class: "vl-sb-prefix-hist" },
      h("div", { class: "vl-muted" }, texts.length === numel ? "Histogram of all values" : `Histogram of these first ${formatNumber(texts.length)} values only`),
      histogramSvg(snaps.sample(r)));
    const body = reason
      ? h("div", { class: "vl-sb-reason" }, "Values not sampled: ", h("b", {}, reason))
      : texts.length === 0
        ? h("div", { class: "vl-muted" }, numel === 0 ? "Empty tensor: no values." : "No values sampled (quota reached).")
        : h("div", { class: "vl-sb-sample" }, prefixHistogram, h("div", {}, prefixTitle, valuesBox));
    replaceChildren(detail, h("div", { class: "vl-sb-detail-title" }, "Snapshot detail"), facts, whole, body);
  }

  /** The whole-tensor summary (computed on the tensor's device), or null when there is none. */
  function wholeTensor(r: number): HTMLElement | null {
    if (!snaps.table?.columns.some((c) => c.name === "has_summary") || snaps.num(r, "has_summary") !== 1) return null;
    const v = (f: string) => snaps.num(r, `summary_${f}`);
    const nonFinite = [[v("nan_count"), "NaN"], [v("posinf_count"), "+Inf"], [v("neginf_count"), "−Inf"]]
      .filter(([n]) => (n as number) > 0).map(([n, what]) => `${formatNumber(n as number)} ${what}`);
    const text = `mean ${statText(v("mean"))} ± ${statText(v("std"))} · range [${statText(v("min"))}, ${statText(v("max"))}]`
      + ` · zeros ${statText(100 * v("zero_fraction"))} % · ${nonFinite.length ? nonFinite.join(", ") : "all finite"}`;
    return h("div", { class: "vl-sb-whole" },
      h("div", { class: "vl-sb-whole-title" }, `Distribution of the whole tensor (all ${formatNumber(v("count"))} values)`),
      h("span", { class: "vl-sb-fact-key" }, `All ${formatNumber(v("count"))} values: `),
      h("span", { class: `vl-mono${nonFinite.length ? " vl-sb-nonfinite" : ""}` }, text),
      summaryBoxesSvg([{ label: "", min: v("min"), max: v("max"), mean: v("mean"), std: v("std") }], { width: 320, rowHeight: 24 }),
      h("div", { class: "vl-muted vl-sb-whole-note" }, "whisker: finite min to max · box: mean ± std"));
  }

  captureButton.addEventListener("click", () => {
    const { values } = readLimits();
    captureButton.disabled = true;
    captureButton.textContent = "Capturing…";
    status.clearError();
    client.request("capture", { module_paths: model.get("selected_paths") ?? [], limits: values })
      .catch((err) => status.showError(err.message, err.traceback))
      .finally(() => { captureButton.disabled = false; captureButton.textContent = "Capture"; });
  });
  download.addEventListener("click", () => downloadText("snapshots.csv", snapshotsCsv(snaps)));

  const on = (event: string, fn: () => void) => { model.on(event, fn); disposers.push(() => model.off(event, fn)); };
  on("change:snapshot_table", loadSnapshots);
  on("change:capture_summary", loadSummary);
  on("change:limits", loadLimits);
  on("change:selected_paths", updateSelectionNote);
  on("change:can_capture", setupPicker);
  on("change:embedded_table", setupPicker);
  setupPicker();
  loadLimits();
  loadSnapshots();

  return () => {
    stopScheme();
    for (const d of disposers) d();
    moduleTable?.dispose();
    table.destroy();
    client.dispose();
    status.dispose();
    root.remove();
  };
}

export default { render };
