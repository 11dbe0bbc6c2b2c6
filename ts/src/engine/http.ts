/** HTTP helpers shared by the vLLM and SGLang clients (Node's fetch; aborting the signal closes the connection, which both servers treat as an abort). */
import { EngineAbortedError, EngineError } from "./types.ts";

/** POSTs `body` (an object, or JSON already encoded as text or UTF-8 bytes). */
export async function postJson(engine: string, url: string, body: unknown, headers: Record<string, string>, signal: AbortSignal | undefined, requestId: string): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" || body instanceof Uint8Array ? (body as string | Uint8Array<ArrayBuffer>) : JSON.stringify(body), signal: signal ?? null });
  } catch (e) {
    if (signal?.aborted) throw new EngineAbortedError(engine, requestId);
    throw new EngineError(engine, `POST ${url} failed: ${(e as Error).message}`, { cause: e });
  }
  if (!res.ok) throw new EngineError(engine, `POST ${url} answered ${res.status}: ${(await res.text()).slice(0, 500)}`);
  return res;
}

/** The `data:` payloads of a server-sent-event body, until `[DONE]` or the end. */
export async function* sseData(engine: string, res: Response, signal: AbortSignal | undefined, requestId: string): AsyncGenerator<string> {
  if (!res.body) throw new EngineError(engine, "streaming response has no body");
  const decoder = new TextDecoder();
  let buf = "";
  try {
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(bytes, { stream: true });
      let cut: number;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of frame.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trimStart();
          if (data === "[DONE]") return;
          yield data;
        }
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
