/**
 * `lego check --engine-address` / `--engine-url`: routing replay needs the engine to return
 * the experts it chose for every token of a MoE model. One short request is sent through the
 * same engine client the proxy uses, and the routing that comes back is compared with the
 * shape config.json gives (MoE layers × experts per token), when a model directory is given.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { VllmEngine, ZmqEngine, type EngineClient, type GenerateChunk } from "../engine/index.ts";
import type { CheckResult } from "./preflight.ts";

export type RoutingEngine = { kind: "zmq"; address: string } | { kind: "vllm"; baseUrl: string; model: string };

const NAME = "routing";

/** Routing row width (MoE layers × top-k) from config.json; 0 for a dense model, null when unreadable. */
function routingWidth(modelDir: string): number | null {
  try {
    const hf = JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8")) as Record<string, unknown>;
    const experts = Number(hf["num_experts"] ?? hf["num_local_experts"] ?? 0);
    if (!experts) return 0;
    const layers = Number(hf["num_hidden_layers"]);
    const step = Number(hf["decoder_sparse_step"] ?? 1);
    const dense = new Set((hf["mlp_only_layers"] as number[] | undefined) ?? []);
    let moe = 0;
    for (let i = 0; i < layers; i++) if (!dense.has(i) && (i + 1) % step === 0) moe++;
    return moe * Number(hf["num_experts_per_tok"]);
  } catch {
    return null;
  }
}

export async function checkRouting(engine: RoutingEngine, modelDir: string | null, timeoutMs = 60_000): Promise<CheckResult> {
  const client: EngineClient = engine.kind === "zmq"
    ? new ZmqEngine({ address: engine.address, clientId: "lego-check", helloTimeoutMs: timeoutMs })
    : new VllmEngine({ baseUrl: engine.baseUrl, model: engine.model, routing: true });
  const where = engine.kind === "zmq" ? engine.address : engine.baseUrl;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const chunks: GenerateChunk[] = [];
  try {
    const req = { request_id: "lego-check-routing", prompt_ids: [0, 1, 2], sampling: { temperature: 0, top_p: 1, max_tokens: 2, stop_token_ids: [], seed: 0 } };
    for await (const c of client.generate(req, abort.signal)) chunks.push(c);
  } catch (e) {
    return { name: NAME, ok: false, detail: `${engine.kind} engine at ${where} did not serve a probe request: ${(e as Error).message}`,
      fix: engine.kind === "vllm" ? "start vLLM with --enable-return-routed-experts (and check --engine-url / --engine-model)"
        : "start the engine (`python -m lego_rl.engine --model DIR --bind ADDR`) and pass the address it prints as --engine-address" };
  } finally {
    clearTimeout(timer);
    await client.close();
  }
  const values = chunks.reduce((n, c) => n + (c.routing?.length ?? 0) + (c.prompt_routing?.length ?? 0), 0);
  const rows = chunks.reduce((n, c) => n + c.token_ids.length, 0) + 3;
  const width = modelDir === null ? null : routingWidth(modelDir);
  if (values === 0) {
    if (width === 0) return { name: NAME, ok: true, detail: "dense model: no routing to replay" };
    return { name: NAME, ok: false, detail: `${engine.kind} engine at ${where} returned no routing${width ? ` (the model routes ${width} experts per token)` : ""}; routing replay needs it`,
      fix: engine.kind === "vllm" ? "start vLLM with --enable-return-routed-experts" : "serve a MoE checkpoint, or turn routing replay off for a dense model" };
  }
  // A multiple, not rows × width: engines differ on whether the last sampled token gets a (padding) row.
  if (width !== null && width > 0 && values % width !== 0)
    return { name: NAME, ok: false, detail: `engine returned ${values} routing values for ${rows} tokens, not a multiple of the ${width} per token config.json gives`,
      fix: "the engine serves another model than --model-dir: point both at the same checkpoint" };
  return { name: NAME, ok: true, detail: `${engine.kind} engine returns routing (${values} values for ${rows} tokens)` };
}
