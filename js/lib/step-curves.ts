// Every-step curves of several runs on one chart (the run comparison's loss and gradient
// norm). The kernel sends each run's curve in buckets of consecutive steps (lowest and
// highest finite value, and a flag for a non-finite one: training_monitor_payload's
// series_payload); this file only lays them out on one shared step axis and one shared
// value axis, log10 when every finite value is positive. Coordinates are in a 1000 x 100
// box that the SVG stretches to its width.

/** One run's buckets: each bucket's first step, its lowest and highest finite value (NaN
 * when it has none) and whether it holds a non-finite value. */
export interface Buckets {
  steps: ArrayLike<number>;
  lo: ArrayLike<number>;
  hi: ArrayLike<number>;
  bad: ArrayLike<number>;
}

export interface CurveLines {
  /** Polylines as "x,y" points, broken where a bucket has no finite value. */
  lines: string[][];
  /** x of each bucket that holds a non-finite value. */
  bad: number[];
}

export interface SharedCurves {
  curves: CurveLines[];
  /** The finite value range over every run, and whether y is log10. */
  lo: number;
  hi: number;
  log: boolean;
}

/** x in [0, 1000] of `step` on an axis from `first` to `last`. */
export function stepX(step: number, first: number, last: number): number {
  if (!(last > first)) return 500;
  return 1000 * Math.min(1, Math.max(0, (step - first) / (last - first)));
}

/** Lay out every run's buckets on one value axis shared by all of them. */
export function sharedCurves(runs: Buckets[], first: number, last: number): SharedCurves {
  let min = Infinity;
  let max = -Infinity;
  for (const run of runs) {
    for (let i = 0; i < run.steps.length; i++) {
      for (const v of [Number(run.lo[i]), Number(run.hi[i])]) {
        if (Number.isFinite(v)) { if (v < min) min = v; if (v > max) max = v; }
      }
    }
  }
  const log = min > 0 && Number.isFinite(max);
  const f = (v: number) => (log ? Math.log10(v) : v);
  let y0 = Number.isFinite(min) ? f(min) : 0;
  let y1 = Number.isFinite(max) ? f(max) : 1;
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const y = (v: number) => (96 - 92 * (f(v) - y0) / (y1 - y0)).toFixed(1);
  const curves = runs.map((run) => {
    const lines: string[][] = [];
    for (const values of [run.hi, run.lo]) {
      let points: string[] = [];
      for (let i = 0; i < run.steps.length; i++) {
        const v = Number(values[i]);
        if (Number.isFinite(v)) points.push(`${stepX(Number(run.steps[i]), first, last).toFixed(1)},${y(v)}`);
        else if (points.length) { lines.push(points); points = []; }
      }
      if (points.length) lines.push(points);
    }
    const bad: number[] = [];
    for (let i = 0; i < run.steps.length; i++) if (Number(run.bad[i])) bad.push(stepX(Number(run.steps[i]), first, last));
    return { lines, bad };
  });
  return { curves, lo: min, hi: max, log };
}
