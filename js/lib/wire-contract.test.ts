// The wire contract: every widget's payload, written by tests/widgets/test_wire_contract.py
// (real widgets over real models and stores), decoded here with the browser's decoders.
// Each fixture holds the state as ipywidgets sends it (binary parts removed, with their
// paths) and what the Python side says it means (tests/widgets/payload_decode.py:canonical);
// both must agree. pytest runs this file with VINLENS_WIRE_FIXTURES set to its fixtures;
// a plain `vitest run` has no fixtures and skips it.
import { describe, expect, it } from "vitest";
import { aggregateMaps, type DatasetPayload } from "../widgets/attribution_viewer";
import {
  curveGeometry, mergeEvents, originText, replayText, type MonitorPayload, type NonFiniteEvent, type ReplayEntry, type SeriesPayload,
} from "../widgets/training_monitor";
import { buckets, DifferenceMap, verdictText, type DifferencePayload, type Verdict } from "../widgets/run_compare";
import { decode, type NDArray, type Table } from "./payload";

const env = (globalThis as any).process?.env ?? {};
const dir: string | undefined = env.VINLENS_WIRE_FIXTURES;

interface Fixture {
  name: string;
  state: any;
  buffer_paths: (string | number)[][];
  expected: any;
}

async function loadFixtures(): Promise<{ fixture: Fixture; buffers: DataView[] }[]> {
  if (!dir) return [];
  const fsName = "node:fs"; // no Node typings in this project: load it untyped
  const fs: any = await import(/* @vite-ignore */ fsName);
  const names: string[] = fs.readdirSync(dir).filter((f: string) => f.endsWith(".json")).sort();
  return names.map((file) => {
    const fixture = JSON.parse(fs.readFileSync(`${dir}/${file}`, "utf-8")) as Fixture;
    const buffers = fixture.buffer_paths.map((_, i) => {
      const bytes: Uint8Array = fs.readFileSync(`${dir}/${fixture.name}.${i}.bin`);
      return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    });
    return { fixture, buffers };
  });
}

/** ipywidgets' put_buffers: binary parts arrive as DataViews where they were removed. */
function putBuffers(state: any, paths: (string | number)[][], buffers: DataView[]): void {
  paths.forEach((path, i) => {
    let node = state;
    for (const key of path.slice(0, -1)) node = node[key];
    node[path[path.length - 1]] = buffers[i];
  });
}

function number(x: number): number | string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}

function isTable(v: any): v is Table {
  return typeof v?.column === "function" && Array.isArray(v?.columns);
}

function isArray(v: any): v is NDArray {
  return ArrayBuffer.isView(v?.data) && typeof v?.dtype === "string" && Array.isArray(v?.shape);
}

/** What a decoded value means, in the same terms as payload_decode.canonical(). */
function canonical(v: any): any {
  if (typeof v === "number") return number(v);
  if (v === null || typeof v !== "object") return v;
  if (v instanceof DataView) return { $bytes: Array.from(new Uint8Array(v.buffer, v.byteOffset, v.byteLength)) };
  if (Array.isArray(v)) return v.map(canonical);
  if (isTable(v)) {
    return {
      $table: {
        length: v.length,
        columns: v.columns.map((c) => c.kind === "string"
          ? { name: c.name, kind: "string", values: Array.from({ length: v.length }, (_, i) => c.get(i)) }
          : { name: c.name, kind: "numeric", dtype: c.dtype, values: Array.from(c.values as ArrayLike<number>, number) }),
      },
    };
  }
  if (isArray(v)) {
    return { $array: { dtype: v.dtype, shape: v.shape, values: Array.from(v.data as ArrayLike<number>, number) } };
  }
  const out: Record<string, any> = {};
  for (const [k, x] of Object.entries(v)) out[k] = canonical(x);
  return out;
}

const fixtures = await loadFixtures();

describe.skipIf(!dir)("wire contract: Python payloads decode to what they mean", () => {
  it("found fixtures", () => {
    expect(fixtures.length).toBeGreaterThan(0);
  });
  for (const { fixture, buffers } of fixtures) {
    it(fixture.name, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      expect(canonical(decode(fixture.state))).toEqual(fixture.expected);
    });
  }
  // Beyond decoding to the same meaning: the dataset view reads the decoded payload
  // through its own types, so every class's maps and strips must be where it looks.
  for (const { fixture, buffers } of fixtures.filter((f) => f.fixture.name === "attribution_viewer_dataset")) {
    it(`${fixture.name} has what the dataset view reads`, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      const ds = decode(fixture.state.dataset) as DatasetPayload;
      const classes = (ds.classes ?? []).map((c) => c.value);
      expect(classes[0]).toBe("all");
      expect(classes.length).toBeGreaterThan(1);
      for (const cls of classes) {
        for (const stat of ds.stats.map((st) => st.value)) {
          const maps = aggregateMaps(ds, cls, stat);
          expect(Object.keys(maps)).toEqual(fixture.state.camera_keys);
          for (const agg of Object.values(maps)) expect(isArray(agg.map) && agg.map.dtype === "float32").toBe(true);
        }
        for (const strip of Object.values(ds.concentration?.[cls] ?? {})) {
          for (const entry of [...strip.most, ...strip.least]) {
            expect(entry.kept_index === null || entry.kept_index < ds.kept.length).toBe(true);
            expect(isArray(entry.map)).toBe(true);
          }
        }
      }
    });
  }
  for (const { fixture, buffers } of fixtures.filter((f) => f.fixture.name === "training_monitor_events_message")) {
    it(`${fixture.name} is one new event`, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      const msg = decode(fixture.state) as { kind: string; start: number; events: NonFiniteEvent[] };
      expect(msg.kind).toBe("events");
      expect(msg.start).toBe(0);
      expect(msg.events.map((e) => e.step)).toEqual([2]);
      expect(originText(msg.events[0])).toContain("already non-finite where it entered the model");
      expect(mergeEvents([], msg.events)).toEqual(msg.events);
    });
  }
  for (const { fixture, buffers } of fixtures.filter((f) => f.fixture.name === "training_monitor_run")) {
    it(`${fixture.name} has what the run view reads`, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      const h = decode(fixture.state.history) as MonitorPayload;
      expect(h.source).toBe("run");
      expect(h.ranks).toEqual([0]);
      expect(h.samples).toBe((h.steps as NDArray).shape[0]);
      const s = decode(fixture.state.series) as SeriesPayload;
      expect(s.steps_total).toBe(7);
      expect(s.last_step).toBe(6);
      const steps = (s.steps as NDArray).data;
      const g = curveGeometry(steps, (s.grad_norm_lo as NDArray).data, (s.grad_norm_hi as NDArray).data, (s.grad_norm_bad as NDArray).data, 0, 6);
      expect(g.bad).toEqual([1000 * 5 / 6]); // the NaN gradient norm of step 5
      expect(Array.from((s.loss_bad as NDArray).data)).toEqual([0, 0, 0, 0, 0, 0, 0]); // its loss is 0
      const events = decode(fixture.state.events) as NonFiniteEvent[];
      expect(events.map((e) => [e.step, e.rank, e.replay])).toEqual([[5, 0, true]]);
      const replays = decode(fixture.state.replays) as Record<string, ReplayEntry>;
      expect(replays["0:5"].agrees).toBe(true);
      expect(replayText(replays["0:5"])).toContain("already non-finite where it entered the model");
    });
  }
  for (const { fixture, buffers } of fixtures.filter((f) => f.fixture.name === "run_compare")) {
    it(`${fixture.name} has what the comparison view reads`, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      const v = decode(fixture.state.verdict) as Verdict;
      expect([v.identical, v.first_step, v.cause, v.module]).toEqual([false, 0, "init", "2"]);
      expect(verdictText(v)).toContain("Likely cause: the initial weights differ.");
      const paths = v.module_paths ?? [];
      expect(paths).toContain("2");
      for (const node of [v.module_weights, v.module_outputs, v.module_grads]) {
        expect((node as NDArray).shape).toEqual([paths.length]);
      }
      expect(Number((v.module_weights as NDArray).data[paths.indexOf("2")])).toBe(0);
      const d = decode(fixture.state.difference) as DifferencePayload;
      const values = d.values as NDArray;
      expect(values.shape).toEqual([(d.paths ?? []).length, (d.steps as NDArray).shape[0]]);
      expect(new DifferenceMap(values.shape[0], values.shape[1], values.data).vmax).toBeLessThanOrEqual(0);
      // The view reads the curves' $array nodes as they arrive (buffers in place).
      for (const side of ["a", "b"]) expect(buckets(fixture.state.curves[side], "loss")!.steps.length).toBe(6);
    });
  }
  for (const { fixture, buffers } of fixtures.filter((f) => f.fixture.name === "training_monitor")) {
    it(`${fixture.name} has what the monitor view reads`, () => {
      putBuffers(fixture.state, fixture.buffer_paths, buffers);
      const h = decode(fixture.state.history) as MonitorPayload;
      const paths = h.paths ?? [];
      expect(paths.length).toBeGreaterThan(0);
      for (const field of [h.grad_norm, h.std]) {
        expect(isArray(field)).toBe(true);
        expect(field.shape).toEqual([paths.length, (h.steps as NDArray).shape[0]]);
      }
      const events = decode(fixture.state.events) as NonFiniteEvent[];
      expect(events.map((e) => e.step)).toEqual([5]);
      expect(h.events_total).toBe(1);
      // The loss made this NaN (sqrt at 0): the line says it entered the model.
      expect(originText(events[0])).toContain("already non-finite where it entered the model");
      const p = decode(fixture.state.precision) as { headroom: NDArray };
      expect(isArray(p.headroom)).toBe(true);
    });
  }
});
