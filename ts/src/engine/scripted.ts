/**
 * A deterministic engine for tests, harness integration and benchmarks.
 *
 * Replies come from a script (text, tokenized with the real tokenizer, or raw
 * token ids). Logprobs and routing are fake but a pure function of
 * (prompt length, position, token), so two runs of one script produce the same
 * bytes. No sleeps unless `decodeMsPerToken` is set (benchmarks that model a
 * real engine's decode time): chunks are yielded as fast as the consumer pulls them.
 */
import type { RoutingArray as Routing } from "../schema/index.ts";
import { EngineAbortedError, EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";

/** One reply: text is encoded with `encode` and the end-of-turn token is appended unless `finish` is "length". */
export type ScriptedReply =
  | { text: string; finish?: "stop" | "length" }
  | { token_ids: number[]; finish?: "stop" | "length" };

export interface ScriptedCall {
  /** 0-based index of this call on the engine. */
  index: number;
  prompt_ids: Int32Array | number[];
}

export interface ScriptedEngineConfig {
  /** Replies in call order, or a function of the call. */
  script: ScriptedReply[] | ((call: ScriptedCall) => ScriptedReply);
  /** Turns reply text into token ids (the proxy's tokenizer). */
  encode: (text: string) => number[];
  /** Appended to text replies that finish with "stop" (Qwen3: <|im_end|> = 151645). */
  endOfTurnId: number;
  /** Tokens per streamed chunk. */
  chunkSize?: number;
  /**
   * MoE shape of the fake routing; omit for a dense model (routing null). With `inputRows`
   * the routing arrives as real engines report it, one row per token fed as input: the
   * prompt's rows (prefill) on the first chunk, and none for the last sampled token
   * (`routing_recorded` 0). Otherwise every sampled token has a row and the prompt none.
   */
  moe?: { layers: number; topK: number; experts: number; inputRows?: boolean };
  policyVersion?: number;
  /** Keep a copy of every prompt in `prompts` (default true; benchmarks turn it off so the copies do not pile up). */
  recordPrompts?: boolean;
  /**
   * Engine time per sampled token (default 0: none). Each chunk leaves when
   * its last token is due, as from an engine that streams while it decodes
   * (the proxy's engine clients all stream); the last one after the reply's
   * whole decode time.
   */
  decodeMsPerToken?: number;
  /**
   * Context window (prompt + completion tokens at most). A prompt at least this long is
   * refused with an EngineError carrying a rejection, as a real engine refuses it; a
   * completion stops at the window with "length". Omit for no limit.
   */
  contextWindow?: number;
  /** Whether `contextWindow()` reports the window (default true); false lets tests reach the engine's own refusal. */
  reportsContextWindow?: boolean;
}

export class ScriptedEngine implements EngineClient {
  readonly name = "scripted";
  private calls = 0;
  /** Prompts the engine received, in order (what "the engine saw"); empty when `recordPrompts` is false. */
  readonly prompts: Int32Array[] = [];

  constructor(private readonly config: ScriptedEngineConfig) {}

  get callCount(): number {
    return this.calls;
  }

  async contextWindow(): Promise<number | null> {
    return this.config.reportsContextWindow === false ? null : (this.config.contextWindow ?? null);
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const index = this.calls++;
    if (this.config.recordPrompts !== false) this.prompts.push(Int32Array.from(req.prompt_ids));
    const window = this.config.contextWindow;
    if (window !== undefined && req.prompt_ids.length >= window)
      throw new EngineError(this.name, `prompt of ${req.prompt_ids.length} tokens does not fit the context of ${window}`, {
        rejection: { field: "prompt_ids", promptTokens: req.prompt_ids.length, contextWindow: window },
      });
    const reply = this.replyFor({ index, prompt_ids: req.prompt_ids });
    const finishByScript = reply.finish ?? "stop";
    // A copy: `encode` may hand out a cached array (the proxy tokenizer does), which must not grow an end-of-turn id per call.
    let ids = "text" in reply ? this.config.encode(reply.text).slice() : reply.token_ids.slice();
    if ("text" in reply && finishByScript === "stop") ids.push(this.config.endOfTurnId);
    let finish: "stop" | "length" = finishByScript;
    const room = Math.min(req.sampling.max_tokens, window === undefined ? Infinity : window - req.prompt_ids.length);
    if (ids.length > room) {
      ids = ids.slice(0, room);
      finish = "length";
    }
    const stop = new Set(req.sampling.stop_token_ids);
    const stopAt = ids.findIndex((t) => stop.has(t));
    if (stopAt >= 0 && stopAt < ids.length - 1) {
      ids = ids.slice(0, stopAt + 1);
      finish = "stop";
    }
    const size = Math.max(1, this.config.chunkSize ?? 4);
    const promptLen = req.prompt_ids.length;
    const perToken = this.config.decodeMsPerToken ?? 0;
    const begun = performance.now();
    for (let start = 0; start < ids.length || start === 0; start += size) {
      const part = ids.slice(start, start + size);
      // Waiting for each chunk's deadline rather than an interval keeps the
      // timers' lateness from adding up over a reply's chunks.
      const due = begun + perToken * (start + part.length);
      // Yield to the event loop between chunks so aborts and other sessions interleave.
      if (perToken > 0 && due > performance.now()) {
        // libuv rounds timers to whole milliseconds against a cached loop clock,
        // so a timer can fire up to ~1 ms early; sleep again until truly due.
        while (!signal?.aborted && due > performance.now()) await sleep(due - performance.now(), signal);
      } else await Promise.resolve();
      if (signal?.aborted) throw new EngineAbortedError(this.name, req.request_id);
      const last = start + size >= ids.length;
      const chunk: GenerateChunk = {
        token_ids: part,
        logprobs: part.map((t, i) => fakeLogprob(promptLen + start + i, t)),
        routing: this.fakeRouting(part, promptLen + start),
        policy_version: this.config.policyVersion ?? 0,
        finish_reason: last ? finish : null,
      };
      if (this.config.moe?.inputRows) {
        if (start === 0) chunk.prompt_routing = this.fakeRouting(Array.from(req.prompt_ids), 0);
        if (last && chunk.routing && part.length > 0) {
          // The last sampled token is never fed back: its row is padding.
          const width = this.config.moe.layers * this.config.moe.topK;
          chunk.routing.fill(0, (part.length - 1) * width);
          chunk.routing_recorded = new Uint8Array(part.length).fill(1, 0, part.length - 1);
        }
      }
      yield chunk;
      if (last) break;
    }
  }

  async close(): Promise<void> {}

  private replyFor(call: ScriptedCall): ScriptedReply {
    const { script } = this.config;
    if (typeof script === "function") return script(call);
    const reply = script[call.index];
    if (!reply) throw new EngineError(this.name, `script has ${script.length} replies; call ${call.index} has none`);
    return reply;
  }

  /** Deterministic experts of tokens `ids` at positions `position`, `position + 1`, ... */
  private fakeRouting(ids: number[], position: number): Routing | null {
    const moe = this.config.moe;
    if (!moe) return null;
    const out = moe.experts <= 256 ? new Uint8Array(ids.length * moe.layers * moe.topK) : new Uint16Array(ids.length * moe.layers * moe.topK);
    let o = 0;
    for (let i = 0; i < ids.length; i++)
      for (let l = 0; l < moe.layers; l++)
        for (let k = 0; k < moe.topK; k++) out[o++] = ((ids[i]! + position + i) * 31 + l * 7 + k) % moe.experts;
    return out;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A fixed, finite, negative pseudo-logprob in (-2, 0). */
export function fakeLogprob(position: number, token: number): number {
  const h = Math.imul(position ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(token, 0xc2b2ae35);
  return -(((h >>> 0) % 1999) + 1) / 1000;
}
