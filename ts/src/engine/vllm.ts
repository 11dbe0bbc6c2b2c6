/**
 * vLLM over HTTP: `POST /v1/completions` with the prompt as token ids.
 *
 * Token-exact output: `return_tokens_as_token_ids` makes logprob tokens read
 * `token_id:<id>`, so sampled ids come back without detokenizing; `logprobs: 1`
 * returns each sampled token's logprob (start vLLM with
 * `--logprobs-mode raw_logprobs` so they are the untempered policy's).
 * MoE routing: with `--enable-return-routed-experts` vLLM adds
 * `routed_experts` [gen_len, layers, top_k] to the choice; since it arrives
 * with the last chunk, a routed request is yielded as one chunk at the end.
 */
import { flattenRouting, parseJson, postJson, sseData } from "./http.ts";
import { EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";
import type { FinishReason } from "../proxy/records.ts";

const PROMPT_SLOT = "__lego_prompt_ids__";

export interface VllmEngineConfig {
  /** Server origin, e.g. http://127.0.0.1:8000 */
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** Ask for and expect `routed_experts` (MoE models served with --enable-return-routed-experts). */
  routing?: boolean;
  /** Weight version of the served policy (vLLM does not know it). */
  policyVersion?: () => number;
}

export class VllmEngine implements EngineClient {
  readonly name = "vllm";
  constructor(private readonly config: VllmEngineConfig) {}

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const body = {
      model: this.config.model,
      prompt: PROMPT_SLOT,
      max_tokens: req.sampling.max_tokens,
      temperature: req.sampling.temperature,
      top_p: req.sampling.top_p,
      seed: req.sampling.seed ?? undefined,
      stop_token_ids: req.sampling.stop_token_ids,
      logprobs: 1,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      stream: true,
      request_id: req.request_id,
    };
    const headers: Record<string, string> = this.config.apiKey ? { authorization: `Bearer ${this.config.apiKey}` } : {};
    // Agent prompts are 10^4-10^5 ids: a typed array's native join is far cheaper than JSON.stringify of a JS array.
    const json = JSON.stringify(body).replace(`"${PROMPT_SLOT}"`, `[${req.prompt_ids.join(",")}]`);
    const res = await postJson(this.name, `${this.config.baseUrl}/v1/completions`, json, headers, signal, req.request_id);
    const version = this.config.policyVersion?.() ?? 0;
    const held: GenerateChunk = { token_ids: [], logprobs: [], routing: null, policy_version: version, finish_reason: null };
    for await (const data of sseData(this.name, res, signal, req.request_id)) {
      const choice = ((parseJson(this.name, data)["choices"] as unknown[]) ?? [])[0] as Record<string, unknown> | undefined;
      if (!choice) continue;
      const lp = (choice["logprobs"] ?? null) as { tokens?: string[]; token_logprobs?: number[] } | null;
      const ids = (lp?.tokens ?? []).map((t) => tokenId(t));
      const logprobs = lp?.token_logprobs ?? [];
      if (ids.length !== logprobs.length) throw new EngineError(this.name, `${ids.length} tokens but ${logprobs.length} logprobs`);
      const finish = finishReason(choice["finish_reason"]);
      if (this.config.routing) {
        held.token_ids.push(...ids);
        held.logprobs.push(...logprobs);
        if (choice["routed_experts"] !== undefined) held.routing = flattenRouting(this.name, choice["routed_experts"], held.token_ids.length).routing;
        if (finish) {
          if (!held.routing) throw new EngineError(this.name, "routing was requested but the response has no routed_experts (start vLLM with --enable-return-routed-experts)");
          yield { ...held, finish_reason: finish };
          return;
        }
      } else if (ids.length > 0 || finish) yield { token_ids: ids, logprobs, routing: null, policy_version: version, finish_reason: finish };
      if (finish) return;
    }
    throw new EngineError(this.name, `stream of ${req.request_id} ended without a finish_reason`);
  }

  async close(): Promise<void> {}
}

function tokenId(t: string): number {
  const m = /^token_id:(\d+)$/.exec(t);
  if (!m) throw new EngineError("vllm", `logprob token ${JSON.stringify(t)} is not token_id:<n>; is return_tokens_as_token_ids supported?`);
  return Number(m[1]);
}

function finishReason(v: unknown): FinishReason | null {
  if (v === null || v === undefined) return null;
  if (v === "stop" || v === "length" || v === "abort") return v;
  throw new EngineError("vllm", `unknown finish_reason ${JSON.stringify(v)}`);
}
