/**
 * vLLM over HTTP: `POST /v1/completions` with the prompt as token ids.
 *
 * Token-exact output: `return_tokens_as_token_ids` makes logprob tokens read
 * `token_id:<id>`, so sampled ids come back without detokenizing; `logprobs: 1`
 * returns each sampled token's logprob (start vLLM with
 * `--logprobs-mode raw_logprobs` so they are the untempered policy's).
 *
 * MoE routing (`routing: true`, server started with
 * `--enable-return-routed-experts`), as vLLM implements it (docs/proxy.md
 * "vLLM routed experts" cites the source): the scheduler reads the experts of
 * the request's first `num_tokens - 1` KV slots when it stops, i.e. one row per
 * token that was fed to the model as input: every prompt token and every
 * sampled token but the last, shape (prompt + completion - 1, layers, top_k),
 * int32. The completions endpoint puts it only on the non-streaming response's
 * choice, as `routed_experts` encoded with base64 (streamed chunks never carry
 * it), so a routed call is sent with `stream: false` and yields one chunk.
 * Rows [0, prompt) become `prompt_routing`; the last sampled token has no row
 * (padding, `routing_recorded` 0), as with SGLang.
 *
 * Context window: `contextWindow` in the config, else the served model's
 * `max_model_len` from `GET /v1/models` (vLLM's model cards carry it).
 */
import { flattenRouting, parseJson, postJson, sseData } from "./http.ts";
import { PROMPT_JSON_DEFAULTS, PromptJson } from "./prompt-json.ts";
import { EngineAbortedError, EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";
import type { FinishReason } from "../schema/index.ts";


export interface VllmEngineConfig {
  /** Server origin, e.g. http://127.0.0.1:8000 */
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** Ask for and expect `routed_experts` (MoE models served with --enable-return-routed-experts). */
  routing?: boolean;
  /** Weight version of the served policy (vLLM does not know it). */
  policyVersion?: () => number;
  /** Prompt + completion tokens at most; omit to read `max_model_len` from `GET /v1/models`. */
  contextWindow?: number;
  /** Prompt ids whose JSON digits are kept for re-use by the next prompt of the same conversation (prompt-json.ts); 0 keeps none. */
  promptJsonTokens?: number;
}

type Choice = Record<string, unknown>;

export class VllmEngine implements EngineClient {
  readonly name = "vllm";
  private readonly prompts: PromptJson;
  constructor(private readonly config: VllmEngineConfig) {
    this.prompts = new PromptJson(config.promptJsonTokens ?? PROMPT_JSON_DEFAULTS.maxTokens);
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const routed = this.config.routing === true;
    const body = {
      model: this.config.model,
      max_tokens: req.sampling.max_tokens,
      temperature: req.sampling.temperature,
      top_p: req.sampling.top_p,
      seed: req.sampling.seed ?? undefined,
      stop_token_ids: req.sampling.stop_token_ids,
      logprobs: 1,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      stream: !routed,
      request_id: req.request_id,
    };
    const headers: Record<string, string> = this.config.apiKey ? { authorization: `Bearer ${this.config.apiKey}` } : {};
    // Agent prompts are 10^4-10^5 ids: their digits are written once per conversation, not once per call (prompt-json.ts).
    const json = this.prompts.body(`${JSON.stringify(body).slice(0, -1)},"prompt":`, req.prompt_ids, "}", req.prefix_key);
    const res = await postJson(this.name, `${this.config.baseUrl}/v1/completions`, json, headers, signal, req.request_id);
    const version = this.config.policyVersion?.() ?? 0;
    if (routed) {
      let text: string;
      try {
        text = await res.text();
      } catch (e) {
        if (signal?.aborted) throw new EngineAbortedError(this.name, req.request_id);
        throw new EngineError(this.name, `response broke: ${(e as Error).message}`, { cause: e });
      }
      const choice = firstChoice(parseJson(this.name, text));
      if (!choice) throw new EngineError(this.name, "response has no choices");
      const { ids, logprobs } = sampled(choice);
      const finish = finishReason(choice["finish_reason"]);
      if (!finish) throw new EngineError(this.name, `response of ${req.request_id} has no finish_reason`);
      yield { token_ids: ids, logprobs, policy_version: version, finish_reason: finish, ...splitRouting(choice["routed_experts"], req.prompt_ids.length, ids.length) };
      return;
    }
    // The last chunk waits for the stream's end (right after it): a consumer that stops at it
    // then leaves a fully read response, whose connection is reused rather than destroyed.
    let last: GenerateChunk | null = null;
    for await (const data of sseData(this.name, res, signal, req.request_id)) {
      if (last) continue;
      const choice = firstChoice(parseJson(this.name, data));
      if (!choice) continue;
      const { ids, logprobs } = sampled(choice);
      const finish = finishReason(choice["finish_reason"]);
      const chunk: GenerateChunk = { token_ids: ids, logprobs, routing: null, policy_version: version, finish_reason: finish };
      if (finish) last = chunk;
      else if (ids.length > 0) yield chunk;
    }
    if (last) {
      yield last;
      return;
    }
    throw new EngineError(this.name, `stream of ${req.request_id} ended without a finish_reason`);
  }

  /** The config's window, else the served model's `max_model_len` (null when the server names none). */
  async contextWindow(): Promise<number | null> {
    if (this.config.contextWindow !== undefined) return this.config.contextWindow;
    const headers: Record<string, string> = this.config.apiKey ? { authorization: `Bearer ${this.config.apiKey}` } : {};
    let res: Response;
    try {
      res = await fetch(`${this.config.baseUrl}/v1/models`, { headers });
    } catch (e) {
      throw new EngineError(this.name, `GET ${this.config.baseUrl}/v1/models failed: ${(e as Error).message}`, { cause: e });
    }
    if (!res.ok) throw new EngineError(this.name, `GET ${this.config.baseUrl}/v1/models answered ${res.status}`);
    const cards = (parseJson(this.name, await res.text())["data"] ?? []) as Array<Record<string, unknown>>;
    const card = cards.find((c) => c["id"] === this.config.model) ?? (cards.length === 1 ? cards[0] : undefined);
    const len = card?.["max_model_len"];
    return typeof len === "number" && Number.isInteger(len) && len > 0 ? len : null;
  }

  async close(): Promise<void> {}
}

function firstChoice(body: Record<string, unknown>): Choice | undefined {
  return ((body["choices"] as unknown[]) ?? [])[0] as Choice | undefined;
}

function sampled(choice: Choice): { ids: number[]; logprobs: number[] } {
  const lp = (choice["logprobs"] ?? null) as { tokens?: string[]; token_logprobs?: number[] } | null;
  const ids = (lp?.tokens ?? []).map((t) => tokenId(t));
  const logprobs = lp?.token_logprobs ?? [];
  if (ids.length !== logprobs.length) throw new EngineError("vllm", `${ids.length} tokens but ${logprobs.length} logprobs`);
  return { ids, logprobs };
}

/**
 * `routed_experts` of a call with `prompt` prompt ids and `completion` sampled
 * ids: (prompt + completion - 1) rows, as base64 (raw little-endian int32, or
 * a .npy image, which names its own dtype and shape) or as nested arrays.
 */
export function splitRouting(raw: unknown, prompt: number, completion: number): Pick<GenerateChunk, "routing" | "routing_recorded" | "prompt_routing"> {
  if (raw === undefined || raw === null)
    throw new EngineError("vllm", "routing was requested but the response has no routed_experts (start vLLM with --enable-return-routed-experts)");
  const rows = prompt + completion - 1;
  if (rows <= 0) throw new EngineError("vllm", "routed_experts for an empty sequence");
  let values: ArrayLike<number>;
  let width: number;
  if (typeof raw === "string") {
    ({ values, width } = decodeBase64Routing(raw, rows));
  } else {
    const flat = flattenRouting("vllm", raw, rows);
    values = flat.routing;
    width = flat.width;
  }
  let max = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (!Number.isInteger(v) || v < 0) throw new EngineError("vllm", `routed_experts holds ${v}, not an expert index`);
    if (v > max) max = v;
  }
  const make = (n: number) => (max < 256 ? new Uint8Array(n) : new Uint16Array(n));
  const promptRouting = make(prompt * width);
  for (let i = 0; i < promptRouting.length; i++) promptRouting[i] = values[i]!;
  const routing = make(completion * width);
  for (let i = 0, o = prompt * width; o < values.length; i++, o++) routing[i] = values[o]!;
  const recorded = new Uint8Array(completion).fill(1);
  if (completion > 0) recorded[completion - 1] = 0;
  return { routing, routing_recorded: recorded, prompt_routing: promptRouting };
}

const NPY_MAGIC = "\x93NUMPY";
const NPY_DTYPES: Record<string, { bytes: number; read: (b: Buffer, o: number) => number }> = {
  i1: { bytes: 1, read: (b, o) => b.readInt8(o) },
  u1: { bytes: 1, read: (b, o) => b.readUInt8(o) },
  i2: { bytes: 2, read: (b, o) => b.readInt16LE(o) },
  u2: { bytes: 2, read: (b, o) => b.readUInt16LE(o) },
  i4: { bytes: 4, read: (b, o) => b.readInt32LE(o) },
  u4: { bytes: 4, read: (b, o) => b.readUInt32LE(o) },
  i8: { bytes: 8, read: (b, o) => Number(b.readBigInt64LE(o)) },
};

function decodeBase64Routing(b64: string, rows: number): { values: Int32Array | number[]; width: number } {
  const buf = Buffer.from(b64, "base64");
  if (buf.subarray(0, 6).toString("latin1") === NPY_MAGIC) {
    const major = buf[6]!;
    const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
    const start = major === 1 ? 10 : 12;
    const header = buf.subarray(start, start + headerLen).toString("latin1");
    const descr = /'descr':\s*'([<>|=])([a-z]\d)'/.exec(header);
    const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
    const dtype = descr ? NPY_DTYPES[descr[2]!] : undefined;
    if (!descr || !dtype || descr[1] === ">" || /'fortran_order':\s*True/.test(header) || !shape)
      throw new EngineError("vllm", `routed_experts: unsupported .npy header ${header.trim()}`);
    const dims = shape[1]!.split(",").map((s) => s.trim()).filter(Boolean).map(Number);
    if (dims[0] !== rows) throw new EngineError("vllm", `routed_experts has ${dims[0]} rows, expected ${rows} (prompt + completion - 1)`);
    const n = dims.reduce((a, b) => a * b, 1);
    const data = start + headerLen;
    if (buf.length - data !== n * dtype.bytes) throw new EngineError("vllm", "routed_experts: .npy data does not match its shape");
    const values: number[] = new Array(n);
    for (let i = 0; i < n; i++) values[i] = dtype.read(buf, data + i * dtype.bytes);
    return { values, width: n / rows };
  }
  if (buf.length % 4 !== 0 || (buf.length / 4) % rows !== 0)
    throw new EngineError("vllm", `routed_experts: ${buf.length} bytes are not (${rows} rows x layers x top_k) int32 values`);
  const values = new Int32Array(buf.length / 4);
  for (let i = 0; i < values.length; i++) values[i] = buf.readInt32LE(i * 4);
  return { values, width: values.length / rows };
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
