/**
 * The engine boundary: token ids in, token ids + logprobs + routing out.
 * The proxy never depends on which engine is behind this interface; every
 * client (scripted, vLLM, SGLang, the Python engine over
 * ZeroMQ) implements `EngineClient`.
 */
import type { FinishReason, RoutingArray as Routing } from "../schema/index.ts";

export interface SamplingParams {
  temperature: number;
  top_p: number;
  max_tokens: number;
  /** Generation stops after sampling one of these (the token is returned). */
  stop_token_ids: number[];
  seed: number | null;
}

export interface GenerateRequest {
  /** Unique per call; engines use it to abort and to correlate logs. */
  request_id: string;
  /**
   * Valid until the call's stream ends: the proxy reuses the buffer for the thread's
   * next prompt once the turn is recorded. An engine that keeps the ids copies them.
   */
  prompt_ids: Int32Array | number[];
  sampling: SamplingParams;
  /**
   * Names the conversation this prompt continues (the proxy: its session and thread), so a
   * client may reuse work done for that conversation's previous prompt (the HTTP clients
   * re-encode only the ids past the common prefix, prompt-json.ts). A hint only: what
   * reaches the engine is the same whole prompt with or without it.
   */
  prefix_key?: string | null;
  /**
   * False when the caller uses the completion only once it is whole (the proxy does not ask
   * for this: docs/proxy.md says why). A client may then have the engine send it in one message instead
   * of one per sampled token (ZmqEngine: the control protocol's `stream`); the chunks it
   * yields concatenate to the same completion either way. Default true.
   */
  stream?: boolean;
}

/** A run of newly sampled tokens. Chunks of one call concatenate. */
export interface GenerateChunk {
  token_ids: number[];
  /** Log-probability of each sampled token under the raw policy; one per token. */
  logprobs: number[];
  /**
   * Experts per sampled token, flattened [token_ids.length, layers, top_k]; null for dense
   * models or when it comes later. Concatenated over a call's chunks it covers every
   * completion token in order: an engine that learns routing only at the end (ZmqEngine)
   * sends null on its token chunks and the whole completion's routing on the last chunk,
   * with `routing_recorded` then giving its row count.
   */
  routing: Routing | null;
  /**
   * Per routing row of this chunk (per token of this chunk when routing covers only
   * them): 1 where `routing` holds the engine's choice, 0 where it is padding (SGLang
   * reports no routing for the last sampled token, which was never fed back as input).
   * Omitted means all 1 for this chunk's tokens.
   */
  routing_recorded?: Uint8Array | null;
  /** Experts per prompt token from prefill, flattened [prompt, layers, top_k]; sent at most once. */
  prompt_routing?: Routing | null;
  policy_version: number;
  /** Set on the last chunk only. */
  finish_reason: FinishReason | null;
  /**
   * Last chunk only, where the engine reports it: prompt tokens served from its prefix cache
   * rather than computed (the Python engine's `cached_prompt_tokens`; vLLM/SGLang `cached_tokens`).
   */
  cached_prompt_tokens?: number | null;
}

export interface EngineClient {
  readonly name: string;
  /** Streams the completion. Aborting `signal` stops the engine-side request; the iterator then throws `EngineAbortedError`. */
  generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk>;
  /**
   * Prompt + completion tokens the served model takes at most (a prompt must be shorter,
   * leaving room for one sampled token); null when the engine does not say. The proxy
   * refuses longer prompts itself and clamps `max_tokens` to what is left.
   */
  contextWindow?(): Promise<number | null>;
  close(): Promise<void>;
}

/**
 * Why an engine refused a request for a value its caller chose: retrying it unchanged
 * fails the same way, so the proxy answers the harness with a 400, not a 5xx.
 */
export interface EngineRejection {
  /** The request field at fault: the prompt (too long for the context) or a sampling setting. */
  field: "prompt_ids" | "sampling.temperature" | "sampling.top_p" | "sampling.seed";
  /** For a prompt that does not fit: its length and the context window. */
  promptTokens?: number;
  contextWindow?: number;
}

/** The engine could not serve a request (bad response, HTTP error, transport down), or refused it (`rejection`). */
export class EngineError extends Error {
  /** Set when the engine refused the request for a value the caller chose. */
  readonly rejection: EngineRejection | null;
  constructor(
    readonly engine: string,
    message: string,
    options?: { cause?: unknown; rejection?: EngineRejection | null },
  ) {
    super(`${engine} engine: ${message}`, options);
    this.name = "EngineError";
    this.rejection = options?.rejection ?? null;
  }
}

/** No engine answered at all (not up yet, or gone): nothing of the call reached one, so a retry later may work. */
export class EngineUnavailableError extends EngineError {
  constructor(engine: string, message: string, options?: { cause?: unknown }) {
    super(engine, message, options);
    this.name = "EngineUnavailableError";
  }
}

/** A refusal the caller can fix (see EngineRejection), recognised by type rather than by message. */
export function isEngineRejection(e: unknown): e is EngineError & { rejection: EngineRejection } {
  return e instanceof EngineError && e.rejection !== null;
}

/** The caller aborted the request (client disconnect). */
export class EngineAbortedError extends Error {
  constructor(readonly engine: string, readonly requestId: string) {
    super(`${engine} engine: request ${requestId} aborted`);
    this.name = "EngineAbortedError";
  }
}

