import { describe, expect, it, vi } from "vitest";
import { barChartSvg, binValues, histogramFromBins, histogramSvg, logCountTicks, niceTicks, scatterPlot } from "./charts";

describe("binning", () => {
  it("puts every finite value in exactly one bin, the maximum in the last", () => {
    const h = binValues([0, 0.5, 1, NaN, Infinity], 2);
    expect(Array.from(h.edges)).toEqual([0, 0.5, 1]);
    expect(Array.from(h.counts)).toEqual([1, 2]);
    expect(h.total).toBe(3);
    expect(h.nonFinite).toBe(2);
  });

  it("gives integer series one bin per whole number when the range fits", () => {
    const h = binValues(new Float32Array([2, 2, 3, 7]), 30);
    expect(h.integer).toBe(true);
    expect(h.counts.length).toBe(6);
    expect(Array.from(h.counts)).toEqual([2, 1, 0, 0, 0, 1]);
    expect(h.edges[0]).toBe(1.5);
    const wide = binValues([0, 1000], 10);
    expect(wide.counts.length).toBeLessThanOrEqual(10);
    expect(wide.counts.reduce((a, b) => a + b, 0)).toBe(2);
  });

  it("handles constant and empty series", () => {
    expect(binValues([0.3, 0.3], 10).counts.length).toBe(1);
    expect(binValues([NaN], 10).total).toBe(0);
  });

  it("accepts kernel bins and checks their shape", () => {
    expect(histogramFromBins([0, 1, 2], [3, 4]).total).toBe(7);
    expect(() => histogramFromBins([0, 1], [3, 4])).toThrow(/bins \+ 1/);
  });

  it("picks round ticks", () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6000000000000001, 0.8, 1]);
    expect(niceTicks(3, 3)).toEqual([3]);
  });
});

describe("svg charts", () => {
  it("draws one bar per bin with its count in a title", () => {
    const svg = histogramSvg(binValues([1, 1, 2], 30), { xLabel: "<b>x</b>" });
    const bars = svg.querySelectorAll("rect.vl-chart-bar");
    expect(bars.length).toBe(2);
    expect(bars[0].querySelector("title")!.textContent).toBe("1: 2 (66.7%)");
    expect(svg.querySelector("b")).toBeNull();
    expect(svg.textContent).toContain("<b>x</b>");
  });

  it("draws labelled horizontal bars scaled to the maximum", () => {
    const svg = barChartSvg([{ label: "train", value: 10 }, { label: "val", value: 5 }], { width: 300, labelWidth: 100 });
    const widths = [...svg.querySelectorAll("rect")].map((r) => Number(r.getAttribute("width")));
    expect(widths[0]).toBeCloseTo(2 * widths[1]);
    expect(svg.getAttribute("aria-label")).toBe("train: 10; val: 5");
  });

  it("plots only finite pairs on a canvas and disconnects its theme observer", () => {
    const calls: number[][] = [];
    HTMLCanvasElement.prototype.getContext = vi.fn(() => ({
      setTransform() {}, clearRect() {}, fillRect: (...a: number[]) => calls.push(a), fillStyle: "", globalAlpha: 1,
    })) as any;
    const plot = scatterPlot([0, 1, NaN], [0, 1, 2], { xLabel: "c", yLabel: "RRI" });
    expect(plot.drawn).toBe(2);
    expect(calls.length).toBe(2);
    expect(() => scatterPlot([1], [1, 2])).toThrow(/equal lengths/);
    plot.dispose();
  });
});

describe("log count axis", () => {
  it("reads counts at their log positions, and says so in the label", () => {
    expect(logCountTicks(0)).toEqual([0, 1]);
    expect(logCountTicks(250)).toEqual([0, 1, 10, 100]);
    expect(logCountTicks(5_000_000).length).toBeLessThanOrEqual(5);
    const hist = histogramFromBins([0, 1, 2, 3], [1, 50, 250]);
    const svgEl = histogramSvg(hist, { logY: true, width: 300, height: 170 });
    const yTicks = [...svgEl.querySelectorAll('text.vl-chart-tick[text-anchor="end"]')];
    expect(yTicks.map((t) => t.textContent)).toEqual(["0", "1", "10", "100"]);
    // The tick that reads 100 sits where a bar of count 100 would end.
    const ys = yTicks.map((t) => Number(t.getAttribute("y")) - 3);
    const bars = [...svgEl.querySelectorAll("rect.vl-chart-bar")];
    const top = (i: number) => Number(bars[i].getAttribute("y"));
    const bottom = ys[0];
    const at = (c: number) => bottom - ((bottom - ys[3]) * Math.log10(c + 1)) / Math.log10(101);
    expect(top(1)).toBeCloseTo(at(50), 6);
    expect(svgEl.textContent).toContain("count (log scale)");
    expect(svgEl.textContent).not.toContain("log10");
  });
});

