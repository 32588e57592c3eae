import { describe, expect, it } from "vitest";
import {
  BAD_RGB, COLORMAP_NAMES, colorFor, colormap, fillRGBA, gradientCss, luminance, lutIndex,
  normalize, normalizeDiverging, textColorOn, type ColormapName,
} from "./colormap";

describe("colormap LUTs", () => {
  it("has 256 RGB entries per map with matplotlib's end points", () => {
    for (const name of COLORMAP_NAMES) expect(colormap(name).lut.length).toBe(768);
    expect(colormap("viridis").rgb(0)).toEqual([0x44, 0x01, 0x54]);
    expect(colormap("viridis").rgb(1)).toEqual([0xfd, 0xe7, 0x25]);
    expect(colormap("magma").rgb(0)).toEqual([0x00, 0x00, 0x04]);
    expect(colormap("magma").rgb(1)).toEqual([0xfc, 0xfd, 0xbf]);
    expect(colormap("coolwarm").rgb(0)).toEqual([0x3b, 0x4c, 0xc0]);
    expect(colormap("coolwarm").rgb(1)).toEqual([0xb4, 0x04, 0x26]);
  });

  it("is perceptually ordered: sequential maps brighten monotonically", () => {
    for (const name of ["viridis", "magma"] as ColormapName[]) {
      const cmap = colormap(name);
      let prev = -1;
      for (let i = 0; i < 256; i += 8) {
        const l = luminance(cmap.rgb(i / 255));
        expect(l).toBeGreaterThan(prev);
        prev = l;
      }
    }
  });

  it("diverging map is light in the middle and darker at both ends", () => {
    const cmap = colormap("coolwarm");
    const mid = luminance(cmap.rgb(0.5));
    expect(mid).toBeGreaterThan(luminance(cmap.rgb(0)) + 0.2);
    expect(mid).toBeGreaterThan(luminance(cmap.rgb(1)) + 0.2);
    expect(cmap.kind).toBe("diverging");
  });

  it("clamps out-of-range t and gives the bad colour for NaN", () => {
    const cmap = colormap("viridis");
    expect(cmap.rgb(-3)).toEqual(cmap.rgb(0));
    expect(cmap.rgb(7)).toEqual(cmap.rgb(1));
    expect(cmap.rgb(NaN)).toEqual(BAD_RGB);
    expect(lutIndex(Infinity)).toBe(-1);
    expect(lutIndex(0.5)).toBe(128);
    expect(cmap.css(1)).toBe("rgb(253, 231, 37)");
  });

  it("rejects unknown names with the list of known ones", () => {
    expect(() => colormap("jet" as ColormapName)).toThrow(/unknown colormap "jet".*viridis/);
  });
});

describe("normalisation", () => {
  it("maps [vmin, vmax] linearly and constant series to the middle", () => {
    expect(normalize(5, 0, 10)).toBe(0.5);
    expect(normalize(0, 0, 10)).toBe(0);
    expect(normalize(3, 3, 3)).toBe(0.5);
    expect(Number.isNaN(normalize(NaN, 0, 1))).toBe(true);
  });

  it("centres diverging scales so equal magnitudes get equal distance from the middle", () => {
    expect(normalizeDiverging(0, -1, 4)).toBe(0.5);
    expect(normalizeDiverging(4, -1, 4)).toBe(1);
    expect(normalizeDiverging(-4, -1, 4)).toBe(0);
    expect(normalizeDiverging(-1, -1, 4)).toBeCloseTo(0.375);
    expect(colorFor("coolwarm", 0, -2, 2)).toBe(colormap("coolwarm").css(0.5));
  });
});

describe("pixel fill, gradients and label contrast", () => {
  it("fills RGBA with alpha for finite values and badAlpha for NaN", () => {
    const out = fillRGBA("magma", new Float32Array([0, 1, NaN]), 0, 1, new Uint8ClampedArray(12), 200, 10);
    expect(Array.from(out.subarray(0, 4))).toEqual([0, 0, 4, 200]);
    expect(Array.from(out.subarray(4, 8))).toEqual([252, 253, 191, 200]);
    expect(Array.from(out.subarray(8, 12))).toEqual([...BAD_RGB, 10]);
    expect(() => fillRGBA("magma", [1, 2], 0, 1, new Uint8ClampedArray(4))).toThrow(/too small/);
  });

  it("builds a CSS gradient with the requested number of stops", () => {
    const g = gradientCss("viridis", 3);
    expect(g.startsWith("linear-gradient(to right, rgb(68, 1, 84) 0.0%")).toBe(true);
    expect(g.match(/rgb\(/g)?.length).toBe(3);
    expect(g.endsWith("rgb(253, 231, 37) 100.0%)")).toBe(true);
  });

  it("picks readable label colours", () => {
    expect(textColorOn(colormap("viridis").rgb(0))).toBe("#fff");
    expect(textColorOn(colormap("viridis").rgb(1))).toBe("#000");
  });
});
