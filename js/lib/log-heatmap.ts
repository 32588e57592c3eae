// A module x step heatmap on a log colour scale, and one module's row of it painted as a
// 1-pixel-high canvas in a table cell (the training monitor's and the run comparison's
// module tables).
import { fillRGBA, type ColormapName } from "./colormap";
import { h, replaceChildren } from "./dom";

/** How a heatmap colours what is not on its scale. */
export interface LogHeatmapStyle {
  cmap: ColormapName;
  /** RGBA of a marked (non-finite) cell. */
  mark: readonly [number, number, number, number];
  /** Mark NaN too (else only infinities; NaN stays transparent). */
  markNaN: boolean;
  /** The scale when nothing is positive and finite. */
  empty: readonly [number, number];
  /** One value alone: the scale's top (true) or its middle (false). */
  singleAtTop: boolean;
}

/** log10 of every positive finite value, the colour scale's range and the marked cells. */
export class LogHeatmap {
  readonly logs: Float32Array;
  readonly vmin: number;
  readonly vmax: number;
  readonly nonFinite: Uint8Array;

  constructor(readonly rows: number, readonly cols: number, values: ArrayLike<number>, readonly style: LogHeatmapStyle) {
    this.logs = new Float32Array(rows * cols);
    this.nonFinite = new Uint8Array(rows * cols);
    let lo = Infinity;
    let hi = -Infinity;
    for (let i = 0; i < rows * cols; i++) {
      const v = Number(values[i]);
      if (v === Infinity || v === -Infinity || (style.markNaN && Number.isNaN(v))) this.nonFinite[i] = 1;
      const l = v > 0 && Number.isFinite(v) ? Math.log10(v) : NaN;
      this.logs[i] = l;
      if (l < lo) lo = l;
      if (l > hi) hi = l;
    }
    if (!(lo <= hi)) [lo, hi] = style.empty;
    else if (lo === hi) [lo, hi] = style.singleAtTop ? [lo - 1, hi] : [lo - 0.5, hi + 0.5];
    this.vmin = lo;
    this.vmax = hi;
  }

  /** RGBA pixels of one row: transparent where a value is off the scale and not marked. */
  rowPixels(row: number, out?: Uint8ClampedArray): Uint8ClampedArray {
    const pixels = out ?? new Uint8ClampedArray(this.cols * 4);
    fillRGBA(this.style.cmap, this.logs.subarray(row * this.cols, (row + 1) * this.cols), this.vmin, this.vmax, pixels);
    for (let c = 0; c < this.cols; c++) {
      if (this.nonFinite[row * this.cols + c]) pixels.set(this.style.mark, 4 * c);
    }
    return pixels;
  }
}

/** Paint ``row`` of ``map`` into ``cell``, reusing the cell's canvas (class ``cls``). */
export function paintStrip(cell: HTMLElement, row: number, map: LogHeatmap | null | undefined, cls: string): void {
  let canvas = cell.firstElementChild as HTMLCanvasElement | null;
  if (!canvas || canvas.tagName !== "CANVAS") {
    canvas = h("canvas", { class: cls, height: 1, "aria-hidden": "true" });
    replaceChildren(cell, canvas);
  }
  if (!map || !map.cols) { canvas.width = 1; return; }
  if (canvas.width !== map.cols) canvas.width = map.cols;
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  const image = ctx.createImageData(map.cols, 1);
  map.rowPixels(row, image.data);
  ctx.putImageData(image, 0, 0);
}
