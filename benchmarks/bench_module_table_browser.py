"""Module table in the browser: 50,000 rows against 100, and binary payload against JSON.

Measures, in one run on this machine (ratios, since the machine is shared and noisy):

1. display-to-first-rows-painted of the built module-table widget (``render`` called with
   the payload already in the page as DataViews, as ipywidgets delivers it, until the
   frame after the first rows are in the DOM) for a 50,000-row model / a ~100-row model;
   target <= 3x.
2. the longest frame (requestAnimationFrame deltas) while scrolling the 50,000-row table
   to the end, next to the same loop on the 100-row table (what a frame costs here at
   all); target <= 50 ms.
3. payload bytes and encode time for 50,000 rows: ``module_table_payload`` (binary
   columns) vs the per-row JSON a naive widget would send.

Runs Debian's Chromium (``/usr/bin/chromium``) through Playwright; the page is served from
memory (``page.route``), no Jupyter server. Build the bundle first: ``npm run build``.

    .venv/bin/python benchmarks/bench_module_table_browser.py [--quick]
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from torch import nn

from vinlens.model_inspection import inspect_model
from vinlens.widgets._payload import payload_nbytes, split_buffers, to_jsonable
from vinlens.widgets.module_table import module_table_payload

STATIC = Path(__file__).resolve().parents[1] / "src" / "vinlens" / "widgets" / "static"
CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
ORIGIN = "http://vinlens.bench"

PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="/module_table.css"></head>
<body style="margin:0;width:1200px"><div id="host"></div></body></html>"""

# A minimal anywidget model over a plain state object (what the widget reads and writes).
HARNESS = """
window.__vl = {
  b64ToView(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new DataView(bytes.buffer);
  },
  revive(node) {
    if (Array.isArray(node)) return node.map((n) => window.__vl.revive(n));
    if (node && typeof node === "object") {
      if ("$b64" in node) return window.__vl.b64ToView(node.$b64);
      const out = {};
      for (const [k, v] of Object.entries(node)) out[k] = window.__vl.revive(v);
      return out;
    }
    return node;
  },
  model(state) {
    const handlers = new Map();
    return {
      get: (k) => state[k],
      set: (k, v) => { state[k] = v; (handlers.get("change:" + k) || []).forEach((f) => f()); },
      on: (e, f) => { if (!handlers.has(e)) handlers.set(e, []); handlers.get(e).push(f); },
      off: () => {},
      save_changes: () => {},
      send: () => {},
      widget_manager: {},
    };
  },
};
"""

MEASURE_FIRST_PAINT = """async (stateJson) => {
  const mod = await import("/module_table.js");
  const state = window.__vl.revive(JSON.parse(stateJson));
  const host = document.getElementById("host");
  host.replaceChildren();
  const el = document.createElement("div");
  host.append(el);
  const model = window.__vl.model(state);
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));  // settle
  const t0 = performance.now();
  window.__cleanup = mod.default.render({ model, el });
  const rows = el.querySelectorAll(".vl-vt-row:not([hidden])").length;
  // the frame that shows the rows: rAF runs before paint, the task after it runs after
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const t1 = performance.now();
  return { ms: t1 - t0, rows };
}"""

MEASURE_SCROLL = """async (stepRows) => {
  const vp = document.querySelector(".vl-vt-viewport");
  const rowHeight = 24;
  vp.scrollTop = 0;
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const deltas = [];
  const work = [];
  let last = performance.now();
  let frames = 0;
  await new Promise((resolve) => {
    function frame(now) {
      deltas.push(now - last);
      last = now;
      frames++;
      const end = vp.scrollHeight - vp.clientHeight;
      if (vp.scrollTop >= end - 1) { resolve(); return; }
      // The widget repaints on the scroll event; dispatching it here times that work
      // (the browser's own scroll event then finds nothing new to paint).
      const t = performance.now();
      vp.scrollTop = Math.min(end, vp.scrollTop + stepRows * rowHeight);
      vp.dispatchEvent(new Event("scroll"));
      work.push(performance.now() - t);
      requestAnimationFrame(frame);
    }
    requestAnimationFrame((now) => { last = now; requestAnimationFrame(frame); });
  });
  const lastRow = Math.max(...[...vp.querySelectorAll(".vl-vt-row:not([hidden])")].map((r) => Number(r.dataset.row)));
  const longest = Math.max(...deltas.slice(1));
  deltas.sort((a, b) => a - b);
  work.sort((a, b) => a - b);
  return { longest, median: deltas[deltas.length >> 1], frames, lastRow,
           workMax: work[work.length - 1], workMedian: work[work.length >> 1] };
}"""


TRACE_SCROLL = """async (stepRows) => {
  // The scroll loop again, each frame marked for the trace (blink.user_timing).
  const vp = document.querySelector(".vl-vt-viewport");
  vp.scrollTop = 0;
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  let i = 0;
  await new Promise((resolve) => {
    function frame() {
      performance.mark(`vl-frame-${i++}`);
      const end = vp.scrollHeight - vp.clientHeight;
      if (vp.scrollTop >= end - 1) { resolve(); return; }
      performance.mark("vl-work-start");
      vp.scrollTop = Math.min(end, vp.scrollTop + stepRows * 24);
      vp.dispatchEvent(new Event("scroll"));
      performance.mark("vl-work-end");
      requestAnimationFrame(frame);
    }
    requestAnimationFrame(() => requestAnimationFrame(frame));
  });
  return i;
}"""

# What each main-thread trace event of a frame is, for the per-frame breakdown.
TRACE_KINDS = {
    "FireAnimationFrame": "table script",
    "EventDispatch": "event handlers",
    "UpdateLayoutTree": "style",
    "Layout": "layout",
    "PrePaint": "paint (main thread)",
    "Paint": "paint (main thread)",
    "Layerize": "paint (main thread)",
    "Commit": "commit to compositor",
    "MinorGC": "garbage collection",
    "MajorGC": "garbage collection",
    "V8.GC_SCAVENGER": "garbage collection",
}


def analyze_trace(raw: bytes, top: int = 5) -> list[str]:
    """Where the longest frames of a traced scroll went, in main-thread CPU time.

    Trace events carry wall time (``dur``) and the thread's CPU time (``tdur``); on a
    shared machine a frame can be long while the renderer's main thread used little CPU
    (it waited to be scheduled). Per frame: wall time, CPU time of the main thread's
    tasks, and that CPU time by kind; the table's own work is the rAF callback that
    scrolls and repaints the rows that came into view.
    """
    events = json.loads(raw)
    events = events["traceEvents"] if isinstance(events, dict) else events
    marked = [e for e in events if e.get("name", "").startswith("vl-frame-")]
    frame_ts = sorted({e["ts"] for e in marked})
    if len(frame_ts) < 3:
        return ["trace: no frame marks found"]
    renderer = (marked[0]["pid"], marked[0]["tid"])
    complete = [
        e
        for e in events
        if (e.get("pid"), e.get("tid")) == renderer and e.get("ph") == "X" and "dur" in e
    ]
    names = {e["name"] for e in complete}
    task_name = (
        "ThreadControllerImpl::RunTask" if "ThreadControllerImpl::RunTask" in names else "RunTask"
    )

    def cpu_in(e: dict[str, Any], a: float, b: float) -> float:
        overlap = min(e["ts"] + e["dur"], b) - max(e["ts"], a)
        if overlap <= 0 or e["dur"] <= 0:
            return 0.0
        return float(e.get("tdur", e["dur"])) * overlap / e["dur"]

    frames = []
    for a, b in itertools.pairwise(frame_ts):
        cpu = sum(cpu_in(e, a, b) for e in complete if e["name"] == task_name)
        kinds: dict[str, float] = {}
        for e in complete:
            kind = TRACE_KINDS.get(e["name"])
            if kind:
                kinds[kind] = kinds.get(kind, 0.0) + cpu_in(e, a, b)
        frames.append((b - a, cpu, kinds))
    table_cpu = sorted(f[2].get(TRACE_KINDS["FireAnimationFrame"], 0.0) for f in frames)
    main_cpu = sorted(f[1] for f in frames)
    frames.sort(key=lambda f: -f[0])
    lines = [
        f"trace of {len(frames)} scroll frames: main-thread CPU per frame median "
        f"{main_cpu[len(main_cpu) // 2] / 1000:.1f} ms, max {main_cpu[-1] / 1000:.1f} ms; "
        f"of it the table's script (rAF) median {table_cpu[len(table_cpu) // 2] / 1000:.1f} ms, "
        f"max {table_cpu[-1] / 1000:.1f} ms",
        "the longest frames, main-thread CPU by kind:",
    ]
    for wall, cpu, kinds in frames[:top]:
        parts = ", ".join(
            f"{k} {v / 1000:.1f}"
            for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
            if v >= 50
        )
        lines.append(
            f"  frame {wall / 1000:6.1f} ms wall: main thread used {cpu / 1000:.1f} ms CPU "
            f"({parts}); {max(0.0, wall - cpu) / 1000:.1f} ms waiting (vsync, or a CPU)"
        )
    return lines


MEASURE_IDLE = """async (frames) => {
  // The same number of frames with nothing to do: what a frame costs on this machine now.
  const deltas = [];
  let last = performance.now();
  await new Promise((resolve) => {
    function frame(now) {
      deltas.push(now - last);
      last = now;
      if (deltas.length > frames) resolve(); else requestAnimationFrame(frame);
    }
    requestAnimationFrame((now) => { last = now; requestAnimationFrame(frame); });
  });
  const longest = Math.max(...deltas.slice(1));
  deltas.sort((a, b) => a - b);
  return { longest, median: deltas[deltas.length >> 1] };
}"""


def tree_model(stages: int, blocks: int, leaves: int) -> nn.Module:
    """A real module tree: stages of blocks of small leaves (Linear and activations)."""
    root = nn.Module()
    for s in range(stages):
        stage = nn.Module()
        for b in range(blocks):
            block = nn.Module()
            for leaf in range(leaves):
                block.add_module(str(leaf), nn.Linear(2, 2) if leaf % 4 == 0 else nn.GELU())
            stage.add_module(f"block{b}", block)
        root.add_module(f"stage{s}", stage)
    return root


def widget_state(model: nn.Module) -> tuple[str, int]:
    """The traitlet state the widget gets, bytes as base64 for the trip into the page."""
    table, summary = module_table_payload(inspect_model(model))

    def b64(node: Any) -> Any:
        if isinstance(node, bytes):
            return {"$b64": base64.b64encode(node).decode()}
        if isinstance(node, dict):
            return {k: b64(v) for k, v in node.items()}
        if isinstance(node, list):
            return [b64(v) for v in node]
        return node

    state = {
        "modules": b64(table),
        "model_summary": summary,
        "selected_paths": [],
        "tree_view": True,
        "status": "idle",
        "error": "",
        "error_traceback": "",
    }
    return json.dumps(state), table["$table"]["length"]


def payload_figures(model: nn.Module, repeats: int) -> dict[str, float]:
    meta = inspect_model(model)
    binary_s, json_s = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        table, _ = module_table_payload(meta)
        content, buffers = split_buffers(table)
        binary_msg = json.dumps(content)
        binary_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        json_msg = json.dumps(to_jsonable(list(meta.modules)))
        json_s.append(time.perf_counter() - t)
    return {
        "binary_bytes": payload_nbytes(table) + len(binary_msg),
        "json_bytes": len(json_msg),
        "binary_ms": 1000 * min(binary_s),
        "json_ms": 1000 * min(json_s),
        "buffers": len(buffers),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, faster scroll")
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="also trace one more scroll of the 50,000-row table in Chromium, save the trace "
        "(open in chrome://tracing or Perfetto) and print where the longest frames spent time",
    )
    args = parser.parse_args()
    if not (STATIC / "module_table.js").exists():
        print(f"missing {STATIC / 'module_table.js'}: run `npm run build` first", file=sys.stderr)
        return 2
    repeats = 3 if args.quick else 7
    step_rows = 400 if args.quick else 100  # rows scrolled per frame

    t = time.perf_counter()
    big = tree_model(100, 10, 49)  # 1 + 100 + 1,000 + 49,000 = 50,101 modules
    small = tree_model(2, 5, 9)  # 1 + 2 + 10 + 90 = 103 modules
    big_state, big_rows = widget_state(big)
    small_state, small_rows = widget_state(small)
    print(f"models built and inspected in {time.perf_counter() - t:.1f} s")

    files = {
        "/": (PAGE.encode(), "text/html"),
        "/module_table.js": ((STATIC / "module_table.js").read_bytes(), "text/javascript"),
        "/module_table.css": ((STATIC / "module_table.css").read_bytes(), "text/css"),
    }

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                # headless pages count as hidden: without these rAF is throttled
                "--disable-renderer-backgrounding",
                "--disable-background-timer-throttling",
                "--disable-backgrounding-occluded-windows",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        def serve(route: Any) -> None:
            path = route.request.url[len(ORIGIN) :].split("?")[0] or "/"
            body, mime = files.get(path, (b"not found", "text/plain"))
            route.fulfill(status=200 if path in files else 404, body=body, content_type=mime)

        page.route(f"{ORIGIN}/**", serve)
        page.goto(f"{ORIGIN}/")
        page.add_script_tag(content=HARNESS)

        def first_paint(state: str) -> tuple[float, int]:
            times, rows = [], 0
            for _ in range(repeats):
                out = page.evaluate(MEASURE_FIRST_PAINT, state)
                times.append(out["ms"])
                rows = out["rows"]
                page.evaluate("window.__cleanup && window.__cleanup()")
            return statistics.median(times), rows

        # interleave so both sizes see the same machine load
        small_ms, small_dom = first_paint(small_state)
        big_ms, big_dom = first_paint(big_state)
        small_ms2, _ = first_paint(small_state)
        small_ms = min(small_ms, small_ms2)

        page.evaluate(MEASURE_FIRST_PAINT, small_state)
        small_scroll = page.evaluate(MEASURE_SCROLL, 2)
        page.evaluate(MEASURE_FIRST_PAINT, big_state)
        big_scroll = page.evaluate(MEASURE_SCROLL, step_rows)
        idle = page.evaluate(MEASURE_IDLE, big_scroll["frames"])
        trace_lines: list[str] = []
        if args.trace:
            browser.start_tracing(
                page=page,
                categories=[
                    "devtools.timeline",
                    "blink.user_timing",
                    "v8",
                    "disabled-by-default-devtools.timeline",
                    "cc",
                    "toplevel",
                ],
            )
            page.evaluate(TRACE_SCROLL, step_rows)
            raw = browser.stop_tracing()
            Path(args.trace).write_bytes(raw)
            trace_lines = [f"trace saved to {args.trace}", *analyze_trace(raw)]
        browser.close()

    fig = payload_figures(big, repeats)
    print()
    print(f"first rows painted, {big_rows:,} rows: {big_ms:7.1f} ms ({big_dom} row elements)")
    print(
        f"first rows painted, {small_rows:,} rows:    {small_ms:7.1f} ms ({small_dom} row elements)"
    )
    print(f"  ratio 50k / 100: {big_ms / small_ms:.2f}x   (target <= 3x)")
    print(
        f"scroll {big_rows:,} rows to the end ({big_scroll['frames']} frames, {step_rows} rows/frame, "
        f"reached row {big_scroll['lastRow']:,}): longest frame {big_scroll['longest']:.1f} ms, "
        f"median {big_scroll['median']:.1f} ms   (target <= 50 ms)"
    )
    print(
        f"  widget work per frame (repaint of the rows scrolled into view): median "
        f"{big_scroll['workMedian']:.2f} ms, max {big_scroll['workMax']:.2f} ms"
    )
    print(
        f"  idle frames of the same page, same count: longest {idle['longest']:.1f} ms, median "
        f"{idle['median']:.1f} ms; scrolling / idle longest: "
        f"{big_scroll['longest'] / max(idle['longest'], 1e-9):.2f}x"
    )
    print(
        f"  same loop on {small_rows} rows: longest frame {small_scroll['longest']:.1f} ms; "
        f"ratio {big_scroll['longest'] / max(small_scroll['longest'], 1e-9):.2f}x"
    )
    print(
        f"payload for {big_rows:,} rows: binary {fig['binary_bytes'] / 1e6:.2f} MB "
        f"({fig['buffers']} buffers) vs per-row JSON {fig['json_bytes'] / 1e6:.2f} MB: "
        f"{fig['json_bytes'] / fig['binary_bytes']:.2f}x smaller"
    )
    print(
        f"encode time: binary {fig['binary_ms']:.0f} ms vs JSON {fig['json_ms']:.0f} ms: "
        f"{fig['json_ms'] / fig['binary_ms']:.2f}x"
    )
    for line in trace_lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
