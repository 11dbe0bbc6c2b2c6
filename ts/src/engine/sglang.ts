/**
 * SGLang over HTTP: `POST /generate` with `input_ids`.
 *
 * One JSON response per call (no streaming: the routing covers the whole
 * sequence and arrives at the end). `meta_info.output_token_logprobs` holds
 * `[logprob, token_id, text]` per sampled token. With `return_routed_experts`
 * SGLang returns base64 little-endian int32 of shape (seq_len - 1, layers,
 * top_k): row i is the routing of token i fed as input. The last sampled token
 * was never fed back, so its row is padding (routing_recorded 0); rows
 * [0, prompt) become `prompt_routing`.
 */
import { parseJson, postJson } from "./http.ts";
import { PROMPT_JSON_DEFAULTS, PromptJson } from "./prompt-json.ts";
import { EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";
import type { FinishReason } from "../schema/index.ts";

export interface SglangEngineConfig {
  baseUrl: string;
  apiKey?: string;
  /** MoE routing shape; set to request `return_routed_experts`. */
  routing?: { layers: number; topK: number };
  policyVersion?: () => number;
  /** Prompt + completion tokens the server takes at most (its `--context-length`); omit when unknown. */
  contextWindow?: number;
  /** Prompt ids whose JSON digits are kept for re-use by the next prompt of the same conversation (prompt-json.ts); 0 keeps none. */
  promptJsonTokens?: number;
}

export class SglangEngine implements EngineClient {
  readonly name = "sglang";
  private readonly prompts: PromptJson;
  constructor(private readonly config: SglangEngineConfig) {
    this.prompts = new PromptJson(config.promptJsonTokens ?? PROMPT_JSON_DEFAULTS.maxTokens);
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const body: Record<string, unknown> = {
      rid: req.request_id,
      sampling_params: {
        max_new_tokens: req.sampling.max_tokens,
        temperature: req.sampling.temperature,
        top_p: req.sampling.top_p,
        stop_token_ids: req.sampling.stop_token_ids,
        skip_special_tokens: false,
        no_stop_trim: true,
        ...(req.sampling.seed === null ? {} : { sampling_seed: req.sampling.seed }),
      },
      return_logprob: true,
      stream: false,
    };
    if (this.config.routing) body["return_routed_experts"] = true;
    const headers: Record<string, string> = this.config.apiKey ? { authorization: `Bearer ${this.config.apiKey}` } : {};
    // Agent prompts are 10^4-10^5 ids: their digits are written once per conversation, not once per call (prompt-json.ts).
    const json = this.prompts.body(`${JSON.stringify(body).slice(0, -1)},"input_ids":`, req.prompt_ids, "}", req.prefix_key);
    const res = await postJson(this.name, `${this.config.baseUrl}/generate`, json, headers, signal, req.request_id);
    const out = parseJson(this.name, await res.text());
    const meta = (out["meta_info"] ?? {}) as Record<string, unknown>;
    const entries = (meta["output_token_logprobs"] ?? []) as Array<[number, number, unknown]>;
    const ids = entries.map((e) => e[1]);
    const logprobs = entries.map((e) => e[0]);
    const chunk: GenerateChunk = { token_ids: ids, logprobs, routing: null, policy_version: this.config.policyVersion?.() ?? 0, finish_reason: finishReason(meta["finish_reason"]) };
    if (this.config.routing) {
      const { layers, topK } = this.config.routing;
      const width = layers * topK;
      const b64 = meta["routed_experts"];
      if (typeof b64 !== "string") throw new EngineError(this.name, "routing was requested but meta_info.routed_experts is missing");
      const all = decodeInt32(b64);
      const prompt = req.prompt_ids.length;
      const expectedRows = prompt + ids.length - 1;
      if (all.length !== expectedRows * width) throw new EngineError(this.name, `routed_experts has ${all.length} values, expected (${expectedRows}, ${layers}, ${topK})`);
      const narrow = all.every((v) => v >= 0 && v < 256);
      const make = (n: number) => (narrow ? new Uint8Array(n) : new Uint16Array(n));
      const promptRouting = make(prompt * width);
      promptRouting.set(all.subarray(0, prompt * width));
      const completion = make(ids.length * width);
      completion.set(all.subarray(prompt * width));
      const recorded = new Uint8Array(ids.length).fill(1);
      if (ids.length > 0) recorded[ids.length - 1] = 0;
      chunk.routing = completion;
      chunk.routing_recorded = recorded;
      chunk.prompt_routing = promptRouting;
    }
    yield chunk;
  }

  async contextWindow(): Promise<number | null> {
    return this.config.contextWindow ?? null;
  }

  async close(): Promise<void> {}
}

function decodeInt32(b64: string): Int32Array {
  const buf = Buffer.from(b64, "base64");
  if (buf.length % 4 !== 0) throw new EngineError("sglang", "routed_experts is not a whole number of int32 values");
  const out = new Int32Array(buf.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = buf.readInt32LE(i * 4);
  return out;
}

/** SGLang reports `{type: "stop" | "length" | "abort", ...}`. */
function finishReason(v: unknown): FinishReason {
  const type = v && typeof v === "object" ? (v as { type?: unknown }).type : v;
  if (type === "stop" || type === "length" || type === "abort") return type;
  throw new EngineError("sglang", `unknown finish_reason ${JSON.stringify(v)}`);
}
