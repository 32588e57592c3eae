// Small chart helpers for the store widgets: histograms and bar charts as SVG (theme colours
// through CSS classes, so light/dark switches need no redraw) and scatter plots as a canvas
// under an SVG axis layer (tens of thousands of points would be too many SVG nodes).
//
// Binning lives here because it is presentation: the kernel sends the sampled values as
// binary float arrays (the engine's own records), the user picks the bin count, and the
// browser counts. Summary statistics (count, min, mean, max, correlation) always come from
// the kernel; nothing here computes a diagnostic.
import "./charts.css";
import { formatNumber } from "./payload";
import { onThemeChange, themeVar } from "./theme";

const SVG_NS = "http://www.w3.org/2000/svg";

type SvgAttrs = Record<string, string | number | undefined>;

/** Create an SVG element; children strings become text nodes (never parsed as markup). */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K, attrs: SvgAttrs = {}, ...children: (Node | string | null | undefined)[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined) el.setAttribute(k, String(v));
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

export interface Histogram {
  /** bins + 1 ascending edges; bin i is [edges[i], edges[i + 1]) (the last one closed). */
  edges: Float64Array;
  counts: Float64Array;
  /** Finite values counted. */
  total: number;
  /** Values skipped because they were NaN or infinite. */
  nonFinite: number;
  /** Bins are centred on whole numbers (integer-valued series such as counts). */
  integer: boolean;
}

/** Round a step up to 1, 2 or 5 times a power of ten. */
export function niceStep(rawStep: number): number {
  if (!(rawStep > 0) || !Number.isFinite(rawStep)) return 1;
  const p = 10 ** Math.floor(Math.log10(rawStep));
  const f = rawStep / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/** About `count` round tick values covering [min, max]. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (min === max) return [min];
  const step = niceStep((max - min) / Math.max(1, count));
  const out: number[] = [];
  const start = Math.ceil(min / step - 1e-9) * step;
  for (let v = start; v <= max + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

/**
 * Count finite values into at most `maxBins` equal-width bins. Integer-valued series whose
 * range fits get one bin per whole number (so "3 candidates" is one bar, not half of two).
 */
export function binValues(values: ArrayLike<number>, maxBins = 30): Histogram {
  let lo = Infinity;
  let hi = -Infinity;
  let total = 0;
  let allInt = true;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    total++;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    if (allInt && !Number.isInteger(v)) allInt = false;
  }
  const nonFinite = values.length - total;
  const bins = Math.max(1, Math.floor(maxBins));
  if (total === 0) {
    return { edges: new Float64Array([0, 1]), counts: new Float64Array(1), total, nonFinite, integer: false };
  }
  let start: number;
  let width: number;
  let n: number;
  if (allInt) {
    width = Math.max(1, Math.ceil((hi - lo + 1) / bins));
    start = lo - 0.5;
    n = Math.max(1, Math.ceil((hi - lo + 1) / width));
  } else if (hi === lo) {
    width = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
    start = lo - width / 2;
    n = 1;
  } else {
    width = (hi - lo) / bins;
    start = lo;
    n = bins;
  }
  const edges = new Float64Array(n + 1);
  for (let i = 0; i <= n; i++) edges[i] = start + i * width;
  const counts = new Float64Array(n);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    let k = Math.floor((v - start) / width);
    if (k >= n) k = n - 1; // the maximum belongs to the last, closed bin
    if (k < 0) k = 0;
    counts[k]++;
  }
  return { edges, counts, total, nonFinite, integer: allInt };
}

/** A histogram from bins the kernel already counted (used for very large series). */
export function histogramFromBins(edges: ArrayLike<number>, counts: ArrayLike<number>, nonFinite = 0): Histogram {
  if (edges.length !== counts.length + 1) {
    throw new Error(`histogram has ${edges.length} edges for ${counts.length} bins; expected bins + 1`);
  }
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i];
  return { edges: Float64Array.from(edges), counts: Float64Array.from(counts), total, nonFinite, integer: false };
}

export interface ChartOptions {
  width?: number;
  height?: number;
  xLabel?: string;
  yLabel?: string;
  /** Accessible description; defaults to a summary of the data. */
  label?: string;
}

const MARGIN = { left: 44, right: 8, top: 8, bottom: 30 };

function tickLabel(v: number): string {
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  return formatNumber(Number(v.toPrecision(6)));
}

function axes(
  root: SVGSVGElement, w: number, h: number,
  x: { min: number; max: number; ticks: number[] },
  y: { min: number; max: number; ticks: number[]; labels?: string[] },
  opts: ChartOptions,
): { sx: (v: number) => number; sy: (v: number) => number } {
  const pw = w - MARGIN.left - MARGIN.right;
  const ph = h - MARGIN.top - MARGIN.bottom;
  const sx = (v: number) => MARGIN.left + ((v - x.min) / (x.max - x.min || 1)) * pw;
  const sy = (v: number) => MARGIN.top + ph - ((v - y.min) / (y.max - y.min || 1)) * ph;
  const g = svg("g", { class: "vl-chart-axes" });
  g.append(svg("line", { x1: MARGIN.left, x2: MARGIN.left + pw, y1: MARGIN.top + ph, y2: MARGIN.top + ph, class: "vl-chart-axis" }));
  g.append(svg("line", { x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: MARGIN.top + ph, class: "vl-chart-axis" }));
  for (const t of x.ticks) {
    const px = sx(t);
    g.append(svg("line", { x1: px, x2: px, y1: MARGIN.top + ph, y2: MARGIN.top + ph + 3, class: "vl-chart-axis" }));
    g.append(svg("text", { x: px, y: MARGIN.top + ph + 13, "text-anchor": "middle", class: "vl-chart-tick" }, tickLabel(t)));
  }
  y.ticks.forEach((t, i) => {
    const py = sy(t);
    g.append(svg("line", { x1: MARGIN.left - 3, x2: MARGIN.left + pw, y1: py, y2: py, class: "vl-chart-grid" }));
    g.append(svg("text", { x: MARGIN.left - 5, y: py + 3, "text-anchor": "end", class: "vl-chart-tick" }, y.labels?.[i] ?? tickLabel(t)));
  });
  if (opts.xLabel) {
    g.append(svg("text", { x: MARGIN.left + pw / 2, y: h - 3, "text-anchor": "middle", class: "vl-chart-label" }, opts.xLabel));
  }
  if (opts.yLabel) {
    g.append(svg("text", {
      x: 10, y: MARGIN.top + ph / 2, "text-anchor": "middle", class: "vl-chart-label",
      transform: `rotate(-90 10 ${MARGIN.top + ph / 2})`,
    }, opts.yLabel));
  }
  root.append(g);
  return { sx, sy };
}

/** Counts for the ticks of a log count axis: 0, 1, 10, 100, ... up to `maxCount` (at most 5). */
export function logCountTicks(maxCount: number): number[] {
  const decades: number[] = [];
  for (let c = 1; c <= Math.max(1, maxCount); c *= 10) decades.push(c);
  const every = Math.ceil(decades.length / 4);
  return [0, ...decades.filter((_, i) => i % every === 0)];
}

function rangeText(hist: Histogram, i: number): string {
  const a = hist.edges[i];
  const b = hist.edges[i + 1];
  if (hist.integer && b - a === 1) return formatNumber(a + 0.5);
  if (hist.integer) return `${formatNumber(a + 0.5)}–${formatNumber(b - 0.5)}`;
  const last = i === hist.counts.length - 1;
  return `[${tickLabel(a)}, ${tickLabel(b)}${last ? "]" : ")"}`;
}

/** Histogram bars with axes; each bar has a <title> with its range, count and share. */
export function histogramSvg(hist: Histogram, opts: ChartOptions & { logY?: boolean } = {}): SVGSVGElement {
  const w = opts.width ?? 320;
  const h = opts.height ?? 170;
  const root = svg("svg", {
    class: "vl-chart vl-histogram", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img",
    "aria-label": opts.label ?? `histogram of ${hist.total} values${opts.xLabel ? ` of ${opts.xLabel}` : ""}`,
  });
  const n = hist.counts.length;
  const x0 = hist.edges[0];
  const x1 = hist.edges[n];
  let maxCount = 0;
  for (let i = 0; i < n; i++) maxCount = Math.max(maxCount, hist.counts[i]);
  const log = Boolean(opts.logY);
  const yv = (c: number) => (log ? Math.log10(c + 1) : c);
  const yMax = Math.max(yv(maxCount), 1);
  // On the log axis a tick sits at log10(c + 1) and reads c, for round counts c.
  const counts = log ? logCountTicks(maxCount) : niceTicks(0, yMax, 4).filter((t) => Number.isInteger(t));
  const yTicks = log ? counts.map(yv) : counts;
  const xTicks = hist.integer && x1 - x0 <= 12
    ? Array.from({ length: Math.round(x1 - x0) }, (_, i) => x0 + 0.5 + i)
    : niceTicks(x0, x1, 5).filter((t) => t >= x0 && t <= x1);
  const { sx, sy } = axes(root, w, h, { min: x0, max: x1, ticks: xTicks },
    { min: 0, max: yMax, ticks: yTicks, labels: counts.map(tickLabel) }, {
      ...opts, yLabel: opts.yLabel ?? (log ? "count (log scale)" : "count"),
    });
  const bars = svg("g", { class: "vl-chart-bars" });
  for (let i = 0; i < n; i++) {
    const c = hist.counts[i];
    const left = sx(hist.edges[i]);
    const right = sx(hist.edges[i + 1]);
    const top = sy(yv(c));
    const share = hist.total ? ` (${((100 * c) / hist.total).toFixed(1)}%)` : "";
    bars.append(svg("rect", {
      class: "vl-chart-bar", x: left + 0.5, y: top, width: Math.max(0.5, right - left - 1), height: Math.max(0, sy(0) - top),
      "data-count": c,
    }, svg("title", {}, `${rangeText(hist, i)}: ${formatNumber(c)}${share}`)));
  }
  root.append(bars);
  return root;
}

export interface BarRow {
  label: string;
  value: number;
  /** Text shown after the bar (defaults to the formatted value). */
  text?: string;
  title?: string;
}

/** Horizontal bars, one row per item, labels as text (split counts, memory per component). */
export function barChartSvg(rows: BarRow[], opts: ChartOptions & { labelWidth?: number } = {}): SVGSVGElement {
  const w = opts.width ?? 320;
  const rowH = 18;
  const labelW = opts.labelWidth ?? 110;
  const textW = 70;
  const h = rows.length * rowH + 4;
  const root = svg("svg", {
    class: "vl-chart vl-barchart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img",
    "aria-label": opts.label ?? rows.map((r) => `${r.label}: ${r.text ?? formatNumber(r.value)}`).join("; "),
  });
  const max = rows.reduce((m, r) => (Number.isFinite(r.value) ? Math.max(m, r.value) : m), 0);
  const span = w - labelW - textW;
  rows.forEach((r, i) => {
    const y = 2 + i * rowH;
    const bw = max > 0 && Number.isFinite(r.value) ? (Math.max(0, r.value) / max) * span : 0;
    const g = svg("g", { class: "vl-chart-barrow" }, svg("title", {}, r.title ?? `${r.label}: ${r.text ?? formatNumber(r.value)}`));
    g.append(svg("text", { x: labelW - 6, y: y + 12, "text-anchor": "end", class: "vl-chart-tick vl-chart-rowlabel" }, clip(r.label, 22)));
    g.append(svg("rect", { x: labelW, y: y + 2, width: Math.max(bw, 0), height: rowH - 5, class: "vl-chart-bar" }));
    g.append(svg("text", { x: labelW + bw + 4, y: y + 12, class: "vl-chart-tick" }, r.text ?? formatNumber(r.value)));
    root.append(g);
  });
  return root;
}

function clip(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function extent(values: ArrayLike<number>): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === Infinity) return [0, 1];
  if (lo === hi) return [lo - 0.5, hi + 0.5];
  const pad = (hi - lo) * 0.03;
  return [lo - pad, hi + pad];
}

export interface ScatterPlot {
  el: HTMLElement;
  /** Points drawn (finite pairs). */
  drawn: number;
  redraw(): void;
  dispose(): void;
}

/**
 * Scatter of (x[i], y[i]) on a canvas beneath SVG axes. Point colour is read from the
 * theme at draw time, and the plot redraws when JupyterLab switches light/dark.
 */
export function scatterPlot(x: ArrayLike<number>, y: ArrayLike<number>, opts: ChartOptions = {}): ScatterPlot {
  if (x.length !== y.length) throw new Error(`scatter needs equal lengths, got ${x.length} and ${y.length}`);
  const w = opts.width ?? 320;
  const h = opts.height ?? 220;
  const [xmin, xmax] = extent(x);
  const [ymin, ymax] = extent(y);
  const root = svg("svg", { class: "vl-chart vl-scatter-axes", width: w, height: h, viewBox: `0 0 ${w} ${h}` });
  const { sx, sy } = axes(root, w, h,
    { min: xmin, max: xmax, ticks: niceTicks(xmin, xmax, 4) },
    { min: ymin, max: ymax, ticks: niceTicks(ymin, ymax, 4) }, opts);
  const canvas = document.createElement("canvas");
  canvas.className = "vl-scatter-canvas";
  const el = document.createElement("div");
  el.className = "vl-scatter";
  el.style.width = `${w}px`;
  el.style.height = `${h}px`;
  el.setAttribute("role", "img");
  let drawn = 0;
  for (let i = 0; i < x.length; i++) if (Number.isFinite(x[i]) && Number.isFinite(y[i])) drawn++;
  el.setAttribute("aria-label", opts.label ?? `scatter of ${drawn} points`);
  el.append(canvas, root);

  const redraw = () => {
    const ratio = globalThis.devicePixelRatio || 1;
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
    const ctx = canvas.getContext?.("2d");
    if (!ctx) return; // jsdom has no canvas; the axes still render
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const color = themeVar(getComputedStyle(el), "brand-color1", "#1976d2");
    ctx.fillStyle = color;
    // Dense clouds need lower opacity to show where the mass is.
    ctx.globalAlpha = drawn > 20000 ? 0.15 : drawn > 2000 ? 0.35 : 0.7;
    const r = drawn > 20000 ? 1 : 1.5;
    for (let i = 0; i < x.length; i++) {
      const xv = x[i];
      const yv = y[i];
      if (!Number.isFinite(xv) || !Number.isFinite(yv)) continue;
      ctx.fillRect(sx(xv) - r, sy(yv) - r, 2 * r, 2 * r);
    }
  };
  const stopTheme = onThemeChange(redraw);
  redraw();
  return { el, drawn, redraw, dispose: stopTheme };
}
