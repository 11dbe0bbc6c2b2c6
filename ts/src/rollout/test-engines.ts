/**
 * Test support: a real harness behind the real proxy, with a scripted engine
 * chosen per rollout (gold for some, answer-at-once for others, so a group's
 * rewards differ by construction) and a record of what each engine returned,
 * so a test can compare what reached the receiver with it token for token. A
 * hook runs before a chosen engine call answers: the moment the harness has
 * sent that turn and waits for it (fault tests act on the harness there).
 *
 * `lego rollout --engine E` gives every rollout of a run the same engine;
 * picking one per rollout is this launcher's job, through the same
 * AgentLauncher seam the worker uses, so no test-only engine lives in the CLI.
 */
import type { EngineClient, GenerateChunk, GenerateRequest } from "../engine/index.ts";
import { HARNESS_TOOLS, proxiedLauncher, QWEN3_DIR, scriptedHarnessEngine } from "../harness/index.ts";
import { loadProxyModel } from "../proxy/index.ts";
import type { AgentLauncher } from "../tasks/index.ts";

/** One engine call as the engine saw and answered it. */
export interface EngineCall {
  prompt: number[];
  completion: number[];
  logprobs: number[];
}

/** Passes every call through to `inner`, recording it; `before(index)` runs before call `index` answers. */
class RecordingEngine implements EngineClient {
  readonly name: string;
  readonly calls: EngineCall[] = [];
  constructor(private readonly inner: EngineClient, private readonly before?: (index: number) => Promise<void>) {
    this.name = inner.name;
  }

  contextWindow(): Promise<number | null> {
    return this.inner.contextWindow?.() ?? Promise.resolve(null);
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const call: EngineCall = { prompt: Array.from(req.prompt_ids), completion: [], logprobs: [] };
    this.calls.push(call);
    await this.before?.(this.calls.length - 1);
    for await (const chunk of this.inner.generate(req, signal)) {
      call.completion.push(...chunk.token_ids);
      call.logprobs.push(...chunk.logprobs);
      yield chunk;
    }
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

export interface ScriptedLauncherConfig {
  /** A key of HARNESS_TOOLS: the real harness and the tool names its scripts call. */
  harness: string;
  /** The trajectory's `harness` field. */
  name: string;
  /** The scripted engine (scripted-gold, answer-at-once, …) of one rollout attempt, by its id `TRAJECTORY.ATTEMPT`. */
  engineFor: (rolloutId: string) => string;
  limits: { maxTurns: number; timeoutSec: number };
  /** Runs before call `index` of attempt `rolloutId` answers (the harness is waiting on that turn). */
  beforeCall?: (rolloutId: string, index: number) => Promise<void>;
}

/** The launcher, and every attempt's engine calls by rollout id. */
export function scriptedLauncher(config: ScriptedLauncherConfig): AgentLauncher & { readonly calls: Map<string, EngineCall[]> } {
  const entry = HARNESS_TOOLS[config.harness];
  if (!entry) throw new Error(`no harness ${config.harness} in HARNESS_TOOLS`);
  const model = loadProxyModel(QWEN3_DIR);
  const calls = new Map<string, EngineCall[]>();
  return {
    name: config.name,
    runner: { runtimes: entry.harness.runtimes() },
    calls,
    start(task, def, rolloutId) {
      const before = config.beforeCall;
      const engine = new RecordingEngine(
        scriptedHarnessEngine(config.engineFor(rolloutId), model, def, entry.tools),
        before && ((index) => before(rolloutId, index)),
      );
      calls.set(rolloutId, engine.calls);
      // One proxied launcher per attempt: its engine factory is per task, and this engine is per rollout.
      return proxiedLauncher({ harness: entry.harness, engineName: config.name, model, limits: config.limits, engine: () => engine }).start(task, def, rolloutId);
    },
  };
}
