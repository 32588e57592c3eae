// A fake anywidget model for vitest: traitlet get/set with change events, custom
// messages captured in `sent`, and `receive()` to play the kernel's replies.
import type { AnyModel } from "@anywidget/types";

type Handler = (...args: any[]) => void;

export class FakeModel<T extends Record<string, any> = Record<string, any>> implements AnyModel<T> {
  sent: { content: any; buffers?: any[] }[] = [];
  saved = 0;
  private handlers = new Map<string, Set<Handler>>();
  widget_manager = { get_model: async () => { throw new Error("no widget manager in tests"); } } as any;

  constructor(private state: T) {}

  get<K extends keyof T>(key: K): T[K] {
    return this.state[key];
  }

  set<K extends keyof T>(key: K, value: T[K]): void {
    this.state[key] = value;
    this.emit(`change:${String(key)}`);
  }

  on(event: string, cb: Handler): void {
    if (!this.handlers.has(event)) this.handlers.set(event, new Set());
    this.handlers.get(event)!.add(cb);
  }

  off(event?: string | null, cb?: Handler | null): void {
    if (!event) { this.handlers.clear(); return; }
    if (!cb) { this.handlers.delete(event); return; }
    this.handlers.get(event)?.delete(cb);
  }

  save_changes(): void {
    this.saved += 1;
  }

  send(content: any, _callbacks?: any, buffers?: any[]): void {
    this.sent.push({ content, buffers });
  }

  /** Deliver a kernel -> browser custom message. */
  receive(msg: any, buffers: DataView[] = []): void {
    for (const cb of this.handlers.get("msg:custom") ?? []) cb(msg, buffers);
  }

  /** Set a traitlet as the kernel would (fires change events). */
  kernelSet<K extends keyof T>(key: K, value: T[K]): void {
    this.set(key, value);
  }

  emit(event: string): void {
    for (const cb of this.handlers.get(event) ?? []) cb();
  }

  listenerCount(event: string): number {
    return this.handlers.get(event)?.size ?? 0;
  }
}

/** bytes -> DataView, as ipywidgets delivers binary traitlets and buffers. */
export function dataView(bytes: ArrayBufferView | ArrayBuffer): DataView {
  if (bytes instanceof ArrayBuffer) return new DataView(bytes);
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A string column as encode_table() sends it: UTF-8 bytes plus uint32 offsets, both as DataView. */
export function stringColumn(name: string, values: string[]) {
  const enc = new TextEncoder();
  const parts = values.map((v) => enc.encode(v));
  const offsets = new Uint32Array(values.length + 1);
  parts.forEach((p, i) => { offsets[i + 1] = offsets[i] + p.length; });
  const data = new Uint8Array(offsets[values.length]);
  parts.forEach((p, i) => data.set(p, offsets[i]));
  return { name, dtype: "string", offsets: dataView(offsets), data: dataView(data) };
}
