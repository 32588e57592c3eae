// A small histogram of sampled values as SVG built with DOM APIs (no markup strings).
// Binning here is presentation of values the kernel already sampled, like any chart does.
const SVG = "http://www.w3.org/2000/svg";

export interface Histogram {
  counts: number[];
  min: number;
  max: number;
  /** Values left out because they are NaN or infinite. */
  nonFinite: number;
}

/** Equal-width bins over the finite values; one bin when all values are equal. */
export function histogram(values: ArrayLike<number>, bins = 16): Histogram {
  let min = Infinity;
  let max = -Infinity;
  let nonFinite = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) { nonFinite++; continue; }
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (min > max) return { counts: [], min: NaN, max: NaN, nonFinite };
  const n = min === max ? 1 : Math.max(1, bins | 0);
  const counts = new Array<number>(n).fill(0);
  const width = (max - min) / n;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) continue;
    const b = width === 0 ? 0 : Math.min(n - 1, Math.floor((v - min) / width));
    counts[b]++;
  }
  return { counts, min, max, nonFinite };
}

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** A statistic as short text: 4 significant digits, an exponent for very large or small. */
export function statText(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "Infinity" : "-Infinity";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

function label(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(2) : String(Number(x.toPrecision(4)));
}

/** An SVG bar chart of `histogram(values)`, with min/max under the axis and a text title. */
export function histogramSvg(values: ArrayLike<number>, opts: { width?: number; height?: number; bins?: number } = {}): SVGSVGElement {
  const width = opts.width ?? 240;
  const height = opts.height ?? 90;
  const axis = 14;
  const hist = histogram(values, opts.bins ?? 16);
  const root = svg("svg", { class: "vl-hist", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const title = svg("title", {});
  title.textContent = hist.counts.length
    ? `Histogram of ${values.length} sampled values from ${label(hist.min)} to ${label(hist.max)}`
      + (hist.nonFinite ? ` (${hist.nonFinite} NaN/infinite not shown)` : "")
    : "No finite values to plot";
  root.append(title);
  root.setAttribute("aria-label", title.textContent);
  const peak = Math.max(1, ...hist.counts);
  const plotH = height - axis;
  const barW = hist.counts.length ? width / hist.counts.length : width;
  hist.counts.forEach((c, i) => {
    const h = (c / peak) * (plotH - 2);
    const rect = svg("rect", { class: "vl-hist-bar", x: i * barW + 0.5, y: plotH - h, width: Math.max(1, barW - 1), height: h });
    const tip = svg("title", {});
    const lo = hist.min + ((hist.max - hist.min) * i) / hist.counts.length;
    const hi = hist.min + ((hist.max - hist.min) * (i + 1)) / hist.counts.length;
    tip.textContent = `${c} in [${label(lo)}, ${label(hi)}${i === hist.counts.length - 1 ? "]" : ")"}`;
    rect.append(tip);
    root.append(rect);
  });
  root.append(svg("line", { class: "vl-hist-axis", x1: 0, x2: width, y1: plotH + 0.5, y2: plotH + 0.5 }));
  if (hist.counts.length) {
    const lo = svg("text", { class: "vl-hist-label", x: 0, y: height - 2, "text-anchor": "start" });
    lo.textContent = label(hist.min);
    const hi = svg("text", { class: "vl-hist-label", x: width, y: height - 2, "text-anchor": "end" });
    hi.textContent = label(hist.max);
    root.append(lo, hi);
  }
  return root;
}

/** The parts of a tensor summary a box plot needs (NaN where unknown). */
export interface SummaryBox {
  label: string;
  min: number;
  max: number;
  mean: number;
  std: number;
}

/**
 * Summaries side by side on one shared axis: a whisker from min to max, a box from
 * mean - std to mean + std (clipped to the range) and a tick at the mean. What the
 * kernel sent are summaries, not samples, so this draws exactly those numbers.
 */
export function summaryBoxesSvg(boxes: SummaryBox[], opts: { width?: number; rowHeight?: number } = {}): SVGSVGElement {
  const width = opts.width ?? 320;
  const rowH = opts.rowHeight ?? 26;
  const labelW = 28;
  const axis = 16;
  const height = boxes.length * rowH + axis;
  const finite = boxes.filter((b) => Number.isFinite(b.min) && Number.isFinite(b.max));
  const lo = Math.min(...finite.map((b) => b.min));
  const hi = Math.max(...finite.map((b) => b.max));
  const x0 = labelW + 4;
  const plotW = width - x0 - 4;
  const x = (v: number) => (hi > lo ? x0 + ((v - lo) / (hi - lo)) * plotW : x0 + plotW / 2);
  const root = svg("svg", { class: "vl-boxes", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const title = svg("title", {});
  title.textContent = finite.length
    ? boxes.map((b) => `${b.label ? `${b.label}: ` : ""}min ${label(b.min)}, mean ${label(b.mean)} ± ${label(b.std)}, max ${label(b.max)}`).join("; ")
    : "No finite values to plot";
  root.append(title);
  root.setAttribute("aria-label", title.textContent);
  boxes.forEach((b, k) => {
    const cy = k * rowH + rowH / 2;
    const name = svg("text", { class: "vl-hist-label vl-boxes-name", x: 0, y: cy + 4 });
    name.textContent = b.label;
    root.append(name);
    if (!Number.isFinite(b.min) || !Number.isFinite(b.max)) {
      const none = svg("text", { class: "vl-hist-label", x: x0, y: cy + 4 });
      none.textContent = "no finite values";
      root.append(none);
      return;
    }
    root.append(svg("line", { class: `vl-boxes-whisker vl-boxes-${k}`, x1: x(b.min), x2: x(b.max), y1: cy, y2: cy }));
    root.append(svg("line", { class: `vl-boxes-whisker vl-boxes-${k}`, x1: x(b.min), x2: x(b.min), y1: cy - 5, y2: cy + 5 }));
    root.append(svg("line", { class: `vl-boxes-whisker vl-boxes-${k}`, x1: x(b.max), x2: x(b.max), y1: cy - 5, y2: cy + 5 }));
    if (Number.isFinite(b.mean)) {
      const s = Number.isFinite(b.std) ? b.std : 0;
      const a = x(Math.max(b.min, b.mean - s));
      const c = x(Math.min(b.max, b.mean + s));
      root.append(svg("rect", { class: `vl-boxes-box vl-boxes-${k}`, x: a, y: cy - 7, width: Math.max(1, c - a), height: 14 }));
      root.append(svg("line", { class: "vl-boxes-mean", x1: x(b.mean), x2: x(b.mean), y1: cy - 8, y2: cy + 8 }));
    }
  });
  if (finite.length) {
    const y = height - 3;
    root.append(svg("line", { class: "vl-hist-axis", x1: x0, x2: x0 + plotW, y1: height - axis + 2, y2: height - axis + 2 }));
    const a = svg("text", { class: "vl-hist-label", x: x0, y, "text-anchor": "start" });
    a.textContent = label(lo);
    const b = svg("text", { class: "vl-hist-label", x: x0 + plotW, y, "text-anchor": "end" });
    b.textContent = label(hi);
    root.append(a, b);
  }
  return root;
}
