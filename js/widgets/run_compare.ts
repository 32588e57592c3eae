// Run comparison view (vinlens/widgets/run_compare.py): where two training runs part ways.
// Both runs' every-step loss and gradient norm share one chart each (A solid, B dashed), the
// first divergent step marked; the engine's verdict names the step, rank, module, field,
// both values and the likely cause; a table of the modules in production order shows when
// each one's weights, gradients and outputs first differ and a strip of its relative
// difference |a-b| / max(|a|,|b|) over the steps (log colour scale; equal steps blank), the
// divergent module's row highlighted. "Go to module" picks it in the shared selection
// (`selected_paths`), as the other views do. Everything drawn comes from the kernel's
// records; kernel strings only ever become text nodes.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./run_compare.css";
import { gradientCss, type ColormapName } from "../lib/colormap";
import { svg } from "../lib/charts";
import { h, replaceChildren } from "../lib/dom";
import { decodeArray, decodeFloat, formatNumber } from "../lib/payload";
import { statusView } from "../lib/status";
import { sharedCurves, stepX, type Buckets } from "../lib/step-curves";
import { LogHeatmap, paintStrip as paintRowStrip } from "../lib/log-heatmap";
import { setText, VirtualTable, type VTColumn } from "../lib/virtual-table";

type WireFloat = number | { $float: string } | null;

/** Each run's every-step curves in buckets (training_monitor_payload.series_payload). */
export interface SeriesPayload {
  steps?: any;
  steps_total?: number;
  last_step?: number | null;
  grad_norm_lo?: any; grad_norm_hi?: any; grad_norm_bad?: any;
  loss_lo?: any; loss_hi?: any; loss_bad?: any;
}

/** vinlens.health.RunDivergence (run_compare_payload.divergence_payload); only `note` when
 * one run is a live monitor without a run log. */
export interface Verdict {
  identical?: boolean;
  steps_compared?: number;
  ranks?: number[];
  first_step?: number | null;
  rank?: number | null;
  cause?: string | null;
  module?: string | null;
  field?: string | null;
  value_a?: WireFloat;
  value_b?: WireFloat;
  unmatched?: string[];
  note?: string | null;
  module_paths?: string[];
  module_weights?: any;
  module_outputs?: any;
  module_grads?: any;
}

export interface DifferencePayload {
  field?: string;
  paths?: string[];
  values?: any;
  /** Each column's first step (more steps than columns when thinned). */
  steps?: any;
  samples?: number;
  step_range?: number[];
  /** Why there is no heatmap for this field (the engine's reason). */
  message?: string;
}

export interface RunInfo { label: string; live: boolean }

export interface RunCompareModel {
  runs: { a?: RunInfo; b?: RunInfo; ranks?: number[]; rank?: number };
  curves: { a?: SeriesPayload; b?: SeriesPayload };
  verdict: Verdict;
  difference: DifferencePayload;
  fields: string[];
  field: string;
  rank: number;
  selected_paths: string[];
  status: string;
  error: string;
  error_traceback: string;
}

const CMAP: ColormapName = "magma";

/** What each cause the engine names means, in a user's words. */
export const CAUSES: Record<string, string> = {
  init: "the initial weights differ",
  data: "the inputs differ",
  optimizer: "the gradients agreed but the update did not (optimizer)",
  forward: "the forward differs on equal weights and inputs",
  backward: "the backward differs on an equal forward",
};

export const FIELD_LABELS: Record<string, string> = {
  grad_norm: "gradient norm",
  weight_norm: "weight norm",
  std: "output std (sampled steps)",
};

/** The verdict in one sentence (and a second for the note). */
export function verdictText(v: Verdict): string {
  if (v.identical === undefined) return v.note ?? "Waiting for both runs.";
  const ranks = v.ranks?.length ? ` on rank${v.ranks.length > 1 ? "s" : ""} ${v.ranks.join(", ")}` : "";
  if (v.identical) {
    return `The runs are identical: ${formatNumber(v.steps_compared ?? 0)} steps compared${ranks}.`
      + (v.note ? ` ${v.note}` : "");
  }
  const where = v.first_step !== null && v.first_step !== undefined ? `step ${formatNumber(v.first_step)}` : "an unknown step";
  const rank = v.rank !== null && v.rank !== undefined && (v.ranks?.length ?? 0) > 1 ? ` (rank ${v.rank})` : "";
  const what = v.field ? `${v.field}${v.module ? ` of ${v.module}` : ""}` : v.module ?? "";
  const values = v.value_a !== null && v.value_a !== undefined
    ? `: A ${formatNumber(decodeFloat(v.value_a))}, B ${formatNumber(decodeFloat(v.value_b ?? null))}`
    : "";
  const cause = v.cause ? ` Likely cause: ${CAUSES[v.cause] ?? v.cause}.` : "";
  const note = v.note ? ` ${v.note}` : "";
  return `The runs part ways at ${where}${rank}${what ? `; ${what} differs first${values}` : ""}.${cause}${note}`;
}

/** A relative-difference heatmap: log10 of positive finite values; 0 (equal) stays out of
 * the scale; a difference that is not a number is marked teal. */
export class DifferenceMap extends LogHeatmap {
  constructor(rows: number, cols: number, values: ArrayLike<number>) {
    super(rows, cols, values, { cmap: CMAP, mark: [0, 160, 160, 255], markNaN: true, empty: [-1, 0], singleAtTop: true });
  }
}

/** Decode one run's buckets of one curve, or null when there is none. */
export function buckets(series: SeriesPayload | undefined, name: "loss" | "grad_norm"): Buckets | null {
  const s = series as Record<string, any> | undefined;
  const node = (key: string) => (s?.[key]?.$array ? decodeArray(s[key]).data : null);
  const steps = node("steps");
  const lo = node(`${name}_lo`);
  const hi = node(`${name}_hi`);
  const bad = node(`${name}_bad`);
  return steps && lo && hi && bad && steps.length ? { steps, lo, hi, bad } : null;
}

/** The step axis both runs' curves share. */
export function stepSpan(a: SeriesPayload | undefined, b: SeriesPayload | undefined): [number, number] {
  const firsts: number[] = [];
  const lasts: number[] = [];
  for (const s of [a, b]) {
    const steps = s?.steps?.$array ? decodeArray(s.steps).data : null;
    if (!steps || !steps.length) continue;
    firsts.push(Number(steps[0]));
    lasts.push(Number(s?.last_step ?? steps[steps.length - 1]));
  }
  return firsts.length ? [Math.min(...firsts), Math.max(...lasts)] : [0, 0];
}

/** A run's label as shown: a long path keeps its last two parts (the full one is the title). */
export function shortLabel(label: string, max = 36): string {
  if (label.length <= max) return label;
  const parts = label.split("/").filter((p) => p);
  const tail = parts.slice(-2).join("/");
  return `…/${tail.length > max ? tail.slice(-max) : tail}`;
}

function stepText(step: number): string {
  return step < 0 ? "—" : formatNumber(step);
}

function render({ model, el }: { model: AnyModel<RunCompareModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  let paths: string[] = [];
  let map: DifferenceMap | null = null;
  let firstSteps = new Map<string, [number, number, number]>();
  let divergentRow = -1;

  const labelA = h("span", { class: "vl-rc-run vl-rc-run-a" });
  const labelB = h("span", { class: "vl-rc-run vl-rc-run-b" });
  const rankSelect = h("select", { class: "vl-rc-rank", "aria-label": "Rank shown" });
  const rankLabel = h("label", { class: "vl-rc-rank-label" }, "rank ", rankSelect);
  const toolbar = h("div", { class: "vl-toolbar vl-rc-toolbar" }, h("span", { class: "vl-title" }, "Run comparison"), labelA, labelB, rankLabel);
  const verdictLine = h("span", { class: "vl-rc-verdict-text" });
  const unmatched = h("span", { class: "vl-muted vl-rc-unmatched" });
  const gotoButton = h("button", { class: "vl-button vl-rc-goto", type: "button", title: "Pick the divergent module (shared with the other views linked to the same selection) and scroll the table to it" }, "Go to module");
  const verdictBox = h("div", { class: "vl-rc-verdict", role: "status", "aria-live": "polite" }, h("div", { class: "vl-rc-verdict-body" }, verdictLine, unmatched), gotoButton);
  const curves = h("div", { class: "vl-rc-curves" });
  const fieldSelect = h("select", { class: "vl-rc-field", "aria-label": "Statistic compared" });
  const legend = h("span", { class: "vl-rc-legend" });
  const mapHeader = h("div", { class: "vl-rc-map-header" }, h("span", { class: "vl-rc-map-title" }, "Relative difference of "), fieldSelect, legend);
  const stepsLine = h("span", { class: "vl-muted vl-rc-steps" });
  const tableHost = h("div", { class: "vl-rc-table" });
  const root = h("div", { class: "vl-root vl-run-compare" }, toolbar, verdictBox, curves, mapHeader, stepsLine, tableHost, status.el);
  const stopScheme = mountRoot(el, root);

  const columns: VTColumn[] = [
    { key: "path", label: "Module", minWidth: 160, grow: 1, title: "Module path, in production order" },
    { key: "weights", label: "Weights from", minWidth: 96, align: "right", title: "First step where the module's own weight norm differs (— : never)" },
    { key: "grads", label: "Grads from", minWidth: 88, align: "right", title: "First step where the norm of the module's own parameter gradients differs" },
    { key: "outputs", label: "Outputs from", minWidth: 96, align: "right", title: "First sampled step where the module's output summary differs" },
    { key: "map", label: "Relative difference over steps", minWidth: 220, grow: 2, title: "|a − b| / max(|a|, |b|) at each step, log colour scale; blank where the runs are equal (a column of several steps shows their largest)" },
  ];
  const table = new VirtualTable({
    columns, rowHeight: 22, height: 360, label: "Modules of both runs, relative difference over steps",
    renderCell: (row, key, cell) => renderCell(row, key, cell),
    rowClass: (row) => (row === divergentRow ? "vl-rc-divergent" : (model.get("selected_paths") ?? []).includes(paths[row]) ? "vl-rc-picked" : ""),
  });
  tableHost.append(table.el);

  function paintStrip(cell: HTMLElement, row: number): void {
    paintRowStrip(cell, row, map, "vl-rc-strip");
  }

  function renderCell(row: number, key: string, cell: HTMLElement): void {
    const first = firstSteps.get(paths[row]);
    switch (key) {
      case "path": setText(cell, paths[row] ?? ""); cell.title = paths[row] ?? ""; break;
      case "weights": setText(cell, first ? stepText(first[0]) : ""); break;
      case "outputs": setText(cell, first ? stepText(first[1]) : ""); break;
      case "grads": setText(cell, first ? stepText(first[2]) : ""); break;
      case "map": paintStrip(cell, row); break;
    }
  }

  function chart(name: "loss" | "grad_norm", label: string, first: number, last: number, marked: number | null): HTMLElement | null {
    const all = model.get("curves") ?? {};
    const runs = [buckets(all.a, name), buckets(all.b, name)];
    const present = runs.filter((r): r is Buckets => r !== null);
    if (!present.length) return null;
    const shared = sharedCurves(present, first, last);
    const lines: SVGElement[] = [];
    let k = 0;
    runs.forEach((run, i) => {
      if (!run) return;
      const geometry = shared.curves[k++];
      const cls = i === 0 ? "vl-rc-line-a" : "vl-rc-line-b";
      for (const x of geometry.bad) lines.push(svg("line", { class: `vl-rc-bad ${cls}-bad`, x1: x.toFixed(1), x2: x.toFixed(1), y1: 0, y2: 100 }));
      for (const points of geometry.lines) {
        lines.push(points.length > 1
          ? svg("polyline", { class: `vl-rc-line ${cls}`, points: points.join(" ") })
          : svg("circle", { class: `vl-rc-dot ${cls}`, cx: points[0].split(",")[0], cy: points[0].split(",")[1], r: 1.5 }));
      }
    });
    const marks: SVGElement[] = [];
    if (marked !== null) {
      const x = stepX(marked, first, last).toFixed(1);
      marks.push(svg("line", { class: "vl-rc-first", x1: x, x2: x, y1: 0, y2: 100 }));
    }
    const body = svg("svg", { class: "vl-rc-curve-svg", viewBox: "0 0 1000 100", preserveAspectRatio: "none", "aria-hidden": "true" }, ...marks, ...lines);
    const range = Number.isFinite(shared.lo) ? `${formatNumber(shared.lo)} – ${formatNumber(shared.hi)}${shared.log ? " (log)" : ""}` : "no finite value";
    return h("div", { class: "vl-rc-curve", "data-curve": name },
      h("span", { class: "vl-rc-curve-label" }, label, " ", h("span", { class: "vl-muted" }, range)), body);
  }

  function drawCurves(): void {
    const all = model.get("curves") ?? {};
    const [first, last] = stepSpan(all.a, all.b);
    const v = model.get("verdict") ?? {};
    const marked = v.identical === false && typeof v.first_step === "number" ? v.first_step : null;
    const shown = [chart("loss", "loss", first, last, marked), chart("grad_norm", "grad norm (all parameters)", first, last, marked)]
      .filter((c): c is HTMLElement => c !== null);
    const ticks = shown.length
      ? [h("span", { class: "vl-rc-tick vl-rc-tick-first" }, `step ${formatNumber(first)}`),
        ...(marked !== null ? [markTick(marked, first, last)] : []),
        h("span", { class: "vl-rc-tick vl-rc-tick-last" }, `step ${formatNumber(last)}`)]
      : [h("span", { class: "vl-muted" }, "no step logged yet")];
    replaceChildren(curves, ...shown, h("div", { class: "vl-rc-axis" }, ...ticks));
  }

  function markTick(step: number, first: number, last: number): HTMLElement {
    const tick = h("span", { class: "vl-rc-tick vl-rc-tick-first-divergent" }, `parts at ${formatNumber(step)}`);
    tick.style.left = `${stepX(step, first, last) / 10}%`;
    return tick;
  }

  function drawRuns(): void {
    const runs = model.get("runs") ?? {};
    for (const [el, run, name] of [[labelA, runs.a, "A"], [labelB, runs.b, "B"]] as const) {
      setText(el, run ? `${name}: ${shortLabel(run.label)}` : name);
      el.title = run?.label ?? "";
    }
    const ranks = runs.ranks ?? [];
    rankLabel.hidden = ranks.length < 2;
    const current = Array.from(rankSelect.options).map((o) => o.value).join(",");
    if (current !== ranks.join(",")) replaceChildren(rankSelect, ...ranks.map((r) => h("option", { value: r }, String(r))));
    rankSelect.value = String(model.get("rank") ?? runs.rank ?? 0);
  }

  function drawVerdict(): void {
    const v = model.get("verdict") ?? {};
    setText(verdictLine, verdictText(v));
    verdictBox.classList.toggle("vl-rc-identical", v.identical === true);
    verdictBox.classList.toggle("vl-rc-diverged", v.identical === false);
    const extra = v.unmatched ?? [];
    setText(unmatched, extra.length ? `${extra.length} module${extra.length > 1 ? "s" : ""} logged by one run only: ${extra.slice(0, 5).join(", ")}${extra.length > 5 ? ", …" : ""}` : "");
    const mods = v.module_paths ?? [];
    const col = (node: any) => (node?.$array ? decodeArray(node).data : []);
    const w = col(v.module_weights);
    const o = col(v.module_outputs);
    const g = col(v.module_grads);
    firstSteps = new Map(mods.map((p, i) => [p, [Number(w[i] ?? -1), Number(o[i] ?? -1), Number(g[i] ?? -1)]]));
    divergentRow = v.module ? paths.indexOf(v.module) : -1;
    gotoButton.hidden = divergentRow < 0;
  }

  function drawDifference(): void {
    const d = model.get("difference") ?? {};
    paths = d.paths ?? [];
    const steps = d.steps?.$array ? decodeArray(d.steps).data : [];
    const values = d.values?.$array ? decodeArray(d.values).data : null;
    map = values ? new DifferenceMap(paths.length, steps.length, values) : null;
    const fields = model.get("fields") ?? [];
    const current = Array.from(fieldSelect.options).map((o) => o.value).join(",");
    if (current !== fields.join(",")) replaceChildren(fieldSelect, ...fields.map((f) => h("option", { value: f }, FIELD_LABELS[f] ?? f)));
    fieldSelect.value = model.get("field");
    const bar = h("span", { class: "vl-rc-legend-bar", "aria-hidden": "true" });
    bar.style.background = gradientCss(CMAP);
    replaceChildren(legend, ...(map ? ["equal", h("span", { class: "vl-rc-legend-equal", "aria-hidden": "true" }), " ", formatNumber(10 ** map.vmin), bar, formatNumber(10 ** map.vmax)] : []));
    const samples = d.samples ?? steps.length;
    const range = d.step_range ?? [];
    setText(stepsLine, !values ? d.message ?? "" : range.length === 2
      ? `${paths.length} modules · steps ${formatNumber(range[0])}–${formatNumber(range[1])}`
        + (samples > steps.length ? ` · ${formatNumber(samples)} steps in ${formatNumber(steps.length)} columns (largest of each)` : "")
      : `${paths.length} modules · no step both runs logged`);
    mapHeader.hidden = !values && !d.message;
    tableHost.hidden = !values;
  }

  function sync(): void {
    drawRuns();
    drawDifference();
    drawVerdict();
    drawCurves();
    table.setRowCount(paths.length);
    table.refresh();
  }

  function goTo(): void {
    const module = model.get("verdict")?.module;
    if (!module || divergentRow < 0) return;
    model.set("selected_paths", [module]);
    model.save_changes();
    table.setCursor(divergentRow, true);
  }

  rankSelect.addEventListener("change", () => { model.set("rank", Number(rankSelect.value)); model.save_changes(); });
  fieldSelect.addEventListener("change", () => { model.set("field", fieldSelect.value); model.save_changes(); });
  gotoButton.addEventListener("click", goTo);
  const onPicked = () => table.refresh();
  const names = ["change:runs", "change:curves", "change:verdict", "change:difference", "change:fields", "change:field", "change:rank"];
  for (const name of names) model.on(name, sync);
  model.on("change:selected_paths", onPicked);
  sync();
  return () => {
    stopScheme();
    for (const name of names) model.off(name, sync);
    model.off("change:selected_paths", onPicked);
    table.destroy();
    status.dispose();
  };
}

export default { render };
