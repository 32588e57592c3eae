// One module's row of a module x step heatmap, painted as a 1-pixel-high canvas in a table
// cell (the training monitor's and the run comparison's module tables).
import { h, replaceChildren } from "./dom";

/** A heatmap that can colour one of its rows, one RGBA pixel per column. */
export interface RowPixels {
  readonly cols: number;
  rowPixels(row: number, out?: Uint8ClampedArray): Uint8ClampedArray;
}

/** Paint ``row`` of ``map`` into ``cell``, reusing the cell's canvas (class ``cls``). */
export function paintStrip(cell: HTMLElement, row: number, map: RowPixels | null | undefined, cls: string): void {
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
