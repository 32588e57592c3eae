// Request/response over anywidget custom messages (see vinlens/widgets/_base.py).
import type { AnyModel } from "@anywidget/types";
import { decode, joinBuffers } from "./payload";

/** Why a request ended without a result. */
export class CommandError extends Error {
  /** The kernel's traceback, when the kernel sent one. */
  traceback: string;
  /** True when the request was cancelled: by the kernel's reply, an abort, or dispose(). */
  cancelled: boolean;
  /** True when the request's timeout passed before the kernel answered. */
  timedOut: boolean;

  constructor(message: string, opts: { traceback?: string; cancelled?: boolean; timedOut?: boolean } = {}) {
    super(message);
    this.name = "CommandError";
    this.traceback = opts.traceback ?? "";
    this.cancelled = opts.cancelled ?? false;
    this.timedOut = opts.timedOut ?? false;
  }
}

interface Pending {
  name: string;
  resolve: (data: any) => void;
  reject: (err: CommandError) => void;
  onProgress?: (done: number, total: number) => void;
  /** Detaches the abort listener and clears the timer. */
  release: () => void;
}

export interface RequestOptions {
  onProgress?: (done: number, total: number) => void;
  /** Aborting cancels the command in the kernel and rejects with `cancelled: true`. */
  signal?: AbortSignal;
  /** Give up after this many milliseconds: cancel in the kernel, reject with `timedOut: true`. */
  timeoutMs?: number;
}

function newId(): string {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

/** One client per rendered view; `dispose()` stops listening (render's cleanup). */
export class CommandClient {
  private pending = new Map<string, Pending>();
  private disposed = false;
  private readonly handler: (msg: any, buffers: DataView[]) => void;

  constructor(private readonly model: AnyModel) {
    this.handler = (msg, buffers) => this.onMessage(msg, buffers ?? []);
    model.on("msg:custom", this.handler);
  }

  /** Send a command; resolves with the decoded result data or rejects with a CommandError. */
  request<T = any>(name: string, args: Record<string, unknown> = {}, opts: RequestOptions = {}): Promise<T> & { id: string } {
    const id = newId();
    let settle: Pending | undefined;
    const promise = new Promise<T>((resolve, reject) => {
      if (this.disposed) {
        reject(new CommandError(`${name}: the view was closed`, { cancelled: true }));
        return;
      }
      if (opts.signal?.aborted) {
        reject(new CommandError(`${name}: aborted`, { cancelled: true }));
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const onAbort = () => this.giveUp(id, new CommandError(`${name}: aborted`, { cancelled: true }));
      settle = {
        name,
        resolve,
        reject,
        onProgress: opts.onProgress,
        release: () => {
          if (timer !== undefined) clearTimeout(timer);
          opts.signal?.removeEventListener("abort", onAbort);
        },
      };
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      if (opts.timeoutMs !== undefined) {
        timer = setTimeout(() => this.giveUp(id, new CommandError(
          `${name}: no answer from the kernel after ${opts.timeoutMs} ms`, { timedOut: true },
        )), opts.timeoutMs);
      }
    }) as Promise<T> & { id: string };
    promise.id = id;
    if (settle) {
      this.pending.set(id, settle);
      this.model.send({ kind: "command", id, name, args });
    }
    return promise;
  }

  /** Ask the kernel to stop a command; its reply (cancelled) still settles the request. */
  cancel(id: string): void {
    this.model.send({ kind: "cancel", id });
  }

  get busy(): boolean {
    return this.pending.size > 0;
  }

  /** Stop listening and reject every pending request (`cancelled: true`); idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.model.off("msg:custom", this.handler);
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      p.release();
      p.reject(new CommandError(`${p.name}: the view was closed before the kernel answered`, { cancelled: true }));
    }
  }

  /** Stop waiting for `id`: cancel it in the kernel and reject it with `err`. */
  private giveUp(id: string, err: CommandError): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    p.release();
    this.cancel(id);
    p.reject(err);
  }

  private onMessage(msg: any, buffers: DataView[]): void {
    if (!msg || typeof msg !== "object") return;
    const p = this.pending.get(msg.id);
    if (!p) return; // another view's request, or one we stopped waiting for
    if (msg.kind === "progress") {
      p.onProgress?.(msg.done, msg.total);
      return;
    }
    if (msg.kind !== "result" && msg.kind !== "error") return;
    this.pending.delete(msg.id);
    p.release();
    if (msg.kind === "result") {
      try {
        p.resolve(decode(joinBuffers(msg.data, buffers)));
      } catch (e) {
        p.reject(new CommandError(`${p.name}: could not decode the kernel's result: ${(e as Error).message}`));
      }
    } else {
      p.reject(new CommandError(String(msg.message), {
        traceback: String(msg.traceback ?? ""),
        cancelled: Boolean(msg.cancelled),
      }));
    }
  }
}
