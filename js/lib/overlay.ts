// Canvas compositing of an attribution map over a camera image.
//
// Pure functions on typed arrays so they are testable without a canvas (jsdom has none)
// and fast enough to re-run on every opacity or colormap change: one pass, no per-pixel
// allocation. The map arrives at the image's resolution (the engine upsamples it), so
// compositing is a per-pixel blend and never resamples.
import { colormap, lutIndex, normalize, normalizeDiverging, type ColormapName } from "./colormap";
import type { NDArray } from "./payload";

/** Height and width of an image array shaped [H, W], [H, W, 1], [H, W, 3] or [H, W, 4]. */
export function imageSize(image: NDArray): { height: number; width: number; channels: number } {
  const [height, width, channels = 1] = image.shape;
  if (image.shape.length < 2 || image.shape.length > 3 || ![1, 3, 4].includes(channels)) {
    throw new Error(`camera image must be [H, W], [H, W, 1], [H, W, 3] or [H, W, 4], got [${image.shape.join(", ")}]`);
  }
  if (image.dtype !== "uint8") throw new Error(`camera image must be uint8, got ${image.dtype}`);
  return { height, width, channels };
}

/** Expand a uint8 grey, RGB or RGBA image to opaque RGBA pixels (ImageData layout). */
export function imageToRGBA(image: NDArray, out?: Uint8ClampedArray): Uint8ClampedArray {
  const { height, width, channels } = imageSize(image);
  const n = height * width;
  const dst = out ?? new Uint8ClampedArray(n * 4);
  const src = image.data;
  for (let i = 0; i < n; i++) {
    const o = 4 * i;
    if (channels === 1) {
      const v = src[i];
      dst[o] = v; dst[o + 1] = v; dst[o + 2] = v;
    } else {
      const s = channels * i;
      dst[o] = src[s]; dst[o + 1] = src[s + 1]; dst[o + 2] = src[s + 2];
    }
    dst[o + 3] = 255;
  }
  return dst;
}

export interface OverlayOptions {
  colormap: ColormapName;
  /** Value shown at the low end of the colour scale. */
  vmin: number;
  /** Value shown at the high end of the colour scale. */
  vmax: number;
  /** Heatmap weight in [0, 1]: 0 shows only the image, 1 only the heatmap. */
  opacity: number;
}

/**
 * Blend `map` (one float per image pixel, row-major) coloured by `opts.colormap` over the
 * RGBA `base` pixels: out = (1 - a) * base + a * colour. Non-finite map values leave the
 * image pixel untouched, so a hole in the map never looks like a cold region.
 */
export function compositeOverlay(
  base: Uint8ClampedArray,
  map: ArrayLike<number>,
  opts: OverlayOptions,
  out: Uint8ClampedArray = new Uint8ClampedArray(base.length),
): Uint8ClampedArray {
  if (base.length !== map.length * 4) {
    throw new Error(`map has ${map.length} values but the image has ${base.length / 4} pixels`);
  }
  const cmap = colormap(opts.colormap);
  const lut = cmap.lut;
  const diverging = cmap.kind === "diverging";
  const a = Math.min(1, Math.max(0, Number.isFinite(opts.opacity) ? opts.opacity : 0));
  const b = 1 - a;
  for (let i = 0; i < map.length; i++) {
    const o = 4 * i;
    const v = map[i];
    const t = diverging ? normalizeDiverging(v, opts.vmin, opts.vmax) : normalize(v, opts.vmin, opts.vmax);
    const k = lutIndex(t);
    if (k < 0) {
      out[o] = base[o]; out[o + 1] = base[o + 1]; out[o + 2] = base[o + 2];
    } else {
      out[o] = b * base[o] + a * lut[3 * k];
      out[o + 1] = b * base[o + 1] + a * lut[3 * k + 1];
      out[o + 2] = b * base[o + 2] + a * lut[3 * k + 2];
    }
    out[o + 3] = 255;
  }
  return out;
}

/** Write RGBA pixels into a canvas sized to the image; a no-op where canvas 2D is missing. */
export function paintCanvas(canvas: HTMLCanvasElement, rgba: Uint8ClampedArray, width: number, height: number): boolean {
  if (canvas.width !== width) canvas.width = width;
  if (canvas.height !== height) canvas.height = height;
  let ctx: CanvasRenderingContext2D | null = null;
  try {
    ctx = canvas.getContext("2d");
  } catch {
    ctx = null; // jsdom without the canvas package throws "not implemented"
  }
  if (!ctx || typeof ImageData === "undefined") return false;
  const pixels = new Uint8ClampedArray(rgba.length);
  pixels.set(rgba);
  ctx.putImageData(new ImageData(pixels, width, height), 0, 0);
  return true;
}
