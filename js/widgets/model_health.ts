// Model health view (vinlens/widgets/model_health.py): the module table with each module's
// activation statistics as columns (mean, std, non-finite count; drift in diff mode), the
// module where the first NaN/Inf appeared highlighted, and the A and B summaries of the
// module picked last (in this table or any widget sharing the selection) side by side.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./model_health.css";
import { h, replaceChildren } from "../lib/dom";
import { statText, summaryBoxesSvg } from "../lib/histogram";
import { decodeFloat, decodeTable, formatNumber, type Table, type TypedArray } from "../lib/payload";
import { CommandClient } from "../lib/protocol";
import { statusView } from "../lib/status";
import { setText } from "../lib/virtual-table";
import { createModuleTable, type ModuleExtraColumn, type ModuleTableModel, type ModuleTableView } from "../lib/module-table";

type Summary = Record<string, number | { $float: string } | null>;
/** One floating tensor of the origin call (vinlens.health.TensorTrace). */
interface TensorTrace { tensor_path: string; shape: number[]; dtype: string; summary: Summary }

export interface HealthPayload {
  mode?: "stats" | "diff" | "empty";
  table?: any;
  origin?: {
    module_path: string; call_index: number;
    inputs: TensorTrace[]; outputs: TensorTrace[]; reached: string[]; input_nonfinite: boolean;
  } | null;
  first_divergent?: string | null;
  unknown_paths?: string[];
  /** ActivationStats.walk_truncated: outputs summarized only as far as one walk reached. */
  walk_truncated?: string[];
  unpaired_paths?: string[];
  batches?: number | null;
}

export interface ModelHealthModel extends ModuleTableModel {
  health: HealthPayload;
  can_analyze: boolean;
}

export const SUMMARY_FIELDS = [
  "count", "mean", "std", "min", "max", "abs_max", "zero_fraction", "nan_count", "posinf_count", "neginf_count",
] as const;

/** The health columns, decoded once; every accessor takes a module row of the payload. */
export class HealthRows {
  readonly n: number;
  private readonly cols = new Map<string, TypedArray>();

  constructor(payload: any) {
    const table: Table | null = payload?.$table ? decodeTable(payload) : null;
    this.n = table?.length ?? 0;
    if (!table) return;
    for (const c of table.columns) if (c.kind === "numeric") this.cols.set(c.name, c.values);
  }

  get(name: string, i: number): number {
    const c = this.cols.get(name);
    return c && i >= 0 && i < c.length ? Number(c[i]) : NaN;
  }

  has(side: "a" | "b", i: number): boolean {
    return this.get(`has_${side}`, i) === 1;
  }

  nonFinite(side: "a" | "b", i: number): number {
    if (!this.has(side, i)) return NaN;
    return this.get(`${side}_nan_count`, i) + this.get(`${side}_posinf_count`, i) + this.get(`${side}_neginf_count`, i);
  }

  /** Largest finite relative L2 drift: the drift bars' full width. */
  maxDrift(): number {
    const c = this.cols.get("relative_l2");
    let m = 0;
    if (c) for (let i = 0; i < c.length; i++) if (Number.isFinite(c[i]) && c[i] > m) m = Number(c[i]);
    return m;
  }
}


/** "3 NaN, 1 +Inf" over the tensors of one side of a call. */
export function nonFiniteText(traces: TensorTrace[]): string {
  if (!traces.length) return "no floating tensor";
  const parts: string[] = [];
  const total = (name: string) => traces.reduce((sum, t) => sum + (decodeFloat(t.summary[name] as any) || 0), 0);
  const nan = total("nan_count");
  const pos = total("posinf_count");
  const neg = total("neginf_count");
  if (nan) parts.push(`${formatNumber(nan)} NaN`);
  if (pos) parts.push(`${formatNumber(pos)} +Inf`);
  if (neg) parts.push(`${formatNumber(neg)} −Inf`);
  return parts.length ? parts.join(", ") : "all finite";
}

function render({ model, el }: { model: AnyModel<ModelHealthModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  const client = new CommandClient(model);
  const disposers: (() => void)[] = [];
  let rows = new HealthRows(model.get("health")?.table);
  let mode: string = model.get("health")?.mode ?? "empty";
  let maxDrift = rows.maxDrift();
  let mt: ModuleTableView | null = null;

  const analyzeButton = h("button", { class: "vl-button vl-primary vl-mh-analyze", type: "button", title: "Run the forward and collect statistics, look for the first NaN/Inf, and compare A with B" }, "Analyze");
  const progress = h("span", { class: "vl-muted vl-mh-progress" });
  const modeNote = h("span", { class: "vl-muted vl-mh-mode" });
  const toolbar = h("div", { class: "vl-toolbar vl-mh-toolbar" }, h("span", { class: "vl-title" }, "Model health"), analyzeButton, progress, modeNote);
  const originBox = h("div", { class: "vl-mh-origin-box", role: "alert" });
  const tableHost = h("div", { class: "vl-mh-table" });
  const detail = h("div", { class: "vl-mh-detail", "aria-live": "polite" });
  const root = h("div", { class: "vl-root vl-model-health" }, toolbar, originBox, tableHost, detail, status.el);
  const stopScheme = mountRoot(el, root);

  const statColumn = (key: string, label: string, title: string, value: (i: number) => number): ModuleExtraColumn => ({
    key, label, title, minWidth: 76, align: "right",
    render: (i, cell) => setText(cell, rows.has("a", i) ? statText(value(i)) : ""),
    sortValue: value,
  });

  function columns(): ModuleExtraColumn[] {
    const cols: ModuleExtraColumn[] = [
      // NaN and Inf are counted apart, so the moments are of the finite values only: say so
      // in the header, where they stand beside a non-finite count (diff mode needs its
      // width for the drift column; the detail and the banner say it there).
      statColumn("mh_mean", mode === "diff" ? "Mean A" : "Mean (finite)", "Mean of the finite output values (NaN and Inf left out)", (i) => rows.get("a_mean", i)),
      statColumn("mh_std", mode === "diff" ? "Std A" : "Std (finite)", "Standard deviation of the finite output values (NaN and Inf left out)", (i) => rows.get("a_std", i)),
      {
        key: "mh_nonfinite", label: "Non-finite", minWidth: 84, align: "right",
        title: "NaN and infinite output values",
        render: (i, cell) => {
          const v = rows.nonFinite("a", i);
          setText(cell, Number.isNaN(v) ? "" : formatNumber(v));
          cell.classList.toggle("vl-mh-bad", v > 0);
        },
        sortValue: (i) => rows.nonFinite("a", i),
      },
    ];
    if (mode === "diff") {
      cols.push({
        key: "mh_drift", label: "Drift", minWidth: 120, grow: 1,
        title: "Relative L2 difference of B's output from A's (‖a−b‖ / ‖a‖); the bar is relative to the largest",
        render: (i, cell) => {
          let bar = cell.firstElementChild as HTMLElement | null;
          let text = bar?.nextElementSibling as HTMLElement | null;
          if (!bar || !text) {
            bar = h("span", { class: "vl-mh-drift-bar", "aria-hidden": "true" });
            text = h("span", { class: "vl-mh-drift-text" });
            replaceChildren(cell, bar, text);
          }
          const v = rows.get("relative_l2", i);
          const known = rows.has("b", i);
          const frac = !known ? 0 : Number.isFinite(v) ? (maxDrift > 0 ? v / maxDrift : 0) : 1;
          // The bar shares the cell with its number: it spans what the text leaves.
          bar.style.width = `calc((100% - 64px) * ${frac.toFixed(3)})`;
          bar.classList.toggle("vl-mh-drift-nonfinite", known && !Number.isFinite(v));
          setText(text, known ? statText(v) : "");
        },
        sortValue: (i) => (rows.has("b", i) ? (Number.isFinite(rows.get("relative_l2", i)) ? rows.get("relative_l2", i) : Infinity) : NaN),
      });
      cols.push(statColumn("mh_cosine", "Cosine", "Cosine similarity of A's and B's outputs", (i) => rows.get("cosine", i)));
    }
    return cols;
  }

  function buildTable(): void {
    mt?.dispose();
    mt = createModuleTable(model, {
      // The statistics are what this view is for: of the module columns keep type and size.
      title: null, height: 360, extraColumns: columns(), baseColumns: ["type", "direct_parameters"],
      rowClass: (i) => (rows.get("origin", i) === 1 ? "vl-mh-origin" : rows.get("reached", i) === 1 ? "vl-mh-reached" : ""),
    });
    replaceChildren(tableHost, mt.el);
  }

  function indexOfPath(path: string): number {
    // The module table decodes paths; ask its view through the rows it shows.
    return mt ? mt.indexOf(path) : -1;
  }

  /** "Show in table": select the origin (its detail opens below) and scroll to its row. */
  function revealOrigin(): void {
    const origin = model.get("health")?.origin;
    if (!origin || !mt) return;
    const i = indexOfPath(origin.module_path);
    if (i < 0) return;
    model.set("selected_paths", [origin.module_path]);
    model.save_changes();
    mt.reveal(i);
    showDetail();
  }

  function loadOrigin(): void {
    const h0 = model.get("health") ?? {};
    const origin = h0.origin;
    const parts: (Node | string)[] = [];
    if (origin) {
      const go = h("button", { class: "vl-button vl-mh-goto", type: "button" }, "Show in table");
      go.addEventListener("click", revealOrigin);
      parts.push(
        h("b", {}, "First non-finite value: "), h("code", { class: "vl-mh-origin-path" }, origin.module_path),
        ` (call ${origin.call_index}): `,
        origin.input_nonfinite
          ? `no module produced them: its inputs already held ${nonFiniteText(origin.inputs)} (the model's input, or code between modules); its output has `
          : "its inputs were finite, its output has ",
        nonFiniteText(origin.outputs), ". Its mean, std, min and max count only the finite values.",
        origin.reached.length ? ` It then reached ${formatNumber(origin.reached.length)} module${origin.reached.length === 1 ? "" : "s"}.` : "",
        " ", go,
      );
    } else if (h0.mode && h0.mode !== "empty") {
      parts.push("No NaN or Inf found in this forward.");
    }
    replaceChildren(originBox, ...parts);
    originBox.hidden = parts.length === 0;
    originBox.classList.toggle("vl-mh-origin-found", Boolean(origin));
    const unknown = h0.unknown_paths ?? [];
    const unpaired = h0.unpaired_paths ?? [];
    const truncated = h0.walk_truncated ?? [];
    const batches = h0.batches == null ? "" : ` over ${formatNumber(h0.batches)} batch${h0.batches === 1 ? "" : "es"}`;
    modeNote.textContent = (h0.mode === "diff"
      ? "A vs B" + (h0.first_divergent ? ` · first divergent: ${h0.first_divergent}` : " · no divergence")
      : h0.mode === "stats" ? `Output statistics${batches}` : "No statistics yet")
      + (unpaired.length ? ` · ${unpaired.length} module(s) in only one model` : "")
      + (unknown.length ? ` · ${unknown.length} record path(s) not in this model` : "")
      + (truncated.length ? ` · outputs of ${truncated.join(", ")} too large to walk entirely: their statistics cover part of them` : "");
  }

  function showDetail(): void {
    const selected = model.get("selected_paths") ?? [];
    const path = selected.length ? selected[selected.length - 1] : null;
    const i = path === null ? -1 : indexOfPath(path);
    if (i < 0 || !(rows.has("a", i) || rows.has("b", i))) {
      replaceChildren(detail, path === null ? "" : h("div", { class: "vl-muted" }, `No statistics for ${path}: it did not run in the analysed forward.`));
      return;
    }
    const sides: ("a" | "b")[] = mode === "diff" ? ["a", "b"] : ["a"];
    // One model has no "A": its only column is the module's output.
    const sideLabel = (s: "a" | "b") => (mode !== "diff" ? "output" : s === "a" ? "A" : "B");
    const head = h("div", { class: "vl-mh-facts-row vl-mh-facts-head" }, h("span", {}, ""), ...sides.map((s) => h("span", {}, sideLabel(s))));
    const line = (label: string, f: (s: "a" | "b") => string) => h("div", { class: "vl-mh-facts-row" }, h("span", { class: "vl-mh-fact-key" }, label), ...sides.map((s) => h("span", { class: "vl-mono" }, rows.has(s, i) ? f(s) : "—")));
    const facts = h("div", { class: "vl-mh-facts" }, head,
      line("values", (s) => formatNumber(rows.get(`${s}_count`, i))),
      line("finite values", (s) => formatNumber(rows.get(`${s}_count`, i) - rows.nonFinite(s, i))),
      ...(["mean", "std", "min", "max", "abs_max"] as const).map((k) => line(`${k} (finite)`, (s) => statText(rows.get(`${s}_${k}`, i)))),
      line("zeros", (s) => `${statText(100 * rows.get(`${s}_zero_fraction`, i))} %`),
      line("NaN", (s) => formatNumber(rows.get(`${s}_nan_count`, i))),
      line("+Inf", (s) => formatNumber(rows.get(`${s}_posinf_count`, i))),
      line("−Inf", (s) => formatNumber(rows.get(`${s}_neginf_count`, i))),
    );
    const drift = mode === "diff" && rows.has("b", i)
      ? h("div", { class: "vl-mh-drift-facts vl-mono" },
        `relative L2 ${statText(rows.get("relative_l2", i))} · max |a−b| ${statText(rows.get("max_abs_diff", i))} · cosine ${statText(rows.get("cosine", i))}`
        + (rows.get("calls", i) > 1 ? ` (most drifted of ${rows.get("calls", i)} calls)` : ""))
      : null;
    const boxes = summaryBoxesSvg(sides.filter((s) => rows.has(s, i)).map((s) => ({
      label: mode === "diff" ? sideLabel(s) : "", // one box needs no name
      min: rows.get(`${s}_min`, i), max: rows.get(`${s}_max`, i), mean: rows.get(`${s}_mean`, i), std: rows.get(`${s}_std`, i),
    })));
    replaceChildren(detail,
      h("div", { class: "vl-mh-detail-title" }, "Output of ", h("code", {}, path!)),
      h("div", { class: "vl-mh-detail-body" }, facts, h("div", { class: "vl-mh-boxes" }, boxes,
        h("div", { class: "vl-muted vl-mh-boxes-note" }, "whisker: finite min to max · box: mean ± std of the finite values"))),
      drift);
  }

  function loadHealth(): void {
    const payload = model.get("health") ?? {};
    const newMode = payload.mode ?? "empty";
    rows = new HealthRows(payload.table);
    maxDrift = rows.maxDrift();
    const rebuild = newMode !== mode || !mt;
    mode = newMode;
    if (rebuild) buildTable();
    else mt!.table.refresh();
    loadOrigin();
    showDetail();
  }

  function loadCanAnalyze(): void {
    analyzeButton.hidden = !model.get("can_analyze");
  }

  analyzeButton.addEventListener("click", () => {
    analyzeButton.disabled = true;
    status.clearError();
    progress.textContent = "Analyzing…";
    client.request("analyze", {}, { onProgress: (done, total) => { progress.textContent = `Analyzing… ${done} / ${total}`; } })
      .catch((err) => { if (!err.cancelled) status.showError(err.message, err.traceback); })
      .finally(() => { analyzeButton.disabled = false; progress.textContent = ""; });
  });

  const on = (event: string, fn: () => void) => { model.on(event, fn); disposers.push(() => model.off(event, fn)); };
  on("change:health", loadHealth);
  on("change:selected_paths", showDetail);
  on("change:modules", () => { loadOrigin(); showDetail(); });
  on("change:can_analyze", loadCanAnalyze);
  mode = "";
  loadHealth();
  loadCanAnalyze();

  return () => {
    stopScheme();
    for (const d of disposers) d();
    mt?.dispose();
    client.dispose();
    status.dispose();
    root.remove();
  };
}

export default { render };
