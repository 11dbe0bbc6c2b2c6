/**
 * Server-sent events writer (WHATWG HTML "Server-sent events": each event is
 * `event: NAME\n` (optional) + `data: LINE\n` + a blank line).
 *
 * Headers are set in one place; event names and data are validated before
 * anything is written (a newline inside would split the frame); `close()` is
 * idempotent so handlers can call it in `finally`.
 */
import type { ServerResponse } from "node:http";

export class SseWriter {
  private started = false;
  private closed = false;

  constructor(private readonly res: ServerResponse) {}

  get isOpen(): boolean {
    return !this.closed && !this.res.destroyed;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    this.res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
    });
  }

  /** Writes one event; `data` is usually JSON.stringify output (never contains a raw newline). */
  send(data: string, event?: string): void {
    if (event !== undefined && /[\r\n]/.test(event)) throw new RangeError(`SSE event name contains a newline: ${JSON.stringify(event)}`);
    if (/[\r\n]/.test(data)) throw new RangeError("SSE data contains a newline; encode it as JSON first");
    if (!this.isOpen) return;
    this.start();
    this.res.write(event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`);
  }

  sendJson(value: unknown, event?: string): void {
    this.send(JSON.stringify(value), event);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (!this.res.destroyed) {
      this.start();
      this.res.end();
    }
  }
}
