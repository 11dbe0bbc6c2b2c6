/**
 * HTTP helpers shared by the vLLM and SGLang clients, on node:http with a keep-alive
 * agent rather than Node's fetch, whose WHATWG streams and Request/Response objects
 * are CPU the proxy pays per call (in the proxy bench the fetch-based client cost
 * ~1.3 ms more proxy CPU per agent call than the ZeroMQ one). Aborting the signal
 * destroys the socket, which both servers treat as an abort.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { EngineAbortedError, EngineError } from "./types.ts";

// One pool per process: every client of every engine reuses its connections (as fetch's global pool did).
const AGENTS = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

/** A successful response: its body as text, or as its bytes while they arrive. */
export interface HttpReply {
  readonly status: number;
  text(): Promise<string>;
  readonly body: AsyncIterable<Uint8Array>;
}

async function readAll(res: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of res) parts.push(part as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

/** POSTs `body` (an object, or JSON already encoded as text or UTF-8 bytes). */
export async function postJson(engine: string, url: string, body: unknown, headers: Record<string, string>, signal: AbortSignal | undefined, requestId: string): Promise<HttpReply> {
  const payload = typeof body === "string" ? Buffer.from(body) : body instanceof Uint8Array ? body : Buffer.from(JSON.stringify(body));
  if (signal?.aborted) throw new EngineAbortedError(engine, requestId);
  let res: IncomingMessage;
  try {
    const target = new URL(url);
    const tls = target.protocol === "https:";
    res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = (tls ? httpsRequest : httpRequest)(target, {
        method: "POST",
        agent: tls ? AGENTS.https : AGENTS.http,
        headers: { "content-type": "application/json", "content-length": String(payload.byteLength), ...headers },
        ...(signal ? { signal } : {}),
      });
      req.once("response", resolve).once("error", reject);
      req.end(payload);
    });
  } catch (e) {
    if (signal?.aborted) throw new EngineAbortedError(engine, requestId);
    throw new EngineError(engine, `POST ${url} failed: ${(e as Error).message}`, { cause: e });
  }
  const status = res.statusCode ?? 0;
  if (status < 200 || status >= 300) {
    const text = await readAll(res).catch(() => "");
    throw new EngineError(engine, `POST ${url} answered ${status}: ${text.slice(0, 500)}`);
  }
  return { status, text: () => readAll(res), body: res };
}

/**
 * The `data:` payloads of a server-sent-event body, until `[DONE]`; the body is
 * then read to its end (servers end it right after), so the connection goes back
 * to the pool instead of being destroyed with an unread response.
 */
export async function* sseData(engine: string, res: HttpReply, signal: AbortSignal | undefined, requestId: string): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  let done = false;
  try {
    for await (const bytes of res.body) {
      if (done) continue;
      buf += decoder.decode(bytes, { stream: true });
      let cut: number;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of frame.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trimStart();
          if (data === "[DONE]") {
            done = true;
            break;
          }
          yield data;
        }
        if (done) break;
      }
    }
  } catch (e) {
    if (signal?.aborted) throw new EngineAbortedError(engine, requestId);
    throw new EngineError(engine, `stream broke: ${(e as Error).message}`, { cause: e });
  }
}

export function parseJson(engine: string, text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (v && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // fall through to the typed error below
  }
  throw new EngineError(engine, `expected a JSON object, got ${text.slice(0, 200)}`);
}

/** Flattens nested [n][layers][top_k] expert ids; uint8 when every id fits (≤ 256 experts). */
export function flattenRouting(engine: string, nested: unknown, rows: number): { routing: Uint8Array | Uint16Array; width: number } {
  if (!Array.isArray(nested) || nested.length !== rows) throw new EngineError(engine, `routed_experts: expected ${rows} rows`);
  const flat: number[] = [];
  let width = -1;
  for (const row of nested) {
    const vals = (row as unknown[]).flat(2) as number[];
    if (width === -1) width = vals.length;
    if (vals.length !== width || vals.some((v) => !Number.isInteger(v) || v < 0)) throw new EngineError(engine, "routed_experts: ragged or non-integer rows");
    flat.push(...vals);
  }
  const max = flat.reduce((a, b) => Math.max(a, b), 0);
  return { routing: max < 256 ? Uint8Array.from(flat) : Uint16Array.from(flat), width: Math.max(width, 0) };
}
