/**
 * What `--engine E` means for a harness: a scripted engine's name (built per
 * task, no model needed beyond the Qwen3 tokenizer) or a real engine's
 * address (one shared connection; `--model-dir` is the model it serves).
 */
import { loadProxyModel } from "../proxy/index.ts";
import type { AgentLauncher, HarnessOptions } from "../tasks/index.ts";
import { ENGINES, HarnessEngineError, scriptedHarnessEngine, type ToolNames } from "./engines.ts";
import { proxiedLauncher } from "./launcher.ts";
import { DEFAULT_POLICY_SAMPLING, isEngineAddress, PolicyEngine, PolicyEngineError } from "./policy-engine.ts";
import type { Harness } from "./types.ts";

/** How long `lego eval` / `lego rollout` wait for the engine's EngineInfo, unless told (`--engine-wait-ms`). */
const HELLO_TIMEOUT_MS = 60_000;

export async function harnessLauncherFor(harness: Harness, tools: ToolNames, opts: HarnessOptions): Promise<AgentLauncher> {
  const { engine } = opts;
  if (isEngineAddress(engine)) {
    if (!opts.modelDir) throw new PolicyEngineError(`--engine ${engine} needs --model-dir: the directory the engine serves (its tokenizer and chat template)`);
    let model;
    try {
      model = loadProxyModel(opts.modelDir);
    } catch (e) {
      throw new PolicyEngineError(`--model-dir ${opts.modelDir}: ${(e as Error).message}`, { cause: e });
    }
    const sampling = opts.sampling ?? DEFAULT_POLICY_SAMPLING;
    const policy = await PolicyEngine.connect({ address: engine, sampling, helloTimeoutMs: opts.engineWaitMs ?? HELLO_TIMEOUT_MS }, model);
    return proxiedLauncher({ harness, engineName: "zmq", policy, model, maxTokens: sampling.maxTokensPerTurn, ...(opts.limits ? { limits: opts.limits } : {}) });
  }
  if (!(ENGINES as readonly string[]).includes(engine))
    throw new HarnessEngineError(`--engine ${JSON.stringify(engine)}: unknown engine for harness ${harness.name} (known: ${ENGINES.join(", ")}, or an engine address tcp://HOST:PORT or unix:///PATH)`);
  return proxiedLauncher({ harness, engineName: engine, engine: (model, def) => scriptedHarnessEngine(engine, model, def, tools), ...(opts.limits ? { limits: opts.limits } : {}) });
}
