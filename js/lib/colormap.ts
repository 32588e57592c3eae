// Perceptual colour scales as 256-entry RGB lookup tables, shared by every vinlens widget
// (coverage heatmap, store histograms, attribution overlays).
//
// The tables are matplotlib's own colormaps sampled at 256 evenly spaced points and rounded
// to 8 bits (matplotlib 3.11:
//   (colormaps[name](np.linspace(0, 1, 256))[:, :3] * 255).round().astype(np.uint8).tobytes().hex()
// ), stored as hex so the bundle stays small and nothing is computed at load beyond parsing:
// - viridis and magma (van der Walt & Smith): perceptually uniform sequential scales that stay
//   readable in greyscale and for the common colour-vision deficiencies;
// - coolwarm (Moreland): diverging, with a light neutral centre, for signed values.
// NaN and other non-finite values get an explicit "bad" colour rather than silently taking the
// low end of the scale, so a missing value never looks like a small one.

export type ColormapName = "viridis" | "magma" | "coolwarm";
export type ColormapKind = "sequential" | "diverging";
export type RGB = [number, number, number];

export const COLORMAP_NAMES: readonly ColormapName[] = ["viridis", "magma", "coolwarm"];

const KINDS: Record<ColormapName, ColormapKind> = {
  viridis: "sequential",
  magma: "sequential",
  coolwarm: "diverging",
};

const HEX: Record<ColormapName, string> = {
  viridis:
    "44015444025645045745055946075a46085c460a5d460b5e470d60470e61471063471164471365481467481668481769" +
    "48186a481a6c481b6d481c6e481d6f481f70482071482173482374482475482576482677482878482979472a7a472c7a" +
    "472d7b472e7c472f7d46307e46327e46337f463480453581453781453882443983443a83443b84433d84433e85423f85" +
    "4240864241864142874144874045884046883f47883f48893e49893e4a893e4c8a3d4d8a3d4e8a3c4f8a3c508b3b518b" +
    "3b528b3a538b3a548c39558c39568c38588c38598c375a8c375b8d365c8d365d8d355e8d355f8d34608d34618d33628d" +
    "33638d32648e32658e31668e31678e31688e30698e306a8e2f6b8e2f6c8e2e6d8e2e6e8e2e6f8e2d708e2d718e2c718e" +
    "2c728e2c738e2b748e2b758e2a768e2a778e2a788e29798e297a8e297b8e287c8e287d8e277e8e277f8e27808e26818e" +
    "26828e26828e25838e25848e25858e24868e24878e23888e23898e238a8d228b8d228c8d228d8d218e8d218f8d21908d" +
    "21918c20928c20928c20938c1f948c1f958b1f968b1f978b1f988b1f998a1f9a8a1e9b8a1e9c891e9d891f9e891f9f88" +
    "1fa0881fa1881fa1871fa28720a38620a48621a58521a68522a78522a88423a98324aa8325ab8225ac8226ad8127ad81" +
    "28ae8029af7f2ab07f2cb17e2db27d2eb37c2fb47c31b57b32b67a34b67935b77937b87838b9773aba763bbb753dbc74" +
    "3fbc7340bd7242be7144bf7046c06f48c16e4ac16d4cc26c4ec36b50c46a52c56954c56856c66758c7655ac8645cc863" +
    "5ec96260ca6063cb5f65cb5e67cc5c69cd5b6ccd5a6ece5870cf5773d05675d05477d1537ad1517cd2507fd34e81d34d" +
    "84d44b86d54989d5488bd6468ed64590d74393d74195d84098d83e9bd93c9dd93ba0da39a2da37a5db36a8db34aadc32" +
    "addc30b0dd2fb2dd2db5de2bb8de29bade28bddf26c0df25c2df23c5e021c8e020cae11fcde11dd0e11cd2e21bd5e21a" +
    "d8e219dae319dde318dfe318e2e418e5e419e7e419eae51aece51befe51cf1e51df4e61ef6e620f8e621fbe723fde725",
  magma:
    "00000401000501010601010802010902020b02020d03030f03031204041405041606051806051a07061c08071e090720" +
    "0a08220b09240c09260d0a290e0b2b100b2d110c2f120d31130d34140e36150e38160f3b180f3d19103f1a10421c1044" +
    "1d11471e114920114b21114e22115024125325125527125829115a2a115c2c115f2d11612f1163311165331067341069" +
    "36106b38106c390f6e3b0f703d0f713f0f72400f74420f75440f764510774710784910784a10794c117a4e117b4f127b" +
    "51127c52137c54137d56147d57157e59157e5a167e5c167f5d177f5f187f601880621980641a80651a80671b80681c81" +
    "6a1c816b1d816d1d816e1e81701f81721f817320817521817621817822817922827b23827c23827e2482802582812581" +
    "8326818426818627818827818928818b29818c29818e2a81902a81912b81932b80942c80962c80982d80992d809b2e7f" +
    "9c2e7f9e2f7fa02f7fa1307ea3307ea5317ea6317da8327daa337dab337cad347cae347bb0357bb2357bb3367ab5367a" +
    "b73779b83779ba3878bc3978bd3977bf3a77c03a76c23b75c43c75c53c74c73d73c83e73ca3e72cc3f71cd4071cf4070" +
    "d0416fd2426fd3436ed5446dd6456cd8456cd9466bdb476adc4869de4968df4a68e04c67e24d66e34e65e44f64e55064" +
    "e75263e85362e95462ea5661eb5760ec5860ed5a5fee5b5eef5d5ef05f5ef1605df2625df2645cf3655cf4675cf4695c" +
    "f56b5cf66c5cf66e5cf7705cf7725cf8745cf8765cf9785df9795df97b5dfa7d5efa7f5efa815ffb835ffb8560fb8761" +
    "fc8961fc8a62fc8c63fc8e64fc9065fd9266fd9467fd9668fd9869fd9a6afd9b6bfe9d6cfe9f6dfea16efea36ffea571" +
    "fea772fea973feaa74feac76feae77feb078feb27afeb47bfeb67cfeb77efeb97ffebb81febd82febf84fec185fec287" +
    "fec488fec68afec88cfeca8dfecc8ffecd90fecf92fed194fed395fed597fed799fed89afdda9cfddc9efddea0fde0a1" +
    "fde2a3fde3a5fde5a7fde7a9fde9aafdebacfcecaefceeb0fcf0b2fcf2b4fcf4b6fcf6b8fcf7b9fcf9bbfcfbbdfcfdbf",
  coolwarm:
    "3b4cc03c4ec23d50c33e51c53f53c64055c84257c94358cb445acc455cce465ecf485fd14961d24a63d34b64d54c66d6" +
    "4e68d84f69d9506bda516ddb536edd5470de5572df5673e05875e15977e35a78e45b7ae55d7ce65e7de75f7fe86180e9" +
    "6282ea6384eb6485ec6687ed6788ee688aef6a8bef6b8df06c8ff16e90f26f92f37093f37295f47396f57597f67699f6" +
    "779af7799cf87a9df87b9ff97da0f97ea1fa80a3fa81a4fb82a6fb84a7fc85a8fc86a9fc88abfd89acfd8badfd8caffe" +
    "8db0fe8fb1fe90b2fe92b4fe93b5fe94b6ff96b7ff97b8ff98b9ff9abbff9bbcff9dbdff9ebeff9fbfffa1c0ffa2c1ff" +
    "a3c2fea5c3fea6c4fea7c5fea9c6fdaac7fdabc8fdadc9fdaec9fcafcafcb1cbfcb2ccfbb3cdfbb5cdfab6cefab7cff9" +
    "b9d0f9bad0f8bbd1f8bcd2f7bed2f6bfd3f6c0d4f5c1d4f4c3d5f4c4d5f3c5d6f2c6d6f1c7d7f0c9d7f0cad8efcbd8ee" +
    "ccd9edcdd9eccedaebcfdaead1dae9d2dbe8d3dbe7d4dbe6d5dbe5d6dce4d7dce3d8dce2d9dce1dadce0dbdcdedcdddd" +
    "dddcdcdedcdbdfdbd9e0dbd8e1dad6e2dad5e3d9d3e4d9d2e5d8d1e6d7cfe7d7cee8d6cce9d5cbead5c9ead4c8ebd3c6" +
    "ecd3c5edd2c3edd1c2eed0c0efcfbfefcebdf0cdbbf1cdbaf1ccb8f2cbb7f2cab5f2c9b4f3c8b2f3c7b1f4c6aff4c5ad" +
    "f5c4acf5c2aaf5c1a9f5c0a7f6bfa6f6bea4f6bda2f7bca1f7ba9ff7b99ef7b89cf7b79bf7b599f7b497f7b396f7b194" +
    "f7b093f7af91f7ad90f7ac8ef7aa8cf7a98bf7a889f7a688f6a586f6a385f6a283f5a081f59f80f59d7ef59c7df49a7b" +
    "f4987af39778f39577f39475f29274f29072f18f71f18d6ff08b6ef08a6cef886bee8669ee8468ed8366ec8165ec7f63" +
    "eb7d62ea7b60e97a5fe9785de8765ce7745be67259e57058e46e56e36c55e36b54e26952e16751e0654fdf634ede614d" +
    "dd5f4bdc5d4ada5a49d95847d85646d75445d65244d55042d44e41d24b40d1493fd0473dcf453ccd423bcc403acb3e38" +
    "ca3b37c83836c73635c53334c43032c32e31c12b30c0282fbe242ebd1f2dbb1b2cba162bb8122ab70d28b50927b40426",
};

/** Colour used for NaN / missing values: a neutral mid grey, distinct from every LUT end. */
export const BAD_RGB: RGB = [128, 128, 128];

export interface Colormap {
  name: ColormapName;
  kind: ColormapKind;
  /** 256 * 3 bytes, RGB. */
  lut: Uint8Array;
  /** Colour at t in [0, 1] (clamped); non-finite t gives BAD_RGB. */
  rgb(t: number): RGB;
  /** CSS `rgb(r, g, b)` at t. */
  css(t: number): string;
}

const cache = new Map<ColormapName, Colormap>();

function parseHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The index into a 256-entry LUT for t in [0, 1]; -1 for non-finite t. */
export function lutIndex(t: number): number {
  if (!Number.isFinite(t)) return -1;
  const c = t <= 0 ? 0 : t >= 1 ? 1 : t;
  return Math.min(255, Math.floor(c * 256));
}

export function colormap(name: ColormapName): Colormap {
  const hit = cache.get(name);
  if (hit) return hit;
  const hex = HEX[name];
  if (hex === undefined) {
    throw new Error(`unknown colormap ${JSON.stringify(name)}; expected one of ${COLORMAP_NAMES.join(", ")}`);
  }
  const lut = parseHex(hex);
  const rgb = (t: number): RGB => {
    const i = lutIndex(t);
    if (i < 0) return [...BAD_RGB] as RGB;
    return [lut[3 * i], lut[3 * i + 1], lut[3 * i + 2]];
  };
  const cmap: Colormap = {
    name,
    kind: KINDS[name],
    lut,
    rgb,
    css: (t) => {
      const [r, g, b] = rgb(t);
      return `rgb(${r}, ${g}, ${b})`;
    },
  };
  cache.set(name, cmap);
  return cmap;
}

/** Linear normalisation of value into [0, 1] over [vmin, vmax]; NaN when value is non-finite. */
export function normalize(value: number, vmin: number, vmax: number): number {
  if (!Number.isFinite(value)) return NaN;
  if (!(vmax > vmin)) return 0.5; // a constant series sits in the middle, not at an end
  return (value - vmin) / (vmax - vmin);
}

/**
 * Normalisation for diverging scales: `center` maps to 0.5 and the larger of the two
 * distances to vmin / vmax maps to the ends, so equal magnitudes get equal saturation.
 */
export function normalizeDiverging(value: number, vmin: number, vmax: number, center = 0): number {
  if (!Number.isFinite(value)) return NaN;
  const half = Math.max(Math.abs(vmax - center), Math.abs(center - vmin));
  if (!(half > 0)) return 0.5;
  return 0.5 + (value - center) / (2 * half);
}

/** CSS colour of `value` on `name` over [vmin, vmax] (diverging scales centre on 0). */
export function colorFor(name: ColormapName, value: number, vmin: number, vmax: number): string {
  const cmap = colormap(name);
  const t = cmap.kind === "diverging" ? normalizeDiverging(value, vmin, vmax) : normalize(value, vmin, vmax);
  return cmap.css(t);
}

/**
 * Fill RGBA pixels (e.g. ImageData.data) from values: one pixel per value, alpha `alpha`
 * (0-255) for finite values and `badAlpha` for non-finite ones. Used for canvas heatmaps and
 * attribution overlays where per-pixel object allocation would be too slow.
 */
export function fillRGBA(
  name: ColormapName,
  values: ArrayLike<number>,
  vmin: number,
  vmax: number,
  out: Uint8ClampedArray,
  alpha = 255,
  badAlpha = 0,
): Uint8ClampedArray {
  if (out.length < values.length * 4) {
    throw new Error(`RGBA buffer of ${out.length} bytes is too small for ${values.length} values`);
  }
  const cmap = colormap(name);
  const lut = cmap.lut;
  const diverging = cmap.kind === "diverging";
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    const t = diverging ? normalizeDiverging(v, vmin, vmax) : normalize(v, vmin, vmax);
    const k = lutIndex(t);
    const o = 4 * i;
    if (k < 0) {
      out[o] = BAD_RGB[0];
      out[o + 1] = BAD_RGB[1];
      out[o + 2] = BAD_RGB[2];
      out[o + 3] = badAlpha;
    } else {
      out[o] = lut[3 * k];
      out[o + 1] = lut[3 * k + 1];
      out[o + 2] = lut[3 * k + 2];
      out[o + 3] = alpha;
    }
  }
  return out;
}

/** A CSS linear-gradient for a colour bar legend (`steps` colour stops, left to right). */
export function gradientCss(name: ColormapName, steps = 16, direction = "to right"): string {
  const cmap = colormap(name);
  const n = Math.max(2, Math.floor(steps));
  const stops: string[] = [];
  for (let i = 0; i < n; i++) {
    const t = i / (n - 1);
    stops.push(`${cmap.css(t)} ${(t * 100).toFixed(1)}%`);
  }
  return `linear-gradient(${direction}, ${stops.join(", ")})`;
}

/** Relative luminance (WCAG 2) of an 8-bit RGB colour. */
export function luminance([r, g, b]: RGB): number {
  const lin = (c: number) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

/** Black or white, whichever contrasts more with the given background (for labels on cells). */
export function textColorOn(background: RGB): "#000" | "#fff" {
  const l = luminance(background);
  return (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) ? "#000" : "#fff";
}
