// Training monitor view (vinlens/widgets/training_monitor.py): one row per watched module,
// with its precision headroom, its latest gradient norm and output std, and a heatmap strip
// of each over the sampled steps (log colour scale; thinned by the kernel to a bounded number
// of columns, each the largest value of its steps). For a run log, the every-step loss and
// gradient norm are curves above the table and a selector picks the rank. Non-finite steps
// are marks on the step axis; the selected event's origin is named above the table and its
// row highlighted (the modules it reached tinted); with a model, "Replay" re-executes the
// step in the kernel and the recomputed origin is shown beside the recorded one. Everything
// drawn comes from the kernel's records; kernel strings only ever become text nodes.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./training_monitor.css";
import { gradientCss, type ColormapName } from "../lib/colormap";
import { svg } from "../lib/charts";
import { h, replaceChildren } from "../lib/dom";
import { decodeArray, decodeFloat, formatNumber, type NDArray } from "../lib/payload";
import { CommandClient, CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";
import { LogHeatmap as BaseLogHeatmap, paintStrip as paintRowStrip } from "../lib/log-heatmap";
import { setText, VirtualTable, type VTColumn } from "../lib/virtual-table";

type WireFloat = number | { $float: string } | null;
interface Summary { [field: string]: WireFloat }
interface TensorTrace { tensor_path: string; shape: number[]; dtype: string; summary: Summary }
/** vinlens.health.GradientOrigin as to_jsonable sends it. */
export interface GradientOrigin {
  module_path: string;
  call_index: number;
  grad_outputs: TensorTrace[];
  grad_inputs: TensorTrace[];
  parameter_paths: string[];
  propagated_to: string[];
  forward_origin: { module_path: string; call_index: number; input_nonfinite: boolean } | null;
  /** GradientOrigin.entered_nonfinite: the gradient was already NaN/Inf entering the model. */
  entered_nonfinite: boolean;
}
export interface NonFiniteEvent { step: number; origin: GradientOrigin | null; rank?: number; replay?: boolean }

export interface MonitorPayload {
  paths?: string[];
  /** Each column's first sampled step. */
  steps?: any;
  /** Sampled steps in the columns (more than the columns when thinned), and their first and last. */
  samples?: number;
  step_range?: number[];
  source?: "monitor" | "run";
  ranks?: number[];
  rank?: number;
  log_dir?: string;
  last_nonfinite_step?: number | null;
  grad_norm?: any;
  std?: any;
  steps_run?: number;
  /** Non-finite steps so far (past the kept events too), and the kept ones. */
  events_total?: number;
  events_kept?: number;
  every?: number;
  on_nonfinite?: string;
}
/** Every-step curves in buckets of consecutive steps (TrainingRun.step_series). */
export interface SeriesPayload {
  steps?: any;
  steps_total?: number;
  last_step?: number | null;
  grad_norm_lo?: any; grad_norm_hi?: any; grad_norm_bad?: any;
  loss_lo?: any; loss_hi?: any; loss_bad?: any;
}
/** A replay's recomputed origin (the `replays` traitlet, keyed "rank:step"). */
export interface ReplayEntry { step: number; rank: number; origin: GradientOrigin | null; agrees: boolean }
export interface PrecisionPayload { dtype?: string; headroom?: any; first_overflow_path?: string | null }

export interface TrainingMonitorModel {
  history: MonitorPayload;
  /** The first EVENTS_KEPT events; a new one also arrives alone as an "events" message. */
  events: NonFiniteEvent[];
  series: SeriesPayload;
  rank: number;
  replays: Record<string, ReplayEntry>;
  precision: PrecisionPayload;
  selected_event: number;
  status: string;
  error: string;
  error_traceback: string;
}

const CMAP: ColormapName = "viridis";
/** Modules with less headroom than this (bits) are highlighted. */
export const LOW_HEADROOM_BITS = 1;

/** One heatmap of the monitor: gradient norms or activation std on a log scale, an
 * infinity marked red (NaN is a missing sample: transparent). */
export class LogHeatmap extends BaseLogHeatmap {
  constructor(rows: number, cols: number, values: ArrayLike<number>) {
    super(rows, cols, values, { cmap: CMAP, mark: [220, 20, 60, 255], markNaN: false, empty: [0, 1], singleAtTop: false });
  }
}

/** Position in [0, 1] of `step` on an axis from the first to the last sampled step. */
export function stepPosition(step: number, first: number, last: number): number {
  if (!(last > first)) return 0.5;
  return Math.min(1, Math.max(0, (step - first) / (last - first)));
}

/** "3 NaN, 1 +Inf" over a set of gradient traces. */
export function nonFiniteText(traces: TensorTrace[]): string {
  if (!traces.length) return "none seen";
  const total = (name: string) => traces.reduce((sum, t) => sum + (decodeFloat(t.summary[name]) || 0), 0);
  const parts: string[] = [];
  const nan = total("nan_count");
  const pos = total("posinf_count");
  const neg = total("neginf_count");
  if (nan) parts.push(`${formatNumber(nan)} NaN`);
  if (pos) parts.push(`${formatNumber(pos)} +Inf`);
  if (neg) parts.push(`${formatNumber(neg)} −Inf`);
  return parts.length ? parts.join(", ") : "finite";
}

/** One line naming where an event's gradient became non-finite. */
export function originText(event: NonFiniteEvent): string {
  const o = event.origin;
  if (!o) return `Step ${event.step}: non-finite gradients; the replay stayed finite (the step does not repeat).`;
  if (o.forward_origin) {
    const how = o.forward_origin.input_nonfinite ? "received NaN/Inf inputs" : "made NaN/Inf in the forward";
    return `Step ${event.step}: ${o.module_path} (call ${o.call_index}) ${how}; the backward only spread it.`;
  }
  if (o.entered_nonfinite) {
    // No module's backward made it: the loss (or code outside the modules) did.
    return `Step ${event.step}: the gradient was already non-finite where it entered the model `
      + `(${nonFiniteText(o.grad_outputs)}; made by the loss or code outside the modules), first reaching ${o.module_path} (call ${o.call_index}).`;
  }
  const params = o.parameter_paths.length ? `; parameters ${o.parameter_paths.join(", ")}` : "";
  return `Step ${event.step}: gradient first non-finite in ${o.module_path} (call ${o.call_index}): `
    + `incoming ${nonFiniteText(o.grad_outputs)}, to its inputs ${nonFiniteText(o.grad_inputs)}${params}.`;
}

/** The kept events: the traitlet's, or those already received alone when they go further. */
export function mergeEvents(synced: NonFiniteEvent[], received: NonFiniteEvent[]): NonFiniteEvent[] {
  return received.length > synced.length && synced.every((e, i) => e.step === received[i].step && e.rank === received[i].rank) ? received : synced;
}

function headroomText(bits: number): string {
  if (Number.isNaN(bits)) return "";
  if (bits === Infinity) return "∞";
  return bits.toFixed(1);
}

/** One curve: SVG polylines of the buckets' highest and lowest finite values (a band where
 * a bucket holds several steps), broken where a bucket has none, and a red tick where a
 * bucket holds a non-finite value. x is the step on [first, last]; y is log10 when every
 * finite value is positive. Coordinates are in a 1000 x 100 box stretched to the width. */
export interface CurveGeometry { lines: string[][]; bad: number[]; lo: number; hi: number; log: boolean }

export function curveGeometry(
  steps: ArrayLike<number>, lo: ArrayLike<number>, hi: ArrayLike<number>, bad: ArrayLike<number>,
  first: number, last: number,
): CurveGeometry {
  const n = steps.length;
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    for (const v of [Number(lo[i]), Number(hi[i])]) {
      if (Number.isFinite(v)) { if (v < min) min = v; if (v > max) max = v; }
    }
  }
  const log = min > 0 && Number.isFinite(max);
  const f = (v: number) => (log ? Math.log10(v) : v);
  let y0 = Number.isFinite(min) ? f(min) : 0;
  let y1 = Number.isFinite(max) ? f(max) : 1;
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const x = (step: number) => (1000 * stepPosition(step, first, last)).toFixed(1);
  const y = (v: number) => (96 - 92 * (f(v) - y0) / (y1 - y0)).toFixed(1);
  const lines: string[][] = [];
  for (const values of [hi, lo]) {
    let run: string[] = [];
    for (let i = 0; i < n; i++) {
      const v = Number(values[i]);
      if (Number.isFinite(v)) run.push(`${x(Number(steps[i]))},${y(v)}`);
      else if (run.length) { lines.push(run); run = []; }
    }
    if (run.length) lines.push(run);
  }
  const ticks: number[] = [];
  for (let i = 0; i < n; i++) if (Number(bad[i])) ticks.push(1000 * stepPosition(Number(steps[i]), first, last));
  return { lines, bad: ticks, lo: min, hi: max, log };
}

/** The counters line: steps, sampling, columns shown, non-finite steps. */
export function countersText(p: MonitorPayload, columns: number, listed: number): string {
  const samples = p.samples ?? columns;
  const parts = [`step ${formatNumber(p.steps_run ?? 0)}`, `sampled every ${p.every ?? "?"}`];
  parts.push(samples > columns
    ? `${formatNumber(samples)} samples in ${formatNumber(columns)} columns (largest of each)`
    : `${columns} samples shown`);
  const total = Math.max(p.events_total ?? 0, listed);
  const list = total > listed && listed ? ` (first ${listed} listed)` : "";
  parts.push(total ? `${formatNumber(total)} non-finite step${total > 1 ? "s" : ""}${list}` : "no non-finite step");
  return parts.join(" · ");
}

/** The line under a replayed event: the recomputed origin and whether it is the recorded one. */
export function replayText(entry: ReplayEntry): string {
  const found = originText({ step: entry.step, origin: entry.origin }).replace(/^Step \d+: /, "");
  return `${found} ${entry.agrees ? "Same module, call and parameters as recorded." : "Not the recorded origin."}`;
}

function render({ model, el }: { model: AnyModel<TrainingMonitorModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  const client = new CommandClient(model);
  let payload: MonitorPayload = {};
  let paths: string[] = [];
  let steps: ArrayLike<number> = [];
  let events: NonFiniteEvent[] = [];
  let maps: { grad: LogHeatmap; std: LogHeatmap } | null = null;
  let gradValues: ArrayLike<number> = [];
  let stdValues: ArrayLike<number> = [];
  let headroom: ArrayLike<number> = [];
  let rowOf = new Map<string, number>();
  let reached = new Set<string>();
  let originRow = -1;
  let replaying = "";

  const source = h("span", { class: "vl-muted vl-tm-source" });
  const rankSelect = h("select", { class: "vl-tm-rank", "aria-label": "Rank shown" });
  const rankLabel = h("label", { class: "vl-tm-rank-label" }, "rank ", rankSelect);
  const counters = h("span", { class: "vl-muted vl-tm-counters" });
  const legends = h("span", { class: "vl-tm-legends" });
  const toolbar = h("div", { class: "vl-toolbar vl-tm-toolbar" }, h("span", { class: "vl-title" }, "Training monitor"), source, rankLabel, counters, legends);
  const eventSelect = h("select", { class: "vl-tm-events", "aria-label": "Non-finite step" });
  const gotoButton = h("button", { class: "vl-button vl-tm-goto", type: "button", title: "Scroll the table to the origin module" }, "Go to module");
  const replayButton = h("button", { class: "vl-button vl-tm-replay", type: "button", title: "Re-execute this step in the kernel from its replay bundle and find the origin again" }, "Replay");
  const originLine = h("span", { class: "vl-tm-origin-text" });
  const replayLine = h("span", { class: "vl-tm-replay-text" });
  const recorded = h("div", { class: "vl-tm-side" }, h("span", { class: "vl-tm-side-label" }, "Recorded"), originLine);
  const recomputed = h("div", { class: "vl-tm-side vl-tm-recomputed" }, h("span", { class: "vl-tm-side-label" }, "Replayed"), replayLine);
  const sides = h("div", { class: "vl-tm-sides" }, recorded, recomputed);
  const originBox = h("div", { class: "vl-tm-origin-box", role: "status", "aria-live": "polite" }, eventSelect, sides, replayButton, gotoButton);
  const curves = h("div", { class: "vl-tm-curves" });
  const axis = h("div", { class: "vl-tm-axis", "aria-label": "Sampled steps and non-finite events" });
  const tableHost = h("div", { class: "vl-tm-table" });
  const root = h("div", { class: "vl-root vl-training-monitor" }, toolbar, originBox, curves, axis, tableHost, status.el);
  const stopScheme = mountRoot(el, root);

  const strip = (key: string, label: string, title: string): VTColumn => ({ key, label, title, minWidth: 200, grow: 1 });
  const columns: VTColumn[] = [
    { key: "path", label: "Module", minWidth: 160, grow: 1, title: "Registered module path" },
    { key: "headroom", label: "Headroom", minWidth: 144, align: "right", title: `Bits of headroom below the target dtype's largest value (lowest over the module's calls); under ${LOW_HEADROOM_BITS} bit is highlighted` },
    { key: "grad", label: "Grad norm", minWidth: 88, align: "right", title: "L2 norm of the module's own parameters' gradients in the last column (the last sampled step, or the largest of the last column's steps)" },
    strip("grad_map", "Grad norm over steps", "Gradient norm at each sampled step, log colour scale (a column of several steps shows their largest)"),
    { key: "std", label: "Std", minWidth: 88, align: "right", title: "Std of the module's outputs in the last column" },
    strip("std_map", "Activation std over steps", "Output std at each sampled step, log colour scale (a column of several steps shows their largest)"),
  ];
  const table = new VirtualTable({
    columns, rowHeight: 22, height: 420, label: "Modules over training steps",
    renderCell: (row, key, cell) => renderCell(row, key, cell),
    rowClass: (row) => (row === originRow ? "vl-tm-origin" : reached.has(paths[row]) ? "vl-tm-reached" : ""),
  });
  tableHost.append(table.el);

  function last(values: ArrayLike<number>, row: number): number {
    const cols = steps.length;
    return cols ? Number(values[row * cols + cols - 1]) : NaN;
  }

  function paintStrip(cell: HTMLElement, row: number, map: LogHeatmap | undefined): void {
    paintRowStrip(cell, row, map, "vl-tm-strip");
  }

  function renderCell(row: number, key: string, cell: HTMLElement): void {
    switch (key) {
      case "path":
        setText(cell, paths[row] ?? "");
        cell.title = paths[row] ?? "";
        break;
      case "headroom": {
        const bits = Number(headroom[row] ?? NaN);
        setText(cell, headroomText(bits));
        cell.classList.toggle("vl-tm-low", bits < LOW_HEADROOM_BITS);
        break;
      }
      case "grad": {
        // NaN: the module has no parameters of its own (nothing to show, not a fault).
        const v = last(gradValues, row);
        setText(cell, Number.isNaN(v) ? "" : formatNumber(v));
        break;
      }
      case "std": setText(cell, steps.length ? formatNumber(last(stdValues, row)) : ""); break;
      case "grad_map": paintStrip(cell, row, maps?.grad); break;
      case "std_map": paintStrip(cell, row, maps?.std); break;
    }
  }

  const manyRanks = () => (payload.ranks?.length ?? 0) > 1;

  function selectedEvent(): NonFiniteEvent | null {
    if (!events.length) return null;
    const index = model.get("selected_event");
    return events[index >= 0 && index < events.length ? index : events.length - 1];
  }

  /** The step axis shared by the curves and the event marks: sampled and logged steps. */
  function stepSpan(): [number, number] {
    const series = model.get("series") ?? {};
    const range = payload.step_range ?? [];
    const firsts: number[] = [];
    const lasts: number[] = [];
    if (range.length === 2) { firsts.push(range[0]); lasts.push(range[1]); }
    const s: NDArray | null = series.steps?.$array ? decodeArray(series.steps) : null;
    if (s && s.data.length) { firsts.push(Number(s.data[0])); lasts.push(Number(series.last_step ?? s.data[s.data.length - 1])); }
    if (!firsts.length && steps.length) { firsts.push(Number(steps[0])); lasts.push(Number(steps[steps.length - 1])); }
    return firsts.length ? [Math.min(...firsts), Math.max(...lasts)] : [0, 0];
  }

  function eventLabel(event: NonFiniteEvent): string {
    return manyRanks() ? `step ${event.step} · rank ${event.rank ?? 0}` : `step ${event.step}`;
  }

  function drawAxis(): void {
    const [first, lastStep] = stepSpan();
    const selected = selectedEvent();
    const marks = events.map((event, i) => {
      const mark = h("button", {
        class: `vl-tm-mark${event === selected ? " vl-tm-mark-selected" : ""}`, type: "button",
        title: `${eventLabel(event)}: ${event.origin?.module_path ?? "origin not found"}`,
        "aria-label": `Non-finite ${eventLabel(event)}`,
        onclick: () => { model.set("selected_event", i); model.save_changes(); },
      });
      mark.style.left = `${100 * stepPosition(event.step, first, lastStep)}%`;
      return mark;
    });
    const any = steps.length || (model.get("series")?.steps_total ?? 0) > 0;
    const labels = any
      ? [h("span", { class: "vl-tm-tick vl-tm-tick-first" }, `step ${formatNumber(first)}`), h("span", { class: "vl-tm-tick vl-tm-tick-last" }, `step ${formatNumber(lastStep)}`)]
      : [h("span", { class: "vl-tm-tick vl-tm-tick-first" }, "no sampled step yet")];
    replaceChildren(axis, h("div", { class: "vl-tm-track" }, ...marks), ...labels);
  }

  function curve(name: string, label: string, series: SeriesPayload, first: number, lastStep: number): HTMLElement | null {
    const get = (key: string) => {
      const node = (series as any)[`${name}_${key}`];
      return node?.$array ? decodeArray(node).data : null;
    };
    const lo = get("lo");
    const hi = get("hi");
    const bad = get("bad");
    const s: NDArray | null = series.steps?.$array ? decodeArray(series.steps) : null;
    if (!s || !lo || !hi || !bad || !s.data.length) return null;
    const g = curveGeometry(s.data, lo, hi, bad, first, lastStep);
    const chart = svg("svg", { class: "vl-tm-curve-svg", viewBox: "0 0 1000 100", preserveAspectRatio: "none", "aria-hidden": "true" },
      ...g.bad.map((x) => svg("line", { class: "vl-tm-curve-bad", x1: x.toFixed(1), x2: x.toFixed(1), y1: 0, y2: 100 })),
      ...g.lines.map((points) => points.length > 1
        ? svg("polyline", { class: "vl-tm-curve-line", points: points.join(" ") })
        : svg("circle", { class: "vl-tm-curve-dot", cx: points[0].split(",")[0], cy: points[0].split(",")[1], r: 1.5 })),
    );
    const range = Number.isFinite(g.lo) ? `${formatNumber(g.lo)} – ${formatNumber(g.hi)}${g.log ? " (log)" : ""}` : "no finite value";
    const nonFinite = g.bad.length ? ` · ${g.bad.length} non-finite` : "";
    return h("div", { class: "vl-tm-curve", "data-curve": name },
      h("span", { class: "vl-tm-curve-label" }, label, " ", h("span", { class: "vl-muted" }, range + nonFinite)), chart);
  }

  function drawCurves(): void {
    const series = model.get("series") ?? {};
    const [first, lastStep] = stepSpan();
    const shown = [curve("loss", "loss", series, first, lastStep), curve("grad_norm", "grad norm (all parameters)", series, first, lastStep)].filter((c): c is HTMLElement => c !== null);
    curves.hidden = !shown.length;
    const total = series.steps_total ?? 0;
    const thinned = total > (series.steps?.$array?.shape?.[0] ?? total);
    curves.title = thinned ? `${formatNumber(total)} steps in buckets of consecutive steps: the band spans each bucket's lowest and highest value` : "";
    replaceChildren(curves, ...shown);
  }

  function showOrigin(): void {
    const event = selectedEvent();
    originBox.classList.toggle("vl-tm-has-event", !!event);
    eventSelect.hidden = events.length < 2;
    replaceChildren(eventSelect, ...events.map((e, i) => h("option", { value: i }, eventLabel(e))));
    if (event) eventSelect.value = String(events.indexOf(event));
    const text = event ? originText(event) : "No non-finite gradient so far.";
    setText(originLine, event && manyRanks() ? `Rank ${event.rank ?? 0}, ${text.charAt(0).toLowerCase()}${text.slice(1)}` : text);
    const path = event?.origin?.module_path;
    originRow = path !== undefined ? rowOf.get(path) ?? -1 : -1;
    reached = new Set(event?.origin?.propagated_to ?? []);
    gotoButton.hidden = originRow < 0;
    const key = event ? `${event.rank ?? 0}:${event.step}` : "";
    const entry = event ? (model.get("replays") ?? {})[key] : undefined;
    replayButton.hidden = !event?.replay;
    replayButton.disabled = replaying !== "";
    setText(replayButton, replaying === key && key ? "Replaying…" : entry ? "Replay again" : "Replay");
    recomputed.hidden = !entry;
    sides.classList.toggle("vl-tm-two", !!entry);
    recomputed.classList.toggle("vl-tm-agrees", !!entry?.agrees);
    recomputed.classList.toggle("vl-tm-differs", !!entry && !entry.agrees);
    setText(replayLine, entry ? replayText(entry) : "");
  }

  function legend(label: string, map: LogHeatmap | undefined): HTMLElement {
    const bar = h("span", { class: "vl-tm-legend-bar", "aria-hidden": "true" });
    bar.style.background = gradientCss(CMAP);
    const lo = map ? formatNumber(10 ** map.vmin) : "–";
    const hi = map ? formatNumber(10 ** map.vmax) : "–";
    return h("span", { class: "vl-tm-legend", title: `${label}: log colour scale` }, label, " ", lo, bar, hi);
  }

  function syncRanks(): void {
    const ranks = payload.ranks ?? [];
    rankLabel.hidden = ranks.length < 2;
    const current = Array.from(rankSelect.options).map((o) => o.value).join(",");
    if (current !== ranks.join(",")) replaceChildren(rankSelect, ...ranks.map((r) => h("option", { value: r }, String(r))));
    rankSelect.value = String(model.get("rank") ?? payload.rank ?? 0);
  }

  function drawCounters(): void {
    setText(counters, countersText(payload, steps.length, events.length));
    setText(source, payload.log_dir ?? "");
    source.title = payload.log_dir ? `run log ${payload.log_dir}` : "";
  }

  function sync(): void {
    payload = model.get("history") ?? {};
    paths = payload.paths ?? [];
    rowOf = new Map(paths.map((p, i) => [p, i]));
    const stepArray: NDArray | null = payload.steps?.$array ? decodeArray(payload.steps) : null;
    steps = stepArray?.data ?? [];
    const grad: NDArray | null = payload.grad_norm?.$array ? decodeArray(payload.grad_norm) : null;
    const std: NDArray | null = payload.std?.$array ? decodeArray(payload.std) : null;
    gradValues = grad?.data ?? [];
    stdValues = std?.data ?? [];
    maps = grad && std ? { grad: new LogHeatmap(paths.length, steps.length, gradValues), std: new LogHeatmap(paths.length, steps.length, stdValues) } : null;
    events = mergeEvents(model.get("events") ?? [], events);
    drawCounters();
    replaceChildren(legends, legend("grad norm", maps?.grad), legend("std", maps?.std));
    syncRanks();
    syncPrecision(false);
    showOrigin();
    drawCurves();
    drawAxis();
    table.setRowCount(paths.length);
    table.refresh();
  }

  function syncPrecision(refresh = true): void {
    const p = model.get("precision") ?? {};
    headroom = p.headroom?.$array ? decodeArray(p.headroom).data : [];
    const header = tableHost.querySelector('[data-key="headroom"] .vl-vt-hlabel');
    const short: Record<string, string> = { "torch.float16": "fp16", "torch.bfloat16": "bf16" };
    if (header) header.textContent = p.dtype ? `Headroom (${short[p.dtype] ?? p.dtype.replace("torch.", "")})` : "Headroom";
    if (refresh) table.refresh();
  }

  function onSelect(): void {
    showOrigin();
    drawAxis();
    table.refresh();
  }

  // The kernel sends each new event alone at once; the `events` traitlet follows later.
  function onMessage(msg: any): void {
    if (msg?.kind !== "events" || !Array.isArray(msg.events) || typeof msg.start !== "number") return;
    if (msg.start > events.length) return; // a gap: the traitlet brings the whole list
    events = [...events.slice(0, msg.start), ...msg.events];
    drawCounters();
    onSelect();
  }
  function onEvents(): void {
    events = mergeEvents(model.get("events") ?? [], events);
    drawCounters();
    onSelect();
  }

  async function replay(): Promise<void> {
    const event = selectedEvent();
    if (!event || replaying) return;
    replaying = `${event.rank ?? 0}:${event.step}`;
    showOrigin();
    try {
      await client.request("replay", { step: event.step, rank: event.rank ?? 0 });
    } catch (err) {
      // The kernel shows a failure in the error box (the `error` traitlet); a closed view
      // or a cancel needs no message.
      if (err instanceof CommandError && !err.cancelled && !model.get("error")) status.showError(err.message, err.traceback);
    } finally {
      replaying = "";
      showOrigin();
    }
  }

  eventSelect.addEventListener("change", () => { model.set("selected_event", Number(eventSelect.value)); model.save_changes(); });
  rankSelect.addEventListener("change", () => { model.set("rank", Number(rankSelect.value)); model.save_changes(); });
  gotoButton.addEventListener("click", () => { if (originRow >= 0) table.setCursor(originRow, true); });
  replayButton.addEventListener("click", () => { void replay(); });
  const onPrecision = () => syncPrecision();
  const onSeries = () => { drawCurves(); drawAxis(); };
  const onRank = () => syncRanks();
  model.on("change:history", sync);
  model.on("change:events", onEvents);
  model.on("change:series", onSeries);
  model.on("change:rank", onRank);
  model.on("change:replays", showOrigin);
  model.on("msg:custom", onMessage);
  model.on("change:precision", onPrecision);
  model.on("change:selected_event", onSelect);
  sync();
  return () => {
    stopScheme();
    model.off("change:history", sync);
    model.off("change:events", onEvents);
    model.off("change:series", onSeries);
    model.off("change:rank", onRank);
    model.off("change:replays", showOrigin);
    model.off("msg:custom", onMessage);
    model.off("change:precision", onPrecision);
    model.off("change:selected_event", onSelect);
    client.dispose();
    table.destroy();
    status.dispose();
  };
}

export default { render };
