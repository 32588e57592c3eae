// Request/response over anywidget custom messages (see vinlens/widgets/_base.py).
import type { AnyModel } from "@anywidget/types";
import { decode, joinBuffers } from "./payload";

export interface CommandError extends Error {
  traceback: string;
  cancelled: boolean;
}

interface Pending {
  resolve: (data: any) => void;
  reject: (err: CommandError) => void;
  onProgress?: (done: number, total: number) => void;
}

export interface RequestOptions {
  onProgress?: (done: number, total: number) => void;
}

function newId(): string {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

/** One client per rendered view; `dispose()` stops listening (render's cleanup). */
export class CommandClient {
  private pending = new Map<string, Pending>();
  private readonly handler: (msg: any, buffers: DataView[]) => void;

  constructor(private readonly model: AnyModel) {
    this.handler = (msg, buffers) => this.onMessage(msg, buffers ?? []);
    model.on("msg:custom", this.handler);
  }

  /** Send a command; resolves with the decoded result data or rejects with the kernel's error. */
  request<T = any>(name: string, args: Record<string, unknown> = {}, opts: RequestOptions = {}): Promise<T> & { id: string } {
    const id = newId();
    const promise = new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onProgress: opts.onProgress });
    }) as Promise<T> & { id: string };
    promise.id = id;
    this.model.send({ kind: "command", id, name, args });
    return promise;
  }

  cancel(id: string): void {
    this.model.send({ kind: "cancel", id });
  }

  get busy(): boolean {
    return this.pending.size > 0;
  }

  dispose(): void {
    this.model.off("msg:custom", this.handler);
    this.pending.clear();
  }

  private onMessage(msg: any, buffers: DataView[]): void {
    if (!msg || typeof msg !== "object") return;
    const p = this.pending.get(msg.id);
    if (!p) return; // another view's request, or one we stopped waiting for
    if (msg.kind === "progress") {
      p.onProgress?.(msg.done, msg.total);
      return;
    }
    this.pending.delete(msg.id);
    if (msg.kind === "result") {
      p.resolve(decode(joinBuffers(msg.data, buffers)));
    } else if (msg.kind === "error") {
      const err = new Error(String(msg.message)) as CommandError;
      err.traceback = String(msg.traceback ?? "");
      err.cancelled = Boolean(msg.cancelled);
      p.reject(err);
    }
  }
}
